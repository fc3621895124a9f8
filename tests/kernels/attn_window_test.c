/* attn_window_test.c — libref's attn_paged under a sliding window (docs/OPS.md, `window`).
 *
 * The row at position i sees the keys at positions j with j <= i and i - j < window
 * (transformers' sliding_window_overlay). Prefill, decode and mixed steps are run over a pool
 * whose blocks before the window are released (table entries -1, as the engine leaves them):
 * the kernel must not look at them, and must match a dense reference in double that applies the
 * mask, within libref's stated 1e-5. Window 0 over the same table is refused (RAD_E_ARG): only
 * a window lets a table entry be released. Run in the best ISA and the portable path, at 1 and
 * 4 threads (4 threads send decode rows down the split, fused path). */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abi/rad_arch.h"
#include "abi/rad_kernels.h"
#include "tests/test_util.h"

enum { HD = 16, HKV = 2, H = 4, B = 16, MAXCTX = 160, MB = MAXCTX / B, NSEQ = 2, NBLK = NSEQ * MB };

static void *g_dl;
static const RadKernelLib *g_lib;

static void load(void) {
    const char *b = getenv("RAD_BUILD");
    char path[512];
    snprintf(path, sizeof path, "%s/plugins/kern_ref.so", b && *b ? b : "build");
    g_dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    cr_assert(g_dl, "%s: cannot load: %s (make test-unit builds it)", path, dlerror());
    rad_kernels_fn kern;
    void *p = dlsym(g_dl, "rad_kernels");
    memcpy(&kern, &p, sizeof p);
    cr_assert(kern, "%s: rad_kernels not exported", path);
    g_lib = kern();
}

static void unload(void) {
    if (g_dl) dlclose(g_dl);
    g_dl = NULL;
}

TestSuite(attn_window, .init = load, .fini = unload);

