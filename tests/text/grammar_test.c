/* rad_grammar: JSON Schema and JSON mode as a byte automaton. Texts are walked byte by byte
 * through the lazy DFA; refusals name the keyword and its path; a random walk over the allowed
 * bytes always ends in JSON that parses and fits the schema. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/text/rad_grammar.h"
#include "tests/test_util.h"

/* The state after text, or a negative step result. */
static int32_t walk(RadGrammar *g, const char *text, size_t n) {
    int32_t s = rad_grammar_start(g);
    for (size_t i = 0; i < n && s >= 0; i++) s = rad_grammar_step(g, s, (uint8_t)text[i]);
    return s;
}

/* 1 iff text never goes dead and ends accepting. */
static int accepts(RadGrammar *g, const char *text) {
    int32_t s = walk(g, text, strlen(text));
    return s >= 0 && rad_grammar_accepting(g, s);
}

static RadGrammar *compile(const char *schema) {
    json_error_t je;
    json_t *j = json_loads(schema, JSON_DECODE_ANY, &je);
    cr_assert_not_null(j, "test schema does not parse: %s: %s", schema, je.text);
    RadGrammar *g = NULL;
    RadErr e = {0};
    char param[256];
    int rc = rad_grammar_from_schema(j, &g, param, sizeof param, &e);
    json_decref(j);
    cr_assert_eq(rc, RAD_OK, "%s: %s", schema, e.msg);
    cr_assert_not_null(g);
    return g;
}

/* The schema is refused with RAD_E_ARG, the path in param, and the message naming `names`. */
static void refused(const json_t *j, const char *want_param, const char *names) {
    RadGrammar *g = (RadGrammar *)1;
    RadErr e = {0};
    char param[4096];
    strcpy(param, "untouched");
    int rc = rad_grammar_from_schema(j, &g, param, sizeof param, &e);
    char *dump = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
    cr_assert_eq(rc, RAD_E_ARG, "%.200s: rc %d (%s)", dump, rc, e.msg);
    cr_assert_null(g);
    cr_expect_str_eq(param, want_param, "%.200s: %s", dump, e.msg);
    cr_expect(strstr(e.msg, names), "%.200s: message '%s' does not name '%s'", dump, e.msg, names);
    char prefix[4200];
    snprintf(prefix, sizeof prefix, "schema%s%s: ", *want_param ? "." : "", want_param);
    cr_expect(!strncmp(e.msg, prefix, strlen(prefix) < 500 ? strlen(prefix) : 500), "message '%s' does not start '%s'",
              e.msg, prefix);
    cr_expect(!strchr(e.msg, '\n'));
    free(dump);
}

static void refused_text(const char *schema, const char *want_param, const char *names) {
    json_error_t je;
    json_t *j = json_loads(schema, JSON_DECODE_ANY, &je);
    cr_assert_not_null(j, "test schema does not parse: %s: %s", schema, je.text);
    refused(j, want_param, names);
    json_decref(j);
}

#define WEATHER                                                                                             \
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"type\":\"string\","   \
    "\"enum\":[\"celsius\",\"fahrenheit\"]},\"days\":{\"type\":\"integer\"}},\"required\":[\"city\",\"unit\"]," \
    "\"additionalProperties\":false}"

