/* ref_rope.c — rope: rotary position embedding, rotate-half layout, in place (docs/OPS.md).
 *
 * The frequency table is computed with OPS.md's code, one f32 operation at a time (pow in
 * double, rounded), once per parameter set: the library keeps up to REF_ROPE_CACHE tables in
 * its state. With the optional weight operand (freq_factors, GGUF's rope_freqs.weight) each
 * entry is then divided by its factor, one f32 division, per call into the workspace (the
 * factors are model data, not parameters, so they are never cached). Per row, the angle is one
 * f32 product pos * inv[i] and cos/sin are evaluated in double and rounded to f32 (correctly rounded but for double rounding's rare ties); the
 * rotation's products are rounded before the add, 8 pairs at a time on AVX2, so a kernel's
 * result differs from the reference only where the C library's cos/sin do: RAD_EXACT_TOLERANCE
 * 1e-5 (the op's bound). Rows are split across threads for long calls. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "ref_common.h"
#include "ref_quant.h"

#define HF_STACK 1024 /* n_rot / 2 held on the stack; more goes to scratch */

typedef struct RopeCfg {
    int64_t n_head, head_dim, n_rot, scaling, orig_ctx;
    double theta, factor, low, high;
} RopeCfg;

static int rope_cfg(const RadKernelArgs *a, RopeCfg *c) {
    if (!ref_pint(a, "n_head", &c->n_head) || !ref_pint(a, "head_dim", &c->head_dim) ||
        !ref_pint(a, "n_rot", &c->n_rot) || !ref_pflt(a, "theta", &c->theta) || !ref_pint(a, "scaling", &c->scaling) ||
        !ref_pflt(a, "factor", &c->factor) || !ref_pflt(a, "low_freq_factor", &c->low) ||
        !ref_pflt(a, "high_freq_factor", &c->high) || !ref_pint(a, "orig_ctx", &c->orig_ctx))
        return RAD_E_ARG;
    if (c->n_head < 1 || c->head_dim < 2 || c->n_rot < 2 || c->n_rot > c->head_dim || c->n_rot % 2 || !(c->theta > 0.0))
        return RAD_E_ARG;
    if (c->scaling < 0 || c->scaling > 2) return RAD_E_ARG;
    if (c->scaling >= 1 && !(c->factor > 0.0)) return RAD_E_ARG;
    if (c->scaling == 2 && (!(c->low > 0.0) || !(c->high > c->low) || c->orig_ctx < 1)) return RAD_E_ARG;
    return RAD_OK;
}

/* inv_freq[i], exactly docs/OPS.md's sequence of f32 operations (abi/rad_kernels.h). */
static float inv_freq(const RopeCfg *c, int64_t i) {
    return rad_rope_inv_freq(i, c->n_rot, c->theta, c->scaling, c->factor, c->low, c->high, c->orig_ctx);
}

static void fill_table(const RopeCfg *c, float *inv) {
    for (int64_t i = 0; i < c->n_rot / 2; i++) inv[i] = inv_freq(c, i);
}

/* The cached table for c, computing and keeping it when there is room; NULL when none. */
static const float *cached_table(RefState *s, const RopeCfg *c) {
    if (!s || !s->rope_mu) return NULL;
    const float *t = NULL;
    pthread_mutex_lock(s->rope_mu);
    for (int i = 0; i < s->n_rope && !t; i++) {
        const RefRopeEntry *e = &s->rope[i];
        if (e->n_rot == c->n_rot && e->scaling == c->scaling && e->orig_ctx == c->orig_ctx && e->theta == c->theta &&
            e->factor == c->factor && e->low == c->low && e->high == c->high)
            t = e->inv;
    }
    if (!t && s->n_rope < REF_ROPE_CACHE) {
        float *inv = malloc((size_t)(c->n_rot / 2) * sizeof(float));
        if (inv) {
            fill_table(c, inv);
            RefRopeEntry *e = &s->rope[s->n_rope++];
            e->n_rot = c->n_rot;
            e->scaling = c->scaling;
            e->orig_ctx = c->orig_ctx;
            e->theta = c->theta;
            e->factor = c->factor;
            e->low = c->low;
            e->high = c->high;
            e->inv = inv;
            t = inv;
        }
    }
    pthread_mutex_unlock(s->rope_mu);
    return t;
}

