/* kern_test.c — a small, real kernel library for the core's tests (docs/PLUGINS.md).
 *
 * Scalar C, one kernel per op of the Llama vocabulary (docs/OPS.md), each computing the op's
 * reference definition in the reference's order: a sum runs k = 0, 1, ... in f32 with every
 * product stored before it is added (no FMA contraction), so the kernels that only add and
 * multiply are bit-identical to docs/OPS.md and say so (RAD_EXACT_BITWISE). rope and silu_mul
 * call cos/sin/exp and pow, whose last bit depends on the C library: they declare a tolerance.
 *
 * Weight layouts: plain floats only (f32, f16, bf16), so a GGML-block weight (q4_1, ...) given
 * to gemm_nt, logits_gemm, embed_gather or rmsnorm is refused at declare time.
 *
 * attn_paged is declared (kv_block_size 16, so rad_kv_block_size has something to read back)
 * but its run returns RAD_E_UNSUPPORTED: the paged KV manager, and with it the pool layout the
 * kernel reads, come with issue 4.
 *
 * Test seam: with KERN_TEST_NO_FUSED=1 in the environment when rad_kernels() is called, the
 * library leaves out the optional fused add_rmsnorm, so a test can drive both the fused path
 * and its add + rmsnorm chain.
 *
 * Built like any plugin: abi/ only, -shared -fvisibility=hidden, or out of tree with
 * `cc $(pkg-config --cflags radiance) -fPIC -shared -o kern_test.so kern_test.c -lm`. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <abi/rad_kernels.h>

typedef struct KtState {
    uint32_t rank, world_size; /* from RadKernelLibConfig */
} KtState;

/* ---- operands ------------------------------------------------------------------------------ */

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static float f16_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (mant << 13));
    if (exp) return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
    if (!mant) return bits_f32(sign);
    uint32_t e = 113; /* subnormal: normalise so the leading 1 reaches bit 10 */
    while (!(mant & 0x400u)) mant <<= 1, e--;
    return bits_f32(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}

static float bf16_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

/* Element k of row r of a plain-float weight (row_stride: bytes between rows). */
static float wval(const RadKArg *w, uint64_t r, uint64_t k) {
    const uint8_t *row = (const uint8_t *)w->data + r * w->row_stride;
    switch (w->dtype) {
    case RAD_F32: {
        float f;
        memcpy(&f, row + 4 * k, sizeof f);
        return f;
    }
    case RAD_F16: return f16_f32(rd16(row + 2 * k));
    default: return bf16_f32(rd16(row + 2 * k)); /* RAD_BF16: checked by weight_ok */
    }
}

static int is_plain(RadDType t) { return t == RAD_F32 || t == RAD_F16 || t == RAD_BF16; }

/* A weight [rows, cols] in a plain-float encoding with room for its rows. */
static int weight_ok(const RadKArg *w, uint64_t rows, uint64_t cols) {
    uint64_t esz = w->dtype == RAD_F32 ? 4 : 2;
    return w->data && is_plain(w->dtype) && w->rows == rows && w->cols == cols && (rows <= 1 || w->row_stride >= cols * esz);
}

/* An f32 buffer of at least `rows` rows of exactly `cols` columns. */
static int buf_ok(const RadKArg *b, uint64_t rows, uint64_t cols) {
    return b->data && b->dtype == RAD_F32 && b->rows >= rows && b->cols == cols && b->row_stride >= cols;
}

/* A raw i32 operand of at least n elements (rows = count, cols = 1). */
static int raw_i32_ok(const RadKArg *b, uint64_t n) { return b->data && b->dtype == RAD_I32 && b->rows >= n && b->cols == 1; }

static float *frow(const RadKArg *b, uint64_t r) { return (float *)b->data + r * b->row_stride; }

/* The parameter `name` (NULL when absent). */
static const RadParam *param(const RadKernelArgs *a, const char *name) {
    for (uint32_t i = 0; i < a->n_params; i++)
        if (a->params[i].name && strcmp(a->params[i].name, name) == 0) return &a->params[i];
    return NULL;
}

static int pint(const RadKernelArgs *a, const char *name, int64_t *v) {
    const RadParam *p = param(a, name);
    if (!p || p->kind != RAD_PARAM_INT) return 0;
    *v = p->lo;
    return 1;
}

