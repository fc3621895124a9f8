/* r4d_attn.cu — attn_paged over the HND paged pool (docs/OPS.md): append, then attend.
 *
 * 1. k_append writes every row's k and v into its slot (rounded to the cache type), before any
 *    attention, as the reference does.
 * 2. k_attn (variant "splitk", and the rows "flash" leaves): one block per (row, KV head, split),
 *    four warps; the block serves all G query heads of its KV head (GQA: K and V read once for
 *    the group, not once per query head). A warp takes every fourth key of the block's range;
 *    lane l holds dims l, l + 32, ... of q (from shared memory), K and V. Scores, an online
 *    softmax per head in f32, then the warps' states merged by log-sum-exp. With one split the
 *    block writes out; with several (flash-decoding, r4d_attn_splits: a few long rows) each
 *    writes its (m, l, acc) and k_combine merges them. f32 arithmetic over the cache's values,
 *    sums in another order than the reference's: TOLERANCE 1e-5.
 * 3. k_flash (variant "flash", --fast): prefill on tensor cores. A block takes a tile of
 *    R4D_FLASH_SLOTS (row, query head) slots — r4d_flash_rows(G) consecutive rows of a sequence
 *    with their KV head's G query heads, so K and V are read once for the group — and steps over
 *    the tile's keys 64 at a time, K and V copied as they are stored (f16 or bf16) into shared
 *    memory. WMMA 16x16x16 products with f32 sums; two passes: the first finds each slot's max and
 *    sum (S = Q·Kᵀ only), the second forms P = exp(S - max) / sum rounded to the cache type and
 *    adds P·V into accumulators that never need rescaling. Q·scale and P are rounded to 16 bits:
 *    TOLERANCE 1e-2, which only --fast admits. An f32 cache, a head_dim other than 64, 128 or 256
 *    and G > 64 take k_attn for every row (their K/V would be rounded; no tile fits).
 * What a row reads of the step (its sequence, slot, window start), the group's block table and
 * the prefill plan come from the step image (r4d_host.h), checked on the host and uploaded once
 * per step and group. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <mma.h>
#include <string.h>

#include "r4d.cuh"

#define WARPS 4
#define HEADS_PER_PASS 8 /* query heads whose accumulators a lane holds at once */
#define MAX_DPL 8        /* head_dim <= 256 */
#define MAX_PARTIAL_BLOCKS 1024

__device__ __forceinline__ float cache_ld(int dt, const uint8_t *p, uint64_t i) {
    if (dt == RAD_F32) return ((const float *)p)[i];
    const uint16_t h = ((const uint16_t *)p)[i];
    return dt == RAD_F16 ? __half2float(__ushort_as_half(h)) : r4d_dec_bf16(h);
}
__device__ __forceinline__ void cache_st(int dt, uint8_t *p, uint64_t i, float v) {
    if (dt == RAD_F32) ((float *)p)[i] = v;
    else if (dt == RAD_F16) ((uint16_t *)p)[i] = __half_as_ushort(__float2half_rn(v));
    else ((uint16_t *)p)[i] = r4d_enc_bf16(v);
}

struct Geo {
    uint8_t *pool;
    uint64_t block_bytes, half;    /* a block's bytes; where its V half starts */
    int dt;                        /* cache element type */
    uint32_t B, hkv, hd, elem;
    const int32_t *table;          /* [n_seq][max_blocks] */
    uint32_t max_blocks;
};
__device__ __forceinline__ uint64_t slot_off(const Geo &g, int32_t seq, int32_t j, uint32_t h) {
    const int32_t blk = g.table[(uint64_t)seq * g.max_blocks + (uint32_t)j / g.B];
    return (uint64_t)blk * g.block_bytes + ((uint64_t)(h * g.B + (uint32_t)j % g.B) * g.hd) * g.elem;
}

