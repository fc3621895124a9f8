/* rad-tune — writes a kernel tuning table (docs/TUNE.md) for one container under one set of
 * options: every op of the graph radiance plans, at each bucket of its row range, has every
 * candidate kernel, and each kernel at every value of each of its knobs (one knob at a time
 * around the defaults, where the knob acts), checked and timed by rad-kbench's harness
 * (libcommon/runtime/rad_kbench.h); among the settings that pass every check of the bucket (and,
 * with --deterministic, are batch invariant), the fastest is written. The ops of one shape (the
 * same name and parameters: a projection in every layer) are timed together and given one
 * choice, which evens out the noise of timing a single call.
 *
 * Resumable: each op's results go to OUT.partial as they are measured; a run that finds one
 * from the same key and sweep takes its finished ops and measures the rest. docs/TOOLS.md,
 * "rad-tune". */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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
    int quick, fast, deterministic, no_repack, no_knobs, json, restart;
    double tolerance;              /* --tolerance, --fast or the default (rad_select_tolerance) */
    RadEngineOpts deploy;          /* the deployment switches only (rad_engine_deploy_flag) */
    uint32_t max_tok, max_seqs, ctx, threads;
    const char *plugin_dirs[16];
    int n_plugin_dirs;
} Opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: rad-tune -m MODEL.rad -o OUT.tune [options]\n"
            "  Times every candidate kernel of every op, and each at every value of its knobs, at each bucket\n"
            "  of the op's row range (those that pass rad-kbench's check), and writes the fastest per op shape\n"
            "  and bucket as a tuning table for radiance --tune (docs/TUNE.md). Use the options radiance will\n"
            "  run with: the table is keyed by them. Interrupted, it resumes from OUT.partial.\n"
            "  -m, --model FILE     the .rad container\n"
            "  -o, --output FILE    the table to write (through a temporary and a rename)\n"
            "  --kernels a,b        kernel libraries in preference order (default: all installed)\n"
            "  --ops PATTERN        only ops whose name matches the glob; the others keep the default rule\n"
            "  --quick              one row count per bucket (faster, noisier)\n"
            "  --no-knobs           kernel variants only, every knob at its default\n"
            "  --max-mixed-tok N    tokens per step, as radiance (default 512)\n"
            "  --max-seqs N         sequences per step, as radiance (default 16)\n"
            "  --ctx N              context per sequence (default: the model's, capped at 8192)\n"
            "  --threads N          kernel threads (default: all cores)\n"
            "  --kv-type T          the KV cache's type, as radiance: f32 (default), f16, bf16\n"
            "  --kv-cache-dtype T   --kv-type's types, or fp8_v4 / fp8_k6v4 (the narrow fp8 layouts)\n"
            "  --control-vector FILE, --tp-attn-split rows, --state-cache-dtype f32|f16, --kv-resident N,\n"
            "  --tp-wire exact|lossy, --tp-wire-min-bytes N\n"
            "                       radiance's deployment switches: the program they declare is the one\n"
            "                       tuned; refused, naming the plugin, where its probe does not grant them\n"
            "  --tolerance T        tune as radiance --max-tolerance T runs (kernels within T; default 1e-3)\n"
            "  --fast               the same as --tolerance 2e-2 (radiance --fast)\n"
            "  --deterministic      tune as radiance --deterministic runs (batch-invariant kernels only)\n"
            "  --tp N               ranks of tensor parallelism: the ops at rank 0's shapes, the collectives\n"
            "                       run by every rank (threads of this process, as radiance --tp runs them)\n"
            "  --no-repack          as radiance --no-repack\n"
            "  --restart            ignore OUT.partial (measure everything again)\n"
            "  --json               a JSON summary on stdout (stable keys)\n"
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
    enum { KERNELS = 256, OPS, QUICK, NOKNOBS, MAXTOK, MAXSEQS, CTX, THREADS, KVTYPE, TOL, FAST, DET, NOREPACK, RESTART, JSON,
           PDIR, TP, KVCDT, CVEC, TPSPLIT, STATEDT, KVRES, TPWIRE, TPWMIN };
    static const struct option lo[] = {
        {"model", required_argument, 0, 'm'},        {"output", required_argument, 0, 'o'},
        {"kernels", required_argument, 0, KERNELS},  {"ops", required_argument, 0, OPS},
        {"quick", no_argument, 0, QUICK},            {"no-knobs", no_argument, 0, NOKNOBS},
        {"max-mixed-tok", required_argument, 0, MAXTOK}, {"max-seqs", required_argument, 0, MAXSEQS},
        {"ctx", required_argument, 0, CTX},          {"threads", required_argument, 0, THREADS},
        {"kv-type", required_argument, 0, KVTYPE},   {"tolerance", required_argument, 0, TOL},
        {"max-tolerance", required_argument, 0, TOL}, {"fast", no_argument, 0, FAST},
        {"deterministic", no_argument, 0, DET},      {"no-repack", no_argument, 0, NOREPACK},
        {"restart", no_argument, 0, RESTART},        {"json", no_argument, 0, JSON},
        {"plugin-dir", required_argument, 0, PDIR},  {"help", no_argument, 0, 'h'},
        {"tp", required_argument, 0, TP},
        {"kv-cache-dtype", required_argument, 0, KVCDT}, {"control-vector", required_argument, 0, CVEC},
        {"tp-attn-split", required_argument, 0, TPSPLIT}, {"tp-wire", required_argument, 0, TPWIRE},
        {"tp-wire-min-bytes", required_argument, 0, TPWMIN}, {"state-cache-dtype", required_argument, 0, STATEDT},
        {"kv-resident", required_argument, 0, KVRES},
        {0, 0, 0, 0}};
    int c, li = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "m:o:h", lo, &li)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'o': o->out = optarg; break;
        case KERNELS: o->kernels = optarg; break;
        case OPS: o->ops = optarg; break;
        case QUICK: o->quick = 1; break;
        case NOKNOBS: o->no_knobs = 1; break;
        case MAXTOK: if (!num("--max-mixed-tok", optarg, 1, 1 << 20, &o->max_tok)) return 2; break;
        case MAXSEQS: if (!num("--max-seqs", optarg, 1, 4096, &o->max_seqs)) return 2; break;
        case CTX: if (!num("--ctx", optarg, 16, 1 << 20, &o->ctx)) return 2; break;
        case THREADS: if (!num("--threads", optarg, 1, 1024, &o->threads)) return 2; break;
        case KVTYPE: case KVCDT: case CVEC: case TPSPLIT: case STATEDT: case KVRES: case TPWIRE: case TPWMIN: { /* radiance's deployment switches */
            RadErr e = {0};
            char flag[32];
            snprintf(flag, sizeof flag, "--%s", lo[li].name);
            if (rad_engine_deploy_flag(&o->deploy, flag, optarg, &e)) return fprintf(stderr, "rad-tune: %s\n", e.msg), 2;
            break;
        }
        case TOL: {
            RadErr e = {0};
            if (rad_num_f64("--tolerance", optarg, 1e-9, 1, 0, &o->tolerance, &e))
                return fprintf(stderr, "rad-tune: %s\n", e.msg), 2;
            break;
        }
        case FAST: o->fast = 1; break;
        case TP: {
            RadErr e = {0};
            if (rad_engine_deploy_flag(&o->deploy, "--tp", optarg, &e)) return fprintf(stderr, "%s: %s\n", "rad-tune", e.msg), 2;
            break;
        }
        case DET: o->deterministic = 1; break;
        case NOREPACK: o->no_repack = 1; break;
        case RESTART: o->restart = 1; break;
        case JSON: o->json = 1; break;
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
    if (!rad_select_tolerance(o->fast, o->tolerance, &o->tolerance))
        return fprintf(stderr, "rad-tune: --fast is --tolerance %g: give one of them\n", RAD_SELECT_FAST_TOLERANCE), 2;
    return 0;
}

