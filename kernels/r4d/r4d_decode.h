/* r4d_decode.h — how libr4d reads a weight's bytes: f16/bf16 widening, bf16 rounding, and the
 * GGML block formats, one 32-element group at a time. Written in the subset of C11 and CUDA C++
 * both compile: the kernels call these on the device, and tests/kernels/r4d_host_test.c calls
 * the very same code on the CPU against rad_dequant, bit for bit, on every encoding.
 *
 * Every f32 product and sum that rad_dequant rounds is written R4D_MUL / R4D_ADD / R4D_SUB: the
 * _rn intrinsics on the device (nvcc would otherwise fuse a*b+c into one FMA and change bits),
 * plain operators in C11, whose ISO mode (-std=c11) does not contract them either. */
#ifndef R4D_DECODE_H
#define R4D_DECODE_H

#include <stdint.h>
#include <string.h>

#include "abi/rad_types.h"

#ifdef __CUDACC__
#define R4D_HD __device__ __forceinline__ /* the host compiles this header as C (r4d_host.c, the tests) */
#define R4D_MUL(a, b) __fmul_rn((a), (b))
#define R4D_ADD(a, b) __fadd_rn((a), (b))
#define R4D_SUB(a, b) __fsub_rn((a), (b))
#else
#define R4D_HD static inline
#define R4D_MUL(a, b) ((a) * (b))
#define R4D_ADD(a, b) ((a) + (b))
#define R4D_SUB(a, b) ((a) - (b))
#endif

R4D_HD float r4d_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
R4D_HD uint32_t r4d_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
/* f16 -> f32, exact, NaN payloads kept (rad_f16_to_f32's). */
R4D_HD float r4d_dec_f16(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) return r4d_bits_f32(sign | 0x7f800000u | (mant << 13));
    if (exp) return r4d_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
    if (!mant) return r4d_bits_f32(sign);
    uint32_t e = 113; /* subnormal: normalise */
    while (!(mant & 0x400u)) mant <<= 1, e--;
    return r4d_bits_f32(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}
R4D_HD float r4d_dec_bf16(uint16_t h) { return r4d_bits_f32((uint32_t)h << 16); }
/* f32 -> bf16, round to nearest even; a NaN becomes the quiet NaN with its sign (torch's, and
 * rad_f32_to_bf16's: the conversion rad-convert --quant bf16 writes). */
