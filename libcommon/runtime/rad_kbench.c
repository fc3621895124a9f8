/* The kernel checker: cases built per op from docs/OPS.md's operand lists, every candidate run on
 * identical inputs, compared with rad_kbench_ref.c. See rad_kbench.h. */
#include "libcommon/runtime/rad_kbench.h"

#include <fnmatch.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "libcommon/format/rad_container.h"
#include "libcommon/format/rad_model.h"
#include "libcommon/runtime/rad_kbench_ref.h"
#include "libcommon/runtime/rad_sampler.h"
#include "libcommon/tensor/rad_enc.h"
#include "libcommon/tensor/rad_encode.h"

#define MAX_ARGS 16
#define MAX_BUFS 8
#define MAX_PARAMS 32
#define MAX_SEQ 64

/* ---- inputs with realistic statistics --------------------------------------------------------- */

typedef struct Rng {
    uint64_t s;
} Rng;

static uint64_t rng_u64(Rng *r) { /* xorshift64* */
    r->s ^= r->s >> 12, r->s ^= r->s << 25, r->s ^= r->s >> 27;
    return r->s * 2685821657736338717ull;
}
static double rng_unit(Rng *r) { return (double)(rng_u64(r) >> 11) * (1.0 / 9007199254740992.0); }
static float rng_normal(Rng *r) { /* Box-Muller */
    double u = rng_unit(r), v = rng_unit(r);
    return (float)(sqrt(-2.0 * log(u + 1e-300)) * cos(2.0 * M_PI * v));
}

/* Rows of normal values (sigma), each with a few outliers of 4 to 8 sigma times `out`: what
 * hidden states and attention inputs look like (a handful of channels far above the rest). */
static void fill_act(float *x, uint64_t rows, uint64_t cols, float sigma, float out, Rng *r) {
    for (uint64_t i = 0; i < rows; i++) {
        float *row = x + i * cols;
        for (uint64_t j = 0; j < cols; j++) row[j] = sigma * rng_normal(r);
        uint64_t n_out = cols >= 64 ? 2 + rng_u64(r) % 3 : 0;
        for (uint64_t k = 0; k < n_out; k++) {
            float m = sigma * out * (float)(4.0 + 4.0 * rng_unit(r));
            row[rng_u64(r) % cols] = rng_u64(r) & 1 ? m : -m;
        }
    }
}

static void fill_nan(float *x, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) x[i] = NAN;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* all_gather's operand on every rank: a value of (row, global column) alone, so each rank fills its
 * own columns and the whole row is known without the others (exact in f32). */
static float gather_value(uint64_t row, uint64_t col) { return (float)((row * 7919u + col * 104729u) % 2001u) / 500.0f - 2.0f; }

/* ---- the ops this checker has a reference for ------------------------------------------------ */

typedef enum OpKind {
    OP_NONE, OP_EMBED, OP_RMSNORM, OP_ADD_RMSNORM, OP_GEMM, OP_GEMM_MULTI, OP_ROPE, OP_ATTN, OP_SILU, OP_ADD,
    OP_ALLREDUCE, OP_ALLGATHER, OP_EMBED_PART, OP_LGATHER, OP_ADD_BIAS, OP_GELU, OP_HEAD_NORM, OP_SCALE,
    OP_LAYERNORM, OP_GELU_ERF, OP_ATTN_SEQ, OP_POOL, OP_L2NORM, /* the encoder ops */
    OP_ARGMAX                                                   /* the core's, over the logits */
} OpKind;

static OpKind op_kind(const char *op) {
    static const struct { const char *name; OpKind k; } t[] = {
        {"embed_gather", OP_EMBED}, {"rmsnorm", OP_RMSNORM},     {"add_rmsnorm", OP_ADD_RMSNORM},
        {"gemm_nt", OP_GEMM},       {"logits_gemm", OP_GEMM},    {"gemm_nt2", OP_GEMM_MULTI},
        {"gemm_nt3", OP_GEMM_MULTI}, {"rope", OP_ROPE},          {"attn_paged", OP_ATTN},
        {"silu_mul", OP_SILU},      {"add", OP_ADD},             {"all_reduce", OP_ALLREDUCE},
        {"all_gather", OP_ALLGATHER}, {"embed_gather_part", OP_EMBED_PART},
        {"logits_gather", OP_LGATHER}, {"add_bias", OP_ADD_BIAS}, {"gelu_tanh_mul", OP_GELU},
        {"head_rmsnorm", OP_HEAD_NORM}, {"scale", OP_SCALE},
        {"layernorm", OP_LAYERNORM}, {"gelu", OP_GELU_ERF}, {"attn_seq", OP_ATTN_SEQ}, {"pool", OP_POOL},
        {"l2_normalize", OP_L2NORM}, {"argmax", OP_ARGMAX},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strcmp(op, t[i].name) == 0) return t[i].k;
    return OP_NONE;
}

/* ---- weights: the engine's bound bytes for kernels, the container's stored bytes for the rest -- */

typedef struct Weight {
    int id;                        /* graph weight */
    const RadKArg *bound;          /* what the engine gives kernels (packed or stored) */
    RadKArg stored;                /* the stored layout, from the container */
    void *own;                     /* stored bytes loaded here (a compressed plane), or NULL */
    float *deq;                    /* [rows * cols] rad_dequant of the stored bytes (NULL: not asked) */
    /* a device library's copies of bound (0) and stored (1), made when its kernel first runs */
    void *dev[2];
    void *dev_scale;               /* a block-scaled f8 weight's scale plane there */
    const RadKernelLib *dev_lib;
    void *dev_state;
} Weight;

typedef struct Kb {
    RadEngine *en;
    const RadGraph *g;
    const RadKbenchOpts *o;
    RadKbenchReport *r;
    RadModelFile m;                /* the container again: stored bytes the engine may have packed or released */
    uint32_t nt;                   /* reference threads */
    uint32_t kernel_threads;       /* what the engine gives kernels */
    uint64_t done, total;
    Rng rng;
    uint32_t world;                /* --tp: ranks (a collective runs on every one of them) */
} Kb;

/* A block-scaled f8_e4m3 weight (codes, scale): both planes, read whole (never sliced: the engine
 * refuses --tp for them), the scale where kernels find it (planes[1]). */
static int weight_load_f8(Kb *c, const RadTensor *t, Weight *w, int dequant, RadErr *e) {
    const void *pl[2];
    size_t at[2] = {0, 0}, total = 0;
    for (int k = 0; k < 2; k++)
        if (!t->planes[k].data || t->planes[k].compression) at[k] = total, total += (t->planes[k].nbytes + 63) & ~(size_t)63;
    if (total && !(w->own = malloc(total))) return rad_err_set(e, RAD_E_NOMEM, "out of memory");
    for (int k = 0; k < 2; k++) {
        pl[k] = t->planes[k].data;
        if (pl[k] && !t->planes[k].compression) continue;
        int rc = rad_plane_load(&c->m, t, (uint32_t)k, (uint8_t *)w->own + at[k], 0, e);
        if (rc) return rc;
        pl[k] = (uint8_t *)w->own + at[k];
    }
    w->stored = *w->bound;
    w->stored.dtype = RAD_F8_E4M3;
    w->stored.data = (void *)pl[0];
    memset(w->stored.planes, 0, sizeof w->stored.planes);
    w->stored.planes[0] = pl[0], w->stored.planes[1] = pl[1];
    if (!dequant) return RAD_OK;
    const uint64_t n = w->stored.rows * w->stored.cols;
    if (!(w->deq = malloc((size_t)(n ? n : 1) * sizeof *w->deq))) return rad_err_set(e, RAD_E_NOMEM, "out of memory");
    rad_dequant_f8_blocks(pl[0], pl[1], w->stored.cols, 0, w->stored.rows, w->deq);
    return RAD_OK;
}

static int weight_load(Kb *c, int id, int dequant, Weight *w, RadErr *e) {
    memset(w, 0, sizeof *w);
    w->id = id;
    const RadGWeight *gw = &c->g->w[id];
    const char *name = gw->d.source ? gw->d.source : gw->name;
    const RadTensor *t = rad_model_find(&c->m, name);
    w->bound = rad_engine_weight(c->en, id);
    if (!t && w->bound && w->bound->dtype == RAD_F32) { /* served from outside the container (a control vector's row) */
        w->stored = *w->bound;
        if (!dequant) return RAD_OK;
        const uint64_t n = w->stored.rows * w->stored.cols;
        if (!(w->deq = malloc((size_t)(n ? n : 1) * sizeof *w->deq))) return rad_err_set(e, RAD_E_NOMEM, "out of memory");
        memcpy(w->deq, w->stored.data, (size_t)n * sizeof *w->deq);
        return RAD_OK;
    }
    if (!t || !w->bound) return rad_err_set(e, RAD_E_NOTFOUND, "%s: tensor '%s': not in the container", c->o->model, name);
    const int f8b = rad_tensor_is_f8_blocks(t);
    if (t->n_planes != 1 && !f8b)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: tensor '%s': %u planes of %s (the checker decodes one, or block-scaled "
                           "f8_e4m3's two)", c->o->model, name, t->n_planes, rad_enc_info(t->enc)->name);
    if (f8b) return weight_load_f8(c, t, w, dequant, e);
    const void *data = t->planes[0].data;
    uint64_t nbytes = t->planes[0].nbytes;
    void *cut = NULL; /* --tp: this rank's rows or columns of it */
    int rc0 = rad_engine_weight_slice(c->en, &c->m, id, &cut, &nbytes, e);
    if (rc0) return rc0;
    if (cut) data = w->own = cut;
    else nbytes = t->planes[0].nbytes;
    if (!cut && (!data || t->planes[0].compression)) {
        if (!(w->own = malloc(t->planes[0].nbytes ? t->planes[0].nbytes : 1))) return rad_err_set(e, RAD_E_NOMEM, "out of memory");
        int rc = rad_plane_load(&c->m, t, 0, w->own, 0, e);
        if (rc) return rc;
        data = w->own;
    }
    w->stored = *w->bound;
    w->stored.dtype = (RadDType)t->enc;
    w->stored.data = (void *)data;
    memset(w->stored.planes, 0, sizeof w->stored.planes);
    w->stored.planes[0] = data;
    if (!dequant) return RAD_OK;
    const uint64_t n = w->stored.rows * w->stored.cols;
    if (!(w->deq = malloc((size_t)(n ? n : 1) * sizeof *w->deq))) return rad_err_set(e, RAD_E_NOMEM, "out of memory");
    return rad_dequant(t->enc, data, nbytes, w->deq, n, e);
}

static void weight_free(Weight *w) {
    for (int i = 0; i < 2; i++)
        if (w->dev[i]) w->dev_lib->free(w->dev_state, w->dev[i]);
    if (w->dev_scale) w->dev_lib->free(w->dev_state, w->dev_scale);
    free(w->own);
    free(w->deq);
    memset(w, 0, sizeof *w);
}

static int k_packs(const RadKernel *k, RadEnc enc) {
    return k->struct_size >= offsetof(RadKernel, packed_encs) + sizeof k->packed_encs && (k->packed_encs & RAD_ENC_BIT(enc));
}

/* The weight as kernel k must see it: the engine's packed bytes only for a kernel that reads the
 * packed layout; the stored bytes otherwise (a candidate the engine did not pick for the weight). */
static const RadKArg *weight_for(const Weight *w, const RadKernel *k) {
    if (!(w->bound->dtype & RAD_PACKED)) return w->bound;
    return k_packs(k, (RadEnc)(w->bound->dtype & ~RAD_PACKED)) ? w->bound : &w->stored;
}

/* One dequantised row of a stored weight (an embedding row). */
static int weight_row(const Weight *w, uint64_t r, float *dst, RadErr *e) {
    if (w->stored.dtype == RAD_F8_E4M3 && w->stored.planes[1]) {
        rad_dequant_f8_blocks(w->stored.data, w->stored.planes[1], w->stored.cols, r, 1, dst);
        return RAD_OK;
    }
    const RadEncInfo *ei = rad_enc_info((RadEnc)w->stored.dtype);
    const uint8_t *p = (const uint8_t *)w->stored.data + r * w->stored.row_stride;
    return rad_dequant((RadEnc)w->stored.dtype, p, w->stored.cols / ei->block_elems * ei->block_bytes, dst, w->stored.cols, e);
}

/* ---- one case: operands, the reference, what the kernels write ----------------------------------- */

/* The per-output bound classes of docs/OPS.md's GEMMs (gemm_nt): q8 activations, bf16 products,
 * fp8 activations; a kernel stating RAD_EXACT_Q8ACT, BF16ACT or F8ACT is checked output by output
 * against its class's bound. */
enum { BND_Q8, BND_BF16, BND_F8, N_BND };
/* Each class's bound (rad_kbench_ref.h), in the enum's order. */
static void (*const BOUND_OF[N_BND])(const float *, const float *, float *, uint64_t, uint64_t, uint64_t, uint32_t) = {
    rad_kbench_ref_q8_bound, rad_kbench_ref_bf16_bound, rad_kbench_ref_f8_bound};
static int bound_class(RadExactness x) {
    return x == RAD_EXACT_Q8ACT ? BND_Q8 : x == RAD_EXACT_BF16ACT ? BND_BF16 : x == RAD_EXACT_F8ACT ? BND_F8 : -1;
}

