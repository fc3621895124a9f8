/* ref_misc.c — embed_gather (and its vocabulary-parallel part), logits_gather, argmax, add, add_bias, scale, silu_mul, gelu_tanh_mul
 * (docs/OPS.md; all_reduce is ref_comm.c's). gelu_tanh_mul is silu_mul's shape with x / (1 + e^(-2u)),
 * u = sqrt(2/pi)(x + 0.044715 x^3) (0.5 x (1 + tanh u), one exponential): TOLERANCE 1e-6; scale is
 * one IEEE multiply: BITWISE.
 *
 * embed_gather decodes table rows with ref_dequant_row (bit-identical to rad_dequant on every
 * path): RAD_EXACT_BITWISE for every encoding libref reads. logits_gather copies rows, add adds
 * elementwise (one IEEE add each, 8 lanes at a time on AVX2): BITWISE. silu_mul evaluates
 * gate / (1 + e^-gate) · up with e^-gate from ref_exp8 on AVX2 (about 2 ulp) or correctly rounded
 * through double in portable C: RAD_EXACT_TOLERANCE 1e-6. */
#include <math.h>

#include "ref_common.h"
#include "ref_math.h"

/* ---- embed_gather -------------------------------------------------------------------------------- */

typedef struct EmbedCtx {
    const RadKArg *t, *out;
    const int32_t *ids;
    int64_t M, N;
    int64_t row0, V;                 /* the table holds ids [row0, row0 + V) */
    int isa;
} EmbedCtx;

static void embed_task(void *ctx, int tid, int nth) {
    const EmbedCtx *c = ctx;
    int64_t r0, r1;
    ref_split(c->M, tid, nth, 1, &r0, &r1);
    for (int64_t i = r0; i < r1; i++) {
        const int64_t row = (int64_t)c->ids[i] - c->row0;
        if (row >= 0 && row < c->V)
            ref_dequant_row(c->isa, c->t->dtype, ref_wrow(c->t, (uint64_t)row), ref_frow(c->out, (uint64_t)i), (uint64_t)c->N);
        else
            memset(ref_frow(c->out, (uint64_t)i), 0, (size_t)c->N * sizeof(float));
    }
}

/* Both forms: table rows [row0, row0 + V) of an n_vocab vocabulary; ids outside the rows give zeros. */
static int embed_run(const RadKernelArgs *a, int64_t N, int64_t V, int64_t row0, int64_t n_vocab) {
    EmbedCtx c;
    c.t = &a->args[0];
    const RadKArg *ids = &a->args[1];
    c.out = &a->args[2];
    c.M = a->n;
    c.N = N, c.V = V, c.row0 = row0;
    if (!ref_weight_ok(c.t, REF_ENCS_ALL, (uint64_t)V, (uint64_t)N) || !ref_raw_i32_ok(ids, (uint64_t)c.M) ||
        !ref_buf_ok(c.out, (uint64_t)c.M, (uint64_t)N))
        return RAD_E_SHAPE;
    c.ids = ids->data;
    for (int64_t i = 0; i < c.M; i++) /* every id first: no partial output */
        if (c.ids[i] < 0 || c.ids[i] >= n_vocab) return RAD_E_ARG;
    c.isa = ref_isa(a);
    ref_parallel(a, ref_threads(a, (double)c.M * (double)N, 65536.0), embed_task, &c);
    return RAD_OK;
}

int ref_run_embed_gather(const RadKernelArgs *a) {
    int rc = ref_preamble(a, 3);
    if (rc) return rc;
    int64_t N, V;
    if (!ref_pint(a, "N", &N) || !ref_pint(a, "V", &V) || N < 1 || V < 1) return RAD_E_ARG;
    return embed_run(a, N, V, 0, V);
}

/* A rank's part of a vocabulary-parallel table: the all_reduce that follows adds the one rank's
 * row to the others' zeros (x + 0 is x: the same bits as the whole table's gather). */
int ref_run_embed_gather_part(const RadKernelArgs *a) {
    int rc = ref_preamble(a, 3);
    if (rc) return rc;
    int64_t N, V, row0, nv;
    if (!ref_pint(a, "N", &N) || !ref_pint(a, "V", &V) || !ref_pint(a, "row0", &row0) || !ref_pint(a, "n_vocab", &nv) ||
        N < 1 || V < 1 || row0 < 0 || nv < row0 + V)
        return RAD_E_ARG;
    return embed_run(a, N, V, row0, nv);
}

/* ---- logits_gather --------------------------------------------------------------------------------- */

int ref_run_logits_gather(const RadKernelArgs *a) {
    int rc = ref_preamble(a, 3);
    if (rc) return rc;
    int64_t N;
    if (!ref_pint(a, "N", &N) || N < 1) return RAD_E_ARG;
    const RadKArg *x = &a->args[0], *rows = &a->args[1], *out = &a->args[2];
    const uint64_t M = (uint64_t)a->n;
    if (!ref_buf_ok(x, 1, (uint64_t)N) || !ref_raw_i32_ok(rows, M) || !ref_buf_ok(out, M, (uint64_t)N)) return RAD_E_SHAPE;
    const int32_t *r = rows->data;
    for (uint64_t i = 0; i < M; i++)
        if (r[i] < 0 || (uint64_t)r[i] >= x->rows) return RAD_E_ARG;
    for (uint64_t i = 0; i < M; i++) memcpy(ref_frow(out, i), ref_frow(x, (uint64_t)r[i]), (size_t)N * sizeof(float));
    return RAD_OK;
}

