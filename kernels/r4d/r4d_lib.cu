/* r4d_lib.cu — libr4d, the CUDA kernel library: its table, init/fini and the device-memory hooks.
 *
 * One state per rank: the device (RadKernelLibConfig.device_index), one stream every kernel of
 * the rank launches on in issue order, a cuBLASLt handle with its 32 MiB workspace, and the step
 * image (r4d_host.h) in pinned and device memory. Nothing is allocated per step: the image grows
 * only when a step is bigger than any before, and plans and rope tables are made once per shape.
 * kernels/README.md, "libr4d", describes the kernels, their variants and exactness. */
#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "r4d.cuh"

/* ---- init / fini ------------------------------------------------------------------------------ */

static void r4d_fini(void *state);

thread_local int r4d_bound_device = -1;

/* Why the last init failed (RadKernelLib.init_error): one line, for the core's message. */
static char g_init_error[256];
static const char *r4d_init_error(void) { return g_init_error[0] ? g_init_error : NULL; }

static int r4d_init(const RadKernelLibConfig *cfg, void **state) {
    if (!state) return RAD_E_ARG;
    int n_dev = 0;
    const cudaError_t ce = cudaGetDeviceCount(&n_dev);
    int device = 0;
    if (cfg && cfg->struct_size >= offsetof(RadKernelLibConfig, device_index) + sizeof cfg->device_index) device = cfg->device_index;
    g_init_error[0] = 0;
    if (ce != cudaSuccess || n_dev == 0) {
        snprintf(g_init_error, sizeof g_init_error, "no CUDA device (cudaGetDeviceCount: %s)",
                 ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
        return RAD_E_UNSUPPORTED;
    }
    if (device < 0 || device >= n_dev) {
        snprintf(g_init_error, sizeof g_init_error, "device_index %d: this machine has %d CUDA device(s)", device, n_dev);
        return RAD_E_ARG;
    }
    R4dState *s = (R4dState *)calloc(1, sizeof *s);
    if (!s) return RAD_E_NOMEM;
    s->device = device, s->world_size = 1;
    {
        const char *g = getenv("R4D_GRAPHS"); /* decode graphs, on unless R4D_GRAPHS=0 */
        s->graphs = !(g && !strcmp(g, "0"));
    }
    if (cfg && cfg->struct_size >= offsetof(RadKernelLibConfig, world_size) + sizeof cfg->world_size) {
        s->rank = cfg->rank;
        s->world_size = cfg->world_size ? cfg->world_size : 1;
    }
    /* Under tensor parallelism decode runs eagerly unless R4D_GRAPHS_TP=1: NCCL's collectives in
     * a captured graph are written (all_gather checks its tiling once, not per call) but have not
     * run on two GPUs (docs/GPU.md, "Tensor parallelism"). */
    if (s->world_size > 1) {
        const char *g = getenv("R4D_GRAPHS_TP");
        s->graphs = s->graphs && g && !strcmp(g, "1");
    }
    int rc = RAD_E_IO;
    cudaDeviceProp prop;
    if (!r4d_bind(s) || cudaGetDeviceProperties(&prop, device) != cudaSuccess) goto fail;
    s->n_sm = prop.multiProcessorCount;
    if (cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking) != cudaSuccess) goto fail;
    if (cublasLtCreate((cublasLtHandle_t *)&s->lt) != CUBLAS_STATUS_SUCCESS) goto fail;
    if (cudaMalloc(&s->lt_ws, R4D_LT_WORKSPACE) != cudaSuccess) goto fail;
    if (cudaMalloc((void **)&s->err, sizeof(int)) != cudaSuccess || cudaMemset(s->err, 0, sizeof(int)) != cudaSuccess) goto fail;
    if (s->world_size > 1) {
        const int has = cfg->struct_size >= offsetof(RadKernelLibConfig, comm) + sizeof cfg->comm && cfg->comm;
        if (!has) {
            rc = RAD_E_ARG;
            goto fail;
        }
        if ((rc = r4d_comm_join(cfg->comm, s->rank, s->world_size, device, &s->comm))) goto fail;
    }
    *state = s;
    return RAD_OK;
fail:
    snprintf(g_init_error, sizeof g_init_error, "device %d: %s", device,
             rc == RAD_E_IO ? cudaGetErrorString(cudaGetLastError()) : "the communicator could not be joined");
    r4d_fini(s);
    return rc;
}

