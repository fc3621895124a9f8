/* rad_gguf.c — the GGUF v2/v3 reader. See rad_gguf.h for what it fills and checks. */
#include "libcommon/format/rad_gguf.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- ggml types ----------------------------------------------------------------------- */

static const char *const ggml_type_names[] = {
    [0] = "f32",      [1] = "f16",     [2] = "q4_0",    [3] = "q4_1",    [6] = "q5_0",
    [7] = "q5_1",     [8] = "q8_0",    [9] = "q8_1",    [10] = "q2_k",   [11] = "q3_k",
    [12] = "q4_k",    [13] = "q5_k",   [14] = "q6_k",   [15] = "q8_k",   [16] = "iq2_xxs",
    [17] = "iq2_xs",  [18] = "iq3_xxs", [19] = "iq1_s", [20] = "iq4_nl", [21] = "iq3_s",
    [22] = "iq2_s",   [23] = "iq4_xs", [24] = "i8",     [25] = "i16",    [26] = "i32",
    [27] = "i64",     [28] = "f64",    [29] = "iq1_m",  [30] = "bf16",   [34] = "tq1_0",
    [35] = "tq2_0",   [39] = "mxfp4",
};

static const struct {
    uint32_t type;
    RadEnc enc;
} ggml_encs[] = {
    {0, RAD_ENC_F32},   {1, RAD_ENC_F16},   {2, RAD_ENC_Q4_0},  {3, RAD_ENC_Q4_1},
    {6, RAD_ENC_Q5_0},  {7, RAD_ENC_Q5_1},  {8, RAD_ENC_Q8_0},  {12, RAD_ENC_Q4_K},
    {13, RAD_ENC_Q5_K}, {14, RAD_ENC_Q6_K}, {24, RAD_ENC_I8},   {25, RAD_ENC_I16},
    {26, RAD_ENC_I32},  {27, RAD_ENC_I64},  {28, RAD_ENC_F64},  {30, RAD_ENC_BF16},
};

const char *rad_gguf_type_name(uint32_t t) {
    return t < sizeof ggml_type_names / sizeof ggml_type_names[0] ? ggml_type_names[t] : NULL;
}

bool rad_gguf_type_to_enc(uint32_t t, RadEnc *out) {
    for (size_t i = 0; i < sizeof ggml_encs / sizeof ggml_encs[0]; i++)
        if (ggml_encs[i].type == t) {
            *out = ggml_encs[i].enc;
            return true;
        }
    return false;
}

int rad_gguf_enc_to_type(RadEnc enc) {
    for (size_t i = 0; i < sizeof ggml_encs / sizeof ggml_encs[0]; i++)
        if (ggml_encs[i].enc == enc) return (int)ggml_encs[i].type;
    return -1;
}

const char *rad_gguf_ftype_name(uint32_t ft) {
    static const char *const n[] = {
        [0] = "",         [1] = "",         [2] = "q4_0",     [3] = "q4_1",
        [7] = "q8_0",     [8] = "q5_0",     [9] = "q5_1",     [10] = "q2_k",
        [11] = "q3_k_s",  [12] = "q3_k_m",  [13] = "q3_k_l",  [14] = "q4_k_s",
        [15] = "q4_k_m",  [16] = "q5_k_s",  [17] = "q5_k_m",  [18] = "q6_k",
        [19] = "iq2_xxs", [20] = "iq2_xs",  [21] = "q2_k_s",  [22] = "iq3_xs",
        [23] = "iq3_xxs", [24] = "iq1_s",   [25] = "iq4_nl",  [26] = "iq3_s",
        [27] = "iq3_m",   [28] = "iq2_s",   [29] = "iq2_m",   [30] = "iq4_xs",
        [31] = "iq1_m",   [32] = "",        [36] = "tq1_0",   [37] = "tq2_0",
        [38] = "mxfp4_moe",
    };
    return ft < sizeof n / sizeof n[0] ? n[ft] : NULL;
}

bool rad_gguf_sniff(const uint8_t *p, uint64_t n) { return n >= 4 && memcmp(p, "GGUF", 4) == 0; }

/* ---- header --------------------------------------------------------------------------- */

/* Smallest tensor info: u64 name length, u32 n_dims, u32 type, u64 offset. */
#define MIN_TENSOR_INFO 24u

/* A tensor being read; its name is owned here until the model takes it. */
typedef struct TInfo {
    uint64_t b, end; /* data bytes [b, end) relative to the data area */
    uint64_t idx;    /* index in m->tensors */
} TInfo;