Test(grammar, json_mode_accepts_any_object_and_only_json) {
    test_deadline(10);
    RadGrammar *g;
    RadErr e = {0};
    cr_assert_eq(rad_grammar_json_object(8, &g, &e), RAD_OK, "%s", e.msg);
    cr_expect(accepts(g, "{\"a\": [1, 2.5e-3, \"x\\u00e9\", true, null, {\"b\": {}}]}"));
    cr_expect(accepts(g, "{\n  \"a\": [\n    1,\n    -0.5E+10\n  ],\n\t\"b\" : {},\r\n  \"c\":false\n}"));
    cr_expect(accepts(g, "{}"));
    cr_expect(accepts(g, "{\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\": \"\\ud83d\\ude00 \\\" \\\\ \\/ \\b\\f\\n\\r\\t\"}"));
    cr_expect(!accepts(g, "[1]"), "the top level must be an object");
    cr_expect(!accepts(g, "\"a\""));
    cr_expect(!accepts(g, "{\"a\": 01}"));
    cr_expect(!accepts(g, "{\"a\": 1.}"));
    cr_expect(!accepts(g, "{\"a\": .5}"));
    cr_expect(!accepts(g, "{\"a\": +1}"));
    cr_expect(!accepts(g, "{\"a\": \"x\ny\"}"), "a raw newline in a string");
    cr_expect(!accepts(g, "{\"a\": \"\\x\"}"), "an unknown escape");
    cr_expect(!accepts(g, "{\"a\": \"\\u12\"}"));
    cr_expect(!accepts(g, "{\"a\": \"\\udc00\"}"), "a lone low surrogate");
    cr_expect(!accepts(g, "{\"a\": \"\\ud83d\"}"), "a high surrogate alone");
    cr_expect(!accepts(g, "{\"a\": \"\xc0\xaf\"}"), "an overlong");
    cr_expect(!accepts(g, "{\"a\": \"\xed\xa0\x80\"}"), "a UTF-8 surrogate");
    cr_expect(!accepts(g, "{\"a\": \"\x80\"}"), "a stray continuation byte");
    cr_expect(!accepts(g, "{\"a\":1,}"));
    cr_expect(!accepts(g, "{\"a\" 1}"));
    cr_expect(!accepts(g, "{a: 1}"));
    cr_expect(!accepts(g, "{\"a\": [1,]}"));
    cr_expect(!accepts(g, "{\"a\": [1}"));
    cr_expect(!accepts(g, "{\"a\": {]}"));
    cr_expect(!accepts(g, "{\"a\": tru}"));
    cr_expect(!accepts(g, "{}x"), "trailing garbage");
    cr_expect(!accepts(g, "{}}"));
    cr_expect(!accepts(g, "{} "), "no whitespace after the value");
    cr_expect(!accepts(g, " {}"), "no whitespace before it");
    cr_expect(!accepts(g, "{"));
    rad_grammar_free(g);

    cr_assert_eq(rad_grammar_json_object(3, &g, &e), RAD_OK, "%s", e.msg);
    cr_expect(accepts(g, "{\"a\": {\"b\": {\"c\": 1}}}"), "3 deep");
    cr_expect(accepts(g, "{\"a\": [[1], {}]}"));
    cr_expect(!accepts(g, "{\"a\": {\"b\": {\"c\": {}}}}"), "4 deep");
    cr_expect(!accepts(g, "{\"a\": [[[1]]]}"));
    rad_grammar_free(g);

    cr_assert_eq(rad_grammar_json_object(0, &g, &e), RAD_E_ARG);
    cr_expect(strstr(e.msg, "max_depth"), "%s", e.msg);
}

/* {"a": X}, X nesting `levels` containers: [ and {"k": by turns; 1 + levels deep. */
static char *nested(int levels) {
    char *t = malloc((size_t)levels * 8 + 16), *p = t;
    cr_assert_not_null(t);
    p += sprintf(p, "{\"a\":");
    for (int i = 0; i < levels; i++) p += sprintf(p, i % 2 ? "{\"k\":" : "[");
    *p++ = '1';
    for (int i = levels - 1; i >= 0; i--) *p++ = i % 2 ? '}' : ']';
    *p++ = '}';
    *p = 0;
    return t;
}

