/* ref_gemm_q8.c — gemm_nt and logits_gemm, variant "q8act": GGML block weights against
 * activations quantised to 8 bits, with integer dot products (llama.cpp's scheme).
 *
 * docs/OPS.md (gemm_nt, "Quantised activations") allows this for GGML weights under the bound
 * 2e-2. Each row of x is quantised per block b of 32 elements, for every weight encoding (the
 * K-quants too, as llama.cpp's CUDA q8_1 path does: q8_K's 256-element blocks spread one
 * outlier's scale over 255 neighbours and broke the row bound): amax_b = max |x_k|,
 * d_b = amax_b / 127 kept in f32 (no f16 rounding, so the error is inside the stated bound with
 * room), q_k = x_k * (1/d_b) rounded to nearest even. The weight codes times q are summed exactly
 * in integers per block (with the K-quants' 6/8-bit sub-block scales); the block sums are scaled
 * by d_b and accumulated in f32. Offsets (q4_1's m, q4_k's mins) multiply d_b * Σq (the sum of
 * the quantised activations, llama.cpp's q8_1 `s`), so the whole product is x̂ · w exactly as the
 * bound's derivation assumes. Portable C and AVX2 quantise identically (same f32 operations), and
 * the integer sums are exact; only the f32 accumulation order differs between them.
 *
 * Per output the order is fixed (blocks ascending), so the result is batch-invariant and the
 * same for every thread count. Work split: output columns in contiguous ranges per part; a part
 * walks its columns a tile at a time (the tile's weights stay in L1/L2) against every quantised
 * row, four rows per weight column at once on AVX2 (the weights unpacked once for the four).
 * One row (decode) runs the dot inlined over a range of weight rows, prefetching one cache line
 * at a time about pf_bytes ahead (the "prefetch" knob, default REF_PF_BYTES) (a four-column one-row kernel was faster with the weights in L2
 * but slower streaming them from memory, so there is none). */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "ref_gemm.h"
#include "ref_quant.h"

#define QTILE 16   /* columns per tile on the many-row path */

static inline void ref_prefetch(const char *p) {
#if REF_X86
    _mm_prefetch(p, _MM_HINT_T0);
#else
    (void)p;
#endif
}

/* One quantised row: codes q[K] (64-byte aligned), then per 32-element block b the scale d_b and
 * s_b = d_b * Σq_b in the layouts the row's readers need: for the 32-element weight formats as
 * pairs (d_b, s_b), for the K-quants as d[nb] then s[nb] then the i16 sums of q per 16 elements
 * (q6_k's offset); a row read by both (gemm_nt2/3 with q5_0 beside q4_k) carries both, the
 * pairs first. On AVX2, for q4_0 and q4_1, each pair of blocks' codes is stored "paired" —
 * [b lo 16 | b+1 lo 16 | b hi 16 | b+1 hi 16] — to meet the weights' nibbles of two blocks in one
 * register (an odd last block stays as it is); every other reader takes the natural order. */
typedef RefQRow QRow; /* ref_gemm.h */

typedef float (*dot_fn)(const uint8_t *w, const QRow *x, int64_t K);
typedef void (*dot4_fn)(const uint8_t *w, const QRow *x, int64_t K, float *out);

typedef struct Q8Ctx Q8Ctx;
struct Q8Ctx {
    RefGemmArgs g;
    int isa;
    int kq;               /* K-quant weights (q4_k, q5_k, q6_k): the dot reads d, s apart and the 16-element sums */
    int paired;           /* codes stored in pairs of blocks (AVX2, q4_0 / q4_1) */
    int row_pairs;        /* the quantised rows in buf carry (d, s) pairs (a 32-element part reads them) */
    int row_kq;           /* ... and d[], s[], bsums[] (a K-quant part reads them) */
    int row_isum;         /* ... and Σq_b as integers (the tiled path reads them) */
    int tile;             /* many rows take the tiled path (ref_gemm_tile.c; "q8tile" on AVX-512 VNNI) */
    RadDType enc;         /* the weights' encoding (without RAD_PACKED) */
    int x8;               /* packed weights (ref_gemm_x8.c): rows in groups of eight */
    int64_t align;        /* column splits fall on multiples of this (x8: a group) */
    size_t row_bytes;     /* one quantised row in buf */
    uint64_t wrb;         /* bytes of one weight row */
    int64_t pf_bytes;     /* one-row path: weights are prefetched about this far ahead (the prefetch knob) */
    int64_t pf_rows;      /* prefetch distance in weight rows */
    uint8_t *buf;         /* [M][row_bytes] */
    dot_fn dot;           /* one row against one column */
    dot4_fn dot4;         /* four rows against one column, each as dot would (NULL: none) */
    void (*range1)(const struct Q8Ctx *c, int64_t c0, int64_t c1); /* M = 1 over columns [c0, c1) (NULL: dot) */
};

static size_t q8_row_bytes(int64_t K, int pairs, int kq, int isum) {
    size_t q = ((size_t)K + 63) & ~(size_t)63;
    size_t nb = (size_t)K / 32;
    size_t extra = (pairs ? nb * 8 : 0) + (kq ? nb * 8 + (size_t)K / 16 * 2 : 0) + (isum ? nb * 4 + 4 : 0);
    return (q + extra + 16 + 63) & ~(size_t)63; /* +16: a 16-byte load of the last (d, s) pair */
}

static QRow q8_row(const Q8Ctx *c, int64_t i) {
    const uint8_t *base = c->buf + (size_t)i * c->row_bytes;
    const size_t q = ((size_t)c->g.K + 63) & ~(size_t)63;
    const size_t nb = (size_t)c->g.K / 32;
    const float *f = (const float *)(const void *)(base + q);
    const float *k = c->row_pairs ? f + 2 * nb : f;
    QRow r;
    r.q = (const int8_t *)base;
    r.ds = c->row_pairs ? f : NULL;
    r.d = c->row_kq ? k : NULL;
    r.s = c->row_kq ? k + nb : NULL;
    r.bsums = c->row_kq ? (const int16_t *)(const void *)(k + 2 * nb) : NULL;
    const uint8_t *e = (const uint8_t *)(k + (c->row_kq ? 2 * nb : 0)) + (c->row_kq ? (size_t)c->g.K / 16 * 2 : 0);
    r.isum = c->row_isum ? (const int32_t *)(const void *)(((uintptr_t)e + 3) & ~(uintptr_t)3) : NULL;
    return r;
}

/* ---- quantising a row ------------------------------------------------------------------------------ */

/* Block of n = 32 elements: d = amax / 127, q = rint(x * (1/d)). Returns d. */
static float quant_block_generic(const float *x, int n, int8_t *q) {
    float amax = 0.0f;
    for (int j = 0; j < n; j++) {
        const float v = fabsf(x[j]);
        amax = v > amax ? v : amax;
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < n; j++) {
        const float v = x[j] * id;
        q[j] = (int8_t)lrintf(v);
    }
    return d;
}

/* Stores block b's scale d and sum of codes into the row's layouts (r's NULL arrays are skipped). */
static void put_block(const QRow *r, int64_t b, float d, int sum, int s16) {
    const float ds = d * (float)sum;
    if (r->ds) {
        float *p = (float *)r->ds;
        p[2 * b] = d;
        p[2 * b + 1] = ds;
    }
    if (r->d) {
        ((float *)r->d)[b] = d;
        ((float *)r->s)[b] = ds;
        int16_t *bs = (int16_t *)r->bsums;
        bs[2 * b] = (int16_t)s16;
        bs[2 * b + 1] = (int16_t)(sum - s16);
    }
    if (r->isum) ((int32_t *)r->isum)[b] = sum;
}

static void quant_row_generic(const float *x, int64_t K, const QRow *r) {
    const int64_t nb = K / 32;
    int8_t *q = (int8_t *)r->q;
    for (int64_t b = 0; b < nb; b++) {
        const float d = quant_block_generic(x + b * 32, 32, q + b * 32);
        int sum = 0, s16 = 0;
        for (int j = 0; j < 32; j++) {
            sum += q[b * 32 + j];
            if (j == 15) s16 = sum;
        }
        put_block(r, b, d, sum, s16);
    }
}

#if REF_X86
REF_AVX2 REF_INLINE int hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

/* 32 elements at x: codes into q (32 bytes), returns d; *sum gets Σq and *s16 the first 16
 * elements' sum. The same f32 operations as quant_block_generic. */
