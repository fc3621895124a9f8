#include "libcommon/base/rad_dict.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define KV_MAX_DEPTH 8
/* Below this many keys a lookup scans; from it on the hash index is kept. */
#define KV_INDEX_MIN 16

void rad_dict_init(RadDict *d) { memset(d, 0, sizeof *d); }

size_t rad_val_scalar_size(RadValType t) {
    switch (t) {
    case RAD_VAL_U8: case RAD_VAL_I8: case RAD_VAL_BOOL: return 1;
    case RAD_VAL_U16: case RAD_VAL_I16: return 2;
    case RAD_VAL_U32: case RAD_VAL_I32: case RAD_VAL_F32: return 4;
    case RAD_VAL_U64: case RAD_VAL_I64: case RAD_VAL_F64: return 8;
    default: return 0;
    }
}

const char *rad_val_type_name(RadValType t) {
    static const char *n[RAD_VAL_COUNT] = {"u8",   "i8",     "u16",   "i16", "u32",
                                           "i32",  "f32",    "bool",  "string", "array",
                                           "u64",  "i64",    "f64"};
    return (unsigned)t < RAD_VAL_COUNT ? n[t] : "invalid";
}

static bool is_int(RadValType t) {
    return t == RAD_VAL_U8 || t == RAD_VAL_I8 || t == RAD_VAL_U16 || t == RAD_VAL_I16 ||
           t == RAD_VAL_U32 || t == RAD_VAL_I32 || t == RAD_VAL_U64 || t == RAD_VAL_I64;
}
static bool is_signed(RadValType t) {
    return t == RAD_VAL_I8 || t == RAD_VAL_I16 || t == RAD_VAL_I32 || t == RAD_VAL_I64;
}

void rad_value_free(RadValue *v) {
    if (!v) return;
    if (v->type == RAD_VAL_STRING) free(v->v.s.p);
    if (v->type == RAD_VAL_ARRAY && v->v.arr) {
        if (v->arr_type == RAD_VAL_STRING) {
            RadStr *s = v->v.arr;
            for (uint64_t i = 0; i < v->n; i++) free(s[i].p);
        } else if (v->arr_type == RAD_VAL_ARRAY) {
            RadValue *a = v->v.arr;
            for (uint64_t i = 0; i < v->n; i++) rad_value_free(&a[i]);
        }
        free(v->v.arr);
    }
    memset(v, 0, sizeof *v);
}

void rad_dict_free(RadDict *d) {
    if (!d) return;
    for (uint64_t i = 0; i < d->n; i++) {
        free(d->keys[i].p);
        rad_value_free(&d->vals[i]);
    }
    free(d->keys);
    free(d->vals);
    free(d->idx);
    memset(d, 0, sizeof *d);
}

static char *dup_bytes(const char *p, uint64_t n) {
    char *d = malloc((size_t)n + 1);
    if (!d) return NULL;
    if (n) memcpy(d, p, (size_t)n);
    d[n] = 0;
    return d;
}

int rad_value_copy(RadValue *dst, const RadValue *src, RadErr *e) {
    memset(dst, 0, sizeof *dst);
    dst->type = src->type;
    dst->arr_type = src->arr_type;
    dst->n = src->n;
    if (src->type == RAD_VAL_STRING) {
        dst->v.s.len = src->v.s.len;
        if (!(dst->v.s.p = dup_bytes(src->v.s.p, src->v.s.len))) goto oom;
        return RAD_OK;
    }
    if (src->type != RAD_VAL_ARRAY) {
        dst->v = src->v;
        return RAD_OK;
    }
    if (src->arr_type == RAD_VAL_STRING) {
        RadStr *d = calloc(src->n ? src->n : 1, sizeof *d);
        if (!(dst->v.arr = d)) goto oom;
        const RadStr *s = src->v.arr;
        for (uint64_t i = 0; i < src->n; i++) {
            d[i].len = s[i].len;
            if (!(d[i].p = dup_bytes(s[i].p, s[i].len))) goto oom;
        }
    } else if (src->arr_type == RAD_VAL_ARRAY) {
        RadValue *d = calloc(src->n ? src->n : 1, sizeof *d);
        if (!(dst->v.arr = d)) goto oom;
        const RadValue *s = src->v.arr;
        for (uint64_t i = 0; i < src->n; i++)
            if (rad_value_copy(&d[i], &s[i], e)) goto oom;
    } else {
        size_t sz = rad_val_scalar_size(src->arr_type) * src->n;
        if (!(dst->v.arr = malloc(sz ? sz : 1))) goto oom;
        if (sz) memcpy(dst->v.arr, src->v.arr, sz);
    }
    return RAD_OK;
oom:
    rad_value_free(dst);
    return rad_err_set(e, RAD_E_NOMEM, "out of memory copying a metadata value");
}

