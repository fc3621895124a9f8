/* rad_block_attn.h — a pre-norm GQA attention block, header-only (static inline + plain
 * structs), for every family whose layer is
 *
 *     h = rmsnorm(x); q,k,v = h·Wq^T, h·Wk^T, h·Wv^T; rope(q), rope(k);   (gemm_nt3 when resolved)
 *     o = attn_paged(q, k, v); x = x + o·Wo^T
 *
 * (Llama, Mistral, SmolLM2, TinyLlama; Qwen3 and Gemma 3 build on it). Ops, parameter names and
 * operand order are the op vocabulary's (docs/OPS.md). Also holds what the blocks share:
 * RadBlockGeom (the geometry, read from metadata), the residual stream (RadResid), the pre-norm
 * that settles a pending residual add (RadPreNorm) and the tensor-parallel all-reduce
 * (RadAllReduce); rad_block_mlp.h includes this header for them.
 *
 * The residual add.  A block never adds its own output: its last GEMM writes y and leaves it
 * *pending*; the next pre-norm (the next block's, or the model's final norm) settles it, as the
 * fused add_rmsnorm (res += x; out = rmsnorm(res)) when a library declares that op and the
 * selector resolves it, else as the chain add + rmsnorm. The arithmetic is the textbook layer's;
 * only the place of the add moves, so the fusion is available at every norm after the first.
 * A model that reads the raw residual after its last block settles it with rad_resid_settle_*.
 *
 * Declare order (spec): the caller declares every name-map entry first, then weights
 * (rad_attn_declare_weights), then buffers (rad_resid_declare, rad_attn_scratch_declare), the
 * KV group, then ops (rad_attn_declare_ops). Step: rad_attn_step.
 *
 * Buffers.  The scratch buffers (q, k, v, attention output) are declared once per model and
 * shared by every layer's block; every op declares its reads and writes, so the liveness planner
 * sees each write start a new live range. All activations are f32, [max_tok, width].
 *
 * Positions: rope takes the step's positions as a raw operand, praw(batch->positions, I32, n),
 * as the op vocabulary lists it (no derived buffer). A model whose rope has per-pair frequency
 * divisors (GGUF's rope_freqs.weight, Llama 3.1) sets RadBlockGeom::rope_has_freqs/rope_freqs;
 * both rope ops then take that weight.
 *
 * Issue operand order: the op's weights first (RAD_W, in RAD_WEIGHTS order), then its buffer
 * and raw operands in the vocabulary's order (RadKernelArgs: "weights first, then buffers"). */
#ifndef RAD_BLOCK_ATTN_H
#define RAD_BLOCK_ATTN_H

#include <arch/rad_arch.h>

/* ---- geometry ------------------------------------------------------------------------------ */

typedef enum RadRopeScaling {
    RAD_ROPE_SCALING_NONE = 0,   /* transformers "default" */
    RAD_ROPE_SCALING_LINEAR = 1, /* inv_freq / factor */
    RAD_ROPE_SCALING_LLAMA3 = 2, /* transformers' _compute_llama3_parameters */
} RadRopeScaling;

typedef struct RadBlockGeom {
    uint32_t n_embd;          /* residual width */
    uint32_t n_head;          /* query heads on this rank */
    uint32_t n_head_kv;       /* KV heads on this rank */
    uint32_t head_dim;        /* read from metadata, never derived */
    uint32_t n_ff;            /* MLP width on this rank */
    float rms_eps;
    /* rope */
    uint32_t n_rot;           /* rotated dims of each head (head_dim for Llama) */
    float rope_theta;
    uint32_t rope_scaling;    /* RadRopeScaling */
    float rope_factor;        /* LINEAR, LLAMA3 (1 when NONE) */
    float rope_low_freq_factor, rope_high_freq_factor; /* LLAMA3 */
    uint32_t rope_orig_ctx;   /* LLAMA3: original_max_position_embeddings */
    int rope_has_freqs;       /* 1: rope takes rope_freqs as its weight (per-pair frequency divisors) */
    rad_weight rope_freqs;    /* f32 [n_rot/2] (GGUF's rope_freqs.weight); read when rope_has_freqs */
    /* attention */
    float attn_scale;         /* softmax scale; 0: 1/sqrt(head_dim) */
    uint32_t prefill_fp8;     /* RadBuildCtx::attn_prefill_fp8 */
    /* deployment */
    uint32_t max_tok;         /* rows of every transient buffer; the ranged M's upper bound */
    uint32_t world_size;      /* > 1: q/k/v, gate/up SHARD_ROW; o, down SHARD_COL + all_reduce */
    int tp_wire_lossy;        /* RadBuildCtx::tp_wire_lossy */
    uint64_t tp_wire_min_bytes;
    /* weight forms */
    RadDType linear_dtype;    /* projection weights (RAD_ANY: as stored) */
    RadDType norm_dtype;      /* norm gammas (RAD_F32: a bf16/f16 gamma widens exactly) */
} RadBlockGeom;

