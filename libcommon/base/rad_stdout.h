/* rad_stdout.h — checked writes to stdout for every tool: a full disk or a closed pipe is an
 * error with exit status 1 ("TOOL: stdout: No space left on device"), never a silent exit 0. */
#ifndef RAD_STDOUT_H
#define RAD_STDOUT_H

#include "libcommon/base/rad_err.h"

/* SIGPIPE ignored, so a write to a closed pipe fails with EPIPE (an error) instead of killing. */
void rad_stdout_init(void);
/* Flushes stdout; RAD_E_IO "stdout: REASON" when this or an earlier write failed. For the
 * streaming paths, which stop at the first failed write. */
int rad_stdout_flush(RadErr *e);
/* At exit: flushes and closes stdout, returning the exit status. A nonzero rc (its error
 * already printed) is kept; else a failed write prints "TOOL: stdout: REASON" and gives 1. */
int rad_stdout_close(const char *tool, int rc);

#endif
