/* llama.c — the Llama family (Llama 2/3.x, TinyLlama, SmolLM2, Mistral 7B with its sliding
 * window), one source built as two plugins per family (Llama; Qwen2, with q/k/v biases; Qwen3,
 * with per-head q/k norms: RAD_LLAMA_FAMILY below):
 *
 *   RAD_LLAMA_QUANTISED=0  "llama"       quant ""      f32/f16/bf16 weights as stored
 *   RAD_LLAMA_QUANTISED=1  "llama_ggml"  quant "ggml"  GGUF block quantisations (q8_0, q4_0, q4_1,
 *                                                      q5_0, q5_1, q4_k, q5_k, q6_k) beside floats;
 *                                                      serves imported quantisations
 *   RAD_LLAMA_QUANTISED=2  "llama_fp8"   quant "fp8_e4m3"  block-scaled fp8 linears (codes and
 *                                                      128x128 f32 scales, as DeepSeek/Qwen3-FP8
 *                                                      checkpoints) beside floats
 *
 * The two differ only in the descriptor and the encodings accepted; the graph is the same:
 *
 *   x = embed_gather(tok_embd, ids)
 *   per layer:  h = rmsnorm(x, attn_norm); q,k,v = gemm_nt(h); rope(q), rope(k);
 *               o = attn_paged(q, k, v); x += gemm_nt(o, attn_output)
 *               h = rmsnorm(x, ffn_norm); x += gemm_nt(silu_mul(gemm_nt(h, gate), gemm_nt(h, up)), down)
 *               x += cvec[l]   (--control-vector: a steered layer, arch/common/rad_cvec.h)
 *   h = rmsnorm(x, output_norm); logits = logits_gemm(output, logits_gather(h, out_ids))
 *
 * where `output` is the checkpoint's own head, or for a tied model (no head of its own) the
 * tok_embd weight itself, so a tied head is stored once.
 *
 * with each residual add settled by the following norm (fused add_rmsnorm where resolved). The
 * blocks are arch/common/rad_block_attn.h and rad_block_mlp.h; the embedding and the head
 * rad_block_vocab.h's (vocabulary-parallel under tensor parallelism). Every dimension comes from the
 * metadata; nothing is derived from the model's size. */
#include <arch/rad_arch.h>

#include <stdlib.h>

#include "../common/rad_block_attn.h"
#include "../common/rad_block_mlp.h"
#include "../common/rad_block_vocab.h"
#include "../common/rad_chat_formats.h"
#include "../common/rad_cvec.h"

#ifndef RAD_LLAMA_QUANTISED
#define RAD_LLAMA_QUANTISED 0
#endif

/* The family the source is built for: 0 Llama, 1 Qwen2 (Qwen2/2.5: the Llama layer with q/k/v
 * biases), 2 Qwen3 (the Llama layer with a per-head RMSNorm on q and on k before the rope, no
 * biases, head_dim from the metadata and not n_embd/n_head). llama.cpp writes both Qwens' q/k
 * rows as Hugging Face does (NEOX rope), so no un-interleave. */
#ifndef RAD_LLAMA_FAMILY
#define RAD_LLAMA_FAMILY 0
#endif
#if RAD_LLAMA_FAMILY == 1
#define LLAMA_ID "qwen2"
#define LLAMA_FAMILY_DESC "Qwen2 family (Qwen2, Qwen2.5, Qwen2.5-Coder)"
#define LLAMA_QKV_BIAS 1      /* blk.N.attn_{q,k,v}.bias */
#define LLAMA_QK_NORM 0
#define LLAMA_GGUF_UNPERMUTE 0 /* GGUF q/k rows as Hugging Face's */
#elif RAD_LLAMA_FAMILY == 2
#define LLAMA_ID "qwen3"
#define LLAMA_FAMILY_DESC "Qwen3 family (dense Qwen3)"
#define LLAMA_QKV_BIAS 0
#define LLAMA_QK_NORM 1       /* blk.N.attn_{q,k}_norm.weight [head_dim] */
#define LLAMA_GGUF_UNPERMUTE 0 /* GGUF q/k rows as Hugging Face's */
#else
#define LLAMA_ID "llama"
#define LLAMA_FAMILY_DESC "Llama family (Llama 2/3.x, TinyLlama, SmolLM2, Mistral)"
#define LLAMA_QKV_BIAS 0
#define LLAMA_QK_NORM 0
#define LLAMA_GGUF_UNPERMUTE 1 /* llama.cpp interleaves Llama's q/k rows for its rope */
#endif
#define LLAMA_PN RAD_PLUGIN_NAME_OF(LLAMA_ID) /* the plugin's name, in every message */

#if RAD_LLAMA_QUANTISED == 2
#define LLAMA_QUANT "fp8_e4m3"
#define LLAMA_DESC LLAMA_FAMILY_DESC ": block-scaled fp8 (e4m3, 128x128 f32 scales)"
#elif RAD_LLAMA_QUANTISED
#define LLAMA_QUANT "ggml"
#define LLAMA_DESC LLAMA_FAMILY_DESC ": GGUF block quantisations"
#else
#define LLAMA_QUANT ""
#define LLAMA_DESC LLAMA_FAMILY_DESC ": f32/f16/bf16 weights"
#endif

/* Encodings a projection / embedding weight may be stored in for this plugin. */
static const uint64_t llama_encs =
    (1ull << RAD_ENC_F32) | (1ull << RAD_ENC_F16) | (1ull << RAD_ENC_BF16)
#if RAD_LLAMA_QUANTISED == 2
    | (1ull << RAD_ENC_F8_E4M3)
#elif RAD_LLAMA_QUANTISED
    | (1ull << RAD_ENC_Q8_0) | (1ull << RAD_ENC_Q4_0) | (1ull << RAD_ENC_Q4_1) | (1ull << RAD_ENC_Q5_0) |
    (1ull << RAD_ENC_Q5_1) | (1ull << RAD_ENC_Q4_K) | (1ull << RAD_ENC_Q5_K) | (1ull << RAD_ENC_Q6_K)
#endif
    ;

#define LLAMA_MAX_LAYERS 512
#define LLAMA_NAME 160

