/* rad-kbench — every kernel of the named libraries checked against docs/OPS.md's reference at the
 * shapes the model is served at (libcommon/runtime/rad_kbench.h does the work), optionally timed
 * against the machine's read bandwidth. Markdown report, --json, exit 1 when any kernel fails.
 * docs/TOOLS.md, "rad-kbench". */
#include <fnmatch.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libcommon/base/rad_num.h"
#include "libcommon/base/rad_stdout.h"
#include "libcommon/plugin/rad_graph.h"
#include "libcommon/plugin/rad_select.h"
#include "libcommon/runtime/rad_engine.h"
#include "libcommon/runtime/rad_kbench.h"

typedef struct Opts {
    const char *model, *kernels, *report, *ops;
    int json, bench, quick, fast, deterministic, no_repack, knobs;
    uint32_t max_tok, max_seqs, ctx, threads;
    double tolerance;              /* --max-tolerance, --fast or the default (rad_select_tolerance) */
    int64_t rows[RAD_KBENCH_MAX_ROWS]; /* --buckets */
    int n_rows;
    RadEngineOpts deploy;          /* the deployment switches only (rad_engine_deploy_flag) */
    const char *plugin_dirs[16];
    int n_plugin_dirs;
} Opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: rad-kbench -m MODEL.rad [options]\n"
            "  Checks every candidate kernel of every op of the model's graph, at each bucket of its\n"
            "  row range, against docs/OPS.md's f32 reference (bitwise or within the kernel's tolerance).\n"
            "  -m, --model FILE     the .rad container (opened as radiance opens it)\n"
            "  --kernels a,b        kernel libraries in preference order (default: all installed)\n"
            "  --report FILE        write the markdown report to FILE (default: stdout, unless --json)\n"
            "  --json               one JSON object on stdout (stable keys)\n"
            "  --ops PATTERN        only ops whose name matches the glob (gemm_nt*, attn_paged)\n"
            "  --bench              time each kernel: median, min, max, GB/s, GFLOP/s, share of the\n"
            "                       read bandwidth this machine measures (a benchmark, never a check)\n"
            "  --quick              one row count per bucket, two context lengths (make test)\n"
            "  --buckets N,N,...    check only at these row counts, each in the bucket holding it\n"
            "  --tp N               ranks of tensor parallelism: the ops at rank 0's shapes, the collectives\n"
            "                       run by every rank (threads of this process, as radiance --tp runs them)\n"
            "  --knobs              also run each kernel at every value of each of its knobs (one knob at a\n"
            "                       time, the others at their defaults), checked like the defaults\n"
            "  --max-mixed-tok N    tokens per step, as radiance (default 512)\n"
            "  --max-seqs N         sequences per step, as radiance (default 16)\n"
            "  --ctx N              context per sequence (default: the model's, capped at 8192)\n"
            "  --threads N          kernel and reference threads (default: all cores)\n"
            "  --fast               allow kernels within 2e-2 of the reference (radiance --fast)\n"
            "  --max-tolerance T    allow kernels within T (radiance --max-tolerance; default 1e-3)\n"
            "  --kv-type T          the KV cache's type, as radiance: f32 (default), f16, bf16\n"
            "  --kv-cache-dtype T   --kv-type's types, or fp8_v4 / fp8_k6v4 (the narrow fp8 layouts)\n"
            "  --control-vector FILE, --tp-attn-split rows, --state-cache-dtype f32|f16, --kv-resident N,\n"
            "  --tp-wire exact|lossy, --tp-wire-min-bytes N\n"
            "                       radiance's deployment switches: the program they declare is the one\n"
            "                       checked; refused, naming the plugin, where its probe does not grant them\n"
            "  --deterministic      batch-invariant kernels first (radiance --deterministic)\n"
            "  --no-repack          keep every weight in its stored layout (radiance --no-repack)\n"
            "  --plugin-dir DIR     look for plugins in DIR first (repeatable)\n"
            "  -h, --help           this text\n"
            "exit: 0 every kernel passes; 1 a kernel fails (named on stderr) or the run failed; 2 usage\n");
}

