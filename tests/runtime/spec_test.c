/* Speculative decoding (issue 16): prompt lookup, a draft model and verification in one step.
 *
 * - rad_spec_ngram finds the latest earlier match of the longest suffix it can.
 * - rad_sampler_verify keeps the target's distribution (a deterministic drafter, the standard
 *   rule: accept with p(d), else draw from p without d): 400k draws a case, each token's
 *   frequency within 5 standard errors of its probability, greedy exact.
 * - A verify row's logits are each token's own decode logits, bit for bit (deterministic).
 * - Through the scheduler on SmolLM2 (q4_1, libref, deterministic): greedy text with prompt
 *   lookup and with a draft model equals the target alone on eight prompts, drafts rejected and
 *   accepted along the way; rejected drafts leave nothing in the KV or the prefix cache (a
 *   request reusing a prefix published after rejections continues as it does on a fresh engine).
 * - Refusals: a depth past the engine's, a draft model with another vocabulary. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libcommon/format/rad_model.h"
#include "libcommon/runtime/rad_sched.h"
#include "libcommon/runtime/rad_spec.h"
#include "tests/test_util.h"

/* ---- prompt lookup ---------------------------------------------------------------------------- */

Test(spec, ngram_takes_the_latest_match_of_the_longest_suffix) {
    int32_t out[8];
    /* the suffix (7, 8) occurs at 1 and at 5; the latest (5) wins: 9, 4, 7, 8 follow it */
    const int32_t a[] = {6, 7, 8, 1, 2, 7, 8, 9, 4, 7, 8};
    cr_assert_eq(rad_spec_ngram(a, 11, 3, 1, 4, out), 4);
    cr_assert(out[0] == 9 && out[1] == 4 && out[2] == 7 && out[3] == 8);
    cr_assert_eq(rad_spec_ngram(a, 11, 3, 1, 2, out), 2);
    /* 3-token suffix (1, 2, 3) beats the later 1-token match of 3 */
    const int32_t b[] = {1, 2, 3, 5, 6, 3, 0, 1, 2, 3};
    cr_assert_eq(rad_spec_ngram(b, 10, 3, 1, 2, out), 2);
    cr_assert(out[0] == 5 && out[1] == 6, "%d %d", out[0], out[1]);
    /* k bounds the copy; what follows a match never runs past the end */
    cr_assert_eq(rad_spec_ngram(b, 10, 3, 1, 1, out), 1);
    const int32_t c[] = {4, 4};
    cr_assert_eq(rad_spec_ngram(c, 2, 3, 1, 4, out), 1);
    cr_assert_eq(out[0], 4);
    /* no earlier occurrence: nothing; under nmin: nothing */
    const int32_t d[] = {1, 2, 3, 4};
    cr_assert_eq(rad_spec_ngram(d, 4, 3, 1, 4, out), 0);
    cr_assert_eq(rad_spec_ngram(a, 11, 3, 3, 4, out), 0); /* (1, 7, 8)... no 3-token repeat of (4, 7, 8) */
    cr_assert_eq(rad_spec_ngram(a, 1, 3, 1, 4, out), 0);
    cr_assert_eq(rad_spec_ngram(a, 11, 3, 1, 0, out), 0);
}

/* ---- the acceptance rule ---------------------------------------------------------------------- */

enum { NV = 8 };
static const float LG[NV] = {1.0f, 3.0f, 2.9f, -1.0f, 0.5f, 2.0f, -4.0f, 0.0f};

/* The distribution rad_sampler_sample draws from, measured the same way (a reference for the
 * verified draws: both must match the softmax the parameters define). */
static void softmax_ref(const RadSamplerParams *p, double *pr) {
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < NV; i++) mx = LG[i] > mx ? LG[i] : mx;
    for (int i = 0; i < NV; i++) sum += pr[i] = exp((LG[i] - mx) / p->temperature);
    for (int i = 0; i < NV; i++) pr[i] /= sum;
    if (p->top_k == 3) { /* the three largest: 1, 2, 5 */
        double t = pr[1] + pr[2] + pr[5];
        for (int i = 0; i < NV; i++) pr[i] = (i == 1 || i == 2 || i == 5) ? pr[i] / t : 0.0;
    }
}