/* ---- the journal: OUT.partial ------------------------------------------------------------------ */

/* What a table's measurements depend on, as text: the key's header lines and the sweep. A
 * journal is taken only when its first lines are these, byte for byte. */
static int journal_head(const RadTuneKey *key, const Opts *o, char *buf, size_t n) {
    FILE *f = fmemopen(buf, n, "w");
    if (!f) return 0;
    fprintf(f, "radiance-tune-partial 1\n");
    rad_tune_write_key(key, f);
    fprintf(f, "sweep quick=%d knobs=%d ops=%s\n", o->quick, !o->no_knobs, o->ops ? o->ops : "*");
    const long len = ftell(f);
    fclose(f);
    if (len <= 0 || (size_t)len >= n - 1) return 0;
    buf[len] = 0;
    return 1;
}

typedef struct Journal {
    FILE *f;                       /* appended to as ops finish */
    const char *path;
    const RadGraph *g;
    int failed;                    /* a write failed: the run goes on, the journal is dropped at the end */
} Journal;

/* A row as the journal keeps it: what choosing reads. */
static void journal_row(FILE *f, const RadKbenchRow *w) {
    fprintf(f, "row op=%d bucket=%" PRId64 "..%" PRId64 " check=%s pass=%d ns=%.17g kernel=%s knobs=%s\n", w->op, w->bucket_lo,
            w->bucket_hi, w->check, w->pass, w->ns_med, w->kernel, w->knobs[0] ? w->knobs : "-");
}