static int num(const char *flag, const char *s, double lo, double hi, uint32_t *out) {
    RadErr e = {0};
    double v;
    if (rad_num_f64(flag, s, lo, hi, RAD_NUM_WHOLE, &v, &e)) {
        fprintf(stderr, "rad-kbench: %s\n", e.msg);
        return 0;
    }
    *out = (uint32_t)v;
    return 1;
}

/* 0 ok, 2 usage (printed), -1 help. */
static int parse(int argc, char **argv, Opts *o) {
    enum { KERNELS = 256, REPORT, JSON, OPS, BENCH, QUICK, KNOBS, MAXTOK, MAXSEQS, CTX, THREADS, FAST, DET, NOREPACK, PDIR, MAXTOL, KVTYPE, BUCKETS, TP,
           KVCDT, CVEC, TPSPLIT, STATEDT, KVRES, TPWIRE, TPWMIN };
    static const struct option lo[] = {
        {"model", required_argument, 0, 'm'},      {"kernels", required_argument, 0, KERNELS},
        {"report", required_argument, 0, REPORT},  {"json", no_argument, 0, JSON},
        {"ops", required_argument, 0, OPS},        {"bench", no_argument, 0, BENCH},
        {"quick", no_argument, 0, QUICK},          {"max-mixed-tok", required_argument, 0, MAXTOK},
        {"knobs", no_argument, 0, KNOBS},
        {"max-seqs", required_argument, 0, MAXSEQS}, {"ctx", required_argument, 0, CTX},
        {"threads", required_argument, 0, THREADS}, {"fast", no_argument, 0, FAST},
        {"deterministic", no_argument, 0, DET},    {"no-repack", no_argument, 0, NOREPACK},
        {"plugin-dir", required_argument, 0, PDIR}, {"help", no_argument, 0, 'h'},
        {"max-tolerance", required_argument, 0, MAXTOL}, {"tolerance", required_argument, 0, MAXTOL},
        {"kv-type", required_argument, 0, KVTYPE}, {"buckets", required_argument, 0, BUCKETS},
        {"tp", required_argument, 0, TP},
        {"kv-cache-dtype", required_argument, 0, KVCDT}, {"control-vector", required_argument, 0, CVEC},
        {"tp-attn-split", required_argument, 0, TPSPLIT}, {"tp-wire", required_argument, 0, TPWIRE},
        {"tp-wire-min-bytes", required_argument, 0, TPWMIN}, {"state-cache-dtype", required_argument, 0, STATEDT},
        {"kv-resident", required_argument, 0, KVRES},
        {0, 0, 0, 0}};
    int c, li = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "m:h", lo, &li)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case KERNELS: o->kernels = optarg; break;
        case REPORT: o->report = optarg; break;
        case JSON: o->json = 1; break;
        case OPS: o->ops = optarg; break;
        case BENCH: o->bench = 1; break;
        case QUICK: o->quick = 1; break;
        case KNOBS: o->knobs = 1; break;
        case MAXTOK: if (!num("--max-mixed-tok", optarg, 1, 1 << 20, &o->max_tok)) return 2; break;
        case MAXSEQS: if (!num("--max-seqs", optarg, 1, 4096, &o->max_seqs)) return 2; break;
        case CTX: if (!num("--ctx", optarg, 16, 1 << 20, &o->ctx)) return 2; break;
        case THREADS: if (!num("--threads", optarg, 1, 1024, &o->threads)) return 2; break;
        case FAST: o->fast = 1; break;
        case MAXTOL: {
            RadErr e = {0};
            if (rad_num_f64("--max-tolerance", optarg, 1e-9, 1, 0, &o->tolerance, &e))
                return fprintf(stderr, "rad-kbench: %s\n", e.msg), 2;
            break;
        }
        case BUCKETS: { /* N,N,...: each a row count */
            char item[32];
            const char *p = optarg;
            o->n_rows = 0;
            for (;;) {
                const char *comma = strchr(p, ',');
                const size_t len = comma ? (size_t)(comma - p) : strlen(p);
                uint32_t v;
                if (len >= sizeof item) return fprintf(stderr, "rad-kbench: --buckets: '%.40s' is not a row count\n", p), 2;
                memcpy(item, p, len), item[len] = 0;
                if (o->n_rows == RAD_KBENCH_MAX_ROWS)
                    return fprintf(stderr, "rad-kbench: --buckets: at most %d row counts\n", RAD_KBENCH_MAX_ROWS), 2;
                if (!num("--buckets", item, 1, 1 << 20, &v)) return 2;
                o->rows[o->n_rows++] = v;
                if (!comma) break;
                p = comma + 1;
            }
            break;
        }
        case TP: {
            RadErr e = {0};
            if (rad_engine_deploy_flag(&o->deploy, "--tp", optarg, &e)) return fprintf(stderr, "%s: %s\n", "rad-kbench", e.msg), 2;
            break;
        }
        case KVTYPE: case KVCDT: case CVEC: case TPSPLIT: case STATEDT: case KVRES: case TPWIRE: case TPWMIN: { /* radiance's deployment switches */
            RadErr e = {0};
            char flag[32];
            snprintf(flag, sizeof flag, "--%s", lo[li].name);
            if (rad_engine_deploy_flag(&o->deploy, flag, optarg, &e)) return fprintf(stderr, "rad-kbench: %s\n", e.msg), 2;
            break;
        }
        case DET: o->deterministic = 1; break;
        case NOREPACK: o->no_repack = 1; break;
        case PDIR:
            if (o->n_plugin_dirs == 16) return fprintf(stderr, "rad-kbench: --plugin-dir: at most 16\n"), 2;
            o->plugin_dirs[o->n_plugin_dirs++] = optarg;
            break;
        case 'h': return -1;
        default:
            if (optopt && optopt < 256) fprintf(stderr, "rad-kbench: -%c: unknown option or missing value (--help)\n", optopt);
            else fprintf(stderr, "rad-kbench: %s: unknown option or missing value (--help)\n", argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) return fprintf(stderr, "rad-kbench: %s: unexpected argument\n", argv[optind]), 2;
    if (!o->model) return fprintf(stderr, "rad-kbench: -m MODEL.rad is required (--help)\n"), 2;
    if (!rad_select_tolerance(o->fast, o->tolerance, &o->tolerance))
        return fprintf(stderr, "rad-kbench: --fast is --max-tolerance %g: give one of them\n", RAD_SELECT_FAST_TOLERANCE), 2;
    return 0;
}

