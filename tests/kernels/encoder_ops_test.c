/* encoder_ops_test.c — libref's encoder ops (docs/OPS.md): layernorm, gelu, attn_seq, pool and
 * l2_normalize, through the kernel ABI.
 *
 * $RAD_BUILD/plugins/kern_ref.so (RAD_BUILD defaults to "build") is dlopened as the core loads it and
 * initialised four times: the best ISA of this CPU and the portable C path (RAD_REF_ISA=generic),
 * each with 1 and 3 threads. Every op runs on random inputs in each state and is compared with a
 * plain double-precision reference written here (PyTorch's definitions: nn.LayerNorm's biased
 * variance, gelu(approximate="none"), scaled-dot-product attention with a |i - j| < window mask,
 * sentence-transformers' pooling, F.normalize), within the bound the kernel states; the kernels
 * declaring RAD_EXACT_BITWISE also give the same bits in every state, and the op-level claims are
 * checked: aliasing changes nothing, a sequence's rows do not depend on the other sequences of the
 * step, and every refusal returns its status with nothing written.
 *
 * Shapes: N not a multiple of 8 or 16 (37, 20) and BERT's 384; steps of sequences of 1, 5 and 17
 * tokens (and an empty one, for attention); GQA with n_head 4 over 4, 2 and 1 KV heads; windows 0
 * and 3. */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abi/rad_arch.h"
#include "abi/rad_kernels.h"
#include "libcommon/tensor/rad_enc.h"
#include "libcommon/tensor/rad_encode.h"
#include "tests/test_util.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* ---- the library, four states --------------------------------------------------------------------- */

enum { ST_BEST3, ST_BEST1, ST_GEN3, ST_GEN1, N_ST };
static const char *st_name[N_ST] = {"best/3 threads", "best/1 thread", "generic/3 threads", "generic/1 thread"};

static void *g_dl;
static const RadKernelLib *g_lib;
static void *g_st[N_ST];

static void *init_state(const char *isa, uint32_t threads) {
    if (isa) setenv("RAD_REF_ISA", isa, 1);
    else unsetenv("RAD_REF_ISA");
    void *st = NULL;
    RadKernelLibConfig cfg = {sizeof cfg, threads, 0, 0, 1, NULL};
    cr_assert_eq(g_lib->init(&cfg, &st), RAD_OK);
    unsetenv("RAD_REF_ISA");
    return st;
}

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
    cr_assert(g_lib && g_lib->init && g_lib->fini);
    g_st[ST_BEST3] = init_state(NULL, 3);
    g_st[ST_BEST1] = init_state(NULL, 1);
    g_st[ST_GEN3] = init_state("generic", 3);
    g_st[ST_GEN1] = init_state("generic", 1);
}

static void unload(void) {
    for (int s = 0; s < N_ST; s++)
        if (g_st[s]) g_lib->fini(g_st[s]);
    memset(g_st, 0, sizeof g_st);
    if (g_dl) dlclose(g_dl);
    g_dl = NULL;
}

TestSuite(encoder_ops, .init = load, .fini = unload);

static const RadKernel *find(const char *op) {
    for (uint32_t i = 0; i < g_lib->n_kernels; i++)
        if (strcmp(rad_kernel_at(g_lib, i)->op, op) == 0) return rad_kernel_at(g_lib, i);
    cr_assert_fail("libref has no kernel for %s", op);
    return NULL;
}

/* ---- operands and calls --------------------------------------------------------------------------- */

static RadKArg fbuf_s(float *p, uint64_t rows, uint64_t cols, uint64_t stride) {
    RadKArg a = {p, RAD_F32, rows, cols, stride, {NULL}};
    return a;
}
static RadKArg fbuf(float *p, uint64_t rows, uint64_t cols) { return fbuf_s(p, rows, cols, cols); }
/* A rank-1 weight of n elements in encoding t (f32, f16, bf16): one row. */
static RadKArg wvec(const void *p, RadDType t, uint64_t n) {
    RadKArg a = {(void *)p, t, 1, n, n * (t == RAD_F32 ? 4 : 2), {p, NULL, NULL, NULL}};
    return a;
}

/* The kernel k in state st over n rows: the ranged parameter set to n, the step's batch b. */
static int call(const RadKernel *k, void *st, const RadParam *p, uint32_t np, int64_t n, const RadKArg *args, uint32_t na,
                const RadBatch *b) {
    RadParam prm[16];
    cr_assert(np <= 16);
    memcpy(prm, p, np * sizeof *p);
    for (uint32_t i = 0; i < np; i++)
        if (prm[i].kind == RAD_PARAM_RANGE) prm[i].lo = prm[i].hi = n;
    RadKernelArgs a = {sizeof a, prm, np, n, args, na, b, NULL, NULL, st, 0, 1, NULL, 0};
    return k->run(&a);
}

/* A step of n_seq sequences with the given lengths (positions from 0 in each). */
typedef struct Step {
    int32_t cu[9], ql[8], pos[256], sid[8];
    RadBatch b;
    int M;
} Step;

static void make_step(Step *s, const int *len, int n_seq) {
    memset(s, 0, sizeof *s);
    cr_assert(n_seq <= 8);
    int t = 0;
    for (int q = 0; q < n_seq; q++) {
        s->cu[q] = t, s->ql[q] = len[q], s->sid[q] = q;
        for (int i = 0; i < len[q]; i++) s->pos[t++] = i;
    }
    cr_assert(t <= 256);
    s->cu[n_seq] = t;
    s->M = t;
    s->b = (RadBatch){.struct_size = sizeof s->b, .phase = RAD_PHASE_PREFILL, .n_tok = (uint32_t)t, .n_seq = (uint32_t)n_seq,
                      .positions = s->pos, .cu_seqlens = s->cu, .seq_ids = s->sid, .q_lens = s->ql, .ctx_lens = s->ql};
}

/* ---- data ----------------------------------------------------------------------------------------- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1) */
    g_rng ^= g_rng >> 12, g_rng ^= g_rng << 25, g_rng ^= g_rng >> 27;
    return (float)((double)((g_rng * 0x2545f4914f6cdd1dull) >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}
static void fill(float *p, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) p[i] = scale * frand();
}
static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    cr_assert(p);
    return p;
}
static int same_bits(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof *a) == 0; }

/* docs/OPS.md's measure: max over the row of |y - ref| / (max |ref| + 1e-6); NaN where they
 * disagree about a NaN. */
