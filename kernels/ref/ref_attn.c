/* ref_attn.c — attn_paged: causal multi-head attention over the paged KV pool (docs/OPS.md).
 *
 * One call serves prefill, decode and mixed steps: the rows of the step are the batch's tokens,
 * sequence s owning rows [cu_seqlens[s], cu_seqlens[s+1]) whose keys and values go to cache
 * slots [ctx_lens[s] - q_lens[s], ctx_lens[s]). Everything is checked first (operands, the
 * batch, the KV state, every block-table entry a row will touch); then every row's k and v is
 * appended (rounded to the cache type: f32, f16 or bf16, to nearest even), and only then does
 * any row attend, so the rows of a prefill chunk see each other's keys.
 *
 * The pool is "HND": block b holds B key slots then B value slots, each [n_head_kv][B][hd], so
 * one head's page is contiguous. Query head h reads KV head h / (n_head / n_head_kv) (GQA).
 *
 * Sliding window (`window` > 0): the row at position i sees the keys at positions j with
 * j <= i and i - j < window (transformers' sliding_window_overlay; llama.cpp's SWA mask is the
 * same), so it reads slots [max(0, i + 1 - window), i] and no block before them: the engine
 * releases the blocks a window has left, and their table entries are never looked at.
 *
 * Softmax: online over chunks of slots (a running maximum, the sum and the output rescaled by
 * e^(m_old - m_new) when the maximum grows), which needs no buffer the size of the context and
 * is numerically stable; the result is the reference's within rounding: RAD_EXACT_TOLERANCE
 * 1e-5. A row's keys are cut into parts (32 slots, more past 512 keys, at most 16 parts) whose
 * states are merged in order; the order of every sum depends only on the slot index and the
 * row's key count, so a row's result does not depend on the other rows or on the threads. Work
 * items are (block of up to 4 rows, KV head) pairs — the query heads of a group read their keys
 * and values once — or, for a few rows (decode), (row, KV head, part) triples whose states are
 * merged after, or single (row, head) pairs; the per-head arithmetic is the same every way. On
 * AVX2 the rows of a block that share a sequence, a first key and a part size (a prefill until a
 * window slides) walk the chunks together: each chunk's K and V rows are loaded and converted
 * once for the block, and register tiles use each load for several (row, head) pairs, while
 * every (row, head) keeps its own chunk lengths and its own order of every sum (see "a block of
 * prefill rows" below): a row's bits are the ones it gets alone, as a decode row. */
#include <math.h>
#include <stdatomic.h>

#include "ref_common.h"
#include "ref_math.h"
#include "ref_quant.h"

#define MAX_REP 8 /* query heads handled together */
#define PARTS_MAX 16 /* a row's keys are cut into at most this many parts */
#define BLOCK_ROWS 4 /* query rows per item in a prefill */
#define BLOCK_PAIRS 32 /* (row, head) pairs a block holds: BLOCK_ROWS · MAX_REP */

typedef struct AttnCtx {
    const struct RadBatch *b;
    const RadKvState *kv;
    const RadKArg *q, *k, *v, *out;
    int64_t M, n_head, n_kv, hd, rep;
    int64_t window;       /* keys a row sees, its own included (0: every key before it) */
    float scale;
    int isa;
    RadDType dt;
    size_t elem;
    uint32_t B;
    uint64_t block_bytes;
    int64_t chunk;        /* slots per softmax chunk */
    int by_head;          /* items are (row, head) rather than (row, KV head) */
    int split;            /* items are (row, KV head, part): partial states to part_buf, merged after */
    int fused;            /* split over decode rows only: the item of a row's last part appends the row's
                             k, v first, and whoever finishes a (row, KV head)'s last part merges it */
    int64_t brows;        /* rows per item: consecutive ones, a block (split, by_head: 1) */
    int64_t n_items;
    float *part_buf;      /* split: [M][n_head][PARTS_MAX][hd + 2] (m, l, acc) */
    _Atomic int32_t *left;/* fused: [M][n_kv] parts not yet finished */
    float *conv;          /* f16/bf16: [parts][2][chunk][hd] rows converted to f32 */
    _Atomic int64_t next; /* next item to take */
} AttnCtx;

/* The sequence that owns row t (cu_seqlens is sorted; empty sequences are skipped). */
static int64_t seq_of(const AttnCtx *c, int64_t t) {
    const int32_t *cu = c->b->cu_seqlens;
    int64_t lo = 0, hi = c->b->n_seq; /* cu[lo] <= t < cu[hi] */
    while (hi - lo > 1) {
        const int64_t mid = (lo + hi) / 2;
        if (cu[mid] <= t) lo = mid;
        else hi = mid;
    }
    return lo;
}

static uint8_t *kv_slot(const AttnCtx *c, int64_t s, int64_t slot, int64_t g, int is_v) {
    const int32_t blk = c->kv->block_table[(uint64_t)s * c->kv->max_blocks + (uint64_t)(slot / c->B)];
    const uint64_t o = (uint64_t)(slot % c->B);
    uint8_t *base = (uint8_t *)c->kv->pool + (uint64_t)blk * c->block_bytes;
    if (is_v) base += (uint64_t)c->n_kv * c->B * (uint64_t)c->hd * c->elem;
    return base + (((uint64_t)g * c->B + o) * (uint64_t)c->hd) * c->elem;
}

/* Walks the slots of one sequence's KV head g in order, without a division per slot. */
typedef struct SlotIter {
    const AttnCtx *c;
    const int32_t *table;
    int64_t g, bi, off;
    int64_t nb;           /* the sequence's blocks: the table holds no more for it */
    const uint8_t *k, *v; /* the current slot's key and value rows */
} SlotIter;

static inline void slot_block(SlotIter *it) {
    const AttnCtx *c = it->c;
    const uint8_t *base = (const uint8_t *)c->kv->pool + (uint64_t)it->table[it->bi] * c->block_bytes;
    it->k = base + ((uint64_t)it->g * c->B + (uint64_t)it->off) * (uint64_t)c->hd * c->elem;
    it->v = it->k + (uint64_t)c->n_kv * c->B * (uint64_t)c->hd * c->elem;
}
/* Starts at slot `lo` of the sequence. */
static inline void slot_seek(SlotIter *it, const AttnCtx *c, int64_t s, int64_t g, int64_t lo) {
    it->c = c;
    it->table = c->kv->block_table + (uint64_t)s * c->kv->max_blocks;
    it->g = g;
    it->bi = lo / c->B;
    it->off = lo % c->B;
    it->nb = (c->b->ctx_lens[s] + c->B - 1) / c->B;
    it->k = it->v = NULL;
    if (it->bi < it->nb) slot_block(it);
}
static inline void slot_next(SlotIter *it) {
    const int64_t row = it->c->hd * (int64_t)it->c->elem;
    if (++it->off == it->c->B) {
        it->off = 0;
        /* past the sequence's last block (the walk's final step): its table row may end there */
        if (++it->bi < it->nb) slot_block(it);
    } else {
        it->k += row;
        it->v += row;
    }
}