typedef struct RopeCtx {
    RopeCfg c;
    const RadKArg *x;
    const int32_t *pos;
    const float *inv;
    int64_t M;
    int isa;
} RopeCtx;

/* Pairs (i, i + hf) for i in [i0, hf). */
static void rotate_generic(float *h, const float *cs, const float *sn, int64_t i0, int64_t hf) {
    for (int64_t i = i0; i < hf; i++) {
        const float x0 = h[i], x1 = h[i + hf];
        const float a0 = x0 * cs[i], b0 = x1 * sn[i];
        const float a1 = x1 * cs[i], b1 = x0 * sn[i];
        h[i] = a0 - b0;
        h[i + hf] = a1 + b1;
    }
}

#if REF_X86
REF_AVX2 static void rotate_avx2(float *h, const float *cs, const float *sn, int64_t hf) {
    int64_t i = 0;
    for (; i + 8 <= hf; i += 8) {
        const __m256 x0 = _mm256_loadu_ps(h + i), x1 = _mm256_loadu_ps(h + i + hf);
        const __m256 c = _mm256_loadu_ps(cs + i), s = _mm256_loadu_ps(sn + i);
        const __m256 a0 = _mm256_mul_ps(x0, c), b0 = _mm256_mul_ps(x1, s);
        const __m256 a1 = _mm256_mul_ps(x1, c), b1 = _mm256_mul_ps(x0, s);
        _mm256_storeu_ps(h + i, _mm256_sub_ps(a0, b0));
        _mm256_storeu_ps(h + i + hf, _mm256_add_ps(a1, b1));
    }
    rotate_generic(h, cs, sn, i, hf); /* the last pairs, same arithmetic */
}
#endif

/* The last row's table, per thread: decode ropes q and k of every layer at one position, so
 * 59 of a token's 60 calls find their cos/sin here instead of computing n_rot / 2 of each.
 * Keyed by the position and the inverse frequencies themselves (not a pointer, which a freed
 * state's successor could reuse). */
#define HF_MEMO 128
static _Thread_local struct {
    int ok;
    int32_t pos;
    int64_t hf;
    float inv[HF_MEMO], cs[HF_MEMO], sn[HF_MEMO];
} memo;

static void rope_rows(const RopeCtx *r, int64_t t0, int64_t t1, float *cs, float *sn) {
    const int64_t hf = r->c.n_rot / 2;
    const int use_memo = hf <= HF_MEMO;
    for (int64_t t = t0; t < t1; t++) {
        const float fp = (float)r->pos[t];
        if (use_memo && memo.ok && memo.pos == r->pos[t] && memo.hf == hf && memcmp(memo.inv, r->inv, (size_t)hf * sizeof(float)) == 0) {
            memcpy(cs, memo.cs, (size_t)hf * sizeof(float));
            memcpy(sn, memo.sn, (size_t)hf * sizeof(float));
        } else {
            for (int64_t i = 0; i < hf; i++) {
                const float ang = fp * r->inv[i];
                double s, c;
                sincos((double)ang, &s, &c);
                cs[i] = (float)c;
                sn[i] = (float)s;
            }
            if (use_memo) {
                memo.ok = 1, memo.pos = r->pos[t], memo.hf = hf;
                memcpy(memo.inv, r->inv, (size_t)hf * sizeof(float));
                memcpy(memo.cs, cs, (size_t)hf * sizeof(float));
                memcpy(memo.sn, sn, (size_t)hf * sizeof(float));
            }
        }
        float *row = ref_frow(r->x, (uint64_t)t);
        for (int64_t h = 0; h < r->c.n_head; h++) {
            float *hd = row + h * r->c.head_dim;
#if REF_X86
            if (r->isa >= REF_ISA_AVX2) {
                rotate_avx2(hd, cs, sn, hf);
                continue;
            }
#endif
            rotate_generic(hd, cs, sn, 0, hf);
        }
    }
}

