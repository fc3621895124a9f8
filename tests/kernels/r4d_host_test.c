/* r4d_host_test.c — libr4d's logic that runs on the host, checked on a machine without a GPU:
 * the decoding of every weight encoding the kernels read (kernels/r4d/r4d_decode.h, the same
 * source the device compiles) against rad_dequant bit for bit; bf16 rounding against
 * rad_f32_to_bf16 (what rad-convert writes); the load-time bf16 packing; the GEMM buckets, slabs
 * and plan cache; the decode-graph keys; the attention's split plan; the step image the attention
 * kernels read (rows' slots, window starts, the block table, and the refusals before anything is
 * uploaded); rope's frequency table against docs/OPS.md's worked values. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/r4d/r4d_decode.h"
#include "kernels/r4d/r4d_host.h"
#include "libcommon/tensor/rad_enc.h"
#include "libcommon/tensor/rad_encode.h"
#include "tests/test_util.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
/* A random block of enc whose f16 scales are finite and of ordinary size (random bytes would
 * make NaN scales, where bit equality says nothing). */
static void random_block(RadEnc enc, uint8_t *b) {
    const RadEncInfo *ei = rad_enc_info(enc);
    for (uint32_t i = 0; i < ei->block_bytes; i++) b[i] = (uint8_t)rnd();
    const uint16_t h1 = (uint16_t)(0x2000 + rnd() % 0x2000) | (uint16_t)(rnd() & 0x8000); /* ~2^-7 .. 2^-3 */
    const uint16_t h2 = (uint16_t)(0x2000 + rnd() % 0x2000) | (uint16_t)(rnd() & 0x8000);
    if (enc == RAD_ENC_Q6_K) {
        memcpy(b + 208, &h1, 2);
        return;
    }
    memcpy(b, &h1, 2); /* d first; the second half the m or dmin where the format has one */
    if (enc == RAD_ENC_Q4_1 || enc == RAD_ENC_Q5_1 || enc == RAD_ENC_Q4_K || enc == RAD_ENC_Q5_K) memcpy(b + 2, &h2, 2);
}

static const RadEnc GGML[] = {RAD_ENC_Q8_0, RAD_ENC_Q4_0, RAD_ENC_Q4_1, RAD_ENC_Q5_0,
                              RAD_ENC_Q5_1, RAD_ENC_Q4_K, RAD_ENC_Q5_K, RAD_ENC_Q6_K};

Test(r4d_decode, every_ggml_group_is_rad_dequant_bit_for_bit) {
    test_deadline(60);
    for (size_t e = 0; e < sizeof GGML / sizeof *GGML; e++) {
        const RadEnc enc = GGML[e];
        const RadEncInfo *ei = rad_enc_info(enc);
        enum { BLOCKS = 6 };
        uint8_t row[BLOCKS * 210];
        for (int trial = 0; trial < 200; trial++) {
            for (int b = 0; b < BLOCKS; b++) random_block(enc, row + b * ei->block_bytes);
            const uint64_t n = (uint64_t)BLOCKS * ei->block_elems;
            float ref[BLOCKS * 256];
            cr_assert_eq(rad_dequant(enc, row, (uint64_t)BLOCKS * ei->block_bytes, ref, n, NULL), RAD_OK);
            for (int64_t g = 0; g < (int64_t)(n / 32); g++) {
                float y[32];
                cr_assert_eq(r4d_dec_group((int)enc, row, g, y), 0);
                int c[32];
                float s0, s1, bias;
                cr_assert_eq(r4d_dec_codes((int)enc, row, g, c, &s0, &s1, &bias), 0);
                for (int j = 0; j < 32; j++) {
                    cr_assert_eq(f32_bits(y[j]), f32_bits(ref[g * 32 + j]), "%s group %ld element %d: %a, rad_dequant %a",
                                 ei->name, (long)g, j, (double)y[j], (double)ref[g * 32 + j]);
                    /* what the q8 GEMV's integer codes mean is the same weight, bit for bit */
                    const int has_bias = enc == RAD_ENC_Q4_1 || enc == RAD_ENC_Q5_1 || enc == RAD_ENC_Q4_K || enc == RAD_ENC_Q5_K;
                    const float p = (j < 16 ? s0 : s1) * (float)c[j], w = has_bias ? p + bias : p; /* -0 + 0 would be +0 */
                    cr_assert_eq(f32_bits(w), f32_bits(ref[g * 32 + j]), "%s group %ld element %d: codes give %a, rad_dequant %a",
                                 ei->name, (long)g, j, (double)w, (double)ref[g * 32 + j]);
                    cr_assert(c[j] >= -128 && c[j] <= 127, "%s: code %d out of i8", ei->name, c[j]);
                }
            }
        }
    }
    float y[32];
    cr_assert_eq(r4d_dec_group(RAD_ENC_F32, (const uint8_t *)"", 0, y), -1, "a plain float is not a GGML group");
}