/* What declare works from: the checked metadata and this deployment, read once (llama_hparams)
 * and handed to every declare step. */
typedef struct LlamaHparams {
    RadBlockGeom g;           /* the blocks' geometry, per rank (heads and n_ff divided) */
    uint32_t n_layers;        /* model.n_layers */
    uint32_t n_vocab;         /* model.n_vocab */
    RadVocab vocab;           /* this rank's rows of the embedding and the head (vocabulary-parallel under TP) */
    uint32_t n_head, n_head_kv, n_ff; /* the checkpoint's, whole (the GGUF un-interleave, the notes) */
    uint32_t out_rows;        /* logits rows a step may ask: n_out's bound */
    uint32_t rank, world;     /* tensor parallel: this rank of `world` (1: none) */
    RadDType kv_dtype;        /* the KV cache's element type */
    int tp_wire_lossy;        /* notes only: the all-reduce may be lossy above its floor */
    bool head_optional;       /* model.tie_embeddings is not false: the head may be absent (tied) */
    const RadControlVector *cvec; /* RadBuildCtx::cvec (the core's; read at declare only), or NULL */
    uint32_t sliding_window;  /* attention.sliding_window (0: none): the KV group's window, every attn_paged's */
    char pfx[64];             /* "" or "<scope>.": every declared name's prefix */
} LlamaHparams;

typedef struct LlamaLayer {
    RadAttnBlock attn;
    RadMlpBlock mlp;
    RadCvecLayer cvec;        /* the control vector's add after the layer (on: steered) */
} LlamaLayer;

/* The model state lives in memory the core owns for as long as the declared program
 * (rad_builder_alloc) and reaches step through RadCtx::model, so two models in one process
 * (a drafter beside its target, two engines, a sizing declare) never share it. */
typedef struct LlamaModel {
    int ready;                /* a declare completed: step may run */
    LlamaHparams hp;
    /* weights */
    rad_weight w_tok;         /* [nv, n_embd] the embedding (this rank's rows: vocab.v0..) */
    rad_weight w_out;         /* [nv, n_embd] the head, or w_tok when tied */
    int head_tied;            /* w_out is w_tok: the checkpoint has no head of its own */
    rad_weight w_out_norm;    /* [n_embd] */
    rad_weight w_rope_freqs;  /* f32 [n_rot/2], optional (GGUF's llama3 rope) */
    /* buffers */
    RadResid r;               /* x, h, y [max_tok, n_embd] */
    RadAttnScratch as;        /* every layer's attention scratch */
    RadMlpScratch ms;         /* every layer's MLP scratch */
    rad_buf head_x;           /* [out_rows, n_embd] the gathered rows */
    rad_buf logits;           /* [out_rows, n_vocab] (every rank's, whole) */
    rad_kv kv;                /* one full-attention group, every layer bound */
    /* ops */
    RadVocabEmbed embed;      /* embed_gather (TP: its part + all_reduce) -> r.x */
    LlamaLayer layers[LLAMA_MAX_LAYERS]; /* [n_layers] each block's weights and ops */
    RadPreNorm final_norm;    /* r.x -> r.h */
    rad_op op_gather;         /* logits_gather r.h -> head_x */
    RadVocabHead head;        /* logits_gemm head_x -> logits (TP: its columns + all_gather) */
} LlamaModel;

/* ---- names --------------------------------------------------------------------------------- */

/* A declared name: the scope's prefix ("draft.") then the canonical name. */
typedef struct LlamaNames {
    const char *prefix;       /* "" or "<scope>." */
    int overflow;
} LlamaNames;

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static const char *dname(LlamaNames *n, char *dst, size_t cap, const char *fmt, ...) {
    int k = snprintf(dst, cap, "%s", n->prefix);
    va_list ap;
    va_start(ap, fmt);
    int j = (k >= 0 && (size_t)k < cap) ? vsnprintf(dst + k, cap - (size_t)k, fmt, ap) : -1;
    va_end(ap);
    if (j < 0 || (size_t)(k + j) >= cap) n->overflow = 1;
    return dst;
}

/* One name-map entry. `kind` COPY: srcs are alternatives; ROWS: rope un-interleave over `heads`. */
static int map_entry(RadBuilder *b, RadMapKind kind, const char *dst, const char *const *src, uint32_t heads) {
    RadNameMap e;
    memset(&e, 0, sizeof e);
    e.kind = kind;
    e.dst = dst;
    e.src = src;
    if (kind == RAD_MAP_ROWS) {
        e.begin = 0;
        e.end = 0;
        e.perm = RAD_PERM_ROPE_UNINTERLEAVE;
        e.heads = heads;
    }
    return rad_decl_name_map(b, &e);
}

static int map_copy1(RadBuilder *b, const char *dst, const char *src) {
    const char *const s[] = {src, NULL};
    return map_entry(b, RAD_MAP_COPY, dst, s, 0);
}

/* Per-layer tensors: declared suffix, Hugging Face suffix, GGUF suffix, and (q/k) which head
 * count the GGUF rope un-interleave runs over (0: plain copy). */
