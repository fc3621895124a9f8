/* ref_encoder.c — the encoder ops of docs/OPS.md: layernorm, gelu, attn_seq, pool, l2_normalize
 * (BERT / all-MiniLM-L6-v2, EmbeddingGemma).
 *
 *   layernorm     BITWISE: docs/OPS.md's reference itself — the row's sum and the sum of squared
 *                 deviations in double, in index order, then ((x - mean) · r) · gamma + beta in
 *                 double, rounded once to f32. Two passes over the row, no fused multiply-add.
 *   gelu          TOLERANCE 1e-6: 0.5·x·(1 + erf(x/√2)) in double, rounded once, with the C
 *                 library's erf (not correctly rounded everywhere, hence a bound, not bits).
 *   attn_seq      TOLERANCE 1e-5: bidirectional attention inside each sequence of the step (no KV
 *                 cache). Scores are f32 dot products (8 lanes with FMA on AVX2, index order in
 *                 portable C); the softmax subtracts the row's maximum, its exponentials are
 *                 ref_exp8 (AVX2) or exp in double rounded to f32 (portable); the denominator and
 *                 the output sum run in double, the output over blocks of 64 keys summed in f32
 *                 first. Work items are (16 rows, query head) pairs taken from a shared counter;
 *                 a row's arithmetic depends only on its own keys, never on the items or threads.
 *   pool          BITWISE: the reference's double sum over a sequence's rows in row order (mean,
 *                 mean_sqrt_len), a copy (cls, last) or an f32 compare (max).
 *   l2_normalize  BITWISE: the reference's double sum of squares in index order, its square root
 *                 clamped below at 1e-12, one double division per element rounded to f32.
 *
 * Everything is checked before anything is written (docs/OPS.md, "Errors"). */
#include <math.h>
#include <stdatomic.h>

#include "ref_common.h"
#include "ref_math.h"

/* ---- the step's sequences (attn_seq, pool) -------------------------------------------------------- */

/* The batch's cu_seqlens over M rows: RAD_E_ARG when there is no batch, no sequence, no offsets, or
 * they do not start at 0, go down, or end anywhere but M. Empty sequences are allowed here (pool
 * refuses them itself). */
static int check_seqs(const RadKernelArgs *a, int64_t M) {
    const struct RadBatch *b = a->batch;
    if (!b || b->struct_size < offsetof(struct RadBatch, cu_seqlens) + sizeof b->cu_seqlens) return RAD_E_ARG;
    if (b->n_seq < 1 || !b->cu_seqlens) return RAD_E_ARG;
    const int32_t *cu = b->cu_seqlens;
    if (cu[0] != 0 || (int64_t)cu[b->n_seq] != M) return RAD_E_ARG;
    for (uint32_t s = 0; s < b->n_seq; s++)
        if (cu[s + 1] < cu[s]) return RAD_E_ARG;
    return RAD_OK;
}

