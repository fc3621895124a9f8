/* rad_attn_parts.h — the pieces any attention block is built from, header-only, family-neutral:
 *
 *     q, k, v = h·Wq^T, h·Wk^T, h·Wv^T        RadQkv      (one gemm_nt3 when resolved)
 *     (+ bq, bk, bv)                           add_bias    (Qwen2: when the names are given)
 *     q = qnorm(q), k = knorm(k) per head       RadQkNorm   (Qwen3, Gemma 3: head_rmsnorm)
 *     rope(q), rope(k)                         RadRope     (positions as a raw operand)
 *     o = attn_paged(q, k, v) over a KV group  rad_attn_paged_*
 *     the KV group and its layers              rad_attn_kv_*
 *
 * rad_block_attn.h assembles them into the pre-norm GQA block (Llama); a family whose block
 * differs (a norm on q and k, biases, a sliding window on some layers) assembles its own from
 * the same parts. Ops, parameter names and operand order are the op vocabulary's (docs/OPS.md).
 *
 * Positions: rope takes the step's positions as a raw operand, praw(batch->positions, I32, n),
 * as the op vocabulary lists it (no derived buffer). A model whose rope has per-pair frequency
 * divisors (GGUF's rope_freqs.weight, Llama 3.1) sets RadBlockGeom::rope_has_freqs/rope_freqs;
 * both rope ops then take that weight. */
#ifndef RAD_ATTN_PARTS_H
#define RAD_ATTN_PARTS_H

#include "rad_block.h"

/* ---- scratch ------------------------------------------------------------------------------- */

/* Per-model scratch shared by every layer's attention. */
typedef struct RadAttnScratch {
    rad_buf q;                /* [max_tok, n_head*head_dim] */
    rad_buf k, v;             /* [max_tok, n_head_kv*head_dim] */
    rad_buf o;                /* [max_tok, n_head*head_dim] the attention output */
} RadAttnScratch;

static inline int rad_attn_scratch_declare(RadBuilder *b, const RadBlockGeom *g, const char *prefix,
                                           RadAttnScratch *s) {
    uint64_t qw = (uint64_t)g->n_head * g->head_dim, kw = (uint64_t)g->n_head_kv * g->head_dim;
    s->q = rad_block_buf(b, prefix, "attn.q", g->max_tok, qw);
    s->k = rad_block_buf(b, prefix, "attn.k", g->max_tok, kw);
    s->v = rad_block_buf(b, prefix, "attn.v", g->max_tok, kw);
    s->o = rad_block_buf(b, prefix, "attn.out", g->max_tok, qw);
    return (s->q.id < 0 || s->k.id < 0 || s->v.id < 0 || s->o.id < 0) ? -1 : 0;
}

/* ---- q, k, v projections ------------------------------------------------------------------- */

typedef struct RadQkv {
    rad_weight w_q;           /* [n_head*head_dim, n_embd] (SHARD_ROW under TP: whole heads per rank) */
    rad_weight w_k, w_v;      /* [n_head_kv*head_dim, n_embd] (SHARD_ROW under TP) */
    rad_op fused;             /* gemm_nt3 when resolved (id < 0: q, k, v are issued) */
    rad_op q, k, v;           /* gemm_nt each; all three are `fused` when it resolved */
    rad_buf h;                /* [max_tok, n_embd] the input */
    rad_buf yq, yk, yv;       /* the outputs: the scratch's q, k, v */
    int has_bias;             /* q, k, v each add a bias after the GEMM (rad_qkv_declare_bias) */
    rad_weight b_q;           /* [n_head*head_dim] f32 (SHARD_ROW with w_q under TP) */
    rad_weight b_k, b_v;      /* [n_head_kv*head_dim] f32 */
    rad_op add_q, add_k, add_v; /* add_bias on yq, yk, yv */
} RadQkv;

