/* WordPiece ("bert") against its oracle, Hugging Face `tokenizers` on sentence-transformers/
 * all-MiniLM-L6-v2's tokenizer.json (scripts/gen-tok-goldens-bert.py): every line of
 * tests/fixtures/tok/corpus.txt, its blocks of 8 lines, and every line of bert-extra.txt (accents,
 * CJK, control characters, long words, Unicode spaces and case) encode with and without
 * [CLS] ... [SEP] to the oracle's ids and decode to its text; random ids decode as the oracle's.
 * Then the refusals of what is not implemented, split_special, streaming pieces and speed. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zstd.h>

#include "libcommon/format/rad_hf.h"
#include "libcommon/format/rad_model.h"
#include "libcommon/tok/rad_tok.h"
#include "tests/test_util.h"

#define FIX "tests/fixtures/tok/"

/* ---- units: corpus lines, blocks of 8, extra lines ------------------------------------------------ */

typedef struct Unit {
    const char *p;
    size_t n;
} Unit;

static char *corpus, *extra, *blocks;
static Unit *units;
static size_t n_units, n_lines;

static size_t split_lines(char *s, size_t n, Unit *u) {
    size_t k = 0;
    cr_assert(n > 0 && s[n - 1] == '\n');
    for (const char *p = s; p < s + n;) {
        const char *q = memchr(p, '\n', (size_t)(s + n - p));
        if (u) u[k] = (Unit){p, (size_t)(q - p)};
        k++;
        p = q + 1;
    }
    return k;
}

static void load_units(void) {
    if (units) return;
    size_t cn, xn;
    corpus = slurp(FIX "corpus.txt", &cn);
    extra = slurp(FIX "bert-extra.txt", &xn);
    n_lines = split_lines(corpus, cn, NULL);
    size_t n_blocks = (n_lines + 7) / 8, n_extra = split_lines(extra, xn, NULL);
    units = calloc(n_lines + n_blocks + n_extra, sizeof *units);
    split_lines(corpus, cn, units);
    blocks = malloc(cn + n_blocks);
    char *b = blocks;
    for (size_t i = 0; i < n_lines; i += 8) { /* 8 lines joined by "\n", with a final "\n" */
        size_t last = i + 8 < n_lines ? i + 7 : n_lines - 1;
        size_t l = (size_t)(units[last].p + units[last].n - units[i].p) + 1;
        memcpy(b, units[i].p, l);
        units[n_lines + i / 8] = (Unit){b, l};
        b += l;
    }
    split_lines(extra, xn, units + n_lines + n_blocks);
    n_units = n_lines + n_blocks + n_extra;
}

/* ---- the golden ------------------------------------------------------------------------------- */

typedef struct Rec {
    char tag;
    int32_t *ids;
    size_t n;
    char *dec, *skip; /* NULL: equal to the unit's text */
    size_t dec_n, skip_n;
} Rec;

static char *unhex(const char *s, size_t *n) {
    size_t l = strlen(s);
    if (l == 1 && s[0] == '=') return NULL;
    char *o = malloc(l / 2 + 1);
    for (size_t i = 0; i < l / 2; i++) {
        unsigned v;
        cr_assert(sscanf(s + 2 * i, "%2x", &v) == 1);
        o[i] = (char)v;
    }
    o[l / 2] = 0;
    *n = l / 2;
    return o;
}

