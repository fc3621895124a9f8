/* The typed key/value table and its GGUF encoding; the include-wall check. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libcommon/rad_kv.h"

static void fill_every_type(RadKV *kv) {
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
        cr_assert_eq(rad_kv_set(kv, key, &v, &e), RAD_OK);
    }
    rad_kv_set_f32(kv, "s.f32", 0.5f, &e);
    v = (RadValue){.type = RAD_VAL_F64, .v.f = 1e300};
    rad_kv_set(kv, "s.f64", &v, &e);
    rad_kv_set_str(kv, "s.string", "héllo", &e);
    float fa[3] = {1, 2, 3};
    rad_kv_set_arr(kv, "a.f32", RAD_VAL_F32, fa, 3, &e);
    const char *sa[2] = {"x", ""};
    rad_kv_set_strarr(kv, "a.string", sa, 2, &e);
    /* [[1, 2], [3]] of u16 */
    RadValue inner[2] = {{.type = RAD_VAL_ARRAY, .arr_type = RAD_VAL_U16, .n = 2},
                         {.type = RAD_VAL_ARRAY, .arr_type = RAD_VAL_U16, .n = 1}};
    uint16_t i0[2] = {1, 2}, i1[1] = {3};
    inner[0].v.arr = i0, inner[1].v.arr = i1;
    RadValue outer = {.type = RAD_VAL_ARRAY, .arr_type = RAD_VAL_ARRAY, .n = 2, .v.arr = inner};
    cr_assert_eq(rad_kv_set(kv, "a.nested", &outer, &e), RAD_OK);
    rad_kv_set_u32(kv, "s.u32", 7, &e); /* replaces, no duplicate */
}

static void encode(const RadKV *kv, RadBuf *b) {
    RadErr e = {0};
    uint8_t c[8];
    for (int i = 0; i < 8; i++) c[i] = (uint8_t)(kv->n >> (8 * i));
    cr_assert_eq(rad_buf_put(b, c, 8, &e), RAD_OK);
    cr_assert_eq(rad_kv_write(kv, b, &e), RAD_OK);
}

static int decode(const uint8_t *p, size_t n, RadKV *kv, RadErr *e) {
    RadIn in;
    rad_in_init_mem(&in, p, n, "kv.bin");
    uint64_t count;
    int rc = rad_in_u64(&in, &count, "count", e);
    return rc ? rc : rad_kv_read(&in, kv, count, e);
}

