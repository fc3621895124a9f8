#include "libcommon/format/rad_hf.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/format/rad_safetensors.h"

/* ---- JSON helpers --------------------------------------------------------------------------- */

static const char *jkind(const json_t *j) {
    switch (json_typeof(j)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "number";
    case JSON_TRUE: case JSON_FALSE: return "boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* A copy of a JSON text with every integer literal longer than 18 digits (outside strings)
 * written as a real ("1e30" as transformers writes model_max_length = int(1e30)), which jansson
 * cannot hold as an integer. NULL on allocation failure. */
static char *json_widen_big_ints(const char *p, size_t n, size_t *out_n) {
    char *o = malloc(n * 2 + 1);
    if (!o) return NULL;
    size_t k = 0;
    int in_str = 0;
    for (size_t i = 0; i < n;) {
        char c = p[i];
        if (in_str) {
            o[k++] = c;
            if (c == '\\' && i + 1 < n) o[k++] = p[++i];
            else if (c == '"') in_str = 0;
            i++;
            continue;
        }
        if (c == '"') {
            in_str = 1;
            o[k++] = p[i++];
            continue;
        }
        if ((c >= '0' && c <= '9') || c == '-') {
            size_t j = i + (c == '-');
            while (j < n && p[j] >= '0' && p[j] <= '9') j++;
            int is_int = !(j < n && (p[j] == '.' || p[j] == 'e' || p[j] == 'E'));
            memcpy(o + k, p + i, j - i);
            k += j - i;
            if (is_int && j - i - (c == '-') > 18) memcpy(o + k, ".0", 2), k += 2;
            i = j;
            continue;
        }
        o[k++] = p[i++];
    }
    *out_n = k;
    return o;
}

/* Parses a JSON document that must be an object. Nesting is bounded by jansson's parser
 * (JSON_PARSER_MAX_DEPTH), so hostile depth fails with a message rather than the stack. */
static int json_open(const char *name, const char *p, size_t n, json_t **out, RadErr *e) {
    *out = NULL;
    if (n > RAD_HF_MAX_JSON)
        return rad_err_set(e, RAD_E_LIMIT, "%s: %zu bytes exceeds the %llu MiB limit for JSON files",
                           name, n, RAD_HF_MAX_JSON >> 20);
    if (n == 0 || !p) return rad_err_set(e, RAD_E_FORMAT, "%s: empty file", name);
    json_error_t je;
    json_t *j = json_loadb(p, n, JSON_REJECT_DUPLICATES, &je);
    if (!j && strstr(je.text, "too big integer")) { /* retry with such integers read as reals */
        size_t wn;
        char *w = json_widen_big_ints(p, n, &wn);
        if (w) j = json_loadb(w, wn, JSON_REJECT_DUPLICATES, &je);
        free(w);
    }
    if (!j)
        return rad_err_set(e, RAD_E_FORMAT, "%s: invalid JSON at line %d, column %d: %s", name,
                           je.line, je.column, je.text);
    if (!json_is_object(j)) {
        int rc = rad_err_set(e, RAD_E_FORMAT, "%s: expected a JSON object, got %s", name, jkind(j));
        json_decref(j);
        return rc;
    }
    *out = j;
    return RAD_OK;
}

/* obj[key], treating null as absent. */
static json_t *jget(const json_t *obj, const char *key) {
    json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
    return v && !json_is_null(v) ? v : NULL;
}

static int bad_type(const char *file, const char *label, const char *want, const json_t *v,
                    RadErr *e) {
    return rad_err_set(e, RAD_E_FORMAT, "%s: field '%s': expected %s, got %s", file, label, want,
                       jkind(v));
}

static int want_int(const char *file, const char *label, const json_t *v, int64_t lo, int64_t hi,
                    int64_t *out, RadErr *e) {
    if (!json_is_integer(v)) return bad_type(file, label, "integer", v, e);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return rad_err_set(e, RAD_E_FORMAT, "%s: field '%s': %lld is out of range", file, label,
                           (long long)x);
    *out = (int64_t)x;
    return RAD_OK;
}

static int want_num(const char *file, const char *label, const json_t *v, double *out, RadErr *e) {
    if (!json_is_number(v)) return bad_type(file, label, "number", v, e);
    *out = json_number_value(v);
    return RAD_OK;
}

/* A number the model uses as an f32 (rope_theta, an epsilon, a scaling factor): finite once
 * narrowed to f32, and in (0, max]; 1e300 would otherwise become inf without a word. */
static int want_pos(const char *file, const char *label, const json_t *v, double max, double *out,
                    RadErr *e) {
    int rc = want_num(file, label, v, out, e);
    if (rc) return rc;
    float f = (float)*out;
    if (!isfinite(f) || !(f > 0) || *out > max) /* f == 0: it underflowed */
        return rad_err_set(e, RAD_E_FORMAT, "%s: field '%s': %g is not a finite number in (0, %g]", file,
                           label, *out, max);
    return RAD_OK;
}

static int want_bool(const char *file, const char *label, const json_t *v, bool *out, RadErr *e) {
    if (!json_is_boolean(v)) return bad_type(file, label, "boolean", v, e);
    *out = json_is_true(v);
    return RAD_OK;
}

static int want_str(const char *file, const char *label, const json_t *v, const char **out,
                    RadErr *e) {
    if (!json_is_string(v)) return bad_type(file, label, "string", v, e);
    *out = json_string_value(v);
    return RAD_OK;
}

/* ---- JSON → RadDict ------------------------------------------------------------------------- */

/* The key being built: parts joined by '.'. */
static int key_push(RadBuf *k, const char *part, RadErr *e) {
    int rc = k->len ? rad_buf_put(k, ".", 1, e) : RAD_OK;
    return rc ? rc : rad_buf_puts(k, part, e);
}

/* Sets key to a JSON value: scalars as string/i64/f64/bool, homogeneous scalar arrays as typed
 * arrays, anything else (arrays of objects, mixed arrays) as its compact JSON text. Objects are
 * flattened by the caller; null is skipped. */
static int kv_set_json(RadDict *kv, const char *key, const json_t *v, RadErr *e) {
    RadValue rv = {0};
    switch (json_typeof(v)) {
    case JSON_NULL: return RAD_OK;
    case JSON_STRING: return rad_dict_set_str(kv, key, json_string_value(v), e);
    case JSON_TRUE: case JSON_FALSE: return rad_dict_set_bool(kv, key, json_is_true(v), e);
    case JSON_INTEGER:
        rv.type = RAD_VAL_I64;
        rv.v.i = (int64_t)json_integer_value(v);
        return rad_dict_take(kv, key, &rv, e);
    case JSON_REAL:
        rv.type = RAD_VAL_F64;
        rv.v.f = json_real_value(v);
        return rad_dict_take(kv, key, &rv, e);
    case JSON_OBJECT: break;
    case JSON_ARRAY: {
        size_t n = json_array_size(v), ni = 0, nr = 0, ns = 0, nb = 0;
        for (size_t i = 0; i < n; i++) {
            const json_t *x = json_array_get(v, i);
            ni += json_is_integer(x);
            nr += json_is_real(x);
            ns += json_is_string(x);
            nb += json_is_boolean(x);
        }
        int rc = RAD_OK;
        if (ns == n && n > 0) {
            const char **s = malloc(n * sizeof *s);
            if (!s) return rad_err_set(e, RAD_E_NOMEM, "metadata '%s': out of memory", key);
            for (size_t i = 0; i < n; i++) s[i] = json_string_value(json_array_get(v, i));
            rc = rad_dict_set_strarr(kv, key, s, n, e);
            free(s);
            return rc;
        }
        if (ni + nr == n || nb == n) {
            RadValType t = nb == n && n > 0 ? RAD_VAL_BOOL : nr ? RAD_VAL_F64 : RAD_VAL_I64;
            void *buf = malloc(n ? n * 8 : 1);
            if (!buf) return rad_err_set(e, RAD_E_NOMEM, "metadata '%s': out of memory", key);
            for (size_t i = 0; i < n; i++) {
                const json_t *x = json_array_get(v, i);
                if (t == RAD_VAL_BOOL) ((uint8_t *)buf)[i] = json_is_true(x);
                else if (t == RAD_VAL_F64) ((double *)buf)[i] = json_number_value(x);
                else ((int64_t *)buf)[i] = (int64_t)json_integer_value(x);
            }
            rc = rad_dict_set_arr(kv, key, t, buf, n, e);
            free(buf);
            return rc;
        }
        char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!text) return rad_err_set(e, RAD_E_NOMEM, "metadata '%s': out of memory", key);
        rc = rad_dict_set_str(kv, key, text, e);
        free(text);
        return rc;
    }
    }
    return RAD_OK;
}

/* Flattens v under k ("config.rope_scaling.factor") into kv. */
static int flatten(RadDict *kv, RadBuf *k, const json_t *v, RadErr *e) {
    if (!json_is_object(v)) return kv_set_json(kv, k->p, v, e);
    const char *key;
    json_t *x;
    size_t saved = k->len;
    json_object_foreach((json_t *)v, key, x) {
        int rc = key_push(k, key, e);
        if (!rc) rc = flatten(kv, k, x, e);
        k->len = saved;
        k->p[saved] = 0;
        if (rc) return rc;
    }
    return RAD_OK;
}

static int flatten_into(RadDict *kv, const char *prefix, const json_t *root, RadErr *e) {
    RadBuf k = {0};
    int rc = key_push(&k, prefix, e);
    if (!rc) rc = flatten(kv, &k, root, e);
    free(k.p);
    return rc;
}

/* ---- config.json ---------------------------------------------------------------------------- */

/* The first of fields present (not null) in obj; *which gets its name. */
static json_t *jfirst(const json_t *obj, const char *const *fields, const char **which) {
    for (; *fields; fields++) {
        json_t *v = jget(obj, *fields);
        if (v) {
            *which = *fields;
            return v;
        }
    }
    return NULL;
}

static const struct {
    const char *key;          /* model.* key */
    const char *fields[4];    /* config.json fields, first present wins */
} cfg_u32[] = {
    {"model.n_layers", {"num_hidden_layers", "n_layer", "num_layers", NULL}},
    {"model.n_embd", {"hidden_size", "n_embd", "d_model", NULL}},
    {"model.n_head", {"num_attention_heads", "n_head", "num_heads", NULL}},
    {"model.n_head_kv", {"num_key_value_heads", NULL}},
    {"model.head_dim", {"head_dim", NULL}},
    {"model.n_ff", {"intermediate_size", "n_inner", "ffn_dim", NULL}},
    {"model.n_vocab", {"vocab_size", NULL}},
    {"model.n_ctx_train", {"max_position_embeddings", "n_positions", NULL}},
    {"model.n_expert", {"num_local_experts", "num_experts", NULL}},
    {"model.n_expert_used", {"num_experts_per_tok", NULL}},
};
enum { CFG_LAYERS, CFG_EMBD, CFG_HEAD, CFG_HEAD_KV, CFG_HEAD_DIM, CFG_FF, CFG_VOCAB, CFG_CTX,
       CFG_EXPERT, CFG_EXPERT_USED, CFG_N };

/* rope_scaling (or transformers 5's rope_parameters) → rope.scaling.* */
static int read_rope(RadModelFile *m, const char *file, const char *label, const json_t *rs,
                     RadErr *e) {
    if (!json_is_object(rs)) return bad_type(file, label, "object", rs, e);
    char lab[96];
    int rc;
    const char *tf = NULL;
    const char *tfields[] = {"rope_type", "type", NULL};
    json_t *t = jfirst(rs, tfields, &tf);
    if (t) {
        const char *ts;
        snprintf(lab, sizeof lab, "%s.%s", label, tf);
        if ((rc = want_str(file, lab, t, &ts, e))) return rc;
        if (strcmp(ts, "default") != 0 && (rc = rad_dict_set_str(&m->meta, "rope.scaling.type", ts, e)))
            return rc;
    }
    static const char *fl[] = {"factor", "low_freq_factor", "high_freq_factor"};
    for (size_t i = 0; i < 3; i++) {
        json_t *v = jget(rs, fl[i]);
        if (!v) continue;
        double d = 0;
        snprintf(lab, sizeof lab, "%s.%s", label, fl[i]);
        char key[64];
        snprintf(key, sizeof key, "rope.scaling.%s", fl[i]);
        if ((rc = want_pos(file, lab, v, 1e6, &d, e)) || (rc = rad_dict_set_f32(&m->meta, key, (float)d, e)))
            return rc;
    }
    json_t *o = jget(rs, "original_max_position_embeddings");
    if (o) {
        int64_t x;
        snprintf(lab, sizeof lab, "%s.original_max_position_embeddings", label);
        if ((rc = want_int(file, lab, o, 0, UINT32_MAX, &x, e)) ||
            (rc = rad_dict_set_u32(&m->meta, "rope.scaling.original_context_length", (uint32_t)x, e)))
            return rc;
    }
    return RAD_OK;
}

/* Local (sliding-window) layers beside global ones, as Gemma 3 has them (docs/KEYS.md):
 * which layers slide (layer_types, else sliding_window_pattern: every pattern-th is global),
 * the local layers' rope base (rope_local_base_freq, or transformers 5's
 * rope_parameters.sliding_attention) and the attention scale's query_pre_attn_scalar. A
 * layer_types with other kinds than these two (linear or chunked attention) is left to the raw
 * table: the key would not say what those layers are. */
static int read_local_attention(RadModelFile *m, const char *file, const json_t *root, const json_t *local,
                                RadErr *e) {
    int rc;
    double d;
    json_t *v;
    if ((v = jget(root, "query_pre_attn_scalar")) &&
        ((rc = want_pos(file, "query_pre_attn_scalar", v, 1e6, &d, e)) ||
         (rc = rad_dict_set_f32(&m->meta, "attention.query_pre_attn_scalar", (float)d, e))))
        return rc;
    if ((v = jget(root, "rope_local_base_freq")) &&
        ((rc = want_pos(file, "rope_local_base_freq", v, 1e12, &d, e)) ||
         (rc = rad_dict_set_f32(&m->meta, "rope.local_freq_base", (float)d, e))))
        return rc;
    if (local) {
        if (!json_is_object(local)) return bad_type(file, "rope_parameters.sliding_attention", "object", local, e);
        const char *t;
        if ((v = jget(local, "rope_theta")) &&
            ((rc = want_pos(file, "rope_parameters.sliding_attention.rope_theta", v, 1e12, &d, e)) ||
             (rc = rad_dict_set_f32(&m->meta, "rope.local_freq_base", (float)d, e))))
            return rc;
        if ((v = jget(local, "rope_type")) &&
            ((rc = want_str(file, "rope_parameters.sliding_attention.rope_type", v, &t, e)) ||
             (strcmp(t, "default") && (rc = rad_dict_set_str(&m->meta, "rope.local_scaling.type", t, e)))))
            return rc;
    }
    static const char *pattern_fields[] = {"sliding_window_pattern", "_sliding_window_pattern", NULL};
    const char *which = NULL;
    int64_t p;
    if ((v = jfirst(root, pattern_fields, &which)) &&
        ((rc = want_int(file, which, v, 1, UINT32_MAX, &p, e)) ||
         (rc = rad_dict_set_u32(&m->meta, "attention.sliding_window_pattern", (uint32_t)p, e))))
        return rc;
    json_t *lt = jget(root, "layer_types");
    if (!lt) return RAD_OK;
    if (!json_is_array(lt)) return bad_type(file, "layer_types", "array", lt, e);
    size_t n = json_array_size(lt);
    uint8_t *slide = malloc(n ? n : 1);
    if (!slide) return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", file);
    int known = 1;
    for (size_t i = 0; i < n && known; i++) {
        const char *t = json_string_value(json_array_get(lt, i));
        if (!t) {
            free(slide);
            return rad_err_set(e, RAD_E_FORMAT, "%s: field 'layer_types[%zu]': expected string, got %s", file, i,
                               jkind(json_array_get(lt, i)));
        }
        slide[i] = !strcmp(t, "sliding_attention");
        known = slide[i] || !strcmp(t, "full_attention");
    }
    /* per layer, true where it slides: GGUF's array form of the same key */
    rc = known ? rad_dict_set_arr(&m->meta, "attention.sliding_window_pattern", RAD_VAL_BOOL, slide, n, e) : RAD_OK;
    free(slide);
    return rc;
}

/* What encoders (BERT, EmbeddingGemma) say beside the common fields: token types, the
 * activation by name, absolute positions, bidirectional attention (docs/KEYS.md, "Encoders"). */
static int read_encoder_fields(RadModelFile *m, const char *file, const json_t *root, RadErr *e) {
    const json_t *v;
    const char *s, *which;
    int64_t n;
    bool b = false;
    int rc = RAD_OK;
    if ((v = jget(root, "type_vocab_size")) &&
        ((rc = want_int(file, "type_vocab_size", v, 0, UINT32_MAX, &n, e)) ||
         (rc = rad_dict_set_u32(&m->meta, "model.n_token_types", (uint32_t)n, e))))
        return rc;
    static const char *act_fields[] = {"hidden_act", "hidden_activation", NULL};
    if ((v = jfirst(root, act_fields, &which)) &&
        ((rc = want_str(file, which, v, &s, e)) || (rc = rad_dict_set_str(&m->meta, "model.hidden_act", s, e))))
        return rc;
    if ((v = jget(root, "position_embedding_type")) &&
        ((rc = want_str(file, "position_embedding_type", v, &s, e)) ||
         (rc = rad_dict_set_str(&m->meta, "model.position_embedding_type", s, e))))
        return rc;
    if ((v = jget(root, "use_bidirectional_attention")) &&
        ((rc = want_bool(file, "use_bidirectional_attention", v, &b, e)) ||
         (rc = rad_dict_set_bool(&m->meta, "attention.bidirectional", b, e))))
        return rc;
    return rc;
}

int rad_hf_read_config(RadModelFile *m, const char *name, const char *json, size_t n,
                       const char *folder, RadErr *e) {
    json_t *root;
    int rc = json_open(name, json, n, &root, e);
    if (rc) return rc;
    const char *s;
    json_t *v = jget(root, "model_type");
    if (!v) {
        rc = rad_err_set(e, RAD_E_FORMAT, "%s: field 'model_type' is missing", name);
        goto out;
    }
    if ((rc = want_str(name, "model_type", v, &s, e)) ||
        (rc = rad_dict_set_str(&m->meta, "model.arch_id", s, e)))
        goto out;
    s = folder ? folder : "";
    if ((v = jget(root, "_name_or_path")) && (rc = want_str(name, "_name_or_path", v, &s, e))) goto out;
    if (!s[0] && folder) s = folder;
    if ((rc = rad_dict_set_str(&m->meta, "model.name", s, e)) ||
        (rc = rad_dict_set_str(&m->meta, "model.quant", "", e)))
        goto out;

    int64_t val[CFG_N];
    bool have[CFG_N];
    for (int i = 0; i < CFG_N; i++) {
        const char *which = NULL;
        v = jfirst(root, cfg_u32[i].fields, &which);
        have[i] = v != NULL;
        if (v && (rc = want_int(name, which, v, 0, UINT32_MAX, &val[i], e))) goto out;
    }
    if (!have[CFG_HEAD_KV] && have[CFG_HEAD]) {
        have[CFG_HEAD_KV] = true;
        val[CFG_HEAD_KV] = val[CFG_HEAD];
    }
    if (!have[CFG_HEAD_DIM] && have[CFG_EMBD] && have[CFG_HEAD] && val[CFG_HEAD] > 0) {
        have[CFG_HEAD_DIM] = true;
        val[CFG_HEAD_DIM] = val[CFG_EMBD] / val[CFG_HEAD];
    }
    for (int i = CFG_EXPERT; i <= CFG_EXPERT_USED; i++)
        if (!have[i]) {
            have[i] = true;
            val[i] = 0;
        }
    for (int i = 0; i < CFG_N; i++)
        if (have[i] && (rc = rad_dict_set_u32(&m->meta, cfg_u32[i].key, (uint32_t)val[i], e))) goto out;

    double d;
    const char *which = NULL;
    static const char *eps_fields[] = {"rms_norm_eps", "layer_norm_epsilon", "layer_norm_eps",
                                       "norm_eps", NULL};
    if ((v = jfirst(root, eps_fields, &which)) &&
        ((rc = want_pos(name, which, v, 1.0, &d, e)) ||
         (rc = rad_dict_set_f32(&m->meta, "model.rms_eps", (float)d, e))))
        goto out;
    json_t *rp = jget(root, "rope_parameters"), *rp_local = NULL;
    const char *rp_label = "rope_parameters";
    /* transformers 5 nests rope_parameters by layer type where they differ (Gemma 3): the full
     * layers' are the model's rope, the sliding layers' the local one (read below) */
    if (json_is_object(rp) && (jget(rp, "full_attention") || jget(rp, "sliding_attention"))) {
        rp_local = jget(rp, "sliding_attention");
        rp = jget(rp, "full_attention");
        rp_label = "rope_parameters.full_attention";
        if (rp && !json_is_object(rp)) {
            rc = bad_type(name, rp_label, "object", rp, e);
            goto out;
        }
    }
    d = 10000.0;
    if ((v = jget(root, "rope_theta"))) {
        if ((rc = want_pos(name, "rope_theta", v, 1e12, &d, e))) goto out;
    } else if (json_is_object(rp) && (v = jget(rp, "rope_theta"))) {
        char lab[64];
        snprintf(lab, sizeof lab, "%s.rope_theta", rp_label);
        if ((rc = want_pos(name, lab, v, 1e12, &d, e))) goto out;
    }
    if ((rc = rad_dict_set_f32(&m->meta, "model.rope_theta", (float)d, e))) goto out;
    /* sliding_window (Mistral; null: none) unless use_sliding_window turns it off (Qwen2 ships
     * a window it does not use) */
    bool use_swa = true;
    if ((v = jget(root, "use_sliding_window")) && (rc = want_bool(name, "use_sliding_window", v, &use_swa, e))) goto out;
    if (use_swa && (v = jget(root, "sliding_window"))) {
        int64_t w;
        if ((rc = want_int(name, "sliding_window", v, 0, UINT32_MAX, &w, e)) ||
            (w > 0 && (rc = rad_dict_set_u32(&m->meta, "attention.sliding_window", (uint32_t)w, e))))
            goto out;
    }
    bool b = false;
    if ((v = jget(root, "tie_word_embeddings")) &&
        ((rc = want_bool(name, "tie_word_embeddings", v, &b, e)) ||
         (rc = rad_dict_set_bool(&m->meta, "model.tie_embeddings", b, e))))
        goto out;
    if ((v = jget(root, "rope_scaling"))) {
        if ((rc = read_rope(m, name, "rope_scaling", v, e))) goto out;
    } else if (rp && (rc = read_rope(m, name, rp_label, rp, e))) {
        goto out;
    }
    if ((rc = read_local_attention(m, name, root, rp_local, e))) goto out;
    if ((rc = read_encoder_fields(m, name, root, e))) goto out;
    rc = flatten_into(&m->raw, "config", root, e);
out:
    json_decref(root);
    return rc;
}

int rad_hf_read_generation(RadModelFile *m, const char *name, const char *json, size_t n,
                           RadErr *e) {
    json_t *root;
    int rc = json_open(name, json, n, &root, e);
    if (rc) return rc;
    rc = flatten_into(&m->meta, "generation", root, e);
    if (!rc) rc = flatten_into(&m->raw, "generation_config", root, e);
    json_decref(root);
    return rc;
}

/* ---- chat templates -------------------------------------------------------------------------- */

int rad_hf_set_chat_template(RadModelFile *m, const char *tmpl, RadErr *e) {
    const char *kind = strstr(tmpl, "<|im_start|>")        ? "chatml"
                       : strstr(tmpl, "<|start_header_id|>") ? "llama3"
                       : strstr(tmpl, "[INST]")              ? "llama2"
                                                             : "unknown";
    int rc = rad_dict_set_str(&m->chat, "chat.template", tmpl, e);
    if (!rc) rc = rad_dict_set_str(&m->chat, "chat.kind", kind, e);
    return rc;
}

/* ---- tokenizer.json ------------------------------------------------------------------------- */

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

/* The vocabulary being assembled: token text by id, pointing into the JSON tree or holes. */
typedef struct Vocab {
    const char **tok;  /* [n] */
    int32_t *type;     /* [n] token_type values */
    float *score;      /* [n] Unigram scores, or NULL */
    uint64_t n;
    char *pad;         /* storage for "[PADn]" strings filling id holes */
} Vocab;

static void vocab_free(Vocab *v) {
    free(v->tok);
    free(v->type);
    free(v->score);
    free(v->pad);
    memset(v, 0, sizeof *v);
}

static int64_t vocab_find(const Vocab *v, const char *text) {
    for (uint64_t i = 0; i < v->n; i++)
        if (v->tok[i] && strcmp(v->tok[i], text) == 0) return (int64_t)i;
    return -1;
}

/* What the pre-tokenizer (and decoder) say about the tokenizer. */
typedef struct PreInfo {
    bool byte_level;        /* a ByteLevel pre-tokenizer or decoder */
    bool byte_level_regex;  /* a ByteLevel pre-tokenizer with use_regex (GPT-2's split) */
    bool digits;            /* a Digits pre-tokenizer with individual_digits */
    const char *split;      /* the first Split pre-tokenizer's regex, or NULL */
    const char *split_str;  /* the first Split pre-tokenizer's plain string pattern, or NULL */
    int space_prefix;       /* -1 unknown, else add_space_prefix */
} PreInfo;

/* The pre-tokenizer or decoder, read strictly: a component this tokenizer does not implement (or
 * a field of the wrong type) would make the ids differ from HF's without a word, so it is refused
 * by name. Decoders only shape text; those listed are the ones rad_tok_decode renders the same. */
static int scan_pre(const char *file, const char *label, const json_t *p, PreInfo *pi, bool is_decoder, RadErr *e) {
    if (!p) return RAD_OK;
    if (!json_is_object(p)) return bad_type(file, label, "object or null", p, e);
    char lab[128];
    snprintf(lab, sizeof lab, "%s.type", label);
    const char *t;
    int rc = want_str(file, lab, jget(p, "type") ? jget(p, "type") : json_null(), &t, e);
    if (rc) return rc;
    json_t *x;
    bool b = false;
    if (strcmp(t, "Sequence") == 0) {
        const char *key = is_decoder ? "decoders" : "pretokenizers";
        json_t *a = jget(p, key);
        snprintf(lab, sizeof lab, "%s.%s", label, key);
        if (!json_is_array(a)) return bad_type(file, lab, "array", a ? a : json_null(), e);
        for (size_t i = 0; i < json_array_size(a); i++) {
            snprintf(lab, sizeof lab, "%s.%s[%zu]", label, key, i);
            if ((rc = scan_pre(file, lab, json_array_get(a, i), pi, is_decoder, e))) return rc;
        }
    } else if (strcmp(t, "ByteLevel") == 0) {
        pi->byte_level = true;
        if (!is_decoder) {
            bool r = true;
            snprintf(lab, sizeof lab, "%s.use_regex", label);
            if ((x = jget(p, "use_regex")) && (rc = want_bool(file, lab, x, &r, e))) return rc;
            if (r) pi->byte_level_regex = true;
            snprintf(lab, sizeof lab, "%s.add_prefix_space", label);
            if ((x = jget(p, "add_prefix_space")) && (rc = want_bool(file, lab, x, &b, e))) return rc;
            if (x) pi->space_prefix = b;
        }
    } else if (!is_decoder && strcmp(t, "Split") == 0 && jget(jget(p, "pattern"), "String")) {
        /* a plain-string split (Gemma's " "): the caller checks it never fires */
        snprintf(lab, sizeof lab, "%s.pattern.String", label);
        const char *str;
        if ((rc = want_str(file, lab, jget(jget(p, "pattern"), "String"), &str, e))) return rc;
        if (pi->split_str)
            return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: %s: a second Split on a string is not implemented", file, label);
        pi->split_str = str;
    } else if (!is_decoder && strcmp(t, "Split") == 0) {
        snprintf(lab, sizeof lab, "%s.pattern.Regex", label);
        const char *re;
        if ((rc = want_str(file, lab, jget(jget(p, "pattern"), "Regex") ? jget(jget(p, "pattern"), "Regex") : json_null(), &re, e)))
            return rc;
        if (!pi->split) pi->split = re;
    } else if (!is_decoder && strcmp(t, "Digits") == 0) {
        snprintf(lab, sizeof lab, "%s.individual_digits", label);
        if ((x = jget(p, "individual_digits")) && (rc = want_bool(file, lab, x, &b, e))) return rc;
        if (x && b) pi->digits = true;
    } else if (strcmp(t, "Metaspace") == 0) {
        if (is_decoder) return RAD_OK;
        snprintf(lab, sizeof lab, "%s.prepend_scheme", label);
        const char *ps = NULL;
        if ((x = jget(p, "prepend_scheme")) && (rc = want_str(file, lab, x, &ps, e))) return rc;
        snprintf(lab, sizeof lab, "%s.add_prefix_space", label);
        if ((x = jget(p, "add_prefix_space")) && (rc = want_bool(file, lab, x, &b, e))) return rc;
        if (ps) pi->space_prefix = strcmp(ps, "never") != 0;
        else if (x) pi->space_prefix = b;
    } else if (is_decoder && (strcmp(t, "Replace") == 0 || strcmp(t, "ByteFallback") == 0 || strcmp(t, "Fuse") == 0 ||
                              strcmp(t, "Strip") == 0 || strcmp(t, "WordPiece") == 0)) {
        return RAD_OK;
    } else {
        return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: %s '%s' is not implemented (the ids or the text would differ from "
                           "Hugging Face's)", file, label, t);
    }
    return RAD_OK;
}

/* A normalizer that prepends "▁" (SentencePiece's dummy prefix). */
static bool has_prepend(const json_t *nz) {
    const char *t = json_string_value(jget(nz, "type"));
    if (!t) return false;
    if (strcmp(t, "Prepend") == 0) return true;
    if (strcmp(t, "Sequence") == 0) {
        json_t *a = jget(nz, "normalizers");
        for (size_t i = 0; i < json_array_size(a); i++)
            if (has_prepend(json_array_get(a, i))) return true;
    }
    return false;
}

/* A normalizer that replaces every " " by "▁" (SentencePiece's, Replace(String " ", "▁")),
 * alone or in a Sequence. */
static bool replaces_space(const json_t *nz) {
    const char *t = json_string_value(jget(nz, "type"));
    if (!t) return false;
    if (strcmp(t, "Replace") == 0) {
        const char *pat = json_string_value(jget(jget(nz, "pattern"), "String")), *to = json_string_value(jget(nz, "content"));
        return pat && to && strcmp(pat, " ") == 0 && strcmp(to, "\xe2\x96\x81") == 0;
    }
    if (strcmp(t, "Sequence") == 0) {
        json_t *a = jget(nz, "normalizers");
        for (size_t i = 0; i < json_array_size(a); i++)
            if (replaces_space(json_array_get(a, i))) return true;
    }
    return false;
}

static const char *pre_kind(const PreInfo *pi) {
    static const char llama3[] =
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
        "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    static const char qwen2[] =
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
        "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    if (pi->split) {
        if (strcmp(pi->split, llama3) == 0) return "llama-bpe";
        if (strcmp(pi->split, qwen2) == 0) return "qwen2";
        return "default";
    }
    if (pi->byte_level_regex) return pi->digits ? "smollm" : "gpt-2";
    return "default";
}

