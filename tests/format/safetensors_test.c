/* safetensors: round trips of every dtype and shape, sharded loading, the reference library's
 * files, and every malformed header we can think of. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libcommon/format/rad_safetensors.h"

/* ---- building files ----------------------------------------------------------------------- */

/* 8-byte LE header length, header, data. */
static uint8_t *st_build(const char *header, const void *data, size_t dlen, size_t *out_len) {
    size_t hl = strlen(header);
    uint8_t *b = malloc(8 + hl + dlen + 1);
    cr_assert_not_null(b);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, header, hl);
    if (dlen) memcpy(b + 8 + hl, data, dlen);
    *out_len = 8 + hl + dlen;
    return b;
}

static void put_u64(uint8_t *b, uint64_t v) {
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
}

typedef struct Spec {
    const char *name;
    const char *dtype;
    uint32_t rank;
    uint64_t shape[RAD_MAX_RANK];
    RadEnc enc;    /* expected */
    size_t esize;  /* bytes per element */
} Spec;

static const Spec ALL[] = {
    {"t.f64", "F64", 2, {2, 3}, RAD_ENC_F64, 8},
    {"t.f32", "F32", 1, {5}, RAD_ENC_F32, 4},
    {"t.f16", "F16", 3, {2, 2, 2}, RAD_ENC_F16, 2},
    {"t.bf16", "BF16", 2, {4, 1}, RAD_ENC_BF16, 2},
    {"t.i64", "I64", 0, {0}, RAD_ENC_I64, 8},
    {"t.i32", "I32", 1, {3}, RAD_ENC_I32, 4},
    {"t.i16", "I16", 4, {1, 2, 1, 3}, RAD_ENC_I16, 2},
    {"t.i8", "I8", 1, {7}, RAD_ENC_I8, 1},
    {"t.u8", "U8", 2, {3, 3}, RAD_ENC_U8, 1},
    {"t.bool", "BOOL", 1, {4}, RAD_ENC_BOOL, 1},
    {"t.f8e4m3", "F8_E4M3", 2, {2, 8}, RAD_ENC_F8_E4M3, 1},
    {"t.f8e5m2", "F8_E5M2", 1, {6}, RAD_ENC_F8_E5M2, 1},
    {"t.empty", "F32", 2, {0, 4}, RAD_ENC_F32, 4},
    {"t.rank8", "U8", 8, {1, 2, 1, 2, 1, 1, 2, 1}, RAD_ENC_U8, 1},
};
#define N_ALL (sizeof ALL / sizeof ALL[0])

static uint64_t spec_bytes(const Spec *s) {
    uint64_t n = s->esize;
    for (uint32_t i = 0; i < s->rank; i++) n *= s->shape[i];
    return n;
}

/* A header for specs laid out back to back in reverse order of listing (so the header's
 * order differs from the data order), and a patterned data area. */
