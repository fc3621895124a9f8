/* rad_err.h — one-line error reporting. Every failure path fills a RadErr with a message that
 * names the file, tensor, flag or field and what is wrong, and returns its status. */
#ifndef RAD_ERR_H
#define RAD_ERR_H

#include "abi/rad_types.h"

/* libcommon's own statuses beyond the ABI's RadStatus: answers a caller must tell apart from a
 * request that can never be served (RAD_E_LIMIT), so they are codes, not message text. */
enum {
    RAD_E_BUSY = -64,     /* full now, try again (the scheduler's queue): HTTP 429 */
    RAD_E_DRAINING = -65, /* shutting down, admits nothing more: HTTP 503 */
};

typedef struct RadErr {
    int code;       /* a RadStatus; RAD_OK when nothing failed */
    char msg[512];  /* one line, no trailing newline: "file.gguf: tensor 'x': offset past end" */
} RadErr;

/* Sets e (if non-NULL) and returns code. The first error wins: a later call does not
 * overwrite a message already set, so the innermost, most precise cause survives. */
int rad_err_set(RadErr *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void rad_err_clear(RadErr *e);
const char *rad_status_name(int code); /* "format", "io", ... */

#endif