REF_AVX2 REF_INLINE float quant32_avx2(const float *x, int8_t *q, float amax, int *sum, int *s16) {
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m256 vid = _mm256_set1_ps(id);
#define rm (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC) /* an immediate even at -O0 */
    __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 0), vid), rm));
    __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8), vid), rm));
    __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 16), vid), rm));
    __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 24), vid), rm));
    const __m256i a = _mm256_add_epi32(i0, i1), b = _mm256_add_epi32(i2, i3);
    *s16 = hsum_i32(a);
    *sum = *s16 + hsum_i32(b);
    i0 = _mm256_packs_epi32(i0, i1);
    i2 = _mm256_packs_epi32(i2, i3);
    i0 = _mm256_packs_epi16(i0, i2);
    i0 = _mm256_permutevar8x32_epi32(i0, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)(void *)q, i0);
    return d;
#undef rm
}

REF_AVX2 REF_INLINE float amax_avx2(const float *x, int n) {
    const __m256 sgn = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < n; j += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sgn, _mm256_loadu_ps(x + j)));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 0x55));
    return _mm_cvtss_f32(h);
}

REF_AVX2 static void quant_row_avx2(const float *x, int64_t K, int paired, const QRow *r) {
    const int64_t nb = K / 32;
    int8_t *q = (int8_t *)r->q;
    for (int64_t b = 0; b < nb; b++) {
        int sum, s16;
        const float d = quant32_avx2(x + b * 32, q + b * 32, amax_avx2(x + b * 32, 32), &sum, &s16);
        put_block(r, b, d, sum, s16);
    }
    if (paired)
        for (int64_t b = 0; b + 2 <= nb; b += 2) { /* [A lo|A hi|B lo|B hi] -> [A lo|B lo|A hi|B hi] */
            __m128i *p = (__m128i *)(void *)(q + 32 * b);
            const __m128i ah = _mm_loadu_si128(p + 1), bl = _mm_loadu_si128(p + 2);
            _mm_storeu_si128(p + 1, bl);
            _mm_storeu_si128(p + 2, ah);
        }
}
#endif

static void quant_task(void *ctx, int tid, int nth) {
    const Q8Ctx *c = ctx;
    int64_t r0, r1;
    ref_split(c->g.M, tid, nth, 1, &r0, &r1);
    for (int64_t i = r0; i < r1; i++) {
        const QRow r = q8_row(c, i);
        const float *x = ref_frow(c->g.x, (uint64_t)i);
#if REF_X86
        if (c->isa >= REF_ISA_AVX2) {
            quant_row_avx2(x, c->g.K, c->paired, &r);
            continue;
        }
#endif
        quant_row_generic(x, c->g.K, &r);
    }
}

/* ---- dot products: portable C ------------------------------------------------------------------- */

static float dot_q8_0_generic(const uint8_t *w, const QRow *x, int64_t K) {
    float acc = 0.0f;
    for (int64_t b = 0; b < K / 32; b++, w += 34) {
        const int8_t *q = (const int8_t *)(w + 2), *xq = x->q + 32 * b;
        int sum = 0;
        for (int j = 0; j < 32; j++) sum += q[j] * xq[j];
        const float s = ref_f16_f32(ref_rd16(w)) * x->ds[2 * b];
        const float p = s * (float)sum;
        acc = acc + p;
    }
    return acc;
}

static float dot_q4_0_generic(const uint8_t *w, const QRow *x, int64_t K) {
    float acc = 0.0f;
    for (int64_t b = 0; b < K / 32; b++, w += 18) {
        const uint8_t *qs = w + 2;
        const int8_t *xq = x->q + 32 * b;
        int sum = 0;
        for (int j = 0; j < 16; j++) sum += ((qs[j] & 15) - 8) * xq[j] + ((qs[j] >> 4) - 8) * xq[j + 16];
        const float s = ref_f16_f32(ref_rd16(w)) * x->ds[2 * b];
        const float p = s * (float)sum;
        acc = acc + p;
    }
    return acc;
}

static float dot_q4_1_generic(const uint8_t *w, const QRow *x, int64_t K) {
    float acc = 0.0f, accm = 0.0f;
    for (int64_t b = 0; b < K / 32; b++, w += 20) {
        const uint8_t *qs = w + 4;
        const int8_t *xq = x->q + 32 * b;
        int sum = 0;
        for (int j = 0; j < 16; j++) sum += (qs[j] & 15) * xq[j] + (qs[j] >> 4) * xq[j + 16];
        const float s = ref_f16_f32(ref_rd16(w)) * x->ds[2 * b];
        const float p = s * (float)sum;
        acc = acc + p;
        const float pm = ref_f16_f32(ref_rd16(w + 2)) * x->ds[2 * b + 1];
        accm = accm + pm;
    }
    return acc + accm;
}

/* q5_0: the code with its fifth bit from qh, less 16, in the integer sum (as q8_0's signed codes). */
static float dot_q5_0_generic(const uint8_t *w, const QRow *x, int64_t K) {
    float acc = 0.0f;
    for (int64_t b = 0; b < K / 32; b++, w += 22) {
        const uint32_t qh = ref_rd32(w + 2);
        const uint8_t *qs = w + 6;
        const int8_t *xq = x->q + 32 * b;
        int sum = 0;
        for (int j = 0; j < 16; j++) {
            const int c0 = (qs[j] & 15) | (int)(((qh >> j) & 1) << 4), c1 = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            sum += (c0 - 16) * xq[j] + (c1 - 16) * xq[j + 16];
        }
        const float s = ref_f16_f32(ref_rd16(w)) * x->ds[2 * b];
        const float p = s * (float)sum;
        acc = acc + p;
    }
    return acc;
}

/* q5_1: as q4_1 with the fifth bit; m times s_b. */
static float dot_q5_1_generic(const uint8_t *w, const QRow *x, int64_t K) {
    float acc = 0.0f, accm = 0.0f;
    for (int64_t b = 0; b < K / 32; b++, w += 24) {
        const uint32_t qh = ref_rd32(w + 4);
        const uint8_t *qs = w + 8;
        const int8_t *xq = x->q + 32 * b;
        int sum = 0;
        for (int j = 0; j < 16; j++) {
            const int c0 = (qs[j] & 15) | (int)(((qh >> j) & 1) << 4), c1 = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            sum += c0 * xq[j] + c1 * xq[j + 16];
        }
        const float s = ref_f16_f32(ref_rd16(w)) * x->ds[2 * b];
        const float p = s * (float)sum;
        acc = acc + p;
        const float pm = ref_f16_f32(ref_rd16(w + 2)) * x->ds[2 * b + 1];
        accm = accm + pm;
    }
    return acc + accm;
}

static float dot_q4_k_generic(const uint8_t *w, const QRow *x, int64_t K) {
    float acc = 0.0f;
    for (int64_t b = 0; b < K / 256; b++, w += 144) acc = ref_q4_k_block_dot(w, x, b, acc);
    return acc;
}

static float dot_q5_k_generic(const uint8_t *w, const QRow *x, int64_t K) {
    float acc = 0.0f;
    for (int64_t b = 0; b < K / 256; b++, w += 176) acc = ref_q5_k_block_dot(w, x, b, acc);
    return acc;
}

/* Per 32-element block i (scale groups 2i, 2i+1 of 16): d·dx_i·Σ_g sc_g·Σ(code·q). */
static float dot_q6_k_generic(const uint8_t *w, const QRow *x, int64_t K) {
    float acc = 0.0f;
    for (int64_t b = 0; b < K / 256; b++, w += 210) {
        const uint8_t *ql = w, *qh = w + 128;
        const int8_t *sc = (const int8_t *)(w + 192);
        const int8_t *xq = x->q + 256 * b;
        float sp = 0.0f;
        for (int n = 0; n < 2; n++, ql += 64, qh += 32, sc += 8, xq += 128) {
            int g[8] = {0};
            for (int l = 0; l < 32; l++) {
                const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                const int is = l / 16;
                g[is + 0] += q1 * xq[l];
                g[is + 2] += q2 * xq[l + 32];
                g[is + 4] += q3 * xq[l + 64];
                g[is + 6] += q4 * xq[l + 96];
            }
            for (int i = 0; i < 4; i++) { /* 32-element block 4n + i: groups 2i, 2i + 1 */
                const int s = sc[2 * i] * g[2 * i] + sc[2 * i + 1] * g[2 * i + 1];
                const float p = x->d[8 * b + 4 * n + i] * (float)s;
                sp = sp + p;
            }
        }
        const float t = ref_f16_f32(ref_rd16(w + 208)) * sp;
        acc = acc + t;
    }
    return acc;
}

/* ---- dot products: AVX2 --------------------------------------------------------------------------
 * Each kernel is written once for RM rows of x against one weight column (RM = 1 or 4, a
 * compile-time constant once inlined): every row's sequence of operations is the same whatever
 * RM, so a row's result does not depend on the rows it was computed with. */