static uint8_t *build_specs(const Spec *specs, size_t n, const char *meta, size_t *len,
                            uint64_t *offs) {
    char hdr[8192];
    size_t o = (size_t)snprintf(hdr, sizeof hdr, "{");
    if (meta) o += (size_t)snprintf(hdr + o, sizeof hdr - o, "\"__metadata__\":%s,", meta);
    uint64_t total = 0;
    for (size_t k = n; k-- > 0;) {
        offs[k] = total;
        total += spec_bytes(&specs[k]);
    }
    for (size_t k = 0; k < n; k++) {
        o += (size_t)snprintf(hdr + o, sizeof hdr - o, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[",
                              k ? "," : "", specs[k].name, specs[k].dtype);
        for (uint32_t i = 0; i < specs[k].rank; i++)
            o += (size_t)snprintf(hdr + o, sizeof hdr - o, "%s%llu", i ? "," : "",
                                  (unsigned long long)specs[k].shape[i]);
        o += (size_t)snprintf(hdr + o, sizeof hdr - o, "],\"data_offsets\":[%llu,%llu]}",
                              (unsigned long long)offs[k],
                              (unsigned long long)(offs[k] + spec_bytes(&specs[k])));
    }
    snprintf(hdr + o, sizeof hdr - o, "}");
    uint8_t *data = malloc(total ? total : 1);
    for (uint64_t i = 0; i < total; i++) data[i] = (uint8_t)(i * 31 + 7);
    uint8_t *f = st_build(hdr, data, total, len);
    free(data);
    return f;
}

/* Loads bytes (copied into an exact-size heap buffer, so ASan sees any over-read). */
static int load_bytes(const uint8_t *b, size_t n, RadModelFile *m, RadErr *e) {
    uint8_t *copy = malloc(n ? n : 1);
    if (n) memcpy(copy, b, n);
    RadIn in;
    rad_in_init_owned(&in, copy, n, "x.safetensors");
    memset(m, 0, sizeof *m);
    rad_err_clear(e);
    int rc = rad_safetensors_load(&in, m, e);
    cr_assert_null(in.data, "the input is moved into the model");
    cr_assert_null(in.owned);
    return rc;
}

/* Loads a header with one small data area and expects a failure. */
static void expect_fail(const char *header, size_t dlen, int code, const char *needle) {
    uint8_t data[64] = {0};
    cr_assert(dlen <= sizeof data);
    size_t n;
    uint8_t *b = st_build(header, data, dlen, &n);
    RadModelFile m;
    RadErr e;
    int rc = load_bytes(b, n, &m, &e);
    cr_assert_eq(rc, code, "header %.80s: got %d (%s), want %d", header, rc, e.msg, code);
    cr_assert_eq(e.code, code);
    cr_assert(strstr(e.msg, needle), "message '%s' lacks '%s'", e.msg, needle);
    cr_assert(strstr(e.msg, "x.safetensors"), "message '%s' lacks the file name", e.msg);
    cr_assert_null(strchr(e.msg, '\n'));
    cr_assert_eq(m.n_tensors, 0, "no partial tensors");
    rad_model_free(&m);
    free(b);
}

/* ---- round trips ---------------------------------------------------------------------------- */

Test(safetensors, every_dtype_and_shape) {
    size_t n;
    uint64_t offs[N_ALL];
    uint8_t *b = build_specs(ALL, N_ALL, "{\"format\":\"pt\",\"note\":\"héllo\"}", &n, offs);
    RadModelFile m;
    RadErr e;
    uint8_t *copy = malloc(n);
    memcpy(copy, b, n);
    RadIn in;
    rad_in_init_owned(&in, copy, n, "all.safetensors");
    memset(&m, 0, sizeof m);
    rad_err_clear(&e);
    cr_assert_eq(rad_safetensors_load(&in, &m, &e), RAD_OK, "%s", e.msg);
    cr_assert_str_eq(m.format, "safetensors");
    cr_assert_str_eq(m.path, "all.safetensors");
    cr_assert_eq(m.n_ins, 1);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | b[i];
    cr_assert_eq(m.data_offset, 8 + hl);
    cr_assert_eq(m.n_tensors, N_ALL);
    const uint8_t *base = m.ins[0].data + m.data_offset;
    for (size_t k = 0; k < N_ALL; k++) {
        const RadTensor *t = rad_model_find(&m, ALL[k].name);
        cr_assert_not_null(t, "%s", ALL[k].name);
        cr_assert_eq(t->enc, ALL[k].enc, "%s", ALL[k].name);
        cr_assert_eq(t->rank, ALL[k].rank);
        for (uint32_t i = 0; i < t->rank; i++) cr_assert_eq(t->shape[i], ALL[k].shape[i]);
        cr_assert_eq(t->n_planes, 1);
        cr_assert_str_eq(t->planes[0].name, "data");
        cr_assert_eq(t->planes[0].offset, offs[k]);
        cr_assert_eq(t->planes[0].nbytes, spec_bytes(&ALL[k]));
        cr_assert_eq(t->planes[0].stored_bytes, spec_bytes(&ALL[k]));
        cr_assert_eq(t->planes[0].compression, 0);
        cr_assert_eq(t->planes[0].data, base + offs[k]);
        cr_assert_eq(t->src, 0);
        for (uint64_t i = 0; i < spec_bytes(&ALL[k]); i++)
            cr_assert_eq(t->planes[0].data[i], (uint8_t)((offs[k] + i) * 31 + 7));
    }
    /* tensors come in data order */
    for (uint64_t i = 1; i < m.n_tensors; i++)
        cr_assert(m.tensors[i - 1].planes[0].offset <= m.tensors[i].planes[0].offset);
    const char *s;
    cr_assert_eq(rad_dict_gets(&m.raw, "format", &s, &e), RAD_OK);
    cr_assert_str_eq(s, "pt");
    cr_assert_eq(rad_dict_gets(&m.raw, "note", &s, &e), RAD_OK);
    cr_assert_str_eq(s, "héllo");
    cr_assert_eq(m.meta.n, 0);
    rad_model_free(&m);
    free(b);
}

Test(safetensors, from_a_mapped_file_and_header_padding) {
    char dir[] = "/tmp/rad-st-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/pad.safetensors", dir);
    /* trailing spaces pad the header to 8 bytes, as the reference writer does */
    const char *hdr = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}     ";
    float v[2] = {1.5f, -2.0f};
    size_t n;
    uint8_t *b = st_build(hdr, v, sizeof v, &n);
    FILE *f = fopen(path, "wb");
    cr_assert_eq(fwrite(b, 1, n, f), n);
    fclose(f);
    RadIn in;
    RadErr e = {0};
    RadModelFile m = {0};
    cr_assert_eq(rad_in_open_file(&in, path, &e), RAD_OK);
    cr_assert_eq(rad_safetensors_load(&in, &m, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(m.n_tensors, 1);
    float got[2];
    memcpy(got, m.tensors[0].planes[0].data, 8);
    cr_assert_float_eq(got[0], 1.5f, 0);
    cr_assert_float_eq(got[1], -2.0f, 0);
    rad_model_free(&m);
    free(b);
    unlink(path);
    rmdir(dir);
}

/* A stream source over a memory buffer. */
typedef struct MemStream {
    const uint8_t *p;
    size_t n, pos;
} MemStream;
static long mem_read(void *user, void *dst, size_t n, RadErr *e) {
    (void)e;
    MemStream *s = user;
    size_t k = s->n - s->pos < n ? s->n - s->pos : n;
    memcpy(dst, s->p + s->pos, k);
    s->pos += k;
    return (long)k;
}

Test(safetensors, stream_input_reads_the_header_only) {
    size_t n;
    uint64_t offs[N_ALL];
    uint8_t *b = build_specs(ALL, 3, NULL, &n, offs);
    MemStream ms = {b, n, 0};
    RadIn in;
    rad_in_init_fn(&in, mem_read, &ms, "<stdin>");
    RadModelFile m = {0};
    RadErr e = {0};
    cr_assert_eq(rad_safetensors_load(&in, &m, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(m.n_tensors, 3);
    for (uint64_t i = 0; i < m.n_tensors; i++) cr_assert_null(m.tensors[i].planes[0].data);
    cr_assert_eq(m.ins[0].pos, m.data_offset, "the stream sits at the data area");
    rad_model_free(&m);
    free(b);
}

Test(safetensors, two_shards_into_one_model) {
    size_t n1, n2;
    uint64_t o1[N_ALL], o2[N_ALL];
    uint8_t *a = build_specs(ALL, 2, "{\"format\":\"pt\"}", &n1, o1);
    uint8_t *b = build_specs(ALL + 2, 3, NULL, &n2, o2);
    RadModelFile m = {0};
    RadErr e = {0};
    RadIn in;
    rad_in_init_mem(&in, a, n1, "a.safetensors");
    uint64_t first = 99;
    cr_assert_eq(rad_safetensors_add(&m, &in, &first, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(first, 0);
    rad_in_init_mem(&in, b, n2, "b.safetensors");
    cr_assert_eq(rad_safetensors_add(&m, &in, &first, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(first, 2);
    cr_assert_eq(m.n_ins, 2);
    cr_assert_eq(m.n_tensors, 5);
    cr_assert_eq(rad_model_find(&m, "t.f64")->src, 0);
    cr_assert_eq(rad_model_find(&m, "t.i64")->src, 1);
    cr_assert_str_eq(m.ins[1].name, "b.safetensors");
    /* a shard that fails leaves nothing of itself behind */
    size_t n3;
    uint8_t *bad = st_build("{\"z\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                            "\"y\":{\"dtype\":\"Q9\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                            "12345678", 8, &n3);
    rad_in_init_mem(&in, bad, n3, "c.safetensors");
    cr_assert_eq(rad_safetensors_add(&m, &in, NULL, &e), RAD_E_UNSUPPORTED);
    cr_assert_eq(m.n_tensors, 5);
    cr_assert_null(rad_model_find(&m, "z"));
    rad_model_free(&m);
    free(a);
    free(b);
    free(bad);
}

Test(safetensors, reads_the_reference_writers_shards) {
    const char *p = "tests/fixtures/hf/tiny-llama/model-00002-of-00002.safetensors";
    RadIn in;
    RadErr e = {0};
    RadModelFile m = {0};
    cr_assert_eq(rad_in_open_file(&in, p, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_safetensors_load(&in, &m, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(m.n_tensors, 11);
    const RadTensor *t = rad_model_find(&m, "model.norm.weight");
    cr_assert_not_null(t);
    cr_assert_eq(t->enc, RAD_ENC_F32);
    cr_assert_eq(t->rank, 1);
    cr_assert_eq(t->shape[0], 16);
    /* scripts/make-hf-fixture.py: value i = ((i*7 + seed) % 17 - 8) / 8; model.norm.weight is
     * the 20th tensor made (seed 20) */
    for (int i = 0; i < 16; i++) {
        float f;
        memcpy(&f, t->planes[0].data + 4 * i, 4);
        cr_assert_float_eq(f, (float)(((i * 7 + 20) % 17) - 8) / 8.0f, 0, "[%d]", i);
    }
    t = rad_model_find(&m, "lm_head.weight");
    cr_assert_eq(t->enc, RAD_ENC_F16);
    cr_assert_eq(t->shape[0], 50);
    cr_assert_eq(t->shape[1], 16);
    const char *s;
    cr_assert_eq(rad_dict_gets(&m.raw, "format", &s, &e), RAD_OK);
    cr_assert_str_eq(s, "pt");
    rad_model_free(&m);
}

Test(safetensors, sniff_and_dtype_names) {
    uint8_t b[16] = {5, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    cr_assert(rad_safetensors_sniff(b, 16));
    cr_assert_not(rad_safetensors_sniff((const uint8_t *)"GGUF\3\0\0\0\0\0\0\0", 12));
    put_u64(b, 200ull << 20);
    cr_assert_not(rad_safetensors_sniff(b, 16));
    RadEnc enc;
    cr_assert(rad_safetensors_dtype("BF16", &enc));
    cr_assert_eq(enc, RAD_ENC_BF16);
    cr_assert_not(rad_safetensors_dtype("U16", &enc));
    cr_assert_not(rad_safetensors_dtype("f32", &enc));
}

/* ---- malformed input ------------------------------------------------------------------------ */

Test(safetensors, truncation_at_every_offset) {
    size_t n;
    uint64_t offs[N_ALL];
    uint8_t *b = build_specs(ALL, 4, "{\"format\":\"pt\"}", &n, offs);
    for (size_t k = 0; k < n; k++) {
        RadModelFile m;
        RadErr e;
        int rc = load_bytes(b, k, &m, &e);
        cr_assert_eq(rc, RAD_E_FORMAT, "cut at %zu of %zu: rc %d (%s)", k, n, rc, e.msg);
        cr_assert(strstr(e.msg, "x.safetensors"), "cut at %zu: '%s'", k, e.msg);
        cr_assert_eq(m.n_tensors, 0);
        rad_model_free(&m);
    }
    RadModelFile m;
    RadErr e;
    cr_assert_eq(load_bytes(b, n, &m, &e), RAD_OK, "%s", e.msg);
    rad_model_free(&m);
    free(b);
}

Test(safetensors, header_length_huge_or_past_the_end) {
    uint8_t b[32] = {0};
    memcpy(b + 8, "{}", 2);
    RadModelFile m;
    RadErr e;
    put_u64(b, UINT64_MAX);
    cr_assert_eq(load_bytes(b, sizeof b, &m, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "100 MiB"), "%s", e.msg);
    rad_model_free(&m);
    put_u64(b, (100ull << 20) + 1);
    cr_assert_eq(load_bytes(b, sizeof b, &m, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "100 MiB"), "%s", e.msg);
    rad_model_free(&m);
    put_u64(b, 25);
    cr_assert_eq(load_bytes(b, sizeof b, &m, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "past the end"), "%s", e.msg);
    rad_model_free(&m);
    put_u64(b, 1);
    cr_assert_eq(load_bytes(b, sizeof b, &m, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "too short"), "%s", e.msg);
    rad_model_free(&m);
    /* an empty header object is a valid file with no tensors */
    put_u64(b, 2);
    cr_assert_eq(load_bytes(b, 10, &m, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(m.n_tensors, 0);
    rad_model_free(&m);
}

Test(safetensors, offsets) {
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, RAD_E_FORMAT,
                "past the end of the data area");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[60,64]}}", 8, RAD_E_FORMAT,
                "tensor 'w'");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8, RAD_E_FORMAT,
                "end before they begin");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 8, RAD_E_FORMAT,
                "data_offsets");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 8, RAD_E_FORMAT,
                "data_offsets");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":\"0-4\"}}", 8, RAD_E_FORMAT,
                "data_offsets");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0, 99999999999999999999]}}",
                8, RAD_E_FORMAT, "header JSON");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 8, RAD_E_FORMAT,
                "hold 4 bytes but dtype F32 and its shape need 8");
}

Test(safetensors, overlapping_tensors) {
    expect_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                16, RAD_E_FORMAT, "overlap");
    expect_fail("{\"a\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[0,16]},"
                "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]}}",
                16, RAD_E_FORMAT, "'a' [0, 16) and 'b' [4, 6) overlap");
    /* empty tensors anywhere, and adjacent ones, are fine */
    size_t n;
    uint8_t d[16] = {0};
    uint8_t *b = st_build("{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
                          "\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,4]},"
                          "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[8,16]}}",
                          d, 16, &n);
    RadModelFile m;
    RadErr e;
    cr_assert_eq(load_bytes(b, n, &m, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(m.n_tensors, 3);
    rad_model_free(&m);
    free(b);
}

Test(safetensors, dtypes_and_shapes) {
    expect_fail("{\"w\":{\"dtype\":\"U16\",\"shape\":[1],\"data_offsets\":[0,2]}}", 8,
                RAD_E_UNSUPPORTED, "tensor 'w': dtype 'U16' is not supported");
    expect_fail("{\"w\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8,
                RAD_E_UNSUPPORTED, "dtype 'f32'");
    expect_fail("{\"w\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 8, RAD_E_FORMAT,
                "field 'dtype': expected string, got integer");
    expect_fail("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 8, RAD_E_FORMAT,
                "field 'dtype' is missing");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 8, RAD_E_FORMAT,
                "shape[0] is not a non-negative integer");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 8, RAD_E_FORMAT,
                "shape[0]");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,4]}}", 8, RAD_E_FORMAT,
                "field 'shape': expected array");
    expect_fail("{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 8,
                RAD_E_UNSUPPORTED, "rank 9 exceeds 8");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4611686018427387904],"
                "\"data_offsets\":[0,4]}}", 8, RAD_E_FORMAT, "overflows");
    expect_fail("{\"w\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952,4],"
                "\"data_offsets\":[0,4]}}", 8, RAD_E_FORMAT, "overflows");
    expect_fail("{\"w\":[1,2]}", 8, RAD_E_FORMAT, "tensor 'w': expected an object, got array");
    expect_fail("{\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 8, RAD_E_FORMAT,
                "empty name");
}

