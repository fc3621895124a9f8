/* rad-tune — writes a kernel tuning table (docs/TUNE.md) for one container under one set of
 * options: every op of the graph radiance plans, at each bucket of its row range, has every
 * candidate kernel checked and timed by rad-kbench's harness (libcommon/runtime/rad_kbench.h);
 * among the kernels that pass every check of the bucket (and, with --deterministic, are batch
 * invariant), the fastest is written. The ops of one shape (the same name and parameters: a
 * projection in every layer) are timed together and given one choice, which evens out the noise
 * of timing a single call. Kernel variants only: knob values are left at their defaults (a sweep
 * of knobs is still to come). docs/TOOLS.md, "rad-tune". */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libcommon/base/rad_num.h"
#include "libcommon/base/rad_stdout.h"
#include "libcommon/plugin/rad_graph.h"
#include "libcommon/plugin/rad_select.h"
#include "libcommon/plugin/rad_tune.h"
#include "libcommon/runtime/rad_engine.h"
#include "libcommon/runtime/rad_kbench.h"

typedef struct Opts {
    const char *model, *kernels, *out, *ops;
    int quick, fast, deterministic, no_repack;
    uint32_t max_tok, max_seqs, ctx, threads;
    const char *plugin_dirs[16];
    int n_plugin_dirs;
} Opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: rad-tune -m MODEL.rad -o OUT.tune [options]\n"
            "  Times every candidate kernel of every op at each bucket of its row range (those that pass\n"
            "  rad-kbench's check), and writes the fastest per op shape and bucket as a tuning table for\n"
            "  radiance --tune (docs/TUNE.md). Use the options radiance will run with: the table is keyed by them.\n"
            "  -m, --model FILE     the .rad container\n"
            "  -o, --output FILE    the table to write (through a temporary and a rename)\n"
            "  --kernels a,b        kernel libraries in preference order (default: all installed)\n"
            "  --ops PATTERN        only ops whose name matches the glob; the others keep the default rule\n"
            "  --quick              one row count per bucket (faster, noisier)\n"
            "  --max-mixed-tok N    tokens per step, as radiance (default 512)\n"
            "  --max-seqs N         sequences per step, as radiance (default 16)\n"
            "  --ctx N              context per sequence (default: the model's, capped at 8192)\n"
            "  --threads N          kernel threads (default: all cores)\n"
            "  --fast               tune as radiance --fast runs (kernels within 2e-2)\n"
            "  --deterministic      tune as radiance --deterministic runs (batch-invariant kernels only)\n"
            "  --no-repack          as radiance --no-repack\n"
            "  --plugin-dir DIR     look for plugins in DIR first (repeatable)\n"
            "  -h, --help           this text\n"
            "exit: 0 the table is written; 1 the run failed (named on stderr); 2 usage\n");
}

static int num(const char *flag, const char *s, double lo, double hi, uint32_t *out) {
    RadErr e = {0};
    double v;
    if (rad_num_f64(flag, s, lo, hi, RAD_NUM_WHOLE, &v, &e)) return fprintf(stderr, "rad-tune: %s\n", e.msg), 0;
    *out = (uint32_t)v;
    return 1;
}