/* The text of a special-token field: "text" or {"content": "text"}; NULL when absent. */
static int special_text(const char *file, const char *field, const json_t *obj, const char **out,
                        RadErr *e) {
    *out = NULL;
    json_t *v = jget(obj, field);
    if (!v) return RAD_OK;
    if (json_is_object(v)) {
        char lab[64];
        snprintf(lab, sizeof lab, "%s.content", field);
        json_t *c = jget(v, "content");
        if (!c) return rad_err_set(e, RAD_E_FORMAT, "%s: field '%s' is missing", file, lab);
        return want_str(file, lab, c, out, e);
    }
    return want_str(file, field, v, out, e);
}

/* Fills v's ids from model.vocab (an object token→id, or Unigram's [[piece, score], ...]) and
 * added_tokens. */
static int read_vocab(const char *file, const json_t *model, const json_t *added, bool unigram,
                      bool byte_fallback, Vocab *v, RadErr *e) {
    json_t *vocab = jget(model, "vocab");
    if (!vocab) return rad_err_set(e, RAD_E_FORMAT, "%s: field 'model.vocab' is missing", file);
    if (unigram ? !json_is_array(vocab) : !json_is_object(vocab))
        return bad_type(file, "model.vocab", unigram ? "array" : "object", vocab, e);
    if (added && !json_is_array(added)) return bad_type(file, "added_tokens", "array", added, e);
    char lab[96];
    int rc;
    /* Pass 1: the largest id. */
    uint64_t count = unigram ? json_array_size(vocab) : json_object_size(vocab);
    int64_t maxid = (int64_t)count - 1, id;
    if (!unigram) {
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)vocab, k, x) {
            snprintf(lab, sizeof lab, "model.vocab['%.40s']", k);
            if ((rc = want_int(file, lab, x, 0, RAD_HF_MAX_VOCAB - 1, &id, e))) return rc;
            if (id > maxid) maxid = id;
        }
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i);
        snprintf(lab, sizeof lab, "added_tokens[%zu]", i);
        if (!json_is_object(a)) return bad_type(file, lab, "object", a, e);
        json_t *x = jget(a, "id");
        snprintf(lab, sizeof lab, "added_tokens[%zu].id", i);
        if (!x) return rad_err_set(e, RAD_E_FORMAT, "%s: field '%s' is missing", file, lab);
        if ((rc = want_int(file, lab, x, 0, RAD_HF_MAX_VOCAB - 1, &id, e))) return rc;
        if (id > maxid) maxid = id;
        count++;
    }
    uint64_t n = (uint64_t)(maxid + 1);
    /* Holes get "[PADn]" tokens; a vocabulary that is mostly holes is refused, so a hostile id
     * cannot make this allocate far beyond what the file holds. */
    if (n > 2 * count + 65536)
        return rad_err_set(e, RAD_E_FORMAT, "%s: token ids are sparse: id %" PRId64 " for %" PRIu64
                           " tokens", file, maxid, count);
    if (n == 0) return rad_err_set(e, RAD_E_FORMAT, "%s: the vocabulary is empty", file);
    v->n = n;
    v->tok = calloc(n, sizeof *v->tok);
    v->type = calloc(n, sizeof *v->type);
    if (unigram) v->score = calloc(n, sizeof *v->score);
    if (!v->tok || !v->type || (unigram && !v->score))
        return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory for %" PRIu64 " tokens", file, n);
    /* Pass 2: fill. */
    if (unigram) {
        for (size_t i = 0; i < json_array_size(vocab); i++) {
            json_t *p = json_array_get(vocab, i);
            snprintf(lab, sizeof lab, "model.vocab[%zu]", i);
            if (!json_is_array(p) || json_array_size(p) != 2 || !json_is_string(json_array_get(p, 0)) ||
                !json_is_number(json_array_get(p, 1)))
                return rad_err_set(e, RAD_E_FORMAT, "%s: field '%s': expected [string, number]",
                                   file, lab);
            v->tok[i] = json_string_value(json_array_get(p, 0));
            v->score[i] = (float)json_number_value(json_array_get(p, 1));
        }
    } else {
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)vocab, k, x) {
            uint64_t i = (uint64_t)json_integer_value(x);
            if (v->tok[i])
                return rad_err_set(e, RAD_E_FORMAT, "%s: model.vocab: id %" PRIu64
                                   " is used by both '%.40s' and '%.40s'", file, i, v->tok[i], k);
            v->tok[i] = k;
        }
    }
    for (uint64_t i = 0; i < n; i++) {
        if (!v->tok[i]) continue;
        v->type[i] = TT_NORMAL;
        const char *t = v->tok[i];
        if (byte_fallback && strlen(t) == 6 && memcmp(t, "<0x", 3) == 0 && t[5] == '>' &&
            strchr("0123456789ABCDEFabcdef", t[3]) && strchr("0123456789ABCDEFabcdef", t[4]))
            v->type[i] = TT_BYTE;
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i);
        const char *content;
        snprintf(lab, sizeof lab, "added_tokens[%zu].content", i);
        json_t *c = jget(a, "content");
        if (!c) return rad_err_set(e, RAD_E_FORMAT, "%s: field '%s' is missing", file, lab);
        if ((rc = want_str(file, lab, c, &content, e))) return rc;
        bool special = false;
        json_t *sp = jget(a, "special");
        snprintf(lab, sizeof lab, "added_tokens[%zu].special", i);
        if (sp && (rc = want_bool(file, lab, sp, &special, e))) return rc;
        id = (int64_t)json_integer_value(jget(a, "id"));
        v->tok[id] = content;
        v->type[id] = special ? TT_CONTROL : TT_USER;
    }
    uint64_t holes = 0;
    for (uint64_t i = 0; i < n; i++) holes += v->tok[i] == NULL;
    if (holes) {
        if (!(v->pad = malloc(holes * 24)))
            return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", file);
        char *p = v->pad;
        for (uint64_t i = 0; i < n; i++)
            if (!v->tok[i]) {
                snprintf(p, 24, "[PAD%u]", (unsigned)i);
                v->tok[i] = p;
                v->type[i] = TT_UNUSED;
                p += 24;
            }
    }
    return RAD_OK;
}

