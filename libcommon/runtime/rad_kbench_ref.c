/* The f32 references of docs/OPS.md, for rad-kbench. See rad_kbench_ref.h. Every multiply-add is
 * two statements (the build is -std=c11: no FMA contraction), so these are the page's bits. */
#include "libcommon/runtime/rad_kbench_ref.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "libcommon/tensor/rad_enc.h"
#include "libcommon/tensor/rad_encode.h"

/* ---- rows on threads ------------------------------------------------------------------------ */

typedef void (*RowFn)(void *ctx, uint64_t r0, uint64_t r1);
typedef struct Part {
    RowFn fn;
    void *ctx;
    uint64_t r0, r1;
} Part;

static void *part_run(void *p) {
    Part *t = p;
    t->fn(t->ctx, t->r0, t->r1);
    return NULL;
}

/* fn over rows [0, n) cut into n_threads contiguous parts; work is per row, so the cut changes
 * no result. A thread that cannot start runs its part here. */
static void par_rows(uint64_t n, uint32_t n_threads, RowFn fn, void *ctx) {
    enum { MAXT = 64 };
    uint32_t nt = n_threads < 1 ? 1 : n_threads > MAXT ? MAXT : n_threads;
    if (nt > n) nt = (uint32_t)(n ? n : 1);
    Part parts[MAXT];
    pthread_t th[MAXT];
    int started[MAXT] = {0};
    for (uint32_t t = 0; t < nt; t++) parts[t] = (Part){fn, ctx, n * t / nt, n * (t + 1) / nt};
    for (uint32_t t = 1; t < nt; t++) started[t] = pthread_create(&th[t], NULL, part_run, &parts[t]) == 0;
    part_run(&parts[0]);
    for (uint32_t t = 1; t < nt; t++) {
        if (started[t]) pthread_join(th[t], NULL);
        else part_run(&parts[t]);
    }
}

/* ---- gemm_nt (and logits_gemm, each part of gemm_nt2/3) --------------------------------------- */

typedef struct GemmCtx {
    const float *x, *w;
    float *y;
    uint64_t xs, ys, M, N, K;
} GemmCtx;

static void gemm_rows(void *c_, uint64_t r0, uint64_t r1) {
    const GemmCtx *c = c_;
    for (uint64_t i = r0; i < r1; i++) {
        const float *xi = c->x + i * c->xs;
        for (uint64_t n = 0; n < c->N; n++) {
            const float *wn = c->w + n * c->K;
            float acc = 0.0f;
            for (uint64_t k = 0; k < c->K; k++) {
                float p = xi[k] * wn[k];
                acc = acc + p;
            }
            c->y[i * c->ys + n] = acc;
        }
    }
}

void rad_kbench_ref_gemm(const float *x, uint64_t xs, const float *w, float *y, uint64_t ys, uint64_t M, uint64_t N,
                         uint64_t K, uint32_t n_threads) {
    GemmCtx c = {x, w, y, xs, ys, M, N, K};
    par_rows(M, n_threads, gemm_rows, &c);
}

/* ---- the q8-activation bound ------------------------------------------------------------------ */

typedef struct Q8BoundCtx {
    const float *x, *w;
    const double *wb;              /* [N][nb] sum over each block of |w| */
    float *out;
    uint64_t N, K, nb;
} Q8BoundCtx;

/* sum_k |x[k] * w[k]| in double: the magnitude both per-output bounds scale. */
static double abs_dot(const float *x, const float *w, uint64_t K) {
    double f = 0;
    for (uint64_t k = 0; k < K; k++) f += fabs((double)x[k] * (double)w[k]);
    return f;
}