static const RadKernel *attn(void) {
    for (uint32_t i = 0; i < g_lib->n_kernels; i++)
        if (strcmp(rad_kernel_at(g_lib, i)->op, "attn_paged") == 0) return rad_kernel_at(g_lib, i);
    cr_assert_fail("libref has no attn_paged");
    return NULL;
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    g_rng ^= g_rng >> 12, g_rng ^= g_rng << 25, g_rng ^= g_rng >> 27;
    return (float)((double)((g_rng * 0x2545f4914f6cdd1dull) >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

/* Two sequences: every position's k and v (what the cache holds once the step appended), the
 * step's rows (q_len[s] new tokens after ctx[s] - q_len[s] held ones) and the pool. */
typedef struct Setup {
    float kf[NSEQ][MAXCTX][HKV][HD], vf[NSEQ][MAXCTX][HKV][HD];
    float q[MAXCTX * NSEQ][H][HD], k[MAXCTX * NSEQ][HKV][HD], v[MAXCTX * NSEQ][HKV][HD], out[MAXCTX * NSEQ][H][HD];
    float pool[NBLK][2][HKV][B][HD];
    int32_t table[NSEQ * MB], cu[NSEQ + 1], ql[NSEQ], cl[NSEQ], pos[MAXCTX * NSEQ], sid[NSEQ];
    RadKvState kv;
    RadBatch bt;
    int M;
} Setup;

/* Sequences with (ctx, q_len) each; blocks wholly before the first row's window are -1. */
static void setup(Setup *a, int n_seq, const int *ctx, const int *q, int window) {
    memset(a, 0, sizeof *a);
    int t = 0;
    a->cu[0] = 0;
    for (int s = 0; s < n_seq; s++) {
        for (int j = 0; j < ctx[s]; j++)
            for (int g = 0; g < HKV; g++)
                for (int d = 0; d < HD; d++) a->kf[s][j][g][d] = frand(), a->vf[s][j][g][d] = frand();
        const int p0 = ctx[s] - q[s], first = window && p0 + 1 > window ? (p0 + 1 - window) / B : 0;
        for (int b = 0; b < MB; b++) a->table[s * MB + b] = b < first ? -1 : (MB - 1 - b) * NSEQ + s; /* scattered ids */
        for (int j = 0; j < p0; j++) { /* held slots: in the pool already (those of released blocks nowhere) */
            const int b = a->table[s * MB + j / B];
            if (b < 0) continue;
            for (int g = 0; g < HKV; g++)
                memcpy(a->pool[b][0][g][j % B], a->kf[s][j][g], sizeof a->kf[s][j][g]),
                    memcpy(a->pool[b][1][g][j % B], a->vf[s][j][g], sizeof a->vf[s][j][g]);
        }
        for (int i = 0; i < q[s]; i++, t++) { /* the step's rows */
            const int j = p0 + i;
            memcpy(a->k[t], a->kf[s][j], sizeof a->k[t]);
            memcpy(a->v[t], a->vf[s][j], sizeof a->v[t]);
            for (int h = 0; h < H; h++)
                for (int d = 0; d < HD; d++) a->q[t][h][d] = 2.0f * frand();
            a->pos[t] = j;
        }
        a->cu[s + 1] = t, a->ql[s] = q[s], a->cl[s] = ctx[s], a->sid[s] = s;
    }
    a->M = t;
    a->kv = (RadKvState){{0}, a->table, MB, a->pool, RAD_F32, RAD_KVQ_NONE, B, HKV, HD, 0, sizeof a->pool[0], NBLK};
    int n_dec = 0;
    while (n_dec < n_seq && q[n_dec] == 1) n_dec++;
    a->bt = (RadBatch){.struct_size = sizeof a->bt, .phase = n_dec == n_seq ? RAD_PHASE_DECODE : n_dec ? RAD_PHASE_MIXED : RAD_PHASE_PREFILL,
                       .n_tok = (uint32_t)t, .n_seq = (uint32_t)n_seq, .n_seq_decode = (uint32_t)n_dec, .positions = a->pos,
                       .cu_seqlens = a->cu, .seq_ids = a->sid, .q_lens = a->ql, .ctx_lens = a->cl, .kv = &a->kv, .n_kv = 1};
}

static int run(Setup *a, int window, uint32_t threads) {
    RadParam p[] = {RAD_RANGE_ROLE("M", 1, 512, RAD_PROLE_SEQ_CHUNK), RAD_INT("n_head", H), RAD_INT("n_head_kv", HKV),
                    RAD_INT("head_dim", HD), RAD_INT("kv", 0), RAD_INT("layer", 0), RAD_FLOAT("scale", 0.25),
                    RAD_INT("prefill_fp8", 0), RAD_INT("window", window)};
    for (uint32_t i = 0; i < sizeof p / sizeof p[0]; i++)
        if (p[i].kind == RAD_PARAM_RANGE) p[i].lo = p[i].hi = a->M;
    const uint64_t qw = H * HD, kw = HKV * HD;
    RadKArg args[4] = {{a->q, RAD_F32, (uint64_t)a->M, qw, qw, {NULL}}, {a->k, RAD_F32, (uint64_t)a->M, kw, kw, {NULL}},
                       {a->v, RAD_F32, (uint64_t)a->M, kw, kw, {NULL}}, {a->out, RAD_F32, (uint64_t)a->M, qw, qw, {NULL}}};
    void *st = NULL;
    RadKernelLibConfig cfg = {sizeof cfg, threads, 0, 0, 1, NULL};
    cr_assert_eq(g_lib->init(&cfg, &st), RAD_OK);
    RadKernelArgs ka = {sizeof ka, p, sizeof p / sizeof p[0], a->M, args, 4, &a->bt, &a->kv, NULL, st, threads, 1, NULL, 0};
    int rc = attn()->run(&ka);
    g_lib->fini(st);
    return rc;
}

/* The masked softmax in double: max relative error of the step's rows against it. */
static double check(const Setup *a, int n_seq, int window) {
    double worst = 0;
    for (int s = 0; s < n_seq; s++)
        for (int t = a->cu[s]; t < a->cu[s + 1]; t++) {
            const int i = a->pos[t], lo = window && i + 1 > window ? i + 1 - window : 0;
            for (int h = 0; h < H; h++) {
                const int g = h / (H / HKV);
                double sc[MAXCTX], m = -INFINITY, l = 0, ref[HD] = {0}, mx = 0, err = 0;
                for (int j = lo; j <= i; j++) {
                    double dot = 0;
                    for (int d = 0; d < HD; d++) dot += (double)a->q[t][h][d] * a->kf[s][j][g][d];
                    sc[j] = dot * 0.25;
                    if (sc[j] > m) m = sc[j];
                }
                for (int j = lo; j <= i; j++) sc[j] = exp(sc[j] - m), l += sc[j];
                for (int d = 0; d < HD; d++) {
                    for (int j = lo; j <= i; j++) ref[d] += sc[j] * a->vf[s][j][g][d];
                    ref[d] /= l;
                    if (fabs(ref[d]) > mx) mx = fabs(ref[d]);
                }
                for (int d = 0; d < HD; d++)
                    if (fabs(a->out[t][h][d] - ref[d]) > err) err = fabs(a->out[t][h][d] - ref[d]);
                if (err / (mx + 1e-6) > worst) worst = err / (mx + 1e-6);
            }
        }
    return worst;
}

static void one(int n_seq, const int *ctx, const int *q, int window) {
    static const char *isa[2] = {NULL, "generic"};
    static const uint32_t threads[2] = {1, 4};
    Setup *a = malloc(sizeof *a);
    cr_assert(a);
    for (int ii = 0; ii < 2; ii++)
        for (int ti = 0; ti < 2; ti++) {
            if (isa[ii]) setenv("RAD_REF_ISA", isa[ii], 1);
            else unsetenv("RAD_REF_ISA");
            setup(a, n_seq, ctx, q, window);
            int rc = run(a, window, threads[ti]);
            unsetenv("RAD_REF_ISA");
            cr_assert_eq(rc, RAD_OK, "window %d, ctx %d, q %d (%s, %u threads): rc %d", window, ctx[0], q[0],
                         isa[ii] ? isa[ii] : "best", threads[ti], rc);
            double err = check(a, n_seq, window);
            cr_assert(err <= 1e-5, "window %d, ctx %d/%d, q %d/%d (%s, %u threads): error %g", window, ctx[0],
                      n_seq > 1 ? ctx[1] : 0, q[0], n_seq > 1 ? q[1] : 0, isa[ii] ? isa[ii] : "best", threads[ti], err);
        }
    free(a);
}

Test(attn_window, prefill_decode_and_mixed_see_only_the_window) {
    test_deadline(120);
    static const int windows[] = {1, 7, 16, 24, 40};
    for (size_t w = 0; w < sizeof windows / sizeof *windows; w++) {
        const int W = windows[w];
        one(1, (const int[]){20}, (const int[]){20}, W);               /* a prompt, shorter or longer than W */
        one(1, (const int[]){150}, (const int[]){150}, W);             /* one prefill well past it */
        one(1, (const int[]){150}, (const int[]){37}, W);              /* a later chunk: earlier blocks released */
        one(1, (const int[]){W}, (const int[]){1}, W);                 /* decode at the window's edge */
        one(1, (const int[]){W + 1}, (const int[]){1}, W);             /* the first key falls out */
        one(1, (const int[]){143}, (const int[]){1}, W);               /* far past it */
        one(2, (const int[]){97, 150}, (const int[]){1, 1}, W);        /* two decode rows */
        one(2, (const int[]){120, 60}, (const int[]){1, 45}, W);       /* mixed: a decode row and a chunk */
    }
}

Test(attn_window, full_attention_reads_every_block) {
    test_deadline(30);
    Setup *a = malloc(sizeof *a);
    cr_assert(a);
    setup(a, 1, (const int[]){100}, (const int[]){1}, 16); /* blocks before the window released */
    cr_assert_eq(run(a, 0, 1), RAD_E_ARG, "window 0 must refuse a released block it would read");
    setup(a, 1, (const int[]){100}, (const int[]){1}, 0);
    cr_assert_eq(run(a, 0, 1), RAD_OK);
    cr_assert(check(a, 1, 0) <= 1e-5);
    setup(a, 1, (const int[]){100}, (const int[]){1}, 16);
    cr_assert_eq(run(a, -1, 1), RAD_E_ARG, "a negative window is refused");
    free(a);
}

Test(attn_window, libref_states_it_serves_windows) {
    cr_assert_eq(attn()->attn_window, 1u);
}
