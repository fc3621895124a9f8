/* The engine under a tuning table (docs/TUNE.md) on SmolLM2 (q4_1, libref): a table that
 * names libref's exact GEMMs where --fast's default rule picks q8act is followed (the picks in
 * the engine's tables, in --debug-graph), and the greedy text is then the exact path's; a stale
 * entry falls back to the default rule with its reason; a knob set to its default changes no
 * bit; a table keyed for another container or library version is refused by name. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libcommon/runtime/rad_engine_int.h" /* checks the picks */
#include "tests/test_util.h"

static char dir[256], model[300], tpath[300];

static void setup(void) {
    const char *b = getenv("RAD_BUILD");
    snprintf(dir, sizeof dir, "/tmp/rad-tune-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(model, sizeof model, "%s/m.rad", dir);
    snprintf(tpath, sizeof tpath, "%s/m.tune", dir);
    char cmd[800];
    snprintf(cmd, sizeof cmd, "%s/rad-convert models/SmolLM2-135M-Instruct.Q4_1.gguf -o %s >/dev/null", b ? b : "build", model);
    cr_assert_eq(system(cmd), 0);
}
static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

static int open_with(RadEngine **en, double tol, const char *tune, int ignore, RadErr *e) {
    const char *b = getenv("RAD_BUILD");
    static char d[256];
    snprintf(d, sizeof d, "%s/plugins", b ? b : "build");
    static const char *dirs[1] = {d};
    RadEngineOpts o = {.model = model, .plugin_dirs = dirs, .n_plugin_dirs = 1, .kernels = "ref", .max_tok = 64,
                       .max_seqs = 1, .max_ctx = 256, .n_threads = 2, .max_tolerance = tol, .tune = tune,
                       .tune_ignore_mismatch = ignore};
    memset(e, 0, sizeof *e); /* the first error a RadErr meets is the one it keeps */
    return rad_engine_open(en, &o, e);
}

static void greedy(RadEngine *en, int32_t *out, int n) {
    static const int32_t prompt[] = {1, 504, 3458, 282, 4649, 314}; /* any ids: the same for both runs */
    RadErr e = {0};
    uint32_t nv = 0;
    cr_assert_eq(rad_engine_forward(en, 0, prompt, 6, 0, 1, &e), RAD_OK, "%s", e.msg);
    for (int k = 0; k < n; k++) {
        const float *x = rad_engine_logits(en, &nv);
        uint32_t arg = 0;
        for (uint32_t i = 1; i < nv; i++)
            if (x[i] > x[arg]) arg = i;
        out[k] = (int32_t)arg;
        cr_assert_eq(rad_engine_forward(en, 0, &out[k], 1, 6 + (uint32_t)k, 1, &e), RAD_OK, "%s", e.msg);
    }
    rad_engine_drop_seq(en, 0);
}

static char *dump_graph(const RadEngine *en) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    rad_engine_dump_graph(en, f);
    fclose(f);
    return buf;
}

static int is_gemm(const char *op) { return strncmp(op, "gemm_nt", 7) == 0 || strcmp(op, "logits_gemm") == 0; }

/* A table of en's key with every GEMM bucket on `variant` (knobs: "" none; else K:V pairs). */
static void write_table(const RadEngine *en, const char *variant, const char *knob, int64_t val, RadTuneTable *t) {
    memset(t, 0, sizeof *t);
    rad_engine_tune_key(en, &t->key);
    RadErr e = {0};
    for (int o = 0; o < en->g.n_ops; o++) {
        const RadGOp *op = &en->g.ops[o];
        if (!is_gemm(op->op) || op->declined) continue;
        for (int b = 0; b < op->sel.n_buckets; b++) {
            RadTuneEntry x = {.op = o, .params = rad_tune_params_hash(op->op, op->params, op->n_params), .lo = op->sel.lo[b],
                              .hi = b + 1 < op->sel.n_buckets ? op->sel.lo[b + 1] - 1 : op->sel.range_hi, .ns = 1000};
            snprintf(x.name, sizeof x.name, "%s", op->op);
            snprintf(x.lib, sizeof x.lib, "ref");
            snprintf(x.variant, sizeof x.variant, "%s", variant);
            if (knob) {
                x.n_knobs = 1;
                snprintf(x.knob[0], sizeof x.knob[0], "%s", knob);
                x.val[0] = val;
            }
            cr_assert_eq(rad_tune_add(t, &x, &e), RAD_OK, "%s", e.msg);
        }
    }
    cr_assert_eq(rad_tune_write_file(t, tpath, &e), RAD_OK, "%s", e.msg);
}

