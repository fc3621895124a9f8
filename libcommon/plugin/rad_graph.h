/* rad_graph.h — runs a plugin's rad_arch_declare the way the core does and records what it
 * declared: the graph (weights, name map, buffers, KV groups, ops with their reads/writes), the
 * op resolution against the kernel libraries, and the buffer plan (one arena, sized once). */
#ifndef RAD_BUILDER_H
#define RAD_BUILDER_H

#include "abi/rad_arch.h"
#include "abi/rad_kernels.h"
#include "libcommon/base/rad_err.h"
#include "libcommon/plugin/rad_plugins.h"
#include "libcommon/plugin/rad_select.h"

typedef struct RadGWeight {
    char *name;
    RadWeightDecl d;      /* as declared; d.row_parts/source/planes point into owned copies */
    RadEnc enc;           /* stored encoding (RAD_ENC_COUNT: absent) */
    uint64_t stored_rows; /* dim 0 as stored (undivided), 0 when the lookup gave no shape */
    uint32_t stored_rank; /* the stored tensor's rank (0: the lookup gave no shape) */
    uint64_t stored_shape[4]; /* [stored_rank] undivided */
} RadGWeight;

/* A rank's slice of a stored weight (tensor parallelism): spans of dim `axis` of the stored
 * tensor, in order; together they are the declared (divided) extent of that dim. One span
 * [0, stored) when the weight is whole on this rank. */
#define RAD_GRAPH_MAX_SPANS 8
typedef struct RadGSlice {
    uint32_t axis;        /* 0: rows (SHARD_ROW), 1: columns (SHARD_COL) */
    uint32_t n;           /* spans */
    uint64_t begin[RAD_GRAPH_MAX_SPANS], len[RAD_GRAPH_MAX_SPANS];
    int whole;            /* 1: the whole stored tensor (one span covering it) */
} RadGSlice;

typedef struct RadGMap {
    RadNameMap m;         /* m.dst and m.src point into owned copies */
    int n_src;
} RadGMap;

typedef struct RadGBuf {
    char *name;
    RadBufDecl d;
    uint64_t bytes;       /* at the step bounds */
    int first, last;      /* op indices of first and last use (-1: never used) */
    int concurrent;       /* touched from lane 1 */
    int undeclared_use;   /* used by no op's reads/writes: live for the whole program */
    uint64_t offset;      /* in the arena (RAD_BUF_TRANSIENT), or in the persist region */
} RadGBuf;

typedef struct RadGKv {
    char *name;
    RadKvDecl d;
    uint32_t block_size;  /* the kv_block_size of the attention kernel selection picks (rad_select_kv_block_size) */
    int zero, replicated, dense_read;
} RadGKv;

typedef struct RadGOp {
    char *op;
    RadParam *params;     /* names owned */
    uint32_t n_params;
    rad_weight *w;
    uint32_t n_w;
    rad_buf *reads, *writes;
    uint32_t n_reads, n_writes;
    int lane1;            /* declared inside the lane-1 window */
    RadSelectTable sel;        /* the selector's candidates and per-bucket picks, under the graph's
                                  options: what the engine runs (sel.why: why, for --debug-graph) */
    const RadKernel *kernel;   /* the first bucket's kernel when every bucket is served (NULL: unresolved) */
    const char *kernel_lib;    /* its library's name */
    int declined;              /* the plugin asked rad_op_resolved and got false: it emits the chain
                                  instead and never issues this op */
} RadGOp;

/* The stored encoding and shape of a declared weight, as the container (or, at convert time,
 * the plan from the name map) holds it: RAD_ENC_COUNT when absent. `maps` are the name-map
 * entries declared so far. */
typedef RadEnc (*RadWeightLookup)(void *user, const char *name, const RadWeightDecl *d, const RadGMap *maps,
                                  int n_maps, uint32_t *rank, uint64_t *shape);

typedef struct RadGraph {
    RadBuilder head;          /* what the plugin sees: struct_size + api; must stay first */
    RadWeightLookup lookup;
    void *lookup_user;
    RadSelectOpts sel;        /* kernel libraries (sel.libs may be NULL), tolerance, deterministic:
                                 what every op is resolved under */
    const RadBuildCtx *ctx;
    const char *plugin_name;  /* the declaring plugin, for op-schema messages */
    RadGWeight *w; int n_w;
    RadGMap *maps; int n_maps;
    RadGBuf *bufs; int n_bufs;
    RadGKv *kvs; int n_kvs;
    RadGOp *ops; int n_ops;
    int *layer_kv; int n_layer_kv; /* [layer] -> kv group */
    char **notes; int n_notes;
    char **pnames; int n_pnames;  /* parameter names, each stored once: every op's params point here,
                                     so a kernel's lookups by name touch a few hot lines */
    rad_buf logits, pooled;
    int argmax;                   /* the core's argmax op over the logits (-1: none; declined when no library serves it) */
    rad_buf argmax_ids;           /* its output: [logits rows, 1], each row's id as a float */
    int scores;
    RadDrafterDecl drafter; int has_drafter, drafter_shared_kv, drafter_tree, drafter_short_block;
    int n_encoders, n_generators;
    int lane1_open, lane1_begin, lane1_end; /* op index range of the lane-1 window (-1: none) */
    void *model;                  /* rad_builder_set_model's value, for RadCtx::model */
    void **allocs; int n_allocs;  /* rad_builder_alloc's blocks, freed with the graph */
    int failed;                   /* a builder call was refused: msg says why */
    char msg[512];
    uint64_t arena_bytes;         /* transient buffers, after planning */
    uint64_t persist_bytes;       /* persistent + derived buffers */
    uint64_t naive_bytes;         /* transient buffers with no sharing, for comparison */
} RadGraph;

