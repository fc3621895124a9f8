/* The typed key/value table (the metadata dictionary) and its GGUF encoding. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libcommon/base/rad_dict.h"

static void fill_every_type(RadDict *kv) {
    RadErr e = {0};
    RadValue v;
    static const RadValType scalars[] = {RAD_VAL_U8, RAD_VAL_I8, RAD_VAL_U16, RAD_VAL_I16, RAD_VAL_U32,
                                         RAD_VAL_I32, RAD_VAL_U64, RAD_VAL_I64, RAD_VAL_BOOL};
    for (size_t i = 0; i < sizeof scalars / sizeof scalars[0]; i++) {
        char key[32];
        snprintf(key, sizeof key, "s.%s", rad_val_type_name(scalars[i]));
        v = (RadValue){.type = scalars[i]};
        if (scalars[i] == RAD_VAL_BOOL) v.v.u = 1;
        else if (scalars[i] == RAD_VAL_I8 || scalars[i] == RAD_VAL_I16 || scalars[i] == RAD_VAL_I32 || scalars[i] == RAD_VAL_I64) v.v.i = -5;
        else v.v.u = 200;
        cr_assert_eq(rad_dict_set(kv, key, &v, &e), RAD_OK);
    }
    rad_dict_set_f32(kv, "s.f32", 0.5f, &e);
    v = (RadValue){.type = RAD_VAL_F64, .v.f = 1e300};
    rad_dict_set(kv, "s.f64", &v, &e);
    rad_dict_set_str(kv, "s.string", "héllo", &e);
    float fa[3] = {1, 2, 3};
    rad_dict_set_arr(kv, "a.f32", RAD_VAL_F32, fa, 3, &e);
    const char *sa[2] = {"x", ""};
    rad_dict_set_strarr(kv, "a.string", sa, 2, &e);
    /* [[1, 2], [3]] of u16 */
    RadValue inner[2] = {{.type = RAD_VAL_ARRAY, .arr_type = RAD_VAL_U16, .n = 2},
                         {.type = RAD_VAL_ARRAY, .arr_type = RAD_VAL_U16, .n = 1}};
    uint16_t i0[2] = {1, 2}, i1[1] = {3};
    inner[0].v.arr = i0, inner[1].v.arr = i1;
    RadValue outer = {.type = RAD_VAL_ARRAY, .arr_type = RAD_VAL_ARRAY, .n = 2, .v.arr = inner};
    cr_assert_eq(rad_dict_set(kv, "a.nested", &outer, &e), RAD_OK);
    rad_dict_set_u32(kv, "s.u32", 7, &e); /* replaces, no duplicate */
}

static void encode(const RadDict *kv, RadBuf *b) {
    RadErr e = {0};
    uint8_t c[8];
    for (int i = 0; i < 8; i++) c[i] = (uint8_t)(kv->n >> (8 * i));
    cr_assert_eq(rad_buf_put(b, c, 8, &e), RAD_OK);
    cr_assert_eq(rad_dict_write(kv, b, &e), RAD_OK);
}

static int decode(const uint8_t *p, size_t n, RadDict *kv, RadErr *e) {
    RadIn in;
    rad_in_init_mem(&in, p, n, "kv.bin");
    uint64_t count;
    int rc = rad_in_u64(&in, &count, "count", e);
    return rc ? rc : rad_dict_read(&in, kv, count, e);
}