typedef struct Buf {
    float *init;                   /* contents before the call (NULL: an output, filled with NaN) */
    float *ref;                    /* the reference after the call (NULL: not compared) */
    float *chain;                  /* the chain's result (fused ops; NULL: none) */
    float *work;                   /* what a kernel runs on */
    float *bnd[N_BND];             /* a GEMM output's per-output bound of each class (docs/OPS.md), made when first needed */
    int q8_w;                      /* the weight (Case.w index) this GEMM output is of; -1: not a GEMM output */
    uint64_t rows, cols;
} Buf;

typedef struct Opnd {
    int kind;                      /* 0 weight (index into Case.w), 1 buffer, 2 raw i32 */
    int idx;
} Opnd;

typedef struct Case {
    int64_t n;
    const char *shape;
    int q8_x;                      /* GEMMs: the buffer of x (the q8 bound reads it); -1: none */
    uint32_t ctx;                  /* attention: the longest context after the step (attn_seq: the longest sequence) */
    uint32_t prior;                /* attention: the context before the step (the longest) */
    Opnd op[MAX_ARGS];
    int n_op;
    Buf buf[MAX_BUFS];
    int n_buf;
    int32_t *raw[2];
    uint64_t raw_n[2];
    int n_raw;
    RadParam params[MAX_PARAMS];
    uint32_t n_params;
    /* the step, for every op (attention reads it) */
    RadBatch batch;
    int32_t cu[MAX_SEQ + 1], ql[MAX_SEQ], cl[MAX_SEQ], sid[MAX_SEQ];
    int32_t *tok, *pos;
    /* attention: a paged pool and its block table */
    RadKvState kv;
    uint8_t *pool_init, *pool;
    size_t pool_bytes;
    int32_t *table;
    float *seqK[MAX_SEQ], *seqV[MAX_SEQ]; /* the reference's dense view after the append */
    uint64_t kv_read_bytes;
    uint64_t pairs;                /* attn_seq: the (row, key) pairs its mask keeps */
} Case;

static void case_free(Case *cs) {
    for (int i = 0; i < cs->n_buf; i++) {
        free(cs->buf[i].init), free(cs->buf[i].ref), free(cs->buf[i].chain), free(cs->buf[i].work);
        for (int j = 0; j < N_BND; j++) free(cs->buf[i].bnd[j]);
    }
    for (int i = 0; i < cs->n_raw; i++) free(cs->raw[i]);
    free(cs->tok), free(cs->pos), free(cs->pool_init), free(cs->pool), free(cs->table);
    for (int s = 0; s < MAX_SEQ; s++) free(cs->seqK[s]), free(cs->seqV[s]);
    memset(cs, 0, sizeof *cs);
}

/* A buffer operand of rows x cols; init filled by the caller when `input`. NULL out of memory. */
static Buf *add_buf(Case *cs, uint64_t rows, uint64_t cols, int input, int compared) {
    if (cs->n_buf >= MAX_BUFS || cs->n_op >= MAX_ARGS) return NULL;
    Buf *b = &cs->buf[cs->n_buf];
    const size_t n = (size_t)(rows * cols > 0 ? rows * cols : 1);
    b->rows = rows, b->cols = cols, b->q8_w = -1;
    b->work = malloc(n * sizeof(float));
    if (input) b->init = malloc(n * sizeof(float));
    if (compared) b->ref = malloc(n * sizeof(float));
    if (!b->work || (input && !b->init) || (compared && !b->ref)) return NULL;
    cs->op[cs->n_op++] = (Opnd){1, cs->n_buf++};
    return b;
}

static int32_t *add_raw(Case *cs, uint64_t n) {
    if (cs->n_raw >= 2 || cs->n_op >= MAX_ARGS) return NULL;
    int32_t *p = malloc((size_t)(n ? n : 1) * sizeof *p);
    if (!p) return NULL;
    cs->raw[cs->n_raw] = p, cs->raw_n[cs->n_raw] = n;
    cs->op[cs->n_op++] = (Opnd){2, cs->n_raw++};
    return p;
}

/* A one-sequence prefill of n tokens (what every op but attention reads of the step, if anything). */
static int plain_batch(Case *cs, const int32_t *ids, const int32_t *pos) {
    const uint32_t n = (uint32_t)cs->n;
    cs->tok = malloc(n * sizeof *cs->tok), cs->pos = malloc(n * sizeof *cs->pos);
    if (!cs->tok || !cs->pos) return RAD_E_NOMEM;
    for (uint32_t i = 0; i < n; i++) cs->tok[i] = ids ? ids[i] : 0, cs->pos[i] = pos ? pos[i] : (int32_t)i;
    cs->cu[0] = 0, cs->cu[1] = (int32_t)n, cs->ql[0] = (int32_t)n, cs->cl[0] = (int32_t)n, cs->sid[0] = 0;
    cs->batch = (RadBatch){.struct_size = sizeof cs->batch, .phase = n == 1 ? RAD_PHASE_DECODE : RAD_PHASE_PREFILL,
                           .n_tok = n, .n_seq = 1, .n_seq_decode = n == 1, .token_ids = cs->tok, .positions = cs->pos,
                           .cu_seqlens = cs->cu, .seq_ids = cs->sid, .q_lens = cs->ql, .ctx_lens = cs->cl,
                           .max_q_len = n, .max_ctx_len = n};
    return RAD_OK;
}

/* The ops that read the step's sequences without a KV cache (attn_seq, pool) run at n rows as one
 * sequence ("seq") and, when the step may hold several, as a few of uneven lengths ("seqs"). */
static uint32_t seq_max(const RadGraph *g, int64_t n) {
    uint32_t m = g->ctx->max_seqs ? g->ctx->max_seqs : MAX_SEQ;
    if (m > 4) m = 4;
    return (int64_t)m > n ? (uint32_t)n : m;
}

/* The step over the case's n rows: case 0 one sequence, case 1 seq_max of them with lengths in
 * proportion 1 : 3 : 7 : 5 (at least one row each, the last the remainder: uneven, the first a
 * single row at small sizes), positions from 0 in each. */
static int seq_batch(Case *cs, const RadGraph *g, int which) {
    const uint32_t n = (uint32_t)cs->n;
    uint32_t ns = which ? seq_max(g, cs->n) : 1;
    static const uint32_t wt[4] = {1, 3, 7, 5};
    uint32_t W = 0, used = 0;
    for (uint32_t s = 0; s < ns; s++) W += wt[s];
    cs->cu[0] = 0;
    for (uint32_t s = 0; s + 1 < ns; s++) {
        uint32_t len = (uint32_t)((uint64_t)n * wt[s] / W);
        if (len < 1) len = 1;
        if (used + len > n - (ns - 1 - s)) len = n - (ns - 1 - s) - used; /* leave a row for each one after */
        used += len;
        cs->cu[s + 1] = (int32_t)used;
    }
    cs->cu[ns] = (int32_t)n;
    cs->tok = calloc(n, sizeof *cs->tok), cs->pos = malloc(n * sizeof *cs->pos);
    if (!cs->tok || !cs->pos) return RAD_E_NOMEM;
    uint32_t longest = 0;
    for (uint32_t s = 0; s < ns; s++) {
        const uint32_t len = (uint32_t)(cs->cu[s + 1] - cs->cu[s]);
        cs->ql[s] = cs->cl[s] = (int32_t)len, cs->sid[s] = (int32_t)s;
        for (uint32_t r = 0; r < len; r++) cs->pos[(uint32_t)cs->cu[s] + r] = (int32_t)r;
        if (len > longest) longest = len;
    }
    cs->ctx = longest;
    cs->shape = ns > 1 ? "seqs" : "seq";
    cs->batch = (RadBatch){.struct_size = sizeof cs->batch, .phase = RAD_PHASE_PREFILL, .n_tok = n, .n_seq = ns,
                           .token_ids = cs->tok, .positions = cs->pos, .cu_seqlens = cs->cu, .seq_ids = cs->sid,
                           .q_lens = cs->ql, .ctx_lens = cs->cl, .max_q_len = longest, .max_ctx_len = longest};
    return RAD_OK;
}

/* ---- the cases of an op at n rows ---------------------------------------------------------------- */

/* Attention's shapes at n rows: decode (n sequences of one row, when the step may hold them), mixed
 * (a few decode rows and one prefill chunk) and prefill (one chunk), each at the context lengths
 * asked. Writes up to max specs; returns how many. */
typedef struct AttnSpec {
    const char *shape;
    uint32_t n_seq, n_dec;
    uint32_t q[MAX_SEQ], ctx[MAX_SEQ];
} AttnSpec;

static int attn_specs(int64_t n, uint32_t max_seqs, uint32_t max_ctx, int quick, AttnSpec *out, int max) {
    static const uint32_t all[] = {1, 17, 300}; /* one token; past a block boundary; many blocks */
    const uint32_t *ctxs = quick ? all + 1 : all;
    const int n_ctx = quick ? 2 : 3;
    int k = 0;
    for (int shape = 0; shape < 3; shape++) {
        uint32_t n_dec, n_pre; /* decode rows, prefill rows (one chunk) */
        if (shape == 0) {
            if (n > max_seqs || n > MAX_SEQ || (quick && n > 1)) continue;
            n_dec = (uint32_t)n, n_pre = 0;
        } else if (shape == 1) {
            if (n < 2 || max_seqs < 2) continue;
            n_dec = (uint32_t)(n - 1 < max_seqs - 1 ? n - 1 : max_seqs - 1);
            if (n_dec > 3) n_dec = 3;
            n_pre = (uint32_t)n - n_dec;
        } else {
            if (n < 2) continue;
            n_dec = 0, n_pre = (uint32_t)n;
        }
        uint32_t last_top = 0;
        for (int ci = 0; ci < n_ctx && k < max; ci++) {
            AttnSpec s = {.shape = shape == 0 ? "decode" : shape == 1 ? "mixed" : "prefill", .n_dec = n_dec};
            uint32_t top = 0;
            for (uint32_t d = 0; d < n_dec; d++) { /* decode rows at a spread of lengths */
                uint32_t c = ctxs[ci] > 3 * d ? ctxs[ci] - 3 * d : 1;
                if (c > max_ctx) c = max_ctx;
                s.q[s.n_seq] = 1, s.ctx[s.n_seq++] = c;
                if (c > top) top = c;
            }
            if (n_pre) {
                uint32_t c = ctxs[ci] > n_pre ? ctxs[ci] : n_pre;
                if (c > max_ctx) c = max_ctx;
                if (c < n_pre) continue; /* the chunk does not fit the context */
                s.q[s.n_seq] = n_pre, s.ctx[s.n_seq++] = c;
                if (c > top) top = c;
            }
            if (top == last_top) continue; /* clipped to the same case */
            last_top = top;
            out[k++] = s;
        }
    }
    return k;
}

static int n_cases(const RadGOp *op, OpKind kind, int64_t n, const RadGraph *g, int quick) {
    if (kind == OP_ATTN_SEQ || kind == OP_POOL) return seq_max(g, n) >= 2 ? 2 : 1;
    if (kind != OP_ATTN) return 1;
    (void)op;
    AttnSpec s[9];
    return attn_specs(n, g->ctx->max_seqs, g->ctx->max_ctx, quick, s, 9);
}

static void set_params(Case *cs, const RadGOp *op) {
    cs->n_params = op->n_params < MAX_PARAMS ? op->n_params : MAX_PARAMS;
    memcpy(cs->params, op->params, cs->n_params * sizeof *cs->params);
    for (uint32_t i = 0; i < cs->n_params; i++)
        if (cs->params[i].kind == RAD_PARAM_RANGE) cs->params[i].lo = cs->params[i].hi = cs->n;
}

/* The attention case `which` at n rows: q, k, v, out; a pool holding each sequence's earlier
 * tokens (normal values rounded to the cache type) in shuffled blocks; the dense reference view. */
