/* gguf_test.c — libcommon/format/rad_gguf.c: the gguf-package-written fixture (every key, value and
 * tensor, tests/fixtures/gguf/tiny.expect), the real SmolLM2 model (fetched by `make model`),
 * the fixture cut at every offset, and hand-crafted malformed files from a tiny GGUF writer
 * below. Run from the repository root. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libcommon/format/rad_gguf.h"
#include "libcommon/tensor/rad_enc.h"
#include "tests/test_util.h"

#define FIX "tests/fixtures/gguf/"
#define TINY FIX "tiny.gguf"
#define MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"

/* ---- helpers --------------------------------------------------------------------------- */

/* A growing string. */
typedef struct Str {
    char *p;
    size_t n, cap;
} Str;

static void sput(Str *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sput(Str *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (s->n + (size_t)k + 1 > s->cap) {
        s->cap = (s->n + (size_t)k + 1) * 2;
        s->p = realloc(s->p, s->cap);
    }
    va_start(ap, fmt);
    vsnprintf(s->p + s->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    s->n += (size_t)k;
}

static void render_str(Str *s, const char *p, uint64_t n) {
    sput(s, "string:\"");
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c >= 0x20 && c <= 0x7e && c != '"' && c != '\\') sput(s, "%c", c);
        else sput(s, "\\x%02x", c);
    }
    sput(s, "\"");
}

/* A scalar of type t from packed little-endian bytes. */
static void render_packed(Str *s, RadValType t, const uint8_t *p) {
    uint64_t u = 0;
    size_t sz = rad_val_scalar_size(t);
    memcpy(&u, p, sz);
    switch (t) {
    case RAD_VAL_I8: sput(s, "i8:%d", (int8_t)u); break;
    case RAD_VAL_I16: sput(s, "i16:%d", (int16_t)u); break;
    case RAD_VAL_I32: sput(s, "i32:%" PRId32, (int32_t)u); break;
    case RAD_VAL_I64: sput(s, "i64:%" PRId64, (int64_t)u); break;
    case RAD_VAL_F32: { float f; uint32_t w = (uint32_t)u; memcpy(&f, &w, 4); sput(s, "f32:%.9g", (double)f); break; }
    case RAD_VAL_F64: { double d; memcpy(&d, &u, 8); sput(s, "f64:%.17g", d); break; }
    case RAD_VAL_BOOL: sput(s, "bool:%s", u ? "true" : "false"); break;
    default: sput(s, "%s:%" PRIu64, rad_val_type_name(t), u); break;
    }
}

/* The spelling of scripts/gen-gguf-fixtures.py's render(). */
static void render(Str *s, const RadValue *v) {
    switch (v->type) {
    case RAD_VAL_STRING: render_str(s, v->v.s.p, v->v.s.len); return;
    case RAD_VAL_F32: sput(s, "f32:%.9g", (double)(float)v->v.f); return;
    case RAD_VAL_F64: sput(s, "f64:%.17g", v->v.f); return;
    case RAD_VAL_BOOL: sput(s, "bool:%s", v->v.u ? "true" : "false"); return;
    case RAD_VAL_I8: case RAD_VAL_I16: case RAD_VAL_I32: case RAD_VAL_I64:
        sput(s, "%s:%" PRId64, rad_val_type_name(v->type), v->v.i);
        return;
    case RAD_VAL_ARRAY: break;
    default: sput(s, "%s:%" PRIu64, rad_val_type_name(v->type), v->v.u); return;
    }
    sput(s, "array:[");
    size_t es = rad_val_scalar_size(v->arr_type);
    for (uint64_t i = 0; i < v->n; i++) {
        if (i) sput(s, ",");
        if (es) render_packed(s, v->arr_type, (const uint8_t *)v->v.arr + i * es);
        else if (v->arr_type == RAD_VAL_STRING) {
            const RadStr *r = &((const RadStr *)v->v.arr)[i];
            render_str(s, r->p, r->len);
        } else render(s, &((const RadValue *)v->v.arr)[i]);
    }
    sput(s, "]");
}

/* Every line of expect whose first word is `kind` must match kv exactly, and kv holds no
 * other key. Returns the number of keys checked. */
static int check_kv(const RadDict *kv, const char *expect, const char *kind) {
    int n = 0;
    size_t kl = strlen(kind);
    for (const char *l = expect; *l; l = strchr(l, '\n') + 1) {
        const char *eol = strchr(l, '\n');
        cr_assert(eol);
        if (strncmp(l, kind, kl) != 0 || l[kl] != ' ') continue;
        const char *k = l + kl + 1, *sp = strchr(k, ' ');
        cr_assert(sp && sp < eol);
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)(sp - k), k);
        const RadValue *v = rad_dict_get(kv, key);
        cr_assert(v, "%s: key '%s' missing", kind, key);
        Str s = {0};
        render(&s, v);
        cr_assert_eq(strlen(s.p), (size_t)(eol - sp - 1), "%s %s: got %s, want %.*s", kind, key,
                     s.p, (int)(eol - sp - 1), sp + 1);
        cr_assert(memcmp(s.p, sp + 1, s.n) == 0, "%s %s: got %s, want %.*s", kind, key, s.p,
                  (int)(eol - sp - 1), sp + 1);
        free(s.p);
        n++;
    }
    cr_assert_eq(kv->n, (uint64_t)n, "%s: %llu keys, %d expected", kind, (unsigned long long)kv->n, n);
    return n;
}

static uint64_t expect_num(const char *expect, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "%s ", key);
    for (const char *l = expect; *l; l = strchr(l, '\n') + 1)
        if (strncmp(l, pat, strlen(pat)) == 0) return strtoull(l + strlen(pat), NULL, 10);
    cr_assert_fail("tiny.expect: no '%s' line", key);
    return 0;
}

static int load_path(const char *path, RadModelFile *m, RadErr *e) {
    memset(m, 0, sizeof *m);
    rad_err_clear(e);
    RadIn in;
    int rc = rad_in_open_file(&in, path, e);
    if (rc) return rc;
    rc = rad_gguf_load(&in, m, e);
    cr_assert_eq(in.data, NULL, "the RadIn is moved into the model");
    return rc;
}

static int load_mem(const void *p, size_t n, const char *name, RadModelFile *m, RadErr *e) {
    memset(m, 0, sizeof *m);
    rad_err_clear(e);
    RadIn in;
    rad_in_init_mem(&in, p, n, name);
    return rad_gguf_load(&in, m, e);
}

/* A stream over memory that hands out at most `chunk` bytes a read. */
typedef struct MemStream {
    const uint8_t *p;
    size_t n, pos, chunk;
} MemStream;

static long mem_read(void *user, void *dst, size_t n, RadErr *e) {
    (void)e;
    MemStream *s = user;
    size_t k = s->n - s->pos;
    if (k > n) k = n;
    if (k > s->chunk) k = s->chunk;
    memcpy(dst, s->p + s->pos, k);
    s->pos += k;
    return (long)k;
}

static int load_stream(const void *p, size_t n, size_t chunk, const char *name, RadModelFile *m,
                       RadErr *e, MemStream *ms) {
    memset(m, 0, sizeof *m);
    rad_err_clear(e);
    *ms = (MemStream){p, n, 0, chunk};
    RadIn in;
    rad_in_init_fn(&in, mem_read, ms, name);
    return rad_gguf_load(&in, m, e);
}

static void check_msg(const RadErr *e, const char *name, const char *sub) {
    cr_assert(strstr(e->msg, name), "message does not name the file '%s': %s", name, e->msg);
    cr_assert(!sub || strstr(e->msg, sub), "message lacks '%s': %s", sub, e->msg);
    cr_assert(!strchr(e->msg, '\n'), "message is not one line: %s", e->msg);
}

/* Dequantises one tensor and compares it with a golden f32 file, bit for bit (see
 * enc_test.c for why no tolerance is needed). */
