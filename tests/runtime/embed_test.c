/* Embeddings against the oracle: all-MiniLM-L6-v2 (models/all-MiniLM-L6-v2, a sentence-transformers
 * folder fetched by `make model`) converted by rad-convert and served by the bert plugin, against
 * sentence-transformers' own encode() of 50 committed sentences (tests/fixtures/embed: goldens from
 * scripts/gen-embed-goldens.py; each sentence encoded alone, float32). For every sentence the
 * tokens must be the golden's and the cosine >= 0.9999, on the exact path and the fast one
 * (--fast's tolerance), with the sentences embedded in batches of uneven sizes. Also: a text gives
 * the same row alone and inside a batch, and the refusals both ways (generation on an embedding
 * model, embeddings of a generation model) and of a text past the model's length. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libcommon/runtime/rad_engine.h"
#include "libcommon/tok/rad_tok.h"
#include "tests/embed_golden.h"

#define FOLDER "models/all-MiniLM-L6-v2"
#define SENTENCES "tests/fixtures/embed/sentences.txt"
#define GOLDEN "tests/fixtures/embed/minilm.golden.zst"
enum { N_SENT = 50, DIM = 384, MAX_IDS = 512 };

typedef EmbedGolden Golden;

static char dir[256], model[320];
static Golden *gold;
static char *sent[N_SENT];
static size_t sent_len[N_SENT];
static char *sent_buf;

static void load_goldens(void) {
    gold = embed_golden_load(GOLDEN, DIM, N_SENT, MAX_IDS);
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

static void setup(void) {
    if (access(FOLDER "/config.json", R_OK) != 0) return; /* the suites skip (make model fetches it) */
    const char *b = getenv("RAD_BUILD");
    snprintf(dir, sizeof dir, "/tmp/rad-embed-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(model, sizeof model, "%s/minilm.rad", dir);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/rad-convert " FOLDER " -o %s >/dev/null", b ? b : "build", model);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    load_goldens();
}
static void teardown(void) {
    embed_golden_free(gold, N_SENT);
    gold = NULL;
    free(sent_buf);
    if (!dir[0]) return;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}
TestSuite(embed, .init = setup, .fini = teardown);

#define SKIP_UNFETCHED()                                                                               \
    do {                                                                                               \
        if (!dir[0]) cr_skip_test(FOLDER " not fetched (make model): the embedding oracle is skipped"); \
    } while (0)

static RadEngine *open_engine(const char *path, double tol, uint32_t max_seqs, uint32_t max_tok) {
    const char *b = getenv("RAD_BUILD");
    static char d[256];
    snprintf(d, sizeof d, "%s/plugins", b ? b : "build");
    static const char *dirs[1] = {d};
    RadEngineOpts o = {.model = path, .plugin_dirs = dirs, .n_plugin_dirs = 1, .kernels = "ref", .max_tok = max_tok,
                       .max_seqs = max_seqs, .n_threads = 2, .max_tolerance = tol};
    RadEngine *en = NULL;
    RadErr e = {0};
    cr_assert_eq(rad_engine_open(&en, &o, &e), RAD_OK, "%s", e.msg);
    return en;
}

/* Every sentence in batches of 1, 2, 3, ... (up to max_seqs), against the goldens: the least cosine. */
static double run_oracle(double tol) {
    RadEngine *en = open_engine(model, tol, 8, 512);
    cr_assert_eq(rad_engine_pooled_dim(en), DIM);
    RadTok *tok = NULL;
    RadErr e = {0};
    cr_assert_eq(rad_tok_init(&tok, rad_engine_tok_data(en), &e), RAD_OK, "%s", e.msg);
    int32_t *ids[N_SENT];
    RadEngineText texts[N_SENT];
    for (int i = 0; i < N_SENT; i++) {
        size_t n;
        cr_assert_eq(rad_tok_encode(tok, sent[i], sent_len[i], 1, &ids[i], &n, &e), RAD_OK, "%s", e.msg);
        cr_assert_eq(n, gold[i].n_ids, "sentence %d: %zu tokens, the oracle's %u", i, n, gold[i].n_ids);
        cr_assert_arr_eq(ids[i], gold[i].ids, n * sizeof *ids[i], "sentence %d: tokens differ from the oracle's", i);
        texts[i] = (RadEngineText){ids[i], (uint32_t)n};
    }
    float out[8 * DIM];
    double worst = 1;
    for (int i = 0, batch = 1; i < N_SENT; i += batch, batch = batch % 8 + 1) {
        int k = i + batch <= N_SENT ? batch : N_SENT - i;
        cr_assert_eq(rad_engine_embed(en, texts + i, (uint32_t)k, out, &e), RAD_OK, "%s", e.msg);
        for (int j = 0; j < k; j++) {
            double c = embed_cosine(out + (size_t)j * DIM, gold[i + j].v, DIM);
            cr_expect_geq(c, 0.9999, "sentence %d: cosine %.7f to sentence-transformers' (tolerance %g)", i + j, c, tol);
            if (c < worst) worst = c;
        }
    }
    for (int i = 0; i < N_SENT; i++) free(ids[i]);
    rad_tok_free(tok);
    rad_engine_close(en);
    return worst;
}