/* The sequence owning row t: the s with cu[s] <= t < cu[s + 1] (empty sequences skipped). */
static int64_t seq_of_row(const int32_t *cu, uint32_t n_seq, int64_t t) {
    int64_t lo = 0, hi = n_seq; /* cu[lo] <= t < cu[hi] */
    while (hi - lo > 1) {
        const int64_t mid = (lo + hi) / 2;
        if (cu[mid] <= t) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* ---- layernorm ------------------------------------------------------------------------------------ */

typedef struct LnCtx {
    const RadKArg *x, *out;
    const float *gamma, *beta;
    int64_t M, N;
    double eps;
} LnCtx;

static void ln_task(void *ctx, int tid, int nth) {
    const LnCtx *c = ctx;
    int64_t r0, r1;
    ref_split(c->M, tid, nth, 1, &r0, &r1);
    for (int64_t i = r0; i < r1; i++) {
        const float *x = ref_frow(c->x, (uint64_t)i);
        float *o = ref_frow(c->out, (uint64_t)i); /* may be x: element j is read before it is written */
        double s = 0.0;
        for (int64_t j = 0; j < c->N; j++) s += (double)x[j];
        const double mean = s / (double)c->N;
        double ss = 0.0;
        for (int64_t j = 0; j < c->N; j++) {
            const double d = (double)x[j] - mean;
            const double sq = d * d;
            ss += sq;
        }
        const double var = ss / (double)c->N;
        const double r = 1.0 / sqrt(var + c->eps);
        for (int64_t j = 0; j < c->N; j++) {
            const double d = (double)x[j] - mean;
            const double y = d * r;
            const double yg = y * (double)c->gamma[j];
            o[j] = (float)(yg + (double)c->beta[j]);
        }
    }
}

int ref_run_layernorm(const RadKernelArgs *a) {
    int rc = ref_preamble(a, 4);
    if (rc) return rc;
    int64_t N;
    double eps;
    if (!ref_pint(a, "N", &N) || !ref_pflt(a, "eps", &eps) || N < 1 || !(eps >= 0.0) || !isfinite(eps)) return RAD_E_ARG;
    const RadKArg *g = &a->args[0], *b = &a->args[1];
    LnCtx c = {&a->args[2], &a->args[3], NULL, NULL, a->n, N, eps};
    if (!ref_weight_ok(g, RAD_ENC_PLAIN_FLOATS, 1, (uint64_t)N) || !ref_weight_ok(b, RAD_ENC_PLAIN_FLOATS, 1, (uint64_t)N))
        return RAD_E_SHAPE;
    if (!ref_buf_ok(c.x, (uint64_t)c.M, (uint64_t)N) || !ref_buf_ok(c.out, (uint64_t)c.M, (uint64_t)N)) return RAD_E_SHAPE;
    /* gamma and beta as f32: their own bytes, or both widened into scratch slot 2 (one slot, two halves) */
    const int isa = ref_isa(a);
    if (g->dtype == RAD_F32 && b->dtype == RAD_F32) {
        c.gamma = g->data, c.beta = b->data;
    } else {
        float *f = ref_scratch(2, (size_t)(2 * N) * sizeof(float));
        if (!f) return RAD_E_NOMEM;
        ref_dequant_row(isa, g->dtype, g->data, f, (uint64_t)N);
        ref_dequant_row(isa, b->dtype, b->data, f + N, (uint64_t)N);
        c.gamma = f, c.beta = f + N;
    }
    int nth = ref_threads(a, (double)c.M * (double)N, 16384.0);
    if (nth > c.M) nth = (int)c.M;
    ref_parallel(a, nth, ln_task, &c);
    return RAD_OK;
}

/* ---- gelu (exact, erf) ------------------------------------------------------------------------------ */

typedef struct GeluCtx {
    const RadKArg *x, *out;
    int64_t M, N;
} GeluCtx;

static void gelu_task(void *ctx, int tid, int nth) {
    const GeluCtx *c = ctx;
    int64_t r0, r1;
    ref_split(c->M, tid, nth, 1, &r0, &r1);
    for (int64_t i = r0; i < r1; i++) {
        const float *x = ref_frow(c->x, (uint64_t)i);
        float *o = ref_frow(c->out, (uint64_t)i); /* may be x */
        for (int64_t j = 0; j < c->N; j++) {
            const double v = (double)x[j];
            o[j] = (float)(0.5 * v * (1.0 + erf(v * 0.7071067811865476)));
        }
    }
}

int ref_run_gelu(const RadKernelArgs *a) {
    int rc = ref_preamble(a, 2);
    if (rc) return rc;
    int64_t N;
    if (!ref_pint(a, "N", &N) || N < 1) return RAD_E_ARG;
    GeluCtx c = {&a->args[0], &a->args[1], a->n, N};
    if (!ref_buf_ok(c.x, (uint64_t)c.M, (uint64_t)N) || !ref_buf_ok(c.out, (uint64_t)c.M, (uint64_t)N)) return RAD_E_SHAPE;
    int nth = ref_threads(a, (double)c.M * (double)N, 8192.0);
    if (nth > c.M) nth = (int)c.M;
    ref_parallel(a, nth, gelu_task, &c);
    return RAD_OK;
}

/* ---- attn_seq ------------------------------------------------------------------------------------- */

#define SEQ_ROWS 16   /* query rows per work item */
#define PV_BLOCK 64   /* keys summed in f32 before the double total */

typedef struct SeqAttnCtx {
    const RadKArg *q, *k, *v, *out;
    const int32_t *cu;
    uint32_t n_seq;
    int64_t M, n_head, hd, rep, window, n_items;
    float scale;
    int isa;
    _Atomic int64_t next;
} SeqAttnCtx;

static float dot_generic(const float *a, const float *b, int64_t n) {
    float acc = 0.0f;
    for (int64_t d = 0; d < n; d++) {
        const float p = a[d] * b[d];
        acc = acc + p;
    }
    return acc;
}

static void exp_generic(float *s, int64_t n, float m) {
    for (int64_t j = 0; j < n; j++) s[j] = (float)exp((double)(s[j] - m));
}

/* facc[0..hd) = sum over keys j in [0, n) of p[j] * v_j[0..hd) */
static void pv_generic(const float *p, const float *v0, uint64_t vs, int64_t n, int64_t hd, float *facc) {
    for (int64_t d = 0; d < hd; d++) facc[d] = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        const float *v = v0 + (uint64_t)j * vs;
        for (int64_t d = 0; d < hd; d++) {
            const float pv = p[j] * v[d];
            facc[d] = facc[d] + pv;
        }
    }
}

#if REF_X86
REF_AVX2 static float dot_avx2(const float *a, const float *b, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    int64_t d = 0;
    for (; d + 8 <= n; d += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), acc);
    if (d < n) acc = _mm256_fmadd_ps(ref_load_tail(a + d, (int)(n - d)), ref_load_tail(b + d, (int)(n - d)), acc);
    return ref_hsum8(acc);
}

