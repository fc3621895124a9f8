/* Sliding-window attention against the oracle: a random-weight bf16 Mistral (window 24,
 * tests/fixtures/tiny-mistral-bf16) and transformers' goldens for it (eager attention, f32;
 * scripts/make-tiny-mistral.py, tests/fixtures/tiny-mistral-oracle) for prompts inside, at and
 * far past the window. Teacher-forced top-1 agreement >= 99% and mean KL <= 1e-3, the greedy
 * continuation identical; in one-sequence steps of several chunk sizes, and in mixed
 * continuous-batching steps of two sequences at different lengths past the window. The window
 * group's blocks are bounded: a long sequence holds at most ceil(24/16) + 1 = 3 between steps.
 * A kernel library that does not serve windows is never picked for it. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libcommon/runtime/rad_engine_int.h" /* checks internals: the window group's blocks */
#include "tests/oracle_golden.h"
#include "tests/test_util.h"

enum { WINDOW = 24, MAX_HELD = 3 /* ceil(WINDOW / 16) + 1 */ };

static char dir[256], model[320];
static void setup(void) {
    const char *b = getenv("RAD_BUILD");
    snprintf(dir, sizeof dir, "/tmp/rad-swa-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(model, sizeof model, "%s/mistral.rad", dir);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/rad-convert --no-tokenizer tests/fixtures/tiny-mistral-bf16 -o %s >/dev/null",
             b ? b : "build", model);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}
static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}
TestSuite(swa_oracle, .init = setup, .fini = teardown);

static int open_engine(RadEngine **en, const char *kernels, uint32_t max_tok, uint32_t max_seqs, RadErr *e) {
    const char *b = getenv("RAD_BUILD");
    static char d[2][256];
    snprintf(d[0], sizeof d[0], "%s/plugins", b ? b : "build");
    snprintf(d[1], sizeof d[1], "%s/test-plugins", b ? b : "build");
    static const char *dirs[2] = {d[0], d[1]};
    RadEngineOpts o = {.model = model, .plugin_dirs = dirs, .n_plugin_dirs = 2, .kernels = kernels, .max_tok = max_tok,
                       .max_out_rows = max_tok, .max_seqs = max_seqs, .max_ctx = 256};
    return rad_engine_open(en, &o, e);
}

static int n_cases;
static Case cases[8];
static void load_cases(void) {
    FILE *mf = fopen("tests/fixtures/tiny-mistral-oracle/MANIFEST", "r");
    cr_assert_not_null(mf, "tests/fixtures/tiny-mistral-oracle/MANIFEST missing");
    char line[512], fn[256], mdl[64], path[512];
    unsigned np, ng, nf;
    n_cases = 0;
    while (fgets(line, sizeof line, mf) && n_cases < 8) {
        if (line[0] == '#' || sscanf(line, "%255s %63s %u %u %u", fn, mdl, &np, &ng, &nf) != 5) continue;
        snprintf(path, sizeof path, "tests/fixtures/tiny-mistral-oracle/%s", fn);
        cr_assert(load_case(path, &cases[n_cases]), "%s missing", path);
        n_cases++;
    }
    fclose(mf);
    cr_assert_eq(n_cases, 3);
}
static void free_cases(void) {
    for (int i = 0; i < n_cases; i++) free(cases[i].buf);
}

typedef struct Score {
    uint64_t positions, agree;
    double kl_sum, kl_max;
} Score;

/* KL(oracle || ours) at position t from our logits row x, and whether the argmax agrees. */
static void score_row(const Case *c, uint32_t t, const float *x, Score *s) {
    uint32_t nv = c->vocab, arg = 0;
    double mx = x[0];
    for (uint32_t i = 1; i < nv; i++)
        if (x[i] > mx) mx = x[i], arg = i;
    double sum = 0;
    for (uint32_t i = 0; i < nv; i++) sum += exp(x[i] - mx);
    double lse = mx + log(sum), top_mass = 0, kl = 0;
    const int32_t *ids = c->top_id + (size_t)t * c->k;
    const float *lp = c->top_lp + (size_t)t * c->k;
    for (uint32_t j = 0; j < c->k; j++) {
        double ours = x[ids[j]] - lse;
        kl += exp(lp[j]) * (lp[j] - ours);
        top_mass += exp(ours);
    }
    if (c->rest[t] > 0) kl += c->rest[t] * (log(c->rest[t]) - log(fmax(1.0 - top_mass, 1e-30)));
    s->kl_sum += kl;
    if (kl > s->kl_max) s->kl_max = kl;
    s->agree += arg == (uint32_t)ids[0];
    s->positions++;
}