static int pflt(const RadKernelArgs *a, const char *name, double *v) {
    const RadParam *p = param(a, name);
    if (!p || p->kind != RAD_PARAM_FLOAT) return 0;
    *v = p->f;
    return 1;
}

/* The checks every run starts with: a struct it can read, and not zero rows (docs/OPS.md:
 * zero rows is not a call). */
static int preamble(const RadKernelArgs *a, uint32_t n_args) {
    if (!a || a->struct_size < offsetof(RadKernelArgs, deterministic) + sizeof a->deterministic) return RAD_E_ARG;
    if (a->n <= 0) return RAD_E_SHAPE;
    if (a->n_args != n_args || !a->args) return RAD_E_SHAPE;
    return RAD_OK;
}

/* ---- gemm_nt, logits_gemm: y[i][n] = sum_k x[i][k] * W[n][k] -------------------------------- */

/* A GEMM call's checks (W [N, K], x [M, K], y [M, N]), shared by every GEMM here and in the
 * libraries that include this file; N, K out. */
static int gemm_args(const RadKernelArgs *a, int64_t *N, int64_t *K) {
    int rc = preamble(a, 3);
    if (rc) return rc;
    if (!pint(a, "N", N) || !pint(a, "K", K) || *N < 1 || *K < 1) return RAD_E_ARG;
    const uint64_t M = (uint64_t)a->n;
    if (!weight_ok(&a->args[0], (uint64_t)*N, (uint64_t)*K) || !buf_ok(&a->args[1], M, (uint64_t)*K) ||
        !buf_ok(&a->args[2], M, (uint64_t)*N))
        return RAD_E_SHAPE;
    return RAD_OK;
}

static int run_gemm(const RadKernelArgs *a) {
    int64_t N, K;
    int rc = gemm_args(a, &N, &K);
    if (rc) return rc;
    const RadKArg *w = &a->args[0], *x = &a->args[1], *y = &a->args[2];
    uint64_t M = (uint64_t)a->n;
    for (uint64_t i = 0; i < M; i++) {
        const float *xi = frow(x, i);
        float *yi = frow(y, i);
        for (uint64_t n = 0; n < (uint64_t)N; n++) {
            float acc = 0.0f;
            for (uint64_t k = 0; k < (uint64_t)K; k++) {
                const float p = xi[k] * wval(w, n, k);
                acc = acc + p;
            }
            yi[n] = acc;
        }
    }
    return RAD_OK;
}

/* ---- embed_gather: out[i] = table[ids[i]] ----------------------------------------------- */

static int run_embed_gather(const RadKernelArgs *a) {
    int rc = preamble(a, 3);
    if (rc) return rc;
    int64_t N, V;
    if (!pint(a, "N", &N) || !pint(a, "V", &V) || N < 1 || V < 1) return RAD_E_ARG;
    const RadKArg *t = &a->args[0], *ids = &a->args[1], *out = &a->args[2];
    uint64_t M = (uint64_t)a->n;
    if (!weight_ok(t, (uint64_t)V, (uint64_t)N) || !raw_i32_ok(ids, M) || !buf_ok(out, M, (uint64_t)N)) return RAD_E_SHAPE;
    const int32_t *id = ids->data;
    for (uint64_t i = 0; i < M; i++) /* all ids first: never partial output on error */
        if (id[i] < 0 || id[i] >= V) return RAD_E_ARG;
    for (uint64_t i = 0; i < M; i++) {
        float *o = frow(out, i);
        for (uint64_t j = 0; j < (uint64_t)N; j++) o[j] = wval(t, (uint64_t)id[i], j);
    }
    return RAD_OK;
}

/* ---- rmsnorm and the fused add_rmsnorm ------------------------------------------------------ */

/* out[j] = (x[j] * r) * gamma[j], r = 1 / sqrt(sum_j x[j]^2 / N + eps); out may be x. */
static void rmsnorm_row(const float *x, float *out, const RadKArg *g, uint64_t N, float eps) {
    float ss = 0.0f;
    for (uint64_t j = 0; j < N; j++) {
        const float sq = x[j] * x[j];
        ss = ss + sq;
    }
    const float mean = ss / (float)N;
    const float r = 1.0f / sqrtf(mean + eps);
    for (uint64_t j = 0; j < N; j++) {
        const float xr = x[j] * r;
        out[j] = xr * wval(g, 0, j);
    }
}

