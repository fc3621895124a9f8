/* rad_arch.h — the architecture-plugin ABI (shared/spec/architecture-plugins.md, in C).
 *
 * A plugin declares a model once (rad_arch_declare: weights, buffers, KV groups, ops, the
 * name map) and issues the ops of one step (rad_arch_step). The core selects the plugin by the
 * exact (rad_arch_id, rad_arch_quant) pair. A plugin sees nothing but abi/: every call into the
 * core goes through the function table in RadBuilder / RadCtx, wrapped by the inline functions
 * below, so a plugin links against nothing and a newer core serves an older plugin.
 *
 * Installed as <arch/rad_arch.h> (and <radiance/arch/rad_arch.h>); in-tree plugins include it
 * by that spelling. Structs grow only at their end behind struct_size (abi/rad_plugin.h). */
#ifndef RAD_ARCH_H
#define RAD_ARCH_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "rad_meta.h"
#include "rad_plugin.h"
#include "rad_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- element types ------------------------------------------------------------------------
 * A declared dtype is how a kernel takes the weight or buffer. Values are RadEnc's, so a stored
 * encoding and a declared dtype compare directly. RAD_ANY takes a weight as stored: the
 * quantised plugin serving imports declares RAD_ANY and asks rad_weight_encoding. */
typedef enum RadDType {
    RAD_F32 = RAD_ENC_F32, RAD_F16 = RAD_ENC_F16, RAD_BF16 = RAD_ENC_BF16, RAD_F64 = RAD_ENC_F64,
    RAD_I8 = RAD_ENC_I8, RAD_I16 = RAD_ENC_I16, RAD_I32 = RAD_ENC_I32, RAD_I64 = RAD_ENC_I64,
    RAD_U8 = RAD_ENC_U8, RAD_F8_E4M3 = RAD_ENC_F8_E4M3, RAD_F8_E5M2 = RAD_ENC_F8_E5M2,
    RAD_Q8_0 = RAD_ENC_Q8_0, RAD_Q4_0 = RAD_ENC_Q4_0, RAD_Q4_1 = RAD_ENC_Q4_1,
    RAD_Q5_0 = RAD_ENC_Q5_0, RAD_Q5_1 = RAD_ENC_Q5_1, RAD_Q4_K = RAD_ENC_Q4_K,
    RAD_Q5_K = RAD_ENC_Q5_K, RAD_Q6_K = RAD_ENC_Q6_K,
    RAD_ANY = 255,
    RAD_PACKED = 0x100, /* or'ed into a weight's encoding as a kernel sees it: its library's
                           load-time layout of that encoding (RadKernelLib.pack, rad_kernels.h) */
} RadDType;

/* ---- handles ------------------------------------------------------------------------------
 * Indices into the core's tables; id < 0 is "none". Distinct struct types so a buffer cannot be
 * passed where a weight is meant. */
typedef struct rad_weight { int32_t id; } rad_weight;
typedef struct rad_buf { int32_t id; } rad_buf;
typedef struct rad_op { int32_t id; } rad_op;
typedef struct rad_kv { int32_t id; } rad_kv;
#define RAD_NONE_W ((rad_weight){-1})
#define RAD_NONE_B ((rad_buf){-1})

typedef struct RadBuilder RadBuilder; /* declare-time handle; layout below, fields the core's */
typedef struct RadCtx RadCtx;         /* step-time handle */
struct RadBatch;

/* ---- weights ----------------------------------------------------------------------------- */

typedef enum RadAccess {
    RAD_ACCESS_PER_TOKEN = 0,   /* dense: read every token */
    RAD_ACCESS_PER_REQUEST = 1, /* an encoder tower: read once per request */
    RAD_ACCESS_CONDITIONAL = 2, /* routed experts */
    RAD_ACCESS_RARE = 3,
    RAD_ACCESS_VOCAB = 4,       /* embedding / lm_head: every token, huge, one is a gather */
} RadAccess;

typedef enum RadShard {
    RAD_SHARD_NONE = 0, /* replicated on every rank */
    RAD_SHARD_ROW = 1,  /* dim 0 split across ranks */
    RAD_SHARD_COL = 2,  /* dim 1 split; the plugin follows it with an all-reduce */
} RadShard;

/* The unit of movement: an expert's gate/up/down share one group. */
typedef enum RadGroupKind { RAD_GROUP_NONE = 0, RAD_GROUP_LAYER = 1, RAD_GROUP_EXPERT = 2, RAD_GROUP_SLOT = 3 } RadGroupKind;
typedef struct RadGroup {
    uint16_t kind;  /* RadGroupKind */
    uint16_t layer; /* the layer (LAYER, EXPERT) */
    uint32_t index; /* expert or slot index */
} RadGroup;
static inline RadGroup rad_group_layer(uint32_t l) { return (RadGroup){RAD_GROUP_LAYER, (uint16_t)l, 0}; }
static inline RadGroup rad_group_expert(uint32_t l, uint32_t e) { return (RadGroup){RAD_GROUP_EXPERT, (uint16_t)l, e}; }
static inline RadGroup rad_group_slot(uint32_t s) { return (RadGroup){RAD_GROUP_SLOT, 0, s}; }

