/* ref_gemm_x8_rows.h — the body of ref_gemm_x8.c's SIMD dots, included once per level with
 * X8_VNNI (0: AVX2, 1: AVX-512 VNNI), X8_ATTR (its target) and X8_ROWS_FN (its name) defined.
 *
 * RM quantised rows against one group of eight weight rows in encoding E (both constants where
 * it is inlined): out[8 r + j]. Per block, lane j of s[r] gathers row j's integer sum of code·q.
 * AVX2's vpmaddubsw pairs products into i16 lanes: four-bit codes may add 16 products there
 * (16 · 15 · 127 < 2^15), five-bit ones 8, signed q8_0 codes (|w| · sign(q, w)) 2, before
 * vpmaddwd joins them into i32; vpdpbusd sums into i32 directly. pf (or NULL): each block is
 * prefetched that far ahead as it is read. */
X8_ATTR REF_INLINE void X8_ROWS_FN(const int RM, const RadDType E, const uint8_t *wg, const RefQRow *x, int64_t nb, float *out,
                                   const char *pf) {
    const RefX8Fmt f = ref_x8_fmt(E);
    const int q8 = f.nch == 8, bl = X8_ROWS * f.bb;
    const __m256i m4 = _mm256_set1_epi8(0x0f), b5 = _mm256_set1_epi8(0x10);
#if !X8_VNNI
    const __m256i ones = _mm256_set1_epi16(1);
    const int join = q8 ? 1 : f.bo >= 0 ? 2 : 4; /* chunks an i16 lane may take */
#endif
    (void)m4, (void)b5;
    __m256 acc[4], accm[4];
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++) acc[r] = _mm256_setzero_ps(), accm[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++, wg += bl) {
        if (pf)
            for (int o = 0; o < bl; o += 64) _mm_prefetch(pf + (int64_t)bl * b + o, _MM_HINT_T0);
#if X8_VNNI
        __m256i p[4], p2[4]; /* two sums a row (low and high nibbles; q8_0's even and odd chunks) */
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) p[r] = p2[r] = _mm256_setzero_si256();
#else
        __m256i s[4], p[4]; /* the i32 sums, the i16 ones not yet joined */
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) s[r] = p[r] = _mm256_setzero_si256();
#endif
#pragma GCC unroll 8
        for (int c = 0; c < f.nch; c++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(wg + f.co + 32 * c));
            if (q8) {
                const __m256i a = _mm256_sign_epi8(v, v);
#pragma GCC unroll 4
                for (int r = 0; r < RM; r++) {
                    int32_t xv;
                    memcpy(&xv, x[r].q + 32 * b + 4 * c, 4);
                    const __m256i sx = _mm256_sign_epi8(_mm256_set1_epi32(xv), v);
#if X8_VNNI
                    if (c & 1) p2[r] = _mm256_dpbusd_epi32(p2[r], a, sx);
                    else p[r] = _mm256_dpbusd_epi32(p[r], a, sx);
#else
                    p[r] = _mm256_add_epi16(p[r], _mm256_maddubs_epi16(a, sx));
#endif
                }
            } else {
                __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                if (f.bo >= 0) {
                    const uint8_t *mk = wg + f.bo + 8 * c;
#if X8_VNNI
                    lo = _mm256_mask_add_epi8(lo, _cvtu32_mask32(ref_rd32(mk)), lo, b5);
                    hi = _mm256_mask_add_epi8(hi, _cvtu32_mask32(ref_rd32(mk + 4)), hi, b5);
#else
                    lo = _mm256_or_si256(lo, _mm256_and_si256(ref_bits32(ref_rd32(mk)), b5));
                    hi = _mm256_or_si256(hi, _mm256_and_si256(ref_bits32(ref_rd32(mk + 4)), b5));
#endif
                }
#pragma GCC unroll 4
                for (int r = 0; r < RM; r++) {
                    int32_t ql, qh;
                    memcpy(&ql, x[r].q + 32 * b + 4 * c, 4);
                    memcpy(&qh, x[r].q + 32 * b + 16 + 4 * c, 4);
#if X8_VNNI
                    p[r] = _mm256_dpbusd_epi32(p[r], lo, _mm256_set1_epi32(ql));
                    p2[r] = _mm256_dpbusd_epi32(p2[r], hi, _mm256_set1_epi32(qh));
#else
                    p[r] = _mm256_add_epi16(p[r], _mm256_maddubs_epi16(lo, _mm256_set1_epi32(ql)));
                    p[r] = _mm256_add_epi16(p[r], _mm256_maddubs_epi16(hi, _mm256_set1_epi32(qh)));
#endif
                }
            }
#if !X8_VNNI
            if ((c + 1) % join == 0)
#pragma GCC unroll 4
                for (int r = 0; r < RM; r++) s[r] = _mm256_add_epi32(s[r], _mm256_madd_epi16(p[r], ones)), p[r] = _mm256_setzero_si256();
#endif
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)wg));
        const __m256 m = f.m ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(wg + 16))) : d;
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) {
#if X8_VNNI
            __m256i si = _mm256_add_epi32(p[r], p2[r]);
#else
            __m256i si = s[r];
#endif
            if (f.z) si = _mm256_sub_epi32(si, _mm256_set1_epi32(f.z * x[r].isum[b]));
            const __m256 sc = _mm256_mul_ps(d, _mm256_set1_ps(x[r].ds[2 * b]));
            acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(sc, _mm256_cvtepi32_ps(si)));
            if (f.m) accm[r] = _mm256_add_ps(accm[r], _mm256_mul_ps(m, _mm256_set1_ps(x[r].ds[2 * b + 1])));
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++) _mm256_storeu_ps(out + 8 * r, f.m ? _mm256_add_ps(acc[r], accm[r]) : acc[r]);
}
