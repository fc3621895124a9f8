/* rad_buf.h — the one growable byte buffer: a header being encoded, text being built (a chat
 * render, detokenised pieces, a metadata key, SSE bytes, /metrics). It is NUL-terminated after
 * every put, so text users read p as a C string; binary users ignore the NUL. */
#ifndef RAD_BUF_H
#define RAD_BUF_H

#include <stdarg.h>
#include <stddef.h>

#include "libcommon/base/rad_err.h"

typedef struct RadBuf {
    char *p;                       /* [len] bytes and a NUL; NULL until the first put */
    size_t len;                    /* bytes held, not counting the NUL */
    size_t cap;                    /* bytes allocated (> len once p is set) */
} RadBuf;

/* Appends n bytes (n may be 0: the buffer then holds at least ""). RAD_E_NOMEM only. */
int rad_buf_put(RadBuf *b, const void *s, size_t n, RadErr *e);
int rad_buf_puts(RadBuf *b, const char *s, RadErr *e);
__attribute__((format(printf, 3, 4))) int rad_buf_printf(RadBuf *b, RadErr *e, const char *fmt, ...);
__attribute__((format(printf, 3, 0))) int rad_buf_vprintf(RadBuf *b, RadErr *e, const char *fmt, va_list ap);
void rad_buf_free(RadBuf *b);

#endif
