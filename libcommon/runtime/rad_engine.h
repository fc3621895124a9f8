/* rad_engine.h — the engine: a container mapped, its architecture plugin declared against the
 * deployment, kernels selected from the loaded libraries, one arena for activations, the
 * paged KV cache, and steps run through the plugin's rad_arch_step. */
#ifndef RAD_ENGINE_H
#define RAD_ENGINE_H

#include <stdint.h>
#include <stdio.h>

#include "abi/rad_arch.h"
#include "libcommon/base/rad_err.h"
#include "libcommon/base/rad_dict.h"
#include "libcommon/format/rad_model.h"
#include "libcommon/plugin/rad_graph.h"
#include "libcommon/plugin/rad_plugins.h"

#define RAD_SPEC_DEPTH_DEFAULT 4   /* drafts a verify row carries when neither --spec-depth nor the probe says */
#define RAD_SPEC_DEPTH_MAX 16      /* the most a verify row carries (--spec-depth's bound) */

typedef struct RadEngineOpts {
    const char *model;             /* a .rad container */
    const char *const *plugin_dirs;/* [n_plugin_dirs] --plugin-dir, searched before the default
                                      path (RADIANCE_PLUGIN_PATH, installed, beside the binary) */
    int n_plugin_dirs;             /* >= 0 */
    const char *kernels;           /* "ref,kern_test": libraries by name, in preference order; NULL: all, by load order */
    uint32_t n_threads;            /* 0: all cores */
    uint32_t max_tok;              /* tokens per step (prefill chunk); 0: 512 */
    uint32_t max_seqs;             /* sequences at once; 0: 1 */
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
    const char *tune;              /* --tune FILE: a kernel tuning table (docs/TUNE.md); NULL: none */
    int tune_ignore_mismatch;      /* 1: a table tuned for another container, library, CPU or option
                                      set is ignored (rad_engine_tune_warning says why); 0: refused */
    /* the deployment switches a plugin grants through its probe (docs/PLUGINS.md, "Probe bits");
       each one given is refused at open, naming the plugin, unless its bit is 1 */
    RadKvQuant kv_quant;           /* --kv-cache-dtype fp8_v4|fp8_k6v4 (kv_dtype RAD_F8_E4M3 then); NONE: kv_dtype alone */
    const char *control_vector;    /* --control-vector FILE: llama.cpp's control-vector GGUF, or NULL */
    int tp_attn_rows;              /* --tp-attn-split rows: row-split prefill attention */
    RadDType state_dtype;          /* --state-cache-dtype: RAD_F16, or 0 (RAD_F32) */
    uint32_t kv_resident;          /* --kv-resident N: KV blocks kept resident, the rest streamed; 0: all resident */
    const char *kv_flag;           /* rad_engine_deploy_flag's parse state: "--kv-type" or "--kv-cache-dtype", the
                                      one given (the two are one setting), or NULL */
    /* speculative decoding (docs/ENGINE.md, "Speculative decoding") */
    int speculate;                 /* 1: decode rows may carry drafts (RadBuildCtx.max_spec = the depth) */
    uint32_t spec_depth;           /* --spec-depth: drafts a row carries at most; 0: the plugin's probe
                                      (draft_depth), else RAD_SPEC_DEPTH_DEFAULT. A block drafter's probe
                                      (draft_depth_fixed) refuses any other depth, naming the plugin */
    uint32_t tp;                   /* --tp N: tensor-parallel ranks, threads of this process (0, 1: one);
                                      n_threads is then each rank's share of the threads */
    int tp_wire_lossy;             /* --tp-wire lossy: all_reduce messages of tp_wire_min_bytes or more may
                                      be summed in any order (RadBuildCtx.tp_wire_lossy); 0: every one exact */
    uint64_t tp_wire_min_bytes;    /* --tp-wire-min-bytes: below it a message goes exact (0: 65536) */
    const char *scope;             /* a drafter's engine: "draft" (RadBuildCtx.is_draft, names declared under
                                      "draft.", looked up in its own container without it); NULL: the model */
    int kernels_any_device;        /* rad-kbench: every library --kernels names is loaded and initialised
                                      whatever its device, and the engine's memory stays on the host (the
                                      checker runs the kernels itself); 0: a deployment on one device */
} RadEngineOpts;