R4D_HD uint16_t r4d_enc_bf16(float f) {
    uint32_t u = r4d_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(((u >> 16) & 0x8000u) | 0x7fc0u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
R4D_HD uint16_t r4d_ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
R4D_HD uint32_t r4d_ld32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
/* Element j of a plain-float row (f32, f16, bf16), widened exactly. */
R4D_HD float r4d_dec_plain(int enc, const uint8_t *row, int64_t j) {
#ifdef __CUDA_ARCH__ /* rows are aligned to their element: typed loads */
    if (enc == RAD_ENC_F32) return ((const float *)row)[j];
    const uint16_t h = ((const uint16_t *)row)[j];
#else
    if (enc == RAD_ENC_F32) return r4d_bits_f32(r4d_ld32(row + 4 * j));
    const uint16_t h = r4d_ld16(row + 2 * j);
#endif
    return enc == RAD_ENC_F16 ? r4d_dec_f16(h) : r4d_dec_bf16(h);
}
/* An e4m3 (fn) code's value, exactly (abi/rad_types.h's rad_f8_e4m3_value, without the union). */
R4D_HD float r4d_dec_e4m3(uint8_t b) {
    const uint32_t exp = (b >> 3) & 0xfu, mant = b & 7u, sign = (uint32_t)(b & 0x80u) << 24;
    if (exp == 0xfu && mant == 7u) return r4d_bits_f32(sign | 0x7fc00000u);
    if (!exp) return r4d_bits_f32(sign | r4d_f32_bits((float)mant * 0x1p-9f)); /* exact: mant < 8 */
    return r4d_bits_f32(sign | ((exp + 120u) << 23) | (mant << 20));
}
/* The scales of row r of a block-scaled [*, k] weight whose scale plane is `scale` (NULL: none):
 * abi/rad_types.h's rad_f8_scale_row, for the device too. */
R4D_HD const float *r4d_f8_srow(const float *scale, uint64_t r, uint64_t k) {
    return scale ? scale + r / RAD_F8_BLOCK * ((k + RAD_F8_BLOCK - 1) / RAD_F8_BLOCK) : (const float *)0;
}
/* Element j of row `row` of a block-scaled f8_e4m3 weight, whose scale row (the weight row's
 * 128-row block) is srow: code · srow[j / 128], one f32 product; srow NULL: the code alone. */
R4D_HD float r4d_dec_f8(const uint8_t *row, const float *srow, int64_t j) {
    const float v = r4d_dec_e4m3(row[j]);
    return srow ? R4D_MUL(v, srow[j / RAD_F8_BLOCK]) : v;
}
/* The 12 scale bytes of q4_k/q5_k: eight 6-bit scales and eight 6-bit mins. */
R4D_HD void r4d_scale_min_k4(int j, const uint8_t *q, int *d, int *m) {
    if (j < 4) {
        *d = q[j] & 63, *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* The integer codes of group g and what they mean: w_j = s_(j / 16) · c_j + b, exactly (the q8
 * GEMV's integer dot takes c; rad_dequant's roundings of these products are not reproduced,
 * which the q8 bound allows for). */
R4D_HD int r4d_dec_codes(int enc, const uint8_t *row, int64_t g, int *c, float *s0, float *s1, float *b) {
    *b = 0.0f;
    switch (enc) {
    case RAD_ENC_Q8_0: {
        const uint8_t *x = row + g * 34;
        *s0 = *s1 = r4d_dec_f16(r4d_ld16(x));
        for (int j = 0; j < 32; j++) c[j] = (int8_t)x[2 + j];
        return 0;
    }
    case RAD_ENC_Q4_0:
    case RAD_ENC_Q4_1: {
        const int one = enc == RAD_ENC_Q4_1, off = one ? 0 : 8;
        const uint8_t *x = row + g * (one ? 20 : 18), *qs = x + (one ? 4 : 2);
        *s0 = *s1 = r4d_dec_f16(r4d_ld16(x));
        if (one) *b = r4d_dec_f16(r4d_ld16(x + 2));
        for (int j = 0; j < 16; j++) c[j] = (qs[j] & 15) - off, c[j + 16] = (qs[j] >> 4) - off;
        return 0;
    }
    case RAD_ENC_Q5_0:
    case RAD_ENC_Q5_1: {
        const int one = enc == RAD_ENC_Q5_1, off = one ? 0 : 16;
        const uint8_t *x = row + g * (one ? 24 : 22), *qs = x + (one ? 8 : 6);
        *s0 = *s1 = r4d_dec_f16(r4d_ld16(x));
        if (one) *b = r4d_dec_f16(r4d_ld16(x + 2));
        const uint32_t qh = r4d_ld32(x + (one ? 4 : 2));
        for (int j = 0; j < 16; j++) {
            c[j] = ((qs[j] & 15) | (int)(((qh >> j) << 4) & 0x10)) - off;
            c[j + 16] = ((qs[j] >> 4) | (int)((qh >> (j + 12)) & 0x10)) - off;
        }
        return 0;
    }
    case RAD_ENC_Q4_K:
    case RAD_ENC_Q5_K: {
        const int k5 = enc == RAD_ENC_Q5_K;
        const uint8_t *x = row + (g / 8) * (k5 ? 176 : 144);
        const int part = (int)(g % 8), hi = part & 1;
        int sc, mn;
        r4d_scale_min_k4(part, x + 4, &sc, &mn);
        *s0 = *s1 = R4D_MUL(r4d_dec_f16(r4d_ld16(x)), (float)sc);
        *b = -R4D_MUL(r4d_dec_f16(r4d_ld16(x + 2)), (float)mn);
        const uint8_t *q = x + (k5 ? 48 : 16) + (part / 2) * 32, *qh = x + 16;
        for (int l = 0; l < 32; l++) c[l] = (hi ? q[l] >> 4 : q[l] & 15) + (k5 && (qh[l] & (1u << part)) ? 16 : 0);
        return 0;
    }
    case RAD_ENC_Q6_K: {
        const uint8_t *x = row + (g / 8) * 210;
        const int part = (int)(g % 8), half = part / 4, quarter = part % 4;
        const uint8_t *ql = x + half * 64 + (quarter & 1) * 32, *qh = x + 128 + half * 32;
        const int8_t *sc = (const int8_t *)(x + 192) + half * 8 + quarter * 2;
        const float d = r4d_dec_f16(r4d_ld16(x + 208));
        *s0 = R4D_MUL(d, (float)sc[0]), *s1 = R4D_MUL(d, (float)sc[1]);
        for (int l = 0; l < 32; l++) c[l] = ((quarter >= 2 ? ql[l] >> 4 : ql[l] & 15) | (((qh[l] >> (2 * quarter)) & 3) << 4)) - 32;
        return 0;
    }
    default:
        return -1;
    }
}

/* The 32 elements of group g of a GGML row — a 32-element block, or one 32-element part of a
 * 256-element super-block (g / 8 its super-block, g % 8 the part) — each exactly rad_dequant's:
 * its codes times their f32 scale, plus the group's offset where the format has one (q4_1, q5_1,
 * and the K-quants' minimum: rad_dequant's `d1 * q - m1` is `s·c + (−m1)` in IEEE arithmetic).
 * Returns 0, or -1 for an encoding it does not read (y then holds NaNs). */
R4D_HD int r4d_dec_group(int enc, const uint8_t *row, int64_t g, float *y) {
    int c[32];
    float s0, s1, b;
    if (r4d_dec_codes(enc, row, g, c, &s0, &s1, &b)) {
        for (int j = 0; j < 32; j++) y[j] = r4d_bits_f32(0x7fc00000u);
        return -1;
    }
    const int offset = enc == RAD_ENC_Q4_1 || enc == RAD_ENC_Q5_1 || enc == RAD_ENC_Q4_K || enc == RAD_ENC_Q5_K;
    for (int j = 0; j < 32; j++) {
        const float p = R4D_MUL(j < 16 ? s0 : s1, (float)c[j]);
        y[j] = offset ? R4D_ADD(p, b) : p; /* no `+ 0` where there is none: it would turn -0 into +0 */
    }
    return 0;
}

#endif
