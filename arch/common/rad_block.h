/* rad_block.h — what every block shares, header-only (static inline + plain structs): the
 * geometry read from metadata (RadBlockGeom), weight and buffer declarations, the GEMMs
 * (gemm_nt, and the fused gemm_nt2/gemm_nt3 when resolved), the residual stream (RadResid), the
 * pre-norm that settles a pending residual add (RadPreNorm) and the tensor-parallel all-reduce
 * (RadAllReduce). The blocks are rad_block_attn.h and rad_block_mlp.h; the pieces an attention
 * block is built from are rad_attn_parts.h.
 *
 * The residual add.  A block never adds its own output: its last GEMM writes y and leaves it
 * *pending*; the next pre-norm (the next block's, or the model's final norm) settles it, as the
 * fused add_rmsnorm (res += x; out = rmsnorm(res)) when a library declares that op and the
 * selector resolves it, else as the chain add + rmsnorm. The arithmetic is the textbook layer's;
 * only the place of the add moves, so the fusion is available at every norm after the first.
 * A model that reads the raw residual after its last block settles it with rad_resid_settle_*.
 *
 * Buffers.  All activations are f32, [max_tok, width], transient: every op declares its reads
 * and writes, so the liveness planner sees each write start a new live range.
 *
 * Issue operand order: the op's weights first (RAD_W, in RAD_WEIGHTS order), then its buffer
 * and raw operands in the vocabulary's order (RadKernelArgs: "weights first, then buffers"). */
#ifndef RAD_BLOCK_H
#define RAD_BLOCK_H

#include <arch/rad_arch.h>

/* A declare refusal: the formatted one-line message to rad_declare_fail; RAD_E_UNSUPPORTED. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static inline int rad_block_fail(RadBuilder *b, const char *fmt, ...) {
    char line[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    rad_declare_fail(b, line);
    return RAD_E_UNSUPPORTED;
}

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
    uint32_t attn_window;     /* attn_paged's sliding window (its KV group's); 0: full attention */
    /* deployment */
    uint32_t max_tok;         /* rows of every transient buffer; the ranged M's upper bound */
    uint32_t world_size;      /* > 1: q/k/v, gate/up SHARD_ROW; o, down SHARD_COL + all_reduce */
    uint32_t q_head0;         /* this rank's first query head (rad_tp_share) */
    uint32_t kv_head0;        /* this rank's first KV head */
    int kv_replicated;        /* another rank holds this rank's KV head too (fewer KV heads than ranks) */
    uint32_t ff0;             /* this rank's first MLP column */
    int tp_wire_lossy;        /* RadBuildCtx::tp_wire_lossy */
    uint64_t tp_wire_min_bytes;
    /* weight forms */
    RadDType linear_dtype;    /* projection weights (RAD_ANY: as stored) */
    RadDType norm_dtype;      /* norm gammas (RAD_F32: a bf16/f16 gamma widens exactly) */
    const char *mlp_act;      /* the gated MLP's activation op: NULL "silu_mul" (SwiGLU), "gelu_tanh_mul" (GeGLU) */
} RadBlockGeom;

/* 1/sqrt(n) without libm (a plugin links against nothing). */
static inline float rad_block_rsqrt(double n) {
    if (n <= 0) return 0.0f;
    double r = n > 1 ? n / 2 : 1.0;
    for (int i = 0; i < 64; i++) r = 0.5 * (r + n / r);
    return (float)(1.0 / r);
}

/* ---- tensor parallelism: what a rank owns ---------------------------------------------------
 * Heads go to ranks by KV head, so that each rank's query heads share its KV heads in the
 * attention's own grouping: with at least as many KV heads as ranks, a balanced split of the KV
 * heads (SmolLM2's 3 over 2 ranks: 2 and 1), each with its group of query heads; with fewer, each
 * rank holds one KV head (replicated on the ranks that share it) and a balanced part of its
 * group's query heads (Gemma 3 270M's 4 over 3 ranks: 2, 1, 1). The MLP splits in whole
 * 256-column units where the width allows (every GGUF block fits one), else 32, else 1. */
typedef struct RadTpShare {
    uint32_t q0, nq;          /* query heads [q0, q0 + nq) */
    uint32_t kv0, nkv;        /* KV heads [kv0, kv0 + nkv) */
    uint32_t ff0, nff;        /* MLP columns [ff0, ff0 + nff) */
    int kv_shared;            /* 1: another rank holds this rank's KV head too */
} RadTpShare;

static inline void rad_tp_balanced(uint32_t total, uint32_t r, uint32_t w, uint32_t *begin, uint32_t *len) {
    const uint32_t base = total / w, rem = total % w;
    *begin = r * base + (r < rem ? r : rem);
    *len = base + (r < rem ? 1 : 0);
}

