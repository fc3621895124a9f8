/* ref_gemm_x8.c — libref's load-time layout for the 32-element block formats ("x8": q4_0, q4_1,
 * q5_0, q5_1, q8_0), its pack, and the dots that read it (RadKernelLib.pack, abi/rad_kernels.h;
 * kernels/README.md "Packed weights").
 *
 * Why: decode streams every weight once a token, and the stored layouts cost 0.3-0.55
 * instructions a byte (a block's f16 scale to fetch and widen, a horizontal sum per row; the
 * q5 formats' fifth bits spread per row), so two cores compute a small model's weights no faster
 * than memory delivers them. Packed, eight rows share each instruction: one 16-byte load widens
 * eight d's, a 256-bit register holds four codes of each of eight rows, so a row is one lane and
 * needs no horizontal sum, and the q5 fifth bits of four codes of eight rows are one 32-bit mask.
 *
 * Layout: rows in groups of 8 (rows % 8 == 0); group g starts at 8 * g * row_bytes, its K / 32
 * blocks one after another, eight stored blocks' bytes each (the same bytes, moved):
 *     d[8] (f16, row j's at 2j)
 *     q4_1, q5_1: m[8] (f16)
 *     q5_0, q5_1: fifth bits, chunk c (0..3): u32 lo then u32 hi, bit 4j + t set when row j's
 *                 element 4c + t (lo) or 16 + 4c + t (hi) has its fifth bit
 *     codes, 32-byte chunks, row j's four bytes at 4j:
 *       q4_0, q4_1, q5_0, q5_1: chunk c (0..3) holds the stored code bytes 4c..4c+3 (low nibbles:
 *                               elements 4c.., high: 16 + 4c..)
 *       q8_0:                   chunk c (0..7) holds codes 4c..4c+3
 * Arithmetic per output, blocks ascending: the portable dot's of ref_gemm_q8.c step for step
 * (Σ = the block's exact integer sum of code·q, offset codes (q4_0 8, q5_0 16) through z·Σq;
 * acc += (d·dx)·Σ; q4_1, q5_1: accm += m·s and out = acc + accm), so packed results equal the
 * stored layout's portable ones bit for bit, whatever the ISA and the rows computed together. */
#include <string.h>

#include "ref_gemm.h"
#include "ref_quant.h"

#define X8_ROWS 8

size_t ref_pack_size(void *state, RadDType enc, uint64_t rows, uint64_t cols) {
    if (enc == RAD_Q4_K) return ref_x8k_pack_size(state, enc, rows, cols);
    const RefX8Fmt f = ref_x8_fmt(enc);
    if (!f.bb || !(REF_ENCS_PACKED & RAD_ENC_BIT(enc)) || rows == 0 || rows % X8_ROWS || cols == 0 || cols % 32) return 0;
    return (size_t)(rows * (cols / 32) * (uint64_t)f.bb);
}

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

int ref_pack(void *state, RadDType enc, uint64_t rows, uint64_t cols, const void *src, uint64_t src_row_stride, void *dst) {
    if (enc == RAD_Q4_K) return ref_x8k_pack(state, enc, rows, cols, src, src_row_stride, dst);
    const uint64_t nb = cols / 32;
    const RefX8Fmt f = ref_x8_fmt(enc);
    if (!ref_pack_size(state, enc, rows, cols) || !src || !dst || src_row_stride < nb * (uint64_t)f.bb) return RAD_E_ARG;
    uint8_t *o = dst;
    for (uint64_t g = 0; g < rows / X8_ROWS; g++)
        for (uint64_t b = 0; b < nb; b++, o += X8_ROWS * f.bb) {
            uint32_t lo[4] = {0}, hi[4] = {0};
            for (int j = 0; j < X8_ROWS; j++) {
                const uint8_t *blk = (const uint8_t *)src + (g * X8_ROWS + (uint64_t)j) * src_row_stride + b * (uint64_t)f.bb;
                memcpy(o + 2 * j, blk, 2);
                if (f.m) memcpy(o + 16 + 2 * j, blk + 2, 2);
                if (f.ho >= 0) {
                    const uint32_t qh = ref_rd32(blk + f.ho);
                    for (int c = 0; c < 4; c++)
                        for (int t = 0; t < 4; t++) {
                            lo[c] |= ((qh >> (4 * c + t)) & 1u) << (4 * j + t);
                            hi[c] |= ((qh >> (16 + 4 * c + t)) & 1u) << (4 * j + t);
                        }
                }
                for (int c = 0; c < f.nch; c++) memcpy(o + f.co + 32 * c + 4 * j, blk + f.qo + 4 * c, 4);
            }
            for (int c = 0; f.bo >= 0 && c < 4; c++) put32(o + f.bo + 8 * c, lo[c]), put32(o + f.bo + 8 * c + 4, hi[c]);
        }
    return RAD_OK;
}

