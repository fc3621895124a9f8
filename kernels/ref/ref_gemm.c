/* ref_gemm.c — gemm_nt and logits_gemm, variant "exact": y = x · Wᵀ with the weights decoded
 * exactly (bit-identical to rad_dequant) and f32 products accumulated in f32.
 *
 * Every output y[i][n] is one dot product with one fixed reduction order, whatever the kernel
 * shape, the row count or the threads: eight lanes, lane l summing k ≡ l (mod 8) in ascending
 * k (with FMA on AVX2, with a rounded product then an add in portable C), then ref_hsum8's tree.
 * So the result is batch-invariant and the same for any thread count; it is not the
 * reference's serial order, hence RAD_EXACT_TOLERANCE 1e-4 (docs/OPS.md, gemm_nt: weights
 * dequantised exactly, f32 accumulation in any order).
 *
 * Work split: output columns N in contiguous ranges, one per part (thread), so a single row
 * (decode) uses every thread. One row (M = 1) takes NC = 4 columns at a time: f32 weights are read in
 * place, f16/bf16/q8_0/q4_0/q4_1 are decoded 32 elements at a time in registers, the other
 * encodings a chunk of CH = 256 elements at a time into an L1 buffer. More rows
 * (prefill) decode a tile of columns × all K once into a per-thread buffer (L2-sized) and run a
 * 4-row × 3-column register-blocked dot kernel over every row of x against it, so each weight is
 * decoded and read once per call. */
#include <stdlib.h>

#include "ref_gemm.h"
#include "ref_quant.h"

#define CH 256        /* K chunk of the one-row path: a multiple of 8 and of every block */
#define NC 4          /* columns at a time on the one-row path */
#define TILE_BYTES (96 * 1024) /* decoded tile of the many-row path */

typedef struct ExactCtx {
    RefGemmArgs g;
    int isa;
    int plain;        /* f32 weights: read in place, nothing decoded */
    int64_t pf_bytes; /* one-row path: rows about this far ahead are prefetched (the prefetch knob) */
} ExactCtx;


/* ---- portable C -------------------------------------------------------------------------------- */

static void exact_generic(const ExactCtx *c, int64_t c0, int64_t c1) {
    const RefGemmArgs *g = &c->g;
    const RadDType e = g->w->dtype;
    float *row = c->plain ? NULL : ref_scratch(0, (size_t)g->K * sizeof(float));
    float chunk[CH];
    for (int64_t n = c0; n < c1; n++) {
        const uint8_t *wr = ref_wrow(g->w, (uint64_t)n);
        if (c->plain || row) {
            const float *w = (const float *)(const void *)wr;
            if (!c->plain) {
                ref_dq_row_generic((int)e, wr, row, (uint64_t)g->K);
                w = row;
            }
            for (int64_t i = 0; i < g->M; i++) {
                float acc[8] = {0};
                ref_dot8_acc(ref_frow(g->x, (uint64_t)i), w, g->K, acc);
                ref_frow(g->y, (uint64_t)i)[n] = ref_red8(acc);
            }
        } else { /* no scratch: a chunk at a time on the stack, decoded again for each row */
            for (int64_t i = 0; i < g->M; i++) {
                float acc[8] = {0};
                const float *x = ref_frow(g->x, (uint64_t)i);
                for (int64_t k0 = 0; k0 < g->K; k0 += CH) {
                    const int64_t kn = g->K - k0 < CH ? g->K - k0 : CH;
                    ref_dequant_range(REF_ISA_GENERIC, e, wr, k0, kn, chunk);
                    ref_dot8_acc(x + k0, chunk, kn, acc);
                }
                ref_frow(g->y, (uint64_t)i)[n] = ref_red8(acc);
            }
        }
    }
}

/* ---- AVX2 + FMA -------------------------------------------------------------------------------- */
#if REF_X86

static int64_t tile_cols(int64_t K) {
    int64_t t = TILE_BYTES / (K * 4);
    if (t < 3) t = 3;
    if (t > 48) t = 48;
    return t / 3 * 3;
}
static int64_t kpad(int64_t K) { return (K + 15) & ~(int64_t)15; }