static int norm_params(const RadKernelArgs *a, int64_t *N, float *eps) {
    double e;
    if (!pint(a, "N", N) || !pflt(a, "eps", &e) || *N < 1 || !(e >= 0.0)) return RAD_E_ARG;
    *eps = (float)e;
    return RAD_OK;
}

static int run_rmsnorm(const RadKernelArgs *a) {
    int rc = preamble(a, 3);
    if (rc) return rc;
    int64_t N;
    float eps;
    if ((rc = norm_params(a, &N, &eps))) return rc;
    const RadKArg *g = &a->args[0], *x = &a->args[1], *out = &a->args[2];
    uint64_t M = (uint64_t)a->n;
    if (!weight_ok(g, 1, (uint64_t)N) || !buf_ok(x, M, (uint64_t)N) || !buf_ok(out, M, (uint64_t)N)) return RAD_E_SHAPE;
    for (uint64_t i = 0; i < M; i++) rmsnorm_row(frow(x, i), frow(out, i), g, (uint64_t)N, eps);
    return RAD_OK;
}

/* res = res + x; out = rmsnorm(res). Replaces add(res, x -> res) then rmsnorm(res -> out). */
static int run_add_rmsnorm(const RadKernelArgs *a) {
    int rc = preamble(a, 4);
    if (rc) return rc;
    int64_t N;
    float eps;
    if ((rc = norm_params(a, &N, &eps))) return rc;
    const RadKArg *g = &a->args[0], *x = &a->args[1], *res = &a->args[2], *out = &a->args[3];
    uint64_t M = (uint64_t)a->n;
    if (!weight_ok(g, 1, (uint64_t)N) || !buf_ok(x, M, (uint64_t)N) || !buf_ok(res, M, (uint64_t)N) ||
        !buf_ok(out, M, (uint64_t)N))
        return RAD_E_SHAPE;
    for (uint64_t i = 0; i < M; i++) {
        const float *xi = frow(x, i);
        float *ri = frow(res, i);
        for (uint64_t j = 0; j < (uint64_t)N; j++) ri[j] = ri[j] + xi[j];
        rmsnorm_row(ri, frow(out, i), g, (uint64_t)N, eps);
    }
    return RAD_OK;
}

/* ---- rope ------------------------------------------------------------------------------------ */

typedef struct RopeCfg {
    int64_t n_head, head_dim, n_rot, scaling, orig_ctx;
    double theta, factor, low, high;
} RopeCfg;

static int rope_cfg(const RadKernelArgs *a, RopeCfg *c) {
    if (!pint(a, "n_head", &c->n_head) || !pint(a, "head_dim", &c->head_dim) || !pint(a, "n_rot", &c->n_rot) ||
        !pflt(a, "theta", &c->theta) || !pint(a, "scaling", &c->scaling) || !pflt(a, "factor", &c->factor) ||
        !pflt(a, "low_freq_factor", &c->low) || !pflt(a, "high_freq_factor", &c->high) || !pint(a, "orig_ctx", &c->orig_ctx))
        return RAD_E_ARG;
    if (c->n_head < 1 || c->head_dim < 2 || c->n_rot < 2 || c->n_rot > c->head_dim || c->n_rot % 2 || !(c->theta > 0.0))
        return RAD_E_ARG;
    if (c->scaling < 0 || c->scaling > 2) return RAD_E_ARG;
    if (c->scaling >= 1 && !(c->factor > 0.0)) return RAD_E_ARG;
    if (c->scaling == 2 && (!(c->low > 0.0) || !(c->high > c->low) || c->orig_ctx < 1)) return RAD_E_ARG;
    return RAD_OK;
}

/* inv_freq[i], i < n_rot/2: docs/OPS.md's f32 sequence (abi/rad_kernels.h). */
static float rope_inv_freq(const RopeCfg *c, int64_t i) {
    return rad_rope_inv_freq(i, c->n_rot, c->theta, c->scaling, c->factor, c->low, c->high, c->orig_ctx);
}