static double row_err(const float *y, const double *ref, size_t n) {
    double mref = 0, worst = 0;
    for (size_t j = 0; j < n; j++) mref = fabs(ref[j]) > mref ? fabs(ref[j]) : mref;
    for (size_t j = 0; j < n; j++) {
        if (isnan(ref[j]) || isnan(y[j])) {
            if (!(isnan(ref[j]) && isnan(y[j]))) return NAN;
            continue;
        }
        const double d = fabs((double)y[j] - ref[j]) / (mref + 1e-6);
        worst = d > worst ? d : worst;
    }
    return worst;
}

static void assert_untouched(const float *p, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &p[i], 4);
        cr_assert_eq(u, 0x5a5a5a5au, "%s: output written on a refused call (element %zu)", what, i);
    }
}

/* ---- the table ------------------------------------------------------------------------------------ */

Test(encoder_ops, table_and_schema_as_docs_say) {
    const RadKernel *ln = find("layernorm"), *ge = find("gelu"), *at = find("attn_seq"), *po = find("pool"),
                    *l2 = find("l2_normalize");
    cr_assert_eq(ln->weight_encs, RAD_ENC_PLAIN_FLOATS, "layernorm reads f32/f16/bf16 gamma and beta");
    cr_assert_eq(ln->exactness, RAD_EXACT_BITWISE);
    cr_assert_eq(ge->weight_encs, 0);
    cr_assert(ge->exactness == RAD_EXACT_TOLERANCE && ge->tolerance > 0 && ge->tolerance <= 1e-6);
    cr_assert_eq(at->weight_encs, 0);
    cr_assert(at->exactness == RAD_EXACT_TOLERANCE && at->tolerance > 0 && at->tolerance <= 1e-5);
    cr_assert_eq(at->kv_block_size, 0, "attn_seq reads no KV cache");
    cr_assert_eq(po->exactness, RAD_EXACT_BITWISE);
    cr_assert_eq(l2->exactness, RAD_EXACT_BITWISE);
    const RadKernel *all[] = {ln, ge, at, po, l2};
    for (size_t i = 0; i < N_OF(all); i++) {
        cr_assert_eq(all[i]->act_dtype, RAD_F32);
        cr_assert_eq(all[i]->n_min, 1);
        cr_assert_eq(all[i]->n_max, 0);
        cr_assert_eq(all[i]->batch_invariant, 1);
    }
}

/* Zero (or negative) rows is not a call: RAD_E_SHAPE, nothing written. */
Test(encoder_ops, zero_rows) {
    float x[64], o[64], g[8];
    fill(x, 64, 1.0f), fill(g, 8, 1.0f);
    const int len[] = {4};
    Step s;
    make_step(&s, len, 1);
    RadParam p[] = {RAD_RANGE("M", 1, 4), RAD_INT("N", 4), RAD_FLOAT("eps", 1e-5), RAD_INT("mode", 0), RAD_INT("n_head", 1),
                    RAD_INT("n_head_kv", 1), RAD_INT("head_dim", 4), RAD_FLOAT("scale", 0)};
    static const char *ops[] = {"layernorm", "gelu", "attn_seq", "pool", "l2_normalize"};
    for (size_t i = 0; i < N_OF(ops); i++) {
        RadKArg a[4];
        uint32_t na;
        if (i == 0) a[0] = wvec(g, RAD_F32, 4), a[1] = wvec(g + 4, RAD_F32, 4), a[2] = fbuf(x, 4, 4), a[3] = fbuf(o, 4, 4), na = 4;
        else if (i == 2) a[0] = fbuf(x, 4, 4), a[1] = fbuf(x + 16, 4, 4), a[2] = fbuf(x + 32, 4, 4), a[3] = fbuf(o, 4, 4), na = 4;
        else if (i == 4) a[0] = fbuf(o, 4, 4), na = 1;
        else a[0] = fbuf(x, 4, 4), a[1] = fbuf(o, 4, 4), na = 2;
        for (int st = 0; st < N_ST; st++) {
            memset(o, 0x5a, sizeof o);
            cr_assert_eq(call(find(ops[i]), g_st[st], p, N_OF(p), 0, a, na, &s.b), RAD_E_SHAPE, "%s: zero rows", ops[i]);
            cr_assert_eq(call(find(ops[i]), g_st[st], p, N_OF(p), -1, a, na, &s.b), RAD_E_SHAPE, "%s: negative rows", ops[i]);
            assert_untouched(o, 64, ops[i]);
        }
    }
}

/* ---- layernorm ------------------------------------------------------------------------------------ */

/* nn.LayerNorm in double: mean, biased variance, (x - mean) / sqrt(var + eps) * gamma + beta. */
static void ref_layernorm(const float *x, const float *g, const float *b, double *out, int N, double eps) {
    long double s = 0, v = 0; /* long double: a reference that does not share the kernel's rounding */
    for (int j = 0; j < N; j++) s += x[j];
    const long double mean = s / N;
    for (int j = 0; j < N; j++) v += ((long double)x[j] - mean) * ((long double)x[j] - mean);
    const long double rstd = 1.0L / sqrtl(v / N + (long double)eps);
    for (int j = 0; j < N; j++) out[j] = (double)(((long double)x[j] - mean) * rstd * g[j] + b[j]);
}

