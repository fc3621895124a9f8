/* rad_kbench_ref.h — the references rad-kbench checks kernels against: docs/OPS.md's f32
 * definition of each op, written again here from the page (sums in index order from 0.0f, every
 * product rounded before it is added, exp/sin/cos/pow evaluated in double and rounded once), so
 * that no kernel library's code is the judge of itself. Weights arrive already decoded by
 * rad_dequant (the executable definition of every encoding). Rows are independent, so each
 * reference runs on n_threads threads over rows without changing a bit. */
#ifndef RAD_KBENCH_REF_H
#define RAD_KBENCH_REF_H

#include <stdint.h>

#include "abi/rad_arch.h"

/* y[i][n] = sum_k x[i][k] * w[n][k]; x [M, K] (row stride xs), w [N, K] dense, y [M, N] (stride ys). */
void rad_kbench_ref_gemm(const float *x, uint64_t xs, const float *w, float *y, uint64_t ys, uint64_t M, uint64_t N,
                         uint64_t K, uint32_t n_threads);
/* docs/OPS.md's per-output bound of a q8-activation GEMM (gemm_nt, "Quantised activations"):
 * out[i][n] = sum_b 0.563 * (amax_b(x[i]) / 127) * sum_{k in b} |w[n][k]| + 1e-5 * sum_k |x[i][k] * w[n][k]|
 * over 32-element blocks b of K; x [M, K] dense, w [N, K] dense, out [M, N]. */
void rad_kbench_ref_q8_bound(const float *x, const float *w, float *out, uint64_t M, uint64_t N, uint64_t K,
                             uint32_t n_threads);
/* docs/OPS.md's per-output bound of a bf16-product GEMM (gemm_nt, "bf16 products"):
 * out[i][n] = 8e-3 * sum_k |x[i][k] * w[n][k]|; x [M, K] dense, w [N, K] dense, out [M, N]. */
void rad_kbench_ref_bf16_bound(const float *x, const float *w, float *out, uint64_t M, uint64_t N, uint64_t K,
                               uint32_t n_threads);
/* docs/OPS.md's per-output bound of an fp8-activation GEMM (gemm_nt, "fp8 activations"):
 * out[i][n] = sum_k |w[n][k]| * (0.0625 * |x[i][k]| + 0.001 * s_g(k)) + 0.01 * sum_k |x[i][k] * w[n][k]|,
 * s_g = max |x[i][k]| over k's group of 128 (the last may be shorter) / 448; x [M, K] dense,
 * w [N, K] dense, out [M, N]. */
void rad_kbench_ref_f8_bound(const float *x, const float *w, float *out, uint64_t M, uint64_t N, uint64_t K,
                             uint32_t n_threads);
/* out = rmsnorm(x) * gamma, row by row; out may be x. */
void rad_kbench_ref_rmsnorm(const float *x, const float *gamma, float *out, uint64_t M, uint64_t N, double eps,
                            uint32_t n_threads);
/* out[i] = a[i] + b[i] over n elements. */
void rad_kbench_ref_add(const float *a, const float *b, float *out, uint64_t n);
/* out[i] = (gate[i] / (1 + exp(-gate[i]))) * up[i]. */
void rad_kbench_ref_silu_mul(const float *gate, const float *up, float *out, uint64_t n);
void rad_kbench_ref_gelu_tanh_mul(const float *gate, const float *up, float *out, uint64_t n);

typedef struct RadKbenchRope {
    int64_t n_head, head_dim, n_rot;  /* per row: n_head heads of head_dim, the first n_rot rotated */
    double theta, factor, low, high;  /* base; linear/llama3 factor; llama3's frequency factors */
    int64_t scaling, orig_ctx;        /* 0 none, 1 linear, 2 llama3; llama3's original context */
    const float *freq_factors;        /* [n_rot/2] or NULL */
} RadKbenchRope;
/* Rotates x [M, n_head*head_dim] in place at positions pos[M] (rotate-half). */
void rad_kbench_ref_rope(float *x, const int32_t *pos, uint64_t M, const RadKbenchRope *p, uint32_t n_threads);

/* One sequence's view for the attention reference: its cache after the step's append, already
 * rounded to the cache type, dense [ctx_len][n_head_kv][head_dim]. */
typedef struct RadKbenchAttnSeq {
    const float *K, *V;               /* [ctx_len][n_head_kv * head_dim] */
    int32_t row0, q_len, ctx_len;     /* its rows of q/out: [row0, row0 + q_len) */
} RadKbenchAttnSeq;
/* Causal GQA attention of docs/OPS.md for every row of every sequence, within `window` keys
 * (0: every key before the row). q [n_tok, n_head*hd], out [n_tok, n_head*hd], both dense. */
void rad_kbench_ref_attn(const float *q, float *out, const RadKbenchAttnSeq *seqs, uint32_t n_seq, uint32_t n_head,
                         uint32_t n_head_kv, uint32_t head_dim, double scale, uint32_t window, uint32_t n_threads);

/* ---- the encoder ops (docs/OPS.md: layernorm, gelu, attn_seq, pool, l2_normalize) ---------------
 * Their references are written in double (the page's definitions), rounded once to f32. */

/* out = ((x - mean) * (1 / sqrt(var + eps))) * gamma + beta, row by row (biased variance, the
 * sums in double in index order); out may be x. */
void rad_kbench_ref_layernorm(const float *x, const float *gamma, const float *beta, float *out, uint64_t M, uint64_t N,
                              double eps, uint32_t n_threads);
/* out[i] = 0.5 * x * (1 + erf(x / sqrt 2)) in double, rounded once; out may be x. */
void rad_kbench_ref_gelu(const float *x, float *out, uint64_t n);
/* Bidirectional GQA attention inside each sequence s (rows [cu[s], cu[s+1])), keys j of row i
 * with |i - j| < window (0: every key of the sequence), all in double. scale 0: 1/sqrt(head_dim).
 * q, out [cu[n_seq], n_head*hd]; k, v [cu[n_seq], n_head_kv*hd]; dense. */
void rad_kbench_ref_attn_seq(const float *q, const float *k, const float *v, float *out, const int32_t *cu, uint32_t n_seq,
                             uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim, double scale, uint32_t window,
                             uint32_t n_threads);
/* out[s] = the pool of rows [cu[s], cu[s+1]) of x [*, N] (every sequence non-empty): mode 0 mean,
 * 1 the first row, 2 the last, 3 elementwise max (a NaN kept), 4 sum / sqrt(len). out [n_seq, N]. */
void rad_kbench_ref_pool(const float *x, float *out, const int32_t *cu, uint32_t n_seq, uint64_t N, int mode);
/* out = x / max(||x||_2, 1e-12) row by row, the norm in double; out may be x. */
void rad_kbench_ref_l2_normalize(const float *x, float *out, uint64_t M, uint64_t N);

/* v rounded to a cache element type (f32: itself; f16, bf16: to nearest even) and back. */
float rad_kbench_ref_round(float v, RadDType t);

#endif