REF_AVX2 static void exp_avx2(float *s, int64_t n, float m) {
    const __m256 vm = _mm256_set1_ps(m);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(s + j, ref_exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm)));
    if (j < n) ref_store_tail(s + j, ref_exp8(_mm256_sub_ps(ref_load_tail(s + j, (int)(n - j)), vm)), (int)(n - j));
}

REF_AVX2 static void pv_avx2(const float *p, const float *v0, uint64_t vs, int64_t n, int64_t hd, float *facc) {
    for (int64_t d = 0; d < hd; d += 8) {
        const int t = hd - d < 8 ? (int)(hd - d) : 8;
        __m256 acc = _mm256_setzero_ps();
        if (t == 8)
            for (int64_t j = 0; j < n; j++)
                acc = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), _mm256_loadu_ps(v0 + (uint64_t)j * vs + d), acc);
        else
            for (int64_t j = 0; j < n; j++)
                acc = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), ref_load_tail(v0 + (uint64_t)j * vs + d, t), acc);
        if (t == 8) _mm256_storeu_ps(facc + d, acc);
        else ref_store_tail(facc + d, acc, t);
    }
}
#endif

/* Row t, query head h: out[t][h] = softmax(q·K^T · scale) V over the row's keys. sc holds one score
 * per key of the sequence, facc hd floats, dacc hd doubles. */