Test(embed, exact_path_against_sentence_transformers) {
    SKIP_UNFETCHED();
    test_deadline(300);
    double worst = run_oracle(0);
    fprintf(stderr, "embed minilm exact: 1 - least cosine %.2e over %d sentences\n", 1 - worst, N_SENT);
}

Test(embed, fast_path_against_sentence_transformers) {
    SKIP_UNFETCHED();
    test_deadline(300);
    double worst = run_oracle(2e-2);
    fprintf(stderr, "embed minilm fast: 1 - least cosine %.2e over %d sentences\n", 1 - worst, N_SENT);
}

/* A text's row does not depend on what shares its step (attention and pooling stay inside a
 * sequence; libref's kernels are row-independent at one thread count). */
Test(embed, alone_equals_batched) {
    SKIP_UNFETCHED();
    test_deadline(120);
    RadEngine *en = open_engine(model, 0, 4, 512);
    RadEngineText t[3] = {{gold[5].ids, gold[5].n_ids}, {gold[0].ids, gold[0].n_ids}, {gold[17].ids, gold[17].n_ids}};
    float alone[DIM], batch[3 * DIM];
    RadErr e = {0};
    cr_assert_eq(rad_engine_embed(en, &t[1], 1, alone, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_engine_embed(en, t, 3, batch, &e), RAD_OK, "%s", e.msg);
    double c = embed_cosine(alone, batch + DIM, DIM);
    cr_expect_geq(c, 0.9999999, "alone vs batched: cosine %.9f", c);
    cr_expect_lt(embed_cosine(batch, batch + DIM, DIM), 0.99, "two different sentences came out the same");
    rad_engine_close(en);
}

Test(embed, refusals) {
    SKIP_UNFETCHED();
    test_deadline(120);
    RadEngine *en = open_engine(model, 0, 2, 512);
    RadErr e = {0};
    int32_t one = 101;
    RadEngineSeq q = {.seq_id = 0, .tokens = &one, .n = 1, .pos = 0, .want_logits = 1};
    cr_expect_eq(rad_engine_step_seqs(en, &q, 1, NULL, &e), RAD_E_UNSUPPORTED);
    cr_expect(strstr(e.msg, "embedding model") && strstr(e.msg, "bert"), "%s", e.msg);
    e = (RadErr){0};
    cr_expect_eq(rad_engine_forward(en, 0, &one, 1, 0, 1, &e), RAD_E_UNSUPPORTED, "%s", e.msg);
    /* past pooling.max_tokens (256, sentence_bert_config.json's max_seq_length) */
    cr_expect_eq(rad_engine_embed_max(en), 256);
    int32_t *lng = calloc(300, sizeof *lng);
    for (int i = 0; i < 300; i++) lng[i] = 1000 + i;
    RadEngineText t = {lng, 300};
    float out[DIM];
    e = (RadErr){0}; /* a RadErr keeps its first message */
    cr_expect_eq(rad_engine_embed(en, &t, 1, out, &e), RAD_E_LIMIT);
    cr_expect(strstr(e.msg, "256"), "%s", e.msg);
    t.n = 0;
    e = (RadErr){0};
    cr_expect_eq(rad_engine_embed(en, &t, 1, out, &e), RAD_E_SHAPE, "%s", e.msg);
    free(lng);
    rad_engine_close(en);
    /* the reverse: a generation model has no pooled output */
    char gen_rad[400], cmd[1024];
    snprintf(gen_rad, sizeof gen_rad, "%s/smollm2.rad", dir);
    snprintf(cmd, sizeof cmd, "%s/rad-convert models/SmolLM2-135M-Instruct.Q4_1.gguf -o %s >/dev/null",
             getenv("RAD_BUILD") ? getenv("RAD_BUILD") : "build", gen_rad);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    RadEngine *gen = open_engine(gen_rad, 0, 1, 64);
    cr_expect_eq(rad_engine_pooled_dim(gen), 0);
    RadEngineText g = {&one, 1};
    e = (RadErr){0};
    cr_expect_eq(rad_engine_embed(gen, &g, 1, out, &e), RAD_E_UNSUPPORTED);
    cr_expect(strstr(e.msg, "generation model"), "%s", e.msg);
    rad_engine_close(gen);
}
