/* encode_test.c — libcommon/tensor/rad_encode.c against its oracles (golden files written by
 * scripts/gen-encode-fixtures.py into tests/fixtures/encode/), exhaustive f16/bf16 rounding
 * checks against the definition, rad_convert_tensor, and the refusals.
 *
 * Tolerance: none. f16 must equal numpy's astype(float16) bit for bit (NaN payloads included),
 * bf16 the round-to-nearest-even definition (NaN: 0x7fc0 with the sign), q8_0 the gguf package's
 * quantize byte for byte. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/tensor/rad_enc.h"
#include "libcommon/tensor/rad_encode.h"

#include "tests/test_util.h"

#define FIX "tests/fixtures/encode/"

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static void assert_one_line(const RadErr *e) {
    cr_assert(e->msg[0], "empty message");
    cr_assert_null(strchr(e->msg, '\n'), "not one line: %s", e->msg);
}

/* values.f32 through the scalar and the bulk encoder (into an odd address), against golden. */
static void check_half(const char *golden, RadEnc enc, uint16_t (*one)(float)) {
    size_t nv, ng;
    float *v = slurp(FIX "values.f32", &nv);
    uint8_t *g = slurp(golden, &ng);
    size_t n = nv / 4;
    cr_assert_eq(ng, 2 * n);
    cr_assert_gt(n, 1000u);
    uint8_t *buf = malloc(2 * n + 1);
    RadErr e = {0};
    cr_assert_eq(rad_encode(enc, v, n, buf + 1, 2 * n, &e), RAD_OK, "%s", e.msg);
    for (size_t i = 0; i < n; i++) {
        uint16_t want = rd16(g + 2 * i);
        uint16_t got = one(v[i]);
        cr_assert_eq(got, want, "%s[%zu] %a (0x%08x): got 0x%04x, want 0x%04x", golden, i,
                     (double)v[i], f32_bits(v[i]), got, want);
        cr_assert_eq(rd16(buf + 1 + 2 * i), want, "%s[%zu]: bulk differs", golden, i);
    }
    free(buf);
    free(g);
    free(v);
}

Test(encode, f16_numpy_golden) { check_half(FIX "values.f16", RAD_ENC_F16, rad_f32_to_f16); }
Test(encode, bf16_rne_golden) { check_half(FIX "values.bf16", RAD_ENC_BF16, rad_f32_to_bf16); }

/* Every f16 value round-trips; every midpoint between neighbours (computed exactly in double)
 * rounds to the even one, and a hair either side rounds to the nearer one. */
Test(encode, f16_exhaustive) {
    for (uint32_t h = 0; h < 0x7c00; h++) {
        for (int s = 0; s < 2; s++) {
            const uint16_t hs = (uint16_t)(h | (s ? 0x8000u : 0));
            const float x = rad_f16_to_f32(hs);
            cr_assert_eq(rad_f32_to_f16(x), hs, "0x%04x round trip", hs);
            const double lo = (double)x;
            /* past 65504 the next step is 65536 (rounding's target for inf) */
            const double hi = h == 0x7bff ? (s ? -65536.0 : 65536.0)
                                          : (double)rad_f16_to_f32((uint16_t)(hs + 1));
            const double mid = (lo + hi) / 2; /* f16 + 1 ulp: exact in double, and in float */
            const float fm = (float)mid;
            cr_assert_eq((double)fm, mid);
            const uint16_t even = (h & 1) ? (uint16_t)(hs + 1) : hs;
            cr_assert_eq(rad_f32_to_f16(fm), even, "0x%04x: midpoint %a -> 0x%04x", hs, mid,
                         rad_f32_to_f16(fm));
            const float below = nextafterf(fm, (float)lo), above = nextafterf(fm, (float)hi);
            cr_assert_eq(rad_f32_to_f16(below), hs, "0x%04x: below the midpoint", hs);
            cr_assert_eq(rad_f32_to_f16(above), (uint16_t)(hs + 1), "0x%04x: above", hs);
        }
    }
    /* inf and the NaNs */
    cr_assert_eq(rad_f32_to_f16(INFINITY), 0x7c00);
    cr_assert_eq(rad_f32_to_f16(-INFINITY), 0xfc00);
    for (uint32_t m = 1; m < 0x400; m++) {
        const uint16_t h = (uint16_t)(0x7c00 | m);
        cr_assert_eq(rad_f32_to_f16(rad_f16_to_f32(h)), h, "NaN 0x%04x keeps its payload", h);
    }
    cr_assert_eq(rad_f32_to_f16(bits_f32(0x7f800001u)), 0x7c01); /* payload below f16: 1 */
    cr_assert_eq(rad_f32_to_f16(-0.0f), 0x8000);
    cr_assert_eq(rad_f32_to_f16(bits_f32(0x00000001u)), 0x0000);  /* f32 subnormal */
    cr_assert_eq(rad_f32_to_f16(bits_f32(0x80000001u)), 0x8000);
}