/* The generic parts are expanded as the walk enters them: deep nesting costs only the path. */
Test(grammar, json_mode_deep_nesting_is_expanded_lazily) {
    test_deadline(10);
    RadGrammar *g;
    RadErr e = {0};
    cr_assert_eq(rad_grammar_json_object(200, &g, &e), RAD_OK, "%s", e.msg);
    char *t = nested(199);
    cr_expect(accepts(g, t), "200 deep");
    free(t);
    cr_expect_lt(rad_grammar_n_nfa(g), 100000, "%d NFA states", rad_grammar_n_nfa(g));
    t = nested(200);
    cr_expect(!accepts(g, t), "201 deep");
    free(t);
    rad_grammar_free(g);
}

Test(grammar, weather_schema) {
    test_deadline(10);
    RadGrammar *g = compile(WEATHER);
    cr_expect(accepts(g, "{\"city\": \"Paris\", \"unit\": \"celsius\"}"));
    cr_expect(accepts(g, "{\"city\":\"Paris\",\"unit\":\"fahrenheit\",\"days\":3}"));
    cr_expect(accepts(g, "{ \"city\" :\"\",\n \"unit\": \"celsius\" , \"days\": -12 }"));
    cr_expect(!accepts(g, "{\"city\": \"Paris\"}"), "unit is required");
    cr_expect(!accepts(g, "{\"unit\": \"celsius\"}"), "city is required");
    cr_expect(!accepts(g, "{\"unit\": \"celsius\", \"city\": \"Paris\"}"), "keys out of order");
    cr_expect(!accepts(g, "{\"city\": \"Paris\", \"unit\": \"celsius\", \"wind\": 1}"), "an unknown key");
    cr_expect(!accepts(g, "{\"city\": \"Paris\", \"unit\": \"kelvin\"}"));
    cr_expect(!accepts(g, "{\"city\": \"Paris\", \"unit\": \"celsius\", \"days\": 2.5}"));
    cr_expect(!accepts(g, "{\"city\": \"Paris\", \"unit\": \"celsius\", \"days\": \"3\"}"));
    cr_expect(!accepts(g, "{\"city\": \"Paris\", \"city\": \"Rome\", \"unit\": \"celsius\"}"), "a duplicate key");
    cr_expect(!accepts(g, "{\"city\": \"Paris\", \"unit\": \"celsius\", \"days\": 1, \"days\": 2}"));
    cr_expect(!accepts(g, "{\"city\": \"Paris\", \"unit\": \"celsius\",}"));
    cr_expect(!accepts(g, "{\"city\": 1, \"unit\": \"celsius\"}"));
    rad_grammar_free(g);
}

Test(grammar, optional_properties_keep_commas_right) {
    test_deadline(10);
    RadGrammar *g = compile("{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}}}");
    cr_expect(accepts(g, "{}"));
    cr_expect(accepts(g, "{ }"));
    cr_expect(accepts(g, "{\"a\": 1}"));
    cr_expect(accepts(g, "{\"b\": 2}"));
    cr_expect(accepts(g, "{\"a\": 1, \"b\": 2}"));
    cr_expect(!accepts(g, "{\"a\": 1,}"));
    cr_expect(!accepts(g, "{, \"b\": 2}"));
    cr_expect(!accepts(g, "{\"a\": 1 \"b\": 2}"));
    cr_expect(!accepts(g, "{\"b\": 2, \"a\": 1}"));
    rad_grammar_free(g);

    /* required after optional, optional after required */
    g = compile("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"null\"},\"b\":{\"type\":\"boolean\"},"
                "\"c\":{\"type\":\"null\"}},\"required\":[\"b\"]}");
    cr_expect(accepts(g, "{\"b\": true}"));
    cr_expect(accepts(g, "{\"a\": null, \"b\": false}"));
    cr_expect(accepts(g, "{\"b\": false, \"c\": null}"));
    cr_expect(accepts(g, "{\"a\": null, \"b\": false, \"c\": null}"));
    cr_expect(!accepts(g, "{\"a\": null}"));
    cr_expect(!accepts(g, "{\"a\": null, \"c\": null}"));
    cr_expect(!accepts(g, "{}"));
    rad_grammar_free(g);

    /* no properties: any object; additionalProperties false alone: only {} */
    g = compile("{\"type\":\"object\"}");
    cr_expect(accepts(g, "{\"x\": [1, {\"y\": null}]}"));
    cr_expect(!accepts(g, "[]"));
    rad_grammar_free(g);
    g = compile("{\"type\":\"object\",\"additionalProperties\":false}");
    cr_expect(accepts(g, "{}"));
    cr_expect(accepts(g, "{ \n}"));
    cr_expect(!accepts(g, "{\"x\": 1}"));
    rad_grammar_free(g);
}

