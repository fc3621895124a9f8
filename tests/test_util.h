/* test_util.h — helpers several Criterion suites share: reading a fixture whole, float bits, a
 * test's deadline. */
#ifndef RAD_TEST_UTIL_H
#define RAD_TEST_UTIL_H

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A deadline for the running test: past `seconds` SIGALRM kills its worker, which Criterion
 * reports as a crash, so a hang fails the test instead of the run. Criterion's own .timeout
 * allocates in the runner in a way LSan now and then reports as a leak, failing the sanitizer
 * build's run (the suites use this instead). */
static inline void test_deadline(unsigned seconds) { alarm(seconds); }

static inline void *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    cr_assert(f, "%s: cannot open (run from the repository root)", path);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(sz > 0 ? (size_t)sz : 1);
    cr_assert(p);
    cr_assert_eq(fread(p, 1, (size_t)sz, f), (size_t)sz);
    fclose(f);
    *n = (size_t)sz;
    return p;
}

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

#endif