Test(safetensors, header_json) {
    expect_fail("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                "\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
                8, RAD_E_FORMAT, "duplicate");
    expect_fail("{\"w\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 8,
                RAD_E_FORMAT, "not valid UTF-8");
    expect_fail("{\"w\xc0\x80\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 8,
                RAD_E_FORMAT, "not valid UTF-8");
    expect_fail("{\"w\\u0000x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 8,
                RAD_E_FORMAT, "header JSON");
    expect_fail("[1, 2]", 8, RAD_E_FORMAT, "does not start with '{'");
    expect_fail("{\"a\": 1} {}", 8, RAD_E_FORMAT, "header JSON");
    expect_fail("{\"a\": ", 8, RAD_E_FORMAT, "header JSON");
    expect_fail("{\"__metadata__\":{\"k\":1}}", 8, RAD_E_FORMAT,
                "'__metadata__' entry 'k': expected string, got integer");
    expect_fail("{\"__metadata__\":[]}", 8, RAD_E_FORMAT, "'__metadata__': expected object");
}

Test(safetensors, deeply_nested_header) {
    size_t depth = 100000, hl = 6 + 2 * depth;
    char *h = malloc(hl + 2);
    memcpy(h, "{\"a\":", 5);
    memset(h + 5, '[', depth);
    memset(h + 5 + depth, ']', depth);
    h[5 + 2 * depth] = '}';
    h[hl] = 0;
    size_t n;
    uint8_t *b = st_build(h, NULL, 0, &n);
    RadModelFile m;
    RadErr e;
    cr_assert_eq(load_bytes(b, n, &m, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "depth"), "%s", e.msg);
    rad_model_free(&m);
    free(b);
    free(h);
}

