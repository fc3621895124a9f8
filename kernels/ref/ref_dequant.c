/* ref_dequant.c — decoding weight rows to f32 with the ISA's path, bit-identical to
 * ref_quant.h's portable decoders (and so to libcommon's rad_dequant).
 *
 * Why the SIMD arithmetic gives the same bits: every GGML scale is an f16 (11 significant bits)
 * and every code a small integer, so the products the reference rounds are exact in f32 —
 * d * q (q8_0, q4_0, q4_1: at most 19 bits), d * sc and (d * sc) * q (q4_k: 17 and 21 bits),
 * dmin * m, d * sc (q6_k: 19 bits). A fused multiply-add over an exact product rounds once, as
 * the reference's add does: fmadd(q, d, m) is q4_1's (q * d) + m, fmsub(q, d1, m1) q4_k's
 * (d1 * q) - m1. q6_k's (d * sc) * q may round (25 bits) and is a plain multiply, as in the
 * reference. f16 is widened with integer operations (NaN payloads kept, as rad_dequant keeps
 * them; vcvtph2ps would quiet a signalling NaN). */
#include "ref_common.h"
#include "ref_quant.h"

#if REF_X86

/* 8 f16 -> 8 f32, exactly (subnormals through one exact f32 subtraction). */
REF_AVX2 REF_INLINE __m256 f16x8_exact(const uint8_t *p) {
    const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x8000)), 16);
    __m256i o = _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x7fff)), 13);
    const __m256i e = _mm256_and_si256(o, _mm256_set1_epi32(0x0f800000));
    o = _mm256_add_epi32(o, _mm256_set1_epi32(112 << 23));
    const __m256i infnan = _mm256_cmpeq_epi32(e, _mm256_set1_epi32(0x0f800000));
    o = _mm256_add_epi32(o, _mm256_and_si256(infnan, _mm256_set1_epi32(112 << 23)));
    const __m256i sub = _mm256_cmpeq_epi32(e, _mm256_setzero_si256());
    const __m256 fs = _mm256_sub_ps(_mm256_castsi256_ps(_mm256_add_epi32(o, _mm256_set1_epi32(1 << 23))),
                                    _mm256_set1_ps(6.103515625e-05f)); /* 2^-14 */
    const __m256 r = _mm256_blendv_ps(_mm256_castsi256_ps(o), fs, _mm256_castsi256_ps(sub));
    return _mm256_or_ps(r, _mm256_castsi256_ps(sign));
}

REF_AVX2 REF_INLINE float f16s(const uint8_t *p) { return _cvtsh_ss(ref_rd16(p)); }

REF_AVX2 static void dq_f16_avx2(const uint8_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, f16x8_exact(x + 2 * i));
    for (; i < n; i++) y[i] = ref_f16_f32(ref_rd16(x + 2 * i));
}

REF_AVX2 static void dq_bf16_avx2(const uint8_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(x + 2 * i)));
        _mm256_storeu_ps(y + i, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
    }
    for (; i < n; i++) y[i] = ref_bf16_f32(ref_rd16(x + 2 * i));
}

REF_AVX2 static void dq_q8_0_avx2(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, x += 34, y += 32) {
        const __m256 d = _mm256_set1_ps(f16s(x));
        for (int j = 0; j < 4; j++) {
            const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(x + 2 + 8 * j)));
            _mm256_storeu_ps(y + 8 * j, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
        }
    }
}

REF_AVX2 static void dq_q4_0_avx2(const uint8_t *x, float *y, int64_t nb) {
    const __m128i m4 = _mm_set1_epi8(0x0f), k8 = _mm_set1_epi8(8);
    for (int64_t b = 0; b < nb; b++, x += 18, y += 32) {
        const __m256 d = _mm256_set1_ps(f16s(x));
        const __m128i qs = _mm_loadu_si128((const __m128i *)(const void *)(x + 2));
        const __m128i lo = _mm_sub_epi8(_mm_and_si128(qs, m4), k8);
        const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), m4), k8);
        _mm256_storeu_ps(y + 0, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), d));
        _mm256_storeu_ps(y + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), d));
        _mm256_storeu_ps(y + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), d));
        _mm256_storeu_ps(y + 24, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), d));
    }
}

REF_AVX2 static void dq_q4_1_avx2(const uint8_t *x, float *y, int64_t nb) {
    const __m128i m4 = _mm_set1_epi8(0x0f);
    for (int64_t b = 0; b < nb; b++, x += 20, y += 32) {
        const __m256 d = _mm256_set1_ps(f16s(x)), m = _mm256_set1_ps(f16s(x + 2));
        const __m128i qs = _mm_loadu_si128((const __m128i *)(const void *)(x + 4));
        const __m128i lo = _mm_and_si128(qs, m4), hi = _mm_and_si128(_mm_srli_epi16(qs, 4), m4);
        _mm256_storeu_ps(y + 0, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)), d, m));
        _mm256_storeu_ps(y + 8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8))), d, m));
        _mm256_storeu_ps(y + 16, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi)), d, m));
        _mm256_storeu_ps(y + 24, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8))), d, m));
    }
}