/* acc[r][c] += x[r][0..n) · w[c][0..n) for RM rows and RN columns (compile-time constants once
 * inlined), 8 lanes at a time; a partial last 8 through masked loads (lanes past n add 0). */
REF_AVX2 REF_INLINE void mk(const int RM, const int RN, const float *const *xr, const float *const *wr, int64_t n,
                            __m256 *acc) {
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        __m256 wv[4];
#pragma GCC unroll 4
        for (int c = 0; c < RN; c++) wv[c] = _mm256_loadu_ps(wr[c] + k);
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) {
            const __m256 xv = _mm256_loadu_ps(xr[r] + k);
#pragma GCC unroll 4
            for (int c = 0; c < RN; c++) acc[r * RN + c] = _mm256_fmadd_ps(xv, wv[c], acc[r * RN + c]);
        }
    }
    if (k < n) {
        const int t = (int)(n - k);
        __m256 wv[4];
#pragma GCC unroll 4
        for (int c = 0; c < RN; c++) wv[c] = ref_load_tail(wr[c] + k, t);
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) {
            const __m256 xv = ref_load_tail(xr[r] + k, t);
#pragma GCC unroll 4
            for (int c = 0; c < RN; c++) acc[r * RN + c] = _mm256_fmadd_ps(xv, wv[c], acc[r * RN + c]);
        }
    }
}

/* y[r][c] = x[r] · w[c] over the whole K, for an RM × RN block. */
#define MK_BLOCK(RM, RN)                                                                                  \
    REF_AVX2 static void blk_##RM##x##RN(const float *const *xr, const float *const *wr, int64_t K,     \
                                         float *const *yr) {                                              \
        __m256 acc[RM * RN];                                                                              \
        for (int q = 0; q < RM * RN; q++) acc[q] = _mm256_setzero_ps();                                   \
        mk(RM, RN, xr, wr, K, acc);                                                                       \
        for (int r = 0; r < RM; r++)                                                                      \
            for (int c = 0; c < RN; c++) yr[r][c] = ref_hsum8(acc[r * RN + c]);                          \
    }
MK_BLOCK(1, 1) MK_BLOCK(1, 2) MK_BLOCK(1, 3)
MK_BLOCK(2, 1) MK_BLOCK(2, 2) MK_BLOCK(2, 3)
MK_BLOCK(3, 1) MK_BLOCK(3, 2) MK_BLOCK(3, 3)
MK_BLOCK(4, 1) MK_BLOCK(4, 2) MK_BLOCK(4, 3)

typedef void (*blk_fn)(const float *const *, const float *const *, int64_t, float *const *);
static const blk_fn blk_tab[4][3] = {
    {blk_1x1, blk_1x2, blk_1x3}, {blk_2x1, blk_2x2, blk_2x3},
    {blk_3x1, blk_3x2, blk_3x3}, {blk_4x1, blk_4x2, blk_4x3},
};

/* Fused decoding for the one-row path: 32 weights at element k of a row, as four vectors, with
 * the same values ref_dequant_range gives (f16 through vcvtph2ps: exact but for a signalling
 * NaN's quiet bit, which a dot product does not keep anyway). ENC is a constant once inlined. */
REF_AVX2 REF_INLINE void dq32(const int ENC, const uint8_t *row, int64_t k, __m256 *w) {
    if (ENC == RAD_F16) {
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) w[j] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(row + 2 * (k + 8 * j))));
    } else if (ENC == RAD_BF16) {
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            w[j] = _mm256_castsi256_ps(_mm256_slli_epi32(
                _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(row + 2 * (k + 8 * j)))), 16));
    } else if (ENC == RAD_Q8_0) {
        const uint8_t *b = row + k / 32 * 34;
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(ref_rd16(b)));
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            w[j] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(b + 2 + 8 * j)))), d);
    } else { /* q4_0, q4_1 */
        const int BB = ENC == RAD_Q4_1 ? 20 : 18, QO = ENC == RAD_Q4_1 ? 4 : 2;
        const uint8_t *b = row + k / 32 * BB;
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(ref_rd16(b)));
        const __m128i m4 = _mm_set1_epi8(0x0f);
        const __m128i qs = _mm_loadu_si128((const __m128i *)(const void *)(b + QO));
        __m128i lo = _mm_and_si128(qs, m4), hi = _mm_and_si128(_mm_srli_epi16(qs, 4), m4);
        if (ENC == RAD_Q4_1) {
            const __m256 m = _mm256_set1_ps(_cvtsh_ss(ref_rd16(b + 2)));
            w[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)), d, m);
            w[1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8))), d, m);
            w[2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi)), d, m);
            w[3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8))), d, m);
        } else {
            const __m128i k8 = _mm_set1_epi8(8);
            lo = _mm_sub_epi8(lo, k8);
            hi = _mm_sub_epi8(hi, k8);
            w[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), d);
            w[1] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), d);
            w[2] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), d);
            w[3] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), d);
        }
    }
}

