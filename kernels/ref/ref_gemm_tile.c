/* ref_gemm_tile.c — the "q8tile" GEMMs' many-row path: GGML block weights against activations
 * quantised as q8act quantises them (ref_gemm_q8.c), on AVX-512 VNNI.
 *
 * Why: prefill multiplies every weight by hundreds of rows, so the weights' unpacking should be
 * paid once per weight, not once per four rows as q8act's AVX2 dots pay it, and the integer
 * products should be VNNI's 64 a instruction. A thread takes 16 weight columns at a time,
 * unpacks them into a tile (below) and runs every row of x against it, 8 rows at once (4 for
 * the K-quants).
 *
 * Tile, per 32-element block b of K: codes u8 [8 chunks][16 columns][4] (chunk c holds the
 * column's elements 4c..4c+3, as vpdpbusd reads them: lane j sums column j's four products),
 * then the block's per-column scales. Codes are unsigned: the stored codes, or for q8_0 the
 * signed code + 128; an offset z (q4_0 8, q5_0 16, q8_0 128, q6_k 32) comes back in the integer
 * sum as z·Σq (the row's block sums, exact), so each block's integer is the very integer the
 * portable dot computes. The f32 operations that follow are the portable dot's, in its order
 * (blocks ascending; no fused multiply-add), one column a lane: every output is the portable
 * q8act dot's, bit for bit, whatever the rows, threads or tiles (tests/kernels/ref_test.c). */
#include <stdint.h>
#include <stdlib.h>

#include "ref_gemm.h"
#include "ref_quant.h"

#define TC 16  /* columns a tile */
#define TB 512 /* code bytes a block of a tile */

/* One tile's scales, each [nb][TC] (or [nsb][TC]): what the encoding's dot reads. */
typedef struct Tile {
    uint8_t *codes; /* [nb][8][TC][4] */
    float *a;       /* 32-element formats: d; q4_k/q5_k: unused */
    float *m;       /* q4_1/q5_1: m; q4_k/q5_k: (float)mn of the sub-block */
    int32_t *sc;    /* q4_k/q5_k: sc of the sub-block; q6_k: [nb][2][TC] the two 16-element scales */
    float *D, *Dm;  /* K-quants: [nb / 8][TC] the super-block's d and dmin */
} Tile;

static size_t tile_bytes(int64_t nb) {
    const size_t n = (size_t)nb;
    return n * TB + n * TC * 4 * 4 + n * 2 * TC * 4 + 2 * (n / 8 + 1) * TC * 4 + 64 * 6;
}

static Tile tile_at(uint8_t *p, int64_t nb) {
    const size_t n = (size_t)nb;
    Tile t;
    t.codes = p;
    p += n * TB;
    t.a = (float *)(void *)p, p += n * TC * 4;
    t.m = (float *)(void *)p, p += n * TC * 4;
    t.sc = (int32_t *)(void *)p, p += n * 2 * TC * 4;
    t.D = (float *)(void *)p, p += (n / 8 + 1) * TC * 4;
    t.Dm = (float *)(void *)p;
    return t;
}

/* Column j's block b: its 32 codes into the tile's chunks. */
static inline void put_codes(const Tile *t, int64_t b, int j, const uint8_t c[32]) {
    uint8_t *o = t->codes + (size_t)b * TB + 4 * (size_t)j;
    for (int k = 0; k < 8; k++) memcpy(o + 64 * k, c + 4 * k, 4);
}

/* Weight row w (one column of y) into tile column j: its scales, and its codes unless the
 * caller unpacks them itself (codes 0: tile_codes below). */