Test(safetensors, names_in_messages_are_one_line) {
    expect_fail("{\"a\\nb\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,1]}}", 8,
                RAD_E_UNSUPPORTED, "tensor 'a b'");
}

/* ---- many entries (issue 11, class 4) ------------------------------------------------------- */

/* A header of n_meta __metadata__ entries and n_t one-element F32 tensors; *data_len set. */
static char *many_header(int n_meta, int n_t) {
    size_t cap = (size_t)(n_meta + n_t) * 100 + 64, o = 0;
    char *h = malloc(cap);
    o += (size_t)snprintf(h + o, cap - o, "{\"__metadata__\":{");
    for (int i = 0; i < n_meta; i++) o += (size_t)snprintf(h + o, cap - o, "%s\"k%d\":\"v%d\"", i ? "," : "", i, i);
    o += (size_t)snprintf(h + o, cap - o, "}");
    for (int i = 0; i < n_t; i++)
        o += (size_t)snprintf(h + o, cap - o, ",\"t.%d\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[%d,%d]}",
                              i, 4 * i, 4 * i + 4);
    o += (size_t)snprintf(h + o, cap - o, "}");
    cr_assert(o < cap);
    return h;
}

/* 100,000 __metadata__ entries (the metadata table is hashed: it was a scan per entry), and
 * 100,000 tensors, load; a duplicate is still refused. Each header parses in about 0.3 s here,
 * most of it jansson's. */