/* ---- append ---------------------------------------------------------------------------------- */

static void store_row(const AttnCtx *c, uint8_t *dst, const float *src) {
    switch ((int)c->dt) {
    case RAD_F32: memcpy(dst, src, (size_t)c->hd * 4); break;
    case RAD_F16:
        for (int64_t d = 0; d < c->hd; d++) {
            const uint16_t h = ref_f32_f16(src[d]);
            memcpy(dst + 2 * d, &h, 2);
        }
        break;
    default:
        for (int64_t d = 0; d < c->hd; d++) {
            const uint16_t h = ref_f32_bf16(src[d]);
            memcpy(dst + 2 * d, &h, 2);
        }
        break;
    }
}

/* Row t's k and v of KV head g into its cache slot. */
static void append_head(const AttnCtx *c, int64_t t, int64_t g) {
    const int64_t s = seq_of(c, t);
    const int64_t slot = c->b->ctx_lens[s] - c->b->q_lens[s] + (t - c->b->cu_seqlens[s]);
    store_row(c, kv_slot(c, s, slot, g, 0), ref_frow(c->k, (uint64_t)t) + g * c->hd);
    store_row(c, kv_slot(c, s, slot, g, 1), ref_frow(c->v, (uint64_t)t) + g * c->hd);
}

static void append_task(void *ctx, int tid, int nth) {
    const AttnCtx *c = ctx;
    int64_t t0, t1;
    ref_split(c->M, tid, nth, 1, &t0, &t1);
    for (int64_t t = t0; t < t1; t++)
        for (int64_t g = 0; g < c->n_kv; g++) append_head(c, t, g);
}

/* ---- attend: portable C ----------------------------------------------------------------------- */

static void load_row_generic(const AttnCtx *c, const uint8_t *src, float *dst) {
    ref_dq_row_generic((int)c->dt, src, dst, (uint64_t)c->hd);
}

/* The online softmax's state over one part of a row's keys, for up to MAX_REP query heads:
 * the running maximum m, the sum l and the unnormalised output acc. */
typedef struct PartState {
    float m[MAX_REP], l[MAX_REP];
    _Alignas(32) float acc[MAX_REP][256];
} PartState;

/* Heads h0 .. h0+nr-1 (one KV head g) of row t over the keys in slots [lo, hi): the part's state. */
static void attend_part_generic(const AttnCtx *c, int64_t t, int64_t g, int64_t h0, int64_t nr, int64_t lo, int64_t hi,
                                float *kb, float *vb, PartState *ps) {
    const int64_t s = seq_of(c, t), hd = c->hd;
    const float *q[MAX_REP];
    float *m = ps->m, *l = ps->l, sc[MAX_REP][64];
    float (*acc)[256] = ps->acc;
    for (int64_t r = 0; r < nr; r++) {
        q[r] = ref_frow(c->q, (uint64_t)t) + (h0 + r) * hd;
        m[r] = -INFINITY;
        l[r] = 0.0f;
        for (int64_t d = 0; d < hd; d++) acc[r][d] = 0.0f;
    }
    SlotIter it;
    slot_seek(&it, c, s, g, lo);
    for (int64_t i0 = lo; i0 < hi; i0 += c->chunk) {
        const int64_t cn = hi - i0 < c->chunk ? hi - i0 : c->chunk;
        for (int64_t i = 0; i < cn; i++, slot_next(&it)) {
            load_row_generic(c, it.k, kb + i * hd);
            load_row_generic(c, it.v, vb + i * hd);
        }
        for (int64_t r = 0; r < nr; r++) {
            float mc = m[r];
            for (int64_t i = 0; i < cn; i++) {
                float dot = 0.0f;
                for (int64_t d = 0; d < hd; d++) {
                    const float p = q[r][d] * kb[i * hd + d];
                    dot = dot + p;
                }
                sc[r][i] = dot * c->scale;
                if (sc[r][i] > mc) mc = sc[r][i];
            }
            const float alpha = i0 == lo ? 0.0f : (float)exp((double)(m[r] - mc));
            m[r] = mc;
            float lc = 0.0f;
            for (int64_t i = 0; i < cn; i++) {
                sc[r][i] = (float)exp((double)(sc[r][i] - mc));
                lc = lc + sc[r][i];
            }
            const float la = l[r] * alpha;
            l[r] = la + lc;
            for (int64_t d = 0; d < hd; d++) {
                float a = acc[r][d] * alpha;
                for (int64_t i = 0; i < cn; i++) {
                    const float pv = sc[r][i] * vb[i * hd + d];
                    a = a + pv;
                }
                acc[r][d] = a;
            }
        }
    }
}

/* ---- attend: AVX2 ------------------------------------------------------------------------------- */
#if REF_X86

REF_AVX2 static void load_row_avx2(const AttnCtx *c, const uint8_t *src, float *dst) {
    int64_t d = 0;
    if (c->dt == RAD_F16) {
        for (; d + 8 <= c->hd; d += 8)
            _mm256_storeu_ps(dst + d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(src + 2 * d))));
    } else if (c->dt == RAD_BF16) {
        for (; d + 8 <= c->hd; d += 8) {
            const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(src + 2 * d)));
            _mm256_storeu_ps(dst + d, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
        }
    }
    for (; d < c->hd; d++) dst[d] = c->dt == RAD_F16 ? ref_f16_f32(ref_rd16(src + 2 * d)) : ref_bf16_f32(ref_rd16(src + 2 * d));
}

/* The next n slots of it as f32 rows kr[i], vr[i]: the cache's own rows (f32) or converted into
 * kb, vb. All n are prefetched first: a page holds a block's few slots, too short for the
 * hardware prefetcher, and one slot at a time would leave the memory system idle. */
REF_AVX2 static void chunk_rows(const AttnCtx *c, SlotIter *it, int64_t n, float *kb, float *vb, const float **kr,
                                const float **vr) {
    const int64_t hd = c->hd;
    const uint8_t *rk[64], *rv[64];
    for (int64_t i = 0; i < n; i++, slot_next(it)) rk[i] = it->k, rv[i] = it->v;
    for (int64_t i = 0; i < n; i++)
        for (int64_t o = 0; o < hd * (int64_t)c->elem; o += 64) {
            _mm_prefetch((const char *)rk[i] + o, _MM_HINT_T0);
            _mm_prefetch((const char *)rv[i] + o, _MM_HINT_T0);
        }
    for (int64_t i = 0; i < n; i++) {
        if (c->dt == RAD_F32) {
            kr[i] = (const float *)(const void *)rk[i];
            vr[i] = (const float *)(const void *)rv[i];
        } else {
            load_row_avx2(c, rk[i], kb + i * hd);
            load_row_avx2(c, rv[i], vb + i * hd);
            kr[i] = kb + i * hd;
            vr[i] = vb + i * hd;
        }
    }
}

