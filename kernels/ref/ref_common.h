/* ref_common.h — what every libref kernel file shares: the library state, the ISA choice,
 * parameter look-up, operand checks, and the parallel-for.
 *
 * libref includes only abi/ and the C library, pthreads and <immintrin.h>. SIMD code lives in
 * functions marked REF_AVX2 (target("avx2,fma,f16c")), so the library builds with plain -O2 and
 * runs anywhere: a kernel picks its path from ref_isa(a) at run time. */
#ifndef REF_COMMON_H
#define REF_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "abi/rad_kernels.h"
#include "ref_pool.h"

#if defined(__x86_64__) && !defined(REF_NO_SIMD) /* -DREF_NO_SIMD: the portable build, as on other CPUs */
#define REF_X86 1
#include <immintrin.h>
#define REF_AVX2 __attribute__((target("avx2,fma,f16c")))
#else
#define REF_X86 0
#endif

#define REF_INLINE static inline __attribute__((always_inline))

/* Instruction-set levels, lowest first. RAD_REF_ISA=generic|avx2|avx512 (read at init) caps
 * the level; the default is the best the CPU supports. avx512 is AVX2 plus AVX-512 F, BW, VL and
 * VNNI: only the q8tile GEMMs (ref_gemm_tile.c) use it; every other kernel runs its AVX2 code. */
typedef enum RefIsa { REF_ISA_GENERIC = 0, REF_ISA_AVX2 = 1, REF_ISA_AVX512 = 2 } RefIsa;

int ref_isa_detect(void);          /* the best level this CPU supports */
const char *ref_isa_name(int isa);

/* rope's frequency tables, kept per parameter set (docs/OPS.md: computed on the host, once). */
#define REF_ROPE_CACHE 16
typedef struct RefRopeEntry {
    int64_t n_rot, scaling, orig_ctx;
    double theta, factor, low, high;
    float *inv; /* [n_rot / 2] */
} RefRopeEntry;

typedef struct RefComm RefComm;

typedef struct RefState {
    RefPool *pool;
    int isa;
    int two_ends;                  /* decode GEMMs on two threads from both ends (RAD_REF_TWO_ENDS) */
    uint32_t rank, world_size;
    RefComm *comm;                 /* world_size > 1: the ranks' communicator (ref_comm.c) */
    void *rope_mu;                 /* pthread_mutex_t *, guards rope[] */
    RefRopeEntry rope[REF_ROPE_CACHE];
    int n_rope;
} RefState;

/* The ISA for this call: the state's, or the CPU's best when the library was not initialised. */
int ref_isa(const RadKernelArgs *a);
/* Threads for a job of `work` units where one thread should get at least `grain` of them:
 * min(RadKernelArgs::n_threads (0: all), the pool, work / grain), at least 1. */
int ref_threads(const RadKernelArgs *a, double work, double grain);
/* The same, unless the call's "threads" knob (knob REF_KNOB_THREADS of the kernels that list it)
 * is set: then that many, capped as ref_threads caps. Knob 0 (the default) is ref_threads. */
int ref_threads_tuned(const RadKernelArgs *a, double work, double grain);
/* libref's knobs, by index in the kernels' lists (ref_lib.c): the GEMMs have both, the
 * attention the first. */
#define REF_KNOB_THREADS 0
#define REF_KNOB_PREFETCH 1
#define REF_FEW_ROWS 8 /* GEMM rows up to this stream the weights as decode does (a verify row, a few decode rows) */
#define REF_PF_BYTES 6144 /* the prefetch knob's default: decode reads weights about this far ahead */
/* fn(ctx, part, nth) once for each part < nth, on the library's pool (serially without one). A
 * part may run on any thread: per-thread scratch is the thread's, anything shared is indexed by
 * part. */
void ref_parallel(const RadKernelArgs *a, int nth, ref_task_fn fn, void *ctx);

/* [begin, end) of part `tid` of `n` items split into `nth` contiguous parts, rounded to
 * multiples of `align` (the last part takes the remainder). */