#if REF_X86

REF_INLINE uint32_t ld_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
REF_AVX2 REF_INLINE __m256i ld32(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
/* Four f16 (two u32, each a (lo, hi) pair) -> [lo0, hi0, lo1, hi1] in f32. */
REF_AVX2 REF_INLINE __m128 f16x4(uint32_t a, uint32_t b) {
    return _mm_cvtph_ps(_mm_unpacklo_epi32(_mm_cvtsi32_si128((int)a), _mm_cvtsi32_si128((int)b)));
}
/* 16 bytes of nibbles -> 32 codes: low nibbles (elements 0..15), then high (16..31). */
REF_AVX2 REF_INLINE __m256i nibbles32(const uint8_t *p) {
    const __m128i t = _mm_loadu_si128((const __m128i *)(const void *)p);
    const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}
REF_AVX2 REF_INLINE float lanes13(__m128 v) { /* v[1] + v[3] */
    const __m128 h = _mm_movehdup_ps(v);
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehl_ps(h, h)));
}
/* q4_0 / q4_1 (BB bytes a block, codes at QO, scales at 0 (and m at 2 for q4_1)): two blocks a step.
 * Per pair the scale lanes are [d0·dx0, m0·s0, d1·dx1, m1·s1] (q4_0: m = -8·d, exact in f32). */
REF_AVX2 REF_INLINE void q4x_rows(const int RM, const int BB, const int QO, const uint8_t *w, const QRow *x, int64_t K,
                                  float *out) {
    const int64_t nb = K / 32;
    const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    const __m256i pidx = _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2);
    const __m128 m8 = _mm_setr_ps(1.0f, -8.0f, 1.0f, -8.0f); /* q4_0's offset: m = -8·d */
    __m256 acc[4];
    __m128 accm[4];
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++) acc[r] = _mm256_setzero_ps(), accm[r] = _mm_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2, w += 2 * BB) {
        const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(w + QO))),
                                                  _mm_loadu_si128((const __m128i *)(const void *)(w + BB + QO)), 1);
        const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        const uint32_t s0 = BB == 20 ? ld_u32(w) : ref_rd16(w) * 0x10001u;
        const uint32_t s1 = BB == 20 ? ld_u32(w + BB) : ref_rd16(w + BB) * 0x10001u;
        const __m128 dm = BB == 20 ? f16x4(s0, s1) : _mm_mul_ps(f16x4(s0, s1), m8);
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) {
            const int8_t *xq = x[r].q + 32 * b;
            const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, ld32(xq)), _mm256_maddubs_epi16(hi, ld32(xq + 32)));
            const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
            const __m128 sc = _mm_mul_ps(dm, _mm_loadu_ps(x[r].ds + 2 * b));
            accm[r] = _mm_add_ps(accm[r], sc);
            acc[r] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(_mm256_castps128_ps256(sc), pidx), f, acc[r]);
        }
    }
    if (b < nb) { /* an odd last block, codes in natural order */
        const __m256i nib = nibbles32(w + QO);
        const uint32_t s0 = BB == 20 ? ld_u32(w) : ref_rd16(w) * 0x10001u;
        const __m128 dm = BB == 20 ? f16x4(s0, 0) : _mm_mul_ps(f16x4(s0, 0), m8);
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) {
            const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(nib, ld32(x[r].q + 32 * b)), ones));
            const __m128 sc = _mm_mul_ps(dm, _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(const void *)(x[r].ds + 2 * b))));
            accm[r] = _mm_add_ps(accm[r], sc);
            acc[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(sc), f, acc[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++) out[r] = ref_hsum8(acc[r]) + lanes13(accm[r]);
}

/* q8_0: two blocks a step; the signed product through |w| and sign(x, w). */
REF_AVX2 REF_INLINE void q8_0_rows(const int RM, const uint8_t *w, const QRow *x, int64_t K, float *out) {
    const int64_t nb = K / 32;
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i i0 = _mm256_setzero_si256(), i2 = _mm256_set1_epi32(2);
    __m256 acc[4];
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++) acc[r] = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2, w += 68) {
        const __m256i w0 = ld32(w + 2), w1 = ld32(w + 36);
        const __m256i a0 = _mm256_sign_epi8(w0, w0), a1 = _mm256_sign_epi8(w1, w1);
        const __m128 dd = f16x4(ref_rd16(w), ref_rd16(w + 34));
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) {
            const int8_t *xq = x[r].q + 32 * b;
            const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(a0, _mm256_sign_epi8(ld32(xq), w0)), ones);
            const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(a1, _mm256_sign_epi8(ld32(xq + 32), w1)), ones);
            const __m256 sc = _mm256_castps128_ps256(_mm_mul_ps(dd, _mm_loadu_ps(x[r].ds + 2 * b)));
            acc[r] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(sc, i0), _mm256_cvtepi32_ps(p0), acc[r]);
            acc[r] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(sc, i2), _mm256_cvtepi32_ps(p1), acc[r]);
        }
    }
    if (b < nb) {
        const __m256i w0 = ld32(w + 2), a0 = _mm256_sign_epi8(w0, w0);
        const __m128 dd = f16x4(ref_rd16(w), 0);
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) {
            const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(a0, _mm256_sign_epi8(ld32(x[r].q + 32 * b), w0)), ones);
            const __m256 sc = _mm256_castps128_ps256(_mm_mul_ps(dd, _mm_loadu_ps(x[r].ds + 2 * b)));
            acc[r] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(sc, i0), _mm256_cvtepi32_ps(p0), acc[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++) out[r] = ref_hsum8(acc[r]);
}

/* A q5 block's 32 codes (qh at p, the nibbles at p + 4) in natural order, unsigned 0..31. */
REF_AVX2 REF_INLINE __m256i q5_codes(const uint8_t *p) {
    return _mm256_or_si256(nibbles32(p + 4), _mm256_and_si256(ref_bits32(ld_u32(p)), _mm256_set1_epi8(0x10)));
}
/* The same less 16, signed -16..15: a clear fifth bit sets the byte's high nibble. */
REF_AVX2 REF_INLINE __m256i q5_0_codes(const uint8_t *p) {
    return _mm256_or_si256(nibbles32(p + 4), _mm256_andnot_si256(ref_bits32(ld_u32(p)), _mm256_set1_epi8((char)0xf0)));
}

/* q5_0: q8_0's kernel on the signed 5-bit codes (the offset inside the exact integer sum). */
REF_AVX2 REF_INLINE void q5_0_rows(const int RM, const uint8_t *w, const QRow *x, int64_t K, float *out) {
    const int64_t nb = K / 32;
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i i0 = _mm256_setzero_si256(), i2 = _mm256_set1_epi32(2);
    __m256 acc[4];
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++) acc[r] = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2, w += 44) {
        const __m256i w0 = q5_0_codes(w + 2), w1 = q5_0_codes(w + 24);
        const __m256i a0 = _mm256_sign_epi8(w0, w0), a1 = _mm256_sign_epi8(w1, w1);
        const __m128 dd = f16x4(ref_rd16(w), ref_rd16(w + 22));
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) {
            const int8_t *xq = x[r].q + 32 * b;
            const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(a0, _mm256_sign_epi8(ld32(xq), w0)), ones);
            const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(a1, _mm256_sign_epi8(ld32(xq + 32), w1)), ones);
            const __m256 sc = _mm256_castps128_ps256(_mm_mul_ps(dd, _mm_loadu_ps(x[r].ds + 2 * b)));
            acc[r] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(sc, i0), _mm256_cvtepi32_ps(p0), acc[r]);
            acc[r] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(sc, i2), _mm256_cvtepi32_ps(p1), acc[r]);
        }
    }
    if (b < nb) {
        const __m256i w0 = q5_0_codes(w + 2), a0 = _mm256_sign_epi8(w0, w0);
        const __m128 dd = f16x4(ref_rd16(w), 0);
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) {
            const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(a0, _mm256_sign_epi8(ld32(x[r].q + 32 * b), w0)), ones);
            const __m256 sc = _mm256_castps128_ps256(_mm_mul_ps(dd, _mm_loadu_ps(x[r].ds + 2 * b)));
            acc[r] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(sc, i0), _mm256_cvtepi32_ps(p0), acc[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++) out[r] = ref_hsum8(acc[r]);
}

/* q5_1: two blocks a step, codes 0..31 in natural order; the scale lanes as q4_1's,
 * [d0·dx0, m0·s0, d1·dx1, m1·s1]. */