static void q8_bound_rows(void *c_, uint64_t r0, uint64_t r1) {
    const Q8BoundCtx *c = c_;
    double amax[1024];             /* K up to 32768 */
    for (uint64_t i = r0; i < r1; i++) {
        const float *xi = c->x + i * c->K;
        for (uint64_t b = 0; b < c->nb; b++) {
            double m = 0;
            for (uint64_t k = b * 32; k < c->K && k < b * 32 + 32; k++) m = fabs((double)xi[k]) > m ? fabs((double)xi[k]) : m;
            amax[b] = m;
        }
        for (uint64_t n = 0; n < c->N; n++) {
            const float *wn = c->w + n * c->K;
            const double *wb = c->wb + n * c->nb;
            double q = 0;
            for (uint64_t b = 0; b < c->nb; b++) q += 0.563 * (amax[b] / 127.0) * wb[b];
            c->out[i * c->N + n] = nextafterf((float)(q + 1e-5 * abs_dot(xi, wn, c->K)), INFINITY); /* rounded up: never tighter */
        }
    }
}

void rad_kbench_ref_q8_bound(const float *x, const float *w, float *out, uint64_t M, uint64_t N, uint64_t K,
                             uint32_t n_threads) {
    const uint64_t nb = (K + 31) / 32;
    double *wb = nb <= 1024 ? malloc((size_t)(N * nb) * sizeof *wb) : NULL;
    if (!wb) { /* no bound to give: nothing passes against it */
        for (uint64_t i = 0; i < M * N; i++) out[i] = 0;
        return;
    }
    for (uint64_t n = 0; n < N; n++)
        for (uint64_t b = 0; b < nb; b++) {
            double s = 0;
            for (uint64_t k = b * 32; k < K && k < b * 32 + 32; k++) s += fabs((double)w[n * K + k]);
            wb[n * nb + b] = s;
        }
    Q8BoundCtx c = {x, w, wb, out, N, K, nb};
    par_rows(M, n_threads, q8_bound_rows, &c);
    free(wb);
}

static void bf16_bound_rows(void *c_, uint64_t r0, uint64_t r1) {
    const Q8BoundCtx *c = c_;
    for (uint64_t i = r0; i < r1; i++) {
        const float *xi = c->x + i * c->K;
        for (uint64_t n = 0; n < c->N; n++)
            c->out[i * c->N + n] = nextafterf((float)(8e-3 * abs_dot(xi, c->w + n * c->K, c->K)), INFINITY); /* rounded up */
    }
}

void rad_kbench_ref_bf16_bound(const float *x, const float *w, float *out, uint64_t M, uint64_t N, uint64_t K,
                               uint32_t n_threads) {
    Q8BoundCtx c = {x, w, NULL, out, N, K, 0};
    par_rows(M, n_threads, bf16_bound_rows, &c);
}

static void f8_bound_rows(void *c_, uint64_t r0, uint64_t r1) {
    const Q8BoundCtx *c = c_;
    double *e = malloc((size_t)c->K * sizeof *e); /* each activation's allowance: 0.0625 |x| + 0.001 s_g, + 0.01 |x| */
    for (uint64_t i = r0; i < r1; i++) {
        const float *xi = c->x + i * c->K;
        for (uint64_t g = 0; e && g < c->K; g += 128) {
            double m = 0;
            for (uint64_t k = g; k < c->K && k < g + 128; k++) m = fabs((double)xi[k]) > m ? fabs((double)xi[k]) : m;
            for (uint64_t k = g; k < c->K && k < g + 128; k++) e[k] = 0.0725 * fabs((double)xi[k]) + 0.001 * (m / 448.0);
        }
        for (uint64_t n = 0; n < c->N; n++) {
            const float *wn = c->w + n * c->K;
            double b = 0;
            for (uint64_t k = 0; e && k < c->K; k++) b += fabs((double)wn[k]) * e[k];
            c->out[i * c->N + n] = e ? nextafterf((float)b, INFINITY) : 0; /* rounded up; no memory: nothing passes */
        }
    }
    free(e);
}