static int build_attn(Kb *c, const RadGOp *op, Case *cs, int which, RadErr *e) {
    int64_t n_head, n_kv, hd, layer;
    double scale;
    if (!rad_graph_op_int(op, "n_head", &n_head) || !rad_graph_op_int(op, "n_head_kv", &n_kv) || !rad_graph_op_int(op, "head_dim", &hd) ||
        !rad_graph_op_int(op, "layer", &layer) || !rad_graph_op_f64(op, "scale", &scale) || n_head < 1 || n_kv < 1 || hd < 1 || n_head % n_kv)
        return rad_err_set(e, RAD_E_SHAPE, "op '%s': attention parameters missing or inconsistent", op->op);
    if (layer < 0 || layer >= c->g->n_layer_kv || c->g->layer_kv[layer] < 0)
        return rad_err_set(e, RAD_E_SHAPE, "op '%s': layer %" PRId64 " is bound to no KV group", op->op, layer);
    const RadGKv *grp = &c->g->kvs[c->g->layer_kv[layer]];
    AttnSpec specs[9];
    attn_specs(cs->n, c->g->ctx->max_seqs, c->g->ctx->max_ctx, c->o->quick, specs, 9);
    const AttnSpec *sp = &specs[which];
    const RadDType dt = grp->d.dtype;
    const RadEncInfo *ei = rad_enc_info((RadEnc)dt);
    if (!ei || (dt != RAD_F32 && dt != RAD_F16 && dt != RAD_BF16))
        return rad_err_set(e, RAD_E_UNSUPPORTED, "op '%s': KV type %s has no reference here", op->op, ei ? ei->name : "?");
    const uint32_t B = grp->block_size, esz = ei->block_bytes, gw = (uint32_t)(n_kv * hd);
    const uint64_t M = (uint64_t)cs->n, bb = 2ull * (uint64_t)n_kv * B * (uint64_t)hd * esz;
    cs->shape = sp->shape;
    Buf *q = add_buf(cs, M, (uint64_t)(n_head * hd), 1, 0), *k = add_buf(cs, M, gw, 1, 0), *v = add_buf(cs, M, gw, 1, 0),
        *out = add_buf(cs, M, (uint64_t)(n_head * hd), 0, 1);
    if (!q || !k || !v || !out) return rad_err_set(e, RAD_E_NOMEM, "out of memory");
    fill_act(q->init, M, q->cols, 1.0f, 1.0f, &c->rng);
    fill_act(k->init, M, gw, 1.0f, 1.0f, &c->rng);
    fill_act(v->init, M, gw, 1.0f, 1.0f, &c->rng);
    /* the step */
    uint32_t max_blocks = 0, n_blocks = 0, row = 0;
    cs->cu[0] = 0;
    for (uint32_t s = 0; s < sp->n_seq; s++) {
        cs->ql[s] = (int32_t)sp->q[s], cs->cl[s] = (int32_t)sp->ctx[s], cs->sid[s] = (int32_t)s;
        row += sp->q[s];
        cs->cu[s + 1] = (int32_t)row;
        uint32_t nb = (sp->ctx[s] + B - 1) / B;
        if (nb > max_blocks) max_blocks = nb;
        n_blocks += nb;
        if (sp->ctx[s] > cs->ctx) cs->ctx = sp->ctx[s], cs->prior = sp->ctx[s] - sp->q[s];
    }
    n_blocks += 3; /* a few the step does not touch */
    cs->pool_bytes = (size_t)(n_blocks * bb);
    cs->pool_init = malloc(cs->pool_bytes), cs->pool = malloc(cs->pool_bytes);
    cs->table = malloc((size_t)sp->n_seq * max_blocks * sizeof *cs->table);
    cs->tok = calloc(M, sizeof *cs->tok), cs->pos = malloc(M * sizeof *cs->pos);
    if (!cs->pool_init || !cs->pool || !cs->table || !cs->tok || !cs->pos) return rad_err_set(e, RAD_E_NOMEM, "out of memory");
    memset(cs->pool_init, 0, cs->pool_bytes);
    /* block ids shuffled over the pool, so a kernel that assumes contiguous blocks is caught */
    int32_t *perm = malloc(n_blocks * sizeof *perm);
    if (!perm) return rad_err_set(e, RAD_E_NOMEM, "out of memory");
    for (uint32_t i = 0; i < n_blocks; i++) perm[i] = (int32_t)i;
    for (uint32_t i = n_blocks - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(rng_u64(&c->rng) % (i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    uint32_t next = 0;
    for (uint32_t s = 0; s < sp->n_seq; s++) {
        uint32_t nb = (sp->ctx[s] + B - 1) / B;
        for (uint32_t b = 0; b < max_blocks; b++) cs->table[s * max_blocks + b] = b < nb ? perm[next++] : -1;
    }
    free(perm);
    /* earlier tokens into the pool and every token into the dense view */
    for (uint32_t s = 0; s < sp->n_seq; s++) {
        const uint32_t ctx = sp->ctx[s], prior = ctx - sp->q[s];
        cs->seqK[s] = malloc((size_t)ctx * gw * sizeof(float)), cs->seqV[s] = malloc((size_t)ctx * gw * sizeof(float));
        if (!cs->seqK[s] || !cs->seqV[s]) return rad_err_set(e, RAD_E_NOMEM, "out of memory");
        fill_act(cs->seqK[s], prior, gw, 1.0f, 1.0f, &c->rng);
        fill_act(cs->seqV[s], prior, gw, 1.0f, 1.0f, &c->rng);
        for (uint32_t i = 0; i < ctx; i++) {
            float *kr = cs->seqK[s] + (uint64_t)i * gw, *vr = cs->seqV[s] + (uint64_t)i * gw;
            const int new_row = i >= prior;
            if (new_row) {
                memcpy(kr, k->init + (uint64_t)(cs->cu[s] + (int32_t)(i - prior)) * gw, gw * sizeof(float));
                memcpy(vr, v->init + (uint64_t)(cs->cu[s] + (int32_t)(i - prior)) * gw, gw * sizeof(float));
            }
            for (uint32_t j = 0; j < gw; j++) kr[j] = rad_kbench_ref_round(kr[j], dt), vr[j] = rad_kbench_ref_round(vr[j], dt);
            if (new_row) continue; /* the kernel appends it */
            uint8_t *blk = cs->pool_init + (uint64_t)cs->table[s * max_blocks + i / B] * bb;
            for (uint32_t g = 0; g < (uint32_t)n_kv; g++)
                for (uint32_t d = 0; d < (uint32_t)hd; d++) {
                    uint64_t off = (((uint64_t)g * B + i % B) * (uint64_t)hd + d) * esz;
                    float kv2[2] = {kr[g * hd + d], vr[g * hd + d]};
                    for (int w = 0; w < 2; w++) {
                        uint8_t *p = blk + (w ? (uint64_t)n_kv * B * (uint64_t)hd * esz : 0) + off;
                        if (dt == RAD_F32) memcpy(p, &kv2[w], 4);
                        else {
                            uint16_t h = dt == RAD_F16 ? rad_f32_to_f16(kv2[w]) : rad_f32_to_bf16(kv2[w]);
                            memcpy(p, &h, 2);
                        }
                    }
                }
        }
        cs->kv_read_bytes += (uint64_t)ctx * gw * 2 * esz;
        for (uint32_t r = 0; r < sp->q[s]; r++) cs->pos[cs->cu[s] + (int32_t)r] = (int32_t)(prior + r);
    }
    cs->kv = (RadKvState){.group = {c->g->layer_kv[layer]}, .block_table = cs->table, .max_blocks = max_blocks,
                          .pool = cs->pool, .dtype = dt, .kv_quant = c->g->ctx->kv_quant, .block_size = B,
                          .n_head_kv = (uint32_t)n_kv, .head_dim = (uint32_t)hd, .layer = (uint32_t)layer,
                          .block_bytes = bb, .n_blocks = n_blocks};
    uint32_t max_q = 0;
    for (uint32_t s = 0; s < sp->n_seq; s++) max_q = sp->q[s] > max_q ? sp->q[s] : max_q;
    cs->batch = (RadBatch){.struct_size = sizeof cs->batch,
                           .phase = sp->n_dec == sp->n_seq ? RAD_PHASE_DECODE : sp->n_dec ? RAD_PHASE_MIXED : RAD_PHASE_PREFILL,
                           .n_tok = (uint32_t)M, .n_seq = sp->n_seq, .n_seq_decode = sp->n_dec, .token_ids = cs->tok,
                           .positions = cs->pos, .cu_seqlens = cs->cu, .seq_ids = cs->sid, .q_lens = cs->ql,
                           .ctx_lens = cs->cl, .max_q_len = max_q, .max_ctx_len = cs->ctx, .kv = &cs->kv, .n_kv = 1};
    RadKbenchAttnSeq rs[MAX_SEQ];
    for (uint32_t s = 0; s < sp->n_seq; s++)
        rs[s] = (RadKbenchAttnSeq){cs->seqK[s], cs->seqV[s], cs->cu[s], cs->ql[s], cs->cl[s]};
    int64_t window = 0; /* omitted: full attention */
    rad_graph_op_int(op, "window", &window);
    rad_kbench_ref_attn(q->init, out->ref, rs, sp->n_seq, (uint32_t)n_head, (uint32_t)n_kv, (uint32_t)hd, scale,
                        window > 0 ? (uint32_t)window : 0, c->nt);
    return RAD_OK;
}

/* Builds case `which` of op at n rows and its reference. Weights in w[] (loaded by the caller). */
static int build_case(Kb *c, const RadGOp *op, OpKind kind, Weight *w, int n_w, int64_t n, int which, Case *cs,
                      RadErr *e) {
    memset(cs, 0, sizeof *cs);
    cs->n = n, cs->shape = n == 1 ? "decode" : "rows", cs->q8_x = -1;
    set_params(cs, op);
    for (int i = 0; i < n_w; i++) cs->op[cs->n_op++] = (Opnd){0, i};
    const uint64_t M = (uint64_t)n;
    int64_t N = 0, K = 0, V = 0;
    double eps = 0;
    const int nomem = RAD_E_NOMEM;
#define NEED(x) do { if (!(x)) return rad_err_set(e, nomem, "out of memory"); } while (0)
    switch (kind) {
    case OP_EMBED:
    case OP_EMBED_PART: { /* the table's rows [row0, row0 + V) of n_vocab (the whole one: 0, V): its ids' rows, zeros for the rest */
        int64_t row0 = 0, nv = 0;
        if (!rad_graph_op_int(op, "N", &N) || !rad_graph_op_int(op, "V", &V) || n_w != 1 || V < 1) break;
        if (kind == OP_EMBED) nv = V;
        else if (!rad_graph_op_int(op, "row0", &row0) || !rad_graph_op_int(op, "n_vocab", &nv)) break;
        if (row0 < 0 || nv < row0 + V) break;
        int32_t *ids = add_raw(cs, M);
        Buf *out = add_buf(cs, M, (uint64_t)N, 0, 1);
        NEED(ids && out);
        for (uint64_t i = 0; i < M; i++) { /* a part: every other id its own, the rest anywhere in the vocabulary */
            const int64_t base = i % 2 ? 0 : row0, span = i % 2 ? nv : V;
            ids[i] = (int32_t)(base + (int64_t)(rng_u64(&c->rng) % (uint64_t)span));
            float *ref = out->ref + i * (uint64_t)N;
            if (ids[i] < row0 || ids[i] >= row0 + V) {
                memset(ref, 0, (size_t)N * sizeof *ref);
                continue;
            }
            int rc = weight_row(&w[0], (uint64_t)(ids[i] - row0), ref, e);
            if (rc) return rc;
        }
        NEED(!plain_batch(cs, ids, NULL));
        return RAD_OK;
    }
    case OP_RMSNORM:
    case OP_ADD_RMSNORM: {
        if (!rad_graph_op_int(op, "N", &N) || !rad_graph_op_f64(op, "eps", &eps) || n_w != 1) break;
        Buf *x = add_buf(cs, M, (uint64_t)N, 1, 0);
        NEED(x);
        fill_act(x->init, M, (uint64_t)N, 1.0f, 2.0f, &c->rng);
        if (kind == OP_RMSNORM) {
            Buf *out = add_buf(cs, M, (uint64_t)N, 0, 1);
            NEED(out);
            rad_kbench_ref_rmsnorm(x->init, w[0].deq, out->ref, M, (uint64_t)N, eps, c->nt);
        } else {
            Buf *res = add_buf(cs, M, (uint64_t)N, 1, 1), *out = add_buf(cs, M, (uint64_t)N, 0, 1);
            NEED(res && out);
            fill_act(res->init, M, (uint64_t)N, 1.0f, 4.0f, &c->rng);
            rad_kbench_ref_add(res->init, x->init, res->ref, M * (uint64_t)N);
            rad_kbench_ref_rmsnorm(res->ref, w[0].deq, out->ref, M, (uint64_t)N, eps, c->nt);
        }
        NEED(!plain_batch(cs, NULL, NULL));
        return RAD_OK;
    }
    case OP_GEMM:
    case OP_GEMM_MULTI: {
        if (!rad_graph_op_int(op, "K", &K) || n_w < 1) break;
        Buf *x = add_buf(cs, M, (uint64_t)K, 1, 0);
        NEED(x);
        cs->q8_x = cs->n_buf - 1;
        fill_act(x->init, M, (uint64_t)K, 1.0f, 1.0f, &c->rng);
        for (int i = 0; i < n_w; i++) {
            char pn[4] = {'N', (char)('0' + i), 0};
            if (kind == OP_GEMM) pn[1] = 0;
            if (!rad_graph_op_int(op, pn, &N) || w[i].stored.rows != (uint64_t)N || w[i].stored.cols != (uint64_t)K) {
                return rad_err_set(e, RAD_E_SHAPE, "op '%s': weight %d is [%" PRIu64 ", %" PRIu64 "], parameters say [%" PRId64
                                   ", %" PRId64 "]", op->op, i, w[i].stored.rows, w[i].stored.cols, N, K);
            }
            Buf *y = add_buf(cs, M, (uint64_t)N, 0, 1);
            NEED(y);
            y->q8_w = i;
            rad_kbench_ref_gemm(x->init, (uint64_t)K, w[i].deq, y->ref, (uint64_t)N, M, (uint64_t)N, (uint64_t)K, c->nt);
        }
        NEED(!plain_batch(cs, NULL, NULL));
        return RAD_OK;
    }
    case OP_ROPE: {
        RadKbenchRope p = {0};
        if (!rad_graph_op_int(op, "n_head", &p.n_head) || !rad_graph_op_int(op, "head_dim", &p.head_dim) || !rad_graph_op_int(op, "n_rot", &p.n_rot) ||
            !rad_graph_op_f64(op, "theta", &p.theta) || !rad_graph_op_int(op, "scaling", &p.scaling) || !rad_graph_op_f64(op, "factor", &p.factor) ||
            !rad_graph_op_f64(op, "low_freq_factor", &p.low) || !rad_graph_op_f64(op, "high_freq_factor", &p.high) ||
            !rad_graph_op_int(op, "orig_ctx", &p.orig_ctx))
            break;
        if (n_w == 1) p.freq_factors = w[0].deq;
        const uint64_t W = (uint64_t)(p.n_head * p.head_dim);
        Buf *x = add_buf(cs, M, W, 1, 1);
        int32_t *pos = add_raw(cs, M);
        NEED(x && pos);
        fill_act(x->init, M, W, 1.0f, 1.0f, &c->rng);
        const uint32_t max_ctx = c->g->ctx->max_ctx ? c->g->ctx->max_ctx : 1;
        for (uint64_t i = 0; i < M; i++) pos[i] = (int32_t)(rng_u64(&c->rng) % max_ctx);
        memcpy(x->ref, x->init, M * W * sizeof(float));
        rad_kbench_ref_rope(x->ref, pos, M, &p, c->nt);
        NEED(!plain_batch(cs, NULL, pos));
        return RAD_OK;
    }
    case OP_ATTN:
        return build_attn(c, op, cs, which, e);
    case OP_SILU:
    case OP_GELU:
    case OP_ADD: {
        if (!rad_graph_op_int(op, "N", &N)) break;
        Buf *a = add_buf(cs, M, (uint64_t)N, 1, 0), *b = add_buf(cs, M, (uint64_t)N, 1, 0), *out = add_buf(cs, M, (uint64_t)N, 0, 1);
        NEED(a && b && out);
        fill_act(a->init, M, (uint64_t)N, kind != OP_ADD ? 2.0f : 1.0f, 2.0f, &c->rng);
        fill_act(b->init, M, (uint64_t)N, 1.0f, 2.0f, &c->rng);
        if (kind == OP_SILU) rad_kbench_ref_silu_mul(a->init, b->init, out->ref, M * (uint64_t)N);
        else if (kind == OP_GELU) rad_kbench_ref_gelu_tanh_mul(a->init, b->init, out->ref, M * (uint64_t)N);
        else rad_kbench_ref_add(a->init, b->init, out->ref, M * (uint64_t)N);
        NEED(!plain_batch(cs, NULL, NULL));
        return RAD_OK;
    }
    case OP_HEAD_NORM: { /* rmsnorm over each head_dim slice: x is [M * n_head, head_dim] */
        int64_t nh = 0, hd = 0;
        if (!rad_graph_op_int(op, "n_head", &nh) || !rad_graph_op_int(op, "head_dim", &hd) ||
            !rad_graph_op_f64(op, "eps", &eps) || n_w != 1 || nh < 1 || hd < 1)
            break;
        Buf *x = add_buf(cs, M, (uint64_t)(nh * hd), 1, 1);
        NEED(x);
        fill_act(x->init, M, (uint64_t)(nh * hd), 1.0f, 2.0f, &c->rng);
        rad_kbench_ref_rmsnorm(x->init, w[0].deq, x->ref, M * (uint64_t)nh, (uint64_t)hd, eps, c->nt);
        NEED(!plain_batch(cs, NULL, NULL));
        return RAD_OK;
    }
    case OP_SCALE: { /* x *= factor, in place */
        double f = 0;
        if (!rad_graph_op_int(op, "N", &N) || !rad_graph_op_f64(op, "factor", &f)) break;
        Buf *x = add_buf(cs, M, (uint64_t)N, 1, 1);
        NEED(x);
        fill_act(x->init, M, (uint64_t)N, 1.0f, 2.0f, &c->rng);
        const float ff = (float)f;
        for (uint64_t i = 0; i < M * (uint64_t)N; i++) x->ref[i] = x->init[i] * ff;
        NEED(!plain_batch(cs, NULL, NULL));
        return RAD_OK;
    }
    case OP_ADD_BIAS: { /* x += bias on every row, in place */
        if (!rad_graph_op_int(op, "N", &N) || n_w != 1 || w[0].stored.rows * w[0].stored.cols != (uint64_t)N) break;
        Buf *x = add_buf(cs, M, (uint64_t)N, 1, 1);
        NEED(x);
        fill_act(x->init, M, (uint64_t)N, 1.0f, 2.0f, &c->rng);
        for (uint64_t i = 0; i < M; i++)
            rad_kbench_ref_add(x->init + i * (uint64_t)N, w[0].deq, x->ref + i * (uint64_t)N, (uint64_t)N);
        NEED(!plain_batch(cs, NULL, NULL));
        return RAD_OK;
    }
    case OP_ALLREDUCE: { /* rank r brings x * (r + 1): the sum in rank order (one rank: the identity) */
        if (!rad_graph_op_int(op, "N", &N)) break;
        Buf *x = add_buf(cs, M, (uint64_t)N, 1, 1);
        NEED(x);
        fill_act(x->init, M, (uint64_t)N, 1.0f, 2.0f, &c->rng);
        for (uint64_t i = 0; i < M * (uint64_t)N; i++) {
            float sum = x->init[i];
            for (uint32_t r = 1; r < c->world; r++) sum += x->init[i] * (float)(r + 1);
            x->ref[i] = sum;
        }
        NEED(!plain_batch(cs, NULL, NULL));
        return RAD_OK;
    }
    case OP_ALLGATHER: { /* every rank's x holds gather_value(row, its global column): the row, whole */
        int64_t col0 = 0, W = 0;
        if (!rad_graph_op_int(op, "N", &N) || !rad_graph_op_int(op, "col0", &col0) || !rad_graph_op_int(op, "W", &W) ||
            col0 < 0 || col0 + N > W)
            break;
        Buf *x = add_buf(cs, M, (uint64_t)N, 1, 0), *out = add_buf(cs, M, (uint64_t)W, 0, 1);
        NEED(x && out);
        for (uint64_t i = 0; i < M; i++) {
            for (int64_t j = 0; j < N; j++) x->init[i * (uint64_t)N + (uint64_t)j] = gather_value(i, (uint64_t)(col0 + j));
            for (int64_t j = 0; j < W; j++) out->ref[i * (uint64_t)W + (uint64_t)j] = gather_value(i, (uint64_t)j);
        }
        NEED(!plain_batch(cs, NULL, NULL));
        return RAD_OK;
    }
    case OP_LGATHER: {
        if (!rad_graph_op_int(op, "N", &N)) break;
        const uint64_t n_tok = M + 2;
        Buf *x = add_buf(cs, n_tok, (uint64_t)N, 1, 0);
        int32_t *rows = add_raw(cs, M);
        Buf *out = add_buf(cs, M, (uint64_t)N, 0, 1);
        NEED(x && rows && out);
        fill_act(x->init, n_tok, (uint64_t)N, 1.0f, 2.0f, &c->rng);
        for (uint64_t i = 0; i < M; i++) {
            rows[i] = (int32_t)(rng_u64(&c->rng) % n_tok);
            memcpy(out->ref + i * (uint64_t)N, x->init + (uint64_t)rows[i] * (uint64_t)N, (size_t)N * sizeof(float));
        }
        NEED(!plain_batch(cs, NULL, NULL));
        return RAD_OK;
    }
    case OP_ARGMAX: { /* x [M, N] logits, out [M, 1]: the first maximum's index, as a float */
        if (!rad_graph_op_int(op, "N", &N) || N < 2 || N > (1 << 24)) break;
        Buf *x = add_buf(cs, M, (uint64_t)N, 1, 0), *out = add_buf(cs, M, 1, 0, 1);
        NEED(x && out);
        fill_act(x->init, M, (uint64_t)N, 1.0f, 2.0f, &c->rng);
        for (uint64_t i = 0; i < M; i++) { /* what the loop decides: a tie (the lower index wins), a NaN, -0 against +0 */
            float *r = x->init + i * (uint64_t)N;
            const uint64_t a = rng_u64(&c->rng) % (uint64_t)N, b = rng_u64(&c->rng) % (uint64_t)N;
            switch (i % 4) {
            case 0: r[a] = r[b] = 40.0f; break;
            case 1: r[a] = NAN; break;
            case 2: for (uint64_t j = 0; j < (uint64_t)N; j++) r[j] = -fabsf(r[j]) - 1.0f;
                    r[a] = -0.0f, r[b] = 0.0f; break;
            default: r[0] = NAN; break; /* nothing compares greater than it: 0 */
            }
            out->ref[i] = (float)rad_argmax(r, (uint32_t)N); /* the sampler's greedy pick, which the op must equal */
        }
        NEED(!plain_batch(cs, NULL, NULL));
        return RAD_OK;
    }
    case OP_LAYERNORM: { /* gamma, beta; x, out */
        if (!rad_graph_op_int(op, "N", &N) || !rad_graph_op_f64(op, "eps", &eps) || n_w != 2 ||
            w[0].stored.rows * w[0].stored.cols != (uint64_t)N || w[1].stored.rows * w[1].stored.cols != (uint64_t)N)
            break;
        Buf *x = add_buf(cs, M, (uint64_t)N, 1, 0), *out = add_buf(cs, M, (uint64_t)N, 0, 1);
        NEED(x && out);
        fill_act(x->init, M, (uint64_t)N, 1.0f, 2.0f, &c->rng);
        for (uint64_t i = 0; i < M; i++) { /* a mean of its own in each row: what the op subtracts */
            const float off = 0.5f * rng_normal(&c->rng);
            for (uint64_t j = 0; j < (uint64_t)N; j++) x->init[i * (uint64_t)N + j] += off;
        }
        rad_kbench_ref_layernorm(x->init, w[0].deq, w[1].deq, out->ref, M, (uint64_t)N, eps, c->nt);
        NEED(!plain_batch(cs, NULL, NULL));
        return RAD_OK;
    }
    case OP_GELU_ERF: { /* x, out */
        if (!rad_graph_op_int(op, "N", &N)) break;
        Buf *x = add_buf(cs, M, (uint64_t)N, 1, 0), *out = add_buf(cs, M, (uint64_t)N, 0, 1);
        NEED(x && out);
        fill_act(x->init, M, (uint64_t)N, 2.0f, 2.0f, &c->rng);
        rad_kbench_ref_gelu(x->init, out->ref, M * (uint64_t)N);
        NEED(!plain_batch(cs, NULL, NULL));
        return RAD_OK;
    }
    case OP_ATTN_SEQ: { /* q, k, v, out over the step's sequences */
        int64_t nh = 0, nkv = 0, hd = 0, window = 0;
        double scale = 0;
        if (!rad_graph_op_int(op, "n_head", &nh) || !rad_graph_op_int(op, "n_head_kv", &nkv) ||
            !rad_graph_op_int(op, "head_dim", &hd) || !rad_graph_op_f64(op, "scale", &scale) || nh < 1 || nkv < 1 || hd < 1 ||
            nh % nkv)
            break;
        rad_graph_op_int(op, "window", &window); /* omitted: 0, every key of the sequence */
        const uint64_t qw = (uint64_t)(nh * hd), kw = (uint64_t)(nkv * hd);
        Buf *q = add_buf(cs, M, qw, 1, 0), *k = add_buf(cs, M, kw, 1, 0), *v = add_buf(cs, M, kw, 1, 0),
            *out = add_buf(cs, M, qw, 0, 1);
        NEED(q && k && v && out);
        fill_act(q->init, M, qw, 1.0f, 1.0f, &c->rng);
        fill_act(k->init, M, kw, 1.0f, 1.0f, &c->rng);
        fill_act(v->init, M, kw, 1.0f, 1.0f, &c->rng);
        NEED(!seq_batch(cs, c->g, which));
        for (uint32_t s = 0; s < cs->batch.n_seq; s++) {
            const uint64_t len = (uint64_t)cs->ql[s];
            for (uint64_t i = 0; i < len; i++) {
                const uint64_t lo = window > 0 && i + 1 > (uint64_t)window ? i + 1 - (uint64_t)window : 0;
                const uint64_t hi = window > 0 && i + (uint64_t)window < len ? i + (uint64_t)window : len;
                cs->pairs += hi - lo;
            }
        }
        rad_kbench_ref_attn_seq(q->init, k->init, v->init, out->ref, cs->cu, cs->batch.n_seq, (uint32_t)nh, (uint32_t)nkv,
                                (uint32_t)hd, scale, window > 0 ? (uint32_t)window : 0, c->nt);
        return RAD_OK;
    }
    case OP_POOL: { /* x [n, N]; out [n_seq, N], one row per sequence of the step */
        int64_t mode = 0;
        if (!rad_graph_op_int(op, "N", &N) || !rad_graph_op_int(op, "mode", &mode) || mode < 0 || mode > 4) break;
        NEED(!seq_batch(cs, c->g, which));
        const uint64_t S = cs->batch.n_seq;
        Buf *x = add_buf(cs, M, (uint64_t)N, 1, 0), *out = add_buf(cs, S, (uint64_t)N, 0, 1);
        NEED(x && out);
        fill_act(x->init, M, (uint64_t)N, 1.0f, 2.0f, &c->rng);
        rad_kbench_ref_pool(x->init, out->ref, cs->cu, (uint32_t)S, (uint64_t)N, (int)mode);
        return RAD_OK;
    }
    case OP_L2NORM: { /* x in place */
        if (!rad_graph_op_int(op, "N", &N)) break;
        Buf *x = add_buf(cs, M, (uint64_t)N, 1, 1);
        NEED(x);
        fill_act(x->init, M, (uint64_t)N, 1.0f, 2.0f, &c->rng);
        rad_kbench_ref_l2_normalize(x->init, x->ref, M, (uint64_t)N);
        NEED(!plain_batch(cs, NULL, NULL));
        return RAD_OK;
    }
    case OP_NONE:
        break;
    }
#undef NEED
    return rad_err_set(e, RAD_E_SHAPE, "op '%s': parameters or weights are not docs/OPS.md's", op->op);
}

/* ---- running a kernel on a case ---------------------------------------------------------------- */

static void reset_work(Case *cs) {
    for (int i = 0; i < cs->n_buf; i++) {
        Buf *b = &cs->buf[i];
        if (b->init) memcpy(b->work, b->init, b->rows * b->cols * sizeof(float));
        else fill_nan(b->work, b->rows * b->cols);
    }
    if (cs->pool) memcpy(cs->pool, cs->pool_init, cs->pool_bytes);
}

typedef struct Run {
    const RadKernel *k;
    int lib;                       /* the kernel's library (rad_engine_lib's index) */
    int collective;                /* all_reduce, all_gather: every rank runs it at once */
    int op_index;                  /* the op's index in every rank's graph (a collective's peers read theirs) */
    void *state;
    void *ws;
    size_t ws_bytes;
    int64_t knobs[RAD_KNOB_MAX];   /* the knob values of this run, in k's knobs order (n_knobs 0: the defaults) */
    uint32_t n_knobs;
    /* a device library's run (docs/TOOLS.md, "rad-kbench on a CUDA library"): the case's buffers,
       raw operands and pool mirrored in its memory, sent before a checked call and read back after */
    const RadKernelLib *dev;       /* the kernel's library when it is a device one, else NULL */
    void *dbuf[MAX_BUFS], *draw[2], *dpool;
} Run;

static void run_free(Run *run) {
    if (run->dev) {
        for (int i = 0; i < MAX_BUFS; i++)
            if (run->dbuf[i]) run->dev->free(run->state, run->dbuf[i]);
        for (int i = 0; i < 2; i++)
            if (run->draw[i]) run->dev->free(run->state, run->draw[i]);
        if (run->dpool) run->dev->free(run->state, run->dpool);
        if (run->ws) run->dev->free(run->state, run->ws);
    } else {
        free(run->ws);
    }
    memset(run, 0, sizeof *run);
}

static int run_prepare(Kb *c, const RadGOp *op, const RadKernel *k, int lib, int64_t hi, Run *run) {
    memset(run, 0, sizeof *run);
    run->k = k;
    run->lib = lib;
    run->collective = c->world > 1 && (!strcmp(op->op, "all_reduce") || !strcmp(op->op, "all_gather"));
    run->op_index = (int)(op - c->g->ops);
    const RadPlugin *lp = rad_engine_lib(c->en, lib, &run->state);
    if (!lp) return RAD_E_ARG;
    run->dev = lp->lib->device == RAD_DEVICE_CUDA ? lp->lib : NULL;
    if (k->workspace) {
        size_t ws = k->workspace(op->params, op->n_params, hi);
        if (ws) {
            run->ws_bytes = ws;
            run->ws = run->dev ? run->dev->alloc(run->state, ws) : aligned_alloc(256, (ws + 255) & ~(size_t)255);
            if (!run->ws) return RAD_E_NOMEM;
        }
    }
    return RAD_OK;
}

/* A collective's other ranks. all_reduce: rank r runs the kernel on its own copy of the rows,
 * times (r + 1). all_gather: rank r runs its own op's params (its columns) on gather_value's rows
 * into an output of its own. */
typedef struct PeerRun {
    RadKernelArgs ka;
    RadKArg arg[2];
    RadParam prm[16];              /* all_gather: rank r's params */
    float *x, *out;
    const RadKernel *k;            /* the collective's kernel */
    const RadKernelLib *lib;       /* the rank's library (its device hooks, its comm_abort) */
    void *dx, *dout;               /* a device library's run: x and out in this rank's memory */
    int rc;
} PeerRun;

/* A rank's run on its thread. One that fails (a refusal before it joins, a device error) poisons
 * the communicator, so rank 0 and the others leave the collective instead of waiting for it. */
static void *peer_run(void *p) {
    PeerRun *q = p;
    q->rc = q->ka.args[0].data ? q->k->run(&q->ka) : RAD_E_NOMEM;
    if (!q->rc && q->lib->device == RAD_DEVICE_CUDA) q->rc = q->lib->sync(q->ka.lib_state);
    if (q->rc && q->lib->struct_size >= offsetof(RadKernelLib, comm_abort) + sizeof q->lib->comm_abort && q->lib->comm_abort)
        q->lib->comm_abort(q->ka.lib_state, 1);
    return NULL;
}

/* A device library's peer: its x (and out) copied into memory of its own rank's state. */
static int peer_to_device(PeerRun *q) {
    const RadKernelLib *l = q->lib;
    for (uint32_t i = 0; i < q->ka.n_args && i < 2; i++) {
        const size_t bytes = (size_t)(q->arg[i].rows * q->arg[i].row_stride) * sizeof(float);
        void **slot = i ? &q->dout : &q->dx;
        if (!(*slot = l->alloc(q->ka.lib_state, bytes ? bytes : 1))) return RAD_E_NOMEM;
        if (bytes && l->copy(q->ka.lib_state, *slot, q->arg[i].data, bytes, 1) != RAD_OK) return RAD_E_IO;
        q->arg[i].data = *slot;
    }
    return RAD_OK;
}

/* Rank r's all_gather: its op's params with the ranged one at n, x [n, N_r] of gather_value, out [n, W]. */
static int peer_gather(Kb *c, const Run *run, uint32_t r, PeerRun *q) {
    const RadGraph *g = rad_engine_rank_graph(c->en, r);
    const RadGOp *op = g && run->op_index < g->n_ops ? &g->ops[run->op_index] : NULL;
    int64_t N = 0, col0 = 0, W = 0;
    if (!op || strcmp(op->op, "all_gather") || op->n_params > 16 || !rad_graph_op_int(op, "N", &N) ||
        !rad_graph_op_int(op, "col0", &col0) || !rad_graph_op_int(op, "W", &W) || N < 1 || W < 1)
        return RAD_E_ARG;
    const uint64_t n = (uint64_t)q->ka.n;
    memcpy(q->prm, op->params, op->n_params * sizeof *q->prm);
    for (uint32_t i = 0; i < op->n_params; i++)
        if (q->prm[i].kind == RAD_PARAM_RANGE) q->prm[i].lo = q->prm[i].hi = (int64_t)n;
    q->ka.params = q->prm, q->ka.n_params = op->n_params;
    q->x = malloc((size_t)(n * (uint64_t)N) * sizeof *q->x);
    q->out = malloc((size_t)(n * (uint64_t)W) * sizeof *q->out);
    if (!q->x || !q->out) return RAD_E_NOMEM;
    for (uint64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < N; j++) q->x[i * (uint64_t)N + (uint64_t)j] = gather_value(i, (uint64_t)(col0 + j));
    q->arg[0] = (RadKArg){.data = q->x, .dtype = RAD_F32, .rows = n, .cols = (uint64_t)N, .row_stride = (uint64_t)N};
    q->arg[1] = (RadKArg){.data = q->out, .dtype = RAD_F32, .rows = n, .cols = (uint64_t)W, .row_stride = (uint64_t)W};
    return RAD_OK;
}

static int run_collective(Kb *c, const Run *run, RadKernelArgs *ka) {
    enum { MAX_RANKS = 64 };
    PeerRun peer[MAX_RANKS];
    pthread_t th[MAX_RANKS];
    const RadKArg *x = &ka->args[0];
    const uint64_t n = x->rows * x->cols;
    const int gather = !strcmp(run->k->op, "all_gather");
    const uint32_t n_ranks = c->world < MAX_RANKS ? c->world : MAX_RANKS;
    int rc = RAD_OK;
    /* every peer made ready before any starts: a rank that never comes would leave the others waiting */
    for (uint32_t r = 1; r < n_ranks; r++) {
        PeerRun *q = &peer[r];
        memset(q, 0, sizeof *q);
        q->ka = *ka;
        q->ka.args = q->arg;
        q->k = run->k, q->ka.workspace = NULL; /* a collective takes no workspace */
        const RadPlugin *lp = rc ? NULL : rad_engine_rank_lib(c->en, r, run->lib, &q->ka.lib_state);
        if (!rc && !lp) rc = RAD_E_ARG;
        if (lp) q->lib = lp->lib;
        if (!rc && gather) rc = peer_gather(c, run, r, q);
        else if (!rc) {
            q->arg[0] = *x; /* kbench's buffers are packed rows: n floats */
            if (!(q->x = malloc((size_t)(n ? n : 1) * sizeof *q->x))) rc = RAD_E_NOMEM;
            else if (!run->dev) memcpy(q->x, x->data, (size_t)n * sizeof *q->x);
            else if (run->dev->copy(run->state, q->x, x->data, (size_t)n * sizeof *q->x, 0) != RAD_OK) rc = RAD_E_IO; /* on rank 0's device */
            for (uint64_t i = 0; !rc && i < n; i++) q->x[i] *= (float)(r + 1);
            q->arg[0].data = q->x;
        }
        if (!rc && run->dev) rc = peer_to_device(q);
    }
    uint32_t started = 0;
    for (uint32_t r = 1; !rc && r < n_ranks; r++) {
        if (pthread_create(&th[r], NULL, peer_run, &peer[r])) {
            rc = RAD_E_NOMEM;
            break;
        }
        started = r;
    }
    int released = rc && started; /* the started ranks wait in the collective for rank 0: release them */
    if (!rc && (rc = run->k->run(ka))) released = 1; /* rank 0 refused: the peers must not wait for it either */
    if (released) rad_engine_comm_abort(c->en, 1);
    for (uint32_t r = 1; r <= started; r++) {
        pthread_join(th[r], NULL);
        if (peer[r].rc) released = 1;
        if (!rc && peer[r].rc) rc = peer[r].rc;
    }
    if (released) rad_engine_comm_abort(c->en, 0); /* every rank out: the communicator usable again */
    for (uint32_t r = 1; r < n_ranks; r++) {
        free(peer[r].x), free(peer[r].out);
        if (peer[r].dx) peer[r].lib->free(peer[r].ka.lib_state, peer[r].dx);
        if (peer[r].dout) peer[r].lib->free(peer[r].ka.lib_state, peer[r].dout);
    }
    return rc;
}

/* A device run's copy of what the host holds (made once per run, then sent again when `send`). */
static void *dev_mirror(const Run *run, void **slot, const void *host, size_t bytes, int send) {
    if (!*slot && !(*slot = run->dev->alloc(run->state, bytes ? bytes : 1))) return NULL;
    if (send && bytes && run->dev->copy(run->state, *slot, host, bytes, 1) != RAD_OK) return NULL;
    return *slot;
}
/* A weight as a device kernel reads it: its bytes in the library's memory, sent once. */
static int dev_weight(const Run *run, Weight *w, RadKArg *a) {
    const int stored = a->data == w->stored.data;
    void **slot = &w->dev[stored];
    if (!*slot) {
        size_t bytes = (size_t)(a->rows * a->row_stride);
        if (a->dtype & RAD_PACKED) { /* the engine packed it for this library: its own size */
            bytes = run->dev->pack_size ? run->dev->pack_size(run->state, (RadDType)(a->dtype & ~RAD_PACKED), a->rows, a->cols) : 0;
            if (!bytes) return RAD_E_ARG;
        }
        if (w->dev_lib && w->dev_lib != run->dev) return RAD_E_UNSUPPORTED; /* one device library per check */
        w->dev_lib = run->dev, w->dev_state = run->state;
        if (!dev_mirror(run, slot, a->data, bytes, 1)) return RAD_E_NOMEM;
    }
    const void *scale = a->planes[1] && a->dtype == RAD_F8_E4M3 ? a->planes[1] : NULL; /* block-scaled f8 */
    a->data = *slot;
    memset(a->planes, 0, sizeof a->planes);
    a->planes[0] = *slot;
    if (scale) {
        if (!w->dev_scale && !dev_mirror(run, &w->dev_scale, scale, (size_t)rad_f8_scale_bytes(a->rows, a->cols), 1))
            return RAD_E_NOMEM;
        a->planes[1] = w->dev_scale;
    }
    return RAD_OK;
}

/* Kernel k on the case's work buffers with operands ops (weights by kernel), as c_issue binds them.
 * On a device library with `check`, the inputs are sent first and every buffer read back after
 * (its sync first); without it (timing repeats) the device works on what it holds, synced. */
static int run_kernel_io(Kb *c, Case *cs, Run *run, Weight *w, const Opnd *ops, int n_ops, const RadParam *params,
                         uint32_t n_params, int check) {
    RadKArg args[MAX_ARGS];
    memset(args, 0, sizeof args);
    RadKvState kv = cs->kv;
    for (int i = 0; i < n_ops; i++) {
        const Opnd *o = &ops[i];
        if (o->kind == 0) {
            args[i] = *weight_for(&w[o->idx], run->k);
            if (run->dev) {
                const int rc = dev_weight(run, &w[o->idx], &args[i]);
                if (rc) return rc;
            }
        } else if (o->kind == 1) {
            const Buf *b = &cs->buf[o->idx];
            args[i] = (RadKArg){.data = b->work, .dtype = RAD_F32, .rows = b->rows, .cols = b->cols, .row_stride = b->cols};
            if (run->dev && !(args[i].data = dev_mirror(run, &run->dbuf[o->idx], b->work, b->rows * b->cols * sizeof(float), check)))
                return RAD_E_NOMEM;
        } else {
            args[i] = (RadKArg){.data = cs->raw[o->idx], .dtype = RAD_I32, .rows = cs->raw_n[o->idx], .cols = 1, .row_stride = 1};
            if (run->dev) {
                args[i].planes[1] = cs->raw[o->idx]; /* the host values (ABI 1.9) */
                if (!(args[i].data = dev_mirror(run, &run->draw[o->idx], cs->raw[o->idx], cs->raw_n[o->idx] * 4, check)))
                    return RAD_E_NOMEM;
            }
        }
    }
    if (run->dev && cs->pool && !(kv.pool = dev_mirror(run, &run->dpool, cs->pool, cs->pool_bytes, check))) return RAD_E_NOMEM;
    RadKernelArgs ka = {.struct_size = sizeof ka, .params = params, .n_params = n_params, .n = cs->n, .args = args,
                        .n_args = (uint32_t)n_ops, .batch = &cs->batch, .kv = cs->pool ? &kv : NULL,
                        .workspace = run->ws, .lib_state = run->state, .n_threads = c->kernel_threads,
                        .deterministic = (uint32_t)c->g->sel.deterministic, .knobs = run->n_knobs ? run->knobs : NULL,
                        .n_knobs = run->n_knobs};
    int rc = run->collective ? run_collective(c, run, &ka) : run->k->run(&ka);
    if (!run->dev) return rc;
    const int src = run->dev->sync(run->state);
    if (!rc) rc = src;
    for (int i = 0; check && !rc && i < n_ops; i++) /* every buffer back: outputs, and in-place inputs */
        if (ops[i].kind == 1) {
            const Buf *b = &cs->buf[ops[i].idx];
            if (run->dev->copy(run->state, b->work, run->dbuf[ops[i].idx], b->rows * b->cols * sizeof(float), 0) != RAD_OK) rc = RAD_E_IO;
        }
    if (check && !rc && cs->pool && run->dev->copy(run->state, cs->pool, run->dpool, cs->pool_bytes, 0) != RAD_OK) rc = RAD_E_IO;
    return rc;
}
static int run_kernel(Kb *c, Case *cs, Run *run, Weight *w, const Opnd *ops, int n_ops, const RadParam *params,
                      uint32_t n_params) {
    return run_kernel_io(c, cs, run, w, ops, n_ops, params, n_params, 1);
}

/* ---- comparing ------------------------------------------------------------------------------- */

typedef struct Err {
    double max, sum;
    double use;                    /* the largest |y - ref| over what the check allows that output */
    uint64_t n, n_diff, nan_row;
    int nan;
} Err;

/* What a check allows each output: tol times its row's largest |ref| (+ 1e-6), plus, for each
 * bound class whose bnd is given, n times the output's bound of that class (a kernel of the
 * class, or a chain with such links). */
typedef struct Allow {
    double tol;
    const float *bnd[N_BND];
    int n[N_BND];
} Allow;

static void compare(const float *y, const float *ref, uint64_t rows, uint64_t cols, const Allow *al, Err *a) {
    for (uint64_t i = 0; i < rows; i++) {
        const float *yr = y + i * cols, *rr = ref + i * cols;
        double mref = 0, rmax = 0, rsum = 0;
        for (uint64_t j = 0; j < cols; j++)
            if (fabs((double)rr[j]) > mref) mref = fabs((double)rr[j]);
        for (uint64_t j = 0; j < cols; j++) {
            uint32_t b1, b2;
            memcpy(&b1, &yr[j], 4), memcpy(&b2, &rr[j], 4);
            double d = 0;
            if (b1 != b2) {
                a->n_diff++;
                d = isnan(yr[j]) || isnan(rr[j]) ? INFINITY : fabs((double)yr[j] - (double)rr[j]);
                if (isinf(d) && !a->nan) a->nan = 1, a->nan_row = i;
            }
            double rel = d / (mref + 1e-6);
            if (rel > rmax) rmax = rel;
            rsum += rel;
            double allow = al->tol * (mref + 1e-6);
            for (int b = 0; b < N_BND; b++) allow += al->bnd[b] ? al->n[b] * (double)al->bnd[b][i * cols + j] : 0;
            const double use = d == 0 ? 0 : allow > 0 ? d / allow : INFINITY;
            if (use > a->use) a->use = use;
        }
        if (rmax > a->max) a->max = rmax;
        a->sum += rsum, a->n += cols;
    }
}

static RadKbenchRow *new_row(Kb *c, int o, const char *kname, int64_t blo, int64_t bhi, const Case *cs) {
    RadKbenchReport *r = c->r;
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 256;
        RadKbenchRow *p = realloc(r->rows, (size_t)cap * sizeof *p);
        if (!p) return NULL;
        r->rows = p, r->cap = cap;
    }
    RadKbenchRow *row = &r->rows[r->n++];
    memset(row, 0, sizeof *row);
    row->op = o;
    snprintf(row->op_name, sizeof row->op_name, "%s", c->g->ops[o].op);
    snprintf(row->kernel, sizeof row->kernel, "%s", kname);
    snprintf(row->check, sizeof row->check, "ref");
    row->bucket_lo = blo, row->bucket_hi = bhi, row->rows = cs->n, row->ctx = cs->ctx;
    snprintf(row->shape, sizeof row->shape, "%s", cs->shape);
    return row;
}

static void finish_row(Kb *c, RadKbenchRow *row, const Err *a, int bitwise, double tol, const int cls[N_BND]) {
    row->bitwise = bitwise;
    row->q8 = !bitwise && cls[BND_Q8];
    row->bf16 = !bitwise && cls[BND_BF16];
    row->f8 = !bitwise && cls[BND_F8];
    row->tolerance = bitwise ? 0 : tol;
    row->max_err = a->max;
    row->mean_err = a->n ? a->sum / (double)a->n : 0;
    row->allow_used = bitwise ? 0 : a->use;
    row->n_diff = a->n_diff;
    row->pass = !row->why[0] && (bitwise ? a->n_diff == 0 : !a->nan && a->use <= 1.0);
    if (a->nan && !row->why[0]) snprintf(row->why, sizeof row->why, "NaN or unwritten output in row %" PRIu64, a->nan_row);
    if (!row->pass) c->r->n_fail++;
}

/* After attention: the step's keys and values must be in the pool, at their slots, as the cache
 * type rounds them (bit for bit: the append is a copy). */
static int check_append(const Case *cs, char *why, size_t n) {
    const RadKvState *kv = &cs->kv;
    const RadEncInfo *ei = rad_enc_info((RadEnc)kv->dtype);
    const uint32_t B = kv->block_size, hd = kv->head_dim, gw = kv->n_head_kv * hd, esz = ei->block_bytes;
    for (uint32_t s = 0; s < cs->batch.n_seq; s++)
        for (int32_t r = 0; r < cs->ql[s]; r++) {
            const uint32_t slot = (uint32_t)(cs->cl[s] - cs->ql[s] + r);
            const uint8_t *blk = cs->pool + (uint64_t)cs->table[s * kv->max_blocks + slot / B] * kv->block_bytes;
            for (uint32_t g = 0; g < kv->n_head_kv; g++)
                for (uint32_t d = 0; d < hd; d++)
                    for (int w = 0; w < 2; w++) {
                        const uint8_t *p = blk + (w ? (uint64_t)kv->n_head_kv * B * hd * esz : 0) +
                                           (((uint64_t)g * B + slot % B) * hd + d) * esz;
                        float got;
                        if (esz == 4) memcpy(&got, p, 4);
                        else {
                            uint16_t h;
                            memcpy(&h, p, 2);
                            got = kv->dtype == RAD_F16 ? rad_f16_to_f32(h) : rad_bf16_to_f32(h);
                        }
                        const float want = (w ? cs->seqV[s] : cs->seqK[s])[(uint64_t)slot * gw + g * hd + d];
                        if (memcmp(&got, &want, 4) != 0) {
                            snprintf(why, n, "the cache append: sequence %u slot %u %s[%u][%u] is %g, want %g", s, slot,
                                     w ? "V" : "K", g, d, (double)got, (double)want);
                            return 1;
                        }
                    }
        }
    return 0;
}

/* The per-output bounds of each class in want (docs/OPS.md) of a GEMM case's outputs, made once
 * each; 0 out of memory. Not a GEMM (the loader keeps the bound classes to the GEMMs): no bound,
 * so no difference is allowed. */
static int need_bounds(Kb *c, Case *cs, const Weight *w, const int want[N_BND]) {
    if (cs->q8_x < 0) return 1;
    const Buf *x = &cs->buf[cs->q8_x];
    for (int i = 0; i < cs->n_buf; i++) {
        Buf *b = &cs->buf[i];
        if (b->q8_w < 0) continue;
        for (int k = 0; k < N_BND; k++) {
            if (!want[k] || b->bnd[k]) continue;
            if (!(b->bnd[k] = malloc(b->rows * b->cols * sizeof(float)))) return 0;
            BOUND_OF[k](x->init, w[b->q8_w].deq, b->bnd[k], b->rows, b->cols, x->cols, c->nt);
        }
    }
    return 1;
}

/* ---- timing ---------------------------------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void time_kernel(Kb *c, Case *cs, Run *run, Weight *w, RadKbenchRow *row) {
    enum { WARM = 2, MIN_REPS = 5, MAX_REPS = 200 };
    const uint64_t budget = c->o->quick ? 5000000u : 40000000u; /* ns of repeats per kernel and case */
    uint64_t t[MAX_REPS];
    int n = 0;
    for (int i = 0; i < WARM; i++) run_kernel_io(c, cs, run, w, cs->op, cs->n_op, cs->params, cs->n_params, 0);
    uint64_t spent = 0;
    while (n < MAX_REPS && (n < MIN_REPS || spent < budget)) {
        uint64_t a = now_ns();
        run_kernel_io(c, cs, run, w, cs->op, cs->n_op, cs->params, cs->n_params, 0); /* a device library: synced, nothing sent */
        t[n] = now_ns() - a;
        spent += t[n++];
    }
    qsort(t, (size_t)n, sizeof *t, cmp_u64);
    row->ns_min = (double)t[0], row->ns_max = (double)t[n - 1];
    row->ns_med = n % 2 ? (double)t[n / 2] : 0.5 * ((double)t[n / 2 - 1] + (double)t[n / 2]);
}

/* Bytes a call reads and writes, and its flops where they mean something. */
static void traffic(const Case *cs, OpKind kind, const Weight *w, int n_w, const RadKernel *k, uint64_t *bytes,
                    uint64_t *flops) {
    uint64_t b = 0, f = 0;
    const uint64_t M = (uint64_t)cs->n;
    for (int i = 0; i < n_w; i++) {
        const RadKArg *a = weight_for(&w[i], k);
        b += kind == OP_EMBED ? M * a->row_stride : a->rows * a->row_stride;
        if (kind == OP_GEMM || kind == OP_GEMM_MULTI) f += 2 * M * a->rows * a->cols;
    }
    for (int i = 0; i < cs->n_buf; i++) {
        const Buf *bf = &cs->buf[i];
        const uint64_t rows = kind == OP_LGATHER && bf->init ? M : bf->rows, sz = rows * bf->cols * 4;
        b += (bf->init ? sz : 0) + (bf->ref ? sz : 0);
    }
    for (int i = 0; i < cs->n_raw; i++) b += cs->raw_n[i] * 4;
    if (kind == OP_ATTN_SEQ) f += 4 * cs->pairs * cs->buf[0].cols; /* q·k and p·v over every kept pair and head */
    if (kind == OP_ATTN) {
        b += cs->kv_read_bytes;
        for (uint32_t s = 0; s < cs->batch.n_seq; s++) {
            uint64_t pairs = 0; /* (row, slot) pairs the causal mask keeps */
            for (int32_t r = 0; r < cs->ql[s]; r++) pairs += (uint64_t)(cs->cl[s] - cs->ql[s] + r + 1);
            f += 4 * pairs * cs->kv.head_dim * (cs->buf[0].cols / cs->kv.head_dim);
        }
    }
    *bytes = b, *flops = f;
}

/* ---- fusions: the chain (`replaces`) on the selected kernels ------------------------------------- */

/* Runs op's chain on the case's inputs into each compared buffer's `chain`. The chain's kernels are
 * the selector's picks under the engine's options, the ones the plugin would issue unfused.
 * Returns 1 when run; 0 with a reason in why (no kernel serves a link, or it failed). */
static int run_chain(Kb *c, const RadGOp *op, OpKind kind, Case *cs, Weight *w, char *chain_names, size_t cn, int *bitwise,
                     double *tol, int cls[N_BND], char *why, size_t wn) {
    const char *link[3];
    int n_link = 0;
    if (kind == OP_ADD_RMSNORM) link[n_link++] = "add", link[n_link++] = "rmsnorm";
    else for (int i = 0; i < (int)op->n_w; i++) link[n_link++] = "gemm_nt";
    *bitwise = 1, *tol = 0, chain_names[0] = 0;
    memset(cls, 0, N_BND * sizeof *cls);
    reset_work(cs);
    int64_t N = 0, K = 0;
    double eps = 0;
    rad_graph_op_int(op, "N", &N), rad_graph_op_int(op, "K", &K), rad_graph_op_f64(op, "eps", &eps);
    for (int l = 0; l < n_link; l++) {
        RadParam pr[4];
        uint32_t np = 0;
        pr[np++] = (RadParam){"M", RAD_PARAM_RANGE, RAD_PROLE_NONE, cs->n, cs->n, 0};
        RadEnc enc[1];
        RadSelectOp sop = {link[l], pr, 0, enc, 0, 0}; /* a chain link: no table entry names it */
        Opnd ops[4];
        int n_ops = 0;
        if (kind == OP_ADD_RMSNORM && l == 0) { /* add(a = res, b = x, out = res) */
            pr[np++] = (RadParam){"N", RAD_PARAM_INT, RAD_PROLE_NONE, N, N, 0};
            ops[n_ops++] = cs->op[2], ops[n_ops++] = cs->op[1], ops[n_ops++] = cs->op[2];
        } else if (kind == OP_ADD_RMSNORM) { /* rmsnorm(gamma; x = res, out = out) */
            pr[np++] = (RadParam){"N", RAD_PARAM_INT, RAD_PROLE_NONE, N, N, 0};
            pr[np++] = (RadParam){"eps", RAD_PARAM_FLOAT, RAD_PROLE_NONE, 0, 0, eps};
            enc[0] = (RadEnc)w[0].stored.dtype, sop.n_w = 1;
            ops[n_ops++] = cs->op[0], ops[n_ops++] = cs->op[2], ops[n_ops++] = cs->op[3];
        } else { /* gemm_nt(W_l; x, y_l) */
            pr[np++] = (RadParam){"N", RAD_PARAM_INT, RAD_PROLE_NONE, (int64_t)w[l].stored.rows, (int64_t)w[l].stored.rows, 0};
            pr[np++] = (RadParam){"K", RAD_PARAM_INT, RAD_PROLE_NONE, K, K, 0};
            enc[0] = (RadEnc)w[l].stored.dtype, sop.n_w = 1;
            ops[n_ops++] = cs->op[l], ops[n_ops++] = cs->op[n_link], ops[n_ops++] = cs->op[n_link + 1 + l];
        }
        sop.n_params = np;
        int lib = -1;
        char wy[160] = "";
        const RadKernel *k = rad_select_kernel(&c->g->sel, &sop, cs->n, cs->n, &lib, wy, sizeof wy);
        void *st = NULL;
        const RadPlugin *lp = k ? rad_engine_lib(c->en, lib, &st) : NULL;
        if (!k || !lp) return snprintf(why, wn, "chain link %s: %.120s", link[l], wy[0] ? wy : "no kernel"), 0;
        size_t used = strlen(chain_names);
        snprintf(chain_names + used, cn - used, "%s%s:%s:%s", l ? "+" : "", lp->info->name, k->op, k->variant);
        const int bc = bound_class(k->exactness);
        if (bc >= 0) *bitwise = 0, cls[bc] = 1; /* each link is a part: one bound of its class per output */
        else if (k->exactness != RAD_EXACT_BITWISE) *bitwise = 0, *tol += k->tolerance;
        Run run;
        if (run_prepare(c, op, k, lib, cs->n, &run)) return run_free(&run), snprintf(why, wn, "out of memory"), 0;
        run.k = k;
        /* the chain's weights: stored unless k reads the packed layout */
        int rc = run_kernel(c, cs, &run, w, ops, n_ops, pr, np);
        run_free(&run);
        if (rc) return snprintf(why, wn, "chain link %s:%s failed: %s", lp->info->name, k->variant, rad_status_name(rc)), 0;
    }
    for (int i = 0; i < cs->n_buf; i++) {
        Buf *b = &cs->buf[i];
        if (!b->ref) continue;
        if (!b->chain && !(b->chain = malloc(b->rows * b->cols * sizeof(float)))) return snprintf(why, wn, "out of memory"), 0;
        memcpy(b->chain, b->work, b->rows * b->cols * sizeof(float));
    }
    return 1;
}

/* ---- the walk ---------------------------------------------------------------------------------- */

static void progress(Kb *c) {
    c->done++;
    if (c->o->progress) c->o->progress(c->o->progress_user, c->done, c->total);
}

/* Row counts checked in bucket [lo, hi]: lo, the middle and hi (quick: lo); with o->rows, those
 * of them inside it (none: the bucket is not checked). out holds RAD_KBENCH_MAX_ROWS. */
static int bucket_rows(int64_t lo, int64_t hi, const RadKbenchOpts *o, int64_t *out) {
    const int quick = o->quick;
    int k = 0;
    if (o->n_rows) {
        for (int i = 0; i < o->n_rows && k < RAD_KBENCH_MAX_ROWS; i++)
            if (o->rows[i] >= lo && o->rows[i] <= hi) out[k++] = o->rows[i];
        return k;
    }
    out[k++] = lo;
    if (quick) return k;
    int64_t mid = lo + (hi - lo) / 2;
    if (mid != lo) out[k++] = mid;
    if (hi != mid && hi != lo) out[k++] = hi;
    return k;
}

static int op_selected(const Kb *c, const RadGOp *op) {
    if (op->declined || !rad_select_served(&op->sel)) return 0;
    if (c->o->op_mask && !c->o->op_mask[op - c->g->ops]) return 0;
    return !c->o->ops || fnmatch(c->o->ops, op->op, 0) == 0;
}

/* One case of one op, what every kernel run on it shares. */
typedef struct Try {
    const RadGOp *op;
    int o;                         /* its index */
    OpKind kind;
    int fused;
    Case *cs;
    Weight *w;
    int n_w;
    int64_t blo, bhi;              /* the bucket */
    int chain_ok, chain_bw;        /* the chain ran; it is bitwise */
    int chain_cls[N_BND];          /* a link of it is a GEMM of that bound class */
    double chain_tol;
    const char *chain_names, *chain_why;
    float *base[MAX_BUFS];         /* the compared outputs of the kernel at its default knobs (SAME_BITS checks) */
    int base_ok;                   /* base holds this kernel's (its default run succeeded) */
} Try;

/* Kernel ki of the op's table at knob values vals[nv] (NULL: its defaults), named `knobs` in the
 * report: a "ref" row (and a "chain" row for a fused op), timed under --bench. same: 1 keep
 * these outputs as the base, 2 they must equal the base bit for bit (a SAME_BITS knob). */
static int try_kernel(Kb *c, Try *x, int ki, const int64_t *vals, uint32_t nv, const char *knobs, int same, RadErr *e) {
    const RadSelectTable *t = &x->op->sel;
    const RadKernel *k = t->k[ki];
    Case *cs = x->cs;
    void *st;
    const RadPlugin *lp = rad_engine_lib(c->en, t->k_lib[ki], &st);
    char kname[128];
    snprintf(kname, sizeof kname, "%s:%s:%s", lp ? lp->info->name : "?", k->op, k->variant);
    RadKbenchRow *row = new_row(c, x->o, kname, x->blo, x->bhi, cs);
    if (!row) return rad_err_set(e, RAD_E_NOMEM, "out of memory");
    snprintf(row->knobs, sizeof row->knobs, "%s", knobs);
    Run run;
    if (run_prepare(c, x->op, k, t->k_lib[ki], t->range_hi, &run)) {
        run_free(&run);
        return rad_err_set(e, RAD_E_NOMEM, "out of memory for %s's workspace", kname);
    }
    if (vals) memcpy(run.knobs, vals, nv * sizeof *vals), run.n_knobs = nv;
    reset_work(cs);
    int krc = run_kernel(c, cs, &run, x->w, cs->op, cs->n_op, cs->params, cs->n_params);
    Err a = {0};
    const int bc = bound_class(k->exactness);
    int mine[N_BND] = {0}, both[N_BND];
    if (bc >= 0) mine[bc] = 1;
    for (int i = 0; i < N_BND; i++) both[i] = mine[i] || (x->fused && x->chain_cls[i]);
    if (!need_bounds(c, cs, x->w, both)) return run_free(&run), rad_err_set(e, RAD_E_NOMEM, "out of memory");
    if (same == 1) x->base_ok = !krc;
    if (krc) snprintf(row->why, sizeof row->why, "the kernel returned %s", rad_status_name(krc));
    else {
        for (int i = 0; i < cs->n_buf; i++) {
            const Buf *b = &cs->buf[i];
            Allow al = {.tol = bc >= 0 ? 0 : k->tolerance};
            if (bc >= 0) al.bnd[bc] = b->bnd[bc], al.n[bc] = 1;
            if (b->ref) compare(b->work, b->ref, b->rows, b->cols, &al, &a);
        }
        if (x->kind == OP_ATTN) check_append(cs, row->why, sizeof row->why);
        for (int i = 0; i < cs->n_buf && same && x->base_ok; i++) {
            const Buf *b = &cs->buf[i];
            const size_t bytes = b->rows * b->cols * sizeof(float);
            if (!b->ref) continue;
            if (same == 1) { /* the base the other values of a SAME_BITS knob must reproduce */
                if (!x->base[i] && !(x->base[i] = malloc(bytes))) return run_free(&run), rad_err_set(e, RAD_E_NOMEM, "out of memory");
                memcpy(x->base[i], b->work, bytes);
            } else if (x->base[i] && memcmp(x->base[i], b->work, bytes) != 0 && !row->why[0]) {
                uint64_t nd = 0;
                for (uint64_t j = 0; j < b->rows * b->cols; j++) nd += memcmp(&x->base[i][j], &b->work[j], 4) != 0;
                snprintf(row->why, sizeof row->why, "knob %s is SAME_BITS but %" PRIu64 " outputs differ from the defaults'",
                         knobs, nd);
            }
        }
    }
    const int bw = k->exactness == RAD_EXACT_BITWISE;
    finish_row(c, row, &a, bw, k->tolerance, mine);
    if (x->fused) { /* the same outputs against the chain */
        RadKbenchRow *cr = new_row(c, x->o, kname, x->blo, x->bhi, cs);
        if (!cr) return run_free(&run), rad_err_set(e, RAD_E_NOMEM, "out of memory");
        cr = &c->r->rows[c->r->n - 1], row = &c->r->rows[c->r->n - 2]; /* realloc moved them */
        snprintf(cr->check, sizeof cr->check, "chain");
        snprintf(cr->knobs, sizeof cr->knobs, "%s", knobs);
        Err ca = {0};
        if (krc) snprintf(cr->why, sizeof cr->why, "the kernel returned %s", rad_status_name(krc));
        else if (!x->chain_ok) snprintf(cr->why, sizeof cr->why, "%s", x->chain_why);
        else {
            for (int i = 0; i < cs->n_buf; i++) {
                const Buf *b = &cs->buf[i];
                Allow al = {.tol = (bc >= 0 ? 0 : k->tolerance) + x->chain_tol};
                for (int j = 0; j < N_BND; j++) al.bnd[j] = b->bnd[j], al.n[j] = mine[j] + x->chain_cls[j];
                if (b->chain) compare(b->work, b->chain, b->rows, b->cols, &al, &ca);
            }
        }
        finish_row(c, cr, &ca, bw && x->chain_bw, k->tolerance + x->chain_tol, both);
        if (!cr->pass && !cr->why[0]) snprintf(cr->why, sizeof cr->why, "disagrees with its chain %.130s", x->chain_names);
    }
    if (c->o->bench && !krc) {
        row = &c->r->rows[c->r->n - 1 - x->fused];
        time_kernel(c, cs, &run, x->w, row);
        traffic(cs, x->kind, x->w, x->n_w, k, &row->bytes, &row->flops);
        row->gbs = row->ns_med > 0 ? (double)row->bytes / row->ns_med : 0;
        row->gflops = row->ns_med > 0 ? (double)row->flops / row->ns_med : 0;
        row->bound_share = c->r->membw_gbs > 0 ? row->gbs / c->r->membw_gbs : 0;
        row->flop_share = c->r->peak_gflops > 0 ? row->gflops / c->r->peak_gflops : 0;
    }
    run_free(&run);
    return RAD_OK;
}

static int check_op(Kb *c, int o, RadErr *e) {
    const RadGOp *op = &c->g->ops[o];
    const RadSelectTable *t = &op->sel;
    const OpKind kind = op_kind(op->op);
    const int fused = kind == OP_ADD_RMSNORM || kind == OP_GEMM_MULTI;
    Weight w[4];
    int n_w = 0, rc = RAD_OK;
    if (op->n_w > 4) return rad_err_set(e, RAD_E_UNSUPPORTED, "op '%s': %u weights", op->op, op->n_w);
    for (uint32_t i = 0; i < op->n_w && !rc; i++, n_w++) rc = weight_load(c, op->w[i].id, kind != OP_EMBED, &w[i], e);
    for (int b = 0; b < t->n_buckets && !rc; b++) {
        const int64_t blo = t->lo[b], bhi = b + 1 < t->n_buckets ? t->lo[b + 1] - 1 : t->range_hi;
        int64_t rows[RAD_KBENCH_MAX_ROWS];
        const int nr = bucket_rows(blo, bhi, c->o, rows);
        for (int ri = 0; ri < nr && !rc; ri++) {
            const int nc = n_cases(op, kind, rows[ri], c->g, c->o->quick);
            for (int ci = 0; ci < nc && !rc; ci++) {
                Case cs;
                if ((rc = build_case(c, op, kind, w, n_w, rows[ri], ci, &cs, e))) {
                    case_free(&cs);
                    break;
                }
                char chain_names[200] = "", chain_why[160] = "";
                int chain_ok = 0, chain_bw = 1, chain_cls[N_BND] = {0};
                double chain_tol = 0;
                if (fused) chain_ok = run_chain(c, op, kind, &cs, w, chain_names, sizeof chain_names, &chain_bw, &chain_tol,
                                                chain_cls, chain_why, sizeof chain_why);
                Try x = {.op = op, .o = o, .kind = kind, .fused = fused, .cs = &cs, .w = w, .n_w = n_w, .blo = blo,
                         .bhi = bhi, .chain_ok = chain_ok, .chain_bw = chain_bw, .chain_tol = chain_tol,
                         .chain_names = chain_names, .chain_why = chain_why};
                memcpy(x.chain_cls, chain_cls, sizeof chain_cls);
                for (int ki = 0; ki < t->n && !rc; ki++) {
                    const RadKernel *k = t->k[ki];
                    if (rows[ri] < k->n_min || (k->n_max && rows[ri] > k->n_max)) continue;
                    const uint32_t nk = c->o->knobs ? rad_kernel_n_knobs(k) : 0;
                    int64_t def[RAD_KNOB_MAX];
                    int same = 0;
                    for (uint32_t i = 0; i < nk; i++) {
                        def[i] = rad_kernel_knob(k, i)->def;
                        same |= rad_kernel_knob(k, i)->effect == RAD_KNOB_SAME_BITS;
                    }
                    rc = try_kernel(c, &x, ki, NULL, 0, "", same ? 1 : 0, e);
                    for (uint32_t i = 0; i < nk && !rc; i++) { /* one knob at a time, the others at their defaults */
                        const RadKnob *kn = rad_kernel_knob(k, i);
                        if (rad_knob_n_max(kn) && rows[ri] > rad_knob_n_max(kn)) continue; /* it does not act here */
                        for (uint32_t v = 0; v < kn->n_values && !rc; v++) {
                            const int64_t val = kn->values[v];
                            if (val == kn->def) continue;
                            /* "threads" (docs/PLUGINS.md, "Knobs"): values past the call's threads repeat its cap */
                            if (!strcmp(kn->name, "threads") && val > (int64_t)c->kernel_threads) continue;
                            int64_t vals[RAD_KNOB_MAX];
                            memcpy(vals, def, nk * sizeof *vals);
                            vals[i] = val;
                            char kb[RAD_KBENCH_KNOBS];
                            snprintf(kb, sizeof kb, "%s=%" PRId64, kn->name, val);
                            rc = try_kernel(c, &x, ki, vals, nk, kb, kn->effect == RAD_KNOB_SAME_BITS ? 2 : 0, e);
                        }
                    }
                }
                for (int i = 0; i < MAX_BUFS; i++) free(x.base[i]);
                case_free(&cs);
                progress(c);
            }
        }
    }
    for (int i = 0; i < n_w; i++) weight_free(&w[i]);
    return rc;
}

int rad_kbench_run(RadEngine *en, const RadKbenchOpts *o, RadKbenchReport *r, RadErr *e) {
    memset(r, 0, sizeof *r);
    Kb c = {.en = en, .g = rad_engine_graph(en), .o = o, .r = r, .rng = {0x9e3779b97f4a7c15ull}};
    const RadEngineLimits lim = rad_engine_limits(en);
    c.kernel_threads = lim.n_threads;
    c.world = rad_engine_world(en);
    c.nt = r->n_threads = o->n_threads ? o->n_threads : lim.n_threads;
    int rc = rad_model_open(o->model, &c.m, e);
    if (rc) return rad_model_free(&c.m), rc;
    if (o->bench) r->membw_gbs = rad_kbench_membw(c.nt), r->peak_gflops = rad_kbench_peak_gflops(c.nt);
    /* the work, for the progress bar */
    for (int i = 0; i < c.g->n_ops; i++) {
        const RadGOp *op = &c.g->ops[i];
        const OpKind kind = op_kind(op->op);
        if (!op_selected(&c, op)) continue;
        if (kind == OP_NONE) {
            if (!strstr(r->skipped, op->op)) {
                size_t u = strlen(r->skipped);
                snprintf(r->skipped + u, sizeof r->skipped - u, "%s%s", u ? ", " : "", op->op);
                r->n_skipped++;
            }
            continue;
        }
        const RadSelectTable *t = &op->sel;
        for (int b = 0; b < t->n_buckets; b++) {
            int64_t rows[RAD_KBENCH_MAX_ROWS];
            const int nr = bucket_rows(t->lo[b], b + 1 < t->n_buckets ? t->lo[b + 1] - 1 : t->range_hi, o, rows);
            for (int ri = 0; ri < nr; ri++) c.total += (uint64_t)n_cases(op, kind, rows[ri], c.g, o->quick);
        }
    }
    for (int i = 0; i < c.g->n_ops && !rc; i++) {
        if (!op_selected(&c, &c.g->ops[i]) || op_kind(c.g->ops[i].op) == OP_NONE) continue;
        r->n_ops++;
        const int first = r->n;
        rc = check_op(&c, i, e);
        if (!rc && o->on_op) o->on_op(o->on_op_user, r, first, i);
    }
    rad_model_free(&c.m);
    return rc;
}

void rad_kbench_report_free(RadKbenchReport *r) {
    free(r->rows);
    memset(r, 0, sizeof *r);
}

void rad_kbench_progress_bar(void *user, uint64_t done, uint64_t total) {
    (void)user;
    enum { W = 40 };
    int k = total ? (int)(done * W / total) : W;
    fprintf(stderr, "\r[%.*s%*s] %" PRIu64 "/%" PRIu64 " cases", k, "########################################", W - k, "",
            done, total);
    if (done == total) fprintf(stderr, "\r%*s\r", W + 40, "");
}

/* ---- the bandwidth bound ------------------------------------------------------------------------ */

typedef uint64_t v4u64 __attribute__((vector_size(32)));
/* fn on parts [0, nt) of `size` bytes each, part 0 here, the rest on threads (one that cannot
 * start runs here too); returns the nanoseconds it took. */
static uint64_t on_threads(uint32_t nt, void *(*fn)(void *), void *parts, size_t size) {
    enum { MAXT = 64 };
    pthread_t th[MAXT];
    int started[MAXT] = {0};
    char *p = parts;
    const uint64_t a = now_ns();
    for (uint32_t t = 1; t < nt && t < MAXT; t++) started[t] = pthread_create(&th[t], NULL, fn, p + t * size) == 0;
    fn(p);
    for (uint32_t t = 1; t < nt && t < MAXT; t++) {
        if (started[t]) pthread_join(th[t], NULL);
        else fn(p + t * size);
    }
    return now_ns() - a;
}

typedef struct BwPart {
    const v4u64 *p;
    size_t n;                      /* vectors */
    uint64_t sum;
} BwPart;

/* Eight independent sums of 32-byte loads, so the loads and not the adds are the limit. */
static void *bw_read(void *arg) {
    BwPart *b = arg;
    v4u64 s[8] = {{0}};
    for (size_t i = 0; i + 8 <= b->n; i += 8)
        for (int j = 0; j < 8; j++) s[j] += b->p[i + (size_t)j];
    uint64_t r = 0;
    for (int j = 0; j < 8; j++) r += s[j][0] + s[j][1] + s[j][2] + s[j][3];
    b->sum = r;
    return NULL;
}

double rad_kbench_membw(uint32_t n_threads) {
    enum { MAXT = 64 };
    const size_t bytes = (size_t)256 << 20;
    uint32_t nt = n_threads < 1 ? 1 : n_threads > MAXT ? MAXT : n_threads;
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return 0;
#ifdef MADV_HUGEPAGE
    madvise(m, bytes, MADV_HUGEPAGE); /* a hint; the weights are on huge pages too */
#endif
    uint64_t *u = m;
    for (size_t i = 0; i < bytes / 8; i++) u[i] = i;
    const size_t vecs = bytes / sizeof(v4u64), per = vecs / nt;
    double best = 0;
    volatile uint64_t sink = 0;
    for (int pass = 0; pass < 3; pass++) {
        BwPart parts[MAXT];
        for (uint32_t t = 0; t < nt; t++) parts[t] = (BwPart){(const v4u64 *)m + t * per, per, 0};
        const double s = (double)on_threads(nt, bw_read, parts, sizeof parts[0]) * 1e-9, gbs = (double)(per * nt * sizeof(v4u64)) / s / 1e9;
        for (uint32_t t = 0; t < nt; t++) sink += parts[t].sum;
        if (gbs > best) best = gbs;
    }
    (void)sink;
    munmap(m, bytes);
    return best;
}

/* ---- the compute bound: f32 multiply-adds ----------------------------------------------------- */

typedef struct FlopPart {
    uint64_t iters;
    float out;
} FlopPart;

#if defined(__x86_64__)
#include <immintrin.h>
/* Ten independent chains of 8-wide FMAs (enough to cover the latency of two FMA ports), each in a
 * register of its own. */
__attribute__((target("avx2,fma"))) static void *flop_avx2(void *arg) {
    FlopPart *f = arg;
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    __m256 a0 = _mm256_set1_ps(0), a1 = _mm256_set1_ps(1), a2 = _mm256_set1_ps(2), a3 = _mm256_set1_ps(3),
           a4 = _mm256_set1_ps(4), a5 = _mm256_set1_ps(5), a6 = _mm256_set1_ps(6), a7 = _mm256_set1_ps(7),
           a8 = _mm256_set1_ps(8), a9 = _mm256_set1_ps(9);
    for (uint64_t i = 0; i < f->iters; i++) {
        a0 = _mm256_fmadd_ps(a0, m, c), a1 = _mm256_fmadd_ps(a1, m, c), a2 = _mm256_fmadd_ps(a2, m, c);
        a3 = _mm256_fmadd_ps(a3, m, c), a4 = _mm256_fmadd_ps(a4, m, c), a5 = _mm256_fmadd_ps(a5, m, c);
        a6 = _mm256_fmadd_ps(a6, m, c), a7 = _mm256_fmadd_ps(a7, m, c), a8 = _mm256_fmadd_ps(a8, m, c);
        a9 = _mm256_fmadd_ps(a9, m, c);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(_mm256_add_ps(a6, a7), _mm256_add_ps(a8, a9))));
    float t[8];
    _mm256_storeu_ps(t, s);
    f->out = t[0];
    return NULL;
}
#define FLOP_PER_ITER (10.0 * 8 * 2)
#endif

