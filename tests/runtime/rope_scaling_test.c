/* Llama 3.x rope scaling ("llama3" rope_type), from both sources, against transformers.
 *
 * tests/fixtures/rope-llama3/ (scripts/make-rope-llama3.py) holds one random-weight Llama in
 * two forms: a Hugging Face folder whose config.json has rope_scaling {rope_type llama3,
 * factor 8, low 1, high 4, original_max_position_embeddings 32}, and a GGUF of the same bf16
 * weights as llama.cpp writes it, with the scaling as rope_freqs.weight (per-pair frequency
 * divisors) and no rope.scaling.* keys; and transformers' goldens for the HF form (docs/ORACLE.md
 * format; prompts run to position 190, six times the original context). Both sources are
 * converted here and must meet the oracle bounds: teacher-forced top-1 >= 99%, mean KL <= 1e-3
 * (top-64 + rest, and exact where the fixture has full rows), the 32-token greedy continuation
 * identical. The same goldens run without the scaling must fail them (the fixture decides).
 *
 * Also: libref's rope with the freq_factors weight operand against docs/OPS.md's definition in
 * every ISA/thread state, its refusals, and the converter's refusals of a rope_freqs.weight of
 * the wrong shape and of one beside rope.scaling.type llama3.
 *
 * The model is small enough that every case runs in the sanitizer build too (no RAD_ORACLE_QUICK
 * cut). */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "abi/rad_kernels.h"
#include "libcommon/runtime/rad_engine.h"
#include "tests/oracle_golden.h"

#define FIX "tests/fixtures/rope-llama3"
#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* ---- goldens (docs/ORACLE.md) --------------------------------------------------------------- */


/* ---- converting and running ------------------------------------------------------------------- */