static uint64_t key_hash(const char *key, size_t kl) { return XXH3_64bits(key, kl); }

static int64_t kv_index(const RadDict *d, const char *key) {
    size_t kl = strlen(key);
    if (!d->idx) {
        for (uint64_t i = 0; i < d->n; i++)
            if (d->keys[i].len == kl && memcmp(d->keys[i].p, key, kl) == 0) return (int64_t)i;
        return -1;
    }
    uint64_t mask = d->idx_cap - 1;
    for (uint64_t h = key_hash(key, kl) & mask;; h = (h + 1) & mask) {
        uint64_t j = d->idx[h];
        if (!j) return -1;
        const RadStr *k = &d->keys[j - 1];
        if (k->len == kl && memcmp(k->p, key, kl) == 0) return (int64_t)(j - 1);
    }
}

static void idx_put(uint64_t *idx, uint64_t cap, const RadStr *k, uint64_t i) {
    uint64_t mask = cap - 1, h = key_hash(k->p, (size_t)k->len) & mask;
    while (idx[h]) h = (h + 1) & mask;
    idx[h] = i + 1;
}

/* Keeps the index over keys[0, n) at most half full; false when out of memory. */
static bool idx_update(RadDict *d) {
    if (d->n < KV_INDEX_MIN) return true;
    if (d->idx && d->n * 2 <= d->idx_cap) {
        idx_put(d->idx, d->idx_cap, &d->keys[d->n - 1], d->n - 1);
        return true;
    }
    uint64_t cap = d->idx_cap ? d->idx_cap : 64;
    while (cap < d->n * 2) cap *= 2;
    uint64_t *idx = calloc(cap, sizeof *idx);
    if (!idx) return false;
    for (uint64_t i = 0; i < d->n; i++) idx_put(idx, cap, &d->keys[i], i);
    free(d->idx);
    d->idx = idx;
    d->idx_cap = cap;
    return true;
}

const RadValue *rad_dict_get(const RadDict *d, const char *key) {
    int64_t i = kv_index(d, key);
    return i < 0 ? NULL : &d->vals[i];
}

int rad_dict_geti(const RadDict *d, const char *key, int64_t *out, RadErr *e) {
    const RadValue *v = rad_dict_get(d, key);
    if (!v) return RAD_E_NOTFOUND;
    if (v->type == RAD_VAL_BOOL) {
        *out = v->v.u != 0;
        return RAD_OK;
    }
    if (!is_int(v->type))
        return rad_err_set(e, RAD_E_FORMAT, "metadata '%s': expected an integer, got %s", key,
                           rad_val_type_name(v->type));
    if (!is_signed(v->type) && v->v.u > INT64_MAX)
        return rad_err_set(e, RAD_E_FORMAT, "metadata '%s': %" PRIu64 " out of range", key,
                           v->v.u);
    *out = is_signed(v->type) ? v->v.i : (int64_t)v->v.u;
    return RAD_OK;
}

int rad_dict_getf(const RadDict *d, const char *key, double *out, RadErr *e) {
    const RadValue *v = rad_dict_get(d, key);
    if (!v) return RAD_E_NOTFOUND;
    if (v->type == RAD_VAL_F32 || v->type == RAD_VAL_F64) {
        *out = v->v.f;
        return RAD_OK;
    }
    if (is_int(v->type)) {
        *out = is_signed(v->type) ? (double)v->v.i : (double)v->v.u;
        return RAD_OK;
    }
    return rad_err_set(e, RAD_E_FORMAT, "metadata '%s': expected a number, got %s", key,
                       rad_val_type_name(v->type));
}