void rad_kbench_ref_f8_bound(const float *x, const float *w, float *out, uint64_t M, uint64_t N, uint64_t K,
                             uint32_t n_threads) {
    Q8BoundCtx c = {x, w, NULL, out, N, K, 0};
    par_rows(M, n_threads, f8_bound_rows, &c);
}

/* ---- rmsnorm, add, silu_mul ------------------------------------------------------------------ */

typedef struct NormCtx {
    const float *x, *g;
    float *out;
    uint64_t N;
    float eps;
} NormCtx;

static void norm_rows(void *c_, uint64_t r0, uint64_t r1) {
    const NormCtx *c = c_;
    for (uint64_t i = r0; i < r1; i++) {
        const float *x = c->x + i * c->N;
        float *o = c->out + i * c->N;
        float ss = 0.0f;
        for (uint64_t j = 0; j < c->N; j++) {
            float sq = x[j] * x[j];
            ss = ss + sq;
        }
        float mean = ss / (float)c->N;
        float r = 1.0f / sqrtf(mean + c->eps);
        for (uint64_t j = 0; j < c->N; j++) {
            float xr = x[j] * r;
            o[j] = xr * c->g[j];
        }
    }
}

void rad_kbench_ref_rmsnorm(const float *x, const float *gamma, float *out, uint64_t M, uint64_t N, double eps,
                            uint32_t n_threads) {
    NormCtx c = {x, gamma, out, N, (float)eps};
    par_rows(M, n_threads, norm_rows, &c);
}

void rad_kbench_ref_add(const float *a, const float *b, float *out, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void rad_kbench_ref_silu_mul(const float *gate, const float *up, float *out, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) {
        float e = (float)exp(-(double)gate[i]);
        float s = gate[i] / (1.0f + e);
        out[i] = s * up[i];
    }
}

void rad_kbench_ref_gelu_tanh_mul(const float *gate, const float *up, float *out, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) {
        double x = gate[i], u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
        float g = (float)(0.5 * x * (1.0 + tanh(u)));
        out[i] = g * up[i];
    }
}

/* ---- rope ------------------------------------------------------------------------------------- */

/* Frequency i of docs/OPS.md, step by step in f32 (transformers' order). */
static float rope_inv(const RadKbenchRope *p, int64_t i) {
    float e = (float)(2 * i) / (float)p->n_rot;
    float inv = 1.0f / (float)pow((double)(float)p->theta, (double)e);
    if (p->scaling == 1) inv = inv / (float)p->factor;
    if (p->scaling == 2) {
        float low_wl = (float)((double)p->orig_ctx / p->low);
        float high_wl = (float)((double)p->orig_ctx / p->high);
        float two_pi = (float)(2 * M_PI);
        float wavelen = (1.0f / inv) * two_pi;
        if (wavelen > low_wl) {
            inv = inv / (float)p->factor;
        } else if (!(wavelen < high_wl)) {
            float a = (1.0f / wavelen) * (float)p->orig_ctx;
            float s = (a - (float)p->low) / (float)(p->high - p->low);
            float one_s = 1.0f - s;
            float t1 = one_s * inv;
            float t2 = t1 / (float)p->factor;
            float t3 = s * inv;
            inv = t2 + t3;
        }
    }
    if (p->freq_factors) inv = inv / p->freq_factors[i];
    return inv;
}

typedef struct RopeCtx {
    float *x;
    const int32_t *pos;
    const RadKbenchRope *p;
    const float *inv;
} RopeCtx;

static void rope_rows(void *c_, uint64_t r0, uint64_t r1) {
    const RopeCtx *c = c_;
    const RadKbenchRope *p = c->p;
    const int64_t hf = p->n_rot / 2, W = p->n_head * p->head_dim;
    for (uint64_t t = r0; t < r1; t++)
        for (int64_t h = 0; h < p->n_head; h++) {
            float *x = c->x + t * (uint64_t)W + (uint64_t)(h * p->head_dim);
            for (int64_t i = 0; i < hf; i++) {
                float a = (float)c->pos[t] * c->inv[i];
                float co = (float)cos((double)a), si = (float)sin((double)a);
                float x0 = x[i], x1 = x[i + hf];
                float p00 = x0 * co, p01 = x1 * si, p10 = x1 * co, p11 = x0 * si;
                x[i] = p00 - p01;
                x[i + hf] = p10 + p11;
            }
        }
}