static int cmp_offset(const void *a, const void *b) {
    const TInfo *x = a, *y = b;
    if (x->b != y->b) return x->b < y->b ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* qsort has no context argument: names are compared through a pointer table. */
static int cmp_name(const void *a, const void *b) {
    const char *const *x = a, *const *y = b;
    return strcmp(*x, *y);
}

static int read_header(RadIn *in, uint32_t *version, uint64_t *n_tensors, uint64_t *n_kv,
                       RadErr *e) {
    const char *f = in->name;
    uint8_t magic[4];
    int rc = rad_in_read(in, magic, 4, "magic", e);
    if (rc) return rc;
    if (memcmp(magic, "GGUF", 4) != 0)
        return rad_err_set(e, RAD_E_FORMAT,
                           "%s: not a GGUF file (magic %02x %02x %02x %02x, want \"GGUF\")", f,
                           magic[0], magic[1], magic[2], magic[3]);
    uint32_t v;
    if ((rc = rad_in_u32(in, &v, "version", e))) return rc;
    if (v == 1)
        return rad_err_set(e, RAD_E_UNSUPPORTED,
                           "%s: GGUF version 1 is not supported (only versions 2 and 3)", f);
    if (v != 2 && v != 3) {
        uint32_t sw = (v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24);
        if (sw == 2 || sw == 3)
            return rad_err_set(e, RAD_E_UNSUPPORTED,
                               "%s: big-endian GGUF (version %u byte-swapped) is not supported", f,
                               sw);
        return rad_err_set(e, RAD_E_UNSUPPORTED,
                           "%s: unknown GGUF version %u (only versions 2 and 3)", f, v);
    }
    *version = v;
    if ((rc = rad_in_u64(in, n_tensors, "tensor count", e))) return rc;
    if ((rc = rad_in_u64(in, n_kv, "metadata count", e))) return rc;
    uint64_t rem = rad_in_remaining(in);
    if (rem != UINT64_MAX && *n_tensors > rem / MIN_TENSOR_INFO)
        return rad_err_set(e, RAD_E_FORMAT,
                           "%s: tensor count %" PRIu64 " is more than the %" PRIu64
                           " bytes left can hold (truncated or corrupt)",
                           f, *n_tensors, rem);
    if (*n_tensors > RAD_GGUF_MAX_TENSORS)
        return rad_err_set(e, RAD_E_FORMAT, "%s: tensor count %" PRIu64 " exceeds the limit of %u",
                           f, *n_tensors, RAD_GGUF_MAX_TENSORS);
    return RAD_OK;
}

static int read_alignment(const RadModelFile *m, uint32_t *out, RadErr *e) {
    const char *f = m->ins[0].name;
    const RadValue *v = rad_dict_get(&m->raw, "general.alignment");
    *out = RAD_GGUF_DEFAULT_ALIGNMENT;
    if (!v) return RAD_OK;
    int64_t a = 0;
    RadErr le = {0};
    if (v->type == RAD_VAL_BOOL || rad_dict_geti(&m->raw, "general.alignment", &a, &le))
        return rad_err_set(e, RAD_E_FORMAT, "%s: metadata 'general.alignment': expected an integer, got %s",
                           f, rad_val_type_name(v->type));
    if (a <= 0 || a > (int64_t)1 << 30 || (a & (a - 1)) != 0)
        return rad_err_set(e, RAD_E_FORMAT,
                           "%s: metadata 'general.alignment': %" PRId64
                           " is not a non-zero power of two (at most 2^30)",
                           f, a);
    *out = (uint32_t)a;
    return RAD_OK;
}

/* Reads one tensor info and adds the tensor to m (its plane offset relative to the data
 * area; data pointers are set later). */
static int read_tensor_info(RadModelFile *m, uint64_t i, RadErr *e) {
    RadIn *in = &m->ins[0];
    const char *f = in->name;
    char what[64];
    snprintf(what, sizeof what, "tensor #%" PRIu64 " name", i);
    uint64_t len;
    int rc = rad_in_u64(in, &len, what, e);
    if (rc) return rc;
    if (len > rad_in_remaining(in))
        return rad_err_set(e, RAD_E_FORMAT,
                           "%s: tensor #%" PRIu64 ": name length %" PRIu64
                           " exceeds the %" PRIu64 " bytes left",
                           f, i, len, rad_in_remaining(in));
    RadTensor t;
    memset(&t, 0, sizeof t);
    if ((rc = rad_in_read_alloc(in, len, &t.name, what, e))) return rc;
    if (strlen(t.name) != len) {
        rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor #%" PRIu64 ": name holds a NUL byte", f, i);
        goto fail;
    }
    if (!rad_utf8_valid(t.name, len)) {
        rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor #%" PRIu64 ": name is not valid UTF-8", f, i);
        goto fail;
    }
    if (len == 0) {
        rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor #%" PRIu64 ": name is empty", f, i);
        goto fail;
    }
    const char *tn = t.name;
    uint32_t n_dims;
    if ((rc = rad_in_u32(in, &n_dims, "tensor n_dims", e))) goto fail;
    if (n_dims > RAD_GGUF_MAX_DIMS) {
        rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s': n_dims %u exceeds GGUF's %d", f, tn,
                         n_dims, RAD_GGUF_MAX_DIMS);
        goto fail;
    }
    uint64_t ne[RAD_GGUF_MAX_DIMS];
    for (uint32_t d = 0; d < n_dims; d++) {
        if ((rc = rad_in_u64(in, &ne[d], "tensor dims", e))) goto fail;
        if (ne[d] == 0 || ne[d] > (uint64_t)INT64_MAX) {
            rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s': ne[%u] is %" PRIu64 "%s", f, tn, d,
                             ne[d], ne[d] ? ", beyond int64" : "");
            goto fail;
        }
    }
    uint32_t type;
    if ((rc = rad_in_u32(in, &type, "tensor type", e))) goto fail;
    if (!rad_gguf_type_to_enc(type, &t.enc)) {
        const char *nm = rad_gguf_type_name(type);
        if (nm)
            rc = rad_err_set(e, RAD_E_UNSUPPORTED,
                             "%s: tensor '%s': ggml type %u (%s) is not supported", f, tn, type, nm);
        else
            rc = rad_err_set(e, RAD_E_UNSUPPORTED, "%s: tensor '%s': unknown ggml type %u", f,
                             tn, type);
        goto fail;
    }
    uint64_t off;
    if ((rc = rad_in_u64(in, &off, "tensor offset", e))) goto fail;
    t.rank = n_dims;
    for (uint32_t d = 0; d < n_dims; d++) t.shape[d] = ne[n_dims - 1 - d];
    uint64_t nbytes = 0;
    RadErr le = {0};
    if ((rc = rad_tensor_bytes(t.enc, t.rank, t.shape, NULL, &nbytes, tn, &le))) {
        rc = rad_err_set(e, le.code, "%s: %s", f, le.msg);
        goto fail;
    }
    if (off % m->alignment != 0) {
        rc = rad_err_set(e, RAD_E_FORMAT,
                         "%s: tensor '%s': offset %" PRIu64 " is not a multiple of the alignment %u",
                         f, tn, off, m->alignment);
        goto fail;
    }
    if (off > UINT64_MAX - nbytes) {
        rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s': offset %" PRIu64 " + %" PRIu64
                         " bytes overflows", f, tn, off, nbytes);
        goto fail;
    }
    t.n_planes = 1;
    memcpy(t.planes[0].name, "data", 5);
    t.planes[0].offset = off;
    t.planes[0].nbytes = t.planes[0].stored_bytes = nbytes;
    t.src = 0;
    return rad_model_add_tensor(m, &t, e);