int rad_dict_gets(const RadDict *d, const char *key, const char **out, RadErr *e) {
    const RadValue *v = rad_dict_get(d, key);
    if (!v) return RAD_E_NOTFOUND;
    if (v->type != RAD_VAL_STRING)
        return rad_err_set(e, RAD_E_FORMAT, "metadata '%s': expected a string, got %s", key,
                           rad_val_type_name(v->type));
    *out = v->v.s.p;
    return RAD_OK;
}

int rad_dict_take(RadDict *d, const char *key, RadValue *v, RadErr *e) {
    int64_t i = kv_index(d, key);
    if (i >= 0) {
        rad_value_free(&d->vals[i]);
        d->vals[i] = *v;
        memset(v, 0, sizeof *v);
        return RAD_OK;
    }
    if (d->n == d->cap) {
        uint64_t nc = d->cap ? d->cap * 2 : 16;
        RadStr *nk = realloc(d->keys, nc * sizeof *nk);
        if (!nk) goto oom;
        d->keys = nk;
        RadValue *nv = realloc(d->vals, nc * sizeof *nv);
        if (!nv) goto oom;
        d->vals = nv;
        d->cap = nc;
    }
    size_t kl = strlen(key);
    char *k = dup_bytes(key, kl);
    if (!k) goto oom;
    d->keys[d->n] = (RadStr){kl, k};
    d->n++;
    if (!idx_update(d)) {
        free(k);
        d->n--;
        goto oom;
    }
    d->vals[d->n - 1] = *v;
    memset(v, 0, sizeof *v);
    return RAD_OK;
oom:
    rad_value_free(v);
    return rad_err_set(e, RAD_E_NOMEM, "metadata '%s': out of memory", key);
}

int rad_dict_set(RadDict *d, const char *key, const RadValue *v, RadErr *e) {
    RadValue c;
    int rc = rad_value_copy(&c, v, e);
    if (rc) return rc;
    return rad_dict_take(d, key, &c, e);
}

static int set_scalar(RadDict *d, const char *key, RadValType t, uint64_t u, int64_t i, double f,
                      RadErr *e) {
    RadValue v = {.type = t};
    if (t == RAD_VAL_F32 || t == RAD_VAL_F64) v.v.f = f;
    else if (is_signed(t)) v.v.i = i;
    else v.v.u = u;
    return rad_dict_take(d, key, &v, e);
}

int rad_dict_set_u32(RadDict *d, const char *key, uint32_t x, RadErr *e) {
    return set_scalar(d, key, RAD_VAL_U32, x, 0, 0, e);
}
int rad_dict_set_u64(RadDict *d, const char *key, uint64_t x, RadErr *e) {
    return set_scalar(d, key, RAD_VAL_U64, x, 0, 0, e);
}
int rad_dict_set_i32(RadDict *d, const char *key, int32_t x, RadErr *e) {
    return set_scalar(d, key, RAD_VAL_I32, 0, x, 0, e);
}
int rad_dict_set_f32(RadDict *d, const char *key, float x, RadErr *e) {
    return set_scalar(d, key, RAD_VAL_F32, 0, 0, x, e);
}
int rad_dict_set_bool(RadDict *d, const char *key, bool x, RadErr *e) {
    return set_scalar(d, key, RAD_VAL_BOOL, x ? 1 : 0, 0, 0, e);
}

int rad_dict_set_str(RadDict *d, const char *key, const char *s, RadErr *e) {
    RadValue v = {.type = RAD_VAL_STRING};
    v.v.s.len = strlen(s);
    if (!(v.v.s.p = dup_bytes(s, v.v.s.len)))
        return rad_err_set(e, RAD_E_NOMEM, "metadata '%s': out of memory", key);
    return rad_dict_take(d, key, &v, e);
}

