/* rad_select.h — the kernel selector: which kernel of which library serves an op over a bucket
 * of its RAD_RANGE under the deployment's options (library order, max tolerance, deterministic).
 * The one rule behind the builder's rad_op_resolved, rad_op_declared and rad_kv_block_size and
 * behind the engine's per-bucket tables (docs/PLUGINS.md, "How the selector chooses"). */
#ifndef RAD_SELECT_H
#define RAD_SELECT_H

#include "abi/rad_kernels.h"
#include "libcommon/plugin/rad_plugins.h"

#define RAD_SELECT_DEFAULT_TOLERANCE 1e-3 /* max_tolerance <= 0: the oracle's exact paths */
#define RAD_SELECT_FAST_TOLERANCE 2e-2    /* --fast (every tool): q8-activation GEMMs, llama.cpp's class */
/* Every tool's --fast and --max-tolerance T (given: 0 when absent) as one bound in *out: T, else
 * the fast bound under --fast, else the default; 0 when both are given and differ. */
int rad_select_tolerance(int fast, double given, double *out);
#define RAD_SELECT_DEFAULT_KV_BLOCK 16u   /* no attention kernel asks a block size */

/* rad-tune's table (--tune FILE, libcommon/plugin/rad_tune.h): rule 1 of the selector. */
struct RadTuneTable;

typedef struct RadSelectOpts {
    const RadPluginSet *libs;   /* kernel libraries in --kernels order (entries that are not kernel
                                   libraries are skipped); NULL: none */
    double max_tolerance;       /* a TOLERANCE kernel looser than this is not chosen;
                                   <= 0: RAD_SELECT_DEFAULT_TOLERANCE */
    int deterministic;          /* batch-invariant kernels before every other one */
    const struct RadTuneTable *tune; /* the tuning table (its key already checked against the run); NULL: none */
} RadSelectOpts;

/* An op as the builder records it: what selection reads of it. */
typedef struct RadSelectOp {
    const char *op;             /* vocabulary name */
    const RadParam *params;     /* [n_params]; the RAD_PARAM_RANGE one gives the buckets */
    uint32_t n_params;
    const RadEnc *w_enc;        /* [n_w] stored encodings of its weights (RAD_ENC_COUNT: absent) */
    uint32_t n_w;
    int32_t index1;             /* its declared index + 1, what a tuning table names it by (0: not a
                                   declared op: the table is not consulted) */
} RadSelectOp;

/* The one choice: the kernel that serves `op` over every row count in [lo, hi] (a bucket), and
 * its library in *lib (index into o->libs; lib may be NULL). Rule 1: the tuning table's entry
 * for (op, bucket) when its kernel is valid here (exists, covers the rows, takes the weights,
 * within the tolerance, batch-invariant under deterministic, its knob values allowed); else
 * the default rule (library order, first fit). NULL when none does, with a short
 * reason in why_buf when given ("no library defines this op", "no kernel accepts weight
 * encoding q4_1", "... looser than the max tolerance 0.001 ...", "no kernel covers rows 3..4"):
 * the text --debug-graph shows. */
const RadKernel *rad_select_kernel(const RadSelectOpts *o, const RadSelectOp *op, int64_t lo, int64_t hi, int *lib,
                                   char *why_buf, size_t why_n);

/* An op's bucket table: its range [range_lo, range_hi] cut at powers of two (where a tuning
 * table may differ) and at every candidate's n_min / n_max + 1, each bucket picked by
 * rad_select_kernel. Arrays are malloc'd; free with rad_select_table_free. */