static void journal_op(void *user, const RadKbenchReport *r, int first, int op) {
    Journal *j = user;
    if (!j->f || j->failed) return;
    for (int i = first; i < r->n; i++) journal_row(j->f, &r->rows[i]);
    fprintf(j->f, "done op=%d\n", op);
    if (fflush(j->f) || ferror(j->f)) j->failed = 1;
}

static int push_row(RadKbenchReport *r, const RadKbenchRow *w) {
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 1024;
        RadKbenchRow *p = realloc(r->rows, (size_t)cap * sizeof *p);
        if (!p) return 0;
        r->rows = p, r->cap = cap;
    }
    r->rows[r->n++] = *w;
    return 1;
}

/* Reads PATH's finished ops into `old` (their rows) and done[] when its head is `head`. 1 taken;
 * 0 none or another run's (why says which); -1 a line that is not the journal's (why names it). */
static int journal_read(const char *path, const char *head, const RadGraph *g, RadKbenchReport *old, uint8_t *done,
                        char *why, size_t wn) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    const size_t hl = strlen(head);
    char *buf = malloc(hl + 1);
    size_t got = buf ? fread(buf, 1, hl, f) : 0;
    if (!buf || got != hl || memcmp(buf, head, hl) != 0) {
        free(buf), fclose(f);
        snprintf(why, wn, "%.300s is from another run (its key or sweep differs)", path);
        return 0;
    }
    free(buf);
    RadKbenchReport pend = {0}; /* rows of an op not yet marked done */
    char line[512];
    int lineno = 0, rc = 1;
    for (const char *p = head; *p; p++) lineno += *p == '\n';
    while (fgets(line, sizeof line, f)) {
        lineno++;
        size_t len = strlen(line);
        if (!len || line[len - 1] != '\n') break; /* a torn last line: the op it belongs to is measured again */
        line[len - 1] = 0;
        RadKbenchRow w;
        memset(&w, 0, sizeof w);
        int op, pass, nk = 0;
        char check[8], kernel[128], knobs[RAD_KBENCH_KNOBS];
        if (sscanf(line, "row op=%d bucket=%" SCNd64 "..%" SCNd64 " check=%7s pass=%d ns=%lf kernel=%127s knobs=%79s%n", &op,
                   &w.bucket_lo, &w.bucket_hi, check, &pass, &w.ns_med, kernel, knobs, &nk) == 8 &&
            nk == (int)strlen(line) && op >= 0 && op < g->n_ops) {
            w.op = op, w.pass = pass != 0;
            snprintf(w.op_name, sizeof w.op_name, "%s", g->ops[op].op);
            snprintf(w.check, sizeof w.check, "%s", check);
            snprintf(w.kernel, sizeof w.kernel, "%s", kernel);
            snprintf(w.knobs, sizeof w.knobs, "%s", strcmp(knobs, "-") ? knobs : "");
            if (!push_row(&pend, &w)) { rc = -1, snprintf(why, wn, "out of memory"); break; }
        } else if (sscanf(line, "done op=%d%n", &op, &nk) == 1 && nk == (int)strlen(line) && op >= 0 && op < g->n_ops) {
            for (int i = 0; i < pend.n; i++)
                if (pend.rows[i].op == op && !push_row(old, &pend.rows[i])) { rc = -1, snprintf(why, wn, "out of memory"); break; }
            int keep = 0; /* rows of other ops stay pending (they are not, in a journal this tool wrote) */
            for (int i = 0; i < pend.n; i++)
                if (pend.rows[i].op != op) pend.rows[keep++] = pend.rows[i];
            pend.n = keep;
            done[op] = 1;
        } else {
            rc = -1;
            snprintf(why, wn, "%.300s:%d: not a line of rad-tune's journal (delete it, or give --restart)", path, lineno);
            break;
        }
        if (rc < 0) break;
    }
    free(pend.rows);
    fclose(f);
    return rc;
}