Test(tune_engine, table_picks_exact_under_fast, .init = setup, .fini = teardown) {
    test_deadline(300);
    RadEngine *exact, *fast, *tuned;
    RadErr e = {0};
    enum { N = 24 };
    int32_t want[N], got[N], fast_out[N];
    cr_assert_eq(open_with(&exact, 0, NULL, 0, &e), RAD_OK, "%s", e.msg);
    greedy(exact, want, N);
    rad_engine_close(exact);
    cr_assert_eq(open_with(&fast, 2e-2, NULL, 0, &e), RAD_OK, "%s", e.msg);
    int q8 = 0;
    for (int o = 0; o < fast->g.n_ops; o++)
        if (is_gemm(fast->g.ops[o].op) && fast->g.ops[o].sel.pick[0]) q8 += strcmp(fast->g.ops[o].sel.pick[0]->variant, "q8act") == 0;
    cr_assert_gt(q8, 0, "--fast's default rule picks q8act");
    greedy(fast, fast_out, N);
    RadTuneTable t;
    write_table(fast, "exact", NULL, 0, &t);
    rad_engine_close(fast);
    cr_assert_eq(open_with(&tuned, 2e-2, tpath, 0, &e), RAD_OK, "%s", e.msg);
    cr_assert_not_null(tuned->tune);
    int picked = 0;
    for (int o = 0; o < tuned->g.n_ops; o++) {
        const RadGOp *op = &tuned->g.ops[o];
        if (!is_gemm(op->op) || op->declined) continue;
        for (int b = 0; b < op->sel.n_buckets; b++) {
            cr_assert_str_eq(op->sel.pick[b]->variant, "exact", "op %d bucket %d: the table's pick", o, b);
            cr_assert_gt(op->sel.tune_line[b], 0);
            picked++;
        }
    }
    cr_assert_eq(picked, t.n);
    char *g = dump_graph(tuned);
    cr_assert(strstr(g, "tuning table "), "%s", g);
    cr_assert(strstr(g, "ref:exact (from the table, line 7)"), "--debug-graph says the choice came from the table");
    free(g);
    greedy(tuned, got, N);
    cr_assert_eq(memcmp(got, want, sizeof want), 0, "under the table, --fast's greedy text is the exact path's");
    rad_engine_close(tuned);
    (void)fast_out;
    rad_tune_free(&t);
}

Test(tune_engine, stale_entry_falls_back, .init = setup, .fini = teardown) {
    test_deadline(300);
    RadEngine *fast, *tuned;
    RadErr e = {0};
    cr_assert_eq(open_with(&fast, 2e-2, NULL, 0, &e), RAD_OK, "%s", e.msg);
    RadTuneTable t;
    write_table(fast, "tile9", NULL, 0, &t); /* a variant libref does not have */
    char *want = dump_graph(fast);
    rad_engine_close(fast);
    cr_assert_eq(open_with(&tuned, 2e-2, tpath, 0, &e), RAD_OK, "%s", e.msg);
    for (int o = 0; o < tuned->g.n_ops; o++) {
        const RadGOp *op = &tuned->g.ops[o];
        if (!is_gemm(op->op) || op->declined) continue;
        cr_assert_str_eq(op->sel.pick[0]->variant, "q8act", "op %d: the default rule", o);
        cr_assert_eq(op->sel.tune_line[0], 0);
    }
    char *g = dump_graph(tuned);
    cr_assert(strstr(g, "ref:q8act (default rule: table line 7 (ref:tile9) skipped: library 'ref' has no kernel gemm_nt3:tile9)") ||
                  strstr(g, "(default rule: table line 7 (ref:tile9) skipped: library 'ref' has no kernel"),
              "%s", g);
    free(g), free(want);
    rad_engine_close(tuned);
    /* a value the knob does not take: skipped too, naming it */
    cr_assert_eq(open_with(&fast, 2e-2, NULL, 0, &e), RAD_OK, "%s", e.msg);
    rad_tune_free(&t);
    write_table(fast, "q8act", "prefetch", 5000, &t);
    rad_engine_close(fast);
    cr_assert_eq(open_with(&tuned, 2e-2, tpath, 0, &e), RAD_OK, "%s", e.msg);
    g = dump_graph(tuned);
    cr_assert(strstr(g, "skipped: 5000 is not a value of knob 'prefetch'"), "%s", g);
    free(g);
    rad_engine_close(tuned);
    rad_tune_free(&t);
}