static int read_merges(const char *file, const json_t *merges, RadDict *tok, RadErr *e) {
    if (!json_is_array(merges)) return bad_type(file, "model.merges", "array", merges, e);
    size_t n = json_array_size(merges);
    char **out = calloc(n ? n : 1, sizeof *out);
    if (!out) return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", file);
    int rc = RAD_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        json_t *x = json_array_get(merges, i);
        if (json_is_string(x)) {
            if (!(out[i] = strdup(json_string_value(x))))
                rc = rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", file);
        } else if (json_is_array(x) && json_array_size(x) == 2 &&
                   json_is_string(json_array_get(x, 0)) && json_is_string(json_array_get(x, 1))) {
            if (asprintf(&out[i], "%s %s", json_string_value(json_array_get(x, 0)),
                         json_string_value(json_array_get(x, 1))) < 0) {
                out[i] = NULL;
                rc = rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", file);
            }
        } else {
            rc = rad_err_set(e, RAD_E_FORMAT, "%s: field 'model.merges[%zu]': expected \"a b\" or "
                             "[\"a\", \"b\"], got %s", file, i, jkind(x));
        }
    }
    if (!rc) rc = rad_dict_set_strarr(tok, "tokenizer.merges", (const char *const *)out, n, e);
    for (size_t i = 0; i < n; i++) free(out[i]);
    free(out);
    return rc;
}