static char dir[256];
static const char *build_dir(void) {
    const char *b = getenv("RAD_BUILD");
    return b && *b ? b : "build";
}
static void setup(void) {
    snprintf(dir, sizeof dir, "/tmp/rad-rope-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}
static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

/* rad-convert SRC -o DIR/OUT [extra], stderr into DIR/OUT.err; returns the exit status. */
static int convert(const char *src, const char *out, const char *extra, char *model, size_t cap) {
    char cmd[1200];
    snprintf(model, cap, "%s/%s", dir, out);
    snprintf(cmd, sizeof cmd, "%s/rad-convert --no-tokenizer %s -o %s %s 2>%s.err", build_dir(), src, model, extra ? extra : "", model);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void open_engine(RadEngine **en, const char *model) {
    static char d[256];
    snprintf(d, sizeof d, "%s/plugins", build_dir());
    static const char *dirs[1] = {d};
    RadEngineOpts o = {.model = model, .plugin_dirs = dirs, .n_plugin_dirs = 1, .kernels = "ref", .max_tok = 64,
                       .max_out_rows = 64, .max_seqs = 1, .max_ctx = 512};
    RadErr e = {0};
    cr_assert_eq(rad_engine_open(en, &o, &e), RAD_OK, "%s", e.msg);
}

typedef struct Score {
    uint64_t positions, agree, full_rows, gen_cases, gen_exact;
    double kl_sum, kl_max, full_kl_sum;
} Score;

/* Log-softmax in double of one logits row. */
static void log_softmax(const float *x, uint32_t n, double *out) {
    double mx = x[0], sum = 0;
    for (uint32_t i = 1; i < n; i++) mx = fmax(mx, x[i]);
    for (uint32_t i = 0; i < n; i++) sum += exp(x[i] - mx);
    double lse = mx + log(sum);
    for (uint32_t i = 0; i < n; i++) out[i] = x[i] - lse;
}

/* Scores one case; the teacher-forced logits [n_pos, V] go to *logits_out when asked. Greedy
 * mismatches are counted, not asserted, so a caller can also expect a failure. */
static void score_case(RadEngine *en, const Case *c, Score *s, const char *name, float **logits_out) {
    uint32_t n = c->n_pos, nv;
    int32_t *seq = malloc((n + 1) * sizeof *seq);
    memcpy(seq, c->prompt, c->n_prompt * sizeof *seq);
    memcpy(seq + c->n_prompt, c->gen, (c->n_gen - 1) * sizeof *seq);
    rad_engine_logits(en, &nv);
    cr_assert_eq(nv, c->vocab, "%s: vocabulary %u vs the oracle's %u", name, nv, c->vocab);
    float *lg = malloc((size_t)n * nv * sizeof *lg);
    double *lp = malloc(nv * sizeof *lp), *rp = malloc(nv * sizeof *rp);
    RadErr e = {0};
    cr_assert_eq(rad_engine_forward_all(en, 0, seq, n, 0, lg, &e), RAD_OK, "%s: %s", name, e.msg);
    rad_engine_drop_seq(en, 0);
    for (uint32_t t = 0; t < n; t++) {
        const float *x = lg + (size_t)t * nv;
        log_softmax(x, nv, lp);
        uint32_t arg = 0;
        for (uint32_t i = 1; i < nv; i++)
            if (x[i] > x[arg]) arg = i;
        const int32_t *ids = c->top_id + (size_t)t * c->k;
        const float *tl = c->top_lp + (size_t)t * c->k;
        double kl = 0, top_mass = 0;
        for (uint32_t j = 0; j < c->k; j++) {
            double pr = exp(tl[j]);
            kl += pr * (tl[j] - lp[ids[j]]);
            top_mass += exp(lp[ids[j]]);
        }
        double rest_ref = c->rest[t], rest_ours = fmax(1.0 - top_mass, 1e-30);
        if (rest_ref > 0) kl += rest_ref * (log(rest_ref) - log(rest_ours));
        s->kl_sum += kl;
        if (kl > s->kl_max) s->kl_max = kl;
        s->agree += arg == (uint32_t)ids[0];
        s->positions++;
    }
    for (uint32_t f = 0; f < c->n_full; f++) { /* the exact KL over all V where the fixture has the row */
        uint32_t t = c->full_pos[f];
        cr_assert_lt(t, n);
        log_softmax(c->full + (size_t)f * nv, nv, rp);
        log_softmax(lg + (size_t)t * nv, nv, lp);
        double kl = 0;
        for (uint32_t i = 0; i < nv; i++) kl += exp(rp[i]) * (rp[i] - lp[i]);
        s->full_kl_sum += kl;
        s->full_rows++;
    }
    /* greedy from the prompt through the KV cache */
    cr_assert_eq(rad_engine_forward(en, 0, c->prompt, c->n_prompt, 0, 1, &e), RAD_OK, "%s", e.msg);
    uint32_t k = 0;
    int32_t tok = -1;
    for (; k < c->n_gen; k++) {
        const float *x = rad_engine_logits(en, NULL);
        uint32_t arg = 0;
        for (uint32_t i = 1; i < nv; i++)
            if (x[i] > x[arg]) arg = i;
        tok = (int32_t)arg;
        if (tok != c->gen[k] || k + 1 == c->n_gen) break;
        cr_assert_eq(rad_engine_forward(en, 0, &tok, 1, c->n_prompt + k, 1, &e), RAD_OK, "%s", e.msg);
    }
    rad_engine_drop_seq(en, 0);
    s->gen_cases++;
    s->gen_exact += k + 1 == c->n_gen && tok == c->gen[k];
    if (logits_out) *logits_out = lg;
    else free(lg);
    free(lp), free(rp), free(seq);
}

/* Every case of the MANIFEST; logits[i] ([rows[i], V])
 * per case when asked (at most 8). Returns the number of cases. */
static int run_model(const char *model, Score *s, float **logits, size_t *rows, const char *label) {
    RadEngine *en = NULL;
    open_engine(&en, model);
    FILE *mf = fopen(FIX "/MANIFEST", "r");
    cr_assert_not_null(mf);
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, mf)) {
        char fn[256], mdl[64];
        unsigned np, ng, nf;
        if (line[0] == '#' || sscanf(line, "%255s %63s %u %u %u", fn, mdl, &np, &ng, &nf) != 5) continue;
        cr_assert_lt(n, 8);
        char path[512];
        snprintf(path, sizeof path, FIX "/%s", fn);
        Case c;
        cr_assert(load_case(path, &c), "%s missing", path);
        cr_assert_eq(c.n_prompt, np, "%s: MANIFEST", fn);
        score_case(en, &c, s, fn, logits ? &logits[n] : NULL);
        if (rows) rows[n] = (size_t)c.n_pos * c.vocab;
        free(c.buf);
        n++;
    }
    fclose(mf);
    rad_engine_close(en);
    double agree = (double)s->agree / (double)s->positions, kl = s->kl_sum / (double)s->positions;
    printf("rope-llama3 %s: %" PRIu64 " positions, top-1 %.4f, mean KL %.2e (max %.2e), exact KL over %" PRIu64
           " full rows %.2e, greedy %" PRIu64 "/%" PRIu64 "\n",
           label, s->positions, agree, kl, s->kl_max, s->full_rows, s->full_kl_sum / (double)(s->full_rows ? s->full_rows : 1),
           s->gen_exact, s->gen_cases);
    return n;
}

static void assert_oracle_bounds(const Score *s, const char *label) {
    cr_assert_gt(s->gen_cases, 0);
    double agree = (double)s->agree / (double)s->positions, kl = s->kl_sum / (double)s->positions;
    cr_assert_geq(agree, 0.99, "%s: top-1 agreement %.4f", label, agree);
    cr_assert_leq(kl, 1e-3, "%s: mean KL %.3e", label, kl);
    cr_assert_leq(s->full_kl_sum / (double)s->full_rows, 1e-3, "%s: exact mean KL over the full rows", label);
    cr_assert_eq(s->gen_exact, s->gen_cases, "%s: greedy continuations identical in %" PRIu64 " of %" PRIu64 " cases",
                 label, s->gen_exact, s->gen_cases);
}

TestSuite(rope_scaling, .init = setup, .fini = teardown);

Test(rope_scaling, hf_llama3_rope_scaling_matches_transformers) {
    char model[300];
    cr_assert_eq(convert(FIX "/hf", "hf.rad", NULL, model, sizeof model), 0, "rad-convert of the HF folder failed");
    Score s = {0};
    run_model(model, &s, NULL, NULL, "HF rope_scaling");
    assert_oracle_bounds(&s, "HF rope_scaling");
}

Test(rope_scaling, gguf_rope_freqs_matches_transformers) {
    char model[300];
    cr_assert_eq(convert(FIX "/model.gguf", "gguf.rad", NULL, model, sizeof model), 0,
                 "rad-convert of the GGUF (rope_freqs.weight) failed");
    Score s = {0};
    run_model(model, &s, NULL, NULL, "GGUF rope_freqs");
    assert_oracle_bounds(&s, "GGUF rope_freqs");
}

/* The two sources reach the same frequencies by two f32 routes (transformers' formula in the
 * rope op; llama.cpp's divisors): their logits agree far inside the oracle's bounds. */
Test(rope_scaling, hf_and_gguf_containers_agree) {
    char mh[300], mg[300];
    cr_assert_eq(convert(FIX "/hf", "hf.rad", NULL, mh, sizeof mh), 0);
    cr_assert_eq(convert(FIX "/model.gguf", "gguf.rad", NULL, mg, sizeof mg), 0);
    float *lh[8] = {0}, *lgg[8] = {0};
    size_t nh[8] = {0}, ng[8] = {0};
    Score sh = {0}, sg = {0};
    int n = run_model(mh, &sh, lh, nh, "HF (for the cross-check)");
    cr_assert_eq(run_model(mg, &sg, lgg, ng, "GGUF (for the cross-check)"), n);
    double worst = 0;
    for (int i = 0; i < n; i++) {
        cr_assert_eq(nh[i], ng[i]);
        for (size_t k = 0; k < nh[i]; k++) worst = fmax(worst, fabs((double)lh[i][k] - (double)lgg[i][k]));
        free(lh[i]), free(lgg[i]);
    }
    printf("rope-llama3: HF vs GGUF container, largest logit difference %.3e\n", worst);
    cr_assert_leq(worst, 1e-3, "HF and GGUF containers differ by %.3e in a logit", worst);
}

/* The fixture decides: the same weights with the scaling dropped fail the oracle's bounds. */
Test(rope_scaling, unscaled_rope_fails_the_goldens) {
    char model[300];
    cr_assert_eq(convert(FIX "/hf", "nos.rad", "--set rope.scaling.type=none", model, sizeof model), 0);
    Score s = {0};
    run_model(model, &s, NULL, NULL, "HF without its scaling");
    double agree = (double)s.agree / (double)s.positions, kl = s.kl_sum / (double)s.positions;
    cr_assert_lt(agree, 0.9, "top-1 %.4f: the goldens do not depend on the rope scaling", agree);
    cr_assert_gt(kl, 0.1, "mean KL %.3e: the goldens do not depend on the rope scaling", kl);
    cr_assert_lt(s.gen_exact, s.gen_cases);
}

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    char *b = malloc((size_t)len + 1);
    cr_assert_eq(fread(b, 1, (size_t)len, f), (size_t)len);
    b[len] = 0;
    fclose(f);
    *n = (size_t)len;
    return b;
}

