/* r4d_elem.cu — the memory-bound ops: gathers, norms, activations, adds, scale, rope.
 *
 * Each reproduces docs/OPS.md's reference operation by operation where the op's class is exact
 * (gathers, add, add_bias, scale: bitwise) and computes the transcendental ones in double,
 * rounded once (silu, GELU's tanh, rope's cos/sin), as the reference does; the norms sum their
 * squares in a tree (TOLERANCE 1e-5). Raw operands are checked on the host (planes[1]) before
 * anything is launched, so a refused call writes nothing. */
#include <math.h>
#include <string.h>

#include "r4d.cuh"

#define THREADS 256

/* ---- block reduction -------------------------------------------------------------------------------- */

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
/* The sum of v over the block (THREADS threads), the same value in every thread. */
__device__ float block_sum(float v) {
    __shared__ float part[THREADS / 32];
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = 0.0f;
    for (int w = 0; w < THREADS / 32; w++) s += part[w];
    __syncthreads();
    return s;
}

/* ---- gathers ------------------------------------------------------------------------------------------ */

/* out[i] = dequant(table[ids[i] - row0]) when that row is held, else zeros. */
__global__ void k_embed(int enc, const uint8_t *table, uint64_t stride, int64_t V, int64_t row0, int64_t N, const int32_t *ids,
                        float *out, uint64_t out_stride) {
    const int64_t i = blockIdx.x;
    const int64_t r = (int64_t)ids[i] - row0;
    float *y = out + i * out_stride;
    const uint8_t *row = r >= 0 && r < V ? table + (uint64_t)r * stride : NULL;
    if (enc == RAD_F32 || enc == RAD_F16 || enc == RAD_BF16) {
        for (int64_t j = threadIdx.x; j < N; j += blockDim.x) y[j] = row ? r4d_dec_plain(enc, row, j) : 0.0f;
        return;
    }
    float g[32];
    for (int64_t grp = threadIdx.x; grp < N / 32; grp += blockDim.x) {
        if (row) r4d_dec_group(enc, row, grp, g);
        for (int j = 0; j < 32; j++) y[grp * 32 + j] = row ? g[j] : 0.0f;
    }
}

static int embed(const RadKernelArgs *a, int part) {
    int rc = r4d_preamble(a, 3);
    if (rc) return rc;
    int64_t N, V, row0 = 0, n_vocab;
    if (!r4d_pint(a, "N", &N) || !r4d_pint(a, "V", &V) || N < 1 || V < 1) return RAD_E_ARG;
    if (part && (!r4d_pint(a, "row0", &row0) || !r4d_pint(a, "n_vocab", &n_vocab) || row0 < 0 || row0 + V > n_vocab))
        return RAD_E_ARG;
    if (!part) n_vocab = V;
    const RadKArg *w = &a->args[0], *ids = &a->args[1], *out = &a->args[2];
    if (!r4d_weight_ok(w, RAD_ENC_PLAIN_FLOATS | RAD_ENC_GGML_BLOCKS, 0, (uint64_t)V, (uint64_t)N) || !r4d_raw_ok(ids, (uint64_t)a->n) ||
        !r4d_buf_ok(out, (uint64_t)a->n, (uint64_t)N))
        return RAD_E_SHAPE;
    const int32_t *h = r4d_raw_host(ids);
    for (int64_t i = 0; i < a->n; i++)
        if (h[i] < 0 || h[i] >= n_vocab) return RAD_E_ARG;
    R4D_GATE(a);
    k_embed<<<(unsigned)a->n, 128, 0, r4d_stream(a)>>>((int)w->dtype, (const uint8_t *)w->data, w->row_stride, V, row0, N,
                                                      (const int32_t *)ids->data, (float *)out->data, out->row_stride);
    R4D_LAUNCHED();
    return RAD_OK;
}
extern "C" int r4d_run_embed_gather(const RadKernelArgs *a) { return embed(a, 0); }
extern "C" int r4d_run_embed_gather_part(const RadKernelArgs *a) { return embed(a, 1); }