/* WordPiece (tokenizer.model "bert"): BERT's pipeline, read strictly into the tokenizer.bert.* and
 * tokenizer.wordpiece.* keys (docs/KEYS.md). rad_tok_wpm.c implements BertNormalizer,
 * BertPreTokenizer, the WordPiece decoder and a [CLS] $A [SEP]-shaped template exactly; anything
 * else would give other ids than Hugging Face's, so it is refused by name. */
static int unsupported(const char *file, const char *field, const char *what, RadErr *e) {
    return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: %s: %s is not implemented for WordPiece (the ids or the text would "
                       "differ from Hugging Face's)", file, field, what);
}

static int only_keys(const char *file, const char *label, const json_t *o, const char *const *keys, RadErr *e) {
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)o, k, x) {
        bool ok = false;
        for (const char *const *q = keys; *q && !ok; q++) ok = strcmp(*q, k) == 0;
        if (!ok) {
            char f[128];
            snprintf(f, sizeof f, "%s.%.40s", label, k);
            return unsupported(file, f, "the field", e);
        }
    }
    return RAD_OK;
}

/* A template entry's special token: its one id. */
static int wp_special(const char *file, const char *field, const json_t *pp, const json_t *st, const Vocab *v,
                      int32_t *id, RadErr *e) {
    const char *name;
    int rc = want_str(file, field, jget(st, "id") ? jget(st, "id") : json_null(), &name, e);
    if (rc) return rc;
    json_t *ids = jget(jget(jget(pp, "special_tokens"), name), "ids");
    int64_t x = vocab_find(v, name);
    if (ids) {
        if (!json_is_array(ids) || json_array_size(ids) != 1 || !json_is_integer(json_array_get(ids, 0)))
            return unsupported(file, "post_processor.special_tokens", "a special token of other than one id", e);
        x = json_integer_value(json_array_get(ids, 0));
    }
    if (x < 0 || (uint64_t)x >= v->n)
        return rad_err_set(e, RAD_E_FORMAT, "%s: %s: '%s' is not a token of the vocabulary", file, field, name);
    *id = (int32_t)x;
    return RAD_OK;
}