/* Opaque: tools see the engine through these functions only; its state, the KV cache among it,
 * is rad_engine.c's (rad_engine_int.h, for tests that check internals). */
typedef struct RadEngine RadEngine;

/* What the engine serves, as resolved at open. */
typedef struct RadEngineLimits {
    uint32_t max_ctx;              /* tokens a sequence may hold: --ctx, else the model's n_ctx_train capped at 8192 */
    uint32_t max_seqs;             /* sequences in one step (and KV slots) */
    uint32_t max_tok;              /* tokens in one step */
    uint32_t n_threads;            /* kernel threads (never 0: "all cores" resolved at open) */
    uint32_t max_spec;             /* drafts a verify row may carry (the depth resolved at open; 0: not speculating) */
} RadEngineLimits;

/* Allocates and opens *en; on failure *en is NULL (everything freed) and e says why. */
int rad_engine_open(RadEngine **en, const RadEngineOpts *o, RadErr *e);
/* A --kv-type name: "f32", "f16" or "bf16" -> 1 with *out set; else 0 (every tool's flag). */
int rad_engine_kv_type(const char *name, RadDType *out);
/* One deployment switch, as every tool takes it (docs/TOOLS.md): flag "--kv-type" (f32|f16|bf16)
 * or "--kv-cache-dtype" (those, or fp8_v4|fp8_k6v4: kv_dtype RAD_F8_E4M3 and kv_quant), not both,
 * "--control-vector" (a file name; read when the engine opens), "--tp-attn-split" (rows),
 * "--state-cache-dtype" (f32|f16), "--kv-resident" (a whole number of blocks >= 1), "--tp" (ranks, 1..64),
 * "--tp-wire" (exact|lossy) or "--tp-wire-min-bytes" (bytes) with its value,
 * into o's fields. RAD_E_ARG naming the flag and the value when the value is not one it takes. */
int rad_engine_deploy_flag(RadEngineOpts *o, const char *flag, const char *value, RadErr *e);
/* Copies what rad_engine_deploy_flag parsed into d (kv_dtype when a KV flag was given, kv_quant,
 * control_vector, tp_attn_rows, state_dtype, kv_resident, tp, tp_wire_*) into o; o's other fields stay. */
void rad_engine_deploy_apply(RadEngineOpts *o, const RadEngineOpts *d);
/* Frees the engine; NULL is ignored. */
void rad_engine_close(RadEngine *en);

RadEngineLimits rad_engine_limits(const RadEngine *en);
/* The architecture plugin the model runs on (for its chat format, its name). */
const RadPlugin *rad_engine_arch(const RadEngine *en);
/* What a tuning table for this run must be keyed by: the container's id, the kernel libraries
 * in use (names, versions, preference order), this CPU, the resolved options. */
struct RadTuneKey;
void rad_engine_tune_key(const RadEngine *en, struct RadTuneKey *k);
/* With --tune and tune_ignore_mismatch: the one warning line when the table was ignored
 * ("--tune FILE ignored: it was tuned for container ..."), else NULL. */
const char *rad_engine_tune_warning(const RadEngine *en);

/* The model's metadata as the plugin was declared against it. */
const RadModelMeta *rad_engine_meta(const RadEngine *en);
/* The container's tokenizer entries, what rad_tok_init takes (valid until close). */
const RadDict *rad_engine_tok_data(const RadEngine *en);

/* With --mmap, NULL while the file is as it was at open; once it changed under the mapping,
 * the one-line reason ("FILE: changed while mapped (--mmap): ..."): every step since has failed
 * with it, and a server should stop admitting, fail what is left and exit
 * RAD_EXIT_MODEL_CHANGED (docs/TOOLS.md, "A file that changes under the server"). */
const char *rad_engine_fail_closed(const RadEngine *en);

/* Runs one step over `b`, built by the caller. The KV blocks of the step's sequences must be
 * reserved first (rad_engine_reserve); b's block tables are the caller's. */
