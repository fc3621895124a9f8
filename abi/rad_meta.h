/* rad_meta.h — RadModelMeta: what the loader read from a container's header before any plugin
 * ran (spec: architecture-plugins.md, "Declare: the metadata"). Grows only at its end. */
#ifndef RAD_META_H
#define RAD_META_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* The free-form table: every metadata key that is not a field above (docs/KEYS.md), as text,
 * plus the chat.* keys. Absent keys leave *out unchanged and return 0; found, 1. */
static inline const char *rad_meta_find(const RadModelMeta *m, const char *key) {
    /* a producer built before the table existed has no table */
    if (!m || m->struct_size < offsetof(RadModelMeta, kv_val) + sizeof m->kv_val || !m->kv_key || !m->kv_val) return NULL;
    for (int32_t i = 0; i < m->n_kv; i++)
        if (m->kv_key[i] && strcmp(m->kv_key[i], key) == 0) return m->kv_val[i];
    return NULL;
}
static inline int rad_meta_gets(const RadModelMeta *m, const char *key, const char **out) {
    const char *v = rad_meta_find(m, key);
    if (!v) return 0;
    *out = v;
    return 1;
}
static inline int rad_meta_geti(const RadModelMeta *m, const char *key, int64_t *out) {
    const char *v = rad_meta_find(m, key);
    if (!v) return 0;
    if (strcmp(v, "true") == 0) return *out = 1, 1;
    if (strcmp(v, "false") == 0) return *out = 0, 1;
    char *end;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end) return 0; /* not an integer: treated as absent */
    *out = x;
    return 1;
}
static inline int rad_meta_getf(const RadModelMeta *m, const char *key, double *out) {
    const char *v = rad_meta_find(m, key);
    if (!v) return 0;
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end) return 0;
    *out = x;
    return 1;
}

#endif
