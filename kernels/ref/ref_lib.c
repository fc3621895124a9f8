/* ref_lib.c — libref, the CPU kernel library: its table, init/fini, ISA choice and threads.
 *
 * Every op of docs/OPS.md's vocabulary (the Llama family's, and the encoder ops of BERT and
 * EmbeddingGemma: ref_encoder.c), f32 activations, on any x86-64 (AVX2 + FMA
 * paths chosen at run time, portable C otherwise) or other CPU (portable C). kernels/README.md
 * describes the kernels, their variants and exactness, and the environment knobs:
 *   RAD_REF_ISA=generic|avx2|avx512   cap the instruction set (read at init; default: the best)
 *   RAD_REF_SPIN_US=N          how long idle pool threads spin before sleeping (default 1000)
 *   RAD_REF_TWO_ENDS=0         decode GEMMs on two threads in fixed halves, not from both ends */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "ref_common.h"

/* ---- ISA --------------------------------------------------------------------------------------- */

int ref_isa_detect(void) {
#if REF_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
            __builtin_cpu_supports("avx512vnni"))
            return REF_ISA_AVX512;
        return REF_ISA_AVX2;
    }
#endif
    return REF_ISA_GENERIC;
}

const char *ref_isa_name(int isa) { return isa >= REF_ISA_AVX512 ? "avx512" : isa >= REF_ISA_AVX2 ? "avx2" : "generic"; }

static int isa_from_env(void) {
    const int best = ref_isa_detect();
    const char *v = getenv("RAD_REF_ISA");
    if (!v || !*v) return best;
    if (strcmp(v, "generic") == 0) return REF_ISA_GENERIC;
    if (strcmp(v, "avx2") == 0) return best < REF_ISA_AVX2 ? best : REF_ISA_AVX2;
    if (strcmp(v, "avx512") == 0) return best < REF_ISA_AVX512 ? best : REF_ISA_AVX512;
    return best; /* unknown names: the default */
}

static _Atomic int g_isa_default = -1;

int ref_isa(const RadKernelArgs *a) {
    const RefState *s = a->lib_state;
    if (s) return s->isa;
    int isa = atomic_load_explicit(&g_isa_default, memory_order_relaxed);
    if (isa < 0) { /* no init: the CPU's best (every racing caller computes the same value) */
        isa = ref_isa_detect();
        atomic_store_explicit(&g_isa_default, isa, memory_order_relaxed);
    }
    return isa;
}

/* ---- threads ------------------------------------------------------------------------------------- */

int ref_threads(const RadKernelArgs *a, double work, double grain) {
    const RefState *s = a->lib_state;
    int max = s ? ref_pool_size(s->pool) : 1;
    if (a->n_threads > 0 && (int)a->n_threads < max) max = (int)a->n_threads;
    const double w = work / grain;
    if (!(w >= 2.0) || max <= 1) return 1;
    return w >= (double)max ? max : (int)w;
}

int ref_threads_tuned(const RadKernelArgs *a, double work, double grain) {
    const int64_t want = rad_knob_value(a, REF_KNOB_THREADS, 0);
    if (want <= 0) return ref_threads(a, work, grain);
    const RefState *s = a->lib_state;
    int max = s ? ref_pool_size(s->pool) : 1;
    if (a->n_threads > 0 && (int)a->n_threads < max) max = (int)a->n_threads;
    return want < max ? (int)want : max;
}

void ref_parallel(const RadKernelArgs *a, int nth, ref_task_fn fn, void *ctx) {
    const RefState *s = a->lib_state;
    if (nth <= 1) {
        fn(ctx, 0, 1);
    } else if (s && s->pool) {
        ref_pool_run(s->pool, nth, fn, ctx);
    } else {
        for (int t = 0; t < nth; t++) fn(ctx, t, nth);
    }
}

/* ---- init / fini ----------------------------------------------------------------------------------- */

static void ref_fini(void *state);