int rad_dict_set_arr(RadDict *d, const char *key, RadValType t, const void *data, uint64_t n,
                   RadErr *e) {
    size_t sz = rad_val_scalar_size(t);
    if (!sz) return rad_err_set(e, RAD_E_ARG, "metadata '%s': not a scalar array type", key);
    RadValue v = {.type = RAD_VAL_ARRAY, .arr_type = t, .n = n};
    if (!(v.v.arr = malloc(n ? sz * n : 1)))
        return rad_err_set(e, RAD_E_NOMEM, "metadata '%s': out of memory", key);
    if (n) memcpy(v.v.arr, data, sz * n);
    return rad_dict_take(d, key, &v, e);
}

int rad_dict_set_strarr(RadDict *d, const char *key, const char *const *s, uint64_t n, RadErr *e) {
    RadValue v = {.type = RAD_VAL_ARRAY, .arr_type = RAD_VAL_STRING, .n = n};
    RadStr *a = calloc(n ? n : 1, sizeof *a);
    v.v.arr = a;
    if (!a) return rad_err_set(e, RAD_E_NOMEM, "metadata '%s': out of memory", key);
    for (uint64_t i = 0; i < n; i++) {
        a[i].len = strlen(s[i]);
        if (!(a[i].p = dup_bytes(s[i], a[i].len))) {
            rad_value_free(&v);
            return rad_err_set(e, RAD_E_NOMEM, "metadata '%s': out of memory", key);
        }
    }
    return rad_dict_take(d, key, &v, e);
}