static void unpack_col(RadDType e, const uint8_t *w, int64_t K, const Tile *t, int j, int codes) {
    const int64_t nb = K / 32;
    uint8_t c[32];
    switch ((int)e) {
    case RAD_Q8_0:
        for (int64_t b = 0; b < nb; b++, w += 34) {
            t->a[b * TC + j] = ref_f16_f32(ref_rd16(w));
            if (!codes) continue;
            for (int l = 0; l < 32; l++) c[l] = (uint8_t)(w[2 + l] ^ 0x80);
            put_codes(t, b, j, c);
        }
        break;
    case RAD_Q4_0:
    case RAD_Q4_1: {
        const int bb = e == RAD_Q4_0 ? 18 : 20, qo = e == RAD_Q4_0 ? 2 : 4;
        for (int64_t b = 0; b < nb; b++, w += bb) {
            t->a[b * TC + j] = ref_f16_f32(ref_rd16(w));
            if (e == RAD_Q4_1) t->m[b * TC + j] = ref_f16_f32(ref_rd16(w + 2));
            if (!codes) continue;
            for (int l = 0; l < 16; l++) c[l] = w[qo + l] & 15, c[l + 16] = w[qo + l] >> 4;
            put_codes(t, b, j, c);
        }
        break;
    }
    case RAD_Q5_0:
    case RAD_Q5_1: {
        const int bb = e == RAD_Q5_0 ? 22 : 24, ho = e == RAD_Q5_0 ? 2 : 4;
        for (int64_t b = 0; b < nb; b++, w += bb) {
            t->a[b * TC + j] = ref_f16_f32(ref_rd16(w));
            if (e == RAD_Q5_1) t->m[b * TC + j] = ref_f16_f32(ref_rd16(w + 2));
            if (!codes) continue;
            const uint32_t qh = ref_rd32(w + ho);
            const uint8_t *qs = w + ho + 4;
            for (int l = 0; l < 16; l++) {
                c[l] = (uint8_t)((qs[l] & 15) | (((qh >> l) & 1) << 4));
                c[l + 16] = (uint8_t)((qs[l] >> 4) | (((qh >> (l + 16)) & 1) << 4));
            }
            put_codes(t, b, j, c);
        }
        break;
    }
    case RAD_Q4_K:
    case RAD_Q5_K: {
        const int bb = e == RAD_Q4_K ? 144 : 176;
        for (int64_t s = 0; s < K / 256; s++, w += bb) {
            uint8_t sc[8], mn[8];
            ref_scales_k4(w + 4, sc, mn);
            const uint8_t *qh = w + 16, *qs = e == RAD_Q4_K ? w + 16 : w + 48;
            for (int i = 0; i < 8; i++) {
                const int64_t b = 8 * s + i;
                t->sc[b * TC + j] = sc[i];
                t->m[b * TC + j] = (float)mn[i];
                if (!codes) continue;
                for (int l = 0; l < 32; l++) {
                    const uint8_t v = qs[32 * (i / 2) + l];
                    c[l] = (uint8_t)(i & 1 ? v >> 4 : v & 15);
                    if (e == RAD_Q5_K) c[l] = (uint8_t)(c[l] | (((qh[l] >> i) & 1) << 4));
                }
                put_codes(t, b, j, c);
            }
            t->D[s * TC + j] = ref_f16_f32(ref_rd16(w));
            t->Dm[s * TC + j] = ref_f16_f32(ref_rd16(w + 2));
        }
        break;
    }
    default: /* q6_k */
        for (int64_t s = 0; s < K / 256; s++, w += 210) {
            const int8_t *sc = (const int8_t *)(w + 192);
            for (int n = 0; n < 2; n++) {
                const uint8_t *ql = w + 64 * n, *qh = w + 128 + 32 * n;
                for (int i = 0; i < 4; i++) {
                    const int64_t b = 8 * s + 4 * n + i;
                    t->sc[(2 * b) * TC + j] = sc[8 * n + 2 * i];
                    t->sc[(2 * b + 1) * TC + j] = sc[8 * n + 2 * i + 1];
                    if (!codes) continue;
                    for (int l = 0; l < 32; l++) {
                        const uint8_t lo = i & 1 ? ql[l + 32] : ql[l];
                        c[l] = (uint8_t)((i & 2 ? lo >> 4 : lo & 15) | (((qh[l] >> (2 * i)) & 3) << 4));
                    }
                    put_codes(t, b, j, c);
                }
            }
            t->D[s * TC + j] = ref_f16_f32(ref_rd16(w + 208));
        }
        break;
    }
}

#if REF_X86
#define REF_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

/* The codes of weight rows [n0, n0 + nc) into the tile, chunk by chunk: lane j of a 16-lane
 * gather reads column j's 4 bytes, so a chunk is one gather and a mask or a shift (the same codes
 * unpack_col writes one byte at a time). Lanes past nc are zero. */
