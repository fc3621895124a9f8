/* tiny_llama.h — the metadata of the tiny random Llama containers the engine tests write
 * (engine_test.c, load_test.c): one place for the keys a Llama container needs. */
#ifndef RAD_TESTS_TINY_LLAMA_H
#define RAD_TESTS_TINY_LLAMA_H

#include "libcommon/base/rad_dict.h"
#include "libcommon/format/rad_container.h"

/* n_layers, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab: f32 weights, context 256, rms
 * eps 1e-5, rope theta 10000, an output head of its own. */
static inline void tiny_llama_meta(RadDict *meta, uint32_t l, uint32_t e, uint32_t h, uint32_t g, uint32_t hd, uint32_t ff,
                                   uint32_t v, RadErr *err) {
    rad_dict_init(meta);
    rad_dict_set_str(meta, "model.arch_id", "llama", err);
    rad_dict_set_str(meta, "model.quant", "", err);
    rad_dict_set_str(meta, "model.quant_origin", "native", err);
    const char *k[] = {"model.n_layers", "model.n_embd", "model.n_head", "model.n_head_kv", "model.head_dim", "model.n_ff",
                       "model.n_vocab", "model.n_ctx_train"};
    const uint32_t x[] = {l, e, h, g, hd, ff, v, 256};
    for (int i = 0; i < 8; i++) rad_dict_set_u32(meta, k[i], x[i], err);
    rad_dict_set_f32(meta, "model.rms_eps", 1e-5f, err);
    rad_dict_set_f32(meta, "model.rope_theta", 10000.0f, err);
    rad_dict_set_bool(meta, "model.tie_embeddings", false, err);
}

/* A container for a test architecture (tests/plugins/arch_*.c): a one-layer tiny Llama's metadata
 * under arch_id and one f32 weight "w" [4]; RAD_OK or the writer's status, with e set. */
static inline int tiny_arch_container(const char *file, const char *arch_id, RadErr *e) {
    RadDict meta;
    tiny_llama_meta(&meta, 1, 4, 1, 1, 4, 4, 8, e);
    int rc = rad_dict_set_str(&meta, "model.arch_id", arch_id, e);
    RadWriter *w = NULL;
    if (!rc) rc = rad_writer_init(&w, file, NULL, 1, e);
    if (!rc) rc = rad_writer_set_kv(w, 0, &meta, e);
    const float d[4] = {1, 2, 3, 4};
    const uint64_t shape[1] = {4};
    const RadPlaneSrc p = {"data", d, sizeof d};
    if (!rc) rc = rad_writer_add_tensor(w, "w", RAD_ENC_F32, 1, shape, 1, &p, e);
    if (!rc) rc = rad_writer_finish(w, e);
    if (w) rad_writer_free(w);
    rad_dict_free(&meta);
    return rc;
}

#endif