/* rope_scaling without original_max_position_embeddings: transformers takes
 * max_position_embeddings, and so does the plugin (model.n_ctx_train). The fixture's config with
 * the key renamed away and max_position_embeddings 32 is the same model, so the same goldens. */
Test(rope_scaling, llama3_original_context_defaults_to_max_position_embeddings) {
    size_t n;
    char *cfg = slurp(FIX "/hf/config.json", &n);
    char *a = strstr(cfg, "\"max_position_embeddings\": 512"), *o = strstr(cfg, "\"original_max_position_embeddings\"");
    cr_assert(a && o, "the fixture's config.json has both keys");
    memcpy(a + strlen("\"max_position_embeddings\": "), " 32", 3);
    memcpy(o + 1, "xxxxxxxx", 8); /* "xxxxxxxx_max_position_embeddings": ignored by both */
    char folder[300], path[400], cmd[800];
    snprintf(folder, sizeof folder, "%s/hf-no-orig", dir);
    cr_assert_eq(mkdir(folder, 0755), 0);
    snprintf(path, sizeof path, "%s/config.json", folder);
    FILE *f = fopen(path, "wb");
    cr_assert_eq(fwrite(cfg, 1, n, f), n);
    fclose(f);
    free(cfg);
    snprintf(cmd, sizeof cmd, "cp " FIX "/hf/model.safetensors %s/", folder);
    cr_assert_eq(system(cmd), 0);
    char model[300];
    cr_assert_eq(convert(folder, "no-orig.rad", NULL, model, sizeof model), 0);
    Score s = {0};
    run_model(model, &s, NULL, NULL, "HF rope_scaling, original context from max_position_embeddings");
    assert_oracle_bounds(&s, "HF, original context defaulted");
}