/* Eight dot products q · k[j] (j < 8) over hd, one 8-lane FMA chain each, reduced by one fixed
 * tree per lane: a slot's score does not depend on the slots it is computed with. */
REF_AVX2 REF_INLINE __m256 dots8(const float *q, const float *const *k, int64_t hd) {
    __m256 a[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) a[j] = _mm256_setzero_ps();
    int64_t d = 0;
    for (; d + 8 <= hd; d += 8) {
        const __m256 qv = _mm256_loadu_ps(q + d);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) a[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[j] + d), a[j]);
    }
    if (d < hd) {
        const int t = (int)(hd - d);
        const __m256 qv = ref_load_tail(q + d, t);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) a[j] = _mm256_fmadd_ps(qv, ref_load_tail(k[j] + d, t), a[j]);
    }
    const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
    const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
    const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* acc[0..DN) += Σ_j p[j] · v[j][d0 .. d0 + DN), DN a multiple of 8 up to 64, chains in registers. */
REF_AVX2 REF_INLINE void pv_chunk(const int DN, float *acc, const float *p, const float *const *v, int64_t cn, int64_t d0,
                                  float alpha) {
    __m256 a[8];
    const __m256 va = _mm256_set1_ps(alpha);
#pragma GCC unroll 8
    for (int u = 0; u < DN / 8; u++) a[u] = _mm256_mul_ps(_mm256_loadu_ps(acc + 8 * u), va);
    for (int64_t j = 0; j < cn; j++) {
        const __m256 pj = _mm256_set1_ps(p[j]);
        const float *vj = v[j] + d0;
#pragma GCC unroll 8
        for (int u = 0; u < DN / 8; u++) a[u] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 8 * u), a[u]);
    }
#pragma GCC unroll 8
    for (int u = 0; u < DN / 8; u++) _mm256_storeu_ps(acc + 8 * u, a[u]);
}

/* One chunk of one head's online softmax: the scores sc[0 .. cn) (32-aligned, room for the
 * 8-lane tail) become e^(s - m) in place, m and l are updated, and the factor the head's output
 * is rescaled by is returned (0 for a part's first chunk). */
REF_AVX2 REF_INLINE float softmax_chunk(float *sc, int64_t cn, float *m, float *l, int first) {
    __m256 mx = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= cn; i += 8) mx = _mm256_max_ps(mx, _mm256_load_ps(sc + i));
    float mc = *m;
    {
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 0x55));
        const float hm = _mm_cvtss_f32(h);
        if (hm > mc) mc = hm;
    }
    for (; i < cn; i++)
        if (sc[i] > mc) mc = sc[i];
    float alpha = 0.0f;
    if (!first) alpha = _mm256_cvtss_f32(ref_exp8(_mm256_set1_ps(*m - mc)));
    *m = mc;
    __m256 ls = _mm256_setzero_ps();
    const __m256 vm = _mm256_set1_ps(mc);
    for (i = 0; i + 8 <= cn; i += 8) {
        const __m256 p = ref_exp8(_mm256_sub_ps(_mm256_load_ps(sc + i), vm));
        _mm256_store_ps(sc + i, p);
        ls = _mm256_add_ps(ls, p);
    }
    if (i < cn) {
        const int tl = (int)(cn - i);
        const __m256 p = ref_exp8(_mm256_sub_ps(ref_load_tail(sc + i, tl), vm));
        /* lanes past cn hold e^(0 - mc): masked out of the sum */
        static const int32_t mk[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
        const __m256 msk = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(const void *)(mk + 8 - tl)));
        const __m256 pm = _mm256_and_ps(p, msk);
        _mm256_store_ps(sc + i, pm);
        ls = _mm256_add_ps(ls, pm);
    }
    const float la = *l * alpha;
    *l = la + ref_hsum8(ls);
    return alpha;
}

REF_AVX2 static void attend_part_avx2(const AttnCtx *c, int64_t t, int64_t g, int64_t h0, int64_t nr, int64_t lo,
                                      int64_t hi, float *kb, float *vb, PartState *ps) {
    const int64_t s = seq_of(c, t), hd = c->hd;
    const float *q[MAX_REP];
    float *m = ps->m, *l = ps->l;
    _Alignas(32) float sc[MAX_REP][64 + 8];
    float (*acc)[256] = ps->acc;
    const float *kr[64 + 8], *vr[64];
    for (int64_t r = 0; r < nr; r++) {
        q[r] = ref_frow(c->q, (uint64_t)t) + (h0 + r) * hd;
        m[r] = -INFINITY;
        l[r] = 0.0f;
        for (int64_t d = 0; d < hd; d++) acc[r][d] = 0.0f;
    }
    SlotIter it;
    slot_seek(&it, c, s, g, lo);
    for (int64_t i0 = lo; i0 < hi; i0 += c->chunk) {
        const int64_t cn = hi - i0 < c->chunk ? hi - i0 : c->chunk;
        chunk_rows(c, &it, cn, kb, vb, kr, vr);
        for (int64_t i = cn; i < ((cn + 7) & ~(int64_t)7); i++) kr[i] = kr[cn - 1]; /* pad the last 8: results unused */
        for (int64_t r = 0; r < nr; r++) {
            const __m256 vs = _mm256_set1_ps(c->scale);
            for (int64_t i = 0; i < cn; i += 8) {
                const __m256 d8 = _mm256_mul_ps(dots8(q[r], kr + i, hd), vs);
                _mm256_store_ps(&sc[r][i], d8);
            }
            const float alpha = softmax_chunk(sc[r], cn, &m[r], &l[r], i0 == lo);
            int64_t d0 = 0;
            for (; d0 + 64 <= hd; d0 += 64) pv_chunk(64, acc[r] + d0, sc[r], vr, cn, d0, alpha);
            for (; d0 + 8 <= hd; d0 += 8) pv_chunk(8, acc[r] + d0, sc[r], vr, cn, d0, alpha);
            for (int64_t d = d0; d < hd; d++) {
                float a = acc[r][d] * alpha;
                for (int64_t j = 0; j < cn; j++) a = fmaf(sc[r][j], vr[j][d], a);
                acc[r][d] = a;
            }
        }
    }
}
#endif

/* ---- parts of a row, and their merge ---------------------------------------------------------------
 * A row's n keys are cut into parts of part_size(n) slots (a function of n alone), each part's
 * online-softmax state computed as above, and the states merged in part order:
 * m = max(m1, m2), l = l1·e^(m1-m) + l2·e^(m2-m), acc likewise. Whether one item runs a row's
 * parts one after another or each part is its own item (decode: a few rows, so the parts are
 * what spreads the work over the threads), the arithmetic is the same, so a row's result does
 * not depend on the other rows or the threads. A row of at most 32 keys is one part, computed
 * exactly as without parts. */
static int64_t part_size(int64_t n) {
    int64_t sz = 32;
    while (sz * PARTS_MAX < n) sz *= 2;
    return sz;
}

/* The slots row t reads, [*lo, *lo + n): its own and the ones before it, within the window.
 * Returns n. */