/* ---- argmax: each row's first largest value, as an index ------------------------------------------------ */

/* docs/OPS.md's loop `if (x[j] > x[best]) best = j` from best = 0: NaN never wins (a NaN first
 * element: 0), ties go to the lower index, -0 equals +0. The index is written as a float (exact:
 * N <= 2^24). */
int ref_run_argmax(const RadKernelArgs *a) {
    int rc = ref_preamble(a, 2);
    if (rc) return rc;
    int64_t N;
    if (!ref_pint(a, "N", &N) || N < 1 || N > (1 << 24)) return RAD_E_ARG;
    const RadKArg *x = &a->args[0], *out = &a->args[1];
    const uint64_t M = (uint64_t)a->n;
    if (!ref_buf_ok(x, M, (uint64_t)N) || !ref_buf_ok(out, M, 1)) return RAD_E_SHAPE;
    for (uint64_t i = 0; i < M; i++) {
        const float *r = ref_frow(x, i);
        int64_t best = 0;
        for (int64_t j = 1; j < N; j++)
            if (r[j] > r[best]) best = j;
        ref_frow(out, i)[0] = (float)best;
    }
    return RAD_OK;
}

/* ---- add, silu_mul: elementwise over [M, N] ----------------------------------------------------------- */

typedef struct EwCtx {
    const RadKArg *a, *b, *out;
    const float *bias;        /* add_bias: [N] added to every row (b unused) */
    int64_t M, N;
    int isa;
    void (*row)(const float *a, const float *b, float *out, int64_t n);
} EwCtx;

static void add_generic(const float *x, const float *y, float *o, int64_t n) {
    for (int64_t j = 0; j < n; j++) o[j] = x[j] + y[j];
}

static void silu_generic(const float *g, const float *u, float *o, int64_t n) {
    for (int64_t j = 0; j < n; j++) {
        const float e = (float)exp(-(double)g[j]);
        const float den = 1.0f + e;
        const float s = g[j] / den;
        o[j] = s * u[j];
    }
}

/* PyTorch's gelu(approximate="tanh") through double, rounded once, times up. */
static void gelu_generic(const float *g, const float *u, float *o, int64_t n) {
    for (int64_t j = 0; j < n; j++) {
        const double x = g[j], t = 0.7978845608028654 * (x + 0.044715 * x * x * x);
        const float v = (float)(0.5 * x * (1.0 + tanh(t)));
        o[j] = v * u[j];
    }
}

#if REF_X86
REF_AVX2 static void gelu_avx2(const float *g, const float *u, float *o, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), k0 = _mm256_set1_ps(-2.0f * 0.7978845608028654f),
                 k1 = _mm256_set1_ps(0.044715f);
    int64_t j = 0;
    for (; j < n; j += 8) {
        const int t = n - j < 8 ? (int)(n - j) : 8;
        const __m256 x = t == 8 ? _mm256_loadu_ps(g + j) : ref_load_tail(g + j, t);
        const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
        const __m256 e = ref_exp8(_mm256_mul_ps(k0, _mm256_fmadd_ps(k1, x3, x))); /* e^(-2u) */
        const __m256 v = _mm256_div_ps(x, _mm256_add_ps(one, e));
        const __m256 r = _mm256_mul_ps(v, t == 8 ? _mm256_loadu_ps(u + j) : ref_load_tail(u + j, t));
        if (t == 8) _mm256_storeu_ps(o + j, r);
        else ref_store_tail(o + j, r, t);
    }
}

REF_AVX2 static void add_avx2(const float *x, const float *y, float *o, int64_t n) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(o + j, _mm256_add_ps(_mm256_loadu_ps(x + j), _mm256_loadu_ps(y + j)));
    for (; j < n; j++) o[j] = x[j] + y[j];
}

REF_AVX2 static void silu_avx2(const float *g, const float *u, float *o, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), sgn = _mm256_set1_ps(-0.0f);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 gv = _mm256_loadu_ps(g + j);
        const __m256 e = ref_exp8(_mm256_xor_ps(gv, sgn));
        const __m256 s = _mm256_div_ps(gv, _mm256_add_ps(one, e));
        _mm256_storeu_ps(o + j, _mm256_mul_ps(s, _mm256_loadu_ps(u + j)));
    }
    if (j < n) {
        const int t = (int)(n - j);
        const __m256 gv = ref_load_tail(g + j, t);
        const __m256 e = ref_exp8(_mm256_xor_ps(gv, sgn));
        const __m256 s = _mm256_div_ps(gv, _mm256_add_ps(one, e));
        ref_store_tail(o + j, _mm256_mul_ps(s, ref_load_tail(u + j, t)), t);
    }
}
#endif