/* acc[c] += x[0..K32) · w[c][0..K32) for NCOL columns, 32 elements a step: the same FMA sequence
 * per output as mk (8 lanes, ascending k). */
REF_AVX2 REF_INLINE void fused_cols(const int NCOL, const int ENC, const uint8_t *const *wr, const float *x, int64_t K32,
                                    __m256 *accp) {
    __m256 acc[4]; /* in registers: accp may alias what the loads read, as far as the compiler knows */
#pragma GCC unroll 4
    for (int c = 0; c < NCOL; c++) acc[c] = accp[c];
    for (int64_t k = 0; k < K32; k += 32) {
        const __m256 x0 = _mm256_loadu_ps(x + k), x1 = _mm256_loadu_ps(x + k + 8);
        const __m256 x2 = _mm256_loadu_ps(x + k + 16), x3 = _mm256_loadu_ps(x + k + 24);
#pragma GCC unroll 4
        for (int c = 0; c < NCOL; c++) {
            __m256 w[4];
            dq32(ENC, wr[c], k, w);
            acc[c] = _mm256_fmadd_ps(x0, w[0], acc[c]);
            acc[c] = _mm256_fmadd_ps(x1, w[1], acc[c]);
            acc[c] = _mm256_fmadd_ps(x2, w[2], acc[c]);
            acc[c] = _mm256_fmadd_ps(x3, w[3], acc[c]);
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < NCOL; c++) accp[c] = acc[c];
}

#define FUSED_ENC(ENC, SUFFIX)                                                                              \
    REF_AVX2 static void fused_##SUFFIX(int nc, const uint8_t *const *wr, const float *x, int64_t K32, __m256 *acc) { \
        switch (nc) {                                                                                       \
        case 1: fused_cols(1, ENC, wr, x, K32, acc); break;                                                 \
        case 2: fused_cols(2, ENC, wr, x, K32, acc); break;                                                 \
        case 3: fused_cols(3, ENC, wr, x, K32, acc); break;                                                 \
        default: fused_cols(4, ENC, wr, x, K32, acc); break;                                                \
        }                                                                                                   \
    }
FUSED_ENC(RAD_F16, f16)
FUSED_ENC(RAD_BF16, bf16)
FUSED_ENC(RAD_Q8_0, q8_0)
FUSED_ENC(RAD_Q4_0, q4_0)
FUSED_ENC(RAD_Q4_1, q4_1)

typedef void (*fused_fn)(int, const uint8_t *const *, const float *, int64_t, __m256 *);
static fused_fn fused_for(RadDType e) {
    switch ((int)e) {
    case RAD_F16: return fused_f16;
    case RAD_BF16: return fused_bf16;
    case RAD_Q8_0: return fused_q8_0;
    case RAD_Q4_0: return fused_q4_0;
    case RAD_Q4_1: return fused_q4_1;
    default: return NULL;
    }
}