typedef struct RadWeightDecl {
    RadDType dtype;              /* how kernels take it; a stored encoding other than this is
                                    legal only as an exact widening (bf16 read as f32) */
    uint32_t rank;               /* 1..4 */
    uint64_t shape[4];           /* row-major, shape[rank-1] contiguous; per rank (already divided) */
    RadAccess access;
    RadShard shard;
    RadGroup group;
    int optional;                /* absent from the checkpoint is not an error */
    uint32_t n_row_parts;        /* SHARD_ROW: what dim 0 stacks ([gate|up], [q|k|v]) */
    const uint64_t *row_parts;   /* [n_row_parts] full (undivided) widths of each part */
    const char *source;          /* view an existing stored weight by name; NULL: its own name */
    const char *planes;          /* "codes,scale": the planes taken; NULL: every plane */
    /* ABI 1.8, SHARD_ROW/COL under tensor parallelism: where this rank's slice lies in the stored
     * (undivided) tensor, rows (ROW) or columns (COL): shard_spans[2*i], [2*i+1] = begin, length
     * of part i (n_row_parts parts; the whole tensor when none). The lengths sum to the declared
     * shape[0] (ROW) or shape[1] (COL). Spans of different ranks may overlap (a KV head every
     * rank holds). n_shard_spans 0: the balanced split (rad_weight_shard_span). */
    uint32_t n_shard_spans;      /* 0, or max(1, n_row_parts) */
    const uint64_t *shard_spans; /* [n_shard_spans][2] */
} RadWeightDecl;

/* ---- the name map: checkpoint names -> declared names --------------------------------------
 * The only place convert-time fusions live. Several entries may name one declared weight: the
 * first whose sources are present wins (GGUF names beside Hugging Face names). */
typedef enum RadMapKind {
    RAD_MAP_COPY = 0,      /* srcs are alternatives: the first present is copied (a tied lm_head) */
    RAD_MAP_CONCAT = 1,    /* all srcs, concatenated along dim `axis` */
    RAD_MAP_WNORM = 2,     /* srcs = {g, v}: weight-normalised pair folded to g * v / ||v|| */
    RAD_MAP_ROWS = 3,      /* rows [begin, end) of src, optionally permuted (perm) */
    RAD_MAP_TRANSPOSE = 4, /* src transposed (rank 2) */
    RAD_MAP_EMA = 5,       /* srcs = {embed_sum, cluster_usage}: an EnCodec codebook */
    RAD_MAP_TAP = 6,       /* slice `index` of dim 0 of src (one layer of a stacked tensor) */
    RAD_MAP_COLS = 7,      /* columns [begin, end) of src */
} RadMapKind;

/* Row permutations a ROWS entry may apply (on whole rows, so quantised rows move intact). */
typedef enum RadRowPerm {
    RAD_PERM_NONE = 0,
    /* GGUF's Llama q/k rows (rope pairs interleaved, llama.cpp's converter) back to Hugging
     * Face's (rotate-half halves): within each of `heads` heads of d rows,
     * out[h*d + k*(d/2) + j] = in[h*d + 2*j + k]. */
    RAD_PERM_ROPE_UNINTERLEAVE = 1,
} RadRowPerm;

typedef struct RadNameMap {
    RadMapKind kind;
    const char *dst;             /* the declared weight's name */
    const char *const *src;      /* checkpoint names, NULL-terminated */
    int32_t axis;                /* CONCAT */
    uint64_t begin, end;         /* ROWS / COLS range; end 0 = to the end */
    int64_t index;               /* TAP */
    RadRowPerm perm;             /* ROWS */
    uint32_t heads;              /* ROWS perm: heads in the tensor */
    float eps;                   /* EMA */
    float add;                   /* COPY only (ABI 1.5): added to every element, in f32, so the
                                    weight is stored decoded to f32; 0: none. Gemma's Hugging
                                    Face norm gammas: w is stored, x * (1 + w) computed: 1 */
} RadNameMap;

/* ---- buffers and KV groups ----------------------------------------------------------------- */

typedef enum RadBufKind {
    RAD_BUF_TRANSIENT = 0, /* liveness-analysed; may share bytes with others */
    RAD_BUF_PERSIST = 1,   /* lives across steps */
    RAD_BUF_DERIVED = 2,   /* computed once per step by the core from the batch (`derive`) */
} RadBufKind;

typedef struct RadBufDecl {
    RadDType dtype;
    uint32_t rank;
    uint64_t shape[4];  /* shape[0] is rows at the step bounds (max_tok, n_out, ...) */
    RadBufKind kind;
    const char *derive; /* DERIVED: "positions", "conv_state_index", ... */
} RadBufDecl;