static void layernorm_case(int M, int N, double eps, RadDType wt) {
    const RadKernel *k = find("layernorm");
    float *x = xmalloc(sizeof(float) * (size_t)(M * N)), *out = xmalloc(sizeof(float) * (size_t)(M * N));
    float *first = xmalloc(sizeof(float) * (size_t)(M * N)), *al = xmalloc(sizeof(float) * (size_t)(M * N));
    float *gf = xmalloc(sizeof(float) * (size_t)N), *bf = xmalloc(sizeof(float) * (size_t)N);
    uint16_t *gh = xmalloc(2 * (size_t)N), *bh = xmalloc(2 * (size_t)N);
    double *ref = xmalloc(sizeof(double) * (size_t)N);
    for (int i = 0; i < M; i++) { /* rows with a mean of their own and a few outliers: what BERT's hidden states look like */
        const float off = 4.0f * frand();
        for (int j = 0; j < N; j++) x[i * N + j] = off + frand();
        x[i * N + (i * 7) % N] += 20.0f;
    }
    for (int j = 0; j < N; j++) gf[j] = 1.0f + 0.5f * frand(), bf[j] = 0.1f * frand();
    const void *gw = gf, *bw = bf;
    if (wt != RAD_F32) { /* the weights as stored, and the f32 values they widen to exactly */
        for (int j = 0; j < N; j++) {
            gh[j] = wt == RAD_F16 ? rad_f32_to_f16(gf[j]) : rad_f32_to_bf16(gf[j]);
            bh[j] = wt == RAD_F16 ? rad_f32_to_f16(bf[j]) : rad_f32_to_bf16(bf[j]);
            gf[j] = wt == RAD_F16 ? rad_f16_to_f32(gh[j]) : rad_bf16_to_f32(gh[j]);
            bf[j] = wt == RAD_F16 ? rad_f16_to_f32(bh[j]) : rad_bf16_to_f32(bh[j]);
        }
        gw = gh, bw = bh;
    }
    RadParam p[] = {RAD_RANGE("M", 1, 512), RAD_INT("N", N), RAD_FLOAT("eps", eps)};
    for (int st = 0; st < N_ST; st++) {
        memset(out, 0xff, sizeof(float) * (size_t)(M * N));
        RadKArg a[4] = {wvec(gw, wt, (uint64_t)N), wvec(bw, wt, (uint64_t)N), fbuf(x, (uint64_t)M, (uint64_t)N),
                        fbuf(out, (uint64_t)M, (uint64_t)N)};
        cr_assert_eq(call(k, g_st[st], p, 3, M, a, 4, NULL), RAD_OK);
        for (int i = 0; i < M; i++) {
            ref_layernorm(x + i * N, gf, bf, ref, N, eps);
            const double e = row_err(out + i * N, ref, (size_t)N);
            cr_assert(e <= 1e-6, "layernorm M %d N %d eps %g (%s): row %d off by %g (%s)", M, N, eps,
                      wt == RAD_F32 ? "f32" : wt == RAD_F16 ? "f16" : "bf16", i, e, st_name[st]);
        }
        if (st == 0) memcpy(first, out, sizeof(float) * (size_t)(M * N));
        else cr_assert(same_bits(first, out, (size_t)(M * N)), "layernorm: BITWISE but %s differs from %s", st_name[st], st_name[0]);
        /* out == x: the same bits */
        memcpy(al, x, sizeof(float) * (size_t)(M * N));
        a[2] = a[3] = fbuf(al, (uint64_t)M, (uint64_t)N);
        cr_assert_eq(call(k, g_st[st], p, 3, M, a, 4, NULL), RAD_OK);
        cr_assert(same_bits(first, al, (size_t)(M * N)), "layernorm in place differs (%s)", st_name[st]);
    }
    /* a row alone gives its bits in the batch (batch invariance) */
    if (M > 1) {
        RadKArg a[4] = {wvec(gw, wt, (uint64_t)N), wvec(bw, wt, (uint64_t)N), fbuf(x + (M - 1) * N, 1, (uint64_t)N),
                        fbuf(out, 1, (uint64_t)N)};
        cr_assert_eq(call(k, g_st[ST_BEST3], p, 3, 1, a, 4, NULL), RAD_OK);
        cr_assert(same_bits(out, first + (M - 1) * N, (size_t)N), "layernorm: a row alone differs from the row in a batch");
    }
    free(x), free(out), free(first), free(al), free(gf), free(bf), free(gh), free(bh), free(ref);
}

Test(encoder_ops, layernorm_against_double) {
    const int shapes[][2] = {{1, 37}, {5, 384}, {17, 37}, {23, 100}, {3, 1}};
    for (size_t i = 0; i < N_OF(shapes); i++) {
        layernorm_case(shapes[i][0], shapes[i][1], 1e-12, RAD_F32); /* BERT's eps */
        layernorm_case(shapes[i][0], shapes[i][1], 1e-5, RAD_F32);
    }
    layernorm_case(7, 384, 1e-12, RAD_F16);
    layernorm_case(7, 37, 1e-6, RAD_BF16);
}

/* A constant row has variance 0: the output is beta (x - mean is exactly 0), not NaN. */
Test(encoder_ops, layernorm_constant_row_is_beta) {
    enum { N = 37 };
    float x[N], out[N], g[N], b[N];
    for (int j = 0; j < N; j++) x[j] = 3.25f, g[j] = 1.0f + frand(), b[j] = frand();
    RadParam p[] = {RAD_RANGE("M", 1, 8), RAD_INT("N", N), RAD_FLOAT("eps", 1e-12)};
    RadKArg a[4] = {wvec(g, RAD_F32, N), wvec(b, RAD_F32, N), fbuf(x, 1, N), fbuf(out, 1, N)};
    for (int st = 0; st < N_ST; st++) {
        cr_assert_eq(call(find("layernorm"), g_st[st], p, 3, 1, a, 4, NULL), RAD_OK);
        for (int j = 0; j < N; j++) cr_assert_eq(out[j], b[j], "column %d: %g, want beta %g", j, (double)out[j], (double)b[j]);
    }
}

Test(encoder_ops, layernorm_refusals) {
    enum { M = 3, N = 37 };
    float x[M * N], out[M * N], g[N + 1], b[N + 1];
    fill(x, M * N, 1.0f), fill(g, N + 1, 1.0f), fill(b, N + 1, 1.0f);
    const RadKernel *k = find("layernorm");
    RadParam p[] = {RAD_RANGE("M", 1, 8), RAD_INT("N", N), RAD_FLOAT("eps", 1e-12)};
    struct {
        RadKArg a[4];
        uint32_t na;
        int want;
        const char *what;
    } c[] = {
        {{wvec(g, RAD_F32, N + 1), wvec(b, RAD_F32, N), fbuf(x, M, N), fbuf(out, M, N)}, 4, RAD_E_SHAPE, "gamma of N+1"},
        {{wvec(g, RAD_F32, N), wvec(b, RAD_F32, N - 1), fbuf(x, M, N), fbuf(out, M, N)}, 4, RAD_E_SHAPE, "beta of N-1"},
        {{wvec(g, RAD_I32, N), wvec(b, RAD_F32, N), fbuf(x, M, N), fbuf(out, M, N)}, 4, RAD_E_SHAPE, "gamma not a float"},
        {{wvec(g, RAD_F32, N), wvec(b, RAD_F32, N), fbuf(x, M, N - 1), fbuf(out, M, N)}, 4, RAD_E_SHAPE, "x of N-1 columns"},
        {{wvec(g, RAD_F32, N), wvec(b, RAD_F32, N), fbuf(x, M, N), fbuf(out, M - 1, N)}, 4, RAD_E_SHAPE, "out of M-1 rows"},
        {{wvec(g, RAD_F32, N), fbuf(x, M, N), fbuf(out, M, N), {0}}, 3, RAD_E_SHAPE, "three operands (no beta)"},
    };
    for (size_t i = 0; i < N_OF(c); i++) {
        memset(out, 0x5a, sizeof out);
        cr_assert_eq(call(k, g_st[ST_BEST3], p, 3, M, c[i].a, c[i].na, NULL), c[i].want, "layernorm, %s", c[i].what);
        assert_untouched(out, M * N, c[i].what);
    }
    RadKArg a[4] = {wvec(g, RAD_F32, N), wvec(b, RAD_F32, N), fbuf(x, M, N), fbuf(out, M, N)};
    RadParam neg[] = {RAD_RANGE("M", 1, 8), RAD_INT("N", N), RAD_FLOAT("eps", -1e-5)};
    RadParam no_eps[] = {RAD_RANGE("M", 1, 8), RAD_INT("N", N)};
    memset(out, 0x5a, sizeof out);
    cr_assert_eq(call(k, g_st[ST_BEST3], neg, 3, M, a, 4, NULL), RAD_E_ARG, "a negative eps");
    cr_assert_eq(call(k, g_st[ST_BEST3], no_eps, 2, M, a, 4, NULL), RAD_E_ARG, "no eps");
    assert_untouched(out, M * N, "layernorm eps");
}