/* 32 unsigned codes (u8) -> q * d1 - m1 into y[0..32). */
REF_AVX2 REF_INLINE void k4_sub(__m128i q0, __m128i q1, float d1, float m1, float *y) {
    const __m256 d = _mm256_set1_ps(d1), m = _mm256_set1_ps(m1);
    _mm256_storeu_ps(y + 0, _mm256_fmsub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q0)), d, m));
    _mm256_storeu_ps(y + 8, _mm256_fmsub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(q0, 8))), d, m));
    _mm256_storeu_ps(y + 16, _mm256_fmsub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q1)), d, m));
    _mm256_storeu_ps(y + 24, _mm256_fmsub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(q1, 8))), d, m));
}

REF_AVX2 static void dq_q4_k_avx2(const uint8_t *x, float *y, int64_t nb) {
    const __m128i m4 = _mm_set1_epi8(0x0f);
    for (int64_t b = 0; b < nb; b++, x += 144) {
        const float d = f16s(x), dmin = f16s(x + 2);
        uint8_t sc[8], mn[8];
        ref_scales_k4(x + 4, sc, mn);
        const uint8_t *q = x + 16;
        for (int j = 0; j < 4; j++, q += 32, y += 64) {
            const __m128i a = _mm_loadu_si128((const __m128i *)(const void *)q);
            const __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(q + 16));
            const float d1 = d * (float)sc[2 * j], m1 = dmin * (float)mn[2 * j];
            const float d2 = d * (float)sc[2 * j + 1], m2 = dmin * (float)mn[2 * j + 1];
            k4_sub(_mm_and_si128(a, m4), _mm_and_si128(c, m4), d1, m1, y);
            k4_sub(_mm_and_si128(_mm_srli_epi16(a, 4), m4), _mm_and_si128(_mm_srli_epi16(c, 4), m4), d2, m2, y + 32);
        }
    }
}

/* 16 signed codes (i8) times the scale s into y[0..16). */
REF_AVX2 REF_INLINE void k6_16(__m128i q, float s, float *y) {
    const __m256 v = _mm256_set1_ps(s);
    _mm256_storeu_ps(y, _mm256_mul_ps(v, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
    _mm256_storeu_ps(y + 8, _mm256_mul_ps(v, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8)))));
}

REF_AVX2 static void dq_q6_k_avx2(const uint8_t *x, float *y, int64_t nb) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(3), k32 = _mm256_set1_epi8(32);
    for (int64_t b = 0; b < nb; b++, x += 210) {
        const uint8_t *ql = x, *qh = x + 128;
        const int8_t *sc = (const int8_t *)(x + 192);
        const float d = f16s(x + 208);
        for (int n = 0; n < 2; n++, ql += 64, qh += 32, sc += 8, y += 128) {
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)(const void *)ql);
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(const void *)(ql + 32));
            const __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)qh);
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(h, m3), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m3), 4));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m3), 4));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m3), 4));
            for (int g = 0; g < 4; g++) {
                const __m256i s = _mm256_sub_epi8(q[g], k32);
                const float s0 = d * (float)sc[2 * g], s1 = d * (float)sc[2 * g + 1];
                k6_16(_mm256_castsi256_si128(s), s0, y + 32 * g);
                k6_16(_mm256_extracti128_si256(s, 1), s1, y + 32 * g + 16);
            }
        }
    }
}

/* Byte j of the result: 0x10 when bit j of x is set, else 0 (q5's fifth bits, in element order). */
REF_AVX2 REF_INLINE __m256i fifth_bits(uint32_t x) {
    const __m256i spread = _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL, 0x0303030303030303LL);
    const __m256i others = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfeLL); /* every bit but byte k's own bit k % 8 */
    const __m256i v = _mm256_or_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)x), spread), others);
    return _mm256_and_si256(_mm256_cmpeq_epi8(v, _mm256_set1_epi8(-1)), _mm256_set1_epi8(0x10));
}

/* 32 codes (i8 in q, element order) times d, plus m when add: the generic decoders' two roundings
 * (a product, then a sum), never a fused one, so every value is theirs bit for bit. */
REF_AVX2 REF_INLINE void q32_store(__m256i q, __m256 d, __m256 m, int add, float *y) {
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    const __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int j = 0; j < 4; j++) {
        const __m256 p = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part[j])), d);
        _mm256_storeu_ps(y + 8 * j, add ? _mm256_add_ps(p, m) : p);
    }
}