static void check_tensor_golden(const RadTensor *t, const char *golden) {
    size_t ng;
    uint8_t *g = slurp(golden, &ng);
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->rank; d++) n *= t->shape[d];
    cr_assert_eq(ng, n * 4, "%s: %zu bytes of golden for %llu elements", t->name, ng,
                 (unsigned long long)n);
    float *out = malloc(n * 4);
    RadErr e = {0};
    cr_assert_eq(rad_dequant(t->enc, t->planes[0].data, t->planes[0].nbytes, out, n, &e), RAD_OK,
                 "%s", e.msg);
    for (uint64_t i = 0; i < n; i++) {
        float w;
        memcpy(&w, g + 4 * i, 4);
        if (isnan(w)) cr_assert(isnan(out[i]), "%s[%llu]", t->name, (unsigned long long)i);
        else cr_assert(memcmp(&w, &out[i], 4) == 0, "%s[%llu]: got %a want %a", t->name,
                       (unsigned long long)i, (double)out[i], (double)w);
    }
    free(out);
    free(g);
}

/* ---- the fixture written by gguf.GGUFWriter -------------------------------------------- */

static void check_tiny(const RadModelFile *m, const char *expect, bool mapped) {
    cr_assert_str_eq(m->format, "gguf");
    cr_assert_eq(m->version, expect_num(expect, "version"));
    cr_assert_eq(m->alignment, expect_num(expect, "alignment"));
    cr_assert_eq(m->data_offset, expect_num(expect, "data_offset"));
    cr_assert_eq(m->n_tensors, expect_num(expect, "n_tensors"));
    cr_assert_eq(m->n_ins, 1);
    int nkv = check_kv(&m->raw, expect, "kv");
    cr_assert_geq(nkv, 50);
    check_kv(&m->meta, expect, "meta");
    check_kv(&m->tok, expect, "tok");
    check_kv(&m->chat, expect, "chat");
    /* tensors, in file order */
    uint64_t ti = 0;
    for (const char *l = expect; *l; l = strchr(l, '\n') + 1) {
        if (strncmp(l, "tensor ", 7) != 0) continue;
        char name[64], enc[16], shape[64];
        unsigned long long off, nbytes;
        cr_assert_eq(sscanf(l + 7, "%63s %15s %63s %llu %llu", name, enc, shape, &off, &nbytes), 5);
        cr_assert_lt(ti, m->n_tensors);
        const RadTensor *t = &m->tensors[ti++];
        cr_assert_str_eq(t->name, name);
        cr_assert_str_eq(rad_enc_info(t->enc)->name, enc, "%s", name);
        char got[64] = "";
        for (uint32_t d = 0; d < t->rank; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%llu", d ? "x" : "",
                     (unsigned long long)t->shape[d]);
        cr_assert_str_eq(got, shape, "%s: shape", name);
        cr_assert_eq(t->n_planes, 1);
        cr_assert_str_eq(t->planes[0].name, "data");
        cr_assert_eq(t->planes[0].offset, off, "%s", name);
        cr_assert_eq(t->planes[0].nbytes, nbytes, "%s", name);
        cr_assert_eq(t->planes[0].stored_bytes, nbytes, "%s", name);
        cr_assert_eq(t->src, 0);
        if (!mapped) {
            cr_assert_null(t->planes[0].data, "%s: a stream has no data pointers", name);
            continue;
        }
        cr_assert_eq(t->planes[0].data, m->ins[0].data + m->data_offset + off, "%s", name);
        /* t.<enc> holds quant_<enc>.bin for the float and block encodings: its dequant is
         * the golden file */
        bool has_golden = t->enc == RAD_ENC_F32 || t->enc == RAD_ENC_F16 ||
                          t->enc == RAD_ENC_BF16 || t->enc == RAD_ENC_F64 ||
                          rad_enc_info(t->enc)->block_elems > 1;
        if (strcmp(name + 2, enc) == 0 && has_golden) {
            char gp[128];
            snprintf(gp, sizeof gp, FIX "quant_%s.f32", enc);
            check_tensor_golden(t, gp);
        }
    }
    cr_assert_eq(ti, m->n_tensors);
    if (mapped) { /* t.i64 = [-2^63, -1, 0, 2^53 + 1] */
        const RadTensor *t = rad_model_find(m, "t.i64");
        cr_assert(t);
        float v[4];
        RadErr e = {0};
        cr_assert_eq(rad_dequant(t->enc, t->planes[0].data, t->planes[0].nbytes, v, 4, &e), RAD_OK);
        cr_assert(v[0] == -9223372036854775808.0f && v[1] == -1.0f && v[2] == 0.0f &&
                  v[3] == 9007199254740992.0f);
    }
}

Test(gguf, fixture_every_key_and_tensor) {
    size_t n;
    char *expect = slurp(FIX "tiny.expect", &n);
    expect = realloc(expect, n + 1);
    expect[n] = 0;
    RadModelFile m;
    RadErr e;
    cr_assert_eq(load_path(TINY, &m, &e), RAD_OK, "%s", e.msg);
    cr_assert_str_eq(m.path, TINY);
    check_tiny(&m, expect, true);
    RadModelMeta mm;
    cr_assert_eq(rad_model_meta(&m, &mm, &e), RAD_OK, "%s", e.msg);
    cr_assert_str_eq(mm.arch_id, "llama");
    cr_assert_eq(mm.n_layers, 2);
    cr_assert_eq(mm.head_dim, 16);
    cr_assert_eq(mm.rope_theta, 500000.0f);
    rad_model_free(&m);
    free(expect);
}

Test(gguf, fixture_as_stream) {
    size_t n, ne;
    uint8_t *buf = slurp(TINY, &n);
    char *expect = slurp(FIX "tiny.expect", &ne);
    expect = realloc(expect, ne + 1);
    expect[ne] = 0;
    RadModelFile m;
    RadErr e;
    MemStream ms;
    cr_assert_eq(load_stream(buf, n, 7, "<stdin>", &m, &e, &ms), RAD_OK, "%s", e.msg);
    check_tiny(&m, expect, false);
    /* the stream sits at the data area, padding consumed */
    cr_assert_eq(m.ins[0].pos, m.data_offset);
    cr_assert_eq(ms.pos, m.data_offset);
    rad_model_free(&m);
    free(buf);
    free(expect);
}

Test(gguf, fixture_through_model_open) {
    RadModelFile m;
    RadErr e = {0};
    cr_assert_eq(rad_model_open(TINY, &m, &e), RAD_OK, "%s", e.msg);
    cr_assert_str_eq(m.format, "gguf");
    cr_assert_eq(m.n_tensors, 17);
    rad_model_free(&m);
}

/* Cut the fixture at every length: before the last tensor's data ends, each must fail with
 * RAD_E_FORMAT and a one-line message naming the file; from there on (trailing padding, if
 * any) the file is whole. Memory and stream inputs alike (stream: header cuts only, as
 * a stream's end-of-file is not checked for tensor data). */