/* ---- gelu ----------------------------------------------------------------------------------------- */

Test(encoder_ops, gelu_against_double) {
    const RadKernel *k = find("gelu");
    cr_assert_leq(k->tolerance, 1e-6);
    const int shapes[][2] = {{1, 37}, {5, 384}, {17, 37}, {4, 1}};
    for (size_t c = 0; c < N_OF(shapes); c++) {
        const int M = shapes[c][0], N = shapes[c][1];
        float *x = xmalloc(sizeof(float) * (size_t)(M * N)), *out = xmalloc(sizeof(float) * (size_t)(M * N)),
              *al = xmalloc(sizeof(float) * (size_t)(M * N));
        double *ref = xmalloc(sizeof(double) * (size_t)N);
        fill(x, (size_t)(M * N), 4.0f);
        if (M * N > 8) x[0] = -12.0f, x[1] = 12.0f, x[2] = 0.0f, x[3] = -0.0f, x[4] = 1e-30f, x[5] = -5.5f; /* tails, zeros */
        RadParam p[] = {RAD_RANGE("M", 1, 512), RAD_INT("N", N)};
        for (int st = 0; st < N_ST; st++) {
            memset(out, 0xff, sizeof(float) * (size_t)(M * N));
            RadKArg a[2] = {fbuf(x, (uint64_t)M, (uint64_t)N), fbuf(out, (uint64_t)M, (uint64_t)N)};
            cr_assert_eq(call(k, g_st[st], p, 2, M, a, 2, NULL), RAD_OK);
            for (int i = 0; i < M; i++) {
                for (int j = 0; j < N; j++) {
                    const double v = x[i * N + j];
                    ref[j] = v * 0.5 * (1.0 + erf(v / sqrt(2.0)));
                }
                const double e = row_err(out + i * N, ref, (size_t)N);
                cr_assert(e <= k->tolerance, "gelu M %d N %d: row %d off by %g (%s)", M, N, i, e, st_name[st]);
            }
            memcpy(al, x, sizeof(float) * (size_t)(M * N)); /* out == x */
            a[0] = a[1] = fbuf(al, (uint64_t)M, (uint64_t)N);
            cr_assert_eq(call(k, g_st[st], p, 2, M, a, 2, NULL), RAD_OK);
            cr_assert(same_bits(al, out, (size_t)(M * N)), "gelu in place differs (%s)", st_name[st]);
        }
        free(x), free(out), free(al), free(ref);
    }
}

/* The exact GELU, not the tanh one: at x = 1 it is Phi(1) = 0.841344746..., where the tanh form
 * gives 0.841191990...; far out it is x (positive) and 0 (negative). */
Test(encoder_ops, gelu_is_erf_not_tanh) {
    float x[4] = {1.0f, -1.0f, 30.0f, -30.0f}, out[4];
    RadParam p[] = {RAD_RANGE("M", 1, 8), RAD_INT("N", 4)};
    RadKArg a[2] = {fbuf(x, 1, 4), fbuf(out, 1, 4)};
    for (int st = 0; st < N_ST; st++) {
        cr_assert_eq(call(find("gelu"), g_st[st], p, 2, 1, a, 2, NULL), RAD_OK);
        const double phi1 = 0.5 * (1.0 + erf(1.0 / sqrt(2.0)));
        cr_assert(fabs(out[0] - phi1) < 1e-7, "gelu(1) = %.9f, want %.9f", (double)out[0], phi1);
        cr_assert(fabs(out[1] + (1.0 - phi1)) < 1e-7, "gelu(-1) = %.9f", (double)out[1]);
        cr_assert(fabs(out[0] - 0.8411919906) > 1e-4, "gelu(1) is the tanh approximation's value");
        cr_assert_eq(out[2], 30.0f);
        cr_assert(out[3] == 0.0f && !isnan(out[3]));
    }
}

Test(encoder_ops, gelu_refusals) {
    enum { M = 3, N = 37 };
    float x[M * N], out[M * N];
    fill(x, M * N, 1.0f);
    const RadKernel *k = find("gelu");
    RadParam p[] = {RAD_RANGE("M", 1, 8), RAD_INT("N", N)};
    RadKArg bad[][2] = {{fbuf(x, M, N + 1), fbuf(out, M, N)}, {fbuf(x, M, N), fbuf(out, M - 1, N)}};
    for (size_t i = 0; i < N_OF(bad); i++) {
        memset(out, 0x5a, sizeof out);
        cr_assert_eq(call(k, g_st[ST_BEST3], p, 2, M, bad[i], 2, NULL), RAD_E_SHAPE, "gelu shape case %zu", i);
        assert_untouched(out, M * N, "gelu");
    }
    RadKArg a[2] = {fbuf(x, M, N), fbuf(out, M, N)};
    memset(out, 0x5a, sizeof out);
    cr_assert_eq(call(k, g_st[ST_BEST3], p, 2, M, a, 1, NULL), RAD_E_SHAPE, "one operand");
    RadParam n0[] = {RAD_RANGE("M", 1, 8), RAD_INT("N", 0)};
    cr_assert_eq(call(k, g_st[ST_BEST3], n0, 2, M, a, 2, NULL), RAD_E_ARG, "N 0");
    assert_untouched(out, M * N, "gelu");
}

/* ---- attn_seq ------------------------------------------------------------------------------------- */

