/* xform_test.c — libcommon/tensor/rad_xform.c: each name-map transform against numpy (golden files
 * written by scripts/gen-encode-fixtures.py into tests/fixtures/encode/) or small cases worked by
 * hand, the rope un-interleave on q4_1 rows checked by dequantising both sides, the planning
 * (_shape) functions, the RadNameMap dispatcher and every refusal.
 *
 * Tolerance: none, except weight-norm (its norm is a sum whose order differs from numpy's:
 * 4 ulp). Bytewise ops must move bytes exactly; decoded outputs are rad_dequant's values, which
 * enc_test.c proves bit-identical to the gguf package's. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/tensor/rad_enc.h"
#include "libcommon/format/rad_model.h"
#include "libcommon/tensor/rad_xform.h"

#include "tests/test_util.h"

#define FIX "tests/fixtures/encode/"


/* A tensor over data; nbytes from the shape when it is valid (else 0). */
static RadXTensor xt(const char *name, RadEnc enc, uint32_t rank, const uint64_t *shape,
                     const void *data) {
    RadXTensor t;
    memset(&t, 0, sizeof t);
    t.name = name;
    t.enc = enc;
    t.rank = rank;
    for (uint32_t i = 0; i < rank && i < RAD_MAX_RANK; i++) t.shape[i] = shape[i];
    t.data = data;
    uint64_t nb = 0;
    if (rank >= 1 && rank <= RAD_MAX_RANK && rad_tensor_bytes(enc, rank, shape, NULL, &nb, name, NULL))
        nb = 0;
    t.nbytes = nb;
    return t;
}

/* n blocks of q4_1 with sane scales and varied codes. */
static uint8_t *make_q4_1(uint64_t nb, uint32_t seed) {
    uint8_t *q = malloc(nb * 20);
    for (uint64_t b = 0; b < nb; b++) {
        uint8_t *p = q + b * 20;
        const uint16_t d = (uint16_t)(0x2c00 + ((b * 37 + seed) % 512));
        const uint16_t m = (uint16_t)(0xb000 + ((b * 11 + seed) % 300));
        p[0] = (uint8_t)d, p[1] = (uint8_t)(d >> 8), p[2] = (uint8_t)m, p[3] = (uint8_t)(m >> 8);
        for (int j = 0; j < 16; j++) p[4 + j] = (uint8_t)(b * 31 + (uint64_t)j * 17 + seed);
    }
    return q;
}

static float *dequant(RadEnc enc, const void *p, uint64_t nbytes, uint64_t n) {
    float *f = malloc(n * 4 + 4);
    RadErr e = {0};
    cr_assert_eq(rad_dequant(enc, p, nbytes, f, n, &e), RAD_OK, "%s", e.msg);
    return f;
}

static void assert_f32_eq(const float *got, const float *want, uint64_t n, const char *what) {
    for (uint64_t i = 0; i < n; i++)
        cr_assert_eq(f32_bits(got[i]), f32_bits(want[i]), "%s[%llu]: got %a, want %a", what,
                     (unsigned long long)i, (double)got[i], (double)want[i]);
}

/* An op's refusal: the code, one line, and each of the fragments in the message. */
static void refused(int rc, RadErr *e, int code, const char *frag1, const char *frag2) {
    cr_assert_eq(rc, code, "want %s, got %s: %s", rad_status_name(code), rad_status_name(rc), e->msg);
    cr_assert(e->msg[0], "empty message");
    cr_assert_null(strchr(e->msg, '\n'), "not one line: %s", e->msg);
    if (frag1) cr_assert(strstr(e->msg, frag1), "'%s' not in: %s", frag1, e->msg);
    if (frag2) cr_assert(strstr(e->msg, frag2), "'%s' not in: %s", frag2, e->msg);
    rad_err_clear(e);
}

/* --- rows ------------------------------------------------------------------------------- */