__global__ void k_rows(const float *x, uint64_t xs, const int32_t *rows, float *out, uint64_t os, int64_t N) {
    const float *s = x + (uint64_t)rows[blockIdx.x] * xs;
    float *d = out + (uint64_t)blockIdx.x * os;
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) d[j] = s[j];
}
extern "C" int r4d_run_logits_gather(const RadKernelArgs *a) {
    int rc = r4d_preamble(a, 3);
    if (rc) return rc;
    int64_t N;
    if (!r4d_pint(a, "N", &N) || N < 1) return RAD_E_ARG;
    const RadKArg *x = &a->args[0], *rows = &a->args[1], *out = &a->args[2];
    if (!r4d_buf_ok(x, 1, (uint64_t)N) || !r4d_raw_ok(rows, (uint64_t)a->n) || !r4d_buf_ok(out, (uint64_t)a->n, (uint64_t)N))
        return RAD_E_SHAPE;
    const int32_t *h = r4d_raw_host(rows);
    for (int64_t i = 0; i < a->n; i++)
        if (h[i] < 0 || (uint64_t)h[i] >= x->rows) return RAD_E_ARG;
    R4D_GATE(a);
    k_rows<<<(unsigned)a->n, THREADS, 0, r4d_stream(a)>>>((const float *)x->data, x->row_stride, (const int32_t *)rows->data,
                                                          (float *)out->data, out->row_stride, N);
    R4D_LAUNCHED();
    return RAD_OK;
}

/* ---- argmax: each row's first largest value (docs/OPS.md), one block a row --------------------------- */

/* Each thread keeps the first largest non-NaN value of its stride, then the block reduces pairs
 * (v, j): the larger v wins, an equal v (-0 == +0) the lower j. That is the reference loop's
 * answer whenever x[0] is not NaN; a NaN x[0] answers 0 (nothing compares greater than it). */
__global__ void k_argmax(const float *x, uint64_t xs, int64_t N, float *out, uint64_t os) {
    __shared__ float sv[THREADS];
    __shared__ int64_t sj[THREADS];
    const float *r = x + (uint64_t)blockIdx.x * xs;
    float bv = 0.0f;
    int64_t bj = -1;
    for (int64_t j = threadIdx.x; j < N; j += THREADS) {
        const float v = r[j];
        if (v == v && (bj < 0 || v > bv)) bv = v, bj = j;
    }
    sv[threadIdx.x] = bv, sj[threadIdx.x] = bj;
    __syncthreads();
    for (unsigned h = THREADS / 2; h > 0; h >>= 1) {
        if (threadIdx.x < h) {
            const float ov = sv[threadIdx.x + h];
            const int64_t oj = sj[threadIdx.x + h];
            if (oj >= 0 && (sj[threadIdx.x] < 0 || ov > sv[threadIdx.x] || (ov == sv[threadIdx.x] && oj < sj[threadIdx.x])))
                sv[threadIdx.x] = ov, sj[threadIdx.x] = oj;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) out[(uint64_t)blockIdx.x * os] = (float)(r[0] != r[0] || sj[0] < 0 ? 0 : sj[0]);
}
extern "C" int r4d_run_argmax(const RadKernelArgs *a) {
    int rc = r4d_preamble(a, 2);
    if (rc) return rc;
    int64_t N;
    if (!r4d_pint(a, "N", &N) || N < 1 || N > (1 << 24)) return RAD_E_ARG;
    const RadKArg *x = &a->args[0], *out = &a->args[1];
    if (!r4d_buf_ok(x, (uint64_t)a->n, (uint64_t)N) || !r4d_buf_ok(out, (uint64_t)a->n, 1)) return RAD_E_SHAPE;
    R4D_GATE(a);
    k_argmax<<<(unsigned)a->n, THREADS, 0, r4d_stream(a)>>>((const float *)x->data, x->row_stride, N, (float *)out->data,
                                                            out->row_stride);
    R4D_LAUNCHED();
    return RAD_OK;
}

/* ---- norms --------------------------------------------------------------------------------------------- */

/* One block per slice of n elements: slice b is row b / per_row, columns (b % per_row)·n. res
 * (add_rmsnorm) is first summed into: res = res + x, and res is normalised. */
__global__ void k_rmsnorm(int genc, const uint8_t *gamma, const float *x, uint64_t xs, float *res, uint64_t rs, float *out,
                          uint64_t os, int64_t n, int per_row, float eps) {
    const uint64_t row = blockIdx.x / per_row, c0 = (uint64_t)(blockIdx.x % per_row) * (uint64_t)n;
    const float *xr = x + row * xs + c0;
    float *rr = res ? res + row * rs + c0 : NULL, *yr = out + row * os + c0;
    float ss = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += THREADS) {
        float v = xr[j];
        if (rr) rr[j] = v = __fadd_rn(rr[j], v);
        ss += v * v;
    }
    ss = block_sum(ss);
    const float mean = __fdiv_rn(ss, (float)n);
    const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
    const float *src = rr ? rr : xr;
    for (int64_t j = threadIdx.x; j < n; j += THREADS) yr[j] = __fmul_rn(__fmul_rn(src[j], r), r4d_dec_plain(genc, gamma, j));
}