static int ref_init(const RadKernelLibConfig *cfg, void **state) {
    if (!state) return RAD_E_ARG;
    RefState *s = calloc(1, sizeof *s);
    if (!s) return RAD_E_NOMEM;
    uint32_t n_threads = 0;
    s->world_size = 1;
    if (cfg && cfg->struct_size >= offsetof(RadKernelLibConfig, n_threads) + sizeof cfg->n_threads) n_threads = cfg->n_threads;
    if (cfg && cfg->struct_size >= offsetof(RadKernelLibConfig, world_size) + sizeof cfg->world_size) {
        s->rank = cfg->rank;
        s->world_size = cfg->world_size ? cfg->world_size : 1;
    }
    if (s->world_size > 1) { /* a rank of several: it joins the communicator the root named */
        const int has_comm = cfg->struct_size >= offsetof(RadKernelLibConfig, comm) + sizeof cfg->comm && cfg->comm;
        int rc = has_comm ? ref_comm_join(cfg->comm, s->rank, s->world_size, &s->comm) : RAD_E_ARG;
        if (rc) {
            free(s);
            return rc;
        }
    }
    if (n_threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (uint32_t)n : 1;
    }
    s->isa = isa_from_env();
    const char *te = getenv("RAD_REF_TWO_ENDS");
    s->two_ends = !(te && strcmp(te, "0") == 0);
    pthread_mutex_t *mu = malloc(sizeof *mu);
    if (!mu || pthread_mutex_init(mu, NULL) != 0) {
        free(mu);
        free(s);
        return RAD_E_NOMEM;
    }
    s->rope_mu = mu;
    if (n_threads > 1) {
        s->pool = ref_pool_create((int)n_threads);
        if (!s->pool) {
            ref_fini(s);
            return RAD_E_NOMEM;
        }
    }
    *state = s;
    return RAD_OK;
}

static void ref_fini(void *state) {
    RefState *s = state;
    if (!s) return;
    ref_pool_destroy(s->pool);
    ref_comm_leave(s->comm);
    for (int i = 0; i < s->n_rope; i++) free(s->rope[i].inv);
    if (s->rope_mu) {
        pthread_mutex_destroy(s->rope_mu);
        free(s->rope_mu);
    }
    free(s);
}

/* ---- the table ------------------------------------------------------------------------------------ */

/* The knobs (docs/PLUGINS.md, "Knobs"; kernels/README.md): indices REF_KNOB_THREADS and
 * REF_KNOB_PREFETCH. threads: 0 (default) is the kernel's own rule (its work over a grain,
 * capped at the call's threads), N caps the call's split at N threads; a GEMM's outputs do not
 * depend on it (SAME_BITS), the attention's split of a row's keys does (ARITH, within its
 * 1e-5). prefetch: how far ahead (bytes) a decode GEMM prefetches its weights. */
static const int64_t threads_v[] = {0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64};
static const int64_t prefetch_v[] = {1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384};
#define KNOB_(NAME, V, EFF, DEF, NMAX) {sizeof(RadKnob), NAME, V, (uint32_t)(sizeof V / sizeof V[0]), EFF, DEF, NMAX}
static const RadKnob gemm_knobs[] = {
    KNOB_("threads", threads_v, RAD_KNOB_SAME_BITS, 0, 0),
    KNOB_("prefetch", prefetch_v, RAD_KNOB_SAME_BITS, REF_PF_BYTES, 1), /* only the one-row paths prefetch */
};
static const RadKnob attn_knobs[] = {KNOB_("threads", threads_v, RAD_KNOB_ARITH, 0, 0)};

#define K3_(OP, VAR, ENCS, EX, TOL, WS, RUN, KVB, KVENC, PACKED, KNOBS, NK) \
    {sizeof(RadKernel), OP, VAR, ENCS, RAD_F32, 1, 0, KVB, EX, TOL, 1, WS, RUN, KVENC, 0, PACKED, KNOBS, NK, 0}
#define K2_(...) K3_(__VA_ARGS__, NULL, 0)
#define K_(...) K2_(__VA_ARGS__, 0) /* BITWISE and TOL(t) expand to two arguments first */
/* bf16dot (ref_gemm_bf16.c): bf16 weights (f16 ones rounded to bf16), activations rounded to bf16:
 * docs/OPS.md's per-output bf16-product bound; 1e-2 its per-row figure without outliers */
#define KB_(OP, RUN) KG_(OP, "bf16dot", RAD_ENC_BIT(RAD_ENC_BF16) | RAD_ENC_BIT(RAD_ENC_F16), BF16P(1e-2), NULL, RUN, 0, 0)
/* q8tile (ref_gemm_tile.c): 16 rows or more; packed weights too (its tiles from the packed groups,
 * the same bits), so a model packs whichever bucket takes which. Not
 * batch-invariant as the engine needs it: its rows carry the portable dot's bits while fewer
 * rows of unpacked weights get q8act's AVX2 ones, so --deterministic keeps q8act. */