typedef enum RadKvKind {
    RAD_KV_FULL = 0,   /* paged per-token, growing */
    RAD_KV_WINDOW = 1, /* bounded by `window` tokens */
    RAD_KV_LINEAR = 2, /* per-sequence fixed state (delta nets) */
    RAD_KV_CONV = 3,   /* rolling window of width-1+num_spec */
    RAD_KV_RING = 4,   /* window floor set at run time */
} RadKvKind;

typedef struct RadKvDecl {
    RadKvKind kind;
    RadDType dtype;         /* cache width (ctx->kv_dtype unless the model says otherwise) */
    uint32_t n_head_kv;     /* per rank */
    uint32_t head_dim;      /* read from metadata, never derived */
    uint32_t window;        /* WINDOW */
    uint32_t width;         /* CONV */
    uint64_t state_bytes;   /* LINEAR: bytes per sequence */
} RadKvDecl;

/* ---- ops --------------------------------------------------------------------------------- */

typedef enum RadParamKind { RAD_PARAM_INT = 0, RAD_PARAM_RANGE = 1, RAD_PARAM_FLOAT = 2 } RadParamKind;
typedef enum RadParamRole {
    RAD_PROLE_NONE = 0,      /* carried opaquely */
    RAD_PROLE_SEQ_CHUNK = 1, /* the core cuts steps on it */
    RAD_PROLE_CAPACITY = 2,  /* a capacity the core sizes */
} RadParamRole;

typedef struct RadParam {
    const char *name;  /* from docs/OPS.md */
    RadParamKind kind;
    RadParamRole role;
    int64_t lo, hi;    /* INT: lo == hi == value; RANGE: [lo, hi], the selector's buckets */
    double f;          /* FLOAT */
} RadParam;

#define RAD_INT(n, v) ((RadParam){(n), RAD_PARAM_INT, RAD_PROLE_NONE, (v), (v), 0.0})
#define RAD_RANGE(n, lo, hi) ((RadParam){(n), RAD_PARAM_RANGE, RAD_PROLE_NONE, (lo), (hi), 0.0})
#define RAD_RANGE_ROLE(n, lo, hi, role) ((RadParam){(n), RAD_PARAM_RANGE, (role), (lo), (hi), 0.0})
#define RAD_FLOAT(n, v) ((RadParam){(n), RAD_PARAM_FLOAT, RAD_PROLE_NONE, 0, 0, (v)})

typedef struct RadParamList { const RadParam *p; uint32_t n; } RadParamList;
typedef struct RadWeightList { const rad_weight *p; uint32_t n; } RadWeightList;
#define RAD_PARAMS(...) ((RadParamList){(const RadParam[]){__VA_ARGS__}, \
    (uint32_t)(sizeof((RadParam[]){__VA_ARGS__}) / sizeof(RadParam))})
#define RAD_WEIGHTS(...) ((RadWeightList){(const rad_weight[]){__VA_ARGS__}, \
    (uint32_t)(sizeof((rad_weight[]){__VA_ARGS__}) / sizeof(rad_weight))})
#define RAD_NO_WEIGHTS ((RadWeightList){NULL, 0})
#define RAD_BUFS(...) ((const rad_buf[]){__VA_ARGS__})
#define RAD_NBUFS(...) ((uint32_t)(sizeof((rad_buf[]){__VA_ARGS__}) / sizeof(rad_buf)))

/* ---- outputs, drafters, encoders, generators ----------------------------------------------- */

typedef struct RadDrafterDecl {
    uint32_t struct_size;
    uint32_t depth;        /* proposals per step */
    uint32_t block;        /* a block drafter's trained block (0: not a block drafter) */
    uint32_t n_proposals;  /* proposal shape: rows per step */
} RadDrafterDecl;

typedef struct RadEncoderDecl {
    uint32_t struct_size;
    const char *modality;  /* "vision", "audio" */
    rad_buf out;           /* embeddings the decoder reads */
    uint32_t max_patches;  /* or frames */
} RadEncoderDecl;

typedef struct RadGeneratorDecl {
    uint32_t struct_size;
    const char *modality;  /* "image", "audio", "video" */
    rad_buf out;
} RadGeneratorDecl;

/* ---- deployment: what declare must declare against ----------------------------------------- */

typedef enum RadKvQuant { RAD_KVQ_NONE = 0, RAD_KVQ_V4 = 1, RAD_KVQ_K6V4 = 2 } RadKvQuant;
enum { RAD_ATTN_FP8_QK = 1u << 0, RAD_ATTN_FP8_PV = 1u << 1 };

typedef struct RadControlVector {
    uint32_t n_layers, n_embd;
    const float *dirs;    /* [n_layers][n_embd] */
    float scale;
} RadControlVector;

