/* r4d_comm.cu — collectives over NCCL: all_reduce and all_gather (docs/OPS.md), one rank per GPU.
 *
 * The root names the communicator (comm_id: ncclGetUniqueId); every rank's init records the
 * name, and the NCCL communicator is made at the rank's first step (step_begin, or the first
 * collective when the step runs without the hooks): ncclCommInitRank waits for every rank, and
 * the engine opens its ranks one after another but runs their steps at once. all_reduce with exact = 0 is NCCL's sum (its ring adds in another order:
 * TOLERANCE 1e-5); with exact = 1 every rank's x is gathered and summed in rank order, so the
 * sum is the reference's, bit for bit on every rank. all_gather exchanges the ranks' spans the
 * first time an op runs (the tiling is checked on every rank before anything is written) and
 * keeps them on the device; every call then moves the columns with no host round trip, so it
 * can be captured in a graph.
 *
 * A failing rank must release every rank (docs/PLUGINS.md, "Collectives"), and NCCL's
 * collectives are queued: a rank waiting for one that stopped waits in its stream, not in a call.
 * So the ranks of one communicator in this process (the engine's ranks are its threads) share a
 * group, found by the root's id, with one abort flag, as libref's ranks share theirs.
 * comm_abort(1) on any rank raises it. Communicators are non-blocking (ncclConfig_t.blocking 0),
 * and every place a rank waits polls the flag: its init and its calls (ncclInProgress), and its
 * stream (r4d_wait, used by sync, the copy back and the collectives themselves). A rank that sees
 * the flag aborts its own communicator, on its own thread (ncclCommAbort: the kernels waiting
 * for the stopped rank return), and its wait returns RAD_E_IO. comm_abort(0), once every rank has
 * left the step, lowers the flag and asks every rank for a new communicator, which the ranks make
 * together at their next step from an id rank 0 draws. */
#include <nccl.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "r4d.cuh"

/* The ranks of one communicator in this process. */
typedef struct R4dGroup {
    uint8_t name[sizeof(RadCommId)]; /* the root's id */
    int users;                    /* ranks joined (0: a free slot) */
    int aborted;                  /* 1: every collective and wait of every rank returns RAD_E_IO (atomic) */
    uint32_t want;                /* the generation every rank's communicator must be (0: the root's id) */
    uint32_t drawn;               /* the generation `id` was drawn for by rank 0 */
    ncclUniqueId id;
} R4dGroup;

struct R4dComm {
    ncclComm_t nccl;              /* NULL: not made yet, or aborted (made again at the next step) */
    uint32_t rank, size;
    int device;
    uint32_t generation;          /* which of the group's communicators nccl is */
    uint64_t made;                /* communicators this rank has made (a graph holds one's launches) */
    R4dGroup *g;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static R4dGroup g_groups[16];

static int group_aborted(const R4dComm *c) { return __atomic_load_n(&c->g->aborted, __ATOMIC_ACQUIRE); }

/* This rank's communicator aborted, on its own thread: what it queued returns. */
static void comm_drop(R4dComm *c) {
    if (c->nccl) ncclCommAbort(c->nccl), c->nccl = NULL;
}

/* A short pause in a polling wait: spin first (a decode step is short), then yield the core. */
static void poll_pause(unsigned *spins) {
    if (++*spins < 2048) return;
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
}

/* An NCCL call's result on a non-blocking communicator: ncclInProgress is polled until the call
 * is done, and abandoned (the communicator aborted) when the group's flag rises. */
static int nccl_settle(R4dComm *c, ncclComm_t comm, ncclResult_t r) {
    unsigned spins = 0;
    while (r == ncclInProgress) {
        if (group_aborted(c)) return RAD_E_IO;
        poll_pause(&spins);
        if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) return RAD_E_IO;
    }
    return r == ncclSuccess ? RAD_OK : RAD_E_IO;
}

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
    if (rank >= world_size) return RAD_E_ARG;
    R4dComm *c = (R4dComm *)calloc(1, sizeof *c);
    if (!c) return RAD_E_NOMEM;
    c->rank = rank, c->size = world_size, c->device = device;
    pthread_mutex_lock(&g_mu);
    int k = 0, free_k = -1;
    for (; k < 16 && !(g_groups[k].users && !memcmp(g_groups[k].name, id, sizeof g_groups[k].name)); k++)
        if (!g_groups[k].users && free_k < 0) free_k = k;
    if (k == 16 && free_k >= 0) {
        k = free_k;
        memset(&g_groups[k], 0, sizeof g_groups[k]);
        memcpy(g_groups[k].name, id, sizeof g_groups[k].name);
    }
    if (k < 16) g_groups[k].users++, c->g = &g_groups[k];
    pthread_mutex_unlock(&g_mu);
    if (!c->g) return free(c), RAD_E_LIMIT;
    *out = c; /* joined at the first step (comm_ready): every rank must be there */
    return RAD_OK;
}