static int read_wordpiece(const char *file, const json_t *root, const json_t *model, const Vocab *v, RadDict *tok,
                          const char **pre_name, RadErr *e) {
    int rc;
    json_t *x;
    /* model */
    const char *prefix = "##";
    int64_t max = 100;
    if ((x = jget(model, "continuing_subword_prefix")) &&
        (rc = want_str(file, "model.continuing_subword_prefix", x, &prefix, e)))
        return rc;
    if ((x = jget(model, "max_input_chars_per_word")) &&
        (rc = want_int(file, "model.max_input_chars_per_word", x, 0, UINT32_MAX, &max, e)))
        return rc;
    if (!json_string_value(jget(model, "unk_token")))
        return rad_err_set(e, RAD_E_FORMAT, "%s: field 'model.unk_token' is missing or not a string", file);
    if ((rc = rad_dict_set_str(tok, "tokenizer.wordpiece.prefix", prefix, e)) ||
        (rc = rad_dict_set_u32(tok, "tokenizer.wordpiece.max_chars", (uint32_t)max, e)))
        return rc;
    /* normalizer: none, or BertNormalizer */
    json_t *nz = jget(root, "normalizer");
    bool clean = false, cjk = false, lower = false, strip = false;
    if (nz && !json_is_null(nz)) {
        const char *t = json_string_value(jget(nz, "type"));
        if (!t || strcmp(t, "BertNormalizer") != 0) return unsupported(file, "normalizer.type", t ? t : "a normalizer without a type", e);
        static const char *const keys[] = {"type", "clean_text", "handle_chinese_chars", "strip_accents", "lowercase", NULL};
        if ((rc = only_keys(file, "normalizer", nz, keys, e))) return rc;
        clean = cjk = lower = true; /* HF's defaults */
        if (((x = jget(nz, "clean_text")) && (rc = want_bool(file, "normalizer.clean_text", x, &clean, e))) ||
            ((x = jget(nz, "handle_chinese_chars")) && (rc = want_bool(file, "normalizer.handle_chinese_chars", x, &cjk, e))) ||
            ((x = jget(nz, "lowercase")) && (rc = want_bool(file, "normalizer.lowercase", x, &lower, e))))
            return rc;
        strip = lower; /* strip_accents null: follow lowercase */
        if ((x = jget(nz, "strip_accents")) && !json_is_null(x) &&
            (rc = want_bool(file, "normalizer.strip_accents", x, &strip, e)))
            return rc;
    }
    if ((rc = rad_dict_set_bool(tok, "tokenizer.bert.clean_text", clean, e)) ||
        (rc = rad_dict_set_bool(tok, "tokenizer.bert.chinese_chars", cjk, e)) ||
        (rc = rad_dict_set_bool(tok, "tokenizer.bert.strip_accents", strip, e)) ||
        (rc = rad_dict_set_bool(tok, "tokenizer.bert.lowercase", lower, e)))
        return rc;
    /* pre-tokenizer: BertPreTokenizer alone; none is recorded ("none") for rad_tok to refuse */
    json_t *pre = jget(root, "pre_tokenizer");
    const char *pt = json_string_value(jget(pre, "type"));
    *pre_name = "none";
    if (pre && !json_is_null(pre)) {
        if (!pt || strcmp(pt, "BertPreTokenizer") != 0)
            return unsupported(file, "pre_tokenizer.type", pt ? pt : "a pre-tokenizer without a type", e);
        *pre_name = "bert";
    }
    /* decoder: WordPiece with the model's prefix; none leaves tokenizer.decoder unset (refused) */
    json_t *dec = jget(root, "decoder");
    if (dec && !json_is_null(dec)) {
        const char *dt = json_string_value(jget(dec, "type")), *dp = "##";
        bool cleanup = true;
        if (!dt || strcmp(dt, "WordPiece") != 0)
            return unsupported(file, "decoder.type", dt ? dt : "a decoder without a type", e);
        if (((x = jget(dec, "prefix")) && (rc = want_str(file, "decoder.prefix", x, &dp, e))) ||
            ((x = jget(dec, "cleanup")) && (rc = want_bool(file, "decoder.cleanup", x, &cleanup, e))))
            return rc;
        if (strcmp(dp, prefix) != 0) return unsupported(file, "decoder.prefix", "a prefix other than the model's", e);
        if ((rc = rad_dict_set_str(tok, "tokenizer.decoder", "WordPiece", e)) ||
            (rc = rad_dict_set_bool(tok, "tokenizer.wordpiece.cleanup", cleanup, e)))
            return rc;
    }
    /* added tokens: matched in the raw text, as rad_tok does */
    json_t *added = jget(root, "added_tokens");
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i);
        static const char *const flags[] = {"single_word", "lstrip", "rstrip", "normalized"};
        for (size_t k = 0; k < 4; k++) {
            char f[64];
            snprintf(f, sizeof f, "added_tokens[%zu].%s", i, flags[k]);
            bool b = false;
            if ((x = jget(a, flags[k])) && (rc = want_bool(file, f, x, &b, e))) return rc;
            if (b) return unsupported(file, f, "true", e);
        }
    }
    /* post-processor: [first] $A [last], each optional */
    json_t *pp = jget(root, "post_processor");
    int32_t cls = -1, sep = -1;
    const char *ppt = json_string_value(jget(pp, "type"));
    if (pp && !json_is_null(pp) && ppt && strcmp(ppt, "BertProcessing") == 0) {
        json_t *c = jget(pp, "cls"), *sp = jget(pp, "sep");
        if (!json_is_array(c) || json_array_size(c) != 2 || !json_is_integer(json_array_get(c, 1)) ||
            !json_is_array(sp) || json_array_size(sp) != 2 || !json_is_integer(json_array_get(sp, 1)))
            return rad_err_set(e, RAD_E_FORMAT, "%s: post_processor.cls/sep: expected [string, id]", file);
        int64_t ci = json_integer_value(json_array_get(c, 1)), si = json_integer_value(json_array_get(sp, 1));
        if (ci < 0 || (uint64_t)ci >= v->n || si < 0 || (uint64_t)si >= v->n)
            return rad_err_set(e, RAD_E_FORMAT, "%s: post_processor.cls/sep: an id outside the vocabulary", file);
        cls = (int32_t)ci, sep = (int32_t)si;
    } else if (pp && !json_is_null(pp) && ppt && strcmp(ppt, "TemplateProcessing") == 0) {
        json_t *single = jget(pp, "single");
        size_t n = json_array_size(single), seq = n;
        for (size_t i = 0; i < n; i++)
            if (jget(json_array_get(single, i), "Sequence")) {
                if (seq < n) return unsupported(file, "post_processor.single", "two sequences", e);
                seq = i;
            }
        if (seq == n || seq > 1 || n - seq > 2)
            return unsupported(file, "post_processor.single", "a template other than [special] $A [special]", e);
        json_t *st;
        if (seq == 1) {
            if (!(st = jget(json_array_get(single, 0), "SpecialToken")))
                return unsupported(file, "post_processor.single[0]", "an entry other than a SpecialToken", e);
            if ((rc = wp_special(file, "post_processor.single[0]", pp, st, v, &cls, e))) return rc;
        }
        if (n - seq == 2) {
            if (!(st = jget(json_array_get(single, n - 1), "SpecialToken")))
                return unsupported(file, "post_processor.single", "an entry other than a SpecialToken", e);
            if ((rc = wp_special(file, "post_processor.single", pp, st, v, &sep, e))) return rc;
        }
    } else if (pp && !json_is_null(pp)) {
        return unsupported(file, "post_processor.type", ppt ? ppt : "a post-processor without a type", e);
    }
    if (cls >= 0 && (rc = rad_dict_set_i32(tok, "tokenizer.cls_id", cls, e))) return rc;
    if (sep >= 0 && (rc = rad_dict_set_i32(tok, "tokenizer.sep_id", sep, e))) return rc;
    return RAD_OK;
}

/* add_bos/add_eos (and the token texts) implied by a TemplateProcessing post-processor. */
static void scan_post(const json_t *pp, int *add_bos, int *add_eos, const char **bos,
                      const char **eos) {
    const char *t = json_string_value(jget(pp, "type"));
    if (!t) return;
    if (strcmp(t, "Sequence") == 0) {
        json_t *a = jget(pp, "processors");
        for (size_t i = 0; i < json_array_size(a); i++)
            scan_post(json_array_get(a, i), add_bos, add_eos, bos, eos);
        return;
    }
    if (strcmp(t, "TemplateProcessing") != 0) return;
    json_t *single = jget(pp, "single");
    size_t n = json_array_size(single);
    if (n == 0) return;
    json_t *first = jget(json_array_get(single, 0), "SpecialToken");
    json_t *last = jget(json_array_get(single, n - 1), "SpecialToken");
    *add_bos = first != NULL;
    if (first) *bos = json_string_value(jget(first, "id"));
    *add_eos = n > 1 && last != NULL;
    if (n > 1 && last) *eos = json_string_value(jget(last, "id"));
}

/* A special token named by its text must be in the vocabulary: left unset, generation would not
 * stop at it (eos) or a prompt would lack it (bos), without a word. */
static int set_id(RadDict *tok, const char *key, const Vocab *v, const char *text, const char *file, const char *field,
                  RadErr *e) {
    if (!text) return RAD_OK;
    int64_t id = vocab_find(v, text);
    if (id < 0)
        return rad_err_set(e, RAD_E_FORMAT, "%s: %s '%s' is not a token of the vocabulary (%s)", file, field, text, key);
    return rad_dict_set_i32(tok, key, (int32_t)id, e);
}

/* tokenizer_config.json → chat.* (and the tokenizer_config parts of tok, given a vocabulary). */
static int read_tok_config(RadModelFile *m, const char *file, const json_t *cfg, const Vocab *v,
                           RadErr *e) {
    int rc;
    const char *bos, *eos, *unk, *pad;
    if ((rc = special_text(file, "bos_token", cfg, &bos, e)) ||
        (rc = special_text(file, "eos_token", cfg, &eos, e)) ||
        (rc = special_text(file, "unk_token", cfg, &unk, e)) ||
        (rc = special_text(file, "pad_token", cfg, &pad, e)))
        return rc;
    json_t *ct = jget(cfg, "chat_template");
    const char *tmpl = NULL;
    if (ct && json_is_array(ct)) {
        for (size_t i = 0; i < json_array_size(ct); i++) {
            json_t *x = json_array_get(ct, i);
            char lab[64];
            snprintf(lab, sizeof lab, "chat_template[%zu]", i);
            if (!json_is_object(x)) return bad_type(file, lab, "object", x, e);
            json_t *nm = jget(x, "name"), *tp = jget(x, "template");
            if (!json_is_string(nm) || !json_is_string(tp))
                return rad_err_set(e, RAD_E_FORMAT, "%s: field '%s': expected {\"name\": string, "
                                   "\"template\": string}", file, lab);
            if (!tmpl || strcmp(json_string_value(nm), "default") == 0) tmpl = json_string_value(tp);
            if (strcmp(json_string_value(nm), "default") == 0) break;
        }
    } else if (ct && (rc = want_str(file, "chat_template", ct, &tmpl, e))) {
        return rc;
    }
    if (tmpl && (rc = rad_hf_set_chat_template(m, tmpl, e))) return rc;
    if (bos && (rc = rad_dict_set_str(&m->chat, "chat.bos", bos, e))) return rc;
    if (eos && (rc = rad_dict_set_str(&m->chat, "chat.eos", eos, e))) return rc;
    if (!v) return RAD_OK;
    bool b = false;
    json_t *x;
    if ((x = jget(cfg, "add_bos_token")) &&
        ((rc = want_bool(file, "add_bos_token", x, &b, e)) ||
         (rc = rad_dict_set_bool(&m->tok, "tokenizer.add_bos", b, e))))
        return rc;
    if ((x = jget(cfg, "add_eos_token")) &&
        ((rc = want_bool(file, "add_eos_token", x, &b, e)) ||
         (rc = rad_dict_set_bool(&m->tok, "tokenizer.add_eos", b, e))))
        return rc;
    if ((rc = set_id(&m->tok, "tokenizer.bos_id", v, bos, file, "bos_token", e)) ||
        (rc = set_id(&m->tok, "tokenizer.eos_id", v, eos, file, "eos_token", e)) ||
        (rc = set_id(&m->tok, "tokenizer.unk_id", v, unk, file, "unk_token", e)) ||
        (rc = set_id(&m->tok, "tokenizer.pad_id", v, pad, file, "pad_token", e)))
        return rc;
    return RAD_OK;
}

/* tokenizer.eot_id: the chat format's end-of-turn token, when the vocabulary has it and no
 * id was set. */