__global__ void k_append(Geo g, const int32_t *row_seq, const int32_t *row_slot, const float *k, uint64_t ks, const float *v,
                         uint64_t vs) {
    const uint32_t t = blockIdx.x, h = blockIdx.y;
    const uint64_t o = slot_off(g, row_seq[t], row_slot[t], h);
    for (uint32_t d = threadIdx.x; d < g.hd; d += blockDim.x) {
        cache_st(g.dt, g.pool + o, d, k[(uint64_t)t * ks + h * g.hd + d]);
        cache_st(g.dt, g.pool + o + g.half, d, v[(uint64_t)t * vs + h * g.hd + d]);
    }
}

template <int DPL>
__global__ void __launch_bounds__(WARPS * 32) k_attn(Geo g, const int32_t *row_seq, const int32_t *row_slot, const int32_t *row_lo,
                                                    const float *q, uint64_t qs, float *out, uint64_t os, uint32_t G, float scale,
                                                    uint32_t splits, float *part, const int32_t *rows) {
    extern __shared__ float sh[]; /* q [G][hd], then per warp: m [HEADS_PER_PASS], l [..], acc [..][hd] */
    /* blockIdx.x: the row's place in `rows` (NULL: every row), and in the partials */
    const uint32_t bx = blockIdx.x, t = rows ? (uint32_t)rows[bx] : bx, h = blockIdx.y, split = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const uint32_t hd = g.hd;
    for (uint32_t i = threadIdx.x; i < G * hd; i += blockDim.x) sh[i] = q[(uint64_t)t * qs + (uint64_t)h * G * hd + i];
    __syncthreads();
    const int32_t seq = row_seq[t], j = row_slot[t], lo = row_lo[t];
    const int32_t n = j + 1 - lo, per = (n + (int32_t)splits - 1) / (int32_t)splits;
    const int32_t k0 = lo + (int32_t)split * per, k1 = min(j + 1, k0 + per);
    float *wsh = sh + G * hd + (uint32_t)warp * HEADS_PER_PASS * (hd + 2);
    for (uint32_t h0 = 0; h0 < G; h0 += HEADS_PER_PASS) {
        const uint32_t nh = min((uint32_t)HEADS_PER_PASS, G - h0);
        float m[HEADS_PER_PASS], l[HEADS_PER_PASS], acc[HEADS_PER_PASS][DPL];
#pragma unroll
        for (int a = 0; a < HEADS_PER_PASS; a++) {
            m[a] = -INFINITY, l[a] = 0.0f;
#pragma unroll
            for (int d = 0; d < DPL; d++) acc[a][d] = 0.0f;
        }
        for (int32_t i = k0 + warp; i < k1; i += WARPS) {
            const uint64_t o = slot_off(g, seq, i, h);
            float kv[DPL];
#pragma unroll
            for (int d = 0; d < DPL; d++) kv[d] = lane + 32 * d < (int)hd ? cache_ld(g.dt, g.pool + o, (uint64_t)(lane + 32 * d)) : 0.0f;
            float s[HEADS_PER_PASS];
#pragma unroll
            for (int a = 0; a < HEADS_PER_PASS; a++) {
                float dot = 0.0f;
                if ((uint32_t)a < nh)
#pragma unroll
                    for (int d = 0; d < DPL; d++)
                        if (lane + 32 * d < (int)hd) dot += sh[(h0 + a) * hd + lane + 32 * d] * kv[d];
                for (int w = 16; w > 0; w >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, w);
                s[a] = dot * scale;
            }
#pragma unroll
            for (int d = 0; d < DPL; d++)
                kv[d] = lane + 32 * d < (int)hd ? cache_ld(g.dt, g.pool + o + g.half, (uint64_t)(lane + 32 * d)) : 0.0f;
#pragma unroll
            for (int a = 0; a < HEADS_PER_PASS; a++) {
                if ((uint32_t)a >= nh) continue;
                const float mn = fmaxf(m[a], s[a]), c = expf(m[a] - mn), p = expf(s[a] - mn);
                l[a] = l[a] * c + p;
#pragma unroll
                for (int d = 0; d < DPL; d++) acc[a][d] = acc[a][d] * c + p * kv[d];
                m[a] = mn;
            }
        }
        /* the warps' states into shared memory, then warp 0 merges them per head */
        for (uint32_t a = 0; a < nh; a++) {
            if (!lane) wsh[a * (hd + 2)] = m[a], wsh[a * (hd + 2) + 1] = l[a];
#pragma unroll
            for (int d = 0; d < DPL; d++)
                if (lane + 32 * d < (int)hd) wsh[a * (hd + 2) + 2 + lane + 32 * d] = acc[a][d];
        }
        __syncthreads();
        for (uint32_t a = (uint32_t)warp; a < nh; a += WARPS) {
            float M = -INFINITY;
            for (int w = 0; w < WARPS; w++) M = fmaxf(M, sh[G * hd + (uint32_t)w * HEADS_PER_PASS * (hd + 2) + a * (hd + 2)]);
            float L = 0.0f, cw[WARPS];
            for (int w = 0; w < WARPS; w++) {
                const float *ws = sh + G * hd + (uint32_t)w * HEADS_PER_PASS * (hd + 2) + a * (hd + 2);
                cw[w] = ws[0] == -INFINITY ? 0.0f : expf(ws[0] - M);
                L += ws[1] * cw[w];
            }
            const uint32_t qh = h * G + h0 + a;
            for (uint32_t d = (uint32_t)lane; d < hd; d += 32) {
                float A = 0.0f;
                for (int w = 0; w < WARPS; w++) A += sh[G * hd + (uint32_t)w * HEADS_PER_PASS * (hd + 2) + a * (hd + 2) + 2 + d] * cw[w];
                if (splits == 1) {
                    out[(uint64_t)t * os + qh * hd + d] = A / L;
                } else {
                    float *pp = part + ((uint64_t)((bx * gridDim.y + h) * splits + split) * G + h0 + a) * (hd + 2);
                    pp[2 + d] = A;
                    if (!d) pp[0] = M, pp[1] = L;
                }
            }
        }
        __syncthreads();
    }
}