static int norm(const RadKernelArgs *a, int fused, int heads) {
    int rc = r4d_preamble(a, fused ? 4 : heads ? 2 : 3);
    if (rc) return rc;
    int64_t N, n_head = 1, hd;
    double eps;
    if (heads) {
        if (!r4d_pint(a, "n_head", &n_head) || !r4d_pint(a, "head_dim", &hd) || n_head < 1 || hd < 1) return RAD_E_ARG;
        N = n_head * hd;
    } else {
        if (!r4d_pint(a, "N", &N) || N < 1) return RAD_E_ARG;
        hd = N;
    }
    if (!r4d_pflt(a, "eps", &eps)) return RAD_E_ARG;
    const RadKArg *g = &a->args[0], *x = &a->args[1];
    const RadKArg *res = fused ? &a->args[2] : NULL, *out = heads ? x : &a->args[fused ? 3 : 2];
    const uint64_t M = (uint64_t)a->n;
    if (!r4d_weight_ok(g, RAD_ENC_PLAIN_FLOATS, 0, 1, (uint64_t)hd) || !r4d_buf_ok(x, M, (uint64_t)N) ||
        (res && !r4d_buf_ok(res, M, (uint64_t)N)) || !r4d_buf_ok(out, M, (uint64_t)N))
        return RAD_E_SHAPE;
    if (res && (res->data == out->data || res->data == x->data)) return RAD_E_ARG; /* OPS.md: out never aliases res */
    R4D_GATE(a);
    k_rmsnorm<<<(unsigned)(M * (uint64_t)n_head), THREADS, 0, r4d_stream(a)>>>(
        (int)g->dtype, (const uint8_t *)g->data, (const float *)x->data, x->row_stride, res ? (float *)res->data : NULL,
        res ? res->row_stride : 0, (float *)out->data, out->row_stride, hd, (int)n_head, (float)eps);
    R4D_LAUNCHED();
    return RAD_OK;
}
extern "C" int r4d_run_rmsnorm(const RadKernelArgs *a) { return norm(a, 0, 0); }
extern "C" int r4d_run_add_rmsnorm(const RadKernelArgs *a) { return norm(a, 1, 0); }
extern "C" int r4d_run_head_rmsnorm(const RadKernelArgs *a) { return norm(a, 0, 1); }

/* ---- elementwise ------------------------------------------------------------------------------------------ */

enum { EW_SILU, EW_GELU, EW_ADD, EW_BIAS, EW_SCALE };

