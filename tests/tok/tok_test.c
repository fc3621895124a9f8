/* The tokenizer against its oracle, Hugging Face `tokenizers` (scripts/gen-tok-goldens.py):
 * every unit of tests/fixtures/tok/corpus.txt (each line, then blocks of 8 lines) encodes to the
 * oracle's ids and decodes to the oracle's text, for SmolLM2 (from its GGUF and from its
 * tokenizer.json), the byte-level pre-tokenizers on SmolLM2's vocabulary, and Gemma 3
 * (SentencePiece BPE with byte fallback, with and without a dummy prefix). A unit that is not
 * UTF-8 is compared through its lossy decoding (what the oracle sees), and must round-trip as
 * bytes. Then random bytes round-trip, random ids decode as the oracle's, special tokens, and the
 * refusals of malformed tables. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <math.h>
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
#define MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#define GEMMA FIX "gemma3-tok.tar.zst"
#define QWEN05 "models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"

/* ---- files --------------------------------------------------------------------------------- */

/* ---- the corpus ---------------------------------------------------------------------------- */

typedef struct Unit {
    const char *p;
    size_t n;
} Unit;

static char *corpus, *blocks;
static Unit *units;
static size_t n_units, n_lines;

static void load_corpus(void) {
    if (units) return;
    size_t n;
    corpus = slurp(FIX "corpus.txt", &n);
    cr_assert(n > 0 && corpus[n - 1] == '\n');
    for (size_t i = 0; i < n; i++) n_lines += corpus[i] == '\n';
    size_t n_blocks = (n_lines + 7) / 8;
    units = calloc(n_lines + n_blocks, sizeof *units);
    blocks = malloc(n + n_blocks);
    const char *p = corpus;
    for (size_t i = 0; i < n_lines; i++) {
        const char *q = memchr(p, '\n', (size_t)(corpus + n - p));
        units[i] = (Unit){p, (size_t)(q - p)};
        p = q + 1;
    }
    char *b = blocks;
    for (size_t i = 0; i < n_lines; i += 8) { /* 8 lines joined by "\n", with a final "\n" */
        const char *s = units[i].p;
        size_t last = i + 8 < n_lines ? i + 7 : n_lines - 1;
        size_t l = (size_t)(units[last].p + units[last].n - s) + 1;
        memcpy(b, s, l);
        units[n_lines + i / 8] = (Unit){b, l};
        b += l;
    }
    n_units = n_lines + n_blocks;
}

/* ---- goldens ------------------------------------------------------------------------------- */

typedef struct Rec {
    int32_t *ids;
    size_t n;
    char *dec, *skip; /* NULL: equal to the unit's text */
    size_t dec_n, skip_n;
} Rec;

typedef struct Golden {
    Rec *e, *d;
    size_t n_e, n_d;
    char *buf;
} Golden;

static char *unhex(const char *s, size_t l, size_t *n) {
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

static void load_golden(const char *name, Golden *g) {
    char path[256];
    snprintf(path, sizeof path, FIX "%s.golden.zst", name);
    size_t n;
    g->buf = unzstd(path, &n);
    size_t lines = 0;
    for (size_t i = 0; i < n; i++) lines += g->buf[i] == '\n';
    g->e = calloc(lines, sizeof *g->e);
    g->d = calloc(lines, sizeof *g->d);
    for (char *p = g->buf, *end; *p; p = end + 1) {
        end = strchr(p, '\n');
        *end = 0;
        if (*p == '#') continue;
        Rec *r = *p == 'E' ? &g->e[g->n_e++] : &g->d[g->n_d++];
        char *f[4];
        f[0] = p;
        for (int k = 1; k < 4; k++) {
            f[k] = strchr(f[k - 1], '\t');
            cr_assert(f[k], "%s: malformed line", path);
            *f[k]++ = 0;
        }
        size_t cap = strlen(f[1]) / 2 + 2;
        r->ids = malloc(cap * sizeof *r->ids);
        for (char *q = f[1]; *q;) {
            char *x;
            long v = strtol(q, &x, 10);
            if (x == q) break;
            r->ids[r->n++] = (int32_t)v;
            q = x;
        }
        r->dec = unhex(f[2], strlen(f[2]), &r->dec_n);
        r->skip = unhex(f[3], strlen(f[3]), &r->skip_n);
    }
}

static void free_golden(Golden *g) {
    for (size_t i = 0; i < g->n_e; i++) free(g->e[i].ids), free(g->e[i].dec), free(g->e[i].skip);
    for (size_t i = 0; i < g->n_d; i++) free(g->d[i].ids), free(g->d[i].dec), free(g->d[i].skip);
    free(g->e), free(g->d), free(g->buf);
}

/* ---- tokenizers ---------------------------------------------------------------------------- */

static void open_model(const char *path, RadModelFile *m) {
    RadErr e = {0};
    memset(m, 0, sizeof *m);
    cr_assert_eq(rad_model_open(path, m, &e), RAD_OK, "%s", e.msg);
}

static RadTok *tok_of(const RadDict *kv) {
    RadErr e = {0};
    RadTok *t = NULL;
    cr_assert_eq(rad_tok_init(&t, kv, &e), RAD_OK, "%s", e.msg);
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

/* The bytes the vocabulary has a token for. SmolLM2's has none for 21 bytes (0x04, 0x06, 0x13,
 * 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2, 0xF5..0xFF): Hugging Face drops them from the text,
 * and so does Radiance, so text holding them cannot round-trip. */
static void byte_coverage(const RadTok *t, bool has[256]) {
    RadErr e = {0};
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        int32_t *ids;
        size_t n;
        cr_assert_eq(rad_tok_encode(t, &c, 1, 0, &ids, &n, &e), RAD_OK, "%s", e.msg);
        has[b] = n > 0;
        free(ids);
    }
}

static bool covered(const bool has[256], const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!has[(unsigned char)s[i]]) return false;
    return true;
}