/* ---- refusals at convert time ------------------------------------------------------------------ */

static void assert_one_line_naming(const char *err_path, const char *what, const char *also) {
    size_t n;
    char *m = slurp(err_path, &n);
    cr_assert_gt(n, 0, "no message");
    cr_assert_eq(m[n - 1], '\n');
    cr_assert_null(memchr(m, '\n', n - 1), "one line, got: %s", m);
    cr_assert_not_null(strstr(m, what), "the message names %s: %s", what, m);
    if (also) cr_assert_not_null(strstr(m, also), "the message says %s: %s", also, m);
    free(m);
}

/* A GGUF whose rope_freqs.weight is [4] where the model has 8 rope pairs: the tensor-info
 * entry's ne[0] patched in a copy of the fixture (the data stays where it was). */
Test(rope_scaling, gguf_rope_freqs_wrong_shape_is_refused_by_name) {
    size_t n;
    char *b = slurp(FIX "/model.gguf", &n);
    static const char nm[] = "rope_freqs.weight";
    char *hit = NULL;
    for (size_t i = 8; i + sizeof nm + 12 < n; i++)
        if (memcmp(b + i, nm, sizeof nm - 1) == 0) {
            uint64_t len;
            memcpy(&len, b + i - 8, 8);
            if (len == sizeof nm - 1) {
                cr_assert_null(hit, "one tensor-info entry");
                hit = b + i + sizeof nm - 1;
            }
        }
    cr_assert_not_null(hit);
    uint32_t n_dims;
    uint64_t ne0;
    memcpy(&n_dims, hit, 4);
    memcpy(&ne0, hit + 4, 8);
    cr_assert_eq(n_dims, 1);
    cr_assert_eq(ne0, 8);
    ne0 = 4;
    memcpy(hit + 4, &ne0, 8);
    char src[300], model[300];
    snprintf(src, sizeof src, "%s/bad-rope-freqs.gguf", dir);
    FILE *f = fopen(src, "wb");
    cr_assert_eq(fwrite(b, 1, n, f), n);
    fclose(f);
    free(b);
    cr_assert_neq(convert(src, "bad.rad", NULL, model, sizeof model), 0, "a rope_freqs.weight of 4 for 8 pairs converted");
    char err[320];
    snprintf(err, sizeof err, "%s.err", model);
    assert_one_line_naming(err, "rope_freqs.weight", "shape");
    cr_assert_neq(access(model, F_OK), 0, "no output left behind");
}