/* 1/sqrt(n) without libm (a plugin links against nothing). */
static inline float rad_block_rsqrt(double n) {
    if (n <= 0) return 0.0f;
    double r = n > 1 ? n / 2 : 1.0;
    for (int i = 0; i < 64; i++) r = 0.5 * (r + n / r);
    return (float)(1.0 / r);
}

/* ---- weights ------------------------------------------------------------------------------- */

static inline rad_weight rad_block_linear(RadBuilder *b, const RadBlockGeom *g, const char *name,
                                          uint32_t layer, uint64_t n_out, uint64_t n_in, RadShard shard) {
    RadWeightDecl d;
    memset(&d, 0, sizeof d);
    d.dtype = g->linear_dtype;
    d.rank = 2;
    d.shape[0] = n_out; /* [N, K]: out_features, in_features (per rank) */
    d.shape[1] = n_in;
    d.access = RAD_ACCESS_PER_TOKEN;
    d.shard = g->world_size > 1 ? shard : RAD_SHARD_NONE;
    d.group = rad_group_layer(layer);
    return rad_decl_weight(b, name, &d);
}

static inline rad_weight rad_block_norm_weight(RadBuilder *b, const RadBlockGeom *g, const char *name,
                                               RadGroup group, uint64_t n) {
    RadWeightDecl d;
    memset(&d, 0, sizeof d);
    d.dtype = g->norm_dtype;
    d.rank = 1;
    d.shape[0] = n;
    d.access = RAD_ACCESS_PER_TOKEN;
    d.shard = RAD_SHARD_NONE;
    d.group = group;
    return rad_decl_weight(b, name, &d);
}

/* ---- buffers ------------------------------------------------------------------------------- */

static inline rad_buf rad_block_buf(RadBuilder *b, const char *prefix, const char *name,
                                    uint64_t rows, uint64_t cols) {
    char full[256];
    int k = snprintf(full, sizeof full, "%s%s", prefix ? prefix : "", name);
    if (k < 0 || (size_t)k >= sizeof full) return RAD_NONE_B;
    RadBufDecl d;
    memset(&d, 0, sizeof d);
    d.dtype = RAD_F32;
    d.rank = 2;
    d.shape[0] = rows;
    d.shape[1] = cols;
    d.kind = RAD_BUF_TRANSIENT;
    return rad_decl_buffer(b, full, &d);
}

/* The residual stream: x (the residual), h (a pre-norm's output, every block's input), y (a
 * block's output, pending until the next pre-norm adds it into x). [max_tok, n_embd] each. */
typedef struct RadResid {
    rad_buf x, h, y;
    int pending;              /* declare-time: y holds an output not yet added into x */
} RadResid;

static inline int rad_resid_declare(RadBuilder *b, const RadBlockGeom *g, const char *prefix, RadResid *r) {
    r->x = rad_block_buf(b, prefix, "x", g->max_tok, g->n_embd);
    r->h = rad_block_buf(b, prefix, "h", g->max_tok, g->n_embd);
    r->y = rad_block_buf(b, prefix, "y", g->max_tok, g->n_embd);
    r->pending = 0;
    return (r->x.id < 0 || r->h.id < 0 || r->y.id < 0) ? -1 : 0;
}

/* ---- the tensor-parallel all-reduce -------------------------------------------------------- */

/* Declared only when world_size > 1. Two forms when the wire may be lossy: `exact` for messages
 * under tp_wire_min_bytes (a decode step's few rows), `lossy` for the rest. */
typedef struct RadAllReduce {
    int on;
    rad_op exact, lossy;      /* lossy.id < 0: every message goes exact */
    uint32_t n;               /* row width */
    uint64_t min_bytes;
} RadAllReduce;