REF_VNNI static void tile_codes(const RefTileArgs *g, RadDType e, int64_t n0, int nc, const Tile *t) {
    const uint8_t *w = ref_wrow(g->w, (uint64_t)n0);
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)g->w->row_stride));
    const __mmask16 m = (__mmask16)(nc >= TC ? 0xffff : (1u << nc) - 1);
    const __m512i z = _mm512_setzero_si512(), m4 = _mm512_set1_epi32(0x0f0f0f0f);
#define GATHER(p) _mm512_mask_i32gather_epi32(z, m, idx, (const void *)(p), 1)
#define PUT(b, k, v) _mm512_storeu_si512((void *)(t->codes + (size_t)(b) * TB + 64 * (k)), (v))
    /* q5's fifth bits: bits 0..3 of x to bit 4 of bytes 0..3 (the multiply puts bit i at 8i + 4) */
#define SPREAD4(x) _mm512_and_si512(_mm512_mullo_epi32(_mm512_slli_epi32(_mm512_and_si512((x), _mm512_set1_epi32(15)), 4),                                                         _mm512_set1_epi32(0x204081)),                                                                           _mm512_set1_epi32(0x10101010))
    const int64_t nb = g->K / 32;
    switch ((int)e) {
    case RAD_Q8_0:
        for (int64_t b = 0; b < nb; b++)
            for (int k = 0; k < 8; k++) PUT(b, k, _mm512_xor_si512(GATHER(w + 34 * b + 2 + 4 * k), _mm512_set1_epi32((int)0x80808080u)));
        break;
    case RAD_Q4_0:
    case RAD_Q4_1: {
        const int bb = e == RAD_Q4_0 ? 18 : 20, qo = e == RAD_Q4_0 ? 2 : 4;
        for (int64_t b = 0; b < nb; b++)
            for (int k = 0; k < 4; k++) {
                const __m512i v = GATHER(w + bb * b + qo + 4 * k);
                PUT(b, k, _mm512_and_si512(v, m4));
                PUT(b, k + 4, _mm512_and_si512(_mm512_srli_epi32(v, 4), m4));
            }
        break;
    }
    case RAD_Q5_0:
    case RAD_Q5_1: {
        const int bb = e == RAD_Q5_0 ? 22 : 24, ho = e == RAD_Q5_0 ? 2 : 4;
        for (int64_t b = 0; b < nb; b++) {
            const __m512i qh = GATHER(w + bb * b + ho);
            for (int k = 0; k < 4; k++) {
                const __m512i v = GATHER(w + bb * b + ho + 4 + 4 * k);
                PUT(b, k, _mm512_or_si512(_mm512_and_si512(v, m4), SPREAD4(_mm512_srli_epi32(qh, 4 * k))));
                PUT(b, k + 4, _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(v, 4), m4), SPREAD4(_mm512_srli_epi32(qh, 16 + 4 * k))));
            }
        }
        break;
    }
    case RAD_Q4_K:
    case RAD_Q5_K: {
        const int bb = e == RAD_Q4_K ? 144 : 176, qo = e == RAD_Q4_K ? 16 : 48;
        for (int64_t s = 0; s < g->K / 256; s++)
            for (int p = 0; p < 4; p++)
                for (int k = 0; k < 8; k++) {
                    const __m512i v = GATHER(w + bb * s + qo + 32 * p + 4 * k);
                    __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi32(v, 4), m4);
                    if (e == RAD_Q5_K) { /* bit i of qh[l]: sub-block i's fifth bit of element l */
                        const __m512i qh = GATHER(w + bb * s + 16 + 4 * k), one = _mm512_set1_epi32(0x01010101);
                        lo = _mm512_or_si512(lo, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(qh, 2 * p), one), 4));
                        hi = _mm512_or_si512(hi, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(qh, 2 * p + 1), one), 4));
                    }
                    PUT(8 * s + 2 * p, k, lo);
                    PUT(8 * s + 2 * p + 1, k, hi);
                }
        break;
    }
    default: /* q6_k */
        for (int64_t s = 0; s < g->K / 256; s++)
            for (int n = 0; n < 2; n++)
                for (int k = 0; k < 8; k++) {
                    const __m512i h = GATHER(w + 210 * s + 128 + 32 * n + 4 * k), three = _mm512_set1_epi32(0x03030303);
                    for (int i = 0; i < 4; i++) {
                        const __m512i v = GATHER(w + 210 * s + 64 * n + (i & 1) * 32 + 4 * k);
                        const __m512i lo = _mm512_and_si512(i & 2 ? _mm512_srli_epi32(v, 4) : v, m4);
                        const __m512i hb = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, 2 * i), three), 4);
                        PUT(8 * s + 4 * n + i, k, _mm512_or_si512(lo, hb));
                    }
                }
        break;
    }