typedef struct RadBuildCtx {
    uint32_t struct_size;
    uint32_t rank, world_size;     /* dimensions are already divided; the core adds no collectives */
    uint32_t max_tok;              /* tokens a step may carry */
    uint32_t max_seqs;             /* sequences a step may carry */
    uint32_t max_ctx;              /* context length served */
    uint32_t max_spec;             /* speculative tokens per sequence */
    uint32_t max_mixed_tok;        /* most a multi-sequence step carries; wider is one sequence */
    int tp_wire_lossy;             /* the wire may be lossy: invert into all_reduce's `exact` */
    uint64_t tp_wire_min_bytes;    /* below this a message goes exact */
    RadDType kv_dtype;             /* attention cache width */
    RadKvQuant kv_quant;           /* narrow layout under fp8 */
    uint32_t attn_prefill_fp8;     /* RAD_ATTN_FP8_* bits for attn_paged's prefill_fp8 */
    uint32_t kv_resident_blocks;   /* KV streaming ring depth (0: all resident) */
    int kv_stream_ok;              /* may declare the streamed-only ops */
    RadDType state_dtype;          /* recurrent state width (RAD_F16 under --state-cache-dtype f16) */
    int is_draft;                  /* a drafter/encoder declare */
    const char *scope;             /* prefix for declared names: "", "draft", "vision", "audio" */
    int shape_probe;               /* a sizing declare at a smaller max_tok: touch no plugin state */
    uint32_t max_enc_patches, max_audio_frames;
    uint32_t max_out_rows;         /* logits rows the KL mode needs (0: the plugin's rule) */
    const RadControlVector *cvec;  /* the loaded control vector, or NULL */
    int tp_attn_rows;              /* row-split prefill attention requested */
    int draft_coupling, draft_tree;
    int weight_prefetch_off;       /* declare no weight prefetch beside collectives */
} RadBuildCtx;

/* ---- probe: the plugin's permissions ------------------------------------------------------ */

typedef struct RadArchProbe {
    uint32_t struct_size;
    uint32_t draft_depth;          /* the container's spec depth */
    int draft_depth_fixed;         /* a block drafter: the trained block is the only depth served */
    int shape_probe_ok;            /* tolerates a sizing declare */
    uint32_t enc_merge, audio_frames;
    uint32_t gen_rows, gen_patches, gen_audio, gen_ctx, gen_video;
    uint32_t kv_quant_ok;          /* bits (1 << RadKvQuant) of narrow KV layouts served */
    int chain_pays, tree_pays;
    int kv_stream_ok;
    int control_vector_ok;
    int tp_attn_rows_ok;
    int state_f16_ok;
} RadArchProbe;

/* ---- formats as data ----------------------------------------------------------------------- */

typedef struct RadChatFormat {
    uint32_t struct_size;
    const char *kind;              /* "chatml", "llama3", "llama2" */
    const char *bos;               /* text prepended once, or "" */
    const char *system_start, *system_end;
    const char *user_start, *user_end;
    const char *assistant_start, *assistant_end;
    const char *default_system;    /* used when a chat has no system message, or NULL */
    const char *const *stop;       /* NULL-terminated strings that end a turn */
    const char *reasoning_start, *reasoning_end; /* to reasoning_content, or NULL */
    const char *tool_call_start, *tool_call_end; /* what the model writes around a call: JSON
                                                    {"name": ..., "arguments": {...}} between them */
    uint32_t flags;                /* RAD_CHAT_* */
    /* ABI 1.7: tools, tool calls and tool results as the template renders them (read only when
     * struct_size covers them; tools_start NULL: the format renders no tools, and a request with
     * `tools` is refused). A request's tools go in the system turn:
     *   system_start [SYS tools_system_sep] tools_start (tools_sep TOOL_JSON)* tools_end system_end
     * (SYS: the first system message, else default_system, else nothing; TOOL_JSON: the tool as
     * Python's json.dumps writes it, Jinja's `tojson`). An assistant turn's calls follow its
     * content, each as
     *   [tool_calls_sep] tool_call_open NAME tool_call_mid ARGS_JSON tool_call_close
     * (the separator before every call but a first one with no content before it). A run of
     * `tool` messages is one turn:
     *   tool_turn_start (tool_result_start CONTENT tool_result_end)* user_end */
    const char *tools_system_sep;
    const char *tools_start, *tools_sep, *tools_end;
    const char *tool_calls_sep, *tool_call_open, *tool_call_mid, *tool_call_close;
    const char *tool_turn_start, *tool_result_start, *tool_result_end;
} RadChatFormat;

enum {
    RAD_CHAT_SYSTEM_IN_FIRST_USER = 1u << 0, /* Llama 2: <<SYS>> sits inside the first [INST] */
    RAD_CHAT_NO_AUTO_BOS = 1u << 1,          /* `bos` text is the BOS: the core adds no BOS token */
    RAD_CHAT_TRIM_CONTENT = 1u << 2,         /* ABI 1.4: user/assistant/tool content is stripped of surrounding
                                                whitespace (Jinja's `| trim`, Python's str.strip()) */
    RAD_CHAT_ALTERNATE = 1u << 3,            /* ABI 1.4 (Gemma): after an optional first system message, a user turn
                                                at every even place and none at odd ones (the template raises
                                                otherwise); a later system message is a turn of its own, user_start
                                                with "system" for "user" */
};
#define RAD_CHAT_FLAGS_KNOWN 0xfu /* a format with another bit set is refused: the core cannot honour it */