/* Every unit against the golden; returns the number of mismatches (encode or decode). */
static size_t check(const RadTok *t, const char *name, bool round_trip) {
    load_corpus();
    Golden g = {0};
    load_golden(name, &g);
    cr_assert_eq(g.n_e, n_units, "%s: %zu records for %zu units (regenerate the goldens)", name, g.n_e, n_units);
    size_t bad_enc = 0, bad_dec = 0, bad_rt = 0, tokens = 0, n_rt = 0;
    RadErr e = {0};
    bool has[256];
    byte_coverage(t, has);
    for (size_t i = 0; i < n_units; i++) {
        const Unit *u = &units[i];
        char *lossy = NULL;
        size_t ln = u->n;
        const char *text = u->p;
        bool valid = rad_utf8_valid(u->p, u->n);
        if (!valid) {
            cr_assert_eq(rad_utf8_lossy(u->p, u->n, &lossy, &ln, &e), RAD_OK);
            text = lossy;
        }
        int32_t *ids;
        size_t n;
        cr_assert_eq(rad_tok_encode(t, text, ln, 1, &ids, &n, &e), RAD_OK, "%s", e.msg);
        const Rec *r = &g.e[i];
        tokens += n;
        if (n != r->n || memcmp(ids, r->ids, n * sizeof *ids) != 0) {
            if (bad_enc++ < 5) {
                show(name, i, text, ln);
                show_ids("radiance", ids, n);
                show_ids("oracle  ", r->ids, r->n);
            }
        }
        for (int skip = 0; skip < 2; skip++) {
            char *d;
            size_t dn;
            cr_assert_eq(rad_tok_decode(t, r->ids, r->n, RAD_TOK_LOSSY | (skip ? RAD_TOK_SKIP_SPECIAL : 0), &d,
                                        &dn, &e), RAD_OK, "%s", e.msg);
            const char *want = skip ? r->skip : r->dec;
            size_t wn = skip ? r->skip_n : r->dec_n;
            if (!want) want = text, wn = ln;
            if (!eq(d, dn, want, wn) && bad_dec++ < 5) {
                show(skip ? "decode (skip special)" : "decode", i, d, dn);
                show("   want", i, want, wn);
            }
            free(d);
        }
        free(ids);
        if (round_trip && !memmem(u->p, u->n, "\xE2\x96\x81", 3) && covered(has, u->p, u->n)) {
            n_rt++; /* the bytes themselves round-trip, UTF-8 or not */
            cr_assert_eq(rad_tok_encode(t, u->p, u->n, 0, &ids, &n, &e), RAD_OK, "%s", e.msg);
            char *d;
            size_t dn;
            cr_assert_eq(rad_tok_decode(t, ids, n, 0, &d, &dn, &e), RAD_OK, "%s", e.msg);
            if (!eq(d, dn, u->p, u->n) && bad_rt++ < 5) show("round trip", i, d, dn);
            free(d);
            free(ids);
        }
        free(lossy);
    }
    size_t bad_d = 0;
    for (size_t i = 0; i < g.n_d; i++) { /* random ids: decode as the oracle does */
        const Rec *r = &g.d[i];
        for (int skip = 0; skip < 2; skip++) {
            char *d;
            size_t dn;
            cr_assert_eq(rad_tok_decode(t, r->ids, r->n, RAD_TOK_LOSSY | (skip ? RAD_TOK_SKIP_SPECIAL : 0), &d,
                                        &dn, &e), RAD_OK, "%s", e.msg);
            const char *want = skip ? r->skip : r->dec;
            size_t wn = skip ? r->skip_n : r->dec_n;
            if (!eq(d, dn, want ? want : "", want ? wn : 0) && bad_d++ < 5) {
                show_ids("random ids", r->ids, r->n);
                show("   decode", i, d, dn);
                show("   want  ", i, want, wn);
            }
            free(d);
        }
    }
    fprintf(stderr, "tok %-15s %zu units (%zu lines), %zu tokens: %zu encode, %zu decode, %zu of %zu "
            "byte round-trip, %zu random-id decode mismatches\n", name, n_units, n_lines, tokens, bad_enc,
            bad_dec, bad_rt, n_rt, bad_d);
    free_golden(&g);
    cr_expect_eq(bad_enc, 0, "%s: %zu units encode differently from the oracle", name, bad_enc);
    cr_expect_eq(bad_dec, 0, "%s: %zu decodes differ from the oracle", name, bad_dec);
    cr_expect_eq(bad_rt, 0, "%s: %zu units do not round-trip", name, bad_rt);
    cr_expect_eq(bad_d, 0, "%s: %zu random id sequences decode differently", name, bad_d);
    return bad_enc + bad_dec + bad_rt + bad_d;
}