/* out = f(a, b) over [M, N]; b is a row of N (add_bias's weight, widened) for EW_BIAS. */
__global__ void k_ew(int op, const float *pa, uint64_t as, const float *pb, uint64_t bs, int benc, const uint8_t *bias, float *out,
                     uint64_t os, int64_t N, float f) {
    const uint64_t i = blockIdx.y;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < N; j += (int64_t)gridDim.x * blockDim.x) {
        const float g = pa[i * as + j];
        float y;
        switch (op) {
        case EW_SILU: {
            const float e = (float)exp(-(double)g); /* correctly rounded, inf below -88.7 */
            y = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, e)), pb[i * bs + j]);
            break;
        }
        case EW_GELU: {
            const double xd = g, u = 0.7978845608028654 * (xd + 0.044715 * xd * xd * xd);
            y = __fmul_rn((float)(0.5 * xd * (1.0 + tanh(u))), pb[i * bs + j]);
            break;
        }
        case EW_ADD: y = __fadd_rn(g, pb[i * bs + j]); break;
        case EW_BIAS: y = __fadd_rn(g, r4d_dec_plain(benc, bias, j)); break;
        default: y = __fmul_rn(g, f); break;
        }
        out[i * os + j] = y;
    }
}

static int ew(const RadKernelArgs *a, int op) {
    const uint32_t na = op == EW_SILU || op == EW_GELU || op == EW_ADD ? 3 : 2;
    int rc = r4d_preamble(a, na);
    if (rc) return rc;
    int64_t N;
    double f = 0.0;
    if (!r4d_pint(a, "N", &N) || N < 1 || (op == EW_SCALE && !r4d_pflt(a, "factor", &f))) return RAD_E_ARG;
    const uint64_t M = (uint64_t)a->n;
    const RadKArg *x, *b = NULL, *w = NULL, *out;
    if (op == EW_BIAS) {
        w = &a->args[0], x = out = &a->args[1];
        if (!r4d_weight_ok(w, RAD_ENC_PLAIN_FLOATS, 0, 1, (uint64_t)N)) return RAD_E_SHAPE;
    } else if (op == EW_SCALE) {
        x = out = &a->args[0];
    } else {
        x = &a->args[0], b = &a->args[1], out = &a->args[2];
        if (!r4d_buf_ok(b, M, (uint64_t)N)) return RAD_E_SHAPE;
    }
    if (!r4d_buf_ok(x, M, (uint64_t)N) || !r4d_buf_ok(out, M, (uint64_t)N)) return RAD_E_SHAPE;
    if (M > 65535) return RAD_E_LIMIT;
    const dim3 grid(r4d_blocks((uint64_t)N, THREADS) < 64 ? r4d_blocks((uint64_t)N, THREADS) : 64, (unsigned)M);
    R4D_GATE(a);
    k_ew<<<grid, THREADS, 0, r4d_stream(a)>>>(op, (const float *)x->data, x->row_stride, b ? (const float *)b->data : NULL,
                                              b ? b->row_stride : 0, w ? (int)w->dtype : 0, w ? (const uint8_t *)w->data : NULL,
                                              (float *)out->data, out->row_stride, N, (float)f);
    R4D_LAUNCHED();
    return RAD_OK;
}
extern "C" int r4d_run_silu_mul(const RadKernelArgs *a) { return ew(a, EW_SILU); }
extern "C" int r4d_run_gelu_tanh_mul(const RadKernelArgs *a) { return ew(a, EW_GELU); }
extern "C" int r4d_run_add(const RadKernelArgs *a) { return ew(a, EW_ADD); }
extern "C" int r4d_run_add_bias(const RadKernelArgs *a) { return ew(a, EW_BIAS); }
extern "C" int r4d_run_scale(const RadKernelArgs *a) { return ew(a, EW_SCALE); }

/* ---- rope -------------------------------------------------------------------------------------------------- */

extern "C" size_t r4d_rope_workspace(const RadParam *p, uint32_t np, int64_t n_max) {
    (void)n_max;
    for (uint32_t i = 0; i < np; i++)
        if (p[i].name && strcmp(p[i].name, "n_rot") == 0 && p[i].lo > 0) return (size_t)p[i].lo / 2 * sizeof(float);
    return 0;
}