static int64_t row_keys(const AttnCtx *c, int64_t t, int64_t *lo) {
    const int64_t s = seq_of(c, t);
    const int64_t hi = c->b->ctx_lens[s] - c->b->q_lens[s] + (t - c->b->cu_seqlens[s]) + 1;
    *lo = c->window && hi > c->window ? hi - c->window : 0;
    return hi - *lo;
}

static void attend_part(const AttnCtx *c, int64_t t, int64_t g, int64_t h0, int64_t nr, int64_t lo, int64_t hi, float *kb,
                        float *vb, PartState *ps) {
#if REF_X86
    if (c->isa >= REF_ISA_AVX2) {
        attend_part_avx2(c, t, g, h0, nr, lo, hi, kb, vb, ps);
        return;
    }
#endif
    attend_part_generic(c, t, g, h0, nr, lo, hi, kb, vb, ps);
}

/* run := merge(run, part) for one head (scalar, the same on every path). */
static void merge_state(float *m, float *l, float *acc, float pm, float pl, const float *pacc, int64_t hd) {
    const float mx = pm > *m ? pm : *m;
    const float a = (float)exp((double)(*m - mx)), b = (float)exp((double)(pm - mx));
    const float la = *l * a, lb = pl * b;
    *l = la + lb;
    for (int64_t d = 0; d < hd; d++) {
        const float x = acc[d] * a, y = pacc[d] * b;
        acc[d] = x + y;
    }
    *m = mx;
}

static void finish_head(const AttnCtx *c, int64_t t, int64_t h, const float *acc, float l) {
    float *o = ref_frow(c->out, (uint64_t)t) + h * c->hd;
    for (int64_t d = 0; d < c->hd; d++) o[d] = acc[d] / l;
}

/* Every part of row t for heads h0 .. h0+nr-1, merged in order, then the output. */
static void attend_row(const AttnCtx *c, int64_t t, int64_t g, int64_t h0, int64_t nr, float *kb, float *vb) {
    int64_t k0;
    const int64_t n = row_keys(c, t, &k0), sz = part_size(n), hi = k0 + n;
    PartState run, ps;
    attend_part(c, t, g, h0, nr, k0, sz < n ? k0 + sz : hi, kb, vb, &run);
    for (int64_t lo = k0 + sz; lo < hi; lo += sz) {
        attend_part(c, t, g, h0, nr, lo, lo + sz < hi ? lo + sz : hi, kb, vb, &ps);
        for (int64_t r = 0; r < nr; r++) merge_state(&run.m[r], &run.l[r], run.acc[r], ps.m[r], ps.l[r], ps.acc[r], c->hd);
    }
    for (int64_t r = 0; r < nr; r++) finish_head(c, t, h0 + r, run.acc[r], run.l[r]);
}

/* ---- attend: AVX2, a block of prefill rows ---------------------------------------------------------
 * Consecutive rows of one sequence that share their first key and part size (a prefill, before a
 * window starts to slide) have the same part and chunk boundaries up to each row's own end: row
 * r of the block reads one key more than row r - 1. So a block walks the chunks once, loading
 * (and converting) each chunk's K and V rows once for all its rows, and computes the scores and
 * the output in register tiles that use each K and V load for several (row, head) pairs. Every
 * (row, head) keeps what attend_part_avx2 does alone: the same 8-lane FMA chain and tree per
 * score, its own chunk length (a row whose part ends inside a chunk stops there), the same
 * softmax_chunk, the same FMA order per output lane, the same merges; so its bits are the same.
 * At the avx512 level the score and output tiles are 512 bits wide with every lane's arithmetic
 * unchanged (two keys a score FMA, 16 output lanes an output FMA): the same bits again, and a
 * SmolLM2 prefill's attention 99 -> 81 ms. */
#if REF_X86

/* The state of every (row, head) pair of a block over one part: pair p = row · nr + head. */
typedef struct BlockState {
    float m[BLOCK_PAIRS], l[BLOCK_PAIRS];
    _Alignas(32) float acc[BLOCK_PAIRS * 256]; /* [pair][hd] */
} BlockState;

/* Scores of NP queries against the 4 keys k[0..4), into sc[p][j .. j + 4): one 8-lane FMA chain
 * per (query, key) and dots8's tree, so each is the bits dots8 gives it. hd a multiple of 8. */
REF_AVX2 REF_INLINE void dots_tile(const int NP, const float *const *q, const float *const *k, int64_t hd, float scale,
                                   float *const *sc, int64_t j) {
    __m256 a[3][4];
#pragma GCC unroll 3
    for (int p = 0; p < NP; p++)
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) a[p][u] = _mm256_setzero_ps();
    for (int64_t d = 0; d < hd; d += 8) {
        __m256 qv[3];
#pragma GCC unroll 3
        for (int p = 0; p < NP; p++) qv[p] = _mm256_loadu_ps(q[p] + d);
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) {
            const __m256 kv = _mm256_loadu_ps(k[u] + d);
#pragma GCC unroll 3
            for (int p = 0; p < NP; p++) a[p][u] = _mm256_fmadd_ps(qv[p], kv, a[p][u]);
        }
    }
    const __m128 vs = _mm_set1_ps(scale);
#pragma GCC unroll 3
    for (int p = 0; p < NP; p++) {
        const __m256 u = _mm256_hadd_ps(_mm256_hadd_ps(a[p][0], a[p][1]), _mm256_hadd_ps(a[p][2], a[p][3]));
        const __m128 r = _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1));
        _mm_storeu_ps(sc[p] + j, _mm_mul_ps(r, vs));
    }
}

/* acc[p][d0 .. d0 + 8·W) (times alpha[p] first, unless alpha is NULL) += Σ_j p[p][j] · v[j][d0 ..]
 * over j in [j0, j1), for NP pairs: pv_chunk's FMA chain per lane, each V load used NP times. */