REF_AVX2 REF_INLINE void q5_1_rows(const int RM, const uint8_t *w, const QRow *x, int64_t K, float *out) {
    const int64_t nb = K / 32;
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i i0 = _mm256_setzero_si256(), i2 = _mm256_set1_epi32(2);
    __m256 acc[4];
    __m128 accm[4];
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++) acc[r] = _mm256_setzero_ps(), accm[r] = _mm_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2, w += 48) {
        const __m256i c0 = q5_codes(w + 4), c1 = q5_codes(w + 28);
        const __m128 dm = f16x4(ld_u32(w), ld_u32(w + 24));
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) {
            const int8_t *xq = x[r].q + 32 * b;
            const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(c0, ld32(xq)), ones);
            const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(c1, ld32(xq + 32)), ones);
            const __m128 sc = _mm_mul_ps(dm, _mm_loadu_ps(x[r].ds + 2 * b));
            accm[r] = _mm_add_ps(accm[r], sc);
            const __m256 s8 = _mm256_castps128_ps256(sc);
            acc[r] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(s8, i0), _mm256_cvtepi32_ps(p0), acc[r]);
            acc[r] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(s8, i2), _mm256_cvtepi32_ps(p1), acc[r]);
        }
    }
    if (b < nb) {
        const __m256i c0 = q5_codes(w + 4);
        const __m128 dm = f16x4(ld_u32(w), 0);
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) {
            const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(c0, ld32(x[r].q + 32 * b)), ones));
            const __m128 sc = _mm_mul_ps(dm, _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(const void *)(x[r].ds + 2 * b))));
            accm[r] = _mm_add_ps(accm[r], sc);
            acc[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(sc), f, acc[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++) out[r] = ref_hsum8(acc[r]) + lanes13(accm[r]);
}

/* q4_k's 12 scale bytes -> [sc0..sc7, m0..m7] as u8 (GGML's 32-bit unpacking). */
REF_INLINE __m128i k4_scales(const uint8_t *p) {
    uint32_t u[4];
    memcpy(u, p, 12);
    const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
    u[3] = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4);
    const uint32_t mins_lo = u[1] & k1;
    u[1] = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);
    u[2] = mins_lo;
    u[0] &= k1;
    return _mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]);
}
/* A shuffle that broadcasts i16 element e (of each 128-bit half) to the whole half. */
REF_AVX2 REF_INLINE __m256i bcast16(int lo, int hi) {
    return _mm256_set_m128i(_mm_set1_epi16((short)((2 * hi + 1) << 8 | 2 * hi)), _mm_set1_epi16((short)((2 * lo + 1) << 8 | 2 * lo)));
}

/* q4_k and q5_k: per 32-element sub-block j the integer sum times sc_j (eight i32 lanes), scaled by
 * d·dx_j in f32; the mins' term Σ_j m_j·s_j eight lanes at once, scaled by dmin. q5_k (Q5 1, where
 * inlined a constant) adds the fifth bits: sub-block j's from bit j of each qh byte (both
 * sub-blocks of a step from bits 0 and 1, then the bytes shift down by two). */
REF_AVX2 REF_INLINE void k4_rows(const int Q5, const int RM, const uint8_t *w, const QRow *x, int64_t K, float *out) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), b0 = _mm256_set1_epi8(1), b1 = _mm256_set1_epi8(2);
    const int bb = Q5 ? 176 : 144, qo = Q5 ? 48 : 16; /* the block's bytes, its codes' offset */
    (void)b0, (void)b1;
    __m256 acc[4], accm[4];
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++) acc[r] = _mm256_setzero_ps(), accm[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < K / 256; b++, w += bb) {
        const __m256i ms = _mm256_cvtepu8_epi16(k4_scales(w + 4)); /* [sc0..7 | m0..7] */
        const __m256 mins = _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(ms, 1)));
        const __m256i scales = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(ms));
        const float d = _cvtsh_ss(ref_rd16(w)), dmin = _cvtsh_ss(ref_rd16(w + 2));
        const uint8_t *qs = w + qo;
        __m256i hb = Q5 ? ld32(w + 16) : _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            const __m256i q4 = ld32(qs + 32 * j);
            __m256i lo = _mm256_and_si256(q4, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
            if (Q5) {
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(hb, b0), 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(hb, b1), 3));
                hb = _mm256_srli_epi16(hb, 2);
            }
            const __m256i sl = _mm256_shuffle_epi8(scales, bcast16(2 * j, 2 * j));
            const __m256i sh = _mm256_shuffle_epi8(scales, bcast16(2 * j + 1, 2 * j + 1));
#pragma GCC unroll 4
            for (int r = 0; r < RM; r++) {
                const int8_t *xq = x[r].q + 256 * b + 64 * j;
                const __m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, ld32(xq)), sl);
                const __m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, ld32(xq + 32)), sh);
                const float *dx = x[r].d + 8 * b + 2 * j;
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * dx[0]), _mm256_cvtepi32_ps(pl), acc[r]);
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * dx[1]), _mm256_cvtepi32_ps(ph), acc[r]);
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++)
            accm[r] = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_mul_ps(mins, _mm256_loadu_ps(x[r].s + 8 * b)), accm[r]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++) out[r] = ref_hsum8(acc[r]) - ref_hsum8(accm[r]);
}
#define Q4_K_CALL(RM, w, x, K, o) k4_rows(0, RM, w, x, K, o)
#define Q5_K_CALL(RM, w, x, K, o) k4_rows(1, RM, w, x, K, o)

/* q6_k: per 32-element block i the integer sum (codes 0..63, two 16-element scale groups) in
 * eight i32 lanes, scaled by d·dx_i; the codes' offset 32 from the 16-element sums of q, one
 * lane per block, scaled by the eight dx at once. */
REF_AVX2 REF_INLINE void q6_k_rows(const int RM, const uint8_t *w, const QRow *x, int64_t K, float *out) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(3);
    __m256 acc[4], acco[4];
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++) acc[r] = _mm256_setzero_ps(), acco[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < K / 256; b++, w += 210) {
        const uint8_t *ql = w, *qh = w + 128;
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(w + 192)));
        const __m256i sc_lo = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(sc16));      /* sc[0..7] */
        const __m256i sc_hi = _mm256_broadcastsi128_si256(_mm256_extracti128_si256(sc16, 1));  /* sc[8..15] */
        const float d = _cvtsh_ss(ref_rd16(w + 208));
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) { /* lane i: sc_2i·bsum_2i + sc_2i+1·bsum_2i+1, block i's offset / 32 */
            const __m256 o = _mm256_cvtepi32_ps(_mm256_madd_epi16(ld32(x[r].bsums + 16 * b), sc16));
            acco[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_mul_ps(o, _mm256_loadu_ps(x[r].d + 8 * b)), acco[r]);
        }
        for (int n = 0; n < 2; n++, ql += 64, qh += 32) {
            const __m256i scs = n ? sc_hi : sc_lo;
            const __m256i l0 = ld32(ql), l1 = ld32(ql + 32), h = ld32(qh);
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(h, m3), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m3), 4));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m3), 4));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m3), 4));
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                const __m256i sv = _mm256_shuffle_epi8(scs, bcast16(2 * g, 2 * g + 1));
#pragma GCC unroll 4
                for (int r = 0; r < RM; r++) {
                    const __m256i p = _mm256_maddubs_epi16(q[g], ld32(x[r].q + 256 * b + 128 * n + 32 * g));
                    const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, sv));
                    acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * x[r].d[8 * b + 4 * n + g]), f, acc[r]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++) out[r] = ref_hsum8(acc[r]) - 32.0f * ref_hsum8(acco[r]);
}

#define DOT_PAIR_T(ATTR, NAME, CALL)                                                                      \
    ATTR static float NAME##_1(const uint8_t *w, const QRow *x, int64_t K) {                              \
        float o;                                                                                         \
        CALL(1, w, x, K, &o);                                                                            \
        return o;                                                                                        \
    }                                                                                                    \
    ATTR static void NAME##_4(const uint8_t *w, const QRow *x, int64_t K, float *out) { CALL(4, w, x, K, out); }
#define DOT_PAIR(NAME, CALL) DOT_PAIR_T(REF_AVX2, NAME, CALL)
#define Q4_0_CALL(RM, w, x, K, o) q4x_rows(RM, 18, 2, w, x, K, o)
#define Q4_1_CALL(RM, w, x, K, o) q4x_rows(RM, 20, 4, w, x, K, o)
DOT_PAIR(dot_q4_0_avx2, Q4_0_CALL)
DOT_PAIR(dot_q4_1_avx2, Q4_1_CALL)
DOT_PAIR(dot_q8_0_avx2, q8_0_rows)
DOT_PAIR(dot_q4_k_avx2, Q4_K_CALL)
DOT_PAIR(dot_q6_k_avx2, q6_k_rows)
DOT_PAIR(dot_q5_0_avx2, q5_0_rows)
DOT_PAIR(dot_q5_1_avx2, q5_1_rows)
DOT_PAIR(dot_q5_k_avx2, Q5_K_CALL)