extern "C" void r4d_comm_leave(R4dComm *c) {
    if (!c) return;
    /* every launch is done (fini waited): an abort frees it without the peers' part of a finalize,
     * which ranks closed one after another on one thread could not all give at once */
    comm_drop(c);
    pthread_mutex_lock(&g_mu);
    c->g->users--;
    pthread_mutex_unlock(&g_mu);
    free(c);
}

extern "C" void r4d_comm_abort(void *state, int on) {
    R4dState *s = (R4dState *)state;
    if (!s || !s->comm || !r4d_bind(s)) return;
    R4dComm *c = s->comm;
    pthread_mutex_lock(&g_mu);
    if (on) {
        __atomic_store_n(&c->g->aborted, 1, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&g_cv); /* a rank waiting for a new id gives up */
    } else if (group_aborted(c)) {
        __atomic_store_n(&c->g->aborted, 0, __ATOMIC_RELEASE);
        c->g->want++; /* every rank's communicator is made again: some were aborted mid-collective */
    }
    pthread_mutex_unlock(&g_mu);
    if (on) comm_drop(c);
}

/* Waits for everything queued on stream st. With a communicator, it polls the group's flag while
 * it waits: on a rise this rank's communicator is aborted (its queued collectives return) and
 * the wait returns RAD_E_IO once the stream is done. */
extern "C" int r4d_wait(R4dState *s, cudaStream_t st) {
    R4dComm *c = s->comm;
    if (!c) return cudaStreamSynchronize(st) == cudaSuccess ? RAD_OK : RAD_E_IO;
    int released = 0;
    unsigned spins = 0;
    for (;;) {
        const cudaError_t q = cudaStreamQuery(st);
        if (q == cudaSuccess) return released ? RAD_E_IO : RAD_OK;
        if (q != cudaErrorNotReady) return RAD_E_IO;
        if (!released && group_aborted(c)) comm_drop(c), released = 1;
        poll_pause(&spins);
    }
}

/* A communicator to issue on: the current one; the first, made from the root's id; or (after an
 * abort) a new one the group's ranks make together: rank 0 draws the id for the next
 * generation, the others wait for it. Called on the rank's own thread, outside any capture. */
static int comm_ready(R4dComm *c) {
    if (group_aborted(c)) return RAD_E_IO;
    R4dGroup *g = c->g;
    pthread_mutex_lock(&g_mu);
    const uint32_t want = g->want;
    pthread_mutex_unlock(&g_mu);
    if (c->nccl && c->generation == want) return RAD_OK;
    comm_drop(c); /* an older generation's: the group has moved on */
    ncclUniqueId u;
    if (want == 0) { /* the first: the root's id */
        memcpy(&u, g->name, sizeof u);
    } else {
        pthread_mutex_lock(&g_mu);
        if (c->rank == 0 && g->drawn < want) {
            if (ncclGetUniqueId(&g->id) != ncclSuccess) return pthread_mutex_unlock(&g_mu), RAD_E_IO;
            g->drawn = want;
            pthread_cond_broadcast(&g_cv);
        }
        while (g->drawn < want && !group_aborted(c)) pthread_cond_wait(&g_cv, &g_mu);
        const int ok = g->drawn >= want;
        u = g->id;
        pthread_mutex_unlock(&g_mu);
        if (!ok) return RAD_E_IO;
    }
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0; /* its init and calls return at once, so a rank can give up on one that stopped */
    ncclComm_t comm = NULL;
    if (cudaSetDevice(c->device) != cudaSuccess) return RAD_E_IO;
    const ncclResult_t r = ncclCommInitRankConfig(&comm, (int)c->size, u, (int)c->rank, &cfg);
    if ((r != ncclSuccess && r != ncclInProgress) || !comm) return RAD_E_IO;
    if (nccl_settle(c, comm, r)) return ncclCommAbort(comm), RAD_E_IO;
    c->nccl = comm, c->generation = want, c->made++;
    return RAD_OK;
}

