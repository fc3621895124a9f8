/* A Hugging Face Gemma 3 folder against the oracle: a random-weight bf16 Gemma3ForCausalLM
 * (tests/fixtures/tiny-gemma3-bf16: head_dim 48 where hidden/heads is 32, layer_types sliding,
 * full, sliding, sliding, an 8-token window, rope bases 1e6 / 500, query_pre_attn_scalar 24,
 * norm gammas stored as w) and transformers' goldens for it (eager attention, f32;
 * scripts/make-tiny-gemma3.py, tests/fixtures/tiny-gemma3-oracle) for prompts of 5, 8 and 60
 * tokens. rad-convert maps it through the gemma3 plugin's Hugging Face names, adding the 1 to every
 * norm gamma; served by gemma3 (not gemma3_ggml), the exact path must agree at every
 * teacher-forced position (top-1 1.0) and give the oracle's greedy continuations, in steps of
 * several chunk sizes (shorter than the window and not). */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libcommon/runtime/rad_engine_int.h" /* checks internals: the KV groups, the layers' binding */
#include "tests/oracle_golden.h"
#include "tests/test_util.h"

#define FOLDER "tests/fixtures/tiny-gemma3-bf16"
#define GOLDEN "tests/fixtures/tiny-gemma3-oracle"
enum { WINDOW = 8, LAYERS = 4, HEAD_DIM = 48 };
static const int GLOBAL[LAYERS] = {0, 1, 0, 0}; /* the config's layer_types */

static char dir[256], model[320];
static void setup(void) {
    const char *b = getenv("RAD_BUILD");
    snprintf(dir, sizeof dir, "/tmp/rad-gemma3hf-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(model, sizeof model, "%s/gemma3.rad", dir);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/rad-convert --no-tokenizer " FOLDER " -o %s >/dev/null", b ? b : "build", model);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}
static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}
TestSuite(gemma3_hf, .init = setup, .fini = teardown);

static void open_engine(RadEngine **en, uint32_t max_tok) {
    const char *b = getenv("RAD_BUILD");
    static char d[256];
    snprintf(d, sizeof d, "%s/plugins", b ? b : "build");
    static const char *dirs[1] = {d};
    RadEngineOpts o = {.model = model, .plugin_dirs = dirs, .n_plugin_dirs = 1, .kernels = "ref", .max_tok = max_tok,
                       .max_out_rows = max_tok, .max_seqs = 1, .max_ctx = 256};
    RadErr e = {0};
    cr_assert_eq(rad_engine_open(en, &o, &e), RAD_OK, "%s", e.msg);
}

static int n_cases;
static Case cases[4];
static void load_cases(void) {
    FILE *mf = fopen(GOLDEN "/MANIFEST", "r");
    cr_assert_not_null(mf, GOLDEN "/MANIFEST missing");
    char line[512], fn[256], mdl[64], path[512];
    unsigned np, ng, nf;
    n_cases = 0;
    while (fgets(line, sizeof line, mf) && n_cases < 4) {
        if (line[0] == '#' || sscanf(line, "%255s %63s %u %u %u", fn, mdl, &np, &ng, &nf) != 5) continue;
        snprintf(path, sizeof path, GOLDEN "/%s", fn);
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

/* The graph the folder declares: the gemma3 plugin, a WINDOW group of 8 for the local layers and a
 * FULL one for the global layer, as layer_types lists them (not every 6th), head_dim 48. */
Test(gemma3_hf, served_by_gemma3_with_the_configs_layers) {
    test_deadline(60);
    RadEngine *en = NULL;
    open_engine(&en, 16);
    cr_assert_str_eq(en->arch->info->name, "gemma3");
    cr_assert_eq(en->g.n_kvs, 2);
    int local = -1, global = -1;
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(en->g.kvs[i].d.head_dim, HEAD_DIM, "head_dim %u: not the config's", en->g.kvs[i].d.head_dim);
        if (en->g.kvs[i].d.kind == RAD_KV_WINDOW) local = i;
        if (en->g.kvs[i].d.kind == RAD_KV_FULL) global = i;
    }
    cr_assert(local >= 0 && global >= 0, "a WINDOW and a FULL group");
    cr_assert_eq(en->g.kvs[local].d.window, WINDOW);
    cr_assert_eq(en->g.n_layer_kv, LAYERS);
    for (int l = 0; l < LAYERS; l++)
        cr_assert_eq(en->g.layer_kv[l], GLOBAL[l] ? global : local, "layer %d bound to group %d", l, en->g.layer_kv[l]);
    rad_engine_close(en);
}

/* The container's norm gammas are 1 + w of the folder's bf16 w, in f32 (the name map's add). */
Test(gemma3_hf, norm_gammas_hold_one_plus_w) {
    RadModelFile c, h;
    RadErr e = {0};
    cr_assert_eq(rad_model_open(model, &c, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_model_open(FOLDER, &h, &e), RAD_OK, "%s", e.msg);
    static const char *const pairs[][2] = {
        {"output_norm.weight", "model.norm.weight"},
        {"blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight"},
        {"blk.3.attn_q_norm.weight", "model.layers.3.self_attn.q_norm.weight"},
        {"blk.2.post_ffw_norm.weight", "model.layers.2.post_feedforward_layernorm.weight"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        const RadTensor *g = rad_model_find(&c, pairs[i][0]), *w = rad_model_find(&h, pairs[i][1]);
        cr_assert(g && w, "%s / %s", pairs[i][0], pairs[i][1]);
        cr_assert_eq(g->enc, RAD_ENC_F32, "%s", pairs[i][0]);
        cr_assert_eq(w->enc, RAD_ENC_BF16, "%s", pairs[i][1]);
        cr_assert_eq(g->shape[0], w->shape[0]);
        for (uint64_t j = 0; j < g->shape[0]; j++) {
            float gj, wj;
            uint16_t b;
            memcpy(&gj, (const uint8_t *)g->planes[0].data + 4 * j, 4);
            memcpy(&b, (const uint8_t *)w->planes[0].data + 2 * j, 2);
            uint32_t u = (uint32_t)b << 16;
            memcpy(&wj, &u, 4);
            cr_assert_eq(gj, 1.0f + wj, "%s[%" PRIu64 "]: %a, not 1 + %a", pairs[i][0], j, gj, wj);
        }
    }
    rad_model_free(&c);
    rad_model_free(&h);
}

/* One sequence: teacher-forced logits at every position, then the greedy continuation. */
static void one_sequence(uint32_t max_tok) {
    RadEngine *en = NULL;
    RadErr e = {0};
    open_engine(&en, max_tok);
    Score s = {0};
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
        }
        rad_engine_drop_seq(en, 0);
        free(lg);
        free(seq);
    }
    double agree = (double)s.agree / (double)s.positions, kl = s.kl_sum / (double)s.positions;
    printf("gemma3 hf oracle, max_tok %u: %" PRIu64 " positions, top-1 %.4f, mean KL %.2e (max %.2e), greedy %d/%d\n",
           max_tok, s.positions, agree, kl, s.kl_max, n_cases, n_cases);
    cr_assert_eq(s.agree, s.positions, "top-1 agreement %.4f, not 1", agree);
    cr_assert_leq(kl, 1e-6, "mean KL %.3e", kl);
    rad_engine_close(en);
}

Test(gemma3_hf, matches_transformers) {
    test_deadline(120);
    load_cases();
    one_sequence(128); /* the 91-token case in one step */
    one_sequence(3);   /* chunks shorter than the window */
    free_cases();
}
