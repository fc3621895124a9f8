/* r4d_gemm.cu — GEMMs of many rows through cuBLASLt: y[M, N] = x[M, K] · W[N, K]ᵀ.
 *
 * cuBLASLt is column-major; the row-major product with the checkpoint's [out, in] weight is its
 * TN case as it stands (docs/notes: A = W transposed, K×N, ld K; B = x, K×M, ld its row stride;
 * D = y, N×M, ld its row stride). Two variants:
 *   lt_f32   W dequantised exactly (rad_dequant's operations) into f32 slabs of at most 64 MiB,
 *            each an SGEMM with CUBLAS_COMPUTE_32F (no TF32): f32 products, any order of sums,
 *            OPS.md's "weights dequantised exactly": TOLERANCE 1e-4.
 *   lt_bf16  x rounded to bf16 once a call; W as bf16: the library's packed layout of a plain float
 *            (r4d_pack, load time), else slabs dequantised and rounded; bf16 tensor-core products,
 *            f32 sums: RAD_EXACT_BF16ACT.
 *   lt_fp8   block-scaled f8 weights as they are (codes, 128x128 scales: BLK128x128_32F), x quantised
 *            per row and 128-group to e4m3 (VEC128_32F scales), fp8 tensor cores, f32 out:
 *            RAD_EXACT_F8ACT. The scale layouts are PyTorch's for the same cuBLASLt modes
 *            (torch._scaled_mm with BlockWise1x128 / BlockWise128x128): the activations' scales
 *            M-contiguous per K-group, M a multiple of 4; the weight's [N/128][K/128] with the K
 *            groups padded to a multiple of 4. Not run yet: rad-kbench on a device checks it
 *            (tests/gpu/check.sh). A call it cannot take (K not whole 128-groups, N not a multiple
 *            of 16, no algorithm on this device: cuBLAS before 12.9 or not sm_90) runs as lt_bf16,
 *            whose bound lies inside F8ACT's.
 * An algorithm is chosen once per (M bucket, N, K, types) by cuBLASLt's heuristic, with the 32 MiB
 * workspace Hopper wants, and kept in the state's plan cache (r4d_host.h). */
#include <cublasLt.h>
#include <cuda_fp8.h>
#include <stdlib.h>
#include <string.h>

#include "r4d.cuh"

struct R4dPlan {
    cublasLtMatmulAlgo_t algo;
};

extern "C" void r4d_plans_free(R4dState *s) {
    for (int i = 0; i < R4D_PLAN_CAP; i++)
        if (s->plans.used[i]) free(s->plans.val[i]);
    memset(&s->plans, 0, sizeof s->plans);
}

/* The alignment of a pointer cuBLASLt may rely on (its algorithms ask up to 16 bytes): an operand
 * the engine hands over at a row offset may be aligned to its element only. */
static uint32_t align_of(const void *p) {
    const uintptr_t a = (uintptr_t)p;
    uint32_t b = 16;
    while (b > 1 && (a & (b - 1))) b >>= 1;
    return b;
}