void rad_kbench_ref_rope(float *x, const int32_t *pos, uint64_t M, const RadKbenchRope *p, uint32_t n_threads) {
    float *inv = malloc((size_t)(p->n_rot / 2 + 1) * sizeof *inv);
    if (!inv) return; /* the caller's output stays as it was: a mismatch, not a pass */
    for (int64_t i = 0; i < p->n_rot / 2; i++) inv[i] = rope_inv(p, i);
    RopeCtx c = {x, pos, p, inv};
    par_rows(M, n_threads, rope_rows, &c);
    free(inv);
}

/* ---- attn_paged ------------------------------------------------------------------------------- */

typedef struct AttnCtx {
    const float *q;
    float *out;
    const RadKbenchAttnSeq *seqs;
    uint32_t n_seq, n_head, n_head_kv, hd;
    float scale;
    int32_t window;   /* keys a row sees, its own included (0: all before it) */
    int32_t *row_seq; /* [n_tok] the sequence of each row */
} AttnCtx;

static void attn_rows(void *c_, uint64_t r0, uint64_t r1) {
    const AttnCtx *c = c_;
    const uint32_t hd = c->hd, gw = c->n_head_kv * hd, qw = c->n_head * hd, per = c->n_head / c->n_head_kv;
    uint32_t cap = 0;
    for (uint32_t s = 0; s < c->n_seq; s++)
        if ((uint32_t)c->seqs[s].ctx_len > cap) cap = (uint32_t)c->seqs[s].ctx_len;
    float *sc = malloc((size_t)(cap ? cap : 1) * sizeof *sc);
    if (!sc) return;
    for (uint64_t t = r0; t < r1; t++) {
        const RadKbenchAttnSeq *s = &c->seqs[c->row_seq[t]];
        const int32_t jt = s->ctx_len - s->q_len + ((int32_t)t - s->row0);
        const int32_t lo = c->window && jt + 1 > c->window ? jt + 1 - c->window : 0; /* i <= jt, jt - i < window */
        for (uint32_t h = 0; h < c->n_head; h++) {
            const uint32_t g = h / per;
            const float *qh = c->q + t * qw + h * hd;
            for (int32_t i = lo; i <= jt; i++) {
                const float *k = s->K + (uint64_t)i * gw + g * hd;
                float dot = 0.0f;
                for (uint32_t d = 0; d < hd; d++) {
                    float p = qh[d] * k[d];
                    dot = dot + p;
                }
                sc[i] = dot * c->scale;
            }
            float m = sc[lo];
            for (int32_t i = lo + 1; i <= jt; i++)
                if (sc[i] > m) m = sc[i];
            float l = 0.0f;
            for (int32_t i = lo; i <= jt; i++) {
                sc[i] = (float)exp((double)(sc[i] - m));
                l = l + sc[i];
            }
            float *o = c->out + t * qw + h * hd;
            for (uint32_t d = 0; d < hd; d++) {
                float acc = 0.0f;
                for (int32_t i = lo; i <= jt; i++) {
                    float pv = sc[i] * s->V[(uint64_t)i * gw + g * hd + d];
                    acc = acc + pv;
                }
                o[d] = acc / l;
            }
        }
    }
    free(sc);
}

