/* ref_norm.c — rmsnorm, the fused add_rmsnorm and head_rmsnorm (docs/OPS.md). head_rmsnorm is
 * rmsnorm over each head_dim slice of a row, in place: the same row code over M·n_head slices.
 *
 * Two variants of each:
 *   "exact" — RAD_EXACT_BITWISE: the sum of squares runs in index order in f32 with each
 *             square rounded before it is added, exactly as the reference; everything else is
 *             elementwise (x * r, then * gamma, two roundings), done 8 lanes at a time with the
 *             same roundings.
 *   "simd"  — RAD_EXACT_TOLERANCE 1e-5 (the bound for a kernel that only reorders the sum): the
 *             sum of squares in 32 lanes combined by a fixed tree (batch-invariant, the same
 *             for any thread count); the rest as "exact".
 * Rows are split across threads when the call is large enough to pay for it. */
#include <math.h>

#include "ref_common.h"
#include "ref_quant.h"

typedef struct NormCtx {
    const RadKArg *x, *res, *out;
    const float *gamma;
    int64_t M, N;             /* slices to normalise, and their width */
    int64_t heads;            /* slices per row of x/out (head_rmsnorm: n_head; else 1) */
    float eps;
    int isa, simd, fused;
} NormCtx;

static float sumsq_serial(const float *x, int64_t N) {
    float ss = 0.0f;
    for (int64_t j = 0; j < N; j++) {
        const float sq = x[j] * x[j];
        ss = ss + sq;
    }
    return ss;
}

static float sumsq_tree_generic(const float *x, int64_t N) {
    float a[32] = {0};
    int64_t j = 0;
    for (; j + 32 <= N; j += 32)
        for (int l = 0; l < 32; l++) {
            const float sq = x[j + l] * x[j + l];
            a[l] = a[l] + sq;
        }
    for (int l = 0; j + l < N; l++) {
        const float sq = x[j + l] * x[j + l];
        a[l] = a[l] + sq;
    }
    for (int w = 16; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) a[l] = a[l] + a[l + w];
    return a[0];
}

static void scale_generic(const float *x, const float *g, float *out, int64_t N, float r) {
    for (int64_t j = 0; j < N; j++) {
        const float xr = x[j] * r;
        out[j] = xr * g[j];
    }
}

static void add_generic(float *res, const float *x, int64_t N) {
    for (int64_t j = 0; j < N; j++) res[j] = res[j] + x[j];
}

#if REF_X86
REF_AVX2 static float sumsq_tree_avx2(const float *x, int64_t N) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t j = 0;
    for (; j + 32 <= N; j += 32) {
        const __m256 v0 = _mm256_loadu_ps(x + j), v1 = _mm256_loadu_ps(x + j + 8);
        const __m256 v2 = _mm256_loadu_ps(x + j + 16), v3 = _mm256_loadu_ps(x + j + 24);
        a0 = _mm256_fmadd_ps(v0, v0, a0);
        a1 = _mm256_fmadd_ps(v1, v1, a1);
        a2 = _mm256_fmadd_ps(v2, v2, a2);
        a3 = _mm256_fmadd_ps(v3, v3, a3);
    }
    for (; j + 8 <= N; j += 8) {
        const __m256 v = _mm256_loadu_ps(x + j);
        a0 = _mm256_fmadd_ps(v, v, a0);
    }
    if (j < N) {
        const __m256 v = ref_load_tail(x + j, (int)(N - j));
        a0 = _mm256_fmadd_ps(v, v, a0);
    }
    return ref_hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

REF_AVX2 static void scale_avx2(const float *x, const float *g, float *out, int64_t N, float r) {
    const __m256 vr = _mm256_set1_ps(r);
    int64_t j = 0;
    for (; j + 8 <= N; j += 8) {
        const __m256 xr = _mm256_mul_ps(_mm256_loadu_ps(x + j), vr); /* two roundings, as the reference */
        _mm256_storeu_ps(out + j, _mm256_mul_ps(xr, _mm256_loadu_ps(g + j)));
    }
    for (; j < N; j++) {
        const float xr = x[j] * r;
        out[j] = xr * g[j];
    }
}

REF_AVX2 static void add_avx2(float *res, const float *x, int64_t N) {
    int64_t j = 0;
    for (; j + 8 <= N; j += 8) _mm256_storeu_ps(res + j, _mm256_add_ps(_mm256_loadu_ps(res + j), _mm256_loadu_ps(x + j)));
    for (; j < N; j++) res[j] = res[j] + x[j];
}
#endif

