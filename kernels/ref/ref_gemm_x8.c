/* ref_gemm_x8.c — libref's load-time layout for q4_1 weights ("x8"), its pack, and the dots
 * that read it (RadKernelLib.pack, abi/rad_kernels.h; kernels/README.md "Packed weights").
 *
 * Why: decode streams every weight once a token, and on AVX2 the stored q4_1 layout costs about
 * 0.55 instructions a byte (two f16 scales to fetch and widen per block, a horizontal sum per
 * row), so one core computes it no faster than memory delivers it. Packed, eight rows share
 * each instruction: one 16-byte load widens eight d's, one eight m's, and a 256-bit register
 * holds four codes of each of eight rows, so a row is one lane and needs no horizontal sum.
 *
 * Layout: rows in groups of 8 (rows % 8 == 0); group g starts at 8 * g * row_bytes, its K / 32
 * blocks one after another, 160 bytes each:
 *     d[8] (f16, row j's d at 2j) | m[8] (f16) | codes: chunk c (0..3), row j at 32 + 32c + 4j:
 *     the stored block's code bytes 4c..4c+3 (low nibbles: elements 4c.., high: 16 + 4c..)
 * Arithmetic per output, blocks ascending (the same operations as ref_gemm_q8.c's portable
 * q4_1 dot, so packed results equal the stored layout's portable ones bit for bit, whatever the
 * ISA and the rows computed together): Σ = the block's exact integer sum of code·q;
 * acc += (d·dx)·Σ; accm += m·s; out = acc + accm. */
#include "ref_gemm.h"
#include "ref_quant.h"

#define X8_ROWS 8
#define X8_BLOCK 160 /* bytes of one block of eight rows */

size_t ref_pack_size(void *state, RadDType enc, uint64_t rows, uint64_t cols) {
    (void)state;
    if (enc != RAD_Q4_1 || rows == 0 || rows % X8_ROWS || cols == 0 || cols % 32) return 0;
    return (size_t)(rows * (cols / 32) * 20);
}

int ref_pack(void *state, RadDType enc, uint64_t rows, uint64_t cols, const void *src, uint64_t src_row_stride, void *dst) {
    const uint64_t nb = cols / 32;
    if (!ref_pack_size(state, enc, rows, cols) || !src || !dst || src_row_stride < nb * 20) return RAD_E_ARG;
    uint8_t *o = dst;
    for (uint64_t g = 0; g < rows / X8_ROWS; g++)
        for (uint64_t b = 0; b < nb; b++, o += X8_BLOCK)
            for (int j = 0; j < X8_ROWS; j++) {
                const uint8_t *blk = (const uint8_t *)src + (g * X8_ROWS + (uint64_t)j) * src_row_stride + b * 20;
                memcpy(o + 2 * j, blk, 2);
                memcpy(o + 16 + 2 * j, blk + 2, 2);
                for (int c = 0; c < 4; c++) memcpy(o + 32 + 32 * c + 4 * j, blk + 4 + 4 * c, 4);
            }
    return RAD_OK;
}

/* One group against one quantised row: out[8]. */
static void x8_q4_1_generic(const uint8_t *wg, const int8_t *xq, const float *ds, int64_t nb, float *out) {
    float acc[X8_ROWS] = {0}, accm[X8_ROWS] = {0};
    for (int64_t b = 0; b < nb; b++, wg += X8_BLOCK) {
        const int8_t *q = xq + 32 * b;
        for (int j = 0; j < X8_ROWS; j++) {
            int sum = 0;
            for (int c = 0; c < 4; c++)
                for (int t = 0; t < 4; t++) {
                    const uint8_t v = wg[32 + 32 * c + 4 * j + t];
                    sum += (v & 15) * q[4 * c + t] + (v >> 4) * q[16 + 4 * c + t];
                }
            const float s = ref_f16_f32(ref_rd16(wg + 2 * j)) * ds[2 * b];
            const float p = s * (float)sum;
            acc[j] = acc[j] + p;
            const float pm = ref_f16_f32(ref_rd16(wg + 16 + 2 * j)) * ds[2 * b + 1];
            accm[j] = accm[j] + pm;
        }
    }
    for (int j = 0; j < X8_ROWS; j++) out[j] = acc[j] + accm[j];
}

