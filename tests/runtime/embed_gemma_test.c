/* EmbeddingGemma-300M end to end: the sentence-transformers folder (models/embeddinggemma-300m,
 * fetched by `make models`: gemma3_text, bidirectional, F32 safetensors without the "model."
 * prefix, 2_Dense and 3_Dense heads, Normalize) converted by rad-convert and served by the gemma3
 * plugin's embedding form, against sentence-transformers' own encode() (scripts/gen-embed-goldens.py,
 * float32, eager attention, no prompt):
 *
 *   - the 50 committed sentences (tests/fixtures/embed/embeddinggemma.golden.zst, each encoded
 *     alone): Radiance's tokenizer gives the goldens' ids, and every cosine is >= 0.9999 on the
 *     exact path and on the fast one (--fast's tolerance), in batches of uneven sizes;
 *   - two long texts (embeddinggemma-long.golden.zst: sentences 1-20, then all 50, joined by one
 *     space: 288 and 991 tokens), past the sliding layers' window: transformers' bidirectional
 *     Gemma 3 sees |i - j| < sliding_window / 2 + 1 = 257 there. On the exact path 1 - cosine must
 *     stay under 1e-6, which a window one token off (256 or 258: 9e-6 .. 6e-5 in transformers) or
 *     the checkpoint's 512 (2e-3 .. 2e-2) does not.
 *
 * RAD_ORACLE_QUICK=1 (the sanitizer build) embeds the first 16 sentences and the first long text.
 * A q8_0 conversion is served by gemma3_ggml (cosine >= 0.995, fast path).
 * Without the folder those skip. The rest needs no download: small folders built here from the
 * tiny random Gemma 3 (tests/fixtures/tiny-gemma3-bf16) check the Dense modules' arithmetic (two
 * layers, one with a bias, against the pooled row computed by hand) and the refusals by name:
 * an unserved module, a Dense with an activation (or none named: Tanh) or a residual, one whose
 * weights are pytorch_model.bin, a Dense before Pooling or after Normalize, a weight of another
 * shape, dense layers that do not chain, pooling on a causal Gemma 3, and a bidirectional one
 * without pooling. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "libcommon/runtime/rad_engine.h"
#include "libcommon/tok/rad_tok.h"
#include "tests/embed_golden.h"

#define FOLDER "models/embeddinggemma-300m"
#define SENTENCES "tests/fixtures/embed/sentences.txt"
#define GOLDEN "tests/fixtures/embed/embeddinggemma.golden.zst"
#define GOLDEN_LONG "tests/fixtures/embed/embeddinggemma-long.golden.zst"
#define TINY "tests/fixtures/tiny-gemma3-bf16"
enum { N_SENT = 50, N_LONG = 2, DIM = 768, MAX_IDS = 1024, MAX_TOK = 1024, MAX_SEQS = 8 };

typedef EmbedGolden Golden;

static char dir[256], model[320];
static Golden *gold, *gold_long;
static char *sent[N_SENT];
static size_t sent_len[N_SENT];
static char *sent_buf;

static const char *build_dir(void) {
    const char *b = getenv("RAD_BUILD");
    return b ? b : "build";
}

/* The sanitizer build's lighter run (RAD_ORACLE_QUICK): fewer sentences, one long text. */
static int quick(void) { return getenv("RAD_ORACLE_QUICK") != NULL; }

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static Golden *load_golden(const char *path, int n_want) { return embed_golden_load(path, DIM, n_want, MAX_IDS); }

static void setup(void) {
    if (access(FOLDER "/config.json", R_OK) != 0) return; /* the oracle tests skip (make models fetches it) */
    snprintf(dir, sizeof dir, "/tmp/rad-embedgemma-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(model, sizeof model, "%s/embeddinggemma.rad", dir);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/rad-convert " FOLDER " -o %s >/dev/null", build_dir(), model);
    double t0 = now_s();
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    fprintf(stderr, "embed_gemma: rad-convert " FOLDER ": %.1f s\n", now_s() - t0);
    gold = load_golden(GOLDEN, N_SENT);
    gold_long = load_golden(GOLDEN_LONG, N_LONG);
    size_t sn;
    sent_buf = slurp(SENTENCES, &sn);
    char *s = sent_buf;
    for (int i = 0; i < N_SENT; i++) {
        char *nl = strchr(s, '\n');
        cr_assert(nl, SENTENCES ": %d lines", i);
        sent[i] = s, sent_len[i] = (size_t)(nl - s);
        s = nl + 1;
    }
}
static void teardown(void) {
    embed_golden_free(gold, N_SENT);
    embed_golden_free(gold_long, N_LONG);
    free(sent_buf);
    if (!dir[0]) return;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}
