/* rad_enc.c — reference (portable, scalar) decoding of every RadEnc to f32. See rad_enc.h.
 *
 * Block layouts are GGML's (ggml-common.h), read byte by byte so that no pointer into src is
 * ever cast to a wider type (src may have any alignment). The arithmetic follows GGML's
 * dequantize_row_* in the same order, in float, with products stored before they are added,
 * so the result does not depend on the compiler's FMA contraction setting. */
#include "libcommon/tensor/rad_enc.h"

#include <math.h>
#include <string.h>

#define QK 32   /* elements per block, the 32-element formats */
#define QK_K 256 /* elements per super-block, the K formats */

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32); }

static float bits_to_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float rad_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (mant << 13); /* inf, or NaN with its payload */
    } else if (exp != 0) {
        u = sign | ((exp + (127 - 15)) << 23) | (mant << 13);
    } else if (mant == 0) {
        u = sign; /* ±0 */
    } else {
        /* subnormal: mant * 2^-24; normalise so the leading 1 moves to bit 10 */
        uint32_t e = 127 - 15 + 1;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            e--;
        }
        u = sign | (e << 23) | ((mant & 0x3ffu) << 13);
    }
    return bits_to_f32(u);
}

float rad_bf16_to_f32(uint16_t h) { return bits_to_f32((uint32_t)h << 16); }

float rad_f8e5m2_to_f32(uint8_t b) { return rad_f16_to_f32((uint16_t)(b << 8)); }

float rad_f8e4m3_to_f32(uint8_t b) { return rad_f8_e4m3_value(b); } /* abi/rad_types.h: one decoder for all */

void rad_dequant_f8_blocks(const uint8_t *codes, const float *scale, uint64_t cols, uint64_t r0, uint64_t nr, float *dst) {
    for (uint64_t r = 0; r < nr; r++)
        rad_f8_row_decode(codes + (r0 + r) * cols, rad_f8_scale_row(scale, r0 + r, cols), 0, cols, dst + r * cols);
}

int rad_enc_bytes(RadEnc enc, uint64_t n_elems, uint64_t *n_bytes, RadErr *e) {
    const RadEncInfo *ei = rad_enc_info(enc);
    if (!ei) return rad_err_set(e, RAD_E_UNSUPPORTED, "dequant: unknown encoding %d", (int)enc);
    if (n_elems % ei->block_elems)
        return rad_err_set(e, RAD_E_SHAPE,
                           "%s: %llu elements is not a whole number of %u-element blocks", ei->name,
                           (unsigned long long)n_elems, ei->block_elems);
    uint64_t nb = n_elems / ei->block_elems;
    if (nb > UINT64_MAX / ei->block_bytes)
        return rad_err_set(e, RAD_E_FORMAT, "%s: %llu elements overflow a 64-bit byte count",
                           ei->name, (unsigned long long)n_elems);
    *n_bytes = nb * ei->block_bytes;
    return RAD_OK;
}

/* --- 32-element blocks ----------------------------------------------------------------- */

static void dq_q8_0(const uint8_t *x, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++, x += 34, y += QK) {
        const float d = rad_f16_to_f32(rd16(x));
        for (int j = 0; j < QK; j++) y[j] = (float)(int8_t)x[2 + j] * d;
    }
}

static void dq_q4_0(const uint8_t *x, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++, x += 18, y += QK) {
        const float d = rad_f16_to_f32(rd16(x));
        const uint8_t *qs = x + 2;
        for (int j = 0; j < QK / 2; j++) {
            const int x0 = (qs[j] & 0x0f) - 8;
            const int x1 = (qs[j] >> 4) - 8;
            y[j] = (float)x0 * d;
            y[j + QK / 2] = (float)x1 * d;
        }
    }
}

static void dq_q4_1(const uint8_t *x, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++, x += 20, y += QK) {
        const float d = rad_f16_to_f32(rd16(x));
        const float m = rad_f16_to_f32(rd16(x + 2));
        const uint8_t *qs = x + 4;
        for (int j = 0; j < QK / 2; j++) {
            const float p0 = (float)(qs[j] & 0x0f) * d;
            const float p1 = (float)(qs[j] >> 4) * d;
            y[j] = p0 + m;
            y[j + QK / 2] = p1 + m;
        }
    }
}

