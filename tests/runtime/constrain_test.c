/* rad_constrain: token masks from a grammar over the default model's real vocabulary
 * (SmolLM2's 49152 byte-level BPE tokens). The trie walk must give exactly what stepping every
 * token's bytes one by one gives; sampling under the mask, from random logits, must end in JSON
 * that parses (and, for a schema, has its keys and values); end tokens come only when the value
 * is whole. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/format/rad_model.h"
#include "libcommon/runtime/rad_constrain.h"
#include "libcommon/runtime/rad_sampler.h"

#define SMOL "models/SmolLM2-135M-Instruct.Q4_1.gguf"

static RadModelFile g_m;
static RadTok *g_tok;
static RadTokTrie *g_trie;

static void setup(void) {
    RadErr e = {0};
    cr_assert_eq(rad_model_open(SMOL, &g_m, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_tok_init(&g_tok, &g_m.tok, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_tok_trie_init(&g_trie, g_tok, &e), RAD_OK, "%s", e.msg);
}
static void teardown(void) {
    rad_tok_trie_free(g_trie);
    rad_tok_free(g_tok);
    rad_model_free(&g_m);
}

static const char *WEATHER =
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"type\":\"string\",\"enum\":[\"celsius\","
    "\"fahrenheit\"]},\"days\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":3}},"
    "\"required\":[\"city\",\"unit\"],\"additionalProperties\":false}";

static RadGrammar *weather(void) {
    json_error_t je;
    json_t *s = json_loads(WEATHER, 0, &je);
    cr_assert_not_null(s, "%s", je.text);
    RadGrammar *g = NULL;
    RadErr e = {0};
    cr_assert_eq(rad_grammar_from_schema(s, &g, NULL, 0, &e), RAD_OK, "%s", e.msg);
    json_decref(s);
    return g;
}

static RadGrammar *any_object(void) {
    RadGrammar *g = NULL;
    RadErr e = {0};
    cr_assert_eq(rad_grammar_json_object(8, &g, &e), RAD_OK, "%s", e.msg);
    return g;
}

static int32_t end_ids[2];
static RadConstraint *constraint(RadGrammar *g) {
    RadConstraint *c = malloc(sizeof *c);
    RadErr e = {0};
    end_ids[0] = rad_tok_eos(g_tok);
    end_ids[1] = rad_tok_eot(g_tok);
    cr_assert_eq(rad_constraint_init(c, g, g_trie, end_ids, 2, &e), RAD_OK, "%s", e.msg);
    return c;
}

/* Steps c through text byte by byte (a prefix the tests choose). */
static void feed(RadConstraint *c, const char *text) {
    for (const char *p = text; *p; p++) {
        c->state = rad_grammar_step(c->g, c->state, (uint8_t)*p);
        cr_assert_geq(c->state, 0, "'%s' is not a prefix the grammar takes (at '%s')", text, p);
    }
}

/* The mask against every token stepped byte by byte. */
static void expect_mask_is_brute_force(RadConstraint *c, const char *where) {
    const uint64_t *allow;
    RadErr e = {0};
    cr_assert_eq(rad_constraint_mask(c, &allow, &e), RAD_OK, "%s: %s", where, e.msg);
    const int32_t nv = rad_tok_n_vocab(g_tok);
    uint32_t n_allowed = 0;
    for (int32_t id = 0; id < nv; id++) {
        int want = 0;
        char buf[256];
        const int k = rad_tok_piece(g_tok, id, buf, sizeof buf);
        if (!rad_tok_is_special(g_tok, id) && k > 0 && k <= (int)sizeof buf && !rad_grammar_done(c->g, c->state)) {
            int32_t s = c->state;
            for (int i = 0; i < k && s >= 0; i++) s = rad_grammar_step(c->g, s, (uint8_t)buf[i]);
            want = s >= 0;
        }
        if (rad_grammar_accepting(c->g, c->state) && (id == end_ids[0] || id == end_ids[1])) want = 1;
        const int got = (int)(allow[id / 64] >> (id % 64) & 1);
        cr_expect_eq(got, want, "%s: token %d ('%.*s') allowed %d, stepping its bytes says %d", where, id, k > 0 ? k : 0, buf, got,
                     want);
        n_allowed += (uint32_t)got;
        if (got != want) break;
    }
    cr_expect_gt(n_allowed, 0, "%s: nothing allowed", where);
}

TestSuite(constrain, .init = setup, .fini = teardown);