/* A knob set to its default is today's output bit for bit; a non-default SAME_BITS knob too. */
Test(tune_engine, knob_defaults_same_bits, .init = setup, .fini = teardown) {
    test_deadline(300);
    RadEngine *fast, *tuned;
    RadErr e = {0};
    enum { N = 12 };
    cr_assert_eq(open_with(&fast, 2e-2, NULL, 0, &e), RAD_OK, "%s", e.msg);
    static const int32_t ids[] = {1, 504, 3458, 282, 4649, 314, 30, 2};
    const uint32_t nv = rad_engine_meta(fast)->n_vocab;
    float *base = malloc(sizeof(float) * nv), *got = malloc(sizeof(float) * nv);
    cr_assert_eq(rad_engine_forward(fast, 0, ids, 8, 0, 1, &e), RAD_OK, "%s", e.msg);
    memcpy(base, rad_engine_logits(fast, NULL), sizeof(float) * nv);
    rad_engine_drop_seq(fast, 0);
    static const struct {
        const char *knob;
        int64_t v;
    } cases[] = {{"prefetch", 6144}, {"threads", 0}, {"threads", 1}, {"prefetch", 2048}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        RadTuneTable t;
        write_table(fast, "q8act", cases[c].knob, cases[c].v, &t);
        cr_assert_eq(open_with(&tuned, 2e-2, tpath, 0, &e), RAD_OK, "%s", e.msg);
        const RadGOp *op = NULL;
        for (int o = 0; o < tuned->g.n_ops && !op; o++)
            if (strcmp(tuned->g.ops[o].op, "gemm_nt") == 0) op = &tuned->g.ops[o];
        cr_assert(op && op->sel.n_knobs[0] == 2, "the pick carries the kernel's two knobs");
        cr_assert(op->sel.tune_line[0] > 0);
        cr_assert_eq(rad_engine_forward(tuned, 0, ids, 8, 0, 1, &e), RAD_OK, "%s", e.msg);
        memcpy(got, rad_engine_logits(tuned, NULL), sizeof(float) * nv);
        cr_assert_eq(memcmp(got, base, sizeof(float) * nv), 0, "%s=%lld: the logits are the default's, bit for bit", cases[c].knob,
                     (long long)cases[c].v);
        rad_engine_close(tuned);
        rad_tune_free(&t);
    }
    (void)N;
    free(base), free(got);
    rad_engine_close(fast);
}

Test(tune_engine, another_key_refused, .init = setup, .fini = teardown) {
    test_deadline(300);
    RadEngine *en, *tuned;
    RadErr e = {0};
    cr_assert_eq(open_with(&en, 2e-2, NULL, 0, &e), RAD_OK, "%s", e.msg);
    RadTuneTable t;
    write_table(en, "exact", NULL, 0, &t);
    t.key.container ^= 0xff;
    cr_assert_eq(rad_tune_write_file(&t, tpath, &e), RAD_OK, "%s", e.msg);
    cr_assert_neq(open_with(&tuned, 2e-2, tpath, 0, &e), RAD_OK);
    cr_assert(strstr(e.msg, "--tune ") && strstr(e.msg, "it was tuned for container ") && !strchr(e.msg, '\n'), "%s", e.msg);
    t.key.container ^= 0xff;
    snprintf(t.key.libs[0].version, sizeof t.key.libs[0].version, "9.9.9");
    cr_assert_eq(rad_tune_write_file(&t, tpath, &e), RAD_OK, "%s", e.msg);
    cr_assert_neq(open_with(&tuned, 2e-2, tpath, 0, &e), RAD_OK);
    cr_assert(strstr(e.msg, "kernel libraries ref 9.9.9, this run has ref "), "%s", e.msg);
    /* asked: ignored with one warning, and the default rule serves */
    cr_assert_eq(open_with(&tuned, 2e-2, tpath, 1, &e), RAD_OK, "%s", e.msg);
    cr_assert_null(tuned->tune);
    cr_assert(rad_engine_tune_warning(tuned) && strstr(rad_engine_tune_warning(tuned), "ignored: it was tuned with kernel libraries"));
    rad_engine_close(tuned);
    rad_engine_tune_key(en, &t.key);
    t.key.max_tok = 128;
    cr_assert_eq(rad_tune_write_file(&t, tpath, &e), RAD_OK, "%s", e.msg);
    cr_assert_neq(open_with(&tuned, 2e-2, tpath, 0, &e), RAD_OK);
    cr_assert(strstr(e.msg, "max_tok=128, this run has max_tok=64"), "%s", e.msg);
    rad_engine_close(en);
    rad_tune_free(&t);
}