static Rec *load_golden(size_t *n_rec) {
    size_t n;
    char *buf = unzstd(FIX "minilm.golden.zst", &n);
    size_t lines = 0;
    for (size_t i = 0; i < n; i++) lines += buf[i] == '\n';
    Rec *r = calloc(lines, sizeof *r);
    size_t k = 0;
    for (char *p = buf, *end; *p; p = end + 1) {
        end = strchr(p, '\n');
        *end = 0;
        if (*p == '#') continue;
        char *f[4] = {p};
        for (int j = 1; j < 4; j++) {
            f[j] = strchr(f[j - 1], '\t');
            cr_assert(f[j], "minilm.golden: malformed line");
            *f[j]++ = 0;
        }
        Rec *x = &r[k++];
        x->tag = *p;
        x->ids = malloc((strlen(f[1]) / 2 + 2) * sizeof *x->ids);
        for (char *q = f[1]; *q;) {
            char *y;
            long v = strtol(q, &y, 10);
            if (y == q) break;
            x->ids[x->n++] = (int32_t)v;
            q = y;
        }
        x->dec = unhex(f[2], &x->dec_n);
        x->skip = unhex(f[3], &x->skip_n);
    }
    free(buf);
    *n_rec = k;
    return r;
}

static void free_golden(Rec *r, size_t n) {
    for (size_t i = 0; i < n; i++) free(r[i].ids), free(r[i].dec), free(r[i].skip);
    free(r);
}

/* ---- helpers -------------------------------------------------------------------------------------- */

static RadTok *minilm(RadModelFile *keep) {
    size_t n;
    char *json = unzstd(FIX "minilm-tokenizer.json.zst", &n);
    RadModelFile m;
    memset(&m, 0, sizeof m);
    RadErr e = {0};
    cr_assert_eq(rad_hf_read_tokenizer(&m, "tokenizer.json", json, n, NULL, NULL, 0, &e), RAD_OK, "%s", e.msg);
    free(json);
    RadTok *t = NULL;
    cr_assert_eq(rad_tok_init(&t, &m.tok, &e), RAD_OK, "%s", e.msg);
    if (keep) *keep = m;
    else rad_model_free(&m);
    return t;
}

static bool eq(const char *a, size_t an, const char *b, size_t bn) { return an == bn && memcmp(a, b, an) == 0; }

static void show(const char *what, size_t i, const char *s, size_t n) {
    fprintf(stderr, "  %s %zu: '", what, i);
    for (size_t k = 0; k < n && k < 200; k++)
        fprintf(stderr, (unsigned char)s[k] < 0x20 || s[k] == '\'' ? "\\x%02x" : "%c", (unsigned char)s[k]);
    fprintf(stderr, "'\n");
}

static void show_ids(const char *what, const int32_t *ids, size_t n) {
    fprintf(stderr, "    %s:", what);
    for (size_t k = 0; k < n && k < 60; k++) fprintf(stderr, " %d", ids[k]);
    fprintf(stderr, "\n");
}

/* Decode r's ids both ways; counts the ones that differ from the oracle (want NULL: text). */
static size_t check_decode(const RadTok *t, const Rec *r, const char *text, size_t tn, size_t i) {
    size_t bad = 0;
    RadErr e = {0};
    for (int skip = 0; skip < 2; skip++) {
        char *d;
        size_t dn;
        cr_assert_eq(rad_tok_decode(t, r->ids, r->n, RAD_TOK_LOSSY | (skip ? RAD_TOK_SKIP_SPECIAL : 0), &d, &dn, &e),
                     RAD_OK, "%s", e.msg);
        const char *want = skip ? r->skip : r->dec;
        size_t wn = skip ? r->skip_n : r->dec_n;
        if (!want) want = text, wn = tn;
        if (!eq(d, dn, want, wn)) {
            if (bad++ < 2) show(skip ? "decode (skip special)" : "decode", i, d, dn), show("   want", i, want, wn);
        }
        free(d);
    }
    return bad;
}

/* ---- the oracle ----------------------------------------------------------------------------------- */