bool rad_utf8_valid(const char *s, uint64_t n) {
    const uint8_t *p = (const uint8_t *)s;
    uint64_t i = 0;
    while (i < n) {
        uint8_t c = p[i];
        if (c < 0x80) { i++; continue; }
        int k;
        uint32_t cp;
        if ((c & 0xE0) == 0xC0) { k = 1; cp = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { k = 2; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { k = 3; cp = c & 0x07; }
        else return false;
        if (n - i <= (uint64_t)k) return false;
        for (int j = 1; j <= k; j++) {
            if ((p[i + j] & 0xC0) != 0x80) return false;
            cp = cp << 6 | (p[i + j] & 0x3F);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += (uint64_t)k + 1;
    }
    return true;
}

/* ---- GGUF encoding --------------------------------------------------------------------- */

static int read_str(RadIn *in, RadStr *s, const char *what, const char *key, RadErr *e) {
    uint64_t len;
    int rc = rad_in_u64(in, &len, what, e);
    if (rc) return rc;
    if (len > rad_in_remaining(in))
        return rad_err_set(e, RAD_E_FORMAT, "%s: %s '%s': length %" PRIu64 " exceeds the %" PRIu64
                           " bytes left (truncated or corrupt)", in->name, what, key, len, rad_in_remaining(in));
    s->len = len;
    return rad_in_read_alloc(in, len, &s->p, what, e);
}

static uint64_t min_elem_bytes(RadValType t) {
    size_t s = rad_val_scalar_size(t);
    if (s) return s;
    if (t == RAD_VAL_STRING) return 8;  /* u64 length */
    return 12;                          /* nested array: u32 type + u64 count */
}

int rad_value_read(RadIn *in, RadValType t, RadValue *v, const char *key, int depth, RadErr *e) {
    memset(v, 0, sizeof *v);
    if ((unsigned)t >= RAD_VAL_COUNT)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: metadata '%s': unknown value type %u",
                           in->name, key, (unsigned)t);
    v->type = t;
    size_t sz = rad_val_scalar_size(t);
    if (sz) {
        uint8_t b[8] = {0};
        int rc = rad_in_read(in, b, sz, key, e);
        if (rc) return rc;
        uint64_t u = 0;
        for (int i = (int)sz - 1; i >= 0; i--) u = u << 8 | b[i];
        switch (t) {
        case RAD_VAL_I8: v->v.i = (int8_t)u; break;
        case RAD_VAL_I16: v->v.i = (int16_t)u; break;
        case RAD_VAL_I32: v->v.i = (int32_t)u; break;
        case RAD_VAL_I64: v->v.i = (int64_t)u; break;
        case RAD_VAL_F32: { float f; uint32_t w = (uint32_t)u; memcpy(&f, &w, 4); v->v.f = f; break; }
        case RAD_VAL_F64: { double d; memcpy(&d, &u, 8); v->v.f = d; break; }
        case RAD_VAL_BOOL:
            if (u > 1)
                return rad_err_set(e, RAD_E_FORMAT, "%s: metadata '%s': bool value %u is not 0 or 1",
                                   in->name, key, (unsigned)u);
            v->v.u = u;
            break;
        default: v->v.u = u; break;
        }
        return RAD_OK;
    }
    if (t == RAD_VAL_STRING) {
        int rc = read_str(in, &v->v.s, "string", key, e);
        if (rc) v->type = RAD_VAL_U8;
        return rc;
    }
    /* array */
    if (depth >= KV_MAX_DEPTH)
        return rad_err_set(e, RAD_E_FORMAT, "%s: metadata '%s': arrays nested deeper than %d",
                           in->name, key, KV_MAX_DEPTH);
    uint32_t at;
    uint64_t n;
    int rc = rad_in_u32(in, &at, key, e);
    if (!rc) rc = rad_in_u64(in, &n, key, e);
    if (rc) return rc;
    if (at >= RAD_VAL_COUNT)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: metadata '%s': unknown array element type %u",
                           in->name, key, at);
    uint64_t mb = min_elem_bytes((RadValType)at);
    uint64_t rem = rad_in_remaining(in);
    /* streams have no known length: cap elements, and grow the element arrays below as
     * elements arrive, so a hostile count cannot allocate more than the bytes sent */
    bool stream = rem == UINT64_MAX;
    if (stream) rem = (uint64_t)1 << 32;
    if (n > rem / mb)
        return rad_err_set(e, RAD_E_FORMAT, "%s: metadata '%s': array of %" PRIu64
                           " elements exceeds the bytes left (truncated or corrupt)", in->name, key, n);
    v->type = RAD_VAL_ARRAY;
    v->arr_type = (RadValType)at;
    if (sz = rad_val_scalar_size((RadValType)at), sz) {
        /* packed little-endian scalars, read as they are: hosts are little-endian (checked by
         * a static assertion in rad_model.c); rad_in_read_alloc grows on a stream */
        char *buf = NULL;
        rc = rad_in_read_alloc(in, n * sz, &buf, key, e);
        if (rc) return rc;  /* v->n stays 0: nothing to free inside */
        v->v.arr = buf;
        v->n = n;
        if (at == RAD_VAL_BOOL) {
            const uint8_t *b = v->v.arr;
            for (uint64_t i = 0; i < n; i++)
                if (b[i] > 1)
                    return rad_err_set(e, RAD_E_FORMAT, "%s: metadata '%s'[%" PRIu64
                                       "]: bool value %u is not 0 or 1", in->name, key, i, b[i]);
        }
        return RAD_OK;
    }
    size_t es = at == RAD_VAL_STRING ? sizeof(RadStr) : sizeof(RadValue);
    uint64_t cap = stream && n > 1024 ? 1024 : n;
    if (!(v->v.arr = calloc(cap ? cap : 1, es)))
        return rad_err_set(e, RAD_E_NOMEM, "%s: metadata '%s': out of memory", in->name, key);
    for (uint64_t i = 0; i < n; i++) {
        if (i == cap) { /* stream: grow as elements arrive */
            uint64_t nc = cap * 2 < n ? cap * 2 : n;
            void *np = realloc(v->v.arr, nc * es);
            if (!np) return rad_err_set(e, RAD_E_NOMEM, "%s: metadata '%s': out of memory", in->name, key);
            memset((char *)np + cap * es, 0, (nc - cap) * es);
            v->v.arr = np;
            cap = nc;
        }
        if (at == RAD_VAL_STRING) {
            rc = read_str(in, &((RadStr *)v->v.arr)[i], "string", key, e);
            if (rc) return rc;
            v->n = i + 1;
        } else {
            /* an array of arrays: each element is an array value (its own element type and
             * count) */
            rc = rad_value_read(in, RAD_VAL_ARRAY, &((RadValue *)v->v.arr)[i], key, depth + 1, e);
            v->n = i + 1;
            if (rc) return rc;
        }
    }
    return RAD_OK;
}

int rad_dict_read(RadIn *in, RadDict *d, uint64_t count, RadErr *e) {
    uint64_t rem = rad_in_remaining(in);
    if (rem != UINT64_MAX && count > rem / 12)
        return rad_err_set(e, RAD_E_FORMAT, "%s: metadata count %" PRIu64 " exceeds the bytes left (truncated or corrupt)",
                           in->name, count);
    if (rem == UINT64_MAX && count > (1u << 24))
        return rad_err_set(e, RAD_E_FORMAT, "%s: metadata count %" PRIu64 " is implausible",
                           in->name, count);
    for (uint64_t i = 0; i < count; i++) {
        RadStr k = {0};
        int rc = read_str(in, &k, "metadata key", "?", e);
        if (rc) return rc;
        if (!rad_utf8_valid(k.p, k.len) || strlen(k.p) != k.len || k.len == 0) {
            free(k.p);
            return rad_err_set(e, RAD_E_FORMAT, "%s: metadata key #%" PRIu64
                               " is empty or not valid UTF-8", in->name, i);
        }
        if (rad_dict_get(d, k.p)) {
            rc = rad_err_set(e, RAD_E_FORMAT, "%s: metadata key '%s' appears twice", in->name, k.p);
            free(k.p);
            return rc;
        }
        uint32_t t = 0;
        RadValue v = {0};
        rc = rad_in_u32(in, &t, k.p, e);
        if (!rc) rc = rad_value_read(in, (RadValType)t, &v, k.p, 0, e);
        if (rc) {
            rad_value_free(&v);
            free(k.p);
            return rc;
        }
        rc = rad_dict_take(d, k.p, &v, e);
        free(k.p);
        if (rc) return rc;
    }
    return RAD_OK;
}

static int put_u32(RadBuf *b, uint32_t x, RadErr *e) {
    uint8_t c[4] = {(uint8_t)x, (uint8_t)(x >> 8), (uint8_t)(x >> 16), (uint8_t)(x >> 24)};
    return rad_buf_put(b, c, 4, e);
}
static int put_u64(RadBuf *b, uint64_t x, RadErr *e) {
    uint8_t c[8];
    for (int i = 0; i < 8; i++) c[i] = (uint8_t)(x >> (8 * i));
    return rad_buf_put(b, c, 8, e);
}
static int put_str(RadBuf *b, const RadStr *s, RadErr *e) {
    int rc = put_u64(b, s->len, e);
    return rc ? rc : rad_buf_put(b, s->p, s->len, e);
}

static int write_value(RadBuf *b, const RadValue *v, RadErr *e) {
    size_t sz = rad_val_scalar_size(v->type);
    if (sz) {
        uint64_t u;
        if (v->type == RAD_VAL_F32) { float f = (float)v->v.f; uint32_t w; memcpy(&w, &f, 4); u = w; }
        else if (v->type == RAD_VAL_F64) memcpy(&u, &v->v.f, 8);
        else u = v->v.u; /* two's complement: the low bytes of i equal those of u */
        uint8_t c[8];
        for (size_t i = 0; i < sz; i++) c[i] = (uint8_t)(u >> (8 * i));
        return rad_buf_put(b, c, sz, e);
    }
    if (v->type == RAD_VAL_STRING) return put_str(b, &v->v.s, e);
    int rc = put_u32(b, v->arr_type, e);
    if (!rc) rc = put_u64(b, v->n, e);
    if (rc) return rc;
    size_t es = rad_val_scalar_size(v->arr_type);
    if (es) return rad_buf_put(b, v->v.arr, es * v->n, e);
    for (uint64_t i = 0; i < v->n && !rc; i++) {
        if (v->arr_type == RAD_VAL_STRING) rc = put_str(b, &((const RadStr *)v->v.arr)[i], e);
        else rc = write_value(b, &((const RadValue *)v->v.arr)[i], e);
    }
    return rc;
}

int rad_dict_write(const RadDict *d, RadBuf *out, RadErr *e) {
    int rc = RAD_OK;
    for (uint64_t i = 0; i < d->n && !rc; i++) {
        rc = put_str(out, &d->keys[i], e);
        if (!rc) rc = put_u32(out, d->vals[i].type, e);
        if (!rc) rc = write_value(out, &d->vals[i], e);
    }
    return rc;
}

static void print_str(FILE *f, const char *p, uint64_t n, uint64_t max) {
    fputc('"', f);
    for (uint64_t i = 0; i < n && i < max; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c < 0x20 || c == 0x7f) fprintf(f, "\\x%02x", c);
        else fputc(c, f);
    }
    if (n > max) fputs("...", f);
    fputc('"', f);
}