REF_AVX2 REF_INLINE void pv_tile(const int NP, const int W, float *const *acc, const float *const *p, const float *alpha,
                                 const float *const *v, int64_t j0, int64_t j1, int64_t d0) {
    __m256 a[6][2];
#pragma GCC unroll 6
    for (int r = 0; r < NP; r++)
#pragma GCC unroll 2
        for (int u = 0; u < W; u++) {
            a[r][u] = _mm256_loadu_ps(acc[r] + d0 + 8 * u);
            if (alpha) a[r][u] = _mm256_mul_ps(a[r][u], _mm256_set1_ps(alpha[r]));
        }
    for (int64_t j = j0; j < j1; j++) {
        __m256 vv[2];
#pragma GCC unroll 2
        for (int u = 0; u < W; u++) vv[u] = _mm256_loadu_ps(v[j] + d0 + 8 * u);
#pragma GCC unroll 6
        for (int r = 0; r < NP; r++) {
            const __m256 pj = _mm256_broadcast_ss(p[r] + j);
#pragma GCC unroll 2
            for (int u = 0; u < W; u++) a[r][u] = _mm256_fmadd_ps(pj, vv[u], a[r][u]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < NP; r++)
#pragma GCC unroll 2
        for (int u = 0; u < W; u++) _mm256_storeu_ps(acc[r] + d0 + 8 * u, a[r][u]);
}

/* Pairs [p0, p1) of a block: scores over keys [0, cn) (cn padded to 4 with repeats of the last) */
REF_AVX2 static void block_scores(const float *const *q, const float *const *kr, int64_t cn, int64_t hd, float scale,
                                  float *const *sc, int64_t p0, int64_t p1) {
    int64_t p = p0;
    for (; p + 3 <= p1; p += 3)
        for (int64_t j = 0; j < cn; j += 4) dots_tile(3, q + p, kr + j, hd, scale, sc + p, j);
    for (; p + 2 <= p1; p += 2)
        for (int64_t j = 0; j < cn; j += 4) dots_tile(2, q + p, kr + j, hd, scale, sc + p, j);
    for (; p < p1; p++)
        for (int64_t j = 0; j < cn; j += 4) dots_tile(1, q + p, kr + j, hd, scale, sc + p, j);
}

/* Pairs [p0, p1): keys [j0, j1) into their outputs (rescaled by alpha first unless NULL), 16
 * lanes of d at a time (8 at the end of an hd of 8·odd). */
#define PV_TILES(W)                                                                                              \
    do {                                                                                                         \
        int64_t p = p0;                                                                                          \
        for (; p + 6 <= p1; p += 6) pv_tile(6, W, acc + p, sc + p, alpha ? alpha + p : NULL, vr, j0, j1, d0);    \
        switch (p1 - p) {                                                                                        \
        case 5: pv_tile(5, W, acc + p, sc + p, alpha ? alpha + p : NULL, vr, j0, j1, d0); break;                 \
        case 4: pv_tile(4, W, acc + p, sc + p, alpha ? alpha + p : NULL, vr, j0, j1, d0); break;                 \
        case 3: pv_tile(3, W, acc + p, sc + p, alpha ? alpha + p : NULL, vr, j0, j1, d0); break;                 \
        case 2: pv_tile(2, W, acc + p, sc + p, alpha ? alpha + p : NULL, vr, j0, j1, d0); break;                 \
        case 1: pv_tile(1, W, acc + p, sc + p, alpha ? alpha + p : NULL, vr, j0, j1, d0); break;                 \
        default: break;                                                                                          \
        }                                                                                                        \
    } while (0)
REF_AVX2 static void block_pv(float *const *acc, const float *const *sc, const float *alpha, const float *const *vr,
                              int64_t j0, int64_t j1, int64_t hd, int64_t p0, int64_t p1, int64_t d0) {
    for (; d0 + 16 <= hd; d0 += 16) PV_TILES(2);
    if (d0 < hd) PV_TILES(1);
}
#undef PV_TILES

/* The same tiles on AVX-512 F (the avx512 level), with every lane's arithmetic the AVX2 tiles'
 * and so their bits: two keys share a 512-bit FMA in the scores (each half one key's 8-lane
 * chain, then dots_tile's tree on the halves), 16 output lanes share one in the outputs (each
 * lane pv_tile's chain). Half the FMAs, loads and broadcasts. */
#define REF_AVX512F __attribute__((target("avx2,fma,f16c,avx512f,avx512vl")))

REF_AVX512F REF_INLINE __m512 two8(const float *a, const float *b) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(a))),
                                               _mm256_castps_pd(_mm256_loadu_ps(b)), 1));
}
REF_AVX512F REF_INLINE __m256 hi8(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }

REF_AVX512F REF_INLINE void dots_tile512(const int NP, const float *const *q, const float *const *k, int64_t hd, float scale,
                                         float *const *sc, int64_t j) {
    __m512 a[6][2];
#pragma GCC unroll 6
    for (int p = 0; p < NP; p++) a[p][0] = _mm512_setzero_ps(), a[p][1] = _mm512_setzero_ps();
    for (int64_t d = 0; d < hd; d += 8) {
        const __m512 k01 = two8(k[0] + d, k[1] + d), k23 = two8(k[2] + d, k[3] + d);
#pragma GCC unroll 6
        for (int p = 0; p < NP; p++) {
            const __m512 qv = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(q[p] + d))));
            a[p][0] = _mm512_fmadd_ps(qv, k01, a[p][0]);
            a[p][1] = _mm512_fmadd_ps(qv, k23, a[p][1]);
        }
    }
    const __m128 vs = _mm_set1_ps(scale);
#pragma GCC unroll 6
    for (int p = 0; p < NP; p++) {
        const __m256 a0 = _mm512_castps512_ps256(a[p][0]), a1 = hi8(a[p][0]);
        const __m256 a2 = _mm512_castps512_ps256(a[p][1]), a3 = hi8(a[p][1]);
        const __m256 u = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
        const __m128 r = _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1));
        _mm_storeu_ps(sc[p] + j, _mm_mul_ps(r, vs));
    }
}