Test(bert, minilm_matches_oracle) {
    load_units();
    size_t n_rec;
    Rec *g = load_golden(&n_rec);
    cr_assert_geq(n_rec, 2 * n_units, "minilm: %zu records for %zu units (regenerate the goldens)", n_rec, n_units);
    RadTok *t = minilm(NULL);
    RadErr e = {0};
    size_t bad_enc = 0, bad_dec = 0, bad_d = 0, tokens = 0, n_d = 0;
    for (size_t i = 0; i < n_units; i++) {
        const Unit *u = &units[i];
        char *lossy = NULL;
        size_t ln = u->n;
        const char *text = u->p;
        if (!rad_utf8_valid(u->p, u->n)) {
            cr_assert_eq(rad_utf8_lossy(u->p, u->n, &lossy, &ln, &e), RAD_OK);
            text = lossy;
        }
        for (int special = 1; special >= 0; special--) {
            const Rec *r = &g[2 * i + (special ? 0 : 1)];
            cr_assert_eq(r->tag, special ? 'E' : 'P', "minilm.golden: record %zu out of place", 2 * i);
            int32_t *ids;
            size_t n;
            /* the raw bytes, not UTF-8 or not: the encoder reads them as HF's caller did */
            cr_assert_eq(rad_tok_encode(t, u->p, u->n, special, &ids, &n, &e), RAD_OK, "%s", e.msg);
            tokens += n;
            if (n != r->n || memcmp(ids, r->ids, n * sizeof *ids) != 0) {
                if (bad_enc++ < 8) {
                    show(special ? "encode" : "encode (no special)", i, text, ln);
                    show_ids("radiance", ids, n);
                    show_ids("oracle  ", r->ids, r->n);
                }
            }
            free(ids);
            bad_dec += check_decode(t, r, text, ln, i);
        }
        free(lossy);
    }
    for (size_t i = 2 * n_units; i < n_rec; i++) {
        cr_assert_eq(g[i].tag, 'D');
        n_d++;
        if (check_decode(t, &g[i], "", 0, i)) bad_d++;
    }
    fprintf(stderr, "tok %-15s %zu units (%zu corpus lines), %zu tokens: %zu encode, %zu decode, %zu of %zu "
            "random-id decode mismatches\n", "minilm", n_units, n_lines, tokens, bad_enc, bad_dec, bad_d, n_d);
    free_golden(g, n_rec);
    rad_tok_free(t);
    cr_expect_eq(bad_enc, 0, "minilm: %zu encodes differ from the oracle", bad_enc);
    cr_expect_eq(bad_dec, 0, "minilm: %zu decodes differ from the oracle", bad_dec);
    cr_expect_eq(bad_d, 0, "minilm: %zu random id sequences decode differently", bad_d);
}

/* What the import carries into the tok table (docs/KEYS.md). */
Test(bert, minilm_table_keys) {
    RadModelFile m;
    RadTok *t = minilm(&m);
    RadErr e = {0};
    const char *s;
    int64_t v;
    cr_assert_eq(rad_dict_gets(&m.tok, "tokenizer.model", &s, &e), RAD_OK);
    cr_assert_str_eq(s, "bert");
    cr_assert_eq(rad_dict_gets(&m.tok, "tokenizer.pre", &s, &e), RAD_OK);
    cr_assert_str_eq(s, "bert");
    cr_assert_eq(rad_dict_gets(&m.tok, "tokenizer.wordpiece.prefix", &s, &e), RAD_OK);
    cr_assert_str_eq(s, "##");
    cr_assert_eq(rad_dict_geti(&m.tok, "tokenizer.wordpiece.max_chars", &v, &e), RAD_OK);
    cr_assert_eq(v, 100);
    cr_assert_eq(rad_dict_geti(&m.tok, "tokenizer.cls_id", &v, &e), RAD_OK);
    cr_assert_eq(v, 101);
    cr_assert_eq(rad_dict_geti(&m.tok, "tokenizer.sep_id", &v, &e), RAD_OK);
    cr_assert_eq(v, 102);
    cr_assert_eq(rad_dict_geti(&m.tok, "tokenizer.unk_id", &v, &e), RAD_OK);
    cr_assert_eq(v, 100);
    static const char *const on[] = {"tokenizer.bert.clean_text", "tokenizer.bert.chinese_chars",
                                     "tokenizer.bert.strip_accents", "tokenizer.bert.lowercase",
                                     "tokenizer.wordpiece.cleanup"};
    for (size_t i = 0; i < 5; i++) {
        const RadValue *x = rad_dict_get(&m.tok, on[i]);
        cr_assert(x && x->type == RAD_VAL_BOOL && x->v.u, "%s", on[i]);
    }
    cr_assert(rad_tok_is_special(t, 101) && rad_tok_is_special(t, 100) && !rad_tok_is_special(t, 2023));
    rad_model_free(&m);
    rad_tok_free(t);
}