static void norm_row(const NormCtx *c, int64_t i) {
    const int64_t row = i / c->heads, off = (i % c->heads) * c->N;
    const float *x = ref_frow(c->x, (uint64_t)row) + off;
    float *out = ref_frow(c->out, (uint64_t)row) + off;
    const int avx2 = REF_X86 && c->isa >= REF_ISA_AVX2;
    if (c->fused) { /* res = res + x; then normalise res (out may be x: x is read first) */
        float *res = ref_frow(c->res, (uint64_t)i);
#if REF_X86
        if (avx2) add_avx2(res, x, c->N);
        else
#endif
            add_generic(res, x, c->N);
        x = res;
    }
    float ss;
    if (!c->simd) ss = sumsq_serial(x, c->N);
#if REF_X86
    else if (avx2) ss = sumsq_tree_avx2(x, c->N);
#endif
    else ss = sumsq_tree_generic(x, c->N);
    const float mean = ss / (float)c->N;
    const float r = 1.0f / sqrtf(mean + c->eps);
#if REF_X86
    if (avx2) {
        scale_avx2(x, c->gamma, out, c->N, r);
        return;
    }
#endif
    (void)avx2;
    scale_generic(x, c->gamma, out, c->N, r);
}

static void norm_task(void *ctx, int tid, int nth) {
    const NormCtx *c = ctx;
    int64_t r0, r1;
    ref_split(c->M, tid, nth, 1, &r0, &r1);
    for (int64_t i = r0; i < r1; i++) norm_row(c, i);
}

static int run_norm(const RadKernelArgs *a, int fused, int simd) {
    const uint32_t n_args = fused ? 4 : 3;
    int rc = ref_preamble(a, n_args);
    if (rc) return rc;
    int64_t N;
    double eps;
    if (!ref_pint(a, "N", &N) || !ref_pflt(a, "eps", &eps) || N < 1 || !(eps >= 0.0)) return RAD_E_ARG;
    NormCtx c;
    const RadKArg *g = &a->args[0];
    c.x = &a->args[1];
    c.res = fused ? &a->args[2] : NULL;
    c.out = &a->args[n_args - 1];
    c.M = a->n;
    c.N = N;
    c.heads = 1;
    c.eps = (float)eps;
    c.isa = ref_isa(a);
    c.simd = simd;
    c.fused = fused;
    if (!ref_weight_ok(g, RAD_ENC_PLAIN_FLOATS, 1, (uint64_t)N)) return RAD_E_SHAPE;
    if (!ref_buf_ok(c.x, (uint64_t)c.M, (uint64_t)N) || !ref_buf_ok(c.out, (uint64_t)c.M, (uint64_t)N)) return RAD_E_SHAPE;
    if (fused && !ref_buf_ok(c.res, (uint64_t)c.M, (uint64_t)N)) return RAD_E_SHAPE;
    if (!(c.gamma = ref_weight_f32(c.isa, g, (uint64_t)N))) return RAD_E_NOMEM;
    int nth = ref_threads(a, (double)c.M * (double)N, 32768.0);
    ref_parallel(a, nth, norm_task, &c);
    return RAD_OK;
}

/* head_rmsnorm: gamma, x [M, n_head·head_dim] in place. */
static int run_head_norm(const RadKernelArgs *a, int simd) {
    int rc = ref_preamble(a, 2);
    if (rc) return rc;
    int64_t nh, hd;
    double eps;
    if (!ref_pint(a, "n_head", &nh) || !ref_pint(a, "head_dim", &hd) || !ref_pflt(a, "eps", &eps) || nh < 1 || hd < 1 ||
        !(eps >= 0.0))
        return RAD_E_ARG;
    NormCtx c;
    const RadKArg *g = &a->args[0];
    c.x = c.out = &a->args[1];
    c.res = NULL;
    c.M = a->n * nh;
    c.N = hd;
    c.heads = nh;
    c.eps = (float)eps;
    c.isa = ref_isa(a);
    c.simd = simd;
    c.fused = 0;
    if (!ref_weight_ok(g, RAD_ENC_PLAIN_FLOATS, 1, (uint64_t)hd)) return RAD_E_SHAPE;
    if (!ref_buf_ok(c.x, (uint64_t)a->n, (uint64_t)(nh * hd))) return RAD_E_SHAPE;
    if (!(c.gamma = ref_weight_f32(c.isa, g, (uint64_t)hd))) return RAD_E_NOMEM;
    int nth = ref_threads(a, (double)c.M * (double)hd, 32768.0);
    ref_parallel(a, nth, norm_task, &c);
    return RAD_OK;
}

int ref_run_head_rmsnorm(const RadKernelArgs *a) { return run_head_norm(a, 0); }
int ref_run_head_rmsnorm_simd(const RadKernelArgs *a) { return run_head_norm(a, 1); }
int ref_run_rmsnorm(const RadKernelArgs *a) { return run_norm(a, 0, 0); }
int ref_run_rmsnorm_simd(const RadKernelArgs *a) { return run_norm(a, 0, 1); }
int ref_run_add_rmsnorm(const RadKernelArgs *a) { return run_norm(a, 1, 0); }
int ref_run_add_rmsnorm_simd(const RadKernelArgs *a) { return run_norm(a, 1, 1); }