typedef struct AttnCase {
    int n_head, n_kv, hd, window, has_window;
    double scale;
} AttnCase;

/* Scaled-dot-product attention in double for every row of every sequence, head h on KV head
 * h / (n_head / n_kv), keys of the same sequence with |i - j| < window (0: all). Strides in floats. */
static void ref_attn_seq(const float *q, size_t qs, const float *k, const float *v, size_t kvs, const Step *s, const AttnCase *c,
                         double *out /* [M][n_head*hd] */) {
    const double scale = c->scale != 0 ? c->scale : 1.0 / sqrt((double)c->hd);
    const int qw = c->n_head * c->hd;
    for (uint32_t q_ = 0; q_ < s->b.n_seq; q_++) {
        const int b0 = s->cu[q_], L = s->cu[q_ + 1] - b0;
        for (int i = 0; i < L; i++)
            for (int h = 0; h < c->n_head; h++) {
                const int g = h / (c->n_head / c->n_kv);
                double w[256], m = -INFINITY, l = 0;
                for (int j = 0; j < L; j++) {
                    w[j] = -INFINITY;
                    if (c->window && abs(i - j) >= c->window) continue;
                    double d = 0;
                    for (int e = 0; e < c->hd; e++) d += (double)q[(size_t)(b0 + i) * qs + (size_t)(h * c->hd + e)] *
                                                        k[(size_t)(b0 + j) * kvs + (size_t)(g * c->hd + e)];
                    w[j] = d * scale;
                    m = w[j] > m ? w[j] : m;
                }
                for (int j = 0; j < L; j++) l += w[j] == -INFINITY ? 0 : exp(w[j] - m);
                for (int e = 0; e < c->hd; e++) {
                    double acc = 0;
                    for (int j = 0; j < L; j++)
                        if (w[j] != -INFINITY) acc += exp(w[j] - m) * v[(size_t)(b0 + j) * kvs + (size_t)(g * c->hd + e)];
                    out[(size_t)(b0 + i) * (size_t)qw + (size_t)(h * c->hd + e)] = acc / l;
                }
            }
    }
}

static int run_attn(void *st, const AttnCase *c, const Step *s, float *q, size_t qs, float *k, float *v, size_t kvs, float *out,
                    const RadBatch *b) {
    RadParam p[6] = {RAD_RANGE("M", 1, 512), RAD_INT("n_head", c->n_head), RAD_INT("n_head_kv", c->n_kv),
                     RAD_INT("head_dim", c->hd), RAD_FLOAT("scale", c->scale), RAD_INT("window", c->window)};
    const uint64_t qw = (uint64_t)(c->n_head * c->hd), kw = (uint64_t)(c->n_kv * c->hd);
    RadKArg a[4] = {fbuf_s(q, (uint64_t)s->M, qw, qs), fbuf_s(k, (uint64_t)s->M, kw, kvs), fbuf_s(v, (uint64_t)s->M, kw, kvs),
                    fbuf(out, (uint64_t)s->M, qw)};
    return call(find("attn_seq"), st, p, c->has_window ? 6 : 5, s->M, a, 4, b);
}

static void attn_case(const AttnCase *c, const int *len, int n_seq, int stride_pad) {
    Step s;
    make_step(&s, len, n_seq);
    const int M = s.M, qw = c->n_head * c->hd, kw = c->n_kv * c->hd;
    const size_t qs = (size_t)(qw + stride_pad), kvs = (size_t)(kw + stride_pad);
    float *q = xmalloc(sizeof(float) * (size_t)M * qs), *k = xmalloc(sizeof(float) * (size_t)M * kvs),
          *v = xmalloc(sizeof(float) * (size_t)M * kvs);
    float *out = xmalloc(sizeof(float) * (size_t)(M * qw)), *first = xmalloc(sizeof(float) * (size_t)(M * qw)),
          *alone = xmalloc(sizeof(float) * (size_t)(M * qw));
    double *ref = xmalloc(sizeof(double) * (size_t)(M * qw));
    fill(q, (size_t)M * qs, 2.0f), fill(k, (size_t)M * kvs, 2.0f), fill(v, (size_t)M * kvs, 1.0f);
    ref_attn_seq(q, qs, k, v, kvs, &s, c, ref);
    const double tol = find("attn_seq")->tolerance;
    for (int st = 0; st < N_ST; st++) {
        memset(out, 0xff, sizeof(float) * (size_t)(M * qw));
        cr_assert_eq(run_attn(g_st[st], c, &s, q, qs, k, v, kvs, out, &s.b), RAD_OK);
        for (int t = 0; t < M; t++) {
            const double e = row_err(out + (size_t)t * (size_t)qw, ref + (size_t)t * (size_t)qw, (size_t)qw);
            cr_assert(e <= tol, "attn_seq heads %d/%d hd %d window %d scale %g: row %d off by %g (%s)", c->n_head, c->n_kv, c->hd,
                      c->window, c->scale, t, e, st_name[st]);
        }
        /* the arithmetic is per row: 1 and 3 threads of one ISA agree bit for bit */
        if (st == ST_BEST3 || st == ST_GEN3) memcpy(first, out, sizeof(float) * (size_t)(M * qw));
        else cr_assert(same_bits(first, out, (size_t)(M * qw)), "attn_seq: %s differs from 3 threads", st_name[st]);
    }
    /* each sequence run alone, as a step of its own, gives its rows' bits in the batch */
    for (int q_ = 0; q_ < n_seq; q_++) {
        if (!len[q_]) continue;
        Step one;
        make_step(&one, &len[q_], 1);
        const int b0 = s.cu[q_];
        cr_assert_eq(run_attn(g_st[ST_BEST3], c, &one, q + (size_t)b0 * qs, qs, k + (size_t)b0 * kvs, v + (size_t)b0 * kvs, kvs, alone,
                              &one.b),
                     RAD_OK);
        memset(out, 0, sizeof(float) * (size_t)(M * qw));
        cr_assert_eq(run_attn(g_st[ST_BEST3], c, &s, q, qs, k, v, kvs, out, &s.b), RAD_OK);
        cr_assert(same_bits(alone, out + (size_t)b0 * (size_t)qw, (size_t)(len[q_] * qw)),
                  "attn_seq: sequence %d alone differs from it in the step", q_);
    }
    free(q), free(k), free(v), free(out), free(first), free(alone), free(ref);
}