Test(safetensors, many_metadata_entries) {
    enum { N = 100000 };
    char *h = many_header(N, 0);
    size_t n;
    uint8_t *b = st_build(h, NULL, 0, &n);
    RadModelFile m;
    RadErr e;
    cr_assert_eq(load_bytes(b, n, &m, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(m.raw.n, (uint64_t)N);
    const char *v = NULL;
    cr_assert_eq(rad_dict_gets(&m.raw, "k99999", &v, &e), RAD_OK);
    cr_assert_str_eq(v, "v99999");
    cr_assert_eq(rad_dict_gets(&m.raw, "k0", &v, &e), RAD_OK);
    cr_assert_str_eq(v, "v0");
    rad_model_free(&m);
    free(b);
    /* the last key repeats an earlier one */
    char *last = strstr(h, "\"k99999\"");
    cr_assert_not_null(last);
    memcpy(last + 1, "k4242", 5);
    memmove(last + 6, last + 7, strlen(last + 7) + 1);
    b = st_build(h, NULL, 0, &n);
    int rc = load_bytes(b, n, &m, &e);
    cr_assert_eq(rc, RAD_E_FORMAT, "rc %d (%s)", rc, e.msg);
    cr_assert(strstr(e.msg, "x.safetensors") && strstr(e.msg, "duplicate"), "%s", e.msg);
    rad_model_free(&m);
    free(b);
    free(h);
}

Test(safetensors, many_tensors) {
    enum { N = 100000 };
    char *h = many_header(0, N);
    uint8_t *data = calloc(N, 4);
    size_t n;
    uint8_t *b = st_build(h, data, (size_t)N * 4, &n);
    RadModelFile m;
    RadErr e;
    cr_assert_eq(load_bytes(b, n, &m, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(m.n_tensors, (uint64_t)N);
    const RadTensor *t = rad_model_find(&m, "t.99999");
    cr_assert(t && t->planes[0].offset == (uint64_t)(N - 1) * 4);
    rad_model_free(&m);
    free(b);
    free(data);
    free(h);
}
