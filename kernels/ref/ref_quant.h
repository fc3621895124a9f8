/* ref_quant.h — GGML block decoding for libref, portable C.
 *
 * A kernel library cannot call libcommon, so block decoding lives here. The layouts are GGML's
 * byte for byte (abi/rad_types.h), read byte by byte (a weight row may have any alignment), and
 * the arithmetic is libcommon/tensor/rad_enc.c's in the same order with every product stored before it
 * is added: these decoders are bit-identical to rad_dequant (tests/kernels/ref_test.c checks it through
 * embed_gather), which is itself checked against the gguf package. The SIMD decoders in
 * ref_dequant.c are checked against these. */
#ifndef REF_QUANT_H
#define REF_QUANT_H

#include <stdint.h>
#include <string.h>

#define REF_QK 32   /* elements per block: q8_0, q4_0, q4_1, q5_0, q5_1 */
#define REF_QK_K 256 /* elements per super-block: q4_k, q5_k, q6_k */

static inline uint16_t ref_rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t ref_rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline float ref_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline uint32_t ref_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* IEEE binary16 -> binary32, exact for every input (subnormals, ±inf, NaN payloads kept). */
static inline float ref_f16_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0x1f) return ref_bits_f32(sign | 0x7f800000u | (mant << 13));
    if (exp) return ref_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
    if (!mant) return ref_bits_f32(sign);
    uint32_t e = 113; /* subnormal: normalise so the leading 1 reaches bit 10 */
    while (!(mant & 0x400u)) mant <<= 1, e--;
    return ref_bits_f32(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}
static inline float ref_bf16_f32(uint16_t h) { return ref_bits_f32((uint32_t)h << 16); }

/* binary32 -> binary16, round to nearest even; overflow to ±inf; NaN stays a (quiet) NaN. */
static inline uint16_t ref_f32_f16(float f) {
    uint32_t u = ref_f32_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    if (a >= 0x38800000u) {                                  /* normal f16 */
        uint32_t r = a - 0x38000000u;                         /* rebias 127 -> 15 */
        r = r + 0x0fffu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    if (a < 0x33000000u) return (uint16_t)sign; /* below half the smallest subnormal */
    /* subnormal f16: value = m * 2^-24 */
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* value / 2^-24 = m * 2^(e - 126), and 14 <= shift <= 24 here */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}
/* binary32 -> bfloat16, round to nearest even; NaN stays a quiet NaN. */
static inline uint16_t ref_f32_bf16(float f) {
    uint32_t u = ref_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u = u + 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* ---- 32-element blocks --------------------------------------------------------------------- */

static inline void ref_dq_q8_0(const uint8_t *x, float *y) {
    const float d = ref_f16_f32(ref_rd16(x));
    for (int j = 0; j < REF_QK; j++) y[j] = (float)(int8_t)x[2 + j] * d;
}

static inline void ref_dq_q4_0(const uint8_t *x, float *y) {
    const float d = ref_f16_f32(ref_rd16(x));
    const uint8_t *qs = x + 2;
    for (int j = 0; j < REF_QK / 2; j++) {
        y[j] = (float)((qs[j] & 0x0f) - 8) * d;
        y[j + REF_QK / 2] = (float)((qs[j] >> 4) - 8) * d;
    }
}

static inline void ref_dq_q4_1(const uint8_t *x, float *y) {
    const float d = ref_f16_f32(ref_rd16(x)), m = ref_f16_f32(ref_rd16(x + 2));
    const uint8_t *qs = x + 4;
    for (int j = 0; j < REF_QK / 2; j++) {
        const float p0 = (float)(qs[j] & 0x0f) * d;
        const float p1 = (float)(qs[j] >> 4) * d;
        y[j] = p0 + m;
        y[j + REF_QK / 2] = p1 + m;
    }
}

static inline void ref_dq_q5_0(const uint8_t *x, float *y) {
    const float d = ref_f16_f32(ref_rd16(x));
    const uint32_t qh = ref_rd32(x + 2);
    const uint8_t *qs = x + 6;
    for (int j = 0; j < REF_QK / 2; j++) {
        const int xh0 = (int)(((qh >> j) << 4) & 0x10);
        const int xh1 = (int)((qh >> (j + 12)) & 0x10);
        y[j] = (float)(((qs[j] & 0x0f) | xh0) - 16) * d;
        y[j + REF_QK / 2] = (float)(((qs[j] >> 4) | xh1) - 16) * d;
    }
}

static inline void ref_dq_q5_1(const uint8_t *x, float *y) {
    const float d = ref_f16_f32(ref_rd16(x)), m = ref_f16_f32(ref_rd16(x + 2));
    const uint32_t qh = ref_rd32(x + 4);
    const uint8_t *qs = x + 8;
    for (int j = 0; j < REF_QK / 2; j++) {
        const int xh0 = (int)(((qh >> j) << 4) & 0x10);
        const int xh1 = (int)((qh >> (j + 12)) & 0x10);
        const float p0 = (float)((qs[j] & 0x0f) | xh0) * d;
        const float p1 = (float)((qs[j] >> 4) | xh1) * d;
        y[j] = p0 + m;
        y[j + REF_QK / 2] = p1 + m;
    }
}

/* ---- 256-element super-blocks --------------------------------------------------------------- */

/* q4_k/q5_k: the 12 scale bytes hold eight 6-bit scales and eight 6-bit mins. */
static inline void ref_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}
/* All eight at once. */
static inline void ref_scales_k4(const uint8_t *q, uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 8; j++) ref_scale_min_k4(j, q, &sc[j], &mn[j]);
}

