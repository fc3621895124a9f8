/* r4d.cuh — what every libr4d .cu file shares: the library state (one per rank: its device, its
 * stream, its cuBLASLt handle and workspace, its communicator), launch checks, and the device
 * helpers that decode GGML blocks with rad_dequant's arithmetic.
 *
 * libr4d includes only abi/, its own folder, the C library and the CUDA Toolkit's headers
 * (cuda_runtime, cuBLASLt, NCCL); the ABI it serves has C linkage (r4d_lib.cu). Every f32
 * operation whose rounding a reference pins is written with the _rn intrinsics (r4d_decode.h's
 * R4D_MUL, ...), so nvcc's FMA contraction cannot change a bit of it. */
#ifndef R4D_CUH
#define R4D_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "r4d_decode.h"
#include "r4d_host.h"

struct R4dPlan; /* r4d_gemm.cu */

typedef struct R4dComm R4dComm; /* r4d_comm.cu */

typedef struct R4dState {
    int device;                   /* the CUDA device this rank runs on */
    int n_sm;                     /* its multiprocessors (the attention's split plan) */
    cudaStream_t stream;          /* every launch of this rank, in issue order */
    void *lt;                     /* cublasLtHandle_t */
    void *lt_ws;                  /* [R4D_LT_WORKSPACE] cuBLASLt's workspace, device */
    R4dPlanCache plans;           /* per-shape cuBLASLt plans */
    int *err;                     /* device word: a kernel's refusal found on the device (0: none) */
    /* step images (r4d_host.h), one slot per (KV group's table, window, plan): pinned host copy, device
     * copy, the bytes last uploaded (an equal image is not sent again), the upload's event */
    struct R4dImg {
        const void *table;        /* the group's host block table: which group this slot serves */
        int64_t window;
        uint32_t tile_rows;       /* the prefill plan's rows per tile (0: none) */
        void *host, *dev;
        uint8_t *last;
        size_t cap, bytes;
        cudaEvent_t done;
    } img[8];
    int n_img;
    uint8_t *img_new;             /* [img_new_cap] a step's image built here first, compared, then sent */
    size_t img_new_cap;
    /* rope tables by parameter set, device memory, made once each */
    struct { R4dRope c; float *inv; } rope[16];
    int n_rope;
    uint32_t rank, world_size;
    R4dComm *comm;                /* world_size > 1 */
    void *coll;                   /* [coll_cap] the collectives' device scratch (r4d_comm.cu) */
    size_t coll_cap;
    /* all_gather's tilings, exchanged once per (W, col0, N) of this rank's op and checked
     * (r4d_comm.cu): every rank's (col0, N) on the device, the widest N */
    struct R4dSpans { int64_t W, col0, N, nmax; int64_t *dev; } spans[16];
    int n_spans;
    /* decode graphs (r4d_graph.cu): a step between step_begin and step_end runs eagerly, is
     * captured, or replays a graph; in replay the runs do their host work and launch nothing */
    int graphs;                   /* 1: on (R4D_GRAPHS=0 turns them off) */
    int mode;                     /* R4D_EAGER, R4D_CAPTURE, R4D_REPLAY */
    int cur;                      /* the graph entry of the step in capture or replay */
    uint64_t print;               /* the step's launches so far, hashed (what a replay must repeat) */
    cudaStream_t side;            /* copies while the main stream is capturing */
    struct R4dGraph { R4dGraphKey key; int seen; cudaGraphExec_t exec; uint64_t print; } gr[32];
    int n_gr;
} R4dState;

/* A CUDA call inside a run: any error is RAD_E_IO (the device failed, not the input). */
#define R4D_CU(call)                                                                                                    \
    do {                                                                                                              \
        if ((call) != cudaSuccess) return RAD_E_IO;                                                                   \
    } while (0)
/* After a launch: the launch itself failed (bad configuration, no device). */
#define R4D_LAUNCHED() R4D_CU(cudaGetLastError())

enum { R4D_EAGER = 0, R4D_CAPTURE = 1, R4D_REPLAY = 2 };

/* The calling thread's current device made the state's (the engine runs each rank on its own
 * thread; CUDA's current device is per thread): 0 when it cannot be. Every entry point binds. */
extern thread_local int r4d_bound_device;
static inline int r4d_bind(R4dState *s) {
    if (s && r4d_bound_device != s->device) {
        if (cudaSetDevice(s->device) != cudaSuccess) return 0;
        r4d_bound_device = s->device;
    }
    return s != NULL;
}
static inline R4dState *r4d_state(const RadKernelArgs *a) {
    R4dState *s = (R4dState *)a->lib_state;
    return r4d_bind(s) ? s : NULL;
}
static inline cudaStream_t r4d_stream(const RadKernelArgs *a) {
    R4dState *s = a->lib_state ? r4d_state(a) : NULL;
    return s ? s->stream : 0;
}
static inline unsigned r4d_blocks(uint64_t n, unsigned per) { return (unsigned)((n + per - 1) / per); }