static void check_with_pre(const char *pre, const char *pattern, const char *golden) {
    RadModelFile m;
    RadErr e = {0};
    open_model(MODEL, &m);
    cr_assert_eq(rad_dict_set_str(&m.tok, "tokenizer.pre", pre, &e), RAD_OK);
    if (pattern) cr_assert_eq(rad_dict_set_str(&m.tok, "tokenizer.pre_pattern", pattern, &e), RAD_OK);
    RadTok *t = tok_of(&m.tok);
    rad_model_free(&m);
    check(t, golden, true);
    rad_tok_free(t);
}

Test(tok, smollm2_gguf_matches_oracle) {
    RadModelFile m;
    open_model(MODEL, &m);
    const char *pre;
    RadErr e = {0};
    cr_assert_eq(rad_dict_gets(&m.tok, "tokenizer.pre", &pre, &e), RAD_OK);
    cr_assert_str_eq(pre, "smollm");
    RadTok *t = tok_of(&m.tok);
    rad_model_free(&m);
    check(t, "smollm2", true);
    rad_tok_free(t);
}

/* The same oracle through the tokenizer.json reader (SmolLM2's original pre-tokenizer). */
Test(tok, smollm2_tokenizer_json_matches_oracle) {
    size_t n;
    char *json = unzstd(FIX "smollm2-tokenizer.json.zst", &n);
    RadModelFile m;
    memset(&m, 0, sizeof m);
    RadErr e = {0};
    cr_assert_eq(rad_hf_read_tokenizer(&m, "tokenizer.json", json, n, NULL, NULL, 0, &e), RAD_OK, "%s", e.msg);
    free(json);
    const char *pre;
    cr_assert_eq(rad_dict_gets(&m.tok, "tokenizer.pre", &pre, &e), RAD_OK);
    cr_assert_str_eq(pre, "smollm");
    RadTok *t = tok_of(&m.tok);
    rad_model_free(&m);
    check(t, "smollm2", true);
    rad_tok_free(t);
}

Test(tok, pre_gpt2) { check_with_pre("gpt-2", NULL, "smollm2-gpt2"); }
Test(tok, pre_llama_bpe) { check_with_pre("llama-bpe", NULL, "smollm2-llama3"); }
Test(tok, pre_qwen2) { check_with_pre("qwen2", NULL, "smollm2-qwen2"); }
/* A tokenizer.json's own Split regex (tokenizer.pre "default" + tokenizer.pre_pattern). */
Test(tok, pre_default_with_pattern) {
    check_with_pre("default",
                   "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                   "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
                   "smollm2-qwen2");
}

/* Qwen2.5's own 151k vocabulary and merges, pre-tokenizer "qwen2", read from the real GGUF
 * (make model fetches it: its tokenizer alone is 7 MB, so it is not copied into fixtures). */
Test(tok, qwen25_matches_oracle) {
    RadModelFile m;
    RadErr e = {0};
    memset(&m, 0, sizeof m);
    if (rad_model_open(QWEN05, &m, &e)) cr_skip_test("Qwen2.5-Coder-0.5B not fetched (make model): %s", e.msg);
    const char *pre;
    cr_assert_eq(rad_dict_gets(&m.tok, "tokenizer.pre", &pre, &e), RAD_OK);
    cr_assert_str_eq(pre, "qwen2");
    RadTok *t = tok_of(&m.tok);
    rad_model_free(&m);
    check(t, "qwen25", true);
    rad_tok_free(t);
}

Test(tok, gemma3_matches_oracle) {
    RadModelFile m;
    open_model(GEMMA, &m);
    RadTok *t = tok_of(&m.tok);
    rad_model_free(&m);
    check(t, "gemma3", true);
    rad_tok_free(t);
}

/* Llama 2's shape: a "▁" before each run of text, one leading space stripped on decode. */
Test(tok, gemma3_dummy_prefix_matches_oracle) {
    RadModelFile m;
    RadErr e = {0};
    open_model(GEMMA, &m);
    cr_assert_eq(rad_dict_set_bool(&m.tok, "tokenizer.add_space_prefix", true, &e), RAD_OK);
    RadTok *t = tok_of(&m.tok);
    rad_model_free(&m);
    /* No byte round trip here: as in HF, every run of text after an added token (Gemma's "\n",
     * "\t" are added tokens) gets its own "▁", and decode strips only the first. */
    check(t, "gemma3-prefix", false);
    rad_tok_free(t);
}

