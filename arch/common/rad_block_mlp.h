/* rad_block_mlp.h — a pre-norm gated MLP block (SwiGLU, or GeGLU by RadBlockGeom::mlp_act),
 * header-only:
 *
 *     h = rmsnorm(x); g = h·Wgate^T; u = h·Wup^T; a = act(g) * u; x = x + a·Wdown^T
 *
 * (g and u as one gemm_nt2 when a library resolves it, else two gemm_nt).
 *
 * The geometry, residual stream, pre-norm and all-reduce are rad_block.h's (included); as
 * every block there, it leaves its output pending in the residual's y and the next pre-norm adds
 * it (fused add_rmsnorm when resolved, else add + rmsnorm).
 *
 * Declare order: rad_mlp_declare_weights with the other weights, rad_mlp_scratch_declare with
 * the buffers, rad_mlp_declare_ops with the ops. Step: rad_mlp_step. */
#ifndef RAD_BLOCK_MLP_H
#define RAD_BLOCK_MLP_H

#include "rad_block.h"

/* Declared weight names of one layer ("blk.3.ffn_gate.weight", ...). */
typedef struct RadMlpNames {
    const char *norm, *gate, *up, *down;
} RadMlpNames;

/* Per-model scratch shared by every layer: gate, up and the activation, [max_tok, n_ff]. */
typedef struct RadMlpScratch {
    rad_buf gate, up;         /* [max_tok, n_ff] */
    rad_buf act;              /* [max_tok, n_ff] act(gate) * up */
} RadMlpScratch;

static inline int rad_mlp_scratch_declare(RadBuilder *b, const RadBlockGeom *g, const char *prefix,
                                          RadMlpScratch *s) {
    s->gate = rad_block_buf(b, prefix, "mlp.gate", g->max_tok, g->n_ff);
    s->up = rad_block_buf(b, prefix, "mlp.up", g->max_tok, g->n_ff);
    s->act = rad_block_buf(b, prefix, "mlp.act", g->max_tok, g->n_ff);
    return (s->gate.id < 0 || s->up.id < 0 || s->act.id < 0) ? -1 : 0;
}

typedef struct RadMlpBlock {
    uint32_t layer;
    rad_weight w_norm;        /* [n_embd] */
    rad_weight w_gate, w_up;  /* [n_ff, n_embd] (SHARD_ROW under TP) */
    rad_weight w_down;        /* [n_embd, n_ff] (SHARD_COL under TP, then all_reduce) */
    RadPreNorm pre;           /* h = rmsnorm(x), settling the attention's output */
    rad_op op_gate, op_up, op_act, op_down;
    rad_op op_gate_up;        /* gemm_nt2 when resolved (id < 0: op_gate, op_up are issued) */
    RadAllReduce ar;          /* of y, under TP */
    RadMlpScratch s;
    rad_buf h, y;             /* the residual stream's */
} RadMlpBlock;

/* Weights: norm gamma [n_embd]; gate, up [n_ff, n_embd] (SHARD_ROW under TP); down [n_embd, n_ff]
 * (SHARD_COL under TP). */
static inline int rad_mlp_declare_weights(RadBuilder *b, const RadBlockGeom *g, uint32_t layer,
                                          const RadMlpNames *nm, RadMlpBlock *m) {
    memset(m, 0, sizeof *m);
    m->layer = layer;
    m->w_norm = rad_block_norm_weight(b, g, nm->norm, rad_group_layer(layer), g->n_embd);
    m->w_gate = rad_block_linear(b, g, nm->gate, layer, g->n_ff, g->n_embd, RAD_SHARD_ROW, g->ff0);
    m->w_up = rad_block_linear(b, g, nm->up, layer, g->n_ff, g->n_embd, RAD_SHARD_ROW, g->ff0);
    m->w_down = rad_block_linear(b, g, nm->down, layer, g->n_embd, g->n_ff, RAD_SHARD_COL, g->ff0);
    return (m->w_norm.id < 0 || m->w_gate.id < 0 || m->w_up.id < 0 || m->w_down.id < 0) ? -1 : 0;
}