static void r4d_fini(void *state) {
    R4dState *s = (R4dState *)state;
    if (!s) return;
    r4d_bind(s);
    if (s->stream) r4d_wait(s, s->stream);
    r4d_comm_leave(s->comm);
    r4d_graphs_free(s);
    if (s->side) cudaStreamDestroy(s->side);
    r4d_plans_free(s);
    for (int i = 0; i < s->n_rope; i++) cudaFree(s->rope[i].inv);
    for (int i = 0; i < s->n_img; i++) {
        cudaFree(s->img[i].dev);
        cudaFreeHost(s->img[i].host);
        free(s->img[i].last);
        if (s->img[i].done) cudaEventDestroy(s->img[i].done);
    }
    free(s->img_new);
    cudaFree(s->coll);
    for (int i = 0; i < s->n_spans; i++) cudaFree(s->spans[i].dev);
    cudaFree(s->err);
    cudaFree(s->lt_ws);
    if (s->lt) cublasLtDestroy((cublasLtHandle_t)s->lt);
    if (s->stream) cudaStreamDestroy(s->stream);
    free(s);
}

/* ---- device memory ------------------------------------------------------------------------------ */

static void *r4d_alloc(void *state, size_t bytes) {
    R4dState *s = (R4dState *)state;
    void *p = NULL;
    if (!r4d_bind(s)) return NULL;
    return cudaMalloc(&p, bytes ? bytes : 1) == cudaSuccess ? p : NULL;
}
static void r4d_free(void *state, void *p) {
    R4dState *s = (R4dState *)state;
    if (p && r4d_bind(s)) cudaFree(p);
}
/* In the rank's stream: ordered after every launch issued so far and before every later one. To
 * the device it returns once src may be reused (pageable memory is staged by the driver before
 * cudaMemcpyAsync returns), without waiting for the device: a step's raw operands cost no sync.
 * To the host it returns with the bytes. */
static int r4d_copy(void *state, void *dst, const void *src, size_t bytes, int to_device) {
    R4dState *s = (R4dState *)state;
    if (!r4d_bind(s)) return RAD_E_ARG;
    if (!bytes) return RAD_OK;
    if (s->mode == R4D_CAPTURE) { /* the main stream is capturing: the copy goes now, on the side stream */
        if (!to_device || cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s->side) != cudaSuccess ||
            cudaStreamSynchronize(s->side) != cudaSuccess)
            return RAD_E_IO;
        return RAD_OK;
    }
    if (cudaMemcpyAsync(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, s->stream) != cudaSuccess)
        return RAD_E_IO;
    if (!to_device && r4d_wait(s, s->stream)) return RAD_E_IO;
    return RAD_OK;
}
/* The end of a step: every launch done; a refusal a kernel found on the device (r4d.cuh, err) is
 * the step's status, and clears. */
static int r4d_sync(void *state) {
    R4dState *s = (R4dState *)state;
    if (!r4d_bind(s)) return RAD_E_ARG;
    int err = 0;
    if (cudaMemcpyAsync(&err, s->err, sizeof err, cudaMemcpyDeviceToHost, s->stream) != cudaSuccess || r4d_wait(s, s->stream))
        return RAD_E_IO;
    if (err && cudaMemsetAsync(s->err, 0, sizeof(int), s->stream) != cudaSuccess) return RAD_E_IO;
    return err ? err : RAD_OK;
}

/* ---- packed weights: plain floats as bf16 rows for the bf16 GEMMs --------------------------------- */

