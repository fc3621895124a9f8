#include "libcommon/format/rad_safetensors.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One header entry while it is being checked; handed to the model only when all are good. */
typedef struct StEntry {
    RadTensor t;      /* t.name owned here until rad_model_add_tensor takes it */
    uint64_t b, end;  /* data_offsets, relative to the data area */
} StEntry;

static const struct {
    const char *name;
    RadEnc enc;
} st_dtypes[] = {
    {"F64", RAD_ENC_F64},   {"F32", RAD_ENC_F32},         {"F16", RAD_ENC_F16},
    {"BF16", RAD_ENC_BF16}, {"I64", RAD_ENC_I64},         {"I32", RAD_ENC_I32},
    {"I16", RAD_ENC_I16},   {"I8", RAD_ENC_I8},           {"U8", RAD_ENC_U8},
    {"BOOL", RAD_ENC_BOOL}, {"F8_E4M3", RAD_ENC_F8_E4M3}, {"F8_E5M2", RAD_ENC_F8_E5M2},
};

bool rad_safetensors_dtype(const char *dtype, RadEnc *out) {
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (strcmp(dtype, st_dtypes[i].name) == 0) {
            *out = st_dtypes[i].enc;
            return true;
        }
    return false;
}

bool rad_safetensors_sniff(const uint8_t *p, uint64_t n) {
    if (n < 10) return false;
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--) h = h << 8 | p[i];
    return h >= 2 && h <= RAD_ST_MAX_HEADER && p[8] == '{';
}

static const char *json_kind(const json_t *j) {
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

/* A non-negative JSON integer. */
static bool json_u64(const json_t *j, uint64_t *out) {
    if (!json_is_integer(j) || json_integer_value(j) < 0) return false;
    *out = (uint64_t)json_integer_value(j);
    return true;
}

/* Moves *in into m->ins; returns its index, or -1 (in closed, e set) when out of memory. */
static int take_in(RadModelFile *m, RadIn *in, RadErr *e) {
    RadIn *p = realloc(m->ins, ((size_t)m->n_ins + 1) * sizeof *p);
    if (!p) {
        rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", in->name);
        rad_in_close(in);
        memset(in, 0, sizeof *in);
        return -1;
    }
    m->ins = p;
    m->ins[m->n_ins] = *in;
    memset(in, 0, sizeof *in);
    return m->n_ins++;
}

static int cmp_entry(const void *a, const void *b) {
    const StEntry *x = a, *y = b;
    if (x->b != y->b) return x->b < y->b ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->t.name, y->t.name);
}

/* Checks one tensor entry and fills *out (name not yet set). */
static int parse_entry(const char *file, const char *name, json_t *v, StEntry *out, RadErr *e) {
    if (!json_is_object(v))
        return rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s': expected an object, got %s", file,
                           name, json_kind(v));
    json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
           *off = json_object_get(v, "data_offsets");
    if (!dt || !sh || !off)
        return rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s': field '%s' is missing", file, name,
                           !dt ? "dtype" : !sh ? "shape" : "data_offsets");
    if (!json_is_string(dt))
        return rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s': field 'dtype': expected string, got %s",
                           file, name, json_kind(dt));
    if (!rad_safetensors_dtype(json_string_value(dt), &out->t.enc))
        return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: tensor '%s': dtype '%s' is not supported",
                           file, name, json_string_value(dt));
    if (!json_is_array(sh))
        return rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s': field 'shape': expected array, got %s",
                           file, name, json_kind(sh));
    size_t rank = json_array_size(sh);
    if (rank > RAD_MAX_RANK)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: tensor '%s': rank %zu exceeds %d", file, name,
                           rank, RAD_MAX_RANK);
    out->t.rank = (uint32_t)rank;
    for (size_t i = 0; i < rank; i++)
        if (!json_u64(json_array_get(sh, i), &out->t.shape[i]))
            return rad_err_set(e, RAD_E_FORMAT,
                               "%s: tensor '%s': shape[%zu] is not a non-negative integer", file,
                               name, i);
    if (!json_is_array(off) || json_array_size(off) != 2 ||
        !json_u64(json_array_get(off, 0), &out->b) || !json_u64(json_array_get(off, 1), &out->end))
        return rad_err_set(e, RAD_E_FORMAT,
                           "%s: tensor '%s': field 'data_offsets' is not [begin, end] with "
                           "non-negative integers", file, name);
    if (out->end < out->b)
        return rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                           "] end before they begin", file, name, out->b, out->end);
    RadErr le = {0};
    uint64_t nbytes = 0;
    if (rad_tensor_bytes(out->t.enc, out->t.rank, out->t.shape, NULL, &nbytes, name, &le))
        return rad_err_set(e, le.code, "%s: %s", file, le.msg);
    if (nbytes != out->end - out->b)
        return rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                           "] hold %" PRIu64 " bytes but dtype %s and its shape need %" PRIu64,
                           file, name, out->b, out->end, out->end - out->b,
                           json_string_value(dt), nbytes);
    out->t.n_planes = 1;
    RadPlane *pl = &out->t.planes[0];
    memcpy(pl->name, "data", 5);
    pl->offset = out->b;
    pl->nbytes = pl->stored_bytes = nbytes;
    return RAD_OK;
}

