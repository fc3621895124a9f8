/* rad_encode.c — f32 to f32/f16/bf16/q8_0, bit-identical to numpy, torch and the gguf package.
 * See rad_encode.h for the oracle each target follows.
 *
 * Everything is done on bit patterns or in plain float arithmetic (no FMA can form: no
 * multiply feeds an add), so results do not depend on the compiler's contraction setting or on
 * the FPU's rounding of intermediates. Outputs are written byte by byte (any alignment). */
#include "libcommon/tensor/rad_encode.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/tensor/rad_enc.h"

#define QK8_0 32

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static void wr16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)(v & 0xff);
    p[1] = (uint8_t)(v >> 8);
}

uint16_t rad_f32_to_f16(float f) {
    const uint32_t x = f32_bits(f);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    const uint32_t fexp = (x >> 23) & 0xffu;
    const uint32_t mant = x & 0x7fffffu;
    if (fexp == 0xff) {
        if (mant == 0) return (uint16_t)(sign | 0x7c00u); /* ±inf */
        /* NaN: keep the top payload bits (numpy does not quiet it); never let it become inf */
        uint16_t m = (uint16_t)(mant >> 13);
        if (m == 0) m = 1;
        return (uint16_t)(sign | 0x7c00u | m);
    }
    const int e = (int)fexp - 127 + 15; /* the f16 biased exponent, before rounding */
    if (e >= 31) return (uint16_t)(sign | 0x7c00u); /* at least 2^16: overflow */
    if (e >= 1) {
        /* normal: keep 10 mantissa bits, round the 13 dropped ones to nearest even; a carry
         * moves into the exponent and, past 65504, to inf (0x7c00): both are right */
        uint32_t h = ((uint32_t)e << 10) | (mant >> 13);
        const uint32_t rest = mant & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
        return (uint16_t)(sign | h);
    }
    if (e < -10) return sign; /* below 2^-25 (f32 subnormals included): rounds to ±0 */
    /* f16 subnormal: value = m * 2^-24 with m = (1.mant) * 2^(e+13); shift the 24-bit
     * significand right by 14 - e (14..24) and round to nearest even */
    const uint32_t sig = mant | 0x800000u;
    const uint32_t shift = (uint32_t)(14 - e);
    uint32_t h = sig >> shift;
    const uint32_t rest = sig & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1u))) h++; /* may carry into the smallest normal */
    return (uint16_t)(sign | h);
}

uint16_t rad_f32_to_bf16(float f) {
    const uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(((x >> 16) & 0x8000u) | 0x7fc0u);
    /* round to nearest even on the 16 dropped bits; overflow carries into inf */
    const uint32_t bias = 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)((x + bias) >> 16);
}

/* numpy's float32 -> int8 cast on x86-64: cvttss2si to int32 (NaN, ±inf and out-of-range give
 * INT32_MIN), then the low byte. */
static uint8_t np_f32_to_i8_bits(float v) {
    if (!(v >= -2147483648.0f && v < 2147483648.0f)) return 0;
    const int32_t i = (int32_t)v;
    return (uint8_t)((uint32_t)i & 0xffu);
}

/* One Q8_0 block (34 bytes at y) from x[32], as gguf.quants.Q8_0.quantize_blocks. */
static void q8_0_block(const float *x, uint8_t *y) {
    float amax = 0.0f;
    int nan_seen = 0;
    float nan_val = 0.0f;
    for (int j = 0; j < QK8_0; j++) {
        const float a = fabsf(x[j]);
        if (isnan(a)) {
            if (!nan_seen) nan_val = a;
            nan_seen = 1;
        } else if (a > amax) {
            amax = a;
        }
    }
    if (nan_seen) amax = nan_val; /* numpy's max propagates the NaN */
    const float d = amax / 127.0f;
    const float id = (d == 0.0f) ? 0.0f : 1.0f / d;
    wr16(y, rad_f32_to_f16(d));
    for (int j = 0; j < QK8_0; j++) {
        const float v = x[j] * id;
        /* gguf's np_roundf: round half away from zero; NaN and ±inf pass through */
        const float r = isfinite(v) ? roundf(v) : v;
        y[2 + j] = np_f32_to_i8_bits(r);
    }
}