/* Returns -1 when the core refused one (it has named it). */
static inline int rad_qkv_declare_weights(RadBuilder *b, const RadBlockGeom *g, uint32_t layer, const char *q,
                                          const char *k, const char *v, RadQkv *p) {
    uint64_t qw = (uint64_t)g->n_head * g->head_dim, kw = (uint64_t)g->n_head_kv * g->head_dim;
    const uint64_t q0 = (uint64_t)g->q_head0 * g->head_dim, k0 = (uint64_t)g->kv_head0 * g->head_dim;
    p->w_q = rad_block_linear(b, g, q, layer, qw, g->n_embd, RAD_SHARD_ROW, q0);
    p->w_k = rad_block_linear(b, g, k, layer, kw, g->n_embd, RAD_SHARD_ROW, k0);
    p->w_v = rad_block_linear(b, g, v, layer, kw, g->n_embd, RAD_SHARD_ROW, k0);
    return (p->w_q.id < 0 || p->w_k.id < 0 || p->w_v.id < 0) ? -1 : 0;
}

/* A bias vector of a projection: f32 [n], split with the projection's rows under TP (its
 * elements [at, at + n) on this rank). */
static inline rad_weight rad_block_bias(RadBuilder *b, const RadBlockGeom *g, const char *name, uint32_t layer,
                                        uint64_t n, uint64_t at) {
    RadWeightDecl d;
    uint64_t span[2] = {at, n};
    memset(&d, 0, sizeof d);
    d.dtype = g->norm_dtype; /* f32: a bf16/f16 bias widens exactly */
    d.rank = 1;
    d.shape[0] = n;
    d.access = RAD_ACCESS_PER_TOKEN;
    d.shard = g->world_size > 1 ? RAD_SHARD_ROW : RAD_SHARD_NONE;
    d.group = rad_group_layer(layer);
    if (d.shard != RAD_SHARD_NONE) d.n_shard_spans = 1, d.shard_spans = span;
    return rad_decl_weight(b, name, &d);
}

/* q/k/v biases (after rad_qkv_declare_weights). Returns -1 when the core refused one. */
static inline int rad_qkv_declare_bias(RadBuilder *b, const RadBlockGeom *g, uint32_t layer, const char *q,
                                       const char *k, const char *v, RadQkv *p) {
    uint64_t qw = (uint64_t)g->n_head * g->head_dim, kw = (uint64_t)g->n_head_kv * g->head_dim;
    p->has_bias = 1;
    const uint64_t q0 = (uint64_t)g->q_head0 * g->head_dim, k0 = (uint64_t)g->kv_head0 * g->head_dim;
    p->b_q = rad_block_bias(b, g, q, layer, qw, q0);
    p->b_k = rad_block_bias(b, g, k, layer, kw, k0);
    p->b_v = rad_block_bias(b, g, v, layer, kw, k0);
    return (p->b_q.id < 0 || p->b_k.id < 0 || p->b_v.id < 0) ? -1 : 0;
}

/* x += bias over [1, max_tok] rows of width n, in place. */
static inline rad_op rad_block_add_bias(RadBuilder *b, const RadBlockGeom *g, rad_weight bias, uint32_t n, rad_buf x) {
    rad_op op = RAD_OP(b, "add_bias", RAD_PARAMS(RAD_RANGE("M", 1, g->max_tok), RAD_INT("N", n)), RAD_WEIGHTS(bias));
    if (op.id >= 0) {
        rad_op_reads(b, op, RAD_BUFS(x), 1);
        rad_op_writes(b, op, RAD_BUFS(x), 1);
    }
    return op;
}

static inline int rad_qkv_declare_ops(RadBuilder *b, const RadBlockGeom *g, rad_buf h, const RadAttnScratch *s,
                                      RadQkv *p) {
    uint32_t qw = g->n_head * g->head_dim, kw = g->n_head_kv * g->head_dim;
    const rad_weight w[3] = {p->w_q, p->w_k, p->w_v};
    const uint32_t n_out[3] = {qw, kw, kw};
    const rad_buf y[3] = {s->q, s->k, s->v};
    p->h = h;
    p->yq = s->q, p->yk = s->k, p->yv = s->v;
    p->fused = rad_block_gemm_multi(b, g, 3, w, n_out, g->n_embd, h, y);
    p->q = p->k = p->v = p->fused;
    if (p->fused.id < 0) {
        p->q = rad_block_gemm(b, g, p->w_q, qw, g->n_embd, h, s->q);
        p->k = rad_block_gemm(b, g, p->w_k, kw, g->n_embd, h, s->k);
        p->v = rad_block_gemm(b, g, p->w_v, kw, g->n_embd, h, s->v);
    }
    if (p->q.id < 0 || p->k.id < 0 || p->v.id < 0) return -1;
    if (!p->has_bias) return 0;
    p->add_q = rad_block_add_bias(b, g, p->b_q, qw, s->q);
    p->add_k = rad_block_add_bias(b, g, p->b_k, kw, s->k);
    p->add_v = rad_block_add_bias(b, g, p->b_v, kw, s->v);
    return (p->add_q.id < 0 || p->add_k.id < 0 || p->add_v.id < 0) ? -1 : 0;
}

