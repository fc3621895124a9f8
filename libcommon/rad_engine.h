/* rad_engine.h — the engine: a container mapped, its architecture plugin declared against the
 * deployment, kernels selected from the loaded libraries, one arena for activations, the
 * paged KV cache, and steps run through the plugin's rad_arch_step. */
#ifndef RAD_ENGINE_H
#define RAD_ENGINE_H

#include "abi/rad_arch.h"
#include "abi/rad_kernels.h"
#include "rad_builder.h"
#include "rad_container.h"
#include "rad_kvcache.h"
#include "rad_model.h"
#include "rad_plugins.h"

typedef struct RadEngineOpts {
    const char *model;             /* a .rad container */
    const char *const *plugin_dirs;/* --plugin-dir, in order */
    int n_plugin_dirs;
    const char *kernels;           /* "ref,kern_test": libraries by name, in preference order; NULL: all, by load order */
    uint32_t n_threads;            /* 0: all cores */
    uint32_t max_tok;              /* tokens per step (prefill chunk) */
    uint32_t max_seqs;
    uint32_t max_ctx;              /* 0: the model's n_ctx_train, capped at 8192 */
    uint32_t kv_blocks;            /* 0: enough for max_seqs sequences of max_ctx, within a
                                      quarter of physical memory (at least one full context) */
    RadDType kv_dtype;             /* RAD_F32 (default) */
    int deterministic;             /* prefer batch-invariant kernels */
    uint32_t max_out_rows;         /* logits rows a step may return (0: the plugin's rule) */
    int profile;                   /* time every issued op (rad_engine_dump_profile) */
    int mmap_weights;              /* kernels read weights in the file mapping (no copy; slower
                                      decode, shared page cache); 0: copied into huge pages */
    int no_verify;                 /* 1: skip the planes' checksums at load (--no-verify); 0: every
                                      plane the engine reads is verified as it is copied */
    int no_repack;                 /* keep every weight in its stored layout; 0: a kernel library
                                      packs the weights only its kernels read (RadKernelLib.pack) */
    double max_tolerance;          /* kernels whose stated tolerance is looser are not chosen;
                                      0: 1e-3 (exact paths: the oracle's greedy text); 2e-2 lets
                                      quantised GEMMs quantise activations as llama.cpp does */
} RadEngineOpts;

typedef struct RadEngineWeight {
    RadKArg arg;                   /* as kernels see it: bytes in wstore, or in the file mapping */
} RadEngineWeight;

typedef struct RadEngineKernels {
    const RadSelectTable *sel;     /* the op's candidates and per-bucket picks: the graph's (RadGOp.sel),
                                      chosen at declare under the engine's options */
    int32_t layer;                 /* the op's "layer" parameter when it names a KV layer, else -1 */
} RadEngineKernels;

typedef struct RadEngine {
    RadCtx head;                   /* what the plugin's step sees; must stay first */
    RadEngineOpts o;
    RadModelFile m;
    RadModelMeta meta;
    char **kv_keys, **kv_vals;
    RadPluginSet plugins;
    const RadPlugin *arch;
    const RadPlugin **libs;        /* [n_libs] kernel libraries used, preference order */
    void **lib_state;              /* [n_libs] what init returned */
    int n_libs;
    RadPluginSet sel;              /* the same libraries as a set, for the builder */
    RadSelectOpts select;          /* sel, max_tolerance, deterministic: what every op is resolved under */
    RadBuildCtx ctx;
    RadGraph g;
    RadEngineWeight *w;            /* [g.n_w] */
    uint8_t *wstore;               /* weights copied (or decompressed) into one anonymous map */
    size_t wstore_bytes;           /* its length (whole 2 MiB pages) */
    int wstore_huge;               /* huge pages asked for it (madvise accepted; THP decides) */
    int n_packed;                  /* tensors a kernel library packed at load */
    uint64_t packed_bytes;         /* their stored bytes */
    RadEngineKernels *cand;        /* [g.n_ops] */
    uint8_t *arena;                /* transient buffers (g.arena_bytes) */
    uint8_t *persist;              /* persistent and derived buffers */
    uint8_t *workspace;            /* the largest workspace any selected kernel asks */
    size_t workspace_bytes;
    RadKvCache *kv;                /* [g.n_kvs] */
    int32_t **step_table;          /* [g.n_kvs][max_seqs * max_blocks]: block tables in batch order */
    int32_t *step_i32;             /* scratch for a step's batch arrays (see step_seqs) */
    RadKvState *kv_state;          /* [g.n_layer_kv] per layer, rebuilt each step */
    const RadBatch *batch;         /* the step being run */
    int step_failed;
    char step_msg[512];
    int guard;                     /* rad_model_guard slot over the file mapping, or -1 */
    int changed;                   /* --mmap: the file changed under the mapping; every step fails */
    char changed_msg[512];
    uint64_t n_issues;             /* ops issued, for --debug-graph and timing */
    uint64_t *prof_ns, *prof_calls;/* [g.n_ops] when o.profile: time in each op's kernel, calls */
    uint64_t prof_step_ns, prof_steps; /* whole steps (the plugin's own work and the kernels) */
} RadEngine;