typedef struct RadAudioFormat {
    uint32_t struct_size;
    uint32_t sample_rate;
    const char *clip_token;        /* placeholder expanded per audio frame */
    const char *prompt;            /* transcription prompt */
    const char *language_prefix;
    const char *transcript_start;
} RadAudioFormat;

/* Geometry of a video or encoder pass, for the optional exports below (media preprocessing is
 * the core's; these say how the model lays the result out). */
typedef struct RadVideoGeom {
    uint32_t struct_size;
    uint32_t frames, height, width;   /* after the core's resize */
    uint32_t patch, temporal_patch;   /* patch edge, frames per temporal patch */
    uint32_t merge;                   /* spatial merge factor */
} RadVideoGeom;

typedef struct RadEncodeGeom {
    uint32_t struct_size;
    uint32_t patches;                 /* patches the encoder pass takes */
    uint32_t tokens;                  /* embeddings it yields for the decoder */
    uint32_t merge;
} RadEncodeGeom;

/* ---- step ---------------------------------------------------------------------------------- */

typedef enum RadPhase { RAD_PHASE_PREFILL = 0, RAD_PHASE_DECODE = 1, RAD_PHASE_MIXED = 2 } RadPhase;

/* Passed in arrays without a struct_size: frozen for the whole major version (rad_plugin.h). */
typedef struct RadKvState {
    rad_kv group;
    const int32_t *block_table;    /* [n_seq][max_blocks] */
    uint32_t max_blocks;
    void *pool;                    /* this layer's blocks (docs/OPS.md: the pool layout) */
    RadDType dtype;                /* cache element type */
    RadKvQuant kv_quant;           /* narrow layout under fp8 */
    uint32_t block_size;           /* tokens per block */
    uint32_t n_head_kv, head_dim;  /* per rank */
    uint32_t layer;
    uint64_t block_bytes;          /* bytes of one block (K and V) */
    uint32_t n_blocks;             /* blocks in the pool: valid ids are [0, n_blocks) */
} RadKvState;

typedef struct RadBatch {
    uint32_t struct_size;
    RadPhase phase;
    uint32_t n_tok;                /* tokens in the step */
    uint32_t n_seq;                /* sequences in the step */
    uint32_t n_seq_decode;         /* the first n_seq_decode sequences are decode rows */
    const int32_t *token_ids;      /* [n_tok] */
    const int32_t *positions;      /* [n_tok] */
    const int32_t *cu_seqlens;     /* [n_seq+1] absolute token offsets */
    const int32_t *seq_ids;        /* [n_seq] */
    const int32_t *lora_slot;      /* [n_seq] or NULL */
    uint32_t n_out;                /* rows that need logits (0: skip the head) */
    const int32_t *out_ids;        /* [n_out] token indices */
    const int32_t *q_lens;         /* [n_seq] */
    const int32_t *ctx_lens;       /* [n_seq] context after this step */
    uint32_t max_q_len, max_ctx_len;
    const RadKvState *kv;          /* [n_kv] one per KV group */
    uint32_t n_kv;
    uint32_t n_spec;               /* speculative tokens per sequence */
    int32_t draft_pass;            /* > 0 query pass, < 0 context pass, 0 the model */
    const int32_t *num_accepted;   /* [n_seq] accepted drafts, or NULL */
} RadBatch;

/* An op's operand: a buffer over some rows, raw host data, or a weight. */
typedef enum RadOperandKind { RAD_OPND_BUF = 0, RAD_OPND_RAW = 1, RAD_OPND_WEIGHT = 2 } RadOperandKind;
typedef struct RadOperand {
    RadOperandKind kind;
    rad_buf buf; uint64_t row0, rows;      /* BUF: rows [row0, row0+rows) */
    const void *raw; RadDType dtype; uint64_t n;  /* RAW */
    rad_weight w;                          /* WEIGHT */
} RadOperand;
static inline RadOperand brows(rad_buf b, uint64_t rows) { RadOperand o = {RAD_OPND_BUF, b, 0, rows, NULL, RAD_F32, 0, {-1}}; return o; }
static inline RadOperand brange(rad_buf b, uint64_t row0, uint64_t rows) { RadOperand o = {RAD_OPND_BUF, b, row0, rows, NULL, RAD_F32, 0, {-1}}; return o; }
static inline RadOperand praw(const void *p, RadDType t, uint64_t n) { RadOperand o = {RAD_OPND_RAW, {-1}, 0, 0, p, t, n, {-1}}; return o; }
static inline RadOperand RAD_W(rad_weight w) { RadOperand o = {RAD_OPND_WEIGHT, {-1}, 0, 0, NULL, RAD_F32, 0, w}; return o; }