/* D[M, N] (ld ldd, f32) = X[M, K] (ld ldx) · W[N, K]ᵀ (ld ldw), W and X of type t (f32 or bf16). */
static int lt_matmul(R4dState *s, cudaDataType_t t, const void *W, int64_t ldw, int64_t N, int64_t K, const void *X, int64_t ldx,
                     int64_t M, float *D, int64_t ldd) {
    cublasLtHandle_t lt = (cublasLtHandle_t)s->lt;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    const cublasOperation_t tr = CUBLAS_OP_T, nt = CUBLAS_OP_N;
    int rc = RAD_E_IO;
    if (cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &tr, sizeof tr) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof nt) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&la, t, (uint64_t)K, (uint64_t)N, ldw) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&lb, t, (uint64_t)K, (uint64_t)M, ldx) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, (uint64_t)N, (uint64_t)M, ldd) != CUBLAS_STATUS_SUCCESS)
        goto done;
    {
        R4dGemmKey key;
        memset(&key, 0, sizeof key);
        key.m_bucket = r4d_m_bucket(M), key.n = N, key.k = K, key.a_type = key.b_type = (int32_t)t;
        const uint32_t al_a = align_of(W), al_b = align_of(X), al_d = align_of(D);
        key.c_type = (int32_t)CUDA_R_32F, key.compute = (int32_t)CUBLAS_COMPUTE_32F;
        key.compute |= (int32_t)((al_a | al_b << 5 | al_d << 10) << 16); /* another alignment, another plan */
        R4dPlan *plan = (R4dPlan *)r4d_plan_find(&s->plans, &key), fresh;
        if (!plan) {
            const size_t ws = R4D_LT_WORKSPACE;
            cublasLtMatmulHeuristicResult_t res;
            int found = 0;
            if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS ||
                cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) !=
                    CUBLAS_STATUS_SUCCESS ||
                cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a) !=
                    CUBLAS_STATUS_SUCCESS ||
                cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b) !=
                    CUBLAS_STATUS_SUCCESS ||
                cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d) !=
                    CUBLAS_STATUS_SUCCESS ||
                cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d) !=
                    CUBLAS_STATUS_SUCCESS ||
                cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &res, &found) != CUBLAS_STATUS_SUCCESS || !found) {
                rc = RAD_E_UNSUPPORTED;
                goto done;
            }
            fresh.algo = res.algo;
            R4dPlan *keep = (R4dPlan *)malloc(sizeof *keep);
            if (keep) *keep = fresh;
            if (keep && r4d_plan_put(&s->plans, &key, keep)) free(keep); /* a full cache plans again next time */
            plan = &fresh;
        }
        const float one = 1.0f, zero = 0.0f;
        if (cublasLtMatmul(lt, op, &one, W, la, X, lb, &zero, D, ld, D, ld, &plan->algo, s->lt_ws, R4D_LT_WORKSPACE, s->stream) ==
            CUBLAS_STATUS_SUCCESS)
            rc = RAD_OK;
    }
done:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
    return rc;
}

/* Rows [r0, r0 + S) of W decoded exactly (f32), or rounded to bf16, into out [S, K]. */
__global__ void k_deq(int enc, const uint8_t *w, uint64_t stride, const float *scale, int64_t r0, int64_t K, void *out, int bf16) {
    const uint8_t *row = w + (uint64_t)(r0 + blockIdx.x) * stride;
    const uint64_t o = (uint64_t)blockIdx.x * (uint64_t)K;
    const int plain = enc == RAD_F32 || enc == RAD_F16 || enc == RAD_BF16;
    if (enc == RAD_F8_E4M3) { /* codes · their block's scale (scale NULL: the codes alone) */
        const float *srow = r4d_f8_srow(scale, (uint64_t)(r0 + blockIdx.x), (uint64_t)K);
        for (int64_t j = threadIdx.x; j < K; j += blockDim.x) {
            const float v = r4d_dec_f8(row, srow, j);
            if (bf16) ((uint16_t *)out)[o + j] = r4d_enc_bf16(v);
            else ((float *)out)[o + j] = v;
        }
        return;
    }
    if (plain) {
        for (int64_t j = threadIdx.x; j < K; j += blockDim.x) {
            const float v = r4d_dec_plain(enc, row, j);
            if (bf16) ((uint16_t *)out)[o + j] = r4d_enc_bf16(v);
            else ((float *)out)[o + j] = v;
        }
        return;
    }
    float v[32];
    for (int64_t g = threadIdx.x; g < K / 32; g += blockDim.x) {
        r4d_dec_group(enc, row, g, v);
        for (int j = 0; j < 32; j++) {
            if (bf16) ((uint16_t *)out)[o + g * 32 + j] = r4d_enc_bf16(v[j]);
            else ((float *)out)[o + g * 32 + j] = v[j];
        }
    }
}
__global__ void k_x_bf16(const float *x, uint64_t xs, int64_t K, uint16_t *out) {
    for (int64_t j = threadIdx.x; j < K; j += blockDim.x)
        out[(uint64_t)blockIdx.x * (uint64_t)K + j] = r4d_enc_bf16(x[(uint64_t)blockIdx.x * xs + j]);
}