static inline void ref_split(int64_t n, int tid, int nth, int64_t align, int64_t *begin, int64_t *end) {
    int64_t units = (n + align - 1) / align;
    int64_t b = units * tid / nth, e = units * (tid + 1) / nth;
    *begin = b * align < n ? b * align : n;
    *end = e * align < n ? e * align : n;
}

/* ---- parameters, by name (docs/OPS.md) -------------------------------------------------------- */

static inline const RadParam *ref_param(const RadKernelArgs *a, const char *name) {
    if (!a->params) return NULL;
    for (uint32_t i = 0; i < a->n_params; i++)
        if (a->params[i].name && strcmp(a->params[i].name, name) == 0) return &a->params[i];
    return NULL;
}
static inline int ref_pint(const RadKernelArgs *a, const char *name, int64_t *v) {
    const RadParam *p = ref_param(a, name);
    if (!p || p->kind != RAD_PARAM_INT) return 0;
    *v = p->lo;
    return 1;
}
static inline int ref_pflt(const RadKernelArgs *a, const char *name, double *v) {
    const RadParam *p = ref_param(a, name);
    if (!p || p->kind != RAD_PARAM_FLOAT) return 0;
    *v = p->f;
    return 1;
}

/* ---- operands --------------------------------------------------------------------------------- */

/* The checks every run starts with: a struct it can read, zero rows (RAD_E_SHAPE: not a call),
 * and the operand count. */
static inline int ref_preamble(const RadKernelArgs *a, uint32_t n_args) {
    if (!a || a->struct_size < offsetof(RadKernelArgs, deterministic) + sizeof a->deterministic) return RAD_E_ARG;
    if (a->n <= 0) return RAD_E_SHAPE;
    if (a->n_args != n_args || !a->args) return RAD_E_SHAPE;
    return RAD_OK;
}

/* An f32 buffer with at least `rows` rows of exactly `cols` columns. */
static inline int ref_buf_ok(const RadKArg *b, uint64_t rows, uint64_t cols) {
    return b->data && b->dtype == RAD_F32 && b->rows >= rows && b->cols == cols && b->row_stride >= cols;
}
/* A raw i32 operand of at least n elements. */
static inline int ref_raw_i32_ok(const RadKArg *b, uint64_t n) {
    return b->data && b->dtype == RAD_I32 && b->rows >= n && b->cols == 1;
}
static inline float *ref_frow(const RadKArg *b, uint64_t r) { return (float *)b->data + r * b->row_stride; }

/* Bytes of one row of `cols` elements of encoding e; 0 when e is not one libref reads or cols
 * is not a whole number of its blocks. */
static inline uint64_t ref_row_bytes(RadDType e, uint64_t cols) {
    const RadEncInfo *ei = rad_enc_info((RadEnc)e);
    if (!ei || cols == 0 || cols % ei->block_elems) return 0;
    return cols / ei->block_elems * ei->block_bytes;
}
/* In a kernel's `encs`: it also reads libref's packed layouts (ref_gemm_x8.c; RAD_PACKED). */
#define REF_TAKES_PACKED ((uint64_t)1 << 63)
/* The encodings libref packs at load (RadKernelLib.pack): the 32-element block formats
 * (ref_gemm_x8.c) and q4_k (ref_gemm_x8k.c). */
#define REF_ENCS_PACKED (RAD_ENC_BIT(RAD_ENC_Q4_0) | RAD_ENC_BIT(RAD_ENC_Q4_1) | RAD_ENC_BIT(RAD_ENC_Q5_0) | \
                         RAD_ENC_BIT(RAD_ENC_Q5_1) | RAD_ENC_BIT(RAD_ENC_Q8_0) | RAD_ENC_BIT(RAD_ENC_Q4_K))