/* ---- the core's functions, as a table ------------------------------------------------------ */

typedef struct RadBuilderApi {
    uint32_t struct_size;
    rad_weight (*decl_weight)(RadBuilder *, const char *name, const RadWeightDecl *, size_t decl_size);
    int (*decl_name_map)(RadBuilder *, const RadNameMap *, size_t map_size);
    RadEnc (*weight_encoding)(RadBuilder *, rad_weight);  /* RAD_ENC_COUNT when absent */
    int (*weight_shard_span)(RadBuilder *, rad_weight, uint32_t part, uint64_t *begin, uint64_t *len);
    rad_buf (*decl_buffer)(RadBuilder *, const char *name, const RadBufDecl *, size_t decl_size);
    rad_kv (*decl_kv_group)(RadBuilder *, const char *name, const RadKvDecl *, size_t decl_size);
    uint32_t (*kv_block_size)(RadBuilder *, rad_kv);
    int (*bind_layer_kv)(RadBuilder *, uint32_t layer, rad_kv);
    int (*kv_refine)(RadBuilder *, rad_kv, int what);    /* 1 zero, 2 replicated, 3 dense_read */
    rad_op (*decl_op)(RadBuilder *, const char *op, const RadParam *, uint32_t n_params,
                      const rad_weight *, uint32_t n_weights);
    int (*op_access)(RadBuilder *, rad_op, int writes, const rad_buf *, uint32_t n);
    int (*op_resolved)(RadBuilder *, rad_op);
    int (*op_declared)(RadBuilder *, const char *op);
    int (*buf_concurrent)(RadBuilder *, rad_buf);
    int (*lane1_window)(RadBuilder *, int begin);
    int (*declare_output)(RadBuilder *, int what, rad_buf); /* 1 logits, 2 pooled, 3 scores */
    int (*declare_drafter)(RadBuilder *, const RadDrafterDecl *);
    int (*drafter_refine)(RadBuilder *, int what);          /* 1 shared_kv, 2 tree, 3 short_block */
    int (*declare_encoder)(RadBuilder *, const RadEncoderDecl *);
    int (*declare_generator)(RadBuilder *, const RadGeneratorDecl *);
    void (*note)(RadBuilder *, const char *line);
    int (*fail)(RadBuilder *, const char *what);             /* declare-time refusal, named */
    /* appended in ABI 1.0 before release: the plugin's per-declare model state, handed back
     * to step as RadCtx::model (two models of one family in a process stay apart) */
    int (*set_model)(RadBuilder *, void *model);
    /* zeroed memory that lives as long as the declared program (the plugin's model state) */
    void *(*alloc)(RadBuilder *, size_t bytes);
} RadBuilderApi;

struct RadBuilder {
    uint32_t struct_size;
    const RadBuilderApi *api;
    /* the core's state follows */
};

typedef struct RadCtxApi {
    uint32_t struct_size;
    int (*issue)(RadCtx *, rad_op, const RadOperand *, uint32_t n_operands, uint64_t n);
    void (*step_fail)(RadCtx *, const char *what);
    int (*lane)(RadCtx *, int lane);                         /* issue on lane 0 or 1 */
} RadCtxApi;

struct RadCtx {
    uint32_t struct_size;
    const RadCtxApi *api;
    void *model;        /* what the plugin's declare passed to rad_builder_set_model */
};

/* ---- builder calls (the spec's names) ------------------------------------------------------
 * The core copies every string and array a call is given before it returns: names built in a
 * stack buffer are fine. */

static inline rad_weight rad_decl_weight(RadBuilder *b, const char *name, const RadWeightDecl *d) {
    return b->api->decl_weight(b, name, d, sizeof *d);
}
static inline int rad_decl_name_map(RadBuilder *b, const RadNameMap *m) { return b->api->decl_name_map(b, m, sizeof *m); }
static inline RadEnc rad_weight_encoding(RadBuilder *b, rad_weight w) { return b->api->weight_encoding(b, w); }
/* This rank's rows of a SHARD_ROW weight: whole (part = UINT32_MAX) or one stacked part. Splits
 * are balanced (the first rows % world_size ranks own one row more), so uneven splits tile the
 * tensor; a rank's declared shape[0] must be its share (refused naming the weight), and a
 * weight with row_parts has no single span: ask each part. */