static void rope_task(void *ctx, int tid, int nth) {
    const RopeCtx *r = ctx;
    int64_t t0, t1;
    ref_split(r->M, tid, nth, 1, &t0, &t1);
    if (t0 >= t1) return;
    const int64_t hf = r->c.n_rot / 2;
    if (hf <= HF_STACK) {
        float cs[HF_STACK], sn[HF_STACK];
        rope_rows(r, t0, t1, cs, sn);
    } else {
        float *b = ref_scratch(3, (size_t)hf * 2 * sizeof(float));
        if (b) {
            rope_rows(r, t0, t1, b, b + hf);
        } else { /* no memory for the row's table: one pair at a time */
            for (int64_t t = t0; t < t1; t++)
                for (int64_t i = 0; i < hf; i++) {
                    const float ang = (float)r->pos[t] * r->inv[i];
                    const float c1 = (float)cos((double)ang), s1 = (float)sin((double)ang);
                    float *row = ref_frow(r->x, (uint64_t)t);
                    for (int64_t h = 0; h < r->c.n_head; h++) {
                        float *hd = row + h * r->c.head_dim;
                        const float x0 = hd[i], x1 = hd[i + hf];
                        const float a0 = x0 * c1, b0 = x1 * s1, a1 = x1 * c1, b1 = x0 * s1;
                        hd[i] = a0 - b0;
                        hd[i + hf] = a1 + b1;
                    }
                }
        }
    }
}

size_t ref_rope_workspace(const RadParam *p, uint32_t np, int64_t n_max) {
    (void)n_max;
    for (uint32_t i = 0; i < np; i++)
        if (p[i].name && strcmp(p[i].name, "n_rot") == 0 && p[i].lo > 0) return (size_t)(p[i].lo / 2) * sizeof(float);
    return 0;
}

/* Factor i of the freq_factors weight (f32, or f16/bf16 widened exactly). */
static float freq_factor(const RadKArg *w, int64_t i) {
    switch ((int)w->dtype) {
    case RAD_F16: return ref_f16_f32(((const uint16_t *)w->data)[i]);
    case RAD_BF16: return ref_bf16_f32(((const uint16_t *)w->data)[i]);
    default: return ((const float *)w->data)[i];
    }
}

int ref_run_rope(const RadKernelArgs *a) {
    /* x, pos; or freq_factors (the weight, first), x, pos */
    const uint32_t na = (a && a->args && a->n_args == 3) ? 3 : 2;
    int rc = ref_preamble(a, na);
    if (rc) return rc;
    RopeCtx r;
    if ((rc = rope_cfg(a, &r.c))) return rc;
    const int64_t hf = r.c.n_rot / 2;
    const RadKArg *ff = na == 3 ? &a->args[0] : NULL;
    r.x = &a->args[na - 2];
    const RadKArg *pos = &a->args[na - 1];
    r.M = a->n;
    if (!ref_buf_ok(r.x, (uint64_t)r.M, (uint64_t)(r.c.n_head * r.c.head_dim)) || !ref_raw_i32_ok(pos, (uint64_t)r.M))
        return RAD_E_SHAPE;
    if (ff && !ref_weight_ok(ff, RAD_ENC_PLAIN_FLOATS, 1, (uint64_t)hf)) return RAD_E_SHAPE;
    r.pos = pos->data;
    for (int64_t t = 0; t < r.M; t++)
        if (r.pos[t] < 0) return RAD_E_ARG;
    for (int64_t i = 0; ff && i < hf; i++) { /* a divisor must be positive and finite */
        const float f = freq_factor(ff, i);
        if (!(f > 0.0f) || isinf(f)) return RAD_E_ARG;
    }
    r.isa = ref_isa(a);
    r.inv = cached_table(a->lib_state, &r.c);
    if (!r.inv || ff) { /* no cache (no state, or full), or factors: the workspace, else scratch */
        float *t = a->workspace ? a->workspace : ref_scratch(2, (size_t)hf * sizeof(float));
        if (!t) return RAD_E_NOMEM;
        if (r.inv) memcpy(t, r.inv, (size_t)hf * sizeof(float));
        else fill_table(&r.c, t);
        for (int64_t i = 0; ff && i < hf; i++) t[i] = t[i] / freq_factor(ff, i);
        r.inv = t;
    }
    int nth = ref_threads(a, (double)r.M * (double)(r.c.n_head * r.c.n_rot), 32768.0);
    ref_parallel(a, nth, rope_task, &r);
    return RAD_OK;
}