/* ---- speed --------------------------------------------------------------------------------- */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void speed(const char *what, const RadTok *t) {
    load_corpus();
    RadErr e = {0};
    size_t tokens = 0;
    double t0 = now();
    for (size_t i = 0; i < n_lines; i++) {
        int32_t *ids;
        size_t n;
        cr_assert_eq(rad_tok_encode(t, units[i].p, units[i].n, 0, &ids, &n, &e), RAD_OK, "%s", e.msg);
        tokens += n;
        free(ids);
    }
    double dt = now() - t0;
    fprintf(stderr, "tok speed %-8s %zu lines, %zu tokens in %.3f s: %.0f tokens/s\n", what, n_lines, tokens, dt,
            tokens / dt);
    cr_expect_lt(dt, 5.0, "%s: the corpus took %.2f s to encode", what, dt); /* sanitizer builds too */
}

Test(tok, encode_speed) {
    RadModelFile m;
    open_model(MODEL, &m);
    RadTok *t = tok_of(&m.tok);
    rad_model_free(&m);
    speed("smollm2", t);
    rad_tok_free(t);
    open_model(GEMMA, &m);
    t = tok_of(&m.tok);
    rad_model_free(&m);
    speed("gemma3", t);
    rad_tok_free(t);
}

/* ---- round trips and streaming ------------------------------------------------------------- */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next_rand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* Random bytes: ASCII, whitespace, any byte, and pieces of valid multi-byte characters. */
static size_t random_text(char *buf, size_t cap) {
    static const char *frag[] = {"\xC3\xA9", "\xE6\x97\xA5", "\xF0\x9F\x98\x80", "\xE2\x80\x8D", "'s", "  ",
                                 "\t", "\r\n", "<|im_start|>", "<bos>", "123", "\xCC\x81", "\xE3\x80\x80"};
    size_t n = 0, len = next_rand() % (cap - 16);
    while (n < len) {
        uint32_t r = next_rand() % 10;
        if (r < 4) buf[n++] = (char)(' ' + next_rand() % 95);
        else if (r < 6) buf[n++] = (char)(next_rand() % 256);
        else {
            const char *f = frag[next_rand() % (sizeof frag / sizeof *frag)];
            size_t l = strlen(f);
            if (next_rand() % 4 == 0) l = 1 + next_rand() % l; /* cut short */
            memcpy(buf + n, f, l);
            n += l;
        }
    }
    return n;
}

static void round_trips(const RadTok *t, bool spm) {
    RadErr e = {0};
    char buf[160];
    bool has[256];
    byte_coverage(t, has);
    for (int k = 0; k < 3000; k++) {
        size_t n = random_text(buf, sizeof buf);
        for (size_t i = 0; i < n; i++)
            if (!has[(unsigned char)buf[i]]) buf[i] = '?'; /* a byte the vocabulary lacks */
        if (spm && memmem(buf, n, "\xE2\x96\x81", 3)) continue; /* "▁" decodes as a space */
        int32_t *ids;
        size_t ni;
        cr_assert_eq(rad_tok_encode(t, buf, n, 0, &ids, &ni, &e), RAD_OK, "%s", e.msg);
        char *d;
        size_t dn;
        cr_assert_eq(rad_tok_decode(t, ids, ni, 0, &d, &dn, &e), RAD_OK, "%s", e.msg);
        if (!eq(d, dn, buf, n)) show("no round trip", (size_t)k, buf, n);
        cr_assert(eq(d, dn, buf, n));
        /* streaming: the pieces add up to the decode (no dummy prefix here) */
        size_t at = 0;
        for (size_t i = 0; i < ni; i++) {
            char p[64];
            int l = rad_tok_piece(t, ids[i], p, sizeof p);
            cr_assert(l >= 0 && (size_t)l <= sizeof p && at + (size_t)l <= dn);
            cr_assert(memcmp(d + at, p, (size_t)l) == 0);
            at += (size_t)l;
        }
        cr_assert_eq(at, dn);
        free(d);
        free(ids);
    }
}

Test(tok, random_bytes_round_trip) {
    RadModelFile m;
    open_model(MODEL, &m);
    RadTok *t = tok_of(&m.tok);
    round_trips(t, false);
    rad_tok_free(t);
    RadErr e = {0};
    rad_dict_set_str(&m.tok, "tokenizer.pre", "llama-bpe", &e);
    t = tok_of(&m.tok);
    round_trips(t, false);
    rad_tok_free(t);
    rad_model_free(&m);
    open_model(GEMMA, &m);
    t = tok_of(&m.tok);
    rad_model_free(&m);
    round_trips(t, true);
    rad_tok_free(t);
}

/* ---- special tokens ------------------------------------------------------------------------ */

static void expect_ids(const RadTok *t, const char *s, int add, const int32_t *want, size_t wn) {
    RadErr e = {0};
    int32_t *ids;
    size_t n;
    cr_assert_eq(rad_tok_encode(t, s, strlen(s), add, &ids, &n, &e), RAD_OK, "%s", e.msg);
    if (n != wn || memcmp(ids, want, n * sizeof *ids) != 0) {
        show_ids("got ", ids, n);
        show_ids("want", want, wn);
        cr_assert_fail("'%s' encodes wrongly", s);
    }
    free(ids);
}