TestSuite(embed_gemma, .init = setup, .fini = teardown);

#define SKIP_UNFETCHED()                                                                                          \
    do {                                                                                                          \
        if (!dir[0]) cr_skip_test(FOLDER " not fetched (make models): the EmbeddingGemma oracle is skipped"); \
    } while (0)

static RadEngine *open_engine(const char *path, double tol, uint32_t max_seqs, uint32_t max_tok) {
    static char d[256];
    snprintf(d, sizeof d, "%s/plugins", build_dir());
    static const char *dirs[1] = {d};
    RadEngineOpts o = {.model = path, .plugin_dirs = dirs, .n_plugin_dirs = 1, .kernels = "ref", .max_tok = max_tok,
                       .max_seqs = max_seqs, .n_threads = 2, .max_tolerance = tol};
    RadEngine *en = NULL;
    RadErr e = {0};
    cr_assert_eq(rad_engine_open(&en, &o, &e), RAD_OK, "%s", e.msg);
    return en;
}

/* Encodes text with the container's tokenizer and checks the ids are the golden's. */
static int32_t *encode_checked(RadTok *tok, const char *text, size_t len, const Golden *g, const char *what, int i) {
    int32_t *ids;
    size_t n;
    RadErr e = {0};
    cr_assert_eq(rad_tok_encode(tok, text, len, 1, &ids, &n, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(n, g->n_ids, "%s %d: %zu tokens, the oracle's %u", what, i, n, g->n_ids);
    cr_assert_arr_eq(ids, g->ids, n * sizeof *ids, "%s %d: tokens differ from the oracle's", what, i);
    return ids;
}

/* The first n_sent sentences in batches of 1, 2, 3, ... 8, 1, ... against the goldens, each
 * cosine at least `bar`: the least cosine. */
static double run_oracle(const char *path, double tol, int n_sent, double bar) {
    double t0 = now_s();
    RadEngine *en = open_engine(path, tol, MAX_SEQS, MAX_TOK);
    cr_assert_eq(rad_engine_pooled_dim(en), DIM);
    RadTok *tok = NULL;
    RadErr e = {0};
    cr_assert_eq(rad_tok_init(&tok, rad_engine_tok_data(en), &e), RAD_OK, "%s", e.msg);
    int32_t *ids[N_SENT];
    RadEngineText texts[N_SENT];
    for (int i = 0; i < N_SENT; i++) {
        ids[i] = encode_checked(tok, sent[i], sent_len[i], &gold[i], "sentence", i);
        texts[i] = (RadEngineText){ids[i], gold[i].n_ids};
    }
    double t1 = now_s();
    float *out = malloc((size_t)MAX_SEQS * DIM * sizeof *out);
    double worst = 1;
    for (int i = 0, batch = 1; i < n_sent; i += batch, batch = batch % MAX_SEQS + 1) {
        int k = i + batch <= n_sent ? batch : n_sent - i;
        cr_assert_eq(rad_engine_embed(en, texts + i, (uint32_t)k, out, &e), RAD_OK, "%s", e.msg);
        for (int j = 0; j < k; j++) {
            double c = embed_cosine(out + (size_t)j * DIM, gold[i + j].v, DIM);
            cr_expect_geq(c, bar, "%s: sentence %d: cosine %.7f to sentence-transformers' (tolerance %g)", path, i + j, c, tol);
            if (c < worst) worst = c;
        }
    }
    fprintf(stderr, "embed_gemma (tolerance %g): open %.1f s, %d sentences embedded in %.1f s\n", tol, t1 - t0, n_sent,
            now_s() - t1);
    free(out);
    for (int i = 0; i < N_SENT; i++) free(ids[i]);
    rad_tok_free(tok);
    rad_engine_close(en);
    return worst;
}

Test(embed_gemma, exact_path_against_sentence_transformers) {
    SKIP_UNFETCHED();
    test_deadline(600);
    const int n = quick() ? 16 : N_SENT;
    double worst = run_oracle(model, 0, n, 0.9999);
    fprintf(stderr, "embed embeddinggemma exact: 1 - least cosine %.2e over %d sentences\n", 1 - worst, n);
}

Test(embed_gemma, fast_path_against_sentence_transformers) {
    SKIP_UNFETCHED();
    test_deadline(600);
    const int n = quick() ? 16 : N_SENT;
    double worst = run_oracle(model, 2e-2, n, 0.9999);
    fprintf(stderr, "embed embeddinggemma fast: 1 - least cosine %.2e over %d sentences\n", 1 - worst, n);
}

/* --quant q8_0 (the descriptor "ggml"): served by gemma3_ggml, the same source's quantised build.
 * q8_0 weights cost accuracy (measured: 1 - cosine 3.3e-4 exact, 1.3e-3 with the q8-activation
 * GEMMs of --fast); the bar is 0.995. */
Test(embed_gemma, q8_0_served_by_gemma3_ggml) {
    SKIP_UNFETCHED();
    test_deadline(600);
    char q8[400], cmd[1024];
    snprintf(q8, sizeof q8, "%s/embeddinggemma-q8_0.rad", dir);
    snprintf(cmd, sizeof cmd, "%s/rad-convert --quant q8_0 " FOLDER " -o %s >/dev/null", build_dir(), q8);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    RadEngine *en = open_engine(q8, 2e-2, 1, 64);
    RadErr e = {0};
    int32_t one = 2;
    cr_expect_eq(rad_engine_forward(en, 0, &one, 1, 0, 1, &e), RAD_E_UNSUPPORTED, "%s", e.msg);
    cr_expect(strstr(e.msg, "plugin 'gemma3_ggml'"), "%s", e.msg);
    rad_engine_close(en);
    const int n = quick() ? 16 : N_SENT;
    double worst = run_oracle(q8, 2e-2, n, 0.995);
    fprintf(stderr, "embed embeddinggemma q8_0 fast (gemma3_ggml): 1 - least cosine %.2e over %d sentences\n", 1 - worst, n);
}

/* Texts past the local layers' window, both in one step: the window must be transformers'. */
Test(embed_gemma, long_texts_see_transformers_window) {
    SKIP_UNFETCHED();
    test_deadline(600);
    RadEngine *en = open_engine(model, 0, 2, 2 * MAX_TOK);
    RadTok *tok = NULL;
    RadErr e = {0};
    cr_assert_eq(rad_tok_init(&tok, rad_engine_tok_data(en), &e), RAD_OK, "%s", e.msg);
    /* the texts: sentences 1..20, then 1..50, joined by one space */
    const int upto[N_LONG] = {20, 50};
    int32_t *ids[N_LONG];
    RadEngineText texts[N_LONG];
    for (int t = 0; t < N_LONG; t++) {
        char *s = malloc(8192);
        size_t n = 0;
        for (int i = 0; i < upto[t]; i++) {
            if (i) s[n++] = ' ';
            cr_assert_lt(n + sent_len[i], 8192);
            memcpy(s + n, sent[i], sent_len[i]), n += sent_len[i];
        }
        ids[t] = encode_checked(tok, s, n, &gold_long[t], "long text", t);
        texts[t] = (RadEngineText){ids[t], gold_long[t].n_ids};
        free(s);
    }
    cr_assert_gt(gold_long[0].n_ids, 257u, "the first text must pass the window");
    cr_assert_gt(gold_long[1].n_ids, 512u, "the second text must pass the checkpoint's sliding_window");
    float out[N_LONG * DIM];
    const int n_long = quick() ? 1 : N_LONG;
    double t0 = now_s();
    cr_assert_eq(rad_engine_embed(en, texts, (uint32_t)n_long, out, &e), RAD_OK, "%s", e.msg);
    double worst = 1;
    for (int t = 0; t < n_long; t++) {
        double c = embed_cosine(out + (size_t)t * DIM, gold_long[t].v, DIM);
        cr_expect_lt(1 - c, 1e-6, "long text %d (%u tokens): 1 - cosine %.3e to sentence-transformers'", t, gold_long[t].n_ids,
                     1 - c);
        if (c < worst) worst = c;
    }
    fprintf(stderr, "embed embeddinggemma %d long text(s) (%u, %u tokens) exact: 1 - least cosine %.2e (%.1f s)\n", n_long,
            gold_long[0].n_ids, gold_long[1].n_ids, 1 - worst, now_s() - t0);
    for (int t = 0; t < N_LONG; t++) free(ids[t]);
    rad_tok_free(tok);
    rad_engine_close(en);
}

/* Generation on the embedding model is refused, naming it. */
Test(embed_gemma, does_not_generate) {
    SKIP_UNFETCHED();
    test_deadline(300);
    RadEngine *en = open_engine(model, 0, 1, 64);
    cr_expect_eq(rad_engine_embed_max(en), 64u); /* max_tok here; pooling.max_tokens is 2048 */
    RadErr e = {0};
    int32_t one = 2;
    cr_expect_eq(rad_engine_forward(en, 0, &one, 1, 0, 1, &e), RAD_E_UNSUPPORTED, "%s", e.msg);
    cr_expect(strstr(e.msg, "embedding model") && strstr(e.msg, "gemma3"), "%s", e.msg);
    rad_engine_close(en);
}

/* ---- small folders from the tiny Gemma 3 (no download) ------------------------------------- */

enum { TINY_EMBD = 64, TINY_VOCAB = 320 };

static void write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fwrite(p, 1, n, f), n);
    fclose(f);
}
static void write_text(const char *path, const char *s) { write_file(path, s, strlen(s)); }