#define KT_(OP, RUN) \
    {sizeof(RadKernel), OP, "q8tile", REF_ENCS_Q8ACT, RAD_F32, REF_TILE_MIN_ROWS, 0, 0, Q8(2e-2), 0, NULL, RUN, 0, 0, REF_ENCS_PACKED, gemm_knobs, 2, 0}
#define KG_(...) K3_(__VA_ARGS__, 0, gemm_knobs, 2)               /* a GEMM with its knobs */
#define KP_(...) K3_(__VA_ARGS__, REF_ENCS_PACKED, gemm_knobs, 2) /* also reads packed weights (ref_gemm_x8.c) */
#define KA3_(OP, VAR, ENCS, EX, TOL, WS, RUN, KVB, KVENC) \
    {sizeof(RadKernel), OP, VAR, ENCS, RAD_F32, 1, 0, KVB, EX, TOL, 1, WS, RUN, KVENC, 0, 0, attn_knobs, 1, 1}
#define KA_(...) KA3_(__VA_ARGS__) /* the attention with its knob; it serves a sliding window (attn_window) */
#define BITWISE RAD_EXACT_BITWISE, 0.0
#define TOL(t) RAD_EXACT_TOLERANCE, (t)
#define Q8(t) RAD_EXACT_Q8ACT, (t) /* docs/OPS.md's per-output bound; t its per-row figure without outliers */
#define BF16P(t) RAD_EXACT_BF16ACT, (t) /* the same for bf16 products */
#define KV_ENCS (RAD_ENC_BIT(RAD_ENC_F32) | RAD_ENC_BIT(RAD_ENC_F16) | RAD_ENC_BIT(RAD_ENC_BF16))