Test(tok, special_tokens) {
    RadModelFile m;
    RadErr e = {0};
    open_model(MODEL, &m);
    RadTok *t = tok_of(&m.tok);
    rad_model_free(&m);
    cr_assert_eq(rad_tok_bos(t), 1);
    cr_assert_eq(rad_tok_eos(t), 2);
    cr_assert(rad_tok_is_special(t, 0) && rad_tok_is_special(t, 2) && !rad_tok_is_special(t, 100));
    /* specials are cut out before the split; no BOS for SmolLM2 (add_bos false) */
    expect_ids(t, "<|im_start|>user\nhi<|im_end|>", 1, (int32_t[]){1, 4093, 198, 6004, 2}, 5);
    expect_ids(t, "<|im_start|><|im_end|>", 0, (int32_t[]){1, 2}, 2);
    int32_t *ids;
    size_t n;
    const char *s = "<|im_start|>assistant\nOK<|im_end|>";
    cr_assert_eq(rad_tok_encode(t, s, strlen(s), 0, &ids, &n, &e), RAD_OK);
    char *d;
    size_t dn;
    cr_assert_eq(rad_tok_decode(t, ids, n, 0, &d, &dn, &e), RAD_OK);
    cr_assert_str_eq(d, s);
    free(d);
    cr_assert_eq(rad_tok_decode(t, ids, n, RAD_TOK_SKIP_SPECIAL, &d, &dn, &e), RAD_OK);
    cr_assert_str_eq(d, "assistant\nOK");
    free(d);
    char p[32];
    cr_assert_eq(rad_tok_piece(t, ids[0], p, sizeof p), 12);
    cr_assert(memcmp(p, "<|im_start|>", 12) == 0);
    cr_assert_eq(rad_tok_piece(t, ids[0], p, 4), 12, "the full length, even when truncated");
    cr_assert_eq(rad_tok_piece(t, -1, p, sizeof p), -1);
    cr_assert_eq(rad_tok_piece(t, rad_tok_n_vocab(t), p, sizeof p), -1);
    free(ids);
    int32_t bad[] = {5, 49152};
    cr_assert_eq(rad_tok_decode(t, bad, 2, 0, &d, &dn, &e), RAD_E_ARG);
    cr_assert(strstr(e.msg, "49152") && strstr(e.msg, "index 1"), "%s", e.msg);
    rad_tok_free(t);

    open_model(GEMMA, &m);
    t = tok_of(&m.tok);
    rad_model_free(&m);
    cr_assert_eq(rad_tok_bos(t), 2);
    /* Gemma adds <bos>; control and user-defined tokens are matched whole, space runs merge first */
    expect_ids(t, "Hello world", 1, (int32_t[]){2, 9259, 1902}, 3);
    expect_ids(t, "Hello world", 0, (int32_t[]){9259, 1902}, 2);
    expect_ids(t, "<start_of_turn>user\nhi<end_of_turn>\n\n", 0, (int32_t[]){105, 2364, 107, 2202, 106, 108}, 6);
    expect_ids(t, " lead  two   three", 0, (int32_t[]){2080, 138, 13498, 139, 19891}, 5);
    int32_t *ids2;
    size_t n2;
    cr_assert_eq(rad_tok_encode(t, "\x00\x01 z", 4, 0, &ids2, &n2, &e), RAD_OK); /* <0x00>: byte fallback */
    cr_assert(n2 == 3 && ids2[0] == 238 && ids2[1] == 249732 && ids2[2] == 904);
    free(ids2);
    int32_t bytes[] = {238 + 0xE2, 238 + 0x82, 238 + 0xAC, 238 + 0x41, 238 + 0xE2};
    cr_assert_eq(rad_tok_decode(t, bytes, 3, RAD_TOK_LOSSY, &d, &dn, &e), RAD_OK);
    cr_assert_str_eq(d, "\xE2\x82\xAC"); /* a byte run that is UTF-8 */
    free(d);
    cr_assert_eq(rad_tok_decode(t, bytes + 3, 2, RAD_TOK_LOSSY, &d, &dn, &e), RAD_OK);
    cr_assert_str_eq(d, "\xEF\xBF\xBD\xEF\xBF\xBD"); /* one that is not: U+FFFD per byte */
    free(d);
    cr_assert_eq(rad_tok_decode(t, bytes + 3, 2, 0, &d, &dn, &e), RAD_OK);
    cr_assert(dn == 2 && memcmp(d, "A\xE2", 2) == 0); /* or the bytes as they are */
    free(d);
    rad_tok_free(t);
}