static void seq_attend(const SeqAttnCtx *c, int64_t t, int64_t h, float *sc, float *facc, double *dacc) {
    const int64_t s = seq_of_row(c->cu, c->n_seq, t), b0 = c->cu[s], L = c->cu[s + 1] - b0, i = t - b0;
    int64_t lo = 0, hi = L;
    if (c->window) { /* |i - j| < window */
        lo = i - c->window + 1 > 0 ? i - c->window + 1 : 0;
        hi = i + c->window < L ? i + c->window : L;
    }
    const int64_t n = hi - lo, g = h / c->rep, hd = c->hd;
    const float *q = ref_frow(c->q, (uint64_t)t) + h * hd;
    const float *k0 = ref_frow(c->k, (uint64_t)(b0 + lo)) + g * hd, *v0 = ref_frow(c->v, (uint64_t)(b0 + lo)) + g * hd;
    const uint64_t ks = c->k->row_stride, vs = c->v->row_stride;
    const int avx2 = REF_X86 && c->isa >= REF_ISA_AVX2;
    (void)avx2;
    float m = -INFINITY;
    for (int64_t j = 0; j < n; j++) {
        float d;
#if REF_X86
        if (avx2) d = dot_avx2(q, k0 + (uint64_t)j * ks, hd);
        else
#endif
            d = dot_generic(q, k0 + (uint64_t)j * ks, hd);
        sc[j] = d * c->scale;
        if (sc[j] > m) m = sc[j];
    }
#if REF_X86
    if (avx2) exp_avx2(sc, n, m);
    else
#endif
        exp_generic(sc, n, m);
    double l = 0.0;
    for (int64_t j = 0; j < n; j++) l += (double)sc[j];
    for (int64_t d = 0; d < hd; d++) dacc[d] = 0.0;
    for (int64_t j0 = 0; j0 < n; j0 += PV_BLOCK) {
        const int64_t nb = n - j0 < PV_BLOCK ? n - j0 : PV_BLOCK;
#if REF_X86
        if (avx2) pv_avx2(sc + j0, v0 + (uint64_t)j0 * vs, vs, nb, hd, facc);
        else
#endif
            pv_generic(sc + j0, v0 + (uint64_t)j0 * vs, vs, nb, hd, facc);
        for (int64_t d = 0; d < hd; d++) dacc[d] += (double)facc[d];
    }
    float *o = ref_frow(c->out, (uint64_t)t) + h * hd;
    for (int64_t d = 0; d < hd; d++) o[d] = (float)(dacc[d] / l);
}

static void seq_attn_task(void *ctx, int tid, int nth) {
    (void)tid, (void)nth;
    SeqAttnCtx *c = ctx;
    /* scores for the longest row (at most M keys), then facc, then dacc */
    const size_t ns = ((size_t)c->M + 16) & ~(size_t)7;
    uint8_t *mem = ref_scratch(0, ns * sizeof(float) + (size_t)c->hd * (sizeof(float) + sizeof(double)) + 64);
    if (!mem) return; /* this thread takes no item: the others (the caller's scratch was grown first) take them all */
    float *sc = (float *)(void *)mem, *facc = sc + ns;
    double *dacc = (double *)(void *)(((uintptr_t)(facc + c->hd) + 7) & ~(uintptr_t)7);
    for (;;) {
        const int64_t it = atomic_fetch_add(&c->next, 1);
        if (it >= c->n_items) break;
        const int64_t chunk = it / c->n_head, h = it % c->n_head;
        const int64_t t1 = (chunk + 1) * SEQ_ROWS < c->M ? (chunk + 1) * SEQ_ROWS : c->M;
        for (int64_t t = chunk * SEQ_ROWS; t < t1; t++) seq_attend(c, t, h, sc, facc, dacc);
    }
}