Test(r4d_decode, f16_bf16_and_plain_rows_are_exact) {
    for (uint32_t h = 0; h < 65536; h++) {
        cr_assert_eq(f32_bits(r4d_dec_f16((uint16_t)h)), f32_bits(rad_f16_to_f32((uint16_t)h)), "f16 %04x", h);
        cr_assert_eq(f32_bits(r4d_dec_bf16((uint16_t)h)), f32_bits(rad_bf16_to_f32((uint16_t)h)), "bf16 %04x", h);
    }
    const uint16_t hrow[3] = {0x3c00, 0xc000, 0x7e01};
    const float frow[2] = {1.5f, -0.25f};
    cr_assert_eq(r4d_dec_plain(RAD_ENC_F16, (const uint8_t *)hrow, 1), -2.0f);
    cr_assert_eq(f32_bits(r4d_dec_plain(RAD_ENC_F16, (const uint8_t *)hrow, 2)), f32_bits(rad_f16_to_f32(0x7e01)), "NaN payload kept");
    cr_assert_eq(r4d_dec_plain(RAD_ENC_BF16, (const uint8_t *)hrow, 0), rad_bf16_to_f32(0x3c00));
    cr_assert_eq(r4d_dec_plain(RAD_ENC_F32, (const uint8_t *)frow, 1), -0.25f);
}

/* Block-scaled f8: every code's value and a row's scales by block, as rad_dequant_f8_blocks (the
 * reference rad-kbench checks the fp8 GEMMs against), bit for bit. */
Test(r4d_decode, f8_codes_and_block_scales_are_the_references) {
    for (int c = 0; c < 256; c++) {
        const float a = r4d_dec_e4m3((uint8_t)c), b = rad_f8_e4m3_value((uint8_t)c);
        cr_assert(r4d_f32_bits(a) == r4d_f32_bits(b) || (isnan(a) && isnan(b)), "code 0x%02x: %g, want %g", c, (double)a, (double)b);
    }
    enum { R = 130, C = 300 };
    uint8_t *codes = malloc(R * C);
    float scale[2 * 3], got[C], want[C];
    for (int i = 0; i < R * C; i++) codes[i] = (uint8_t)((i * 37 + 11) & 0xff) == 0x7f ? 0 : (uint8_t)((i * 37 + 11) & 0xff);
    for (int i = 0; i < 6; i++) scale[i] = 0.001f * (float)(i + 1) / 3.0f;
    for (int r = 126; r < R; r++) {
        cr_assert_eq(r4d_f8_srow(scale, (uint64_t)r, C), scale + (r / 128) * 3, "row %d's scales", r);
        for (int j = 0; j < C; j++) got[j] = r4d_dec_f8(codes + r * C, r4d_f8_srow(scale, (uint64_t)r, C), j);
        rad_dequant_f8_blocks(codes, scale, C, (uint64_t)r, 1, want);
        for (int j = 0; j < C; j++)
            cr_assert(r4d_f32_bits(got[j]) == r4d_f32_bits(want[j]) || (isnan(got[j]) && isnan(want[j])), "row %d col %d", r, j);
    }
    cr_assert_eq(r4d_dec_f8(codes, NULL, 5), rad_f8_e4m3_value(codes[5]), "no scale plane: the code alone");
    free(codes);
}