Test(encoder_ops, attn_seq_against_double) {
    const int lens[] = {1, 5, 17}, one[] = {17}, with_empty[] = {5, 0, 17, 1};
    const AttnCase cases[] = {
        {4, 4, 16, 0, 1, 0.0},  {4, 2, 16, 0, 1, 0.25}, {4, 1, 16, 0, 1, 0.0},  {4, 2, 20, 3, 1, 0.0},
        {4, 1, 37, 3, 1, 0.3},  {4, 4, 8, 3, 1, 0.0},   {2, 1, 32, 0, 0, 0.0}, /* window omitted: full */
        {12, 12, 32, 0, 1, 0.0}, /* all-MiniLM-L6-v2's heads */ {3, 1, 64, 4, 1, 0.125},
    };
    for (size_t i = 0; i < N_OF(cases); i++) {
        attn_case(&cases[i], lens, 3, 0);
        attn_case(&cases[i], one, 1, 3); /* strided q, k, v: a fused projection's columns */
    }
    attn_case(&cases[1], with_empty, 4, 0);
    attn_case(&cases[3], with_empty, 4, 5);
}

/* A window as wide as the sequence is full attention: the same bits as window 0. */
Test(encoder_ops, attn_seq_wide_window_is_full) {
    const int lens[] = {1, 5, 17};
    Step s;
    make_step(&s, lens, 3);
    AttnCase full = {4, 2, 24, 0, 1, 0.0}, wide = {4, 2, 24, 17, 1, 0.0}, narrow = {4, 2, 24, 3, 1, 0.0};
    const int M = s.M, qw = 4 * 24, kw = 2 * 24;
    float *q = xmalloc(sizeof(float) * (size_t)(M * qw)), *k = xmalloc(sizeof(float) * (size_t)(M * kw)),
          *v = xmalloc(sizeof(float) * (size_t)(M * kw)), *a = xmalloc(sizeof(float) * (size_t)(M * qw)),
          *b = xmalloc(sizeof(float) * (size_t)(M * qw));
    fill(q, (size_t)(M * qw), 2.0f), fill(k, (size_t)(M * kw), 2.0f), fill(v, (size_t)(M * kw), 1.0f);
    for (int st = 0; st < N_ST; st++) {
        cr_assert_eq(run_attn(g_st[st], &full, &s, q, (size_t)qw, k, v, (size_t)kw, a, &s.b), RAD_OK);
        cr_assert_eq(run_attn(g_st[st], &wide, &s, q, (size_t)qw, k, v, (size_t)kw, b, &s.b), RAD_OK);
        cr_assert(same_bits(a, b, (size_t)(M * qw)), "window 17 over sequences of at most 17 differs from full (%s)", st_name[st]);
        cr_assert_eq(run_attn(g_st[st], &narrow, &s, q, (size_t)qw, k, v, (size_t)kw, b, &s.b), RAD_OK);
        cr_assert(!same_bits(a + 6 * qw, b + 6 * qw, (size_t)(17 * qw)), "window 3 changed nothing in the 17-token sequence");
        cr_assert(same_bits(a, b, (size_t)qw), "a 1-token sequence is the same under any window");
    }
    free(q), free(k), free(v), free(a), free(b);
}

Test(encoder_ops, attn_seq_refusals) {
    const int lens[] = {1, 5, 17};
    Step s;
    make_step(&s, lens, 3);
    enum { H = 4, KV = 2, HD = 8 };
    const int M = s.M, qw = H * HD, kw = KV * HD;
    float *q = xmalloc(sizeof(float) * (size_t)(M * qw)), *k = xmalloc(sizeof(float) * (size_t)(M * kw)),
          *v = xmalloc(sizeof(float) * (size_t)(M * kw)), *out = xmalloc(sizeof(float) * (size_t)(M * qw));
    fill(q, (size_t)(M * qw), 1.0f), fill(k, (size_t)(M * kw), 1.0f), fill(v, (size_t)(M * kw), 1.0f);
    const RadKernel *kn = find("attn_seq");
#define ATTN_CALL(P, NP, A, B) call(kn, g_st[ST_BEST3], P, NP, M, A, 4, B)
    RadParam p[] = {RAD_RANGE("M", 1, 64), RAD_INT("n_head", H), RAD_INT("n_head_kv", KV), RAD_INT("head_dim", HD),
                    RAD_FLOAT("scale", 0), RAD_INT("window", 0)};
    RadKArg a[4] = {fbuf(q, (uint64_t)M, qw), fbuf(k, (uint64_t)M, kw), fbuf(v, (uint64_t)M, kw), fbuf(out, (uint64_t)M, qw)};
    memset(out, 0x5a, sizeof(float) * (size_t)(M * qw));
    /* the batch */
    cr_assert_eq(ATTN_CALL(p, 6, a, NULL), RAD_E_ARG, "no batch");
    Step bad = s;
    bad.b.cu_seqlens = bad.cu;
    bad.cu[0] = 1;
    cr_assert_eq(ATTN_CALL(p, 6, a, &bad.b), RAD_E_ARG, "cu_seqlens[0] = 1");
    bad = s, bad.b.cu_seqlens = bad.cu, bad.cu[2] = 0; /* 0, 1, 0, 23: goes down */
    cr_assert_eq(ATTN_CALL(p, 6, a, &bad.b), RAD_E_ARG, "cu_seqlens going down");
    bad = s, bad.b.cu_seqlens = bad.cu, bad.cu[3] = M - 1;
    cr_assert_eq(ATTN_CALL(p, 6, a, &bad.b), RAD_E_ARG, "cu_seqlens ending before M");
    bad = s, bad.b.cu_seqlens = bad.cu, bad.cu[3] = M + 1;
    cr_assert_eq(ATTN_CALL(p, 6, a, &bad.b), RAD_E_ARG, "cu_seqlens ending past M");
    bad = s, bad.b.cu_seqlens = NULL;
    cr_assert_eq(ATTN_CALL(p, 6, a, &bad.b), RAD_E_ARG, "no cu_seqlens");
    bad = s, bad.b.cu_seqlens = bad.cu, bad.b.n_seq = 0;
    cr_assert_eq(ATTN_CALL(p, 6, a, &bad.b), RAD_E_ARG, "no sequence");
    /* the parameters */
    RadParam r[6];
    memcpy(r, p, sizeof p), r[2] = RAD_INT("n_head_kv", 3);
    cr_assert_eq(ATTN_CALL(r, 6, a, &s.b), RAD_E_ARG, "n_head 4 over n_head_kv 3");
    memcpy(r, p, sizeof p), r[5] = RAD_INT("window", -1);
    cr_assert_eq(ATTN_CALL(r, 6, a, &s.b), RAD_E_ARG, "window -1");
    memcpy(r, p, sizeof p), r[4] = RAD_FLOAT("scale", INFINITY);
    cr_assert_eq(ATTN_CALL(r, 6, a, &s.b), RAD_E_ARG, "scale inf");
    cr_assert_eq(ATTN_CALL(p, 4, a, &s.b), RAD_E_ARG, "no scale");
    /* the operands */
    RadKArg b[4];
    memcpy(b, a, sizeof a), b[0] = fbuf(q, (uint64_t)M, qw - HD);
    cr_assert_eq(ATTN_CALL(p, 6, b, &s.b), RAD_E_SHAPE, "q of n_head - 1 heads");
    memcpy(b, a, sizeof a), b[1] = fbuf(k, (uint64_t)M, qw);
    cr_assert_eq(ATTN_CALL(p, 6, b, &s.b), RAD_E_SHAPE, "k of n_head heads");
    memcpy(b, a, sizeof a), b[2] = fbuf(v, (uint64_t)M - 1, kw);
    cr_assert_eq(ATTN_CALL(p, 6, b, &s.b), RAD_E_SHAPE, "v of M - 1 rows");
    memcpy(b, a, sizeof a), b[3] = fbuf(out, (uint64_t)M, qw + 1);
    cr_assert_eq(ATTN_CALL(p, 6, b, &s.b), RAD_E_SHAPE, "out one column wide");
    cr_assert_eq(call(kn, g_st[ST_BEST3], p, 6, M, a, 3, &s.b), RAD_E_SHAPE, "three operands");
#undef ATTN_CALL
    assert_untouched(out, (size_t)(M * qw), "attn_seq");
    free(q), free(k), free(v), free(out);
}