/* A one- or two-tensor safetensors file: linear.weight [out, in] (and linear.bias [out]), f32. */
static void write_linear(const char *path, uint32_t out, uint32_t in, const float *w, const float *b) {
    char h[512];
    size_t nw = (size_t)out * in * 4, nb = (size_t)out * 4;
    int k = b ? snprintf(h, sizeof h,
                         "{\"linear.weight\":{\"dtype\":\"F32\",\"shape\":[%u,%u],\"data_offsets\":[0,%zu]},"
                         "\"linear.bias\":{\"dtype\":\"F32\",\"shape\":[%u],\"data_offsets\":[%zu,%zu]}}",
                         out, in, nw, out, nw, nw + nb)
              : snprintf(h, sizeof h, "{\"linear.weight\":{\"dtype\":\"F32\",\"shape\":[%u,%u],\"data_offsets\":[0,%zu]}}", out,
                         in, nw);
    while (k % 8) h[k++] = ' ';
    uint64_t hn = (uint64_t)k;
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fwrite(&hn, 8, 1, f), 1u);
    cr_assert_eq(fwrite(h, 1, (size_t)k, f), (size_t)k);
    cr_assert_eq(fwrite(w, 4, (size_t)out * in, f), (size_t)out * in);
    if (b) cr_assert_eq(fwrite(b, 4, out, f), out);
    fclose(f);
}

