/* test_util.h — helpers several Criterion suites share: reading a fixture whole (or zstd'd), float bits, a
 * test's deadline. */
#ifndef RAD_TEST_UTIL_H
#define RAD_TEST_UTIL_H

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

/* A deadline for the running test: past `seconds` SIGALRM kills its worker, which Criterion
 * reports as a crash, so a hang fails the test instead of the run. Criterion's own .timeout
 * allocates in the runner in a way LSan now and then reports as a leak, failing the sanitizer
 * build's run (the suites use this instead). */
static inline void test_deadline(unsigned seconds) { alarm(seconds); }

/* A fixture whole: *n bytes, and a NUL after them (text fixtures read as C strings). */
static inline void *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    cr_assert(f, "%s: cannot open (run from the repository root)", path);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc(sz > 0 ? (size_t)sz + 1 : 1);
    cr_assert(p);
    cr_assert_eq(fread(p, 1, (size_t)sz, f), (size_t)sz);
    fclose(f);
    p[sz > 0 ? sz : 0] = 0;
    *n = (size_t)sz;
    return p;
}

/* A zstd-compressed fixture, decompressed: *n bytes and a NUL. */
static inline char *unzstd(const char *path, size_t *n) {
    size_t zn;
    char *z = slurp(path, &zn);
    size_t cap = zn * 8 + 1024, len = 0;
    char *out = malloc(cap);
    ZSTD_DStream *ds = ZSTD_createDStream();
    ZSTD_inBuffer in = {z, zn, 0};
    while (in.pos < in.size) {
        if (cap - len < ZSTD_DStreamOutSize()) out = realloc(out, cap *= 2);
        ZSTD_outBuffer o = {out, cap - 1, len};
        size_t r = ZSTD_decompressStream(ds, &o, &in);
        cr_assert(!ZSTD_isError(r), "%s: %s", path, ZSTD_getErrorName(r));
        len = o.pos;
    }
    ZSTD_freeDStream(ds);
    free(z);
    out[len] = 0;
    *n = len;
    return out;
}

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

#endif
