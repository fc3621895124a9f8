/* gemma3.c — the Gemma 3 family (text decoder: Gemma 3 270M, 1B, 4B/12B/27B's language model),
 * one source built as two plugins:
 *
 *   RAD_GEMMA3_QUANTISED=0  "gemma3"       quant ""      f32/f16/bf16 weights as stored
 *   RAD_GEMMA3_QUANTISED=1  "gemma3_ggml"  quant "ggml"  GGUF block quantisations beside floats;
 *                                                        serves imported quantisations
 *
 * The graph (transformers' Gemma3TextModel):
 *
 *   x = embed_gather(tok_embd, ids) · √n_embd
 *   per layer l:   local when (l + 1) % pattern != 0 (pattern 6: five local, one global), or as
 *                  config.json's layer_types lists them
 *     h = rmsnorm(x, attn_norm)
 *     q, k, v = h·Wq^T, h·Wk^T, h·Wv^T;  q = head_rmsnorm(q, q_norm);  k = head_rmsnorm(k, k_norm)
 *     rope(q), rope(k)         theta: the local base (10000) on local layers, rope_theta on global
 *     o = attn_paged(q, k, v)  local: the window group (sliding_window tokens); global: the full one
 *     x += rmsnorm(o·Wo^T, post_attention_norm)
 *     h = rmsnorm(x, ffn_norm)
 *     x += rmsnorm(down(gelu_tanh(h·Wgate^T) · h·Wup^T), post_ffw_norm)
 *     x += cvec[l]             --control-vector: a steered layer (arch/common/rad_cvec.h)
 *   logits = logits_gemm(tok_embd, logits_gather(rmsnorm(x, output_norm), out_ids))   (tied)
 *
 * with each residual add settled by the following norm (fused add_rmsnorm where resolved), as in
 * arch/common/rad_block.h. Every norm multiplies by (1 + w), transformers' Gemma3RMSNorm: the
 * declared gammas hold (1 + w). llama.cpp's GGUF stores them so; a Hugging Face checkpoint
 * (Gemma3ForCausalLM, gemma3_text) stores w itself, and its name-map entries add the 1 at
 * convert (RadNameMap.add, in f32: the gamma is stored f32, docs/CONVERT.md).
 *
 * The embedding form (EmbeddingGemma: attention.bidirectional true and pooling.mode present, a
 * sentence-transformers folder): the same blocks with attn_seq in place of attn_paged, no KV and
 * no logits, and sentence-transformers' pipeline after the final norm:
 *
 *   o = attn_seq(q, k, v)    bidirectional within each sequence; local layers |i - j| < S/2 + 1
 *                            (S = attention.sliding_window: transformers' Gemma3TextConfig halves it
 *                            when use_bidirectional_attention), global layers the whole sequence
 *   e = pool(rmsnorm(x, output_norm))                  pooling.mode (mean for EmbeddingGemma)
 *   e = e·dense.k^T (+ dense.k.bias)   for k < pooling.n_dense (2_Dense, 3_Dense: identity activation)
 *   e = l2_normalize(e)                                when pooling.normalize
 *
 * Every step holds whole sequences from position 0 (rope reads the batch's positions). */
#include <arch/rad_arch.h>

#include <stdlib.h>

#include "../common/rad_attn_parts.h"
#include "../common/rad_block_mlp.h"
#include "../common/rad_block_vocab.h"
#include "../common/rad_chat_formats.h"
#include "../common/rad_cvec.h"

#ifndef RAD_GEMMA3_QUANTISED
#define RAD_GEMMA3_QUANTISED 0
#endif
#define GEMMA_PN RAD_PLUGIN_NAME_OF("gemma3") /* the plugin's name, in every message */
#if RAD_GEMMA3_QUANTISED
#define GEMMA_QUANT "ggml"
#define GEMMA_DESC "Gemma 3 family (text): GGUF block quantisations"
#else
#define GEMMA_QUANT ""
#define GEMMA_DESC "Gemma 3 family (text): f32/f16/bf16 weights"
#endif

static const uint64_t gemma_encs =
    (1ull << RAD_ENC_F32) | (1ull << RAD_ENC_F16) | (1ull << RAD_ENC_BF16)
#if RAD_GEMMA3_QUANTISED
    | (1ull << RAD_ENC_Q8_0) | (1ull << RAD_ENC_Q4_0) | (1ull << RAD_ENC_Q4_1) | (1ull << RAD_ENC_Q5_0) |
    (1ull << RAD_ENC_Q5_1) | (1ull << RAD_ENC_Q4_K) | (1ull << RAD_ENC_Q5_K) | (1ull << RAD_ENC_Q6_K)
#endif
    ;

#define GEMMA_MAX_LAYERS 256
#define GEMMA_NAME 160
#define GEMMA_LOCAL_THETA 10000.0f /* transformers' rope_local_base_freq; llama.cpp's GGUF has no key */
#define GEMMA_PATTERN 6            /* sliding_window_pattern: every 6th layer is global (GGUF has no key) */
#define GEMMA_MAX_DENSE 8          /* the embedding form's dense layers after the pooling */

/* The pool op's mode numbers (docs/OPS.md, `pool`), by pooling.mode's names. */
static const char *const gemma_pool_modes[] = {"mean", "cls", "last", "max", "mean_sqrt_len"};

/* What declare works from, read once (gemma_hparams). */
typedef struct GemmaHparams {
    RadBlockGeom gl;          /* local layers: the local rope base, attn_window = the window */
    RadBlockGeom gg;          /* global layers: rope_theta, full attention */
    uint32_t n_layers, n_vocab;
    RadVocab vocab;           /* this rank's rows of the (tied) embedding and head: vocabulary-parallel under TP */
    uint32_t window;          /* attention.sliding_window */
    uint32_t n_global;        /* layers with global[l] set */
    uint8_t global[GEMMA_MAX_LAYERS]; /* [n_layers] 1: full attention (attention.sliding_window_pattern) */
    uint32_t out_rows;        /* logits rows a step may ask: n_out's bound */
    RadDType kv_dtype;
    float embd_scale;         /* √n_embd, rounded once to f32 (transformers' normalizer) */
    const RadControlVector *cvec; /* RadBuildCtx::cvec (the core's; read at declare only), or NULL */
    char pfx[64];             /* "" or "<scope>." */
    /* the embedding form (embed = 1): pooled output, no KV, no logits */
    int embed;
    uint32_t seq_window;      /* attn_seq's window on local layers: window / 2 + 1 (transformers') */
    uint32_t pool_mode;       /* index into gemma_pool_modes */
    int normalize;            /* pooling.normalize */
    uint32_t max_seqs;        /* pooled rows: sequences a step may carry */
    uint32_t n_dense;         /* pooling.n_dense */
    uint32_t dense_in[GEMMA_MAX_DENSE], dense_out[GEMMA_MAX_DENSE]; /* pooling.dense.<k>.in / .out */
    uint8_t dense_bias[GEMMA_MAX_DENSE];                           /* pooling.dense.<k>.bias */
} GemmaHparams;

/* One layer: the attention block as Gemma composes it (q/k norms before the rope, a norm after
 * the output projection) and the GeGLU MLP with its post-norm. */
typedef struct GemmaLayer {
    int global;               /* full attention over the global group; else the window group */
    const RadBlockGeom *g;    /* hp.gl or hp.gg */
    rad_weight w_attn_norm, w_o, w_post_attn; /* [n_embd], [n_embd, n_head*hd], [n_embd] */
    RadPreNorm pre_attn;      /* h = rmsnorm(x), settling the previous MLP's output */
    RadQkv qkv;               /* q, k, v */
    RadQkNorm qkn;            /* head_rmsnorm on q (n_head heads), k (n_head_kv heads) */
    RadRope rope;
    rad_op attn;              /* attn_paged; attn_seq in the embedding form */
    rad_op o;                 /* y = o·Wo^T */
    RadAllReduce ar;          /* of y, under TP (before the post-norm, which is not linear) */
    rad_op post_attn;         /* rmsnorm(y -> y), left pending */
    RadMlpBlock mlp;          /* pre-norm, gate/up, gelu_tanh_mul, down (+ all_reduce), pending */
    rad_weight w_post_ffw;    /* [n_embd] */
    rad_op post_ffw;          /* rmsnorm(y -> y) */
    RadCvecLayer cvec;        /* the control vector's add after the layer (on: steered) */
} GemmaLayer;