/* ---- refusals ------------------------------------------------------------------------------------ */

/* The MiniLM tokenizer.json with `from` replaced by `to` (first occurrence). */
static char *edited(const char *from, const char *to, size_t *n) {
    size_t jn;
    char *json = unzstd(FIX "minilm-tokenizer.json.zst", &jn);
    char *at = strstr(json, from);
    cr_assert(at, "'%s' not in the fixture", from);
    size_t fl = strlen(from), tl = strlen(to);
    char *out = malloc(jn - fl + tl + 1);
    memcpy(out, json, (size_t)(at - json));
    memcpy(out + (at - json), to, tl);
    memcpy(out + (at - json) + tl, at + fl, jn - (size_t)(at - json) - fl + 1);
    *n = jn - fl + tl;
    free(json);
    return out;
}

static void import_refuses(const char *from, const char *to, const char *field) {
    size_t n;
    char *json = edited(from, to, &n);
    RadModelFile m;
    memset(&m, 0, sizeof m);
    RadErr e = {0};
    int rc = rad_hf_read_tokenizer(&m, "tokenizer.json", json, n, NULL, NULL, 0, &e);
    cr_assert_eq(rc, RAD_E_UNSUPPORTED, "%s -> %s: got %d (%s)", from, to, rc, e.msg);
    cr_assert(strstr(e.msg, field) && !strchr(e.msg, '\n'), "'%s' does not name %s", e.msg, field);
    rad_model_free(&m);
    free(json);
}

static void init_refuses(const char *from, const char *to, const char *key) {
    size_t n;
    char *json = edited(from, to, &n);
    RadModelFile m;
    memset(&m, 0, sizeof m);
    RadErr e = {0};
    cr_assert_eq(rad_hf_read_tokenizer(&m, "tokenizer.json", json, n, NULL, NULL, 0, &e), RAD_OK, "%s", e.msg);
    RadTok *t = (RadTok *)1;
    int rc = rad_tok_init(&t, &m.tok, &e);
    cr_assert_eq(rc, RAD_E_UNSUPPORTED, "%s -> %s: got %d (%s)", from, to, rc, e.msg);
    cr_assert_null(t);
    cr_assert(strstr(e.msg, key) && !strchr(e.msg, '\n'), "'%s' does not name %s", e.msg, key);
    rad_model_free(&m);
    free(json);
}

Test(bert, refusals_name_the_field) {
    import_refuses("\"BertNormalizer\"", "\"Lowercase\"", "normalizer.type");
    import_refuses("\"lowercase\":true", "\"lowercase\":true,\"x\":1", "normalizer.x");
    import_refuses("\"BertPreTokenizer\"", "\"Whitespace\"", "pre_tokenizer.type");
    import_refuses("\"decoder\":{\"type\":\"WordPiece\",\"prefix\":\"##\"",
                   "\"decoder\":{\"type\":\"WordPiece\",\"prefix\":\"@@\"", "decoder.prefix");
    import_refuses("\"decoder\":{\"type\":\"WordPiece\"", "\"decoder\":{\"type\":\"Fuse\"", "decoder.type");
    import_refuses("\"lstrip\":false", "\"lstrip\":true", "added_tokens[0].lstrip");
    import_refuses("\"type\":\"TemplateProcessing\"", "\"type\":\"RobertaProcessing\"", "post_processor.type");
    init_refuses("\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"}", "\"pre_tokenizer\":null", "tokenizer.pre");
    init_refuses("\"decoder\":{\"type\":\"WordPiece\",\"prefix\":\"##\",\"cleanup\":true}", "\"decoder\":null",
                 "tokenizer.decoder");
    /* a "bert" table without the WordPiece keys (a GGUF's, spelled with "▁"): refused by name */
    RadDict kv;
    RadErr e = {0};
    rad_dict_init(&kv);
    const char *toks[] = {"[UNK]", "\xE2\x96\x81" "a"};
    cr_assert_eq(rad_dict_set_str(&kv, "tokenizer.model", "bert", &e), RAD_OK);
    cr_assert_eq(rad_dict_set_strarr(&kv, "tokenizer.tokens", toks, 2, &e), RAD_OK);
    RadTok *t = (RadTok *)1;
    int rc = rad_tok_init(&t, &kv, &e);
    cr_assert_eq(rc, RAD_E_UNSUPPORTED, "got %d: %s", rc, e.msg);
    cr_assert(strstr(e.msg, "tokenizer.wordpiece.prefix"), "%s", e.msg);
    cr_assert_null(t);
    rad_dict_free(&kv);
}