int rad_encode_supported(RadEnc enc) {
    return enc == RAD_ENC_F32 || enc == RAD_ENC_F16 || enc == RAD_ENC_BF16 || enc == RAD_ENC_Q8_0;
}

static int unsupported(RadEnc dst, RadErr *e) {
    const RadEncInfo *ei = rad_enc_info(dst);
    if (!ei) return rad_err_set(e, RAD_E_UNSUPPORTED, "encode: unknown encoding %d", (int)dst);
    return rad_err_set(e, RAD_E_UNSUPPORTED,
                       "encode: cannot encode into %s (targets: f32, f16, bf16, q8_0)", ei->name);
}

int rad_encode_plan(RadEnc dst, uint32_t rank, const uint64_t *shape, const char *name,
                    uint64_t *out_bytes, RadErr *e) {
    if (!rad_encode_supported(dst)) return unsupported(dst, e);
    const RadEncInfo *ei = rad_enc_info(dst);
    const char *nm = name ? name : "?";
    if (rank > RAD_MAX_RANK)
        return rad_err_set(e, RAD_E_ARG, "%s: tensor '%s': rank %u exceeds %d", ei->name, nm,
                           rank, RAD_MAX_RANK);
    if (rank > 0 && !shape)
        return rad_err_set(e, RAD_E_ARG, "%s: tensor '%s': NULL shape", ei->name, nm);
    if (ei->block_elems > 1) {
        if (rank == 0)
            return rad_err_set(e, RAD_E_SHAPE, "%s: tensor '%s': a scalar cannot be %s", ei->name,
                               nm, ei->name);
        if (shape[rank - 1] % ei->block_elems)
            return rad_err_set(e, RAD_E_SHAPE,
                               "%s: tensor '%s': innermost dim %llu is not a multiple of the "
                               "%u-element block",
                               ei->name, nm, (unsigned long long)shape[rank - 1], ei->block_elems);
    }
    uint64_t n = 1;
    for (uint32_t i = 0; i < rank; i++) {
        if (shape[i] != 0 && n > UINT64_MAX / shape[i])
            return rad_err_set(e, RAD_E_ARG, "%s: tensor '%s': element count overflows 64 bits",
                               ei->name, nm);
        n *= shape[i];
    }
    const uint64_t blocks = n / ei->block_elems;
    if (blocks > UINT64_MAX / ei->block_bytes)
        return rad_err_set(e, RAD_E_ARG, "%s: tensor '%s': byte count overflows 64 bits",
                           ei->name, nm);
    if (out_bytes) *out_bytes = blocks * ei->block_bytes;
    return RAD_OK;
}

/* Bytes of n elements of enc, refusing partial blocks (RAD_E_SHAPE) and overflow (RAD_E_ARG). */
static int enc_size(const char *op, RadEnc enc, uint64_t n, uint64_t *bytes, RadErr *e) {
    const RadEncInfo *ei = rad_enc_info(enc);
    if (!ei) return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: unknown encoding %d", op, (int)enc);
    if (n % ei->block_elems)
        return rad_err_set(e, RAD_E_SHAPE,
                           "%s: %s: %llu elements is not a whole number of %u-element blocks", op,
                           ei->name, (unsigned long long)n, ei->block_elems);
    if (n / ei->block_elems > UINT64_MAX / ei->block_bytes)
        return rad_err_set(e, RAD_E_ARG, "%s: %s: %llu elements overflow a 64-bit byte count", op,
                           ei->name, (unsigned long long)n);
    *bytes = n / ei->block_elems * ei->block_bytes;
    return RAD_OK;
}

