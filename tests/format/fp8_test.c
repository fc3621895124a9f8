/* fp8_test.c — block-scaled fp8 checkpoints (docs/FORMAT.md, "Block-scaled f8_e4m3"): the e4m3
 * decoder, the Hugging Face reader's fold of `weight_scale_inv` into its weight, what it refuses,
 * the container's checks of the two-plane form, and rad-convert's handling
 * (tests/fixtures/tiny-qwen3-fp8, scripts/make-tiny-qwen3-fp8.py). */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "libcommon/format/rad_container.h"
#include "libcommon/format/rad_model.h"
#include "libcommon/tensor/rad_enc.h"
#include "tests/test_util.h"

#define FIX "tests/fixtures/tiny-qwen3-fp8"

static char dir[256];
static void setup(void) {
    snprintf(dir, sizeof dir, "/tmp/rad-fp8-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}
static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}
static const char *bdir(void) {
    const char *b = getenv("RAD_BUILD");
    return b && *b ? b : "build";
}

TestSuite(fp8, .init = setup, .fini = teardown);

/* Every code against the e4m3fn definition: (-1)^s 2^(e-7) (1 + m/8), subnormals m/8 2^-6, S.1111.111 NaN. */
Test(fp8, every_e4m3_code_decodes_to_its_value) {
    for (int c = 0; c < 256; c++) {
        const int e = (c >> 3) & 15, m = c & 7;
        const float v = rad_f8_e4m3_value((uint8_t)c);
        if (e == 15 && m == 7) {
            cr_assert(isnan(v), "code 0x%02x", c);
            continue;
        }
        const double want = (c & 0x80 ? -1.0 : 1.0) * (e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6));
        cr_assert_eq((double)v, want, "code 0x%02x: %g, want %g", c, (double)v, want);
        cr_assert_eq(signbit(v) != 0, (c & 0x80) != 0, "code 0x%02x: the sign of zero", c);
        cr_assert_eq(v, rad_f8e4m3_to_f32((uint8_t)c));
    }
}

/* A partial last block in both dims picks the scale of the block its element is in. */
Test(fp8, dequant_blocks_picks_each_elements_block) {
    enum { R = 130, C = 260 };
    uint8_t *codes = malloc(R * C);
    const float scale[2 * 3] = {1, 2, 4, 8, 16, 32};
    memset(codes, 0x38, R * C); /* 1.0 */
    float *out = malloc(sizeof(float) * 3 * C);
    rad_dequant_f8_blocks(codes, scale, C, 127, 3, out); /* rows 127, 128, 129: the row-block edge */
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < C; k++) {
            const int row = 127 + r;
            cr_assert_eq(out[r * C + k], scale[(row / 128) * 3 + k / 128], "row %d col %d", row, k);
        }
    rad_dequant_f8_blocks(codes, NULL, C, 0, 1, out);
    cr_assert_eq(out[C - 1], 1.0f, "no scale: the codes alone");
    free(codes), free(out);
}

/* A fixture opened: 14 two-plane weights (7 linears x 2 layers), each codes then its 128x128 scale
 * grid, no scale tensor left beside them. */
static void open_folded(const char *path, RadModelFile *m) {
    RadErr e = {0};
    cr_assert_eq(rad_model_open(path, m, &e), RAD_OK, "%s", e.msg);
    int n2 = 0;
    for (uint64_t i = 0; i < m->n_tensors; i++) {
        const RadTensor *t = &m->tensors[i];
        cr_assert_null(strstr(t->name, "scale_inv"), "%s left beside its weight", t->name);
        if (t->n_planes != 2) continue;
        n2++;
        cr_assert(rad_tensor_is_f8_blocks(t), "%s", t->name);
        cr_assert_str_eq(t->planes[0].name, "codes");
        cr_assert_str_eq(t->planes[1].name, "scale");
        cr_assert_eq(t->planes[0].nbytes, t->shape[0] * t->shape[1]);
        cr_assert_eq(t->planes[1].nbytes, rad_f8_scale_bytes(t->shape[0], t->shape[1]), "%s", t->name);
    }
    cr_assert_eq(n2, 14);
}

/* The block-scaled fixture folds, and the descriptor says fp8_e4m3. */
Test(fp8, the_reader_folds_scales_into_their_weights) {
    RadModelFile m = {0};
    RadErr e = {0};
    open_folded(FIX, &m);
    const RadTensor *q = rad_model_find(&m, "model.layers.1.self_attn.q_proj.weight");
    cr_assert(q && q->shape[0] == 384 && q->shape[1] == 256 && q->planes[1].nbytes == 3 * 2 * 4);
    const char *quant = NULL;
    cr_assert_eq(rad_dict_gets(&m.meta, "model.quant", &quant, &e), RAD_OK);
    cr_assert_str_eq(quant, "fp8_e4m3");
    rad_model_free(&m);
}

