/* r4d_gemv.cu — decode GEMMs (M <= 8): y[m] = x[m] · Wᵀ reading each weight byte once for all
 * the call's rows.
 *
 * One warp per output column n (a row of W), four warps a block; lane l takes the row's 32-element
 * groups l, l + 32, ... (a GGML block, or a 32-element part of a K-quant super-block), so a
 * warp's loads cover consecutive blocks. Two variants:
 *   gemv  weights decoded exactly as rad_dequant (r4d_dec_group; block-scaled f8 as code · scale,
 *         r4d_dec_f8), f32 products and sums, a lane's partial sums then the warp's tree:
 *         TOLERANCE 1e-4 (OPS.md, exact dequantisation).
 *   q8    x quantised per 32-element block (docs/OPS.md "Quantised activations": amax / 127 in f32,
 *         codes rounded to nearest), weight codes times x codes summed exactly in integers per
 *         group (dp4a over the codes packed four to a word), scaled in f32: RAD_EXACT_Q8ACT. */
#include <string.h>

#include "r4d.cuh"

#define WARPS 4

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* One GEMM part as the kernels see it. */
struct Part {
    const uint8_t *w;
    uint64_t w_stride;
    int enc;
    int64_t n;
    float *y;
    uint64_t y_stride;
    const float *scale;           /* block-scaled f8: the scale plane (NULL otherwise) */
};
struct Parts {
    Part p[3];
    int np;
};

__device__ __forceinline__ int find_part(const Parts &ps, int64_t col, int64_t *local) {
    int i = 0;
    while (i < ps.np - 1 && col >= ps.p[i].n) col -= ps.p[i].n, i++;
    *local = col;
    return i;
}

/* ---- exact ----------------------------------------------------------------------------------------- */

/* What a launch's parts are: GGML groups of 32, plain f32/f16/bf16 rows or f8 codes 8 elements a
 * group (an f8 group lies in one 128-column block: one scale). */