int ref_run_attn_seq(const RadKernelArgs *a) {
    int rc = ref_preamble(a, 4);
    if (rc) return rc;
    SeqAttnCtx c;
    memset(&c, 0, sizeof c);
    int64_t n_kv;
    double scale;
    if (!ref_pint(a, "n_head", &c.n_head) || !ref_pint(a, "n_head_kv", &n_kv) || !ref_pint(a, "head_dim", &c.hd) ||
        !ref_pflt(a, "scale", &scale))
        return RAD_E_ARG;
    if (!ref_pint(a, "window", &c.window)) c.window = 0; /* omitted: every key of the sequence */
    if (c.n_head < 1 || n_kv < 1 || c.hd < 1 || c.n_head % n_kv || c.window < 0 || !isfinite(scale)) return RAD_E_ARG;
    if (scale == 0.0) scale = 1.0 / sqrt((double)c.hd);
    c.M = a->n;
    c.rep = c.n_head / n_kv;
    c.scale = (float)scale;
    c.q = &a->args[0], c.k = &a->args[1], c.v = &a->args[2], c.out = &a->args[3];
    const uint64_t qw = (uint64_t)(c.n_head * c.hd), kw = (uint64_t)(n_kv * c.hd);
    if (!ref_buf_ok(c.q, (uint64_t)c.M, qw) || !ref_buf_ok(c.k, (uint64_t)c.M, kw) || !ref_buf_ok(c.v, (uint64_t)c.M, kw) ||
        !ref_buf_ok(c.out, (uint64_t)c.M, qw))
        return RAD_E_SHAPE;
    if ((rc = check_seqs(a, c.M))) return rc;
    c.cu = a->batch->cu_seqlens;
    c.n_seq = a->batch->n_seq;
    c.isa = ref_isa(a);
    c.n_items = (c.M + SEQ_ROWS - 1) / SEQ_ROWS * c.n_head;
    double work = 0;
    for (uint32_t s = 0; s < c.n_seq; s++) {
        const double L = (double)(c.cu[s + 1] - c.cu[s]);
        work += L * (c.window && 2.0 * (double)c.window - 1.0 < L ? 2.0 * (double)c.window - 1.0 : L);
    }
    work *= (double)qw * 2.0;
    int nth = ref_threads(a, work, 16384.0);
    if (nth > c.n_items) nth = (int)c.n_items;
    /* the calling thread's scratch, grown here: an allocation that fails is refused before any write
     * (the pool's threads grow their own; a failure there is the same size and equally unlikely) */
    const size_t ns = ((size_t)c.M + 16) & ~(size_t)7;
    if (!ref_scratch(0, ns * sizeof(float) + (size_t)c.hd * (sizeof(float) + sizeof(double)) + 64)) return RAD_E_NOMEM;
    atomic_init(&c.next, 0);
    ref_parallel(a, nth, seq_attn_task, &c);
    return RAD_OK;
}

/* ---- pool ----------------------------------------------------------------------------------------- */

enum { POOL_MEAN = 0, POOL_CLS = 1, POOL_LAST = 2, POOL_MAX = 3, POOL_MEAN_SQRT = 4 };
#define POOL_COLS 64 /* columns per work item */

typedef struct PoolCtx {
    const RadKArg *x, *out;
    const int32_t *cu;
    int64_t N, n_items, n_blk, mode;
} PoolCtx;

static void pool_task(void *ctx, int tid, int nth) {
    const PoolCtx *c = ctx;
    int64_t i0, i1;
    ref_split(c->n_items, tid, nth, 1, &i0, &i1);
    for (int64_t it = i0; it < i1; it++) {
        const int64_t s = it / c->n_blk, j0 = it % c->n_blk * POOL_COLS;
        const int64_t nj = c->N - j0 < POOL_COLS ? c->N - j0 : POOL_COLS;
        const int64_t r0 = c->cu[s], r1 = c->cu[s + 1];
        float *o = ref_frow(c->out, (uint64_t)s) + j0;
        if (c->mode == POOL_CLS || c->mode == POOL_LAST) {
            memcpy(o, ref_frow(c->x, (uint64_t)(c->mode == POOL_CLS ? r0 : r1 - 1)) + j0, (size_t)nj * sizeof(float));
        } else if (c->mode == POOL_MAX) {
            float m[POOL_COLS];
            memcpy(m, ref_frow(c->x, (uint64_t)r0) + j0, (size_t)nj * sizeof(float));
            for (int64_t r = r0 + 1; r < r1; r++) {
                const float *x = ref_frow(c->x, (uint64_t)r) + j0;
                for (int64_t j = 0; j < nj; j++)
                    if (x[j] > m[j] || x[j] != x[j]) m[j] = x[j]; /* a NaN is kept, as torch.max */
            }
            memcpy(o, m, (size_t)nj * sizeof(float));
        } else {
            double acc[POOL_COLS];
            for (int64_t j = 0; j < nj; j++) acc[j] = 0.0;
            for (int64_t r = r0; r < r1; r++) {
                const float *x = ref_frow(c->x, (uint64_t)r) + j0;
                for (int64_t j = 0; j < nj; j++) acc[j] += (double)x[j];
            }
            const double len = (double)(r1 - r0), div = c->mode == POOL_MEAN ? len : sqrt(len);
            for (int64_t j = 0; j < nj; j++) o[j] = (float)(acc[j] / div);
        }
    }
}