static void check_verify_distribution(RadSamplerParams p, int32_t draft) {
    enum { N = 400000 };
    RadSampler s;
    RadErr e = {0};
    p.seed = 12345 + (uint64_t)draft;
    cr_assert_eq(rad_sampler_init(&s, &p, NV, &e), RAD_OK, "%s", e.msg);
    double want[NV];
    softmax_ref(&p, want);
    long got[NV] = {0}, acc_n = 0;
    for (int i = 0; i < N; i++) {
        int acc;
        int32_t t = rad_sampler_verify(&s, LG, NULL, draft, &acc);
        cr_assert(t >= 0 && t < NV);
        if (acc) {
            cr_assert_eq(t, draft);
            acc_n++;
        } else {
            cr_assert_neq(t, draft, "a rejected draft was returned");
        }
        got[t]++;
    }
    for (int k = 0; k < NV; k++) {
        const double f = (double)got[k] / N, se = sqrt(want[k] * (1 - want[k]) / N) + 1e-9;
        cr_assert(fabs(f - want[k]) <= 5 * se + 1e-6, "draft %d, top_k %d: token %d drawn %.5f, p = %.5f", draft, p.top_k, k, f,
                  want[k]);
    }
    /* accepted exactly as often as p(draft) */
    const double fa = (double)acc_n / N, pd = want[draft], se = sqrt(pd * (1 - pd) / N) + 1e-9;
    cr_assert(fabs(fa - pd) <= 5 * se + 1e-6, "draft %d accepted %.5f, p = %.5f", draft, fa, pd);
    rad_sampler_free(&s);
}

Test(spec, verified_draws_keep_the_targets_distribution) {
    RadSamplerParams p = rad_sampler_defaults();
    p.temperature = 1.0f;
    for (int32_t d = 0; d < NV; d++) check_verify_distribution(p, d); /* likely, unlikely and tiny drafts */
    p.temperature = 0.7f;
    check_verify_distribution(p, 2);
    p.temperature = 1.0f, p.top_k = 3; /* a draft outside the top-k is never accepted */
    check_verify_distribution(p, 1);
    check_verify_distribution(p, 4);
}

Test(spec, greedy_verification_accepts_the_argmax_only) {
    RadSampler s;
    RadErr e = {0};
    RadSamplerParams p = rad_sampler_defaults();
    cr_assert_eq(rad_sampler_init(&s, &p, NV, &e), RAD_OK, "%s", e.msg);
    for (int32_t d = 0; d < NV; d++) {
        int acc;
        cr_assert_eq(rad_sampler_verify(&s, LG, NULL, d, &acc), 1);
        cr_assert_eq(acc, d == 1, "draft %d", d);
    }
    /* a mask that bans the argmax: the best allowed, and a banned draft is never accepted */
    uint64_t allow = 0xffu & ~(1u << 1);
    int acc;
    cr_assert_eq(rad_sampler_verify(&s, LG, &allow, 1, &acc), 2);
    cr_assert_eq(acc, 0);
    cr_assert_eq(rad_sampler_verify(&s, LG, &allow, 2, &acc), 2);
    cr_assert_eq(acc, 1);
    rad_sampler_free(&s);
}

/* ---- through the engine and the scheduler ----------------------------------------------------- */

static char dir[256], model[300];

static void setup(void) {
    const char *b = getenv("RAD_BUILD");
    snprintf(dir, sizeof dir, "/tmp/rad-spec-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(model, sizeof model, "%s/m.rad", dir);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/rad-convert models/SmolLM2-135M-Instruct.Q4_1.gguf -o %s 2>&1", b ? b : "build", model);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}
static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

static const char *const *plugin_dirs(void) {
    const char *b = getenv("RAD_BUILD");
    static char d[256];
    static const char *dirs[1] = {d};
    snprintf(d, sizeof d, "%s/plugins", b ? b : "build");
    return dirs;
}