static void print_scalar(FILE *f, RadValType t, const void *p) {
    switch (t) {
    case RAD_VAL_U8: fprintf(f, "%u", *(const uint8_t *)p); break;
    case RAD_VAL_I8: fprintf(f, "%d", *(const int8_t *)p); break;
    case RAD_VAL_U16: { uint16_t x; memcpy(&x, p, 2); fprintf(f, "%u", x); break; }
    case RAD_VAL_I16: { int16_t x; memcpy(&x, p, 2); fprintf(f, "%d", x); break; }
    case RAD_VAL_U32: { uint32_t x; memcpy(&x, p, 4); fprintf(f, "%" PRIu32, x); break; }
    case RAD_VAL_I32: { int32_t x; memcpy(&x, p, 4); fprintf(f, "%" PRId32, x); break; }
    case RAD_VAL_U64: { uint64_t x; memcpy(&x, p, 8); fprintf(f, "%" PRIu64, x); break; }
    case RAD_VAL_I64: { int64_t x; memcpy(&x, p, 8); fprintf(f, "%" PRId64, x); break; }
    case RAD_VAL_F32: { float x; memcpy(&x, p, 4); fprintf(f, "%g", (double)x); break; }
    case RAD_VAL_F64: { double x; memcpy(&x, p, 8); fprintf(f, "%g", x); break; }
    case RAD_VAL_BOOL: fputs(*(const uint8_t *)p ? "true" : "false", f); break;
    default: break;
    }
}