int rad_engine_open(RadEngine *en, const RadEngineOpts *o, RadErr *e);
void rad_engine_close(RadEngine *en);

/* With --mmap, NULL while the file is as it was at open; once it changed under the mapping,
 * the one-line reason ("FILE: changed while mapped (--mmap): ..."): every step since has failed
 * with it, and a server should stop admitting, fail what is left and exit
 * RAD_EXIT_MODEL_CHANGED (docs/TOOLS.md, "A file that changes under the server"). */
const char *rad_engine_fail_closed(const RadEngine *en);

/* Runs one step over `b` (built by the caller with rad_engine_batch_*). The KV blocks of the
 * step's sequences must be reserved first (rad_kvcache_reserve). */
int rad_engine_step(RadEngine *en, const RadBatch *b, RadErr *e);

/* One sequence's part of a step: n new tokens at positions [pos, pos+n). */
typedef struct RadEngineSeq {
    int32_t seq_id;                /* the caller's id; a KV slot is taken on first use */
    const int32_t *tokens;         /* [n] */
    uint32_t n;                    /* >= 1; n == 1 is a decode row */
    uint32_t pos;                  /* tokens of this sequence already in the cache */
    int want_logits;               /* logits of tokens[n-1] */
} RadEngineSeq;

/* One step over several sequences (prefill, decode or mixed): the engine orders decode rows
 * first, reserves KV blocks (RAD_E_LIMIT, nothing run, when they run out) and runs the step.
 * out_row[i] receives the logits row of seqs[i] (-1 when not wanted). Sum of n <= max_tok,
 * n_seq <= max_seqs, distinct seq_ids. */
int rad_engine_step_seqs(RadEngine *en, const RadEngineSeq *seqs, uint32_t n_seq, int32_t *out_row, RadErr *e);

/* Grows a sequence's KV to hold len tokens (taking a slot on first use); RAD_E_LIMIT when the
 * blocks or slots run out (nothing taken then). */
int rad_engine_reserve(RadEngine *en, int32_t seq_id, uint32_t len, RadErr *e);

/* The logits the step produced: [n_out][n_vocab]. */
const float *rad_engine_logits(const RadEngine *en, uint32_t *n_vocab);

/* One sequence's forward over `n` new tokens at positions [pos, pos+n), cut into steps of at
 * most max_tok; logits of the last token when want_logits. */
int rad_engine_forward(RadEngine *en, int32_t seq_id, const int32_t *tokens, uint32_t n, uint32_t pos,
                       int want_logits, RadErr *e);
void rad_engine_drop_seq(RadEngine *en, int32_t seq_id);

/* Teacher forcing: the logits of every one of n tokens into out[n][n_vocab] (the engine must be
 * opened with max_out_rows >= max_tok). */
int rad_engine_forward_all(RadEngine *en, int32_t seq_id, const int32_t *tokens, uint32_t n, uint32_t pos, float *out,
                           RadErr *e);

/* --debug-graph: every op, its resolved kernel and why. --debug-placement: the plan. */
/* --profile: time per op (summed over layers by op name and kernel), against whole steps. */
void rad_engine_dump_profile(const RadEngine *en, FILE *f);
void rad_engine_dump_graph(const RadEngine *en, FILE *f);
void rad_engine_dump_placement(const RadEngine *en, FILE *f);

#endif