typedef struct GemmaModel {
    int ready;                /* a declare completed: step may run */
    GemmaHparams hp;
    rad_weight w_tok;         /* [nv, n_embd] the embedding, also the (tied) head (this rank's rows) */
    rad_weight w_out_norm;    /* [n_embd] */
    RadResid r;               /* x, h, y [max_tok, n_embd] */
    RadAttnScratch as;        /* q, k, v, o */
    RadMlpScratch ms;         /* gate, up, act */
    rad_buf head_x;           /* [out_rows, n_embd] */
    rad_buf logits;           /* [out_rows, n_vocab] (every rank's, whole) */
    rad_kv kv_local;          /* WINDOW group: the local layers */
    rad_kv kv_global;         /* FULL group: the global layers */
    RadVocabEmbed embed;      /* embed_gather (TP: its part + all_reduce) -> r.x */
    rad_op op_scale;          /* r.x *= sqrt(n_embd) */
    GemmaLayer layers[GEMMA_MAX_LAYERS];
    RadPreNorm final_norm;
    rad_op op_gather;         /* logits_gather r.h -> head_x */
    RadVocabHead head;        /* logits_gemm head_x -> logits (TP: its columns + all_gather) */
    /* the embedding form */
    rad_buf pooled;           /* [max_seqs, n_embd] pool's output */
    rad_buf dense_y[GEMMA_MAX_DENSE];   /* [max_seqs, dense_out[k]]: the last is the declared output */
    rad_weight w_dense[GEMMA_MAX_DENSE], b_dense[GEMMA_MAX_DENSE]; /* [out, in], [out] (b: id < 0 without) */
    rad_op op_pool, op_dense[GEMMA_MAX_DENSE], op_dense_bias[GEMMA_MAX_DENSE], op_l2;
} GemmaModel;

/* "<pfx>blk.<l>.<suffix>" (l < 0: "<pfx><suffix>"); 0, or -1 when it does not fit. */
static int gname(char *dst, size_t cap, const char *pfx, int l, const char *suffix) {
    int k = l < 0 ? snprintf(dst, cap, "%s%s", pfx, suffix) : snprintf(dst, cap, "%sblk.%d.%s", pfx, l, suffix);
    return (k < 0 || (size_t)k >= cap) ? -1 : 0;
}

/* ---- 0. hyperparameters ------------------------------------------------------------------- */

