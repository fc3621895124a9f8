/* ref_gemm_bf16.c — gemm_nt, gemm_nt2/3 and logits_gemm, variant "bf16dot": bf16 weights (f16
 * ones rounded to bf16) against activations rounded to bf16, with AVX-512 BF16's pair products
 * (vdpbf16ps).
 *
 * docs/OPS.md's "bf16 products" (RAD_EXACT_BF16ACT): every output within 8e-3 · Σ|x·w|; 1e-2
 * its per-row figure without outliers. x is rounded to bf16 to nearest even (vcvtne2ps2bf16)
 * once per call into a zero-padded copy; bf16 weights are read as stored, f16 ones converted to
 * bf16 (exactly to f32, then to nearest even) as they are loaded when a call has up to 3 rows,
 * into a 64-column bf16 tile per thread when it has more (the same conversion, so the same
 * bits). Per output: 16 f32 lanes, lane l summing the products of elements 2l and 2l + 1 of
 * every 32-element step, steps in ascending k (the instruction's arithmetic: products exact,
 * denormals flushed), the tail step zero-filled, then one fixed reduction of the 16 lanes. So
 * every output is the same whatever the rows, columns or threads it is computed with
 * (batch-invariant). Tiles: 4 rows × 4 columns, 16 accumulators, each weight load used by four
 * rows, each x load by four columns; up to 3 rows (decode) read the weights once, prefetched.
 *
 * Why: on this CPU class (AMD Zen 4) an f32 FMA does 16 multiply-adds a 512-bit instruction and
 * vdpbf16ps 32, so the exact GEMM of a BF16 or F16 file runs at half the bf16 rate (llama.cpp
 * takes this route for BF16 weights; for F16 it rounds x to f16 and runs f32 FMAs). Without
 * AVX-512 BF16 (or under RAD_REF_ISA below avx512) the variant runs the exact variant's code,
 * which is within the bound too. */
#include "ref_gemm.h"

typedef struct BfCtx {
    RefGemmArgs g;
    const uint16_t *xb; /* [M][kp] x rounded to bf16, zero past K */
    int64_t kp;         /* K rounded up to 32 */
    int64_t pf_bytes;   /* few-row path: weights are prefetched about this far ahead (the prefetch knob) */
} BfCtx;

typedef struct BfMulti {
    BfCtx part[REF_GEMM_MAX_PARTS];
    RefGemmUnits u;
} BfMulti;

#if REF_X86
#define REF_BF16 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512bf16")))

static int cpu_bf16(void) {
    static _Atomic int v = -1;
    int r = v;
    if (r < 0) {
        __builtin_cpu_init();
        r = __builtin_cpu_supports("avx512bf16") != 0;
        v = r;
    }
    return r;
}

/* Row i of x to bf16, zero-padded to kp. */
REF_BF16 static void round_row(const float *x, int64_t K, int64_t kp, uint16_t *o) {
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
        const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + k + 16), _mm512_loadu_ps(x + k));
        _mm512_storeu_si512((void *)(o + k), (__m512i)v);
    }
    if (k < kp) {
        const int64_t t = K - k;
        const __mmask16 m0 = (__mmask16)(t >= 16 ? 0xffff : (1u << t) - 1);
        const __mmask16 m1 = (__mmask16)(t >= 32 ? 0xffff : t > 16 ? (1u << (t - 16)) - 1 : 0);
        const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, x + k + 16), _mm512_maskz_loadu_ps(m0, x + k));
        _mm512_storeu_si512((void *)(o + k), (__m512i)v);
    }
}

/* 32 f16 weights rounded to bf16 to nearest even (f16 -> f32 is exact): the one conversion both
 * the scratch tiles and the few-row path make, so an output has the same bits on either. */
REF_BF16 REF_INLINE __m512i bf_from_f16(__m256i lo, __m256i hi) {
    return (__m512i)_mm512_cvtne2ps_pbh(_mm512_cvtph_ps(hi), _mm512_cvtph_ps(lo));
}
/* 32 weights at p as bf16 (F16W: f16 ones converted), all of them or the lanes of mask m (the
 * rest zero). */
