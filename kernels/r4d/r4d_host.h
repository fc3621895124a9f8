/* r4d_host.h — libr4d's host-side logic, in C11: what the CUDA library decides on the CPU
 * (buckets, plans, keys, layouts, the step's staged image). It has no CUDA in it, so the build
 * machine's unit tests (tests/kernels/r4d_host_test.c) check it without a GPU; the library
 * compiles the same file into kern_r4d.so. */
#ifndef R4D_HOST_H
#define R4D_HOST_H

#include <stddef.h>
#include <stdint.h>

#include "abi/rad_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- parameters, by name (docs/OPS.md) ---------------------------------------------------- */
const RadParam *r4d_param(const RadKernelArgs *a, const char *name);
int r4d_pint(const RadKernelArgs *a, const char *name, int64_t *v);   /* 1 when found, an INT */
int r4d_pflt(const RadKernelArgs *a, const char *name, double *v);    /* 1 when found, a FLOAT */
/* The checks every run starts with: a struct it can read, zero rows (RAD_E_SHAPE), the count. */
int r4d_preamble(const RadKernelArgs *a, uint32_t n_args);
/* An f32 buffer with at least `rows` rows of exactly `cols` columns. */
int r4d_buf_ok(const RadKArg *b, uint64_t rows, uint64_t cols);
/* A raw i32 operand of at least n elements, with its host copy (planes[1]; docs/PLUGINS.md,
 * "Device memory": a device library reads raw values on the host to refuse bad ones before it
 * launches anything). */
int r4d_raw_ok(const RadKArg *b, uint64_t n);
static inline const int32_t *r4d_raw_host(const RadKArg *b) { return (const int32_t *)b->planes[1]; }
/* Bytes of a row of `cols` elements of encoding e; 0 if e is not one r4d reads or cols is not
 * a whole number of its blocks. */
uint64_t r4d_row_bytes(RadDType e, uint64_t cols);
/* What r4d's GEMMs read: plain floats, GGML blocks, and block-scaled f8_e4m3 (codes in the weight's
 * rows, its scale plane in planes[1]: abi/rad_types.h). */
#define R4D_GEMM_ENCS (RAD_ENC_PLAIN_FLOATS | RAD_ENC_GGML_BLOCKS | RAD_ENC_BIT(RAD_ENC_F8_E4M3))
/* An f8 weight's scale plane (NULL: one plane, the codes alone). A weight sliced by rows or
 * columns (not whole [N, K] rows) has no block grid to index: refused by r4d_weight_ok's callers
 * through r4d_f8_whole. */
static inline const float *r4d_f8_scale(const RadKArg *w) { return w->dtype == RAD_F8_E4M3 ? (const float *)w->planes[1] : NULL; }
static inline int r4d_f8_whole(const RadKArg *w) { return !r4d_f8_scale(w) || w->row_stride == w->cols; }
/* A weight [rows, cols] in one of `encs` (stored), or r4d's packed bf16 layout of a plain
 * float (dtype | RAD_PACKED) where packed_ok. */
int r4d_weight_ok(const RadKArg *w, uint64_t encs, int packed_ok, uint64_t rows, uint64_t cols);

/* ---- packed weights ------------------------------------------------------------------------ */
/* Load-time layout of a plain-float weight for the bf16 GEMMs: every element rounded to bf16,
 * rows contiguous (cols · 2 bytes). enc is f32, f16 or bf16 (bf16 is copied). */
size_t r4d_pack_bf16_size(RadDType enc, uint64_t rows, uint64_t cols);
int r4d_pack_bf16(RadDType enc, uint64_t rows, uint64_t cols, const void *src, uint64_t src_row_stride, uint16_t *dst);

/* ---- GEMM plans ------------------------------------------------------------------------------ */
/* The M bucket a GEMM shape is planned (and its cuBLASLt algorithm cached) for: the next power
 * of two, from 1 to R4D_M_BUCKET_MAX; beyond, multiples of it. */
#define R4D_M_BUCKET_MAX 4096
int64_t r4d_m_bucket(int64_t m);
/* Rows of W dequantised per slab by the dequantise-then-GEMM path: a multiple of 128 whose
 * slab of `elem` bytes an element fits in `cap` bytes (at least 128 rows, at most n rounded up). */
int64_t r4d_slab_rows(int64_t n, int64_t k, size_t elem, size_t cap);
#define R4D_SLAB_BYTES ((size_t)64 << 20)
#define R4D_LT_WORKSPACE ((size_t)32 << 20) /* cuBLASLt's workspace on Hopper */
/* The most rows the GEMV kernels take in one launch (each weight byte read once for all of them). */
#define R4D_GEMV_MAX_ROWS 8

/* A cache of per-shape plans (cuBLASLt's chosen algorithm and layouts), keyed by what decides
 * them. Open addressing, fixed capacity; a full cache evicts nothing and says so (the caller
 * plans again every call: slower, never wrong). */