/* ---- the report -------------------------------------------------------------------------------- */

/* Rows of one op name with the same kernel, check, bucket, rows, shape and context: the layers'
 * copies of an op, one line of the table. */
typedef struct Line {
    int first;                     /* a row of the group */
    int n;                         /* rows (layers) */
    int n_fail;
    double max_err, mean_sum, ns_sum, gbs_sum, gflops_sum, share_sum, flop_share_sum;
    double use_max;                /* the largest share of its allowance an output used */
} Line;

static int same_line(const RadKbenchRow *a, const RadKbenchRow *b) {
    return strcmp(a->op_name, b->op_name) == 0 && strcmp(a->kernel, b->kernel) == 0 && strcmp(a->knobs, b->knobs) == 0 &&
           strcmp(a->check, b->check) == 0 &&
           a->bucket_lo == b->bucket_lo && a->rows == b->rows && strcmp(a->shape, b->shape) == 0 && a->ctx == b->ctx;
}

static Line *group(const RadKbenchReport *r, int *n_lines) {
    Line *l = calloc((size_t)(r->n ? r->n : 1), sizeof *l);
    int n = 0;
    if (!l) return NULL;
    for (int i = 0; i < r->n; i++) {
        const RadKbenchRow *x = &r->rows[i];
        int j = n - 1;
        for (; j >= 0 && !same_line(&r->rows[l[j].first], x); j--) {}
        if (j < 0) l[j = n++] = (Line){.first = i};
        Line *g = &l[j];
        g->n++, g->n_fail += !x->pass;
        if (x->max_err > g->max_err) g->max_err = x->max_err;
        if (x->allow_used > g->use_max) g->use_max = x->allow_used;
        g->mean_sum += x->mean_err, g->ns_sum += x->ns_med, g->gbs_sum += x->gbs, g->gflops_sum += x->gflops;
        g->share_sum += x->bound_share, g->flop_share_sum += x->flop_share;
    }
    *n_lines = n;
    return l;
}

/* The per-output bound class a row was checked against (docs/OPS.md), or NULL. */
static const char *bound_name(const RadKbenchRow *x) { return x->q8 ? "q8" : x->bf16 ? "bf16" : x->f8 ? "f8" : NULL; }