/* Decode (M = 1) over weight rows [c0, c1) with the dot inlined: one prefetch per cache line,
 * kept about pf_bytes ahead of the row being read (the range's first pf_bytes at once), instead
 * of a call and a row's worth of prefetches per row (+10% tokens/s, docs/BENCHMARKS.md); past
 * the range within the weight, as x8_range1. Each output is the dot's, bit for bit. */
#define RANGE1_T(ATTR, NAME, CALL)                                                                        \
    ATTR static void NAME(const Q8Ctx *c, int64_t c0, int64_t c1) {                                        \
        if (c0 >= c1) return;                                                                            \
        const QRow r = q8_row(c, 0);                                                                     \
        float *y = ref_frow(c->g.y, 0);                                                                  \
        const uint64_t rb = c->g.w->row_stride;                                                          \
        const uint8_t *w = ref_wrow(c->g.w, (uint64_t)c0);                                               \
        const char *pf = (const char *)w, *pend = (const char *)ref_wrow(c->g.w, (uint64_t)(c->g.N - 1)) + c->wrb; \
        for (int64_t n = c0; n < c1; n++, w += rb) {                                                     \
            const char *want = (const char *)w + c->pf_bytes;                                           \
            for (; pf < want && pf < pend; pf += 64) ref_prefetch(pf);                                   \
            float o;                                                                                     \
            CALL(1, w, &r, c->g.K, &o);                                                                  \
            y[n] = o;                                                                                    \
        }                                                                                                \
    }
#define RANGE1(NAME, CALL) RANGE1_T(REF_AVX2, NAME, CALL)
RANGE1(range1_q4_0_avx2, Q4_0_CALL)
RANGE1(range1_q4_1_avx2, Q4_1_CALL)
RANGE1(range1_q8_0_avx2, q8_0_rows)
RANGE1(range1_q4_k_avx2, Q4_K_CALL)
RANGE1(range1_q6_k_avx2, q6_k_rows)
RANGE1(range1_q5_0_avx2, q5_0_rows)
RANGE1(range1_q5_1_avx2, q5_1_rows)
RANGE1(range1_q5_k_avx2, Q5_K_CALL)

#define REF_AVX512BW __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))
/* [v[i] x8 | v[i + 1] x8]: the scales of a register's two 32-element blocks from eight (one
 * vpermps where a pair of broadcasts and an insert would be three shuffles). */
REF_AVX512BW REF_INLINE __m512 pair_ps(__m256 v, int i) {
    const __m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(i)), _mm256_set1_epi32(i + 1), 1);
    return _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(v));
}
/* vpermw indices: 128-bit lane k of the result takes i16 element i + k. */
REF_AVX512BW REF_INLINE __m512i lanes16(int i) {
    const int a = i * 0x10001, b = (i + 1) * 0x10001, c = (i + 2) * 0x10001, e = (i + 3) * 0x10001;
    return _mm512_set_epi32(e, e, e, e, c, c, c, c, b, b, b, b, a, a, a, a);
}
REF_AVX512BW REF_INLINE __m256 fold16(__m512 v) { /* 16 lanes to 8 (a fixed tree) */
    return _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

/* q4_k and q5_k on AVX-512 BW (the avx512 level): a 32-byte chunk's low nibbles (sub-block 2j)
 * and high nibbles (2j + 1) in one 512-bit register against x's 64 elements at once, so a chunk
 * is one maddubs, one madd (the sub-block scales) and one FMA a row, where AVX2 takes two of each
 * (gemm_nt2 of Qwen2.5-Coder-1.5B's decode: 1.26x). q5_k (Q5 1, where inlined a constant) adds the
 * fifth bits: a chunk's two sub-blocks' (bits 2j and 2j + 1 of each qh byte) tested into a mask
 * that adds 16 to their codes. The integer sums are AVX2's; the f32 sums run in 16 lanes (the
 * level's own order; dot, dot4 and the one-row range share it). */
REF_AVX512BW REF_INLINE void k4_rows512(const int Q5, const int RM, const uint8_t *w, const QRow *x, int64_t K, float *out) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), b4 = _mm512_set1_epi8(0x10);
    const __m512i shv = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    const int bb = Q5 ? 176 : 144, qo = Q5 ? 48 : 16; /* the block's bytes, its codes' offset */
    (void)b4;
    __m512 acc[4];
    __m256 accm[4], dd[4];
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++) acc[r] = _mm512_setzero_ps(), accm[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < K / 256; b++, w += bb) {
        const __m256i ms = _mm256_cvtepu8_epi16(k4_scales(w + 4)); /* [sc0..7 | m0..7] */
        const __m256 mins = _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(ms, 1)));
        const __m512i ms5 = _mm512_castsi256_si512(ms);
        const float d = _cvtsh_ss(ref_rd16(w)), dmin = _cvtsh_ss(ref_rd16(w + 2));
        __m512i hh = _mm512_setzero_si512();
        if (Q5) {
            const __m256i h = ld32(w + 16);
            hh = _mm512_inserti64x4(_mm512_castsi256_si512(h), h, 1);
        }
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) dd[r] = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_loadu_ps(x[r].d + 8 * b)); /* d·dx, each the scalar product */
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const __m256i q = ld32(w + qo + 32 * j);
            __m512i wv = _mm512_and_si512(_mm512_srlv_epi16(_mm512_inserti64x4(_mm512_castsi256_si512(q), q, 1), shv), m4);
            if (Q5) {
                const __m512i bit = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi8((char)(1 << (2 * j)))),
                                                       _mm256_set1_epi8((char)(1 << (2 * j + 1))), 1);
                wv = _mm512_mask_add_epi8(wv, _mm512_test_epi8_mask(hh, bit), wv, b4);
            }
            const __m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)(2 * j))),
                                                   _mm256_set1_epi16((short)(2 * j + 1)), 1);
            const __m512i sc = _mm512_permutexvar_epi16(idx, ms5);
#pragma GCC unroll 4
            for (int r = 0; r < RM; r++) {
                const __m512i p = _mm512_madd_epi16(_mm512_maddubs_epi16(wv, _mm512_loadu_si512((const void *)(x[r].q + 256 * b + 64 * j))), sc);
                acc[r] = _mm512_fmadd_ps(pair_ps(dd[r], 2 * j), _mm512_cvtepi32_ps(p), acc[r]);
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++)
            accm[r] = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_mul_ps(mins, _mm256_loadu_ps(x[r].s + 8 * b)), accm[r]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++) out[r] = ref_hsum8(fold16(acc[r])) - ref_hsum8(accm[r]);
}
#define Q4_K_512(RM, w, x, K, o) k4_rows512(0, RM, w, x, K, o)
#define Q5_K_512(RM, w, x, K, o) k4_rows512(1, RM, w, x, K, o)
DOT_PAIR_T(REF_AVX512BW, dot_q4_k_512, Q4_K_512)
RANGE1_T(REF_AVX512BW, range1_q4_k_512, Q4_K_512)
DOT_PAIR_T(REF_AVX512BW, dot_q5_k_512, Q5_K_512)
RANGE1_T(REF_AVX512BW, range1_q5_k_512, Q5_K_512)

/* q6_k on AVX-512 BW: a 64-byte ql span's low nibbles are elements 0..63 of its 128 and its high
 * nibbles 64..127, each with two bits of the 32-byte qh span (shifted per 256-bit half), so 64
 * elements (four 16-element scale groups, one per 128-bit lane) are one maddubs, one madd and
 * one FMA a row, where AVX2 takes two of each. The integer sums are AVX2's (the offset 32 from
 * the 16-element sums of q, scaled by d·dx); the f32 sums run in 16 lanes (dot, dot4 and the
 * one-row range share it). */
REF_AVX512BW REF_INLINE void q6_k_rows512(const int RM, const uint8_t *w, const QRow *x, int64_t K, float *out) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    const __m512i shl = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1); /* bits 0-1 | 2-3 to 4-5 */
    const __m512i shr = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1); /* bits 4-5 | 6-7 to 4-5 */
    __m512 acc[4];
    __m256 acco[4], dd[4];
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++) acc[r] = _mm512_setzero_ps(), acco[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < K / 256; b++, w += 210) {
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(w + 192)));
        const __m512i sc5 = _mm512_castsi256_si512(sc16);
        const float d = _cvtsh_ss(ref_rd16(w + 208));
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) { /* dd: d·dx of the eight blocks; the offset's lanes as AVX2's, scaled by dd */
            dd[r] = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_loadu_ps(x[r].d + 8 * b));
            const __m256 o = _mm256_cvtepi32_ps(_mm256_madd_epi16(ld32(x[r].bsums + 16 * b), sc16));
            acco[r] = _mm256_fmadd_ps(o, dd[r], acco[r]);
        }