static size_t rope_workspace(const RadParam *p, uint32_t np, int64_t n_max) {
    (void)n_max;
    for (uint32_t i = 0; i < np; i++)
        if (p[i].name && strcmp(p[i].name, "n_rot") == 0 && p[i].lo > 0) return (size_t)(p[i].lo / 2) * sizeof(float);
    return 0;
}

/* x [M, n_head*head_dim] in place; pos raw i32 [M]. Rotate-half pairs (j, j + n_rot/2). */
static int run_rope(const RadKernelArgs *a) {
    int rc = preamble(a, 2);
    if (rc) return rc;
    RopeCfg c;
    if ((rc = rope_cfg(a, &c))) return rc;
    const RadKArg *x = &a->args[0], *pos = &a->args[1];
    uint64_t M = (uint64_t)a->n, W = (uint64_t)(c.n_head * c.head_dim);
    if (!buf_ok(x, M, W) || !raw_i32_ok(pos, M)) return RAD_E_SHAPE;
    const int32_t *p = pos->data;
    for (uint64_t i = 0; i < M; i++)
        if (p[i] < 0) return RAD_E_ARG;
    int64_t half = c.n_rot / 2;
    float *inv = a->workspace; /* workspace() bytes when the core gives them; else computed per use */
    if (inv)
        for (int64_t j = 0; j < half; j++) inv[j] = rope_inv_freq(&c, j);
    for (uint64_t i = 0; i < M; i++) {
        float *row = frow(x, i);
        const float fp = (float)p[i];
        for (int64_t j = 0; j < half; j++) {
            const float f = inv ? inv[j] : rope_inv_freq(&c, j);
            const float ang = fp * f;
            const float cs = (float)cos((double)ang), sn = (float)sin((double)ang);
            for (int64_t h = 0; h < c.n_head; h++) {
                float *hd = row + h * c.head_dim;
                const float x0 = hd[j], x1 = hd[j + half];
                const float a0 = x0 * cs, b0 = x1 * sn;
                const float a1 = x1 * cs, b1 = x0 * sn;
                hd[j] = a0 - b0;
                hd[j + half] = a1 + b1;
            }
        }
    }
    return RAD_OK;
}

/* ---- silu_mul, add ---------------------------------------------------------------------------- */

static int run_silu_mul(const RadKernelArgs *a) {
    int rc = preamble(a, 3);
    if (rc) return rc;
    int64_t N;
    if (!pint(a, "N", &N) || N < 1) return RAD_E_ARG;
    const RadKArg *g = &a->args[0], *u = &a->args[1], *out = &a->args[2];
    uint64_t M = (uint64_t)a->n;
    if (!buf_ok(g, M, (uint64_t)N) || !buf_ok(u, M, (uint64_t)N) || !buf_ok(out, M, (uint64_t)N)) return RAD_E_SHAPE;
    for (uint64_t i = 0; i < M; i++) {
        const float *gi = frow(g, i), *ui = frow(u, i);
        float *oi = frow(out, i);
        for (uint64_t j = 0; j < (uint64_t)N; j++) {
            const float e = (float)exp(-(double)gi[j]);
            const float s = gi[j] / (1.0f + e);
            oi[j] = s * ui[j];
        }
    }
    return RAD_OK;
}

static int run_add(const RadKernelArgs *a) {
    int rc = preamble(a, 3);
    if (rc) return rc;
    int64_t N;
    if (!pint(a, "N", &N) || N < 1) return RAD_E_ARG;
    const RadKArg *x = &a->args[0], *y = &a->args[1], *out = &a->args[2];
    uint64_t M = (uint64_t)a->n;
    if (!buf_ok(x, M, (uint64_t)N) || !buf_ok(y, M, (uint64_t)N) || !buf_ok(out, M, (uint64_t)N)) return RAD_E_SHAPE;
    for (uint64_t i = 0; i < M; i++) {
        const float *xi = frow(x, i), *yi = frow(y, i);
        float *oi = frow(out, i);
        for (uint64_t j = 0; j < (uint64_t)N; j++) oi[j] = xi[j] + yi[j];
    }
    return RAD_OK;
}