Test(tok, utf8_helpers) {
    cr_assert_eq(rad_utf8_tail("ab", 2), 0);
    cr_assert_eq(rad_utf8_tail("a\xE2", 2), 1);
    cr_assert_eq(rad_utf8_tail("a\xE2\x82", 3), 2);
    cr_assert_eq(rad_utf8_tail("a\xE2\x82\xAC", 4), 0);
    cr_assert_eq(rad_utf8_tail("\xF0\x9F\x98", 3), 3);
    cr_assert_eq(rad_utf8_tail("\xF0\x9F\x98\x80", 4), 0);
    cr_assert_eq(rad_utf8_tail("a\x80", 2), 0, "a stray continuation byte completes nothing");
    cr_assert_eq(rad_utf8_tail("a\xE0\x80", 3), 0, "E0 80 can never be completed");
    cr_assert_eq(rad_utf8_tail("", 0), 0);
    cr_assert_eq(rad_utf8_tail("a\xF5", 2), 0);
    cr_assert_eq(rad_utf8_tail("a\xC3", 2), 1);
    /* Python's errors="replace": one U+FFFD per maximal ill-formed subpart */
    static const struct { const char *in, *out; } cases[] = {
        {"a\xE2\x82" "b", "a\xEF\xBF\xBD" "b"},
        {"\xF0\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xF4\x8F\xBF", "\xEF\xBF\xBD"},
        {"\xC0\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"ok\xE6\x97\xA5", "ok\xE6\x97\xA5"},
    };
    RadErr e = {0};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *o;
        size_t n;
        cr_assert_eq(rad_utf8_lossy(cases[i].in, strlen(cases[i].in), &o, &n, &e), RAD_OK);
        cr_assert_str_eq(o, cases[i].out, "case %zu", i);
        free(o);
    }
}

/* ---- a small synthetic byte-level table ---------------------------------------------------- */

static void tiny_table(RadDict *kv) {
    RadErr e = {0};
    rad_dict_init(kv);
    /* GPT-2's alphabet (256 tokens), then "ab", "abc", "<a>", "<a>b" */
    const char *toks[260];
    static char store[256][3];
    int k = 0;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        int c = keep ? b : 256 + k++;
        if (c < 0x80) store[b][0] = (char)c, store[b][1] = 0;
        else store[b][0] = (char)(0xC0 | c >> 6), store[b][1] = (char)(0x80 | (c & 0x3F)), store[b][2] = 0;
        toks[b] = store[b];
    }
    toks[256] = "ab", toks[257] = "abc", toks[258] = "<a>", toks[259] = "<a>b";
    int32_t types[260];
    for (int i = 0; i < 260; i++) types[i] = 1;
    types[258] = 3, types[259] = 4;
    const char *merges[] = {"a b", "ab c"};
    cr_assert_eq(rad_dict_set_str(kv, "tokenizer.model", "gpt2", &e), RAD_OK);
    cr_assert_eq(rad_dict_set_str(kv, "tokenizer.pre", "gpt-2", &e), RAD_OK);
    cr_assert_eq(rad_dict_set_strarr(kv, "tokenizer.tokens", toks, 260, &e), RAD_OK);
    cr_assert_eq(rad_dict_set_arr(kv, "tokenizer.token_type", RAD_VAL_I32, types, 260, &e), RAD_OK);
    cr_assert_eq(rad_dict_set_strarr(kv, "tokenizer.merges", merges, 2, &e), RAD_OK);
    cr_assert_eq(rad_dict_set_i32(kv, "tokenizer.eos_id", 258, &e), RAD_OK);
}

Test(tok, added_tokens_longest_first) {
    RadDict kv;
    tiny_table(&kv);
    RadTok *t = tok_of(&kv);
    /* "<a>b" (user-defined) is longer than "<a>" (control): leftmost, then longest */
    expect_ids(t, "x<a>bc<a>", 0, (int32_t[]){'x', 259, 'c', 258}, 4);
    expect_ids(t, "abc ab", 0, (int32_t[]){257, 32, 256}, 3); /* "Ġ" (the token of byte 0x20) has no merge */
    rad_tok_free(t);
    rad_dict_free(&kv);
}

/* ---- refusals ------------------------------------------------------------------------------ */

static void refuse(RadDict *kv, int code, const char *key) {
    RadErr e = {0};
    RadTok *t = (RadTok *)1;
    int rc = rad_tok_init(&t, kv, &e);
    cr_assert_eq(rc, code, "want %d, got %d (%s)", code, rc, e.msg);
    cr_assert_null(t);
    cr_assert(strstr(e.msg, key), "'%s' does not name %s", e.msg, key);
    cr_assert(!strchr(e.msg, '\n'), "one line: %s", e.msg);
}