typedef struct RadSelectTable {
    const RadKernel **k;        /* [n] every kernel that fits the op (name, weights, tolerance), in
                                   preference order: --debug-graph lists them */
    int *k_lib;                 /* [n] their libraries */
    int n;
    int64_t *lo;                /* [n_buckets] ascending: bucket i covers rows [lo[i], lo[i+1]) */
    const RadKernel **pick;     /* [n_buckets] the kernel serving bucket i (NULL: none) */
    int *pick_lib;              /* [n_buckets] its library (-1: none) */
    int n_buckets;              /* the last bucket ends at range_hi */
    int64_t range_lo, range_hi;
    int served;                 /* every bucket has a pick */
    char why[200];              /* why these picks, or the first bucket no kernel serves and why */
    /* under a tuning table only (NULL without one): */
    int *tune_line;             /* [n_buckets] the table line the pick came from (0: the default rule) */
    int64_t *knobs;             /* [n_buckets * RAD_KNOB_MAX] the pick's knob values, its knob order */
    uint32_t *n_knobs;          /* [n_buckets] how many of them (0: the kernel's defaults) */
    char (*tune_note)[160];     /* [n_buckets] why a table entry for the bucket was not taken ("": none was) */
} RadSelectTable;

/* The outcome of rule 1 for one bucket (rad_select_kernel_tuned). */
typedef struct RadSelectTune {
    int line;                   /* the table line the kernel came from (0: the default rule decided) */
    int64_t knobs[RAD_KNOB_MAX];/* its knob values in the kernel's order (defaults where the entry is silent) */
    uint32_t n_knobs;
    char note[160];             /* an entry that was skipped and why ("": none, or none was skipped) */
} RadSelectTune;

/* rad_select_kernel, also saying what the table did (tu may be NULL). */
const RadKernel *rad_select_kernel_tuned(const RadSelectOpts *o, const RadSelectOp *op, int64_t lo, int64_t hi, int *lib,
                                         RadSelectTune *tu, char *why_buf, size_t why_n);

/* Builds t for op. RAD_OK whether or not every bucket is served (t->served, t->why);
 * RAD_E_NOMEM when out of memory. */
int rad_select_table(const RadSelectOpts *o, const RadSelectOp *op, RadSelectTable *t);
void rad_select_table_free(RadSelectTable *t);

/* Whether the engine will have a kernel for every bucket of the op's RAD_RANGE: what
 * rad_op_resolved answers. */
static inline int rad_select_served(const RadSelectTable *t) { return t->n_buckets > 0 && t->served; }

/* The bucket of n rows, or -1 when n is outside the table or its pick does not serve n. Inline:
 * every issue of a step asks it. */
static inline int rad_select_bucket(const RadSelectTable *t, int64_t n) {
    if (!t->n_buckets || n < t->lo[0]) return -1;
    int a = 0, b = t->n_buckets - 1;
    while (a < b) {
        int m = (a + b + 1) / 2;
        if (t->lo[m] <= n) a = m;
        else b = m - 1;
    }
    const RadKernel *k = t->pick[a];
    return k && n >= k->n_min && (!k->n_max || n <= k->n_max) ? a : -1;
}

/* Whether any library in o defines a kernel for op (rad_op_declared: an optional op exists). */
int rad_select_declared(const RadSelectOpts *o, const char *op);

/* "lib:variant, ..." of the kernels for op whose layout refuses encoding enc, into buf; the
 * count. For the declare-time encoding check's message. */
int rad_select_enc_refusers(const RadSelectOpts *o, const char *op, RadEnc enc, char *buf, size_t n);

/* The KV block size a group gets: the kv_block_size of the attention kernel (attn_paged)
 * selection picks for one row (decode) over the group's window (0: full; a WINDOW group's
 * kernel must serve it), or RAD_SELECT_DEFAULT_KV_BLOCK when it asks none or none is picked.
 * max_tok is the step's row bound (the op's range). */
uint32_t rad_select_kv_block_size(const RadSelectOpts *o, uint32_t max_tok, uint32_t window);

/* A picked attention kernel against the KV group it reads: its kv_block_size (0: any), its KV
 * encodings (kv_encs; 0: f32/f16/bf16) and kvq_ok (when kv_quant is narrow). RAD_OK, or
 * RAD_E_UNSUPPORTED with one line in buf: "kernel LIB/OP/VARIANT: kv_block_size 32 but group
 * 'kv' uses 16". */
int rad_select_check_kv(const RadKernel *k, const char *lib, const char *group, uint32_t block_size, RadDType kv_dtype,
                        RadKvQuant kv_quant, char *buf, size_t n);

#endif