/* ---- all_reduce: one rank only (the sum over one rank is the identity) ------------------- */

static int run_all_reduce(const RadKernelArgs *a) {
    int rc = preamble(a, 1);
    if (rc) return rc;
    int64_t N, exact;
    if (!pint(a, "N", &N) || !pint(a, "exact", &exact) || N < 1) return RAD_E_ARG;
    if (!buf_ok(&a->args[0], (uint64_t)a->n, (uint64_t)N)) return RAD_E_SHAPE;
    const KtState *s = a->lib_state;
    if (s && s->world_size > 1) return RAD_E_UNSUPPORTED; /* no transport: a test library */
    return RAD_OK;
}

/* ---- logits_gather: out[i] = x[rows[i]] --------------------------------------------------- */

static int run_logits_gather(const RadKernelArgs *a) {
    int rc = preamble(a, 3);
    if (rc) return rc;
    int64_t N;
    if (!pint(a, "N", &N) || N < 1) return RAD_E_ARG;
    const RadKArg *x = &a->args[0], *rows = &a->args[1], *out = &a->args[2];
    uint64_t M = (uint64_t)a->n;
    if (!buf_ok(x, 1, (uint64_t)N) || !raw_i32_ok(rows, M) || !buf_ok(out, M, (uint64_t)N)) return RAD_E_SHAPE;
    const int32_t *r = rows->data;
    for (uint64_t i = 0; i < M; i++)
        if (r[i] < 0 || (uint64_t)r[i] >= x->rows) return RAD_E_ARG;
    for (uint64_t i = 0; i < M; i++) memcpy(frow(out, i), frow(x, (uint64_t)r[i]), (size_t)N * sizeof(float));
    return RAD_OK;
}

/* ---- attn_paged: declared, not yet run ------------------------------------------------------ */

/* attn_paged exactly as docs/OPS.md writes its reference, over an f32 cache in the HND pool
 * layout: append every row's k/v, then causal attention per row. */
