/* rad_block_attn.h — a pre-norm GQA attention block, header-only (static inline + plain
 * structs), for every family whose layer is
 *
 *     h = rmsnorm(x); q,k,v = h·Wq^T, h·Wk^T, h·Wv^T; rope(q), rope(k);   (gemm_nt3 when resolved)
 *     (Qwen2: + bq, bk, bv before the rope; Qwen3: q, k = head_rmsnorm(q), head_rmsnorm(k) before it)
 *     o = attn_paged(q, k, v); x = x + o·Wo^T
 *
 * (Llama, Mistral, SmolLM2, TinyLlama, Qwen2, Qwen3). It is the parts of rad_attn_parts.h (projections, rope,
 * paged attention) between the pre-norm and the output GEMM of rad_block.h; the output is left
 * pending in the residual stream for the next pre-norm to add (see rad_block.h).
 *
 * Declare order (spec): the caller declares every name-map entry first, then weights
 * (rad_attn_declare_weights), then buffers (rad_resid_declare, rad_attn_scratch_declare), the
 * KV group (rad_attn_kv_declare, rad_attn_kv_bind), then ops (rad_attn_declare_ops). Step:
 * rad_attn_step. The scratch is declared once per model and shared by every layer's block. */
#ifndef RAD_BLOCK_ATTN_H
#define RAD_BLOCK_ATTN_H

#include "rad_attn_parts.h"

/* Declared weight names of one layer (the caller formats them: "blk.3.attn_q.weight"); bq, bk,
 * bv name the projections' biases (Qwen2), all three or none (NULL); qn, kn the per-head q/k
 * norm gammas (Qwen3), both or none. */
typedef struct RadAttnNames {
    const char *norm, *q, *k, *v, *o;
    const char *bq, *bk, *bv;
    const char *qn, *kn;
} RadAttnNames;

typedef struct RadAttnBlock {
    uint32_t layer;           /* the KV layer attn_paged reads */
    rad_weight w_norm;        /* [n_embd] */
    rad_weight w_o;           /* [n_embd, n_head*head_dim] (SHARD_COL under TP, then all_reduce) */
    RadPreNorm pre;           /* h = rmsnorm(x), settling the previous block's output */
    RadQkv qkv;               /* q, k, v = h·W^T */
    RadQkNorm qkn;            /* q, k = head_rmsnorm(q), head_rmsnorm(k) (qkn.on: Qwen3) */
    RadRope rope;             /* rope(q), rope(k) */
    rad_op op_attn;           /* attn_paged */
    rad_op op_o;              /* y = o·Wo^T, left pending */
    RadAllReduce ar;          /* of y, under TP */
    RadAttnScratch s;
    rad_buf h, y;             /* the residual stream's */
} RadAttnBlock;

/* Weights: norm gamma, q, k, v (+ biases, + q/k norm gammas [head_dim]), o (shapes above). Returns -1 when the core refused one (it has
 * named it). */
static inline int rad_attn_declare_weights(RadBuilder *b, const RadBlockGeom *g, uint32_t layer,
                                           const RadAttnNames *nm, RadAttnBlock *a) {
    uint64_t qw = (uint64_t)g->n_head * g->head_dim;
    memset(a, 0, sizeof *a);
    a->layer = layer;
    a->w_norm = rad_block_norm_weight(b, g, nm->norm, rad_group_layer(layer), g->n_embd);
    int rc = rad_qkv_declare_weights(b, g, layer, nm->q, nm->k, nm->v, &a->qkv);
    if (rc == 0 && nm->bq) rc = rad_qkv_declare_bias(b, g, layer, nm->bq, nm->bk, nm->bv, &a->qkv);
    if (rc == 0 && nm->qn) rc = rad_qk_norm_declare_weights(b, g, layer, nm->qn, nm->kn, &a->qkn);
    a->w_o = rad_block_linear(b, g, nm->o, layer, g->n_embd, qw, RAD_SHARD_COL, (uint64_t)g->q_head0 * g->head_dim);
    return (a->w_norm.id < 0 || rc != 0 || a->w_o.id < 0) ? -1 : 0;
}

/* Ops of one layer: the pre-norm (settling the previous block's pending output), q/k/v GEMMs,
 * the per-head q/k norms when declared, rope on q and k, attn_paged over `kv` (the group the layer is bound to), the output GEMM into
 * r->y (+ all_reduce under TP), left pending in r. */
static inline int rad_attn_declare_ops(RadBuilder *b, const RadBlockGeom *g, rad_kv kv, RadResid *r,
                                       const RadAttnScratch *s, RadAttnBlock *a) {
    uint32_t qw = g->n_head * g->head_dim;
    a->s = *s;
    a->h = r->h;
    a->y = r->y;
    if (rad_prenorm_declare(b, g, r, a->w_norm, &a->pre) != 0) return -1;
    int bad = rad_qkv_declare_ops(b, g, r->h, s, &a->qkv) != 0;
    bad |= rad_qk_norm_declare(b, g, s->q, s->k, &a->qkn) != 0;
    bad |= rad_rope_declare(b, g, s->q, s->k, &a->rope) != 0;
    a->op_attn = rad_attn_paged_declare(b, g, kv, a->layer, s);
    a->op_o = rad_block_gemm(b, g, a->w_o, g->n_embd, qw, s->o, r->y);
    if (rad_allreduce_declare(b, g, &a->ar, r->y, g->n_embd) != 0) return -1;
    r->pending = 1;
    return (bad || a->op_attn.id < 0 || a->op_o.id < 0) ? -1 : 0;
}

static inline int rad_attn_declare(RadBuilder *b, const RadBlockGeom *g, uint32_t layer, const RadAttnNames *nm,
                                   rad_kv kv, RadResid *r, const RadAttnScratch *s, RadAttnBlock *a) {
    if (rad_attn_declare_weights(b, g, layer, nm, a) != 0) return -1;
    return rad_attn_declare_ops(b, g, kv, r, s, a);
}

/* One step over the batch's n_tok rows (nothing is issued for zero rows). Returns the first
 * failing issue's status. */
static inline int rad_attn_step(RadCtx *c, const RadAttnBlock *a, const struct RadBatch *batch) {
    uint64_t n = batch->n_tok;
    int rc;
    if (n == 0) return 0;
    if ((rc = rad_prenorm_step(c, &a->pre, n)) != 0) return rc;
    if ((rc = rad_qkv_step(c, &a->qkv, n)) != 0) return rc;
    if ((rc = rad_qk_norm_step(c, &a->qkn, n)) != 0) return rc;
    if ((rc = rad_rope_step(c, &a->rope, batch->positions, n)) != 0) return rc;
    if ((rc = rad_attn_paged_step(c, a->op_attn, &a->s, n)) != 0) return rc;
    if ((rc = RAD_ISSUE_N(c, a->op_o, n, RAD_W(a->w_o), brows(a->s.o, n), brows(a->y, n))) != 0) return rc;
    return rad_allreduce_step(c, &a->ar, a->y, n);
}

#endif
