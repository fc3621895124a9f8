/* tiny_llama.h — the metadata of the tiny random Llama containers the engine tests write
 * (engine_test.c, load_test.c): one place for the keys a Llama container needs. */
#ifndef RAD_TESTS_TINY_LLAMA_H
#define RAD_TESTS_TINY_LLAMA_H

#include "libcommon/base/rad_dict.h"

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

#endif