Test(r4d_decode, bf16_rounding_is_rad_convert_s) {
    const uint32_t edge[] = {0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0x7fc00001u,
                             0xffa00000u, 0x00000001u, 0x80008000u, 0x00018000u};
    for (size_t i = 0; i < sizeof edge / sizeof *edge; i++) {
        float f;
        memcpy(&f, &edge[i], 4);
        cr_assert_eq(r4d_enc_bf16(f), rad_f32_to_bf16(f), "%08x", edge[i]);
    }
    for (int i = 0; i < 1000000; i++) {
        const uint32_t u = rnd() << 16 ^ rnd();
        float f;
        memcpy(&f, &u, 4);
        cr_assert_eq(r4d_enc_bf16(f), rad_f32_to_bf16(f), "%08x", u);
    }
}

Test(r4d_host, bf16_packing_of_plain_weights) {
    enum { R = 3, C = 5, STRIDE = 7 };
    float f32[R * STRIDE];
    uint16_t f16[R * STRIDE], out[R * C];
    for (int i = 0; i < R * STRIDE; i++) {
        const uint32_t u = 0x3e000000u + (rnd() & 0x01ffffffu);
        memcpy(&f32[i], &u, 4);
        f16[i] = (uint16_t)(0x3000 + rnd() % 0x1000);
    }
    cr_assert_eq(r4d_pack_bf16_size(RAD_F32, R, C), (size_t)R * C * 2);
    cr_assert_eq(r4d_pack_bf16_size(RAD_Q8_0, R, C), 0, "GGML blocks keep their layout");
    cr_assert_eq(r4d_pack_bf16(RAD_F32, R, C, f32, STRIDE * 4, out), RAD_OK);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) cr_assert_eq(out[r * C + c], rad_f32_to_bf16(f32[r * STRIDE + c]));
    cr_assert_eq(r4d_pack_bf16(RAD_F16, R, C, f16, STRIDE * 2, out), RAD_OK);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) cr_assert_eq(out[r * C + c], rad_f32_to_bf16(rad_f16_to_f32(f16[r * STRIDE + c])));
    cr_assert_eq(r4d_pack_bf16(RAD_BF16, R, C, f16, STRIDE * 2, out), RAD_OK);
    for (int r = 0; r < R; r++) cr_assert_eq(memcmp(out + r * C, f16 + r * STRIDE, C * 2), 0, "bf16 rows copied");
    cr_assert_eq(r4d_pack_bf16(RAD_F32, R, C, f32, 8, out), RAD_E_SHAPE, "a stride shorter than a row");
}

