/* rad_stop.h — generated text as it streams: UTF-8 characters split across tokens are held
 * back until complete, stop strings are matched across token boundaries and never emitted, and
 * what is emitted is valid UTF-8 (ill-formed bytes become U+FFFD, as HF's decode does). */
#ifndef RAD_STOPTEXT_H
#define RAD_STOPTEXT_H

#include <stddef.h>
#include <stdint.h>

#include "libcommon/base/rad_err.h"

typedef struct RadStopText {
    char **stop;             /* [n_stop] copies, non-empty */
    size_t *stop_len;        /* [n_stop] */
    uint32_t n_stop;
    size_t max_stop;         /* the longest stop string */
    char *buf;               /* [len] held back: text not yet emitted */
    size_t len, cap;
    char *out;               /* the last emitted text (lossy), valid until the next call */
    size_t out_cap;
    int stopped;
} RadStopText;

/* Empty strings in stop are ignored. */
int rad_stop_text_init(RadStopText *t, const char *const *stop, uint32_t n_stop, RadErr *e);
void rad_stop_text_free(RadStopText *t);
/* Adds a token's bytes. out and n_out: the text that may be shown now. Returns 1 when a stop string
 * matched: *out is the text before it, and the stream is over (later pushes emit nothing). */
int rad_stop_text_push(RadStopText *t, const char *piece, size_t n, const char **out, size_t *n_out);
/* The end of the stream without a stop: everything held back (an incomplete character as
 * U+FFFD). Returns its length. */
size_t rad_stop_text_flush(RadStopText *t, const char **out);

#endif
