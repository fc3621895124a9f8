#include "libcommon/base/rad_buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for n more bytes and the NUL. */
static int grow(RadBuf *b, size_t n, RadErr *e) {
    if (n > SIZE_MAX / 2 - b->len) return rad_err_set(e, RAD_E_NOMEM, "out of memory (a buffer past %zu bytes)", b->len);
    if (b->len + n + 1 <= b->cap) return RAD_OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return rad_err_set(e, RAD_E_NOMEM, "out of memory (a buffer of %zu bytes)", cap);
    b->p = p;
    b->cap = cap;
    return RAD_OK;
}

int rad_buf_put(RadBuf *b, const void *s, size_t n, RadErr *e) {
    int rc = grow(b, n, e);
    if (rc) return rc;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return RAD_OK;
}

int rad_buf_puts(RadBuf *b, const char *s, RadErr *e) { return rad_buf_put(b, s, strlen(s), e); }

int rad_buf_vprintf(RadBuf *b, RadErr *e, const char *fmt, va_list ap) {
    va_list aq;
    va_copy(aq, ap);
    int n = vsnprintf(NULL, 0, fmt, aq);
    va_end(aq);
    if (n < 0) return rad_err_set(e, RAD_E_ARG, "a format that does not print");
    int rc = grow(b, (size_t)n, e);
    if (rc) return rc;
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return RAD_OK;
}

int rad_buf_printf(RadBuf *b, RadErr *e, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = rad_buf_vprintf(b, e, fmt, ap);
    va_end(ap);
    return rc;
}

void rad_buf_free(RadBuf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}