/* ---- pool ----------------------------------------------------------------------------------------- */

static const char *mode_name[5] = {"mean", "cls", "last", "max", "mean_sqrt_len"};

/* sentence-transformers' pooling of one sequence's rows, in double. */
static void ref_pool(const float *x, int N, int r0, int r1, int mode, double *out) {
    for (int j = 0; j < N; j++) {
        double acc = 0, m = -INFINITY;
        int nan = 0;
        for (int r = r0; r < r1; r++) {
            const double e = x[r * N + j];
            acc += e;
            nan |= isnan(e);
            m = e > m ? e : m;
        }
        out[j] = mode == 0 ? acc / (r1 - r0) : mode == 1 ? x[r0 * N + j] : mode == 2 ? x[(r1 - 1) * N + j]
               : mode == 3 ? (nan ? NAN : m) : acc / sqrt((double)(r1 - r0));
    }
}

Test(encoder_ops, pool_every_mode) {
    const int lens[] = {1, 5, 17}, Ns[] = {37, 384, 1};
    Step s;
    make_step(&s, lens, 3);
    const int M = s.M;
    for (size_t ni = 0; ni < N_OF(Ns); ni++) {
        const int N = Ns[ni], S = 3;
        float *x = xmalloc(sizeof(float) * (size_t)(M * N)), *out = xmalloc(sizeof(float) * (size_t)((S + 1) * N)),
              *first = xmalloc(sizeof(float) * (size_t)(S * N));
        double *ref = xmalloc(sizeof(double) * (size_t)N);
        for (int i = 0; i < M * N; i++) x[i] = 3.0f + 2.0f * frand(); /* a common offset: the mean's sum is not trivially small */
        if (N > 1) x[8 * N + 1] = NAN; /* a NaN in the third sequence's column 1: max keeps it, as torch.max */
        for (int mode = 0; mode < 5; mode++) {
            RadParam p[] = {RAD_RANGE("M", 1, 64), RAD_INT("N", N), RAD_INT("mode", mode)};
            for (int st = 0; st < N_ST; st++) {
                memset(out, 0x5a, sizeof(float) * (size_t)((S + 1) * N));
                /* out with a spare row past n_seq: the kernel writes rows [0, n_seq) only */
                RadKArg a[2] = {fbuf(x, (uint64_t)M, (uint64_t)N), fbuf(out, (uint64_t)S + 1, (uint64_t)N)};
                cr_assert_eq(call(find("pool"), g_st[st], p, 3, M, a, 2, &s.b), RAD_OK);
                for (int q_ = 0; q_ < S; q_++) {
                    ref_pool(x, N, s.cu[q_], s.cu[q_ + 1], mode, ref);
                    const float *o = out + q_ * N;
                    if (mode == 1 || mode == 2 || mode == 3) { /* a copy or a compare: exact */
                        for (int j = 0; j < N; j++)
                            cr_assert(isnan(ref[j]) ? isnan(o[j]) : o[j] == (float)ref[j], "pool %s N %d: seq %d col %d is %g, want %g",
                                      mode_name[mode], N, q_, j, (double)o[j], ref[j]);
                    } else {
                        const double e = row_err(o, ref, (size_t)N);
                        cr_assert(e <= 1e-6, "pool %s N %d: sequence %d off by %g (%s)", mode_name[mode], N, q_, e, st_name[st]);
                    }
                }
                assert_untouched(out + S * N, (size_t)N, "pool's row past n_seq");
                if (st == 0) memcpy(first, out, sizeof(float) * (size_t)(S * N));
                else cr_assert(same_bits(first, out, (size_t)(S * N)), "pool %s: BITWISE but %s differs", mode_name[mode], st_name[st]);
            }
        }
        free(x), free(out), free(first), free(ref);
    }
}