static int set_eot(RadModelFile *m, RadErr *e) {
    const char *kind = NULL;
    const RadValue *toks = rad_dict_get(&m->tok, "tokenizer.tokens");
    if (rad_dict_get(&m->tok, "tokenizer.eot_id") || !toks || toks->arr_type != RAD_VAL_STRING ||
        rad_dict_gets(&m->chat, "chat.kind", &kind, NULL) != RAD_OK)
        return RAD_OK;
    const char *eot = strcmp(kind, "chatml") == 0   ? "<|im_end|>"
                      : strcmp(kind, "llama3") == 0 ? "<|eot_id|>"
                                                    : NULL;
    const RadStr *t = toks->v.arr;
    for (uint64_t i = 0; eot && i < toks->n && i <= INT32_MAX; i++)
        if (strcmp(t[i].p, eot) == 0) return rad_dict_set_i32(&m->tok, "tokenizer.eot_id", (int32_t)i, e);
    return RAD_OK;
}

int rad_hf_read_tokenizer(RadModelFile *m, const char *tok_name, const char *tok_json,
                          size_t tok_n, const char *cfg_name, const char *cfg_json, size_t cfg_n,
                          RadErr *e) {
    json_t *root = NULL, *cfg = NULL;
    Vocab v = {0};
    int rc = RAD_OK;
    if (cfg_json && (rc = json_open(cfg_name, cfg_json, cfg_n, &cfg, e))) return rc;
    if (!tok_json) {
        rc = cfg ? read_tok_config(m, cfg_name, cfg, NULL, e) : RAD_OK;
        goto out;
    }
    const char *file = tok_name;
    if ((rc = json_open(file, tok_json, tok_n, &root, e))) goto out;
    json_t *model = jget(root, "model");
    if (!model) {
        rc = rad_err_set(e, RAD_E_FORMAT, "%s: field 'model' is missing", file);
        goto out;
    }
    if (!json_is_object(model)) {
        rc = bad_type(file, "model", "object", model, e);
        goto out;
    }
    const char *mtype = NULL;
    json_t *x = jget(model, "type");
    if (x && (rc = want_str(file, "model.type", x, &mtype, e))) goto out;
    if (!mtype) mtype = jget(model, "merges") ? "BPE" : json_is_array(jget(model, "vocab")) ? "Unigram" : "";
    bool bpe = strcmp(mtype, "BPE") == 0, unigram = strcmp(mtype, "Unigram") == 0,
         wordpiece = strcmp(mtype, "WordPiece") == 0;
    if (!bpe && !unigram && !wordpiece) {
        rc = rad_err_set(e, RAD_E_UNSUPPORTED, "%s: tokenizer model type '%s' is not supported "
                         "(BPE, Unigram and WordPiece are)", file, mtype);
        goto out;
    }
    bool byte_fallback = false;
    if ((x = jget(model, "byte_fallback")) &&
        (rc = want_bool(file, "model.byte_fallback", x, &byte_fallback, e)))
        goto out;
    if ((rc = read_vocab(file, model, jget(root, "added_tokens"), unigram, byte_fallback, &v, e)))
        goto out;
    PreInfo pi = {.space_prefix = -1};
    const char *wp_pre = NULL;
    if (wordpiece ? (rc = read_wordpiece(file, root, model, &v, &m->tok, &wp_pre, e)) != RAD_OK
                  : (rc = scan_pre(file, "pre_tokenizer", jget(root, "pre_tokenizer"), &pi, false, e)) ||
                        (rc = scan_pre(file, "decoder", jget(root, "decoder"), &pi, true, e)))
        goto out;
    json_t *nz = jget(root, "normalizer");
    if (has_prepend(nz)) pi.space_prefix = 1;
    const bool spm = !wordpiece && !unigram && !pi.byte_level && byte_fallback;
    /* SentencePiece's " " -> "▁" without a Prepend (Gemma's tokenizer.json): no dummy prefix */
    if (spm && pi.space_prefix < 0 && replaces_space(nz)) pi.space_prefix = 0;
    /* A Split on " " after that normalizer finds no space: the identity, as Gemma 3's. Any other
     * string split would cut words this tokenizer keeps whole. */
    if (pi.split_str && !(spm && strcmp(pi.split_str, " ") == 0 && replaces_space(nz))) {
        rc = rad_err_set(e, RAD_E_UNSUPPORTED, "%s: pre_tokenizer Split on the string '%.40s' is not implemented (only "
                         "' ' after a normalizer that replaces every ' ' by '\xe2\x96\x81', where it never splits)",
                         file, pi.split_str);
        goto out;
    }
    /* The unknown token: model.unk_token (BPE, WordPiece) or model.unk_id (Unigram). */
    const char *unk = json_string_value(jget(model, "unk_token"));
    int64_t unk_id = unk ? vocab_find(&v, unk) : -1;
    /* present but not an id of this vocabulary: named, not ignored */
    if ((x = jget(model, "unk_id")) && (rc = want_int(file, "model.unk_id", x, 0, (int64_t)v.n - 1, &unk_id, e)))
        goto out;
    if (unk_id >= 0) {
        v.type[unk_id] = TT_UNKNOWN;
        if ((rc = rad_dict_set_i32(&m->tok, "tokenizer.unk_id", (int32_t)unk_id, e))) goto out;
    }
    const char *tmodel = wordpiece ? "bert" : unigram ? "t5"
                         : pi.byte_level ? "gpt2" : byte_fallback ? "llama" : "gpt2";
    if ((rc = rad_dict_set_str(&m->tok, "tokenizer.model", tmodel, e)) ||
        (rc = rad_dict_set_str(&m->tok, "tokenizer.pre", wordpiece ? wp_pre : pre_kind(&pi), e)) ||
        (rc = rad_dict_set_strarr(&m->tok, "tokenizer.tokens", v.tok, v.n, e)) ||
        (rc = rad_dict_set_arr(&m->tok, "tokenizer.token_type", RAD_VAL_I32, v.type, v.n, e)))
        goto out;
    if (v.score && (rc = rad_dict_set_arr(&m->tok, "tokenizer.scores", RAD_VAL_F32, v.score, v.n, e)))
        goto out;
    if (bpe && (x = jget(model, "merges")) && (rc = read_merges(file, x, &m->tok, e))) goto out;
    if (pi.split && (rc = rad_dict_set_str(&m->tok, "tokenizer.pre_pattern", pi.split, e))) goto out;
    const char *nzt = json_string_value(jget(nz, "type"));
    if (nzt && (rc = rad_dict_set_str(&m->tok, "tokenizer.normalizer", nzt, e))) goto out;
    if (pi.space_prefix >= 0 &&
        (rc = rad_dict_set_bool(&m->tok, "tokenizer.add_space_prefix", pi.space_prefix != 0, e)))
        goto out;
    /* BOS/EOS implied by the post-processor; tokenizer_config.json overrides them. */
    int add_bos = -1, add_eos = -1;
    const char *pbos = NULL, *peos = NULL;
    if (!wordpiece) /* BERT's template is tokenizer.cls_id / sep_id (read_wordpiece) */
        scan_post(jget(root, "post_processor"), &add_bos, &add_eos, &pbos, &peos);
    if (add_bos >= 0 && (rc = rad_dict_set_bool(&m->tok, "tokenizer.add_bos", add_bos, e))) goto out;
    if (add_eos >= 0 && (rc = rad_dict_set_bool(&m->tok, "tokenizer.add_eos", add_eos, e))) goto out;
    if ((rc = set_id(&m->tok, "tokenizer.bos_id", &v, pbos, file, "post_processor's first special token", e)) ||
        (rc = set_id(&m->tok, "tokenizer.eos_id", &v, peos, file, "post_processor's last special token", e)))
        goto out;
    if (cfg && (rc = read_tok_config(m, cfg_name, cfg, &v, e))) goto out;
    rc = set_eot(m, e);
out:
    vocab_free(&v);
    json_decref(root);
    json_decref(cfg);
    return rc;
}

/* ---- weights ---------------------------------------------------------------------------------- */

static int cmp_tensor_idx(const void *a, const void *b, void *arg) {
    const RadModelFile *m = arg;
    return strcmp(m->tensors[*(const uint64_t *)a].name, m->tensors[*(const uint64_t *)b].name);
}

static int64_t find_sorted(const RadModelFile *m, const uint64_t *idx, const char *name) {
    uint64_t lo = 0, hi = m->n_tensors;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(m->tensors[idx[mid]].name, name);
        if (c == 0) return (int64_t)idx[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

/* One shard named by the index. */
typedef struct Shard {
    const char *file;        /* as the index names it */
    const RadSrcEntry *en;   /* the source's member */
    int in;                  /* its index in m->ins once loaded */
} Shard;

static int cmp_shard(const void *a, const void *b) {
    const Shard *x = a, *y = b;
    return x->en < y->en ? -1 : x->en > y->en;
}

static int load_sharded(RadSrc *s, RadModelFile *m, RadErr *e) {
    RadIn in;
    int rc = rad_src_read(s, "model.safetensors.index.json", &in, RAD_HF_MAX_JSON, e);
    if (rc) return rc;
    const char *file = in.name;
    json_t *root = NULL, *slot = NULL;
    Shard *sh = NULL;
    uint64_t *idx = NULL;
    size_t nsh = 0;
    if ((rc = json_open(file, (const char *)in.data, (size_t)in.size, &root, e))) goto out;
    json_t *wm = jget(root, "weight_map");
    if (!wm) {
        rc = rad_err_set(e, RAD_E_FORMAT, "%s: field 'weight_map' is missing", file);
        goto out;
    }
    if (!json_is_object(wm)) {
        rc = bad_type(file, "weight_map", "object", wm, e);
        goto out;
    }
    size_t nw = json_object_size(wm);
    /* shard file -> its slot in sh: a hash, so 100,000 index entries cost no scan each */
    if (!(sh = calloc(nw ? nw : 1, sizeof *sh)) || !(slot = json_object())) {
        rc = rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", file);
        goto out;
    }
    const char *k;
    json_t *x;
    json_object_foreach(wm, k, x) {
        if (!json_is_string(x)) {
            rc = rad_err_set(e, RAD_E_FORMAT, "%s: field 'weight_map.%s': expected string, got %s",
                             file, k, jkind(x));
            goto out;
        }
        const char *f = json_string_value(x);
        if (json_object_get(slot, f)) continue;
        const RadSrcEntry *en = rad_src_find(s, f);
        if (!en) {
            rc = rad_err_set(e, RAD_E_NOTFOUND, "%s: shard '%s' (holding tensor '%s') is not in %s",
                             file, f, k, s->path);
            goto out;
        }
        if (json_object_set_new(slot, f, json_integer(0))) {
            rc = rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", file);
            goto out;
        }
        sh[nsh++] = (Shard){f, en, -1};
    }
    /* Load in the source's order: an archive is then read in one pass. */
    qsort(sh, nsh, sizeof *sh, cmp_shard);
    for (size_t j = 0; j < nsh; j++) json_integer_set(json_object_get(slot, sh[j].file), (json_int_t)j);
    for (size_t j = 0; j < nsh; j++) {
        RadIn sin;
        if ((rc = rad_src_read(s, sh[j].en->name, &sin, RAD_SRC_NO_LIMIT, e))) goto out;
        sh[j].in = m->n_ins;
        if ((rc = rad_safetensors_add(m, &sin, NULL, e))) goto out;
    }
    /* Every name once across shards, and every indexed tensor in the shard the index names. */
    if (!(idx = malloc((m->n_tensors ? m->n_tensors : 1) * sizeof *idx))) {
        rc = rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", file);
        goto out;
    }
    for (uint64_t i = 0; i < m->n_tensors; i++) idx[i] = i;
    qsort_r(idx, m->n_tensors, sizeof *idx, cmp_tensor_idx, m);
    for (uint64_t i = 1; i < m->n_tensors; i++) {
        const RadTensor *a = &m->tensors[idx[i - 1]], *b = &m->tensors[idx[i]];
        if (strcmp(a->name, b->name) == 0) {
            rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s' is in two shards: %s and %s",
                             s->path, a->name, m->ins[a->src].name, m->ins[b->src].name);
            goto out;
        }
    }
    json_object_foreach(wm, k, x) {
        const char *f = json_string_value(x);
        size_t j = (size_t)json_integer_value(json_object_get(slot, f));
        int64_t t = find_sorted(m, idx, k);
        if (t < 0 || m->tensors[t].src != sh[j].in) {
            rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s' is listed in shard '%s' but absent "
                             "from it", file, k, f);
            goto out;
        }
    }
out:
    free(idx);
    free(sh);
    json_decref(slot);
    json_decref(root);
    rad_in_close(&in);
    return rc;
}