/* Both forms of the scaling at once would apply it twice: refused, naming both. */
Test(rope_scaling, gguf_rope_freqs_beside_llama3_keys_is_refused) {
    char model[300];
    cr_assert_neq(convert(FIX "/model.gguf", "both.rad",
                          "--set rope.scaling.type=llama3 --set rope.scaling.factor=8 --set rope.scaling.low_freq_factor=1 "
                          "--set rope.scaling.high_freq_factor=4 --set rope.scaling.original_context_length=32",
                          model, sizeof model),
                  0);
    char err[320];
    snprintf(err, sizeof err, "%s.err", model);
    assert_one_line_naming(err, "rope_freqs.weight", "llama3");
    cr_assert_neq(access(model, F_OK), 0, "no output left behind");
}

/* ---- libref's rope with freq_factors ------------------------------------------------------------- */

enum { ST_BEST3, ST_BEST1, ST_GEN3, ST_GEN1, N_ST };
static void *g_dl;
static const RadKernelLib *g_lib;
static void *g_st[N_ST];

static void *init_state(const char *isa, uint32_t threads) {
    if (isa) setenv("RAD_REF_ISA", isa, 1);
    else unsetenv("RAD_REF_ISA");
    void *st = NULL;
    RadKernelLibConfig cfg = {sizeof cfg, threads, 0, 0, 1, NULL};
    cr_assert_eq(g_lib->init(&cfg, &st), RAD_OK);
    unsetenv("RAD_REF_ISA");
    return st;
}
static void load_ref(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/plugins/kern_ref.so", build_dir());
    g_dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    cr_assert(g_dl, "%s: %s", path, dlerror());
    rad_kernels_fn kern;
    void *p = dlsym(g_dl, "rad_kernels");
    cr_assert(p);
    memcpy(&kern, &p, sizeof p);
    g_lib = kern();
    g_st[ST_BEST3] = init_state(NULL, 3);
    g_st[ST_BEST1] = init_state(NULL, 1);
    g_st[ST_GEN3] = init_state("generic", 3);
    g_st[ST_GEN1] = init_state("generic", 1);
}
static void unload_ref(void) {
    for (int s = 0; s < N_ST; s++)
        if (g_st[s]) g_lib->fini(g_st[s]);
    memset(g_st, 0, sizeof g_st);
    if (g_dl) dlclose(g_dl);
    g_dl = NULL;
}
static const RadKernel *rope_kernel(void) {
    for (uint32_t i = 0; i < g_lib->n_kernels; i++) {
        const RadKernel *k = rad_kernel_at(g_lib, i);
        if (strcmp(k->op, "rope") == 0) return k;
    }
    cr_assert_fail("libref has no rope");
    return NULL;
}

typedef struct RopeCfg {
    int n_head, hd, n_rot, scaling;
    double theta, factor, lo, hi;
    int orig;
} RopeCfg;

/* One call; ff (f32/f16/bf16 [n_rot/2 or n_ff], dtype ff_t) may be NULL. */
static int rope_call(void *st, const RopeCfg *c, float *x, const int32_t *pos, int M, const void *ff, RadDType ff_t,
                     uint64_t n_ff) {
    const RadKernel *k = rope_kernel();
    RadParam p[] = {RAD_RANGE("M", M, M), RAD_INT("n_head", c->n_head), RAD_INT("head_dim", c->hd), RAD_INT("n_rot", c->n_rot),
                    RAD_FLOAT("theta", c->theta), RAD_INT("scaling", c->scaling), RAD_FLOAT("factor", c->factor),
                    RAD_FLOAT("low_freq_factor", c->lo), RAD_FLOAT("high_freq_factor", c->hi), RAD_INT("orig_ctx", c->orig)};
    RadKArg a[3];
    uint32_t na = 0;
    if (ff) a[na++] = (RadKArg){(void *)ff, ff_t, 1, n_ff, n_ff * (ff_t == RAD_F32 ? 4 : 2), {ff, NULL, NULL, NULL}};
    a[na++] = (RadKArg){x, RAD_F32, (uint64_t)M, (uint64_t)c->n_head * c->hd, (uint64_t)c->n_head * c->hd, {NULL}};
    a[na++] = (RadKArg){(void *)pos, RAD_I32, (uint64_t)M, 1, 1, {NULL}};
    size_t ws = k->workspace ? k->workspace(p, N_OF(p), M) : 0;
    void *w = ws ? aligned_alloc(256, (ws + 255) / 256 * 256) : NULL;
    RadKernelArgs ka = {sizeof ka, p, N_OF(p), M, a, na, NULL, NULL, w, st, 0, 1, NULL, 0};
    int rc = k->run(&ka);
    free(w);
    return rc;
}

