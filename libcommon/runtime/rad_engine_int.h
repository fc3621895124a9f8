/* rad_engine_int.h — the engine's state, for rad_engine.c and the tests that check its
 * internals. Tools see the engine only through rad_engine.h (make walls refuses a tool that
 * includes this header or rad_kvcache.h): the engine is the one owner of the KV cache. */
#ifndef RAD_ENGINE_INT_H
#define RAD_ENGINE_INT_H

#include "abi/rad_arch.h"
#include "abi/rad_kernels.h"
#include "libcommon/plugin/rad_graph.h"
#include "libcommon/format/rad_container.h"
#include "libcommon/runtime/rad_engine.h"
#include "libcommon/runtime/rad_kvcache.h"
#include "libcommon/format/rad_model.h"
#include "libcommon/plugin/rad_plugins.h"
#include "libcommon/plugin/rad_tune.h"

typedef struct RadEngineWeight {
    RadKArg arg;                   /* as kernels see it: bytes in wstore, or in the file mapping */
    uint64_t sliced_bytes;         /* --tp: this rank's slice's stored bytes; 0: the whole tensor */
} RadEngineWeight;

typedef struct RadEngineKernels {
    const RadSelectTable *sel;     /* the op's candidates and per-bucket picks: the graph's (RadGOp.sel),
                                      chosen at declare under the engine's options */
    int32_t layer;                 /* the op's "layer" parameter when it names a KV layer, else -1 */
    int collective;                /* all_reduce, all_gather: every rank meets in it */
} RadEngineKernels;

struct RadEngine {
    RadCtx head;                   /* what the plugin's step sees; must stay first */
    RadEngineOpts o;               /* as opened, defaults resolved (n_threads never 0) */
    RadModelFile m;                /* the container (its data released after a copying load) */
    RadModelMeta meta;             /* what the plugin is declared against */
    char **meta_keys, **meta_vals;     /* meta's key/value view (rad_meta_table_fill) */
    RadPluginSet plugins;          /* every plugin loaded from the plugin path */
    const RadPlugin *arch;         /* the architecture plugin (in plugins) */
    const RadPlugin **libs;        /* [n_libs] kernel libraries used, preference order */
    void **lib_state;              /* [n_libs] what init returned */
    int n_libs;                    /* libraries kept (their init succeeded) */
    RadPluginSet sel;              /* the same libraries as a set, for the builder */
    RadSelectOpts select;          /* sel, max_tolerance, deterministic, tune: what every op is resolved under */
    RadTuneTable *tune;            /* --tune's table when its key is this run's (NULL: none) */
    char tune_warn[640];           /* --tune-ignore-mismatch: why the table was ignored ("": it was not) */
    RadBuildCtx ctx;               /* the deployment: max_tok, max_seqs, max_ctx (resolved) */
    RadGraph g;                    /* ops, weights, buffers and KV groups the plugin declared */
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
    size_t workspace_bytes;        /* its length */
    RadKvCache *kv;                /* [g.n_kvs] owned here: only rad_engine.c changes them */
    int32_t **step_table;          /* [g.n_kvs][max_seqs * max_blocks]: block tables in batch order */
    int32_t *step_i32;             /* scratch for a step's batch arrays (see step_seqs) */
    RadKvState *kv_state;          /* [g.n_layer_kv] per layer, rebuilt each step */
    const RadBatch *batch;         /* the step being run */
    int step_failed;               /* the running step hit an error (step_msg says which) */
    int step_released;             /* ... a collective released because another rank failed first */
    char step_msg[512];            /* the first error of the step */
    int guard;                     /* rad_model_guard slot over the file mapping, or -1 */
    int changed;                   /* --mmap: the file changed under the mapping; every step fails */
    char changed_msg[512];         /* why (rad_engine_fail_closed) */
    uint64_t n_issues;             /* ops issued, for --debug-graph and timing */
    uint64_t *prof_ns, *prof_calls;/* when o.profile: time and calls of each (op, bucket), op o's at prof_at[o] + bucket */
    int *prof_at;                  /* [g.n_ops] */
    uint64_t prof_n;               /* entries of prof_ns and prof_calls */
    uint64_t prof_step_ns, prof_steps; /* whole steps (the plugin's own work and the kernels) */
    RadControlVector *cvec;        /* --control-vector as read (ctx.cvec once the probe grants it), or NULL */
    /* tensor parallelism (docs/ENGINE.md, "Tensor parallelism"): rank 0 is the engine the tools
       hold; it owns ranks 1..world-1, each an engine with its slice of the weights, its own KV
       pools for its heads and its own arena, stepped in lock-step on a thread of its own. The
       block tables, the KV manager and the logits are rank 0's. */
    uint32_t rank, world;          /* this engine's rank of world (1: no tensor parallelism) */
    const struct RadEngine *root;  /* rank 0, on ranks 1..; NULL on rank 0 */
    RadCommId *comm;               /* [n_libs] rank 0: each library's communicator (world > 1) */
    struct RadTp *tp;              /* rank 0 of world > 1: the other ranks and their threads */
    /* a device deployment (docs/ENGINE.md, "A CUDA deployment"): --kernels named a CUDA library
       first and its init succeeded; every op runs on it and every pointer a kernel gets (arena,
       persist, workspace, weights, KV pools, raw operands) is its device memory */
    const RadKernelLib *dev;       /* that library, or NULL (a CPU deployment) */
    void *dev_state;               /* its state */
    uint8_t *dev_weights;          /* wstore's image, uploaded whole at load */
    size_t dev_weights_bytes;
    uint8_t **dev_pools;           /* [g.n_kvs] each group's pool_map image */
    uint8_t *dev_raw;              /* [dev_raw_cap] a step's raw operands, copied once each */
    size_t dev_raw_cap, dev_raw_used;
    struct RadDevRaw { const void *host; uint64_t bytes, hash; void *dev; } dev_raw_seen[16];
    int n_dev_raw_seen;
    uint8_t *host_out;             /* [host_out_bytes] the step's logits (or pooled rows), copied back */
    int want_ids;                  /* rad_engine_want_ids: steps answer each logits row with its argmax */
    int ids_issued;                /* this step issued the core's argmax (rank_step) */
    int ids_valid;                 /* the last step's ids are in host_ids, and its logits stayed on the device */
    int32_t *host_ids;             /* [logits rows] */
    size_t host_out_bytes;
};

/* Rank r's engine of a tensor-parallel rank 0 (r = 0: en itself); NULL past its ranks. */
RadEngine *rad_engine_rank(RadEngine *en, uint32_t r);

#endif