Test(grammar, keys_are_written_as_json_dumps_writes_them) {
    test_deadline(10);
    RadGrammar *g = compile("{\"type\":\"object\",\"properties\":{\"caf\\u00e9 \\\"q\\\"\\n\":{\"type\":\"integer\"}},"
                            "\"required\":[\"caf\\u00e9 \\\"q\\\"\\n\"]}");
    cr_expect(accepts(g, "{\"caf\xc3\xa9 \\\"q\\\"\\n\": 1}"));
    cr_expect(!accepts(g, "{\"caf\\u00e9 \\\"q\\\"\\n\": 1}"), "only json.dumps's spelling");
    rad_grammar_free(g);
}

Test(grammar, arrays) {
    test_deadline(10);
    RadGrammar *g = compile("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}");
    cr_expect(!accepts(g, "[]"));
    cr_expect(accepts(g, "[1]"));
    cr_expect(accepts(g, "[ 1 , 2,3 ]"));
    cr_expect(!accepts(g, "[1, 2, 3, 4]"));
    cr_expect(!accepts(g, "[1,]"));
    cr_expect(!accepts(g, "[,1]"));
    cr_expect(!accepts(g, "[\"a\"]"));
    rad_grammar_free(g);

    g = compile("{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"minItems\":2}");
    cr_expect(!accepts(g, "[\"a\"]"));
    cr_expect(accepts(g, "[\"a\", \"b\"]"));
    cr_expect(accepts(g, "[\"a\", \"b\", \"c\", \"d\", \"e\", \"f\"]"));
    cr_expect(!accepts(g, "[\"a\", \"b\",]"));
    rad_grammar_free(g);

    g = compile("{\"type\":\"array\",\"items\":{\"type\":\"number\"}}");
    cr_expect(accepts(g, "[]"));
    cr_expect(accepts(g, "[1]"));
    cr_expect(accepts(g, "[1, 2.5, -3e2, 4]"));
    cr_expect(!accepts(g, "[1 2]"));
    rad_grammar_free(g);

    g = compile("{\"type\":\"array\",\"maxItems\":0}");
    cr_expect(accepts(g, "[ ]"));
    cr_expect(!accepts(g, "[1]"));
    rad_grammar_free(g);

    g = compile("{\"type\":\"array\"}");
    cr_expect(accepts(g, "[1, \"a\", {\"b\": []}, [null]]"));
    rad_grammar_free(g);

    g = compile("{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},"
                "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":2}},"
                "\"required\":[\"id\",\"tags\"],\"additionalProperties\":false}}");
    cr_expect(accepts(g, "[{\"id\": 1, \"tags\": [\"a\", \"b\"]}, {\"id\": 2, \"tags\": []}]"));
    cr_expect(!accepts(g, "[{\"id\": 1, \"tags\": [\"a\", \"b\", \"c\"]}]"));
    cr_expect(!accepts(g, "[{\"id\": 1}]"));
    rad_grammar_free(g);
}

