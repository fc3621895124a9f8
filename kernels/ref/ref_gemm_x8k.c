/* ref_gemm_x8k.c — libref's load-time layout for q4_k ("x8k": eight rows interleaved, as the
 * 32-element formats' x8 in ref_gemm_x8.c), its pack, and the dots that read it
 * (kernels/README.md "Packed weights").
 *
 * Why: the stored q4_k dot (k4_rows512) spends ~0.35 instructions a weight byte on one row's
 * super-block (its scales unpacked and widened, a permute per chunk for the sub-block scales and
 * another for d·dx, a horizontal sum), so one core reads only ~21 GB/s of q4_k against ~32 GB/s
 * of q6_k (Qwen2.5-Coder-1.5B decode, --profile at one thread): compute, not memory, bounds it.
 * Packed, eight rows share each instruction: a 256-bit register is four codes of each of eight
 * rows, one vpdpbusd with a broadcast of four activation bytes sums all eight rows' products (a
 * row is a lane: no horizontal sum, no per-chunk permutes), and the eight rows' 6-bit scales of
 * a super-block decode in six byte operations.
 *
 * Layout: rows in groups of 8 (rows % 8 == 0, K % 256 == 0); group g starts at 8 * g * row_bytes,
 * its K / 256 super-blocks one after another, eight stored super-blocks' bytes each (the same
 * bytes, moved; 1152 a super-block):
 *     0    d[8]     f16, row j's at 2j
 *     16   dmin[8]  f16
 *     32   scales   the stored 12 scale bytes, byte k of row j at 32 + 8k + j (so bytes 0-3, 4-7
 *                   and 8-11 of all eight rows are three 32-byte registers)
 *     128  codes    32 chunks of 32 bytes: chunk 8p + c (p = 0..3 the stored 32-byte span, whose
 *                   low nibbles are sub-block 2p and high ones 2p + 1; c = 0..7) holds row j's
 *                   stored bytes 4c..4c+3 of span p at 4j
 * Arithmetic per output, super-blocks ascending: the portable dot's (ref_gemm_q8.c,
 * dot_q4_k_generic) step for step (sub-block j's exact integer Σ code·q; sp += dx_j·(float)(sc_j·Σ),
 * sm += (float)mn_j·s_j; acc += d·sp, acc −= dmin·sm; no FMA), so packed results equal the stored
 * layout's portable ones bit for bit, whatever the ISA and the rows computed together (and equal
 * q8tile's tiles, which have that arithmetic too). */
#include <string.h>

#include "ref_gemm.h"
#include "ref_quant.h"

#define X8K_ROWS 8
#define X8K_BB 144                     /* stored bytes of one row's super-block */
#define X8K_SB REF_X8K_SB              /* packed bytes of one group's super-block (X8K_ROWS · X8K_BB) */

size_t ref_x8k_pack_size(void *state, RadDType enc, uint64_t rows, uint64_t cols) {
    const RefState *st = state;
    /* below AVX-512 VNNI the stored layout's AVX2 dot beats this layout's portable reader */
    if (st && st->isa < REF_ISA_AVX512) return 0;
    if (enc != RAD_Q4_K || rows == 0 || rows % X8K_ROWS || cols == 0 || cols % 256) return 0;
    return (size_t)(rows * (cols / 256) * X8K_BB);
}

/* Row j's super-block between its stored bytes and the packed super-block, either way (to_packed:
 * src the stored block, dst the packed super-block; else the reverse): the one place that says
 * where each byte goes. */
static void x8k_move(uint8_t *dst, const uint8_t *src, int j, int to_packed) {
#define X8K_MV(po, so, n) memcpy(dst + (to_packed ? (po) : (so)), src + (to_packed ? (so) : (po)), (n))
    X8K_MV(2 * j, 0, 2);      /* d */
    X8K_MV(16 + 2 * j, 2, 2); /* dmin */
    for (int k = 0; k < 12; k++) X8K_MV(32 + 8 * k + j, 4 + k, 1);
    for (int p = 0; p < 4; p++)
        for (int c = 0; c < 8; c++) X8K_MV(128 + 32 * (8 * p + c) + 4 * j, 16 + 32 * p + 4 * c, 4);
#undef X8K_MV
}

int ref_x8k_pack(void *state, RadDType enc, uint64_t rows, uint64_t cols, const void *src, uint64_t src_row_stride, void *dst) {
    const uint64_t ns = cols / 256;
    if (!ref_x8k_pack_size(state, enc, rows, cols) || !src || !dst || src_row_stride < ns * X8K_BB) return RAD_E_ARG;
    uint8_t *o = dst;
    for (uint64_t g = 0; g < rows / X8K_ROWS; g++)
        for (uint64_t s = 0; s < ns; s++, o += X8K_SB)
            for (int j = 0; j < X8K_ROWS; j++)
                x8k_move(o, (const uint8_t *)src + (g * X8K_ROWS + (uint64_t)j) * src_row_stride + s * X8K_BB, j, 1);
    return RAD_OK;
}

/* One group against one quantised row: out[8]. Each row's super-block is put back in its stored
 * bytes (pack's inverse) and dotted by the portable step itself. */
static void x8k_generic(const uint8_t *wg, const RefQRow *x, int64_t ns, float *out) {
    for (int j = 0; j < X8K_ROWS; j++) {
        float acc = 0.0f;
        const uint8_t *w = wg;
        for (int64_t s = 0; s < ns; s++, w += X8K_SB) {
            uint8_t blk[X8K_BB];
            x8k_move(blk, w, j, 0);
            acc = ref_q4_k_block_dot(blk, x, s, acc);
        }
        out[j] = acc;
    }
}