Test(constrain, trie_masks_equal_stepping_every_token) {
    struct { int schema; const char *prefix; } at[] = {
        {0, ""}, {0, "{"}, {0, "{\"a\": "}, {0, "{\"a\": \"x y"}, {0, "{\"a\": -1"}, {0, "{\"a\": [1, {\"b\": tr"}, {0, "{\"a\": 1}"},
        {1, ""}, {1, "{\"city\": \""}, {1, "{\"city\": \"Paris\", \"unit\": \"c"}, {1, "{\"city\": \"Paris\", \"unit\": \"celsius\""},
    };
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        RadConstraint *c = constraint(at[i].schema ? weather() : any_object());
        feed(c, at[i].prefix);
        char where[96];
        snprintf(where, sizeof where, "%s after '%s'", at[i].schema ? "weather" : "json_object", at[i].prefix);
        expect_mask_is_brute_force(c, where);
        expect_mask_is_brute_force(c, where); /* again: from the cache */
        cr_expect_leq(c->n_walks, 1, "%s: the second mask walked the trie again", where); /* 0 at done */
        rad_constraint_free(c);
        free(c);
    }
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (float)((g_rng >> 11) * (1.0 / 9007199254740992.0));
}

/* A reply sampled under the mask from random logits (the model replaced by noise, so every
 * corner of the grammar is reached): it must end by itself with an end token or at done, and
 * parse; for the schema, have its keys in order and its enum values. */
static void sample_replies(int schema, int runs) {
    const int32_t nv = rad_tok_n_vocab(g_tok);
    float *lg = malloc((size_t)nv * sizeof *lg);
    int finished = 0;
    for (int run = 0; run < runs; run++) {
        RadConstraint *c = constraint(schema ? weather() : any_object());
        RadSampler smp;
        RadSamplerParams sp = rad_sampler_defaults();
        sp.temperature = 1.0f;
        sp.seed = (uint64_t)run;
        RadErr e = {0};
        cr_assert_eq(rad_sampler_init(&smp, &sp, (uint32_t)nv, &e), RAD_OK);
        char text[8192];
        size_t len = 0;
        int ended = 0;
        for (int step = 0; step < 400 && !ended; step++) {
            for (int32_t i = 0; i < nv; i++) lg[i] = 4.0f * frand();
            const uint64_t *allow;
            cr_assert_eq(rad_constraint_mask(c, &allow, &e), RAD_OK, "%s", e.msg);
            const int32_t t = rad_sampler_sample_masked(&smp, lg, allow);
            cr_assert(allow[t / 64] >> (t % 64) & 1, "run %d: token %d sampled outside the mask", run, t);
            cr_assert_eq(rad_constraint_accept(c, g_tok, t, &e), RAD_OK, "%s", e.msg);
            if (t == end_ids[0] || t == end_ids[1]) {
                ended = 1;
                break;
            }
            char buf[256];
            const int k = rad_tok_piece(g_tok, t, buf, sizeof buf);
            cr_assert(k > 0 && len + (size_t)k < sizeof text);
            memcpy(text + len, buf, (size_t)k), len += (size_t)k;
            if (rad_constraint_done(c)) ended = 1;
        }
        text[len] = 0;
        if (ended) {
            finished++;
            json_error_t je;
            json_t *j = json_loads(text, 0, &je);
            cr_assert_not_null(j, "run %d: '%s' is not JSON: %s", run, text, je.text);
            cr_assert(json_is_object(j), "run %d: '%s'", run, text);
            if (schema) {
                const char *unit = json_string_value(json_object_get(j, "unit"));
                cr_assert(json_is_string(json_object_get(j, "city")) && unit && (!strcmp(unit, "celsius") || !strcmp(unit, "fahrenheit")),
                          "run %d: '%s'", run, text);
                const char *key;
                json_t *v;
                json_object_foreach(j, key, v) cr_assert(!strcmp(key, "city") || !strcmp(key, "unit") || !strcmp(key, "days") ||
                                                             !strcmp(key, "tags"), "run %d: key '%s'", run, key);
                cr_assert(json_array_size(json_object_get(j, "tags")) <= 3, "run %d: '%s'", run, text);
            }
            json_decref(j);
        }
        rad_sampler_free(&smp);
        rad_constraint_free(c);
        free(c);
    }
    cr_expect_gt(finished, 0, "no reply finished within 400 tokens");
    free(lg);
}

/* 20 replies each; 6 in the sanitizer build (RAD_ORACLE_QUICK), where each mask is ~3x slower */
Test(constrain, noise_sampled_under_the_mask_is_valid_json) { sample_replies(0, getenv("RAD_ORACLE_QUICK") ? 6 : 20); }
Test(constrain, noise_sampled_under_a_schema_validates) { sample_replies(1, getenv("RAD_ORACLE_QUICK") ? 6 : 20); }