/* Parses the header of m->ins[idx] (positioned at byte 0) into entries and metadata. */
static int parse_header(RadModelFile *m, int idx, StEntry **out_ents, size_t *out_n, RadDict *md,
                        uint64_t *data_start, RadErr *e) {
    RadIn *in = &m->ins[idx];
    const char *file = in->name;
    uint64_t hlen;
    int rc = rad_in_u64(in, &hlen, "header length", e);
    if (rc) return rc;
    if (hlen > RAD_ST_MAX_HEADER)
        return rad_err_set(e, RAD_E_FORMAT, "%s: header length %" PRIu64
                           " exceeds the format's 100 MiB limit (not a safetensors file?)", file, hlen);
    if (rad_in_is_mapped(in) && hlen > rad_in_remaining(in))
        return rad_err_set(e, RAD_E_FORMAT, "%s: header length %" PRIu64
                           " runs past the end of the file (%" PRIu64 " bytes)", file, hlen, in->size);
    if (hlen < 2)
        return rad_err_set(e, RAD_E_FORMAT, "%s: header length %" PRIu64 " is too short for a JSON object",
                           file, hlen);
    char *hdr = NULL;
    if ((rc = rad_in_read_alloc(in, hlen, &hdr, "header", e))) return rc;
    *data_start = 8 + hlen;
    if (hdr[0] != '{') {
        free(hdr);
        return rad_err_set(e, RAD_E_FORMAT, "%s: header does not start with '{'", file);
    }
    if (!rad_utf8_valid(hdr, hlen)) {
        free(hdr);
        return rad_err_set(e, RAD_E_FORMAT, "%s: header is not valid UTF-8", file);
    }
    json_error_t je;
    json_t *root = json_loadb(hdr, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    free(hdr);
    if (!root)
        return rad_err_set(e, RAD_E_FORMAT, "%s: header JSON: %s (byte %d)", file, je.text,
                           je.position);
    if (!json_is_object(root)) {
        rc = rad_err_set(e, RAD_E_FORMAT, "%s: header is a JSON %s, not an object", file,
                         json_kind(root));
        json_decref(root);
        return rc;
    }
    size_t cap = json_object_size(root);
    StEntry *ents = calloc(cap ? cap : 1, sizeof *ents);
    size_t n = 0;
    if (!ents) {
        json_decref(root);
        return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", file);
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(val)) {
                rc = rad_err_set(e, RAD_E_FORMAT, "%s: '__metadata__': expected object, got %s",
                                 file, json_kind(val));
                goto fail;
            }
            const char *mk;
            json_t *mv;
            json_object_foreach(val, mk, mv) {
                if (!json_is_string(mv)) {
                    rc = rad_err_set(e, RAD_E_FORMAT,
                                     "%s: '__metadata__' entry '%s': expected string, got %s",
                                     file, mk, json_kind(mv));
                    goto fail;
                }
                if (mk[0] == 0) continue; /* an empty key cannot be a metadata key */
                if ((rc = rad_dict_set_str(md, mk, json_string_value(mv), e))) goto fail;
            }
            continue;
        }
        if (key[0] == 0) {
            rc = rad_err_set(e, RAD_E_FORMAT, "%s: a tensor has an empty name", file);
            goto fail;
        }
        StEntry *se = &ents[n];
        if ((rc = parse_entry(file, key, val, se, e))) goto fail;
        if (!(se->t.name = strdup(key))) {
            rc = rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", file);
            goto fail;
        }
        se->t.src = idx;
        n++;
    }
    json_decref(root);
    *out_ents = ents;
    *out_n = n;
    return RAD_OK;