int rad_engine_step(RadEngine *en, const RadBatch *b, RadErr *e);

/* One sequence's part of a step: n new tokens at positions [pos, pos+n). */
typedef struct RadEngineSeq {
    int32_t seq_id;                /* the caller's id (>= 0); a KV slot is taken on first use */
    const int32_t *tokens;         /* [n] token ids */
    uint32_t n;                    /* >= 1; n == 1 is a decode row */
    uint32_t pos;                  /* tokens of this sequence already in the cache */
    int want_logits;               /* 1: logits of tokens[n-1] */
    uint32_t n_draft;              /* a decode row carrying drafts: tokens[1..n) are drafted (n == 1 + n_draft
                                      <= 1 + max_spec), and every one of the n tokens gets logits, in order from
                                      out_row; 0: an ordinary row */
} RadEngineSeq;

/* One step over several sequences (prefill, decode or mixed): the engine orders decode rows
 * (n == 1, or a verify row: n == 1 + n_draft) first, reserves KV blocks (RAD_E_LIMIT, nothing
 * run, when they run out) and runs the step. out_row[i] receives the logits row of seqs[i]
 * (-1 when not wanted; a verify row's first of its n rows). Sum of n <= max_tok, n_seq <=
 * max_seqs, distinct seq_ids. */
int rad_engine_step_seqs(RadEngine *en, const RadEngineSeq *seqs, uint32_t n_seq, int32_t *out_row, RadErr *e);

/* Grows a sequence's KV to hold len tokens (taking a slot on first use); RAD_E_LIMIT when the
 * blocks or slots run out (nothing taken then). */
int rad_engine_reserve(RadEngine *en, int32_t seq_id, uint32_t len, RadErr *e);

/* ---- the KV cache, for a scheduler ----
 * The engine is the only code that changes its KV cache. A scheduler plans against it with
 * these calls. A model may declare several KV groups (Gemma 3: a full one and a window one),
 * each its own pool at its own block size; every call here covers all of them: a sequence fits
 * when it fits in every group, and a reservation takes blocks in every group or in none. */

#define RAD_ENGINE_KV_GROUPS_MAX 8

/* One group's pool: its geometry (fixed at open) and what is free now. */
typedef struct RadEngineKvGroup {
    const char *name;              /* as the plugin declared it (valid until close) */
    RadKvKind kind;                /* RAD_KV_FULL or RAD_KV_WINDOW */
    uint32_t window;               /* WINDOW: keys a query sees (blocks before them released); 0: FULL */
    uint32_t block_size;           /* tokens per block (the attention kernel's) */
    uint32_t n_blocks;             /* blocks in the pool */
    uint32_t n_free;               /* blocks a reservation can take: clean ones and free cached ones */
    uint32_t n_cached_free;        /* of the free ones, those holding a published prefix (evicted
                                      least recently freed first) */
    uint32_t seq_blocks;           /* the most blocks one sequence holds at once: ceil(max_ctx/B);
                                      a window, min(that, ceil((window - 1 + max_tok)/B) + 1) */
    uint32_t n_layers;             /* layers bound to it */
} RadEngineKvGroup;

/* Every pool at a glance. */
typedef struct RadEngineKvStats {
    uint32_t n_groups;             /* KV groups the model binds (0: none); group[] holds the first
                                      RAD_ENGINE_KV_GROUPS_MAX */
    uint32_t block_size;           /* the groups' block size when they share one (what the prefix
                                      cache hashes by), else the first group's */
    uint32_t n_blocks;             /* blocks in the pools, every group summed */
    uint32_t n_free;               /* of which a reservation can take, summed */
    uint32_t n_cached_free;        /* of the free ones, those holding a published prefix, summed */
    RadEngineKvGroup group[RAD_ENGINE_KV_GROUPS_MAX];
} RadEngineKvStats;
void rad_engine_kv_stats(const RadEngine *en, RadEngineKvStats *st);

/* Blocks a reservation can take now, every group summed (RadEngineKvStats.n_free). */
uint32_t rad_engine_kv_free_blocks(const RadEngine *en);
/* Blocks that growing sequence seq_id (holding a slot or not) to len tokens would take, every
 * group summed (a window group's released blocks are not counted back). */