/* Rank r of w's share; -1 with *dim naming what does not split (a rank would get nothing). */
static inline int rad_tp_share(uint32_t n_head, uint32_t n_kv, uint32_t n_ff, uint32_t r, uint32_t w, RadTpShare *s,
                               const char **dim) {
    memset(s, 0, sizeof *s);
    const uint32_t G = n_head / n_kv;
    if (w <= 1) {
        s->nq = n_head, s->nkv = n_kv, s->nff = n_ff;
        return 0;
    }
    if (n_kv >= w) {
        rad_tp_balanced(n_kv, r, w, &s->kv0, &s->nkv);
        s->q0 = s->kv0 * G, s->nq = s->nkv * G;
    } else {
        const uint32_t kv = r * n_kv / w;
        uint32_t lo = (kv * w + n_kv - 1) / n_kv, hi = ((kv + 1) * w + n_kv - 1) / n_kv; /* ranks [lo, hi) share kv */
        if (G < hi - lo) return *dim = "model.n_head", -1; /* fewer query heads in a group than ranks on it */
        uint32_t b, l;
        rad_tp_balanced(G, r - lo, hi - lo, &b, &l);
        s->kv0 = kv, s->nkv = 1, s->q0 = kv * G + b, s->nq = l, s->kv_shared = hi - lo > 1;
    }
    const uint32_t unit = n_ff % 256 == 0 && n_ff / 256 >= w ? 256 : n_ff % 32 == 0 && n_ff / 32 >= w ? 32 : 1;
    if (n_ff / unit < w) return *dim = "model.n_ff", -1;
    uint32_t b, l;
    rad_tp_balanced(n_ff / unit, r, w, &b, &l);
    s->ff0 = b * unit, s->nff = l * unit;
    return 0;
}

/* The declare's refusal of a deployment whose split leaves a rank nothing: one line naming the
 * plugin, the dimension and N. */
static inline int rad_tp_check(RadBuilder *b, const char *plugin, const RadModelMeta *m, const RadBuildCtx *ctx) {
    RadTpShare sh;
    const char *dim = "";
    if (ctx->world_size <= 1) return 0;
    if (m->n_vocab < (int32_t)ctx->world_size) /* the vocabulary-parallel embedding and head (rad_block_vocab.h) */
        return rad_block_fail(b, "%s: model.n_vocab (%d) does not split over --tp %u: a rank would get no row", plugin,
                              (int)m->n_vocab, ctx->world_size);
    if (rad_tp_share((uint32_t)m->n_head, (uint32_t)m->n_head_kv, (uint32_t)m->n_ff, ctx->rank, ctx->world_size, &sh, &dim) == 0)
        return 0;
    return rad_block_fail(b, "%s: %s (%d heads, %d KV heads, n_ff %d) does not split over --tp %u: a rank would get none",
                          plugin, dim, (int)m->n_head, (int)m->n_head_kv, (int)m->n_ff, ctx->world_size);
}

/* ---- weights ------------------------------------------------------------------------------- */

/* A projection [n_out, n_in] of this rank: under tensor parallelism, SHARD_ROW takes rows
 * [at, at + n_out) of the stored tensor, SHARD_COL columns [at, at + n_in). */
static inline rad_weight rad_block_linear(RadBuilder *b, const RadBlockGeom *g, const char *name, uint32_t layer,
                                          uint64_t n_out, uint64_t n_in, RadShard shard, uint64_t at) {
    RadWeightDecl d;
    uint64_t span[2] = {at, shard == RAD_SHARD_COL ? n_in : n_out};
    memset(&d, 0, sizeof d);
    d.dtype = g->linear_dtype;
    d.rank = 2;
    d.shape[0] = n_out; /* [N, K]: out_features, in_features (per rank) */
    d.shape[1] = n_in;
    d.access = RAD_ACCESS_PER_TOKEN;
    d.shard = g->world_size > 1 ? shard : RAD_SHARD_NONE;
    d.group = rad_group_layer(layer);
    if (d.shard != RAD_SHARD_NONE) d.n_shard_spans = 1, d.shard_spans = span;
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

/* ---- GEMMs ---------------------------------------------------------------------------------- */

/* y = x·W^T over [1, max_tok] rows. */
static inline rad_op rad_block_gemm(RadBuilder *b, const RadBlockGeom *g, rad_weight w, uint32_t n_out,
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

/* ---- the residual stream ------------------------------------------------------------------ */

/* The residual stream: x (the residual), h (a pre-norm's output, every block's input), y (a
 * block's output, pending until the next pre-norm adds it into x). [max_tok, n_embd] each. */
typedef struct RadResid {
    rad_buf x;                /* [max_tok, n_embd] the residual */
    rad_buf h;                /* [max_tok, n_embd] a pre-norm's output, every block's input */
    rad_buf y;                /* [max_tok, n_embd] a block's output, pending */
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
    int on;                   /* world_size > 1: issued after the block's last GEMM */
    rad_op exact, lossy;      /* lossy.id < 0: every message goes exact */
    uint32_t n;               /* row width */
    uint64_t min_bytes;       /* messages below this go exact (RadBuildCtx::tp_wire_min_bytes) */
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
    rad_weight gamma;         /* [n_embd] */
    rad_op norm;              /* rmsnorm, or add_rmsnorm when FUSED */
    rad_op add;               /* CHAIN's add */
    rad_buf x, h, y;          /* the residual stream's (RadResid) */
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

#endif