Test(tok, refusals_name_the_key) {
    RadDict kv;
    RadErr e = {0};
    rad_dict_init(&kv);
    refuse(&kv, RAD_E_FORMAT, "tokenizer.model"); /* an input without a tokenizer */
    rad_dict_free(&kv);

#define CASE(setup, code, key) \
    do { \
        tiny_table(&kv); \
        setup; \
        refuse(&kv, code, key); \
        rad_dict_free(&kv); \
    } while (0)
    /* "bert" without the WordPiece keys a tokenizer.json import writes (a GGUF's table) */
    CASE(rad_dict_set_str(&kv, "tokenizer.model", "bert", &e), RAD_E_UNSUPPORTED, "tokenizer.wordpiece.prefix");
    CASE(rad_dict_set_str(&kv, "tokenizer.model", "t5", &e), RAD_E_UNSUPPORTED, "tokenizer.model");
    CASE(rad_dict_set_u32(&kv, "tokenizer.model", 1, &e), RAD_E_FORMAT, "tokenizer.model");
    CASE(rad_dict_set_str(&kv, "tokenizer.pre", "falcon", &e), RAD_E_UNSUPPORTED, "tokenizer.pre");
    CASE((rad_dict_set_str(&kv, "tokenizer.pre", "default", &e),
          rad_dict_set_str(&kv, "tokenizer.pre_pattern", "(unclosed", &e)),
         RAD_E_FORMAT, "tokenizer.pre_pattern");
    uint32_t u[3] = {1, 2, 3};
    CASE(rad_dict_set_arr(&kv, "tokenizer.tokens", RAD_VAL_U32, u, 3, &e), RAD_E_FORMAT, "tokenizer.tokens");
    CASE(rad_dict_set_strarr(&kv, "tokenizer.tokens", NULL, 0, &e), RAD_E_FORMAT, "tokenizer.tokens");
    CASE(rad_dict_set_arr(&kv, "tokenizer.token_type", RAD_VAL_U32, u, 3, &e), RAD_E_FORMAT, "tokenizer.token_type");
    float f[260] = {0};
    CASE(rad_dict_set_arr(&kv, "tokenizer.token_type", RAD_VAL_F32, f, 260, &e), RAD_E_FORMAT, "tokenizer.token_type");
    int32_t ty[260];
    for (int i = 0; i < 260; i++) ty[i] = i == 7 ? 9 : 1;
    CASE(rad_dict_set_arr(&kv, "tokenizer.token_type", RAD_VAL_I32, ty, 260, &e), RAD_E_FORMAT, "tokenizer.token_type[7]");
    const char *m1[] = {"a b", "a zz"}, *m2[] = {"a b", "ab"}, *m3[] = {"b c"};
    CASE(rad_dict_set_strarr(&kv, "tokenizer.merges", m1, 2, &e), RAD_E_FORMAT, "tokenizer.merges[1]");
    CASE(rad_dict_set_strarr(&kv, "tokenizer.merges", m2, 2, &e), RAD_E_FORMAT, "tokenizer.merges[1]");
    CASE(rad_dict_set_strarr(&kv, "tokenizer.merges", m3, 1, &e), RAD_E_FORMAT, "tokenizer.merges[0]"); /* "bc" */
    CASE(rad_dict_set_str(&kv, "tokenizer.merges", "a b", &e), RAD_E_FORMAT, "tokenizer.merges");
    CASE(rad_dict_set_i32(&kv, "tokenizer.bos_id", 260, &e), RAD_E_FORMAT, "tokenizer.bos_id");
    CASE(rad_dict_set_str(&kv, "tokenizer.eos_id", "x", &e), RAD_E_FORMAT, "tokenizer.eos_id");
    CASE(rad_dict_set_u32(&kv, "tokenizer.add_bos", 1, &e), RAD_E_FORMAT, "tokenizer.add_bos");
    /* byte-level BPE without merges */
    tiny_table(&kv);
    RadDict k2;
    rad_dict_init(&k2);
    for (uint64_t i = 0; i < kv.n; i++)
        if (strcmp(kv.keys[i].p, "tokenizer.merges") != 0) rad_dict_set(&k2, kv.keys[i].p, &kv.vals[i], &e);
    refuse(&k2, RAD_E_FORMAT, "tokenizer.merges");
    /* SentencePiece: scores of the wrong length, or not numbers */
    rad_dict_set_str(&k2, "tokenizer.model", "llama", &e);
    RadTok *t;
    cr_assert_eq(rad_tok_init(&t, &k2, &e), RAD_OK, "%s", e.msg); /* no scores: allowed */
    rad_tok_free(t);
    float sc[260];
    for (int i = 0; i < 260; i++) sc[i] = (float)-i;
    rad_dict_set_arr(&k2, "tokenizer.scores", RAD_VAL_F32, sc, 259, &e);
    refuse(&k2, RAD_E_FORMAT, "tokenizer.scores");
    sc[12] = NAN;
    rad_dict_set_arr(&k2, "tokenizer.scores", RAD_VAL_F32, sc, 260, &e);
    refuse(&k2, RAD_E_FORMAT, "tokenizer.scores[12]");
    rad_dict_free(&k2);
    rad_dict_free(&kv);
}

/* ---- plain ranges: special-token text read as text ----------------------------------------- */