static uint32_t held(const RadEngine *en, int32_t seq) { return rad_kvcache_held(&en->kv[0], seq); }

static void check_score(const Score *s, const char *what) {
    double agree = (double)s->agree / (double)s->positions, kl = s->kl_sum / (double)s->positions;
    printf("swa oracle %s: %" PRIu64 " positions, top-1 %.4f, mean KL %.2e (max %.2e)\n", what, s->positions, agree, kl,
           s->kl_max);
    cr_assert_geq(agree, 0.99, "%s: top-1 agreement %.4f", what, agree);
    cr_assert_leq(kl, 1e-3, "%s: mean KL %.3e", what, kl);
}

/* One sequence: teacher-forced logits at every position, then the greedy continuation. */
static void one_sequence(uint32_t max_tok) {
    RadEngine *en = NULL;
    RadErr e = {0};
    cr_assert_eq(open_engine(&en, "ref", max_tok, 1, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(en->g.n_kvs, 1);
    cr_assert_eq(en->kv[0].window, WINDOW, "the llama plugin declares Mistral's window group");
    cr_assert_eq(en->kv[0].block_size, 16);
    Score s = {0};
    char what[64];
    for (int i = 0; i < n_cases; i++) {
        const Case *c = &cases[i];
        uint32_t n = c->n_pos, nv;
        rad_engine_logits(en, &nv);
        cr_assert_eq(nv, c->vocab);
        int32_t *seq = malloc((n + 1) * sizeof *seq);
        memcpy(seq, c->prompt, c->n_prompt * sizeof *seq);
        memcpy(seq + c->n_prompt, c->gen, (c->n_gen - 1) * sizeof *seq);
        float *lg = malloc((size_t)n * nv * sizeof *lg);
        cr_assert_eq(rad_engine_forward_all(en, 0, seq, n, 0, lg, &e), RAD_OK, "%s", e.msg);
        rad_engine_drop_seq(en, 0);
        for (uint32_t t = 0; t < n; t++) score_row(c, t, lg + (size_t)t * nv, &s);
        /* greedy: prefill, then one decode step a token; the window's blocks stay bounded */
        cr_assert_eq(rad_engine_forward(en, 0, c->prompt, c->n_prompt, 0, 1, &e), RAD_OK, "%s", e.msg);
        for (uint32_t k = 0; k < c->n_gen; k++) {
            const float *x = rad_engine_logits(en, NULL);
            int32_t arg = 0;
            for (uint32_t j = 1; j < nv; j++)
                if (x[j] > x[arg]) arg = (int32_t)j;
            cr_assert_eq(arg, c->gen[k], "case %d (%u tokens), max_tok %u: greedy token %u is %d, the oracle's %d", i,
                         c->n_prompt, max_tok, k, arg, c->gen[k]);
            if (k + 1 == c->n_gen) break;
            cr_assert_eq(rad_engine_forward(en, 0, &arg, 1, c->n_prompt + k, 1, &e), RAD_OK, "%s", e.msg);
            cr_assert_leq(held(en, 0), MAX_HELD, "%u tokens: the window group holds %u blocks", c->n_prompt + k + 1,
                          held(en, 0));
        }
        /* a step back before what the window released is refused by name, not served wrong */
        if (c->n_prompt + c->n_gen > 64) {
            int32_t t0 = 0;
            cr_assert_eq(rad_engine_forward(en, 0, &t0, 1, 3, 1, &e), RAD_E_ARG);
            cr_assert(strstr(e.msg, "released") != NULL, "%s", e.msg);
        }
        rad_engine_drop_seq(en, 0);
        cr_assert_eq(en->kv[0].n_free, en->kv[0].n_blocks, "blocks left held after the sequence was dropped");
        free(lg);
        free(seq);
    }
    snprintf(what, sizeof what, "one sequence, max_tok %u", max_tok);
    check_score(&s, what);
    rad_engine_close(en);
}

Test(swa_oracle, one_sequence_matches_transformers) {
    test_deadline(120);
    load_cases();
    one_sequence(128); /* the 150-token prompt in two chunks */
    one_sequence(7);   /* chunks shorter than the window, crossing block edges */
    free_cases();
}

/* Two sequences in the same steps (continuous batching): the 150-token case in chunks of 37
 * and the 24-token case in chunks of 11, each decoding its teacher-forced continuation once
 * its prompt is in, so steps are prefill, mixed (a decode row beside a chunk) and decode; both
 * run past the window. Every row that gets logits is scored against the oracle. */
Test(swa_oracle, mixed_batch_of_two_sequences_matches_transformers) {
    test_deadline(120);
    load_cases();
    RadEngine *en = NULL;
    RadErr e = {0};
    cr_assert_eq(open_engine(&en, "ref", 64, 2, &e), RAD_OK, "%s", e.msg);
    const Case *cs[2] = {&cases[2], &cases[1]};
    const uint32_t chunk[2] = {37, 11};
    cr_assert_eq(cs[0]->n_prompt, 150);
    cr_assert_eq(cs[1]->n_prompt, 24);
    int32_t *tok[2];
    uint32_t done[2] = {0, 0};
    for (int q = 0; q < 2; q++) {
        tok[q] = malloc((cs[q]->n_pos + 1) * sizeof *tok[q]);
        memcpy(tok[q], cs[q]->prompt, cs[q]->n_prompt * sizeof(int32_t));
        memcpy(tok[q] + cs[q]->n_prompt, cs[q]->gen, (cs[q]->n_gen - 1) * sizeof(int32_t));
    }
    Score s = {0};
    uint32_t nv, mixed = 0, both_decode = 0;
    rad_engine_logits(en, &nv);
    while (done[0] < cs[0]->n_pos || done[1] < cs[1]->n_pos) {
        RadEngineSeq sq[2];
        int which[2], n = 0;
        for (int q = 0; q < 2; q++) {
            if (done[q] >= cs[q]->n_pos) continue;
            uint32_t left = (done[q] < cs[q]->n_prompt ? cs[q]->n_prompt : cs[q]->n_pos) - done[q];
            uint32_t c = left < chunk[q] ? left : chunk[q];
            if (done[q] >= cs[q]->n_prompt) c = 1;
            sq[n] = (RadEngineSeq){.seq_id = 10 + q, .tokens = tok[q] + done[q], .n = c, .pos = done[q], .want_logits = 1};
            which[n++] = q;
        }
        mixed += n == 2 && (sq[0].n == 1) != (sq[1].n == 1);
        both_decode += n == 2 && sq[0].n == 1 && sq[1].n == 1;
        int32_t row[2];
        cr_assert_eq(rad_engine_step_seqs(en, sq, (uint32_t)n, row, &e), RAD_OK, "%s", e.msg);
        const float *lg = rad_engine_logits(en, NULL);
        for (int i = 0; i < n; i++) {
            const int q = which[i];
            done[q] += sq[i].n;
            cr_assert_geq(row[i], 0);
            score_row(cs[q], done[q] - 1, lg + (size_t)row[i] * nv, &s);
            if (done[q] > cs[q]->n_prompt) /* decoding: bounded whatever the length */
                cr_assert_leq(held(en, 10 + q), MAX_HELD, "sequence %d at %u tokens holds %u window blocks", q, done[q],
                              held(en, 10 + q));
        }
    }
    cr_assert_gt(mixed, 0, "no step mixed a decode row with a prefill chunk");
    cr_assert_gt(both_decode, 0, "no step decoded both sequences");
    cr_assert_gt(s.positions, 60);
    check_score(&s, "two sequences, mixed steps");
    for (int q = 0; q < 2; q++) free(tok[q]);
    rad_engine_close(en);
    free_cases();
}

/* kern_test's attention does not serve windows (RadKernel.attn_window 0): alone it is refused
 * by name at open; ahead of libref the selector moves on to libref's. */
Test(swa_oracle, a_kernel_without_windows_is_never_picked) {
    test_deadline(60);
    RadEngine *en = NULL;
    RadErr e = {0};
    cr_assert_neq(open_engine(&en, "kern_test", 64, 1, &e), RAD_OK);
    cr_assert(strstr(e.msg, "attn_paged") && strstr(e.msg, "sliding window"), "%s", e.msg);
    rad_err_clear(&e);
    cr_assert_eq(open_engine(&en, "kern_test,ref", 64, 1, &e), RAD_OK, "%s", e.msg);
    int n_attn = 0;
    for (int o = 0; o < en->g.n_ops; o++) {
        const RadGOp *op = &en->g.ops[o];
        if (strcmp(op->op, "attn_paged") != 0) continue;
        n_attn++;
        for (int b = 0; b < op->sel.n_buckets; b++)
            cr_assert_str_eq(en->libs[op->sel.pick_lib[b]]->info->name, "ref", "op %d bucket %d", o, b);
    }
    cr_assert_eq(n_attn, 2);
    rad_engine_close(en);
}