/* One row of x against columns [c0, c1): NC columns at a time, K in chunks decoded into L1. */
REF_AVX2 static void exact_row_avx2(const ExactCtx *c, int64_t i, int64_t c0, int64_t c1) {
    const RefGemmArgs *g = &c->g;
    const float *x = ref_frow(g->x, (uint64_t)i);
    float *y = ref_frow(g->y, (uint64_t)i);
    _Alignas(64) float buf[NC][CH];
    const fused_fn fz = fused_for(g->w->dtype);
    const uint64_t rb = ref_row_bytes(g->w->dtype, (uint64_t)g->K);
    int64_t pf = (int64_t)((uint64_t)c->pf_bytes / rb) / NC * NC; /* about pf_bytes (6 KiB) ahead, whole groups */
    pf = pf < NC ? NC : pf > 4 * NC ? 4 * NC : pf;
    for (int64_t n = c0; n < c1; n += NC) {
        const int nc = c1 - n < NC ? (int)(c1 - n) : NC;
        __m256 acc[NC] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        const float *wr[NC];
        if (c->plain) {
            for (int q = 0; q < nc; q++) wr[q] = (const float *)(const void *)ref_wrow(g->w, (uint64_t)(n + q));
            switch (nc) {
            case 1: mk(1, 1, &x, wr, g->K, acc); break;
            case 2: mk(1, 2, &x, wr, g->K, acc); break;
            case 3: mk(1, 3, &x, wr, g->K, acc); break;
            default: mk(1, 4, &x, wr, g->K, acc); break;
            }
        } else if (fz) { /* whole 32-element steps decoded in registers, the rest (plain floats) via buf */
            const uint8_t *wb[NC];
            for (int q = 0; q < nc; q++) wb[q] = ref_wrow(g->w, (uint64_t)(n + q));
            /* rows a few groups ahead: four interleaved streams defeat the hardware prefetcher */
            for (int64_t q = n + pf; q < n + pf + NC && q < c1; q++) {
                const char *p = (const char *)ref_wrow(g->w, (uint64_t)q);
                for (uint64_t o = 0; o < rb; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
            }
            const int64_t K32 = g->K / 32 * 32;
            fz(nc, wb, x, K32, acc);
            if (K32 < g->K) {
                const float *xk = x + K32;
                for (int q = 0; q < nc; q++) {
                    ref_dequant_range(c->isa, g->w->dtype, wb[q], K32, g->K - K32, buf[q]);
                    wr[q] = buf[q];
                }
                switch (nc) {
                case 1: mk(1, 1, &xk, wr, g->K - K32, acc); break;
                case 2: mk(1, 2, &xk, wr, g->K - K32, acc); break;
                case 3: mk(1, 3, &xk, wr, g->K - K32, acc); break;
                default: mk(1, 4, &xk, wr, g->K - K32, acc); break;
                }
            }
        } else {
            for (int q = 0; q < nc; q++) wr[q] = buf[q];
            for (int64_t k0 = 0; k0 < g->K; k0 += CH) {
                const int64_t kn = g->K - k0 < CH ? g->K - k0 : CH;
                const float *xk = x + k0;
                for (int q = 0; q < nc; q++) ref_dequant_range(c->isa, g->w->dtype, ref_wrow(g->w, (uint64_t)(n + q)), k0, kn, buf[q]);
                switch (nc) {
                case 1: mk(1, 1, &xk, wr, kn, acc); break;
                case 2: mk(1, 2, &xk, wr, kn, acc); break;
                case 3: mk(1, 3, &xk, wr, kn, acc); break;
                default: mk(1, 4, &xk, wr, kn, acc); break;
                }
            }
        }
        for (int q = 0; q < nc; q++) y[n + q] = ref_hsum8(acc[q]);
    }
}

/* Every row of x against columns [c0, c1), a decoded tile of columns at a time. */
REF_AVX2 static void exact_tiles_avx2(const ExactCtx *c, int64_t c0, int64_t c1) {
    const RefGemmArgs *g = &c->g;
    const int64_t tile = tile_cols(g->K), kp = kpad(g->K);
    float *buf = c->plain ? NULL : ref_scratch(0, (size_t)(tile * kp) * sizeof(float));
    if (!c->plain && !buf) { /* no memory for a tile: the one-row path needs none */
        for (int64_t i = 0; i < g->M; i++) exact_row_avx2(c, i, c0, c1);
        return;
    }
    for (int64_t t0 = c0; t0 < c1; t0 += tile) {
        const int64_t nt = c1 - t0 < tile ? c1 - t0 : tile;
        const float *wr[48];
        for (int64_t j = 0; j < nt; j++) {
            const uint8_t *src = ref_wrow(g->w, (uint64_t)(t0 + j));
            if (c->plain) {
                wr[j] = (const float *)(const void *)src;
            } else {
                ref_dequant_range(c->isa, g->w->dtype, src, 0, g->K, buf + j * kp);
                wr[j] = buf + j * kp;
            }
        }
        for (int64_t i = 0; i < g->M; i += 4) {
            const int rm = g->M - i < 4 ? (int)(g->M - i) : 4;
            const float *xr[4];
            float *yr[4];
            for (int r = 0; r < rm; r++) {
                xr[r] = ref_frow(g->x, (uint64_t)(i + r));
                yr[r] = ref_frow(g->y, (uint64_t)(i + r)) + t0;
            }
            for (int64_t j = 0; j < nt; j += 3) {
                const int rn = nt - j < 3 ? (int)(nt - j) : 3;
                float *yc[4];
                for (int r = 0; r < rm; r++) yc[r] = yr[r] + j;
                blk_tab[rm - 1][rn - 1](xr, wr + j, g->K, yc);
            }
        }
    }
}
#endif

/* Every row of x against columns [c0, c1). */
static void exact_range(const ExactCtx *c, int64_t c0, int64_t c1) {
    if (c0 >= c1) return;
#if REF_X86
    if (c->isa >= REF_ISA_AVX2) {
        if (c->g.M == 1) exact_row_avx2(c, 0, c0, c1);
        else exact_tiles_avx2(c, c0, c1);
        return;
    }
#endif
    exact_generic(c, c0, c1);
}

static void exact_task(void *ctx, int tid, int nth) {
    const ExactCtx *c = ctx;
    int64_t c0, c1;
    ref_split(c->g.N, tid, nth, NC, &c0, &c1);
    exact_range(c, c0, c1);
}

int ref_run_gemm_exact(const RadKernelArgs *a) {
    ExactCtx c;
    int rc = ref_gemm_args(a, REF_ENCS_ALL, &c.g);
    if (rc) return rc;
    c.isa = ref_isa(a);
    c.plain = c.g.w->dtype == RAD_F32;
    c.pf_bytes = rad_knob_value(a, REF_KNOB_PREFETCH, REF_PF_BYTES);
    const double work = (double)c.g.M * (double)c.g.N * (double)c.g.K;
    int nth = ref_threads_tuned(a, work, 32768.0);
    if (nth > (c.g.N + NC - 1) / NC) nth = (int)((c.g.N + NC - 1) / NC);
    ref_parallel(a, nth, exact_task, &c);
    return RAD_OK;
}

/* ---- gemm_nt2 / gemm_nt3: several weights against one x, one job ------------------------------- */

typedef struct ExactMulti {
    ExactCtx part[REF_GEMM_MAX_PARTS];
    RefGemmUnits u;
} ExactMulti;

static void exact_multi_range(const void *ctx, int i, int64_t c0, int64_t c1) {
    exact_range(&((const ExactMulti *)ctx)->part[i], c0, c1);
}

static void exact_multi_task(void *ctx, int tid, int nth) {
    ref_gemm_units_run(&((ExactMulti *)ctx)->u, tid, nth, exact_multi_range, ctx);
}

int ref_run_gemm_multi_exact(const RadKernelArgs *a) {
    ExactMulti m;
    RefGemmArgs g[REF_GEMM_MAX_PARTS];
    int np, rc = ref_gemm_multi_args(a, REF_ENCS_ALL, g, &np);
    if (rc) return rc;
    int64_t N[REF_GEMM_MAX_PARTS];
    for (int i = 0; i < np; i++) {
        m.part[i].g = g[i];
        m.part[i].isa = ref_isa(a);
        m.part[i].plain = g[i].w->dtype == RAD_F32;
        m.part[i].pf_bytes = rad_knob_value(a, REF_KNOB_PREFETCH, REF_PF_BYTES);
        N[i] = g[i].N;
    }
    ref_gemm_units_init(&m.u, N, np, NC);
    int nth = ref_threads_tuned(a, (double)g[0].M * (double)m.u.cols * (double)g[0].K, 32768.0);
    if (nth > m.u.u0[np]) nth = (int)m.u.u0[np];
    ref_parallel(a, nth, exact_multi_task, &m);
    return RAD_OK;
}