#if REF_X86
/* RM quantised rows against one group: out[8 r + j]. Per block and row the 16 code·q products
 * of each i16 lane stay below 2^15 (16 · 15 · 127), so the i16 sums are exact; madd with ones
 * joins a lane's two halves into the row's 32-element sum. */
REF_AVX2 REF_INLINE void x8_q4_1_avx2(const int RM, const uint8_t *wg, const int8_t *const *xq, const float *const *ds,
                                      int64_t nb, float *out, const char *pf) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    __m256 acc[4], accm[4];
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++) acc[r] = _mm256_setzero_ps(), accm[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++, wg += X8_BLOCK) {
        if (pf) { /* a block's 160 bytes, pf ahead: a steady stream however long the group */
            _mm_prefetch(pf + X8_BLOCK * b, _MM_HINT_T0);
            _mm_prefetch(pf + X8_BLOCK * b + 64, _MM_HINT_T0);
            _mm_prefetch(pf + X8_BLOCK * b + 128, _MM_HINT_T0);
        }
        __m256i s[4];
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) s[r] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(wg + 32 + 32 * c));
            const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
#pragma GCC unroll 4
            for (int r = 0; r < RM; r++) {
                int32_t ql, qh;
                memcpy(&ql, xq[r] + 32 * b + 4 * c, 4);
                memcpy(&qh, xq[r] + 32 * b + 16 + 4 * c, 4);
                s[r] = _mm256_add_epi16(s[r], _mm256_maddubs_epi16(lo, _mm256_set1_epi32(ql)));
                s[r] = _mm256_add_epi16(s[r], _mm256_maddubs_epi16(hi, _mm256_set1_epi32(qh)));
            }
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)wg));
        const __m256 m = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(wg + 16)));
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) {
            const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(s[r], ones));
            const __m256 sc = _mm256_mul_ps(d, _mm256_set1_ps(ds[r][2 * b]));
            acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(sc, f));
            accm[r] = _mm256_add_ps(accm[r], _mm256_mul_ps(m, _mm256_set1_ps(ds[r][2 * b + 1])));
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++) _mm256_storeu_ps(out + 8 * r, _mm256_add_ps(acc[r], accm[r]));
}

REF_AVX2 static void x8_q4_1_avx2_1(const uint8_t *wg, const int8_t *const *xq, const float *const *ds, int64_t nb, float *out,
                                    const char *pf) {
    if (pf) x8_q4_1_avx2(1, wg, xq, ds, nb, out, pf);
    else x8_q4_1_avx2(1, wg, xq, ds, nb, out, NULL); /* a copy without the prefetch branch (the range's last groups) */
}
REF_AVX2 static void x8_q4_1_avx2_4(const uint8_t *wg, const int8_t *const *xq, const float *const *ds, int64_t nb, float *out) {
    x8_q4_1_avx2(4, wg, xq, ds, nb, out, NULL);
}
#endif

void ref_x8_dot(int isa, const uint8_t *wg, int rm, const int8_t *const *xq, const float *const *ds, int64_t K, float *out,
                const uint8_t *pf) {
    const int64_t nb = K / 32;
#if REF_X86
    if (isa >= REF_ISA_AVX2) {
        int r = 0;
        for (; r + 4 <= rm; r += 4) x8_q4_1_avx2_4(wg, xq + r, ds + r, nb, out + 8 * r);
        for (; r < rm; r++) x8_q4_1_avx2_1(wg, xq + r, ds + r, nb, out + 8 * r, r ? NULL : (const char *)pf);
        return;
    }
#else
    (void)isa;
#endif
    (void)pf;
    for (int r = 0; r < rm; r++) x8_q4_1_generic(wg, xq[r], ds[r], nb, out + 8 * r);
}