static inline int rad_qkv_bias_step(RadCtx *c, const RadQkv *p, uint64_t n) {
    int rc;
    if (!p->has_bias) return 0;
    if ((rc = RAD_ISSUE_N(c, p->add_q, n, RAD_W(p->b_q), brows(p->yq, n))) != 0) return rc;
    if ((rc = RAD_ISSUE_N(c, p->add_k, n, RAD_W(p->b_k), brows(p->yk, n))) != 0) return rc;
    return RAD_ISSUE_N(c, p->add_v, n, RAD_W(p->b_v), brows(p->yv, n));
}

static inline int rad_qkv_step(RadCtx *c, const RadQkv *p, uint64_t n) {
    int rc;
    if (p->fused.id >= 0) {
        if ((rc = RAD_ISSUE_N(c, p->fused, n, RAD_W(p->w_q), RAD_W(p->w_k), RAD_W(p->w_v), brows(p->h, n),
                              brows(p->yq, n), brows(p->yk, n), brows(p->yv, n))) != 0)
            return rc;
        return rad_qkv_bias_step(c, p, n);
    }
    if ((rc = RAD_ISSUE_N(c, p->q, n, RAD_W(p->w_q), brows(p->h, n), brows(p->yq, n))) != 0) return rc;
    if ((rc = RAD_ISSUE_N(c, p->k, n, RAD_W(p->w_k), brows(p->h, n), brows(p->yk, n))) != 0) return rc;
    if ((rc = RAD_ISSUE_N(c, p->v, n, RAD_W(p->w_v), brows(p->h, n), brows(p->yv, n))) != 0) return rc;
    return rad_qkv_bias_step(c, p, n);
}

/* ---- per-head q/k norms -------------------------------------------------------------------- */

/* RMSNorm over each head of q and of k, one gamma [head_dim] per projection shared by its heads,
 * after the projections (and any bias) and before the rope: Qwen3's and Gemma 3's q_norm /
 * k_norm (docs/OPS.md, head_rmsnorm). Under TP each rank norms its own whole heads with the
 * same gamma, so the gammas are replicated. Declare order: rad_qk_norm_declare_weights with the
 * layer's other weights, rad_qk_norm_declare with its ops, rad_qk_norm_step after rad_qkv_step. */
typedef struct RadQkNorm {
    int on;                   /* the block norms q and k (rad_qk_norm_declare_weights ran) */
    rad_weight w_q, w_k;      /* [head_dim] f32 gammas (replicated under TP) */
    rad_op q, k;              /* head_rmsnorm over n_head / n_head_kv heads, in place */
    rad_buf bq, bk;           /* the normed buffers: the scratch's q, k */
} RadQkNorm;

/* The two gammas, named q and k. Returns -1 when the core refused one (it has named it). */
static inline int rad_qk_norm_declare_weights(RadBuilder *b, const RadBlockGeom *g, uint32_t layer, const char *q,
                                              const char *k, RadQkNorm *p) {
    p->on = 1;
    p->w_q = rad_block_norm_weight(b, g, q, rad_group_layer(layer), g->head_dim);
    p->w_k = rad_block_norm_weight(b, g, k, rad_group_layer(layer), g->head_dim);
    return (p->w_q.id < 0 || p->w_k.id < 0) ? -1 : 0;
}

