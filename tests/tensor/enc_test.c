/* enc_test.c — libcommon/tensor/rad_enc.c against the gguf Python package's dequantize (golden files
 * written by scripts/gen-gguf-fixtures.py into tests/fixtures/gguf/), plus exhaustive f16
 * checks and the refusals.
 *
 * Tolerance: none. rad_enc.c performs GGML's float operations in GGML's order ((d*sc)*q - dmin*m
 * for the K formats, q*d + m for q4_1/q5_1), and numpy evaluates the same float32 expressions
 * element-wise in the same order, with correctly rounded float32 arithmetic on both sides and
 * no FMA contraction in rad_enc.c (products are stored before they are added). So every output
 * must be bit-identical; NaN inputs must give NaN. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/tensor/rad_enc.h"

#include "tests/test_util.h"

#define FIX "tests/fixtures/gguf/"


/* Dequantises quant_<name>.bin and compares with quant_<name>.f32, bit for bit. */
static void check_golden(const char *name, RadEnc enc) {
    char p[256];
    size_t nb, ng;
    snprintf(p, sizeof p, FIX "quant_%s.bin", name);
    uint8_t *src = slurp(p, &nb);
    snprintf(p, sizeof p, FIX "quant_%s.f32", name);
    uint8_t *gold = slurp(p, &ng);
    cr_assert_eq(ng % 4, 0);
    uint64_t n = ng / 4;
    const RadEncInfo *ei = rad_enc_info(enc);
    cr_assert_eq(n % ei->block_elems, 0);
    cr_assert_eq(nb, n / ei->block_elems * ei->block_bytes, "%s: %zu bytes for %llu elems", name,
                 nb, (unsigned long long)n);
    /* decode from an odd address too: src may have any alignment */
    uint8_t *odd = malloc(nb + 1);
    memcpy(odd + 1, src, nb);
    float *out = malloc(n * sizeof *out);
    for (int pass = 0; pass < 2; pass++) {
        RadErr e = {0};
        memset(out, 0xAB, n * sizeof *out);
        int rc = rad_dequant(enc, pass ? odd + 1 : src, nb, out, n, &e);
        cr_assert_eq(rc, RAD_OK, "%s: %s", name, e.msg);
        for (uint64_t i = 0; i < n; i++) {
            float g;
            memcpy(&g, gold + 4 * i, 4);
            if (isnan(g)) {
                cr_assert(isnan(out[i]), "%s[%llu]: want NaN, got %a", name, (unsigned long long)i,
                          (double)out[i]);
                continue;
            }
            cr_assert_eq(f32_bits(out[i]), f32_bits(g), "%s[%llu]: got %a (0x%08x), want %a (0x%08x)",
                         name, (unsigned long long)i, (double)out[i], f32_bits(out[i]), (double)g,
                         f32_bits(g));
        }
    }
    free(out);
    free(odd);
    free(src);
    free(gold);
}

Test(quant, golden_f32) { check_golden("f32", RAD_ENC_F32); }
Test(quant, golden_f16) { check_golden("f16", RAD_ENC_F16); }
Test(quant, golden_bf16) { check_golden("bf16", RAD_ENC_BF16); }
Test(quant, golden_f64) { check_golden("f64", RAD_ENC_F64); }
Test(quant, golden_q8_0) { check_golden("q8_0", RAD_ENC_Q8_0); }
Test(quant, golden_q4_0) { check_golden("q4_0", RAD_ENC_Q4_0); }
Test(quant, golden_q4_1) { check_golden("q4_1", RAD_ENC_Q4_1); }
Test(quant, golden_q5_0) { check_golden("q5_0", RAD_ENC_Q5_0); }
Test(quant, golden_q5_1) { check_golden("q5_1", RAD_ENC_Q5_1); }
Test(quant, golden_q4_k) { check_golden("q4_k", RAD_ENC_Q4_K); }
Test(quant, golden_q5_k) { check_golden("q5_k", RAD_ENC_Q5_K); }
Test(quant, golden_q6_k) { check_golden("q6_k", RAD_ENC_Q6_K); }

