/* rad_kernels.h — the kernel-library ABI (docs/PLUGINS.md).
 *
 * A kernel library is a .so exporting rad_plugin_info (kind RAD_PLUGIN_KERNELS) and
 * rad_kernels(), which returns a table of kernels. Each kernel implements one op of the
 * vocabulary (docs/OPS.md) under one named variant, says which weight encodings its layout
 * accepts, over which extent of the op's ranged parameter it is valid, what it requires of
 * the deployment (the KV block size), how much workspace it needs, and how exact it is.
 * The core's selector picks, per declared op and bucket, one kernel among all libraries
 * loaded (rad-tune's table first, else the library order given, else the first that fits).
 *
 * Like rad_arch.h this header is all a library sees; it grows only at struct ends. */
#ifndef RAD_KERNELS_H
#define RAD_KERNELS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "rad_arch.h"
#include "rad_plugin.h"
#include "rad_types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RAD_ENC_BIT(e) ((uint64_t)1 << (unsigned)(e))
#define RAD_ENC_PLAIN_FLOATS (RAD_ENC_BIT(RAD_ENC_F32) | RAD_ENC_BIT(RAD_ENC_F16) | RAD_ENC_BIT(RAD_ENC_BF16))
#define RAD_ENC_GGML_BLOCKS (RAD_ENC_BIT(RAD_ENC_Q8_0) | RAD_ENC_BIT(RAD_ENC_Q4_0) | RAD_ENC_BIT(RAD_ENC_Q4_1) | \
    RAD_ENC_BIT(RAD_ENC_Q5_0) | RAD_ENC_BIT(RAD_ENC_Q5_1) | RAD_ENC_BIT(RAD_ENC_Q4_K) |                     \
    RAD_ENC_BIT(RAD_ENC_Q5_K) | RAD_ENC_BIT(RAD_ENC_Q6_K))

typedef enum RadDevice { RAD_DEVICE_CPU = 0, RAD_DEVICE_CUDA = 1 } RadDevice;

/* How a kernel's result relates to the op's reference definition in docs/OPS.md. */
typedef enum RadExactness {
    RAD_EXACT_BITWISE = 0,   /* bit-identical to the reference, whatever the batch */
    RAD_EXACT_TOLERANCE = 1, /* within `tolerance` (max |a-b| / (max|ref| + 1e-6), per output row) */
    RAD_EXACT_Q8ACT = 2,     /* ABI 1.3, GEMMs only: activations quantised to 32-wide q8 blocks; every output
                                within docs/OPS.md's per-output bound (gemm_nt, "Quantised activations").
                                `tolerance` is its per-row figure on outlier-free rows, what the selector's
                                --max-tolerance compares */
    RAD_EXACT_BF16ACT = 3,   /* ABI 1.6, GEMMs only: products of operands rounded to bf16 (the activations;
                                weights with more mantissa than bf16, f16's, too); every output within
                                8e-3 * sum_k |x_k * w_k| (docs/OPS.md, gemm_nt, "bf16 products"). `tolerance`
                                as Q8ACT's: its per-row figure on outlier-free rows */
    RAD_EXACT_F8ACT = 4      /* ABI 1.10, GEMMs only: activations quantised per 1x128 group of K to f8 e4m3
                                (scale amax/448, round to nearest even), weights exact, the products summed
                                by fp8 tensor cores; every output within docs/OPS.md's per-output bound
                                (gemm_nt, "fp8 activations"). `tolerance` as Q8ACT's */
} RadExactness;

/* One operand as a kernel sees it. Buffers are row-major with a row stride in elements. */
typedef struct RadKArg {
    void *data;             /* first row (device memory for a device library) */
    RadDType dtype;         /* element type; a weight's encoding for weight operands */
    uint64_t rows, cols;    /* extent (cols in elements) */
    uint64_t row_stride;    /* elements between rows; weights: BYTES between encoded rows; raw operands: 1
                               (a raw operand arrives as rows = element count, cols = 1) */
    const void *planes[4];  /* multi-plane weights: codes, scale, ... A raw operand for a device library
                               (ABI 1.9): data is the device copy, planes[1] the same values in host
                               memory, so a kernel checks them (ids in range) before it launches */
} RadKArg;