fail:
    free(t.name);
    return rc;
}

/* Offsets inside the file, no overlaps, no duplicate names; then data pointers. */
static int check_tensors(RadModelFile *m, RadErr *e) {
    RadIn *in = &m->ins[0];
    const char *f = in->name;
    uint64_t n = m->n_tensors;
    if (n == 0) return RAD_OK;
    bool mapped = rad_in_is_mapped(in);
    int rc = RAD_OK;
    TInfo *ti = calloc(n, sizeof *ti);
    const char **names = calloc(n, sizeof *names);
    if (!ti || !names) {
        rc = rad_err_set(e, RAD_E_NOMEM, "%s: out of memory checking %" PRIu64 " tensors", f, n);
        goto out;
    }
    for (uint64_t i = 0; i < n; i++) {
        const RadTensor *t = &m->tensors[i];
        ti[i].b = t->planes[0].offset;
        ti[i].end = t->planes[0].offset + t->planes[0].nbytes; /* no overflow: checked on read */
        ti[i].idx = i;
        names[i] = t->name;
        if (mapped) {
            uint64_t size = in->size, d0 = m->data_offset;
            if (d0 > size || ti[i].b > size - d0 || ti[i].end - ti[i].b > size - d0 - ti[i].b) {
                if (ti[i].end <= UINT64_MAX - d0)
                    rc = rad_err_set(e, RAD_E_FORMAT,
                                     "%s: tensor '%s': data [%" PRIu64 ", %" PRIu64
                                     ") past end of file (%" PRIu64 " bytes)",
                                     f, t->name, d0 + ti[i].b, d0 + ti[i].end, size);
                else
                    rc = rad_err_set(e, RAD_E_FORMAT,
                                     "%s: tensor '%s': data at offset %" PRIu64 " + %" PRIu64
                                     " past end of file (%" PRIu64 " bytes)",
                                     f, t->name, ti[i].b, ti[i].end - ti[i].b, size);
                goto out;
            }
        }
    }
    qsort(names, n, sizeof *names, cmp_name);
    for (uint64_t i = 1; i < n; i++)
        if (strcmp(names[i - 1], names[i]) == 0) {
            rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s' appears twice", f, names[i]);
            goto out;
        }
    qsort(ti, n, sizeof *ti, cmp_offset);
    for (uint64_t i = 1; i < n; i++)
        if (ti[i].b < ti[i - 1].end) {
            const RadTensor *a = &m->tensors[ti[i - 1].idx], *b = &m->tensors[ti[i].idx];
            rc = rad_err_set(e, RAD_E_FORMAT,
                             "%s: tensors '%s' [%" PRIu64 ", %" PRIu64 ") and '%s' [%" PRIu64
                             ", %" PRIu64 ") overlap (offsets in the data area)",
                             f, a->name, ti[i - 1].b, ti[i - 1].end, b->name, ti[i].b, ti[i].end);
            goto out;
        }
    if (mapped)
        for (uint64_t i = 0; i < n; i++) {
            RadPlane *p = &m->tensors[i].planes[0];
            p->data = in->data + m->data_offset + p->offset;
        }
out:
    free(ti);
    free(names);
    return rc;
}