/* One group against one quantised row: out[8]. */
static void x8_generic(RadDType e, const uint8_t *wg, const RefQRow *x, int64_t nb, float *out) {
    const RefX8Fmt f = ref_x8_fmt(e);
    float acc[X8_ROWS] = {0}, accm[X8_ROWS] = {0};
    for (int64_t b = 0; b < nb; b++, wg += X8_ROWS * f.bb) {
        const int8_t *q = x->q + 32 * b;
        for (int j = 0; j < X8_ROWS; j++) {
            int sum = 0;
            for (int c = 0; c < f.nch; c++)
                for (int t = 0; t < 4; t++) {
                    const uint8_t v = wg[f.co + 32 * c + 4 * j + t];
                    if (f.nch == 8) {
                        sum += (int8_t)v * q[4 * c + t];
                        continue;
                    }
                    int l = v & 15, h = v >> 4;
                    if (f.bo >= 0) {
                        l |= (int)((ref_rd32(wg + f.bo + 8 * c) >> (4 * j + t)) & 1u) << 4;
                        h |= (int)((ref_rd32(wg + f.bo + 8 * c + 4) >> (4 * j + t)) & 1u) << 4;
                    }
                    sum += (l - f.z) * q[4 * c + t] + (h - f.z) * q[16 + 4 * c + t];
                }
            const float s = ref_f16_f32(ref_rd16(wg + 2 * j)) * x->ds[2 * b];
            const float p = s * (float)sum;
            acc[j] = acc[j] + p;
            if (f.m) {
                const float pm = ref_f16_f32(ref_rd16(wg + 16 + 2 * j)) * x->ds[2 * b + 1];
                accm[j] = accm[j] + pm;
            }
        }
    }
    for (int j = 0; j < X8_ROWS; j++) out[j] = f.m ? acc[j] + accm[j] : acc[j];
}

#if REF_X86
#define REF_X8_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

/* The SIMD dots, one body (ref_gemm_x8_rows.h) at two levels: AVX2 (vpmaddubsw into i16
 * lanes, joined to i32 before they can overflow) and AVX-512 VNNI (vpdpbusd; the fifth bits
 * through a byte mask). The integer sums are exact either way, so the two give the same bits. */
#define X8_VNNI 0
#define X8_ATTR REF_AVX2
#define X8_ROWS_FN x8_rows_avx2
#include "ref_gemm_x8_rows.h"
#undef X8_VNNI
#undef X8_ATTR
#undef X8_ROWS_FN
#define X8_VNNI 1
#define X8_ATTR REF_X8_VNNI
#define X8_ROWS_FN x8_rows_vnni
#include "ref_gemm_x8_rows.h"
#undef X8_VNNI
#undef X8_ATTR
#undef X8_ROWS_FN

/* One instance per (level, encoding, rows): the encoding and row count constants inside. */
#define X8_INST(LVL, ATTR, ENC, NAME)                                                                     \
    ATTR static void x8_##LVL##_##NAME##_1(const uint8_t *wg, const RefQRow *x, int64_t nb, float *out,  \
                                           const char *pf) {                                              \
        if (pf) x8_rows_##LVL(1, ENC, wg, x, nb, out, pf);                                                \
        else x8_rows_##LVL(1, ENC, wg, x, nb, out, NULL); /* without the prefetch branch */               \
    }                                                                                                     \
    ATTR static void x8_##LVL##_##NAME##_4(const uint8_t *wg, const RefQRow *x, int64_t nb, float *out,  \
                                           const char *pf) {                                              \
        (void)pf;                                                                                         \
        x8_rows_##LVL(4, ENC, wg, x, nb, out, NULL);                                                      \
    }
#define X8_LEVEL(LVL, ATTR)                                                                               \
    X8_INST(LVL, ATTR, RAD_Q4_0, q4_0)                                                                    \
    X8_INST(LVL, ATTR, RAD_Q4_1, q4_1)                                                                    \
    X8_INST(LVL, ATTR, RAD_Q5_0, q5_0)                                                                    \
    X8_INST(LVL, ATTR, RAD_Q5_1, q5_1)                                                                    \
    X8_INST(LVL, ATTR, RAD_Q8_0, q8_0)
X8_LEVEL(avx2, REF_AVX2)
X8_LEVEL(vnni, REF_X8_VNNI)

typedef void (*x8_fn)(const uint8_t *wg, const RefQRow *x, int64_t nb, float *out, const char *pf);
#define X8_FNS(LVL) {{x8_##LVL##_q4_0_1, x8_##LVL##_q4_0_4}, {x8_##LVL##_q4_1_1, x8_##LVL##_q4_1_4}, \
                     {x8_##LVL##_q5_0_1, x8_##LVL##_q5_0_4}, {x8_##LVL##_q5_1_1, x8_##LVL##_q5_1_4}, \
                     {x8_##LVL##_q8_0_1, x8_##LVL##_q8_0_4}}
static const x8_fn x8_fns[2][5][2] = {X8_FNS(avx2), X8_FNS(vnni)};
#endif

void ref_x8_dot(int isa, RadDType e, const uint8_t *wg, int rm, const RefQRow *x, int64_t K, float *out, const uint8_t *pf) {
    if (e == RAD_Q4_K) {
        ref_x8k_dot(isa, wg, rm, x, K, out, pf);
        return;
    }
    const int64_t nb = K / 32;
#if REF_X86
    const int ei = e == RAD_Q4_0 ? 0 : e == RAD_Q4_1 ? 1 : e == RAD_Q5_0 ? 2 : e == RAD_Q5_1 ? 3 : 4;
    if (isa >= REF_ISA_AVX2) {
        const x8_fn *fn = x8_fns[isa >= REF_ISA_AVX512][ei];
        int r = 0;
        for (; r + 4 <= rm; r += 4) fn[1](wg, x + r, nb, out + 8 * r, NULL);
        if (rm - r == 3) { /* three rows: the four-row dot with the last row twice (measured cheaper
                              than three one-row dots: each row's bits are the same either way) */
            const RefQRow x4[4] = {x[r], x[r + 1], x[r + 2], x[r + 2]};
            float o4[32];
            fn[1](wg, x4, nb, o4, NULL);
            memcpy(out + 8 * r, o4, 24 * sizeof *o4);
            return;
        }
        for (; r < rm; r++) fn[0](wg, x + r, nb, out + 8 * r, r ? NULL : (const char *)pf);
        return;
    }
#else
    (void)isa;
#endif
    (void)pf;
    for (int r = 0; r < rm; r++) x8_generic(e, wg, x + r, nb, out + 8 * r);
}
