/* rad_meta.h — RadModelMeta: what the loader read from a container's header before any plugin
 * ran (spec: architecture-plugins.md, "Declare: the metadata"). Grows only at its end. */
#ifndef RAD_META_H
#define RAD_META_H

#include <stdint.h>

typedef struct RadModelMeta {
    uint32_t struct_size;   /* sizeof(RadModelMeta) as built by the producer */
    const char *arch_id;    /* "llama", "qwen3", ... */
    const char *name;       /* human name of the checkpoint */
    const char *quant;      /* "" unquantised, else the descriptor */
    int32_t n_layers;
    int32_t n_embd;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;       /* read, never derived: hidden/heads is wrong on some families */
    int32_t n_ff;
    int32_t n_vocab;
    int32_t n_ctx_train;
    int32_t n_expert;       /* 0 for dense models */
    int32_t n_expert_used;
    float rms_eps;
    float rope_theta;
    int32_t n_kv;              /* free-form table: every other key, as text */
    const char *const *kv_key; /* [n_kv] */
    const char *const *kv_val; /* [n_kv] */
} RadModelMeta;

#endif