static inline int rad_mlp_declare_ops(RadBuilder *b, const RadBlockGeom *g, RadResid *r,
                                      const RadMlpScratch *s, RadMlpBlock *m) {
    m->s = *s;
    m->h = r->h;
    m->y = r->y;
    if (rad_prenorm_declare(b, g, r, m->w_norm, &m->pre) != 0) return -1;
    {
        const rad_weight w[2] = {m->w_gate, m->w_up};
        const uint32_t n_out[2] = {g->n_ff, g->n_ff};
        const rad_buf y[2] = {s->gate, s->up};
        m->op_gate_up = rad_block_gemm_multi(b, g, 2, w, n_out, g->n_embd, r->h, y);
    }
    m->op_gate = m->op_up = m->op_gate_up;
    if (m->op_gate_up.id < 0) {
        m->op_gate = rad_block_gemm(b, g, m->w_gate, g->n_ff, g->n_embd, r->h, s->gate);
        m->op_up = rad_block_gemm(b, g, m->w_up, g->n_ff, g->n_embd, r->h, s->up);
    }
    m->op_act = RAD_OP(b, g->mlp_act ? g->mlp_act : "silu_mul", RAD_PARAMS(RAD_RANGE("M", 1, g->max_tok), RAD_INT("N", g->n_ff)),
                       RAD_NO_WEIGHTS);
    if (m->op_act.id >= 0) {
        rad_op_reads(b, m->op_act, RAD_BUFS(s->gate, s->up), 2);
        rad_op_writes(b, m->op_act, RAD_BUFS(s->act), 1);
    }
    m->op_down = rad_block_gemm(b, g, m->w_down, g->n_embd, g->n_ff, s->act, r->y);
    if (rad_allreduce_declare(b, g, &m->ar, r->y, g->n_embd) != 0) return -1;
    r->pending = 1;
    if (m->op_gate.id < 0 || m->op_up.id < 0 || m->op_act.id < 0 || m->op_down.id < 0) return -1;
    return 0;
}

static inline int rad_mlp_declare(RadBuilder *b, const RadBlockGeom *g, uint32_t layer, const RadMlpNames *nm,
                                  RadResid *r, const RadMlpScratch *s, RadMlpBlock *m) {
    if (rad_mlp_declare_weights(b, g, layer, nm, m) != 0) return -1;
    return rad_mlp_declare_ops(b, g, r, s, m);
}

static inline int rad_mlp_step(RadCtx *c, const RadMlpBlock *m, const struct RadBatch *batch) {
    uint64_t n = batch->n_tok;
    int rc;
    if (n == 0) return 0;
    if ((rc = rad_prenorm_step(c, &m->pre, n)) != 0) return rc;
    if (m->op_gate_up.id >= 0) {
        if ((rc = RAD_ISSUE_N(c, m->op_gate_up, n, RAD_W(m->w_gate), RAD_W(m->w_up), brows(m->h, n), brows(m->s.gate, n),
                              brows(m->s.up, n))) != 0)
            return rc;
    } else {
        if ((rc = RAD_ISSUE_N(c, m->op_gate, n, RAD_W(m->w_gate), brows(m->h, n), brows(m->s.gate, n))) != 0) return rc;
        if ((rc = RAD_ISSUE_N(c, m->op_up, n, RAD_W(m->w_up), brows(m->h, n), brows(m->s.up, n))) != 0) return rc;
    }
    if ((rc = RAD_ISSUE_N(c, m->op_act, n, brows(m->s.gate, n), brows(m->s.up, n), brows(m->s.act, n))) != 0) return rc;
    if ((rc = RAD_ISSUE_N(c, m->op_down, n, RAD_W(m->w_down), brows(m->s.act, n), brows(m->y, n))) != 0) return rc;
    return rad_allreduce_step(c, &m->ar, m->y, n);
}

#endif
