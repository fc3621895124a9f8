/* verify.c — what a speculative verify row costs: one sequence's decode row carrying 0..D drafts
 * (M = 1..D+1 tokens, every one with logits), at a context of CTX tokens, against the plain decode
 * row (M = 1). Prints ms a row and its ratio to M = 1, the median of REPS rows each (the rows
 * alternate over M, so a slow minute falls on every M alike). Not a test.
 *
 *   make tools && cc -std=c11 -D_GNU_SOURCE -O2 -I. -o build/bench/verify bench/verify.c build/libcommon.a \
 *       $(pkg-config --libs libarchive libzstd jansson libxxhash libpcre2-8 libmicrohttpd) -lm -lpthread -ldl
 *   build/bench/verify MODEL.rad [D=8] [THREADS=2] [REPS=15] [CTX=256]     (--fast's kernels) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "libcommon/runtime/rad_engine.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 2) return fprintf(stderr, "usage: verify MODEL.rad [D] [THREADS] [REPS] [CTX]\n"), 2;
    const uint32_t D = argc > 2 ? (uint32_t)atoi(argv[2]) : 8, T = argc > 3 ? (uint32_t)atoi(argv[3]) : 2;
    const int R = argc > 4 ? atoi(argv[4]) : 15;
    const uint32_t C = argc > 5 ? (uint32_t)atoi(argv[5]) : 256;
    if (D < 1 || D > RAD_SPEC_DEPTH_MAX || R < 1 || C < 2) return fprintf(stderr, "verify: bad D, REPS or CTX\n"), 2;
    static const char *dirs[1] = {"build/plugins"};
    RadEngineOpts o = {.model = argv[1], .plugin_dirs = dirs, .n_plugin_dirs = 1, .n_threads = T, .max_tok = 512,
                       .max_seqs = 1, .max_ctx = C + D + 8, .max_tolerance = 2e-2, .speculate = 1, .spec_depth = D};
    RadEngine *en;
    RadErr e = {0};
    if (rad_engine_open(&en, &o, &e)) return fprintf(stderr, "verify: %s\n", e.msg), 1;
    int32_t *tok = malloc((C + D + 1) * sizeof *tok);
    for (uint32_t i = 0; i < C + D + 1; i++) tok[i] = (int32_t)(100 + (i * 7919u) % 20000);
    if (rad_engine_forward(en, 0, tok, C, 0, 0, &e)) return fprintf(stderr, "verify: %s\n", e.msg), 1;
    double *ms = malloc((size_t)(D + 1) * R * sizeof *ms);
    for (int r = 0; r < R; r++)
        for (uint32_t m = 1; m <= D + 1; m++) {
            RadEngineSeq q = {.seq_id = 0, .tokens = tok + C, .n = m, .pos = C, .want_logits = 1, .n_draft = m - 1};
            int32_t row;
            double t0 = now();
            if (rad_engine_step_seqs(en, &q, 1, &row, &e)) return fprintf(stderr, "verify: %s\n", e.msg), 1;
            ms[(m - 1) * R + r] = 1e3 * (now() - t0);
            rad_engine_kv_truncate(en, 0, C);
        }
    printf("verify rows on %s, context %u, %u threads, median of %d (--fast)\n%-4s %10s %8s\n", argv[1], C, T, R, "M", "ms/row", "x M=1");
    double base = 0;
    for (uint32_t m = 1; m <= D + 1; m++) {
        qsort(ms + (m - 1) * R, (size_t)R, sizeof *ms, cmp);
        double med = ms[(m - 1) * R + R / 2];
        if (m == 1) base = med;
        printf("%-4u %10.2f %8.2f\n", m, med, med / base);
    }
    rad_engine_close(en);
    return 0;
}