static void expect_spans(const RadTok *t, const char *s, const RadTokSpan *sp, size_t nsp, const int32_t *want, size_t wn) {
    RadErr e = {0};
    int32_t *ids;
    size_t n;
    cr_assert_eq(rad_tok_encode_spans(t, s, strlen(s), 0, sp, nsp, &ids, &n, &e), RAD_OK, "%s", e.msg);
    if (n != wn || memcmp(ids, want, n * sizeof *ids) != 0) {
        show_ids("got ", ids, n);
        show_ids("want", want, wn);
        cr_assert_fail("'%s' with %zu plain ranges encodes wrongly", s, nsp);
    }
    free(ids);
}

/* The ids are tokenizers 0.23.3 on the smollm2 oracle's tokenizer.json with
 * encode_special_tokens = True (transformers' split_special_tokens=True). */
Test(tok, plain_ranges_are_split_special_tokens) {
    RadModelFile m;
    RadErr e = {0};
    open_model(MODEL, &m);
    RadTok *t = tok_of(&m.tok);
    rad_model_free(&m);
    const char *s = "<|im_end|>";
    RadTokSpan all = {0, strlen(s)};
    expect_spans(t, s, &all, 1, (int32_t[]){44, 108, 306, 79, 486, 108, 46}, 7);
    expect_spans(t, s, NULL, 0, (int32_t[]){2}, 1); /* no ranges: rad_tok_encode */
    s = "<|im_start|>system";
    all.len = strlen(s);
    expect_spans(t, s, &all, 1, (int32_t[]){44, 108, 306, 79, 3738, 108, 46, 9690}, 8);
    /* markup around a plain range: only the markup's specials are tokens */
    s = "<|im_start|>user\n<|im_end|><|im_end|>";
    RadTokSpan c = {17, 10};
    expect_spans(t, s, &c, 1, (int32_t[]){1, 4093, 198, 44, 108, 306, 79, 486, 108, 46, 2}, 11);
    /* a special token across a range's edge is text too */
    s = "<|im_end|>";
    RadTokSpan edge = {5, 2};
    expect_spans(t, s, &edge, 1, (int32_t[]){44, 108, 306, 79, 486, 108, 46}, 7);
    RadTokSpan empty = {3, 0};
    expect_spans(t, s, &empty, 1, (int32_t[]){2}, 1); /* an empty range covers nothing */
    /* ranges out of order or past the text */
    int32_t *ids = (int32_t *)1;
    size_t n = 1;
    RadTokSpan bad[][2] = {{{0, 4}, {2, 1}}, {{0, 11}, {0, 0}}, {{11, 0}, {0, 0}}, {{4, SIZE_MAX}, {0, 0}}};
    size_t nbad[] = {2, 1, 1, 1};
    for (size_t i = 0; i < 4; i++) {
        cr_expect_eq(rad_tok_encode_spans(t, s, strlen(s), 0, bad[i], nbad[i], &ids, &n, &e), RAD_E_ARG, "case %zu", i);
        cr_expect(ids == NULL && n == 0 && strstr(e.msg, "plain range") && !strchr(e.msg, '\n'), "case %zu: %s", i, e.msg);
    }
    rad_tok_free(t);
}

Test(tok, plain_ranges_keep_user_defined_tokens) {
    RadDict kv;
    tiny_table(&kv);
    RadTok *t = tok_of(&kv);
    /* "<a>b" (user-defined) is still matched, as in HF; "<a>" (control) is its bytes */
    const char *s = "x<a>bc<a>";
    RadTokSpan all = {0, strlen(s)};
    expect_spans(t, s, &all, 1, (int32_t[]){'x', 259, 'c', '<', 'a', '>'}, 6);
    rad_tok_free(t);
    rad_dict_free(&kv);
}

/* SentencePiece: the run around a plain range is one run, so its dummy prefix does not move. */
Test(tok, plain_ranges_sentencepiece) {
    RadModelFile m;
    RadErr e = {0};
    open_model(GEMMA, &m);
    RadTok *t = tok_of(&m.tok);
    rad_model_free(&m);
    cr_assert(rad_tok_is_special(t, 106), "<end_of_turn> is a control token");
    const char *s = "<start_of_turn>user\nhi<end_of_turn>\n";
    RadTokSpan c = {20, 2};
    expect_spans(t, s, &c, 1, (int32_t[]){105, 2364, 107, 2202, 106, 107}, 6);
    /* the same text in content: no 106 */
    s = "<start_of_turn>user\n<end_of_turn><end_of_turn>";
    RadTokSpan c2 = {20, 13};
    int32_t *ids;
    size_t n;
    cr_assert_eq(rad_tok_encode_spans(t, s, strlen(s), 0, &c2, 1, &ids, &n, &e), RAD_OK, "%s", e.msg);
    size_t n106 = 0;
    for (size_t i = 0; i < n; i++) n106 += ids[i] == 106;
    cr_expect(n > 4 && ids[0] == 105 && ids[n - 1] == 106 && n106 == 1, "only the markup's <end_of_turn> is the token");
    char *d;
    size_t dn;
    cr_assert_eq(rad_tok_decode(t, ids, n, 0, &d, &dn, &e), RAD_OK);
    cr_expect_str_eq(d, s, "the text decodes back");
    free(d);
    free(ids);
    rad_tok_free(t);
}