/* A folder: TINY's config.json (bidirectional or not) and weights, with modules.json's modules.
 * mods: a comma-separated list of Transformer, Pooling, <k>_Dense, Normalize, or another type. */
static void make_folder(const char *path, int bidirectional, const char *mods) {
    char p[600], cwd[400], cmd[1400], json[2048];
    cr_assert_not_null(getcwd(cwd, sizeof cwd));
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s && ln -s %s/" TINY "/model.safetensors %s/model.safetensors", path, path,
             cwd, path);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    size_t n;
    char *cfg = slurp(TINY "/config.json", &n);
    char *at = strstr(cfg, "\"use_bidirectional_attention\": false");
    cr_assert_not_null(at);
    snprintf(p, sizeof p, "%s/config.json", path);
    FILE *f = fopen(p, "wb");
    cr_assert_not_null(f);
    fprintf(f, "%.*s\"use_bidirectional_attention\": %s%s", (int)(at - cfg), cfg, bidirectional ? "true" : "false",
            at + strlen("\"use_bidirectional_attention\": false"));
    fclose(f);
    free(cfg);
    if (!mods) return;
    size_t k = (size_t)snprintf(json, sizeof json, "[");
    int i = 0;
    for (const char *m = mods; *m; i++) {
        size_t l = strcspn(m, ",");
        char name[64], type[128], dpath[64] = "";
        snprintf(name, sizeof name, "%.*s", (int)l, m);
        const char *st = strstr(name, "_Dense") ? "Dense" : name; /* a module type of sentence-transformers' */
        if (!strcmp(st, "Transformer") || !strcmp(st, "Pooling") || !strcmp(st, "Dense") || !strcmp(st, "Normalize"))
            snprintf(type, sizeof type, "sentence_transformers.models.%s", st);
        else
            snprintf(type, sizeof type, "%s", name);
        if (!strcmp(st, "Pooling")) snprintf(dpath, sizeof dpath, "1_Pooling");
        if (!strcmp(st, "Dense")) snprintf(dpath, sizeof dpath, "%s", name);
        k += (size_t)snprintf(json + k, sizeof json - k, "%s{\"idx\": %d, \"name\": \"%d\", \"path\": \"%s\", \"type\": \"%s\"}",
                              i ? ", " : "", i, i, dpath, type);
        m += l + (m[l] == ',');
    }
    snprintf(json + k, sizeof json - k, "]");
    snprintf(p, sizeof p, "%s/modules.json", path);
    write_text(p, json);
    snprintf(p, sizeof p, "%s/1_Pooling", path);
    cr_assert_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/1_Pooling/config.json", path);
    write_text(p, "{\"word_embedding_dimension\": 64, \"pooling_mode_mean_tokens\": true, \"include_prompt\": true}");
}