Test(gguf, truncated_at_every_offset) {
    test_deadline(120);
    size_t n;
    uint8_t *buf = slurp(TINY, &n);
    RadModelFile m;
    RadErr e;
    cr_assert_eq(load_mem(buf, n, "cut.gguf", &m, &e), RAD_OK, "%s", e.msg);
    uint64_t data_end = 0, d0 = m.data_offset;
    for (uint64_t i = 0; i < m.n_tensors; i++) {
        uint64_t end = m.tensors[i].planes[0].offset + m.tensors[i].planes[0].nbytes;
        if (end > data_end) data_end = end;
    }
    rad_model_free(&m);
    data_end += d0;
    cr_assert_leq(data_end, n);
    for (size_t k = 0; k <= n; k++) {
        /* a fresh copy of exactly k bytes, so ASan sees any read past the cut */
        uint8_t *cut = malloc(k ? k : 1);
        memcpy(cut, buf, k);
        int rc = load_mem(cut, k, "cut.gguf", &m, &e);
        if (k < data_end) {
            cr_assert_eq(rc, RAD_E_FORMAT, "cut at %zu: rc %d (%s)", k, rc, e.msg);
            cr_assert_eq(e.code, RAD_E_FORMAT);
            check_msg(&e, "cut.gguf", NULL);
        } else {
            cr_assert_eq(rc, RAD_OK, "cut at %zu: %s", k, e.msg);
        }
        rad_model_free(&m);
        if (k <= d0) {
            MemStream ms;
            rc = load_stream(cut, k, 13, "cut-stream", &m, &e, &ms);
            if (k < d0) {
                cr_assert_eq(rc, RAD_E_FORMAT, "stream cut at %zu: rc %d (%s)", k, rc, e.msg);
                check_msg(&e, "cut-stream", NULL);
            } else {
                cr_assert_eq(rc, RAD_OK, "stream cut at %zu: %s", k, e.msg);
            }
            rad_model_free(&m);
        }
        free(cut);
    }
    free(buf);
}

static int64_t geti(const RadDict *kv, const char *key) {
    int64_t x = -1;
    RadErr e = {0};
    cr_assert_eq(rad_dict_geti(kv, key, &x, &e), RAD_OK, "%s: %s", key, e.msg);
    return x;
}

/* ---- a tiny GGUF writer, for files the gguf package will not write ------------------------ */

typedef struct GB {
    uint8_t *p;
    size_t n, cap;
} GB;