static inline int rad_weight_shard_span(RadBuilder *b, rad_weight w, uint64_t *begin, uint64_t *len) {
    return b->api->weight_shard_span(b, w, UINT32_MAX, begin, len);
}
static inline int rad_weight_shard_parts(RadBuilder *b, rad_weight w, uint32_t part, uint64_t *begin, uint64_t *len) {
    return b->api->weight_shard_span(b, w, part, begin, len);
}
static inline rad_buf rad_decl_buffer(RadBuilder *b, const char *name, const RadBufDecl *d) {
    return b->api->decl_buffer(b, name, d, sizeof *d);
}
static inline rad_kv rad_decl_kv_group(RadBuilder *b, const char *name, const RadKvDecl *d) {
    return b->api->decl_kv_group(b, name, d, sizeof *d);
}
static inline uint32_t rad_kv_block_size(RadBuilder *b, rad_kv g) { return b->api->kv_block_size(b, g); }
static inline int rad_bind_layer_kv(RadBuilder *b, uint32_t layer, rad_kv g) { return b->api->bind_layer_kv(b, layer, g); }
static inline int rad_kv_group_zero(RadBuilder *b, rad_kv g) { return b->api->kv_refine(b, g, 1); }
static inline int rad_kv_group_replicated(RadBuilder *b, rad_kv g) { return b->api->kv_refine(b, g, 2); }
static inline int rad_kv_group_dense_read(RadBuilder *b, rad_kv g) { return b->api->kv_refine(b, g, 3); }
static inline rad_op rad_decl_op(RadBuilder *b, const char *op, RadParamList p, RadWeightList w) {
    return b->api->decl_op(b, op, p.p, p.n, w.p, w.n);
}
#define RAD_OP(b, name, params, weights) rad_decl_op((b), (name), params, weights)
static inline int rad_op_reads(RadBuilder *b, rad_op op, const rad_buf *bufs, uint32_t n) { return b->api->op_access(b, op, 0, bufs, n); }
static inline int rad_op_writes(RadBuilder *b, rad_op op, const rad_buf *bufs, uint32_t n) { return b->api->op_access(b, op, 1, bufs, n); }
static inline bool rad_op_resolved(RadBuilder *b, rad_op op) { return b->api->op_resolved(b, op) != 0; }
static inline bool rad_op_declared(RadBuilder *b, const char *op) { return b->api->op_declared(b, op) != 0; }
static inline int rad_buf_concurrent(RadBuilder *b, rad_buf x) { return b->api->buf_concurrent(b, x); }
static inline int rad_lane1_window_begin(RadBuilder *b) { return b->api->lane1_window(b, 1); }
static inline int rad_lane1_window_end(RadBuilder *b) { return b->api->lane1_window(b, 0); }
static inline int rad_declare_logits(RadBuilder *b, rad_buf x) { return b->api->declare_output(b, 1, x); }
static inline int rad_declare_pooled(RadBuilder *b, rad_buf x) { return b->api->declare_output(b, 2, x); }
static inline int rad_declare_scores(RadBuilder *b) { return b->api->declare_output(b, 3, RAD_NONE_B); }
static inline int rad_declare_drafter(RadBuilder *b, const RadDrafterDecl *d) { return b->api->declare_drafter(b, d); }
static inline int rad_drafter_shared_kv(RadBuilder *b) { return b->api->drafter_refine(b, 1); }
static inline int rad_drafter_tree(RadBuilder *b) { return b->api->drafter_refine(b, 2); }
static inline int rad_drafter_short_block(RadBuilder *b) { return b->api->drafter_refine(b, 3); }
static inline int rad_declare_encoder(RadBuilder *b, const RadEncoderDecl *d) { return b->api->declare_encoder(b, d); }
static inline int rad_declare_generator(RadBuilder *b, const RadGeneratorDecl *d) { return b->api->declare_generator(b, d); }
static inline int rad_declare_audio_generator(RadBuilder *b, RadGeneratorDecl d) { d.modality = "audio"; return b->api->declare_generator(b, &d); }
static inline int rad_declare_video_generator(RadBuilder *b, RadGeneratorDecl d) { d.modality = "video"; return b->api->declare_generator(b, &d); }
static inline int rad_declare_fail(RadBuilder *b, const char *what) { return b->api->fail(b, what); }
static inline int rad_builder_set_model(RadBuilder *b, void *model) { return b->api->set_model(b, model); }
static inline void *rad_builder_alloc(RadBuilder *b, size_t bytes) { return b->api->alloc(b, bytes); }
static inline void *rad_ctx_model(const RadCtx *c) { return c->model; }

/* rad_note: a line explaining the declared shape (shown by --debug-graph and --plan-only -v). */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static inline void rad_note(RadBuilder *b, const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    b->api->note(b, line);
}

/* ---- step calls ---------------------------------------------------------------------------- */

#define RAD_EXTENT_BATCH UINT64_MAX /* n = the batch's ranged extent */
/* Zero rows is not a call: issuing over zero rows returns RAD_E_SHAPE and writes nothing. */
static inline int rad_issue(RadCtx *c, rad_op op, const RadOperand *o, uint32_t n_o, uint64_t n) {
    return c->api->issue(c, op, o, n_o, n);
}
#define RAD_ISSUE(c, op, ...) rad_issue((c), (op), (const RadOperand[]){__VA_ARGS__}, \
    (uint32_t)(sizeof((RadOperand[]){__VA_ARGS__}) / sizeof(RadOperand)), RAD_EXTENT_BATCH)