/* A Dense module's folder under path: config.json with the activation given, and its weights as
 * model.safetensors (or, bin != 0, a pytorch_model.bin only). */
static void make_dense(const char *path, const char *name, uint32_t in, uint32_t out, int bias, const char *act, const float *w,
                       const float *b, int bin) {
    char p[600], cfg[400];
    snprintf(p, sizeof p, "%s/%s", path, name);
    cr_assert_eq(mkdir(p, 0755), 0, "%s", p);
    snprintf(cfg, sizeof cfg, "{\"in_features\": %u, \"out_features\": %u, \"bias\": %s, \"activation_function\": \"%s\"}", in, out,
             bias ? "true" : "false", act);
    snprintf(p, sizeof p, "%s/%s/config.json", path, name);
    write_text(p, cfg);
    if (bin) {
        snprintf(p, sizeof p, "%s/%s/pytorch_model.bin", path, name);
        write_text(p, "not read");
        return;
    }
    snprintf(p, sizeof p, "%s/%s/model.safetensors", path, name);
    write_linear(p, out, in, w, bias ? b : NULL);
}

/* rad-convert --no-tokenizer SRC -o OUT: its exit status, and its stderr in err. */
static int convert(const char *src, const char *out, char *err, size_t cap) {
    char cmd[1400], ef[600];
    snprintf(ef, sizeof ef, "%s.err", out);
    snprintf(cmd, sizeof cmd, "%s/rad-convert --no-tokenizer %s -o %s >/dev/null 2>%s", build_dir(), src, out, ef);
    int rc = system(cmd);
    size_t n;
    char *t = slurp(ef, &n);
    snprintf(err, cap, "%s", t);
    free(t);
    return rc;
}

static char tdir[256];
static const char *tpath(const char *name) {
    static char p[4][400];
    static int i;
    i = (i + 1) % 4;
    snprintf(p[i], sizeof p[i], "%s/%s", tdir, name);
    return p[i];
}
static void tiny_setup(void) {
    snprintf(tdir, sizeof tdir, "/tmp/rad-embedgemma-tiny-XXXXXX");
    cr_assert_not_null(mkdtemp(tdir));
}
static void tiny_teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tdir);
    cr_assert_eq(system(cmd), 0);
}
TestSuite(embed_gemma_st, .init = tiny_setup, .fini = tiny_teardown);

static const char identity[] = "torch.nn.modules.linear.Identity";

/* Two dense layers (64 -> 24 with a bias, 24 -> 16 without) and Normalize, against the plain mean
 * pooling of the same model done by hand: normalize(W1·(W0·p + b0)). */