static inline void ref_dq_q4_k(const uint8_t *x, float *y) {
    const float d = ref_f16_f32(ref_rd16(x)), dmin = ref_f16_f32(ref_rd16(x + 2));
    const uint8_t *scales = x + 4, *q = x + 16;
    for (int j = 0; j < 4; j++, q += 32) {
        uint8_t sc, m;
        ref_scale_min_k4(2 * j, scales, &sc, &m);
        const float d1 = d * (float)sc, m1 = dmin * (float)m;
        ref_scale_min_k4(2 * j + 1, scales, &sc, &m);
        const float d2 = d * (float)sc, m2 = dmin * (float)m;
        for (int l = 0; l < 32; l++) {
            const float p = d1 * (float)(q[l] & 0x0f);
            *y++ = p - m1;
        }
        for (int l = 0; l < 32; l++) {
            const float p = d2 * (float)(q[l] >> 4);
            *y++ = p - m2;
        }
    }
}

static inline void ref_dq_q5_k(const uint8_t *x, float *y) {
    const float d = ref_f16_f32(ref_rd16(x)), dmin = ref_f16_f32(ref_rd16(x + 2));
    const uint8_t *scales = x + 4, *qh = x + 16, *ql = x + 48;
    unsigned u1 = 1, u2 = 2;
    for (int j = 0; j < 4; j++, ql += 32, u1 <<= 2, u2 <<= 2) {
        uint8_t sc, m;
        ref_scale_min_k4(2 * j, scales, &sc, &m);
        const float d1 = d * (float)sc, m1 = dmin * (float)m;
        ref_scale_min_k4(2 * j + 1, scales, &sc, &m);
        const float d2 = d * (float)sc, m2 = dmin * (float)m;
        for (int l = 0; l < 32; l++) {
            const float p = d1 * (float)((ql[l] & 0x0f) + ((qh[l] & u1) ? 16 : 0));
            *y++ = p - m1;
        }
        for (int l = 0; l < 32; l++) {
            const float p = d2 * (float)((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0));
            *y++ = p - m2;
        }
    }
}

static inline void ref_dq_q6_k(const uint8_t *x, float *y) {
    const uint8_t *ql = x, *qh = x + 128;
    const int8_t *sc = (const int8_t *)(x + 192); /* i8: any alignment */
    const float d = ref_f16_f32(ref_rd16(x + 208));
    for (int n = 0; n < REF_QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
        for (int l = 0; l < 32; l++) {
            const int is = l / 16;
            const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            const float s1 = d * (float)sc[is + 0], s2 = d * (float)sc[is + 2];
            const float s3 = d * (float)sc[is + 4], s4 = d * (float)sc[is + 6];
            y[l + 0] = s1 * (float)q1;
            y[l + 32] = s2 * (float)q2;
            y[l + 64] = s3 * (float)q3;
            y[l + 96] = s4 * (float)q4;
        }
    }
}

/* One row of `cols` elements of encoding e (a RadEnc value) into y; 0 when e is not decoded
 * here. Portable C: the generic path, and the reference of the SIMD decoders. */
static inline int ref_dq_row_generic(int e, const uint8_t *x, float *y, uint64_t cols) {
    switch (e) {
    case 0 /* f32 */: memcpy(y, x, cols * sizeof(float)); return 1;
    case 1 /* f16 */: for (uint64_t i = 0; i < cols; i++) y[i] = ref_f16_f32(ref_rd16(x + 2 * i)); return 1;
    case 2 /* bf16 */: for (uint64_t i = 0; i < cols; i++) y[i] = ref_bf16_f32(ref_rd16(x + 2 * i)); return 1;
    case 12: for (uint64_t b = 0; b < cols / 32; b++) ref_dq_q8_0(x + 34 * b, y + 32 * b); return 1;
    case 13: for (uint64_t b = 0; b < cols / 32; b++) ref_dq_q4_0(x + 18 * b, y + 32 * b); return 1;
    case 14: for (uint64_t b = 0; b < cols / 32; b++) ref_dq_q4_1(x + 20 * b, y + 32 * b); return 1;
    case 15: for (uint64_t b = 0; b < cols / 32; b++) ref_dq_q5_0(x + 22 * b, y + 32 * b); return 1;
    case 16: for (uint64_t b = 0; b < cols / 32; b++) ref_dq_q5_1(x + 24 * b, y + 32 * b); return 1;
    case 17: for (uint64_t b = 0; b < cols / 256; b++) ref_dq_q4_k(x + 144 * b, y + 256 * b); return 1;
    case 18: for (uint64_t b = 0; b < cols / 256; b++) ref_dq_q5_k(x + 176 * b, y + 256 * b); return 1;
    case 19: for (uint64_t b = 0; b < cols / 256; b++) ref_dq_q6_k(x + 210 * b, y + 256 * b); return 1;
    default: return 0;
    }
}

#endif