/* 0 ok, 2 usage (printed), -1 help. */
static int parse(int argc, char **argv, Opts *o) {
    enum { KERNELS = 256, OPS, QUICK, MAXTOK, MAXSEQS, CTX, THREADS, FAST, DET, NOREPACK, PDIR };
    static const struct option lo[] = {
        {"model", required_argument, 0, 'm'},        {"output", required_argument, 0, 'o'},
        {"kernels", required_argument, 0, KERNELS},  {"ops", required_argument, 0, OPS},
        {"quick", no_argument, 0, QUICK},            {"max-mixed-tok", required_argument, 0, MAXTOK},
        {"max-seqs", required_argument, 0, MAXSEQS}, {"ctx", required_argument, 0, CTX},
        {"threads", required_argument, 0, THREADS},  {"fast", no_argument, 0, FAST},
        {"deterministic", no_argument, 0, DET},      {"no-repack", no_argument, 0, NOREPACK},
        {"plugin-dir", required_argument, 0, PDIR},  {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "m:o:h", lo, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'o': o->out = optarg; break;
        case KERNELS: o->kernels = optarg; break;
        case OPS: o->ops = optarg; break;
        case QUICK: o->quick = 1; break;
        case MAXTOK: if (!num("--max-mixed-tok", optarg, 1, 1 << 20, &o->max_tok)) return 2; break;
        case MAXSEQS: if (!num("--max-seqs", optarg, 1, 4096, &o->max_seqs)) return 2; break;
        case CTX: if (!num("--ctx", optarg, 16, 1 << 20, &o->ctx)) return 2; break;
        case THREADS: if (!num("--threads", optarg, 1, 1024, &o->threads)) return 2; break;
        case FAST: o->fast = 1; break;
        case DET: o->deterministic = 1; break;
        case NOREPACK: o->no_repack = 1; break;
        case PDIR:
            if (o->n_plugin_dirs == 16) return fprintf(stderr, "rad-tune: --plugin-dir: at most 16\n"), 2;
            o->plugin_dirs[o->n_plugin_dirs++] = optarg;
            break;
        case 'h': return -1;
        default:
            if (optopt && optopt < 256) fprintf(stderr, "rad-tune: -%c: unknown option or missing value (--help)\n", optopt);
            else fprintf(stderr, "rad-tune: %s: unknown option or missing value (--help)\n", argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) return fprintf(stderr, "rad-tune: %s: unexpected argument\n", argv[optind]), 2;
    if (!o->model) return fprintf(stderr, "rad-tune: -m MODEL.rad is required (--help)\n"), 2;
    if (!o->out) return fprintf(stderr, "rad-tune: -o OUT.tune is required (--help)\n"), 2;
    return 0;
}

/* ---- choosing ------------------------------------------------------------------------------------ */

/* One candidate of one (op shape, bucket): its summed time over the shape's ops and row counts,
 * and whether every check it took there passed. */
typedef struct Cand {
    char kernel[128];              /* "lib:op:variant", as the report names it */
    double ns;                     /* summed median time of its timed rows */
    int n, failed;                 /* rows timed; any check failed (ref or chain) */
} Cand;

/* The shape of op i: ops of one name and parameter hash share a choice. */
static uint64_t shape_of(const RadGOp *op) { return rad_tune_params_hash(op->op, op->params, op->n_params); }

/* Whether `kernel` ("lib:op:variant") is allowed under --deterministic: a candidate of the op's
 * table that is batch-invariant. */
static int allowed(const RadEngine *en, const RadGOp *op, const char *kernel, int deterministic) {
    if (!deterministic) return 1;
    for (int j = 0; j < op->sel.n; j++) {
        const RadPlugin *lib = rad_engine_lib(en, op->sel.k_lib[j], NULL);
        char name[128];
        snprintf(name, sizeof name, "%s:%s:%s", lib ? lib->info->name : "?", op->op, op->sel.k[j]->variant);
        if (strcmp(name, kernel) == 0) return op->sel.k[j]->batch_invariant != 0;
    }
    return 0;
}

/* "lib:op:variant" -> lib and variant. */
static int split_kernel(const char *k, char *lib, char *variant) {
    const char *a = strchr(k, ':'), *b = strrchr(k, ':');
    if (!a || a == b || (size_t)(a - k) >= RAD_TUNE_NAME || strlen(b + 1) >= RAD_TUNE_NAME) return 0;
    memcpy(lib, k, (size_t)(a - k));
    lib[a - k] = 0;
    snprintf(variant, RAD_TUNE_NAME, "%s", b + 1);
    return 1;
}

/* The table: for each (shape, bucket) the fastest candidate that passed everything, written for
 * every op of the shape. *n_changed counts entries that differ from the default rule's pick. */
static int choose(const RadEngine *en, const RadKbenchReport *r, int deterministic, RadTuneTable *t, int *n_changed,
                  RadErr *e) {
    const RadGraph *g = rad_engine_graph(en);
    int rc = RAD_OK;
    for (int i = 0; i < g->n_ops && !rc; i++) {
        const RadGOp *op = &g->ops[i];
        const uint64_t sh = shape_of(op);
        for (int b = 0; b < op->sel.n_buckets && !rc; b++) {
            const int64_t lo = op->sel.lo[b], hi = b + 1 < op->sel.n_buckets ? op->sel.lo[b + 1] - 1 : op->sel.range_hi;
            Cand c[32];
            int nc = 0, any = 0;
            for (int x = 0; x < r->n; x++) { /* every row of this shape and bucket, over every op of the shape */
                const RadKbenchRow *w = &r->rows[x];
                if (w->bucket_lo != lo || w->bucket_hi != hi || strcmp(w->op_name, op->op) != 0) continue;
                if (shape_of(&g->ops[w->op]) != sh) continue;
                any = 1;
                int k = 0;
                while (k < nc && strcmp(c[k].kernel, w->kernel) != 0) k++;
                if (k == nc) {
                    if (nc == 32) continue;
                    memset(&c[nc], 0, sizeof c[nc]);
                    snprintf(c[nc].kernel, sizeof c[nc].kernel, "%s", w->kernel);
                    nc++;
                }
                if (!w->pass) c[k].failed = 1;
                if (strcmp(w->check, "ref") == 0 && w->ns_med > 0) c[k].ns += w->ns_med, c[k].n++;
            }
            if (!any) continue; /* not checked (--ops, or no reference): the default rule */
            int best = -1;
            for (int k = 0; k < nc; k++)
                if (!c[k].failed && c[k].n && allowed(en, op, c[k].kernel, deterministic) && (best < 0 || c[k].ns < c[best].ns))
                    best = k;
            if (best < 0) continue; /* nothing passed: the default rule, whose pick rad-kbench names failing */
            RadTuneEntry en_ = {.op = i, .params = sh, .lo = lo, .hi = hi};
            snprintf(en_.name, sizeof en_.name, "%s", op->op);
            if (!split_kernel(c[best].kernel, en_.lib, en_.variant))
                return rad_err_set(e, RAD_E_FORMAT, "op #%d '%s': kernel name '%s' is not lib:op:variant", i, op->op,
                                   c[best].kernel);
            en_.ns = (uint64_t)(c[best].ns / c[best].n + 0.5);
            const RadKernel *def = op->sel.pick[b];
            if (!def || strcmp(def->variant, en_.variant) != 0) (*n_changed)++;
            rc = rad_tune_add(t, &en_, e);
        }
    }
    return rc;
}

int main(int argc, char **argv) {
    rad_stdout_init();
    Opts o = {0};
    int rc = parse(argc, argv, &o);
    if (rc == -1) return usage(stdout), rad_stdout_close("rad-tune", 0);
    if (rc) return rc;
    RadEngineOpts eo = {.model = o.model, .plugin_dirs = o.plugin_dirs, .n_plugin_dirs = o.n_plugin_dirs,
                        .kernels = o.kernels, .n_threads = o.threads, .max_tok = o.max_tok ? o.max_tok : RAD_SERVE_MAX_TOK,
                        .max_seqs = o.max_seqs ? o.max_seqs : RAD_SERVE_MAX_SEQS, .max_ctx = o.ctx,
                        .deterministic = o.deterministic, .max_tolerance = o.fast ? RAD_SELECT_FAST_TOLERANCE : RAD_SELECT_DEFAULT_TOLERANCE, .no_repack = o.no_repack};
    RadErr e = {0};
    RadEngine *en = NULL;
    if ((rc = rad_engine_open(&en, &eo, &e))) return fprintf(stderr, "rad-tune: %s\n", e.msg), 1;
    RadKbenchOpts ko = {.model = o.model, .ops = o.ops, .quick = o.quick, .bench = 1, .n_threads = o.threads,
                        .progress = isatty(2) ? rad_kbench_progress_bar : NULL};
    RadKbenchReport r;
    rc = rad_kbench_run(en, &ko, &r, &e);
    RadTuneTable t;
    memset(&t, 0, sizeof t);
    int n_changed = 0;
    if (!rc) {
        rad_engine_tune_key(en, &t.key);
        rc = choose(en, &r, o.deterministic, &t, &n_changed, &e);
    }
    if (!rc) rc = rad_tune_write_file(&t, o.out, &e);
    rad_engine_close(en);
    if (rc) fprintf(stderr, "rad-tune: %s\n", e.msg);
    else
        fprintf(stderr, "rad-tune: %s: %d entries (%d ops checked, %d kernel checks failed and were left out), %d differ from "
                        "the default rule\n", o.out, t.n, r.n_ops, r.n_fail, n_changed);
    rad_kbench_report_free(&r);
    rad_tune_free(&t);
    return rad_stdout_close("rad-tune", rc ? 1 : 0);
}