/* out = the splits' states merged: Σ acc_s e^(m_s - M) / Σ l_s e^(m_s - M). One block per (row, KV head). */
__global__ void k_combine(const float *part, uint32_t splits, uint32_t G, uint32_t hd, float *out, uint64_t os, const int32_t *rows) {
    const uint32_t bx = blockIdx.x, t = rows ? (uint32_t)rows[bx] : bx, h = blockIdx.y;
    for (uint32_t a = 0; a < G; a++) {
        const float *base = part + (uint64_t)((bx * gridDim.y + h) * splits) * G * (hd + 2) + (uint64_t)a * (hd + 2);
        const uint64_t stride = (uint64_t)G * (hd + 2);
        float M = -INFINITY;
        for (uint32_t s = 0; s < splits; s++) M = fmaxf(M, base[s * stride]);
        float L = 0.0f;
        for (uint32_t s = 0; s < splits; s++) {
            const float ms = base[s * stride];
            L += ms == -INFINITY ? 0.0f : base[s * stride + 1] * expf(ms - M);
        }
        for (uint32_t d = threadIdx.x; d < hd; d += blockDim.x) {
            float A = 0.0f;
            for (uint32_t s = 0; s < splits; s++) {
                const float ms = base[s * stride];
                if (ms != -INFINITY) A += base[s * stride + 2 + d] * expf(ms - M);
            }
            out[(uint64_t)t * os + (h * G + a) * hd + d] = A / L;
        }
    }
}

/* ---- prefill on tensor cores ------------------------------------------------------------------ */

using namespace nvcuda;

#define FL_N 64   /* keys per step of a tile */
#define FL_PAD 8  /* 16-bit elements of padding per shared row: banks spread, WMMA's ldm a multiple of 8 */

template <typename T> __device__ __forceinline__ T fl_from(float x);
template <> __device__ __forceinline__ half fl_from<half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 fl_from<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

