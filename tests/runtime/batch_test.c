/* Multi-sequence steps (rad_engine_step_seqs) on libref with the tiny bf16 Llama: a mixed step
 * of decode rows and prefill chunks gives every sequence the logits it gets alone, bit for bit
 * in deterministic mode; refusals leave the cache as it was. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/runtime/rad_engine.h"

static char dir[256], model[300];

static void setup(void) {
    const char *b = getenv("RAD_BUILD");
    snprintf(dir, sizeof dir, "/tmp/rad-batch-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(model, sizeof model, "%s/tiny.rad", dir);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/rad-convert --no-tokenizer tests/fixtures/tiny-llama-bf16 -o %s 2>&1", b ? b : "build", model);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}
static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

static void open_engine(RadEngine **en, int deterministic, uint32_t max_seqs, uint32_t kv_blocks) {
    const char *b = getenv("RAD_BUILD");
    static char d[256];
    snprintf(d, sizeof d, "%s/plugins", b ? b : "build");
    static const char *dirs[1] = {d};
    RadEngineOpts o = {.model = model, .plugin_dirs = dirs, .n_plugin_dirs = 1, .kernels = "ref", .max_tok = 64,
                       .max_seqs = max_seqs, .max_ctx = 128, .n_threads = 2, .deterministic = deterministic,
                       .kv_blocks = kv_blocks};
    RadErr e = {0};
    cr_assert_eq(rad_engine_open(en, &o, &e), RAD_OK, "%s", e.msg);
}

/* Token ids from a fixed generator (vocab 384). */
static void ids(int32_t *out, int n, unsigned seed) {
    for (int i = 0; i < n; i++) seed = seed * 1103515245u + 12345u, out[i] = (int32_t)(3 + (seed >> 8) % 380);
}

/* Four sequences: after a first step, their next parts form one mixed step (two decode rows,
 * a prefill continuation and a fresh prompt), given in an order that puts prefill first. */
enum { NS = 4 };
static const uint32_t first[NS] = {9, 5, 0, 12}, second[NS] = {6, 1, 7, 1};

static void run_batched(RadEngine *en, int32_t tok[NS][32], float *out[NS], uint32_t nv) {
    RadErr e = {0};
    RadEngineSeq s[NS];
    int32_t row[NS];
    uint32_t n = 0;
    for (int i = 0; i < NS; i++)
        if (first[i]) s[n++] = (RadEngineSeq){.seq_id = 100 + i, .tokens = tok[i], .n = first[i], .want_logits = 0};
    cr_assert_eq(rad_engine_step_seqs(en, s, n, row, &e), RAD_OK, "%s", e.msg);
    for (int i = 0; i < NS; i++)
        s[i] = (RadEngineSeq){.seq_id = 100 + i, .tokens = tok[i] + first[i], .n = second[i], .pos = first[i], .want_logits = 1};
    cr_assert_eq(rad_engine_step_seqs(en, s, NS, row, &e), RAD_OK, "%s", e.msg);
    const float *lg = rad_engine_logits(en, NULL);
    for (int i = 0; i < NS; i++) {
        cr_assert_geq(row[i], 0);
        memcpy(out[i], lg + (size_t)row[i] * nv, nv * sizeof(float));
    }
}

static void run_alone(int deterministic, int32_t tok[NS][32], float *out[NS], uint32_t nv) {
    for (int i = 0; i < NS; i++) {
        RadEngine *en = NULL;
        open_engine(&en, deterministic, 1, 0);
        RadErr e = {0};
        cr_assert_eq(rad_engine_forward(en, 7, tok[i], first[i] + second[i], 0, 1, &e), RAD_OK, "%s", e.msg);
        memcpy(out[i], rad_engine_logits(en, NULL), nv * sizeof(float));
        rad_engine_close(en);
    }
}