static int gemma_check_meta(RadBuilder *b, const RadModelMeta *m, const RadBuildCtx *ctx) {
    if (m->struct_size < offsetof(RadModelMeta, rope_theta) + sizeof m->rope_theta)
        return rad_block_fail(b, GEMMA_PN ": RadModelMeta too old (struct_size %u)", (unsigned)m->struct_size);
#define GEMMA_POS(field)                                                                      \
    if (m->field <= 0) return rad_block_fail(b, GEMMA_PN ": model." #field " is %d (must be positive)", (int)m->field)
    GEMMA_POS(n_layers);
    GEMMA_POS(n_embd);
    GEMMA_POS(n_head);
    GEMMA_POS(n_head_kv);
    GEMMA_POS(head_dim);
    GEMMA_POS(n_ff);
    GEMMA_POS(n_vocab);
#undef GEMMA_POS
    if (m->n_layers > GEMMA_MAX_LAYERS)
        return rad_block_fail(b, GEMMA_PN ": model.n_layers %d exceeds the plugin's %d", (int)m->n_layers, GEMMA_MAX_LAYERS);
    if (m->n_head % m->n_head_kv != 0)
        return rad_block_fail(b, GEMMA_PN ": model.n_head_kv %d does not divide model.n_head %d", (int)m->n_head_kv,
                              (int)m->n_head);
    if (m->head_dim % 2 != 0) return rad_block_fail(b, GEMMA_PN ": model.head_dim %d is odd (rope rotates pairs)", (int)m->head_dim);
    if (m->n_expert > 0) return rad_block_fail(b, GEMMA_PN ": model.n_expert is %d: not a Gemma 3 text model", (int)m->n_expert);
    if (!(m->rms_eps > 0)) return rad_block_fail(b, GEMMA_PN ": model.rms_eps is %g (must be positive)", (double)m->rms_eps);
    if (!(m->rope_theta > 0)) return rad_block_fail(b, GEMMA_PN ": model.rope_theta is %g (must be positive)", (double)m->rope_theta);
    if (ctx->max_tok == 0) return rad_block_fail(b, GEMMA_PN ": RadBuildCtx.max_tok is 0");
    if (rad_tp_check(b, GEMMA_PN, m, ctx) != 0) return RAD_E_UNSUPPORTED;
    if (ctx->cvec && rad_cvec_check(b, GEMMA_PN, ctx->cvec, (uint32_t)m->n_layers, (uint32_t)m->n_embd) != 0)
        return RAD_E_UNSUPPORTED;
    /* the deployment switches the probe does not grant (the core refuses them first, by flag) */
    if (ctx->kv_quant != RAD_KVQ_NONE) return rad_block_fail(b, GEMMA_PN ": RadBuildCtx.kv_quant (narrow fp8 KV) is not served");
    if (ctx->tp_attn_rows) return rad_block_fail(b, GEMMA_PN ": RadBuildCtx.tp_attn_rows (row-split attention) is not served");
    return 0;
}

/* Newton's square root in double (a plugin links nothing); rounded once by the caller. */
static double gemma_sqrt(double n) {
    double r = n > 1 ? n / 2 : 1.0;
    for (int i = 0; i < 64; i++) r = 0.5 * (r + n / r);
    return r;
}

/* Which layers attend globally: attention.sliding_window_pattern, a period p (layer l global when
 * (l + 1) % p == 0; GGUF and transformers 4's sliding_window_pattern) or one flag per layer, true
 * where it slides (config.json's layer_types). Absent: every 6th. */
static int gemma_layer_kinds(RadBuilder *b, const RadModelMeta *meta, GemmaHparams *hp) {
    const char *key = "attention.sliding_window_pattern";
    const uint32_t nl = (uint32_t)meta->n_layers;
    uint32_t pattern, n = 0;
    uint32_t slide[GEMMA_MAX_LAYERS + 1]; /* one more than served: a longer list is refused */
    int rc = rad_meta_u32(meta, key, GEMMA_PATTERN, &pattern);
    if (rc >= 0) {
        if (pattern == 0) return rad_block_fail(b, GEMMA_PN ": %s is 0 (a period must be positive)", key);
        for (uint32_t l = 0; l < nl; l++) slide[l] = (l + 1) % pattern != 0;
    } else if (rad_meta_u32s(meta, key, slide, GEMMA_MAX_LAYERS + 1, &n) != 1 || n != nl) {
        return rad_block_fail(b, GEMMA_PN ": %s is neither a period nor one flag per layer (%u flags for %u layers)", key, n, nl);
    }
    hp->n_global = 0;
    for (uint32_t l = 0; l < nl; l++) {
        if (slide[l] > 1) return rad_block_fail(b, GEMMA_PN ": %s[%u] is %u, not a flag", key, l, slide[l]);
        hp->global[l] = slide[l] == 0;
        hp->n_global += hp->global[l];
    }
    return 0;
}

/* The embedding form: attention.bidirectional with pooling.mode (rad-convert writes both for an
 * EmbeddingGemma folder). Either alone is refused: a bidirectional model does not generate, and a
 * causal one pooled would need causal attention without a KV cache, which attn_seq is not. Sets
 * hp->embed and the pipeline after the pooling; 0 for a generation model. */
static int gemma_embed_hparams(RadBuilder *b, const RadModelMeta *meta, const RadBuildCtx *ctx, GemmaHparams *hp) {
    bool bidir = false, norm = false;
    const char *mode, *act;
    if (rad_meta_bool(meta, "attention.bidirectional", false, &bidir) < 0)
        return rad_block_fail(b, GEMMA_PN ": attention.bidirectional is not a boolean");
    const int pooled = rad_meta_str(meta, "pooling.mode", "", &mode) > 0;
    if (!bidir && !pooled) return 0;
    if (!pooled)
        return rad_block_fail(b, GEMMA_PN ": attention.bidirectional without pooling.mode: a bidirectional model does not "
                                 "generate (convert its sentence-transformers folder, modules.json, for the embedding form)");
    if (!bidir)
        return rad_block_fail(b, GEMMA_PN ": pooling.mode \"%s\" on a causal Gemma 3 (attention.bidirectional absent or false) "
                                 "is not served: the embedding form is bidirectional", mode);
    hp->embed = 1;
    hp->pool_mode = 99;
    for (uint32_t i = 0; i < sizeof gemma_pool_modes / sizeof gemma_pool_modes[0]; i++)
        if (!strcmp(mode, gemma_pool_modes[i])) hp->pool_mode = i;
    if (hp->pool_mode == 99)
        return rad_block_fail(b, GEMMA_PN ": pooling.mode \"%s\" is not served (mean, cls, last, max, mean_sqrt_len)", mode);
    if (rad_meta_bool(meta, "pooling.normalize", false, &norm) < 0)
        return rad_block_fail(b, GEMMA_PN ": pooling.normalize is not a boolean");
    hp->normalize = norm;
    if (rad_meta_str(meta, "model.hidden_act", "gelu_pytorch_tanh", &act) < 0 || strcmp(act, "gelu_pytorch_tanh"))
        return rad_block_fail(b, GEMMA_PN ": model.hidden_act \"%s\" is not served (gelu_pytorch_tanh: GeGLU)", act);
    /* the deployment switches an encoder has no use for, by name */
    if (ctx->world_size > 1)
        return rad_block_fail(b, GEMMA_PN ": tensor parallelism (%u ranks) is not served for the embedding form", ctx->world_size);
    if (ctx->cvec) return rad_block_fail(b, GEMMA_PN ": a control vector is not served for the embedding form");
    if (ctx->max_spec || ctx->is_draft)
        return rad_block_fail(b, GEMMA_PN ": speculative decoding is not served for the embedding form (it does not generate)");
    if (rad_meta_u32(meta, "pooling.n_dense", 0, &hp->n_dense) < 0 || hp->n_dense > GEMMA_MAX_DENSE)
        return rad_block_fail(b, GEMMA_PN ": pooling.n_dense is not a count of at most %d", GEMMA_MAX_DENSE);
    uint32_t width = (uint32_t)meta->n_embd;
    for (uint32_t k = 0; k < hp->n_dense; k++) {
        char key[64];
        bool bias = false;
        snprintf(key, sizeof key, "pooling.dense.%u.in", k);
        if (rad_meta_u32(meta, key, 0, &hp->dense_in[k]) <= 0 || !hp->dense_in[k])
            return rad_block_fail(b, GEMMA_PN ": %s missing or zero (pooling.n_dense is %u)", key, hp->n_dense);
        if (hp->dense_in[k] != width)
            return rad_block_fail(b, GEMMA_PN ": %s is %u, but %s gives %u (the dense layers do not chain)", key, hp->dense_in[k],
                                  k ? "the dense before it" : "the pooling (model.n_embd)", width);
        snprintf(key, sizeof key, "pooling.dense.%u.out", k);
        if (rad_meta_u32(meta, key, 0, &hp->dense_out[k]) <= 0 || !hp->dense_out[k])
            return rad_block_fail(b, GEMMA_PN ": %s missing or zero (pooling.n_dense is %u)", key, hp->n_dense);
        snprintf(key, sizeof key, "pooling.dense.%u.bias", k);
        if (rad_meta_bool(meta, key, false, &bias) < 0) return rad_block_fail(b, GEMMA_PN ": %s is not a boolean", key);
        hp->dense_bias[k] = bias;
        width = hp->dense_out[k];
    }
    hp->seq_window = hp->window / 2 + 1; /* Gemma3TextConfig: sliding_window // 2 + 1, then |i - j| < it */
    hp->max_seqs = ctx->max_seqs ? ctx->max_seqs : 1;
    return 0;
}

static int gemma_hparams(RadBuilder *b, const RadModelMeta *meta, const RadBuildCtx *ctx, GemmaHparams *hp) {
    int rc;
    if ((rc = gemma_check_meta(b, meta, ctx)) != 0) return rc;
    if (ctx->scope && *ctx->scope && gname(hp->pfx, sizeof hp->pfx, ctx->scope, -1, ".") != 0)
        return rad_block_fail(b, GEMMA_PN ": RadBuildCtx.scope too long");
    const uint32_t world = ctx->world_size ? ctx->world_size : 1;
    RadBlockGeom *g = &hp->gg;
    memset(g, 0, sizeof *g);
    RadTpShare sh;
    const char *dim;
    if (rad_tp_share((uint32_t)meta->n_head, (uint32_t)meta->n_head_kv, (uint32_t)meta->n_ff, ctx->rank, world, &sh, &dim))
        return rad_block_fail(b, GEMMA_PN ": %s does not split over %u ranks", dim, world); /* gemma_check_meta said why first */
    g->n_embd = (uint32_t)meta->n_embd;
    g->n_head = sh.nq, g->q_head0 = sh.q0;
    g->n_head_kv = sh.nkv, g->kv_head0 = sh.kv0, g->kv_replicated = sh.kv_shared;
    g->head_dim = (uint32_t)meta->head_dim;
    g->n_ff = sh.nff, g->ff0 = sh.ff0;
    g->rms_eps = meta->rms_eps;
    g->rope_theta = meta->rope_theta;
    g->n_rot = g->head_dim;
    g->rope_scaling = RAD_ROPE_SCALING_NONE;
    g->rope_factor = 1.0f;
    const char *type;
    rad_meta_str(meta, "rope.scaling.type", "", &type);
    if (*type && strcmp(type, "none") && strcmp(type, "default")) {
        float f;
        if (strcmp(type, "linear"))
            return rad_block_fail(b, GEMMA_PN ": rope.scaling.type \"%s\" is not served (none, linear)", type);
        if (rad_meta_f32(meta, "rope.scaling.factor", 0, &f) <= 0 || !(f > 0))
            return rad_block_fail(b, GEMMA_PN ": rope.scaling.factor missing or not positive for rope.scaling.type linear");
        g->rope_scaling = RAD_ROPE_SCALING_LINEAR; /* the global layers' (Gemma 3 4B+); local ones are unscaled */
        g->rope_factor = f;
    }
    /* query_pre_attn_scalar: head_dim on every size but 27B (where it is n_embd / n_head) */
    float qpas;
    if (rad_meta_f32(meta, "attention.query_pre_attn_scalar", (float)g->head_dim, &qpas) < 0 || !(qpas > 0))
        return rad_block_fail(b, GEMMA_PN ": attention.query_pre_attn_scalar is not a positive number");
    g->attn_scale = rad_block_rsqrt(qpas);
    g->prefill_fp8 = ctx->attn_prefill_fp8;
    g->max_tok = ctx->max_tok;
    g->world_size = world;
    g->tp_wire_lossy = ctx->tp_wire_lossy;
    g->tp_wire_min_bytes = ctx->tp_wire_min_bytes;
    g->linear_dtype = RAD_ANY; /* as stored; checked with rad_weight_encoding */
    g->norm_dtype = RAD_F32;
    g->mlp_act = "gelu_tanh_mul";
    g->attn_window = 0;
    if (rad_meta_u32(meta, "attention.sliding_window", 0, &hp->window) <= 0 || hp->window == 0)
        return rad_block_fail(b, GEMMA_PN ": attention.sliding_window missing or zero (Gemma 3's local layers need it)");
    if ((rc = gemma_layer_kinds(b, meta, hp)) != 0) return rc;
    float local_theta;
    if (rad_meta_f32(meta, "rope.local_freq_base", GEMMA_LOCAL_THETA, &local_theta) < 0 || !(local_theta > 0))
        return rad_block_fail(b, GEMMA_PN ": rope.local_freq_base is not a positive number");
    rad_meta_str(meta, "rope.local_scaling.type", "", &type);
    if (*type && strcmp(type, "default"))
        return rad_block_fail(b, GEMMA_PN ": rope.local_scaling.type \"%s\" is not served (the local layers' rope is unscaled)", type);
    hp->gl = *g;
    hp->gl.rope_theta = local_theta;
    hp->gl.rope_scaling = RAD_ROPE_SCALING_NONE;
    hp->gl.rope_factor = 1.0f;
    hp->gl.attn_window = hp->window;
    hp->n_layers = (uint32_t)meta->n_layers;
    hp->n_vocab = (uint32_t)meta->n_vocab;
    if (rad_vocab_init(&hp->vocab, hp->n_vocab, ctx->rank, g->world_size) != 0)
        return rad_block_fail(b, GEMMA_PN ": model.n_vocab %u does not split over %u ranks", hp->n_vocab, g->world_size);
    uint64_t rows = ctx->max_out_rows ? ctx->max_out_rows : (uint64_t)(ctx->max_seqs ? ctx->max_seqs : 1) * (1u + ctx->max_spec);
    if (rows > ctx->max_tok) rows = ctx->max_tok;
    hp->out_rows = (uint32_t)(rows ? rows : 1);
    hp->kv_dtype = ctx->kv_dtype;
    hp->embd_scale = (float)gemma_sqrt((double)g->n_embd);
    hp->cvec = ctx->cvec;
    return gemma_embed_hparams(b, meta, ctx, hp);
}

/* ---- 1. the name map: Hugging Face names, GGUF names (llama.cpp's gemma3) ------------------ */

/* Per-layer tensors: the declared (= GGUF) suffix, the Hugging Face one, and whether it is a norm
 * gamma (Hugging Face stores w for the (1 + w) GGUF stores). */
static const struct {
    const char *decl, *hf;
    int norm;
} gemma_layer_tensors[] = {
    {"attn_norm.weight", "input_layernorm.weight", 1},
    {"attn_q.weight", "self_attn.q_proj.weight", 0},
    {"attn_k.weight", "self_attn.k_proj.weight", 0},
    {"attn_v.weight", "self_attn.v_proj.weight", 0},
    {"attn_output.weight", "self_attn.o_proj.weight", 0},
    {"attn_q_norm.weight", "self_attn.q_norm.weight", 1},
    {"attn_k_norm.weight", "self_attn.k_norm.weight", 1},
    {"post_attention_norm.weight", "post_attention_layernorm.weight", 1},
    {"ffn_norm.weight", "pre_feedforward_layernorm.weight", 1},
    {"ffn_gate.weight", "mlp.gate_proj.weight", 0},
    {"ffn_up.weight", "mlp.up_proj.weight", 0},
    {"ffn_down.weight", "mlp.down_proj.weight", 0},
    {"post_ffw_norm.weight", "post_feedforward_layernorm.weight", 1},
};
enum { G_ATTN_NORM, G_Q, G_K, G_V, G_O, G_QN, G_KN, G_POST_ATTN, G_FFN_NORM, G_GATE, G_UP, G_DOWN, G_POST_FFW, G_COUNT };

/* A COPY entry; add 1 for a Hugging Face norm gamma (w -> 1 + w), else 0. */
static int map_copy1(RadBuilder *b, const char *dst, const char *src, float add) {
    const char *const s[] = {src, NULL};
    RadNameMap e;
    memset(&e, 0, sizeof e);
    e.kind = RAD_MAP_COPY;
    e.dst = dst;
    e.src = s;
    e.add = add;
    return rad_decl_name_map(b, &e);
}

/* Hugging Face entries first, GGUF beside them (the first whose source is present wins). q/k
 * rows are transformers' in both (NEOX rope: llama.cpp does not permute Gemma's), so every entry
 * is a copy, the HF norms' with the 1 added. No head entry: the head is the embedding (tied).
 * Hugging Face names come with the "model." prefix (Gemma3ForCausalLM) or without it
 * (Gemma3TextModel: EmbeddingGemma's embed_tokens, layers.N, norm). The embedding form's dense
 * layers are rad-convert's dense.<k>.weight / .bias (a Dense module's linear.*), copied. */
static int gemma_declare_map(RadBuilder *b, const GemmaHparams *hp) {
    char dst[GEMMA_NAME], src[GEMMA_NAME];
    int rc = 0;
    static const char *const decl[] = {"tok_embd.weight", "output_norm.weight"};
    static const char *const hf[] = {"model.embed_tokens.weight", "model.norm.weight"};
    static const char *const gg[] = {"token_embd.weight", "output_norm.weight"};
    for (int i = 0; i < 2; i++) {
        if (gname(dst, sizeof dst, hp->pfx, -1, decl[i]) != 0) return rad_block_fail(b, GEMMA_PN ": a declared name is too long");
        rc |= map_copy1(b, dst, hf[i], i == 1 ? 1.0f : 0.0f);
        rc |= map_copy1(b, dst, hf[i] + 6, i == 1 ? 1.0f : 0.0f); /* without "model." */
        rc |= map_copy1(b, dst, gg[i], 0.0f);
    }
    for (uint32_t l = 0; l < hp->n_layers; l++)
        for (int t = 0; t < G_COUNT; t++) {
            int k = snprintf(src, sizeof src, "model.layers.%u.%s", l, gemma_layer_tensors[t].hf);
            if (gname(dst, sizeof dst, hp->pfx, (int)l, gemma_layer_tensors[t].decl) != 0 || k < 0 || (size_t)k >= sizeof src)
                return rad_block_fail(b, GEMMA_PN ": a declared name is too long");
            const float add = gemma_layer_tensors[t].norm ? 1.0f : 0.0f;
            rc |= map_copy1(b, dst, src, add);
            rc |= map_copy1(b, dst, src + 6, add); /* without "model." */
            if (gname(src, sizeof src, "", (int)l, gemma_layer_tensors[t].decl) != 0)
                return rad_block_fail(b, GEMMA_PN ": a declared name is too long");
            rc |= map_copy1(b, dst, src, 0.0f);
        }
    for (uint32_t k = 0; k < hp->n_dense; k++)
        for (int bias = 0; bias <= hp->dense_bias[k]; bias++) {
            int n = snprintf(src, sizeof src, "dense.%u.%s", k, bias ? "bias" : "weight");
            if (n < 0 || (size_t)n >= sizeof src || gname(dst, sizeof dst, hp->pfx, -1, src) != 0)
                return rad_block_fail(b, GEMMA_PN ": a declared name is too long");
            rc |= map_copy1(b, dst, src, 0.0f);
        }
    if (rc) return rad_block_fail(b, GEMMA_PN ": a name-map entry was refused");
    return 0;
}

/* ---- 2. weights ---------------------------------------------------------------------------- */

static int gemma_check_enc(RadBuilder *b, rad_weight w, const char *name) {
    RadEnc e = rad_weight_encoding(b, w);
    if ((unsigned)e >= RAD_ENC_COUNT) return 0; /* not known yet (a plan): the core checks */
    if (gemma_encs & (1ull << e)) return 0;
    const RadEncInfo *info = rad_enc_info(e);
    return rad_block_fail(b, GEMMA_PN ": weight %s is stored as %s, which this plugin does not serve%s", name,
                          info ? info->name : "?", RAD_GEMMA3_QUANTISED ? "" : " (GGUF block quantisations: gemma3_ggml)");
}

static int gemma_weights_layer(RadBuilder *b, const GemmaHparams *hp, uint32_t l, GemmaLayer *L) {
    char nm[G_COUNT][GEMMA_NAME];
    const RadBlockGeom *g = L->g;
    for (int t = 0; t < G_COUNT; t++)
        if (gname(nm[t], sizeof nm[t], hp->pfx, (int)l, gemma_layer_tensors[t].decl) != 0)
            return rad_block_fail(b, GEMMA_PN ": a declared name is too long");
    const uint64_t qw = (uint64_t)g->n_head * g->head_dim;
    const RadGroup grp = rad_group_layer(l);
    memset(&L->qkv, 0, sizeof L->qkv);
    L->w_attn_norm = rad_block_norm_weight(b, g, nm[G_ATTN_NORM], grp, g->n_embd);
    int bad = rad_qkv_declare_weights(b, g, l, nm[G_Q], nm[G_K], nm[G_V], &L->qkv) != 0;
    memset(&L->qkn, 0, sizeof L->qkn);
    bad |= rad_qk_norm_declare_weights(b, g, l, nm[G_QN], nm[G_KN], &L->qkn) != 0;
    L->w_o = rad_block_linear(b, g, nm[G_O], l, g->n_embd, qw, RAD_SHARD_COL, (uint64_t)g->q_head0 * g->head_dim);
    L->w_post_attn = rad_block_norm_weight(b, g, nm[G_POST_ATTN], grp, g->n_embd);
    const RadMlpNames mn = {nm[G_FFN_NORM], nm[G_GATE], nm[G_UP], nm[G_DOWN]};
    bad |= rad_mlp_declare_weights(b, g, l, &mn, &L->mlp) != 0;
    L->w_post_ffw = rad_block_norm_weight(b, g, nm[G_POST_FFW], grp, g->n_embd);
    if (bad || L->w_attn_norm.id < 0 || L->w_o.id < 0 ||
        L->w_post_attn.id < 0 || L->w_post_ffw.id < 0)
        return rad_block_fail(b, GEMMA_PN ": layer %u: a weight was refused", l);
    const rad_weight lw[] = {L->qkv.w_q, L->qkv.w_k, L->qkv.w_v, L->w_o, L->mlp.w_gate, L->mlp.w_up, L->mlp.w_down};
    const int lt[] = {G_Q, G_K, G_V, G_O, G_GATE, G_UP, G_DOWN};
    for (int i = 0; i < 7; i++) {
        int rc = gemma_check_enc(b, lw[i], nm[lt[i]]);
        if (rc) return rc;
    }
    return 0;
}

static int gemma_declare_weights(RadBuilder *b, GemmaHparams *hp, GemmaModel *m) {
    char name[GEMMA_NAME];
    uint64_t span[2];
    RadWeightDecl d = rad_vocab_decl(&hp->vocab, hp->gg.n_embd, 0, span);
    if (gname(name, sizeof name, hp->pfx, -1, "tok_embd.weight") != 0) return rad_block_fail(b, GEMMA_PN ": name too long");
    m->w_tok = rad_decl_weight(b, name, &d);
    if (m->w_tok.id < 0) return rad_block_fail(b, GEMMA_PN ": weight %s was refused", name);
    int rc = gemma_check_enc(b, m->w_tok, name);
    if (rc) return rc;
    if (gname(name, sizeof name, hp->pfx, -1, "output_norm.weight") != 0) return rad_block_fail(b, GEMMA_PN ": name too long");
    m->w_out_norm = rad_block_norm_weight(b, &hp->gg, name, (RadGroup){RAD_GROUP_NONE, 0, 0}, hp->gg.n_embd);
    if (m->w_out_norm.id < 0) return rad_block_fail(b, GEMMA_PN ": weight %s was refused", name);
    for (uint32_t l = 0; l < hp->n_layers; l++) {
        GemmaLayer *L = &m->layers[l];
        L->global = hp->global[l];
        L->g = L->global ? &hp->gg : &hp->gl;
        if ((rc = gemma_weights_layer(b, hp, l, L)) != 0) return rc;
    }
    /* the embedding form's dense layers: [out, in] as stored, a bias f32 [out] */
    for (uint32_t k = 0; k < hp->n_dense; k++) {
        char sfx[48];
        snprintf(sfx, sizeof sfx, "dense.%u.weight", k);
        if (gname(name, sizeof name, hp->pfx, -1, sfx) != 0) return rad_block_fail(b, GEMMA_PN ": name too long");
        d.dtype = RAD_ANY;
        d.rank = 2;
        d.shape[0] = hp->dense_out[k];
        d.shape[1] = hp->dense_in[k];
        d.access = RAD_ACCESS_PER_REQUEST;
        m->w_dense[k] = rad_decl_weight(b, name, &d);
        if (m->w_dense[k].id < 0) return rad_block_fail(b, GEMMA_PN ": weight %s was refused", name);
        if ((rc = gemma_check_enc(b, m->w_dense[k], name)) != 0) return rc;
        m->b_dense[k].id = -1;
        if (!hp->dense_bias[k]) continue;
        snprintf(sfx, sizeof sfx, "dense.%u.bias", k);
        if (gname(name, sizeof name, hp->pfx, -1, sfx) != 0) return rad_block_fail(b, GEMMA_PN ": name too long");
        d.dtype = RAD_F32; /* a bf16/f16 bias widens exactly */
        d.rank = 1;
        d.shape[0] = hp->dense_out[k];
        d.shape[1] = 0;
        m->b_dense[k] = rad_decl_weight(b, name, &d);
        if (m->b_dense[k].id < 0) return rad_block_fail(b, GEMMA_PN ": weight %s was refused", name);
    }
    return 0;
}

/* ---- 3. buffers, 4. the two KV groups ------------------------------------------------------ */

static int gemma_declare_buffers(RadBuilder *b, const GemmaHparams *hp, GemmaModel *m) {
    const RadBlockGeom *g = &hp->gg;
    if (rad_resid_declare(b, g, hp->pfx, &m->r) != 0 || rad_attn_scratch_declare(b, g, hp->pfx, &m->as) != 0 ||
        rad_mlp_scratch_declare(b, g, hp->pfx, &m->ms) != 0)
        return rad_block_fail(b, GEMMA_PN ": a buffer was refused");
    if (hp->embed) { /* pool's rows, then each dense layer's */
        m->pooled = rad_block_buf(b, hp->pfx, "pooled", hp->max_seqs, g->n_embd);
        if (m->pooled.id < 0) return rad_block_fail(b, GEMMA_PN ": the pooled buffer was refused");
        for (uint32_t k = 0; k < hp->n_dense; k++) {
            char nm[32];
            snprintf(nm, sizeof nm, "dense.%u.y", k);
            m->dense_y[k] = rad_block_buf(b, hp->pfx, nm, hp->max_seqs, hp->dense_out[k]);
            if (m->dense_y[k].id < 0) return rad_block_fail(b, GEMMA_PN ": the buffer %s was refused", nm);
        }
        return 0;
    }
    m->head_x = rad_block_buf(b, hp->pfx, "head.x", hp->out_rows, g->n_embd);
    m->logits = rad_block_buf(b, hp->pfx, "logits", hp->out_rows, hp->n_vocab);
    if (m->head_x.id < 0 || m->logits.id < 0) return rad_block_fail(b, GEMMA_PN ": a head buffer was refused");
    return 0;
}

/* Local layers share one WINDOW group (the block manager keeps a sequence's last `window`
 * tokens), global layers one FULL group. */
static int gemma_declare_kv(RadBuilder *b, const GemmaHparams *hp, GemmaModel *m) {
    char name[GEMMA_NAME];
    if (gname(name, sizeof name, hp->pfx, -1, "kv.local") != 0) return rad_block_fail(b, GEMMA_PN ": name too long");
    m->kv_local = rad_attn_kv_declare(b, &hp->gl, name, RAD_KV_WINDOW, hp->kv_dtype, hp->window);
    if (gname(name, sizeof name, hp->pfx, -1, "kv.global") != 0) return rad_block_fail(b, GEMMA_PN ": name too long");
    int any_global = 0;
    for (uint32_t l = 0; l < hp->n_layers; l++) any_global |= m->layers[l].global;
    m->kv_global = any_global ? rad_attn_kv_declare(b, &hp->gg, name, RAD_KV_FULL, hp->kv_dtype, 0) : (rad_kv){-1};
    if (m->kv_local.id < 0 || (any_global && m->kv_global.id < 0)) return rad_block_fail(b, GEMMA_PN ": a KV group was refused");
    for (uint32_t l = 0; l < hp->n_layers; l++)
        if (rad_bind_layer_kv(b, l, m->layers[l].global ? m->kv_global : m->kv_local) != 0)
            return rad_block_fail(b, GEMMA_PN ": layer %u: KV binding refused", l);
    return 0;
}

/* ---- 5. ops ---------------------------------------------------------------------------------- */

/* rmsnorm(y -> y) with gamma: a block's post-norm, before the residual add. */
static rad_op gemma_post_norm(RadBuilder *b, const RadBlockGeom *g, rad_weight gamma, rad_buf y) {
    rad_op op = RAD_OP(b, "rmsnorm",
                       RAD_PARAMS(RAD_RANGE("M", 1, g->max_tok), RAD_INT("N", g->n_embd), RAD_FLOAT("eps", g->rms_eps)),
                       RAD_WEIGHTS(gamma));
    if (op.id >= 0) {
        rad_op_reads(b, op, RAD_BUFS(y), 1);
        rad_op_writes(b, op, RAD_BUFS(y), 1);
    }
    return op;
}

/* o = attn_seq(q, k, v): the embedding form's attention, within each sequence; window 0 (a global
 * layer) sees the whole sequence, else keys with |i - j| < window. */
static rad_op gemma_attn_seq_declare(RadBuilder *b, const RadBlockGeom *g, uint32_t window, const RadAttnScratch *s) {
    rad_op op = RAD_OP(b, "attn_seq",
                       RAD_PARAMS(RAD_RANGE("M", 1, g->max_tok), RAD_INT("n_head", g->n_head), RAD_INT("n_head_kv", g->n_head_kv),
                                  RAD_INT("head_dim", g->head_dim), RAD_FLOAT("scale", g->attn_scale), RAD_INT("window", window)),
                       RAD_NO_WEIGHTS);
    if (op.id >= 0) {
        rad_op_reads(b, op, RAD_BUFS(s->q, s->k, s->v), 3);
        rad_op_writes(b, op, RAD_BUFS(s->o), 1);
    }
    return op;
}

static int gemma_declare_layer(RadBuilder *b, GemmaModel *m, uint32_t l) {
    GemmaLayer *L = &m->layers[l];
    const RadBlockGeom *g = L->g;
    const RadAttnScratch *s = &m->as;
    const uint32_t qw = g->n_head * g->head_dim;
    if (rad_prenorm_declare(b, g, &m->r, L->w_attn_norm, &L->pre_attn) != 0) return -1;
    if (rad_qkv_declare_ops(b, g, m->r.h, s, &L->qkv) != 0) return -1;
    if (rad_qk_norm_declare(b, g, s->q, s->k, &L->qkn) != 0 || rad_rope_declare(b, g, s->q, s->k, &L->rope) != 0) return -1;
    L->attn = m->hp.embed ? gemma_attn_seq_declare(b, g, L->global ? 0 : m->hp.seq_window, s)
                          : rad_attn_paged_declare(b, g, L->global ? m->kv_global : m->kv_local, l, s);
    L->o = rad_block_gemm(b, g, L->w_o, g->n_embd, qw, s->o, m->r.y);
    if (L->attn.id < 0 || L->o.id < 0 || rad_allreduce_declare(b, g, &L->ar, m->r.y, g->n_embd) != 0) return -1;
    L->post_attn = gemma_post_norm(b, g, L->w_post_attn, m->r.y);
    if (L->post_attn.id < 0) return -1;
    m->r.pending = 1;
    if (rad_mlp_declare_ops(b, g, &m->r, &m->ms, &L->mlp) != 0) return -1;
    L->post_ffw = gemma_post_norm(b, g, L->w_post_ffw, m->r.y);
    if (L->post_ffw.id < 0) return -1; /* r.pending stays set: the next pre-norm adds y, */
    return rad_cvec_declare(b, g, m->hp.cvec, l, &m->r, &L->cvec); /* unless a steered layer settles it here */
}

/* The embedding form's pipeline after the final norm: pool (over the step's tokens, one row a
 * sequence), the dense layers over those rows, l2_normalize; the last buffer is the output. */
static int gemma_declare_pooled(RadBuilder *b, const GemmaHparams *hp, GemmaModel *m) {
    const RadBlockGeom *g = &hp->gg;
    m->op_pool = RAD_OP(b, "pool", RAD_PARAMS(RAD_RANGE("M", 1, g->max_tok), RAD_INT("N", g->n_embd), RAD_INT("mode", hp->pool_mode)),
                        RAD_NO_WEIGHTS);
    if (m->op_pool.id < 0) return rad_block_fail(b, GEMMA_PN ": the pooling was refused");
    rad_op_reads(b, m->op_pool, RAD_BUFS(m->r.h), 1);
    rad_op_writes(b, m->op_pool, RAD_BUFS(m->pooled), 1);
    rad_buf x = m->pooled;
    uint32_t width = g->n_embd;
    for (uint32_t k = 0; k < hp->n_dense; k++) {
        m->op_dense[k] = RAD_OP(
            b, "gemm_nt",
            RAD_PARAMS(RAD_RANGE("M", 1, hp->max_seqs), RAD_INT("N", hp->dense_out[k]), RAD_INT("K", hp->dense_in[k])),
            RAD_WEIGHTS(m->w_dense[k]));
        if (m->op_dense[k].id < 0) return rad_block_fail(b, GEMMA_PN ": dense layer %u was refused", k);
        rad_op_reads(b, m->op_dense[k], RAD_BUFS(x), 1);
        rad_op_writes(b, m->op_dense[k], RAD_BUFS(m->dense_y[k]), 1);
        m->op_dense_bias[k].id = -1;
        if (m->b_dense[k].id >= 0) {
            m->op_dense_bias[k] = RAD_OP(b, "add_bias", RAD_PARAMS(RAD_RANGE("M", 1, hp->max_seqs), RAD_INT("N", hp->dense_out[k])),
                                         RAD_WEIGHTS(m->b_dense[k]));
            if (m->op_dense_bias[k].id < 0) return rad_block_fail(b, GEMMA_PN ": dense layer %u's bias was refused", k);
            rad_op_reads(b, m->op_dense_bias[k], RAD_BUFS(m->dense_y[k]), 1);
            rad_op_writes(b, m->op_dense_bias[k], RAD_BUFS(m->dense_y[k]), 1);
        }
        x = m->dense_y[k];
        width = hp->dense_out[k];
    }
    m->op_l2.id = -1;
    if (hp->normalize) {
        m->op_l2 = RAD_OP(b, "l2_normalize", RAD_PARAMS(RAD_RANGE("M", 1, hp->max_seqs), RAD_INT("N", width)), RAD_NO_WEIGHTS);
        if (m->op_l2.id < 0) return rad_block_fail(b, GEMMA_PN ": the normalisation was refused");
        rad_op_reads(b, m->op_l2, RAD_BUFS(x), 1);
        rad_op_writes(b, m->op_l2, RAD_BUFS(x), 1);
    }
    if (rad_declare_pooled(b, x) != 0) return rad_block_fail(b, GEMMA_PN ": the pooled output was refused");
    return 0;
}

static int gemma_declare_ops(RadBuilder *b, GemmaHparams *hp, GemmaModel *m) {
    const RadBlockGeom *g = &hp->gg;
    if (rad_vocab_embed_declare(b, g, &hp->vocab, m->w_tok, m->r.x, &m->embed) != 0)
        return rad_block_fail(b, GEMMA_PN ": the embedding was refused");
    m->op_scale = RAD_OP(b, "scale",
                         RAD_PARAMS(RAD_RANGE("M", 1, g->max_tok), RAD_INT("N", g->n_embd), RAD_FLOAT("factor", hp->embd_scale)),
                         RAD_NO_WEIGHTS);
    if (m->op_scale.id < 0) return rad_block_fail(b, GEMMA_PN ": the embedding's scale was refused");
    rad_op_reads(b, m->op_scale, RAD_BUFS(m->r.x), 1);
    rad_op_writes(b, m->op_scale, RAD_BUFS(m->r.x), 1);
    for (uint32_t l = 0; l < hp->n_layers; l++)
        if (gemma_declare_layer(b, m, l) != 0) return rad_block_fail(b, GEMMA_PN ": layer %u: an op was refused", l);
    if (rad_prenorm_declare(b, g, &m->r, m->w_out_norm, &m->final_norm) != 0)
        return rad_block_fail(b, GEMMA_PN ": the final norm was refused");
    if (hp->embed) return gemma_declare_pooled(b, hp, m);
    m->op_gather = RAD_OP(b, "logits_gather", RAD_PARAMS(RAD_RANGE("M", 1, hp->out_rows), RAD_INT("N", g->n_embd)),
                          RAD_NO_WEIGHTS);
    if (m->op_gather.id < 0 ||
        rad_vocab_head_declare(b, g, &hp->vocab, hp->pfx, hp->out_rows, m->w_tok, m->head_x, m->logits, &m->head) != 0)
        return rad_block_fail(b, GEMMA_PN ": the head was refused");
    rad_op_reads(b, m->op_gather, RAD_BUFS(m->r.h), 1);
    rad_op_writes(b, m->op_gather, RAD_BUFS(m->head_x), 1);
    if (rad_declare_logits(b, m->logits) != 0) return rad_block_fail(b, GEMMA_PN ": the logits buffer was refused");
    return 0;
}

static void gemma_notes(RadBuilder *b, const GemmaHparams *hp) {
    const RadBlockGeom *g = &hp->gg;
    const uint32_t n_global = hp->n_global;
    rad_note(b, "%s: %u layers (%u local with a %u-token window, %u global), n_embd %u, GQA %u:%u, head_dim %u, n_ff %u, "
                "vocab %u, tied lm_head", GEMMA_PN, hp->n_layers, hp->n_layers - n_global, hp->window, n_global, g->n_embd,
             g->n_head * g->world_size, g->n_head_kv * g->world_size, g->head_dim, g->n_ff * g->world_size, hp->n_vocab);
    rad_note(b, "rope: local theta %g, global theta %g%s; attention scale %g; embedding scale %g", (double)hp->gl.rope_theta,
             (double)g->rope_theta, g->rope_scaling == RAD_ROPE_SCALING_LINEAR ? " (linear scaling on global layers)" : "",
             (double)g->attn_scale, (double)hp->embd_scale);
    rad_note(b, "KV: kv.local WINDOW %u (the local layers), kv.global FULL (the %u global layers); %u kv heads x %u",
             hp->window, n_global, g->n_head_kv, g->head_dim);
    rad_note(b, "blocks: q/k head_rmsnorm before the rope, post-norms on the attention and MLP outputs, GeGLU (gelu_tanh_mul); "
                "norm gammas 1 + w (GGUF stores them so; Hugging Face's w gets its 1 at convert)");
    if (g->world_size > 1)
        rad_note(b, "tensor parallel: %u ranks; this one %u heads / %u kv heads / n_ff %u and vocabulary rows [%u, %u) of "
                    "the tied table (embed_gather_part + all_reduce; the head's columns all_gathered into the logits)",
                 g->world_size, g->n_head, g->n_head_kv, g->n_ff, hp->vocab.v0, hp->vocab.v0 + hp->vocab.nv);
}

static void gemma_notes_embed(RadBuilder *b, const GemmaHparams *hp) {
    const RadBlockGeom *g = &hp->gg;
    rad_note(b, "%s: the embedding form (attention.bidirectional, pooling.mode): %u layers (%u local, attn_seq window %u = "
                "sliding_window %u / 2 + 1, as transformers' bidirectional Gemma 3; %u global, the whole sequence), n_embd %u, "
                "GQA %u:%u, head_dim %u, n_ff %u, vocab %u; no KV, no logits", GEMMA_PN, hp->n_layers, hp->n_layers - hp->n_global,
             hp->seq_window, hp->window, hp->n_global, g->n_embd, g->n_head, g->n_head_kv, g->head_dim, g->n_ff, hp->n_vocab);
    rad_note(b, "rope: local theta %g, global theta %g; attention scale %g; embedding scale %g", (double)hp->gl.rope_theta,
             (double)g->rope_theta, (double)g->attn_scale, (double)hp->embd_scale);
    char chain[256];
    size_t k = 0;
    uint32_t w = g->n_embd;
    chain[0] = 0;
    for (uint32_t i = 0; i < hp->n_dense && k < sizeof chain; i++, w = hp->dense_out[i - 1])
        k += (size_t)snprintf(chain + k, sizeof chain - k, ", dense %u -> %u%s", w, hp->dense_out[i],
                              hp->dense_bias[i] ? " + bias" : "");
    rad_note(b, "pooled output: %s pooling%s%s, %u rows of %u", gemma_pool_modes[hp->pool_mode], chain,
             hp->normalize ? ", l2_normalize" : "", hp->max_seqs, hp->n_dense ? hp->dense_out[hp->n_dense - 1] : g->n_embd);
}

static void gemma_note_cvec(RadBuilder *b, const GemmaModel *m) {
    uint32_t steered = 0;
    for (uint32_t l = 0; l < m->hp.n_layers; l++) steered += m->layers[l].cvec.on;
    if (m->hp.cvec)
        rad_note(b, "control vector: %u of %u layers steered (x += %s<l> after the layer's residual add; the next norm "
                    "unfused)", steered, m->hp.n_layers, RAD_CVEC_WEIGHT_PREFIX);
}

static int gemma_declare(RadBuilder *b, const RadModelMeta *meta, const RadBuildCtx *ctx_in) {
    RadBuildCtx ctx;
    memset(&ctx, 0, sizeof ctx);
    memcpy(&ctx, ctx_in, ctx_in->struct_size < sizeof ctx ? ctx_in->struct_size : sizeof ctx);
    GemmaModel *m = rad_builder_alloc(b, sizeof *m);
    if (!m) return 1;
    rad_builder_set_model(b, m);
    GemmaHparams *hp = &m->hp;
    int rc;
    if ((rc = gemma_hparams(b, meta, &ctx, hp)) != 0) return rc;
    if ((rc = gemma_declare_map(b, hp)) != 0) return rc;
    if ((rc = gemma_declare_weights(b, hp, m)) != 0) return rc;
    if ((rc = gemma_declare_buffers(b, hp, m)) != 0) return rc;
    if (!hp->embed && (rc = gemma_declare_kv(b, hp, m)) != 0) return rc; /* the embedding form has no KV */
    if ((rc = gemma_declare_ops(b, hp, m)) != 0) return rc;
    if (hp->embed) gemma_notes_embed(b, hp);
    else gemma_notes(b, hp);
    gemma_note_cvec(b, m);
    m->ready = 1;
    return 0;
}

/* ---- step ---------------------------------------------------------------------------------- */

static int gemma_layer_step(RadCtx *c, const GemmaModel *m, const GemmaLayer *L, const RadBatch *bt) {
    const uint64_t n = bt->n_tok;
    const RadAttnScratch *s = &m->as;
    int rc;
    if ((rc = rad_prenorm_step(c, &L->pre_attn, n)) != 0) return rc;
    if ((rc = rad_qkv_step(c, &L->qkv, n)) != 0) return rc;
    if ((rc = rad_qk_norm_step(c, &L->qkn, n)) != 0) return rc;
    if ((rc = rad_rope_step(c, &L->rope, bt->positions, n)) != 0) return rc;
    if ((rc = rad_attn_paged_step(c, L->attn, s, n)) != 0) return rc; /* attn_seq's operands are the same */
    if ((rc = RAD_ISSUE_N(c, L->o, n, RAD_W(L->w_o), brows(s->o, n), brows(m->r.y, n))) != 0) return rc;
    if ((rc = rad_allreduce_step(c, &L->ar, m->r.y, n)) != 0) return rc;
    if ((rc = RAD_ISSUE_N(c, L->post_attn, n, RAD_W(L->w_post_attn), brows(m->r.y, n), brows(m->r.y, n))) != 0) return rc;
    if ((rc = rad_mlp_step(c, &L->mlp, bt)) != 0) return rc;
    if ((rc = RAD_ISSUE_N(c, L->post_ffw, n, RAD_W(L->w_post_ffw), brows(m->r.y, n), brows(m->r.y, n))) != 0) return rc;
    return rad_cvec_step(c, &L->cvec, &m->r, n);
}

/* The embedding form's step: whole sequences from position 0, one pooled row each. */
static void gemma_step_embed(RadCtx *c, const GemmaModel *m, const RadBatch *bt) {
    const uint64_t n = bt->n_tok, S = bt->n_seq;
    if (n > m->hp.gg.max_tok || S > m->hp.max_seqs || (n && !S)) {
        rad_step_fail(c, GEMMA_PN ": the step exceeds the declared bounds (n_tok, n_seq)");
        return;
    }
    if (n == 0) return;
    for (uint64_t i = 0; i < S; i++)
        if (!bt->cu_seqlens || bt->cu_seqlens[i] >= (int32_t)n || bt->positions[bt->cu_seqlens[i]] != 0) {
            rad_step_fail(c, GEMMA_PN ": every sequence of an embedding step must be whole, from position 0");
            return;
        }
    if (rad_vocab_embed_step(c, &m->embed, m->w_tok, bt->token_ids, m->r.x, n) != 0) return;
    if (RAD_ISSUE_N(c, m->op_scale, n, brows(m->r.x, n)) != 0) return;
    for (uint32_t l = 0; l < m->hp.n_layers; l++)
        if (gemma_layer_step(c, m, &m->layers[l], bt) != 0) return;
    if (rad_prenorm_step(c, &m->final_norm, n) != 0) return;
    if (RAD_ISSUE_N(c, m->op_pool, n, brows(m->r.h, n), brows(m->pooled, S)) != 0) return;
    rad_buf x = m->pooled;
    for (uint32_t k = 0; k < m->hp.n_dense; k++) {
        if (RAD_ISSUE_N(c, m->op_dense[k], S, RAD_W(m->w_dense[k]), brows(x, S), brows(m->dense_y[k], S)) != 0) return;
        if (m->op_dense_bias[k].id >= 0 &&
            RAD_ISSUE_N(c, m->op_dense_bias[k], S, RAD_W(m->b_dense[k]), brows(m->dense_y[k], S)) != 0)
            return;
        x = m->dense_y[k];
    }
    if (m->op_l2.id >= 0) (void)RAD_ISSUE_N(c, m->op_l2, S, brows(x, S));
}

static void gemma_step(RadCtx *c, const RadBatch *bt) {
    const GemmaModel *m = rad_ctx_model(c);
    const uint64_t n = bt->n_tok;
    if (!m || !m->ready) {
        rad_step_fail(c, GEMMA_PN ": step before a successful declare");
        return;
    }
    if (bt->struct_size >= offsetof(RadBatch, draft_pass) + sizeof bt->draft_pass && bt->draft_pass != 0) {
        rad_step_fail(c, GEMMA_PN ": a draft pass, but no drafter is declared");
        return;
    }
    if (m->hp.embed) {
        gemma_step_embed(c, m, bt);
        return;
    }
    if (n > m->hp.gg.max_tok || bt->n_out > m->hp.out_rows || bt->n_out > n) {
        rad_step_fail(c, GEMMA_PN ": the step exceeds the declared bounds (n_tok, n_out)");
        return;
    }
    if (n == 0) return; /* zero rows is not a call */
    if (rad_vocab_embed_step(c, &m->embed, m->w_tok, bt->token_ids, m->r.x, n) != 0) return;
    if (RAD_ISSUE_N(c, m->op_scale, n, brows(m->r.x, n)) != 0) return;
    for (uint32_t l = 0; l < m->hp.n_layers; l++)
        if (gemma_layer_step(c, m, &m->layers[l], bt) != 0) return;
    if (bt->n_out == 0) return; /* a chunk that finishes no sequence: no head */
    if (rad_prenorm_step(c, &m->final_norm, n) != 0) return;
    const uint64_t k = bt->n_out;
    if (RAD_ISSUE_N(c, m->op_gather, k, brows(m->r.h, n), praw(bt->out_ids, RAD_I32, k), brows(m->head_x, k)) != 0) return;
    (void)rad_vocab_head_step(c, &m->head, m->w_tok, m->head_x, m->logits, k);
}

/* ---- probe, chat format -------------------------------------------------------------------- */

static int gemma_probe(const RadModelMeta *meta, RadArchProbe *out) {
    uint32_t s = out->struct_size;
    bool bidir = false;
    const char *mode;
    /* the embedding form steers nothing: --control-vector is refused at startup, by flag */
    const int embed = rad_meta_bool(meta, "attention.bidirectional", false, &bidir) > 0 && bidir &&
                      rad_meta_str(meta, "pooling.mode", "", &mode) > 0;
    memset(out, 0, s < sizeof *out ? s : sizeof *out);
    out->struct_size = s;
    if (s >= offsetof(RadArchProbe, shape_probe_ok) + sizeof out->shape_probe_ok) out->shape_probe_ok = 1;
    if (s >= offsetof(RadArchProbe, control_vector_ok) + sizeof out->control_vector_ok) out->control_vector_ok = !embed;
    return 0;
}

/* Gemma's turns only when the checkpoint's template shows them: the base models (270M) have no
 * chat template, and chat on them is refused by the core (no format), completions served. */
static const RadChatFormat *gemma_chat_format(const RadModelMeta *meta) {
    const char *t = rad_meta_find(meta, "chat.template"), *kind = rad_meta_find(meta, "chat.kind");
    if ((kind && !strcmp(kind, "gemma")) || (t && strstr(t, "<start_of_turn>"))) return &rad_chat_gemma;
    return NULL;
}

static const RadArchOps gemma_ops = {
    .declare = gemma_declare,
    .step = gemma_step,
    .probe = gemma_probe,
    .chat_format = gemma_chat_format,
    .audio_format = NULL,
    .serves_imports = RAD_GEMMA3_QUANTISED,
};

RAD_ARCH_PLUGIN(gemma_ops, "gemma3", GEMMA_QUANT, "1.0.0", GEMMA_DESC)