/* ---- choosing ------------------------------------------------------------------------------------ */

/* One candidate of one (op shape, bucket): a kernel at one knob setting, its summed time over the
 * shape's ops and row counts, and whether every check it took there passed. */
typedef struct Cand {
    char kernel[128];              /* "lib:op:variant", as the report names it */
    char knobs[RAD_KBENCH_KNOBS];  /* "" the defaults, or "name=value" */
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

/* "name=value" -> the entry's one knob. */
static int split_knob(const char *s, RadTuneEntry *x) {
    const char *eq = strchr(s, '=');
    char *end;
    if (!eq || (size_t)(eq - s) >= RAD_TUNE_NAME) return 0;
    errno = 0;
    const long long v = strtoll(eq + 1, &end, 10);
    if (errno || *end || end == eq + 1) return 0;
    memcpy(x->knob[0], s, (size_t)(eq - s));
    x->knob[0][eq - s] = 0;
    x->val[0] = v, x->n_knobs = 1;
    return 1;
}

/* How much faster than the default rule's pick (its kernel at its defaults) another setting must
 * be to be written: below it the difference is this VM's timing noise, and the default stays. */
#define TUNE_MARGIN 0.03
/* ... and may be no slower than it by more than this in any case (rows, phase, context) summed
 * over the shape's ops: a setting that wins on long contexts and loses on short ones (a fixed
 * thread count against the kernel's own rule, which reads the context) would lose where the run
 * spends its steps; one call's timing noise here is about this size. */
#define TUNE_CASE_SLACK 0.10

/* Whether candidate a is within TUNE_CASE_SLACK of candidate d in every case both were timed on. */
static int dominates(const RadGraph *g, const RadGOp *op, uint64_t sh, int64_t lo, int64_t hi, const RadKbenchReport *r,
                     const Cand *a, const Cand *d) {
    enum { MAXC = 64 };
    struct { int64_t rows; uint32_t ctx; char shape[12]; double ta, td; } k[MAXC];
    int nk = 0;
    for (int x = 0; x < r->n; x++) {
        const RadKbenchRow *w = &r->rows[x];
        if (w->bucket_lo != lo || w->bucket_hi != hi || strcmp(w->check, "ref") || strcmp(w->op_name, op->op) || w->ns_med <= 0)
            continue;
        const int is_a = !strcmp(w->kernel, a->kernel) && !strcmp(w->knobs, a->knobs);
        const int is_d = !strcmp(w->kernel, d->kernel) && !strcmp(w->knobs, d->knobs);
        if ((!is_a && !is_d) || shape_of(&g->ops[w->op]) != sh) continue;
        int i = 0;
        while (i < nk && (k[i].rows != w->rows || k[i].ctx != w->ctx || strcmp(k[i].shape, w->shape))) i++;
        if (i == nk) {
            if (nk == MAXC) continue;
            k[nk].rows = w->rows, k[nk].ctx = w->ctx, k[nk].ta = k[nk].td = 0;
            snprintf(k[nk].shape, sizeof k[nk].shape, "%s", w->shape);
            nk++;
        }
        if (is_a) k[i].ta += w->ns_med;
        else k[i].td += w->ns_med;
    }
    for (int i = 0; i < nk; i++)
        if (k[i].ta > 0 && k[i].td > 0 && k[i].ta > k[i].td * (1 + TUNE_CASE_SLACK)) return 0;
    return 1;
}

/* The best candidate of one (shape, bucket) over r's rows; -1 when none passed everything. The
 * default rule's pick (b's) keeps the bucket unless another beats it by TUNE_MARGIN. */
static int best_of(const RadEngine *en, const RadGraph *g, const RadGOp *op, int b, uint64_t sh, int64_t lo, int64_t hi,
                   const RadKbenchReport *r, int deterministic, Cand *c, int *any) {
    int nc = 0;
    *any = 0;
    for (int x = 0; x < r->n; x++) { /* every row of this shape and bucket, over every op of the shape */
        const RadKbenchRow *w = &r->rows[x];
        if (w->bucket_lo != lo || w->bucket_hi != hi || strcmp(w->op_name, op->op) != 0) continue;
        if (shape_of(&g->ops[w->op]) != sh) continue;
        *any = 1;
        int k = 0;
        while (k < nc && (strcmp(c[k].kernel, w->kernel) != 0 || strcmp(c[k].knobs, w->knobs) != 0)) k++;
        if (k == nc) {
            if (nc == 256) continue;
            memset(&c[nc], 0, sizeof c[nc]);
            snprintf(c[nc].kernel, sizeof c[nc].kernel, "%s", w->kernel);
            snprintf(c[nc].knobs, sizeof c[nc].knobs, "%s", w->knobs);
            nc++;
        }
        if (!w->pass) c[k].failed = 1;
        if (strcmp(w->check, "ref") == 0 && w->ns_med > 0) c[k].ns += w->ns_med, c[k].n++;
    }
    int n_max = 0, best = -1;
    for (int k = 0; k < nc; k++) n_max = c[k].n > n_max ? c[k].n : n_max;
    for (int k = 0; k < nc; k++) /* compared on the same cases: a knob that acts on fewer rows is not timed on them all */
        if (!c[k].failed && c[k].n == n_max && n_max && allowed(en, op, c[k].kernel, deterministic) &&
            (best < 0 || c[k].ns < c[best].ns))
            best = k;
    const RadKernel *pk = op->sel.pick[b];
    const RadPlugin *pl = pk ? rad_engine_lib(en, op->sel.pick_lib[b], NULL) : NULL;
    if (best >= 0 && pl) {
        char name[128];
        snprintf(name, sizeof name, "%s:%s:%s", pl->info->name, op->op, pk->variant);
        for (int k = 0; k < nc; k++)
            if (!strcmp(c[k].kernel, name) && !c[k].knobs[0] && !c[k].failed && c[k].n == n_max && k != best &&
                allowed(en, op, c[k].kernel, deterministic) &&
                (c[best].ns > c[k].ns * (1 - TUNE_MARGIN) || !dominates(g, op, sh, lo, hi, r, &c[best], &c[k])))
                best = k;
    }
    return best;
}

/* The table: for each (shape, bucket) the fastest candidate that passed everything, written for
 * every op of the shape (computed once per shape). *n_changed counts entries that differ from the
 * default rule's pick (another variant, or a knob set). */
static int choose(const RadEngine *en, const RadKbenchReport *r, int deterministic, RadTuneTable *t, int *n_changed,
                  json_t *changed, RadErr *e) {
    const RadGraph *g = rad_engine_graph(en);
    Cand *c = malloc(256 * sizeof *c);
    int *first = malloc((size_t)(g->n_ops ? g->n_ops : 1) * sizeof *first); /* the first op of i's shape */
    RadTuneEntry *memo = calloc((size_t)(g->n_ops ? g->n_ops : 1) * 64, sizeof *memo); /* [first op][bucket] */
    int *memo_ok = calloc((size_t)(g->n_ops ? g->n_ops : 1) * 64, sizeof *memo_ok); /* 1 chosen, 2 none */
    int rc = c && first && memo && memo_ok ? RAD_OK : rad_err_set(e, RAD_E_NOMEM, "out of memory");
    for (int i = 0; i < g->n_ops && !rc; i++) {
        const RadGOp *op = &g->ops[i];
        const uint64_t sh = shape_of(op);
        first[i] = i;
        for (int j = 0; j < i; j++)
            if (first[j] == j && !strcmp(g->ops[j].op, op->op) && shape_of(&g->ops[j]) == sh) { first[i] = j; break; }
        for (int b = 0; b < op->sel.n_buckets && b < 64 && !rc; b++) {
            const int64_t lo = op->sel.lo[b], hi = b + 1 < op->sel.n_buckets ? op->sel.lo[b + 1] - 1 : op->sel.range_hi;
            const size_t m = (size_t)first[i] * 64 + (size_t)b;
            if (!memo_ok[m]) {
                int any;
                const int best = best_of(en, g, op, b, sh, lo, hi, r, deterministic, c, &any);
                memo_ok[m] = 2; /* not checked (--ops, no reference) or nothing passed: the default rule */
                if (best >= 0) {
                    RadTuneEntry *x = &memo[m];
                    snprintf(x->name, sizeof x->name, "%s", op->op);
                    if (!split_kernel(c[best].kernel, x->lib, x->variant) || (c[best].knobs[0] && !split_knob(c[best].knobs, x))) {
                        rc = rad_err_set(e, RAD_E_FORMAT, "op #%d '%s': kernel '%s %s' is not lib:op:variant name=value", i, op->op,
                                         c[best].kernel, c[best].knobs);
                        break;
                    }
                    x->ns = (uint64_t)(c[best].ns / c[best].n + 0.5);
                    memo_ok[m] = 1;
                }
            }
            if (memo_ok[m] != 1) continue;
            RadTuneEntry en_ = memo[m];
            en_.op = i, en_.params = sh, en_.lo = lo, en_.hi = hi;
            const RadKernel *def = op->sel.pick[b];
            if (!def || strcmp(def->variant, en_.variant) != 0 || en_.n_knobs) {
                (*n_changed)++;
                if (changed && first[i] == i) {
                    json_t *j = json_object(), *bk = json_array();
                    json_object_set_new(j, "op", json_string(op->op));
                    json_object_set_new(j, "op_index", json_integer(i));
                    json_array_append_new(bk, json_integer(lo));
                    json_array_append_new(bk, json_integer(hi));
                    json_object_set_new(j, "bucket", bk);
                    json_object_set_new(j, "default", json_string(def ? def->variant : ""));
                    json_object_set_new(j, "lib", json_string(en_.lib));
                    json_object_set_new(j, "variant", json_string(en_.variant));
                    char kb[RAD_KBENCH_KNOBS] = "";
                    if (en_.n_knobs) snprintf(kb, sizeof kb, "%s=%" PRId64, en_.knob[0], en_.val[0]);
                    json_object_set_new(j, "knobs", json_string(kb));
                    json_object_set_new(j, "ns", json_integer((json_int_t)en_.ns));
                    json_array_append_new(changed, j);
                }
            }
            rc = rad_tune_add(t, &en_, e);
        }
    }
    free(c), free(first), free(memo), free(memo_ok);
    return rc;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    rad_stdout_init();
    Opts o = {0};
    int rc = parse(argc, argv, &o);
    if (rc == -1) return usage(stdout), rad_stdout_close("rad-tune", 0);
    if (rc) return rc;
    const double t0 = now_s();
    RadEngineOpts eo = {.model = o.model, .plugin_dirs = o.plugin_dirs, .n_plugin_dirs = o.n_plugin_dirs,
                        .kernels = o.kernels, .kernels_any_device = 1, .n_threads = o.threads, .max_tok = o.max_tok ? o.max_tok : RAD_SERVE_MAX_TOK,
                        .max_seqs = o.max_seqs ? o.max_seqs : RAD_SERVE_MAX_SEQS, .max_ctx = o.ctx,
                        .deterministic = o.deterministic, .max_tolerance = o.tolerance, .no_repack = o.no_repack};
    rad_engine_deploy_apply(&eo, &o.deploy);
    RadErr e = {0};
    RadEngine *en = NULL;
    if ((rc = rad_engine_open(&en, &eo, &e))) return fprintf(stderr, "rad-tune: %s\n", e.msg), 1;
    const RadGraph *g = rad_engine_graph(en);
    RadTuneTable t;
    memset(&t, 0, sizeof t);
    rad_engine_tune_key(en, &t.key);

    /* resume: the ops a journal of this key and sweep finished */
    char jpath[4096], head[8192], why[512] = "";
    snprintf(jpath, sizeof jpath, "%s.partial", o.out);
    RadKbenchReport old = {0}, r = {0};
    uint8_t *mask = calloc((size_t)(g->n_ops ? g->n_ops : 1), 1), *done = calloc((size_t)(g->n_ops ? g->n_ops : 1), 1);
    if (!mask || !done || !journal_head(&t.key, &o, head, sizeof head)) {
        rc = rad_err_set(&e, RAD_E_NOMEM, "out of memory");
        goto out;
    }
    int resumed = 0;
    if (!o.restart) {
        int jr = journal_read(jpath, head, g, &old, done, why, sizeof why);
        if (jr < 0) {
            rc = rad_err_set(&e, RAD_E_FORMAT, "%s", why);
            goto out;
        }
        if (jr == 0 && why[0]) fprintf(stderr, "rad-tune: %s: measuring every op again\n", why);
        for (int i = 0; i < g->n_ops; i++) resumed += done[i];
        if (resumed) fprintf(stderr, "rad-tune: %s: %d ops already measured, resuming\n", jpath, resumed);
    }
    int todo = 0;
    for (int i = 0; i < g->n_ops; i++) todo += mask[i] = !done[i];
    Journal j = {.path = jpath, .g = g};
    if (todo) { /* rewritten whole: the ops it kept, then the rest as they finish */
        char tmp[4200];
        snprintf(tmp, sizeof tmp, "%s.tmp", jpath);
        if (!(j.f = fopen(tmp, "w"))) {
            rc = rad_err_set(&e, RAD_E_IO, "%s: cannot write: %s", tmp, strerror(errno));
            goto out;
        }
        fputs(head, j.f);
        for (int i = 0; i < g->n_ops; i++) {
            if (!done[i]) continue;
            for (int x = 0; x < old.n; x++)
                if (old.rows[x].op == i) journal_row(j.f, &old.rows[x]);
            fprintf(j.f, "done op=%d\n", i);
        }
        if (fflush(j.f) || ferror(j.f) || rename(tmp, jpath)) {
            rc = rad_err_set(&e, RAD_E_IO, "%s: cannot write: %s", jpath, strerror(errno));
            fclose(j.f), j.f = NULL, unlink(tmp);
            goto out;
        }
        RadKbenchOpts ko = {.model = o.model, .ops = o.ops, .quick = o.quick, .bench = 1, .knobs = !o.no_knobs,
                            .n_threads = o.threads, .progress = isatty(2) ? rad_kbench_progress_bar : NULL, .op_mask = mask,
                            .on_op = journal_op, .on_op_user = &j};
        rc = rad_kbench_run(en, &ko, &r, &e);
        if (fclose(j.f) && !rc) j.failed = 1;
        j.f = NULL;
        if (rc) goto out; /* the journal keeps what finished: the next run resumes from it */
    }
    for (int x = 0; x < old.n; x++) /* one report: the journal's ops and this run's */
        if (!push_row(&r, &old.rows[x])) {
            rc = rad_err_set(&e, RAD_E_NOMEM, "out of memory");
            goto out;
        }
    int n_changed = 0, n_failed = 0;
    for (int x = 0; x < r.n; x++) n_failed += !r.rows[x].pass;
    json_t *changed = o.json ? json_array() : NULL;
    rc = choose(en, &r, o.deterministic, &t, &n_changed, changed, &e);
    if (!rc) rc = rad_tune_write_file(&t, o.out, &e);
    if (!rc) unlink(jpath); /* the table is whole: nothing to resume */
    if (!rc) {
        const int n_ops = r.n_ops + resumed; /* this run's checked ops and the journal's */
        fprintf(stderr, "rad-tune: %s: %d entries (%d ops checked%s, %d kernel checks failed and were left out), %d differ from "
                        "the default rule\n", o.out, t.n, n_ops, resumed ? ", some from the journal" : "", n_failed, n_changed);
        if (o.json) {
            json_t *root = json_object();
            json_object_set_new(root, "output", json_string(o.out));
            json_object_set_new(root, "model", json_string(o.model));
            json_object_set_new(root, "entries", json_integer(t.n));
            json_object_set_new(root, "differ_from_default", json_integer(n_changed));
            json_object_set_new(root, "ops_checked", json_integer(n_ops));
            json_object_set_new(root, "ops_resumed", json_integer(resumed));
            json_object_set_new(root, "checks", json_integer(r.n));
            json_object_set_new(root, "checks_failed", json_integer(n_failed));
            json_object_set_new(root, "knobs", json_boolean(!o.no_knobs));
            json_object_set_new(root, "quick", json_boolean(o.quick));
            json_object_set_new(root, "max_tolerance", json_real(t.key.max_tolerance));
            json_object_set_new(root, "seconds", json_real(now_s() - t0));
            json_object_set_new(root, "changed", changed);
            changed = NULL;
            char *s = json_dumps(root, JSON_INDENT(1));
            if (s) fputs(s, stdout), fputc('\n', stdout);
            free(s);
            json_decref(root);
        }
    }
    json_decref(changed);
out:
    rad_engine_close(en);
    if (rc) fprintf(stderr, "rad-tune: %s\n", e.msg);
    if (j.failed) fprintf(stderr, "rad-tune: %s: a write failed; it cannot be resumed from\n", jpath);
    rad_kbench_report_free(&r);
    rad_kbench_report_free(&old);
    rad_tune_free(&t);
    free(mask), free(done);
    return rad_stdout_close("rad-tune", rc ? 1 : 0);
}