static inline int rad_allreduce_declare(RadBuilder *b, const RadBlockGeom *g, RadAllReduce *ar,
                                        rad_buf x, uint32_t n) {
    memset(ar, 0, sizeof *ar);
    ar->exact.id = ar->lossy.id = -1;
    ar->n = n;
    ar->min_bytes = g->tp_wire_min_bytes;
    if (g->world_size <= 1) return 0;
    ar->on = 1;
    ar->exact = RAD_OP(b, "all_reduce",
                       RAD_PARAMS(RAD_RANGE("M", 1, g->max_tok), RAD_INT("N", n), RAD_INT("exact", 1)),
                       RAD_NO_WEIGHTS);
    if (ar->exact.id < 0) return -1;
    rad_op_reads(b, ar->exact, RAD_BUFS(x), 1);
    rad_op_writes(b, ar->exact, RAD_BUFS(x), 1);
    if (g->tp_wire_lossy) {
        ar->lossy = RAD_OP(b, "all_reduce",
                           RAD_PARAMS(RAD_RANGE("M", 1, g->max_tok), RAD_INT("N", n), RAD_INT("exact", 0)),
                           RAD_NO_WEIGHTS);
        if (ar->lossy.id < 0) return -1;
        rad_op_reads(b, ar->lossy, RAD_BUFS(x), 1);
        rad_op_writes(b, ar->lossy, RAD_BUFS(x), 1);
    }
    return 0;
}

static inline int rad_allreduce_step(RadCtx *c, const RadAllReduce *ar, rad_buf x, uint64_t rows) {
    if (!ar->on || rows == 0) return 0;
    rad_op op = ar->exact;
    if (ar->lossy.id >= 0 && rows * ar->n * sizeof(float) >= ar->min_bytes) op = ar->lossy;
    return RAD_ISSUE_N(c, op, rows, brows(x, rows));
}

/* ---- the pre-norm: h = rmsnorm(x), settling a pending y first ------------------------------ */

typedef enum RadPreNormMode {
    RAD_PRENORM_PLAIN = 0, /* rmsnorm(x -> h): nothing pending */
    RAD_PRENORM_CHAIN = 1, /* add(x, y -> x); rmsnorm(x -> h) */
    RAD_PRENORM_FUSED = 2, /* add_rmsnorm(y, x (in/out), h) */
} RadPreNormMode;

typedef struct RadPreNorm {
    int mode;                 /* RadPreNormMode */
    rad_weight gamma;
    rad_op norm;              /* rmsnorm, or add_rmsnorm when FUSED */
    rad_op add;               /* CHAIN's add */
    rad_buf x, h, y;
} RadPreNorm;

/* Declares the norm reading r->x (plus r->y when pending) into r->h, and clears r->pending. */
static inline int rad_prenorm_declare(RadBuilder *b, const RadBlockGeom *g, RadResid *r,
                                      rad_weight gamma, RadPreNorm *p) {
    memset(p, 0, sizeof *p);
    p->gamma = gamma;
    p->norm.id = p->add.id = -1;
    p->x = r->x;
    p->h = r->h;
    p->y = r->y;
    p->mode = RAD_PRENORM_PLAIN;
    if (r->pending) {
        r->pending = 0;
        /* Fusion is selection: ask for the fused op (only when some library declares it, as it
         * is optional); an unresolved one is never issued and declares no access. */
        if (rad_op_declared(b, "add_rmsnorm")) {
            rad_op f = RAD_OP(b, "add_rmsnorm",
                              RAD_PARAMS(RAD_RANGE("M", 1, g->max_tok), RAD_INT("N", g->n_embd),
                                         RAD_FLOAT("eps", g->rms_eps)),
                              RAD_WEIGHTS(gamma));
            if (f.id >= 0 && rad_op_resolved(b, f)) {
                p->mode = RAD_PRENORM_FUSED;
                p->norm = f;
                rad_op_reads(b, f, RAD_BUFS(r->y, r->x), 2);
                rad_op_writes(b, f, RAD_BUFS(r->x, r->h), 2);
                return 0;
            }
        }
        p->mode = RAD_PRENORM_CHAIN;
        p->add = RAD_OP(b, "add", RAD_PARAMS(RAD_RANGE("M", 1, g->max_tok), RAD_INT("N", g->n_embd)),
                        RAD_NO_WEIGHTS);
        if (p->add.id < 0) return -1;
        rad_op_reads(b, p->add, RAD_BUFS(r->x, r->y), 2);
        rad_op_writes(b, p->add, RAD_BUFS(r->x), 1);
    }
    p->norm = RAD_OP(b, "rmsnorm",
                     RAD_PARAMS(RAD_RANGE("M", 1, g->max_tok), RAD_INT("N", g->n_embd),
                                RAD_FLOAT("eps", g->rms_eps)),
                     RAD_WEIGHTS(gamma));
    if (p->norm.id < 0) return -1;
    rad_op_reads(b, p->norm, RAD_BUFS(r->x), 1);
    rad_op_writes(b, p->norm, RAD_BUFS(r->h), 1);
    return 0;
}