enum { HEADS_NONE = 0, HEADS_Q = 1, HEADS_KV = 2 };
static const struct {
    const char *decl, *hf, *gguf;
    int heads;
} llama_layer_tensors[] = {
    {"attn_norm.weight", "input_layernorm.weight", "attn_norm.weight", HEADS_NONE},
    {"attn_q.weight", "self_attn.q_proj.weight", "attn_q.weight", HEADS_Q},
    {"attn_k.weight", "self_attn.k_proj.weight", "attn_k.weight", HEADS_KV},
    {"attn_v.weight", "self_attn.v_proj.weight", "attn_v.weight", HEADS_NONE},
    {"attn_output.weight", "self_attn.o_proj.weight", "attn_output.weight", HEADS_NONE},
    {"ffn_norm.weight", "post_attention_layernorm.weight", "ffn_norm.weight", HEADS_NONE},
    {"ffn_gate.weight", "mlp.gate_proj.weight", "ffn_gate.weight", HEADS_NONE},
    {"ffn_up.weight", "mlp.up_proj.weight", "ffn_up.weight", HEADS_NONE},
    {"ffn_down.weight", "mlp.down_proj.weight", "ffn_down.weight", HEADS_NONE},
#if LLAMA_QKV_BIAS
    {"attn_q.bias", "self_attn.q_proj.bias", "attn_q.bias", HEADS_NONE},
    {"attn_k.bias", "self_attn.k_proj.bias", "attn_k.bias", HEADS_NONE},
    {"attn_v.bias", "self_attn.v_proj.bias", "attn_v.bias", HEADS_NONE},
#endif
#if LLAMA_QK_NORM
    {"attn_q_norm.weight", "self_attn.q_norm.weight", "attn_q_norm.weight", HEADS_NONE},
    {"attn_k_norm.weight", "self_attn.k_norm.weight", "attn_k_norm.weight", HEADS_NONE},
#endif
};
/* the rows after T_DOWN are the family's: T_BQ..T_BV (Qwen2) or T_QN, T_KN (Qwen3) */
enum { T_ATTN_NORM, T_Q, T_K, T_V, T_O, T_FFN_NORM, T_GATE, T_UP, T_DOWN, T_BQ, T_BK, T_BV };
enum { T_QN = T_DOWN + 1, T_KN };
#define T_COUNT ((int)(sizeof llama_layer_tensors / sizeof llama_layer_tensors[0]))

/* ---- 0. hyperparameters ------------------------------------------------------------------- */

/* The rope: type, factors. Returns 0, or a refusal already named. */
static int llama_rope(RadBuilder *b, const RadModelMeta *meta, RadBlockGeom *g) {
    const char *type;
    float f, lo, hi;
    uint32_t orig;
    rad_meta_str(meta, "rope.scaling.type", "", &type);
    g->rope_scaling = RAD_ROPE_SCALING_NONE;
    g->rope_factor = 1.0f;
    g->rope_low_freq_factor = g->rope_high_freq_factor = 0.0f;
    g->rope_orig_ctx = 0;
    g->rope_has_freqs = 0; /* set with the weights when the checkpoint has rope_freqs.weight */
    if (!*type || !strcmp(type, "none") || !strcmp(type, "default")) {
        /* older GGUFs carry a linear factor as rope.scale_linear, with no type */
        if (rad_meta_f32(meta, "rope.scale_linear", 1.0f, &f) < 0 || !(f > 0))
            return rad_block_fail(b, LLAMA_PN ": rope.scale_linear is not a positive number");
        if (f != 1.0f) {
            g->rope_scaling = RAD_ROPE_SCALING_LINEAR;
            g->rope_factor = f;
        }
        return 0;
    }
    if (!strcmp(type, "linear")) g->rope_scaling = RAD_ROPE_SCALING_LINEAR;
    else if (!strcmp(type, "llama3")) g->rope_scaling = RAD_ROPE_SCALING_LLAMA3;
    else
        return rad_block_fail(b, LLAMA_PN ": rope.scaling.type \"%s\" is not served (none, linear, llama3)", type);
    if (rad_meta_f32(meta, "rope.scaling.factor", 0, &f) <= 0 || !(f > 0))
        return rad_block_fail(b, LLAMA_PN ": rope.scaling.factor missing or not positive for rope.scaling.type %s", type);
    g->rope_factor = f;
    if (g->rope_scaling != RAD_ROPE_SCALING_LLAMA3) return 0;
    if (rad_meta_f32(meta, "rope.scaling.low_freq_factor", 0, &lo) <= 0 || !(lo > 0))
        return rad_block_fail(b, LLAMA_PN ": rope.scaling.low_freq_factor missing or not positive (llama3 rope)");
    if (rad_meta_f32(meta, "rope.scaling.high_freq_factor", 0, &hi) <= 0 || !(hi > lo))
        return rad_block_fail(b, LLAMA_PN ": rope.scaling.high_freq_factor missing or not above low_freq_factor (llama3 rope)");
    /* absent: transformers takes max_position_embeddings (model.n_ctx_train) */
    if (rad_meta_u32(meta, "rope.scaling.original_context_length", meta->n_ctx_train > 0 ? (uint32_t)meta->n_ctx_train : 0,
                     &orig) < 0 || orig == 0)
        return rad_block_fail(b, LLAMA_PN ": rope.scaling.original_context_length (or model.n_ctx_train) missing or zero "
                             "(llama3 rope)");
    g->rope_low_freq_factor = lo;
    g->rope_high_freq_factor = hi;
    g->rope_orig_ctx = orig;
    return 0;
}