/* k_flash's shared memory, in bytes: q [SLOTS][LDH], k [FL_N][LDH], v [FL_N][LDH] (16-bit),
 * scores [SLOTS][LDS] (f32), probabilities [SLOTS][LDP] (16-bit), each slot's last and first key.
 * Every part starts 32-byte aligned (WMMA's pointers); the output, f32 [SLOTS][HD + 4], reuses k
 * and v at the end. */
template <int HD> struct FlLayout {
    static constexpr int LDH = HD + FL_PAD, LDS = FL_N + 4, LDP = FL_N + FL_PAD, LDO = HD + 4;
    static constexpr size_t Q = (size_t)R4D_FLASH_SLOTS * LDH * 2, K = (size_t)FL_N * LDH * 2;
    static constexpr size_t S = (size_t)R4D_FLASH_SLOTS * LDS * 4, P = (size_t)R4D_FLASH_SLOTS * LDP * 2;
    static constexpr size_t BYTES = Q + 2 * K + S + P + 2 * R4D_FLASH_SLOTS * 4;
    static_assert((size_t)R4D_FLASH_SLOTS * LDO * 4 <= 2 * K, "the output fits where k and v were");
};

/* Keys k0 .. k0 + FL_N - 1 of (seq, KV head h) into dst, the K half (part 0) or the V half
 * (part g.half), 16 bytes a load as stored; keys past k_hi (not written yet) as zeros. */
template <typename T, int HD>
__device__ __forceinline__ void fl_load(const Geo &g, int32_t seq, uint32_t h, int32_t k0, int32_t k_hi, uint64_t part, T *dst) {
    constexpr int PER_KEY = HD / 8;
    for (int i = (int)threadIdx.x; i < FL_N * PER_KEY; i += (int)blockDim.x) {
        const int n = i / PER_KEY, c = (i % PER_KEY) * 8;
        const int32_t key = k0 + n;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (key <= k_hi) v = *(const uint4 *)(g.pool + slot_off(g, seq, key, h) + part + (uint64_t)c * 2);
        *(uint4 *)(dst + n * FlLayout<HD>::LDH + c) = v;
    }
}

/* S = Q·Kᵀ for the warp's 16 slots and the step's FL_N keys, into its rows of ss. */
template <typename T, int HD>
__device__ __forceinline__ void fl_scores(const T *sq, const T *sk, float *ss, int warp) {
    typedef FlLayout<HD> L;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
#pragma unroll
    for (int n = 0; n < FL_N / 16; n++) {
        wmma::fill_fragment(fc, 0.0f);
#pragma unroll
        for (int k = 0; k < HD / 16; k++) {
            wmma::load_matrix_sync(fa, sq + 16 * warp * L::LDH + k * 16, L::LDH);
            wmma::load_matrix_sync(fb, sk + n * 16 * L::LDH + k * 16, L::LDH); /* Kᵀ: key n's row is column n */
            wmma::mma_sync(fc, fa, fb, fc);
        }
        wmma::store_matrix_sync(ss + 16 * warp * L::LDS + n * 16, fc, L::LDS, wmma::mem_row_major);
    }
}

