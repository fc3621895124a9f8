/* rad_types.h — status codes and tensor encodings shared by every part of Radiance.
 * Public ABI: values are fixed once released; new ones are only appended. */
#ifndef RAD_TYPES_H
#define RAD_TYPES_H

#include <stddef.h>
#include <math.h>
#include <stdint.h>

#define RAD_MAX_RANK 8

/* Status codes: 0 is success, failures are negative. */
typedef enum RadStatus {
    RAD_OK = 0,
    RAD_E_IO = -1,          /* open/read/write/rename failed */
    RAD_E_FORMAT = -2,      /* malformed input: bad magic, truncated, out-of-range field */
    RAD_E_UNSUPPORTED = -3, /* well-formed but unknown: version, encoding, dtype */
    RAD_E_NOMEM = -4,
    RAD_E_SHAPE = -5,       /* shapes disagree, or a zero-row issue */
    RAD_E_CHECKSUM = -6,
    RAD_E_NOTFOUND = -7,    /* a named tensor, key, file or plugin is missing */
    RAD_E_ARG = -8,         /* a bad flag or argument */
    RAD_E_LIMIT = -9,       /* a configured limit was exceeded */
} RadStatus;

/* Tensor encodings. Quantised ones keep GGML's block layouts byte for byte, so a GGUF
 * tensor is copied, not re-encoded. Values are part of the .rad format (docs/FORMAT.md). */
typedef enum RadEnc {
    RAD_ENC_F32 = 0,
    RAD_ENC_F16 = 1,
    RAD_ENC_BF16 = 2,
    RAD_ENC_F64 = 3,
    RAD_ENC_I8 = 4,
    RAD_ENC_I16 = 5,
    RAD_ENC_I32 = 6,
    RAD_ENC_I64 = 7,
    RAD_ENC_U8 = 8,
    RAD_ENC_BOOL = 9,
    RAD_ENC_F8_E4M3 = 10,
    RAD_ENC_F8_E5M2 = 11,
    RAD_ENC_Q8_0 = 12, /* 32 elems: f16 d, i8 q[32]                         34 B */
    RAD_ENC_Q4_0 = 13, /* 32 elems: f16 d, u8 qs[16]                        18 B */
    RAD_ENC_Q4_1 = 14, /* 32 elems: f16 d, f16 m, u8 qs[16]                 20 B */
    RAD_ENC_Q5_0 = 15, /* 32 elems: f16 d, u8 qh[4], u8 qs[16]              22 B */
    RAD_ENC_Q5_1 = 16, /* 32 elems: f16 d, f16 m, u8 qh[4], u8 qs[16]       24 B */
    RAD_ENC_Q4_K = 17, /* 256 elems: f16 d, f16 dmin, u8 scales[12], qs[128] 144 B */
    RAD_ENC_Q5_K = 18, /* 256 elems: + qh[32]                               176 B */
    RAD_ENC_Q6_K = 19, /* 256 elems: ql[128], qh[64], i8 scales[16], f16 d  210 B */
    RAD_ENC_COUNT
} RadEnc;

typedef struct RadEncInfo {
    const char *name;     /* lower-case: "f32", "q4_k", ... (the .rad and CLI spelling) */
    uint32_t block_elems; /* elements per block along the innermost dim (1 for plain) */
    uint32_t block_bytes; /* bytes per block */
} RadEncInfo;

