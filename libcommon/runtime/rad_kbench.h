/* rad_kbench.h — the kernel checker behind rad-kbench: every op of an open engine's graph, at
 * each bucket of its RAD_RANGE and a few row counts inside it, run on every candidate kernel of
 * the bucket (RadSelectTable.k, not only the pick) with the container's weights (the bytes the
 * engine bound, packed where it packed them), activations with realistic statistics and, for
 * attention, a paged KV cache filled at several context lengths; each result compared with
 * docs/OPS.md's f32 reference (rad_kbench_ref.h), bitwise for a RAD_EXACT_BITWISE kernel and by
 * the per-row measure within its own tolerance otherwise; each fused op also against its chain
 * (`replaces`) run on the selected kernels. Optionally timed (docs/TOOLS.md, "rad-kbench"). */
#ifndef RAD_KBENCH_H
#define RAD_KBENCH_H

#include <stdint.h>

#include "libcommon/base/rad_err.h"
#include "libcommon/runtime/rad_engine.h"

#define RAD_KBENCH_KNOBS 80        /* a row's knob setting as text, with its NUL */
#define RAD_KBENCH_MAX_ROWS 16     /* --buckets: row counts at most */

struct RadKbenchReport;

typedef struct RadKbenchOpts {
    const char *model;             /* the container the engine opened (the reference decodes its stored bytes) */
    const char *ops;               /* fnmatch(3) glob over op names; NULL: every op */
    int quick;                     /* one row count per bucket, context lengths 17 and 300 (make test) */
    int bench;                     /* time every kernel (warm-up, repeats: median, min, max) */
    int knobs;                     /* also run each kernel at every other value of each of its knobs, one knob at a
                                      time (the rest at their defaults), where the knob acts (RadKnob.n_max) */
    uint32_t n_threads;            /* the reference's and the bandwidth loop's threads (0: the engine's) */
    void (*progress)(void *user, uint64_t done, uint64_t total); /* after each case; NULL: none */
    void *progress_user;
    const int64_t *rows;           /* [n_rows] --buckets: check only at these row counts (each in its bucket); */
    int n_rows;                    /* 0: each bucket's first, middle and last (quick: first) */
    const uint8_t *op_mask;        /* [the graph's n_ops] 0: skip op i (as if --ops left it out); NULL: every op */
    /* after each op's checks, its rows r->rows[first, r->n) (rad-tune journals them); NULL: none */
    void (*on_op)(void *user, const struct RadKbenchReport *r, int first, int op);
    void *on_op_user;
} RadKbenchOpts;

/* One check: a kernel on one case of one op. */
typedef struct RadKbenchRow {
    int op;                        /* the op's index in the graph */
    char op_name[32];              /* its name (the graph's, copied: the report outlives the engine) */
    char kernel[128];              /* "lib:op:variant" */
    char knobs[RAD_KBENCH_KNOBS];  /* the knob set other than its default ("prefetch=2048"); "": the defaults */
    char check[8];                 /* "ref": against the reference; "chain": the fused op against its chain */
    int64_t bucket_lo, bucket_hi;  /* the bucket of the op's table */
    int64_t rows;                  /* the call's rows (RadKernelArgs.n) */
    char shape[12];                /* "decode", "mixed", "prefill", or "rows" for ops without phases */
    uint32_t ctx;                  /* attention: the longest sequence's context after the step; else 0 */
    int bitwise;                   /* 1: the kernel states RAD_EXACT_BITWISE (checked bit for bit) */
    int q8;                        /* 1: checked output by output against docs/OPS.md's q8-activation bound (a
                                      RAD_EXACT_Q8ACT kernel, or a chain with one), with `tolerance` beside it */
    int bf16;                      /* 1: the same against the bf16-product bound (RAD_EXACT_BF16ACT, or a chain with one) */
    int f8;                        /* 1: the same against the fp8-activation bound (RAD_EXACT_F8ACT, or a chain with one) */
    double tolerance;              /* the per-row bound checked (0 when bitwise); q8: the kernel's stated per-row figure */
    double allow_used;             /* the largest |y - ref| over what the check allows that output (pass: <= 1) */
    double max_err;                /* the largest per-row measure max_j |y-ref| / (max_j |ref| + 1e-6) */
    double mean_err;               /* the mean over elements of |y-ref| / (max_j |ref| + 1e-6) of its row */
    uint64_t n_diff;               /* elements whose bits differ from the reference */
    int pass;
    char why[160];                 /* a failure's reason beyond the numbers ("run: RAD_E_SHAPE", "NaN in row 3") */
    /* --bench (0 otherwise) */
    double ns_med, ns_min, ns_max; /* per call */
    uint64_t bytes;                /* operands read and written (weights as stored or packed, activations, KV) */
    uint64_t flops;                /* GEMMs and attention: 2 per multiply-add; 0 where not meaningful */
    double gbs, gflops;            /* bytes / ns_med, flops / ns_med */
    double bound_share;            /* gbs over the measured read bandwidth */
    double flop_share;             /* gflops over the measured f32 FMA peak (0 where flops is 0) */
} RadKbenchRow;

typedef struct RadKbenchReport {
    RadKbenchRow *rows;            /* [n] in graph order, then bucket, rows, case, kernel */
    int n, cap;
    int n_fail;                    /* rows with pass == 0 */
    int n_ops;                     /* ops checked */
    int n_skipped;                 /* ops with no reference here (named in skipped) */
    char skipped[256];             /* "op_a, op_b" */
    double membw_gbs;              /* --bench: the read bandwidth measured at n_threads; 0 otherwise */
    double peak_gflops;            /* --bench: the f32 FMA rate measured at n_threads; 0 otherwise */
    uint32_t n_threads;            /* what the reference and the bandwidth loop ran on */
} RadKbenchReport;

/* Checks every op of en's graph that the plugin did not decline and whose name matches o->ops.
 * RAD_OK when the checks ran (whatever they found: r->n_fail); an error when they could not
 * (the container unreadable, out of memory), with one line in e. Free r with
 * rad_kbench_report_free, also on failure. */
int rad_kbench_run(RadEngine *en, const RadKbenchOpts *o, RadKbenchReport *r, RadErr *e);
void rad_kbench_report_free(RadKbenchReport *r);

/* A RadKbenchOpts.progress for a terminal: a bar of cases done on stderr, cleared at the end. */
void rad_kbench_progress_bar(void *user, uint64_t done, uint64_t total);

/* The machine's read bandwidth in GB/s on n_threads threads: a sum of wide loads over a 256 MiB
 * buffer on transparent huge pages, best of 3 passes (bench/membw.c's loop). 0 on failure. */
double rad_kbench_membw(uint32_t n_threads);

/* The machine's f32 multiply-add rate in GFLOP/s on n_threads threads (2 flops per FMA; 8-wide
 * AVX2 FMA chains where the CPU has them, portable C elsewhere), best of 3 passes: the compute
 * bound a GEMM's or attention's GFLOP/s is shared against. 0 on failure. */
double rad_kbench_peak_gflops(uint32_t n_threads);

#endif
