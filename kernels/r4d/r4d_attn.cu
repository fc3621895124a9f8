/* r4d_attn.cu — attn_paged over the HND paged pool (docs/OPS.md): append, then attend.
 *
 * 1. k_append writes every row's k and v into its slot (rounded to the cache type), before any
 *    attention, as the reference does.
 * 2. k_attn: one block per (row, KV head, split), four warps; the block serves all G query heads
 *    of its KV head (GQA: K and V read once for the group, not once per query head). A warp
 *    takes every fourth key of the block's range; lane l holds dims l, l + 32, ... of q (from
 *    shared memory), K and V. Scores, an online softmax per head in f32, then the warps' states
 *    merged by log-sum-exp. With one split the block writes out; with several (flash-decoding,
 *    r4d_attn_splits: a few long rows) each writes its (m, l, acc) and k_combine merges them.
 * What a row reads of the step (its sequence, slot, window start) and the group's block table
 * come from the step image (r4d_host.h), checked on the host and uploaded once per step and
 * group. f32 arithmetic over the cache's values, sums in another order than the reference's:
 * TOLERANCE 1e-5. Prefill rows take the same path (a row at a time, keys from L2); a tensor-core
 * prefill kernel is the next step (kernels/README.md, "libr4d"). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
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
                                                    uint32_t splits, float *part) {
    extern __shared__ float sh[]; /* q [G][hd], then per warp: m [HEADS_PER_PASS], l [..], acc [..][hd] */
    const uint32_t t = blockIdx.x, h = blockIdx.y, split = blockIdx.z;
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
                    float *pp = part + ((uint64_t)((t * gridDim.y + h) * splits + split) * G + h0 + a) * (hd + 2);
                    pp[2 + d] = A;
                    if (!d) pp[0] = M, pp[1] = L;
                }
            }
        }
        __syncthreads();
    }
}

/* out = the splits' states merged: Σ acc_s e^(m_s - M) / Σ l_s e^(m_s - M). One block per (row, KV head). */
__global__ void k_combine(const float *part, uint32_t splits, uint32_t G, uint32_t hd, float *out, uint64_t os) {
    const uint32_t t = blockIdx.x, h = blockIdx.y;
    for (uint32_t a = 0; a < G; a++) {
        const float *base = part + (uint64_t)((t * gridDim.y + h) * splits) * G * (hd + 2) + (uint64_t)a * (hd + 2);
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
static int stage(R4dState *s, const RadBatch *b, const RadKvState *kv, int64_t window, R4dStepImage *dev_img) {
    const size_t need = r4d_step_image_bytes(b, kv);
    if (need > s->img_new_cap) {
        uint8_t *p = (uint8_t *)realloc(s->img_new, need);
        if (!p) return RAD_E_NOMEM;
        s->img_new = p, s->img_new_cap = need;
    }
    R4dStepImage host;
    int rc = r4d_step_image_fill(b, kv, window, s->img_new, need, &host);
    if (rc) return rc;
    int k = 0;
    while (k < s->n_img && !(s->img[k].table == kv->block_table && s->img[k].window == window)) k++;
    if (k == s->n_img) {
        if (k == 8) k = (int)(((uintptr_t)kv->block_table >> 4) % 8); /* more groups than slots: share one */
        else s->n_img++;
        s->img[k].table = kv->block_table, s->img[k].window = window, s->img[k].bytes = 0;
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
    return RAD_OK;
}

extern "C" int r4d_run_attn_paged(const RadKernelArgs *a) {
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
    R4dStepImage img;
    if ((rc = stage(s, b, kv, window, &img))) return rc;
    const uint32_t G = (uint32_t)(nh / nkv);
    /* planned for the context's bucket, not the context: a decode graph keeps its grid as it grows */
    uint32_t splits = r4d_attn_splits((uint32_t)M, (uint32_t)nkv, r4d_ctx_bucket(b->max_ctx_len), (uint32_t)s->n_sm);
    if ((uint64_t)M * (uint64_t)nkv * splits > MAX_PARTIAL_BLOCKS) splits = 1;
    const Geo g = {(uint8_t *)kv->pool, kv->block_bytes, (uint64_t)nkv * kv->block_size * (uint64_t)hd * elem, dt,
                   kv->block_size, (uint32_t)nkv, (uint32_t)hd, elem, img.table, kv->max_blocks};
    R4D_GATE(a);
    k_append<<<dim3((unsigned)M, (unsigned)nkv), 128, 0, s->stream>>>(g, img.row_seq, img.row_slot, (const float *)k->data,
                                                                     k->row_stride, (const float *)v->data, v->row_stride);
    R4D_LAUNCHED();
    const size_t shm = ((size_t)G * (size_t)hd + (size_t)WARPS * HEADS_PER_PASS * (size_t)(hd + 2)) * sizeof(float);
    const dim3 grid((unsigned)M, (unsigned)nkv, splits);
    float *part = (float *)a->workspace;
    const int dpl = (int)((hd + 31) / 32);
#define LAUNCH(D)                                                                                                         \
    do {                                                                                                                \
        if (shm > 48 * 1024) R4D_CU(cudaFuncSetAttribute(k_attn<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm)); \
        k_attn<D><<<grid, WARPS * 32, shm, s->stream>>>(g, img.row_seq, img.row_slot, img.row_lo, (const float *)q->data,     \
                                                       q->row_stride, (float *)out->data, out->row_stride, G, (float)scale,  \
                                                       splits, part);                                                        \
    } while (0)
    if (dpl <= 2) LAUNCH(2);
    else if (dpl <= 4) LAUNCH(4);
    else LAUNCH(8);
#undef LAUNCH
    R4D_LAUNCHED();
    if (splits > 1) {
        k_combine<<<dim3((unsigned)M, (unsigned)nkv), 128, 0, s->stream>>>(part, splits, G, (uint32_t)hd, (float *)out->data,
                                                                          out->row_stride);
        R4D_LAUNCHED();
    }
    return RAD_OK;
}