Test(grammar, alternatives_refs_and_literals) {
    test_deadline(10);
    RadGrammar *g = compile("{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}");
    cr_expect(accepts(g, "\"x\""));
    cr_expect(accepts(g, "null"));
    cr_expect(!accepts(g, "1"));
    rad_grammar_free(g);

    g = compile("{\"type\":[\"integer\",\"null\"]}");
    cr_expect(accepts(g, "-7"));
    cr_expect(accepts(g, "null"));
    cr_expect(!accepts(g, "1.5"));
    cr_expect(!accepts(g, "\"1\""));
    rad_grammar_free(g);

    g = compile("{\"type\":\"object\",\"properties\":{\"p\":{\"$ref\":\"#/$defs/point\"},\"q\":{\"$ref\":"
                "\"#/definitions/flag\"}},\"required\":[\"p\",\"q\"],\"$defs\":{\"point\":{\"type\":\"object\","
                "\"properties\":{\"x\":{\"type\":\"number\"},\"y\":{\"type\":\"number\"}},\"required\":[\"x\",\"y\"]}},"
                "\"definitions\":{\"flag\":{\"type\":\"boolean\",\"description\":\"on?\"}}}");
    cr_expect(accepts(g, "{\"p\": {\"x\": 1, \"y\": 2.5}, \"q\": true}"));
    cr_expect(!accepts(g, "{\"p\": {\"x\": 1}, \"q\": true}"));
    rad_grammar_free(g);

    g = compile("{\"const\":\"only\"}");
    cr_expect(accepts(g, "\"only\""));
    cr_expect(!accepts(g, "\"onl\""));
    cr_expect(!accepts(g, "\"only \""));
    rad_grammar_free(g);

    g = compile("{\"enum\":[1,\"a\",null,{\"k\":[1,2]},1.0,12]}");
    cr_expect(accepts(g, "1"));
    cr_expect(accepts(g, "12"));
    cr_expect(accepts(g, "1.0"));
    cr_expect(accepts(g, "\"a\""));
    cr_expect(accepts(g, "null"));
    cr_expect(accepts(g, "{\"k\": [1, 2]}"), "json.dumps's spacing");
    cr_expect(!accepts(g, "{\"k\":[1,2]}"));
    cr_expect(!accepts(g, "2"));
    cr_expect(!accepts(g, "\"b\""));
    rad_grammar_free(g);

    /* enum next to type: only the values of that type */
    g = compile("{\"type\":\"string\",\"enum\":[\"a\",1,null]}");
    cr_expect(accepts(g, "\"a\""));
    cr_expect(!accepts(g, "1"));
    cr_expect(!accepts(g, "null"));
    rad_grammar_free(g);

    /* {} and true: any value */
    g = compile("{\"description\":\"anything\"}");
    cr_expect(accepts(g, "3"));
    cr_expect(accepts(g, "[{\"a\": \"b\"}]"));
    rad_grammar_free(g);
    g = compile("true");
    cr_expect(accepts(g, "\"s\""));
    rad_grammar_free(g);
}

Test(grammar, recursive_refs_are_unrolled_four_levels) {
    test_deadline(10);
    RadGrammar *g = compile("{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                            "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},"
                            "\"required\":[\"v\",\"kids\"]}},\"$ref\":\"#/$defs/node\"}");
    cr_expect(accepts(g, "{\"v\": 1, \"kids\": []}"));
    cr_expect(accepts(g, "{\"v\": 1, \"kids\": [{\"v\": 2, \"kids\": []}, {\"v\": 3, \"kids\": []}]}"));
    cr_expect(accepts(g, "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"v\":3,\"kids\":[{\"v\":4,\"kids\":[]}]}]}]}"));
    cr_expect(!accepts(g, "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"v\":3,\"kids\":[{\"v\":4,\"kids\":[{\"v\":5,"
                          "\"kids\":[]}]}]}]}]}"),
              "a fifth level");
    rad_grammar_free(g);

    /* "#": the root itself, through an optional property */
    g = compile("{\"type\":\"object\",\"properties\":{\"child\":{\"$ref\":\"#\"}}}");
    cr_expect(accepts(g, "{\"child\": {\"child\": {}}}"));
    rad_grammar_free(g);

    /* through anyOf with null */
    g = compile("{\"$defs\":{\"list\":{\"type\":\"object\",\"properties\":{\"next\":{\"anyOf\":[{\"$ref\":"
                "\"#/$defs/list\"},{\"type\":\"null\"}]}},\"required\":[\"next\"]}},\"$ref\":\"#/$defs/list\"}");
    cr_expect(accepts(g, "{\"next\": {\"next\": null}}"));
    rad_grammar_free(g);

    /* a recursion that cannot be left out */
    refused_text("{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"next\":{\"$ref\":\"#/$defs/n\"}},"
                 "\"required\":[\"next\"]}},\"$ref\":\"#/$defs/n\"}",
                 "$defs.n.properties.next.$ref", "recursive '$ref' \"#/$defs/n\"");
}

