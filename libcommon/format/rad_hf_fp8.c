/* rad_hf_fp8.c — a Hugging Face fp8 checkpoint (quantization_config.quant_method "fp8", as
 * DeepSeek-V3 and Qwen3-FP8 ship, transformers' FineGrainedFP8): each quantised linear is
 * `X.weight` (F8_E4M3 [N, K]) beside `X.weight_scale_inv` (F32 [ceil(N/128), ceil(K/128)]), the
 * weight being codes · scale per 128×128 block. Folded here into one two-plane tensor `X.weight`
 * (codes, scale: docs/FORMAT.md, "Block-scaled f8_e4m3"), so the name map, the converter and the
 * kernels see one weight, and the file's descriptor says so (model.quant "fp8_e4m3").
 * Without weight_block_size (transformers' FineGrainedFP8 with block size None), each
 * weight_scale_inv is one scale for the whole tensor: it is spread over the 128x128 grid here, in
 * memory the model file owns, so the weight is the same codes · scale in every element and nothing
 * downstream needs a second form. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/format/rad_hf.h"

static const char SCALE_TAIL[] = "_scale_inv";

/* quantization_config's key under config.json's flattened table, or NULL. */
static const char *qc_str(const RadModelFile *m, const char *field) {
    char key[96];
    snprintf(key, sizeof key, "config.quantization_config.%s", field);
    const char *v = NULL;
    return rad_dict_gets(&m->raw, key, &v, NULL) == RAD_OK ? v : NULL;
}

/* weight_block_size as [128, 128], the one block Radiance's kernels and format read. */
static int block_is_128(const RadModelFile *m, int *present) {
    const RadValue *v = rad_dict_get(&m->raw, "config.quantization_config.weight_block_size");
    *present = v != NULL;
    if (!v || v->type != RAD_VAL_ARRAY || v->arr_type != RAD_VAL_I64 || v->n != 2) return 0;
    const int64_t *b = v->v.arr;
    return b[0] == RAD_F8_BLOCK && b[1] == RAD_F8_BLOCK;
}

/* A per-tensor scale: rank 0 (transformers), or every dim 1. */
static int one_element(const RadTensor *s) {
    for (uint32_t d = 0; d < s->rank; d++)
        if (s->shape[d] != 1) return 0;
    return 1;
}

/* w's scale plane: s's one value in every cell of w's 128x128 grid, owned by m. */
static int spread_scale(RadModelFile *m, const RadTensor *s, RadTensor *w, RadErr *e) {
    const uint64_t nb = rad_f8_scale_bytes(w->shape[0], w->shape[1]);
    float one, *grid = rad_model_alloc(m, (size_t)nb, e);
    if (!grid) return RAD_E_NOMEM;
    memcpy(&one, s->planes[0].data, sizeof one);
    for (uint64_t i = 0; i < nb / sizeof one; i++) grid[i] = one;
    w->planes[1] = (RadPlane){.nbytes = nb, .stored_bytes = nb, .data = (const uint8_t *)grid};
    return RAD_OK;
}

/* Under an fp8 config, an F8_E4M3 tensor left with no scale would be served as its bare codes. */
static int every_f8_scaled(const RadModelFile *m, const char *file, RadErr *e) {
    for (uint64_t i = 0; i < m->n_tensors; i++) {
        const RadTensor *t = &m->tensors[i];
        if (t->enc == RAD_ENC_F8_E4M3 && t->n_planes == 1)
            return rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s' is F8_E4M3 with no '%s%s' beside it (its codes are not its "
                               "values)", file, t->name, t->name, SCALE_TAIL);
    }
    return RAD_OK;
}