void rad_kbench_ref_attn(const float *q, float *out, const RadKbenchAttnSeq *seqs, uint32_t n_seq, uint32_t n_head,
                         uint32_t n_head_kv, uint32_t head_dim, double scale, uint32_t window, uint32_t n_threads) {
    uint32_t n_tok = 0;
    for (uint32_t s = 0; s < n_seq; s++) n_tok += (uint32_t)seqs[s].q_len;
    int32_t *row_seq = malloc((size_t)(n_tok ? n_tok : 1) * sizeof *row_seq);
    if (!row_seq) return;
    for (uint32_t s = 0; s < n_seq; s++)
        for (int32_t r = 0; r < seqs[s].q_len; r++) row_seq[seqs[s].row0 + r] = (int32_t)s;
    AttnCtx c = {q, out, seqs, n_seq, n_head, n_head_kv, head_dim, (float)scale, (int32_t)window, row_seq};
    par_rows(n_tok, n_threads, attn_rows, &c);
    free(row_seq);
}

/* ---- the encoder ops -------------------------------------------------------------------------- */

typedef struct LayerNormCtx {
    const float *x, *g, *b;
    float *out;
    uint64_t N;
    double eps;
} LayerNormCtx;

static void layernorm_rows(void *c_, uint64_t r0, uint64_t r1) {
    const LayerNormCtx *c = c_;
    const double n = (double)c->N;
    for (uint64_t i = r0; i < r1; i++) {
        const float *row = c->x + i * c->N;
        float *dst = c->out + i * c->N;
        double sum = 0.0;
        for (uint64_t j = 0; j < c->N; j++) sum = sum + (double)row[j];
        double mean = sum / n, dev = 0.0;
        for (uint64_t j = 0; j < c->N; j++) {
            double t = (double)row[j] - mean;
            double t2 = t * t;
            dev = dev + t2;
        }
        double inv = 1.0 / sqrt(dev / n + c->eps);
        for (uint64_t j = 0; j < c->N; j++) {
            double t = (double)row[j] - mean;
            double normed = t * inv;
            double scaled = normed * (double)c->g[j];
            dst[j] = (float)(scaled + (double)c->b[j]);
        }
    }
}

void rad_kbench_ref_layernorm(const float *x, const float *gamma, const float *beta, float *out, uint64_t M, uint64_t N,
                              double eps, uint32_t n_threads) {
    LayerNormCtx c = {x, gamma, beta, out, N, eps};
    par_rows(M, n_threads, layernorm_rows, &c);
}

void rad_kbench_ref_gelu(const float *x, float *out, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) {
        double v = x[i];
        out[i] = (float)(0.5 * v * (1.0 + erf(v * 0.7071067811865476)));
    }
}

typedef struct SeqAttnCtx {
    const float *q, *k, *v;
    float *out;
    const int32_t *cu;
    uint32_t n_seq, n_head, n_head_kv, hd, window;
    double scale;
} SeqAttnCtx;