static void ew_task(void *ctx, int tid, int nth) {
    const EwCtx *c = ctx;
    int64_t r0, r1;
    ref_split(c->M, tid, nth, 1, &r0, &r1);
    for (int64_t i = r0; i < r1; i++)
        c->row(ref_frow(c->a, (uint64_t)i), c->bias ? c->bias : ref_frow(c->b, (uint64_t)i), ref_frow(c->out, (uint64_t)i),
               c->N);
}

enum { EW_ADD, EW_SILU, EW_GELU };

static int run_ew(const RadKernelArgs *a, int kind) {
    int rc = ref_preamble(a, 3);
    if (rc) return rc;
    int64_t N;
    if (!ref_pint(a, "N", &N) || N < 1) return RAD_E_ARG;
    EwCtx c;
    c.bias = NULL;
    c.a = &a->args[0];
    c.b = &a->args[1];
    c.out = &a->args[2];
    c.M = a->n;
    c.N = N;
    if (!ref_buf_ok(c.a, (uint64_t)c.M, (uint64_t)N) || !ref_buf_ok(c.b, (uint64_t)c.M, (uint64_t)N) ||
        !ref_buf_ok(c.out, (uint64_t)c.M, (uint64_t)N))
        return RAD_E_SHAPE;
    c.isa = ref_isa(a);
    c.row = kind == EW_SILU ? silu_generic : kind == EW_GELU ? gelu_generic : add_generic;
#if REF_X86
    if (c.isa >= REF_ISA_AVX2) c.row = kind == EW_SILU ? silu_avx2 : kind == EW_GELU ? gelu_avx2 : add_avx2;
#endif
    int nth = ref_threads(a, (double)c.M * (double)N, kind != EW_ADD ? 16384.0 : 65536.0);
    if (nth > c.M) nth = (int)c.M; /* parts are whole rows: more would be empty jobs */
    ref_parallel(a, nth, ew_task, &c);
    return RAD_OK;
}

int ref_run_add(const RadKernelArgs *a) { return run_ew(a, EW_ADD); }
int ref_run_gelu_tanh_mul(const RadKernelArgs *a) { return run_ew(a, EW_GELU); }

/* scale: x *= factor, in place (one rounding each; rows split across threads when large). */
typedef struct ScaleCtx {
    const RadKArg *x;
    int64_t M, N;
    float f;
} ScaleCtx;

static void scale_task(void *ctx, int tid, int nth) {
    const ScaleCtx *c = ctx;
    int64_t r0, r1;
    ref_split(c->M, tid, nth, 1, &r0, &r1);
    for (int64_t i = r0; i < r1; i++) {
        float *x = ref_frow(c->x, (uint64_t)i);
        for (int64_t j = 0; j < c->N; j++) x[j] = x[j] * c->f; /* vectorised by the compiler: one multiply each */
    }
}

int ref_run_scale(const RadKernelArgs *a) {
    int rc = ref_preamble(a, 1);
    if (rc) return rc;
    int64_t N;
    double f;
    if (!ref_pint(a, "N", &N) || !ref_pflt(a, "factor", &f) || N < 1 || !isfinite(f)) return RAD_E_ARG;
    ScaleCtx c = {&a->args[0], a->n, N, (float)f};
    if (!ref_buf_ok(c.x, (uint64_t)c.M, (uint64_t)N)) return RAD_E_SHAPE;
    int nth = ref_threads(a, (double)c.M * (double)N, 65536.0);
    if (nth > c.M) nth = (int)c.M;
    ref_parallel(a, nth, scale_task, &c);
    return RAD_OK;
}

/* add_bias: x += bias on every row, in place (the add's row function, the bias as its b). */
int ref_run_add_bias(const RadKernelArgs *a) {
    int rc = ref_preamble(a, 2);
    if (rc) return rc;
    int64_t N;
    if (!ref_pint(a, "N", &N) || N < 1) return RAD_E_ARG;
    const RadKArg *w = &a->args[0];
    EwCtx c;
    c.a = c.out = &a->args[1];
    c.b = NULL;
    c.M = a->n;
    c.N = N;
    if (!ref_weight_ok(w, RAD_ENC_PLAIN_FLOATS, 1, (uint64_t)N) || !ref_buf_ok(c.a, (uint64_t)c.M, (uint64_t)N))
        return RAD_E_SHAPE;
    c.isa = ref_isa(a);
    if (!(c.bias = ref_weight_f32(c.isa, w, (uint64_t)N))) return RAD_E_NOMEM;
    c.row = add_generic;
#if REF_X86
    if (c.isa >= REF_ISA_AVX2) c.row = add_avx2;
#endif
    int nth = ref_threads(a, (double)c.M * (double)N, 65536.0);
    if (nth > c.M) nth = (int)c.M;
    ref_parallel(a, nth, ew_task, &c);
    return RAD_OK;
}
int ref_run_silu_mul(const RadKernelArgs *a) { return run_ew(a, EW_SILU); }