/* ---- workspace ------------------------------------------------------------------------------------- */

static void shape_of(const RadParam *p, uint32_t np, int64_t *K, int64_t *n_max_part) {
    *K = 0, *n_max_part = 0;
    for (uint32_t i = 0; i < np; i++) {
        if (!p[i].name) continue;
        if (!strcmp(p[i].name, "K")) *K = p[i].lo;
        else if ((!strcmp(p[i].name, "N") || !strncmp(p[i].name, "N", 1)) && p[i].kind == RAD_PARAM_INT && p[i].lo > *n_max_part)
            *n_max_part = p[i].lo;
    }
}
static size_t up256(size_t n) { return (n + 255) & ~(size_t)255; }
extern "C" size_t r4d_gemm_f32_workspace(const RadParam *p, uint32_t np, int64_t n_max) {
    (void)n_max;
    int64_t K, N;
    shape_of(p, np, &K, &N);
    if (K < 1 || N < 1) return 0;
    return up256((size_t)r4d_slab_rows(N, K, 4, R4D_SLAB_BYTES) * (size_t)K * 4);
}
extern "C" size_t r4d_gemm_bf16_workspace(const RadParam *p, uint32_t np, int64_t n_max) {
    int64_t K, N;
    shape_of(p, np, &K, &N);
    if (K < 1 || N < 1) return 0;
    const int64_t rows = n_max > 0 ? n_max : 1;
    return up256((size_t)rows * (size_t)K * 2) + up256((size_t)r4d_slab_rows(N, K, 2, R4D_SLAB_BYTES) * (size_t)K * 2);
}

/* ---- runs -------------------------------------------------------------------------------------------- */

/* What every cuBLASLt GEMM run reads first: its parts (gemm_nt: 1, gemm_nt2/3: 2 or 3), its
 * state, K, x (args[np]). */
typedef struct GemmHead {
    int multi;                     /* gemm_nt2/3: parts named N0, N1, N2 (gemm_nt: N) */
    int np;
    R4dState *s;
    int64_t K;
    const RadKArg *x;
} GemmHead;
static int gemm_head(const RadKernelArgs *a, int multi, GemmHead *h) {
    h->multi = multi;
    h->np = !multi ? 1 : a && a->n_args == 7 ? 3 : 2;
    const int rc = r4d_preamble(a, (uint32_t)(2 * h->np + 1));
    if (rc) return rc;
    h->s = r4d_state(a);
    if (!h->s || !a->workspace) return RAD_E_ARG;
    if (!r4d_pint(a, "K", &h->K) || h->K < 1) return RAD_E_ARG;
    h->x = &a->args[h->np];
    return RAD_OK;
}

