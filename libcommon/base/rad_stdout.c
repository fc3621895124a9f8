#include "libcommon/base/rad_stdout.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* stdout is a stream over fd 1 whose writes keep the errno of the first that failed: stdio drops
 * a buffer it could not write and keeps only an error flag, so a failure in the middle of a long
 * print (a --help over the buffer's size) would otherwise read as EIO at the final flush. */
static int first_err;

static ssize_t fd1_write(void *cookie, const char *p, size_t n) {
    (void)cookie;
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(1, p + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (!first_err) first_err = w < 0 ? errno : EIO;
            return done ? (ssize_t)done : -1;
        }
        done += (size_t)w;
    }
    return (ssize_t)n;
}

void rad_stdout_init(void) {
    signal(SIGPIPE, SIG_IGN);
    FILE *f = fopencookie(NULL, "w", (cookie_io_functions_t){.write = fd1_write});
    if (!f) return; /* keep the plain stream: errors then read as EIO at worst */
    if (setvbuf(f, NULL, isatty(1) ? _IOLBF : _IOFBF, 1 << 16) != 0) {
        fclose(f);
        return;
    }
    fflush(stdout);
    stdout = f;
}

/* errno of the first failed write; a failed flush's; an error flag with neither is EIO */
static int flush_err(void) {
    errno = 0;
    int rc = fflush(stdout);
    if (first_err) return first_err;
    if (rc != 0) return errno ? errno : EIO;
    return ferror(stdout) ? EIO : 0;
}

int rad_stdout_flush(RadErr *e) {
    int err = flush_err();
    return err ? rad_err_set(e, RAD_E_IO, "stdout: %s", strerror(err)) : RAD_OK;
}

int rad_stdout_close(const char *tool, int rc) {
    int err = flush_err();
    errno = 0;
    if (fclose(stdout) != 0 && !err) err = first_err ? first_err : errno ? errno : EIO;
    if (!err) return rc;
    if (rc) return rc;
    fprintf(stderr, "%s: stdout: %s\n", tool, strerror(err));
    return 1;
}