Test(r4d_host, gemm_buckets_slabs_and_the_plan_cache) {
    const int64_t m[][2] = {{1, 1}, {2, 2}, {3, 4}, {8, 8}, {9, 16}, {4096, 4096}, {4097, 8192}, {9000, 12288}};
    for (size_t i = 0; i < sizeof m / sizeof *m; i++) cr_assert_eq(r4d_m_bucket(m[i][0]), m[i][1], "M %ld", (long)m[i][0]);
    /* slabs: multiples of 128 rows within the cap, never under 128, never past N rounded up */
    cr_assert_eq(r4d_slab_rows(151936, 1536, 4, R4D_SLAB_BYTES), 10880);
    cr_assert_eq(r4d_slab_rows(100, 64, 4, R4D_SLAB_BYTES), 128);
    cr_assert_eq(r4d_slab_rows(1000, 1 << 20, 4, R4D_SLAB_BYTES), 128);
    cr_assert_eq(r4d_slab_rows(0, 64, 4, R4D_SLAB_BYTES), 0);

    static R4dPlanCache c;
    memset(&c, 0, sizeof c);
    R4dGemmKey k = {.m_bucket = 16, .n = 576, .k = 1536, .a_type = 14, .b_type = 14, .c_type = 0, .compute = 68};
    int vals[R4D_PLAN_CAP];
    cr_assert_null(r4d_plan_find(&c, &k));
    cr_assert_eq(r4d_plan_put(&c, &k, &vals[0]), 0);
    cr_assert_eq(r4d_plan_find(&c, &k), &vals[0]);
    cr_assert_eq(r4d_plan_put(&c, &k, &vals[1]), -1, "a key is planned once");
    /* a key differing in any one field is another plan */
    for (int f = 0; f < 7; f++) {
        R4dGemmKey o = k;
        int64_t *fld[] = {&o.m_bucket, &o.n, &o.k};
        if (f < 3) *fld[f] += 1;
        else if (f == 3) o.a_type++;
        else if (f == 4) o.b_type++;
        else if (f == 5) o.c_type++;
        else o.compute++;
        cr_assert_null(r4d_plan_find(&c, &o), "field %d", f);
    }
    int n = 1;
    for (int64_t i = 0; i < R4D_PLAN_CAP; i++) {
        R4dGemmKey o = k;
        o.n = 1000 + i;
        if (r4d_plan_put(&c, &o, &vals[i % R4D_PLAN_CAP]) == 0) n++;
    }
    cr_assert_eq(n, R4D_PLAN_CAP * 3 / 4, "the cache stops at 3/4 full (short probes), then refuses");
    for (int64_t i = 0; i < n - 1; i++) {
        R4dGemmKey o = k;
        o.n = 1000 + i;
        cr_assert_not_null(r4d_plan_find(&c, &o), "key %ld found after filling", (long)i);
    }
    cr_assert_eq(r4d_plan_find(&c, &k), &vals[0]);
}

Test(r4d_host, graph_keys_and_split_plans) {
    RadBatch b = {.struct_size = sizeof b, .phase = RAD_PHASE_DECODE, .n_tok = 4, .n_seq = 4, .n_out = 4};
    R4dGraphKey k1, k2;
    cr_assert(r4d_graph_key(&b, 2, &k1), "a decode step is captured");
    b.n_out = 3;
    cr_assert(r4d_graph_key(&b, 2, &k2));
    cr_assert_not(r4d_graph_key_eq(&k1, &k2), "another n_out is another graph");
    b.n_out = 4;
    cr_assert(r4d_graph_key(&b, 2, &k2) && r4d_graph_key_eq(&k1, &k2));
    cr_assert(r4d_graph_key(&b, 1, &k2) && !r4d_graph_key_eq(&k1, &k2), "the split count is part of the graph");
    b.phase = RAD_PHASE_MIXED;
    cr_assert_not(r4d_graph_key(&b, 1, &k2), "prefill and mixed steps run eagerly");
    b.phase = RAD_PHASE_DECODE, b.n_spec = 2;
    cr_assert_not(r4d_graph_key(&b, 1, &k2), "verify steps run eagerly");

    cr_assert_eq(r4d_attn_splits(1, 8, 100, 132), 1, "short contexts are not split");
    const uint32_t s = r4d_attn_splits(1, 8, 32768, 132);
    cr_assert(s > 1 && s <= R4D_SPLIT_MAX, "one long row on 8 KV heads is split (%u)", s);
    cr_assert(32768 / s >= R4D_SPLIT_MIN_KEYS);
    cr_assert_eq(r4d_attn_splits(64, 8, 32768, 132), 1, "512 blocks already fill 132 SMs");
    cr_assert_eq(r4d_attn_splits(1, 1, 600, 132), 2, "no split under 256 keys");
}

/* Two sequences: a decode row (context 20 after the step) and a 3-token prefill chunk (context 7),
 * block size 4, window 8 on the first; entries before the window may be released (-1). */