static void *flop_generic(void *arg) { /* portable: what the compiler makes of eight chains */
    FlopPart *f = arg;
    float a[8];
    for (int j = 0; j < 8; j++) a[j] = (float)j;
    for (uint64_t i = 0; i < f->iters; i++)
        for (int j = 0; j < 8; j++) a[j] = a[j] * 0.999999f + 1e-7f;
    f->out = a[0] + a[7];
    return NULL;
}

double rad_kbench_peak_gflops(uint32_t n_threads) {
    enum { MAXT = 64 };
    uint32_t nt = n_threads < 1 ? 1 : n_threads > MAXT ? MAXT : n_threads;
    void *(*fn)(void *) = flop_generic;
    double per_iter = 8.0 * 2;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) fn = flop_avx2, per_iter = FLOP_PER_ITER;
#endif
    double best = 0;
    volatile float sink = 0;
    for (int pass = 0; pass < 3; pass++) {
        FlopPart parts[MAXT];
        for (uint32_t t = 0; t < nt; t++) parts[t] = (FlopPart){20000000u / 4, 0};
        const double s = (double)on_threads(nt, fn, parts, sizeof parts[0]) * 1e-9, gf = per_iter * (double)parts[0].iters * nt / s / 1e9;
        for (uint32_t t = 0; t < nt; t++) sink += parts[t].out;
        if (gf > best) best = gf;
    }
    (void)sink;
    return best;
}