typedef struct R4dGemmKey {
    int64_t m_bucket, n, k;       /* the planned M bucket, N, K */
    int32_t a_type, b_type;       /* cudaDataType of W and x as given to cuBLASLt */
    int32_t c_type, compute;      /* of y; cublasComputeType_t */
} R4dGemmKey;
#define R4D_PLAN_CAP 256
typedef struct R4dPlanCache {
    R4dGemmKey key[R4D_PLAN_CAP];
    uint8_t used[R4D_PLAN_CAP];
    void *val[R4D_PLAN_CAP];      /* the library's plan (owned by the caller) */
    int n;
} R4dPlanCache;
uint64_t r4d_gemm_key_hash(const R4dGemmKey *k);
void *r4d_plan_find(const R4dPlanCache *c, const R4dGemmKey *k);
/* Inserts (k, v); 0 on success, -1 when full or k is present. */
int r4d_plan_put(R4dPlanCache *c, const R4dGemmKey *k, void *v);

/* ---- decode graphs --------------------------------------------------------------------------- */
/* A step's graph key: its phase and shape. Decode steps of one key issue the same launches with
 * the same pointers (the arena, the staged step image), so one capture replays for all of them. */
typedef struct R4dGraphKey {
    int32_t phase;                /* RadPhase */
    uint32_t n_tok, n_seq, n_out; /* the step's shape */
    uint32_t splits;              /* the attention's split count (fixed per graph) */
} R4dGraphKey;
int r4d_graph_key(const RadBatch *b, uint32_t splits, R4dGraphKey *out); /* 1: capturable (decode) */
int r4d_graph_key_eq(const R4dGraphKey *a, const R4dGraphKey *b);

/* ---- attention plan --------------------------------------------------------------------------- */
/* Split-K over a decode row's keys (flash-decoding): enough (row, kv head, split) blocks to fill
 * the device, no split under R4D_SPLIT_MIN_KEYS keys, at most R4D_SPLIT_MAX splits. */
#define R4D_SPLIT_MIN_KEYS 256
#define R4D_SPLIT_MAX 32
uint32_t r4d_attn_splits(uint32_t n_rows, uint32_t n_head_kv, uint32_t max_keys, uint32_t n_sm);

/* ---- the prefill attention's plan ----------------------------------------------------------- */
/* The tensor-core kernel (r4d_attn.cu, "flash") takes tiles of R4D_FLASH_SLOTS (row, query head)
 * slots: r4d_flash_rows(G) consecutive rows of one sequence, each with its KV head's G query heads
 * (so K and V are read once for the group). A sequence with fewer than R4D_FLASH_MIN_Q rows in the
 * step (a decode row) takes the split-K kernel instead. */
#define R4D_FLASH_SLOTS 64
#define R4D_FLASH_MIN_Q 16
typedef struct R4dFlashTile {
    int32_t seq;                  /* the sequence */
    int32_t t0, n_rows;           /* its rows t0 .. t0 + n_rows - 1 of the step */
    int32_t reserved;             /* 0 (16 bytes a tile) */
} R4dFlashTile;
/* Rows a tile holds for G query heads per KV head; 0 when one row's heads do not fit. */
uint32_t r4d_flash_rows(uint32_t G);

/* ---- the step image ---------------------------------------------------------------------------- */
/* What the attention kernels read of a step, laid out in one device buffer by the host: for every
 * row t, its sequence and its slot j_t (docs/OPS.md, attn_paged), the window's first slot, and
 * the group's block table; with tile_rows > 0 also the prefill plan: the tiles and the rows left
 * to the split-K kernel. Built in pinned memory and uploaded once per (step, KV group, plan). */
typedef struct R4dStepImage {
    int32_t *row_seq;             /* [n_tok] sequence of row t */
    int32_t *row_slot;            /* [n_tok] j_t */
    int32_t *row_lo;              /* [n_tok] the first slot row t sees (window) */
    int32_t *table;               /* [n_seq][max_blocks] the group's block table */
    R4dFlashTile *tiles;          /* [n_tiles] (tile_rows > 0; else NULL) */
    int32_t *rest;                /* [n_rest] rows no tile holds, in order (tile_rows > 0; else NULL: every row) */
    uint32_t n_tok, n_seq, max_blocks;
    uint32_t n_tiles, n_rest;
    size_t bytes;                 /* of the whole image */
} R4dStepImage;
/* Bytes an image for this step needs. */
size_t r4d_step_image_bytes(const RadBatch *b, const RadKvState *kv, uint32_t tile_rows);
/* Lays the image out in buf (bytes long, 16-byte aligned) and fills it; checks what the kernels
 * rely on first: cu_seqlens cover [0, n_tok) in order, each sequence's q_len ≤ ctx_len, and every
 * table entry a row reads in [0, kv->n_blocks) (entries before a window's first slot may be -1).
 * RAD_OK, or RAD_E_ARG / RAD_E_SHAPE with nothing relied on. */
int r4d_step_image_fill(const RadBatch *b, const RadKvState *kv, int64_t window, uint32_t tile_rows, void *buf, size_t bytes,
                        R4dStepImage *img);

/* ---- rope --------------------------------------------------------------------------------------- */
/* inv_freq[0 .. n_rot/2) by docs/OPS.md's sequence of f32 operations (computed on the host: a
 * device powf drifts at long positions). RAD_E_ARG on parameters OPS.md refuses. */
typedef struct R4dRope {
    int64_t n_head, head_dim, n_rot, scaling, orig_ctx;
    double theta, factor, low, high;
} R4dRope;
int r4d_rope_cfg(const RadKernelArgs *a, R4dRope *c);
void r4d_rope_table(const R4dRope *c, float *inv);

#ifdef __cplusplus
}
#endif

#endif