size_t ref_pack_size(void *state, RadDType enc, uint64_t rows, uint64_t cols);
int ref_pack(void *state, RadDType enc, uint64_t rows, uint64_t cols, const void *src, uint64_t src_row_stride, void *dst);
/* A weight [rows, cols] in an encoding of `encs`, rows whole blocks apart; packed (dtype |
 * RAD_PACKED) only for a kernel taking it, with the rows ref_pack wrote. */
static inline int ref_weight_ok(const RadKArg *w, uint64_t encs, uint64_t rows, uint64_t cols) {
    if (w->dtype & RAD_PACKED) {
        const RadDType base = (RadDType)(w->dtype & ~RAD_PACKED);
        return w->data && (encs & REF_TAKES_PACKED) && (REF_ENCS_PACKED & RAD_ENC_BIT(base)) && w->rows == rows &&
               w->cols == cols && ref_pack_size(NULL, base, rows, cols) && w->row_stride == ref_row_bytes(base, cols);
    }
    if (!w->data || (unsigned)w->dtype >= 64 || !(encs & RAD_ENC_BIT(w->dtype))) return 0;
    if (w->rows != rows || w->cols != cols) return 0;
    uint64_t rb = ref_row_bytes(w->dtype, cols);
    return rb && (rows <= 1 || w->row_stride >= rb);
}
static inline const uint8_t *ref_wrow(const RadKArg *w, uint64_t r) {
    return (const uint8_t *)w->data + r * w->row_stride;
}

/* The encodings libref decodes (every RAD_ENC_PLAIN_FLOATS and GGML block encoding). */
#define REF_ENCS_ALL (RAD_ENC_PLAIN_FLOATS | RAD_ENC_GGML_BLOCKS)
/* The encodings with an integer dot product against q8 activations. */
#define REF_ENCS_Q8ACT (RAD_ENC_BIT(RAD_ENC_Q8_0) | RAD_ENC_BIT(RAD_ENC_Q4_0) | RAD_ENC_BIT(RAD_ENC_Q4_1) | \
                        RAD_ENC_BIT(RAD_ENC_Q5_0) | RAD_ENC_BIT(RAD_ENC_Q5_1) | RAD_ENC_BIT(RAD_ENC_Q4_K) | \
                        RAD_ENC_BIT(RAD_ENC_Q5_K) | RAD_ENC_BIT(RAD_ENC_Q6_K))

/* ---- SIMD helpers ------------------------------------------------------------------------------ */
#if REF_X86
/* The one horizontal sum every dot product of the library ends with (a fixed tree, so a dot
 * computed by any kernel shape gives the same bits): hi half onto lo, then 2+2, then 1+1. */
REF_AVX2 REF_INLINE float ref_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55));
    return _mm_cvtss_f32(s);
}
/* 32 bits -> 32 bytes, byte i 0xff where bit i is set (byte i takes byte i / 8 of v, then every
 * bit but bit i % 8 is set). */
