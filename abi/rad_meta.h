/* rad_meta.h — RadModelMeta: what the loader read from a container's header before any plugin
 * ran (spec: architecture-plugins.md, "Declare: the metadata"), and the one set of getters that
 * read its free-form table. Grows only at its end.
 *
 * The getters, one per type (str, bool, u32, i64, f32, f64, and u32/f32 arrays; the spec's
 * rad_meta_gets/geti/getf are the str/i64/f64 ones without a default):
 *
 *     int rad_meta_u32(m, key, dflt, &out)    1 read; 0 absent; -1 present but not a u32
 *
 * write `dflt` to *out unless they return 1, so a caller that takes absent and malformed alike
 * reads the value straight, and one that refuses a malformed value tests < 0. Inside a plugin
 * (after <arch/rad_arch.h>) the required forms rad_meta_need_<type>(b, m, key, &out) refuse
 * the declare through the builder, naming the key: absent, or what the value is. */
#ifndef RAD_META_H
#define RAD_META_H

#include <math.h>
#include <stdbool.h>
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

/* ---- the free-form table ------------------------------------------------------------------
 * Every metadata key that is not a field above (docs/KEYS.md), plus the chat.* keys, as text:
 * numbers in decimal, booleans "true"/"false", numeric arrays "[a, b, ...]". */

/* Entries in the table (0 from a producer built before the table existed). */
static inline int32_t rad_meta_count(const RadModelMeta *m) {
    if (!m || m->struct_size < offsetof(RadModelMeta, kv_val) + sizeof m->kv_val || !m->kv_key || !m->kv_val) return 0;
    return m->n_kv > 0 ? m->n_kv : 0;
}

/* Entry i (< rad_meta_count): 1 with *key and *val set, 0 for a hole in the table. */
static inline int rad_meta_entry(const RadModelMeta *m, int32_t i, const char **key, const char **val) {
    if (i < 0 || i >= rad_meta_count(m) || !m->kv_key[i] || !m->kv_val[i]) return 0;
    *key = m->kv_key[i];
    *val = m->kv_val[i];
    return 1;
}

/* The text of `key`, or NULL. */
static inline const char *rad_meta_find(const RadModelMeta *m, const char *key) {
    const char *k, *v;
    for (int32_t i = 0; i < rad_meta_count(m); i++)
        if (rad_meta_entry(m, i, &k, &v) && strcmp(k, key) == 0) return v;
    return NULL;
}

/* One finite decimal starting at s (strtod's form), its end in *end. 1 read, 0 not a number. */
static inline int rad_meta_num_at(const char *s, double *out, const char **end) {
    char *e;
    double d = strtod(s, &e);
    if (e == s || !isfinite(d)) return 0;
    *out = d;
    *end = e;
    return 1;
}

/* A whole value: one number, then nothing but spaces. */
static inline int rad_meta_num(const char *s, double *out) {
    const char *e;
    if (!rad_meta_num_at(s, out, &e)) return 0;
    while (*e == ' ') e++;
    return *e == '\0';
}

static inline int rad_meta_str(const RadModelMeta *m, const char *key, const char *dflt, const char **out) {
    const char *v = rad_meta_find(m, key);
    *out = v ? v : dflt;
    return v != NULL;
}

/* "true"/"True"/"1", "false"/"False"/"0". */
static inline int rad_meta_bool(const RadModelMeta *m, const char *key, bool dflt, bool *out) {
    const char *v = rad_meta_find(m, key);
    *out = dflt;
    if (!v) return 0;
    if (!strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "1")) return *out = true, 1;
    if (!strcmp(v, "false") || !strcmp(v, "False") || !strcmp(v, "0")) return *out = false, 1;
    return -1;
}

static inline int rad_meta_f64(const RadModelMeta *m, const char *key, double dflt, double *out) {
    const char *v = rad_meta_find(m, key);
    double d;
    *out = dflt;
    if (!v) return 0;
    if (!rad_meta_num(v, &d)) return -1;
    *out = d;
    return 1;
}