static int run_attn_paged(const RadKernelArgs *a) {
    int rc = preamble(a, 4);
    if (rc) return rc;
    int64_t H, G, hd;
    double scale;
    if (!pint(a, "n_head", &H) || !pint(a, "n_head_kv", &G) || !pint(a, "head_dim", &hd) || !pflt(a, "scale", &scale) ||
        H < 1 || G < 1 || hd < 1 || H % G)
        return RAD_E_ARG;
    const RadBatch *bt = a->batch;
    const RadKvState *kv = a->kv;
    if (!bt || !kv || !kv->pool || !kv->block_table || kv->dtype != RAD_F32 || !kv->block_size) return RAD_E_UNSUPPORTED;
    const RadKArg *q = &a->args[0], *k = &a->args[1], *v = &a->args[2], *out = &a->args[3];
    uint64_t M = (uint64_t)a->n;
    if (M != bt->n_tok || !buf_ok(q, M, (uint64_t)(H * hd)) || !buf_ok(k, M, (uint64_t)(G * hd)) ||
        !buf_ok(v, M, (uint64_t)(G * hd)) || !buf_ok(out, M, (uint64_t)(H * hd)))
        return RAD_E_SHAPE;
    uint32_t B = kv->block_size;
    uint8_t *pool = kv->pool;
    uint64_t bb = kv->block_bytes, vo = (uint64_t)G * B * hd * sizeof(float);
#define KP(blk, g, o) ((float *)(pool + (uint64_t)(blk) * bb + (((uint64_t)(g) * B + (o)) * hd) * sizeof(float)))
    for (uint32_t s = 0; s < bt->n_seq; s++) /* check the slots before writing anything */
        if (bt->ctx_lens[s] < bt->q_lens[s] || (uint32_t)(bt->ctx_lens[s] + B - 1) / B > kv->max_blocks) return RAD_E_ARG;
    for (uint32_t s = 0; s < bt->n_seq; s++)
        for (int32_t t = bt->cu_seqlens[s]; t < bt->cu_seqlens[s + 1]; t++) {
            int32_t j = bt->ctx_lens[s] - bt->q_lens[s] + (t - bt->cu_seqlens[s]);
            int32_t blk = kv->block_table[(uint64_t)s * kv->max_blocks + (uint32_t)j / B];
            for (int64_t g = 0; g < G; g++) {
                memcpy(KP(blk, g, (uint32_t)j % B), frow(k, (uint64_t)t) + g * hd, (size_t)hd * sizeof(float));
                memcpy((uint8_t *)KP(blk, g, (uint32_t)j % B) + vo, frow(v, (uint64_t)t) + g * hd, (size_t)hd * sizeof(float));
            }
        }
    float *sc = malloc((size_t)kv->max_blocks * B * sizeof *sc);
    if (!sc) return RAD_E_NOMEM;
    for (uint32_t s = 0; s < bt->n_seq; s++)
        for (int32_t t = bt->cu_seqlens[s]; t < bt->cu_seqlens[s + 1]; t++) {
            int32_t jt = bt->ctx_lens[s] - bt->q_lens[s] + (t - bt->cu_seqlens[s]);
            const int32_t *tab = kv->block_table + (uint64_t)s * kv->max_blocks;
            for (int64_t h = 0; h < H; h++) {
                int64_t g = h / (H / G);
                const float *qh = frow(q, (uint64_t)t) + h * hd;
                float m = -INFINITY;
                for (int32_t i = 0; i <= jt; i++) {
                    const float *ki = KP(tab[(uint32_t)i / B], g, (uint32_t)i % B);
                    float dot = 0.0f;
                    for (int64_t d = 0; d < hd; d++) { float pr = qh[d] * ki[d]; dot = dot + pr; }
                    sc[i] = dot * (float)scale;
                    if (sc[i] > m) m = sc[i];
                }
                float l = 0.0f;
                for (int32_t i = 0; i <= jt; i++) { sc[i] = expf(sc[i] - m); l = l + sc[i]; }
                float *oh = frow(out, (uint64_t)t) + h * hd;
                for (int64_t d = 0; d < hd; d++) {
                    float acc = 0.0f;
                    for (int32_t i = 0; i <= jt; i++) {
                        const float *vi = (const float *)(const void *)((const uint8_t *)KP(tab[(uint32_t)i / B], g, (uint32_t)i % B) + vo);
                        float pv = sc[i] * vi[d];
                        acc = acc + pv;
                    }
                    oh[d] = acc / l;
                }
            }
        }
#undef KP
    free(sc);
    return RAD_OK;
}

/* ---- the table -------------------------------------------------------------------------------- */

/* Seams for the selector's tests: a file that includes this one may rename the library, state a
 * tolerance on the fused add_rmsnorm, put an attention variant with its own KV block size
 * over a narrower extent before the generic one (kern_loose.c, kern_kvblock.c), and put kernels
 * of its own first in the table, so the selector prefers them (KERN_TEST_FIRST_KERNELS: table
 * entries with a trailing comma; kern_wrong.c). */
#ifndef KERN_TEST_NAME
#define KERN_TEST_NAME "kern_test"
#define KERN_TEST_DESC "scalar test kernels for the Llama vocabulary (f32/f16/bf16 weights)"
#endif
#ifdef KERN_TEST_FUSED_TOL
#define KERN_TEST_FUSED_EXACT RAD_EXACT_TOLERANCE, KERN_TEST_FUSED_TOL
#else
#define KERN_TEST_FUSED_EXACT RAD_EXACT_BITWISE, 0.0
#endif

#define K_(OP, VAR, ENCS, NMIN, NMAX, KVB, EX, TOL, WS, RUN) \
    {sizeof(RadKernel), OP, VAR, ENCS, RAD_F32, NMIN, NMAX, KVB, EX, TOL, 1, WS, RUN, 0, 0, 0, NULL, 0, 0}

#define KX_(...) K_(__VA_ARGS__) /* KERN_TEST_FUSED_EXACT expands to two arguments first */