Test(embed_gemma_st, dense_layers_on_the_pooled_row) {
    test_deadline(120);
    enum { O0 = 24, O1 = 16 };
    static float w0[O0 * TINY_EMBD], b0[O0], w1[O1 * O0];
    uint32_t r = 12345;
    for (size_t i = 0; i < sizeof w0 / sizeof *w0; i++) w0[i] = (float)((r = r * 1103515245u + 12345u) >> 8) / (1u << 24) - 0.5f;
    for (size_t i = 0; i < O0; i++) b0[i] = (float)((r = r * 1103515245u + 12345u) >> 8) / (1u << 24) - 0.5f;
    for (size_t i = 0; i < sizeof w1 / sizeof *w1; i++) w1[i] = (float)((r = r * 1103515245u + 12345u) >> 8) / (1u << 24) - 0.5f;
    char err[2048];
    make_folder(tpath("plain"), 1, "Transformer,Pooling");
    cr_assert_eq(convert(tpath("plain"), tpath("plain.rad"), err, sizeof err), 0, "%s", err);
    make_folder(tpath("dense"), 1, "Transformer,Pooling,2_Dense,3_Dense,Normalize");
    make_dense(tpath("dense"), "2_Dense", TINY_EMBD, O0, 1, identity, w0, b0, 0);
    make_dense(tpath("dense"), "3_Dense", O0, O1, 0, identity, w1, NULL, 0);
    cr_assert_eq(convert(tpath("dense"), tpath("dense.rad"), err, sizeof err), 0, "%s", err);
    /* three texts of the tiny vocabulary, one past the 8-token config's window (5 each side) */
    int32_t a[] = {2, 17, 40, 9, 1}, b[] = {2, 300, 5, 77, 81, 12, 19, 250, 6, 44, 101, 3, 1}, c[] = {2, 1};
    RadEngineText t[3] = {{a, 5}, {b, 13}, {c, 2}};
    RadEngine *pe = open_engine(tpath("plain.rad"), 0, 3, 64), *de = open_engine(tpath("dense.rad"), 0, 3, 64);
    cr_assert_eq(rad_engine_pooled_dim(pe), TINY_EMBD);
    cr_assert_eq(rad_engine_pooled_dim(de), O1);
    float p[3 * TINY_EMBD], d[3 * O1];
    RadErr e = {0};
    cr_assert_eq(rad_engine_embed(pe, t, 3, p, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_engine_embed(de, t, 3, d, &e), RAD_OK, "%s", e.msg);
    for (int s = 0; s < 3; s++) {
        double h[O0], y[O1], nn = 0;
        for (int i = 0; i < O0; i++) {
            h[i] = b0[i];
            for (int j = 0; j < TINY_EMBD; j++) h[i] += (double)w0[i * TINY_EMBD + j] * p[s * TINY_EMBD + j];
        }
        for (int i = 0; i < O1; i++) {
            y[i] = 0;
            for (int j = 0; j < O0; j++) y[i] += (double)w1[i * O0 + j] * h[j];
            nn += y[i] * y[i];
        }
        for (int i = 0; i < O1; i++) {
            double want = y[i] / sqrt(nn);
            cr_expect(fabs(d[s * O1 + i] - want) <= 1e-5, "text %d, column %d: %.7f, by hand %.7f", s, i, (double)d[s * O1 + i], want);
        }
    }
    rad_engine_close(pe);
    rad_engine_close(de);
}

/* A folder rad-convert must refuse, with a message holding `needle`. */
static void expect_refused(const char *folder, const char *needle) {
    char err[2048], out[400];
    snprintf(out, sizeof out, "%s.rad", folder);
    cr_expect_neq(convert(folder, out, err, sizeof err), 0, "%s: converted, but it should be refused (%s)", folder, needle);
    cr_expect(strstr(err, needle), "%s: the refusal does not name '%s': %s", folder, needle, err);
    cr_expect(access(out, F_OK) != 0, "%s: a refused conversion left %s", folder, out);
}

Test(embed_gemma_st, refusals_by_name) {
    test_deadline(120);
    static float w[TINY_EMBD * TINY_EMBD], b[TINY_EMBD];
    for (int i = 0; i < TINY_EMBD; i++) w[i * TINY_EMBD + i] = 1.0f;
    /* a module rad-convert does not serve */
    make_folder(tpath("ln"), 1, "Transformer,Pooling,sentence_transformers.models.LayerNorm,Normalize");
    expect_refused(tpath("ln"), "module 2 'sentence_transformers.models.LayerNorm' is not served");
    /* a Dense with an activation, and with none named (sentence-transformers' default is Tanh) */
    make_folder(tpath("tanh"), 1, "Transformer,Pooling,2_Dense");
    make_dense(tpath("tanh"), "2_Dense", TINY_EMBD, TINY_EMBD, 1, "torch.nn.modules.activation.Tanh", w, b, 0);
    expect_refused(tpath("tanh"), "activation_function 'torch.nn.modules.activation.Tanh' is not served");
    make_folder(tpath("noact"), 1, "Transformer,Pooling,2_Dense");
    make_dense(tpath("noact"), "2_Dense", TINY_EMBD, TINY_EMBD, 1, identity, w, b, 0);
    write_text(tpath("noact/2_Dense/config.json"), "{\"in_features\": 64, \"out_features\": 64, \"bias\": true}");
    expect_refused(tpath("noact"), "Tanh");
    /* a field sentence-transformers' Dense reads that is not applied */
    make_folder(tpath("resid"), 1, "Transformer,Pooling,2_Dense");
    make_dense(tpath("resid"), "2_Dense", TINY_EMBD, TINY_EMBD, 1, identity, w, b, 0);
    write_text(tpath("resid/2_Dense/config.json"),
               "{\"in_features\": 64, \"out_features\": 64, \"bias\": true, "
               "\"activation_function\": \"torch.nn.modules.linear.Identity\", \"use_residual\": true}");
    expect_refused(tpath("resid"), "use_residual true is not served");
    /* weights as pickle */
    make_folder(tpath("bin"), 1, "Transformer,Pooling,2_Dense");
    make_dense(tpath("bin"), "2_Dense", TINY_EMBD, TINY_EMBD, 1, identity, w, b, 1);
    expect_refused(tpath("bin"), "2_Dense/pytorch_model.bin (pickle)");
    /* a Dense after Normalize, or before Pooling */
    make_folder(tpath("late"), 1, "Transformer,Pooling,Normalize,2_Dense");
    make_dense(tpath("late"), "2_Dense", TINY_EMBD, TINY_EMBD, 1, identity, w, b, 0);
    expect_refused(tpath("late"), "module 3 'sentence_transformers.models.Dense' after Normalize is not served");
    make_folder(tpath("early"), 1, "Transformer,2_Dense,Pooling");
    make_dense(tpath("early"), "2_Dense", TINY_EMBD, TINY_EMBD, 1, identity, w, b, 0);
    expect_refused(tpath("early"), "module 1 'sentence_transformers.models.Dense' is not served");
    /* dense layers that do not chain: in the pipeline (rad-convert), and to the model (the plugin) */
    make_folder(tpath("chain"), 1, "Transformer,Pooling,2_Dense,3_Dense");
    make_dense(tpath("chain"), "2_Dense", TINY_EMBD, 32, 0, identity, w, NULL, 0);
    make_dense(tpath("chain"), "3_Dense", 16, 8, 0, identity, w, NULL, 0);
    expect_refused(tpath("chain"), "in_features 16, but the Dense before it (2_Dense) gives 32");
    make_folder(tpath("width"), 1, "Transformer,Pooling,2_Dense");
    make_dense(tpath("width"), "2_Dense", 32, 8, 0, identity, w, NULL, 0);
    expect_refused(tpath("width"), "pooling.dense.0.in is 32, but the pooling (model.n_embd) gives 64");
    /* a weight of the wrong shape */
    make_folder(tpath("shape"), 1, "Transformer,Pooling,2_Dense");
    make_dense(tpath("shape"), "2_Dense", TINY_EMBD, 8, 0, identity, w, NULL, 0);
    write_linear(tpath("shape/2_Dense/model.safetensors"), 8, 32, w, NULL);
    expect_refused(tpath("shape"), "tensor 'linear.weight' is not [out_features, in_features]");
    /* the embedding form needs both: bidirectional attention and a pooling */
    make_folder(tpath("causal"), 0, "Transformer,Pooling");
    expect_refused(tpath("causal"), "pooling.mode \"mean\" on a causal Gemma 3");
    make_folder(tpath("nopool"), 1, NULL);
    expect_refused(tpath("nopool"), "attention.bidirectional without pooling.mode");
}