static void dq_q5_0(const uint8_t *x, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++, x += 22, y += QK) {
        const float d = rad_f16_to_f32(rd16(x));
        const uint32_t qh = rd32(x + 2);
        const uint8_t *qs = x + 6;
        for (int j = 0; j < QK / 2; j++) {
            const int xh0 = (int)(((qh >> j) << 4) & 0x10);
            const int xh1 = (int)((qh >> (j + 12)) & 0x10);
            const int x0 = ((qs[j] & 0x0f) | xh0) - 16;
            const int x1 = ((qs[j] >> 4) | xh1) - 16;
            y[j] = (float)x0 * d;
            y[j + QK / 2] = (float)x1 * d;
        }
    }
}

static void dq_q5_1(const uint8_t *x, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++, x += 24, y += QK) {
        const float d = rad_f16_to_f32(rd16(x));
        const float m = rad_f16_to_f32(rd16(x + 2));
        const uint32_t qh = rd32(x + 4);
        const uint8_t *qs = x + 8;
        for (int j = 0; j < QK / 2; j++) {
            const int xh0 = (int)(((qh >> j) << 4) & 0x10);
            const int xh1 = (int)((qh >> (j + 12)) & 0x10);
            const float p0 = (float)((qs[j] & 0x0f) | xh0) * d;
            const float p1 = (float)((qs[j] >> 4) | xh1) * d;
            y[j] = p0 + m;
            y[j + QK / 2] = p1 + m;
        }
    }
}

/* --- 256-element super-blocks --------------------------------------------------------- */

/* The 12 scale bytes of q4_k/q5_k hold eight 6-bit scales and eight 6-bit mins. */
static void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

static void dq_q4_k(const uint8_t *x, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++, x += 144) {
        const float d = rad_f16_to_f32(rd16(x));
        const float dmin = rad_f16_to_f32(rd16(x + 2));
        const uint8_t *scales = x + 4, *q = x + 16;
        int is = 0;
        for (int j = 0; j < QK_K; j += 64) {
            uint8_t sc, m;
            scale_min_k4(is + 0, scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            scale_min_k4(is + 1, scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++) {
                const float p = d1 * (float)(q[l] & 0x0f);
                *y++ = p - m1;
            }
            for (int l = 0; l < 32; l++) {
                const float p = d2 * (float)(q[l] >> 4);
                *y++ = p - m2;
            }
            q += 32;
            is += 2;
        }
    }
}

static void dq_q5_k(const uint8_t *x, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++, x += 176) {
        const float d = rad_f16_to_f32(rd16(x));
        const float dmin = rad_f16_to_f32(rd16(x + 2));
        const uint8_t *scales = x + 4, *qh = x + 16, *ql = x + 48;
        int is = 0;
        unsigned u1 = 1, u2 = 2;
        for (int j = 0; j < QK_K; j += 64) {
            uint8_t sc, m;
            scale_min_k4(is + 0, scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            scale_min_k4(is + 1, scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++) {
                const float p = d1 * (float)((ql[l] & 0x0f) + ((qh[l] & u1) ? 16 : 0));
                *y++ = p - m1;
            }
            for (int l = 0; l < 32; l++) {
                const float p = d2 * (float)((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0));
                *y++ = p - m2;
            }
            ql += 32;
            is += 2;
            u1 <<= 2;
            u2 <<= 2;
        }
    }
}

static void dq_q6_k(const uint8_t *x, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++, x += 210) {
        const uint8_t *ql = x, *qh = x + 128;
        int8_t sc[16]; /* i8 scales, one per 16 elements */
        memcpy(sc, x + 192, sizeof sc);
        const int8_t *sc8 = sc;
        const float d = rad_f16_to_f32(rd16(x + 208));
        for (int n = 0; n < QK_K; n += 128) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l + 0] = d * (float)sc8[is + 0] * (float)q1;
                y[l + 32] = d * (float)sc8[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc8[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc8[is + 6] * (float)q4;
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc8 += 8;
        }
    }
}