static void fmt_time(char *b, size_t n, double ns) {
    if (ns >= 1e6) snprintf(b, n, "%.2f ms", ns * 1e-6);
    else snprintf(b, n, "%.1f us", ns * 1e-3);
}

static void md_line(FILE *f, const Opts *o, const RadKbenchReport *r, const Line *g) {
    const RadKbenchRow *x = &r->rows[g->first];
    char tol[32], ctx[16];
    if (x->bitwise) snprintf(tol, sizeof tol, "bitwise");
    else if (bound_name(x)) snprintf(tol, sizeof tol, "%s bound (%.0f%%)", bound_name(x), 100 * g->use_max);
    else snprintf(tol, sizeof tol, "%.0e", x->tolerance);
    if (x->ctx) snprintf(ctx, sizeof ctx, "%u", x->ctx);
    else snprintf(ctx, sizeof ctx, "-");
    char pass[32];
    if (g->n_fail) snprintf(pass, sizeof pass, "**FAIL** (%d)", g->n_fail);
    else snprintf(pass, sizeof pass, "yes");
    fprintf(f, "| %s%s%s | %s | %" PRId64 "..%" PRId64 " | %" PRId64 " | %s | %s | %d | %.2e | %.2e | %s | %s |", x->kernel,
            x->knobs[0] ? " " : "", x->knobs, x->check, x->bucket_lo, x->bucket_hi, x->rows, x->shape, ctx, g->n, g->max_err, g->mean_sum / g->n,
            tol, pass);
    if (o->bench) {
        char t[32];
        fmt_time(t, sizeof t, g->ns_sum / g->n);
        if (!strcmp(x->check, "chain")) fprintf(f, " | | | | |");
        else if (g->gflops_sum > 0)
            fprintf(f, " %s | %.2f | %.2f | %.0f%% | %.0f%% |", t, g->gbs_sum / g->n, g->gflops_sum / g->n,
                    100 * g->share_sum / g->n, 100 * g->flop_share_sum / g->n);
        else fprintf(f, " %s | %.2f | - | %.0f%% | - |", t, g->gbs_sum / g->n, 100 * g->share_sum / g->n);
    }
    fputc('\n', f);
}