/* The fixture copied with its config.json's quantization_config changed: refused at read, one
 * line naming the field. */
static void config_refused(const char *from, const char *to, const char *want) {
    char cmd[1024], sub[300];
    snprintf(sub, sizeof sub, "%s/q", dir);
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s && cp " FIX "/model.safetensors %s/", sub, sub, sub);
    cr_assert_eq(system(cmd), 0);
    size_t n;
    char *cfg = slurp(FIX "/config.json", &n);
    char *at = strstr(cfg, from);
    cr_assert_not_null(at, "config.json has no '%s'", from);
    char path[400];
    snprintf(path, sizeof path, "%s/config.json", sub);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fwrite(cfg, 1, (size_t)(at - cfg), f);
    fputs(to, f);
    fputs(at + strlen(from), f);
    fclose(f);
    free(cfg);
    RadModelFile m = {0};
    RadErr e = {0};
    cr_assert_neq(rad_model_open(sub, &m, &e), RAD_OK, "%s -> %s: opened", from, to);
    cr_assert(strstr(e.msg, want), "%s -> %s: %s", from, to, e.msg);
    cr_assert_null(strchr(e.msg, '\n'));
    rad_model_free(&m);
}

Test(fp8, the_reader_refuses_fp8_forms_it_does_not_read) {
    config_refused("\"activation_scheme\": \"dynamic\"", "\"activation_scheme\": \"static\"",
                   "quantization_config.activation_scheme 'static': only 'dynamic' is read");
    config_refused("\"fmt\": \"e4m3\"", "\"fmt\": \"e5m2\"", "quantization_config.fmt 'e5m2'");
    config_refused("128,\n      128", "64,\n      64", "weight_block_size is not [128, 128]");
    /* with no block size each scale must be one value: a 3x2 grid is not */
    config_refused("\"weight_block_size\"", "\"weight_block_sizes\"",
                   "_scale_inv' is not one scale: with no quantization_config.weight_block_size, 'model.layers.");
}

/* Per-tensor scales (make-tiny-qwen3-fp8.py --per-tensor: weight_block_size null, each
 * weight_scale_inv 0-d): each is spread over its weight's 128x128 grid, partial blocks included,
 * so the weight is the same two-plane form as a block-scaled one. */
Test(fp8, the_reader_spreads_a_per_tensor_scale_over_the_grid) {
    RadModelFile m = {0};
    open_folded(FIX "-tensor", &m);
    for (uint64_t i = 0; i < m.n_tensors; i++) {
        const RadTensor *t = &m.tensors[i];
        if (t->n_planes != 2) continue;
        const float *g = (const float *)t->planes[1].data;
        cr_assert(g[0] > 0 && isfinite(g[0]), "%s: scale %g", t->name, (double)g[0]);
        for (uint64_t c = 1; c < t->planes[1].nbytes / 4; c++) cr_assert_eq(g[c], g[0], "%s: cell %" PRIu64, t->name, c);
    }
    const RadTensor *up = rad_model_find(&m, "model.layers.0.mlp.up_proj.weight"); /* [448, 320]: 4 x 3 blocks */
    cr_assert(up && up->shape[0] == 448 && up->shape[1] == 320 && up->planes[1].nbytes == 4 * 3 * 4);
    const RadTensor *down = rad_model_find(&m, "model.layers.0.mlp.down_proj.weight");
    cr_assert(down && ((const float *)down->planes[1].data)[0] != ((const float *)up->planes[1].data)[0],
              "two tensors' scales are the same value: not each its own");
    rad_model_release_data(&m); /* the mapped planes go; the model's own stay until it is freed */
    cr_assert_null(up->planes[1].data);
    rad_model_free(&m);
}

/* The writer refuses a two-plane f8 tensor whose scale plane does not fit its shape, or whose
 * planes are not (codes, scale); a two-plane tensor of another encoding stays a container's
 * business (the engine refuses to give it to a kernel). */