#define RAD_ISSUE_N(c, op, n, ...) rad_issue((c), (op), (const RadOperand[]){__VA_ARGS__}, \
    (uint32_t)(sizeof((RadOperand[]){__VA_ARGS__}) / sizeof(RadOperand)), (n))
/* Fails the step with `what`: every later issue in this step returns non-OK and runs nothing. */
static inline void rad_step_fail(RadCtx *c, const char *what) { c->api->step_fail(c, what); }

/* ---- the exports --------------------------------------------------------------------------- */

typedef int (*rad_arch_declare_fn)(RadBuilder *, const RadModelMeta *, const RadBuildCtx *);
typedef void (*rad_arch_step_fn)(RadCtx *, const struct RadBatch *);
typedef int (*rad_arch_probe_fn)(const RadModelMeta *, RadArchProbe *);
typedef const RadChatFormat *(*rad_arch_chat_format_fn)(const RadModelMeta *);
typedef const RadAudioFormat *(*rad_arch_audio_format_fn)(const RadModelMeta *);
/* Optional format exports a plugin writes by hand (RAD_EXPORT), looked up by name: */
/* rewrite request text into the form the model was trained on; returns bytes written or < 0 */
typedef long (*rad_arch_text_prepare_fn)(const RadModelMeta *, const char *in, char *out, size_t out_size);
/* positions of a video pass: pos[n_tok * 3] (t, h, w) for the tokens the pack yields */
typedef int (*rad_arch_video_positions_fn)(const RadModelMeta *, const RadVideoGeom *, int32_t *pos, uint32_t n_tok);
/* how patches are packed into tokens: order[n_tok] patch indices */
typedef int (*rad_arch_video_pack_fn)(const RadModelMeta *, const RadVideoGeom *, int32_t *order, uint32_t n_tok);
typedef int (*rad_arch_encode_geom_fn)(const RadModelMeta *, uint32_t media_h, uint32_t media_w, RadEncodeGeom *out);

/* What a plugin gives RAD_ARCH_PLUGIN: declare and step required, the rest optional (NULL). */
typedef struct RadArchOps {
    rad_arch_declare_fn declare;
    rad_arch_step_fn step;
    rad_arch_probe_fn probe;
    rad_arch_chat_format_fn chat_format;
    rad_arch_audio_format_fn audio_format;
    int serves_imports;            /* 1: this quantised plugin serves imported quantisations */
} RadArchOps;

/* RAD_ARCH_PLUGIN(NS, ID, QUANT, VERSION, DESC): NS names the plugin's `static const RadArchOps`.
 * Emits rad_arch_id/quant/serves_imports/probe/declare/step/chat_format/audio_format and
 * rad_plugin_info (kind RAD_PLUGIN_ARCH). The plugin's name (unique) is RAD_PLUGIN_NAME when
 * defined (one source built twice), else ID. */
#ifndef RAD_PLUGIN_NAME
#define RAD_PLUGIN_NAME_OF(ID) ID
#else
#define RAD_PLUGIN_NAME_OF(ID) RAD_PLUGIN_NAME
#endif
#define RAD_ARCH_PLUGIN(NS, ID, QUANT, VERSION, DESC)                                            \
    RAD_EXPORT const char *rad_arch_id(void) { return ID; }                                      \
    RAD_EXPORT const char *rad_arch_quant(void) { return QUANT; }                                \
    RAD_EXPORT int rad_arch_serves_imports(void) { return (NS).serves_imports; }                 \
    RAD_EXPORT int rad_arch_probe(const RadModelMeta *m, RadArchProbe *o) {                      \
        if (!(NS).probe) { uint32_t s = o->struct_size; memset(o, 0, s); o->struct_size = s; return 0; } \
        return (NS).probe(m, o);                                                                  \
    }                                                                                             \
    RAD_EXPORT int rad_arch_declare(RadBuilder *b, const RadModelMeta *m, const RadBuildCtx *c) { \
        return (NS).declare(b, m, c);                                                             \
    }                                                                                             \
    RAD_EXPORT void rad_arch_step(RadCtx *c, const struct RadBatch *bt) { (NS).step(c, bt); }    \
    RAD_EXPORT const RadChatFormat *rad_arch_chat_format(const RadModelMeta *m) {                 \
        return (NS).chat_format ? (NS).chat_format(m) : NULL;                                     \
    }                                                                                             \
    RAD_EXPORT const RadAudioFormat *rad_arch_audio_format(const RadModelMeta *m) {               \
        return (NS).audio_format ? (NS).audio_format(m) : NULL;                                   \
    }                                                                                             \
    RAD_EXPORT const RadPluginInfo *rad_plugin_info(void) {                                       \
        static const RadPluginInfo info = {sizeof(RadPluginInfo), RAD_PLUGIN_ARCH, RAD_ABI_MAJOR,  \
                                           RAD_ABI_MINOR, RAD_PLUGIN_NAME_OF(ID), VERSION, DESC};  \
        return &info;                                                                             \
    }

#ifdef __cplusplus
}
#endif

#endif