REF_AVX2 REF_INLINE __m256i ref_bits32(uint32_t v) {
    const __m256i shuf = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
    const __m256i r = _mm256_or_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)v), shuf), _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(r, _mm256_set1_epi64x(-1));
}
/* Lanes [0, n) of p (n < 8), the rest 0. */
REF_AVX2 REF_INLINE __m256 ref_load_tail(const float *p, int n) {
    static const int32_t m[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_maskload_ps(p, _mm256_loadu_si256((const __m256i *)(const void *)(m + 8 - n)));
}
REF_AVX2 REF_INLINE void ref_store_tail(float *p, __m256 v, int n) {
    static const int32_t m[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    _mm256_maskstore_ps(p, _mm256_loadu_si256((const __m256i *)(const void *)(m + 8 - n)), v);
}
#endif

/* ---- kernels (one file per family) -------------------------------------------------------------- */

int ref_run_gemm_exact(const RadKernelArgs *a);
int ref_run_gemm_q8act(const RadKernelArgs *a);
int ref_run_gemm_multi_exact(const RadKernelArgs *a); /* gemm_nt2, gemm_nt3 */
int ref_run_gemm_f8(const RadKernelArgs *a);          /* block-scaled f8_e4m3 weights (ref_gemm_f8.c) */
int ref_run_gemm_multi_f8(const RadKernelArgs *a);
int ref_run_gemm_multi_q8act(const RadKernelArgs *a);
int ref_run_gemm_q8tile(const RadKernelArgs *a);
int ref_run_gemm_bf16(const RadKernelArgs *a);
int ref_run_gemm_multi_bf16(const RadKernelArgs *a);
#define REF_TILE_MIN_ROWS 16 /* q8tile's n_min: below it a tile's unpacking is not paid back */
int ref_run_gemm_multi_q8tile(const RadKernelArgs *a);
int ref_run_rmsnorm(const RadKernelArgs *a);
int ref_run_rmsnorm_simd(const RadKernelArgs *a);
int ref_run_add_rmsnorm(const RadKernelArgs *a);
int ref_run_add_rmsnorm_simd(const RadKernelArgs *a);
int ref_run_rope(const RadKernelArgs *a);
size_t ref_rope_workspace(const RadParam *p, uint32_t np, int64_t n_max);
int ref_run_attn_paged(const RadKernelArgs *a);
int ref_run_embed_gather(const RadKernelArgs *a);
int ref_run_embed_gather_part(const RadKernelArgs *a);
int ref_run_logits_gather(const RadKernelArgs *a);
int ref_run_argmax(const RadKernelArgs *a);
int ref_run_add(const RadKernelArgs *a);
int ref_run_add_bias(const RadKernelArgs *a);
int ref_run_scale(const RadKernelArgs *a);
int ref_run_gelu_tanh_mul(const RadKernelArgs *a);
int ref_run_head_rmsnorm(const RadKernelArgs *a);
int ref_run_head_rmsnorm_simd(const RadKernelArgs *a);
int ref_run_silu_mul(const RadKernelArgs *a);
int ref_run_all_reduce(const RadKernelArgs *a);
int ref_run_all_gather(const RadKernelArgs *a);
int ref_run_all_reduce_arrival(const RadKernelArgs *a);
/* ref_comm.c: collectives between ranks that are threads of this process */
int ref_comm_id(uint32_t world_size, RadCommId *id);
int ref_comm_join(const void *comm, uint32_t rank, uint32_t world, RefComm **out); /* RAD_OK or RAD_E_ARG/NOMEM */
void ref_comm_leave(RefComm *c);
void ref_comm_abort(void *state, int on);
/* the encoder ops (ref_encoder.c) */
int ref_run_layernorm(const RadKernelArgs *a);
int ref_run_gelu(const RadKernelArgs *a);
int ref_run_attn_seq(const RadKernelArgs *a);
int ref_run_pool(const RadKernelArgs *a);
int ref_run_l2_normalize(const RadKernelArgs *a);

/* Decodes one row of `cols` elements of encoding e (ref_row_bytes(e, cols) bytes) into dst,
 * bit-identical to libcommon's rad_dequant, with the ISA's path (ref_dequant.c). */
void ref_dequant_row(int isa, RadDType e, const uint8_t *src, float *dst, uint64_t cols);
/* A rank-1 float weight (a norm's gamma, a bias) as n f32 values: its own bytes when stored f32,
 * else widened exactly into scratch slot 2 (rmsnorm, head_rmsnorm, add_bias). NULL: out of memory. */
static inline const float *ref_weight_f32(int isa, const RadKArg *w, uint64_t n) {
    if (w->dtype == RAD_F32) return w->data;
    float *f = ref_scratch(2, (size_t)n * sizeof(float));
    if (f) ref_dequant_row(isa, w->dtype, w->data, f, n);
    return f;
}
/* Elements [k0, k0 + n) of a row (k0 and n whole blocks). */
void ref_dequant_range(int isa, RadDType e, const uint8_t *row, int64_t k0, int64_t n, float *dst);

#endif