static int llama_check_meta(RadBuilder *b, const RadModelMeta *m, const RadBuildCtx *ctx) {
    if (m->struct_size < offsetof(RadModelMeta, rope_theta) + sizeof m->rope_theta)
        return rad_block_fail(b, LLAMA_PN ": RadModelMeta too old (struct_size %u)", (unsigned)m->struct_size);
#define LLAMA_POS(field)                                                                      \
    if (m->field <= 0) return rad_block_fail(b, LLAMA_PN ": model." #field " is %d (must be positive)", (int)m->field)
    LLAMA_POS(n_layers);
    LLAMA_POS(n_embd);
    LLAMA_POS(n_head);
    LLAMA_POS(n_head_kv);
    LLAMA_POS(head_dim);
    LLAMA_POS(n_ff);
    LLAMA_POS(n_vocab);
#undef LLAMA_POS
    if (m->n_layers > LLAMA_MAX_LAYERS)
        return rad_block_fail(b, LLAMA_PN ": model.n_layers %d exceeds the plugin's %d", (int)m->n_layers, LLAMA_MAX_LAYERS);
    if (m->n_head % m->n_head_kv != 0)
        return rad_block_fail(b, LLAMA_PN ": model.n_head_kv %d does not divide model.n_head %d", (int)m->n_head_kv,
                          (int)m->n_head);
    if (m->head_dim % 2 != 0)
        return rad_block_fail(b, LLAMA_PN ": model.head_dim %d is odd (rope rotates pairs)", (int)m->head_dim);
    if (m->n_expert > 0)
        return rad_block_fail(b, LLAMA_PN ": model.n_expert is %d: mixture-of-experts is not served by llama", (int)m->n_expert);
    if (!(m->rms_eps > 0)) return rad_block_fail(b, LLAMA_PN ": model.rms_eps is %g (must be positive)", (double)m->rms_eps);
    if (!(m->rope_theta > 0)) return rad_block_fail(b, LLAMA_PN ": model.rope_theta is %g (must be positive)", (double)m->rope_theta);
    if (ctx->max_tok == 0) return rad_block_fail(b, LLAMA_PN ": RadBuildCtx.max_tok is 0");
    if (rad_tp_check(b, LLAMA_PN, m, ctx) != 0) return RAD_E_UNSUPPORTED;
    if (ctx->kv_quant != RAD_KVQ_NONE) return rad_block_fail(b, LLAMA_PN ": RadBuildCtx.kv_quant (narrow fp8 KV) is not served");
    if (ctx->cvec && rad_cvec_check(b, LLAMA_PN, ctx->cvec, (uint32_t)m->n_layers, (uint32_t)m->n_embd) != 0)
        return RAD_E_UNSUPPORTED;
    if (ctx->tp_attn_rows) return rad_block_fail(b, LLAMA_PN ": RadBuildCtx.tp_attn_rows (row-split attention) is not served");
    return 0;
}

/* The geometry, read and divided over the ranks (whole heads per rank). */
static int llama_geom(RadBuilder *b, const RadModelMeta *meta, const RadBuildCtx *ctx, uint32_t world, RadBlockGeom *g) {
    RadTpShare sh;
    const char *dim;
    if (rad_tp_share((uint32_t)meta->n_head, (uint32_t)meta->n_head_kv, (uint32_t)meta->n_ff, ctx->rank, world, &sh, &dim))
        return rad_block_fail(b, LLAMA_PN ": %s does not split over %u ranks", dim, world); /* llama_check_meta said why first */
    g->n_embd = (uint32_t)meta->n_embd;
    g->n_head = sh.nq, g->q_head0 = sh.q0;
    g->n_head_kv = sh.nkv, g->kv_head0 = sh.kv0, g->kv_replicated = sh.kv_shared;
    g->head_dim = (uint32_t)meta->head_dim;
    g->n_ff = sh.nff, g->ff0 = sh.ff0;
    g->rms_eps = meta->rms_eps;
    g->rope_theta = meta->rope_theta;
    int r = rad_meta_u32(meta, "rope.dimension_count", g->head_dim, &g->n_rot);
    if (r < 0 || g->n_rot == 0 || g->n_rot > g->head_dim || g->n_rot % 2)
        return rad_block_fail(b, LLAMA_PN ": rope.dimension_count must be even and within head_dim %u", g->head_dim);
    int rc = llama_rope(b, meta, g);
    if (rc != 0) return rc;
    g->attn_scale = rad_block_rsqrt(g->head_dim);
    g->prefill_fp8 = ctx->attn_prefill_fp8;
    g->max_tok = ctx->max_tok;
    g->world_size = world;
    g->tp_wire_lossy = ctx->tp_wire_lossy;
    g->tp_wire_min_bytes = ctx->tp_wire_min_bytes;
    g->linear_dtype = RAD_ANY; /* as stored; checked with rad_weight_encoding (llama_check_enc) */
    g->norm_dtype = RAD_F32;   /* a bf16/f16 gamma widens exactly */
    return 0;
}

static int llama_hparams(RadBuilder *b, const RadModelMeta *meta, const RadBuildCtx *ctx, LlamaHparams *hp) {
    int rc;
    if ((rc = llama_check_meta(b, meta, ctx)) != 0) return rc;
    if (ctx->scope && *ctx->scope) {
        int k = snprintf(hp->pfx, sizeof hp->pfx, "%s.", ctx->scope);
        if (k < 0 || (size_t)k >= sizeof hp->pfx) return rad_block_fail(b, LLAMA_PN ": RadBuildCtx.scope too long");
    }
    hp->world = ctx->world_size ? ctx->world_size : 1;
    hp->rank = ctx->rank;
    if ((rc = llama_geom(b, meta, ctx, hp->world, &hp->g)) != 0) return rc;
    hp->n_layers = (uint32_t)meta->n_layers;
    hp->n_vocab = (uint32_t)meta->n_vocab;
    if (rad_vocab_init(&hp->vocab, hp->n_vocab, hp->rank, hp->world) != 0)
        return rad_block_fail(b, LLAMA_PN ": model.n_vocab %u does not split over %u ranks", hp->n_vocab, hp->world);
    hp->cvec = ctx->cvec;
    hp->n_head = (uint32_t)meta->n_head;
    hp->n_head_kv = (uint32_t)meta->n_head_kv;
    hp->n_ff = (uint32_t)meta->n_ff;
    /* logits rows: what the KL mode asks, else one per sequence and speculative token */
    uint64_t rows = ctx->max_out_rows ? ctx->max_out_rows : (uint64_t)(ctx->max_seqs ? ctx->max_seqs : 1) * (1u + ctx->max_spec);
    if (rows > ctx->max_tok) rows = ctx->max_tok;
    hp->out_rows = (uint32_t)(rows ? rows : 1);
    hp->kv_dtype = ctx->kv_dtype;
    hp->tp_wire_lossy = ctx->tp_wire_lossy;
    rad_meta_bool(meta, "model.tie_embeddings", true, &hp->head_optional);
    rad_meta_u32(meta, "attention.sliding_window", 0, &hp->sliding_window);
    hp->g.attn_window = hp->sliding_window;
    return 0;
}

/* ---- 1. the name map ----------------------------------------------------------------------- */

/* Hugging Face entries first, GGUF beside them (the first entry whose sources are present wins).
 * Heads for the un-interleave are the checkpoint's (whole model), not per rank. */
static int llama_declare_map(RadBuilder *b, const LlamaHparams *hp) {
    LlamaNames nn = {hp->pfx, 0};
    char dst[LLAMA_NAME], hf[LLAMA_NAME], gg[LLAMA_NAME];
    int rc = 0;
    rc |= map_copy1(b, dname(&nn, dst, sizeof dst, "tok_embd.weight"), "model.embed_tokens.weight");
    rc |= map_copy1(b, dst, "token_embd.weight");
    rc |= map_copy1(b, dname(&nn, dst, sizeof dst, "output_norm.weight"), "model.norm.weight");
    rc |= map_copy1(b, dst, "output_norm.weight");
    /* the head: its own name only. A tied checkpoint has none, and the weights step reads the
     * head from the embedding's weight instead of storing a copy */
    rc |= map_copy1(b, dname(&nn, dst, sizeof dst, "output.weight"), "lm_head.weight");
    rc |= map_copy1(b, dst, "output.weight");
    /* GGUF's precomputed llama3 rope factors (optional; see the weights step) */
    rc |= map_copy1(b, dname(&nn, dst, sizeof dst, "rope_freqs.weight"), "rope_freqs.weight");
    for (uint32_t l = 0; l < hp->n_layers; l++) {
        for (int t = 0; t < T_COUNT; t++) {
            dname(&nn, dst, sizeof dst, "blk.%d.%s", (int)l, llama_layer_tensors[t].decl);
            snprintf(hf, sizeof hf, "model.layers.%d.%s", (int)l, llama_layer_tensors[t].hf);
            snprintf(gg, sizeof gg, "blk.%d.%s", (int)l, llama_layer_tensors[t].gguf);
            rc |= map_copy1(b, dst, hf);
            if (llama_layer_tensors[t].heads == HEADS_NONE || !LLAMA_GGUF_UNPERMUTE) {
                rc |= map_copy1(b, dst, gg);
            } else {
                const char *const src[] = {gg, NULL};
                rc |= map_entry(b, RAD_MAP_ROWS, dst, src, llama_layer_tensors[t].heads == HEADS_Q ? hp->n_head : hp->n_head_kv);
            }
        }
    }
    if (rc || nn.overflow) return rad_block_fail(b, LLAMA_PN ": a name-map entry was refused");
    return 0;
}

/* ---- 2. weights ---------------------------------------------------------------------------- */

/* A weight taken as stored: its encoding must be one this plugin's kernels take. */
static int llama_check_enc(RadBuilder *b, rad_weight w, const char *name) {
    RadEnc e = rad_weight_encoding(b, w);
    if ((unsigned)e >= RAD_ENC_COUNT) return 0; /* not known yet (absent, or a plan): the core checks */
    if (llama_encs & (1ull << e)) return 0;
    const RadEncInfo *info = rad_enc_info(e);
    return rad_block_fail(b, LLAMA_PN ": weight %s is stored as %s, which this plugin does not serve%s", name,
                      info ? info->name : "?",
                      RAD_LLAMA_QUANTISED ? "" : e == RAD_ENC_F8_E4M3 ? " (block-scaled fp8: " LLAMA_ID "_fp8)"
                                                                      : " (GGUF block quantisations: " LLAMA_ID "_ggml)");
}

/* The embedding, the head and the final norm. The head is stored under its own name when the
 * checkpoint has one (an untied model, or one that ships lm_head.weight beside a tied config);
 * absent, the model is tied and logits_gemm takes the embedding's weight itself, so the
 * container holds the matrix once. Optional unless the metadata says untied: then a missing
 * head is an error, never a silent fallback to the embedding. */
static int llama_weights_ends(RadBuilder *b, const LlamaHparams *hp, LlamaModel *m) {
    LlamaNames nn = {hp->pfx, 0};
    char name[LLAMA_NAME];
    int rc;
    uint64_t span[2];
    RadWeightDecl d = rad_vocab_decl(&hp->vocab, hp->g.n_embd, 0, span);
    m->w_tok = rad_decl_weight(b, dname(&nn, name, sizeof name, "tok_embd.weight"), &d);
    if (m->w_tok.id < 0) return rad_block_fail(b, LLAMA_PN ": weight %s was refused", name);
    if ((rc = llama_check_enc(b, m->w_tok, name)) != 0) return rc;
    d = rad_vocab_decl(&hp->vocab, hp->g.n_embd, hp->head_optional, span);
    m->w_out = rad_decl_weight(b, dname(&nn, name, sizeof name, "output.weight"), &d);
    if (m->w_out.id < 0) return rad_block_fail(b, LLAMA_PN ": weight %s was refused", name);
    m->head_tied = (unsigned)rad_weight_encoding(b, m->w_out) >= RAD_ENC_COUNT;
    if (m->head_tied) m->w_out = m->w_tok; /* its encoding was checked above */
    else if ((rc = llama_check_enc(b, m->w_out, name)) != 0) return rc;
    m->w_out_norm = rad_block_norm_weight(b, &hp->g, dname(&nn, name, sizeof name, "output_norm.weight"),
                                          (RadGroup){RAD_GROUP_NONE, 0, 0}, hp->g.n_embd);
    if (m->w_out_norm.id < 0) return rad_block_fail(b, LLAMA_PN ": weight %s was refused", name);
    return 0;
}

/* GGUF's llama3 rope (llama.cpp writes Llama 3.1's rope_scaling as this tensor, with no
 * rope.scaling.* keys): f32 [n_rot/2] frequency divisors, inv_freq[i] / rope_freqs[i]. When
 * present both rope ops take it as their weight (docs/OPS.md, rope); a Hugging Face source has
 * the scaling as rope.scaling.* keys instead, computed by the rope op itself. A wrong shape or
 * encoding is refused by the core, naming the tensor. Sets the geometry's rope_has_freqs. */
static int llama_weights_rope(RadBuilder *b, LlamaHparams *hp, LlamaModel *m) {
    LlamaNames nn = {hp->pfx, 0};
    char name[LLAMA_NAME];
    RadWeightDecl d;
    memset(&d, 0, sizeof d);
    d.dtype = RAD_F32;
    d.rank = 1;
    d.shape[0] = hp->g.n_rot / 2;
    d.access = RAD_ACCESS_PER_TOKEN; /* read by every layer's rope, every step */
    d.shard = RAD_SHARD_NONE;
    d.optional = 1;
    m->w_rope_freqs = rad_decl_weight(b, dname(&nn, name, sizeof name, "rope_freqs.weight"), &d);
    if (m->w_rope_freqs.id < 0) return rad_block_fail(b, LLAMA_PN ": weight %s was refused", name);
    if ((unsigned)rad_weight_encoding(b, m->w_rope_freqs) >= RAD_ENC_COUNT) return 0;
    if (hp->g.rope_scaling == RAD_ROPE_SCALING_LLAMA3)
        return rad_block_fail(b, LLAMA_PN ": %s and rope.scaling.type llama3 both scale the rope (the scaling would apply "
                             "twice): a checkpoint carries one of them", name);
    hp->g.rope_has_freqs = 1;
    hp->g.rope_freqs = m->w_rope_freqs;
    return 0;
}

/* One layer's nine weights (+ the family's biases or q/k norms), the projections' encodings checked. */
static int llama_weights_layer(RadBuilder *b, const LlamaHparams *hp, uint32_t l, LlamaLayer *L) {
    LlamaNames nn = {hp->pfx, 0};
    char nmv[T_COUNT][LLAMA_NAME];
    int rc;
    for (int t = 0; t < T_COUNT; t++) dname(&nn, nmv[t], sizeof nmv[t], "blk.%u.%s", l, llama_layer_tensors[t].decl);
    if (nn.overflow) return rad_block_fail(b, LLAMA_PN ": a declared name is too long");
    RadAttnNames an = {.norm = nmv[T_ATTN_NORM], .q = nmv[T_Q], .k = nmv[T_K], .v = nmv[T_V], .o = nmv[T_O]};
#if LLAMA_QKV_BIAS
    an.bq = nmv[T_BQ], an.bk = nmv[T_BK], an.bv = nmv[T_BV];
#endif
#if LLAMA_QK_NORM
    an.qn = nmv[T_QN], an.kn = nmv[T_KN];
#endif
    RadMlpNames mn = {nmv[T_FFN_NORM], nmv[T_GATE], nmv[T_UP], nmv[T_DOWN]};
    if (rad_attn_declare_weights(b, &hp->g, l, &an, &L->attn) != 0)
        return rad_block_fail(b, LLAMA_PN ": layer %u: an attention weight was refused", l);
    if (rad_mlp_declare_weights(b, &hp->g, l, &mn, &L->mlp) != 0)
        return rad_block_fail(b, LLAMA_PN ": layer %u: an MLP weight was refused", l);
    const rad_weight lw[] = {L->attn.qkv.w_q, L->attn.qkv.w_k, L->attn.qkv.w_v, L->attn.w_o,
                             L->mlp.w_gate,   L->mlp.w_up,     L->mlp.w_down};
    const int lt[] = {T_Q, T_K, T_V, T_O, T_GATE, T_UP, T_DOWN};
    for (int i = 0; i < 7; i++)
        if ((rc = llama_check_enc(b, lw[i], nmv[lt[i]])) != 0) return rc;
    return 0;
}

static int llama_declare_weights(RadBuilder *b, LlamaHparams *hp, LlamaModel *m) {
    int rc;
    if ((rc = llama_weights_ends(b, hp, m)) != 0) return rc;
    if ((rc = llama_weights_rope(b, hp, m)) != 0) return rc;
    for (uint32_t l = 0; l < hp->n_layers; l++)
        if ((rc = llama_weights_layer(b, hp, l, &m->layers[l])) != 0) return rc;
    return 0;
}

/* ---- 3. buffers ---------------------------------------------------------------------------- */

static int llama_declare_buffers(RadBuilder *b, const LlamaHparams *hp, LlamaModel *m) {
    const RadBlockGeom *g = &hp->g;
    if (rad_resid_declare(b, g, hp->pfx, &m->r) != 0 || rad_attn_scratch_declare(b, g, hp->pfx, &m->as) != 0 ||
        rad_mlp_scratch_declare(b, g, hp->pfx, &m->ms) != 0)
        return rad_block_fail(b, LLAMA_PN ": a buffer was refused");
    m->head_x = rad_block_buf(b, hp->pfx, "head.x", hp->out_rows, g->n_embd);
    m->logits = rad_block_buf(b, hp->pfx, "logits", hp->out_rows, hp->n_vocab);
    if (m->head_x.id < 0 || m->logits.id < 0) return rad_block_fail(b, LLAMA_PN ": a head buffer was refused");
    return 0;
}

/* ---- 4. the KV group: one group, every layer bound to it (a window group for Mistral) -------- */

static int llama_declare_kv(RadBuilder *b, const LlamaHparams *hp, LlamaModel *m) {
    LlamaNames nn = {hp->pfx, 0};
    char name[LLAMA_NAME];
    uint32_t l;
    m->kv = rad_attn_kv_declare(b, &hp->g, dname(&nn, name, sizeof name, "kv"),
                                hp->sliding_window ? RAD_KV_WINDOW : RAD_KV_FULL, hp->kv_dtype, hp->sliding_window);
    if (m->kv.id < 0) return rad_block_fail(b, LLAMA_PN ": the KV group was refused");
    if (rad_attn_kv_bind(b, m->kv, 0, hp->n_layers, &l) != 0) return rad_block_fail(b, LLAMA_PN ": layer %u: KV binding refused", l);
    return 0;
}

/* ---- 5. the embedding and the layers -------------------------------------------------------- */

static int llama_declare_layers(RadBuilder *b, const LlamaHparams *hp, LlamaModel *m) {
    const RadBlockGeom *g = &hp->g;
    if (rad_vocab_embed_declare(b, g, &hp->vocab, m->w_tok, m->r.x, &m->embed) != 0)
        return rad_block_fail(b, LLAMA_PN ": the embedding was refused");
    for (uint32_t l = 0; l < hp->n_layers; l++) {
        LlamaLayer *L = &m->layers[l];
        if (rad_attn_declare_ops(b, g, m->kv, &m->r, &m->as, &L->attn) != 0)
            return rad_block_fail(b, LLAMA_PN ": layer %u: an attention op was refused", l);
        if (rad_mlp_declare_ops(b, g, &m->r, &m->ms, &L->mlp) != 0)
            return rad_block_fail(b, LLAMA_PN ": layer %u: an MLP op was refused", l);
        if (rad_cvec_declare(b, g, hp->cvec, l, &m->r, &L->cvec) != 0)
            return rad_block_fail(b, LLAMA_PN ": layer %u: the control vector's weight or add_bias was refused", l);
    }
    return 0;
}

/* ---- 6. the head: final norm, the rows that need logits, logits ----------------------------- */

static int llama_declare_head(RadBuilder *b, const LlamaHparams *hp, LlamaModel *m) {
    const RadBlockGeom *g = &hp->g;
    if (rad_prenorm_declare(b, g, &m->r, m->w_out_norm, &m->final_norm) != 0)
        return rad_block_fail(b, LLAMA_PN ": the final norm was refused");
    m->op_gather = RAD_OP(b, "logits_gather",
                          RAD_PARAMS(RAD_RANGE("M", 1, hp->out_rows), RAD_INT("N", g->n_embd)), RAD_NO_WEIGHTS);
    if (m->op_gather.id < 0 ||
        rad_vocab_head_declare(b, g, &hp->vocab, hp->pfx, hp->out_rows, m->w_out, m->head_x, m->logits, &m->head) != 0)
        return rad_block_fail(b, LLAMA_PN ": the head was refused");
    rad_op_reads(b, m->op_gather, RAD_BUFS(m->r.h), 1);
    rad_op_writes(b, m->op_gather, RAD_BUFS(m->head_x), 1);
    if (rad_declare_logits(b, m->logits) != 0) return rad_block_fail(b, LLAMA_PN ": the logits buffer was refused");
    return 0;
}

/* ---- 7. notes: the declared shape, for --debug-graph and --plan-only -v --------------------- */

static void llama_note_rope(RadBuilder *b, const RadBlockGeom *g) {
    if (g->rope_has_freqs)
        rad_note(b, "rope: theta %g, n_rot %u, frequencies divided by rope_freqs.weight [%u] (GGUF's llama3 "
                    "scaling)%s", (double)g->rope_theta, g->n_rot, g->n_rot / 2,
                 g->rope_scaling == RAD_ROPE_SCALING_LINEAR ? ", after the linear factor" : "");
    else if (g->rope_scaling == RAD_ROPE_SCALING_LLAMA3)
        rad_note(b, "rope: theta %g, n_rot %u, llama3 scaling factor %g low %g high %g orig_ctx %u",
                 (double)g->rope_theta, g->n_rot, (double)g->rope_factor, (double)g->rope_low_freq_factor,
                 (double)g->rope_high_freq_factor, g->rope_orig_ctx);
    else if (g->rope_scaling == RAD_ROPE_SCALING_LINEAR)
        rad_note(b, "rope: theta %g, n_rot %u, linear scaling factor %g", (double)g->rope_theta, g->n_rot,
                 (double)g->rope_factor);
    else
        rad_note(b, "rope: theta %g, n_rot %u, no scaling", (double)g->rope_theta, g->n_rot);
}

static void llama_notes(RadBuilder *b, const LlamaHparams *hp, const LlamaModel *m) {
    const RadBlockGeom *g = &hp->g;
    uint32_t fused = m->final_norm.mode == RAD_PRENORM_FUSED, norms = 2 * hp->n_layers + 1;
    for (uint32_t l = 0; l < hp->n_layers; l++)
        fused += (m->layers[l].attn.pre.mode == RAD_PRENORM_FUSED) + (m->layers[l].mlp.pre.mode == RAD_PRENORM_FUSED);
    rad_note(b, "%s: %d layers, n_embd %d, GQA %d:%d, head_dim %d, n_ff %d, vocab %d, %s lm_head",
             LLAMA_PN, (int)hp->n_layers, (int)g->n_embd, (int)hp->n_head, (int)hp->n_head_kv,
             (int)g->head_dim, (int)hp->n_ff, (int)hp->n_vocab, m->head_tied ? "tied" : "untied");
    llama_note_rope(b, g);
    rad_note(b, "weights: projections and embedding as stored (%s), norms f32; %u of %u norms fuse the residual add",
             RAD_LLAMA_QUANTISED == 2 ? "f32/f16/bf16 or block-scaled fp8" : RAD_LLAMA_QUANTISED ? "f32/f16/bf16 or GGUF blocks"
                                                                                         : "f32/f16/bf16", fused, norms);
    if (LLAMA_QK_NORM)
        rad_note(b, "attention: head_rmsnorm on q (%u heads) and k (%u heads) over head_dim %u before the rope "
                    "(attn_q_norm / attn_k_norm)", g->n_head, g->n_head_kv, g->head_dim);
    rad_note(b, "KV: one %s group, %u kv heads x %u per rank, every layer bound; max_tok %u",
             hp->sliding_window ? "window" : "full", g->n_head_kv, g->head_dim, g->max_tok);
    rad_note(b, "head: final norm over the step's rows, logits_gather of n_out rows, logits [%u, %u]", hp->out_rows,
             hp->n_vocab);
    if (m->head_tied)
        rad_note(b, "head: tied, a view of the embedding: logits_gemm reads %stok_embd.weight (no %soutput.weight "
                    "in the checkpoint; the matrix is stored once)", hp->pfx, hp->pfx);
    if (hp->world > 1)
        rad_note(b, "tensor parallel: rank %u of %u, %u heads / %u kv heads / n_ff %u / vocabulary rows [%u, %u) per rank, "
                    "all_reduce %s; the head's columns all_gathered into the logits", hp->rank, hp->world, g->n_head,
                 g->n_head_kv, g->n_ff, hp->vocab.v0, hp->vocab.v0 + hp->vocab.nv,
                 hp->tp_wire_lossy ? "lossy above the floor" : "exact");
    uint32_t steered = 0;
    for (uint32_t l = 0; l < hp->n_layers; l++) steered += m->layers[l].cvec.on;
    if (hp->cvec)
        rad_note(b, "control vector: %u of %u layers steered (x += %s<l> after the layer's residual add; "
                    "the next norm unfused)", steered, hp->n_layers, RAD_CVEC_WEIGHT_PREFIX);
    if (hp->sliding_window > 0)
        rad_note(b, "attention.sliding_window %u: every layer attends to the last %u keys (a WINDOW KV group; blocks "
                    "before the window are released)", hp->sliding_window, hp->sliding_window);
}

/* ---- declare ------------------------------------------------------------------------------- */

static int llama_declare(RadBuilder *b, const RadModelMeta *meta, const RadBuildCtx *ctx_in) {
    /* fields beyond the producer's struct_size read as zero */
    RadBuildCtx ctx;
    memset(&ctx, 0, sizeof ctx);
    memcpy(&ctx, ctx_in, ctx_in->struct_size < sizeof ctx ? ctx_in->struct_size : sizeof ctx);
    LlamaModel *m = rad_builder_alloc(b, sizeof *m);
    if (!m) return 1;
    rad_builder_set_model(b, m);
    LlamaHparams *hp = &m->hp;
    int rc;
    if ((rc = llama_hparams(b, meta, &ctx, hp)) != 0) return rc;       /* 0. hyperparameters */
    if ((rc = llama_declare_map(b, hp)) != 0) return rc;               /* 1. the name map */
    if ((rc = llama_declare_weights(b, hp, m)) != 0) return rc;        /* 2. weights */
    if ((rc = llama_declare_buffers(b, hp, m)) != 0) return rc;        /* 3. buffers */
    if ((rc = llama_declare_kv(b, hp, m)) != 0) return rc;             /* 4. the KV group */
    if ((rc = llama_declare_layers(b, hp, m)) != 0) return rc;         /* 5. embedding, layers */
    if ((rc = llama_declare_head(b, hp, m)) != 0) return rc;           /* 6. the head */
    llama_notes(b, hp, m);                                             /* 7. notes */
    m->ready = 1;
    return 0;
}

/* ---- step ---------------------------------------------------------------------------------- */

static void llama_step(RadCtx *c, const RadBatch *bt) {
    const LlamaModel *m = rad_ctx_model(c);
    const uint64_t n = bt->n_tok;
    int rc;
    if (!m || !m->ready) {
        rad_step_fail(c, LLAMA_PN ": step before a successful declare");
        return;
    }
    if (bt->struct_size >= offsetof(RadBatch, draft_pass) + sizeof bt->draft_pass && bt->draft_pass != 0) {
        rad_step_fail(c, LLAMA_PN ": a draft pass, but no drafter is declared");
        return;
    }
    if (n > m->hp.g.max_tok || bt->n_out > m->hp.out_rows || bt->n_out > n) {
        rad_step_fail(c, LLAMA_PN ": the step exceeds the declared bounds (n_tok, n_out)");
        return;
    }
    if (n == 0) return; /* zero rows is not a call */
    if ((rc = rad_vocab_embed_step(c, &m->embed, m->w_tok, bt->token_ids, m->r.x, n)) != 0) return;
    for (uint32_t l = 0; l < m->hp.n_layers; l++) {
        if (rad_attn_step(c, &m->layers[l].attn, bt) != 0) return;
        if (rad_mlp_step(c, &m->layers[l].mlp, bt) != 0) return;
        if (rad_cvec_step(c, &m->layers[l].cvec, &m->r, n) != 0) return;
    }
    if (bt->n_out == 0) return; /* a chunk that finishes no sequence: no head */
    if (rad_prenorm_step(c, &m->final_norm, n) != 0) return;
    const uint64_t k = bt->n_out;
    if ((rc = RAD_ISSUE_N(c, m->op_gather, k, brows(m->r.h, n), praw(bt->out_ids, RAD_I32, k), brows(m->head_x, k))) != 0)
        return;
    (void)rad_vocab_head_step(c, &m->head, m->w_out, m->head_x, m->logits, k);
}

/* ---- probe, chat format -------------------------------------------------------------------- */

static int llama_probe(const RadModelMeta *meta, RadArchProbe *out) {
    uint32_t s = out->struct_size;
    (void)meta;
    memset(out, 0, s < sizeof *out ? s : sizeof *out);
    out->struct_size = s;
    if (s >= offsetof(RadArchProbe, shape_probe_ok) + sizeof out->shape_probe_ok) out->shape_probe_ok = 1;
    if (s >= offsetof(RadArchProbe, control_vector_ok) + sizeof out->control_vector_ok) out->control_vector_ok = 1;
    return 0;
}

static const RadChatFormat *llama_chat_format(const RadModelMeta *meta) {
    /* nothing in the metadata decides: Llama 2 [INST] for Llama 2's 32000-token SentencePiece
     * vocabulary, Llama 3 headers for Llama 3's 128256-token one */
    const RadChatFormat *fallback = NULL;
    if (meta && meta->arch_id && !strcmp(meta->arch_id, "llama") && RAD_LLAMA_FAMILY == 0) {
        if (meta->n_vocab == 32000) fallback = &rad_chat_llama2;
        else if (meta->n_vocab == 128256) fallback = &rad_chat_llama3;
    }
    if (RAD_LLAMA_FAMILY == 1) fallback = &rad_chat_chatml; /* Qwen2's own template, less its default */
    if (RAD_LLAMA_FAMILY == 2) fallback = &rad_chat_chatml_qwen3;
    const RadChatFormat *f = rad_chat_format_pick(meta, fallback);
    /* a Qwen3 without a template still opens its replies with <think>: ChatML found in its
     * tokenizer's tokens is Qwen3's; a template without <think> keeps plain ChatML */
    if (RAD_LLAMA_FAMILY == 2 && f == &rad_chat_chatml && !rad_meta_find(meta, "chat.template")) f = &rad_chat_chatml_qwen3;
    return f;
}

static const RadArchOps llama_ops = {
    .declare = llama_declare,
    .step = llama_step,
    .probe = llama_probe,
    .chat_format = llama_chat_format,
    .audio_format = NULL,
    .serves_imports = RAD_LLAMA_QUANTISED == 1, /* GGUF's quantisations; fp8 is its own (native) descriptor */
};

RAD_ARCH_PLUGIN(llama_ops, LLAMA_ID, LLAMA_QUANT, "1.0.0", LLAMA_DESC)
