/* rad_block_vocab.h — the vocabulary's two ends, the embedding and the head, header-only:
 *
 *     one rank:  x = embed_gather(table, ids);             logits = logits_gemm(head, h)
 *     N ranks:   x = all_reduce(embed_gather_part(table_r, ids))
 *                logits = all_gather(logits_gemm(head_r, h))
 *
 * Under tensor parallelism both tables are vocabulary-parallel: rank r holds rows
 * [v0, v0 + nv) of each (a balanced split of n_vocab, SHARD_ROW with that span), so a tied head
 * is one slice shared by both ops. The embedding's part gives a token's row on the one rank that
 * holds it and zeros elsewhere, and the all-reduce adds them (x + 0 is x: the whole table's bits);
 * the head's part is the rank's columns of the logits, and the all-gather puts every rank's
 * columns into the [out_rows, n_vocab] logits each rank holds (rank 0's are read). The
 * replicated head was what cost TP most on a CPU (docs/BENCHMARKS.md): each rank now reads 1/N.
 *
 * Declare order: rad_vocab_init at the geometry, rad_vocab_decl for the tables' weights,
 * rad_vocab_embed_declare and rad_vocab_head_declare with the ops (the head declares its own
 * part buffer). Step: rad_vocab_embed_step, rad_vocab_head_step. */
#ifndef RAD_BLOCK_VOCAB_H
#define RAD_BLOCK_VOCAB_H

#include "rad_block.h"

typedef struct RadVocab {
    uint32_t n_vocab;         /* the whole vocabulary */
    uint32_t v0, nv;          /* this rank's rows [v0, v0 + nv) of the embedding and the head */
    int parallel;             /* world_size > 1: both tables sliced by vocabulary */
} RadVocab;

/* -1 when a rank would hold no row (rad_tp_check refused it first, naming model.n_vocab). */
static inline int rad_vocab_init(RadVocab *v, uint32_t n_vocab, uint32_t rank, uint32_t world) {
    memset(v, 0, sizeof *v);
    v->n_vocab = n_vocab;
    if (world <= 1) return v->nv = n_vocab, 0;
    if (n_vocab < world || rank >= world) return -1;
    v->parallel = 1;
    rad_tp_balanced(n_vocab, rank, world, &v->v0, &v->nv);
    return 0;
}

/* A table [nv, n_embd] of this rank's rows (read every token, one of them as a gather: VOCAB).
 * `span` is the caller's two slots the declaration points at until rad_decl_weight returns. */
static inline RadWeightDecl rad_vocab_decl(const RadVocab *v, uint64_t n_embd, int optional, uint64_t span[2]) {
    RadWeightDecl d;
    memset(&d, 0, sizeof d);
    d.dtype = RAD_ANY;
    d.rank = 2;
    d.shape[0] = v->nv;
    d.shape[1] = n_embd;
    d.access = RAD_ACCESS_VOCAB;
    d.shard = v->parallel ? RAD_SHARD_ROW : RAD_SHARD_NONE;
    d.optional = optional;
    if (v->parallel) span[0] = v->v0, span[1] = v->nv, d.n_shard_spans = 1, d.shard_spans = span;
    return d;
}

/* ---- the embedding ------------------------------------------------------------------------- */

typedef struct RadVocabEmbed {
    rad_op gather;            /* embed_gather, or embed_gather_part of this rank's rows */
    RadAllReduce ar;          /* parallel: the ranks' rows (one non-zero each) summed into x */
} RadVocabEmbed;

static inline int rad_vocab_embed_declare(RadBuilder *b, const RadBlockGeom *g, const RadVocab *v, rad_weight table,
                                          rad_buf x, RadVocabEmbed *e) {
    memset(e, 0, sizeof *e);
    if (!v->parallel)
        e->gather = RAD_OP(b, "embed_gather",
                           RAD_PARAMS(RAD_RANGE("M", 1, g->max_tok), RAD_INT("N", g->n_embd), RAD_INT("V", v->n_vocab)),
                           RAD_WEIGHTS(table));
    else
        e->gather = RAD_OP(b, "embed_gather_part",
                           RAD_PARAMS(RAD_RANGE("M", 1, g->max_tok), RAD_INT("N", g->n_embd), RAD_INT("V", v->nv),
                                      RAD_INT("row0", v->v0), RAD_INT("n_vocab", v->n_vocab)),
                           RAD_WEIGHTS(table));
    if (e->gather.id < 0) return -1;
    rad_op_writes(b, e->gather, RAD_BUFS(x), 1);
    return rad_allreduce_declare(b, g, &e->ar, x, g->n_embd); /* off at one rank */
}

static inline int rad_vocab_embed_step(RadCtx *c, const RadVocabEmbed *e, rad_weight table, const int32_t *ids, rad_buf x,
                                       uint64_t n) {
    int rc = RAD_ISSUE_N(c, e->gather, n, RAD_W(table), praw(ids, RAD_I32, n), brows(x, n));
    return rc ? rc : rad_allreduce_step(c, &e->ar, x, n);
}

/* ---- the head ------------------------------------------------------------------------------ */

typedef struct RadVocabHead {
    rad_op gemm;              /* logits_gemm over this rank's rows of the head */
    rad_op gather;            /* parallel: all_gather of the ranks' columns into the logits */
    rad_buf part;             /* parallel: [out_rows, nv] this rank's columns of the logits */
} RadVocabHead;

/* logits [out_rows, n_vocab] = x [out_rows, n_embd] · headᵀ; rad_declare_logits stays the caller's. */
static inline int rad_vocab_head_declare(RadBuilder *b, const RadBlockGeom *g, const RadVocab *v, const char *prefix,
                                         uint32_t out_rows, rad_weight head, rad_buf x, rad_buf logits, RadVocabHead *h) {
    memset(h, 0, sizeof *h);
    h->gather.id = -1;
    h->part = v->parallel ? rad_block_buf(b, prefix, "logits.part", out_rows, v->nv) : logits;
    if (h->part.id < 0) return -1;
    h->gemm = RAD_OP(b, "logits_gemm",
                     RAD_PARAMS(RAD_RANGE("M", 1, out_rows), RAD_INT("N", v->nv), RAD_INT("K", g->n_embd)),
                     RAD_WEIGHTS(head));
    if (h->gemm.id < 0) return -1;
    rad_op_reads(b, h->gemm, RAD_BUFS(x), 1);
    rad_op_writes(b, h->gemm, RAD_BUFS(h->part), 1);
    if (!v->parallel) return 0;
    h->gather = RAD_OP(b, "all_gather",
                       RAD_PARAMS(RAD_RANGE("M", 1, out_rows), RAD_INT("N", v->nv), RAD_INT("col0", v->v0),
                                  RAD_INT("W", v->n_vocab)),
                       RAD_NO_WEIGHTS);
    if (h->gather.id < 0) return -1;
    rad_op_reads(b, h->gather, RAD_BUFS(h->part), 1);
    rad_op_writes(b, h->gather, RAD_BUFS(logits), 1);
    return 0;
}

static inline int rad_vocab_head_step(RadCtx *c, const RadVocabHead *h, rad_weight head, rad_buf x, rad_buf logits,
                                      uint64_t k) {
    int rc = RAD_ISSUE_N(c, h->gemm, k, RAD_W(head), brows(x, k), brows(h->part, k));
    if (rc || h->gather.id < 0) return rc;
    return RAD_ISSUE_N(c, h->gather, k, brows(h->part, k), brows(logits, k));
}

#endif