static RadEngine *open_engine(uint32_t max_seqs, int speculate, uint32_t depth, const char *scope, double tol) {
    RadEngineOpts o = {.model = model, .plugin_dirs = plugin_dirs(), .n_plugin_dirs = 1, .kernels = "ref", .max_tok = 48,
                       .max_seqs = max_seqs, .max_ctx = 320, .n_threads = 2, .deterministic = 1, .speculate = speculate,
                       .spec_depth = depth, .scope = scope, .max_tolerance = tol};
    RadEngine *en = NULL;
    RadErr e = {0};
    cr_assert_eq(rad_engine_open(&en, &o, &e), RAD_OK, "%s", e.msg);
    return en;
}

Test(spec, a_verify_rows_logits_are_each_tokens_decode_logits, .init = setup, .fini = teardown) {
    RadEngine *en = open_engine(2, 1, 4, NULL, 0);
    cr_assert_eq(rad_engine_limits(en).max_spec, 4);
    RadErr e = {0};
    const int32_t prompt[] = {504, 3575, 282, 4649, 314}, toks[] = {5314, 30, 1012, 22, 216};
    uint32_t nv;
    /* the reference: sequence 1 decodes the five tokens one step at a time */
    cr_assert_eq(rad_engine_forward(en, 1, prompt, 5, 0, 0, &e), RAD_OK, "%s", e.msg);
    static float ref[5][49152];
    for (int j = 0; j < 5; j++) {
        cr_assert_eq(rad_engine_forward(en, 1, toks + j, 1, 5 + (uint32_t)j, 1, &e), RAD_OK, "%s", e.msg);
        const float *lg = rad_engine_logits(en, &nv);
        cr_assert_leq(nv, 49152u);
        memcpy(ref[j], lg, nv * sizeof *lg);
    }
    /* sequence 2: the same prompt, then one verify row of the token and four drafts */
    cr_assert_eq(rad_engine_forward(en, 2, prompt, 5, 0, 0, &e), RAD_OK, "%s", e.msg);
    RadEngineSeq q = {.seq_id = 2, .tokens = toks, .n = 5, .pos = 5, .n_draft = 4};
    int32_t row = -7;
    cr_assert_eq(rad_engine_step_seqs(en, &q, 1, &row, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(row, 0);
    const float *lg = rad_engine_logits(en, &nv);
    for (int j = 0; j < 5; j++) cr_assert_eq(memcmp(lg + (size_t)j * nv, ref[j], nv * sizeof *lg), 0, "row %d", j);
    /* rolled back to two of the drafts, the row past them gives the reference's again */
    rad_engine_kv_truncate(en, 2, 8);
    cr_assert_eq(rad_engine_forward(en, 2, toks + 3, 1, 8, 1, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(memcmp(rad_engine_logits(en, &nv), ref[3], nv * sizeof(float)), 0);
    /* more drafts than the engine verifies: refused, nothing run */
    RadEngineSeq big = {.seq_id = 2, .tokens = toks, .n = 5, .pos = 9, .n_draft = 5};
    cr_assert_eq(rad_engine_step_seqs(en, &big, 1, &row, &e), RAD_E_ARG);
    cr_assert(strstr(e.msg, "verify row"), "%s", e.msg);
    rad_engine_close(en);
}

typedef struct Got {
    int32_t tokens[128];
    uint32_t n_tokens, n_cached;
    RadGenFinish finish;
} Got;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void sink(void *user, const RadGenEvent *ev) {
    Got *g = user;
    pthread_mutex_lock(&mu);
    if (!ev->finish && ev->token >= 0 && g->n_tokens < 128) g->tokens[g->n_tokens++] = ev->token;
    g->n_cached = ev->n_cached;
    if (ev->finish) g->finish = ev->finish;
    pthread_mutex_unlock(&mu);
}

/* Generates greedily through a scheduler on en (speculating as so says), one request at a time. */
static void generate(RadEngine *en, const RadTok *tok, RadSchedOpts so, const int32_t *prompt, uint32_t n, uint32_t max,
                     Got *g, RadSchedStats *st) {
    RadSched *s = NULL;
    RadErr e = {0};
    so.max_seqs = 1, so.max_mixed_tok = 48;
    cr_assert_eq(rad_sched_open(&s, en, tok, &so, &e), RAD_OK, "%s", e.msg);
    RadGenReq r = {.prompt = prompt, .n_prompt = n, .sp = rad_sampler_defaults(), .max_tokens = max, .ignore_eos = 1};
    uint64_t id;
    memset(g, 0, sizeof *g);
    cr_assert_eq(rad_sched_submit(s, &r, sink, g, &id, &e), RAD_OK, "%s", e.msg);
    rad_sched_run_idle(s);
    cr_assert_eq(g->finish, RAD_FINISH_LENGTH);
    if (st) rad_sched_stats(s, st);
    rad_sched_close(s);
}

static const char *PROMPTS[] = {
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\ndef fibonacci(n):",
    "1, 2, 3, 4, 5, 6, 7, 8,",
    "Copy the list: apple, pear, plum, fig, kiwi, lime.\nThe list: apple, pear,",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "a b c d e f g a b c d e f g a b c",
    "<|im_start|>user\nRepeat after me: the quick brown fox jumps over the lazy dog.<|im_end|>\n<|im_start|>assistant\n",
    "for (int i = 0; i < n; i++) {\n    sum += a[i];\n}\nfor (int i = 0; i < n; i++) {",
};
enum { NPROMPT = 8, GEN = 40 };

static int32_t *encode(const RadTok *tok, const char *text, uint32_t *n) {
    int32_t *ids;
    size_t k;
    RadErr e = {0};
    cr_assert_eq(rad_tok_encode(tok, text, strlen(text), 1, &ids, &k, &e), RAD_OK, "%s", e.msg);
    *n = (uint32_t)k;
    return ids;
}

/* Every prompt: plain greedy, then speculated; the same tokens. Returns the summed stats. */
static RadSchedStats same_text(RadEngine *plain, RadEngine *target, const RadTok *tok, RadSchedOpts so) {
    RadSchedStats sum = {0};
    const int np = getenv("RAD_ORACLE_QUICK") ? 4 : NPROMPT;
    for (int i = 0; i < np; i++) {
        uint32_t n;
        int32_t *ids = encode(tok, PROMPTS[i], &n);
        Got want, got;
        RadSchedStats st;
        generate(plain, tok, (RadSchedOpts){0}, ids, n, GEN, &want, NULL);
        generate(target, tok, so, ids, n, GEN, &got, &st);
        free(ids);
        cr_assert_eq(got.n_tokens, want.n_tokens, "prompt %d", i);
        for (uint32_t j = 0; j < want.n_tokens; j++)
            cr_assert_eq(got.tokens[j], want.tokens[j], "prompt %d: token %u is %d, alone %d", i, j, got.tokens[j], want.tokens[j]);
        sum.spec_rows += st.spec_rows, sum.spec_drafted += st.spec_drafted, sum.spec_accepted += st.spec_accepted;
    }
    return sum;
}

Test(spec, greedy_text_with_prompt_lookup_is_the_targets, .init = setup, .fini = teardown) {
    RadEngine *plain = open_engine(1, 0, 0, NULL, 0), *target = open_engine(1, 1, 4, NULL, 0);
    RadTok *tok = NULL;
    RadErr e = {0};
    cr_assert_eq(rad_tok_init(&tok, rad_engine_tok_data(plain), &e), RAD_OK, "%s", e.msg);
    RadSchedStats st = same_text(plain, target, tok, (RadSchedOpts){.spec = RAD_SPEC_NGRAM, .spec_depth = 4});
    /* the test saw both paths: drafts accepted, and drafts rejected and rolled back */
    cr_assert_gt(st.spec_accepted, 0);
    cr_assert_gt(st.spec_drafted, st.spec_accepted, "no draft was rejected: the rollback was not exercised");
    rad_tok_free(tok);
    rad_engine_close(plain);
    rad_engine_close(target);
}

/* The draft: the same weights under --fast (activations quantised to q8): its greedy choices
 * are close to the target's exact ones, not equal. */
Test(spec, greedy_text_with_a_draft_model_is_the_targets, .init = setup, .fini = teardown) {
    RadEngine *plain = open_engine(1, 0, 0, NULL, 0), *target = open_engine(1, 1, 5, NULL, 0);
    RadEngine *draft = open_engine(1, 0, 0, "draft", 2e-2);
    RadTok *tok = NULL;
    RadErr e = {0};
    cr_assert_eq(rad_tok_init(&tok, rad_engine_tok_data(plain), &e), RAD_OK, "%s", e.msg);
    RadSchedStats st = same_text(plain, target, tok, (RadSchedOpts){.spec = RAD_SPEC_DRAFT, .spec_depth = 5, .draft = draft});
    cr_assert_gt(st.spec_accepted, 0);
    cr_assert_geq(st.spec_drafted, st.spec_accepted);
    rad_tok_free(tok);
    rad_engine_close(plain);
    rad_engine_close(target);
    rad_engine_close(draft);
}

/* A prompt whose continuation repeats drafts well and rejects often; its blocks (prompt and
 * generated) are published while drafts are rolled back. A second request's prompt is the first's
 * whole text plus a little: it starts on those cached blocks, and its continuation must be the
 * one a fresh engine gives. */
Test(spec, rejected_drafts_leave_no_trace_in_the_kv_or_the_prefix_cache, .init = setup, .fini = teardown) {
    RadEngine *target = open_engine(1, 1, 4, NULL, 0), *fresh = open_engine(1, 0, 0, NULL, 0);
    RadTok *tok = NULL;
    RadErr e = {0};
    cr_assert_eq(rad_tok_init(&tok, rad_engine_tok_data(target), &e), RAD_OK, "%s", e.msg);
    RadSched *s = NULL;
    RadSchedOpts so = {.max_seqs = 1, .max_mixed_tok = 48, .prefix_cache = 1, .spec = RAD_SPEC_NGRAM, .spec_depth = 4};
    cr_assert_eq(rad_sched_open(&s, target, tok, &so, &e), RAD_OK, "%s", e.msg);
    uint32_t n;
    int32_t *ids = encode(tok, PROMPTS[3], &n);
    RadGenReq r = {.prompt = ids, .n_prompt = n, .sp = rad_sampler_defaults(), .max_tokens = 64, .ignore_eos = 1};
    uint64_t id;
    static Got g1, g2, want;
    cr_assert_eq(rad_sched_submit(s, &r, sink, &g1, &id, &e), RAD_OK, "%s", e.msg);
    rad_sched_run_idle(s);
    RadSchedStats st;
    rad_sched_stats(s, &st);
    cr_assert_gt(st.spec_drafted, st.spec_accepted, "no rejection to roll back");
    /* the second prompt: the first's text and what it generated, then one token more */
    int32_t p2[256];
    memcpy(p2, ids, n * sizeof *ids);
    memcpy(p2 + n, g1.tokens, g1.n_tokens * sizeof *ids);
    uint32_t n2 = n + g1.n_tokens;
    p2[n2++] = 11; /* "," */
    RadGenReq r2 = {.prompt = p2, .n_prompt = n2, .sp = rad_sampler_defaults(), .max_tokens = 24, .ignore_eos = 1};
    cr_assert_eq(rad_sched_submit(s, &r2, sink, &g2, &id, &e), RAD_OK, "%s", e.msg);
    rad_sched_run_idle(s);
    cr_assert_gt(g2.n_cached, n, "the second request did not start on the first's generated blocks (%u cached)", g2.n_cached);
    rad_sched_close(s);
    generate(fresh, tok, (RadSchedOpts){0}, p2, n2, 24, &want, NULL);
    cr_assert_eq(g2.n_tokens, want.n_tokens);
    for (uint32_t j = 0; j < want.n_tokens; j++) cr_assert_eq(g2.tokens[j], want.tokens[j], "token %u", j);
    free(ids);
    rad_tok_free(tok);
    rad_engine_close(target);
    rad_engine_close(fresh);
}

Test(spec, refusals_name_the_depth_and_the_vocabulary, .init = setup, .fini = teardown) {
    RadEngine *target = open_engine(1, 1, 3, NULL, 0);
    RadTok *tok = NULL;
    RadErr e = {0};
    cr_assert_eq(rad_tok_init(&tok, rad_engine_tok_data(target), &e), RAD_OK, "%s", e.msg);
    RadSched *s = NULL;
    RadSchedOpts so = {.max_seqs = 1, .max_mixed_tok = 48, .spec = RAD_SPEC_NGRAM, .spec_depth = 4};
    cr_assert_eq(rad_sched_open(&s, target, tok, &so, &e), RAD_E_ARG);
    cr_assert(strstr(e.msg, "spec_depth 4") && strstr(e.msg, "1..3"), "%s", e.msg);
    so.spec = RAD_SPEC_DRAFT, so.spec_depth = 3; /* a draft model's speculation without its engine */
    RadErr e1 = {0};
    cr_assert_eq(rad_sched_open(&s, target, tok, &so, &e1), RAD_E_ARG);
    cr_assert(strstr(e1.msg, "draft"), "%s", e1.msg);
    /* the default: no --spec-depth and no probe depth */
    RadEngine *dflt = open_engine(1, 1, 0, NULL, 0);
    cr_assert_eq(rad_engine_limits(dflt).max_spec, RAD_SPEC_DEPTH_DEFAULT);
    rad_engine_close(dflt);
    /* a draft model with another tokenizer (Qwen2.5's, where make model fetched it) */
    const char *other = "models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
    if (access(other, R_OK) == 0) {
        RadModelFile m;
        cr_assert_eq(rad_model_open(other, &m, &e), RAD_OK, "%s", e.msg);
        RadTok *t2 = NULL;
        cr_assert_eq(rad_tok_init(&t2, &m.tok, &e), RAD_OK, "%s", e.msg);
        RadErr e2 = {0};
        cr_assert_eq(rad_spec_check_vocab(tok, t2, "--draft q.rad", &e2), RAD_E_ARG);
        cr_assert(strstr(e2.msg, "--draft q.rad") && strstr(e2.msg, "vocabulary"), "%s", e2.msg);
        rad_tok_free(t2);
        rad_model_free(&m);
    }
    RadErr e3 = {0};
    cr_assert_eq(rad_spec_check_vocab(tok, tok, "--draft same", &e3), RAD_OK, "%s", e3.msg);
    rad_tok_free(tok);
    rad_engine_close(target);
}

/* ---- the real pair, where make models fetched it --------------------------------------------- */

#define QWEN15 "models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
#define QWEN05 "models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"

static char pair_dir[256], pair_t[300], pair_d[300];
static void pair_setup(void) {
    pair_dir[0] = 0;
    if (access(QWEN15, R_OK) != 0 || access(QWEN05, R_OK) != 0 || getenv("RAD_ORACLE_QUICK")) return;
    const char *b = getenv("RAD_BUILD");
    snprintf(pair_dir, sizeof pair_dir, "/tmp/rad-spec-pair-XXXXXX");
    cr_assert_not_null(mkdtemp(pair_dir));
    snprintf(pair_t, sizeof pair_t, "%s/t.rad", pair_dir);
    snprintf(pair_d, sizeof pair_d, "%s/d.rad", pair_dir);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/rad-convert " QWEN15 " -o %s >/dev/null 2>&1 && %s/rad-convert " QWEN05 " -o %s >/dev/null 2>&1",
             b ? b : "build", pair_t, b ? b : "build", pair_d);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}
static void pair_teardown(void) {
    if (!pair_dir[0]) return;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", pair_dir);
    cr_assert_eq(system(cmd), 0);
}

/* Qwen2.5-Coder-1.5B with its 0.5B drafting, and with prompt lookup, on every benchmark prompt
 * (bench/spec/): the greedy text (32 tokens, deterministic kernels, --fast) is the target's alone. */
Test(spec, the_real_pair_keeps_the_targets_greedy_text, .init = pair_setup, .fini = pair_teardown) {
    test_deadline(900);
    if (!pair_dir[0]) cr_skip_test(QWEN15 " or " QWEN05 " not fetched (make models): the real pair is skipped");
    if (getenv("RAD_ORACLE_QUICK")) cr_skip_test("the sanitizer build (RAD_ORACLE_QUICK): the real pair is the release build's");
    RadEngineOpts o = {.plugin_dirs = plugin_dirs(), .n_plugin_dirs = 1, .kernels = "ref", .max_tok = 256, .max_seqs = 1,
                       .max_ctx = 1024, .n_threads = 2, .deterministic = 1, .max_tolerance = 2e-2};
    RadEngine *plain, *target, *draft;
    RadErr e = {0};
    o.model = pair_t;
    cr_assert_eq(rad_engine_open(&plain, &o, &e), RAD_OK, "%s", e.msg);
    o.speculate = 1, o.spec_depth = 4;
    cr_assert_eq(rad_engine_open(&target, &o, &e), RAD_OK, "%s", e.msg);
    RadTok *tok = NULL;
    cr_assert_eq(rad_tok_init(&tok, rad_engine_tok_data(plain), &e), RAD_OK, "%s", e.msg);
    RadEngineOpts to = o;
    cr_assert_eq(rad_spec_open_draft(&to, target, tok, pair_d, &draft, &e), RAD_OK, "%s", e.msg);
    static const char *names[] = {"edit-1", "edit-2", "edit-3", "edit-4", "complete-1", "complete-2", "complete-3", "complete-4"};
    RadSchedStats sum[2] = {{0}};
    for (int i = 0; i < 8; i++) {
        char path[128], text[4096];
        snprintf(path, sizeof path, "bench/spec/%s.txt", names[i]);
        FILE *f = fopen(path, "rb");
        cr_assert_not_null(f, "%s", path);
        size_t n = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        text[n] = 0;
        uint32_t np;
        int32_t *ids = encode(tok, text, &np);
        Got want, got;
        RadSchedStats st;
        generate(plain, tok, (RadSchedOpts){0}, ids, np, 32, &want, NULL);
        for (int k = 0; k < 2; k++) {
            RadSchedOpts so = {.spec = k ? RAD_SPEC_DRAFT : RAD_SPEC_NGRAM, .spec_depth = 4, .draft = k ? draft : NULL};
            generate(target, tok, so, ids, np, 32, &got, &st);
            cr_assert_eq(got.n_tokens, want.n_tokens, "%s", names[i]);
            for (uint32_t j = 0; j < want.n_tokens; j++)
                cr_assert_eq(got.tokens[j], want.tokens[j], "%s, %s: token %u", names[i], k ? "draft" : "ngram", j);
            sum[k].spec_drafted += st.spec_drafted, sum[k].spec_accepted += st.spec_accepted;
        }
        free(ids);
    }
    cr_assert_gt(sum[0].spec_accepted, 0);
    cr_assert_gt(sum[1].spec_accepted, 0);
    rad_tok_free(tok);
    rad_engine_close(draft);
    rad_engine_close(target);
    rad_engine_close(plain);
}

/* ---- sampling through the scheduler ------------------------------------------------------------ */

/* Sampled text keeps the target's distribution with drafts: a prompt whose continuation prompt
 * lookup drafts for, 3 tokens at temperature 1 with seeds 1..N, with and without drafts (the
 * prompt served from the prefix cache each time). The second token is the first a verify row
 * chooses (accepting the draft, or drawing without it); its frequencies with drafts must match
 * those without (a two-sample chi-square over the tokens seen 5 times or more, the rest pooled,
 * at p < 1e-4: the seeds are fixed, so the outcome is too). */
enum { SAMPLE_BATCH = 16 }; /* requests at once: a seed's draws do not depend on its batch (the engine is deterministic) */
static void sample_second(RadEngine *en, const RadTok *tok, RadSpecKind spec, const int32_t *ids, uint32_t n, int N, long *count,
                          uint32_t nv, RadSchedStats *st) {
    RadSched *s = NULL;
    RadErr e = {0};
    RadSchedOpts so = {.max_seqs = SAMPLE_BATCH, .max_mixed_tok = 48, .prefix_cache = 1, .spec = spec, .spec_depth = spec ? 2 : 0};
    cr_assert_eq(rad_sched_open(&s, en, tok, &so, &e), RAD_OK, "%s", e.msg);
    static Got g[SAMPLE_BATCH];
    for (int i0 = 0; i0 < N; i0 += SAMPLE_BATCH) {
        const int m = N - i0 < SAMPLE_BATCH ? N - i0 : SAMPLE_BATCH;
        memset(g, 0, sizeof g);
        for (int j = 0; j < m; j++) {
            RadGenReq r = {.prompt = ids, .n_prompt = n, .sp = rad_sampler_defaults(), .max_tokens = 3, .ignore_eos = 1};
            r.sp.temperature = 1.0f, r.sp.seed = (uint64_t)(i0 + j) + 1;
            uint64_t id;
            cr_assert_eq(rad_sched_submit(s, &r, sink, &g[j], &id, &e), RAD_OK, "%s", e.msg);
        }
        rad_sched_run_idle(s);
        for (int j = 0; j < m; j++) {
            cr_assert_eq(g[j].n_tokens, 3);
            cr_assert(g[j].tokens[1] >= 0 && (uint32_t)g[j].tokens[1] < nv);
            count[g[j].tokens[1]]++;
        }
    }
    rad_sched_stats(s, st);
    rad_sched_close(s);
}

Test(spec, sampled_text_keeps_the_targets_distribution, .init = setup, .fini = teardown) {
    test_deadline(600);
    RadEngine *en = open_engine(SAMPLE_BATCH, 1, 2, NULL, 2e-2);
    RadTok *tok = NULL;
    RadErr e = {0};
    cr_assert_eq(rad_tok_init(&tok, rad_engine_tok_data(en), &e), RAD_OK, "%s", e.msg);
    uint32_t n, nv;
    rad_engine_logits(en, &nv);
    int32_t *ids = encode(tok, "red, green, blue, red, green, blue, red, green, blue, red,", &n);
    const int N = getenv("RAD_ORACLE_QUICK") ? 120 : 1500;
    long *a = calloc(nv, sizeof *a), *b = calloc(nv, sizeof *b);
    RadSchedStats sa, sb;
    sample_second(en, tok, RAD_SPEC_NONE, ids, n, N, a, nv, &sa);
    sample_second(en, tok, RAD_SPEC_NGRAM, ids, n, N, b, nv, &sb);
    cr_assert_gt(sb.spec_rows, (uint64_t)N / 2, "the second token was drafted for in %" PRIu64 " of %d requests", sb.spec_rows, N);
    cr_assert_gt(sb.spec_accepted, 0);
    cr_assert_gt(sb.spec_drafted, sb.spec_accepted, "no draft was rejected: the residual draw was not exercised");
    /* two-sample chi-square (equal sizes): sum (a - b)^2 / (a + b) over the bins */
    double chi = 0, ra = 0, rb = 0;
    int bins = 0;
    for (uint32_t t = 0; t < nv; t++) {
        if (a[t] + b[t] >= 10) chi += (double)(a[t] - b[t]) * (a[t] - b[t]) / (double)(a[t] + b[t]), bins++;
        else ra += a[t], rb += b[t];
    }
    if (ra + rb > 0) chi += (ra - rb) * (ra - rb) / (ra + rb), bins++;
    /* the chi-square's 1 - 1e-4 quantile, by Wilson-Hilferty, for bins - 1 degrees of freedom */
    const double k = bins > 1 ? bins - 1 : 1, z = 3.719;
    const double crit = k * pow(1 - 2 / (9 * k) + z * sqrt(2 / (9 * k)), 3);
    cr_assert_lt(chi, crit, "chi-square %.1f over %d bins (critical %.1f): drafts changed the distribution", chi, bins, crit);
    free(a), free(b), free(ids);
    rad_tok_free(tok);
    rad_engine_close(en);
}