/* The step bounds a declare runs against, as radiance serves a model: rad-convert --plan-only
 * declares against the same ones (and takes the same flags), so a plan that passes is the graph
 * the server builds. Zero fields take the defaults below. */
#define RAD_SERVE_MAX_TOK 512     /* tokens per step (radiance --max-mixed-tok) */
#define RAD_SERVE_MAX_SEQS 16     /* sequences per step (radiance --max-seqs) */
#define RAD_SERVE_CTX_CAP 8192    /* the context when --ctx is not given: n_ctx_train, capped */
typedef struct RadStepBounds {
    uint32_t max_tok;             /* 0: RAD_SERVE_MAX_TOK */
    uint32_t max_seqs;            /* 0: RAD_SERVE_MAX_SEQS */
    uint32_t max_ctx;             /* 0: n_ctx_train (4096 when unknown), capped at RAD_SERVE_CTX_CAP */
    uint32_t max_out_rows;        /* 0: the plugin's rule */
    RadDType kv_dtype;            /* 0: RAD_F32 */
} RadStepBounds;
/* A rank-0, world-1 RadBuildCtx for these bounds over this model. */
RadBuildCtx rad_build_ctx_for(const RadModelMeta *m, const RadStepBounds *b);

/* Runs plugin->declare against meta and ctx and records the graph. Ops are resolved under sel
 * (the engine's own options, so a fused op resolves exactly when the engine will serve every
 * bucket of it; NULL: no libraries). Weight encodings come from lookup. Fails with the
 * plugin's or the builder's one-line reason. */
int rad_graph_declare(RadGraph *g, const RadPlugin *plugin, const RadModelMeta *meta, const RadBuildCtx *ctx,
                      const RadSelectOpts *sel, RadWeightLookup lookup, void *lookup_user, RadErr *e);
void rad_graph_free(RadGraph *g);

/* The declare-time check: every present weight's encoding is accepted by some kernel (for the
 * ops that take it) in the loaded libraries. Names the weight, encoding and op. */
int rad_graph_check_encodings(const RadGraph *g, RadErr *e);

/* Liveness from reads/writes, then one arena: transient buffers whose live op ranges overlap
 * never share bytes; buffers touched on lane 1 stay live across the whole lane-1 window. */
int rad_graph_plan(RadGraph *g, RadErr *e);

/* The declared graph as text, one line per item, stable across runs (tests pin it). With
 * libraries, each op's line ends with its picks per bucket ("-> ref:exact[1..512]"), or
 * "-> declined" / "-> unresolved". */
void rad_graph_dump(const RadGraph *g, FILE *f);

/* Lookup helpers. */
/* An op's declared parameter by name: an integer's value (a range's lo), or a float's. 1 when
 * the op has one of that kind, else 0 (*v untouched). */
int rad_graph_op_int(const RadGOp *op, const char *name, int64_t *v);
int rad_graph_op_f64(const RadGOp *op, const char *name, double *v);
int rad_graph_weight(const RadGraph *g, const char *name);
/* Weight w's slice on this graph's rank (RadBuildCtx.rank of world_size): the declared shard,
 * row_parts and shard_spans against the stored shape. RAD_E_SHAPE (the graph failed, naming the
 * weight) when they disagree. */
int rad_graph_weight_slice(RadGraph *g, int w, RadGSlice *s);
const RadGMap *rad_graph_map_for(const RadGraph *g, const char *dst, int nth);
/* Fills a RadModelMeta's kv table (what abi/rad_meta.h's getters read) with every scalar key of
 * meta and then chat, model.* included, each value as text, and each numeric or boolean array of
 * at most 1024 elements as "[a, b, c]" (token lists and string arrays are left out). Returns
 * storage to free with rad_meta_table_free. */
struct RadDict;
int rad_meta_table_fill(RadModelMeta *m, const struct RadDict *meta, const struct RadDict *chat, char ***keys,
                     char ***vals, RadErr *e);
void rad_meta_table_free(RadModelMeta *m, char **keys, char **vals);

#endif