uint32_t rad_engine_kv_need(const RadEngine *en, int32_t seq_id, uint32_t len);
/* Whether growing seq_id to len tokens (the new ones from what it holds on) gets its blocks in
 * every group now, counting the blocks a window group releases first. */
int rad_engine_kv_fits(const RadEngine *en, int32_t seq_id, uint32_t len);
/* The most tokens seq_id can grow by now (from what it holds), the least over the groups. */
uint32_t rad_engine_kv_room(const RadEngine *en, int32_t seq_id);
/* Whether a sequence of len tokens, computed in steps of at most chunk tokens, fits each whole
 * pool alone (a window group holds at most ceil((window - 1 + chunk)/B) + 1 of its blocks at
 * once); 0 with why = "the request needs 9 KV blocks of group 'kv'; its whole pool has 8". */
int rad_engine_kv_fits_pool(const RadEngine *en, uint32_t len, uint32_t chunk, char *why, size_t n);

/* The prefix cache: a full block is named by a hash chained over its tokens and every block
 * before it; a published block outlives its sequence (free but cached) until evicted. It is
 * served when every group has one block size (the hashes are the same in each), else no prefix
 * is ever found.
 *
 * A newly admitted sequence takes a KV slot in every group, the chain hashes of the first
 * n_blocks full blocks of tokens into hashes[0..n_blocks), and, when share, the longest prefix
 * of k blocks that every group still holds: a full group all k blocks cached, a window group
 * the ones its next query (at position k·B) reads. Those are shared (only a sequence holding no
 * tokens starts on shared blocks). Returns k (0 when !share), or -1 when every slot is taken
 * (nothing done). */
int rad_engine_kv_adopt_prefix(RadEngine *en, int32_t seq_id, const int32_t *tokens, uint32_t n_blocks, int share,
                               uint64_t *hashes);
/* Publishes a sequence's full blocks [from, to), written, so later sequences can share them,
 * in every group that still holds them (a window group has released the older ones): their
 * hashes into hashes[from..to), chained on hashes[from-1] when from > 0. A hash already naming
 * another block is left as it is. RAD_E_NOTFOUND (nothing done) when seq_id holds no slot. */
int rad_engine_kv_publish(RadEngine *en, int32_t seq_id, const int32_t *tokens, uint32_t from, uint32_t to,
                          uint64_t *hashes);

/* The logits the step produced: [n_out][n_vocab]. */
const float *rad_engine_logits(const RadEngine *en, uint32_t *n_vocab);
/* Greedy decode on a device (docs/ENGINE.md, "Greedy ids on the device"): 1 when the engine can
 * answer a step's logits rows with their argmax ids alone (a CUDA deployment whose library
 * serves docs/OPS.md's argmax). want_ids(1) asks it of the next step only: that step runs the
 * argmax after the plugin's step and copies back one id a row; rad_engine_ids then returns them
 * (the first maximum, as rad_argmax gives) and rad_engine_logits returns NULL (its n_vocab still
 * set) until the next step. Where the engine cannot, want_ids changes nothing and rad_engine_ids
 * is NULL. */
int rad_engine_serves_ids(const RadEngine *en);
void rad_engine_want_ids(RadEngine *en, int on);
const int32_t *rad_engine_ids(const RadEngine *en);

/* ---- an embedding program (the plugin declares a pooled output: one row a sequence) ----
 * Such an engine has no KV cache and no logits: rad_engine_step_seqs / _forward / _forward_all
 * refuse it (RAD_E_UNSUPPORTED, "...: an embedding model ...: it does not generate"), and
 * rad_engine_embed refuses a generation model the same way. */

/* The pooled row's width (the embedding's dimension), or 0 for a generation model. */
uint32_t rad_engine_pooled_dim(const RadEngine *en);

/* The most tokens one text may hold: the least of the context served, max_tok and the model's
 * pooling.max_tokens (sentence-transformers' max_seq_length: what it was trained at). */
uint32_t rad_engine_embed_max(const RadEngine *en);