/* One head_rmsnorm over x [max_tok, n_head*head_dim], in place, eps the geometry's rms_eps. */
static inline rad_op rad_head_norm_op(RadBuilder *b, const RadBlockGeom *g, rad_weight gamma, uint32_t n_head,
                                      rad_buf x) {
    rad_op op = RAD_OP(b, "head_rmsnorm",
                       RAD_PARAMS(RAD_RANGE("M", 1, g->max_tok), RAD_INT("n_head", n_head),
                                  RAD_INT("head_dim", g->head_dim), RAD_FLOAT("eps", g->rms_eps)),
                       RAD_WEIGHTS(gamma));
    if (op.id >= 0) {
        rad_op_reads(b, op, RAD_BUFS(x), 1);
        rad_op_writes(b, op, RAD_BUFS(x), 1);
    }
    return op;
}

/* The ops on q and k (nothing when the weights were not declared). */
static inline int rad_qk_norm_declare(RadBuilder *b, const RadBlockGeom *g, rad_buf q, rad_buf k, RadQkNorm *p) {
    if (!p->on) return 0;
    p->bq = q, p->bk = k;
    p->q = rad_head_norm_op(b, g, p->w_q, g->n_head, q);
    p->k = rad_head_norm_op(b, g, p->w_k, g->n_head_kv, k);
    return (p->q.id < 0 || p->k.id < 0) ? -1 : 0;
}

static inline int rad_qk_norm_step(RadCtx *c, const RadQkNorm *p, uint64_t n) {
    int rc;
    if (!p->on) return 0;
    if ((rc = RAD_ISSUE_N(c, p->q, n, RAD_W(p->w_q), brows(p->bq, n))) != 0) return rc;
    return RAD_ISSUE_N(c, p->k, n, RAD_W(p->w_k), brows(p->bk, n));
}

/* ---- rope on q and k ----------------------------------------------------------------------- */

typedef struct RadRope {
    rad_op q, k;              /* rope over n_head and n_head_kv heads, in place */
    int has_freqs;            /* both take `freqs` as their weight (RadBlockGeom::rope_has_freqs) */
    rad_weight freqs;         /* f32 [n_rot/2] per-pair frequency divisors */
    rad_buf bq, bk;           /* the rotated buffers: the scratch's q, k */
} RadRope;

/* One rope op over x [max_tok, n_head*head_dim], in place, with the geometry's scaling. */
static inline rad_op rad_rope_op(RadBuilder *b, const RadBlockGeom *g, uint32_t n_head, rad_buf x) {
    int none = g->rope_scaling == RAD_ROPE_SCALING_NONE, l3 = g->rope_scaling == RAD_ROPE_SCALING_LLAMA3;
    rad_op op = RAD_OP(b, "rope",
                       RAD_PARAMS(RAD_RANGE("M", 1, g->max_tok), RAD_INT("n_head", n_head),
                                  RAD_INT("head_dim", g->head_dim), RAD_INT("n_rot", g->n_rot),
                                  RAD_FLOAT("theta", g->rope_theta), RAD_INT("scaling", g->rope_scaling),
                                  RAD_FLOAT("factor", none ? 1.0f : g->rope_factor),
                                  RAD_FLOAT("low_freq_factor", l3 ? g->rope_low_freq_factor : 0.0f),
                                  RAD_FLOAT("high_freq_factor", l3 ? g->rope_high_freq_factor : 0.0f),
                                  RAD_INT("orig_ctx", l3 ? g->rope_orig_ctx : 0)),
                       g->rope_has_freqs ? RAD_WEIGHTS(g->rope_freqs) : RAD_NO_WEIGHTS);
    if (op.id >= 0) {
        rad_op_reads(b, op, RAD_BUFS(x), 1);
        rad_op_writes(b, op, RAD_BUFS(x), 1);
    }
    return op;
}

static inline int rad_rope_declare(RadBuilder *b, const RadBlockGeom *g, rad_buf q, rad_buf k, RadRope *r) {
    r->has_freqs = g->rope_has_freqs;
    r->freqs = g->rope_freqs;
    r->bq = q, r->bk = k;
    r->q = rad_rope_op(b, g, g->n_head, q);
    r->k = rad_rope_op(b, g, g->n_head_kv, k);
    return (r->q.id < 0 || r->k.id < 0) ? -1 : 0;
}