Test(fp8, the_container_checks_the_two_plane_form) {
    char path[300];
    snprintf(path, sizeof path, "%s/x.rad", dir);
    RadWriter *w = NULL;
    RadErr e = {0};
    RadWriteOpts o = {0};
    cr_assert_eq(rad_writer_init(&w, path, &o, 1, &e), RAD_OK, "%s", e.msg);
    static uint8_t codes[200 * 300];
    static float scale[2 * 3];
    const uint64_t shape[2] = {200, 300};
    RadPlaneSrc ok[2] = {{"codes", codes, sizeof codes}, {"scale", scale, sizeof scale}};
    RadPlaneSrc short_scale[2] = {{"codes", codes, sizeof codes}, {"scale", scale, 4 * 4}};
    RadPlaneSrc swapped[2] = {{"scale", scale, sizeof scale}, {"codes", codes, sizeof codes}};
    cr_assert_eq(rad_writer_add_tensor(w, "bad", RAD_ENC_F8_E4M3, 2, shape, 2, short_scale, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "tensor 'bad': plane 'scale' holds 16 bytes, 2 x 3 blocks of 128x128 need 24"), "%s", e.msg);
    e = (RadErr){0}; /* a RadErr keeps its first message */
    cr_assert_eq(rad_writer_add_tensor(w, "bad", RAD_ENC_F8_E4M3, 2, shape, 2, swapped, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "two planes, 'codes' then 'scale'"), "%s", e.msg);
    const uint64_t flat[1] = {60000};
    e = (RadErr){0};
    cr_assert_eq(rad_writer_add_tensor(w, "bad", RAD_ENC_F8_E4M3, 1, flat, 2, (RadPlaneSrc[]){{"codes", codes, 60000}, {"scale", scale, 4}}, &e),
                 RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "is a matrix [N, K], not rank 1"), "%s", e.msg);
    e = (RadErr){0};
    cr_assert_eq(rad_writer_add_tensor(w, "w", RAD_ENC_F8_E4M3, 2, shape, 2, ok, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_writer_finish(w, &e), RAD_OK, "%s", e.msg);
    rad_writer_free(w);
    RadModelFile m = {0};
    cr_assert_eq(rad_model_open(path, &m, &e), RAD_OK, "%s", e.msg);
    cr_assert(m.n_tensors == 1 && rad_tensor_is_f8_blocks(&m.tensors[0]));
    rad_model_free(&m);
}

/* rad-convert keeps the form (descriptor fp8_e4m3, qwen3_fp8), and refuses to re-encode it. */
Test(fp8, convert_keeps_the_planes_and_refuses_to_re_encode) {
    char cmd[1024], out[300], err[300];
    snprintf(out, sizeof out, "%s/q.rad", dir);
    snprintf(err, sizeof err, "%s/err", dir);
    snprintf(cmd, sizeof cmd, "%s/rad-convert --no-tokenizer " FIX " -o %s 2>%s", bdir(), out, err);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    RadModelFile m = {0};
    RadErr e = {0};
    cr_assert_eq(rad_model_open(out, &m, &e), RAD_OK, "%s", e.msg);
    const char *quant = NULL;
    cr_assert_eq(rad_dict_gets(&m.meta, "model.quant", &quant, &e), RAD_OK);
    cr_assert_str_eq(quant, "fp8_e4m3");
    const RadTensor *t = rad_model_find(&m, "blk.0.ffn_down.weight");
    cr_assert(t && rad_tensor_is_f8_blocks(t), "blk.0.ffn_down.weight is not block-scaled f8 in the container");
    cr_assert(t->shape[0] == 256 && t->shape[1] == 384 && t->planes[1].nbytes == 2 * 3 * 4);
    rad_model_free(&m);
    snprintf(cmd, sizeof cmd, "%s/rad-convert --no-tokenizer --quant bf16 " FIX " -o %s/b.rad 2>%s", bdir(), dir, err);
    const int st = system(cmd);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d", st);
    size_t n;
    char *msg = slurp(err, &n);
    cr_assert(strstr(msg, "is block-scaled f8_e4m3 (from 'model.layers.0.self_attn.q_proj.weight'), which rad-convert keeps as it is"),
              "%s", msg);
    free(msg);
    /* --tp would slice rows or columns the scales index whole: refused at open, naming the weight */
    snprintf(cmd, sizeof cmd, "%s/radiance --model %s --ids 1,2 -n 1 --tp 2 >/dev/null 2>%s", bdir(), out, err);
    const int st2 = system(cmd);
    cr_assert(WIFEXITED(st2) && WEXITSTATUS(st2) == 1, "status %d", st2);
    msg = slurp(err, &n);
    cr_assert(strstr(msg, "weight 'blk.0.attn_q.weight' (2 planes, rank 2): only single-plane weights"), "%s", msg);
    free(msg);
}