REF_BF16 REF_INLINE __m512i bf_w32(const int F16W, const uint8_t *p) {
    return F16W ? bf_from_f16(_mm256_loadu_si256((const __m256i *)(const void *)p), _mm256_loadu_si256((const __m256i *)(const void *)(p + 32)))
                : _mm512_loadu_si512((const void *)p);
}
REF_BF16 REF_INLINE __m512i bf_w32_tail(const int F16W, const uint8_t *p, __mmask32 m) {
    return F16W ? bf_from_f16(_mm256_maskz_loadu_epi16((__mmask16)m, (const void *)p), _mm256_maskz_loadu_epi16((__mmask16)(m >> 16), (const void *)(p + 32)))
                : _mm512_maskz_loadu_epi16(m, (const void *)p);
}

/* RM rows × RN columns: out[r * RN + n]. F16W: the weight rows are f16, converted as loaded. */
REF_BF16 REF_INLINE void bf_tile(const int RM, const int RN, const int F16W, const uint16_t *const *xr, const uint8_t *const *wr,
                                 int64_t K, float *out) {
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++)
#pragma GCC unroll 4
        for (int n = 0; n < RN; n++) acc[r][n] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
        __m512i w[4];
#pragma GCC unroll 4
        for (int n = 0; n < RN; n++) w[n] = bf_w32(F16W, wr[n] + 2 * k);
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) {
            const __m512i x = _mm512_loadu_si512((const void *)(xr[r] + k));
#pragma GCC unroll 4
            for (int n = 0; n < RN; n++) acc[r][n] = _mm512_dpbf16_ps(acc[r][n], (__m512bh)x, (__m512bh)w[n]);
        }
    }
    if (k < K) { /* the tail: weights zero-filled past K (x is zero there too) */
        const __mmask32 m = (__mmask32)((1ull << (K - k)) - 1);
        __m512i w[4];
#pragma GCC unroll 4
        for (int n = 0; n < RN; n++) w[n] = bf_w32_tail(F16W, wr[n] + 2 * k, m);
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) {
            const __m512i x = _mm512_loadu_si512((const void *)(xr[r] + k));
#pragma GCC unroll 4
            for (int n = 0; n < RN; n++) acc[r][n] = _mm512_dpbf16_ps(acc[r][n], (__m512bh)x, (__m512bh)w[n]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++)
#pragma GCC unroll 4
        for (int n = 0; n < RN; n++) { /* one fixed tree: halves, then 8 lanes as ref_hsum8 */
            const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(acc[r][n]), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r][n]), 1)));
            out[r * RN + n] = ref_hsum8(h);
        }
}

typedef void (*bf_fn)(const uint16_t *const *xr, const uint8_t *const *wr, int64_t K, float *o);
#define BF_TILE_AS(PFX, F16W, RM, RN)                                                                                 \
    REF_BF16 static void PFX##_##RM##x##RN(const uint16_t *const *xr, const uint8_t *const *wr, int64_t K, float *o) { \
        bf_tile(RM, RN, F16W, xr, wr, K, o);                                                                          \
    }
#define BF_TILE(RM, RN) BF_TILE_AS(bf, 0, RM, RN)
#define BF_TILE_F16(RM, RN) BF_TILE_AS(bfh, 1, RM, RN)
BF_TILE(1, 1) BF_TILE(1, 2) BF_TILE(1, 3) BF_TILE(1, 4)
BF_TILE(2, 1) BF_TILE(2, 2) BF_TILE(2, 3) BF_TILE(2, 4)
BF_TILE(3, 1) BF_TILE(3, 2) BF_TILE(3, 3) BF_TILE(3, 4)
BF_TILE(4, 1) BF_TILE(4, 2) BF_TILE(4, 3) BF_TILE(4, 4)
BF_TILE_F16(1, 1) BF_TILE_F16(1, 2) BF_TILE_F16(1, 3) BF_TILE_F16(1, 4)
BF_TILE_F16(2, 1) BF_TILE_F16(2, 2) BF_TILE_F16(2, 3) BF_TILE_F16(2, 4)
BF_TILE_F16(3, 1) BF_TILE_F16(3, 2) BF_TILE_F16(3, 3) BF_TILE_F16(3, 4)
static const bf_fn bf_tab[4][4] = {{bf_1x1, bf_1x2, bf_1x3, bf_1x4},
                                   {bf_2x1, bf_2x2, bf_2x3, bf_2x4},
                                   {bf_3x1, bf_3x2, bf_3x3, bf_3x4},
                                   {bf_4x1, bf_4x2, bf_4x3, bf_4x4}};
static const bf_fn bfh_tab[3][4] = {{bfh_1x1, bfh_1x2, bfh_1x3, bfh_1x4},
                                    {bfh_2x1, bfh_2x2, bfh_2x3, bfh_2x4},
                                    {bfh_3x1, bfh_3x2, bfh_3x3, bfh_3x4}};