Test(xform, rows_slice_plain) {
    float x[15];
    for (int i = 0; i < 15; i++) x[i] = (float)i;
    const uint64_t s[2] = {5, 3};
    RadXTensor t = xt("w", RAD_ENC_F32, 2, s, x);
    RadXShape o;
    RadErr e = {0};
    cr_assert_eq(rad_xform_rows_shape(&t, 1, 4, RAD_PERM_NONE, 0, &o, &e), RAD_OK, "%s", e.msg);
    cr_assert(o.enc == RAD_ENC_F32 && o.rank == 2 && o.shape[0] == 3 && o.shape[1] == 3);
    cr_assert(o.nbytes == 36 && o.n_elems == 9 && o.bytewise);
    uint8_t y[37];
    cr_assert_eq(rad_xform_rows(&t, 1, 4, RAD_PERM_NONE, 0, y + 1, 36, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(memcmp(y + 1, x + 3, 36), 0);
    /* end 0: to the end */
    cr_assert_eq(rad_xform_rows(&t, 3, 0, RAD_PERM_NONE, 7, y, 24, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(memcmp(y, x + 9, 24), 0);
}

Test(xform, rows_slice_q4_1) {
    const uint64_t s[2] = {6, 64}; /* 2 blocks a row: 40 bytes */
    uint8_t *q = make_q4_1(12, 5);
    RadXTensor t = xt("w", RAD_ENC_Q4_1, 2, s, q);
    cr_assert_eq(t.nbytes, 240);
    RadErr e = {0};
    uint8_t y[120];
    cr_assert_eq(rad_xform_rows(&t, 2, 5, RAD_PERM_NONE, 0, y, sizeof y, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(memcmp(y, q + 80, 120), 0);
    free(q);
}

Test(xform, rope_f32_numpy) {
    size_t ng, nh;
    float *gg = slurp(FIX "rope_gguf.f32", &ng);
    float *hf = slurp(FIX "rope_hf.f32", &nh);
    const uint64_t s[2] = {24, 5}; /* 3 heads of 8 rows */
    cr_assert_eq(ng, 24 * 5 * 4);
    RadXTensor t = xt("blk.0.attn_q.weight", RAD_ENC_F32, 2, s, gg);
    RadErr e = {0};
    float y[120];
    cr_assert_eq(rad_xform_rows(&t, 0, 0, RAD_PERM_ROPE_UNINTERLEAVE, 3, y, sizeof y, &e), RAD_OK,
                 "%s", e.msg);
    assert_f32_eq(y, hf, 120, "rope");
    /* the same rows inside a bigger tensor: the slice is taken first, then permuted */
    float big[(4 + 24 + 2) * 5];
    for (int i = 0; i < 4 * 5; i++) big[i] = -1.0f;
    memcpy(big + 20, gg, ng);
    for (int i = 0; i < 2 * 5; i++) big[140 + i] = -2.0f;
    const uint64_t sb[2] = {30, 5};
    RadXTensor tb = xt("qkv", RAD_ENC_F32, 2, sb, big);
    cr_assert_eq(rad_xform_rows(&tb, 4, 28, RAD_PERM_ROPE_UNINTERLEAVE, 3, y, sizeof y, &e), RAD_OK,
                 "%s", e.msg);
    assert_f32_eq(y, hf, 120, "rope slice");
    /* a rank-1 bias, one element a row: the formula by hand */
    float bias[24], by[24];
    for (int i = 0; i < 24; i++) bias[i] = (float)i;
    const uint64_t s1[1] = {24};
    RadXTensor tbias = xt("bias", RAD_ENC_F32, 1, s1, bias);
    cr_assert_eq(rad_xform_rows(&tbias, 0, 0, RAD_PERM_ROPE_UNINTERLEAVE, 3, by, sizeof by, &e),
                 RAD_OK, "%s", e.msg);
    for (int h = 0; h < 3; h++)
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 4; j++) cr_assert_eq(by[h * 8 + k * 4 + j], bias[h * 8 + 2 * j + k]);
    free(gg);
    free(hf);
}

/* q4_1 rows move as bytes: decoding the output equals un-permuting the decoded input, both by
 * the formula in C and against numpy's reshape/swapaxes of gguf's dequantize. */
Test(xform, rope_q4_1) {
    size_t nq, nh;
    uint8_t *q = slurp(FIX "rope_gguf.q4_1", &nq);
    float *hf = slurp(FIX "rope_q4_1_hf.f32", &nh);
    const uint64_t R = 32, C = 64, heads = 4, d = 8;
    const uint64_t s[2] = {R, C};
    cr_assert_eq(nq, R * C / 32 * 20);
    RadXTensor t = xt("blk.3.attn_k.weight", RAD_ENC_Q4_1, 2, s, q);
    RadXShape o;
    RadErr e = {0};
    cr_assert_eq(rad_xform_rows_shape(&t, 0, 0, RAD_PERM_ROPE_UNINTERLEAVE, heads, &o, &e), RAD_OK);
    cr_assert(o.enc == RAD_ENC_Q4_1 && o.bytewise && o.nbytes == nq);
    uint8_t *y = malloc(nq);
    cr_assert_eq(rad_xform_rows(&t, 0, 0, RAD_PERM_ROPE_UNINTERLEAVE, heads, y, nq, &e), RAD_OK,
                 "%s", e.msg);
    float *in = dequant(RAD_ENC_Q4_1, q, nq, R * C), *out = dequant(RAD_ENC_Q4_1, y, nq, R * C);
    for (uint64_t h = 0; h < heads; h++)
        for (uint64_t k = 0; k < 2; k++)
            for (uint64_t j = 0; j < d / 2; j++)
                assert_f32_eq(out + (h * d + k * (d / 2) + j) * C, in + (h * d + 2 * j + k) * C, C,
                              "rope q4_1 row");
    assert_f32_eq(out, hf, R * C, "rope q4_1 vs numpy");
    free(in);
    free(out);
    free(y);
    free(hf);
    free(q);
}

/* --- cols ------------------------------------------------------------------------------- */

Test(xform, cols) {
    RadErr e = {0};
    uint16_t h[18], y[9];
    for (int i = 0; i < 18; i++) h[i] = (uint16_t)(0x3c00 + i);
    const uint64_t s[2] = {3, 6};
    RadXTensor t = xt("w", RAD_ENC_F16, 2, s, h);
    RadXShape o;
    cr_assert_eq(rad_xform_cols_shape(&t, 1, 4, &o, &e), RAD_OK);
    cr_assert(o.enc == RAD_ENC_F16 && o.shape[0] == 3 && o.shape[1] == 3 && o.nbytes == 18);
    cr_assert_eq(rad_xform_cols(&t, 1, 4, y, sizeof y, &e), RAD_OK, "%s", e.msg);
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 3; c++) cr_assert_eq(y[r * 3 + c], h[r * 6 + 1 + c]);
    /* q8_0 on block boundaries, end 0 = to the end */
    const uint64_t sq[2] = {2, 96}; /* 3 blocks a row */
    uint8_t q[2 * 3 * 34], yq[2 * 2 * 34];
    for (size_t i = 0; i < sizeof q; i++) q[i] = (uint8_t)(i * 13);
    RadXTensor tq = xt("w", RAD_ENC_Q8_0, 2, sq, q);
    cr_assert_eq(rad_xform_cols(&tq, 32, 0, yq, sizeof yq, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(memcmp(yq, q + 34, 68), 0);
    cr_assert_eq(memcmp(yq + 68, q + 102 + 34, 68), 0);
}

/* --- concat ----------------------------------------------------------------------------- */

Test(xform, concat_bytewise) {
    RadErr e = {0};
    RadXShape o;
    /* axis 0, q4_0: bytes follow each other */
    uint8_t a[2 * 18], b[3 * 18], y[5 * 18];
    for (int i = 0; i < 36; i++) a[i] = (uint8_t)i;
    for (int i = 0; i < 54; i++) b[i] = (uint8_t)(200 - i);
    const uint64_t sa[2] = {2, 32}, sb[2] = {3, 32};
    RadXTensor in[2] = {xt("a", RAD_ENC_Q4_0, 2, sa, a), xt("b", RAD_ENC_Q4_0, 2, sb, b)};
    cr_assert_eq(rad_xform_concat_shape(in, 2, 0, &o, &e), RAD_OK, "%s", e.msg);
    cr_assert(o.enc == RAD_ENC_Q4_0 && o.bytewise && o.shape[0] == 5 && o.shape[1] == 32);
    cr_assert_eq(rad_xform_concat(in, 2, 0, y, sizeof y, &e), RAD_OK, "%s", e.msg);
    cr_assert(!memcmp(y, a, 36) && !memcmp(y + 36, b, 54));
    /* the innermost dim of q8_0: whole blocks per row, so still bytes; decoded it is the
     * concatenation of the decoded rows */
    uint8_t qa[2 * 34], qb[2 * 2 * 34], qy[2 * 3 * 34];
    for (size_t i = 0; i < sizeof qa; i++) qa[i] = (uint8_t)(i * 3 + 1);
    for (size_t i = 0; i < sizeof qb; i++) qb[i] = (uint8_t)(i * 5 + 2);
    qa[1] = qa[35] = qb[1] = qb[35] = qb[69] = qb[103] = 0x30; /* sane f16 scales */
    const uint64_t qsa[2] = {2, 32}, qsb[2] = {2, 64};
    RadXTensor qin[2] = {xt("a", RAD_ENC_Q8_0, 2, qsa, qa), xt("b", RAD_ENC_Q8_0, 2, qsb, qb)};
    cr_assert_eq(rad_xform_concat_shape(qin, 2, -1, &o, &e), RAD_OK, "%s", e.msg);
    cr_assert(o.enc == RAD_ENC_Q8_0 && o.bytewise && o.shape[0] == 2 && o.shape[1] == 96);
    cr_assert_eq(rad_xform_concat(qin, 2, -1, qy, sizeof qy, &e), RAD_OK, "%s", e.msg);
    float *fa = dequant(RAD_ENC_Q8_0, qa, sizeof qa, 64), *fb = dequant(RAD_ENC_Q8_0, qb, sizeof qb, 128);
    float *fy = dequant(RAD_ENC_Q8_0, qy, sizeof qy, 192);
    for (int r = 0; r < 2; r++) {
        assert_f32_eq(fy + r * 96, fa + r * 32, 32, "cat a");
        assert_f32_eq(fy + r * 96 + 32, fb + r * 64, 64, "cat b");
    }
    free(fa);
    free(fb);
    free(fy);
    /* a middle axis of rank 3, f32 by hand: [2,1,2] + [2,2,2] along 1 -> [2,3,2] */
    const float m1[4] = {1, 2, 3, 4}, m2[8] = {10, 11, 12, 13, 14, 15, 16, 17};
    const float want[12] = {1, 2, 10, 11, 12, 13, 3, 4, 14, 15, 16, 17};
    const uint64_t s1[3] = {2, 1, 2}, s2[3] = {2, 2, 2};
    RadXTensor min[2] = {xt("m1", RAD_ENC_F32, 3, s1, m1), xt("m2", RAD_ENC_F32, 3, s2, m2)};
    float my[12];
    cr_assert_eq(rad_xform_concat(min, 2, 1, my, sizeof my, &e), RAD_OK, "%s", e.msg);
    assert_f32_eq(my, want, 12, "cat axis 1");
    /* one input: a copy */
    cr_assert_eq(rad_xform_concat(min, 1, 0, my, 16, &e), RAD_OK, "%s", e.msg);
    assert_f32_eq(my, m1, 4, "cat one");
}

Test(xform, concat_mixed_numpy) {
    size_t na, nb, nw;
    void *a = slurp(FIX "cat_a.f16", &na), *b = slurp(FIX "cat_b.f32", &nb);
    float *want = slurp(FIX "cat_ab.f32", &nw);
    const uint64_t sa[2] = {3, 4}, sb[2] = {2, 4};
    RadXTensor in[2] = {xt("a", RAD_ENC_F16, 2, sa, a), xt("b", RAD_ENC_F32, 2, sb, b)};
    RadXShape o;
    RadErr e = {0};
    cr_assert_eq(rad_xform_concat_shape(in, 2, 0, &o, &e), RAD_OK, "%s", e.msg);
    cr_assert(o.enc == RAD_ENC_F32 && !o.bytewise && o.shape[0] == 5 && o.nbytes == nw);
    uint8_t y[81];
    cr_assert_eq(rad_xform_concat(in, 2, 0, y + 1, 80, &e), RAD_OK, "%s", e.msg);
    float yf[20];
    memcpy(yf, y + 1, 80);
    assert_f32_eq(yf, want, 20, "cat mixed");
    /* along the innermost dim too: [3,4] f16 + [3,32] q8_0 -> f32 [3,36] */
    uint8_t q[3 * 34];
    for (size_t i = 0; i < sizeof q; i++) q[i] = (uint8_t)(i * 7);
    q[1] = q[35] = q[69] = 0x2c;
    const uint64_t sq[2] = {3, 32};
    RadXTensor in2[2] = {xt("a", RAD_ENC_F16, 2, sa, a), xt("q", RAD_ENC_Q8_0, 2, sq, q)};
    float y2[3 * 36];
    cr_assert_eq(rad_xform_concat(in2, 2, 1, y2, sizeof y2, &e), RAD_OK, "%s", e.msg);
    float *fq = dequant(RAD_ENC_Q8_0, q, sizeof q, 96);
    for (int r = 0; r < 3; r++) {
        assert_f32_eq(y2 + r * 36, want + r * 4, 4, "cat inner f16");
        assert_f32_eq(y2 + r * 36 + 4, fq + r * 32, 32, "cat inner q8_0");
    }
    free(fq);
    free(a);
    free(b);
    free(want);
}

/* Mixed inputs larger than one decode piece (64 Ki elements): q4_1 [300, 256] + f16 [2, 256]. */
Test(xform, concat_mixed_large) {
    const uint64_t R = 300, C = 256, n = R * C;
    uint8_t *q = make_q4_1(n / 32, 3);
    uint16_t h[2 * 256];
    for (int i = 0; i < 512; i++) h[i] = (uint16_t)(0x3000 + i);
    const uint64_t sq[2] = {R, C}, sh[2] = {2, C};
    RadXTensor in[2] = {xt("q", RAD_ENC_Q4_1, 2, sq, q), xt("h", RAD_ENC_F16, 2, sh, h)};
    RadErr e = {0};
    float *y = malloc((n + 512) * 4);
    cr_assert_eq(rad_xform_concat(in, 2, 0, y, (n + 512) * 4, &e), RAD_OK, "%s", e.msg);
    float *fq = dequant(RAD_ENC_Q4_1, q, n / 32 * 20, n), *fh = dequant(RAD_ENC_F16, h, 1024, 512);
    assert_f32_eq(y, fq, n, "large q4_1");
    assert_f32_eq(y + n, fh, 512, "large f16");
    free(fq);
    free(fh);
    free(y);
    free(q);
}

/* --- transpose -------------------------------------------------------------------------- */

Test(xform, transpose_plain) {
    uint16_t x[35], y[35];
    for (int i = 0; i < 35; i++) x[i] = (uint16_t)(i * 1000 + 1);
    const uint64_t s[2] = {5, 7};
    RadXTensor t = xt("w", RAD_ENC_BF16, 2, s, x);
    RadXShape o;
    RadErr e = {0};
    cr_assert_eq(rad_xform_transpose_shape(&t, &o, &e), RAD_OK);
    cr_assert(o.enc == RAD_ENC_BF16 && o.bytewise && o.shape[0] == 7 && o.shape[1] == 5);
    cr_assert_eq(rad_xform_transpose(&t, y, sizeof y, &e), RAD_OK, "%s", e.msg);
    for (int r = 0; r < 5; r++)
        for (int c = 0; c < 7; c++) cr_assert_eq(y[c * 5 + r], x[r * 7 + c]);
    /* bigger than a tile, f64 */
    enum { R = 70, C = 45 };
    double *a = malloc(sizeof(double) * R * C), *b = malloc(sizeof(double) * R * C);
    for (int i = 0; i < R * C; i++) a[i] = i * 0.5;
    const uint64_t s2[2] = {R, C};
    RadXTensor t2 = xt("w", RAD_ENC_F64, 2, s2, a);
    cr_assert_eq(rad_xform_transpose(&t2, b, sizeof(double) * R * C, &e), RAD_OK, "%s", e.msg);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) cr_assert_eq(b[c * R + r], a[r * C + c]);
    free(a);
    free(b);
}

Test(xform, transpose_q8_0_numpy) {
    size_t nq, nw;
    uint8_t *q = slurp(FIX "tr_q8_0.bin", &nq);
    float *want = slurp(FIX "tr_q8_0_t.f32", &nw);
    const uint64_t s[2] = {4, 64};
    RadXTensor t = xt("w", RAD_ENC_Q8_0, 2, s, q);
    RadXShape o;
    RadErr e = {0};
    cr_assert_eq(rad_xform_transpose_shape(&t, &o, &e), RAD_OK);
    cr_assert(o.enc == RAD_ENC_F32 && !o.bytewise && o.shape[0] == 64 && o.shape[1] == 4);
    cr_assert_eq(o.nbytes, nw);
    uint8_t *y = malloc(nw + 1);
    cr_assert_eq(rad_xform_transpose(&t, y + 1, nw, &e), RAD_OK, "%s", e.msg);
    float *yf = malloc(nw);
    memcpy(yf, y + 1, nw);
    assert_f32_eq(yf, want, nw / 4, "transpose q8_0");
    free(yf);
    free(y);
    free(want);
    free(q);
}

/* --- tap -------------------------------------------------------------------------------- */

Test(xform, tap) {
    float x[24], y[8];
    for (int i = 0; i < 24; i++) x[i] = (float)i;
    const uint64_t s[3] = {3, 2, 4};
    RadXTensor t = xt("experts", RAD_ENC_F32, 3, s, x);
    RadXShape o;
    RadErr e = {0};
    cr_assert_eq(rad_xform_tap_shape(&t, 1, &o, &e), RAD_OK);
    cr_assert(o.rank == 2 && o.shape[0] == 2 && o.shape[1] == 4 && o.nbytes == 32 && o.bytewise);
    cr_assert_eq(rad_xform_tap(&t, 1, y, sizeof y, &e), RAD_OK, "%s", e.msg);
    assert_f32_eq(y, x + 8, 8, "tap");
    uint8_t *q = make_q4_1(6, 9), yq[40];
    const uint64_t sq[3] = {3, 2, 32};
    RadXTensor tq = xt("experts", RAD_ENC_Q4_1, 3, sq, q);
    cr_assert_eq(rad_xform_tap(&tq, 2, yq, sizeof yq, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(memcmp(yq, q + 80, 40), 0);
    free(q);
}

/* --- wnorm / ema ------------------------------------------------------------------------ */

Test(xform, wnorm_numpy) {
    size_t ng, nv, nw;
    float *g = slurp(FIX "wnorm_g.f32", &ng), *v = slurp(FIX "wnorm_v.f32", &nv);
    float *want = slurp(FIX "wnorm_w.f32", &nw);
    const uint64_t sg[3] = {6, 1, 1}, sv[3] = {6, 4, 3}, sg1[1] = {6};
    RadXTensor tg = xt("weight_g", RAD_ENC_F32, 3, sg, g), tv = xt("weight_v", RAD_ENC_F32, 3, sv, v);
    RadXShape o;
    RadErr e = {0};
    cr_assert_eq(rad_xform_wnorm_shape(&tg, &tv, &o, &e), RAD_OK, "%s", e.msg);
    cr_assert(o.enc == RAD_ENC_F32 && !o.bytewise && o.rank == 3 && o.nbytes == nw);
    float y[72];
    for (int pass = 0; pass < 2; pass++) {
        RadXTensor gg = pass ? xt("g", RAD_ENC_F32, 1, sg1, g) : tg; /* g as [6] too */
        cr_assert_eq(rad_xform_wnorm(&gg, &tv, y, sizeof y, &e), RAD_OK, "%s", e.msg);
        for (int i = 0; i < 72; i++) {
            const float tol = 4 * (nextafterf(fabsf(want[i]), INFINITY) - fabsf(want[i]));
            cr_assert_leq(fabsf(y[i] - want[i]), tol, "wnorm[%d]: got %a, want %a", i,
                          (double)y[i], (double)want[i]);
        }
    }
    /* each row's norm is |g| */
    for (int r = 0; r < 6; r++) {
        double ss = 0;
        for (int j = 0; j < 12; j++) ss += (double)y[r * 12 + j] * y[r * 12 + j];
        cr_assert_float_eq(sqrt(ss), (double)g[r], 1e-5);
    }
    free(g);
    free(v);
    free(want);
}

Test(xform, ema_numpy) {
    size_t ns, nu, nw;
    float *s = slurp(FIX "ema_sum.f32", &ns), *u = slurp(FIX "ema_usage.f32", &nu);
    float *want = slurp(FIX "ema_out.f32", &nw);
    const uint64_t ss[2] = {8, 5}, su[1] = {8};
    RadXTensor ts = xt("embed_sum", RAD_ENC_F32, 2, ss, s), tu = xt("cluster_usage", RAD_ENC_F32, 1, su, u);
    RadXShape o;
    RadErr e = {0};
    cr_assert_eq(rad_xform_ema_shape(&ts, &tu, 1e-5f, &o, &e), RAD_OK, "%s", e.msg);
    cr_assert(o.enc == RAD_ENC_F32 && o.nbytes == nw && o.shape[0] == 8 && o.shape[1] == 5);
    uint8_t y[161];
    cr_assert_eq(rad_xform_ema(&ts, &tu, 1e-5f, y + 1, 160, &e), RAD_OK, "%s", e.msg);
    float yf[40];
    memcpy(yf, y + 1, 160);
    assert_f32_eq(yf, want, 40, "ema");
    /* a NaN usage stays NaN (torch.clamp) */
    u[3] = NAN;
    cr_assert_eq(rad_xform_ema(&ts, &tu, 1e-5f, yf, 160, &e), RAD_OK, "%s", e.msg);
    for (int j = 0; j < 5; j++) cr_assert(isnan(yf[15 + j]));
    free(s);
    free(u);
    free(want);
}

/* --- the name map ------------------------------------------------------------------------ */

Test(xform, name_map) {
    RadErr e = {0};
    RadXShape o;
    float x[24], y[24];
    for (int i = 0; i < 24; i++) x[i] = (float)i;
    const uint64_t s[2] = {4, 6};
    RadXTensor t = xt("src", RAD_ENC_F32, 2, s, x);
    const char *const src1[] = {"src", NULL};

    RadNameMap copy = {.kind = RAD_MAP_COPY, .dst = "out", .src = src1};
    cr_assert_eq(rad_xform_map_shape(&copy, &t, 1, &o, &e), RAD_OK, "%s", e.msg);
    cr_assert(o.nbytes == 96 && o.bytewise);
    cr_assert_eq(rad_xform_map(&copy, &t, 1, y, 96, &e), RAD_OK, "%s", e.msg);
    assert_f32_eq(y, x, 24, "copy");

    RadNameMap rows = {.kind = RAD_MAP_ROWS, .dst = "out", .src = src1, .begin = 2};
    cr_assert_eq(rad_xform_map_shape(&rows, &t, 1, &o, &e), RAD_OK);
    cr_assert_eq(o.shape[0], 2);
    cr_assert_eq(rad_xform_map(&rows, &t, 1, y, 48, &e), RAD_OK, "%s", e.msg);
    assert_f32_eq(y, x + 12, 12, "map rows");

    RadNameMap rope = {.kind = RAD_MAP_ROWS, .dst = "out", .src = src1,
                       .perm = RAD_PERM_ROPE_UNINTERLEAVE, .heads = 1};
    cr_assert_eq(rad_xform_map(&rope, &t, 1, y, 96, &e), RAD_OK, "%s", e.msg);
    assert_f32_eq(y + 6, x + 12, 6, "map rope row 1 = in row 2");

    RadNameMap cols = {.kind = RAD_MAP_COLS, .dst = "out", .src = src1, .begin = 1, .end = 3};
    cr_assert_eq(rad_xform_map(&cols, &t, 1, y, 32, &e), RAD_OK, "%s", e.msg);
    cr_assert(y[0] == 1 && y[1] == 2 && y[2] == 7 && y[7] == 20);

    RadNameMap tr = {.kind = RAD_MAP_TRANSPOSE, .dst = "out", .src = src1};
    cr_assert_eq(rad_xform_map(&tr, &t, 1, y, 96, &e), RAD_OK, "%s", e.msg);
    cr_assert(y[1] == 6 && y[4] == 1);

    RadNameMap tap = {.kind = RAD_MAP_TAP, .dst = "out", .src = src1, .index = 3};
    cr_assert_eq(rad_xform_map(&tap, &t, 1, y, 24, &e), RAD_OK, "%s", e.msg);
    assert_f32_eq(y, x + 18, 6, "map tap");

    const char *const src2[] = {"a", "b", NULL};
    RadXTensor two[2] = {t, t};
    RadNameMap cat = {.kind = RAD_MAP_CONCAT, .dst = "out", .src = src2, .axis = 0};
    float z[48];
    cr_assert_eq(rad_xform_map(&cat, two, 2, z, sizeof z, &e), RAD_OK, "%s", e.msg);
    assert_f32_eq(z + 24, x, 24, "map cat");

    const float g[4] = {1, 2, 3, 4};
    const uint64_t sg[2] = {4, 1};
    RadXTensor gv[2] = {xt("g", RAD_ENC_F32, 2, sg, g), t};
    RadNameMap wn = {.kind = RAD_MAP_WNORM, .dst = "out", .src = src2};
    cr_assert_eq(rad_xform_map(&wn, gv, 2, y, 96, &e), RAD_OK, "%s", e.msg);
    cr_assert_float_eq(y[23], 4.0f * 23 / sqrtf(18 * 18 + 19 * 19 + 20 * 20 + 21 * 21 + 22 * 22 + 23 * 23), 1e-6);

    const float u[4] = {2, 0, 4, 8};
    const uint64_t su[1] = {4};
    RadXTensor su2[2] = {t, xt("u", RAD_ENC_F32, 1, su, u)};
    RadNameMap ema = {.kind = RAD_MAP_EMA, .dst = "out", .src = src2, .eps = 0.5f};
    cr_assert_eq(rad_xform_map(&ema, su2, 2, y, 96, &e), RAD_OK, "%s", e.msg);
    cr_assert(y[1] == 0.5f && y[6] == 12.0f && y[23] == 23.0f / 8);

    /* refusals name the declared weight */
    refused(rad_xform_map(&rows, two, 2, y, 96, &e), &e, RAD_E_ARG, "'out'", "rows");
    refused(rad_xform_map(&wn, &t, 1, y, 96, &e), &e, RAD_E_ARG, "'out'", "2 sources");
    refused(rad_xform_map_shape(&cat, two, 0, &o, &e), &e, RAD_E_ARG, "'out'", "concat");
    RadNameMap bad = {.kind = (RadMapKind)42, .dst = "out", .src = src1};
    refused(rad_xform_map(&bad, &t, 1, y, 96, &e), &e, RAD_E_ARG, "'out'", "42");
    RadNameMap far = {.kind = RAD_MAP_ROWS, .dst = "blk.0.attn_q.weight", .src = src1, .end = 9};
    refused(rad_xform_map(&far, &t, 1, y, 96, &e), &e, RAD_E_SHAPE, "blk.0.attn_q.weight", "[0, 9)");
}

/* COPY with add (Gemma's Hugging Face norm gammas: w stored, 1 + w applied): decoded to f32 and
 * added there, as torch's `1.0 + w.float()`; f32, bf16 and a q8_0 block alike, never bytewise. A
 * non-finite add, or one on another kind, is refused naming the weight. */
Test(xform, copy_add_one) {
    RadErr e = {0};
    RadXShape o;
    const char *const src1[] = {"w", NULL};
    RadNameMap plus = {.kind = RAD_MAP_COPY, .dst = "blk.0.attn_norm.weight", .src = src1, .add = 1.0f};
    /* f32: 1 + w rounded once in f32 (1 + 2^-30 is 1; 1 + 0.1f is the f32 nearest to their sum) */
    const float x[4] = {0.0f, -1.0f, 0x1p-30f, 0.1f};
    const uint64_t s4[1] = {4};
    RadXTensor t = xt("w", RAD_ENC_F32, 1, s4, x);
    float y[32];
    cr_assert_eq(rad_xform_map_shape(&plus, &t, 1, &o, &e), RAD_OK, "%s", e.msg);
    cr_assert(o.enc == RAD_ENC_F32 && !o.bytewise && o.nbytes == 16 && o.rank == 1 && o.shape[0] == 4);
    cr_assert_eq(rad_xform_map(&plus, &t, 1, y, 16, &e), RAD_OK, "%s", e.msg);
    cr_assert(y[0] == 1.0f && y[1] == 0.0f && y[2] == 1.0f && y[3] == 1.0f + 0.1f, "%a %a %a %a", y[0], y[1], y[2], y[3]);
    /* bf16 widens exactly, then the add: 0x3dcd is 0.10009765625, 0xbf80 is -1 */
    const uint16_t h[2] = {0x3dcd, 0xbf80};
    const uint64_t s2[1] = {2};
    RadXTensor tb = xt("w", RAD_ENC_BF16, 1, s2, h);
    cr_assert_eq(rad_xform_map_shape(&plus, &tb, 1, &o, &e), RAD_OK, "%s", e.msg);
    cr_assert(o.enc == RAD_ENC_F32 && o.nbytes == 8);
    cr_assert_eq(rad_xform_map(&plus, &tb, 1, y, 8, &e), RAD_OK, "%s", e.msg);
    cr_assert(y[0] == 1.10009765625f && y[1] == 0.0f, "%a %a", y[0], y[1]);
    /* a q8_0 block: d = 0.5 (f16 0x3800), codes -3..28 -> 1 + 0.5 * q */
    uint8_t q[34] = {0x00, 0x38};
    for (int i = 0; i < 32; i++) q[2 + i] = (uint8_t)(int8_t)(i - 3);
    const uint64_t s32[1] = {32};
    RadXTensor tq = xt("w", RAD_ENC_Q8_0, 1, s32, q);
    cr_assert_eq(rad_xform_map_shape(&plus, &tq, 1, &o, &e), RAD_OK, "%s", e.msg);
    cr_assert(o.enc == RAD_ENC_F32 && o.nbytes == 128);
    cr_assert_eq(rad_xform_map(&plus, &tq, 1, y, 128, &e), RAD_OK, "%s", e.msg);
    for (int i = 0; i < 32; i++) cr_assert_eq(y[i], 1.0f + 0.5f * (float)(i - 3), "element %d: %g", i, y[i]);
    /* refusals */
    refused(rad_xform_map(&plus, &t, 1, y, 12, &e), &e, RAD_E_ARG, "blk.0.attn_norm.weight", "16 bytes");
    RadNameMap rows = {.kind = RAD_MAP_ROWS, .dst = "blk.0.attn_norm.weight", .src = src1, .add = 1.0f};
    refused(rad_xform_map_shape(&rows, &t, 1, &o, &e), &e, RAD_E_ARG, "blk.0.attn_norm.weight", "COPY");
    RadNameMap nan = {.kind = RAD_MAP_COPY, .dst = "blk.0.attn_norm.weight", .src = src1, .add = NAN};
    refused(rad_xform_map_shape(&nan, &t, 1, &o, &e), &e, RAD_E_ARG, "blk.0.attn_norm.weight", "finite");
}

/* --- refusals --------------------------------------------------------------------------- */

Test(xform, refusals) {
    RadErr e = {0};
    RadXShape o;
    float x[64] = {0};
    uint8_t y[512];
    const uint64_t s[2] = {4, 16};
    RadXTensor t = xt("w", RAD_ENC_F32, 2, s, x);

    /* input descriptions */
    RadXTensor bad = t;
    bad.enc = (RadEnc)77;
    refused(rad_xform_rows_shape(&bad, 0, 0, RAD_PERM_NONE, 0, &o, &e), &e, RAD_E_ARG, "rows", "77");
    bad = t;
    bad.rank = 0;
    refused(rad_xform_tap_shape(&bad, 0, &o, &e), &e, RAD_E_ARG, "tap", "rank 0");
    bad.rank = 9;
    refused(rad_xform_cols_shape(&bad, 0, 0, &o, &e), &e, RAD_E_ARG, "cols", "rank 9");
    const uint64_t sq[2] = {4, 40};
    RadXTensor q = xt("q", RAD_ENC_Q8_0, 2, sq, x);
    refused(rad_xform_rows_shape(&q, 0, 0, RAD_PERM_NONE, 0, &o, &e), &e, RAD_E_SHAPE, "innermost dim 40", "q8_0");
    const uint64_t huge[3] = {1ull << 40, 1ull << 40, 64};
    RadXTensor hg = xt("h", RAD_ENC_F32, 3, huge, x);
    refused(rad_xform_tap_shape(&hg, 0, &o, &e), &e, RAD_E_ARG, "tap", "overflows");
    bad = t;
    bad.nbytes = 255;
    refused(rad_xform_rows(&bad, 0, 0, RAD_PERM_NONE, 0, y, 256, &e), &e, RAD_E_ARG, "256", "255");
    bad = t;
    bad.data = NULL;
    refused(rad_xform_transpose(&bad, y, 256, &e), &e, RAD_E_ARG, "transpose", "NULL");
    refused(rad_xform_rows(&t, 0, 0, RAD_PERM_NONE, 0, y, 128, &e), &e, RAD_E_ARG, "256", "128");
    refused(rad_xform_rows(&t, 0, 0, RAD_PERM_NONE, 0, NULL, 256, &e), &e, RAD_E_ARG, "rows", "NULL");

    /* rows */
    refused(rad_xform_rows_shape(&t, 2, 5, RAD_PERM_NONE, 0, &o, &e), &e, RAD_E_SHAPE, "[2, 5)", "4 rows");
    refused(rad_xform_rows_shape(&t, 3, 3, RAD_PERM_NONE, 0, &o, &e), &e, RAD_E_ARG, "rows", "empty");
    refused(rad_xform_rows_shape(&t, 4, 0, RAD_PERM_NONE, 0, &o, &e), &e, RAD_E_ARG, "rows", "[4, 4)");
    refused(rad_xform_rows_shape(&t, 0, 0, RAD_PERM_ROPE_UNINTERLEAVE, 0, &o, &e), &e, RAD_E_ARG, "rows", "0 heads");
    refused(rad_xform_rows_shape(&t, 0, 0, RAD_PERM_ROPE_UNINTERLEAVE, 3, &o, &e), &e, RAD_E_SHAPE, "4 rows", "3 heads");
    refused(rad_xform_rows_shape(&t, 0, 0, RAD_PERM_ROPE_UNINTERLEAVE, 4, &o, &e), &e, RAD_E_SHAPE, "4 heads", "even");
    refused(rad_xform_rows_shape(&t, 0, 0, (RadRowPerm)9, 1, &o, &e), &e, RAD_E_ARG, "rows", "permutation 9");
    const uint64_t s1[1] = {64};
    RadXTensor q1 = xt("q1", RAD_ENC_Q8_0, 1, s1, x);
    refused(rad_xform_rows_shape(&q1, 0, 0, RAD_PERM_NONE, 0, &o, &e), &e, RAD_E_SHAPE, "rank-1", "q8_0");

    /* cols */
    refused(rad_xform_cols_shape(&t, 8, 17, &o, &e), &e, RAD_E_SHAPE, "cols", "[8, 17)");
    refused(rad_xform_cols_shape(&t, 16, 0, &o, &e), &e, RAD_E_ARG, "cols", "empty");
    const uint64_t sq2[2] = {2, 64};
    RadXTensor q2 = xt("q2", RAD_ENC_Q8_0, 2, sq2, x);
    refused(rad_xform_cols_shape(&q2, 16, 64, &o, &e), &e, RAD_E_SHAPE, "[16, 64)", "block");
    refused(rad_xform_cols_shape(&q2, 0, 48, &o, &e), &e, RAD_E_SHAPE, "[0, 48)", "q8_0");

    /* concat */
    refused(rad_xform_concat_shape(&t, 0, 0, &o, &e), &e, RAD_E_ARG, "concat", "no inputs");
    const uint64_t s3[3] = {4, 16, 1}, s4[2] = {4, 8};
    RadXTensor c2[2] = {t, xt("r3", RAD_ENC_F32, 3, s3, x)};
    refused(rad_xform_concat_shape(c2, 2, 0, &o, &e), &e, RAD_E_SHAPE, "rank 3", "rank 2");
    c2[1] = xt("narrow", RAD_ENC_F32, 2, s4, x);
    refused(rad_xform_concat_shape(c2, 2, 0, &o, &e), &e, RAD_E_SHAPE, "dim 1", "8 vs 16");
    cr_assert_eq(rad_xform_concat_shape(c2, 2, 1, &o, &e), RAD_OK, "%s", e.msg); /* fine along 1 */
    refused(rad_xform_concat_shape(c2, 2, 2, &o, &e), &e, RAD_E_ARG, "axis 2", "rank-2");
    refused(rad_xform_concat_shape(c2, 2, -3, &o, &e), &e, RAD_E_ARG, "axis -3", "concat");
    const uint64_t sh1[2] = {UINT64_MAX / 2, 0}, sh2[2] = {UINT64_MAX / 2 + 2, 0};
    RadXTensor ov[2] = {xt("o1", RAD_ENC_F32, 2, sh1, x), xt("o2", RAD_ENC_F32, 2, sh2, x)};
    refused(rad_xform_concat_shape(ov, 2, 0, &o, &e), &e, RAD_E_ARG, "concat", "overflows");

    /* transpose */
    RadXTensor r3 = xt("r3", RAD_ENC_F32, 3, s3, x);
    refused(rad_xform_transpose_shape(&r3, &o, &e), &e, RAD_E_SHAPE, "transpose", "rank 3");

    /* tap */
    RadXTensor v1 = xt("v1", RAD_ENC_F32, 1, s1, x);
    refused(rad_xform_tap_shape(&v1, 0, &o, &e), &e, RAD_E_SHAPE, "tap", "rank 1");
    refused(rad_xform_tap_shape(&t, -1, &o, &e), &e, RAD_E_ARG, "tap", "-1");
    refused(rad_xform_tap_shape(&t, 4, &o, &e), &e, RAD_E_SHAPE, "index 4", "(4)");

    /* wnorm */
    const uint64_t sg_bad[2] = {3, 1}, sg_wide[2] = {4, 2};
    RadXTensor g3 = xt("g", RAD_ENC_F32, 2, sg_bad, x), g42 = xt("g", RAD_ENC_F32, 2, sg_wide, x);
    refused(rad_xform_wnorm_shape(&g3, &t, &o, &e), &e, RAD_E_SHAPE, "wnorm", "4 rows");
    refused(rad_xform_wnorm_shape(&g42, &t, &o, &e), &e, RAD_E_SHAPE, "wnorm", "[4x2 f32]");
    refused(rad_xform_wnorm_shape(&v1, &v1, &o, &e), &e, RAD_E_SHAPE, "wnorm", "rank 1");

    /* ema */
    const uint64_t su3[1] = {3};
    RadXTensor u3 = xt("usage", RAD_ENC_F32, 1, su3, x);
    refused(rad_xform_ema_shape(&t, &u3, 1e-5f, &o, &e), &e, RAD_E_SHAPE, "ema", "usage");
    const uint64_t su4[1] = {4};
    RadXTensor u4 = xt("usage", RAD_ENC_F32, 1, su4, x);
    refused(rad_xform_ema_shape(&t, &u4, NAN, &o, &e), &e, RAD_E_ARG, "ema", "NaN");
    refused(rad_xform_ema_shape(&v1, &u4, 1e-5f, &o, &e), &e, RAD_E_SHAPE, "ema", "rank 1");
}

/* rad_xtensor_of takes a RadModelFile tensor's description. */
Test(xform, xtensor_of) {
    RadTensor t;
    memset(&t, 0, sizeof t);
    char name[] = "blk.0.attn_q.weight";
    t.name = name;
    t.enc = RAD_ENC_Q4_1;
    t.rank = 2;
    t.shape[0] = 576;
    t.shape[1] = 576;
    uint8_t b = 0;
    RadXTensor x = rad_xtensor_of(&t, &b, 576 * 18 * 20);
    cr_assert(x.name == name && x.enc == RAD_ENC_Q4_1 && x.rank == 2 && x.shape[1] == 576);
    cr_assert(x.data == &b && x.nbytes == 576 * 18 * 20);
}