Test(encode, bf16_exhaustive) {
    for (uint32_t h = 0; h < 0x7f80; h++) {
        for (int s = 0; s < 2; s++) {
            const uint16_t hs = (uint16_t)(h | (s ? 0x8000u : 0));
            const float x = rad_bf16_to_f32(hs);
            cr_assert_eq(rad_f32_to_bf16(x), hs, "0x%04x round trip", hs);
            const uint32_t mid = ((uint32_t)hs << 16) | 0x8000u; /* exactly halfway */
            const uint16_t even = (h & 1) ? (uint16_t)(hs + 1) : hs;
            cr_assert_eq(rad_f32_to_bf16(bits_f32(mid)), even, "0x%04x: midpoint", hs);
            cr_assert_eq(rad_f32_to_bf16(bits_f32(mid - 1)), hs, "0x%04x: below", hs);
            cr_assert_eq(rad_f32_to_bf16(bits_f32(mid + 1)), (uint16_t)(hs + 1), "0x%04x: above",
                         hs);
        }
    }
    cr_assert_eq(rad_f32_to_bf16(INFINITY), 0x7f80);
    cr_assert_eq(rad_f32_to_bf16(-INFINITY), 0xff80);
    cr_assert_eq(rad_f32_to_bf16(bits_f32(0x7f7fffffu)), 0x7f80); /* FLT_MAX overflows */
    cr_assert_eq(rad_f32_to_bf16(bits_f32(0x7f800001u)), 0x7fc0); /* NaN stays NaN */
    cr_assert_eq(rad_f32_to_bf16(bits_f32(0xffffffffu)), 0xffc0);
    cr_assert_eq(rad_f32_to_bf16(-0.0f), 0x8000);
}

Test(encode, q8_0_gguf_golden) {
    size_t ni, nq;
    float *in = slurp(FIX "q8_0.f32", &ni);
    uint8_t *gold = slurp(FIX "q8_0.bin", &nq);
    const uint64_t n = ni / 4, nb = n / 32;
    cr_assert_eq(n % 32, 0);
    cr_assert_eq(nq, nb * 34);
    uint8_t *out = malloc(nq + 1);
    RadErr e = {0};
    cr_assert_eq(rad_encode(RAD_ENC_Q8_0, in, n, out + 1, nq, &e), RAD_OK, "%s", e.msg);
    for (uint64_t b = 0; b < nb; b++)
        for (int j = 0; j < 34; j++)
            cr_assert_eq(out[1 + b * 34 + j], gold[b * 34 + j],
                         "block %llu byte %d: got 0x%02x, want 0x%02x (x[0]=%a)",
                         (unsigned long long)b, j, out[1 + b * 34 + j], gold[b * 34 + j],
                         (double)in[b * 32]);
    free(out);
    free(gold);
    free(in);
}

/* Finite blocks decode back to within half a step (d/2, plus d's own f16 rounding). */
Test(encode, q8_0_round_trip) {
    enum { N = 32 * 40 };
    float x[N], y[N];
    uint8_t q[40 * 34];
    uint32_t s = 12345;
    for (int i = 0; i < N; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * (float)(1 + i / 32);
    }
    RadErr e = {0};
    cr_assert_eq(rad_encode(RAD_ENC_Q8_0, x, N, q, sizeof q, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_dequant(RAD_ENC_Q8_0, q, sizeof q, y, N, &e), RAD_OK, "%s", e.msg);
    for (int b = 0; b < N / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b * 32 + j]));
        const float d = amax / 127;
        for (int j = 0; j < 32; j++)
            cr_assert_leq(fabsf(y[b * 32 + j] - x[b * 32 + j]), d * 0.5f + amax * 1e-3f,
                          "block %d elem %d", b, j);
    }
}

Test(encode, f32_is_a_copy) {
    const float x[3] = {1.5f, -0.0f, NAN};
    uint8_t out[13];
    RadErr e = {0};
    cr_assert_eq(rad_encode(RAD_ENC_F32, x, 3, out + 1, 12, &e), RAD_OK);
    cr_assert_eq(memcmp(out + 1, x, 12), 0);
}

/* rad_convert_tensor: a same-encoding copy for anything; otherwise exactly encode(dequant()),
 * across several chunks. */