/* End tokens only once the value is whole; at done nothing else; a white-space run is cut. */
Test(constrain, end_tokens_done_and_white_space) {
    RadConstraint *c = constraint(weather());
    const uint64_t *allow;
    RadErr e = {0};
    cr_assert_eq(rad_constraint_mask(c, &allow, &e), RAD_OK);
    cr_expect_not(allow[end_ids[0] / 64] >> (end_ids[0] % 64) & 1, "EOS allowed before any JSON");
    feed(c, "{\"city\": \"Oslo\", \"unit\": \"celsius\"}");
    cr_assert(rad_constraint_done(c));
    cr_assert_eq(rad_constraint_mask(c, &allow, &e), RAD_OK);
    uint32_t n = 0;
    for (uint32_t w = 0; w < c->words; w++) n += (uint32_t)__builtin_popcountll(allow[w]);
    cr_expect_eq(n, c->n_end, "at done only the end tokens: %u allowed, %u end tokens", n, c->n_end);
    cr_expect_geq(c->n_end, 1);
    for (uint32_t i = 0; i < c->n_end; i++) cr_expect(allow[c->end[i] / 64] >> (c->end[i] % 64) & 1);
    rad_constraint_free(c);
    free(c);
    c = constraint(any_object());
    feed(c, "{");
    for (int i = 0; i < RAD_CONSTRAIN_WS_MAX; i++) feed(c, " ");
    c->ws_run = RAD_CONSTRAIN_WS_MAX;
    cr_assert_eq(rad_constraint_mask(c, &allow, &e), RAD_OK);
    int32_t space = -1;
    for (int32_t id = 0; id < rad_tok_n_vocab(g_tok) && space < 0; id++) {
        char b[8];
        if (rad_tok_piece(g_tok, id, b, sizeof b) == 1 && b[0] == ' ') space = id;
    }
    cr_assert_geq(space, 0);
    cr_expect_not(allow[space / 64] >> (space % 64) & 1, "a space allowed after %d spaces", RAD_CONSTRAIN_WS_MAX);
    int32_t special = -1; /* a control token that ends nothing: never JSON */
    for (int32_t id = 0; id < rad_tok_n_vocab(g_tok) && special < 0; id++)
        if (rad_tok_is_special(g_tok, id) && id != end_ids[0] && id != end_ids[1]) special = id;
    cr_assert_geq(special, 0);
    cr_expect_neq(rad_constraint_accept(c, g_tok, special, &e), RAD_OK);
    rad_constraint_free(c);
    free(c);
}

/* A forced tool call's arguments: the schema's value, then "}" (the call object's end), as one
 * stream of bytes, so a token may cross from the value into the suffix ("}}"); the end is
 * allowed only after the suffix, and the reply is done there. */
Test(constrain, value_then_suffix) {
    json_error_t je;
    json_t *s = json_loads("{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}},\"required\":[\"x\"]}", 0, &je);
    RadGrammar *g = NULL;
    RadErr e = {0};
    cr_assert_eq(rad_grammar_from_schema(s, &g, NULL, 0, &e), RAD_OK, "%s", e.msg);
    json_decref(s);
    RadConstraint *c = constraint(g);
    cr_assert_eq(rad_constraint_set_suffix(c, "}", &e), RAD_OK);
    const char *text = "{\"x\": 12";
    for (const char *p = text; *p; p++) c->state = rad_grammar_step(c->g, c->state, (uint8_t)*p);
    const uint64_t *allow;
    cr_assert_eq(rad_constraint_mask(c, &allow, &e), RAD_OK, "%s", e.msg);
    int32_t both = -1, one = -1;
    for (int32_t id = 0; id < rad_tok_n_vocab(g_tok); id++) {
        char b[8];
        const int k = rad_tok_piece(g_tok, id, b, sizeof b);
        if (k == 2 && b[0] == '}' && b[1] == '}') both = id;
        if (k == 1 && b[0] == '}') one = id;
    }
    cr_assert(both >= 0 && one >= 0, "SmolLM2 spells '}' and '}}'");
    cr_expect(allow[both / 64] >> (both % 64) & 1, "'}}' (the value's end and the suffix) not allowed");
    cr_expect(allow[one / 64] >> (one % 64) & 1);
    cr_expect_not(allow[end_ids[0] / 64] >> (end_ids[0] % 64) & 1, "the end allowed before the suffix");
    cr_assert_eq(rad_constraint_accept(c, g_tok, one, &e), RAD_OK, "%s", e.msg);
    cr_expect_not(rad_constraint_done(c), "done before the suffix");
    cr_assert_eq(rad_constraint_mask(c, &allow, &e), RAD_OK);
    cr_expect_not(allow[end_ids[0] / 64] >> (end_ids[0] % 64) & 1);
    cr_expect(allow[one / 64] >> (one % 64) & 1, "the suffix's '}' not allowed");
    cr_assert_eq(rad_constraint_accept(c, g_tok, one, &e), RAD_OK, "%s", e.msg);
    cr_expect(rad_constraint_done(c));
    cr_assert_eq(rad_constraint_mask(c, &allow, &e), RAD_OK);
    cr_expect(allow[end_ids[0] / 64] >> (end_ids[0] % 64) & 1, "the end not allowed after the suffix");
    rad_constraint_free(c);
    free(c);
}