int ref_run_pool(const RadKernelArgs *a) {
    int rc = ref_preamble(a, 2);
    if (rc) return rc;
    int64_t N, mode;
    if (!ref_pint(a, "N", &N) || !ref_pint(a, "mode", &mode) || N < 1 || mode < POOL_MEAN || mode > POOL_MEAN_SQRT)
        return RAD_E_ARG;
    const RadKArg *x = &a->args[0], *out = &a->args[1];
    if (!ref_buf_ok(x, (uint64_t)a->n, (uint64_t)N)) return RAD_E_SHAPE;
    if ((rc = check_seqs(a, a->n))) return rc;
    const uint32_t S = a->batch->n_seq;
    const int32_t *cu = a->batch->cu_seqlens;
    for (uint32_t s = 0; s < S; s++)
        if (cu[s + 1] == cu[s]) return RAD_E_ARG; /* a sequence of no tokens has nothing to pool */
    if (!ref_buf_ok(out, S, (uint64_t)N)) return RAD_E_SHAPE;
    PoolCtx c = {x, out, cu, N, 0, (N + POOL_COLS - 1) / POOL_COLS, mode};
    c.n_items = (int64_t)S * c.n_blk;
    int nth = ref_threads(a, (double)a->n * (double)N, 65536.0);
    if (nth > c.n_items) nth = (int)c.n_items;
    ref_parallel(a, nth, pool_task, &c);
    return RAD_OK;
}

/* ---- l2_normalize --------------------------------------------------------------------------------- */

typedef struct L2Ctx {
    const RadKArg *x;
    int64_t M, N;
} L2Ctx;

static void l2_task(void *ctx, int tid, int nth) {
    const L2Ctx *c = ctx;
    int64_t r0, r1;
    ref_split(c->M, tid, nth, 1, &r0, &r1);
    for (int64_t i = r0; i < r1; i++) {
        float *x = ref_frow(c->x, (uint64_t)i);
        double ss = 0.0;
        for (int64_t j = 0; j < c->N; j++) {
            const double sq = (double)x[j] * (double)x[j];
            ss += sq;
        }
        const double norm = sqrt(ss), d = norm < 1e-12 ? 1e-12 : norm; /* a NaN norm stays NaN */
        for (int64_t j = 0; j < c->N; j++) x[j] = (float)((double)x[j] / d);
    }
}

int ref_run_l2_normalize(const RadKernelArgs *a) {
    int rc = ref_preamble(a, 1);
    if (rc) return rc;
    int64_t N;
    if (!ref_pint(a, "N", &N) || N < 1) return RAD_E_ARG;
    L2Ctx c = {&a->args[0], a->n, N};
    if (!ref_buf_ok(c.x, (uint64_t)c.M, (uint64_t)N)) return RAD_E_SHAPE;
    int nth = ref_threads(a, (double)c.M * (double)N, 32768.0);
    if (nth > c.M) nth = (int)c.M;
    ref_parallel(a, nth, l2_task, &c);
    return RAD_OK;
}