static size_t r4d_pack_size(void *state, RadDType enc, uint64_t rows, uint64_t cols) {
    (void)state;
    return r4d_pack_bf16_size(enc, rows, cols);
}
/* src and dst are host memory (docs/PLUGINS.md: the core packs into its staging copy of the
 * weights and uploads it whole); 64-byte aligned rows of bf16. */
static int r4d_pack(void *state, RadDType enc, uint64_t rows, uint64_t cols, const void *src, uint64_t stride, void *dst) {
    (void)state;
    return r4d_pack_bf16(enc, rows, cols, src, stride, (uint16_t *)dst);
}

/* ---- the table ------------------------------------------------------------------------------------ */

#define R4D_PLAIN RAD_ENC_PLAIN_FLOATS
#define R4D_ALL (RAD_ENC_PLAIN_FLOATS | RAD_ENC_GGML_BLOCKS)
#define R4D_KV (RAD_ENC_BIT(RAD_ENC_F32) | RAD_ENC_BIT(RAD_ENC_F16) | RAD_ENC_BIT(RAD_ENC_BF16))
#define BITWISE RAD_EXACT_BITWISE, 0.0
#define TOL(t) RAD_EXACT_TOLERANCE, (t)
#define Q8(t) RAD_EXACT_Q8ACT, (t)
#define BF16P(t) RAD_EXACT_BF16ACT, (t)
#define F8P(t) RAD_EXACT_F8ACT, (t)
/* op, variant, weight encodings, rows [lo, hi], exactness, workspace, run, KV block, KV encodings, packed, window */
#define K0_(OP, VAR, ENCS, LO, HI, EX, T, WS, RUN, KVB, KVENC, PACKED, WIN) \
    {sizeof(RadKernel), OP, VAR, ENCS, RAD_F32, LO, HI, KVB, EX, T, 1, WS, RUN, KVENC, 0, PACKED, NULL, 0, WIN}
#define K_(...) K0_(__VA_ARGS__) /* BITWISE, TOL(t), ... expand to two arguments first */
#define E_(OP, ENCS, EX, RUN) K_(OP, "cuda", ENCS, 1, 0, EX, NULL, RUN, 0, 0, 0, 0)
#define GEMMS_(OP, RUN1, RUNQ, RUNF, RUNB, RUN8)                                                                      \
    K_(OP, "lt_fp8", RAD_ENC_BIT(RAD_ENC_F8_E4M3), R4D_GEMV_MAX_ROWS + 1, 0, F8P(5e-2), r4d_gemm_f8_workspace, RUN8, 0, 0, 0, 0), \
    K_(OP, "q8", RAD_ENC_GGML_BLOCKS, 1, R4D_GEMV_MAX_ROWS, Q8(2e-2), r4d_gemv_q8_workspace, RUNQ, 0, 0, 0, 0),       \
    K_(OP, "lt_bf16", R4D_GEMM_ENCS, R4D_GEMV_MAX_ROWS + 1, 0, BF16P(1e-2), r4d_gemm_bf16_workspace, RUNB, 0, 0, R4D_PLAIN, 0), \
    K_(OP, "gemv", R4D_GEMM_ENCS, 1, R4D_GEMV_MAX_ROWS, TOL(1e-4), NULL, RUN1, 0, 0, 0, 0),                           \
    K_(OP, "lt_f32", R4D_GEMM_ENCS, 1, 0, TOL(1e-4), r4d_gemm_f32_workspace, RUNF, 0, 0, 0, 0)