/* ---- docs/KEYS.md mapping ------------------------------------------------------------ */

static bool is_uint_value(const RadValue *v, uint64_t max, uint64_t *out) {
    switch (v->type) {
    case RAD_VAL_U8: case RAD_VAL_U16: case RAD_VAL_U32: case RAD_VAL_U64:
        if (v->v.u > max) return false;
        *out = v->v.u;
        return true;
    case RAD_VAL_I8: case RAD_VAL_I16: case RAD_VAL_I32: case RAD_VAL_I64:
        if (v->v.i < 0 || (uint64_t)v->v.i > max) return false;
        *out = (uint64_t)v->v.i;
        return true;
    default: return false;
    }
}

/* A number that converts to f32 without overflow (NaN passes as it is). */
static bool is_f32_value(const RadValue *v, double *out) {
    double x;
    uint64_t u;
    if (v->type == RAD_VAL_F32 || v->type == RAD_VAL_F64) x = v->v.f;
    else if (is_uint_value(v, UINT64_MAX, &u)) x = (double)u;
    else return false;
    if (x > FLT_MAX || x < -FLT_MAX) return false;
    *out = x;
    return true;
}

/* {arch}.<suffix> keys that become model.* (u32, or f32 in (0, max] when is_f32). */
static const struct {
    const char *suffix, *key;
    bool is_f32;
    double max;
} arch_keys[] = {
    {"block_count", "model.n_layers", false, 0},
    {"embedding_length", "model.n_embd", false, 0},
    {"attention.head_count", "model.n_head", false, 0},
    {"attention.head_count_kv", "model.n_head_kv", false, 0},
    {"attention.key_length", "model.head_dim", false, 0},
    {"feed_forward_length", "model.n_ff", false, 0},
    {"vocab_size", "model.n_vocab", false, 0},
    {"context_length", "model.n_ctx_train", false, 0},
    {"expert_count", "model.n_expert", false, 0},
    {"expert_used_count", "model.n_expert_used", false, 0},
    {"attention.layer_norm_rms_epsilon", "model.rms_eps", true, 1.0},
    {"rope.freq_base", "model.rope_theta", true, 1e12},
};
#define N_ARCH_KEYS (sizeof arch_keys / sizeof arch_keys[0])

/* "a string", "an f32", "an array of u32": a value's kind, for messages. */
static void kind_of(const RadValue *v, char *buf, size_t n) {
    const char *t = rad_val_type_name(v->type == RAD_VAL_ARRAY ? v->arr_type : v->type);
    if (v->type == RAD_VAL_ARRAY) snprintf(buf, n, "an array of %s", t);
    else snprintf(buf, n, "%s %s", t[0] == 'i' || t[0] == 'f' ? "an" : "a", t);
}

/* A scalar model.* key that is present but cannot be what it must be: named, with its type
 * or value, rather than read as absent (a string block_count is not "n_layers 0"). */
static int bad_arch_key(const char *f, const char *key, bool is_f32, double max, const RadValue *v, RadErr *e) {
    char k[48];
    kind_of(v, k, sizeof k);
    bool num = v->type == RAD_VAL_F32 || v->type == RAD_VAL_F64;
    bool integer = rad_val_scalar_size(v->type) && !num && v->type != RAD_VAL_BOOL;
    if (!is_f32 && !integer)
        return rad_err_set(e, RAD_E_FORMAT, "%s: key '%s' is %s, expected an integer", f, key, k);
    bool sgn = v->type == RAD_VAL_I8 || v->type == RAD_VAL_I16 || v->type == RAD_VAL_I32 || v->type == RAD_VAL_I64;
    if (!is_f32 && sgn)
        return rad_err_set(e, RAD_E_FORMAT, "%s: key '%s': %" PRId64 " is out of range [0, %u]", f, key,
                           v->v.i, UINT32_MAX);
    if (!is_f32)
        return rad_err_set(e, RAD_E_FORMAT, "%s: key '%s': %" PRIu64 " is out of range [0, %u]", f, key,
                           v->v.u, UINT32_MAX);
    if (!num && !integer)
        return rad_err_set(e, RAD_E_FORMAT, "%s: key '%s' is %s, expected a number", f, key, k);
    double x = num ? v->v.f : sgn ? (double)v->v.i : (double)v->v.u;
    return rad_err_set(e, RAD_E_FORMAT, "%s: key '%s': %g is not a finite number in (0, %g]", f, key, x, max);
}