/* Every f16 bit pattern against the definition, computed in double with ldexp. */
Test(quant, f16_exhaustive) {
    for (uint32_t h = 0; h < 0x10000; h++) {
        float got = rad_f16_to_f32((uint16_t)h);
        int s = h >> 15, ex = (h >> 10) & 31, m = h & 1023;
        if (ex == 31) {
            if (m == 0) cr_assert(isinf(got) && (signbit(got) != 0) == s, "0x%04x", h);
            else {
                cr_assert(isnan(got), "0x%04x", h);
                /* payload kept: f32 mantissa = f16 mantissa << 13 */
                cr_assert_eq(f32_bits(got) & 0x7fffffu, (uint32_t)m << 13, "0x%04x", h);
            }
            continue;
        }
        double want = ex == 0 ? ldexp((double)m, -24) : ldexp(1024.0 + m, ex - 25);
        if (s) want = -want;
        cr_assert_eq((double)got, want, "0x%04x: got %a, want %a", h, (double)got, want);
        cr_assert_eq(signbit(got) != 0, s != 0, "0x%04x: sign", h); /* -0 stays -0 */
    }
}

Test(quant, bf16_and_fp8) {
    cr_assert_eq(rad_bf16_to_f32(0x3f80), 1.0f);
    cr_assert_eq(rad_bf16_to_f32(0xc040), -3.0f);
    cr_assert(isinf(rad_bf16_to_f32(0x7f80)));
    cr_assert(isnan(rad_bf16_to_f32(0x7fc1)));
    cr_assert_eq(rad_bf16_to_f32(0x0001), ldexpf(1.0f, -133)); /* smallest subnormal */
    /* e4m3fn: bias 7, max 448, no inf, 0x7f NaN */
    cr_assert_eq(rad_f8e4m3_to_f32(0x38), 1.0f);
    cr_assert_eq(rad_f8e4m3_to_f32(0x7e), 448.0f);
    cr_assert_eq(rad_f8e4m3_to_f32(0xfe), -448.0f);
    cr_assert_eq(rad_f8e4m3_to_f32(0x01), ldexpf(1.0f, -9));
    cr_assert_eq(rad_f8e4m3_to_f32(0x08), ldexpf(1.0f, -6));
    cr_assert_eq(rad_f8e4m3_to_f32(0x78), 256.0f);
    cr_assert(isnan(rad_f8e4m3_to_f32(0x7f)) && isnan(rad_f8e4m3_to_f32(0xff)));
    /* e5m2: an f16's top byte */
    cr_assert_eq(rad_f8e5m2_to_f32(0x3c), 1.0f);
    cr_assert_eq(rad_f8e5m2_to_f32(0x7b), 57344.0f);
    cr_assert_eq(rad_f8e5m2_to_f32(0x01), ldexpf(1.0f, -16));
    cr_assert(isinf(rad_f8e5m2_to_f32(0x7c)) && isnan(rad_f8e5m2_to_f32(0x7d)));
}

Test(quant, integers_and_bool) {
    RadErr e = {0};
    float out[4];
    const uint8_t i8[4] = {0x80, 0xff, 0, 127};
    cr_assert_eq(rad_dequant(RAD_ENC_I8, i8, 4, out, 4, &e), RAD_OK);
    cr_assert(out[0] == -128 && out[1] == -1 && out[2] == 0 && out[3] == 127);
    cr_assert_eq(rad_dequant(RAD_ENC_U8, i8, 4, out, 4, &e), RAD_OK);
    cr_assert(out[0] == 128 && out[1] == 255 && out[3] == 127);
    const uint8_t b[3] = {0, 1, 7};
    cr_assert_eq(rad_dequant(RAD_ENC_BOOL, b, 3, out, 3, &e), RAD_OK);
    cr_assert(out[0] == 0 && out[1] == 1 && out[2] == 1);
    const uint8_t i16[4] = {0x00, 0x80, 0x34, 0x12};
    cr_assert_eq(rad_dequant(RAD_ENC_I16, i16, 4, out, 2, &e), RAD_OK);
    cr_assert(out[0] == -32768 && out[1] == 0x1234);
    const uint8_t i32[8] = {0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x80};
    cr_assert_eq(rad_dequant(RAD_ENC_I32, i32, 8, out, 2, &e), RAD_OK);
    cr_assert(out[0] == -1 && out[1] == -2147483648.0f);
    const uint8_t i64[8] = {0x01, 0, 0, 0, 0, 0, 0x20, 0}; /* 2^53 + 1 rounds to 2^53 */
    cr_assert_eq(rad_dequant(RAD_ENC_I64, i64, 8, out, 1, &e), RAD_OK);
    cr_assert_eq(out[0], 9007199254740992.0f);
    const uint8_t e4[2] = {0x38, 0xb8};
    cr_assert_eq(rad_dequant(RAD_ENC_F8_E4M3, e4, 2, out, 2, &e), RAD_OK);
    cr_assert(out[0] == 1.0f && out[1] == -1.0f);
    cr_assert_eq(rad_dequant(RAD_ENC_F8_E5M2, e4, 2, out, 2, &e), RAD_OK);
    cr_assert(out[0] == 0.5f && out[1] == -0.5f);
}

