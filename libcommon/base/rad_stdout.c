#include "libcommon/base/rad_stdout.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

void rad_stdout_init(void) { signal(SIGPIPE, SIG_IGN); }

/* errno of a failed flush; an error flag with no failing flush (the data was dropped) is EIO */
static int flush_err(void) {
    errno = 0;
    if (fflush(stdout) != 0) return errno ? errno : EIO;
    return ferror(stdout) ? EIO : 0;
}

int rad_stdout_flush(RadErr *e) {
    int err = flush_err();
    return err ? rad_err_set(e, RAD_E_IO, "stdout: %s", strerror(err)) : RAD_OK;
}

int rad_stdout_close(const char *tool, int rc) {
    int err = flush_err();
    errno = 0;
    if (fclose(stdout) != 0 && !err) err = errno ? errno : EIO;
    if (!err) return rc;
    if (rc) return rc;
    fprintf(stderr, "%s: stdout: %s\n", tool, strerror(err));
    return 1;
}