int rad_encode(RadEnc dst, const float *src, uint64_t n_elems, void *out, uint64_t out_bytes,
               RadErr *e) {
    if (!rad_encode_supported(dst)) return unsupported(dst, e);
    uint64_t want;
    int rc = enc_size("encode", dst, n_elems, &want, e);
    if (rc) return rc;
    const RadEncInfo *ei = rad_enc_info(dst);
    if (out_bytes != want)
        return rad_err_set(e, RAD_E_ARG, "encode: %s: %llu elements need %llu bytes, got %llu",
                           ei->name, (unsigned long long)n_elems, (unsigned long long)want,
                           (unsigned long long)out_bytes);
    if (n_elems == 0) return RAD_OK;
    if (!src || !out)
        return rad_err_set(e, RAD_E_ARG, "encode: %s: %llu elements with a NULL buffer", ei->name,
                           (unsigned long long)n_elems);
    uint8_t *y = out;
    switch (dst) {
    case RAD_ENC_F32:
        memcpy(y, src, n_elems * 4);
        break;
    case RAD_ENC_F16:
        for (uint64_t i = 0; i < n_elems; i++) wr16(y + 2 * i, rad_f32_to_f16(src[i]));
        break;
    case RAD_ENC_BF16:
        for (uint64_t i = 0; i < n_elems; i++) wr16(y + 2 * i, rad_f32_to_bf16(src[i]));
        break;
    case RAD_ENC_Q8_0:
        for (uint64_t b = 0; b < n_elems / QK8_0; b++) q8_0_block(src + b * QK8_0, y + b * 34);
        break;
    default:
        return unsupported(dst, e);
    }
    return RAD_OK;
}

/* Elements decoded per chunk: a multiple of every block size (32 and 256). */
#define CHUNK_ELEMS (64u * 1024u)

int rad_convert_tensor(RadEnc dst, RadEnc src, const void *in, uint64_t in_bytes,
                       uint64_t n_elems, void *out, uint64_t out_bytes, RadErr *e) {
    uint64_t src_want, dst_want;
    int rc = enc_size("convert", src, n_elems, &src_want, e);
    if (rc) return rc;
    if (dst != src && !rad_encode_supported(dst)) return unsupported(dst, e);
    rc = enc_size("convert", dst, n_elems, &dst_want, e);
    if (rc) return rc;
    const RadEncInfo *si = rad_enc_info(src), *di = rad_enc_info(dst);
    if (in_bytes != src_want)
        return rad_err_set(e, RAD_E_ARG, "convert %s -> %s: %llu elements need %llu input bytes, "
                           "got %llu", si->name, di->name, (unsigned long long)n_elems,
                           (unsigned long long)src_want, (unsigned long long)in_bytes);
    if (out_bytes != dst_want)
        return rad_err_set(e, RAD_E_ARG, "convert %s -> %s: %llu elements need %llu output bytes, "
                           "got %llu", si->name, di->name, (unsigned long long)n_elems,
                           (unsigned long long)dst_want, (unsigned long long)out_bytes);
    if (n_elems == 0) return RAD_OK;
    if (!in || !out)
        return rad_err_set(e, RAD_E_ARG, "convert %s -> %s: NULL buffer", si->name, di->name);
    if (dst == src) {
        memcpy(out, in, in_bytes);
        return RAD_OK;
    }
    const uint64_t chunk = n_elems < CHUNK_ELEMS ? n_elems : CHUNK_ELEMS;
    float *tmp = malloc(chunk * sizeof *tmp);
    if (!tmp)
        return rad_err_set(e, RAD_E_NOMEM, "convert %s -> %s: out of memory", si->name, di->name);
    const uint8_t *x = in;
    uint8_t *y = out;
    /* Chunk boundaries are multiples of CHUNK_ELEMS, so of both block sizes; the last chunk is
     * what remains of n_elems, itself a whole number of both blocks (checked above). */
    for (uint64_t i = 0; i < n_elems && rc == RAD_OK; i += chunk) {
        const uint64_t n = (n_elems - i < chunk) ? n_elems - i : chunk;
        const uint64_t xo = i / si->block_elems * si->block_bytes;
        const uint64_t xn = n / si->block_elems * si->block_bytes;
        const uint64_t yo = i / di->block_elems * di->block_bytes;
        const uint64_t yn = n / di->block_elems * di->block_bytes;
        rc = rad_dequant(src, x + xo, xn, tmp, n, e);
        if (rc == RAD_OK) rc = rad_encode(dst, tmp, n, y + yo, yn, e);
    }
    free(tmp);
    return rc;
}