static const RadKernel kernels[] = {
#ifdef KERN_TEST_FIRST_KERNELS
    KERN_TEST_FIRST_KERNELS
#endif
    K_("embed_gather", "generic", RAD_ENC_PLAIN_FLOATS, 1, 0, 0, RAD_EXACT_BITWISE, 0.0, NULL, run_embed_gather),
    K_("rmsnorm", "generic", RAD_ENC_PLAIN_FLOATS, 1, 0, 0, RAD_EXACT_BITWISE, 0.0, NULL, run_rmsnorm),
    K_("gemm_nt", "generic", RAD_ENC_PLAIN_FLOATS, 1, 0, 0, RAD_EXACT_BITWISE, 0.0, NULL, run_gemm),
    /* a second variant over a narrower extent, so selection by range has something to choose */
    K_("gemm_nt", "gemv", RAD_ENC_PLAIN_FLOATS, 1, 1, 0, RAD_EXACT_BITWISE, 0.0, NULL, run_gemm),
    K_("rope", "generic", 0, 1, 0, 0, RAD_EXACT_TOLERANCE, 1e-6, rope_workspace, run_rope),
#ifdef KERN_TEST_ATTN_NARROW_VARIANT
    K_("attn_paged", KERN_TEST_ATTN_NARROW_VARIANT, 0, 1, KERN_TEST_ATTN_NARROW_NMAX, KERN_TEST_ATTN_NARROW_KVB,
       RAD_EXACT_TOLERANCE, 1e-5, NULL, run_attn_paged),
#endif
    K_("attn_paged", "generic", 0, 1, 0, 16, RAD_EXACT_TOLERANCE, 1e-5, NULL, run_attn_paged),
    K_("silu_mul", "generic", 0, 1, 0, 0, RAD_EXACT_TOLERANCE, 1e-6, NULL, run_silu_mul),
    K_("add", "generic", 0, 1, 0, 0, RAD_EXACT_BITWISE, 0.0, NULL, run_add),
    /* a test op outside the vocabulary (tests/plugins/arch_decls.c): `add` over a sequence chunk
     * of at most 2 rows, so the core must cut steps at this kernel's n_max */
    K_("decls_chunked", "generic", 0, 1, 2, 0, RAD_EXACT_BITWISE, 0.0, NULL, run_add),
    K_("all_reduce", "generic", 0, 1, 0, 0, RAD_EXACT_BITWISE, 0.0, NULL, run_all_reduce),
    K_("logits_gather", "generic", 0, 1, 0, 0, RAD_EXACT_BITWISE, 0.0, NULL, run_logits_gather),
    K_("logits_gemm", "generic", RAD_ENC_PLAIN_FLOATS, 1, 0, 0, RAD_EXACT_BITWISE, 0.0, NULL, run_gemm),
    /* optional fusions last: KERN_TEST_NO_FUSED drops them by shortening the table */
    KX_("add_rmsnorm", "generic", RAD_ENC_PLAIN_FLOATS, 1, 0, 0, KERN_TEST_FUSED_EXACT, NULL, run_add_rmsnorm),
};
#define N_KERNELS ((uint32_t)(sizeof kernels / sizeof kernels[0]))
#define N_FUSED 1u

static int kt_init(const RadKernelLibConfig *cfg, void **state) {
    KtState *s = calloc(1, sizeof *s);
    if (!s) return RAD_E_NOMEM;
    s->world_size = 1;
    if (cfg && cfg->struct_size >= offsetof(RadKernelLibConfig, world_size) + sizeof cfg->world_size) {
        s->rank = cfg->rank;
        s->world_size = cfg->world_size ? cfg->world_size : 1;
    }
    *state = s;
    return RAD_OK;
}

static void kt_fini(void *state) { free(state); }

static const RadKernelLib lib_full = {sizeof(RadKernelLib), RAD_DEVICE_CPU, kernels, N_KERNELS, kt_init, kt_fini,
                                      NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
static const RadKernelLib lib_unfused = {sizeof(RadKernelLib), RAD_DEVICE_CPU, kernels, N_KERNELS - N_FUSED, kt_init,
                                         kt_fini, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};

static const RadKernelLib *kern_test_lib(void) {
    const char *v = getenv("KERN_TEST_NO_FUSED");
    return v && *v && strcmp(v, "0") != 0 ? &lib_unfused : &lib_full;
}

RAD_KERNEL_LIB(*kern_test_lib(), KERN_TEST_NAME, "0.1.0", KERN_TEST_DESC)
