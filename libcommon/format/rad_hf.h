/* rad_hf.h — a Hugging Face model folder (or archive of one): config.json, generation_config.json,
 * tokenizer.json, tokenizer_config.json, and safetensors weights (model.safetensors, or shards
 * listed by model.safetensors.index.json). Fills RadModelFile's meta/tok/chat/raw tables as
 * docs/KEYS.md describes. */
#ifndef RAD_HF_H
#define RAD_HF_H

#include <stddef.h>

#include "libcommon/format/rad_model.h"
#include "libcommon/io/rad_src.h"

/* JSON files larger than this are refused (tokenizer.json runs to ~10 MB). */
#define RAD_HF_MAX_JSON (64ull << 20)
/* Token ids at or above this are refused. */
#define RAD_HF_MAX_VOCAB (1u << 24)

/* Loads the folder: config.json is required; the others are optional (a folder without
 * weights loads with no tensors). m starts zeroed; the caller frees it, also on failure.
 * m->format "hf", m->path the source's path. */
int rad_hf_load(RadSrc *s, RadModelFile *m, RadErr *e);

/* Only the weights: the shards named by model.safetensors.index.json (each loaded once, merged;
 * a tensor listed but absent from its shard, or present in two shards, is an error), else
 * model.safetensors, else a single *.safetensors, else none. */
int rad_hf_load_weights(RadSrc *s, RadModelFile *m, RadErr *e);

/* An fp8 checkpoint (config.json's quantization_config.quant_method "fp8", 128x128 blocks, e4m3,
 * dynamic activations; anything else of fp8 is refused by name): every `X.weight_scale_inv` becomes
 * the "scale" plane of `X.weight` (codes, scale: docs/FORMAT.md) and model.quant "fp8_e4m3". Other
 * checkpoints are left as they are. file names the folder in messages. */
int rad_hf_fold_fp8(RadModelFile *m, const char *file, RadErr *e);

/* The parts of rad_hf_load that read one JSON document from memory; name is used in messages.
 * config.json → m->meta model.* / rope.scaling.* and m->raw "config.*"; folder names the model
 * when the config has no _name_or_path (may be NULL). */
int rad_hf_read_config(RadModelFile *m, const char *name, const char *json, size_t n,
                       const char *folder, RadErr *e);
/* generation_config.json → m->meta "generation.*" and m->raw "generation_config.*". */
int rad_hf_read_generation(RadModelFile *m, const char *name, const char *json, size_t n,
                           RadErr *e);
/* tokenizer.json (may be NULL: then m->tok stays empty) and tokenizer_config.json (may be NULL)
 * → m->tok, and m->chat from tokenizer_config.json. */
int rad_hf_read_tokenizer(RadModelFile *m, const char *tok_name, const char *tok_json,
                          size_t tok_n, const char *cfg_name, const char *cfg_json, size_t cfg_n,
                          RadErr *e);

/* Sets chat.template and chat.kind ("chatml", "llama3", "llama2" or "unknown") from a template. */
int rad_hf_set_chat_template(RadModelFile *m, const char *tmpl, RadErr *e);

#endif