static int lt_body(const RadKernelArgs *a, const GemmHead *h, int bf16) {
    int rc;
    const int np = h->np;
    R4dState *s = h->s;
    const int64_t K = h->K;
    const RadKArg *x = h->x;
    const uint64_t M = (uint64_t)a->n;
    if (!r4d_buf_ok(x, M, (uint64_t)K)) return RAD_E_SHAPE;
    static const char *names[3] = {"N0", "N1", "N2"};
    int64_t N[3];
    for (int i = 0; i < np; i++) { /* every part checked before anything is launched */
        const RadKArg *w = &a->args[i], *y = &a->args[np + 1 + i];
        if (!r4d_pint(a, h->multi ? names[i] : "N", &N[i]) || N[i] < 1) return RAD_E_ARG;
        if (!r4d_weight_ok(w, R4D_GEMM_ENCS, bf16, (uint64_t)N[i], (uint64_t)K) || !r4d_buf_ok(y, M, (uint64_t)N[i]) ||
            !r4d_f8_whole(w))
            return RAD_E_SHAPE;
        if (y->data == x->data) return RAD_E_ARG;
        const int base = (int)(w->dtype & ~RAD_PACKED);
        if (!(base == RAD_F32 || base == RAD_F16 || base == RAD_BF16 || base == RAD_F8_E4M3) && K % 32) return RAD_E_SHAPE;
    }
    R4D_GATE(a);
    uint8_t *ws = (uint8_t *)a->workspace;
    const void *X = x->data;
    int64_t ldx = (int64_t)x->row_stride;
    if (bf16) { /* x rounded once for every part */
        k_x_bf16<<<(unsigned)M, 256, 0, s->stream>>>((const float *)x->data, x->row_stride, K, (uint16_t *)ws);
        R4D_LAUNCHED();
        X = ws, ldx = K;
        ws += up256((size_t)M * (size_t)K * 2);
    }
    const cudaDataType_t t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    const size_t el = bf16 ? 2 : 4;
    for (int i = 0; i < np; i++) {
        const RadKArg *w = &a->args[i], *y = &a->args[np + 1 + i];
        if (bf16 && (w->dtype & RAD_PACKED)) { /* the packed bf16 rows: the weight as it is */
            if ((rc = lt_matmul(s, t, w->data, K, N[i], K, X, ldx, (int64_t)M, (float *)y->data, (int64_t)y->row_stride))) return rc;
            continue;
        }
        if ((int)w->dtype == (bf16 ? RAD_BF16 : RAD_F32) && w->row_stride % el == 0) { /* stored in the GEMM's type: no slab */
            if ((rc = lt_matmul(s, t, w->data, (int64_t)(w->row_stride / el), N[i], K, X, ldx, (int64_t)M, (float *)y->data,
                                (int64_t)y->row_stride)))
                return rc;
            continue;
        }
        const int64_t S = r4d_slab_rows(N[i], K, el, R4D_SLAB_BYTES);
        for (int64_t r0 = 0; r0 < N[i]; r0 += S) {
            const int64_t rows = N[i] - r0 < S ? N[i] - r0 : S;
            k_deq<<<(unsigned)rows, 128, 0, s->stream>>>((int)w->dtype, (const uint8_t *)w->data, w->row_stride, r4d_f8_scale(w), r0,
                                                          K, ws, bf16);
            R4D_LAUNCHED();
            if ((rc = lt_matmul(s, t, ws, K, rows, K, X, ldx, (int64_t)M, (float *)y->data + r0, (int64_t)y->row_stride))) return rc;
        }
    }
    return RAD_OK;
}
static int lt_run(const RadKernelArgs *a, int multi, int bf16) {
    GemmHead h;
    const int rc = gemm_head(a, multi, &h);
    return rc ? rc : lt_body(a, &h, bf16);
}
extern "C" int r4d_run_gemm_f32(const RadKernelArgs *a) { return lt_run(a, 0, 0); }
extern "C" int r4d_run_gemm_f32_multi(const RadKernelArgs *a) { return lt_run(a, 1, 0); }
extern "C" int r4d_run_gemm_bf16(const RadKernelArgs *a) { return lt_run(a, 0, 1); }
extern "C" int r4d_run_gemm_bf16_multi(const RadKernelArgs *a) { return lt_run(a, 1, 1); }

/* ---- lt_fp8: fp8 tensor cores on block-scaled f8 weights --------------------------------------------- */

/* Rows [0, Mc) of x (row stride xs) quantised per 128-group to e4m3 (scale amax / 448, nearest
 * even, saturating): codes [Mp][K] (rows from Mc on zero), scales [K/128][Mp], M contiguous. One
 * block of 128 threads per (row, group). */