/* step_begin's: the communicator made before a capture can start (NCCL's setup is not captured). */
extern "C" int r4d_comm_ready(R4dState *s) {
    if (!s || !s->comm) return RAD_OK;
    const uint64_t made = s->comm->made;
    const int rc = comm_ready(s->comm);
    if (!rc && made && s->comm->made != made) r4d_graphs_free(s); /* a graph holds the old one's launches */
    return rc;
}

extern "C" size_t r4d_comm_workspace(const RadParam *p, uint32_t np, int64_t n_max) {
    (void)p, (void)np, (void)n_max;
    return 0; /* the ordered sum and the gather take the state's scratch (below), sized by the calls' rows */
}

/* Device scratch of at least `bytes`, the state's (freed at fini), grown when a call needs more:
 * a size once reached is never allocated again. */
static void *scratch(R4dState *s, size_t bytes) {
    if (s->coll_cap < bytes) {
        if (s->mode != R4D_EAGER) return NULL; /* a graph's step: its eager first run grew it already */
        if (r4d_wait(s, s->stream)) return NULL; /* a collective queued on the old one may wait for a stopped rank */
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
        if (!tmp) return group_aborted(c) ? RAD_E_IO : RAD_E_NOMEM;
        k_pack_rows<<<blocks, 256, 0, s->stream>>>((const float *)x->data, x->row_stride, M, (uint64_t)N, tmp);
        R4D_LAUNCHED();
        flat = tmp;
    }
    if (!ordered) {
        if (nccl_settle(c, c->nccl, ncclAllReduce(flat, flat, n, ncclFloat32, ncclSum, c->nccl, s->stream))) return RAD_E_IO;
        if (flat != x->data) {
            R4D_CU(cudaMemcpy2DAsync(x->data, x->row_stride * 4, flat, (size_t)N * 4, (size_t)N * 4, M, cudaMemcpyDeviceToDevice,
                                     s->stream));
        }
        return RAD_OK;
    }
    float *all = tmp + n;
    if (nccl_settle(c, c->nccl, ncclAllGather(tmp, all, n, ncclFloat32, c->nccl, s->stream))) return RAD_E_IO;
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

/* The tiling of this rank's all_gather (W, col0, N): every rank's (col0, N), exchanged the first
 * time the op runs (eager: it reads them back to the host) and checked on every rank (spans in
 * rank order tile [0, W), every rank at the same rows), then kept on the device, so later calls,
 * and graphs, launch without a host round trip. NULL with *rc set when it cannot be had. Keyed by
 * this rank's span: two gathers of one width split the same way here but differently on another
 * rank would share an entry (no plugin in the tree does that). */
static const struct R4dState::R4dSpans *spans_of(R4dState *s, R4dComm *c, int64_t W, int64_t col0, int64_t N, uint64_t M,
                                               int *rc) {
    for (int i = 0; i < s->n_spans; i++)
        if (s->spans[i].W == W && s->spans[i].col0 == col0 && s->spans[i].N == N) return &s->spans[i];
    *rc = RAD_E_UNSUPPORTED;
    if (s->mode != R4D_EAGER || s->n_spans == (int)(sizeof s->spans / sizeof s->spans[0])) return NULL;
    const uint32_t R = s->world_size;
    int64_t mine[3] = {col0, N, (int64_t)M}, *spans_h = (int64_t *)malloc(sizeof(int64_t) * 3 * R);
    int64_t *dev = (int64_t *)scratch(s, sizeof(int64_t) * 3 * (R + 1));
    *rc = group_aborted(c) ? RAD_E_IO : RAD_E_NOMEM;
    if (!spans_h || !dev) return free(spans_h), (const struct R4dState::R4dSpans *)NULL;
    *rc = RAD_E_IO;
    if (cudaMemcpyAsync(dev, mine, sizeof mine, cudaMemcpyHostToDevice, s->stream) != cudaSuccess ||
        nccl_settle(c, c->nccl, ncclAllGather(dev, dev + 3, 3, ncclInt64, c->nccl, s->stream)) ||
        cudaMemcpyAsync(spans_h, dev + 3, sizeof(int64_t) * 3 * R, cudaMemcpyDeviceToHost, s->stream) != cudaSuccess ||
        r4d_wait(s, s->stream))
        return free(spans_h), (const struct R4dState::R4dSpans *)NULL;
    int64_t nmax = 0, covered = 0;
    int ok = 1;
    for (uint32_t r = 0; r < R; r++) { /* spans in rank order must tile [0, W) */
        if (spans_h[3 * r] != covered || spans_h[3 * r + 2] != (int64_t)M) ok = 0;
        covered += spans_h[3 * r + 1];
        if (spans_h[3 * r + 1] > nmax) nmax = spans_h[3 * r + 1];
    }
    if (covered != W) ok = 0;
    for (uint32_t r = 0; r < R; r++) spans_h[2 * r] = spans_h[3 * r], spans_h[2 * r + 1] = spans_h[3 * r + 1]; /* (col0, N) pairs */
    struct R4dState::R4dSpans *e = &s->spans[s->n_spans];
    *rc = ok ? RAD_E_IO : RAD_E_SHAPE;
    if (!ok || cudaMalloc((void **)&e->dev, sizeof(int64_t) * 2 * R) != cudaSuccess ||
        cudaMemcpy(e->dev, spans_h, sizeof(int64_t) * 2 * R, cudaMemcpyHostToDevice) != cudaSuccess) {
        if (ok) cudaFree(e->dev), e->dev = NULL;
        return free(spans_h), (const struct R4dState::R4dSpans *)NULL;
    }
    free(spans_h);
    e->W = W, e->col0 = col0, e->N = N, e->nmax = nmax;
    s->n_spans++;
    return e;
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
    if ((rc = comm_ready(c))) return rc;
    const uint32_t R = s->world_size;
    const struct R4dState::R4dSpans *sp = spans_of(s, c, W, col0, N, M, &rc);
    if (!sp) return rc;
    /* each rank's rows padded to the widest span, gathered, then scattered into out */
    const size_t slot = (size_t)M * (size_t)sp->nmax;
    float *buf = (float *)scratch(s, (slot * (R + 1)) * sizeof(float));
    if (!buf) return group_aborted(c) ? RAD_E_IO : RAD_E_NOMEM;
    R4D_GATE(a);
    R4D_CU(cudaMemcpy2DAsync(buf, (size_t)sp->nmax * 4, x->data, x->row_stride * 4, (size_t)N * 4, M, cudaMemcpyDeviceToDevice,
                             s->stream));
    if (nccl_settle(c, c->nccl, ncclAllGather(buf, buf + slot, slot, ncclFloat32, c->nccl, s->stream))) return RAD_E_IO;
    const unsigned bx = r4d_blocks((uint64_t)sp->nmax, 256) < 64 ? r4d_blocks((uint64_t)sp->nmax, 256) : 64;
    k_scatter_cols<<<dim3(bx, R, (unsigned)M), 256, 0, s->stream>>>(buf + slot, sp->dev, R, M, (uint64_t)sp->nmax,
                                                                   (float *)out->data, out->row_stride);
    R4D_LAUNCHED();
    return RAD_OK;
}