/* --- plain encodings ------------------------------------------------------------------- */

static void dq_plain(RadEnc enc, const uint8_t *x, float *y, uint64_t n) {
    switch (enc) {
    case RAD_ENC_F32:
        memcpy(y, x, n * sizeof(float));
        break;
    case RAD_ENC_F16:
        for (uint64_t i = 0; i < n; i++) y[i] = rad_f16_to_f32(rd16(x + 2 * i));
        break;
    case RAD_ENC_BF16:
        for (uint64_t i = 0; i < n; i++) y[i] = rad_bf16_to_f32(rd16(x + 2 * i));
        break;
    case RAD_ENC_F64:
        for (uint64_t i = 0; i < n; i++) {
            uint64_t u = rd64(x + 8 * i);
            double dv;
            memcpy(&dv, &u, sizeof dv);
            y[i] = (float)dv;
        }
        break;
    case RAD_ENC_I8:
        for (uint64_t i = 0; i < n; i++) y[i] = (float)(int8_t)x[i];
        break;
    case RAD_ENC_I16:
        for (uint64_t i = 0; i < n; i++) y[i] = (float)(int16_t)rd16(x + 2 * i);
        break;
    case RAD_ENC_I32:
        for (uint64_t i = 0; i < n; i++) y[i] = (float)(int32_t)rd32(x + 4 * i);
        break;
    case RAD_ENC_I64:
        for (uint64_t i = 0; i < n; i++) y[i] = (float)(int64_t)rd64(x + 8 * i);
        break;
    case RAD_ENC_U8:
        for (uint64_t i = 0; i < n; i++) y[i] = (float)x[i];
        break;
    case RAD_ENC_BOOL:
        for (uint64_t i = 0; i < n; i++) y[i] = x[i] ? 1.0f : 0.0f;
        break;
    case RAD_ENC_F8_E4M3:
        for (uint64_t i = 0; i < n; i++) y[i] = rad_f8e4m3_to_f32(x[i]);
        break;
    case RAD_ENC_F8_E5M2:
        for (uint64_t i = 0; i < n; i++) y[i] = rad_f8e5m2_to_f32(x[i]);
        break;
    default:
        break;
    }
}

int rad_dequant(RadEnc enc, const void *src, uint64_t src_bytes, float *dst, uint64_t n_elems,
                RadErr *e) {
    uint64_t want;
    int rc = rad_enc_bytes(enc, n_elems, &want, e);
    if (rc) return rc;
    const RadEncInfo *ei = rad_enc_info(enc);
    if (src_bytes != want)
        return rad_err_set(e, RAD_E_FORMAT, "%s: %llu elements need %llu bytes, got %llu",
                           ei->name, (unsigned long long)n_elems, (unsigned long long)want,
                           (unsigned long long)src_bytes);
    if (n_elems == 0) return RAD_OK;
    if (!src || !dst)
        return rad_err_set(e, RAD_E_ARG, "%s: dequant of %llu elements with a NULL buffer",
                           ei->name, (unsigned long long)n_elems);
    const uint8_t *x = src;
    uint64_t nb = n_elems / ei->block_elems;
    switch (enc) {
    case RAD_ENC_Q8_0: dq_q8_0(x, dst, nb); break;
    case RAD_ENC_Q4_0: dq_q4_0(x, dst, nb); break;
    case RAD_ENC_Q4_1: dq_q4_1(x, dst, nb); break;
    case RAD_ENC_Q5_0: dq_q5_0(x, dst, nb); break;
    case RAD_ENC_Q5_1: dq_q5_1(x, dst, nb); break;
    case RAD_ENC_Q4_K: dq_q4_k(x, dst, nb); break;
    case RAD_ENC_Q5_K: dq_q5_k(x, dst, nb); break;
    case RAD_ENC_Q6_K: dq_q6_k(x, dst, nb); break;
    default: dq_plain(enc, x, dst, n_elems); break;
    }
    return RAD_OK;
}