static inline int rad_prenorm_step(RadCtx *c, const RadPreNorm *p, uint64_t n) {
    int rc;
    if (n == 0) return 0;
    switch (p->mode) {
    case RAD_PRENORM_FUSED:
        return RAD_ISSUE_N(c, p->norm, n, RAD_W(p->gamma), brows(p->y, n), brows(p->x, n), brows(p->h, n));
    case RAD_PRENORM_CHAIN:
        if ((rc = RAD_ISSUE_N(c, p->add, n, brows(p->x, n), brows(p->y, n), brows(p->x, n))) != 0) return rc;
        /* fall through */
    default:
        return RAD_ISSUE_N(c, p->norm, n, RAD_W(p->gamma), brows(p->x, n), brows(p->h, n));
    }
}

/* Settles a pending y into x without a norm (a model reading the raw residual after its last
 * block). Declare returns the add op (id < 0 when nothing was pending). */
static inline rad_op rad_resid_settle_declare(RadBuilder *b, const RadBlockGeom *g, RadResid *r) {
    rad_op add = {-1};
    if (!r->pending) return add;
    r->pending = 0;
    add = RAD_OP(b, "add", RAD_PARAMS(RAD_RANGE("M", 1, g->max_tok), RAD_INT("N", g->n_embd)), RAD_NO_WEIGHTS);
    if (add.id >= 0) {
        rad_op_reads(b, add, RAD_BUFS(r->x, r->y), 2);
        rad_op_writes(b, add, RAD_BUFS(r->x), 1);
    }
    return add;
}
static inline int rad_resid_settle_step(RadCtx *c, rad_op add, const RadResid *r, uint64_t n) {
    if (add.id < 0 || n == 0) return 0;
    return RAD_ISSUE_N(c, add, n, brows(r->x, n), brows(r->y, n), brows(r->x, n));
}

/* ---- the attention block ------------------------------------------------------------------- */

/* Declared weight names of one layer (the caller formats them: "blk.3.attn_q.weight"). */
typedef struct RadAttnNames {
    const char *norm, *q, *k, *v, *o;
} RadAttnNames;

/* Per-model scratch shared by every layer: q [max_tok, n_head*hd], k and v [max_tok,
 * n_head_kv*hd], the attention output [max_tok, n_head*hd]. */