Test(kv, every_type_round_trips) {
    RadKV kv, back;
    rad_kv_init(&kv), rad_kv_init(&back);
    fill_every_type(&kv);
    RadBuf b = {0};
    encode(&kv, &b);
    RadErr e = {0};
    cr_assert_eq(decode((const uint8_t *)b.p, b.len, &back, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(back.n, kv.n);
    int64_t x;
    cr_assert_eq(rad_kv_geti(&back, "s.i64", &x, &e), RAD_OK);
    cr_assert_eq(x, -5);
    cr_assert_eq(rad_kv_geti(&back, "s.u32", &x, &e), RAD_OK);
    cr_assert_eq(x, 7);
    double f;
    cr_assert_eq(rad_kv_getf(&back, "s.f64", &f, &e), RAD_OK);
    cr_assert_eq(f, 1e300);
    const char *s;
    cr_assert_eq(rad_kv_gets(&back, "s.string", &s, &e), RAD_OK);
    cr_assert_str_eq(s, "héllo");
    const RadValue *n = rad_kv_get(&back, "a.nested");
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
    cr_assert_eq(rad_kv_gets(&back, "s.u8", &s, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "'s.u8'") != NULL, "%s", e.msg);
    rad_buf_free(&b), rad_buf_free(&b2);
    rad_kv_free(&kv), rad_kv_free(&back);
}

Test(kv, every_truncation_fails_cleanly) {
    RadKV kv;
    rad_kv_init(&kv);
    fill_every_type(&kv);
    RadBuf b = {0};
    encode(&kv, &b);
    for (size_t cut = 0; cut < b.len; cut++) {
        RadKV back;
        rad_kv_init(&back);
        RadErr e = {0};
        cr_assert_eq(decode((const uint8_t *)b.p, cut, &back, &e), RAD_E_FORMAT, "cut at %zu", cut);
        cr_assert(strstr(e.msg, "kv.bin") != NULL, "%s", e.msg);
        rad_kv_free(&back);
    }
    rad_buf_free(&b);
    rad_kv_free(&kv);
}

/* Hostile counts and lengths are refused before anything is allocated for them. */
Test(kv, hostile_lengths_and_nesting) {
    uint8_t buf[256];
    RadErr e = {0};
    RadKV kv;
    /* count 2^62 */
    memset(buf, 0, sizeof buf);
    buf[7] = 0x40;
    rad_kv_init(&kv);
    cr_assert_eq(decode(buf, 64, &kv, &e), RAD_E_FORMAT);
    rad_kv_free(&kv);
    /* one key of length 2^63 */
    memset(buf, 0, sizeof buf);
    buf[0] = 1;
    buf[15] = 0x80;
    rad_kv_init(&kv);
    rad_err_clear(&e);
    cr_assert_eq(decode(buf, 64, &kv, &e), RAD_E_FORMAT);
    rad_kv_free(&kv);
    /* key "k", type array of u64 with 2^61 elements */
    memset(buf, 0, sizeof buf);
    buf[0] = 1, buf[8] = 1, buf[16] = 'k', buf[17] = RAD_VAL_ARRAY, buf[21] = RAD_VAL_U64, buf[32] = 0x20;
    rad_kv_init(&kv);
    rad_err_clear(&e);
    cr_assert_eq(decode(buf, 64, &kv, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "'k'") != NULL, "%s", e.msg);
    rad_kv_free(&kv);
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
    rad_kv_init(&kv);
    rad_err_clear(&e);
    cr_assert_eq(decode(buf, o + 16, &kv, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "nested deeper") != NULL, "%s", e.msg);
    rad_kv_free(&kv);
    /* a key that is not UTF-8, and a bool that is 2 */
    memset(buf, 0, sizeof buf);
    buf[0] = 1, buf[8] = 1, buf[16] = 0xC0, buf[17] = RAD_VAL_BOOL;
    rad_kv_init(&kv);
    rad_err_clear(&e);
    cr_assert_eq(decode(buf, 22, &kv, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "UTF-8") != NULL, "%s", e.msg);
    rad_kv_free(&kv);
    buf[16] = 'b', buf[21] = 2;
    rad_kv_init(&kv);
    rad_err_clear(&e);
    cr_assert_eq(decode(buf, 22, &kv, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "'b'") && strstr(e.msg, "bool"), "%s", e.msg);
    rad_kv_free(&kv);
}

Test(kv, utf8_validator) {
    cr_assert(rad_utf8_valid("plain", 5));
    cr_assert(rad_utf8_valid("\xe4\xb8\xad\xf0\x9f\x98\x80", 7)); /* CJK, emoji */
    cr_assert_not(rad_utf8_valid("\xc0\xaf", 2));             /* overlong */
    cr_assert_not(rad_utf8_valid("\xed\xa0\x80", 3));         /* surrogate */
    cr_assert_not(rad_utf8_valid("\xe4\xb8", 2));             /* cut */
    cr_assert_not(rad_utf8_valid("\xf4\x90\x80\x80", 4));     /* > U+10FFFF */
}

/* The wall check passes on the tree and fails, naming the file, on a breach. */
Test(walls, tree_is_clean_and_a_breach_fails) {
    cr_assert_eq(system("sh scripts/check-walls.sh >/dev/null"), 0);
    char d[] = "/tmp/rad-walls-XXXXXX";
    cr_assert_not_null(mkdtemp(d));
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/arch/llama %s/tools/a %s/tools/b && "
             "echo '#include \"abi/rad_types.h\"' > %s/arch/llama/ok.c && "
             "echo '#include \"libcommon/rad_kv.h\"' > %s/arch/llama/bad.c && "
             "echo '#include \"tools/b/x.h\"' > %s/tools/a/main.c && "
             "sh scripts/check-walls.sh %s > %s/out; echo $? > %s/rc", d, d, d, d, d, d, d, d, d);
    cr_assert_eq(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "grep -q '^1$' %s/rc && grep -q 'arch/llama/bad.c' %s/out && "
             "grep -q 'tools/a/main.c' %s/out && ! grep -q ok.c %s/out", d, d, d, d);
    int rc = system(cmd);
    snprintf(cmd, sizeof cmd, "rm -rf %s", d);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(rc, 0, "check-walls did not report both breaches");
}

/* The engine is the one owner of its state and KV cache: a tool or another libcommon file that
 * includes rad_engine_int.h or rad_kvcache.h is a breach; the engine's own files and the public
 * header are not. */
Test(walls, only_the_engine_sees_its_state_and_kv_cache) {
    char d[] = "/tmp/rad-walls-XXXXXX";
    cr_assert_not_null(mkdtemp(d));
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/libcommon %s/tools/a && touch %s/libcommon/rad_engine_int.h %s/libcommon/rad_kvcache.h && "
             "printf '#include \"rad_engine_int.h\"\\n#include \"rad_kvcache.h\"\\n' > %s/libcommon/rad_engine.c && "
             "echo '#include \"rad_kvcache.h\"' > %s/libcommon/rad_sched.c && "
             "echo '#include \"libcommon/rad_engine.h\"' > %s/tools/a/ok.c && "
             "echo '#include \"libcommon/rad_engine_int.h\"' > %s/tools/a/state.c && "
             "echo '#include \"../../libcommon/rad_kvcache.h\"' > %s/tools/a/kv.c && "
             "sh scripts/check-walls.sh %s > %s/out; echo $? > %s/rc",
             d, d, d, d, d, d, d, d, d, d, d, d);
    cr_assert_eq(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "grep -q '^1$' %s/rc && grep -q 'libcommon/rad_sched.c' %s/out && grep -q 'tools/a/state.c' %s/out && "
             "grep -q 'tools/a/kv.c' %s/out && ! grep -q 'rad_engine.c' %s/out && ! grep -q ok.c %s/out && "
             "[ $(wc -l < %s/out) -eq 3 ]", d, d, d, d, d, d, d);
    int rc = system(cmd);
    snprintf(cmd, sizeof cmd, "rm -rf %s", d);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(rc, 0, "check-walls did not report exactly the three breaches");
}

