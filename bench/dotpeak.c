/* dotpeak: the machine's multiply-add rate with T threads for the three dot products libref's
 * GEMMs are built on: f32 FMA (exact), bf16 pairs (vdpbf16ps, bf16dot) and u8·s8 quads
 * (vpdpbusd, q8tile), each as 12 independent 512-bit accumulators (more than the latency times
 * the issue width) so the units, not a dependency chain, are the limit. Prints one line per
 * instruction: GFLOP/s, counting a multiply-add as 2 (the convention of GEMM figures). Needs
 * AVX-512 F/BF16/VNNI; cc -O2 -march=native -pthread bench/dotpeak.c */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { ACC = 12, ITERS = 20000000 };
static int nthreads, which;
static volatile float sink;

#define LOOP(ACCT, INIT, OP, SUM)                                                  \
    ACCT a[ACC];                                                                    \
    _Pragma("GCC unroll 12") for (int j = 0; j < ACC; j++) a[j] = INIT;             \
    for (long i = 0; i < ITERS; i++) {                                             \
        _Pragma("GCC unroll 12") for (int j = 0; j < ACC; j++) a[j] = OP;           \
    }                                                                               \
    float r = 0;                                                                    \
    for (int j = 0; j < ACC; j++) r += SUM;                                         \
    sink += r;

static void fma_loop(void) {
    const __m512 x = _mm512_set1_ps(1.0000001f), y = _mm512_set1_ps(0.9999999f);
    LOOP(__m512, _mm512_set1_ps((float)j * 1e-3f), _mm512_fmadd_ps(a[j], x, y), _mm512_reduce_add_ps(a[j]))
}
static void bf16_loop(void) {
    const __m512 x = _mm512_set1_ps(1.0000001f), y = _mm512_set1_ps(0.9999999f);
    const __m512bh bx = _mm512_cvtne2ps_pbh(x, x), by = _mm512_cvtne2ps_pbh(y, y);
    LOOP(__m512, _mm512_set1_ps((float)j * 1e-3f), _mm512_dpbf16_ps(a[j], bx, by), _mm512_reduce_add_ps(a[j]))
}
static void vnni_loop(void) {
    const __m512i u = _mm512_set1_epi8(1), s = _mm512_set1_epi8(-1);
    LOOP(__m512i, _mm512_set1_epi32(j), _mm512_dpbusd_epi32(a[j], u, s), (float)_mm512_reduce_add_epi32(a[j]))
}

static void *worker(void *arg) {
    (void)arg;
    if (which == 0) fma_loop();
    else if (which == 1) bf16_loop();
    else vnni_loop();
    return NULL;
}

int main(int argc, char **argv) {
    nthreads = argc > 1 ? atoi(argv[1]) : 2;
    if (nthreads < 1 || nthreads > 256) return fprintf(stderr, "dotpeak: threads %d: not 1..256\n", nthreads), 2;
    static const char *name[] = {"f32 fma (vfmadd231ps)", "bf16 pairs (vdpbf16ps)", "u8*s8 quads (vpdpbusd)"};
    static const double macs[] = {16, 32, 64}; /* multiply-adds a 512-bit instruction */
    for (which = 0; which < 3; which++) {
        double best = 0;
        for (int pass = 0; pass < 3; pass++) {
            pthread_t th[256];
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            for (int t = 0; t < nthreads; t++) pthread_create(&th[t], NULL, worker, NULL);
            for (int t = 0; t < nthreads; t++) pthread_join(th[t], NULL);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            const double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
            const double g = 2.0 * macs[which] * ACC * (double)ITERS * nthreads / s * 1e-9;
            if (g > best) best = g;
        }
        printf("%-24s %8.1f GFLOP/s (%d threads)\n", name[which], best, nthreads);
    }
    return 0;
}