static void gb_put(GB *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void gb_u32(GB *b, uint32_t x) {
    uint8_t c[4] = {(uint8_t)x, (uint8_t)(x >> 8), (uint8_t)(x >> 16), (uint8_t)(x >> 24)};
    gb_put(b, c, 4);
}
static void gb_u64(GB *b, uint64_t x) {
    uint8_t c[8];
    for (int i = 0; i < 8; i++) c[i] = (uint8_t)(x >> (8 * i));
    gb_put(b, c, 8);
}
static void gb_strn(GB *b, const char *s, size_t n) {
    gb_u64(b, n);
    gb_put(b, s, n);
}
static void gb_str(GB *b, const char *s) { gb_strn(b, s, strlen(s)); }
static void gb_kv_str(GB *b, const char *k, const char *v) {
    gb_str(b, k);
    gb_u32(b, RAD_VAL_STRING);
    gb_str(b, v);
}
static void gb_kv_u32(GB *b, const char *k, uint32_t v) {
    gb_str(b, k);
    gb_u32(b, RAD_VAL_U32);
    gb_u32(b, v);
}

typedef struct TI {
    const char *name;
    size_t name_len; /* 0: strlen(name) */
    uint32_t n_dims;
    uint64_t ne[9];
    uint32_t type;
    uint64_t off;
} TI;

/* header (with the counts given, true or not) + kvs + tensor infos + padding to `align` +
 * data_bytes of a byte pattern. */
static GB build(uint32_t version, uint64_t n_t, uint64_t n_kv, const GB *kvs, const TI *ti,
                size_t n_ti, uint32_t align, size_t data_bytes) {
    GB b = {0};
    gb_put(&b, "GGUF", 4);
    gb_u32(&b, version);
    gb_u64(&b, n_t);
    gb_u64(&b, n_kv);
    if (kvs) gb_put(&b, kvs->p, kvs->n);
    for (size_t i = 0; i < n_ti; i++) {
        gb_strn(&b, ti[i].name, ti[i].name_len ? ti[i].name_len : strlen(ti[i].name));
        gb_u32(&b, ti[i].n_dims);
        for (uint32_t d = 0; d < ti[i].n_dims && d < 9; d++) gb_u64(&b, ti[i].ne[d]);
        gb_u32(&b, ti[i].type);
        gb_u64(&b, ti[i].off);
    }
    while (align && b.n % align) gb_put(&b, "", 1);
    for (size_t i = 0; i < data_bytes; i++) {
        uint8_t c = (uint8_t)(i * 7 + 1);
        gb_put(&b, &c, 1);
    }
    return b;
}

static GB arch_kv(void) {
    GB k = {0};
    gb_kv_str(&k, "general.architecture", "llama");
    return k;
}

/* Two good tensors: "a" f32 [8] at 0 (32 bytes), "b" q8_0 ne [32, 2] at 32 (68 bytes). */
static const TI good_ti[2] = {
    {.name = "a", .n_dims = 1, .ne = {8}, .type = 0, .off = 0},
    {.name = "b", .n_dims = 2, .ne = {32, 2}, .type = 8, .off = 32},
};

/* Loads b from memory (and, unless mem_only, as a stream) expecting failure code and a
 * message with sub and the file name. */
static void expect_fail_ex(GB *b, int code, const char *sub, bool mem_only) {
    RadModelFile m;
    RadErr e;
    int rc = load_mem(b->p, b->n, "bad.gguf", &m, &e);
    cr_assert_eq(rc, code, "rc %d (%s), want %d '%s'", rc, e.msg, code, sub);
    cr_assert_eq(e.code, code);
    check_msg(&e, "bad.gguf", sub);
    rad_model_free(&m);
    if (!mem_only) {
        MemStream ms;
        rc = load_stream(b->p, b->n, 5, "bad-stream", &m, &e, &ms);
        cr_assert_eq(rc, code, "stream: rc %d (%s), want %d '%s'", rc, e.msg, code, sub);
        check_msg(&e, "bad-stream", sub);
        rad_model_free(&m);
    }
    free(b->p);
}
static void expect_fail(GB *b, int code, const char *sub) { expect_fail_ex(b, code, sub, false); }

Test(gguf, crafted_good_file) {
    GB k = arch_kv();
    GB b = build(3, 2, 1, &k, good_ti, 2, 32, 32 + 68);
    RadModelFile m;
    RadErr e;
    cr_assert_eq(load_mem(b.p, b.n, "good.gguf", &m, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(m.n_tensors, 2);
    cr_assert_eq(m.tensors[1].rank, 2);
    cr_assert_eq(m.tensors[1].shape[0], 2);
    cr_assert_eq(m.tensors[1].shape[1], 32);
    cr_assert_eq(m.tensors[1].planes[0].nbytes, 68);
    cr_assert_eq(m.tensors[1].planes[0].data, b.p + m.data_offset + 32);
    /* no file_type: the quant is the block encoding with the most bytes */
    const char *q;
    cr_assert_eq(rad_dict_gets(&m.meta, "model.quant", &q, &e), RAD_OK);
    cr_assert_str_eq(q, "q8_0");
    int64_t theta_missing;
    cr_assert_eq(rad_dict_geti(&m.meta, "model.n_layers", &theta_missing, &e), RAD_E_NOTFOUND);
    double th;
    cr_assert_eq(rad_dict_getf(&m.meta, "model.rope_theta", &th, &e), RAD_OK);
    cr_assert_eq(th, 10000.0);
    cr_assert_eq(m.tok.n, 0);
    cr_assert_eq(m.chat.n, 0);
    rad_model_free(&m);
    free(b.p);
    /* version 2 reads the same */
    b = build(2, 2, 1, &k, good_ti, 2, 32, 100);
    cr_assert_eq(load_mem(b.p, b.n, "v2.gguf", &m, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(m.version, 2);
    rad_model_free(&m);
    free(b.p);
    free(k.p);
}

Test(gguf, crafted_alignment_and_scalar) {
    /* alignment 1 and a rank-0 (n_dims 0) f32 scalar; then alignment 256 */
    GB k = arch_kv();
    gb_kv_u32(&k, "general.alignment", 1);
    TI t[2] = {{.name = "s", .n_dims = 0, .type = 0, .off = 0},
               {.name = "v", .n_dims = 1, .ne = {3}, .type = 0, .off = 5}};
    GB b = build(3, 2, 2, &k, t, 2, 1, 4 + 1 + 12);
    RadModelFile m;
    RadErr e;
    cr_assert_eq(load_mem(b.p, b.n, "a1.gguf", &m, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(m.alignment, 1);
    cr_assert_eq(m.tensors[0].rank, 0);
    cr_assert_eq(m.tensors[0].planes[0].nbytes, 4);
    rad_model_free(&m);
    free(b.p);
    free(k.p);
    k = arch_kv();
    gb_kv_u32(&k, "general.alignment", 256);
    TI t2[2] = {{.name = "x", .n_dims = 1, .ne = {4}, .type = 0, .off = 0},
                {.name = "y", .n_dims = 1, .ne = {4}, .type = 0, .off = 256}};
    b = build(3, 2, 2, &k, t2, 2, 256, 272);
    cr_assert_eq(load_mem(b.p, b.n, "a256.gguf", &m, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(m.data_offset % 256, 0);
    rad_model_free(&m);
    free(b.p);
    /* misaligned for 256 */
    t2[1].off = 128;
    b = build(3, 2, 2, &k, t2, 2, 256, 272);
    expect_fail(&b, RAD_E_FORMAT, "not a multiple of the alignment 256");
    free(k.p);
}

Test(gguf, bad_magic_and_versions) {
    GB k = arch_kv();
    GB b = build(3, 0, 1, &k, NULL, 0, 0, 0);
    memcpy(b.p, "GGUG", 4);
    expect_fail(&b, RAD_E_FORMAT, "not a GGUF file");
    b = build(1, 0, 1, &k, NULL, 0, 0, 0);
    expect_fail(&b, RAD_E_UNSUPPORTED, "version 1 is not supported");
    b = build(99, 0, 1, &k, NULL, 0, 0, 0);
    expect_fail(&b, RAD_E_UNSUPPORTED, "unknown GGUF version 99");
    b = build(0, 0, 1, &k, NULL, 0, 0, 0);
    expect_fail(&b, RAD_E_UNSUPPORTED, "version 0");
    b = build(0x03000000u, 0, 1, &k, NULL, 0, 0, 0);
    expect_fail(&b, RAD_E_UNSUPPORTED, "big-endian");
    GB empty = {0};
    gb_put(&empty, "G", 1);
    expect_fail(&empty, RAD_E_FORMAT, "truncated");
    free(k.p);
}

Test(gguf, header_counts_overflow) {
    GB k = arch_kv();
    /* 2^60 tensors: must fail at once, not allocate */
    GB b = build(3, (uint64_t)1 << 60, 1, &k, NULL, 0, 0, 0);
    expect_fail(&b, RAD_E_FORMAT, "tensor count 1152921504606846976");
    b = build(3, UINT64_MAX, 1, &k, NULL, 0, 0, 0);
    expect_fail(&b, RAD_E_FORMAT, "tensor count");
    /* a count that the bytes left cannot hold, even if small */
    b = build(3, 3, 1, &k, good_ti, 2, 32, 100);
    expect_fail(&b, RAD_E_FORMAT, NULL);
    b = build(3, 0, (uint64_t)1 << 60, &k, NULL, 0, 0, 0);
    expect_fail(&b, RAD_E_FORMAT, "metadata count");
    b = build(3, 0, UINT64_MAX, &k, NULL, 0, 0, 0);
    expect_fail(&b, RAD_E_FORMAT, "metadata count");
    /* more kv claimed than present */
    b = build(3, 0, 2, &k, NULL, 0, 0, 0);
    expect_fail(&b, RAD_E_FORMAT, "truncated");
    free(k.p);
}

Test(gguf, hostile_lengths) {
    /* a string value of length 2^63 */
    GB k = arch_kv();
    gb_str(&k, "x.s");
    gb_u32(&k, RAD_VAL_STRING);
    gb_u64(&k, (uint64_t)1 << 63);
    gb_put(&k, "abc", 3);
    GB b = build(3, 0, 2, &k, NULL, 0, 0, 0);
    expect_fail_ex(&b, RAD_E_FORMAT, "x.s", true);
    MemStream ms;
    RadModelFile m;
    RadErr e;
    b = build(3, 0, 2, &k, NULL, 0, 0, 0);
    cr_assert_eq(load_stream(b.p, b.n, 4096, "s.gguf", &m, &e, &ms), RAD_E_FORMAT);
    check_msg(&e, "s.gguf", NULL);
    rad_model_free(&m);
    free(b.p);
    free(k.p);
    /* a key of length 2^63 */
    k = arch_kv();
    gb_u64(&k, (uint64_t)1 << 63);
    gb_put(&k, "abcdefgh", 8);
    b = build(3, 0, 2, &k, NULL, 0, 0, 0);
    expect_fail(&b, RAD_E_FORMAT, NULL);
    free(k.p);
    /* an array of 2^62 u32 */
    k = arch_kv();
    gb_str(&k, "x.arr");
    gb_u32(&k, RAD_VAL_ARRAY);
    gb_u32(&k, RAD_VAL_U32);
    gb_u64(&k, (uint64_t)1 << 62);
    gb_u32(&k, 1);
    b = build(3, 0, 2, &k, NULL, 0, 0, 0);
    expect_fail(&b, RAD_E_FORMAT, "x.arr");
    free(k.p);
    /* an array of UINT64_MAX strings */
    k = arch_kv();
    gb_str(&k, "x.sarr");
    gb_u32(&k, RAD_VAL_ARRAY);
    gb_u32(&k, RAD_VAL_STRING);
    gb_u64(&k, UINT64_MAX);
    b = build(3, 0, 2, &k, NULL, 0, 0, 0);
    expect_fail(&b, RAD_E_FORMAT, "x.sarr");
    free(k.p);
    /* a tensor name of length 2^63 */
    k = arch_kv();
    b = build(3, 1, 1, &k, NULL, 0, 0, 0);
    gb_u64(&b, (uint64_t)1 << 63);
    gb_put(&b, "abcdefghabcdefghabcdefgh", 24);
    expect_fail_ex(&b, RAD_E_FORMAT, "tensor #0", true);
    free(k.p);
}

Test(gguf, nested_arrays) {
    /* depth 8 nested arrays load (the deepest allowed holds one u8) */
    for (int depth = 1; depth <= 10; depth++) {
        GB k = arch_kv();
        gb_str(&k, "x.nest");
        gb_u32(&k, RAD_VAL_ARRAY);
        for (int d = 1; d < depth; d++) {
            gb_u32(&k, RAD_VAL_ARRAY);
            gb_u64(&k, 1);
        }
        gb_u32(&k, RAD_VAL_U8);
        gb_u64(&k, 1);
        gb_put(&k, "\x2a", 1);
        GB b = build(3, 0, 2, &k, NULL, 0, 0, 0);
        if (depth <= 8) {
            RadModelFile m;
            RadErr e;
            cr_assert_eq(load_mem(b.p, b.n, "nest.gguf", &m, &e), RAD_OK, "depth %d: %s", depth,
                         e.msg);
            const RadValue *v = rad_dict_get(&m.raw, "x.nest");
            for (int d = 1; d < depth; d++) {
                cr_assert_eq(v->type, RAD_VAL_ARRAY);
                cr_assert_eq(v->arr_type, RAD_VAL_ARRAY);
                v = (const RadValue *)v->v.arr;
            }
            cr_assert_eq(v->arr_type, RAD_VAL_U8);
            cr_assert_eq(((const uint8_t *)v->v.arr)[0], 42);
            rad_model_free(&m);
            free(b.p);
        } else {
            expect_fail(&b, RAD_E_FORMAT, "nested deeper");
        }
        free(k.p);
    }
    /* an inner array of an unknown element type */
    GB k = arch_kv();
    gb_str(&k, "x.mixed");
    gb_u32(&k, RAD_VAL_ARRAY);
    gb_u32(&k, RAD_VAL_ARRAY);
    gb_u64(&k, 1);
    gb_u32(&k, 13);
    gb_u64(&k, 1);
    gb_u32(&k, 5);
    GB b = build(3, 0, 2, &k, NULL, 0, 0, 0);
    expect_fail(&b, RAD_E_UNSUPPORTED, "x.mixed");
    free(k.p);
}

Test(gguf, bad_keys_and_values) {
    /* duplicate key */
    GB k = arch_kv();
    gb_kv_u32(&k, "x.a", 1);
    gb_kv_u32(&k, "x.a", 2);
    GB b = build(3, 0, 3, &k, NULL, 0, 0, 0);
    expect_fail(&b, RAD_E_FORMAT, "'x.a' appears twice");
    free(k.p);
    /* non-UTF-8 key */
    k = arch_kv();
    gb_strn(&k, "x.\xff", 3);
    gb_u32(&k, RAD_VAL_U8);
    gb_put(&k, "\x01", 1);
    b = build(3, 0, 2, &k, NULL, 0, 0, 0);
    expect_fail(&b, RAD_E_FORMAT, "UTF-8");
    free(k.p);
    /* unknown value type */
    k = arch_kv();
    gb_str(&k, "x.t");
    gb_u32(&k, 13);
    gb_u32(&k, 0);
    b = build(3, 0, 2, &k, NULL, 0, 0, 0);
    expect_fail(&b, RAD_E_UNSUPPORTED, "x.t");
    free(k.p);
    /* bool 2 */
    k = arch_kv();
    gb_str(&k, "x.b");
    gb_u32(&k, RAD_VAL_BOOL);
    gb_put(&k, "\x02", 1);
    b = build(3, 0, 2, &k, NULL, 0, 0, 0);
    expect_fail(&b, RAD_E_FORMAT, "x.b");
    free(k.p);
    /* no general.architecture */
    k = (GB){0};
    gb_kv_u32(&k, "x.a", 1);
    b = build(3, 0, 1, &k, NULL, 0, 0, 0);
    expect_fail(&b, RAD_E_FORMAT, "'general.architecture' is missing");
    free(k.p);
    k = (GB){0};
    gb_kv_u32(&k, "general.architecture", 1);
    b = build(3, 0, 1, &k, NULL, 0, 0, 0);
    expect_fail(&b, RAD_E_FORMAT, "general.architecture");
    free(k.p);
    /* a tokenizer key of the wrong type */
    k = arch_kv();
    gb_kv_u32(&k, "tokenizer.ggml.tokens", 3);
    b = build(3, 0, 2, &k, NULL, 0, 0, 0);
    expect_fail(&b, RAD_E_FORMAT, "'tokenizer.ggml.tokens': expected array[string], got u32");
    free(k.p);
    k = arch_kv();
    gb_kv_str(&k, "tokenizer.ggml.bos_token_id", "1");
    b = build(3, 0, 2, &k, NULL, 0, 0, 0);
    expect_fail(&b, RAD_E_FORMAT, "tokenizer.ggml.bos_token_id");
    free(k.p);
}

Test(gguf, bad_alignment) {
    const uint32_t bad[] = {0, 3, 48, 0x80000000u};
    const char *sub[] = {"0 is not a non-zero power of two", "3 is not", "48 is not", "2147483648"};
    for (int i = 0; i < 4; i++) {
        GB k = arch_kv();
        gb_kv_u32(&k, "general.alignment", bad[i]);
        GB b = build(3, 2, 2, &k, good_ti, 2, 32, 100);
        expect_fail(&b, RAD_E_FORMAT, sub[i]);
        free(k.p);
    }
    GB k = arch_kv();
    gb_kv_str(&k, "general.alignment", "32");
    GB b = build(3, 2, 2, &k, good_ti, 2, 32, 100);
    expect_fail(&b, RAD_E_FORMAT, "'general.alignment': expected an integer");
    free(k.p);
}

Test(gguf, bad_tensor_infos) {
    GB k = arch_kv();
    TI t[2];
    GB b;
    /* MEM: checks a stream skips (tensor data against the end of the file) */
#define CASE_(mem_only, code, sub, ...)                         \
    do {                                                        \
        memcpy(t, good_ti, sizeof t);                           \
        __VA_ARGS__;                                            \
        b = build(3, 2, 1, &k, t, 2, 32, 100);                  \
        expect_fail_ex(&b, code, sub, mem_only);                \
    } while (0)
#define CASE(code, sub, ...) CASE_(false, code, sub, __VA_ARGS__)
#define MEM_CASE(code, sub, ...) CASE_(true, code, sub, __VA_ARGS__)
    CASE(RAD_E_FORMAT, "tensor 'b': n_dims 9 exceeds GGUF's 4", t[1].n_dims = 9);
    CASE(RAD_E_FORMAT, "tensor 'b': n_dims 5", t[1].n_dims = 5);
    CASE(RAD_E_UNSUPPORTED, "tensor 'b': unknown ggml type 99", t[1].type = 99);
    CASE(RAD_E_UNSUPPORTED, "tensor 'b': ggml type 10 (q2_k) is not supported", t[1].type = 10);
    CASE(RAD_E_FORMAT, "tensor 'a': ne[0] is 0", t[0].ne[0] = 0);
    CASE(RAD_E_FORMAT, "beyond int64", t[0].ne[0] = (uint64_t)1 << 63);
    /* element count overflows u64 */
    CASE(RAD_E_FORMAT, "tensor 'b': element count overflows",
         t[1].n_dims = 4; t[1].ne[0] = 32; t[1].ne[1] = (uint64_t)1 << 30;
         t[1].ne[2] = (uint64_t)1 << 30; t[1].ne[3] = (uint64_t)1 << 30);
    /* element count fits, byte count does not: 2^62 f32 */
    CASE(RAD_E_FORMAT, "tensor 'a': byte count overflows", t[0].ne[0] = (uint64_t)1 << 62);
    CASE(RAD_E_FORMAT, "tensor 'b': innermost dim 33 is not a multiple", t[1].ne[0] = 33);
    CASE(RAD_E_FORMAT, "tensor 'b': offset 40 is not a multiple of the alignment 32",
         t[1].off = 40);
    MEM_CASE(RAD_E_FORMAT, "tensor 'b': data [", t[1].off = 64);
    MEM_CASE(RAD_E_FORMAT, "past end of file", t[1].off = 1u << 20);
    CASE(RAD_E_FORMAT, "overflows", t[1].off = UINT64_MAX - 31);
    MEM_CASE(RAD_E_FORMAT, "data at offset", t[1].off = UINT64_MAX - 95);
    CASE(RAD_E_FORMAT, "tensors 'a' [0, 32) and 'b' [0, 68) overlap", t[1].off = 0);
    CASE(RAD_E_FORMAT, "overlap", t[0].ne[0] = 16);
    CASE(RAD_E_FORMAT, "tensor 'a' appears twice", t[1].name = "a");
    CASE(RAD_E_FORMAT, "tensor #1: name is not valid UTF-8", t[1].name = "\xc3\x28");
    CASE(RAD_E_FORMAT, "tensor #1: name is not valid UTF-8", t[1].name = "\xed\xa0\x80");
    CASE(RAD_E_FORMAT, "tensor #1: name holds a NUL byte", t[1].name = "b\0c"; t[1].name_len = 3);
    CASE(RAD_E_FORMAT, "tensor #0: name is empty", t[0].name = "");
#undef CASE
#undef MEM_CASE
#undef CASE_
    free(k.p);
}

/* docs/KEYS.md edge cases: defaults only for absent keys, a per-layer array is not a count,
 * "none" token ids, the other chat kinds, an output.weight. */
Test(gguf, meta_mapping_edge_cases) {
    GB k = {0};
    gb_kv_str(&k, "general.architecture", "qwen3");
    gb_kv_u32(&k, "general.file_type", 1); /* mostly f16 */
    gb_kv_u32(&k, "qwen3.attention.head_count", 8);
    gb_str(&k, "qwen3.attention.head_count_kv"); /* per layer */
    gb_u32(&k, RAD_VAL_ARRAY);
    gb_u32(&k, RAD_VAL_I32);
    gb_u64(&k, 2);
    gb_u32(&k, 2);
    gb_u32(&k, 4);
    gb_kv_u32(&k, "qwen3.embedding_length", 64);
    gb_kv_u32(&k, "qwen3.expert_count", 4);
    gb_str(&k, "qwen3.rope.freq_base");
    gb_u32(&k, RAD_VAL_F64);
    double th = 1e6;
    uint64_t thb;
    memcpy(&thb, &th, 8);
    gb_u64(&k, thb);
    gb_str(&k, "qwen3.rope.scaling.factor"); /* beyond f32: not mapped, copied as it is */
    gb_u32(&k, RAD_VAL_F64);
    th = 1e300;
    memcpy(&thb, &th, 8);
    gb_u64(&k, thb);
    gb_str(&k, "tokenizer.ggml.tokens");
    gb_u32(&k, RAD_VAL_ARRAY);
    gb_u32(&k, RAD_VAL_STRING);
    gb_u64(&k, 3);
    gb_str(&k, "a");
    gb_str(&k, "b");
    gb_str(&k, "c");
    gb_str(&k, "tokenizer.ggml.eos_token_id");
    gb_u32(&k, RAD_VAL_I32);
    gb_u32(&k, 0xffffffffu); /* -1 */
    gb_kv_u32(&k, "tokenizer.ggml.bos_token_id", 0xffffffffu);
    gb_kv_u32(&k, "tokenizer.ggml.seperator_token_id", 2);
    gb_kv_str(&k, "tokenizer.chat_template", "<|start_header_id|>{{ x }}");
    TI t[1] = {{.name = "output.weight", .n_dims = 2, .ne = {4, 2}, .type = 1, .off = 0}};
    GB b = build(3, 1, 13, &k, t, 1, 32, 16);
    RadModelFile m;
    RadErr e;
    cr_assert_eq(load_mem(b.p, b.n, "q.gguf", &m, &e), RAD_OK, "%s", e.msg);
    const char *s;
    cr_assert_eq(rad_dict_gets(&m.meta, "model.quant", &s, &e), RAD_OK);
    cr_assert_str_eq(s, "");
    cr_assert_eq(geti(&m.meta, "model.n_head"), 8);
    cr_assert_null(rad_dict_get(&m.meta, "model.n_head_kv"));
    const RadValue *v = rad_dict_get(&m.meta, "attention.head_count_kv");
    cr_assert(v && v->type == RAD_VAL_ARRAY && v->n == 2);
    cr_assert_eq(geti(&m.meta, "model.head_dim"), 8);
    cr_assert_eq(geti(&m.meta, "model.n_expert"), 4);
    cr_assert_eq(geti(&m.meta, "model.n_expert_used"), 0);
    cr_assert_null(rad_dict_get(&m.meta, "expert_count"));
    cr_assert_eq(geti(&m.meta, "model.n_vocab"), 3);
    cr_assert_eq(geti(&m.meta, "model.tie_embeddings"), 0);
    double d;
    cr_assert_eq(rad_dict_getf(&m.meta, "model.rope_theta", &d, &e), RAD_OK);
    cr_assert_eq(d, 1e6);
    cr_assert_null(rad_dict_get(&m.meta, "rope.freq_base"));
    cr_assert_eq(rad_dict_getf(&m.meta, "rope.scaling.factor", &d, &e), RAD_OK);
    cr_assert_eq(d, 1e300);
    cr_assert_null(rad_dict_get(&m.meta, "model.rms_eps"));
    cr_assert_null(rad_dict_get(&m.tok, "tokenizer.eos_id"));
    cr_assert_null(rad_dict_get(&m.tok, "tokenizer.bos_id"));
    cr_assert_eq(geti(&m.tok, "tokenizer.sep_id"), 2);
    cr_assert_eq(rad_dict_gets(&m.chat, "chat.kind", &s, &e), RAD_OK);
    cr_assert_str_eq(s, "llama3");
    cr_assert_null(rad_dict_get(&m.chat, "chat.bos"));
    cr_assert_eq(m.chat.n, 2);
    rad_model_free(&m);
    free(b.p);
    free(k.p);
    /* llama2 and unknown chat kinds */
    const char *tpl[2] = {"[INST] {{ m }} [/INST]", "{{ m }}"}, *kind[2] = {"llama2", "unknown"};
    for (int i = 0; i < 2; i++) {
        k = arch_kv();
        gb_kv_str(&k, "tokenizer.chat_template", tpl[i]);
        b = build(3, 0, 2, &k, NULL, 0, 0, 0);
        cr_assert_eq(load_mem(b.p, b.n, "c.gguf", &m, &e), RAD_OK, "%s", e.msg);
        cr_assert_eq(rad_dict_gets(&m.chat, "chat.kind", &s, &e), RAD_OK);
        cr_assert_str_eq(s, kind[i]);
        rad_model_free(&m);
        free(b.p);
        free(k.p);
    }
}

/* The "past end of file" message names the exact byte range and the file size. */
Test(gguf, past_end_message) {
    GB k = arch_kv();
    TI t[2];
    memcpy(t, good_ti, sizeof t);
    t[1].off = 64;
    GB b = build(3, 2, 1, &k, t, 2, 32, 100);
    RadModelFile m;
    RadErr e;
    cr_assert_eq(load_mem(b.p, b.n, "m.gguf", &m, &e), RAD_E_FORMAT);
    char want[160];
    snprintf(want, sizeof want, "m.gguf: tensor 'b': data [%llu, %llu) past end of file (%zu bytes)",
             (unsigned long long)(m.data_offset + 64), (unsigned long long)(m.data_offset + 132), b.n);
    cr_assert_str_eq(e.msg, want);
    rad_model_free(&m);
    free(b.p);
    free(k.p);
}

/* ---- the real model ---------------------------------------------------------------------- */

static void need_model(void) {
    if (access(MODEL, R_OK) != 0)
        cr_assert_fail("%s is missing: run `make model` (make test-unit fetches it)", MODEL);
}

Test(gguf, smollm2) {
    need_model();
    RadModelFile m;
    RadErr e;
    cr_assert_eq(load_path(MODEL, &m, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(m.version, 3);
    cr_assert_eq(m.alignment, 32);
    cr_assert_eq(m.n_tensors, 272);
    const char *s;
    cr_assert_eq(rad_dict_gets(&m.meta, "model.arch_id", &s, &e), RAD_OK);
    cr_assert_str_eq(s, "llama");
    cr_assert_eq(rad_dict_gets(&m.meta, "model.quant", &s, &e), RAD_OK);
    cr_assert_str_eq(s, "q4_1");
    cr_assert_eq(geti(&m.meta, "model.n_layers"), 30);
    cr_assert_eq(geti(&m.meta, "model.n_embd"), 576);
    cr_assert_eq(geti(&m.meta, "model.n_head"), 9);
    cr_assert_eq(geti(&m.meta, "model.n_head_kv"), 3);
    cr_assert_eq(geti(&m.meta, "model.head_dim"), 64);
    cr_assert_eq(geti(&m.meta, "model.n_ff"), 1536);
    cr_assert_eq(geti(&m.meta, "model.n_vocab"), 49152);
    cr_assert_eq(geti(&m.meta, "model.n_ctx_train"), 8192);
    cr_assert_eq(geti(&m.meta, "model.tie_embeddings"), 1);
    cr_assert_eq(geti(&m.meta, "rope.dimension_count"), 64);
    double th;
    cr_assert_eq(rad_dict_getf(&m.meta, "model.rope_theta", &th, &e), RAD_OK);
    cr_assert_eq(th, 100000.0);
    cr_assert_eq(rad_dict_getf(&m.meta, "model.rms_eps", &th, &e), RAD_OK);
    cr_assert_eq((float)th, 1e-5f);
    RadModelMeta mm;
    cr_assert_eq(rad_model_meta(&m, &mm, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(mm.n_layers, 30);
    cr_assert_eq(mm.rope_theta, 100000.0f);
    /* raw keeps the GGUF names */
    cr_assert_eq(m.raw.n, 33);
    cr_assert_eq(geti(&m.raw, "llama.block_count"), 30);
    /* tokenizer */
    const RadValue *v = rad_dict_get(&m.tok, "tokenizer.tokens");
    cr_assert(v && v->type == RAD_VAL_ARRAY && v->arr_type == RAD_VAL_STRING);
    cr_assert_eq(v->n, 49152);
    cr_assert_str_eq(((const RadStr *)v->v.arr)[1].p, "<|im_start|>");
    v = rad_dict_get(&m.tok, "tokenizer.merges");
    cr_assert(v && v->arr_type == RAD_VAL_STRING);
    cr_assert_eq(v->n, 48900);
    v = rad_dict_get(&m.tok, "tokenizer.token_type");
    cr_assert(v && v->arr_type == RAD_VAL_I32 && v->n == 49152);
    cr_assert_eq(rad_dict_gets(&m.tok, "tokenizer.model", &s, &e), RAD_OK);
    cr_assert_str_eq(s, "gpt2");
    cr_assert_eq(rad_dict_gets(&m.tok, "tokenizer.pre", &s, &e), RAD_OK);
    cr_assert_str_eq(s, "smollm");
    cr_assert_eq(geti(&m.tok, "tokenizer.bos_id"), 1);
    cr_assert_eq(geti(&m.tok, "tokenizer.eos_id"), 2);
    cr_assert_eq(geti(&m.tok, "tokenizer.unk_id"), 0);
    cr_assert_eq(geti(&m.tok, "tokenizer.pad_id"), 2);
    cr_assert_eq(geti(&m.tok, "tokenizer.add_bos"), 0);
    cr_assert_eq(rad_dict_get(&m.tok, "tokenizer.tokens")->type, RAD_VAL_ARRAY);
    cr_assert_null(rad_dict_get(&m.tok, "tokenizer.eot_id"));
    cr_assert_eq(rad_dict_gets(&m.chat, "chat.kind", &s, &e), RAD_OK);
    cr_assert_str_eq(s, "chatml");
    cr_assert_eq(rad_dict_gets(&m.chat, "chat.eos", &s, &e), RAD_OK);
    cr_assert_str_eq(s, "<|im_end|>");
    /* tensors */
    const RadTensor *t = rad_model_find(&m, "token_embd.weight");
    cr_assert(t);
    cr_assert_eq(t->enc, RAD_ENC_Q8_0);
    cr_assert_eq(t->rank, 2);
    cr_assert_eq(t->shape[0], 49152);
    cr_assert_eq(t->shape[1], 576);
    cr_assert_eq(t->planes[0].nbytes, 49152ull * 576 / 32 * 34);
    t = rad_model_find(&m, "blk.0.ffn_down.weight"); /* GGUF ne [1536, 576] */
    cr_assert(t);
    cr_assert_eq(t->enc, RAD_ENC_Q4_1);
    cr_assert_eq(t->rank, 2);
    cr_assert_eq(t->shape[0], 576);
    cr_assert_eq(t->shape[1], 1536);
    cr_assert_eq(t->planes[0].nbytes, 576ull * 1536 / 32 * 20);
    t = rad_model_find(&m, "blk.0.attn_norm.weight");
    cr_assert(t && t->enc == RAD_ENC_F32 && t->rank == 1 && t->shape[0] == 576);
    cr_assert_null(rad_model_find(&m, "output.weight"));
    for (uint64_t i = 0; i < m.n_tensors; i++) cr_assert(m.tensors[i].planes[0].data);
    rad_model_free(&m);
}

/* Slices of real tensors against the gguf package's dequantize (smollm2.slices). */
Test(gguf, smollm2_dequant_slices) {
    need_model();
    RadModelFile m;
    RadErr e;
    cr_assert_eq(load_path(MODEL, &m, &e), RAD_OK, "%s", e.msg);
    size_t n;
    char *sl = slurp(FIX "smollm2.slices", &n);
    sl = realloc(sl, n + 1);
    sl[n] = 0;
    int checked = 0;
    for (char *l = sl; *l; l = strchr(l, '\n') + 1) {
        char name[128], enc[16], file[64];
        unsigned long long off, count;
        cr_assert_eq(sscanf(l, "slice %127s %15s %llu %llu %63s", name, enc, &off, &count, file), 5);
        const RadTensor *t = rad_model_find(&m, name);
        cr_assert(t, "%s", name);
        const RadEncInfo *ei = rad_enc_info(t->enc);
        cr_assert_str_eq(ei->name, enc);
        cr_assert_eq(off % ei->block_elems, 0);
        char gp[128];
        snprintf(gp, sizeof gp, FIX "%s", file);
        size_t ng;
        uint8_t *g = slurp(gp, &ng);
        cr_assert_eq(ng, count * 4);
        float *out = malloc(count * 4);
        uint64_t boff = off / ei->block_elems * ei->block_bytes;
        uint64_t nbytes = count / ei->block_elems * ei->block_bytes;
        cr_assert_leq(boff + nbytes, t->planes[0].nbytes);
        cr_assert_eq(rad_dequant(t->enc, t->planes[0].data + boff, nbytes, out, count, &e), RAD_OK,
                     "%s", e.msg);
        cr_assert(memcmp(out, g, count * 4) == 0, "%s: slice differs from the gguf package's", name);
        free(out);
        free(g);
        checked++;
        if (!strchr(l, '\n')) break;
    }
    cr_assert_geq(checked, 1);
    free(sl);
    rad_model_free(&m);
}

/* The model's header through a stream (as from stdin): no data pointers, same metadata. */
Test(gguf, smollm2_stream) {
    need_model();
    int fd = open(MODEL, O_RDONLY);
    cr_assert_geq(fd, 0);
    RadIn in;
    rad_in_init_fd(&in, fd, "<stdin>");
    RadModelFile m = {0};
    RadErr e = {0};
    cr_assert_eq(rad_gguf_load(&in, &m, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(m.n_tensors, 272);
    cr_assert_eq(m.ins[0].pos, m.data_offset);
    cr_assert_null(m.tensors[0].planes[0].data);
    cr_assert_eq(geti(&m.meta, "model.n_vocab"), 49152);
    rad_model_free(&m);
    close(fd);
}

/* ---- hostile sizes and lying metadata (issue 11, classes 4 and 9) ------------------------- */

/* 100,000 metadata keys and 100,000 tensors load (duplicate checks are hashed or sorted, not
 * a scan per entry: this took minutes when they were quadratic); a duplicate after them all
 * is still found. Each file loads in well under a second here. */
Test(gguf, many_keys) {
    enum { N = 100000 };
    GB k = arch_kv();
    char key[64];
    for (uint32_t i = 0; i < N; i++) {
        snprintf(key, sizeof key, "x.key_%u", i);
        gb_kv_u32(&k, key, i);
    }
    GB b = build(3, 0, N + 1, &k, NULL, 0, 0, 0);
    RadModelFile m;
    RadErr e;
    cr_assert_eq(load_mem(b.p, b.n, "many.gguf", &m, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(m.raw.n, (uint64_t)N + 1);
    cr_assert_eq(geti(&m.raw, "x.key_0"), 0);
    cr_assert_eq(geti(&m.raw, "x.key_99999"), 99999);
    cr_assert_null(rad_dict_get(&m.raw, "x.key_100000"));
    rad_model_free(&m);
    free(b.p);
    gb_kv_u32(&k, "x.key_4242", 1); /* the last key repeats one */
    b = build(3, 0, N + 2, &k, NULL, 0, 0, 0);
    expect_fail_ex(&b, RAD_E_FORMAT, "metadata key 'x.key_4242' appears twice", true);
    free(k.p);
}

Test(gguf, many_tensors) {
    enum { N = 100000 };
    TI *t = calloc(N + 1, sizeof *t);
    char (*names)[32] = calloc(N + 1, sizeof *names);
    for (uint32_t i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "t.%u", i);
        t[i] = (TI){.name = names[i], .n_dims = 1, .ne = {8}, .type = 0, .off = (uint64_t)i * 32};
    }
    GB k = arch_kv();
    GB b = build(3, N, 1, &k, t, N, 32, (size_t)N * 32);
    RadModelFile m;
    RadErr e;
    cr_assert_eq(load_mem(b.p, b.n, "many.gguf", &m, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(m.n_tensors, (uint64_t)N);
    cr_assert_str_eq(m.tensors[N - 1].name, "t.99999");
    cr_assert_eq(m.tensors[N - 1].planes[0].offset, (uint64_t)(N - 1) * 32);
    rad_model_free(&m);
    free(b.p);
    /* one more, named like an earlier one: found after the sort */
    t[N] = (TI){.name = "t.777", .n_dims = 1, .ne = {8}, .type = 0, .off = (uint64_t)N * 32};
    b = build(3, N + 1, 1, &k, t, N + 1, 32, (size_t)(N + 1) * 32);
    expect_fail_ex(&b, RAD_E_FORMAT, "tensor 't.777' appears twice", true);
    free(k.p);
    free(t);
    free(names);
}

static void gb_kv_f32(GB *b, const char *key, float x) {
    gb_str(b, key);
    gb_u32(b, RAD_VAL_F32);
    uint32_t w;
    memcpy(&w, &x, 4);
    gb_u32(b, w);
}

/* A file whose model metadata lies: refused naming the key, never defaulted or read as 0. */
Test(gguf, lying_metadata) {
    static const struct {
        const char *what;
        int kind; /* 0 f32, 1 string, 2 i32, 3 bool, 4 f32 array */
        const char *key;
        float f;
        int32_t i;
        const char *want;
    } cases[] = {
        {"inf rope base", 0, "llama.rope.freq_base", INFINITY, 0, "key 'llama.rope.freq_base': inf is not a finite number in (0, 1e+12]"},
        {"nan rope base", 0, "llama.rope.freq_base", NAN, 0, "key 'llama.rope.freq_base': nan is not a finite number"},
        {"negative rope base", 0, "llama.rope.freq_base", -1.0f, 0, "key 'llama.rope.freq_base': -1 is not a finite number"},
        {"zero eps", 0, "llama.attention.layer_norm_rms_epsilon", 0.0f, 0, "key 'llama.attention.layer_norm_rms_epsilon': 0 is not"},
        {"eps of 2", 0, "llama.attention.layer_norm_rms_epsilon", 2.0f, 0, "(0, 1]"},
        {"string block_count", 1, "llama.block_count", 0, 0, "key 'llama.block_count' is a string, expected an integer"},
        {"float head count", 0, "llama.attention.head_count", 8.0f, 0, "key 'llama.attention.head_count' is an f32, expected an integer"},
        {"bool block_count", 3, "llama.block_count", 0, 0, "key 'llama.block_count' is a bool, expected an integer"},
        {"negative block_count", 2, "llama.block_count", 0, -1, "key 'llama.block_count': -1 is out of range"},
        {"string rope base", 1, "llama.rope.freq_base", 0, 0, "key 'llama.rope.freq_base' is a string, expected a number"},
        {"inf scaling factor", 0, "llama.rope.scaling.factor", INFINITY, 0, "key 'llama.rope.scaling.factor' is inf, not a finite number"},
        {"nan in a per-layer array", 4, "llama.attention.layer_norm_epsilon", NAN, 0, "key 'llama.attention.layer_norm_epsilon'[1] is not a finite number"},
        {"u32 general.name", 2, "general.name", 0, 7, "key 'general.name' is an i32, expected a string"},
        {"string file_type", 1, "general.file_type", 0, 0, "key 'general.file_type' is a string, expected an integer"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        GB k = arch_kv();
        gb_kv_u32(&k, "llama.embedding_length", 64);
        switch (cases[c].kind) {
        case 0: gb_kv_f32(&k, cases[c].key, cases[c].f); break;
        case 1: gb_kv_str(&k, cases[c].key, "30"); break;
        case 2: gb_str(&k, cases[c].key), gb_u32(&k, RAD_VAL_I32), gb_u32(&k, (uint32_t)cases[c].i); break;
        case 3: gb_str(&k, cases[c].key), gb_u32(&k, RAD_VAL_BOOL), gb_put(&k, "\1", 1); break;
        default: {
            gb_str(&k, cases[c].key);
            gb_u32(&k, RAD_VAL_ARRAY);
            gb_u32(&k, RAD_VAL_F32);
            gb_u64(&k, 2);
            float a[2] = {1e-5f, cases[c].f};
            gb_put(&k, a, 8);
        }
        }
        GB b = build(3, 0, 3, &k, NULL, 0, 0, 0);
        RadModelFile m;
        RadErr e;
        int rc = load_mem(b.p, b.n, "lie.gguf", &m, &e);
        cr_assert_eq(rc, RAD_E_FORMAT, "%s: rc %d (%s)", cases[c].what, rc, e.msg);
        check_msg(&e, "lie.gguf", cases[c].want);
        rad_model_free(&m);
        free(b.p);
        free(k.p);
    }
    /* the good values beside them still load: a per-layer count array is kept, not refused */
    GB k = arch_kv();
    gb_kv_u32(&k, "llama.block_count", 30);
    gb_kv_f32(&k, "llama.rope.freq_base", 500000.0f);
    gb_kv_f32(&k, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    GB b = build(3, 0, 4, &k, NULL, 0, 0, 0);
    RadModelFile m;
    RadErr e;
    cr_assert_eq(load_mem(b.p, b.n, "ok.gguf", &m, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(geti(&m.meta, "model.n_layers"), 30);
    double d;
    cr_assert_eq(rad_dict_getf(&m.meta, "model.rope_theta", &d, &e), RAD_OK);
    cr_assert_eq(d, 500000.0);
    rad_model_free(&m);
    free(b.p);
    free(k.p);
}

/* block_count must match the layers the tensors hold ("blk.N."): 1 beside two layers of
 * tensors would convert and run as a one-layer model. */
Test(gguf, block_count_against_the_tensors) {
    static const TI two_layers[3] = {
        {.name = "blk.0.attn_norm.weight", .n_dims = 1, .ne = {8}, .type = 0, .off = 0},
        {.name = "blk.1.attn_norm.weight", .n_dims = 1, .ne = {8}, .type = 0, .off = 32},
        {.name = "output_norm.weight", .n_dims = 1, .ne = {8}, .type = 0, .off = 64},
    };
    static const struct {
        uint32_t n_layers;
        int rc;
        const char *want;
    } cases[] = {
        {1, RAD_E_FORMAT, "tensor 'blk.1.attn_norm.weight' is in layer 1, but key 'llama.block_count' says 1 layer"},
        {3, RAD_E_FORMAT, "key 'llama.block_count' says 3 layers, but the tensors stop at layer 1 ('blk.1.attn_norm.weight')"},
        {2, RAD_OK, NULL},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        GB k = arch_kv();
        gb_kv_u32(&k, "llama.block_count", cases[c].n_layers);
        GB b = build(3, 3, 2, &k, two_layers, 3, 32, 96);
        RadModelFile m;
        RadErr e;
        int rc = load_mem(b.p, b.n, "layers.gguf", &m, &e);
        cr_assert_eq(rc, cases[c].rc, "block_count %u: rc %d (%s)", cases[c].n_layers, rc, e.msg);
        if (cases[c].want) check_msg(&e, "layers.gguf", cases[c].want);
        rad_model_free(&m);
        free(b.p);
        free(k.p);
    }
}