fail:
    for (size_t i = 0; i < n; i++) free(ents[i].t.name);
    free(ents);
    json_decref(root);
    return rc;
}

int rad_safetensors_add(RadModelFile *m, RadIn *in, uint64_t *first, RadErr *e) {
    int idx = take_in(m, in, e);
    if (idx < 0) return RAD_E_NOMEM;
    RadIn *src = &m->ins[idx];
    const char *file = src->name;
    StEntry *ents = NULL;
    size_t n = 0;
    uint64_t data_start = 0;
    RadDict md;
    rad_dict_init(&md);
    int rc = parse_header(m, idx, &ents, &n, &md, &data_start, e);
    if (rc) goto out;
    qsort(ents, n, sizeof *ents, cmp_entry);
    bool mapped = rad_in_is_mapped(src);
    uint64_t data_size = mapped ? src->size - data_start : UINT64_MAX;
    const char *prev = NULL; /* the non-empty tensor reaching furthest so far */
    uint64_t prev_end = 0, prev_b = 0;
    for (size_t i = 0; i < n; i++) {
        StEntry *se = &ents[i];
        if (se->end > data_size) {
            rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                             "] run past the end of the data area (%" PRIu64 " bytes)", file,
                             se->t.name, se->b, se->end, data_size);
            goto out;
        }
        if (se->end == se->b) continue;
        if (prev && se->b < prev_end) {
            rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensors '%s' [%" PRIu64 ", %" PRIu64
                             ") and '%s' [%" PRIu64 ", %" PRIu64 ") overlap", file, prev, prev_b,
                             prev_end, se->t.name, se->b, se->end);
            goto out;
        }
        prev = se->t.name;
        prev_b = se->b;
        prev_end = se->end;
    }
    /* All checked: hand the tensors and metadata over. */
    uint64_t start = m->n_tensors;
    for (size_t i = 0; i < n; i++) {
        if (mapped) ents[i].t.planes[0].data = src->data + data_start + ents[i].b;
        if ((rc = rad_model_add_tensor(m, &ents[i].t, e))) {
            for (uint64_t k = start; k < m->n_tensors; k++) free(m->tensors[k].name);
            m->n_tensors = start;
            goto out;
        }
    }
    for (uint64_t i = 0; i < md.n; i++)
        if ((rc = rad_dict_take(&m->raw, md.keys[i].p, &md.vals[i], e))) goto out;
    if (first) *first = start;
    if (idx == 0) m->data_offset = data_start;
out:
    for (size_t i = 0; i < n; i++) free(ents[i].t.name);
    free(ents);
    rad_dict_free(&md);
    return rc;
}

int rad_safetensors_load(RadIn *in, RadModelFile *m, RadErr *e) {
    snprintf(m->format, sizeof m->format, "safetensors");
    snprintf(m->path, sizeof m->path, "%s", in->name);
    m->alignment = 1;
    return rad_safetensors_add(m, in, NULL, e);
}