Test(encode, convert_tensor) {
    RadErr e = {0};
    /* same encoding: bytes pass through, even for an encoding with no encoder */
    uint8_t k[2 * 144], k2[2 * 144];
    for (size_t i = 0; i < sizeof k; i++) k[i] = (uint8_t)(i * 7 + 3);
    cr_assert_eq(rad_convert_tensor(RAD_ENC_Q4_K, RAD_ENC_Q4_K, k, sizeof k, 512, k2, sizeof k2, &e),
                 RAD_OK, "%s", e.msg);
    cr_assert_eq(memcmp(k, k2, sizeof k), 0);

    /* q4_1 -> q8_0 / f16 / bf16 / f32 over 3 chunks and a tail: n = 3 * 65536 + 5 * 32 */
    const uint64_t n = 3 * 65536 + 5 * 32, nb = n / 32;
    uint8_t *q41 = malloc(nb * 20);
    for (uint64_t b = 0; b < nb; b++) {
        uint8_t *p = q41 + b * 20;
        const uint16_t d = (uint16_t)(0x2c00 + (b % 512)), m = (uint16_t)(0xb000 + (b % 300));
        p[0] = (uint8_t)d, p[1] = (uint8_t)(d >> 8), p[2] = (uint8_t)m, p[3] = (uint8_t)(m >> 8);
        for (int j = 0; j < 16; j++) p[4 + j] = (uint8_t)(b * 31 + (uint64_t)j * 17);
    }
    float *f = malloc(n * 4);
    cr_assert_eq(rad_dequant(RAD_ENC_Q4_1, q41, nb * 20, f, n, &e), RAD_OK, "%s", e.msg);
    const RadEnc dsts[4] = {RAD_ENC_Q8_0, RAD_ENC_F16, RAD_ENC_BF16, RAD_ENC_F32};
    for (int t = 0; t < 4; t++) {
        uint64_t ob;
        cr_assert_eq(rad_enc_bytes(dsts[t], n, &ob, &e), RAD_OK);
        uint8_t *a = malloc(ob + 1), *b = malloc(ob);
        cr_assert_eq(rad_convert_tensor(dsts[t], RAD_ENC_Q4_1, q41, nb * 20, n, a + 1, ob, &e),
                     RAD_OK, "%s", e.msg);
        cr_assert_eq(rad_encode(dsts[t], f, n, b, ob, &e), RAD_OK, "%s", e.msg);
        cr_assert_eq(memcmp(a + 1, b, ob), 0, "q4_1 -> %s differs from encode(dequant())",
                     rad_enc_info(dsts[t])->name);
        free(a);
        free(b);
    }
    /* f16 -> f32 is exact; f32 -> f16 -> f32 -> f16 is stable */
    const uint8_t h[6] = {0x00, 0x3c, 0x01, 0x80, 0xff, 0x7b}; /* 1, -2^-24, 65504 */
    float o[3];
    cr_assert_eq(rad_convert_tensor(RAD_ENC_F32, RAD_ENC_F16, h, 6, 3, o, 12, &e), RAD_OK);
    cr_assert(o[0] == 1.0f && o[1] == -ldexpf(1, -24) && o[2] == 65504.0f);
    uint8_t h2[6];
    cr_assert_eq(rad_convert_tensor(RAD_ENC_F16, RAD_ENC_F32, o, 12, 3, h2, 6, &e), RAD_OK);
    cr_assert_eq(memcmp(h, h2, 6), 0);
    free(f);
    free(q41);
}