static void markdown(FILE *f, const Opts *o, const RadKbenchReport *r) {
    fprintf(f, "# rad-kbench: %s\n\n", o->model);
    fprintf(f, "Libraries: %s. Step bounds: %u tokens, %u sequences, context %s. Threads: %u. Kernels within %g%s.%s%s\n\n",
            o->kernels ? o->kernels : "all installed", o->max_tok ? o->max_tok : RAD_SERVE_MAX_TOK, o->max_seqs ? o->max_seqs : RAD_SERVE_MAX_SEQS,
            o->ctx ? "as given" : "the model's (capped at 8192)", r->n_threads,
            o->tolerance, o->fast ? " (--fast)" : "",
            o->knobs ? " Every knob value too." : "", o->quick ? " Quick mode." : "");
    fprintf(f, "Each kernel is compared with docs/OPS.md's f32 reference on the container's weights: bit for bit when it "
               "states `bitwise`, else by the per-row measure max_j |y-ref| / (max_j |ref| + 1e-6) within its stated "
               "tolerance; a q8-activation kernel (`q8 bound`), a bf16-product one (`bf16 bound`) or an fp8-activation one "
               "(`f8 bound`) output by output within "
               "docs/OPS.md's bound, with the "
               "largest share of it used. `chain` rows compare a fused kernel with its `replaces` chain on the selected kernels. "
               "Rows over several layers show the worst max error and the mean of the means.\n\n");
    if (o->bench)
        fprintf(f, "Timing: median per call over repeats after a warm-up (mean over layers). The bounds are this machine's, "
                   "on %u threads: read bandwidth %.2f GB/s (`bound` is GB/s over it; cache-resident operands can exceed "
                   "100%%) and f32 multiply-add rate %.1f GFLOP/s (`flops` is GFLOP/s over it, for the GEMMs and the "
                   "attention; integer q8 dots are not held to it).\n\n", r->n_threads, r->membw_gbs, r->peak_gflops);
    int n_lines;
    Line *l = group(r, &n_lines);
    if (!l) return;
    for (int i = 0; i < n_lines; i++) { /* one table per op name, in graph order */
        const RadKbenchRow *x = &r->rows[l[i].first];
        int earlier = 0;
        for (int j = 0; j < i && !earlier; j++) earlier = strcmp(r->rows[l[j].first].op_name, x->op_name) == 0;
        if (earlier) continue;
        fprintf(f, "\n## %s\n\n", x->op_name);
        fprintf(f, "| kernel | check | bucket | rows | shape | ctx | layers | max err | mean err | tolerance | pass |%s\n",
                o->bench ? " time | GB/s | GFLOP/s | bound | flops |" : "");
        fprintf(f, "|---|---|---|---|---|---|---|---|---|---|---|%s\n", o->bench ? "---|---|---|---|---|" : "");
        for (int j = i; j < n_lines; j++)
            if (strcmp(r->rows[l[j].first].op_name, x->op_name) == 0) md_line(f, o, r, &l[j]);
        if (o->bench) { /* one row is where an op streams its weights once: the bound that matters */
            int any = 0;
            for (int j = i; j < n_lines; j++) {
                const RadKbenchRow *y = &r->rows[l[j].first];
                if (strcmp(y->op_name, x->op_name) || y->rows != 1 || strcmp(y->check, "ref") || y->knobs[0]) continue;
                char at[24] = "";
                if (y->ctx) snprintf(at, sizeof at, " (context %u)", y->ctx);
                fprintf(f, "%s %s%s %.0f%%", any++ ? "," : "\nShare of the bound at one row:", y->kernel, at,
                        100 * l[j].share_sum / l[j].n);
            }
            if (any) fprintf(f, " (of %.2f GB/s).\n", r->membw_gbs);
        }
    }
    free(l);
    if (r->n_fail) {
        fprintf(f, "\n## Failures\n\n| op | kernel | check | bucket | rows | shape | ctx | max err | tolerance | why |\n"
                   "|---|---|---|---|---|---|---|---|---|---|\n");
        for (int i = 0; i < r->n; i++) {
            const RadKbenchRow *x = &r->rows[i];
            if (x->pass) continue;
            char over[32] = "over the tolerance";
            if (bound_name(x)) snprintf(over, sizeof over, "over its %s bound", bound_name(x));
            fprintf(f, "| #%d %s | %s%s%s | %s | %" PRId64 "..%" PRId64 " | %" PRId64 " | %s | %u | %.2e | %s%.0e | %s |\n", x->op,
                    x->op_name, x->kernel, x->knobs[0] ? " " : "", x->knobs, x->check, x->bucket_lo, x->bucket_hi, x->rows, x->shape, x->ctx, x->max_err,
                    x->bitwise ? "bitwise " : "", x->tolerance, x->why[0] ? x->why : over);
        }
    }
    if (r->n_skipped) fprintf(f, "\nNo reference here (not checked): %s.\n", r->skipped);
}