/* ---- the kernels' entry points (one file per family) --------------------------------------------- */

extern "C" {
int r4d_run_embed_gather(const RadKernelArgs *a);
int r4d_run_embed_gather_part(const RadKernelArgs *a);
int r4d_run_logits_gather(const RadKernelArgs *a);
int r4d_run_argmax(const RadKernelArgs *a);       /* greedy decode's ids on the device */
int r4d_run_rmsnorm(const RadKernelArgs *a);
int r4d_run_add_rmsnorm(const RadKernelArgs *a);
int r4d_run_head_rmsnorm(const RadKernelArgs *a);
int r4d_run_silu_mul(const RadKernelArgs *a);
int r4d_run_gelu_tanh_mul(const RadKernelArgs *a);
int r4d_run_add(const RadKernelArgs *a);
int r4d_run_add_bias(const RadKernelArgs *a);
int r4d_run_scale(const RadKernelArgs *a);
int r4d_run_rope(const RadKernelArgs *a);
size_t r4d_rope_workspace(const RadParam *p, uint32_t np, int64_t n_max);
int r4d_run_gemv(const RadKernelArgs *a);         /* gemm_nt, logits_gemm: exact dequantisation, M <= 8 */
int r4d_run_gemv_multi(const RadKernelArgs *a);   /* gemm_nt2, gemm_nt3 */
int r4d_run_gemv_q8(const RadKernelArgs *a);      /* q8 activations, dp4a, M <= 8 */
int r4d_run_gemv_q8_multi(const RadKernelArgs *a);
size_t r4d_gemv_q8_workspace(const RadParam *p, uint32_t np, int64_t n_max);
int r4d_run_gemm_f32(const RadKernelArgs *a);     /* slabs dequantised to f32, cuBLASLt SGEMM (no TF32) */
int r4d_run_gemm_f32_multi(const RadKernelArgs *a);
size_t r4d_gemm_f32_workspace(const RadParam *p, uint32_t np, int64_t n_max);
int r4d_run_gemm_bf16(const RadKernelArgs *a);    /* bf16 weights (packed or slabs), x rounded to bf16, cuBLASLt */
int r4d_run_gemm_bf16_multi(const RadKernelArgs *a);
size_t r4d_gemm_bf16_workspace(const RadParam *p, uint32_t np, int64_t n_max);
int r4d_run_gemm_f8(const RadKernelArgs *a);      /* block-scaled f8 weights, x as e4m3 per 128-group, fp8 tensor cores */
int r4d_run_gemm_f8_multi(const RadKernelArgs *a);
size_t r4d_gemm_f8_workspace(const RadParam *p, uint32_t np, int64_t n_max);
int r4d_run_attn_paged(const RadKernelArgs *a);  /* split-K over every row */
int r4d_run_attn_flash(const RadKernelArgs *a);  /* tensor-core tiles for prefill runs, split-K for the rest */
size_t r4d_attn_workspace(const RadParam *p, uint32_t np, int64_t n_max);
int r4d_run_all_reduce_nccl(const RadKernelArgs *a);    /* exact = 0: NCCL's sum */
int r4d_run_all_reduce_ordered(const RadKernelArgs *a); /* every rank's x gathered, summed in rank order */
int r4d_run_all_gather(const RadKernelArgs *a);
size_t r4d_comm_workspace(const RadParam *p, uint32_t np, int64_t n_max);
/* r4d_comm.cu */
int r4d_comm_id(uint32_t world_size, RadCommId *id);
int r4d_comm_join(const void *id, uint32_t rank, uint32_t world_size, int device, R4dComm **out);
void r4d_comm_leave(R4dComm *c);
void r4d_comm_abort(void *state, int on);
int r4d_comm_ready(R4dState *s);
int r4d_wait(R4dState *s, cudaStream_t st); /* the stream done; under --tp, released when a rank fails */
/* r4d_gemm.cu */
void r4d_plans_free(R4dState *s);
/* r4d_graph.cu */
int r4d_step_begin(void *state, const RadBatch *b);
int r4d_step_end(void *state, int ok);
void r4d_graphs_free(R4dState *s);
/* A run's launches, once its checks passed: noted in the step's fingerprint (capture, replay);
 * 1 when they must not be issued (a replay: the graph holds them). */
int r4d_gate(const RadKernelArgs *a, const char *run);
/* The context the attention plans its splits for: a power of two from 256 (so a decode graph
 * keeps its grid while the context grows inside it). */
uint32_t r4d_ctx_bucket(uint32_t max_ctx);
}
/* The gate at the top of a run's launches. */
#define R4D_GATE(a)                                                                                                      \
    do {                                                                                                              \
        if (r4d_gate((a), __func__)) return RAD_OK;                                                                     \
    } while (0)

#endif