typedef struct RadKernelArgs {
    uint32_t struct_size;
    const RadParam *params;     /* the op's declared parameters, the ranged one set to n */
    uint32_t n_params;
    int64_t n;                  /* the ranged extent of this call (rows); never 0 */
    const RadKArg *args;        /* operands in docs/OPS.md order: weights first, then buffers */
    uint32_t n_args;
    const struct RadBatch *batch; /* the step (attention, rope, gathers read it) */
    const RadKvState *kv;       /* attention: the layer's KV state */
    void *workspace;            /* workspace(params) bytes, aligned to 256 */
    void *lib_state;            /* what init returned */
    uint32_t n_threads;         /* CPU libraries: threads to use */
    uint32_t deterministic;     /* batch-invariant reduction order required */
    /* ABI 1.2: the kernel's tunable knobs for this call, in its RadKernel.knobs order (a tuning
     * table chose them). NULL (or n_knobs short of a knob): that knob takes its default. */
    const int64_t *knobs;
    uint32_t n_knobs;
} RadKernelArgs;

/* What a knob's values do to the results (docs/PLUGINS.md, "Knobs"). */
typedef enum RadKnobEffect {
    RAD_KNOB_SAME_BITS = 0, /* every value gives the default's output bit for bit (threads, prefetch) */
    RAD_KNOB_ARITH = 1      /* the arithmetic changes (a split of the reduction): every value stays within the
                               kernel's stated exactness, tolerance and batch invariance; refused on a BITWISE kernel */
} RadKnobEffect;

/* One tunable choice of a kernel (ABI 1.2): what rad-tune sweeps and a tuning table sets. */
#define RAD_KNOB_MAX_VALUES 64
typedef struct RadKnob {
    uint32_t struct_size;       /* sizeof(RadKnob) as built; every entry of one kernel's list has knobs[0]'s */
    const char *name;           /* [a-z][a-z0-9_]*, unique within the kernel: "threads", "prefetch" */
    const int64_t *values;      /* [n_values] the values it may take, distinct */
    uint32_t n_values;          /* 1..RAD_KNOB_MAX_VALUES */
    RadKnobEffect effect;       /* RAD_KNOB_SAME_BITS or RAD_KNOB_ARITH */
    int64_t def;                /* one of values: what the kernel does when not told (today's behaviour) */
    /* ABI 1.3 */
    int64_t n_max;              /* the knob acts only on calls of at most n_max rows (a decode path's prefetch:
                                   1); 0: on any. rad-tune sweeps it only there */
} RadKnob;

typedef struct RadKernel {
    uint32_t struct_size;
    const char *op;             /* the vocabulary name: "gemm_nt", "rmsnorm", ... */
    const char *variant;        /* "generic", "avx2", "tile128": tuning chooses among variants */
    uint64_t weight_encs;       /* RAD_ENC_BIT set the layout accepts for the weight operand(s) (0: no weights) */
    RadDType act_dtype;         /* activation element type taken and produced */
    int64_t n_min, n_max;       /* the ranged extent this kernel serves (n_max 0: no limit) */
    uint32_t kv_block_size;     /* attention: the KV block size it requires (0: none) */
    RadExactness exactness;
    double tolerance;           /* RAD_EXACT_TOLERANCE: the bound it guarantees; Q8ACT, BF16ACT, F8ACT: its per-row figure */
    uint32_t batch_invariant;   /* 1: results do not depend on other rows in the call */
    size_t (*workspace)(const RadParam *params, uint32_t n_params, int64_t n_max);
    int (*run)(const RadKernelArgs *a); /* RAD_OK or a RadStatus; never partial output on error */
    uint64_t kv_encs;           /* attention: RAD_ENC_BIT set of KV cache types it reads (0: f32/f16/bf16) */
    uint32_t kvq_ok;            /* attention: bits (1 << RadKvQuant) of narrow KV layouts it reads */
    uint64_t packed_encs;       /* RAD_ENC_BIT set of weight encodings it also reads in its library's
                                   packed layout (RadKArg.dtype = enc | RAD_PACKED; RadKernelLib.pack) */
    /* ABI 1.2: its tunable knobs (NULL, 0: none), stepped by knobs[0].struct_size */
    const RadKnob *knobs;
    uint32_t n_knobs;           /* at most RAD_KNOB_MAX */
    /* ABI 1.4, attention: 1 when it serves attn_paged's `window` parameter (sliding-window
     * attention, docs/OPS.md); 0 (and every library built before): full attention only, so the
     * selector never picks it for an op whose window is not 0. The field sits in what was the
     * struct's tail padding, which a static table zero-fills. */
    uint32_t attn_window;
} RadKernel;
#define RAD_KNOB_MAX 16