template <typename T, int HD>
__global__ void __launch_bounds__(WARPS * 32) k_flash(Geo g, const R4dFlashTile *tiles, const int32_t *row_slot, const int32_t *row_lo,
                                                     const float *q, uint64_t qs, float *out, uint64_t os, uint32_t G, float scale) {
    typedef FlLayout<HD> L;
    extern __shared__ __align__(128) unsigned char fsh[];
    T *sq = (T *)fsh, *sk = (T *)(fsh + L::Q), *sv = (T *)(fsh + L::Q + L::K);
    float *ss = (float *)(fsh + L::Q + 2 * L::K);
    T *sp = (T *)(fsh + L::Q + 2 * L::K + L::S);
    int32_t *rj = (int32_t *)(fsh + L::Q + 2 * L::K + L::S + L::P), *rlo = rj + R4D_FLASH_SLOTS;
    const R4dFlashTile tile = tiles[blockIdx.x];
    const uint32_t h = blockIdx.y;
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
    /* slot m is row t0 + m / G, query head h·G + m % G; slots past the tile's rows see no key */
    for (int m = (int)threadIdx.x; m < R4D_FLASH_SLOTS; m += (int)blockDim.x) {
        const int r = m / (int)G;
        rj[m] = r < tile.n_rows ? row_slot[tile.t0 + r] : -1;
        rlo[m] = r < tile.n_rows ? row_lo[tile.t0 + r] : 0;
    }
    for (int i = (int)threadIdx.x; i < R4D_FLASH_SLOTS * HD; i += (int)blockDim.x) {
        const int m = i / HD, d = i % HD, r = m / (int)G, a = m % (int)G;
        const float x = r < tile.n_rows ? q[(uint64_t)(tile.t0 + r) * qs + (uint64_t)(h * G + (uint32_t)a) * HD + (uint32_t)d] * scale : 0.0f;
        sq[m * L::LDH + d] = fl_from<T>(x);
    }
    __syncthreads();
    /* the tile's keys: from the first row's window start (its block: the image checked those
     * entries) to the last row's slot */
    const int32_t k_lo = row_lo[tile.t0] / (int32_t)g.B * (int32_t)g.B, k_hi = row_slot[tile.t0 + tile.n_rows - 1];
    /* a lane pair per slot of the warp: slot `my`, columns c0 .. c0 + 31 of a step */
    const int my = 16 * warp + (lane >> 1), c0 = (lane & 1) * 32;
    const int32_t my_j = rj[my], my_lo = rlo[my];
    float mrow = -INFINITY, lrow = 0.0f;
    for (int32_t k0 = k_lo; k0 <= k_hi; k0 += FL_N) { /* pass 1: each slot's max and sum */
        __syncthreads();
        fl_load<T, HD>(g, tile.seq, h, k0, k_hi, 0, sk);
        __syncthreads();
        fl_scores<T, HD>(sq, sk, ss, warp);
        __syncwarp();
        const float *row = ss + my * L::LDS + c0;
        float mx = -INFINITY;
        for (int c = 0; c < 32; c++) {
            const int32_t key = k0 + c0 + c;
            if (key >= my_lo && key <= my_j) mx = fmaxf(mx, row[c]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        const float mn = fmaxf(mrow, mx);
        float sum = 0.0f;
        for (int c = 0; c < 32 && mn != -INFINITY; c++) {
            const int32_t key = k0 + c0 + c;
            if (key >= my_lo && key <= my_j) sum += expf(row[c] - mn);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        if (mn != -INFINITY) lrow = (mrow == -INFINITY ? 0.0f : lrow * expf(mrow - mn)) + sum, mrow = mn;
    }
    const float inv_l = lrow > 0.0f ? 1.0f / lrow : 0.0f;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fo[HD / 16];
#pragma unroll
    for (int f = 0; f < HD / 16; f++) wmma::fill_fragment(fo[f], 0.0f);
    for (int32_t k0 = k_lo; k0 <= k_hi; k0 += FL_N) { /* pass 2: O += P·V, P final (no rescaling) */
        __syncthreads();
        fl_load<T, HD>(g, tile.seq, h, k0, k_hi, 0, sk);
        fl_load<T, HD>(g, tile.seq, h, k0, k_hi, g.half, sv);
        __syncthreads();
        fl_scores<T, HD>(sq, sk, ss, warp);
        __syncwarp();
        for (int c = 0; c < 32; c++) {
            const int32_t key = k0 + c0 + c;
            const float p = key >= my_lo && key <= my_j ? expf(ss[my * L::LDS + c0 + c] - mrow) * inv_l : 0.0f;
            sp[my * L::LDP + c0 + c] = fl_from<T>(p);
        }
        __syncwarp();
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
#pragma unroll
        for (int k = 0; k < FL_N / 16; k++) {
            wmma::load_matrix_sync(fa, sp + 16 * warp * L::LDP + k * 16, L::LDP);
#pragma unroll
            for (int f = 0; f < HD / 16; f++) {
                wmma::load_matrix_sync(fb, sv + k * 16 * L::LDH + f * 16, L::LDH);
                wmma::mma_sync(fo[f], fa, fb, fo[f]);
            }
        }
    }
    __syncthreads(); /* every warp is done with k and v: the output goes there */
    float *so = (float *)sk;
#pragma unroll
    for (int f = 0; f < HD / 16; f++) wmma::store_matrix_sync(so + 16 * warp * L::LDO + f * 16, fo[f], L::LDO, wmma::mem_row_major);
    __syncwarp();
    for (int i = lane; i < 16 * HD; i += 32) {
        const int m = 16 * warp + i / HD, d = i % HD, r = m / (int)G, a = m % (int)G;
        if (r < tile.n_rows) out[(uint64_t)(tile.t0 + r) * os + (uint64_t)(h * G + (uint32_t)a) * HD + (uint32_t)d] = so[m * L::LDO + d];
    }
}

extern "C" size_t r4d_attn_workspace(const RadParam *p, uint32_t np, int64_t n_max) {
    (void)n_max;
    int64_t nh = 0, nkv = 0, hd = 0;
    for (uint32_t i = 0; i < np; i++) {
        if (!p[i].name) continue;
        if (!strcmp(p[i].name, "n_head")) nh = p[i].lo;
        if (!strcmp(p[i].name, "n_head_kv")) nkv = p[i].lo;
        if (!strcmp(p[i].name, "head_dim")) hd = p[i].lo;
    }
    if (nh < 1 || nkv < 1 || hd < 1) return 0;
    return (size_t)MAX_PARTIAL_BLOCKS * (size_t)(nh / nkv) * (size_t)(hd + 2) * sizeof(float);
}

/* The device copy of this step's image for (kv's table, window): built on the host, compared
 * with what that slot last sent, and sent only when it changed. */
static int stage(R4dState *s, const RadBatch *b, const RadKvState *kv, int64_t window, uint32_t tile_rows, R4dStepImage *dev_img) {
    const size_t need = r4d_step_image_bytes(b, kv, tile_rows);
    if (need > s->img_new_cap) {
        uint8_t *p = (uint8_t *)realloc(s->img_new, need);
        if (!p) return RAD_E_NOMEM;
        s->img_new = p, s->img_new_cap = need;
    }
    R4dStepImage host;
    int rc = r4d_step_image_fill(b, kv, window, tile_rows, s->img_new, need, &host);
    if (rc) return rc;
    int k = 0;
    while (k < s->n_img && !(s->img[k].table == kv->block_table && s->img[k].window == window && s->img[k].tile_rows == tile_rows)) k++;
    if (k == s->n_img) {
        if (k == 8) k = (int)(((uintptr_t)kv->block_table >> 4) % 8); /* more groups than slots: share one */
        else s->n_img++;
        s->img[k].table = kv->block_table, s->img[k].window = window, s->img[k].tile_rows = tile_rows, s->img[k].bytes = 0;
    }
    struct R4dState::R4dImg *im = &s->img[k];
    if (s->mode != R4D_EAGER) { /* a graph's step: the pinned copy always written, the graph's copy node sends it */
        if (need > im->cap) return RAD_E_IO; /* the key's eager step made it this big */
        memcpy(im->host, s->img_new, need);
        memcpy(im->last, s->img_new, need);
        im->bytes = need;
        if (s->mode == R4D_CAPTURE) R4D_CU(cudaMemcpyAsync(im->dev, im->host, need, cudaMemcpyHostToDevice, s->stream));
    } else {
    if (!im->done && cudaEventCreateWithFlags(&im->done, cudaEventDisableTiming) != cudaSuccess) return RAD_E_IO;
    if (need != im->bytes || memcmp(im->last, s->img_new, need)) {
        R4D_CU(cudaEventSynchronize(im->done)); /* the last upload from the pinned copy is done */
        if (need > im->cap) {
            cudaFreeHost(im->host), cudaFree(im->dev), free(im->last);
            im->host = im->dev = NULL, im->last = NULL, im->cap = 0;
            if (cudaMallocHost(&im->host, need) != cudaSuccess || cudaMalloc(&im->dev, need) != cudaSuccess ||
                !(im->last = (uint8_t *)malloc(need)))
                return RAD_E_NOMEM;
            im->cap = need;
        }
        memcpy(im->host, s->img_new, need);
        memcpy(im->last, s->img_new, need);
        im->bytes = need;
        R4D_CU(cudaMemcpyAsync(im->dev, im->host, need, cudaMemcpyHostToDevice, s->stream));
        R4D_CU(cudaEventRecord(im->done, s->stream));
    }
    }
    /* the same layout at the device copy: each part at its offset in the image */
    uint8_t *dev = (uint8_t *)im->dev;
    dev_img->row_seq = (int32_t *)(dev + ((uint8_t *)host.row_seq - s->img_new));
    dev_img->row_slot = (int32_t *)(dev + ((uint8_t *)host.row_slot - s->img_new));
    dev_img->row_lo = (int32_t *)(dev + ((uint8_t *)host.row_lo - s->img_new));
    dev_img->table = (int32_t *)(dev + ((uint8_t *)host.table - s->img_new));
    dev_img->tiles = host.tiles ? (R4dFlashTile *)(dev + ((uint8_t *)host.tiles - s->img_new)) : NULL;
    dev_img->rest = host.rest ? (int32_t *)(dev + ((uint8_t *)host.rest - s->img_new)) : NULL;
    dev_img->n_tiles = host.n_tiles, dev_img->n_rest = host.n_rest;
    return RAD_OK;
}

template <typename T, int HD>
static int fl_launch(R4dState *s, const Geo &g, const R4dStepImage &img, const RadKArg *q, const RadKArg *out, uint32_t nkv, uint32_t G,
                     float scale) {
    const size_t shm = FlLayout<HD>::BYTES;
    R4D_CU(cudaFuncSetAttribute(k_flash<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm));
    k_flash<T, HD><<<dim3(img.n_tiles, nkv), WARPS * 32, shm, s->stream>>>(g, img.tiles, img.row_slot, img.row_lo,
                                                                        (const float *)q->data, q->row_stride,
                                                                        (float *)out->data, out->row_stride, G, scale);
    R4D_LAUNCHED();
    return RAD_OK;
}

/* Both variants: the checks, the step image, the append; then "flash" sends its prefill tiles to
 * k_flash and every other row (all rows for "splitk") to k_attn. */
static int attn_run(const RadKernelArgs *a, int flash) {
    int rc = r4d_preamble(a, 4);
    if (rc) return rc;
    R4dState *s = r4d_state(a);
    int64_t nh, nkv, hd, window = 0;
    double scale;
    if (!s || !a->batch || !a->kv || !a->workspace) return RAD_E_ARG;
    if (!r4d_pint(a, "n_head", &nh) || !r4d_pint(a, "n_head_kv", &nkv) || !r4d_pint(a, "head_dim", &hd) ||
        !r4d_pflt(a, "scale", &scale))
        return RAD_E_ARG;
    r4d_pint(a, "window", &window);
    if (nh < 1 || nkv < 1 || nh % nkv || hd < 1 || hd > 32 * MAX_DPL || window < 0) return RAD_E_ARG;
    const RadBatch *b = a->batch;
    const RadKvState *kv = a->kv;
    const uint64_t M = (uint64_t)a->n;
    const RadKArg *q = &a->args[0], *k = &a->args[1], *v = &a->args[2], *out = &a->args[3];
    if (b->n_tok != M || !r4d_buf_ok(q, M, (uint64_t)(nh * hd)) || !r4d_buf_ok(k, M, (uint64_t)(nkv * hd)) ||
        !r4d_buf_ok(v, M, (uint64_t)(nkv * hd)) || !r4d_buf_ok(out, M, (uint64_t)(nh * hd)))
        return RAD_E_SHAPE;
    if (kv->n_head_kv != (uint32_t)nkv || kv->head_dim != (uint32_t)hd || kv->kv_quant != RAD_KVQ_NONE || !kv->pool) return RAD_E_SHAPE;
    const int dt = (int)kv->dtype;
    const uint32_t elem = dt == RAD_F32 ? 4 : 2;
    if (dt != RAD_F32 && dt != RAD_F16 && dt != RAD_BF16) return RAD_E_UNSUPPORTED;
    if (kv->block_bytes != 2ull * (uint64_t)nkv * kv->block_size * (uint64_t)hd * elem) return RAD_E_SHAPE;
    const uint32_t G = (uint32_t)(nh / nkv);
    const int tc = flash && (dt == RAD_F16 || dt == RAD_BF16) && (hd == 64 || hd == 128 || hd == 256) && r4d_flash_rows(G);
    R4dStepImage img;
    if ((rc = stage(s, b, kv, window, tc ? r4d_flash_rows(G) : 0, &img))) return rc;
    /* planned for the context's bucket, not the context: a decode graph keeps its grid as it grows */
    uint32_t splits = r4d_attn_splits(img.n_rest, (uint32_t)nkv, r4d_ctx_bucket(b->max_ctx_len), (uint32_t)s->n_sm);
    if ((uint64_t)img.n_rest * (uint64_t)nkv * splits > MAX_PARTIAL_BLOCKS) splits = 1;
    const Geo g = {(uint8_t *)kv->pool, kv->block_bytes, (uint64_t)nkv * kv->block_size * (uint64_t)hd * elem, dt,
                   kv->block_size, (uint32_t)nkv, (uint32_t)hd, elem, img.table, kv->max_blocks};
    R4D_GATE(a);
    k_append<<<dim3((unsigned)M, (unsigned)nkv), 128, 0, s->stream>>>(g, img.row_seq, img.row_slot, (const float *)k->data,
                                                                     k->row_stride, (const float *)v->data, v->row_stride);
    R4D_LAUNCHED();
    if (img.n_tiles) {
#define FL(T, D) fl_launch<T, D>(s, g, img, q, out, (uint32_t)nkv, G, (float)scale)
        rc = dt == RAD_F16 ? (hd == 64 ? FL(half, 64) : hd == 128 ? FL(half, 128) : FL(half, 256))
                           : (hd == 64 ? FL(__nv_bfloat16, 64) : hd == 128 ? FL(__nv_bfloat16, 128) : FL(__nv_bfloat16, 256));
#undef FL
        if (rc) return rc;
    }
    if (!img.n_rest) return RAD_OK;
    const size_t shm = ((size_t)G * (size_t)hd + (size_t)WARPS * HEADS_PER_PASS * (size_t)(hd + 2)) * sizeof(float);
    const dim3 grid(img.n_rest, (unsigned)nkv, splits);
    float *part = (float *)a->workspace;
    const int dpl = (int)((hd + 31) / 32);
#define LAUNCH(D)                                                                                                         \
    do {                                                                                                                \
        if (shm > 48 * 1024) R4D_CU(cudaFuncSetAttribute(k_attn<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm)); \
        k_attn<D><<<grid, WARPS * 32, shm, s->stream>>>(g, img.row_seq, img.row_slot, img.row_lo, (const float *)q->data,     \
                                                       q->row_stride, (float *)out->data, out->row_stride, G, (float)scale,  \
                                                       splits, part, img.rest);                                              \
    } while (0)
    if (dpl <= 2) LAUNCH(2);
    else if (dpl <= 4) LAUNCH(4);
    else LAUNCH(8);
#undef LAUNCH
    R4D_LAUNCHED();
    if (splits > 1) {
        k_combine<<<dim3(img.n_rest, (unsigned)nkv), 128, 0, s->stream>>>(part, splits, G, (uint32_t)hd, (float *)out->data,
                                                                         out->row_stride, img.rest);
        R4D_LAUNCHED();
    }
    return RAD_OK;
}
extern "C" int r4d_run_attn_paged(const RadKernelArgs *a) { return attn_run(a, 0); }
extern "C" int r4d_run_attn_flash(const RadKernelArgs *a) { return attn_run(a, 1); }