/* ---- special tokens, pieces, speed ------------------------------------------------------------ */

Test(bert, split_special_and_pieces) {
    RadTok *t = minilm(NULL);
    RadErr e = {0};
    const char *s = "[CLS] Hello [MASK] world";
    int32_t *ids;
    size_t n;
    cr_assert_eq(rad_tok_encode(t, s, strlen(s), 0, &ids, &n, &e), RAD_OK, "%s", e.msg);
    cr_assert(n == 4 && ids[0] == 101 && ids[2] == 103, "got %zu ids", n);
    free(ids);
    RadTokSpan all = {0, strlen(s)};
    cr_assert_eq(rad_tok_encode_spans(t, s, strlen(s), 1, &all, 1, &ids, &n, &e), RAD_OK, "%s", e.msg);
    cr_assert(n > 2 && ids[0] == 101 && ids[n - 1] == 102);
    for (size_t i = 1; i + 1 < n; i++) cr_assert(ids[i] != 101 && ids[i] != 103, "a special token from plain text");
    free(ids);
    /* pieces: a continuation without "##", any other token after a space; no crash on any id */
    const char *w = "tokenization";
    cr_assert_eq(rad_tok_encode(t, w, strlen(w), 0, &ids, &n, &e), RAD_OK, "%s", e.msg);
    char buf[64], all_pieces[256] = {0};
    for (size_t i = 0; i < n; i++) {
        int l = rad_tok_piece(t, ids[i], buf, sizeof buf);
        cr_assert(l > 0 && (size_t)l < sizeof buf);
        buf[l] = 0;
        strcat(all_pieces, buf);
    }
    cr_assert_str_eq(all_pieces, " tokenization");
    free(ids);
    for (int32_t id = 0; id < rad_tok_n_vocab(t); id++) cr_assert_geq(rad_tok_piece(t, id, buf, sizeof buf), 0);
    cr_assert_eq(rad_tok_piece(t, rad_tok_n_vocab(t), buf, sizeof buf), -1);
    rad_tok_free(t);
}

Test(bert, encode_speed) {
    load_units();
    RadTok *t = minilm(NULL);
    RadErr e = {0};
    struct timespec a, b;
    size_t tokens = 0;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (size_t i = 0; i < n_lines; i++) {
        int32_t *ids;
        size_t n;
        cr_assert_eq(rad_tok_encode(t, units[i].p, units[i].n, 0, &ids, &n, &e), RAD_OK, "%s", e.msg);
        tokens += n;
        free(ids);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double dt = (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9;
    fprintf(stderr, "tok speed %-8s %zu lines, %zu tokens in %.3f s: %.0f tokens/s\n", "minilm", n_lines, tokens, dt,
            tokens / dt);
    cr_expect_lt(dt, 5.0, "minilm: the corpus took %.2f s to encode", dt);
    rad_tok_free(t);
}