Test(encoder_ops, pool_refusals) {
    enum { N = 37 };
    const int lens[] = {1, 5, 17}, with_empty[] = {5, 0, 18};
    Step s, e;
    make_step(&s, lens, 3);
    make_step(&e, with_empty, 3);
    const int M = s.M;
    float *x = xmalloc(sizeof(float) * (size_t)(M * N)), out[4 * N];
    fill(x, (size_t)(M * N), 1.0f);
    const RadKernel *k = find("pool");
    RadParam p[] = {RAD_RANGE("M", 1, 64), RAD_INT("N", N), RAD_INT("mode", 0)};
    RadKArg a[2] = {fbuf(x, (uint64_t)M, N), fbuf(out, 3, N)};
    memset(out, 0x5a, sizeof out);
    cr_assert_eq(call(k, g_st[ST_BEST3], p, 3, M, a, 2, NULL), RAD_E_ARG, "no batch");
    cr_assert_eq(call(k, g_st[ST_BEST3], p, 3, M, a, 2, &e.b), RAD_E_ARG, "an empty sequence");
    Step bad = s;
    bad.b.cu_seqlens = bad.cu, bad.cu[0] = -1;
    cr_assert_eq(call(k, g_st[ST_BEST3], p, 3, M, a, 2, &bad.b), RAD_E_ARG, "cu_seqlens[0] = -1");
    bad = s, bad.b.cu_seqlens = bad.cu, bad.cu[1] = 7; /* 0, 7, 6, 23 */
    cr_assert_eq(call(k, g_st[ST_BEST3], p, 3, M, a, 2, &bad.b), RAD_E_ARG, "cu_seqlens going down");
    bad = s, bad.b.cu_seqlens = bad.cu, bad.cu[3] = M - 2;
    cr_assert_eq(call(k, g_st[ST_BEST3], p, 3, M, a, 2, &bad.b), RAD_E_ARG, "cu_seqlens ending before M");
    RadParam m5[] = {RAD_RANGE("M", 1, 64), RAD_INT("N", N), RAD_INT("mode", 5)};
    RadParam mneg[] = {RAD_RANGE("M", 1, 64), RAD_INT("N", N), RAD_INT("mode", -1)};
    cr_assert_eq(call(k, g_st[ST_BEST3], m5, 3, M, a, 2, &s.b), RAD_E_ARG, "mode 5");
    cr_assert_eq(call(k, g_st[ST_BEST3], mneg, 3, M, a, 2, &s.b), RAD_E_ARG, "mode -1");
    cr_assert_eq(call(k, g_st[ST_BEST3], p, 2, M, a, 2, &s.b), RAD_E_ARG, "no mode");
    RadKArg b[2] = {a[0], fbuf(out, 2, N)};
    cr_assert_eq(call(k, g_st[ST_BEST3], p, 3, M, b, 2, &s.b), RAD_E_SHAPE, "out of n_seq - 1 rows");
    b[1] = fbuf(out, 3, N - 1);
    cr_assert_eq(call(k, g_st[ST_BEST3], p, 3, M, b, 2, &s.b), RAD_E_SHAPE, "out of N - 1 columns");
    b[0] = fbuf(x, (uint64_t)M - 1, N), b[1] = a[1];
    cr_assert_eq(call(k, g_st[ST_BEST3], p, 3, M, b, 2, &s.b), RAD_E_SHAPE, "x of M - 1 rows");
    cr_assert_eq(call(k, g_st[ST_BEST3], p, 3, M, a, 1, &s.b), RAD_E_SHAPE, "one operand");
    assert_untouched(out, 4 * N, "pool");
    free(x);
}

/* ---- l2_normalize --------------------------------------------------------------------------------- */

Test(encoder_ops, l2_normalize_against_double) {
    const int shapes[][2] = {{1, 37}, {5, 384}, {17, 37}, {3, 1}};
    for (size_t c = 0; c < N_OF(shapes); c++) {
        const int M = shapes[c][0], N = shapes[c][1];
        float *x = xmalloc(sizeof(float) * (size_t)(M * N)), *y = xmalloc(sizeof(float) * (size_t)(M * N)),
              *first = xmalloc(sizeof(float) * (size_t)(M * N));
        double *ref = xmalloc(sizeof(double) * (size_t)N);
        fill(x, (size_t)(M * N), 3.0f);
        if (M > 2) {
            for (int j = 0; j < N; j++) x[N + j] = 0.0f, x[2 * N + j] = 1e-15f * frand(); /* a zero row; a row of norm < 1e-12 */
            x[2 * N] = 3e-14f;
        }
        RadParam p[] = {RAD_RANGE("M", 1, 64), RAD_INT("N", N)};
        for (int st = 0; st < N_ST; st++) {
            memcpy(y, x, sizeof(float) * (size_t)(M * N));
            RadKArg a[1] = {fbuf(y, (uint64_t)M, (uint64_t)N)};
            cr_assert_eq(call(find("l2_normalize"), g_st[st], p, 2, M, a, 1, NULL), RAD_OK);
            for (int i = 0; i < M; i++) {
                double ss = 0;
                for (int j = 0; j < N; j++) ss += (double)x[i * N + j] * x[i * N + j];
                const double d = fmax(sqrt(ss), 1e-12); /* F.normalize: x / max(||x||, eps) */
                for (int j = 0; j < N; j++) ref[j] = x[i * N + j] / d;
                const double e = row_err(y + i * N, ref, (size_t)N);
                cr_assert(e <= 1e-6, "l2_normalize M %d N %d: row %d off by %g (%s)", M, N, i, e, st_name[st]);
                if (sqrt(ss) > 1e-6) { /* a normal row comes out of unit length */
                    double n2 = 0;
                    for (int j = 0; j < N; j++) n2 += (double)y[i * N + j] * y[i * N + j];
                    cr_assert(fabs(sqrt(n2) - 1.0) < 1e-6, "row %d has norm %.9f", i, sqrt(n2));
                }
            }
            if (M > 2)
                for (int j = 0; j < N; j++) cr_assert(y[N + j] == 0.0f, "a zero row stays zero (no NaN)");
            if (st == 0) memcpy(first, y, sizeof(float) * (size_t)(M * N));
            else cr_assert(same_bits(first, y, (size_t)(M * N)), "l2_normalize: BITWISE but %s differs", st_name[st]);
        }
        free(x), free(y), free(first), free(ref);
    }
}

Test(encoder_ops, l2_normalize_refusals) {
    enum { M = 3, N = 37 };
    float x[M * N];
    const RadKernel *k = find("l2_normalize");
    RadParam p[] = {RAD_RANGE("M", 1, 8), RAD_INT("N", N)};
    RadKArg bad[][1] = {{fbuf(x, M, N - 1)}, {fbuf(x, M - 1, N)}, {fbuf_s(x, M, N, N - 1)}};
    for (size_t i = 0; i < N_OF(bad); i++) {
        memset(x, 0x5a, sizeof x);
        cr_assert_eq(call(k, g_st[ST_BEST3], p, 2, M, bad[i], 1, NULL), RAD_E_SHAPE, "l2_normalize shape case %zu", i);
        assert_untouched(x, M * N, "l2_normalize");
    }
    RadKArg a[2] = {fbuf(x, M, N), fbuf(x, M, N)};
    cr_assert_eq(call(k, g_st[ST_BEST3], p, 2, M, a, 2, NULL), RAD_E_SHAPE, "two operands");
    RadParam n0[] = {RAD_RANGE("M", 1, 8)};
    cr_assert_eq(call(k, g_st[ST_BEST3], n0, 1, M, a, 1, NULL), RAD_E_ARG, "no N");
    assert_untouched(x, M * N, "l2_normalize");
}