/* Hand-built blocks whose values are known exactly. */
Test(quant, known_blocks) {
    RadErr e = {0};
    float out[256];
    uint8_t q8[34] = {0x00, 0x3c}; /* d = 1.0 */
    for (int i = 0; i < 32; i++) q8[2 + i] = (uint8_t)(int8_t)(i - 16);
    cr_assert_eq(rad_dequant(RAD_ENC_Q8_0, q8, 34, out, 32, &e), RAD_OK);
    for (int i = 0; i < 32; i++) cr_assert_eq(out[i], (float)(i - 16));
    /* q4_1: d = 0.5, m = -2; low nibbles are elements 0..15, high nibbles 16..31 */
    uint8_t q41[20] = {0x00, 0x38, 0x00, 0xc0};
    for (int i = 0; i < 16; i++) q41[4 + i] = (uint8_t)(i | ((15 - i) << 4));
    cr_assert_eq(rad_dequant(RAD_ENC_Q4_1, q41, 20, out, 32, &e), RAD_OK);
    for (int i = 0; i < 16; i++) {
        cr_assert_eq(out[i], 0.5f * i - 2.0f);
        cr_assert_eq(out[16 + i], 0.5f * (15 - i) - 2.0f);
    }
    /* q5_0: d = 1; qh bit j is the 5th bit of element j */
    uint8_t q50[22] = {0x00, 0x3c, 0x01, 0x00, 0x01, 0x80};
    memset(q50 + 6, 0x00, 16);
    cr_assert_eq(rad_dequant(RAD_ENC_Q5_0, q50, 22, out, 32, &e), RAD_OK);
    cr_assert_eq(out[0], 0.0f);   /* 16 - 16 */
    cr_assert_eq(out[1], -16.0f); /* 0 - 16 */
    cr_assert_eq(out[16], 0.0f);  /* bit 16 */
    cr_assert_eq(out[31], 0.0f);  /* bit 31 */
    cr_assert_eq(out[30], -16.0f);
    /* q6_k: all-zero codes are -32; scales[0] = 1, d = 1 */
    uint8_t q6[210] = {0};
    q6[192] = 1;
    q6[208] = 0x00;
    q6[209] = 0x3c;
    cr_assert_eq(rad_dequant(RAD_ENC_Q6_K, q6, 210, out, 256, &e), RAD_OK);
    for (int i = 0; i < 16; i++) cr_assert_eq(out[i], -32.0f);
    cr_assert_eq(out[16], -0.0f); /* scales[1] == 0 */
}

Test(quant, refusals) {
    RadErr e = {0};
    float out[64];
    uint8_t buf[512] = {0};
    cr_assert_eq(rad_dequant(RAD_ENC_Q4_K, buf, 144, out, 255, &e), RAD_E_SHAPE);
    cr_assert(strstr(e.msg, "q4_k") && strstr(e.msg, "255"), "%s", e.msg);
    rad_err_clear(&e);
    cr_assert_eq(rad_dequant(RAD_ENC_Q8_0, buf, 33, out, 32, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "q8_0") && strstr(e.msg, "34") && strstr(e.msg, "33"), "%s", e.msg);
    rad_err_clear(&e);
    cr_assert_eq(rad_dequant(RAD_ENC_F32, buf, 12, out, 4, &e), RAD_E_FORMAT);
    rad_err_clear(&e);
    cr_assert_eq(rad_dequant((RadEnc)99, buf, 4, out, 1, &e), RAD_E_UNSUPPORTED);
    cr_assert(strstr(e.msg, "99"), "%s", e.msg);
    rad_err_clear(&e);
    cr_assert_eq(rad_dequant(RAD_ENC_Q4_0, NULL, 18, out, 32, &e), RAD_E_ARG);
    rad_err_clear(&e);
    cr_assert_eq(rad_dequant(RAD_ENC_Q4_0, NULL, 0, NULL, 0, &e), RAD_OK);
    /* a byte count that overflows u64 */
    uint64_t nb;
    cr_assert_eq(rad_enc_bytes(RAD_ENC_Q8_0, UINT64_MAX - 31, &nb, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "overflow"), "%s", e.msg);
    rad_err_clear(&e);
    cr_assert_eq(rad_enc_bytes(RAD_ENC_Q6_K, 512, &nb, &e), RAD_OK);
    cr_assert_eq(nb, 420);
    cr_assert_eq(rad_enc_bytes(RAD_ENC_BF16, 3, &nb, &e), RAD_OK);
    cr_assert_eq(nb, 6);
    cr_assert(!strchr(e.msg, '\n'));
}
