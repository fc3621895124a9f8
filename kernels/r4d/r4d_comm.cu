/* r4d_comm.cu — collectives over NCCL: all_reduce and all_gather (docs/OPS.md), one rank per GPU.
 *
 * The root names the communicator (comm_id: ncclGetUniqueId); every rank's init records the
 * name, and the NCCL communicator is made at the rank's first step (step_begin, or the first
 * collective when the step runs without the hooks): ncclCommInitRank waits for every rank, and
 * the engine opens its ranks one after another but runs their steps at once. all_reduce with exact = 0 is NCCL's sum (its ring adds in another order:
 * TOLERANCE 1e-5); with exact = 1 every rank's x is gathered and summed in rank order, so the
 * sum is the reference's, bit for bit on every rank. all_gather exchanges each rank's span
 * first (the tiling is checked on every rank before anything is written), then the columns.
 * comm_abort(1) aborts the NCCL communicator (a rank waiting in a collective returns) and every
 * collective after it returns RAD_E_IO; comm_abort(0) marks it for a fresh communicator, which
 * the ranks make together at their next collective from an id the process shares among them
 * (the engine's ranks are threads of one process). */
#include <nccl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "r4d.cuh"

struct R4dComm {
    ncclComm_t nccl;
    uint32_t rank, size;
    int device;
    int aborted;                  /* 1: every collective returns RAD_E_IO until comm_abort(0) */
    int stale;                    /* 1: nccl was aborted; make a new one at the next collective */
                                  /* (nccl NULL and stale 0: not made yet; the first is made from name) */
    uint8_t name[sizeof(RadCommId)]; /* the root's id: how the ranks of one group find each other */
    uint32_t generation;          /* communicators made so far (the first is 0) */
};

/* Fresh ids for re-made communicators, shared by the ranks of a group in this process. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static struct Regen {
    uint8_t name[sizeof(RadCommId)];
    uint32_t generation;
    ncclUniqueId id;
} g_regen[16];
static int g_n_regen;

extern "C" int r4d_comm_id(uint32_t world_size, RadCommId *id) {
    if (!id || world_size < 2) return RAD_E_ARG;
    static_assert(sizeof(ncclUniqueId) <= sizeof(RadCommId), "RadCommId holds an ncclUniqueId");
    memset(id, 0, sizeof *id);
    ncclUniqueId u;
    if (ncclGetUniqueId(&u) != ncclSuccess) return RAD_E_IO;
    memcpy(id->bytes, &u, sizeof u);
    return RAD_OK;
}

extern "C" int r4d_comm_join(const void *id, uint32_t rank, uint32_t world_size, int device, R4dComm **out) {
    R4dComm *c = (R4dComm *)calloc(1, sizeof *c);
    if (!c) return RAD_E_NOMEM;
    memcpy(c->name, id, sizeof c->name);
    c->rank = rank, c->size = world_size, c->device = device;
    if (rank >= world_size) {
        free(c);
        return RAD_E_ARG;
    }
    *out = c; /* joined at the first step (comm_ready): every rank must be there */
    return RAD_OK;
}

extern "C" void r4d_comm_leave(R4dComm *c) {
    if (!c) return;
    if (c->nccl) c->stale ? ncclCommDestroy(c->nccl) : (ncclCommFinalize(c->nccl), ncclCommDestroy(c->nccl));
    free(c);
}

extern "C" void r4d_comm_abort(void *state, int on) {
    R4dState *s = (R4dState *)state;
    if (!s || !s->comm || !r4d_bind(s)) return;
    R4dComm *c = s->comm;
    if (on) {
        c->aborted = 1;
        if (c->nccl && !c->stale) ncclCommAbort(c->nccl), c->nccl = NULL, c->stale = 1;
    } else {
        c->aborted = 0;
    }
}

/* A communicator to issue on: the current one; the first, made from the root's id; or (after an
 * abort) a new one the group's ranks make together: rank 0 draws the id for the next
 * generation, the others wait for it. Called on the rank's own thread, outside any capture. */