#if REF_X86
#define REF_X8K_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

/* RM quantised rows against one group (RM, where inlined, a constant): out[8 r + j]. Per
 * sub-block pair (a stored span p), lane j of lo/hi sums row j's products of sub-blocks 2p and
 * 2p + 1, each in two chains (even and odd chunks) so that vpdpbusd's latency overlaps. pf (or
 * NULL): each super-block is prefetched that far ahead as it is read. */
REF_X8K_VNNI REF_INLINE void x8k_rows_vnni(const int RM, const uint8_t *wg, const RefQRow *x, int64_t ns, float *out,
                                           const char *pf) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc[4];
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t s = 0; s < ns; s++, wg += X8K_SB) {
        _Alignas(32) uint8_t sc[64], mn[64]; /* sub-block i's scale (min) of row j at 8i + j */
        ref_x8k_scales(wg + 32, sc, mn);
        __m256 sp[4], sm[4];
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) sp[r] = sm[r] = _mm256_setzero_ps();
#pragma GCC unroll 1
        for (int p = 0; p < 4; p++) {
            if (pf) /* a quarter of the super-block's lines a span, not 18 at once */
                for (int o = 64 * (18 * p / 4); o < 64 * (18 * (p + 1) / 4); o += 64) _mm_prefetch(pf + (int64_t)X8K_SB * s + o, _MM_HINT_T0);
            __m256i lo[4][2], hi[4][2];
#pragma GCC unroll 4
            for (int r = 0; r < RM; r++) lo[r][0] = lo[r][1] = hi[r][0] = hi[r][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int c = 0; c < 8; c++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(wg + 128 + 32 * (8 * p + c)));
                const __m256i l = _mm256_and_si256(v, m4), h = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
#pragma GCC unroll 4
                for (int r = 0; r < RM; r++) {
                    int32_t xl, xh;
                    memcpy(&xl, x[r].q + 256 * s + 64 * p + 4 * c, 4);
                    memcpy(&xh, x[r].q + 256 * s + 64 * p + 32 + 4 * c, 4);
                    lo[r][c & 1] = _mm256_dpbusd_epi32(lo[r][c & 1], l, _mm256_set1_epi32(xl));
                    hi[r][c & 1] = _mm256_dpbusd_epi32(hi[r][c & 1], h, _mm256_set1_epi32(xh));
                }
            }
#pragma GCC unroll 2
            for (int t = 0; t < 2; t++) {
                const int i = 2 * p + t;
                const __m256i sci = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(sc + 8 * i)));
                const __m256 mni = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(mn + 8 * i))));
#pragma GCC unroll 4
                for (int r = 0; r < RM; r++) {
                    const __m256i sum = t ? _mm256_add_epi32(hi[r][0], hi[r][1]) : _mm256_add_epi32(lo[r][0], lo[r][1]);
                    const __m256 pv = _mm256_mul_ps(_mm256_set1_ps(x[r].d[8 * s + i]), _mm256_cvtepi32_ps(_mm256_mullo_epi32(sci, sum)));
                    sp[r] = _mm256_add_ps(sp[r], pv);
                    sm[r] = _mm256_add_ps(sm[r], _mm256_mul_ps(mni, _mm256_set1_ps(x[r].s[8 * s + i])));
                }
            }
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)wg));
        const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(wg + 16)));
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) {
            acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(d, sp[r]));
            acc[r] = _mm256_sub_ps(acc[r], _mm256_mul_ps(dm, sm[r]));
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++) _mm256_storeu_ps(out + 8 * r, acc[r]);
}

REF_X8K_VNNI static void x8k_vnni_1(const uint8_t *wg, const RefQRow *x, int64_t ns, float *out, const char *pf) {
    if (pf) x8k_rows_vnni(1, wg, x, ns, out, pf);
    else x8k_rows_vnni(1, wg, x, ns, out, NULL); /* without the prefetch branch */
}
REF_X8K_VNNI static void x8k_vnni_4(const uint8_t *wg, const RefQRow *x, int64_t ns, float *out) { x8k_rows_vnni(4, wg, x, ns, out, NULL); }
#endif

void ref_x8k_dot(int isa, const uint8_t *wg, int rm, const RefQRow *x, int64_t K, float *out, const uint8_t *pf) {
    const int64_t ns = K / 256;
#if REF_X86
    if (isa >= REF_ISA_AVX512) {
        int r = 0;
        for (; r + 4 <= rm; r += 4) x8k_vnni_4(wg, x + r, ns, out + 8 * r);
        if (rm - r == 3) { /* three rows through the four-row dot, the last twice (as ref_x8_dot) */
            const RefQRow x4[4] = {x[r], x[r + 1], x[r + 2], x[r + 2]};
            float o4[32];
            x8k_vnni_4(wg, x4, ns, o4);
            memcpy(out + 8 * r, o4, 24 * sizeof *o4);
            return;
        }
        for (; r < rm; r++) x8k_vnni_1(wg, x + r, ns, out + 8 * r, r ? NULL : (const char *)pf);
        return;
    }
#else
    (void)isa;
#endif
    (void)pf;
    for (int r = 0; r < rm; r++) x8k_generic(wg, x + r, ns, out + 8 * r);
}