/* Any float in an {arch}.* value (a scalar, or an array of them) that is NaN or infinite. */
static bool non_finite(const RadValue *v, uint64_t *at) {
    if (v->type == RAD_VAL_F32 || v->type == RAD_VAL_F64) return *at = 0, !isfinite(v->v.f);
    if (v->type != RAD_VAL_ARRAY || (v->arr_type != RAD_VAL_F32 && v->arr_type != RAD_VAL_F64)) return false;
    for (uint64_t i = 0; i < v->n; i++) {
        double x;
        if (v->arr_type == RAD_VAL_F32) {
            float y;
            memcpy(&y, (const uint8_t *)v->v.arr + 4 * i, 4);
            x = y;
        } else {
            memcpy(&x, (const uint8_t *)v->v.arr + 8 * i, 8);
        }
        if (!isfinite(x)) return *at = i, true;
    }
    return false;
}

/* The quant descriptor when general.file_type is absent or unknown: "" when every tensor is
 * plain, else the block encoding holding the most bytes. */
static const char *quant_from_tensors(const RadModelFile *m) {
    uint64_t bytes[RAD_ENC_COUNT] = {0};
    for (uint64_t i = 0; i < m->n_tensors; i++)
        bytes[m->tensors[i].enc] += m->tensors[i].planes[0].nbytes;
    int best = -1;
    for (int k = 0; k < RAD_ENC_COUNT; k++)
        if (rad_enc_info((RadEnc)k)->block_elems > 1 && bytes[k] &&
            (best < 0 || bytes[k] > bytes[best]))
            best = k;
    return best < 0 ? "" : rad_enc_info((RadEnc)best)->name;
}

/* GGUF names a layer's tensors "blk.N." (the format's convention, whatever the model): the
 * layers the tensors hold must be the ones block_count says, or the file converts and runs as
 * a model of another depth. Files without layer tensors (vocab-only) pass. */
static int check_layers(const RadModelFile *m, const char *arch, uint64_t n_layers, RadErr *e) {
    const char *f = m->ins[0].name;
    uint64_t top = 0;
    const char *top_name = NULL;
    for (uint64_t i = 0; i < m->n_tensors; i++) {
        const char *nm = m->tensors[i].name;
        if (strncmp(nm, "blk.", 4) != 0 || nm[4] < '0' || nm[4] > '9') continue;
        char *end;
        unsigned long long l = strtoull(nm + 4, &end, 10);
        if (*end != '.') continue;
        if (l >= n_layers)
            return rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s' is in layer %llu, but key '%s.block_count' says %" PRIu64
                               " layer%s", f, nm, l, arch, n_layers, n_layers == 1 ? "" : "s");
        if (!top_name || l > top) top = l, top_name = nm;
    }
    if (top_name && top + 1 < n_layers)
        return rad_err_set(e, RAD_E_FORMAT, "%s: key '%s.block_count' says %" PRIu64 " layers, but the tensors stop at "
                           "layer %" PRIu64 " ('%s')", f, arch, n_layers, top, top_name);
    return RAD_OK;
}