Test(grammar, done_and_accepting) {
    test_deadline(10);
    RadGrammar *g = compile(WEATHER);
    const char *t = "{\"city\": \"Paris\", \"unit\": \"celsius\"}";
    int32_t s = rad_grammar_start(g);
    cr_expect(!rad_grammar_accepting(g, s));
    for (size_t i = 0; t[i]; i++) {
        cr_expect(!rad_grammar_accepting(g, s) && !rad_grammar_done(g, s), "byte %zu", i);
        s = rad_grammar_step(g, s, (uint8_t)t[i]);
        cr_assert_geq(s, 0, "byte %zu ('%c')", i, t[i]);
    }
    cr_expect(rad_grammar_accepting(g, s));
    cr_expect(rad_grammar_done(g, s), "nothing may follow the final '}'");
    for (int b = 0; b < 256; b++) cr_expect_eq(rad_grammar_step(g, s, (uint8_t)b), RAD_GRAMMAR_DEAD, "byte %d", b);
    cr_expect_eq(rad_grammar_step(g, s, ' '), RAD_GRAMMAR_DEAD, "cached");
    cr_expect_eq(rad_grammar_step(g, -5, '{'), RAD_GRAMMAR_DEAD);
    cr_expect(!rad_grammar_accepting(g, RAD_GRAMMAR_DEAD));
    rad_grammar_free(g);

    /* a bare number may end or go on */
    g = compile("{\"type\":\"integer\"}");
    s = walk(g, "12", 2);
    cr_expect(rad_grammar_accepting(g, s) && !rad_grammar_done(g, s));
    s = walk(g, "0", 1);
    cr_expect(rad_grammar_accepting(g, s) && rad_grammar_done(g, s), "nothing follows a 0");
    rad_grammar_free(g);
}

/* {"type":"object","properties":{"city":{"type":"string", kw: v}}} */
static json_t *with_kw(const char *kw, json_t *v) {
    json_t *city = json_pack("{s:s}", "type", "string");
    json_object_set_new(city, kw, v);
    return json_pack("{s:s, s:{s:o}}", "type", "object", "properties", "city", city);
}