__global__ void k_x_f8(const float *x, uint64_t xs, int64_t Mc, int64_t Mp, int64_t K, __nv_fp8_storage_t *codes, float *sc) {
    const int64_t i = blockIdx.x, g = blockIdx.y;
    const int t = threadIdx.x;
    const float v = i < Mc ? x[(uint64_t)i * xs + (uint64_t)(g * 128 + t)] : 0.0f;
    float m = fabsf(v);
    for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    __shared__ float warp_max[4];
    if ((t & 31) == 0) warp_max[t >> 5] = m;
    __syncthreads();
    const float amax = fmaxf(fmaxf(warp_max[0], warp_max[1]), fmaxf(warp_max[2], warp_max[3]));
    const float sg = __fdiv_rn(amax, 448.0f);
    codes[(uint64_t)i * (uint64_t)K + (uint64_t)(g * 128 + t)] =
        sg > 0 ? __nv_cvt_float_to_fp8(__fdiv_rn(v, sg), __NV_SATFINITE, __NV_E4M3) : (__nv_fp8_storage_t)0;
    if (t == 0) sc[g * Mp + i] = sg;
}

/* A plan for D[Mp, N] (f32, ld ldd) = X8[Mp, K] · W8[N, K]ᵀ with the two scale modes. The scale
 * pointers are set per call on the returned descriptor. RAD_E_UNSUPPORTED: no algorithm here. */
typedef struct F8Call {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
} F8Call;
static void f8_call_free(F8Call *c) {
    if (c->ld) cublasLtMatrixLayoutDestroy(c->ld);
    if (c->lb) cublasLtMatrixLayoutDestroy(c->lb);
    if (c->la) cublasLtMatrixLayoutDestroy(c->la);
    if (c->op) cublasLtMatmulDescDestroy(c->op);
    memset(c, 0, sizeof *c);
}
static int f8_call_init(R4dState *s, int64_t N, int64_t K, int64_t Mp, int64_t ldd, const float *D, F8Call *c) {
    memset(c, 0, sizeof *c);
    const cublasOperation_t tr = CUBLAS_OP_T, nt = CUBLAS_OP_N;
    const int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    if (cublasLtMatmulDescCreate(&c->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_TRANSA, &tr, sizeof tr) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof nt) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof a_mode) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof b_mode) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&c->la, CUDA_R_8F_E4M3, (uint64_t)K, (uint64_t)N, K) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&c->lb, CUDA_R_8F_E4M3, (uint64_t)K, (uint64_t)Mp, K) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&c->ld, CUDA_R_32F, (uint64_t)N, (uint64_t)Mp, ldd) != CUBLAS_STATUS_SUCCESS)
        return f8_call_free(c), RAD_E_IO;
    R4dGemmKey key;
    memset(&key, 0, sizeof key);
    const uint32_t al_d = align_of(D);
    key.m_bucket = r4d_m_bucket(Mp), key.n = N, key.k = K, key.a_type = key.b_type = (int32_t)CUDA_R_8F_E4M3;
    key.c_type = (int32_t)CUDA_R_32F, key.compute = (int32_t)CUBLAS_COMPUTE_32F | (int32_t)(al_d << 16);
    const R4dPlan *plan = (const R4dPlan *)r4d_plan_find(&s->plans, &key);
    if (plan) return c->algo = plan->algo, RAD_OK;
    cublasLtMatmulPreference_t pref = NULL;
    const size_t ws = R4D_LT_WORKSPACE;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    const int ok = cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS &&
                   cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) ==
                       CUBLAS_STATUS_SUCCESS &&
                   cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d) ==
                       CUBLAS_STATUS_SUCCESS &&
                   cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)s->lt, c->op, c->la, c->lb, c->ld, c->ld, pref, 1, &res,
                                                  &found) == CUBLAS_STATUS_SUCCESS &&
                   found;
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (!ok) return f8_call_free(c), RAD_E_UNSUPPORTED;
    c->algo = res.algo;
    R4dPlan *keep = (R4dPlan *)malloc(sizeof *keep);
    if (keep) keep->algo = res.algo;
    if (keep && r4d_plan_put(&s->plans, &key, keep)) free(keep);
    return RAD_OK;
}
static int f8_call_run(R4dState *s, F8Call *c, const void *W8, const float *wsc, const void *X8, const float *xsc, float *D) {
    const float one = 1.0f, zero = 0.0f;
    if (cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &wsc, sizeof wsc) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &xsc, sizeof xsc) != CUBLAS_STATUS_SUCCESS)
        return RAD_E_IO;
    return cublasLtMatmul((cublasLtHandle_t)s->lt, c->op, &one, W8, c->la, X8, c->lb, &zero, D, c->ld, D, c->ld, &c->algo,
                          s->lt_ws, R4D_LT_WORKSPACE, s->stream) == CUBLAS_STATUS_SUCCESS
               ? RAD_OK
               : RAD_E_IO;
}