Test(kv, every_type_round_trips) {
    RadDict kv, back;
    rad_dict_init(&kv), rad_dict_init(&back);
    fill_every_type(&kv);
    RadBuf b = {0};
    encode(&kv, &b);
    RadErr e = {0};
    cr_assert_eq(decode((const uint8_t *)b.p, b.len, &back, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(back.n, kv.n);
    int64_t x;
    cr_assert_eq(rad_dict_geti(&back, "s.i64", &x, &e), RAD_OK);
    cr_assert_eq(x, -5);
    cr_assert_eq(rad_dict_geti(&back, "s.u32", &x, &e), RAD_OK);
    cr_assert_eq(x, 7);
    double f;
    cr_assert_eq(rad_dict_getf(&back, "s.f64", &f, &e), RAD_OK);
    cr_assert_eq(f, 1e300);
    const char *s;
    cr_assert_eq(rad_dict_gets(&back, "s.string", &s, &e), RAD_OK);
    cr_assert_str_eq(s, "héllo");
    const RadValue *n = rad_dict_get(&back, "a.nested");
    cr_assert(n && n->arr_type == RAD_VAL_ARRAY && n->n == 2);
    const RadValue *in1 = &((const RadValue *)n->v.arr)[1];
    cr_assert(in1->arr_type == RAD_VAL_U16 && in1->n == 1 && ((uint16_t *)in1->v.arr)[0] == 3);
    /* re-encoding what was read gives the same bytes */
    RadBuf b2 = {0};
    encode(&back, &b2);
    cr_assert_eq(b2.len, b.len);
    cr_assert_eq(memcmp(b.p, b2.p, b.len), 0);
    /* a wrong-type getter names the key */
    rad_err_clear(&e);
    cr_assert_eq(rad_dict_gets(&back, "s.u8", &s, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "'s.u8'") != NULL, "%s", e.msg);
    rad_buf_free(&b), rad_buf_free(&b2);
    rad_dict_free(&kv), rad_dict_free(&back);
}

Test(kv, every_truncation_fails_cleanly) {
    RadDict kv;
    rad_dict_init(&kv);
    fill_every_type(&kv);
    RadBuf b = {0};
    encode(&kv, &b);
    for (size_t cut = 0; cut < b.len; cut++) {
        RadDict back;
        rad_dict_init(&back);
        RadErr e = {0};
        cr_assert_eq(decode((const uint8_t *)b.p, cut, &back, &e), RAD_E_FORMAT, "cut at %zu", cut);
        cr_assert(strstr(e.msg, "kv.bin") != NULL, "%s", e.msg);
        rad_dict_free(&back);
    }
    rad_buf_free(&b);
    rad_dict_free(&kv);
}

/* Hostile counts and lengths are refused before anything is allocated for them. */
Test(kv, hostile_lengths_and_nesting) {
    uint8_t buf[256];
    RadErr e = {0};
    RadDict kv;
    /* count 2^62 */
    memset(buf, 0, sizeof buf);
    buf[7] = 0x40;
    rad_dict_init(&kv);
    cr_assert_eq(decode(buf, 64, &kv, &e), RAD_E_FORMAT);
    rad_dict_free(&kv);
    /* one key of length 2^63 */
    memset(buf, 0, sizeof buf);
    buf[0] = 1;
    buf[15] = 0x80;
    rad_dict_init(&kv);
    rad_err_clear(&e);
    cr_assert_eq(decode(buf, 64, &kv, &e), RAD_E_FORMAT);
    rad_dict_free(&kv);
    /* key "k", type array of u64 with 2^61 elements */
    memset(buf, 0, sizeof buf);
    buf[0] = 1, buf[8] = 1, buf[16] = 'k', buf[17] = RAD_VAL_ARRAY, buf[21] = RAD_VAL_U64, buf[32] = 0x20;
    rad_dict_init(&kv);
    rad_err_clear(&e);
    cr_assert_eq(decode(buf, 64, &kv, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "'k'") != NULL, "%s", e.msg);
    rad_dict_free(&kv);
    /* arrays nested 20 deep */
    size_t o = 0;
    memset(buf, 0, sizeof buf);
    buf[0] = 1, o = 8;
    buf[o] = 1, o += 8;
    buf[o++] = 'k';
    buf[o] = RAD_VAL_ARRAY, o += 4;
    for (int d = 0; d < 20; d++) {
        buf[o] = RAD_VAL_ARRAY, o += 4;
        buf[o] = 1, o += 8;
    }
    rad_dict_init(&kv);
    rad_err_clear(&e);
    cr_assert_eq(decode(buf, o + 16, &kv, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "nested deeper") != NULL, "%s", e.msg);
    rad_dict_free(&kv);
    /* a key that is not UTF-8, and a bool that is 2 */
    memset(buf, 0, sizeof buf);
    buf[0] = 1, buf[8] = 1, buf[16] = 0xC0, buf[17] = RAD_VAL_BOOL;
    rad_dict_init(&kv);
    rad_err_clear(&e);
    cr_assert_eq(decode(buf, 22, &kv, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "UTF-8") != NULL, "%s", e.msg);
    rad_dict_free(&kv);
    buf[16] = 'b', buf[21] = 2;
    rad_dict_init(&kv);
    rad_err_clear(&e);
    cr_assert_eq(decode(buf, 22, &kv, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "'b'") && strstr(e.msg, "bool"), "%s", e.msg);
    rad_dict_free(&kv);
}

Test(kv, utf8_validator) {
    cr_assert(rad_utf8_valid("plain", 5));
    cr_assert(rad_utf8_valid("\xe4\xb8\xad\xf0\x9f\x98\x80", 7)); /* CJK, emoji */
    cr_assert_not(rad_utf8_valid("\xc0\xaf", 2));             /* overlong */
    cr_assert_not(rad_utf8_valid("\xed\xa0\x80", 3));         /* surrogate */
    cr_assert_not(rad_utf8_valid("\xe4\xb8", 2));             /* cut */
    cr_assert_not(rad_utf8_valid("\xf4\x90\x80\x80", 4));     /* > U+10FFFF */
}

/* The hash index: 100,000 keys set, replaced and found (a scan per key made this quadratic);
 * the table's order and the small-table path are unchanged; the encoding of 100,000 entries
 * reads back with a duplicate after them all still refused. */
Test(kv, many_keys_hashed) {
    enum { N = 100000 };
    RadDict kv;
    rad_dict_init(&kv);
    RadErr e = {0};
    char key[32];
    for (uint32_t i = 0; i < N; i++) {
        snprintf(key, sizeof key, "k.%u", i);
        cr_assert_eq(rad_dict_set_u32(&kv, key, i, &e), RAD_OK);
        if (i == 5) cr_assert_null(kv.idx, "a small table is scanned");
    }
    cr_assert_not_null(kv.idx);
    for (uint32_t i = 0; i < N; i += 7) { /* replacing keeps one entry, in place */
        snprintf(key, sizeof key, "k.%u", i);
        cr_assert_eq(rad_dict_set_u32(&kv, key, i + 1, &e), RAD_OK);
    }
    cr_assert_eq(kv.n, (uint64_t)N);
    for (uint32_t i = 0; i < N; i++) {
        snprintf(key, sizeof key, "k.%u", i);
        int64_t x;
        cr_assert_eq(rad_dict_geti(&kv, key, &x, &e), RAD_OK, "%s", key);
        cr_assert_eq(x, i % 7 ? i : i + 1);
        cr_assert_eq(strcmp(kv.keys[i].p, key), 0, "order kept");
    }
    cr_assert_null(rad_dict_get(&kv, "k.100000"));
    cr_assert_null(rad_dict_get(&kv, "k."));
    RadBuf b = {0};
    cr_assert_eq(rad_dict_write(&kv, &b, &e), RAD_OK);
    RadDict back;
    rad_dict_init(&back);
    RadIn in;
    rad_in_init_mem(&in, b.p, b.len, "many");
    cr_assert_eq(rad_dict_read(&in, &back, N, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(back.n, (uint64_t)N);
    cr_assert_not_null(rad_dict_get(&back, "k.99999"));
    rad_dict_free(&back);
    /* the first entry's encoding again at the end: a duplicate */
    RadDict one;
    rad_dict_init(&one);
    rad_dict_set_u32(&one, "k.0", 1, &e);
    cr_assert_eq(rad_dict_write(&one, &b, &e), RAD_OK);
    rad_dict_free(&one);
    rad_dict_init(&back);
    rad_in_init_mem(&in, b.p, b.len, "many");
    cr_assert_eq(rad_dict_read(&in, &back, N + 1, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "many: metadata key 'k.0' appears twice"), "%s", e.msg);
    rad_dict_free(&back);
    rad_buf_free(&b);
    rad_dict_free(&kv);
    cr_assert_null(kv.idx);
}