static int comm_ready(R4dComm *c) {
    if (c->aborted) return RAD_E_IO;
    if (c->nccl) return RAD_OK;
    ncclUniqueId u;
    uint32_t gen = c->generation;
    if (!c->stale) { /* the first: the root's id */
        memcpy(&u, c->name, sizeof u);
    } else {
        gen = c->generation + 1;
        pthread_mutex_lock(&g_mu);
        int k = 0;
        while (k < g_n_regen && memcmp(g_regen[k].name, c->name, sizeof c->name)) k++;
        if (k == g_n_regen) {
            if (k == 16) return pthread_mutex_unlock(&g_mu), RAD_E_LIMIT;
            memcpy(g_regen[k].name, c->name, sizeof c->name), g_regen[k].generation = 0, g_n_regen++;
        }
        if (c->rank == 0 && g_regen[k].generation < gen) {
            if (ncclGetUniqueId(&g_regen[k].id) != ncclSuccess) return pthread_mutex_unlock(&g_mu), RAD_E_IO;
            g_regen[k].generation = gen;
            pthread_cond_broadcast(&g_cv);
        }
        while (g_regen[k].generation < gen) pthread_cond_wait(&g_cv, &g_mu);
        u = g_regen[k].id;
        pthread_mutex_unlock(&g_mu);
    }
    if (cudaSetDevice(c->device) != cudaSuccess || ncclCommInitRank(&c->nccl, (int)c->size, u, (int)c->rank) != ncclSuccess)
        return c->nccl = NULL, RAD_E_IO;
    c->stale = 0, c->generation = gen;
    return RAD_OK;
}

/* step_begin's: the communicator made before a capture can start (NCCL's setup is not captured). */
extern "C" int r4d_comm_ready(R4dState *s) { return s && s->comm ? comm_ready(s->comm) : RAD_OK; }

extern "C" size_t r4d_comm_workspace(const RadParam *p, uint32_t np, int64_t n_max) {
    (void)p, (void)np, (void)n_max;
    return 0; /* the ordered sum and the gather take the state's scratch (below), sized by the calls' rows */
}

/* Device scratch of at least `bytes`, the state's (freed at fini), grown when a call needs more:
 * a size once reached is never allocated again. */
static void *scratch(R4dState *s, size_t bytes) {
    if (s->coll_cap < bytes) {
        cudaFree(s->coll); /* waits for the device: nothing queued still reads the old one */
        s->coll = NULL, s->coll_cap = 0;
        if (cudaMalloc(&s->coll, bytes) != cudaSuccess) return NULL;
        s->coll_cap = bytes;
    }
    return s->coll;
}

/* x[i][j] = Σ_r all[r][i][j] in rank order. */
__global__ void k_sum_ranks(const float *all, uint32_t R, uint64_t M, uint64_t N, float *x, uint64_t xs) {
    const uint64_t e = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= M * N) return;
    const uint64_t i = e / N, j = e % N;
    float acc = all[e];
    for (uint32_t r = 1; r < R; r++) acc = __fadd_rn(acc, all[(uint64_t)r * M * N + e]);
    x[i * xs + j] = acc;
}
__global__ void k_pack_rows(const float *x, uint64_t xs, uint64_t M, uint64_t N, float *dst) {
    const uint64_t e = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < M * N) dst[e] = x[(e / N) * xs + e % N];
}