static inline int rad_rope_step(RadCtx *c, const RadRope *r, const int32_t *positions, uint64_t n) {
    int rc;
    if (r->has_freqs) {
        if ((rc = RAD_ISSUE_N(c, r->q, n, RAD_W(r->freqs), brows(r->bq, n), praw(positions, RAD_I32, n))) != 0) return rc;
        return RAD_ISSUE_N(c, r->k, n, RAD_W(r->freqs), brows(r->bk, n), praw(positions, RAD_I32, n));
    }
    if ((rc = RAD_ISSUE_N(c, r->q, n, brows(r->bq, n), praw(positions, RAD_I32, n))) != 0) return rc;
    return RAD_ISSUE_N(c, r->k, n, brows(r->bk, n), praw(positions, RAD_I32, n));
}

/* ---- paged attention ----------------------------------------------------------------------- */

/* o = attn_paged(q, k, v) over `kv` (the group `layer` is bound to), on the scratch's buffers;
 * the softmax scale is the geometry's attn_scale, or 1/sqrt(head_dim) when that is 0. A
 * sliding window (attn_window, which must be the group's) is the op's `window`; full
 * attention leaves it out (docs/OPS.md: omitted means 0). */
static inline rad_op rad_attn_paged_declare(RadBuilder *b, const RadBlockGeom *g, rad_kv kv, uint32_t layer,
                                            const RadAttnScratch *s) {
    float scale = g->attn_scale > 0 ? g->attn_scale : rad_block_rsqrt(g->head_dim);
    const RadParam p[] = {RAD_RANGE_ROLE("M", 1, g->max_tok, RAD_PROLE_SEQ_CHUNK), RAD_INT("n_head", g->n_head),
                          RAD_INT("n_head_kv", g->n_head_kv), RAD_INT("head_dim", g->head_dim), RAD_INT("kv", kv.id),
                          RAD_INT("layer", layer), RAD_FLOAT("scale", scale), RAD_INT("prefill_fp8", g->prefill_fp8),
                          RAD_INT("window", g->attn_window)};
    const uint32_t np = (uint32_t)(sizeof p / sizeof p[0]) - (g->attn_window ? 0 : 1);
    rad_op op = RAD_OP(b, "attn_paged", ((RadParamList){p, np}), RAD_NO_WEIGHTS);
    if (op.id >= 0) {
        rad_op_reads(b, op, RAD_BUFS(s->q, s->k, s->v), 3);
        rad_op_writes(b, op, RAD_BUFS(s->o), 1);
    }
    return op;
}

static inline int rad_attn_paged_step(RadCtx *c, rad_op op, const RadAttnScratch *s, uint64_t n) {
    return RAD_ISSUE_N(c, op, n, brows(s->q, n), brows(s->k, n), brows(s->v, n), brows(s->o, n));
}

/* ---- the KV group -------------------------------------------------------------------------- */

/* One group of the geometry's KV heads: kind FULL (window 0) or WINDOW (window tokens). */
static inline rad_kv rad_attn_kv_declare(RadBuilder *b, const RadBlockGeom *g, const char *name, RadKvKind kind,
                                         RadDType dtype, uint32_t window) {
    RadKvDecl kd;
    memset(&kd, 0, sizeof kd);
    kd.kind = kind;
    kd.dtype = dtype;
    kd.n_head_kv = g->n_head_kv;
    kd.head_dim = g->head_dim;
    kd.window = window;
    rad_kv kv = rad_decl_kv_group(b, name, &kd);
    if (kv.id >= 0 && g->kv_replicated) rad_kv_group_replicated(b, kv); /* another rank holds these heads too */
    return kv;
}

/* Binds layers [begin, end) to kv. Returns 0, or -1 with the refused layer in *refused. */
static inline int rad_attn_kv_bind(RadBuilder *b, rad_kv kv, uint32_t begin, uint32_t end, uint32_t *refused) {
    for (uint32_t l = begin; l < end; l++)
        if (rad_bind_layer_kv(b, l, kv) != 0) return *refused = l, -1;
    return 0;
}

#endif