int rad_hf_fold_fp8(RadModelFile *m, const char *file, RadErr *e) {
    const char *method = qc_str(m, "quant_method");
    if (!method || strcmp(method, "fp8") != 0 || !m->n_tensors) return RAD_OK; /* not fp8, or no weights: as it is */
    const char *fmt = qc_str(m, "fmt"), *act = qc_str(m, "activation_scheme");
    if (fmt && strcmp(fmt, "e4m3") != 0)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: quantization_config.fmt '%s': only e4m3 fp8 checkpoints are read", file, fmt);
    if (act && strcmp(act, "dynamic") != 0)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: quantization_config.activation_scheme '%s': only 'dynamic' is read (the "
                           "activations' own static scales would be dropped)", file, act);
    int present;
    const int blocked = block_is_128(m, &present);
    if (present && !blocked)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: quantization_config.weight_block_size is not [128, 128]: only 128x128 "
                           "blocks and per-tensor scales (no weight_block_size) are read", file);
    uint8_t *drop = calloc(m->n_tensors ? m->n_tensors : 1, 1);
    if (!drop) return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", file);
    int rc = RAD_OK, n_folded = 0;
    const size_t tl = sizeof SCALE_TAIL - 1;
    for (uint64_t i = 0; i < m->n_tensors && !rc; i++) {
        const RadTensor *s = &m->tensors[i];
        const size_t l = strlen(s->name);
        if (l <= tl || strcmp(s->name + l - tl, SCALE_TAIL) != 0) continue;
        char *wname = strndup(s->name, l - tl);
        if (!wname) {
            rc = rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", file);
            break;
        }
        RadTensor *w = (RadTensor *)rad_model_find(m, wname);
        if (!w) rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s' scales a weight '%s' that is not there", file, s->name, wname);
        else if (w->enc != RAD_ENC_F8_E4M3 || w->rank != 2 || w->n_planes != 1)
            rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s' scales '%s', which is %s rank %u, not an F8_E4M3 matrix", file,
                             s->name, wname, rad_enc_info(w->enc)->name, w->rank);
        else if (s->enc != RAD_ENC_F32)
            rc = rad_err_set(e, RAD_E_UNSUPPORTED, "%s: tensor '%s' is %s; block scales are read as F32", file, s->name,
                             rad_enc_info(s->enc)->name);
        else if (blocked && (s->rank != 2 || s->shape[0] != rad_f8_blocks(w->shape[0]) ||
                             s->shape[1] != rad_f8_blocks(w->shape[1])))
            rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s' is not [%" PRIu64 ", %" PRIu64 "], one scale per 128x128 block of "
                             "'%s' [%" PRIu64 ", %" PRIu64 "]", file, s->name, rad_f8_blocks(w->shape[0]),
                             rad_f8_blocks(w->shape[1]), wname, w->shape[0], w->shape[1]);
        else if (!blocked && !one_element(s))
            rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s' is not one scale: with no quantization_config.weight_block_size, "
                             "'%s' has a per-tensor scale", file, s->name, wname);
        else if (blocked && s->src != w->src)
            rc = rad_err_set(e, RAD_E_UNSUPPORTED, "%s: tensor '%s' and its weight '%s' are in different shards; not read yet",
                             file, s->name, wname);
        else if (!blocked && !s->planes[0].data)
            rc = rad_err_set(e, RAD_E_UNSUPPORTED, "%s: tensor '%s': a per-tensor scale is read from a mapped file, and this "
                             "input is a stream", file, s->name);
        if (!rc && !blocked) rc = spread_scale(m, s, w, e);
        else if (!rc) w->planes[1] = s->planes[0];
        if (!rc) {
            snprintf(w->planes[0].name, sizeof w->planes[0].name, "codes");
            snprintf(w->planes[1].name, sizeof w->planes[1].name, "scale");
            w->n_planes = 2;
            drop[i] = 1;
            n_folded++;
        }
        free(wname);
    }
    if (!rc) rc = rad_model_drop_tensors(m, drop, e);
    free(drop);
    if (!rc && n_folded) rc = every_f8_scaled(m, file, e);
    if (!rc && !n_folded)
        rc = rad_err_set(e, RAD_E_FORMAT, "%s: quantization_config says fp8, but no tensor is a '*.weight_scale_inv'", file);
    if (!rc) rc = rad_dict_set_str(&m->meta, "model.quant", "fp8_e4m3", e);
    return rc;
}