#pragma GCC unroll 2
        for (int n = 0; n < 2; n++) {
            const __m512i l = _mm512_loadu_si512((const void *)(w + 64 * n));
            const __m256i h = ld32(w + 128 + 32 * n);
            const __m512i hh = _mm512_inserti64x4(_mm512_castsi256_si512(h), h, 1);
            __m512i q[2]; /* elements 0..63, 64..127 of the span, codes 0..63 */
            q[0] = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(_mm512_sllv_epi16(hh, shl), m30));
            q[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4), _mm512_and_si512(_mm512_srlv_epi16(hh, shr), m30));
#pragma GCC unroll 2
            for (int t = 0; t < 2; t++) {
                const __m512i sv = _mm512_permutexvar_epi16(lanes16(8 * n + 4 * t), sc5);
#pragma GCC unroll 4
                for (int r = 0; r < RM; r++) {
                    const __m512i xq = _mm512_loadu_si512((const void *)(x[r].q + 256 * b + 128 * n + 64 * t));
                    const __m512i p = _mm512_madd_epi16(_mm512_maddubs_epi16(q[t], xq), sv);
                    acc[r] = _mm512_fmadd_ps(pair_ps(dd[r], 4 * n + 2 * t), _mm512_cvtepi32_ps(p), acc[r]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++) out[r] = ref_hsum8(fold16(acc[r])) - 32.0f * ref_hsum8(acco[r]);
}
DOT_PAIR_T(REF_AVX512BW, dot_q6_k_512, q6_k_rows512)
RANGE1_T(REF_AVX512BW, range1_q6_k_512, q6_k_rows512)
#endif

/* ---- the run -------------------------------------------------------------------------------------- */

/* Packed decode over groups [c0, c1) of 8 rows. The dot prefetches each block pf_bytes ahead
 * as it reads it: a group of K = 1536 is 7.5 KiB, so prefetching per group fell behind within
 * it (down: +16%, 8 pairs). The prefetch runs on past the range, within the weight: the front
 * thread of the both-ends decode claims its next chunk where its last one ended, so its stream
 * does not restart at every claim (layers +8%, bench/decode.c, 5 pairs). */
static void x8_range1(const Q8Ctx *c, int64_t c0, int64_t c1) {
    const int64_t K = c->g.K, gb = 8 * (int64_t)c->g.w->row_stride; /* bytes of a group */
    const QRow r = q8_row(c, 0);
    float *y = ref_frow(c->g.y, 0);
    const uint8_t *hi = ref_wrow(c->g.w, 0) + c->g.N / 8 * gb; /* the weight's end */
    const uint8_t *w0 = ref_wrow(c->g.w, (uint64_t)c0), *w1 = ref_wrow(c->g.w, (uint64_t)c1);
    for (const uint8_t *p = w0; p < w0 + c->pf_bytes && p < hi; p += 64) ref_prefetch((const char *)p);
    for (const uint8_t *w = w0; w < w1; w += gb)
        ref_x8_dot(c->isa, c->enc, w, 1, &r, K, y + c0 + (w - w0) / gb * 8, w + gb + c->pf_bytes <= hi ? w + c->pf_bytes : NULL);
}

/* A few rows (2..REF_FEW_ROWS: a decode row with its drafts, a handful of decode rows): the weights
 * still stream from memory once, so they are walked as decode walks them, a group at a time
 * against every row (four at once, then one by one, while the group is in L1), its lines
 * prefetched pf_bytes ahead. Each output is the dot's, bit for bit. */
static void x8_range_few(const Q8Ctx *c, int64_t c0, int64_t c1) {
    const int64_t K = c->g.K, M = c->g.M, gb = 8 * (int64_t)c->g.w->row_stride;
    QRow xr[REF_FEW_ROWS];
    for (int64_t i = 0; i < M; i++) xr[i] = q8_row(c, i);
    const uint8_t *hi = ref_wrow(c->g.w, 0) + c->g.N / 8 * gb;
    const uint8_t *w0 = ref_wrow(c->g.w, (uint64_t)c0), *w1 = ref_wrow(c->g.w, (uint64_t)c1);
    for (const uint8_t *p = w0; p < w0 + c->pf_bytes && p < hi; p += 64) ref_prefetch((const char *)p);
    for (const uint8_t *w = w0; w < w1; w += gb) {
        for (const uint8_t *p = w + c->pf_bytes; p < w + c->pf_bytes + gb && p < hi; p += 64) ref_prefetch((const char *)p);
        float o[8 * REF_FEW_ROWS];
        ref_x8_dot(c->isa, c->enc, w, (int)M, xr, K, o, NULL);
        const int64_t n = c0 + (w - w0) / gb * 8;
        for (int64_t i = 0; i < M; i++) memcpy(ref_frow(c->g.y, (uint64_t)i) + n, o + 8 * i, 8 * sizeof(float));
    }
}

/* Packed weights (c0, c1 multiples of 8): decode as above, a few rows alike; more rows take
 * QTILE columns at a time against four rows at once. */
static void x8_range(const Q8Ctx *c, int64_t c0, int64_t c1) {
    const int64_t K = c->g.K;
    if (c->g.M == 1) {
        x8_range1(c, c0, c1);
        return;
    }
    if (c->g.M <= REF_FEW_ROWS) {
        x8_range_few(c, c0, c1);
        return;
    }
    for (int64_t t0 = c0; t0 < c1; t0 += QTILE) {
        const int64_t t1 = c1 - t0 < QTILE ? c1 : t0 + QTILE;
        for (int64_t i = 0; i < c->g.M; i += 4) {
            const int rm = c->g.M - i < 4 ? (int)(c->g.M - i) : 4;
            QRow xr[4];
            for (int k = 0; k < rm; k++) xr[k] = q8_row(c, i + k);
            for (int64_t n = t0; n < t1; n += 8) {
                float o[32];
                ref_x8_dot(c->isa, c->enc, ref_wrow(c->g.w, (uint64_t)n), rm, xr, K, o, NULL);
                for (int k = 0; k < rm; k++) memcpy(ref_frow(c->g.y, (uint64_t)(i + k)) + n, o + 8 * k, 8 * sizeof(float));
            }
        }
    }
}

static RefQRow tile_row(const void *c, int64_t i) { return q8_row(c, i); }

/* Every row of x against weight columns [c0, c1). */
static void dot_range(const Q8Ctx *c, int64_t c0, int64_t c1) {
    if (c->tile) { /* before x8: packed weights' tiles come from their groups */
        const RefTileArgs t = {c->g.w, c->g.y, c->g.M, c->g.K, c, tile_row};
        if (ref_tile_range(&t, c0, c1)) return;
        /* no tile scratch: below, x8's kernels or the portable dot (tile left dot4 and range1
         * unset), the same bits */
    }
    if (c->x8) {
        x8_range(c, c0, c1);
        return;
    }
    if (c->g.M == 1 && c->range1) {
        c->range1(c, c0, c1);
        return;
    }
    if (c->g.M > 1 && c->g.M <= REF_FEW_ROWS) { /* a few rows: each weight row streamed once, fetched ahead, against all */
        QRow r[REF_FEW_ROWS];
        for (int64_t i = 0; i < c->g.M; i++) r[i] = q8_row(c, i);
        for (int64_t n = c0; n < c1; n++) {
            if (n + c->pf_rows < c1) {
                const char *p = (const char *)ref_wrow(c->g.w, (uint64_t)(n + c->pf_rows));
                for (uint64_t o = 0; o < c->wrb; o += 64) ref_prefetch(p + o);
            }
            const uint8_t *w = ref_wrow(c->g.w, (uint64_t)n);
            int64_t i = 0;
            if (c->dot4) {
                for (; i + 4 <= c->g.M; i += 4) {
                    float o[4];
                    c->dot4(w, r + i, c->g.K, o);
                    for (int k = 0; k < 4; k++) ref_frow(c->g.y, (uint64_t)(i + k))[n] = o[k];
                }
                if (c->g.M - i == 3) { /* three rows: dot4 with the last twice (dot's bits either way) */
                    const QRow r4[4] = {r[i], r[i + 1], r[i + 2], r[i + 2]};
                    float o[4];
                    c->dot4(w, r4, c->g.K, o);
                    for (int k = 0; k < 3; k++) ref_frow(c->g.y, (uint64_t)(i + k))[n] = o[k];
                    i += 3;
                }
            }
            for (; i < c->g.M; i++) ref_frow(c->g.y, (uint64_t)i)[n] = c->dot(w, &r[i], c->g.K);
        }
        return;
    }
    for (int64_t t0 = c0; t0 < c1; t0 += QTILE) {
        const int64_t t1 = c1 - t0 < QTILE ? c1 : t0 + QTILE;
        int64_t i = 0;
        if (c->dot4)
            for (; i + 4 <= c->g.M; i += 4) {
                const QRow r[4] = {q8_row(c, i), q8_row(c, i + 1), q8_row(c, i + 2), q8_row(c, i + 3)};
                float *y[4];
                for (int k = 0; k < 4; k++) y[k] = ref_frow(c->g.y, (uint64_t)(i + k));
                for (int64_t n = t0; n < t1; n++) {
                    float o[4];
                    c->dot4(ref_wrow(c->g.w, (uint64_t)n), r, c->g.K, o);
                    for (int k = 0; k < 4; k++) y[k][n] = o[k];
                }
            }
        for (; i < c->g.M; i++) {
            const QRow r = q8_row(c, i);
            float *y = ref_frow(c->g.y, (uint64_t)i);
            for (int64_t n = t0; n < t1; n++) {
                if (c->g.M == 1 && n + c->pf_rows < c1) { /* decode streams the weights once: fetch ahead */
                    const char *p = (const char *)ref_wrow(c->g.w, (uint64_t)(n + c->pf_rows));
                    for (uint64_t o = 0; o < c->wrb; o += 64) ref_prefetch(p + o);
                }
                y[n] = c->dot(ref_wrow(c->g.w, (uint64_t)n), &r, c->g.K);
            }
        }
    }
}

static void dot_task(void *ctx, int tid, int nth) {
    const Q8Ctx *c = ctx;
    int64_t c0, c1;
    ref_split(c->g.N, tid, nth, c->align, &c0, &c1);
    dot_range(c, c0, c1);
}

/* ---- decode on two threads: own halves, then the other's back end -----------------------------------
 * With M = 1 and two threads, fixed halves leave one thread waiting whenever the other starts
 * late or streams slower (a shared VM's neighbours; measured: the waiting thread spends 7-19%
 * of its time at the barrier). Here each thread walks its own half of the weight rows upward in
 * small claims, so its stream never restarts (the prefetch runs on past each claim), and a
 * thread done with its half takes chunks (a quarter of what is left) from the other half's back
 * end until they meet: whoever is faster does more. (Before, one thread walked from the first
 * row and the other claimed from the last, so the second restarted its stream at every claim:
 * the layers' GEMMs were 3% slower, 32 pairs.) Each output is the same dot either way, so
 * results do not change. The rows are the parts' columns one after another (gemm_nt2/3 run as
 * one). */
typedef struct TwoEnds {
    const Q8Ctx *part;
    RefGemmUnits rows;                      /* the parts' rows one after another (align 1; 8 for packed parts) */
    int64_t min_chunk;
    struct {
        _Alignas(64) _Atomic uint64_t fb;   /* next unit from the front | (end from the back) << 32 */
    } half[2];                              /* a cache line each: the owners claim without sharing one */
} TwoEnds;

/* A chunk of half h: from its front (its owner, the stream continuing) or from its back (the
 * other thread, done with its own half): an eighth or a quarter of what is left, at least
 * min_chunk units. */
static int two_ends_claim(TwoEnds *t, int h, int back, int64_t *lo, int64_t *hi) {
    _Atomic uint64_t *fb = &t->half[h].fb;
    uint64_t v = atomic_load_explicit(fb, memory_order_relaxed);
    for (;;) {
        const int64_t f = (int64_t)(v & 0xffffffffu), b = (int64_t)(v >> 32);
        if (f >= b) return 0;
        int64_t k = back ? (b - f) / 4 : (b - f) / 8;
        k = k < t->min_chunk ? t->min_chunk : k;
        k = k > b - f ? b - f : k;
        const uint64_t nv = back ? ((uint64_t)(b - k) << 32) | (uint64_t)f : ((uint64_t)b << 32) | (uint64_t)(f + k);
        /* relaxed: the ranges are disjoint, and the pool's completion publishes the outputs */
        if (atomic_compare_exchange_weak_explicit(fb, &v, nv, memory_order_relaxed, memory_order_relaxed)) {
            *lo = back ? b - k : f;
            *hi = back ? b : f + k;
            return 1;
        }
    }
}

static void two_ends_range(const void *ctx, int i, int64_t c0, int64_t c1) {
    const Q8Ctx *c = &((const TwoEnds *)ctx)->part[i];
    for (int64_t n = c0; (!c->range1 || c->g.M > 1) && !c->x8 && n < c0 + c->pf_rows && n < c1; n++) { /* the chunk's first rows at once */
        const char *p = (const char *)ref_wrow(c->g.w, (uint64_t)n);
        for (uint64_t o = 0; o < c->wrb; o += 64) ref_prefetch(p + o);
    }
    dot_range(c, c0, c1);
}

static void two_ends_task(void *ctx, int tid, int nth) {
    TwoEnds *t = ctx;
    (void)nth;
    int64_t lo, hi;
    const int own = tid == 1;
    while (two_ends_claim(t, own, 0, &lo, &hi)) ref_gemm_units_each(&t->rows, lo, hi, two_ends_range, t);
    while (two_ends_claim(t, !own, 1, &lo, &hi)) ref_gemm_units_each(&t->rows, lo, hi, two_ends_range, t);
}

/* Runs parts[0 .. n) (M = 1) as two owned halves with stealing; 0 when that does not apply (not
 * two threads). */
static int two_ends_run(const RadKernelArgs *a, int nth, const Q8Ctx *parts, int n) {
    const RefState *st = a->lib_state;
    if (nth != 2 || parts[0].g.M > REF_FEW_ROWS || !st || !st->two_ends) return 0;
    TwoEnds t;
    t.part = parts;
    int64_t N[REF_GEMM_MAX_PARTS];
    uint64_t wrb = 0;
    int64_t align = 1;
    for (int i = 0; i < n; i++) {
        N[i] = parts[i].g.N;
        wrb = parts[i].wrb > wrb ? parts[i].wrb : wrb;
        align = parts[i].x8 ? 8 : align;
    }
    ref_gemm_units_init(&t.rows, N, n, align);
    if (t.rows.cols >= ((int64_t)1 << 31)) return 0;
    int64_t min_rows = (int64_t)(16384 / wrb); /* about 16 KiB a claim near the end, at least 4 rows */
    min_rows = min_rows < 4 ? 4 : min_rows;
    t.min_chunk = (min_rows + align - 1) / align;
    const uint64_t units = (uint64_t)t.rows.u0[n], mid = units / 2;
    atomic_init(&t.half[0].fb, mid << 32);
    atomic_init(&t.half[1].fb, (units << 32) | mid);
    ref_parallel(a, 2, two_ends_task, &t);
    return 1;
}

/* The dot functions and sizes for c->g's weight encoding, the quantised rows in the layout that
 * dot reads (c->buf is left to the caller). tile: the "q8tile" variant, which takes the tiled
 * path on AVX-512 VNNI (with the portable dot's arithmetic: its dot is the portable one) and
 * is q8act below that level. */
static void q8_prepare(Q8Ctx *c, int isa, int64_t pf_bytes, int tile) {
    c->isa = isa;
    c->pf_bytes = pf_bytes;
    c->x8 = (c->g.w->dtype & RAD_PACKED) != 0; /* ref_weight_ok let only REF_ENCS_PACKED through */
    c->tile = tile && isa >= REF_ISA_AVX512; /* packed weights too: their groups are tile halves */
    c->align = c->tile ? 16 : c->x8 ? 8 : 4;
    const RadDType e = (RadDType)(c->g.w->dtype & ~RAD_PACKED);
    c->enc = e;
    c->kq = e == RAD_Q4_K || e == RAD_Q5_K || e == RAD_Q6_K;
    c->paired = 0;
    c->dot4 = NULL;
    c->range1 = NULL;
    switch ((int)e) {
    case RAD_Q8_0: c->dot = dot_q8_0_generic; break;
    case RAD_Q4_0: c->dot = dot_q4_0_generic; break;
    case RAD_Q4_1: c->dot = dot_q4_1_generic; break;
    case RAD_Q5_0: c->dot = dot_q5_0_generic; break;
    case RAD_Q5_1: c->dot = dot_q5_1_generic; break;
    case RAD_Q4_K: c->dot = dot_q4_k_generic; break;
    case RAD_Q5_K: c->dot = dot_q5_k_generic; break;
    default: c->dot = dot_q6_k_generic; break;
    }
#if REF_X86
    if (c->isa >= REF_ISA_AVX2 && !c->x8 && !c->tile) {
        switch ((int)e) {
        case RAD_Q8_0: c->dot = dot_q8_0_avx2_1, c->dot4 = dot_q8_0_avx2_4, c->range1 = range1_q8_0_avx2; break;
        case RAD_Q4_0: c->dot = dot_q4_0_avx2_1, c->dot4 = dot_q4_0_avx2_4, c->range1 = range1_q4_0_avx2, c->paired = 1; break;
        case RAD_Q4_1: c->dot = dot_q4_1_avx2_1, c->dot4 = dot_q4_1_avx2_4, c->range1 = range1_q4_1_avx2, c->paired = 1; break;
        case RAD_Q5_0: c->dot = dot_q5_0_avx2_1, c->dot4 = dot_q5_0_avx2_4, c->range1 = range1_q5_0_avx2; break;
        case RAD_Q5_1: c->dot = dot_q5_1_avx2_1, c->dot4 = dot_q5_1_avx2_4, c->range1 = range1_q5_1_avx2; break;
        case RAD_Q4_K: c->dot = dot_q4_k_avx2_1, c->dot4 = dot_q4_k_avx2_4, c->range1 = range1_q4_k_avx2; break;
        case RAD_Q5_K: c->dot = dot_q5_k_avx2_1, c->dot4 = dot_q5_k_avx2_4, c->range1 = range1_q5_k_avx2; break;
        default: c->dot = dot_q6_k_avx2_1, c->dot4 = dot_q6_k_avx2_4, c->range1 = range1_q6_k_avx2; break;
        }
        /* the avx512 level: the K-quants' AVX-512 BW dots (their own f32 order, which dot, dot4
         * and range1 share: a row's bits do not depend on M); the rest keep AVX2's */
        if (c->isa >= REF_ISA_AVX512 && e == RAD_Q4_K)
            c->dot = dot_q4_k_512_1, c->dot4 = dot_q4_k_512_4, c->range1 = range1_q4_k_512;
        if (c->isa >= REF_ISA_AVX512 && e == RAD_Q5_K)
            c->dot = dot_q5_k_512_1, c->dot4 = dot_q5_k_512_4, c->range1 = range1_q5_k_512;
        if (c->isa >= REF_ISA_AVX512 && e == RAD_Q6_K)
            c->dot = dot_q6_k_512_1, c->dot4 = dot_q6_k_512_4, c->range1 = range1_q6_k_512;
    }
#endif
    c->row_pairs = !c->kq;
    c->row_kq = c->kq;
    c->row_isum = c->tile || c->x8; /* offset codes' correction (packed q4_0, q5_0) */
    c->row_bytes = q8_row_bytes(c->g.K, c->row_pairs, c->row_kq, c->row_isum);
    c->wrb = ref_row_bytes(e, (uint64_t)c->g.K);
    c->pf_rows = (int64_t)((uint64_t)c->pf_bytes / c->wrb);
    c->pf_rows = c->pf_rows < 1 ? 1 : c->pf_rows > 16 ? 16 : c->pf_rows;
}

static void quantize(const RadKernelArgs *a, Q8Ctx *c) {
    int nq = ref_threads(a, (double)c->g.M * (double)c->g.K, 16384.0);
    if (nq > c->g.M) nq = (int)c->g.M;
    ref_parallel(a, nq, quant_task, c);
}

static int run_gemm(const RadKernelArgs *a, int tile) {
    Q8Ctx c;
    int rc = ref_gemm_args(a, REF_ENCS_Q8ACT | REF_TAKES_PACKED, &c.g);
    if (rc) return rc;
    q8_prepare(&c, ref_isa(a), rad_knob_value(a, REF_KNOB_PREFETCH, REF_PF_BYTES), tile);
    c.buf = ref_scratch(1, c.row_bytes * (size_t)c.g.M);
    if (!c.buf) return RAD_E_NOMEM;
    /* quantise x (nothing is written to y yet), then the dots */
    quantize(a, &c);
    int nth = ref_threads_tuned(a, (double)c.g.M * (double)c.g.N * (double)c.g.K, 32768.0);
    if (nth > (c.g.N + 3) / 4) nth = (int)((c.g.N + 3) / 4);
    /* one part a thread: more parts (balancing) measured slower on decode, each part's first
     * rows being past the prefetch */
    if (two_ends_run(a, nth, &c, 1)) return RAD_OK;
    ref_parallel(a, nth, dot_task, &c);
    return RAD_OK;
}

int ref_run_gemm_q8act(const RadKernelArgs *a) { return run_gemm(a, 0); }
int ref_run_gemm_q8tile(const RadKernelArgs *a) { return run_gemm(a, 1); }

/* ---- gemm_nt2 / gemm_nt3: several weights against one x, one job ------------------------------- */

typedef struct Q8Multi {
    Q8Ctx part[REF_GEMM_MAX_PARTS];
    RefGemmUnits u;
} Q8Multi;

static void multi_range(const void *ctx, int i, int64_t c0, int64_t c1) { dot_range(&((const Q8Multi *)ctx)->part[i], c0, c1); }

static void multi_task(void *ctx, int tid, int nth) { ref_gemm_units_run(&((Q8Multi *)ctx)->u, tid, nth, multi_range, ctx); }

/* x is quantised once per order of codes (paired or not; parts of one encoding always share),
 * into rows carrying every scale layout the sharing parts read (32-element parts the (d, s)
 * pairs, K-quant parts d[], s[] and the 16-element sums: a q8_0 v beside q4_k q and k, or q5_0
 * gate beside q4_k up, quantise once), and the parts' columns run as one job: the point is
 * decode, where each GEMM is a few microseconds and every job costs a hand-over between threads.
 * A part's codes and scales are those its gemm_nt computes, so every output equals gemm_nt's. */
static int run_gemm_multi(const RadKernelArgs *a, int tile) {
    Q8Multi m;
    RefGemmArgs g[REF_GEMM_MAX_PARTS];
    int np, rc = ref_gemm_multi_args(a, REF_ENCS_Q8ACT | REF_TAKES_PACKED, g, &np);
    if (rc) return rc;
    const int isa = ref_isa(a);
    int owner[REF_GEMM_MAX_PARTS];
    for (int i = 0; i < np; i++) {
        m.part[i].g = g[i];
        q8_prepare(&m.part[i], isa, rad_knob_value(a, REF_KNOB_PREFETCH, REF_PF_BYTES), tile);
        owner[i] = i;
        for (int j = 0; j < i && owner[i] == i; j++)
            if (owner[j] == j && m.part[j].paired == m.part[i].paired) owner[i] = j;
        Q8Ctx *o = &m.part[owner[i]];
        o->row_pairs |= m.part[i].row_pairs;
        o->row_kq |= m.part[i].row_kq;
        o->row_isum |= m.part[i].row_isum;
    }
    size_t bytes = 0;
    for (int i = 0; i < np; i++) {
        const Q8Ctx *o = &m.part[owner[i]];
        m.part[i].row_pairs = o->row_pairs;
        m.part[i].row_kq = o->row_kq;
        m.part[i].row_isum = o->row_isum;
        m.part[i].row_bytes = q8_row_bytes(g[i].K, o->row_pairs, o->row_kq, o->row_isum);
        if (owner[i] == i) bytes += m.part[i].row_bytes * (size_t)g[i].M;
    }
    uint8_t *buf = ref_scratch(1, bytes);
    if (!buf) return RAD_E_NOMEM;
    size_t off = 0;
    for (int i = 0; i < np; i++) {
        if (owner[i] != i) {
            m.part[i].buf = m.part[owner[i]].buf;
            continue;
        }
        m.part[i].buf = buf + off;
        off += m.part[i].row_bytes * (size_t)g[i].M;
        quantize(a, &m.part[i]);
    }
    int64_t N[REF_GEMM_MAX_PARTS], align = 4;
    for (int i = 0; i < np; i++) N[i] = g[i].N, align = m.part[i].align > align ? m.part[i].align : align;
    ref_gemm_units_init(&m.u, N, np, align);
    int nth = ref_threads_tuned(a, (double)g[0].M * (double)m.u.cols * (double)g[0].K, 32768.0);
    if (nth > m.u.u0[np]) nth = (int)m.u.u0[np];
    if (two_ends_run(a, nth, m.part, np)) return RAD_OK;
    ref_parallel(a, nth, multi_task, &m);
    return RAD_OK;
}

int ref_run_gemm_multi_q8act(const RadKernelArgs *a) { return run_gemm_multi(a, 0); }
int ref_run_gemm_multi_q8tile(const RadKernelArgs *a) { return run_gemm_multi(a, 1); }
