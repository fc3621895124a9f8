/* rad_stdout: a write that fails in the middle of one long print is reported with its own
 * reason at close ("No space left on device", not the EIO of an error flag whose write was
 * dropped: a --help past the stdio buffer once read as "Input/output error"). Run in a child
 * whose stdout is /dev/full, its stderr a pipe read here. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "libcommon/base/rad_stdout.h"

static void in_child_to_dev_full(size_t bytes, char *err, size_t cap, int *status) {
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int fd = open("/dev/full", O_WRONLY);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(p[1], 2) < 0) _exit(99);
        close(p[0]);
        rad_stdout_init();
        char *big = malloc(bytes + 1);
        if (!big) _exit(98);
        memset(big, 'x', bytes);
        big[bytes] = 0;
        fputs(big, stdout); /* one print, past any buffer: stdio writes it straight and fails */
        _exit(rad_stdout_close("stdout_test", 0));
    }
    close(p[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < cap && (r = read(p[0], err + n, cap - 1 - n)) > 0) n += (size_t)r;
    err[n] = 0;
    close(p[0]);
    cr_assert_eq(waitpid(pid, status, 0), pid);
}

Test(stdout, a_failed_write_inside_a_long_print_keeps_its_reason) {
    const size_t sizes[] = {10, 5000, 300000};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char err[512];
        int st;
        in_child_to_dev_full(sizes[i], err, sizeof err, &st);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "%zu bytes: status %d: %s", sizes[i], st, err);
        cr_assert_str_eq(err, "stdout_test: stdout: No space left on device\n", "%zu bytes", sizes[i]);
    }
}