#undef GATHER
#undef PUT
#undef SPREAD4
}

/* Packed weights (ref_gemm_x8.c's layout, groups of 8 rows; n0 and nc multiples of 8): a
 * group's chunk c is already 8 columns' code bytes 4c..4c+3, one lane each, so a tile chunk is
 * two groups' 32 bytes: q8_0's with the sign bit flipped (the tile's unsigned codes), the
 * nibbles' masked (low: elements 4c..) or shifted (high: 16 + 4c..), with q5's fifth bits added
 * from their masks; its d[8] (and m[8]) are a group's 16 bytes. The tile unpack_col writes. */
REF_VNNI static void tile_fill_x8(const RefTileArgs *g, RadDType e, int64_t n0, int nc, const Tile *t) {
    const int64_t nb = g->K / 32;
    const RefX8Fmt f = ref_x8_fmt(e);
    const __m256i m4 = _mm256_set1_epi8(0x0f), b5 = _mm256_set1_epi8(0x10), s8 = _mm256_set1_epi8((char)0x80);
    for (int h = 0; h < TC / 8; h++) {
        const int on = 8 * h < nc;
        const uint8_t *wg = on ? ref_wrow(g->w, (uint64_t)(n0 + 8 * h)) : NULL;
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk = on ? wg + 8 * f.bb * b : NULL;
            uint8_t *o = t->codes + (size_t)b * TB + 32 * h;
#define LD(p) (on ? _mm256_loadu_si256((const __m256i *)(const void *)(p)) : _mm256_setzero_si256())
#define PUT(k, v) _mm256_storeu_si256((__m256i *)(void *)(o + 64 * (k)), (v))
            if (e == RAD_Q8_0) {
                for (int k = 0; k < 8; k++) PUT(k, on ? _mm256_xor_si256(LD(blk + f.co + 32 * k), s8) : _mm256_setzero_si256());
            } else {
                for (int k = 0; k < 4; k++) {
                    const __m256i v = LD(blk + f.co + 32 * k);
                    __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                    if (on && f.bo >= 0) {
                        lo = _mm256_mask_add_epi8(lo, _cvtu32_mask32(ref_rd32(blk + f.bo + 8 * k)), lo, b5);
                        hi = _mm256_mask_add_epi8(hi, _cvtu32_mask32(ref_rd32(blk + f.bo + 8 * k + 4)), hi, b5);
                    }
                    PUT(k, lo);
                    PUT(k + 4, hi);
                }
            }
#undef LD
#undef PUT
            const __m256 d = on ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)blk)) : _mm256_setzero_ps();
            const __m256 m = on && f.m ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(blk + 16))) : _mm256_setzero_ps();
            _mm256_storeu_ps(t->a + b * TC + 8 * h, d);
            _mm256_storeu_ps(t->m + b * TC + 8 * h, m);
        }
    }
}

/* Packed q4_k (ref_gemm_x8k.c's layout): a group's code chunk 8p + c is 8 columns' stored bytes
 * 4c..4c+3 of span p, so its low nibbles are tile chunk c of sub-block 2p and its high ones of
 * 2p + 1; the scales decode eight columns at a time. The tile unpack_col writes. */
