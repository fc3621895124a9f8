/* ref_math.h — exp for libref's SIMD paths (silu_mul, the softmax of attn_paged).
 *
 * ref_exp8: e^x on 8 lanes, Cephes' expf scheme: n = round(x·log2 e), r = x − n·ln2 in two
 * parts (FMA), a degree-6 polynomial for e^r on |r| ≤ ln2/2, and 2^n applied as two exact
 * power-of-two factors so the result overflows to +inf above 88.72 and underflows gradually
 * to 0 below −87.3. Relative error about 2 ulp (≤ 2.4e-7) over the whole range: well inside
 * silu_mul's 1e-6 and attention's 1e-5. NaN inputs give NaN. */
#ifndef REF_MATH_H
#define REF_MATH_H

#include "ref_common.h"

#if REF_X86
REF_AVX2 REF_INLINE __m256 ref_exp8(__m256 x) {
    const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-104.0f)), _mm256_set1_ps(89.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    const __m256 r2 = _mm256_mul_ps(r, r);
    p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* 2^n = 2^n1 · 2^n2, n1 = n >> 1: each factor a normal float for n in [-151, 129] */
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
    const __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    return _mm256_blendv_ps(y, x, nan);
}
#endif

#endif