static json_t *to_json(const Opts *o, const RadKbenchReport *r) {
    json_t *root = json_object(), *rows = json_array();
    json_object_set_new(root, "model", json_string(o->model));
    json_object_set_new(root, "kernels", o->kernels ? json_string(o->kernels) : json_null());
    json_object_set_new(root, "threads", json_integer(r->n_threads));
    json_object_set_new(root, "quick", json_boolean(o->quick));
    json_object_set_new(root, "knobs", json_boolean(o->knobs));
    json_object_set_new(root, "membw_gbs", o->bench ? json_real(r->membw_gbs) : json_null());
    json_object_set_new(root, "peak_gflops", o->bench ? json_real(r->peak_gflops) : json_null());
    json_t *sum = json_object();
    json_object_set_new(sum, "checks", json_integer(r->n));
    json_object_set_new(sum, "failed", json_integer(r->n_fail));
    json_object_set_new(sum, "ops", json_integer(r->n_ops));
    json_object_set_new(sum, "skipped", json_string(r->skipped));
    json_object_set_new(root, "summary", sum);
    for (int i = 0; i < r->n; i++) {
        const RadKbenchRow *x = &r->rows[i];
        json_t *j = json_object(), *b = json_array();
        json_object_set_new(j, "op", json_string(x->op_name));
        json_object_set_new(j, "op_index", json_integer(x->op));
        json_object_set_new(j, "kernel", json_string(x->kernel));
        json_object_set_new(j, "knobs", json_string(x->knobs));
        json_object_set_new(j, "check", json_string(x->check));
        json_array_append_new(b, json_integer(x->bucket_lo));
        json_array_append_new(b, json_integer(x->bucket_hi));
        json_object_set_new(j, "bucket", b);
        json_object_set_new(j, "rows", json_integer(x->rows));
        json_object_set_new(j, "shape", json_string(x->shape));
        json_object_set_new(j, "ctx", json_integer(x->ctx));
        char exactness[16] = "tolerance"; /* q8act, bf16act, f8act: the bound class's name */
        if (x->bitwise) snprintf(exactness, sizeof exactness, "bitwise");
        else if (bound_name(x)) snprintf(exactness, sizeof exactness, "%sact", bound_name(x));
        json_object_set_new(j, "exactness", json_string(exactness));
        json_object_set_new(j, "allowance_used", json_real(x->allow_used));
        json_object_set_new(j, "tolerance", json_real(x->tolerance));
        json_object_set_new(j, "max_err", json_real(x->max_err));
        json_object_set_new(j, "mean_err", json_real(x->mean_err));
        json_object_set_new(j, "n_diff", json_integer((json_int_t)x->n_diff));
        json_object_set_new(j, "pass", json_boolean(x->pass));
        json_object_set_new(j, "why", json_string(x->why));
        if (o->bench) {
            json_object_set_new(j, "ns_median", json_real(x->ns_med));
            json_object_set_new(j, "ns_min", json_real(x->ns_min));
            json_object_set_new(j, "ns_max", json_real(x->ns_max));
            json_object_set_new(j, "bytes", json_integer((json_int_t)x->bytes));
            json_object_set_new(j, "flops", json_integer((json_int_t)x->flops));
            json_object_set_new(j, "gbs", json_real(x->gbs));
            json_object_set_new(j, "gflops", json_real(x->gflops));
            json_object_set_new(j, "bound_share", json_real(x->bound_share));
            json_object_set_new(j, "flop_share", json_real(x->flop_share));
        }
        json_array_append_new(rows, j);
    }
    json_object_set_new(root, "rows", rows);
    return root;
}

/* One line per failing (kernel, check, bucket), with its worst case. */
static void name_failures(const RadKbenchReport *r) {
    for (int i = 0; i < r->n; i++) {
        const RadKbenchRow *x = &r->rows[i];
        if (x->pass) continue;
        int seen = 0;
        for (int j = 0; j < i && !seen; j++) {
            const RadKbenchRow *y = &r->rows[j];
            seen = !y->pass && strcmp(y->kernel, x->kernel) == 0 && strcmp(y->knobs, x->knobs) == 0 &&
                   strcmp(y->check, x->check) == 0 && y->bucket_lo == x->bucket_lo;
        }
        if (seen) continue;
        const RadKbenchRow *w = x;
        for (int j = i + 1; j < r->n; j++) {
            const RadKbenchRow *y = &r->rows[j];
            if (!y->pass && strcmp(y->kernel, x->kernel) == 0 && strcmp(y->knobs, x->knobs) == 0 &&
                strcmp(y->check, x->check) == 0 && y->bucket_lo == x->bucket_lo && (y->bitwise ? y->max_err > w->max_err : y->allow_used > w->allow_used))
                w = y;
        }
        char tol[40];
        if (w->bitwise) snprintf(tol, sizeof tol, "bitwise (%" PRIu64 " elements differ)", w->n_diff);
        else if (bound_name(w)) snprintf(tol, sizeof tol, "an output at %.0f%% of its %s bound", 100 * w->allow_used, bound_name(w));
        else snprintf(tol, sizeof tol, "tolerance %.0e", w->tolerance);
        char shape[48] = "";
        if (w->ctx) snprintf(shape, sizeof shape, " (%s, context %u)", w->shape, w->ctx);
        fprintf(stderr, "rad-kbench: FAIL %s%s%s bucket %" PRId64 "..%" PRId64 "%s: max err %.2e, %s; op #%d '%s', %" PRId64
                        " rows%s%s%s\n",
                w->kernel, w->knobs[0] ? " " : "", w->knobs, w->bucket_lo, w->bucket_hi, strcmp(w->check, "chain") ? "" : " against its chain", w->max_err,
                tol, w->op, w->op_name, w->rows, shape, w->why[0] ? ": " : "", w->why);
    }
}