REF_VNNI static void tile_fill_x8k(const RefTileArgs *g, int64_t n0, int nc, const Tile *t) {
    const int64_t ns = g->K / 256;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int h = 0; h < TC / 8; h++) {
        const int on = 8 * h < nc;
        const uint8_t *wg = on ? ref_wrow(g->w, (uint64_t)(n0 + 8 * h)) : NULL;
        for (int64_t s = 0; s < ns; s++) {
            const uint8_t *sb = on ? wg + REF_X8K_SB * s : NULL;
            _Alignas(32) uint8_t sc[64], mn[64];
            if (on) ref_x8k_scales(sb + 32, sc, mn);
            else memset(sc, 0, sizeof sc), memset(mn, 0, sizeof mn);
            for (int p = 0; p < 4; p++) {
                uint8_t *o = t->codes + (size_t)(8 * s + 2 * p) * TB + 32 * h;
                for (int c = 0; c < 8; c++) {
                    const __m256i v = on ? _mm256_loadu_si256((const __m256i *)(const void *)(sb + 128 + 32 * (8 * p + c))) : _mm256_setzero_si256();
                    _mm256_storeu_si256((__m256i *)(void *)(o + 64 * c), _mm256_and_si256(v, m4));
                    _mm256_storeu_si256((__m256i *)(void *)(o + TB + 64 * c), _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
                }
            }
            for (int i = 0; i < 8; i++) {
                const __m128i sci = _mm_loadl_epi64((const __m128i *)(const void *)(sc + 8 * i));
                const __m128i mni = _mm_loadl_epi64((const __m128i *)(const void *)(mn + 8 * i));
                _mm256_storeu_si256((__m256i *)(void *)(t->sc + (8 * s + i) * TC + 8 * h), _mm256_cvtepu8_epi32(sci));
                _mm256_storeu_ps(t->m + (8 * s + i) * TC + 8 * h, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(mni)));
            }
            const __m256 d = on ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)sb)) : _mm256_setzero_ps();
            const __m256 dm = on ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(sb + 16))) : _mm256_setzero_ps();
            _mm256_storeu_ps(t->D + s * TC + 8 * h, d);
            _mm256_storeu_ps(t->Dm + s * TC + 8 * h, dm);
        }
    }
}

/* The tile of weight rows [n0, n0 + nc) (nc <= TC; the other columns are zero). */
static void tile_fill(const RefTileArgs *g, RadDType e, int64_t n0, int nc, const Tile *t) {
    const int64_t nb = g->K / 32;
    if (g->w->dtype & RAD_PACKED) {
        if (e == RAD_Q4_K) tile_fill_x8k(g, n0, nc, t);
        else tile_fill_x8(g, e, n0, nc, t);
        return;
    }
    /* gathers take 32-bit offsets: column 15's start must fit */
    const int gather = g->w->row_stride <= (uint64_t)INT32_MAX / TC;
    if (nc < TC) {
        memset(t->codes, 0, (size_t)nb * TB);
        memset(t->a, 0, (size_t)nb * TC * 4 * 2); /* a and m */
        memset(t->sc, 0, (size_t)nb * 2 * TC * 4 + 2 * (size_t)(nb / 8 + 1) * TC * 4);
    }
    for (int j = 0; j < nc; j++) unpack_col(e, ref_wrow(g->w, (uint64_t)(n0 + j)), g->K, t, j, !gather);
    if (gather) tile_codes(g, e, n0, nc, t);
}

/* The encodings' arithmetic after the block's integer sums (the portable dots' of ref_gemm_q8.c). */
enum { CL_OFF, CL_MIN, CL_K4, CL_K6 };