Test(grammar, refusals_name_the_keyword_and_its_path) {
    test_deadline(10);
    static const char *const kws[] = {
        "pattern", "format", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
        "exclusiveMaximum", "multipleOf", "minProperties", "maxProperties", "patternProperties",
        "propertyNames", "dependentRequired", "if", "then", "else", "uniqueItems", "contains",
        "prefixItems", "not", "allOf", "oneOf", "nullable", "unevaluatedProperties"};
    for (size_t i = 0; i < sizeof kws / sizeof *kws; i++) {
        json_t *j = with_kw(kws[i], json_integer(1));
        char want[128], names[128];
        snprintf(want, sizeof want, "properties.city.%s", kws[i]);
        snprintf(names, sizeof names, "'%s' is not served", kws[i]);
        refused(j, want, names);
        json_decref(j);
    }
    refused_text("{\"type\":\"object\",\"properties\":{},\"additionalProperties\":true}", "additionalProperties",
                 "'additionalProperties'");
    refused_text("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"}}", "additionalProperties",
                 "'additionalProperties'");
    refused_text("false", "", "false");
    refused_text("{\"type\":\"object\",\"properties\":{\"a\":false}}", "properties.a", "false");
    refused_text("{\"type\":\"thing\"}", "type", "\"thing\"");
    refused_text("{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}", "required", "\"b\"");
    refused_text("{\"type\":\"array\",\"maxItems\":1000}", "maxItems", "'maxItems'");
    refused_text("{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "minItems", "'minItems'");
    refused_text("{\"type\":\"array\",\"minItems\":-1}", "minItems", "'minItems'");
    refused_text("{\"type\":\"array\",\"items\":[{}]}", "items", "'items'");
    refused_text("{\"$ref\":\"http://x/y.json\"}", "$ref", "'$ref'");
    refused_text("{\"$ref\":\"#/$defs/missing\"}", "$ref", "does not resolve");
    refused_text("{\"$ref\":\"#/$defs/a\",\"type\":\"object\",\"$defs\":{\"a\":{}}}", "type", "'$ref'");
    refused_text("{\"enum\":[1],\"minimum\":0}", "minimum", "'minimum'");
    refused_text("{\"enum\":[1],\"items\":{}}", "items", "'enum'");
    refused_text("{\"enum\":[]}", "enum", "'enum'");
    refused_text("{\"type\":\"string\",\"enum\":[1]}", "enum", "'enum'");
    refused_text("{\"anyOf\":[{\"type\":\"string\"},{\"pattern\":\"x\"}]}", "anyOf.1.pattern", "'pattern'");
    refused_text("{\"$defs\":{\"d\":{\"format\":\"date\"}},\"$ref\":\"#/$defs/d\"}", "$defs.d.format", "'format'");

    /* 600 deep */
    json_t *deep = json_pack("{s:s}", "type", "string");
    for (int i = 0; i < 600; i++) deep = json_pack("{s:s, s:o}", "type", "array", "items", deep);
    char want[1024] = "";
    for (int i = 0; i < 64; i++) strcat(want, i ? ".items" : "items");
    refused(deep, want, "nested deeper than 64");
    json_decref(deep);

    /* 20000 enum values */
    json_t *en = json_array();
    for (int i = 0; i < 20000; i++) json_array_append_new(en, json_integer(i));
    json_t *j = json_pack("{s:o}", "enum", en);
    refused(j, "enum", "too large");
    json_decref(j);

    /* past 100000 NFA states */
    refused_text("{\"type\":\"array\",\"maxItems\":256,\"items\":{\"type\":\"array\",\"maxItems\":256,"
                 "\"items\":{\"type\":\"string\"}}}",
                 "", "too large");

    /* param may be NULL */
    RadGrammar *g;
    RadErr e = {0};
    json_t *f = json_false();
    cr_expect_eq(rad_grammar_from_schema(f, &g, NULL, 0, &e), RAD_E_ARG);
    json_decref(f);
}

/* Every byte that keeps s alive. */
static int live_bytes(RadGrammar *g, int32_t s, uint8_t *out) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int32_t t = rad_grammar_step(g, s, (uint8_t)b);
        cr_assert_neq(t, RAD_GRAMMAR_FULL);
        if (t >= 0) out[n++] = (uint8_t)b;
    }
    return n;
}

/* A random walk from the start: a random live byte each step, stopping at an accepting state
 * on a coin flip. Returns the length, 0 when it ran past cap bytes. */
static size_t random_walk(RadGrammar *g, char *buf, size_t cap, unsigned *seed) {
    int32_t s = rad_grammar_start(g);
    uint8_t live[256];
    for (size_t n = 0; n < cap; n++) {
        int k = live_bytes(g, s, live);
        if (rad_grammar_accepting(g, s) && (!k || rand_r(seed) % 4 == 0)) return buf[n] = 0, n;
        cr_assert_gt(k, 0, "a dead end that is not accepting after %zu bytes: %.*s", n, (int)n, buf);
        uint8_t b = live[rand_r(seed) % (unsigned)k];
        buf[n] = (char)b;
        s = rad_grammar_step(g, s, b);
        cr_assert_geq(s, 0);
    }
    return 0;
}