/* q5_0 (22 bytes: d, the 32 fifth bits, 16 bytes of nibbles: low ones elements 0..15, high 16..31)
 * and q5_1 (24: d, m, then the same), as ref_dq_q5_0 / ref_dq_q5_1. */
REF_AVX2 static void dq_q5_avx2(const uint8_t *x, float *y, int64_t nb, int has_min) {
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const int bytes = has_min ? 24 : 22, off = has_min ? 4 : 2;
    for (int64_t b = 0; b < nb; b++, x += bytes, y += 32) {
        const __m256 d = _mm256_set1_ps(f16s(x)), m = _mm256_set1_ps(has_min ? f16s(x + 2) : 0.0f);
        const __m128i qs = _mm_loadu_si128((const __m128i *)(const void *)(x + off + 4));
        const __m256i nib = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(qs, 4), m4), _mm_and_si128(qs, m4));
        __m256i q = _mm256_or_si256(nib, fifth_bits(ref_rd32(x + off)));
        if (!has_min) q = _mm256_sub_epi8(q, _mm256_set1_epi8(16));
        q32_store(q, d, m, has_min, y);
    }
}

/* q5_k (176 bytes: d, dmin, 12 scale bytes, 32 bytes of fifth bits, 128 of nibbles), as
 * ref_dq_q5_k: each 64 elements, d·scale·q − dmin·min. */
REF_AVX2 static void dq_q5_k_avx2(const uint8_t *x, float *y, int64_t nb) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    for (int64_t b = 0; b < nb; b++, x += 176) {
        const float d = f16s(x), dmin = f16s(x + 2);
        uint8_t sc[8], mn[8];
        ref_scales_k4(x + 4, sc, mn);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(const void *)(x + 16));
        const uint8_t *ql = x + 48;
        for (int j = 0; j < 4; j++, ql += 32, y += 64) {
            const __m256i l = _mm256_loadu_si256((const __m256i *)(const void *)ql);
            const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one), 4);
            const __m256i h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one), 4);
            const __m256i q1 = _mm256_or_si256(_mm256_and_si256(l, m4), h1);
            const __m256i q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l, 4), m4), h2);
            q32_store(q1, _mm256_set1_ps(d * (float)sc[2 * j]), _mm256_set1_ps(-(dmin * (float)mn[2 * j])), 1, y);
            q32_store(q2, _mm256_set1_ps(d * (float)sc[2 * j + 1]), _mm256_set1_ps(-(dmin * (float)mn[2 * j + 1])), 1, y + 32);
        }
    }
}

/* Elements [k0, k0 + n) (whole blocks) of a row. 0 when the encoding has no AVX2 decoder. */
REF_AVX2 static int dq_range_avx2(RadDType e, const uint8_t *row, int64_t k0, int64_t n, float *y) {
    switch ((int)e) {
    case RAD_F32: memcpy(y, row + 4 * k0, (size_t)n * 4); return 1;
    case RAD_F16: dq_f16_avx2(row + 2 * k0, y, n); return 1;
    case RAD_BF16: dq_bf16_avx2(row + 2 * k0, y, n); return 1;
    case RAD_Q8_0: dq_q8_0_avx2(row + k0 / 32 * 34, y, n / 32); return 1;
    case RAD_Q4_0: dq_q4_0_avx2(row + k0 / 32 * 18, y, n / 32); return 1;
    case RAD_Q4_1: dq_q4_1_avx2(row + k0 / 32 * 20, y, n / 32); return 1;
    case RAD_Q5_0: dq_q5_avx2(row + k0 / 32 * 22, y, n / 32, 0); return 1;
    case RAD_Q5_1: dq_q5_avx2(row + k0 / 32 * 24, y, n / 32, 1); return 1;
    case RAD_Q4_K: dq_q4_k_avx2(row + k0 / 256 * 144, y, n / 256); return 1;
    case RAD_Q5_K: dq_q5_k_avx2(row + k0 / 256 * 176, y, n / 256); return 1;
    case RAD_Q6_K: dq_q6_k_avx2(row + k0 / 256 * 210, y, n / 256); return 1;
    default: return 0;
    }
}
#endif

void ref_dequant_range(int isa, RadDType e, const uint8_t *row, int64_t k0, int64_t n, float *dst) {
#if REF_X86
    if (isa >= REF_ISA_AVX2 && dq_range_avx2(e, row, k0, n, dst)) return;
#endif
    (void)isa;
    const RadEncInfo *ei = rad_enc_info((RadEnc)e);
    ref_dq_row_generic((int)e, row + (uint64_t)k0 / ei->block_elems * ei->block_bytes, dst, (uint64_t)n);
}

void ref_dequant_row(int isa, RadDType e, const uint8_t *src, float *dst, uint64_t cols) {
    ref_dequant_range(isa, e, src, 0, (int64_t)cols, dst);
}