/* RM rows (x[0 .. RM)) against the tile: out[r][0 .. TC). */
REF_VNNI REF_INLINE void tile_rows(const int RM, const int CL, const int z, const Tile *t, const RefQRow *x, int64_t nb,
                                   float (*out)[TC]) {
    __m512 acc[8], accm[8], sp[8], sm[8];
#pragma GCC unroll 8
    for (int r = 0; r < RM; r++) acc[r] = accm[r] = sp[r] = sm[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *cb = t->codes + (size_t)b * TB;
        __m512i s0[8], s1[8];
#pragma GCC unroll 8
        for (int r = 0; r < RM; r++) s0[r] = s1[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const __m512i wv = _mm512_loadu_si512((const void *)(cb + 64 * k));
#pragma GCC unroll 8
            for (int r = 0; r < RM; r++) {
                int32_t xv;
                memcpy(&xv, x[r].q + 32 * b + 4 * k, 4);
                if (CL == CL_K6 && k >= 4) s1[r] = _mm512_dpbusd_epi32(s1[r], wv, _mm512_set1_epi32(xv));
                else s0[r] = _mm512_dpbusd_epi32(s0[r], wv, _mm512_set1_epi32(xv));
            }
        }
        if (CL == CL_OFF || CL == CL_MIN) {
            const __m512 a = _mm512_loadu_ps(t->a + b * TC);
#pragma GCC unroll 8
            for (int r = 0; r < RM; r++) {
                __m512i i = s0[r];
                if (CL == CL_OFF) i = _mm512_sub_epi32(i, _mm512_set1_epi32(z * x[r].isum[b]));
                const __m512 s = _mm512_mul_ps(a, _mm512_set1_ps(x[r].ds[2 * b]));
                acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(s, _mm512_cvtepi32_ps(i)));
                if (CL == CL_MIN)
                    accm[r] = _mm512_add_ps(accm[r], _mm512_mul_ps(_mm512_loadu_ps(t->m + b * TC), _mm512_set1_ps(x[r].ds[2 * b + 1])));
            }
        } else {
            if (CL == CL_K4) {
                const __m512i sc = _mm512_loadu_si512((const void *)(t->sc + b * TC));
                const __m512 mn = _mm512_loadu_ps(t->m + b * TC);
#pragma GCC unroll 8
                for (int r = 0; r < RM; r++) {
                    const __m512 p = _mm512_mul_ps(_mm512_set1_ps(x[r].d[b]), _mm512_cvtepi32_ps(_mm512_mullo_epi32(sc, s0[r])));
                    sp[r] = _mm512_add_ps(sp[r], p);
                    sm[r] = _mm512_add_ps(sm[r], _mm512_mul_ps(mn, _mm512_set1_ps(x[r].s[b])));
                }
            } else {
                const __m512i sa = _mm512_loadu_si512((const void *)(t->sc + 2 * b * TC));
                const __m512i sb = _mm512_loadu_si512((const void *)(t->sc + (2 * b + 1) * TC));
#pragma GCC unroll 8
                for (int r = 0; r < RM; r++) {
                    const __m512i ga = _mm512_sub_epi32(s0[r], _mm512_set1_epi32(32 * x[r].bsums[2 * b]));
                    const __m512i gb = _mm512_sub_epi32(s1[r], _mm512_set1_epi32(32 * x[r].bsums[2 * b + 1]));
                    const __m512i i = _mm512_add_epi32(_mm512_mullo_epi32(sa, ga), _mm512_mullo_epi32(sb, gb));
                    sp[r] = _mm512_add_ps(sp[r], _mm512_mul_ps(_mm512_set1_ps(x[r].d[b]), _mm512_cvtepi32_ps(i)));
                }
            }
            if (b % 8 == 7) { /* the super-block's end: acc + d·sp (− dmin·sm) */
                const __m512 D = _mm512_loadu_ps(t->D + b / 8 * TC);
                const __m512 Dm = _mm512_loadu_ps(t->Dm + b / 8 * TC);
#pragma GCC unroll 8
                for (int r = 0; r < RM; r++) {
                    acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(D, sp[r]));
                    if (CL == CL_K4) acc[r] = _mm512_sub_ps(acc[r], _mm512_mul_ps(Dm, sm[r]));
                    sp[r] = sm[r] = _mm512_setzero_ps();
                }
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < RM; r++) _mm512_storeu_ps(out[r], CL == CL_MIN ? _mm512_add_ps(acc[r], accm[r]) : acc[r]);
}

/* Up to 8 rows at once for the 32-element formats (24 accumulators), 4 for the K-quants (their
 * sub-block sums take the registers the other four rows would). */