REF_AVX512F REF_INLINE void pv_tile512(const int NP, const int W, float *const *acc, const float *const *p, const float *alpha,
                                       const float *const *v, int64_t j0, int64_t j1, int64_t d0) {
    __m512 a[6][2];
#pragma GCC unroll 6
    for (int r = 0; r < NP; r++)
#pragma GCC unroll 2
        for (int u = 0; u < W; u++) {
            a[r][u] = _mm512_loadu_ps(acc[r] + d0 + 16 * u);
            if (alpha) a[r][u] = _mm512_mul_ps(a[r][u], _mm512_set1_ps(alpha[r]));
        }
    for (int64_t j = j0; j < j1; j++) {
        __m512 vv[2];
#pragma GCC unroll 2
        for (int u = 0; u < W; u++) vv[u] = _mm512_loadu_ps(v[j] + d0 + 16 * u);
#pragma GCC unroll 6
        for (int r = 0; r < NP; r++) {
            const __m512 pj = _mm512_set1_ps(p[r][j]);
#pragma GCC unroll 2
            for (int u = 0; u < W; u++) a[r][u] = _mm512_fmadd_ps(pj, vv[u], a[r][u]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < NP; r++)
#pragma GCC unroll 2
        for (int u = 0; u < W; u++) _mm512_storeu_ps(acc[r] + d0 + 16 * u, a[r][u]);
}

REF_AVX512F static void block_scores512(const float *const *q, const float *const *kr, int64_t cn, int64_t hd, float scale,
                                        float *const *sc, int64_t p0, int64_t p1) {
    int64_t p = p0;
    for (; p + 6 <= p1; p += 6)
        for (int64_t j = 0; j < cn; j += 4) dots_tile512(6, q + p, kr + j, hd, scale, sc + p, j);
    for (; p + 3 <= p1; p += 3)
        for (int64_t j = 0; j < cn; j += 4) dots_tile512(3, q + p, kr + j, hd, scale, sc + p, j);
    for (; p + 2 <= p1; p += 2)
        for (int64_t j = 0; j < cn; j += 4) dots_tile512(2, q + p, kr + j, hd, scale, sc + p, j);
    for (; p < p1; p++)
        for (int64_t j = 0; j < cn; j += 4) dots_tile512(1, q + p, kr + j, hd, scale, sc + p, j);
}

#define PV_TILES512(W)                                                                                              \
    do {                                                                                                            \
        int64_t p = p0;                                                                                             \
        for (; p + 6 <= p1; p += 6) pv_tile512(6, W, acc + p, sc + p, alpha ? alpha + p : NULL, vr, j0, j1, d0);    \
        switch (p1 - p) {                                                                                           \
        case 5: pv_tile512(5, W, acc + p, sc + p, alpha ? alpha + p : NULL, vr, j0, j1, d0); break;                 \
        case 4: pv_tile512(4, W, acc + p, sc + p, alpha ? alpha + p : NULL, vr, j0, j1, d0); break;                 \
        case 3: pv_tile512(3, W, acc + p, sc + p, alpha ? alpha + p : NULL, vr, j0, j1, d0); break;                 \
        case 2: pv_tile512(2, W, acc + p, sc + p, alpha ? alpha + p : NULL, vr, j0, j1, d0); break;                 \
        case 1: pv_tile512(1, W, acc + p, sc + p, alpha ? alpha + p : NULL, vr, j0, j1, d0); break;                 \
        default: break;                                                                                             \
        }                                                                                                           \
    } while (0)
REF_AVX512F static void block_pv512(float *const *acc, const float *const *sc, const float *alpha, const float *const *vr,
                                    int64_t j0, int64_t j1, int64_t hd, int64_t p0, int64_t p1) {
    int64_t d0 = 0;
    for (; d0 + 32 <= hd; d0 += 32) PV_TILES512(2);
    if (d0 + 16 <= hd) {
        PV_TILES512(1);
        d0 += 16;
    }
    if (d0 < hd) block_pv(acc, sc, alpha, vr, j0, j1, hd, p0, p1, d0); /* the last 8 lanes */
}
#undef PV_TILES512

/* merge_state and finish_head, 8 lanes at a time: each lane's operations are the scalar ones
 * (a product, a product, their sum; a quotient), so the bits are theirs. hd a multiple of 8. */
REF_AVX2 static void merge_state_avx2(float *m, float *l, float *acc, float pm, float pl, const float *pacc, int64_t hd) {
    const float mx = pm > *m ? pm : *m;
    const float a = (float)exp((double)(*m - mx)), b = (float)exp((double)(pm - mx));
    const float la = *l * a, lb = pl * b;
    *l = la + lb;
    const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    for (int64_t d = 0; d < hd; d += 8) {
        const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(acc + d), va), y = _mm256_mul_ps(_mm256_loadu_ps(pacc + d), vb);
        _mm256_storeu_ps(acc + d, _mm256_add_ps(x, y));
    }
    *m = mx;
}
REF_AVX2 static void finish_head_avx2(const AttnCtx *c, int64_t t, int64_t h, const float *acc, float l) {
    float *o = ref_frow(c->out, (uint64_t)t) + h * c->hd;
    const __m256 vl = _mm256_set1_ps(l);
    for (int64_t d = 0; d < c->hd; d += 8) _mm256_storeu_ps(o + d, _mm256_div_ps(_mm256_loadu_ps(acc + d), vl));
}

/* Rows t0 .. t0+nb-1 of one sequence (the same first key and part size; hd a multiple of 8),
 * heads h0 .. h0+nr-1 of KV head g: every part, merged in order, then the outputs. */
REF_AVX2 static void attend_block_avx2(const AttnCtx *c, int64_t t0, int64_t nb, int64_t g, int64_t h0, int64_t nr,
                                       float *kb, float *vb) {
    const int64_t s = seq_of(c, t0), hd = c->hd, np = nb * nr;
    int64_t k0;
    const int64_t n0 = row_keys(c, t0, &k0), sz = part_size(n0);
    const int64_t e0 = k0 + n0, emax = e0 + nb - 1; /* row r's keys end at e0 + r */
    const float *q[BLOCK_PAIRS];
    float *acc[BLOCK_PAIRS], *pacc[BLOCK_PAIRS], *scp[BLOCK_PAIRS], alpha[BLOCK_PAIRS];
    _Alignas(32) float sc[BLOCK_PAIRS][64 + 8];
    BlockState run, ps;
    const float *kr[64 + 8], *vr[64];
    for (int64_t p = 0; p < np; p++) {
        q[p] = ref_frow(c->q, (uint64_t)(t0 + p / nr)) + (h0 + p % nr) * hd;
        acc[p] = run.acc + p * hd;
        pacc[p] = ps.acc + p * hd;
        scp[p] = sc[p];
    }
    SlotIter it;
    slot_seek(&it, c, s, g, k0);
    for (int64_t lo = k0; lo < emax; lo += sz) {
        const int64_t ra = lo < e0 ? 0 : lo - e0 + 1; /* the first row with keys in this part */
        const int64_t pe = lo + sz < emax ? lo + sz : emax;
        BlockState *st = lo == k0 ? &run : &ps;
        float *const *sa = lo == k0 ? acc : pacc;
        for (int64_t p = ra * nr; p < np; p++) {
            st->m[p] = -INFINITY;
            st->l[p] = 0.0f;
            memset(sa[p], 0, (size_t)hd * sizeof(float));
        }
        for (int64_t i0 = lo; i0 < pe; i0 += c->chunk) {
            const int64_t cm = pe - i0 < c->chunk ? pe - i0 : c->chunk; /* the last row's keys in the chunk */
            const int64_t rc = i0 < e0 ? ra : i0 - e0 + 1;               /* the first row with keys in it */
            chunk_rows(c, &it, cm, kb, vb, kr, vr);
            for (int64_t i = cm; i < ((cm + 3) & ~(int64_t)3); i++) kr[i] = kr[cm - 1]; /* pad to 4: results unused */
            if (c->isa >= REF_ISA_AVX512) block_scores512(q, kr, cm, hd, c->scale, scp, rc * nr, np);
            else block_scores(q, kr, cm, hd, c->scale, scp, rc * nr, np);
            /* each row its own keys of the chunk; then the outputs, the pairs of the rows that
             * read key j taking it in order (rows sorted by their keys' end) */
            for (int64_t p = rc * nr; p < np; p++) {
                const int64_t cn = e0 + p / nr - i0 < cm ? e0 + p / nr - i0 : cm;
                alpha[p] = softmax_chunk(sc[p], cn, &st->m[p], &st->l[p], i0 == lo);
            }
            for (int64_t r = rc, j = 0; r < nb; r++) {
                const int64_t cn = e0 + r - i0 < cm ? e0 + r - i0 : cm;
                if (cn > j && c->isa >= REF_ISA_AVX512) block_pv512(sa, (const float *const *)scp, j ? NULL : alpha, vr, j, cn, hd, r * nr, np);
                else if (cn > j) block_pv(sa, (const float *const *)scp, j ? NULL : alpha, vr, j, cn, hd, r * nr, np, 0);
                j = cn;
            }
        }
        if (lo > k0)
            for (int64_t p = ra * nr; p < np; p++) merge_state_avx2(&run.m[p], &run.l[p], acc[p], ps.m[p], ps.l[p], pacc[p], hd);
    }
    for (int64_t p = 0; p < np; p++) finish_head_avx2(c, t0 + p / nr, h0 + p % nr, acc[p], run.l[p]);
}
#endif

/* Rows t0 .. t1-1 of an item: runs of rows that share a sequence, a first key and a part size
 * attend as a block (AVX2), the others one by one. */
static void attend_rows(const AttnCtx *c, int64_t t0, int64_t t1, int64_t g, int64_t h0, int64_t nr, float *kb, float *vb) {
    for (int64_t t = t0, u; t < t1; t = u) {
        u = t + 1;
#if REF_X86
        if (c->isa >= REF_ISA_AVX2 && c->hd % 8 == 0) {
            int64_t k0, k1;
            const int64_t s = seq_of(c, t), sz = part_size(row_keys(c, t, &k0));
            while (u < t1 && seq_of(c, u) == s && part_size(row_keys(c, u, &k1)) == sz && k1 == k0) u++;
            if (u - t > 1) {
                attend_block_avx2(c, t, u - t, g, h0, nr, kb, vb);
                continue;
            }
        }
#endif
        attend_row(c, t, g, h0, nr, kb, vb);
    }
}

static float *part_slot(const AttnCtx *c, int64_t t, int64_t h, int64_t p) {
    return c->part_buf + (((size_t)t * (size_t)c->n_head + (size_t)h) * PARTS_MAX + (size_t)p) * (size_t)(c->hd + 2);
}

/* Head h of row t: its parts' states merged in order, then the output. */
static void merge_head(const AttnCtx *c, int64_t t, int64_t h) {
    _Alignas(32) float acc[256];
    int64_t k0;
    const int64_t n = row_keys(c, t, &k0), sz = part_size(n);
    const float *p0 = part_slot(c, t, h, 0);
    float m = p0[0], l = p0[1];
    memcpy(acc, p0 + 2, (size_t)c->hd * sizeof(float));
    for (int64_t p = 1; p * sz < n; p++) {
        const float *pp = part_slot(c, t, h, p);
        merge_state(&m, &l, acc, pp[0], pp[1], pp + 2, c->hd);
    }
    finish_head(c, t, h, acc, l);
}

/* Split: every head of every row (after all parts ran). */
static void merge_task(void *ctx, int tid, int nth) {
    const AttnCtx *c = ctx;
    int64_t i0, i1;
    ref_split(c->M * c->n_head, tid, nth, 1, &i0, &i1);
    for (int64_t i = i0; i < i1; i++) merge_head(c, i / c->n_head, i % c->n_head);
}

static void attend_task(void *ctx, int tid, int nth) {
    AttnCtx *c = ctx;
    (void)nth;
    /* this part's slice of the conversion buffer (one per part, so any thread may run any
     * part); NULL where f32 rows are read in place */
    float *kb = c->conv ? c->conv + (size_t)tid * 2 * (size_t)(c->chunk * c->hd) : NULL;
    float *vb = kb ? kb + c->chunk * c->hd : NULL;
    const int64_t per = (c->rep + MAX_REP - 1) / MAX_REP; /* items per KV head */
    for (;;) {
        int64_t it = atomic_fetch_add(&c->next, 1);
        if (it >= c->n_items) break;
        int64_t t, g, h0, nr, p = 0;
        if (c->split) {
            p = it % PARTS_MAX;
            it /= PARTS_MAX;
        }
        if (c->by_head) {
            t = it / c->n_head;
            h0 = it % c->n_head;
            g = h0 / c->rep;
            nr = 1;
        } else {
            t = it / (c->n_kv * per) * c->brows;
            const int64_t rest = it % (c->n_kv * per);
            g = rest / per;
            h0 = g * c->rep + (rest % per) * MAX_REP;
            nr = g * c->rep + c->rep - h0 < MAX_REP ? g * c->rep + c->rep - h0 : MAX_REP;
        }
        if (!c->split) {
            attend_rows(c, t, t + c->brows < c->M ? t + c->brows : c->M, g, h0, nr, kb, vb);
            continue;
        }
        int64_t k0;
        const int64_t n = row_keys(c, t, &k0), sz = part_size(n), lo = k0 + p * sz, hi = k0 + n;
        if (lo >= hi) continue; /* this row has fewer parts */
        if (c->fused && lo + sz >= hi) append_head(c, t, g); /* the row's own slot is in its last part only */
        PartState ps;
        attend_part(c, t, g, h0, nr, lo, lo + sz < hi ? lo + sz : hi, kb, vb, &ps);
        for (int64_t r = 0; r < nr; r++) {
            float *d = part_slot(c, t, h0 + r, p);
            d[0] = ps.m[r];
            d[1] = ps.l[r];
            memcpy(d + 2, ps.acc[r], (size_t)c->hd * sizeof(float));
        }
        /* the last part of (t, g) to finish merges it: acq_rel publishes every part's state to it */
        if (c->fused && atomic_fetch_sub_explicit(&c->left[t * c->n_kv + g], 1, memory_order_acq_rel) == 1)
            for (int64_t r = 0; r < nr; r++) merge_head(c, t, h0 + r);
    }
}

/* ---- the run ------------------------------------------------------------------------------------ */

static int check_batch(const AttnCtx *c) {
    const struct RadBatch *b = c->b;
    if (b->struct_size < offsetof(struct RadBatch, ctx_lens) + sizeof b->ctx_lens) return RAD_E_ARG;
    if ((int64_t)b->n_tok != c->M) return RAD_E_SHAPE;
    if (b->n_seq < 1 || b->n_seq_decode > b->n_seq) return RAD_E_ARG;
    if (!b->cu_seqlens || !b->q_lens || !b->ctx_lens) return RAD_E_ARG;
    if (b->cu_seqlens[0] != 0 || b->cu_seqlens[b->n_seq] != c->M) return RAD_E_SHAPE;
    const RadKvState *kv = c->kv;
    for (uint32_t s = 0; s < b->n_seq; s++) {
        const int64_t q = b->q_lens[s], ctx = b->ctx_lens[s];
        if (b->cu_seqlens[s + 1] < b->cu_seqlens[s] || q != b->cu_seqlens[s + 1] - b->cu_seqlens[s]) return RAD_E_SHAPE;
        if (q == 0) continue;
        if (ctx < q) return RAD_E_ARG;
        const int64_t nblk = (ctx + c->B - 1) / c->B;
        if (nblk > (int64_t)kv->max_blocks) return RAD_E_ARG;
        /* the first block the sequence's first row sees: the ones before it a window has left */
        const int64_t first = c->window && ctx - q + 1 > c->window ? (ctx - q + 1 - c->window) / c->B : 0;
        for (int64_t j = first; j < nblk; j++) {
            const int32_t id = kv->block_table[(uint64_t)s * kv->max_blocks + (uint64_t)j];
            /* n_blocks 0: a caller from before the field (the pool's size is then unknown) */
            if (id < 0 || (kv->n_blocks && (uint32_t)id >= kv->n_blocks)) return RAD_E_ARG;
        }
    }
    return RAD_OK;
}

int ref_run_attn_paged(const RadKernelArgs *a) {
    int rc = ref_preamble(a, 4);
    if (rc) return rc;
    AttnCtx c;
    memset(&c, 0, sizeof c);
    double scale;
    if (!ref_pint(a, "n_head", &c.n_head) || !ref_pint(a, "n_head_kv", &c.n_kv) || !ref_pint(a, "head_dim", &c.hd) ||
        !ref_pflt(a, "scale", &scale))
        return RAD_E_ARG;
    if (!ref_pint(a, "window", &c.window)) c.window = 0; /* omitted: full attention */
    if (c.n_head < 1 || c.n_kv < 1 || c.hd < 1 || c.n_head % c.n_kv || c.window < 0) return RAD_E_ARG;
    if (c.hd > 256) return RAD_E_UNSUPPORTED;
    c.M = a->n;
    c.rep = c.n_head / c.n_kv;
    c.scale = (float)scale;
    c.q = &a->args[0];
    c.k = &a->args[1];
    c.v = &a->args[2];
    c.out = &a->args[3];
    const uint64_t qw = (uint64_t)(c.n_head * c.hd), kw = (uint64_t)(c.n_kv * c.hd);
    if (!ref_buf_ok(c.q, (uint64_t)c.M, qw) || !ref_buf_ok(c.k, (uint64_t)c.M, kw) || !ref_buf_ok(c.v, (uint64_t)c.M, kw) ||
        !ref_buf_ok(c.out, (uint64_t)c.M, qw))
        return RAD_E_SHAPE;
    c.b = a->batch;
    c.kv = a->kv;
    if (!c.b || !c.kv || !c.kv->pool || !c.kv->block_table || c.kv->block_size < 1) return RAD_E_ARG;
    if (c.kv->kv_quant != RAD_KVQ_NONE) return RAD_E_UNSUPPORTED;
    c.dt = c.kv->dtype;
    if (c.dt == RAD_F32) c.elem = 4;
    else if (c.dt == RAD_F16 || c.dt == RAD_BF16) c.elem = 2;
    else return RAD_E_UNSUPPORTED;
    if ((int64_t)c.kv->n_head_kv != c.n_kv || (int64_t)c.kv->head_dim != c.hd) return RAD_E_SHAPE;
    c.B = c.kv->block_size;
    c.block_bytes = 2ull * (uint64_t)c.n_kv * c.B * (uint64_t)c.hd * c.elem;
    if (c.kv->block_bytes && c.kv->block_bytes != c.block_bytes) return RAD_E_SHAPE;
    if ((rc = check_batch(&c))) return rc;
    c.isa = ref_isa(a);
    c.chunk = 16384 / c.hd < 64 ? 16384 / c.hd : 64;
    if (c.chunk < 1) c.chunk = 1;

    /* sizes, and the one allocation, before anything is written */
    double work = 0;
    for (uint32_t s = 0; s < c.b->n_seq; s++)
        work += (double)c.b->q_lens[s] * (double)(c.window && c.b->ctx_lens[s] > c.window ? c.window : c.b->ctx_lens[s]);
    work *= (double)qw * 2.0;
    const int nth = ref_threads_tuned(a, work, 16384.0); /* a decode row splits past ~28 keys (was ~57: -6% at tg128) */
    if (c.dt != RAD_F32 || c.isa < REF_ISA_AVX2) { /* the portable path copies f32 rows too */
        c.conv = ref_scratch(3, (size_t)nth * 2 * (size_t)(c.chunk * c.hd) * sizeof(float));
        if (!c.conv) return RAD_E_NOMEM;
    }
    const int64_t per = (c.rep + MAX_REP - 1) / MAX_REP;
    /* a few rows (decode): the parts of each row's keys are items of their own, so every
     * thread gets a share of the few (row, KV head) pairs; else whole rows */
    int64_t max_keys = 0;
    for (int64_t t = 0; t < c.M; t++) {
        int64_t k0;
        const int64_t n = row_keys(&c, t, &k0);
        max_keys = n > max_keys ? n : max_keys;
    }
    c.split = nth > 1 && c.M * c.n_kv * per < 2 * (int64_t)nth && max_keys > part_size(max_keys);
    c.by_head = !c.split && c.M * c.n_kv * per < (int64_t)nth;
    /* prefill: blocks of rows, fewer as long as the threads would lack items */
    c.brows = c.split || c.by_head ? 1 : BLOCK_ROWS;
    while (c.brows > 1 && (c.M + c.brows - 1) / c.brows * c.n_kv * per < 4 * (int64_t)nth) c.brows /= 2;
    c.n_items = c.by_head ? c.M * c.n_head : (c.M + c.brows - 1) / c.brows * c.n_kv * per;
    /* fused: every row a decode row (its new slot is read by its own items alone) and one item
     * per (row, KV head, part), so appending and merging need no phases of their own */
    c.fused = c.split && per == 1;
    for (uint32_t s = 0; c.fused && s < c.b->n_seq; s++) c.fused = c.b->q_lens[s] <= 1;
    if (c.split) {
        c.n_items *= PARTS_MAX;
        const size_t pb = ((size_t)c.M * (size_t)c.n_head * PARTS_MAX * (size_t)(c.hd + 2) * sizeof(float) + 63) & ~(size_t)63;
        c.part_buf = ref_scratch(2, pb + (size_t)(c.M * c.n_kv) * sizeof(_Atomic int32_t));
        if (!c.part_buf) return RAD_E_NOMEM;
        c.left = (_Atomic int32_t *)(void *)((uint8_t *)c.part_buf + pb);
        for (int64_t t = 0; c.fused && t < c.M; t++) {
            int64_t k0;
            const int64_t n = row_keys(&c, t, &k0), np = (n + part_size(n) - 1) / part_size(n);
            for (int64_t g = 0; g < c.n_kv; g++) atomic_init(&c.left[t * c.n_kv + g], (int32_t)np);
        }
    }

    /* 1. append every row's k and v (fused: in the items) */
    if (!c.fused) ref_parallel(a, ref_threads(a, (double)c.M * (double)kw, 65536.0), append_task, &c);

    /* 2. attend (3. split: merge each row's parts; fused: in the items) */
    atomic_init(&c.next, 0);
    ref_parallel(a, nth, attend_task, &c);
    if (c.split && !c.fused)
        ref_parallel(a, ref_threads(a, (double)(c.M * c.n_head * c.hd) * PARTS_MAX, 16384.0), merge_task, &c);
    return RAD_OK;
}