void rad_value_print(FILE *f, const RadValue *v, int max_elems) {
    switch (v->type) {
    case RAD_VAL_STRING: print_str(f, v->v.s.p, v->v.s.len, 120); return;
    case RAD_VAL_F32: case RAD_VAL_F64: fprintf(f, "%g", v->v.f); return;
    case RAD_VAL_BOOL: fputs(v->v.u ? "true" : "false", f); return;
    case RAD_VAL_ARRAY: break;
    default:
        if (is_signed(v->type)) fprintf(f, "%" PRId64, v->v.i);
        else fprintf(f, "%" PRIu64, v->v.u);
        return;
    }
    fprintf(f, "[%" PRIu64 " x %s]", v->n, rad_val_type_name(v->arr_type));
    if (v->n == 0 || max_elems <= 0) return;
    fputs(" [", f);
    size_t es = rad_val_scalar_size(v->arr_type);
    for (uint64_t i = 0; i < v->n && i < (uint64_t)max_elems; i++) {
        if (i) fputs(", ", f);
        if (es) print_scalar(f, v->arr_type, (const uint8_t *)v->v.arr + i * es);
        else if (v->arr_type == RAD_VAL_STRING) {
            const RadStr *s = &((const RadStr *)v->v.arr)[i];
            print_str(f, s->p, s->len, 40);
        } else rad_value_print(f, &((const RadValue *)v->v.arr)[i], 0);
    }
    if (v->n > (uint64_t)max_elems) fputs(", ...", f);
    fputc(']', f);
}