static int map_meta(RadModelFile *m, RadErr *e) {
    const char *f = m->ins[0].name;
    const RadDict *raw = &m->raw;
    RadDict *meta = &m->meta;
    const RadValue *av = rad_dict_get(raw, "general.architecture");
    if (!av)
        return rad_err_set(e, RAD_E_FORMAT, "%s: metadata 'general.architecture' is missing", f);
    if (av->type != RAD_VAL_STRING || av->v.s.len == 0 || strlen(av->v.s.p) != av->v.s.len)
        return rad_err_set(e, RAD_E_FORMAT,
                           "%s: metadata 'general.architecture': expected a non-empty string, got %s",
                           f, rad_val_type_name(av->type));
    const char *arch = av->v.s.p;
    size_t alen = strlen(arch);
    int rc = rad_dict_set_str(meta, "model.arch_id", arch, e);
    if (rc) return rc;
    const RadValue *v = rad_dict_get(raw, "general.name");
    char kd[48];
    if (v && v->type != RAD_VAL_STRING)
        return kind_of(v, kd, sizeof kd),
               rad_err_set(e, RAD_E_FORMAT, "%s: key 'general.name' is %s, expected a string", f, kd);
    if (v && (rc = rad_dict_set_str(meta, "model.name", v->v.s.p, e))) return rc;
    const char *quant = NULL;
    uint64_t ft;
    v = rad_dict_get(raw, "general.file_type");
    if (v && !is_uint_value(v, UINT32_MAX, &ft))
        return kind_of(v, kd, sizeof kd),
               rad_err_set(e, RAD_E_FORMAT, "%s: key 'general.file_type' is %s, expected an integer in [0, %u]",
                           f, kd, UINT32_MAX);
    if (v) quant = rad_gguf_ftype_name((uint32_t)ft);
    if (!quant) quant = quant_from_tensors(m);
    if ((rc = rad_dict_set_str(meta, "model.quant", quant, e))) return rc;

    /* model.* from {arch}.* */
    bool mapped[N_ARCH_KEYS] = {false};
    uint64_t u[N_ARCH_KEYS] = {0};
    double fl[N_ARCH_KEYS] = {0};
    char key[512];
    bool absent[N_ARCH_KEYS];
    for (size_t k = 0; k < N_ARCH_KEYS; k++) {
        snprintf(key, sizeof key, "%s.%s", arch, arch_keys[k].suffix);
        v = rad_dict_get(raw, key);
        absent[k] = !v;
        if (v) mapped[k] = arch_keys[k].is_f32 ? is_f32_value(v, &fl[k])
                                               : is_uint_value(v, UINT32_MAX, &u[k]);
        if (mapped[k] && arch_keys[k].is_f32 && !((float)fl[k] > 0 && fl[k] <= arch_keys[k].max))
            mapped[k] = false; /* NaN, 0 (or an f64 that is 0 as f32), negative, beyond the bound */
        /* a per-layer array is kept under its own name (rad_gguf.h); a scalar that cannot be the
         * count or number is refused, never defaulted */
        if (v && !mapped[k] && v->type != RAD_VAL_ARRAY)
            return bad_arch_key(f, key, arch_keys[k].is_f32, arch_keys[k].max, v, e);
    }
    /* defaults (docs/KEYS.md) apply only to keys the file does not have */
    enum { N_LAYERS, N_EMBD, N_HEAD, N_HEAD_KV, HEAD_DIM, N_FF, N_VOCAB, N_CTX, N_EXPERT,
           N_EXPERT_USED, RMS_EPS, ROPE_THETA };
    _Static_assert(ROPE_THETA + 1 == N_ARCH_KEYS, "one enum name per arch_keys row");
    if (absent[N_HEAD_KV] && mapped[N_HEAD]) { /* n_head */
        u[N_HEAD_KV] = u[N_HEAD];
        mapped[N_HEAD_KV] = true;
    }
    if (absent[HEAD_DIM] && mapped[N_EMBD] && mapped[N_HEAD] && u[N_HEAD] > 0) {
        u[HEAD_DIM] = u[N_EMBD] / u[N_HEAD];
        mapped[HEAD_DIM] = true;
    }
    if (absent[N_VOCAB]) { /* the token count */
        v = rad_dict_get(raw, "tokenizer.ggml.tokens");
        if (v && v->type == RAD_VAL_ARRAY && v->n <= UINT32_MAX) {
            u[N_VOCAB] = v->n;
            mapped[N_VOCAB] = true;
        }
    }
    if (absent[N_EXPERT]) mapped[N_EXPERT] = true;           /* 0 */
    if (absent[N_EXPERT_USED]) mapped[N_EXPERT_USED] = true; /* 0 */
    if (absent[ROPE_THETA]) {
        fl[ROPE_THETA] = 10000.0;
        mapped[ROPE_THETA] = true;
    }
    for (size_t k = 0; k < N_ARCH_KEYS; k++) {
        if (!mapped[k]) continue;
        rc = arch_keys[k].is_f32 ? rad_dict_set_f32(meta, arch_keys[k].key, (float)fl[k], e)
                                 : rad_dict_set_u32(meta, arch_keys[k].key, (uint32_t)u[k], e);
        if (rc) return rc;
    }
    if ((rc = rad_dict_set_bool(meta, "model.tie_embeddings", !rad_model_find(m, "output.weight"), e)))
        return rc;
    if (mapped[N_LAYERS] && (rc = check_layers(m, arch, u[N_LAYERS], e))) return rc;

    /* every other {arch}.* key, prefix stripped (rope.scaling.* among them) */
    for (uint64_t i = 0; i < raw->n; i++) {
        const char *k = raw->keys[i].p;
        if (strncmp(k, arch, alen) != 0 || k[alen] != '.' || k[alen + 1] == 0) continue;
        const char *suffix = k + alen + 1;
        uint64_t at;
        if (non_finite(&raw->vals[i], &at)) {
            if (raw->vals[i].type == RAD_VAL_ARRAY)
                return rad_err_set(e, RAD_E_FORMAT, "%s: key '%s'[%" PRIu64 "] is not a finite number", f, k, at);
            return rad_err_set(e, RAD_E_FORMAT, "%s: key '%s' is %g, not a finite number", f, k, raw->vals[i].v.f);
        }
        /* a key that became model.* is not copied again; one of an unexpected kind was not
         * mapped and is kept under its stripped name */
        bool taken = false;
        for (size_t j = 0; j < N_ARCH_KEYS && !taken; j++) {
            if (strcmp(suffix, arch_keys[j].suffix) != 0) continue;
            double d;
            uint64_t x;
            taken = arch_keys[j].is_f32 ? is_f32_value(&raw->vals[i], &d)
                                        : is_uint_value(&raw->vals[i], UINT32_MAX, &x);
        }
        if (taken) continue;
        if ((rc = rad_dict_set(meta, suffix, &raw->vals[i], e))) return rc;
    }
    return RAD_OK;
}