static void attn_seq_rows(void *c_, uint64_t r0, uint64_t r1) {
    const SeqAttnCtx *c = c_;
    const uint64_t qw = (uint64_t)c->n_head * c->hd, kw = (uint64_t)c->n_head_kv * c->hd;
    const uint32_t group = c->n_head / c->n_head_kv;
    const uint64_t n_tok = (uint64_t)c->cu[c->n_seq];
    double *p = malloc((size_t)(n_tok ? n_tok : 1) * sizeof *p), *acc = malloc((size_t)c->hd * sizeof *acc);
    if (!p || !acc) { /* the reference stays unwritten: a mismatch, not a pass */
        free(p), free(acc);
        return;
    }
    for (uint64_t t = r0; t < r1; t++) {
        uint32_t s = 0;
        while (s + 1 < c->n_seq && (uint64_t)c->cu[s + 1] <= t) s++; /* the sequence holding row t */
        const int64_t first = c->cu[s], len = c->cu[s + 1] - first, i = (int64_t)t - first;
        int64_t j0 = 0, j1 = len; /* keys [j0, j1) of the sequence */
        if (c->window) {
            if (i - (int64_t)c->window + 1 > 0) j0 = i - (int64_t)c->window + 1;
            if (i + (int64_t)c->window < len) j1 = i + (int64_t)c->window;
        }
        for (uint32_t h = 0; h < c->n_head; h++) {
            const uint32_t g = h / group;
            const float *qh = c->q + t * qw + (uint64_t)h * c->hd;
            double mx = -INFINITY;
            for (int64_t j = j0; j < j1; j++) {
                const float *kj = c->k + (uint64_t)(first + j) * kw + (uint64_t)g * c->hd;
                double dot = 0.0;
                for (uint32_t d = 0; d < c->hd; d++) dot += (double)qh[d] * (double)kj[d];
                p[j] = dot * c->scale;
                if (p[j] > mx) mx = p[j];
            }
            double l = 0.0;
            for (int64_t j = j0; j < j1; j++) {
                p[j] = exp(p[j] - mx);
                l += p[j];
            }
            for (uint32_t d = 0; d < c->hd; d++) acc[d] = 0.0;
            for (int64_t j = j0; j < j1; j++) {
                const float *vj = c->v + (uint64_t)(first + j) * kw + (uint64_t)g * c->hd;
                for (uint32_t d = 0; d < c->hd; d++) acc[d] += p[j] * (double)vj[d];
            }
            float *o = c->out + t * qw + (uint64_t)h * c->hd;
            for (uint32_t d = 0; d < c->hd; d++) o[d] = (float)(acc[d] / l);
        }
    }
    free(p), free(acc);
}

void rad_kbench_ref_attn_seq(const float *q, const float *k, const float *v, float *out, const int32_t *cu, uint32_t n_seq,
                             uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim, double scale, uint32_t window,
                             uint32_t n_threads) {
    if (scale == 0.0) scale = 1.0 / sqrt((double)head_dim);
    SeqAttnCtx c = {q, k, v, out, cu, n_seq, n_head, n_head_kv, head_dim, window, scale};
    par_rows((uint64_t)cu[n_seq], n_threads, attn_seq_rows, &c);
}

void rad_kbench_ref_pool(const float *x, float *out, const int32_t *cu, uint32_t n_seq, uint64_t N, int mode) {
    for (uint32_t s = 0; s < n_seq; s++) {
        const uint64_t a = (uint64_t)cu[s], b = (uint64_t)cu[s + 1];
        float *o = out + (uint64_t)s * N;
        for (uint64_t j = 0; j < N; j++) {
            if (mode == 1) {
                o[j] = x[a * N + j];
            } else if (mode == 2) {
                o[j] = x[(b - 1) * N + j];
            } else if (mode == 3) {
                float m = x[a * N + j];
                for (uint64_t r = a + 1; r < b; r++) {
                    float e = x[r * N + j];
                    if (isnan(e) || e > m) m = e;
                }
                o[j] = m;
            } else {
                double sum = 0.0;
                for (uint64_t r = a; r < b; r++) sum = sum + (double)x[r * N + j];
                const double len = (double)(b - a);
                o[j] = (float)(mode == 4 ? sum / sqrt(len) : sum / len);
            }
        }
    }
}

void rad_kbench_ref_l2_normalize(const float *x, float *out, uint64_t M, uint64_t N) {
    for (uint64_t i = 0; i < M; i++) {
        const float *row = x + i * N;
        double ss = 0.0;
        for (uint64_t j = 0; j < N; j++) {
            double sq = (double)row[j] * (double)row[j];
            ss = ss + sq;
        }
        double norm = sqrt(ss);
        if (norm < 1e-12) norm = 1e-12;
        for (uint64_t j = 0; j < N; j++) out[i * N + j] = (float)((double)row[j] / norm);
    }
}

float rad_kbench_ref_round(float v, RadDType t) {
    if (t == RAD_F16) return rad_f16_to_f32(rad_f32_to_f16(v));
    if (t == RAD_BF16) return rad_bf16_to_f32(rad_f32_to_bf16(v));
    return v;
}