static int all_reduce(const RadKernelArgs *a, int ordered) {
    int rc = r4d_preamble(a, 1);
    if (rc) return rc;
    int64_t N, exact;
    if (!r4d_pint(a, "N", &N) || !r4d_pint(a, "exact", &exact) || N < 1) return RAD_E_ARG;
    const RadKArg *x = &a->args[0];
    const uint64_t M = (uint64_t)a->n;
    if (!r4d_buf_ok(x, M, (uint64_t)N)) return RAD_E_SHAPE;
    R4dState *s = r4d_state(a);
    if (!s) return RAD_E_ARG;
    if (s->world_size <= 1) return RAD_OK; /* the identity */
    if (!ordered && exact) return RAD_E_ARG; /* the selector gives exact = 1 bitwise kernels only */
    R4dComm *c = s->comm;
    if (!c) return RAD_E_UNSUPPORTED;
    if ((rc = comm_ready(c))) return rc;
    R4D_GATE(a);
    const uint64_t n = M * (uint64_t)N;
    const unsigned blocks = r4d_blocks(n, 256);
    float *flat = (float *)x->data;
    float *tmp = NULL;
    if (ordered || x->row_stride != (uint64_t)N) {
        tmp = (float *)scratch(s, (size_t)n * sizeof(float) * (ordered ? s->world_size + 1 : 1));
        if (!tmp) return RAD_E_NOMEM;
        k_pack_rows<<<blocks, 256, 0, s->stream>>>((const float *)x->data, x->row_stride, M, (uint64_t)N, tmp);
        R4D_LAUNCHED();
        flat = tmp;
    }
    if (!ordered) {
        if (ncclAllReduce(flat, flat, n, ncclFloat32, ncclSum, c->nccl, s->stream) != ncclSuccess) return RAD_E_IO;
        if (flat != x->data) {
            R4D_CU(cudaMemcpy2DAsync(x->data, x->row_stride * 4, flat, (size_t)N * 4, (size_t)N * 4, M, cudaMemcpyDeviceToDevice,
                                     s->stream));
        }
        return RAD_OK;
    }
    float *all = tmp + n;
    if (ncclAllGather(tmp, all, n, ncclFloat32, c->nccl, s->stream) != ncclSuccess) return RAD_E_IO;
    k_sum_ranks<<<blocks, 256, 0, s->stream>>>(all, s->world_size, M, (uint64_t)N, (float *)x->data, x->row_stride);
    R4D_LAUNCHED();
    return RAD_OK;
}
extern "C" int r4d_run_all_reduce_nccl(const RadKernelArgs *a) { return all_reduce(a, 0); }
extern "C" int r4d_run_all_reduce_ordered(const RadKernelArgs *a) { return all_reduce(a, 1); }

/* out[i][col0_r + j] = slots[r][i][j] for every rank r (its slot holds M rows of its N_r columns,
 * padded to the widest span). */
__global__ void k_scatter_cols(const float *slots, const int64_t *spans, uint32_t R, uint64_t M, uint64_t nmax, float *out,
                               uint64_t os) {
    const uint32_t r = blockIdx.y;
    const uint64_t i = blockIdx.z, col0 = (uint64_t)spans[2 * r], n = (uint64_t)spans[2 * r + 1];
    for (uint64_t j = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (uint64_t)gridDim.x * blockDim.x)
        out[i * os + col0 + j] = slots[((uint64_t)r * M + i) * nmax + j];
}