/* A number within float's range (a narrower one is not a float). */
static inline int rad_meta_f32(const RadModelMeta *m, const char *key, float dflt, float *out) {
    double d;
    int rc = rad_meta_f64(m, key, dflt, &d);
    *out = dflt;
    if (rc <= 0) return rc;
    if (!isfinite((float)d)) return -1;
    *out = (float)d;
    return 1;
}

/* A whole number; "true"/"false" read as 1/0 (a flag stored as a count). */
static inline int rad_meta_i64(const RadModelMeta *m, const char *key, int64_t dflt, int64_t *out) {
    const char *v = rad_meta_find(m, key);
    *out = dflt;
    if (!v) return 0;
    if (!strcmp(v, "true")) return *out = 1, 1;
    if (!strcmp(v, "false")) return *out = 0, 1;
    char *end;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end) return -1;
    *out = x;
    return 1;
}

/* A whole number in [0, 2^32-1] (written as an integer or as a float that is one: "8192.0"). */
static inline int rad_meta_u32(const RadModelMeta *m, const char *key, uint32_t dflt, uint32_t *out) {
    double d;
    int rc = rad_meta_f64(m, key, 0, &d);
    *out = dflt;
    if (rc <= 0) return rc;
    if (d < 0 || d > 4294967295.0 || d != (double)(uint32_t)d) return -1;
    *out = (uint32_t)d;
    return 1;
}

/* The spec's names (architecture-plugins.md, "Declare: the metadata"): 1 when the key is there
 * and reads as the type, else 0 with *out untouched. */
static inline int rad_meta_gets(const RadModelMeta *m, const char *key, const char **out) {
    const char *v = rad_meta_find(m, key);
    return v ? (*out = v, 1) : 0;
}
static inline int rad_meta_geti(const RadModelMeta *m, const char *key, int64_t *out) {
    int64_t x;
    return rad_meta_i64(m, key, 0, &x) == 1 ? (*out = x, 1) : 0;
}
static inline int rad_meta_getf(const RadModelMeta *m, const char *key, double *out) {
    double x;
    return rad_meta_f64(m, key, 0, &x) == 1 ? (*out = x, 1) : 0;
}

/* Numeric arrays, "[a, b, c]" (brackets optional): up to `cap` elements into out, their count in
 * *n; a u32 array also reads a boolean array, "true" as 1 and "false" as 0 (GGUF's per-layer
 * flags, attention.sliding_window_pattern). 1 read; 0 absent (*n = 0); -1 malformed, an element
 * not of the type, or more than `cap` (*n = 0, out partly written). */
enum { RAD_META_ARR_F32 = 0, RAD_META_ARR_U32 = 1 };
static inline int rad_meta_array(const RadModelMeta *m, const char *key, int kind, void *out, uint32_t cap, uint32_t *n) {
    const char *p = rad_meta_find(m, key);
    double d;
    *n = 0;
    if (!p) return 0;
    while (*p == ' ') p++;
    int bracket = *p == '[';
    p += bracket;
    while (*p == ' ') p++;
    while (*p && *p != ']') {
        if (*n < cap && kind == RAD_META_ARR_U32 && (!strncmp(p, "true", 4) || !strncmp(p, "false", 5))) {
            d = *p == 't';
            p += d ? 4 : 5;
        } else if (*n == cap || !rad_meta_num_at(p, &d, &p)) {
            return *n = 0, -1;
        }
        if (kind == RAD_META_ARR_U32) {
            if (d < 0 || d > 4294967295.0 || d != (double)(uint32_t)d) return *n = 0, -1;
            ((uint32_t *)out)[*n] = (uint32_t)d;
        } else {
            if (!isfinite((float)d)) return *n = 0, -1;
            ((float *)out)[*n] = (float)d;
        }
        (*n)++;
        while (*p == ' ') p++;
        if (*p != ',') break;
        p++;
        while (*p == ' ') p++;
    }
    if (bracket && *p++ != ']') return *n = 0, -1;
    while (*p == ' ') p++;
    return *p ? (*n = 0, -1) : 1;
}
static inline int rad_meta_f32s(const RadModelMeta *m, const char *key, float *out, uint32_t cap, uint32_t *n) {
    return rad_meta_array(m, key, RAD_META_ARR_F32, out, cap, n);
}
static inline int rad_meta_u32s(const RadModelMeta *m, const char *key, uint32_t *out, uint32_t cap, uint32_t *n) {
    return rad_meta_array(m, key, RAD_META_ARR_U32, out, cap, n);
}

