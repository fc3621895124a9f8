/* rad_pyjson: JSON as CPython's json.dumps(v, ensure_ascii=False) writes it (Jinja's `tojson`).
 * The expectations, tests/fixtures/pyjson/cases.json, are CPython's own output, written by
 * scripts/gen-pyjson-goldens.py. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/text/rad_pyjson.h"
#include "tests/test_util.h"

#define CASES "tests/fixtures/pyjson/cases.json"

Test(pyjson, equals_cpython_json_dumps) {
    size_t n;
    char *text = slurp(CASES, &n);
    json_error_t je;
    json_t *cases = json_loadb(text, n, 0, &je);
    free(text);
    cr_assert_not_null(cases, "%s: %s (line %d)", CASES, je.text, je.line);
    cr_assert(json_is_array(cases));
    cr_assert_geq(json_array_size(cases), 60, "%s: %zu cases", CASES, json_array_size(cases));
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        const char *in = json_string_value(json_object_get(c, "in"));
        json_t *want = json_object_get(c, "out");
        cr_assert(in && json_is_string(want), "%s case %zu: no in/out strings", CASES, i);
        json_t *v = json_loads(in, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        cr_assert_not_null(v, "case %zu: jansson refuses %s: %s", i, in, je.text);
        RadBuf b = {0};
        RadErr e = {0};
        cr_assert_eq(rad_pyjson_dump(&b, v, &e), RAD_OK, "case %zu: %s", i, e.msg);
        size_t wn = json_string_length(want);
        cr_expect(b.len == wn && !memcmp(b.p, json_string_value(want), wn),
                  "case %zu: %s\n  wrote  %s (%zu bytes)\n  python %s (%zu bytes)", i, in, b.p, b.len,
                  json_string_value(want), wn);
        rad_buf_free(&b);
        json_decref(v);
    }
    json_decref(cases);
}

/* depth nested arrays around a 0. */
static json_t *nest(int depth) {
    json_t *v = json_integer(0);
    for (int i = 0; i < depth; i++) {
        json_t *a = json_array();
        cr_assert_eq(json_array_append_new(a, v), 0);
        v = a;
    }
    return v;
}

Test(pyjson, nesting_past_512_is_refused_and_leaves_the_buffer_alone) {
    json_t *deep = nest(600);
    RadBuf b = {0};
    RadErr e = {0};
    cr_assert_eq(rad_buf_puts(&b, "before", &e), RAD_OK);
    cr_assert_eq(rad_pyjson_dump(&b, deep, &e), RAD_E_ARG);
    cr_assert_neq(e.msg[0], 0);
    cr_assert_null(strchr(e.msg, '\n'), "%s", e.msg);
    cr_assert_eq(b.len, 6);
    cr_assert_str_eq(b.p, "before");
    json_decref(deep);
    rad_buf_free(&b);

    /* the bound itself: 512 levels are written, 513 refused */
    json_t *edge = nest(512);
    RadErr e2 = {0};
    cr_assert_eq(rad_pyjson_dump(&b, edge, &e2), RAD_OK, "%s", e2.msg);
    cr_assert_eq(b.len, 512 * 2 + 1);
    cr_assert_eq(b.p[511], '[');
    cr_assert_eq(b.p[512], '0');
    cr_assert_eq(b.p[513], ']');
    rad_buf_free(&b);
    json_t *over = json_array();
    cr_assert_eq(json_array_append_new(over, edge), 0);
    RadErr e3 = {0};
    cr_assert_eq(rad_pyjson_dump(&b, over, &e3), RAD_E_ARG);
    cr_assert_eq(b.len, 0);
    json_decref(over);
    rad_buf_free(&b);
}

Test(pyjson, appends_after_what_the_buffer_holds) {
    json_error_t je;
    json_t *v = json_loads("{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\", \"days\": 3, \"t\": 1e-5}}", 0, &je);
    cr_assert_not_null(v, "%s", je.text);
    const char *prev = "<tool_call>\n";
    const char *want = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\", \"days\": 3, \"t\": 1e-05}}";
    RadBuf b = {0};
    RadErr e = {0};
    cr_assert_eq(rad_buf_puts(&b, prev, &e), RAD_OK);
    cr_assert_eq(rad_pyjson_dump(&b, v, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(b.len, strlen(prev) + strlen(want));
    cr_assert_eq(memcmp(b.p, prev, strlen(prev)), 0);
    cr_assert_str_eq(b.p + strlen(prev), want);
    rad_buf_free(&b);
    json_decref(v);
}

/* A NUL inside a string (jansson holds its length) is escaped, not the end of the text. */
Test(pyjson, a_nul_inside_a_string_is_escaped) {
    json_t *v = json_stringn("a\0b\x1f\x7f", 5);
    cr_assert_not_null(v);
    RadBuf b = {0};
    RadErr e = {0};
    cr_assert_eq(rad_pyjson_dump(&b, v, &e), RAD_OK, "%s", e.msg);
    const char want[] = "\"a\\u0000b\\u001f\x7f\"";
    cr_assert_eq(b.len, sizeof want - 1);
    cr_assert_eq(memcmp(b.p, want, b.len), 0, "%s", b.p);
    rad_buf_free(&b);
    json_decref(v);
}