/* f16 rows [n, n + nr) converted to bf16 rows of kp elements (zero past K) in t. */
REF_BF16 static void f16_rows_to_bf16(const RadKArg *w, int64_t n, int64_t nr, int64_t K, int64_t kp, uint16_t *t) {
    for (int64_t j = 0; j < nr; j++) {
        const uint8_t *src = ref_wrow(w, (uint64_t)(n + j));
        uint16_t *o = t + (size_t)j * (size_t)kp;
        int64_t k = 0;
        for (; k + 32 <= K; k += 32) _mm512_storeu_si512((void *)(o + k), bf_w32(1, src + 2 * k));
        if (k < kp) _mm512_storeu_si512((void *)(o + k), bf_w32_tail(1, src + 2 * k, (__mmask32)((1ull << (K - k)) - 1)));
    }
}

/* A tile's outputs o[r * rn + j] to y[i + r][n + j]. */
static void put_tile(const RadKArg *y, int64_t i, int64_t n, int rm, int rn, const float *o) {
    for (int r = 0; r < rm; r++)
        for (int j = 0; j < rn; j++) ref_frow(y, (uint64_t)(i + r))[n + j] = o[r * rn + j];
}

/* Rows [i0, i0 + rm) (rm <= 3: decode, or the rows without a scratch tile) against columns
 * [c0, c1), 4 at a time, f16 converted as loaded; the weights are prefetched a line at a time
 * about pf_bytes past the rows being read (as q8act's one-row range: four interleaved row
 * streams defeat the hardware prefetcher), past the range within the weight. */
static void bf_range_few(const BfCtx *c, int64_t i0, int rm, int64_t c0, int64_t c1) {
    const RadKArg *w = c->g.w;
    const uint64_t rb = ref_row_bytes(w->dtype, (uint64_t)c->g.K);
    const char *pf = (const char *)ref_wrow(w, (uint64_t)c0), *pend = (const char *)ref_wrow(w, (uint64_t)(c->g.N - 1)) + rb;
    const uint16_t *xr[3];
    for (int r = 0; r < rm; r++) xr[r] = c->xb + (size_t)(i0 + r) * (size_t)c->kp;
    const bf_fn *tab = w->dtype == RAD_F16 ? bfh_tab[rm - 1] : bf_tab[rm - 1];
    for (int64_t n = c0; n < c1; n += 4) {
        const int rn = c1 - n < 4 ? (int)(c1 - n) : 4;
        const uint8_t *wr[4];
        for (int j = 0; j < rn; j++) wr[j] = ref_wrow(w, (uint64_t)(n + j));
        const char *want = (const char *)wr[rn - 1] + rb + c->pf_bytes;
        for (; pf < want && pf < pend; pf += 64) _mm_prefetch(pf, _MM_HINT_T0);
        float o[12];
        tab[rn - 1](xr, wr, c->g.K, o);
        put_tile(c->g.y, i0, n, rm, rn, o);
    }
}

/* Every row against columns [c0, c1), 4 columns by 4 rows at a time. Columns go in blocks of 64
 * (f16 ones converted once into a bf16 tile), rows in blocks of rb (about 24 KiB of x): within a
 * row block each 4-column tile is read once for all its rows and the block's x stays in L1, so
 * the weights leave L2 once per rb rows rather than once per 4. */
static void bf_range(const BfCtx *c, int64_t c0, int64_t c1) {
    const int f16 = c->g.w->dtype == RAD_F16;
    uint16_t *t = f16 && c->g.M > 3 ? ref_scratch(0, (size_t)64 * (size_t)c->kp * 2) : NULL;
    if (c->g.M <= 3 || (f16 && !t)) { /* no memory for a tile: the few-row path needs none */
        for (int64_t i = 0; i < c->g.M; i += 3) bf_range_few(c, i, c->g.M - i < 3 ? (int)(c->g.M - i) : 3, c0, c1);
        return;
    }
    int64_t rb = (int64_t)(24576 / (c->kp * 2)) & ~(int64_t)3;
    rb = rb < 4 ? 4 : rb > 32 ? 32 : rb;
    for (int64_t b0 = c0; b0 < c1; b0 += 64) {
        const int64_t b1 = c1 - b0 < 64 ? c1 : b0 + 64;
        if (f16) f16_rows_to_bf16(c->g.w, b0, b1 - b0, c->g.K, c->kp, t);
        for (int64_t i0 = 0; i0 < c->g.M; i0 += rb) {
            const int64_t i1 = c->g.M - i0 < rb ? c->g.M : i0 + rb;
            for (int64_t n = b0; n < b1; n += 4) {
                const int rn = b1 - n < 4 ? (int)(b1 - n) : 4;
                const uint8_t *wr[4];
                for (int j = 0; j < rn; j++)
                    wr[j] = f16 ? (const uint8_t *)(t + (size_t)(n + j - b0) * (size_t)c->kp) : ref_wrow(c->g.w, (uint64_t)(n + j));
                for (int64_t i = i0; i < i1; i += 4) {
                    const int rm = i1 - i < 4 ? (int)(i1 - i) : 4;
                    const uint16_t *xr[4];
                    for (int r = 0; r < rm; r++) xr[r] = c->xb + (size_t)(i + r) * (size_t)c->kp;
                    float o[16];
                    bf_tab[rm - 1][rn - 1](xr, wr, c->g.K, o);
                    put_tile(c->g.y, i, n, rm, rn, o);
                }
            }
        }
    }
}

