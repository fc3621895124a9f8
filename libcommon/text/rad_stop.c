/* Streaming text with stop strings. See rad_stop.h. */
#include "libcommon/text/rad_stop.h"

#include <stdlib.h>
#include <string.h>

#include "libcommon/tok/rad_tok.h"

int rad_stop_text_init(RadStopText *t, const char *const *stop, uint32_t n_stop, RadErr *e) {
    memset(t, 0, sizeof *t);
    if (n_stop) {
        t->stop = calloc(n_stop, sizeof *t->stop);
        t->stop_len = calloc(n_stop, sizeof *t->stop_len);
        if (!t->stop || !t->stop_len) return rad_stop_text_free(t), rad_err_set(e, RAD_E_NOMEM, "out of memory");
    }
    for (uint32_t i = 0; i < n_stop; i++) {
        if (!stop[i] || !*stop[i]) continue;
        size_t n = strlen(stop[i]);
        if (!(t->stop[t->n_stop] = malloc(n + 1))) return rad_stop_text_free(t), rad_err_set(e, RAD_E_NOMEM, "out of memory");
        memcpy(t->stop[t->n_stop], stop[i], n + 1);
        t->stop_len[t->n_stop++] = n;
        if (n > t->max_stop) t->max_stop = n;
    }
    return RAD_OK;
}

void rad_stop_text_free(RadStopText *t) {
    for (uint32_t i = 0; t->stop && i < t->n_stop; i++) free(t->stop[i]);
    free(t->stop);
    free(t->stop_len);
    free(t->buf);
    free(t->out);
    memset(t, 0, sizeof *t);
}

/* Emits buf[0, n) (lossy) into t->out and drops it from buf. */
static size_t take(RadStopText *t, size_t n, const char **out) {
    char *lossy = NULL;
    size_t m = 0;
    RadErr e = {0};
    if (n && rad_utf8_lossy(t->buf, n, &lossy, &m, &e) == RAD_OK) {
        free(t->out);
        t->out = lossy;
    } else {
        free(lossy);
        m = 0;
    }
    if (t->len > n) memmove(t->buf, t->buf + n, t->len - n);
    t->len -= n;
    *out = m ? t->out : "";
    return m;
}

int rad_stop_text_push(RadStopText *t, const char *piece, size_t n, const char **out, size_t *n_out) {
    *out = "";
    *n_out = 0;
    if (t->stopped) return 1;
    if (!n) return 0; /* a special token: nothing to show, nothing to match */
    if (t->len + n > t->cap) {
        size_t cap = (t->len + n) * 2 + 64;
        char *g = realloc(t->buf, cap);
        if (!g) return 0; /* keep what is held; this piece is lost only under memory exhaustion */
        t->buf = g, t->cap = cap;
    }
    size_t old = t->len;
    if (n) memcpy(t->buf + t->len, piece, n);
    t->len += n;
    /* the earliest stop string that ends in the new bytes */
    size_t from = old >= t->max_stop ? old - t->max_stop + 1 : 0, best = (size_t)-1;
    for (uint32_t s = 0; s < t->n_stop; s++) {
        size_t L = t->stop_len[s];
        for (size_t p = from; p + L <= t->len && p < best; p++)
            if (memcmp(t->buf + p, t->stop[s], L) == 0) {
                best = p;
                break;
            }
    }
    if (best != (size_t)-1) {
        t->stopped = 1;
        *n_out = take(t, best, out);
        t->len = 0;
        return 1;
    }
    /* hold back the longest tail that could start a stop string, and an incomplete character */
    size_t hold = rad_utf8_tail(t->buf, t->len);
    for (uint32_t s = 0; s < t->n_stop; s++)
        for (size_t k = t->stop_len[s] - 1; k > hold; k--)
            if (k <= t->len && memcmp(t->buf + t->len - k, t->stop[s], k) == 0) {
                hold = k;
                break;
            }
    *n_out = take(t, t->len - hold, out);
    return 0;
}

size_t rad_stop_text_flush(RadStopText *t, const char **out) {
    *out = "";
    if (t->stopped || !t->len) return 0;
    return take(t, t->len, out);
}