extern "C" int r4d_run_all_gather(const RadKernelArgs *a) {
    int rc = r4d_preamble(a, 2);
    if (rc) return rc;
    int64_t N, col0, W;
    if (!r4d_pint(a, "N", &N) || !r4d_pint(a, "col0", &col0) || !r4d_pint(a, "W", &W) || N < 1 || col0 < 0 || col0 + N > W)
        return RAD_E_ARG;
    const RadKArg *x = &a->args[0], *out = &a->args[1];
    const uint64_t M = (uint64_t)a->n;
    if (!r4d_buf_ok(x, M, (uint64_t)N) || !r4d_buf_ok(out, M, (uint64_t)W)) return RAD_E_SHAPE;
    R4dState *s = r4d_state(a);
    if (!s) return RAD_E_ARG;
    if (s->world_size <= 1) {
        if (col0 != 0 || N != W) return RAD_E_SHAPE;
        R4D_GATE(a);
        R4D_CU(cudaMemcpy2DAsync(out->data, out->row_stride * 4, x->data, x->row_stride * 4, (size_t)N * 4, M,
                                 cudaMemcpyDeviceToDevice, s->stream));
        return RAD_OK;
    }
    R4dComm *c = s->comm;
    if (!c) return RAD_E_UNSUPPORTED;
    if (s->mode != R4D_EAGER) return RAD_E_UNSUPPORTED; /* it reads the spans back mid-call: never in a graph */
    if ((rc = comm_ready(c))) return rc;
    const uint32_t R = s->world_size;
    /* 1. every rank's (col0, N, M): the tiling is checked on every rank before any column moves */
    int64_t mine[3] = {col0, N, (int64_t)M}, *spans_h = (int64_t *)malloc(sizeof(int64_t) * 3 * R);
    int64_t *dev = (int64_t *)scratch(s, sizeof(int64_t) * 3 * (R + 1));
    if (!spans_h || !dev) return free(spans_h), RAD_E_NOMEM;
    if (cudaMemcpyAsync(dev, mine, sizeof mine, cudaMemcpyHostToDevice, s->stream) != cudaSuccess ||
        ncclAllGather(dev, dev + 3, 3, ncclInt64, c->nccl, s->stream) != ncclSuccess ||
        cudaMemcpyAsync(spans_h, dev + 3, sizeof(int64_t) * 3 * R, cudaMemcpyDeviceToHost, s->stream) != cudaSuccess ||
        cudaStreamSynchronize(s->stream) != cudaSuccess)
        return free(spans_h), RAD_E_IO;
    int64_t nmax = 0, covered = 0;
    int ok = 1;
    for (uint32_t r = 0; r < R; r++) { /* spans in rank order must tile [0, W) */
        if (spans_h[3 * r] != covered || spans_h[3 * r + 2] != (int64_t)M) ok = 0;
        covered += spans_h[3 * r + 1];
        if (spans_h[3 * r + 1] > nmax) nmax = spans_h[3 * r + 1];
    }
    if (covered != W) ok = 0;
    if (!ok) return free(spans_h), RAD_E_SHAPE;
    /* 2. the columns: each rank's rows padded to nmax, gathered, then scattered into out */
    const size_t slot = (size_t)M * (size_t)nmax;
    float *buf = (float *)scratch(s, (slot * (R + 1)) * sizeof(float) + sizeof(int64_t) * 2 * R);
    if (!buf) return free(spans_h), RAD_E_NOMEM;
    int64_t *spans_d = (int64_t *)(buf + slot * (R + 1));
    int64_t *pairs = (int64_t *)malloc(sizeof(int64_t) * 2 * R);
    if (!pairs) return free(spans_h), RAD_E_NOMEM;
    for (uint32_t r = 0; r < R; r++) pairs[2 * r] = spans_h[3 * r], pairs[2 * r + 1] = spans_h[3 * r + 1];
    free(spans_h);
    rc = RAD_E_IO;
    if (cudaMemcpy2DAsync(buf, (size_t)nmax * 4, x->data, x->row_stride * 4, (size_t)N * 4, M, cudaMemcpyDeviceToDevice, s->stream) ==
            cudaSuccess &&
        cudaMemcpyAsync(spans_d, pairs, sizeof(int64_t) * 2 * R, cudaMemcpyHostToDevice, s->stream) == cudaSuccess &&
        ncclAllGather(buf, buf + slot, slot, ncclFloat32, c->nccl, s->stream) == ncclSuccess) {
        const unsigned bx = r4d_blocks((uint64_t)nmax, 256) < 64 ? r4d_blocks((uint64_t)nmax, 256) : 64;
        k_scatter_cols<<<dim3(bx, R, (unsigned)M), 256, 0, s->stream>>>(buf + slot, spans_d, R, M, (uint64_t)nmax,
                                                                       (float *)out->data, out->row_stride);
        rc = cudaGetLastError() == cudaSuccess && cudaStreamSynchronize(s->stream) == cudaSuccess ? RAD_OK : RAD_E_IO;
    }
    free(pairs); /* the copy from it is done (synchronised above) */
    return rc;
}