static void round_task(void *ctx, int tid, int nth) {
    const BfCtx *c = ctx;
    int64_t r0, r1;
    ref_split(c->g.M, tid, nth, 1, &r0, &r1);
    for (int64_t i = r0; i < r1; i++)
        round_row(ref_frow(c->g.x, (uint64_t)i), c->g.K, c->kp, (uint16_t *)(uintptr_t)c->xb + (size_t)i * (size_t)c->kp);
}

static void bf_multi_range(const void *ctx, int i, int64_t c0, int64_t c1) { bf_range(&((const BfMulti *)ctx)->part[i], c0, c1); }
static void bf_multi_task(void *ctx, int tid, int nth) { ref_gemm_units_run(&((BfMulti *)ctx)->u, tid, nth, bf_multi_range, ctx); }

/* The parts g[0 .. np) (one x): x rounded once, then the parts' columns as one job. */
static int bf_run(const RadKernelArgs *a, const RefGemmArgs *g, int np) {
    BfMulti m;
    const int64_t kp = (g[0].K + 31) & ~(int64_t)31;
    const int64_t pf = rad_knob_value(a, REF_KNOB_PREFETCH, REF_PF_BYTES);
    uint16_t *xb = ref_scratch(1, (size_t)g[0].M * (size_t)kp * 2);
    if (!xb) return RAD_E_NOMEM;
    int64_t N[REF_GEMM_MAX_PARTS];
    for (int i = 0; i < np; i++) m.part[i] = (BfCtx){g[i], xb, kp, pf}, N[i] = g[i].N;
    int nq = ref_threads(a, (double)g[0].M * (double)g[0].K, 16384.0);
    if (nq > g[0].M) nq = (int)g[0].M;
    ref_parallel(a, nq, round_task, &m.part[0]);
    ref_gemm_units_init(&m.u, N, np, 4);
    int nth = ref_threads_tuned(a, (double)g[0].M * (double)m.u.cols * (double)g[0].K, 32768.0);
    if (nth > m.u.u0[np]) nth = (int)m.u.u0[np];
    ref_parallel(a, nth, bf_multi_task, &m);
    return RAD_OK;
}

static int bf_here(const RadKernelArgs *a) { return ref_isa(a) >= REF_ISA_AVX512 && cpu_bf16(); }
#else
static int bf_here(const RadKernelArgs *a) {
    (void)a;
    return 0;
}
static int bf_run(const RadKernelArgs *a, const RefGemmArgs *g, int np) {
    (void)a, (void)g, (void)np;
    return RAD_E_UNSUPPORTED;
}
#endif

#define BF16_ENCS (RAD_ENC_BIT(RAD_ENC_BF16) | RAD_ENC_BIT(RAD_ENC_F16))

int ref_run_gemm_bf16(const RadKernelArgs *a) {
    RefGemmArgs g;
    int rc = ref_gemm_args(a, BF16_ENCS, &g);
    if (rc) return rc;
    return bf_here(a) ? bf_run(a, &g, 1) : ref_run_gemm_exact(a);
}

int ref_run_gemm_multi_bf16(const RadKernelArgs *a) {
    RefGemmArgs g[REF_GEMM_MAX_PARTS];
    int np, rc = ref_gemm_multi_args(a, BF16_ENCS, g, &np);
    if (rc) return rc;
    return bf_here(a) ? bf_run(a, g, np) : ref_run_gemm_multi_exact(a);
}