typedef struct RadAttnScratch {
    rad_buf q, k, v, o;
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

typedef struct RadAttnBlock {
    uint32_t layer;
    rad_weight w_norm, w_q, w_k, w_v, w_o;
    RadPreNorm pre;
    rad_op op_q, op_k, op_v, op_rope_q, op_rope_k, op_attn, op_o;
    rad_op op_qkv;            /* gemm_nt3 when resolved (id < 0: op_q, op_k, op_v are issued) */
    int rope_has_freqs;       /* the rope ops take w_rope_freqs (RadBlockGeom::rope_freqs) */
    rad_weight w_rope_freqs;
    RadAllReduce ar;
    RadAttnScratch s;
    rad_buf h, y;
} RadAttnBlock;

/* Weights: norm gamma [n_embd]; q [n_head*hd, n_embd], k/v [n_head_kv*hd, n_embd] (SHARD_ROW
 * under TP: whole heads per rank); o [n_embd, n_head*hd] (SHARD_COL under TP). Returns -1 when
 * the core refused one (it has named it). */
static inline int rad_attn_declare_weights(RadBuilder *b, const RadBlockGeom *g, uint32_t layer,
                                           const RadAttnNames *nm, RadAttnBlock *a) {
    uint64_t qw = (uint64_t)g->n_head * g->head_dim, kw = (uint64_t)g->n_head_kv * g->head_dim;
    memset(a, 0, sizeof *a);
    a->layer = layer;
    a->w_norm = rad_block_norm_weight(b, g, nm->norm, rad_group_layer(layer), g->n_embd);
    a->w_q = rad_block_linear(b, g, nm->q, layer, qw, g->n_embd, RAD_SHARD_ROW);
    a->w_k = rad_block_linear(b, g, nm->k, layer, kw, g->n_embd, RAD_SHARD_ROW);
    a->w_v = rad_block_linear(b, g, nm->v, layer, kw, g->n_embd, RAD_SHARD_ROW);
    a->w_o = rad_block_linear(b, g, nm->o, layer, g->n_embd, qw, RAD_SHARD_COL);
    return (a->w_norm.id < 0 || a->w_q.id < 0 || a->w_k.id < 0 || a->w_v.id < 0 || a->w_o.id < 0) ? -1 : 0;
}

static inline rad_op rad_attn_gemm(RadBuilder *b, const RadBlockGeom *g, rad_weight w, uint32_t n_out,
                                   uint32_t n_in, rad_buf x, rad_buf y) {
    rad_op op = RAD_OP(b, "gemm_nt",
                       RAD_PARAMS(RAD_RANGE("M", 1, g->max_tok), RAD_INT("N", n_out), RAD_INT("K", n_in)),
                       RAD_WEIGHTS(w));
    if (op.id >= 0) {
        rad_op_reads(b, op, RAD_BUFS(x), 1);
        rad_op_writes(b, op, RAD_BUFS(y), 1);
    }
    return op;
}

/* The fused form of two or three GEMMs over one input x (gemm_nt2, gemm_nt3: docs/OPS.md),
 * asked for only when a library declares it; id < 0 when it is not declared or not resolved,
 * and the caller then issues the chain of gemm_nt. One job instead of two or three is what
 * decode, a few microseconds a GEMM, gains. */
static inline rad_op rad_block_gemm_multi(RadBuilder *b, const RadBlockGeom *g, int n, const rad_weight *w,
                                          const uint32_t *n_out, uint32_t n_in, rad_buf x, const rad_buf *y) {
    rad_op none = {-1}, op;
    if (n == 2) {
        if (!rad_op_declared(b, "gemm_nt2")) return none;
        op = RAD_OP(b, "gemm_nt2",
                    RAD_PARAMS(RAD_RANGE("M", 1, g->max_tok), RAD_INT("N0", n_out[0]), RAD_INT("N1", n_out[1]),
                               RAD_INT("K", n_in)),
                    RAD_WEIGHTS(w[0], w[1]));
    } else {
        if (!rad_op_declared(b, "gemm_nt3")) return none;
        op = RAD_OP(b, "gemm_nt3",
                    RAD_PARAMS(RAD_RANGE("M", 1, g->max_tok), RAD_INT("N0", n_out[0]), RAD_INT("N1", n_out[1]),
                               RAD_INT("N2", n_out[2]), RAD_INT("K", n_in)),
                    RAD_WEIGHTS(w[0], w[1], w[2]));
    }
    if (op.id < 0 || !rad_op_resolved(b, op)) return none; /* unresolved: never issued, no access declared */
    rad_op_reads(b, op, RAD_BUFS(x), 1);
    rad_op_writes(b, op, y, (uint32_t)n);
    return op;
}

static inline rad_op rad_attn_rope(RadBuilder *b, const RadBlockGeom *g, uint32_t n_head, rad_buf x) {
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

/* Ops of one layer: the pre-norm (settling the previous block's pending output), q/k/v GEMMs,
 * rope on q and k, attn_paged over `kv` (the group the layer is bound to), the output GEMM into
 * r->y (+ all_reduce under TP), left pending in r. */
static inline int rad_attn_declare_ops(RadBuilder *b, const RadBlockGeom *g, rad_kv kv, RadResid *r,
                                       const RadAttnScratch *s, RadAttnBlock *a) {
    uint32_t qw = g->n_head * g->head_dim, kw = g->n_head_kv * g->head_dim;
    float scale = g->attn_scale > 0 ? g->attn_scale : rad_block_rsqrt(g->head_dim);
    a->s = *s;
    a->h = r->h;
    a->y = r->y;
    if (rad_prenorm_declare(b, g, r, a->w_norm, &a->pre) != 0) return -1;
    {
        const rad_weight w[3] = {a->w_q, a->w_k, a->w_v};
        const uint32_t n_out[3] = {qw, kw, kw};
        const rad_buf y[3] = {s->q, s->k, s->v};
        a->op_qkv = rad_block_gemm_multi(b, g, 3, w, n_out, g->n_embd, r->h, y);
    }
    a->op_q = a->op_k = a->op_v = a->op_qkv;
    if (a->op_qkv.id < 0) {
        a->op_q = rad_attn_gemm(b, g, a->w_q, qw, g->n_embd, r->h, s->q);
        a->op_k = rad_attn_gemm(b, g, a->w_k, kw, g->n_embd, r->h, s->k);
        a->op_v = rad_attn_gemm(b, g, a->w_v, kw, g->n_embd, r->h, s->v);
    }
    a->rope_has_freqs = g->rope_has_freqs;
    a->w_rope_freqs = g->rope_freqs;
    a->op_rope_q = rad_attn_rope(b, g, g->n_head, s->q);
    a->op_rope_k = rad_attn_rope(b, g, g->n_head_kv, s->k);
    a->op_attn = RAD_OP(b, "attn_paged",
                        RAD_PARAMS(RAD_RANGE_ROLE("M", 1, g->max_tok, RAD_PROLE_SEQ_CHUNK),
                                   RAD_INT("n_head", g->n_head), RAD_INT("n_head_kv", g->n_head_kv),
                                   RAD_INT("head_dim", g->head_dim), RAD_INT("kv", kv.id),
                                   RAD_INT("layer", a->layer), RAD_FLOAT("scale", scale),
                                   RAD_INT("prefill_fp8", g->prefill_fp8)),
                        RAD_NO_WEIGHTS);
    if (a->op_attn.id >= 0) {
        rad_op_reads(b, a->op_attn, RAD_BUFS(s->q, s->k, s->v), 3);
        rad_op_writes(b, a->op_attn, RAD_BUFS(s->o), 1);
    }
    a->op_o = rad_attn_gemm(b, g, a->w_o, g->n_embd, qw, s->o, r->y);
    if (rad_allreduce_declare(b, g, &a->ar, r->y, g->n_embd) != 0) return -1;
    r->pending = 1;
    if (a->op_q.id < 0 || a->op_k.id < 0 || a->op_v.id < 0 || a->op_rope_q.id < 0 ||
        a->op_rope_k.id < 0 || a->op_attn.id < 0 || a->op_o.id < 0)
        return -1;
    return 0;
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
    if (a->op_qkv.id >= 0) {
        if ((rc = RAD_ISSUE_N(c, a->op_qkv, n, RAD_W(a->w_q), RAD_W(a->w_k), RAD_W(a->w_v), brows(a->h, n),
                              brows(a->s.q, n), brows(a->s.k, n), brows(a->s.v, n))) != 0)
            return rc;
    } else {
        if ((rc = RAD_ISSUE_N(c, a->op_q, n, RAD_W(a->w_q), brows(a->h, n), brows(a->s.q, n))) != 0) return rc;
        if ((rc = RAD_ISSUE_N(c, a->op_k, n, RAD_W(a->w_k), brows(a->h, n), brows(a->s.k, n))) != 0) return rc;
        if ((rc = RAD_ISSUE_N(c, a->op_v, n, RAD_W(a->w_v), brows(a->h, n), brows(a->s.v, n))) != 0) return rc;
    }
    if (a->rope_has_freqs) {
        if ((rc = RAD_ISSUE_N(c, a->op_rope_q, n, RAD_W(a->w_rope_freqs), brows(a->s.q, n),
                              praw(batch->positions, RAD_I32, n))) != 0)
            return rc;
        if ((rc = RAD_ISSUE_N(c, a->op_rope_k, n, RAD_W(a->w_rope_freqs), brows(a->s.k, n),
                              praw(batch->positions, RAD_I32, n))) != 0)
            return rc;
    } else {
        if ((rc = RAD_ISSUE_N(c, a->op_rope_q, n, brows(a->s.q, n), praw(batch->positions, RAD_I32, n))) != 0) return rc;
        if ((rc = RAD_ISSUE_N(c, a->op_rope_k, n, brows(a->s.k, n), praw(batch->positions, RAD_I32, n))) != 0) return rc;
    }
    if ((rc = RAD_ISSUE_N(c, a->op_attn, n, brows(a->s.q, n), brows(a->s.k, n), brows(a->s.v, n),
                          brows(a->s.o, n))) != 0)
        return rc;
    if ((rc = RAD_ISSUE_N(c, a->op_o, n, RAD_W(a->w_o), brows(a->s.o, n), brows(a->y, n))) != 0) return rc;
    return rad_allreduce_step(c, &a->ar, a->y, n);
}

#endif