/* One text of an embedding step: its tokens, specials included. */
typedef struct RadEngineText {
    const int32_t *tokens;         /* [n] */
    uint32_t n;                    /* 1..max_ctx */
} RadEngineText;

/* One step over n_seq whole texts (positions from 0 each; summed tokens <= max_tok, n_seq <=
 * max_seqs): out[n_seq][rad_engine_pooled_dim] receives each text's pooled row. */
int rad_engine_embed(RadEngine *en, const RadEngineText *texts, uint32_t n_seq, float *out, RadErr *e);

/* One sequence's forward over `n` new tokens at positions [pos, pos+n), cut into steps of at
 * most max_tok; logits of the last token when want_logits. */
int rad_engine_forward(RadEngine *en, int32_t seq_id, const int32_t *tokens, uint32_t n, uint32_t pos,
                       int want_logits, RadErr *e);
/* Rolls a sequence back to its first len tokens (rejected drafts): every group gives up the
 * blocks wholly past len; the positions past len in the block that stays are written again by
 * the next step. Nothing when it holds len or fewer; unknown ids are ignored. */
void rad_engine_kv_truncate(RadEngine *en, int32_t seq_id, uint32_t len);
/* Releases a sequence's slot and blocks (its published blocks stay cached); unknown ids are
 * ignored. */
void rad_engine_drop_seq(RadEngine *en, int32_t seq_id);

/* Teacher forcing: the logits of every one of n tokens into out[n][n_vocab] (the engine must be
 * opened with max_out_rows >= max_tok). */
int rad_engine_forward_all(RadEngine *en, int32_t seq_id, const int32_t *tokens, uint32_t n, uint32_t pos, float *out,
                           RadErr *e);

/* ---- what a kernel checker reads (rad-kbench): the graph as declared and the bytes kernels get ----
 * Read-only views, valid until close; nothing here touches the KV cache. */

/* The declared graph: ops with their selection tables (RadGOp.sel; k_lib indexes the libraries
 * below), weights, buffers, KV groups, the deployment (ctx) and the options selection ran under
 * (sel). */
const RadGraph *rad_engine_graph(const RadEngine *en);
/* Weight w of the graph (RadGOp.w[].id) as every kernel receives it: the bound bytes, packed
 * (dtype | RAD_PACKED) where a library packed it at load; NULL when the container lacks it. */
const RadKArg *rad_engine_weight(const RadEngine *en, int w);
/* Kernel library i in the tables' order (RadSelectTable.k_lib), and what its init returned in
 * *state; NULL when i is out of range. */
const RadPlugin *rad_engine_lib(const RadEngine *en, int i, void **state);
/* Tensor parallelism: the ranks (1: none), and library i of rank r as rad_engine_lib gives rank 0's
 * (NULL past the ranks). */
uint32_t rad_engine_world(const RadEngine *en);
const RadPlugin *rad_engine_rank_lib(const RadEngine *en, uint32_t rank, int i, void **state);
/* Rank r's graph: its ops at its own shapes (a collective's other ranks' params); NULL past the ranks. */
const RadGraph *rad_engine_rank_graph(const RadEngine *en, uint32_t rank);
/* Every library's communicators poisoned (on = 1: a rank will not come, so none waits on it) or
 * usable again (on = 0, once no rank is in a collective); the ranks share them. */
void rad_engine_comm_abort(RadEngine *en, int on);
/* Under --tp, weight w's stored bytes as this rank holds them (its rows or columns, in the stored
 * encoding, before any packing), cut from m (the container, opened by the caller): *bytes (the
 * caller frees it) and *n; *bytes NULL when the weight is whole. The checker's reference decodes these. */
int rad_engine_weight_slice(RadEngine *en, const RadModelFile *m, int w, void **bytes, uint64_t *n, RadErr *e);

/* --debug-graph: every op, its resolved kernel and why. --debug-placement: the plan. */
/* --profile: time per op (summed over layers by op name and kernel), against whole steps. */
void rad_engine_dump_profile(const RadEngine *en, FILE *f);
void rad_engine_dump_graph(const RadEngine *en, FILE *f);
void rad_engine_dump_placement(const RadEngine *en, FILE *f);

#endif