int main(int argc, char **argv) {
    rad_stdout_init();
    Opts o = {0};
    int rc = parse(argc, argv, &o);
    if (rc == -1) return usage(stdout), rad_stdout_close("rad-kbench", 0);
    if (rc) return rc;
    RadEngineOpts eo = {.model = o.model, .plugin_dirs = o.plugin_dirs, .n_plugin_dirs = o.n_plugin_dirs,
                        .kernels = o.kernels, .kernels_any_device = 1, .n_threads = o.threads, .max_tok = o.max_tok ? o.max_tok : RAD_SERVE_MAX_TOK,
                        .max_seqs = o.max_seqs ? o.max_seqs : RAD_SERVE_MAX_SEQS, .max_ctx = o.ctx, .deterministic = o.deterministic,
                        .max_tolerance = o.tolerance, .no_repack = o.no_repack};
    rad_engine_deploy_apply(&eo, &o.deploy);
    RadErr e = {0};
    RadEngine *en = NULL;
    if ((rc = rad_engine_open(&en, &eo, &e))) return fprintf(stderr, "rad-kbench: %s\n", e.msg), 1;
    if (o.ops) { /* a pattern that names nothing is a mistake, not a pass */
        const RadGraph *g = rad_engine_graph(en);
        int hit = 0;
        for (int i = 0; i < g->n_ops && !hit; i++) hit = fnmatch(o.ops, g->ops[i].op, 0) == 0;
        if (!hit) {
            fprintf(stderr, "rad-kbench: --ops '%s': matches no op of the model's graph\n", o.ops);
            rad_engine_close(en);
            return 2;
        }
    }
    RadKbenchOpts ko = {.model = o.model, .ops = o.ops, .quick = o.quick, .bench = o.bench, .knobs = o.knobs, .n_threads = o.threads,
                        .rows = o.rows, .n_rows = o.n_rows,
                        .progress = isatty(2) ? rad_kbench_progress_bar : NULL};
    RadKbenchReport r;
    rc = rad_kbench_run(en, &ko, &r, &e);
    rad_engine_close(en);
    if (rc) {
        fprintf(stderr, "rad-kbench: %s\n", e.msg);
        rad_kbench_report_free(&r);
        return 1;
    }
    if (o.n_rows && r.n == 0) { /* as --ops matching nothing: a mistake, not a pass */
        fprintf(stderr, "rad-kbench: --buckets: no bucket of the checked ops holds these row counts (the step bounds cap them)\n");
        rad_kbench_report_free(&r);
        return 2;
    }
    int out_rc = 0;
    if (o.report) {
        FILE *f = fopen(o.report, "w");
        if (!f) fprintf(stderr, "rad-kbench: --report %s: cannot write\n", o.report), out_rc = 1;
        else {
            markdown(f, &o, &r);
            if (ferror(f) | fclose(f)) fprintf(stderr, "rad-kbench: --report %s: write failed\n", o.report), out_rc = 1;
        }
    }
    if (o.json) {
        json_t *j = to_json(&o, &r);
        char *s = json_dumps(j, JSON_INDENT(1));
        if (s) fputs(s, stdout), fputc('\n', stdout);
        free(s);
        json_decref(j);
    } else if (!o.report) {
        markdown(stdout, &o, &r);
    }
    name_failures(&r);
    char verdict[64];
    if (r.n_fail) snprintf(verdict, sizeof verdict, "%d failed", r.n_fail);
    else snprintf(verdict, sizeof verdict, "every kernel passes");
    fprintf(stderr, "rad-kbench: %d checks of %d ops (%s): %s%s%s\n", r.n, r.n_ops, o.kernels ? o.kernels : "all libraries",
            verdict, r.n_skipped ? "; no reference for " : "", r.n_skipped ? r.skipped : "");
    const int fail = r.n_fail > 0;
    rad_kbench_report_free(&r);
    return rad_stdout_close("rad-kbench", out_rc || fail ? 1 : 0);
}