/* docs/OPS.md's frequency code (none and linear here), then the divisor. */
static float ops_inv(const RopeCfg *c, int i, float f) {
    const float e = (float)(2 * i) / (float)c->n_rot;
    float inv = 1.0f / (float)pow((double)(float)c->theta, (double)e);
    if (c->scaling == 1) inv = inv / (float)c->factor;
    return inv / f;
}

static uint16_t to_bf16(float f) { /* exact for the values used (8 significant bits) */
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

static uint16_t to_f16(float f) { /* exact for the values used: normal, 8 significant bits */
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(((((u >> 23) & 0xffu) - 127u + 15u) << 10) | ((u >> 13) & 0x3ffu));
}

static uint32_t rnd_state = 12345;
static uint32_t rnd(void) {
    rnd_state = rnd_state * 1664525u + 1013904223u;
    return rnd_state >> 8;
}

Test(rope_scaling, ref_rope_freq_factors_all_states, .init = load_ref, .fini = unload_ref) {
    static const RopeCfg cfgs[] = {
        {4, 16, 16, 0, 500.0, 1, 0, 0, 0},      /* the fixture's geometry */
        {2, 128, 128, 0, 500000.0, 1, 0, 0, 0}, /* Llama 3.1 8B: 64 pairs, the AVX2 path's 8-wide blocks */
        {3, 40, 26, 0, 10000.0, 1, 0, 0, 0},    /* partial rotation, 13 pairs: an 8-block and a tail */
        {2, 32, 32, 1, 10000.0, 4, 0, 0, 0},    /* linear scaling, then the divisors */
    };
    enum { M = 37 };
    int32_t pos[M];
    for (int i = 0; i < M; i++) pos[i] = i < 5 ? i : (int32_t)(rnd() % 200000);
    for (size_t ci = 0; ci < N_OF(cfgs); ci++) {
        const RopeCfg *c = &cfgs[ci];
        const int W = c->n_head * c->hd, hf = c->n_rot / 2;
        float ff[64];
        uint16_t ffb[64], ffh[64];
        for (int i = 0; i < hf; i++) { /* llama3's three bands: 1, smoothed, factor */
            ff[i] = i < hf / 4 ? 1.0f : i < hf / 2 ? 1.0f + (float)(rnd() % 255) / 32.0f : 8.0f;
            uint32_t u;
            memcpy(&u, &ff[i], 4);
            u &= 0xffff0000u; /* bf16-exact, so the bf16 operand carries the same values */
            memcpy(&ff[i], &u, 4);
            ffb[i] = to_bf16(ff[i]);
            ffh[i] = to_f16(ff[i]);
        }
        float *x0 = malloc(sizeof(float) * M * W), *x = malloc(sizeof(float) * M * W), *x1 = malloc(sizeof(float) * M * W);
        double *ref = malloc(sizeof(double) * M * W);
        for (int i = 0; i < M * W; i++) x0[i] = (float)((int)(rnd() % 2001) - 1000) / 250.0f;
        for (int t = 0; t < M; t++)
            for (int h = 0; h < c->n_head; h++) {
                const float *v = x0 + (size_t)t * W + h * c->hd;
                double *o = ref + (size_t)t * W + h * c->hd;
                for (int d = 0; d < c->hd; d++) o[d] = v[d];
                for (int i = 0; i < hf; i++) {
                    const float a = (float)pos[t] * ops_inv(c, i, ff[i]);
                    o[i] = v[i] * cos((double)a) - v[i + hf] * sin((double)a);
                    o[i + hf] = v[i + hf] * cos((double)a) + v[i] * sin((double)a);
                }
            }
        const double tol = rope_kernel()->tolerance;
        for (int s = 0; s < N_ST; s++)
            for (int enc = 0; enc < 3; enc++) { /* the divisors as f32, bf16, f16 */
                memcpy(x, x0, sizeof(float) * M * W);
                const void *fp = enc == 0 ? (const void *)ff : enc == 1 ? (const void *)ffb : (const void *)ffh;
                cr_assert_eq(rope_call(g_st[s], c, x, pos, M, fp, enc == 0 ? RAD_F32 : enc == 1 ? RAD_BF16 : RAD_F16,
                                       (uint64_t)hf),
                             RAD_OK, "cfg %zu state %d", ci, s);
                for (int t = 0; t < M; t++) { /* RadExactness's per-row measure */
                    double err = 0, mx = 0;
                    for (int d = 0; d < W; d++) {
                        err = fmax(err, fabs(x[(size_t)t * W + d] - ref[(size_t)t * W + d]));
                        mx = fmax(mx, fabs(ref[(size_t)t * W + d]));
                    }
                    cr_assert_leq(err / (mx + 1e-6), tol, "cfg %zu state %d enc %d row %d (pos %d): %.3e", ci, s, enc, t,
                                  pos[t], err / (mx + 1e-6));
                    for (int h = 0; h < c->n_head; h++)
                        for (int d = c->n_rot; d < c->hd; d++)
                            cr_assert_eq(x[(size_t)t * W + h * c->hd + d], x0[(size_t)t * W + h * c->hd + d]);
                }
                if (s == 0 && enc == 0) memcpy(x1, x, sizeof(float) * M * W);
                else
                    cr_assert_eq(memcmp(x, x1, sizeof(float) * M * W), 0,
                                 "cfg %zu: the same bits in every state (state %d, enc %d): the AVX2 rotation is the "
                                 "portable one's arithmetic and the table is shared", ci, s, enc);
            }
        free(x0), free(x), free(x1), free(ref);
    }
}

/* Divisors of 1 give the plain rope's bits; a bad divisor or operand is refused, x untouched. */
Test(rope_scaling, ref_rope_freq_factors_refusals, .init = load_ref, .fini = unload_ref) {
    const RopeCfg c = {2, 16, 16, 0, 10000.0, 1, 0, 0, 0};
    enum { M = 5, W = 32 };
    int32_t pos[M] = {0, 1, 7, 300, 65000};
    float x0[M * W], x[M * W], y[M * W], ones[8], ff[8];
    for (int i = 0; i < M * W; i++) x0[i] = (float)((int)(rnd() % 2001) - 1000) / 250.0f;
    for (int i = 0; i < 8; i++) ones[i] = 1.0f;
    for (int s = 0; s < N_ST; s++) {
        memcpy(x, x0, sizeof x), memcpy(y, x0, sizeof y);
        cr_assert_eq(rope_call(g_st[s], &c, x, pos, M, NULL, RAD_F32, 0), RAD_OK);
        cr_assert_eq(rope_call(g_st[s], &c, y, pos, M, ones, RAD_F32, 8), RAD_OK);
        cr_assert_eq(memcmp(x, y, sizeof x), 0, "divisors of 1 change nothing (state %d)", s);
        static const float bad[] = {0.0f, -1.0f, NAN, INFINITY};
        for (size_t b = 0; b < N_OF(bad); b++) {
            for (int i = 0; i < 8; i++) ff[i] = 2.0f;
            ff[5] = bad[b];
            memcpy(y, x0, sizeof y);
            cr_assert_eq(rope_call(g_st[s], &c, y, pos, M, ff, RAD_F32, 8), RAD_E_ARG, "divisor %g", (double)bad[b]);
            cr_assert_eq(memcmp(y, x0, sizeof y), 0, "nothing written");
        }
        for (int i = 0; i < 8; i++) ff[i] = 2.0f;
        memcpy(y, x0, sizeof y);
        cr_assert_eq(rope_call(g_st[s], &c, y, pos, M, ff, RAD_F32, 4), RAD_E_SHAPE, "4 divisors for 8 pairs");
        cr_assert_eq(rope_call(g_st[s], &c, y, pos, M, ff, RAD_F32, 16), RAD_E_SHAPE, "16 divisors for 8 pairs");
        cr_assert_eq(rope_call(g_st[s], &c, y, pos, M, ff, RAD_I32, 8), RAD_E_SHAPE, "an i32 operand");
        cr_assert_eq(memcmp(y, x0, sizeof y), 0, "nothing written");
    }
    cr_assert(rope_kernel()->weight_encs & RAD_ENC_BIT(RAD_ENC_F32), "rope's layout takes the f32 divisors");
}