static int wrong_type(const char *f, const char *key, const char *want, const RadValue *v,
                      RadErr *e) {
    char got[32];
    if (v->type == RAD_VAL_ARRAY)
        snprintf(got, sizeof got, "array[%s]", rad_val_type_name(v->arr_type));
    else
        snprintf(got, sizeof got, "%s", rad_val_type_name(v->type));
    return rad_err_set(e, RAD_E_FORMAT, "%s: metadata '%s': expected %s, got %s", f, key, want, got);
}

/* token_type as array[i32], whatever integer type the file used. */
static int token_types_i32(const char *f, const char *key, const RadValue *v, RadDict *tok,
                           RadErr *e) {
    if (v->type != RAD_VAL_ARRAY) return wrong_type(f, key, "array[i32]", v, e);
    if (v->arr_type == RAD_VAL_I32) return rad_dict_set(tok, "tokenizer.token_type", v, e);
    size_t es = rad_val_scalar_size(v->arr_type);
    if (!es || v->arr_type == RAD_VAL_F32 || v->arr_type == RAD_VAL_F64 ||
        v->arr_type == RAD_VAL_BOOL)
        return wrong_type(f, key, "array[i32]", v, e);
    int32_t *a = malloc(v->n ? v->n * sizeof *a : 1);
    if (!a) return rad_err_set(e, RAD_E_NOMEM, "%s: metadata '%s': out of memory", f, key);
    const uint8_t *p = v->v.arr;
    for (uint64_t i = 0; i < v->n; i++) {
        RadValue s = {.type = v->arr_type};
        uint64_t raw = 0;
        memcpy(&raw, p + i * es, es); /* little-endian host (rad_model.c asserts it) */
        switch (v->arr_type) {
        case RAD_VAL_I8: s.v.i = (int8_t)raw; break;
        case RAD_VAL_I16: s.v.i = (int16_t)raw; break;
        case RAD_VAL_I64: s.v.i = (int64_t)raw; break;
        default: s.v.u = raw; break;
        }
        uint64_t x;
        if (!is_uint_value(&s, INT32_MAX, &x)) {
            free(a);
            return rad_err_set(e, RAD_E_FORMAT, "%s: metadata '%s'[%" PRIu64 "]: out of range",
                               f, key, i);
        }
        a[i] = (int32_t)x;
    }
    int rc = rad_dict_set_arr(tok, "tokenizer.token_type", RAD_VAL_I32, a, v->n, e);
    free(a);
    return rc;
}

static int map_tok(RadModelFile *m, RadErr *e) {
    const char *f = m->ins[0].name;
    const RadDict *raw = &m->raw;
    RadDict *tok = &m->tok;
    static const struct {
        const char *from, *to;
        RadValType type, arr_type; /* arr_type when type == ARRAY */
    } direct[] = {
        {"tokenizer.ggml.model", "tokenizer.model", RAD_VAL_STRING, 0},
        {"tokenizer.ggml.pre", "tokenizer.pre", RAD_VAL_STRING, 0},
        {"tokenizer.ggml.tokens", "tokenizer.tokens", RAD_VAL_ARRAY, RAD_VAL_STRING},
        {"tokenizer.ggml.scores", "tokenizer.scores", RAD_VAL_ARRAY, RAD_VAL_F32},
        {"tokenizer.ggml.merges", "tokenizer.merges", RAD_VAL_ARRAY, RAD_VAL_STRING},
        {"tokenizer.ggml.add_bos_token", "tokenizer.add_bos", RAD_VAL_BOOL, 0},
        {"tokenizer.ggml.add_eos_token", "tokenizer.add_eos", RAD_VAL_BOOL, 0},
        {"tokenizer.ggml.add_space_prefix", "tokenizer.add_space_prefix", RAD_VAL_BOOL, 0},
    };
    static const struct {
        const char *from, *to;
    } ids[] = {
        {"tokenizer.ggml.bos_token_id", "tokenizer.bos_id"},
        {"tokenizer.ggml.eos_token_id", "tokenizer.eos_id"},
        {"tokenizer.ggml.unknown_token_id", "tokenizer.unk_id"},
        {"tokenizer.ggml.padding_token_id", "tokenizer.pad_id"},
        {"tokenizer.ggml.eot_token_id", "tokenizer.eot_id"},
        {"tokenizer.ggml.seperator_token_id", "tokenizer.sep_id"}, /* GGUF's spelling */
        {"tokenizer.ggml.mask_token_id", "tokenizer.mask_id"},
    };
    int rc;
    for (size_t k = 0; k < sizeof direct / sizeof direct[0]; k++) {
        const RadValue *v = rad_dict_get(raw, direct[k].from);
        if (!v) continue;
        if (v->type != direct[k].type ||
            (v->type == RAD_VAL_ARRAY && v->arr_type != direct[k].arr_type)) {
            char want[32];
            if (direct[k].type == RAD_VAL_ARRAY)
                snprintf(want, sizeof want, "array[%s]", rad_val_type_name(direct[k].arr_type));
            else
                snprintf(want, sizeof want, "%s", rad_val_type_name(direct[k].type));
            return wrong_type(f, direct[k].from, want, v, e);
        }
        if ((rc = rad_dict_set(tok, direct[k].to, v, e))) return rc;
    }
    const RadValue *v = rad_dict_get(raw, "tokenizer.ggml.token_type");
    if (v && (rc = token_types_i32(f, "tokenizer.ggml.token_type", v, tok, e))) return rc;
    for (size_t k = 0; k < sizeof ids / sizeof ids[0]; k++) {
        v = rad_dict_get(raw, ids[k].from);
        if (!v) continue;
        uint64_t x;
        if (!is_uint_value(v, INT32_MAX, &x)) {
            if (is_uint_value(v, UINT64_MAX, &x) || v->type == RAD_VAL_I8 ||
                v->type == RAD_VAL_I16 || v->type == RAD_VAL_I32 || v->type == RAD_VAL_I64)
                continue; /* -1, 0xffffffff, ...: no such token; left absent */
            return wrong_type(f, ids[k].from, "a token id (u32)", v, e);
        }
        if ((rc = rad_dict_set_i32(tok, ids[k].to, (int32_t)x, e))) return rc;
    }
    return RAD_OK;
}