static inline const RadEncInfo *rad_enc_info(RadEnc e) {
    static const RadEncInfo t[RAD_ENC_COUNT] = {
        [RAD_ENC_F32] = {"f32", 1, 4},       [RAD_ENC_F16] = {"f16", 1, 2},
        [RAD_ENC_BF16] = {"bf16", 1, 2},     [RAD_ENC_F64] = {"f64", 1, 8},
        [RAD_ENC_I8] = {"i8", 1, 1},         [RAD_ENC_I16] = {"i16", 1, 2},
        [RAD_ENC_I32] = {"i32", 1, 4},       [RAD_ENC_I64] = {"i64", 1, 8},
        [RAD_ENC_U8] = {"u8", 1, 1},         [RAD_ENC_BOOL] = {"bool", 1, 1},
        [RAD_ENC_F8_E4M3] = {"f8_e4m3", 1, 1}, [RAD_ENC_F8_E5M2] = {"f8_e5m2", 1, 1},
        [RAD_ENC_Q8_0] = {"q8_0", 32, 34},   [RAD_ENC_Q4_0] = {"q4_0", 32, 18},
        [RAD_ENC_Q4_1] = {"q4_1", 32, 20},   [RAD_ENC_Q5_0] = {"q5_0", 32, 22},
        [RAD_ENC_Q5_1] = {"q5_1", 32, 24},   [RAD_ENC_Q4_K] = {"q4_k", 256, 144},
        [RAD_ENC_Q5_K] = {"q5_k", 256, 176}, [RAD_ENC_Q6_K] = {"q6_k", 256, 210},
    };
    return ((unsigned)e < RAD_ENC_COUNT) ? &t[e] : NULL;
}

/* Block-scaled fp8 (docs/FORMAT.md, "Block-scaled f8_e4m3"): an f8_e4m3 weight [N, K] in two
 * planes, "codes" (N·K e4m3 bytes, row-major) and "scale" (f32 [ceil(N/128)][ceil(K/128)],
 * row-major), as DeepSeek-V3 and Qwen3-FP8 checkpoints store `weight` and `weight_scale_inv`:
 *   w[n][k] = e4m3(codes[n][k]) · scale[n / 128][k / 128]   (one f32 product, rounded)
 * A one-plane f8_e4m3 tensor is the codes alone (scale 1). */
#define RAD_F8_BLOCK 128u
static inline uint64_t rad_f8_blocks(uint64_t n) { return (n + RAD_F8_BLOCK - 1) / RAD_F8_BLOCK; }
/* Bytes of the scale plane of an [n, k] block-scaled weight. */
static inline uint64_t rad_f8_scale_bytes(uint64_t n, uint64_t k) { return rad_f8_blocks(n) * rad_f8_blocks(k) * 4; }
/* The value of an e4m3 (fn: no infinities, S.1111.111 NaN) code, exactly (powers of two only:
 * no rounding anywhere; plain C and C++ alike). */
static inline float rad_f8_e4m3_value(uint8_t b) {
    const int exp = (b >> 3) & 0xf, mant = b & 7;
    float v;
    if (exp == 0xf && mant == 7) {
        v = NAN;
    } else if (exp == 0) {
        v = (float)mant * 0.001953125f; /* subnormal: mant/8 · 2^-6 = mant · 2^-9 */
    } else {
        v = (float)(8 + mant); /* (1 + mant/8) · 2^(exp-7) = (8 + mant) · 2^(exp-10) */
        for (int e = exp - 10; e > 0; e--) v *= 2.0f;
        for (int e = exp - 10; e < 0; e++) v *= 0.5f;
    }
    return (b & 0x80) ? -v : v;
}
/* Elements [k0, k0 + n) of one row of a block-scaled f8_e4m3 weight of k columns into dst:
 * e4m3(codes[j]) · srow[j / 128], one f32 product; codes is the row's start, srow its 128-row
 * block's ⌈k/128⌉ scales (NULL: the codes alone). The decoding every CPU reader shares. */
static inline void rad_f8_row_decode(const uint8_t *codes, const float *srow, uint64_t k0, uint64_t n, float *dst) {
    for (uint64_t j = k0; j < k0 + n; j++) {
        const float v = rad_f8_e4m3_value(codes[j]);
        dst[j - k0] = srow ? v * srow[j / RAD_F8_BLOCK] : v;
    }
}
/* The scales of row r of a block-scaled [*, k] weight whose scale plane is `scale` (NULL: none). */
static inline const float *rad_f8_scale_row(const float *scale, uint64_t r, uint64_t k) {
    return scale ? scale + r / RAD_F8_BLOCK * rad_f8_blocks(k) : NULL;
}

#endif