/* jansson refuses numbers past its range: valid JSON, not the automaton's business. */
static int out_of_range(const json_error_t *je) {
    return strstr(je->text, "overflow") || strstr(je->text, "too big");
}

Test(grammar, random_walks_write_valid_json) {
    test_deadline(20);
    unsigned seed = 12345;
    char buf[2048];
    RadGrammar *g = compile(WEATHER);
    int done = 0, checked = 0;
    for (int w = 0; w < 200; w++) {
        size_t n = random_walk(g, buf, 2000, &seed);
        if (!n) continue;
        done++;
        json_error_t je;
        json_t *j = json_loadb(buf, n, JSON_ALLOW_NUL, &je);
        if (!j && out_of_range(&je)) continue;
        cr_assert_not_null(j, "walk %d: %s: %s", w, buf, je.text);
        checked++;
        static const char *const order[] = {"city", "unit", "days"};
        size_t at = 0;
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v) {
            while (at < 3 && strcmp(order[at], k)) at++;
            cr_assert_lt(at, 3, "walk %d: key '%s' unknown or out of order: %s", w, k, buf);
        }
        cr_assert(json_is_string(json_object_get(j, "city")), "%s", buf);
        const char *unit = json_string_value(json_object_get(j, "unit"));
        cr_assert(unit && (!strcmp(unit, "celsius") || !strcmp(unit, "fahrenheit")), "%s", buf);
        json_t *days = json_object_get(j, "days");
        cr_assert(!days || json_is_integer(days), "%s", buf);
        json_decref(j);
    }
    cr_expect_geq(checked, 150, "%d walks of 200 completed, %d checked", done, checked);
    rad_grammar_free(g);

    RadErr e = {0};
    cr_assert_eq(rad_grammar_json_object(4, &g, &e), RAD_OK);
    done = checked = 0;
    for (int w = 0; w < 200; w++) {
        size_t n = random_walk(g, buf, 2000, &seed);
        if (!n) continue;
        done++;
        json_error_t je;
        json_t *j = json_loadb(buf, n, JSON_ALLOW_NUL, &je);
        if (!j && out_of_range(&je)) continue;
        cr_assert_not_null(j, "walk %d: %s: %s", w, buf, je.text);
        cr_assert(json_is_object(j), "%s", buf);
        checked++;
        json_decref(j);
    }
    cr_expect_geq(checked, 100, "%d walks of 200 completed, %d checked", done, checked);
    rad_grammar_free(g);
}

Test(grammar, dfa_cap_reports_full) {
    test_deadline(10);
    RadGrammar *g;
    RadErr e = {0};
    cr_assert_eq(rad_grammar_json_object(8, &g, &e), RAD_OK);
    rad_grammar_set_dfa_cap(g, 6);
    const char *t = "{\"abc\": [1, 2, {\"d\": null}]}";
    int32_t s = rad_grammar_start(g), prev = s;
    size_t i = 0;
    for (; t[i]; i++) {
        prev = s;
        s = rad_grammar_step(g, s, (uint8_t)t[i]);
        if (s < 0) break;
    }
    cr_assert_eq(s, RAD_GRAMMAR_FULL, "byte %zu: %d", i, s);
    cr_expect_eq(rad_grammar_n_dfa(g), 6);
    cr_expect_eq(rad_grammar_step(g, prev, (uint8_t)t[i]), RAD_GRAMMAR_FULL, "still full");
    /* what was built still walks; a raised cap goes on */
    rad_grammar_set_dfa_cap(g, 20000);
    cr_expect(accepts(g, t));
    rad_grammar_free(g);
}