static int64_t up4(int64_t n) { return (n + 3) & ~(int64_t)3; }

/* The workspace: x's codes and scales for the rows (the head a multiple of 4, the tail padded to
 * 4), a weight's scales with their K groups padded to 4, the tail's output, and lt_bf16's (the
 * fallback). */
extern "C" size_t r4d_gemm_f8_workspace(const RadParam *p, uint32_t np, int64_t n_max) {
    int64_t K, N;
    shape_of(p, np, &K, &N);
    if (K < 1 || N < 1) return 0;
    const int64_t rows = up4(n_max > 0 ? n_max : 1) + 4, kb = (K + 127) / 128, nb = (N + 127) / 128;
    const size_t f8 = up256((size_t)rows * (size_t)K) + up256((size_t)(kb * rows) * 4) + up256((size_t)(nb * up4(kb)) * 4) +
                      up256((size_t)(4 * N) * 4);
    const size_t bf = r4d_gemm_bf16_workspace(p, np, n_max);
    return f8 > bf ? f8 : bf;
}

static int f8_body(const RadKernelArgs *a, const GemmHead *h) {
    int rc = RAD_OK;
    const int np = h->np;
    R4dState *s = h->s;
    const int64_t K = h->K;
    const RadKArg *x = h->x;
    const int64_t M = a->n, M4 = M & ~(int64_t)3, tail = M - M4, kb = K / 128;
    static const char *names[3] = {"N0", "N1", "N2"};
    int64_t N[3];
    int take = K % 128 == 0;
    for (int i = 0; i < np; i++) {
        const RadKArg *w = &a->args[i], *y = &a->args[np + 1 + i];
        if (!r4d_pint(a, h->multi ? names[i] : "N", &N[i]) || N[i] < 1) return RAD_E_ARG;
        take = take && w->dtype == RAD_F8_E4M3 && r4d_f8_scale(w) && w->row_stride == (uint64_t)K && N[i] % 16 == 0 &&
               y->row_stride % 4 == 0 && y->data != x->data;
    }
    if (!take) return lt_body(a, h, 1); /* checks everything and refuses what is wrong */
    if (!r4d_buf_ok(x, (uint64_t)M, (uint64_t)K)) return RAD_E_SHAPE;
    int64_t nmax = 0;
    for (int i = 0; i < np; i++) {
        const RadKArg *w = &a->args[i], *y = &a->args[np + 1 + i];
        if (!r4d_weight_ok(w, RAD_ENC_BIT(RAD_ENC_F8_E4M3), 0, (uint64_t)N[i], (uint64_t)K) || !r4d_buf_ok(y, (uint64_t)M, (uint64_t)N[i]))
            return RAD_E_SHAPE;
        nmax = N[i] > nmax ? N[i] : nmax;
    }
    /* every plan before any launch: a device without an algorithm takes lt_bf16 for the whole call */
    F8Call head[3], tl[3];
    memset(head, 0, sizeof head), memset(tl, 0, sizeof tl);
    uint8_t *ws = (uint8_t *)a->workspace;
    __nv_fp8_storage_t *xh = (__nv_fp8_storage_t *)ws, *xt = xh + M4 * K;
    ws += up256((size_t)(up4(M) + 4) * (size_t)K);
    float *sh = (float *)ws, *st = sh + kb * M4;
    ws += up256((size_t)(kb * (up4(M) + 4)) * 4);
    float *wsc = (float *)ws;
    ws += up256((size_t)(((nmax + 127) / 128) * up4(kb)) * 4);
    float *dt = (float *)ws;
    for (int i = 0; i < np && !rc; i++) {
        const RadKArg *y = &a->args[np + 1 + i];
        if (M4) rc = f8_call_init(s, N[i], K, M4, (int64_t)y->row_stride, (const float *)y->data, &head[i]);
        if (!rc && tail) rc = f8_call_init(s, N[i], K, 4, N[i], dt, &tl[i]);
    }
    if (rc) {
        for (int i = 0; i < np; i++) f8_call_free(&head[i]), f8_call_free(&tl[i]);
        return rc == RAD_E_UNSUPPORTED ? lt_body(a, h, 1) : rc;
    }
    R4D_GATE(a);
    /* x quantised once for every part: the head's rows, then the tail's padded to 4 */
    if (M4) k_x_f8<<<dim3((unsigned)M4, (unsigned)kb), 128, 0, s->stream>>>((const float *)x->data, x->row_stride, M4, M4, K, xh, sh);
    if (tail)
        k_x_f8<<<dim3(4, (unsigned)kb), 128, 0, s->stream>>>((const float *)x->data + (uint64_t)M4 * x->row_stride, x->row_stride,
                                                               tail, 4, K, xt, st);
    rc = cudaGetLastError() == cudaSuccess ? RAD_OK : RAD_E_IO;
    for (int i = 0; i < np && !rc; i++) {
        const RadKArg *w = &a->args[i], *y = &a->args[np + 1 + i];
        const float *wscale = r4d_f8_scale(w);
        if (kb % 4) { /* the weight's K groups padded to a multiple of 4, as cuBLASLt's 128x128 mode reads them */
            const int64_t nb = (N[i] + 127) / 128;
            if (cudaMemcpy2DAsync(wsc, (size_t)up4(kb) * 4, wscale, (size_t)kb * 4, (size_t)kb * 4, (size_t)nb, cudaMemcpyDeviceToDevice,
                                  s->stream) != cudaSuccess)
                rc = RAD_E_IO;
            wscale = wsc;
        }
        if (!rc && M4) rc = f8_call_run(s, &head[i], w->data, wscale, xh, sh, (float *)y->data);
        if (!rc && tail) {
            rc = f8_call_run(s, &tl[i], w->data, wscale, xt, st, dt);
            if (!rc && cudaMemcpy2DAsync((float *)y->data + (uint64_t)M4 * y->row_stride, y->row_stride * 4, dt, (size_t)N[i] * 4,
                                         (size_t)N[i] * 4, (size_t)tail, cudaMemcpyDeviceToDevice, s->stream) != cudaSuccess)
                rc = RAD_E_IO;
        }
    }
    for (int i = 0; i < np; i++) f8_call_free(&head[i]), f8_call_free(&tl[i]);
    return rc;
}
static int f8_run(const RadKernelArgs *a, int multi) {
    GemmHead h;
    const int rc = gemm_head(a, multi, &h);
    return rc ? rc : f8_body(a, &h);
}
extern "C" int r4d_run_gemm_f8(const RadKernelArgs *a) { return f8_run(a, 0); }
extern "C" int r4d_run_gemm_f8_multi(const RadKernelArgs *a) { return f8_run(a, 1); }