/* A communicator's name (ABI 1.8): made once by the root with RadKernelLib.comm_id (NCCL's
 * ncclGetUniqueId; libref's names an in-process group), handed by the launcher to every rank
 * and given to init as RadKernelLibConfig.comm. The size of ncclUniqueId. */
typedef struct RadCommId {
    uint8_t bytes[128];
} RadCommId;

typedef struct RadKernelLibConfig {
    uint32_t struct_size;
    uint32_t n_threads;         /* CPU: 0 = all cores */
    int device_index;           /* CUDA: which device */
    uint32_t rank, world_size;  /* collectives */
    const void *comm;           /* a RadCommId from this library's comm_id (world_size > 1), or NULL */
} RadKernelLibConfig;

typedef struct RadKernelLib {
    uint32_t struct_size;
    RadDevice device;
    const RadKernel *kernels;   /* [n_kernels] */
    uint32_t n_kernels;
    int (*init)(const RadKernelLibConfig *cfg, void **state); /* may be NULL */
    void (*fini)(void *state);                                /* may be NULL */
    /* device memory: NULL for CPU libraries (the core uses host memory) */
    void *(*alloc)(void *state, size_t bytes);
    void (*free)(void *state, void *p);
    int (*copy)(void *state, void *dst, const void *src, size_t bytes, int to_device);
    int (*sync)(void *state);
    /* Load-time weight layout (both may be NULL). The core packs a weight [rows, cols] of
     * encoding enc once, at load, when every kernel it picked to read that weight lists enc in
     * packed_encs; the kernels then see dtype enc | RAD_PACKED, rows, cols and row_stride =
     * the stored layout's bytes per row, and the packed bytes at data. pack_size: the packed
     * bytes, or 0 when this library keeps the stored layout for such a weight. pack: src holds
     * the stored rows (src_row_stride bytes apart); writes pack_size bytes at dst (64-byte
     * aligned); RAD_OK or a RadStatus. */
    size_t (*pack_size)(void *state, RadDType enc, uint64_t rows, uint64_t cols);
    int (*pack)(void *state, RadDType enc, uint64_t rows, uint64_t cols, const void *src, uint64_t src_row_stride,
                void *dst);
    /* ABI 1.8: names a new communicator for world_size ranks (the root calls it once, before
     * any rank's init); RAD_OK or a RadStatus. NULL: the library has no collectives, and
     * all_reduce/all_gather over more than one rank are not served by it. */
    int (*comm_id)(uint32_t world_size, RadCommId *id);
    /* ABI 1.8: on = 1 when this rank's step ended early (a failed op, a plugin's rad_step_fail):
     * every collective of the communicator, waiting or issued later, returns RAD_E_IO at once
     * on every rank, so no rank waits for one that stopped. on = 0, called by the core once
     * every rank has left the step, makes it usable again. NULL: no collectives. */
    void (*comm_abort)(void *state, int on);
    /* ABI 1.9: why this library's last init failed, one line without a newline ("no CUDA
     * device (cudaGetDeviceCount: ...)"), or NULL when it has nothing to add. The core appends it
     * to its own "kernel library 'x' (path): init failed". NULL: none. */
    const char *(*init_error)(void);
    /* ABI 1.9, a device library (both or neither; may be NULL): the engine calls step_begin before
     * a step's first op and step_end(ok) after its last (ok = 0: the step failed on the way), then
     * sync. Between them the library may record its launches and replay them (CUDA graphs); a
     * kernel called outside a step (rad-kbench) runs as it is. RAD_OK or a RadStatus (the step
     * fails). */
    int (*step_begin)(void *state, const struct RadBatch *batch);
    int (*step_end)(void *state, int ok);
} RadKernelLib;