static void compare(int deterministic) {
    int32_t tok[NS][32];
    for (int i = 0; i < NS; i++) ids(tok[i], 32, 11u * (unsigned)i + 5u);
    RadEngine *en = NULL;
    open_engine(&en, deterministic, 8, 0);
    uint32_t nv;
    rad_engine_logits(en, &nv);
    float *a[NS], *b[NS];
    for (int i = 0; i < NS; i++) a[i] = malloc(nv * sizeof(float)), b[i] = malloc(nv * sizeof(float));
    run_batched(en, tok, a, nv);
    rad_engine_close(en);
    run_alone(deterministic, tok, b, nv);
    for (int i = 0; i < NS; i++) {
        for (uint32_t v = 0; v < nv; v++) {
            if (deterministic)
                cr_assert(memcmp(&a[i][v], &b[i][v], sizeof(float)) == 0, "sequence %d logit %u: %.9g batched vs %.9g alone", i,
                          v, a[i][v], b[i][v]);
            else
                cr_assert_float_eq(a[i][v], b[i][v], 1e-4, "sequence %d logit %u: %g batched vs %g alone", i, v, a[i][v], b[i][v]);
        }
        free(a[i]), free(b[i]);
    }
}

TestSuite(batch, .init = setup, .fini = teardown);

Test(batch, a_mixed_step_gives_each_sequence_its_own_logits) { compare(0); }

Test(batch, deterministic_mode_is_batch_invariant_bit_for_bit) { compare(1); }

Test(batch, refusals_name_the_problem_and_take_nothing) {
    RadEngine *en = NULL;
    open_engine(&en, 0, 2, 3); /* 3 blocks of the attention kernel's size */
    int32_t tok[80];
    ids(tok, 80, 3);
    RadErr e = {0};
    int32_t row[3];
    uint32_t free0 = rad_engine_kv_free_blocks(en);
    RadEngineSeq s[3] = {{.seq_id = 1, .tokens = tok, .n = 4}, {.seq_id = 1, .tokens = tok, .n = 2}, {.seq_id = 2, .tokens = tok, .n = 1}};
    cr_assert_eq(rad_engine_step_seqs(en, s, 2, row, &e), RAD_E_ARG);
    cr_assert(strstr(e.msg, "twice") != NULL, "%s", e.msg);
    s[1].seq_id = 3;
    s[1].n = 0;
    rad_err_clear(&e);
    cr_assert_eq(rad_engine_step_seqs(en, s, 2, row, &e), RAD_E_SHAPE);
    cr_assert(strstr(e.msg, "zero tokens") != NULL, "%s", e.msg);
    s[1].n = 2;
    rad_err_clear(&e);
    cr_assert_eq(rad_engine_step_seqs(en, s, 3, row, &e), RAD_E_LIMIT); /* max_seqs 2 */
    cr_assert(strstr(e.msg, "max_seqs") != NULL, "%s", e.msg);
    RadEngineSeq big = {.seq_id = 4, .tokens = tok, .n = 65};
    rad_err_clear(&e);
    cr_assert_eq(rad_engine_step_seqs(en, &big, 1, row, &e), RAD_E_LIMIT); /* max_tok 64 */
    cr_assert(strstr(e.msg, "max_tok") != NULL, "%s", e.msg);
    cr_assert_eq(rad_engine_kv_free_blocks(en), free0, "a refused step took KV blocks");
    /* more blocks than the pool has: refused, and the sequence's slot is given back */
    RadEngineKvStats kv;
    rad_engine_kv_stats(en, &kv);
    uint32_t bs = kv.block_size;
    if (3 * bs + 1 <= 64) {
        RadEngineSeq over = {.seq_id = 5, .tokens = tok, .n = 3 * bs + 1};
        rad_err_clear(&e);
        cr_assert_eq(rad_engine_step_seqs(en, &over, 1, row, &e), RAD_E_LIMIT);
        cr_assert(strstr(e.msg, "KV cache full") != NULL, "%s", e.msg);
        cr_assert_eq(rad_engine_kv_free_blocks(en), free0);
    }
    /* the engine still serves a step after the refusals */
    RadEngineSeq ok = {.seq_id = 6, .tokens = tok, .n = 3, .want_logits = 1};
    rad_err_clear(&e);
    cr_assert_eq(rad_engine_step_seqs(en, &ok, 1, row, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(row[0], 0);
    rad_engine_close(en);
}