#endif /* RAD_META_H */

/* ---- required keys: refused through the builder, naming the key ----------------------------
 * Only where the builder is (a plugin, after <arch/rad_arch.h>, which defines RAD_ARCH_H before
 * including this header); outside the include guard, so an earlier plain include of this header
 * does not hide them. Each returns 0, or RAD_E_NOTFOUND (absent) / RAD_E_FORMAT (not of the
 * type) after rad_declare_fail: "metadata key rope.scaling.factor is missing" or "... is 'x',
 * not a u32". */
#if defined(RAD_ARCH_H) && !defined(RAD_META_NEED_H)
#define RAD_META_NEED_H
#include <stdio.h>

#include "rad_types.h"
#ifdef __cplusplus
extern "C" {
#endif
typedef struct RadBuilder RadBuilder;
static inline int rad_declare_fail(RadBuilder *b, const char *what); /* rad_arch.h */

static inline int rad_meta_need_report(RadBuilder *b, const RadModelMeta *m, const char *key, int rc, const char *type) {
    char line[400];
    const char *v = rad_meta_find(m, key);
    if (rc > 0) return 0;
    if (!v) snprintf(line, sizeof line, "metadata key %s is missing", key);
    else snprintf(line, sizeof line, "metadata key %s is '%.200s', not %s", key, v, type);
    rad_declare_fail(b, line);
    return v ? RAD_E_FORMAT : RAD_E_NOTFOUND;
}
static inline int rad_meta_need_str(RadBuilder *b, const RadModelMeta *m, const char *key, const char **out) {
    return rad_meta_need_report(b, m, key, rad_meta_str(m, key, NULL, out), "a string");
}
static inline int rad_meta_need_bool(RadBuilder *b, const RadModelMeta *m, const char *key, bool *out) {
    return rad_meta_need_report(b, m, key, rad_meta_bool(m, key, false, out), "true or false");
}
static inline int rad_meta_need_u32(RadBuilder *b, const RadModelMeta *m, const char *key, uint32_t *out) {
    return rad_meta_need_report(b, m, key, rad_meta_u32(m, key, 0, out), "a whole number in [0, 4294967295]");
}
static inline int rad_meta_need_i64(RadBuilder *b, const RadModelMeta *m, const char *key, int64_t *out) {
    return rad_meta_need_report(b, m, key, rad_meta_i64(m, key, 0, out), "a whole number");
}
static inline int rad_meta_need_f32(RadBuilder *b, const RadModelMeta *m, const char *key, float *out) {
    return rad_meta_need_report(b, m, key, rad_meta_f32(m, key, 0, out), "a finite float");
}
static inline int rad_meta_need_f64(RadBuilder *b, const RadModelMeta *m, const char *key, double *out) {
    return rad_meta_need_report(b, m, key, rad_meta_f64(m, key, 0, out), "a finite number");
}
static inline int rad_meta_need_f32s(RadBuilder *b, const RadModelMeta *m, const char *key, float *out, uint32_t cap,
                                     uint32_t *n) {
    return rad_meta_need_report(b, m, key, rad_meta_f32s(m, key, out, cap, n), "an array of floats within the plugin's length");
}
static inline int rad_meta_need_u32s(RadBuilder *b, const RadModelMeta *m, const char *key, uint32_t *out, uint32_t cap,
                                     uint32_t *n) {
    return rad_meta_need_report(b, m, key, rad_meta_u32s(m, key, out, cap, n), "an array of u32 within the plugin's length");
}
#ifdef __cplusplus
}
#endif
#endif