static const RadKernel kernels[] = {
    K_("embed_gather", "generic", REF_ENCS_ALL, BITWISE, NULL, ref_run_embed_gather, 0, 0),
    K_("embed_gather_part", "generic", REF_ENCS_ALL, BITWISE, NULL, ref_run_embed_gather_part, 0, 0),
    /* simd before exact: rad-tune picks it in every bucket (5-7x faster a call, docs/BENCHMARKS.md);
     * a table naming ref:exact, or --max-tolerance under 1e-5, gets the bitwise one */
    K_("rmsnorm", "simd", RAD_ENC_PLAIN_FLOATS, TOL(1e-5), NULL, ref_run_rmsnorm_simd, 0, 0),
    K_("rmsnorm", "exact", RAD_ENC_PLAIN_FLOATS, BITWISE, NULL, ref_run_rmsnorm, 0, 0),
    K_("add_rmsnorm", "simd", RAD_ENC_PLAIN_FLOATS, TOL(1e-5), NULL, ref_run_add_rmsnorm_simd, 0, 0),
    K_("add_rmsnorm", "exact", RAD_ENC_PLAIN_FLOATS, BITWISE, NULL, ref_run_add_rmsnorm, 0, 0),
    /* q8act before exact: first fit gives GGML weights llama.cpp's arithmetic (and speed);
     * a tune table naming ref:exact, or plain-float weights, get exact */
    KT_("gemm_nt", ref_run_gemm_q8tile),
    KP_("gemm_nt", "q8act", REF_ENCS_Q8ACT, Q8(2e-2), NULL, ref_run_gemm_q8act, 0, 0),
    KB_("gemm_nt", ref_run_gemm_bf16),
    KG_("gemm_nt", "exact", REF_ENCS_ALL, TOL(1e-4), NULL, ref_run_gemm_exact, 0, 0),
    KG_("gemm_nt", "fp8", RAD_ENC_BIT(RAD_ENC_F8_E4M3), TOL(1e-4), NULL, ref_run_gemm_f8, 0, 0),
    KT_("gemm_nt2", ref_run_gemm_multi_q8tile),
    KP_("gemm_nt2", "q8act", REF_ENCS_Q8ACT, Q8(2e-2), NULL, ref_run_gemm_multi_q8act, 0, 0),
    KB_("gemm_nt2", ref_run_gemm_multi_bf16),
    KG_("gemm_nt2", "exact", REF_ENCS_ALL, TOL(1e-4), NULL, ref_run_gemm_multi_exact, 0, 0),
    KG_("gemm_nt2", "fp8", RAD_ENC_BIT(RAD_ENC_F8_E4M3), TOL(1e-4), NULL, ref_run_gemm_multi_f8, 0, 0),
    KT_("gemm_nt3", ref_run_gemm_multi_q8tile),
    KP_("gemm_nt3", "q8act", REF_ENCS_Q8ACT, Q8(2e-2), NULL, ref_run_gemm_multi_q8act, 0, 0),
    KB_("gemm_nt3", ref_run_gemm_multi_bf16),
    KG_("gemm_nt3", "exact", REF_ENCS_ALL, TOL(1e-4), NULL, ref_run_gemm_multi_exact, 0, 0),
    KG_("gemm_nt3", "fp8", RAD_ENC_BIT(RAD_ENC_F8_E4M3), TOL(1e-4), NULL, ref_run_gemm_multi_f8, 0, 0),
    KT_("logits_gemm", ref_run_gemm_q8tile),
    KP_("logits_gemm", "q8act", REF_ENCS_Q8ACT, Q8(2e-2), NULL, ref_run_gemm_q8act, 0, 0),
    KB_("logits_gemm", ref_run_gemm_bf16),
    KG_("logits_gemm", "exact", REF_ENCS_ALL, TOL(1e-4), NULL, ref_run_gemm_exact, 0, 0),
    KG_("logits_gemm", "fp8", RAD_ENC_BIT(RAD_ENC_F8_E4M3), TOL(1e-4), NULL, ref_run_gemm_f8, 0, 0),
    K_("rope", "generic", RAD_ENC_PLAIN_FLOATS, TOL(1e-5), ref_rope_workspace, ref_run_rope, 0, 0), /* weight: the optional freq_factors */
    KA_("attn_paged", "generic", 0, TOL(1e-5), NULL, ref_run_attn_paged, 16, KV_ENCS),
    K_("silu_mul", "generic", 0, TOL(1e-6), NULL, ref_run_silu_mul, 0, 0),
    K_("add", "generic", 0, BITWISE, NULL, ref_run_add, 0, 0),
    K_("add_bias", "generic", RAD_ENC_PLAIN_FLOATS, BITWISE, NULL, ref_run_add_bias, 0, 0),
    K_("scale", "generic", 0, BITWISE, NULL, ref_run_scale, 0, 0),
    K_("gelu_tanh_mul", "generic", 0, TOL(1e-6), NULL, ref_run_gelu_tanh_mul, 0, 0),
    K_("head_rmsnorm", "simd", RAD_ENC_PLAIN_FLOATS, TOL(1e-5), NULL, ref_run_head_rmsnorm_simd, 0, 0),
    K_("head_rmsnorm", "exact", RAD_ENC_PLAIN_FLOATS, BITWISE, NULL, ref_run_head_rmsnorm, 0, 0),
    /* arrival first: a lossy wire's messages (exact = 0) take it; exact = 1 only the bitwise one */
    K_("all_reduce", "arrival", 0, TOL(1e-5), NULL, ref_run_all_reduce_arrival, 0, 0),
    K_("all_reduce", "generic", 0, BITWISE, NULL, ref_run_all_reduce, 0, 0),
    K_("all_gather", "generic", 0, BITWISE, NULL, ref_run_all_gather, 0, 0),
    K_("logits_gather", "generic", 0, BITWISE, NULL, ref_run_logits_gather, 0, 0),
    K_("argmax", "generic", 0, BITWISE, NULL, ref_run_argmax, 0, 0),
    /* the encoder ops (ref_encoder.c): layernorm, pool and l2_normalize compute docs/OPS.md's
     * double-precision reference itself; gelu's erf is the C library's; attn_seq scores in f32 lanes, sums in double */
    K_("layernorm", "exact", RAD_ENC_PLAIN_FLOATS, BITWISE, NULL, ref_run_layernorm, 0, 0),
    K_("gelu", "generic", 0, TOL(1e-6), NULL, ref_run_gelu, 0, 0),
    K_("attn_seq", "generic", 0, TOL(1e-5), NULL, ref_run_attn_seq, 0, 0),
    K_("pool", "generic", 0, BITWISE, NULL, ref_run_pool, 0, 0),
    K_("l2_normalize", "generic", 0, BITWISE, NULL, ref_run_l2_normalize, 0, 0),
};

static const RadKernelLib lib = {sizeof(RadKernelLib), RAD_DEVICE_CPU, kernels, (uint32_t)(sizeof kernels / sizeof kernels[0]),
                                 ref_init, ref_fini, NULL, NULL, NULL, NULL, ref_pack_size, ref_pack,
                                 ref_comm_id, ref_comm_abort, NULL, NULL, NULL};

RAD_KERNEL_LIB(lib, "ref", "0.1.0", "libref: CPU kernels for the docs/OPS.md vocabulary, decoders and encoders (AVX2+FMA or portable C, pthreads)")