/* The text of token id `key` (an i32 in tok), or NULL. */
static const char *token_text(const RadDict *tok, const char *key) {
    int64_t id;
    const RadValue *t = rad_dict_get(tok, "tokenizer.tokens");
    if (!t || rad_dict_geti(tok, key, &id, NULL) || id < 0 || (uint64_t)id >= t->n) return NULL;
    const RadStr *s = &((const RadStr *)t->v.arr)[id];
    return strlen(s->p) == s->len ? s->p : NULL;
}

static int map_chat(RadModelFile *m, RadErr *e) {
    const char *f = m->ins[0].name;
    const RadValue *v = rad_dict_get(&m->raw, "tokenizer.chat_template");
    if (!v) return RAD_OK;
    if (v->type != RAD_VAL_STRING) return wrong_type(f, "tokenizer.chat_template", "string", v, e);
    int rc = rad_dict_set(&m->chat, "chat.template", v, e);
    if (rc) return rc;
    const char *t = v->v.s.p; /* NUL-terminated; a NUL inside only shortens the search */
    const char *kind = strstr(t, "<|im_start|>")          ? "chatml"
                       : strstr(t, "<|start_header_id|>") ? "llama3"
                       : strstr(t, "[INST]")              ? "llama2"
                                                          : "unknown";
    if ((rc = rad_dict_set_str(&m->chat, "chat.kind", kind, e))) return rc;
    const char *bos = token_text(&m->tok, "tokenizer.bos_id");
    const char *eos = token_text(&m->tok, "tokenizer.eos_id");
    if (bos && (rc = rad_dict_set_str(&m->chat, "chat.bos", bos, e))) return rc;
    if (eos && (rc = rad_dict_set_str(&m->chat, "chat.eos", eos, e))) return rc;
    return RAD_OK;
}

/* ---- load ------------------------------------------------------------------------------ */

int rad_gguf_load(RadIn *in, RadModelFile *m, RadErr *e) {
    RadIn *src = malloc(sizeof *src);
    if (!src) {
        int rc = rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", in->name);
        rad_in_close(in);
        memset(in, 0, sizeof *in);
        return rc;
    }
    *src = *in;
    memset(in, 0, sizeof *in);
    m->ins = src;
    m->n_ins = 1;
    snprintf(m->format, sizeof m->format, "gguf");
    snprintf(m->path, sizeof m->path, "%s", src->name);
    m->alignment = RAD_GGUF_DEFAULT_ALIGNMENT;

    uint32_t version = 0;
    uint64_t n_tensors = 0, n_kv = 0;
    int rc = read_header(src, &version, &n_tensors, &n_kv, e);
    if (rc) return rc;
    m->version = version;
    if ((rc = rad_dict_read(src, &m->raw, n_kv, e))) return rc;
    if ((rc = read_alignment(m, &m->alignment, e))) return rc;
    for (uint64_t i = 0; i < n_tensors; i++)
        if ((rc = read_tensor_info(m, i, e))) return rc;
    uint64_t end = src->pos, a = m->alignment;
    m->data_offset = (end + a - 1) / a * a; /* end < 2^63: it counts bytes read */
    if ((rc = check_tensors(m, e))) return rc;
    if (n_tensors > 0 &&
        (rc = rad_in_skip(src, m->data_offset - end, "padding before tensor data", e)))
        return rc;
    if ((rc = map_meta(m, e))) return rc;
    if ((rc = map_tok(m, e))) return rc;
    return map_chat(m, e);
}