int rad_hf_load_weights(RadSrc *s, RadModelFile *m, RadErr *e) {
    if (rad_src_has(s, "model.safetensors.index.json")) return load_sharded(s, m, e);
    const char *one = rad_src_has(s, "model.safetensors") ? "model.safetensors" : NULL;
    if (!one) {
        uint64_t count = 0, first = 0;
        for (uint64_t i = 0; i < s->n; i++) {
            const char *nm = s->entries[i].name;
            size_t l = strlen(nm);
            if (!strchr(nm, '/') && l > 12 && strcmp(nm + l - 12, ".safetensors") == 0) {
                if (!count) first = i;
                count++;
            }
        }
        if (count > 1)
            return rad_err_set(e, RAD_E_FORMAT, "%s: %" PRIu64 " .safetensors files but no "
                               "model.safetensors.index.json to say which are the model", s->path,
                               count);
        if (count == 1) one = s->entries[first].name;
    }
    if (!one) {
        if (rad_src_has(s, "pytorch_model.bin") || rad_src_has(s, "pytorch_model.bin.index.json"))
            return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: weights are pytorch_model.bin (pickle), "
                               "which is not read; save them as safetensors", s->path);
        return RAD_OK; /* a tokenizer/config-only folder */
    }
    RadIn in;
    int rc = rad_src_read(s, one, &in, RAD_SRC_NO_LIMIT, e);
    if (rc) return rc;
    return rad_safetensors_add(m, &in, NULL, e);
}

/* ---- a sentence-transformers folder: what follows the transformer -------------------------- */

/* Pooling/config.json's one mode, as the `pool` op's names it (docs/KEYS.md, "Embedding models").
 * Several modes at once (sentence-transformers concatenates them) and the weighted mean are refused. */
static int read_st_pooling(RadSrc *s, RadModelFile *m, const char *rel, RadErr *e) {
    RadIn in;
    json_t *root = NULL;
    int rc = rad_src_read(s, rel, &in, RAD_HF_MAX_JSON, e);
    if (rc) return rc;
    rc = json_open(rel, (const char *)in.data, (size_t)in.size, &root, e);
    rad_in_close(&in);
    if (rc) return rc;
    static const struct { const char *field, *mode; } modes[] = {
        {"pooling_mode_mean_tokens", "mean"}, {"pooling_mode_cls_token", "cls"}, {"pooling_mode_lasttoken", "last"},
        {"pooling_mode_max_tokens", "max"},   {"pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len"},
        {"pooling_mode_weightedmean_tokens", NULL},
    };
    const char *mode = NULL;
    for (size_t i = 0; i < sizeof modes / sizeof modes[0] && !rc; i++) {
        const json_t *v = jget(root, modes[i].field);
        bool on = false;
        if (!v || (rc = want_bool(rel, modes[i].field, v, &on, e)) || !on) continue;
        if (!modes[i].mode)
            rc = rad_err_set(e, RAD_E_UNSUPPORTED, "%s: field '%s': weighted-mean pooling is not served", rel, modes[i].field);
        else if (mode)
            rc = rad_err_set(e, RAD_E_UNSUPPORTED, "%s: pooling modes '%s' and '%s' both on (concatenated poolings are not "
                             "served)", rel, mode, modes[i].mode);
        else
            mode = modes[i].mode;
    }
    if (!rc && !mode) rc = rad_err_set(e, RAD_E_FORMAT, "%s: no pooling mode is on", rel);
    if (!rc) rc = rad_dict_set_str(&m->meta, "pooling.mode", mode, e);
    json_decref(root);
    return rc;
}

/* The Dense modules of a pipeline, in order: their folders, read after the model's weights. */
#define ST_MAX_DENSE 8
typedef struct StDense {
    char dir[512];            /* the module's path in the folder */
    uint32_t in, out;         /* in_features, out_features */
    bool bias;
} StDense;
typedef struct StPipe {
    uint32_t n_dense;
    StDense d[ST_MAX_DENSE];
} StPipe;

/* A Dense module's config.json: a linear layer (in_features -> out_features, bias or not) whose
 * activation is the identity, as pooling.dense.<k>.in / .out / .bias (docs/KEYS.md).
 * sentence-transformers' default activation (absent) is Tanh, which is not served; nor are any
 * other activation, a residual, other feature names or unknown fields: each is refused by name. */
static int read_st_dense(RadSrc *s, RadModelFile *m, const char *dir, uint32_t k, StPipe *p, RadErr *e) {
    static const char identity[] = "torch.nn.modules.linear.Identity";
    static const char *const keys[] = {"in_features", "out_features", "bias", "activation_function", "module_input_name",
                                       "module_output_name", "use_residual", NULL};
    char rel[600], key[64];
    if (k == ST_MAX_DENSE)
        return rad_err_set(e, RAD_E_LIMIT, "modules.json: more than %d Dense modules are not served", ST_MAX_DENSE);
    if (!*dir || strlen(dir) >= sizeof p->d[k].dir)
        return rad_err_set(e, RAD_E_FORMAT, "modules.json: Dense module %u: path '%.80s' is %s", k, dir,
                           *dir ? "too long" : "empty (a Dense module has a folder)");
    snprintf(rel, sizeof rel, "%s/config.json", dir);
    RadIn in;
    json_t *root = NULL;
    int rc = rad_src_read(s, rel, &in, RAD_HF_MAX_JSON, e);
    if (rc) return rc;
    rc = json_open(rel, (const char *)in.data, (size_t)in.size, &root, e);
    rad_in_close(&in);
    if (rc) return rc;
    StDense *d = &p->d[k];
    const char *f, *act = NULL, *name;
    json_t *x;
    int64_t v[2];
    bool b = false;
    json_object_foreach(root, f, x) {
        const char *const *q = keys;
        while (*q && strcmp(*q, f)) q++;
        if (!*q) {
            rc = rad_err_set(e, RAD_E_UNSUPPORTED, "%s: field '%.60s' is not served", rel, f);
            goto out;
        }
    }
    for (int i = 0; i < 2; i++) {
        const char *field = i ? "out_features" : "in_features";
        if (!(x = jget(root, field))) {
            rc = rad_err_set(e, RAD_E_FORMAT, "%s: field '%s' is missing", rel, field);
            goto out;
        }
        if ((rc = want_int(rel, field, x, 1, UINT32_MAX, &v[i], e))) goto out;
    }
    d->in = (uint32_t)v[0], d->out = (uint32_t)v[1], d->bias = true; /* sentence-transformers' default */
    if ((x = jget(root, "bias")) && (rc = want_bool(rel, "bias", x, &d->bias, e))) goto out;
    if ((x = jget(root, "activation_function")) && (rc = want_str(rel, "activation_function", x, &act, e))) goto out;
    if (!act) {
        rc = rad_err_set(e, RAD_E_UNSUPPORTED, "%s: activation_function is absent: sentence-transformers' default, "
                         "torch.nn.modules.activation.Tanh, is not served (%s only)", rel, identity);
        goto out;
    }
    if (strcmp(act, identity)) {
        rc = rad_err_set(e, RAD_E_UNSUPPORTED, "%s: activation_function '%.80s' is not served (%s only)", rel, act, identity);
        goto out;
    }
    if ((x = jget(root, "use_residual")) && (!(rc = want_bool(rel, "use_residual", x, &b, e))) && b)
        rc = rad_err_set(e, RAD_E_UNSUPPORTED, "%s: use_residual true is not served", rel);
    for (int i = 0; !rc && i < 2; i++) {
        const char *field = i ? "module_output_name" : "module_input_name";
        if ((x = jget(root, field)) && !json_is_null(x) && !(rc = want_str(rel, field, x, &name, e)) &&
            strcmp(name, "sentence_embedding"))
            rc = rad_err_set(e, RAD_E_UNSUPPORTED, "%s: %s '%.60s' is not served (sentence_embedding)", rel, field, name);
    }
    if (rc) goto out;
    if (k > 0 && d->in != p->d[k - 1].out) {
        rc = rad_err_set(e, RAD_E_FORMAT, "%s: in_features %u, but the Dense before it (%s) gives %u", rel, d->in,
                         p->d[k - 1].dir, p->d[k - 1].out);
        goto out;
    }
    snprintf(d->dir, sizeof d->dir, "%s", dir);
    p->n_dense = k + 1;
    snprintf(key, sizeof key, "pooling.dense.%u.in", k);
    if ((rc = rad_dict_set_u32(&m->meta, key, d->in, e))) goto out;
    snprintf(key, sizeof key, "pooling.dense.%u.out", k);
    if ((rc = rad_dict_set_u32(&m->meta, key, d->out, e))) goto out;
    snprintf(key, sizeof key, "pooling.dense.%u.bias", k);
    if ((rc = rad_dict_set_bool(&m->meta, key, d->bias, e))) goto out;
    rc = rad_dict_set_u32(&m->meta, "pooling.n_dense", k + 1, e);
out:
    json_decref(root);
    return rc;
}

/* Each Dense module's <dir>/model.safetensors, taken in as dense.<k>.weight (and .bias): nn.Linear's
 * linear.weight [out, in] and linear.bias [out], nothing else. The file's input moves into m->ins
 * (the tensors' planes point into it), as a shard's does. */