Test(r4d_host, the_step_image) {
    const int32_t cu[3] = {0, 1, 4}, q[2] = {1, 3}, ctx[2] = {20, 7};
    int32_t table[2 * 6] = {-1, -1, 5, 6, 7, 9, /**/ 1, 2, -1, -1, -1, -1};
    RadBatch b = {.struct_size = sizeof b, .phase = RAD_PHASE_MIXED, .n_tok = 4, .n_seq = 2, .n_seq_decode = 1,
                  .cu_seqlens = cu, .q_lens = q, .ctx_lens = ctx};
    RadKvState kv = {.block_table = table, .max_blocks = 6, .block_size = 4, .n_blocks = 10};
    const size_t need = r4d_step_image_bytes(&b, &kv, 0);
    cr_assert_eq(need, 3 * 16 + 48);
    uint8_t *buf = aligned_alloc(16, need);
    R4dStepImage im;
    cr_assert_eq(r4d_step_image_fill(&b, &kv, 8, 0, buf, need, &im), RAD_OK);
    const int32_t seq[4] = {0, 1, 1, 1}, slot[4] = {19, 4, 5, 6}, lo[4] = {12, 0, 0, 0};
    for (int t = 0; t < 4; t++) {
        cr_assert_eq(im.row_seq[t], seq[t]);
        cr_assert_eq(im.row_slot[t], slot[t], "row %d: slot %d", t, im.row_slot[t]);
        cr_assert_eq(im.row_lo[t], lo[t], "row %d: window start %d", t, im.row_lo[t]);
    }
    cr_assert_eq(memcmp(im.table, table, sizeof table), 0);
    cr_assert_eq((uint8_t *)im.table - buf, 48, "16-byte aligned parts");
    /* without the window the released entries are read: refused */
    cr_assert_eq(r4d_step_image_fill(&b, &kv, 0, 0, buf, need, &im), RAD_E_ARG);
    /* an entry a row needs out of the pool */
    table[4] = 10;
    cr_assert_eq(r4d_step_image_fill(&b, &kv, 8, 0, buf, need, &im), RAD_E_ARG);
    table[4] = 7;
    /* a window one longer reaches the released block 1 (slot 7, since 19 + 1 - 13 = 7) */
    cr_assert_eq(r4d_step_image_fill(&b, &kv, 13, 0, buf, need, &im), RAD_E_ARG);
    cr_assert_eq(r4d_step_image_fill(&b, &kv, 12, 0, buf, need, &im), RAD_OK);
    /* cu_seqlens that do not cover the rows, a q_len past its context, a short buffer */
    const int32_t bad_cu[3] = {0, 2, 4};
    b.cu_seqlens = bad_cu;
    cr_assert_eq(r4d_step_image_fill(&b, &kv, 8, 0, buf, need, &im), RAD_E_ARG);
    b.cu_seqlens = cu;
    const int32_t bad_ctx[2] = {20, 2};
    b.ctx_lens = bad_ctx;
    cr_assert_eq(r4d_step_image_fill(&b, &kv, 8, 0, buf, need, &im), RAD_E_ARG);
    b.ctx_lens = ctx;
    cr_assert_eq(r4d_step_image_fill(&b, &kv, 8, 0, buf, need - 4, &im), RAD_E_SHAPE);
    /* a context past the table's blocks */
    const int32_t long_ctx[2] = {25, 7};
    b.ctx_lens = long_ctx;
    cr_assert_eq(r4d_step_image_fill(&b, &kv, 8, 0, buf, need, &im), RAD_E_ARG);
    free(buf);
}