enum { K_GGML = 0, K_PLAIN = 1, K_F8 = 2 };
template <int KIND>
__global__ void k_gemv(Parts ps, int64_t n_total, const float *x, uint64_t xs, int M, int64_t K) {
    constexpr int PER = KIND == K_GGML ? 32 : 8;
    const int64_t col = (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (col >= n_total) return;
    int64_t n;
    const Part &P = ps.p[find_part(ps, col, &n)];
    const uint8_t *row = P.w + (uint64_t)n * P.w_stride;
    float acc[R4D_GEMV_MAX_ROWS];
#pragma unroll
    for (int m = 0; m < R4D_GEMV_MAX_ROWS; m++) acc[m] = 0.0f;
    float v[PER];
    const int64_t groups = K / PER;
    const float *srow = KIND == K_F8 ? r4d_f8_srow(P.scale, (uint64_t)n, (uint64_t)K) : NULL;
    for (int64_t g = lane; g < groups; g += 32) {
        if (KIND == K_F8) {
#pragma unroll
            for (int j = 0; j < PER; j++) v[j] = r4d_dec_f8(row, srow, g * PER + j);
        } else if (KIND == K_PLAIN) {
#pragma unroll
            for (int j = 0; j < PER; j++) v[j] = r4d_dec_plain(P.enc, row, g * PER + j);
        } else {
            r4d_dec_group(P.enc, row, g, v);
        }
#pragma unroll
        for (int m = 0; m < R4D_GEMV_MAX_ROWS; m++) {
            if (m >= M) break;
            const float *xr = x + (uint64_t)m * xs + g * PER;
            float s = 0.0f;
#pragma unroll
            for (int j = 0; j < PER; j++) s = fmaf(xr[j], v[j], s);
            acc[m] += s;
        }
    }
#pragma unroll
    for (int m = 0; m < R4D_GEMV_MAX_ROWS; m++) {
        if (m >= M) break;
        const float s = warp_sum(acc[m]);
        if (!lane) P.y[(uint64_t)m * P.y_stride + n] = s;
    }
}

/* ---- q8 activations -------------------------------------------------------------------------------------- */

/* x's rows as q8 blocks: codes [M][K], scales d [M][K/32] (f32), code sums [M][K/32]. One warp a block. */
__global__ void k_quant_q8(const float *x, uint64_t xs, int64_t K, int8_t *q, float *d, int *qsum) {
    const int64_t blk = (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5), nb = K / 32;
    const int m = blockIdx.y, lane = threadIdx.x & 31;
    if (blk >= nb) return;
    const float v = x[(uint64_t)m * xs + blk * 32 + lane];
    float amax = fabsf(v);
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float db = __fdiv_rn(amax, 127.0f), id = db > 0.0f ? __fdiv_rn(1.0f, db) : 0.0f;
    const int c = __float2int_rn(__fmul_rn(v, id));
    q[(uint64_t)m * K + blk * 32 + lane] = (int8_t)c;
    int s = c;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (!lane) d[(uint64_t)m * nb + blk] = db, qsum[(uint64_t)m * nb + blk] = s;
}

__global__ void k_gemv_q8(Parts ps, int64_t n_total, const int8_t *q, const float *d, const int *qsum, int M, int64_t K) {
    const int64_t col = (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5), nb = K / 32;
    const int lane = threadIdx.x & 31;
    if (col >= n_total) return;
    int64_t n;
    const Part &P = ps.p[find_part(ps, col, &n)];
    const uint8_t *row = P.w + (uint64_t)n * P.w_stride;
    float acc[R4D_GEMV_MAX_ROWS];
#pragma unroll
    for (int m = 0; m < R4D_GEMV_MAX_ROWS; m++) acc[m] = 0.0f;
    int c[32];
    for (int64_t g = lane; g < nb; g += 32) {
        float s0, s1, b;
        r4d_dec_codes(P.enc, row, g, c, &s0, &s1, &b);
        int cp[8]; /* the codes as 4 signed bytes a word (every encoding's codes fit in i8), for dp4a */
#pragma unroll
        for (int j = 0; j < 8; j++)
            cp[j] = (int)((uint32_t)(c[4 * j] & 0xff) | (uint32_t)(c[4 * j + 1] & 0xff) << 8 | (uint32_t)(c[4 * j + 2] & 0xff) << 16 |
                          (uint32_t)(c[4 * j + 3] & 0xff) << 24);
#pragma unroll
        for (int m = 0; m < R4D_GEMV_MAX_ROWS; m++) {
            if (m >= M) break;
            const int *xq = (const int *)(q + (uint64_t)m * K + g * 32); /* 32-byte aligned: K is a multiple of 32 */
            int lo = 0, hi = 0;
#pragma unroll
            for (int j = 0; j < 4; j++) lo = __dp4a(cp[j], xq[j], lo), hi = __dp4a(cp[j + 4], xq[j + 4], hi);
            const float dx = d[(uint64_t)m * nb + g];
            acc[m] += dx * (s0 * (float)lo + s1 * (float)hi + b * (float)qsum[(uint64_t)m * nb + g]);
        }
    }
#pragma unroll
    for (int m = 0; m < R4D_GEMV_MAX_ROWS; m++) {
        if (m >= M) break;
        const float s = warp_sum(acc[m]);
        if (!lane) P.y[(uint64_t)m * P.y_stride + n] = s;
    }
}

/* ---- runs ------------------------------------------------------------------------------------------------ */

static int64_t param_k(const RadParam *p, uint32_t np) {
    for (uint32_t i = 0; i < np; i++)
        if (p[i].name && strcmp(p[i].name, "K") == 0) return p[i].lo;
    return 0;
}
extern "C" size_t r4d_gemv_q8_workspace(const RadParam *p, uint32_t np, int64_t n_max) {
    (void)n_max;
    const int64_t K = param_k(p, np);
    if (K < 32) return 0;
    return (size_t)R4D_GEMV_MAX_ROWS * ((size_t)K + 2 * (size_t)(K / 32) * 4) + 256;
}

/* The parts of a gemm_nt / logits_gemm (one) or gemm_nt2/3 call, checked: weights first, then x,
 * then the outputs. encs: what the variant reads. */
static int gather_parts(const RadKernelArgs *a, int multi, uint64_t encs, Parts *ps, const RadKArg **x, int64_t *K) {
    const int np = !multi ? 1 : a && a->n_args == 7 ? 3 : 2;
    int rc = r4d_preamble(a, (uint32_t)(2 * np + 1));
    if (rc) return rc;
    if (a->n > R4D_GEMV_MAX_ROWS) return RAD_E_SHAPE;
    static const char *names[3] = {"N0", "N1", "N2"};
    if (!r4d_pint(a, "K", K) || *K < 1) return RAD_E_ARG;
    *x = &a->args[np];
    if (!r4d_buf_ok(*x, (uint64_t)a->n, (uint64_t)*K)) return RAD_E_SHAPE;
    ps->np = np;
    for (int i = 0; i < np; i++) {
        int64_t N;
        if (!r4d_pint(a, multi ? names[i] : "N", &N) || N < 1) return RAD_E_ARG;
        const RadKArg *w = &a->args[i], *y = &a->args[np + 1 + i];
        if (!r4d_weight_ok(w, encs, 0, (uint64_t)N, (uint64_t)*K) || !r4d_buf_ok(y, (uint64_t)a->n, (uint64_t)N) ||
            !r4d_f8_whole(w))
            return RAD_E_SHAPE;
        if (y->data == (*x)->data) return RAD_E_ARG;
        ps->p[i] = Part{(const uint8_t *)w->data, w->row_stride, (int)w->dtype, N, (float *)y->data, y->row_stride,
                        r4d_f8_scale(w)};
    }
    return RAD_OK;
}

static int64_t total(const Parts &ps) {
    int64_t n = 0;
    for (int i = 0; i < ps.np; i++) n += ps.p[i].n;
    return n;
}

static int gemv(const RadKernelArgs *a, int multi) {
    Parts ps;
    const RadKArg *x;
    int64_t K;
    int rc = gather_parts(a, multi, R4D_GEMM_ENCS, &ps, &x, &K);
    if (rc) return rc;
    /* one launch per kind of part (GGML blocks, plain floats, f8): each template's loop is unrolled */
    int kind[3];
    for (int i = 0; i < ps.np; i++) {
        const int e = ps.p[i].enc;
        kind[i] = e == RAD_F8_E4M3 ? K_F8 : e == RAD_F32 || e == RAD_F16 || e == RAD_BF16 ? K_PLAIN : K_GGML;
        if (kind[i] != K_GGML && K % 8) return RAD_E_SHAPE;
    }
    R4D_GATE(a);
    for (int k = K_GGML; k <= K_F8; k++) {
        Parts sub;
        sub.np = 0;
        for (int i = 0; i < ps.np; i++)
            if (kind[i] == k) sub.p[sub.np++] = ps.p[i];
        if (!sub.np) continue;
        const int64_t nt = total(sub);
        const unsigned grid = r4d_blocks((uint64_t)nt, WARPS);
        const float *xd = (const float *)x->data;
        if (k == K_GGML) k_gemv<K_GGML><<<grid, WARPS * 32, 0, r4d_stream(a)>>>(sub, nt, xd, x->row_stride, (int)a->n, K);
        else if (k == K_PLAIN) k_gemv<K_PLAIN><<<grid, WARPS * 32, 0, r4d_stream(a)>>>(sub, nt, xd, x->row_stride, (int)a->n, K);
        else k_gemv<K_F8><<<grid, WARPS * 32, 0, r4d_stream(a)>>>(sub, nt, xd, x->row_stride, (int)a->n, K);
        R4D_LAUNCHED();
    }
    return RAD_OK;
}
extern "C" int r4d_run_gemv(const RadKernelArgs *a) { return gemv(a, 0); }
extern "C" int r4d_run_gemv_multi(const RadKernelArgs *a) { return gemv(a, 1); }

static int gemv_q8(const RadKernelArgs *a, int multi) {
    Parts ps;
    const RadKArg *x;
    int64_t K;
    int rc = gather_parts(a, multi, RAD_ENC_GGML_BLOCKS, &ps, &x, &K);
    if (rc) return rc;
    if (K % 32) return RAD_E_SHAPE;
    if (!a->workspace) return RAD_E_ARG;
    const int64_t nb = K / 32;
    int8_t *q = (int8_t *)a->workspace;
    float *d = (float *)((uint8_t *)a->workspace + (((size_t)R4D_GEMV_MAX_ROWS * (size_t)K + 15) & ~(size_t)15));
    int *qs = (int *)(d + (size_t)R4D_GEMV_MAX_ROWS * (size_t)nb);
    const cudaStream_t st = r4d_stream(a);
    R4D_GATE(a);
    k_quant_q8<<<dim3(r4d_blocks((uint64_t)nb, WARPS), (unsigned)a->n), WARPS * 32, 0, st>>>((const float *)x->data, x->row_stride, K,
                                                                                             q, d, qs);
    R4D_LAUNCHED();
    const int64_t nt = total(ps);
    k_gemv_q8<<<r4d_blocks((uint64_t)nt, WARPS), WARPS * 32, 0, st>>>(ps, nt, q, d, qs, (int)a->n, K);
    R4D_LAUNCHED();
    return RAD_OK;
}
extern "C" int r4d_run_gemv_q8(const RadKernelArgs *a) { return gemv_q8(a, 0); }
extern "C" int r4d_run_gemv_q8_multi(const RadKernelArgs *a) { return gemv_q8(a, 1); }