Test(encode, plan) {
    RadErr e = {0};
    uint64_t b = 0;
    const uint64_t s[3] = {2, 3, 64};
    cr_assert_eq(rad_encode_plan(RAD_ENC_Q8_0, 3, s, "w", &b, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(b, 2 * 3 * 2 * 34);
    cr_assert_eq(rad_encode_plan(RAD_ENC_BF16, 3, s, "w", &b, &e), RAD_OK);
    cr_assert_eq(b, 2 * 3 * 64 * 2);
    cr_assert_eq(rad_encode_plan(RAD_ENC_F32, 0, NULL, "scalar", &b, &e), RAD_OK);
    cr_assert_eq(b, 4);
    for (int i = 0; i < RAD_ENC_COUNT; i++)
        cr_assert_eq(rad_encode_supported((RadEnc)i),
                     i == RAD_ENC_F32 || i == RAD_ENC_F16 || i == RAD_ENC_BF16 || i == RAD_ENC_Q8_0);
}

Test(encode, refusals) {
    RadErr e = {0};
    uint64_t b;
    float x[64] = {0};
    uint8_t out[256];
    /* the innermost dim is not whole blocks: names the encoding, tensor and dim */
    const uint64_t s[2] = {4, 100};
    cr_assert_eq(rad_encode_plan(RAD_ENC_Q8_0, 2, s, "blk.0.ffn_up.weight", &b, &e), RAD_E_SHAPE);
    assert_one_line(&e);
    cr_assert(strstr(e.msg, "q8_0") && strstr(e.msg, "100") && strstr(e.msg, "blk.0.ffn_up.weight"),
              "%s", e.msg);
    rad_err_clear(&e);
    cr_assert_eq(rad_encode_plan(RAD_ENC_Q8_0, 0, NULL, "s", &b, &e), RAD_E_SHAPE);
    assert_one_line(&e);
    rad_err_clear(&e);
    cr_assert_eq(rad_encode_plan(RAD_ENC_Q4_K, 2, s, "w", &b, &e), RAD_E_UNSUPPORTED);
    cr_assert(strstr(e.msg, "q4_k"), "%s", e.msg);
    rad_err_clear(&e);
    cr_assert_eq(rad_encode_plan(RAD_ENC_F16, 9, s, "w", &b, &e), RAD_E_ARG);
    rad_err_clear(&e);
    const uint64_t big[3] = {1ull << 40, 1ull << 40, 32};
    cr_assert_eq(rad_encode_plan(RAD_ENC_F32, 3, big, "w", &b, &e), RAD_E_ARG);
    assert_one_line(&e);
    rad_err_clear(&e);
    cr_assert_eq(rad_encode_plan((RadEnc)99, 2, s, "w", &b, &e), RAD_E_UNSUPPORTED);
    rad_err_clear(&e);

    /* rad_encode */
    cr_assert_eq(rad_encode(RAD_ENC_Q8_0, x, 48, out, 34, &e), RAD_E_SHAPE);
    cr_assert(strstr(e.msg, "q8_0") && strstr(e.msg, "48"), "%s", e.msg);
    rad_err_clear(&e);
    cr_assert_eq(rad_encode(RAD_ENC_Q8_0, x, 64, out, 67, &e), RAD_E_ARG);
    assert_one_line(&e);
    rad_err_clear(&e);
    cr_assert_eq(rad_encode(RAD_ENC_F16, NULL, 4, out, 8, &e), RAD_E_ARG);
    rad_err_clear(&e);
    cr_assert_eq(rad_encode(RAD_ENC_F16, x, 4, NULL, 8, &e), RAD_E_ARG);
    rad_err_clear(&e);
    cr_assert_eq(rad_encode(RAD_ENC_Q4_0, x, 32, out, 18, &e), RAD_E_UNSUPPORTED);
    rad_err_clear(&e);
    cr_assert_eq(rad_encode(RAD_ENC_I8, x, 4, out, 4, &e), RAD_E_UNSUPPORTED);
    rad_err_clear(&e);
    cr_assert_eq(rad_encode(RAD_ENC_F16, NULL, 0, NULL, 0, &e), RAD_OK); /* nothing to do */

    /* rad_convert_tensor */
    cr_assert_eq(rad_convert_tensor(RAD_ENC_Q8_0, RAD_ENC_F32, x, 4 * 48, 48, out, 34, &e),
                 RAD_E_SHAPE);
    cr_assert(strstr(e.msg, "q8_0") && strstr(e.msg, "48"), "%s", e.msg);
    rad_err_clear(&e);
    cr_assert_eq(rad_convert_tensor(RAD_ENC_F16, RAD_ENC_F32, x, 12, 4, out, 8, &e), RAD_E_ARG);
    cr_assert(strstr(e.msg, "f32") && strstr(e.msg, "f16"), "%s", e.msg);
    rad_err_clear(&e);
    cr_assert_eq(rad_convert_tensor(RAD_ENC_F16, RAD_ENC_F32, x, 16, 4, out, 6, &e), RAD_E_ARG);
    rad_err_clear(&e);
    cr_assert_eq(rad_convert_tensor(RAD_ENC_Q6_K, RAD_ENC_F32, x, 4 * 256, 256, out, 210, &e),
                 RAD_E_UNSUPPORTED);
    rad_err_clear(&e);
    cr_assert_eq(rad_convert_tensor(RAD_ENC_F32, RAD_ENC_Q4_0, x, 18, 24, out, 96, &e),
                 RAD_E_SHAPE); /* 24 is not whole q4_0 blocks */
    rad_err_clear(&e);
    cr_assert_eq(rad_convert_tensor(RAD_ENC_F32, RAD_ENC_F16, NULL, 8, 4, out, 16, &e), RAD_E_ARG);
    assert_one_line(&e);
}