/* A library's kernels, indexed by the library's own struct size (RadKernel grows in minor
 * versions; a core must not index the array with its own sizeof). */
static inline const RadKernel *rad_kernel_at(const RadKernelLib *l, uint32_t i) {
    size_t stride = l->kernels[0].struct_size ? l->kernels[0].struct_size : sizeof(RadKernel);
    return (const RadKernel *)(const void *)((const char *)l->kernels + (size_t)i * stride);
}

/* Whether k's table entry has the knob fields (a library built before ABI 1.2 has none). */
static inline uint32_t rad_kernel_n_knobs(const RadKernel *k) {
    return k->struct_size >= offsetof(RadKernel, n_knobs) + sizeof k->n_knobs && k->knobs ? k->n_knobs : 0;
}
/* Knob i of k, indexed by the library's own RadKnob size. */
static inline const RadKnob *rad_kernel_knob(const RadKernel *k, uint32_t i) {
    size_t stride = k->knobs[0].struct_size ? k->knobs[0].struct_size : sizeof(RadKnob);
    return (const RadKnob *)(const void *)((const char *)k->knobs + (size_t)i * stride);
}
/* The most rows a call may have for knob kn to act (0: any; a library before ABI 1.3 says nothing). */
static inline int64_t rad_knob_n_max(const RadKnob *kn) {
    return kn->struct_size >= offsetof(RadKnob, n_max) + sizeof kn->n_max ? kn->n_max : 0;
}
/* For a kernel: the value of its knob i for this call, or def (the knob's default) when the
 * core passed none (an older core, or no tuning table). */
static inline int64_t rad_knob_value(const RadKernelArgs *a, uint32_t i, int64_t def) {
    return a->struct_size >= offsetof(RadKernelArgs, n_knobs) + sizeof a->n_knobs && a->knobs && i < a->n_knobs ? a->knobs[i]
                                                                                                            : def;
}

/* rope's inv_freq[i] (i < n_rot/2): docs/OPS.md's sequence of f32 operations, the order
 * transformers' ROPE_INIT_FUNCTIONS evaluate it in on f32 tensors. One copy for every library,
 * since a library that rounds one step otherwise rotates by other angles. scaling: 0 none,
 * 1 linear (factor), 2 llama3 (factor, low, high, orig_ctx). */
static inline float rad_rope_inv_freq(int64_t i, int64_t n_rot, double theta, int64_t scaling, double factor, double low,
                                      double high, int64_t orig_ctx) {
    const float e = (float)(2 * i) / (float)n_rot;
    const float p = (float)pow((double)(float)theta, (double)e);
    float inv = 1.0f / p;
    if (scaling == 1) {
        inv = inv / (float)factor;
    } else if (scaling == 2) {
        const float lo_wl = (float)((double)orig_ctx / low), hi_wl = (float)((double)orig_ctx / high);
        const float wl0 = 1.0f / inv, wavelen = wl0 * (float)6.283185307179586; /* (float)(2 * pi) */
        if (wavelen > lo_wl) {
            inv = inv / (float)factor;
        } else if (!(wavelen < hi_wl)) {
            const float r0 = 1.0f / wavelen, ratio = r0 * (float)orig_ctx, num = ratio - (float)low;
            const float s = num / (float)(high - low), oms = 1.0f - s, t0 = oms * inv;
            const float t = t0 / (float)factor, u = s * inv;
            inv = t + u;
        }
    }
    return inv;
}

/* The export. */
typedef const RadKernelLib *(*rad_kernels_fn)(void);

#define RAD_KERNEL_LIB(LIB, NAME, VERSION, DESC)                                                \
    RAD_EXPORT const RadKernelLib *rad_kernels(void) { return &(LIB); }                         \
    RAD_EXPORT const RadPluginInfo *rad_plugin_info(void) {                                      \
        static const RadPluginInfo info = {sizeof(RadPluginInfo), RAD_PLUGIN_KERNELS,             \
                                           RAD_ABI_MAJOR, RAD_ABI_MINOR, NAME, VERSION, DESC};    \
        return &info;                                                                            \
    }

#ifdef __cplusplus
}
#endif

#endif