static const RadKernel kernels[] = {
    E_("embed_gather", R4D_ALL, BITWISE, r4d_run_embed_gather),
    E_("embed_gather_part", R4D_ALL, BITWISE, r4d_run_embed_gather_part),
    E_("logits_gather", 0, BITWISE, r4d_run_logits_gather),
    E_("argmax", 0, BITWISE, r4d_run_argmax),
    E_("rmsnorm", R4D_PLAIN, TOL(1e-5), r4d_run_rmsnorm),
    E_("add_rmsnorm", R4D_PLAIN, TOL(1e-5), r4d_run_add_rmsnorm),
    E_("head_rmsnorm", R4D_PLAIN, TOL(1e-5), r4d_run_head_rmsnorm),
    /* The selector takes the first kernel within --max-tolerance, so the lossy ones come first:
     * --max-tolerance 5e-2 takes fp8 tensor cores for block-scaled f8 weights beyond 8 rows;
     * --fast (2e-2) takes q8 activations to 8 rows and bf16 tensor cores beyond; the default
     * (1e-3) passes over them to the exact GEMV to 8 rows, then slabs dequantised to f32 through
     * cuBLASLt. A decode row never takes lt_bf16 (dequantising a slab per token). */
    GEMMS_("gemm_nt", r4d_run_gemv, r4d_run_gemv_q8, r4d_run_gemm_f32, r4d_run_gemm_bf16, r4d_run_gemm_f8),
    GEMMS_("logits_gemm", r4d_run_gemv, r4d_run_gemv_q8, r4d_run_gemm_f32, r4d_run_gemm_bf16, r4d_run_gemm_f8),
    GEMMS_("gemm_nt2", r4d_run_gemv_multi, r4d_run_gemv_q8_multi, r4d_run_gemm_f32_multi, r4d_run_gemm_bf16_multi,
           r4d_run_gemm_f8_multi),
    GEMMS_("gemm_nt3", r4d_run_gemv_multi, r4d_run_gemv_q8_multi, r4d_run_gemm_f32_multi, r4d_run_gemm_bf16_multi,
           r4d_run_gemm_f8_multi),
    K_("rope", "cuda", R4D_PLAIN, 1, 0, TOL(1e-5), r4d_rope_workspace, r4d_run_rope, 0, 0, 0, 0),
    /* --fast: prefill runs of f16/bf16 caches on tensor cores; the default: split-K, f32 */
    K_("attn_paged", "flash", 0, 1, 0, TOL(1e-2), r4d_attn_workspace, r4d_run_attn_flash, 16, R4D_KV, 0, 1),
    K_("attn_paged", "splitk", 0, 1, 0, TOL(1e-5), r4d_attn_workspace, r4d_run_attn_paged, 16, R4D_KV, 0, 1),
    E_("silu_mul", 0, TOL(1e-6), r4d_run_silu_mul),
    E_("gelu_tanh_mul", 0, TOL(1e-6), r4d_run_gelu_tanh_mul),
    E_("add", 0, BITWISE, r4d_run_add),
    E_("add_bias", R4D_PLAIN, BITWISE, r4d_run_add_bias),
    E_("scale", 0, BITWISE, r4d_run_scale),
    /* exact = 1: every rank's x gathered, summed in rank order (bitwise); exact = 0: NCCL's sum */
    K_("all_reduce", "nccl", 0, 1, 0, TOL(1e-5), r4d_comm_workspace, r4d_run_all_reduce_nccl, 0, 0, 0, 0),
    K_("all_reduce", "ordered", 0, 1, 0, BITWISE, r4d_comm_workspace, r4d_run_all_reduce_ordered, 0, 0, 0, 0),
    K_("all_gather", "nccl", 0, 1, 0, BITWISE, r4d_comm_workspace, r4d_run_all_gather, 0, 0, 0, 0),
};

static const RadKernelLib lib = {sizeof(RadKernelLib), RAD_DEVICE_CUDA, kernels, (uint32_t)(sizeof kernels / sizeof kernels[0]),
                                 r4d_init, r4d_fini, r4d_alloc, r4d_free, r4d_copy, r4d_sync, r4d_pack_size, r4d_pack,
                                 r4d_comm_id, r4d_comm_abort, r4d_init_error, r4d_step_begin, r4d_step_end};

extern "C" {
RAD_KERNEL_LIB(lib, "r4d", "0.1.0", "libr4d: CUDA kernels for the docs/OPS.md decoder vocabulary (cuBLASLt, GGUF GEMV, paged attention, NCCL)")
}