static int add_st_dense(RadSrc *s, RadModelFile *m, const StPipe *p, RadErr *e) {
    for (uint32_t k = 0; k < p->n_dense; k++) {
        const StDense *d = &p->d[k];
        char rel[600], bin[600], name[64];
        snprintf(rel, sizeof rel, "%s/model.safetensors", d->dir);
        snprintf(bin, sizeof bin, "%s/pytorch_model.bin", d->dir);
        if (!rad_src_has(s, rel))
            return rad_src_has(s, bin) ? rad_err_set(e, RAD_E_UNSUPPORTED, "%s: the Dense module's weights are %s (pickle), "
                                                     "which is not read; save them as safetensors", s->path, bin)
                                       : rad_err_set(e, RAD_E_NOTFOUND, "%s: the Dense module has no %s", s->path, rel);
        RadIn in;
        uint64_t first = 0;
        int rc = rad_src_read(s, rel, &in, RAD_SRC_NO_LIMIT, e);
        if (rc || (rc = rad_safetensors_add(m, &in, &first, e))) return rc;
        uint32_t seen = 0;
        for (uint64_t i = first; i < m->n_tensors; i++) {
            const RadTensor *t = &m->tensors[i];
            const int w = !strcmp(t->name, "linear.weight"), bias = !strcmp(t->name, "linear.bias");
            const uint64_t want[2] = {d->out, d->in};
            if (!w && !(bias && d->bias))
                return rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s' is not the Dense layer's (linear.weight%s)", rel, t->name,
                                   d->bias ? ", linear.bias" : "; config.json says bias false");
            if (t->rank != (w ? 2u : 1u) || t->shape[0] != want[0] || (w && t->shape[1] != want[1]))
                return rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s' is not %s (config.json: in_features %u, out_features %u)",
                                   rel, t->name, w ? "[out_features, in_features]" : "[out_features]", d->in, d->out);
            seen |= w ? 1u : 2u;
            snprintf(name, sizeof name, "dense.%u.%s", k, w ? "weight" : "bias");
            if ((rc = rad_model_rename_tensor(m, i, name, e))) return rc;
        }
        if (!(seen & 1u) || (d->bias && !(seen & 2u)))
            return rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s' is missing", rel, (seen & 1u) ? "linear.bias" : "linear.weight");
    }
    return RAD_OK;
}

/* modules.json (when present): Transformer first, then Pooling, then any Dense layers, then
 * optionally Normalize, as the pooling.* keys; sentence_bert_config.json's max_seq_length as
 * pooling.max_tokens. Any other module, or another order, is refused by name: a pipeline left
 * half applied would be a silent substitution. The Dense modules' folders land in *p. */
static int read_st_pipeline(RadSrc *s, RadModelFile *m, StPipe *p, RadErr *e) {
    p->n_dense = 0;
    if (!rad_src_has(s, "modules.json")) return RAD_OK;
    RadIn in;
    int rc = rad_src_read(s, "modules.json", &in, RAD_HF_MAX_JSON, e);
    if (rc) return rc;
    json_error_t je;
    json_t *mods = json_loadb((const char *)in.data, (size_t)in.size, JSON_REJECT_DUPLICATES, &je);
    rad_in_close(&in);
    if (!mods) return rad_err_set(e, RAD_E_FORMAT, "modules.json: invalid JSON at line %d, column %d: %s", je.line, je.column, je.text);
    int stage = 0; /* 0 nothing, 1 Transformer, 2 Pooling (and Dense), 3 Normalize */
    if (!json_is_array(mods)) rc = bad_type("modules.json", "(top level)", "array", mods, e);
    for (size_t i = 0; !rc && i < json_array_size(mods); i++) {
        const json_t *mo = json_array_get(mods, i), *v;
        char lab[48], rel[600];
        const char *type = NULL, *path = "";
        snprintf(lab, sizeof lab, "[%zu].type", i);
        if (!(v = jget(mo, "type"))) {
            rc = rad_err_set(e, RAD_E_FORMAT, "modules.json: field '%s' is missing", lab);
            break;
        }
        if ((rc = want_str("modules.json", lab, v, &type, e))) break;
        snprintf(lab, sizeof lab, "[%zu].path", i);
        if ((v = jget(mo, "path")) && (rc = want_str("modules.json", lab, v, &path, e))) break;
        const char *t = strncmp(type, "sentence_transformers.models.", 29) == 0 ? type + 29 : type;
        if (!strcmp(t, "Transformer") && stage == 0) {
            if (*path) rc = rad_err_set(e, RAD_E_UNSUPPORTED, "modules.json: the Transformer module at '%s' (only the "
                                        "folder's own model, path \"\", is read)", path);
            stage = 1;
        } else if (!strcmp(t, "Pooling") && stage == 1) {
            snprintf(rel, sizeof rel, "%s%sconfig.json", path, *path ? "/" : "");
            rc = read_st_pooling(s, m, rel, e);
            stage = 2;
        } else if (!strcmp(t, "Dense") && stage == 2) {
            rc = read_st_dense(s, m, path, p->n_dense, p, e);
        } else if (!strcmp(t, "Normalize") && stage == 2) {
            rc = rad_dict_set_bool(&m->meta, "pooling.normalize", true, e);
            stage = 3;
        } else {
            rc = rad_err_set(e, RAD_E_UNSUPPORTED, "modules.json: module %zu '%s'%s is not served%s", i, type,
                             stage == 3 ? " after Normalize" : "",
                             stage == 0 ? " (the pipeline must start with Transformer)"
                                        : " (served: Transformer, Pooling, Dense, Normalize, in that order)");
        }
    }
    json_decref(mods);
    if (!rc && stage < 2)
        rc = rad_err_set(e, RAD_E_FORMAT, "modules.json: no Pooling module after the Transformer (an embedding model pools)");
    if (rc || !rad_src_has(s, "sentence_bert_config.json")) return rc;
    json_t *root;
    if ((rc = rad_src_read(s, "sentence_bert_config.json", &in, RAD_HF_MAX_JSON, e))) return rc;
    rc = json_open("sentence_bert_config.json", (const char *)in.data, (size_t)in.size, &root, e);
    rad_in_close(&in);
    if (rc) return rc;
    const json_t *v;
    int64_t n;
    bool lower = false;
    if ((v = jget(root, "max_seq_length")) &&
        ((rc = want_int("sentence_bert_config.json", "max_seq_length", v, 1, UINT32_MAX, &n, e)) ||
         (rc = rad_dict_set_u32(&m->meta, "pooling.max_tokens", (uint32_t)n, e))))
        goto out;
    /* do_lower_case lowercases the text before the tokenizer: not applied here, so refused */
    if ((v = jget(root, "do_lower_case")) && !(rc = want_bool("sentence_bert_config.json", "do_lower_case", v, &lower, e)) &&
        lower)
        rc = rad_err_set(e, RAD_E_UNSUPPORTED, "sentence_bert_config.json: do_lower_case true is not served");
out:
    json_decref(root);
    return rc;
}

/* ---- the folder ------------------------------------------------------------------------------ */

/* Reads an optional JSON member into *in; *have false when absent. */
static int read_json_member(RadSrc *s, const char *rel, RadIn *in, bool *have, RadErr *e) {
    *have = false;
    memset(in, 0, sizeof *in);
    if (!rad_src_has(s, rel)) return RAD_OK;
    int rc = rad_src_read(s, rel, in, RAD_HF_MAX_JSON, e);
    if (!rc) *have = true;
    return rc;
}

int rad_hf_load(RadSrc *s, RadModelFile *m, RadErr *e) {
    snprintf(m->format, sizeof m->format, "hf");
    snprintf(m->path, sizeof m->path, "%s", s->path);
    m->alignment = 1;
    RadIn a = {0}, b = {0};
    bool ha, hb;
    int rc;
    if (!rad_src_has(s, "config.json"))
        return rad_err_set(e, RAD_E_NOTFOUND, "%s: no config.json", s->path);
    if ((rc = read_json_member(s, "config.json", &a, &ha, e))) return rc;
    rc = rad_hf_read_config(m, a.name, (const char *)a.data, (size_t)a.size, s->stem, e);
    rad_in_close(&a);
    if (rc) return rc;

    if ((rc = read_json_member(s, "generation_config.json", &a, &ha, e))) return rc;
    if (ha) rc = rad_hf_read_generation(m, a.name, (const char *)a.data, (size_t)a.size, e);
    rad_in_close(&a);
    if (rc) return rc;

    if ((rc = read_json_member(s, "tokenizer.json", &a, &ha, e))) return rc;
    if ((rc = read_json_member(s, "tokenizer_config.json", &b, &hb, e))) {
        rad_in_close(&a);
        return rc;
    }
    rc = rad_hf_read_tokenizer(m, a.name, ha ? (const char *)a.data : NULL, (size_t)a.size, b.name,
                               hb ? (const char *)b.data : NULL, (size_t)b.size, e);
    rad_in_close(&a);
    rad_in_close(&b);
    if (rc) return rc;

    /* Newer checkpoints keep the chat template in its own file. */
    if (!rad_dict_get(&m->chat, "chat.template") && rad_src_has(s, "chat_template.jinja")) {
        if ((rc = rad_src_read(s, "chat_template.jinja", &a, RAD_HF_MAX_JSON, e))) return rc;
        char *t = strndup((const char *)a.data, (size_t)a.size);
        rc = t ? rad_hf_set_chat_template(m, t, e) : rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", a.name);
        free(t);
        rad_in_close(&a);
        if (rc || (rc = set_eot(m, e))) return rc;
    }

    /* BOS/EOS ids from config.json when the tokenizer files did not name them. */
    if (m->tok.n) {
        static const char *ids[][2] = {{"config.bos_token_id", "tokenizer.bos_id"},
                                       {"config.eos_token_id", "tokenizer.eos_id"}};
        for (int i = 0; i < 2; i++) {
            int64_t id;
            if (!rad_dict_get(&m->tok, ids[i][1]) && rad_dict_geti(&m->raw, ids[i][0], &id, NULL) == RAD_OK &&
                id >= 0 && id <= INT32_MAX && (rc = rad_dict_set_i32(&m->tok, ids[i][1], (int32_t)id, e)))
                return rc;
        }
    }

    StPipe pipe;
    if ((rc = read_st_pipeline(s, m, &pipe, e))) return rc;
    if ((rc = rad_hf_load_weights(s, m, e))) return rc;
    if ((rc = rad_hf_fold_fp8(m, s->path, e))) return rc;
    if ((rc = add_st_dense(s, m, &pipe, e))) return rc; /* after the model's: its input stays ins[0] */
    if (!rad_dict_get(&m->meta, "model.tie_embeddings") && m->n_tensors > 0 &&
        (rc = rad_dict_set_bool(&m->meta, "model.tie_embeddings", !rad_model_find(m, "lm_head.weight"), e)))
        return rc;
    return RAD_OK;
}