#define TILE_FNS(CL, Z, NAME)                                                                                            \
    REF_VNNI static void NAME(int rm, const Tile *t, const RefQRow *x, int64_t nb, float (*out)[TC]) {                   \
        switch (rm) {                                                                                                    \
        case 8: tile_rows(8, CL, Z, t, x, nb, out); break;                                                               \
        case 7: tile_rows(7, CL, Z, t, x, nb, out); break;                                                               \
        case 6: tile_rows(6, CL, Z, t, x, nb, out); break;                                                               \
        case 5: tile_rows(5, CL, Z, t, x, nb, out); break;                                                               \
        case 4: tile_rows(4, CL, Z, t, x, nb, out); break;                                                               \
        case 3: tile_rows(3, CL, Z, t, x, nb, out); break;                                                               \
        case 2: tile_rows(2, CL, Z, t, x, nb, out); break;                                                               \
        default: tile_rows(1, CL, Z, t, x, nb, out); break;                                                              \
        }                                                                                                                \
    }
#define TILE_FNS4(CL, Z, NAME)                                                                                           \
    REF_VNNI static void NAME(int rm, const Tile *t, const RefQRow *x, int64_t nb, float (*out)[TC]) {                   \
        switch (rm) {                                                                                                    \
        case 4: tile_rows(4, CL, Z, t, x, nb, out); break;                                                               \
        case 3: tile_rows(3, CL, Z, t, x, nb, out); break;                                                               \
        case 2: tile_rows(2, CL, Z, t, x, nb, out); break;                                                               \
        default: tile_rows(1, CL, Z, t, x, nb, out); break;                                                              \
        }                                                                                                                \
    }
TILE_FNS(CL_OFF, 128, tile_q8_0)
TILE_FNS(CL_OFF, 8, tile_q4_0)
TILE_FNS(CL_OFF, 16, tile_q5_0)
TILE_FNS(CL_MIN, 0, tile_min)
TILE_FNS4(CL_K4, 0, tile_k4)
TILE_FNS4(CL_K6, 0, tile_k6)

typedef void (*tile_fn)(int rm, const Tile *t, const RefQRow *x, int64_t nb, float (*out)[TC]);

static int tile_rows_max(RadDType e) { return e == RAD_Q4_K || e == RAD_Q5_K || e == RAD_Q6_K ? 4 : 8; }

static tile_fn tile_kernel(RadDType e) {
    switch ((int)e) {
    case RAD_Q8_0: return tile_q8_0;
    case RAD_Q4_0: return tile_q4_0;
    case RAD_Q5_0: return tile_q5_0;
    case RAD_Q4_1:
    case RAD_Q5_1: return tile_min;
    case RAD_Q4_K:
    case RAD_Q5_K: return tile_k4;
    case RAD_Q6_K: return tile_k6;
    default: return NULL;
    }
}

int ref_tile_range(const RefTileArgs *g, int64_t c0, int64_t c1) {
    const RadDType e = (RadDType)(g->w->dtype & ~RAD_PACKED);
    const tile_fn fn = tile_kernel(e);
    const int64_t nb = g->K / 32;
    const size_t tb = (tile_bytes(nb) + 63) & ~(size_t)63;
    uint8_t *mem = fn ? ref_scratch(0, tb + (size_t)g->M * sizeof(RefQRow)) : NULL;
    if (!mem) return 0;
    const Tile t = tile_at(mem, nb);
    const int rmax = tile_rows_max(e);
    /* the rows' pointers once a call, not once a tile (a struct returned through memory per
     * row and tile stalled on store forwarding: 14% of a prefill) */
    RefQRow *x = (RefQRow *)(void *)(mem + tb);
    for (int64_t i = 0; i < g->M; i++) x[i] = g->row(g->rows, i);
    for (int64_t n0 = c0; n0 < c1; n0 += TC) {
        const int nc = c1 - n0 < TC ? (int)(c1 - n0) : TC;
        tile_fill(g, e, n0, nc, &t);
        for (int64_t i = 0; i < g->M; i += rmax) {
            const int rm = g->M - i < rmax ? (int)(g->M - i) : rmax;
            float out[8][TC];
            fn(rm, &t, x + i, nb, out);
            for (int r = 0; r < rm; r++) memcpy(ref_frow(g->y, (uint64_t)(i + r)) + n0, out[r], (size_t)nc * sizeof(float));
        }
    }
    return 1;
}
#else
int ref_tile_range(const RefTileArgs *g, int64_t c0, int64_t c1) {
    (void)g, (void)c0, (void)c1;
    return 0;
}
#endif