/* The hash index: 100,000 keys set, replaced and found (a scan per key made this quadratic);
 * the table's order and the small-table path are unchanged; the encoding of 100,000 entries
 * reads back with a duplicate after them all still refused. */
Test(kv, many_keys_hashed) {
    enum { N = 100000 };
    RadKV kv;
    rad_kv_init(&kv);
    RadErr e = {0};
    char key[32];
    for (uint32_t i = 0; i < N; i++) {
        snprintf(key, sizeof key, "k.%u", i);
        cr_assert_eq(rad_kv_set_u32(&kv, key, i, &e), RAD_OK);
        if (i == 5) cr_assert_null(kv.idx, "a small table is scanned");
    }
    cr_assert_not_null(kv.idx);
    for (uint32_t i = 0; i < N; i += 7) { /* replacing keeps one entry, in place */
        snprintf(key, sizeof key, "k.%u", i);
        cr_assert_eq(rad_kv_set_u32(&kv, key, i + 1, &e), RAD_OK);
    }
    cr_assert_eq(kv.n, (uint64_t)N);
    for (uint32_t i = 0; i < N; i++) {
        snprintf(key, sizeof key, "k.%u", i);
        int64_t x;
        cr_assert_eq(rad_kv_geti(&kv, key, &x, &e), RAD_OK, "%s", key);
        cr_assert_eq(x, i % 7 ? i : i + 1);
        cr_assert_eq(strcmp(kv.keys[i].p, key), 0, "order kept");
    }
    cr_assert_null(rad_kv_get(&kv, "k.100000"));
    cr_assert_null(rad_kv_get(&kv, "k."));
    RadBuf b = {0};
    cr_assert_eq(rad_kv_write(&kv, &b, &e), RAD_OK);
    RadKV back;
    rad_kv_init(&back);
    RadIn in;
    rad_in_init_mem(&in, b.p, b.len, "many");
    cr_assert_eq(rad_kv_read(&in, &back, N, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(back.n, (uint64_t)N);
    cr_assert_not_null(rad_kv_get(&back, "k.99999"));
    rad_kv_free(&back);
    /* the first entry's encoding again at the end: a duplicate */
    RadKV one;
    rad_kv_init(&one);
    rad_kv_set_u32(&one, "k.0", 1, &e);
    cr_assert_eq(rad_kv_write(&one, &b, &e), RAD_OK);
    rad_kv_free(&one);
    rad_kv_init(&back);
    rad_in_init_mem(&in, b.p, b.len, "many");
    cr_assert_eq(rad_kv_read(&in, &back, N + 1, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "many: metadata key 'k.0' appears twice"), "%s", e.msg);
    rad_kv_free(&back);
    rad_buf_free(&b);
    rad_kv_free(&kv);
    cr_assert_null(kv.idx);
}