/* inv[i] / freq_factors[i] into t; a factor that is not positive and finite is the call's refusal. */
__global__ void k_rope_factors(const float *inv, int fenc, const uint8_t *ff, int64_t hf, float *t, int *err) {
    for (int64_t i = threadIdx.x; i < hf; i += blockDim.x) {
        const float f = r4d_dec_plain(fenc, ff, i);
        if (!(f > 0.0f) || isinf(f)) atomicCAS(err, 0, RAD_E_ARG);
        t[i] = __fdiv_rn(inv[i], f);
    }
}
/* One block per (row, head); thread i rotates pair i. Skipped whole when err is set. */
__global__ void k_rope(float *x, uint64_t xs, const int32_t *pos, const float *inv, int64_t n_head, int64_t hd, int64_t hf,
                       const int *err) {
    if (err && *err) return;
    const uint64_t t = blockIdx.x / n_head, h = blockIdx.x % n_head;
    float *v = x + t * xs + h * (uint64_t)hd;
    const float p = (float)pos[t];
    for (int64_t i = threadIdx.x; i < hf; i += blockDim.x) {
        const float ang = __fmul_rn(p, inv[i]);
        const float c = (float)cos((double)ang), s = (float)sin((double)ang);
        const float x0 = v[i], x1 = v[i + hf];
        v[i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        v[i + hf] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
    }
}

/* The device table for c: made once per parameter set (16 kept), NULL when it cannot be made. */
static const float *rope_table(R4dState *s, const R4dRope *c) {
    for (int i = 0; i < s->n_rope; i++)
        if (!memcmp(&s->rope[i].c, c, sizeof *c)) return s->rope[i].inv;
    if (s->n_rope == 16) return NULL;
    const size_t bytes = (size_t)(c->n_rot / 2) * sizeof(float);
    float *host = (float *)malloc(bytes), *dev = NULL;
    if (!host) return NULL;
    r4d_rope_table(c, host);
    const int ok = cudaMalloc((void **)&dev, bytes) == cudaSuccess && cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess;
    free(host);
    if (!ok) return cudaFree(dev), (const float *)NULL;
    memset(&s->rope[s->n_rope].c, 0, sizeof *c); /* padding compared by memcmp above */
    s->rope[s->n_rope].c = *c, s->rope[s->n_rope].inv = dev;
    return s->rope[s->n_rope++].inv;
}

extern "C" int r4d_run_rope(const RadKernelArgs *a) {
    const uint32_t na = a && a->args && a->n_args == 3 ? 3 : 2; /* freq_factors (first), x, pos */
    int rc = r4d_preamble(a, na);
    if (rc) return rc;
    R4dRope c;
    memset(&c, 0, sizeof c);
    if ((rc = r4d_rope_cfg(a, &c))) return rc;
    const int64_t hf = c.n_rot / 2;
    const RadKArg *ff = na == 3 ? &a->args[0] : NULL, *x = &a->args[na - 2], *pos = &a->args[na - 1];
    if (!r4d_buf_ok(x, (uint64_t)a->n, (uint64_t)(c.n_head * c.head_dim)) || !r4d_raw_ok(pos, (uint64_t)a->n)) return RAD_E_SHAPE;
    if (ff && !r4d_weight_ok(ff, RAD_ENC_PLAIN_FLOATS, 0, 1, (uint64_t)hf)) return RAD_E_SHAPE;
    const int32_t *hp = r4d_raw_host(pos);
    for (int64_t t = 0; t < a->n; t++)
        if (hp[t] < 0) return RAD_E_ARG;
    R4dState *s = r4d_state(a);
    if (!s) return RAD_E_ARG;
    const float *inv = rope_table(s, &c);
    if (!inv) return RAD_E_NOMEM;
    if (ff && !a->workspace) return RAD_E_ARG;
    R4D_GATE(a);
    if (ff) {
        k_rope_factors<<<1, 256, 0, s->stream>>>(inv, (int)ff->dtype, (const uint8_t *)ff->data, hf, (float *)a->workspace, s->err);
        R4D_LAUNCHED();
        inv = (const float *)a->workspace;
    }
    k_rope<<<(unsigned)((uint64_t)a->n * (uint64_t)c.n_head), 128, 0, s->stream>>>((float *)x->data, x->row_stride,
                                                                               (const int32_t *)pos->data, inv, c.n_head,
                                                                               c.head_dim, hf, ff ? s->err : NULL);
    R4D_LAUNCHED();
    return RAD_OK;
}