/* The prefill plan: a decode row, a 40-row chunk and a 15-row one; tiles of 8 rows (G = 8). */
Test(r4d_host, the_prefill_plan) {
    cr_assert_eq(r4d_flash_rows(8), 8);
    cr_assert_eq(r4d_flash_rows(7), 9, "G = 7: 63 of the 64 slots");
    cr_assert_eq(r4d_flash_rows(1), 64);
    cr_assert_eq(r4d_flash_rows(65), 0, "a row's heads must fit one tile");
    cr_assert_eq(r4d_flash_rows(0), 0);
    const int32_t cu[4] = {0, 1, 41, 56}, q[3] = {1, 40, 15}, ctx[3] = {9, 40, 20};
    int32_t table[3 * 4] = {0, 1, -1, -1, /**/ 2, 3, 4, 5, /**/ 6, 7, -1, -1};
    RadBatch b = {.struct_size = sizeof b, .phase = RAD_PHASE_MIXED, .n_tok = 56, .n_seq = 3, .n_seq_decode = 1,
                  .cu_seqlens = cu, .q_lens = q, .ctx_lens = ctx};
    RadKvState kv = {.block_table = table, .max_blocks = 4, .block_size = 16, .n_blocks = 8};
    const size_t need = r4d_step_image_bytes(&b, &kv, 8);
    cr_assert_eq(need, r4d_step_image_bytes(&b, &kv, 0) + 56 * 16 + 224, "the plan's parts, 16-byte aligned");
    uint8_t *buf = aligned_alloc(16, need);
    R4dStepImage im;
    cr_assert_eq(r4d_step_image_fill(&b, &kv, 0, 8, buf, need, &im), RAD_OK);
    cr_assert_eq(im.n_tiles, 5, "40 rows in tiles of 8");
    for (uint32_t i = 0; i < im.n_tiles; i++) {
        cr_assert_eq(im.tiles[i].seq, 1);
        cr_assert_eq(im.tiles[i].t0, 1 + 8 * (int32_t)i);
        cr_assert_eq(im.tiles[i].n_rows, 8);
    }
    cr_assert_eq(im.n_rest, 16, "the decode row and the 15-row chunk take split-K");
    cr_assert_eq(im.rest[0], 0);
    for (int i = 1; i < 16; i++) cr_assert_eq(im.rest[i], 40 + i);
    cr_assert_eq((uint8_t *)im.tiles - buf, (ptrdiff_t)r4d_step_image_bytes(&b, &kv, 0));
    /* tiles of 9 rows (G = 7): the last one short */
    cr_assert_eq(r4d_step_image_fill(&b, &kv, 0, 9, buf, need, &im), RAD_OK);
    cr_assert_eq(im.n_tiles, 5);
    cr_assert_eq(im.tiles[4].t0, 37);
    cr_assert_eq(im.tiles[4].n_rows, 4);
    /* no plan: every row is the split-K kernel's */
    cr_assert_eq(r4d_step_image_fill(&b, &kv, 0, 0, buf, need, &im), RAD_OK);
    cr_assert(im.n_tiles == 0 && im.n_rest == 56 && !im.tiles && !im.rest);
    free(buf);
}

/* docs/OPS.md's worked values (Llama 3.1: theta 500000, head_dim 128, factor 8, low 1, high 4,
 * orig 8192), as tests/kernels/kernel_abi_test.c checks libref's. */
Test(r4d_host, rope_table_matches_the_worked_values) {
    RadParam p[] = {RAD_RANGE("M", 1, 8),         RAD_INT("n_head", 4),      RAD_INT("head_dim", 128),
                    RAD_INT("n_rot", 128),        RAD_FLOAT("theta", 5e5),   RAD_INT("scaling", 2),
                    RAD_FLOAT("factor", 8.0),     RAD_FLOAT("low_freq_factor", 1.0), RAD_FLOAT("high_freq_factor", 4.0),
                    RAD_INT("orig_ctx", 8192)};
    RadKernelArgs a = {.struct_size = sizeof a, .params = p, .n_params = 10, .n = 1};
    R4dRope c;
    cr_assert_eq(r4d_rope_cfg(&a, &c), RAD_OK);
    float inv[64];
    r4d_rope_table(&c, inv);
    cr_assert_eq(inv[0], 1.0f, "pair 0: the high band, as it is");
    cr_assert(fabs(inv[32] - 5.248460551919039e-4) <= 5.248460551919039e-4 * 2e-7, "pair 32: %.17g", (double)inv[32]);
    cr_assert(fabs(inv[63] - 2.4551407022954663e-6 / 8) <= 2.4551407022954663e-6 / 8 * 2e-7, "pair 63: %.17g", (double)inv[63]);
    p[3] = RAD_INT("n_rot", 7);
    cr_assert_eq(r4d_rope_cfg(&a, &c), RAD_E_ARG, "an odd n_rot is refused");
}
