/* ref_test.c — libref (kernels/ref), the CPU kernel library, through its ABI.
 *
 * $RAD_BUILD/plugins/kern_ref.so (RAD_BUILD defaults to "build") is dlopened the way the core
 * loads plugins and initialised four times: the best ISA of this CPU and the portable C path
 * (RAD_REF_ISA=generic, read at init), each with 1 and 3 threads. Every kernel is run on random
 * inputs in each state and compared with docs/OPS.md's definition written here, with libcommon's
 * rad_dequant decoding the weights: bit for bit where the kernel says RAD_EXACT_BITWISE, within
 * its stated tolerance (RadExactness's per-row measure) otherwise, and, for the q8-activation
 * GEMM, also within OPS.md's per-output bound. The variants whose order is fixed give the same
 * bits at 1 and 3 threads, and a row's result does not depend on the other rows of the call.
 *
 * Shapes are random-ish and small (odd M and N, M = 1, N not a multiple of 8 or 4, K a multiple
 * of 256 for the K-quants), large enough in places for the library to split work across threads. */
#include <pthread.h>
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abi/rad_kernels.h"
#include "libcommon/runtime/rad_sampler.h"
#include "libcommon/tensor/rad_enc.h"
#include "libcommon/tensor/rad_encode.h"
#include "tests/test_util.h"

/* ---- the library, four states ------------------------------------------------------------------- */

enum { ST_BEST3, ST_BEST1, ST_GEN3, ST_GEN1, N_ST };
static const char *st_name[N_ST] = {"best/3 threads", "best/1 thread", "generic/3 threads", "generic/1 thread"};

static void *g_dl;
static const RadKernelLib *g_lib;
static const RadPluginInfo *g_info;
static void *g_st[N_ST];

static void *init_state(const char *isa, uint32_t threads, uint32_t world) {
    if (isa) setenv("RAD_REF_ISA", isa, 1);
    else unsetenv("RAD_REF_ISA");
    void *st = NULL;
    RadKernelLibConfig cfg = {sizeof cfg, threads, 0, 0, world, NULL};
    cr_assert_eq(g_lib->init(&cfg, &st), RAD_OK);
    unsetenv("RAD_REF_ISA");
    return st;
}

static void load_lib(void) {
    const char *b = getenv("RAD_BUILD");
    char path[512];
    snprintf(path, sizeof path, "%s/plugins/kern_ref.so", b && *b ? b : "build");
    g_dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    cr_assert(g_dl, "%s: cannot load: %s (make test-unit builds it)", path, dlerror());
    rad_plugin_info_fn info;
    rad_kernels_fn kern;
    void *p = dlsym(g_dl, "rad_plugin_info");
    memcpy(&info, &p, sizeof p);
    p = dlsym(g_dl, "rad_kernels");
    memcpy(&kern, &p, sizeof p);
    cr_assert(info && kern, "%s: rad_plugin_info or rad_kernels not exported", path);
    g_info = info();
    g_lib = kern();
    cr_assert(g_info && g_lib && g_lib->init && g_lib->fini);
    g_st[ST_BEST3] = init_state(NULL, 3, 1);
    g_st[ST_BEST1] = init_state(NULL, 1, 1);
    g_st[ST_GEN3] = init_state("generic", 3, 1);
    g_st[ST_GEN1] = init_state("generic", 1, 1);
}

static void unload_lib(void) {
    for (int s = 0; s < N_ST; s++)
        if (g_st[s]) g_lib->fini(g_st[s]);
    memset(g_st, 0, sizeof g_st);
    if (g_dl) dlclose(g_dl);
    g_dl = NULL;
    g_lib = NULL;
}

TestSuite(ref, .init = load_lib, .fini = unload_lib);

static const RadKernel *find(const char *op, const char *variant) {
    for (uint32_t i = 0; i < g_lib->n_kernels; i++) {
        const RadKernel *k = rad_kernel_at(g_lib, i);
        if (strcmp(k->op, op) == 0 && (!variant || strcmp(k->variant, variant) == 0)) return k;
    }
    cr_assert_fail("libref has no kernel %s/%s", op, variant ? variant : "*");
    return NULL;
}

/* ---- operands and calls ------------------------------------------------------------------------- */

static RadKArg fbuf_s(float *p, uint64_t rows, uint64_t cols, uint64_t stride) {
    RadKArg a = {p, RAD_F32, rows, cols, stride, {NULL}};
    return a;
}
static RadKArg fbuf(float *p, uint64_t rows, uint64_t cols) { return fbuf_s(p, rows, cols, cols); }
static RadKArg raw_i32(const int32_t *p, uint64_t n) {
    RadKArg a = {(void *)p, RAD_I32, n, 1, 1, {NULL}};
    return a;
}
static uint64_t row_bytes(RadDType t, uint64_t cols) {
    const RadEncInfo *ei = rad_enc_info((RadEnc)(t & ~RAD_PACKED)); /* packed: the stored layout's row bytes */
    return cols / ei->block_elems * ei->block_bytes;
}
static RadKArg weight(const void *p, RadDType t, uint64_t rows, uint64_t cols) {
    RadKArg a = {(void *)p, t, rows, cols, row_bytes(t, cols), {p, NULL, NULL, NULL}};
    return a;
}

typedef struct Call {
    const struct RadBatch *batch;
    const RadKvState *kv;
    uint32_t n_threads;
} Call;

static int call_x(const RadKernel *k, void *st, const RadParam *p, uint32_t np, int64_t n, const RadKArg *args, uint32_t na,
                  const Call *c) {
    RadParam prm[16];
    cr_assert(np <= 16);
    memcpy(prm, p, np * sizeof *p);
    for (uint32_t i = 0; i < np; i++) /* the ranged parameter arrives set to n */
        if (prm[i].kind == RAD_PARAM_RANGE) prm[i].lo = prm[i].hi = n;
    size_t ws = k->workspace ? k->workspace(prm, np, n) : 0;
    void *w = ws ? aligned_alloc(256, (ws + 255) / 256 * 256) : NULL;
    RadKernelArgs a = {sizeof a, prm, np, n, args, na, c ? c->batch : NULL, c ? c->kv : NULL, w, st,
                       c && c->n_threads ? c->n_threads : 0, 1, NULL, 0};
    int rc = k->run(&a);
    free(w);
    return rc;
}
static int call(const RadKernel *k, void *st, const RadParam *p, uint32_t np, int64_t n, const RadKArg *args, uint32_t na) {
    return call_x(k, st, p, np, n, args, na, NULL);
}

/* ---- data ------------------------------------------------------------------------------------------ */

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 0x2545f4914f6cdd1dull;
}
static float frand(void) { return (float)((double)(rnd() >> 11) / 9007199254740992.0 * 2.0 - 1.0); }
static void fill(float *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = frand();
}
static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    cr_assert(p);
    return p;
}

/* A finite f16 of either sign with magnitude in [2^-14 .. 2^1), or a subnormal now and then. */
static uint16_t rand_f16_scale(void) {
    uint64_t r = rnd();
    uint16_t e = (uint16_t)(r % 16 == 0 ? 0 : 1 + (r >> 4) % 16);
    return (uint16_t)(((r >> 9) & 1) << 15 | e << 10 | ((r >> 10) & 0x3ff));
}

static const RadDType ALL_ENCS[] = {RAD_F32, RAD_F16, RAD_BF16, RAD_Q8_0, RAD_Q4_0, RAD_Q4_1,
                                    RAD_Q5_0, RAD_Q5_1, RAD_Q4_K, RAD_Q5_K, RAD_Q6_K};
static const RadDType Q8ACT_ENCS[] = {RAD_Q8_0, RAD_Q4_0, RAD_Q4_1, RAD_Q5_0, RAD_Q5_1, RAD_Q4_K, RAD_Q5_K, RAD_Q6_K};
#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static uint16_t f16_of(double v) { return rad_f32_to_f16((float)v); }
static double urand(double lo, double hi) { return lo + (hi - lo) * (frand() + 1.0) / 2.0; }

/* q4_k/q5_k: eight 6-bit scales and mins into the 12 scale bytes (the inverse of GGML's
 * get_scale_min_k4). */
static void pack_k4_scales(uint8_t *q, const uint8_t sc[8], const uint8_t mn[8]) {
    for (int j = 0; j < 4; j++) {
        q[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        q[j + 4] = (uint8_t)((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
        q[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
    }
}

/* Blocks shaped like a quantiser's output: one scale for the tensor give or take 50%, offsets
 * that centre the codes (q4_1's m near -8d, q4_k's mins near 7.5 scales), so no block outweighs
 * the others by orders of magnitude. */
static void realistic_blocks(RadDType t, uint8_t *w, uint64_t nblocks) {
    const RadEncInfo *ei = rad_enc_info((RadEnc)t);
    for (uint64_t b = 0; b < nblocks; b++) {
        uint8_t *blk = w + b * ei->block_bytes;
        const double d = urand(0.5, 1.5) / 64.0;
        uint16_t h;
        switch ((int)t) {
        case RAD_Q8_0: h = f16_of(d / 16), memcpy(blk, &h, 2); break;
        case RAD_Q4_0: case RAD_Q5_0: h = f16_of(d), memcpy(blk, &h, 2); break;
        case RAD_Q4_1: case RAD_Q5_1:
            h = f16_of(d), memcpy(blk, &h, 2);
            h = f16_of(-d * (t == RAD_Q4_1 ? urand(7.0, 8.5) : urand(15.0, 17.0))), memcpy(blk + 2, &h, 2);
            break;
        case RAD_Q4_K: case RAD_Q5_K: {
            uint8_t sc[8], mn[8];
            for (int j = 0; j < 8; j++) sc[j] = (uint8_t)(40 + rnd() % 24), mn[j] = sc[j];
            pack_k4_scales(blk + 4, sc, mn);
            h = f16_of(d / 40), memcpy(blk, &h, 2);
            h = f16_of(d / 40 * (t == RAD_Q4_K ? 7.5 : 15.5)), memcpy(blk + 2, &h, 2);
            break;
        }
        case RAD_Q6_K:
            for (int j = 0; j < 16; j++) blk[192 + j] = (uint8_t)(int8_t)((rnd() & 1 ? 1 : -1) * (int)(64 + rnd() % 64));
            h = f16_of(d / 96), memcpy(blk + 208, &h, 2);
            break;
        default: break;
        }
    }
}

/* A weight [rows, cols] of encoding t: random codes, finite scales; dec gets rad_dequant's f32.
 * Block scales are random over many octaves (the decoders' corner cases) unless `real`. */
static void *make_weight_x(RadDType t, uint64_t rows, uint64_t cols, float *dec, int real) {
    const RadEncInfo *ei = rad_enc_info((RadEnc)t);
    uint64_t rb = row_bytes(t, cols), nbytes = rb * rows;
    uint8_t *w = xmalloc(nbytes);
    for (uint64_t i = 0; i < nbytes; i++) w[i] = (uint8_t)rnd();
    if (t == RAD_F32) {
        for (uint64_t i = 0; i < rows * cols; i++) {
            float f = frand();
            memcpy(w + 4 * i, &f, 4);
        }
    } else if (t == RAD_F16) { /* every finite f16 exponent, subnormals included */
        for (uint64_t i = 0; i < rows * cols; i++) {
            uint16_t h = (uint16_t)(rnd() & 0xffff);
            if ((h & 0x7c00) == 0x7c00) h &= 0xbfff;
            memcpy(w + 2 * i, &h, 2);
        }
    } else if (t == RAD_BF16) {
        for (uint64_t i = 0; i < rows * cols; i++) {
            uint64_t r = rnd();
            uint16_t h = (uint16_t)(((r & 1) << 15) | ((110 + (r >> 1) % 20) << 7) | ((r >> 8) & 0x7f));
            memcpy(w + 2 * i, &h, 2);
        }
    } else {
        for (uint64_t b = 0; b < nbytes / ei->block_bytes; b++) {
            uint8_t *blk = w + b * ei->block_bytes;
            uint16_t d = rand_f16_scale(), m = rand_f16_scale();
            switch ((int)t) {
            case RAD_Q8_0: case RAD_Q4_0: case RAD_Q5_0: memcpy(blk, &d, 2); break;
            case RAD_Q4_1: case RAD_Q5_1: case RAD_Q4_K: case RAD_Q5_K: memcpy(blk, &d, 2), memcpy(blk + 2, &m, 2); break;
            case RAD_Q6_K: memcpy(blk + 208, &d, 2); break;
            default: break;
            }
        }
    }
    if (real && ei->block_elems > 1) realistic_blocks(t, w, nbytes / ei->block_bytes);
    if (dec) {
        RadErr e = {0};
        cr_assert_eq(rad_dequant((RadEnc)t, w, nbytes, dec, rows * cols, &e), RAD_OK, "%s", e.msg);
    }
    return w;
}
static void *make_weight(RadDType t, uint64_t rows, uint64_t cols, float *dec) { return make_weight_x(t, rows, cols, dec, 0); }

/* RadExactness's measure: per row, max |got - want| / (max |want| + 1e-6). */
static double row_err(const float *got, const double *want, int N) {
    double err = 0, mx = 0;
    for (int j = 0; j < N; j++) {
        double d = fabs((double)got[j] - want[j]);
        if (!(d <= err)) err = d; /* NaN counts as an error */
        if (fabs(want[j]) > mx) mx = fabs(want[j]);
    }
    return err / (mx + 1e-6);
}
static void assert_rows_within(const float *got, size_t got_stride, const double *want, int M, int N, double tol,
                               const char *what) {
    for (int i = 0; i < M; i++) {
        double e = row_err(got + (size_t)i * got_stride, want + (size_t)i * N, N);
        cr_assert(e <= tol, "%s row %d: error %.3g exceeds %.3g", what, i, e, tol);
    }
}
static void assert_bitwise(const float *got, const float *want, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(bits(got[i]), bits(want[i]), "%s[%zu]: %.9g, want %.9g", what, i, got[i], want[i]);
}
static void assert_untouched(const void *p, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++) cr_assert_eq(((const uint8_t *)p)[i], 0x5a, "%s: byte %zu written", what, i);
}

/* ---- the library ------------------------------------------------------------------------------------ */

Test(ref, plugin_info_and_table) {
    cr_assert_eq(g_info->kind, RAD_PLUGIN_KERNELS);
    cr_assert_eq(g_info->abi_major, RAD_ABI_MAJOR);
    cr_assert_leq(g_info->abi_minor, RAD_ABI_MINOR);
    cr_assert_str_eq(g_info->name, "ref");
    cr_assert_geq(g_lib->struct_size, sizeof(RadKernelLib));
    cr_assert_eq(g_lib->device, RAD_DEVICE_CPU);
    cr_assert(!g_lib->alloc && !g_lib->free && !g_lib->copy && !g_lib->sync);
    static const char *ops[] = {"embed_gather", "rmsnorm", "add_rmsnorm", "gemm_nt", "rope", "attn_paged", "silu_mul",
                                "add", "all_reduce", "logits_gather", "logits_gemm", "add_bias", "gelu_tanh_mul",
                                "head_rmsnorm", "scale"};
    for (size_t i = 0; i < N_OF(ops); i++) (void)find(ops[i], NULL);
    for (uint32_t i = 0; i < g_lib->n_kernels; i++) {
        const RadKernel *k = rad_kernel_at(g_lib, i);
        cr_assert_eq(k->struct_size, sizeof(RadKernel));
        cr_assert(k->variant && *k->variant && k->run);
        cr_assert_eq(k->act_dtype, RAD_F32);
        /* q8tile alone serves many rows only, and its rows' bits are not q8act's (kernels/README.md) */
        const int tile = strcmp(k->variant, "q8tile") == 0;
        cr_assert_eq(k->n_min, tile ? 16 : 1, "%s/%s", k->op, k->variant);
        cr_assert_eq(k->batch_invariant, !tile, "%s/%s", k->op, k->variant);
        cr_assert(k->exactness == RAD_EXACT_BITWISE || k->tolerance > 0);
        cr_assert_eq(k->kv_block_size, strcmp(k->op, "attn_paged") == 0 ? 16u : 0u);
    }
    /* the classes of docs/OPS.md */
    static const char *exact_ops[] = {"embed_gather", "embed_gather_part", "logits_gather", "add", "all_gather", "argmax"};
    for (size_t i = 0; i < N_OF(exact_ops); i++) cr_assert_eq(find(exact_ops[i], NULL)->exactness, RAD_EXACT_BITWISE);
    /* all_reduce: the rank-order sum is bitwise; the arrival order's is within a reordered sum */
    cr_assert_eq(find("all_reduce", "generic")->exactness, RAD_EXACT_BITWISE);
    cr_assert_eq(find("all_reduce", "arrival")->exactness, RAD_EXACT_TOLERANCE);
    cr_assert_eq(find("rmsnorm", "exact")->exactness, RAD_EXACT_BITWISE);
    cr_assert_eq(find("add_rmsnorm", "exact")->exactness, RAD_EXACT_BITWISE);
    cr_assert(find("rmsnorm", "simd")->tolerance <= 1e-5);
    cr_assert(find("gemm_nt", "exact")->tolerance <= 1e-4);
    cr_assert(find("gemm_nt", "q8act")->tolerance <= 2e-2);
    cr_assert(find("rope", NULL)->tolerance <= 1e-5);
    cr_assert(find("attn_paged", NULL)->tolerance <= 1e-5);
    cr_assert(find("silu_mul", NULL)->tolerance <= 1e-6);
    /* layouts: every encoding libref decodes; q8act only where an integer dot exists */
    for (size_t i = 0; i < N_OF(ALL_ENCS); i++) {
        cr_assert(find("gemm_nt", "exact")->weight_encs & RAD_ENC_BIT(ALL_ENCS[i]));
        cr_assert(find("embed_gather", NULL)->weight_encs & RAD_ENC_BIT(ALL_ENCS[i]));
    }
    cr_assert_eq(find("gemm_nt", "q8act")->weight_encs & RAD_ENC_PLAIN_FLOATS, 0);
    for (size_t i = 0; i < N_OF(Q8ACT_ENCS); i++)
        for (int v = 0; v < 4; v++) {
            static const char *const ops[4] = {"gemm_nt", "gemm_nt2", "gemm_nt3", "logits_gemm"};
            cr_assert(find(ops[v], "q8act")->weight_encs & RAD_ENC_BIT(Q8ACT_ENCS[i]), "%s:q8act takes %s", ops[v],
                      rad_enc_info((RadEnc)Q8ACT_ENCS[i])->name);
        }
}

/* Zero rows is not a call: every kernel returns RAD_E_SHAPE and writes nothing. */
Test(ref, zero_rows) {
    float w[64], x[64], y[64], z[64], o[64];
    int32_t ids[4] = {0, 1, 2, 3};
    fill(w, 64), fill(x, 64), fill(y, 64), fill(z, 64);
    for (uint32_t i = 0; i < g_lib->n_kernels; i++) {
        const RadKernel *k = rad_kernel_at(g_lib, i);
        const char *op = k->op;
        RadParam prm[] = {RAD_RANGE("M", 1, 4), RAD_INT("N", 4), RAD_INT("K", 4), RAD_INT("V", 4), RAD_FLOAT("eps", 1e-5),
                          RAD_INT("n_head", 1), RAD_INT("head_dim", 4), RAD_INT("n_rot", 4), RAD_FLOAT("theta", 1e4),
                          RAD_INT("scaling", 0), RAD_FLOAT("factor", 1), RAD_FLOAT("low_freq_factor", 0),
                          RAD_FLOAT("high_freq_factor", 0), RAD_INT("orig_ctx", 0), RAD_INT("exact", 1),
                          RAD_INT("N0", 4), RAD_INT("N1", 4), RAD_INT("N2", 4), RAD_INT("row0", 0), RAD_INT("n_vocab", 4),
                          RAD_INT("col0", 0), RAD_INT("W", 4)};
        RadKArg a[7];
        uint32_t na = 0;
        memset(a, 0, sizeof a);
        RadDType wt = (k->weight_encs & RAD_ENC_BIT(RAD_F32)) ? RAD_F32 : RAD_Q8_0;
        if (!strcmp(op, "embed_gather") || !strcmp(op, "embed_gather_part"))
            a[0] = weight(w, RAD_F32, 4, 4), a[1] = raw_i32(ids, 4), a[2] = fbuf(o, 4, 4), na = 3;
        else if (!strcmp(op, "rmsnorm")) a[0] = weight(w, RAD_F32, 1, 4), a[1] = fbuf(x, 4, 4), a[2] = fbuf(o, 4, 4), na = 3;
        else if (!strcmp(op, "add_rmsnorm"))
            a[0] = weight(w, RAD_F32, 1, 4), a[1] = fbuf(x, 4, 4), a[2] = fbuf(z, 4, 4), a[3] = fbuf(o, 4, 4), na = 4;
        else if (!strcmp(op, "gemm_nt") || !strcmp(op, "logits_gemm"))
            a[0] = weight(w, wt, 4, 4), a[1] = fbuf(x, 4, 4), a[2] = fbuf(o, 4, 4), na = 3;
        else if (!strcmp(op, "gemm_nt2") || !strcmp(op, "gemm_nt3")) {
            const uint32_t np = op[7] == '2' ? 2 : 3;
            for (uint32_t j = 0; j < np; j++) a[j] = weight(w, wt, 4, 4), a[np + 1 + j] = fbuf(o, 4, 4);
            a[np] = fbuf(x, 4, 4), na = 2 * np + 1;
        } else if (!strcmp(op, "rope")) a[0] = fbuf(o, 4, 4), a[1] = raw_i32(ids, 4), na = 2;
        else if (!strcmp(op, "attn_paged") || !strcmp(op, "attn_seq"))
            a[0] = fbuf(x, 4, 4), a[1] = fbuf(y, 4, 4), a[2] = fbuf(z, 4, 4), a[3] = fbuf(o, 4, 4), na = 4;
        else if (!strcmp(op, "silu_mul") || !strcmp(op, "add") || !strcmp(op, "gelu_tanh_mul"))
            a[0] = fbuf(x, 4, 4), a[1] = fbuf(y, 4, 4), a[2] = fbuf(o, 4, 4), na = 3;
        else if (!strcmp(op, "add_bias") || !strcmp(op, "head_rmsnorm")) a[0] = weight(w, RAD_F32, 1, 4), a[1] = fbuf(o, 4, 4), na = 2;
        else if (!strcmp(op, "scale")) a[0] = fbuf(o, 4, 4), na = 1;
        else if (!strcmp(op, "all_reduce") || !strcmp(op, "l2_normalize")) a[0] = fbuf(o, 4, 4), na = 1;
        else if (!strcmp(op, "gelu") || !strcmp(op, "pool") || !strcmp(op, "all_gather"))
            a[0] = fbuf(x, 4, 4), a[1] = fbuf(o, 4, 4), na = 2;
        else if (!strcmp(op, "layernorm"))
            a[0] = weight(w, RAD_F32, 1, 4), a[1] = weight(w, RAD_F32, 1, 4), a[2] = fbuf(x, 4, 4), a[3] = fbuf(o, 4, 4), na = 4;
        else if (!strcmp(op, "logits_gather")) a[0] = fbuf(x, 4, 4), a[1] = raw_i32(ids, 4), a[2] = fbuf(o, 4, 4), na = 3;
        else if (!strcmp(op, "argmax")) a[0] = fbuf(x, 4, 4), a[1] = fbuf(o, 4, 1), na = 2;
        else cr_assert_fail("untested op %s", op);
        for (int s = 0; s < N_ST; s++) {
            memset(o, 0x5a, sizeof o);
            RadKernelArgs ka = {sizeof ka, prm, N_OF(prm), 0, a, na, NULL, NULL, NULL, g_st[s], 0, 1, NULL, 0};
            cr_assert_eq(k->run(&ka), RAD_E_SHAPE, "%s/%s: zero rows", op, k->variant);
            ka.n = -1;
            cr_assert_eq(k->run(&ka), RAD_E_SHAPE, "%s/%s: negative rows", op, k->variant);
            assert_untouched(o, sizeof o, op);
        }
    }
}

/* ---- embed_gather: every encoding, bit for bit, on every path --------------------------------------- */

Test(ref, embed_gather_every_encoding) {
    enum { V = 13, M = 7 };
    const int N = 512;
    for (size_t e = 0; e < N_OF(ALL_ENCS); e++) {
        RadDType t = ALL_ENCS[e];
        float *dec = xmalloc(sizeof(float) * V * (size_t)N), *out = xmalloc(sizeof(float) * M * (size_t)N);
        void *tab = make_weight(t, V, (uint64_t)N, dec);
        const int32_t ids[M] = {3, 0, 12, 3, 7, 1, 11};
        RadParam p[] = {RAD_RANGE("M", 1, 8), RAD_INT("N", N), RAD_INT("V", V)};
        RadKArg a[3] = {weight(tab, t, V, (uint64_t)N), raw_i32(ids, M), fbuf(out, M, (uint64_t)N)};
        for (int s = 0; s < N_ST; s++) {
            memset(out, 0, sizeof(float) * M * (size_t)N);
            cr_assert_eq(call(find("embed_gather", NULL), g_st[s], p, 3, M, a, 3), RAD_OK);
            for (int i = 0; i < M; i++) {
                char what[96];
                snprintf(what, sizeof what, "embed_gather %s %s row %d", rad_enc_info((RadEnc)t)->name, st_name[s], i);
                assert_bitwise(out + (size_t)i * N, dec + (size_t)ids[i] * N, (size_t)N, what);
            }
            /* an id outside [0, V) anywhere: RAD_E_ARG, nothing written */
            const int32_t bad[M] = {1, 2, 3, 4, 5, 6, V};
            const int32_t neg[M] = {-1, 2, 3, 4, 5, 6, 0};
            memset(out, 0x5a, sizeof(float) * M * (size_t)N);
            a[1] = raw_i32(bad, M);
            cr_assert_eq(call(find("embed_gather", NULL), g_st[s], p, 3, M, a, 3), RAD_E_ARG);
            a[1] = raw_i32(neg, M);
            cr_assert_eq(call(find("embed_gather", NULL), g_st[s], p, 3, M, a, 3), RAD_E_ARG);
            assert_untouched(out, sizeof(float) * M * (size_t)N, "embed_gather, bad id");
            a[1] = raw_i32(ids, M);
            /* a vocabulary-parallel table's parts [0, 5) and [5, V): each gives the whole table's rows
               for its own ids, bit for bit, and +0 for the others' (what the all_reduce adds to them) */
            static const float zeros[512];
            for (int part = 0; part < 2; part++) {
                const int row0 = part ? 5 : 0, rows = part ? V - 5 : 5;
                RadParam pp[] = {RAD_RANGE("M", 1, 8), RAD_INT("N", N), RAD_INT("V", rows), RAD_INT("row0", row0),
                                 RAD_INT("n_vocab", V)};
                RadKArg ap[3] = {weight((const uint8_t *)tab + (size_t)row0 * row_bytes(t, (uint64_t)N), t, (uint64_t)rows,
                                        (uint64_t)N),
                                 raw_i32(ids, M), fbuf(out, M, (uint64_t)N)};
                memset(out, 0x5a, sizeof(float) * M * (size_t)N);
                cr_assert_eq(call(find("embed_gather_part", NULL), g_st[s], pp, 5, M, ap, 3), RAD_OK);
                for (int i = 0; i < M; i++) {
                    const int mine = ids[i] >= row0 && ids[i] < row0 + rows;
                    assert_bitwise(out + (size_t)i * N, mine ? dec + (size_t)ids[i] * N : zeros, (size_t)N,
                                   mine ? "embed_gather_part: its own id" : "embed_gather_part: another part's id");
                }
                ap[1] = raw_i32(bad, M); /* an id outside the whole vocabulary: refused, nothing written */
                memset(out, 0x5a, sizeof(float) * M * (size_t)N);
                cr_assert_eq(call(find("embed_gather_part", NULL), g_st[s], pp, 5, M, ap, 3), RAD_E_ARG);
                assert_untouched(out, sizeof(float) * M * (size_t)N, "embed_gather_part, bad id");
            }
        }
        free(tab), free(dec), free(out);
    }
}

/* f16 widening keeps NaN payloads, infinities and subnormals exactly as rad_dequant does. */
Test(ref, embed_gather_f16_specials) {
    enum { N = 24 };
    uint16_t h[N] = {0x7c00, 0xfc00, 0x7e01, 0x7d55, 0xfd00, 0x0001, 0x8001, 0x03ff, 0x0400, 0x8000, 0x0000, 0x7bff,
                     0xfbff, 0x3c00, 0x0200, 0x8200, 0x7c01, 0xffff, 0x1234, 0x4321, 0x03fe, 0x83fe, 0x0003, 0x5555};
    float dec[N], out[N];
    RadErr e = {0};
    cr_assert_eq(rad_dequant(RAD_ENC_F16, h, sizeof h, dec, N, &e), RAD_OK);
    const int32_t id = 0;
    RadParam p[] = {RAD_RANGE("M", 1, 1), RAD_INT("N", N), RAD_INT("V", 1)};
    RadKArg a[3] = {weight(h, RAD_F16, 1, N), raw_i32(&id, 1), fbuf(out, 1, N)};
    for (int s = 0; s < N_ST; s++) {
        cr_assert_eq(call(find("embed_gather", NULL), g_st[s], p, 3, 1, a, 3), RAD_OK);
        assert_bitwise(out, dec, N, st_name[s]);
    }
}

/* ---- gemm_nt and logits_gemm ----------------------------------------------------------------------- */

typedef struct GemmCase {
    int M, N, K;
} GemmCase;

static const GemmCase PLAIN_CASES[] = {{1, 1, 1}, {1, 37, 13}, {3, 19, 100}, {5, 8, 64}, {9, 45, 77}, {1, 67, 300}, {4, 61, 24}};
static const GemmCase BLOCK32_CASES[] = {{1, 1, 32}, {1, 37, 64}, {3, 19, 96}, {5, 53, 256}, {9, 13, 160}, {2, 50, 32}, {1, 23, 160}};
static const GemmCase BLOCK256_CASES[] = {{1, 5, 256}, {1, 37, 256}, {3, 19, 512}, {6, 11, 768}, {2, 50, 256}};

static int block_of(RadDType t) { return (int)rad_enc_info((RadEnc)t)->block_elems; }

typedef struct GemmData {
    int M, N, K, xs;     /* xs: row stride of x (> K: the kernel must honour it) */
    RadDType t;
    void *w;
    float *wd, *x;
    double *ref;         /* docs/OPS.md's f32 reference, widened */
    double *bound;       /* q8act: OPS.md's per-output bound, plus f32 slack */
    double *bfbound;     /* bf16 products: OPS.md's per-output bound, 8e-3 sum |x w| */
} GemmData;

static void gemm_make(GemmData *g, RadDType t, int M, int N, int K, int real) {
    g->M = M, g->N = N, g->K = K, g->xs = K + 3, g->t = t;
    g->wd = xmalloc(sizeof(float) * (size_t)N * K);
    g->w = make_weight_x(t, (uint64_t)N, (uint64_t)K, g->wd, real);
    g->x = xmalloc(sizeof(float) * (size_t)M * g->xs);
    fill(g->x, (size_t)M * g->xs);
    g->ref = xmalloc(sizeof(double) * (size_t)M * N);
    g->bound = xmalloc(sizeof(double) * (size_t)M * N);
    g->bfbound = xmalloc(sizeof(double) * (size_t)M * N);
    const int qb = 32; /* activation blocks, for every weight encoding (docs/OPS.md) */
    for (int i = 0; i < M; i++) {
        const float *x = g->x + (size_t)i * g->xs;
        for (int n = 0; n < N; n++) {
            const float *w = g->wd + (size_t)n * K;
            float acc = 0.0f;
            double b = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                const float p = x[k] * w[k];
                acc = acc + p;
                mag += fabs((double)x[k] * w[k]);
            }
            for (int k0 = 0; k0 + qb <= K; k0 += qb) {
                double amax = 0, sw = 0;
                for (int k = k0; k < k0 + qb; k++) {
                    if (fabs(x[k]) > amax) amax = fabs(x[k]);
                    sw += fabs(w[k]);
                }
                b += 0.563 * (amax / 127.0) * sw;
            }
            g->ref[(size_t)i * N + n] = acc;
            g->bound[(size_t)i * N + n] = b + 1e-5 * mag + 1e-30;
            g->bfbound[(size_t)i * N + n] = 8e-3 * mag + 1e-30;
        }
    }
}
static void gemm_free(GemmData *g) { free(g->w), free(g->wd), free(g->x), free(g->ref), free(g->bound), free(g->bfbound); }

static int gemm_run(const char *op, const char *var, void *st, const GemmData *g, int row0, int M, float *y, uint32_t thr) {
    RadParam p[] = {RAD_RANGE("M", 1, 64), RAD_INT("N", g->N), RAD_INT("K", g->K)};
    RadKArg a[3] = {weight(g->w, g->t, (uint64_t)g->N, (uint64_t)g->K),
                    fbuf_s(g->x + (size_t)row0 * g->xs, (uint64_t)M, (uint64_t)g->K, (uint64_t)g->xs),
                    fbuf(y, (uint64_t)M, (uint64_t)g->N)};
    Call c = {NULL, NULL, thr};
    return call_x(find(op, var), st, p, 3, M, a, 3, &c);
}

/* One weight and x: every state within the kernel's tolerance, and for q8act every output within
 * OPS.md's bound; the same bits at 1 and 3 threads; each row the same alone as in the batch.
 * "exact" gets blocks with scales over many octaves; "q8act" gets realistic blocks for the row
 * tolerance (2e-2 is a statement about realistic data, docs/OPS.md) and is run on the random
 * ones too, against the per-output bound alone (which holds for any data). */
static void check_gemm_x(const char *op, const char *var, RadDType t, int M, int N, int K, int real, int row_tol);
static void check_gemm(const char *op, const char *var, RadDType t, int M, int N, int K) {
    if (strncmp(var, "q8", 2) == 0) { /* a row of a few outputs may cancel to near 0: its max is no scale */
        check_gemm_x(op, var, t, M, N, K, 1, N >= 16);
        check_gemm_x(op, var, t, M, N, K, 0, 0);
    } else {
        check_gemm_x(op, var, t, M, N, K, 0, 1);
    }
}
static void check_gemm_x(const char *op, const char *var, RadDType t, int M, int N, int K, int real, int row_tol) {
    GemmData g;
    gemm_make(&g, t, M, N, K, real);
    const RadKernel *k = find(op, var);
    const int q8 = strncmp(var, "q8", 2) == 0, bf = k->exactness == RAD_EXACT_BF16ACT;
    float *y[N_ST];
    char what[160];
    for (int s = 0; s < N_ST; s++) {
        snprintf(what, sizeof what, "%s/%s %s M=%d N=%d K=%d %s", op, var, rad_enc_info((RadEnc)t)->name, M, N, K, st_name[s]);
        y[s] = xmalloc(sizeof(float) * (size_t)M * N);
        cr_assert_eq(gemm_run(op, var, g_st[s], &g, 0, M, y[s], 0), RAD_OK, "%s", what);
        if (row_tol) assert_rows_within(y[s], (size_t)N, g.ref, M, N, k->tolerance, what);
        if (q8)
            for (int j = 0; j < M * N; j++)
                cr_assert(fabs((double)y[s][j] - g.ref[j]) <= g.bound[j], "%s: y[%d][%d] = %.9g, reference %.9g, bound %.3g",
                          what, j / N, j % N, y[s][j], g.ref[j], g.bound[j]);
        if (bf)
            for (int j = 0; j < M * N; j++)
                cr_assert(fabs((double)y[s][j] - g.ref[j]) <= g.bfbound[j], "%s: y[%d][%d] = %.9g, reference %.9g, bf16 bound %.3g",
                          what, j / N, j % N, y[s][j], g.ref[j], g.bfbound[j]);
    }
    /* thread counts give the same bits (same ISA), and so does a 2-thread call on a 3-thread pool */
    assert_bitwise(y[ST_BEST3], y[ST_BEST1], (size_t)M * N, "best ISA: 3 threads vs 1");
    assert_bitwise(y[ST_GEN3], y[ST_GEN1], (size_t)M * N, "generic: 3 threads vs 1");
    float *y2 = xmalloc(sizeof(float) * (size_t)M * N);
    cr_assert_eq(gemm_run(op, var, g_st[ST_BEST3], &g, 0, M, y2, 2), RAD_OK);
    assert_bitwise(y2, y[ST_BEST1], (size_t)M * N, "best ISA: 2 of 3 threads vs 1");
    /* batch invariance: the last row alone, and a middle row alone, give the rows of the batch */
    for (int r = M - 1; r >= 0; r -= (M > 2 ? M / 2 : 1)) {
        cr_assert_eq(gemm_run(op, var, g_st[ST_BEST3], &g, r, 1, y2, 0), RAD_OK);
        assert_bitwise(y2, y[ST_BEST3] + (size_t)r * N, (size_t)N, "a row alone vs in the batch");
        if (r == 0) break;
    }
    for (int s = 0; s < N_ST; s++) free(y[s]);
    free(y2);
    gemm_free(&g);
}

static void check_gemm_cases(const char *op, const char *var, RadDType t) {
    const GemmCase *cs;
    size_t n;
    if (block_of(t) == 1) cs = PLAIN_CASES, n = N_OF(PLAIN_CASES);
    else if (block_of(t) == 32) cs = BLOCK32_CASES, n = N_OF(BLOCK32_CASES);
    else cs = BLOCK256_CASES, n = N_OF(BLOCK256_CASES);
    for (size_t i = 0; i < n; i++) check_gemm(op, var, t, cs[i].M, cs[i].N, cs[i].K);
}

/* ---- block-scaled fp8 (abi/rad_types.h): codes times their 128x128 block's f32 scale -------------- */

/* A random [N, K] block-scaled f8 weight: codes (no NaN code), positive scales, and its value in f32
 * written out here from the definition (not through rad_dequant_f8_blocks). */
static void f8_make(int N, int K, uint8_t *codes, float *scale, float *dec) {
    const int sk = (K + 127) / 128, sn = (N + 127) / 128;
    for (int i = 0; i < sn * sk; i++) scale[i] = (float)urand(1e-3, 2e-2);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) {
            uint8_t c = (uint8_t)(rnd() >> 24);
            if ((c & 0x7f) == 0x7f) c ^= 1; /* S.1111.111 is NaN */
            codes[(size_t)n * K + k] = c;
            const int e = (c >> 3) & 15, m = c & 7;
            const float v = e ? ldexpf((float)(8 + m), e - 10) : ldexpf((float)m, -9);
            dec[(size_t)n * K + k] = ((c & 0x80) ? -v : v) * scale[(n / 128) * sk + k / 128];
        }
}

/* The fp8 GEMMs on partial blocks (N = 200 and K = 320: the last block of each is not whole), at
 * 1 and 7 rows, against x·Wᵀ in double: within 1e-4 (their stated tolerance). gemm_nt2's second
 * part is a one-plane f8 weight, the codes alone (scale 1); the kernel takes nothing but f8. */
Test(ref, gemm_fp8_block_scaled) {
    enum { N = 200, K = 320, MMAX = 7 };
    uint8_t *codes = xmalloc((size_t)N * K);
    float *scale = xmalloc(sizeof(float) * 2 * 3), *dec = xmalloc(sizeof(float) * N * K), *x = xmalloc(sizeof(float) * MMAX * K);
    float *y = xmalloc(sizeof(float) * MMAX * N), *y2 = xmalloc(sizeof(float) * MMAX * N);
    double *want = xmalloc(sizeof(double) * MMAX * N), *want2 = xmalloc(sizeof(double) * MMAX * N);
    f8_make(N, K, codes, scale, dec);
    fill(x, (size_t)MMAX * K);
    for (int i = 0; i < MMAX; i++)
        for (int n = 0; n < N; n++) {
            double a = 0, b = 0;
            for (int k = 0; k < K; k++) {
                a += (double)x[i * K + k] * dec[(size_t)n * K + k];
                b += (double)x[i * K + k] * (dec[(size_t)n * K + k] / scale[(n / 128) * 3 + k / 128]); /* the codes alone */
            }
            want[i * N + n] = a, want2[i * N + n] = b;
        }
    RadKArg wf = weight(codes, RAD_F8_E4M3, N, K);
    wf.planes[1] = scale;
    for (int s = 0; s < N_ST; s++)
        for (int M = 1; M <= MMAX; M += 6) {
            static const char *const ops[2] = {"gemm_nt", "logits_gemm"};
            for (int o = 0; o < 2; o++) {
                RadParam p[] = {RAD_RANGE("M", 1, 8), RAD_INT("N", N), RAD_INT("K", K)};
                RadKArg a[3] = {wf, fbuf(x, (uint64_t)M, K), fbuf(y, (uint64_t)M, N)};
                memset(y, 0xff, sizeof(float) * MMAX * N);
                cr_assert_eq(call(find(ops[o], "fp8"), g_st[s], p, 3, M, a, 3), RAD_OK);
                char what[96];
                snprintf(what, sizeof what, "%s:fp8 %s M %d", ops[o], st_name[s], M);
                assert_rows_within(y, N, want, M, N, 1e-4, what);
            }
            RadParam p2[] = {RAD_RANGE("M", 1, 8), RAD_INT("N0", N), RAD_INT("N1", N), RAD_INT("K", K)};
            RadKArg a2[5] = {wf, weight(codes, RAD_F8_E4M3, N, K), fbuf(x, (uint64_t)M, K), fbuf(y, (uint64_t)M, N),
                             fbuf(y2, (uint64_t)M, N)};
            cr_assert_eq(call(find("gemm_nt2", "fp8"), g_st[s], p2, 4, M, a2, 5), RAD_OK);
            assert_rows_within(y, N, want, M, N, 1e-4, "gemm_nt2:fp8 part 0 (block-scaled)");
            assert_rows_within(y2, N, want2, M, N, 1e-4, "gemm_nt2:fp8 part 1 (one plane: the codes alone)");
        }
    /* f8 only: no candidate for other encodings; the exact kernel does not take f8 */
    cr_assert_eq(find("gemm_nt", "fp8")->weight_encs, RAD_ENC_BIT(RAD_ENC_F8_E4M3));
    cr_assert_eq(find("gemm_nt", "exact")->weight_encs & RAD_ENC_BIT(RAD_ENC_F8_E4M3), 0);
    free(codes), free(scale), free(dec), free(x), free(y), free(y2), free(want), free(want2);
}

/* The exact GEMM's weights are rad_dequant's, bit for bit, on every encoding and at every ISA
 * (each ISA's decoder: the AVX2 ones, q5_0/q5_1/q5_k among them, against the portable C): with x
 * the rows of the identity, y[i][n] is the decoded w[n][k0 + i] itself (one product by 1, the
 * rest by 0). Block scales over many octaves, random codes. */
Test(ref, gemm_exact_decodes_every_weight_as_rad_dequant) {
    enum { M = 64, N = 9, K = 512 };
    for (size_t t = 0; t < N_OF(ALL_ENCS); t++) {
        GemmData g;
        gemm_make(&g, ALL_ENCS[t], M, N, K, 0);
        float *y = xmalloc(sizeof(float) * M * N);
        for (int s = 0; s < N_ST; s++)
            for (int k0 = 0; k0 < K; k0 += M) {
                memset(g.x, 0, sizeof(float) * (size_t)M * g.xs);
                for (int i = 0; i < M; i++) g.x[(size_t)i * g.xs + k0 + i] = 1.0f;
                cr_assert_eq(gemm_run("gemm_nt", "exact", g_st[s], &g, 0, M, y, 0), RAD_OK);
                for (int i = 0; i < M; i++)
                    for (int n = 0; n < N; n++)
                        cr_assert(y[i * N + n] == g.wd[(size_t)n * K + k0 + i], "%s %s: w[%d][%d] decoded as %a, rad_dequant %a",
                                  rad_enc_info((RadEnc)ALL_ENCS[t])->name, st_name[s], n, k0 + i, (double)y[i * N + n],
                                  (double)g.wd[(size_t)n * K + k0 + i]);
            }
        free(y);
        gemm_free(&g);
    }
}

Test(ref, gemm_exact_plain_floats) {
    check_gemm_cases("gemm_nt", "exact", RAD_F32);
    check_gemm_cases("gemm_nt", "exact", RAD_F16);
    check_gemm_cases("gemm_nt", "exact", RAD_BF16);
}
Test(ref, gemm_exact_q8_0) { check_gemm_cases("gemm_nt", "exact", RAD_Q8_0); }
Test(ref, gemm_exact_q4_0) { check_gemm_cases("gemm_nt", "exact", RAD_Q4_0); }
Test(ref, gemm_exact_q4_1) { check_gemm_cases("gemm_nt", "exact", RAD_Q4_1); }
Test(ref, gemm_exact_q5) {
    check_gemm_cases("gemm_nt", "exact", RAD_Q5_0);
    check_gemm_cases("gemm_nt", "exact", RAD_Q5_1);
    check_gemm_cases("gemm_nt", "exact", RAD_Q5_K);
}
Test(ref, gemm_exact_q4_k) { check_gemm_cases("gemm_nt", "exact", RAD_Q4_K); }
Test(ref, gemm_exact_q6_k) { check_gemm_cases("gemm_nt", "exact", RAD_Q6_K); }
Test(ref, gemm_q8act) {
    for (size_t e = 0; e < N_OF(Q8ACT_ENCS); e++) check_gemm_cases("gemm_nt", "q8act", Q8ACT_ENCS[e]);
}

/* q8tile (ref_gemm_tile.c) on every encoding, at row counts with a short last group of four and
 * column counts with a short last tile of 16: OPS.md's bound, thread counts, a row alone; and on
 * a CPU with AVX-512 VNNI, where it takes the tiled path, every output the portable q8act dot's
 * bits (q8act at RAD_REF_ISA=generic). Below that level it is q8act's code. */
static int cpu_has_vnni(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
           __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512vnni");
#else
    return 0;
#endif
}
static void check_tile_bits(const char *op, RadDType t, int M, int N, int K) {
    check_gemm(op, "q8tile", t, M, N, K);
    if (!cpu_has_vnni()) return;
    GemmData g;
    gemm_make(&g, t, M, N, K, 1);
    float *a = xmalloc(sizeof(float) * (size_t)M * N), *b = xmalloc(sizeof(float) * (size_t)M * N);
    cr_assert_eq(gemm_run(op, "q8tile", g_st[ST_BEST3], &g, 0, M, a, 0), RAD_OK);
    cr_assert_eq(gemm_run(op, "q8act", g_st[ST_GEN1], &g, 0, M, b, 0), RAD_OK);
    char what[128];
    snprintf(what, sizeof what, "%s q8tile vs portable q8act, %s M=%d N=%d K=%d", op, rad_enc_info((RadEnc)t)->name, M, N, K);
    assert_bitwise(a, b, (size_t)M * N, what);
    free(a), free(b);
    gemm_free(&g);
}
Test(ref, gemm_q8tile) {
    for (size_t e = 0; e < N_OF(Q8ACT_ENCS); e++) {
        const RadDType t = Q8ACT_ENCS[e];
        const int K = block_of(t) == 32 ? 864 : 768;
        check_tile_bits("gemm_nt", t, 17, 37, K);
        check_tile_bits("gemm_nt", t, 16, 16, block_of(t) == 32 ? 96 : 256);
        check_tile_bits("gemm_nt", t, 1, 5, K);
        check_tile_bits("gemm_nt", t, 35, 131, 512);
    }
    check_tile_bits("logits_gemm", RAD_Q8_0, 19, 301, 64);
    check_tile_bits("logits_gemm", RAD_Q6_K, 18, 33, 256);
}

/* bf16dot (ref_gemm_bf16.c): bf16 weights, or f16 ones rounded to bf16, against activations
 * rounded to bf16, within OPS.md's 1e-2; the same bits at any thread count and for a row alone
 * (tiles of 4 x 4 with short edges, K with a short last 32-element step; f16: a few rows convert
 * as they load, more through a bf16 tile); the fused ops equal the chain (gemm_nt2_nt3 below). */
Test(ref, gemm_bf16dot) {
    static const GemmCase cases[] = {{1, 1, 32}, {1, 37, 64}, {3, 19, 96}, {5, 53, 250}, {17, 13, 160}, {2, 50, 33}, {35, 131, 576}};
    for (size_t i = 0; i < N_OF(cases); i++) {
        check_gemm("gemm_nt", "bf16dot", RAD_BF16, cases[i].M, cases[i].N, cases[i].K);
        check_gemm("gemm_nt", "bf16dot", RAD_F16, cases[i].M, cases[i].N, cases[i].K);
    }
    check_gemm("logits_gemm", "bf16dot", RAD_BF16, 3, 301, 64);
    check_gemm("logits_gemm", "bf16dot", RAD_F16, 4, 301, 64);
    cr_assert_eq(find("gemm_nt", "bf16dot")->weight_encs, RAD_ENC_BIT(RAD_ENC_BF16) | RAD_ENC_BIT(RAD_ENC_F16));
    cr_assert(find("gemm_nt", "bf16dot")->tolerance <= 1e-2);
    cr_assert_eq(find("gemm_nt", "bf16dot")->exactness, RAD_EXACT_BF16ACT, "checked by the per-output bf16-product bound");
}

/* The 5-bit encodings at the row counts that take each path: M = 1 (decode, the one-row range),
 * 4 (one four-row step), 5 and 17 (four-row steps and a one-row tail), K a multiple of 256 and
 * (the 32-element ones) an odd number of blocks that is not (the kernels' two-block steps leave
 * one over). */
Test(ref, gemm_q8act_q5) {
    static const RadDType t[] = {RAD_Q5_0, RAD_Q5_1, RAD_Q5_K};
    static const int Ms[] = {1, 4, 5, 17};
    for (size_t e = 0; e < N_OF(t); e++)
        for (size_t i = 0; i < N_OF(Ms); i++) {
            check_gemm("gemm_nt", "q8act", t[e], Ms[i], 37, 512);
            if (block_of(t[e]) == 32) check_gemm("gemm_nt", "q8act", t[e], Ms[i], 21, 864);
        }
    check_gemm("logits_gemm", "q8act", RAD_Q5_0, 3, 301, 96);
    check_gemm("gemm_nt", "q8act", RAD_Q5_K, 1, 301, 768);
    check_gemm("gemm_nt", "q8act", RAD_Q5_1, 7, 130, 576);
}
/* The K-quant dots at each SIMD level by name (RAD_REF_ISA; "best" above is one of them): avx2
 * and avx512 each have their own kernels for q4_k, q5_k and q6_k. At M = 1 (the one-row range),
 * 4 (dot4), 5 and 6 (dot4 and a one-row tail of one and two), every output within OPS.md's bound,
 * and each row the same bits alone (the range) as in the batch, so dot, dot4 and the range share
 * one kernel at each level. */
Test(ref, gemm_q8act_kquant_levels) {
    static const char *isa[] = {"avx2", "avx512"};
    static const RadDType t[] = {RAD_Q4_K, RAD_Q5_K, RAD_Q6_K};
    static const int Ms[] = {1, 4, 5, 6};
    for (size_t l = 0; l < N_OF(isa); l++) {
        void *st = init_state(isa[l], 1, 1);
        for (size_t e = 0; e < N_OF(t); e++)
            for (size_t i = 0; i < N_OF(Ms); i++)
                for (int real = 0; real < 2; real++) {
                    const int M = Ms[i], N = 37, K = 768;
                    GemmData g;
                    gemm_make(&g, t[e], M, N, K, real);
                    float *y = xmalloc(sizeof(float) * (size_t)M * N), *y1 = xmalloc(sizeof(float) * (size_t)N);
                    char what[160];
                    snprintf(what, sizeof what, "gemm_nt/q8act %s M=%d %s%s", rad_enc_info((RadEnc)t[e])->name, M, isa[l],
                             real ? " realistic" : "");
                    cr_assert_eq(gemm_run("gemm_nt", "q8act", st, &g, 0, M, y, 1), RAD_OK, "%s", what);
                    for (int j = 0; j < M * N; j++)
                        cr_assert(fabs((double)y[j] - g.ref[j]) <= g.bound[j], "%s: y[%d][%d] = %.9g, reference %.9g, bound %.3g",
                                  what, j / N, j % N, y[j], g.ref[j], g.bound[j]);
                    for (int r = 0; r < M; r++) {
                        cr_assert_eq(gemm_run("gemm_nt", "q8act", st, &g, r, 1, y1, 1), RAD_OK, "%s", what);
                        assert_bitwise(y1, y + (size_t)r * N, (size_t)N, what);
                    }
                    free(y), free(y1);
                    gemm_free(&g);
                }
        g_lib->fini(st);
    }
}
Test(ref, logits_gemm) {
    check_gemm("logits_gemm", "exact", RAD_Q8_0, 2, 301, 64);
    check_gemm("logits_gemm", "exact", RAD_F16, 1, 97, 40);
    check_gemm("logits_gemm", "q8act", RAD_Q8_0, 3, 301, 64);
    check_gemm("logits_gemm", "q8act", RAD_Q6_K, 1, 33, 256);
}

/* Shapes big enough to split across threads (M = 1: decode; M > 1: tiles of columns). */
Test(ref, gemm_threaded_shapes) {
    check_gemm("gemm_nt", "exact", RAD_Q4_1, 1, 301, 768);
    check_gemm("gemm_nt", "exact", RAD_Q4_1, 7, 130, 512);
    check_gemm("gemm_nt", "exact", RAD_F32, 5, 131, 515);
    check_gemm("gemm_nt", "exact", RAD_Q4_K, 3, 101, 1024);
    check_gemm("gemm_nt", "q8act", RAD_Q4_1, 1, 301, 768);
    check_gemm("gemm_nt", "q8act", RAD_Q4_1, 1, 1101, 96);
    check_gemm("logits_gemm", "q8act", RAD_Q8_0, 1, 2053, 64);
    check_gemm("gemm_nt", "q8act", RAD_Q4_1, 7, 130, 512);
    check_gemm("gemm_nt", "q8act", RAD_Q6_K, 5, 97, 768);
}

/* Activations with an all-zero block, an outlier and tiny values: the quantiser's scale is per
 * block, and a zero block has scale 0. */
Test(ref, gemm_q8act_outliers_and_zeros) {
    for (size_t e = 0; e < N_OF(Q8ACT_ENCS); e++) {
        const RadDType t = Q8ACT_ENCS[e];
        enum { M = 3, N = 29, K = 512 };
        float *wd = xmalloc(sizeof(float) * N * K), *x = xmalloc(sizeof(float) * M * K), *y = xmalloc(sizeof(float) * M * N);
        void *w = make_weight_x(t, N, K, wd, 1);
        fill(x, M * K);
        for (int k = 0; k < 256; k++) x[k] = 0.0f;
        x[K + 5] = 300.0f;
        for (int k = 0; k < K; k++) x[2 * K + k] *= 1e-20f;
        double ref[M * N];
        for (int i = 0; i < M; i++)
            for (int n = 0; n < N; n++) {
                float acc = 0.0f;
                for (int k = 0; k < K; k++) {
                    const float p = x[i * K + k] * wd[n * K + k];
                    acc = acc + p;
                }
                ref[i * N + n] = acc;
            }
        double bound[M * N];
        const int qb = 32;
        for (int i = 0; i < M; i++)
            for (int n = 0; n < N; n++) {
                double b = 0, mag = 0;
                for (int k0 = 0; k0 < K; k0 += qb) {
                    double amax = 0, sw = 0;
                    for (int k = k0; k < k0 + qb; k++) {
                        amax = fmax(amax, fabs(x[i * K + k]));
                        sw += fabs(wd[n * K + k]);
                        mag += fabs((double)x[i * K + k] * wd[n * K + k]);
                    }
                    b += 0.563 * amax / 127.0 * sw;
                }
                bound[i * N + n] = b + 1e-5 * mag + 1e-30;
            }
        RadParam p[] = {RAD_RANGE("M", 1, 8), RAD_INT("N", N), RAD_INT("K", K)};
        RadKArg a[3] = {weight(w, t, N, K), fbuf(x, M, K), fbuf(y, M, N)};
        for (int s = 0; s < N_ST; s++) {
            cr_assert_eq(call(find("gemm_nt", "q8act"), g_st[s], p, 3, M, a, 3), RAD_OK);
            for (int j = 0; j < M * N; j++)
                cr_assert(fabs(y[j] - ref[j]) <= bound[j], "%s %s y[%d]: %.9g vs %.9g, bound %.3g", rad_enc_info((RadEnc)t)->name,
                          st_name[s], j, y[j], ref[j], bound[j]);
            /* the declared row tolerance holds with the outlier too, K-quants included (their
             * activations are quantised in 32-element blocks, not q8_K's 256) */
            assert_rows_within(y, N, ref, M, N, find("gemm_nt", "q8act")->tolerance, rad_enc_info((RadEnc)t)->name);
        }
        free(w), free(wd), free(x), free(y);
    }
}

Test(ref, gemm_refusals_write_nothing) {
    enum { M = 3, N = 12, K = 64 };
    float wd[N * K], x[M * K], y[M * N];
    void *w = make_weight(RAD_Q4_1, N, K, wd);
    fill(x, M * K);
    memset(y, 0x5a, sizeof y);
    RadParam p[] = {RAD_RANGE("M", 1, 3), RAD_INT("N", N), RAD_INT("K", K)};
    for (int v = 0; v < 2; v++) {
        const RadKernel *k = find("gemm_nt", v ? "q8act" : "exact");
        RadKArg a[3] = {weight(w, RAD_Q4_1, N, K), fbuf(x, M, K - 1), fbuf(y, M, N)};
        cr_assert_eq(call(k, g_st[0], p, 3, M, a, 3), RAD_E_SHAPE, "x [3, 63] for K 64");
        a[1] = fbuf(x, M, K);
        a[0] = weight(w, RAD_Q4_1, N - 1, K);
        cr_assert_eq(call(k, g_st[0], p, 3, M, a, 3), RAD_E_SHAPE, "W rows != N");
        a[0] = weight(w, RAD_Q4_1, N, K);
        a[0].row_stride = 10; /* less than a row */
        cr_assert_eq(call(k, g_st[0], p, 3, M, a, 3), RAD_E_SHAPE, "row stride");
        a[0] = weight(w, RAD_Q4_1, N, K);
        a[0].dtype = RAD_F8_E4M3;
        cr_assert_eq(call(k, g_st[0], p, 3, M, a, 3), RAD_E_SHAPE, "an encoding outside the layout");
        a[0] = weight(w, RAD_Q4_1, N, K);
        cr_assert_eq(call(k, g_st[0], p, 3, M, a, 2), RAD_E_SHAPE, "operand count");
        RadParam p2[] = {RAD_RANGE("M", 1, 3), RAD_INT("N", N)};
        cr_assert_eq(call(k, g_st[0], p2, 2, M, a, 3), RAD_E_ARG, "K missing");
        RadKArg y4 = fbuf(y, M - 1, N);
        a[2] = y4;
        cr_assert_eq(call(k, g_st[0], p, 3, M, a, 3), RAD_E_SHAPE, "y has too few rows");
    }
    /* q4_1 with K = 48: not a whole number of blocks */
    RadParam p48[] = {RAD_RANGE("M", 1, 3), RAD_INT("N", N), RAD_INT("K", 48)};
    RadKArg a48[3] = {{w, RAD_Q4_1, N, 48, 40, {w}}, fbuf(x, M, 48), fbuf(y, M, N)};
    cr_assert_eq(call(find("gemm_nt", "exact"), g_st[0], p48, 3, M, a48, 3), RAD_E_SHAPE);
    assert_untouched(y, sizeof y, "gemm after refusals");
    free(w);
}

/* ---- gemm_nt2 / gemm_nt3: several weights over one x ---------------------------------------------- */

typedef struct MultiCase {
    const char *var;
    int n, M, K;
    RadDType t[3];
    int N[3];
} MultiCase;

/* The fused op against its `replaces` chain (docs/OPS.md): every output bit for bit what
 * gemm_nt writes for its part, in every state (ISA, threads), for parts of one encoding (x
 * quantised once) and of several (q4_k beside q6_k: two quantised layouts). */
Test(ref, gemm_nt2_nt3_equal_the_chain) {
    static const MultiCase cases[] = {
        {"q8act", 3, 1, 256, {RAD_Q4_1, RAD_Q4_1, RAD_Q4_1}, {64, 32, 32}},
        {"q8act", 3, 5, 256, {RAD_Q4_1, RAD_Q4_1, RAD_Q4_1}, {37, 13, 13}},
        {"q8act", 3, 1, 512, {RAD_Q4_K, RAD_Q4_K, RAD_Q6_K}, {40, 24, 24}},
        {"q8act", 3, 6, 512, {RAD_Q4_K, RAD_Q4_K, RAD_Q6_K}, {40, 24, 21}},
        {"q8act", 2, 1, 96, {RAD_Q4_1, RAD_Q4_1}, {301, 301}},
        {"q8act", 2, 7, 96, {RAD_Q8_0, RAD_Q4_0}, {50, 77}},
        /* what llama.cpp's Q4_K_M / Q5_K_M files fuse: q5_0 / q5_1 q and k beside a q8_0 v (one
         * quantisation), q5_0 gate beside q4_k up (32-element and K-quant scales in one row),
         * q4_0 beside q5_0 (paired and natural codes: two quantisations) */
        {"q8act", 3, 1, 576, {RAD_Q5_0, RAD_Q5_0, RAD_Q8_0}, {64, 32, 32}},
        {"q8act", 3, 5, 96, {RAD_Q5_1, RAD_Q5_1, RAD_Q8_0}, {37, 13, 13}},
        {"q8act", 2, 1, 512, {RAD_Q5_0, RAD_Q4_K}, {77, 77}},
        {"q8act", 2, 17, 512, {RAD_Q5_0, RAD_Q4_K}, {41, 41}},
        {"q8act", 3, 4, 768, {RAD_Q4_K, RAD_Q5_K, RAD_Q6_K}, {40, 24, 24}},
        {"q8act", 3, 5, 512, {RAD_Q5_1, RAD_Q5_K, RAD_Q4_0}, {19, 23, 29}},
        {"q8act", 3, 1, 256, {RAD_Q8_0, RAD_Q6_K, RAD_Q5_0}, {33, 11, 11}},
        {"q8tile", 3, 17, 576, {RAD_Q5_0, RAD_Q5_0, RAD_Q8_0}, {64, 32, 32}},
        {"q8tile", 2, 20, 512, {RAD_Q5_0, RAD_Q4_K}, {41, 41}},
        {"q8tile", 3, 16, 768, {RAD_Q4_K, RAD_Q5_K, RAD_Q6_K}, {40, 24, 24}},
        {"q8tile", 3, 21, 512, {RAD_Q5_1, RAD_Q4_1, RAD_Q4_0}, {19, 23, 29}},
        {"bf16dot", 3, 1, 96, {RAD_BF16, RAD_BF16, RAD_BF16}, {33, 11, 11}},
        {"bf16dot", 2, 9, 200, {RAD_BF16, RAD_BF16}, {37, 70}},
        {"bf16dot", 2, 1, 576, {RAD_F16, RAD_BF16}, {67, 70}},
        {"bf16dot", 3, 6, 200, {RAD_F16, RAD_F16, RAD_BF16}, {65, 11, 11}},
        {"exact", 3, 1, 96, {RAD_F32, RAD_F32, RAD_F32}, {33, 11, 11}},
        {"exact", 3, 4, 256, {RAD_Q4_1, RAD_Q4_1, RAD_Q4_K}, {29, 9, 9}},
        {"exact", 2, 1, 128, {RAD_Q8_0, RAD_F16}, {257, 257}},
        {"exact", 2, 5, 128, {RAD_BF16, RAD_Q4_0}, {19, 23}},
    };
    for (size_t ci = 0; ci < N_OF(cases); ci++) {
        const MultiCase *mc = &cases[ci];
        const char *op = mc->n == 2 ? "gemm_nt2" : "gemm_nt3";
        const RadKernel *fused = find(op, mc->var);
        cr_assert(fused, "%s:%s is in the table", op, mc->var);
        GemmData g[3];
        for (int i = 0; i < mc->n; i++) gemm_make(&g[i], mc->t[i], mc->M, mc->N[i], mc->K, 1);
        float *chain[3], *got[3];
        for (int i = 0; i < mc->n; i++) {
            chain[i] = xmalloc(sizeof(float) * (size_t)mc->M * mc->N[i]);
            got[i] = xmalloc(sizeof(float) * (size_t)mc->M * mc->N[i]);
        }
        for (int st = 0; st < N_ST; st++) {
            for (int i = 0; i < mc->n; i++) { /* the chain, every part against part 0's x */
                GemmData gi = g[i];
                gi.x = g[0].x, gi.xs = g[0].xs;
                cr_assert_eq(gemm_run("gemm_nt", mc->var, g_st[st], &gi, 0, mc->M, chain[i], 0), RAD_OK);
                memset(got[i], 0x5a, sizeof(float) * (size_t)mc->M * mc->N[i]);
            }
            RadParam p[5];
            uint32_t np = 0;
            p[np++] = (RadParam)RAD_RANGE("M", 1, 64);
            static const char *const nn[3] = {"N0", "N1", "N2"};
            for (int i = 0; i < mc->n; i++) p[np++] = (RadParam)RAD_INT(nn[i], mc->N[i]);
            p[np++] = (RadParam)RAD_INT("K", mc->K);
            RadKArg a[7];
            uint32_t na = 0;
            for (int i = 0; i < mc->n; i++) a[na++] = weight(g[i].w, mc->t[i], (uint64_t)mc->N[i], (uint64_t)mc->K);
            a[na++] = fbuf_s(g[0].x, (uint64_t)mc->M, (uint64_t)mc->K, (uint64_t)g[0].xs);
            for (int i = 0; i < mc->n; i++) a[na++] = fbuf(got[i], (uint64_t)mc->M, (uint64_t)mc->N[i]);
            cr_assert_eq(call(fused, g_st[st], p, np, mc->M, a, na), RAD_OK, "case %zu, %s", ci, st_name[st]);
            for (int i = 0; i < mc->n; i++) {
                char what[96];
                snprintf(what, sizeof what, "%s:%s case %zu part %d, %s", op, mc->var, ci, i, st_name[st]);
                assert_bitwise(got[i], chain[i], (size_t)mc->M * mc->N[i], what);
            }
            /* refusals write nothing: a part's rows not N_i, one operand short */
            for (int i = 0; i < mc->n; i++) memset(got[i], 0x5a, sizeof(float) * (size_t)mc->M * mc->N[i]);
            RadKArg bad = a[mc->n - 1];
            a[mc->n - 1] = weight(g[mc->n - 1].w, mc->t[mc->n - 1], (uint64_t)mc->N[mc->n - 1] - 1, (uint64_t)mc->K);
            cr_assert_eq(call(fused, g_st[st], p, np, mc->M, a, na), RAD_E_SHAPE, "W rows != N");
            a[mc->n - 1] = bad;
            cr_assert_eq(call(fused, g_st[st], p, np, mc->M, a, na - 1), RAD_E_SHAPE, "operand count");
            cr_assert_eq(call(fused, g_st[st], p, np - 1, mc->M, a, na), RAD_E_ARG, "K missing");
            for (int i = 0; i < mc->n; i++) assert_untouched(got[i], sizeof(float) * (size_t)mc->M * mc->N[i], "after refusals");
        }
        for (int i = 0; i < mc->n; i++) gemm_free(&g[i]), free(chain[i]), free(got[i]);
    }
}

/* Decode on two threads runs from both ends of the weight rows (kernels/README.md): every output
 * bit for bit what fixed halves give (RAD_REF_TWO_ENDS=0), and what one thread gives, for one
 * weight and for gemm_nt3's parts in a row. */
Test(ref, decode_from_both_ends_equals_halves) {
    setenv("RAD_REF_TWO_ENDS", "0", 1);
    void *halves = init_state(NULL, 2, 1);
    unsetenv("RAD_REF_TWO_ENDS");
    void *ends = init_state(NULL, 2, 1);
    static const struct { RadDType t; int N, K; } cases[] = {
        {RAD_Q4_1, 1536, 576}, {RAD_Q4_1, 577, 96}, {RAD_Q8_0, 4099, 64}, {RAD_Q6_K, 301, 512}, {RAD_Q4_K, 1023, 256}};
    for (size_t ci = 0; ci < N_OF(cases); ci++) {
        GemmData g;
        gemm_make(&g, cases[ci].t, 1, cases[ci].N, cases[ci].K, 1);
        float *a = xmalloc(sizeof(float) * (size_t)g.N), *b = xmalloc(sizeof(float) * (size_t)g.N);
        float *c = xmalloc(sizeof(float) * (size_t)g.N);
        for (int rep = 0; rep < 4; rep++) { /* the meeting point moves with timing: several runs */
            cr_assert_eq(gemm_run("gemm_nt", "q8act", halves, &g, 0, 1, a, 2), RAD_OK);
            cr_assert_eq(gemm_run("gemm_nt", "q8act", ends, &g, 0, 1, b, 2), RAD_OK);
            cr_assert_eq(gemm_run("gemm_nt", "q8act", g_st[ST_BEST1], &g, 0, 1, c, 1), RAD_OK);
            assert_bitwise(b, a, (size_t)g.N, "both ends vs halves");
            assert_bitwise(b, c, (size_t)g.N, "both ends vs one thread");
        }
        free(a), free(b), free(c);
        gemm_free(&g);
    }
    /* gemm_nt3: the three parts' rows one after another, met anywhere */
    GemmData p[3];
    const int N3[3] = {576, 192, 192};
    float *y1[3], *y2[3];
    for (int i = 0; i < 3; i++) {
        gemm_make(&p[i], RAD_Q4_1, 1, N3[i], 576, 1);
        y1[i] = xmalloc(sizeof(float) * (size_t)N3[i]);
        y2[i] = xmalloc(sizeof(float) * (size_t)N3[i]);
    }
    RadParam prm[] = {RAD_RANGE("M", 1, 1), RAD_INT("N0", N3[0]), RAD_INT("N1", N3[1]), RAD_INT("N2", N3[2]), RAD_INT("K", 576)};
    for (int rep = 0; rep < 4; rep++) {
        for (int v = 0; v < 2; v++) {
            RadKArg a[7];
            for (int i = 0; i < 3; i++) a[i] = weight(p[i].w, RAD_Q4_1, (uint64_t)N3[i], 576), a[4 + i] = fbuf(v ? y2[i] : y1[i], 1, (uint64_t)N3[i]);
            a[3] = fbuf(p[0].x, 1, 576);
            Call cl = {NULL, NULL, 2};
            cr_assert_eq(call_x(find("gemm_nt3", "q8act"), v ? ends : halves, prm, 5, 1, a, 7, &cl), RAD_OK);
        }
        for (int i = 0; i < 3; i++) assert_bitwise(y2[i], y1[i], (size_t)N3[i], "gemm_nt3 both ends vs halves");
    }
    for (int i = 0; i < 3; i++) gemm_free(&p[i]), free(y1[i]), free(y2[i]);
    g_lib->fini(halves);
    g_lib->fini(ends);
}

/* libref packs the 32-element block formats at load, eight rows interleaved (ref_gemm_x8.c), and
 * q4_k at the AVX-512 VNNI level (ref_gemm_x8k.c): the q8act GEMMs reading the packed layout
 * give, in every state (AVX-512 VNNI, AVX2, portable), thread count and batch, the bits of the
 * portable dot on the stored layout; gemm_nt3's packed parts equal the chain; the exact variant
 * and odd shapes refuse a packed weight, writing nothing. */
Test(ref, packed_equals_the_stored_layout_portable) {
    cr_assert(g_lib->struct_size >= offsetof(RadKernelLib, pack) + sizeof g_lib->pack && g_lib->pack_size && g_lib->pack);
    static const RadDType enc[] = {RAD_Q4_1, RAD_Q4_0, RAD_Q5_0, RAD_Q5_1, RAD_Q8_0, RAD_Q4_K};
    for (size_t e = 0; e < N_OF(enc); e++)
        cr_assert(find("gemm_nt", "q8act")->packed_encs & RAD_ENC_BIT((RadEnc)enc[e]));
    cr_assert_eq(find("gemm_nt", "exact")->packed_encs, 0);
    cr_assert_eq(g_lib->pack_size(g_st[ST_BEST3], RAD_Q4_1, 12, 64), 0, "rows not a multiple of 8: stored layout");
    cr_assert_eq(g_lib->pack_size(g_st[ST_BEST3], RAD_Q4_1, 16, 64), 16 * 2 * 20);
    cr_assert_eq(g_lib->pack_size(g_st[ST_BEST3], RAD_Q5_K, 16, 256), 0, "q5_k: stored layout");
    cr_assert_eq(g_lib->pack_size(g_st[ST_BEST3], RAD_Q6_K, 16, 256), 0, "q6_k: stored layout");
    void *avx2 = init_state("avx2", 3, 1);
    /* q4_k: packed by a state at the avx512 level (below it the stored layout's AVX2 dot is the
     * faster one), 256 columns a super-block; every state reads a packed q4_k weight */
    cr_assert_eq(g_lib->pack_size(g_st[ST_BEST3], RAD_Q4_K, 16, 512), cpu_has_vnni() ? (size_t)16 * 2 * 144 : 0);
    cr_assert_eq(g_lib->pack_size(avx2, RAD_Q4_K, 16, 512), 0, "q4_k at avx2: stored layout");
    cr_assert_eq(g_lib->pack_size(g_st[ST_GEN3], RAD_Q4_K, 16, 512), 0, "q4_k portable: stored layout");
    cr_assert_eq(g_lib->pack_size(NULL, RAD_Q4_K, 16, 512), (size_t)16 * 2 * 144);
    cr_assert_eq(g_lib->pack_size(NULL, RAD_Q4_K, 12, 512), 0, "q4_k rows not a multiple of 8");
    cr_assert_eq(g_lib->pack_size(NULL, RAD_Q4_K, 16, 384), 0, "q4_k columns not whole super-blocks");
    void *const states[] = {g_st[ST_BEST3], g_st[ST_BEST1], avx2, g_st[ST_GEN3], g_st[ST_GEN1]};
    static const char *const names[] = {"best/3 threads", "best/1 thread", "avx2/3 threads", "generic/3 threads", "generic/1 thread"};
    static const struct { int M, N, K, real; } cases[] = {
        {40, 576, 576, 1}, {40, 1536, 576, 1}, {1, 1536, 576, 1}, {1, 8, 32, 0}, {5, 40, 96, 1}, {9, 64, 160, 0}, {3, 24, 576, 1}, {17, 16, 64, 1}, {2, 200, 256, 0}};
    /* q4_k's: K whole super-blocks */
    static const struct { int M, N, K, real; } kcases[] = {
        {40, 256, 1536, 1}, {1, 1536, 512, 1}, {1, 8, 256, 0}, {5, 40, 768, 1}, {9, 64, 256, 0}, {3, 24, 1024, 1}, {17, 16, 512, 1}, {2, 200, 256, 0}, {1, 200, 2304, 1}};
    for (size_t e = 0; e < N_OF(enc); e++)
        for (size_t ci = 0; ci < (enc[e] == RAD_Q4_K ? N_OF(kcases) : N_OF(cases)); ci++) {
            const RadDType t = enc[e];
            const char *en = rad_enc_info((RadEnc)t)->name;
            GemmData g;
            if (t == RAD_Q4_K) gemm_make(&g, t, kcases[ci].M, kcases[ci].N, kcases[ci].K, kcases[ci].real);
            else gemm_make(&g, t, cases[ci].M, cases[ci].N, cases[ci].K, cases[ci].real);
            const size_t pb = g_lib->pack_size(NULL, t, (uint64_t)g.N, (uint64_t)g.K);
            cr_assert_eq(pb, (size_t)g.N * row_bytes(t, (uint64_t)g.K), "%s: packed bytes", en);
            GemmData gp = g;
            gp.w = aligned_alloc(64, (pb + 63) / 64 * 64);
            gp.t = (RadDType)(t | RAD_PACKED);
            cr_assert_eq(g_lib->pack(NULL, t, (uint64_t)g.N, (uint64_t)g.K, g.w, row_bytes(t, (uint64_t)g.K), gp.w), RAD_OK);
            const size_t ny = (size_t)g.M * g.N;
            float *want = xmalloc(sizeof(float) * ny), *y = xmalloc(sizeof(float) * ny);
            cr_assert_eq(gemm_run("gemm_nt", "q8act", g_st[ST_GEN1], &g, 0, g.M, want, 0), RAD_OK);
            /* q8tile too: on AVX-512 VNNI its tiles come from the packed groups (the same bits) */
            for (int v = 0; v < 2; v++)
                for (size_t st = 0; st < N_OF(states); st++)
                    for (uint32_t thr = 0; thr <= 2; thr += 2) {
                        const char *var = v ? "q8tile" : "q8act";
                        char what[160];
                        snprintf(what, sizeof what, "%s packed %s M=%d N=%d K=%d, %s, %u threads asked", var, en, g.M, g.N, g.K, names[st],
                                 thr);
                        memset(y, 0x5a, sizeof(float) * ny);
                        cr_assert_eq(gemm_run("gemm_nt", var, states[st], &gp, 0, g.M, y, thr), RAD_OK, "%s", what);
                        assert_bitwise(y, want, ny, what);
                        for (int r = 0; r < g.M; r += 4) { /* a row alone: the batch's row */
                            cr_assert_eq(gemm_run("gemm_nt", var, states[st], &gp, r, 1, y, thr), RAD_OK);
                            assert_bitwise(y, want + (size_t)r * g.N, (size_t)g.N, what);
                        }
                    }
            /* refusals: the exact variant, and a packed weight whose rows are not what pack wrote */
            memset(y, 0x5a, sizeof(float) * ny);
            cr_assert_eq(gemm_run("gemm_nt", "exact", g_st[ST_BEST3], &gp, 0, g.M, y, 0), RAD_E_SHAPE, "exact takes no packed weight");
            if (g.N > 8) {
                GemmData bad = gp;
                bad.N = g.N - 1;
                cr_assert_eq(gemm_run("gemm_nt", "q8act", g_st[ST_BEST3], &bad, 0, g.M, y, 0), RAD_E_SHAPE, "N not a multiple of 8");
            }
            assert_untouched(y, sizeof(float) * ny, "after refusals");
            free(gp.w), free(want), free(y);
            gemm_free(&g);
        }
    g_lib->fini(avx2);
    /* gemm_nt3 (q, k, v): parts of three encodings, two packed (q5_0 or q4_k, and q8_0) beside a
     * stored q6_k (the quantised rows carry every part's layout), against the chain of gemm_nt */
    const int N3[3] = {576, 192, 192}, K = 768;
    for (int cfg = 0; cfg < 2; cfg++)
    for (int M = 1; M <= 40; M += M == 1 ? 2 : 37) {
        const RadDType e3[3] = {cfg ? RAD_Q4_K : RAD_Q5_0, RAD_Q6_K, RAD_Q8_0};
        GemmData p[3];
        void *pw[3];
        RadDType pt[3];
        float *chain[3], *got[3];
        for (int i = 0; i < 3; i++) {
            gemm_make(&p[i], e3[i], M, N3[i], K, 1);
            const size_t pb = g_lib->pack_size(NULL, e3[i], (uint64_t)N3[i], K);
            pw[i] = pb ? aligned_alloc(64, pb) : NULL;
            pt[i] = pb ? (RadDType)(e3[i] | RAD_PACKED) : e3[i];
            if (pb) cr_assert_eq(g_lib->pack(NULL, e3[i], (uint64_t)N3[i], K, p[i].w, row_bytes(e3[i], K), pw[i]), RAD_OK);
            chain[i] = xmalloc(sizeof(float) * (size_t)M * N3[i]);
            got[i] = xmalloc(sizeof(float) * (size_t)M * N3[i]);
        }
        cr_assert(!pw[1] && pw[0] && pw[2], "q6_k stays stored; q5_0 or q4_k, and q8_0 are packed");
        RadParam prm[] = {RAD_RANGE("M", 1, 64), RAD_INT("N0", N3[0]), RAD_INT("N1", N3[1]), RAD_INT("N2", N3[2]), RAD_INT("K", K)};
        for (int st = 0; st < N_ST; st++) {
            RadKArg a[7];
            for (int i = 0; i < 3; i++) {
                GemmData gi = p[i];
                gi.x = p[0].x, gi.xs = p[0].xs, gi.w = pw[i] ? pw[i] : p[i].w, gi.t = pt[i];
                cr_assert_eq(gemm_run("gemm_nt", "q8act", g_st[st], &gi, 0, M, chain[i], 0), RAD_OK);
                a[i] = weight(gi.w, pt[i], (uint64_t)N3[i], K);
                a[4 + i] = fbuf(got[i], (uint64_t)M, (uint64_t)N3[i]);
            }
            a[3] = fbuf_s(p[0].x, (uint64_t)M, K, (uint64_t)p[0].xs);
            Call cl = {NULL, NULL, 2};
            cr_assert_eq(call_x(find("gemm_nt3", "q8act"), g_st[st], prm, 5, M, a, 7, &cl), RAD_OK);
            for (int i = 0; i < 3; i++) assert_bitwise(got[i], chain[i], (size_t)M * N3[i], "gemm_nt3 packed vs the chain");
        }
        for (int i = 0; i < 3; i++) gemm_free(&p[i]), free(pw[i]), free(chain[i]), free(got[i]);
    }
}

/* ---- rmsnorm, add_rmsnorm, add, silu_mul ------------------------------------------------------------- */

static void ref_rmsnorm_row(const float *x, const float *g, float *out, int N, float eps) {
    float ss = 0.0f;
    for (int j = 0; j < N; j++) {
        const float sq = x[j] * x[j];
        ss = ss + sq;
    }
    const float mean = ss / (float)N;
    const float r = 1.0f / sqrtf(mean + eps);
    for (int j = 0; j < N; j++) {
        const float xr = x[j] * r;
        out[j] = xr * g[j];
    }
}

Test(ref, rmsnorm_both_variants) {
    static const int shapes[][2] = {{1, 576}, {3, 45}, {7, 1}, {2, 7}, {130, 600}};
    for (size_t c = 0; c < N_OF(shapes); c++) {
        const int M = shapes[c][0], N = shapes[c][1];
        float *g = xmalloc(sizeof(float) * N), *x = xmalloc(sizeof(float) * M * N), *out = xmalloc(sizeof(float) * M * N);
        float *ref = xmalloc(sizeof(float) * M * N), *xi = xmalloc(sizeof(float) * M * N);
        double *refd = xmalloc(sizeof(double) * M * N);
        fill(g, N), fill(x, (size_t)M * N);
        if (c == 1) x[5] = 1e18f; /* large: the sum of squares reaches f32's top */
        for (int i = 0; i < M; i++) ref_rmsnorm_row(x + i * N, g, ref + i * N, N, 1e-5f);
        for (int j = 0; j < M * N; j++) refd[j] = ref[j];
        RadParam p[] = {RAD_RANGE("M", 1, 256), RAD_INT("N", N), RAD_FLOAT("eps", 1e-5)};
        for (int s = 0; s < N_ST; s++) {
            RadKArg a[3] = {weight(g, RAD_F32, 1, (uint64_t)N), fbuf(x, (uint64_t)M, (uint64_t)N), fbuf(out, (uint64_t)M, (uint64_t)N)};
            cr_assert_eq(call(find("rmsnorm", "exact"), g_st[s], p, 3, M, a, 3), RAD_OK);
            assert_bitwise(out, ref, (size_t)M * N, "rmsnorm/exact");
            cr_assert_eq(call(find("rmsnorm", "simd"), g_st[s], p, 3, M, a, 3), RAD_OK);
            assert_rows_within(out, (size_t)N, refd, M, N, find("rmsnorm", "simd")->tolerance, "rmsnorm/simd");
            /* in place: out aliases x */
            memcpy(xi, x, sizeof(float) * M * N);
            a[1] = fbuf(xi, (uint64_t)M, (uint64_t)N), a[2] = a[1];
            cr_assert_eq(call(find("rmsnorm", "exact"), g_st[s], p, 3, M, a, 3), RAD_OK);
            assert_bitwise(xi, ref, (size_t)M * N, "rmsnorm/exact in place");
        }
        free(g), free(x), free(out), free(ref), free(xi), free(refd);
    }
    /* a bf16 and an f16 gamma (exact widenings) */
    enum { M = 2, N = 40 };
    uint16_t gb[N], gh[N];
    float gd[N], x[M * N], out[M * N], ref[M * N];
    fill(x, M * N);
    for (int j = 0; j < N; j++) gb[j] = rad_f32_to_bf16(frand()), gh[j] = rad_f32_to_f16(frand());
    for (int v = 0; v < 2; v++) {
        for (int j = 0; j < N; j++) gd[j] = v ? rad_f16_to_f32(gh[j]) : rad_bf16_to_f32(gb[j]);
        for (int i = 0; i < M; i++) ref_rmsnorm_row(x + i * N, gd, ref + i * N, N, 1e-6f);
        RadParam p[] = {RAD_RANGE("M", 1, 8), RAD_INT("N", N), RAD_FLOAT("eps", 1e-6)};
        RadKArg a[3] = {weight(v ? (void *)gh : (void *)gb, v ? RAD_F16 : RAD_BF16, 1, N), fbuf(x, M, N), fbuf(out, M, N)};
        for (int s = 0; s < N_ST; s++) {
            cr_assert_eq(call(find("rmsnorm", "exact"), g_st[s], p, 3, M, a, 3), RAD_OK);
            assert_bitwise(out, ref, M * N, v ? "rmsnorm f16 gamma" : "rmsnorm bf16 gamma");
        }
    }
}

/* add_rmsnorm equals its `replaces` chain add(res, x -> res); rmsnorm(res -> out): bitwise for
 * "exact", within the bound for "simd"; out may alias x. */
Test(ref, add_rmsnorm_replaces_chain) {
    enum { M = 5, N = 72 };
    float g[N], x[M * N], res0[M * N], res[M * N], out[M * N], res2[M * N], out2[M * N], xa[M * N];
    double outd[M * N];
    fill(g, N), fill(x, M * N), fill(res0, M * N);
    memcpy(res2, res0, sizeof res0);
    RadParam p[] = {RAD_RANGE("M", 1, 8), RAD_INT("N", N), RAD_FLOAT("eps", 1e-6)};
    RadKArg ad[3] = {fbuf(res2, M, N), fbuf(x, M, N), fbuf(res2, M, N)};
    cr_assert_eq(call(find("add", NULL), g_st[0], p, 2, M, ad, 3), RAD_OK);
    RadKArg nm[3] = {weight(g, RAD_F32, 1, N), fbuf(res2, M, N), fbuf(out2, M, N)};
    cr_assert_eq(call(find("rmsnorm", "exact"), g_st[0], p, 3, M, nm, 3), RAD_OK);
    for (int j = 0; j < M * N; j++) outd[j] = out2[j];
    for (int s = 0; s < N_ST; s++)
        for (int v = 0; v < 2; v++) {
            const RadKernel *k = find("add_rmsnorm", v ? "simd" : "exact");
            for (int alias = 0; alias < 2; alias++) {
                memcpy(res, res0, sizeof res);
                memcpy(xa, x, sizeof x);
                RadKArg f[4] = {weight(g, RAD_F32, 1, N), fbuf(xa, M, N), fbuf(res, M, N), fbuf(alias ? xa : out, M, N)};
                cr_assert_eq(call(k, g_st[s], p, 3, M, f, 4), RAD_OK);
                assert_bitwise(res, res2, M * N, "add_rmsnorm res");
                if (v) assert_rows_within(alias ? xa : out, N, outd, M, N, k->tolerance, "add_rmsnorm/simd out");
                else assert_bitwise(alias ? xa : out, out2, M * N, "add_rmsnorm/exact out");
            }
        }
}

Test(ref, add_bitwise_and_aliases) {
    enum { M = 5, N = 37 };
    float x[M * N], y[M * N], out[M * N], ref[M * N], xa[M * N];
    fill(x, M * N), fill(y, M * N);
    for (int i = 0; i < M * N; i++) ref[i] = x[i] + y[i];
    RadParam p[] = {RAD_RANGE("M", 1, 8), RAD_INT("N", N)};
    for (int s = 0; s < N_ST; s++) {
        RadKArg a[3] = {fbuf(x, M, N), fbuf(y, M, N), fbuf(out, M, N)};
        cr_assert_eq(call(find("add", NULL), g_st[s], p, 2, M, a, 3), RAD_OK);
        assert_bitwise(out, ref, M * N, "add");
        memcpy(xa, x, sizeof x);
        a[0] = fbuf(xa, M, N), a[2] = a[0];
        cr_assert_eq(call(find("add", NULL), g_st[s], p, 2, M, a, 3), RAD_OK);
        assert_bitwise(xa, ref, M * N, "add, out aliases a");
        memcpy(xa, y, sizeof y);
        a[0] = fbuf(x, M, N), a[1] = fbuf(xa, M, N), a[2] = a[1];
        cr_assert_eq(call(find("add", NULL), g_st[s], p, 2, M, a, 3), RAD_OK);
        assert_bitwise(xa, ref, M * N, "add, out aliases b");
    }
}

Test(ref, silu_mul) {
    enum { M = 4, N = 203 };
    float g[M * N], u[M * N], out[M * N], ga[M * N];
    double ref[M * N];
    fill(g, M * N), fill(u, M * N);
    for (int i = 0; i < M * N; i++) g[i] *= 12.0f;
    g[0] = 30.0f, g[1] = -30.0f, g[2] = 0.0f, g[3] = -100.0f, g[4] = 100.0f, g[5] = -88.0f, g[6] = -89.0f, g[7] = 88.8f;
    g[N] = -1e-30f, g[N + 1] = 1e-40f; /* tiny, subnormal */
    for (int i = 0; i < M * N; i++) ref[i] = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
    RadParam p[] = {RAD_RANGE("M", 1, 8), RAD_INT("N", N)};
    const RadKernel *k = find("silu_mul", NULL);
    for (int s = 0; s < N_ST; s++) {
        RadKArg a[3] = {fbuf(g, M, N), fbuf(u, M, N), fbuf(out, M, N)};
        cr_assert_eq(call(k, g_st[s], p, 2, M, a, 3), RAD_OK);
        assert_rows_within(out, N, ref, M, N, k->tolerance, st_name[s]);
        cr_assert(!isnan(out[3]) && fabsf(out[3]) == 0.0f, "silu(-100)·u = %g: -0·u, not NaN", out[3]);
        cr_assert(!isnan(out[6]));
        memcpy(ga, g, sizeof g); /* out aliases gate */
        a[0] = fbuf(ga, M, N), a[2] = a[0];
        cr_assert_eq(call(k, g_st[s], p, 2, M, a, 3), RAD_OK);
        assert_rows_within(ga, N, ref, M, N, k->tolerance, "silu_mul in place");
    }
}

/* gelu_tanh_mul against PyTorch's tanh form in double; large |x| saturate without NaN. */
Test(ref, gelu_tanh_mul) {
    enum { M = 3, N = 203 };
    float g[M * N], u[M * N], out[M * N], ga[M * N];
    double ref[M * N];
    fill(g, M * N), fill(u, M * N);
    for (int i = 0; i < M * N; i++) g[i] *= 8.0f;
    g[0] = 30.0f, g[1] = -30.0f, g[2] = 0.0f, g[3] = -100.0f, g[4] = 100.0f, g[5] = -1e-30f, g[6] = 1e-40f;
    for (int i = 0; i < M * N; i++) {
        const double x = g[i], t = 0.7978845608028654 * (x + 0.044715 * x * x * x);
        ref[i] = 0.5 * x * (1.0 + tanh(t)) * u[i];
    }
    RadParam p[] = {RAD_RANGE("M", 1, 8), RAD_INT("N", N)};
    const RadKernel *k = find("gelu_tanh_mul", NULL);
    cr_assert(k->tolerance <= 1e-6);
    for (int s = 0; s < N_ST; s++) {
        RadKArg a[3] = {fbuf(g, M, N), fbuf(u, M, N), fbuf(out, M, N)};
        cr_assert_eq(call(k, g_st[s], p, 2, M, a, 3), RAD_OK);
        assert_rows_within(out, N, ref, M, N, k->tolerance, st_name[s]);
        for (int i = 0; i < M * N; i++) cr_assert(!isnan(out[i]), "%s: NaN at %d (gate %g)", st_name[s], i, g[i]);
        cr_assert(fabsf(out[3]) == 0.0f && out[4] == 100.0f * u[4], "%s: saturation", st_name[s]);
        memcpy(ga, g, sizeof g); /* out aliases gate */
        a[0] = fbuf(ga, M, N), a[2] = a[0];
        cr_assert_eq(call(k, g_st[s], p, 2, M, a, 3), RAD_OK);
        assert_rows_within(ga, N, ref, M, N, k->tolerance, "gelu_tanh_mul in place");
    }
}

/* add_bias and scale: one IEEE operation an element, bit for bit; an f16 bias widens exactly. */
Test(ref, add_bias_and_scale_bitwise) {
    enum { M = 5, N = 37 };
    float x[M * N], xa[M * N], b[N], ref[M * N];
    uint16_t bh[N];
    fill(x, M * N), fill(b, N);
    for (int j = 0; j < N; j++) bh[j] = rad_f32_to_f16(b[j]), b[j] = rad_f16_to_f32(bh[j]);
    for (int i = 0; i < M * N; i++) ref[i] = x[i] + b[i % N];
    RadParam p[] = {RAD_RANGE("M", 1, 8), RAD_INT("N", N), RAD_FLOAT("factor", 25.298221281347036)};
    for (int s = 0; s < N_ST; s++)
        for (int h = 0; h < 2; h++) {
            memcpy(xa, x, sizeof x);
            RadKArg a[2] = {h ? weight(bh, RAD_F16, 1, N) : weight(b, RAD_F32, 1, N), fbuf(xa, M, N)};
            cr_assert_eq(call(find("add_bias", NULL), g_st[s], p, 2, M, a, 2), RAD_OK);
            assert_bitwise(xa, ref, M * N, h ? "add_bias f16" : "add_bias");
            RadKArg bad[2] = {weight(b, RAD_F32, 1, N - 1), fbuf(xa, M, N)};
            cr_assert_eq(call(find("add_bias", NULL), g_st[s], p, 2, M, bad, 2), RAD_E_SHAPE, "a short bias");
        }
    const float f = (float)25.298221281347036;
    for (int i = 0; i < M * N; i++) ref[i] = x[i] * f;
    for (int s = 0; s < N_ST; s++) {
        memcpy(xa, x, sizeof x);
        RadKArg a[1] = {fbuf(xa, M, N)};
        cr_assert_eq(call(find("scale", NULL), g_st[s], p, 3, M, a, 1), RAD_OK);
        assert_bitwise(xa, ref, M * N, "scale");
    }
}

/* head_rmsnorm is rmsnorm over each head_dim slice: bit for bit the exact rmsnorm of the
 * [M * n_head, head_dim] view, in place, for both variants' classes. */
Test(ref, head_rmsnorm_is_rmsnorm_per_head) {
    enum { M = 3, NH = 4, HD = 72 };
    float g[HD], x[M * NH * HD], xa[M * NH * HD], ref[M * NH * HD];
    double refd[M * NH * HD];
    fill(g, HD), fill(x, M * NH * HD);
    for (int i = 0; i < M * NH; i++) ref_rmsnorm_row(x + i * HD, g, ref + i * HD, HD, 1e-6f);
    for (int j = 0; j < M * NH * HD; j++) refd[j] = ref[j];
    RadParam p[] = {RAD_RANGE("M", 1, 8), RAD_INT("n_head", NH), RAD_INT("head_dim", HD), RAD_FLOAT("eps", 1e-6)};
    for (int s = 0; s < N_ST; s++)
        for (int v = 0; v < 2; v++) {
            const RadKernel *k = find("head_rmsnorm", v ? "simd" : "exact");
            memcpy(xa, x, sizeof x);
            RadKArg a[2] = {weight(g, RAD_F32, 1, HD), fbuf(xa, M, NH * HD)};
            cr_assert_eq(call(k, g_st[s], p, 4, M, a, 2), RAD_OK);
            if (v) assert_rows_within(xa, HD, refd, M * NH, HD, k->tolerance, "head_rmsnorm/simd");
            else assert_bitwise(xa, ref, M * NH * HD, "head_rmsnorm/exact");
            RadKArg bad[2] = {weight(g, RAD_F32, 1, HD - 1), fbuf(xa, M, NH * HD)};
            cr_assert_eq(call(k, g_st[s], p, 4, M, bad, 2), RAD_E_SHAPE, "a gamma not of head_dim");
        }
}

/* ---- rope --------------------------------------------------------------------------------------------- */

/* docs/OPS.md's frequency code, one f32 operation at a time. */
static float ops_inv_freq(int i, int n_rot, double theta, int scaling, double factor, double lo, double hi, int orig) {
    const float e = (float)(2 * i) / (float)n_rot;
    float inv = 1.0f / (float)pow((double)(float)theta, (double)e);
    if (scaling == 1) inv = inv / (float)factor;
    if (scaling == 2) {
        const float low_wl = (float)((double)orig / lo), high_wl = (float)((double)orig / hi);
        const float r = 1.0f / inv;
        const float wavelen = r * (float)(2 * M_PI);
        if (wavelen > low_wl) {
            inv = inv / (float)factor;
        } else if (!(wavelen < high_wl)) {
            const float a = 1.0f / wavelen;
            const float b = a * (float)orig;
            const float s = (b - (float)lo) / (float)(hi - lo);
            const float t = (1.0f - s) * inv;
            const float t2 = t / (float)factor;
            const float u = s * inv;
            inv = t2 + u;
        }
    }
    return inv;
}

static int run_rope(void *st, float *x, const int32_t *pos, int M, int n_head, int hd, int n_rot, double theta, int scaling,
                    double factor, double lo, double hi, int orig) {
    RadParam p[] = {RAD_RANGE("M", 1, 256), RAD_INT("n_head", n_head), RAD_INT("head_dim", hd), RAD_INT("n_rot", n_rot),
                    RAD_FLOAT("theta", theta), RAD_INT("scaling", scaling), RAD_FLOAT("factor", factor),
                    RAD_FLOAT("low_freq_factor", lo), RAD_FLOAT("high_freq_factor", hi), RAD_INT("orig_ctx", orig)};
    RadKArg a[2] = {fbuf(x, (uint64_t)M, (uint64_t)(n_head * hd)), raw_i32(pos, (uint64_t)M)};
    return call(find("rope", NULL), st, p, N_OF(p), M, a, 2);
}

Test(ref, rope_all_scalings) {
    static const struct { int n_head, hd, n_rot, scaling; double theta, factor, lo, hi; int orig; } cfgs[] = {
        {3, 64, 64, 0, 10000.0, 1, 0, 0, 0},     {2, 128, 128, 2, 500000.0, 8, 1, 4, 8192},
        {5, 32, 16, 1, 10000.0, 4, 0, 0, 0},     {1, 24, 18, 0, 100000.0, 1, 0, 0, 0},
        {9, 64, 64, 0, 100000.0, 1, 0, 0, 0},    {4, 80, 80, 2, 500000.0, 32, 1, 4, 8192},
    };
    enum { M = 70 };
    int32_t pos[M];
    for (int i = 0; i < M; i++) pos[i] = i < 10 ? i : (int32_t)(rnd() % 131072);
    for (size_t c = 0; c < N_OF(cfgs); c++) {
        const int W = cfgs[c].n_head * cfgs[c].hd, hf = cfgs[c].n_rot / 2;
        float *x0 = xmalloc(sizeof(float) * M * W), *x = xmalloc(sizeof(float) * M * W), *x1 = xmalloc(sizeof(float) * M * W);
        double *ref = xmalloc(sizeof(double) * M * W);
        fill(x0, (size_t)M * W);
        float inv[256];
        for (int i = 0; i < hf; i++)
            inv[i] = ops_inv_freq(i, cfgs[c].n_rot, cfgs[c].theta, cfgs[c].scaling, cfgs[c].factor, cfgs[c].lo, cfgs[c].hi, cfgs[c].orig);
        for (int t = 0; t < M; t++)
            for (int h = 0; h < cfgs[c].n_head; h++) {
                const float *v = x0 + (size_t)t * W + h * cfgs[c].hd;
                double *o = ref + (size_t)t * W + h * cfgs[c].hd;
                for (int d = 0; d < cfgs[c].hd; d++) o[d] = v[d];
                for (int i = 0; i < hf; i++) {
                    const float a = (float)pos[t] * inv[i];
                    const double cs = cos((double)a), sn = sin((double)a);
                    o[i] = v[i] * cs - v[i + hf] * sn;
                    o[i + hf] = v[i + hf] * cs + v[i] * sn;
                }
            }
        for (int s = 0; s < N_ST; s++) {
            memcpy(x, x0, sizeof(float) * M * W);
            cr_assert_eq(run_rope(g_st[s], x, pos, M, cfgs[c].n_head, cfgs[c].hd, cfgs[c].n_rot, cfgs[c].theta, cfgs[c].scaling,
                                  cfgs[c].factor, cfgs[c].lo, cfgs[c].hi, cfgs[c].orig),
                         RAD_OK);
            assert_rows_within(x, (size_t)W, ref, M, W, find("rope", NULL)->tolerance, "rope");
            for (int t = 0; t < M; t++)
                for (int h = 0; h < cfgs[c].n_head; h++)
                    for (int d = cfgs[c].n_rot; d < cfgs[c].hd; d++) {
                        size_t o = (size_t)t * W + h * cfgs[c].hd + d;
                        cr_assert_eq(bits(x[o]), bits(x0[o]), "dims past n_rot are left as they are");
                    }
            for (int t = 0; t < 10 && pos[t] == 0; t++) assert_bitwise(x, x0, (size_t)W, "position 0 is the identity");
            if (s == 0) memcpy(x1, x, sizeof(float) * M * W);
            else if (s == ST_BEST1) assert_bitwise(x, x1, (size_t)M * W, "rope: 1 thread vs 3");
        }
        free(x0), free(x), free(x1), free(ref);
    }
}

/* Llama 3.1's worked values (docs/OPS.md): pair 32's frequency is 5.248460551919039e-4. */
Test(ref, rope_llama3_worked_value) {
    enum { HD = 128 };
    float x[HD] = {0};
    x[32] = 1.0f;
    const int32_t pos = 1000;
    cr_assert_eq(run_rope(g_st[0], x, &pos, 1, 1, HD, HD, 500000.0, 2, 8.0, 1.0, 4.0, 8192), RAD_OK);
    const double ang = 1000 * 5.248460551919039e-04;
    cr_assert(fabs(x[32] - cos(ang)) < 1e-6 && fabs(x[96] - sin(ang)) < 1e-6, "cos %.9g sin %.9g", x[32], x[96]);
}

Test(ref, rope_refusals_write_nothing) {
    float x[2 * 32], x0[2 * 32];
    fill(x, 64);
    memcpy(x0, x, sizeof x);
    const int32_t pos[2] = {1, 2}, neg[2] = {5, -1};
    for (int s = 0; s < N_ST; s++) {
        cr_assert_eq(run_rope(g_st[s], x, pos, 2, 1, 32, 7, 1e4, 0, 1, 0, 0, 0), RAD_E_ARG, "odd n_rot");
        cr_assert_eq(run_rope(g_st[s], x, pos, 2, 1, 32, 34, 1e4, 0, 1, 0, 0, 0), RAD_E_ARG, "n_rot > head_dim");
        cr_assert_eq(run_rope(g_st[s], x, pos, 2, 1, 32, 32, 1e4, 3, 1, 0, 0, 0), RAD_E_ARG, "unknown scaling");
        cr_assert_eq(run_rope(g_st[s], x, pos, 2, 1, 32, 32, 1e4, 2, 8, 4, 4, 8192), RAD_E_ARG, "llama3, high == low");
        cr_assert_eq(run_rope(g_st[s], x, neg, 2, 1, 32, 32, 1e4, 0, 1, 0, 0, 0), RAD_E_ARG, "a negative position");
        assert_bitwise(x, x0, 64, "rope after refusals");
    }
}

/* ---- gathers, all_reduce --------------------------------------------------------------------------------- */

/* argmax: the loop `if (x[j] > x[best]) best = j` from 0 — the first of equal maxima, NaN never
 * wins (a NaN first element answers 0), -0 equals +0 — and the sampler's greedy pick agrees. */
Test(ref, argmax_is_the_first_maximum) {
    enum { M = 6, N = 37 };
    float x[M * N], out[M];
    fill(x, M * N);
    float *r = x;
    r[5] = r[30] = 9.0f;                                 /* row 0: a tie, the lower wins: 5 */
    r += N, r[0] = 9.0f, r[1] = NAN, r[36] = 10.0f;      /* row 1: NaN skipped: 36 */
    r += N, r[0] = NAN, r[7] = 50.0f;                    /* row 2: NaN first: 0 */
    r += N;
    for (int j = 0; j < N; j++) r[j] = -1.0f - (float)j;
    r[3] = -0.0f, r[4] = 0.0f;                           /* row 3: -0 == +0, the lower: 3 */
    r += N, r[N - 1] = 1e30f;                            /* row 4: the last */
    r += N;
    for (int j = 0; j < N; j++) r[j] = -INFINITY;         /* row 5: all equal: 0 */
    const float want[M] = {5, 36, 0, 3, N - 1, 0};
    RadParam p[] = {RAD_RANGE("M", 1, M), RAD_INT("N", N)};
    for (int s = 0; s < N_ST; s++) {
        RadKArg a[2] = {fbuf(x, M, N), fbuf(out, M, 1)};
        memset(out, 0x5a, sizeof out);
        cr_assert_eq(call(find("argmax", NULL), g_st[s], p, 2, M, a, 2), RAD_OK);
        for (int i = 0; i < M; i++) {
            cr_assert_eq(out[i], want[i], "row %d: %g, want %g", i, (double)out[i], (double)want[i]);
            cr_assert_eq((float)rad_argmax(x + i * N, N), want[i], "row %d: the sampler's argmax", i);
        }
        a[1] = fbuf(out, M, 2); /* out is one column */
        cr_assert_eq(call(find("argmax", NULL), g_st[s], p, 2, M, a, 2), RAD_E_SHAPE);
    }
}

Test(ref, logits_gather) {
    enum { T = 9, N = 45, M = 4 };
    float x[T * N], out[M * N];
    fill(x, T * N);
    const int32_t rows[M] = {8, 2, 8, 0};
    RadParam p[] = {RAD_RANGE("M", 1, 4), RAD_INT("N", N)};
    for (int s = 0; s < N_ST; s++) {
        RadKArg a[3] = {fbuf(x, T, N), raw_i32(rows, M), fbuf(out, M, N)};
        cr_assert_eq(call(find("logits_gather", NULL), g_st[s], p, 2, M, a, 3), RAD_OK);
        for (int i = 0; i < M; i++) assert_bitwise(out + i * N, x + rows[i] * N, N, "logits_gather");
        const int32_t bad[M] = {0, 1, T, 1}, neg[M] = {0, -1, 2, 3};
        memset(out, 0x5a, sizeof out);
        a[1] = raw_i32(bad, M);
        cr_assert_eq(call(find("logits_gather", NULL), g_st[s], p, 2, M, a, 3), RAD_E_ARG);
        a[1] = raw_i32(neg, M);
        cr_assert_eq(call(find("logits_gather", NULL), g_st[s], p, 2, M, a, 3), RAD_E_ARG);
        assert_untouched(out, sizeof out, "logits_gather, bad row");
    }
}

Test(ref, all_reduce) {
    enum { M = 2, N = 8 };
    float x[M * N], x0[M * N];
    fill(x, M * N);
    memcpy(x0, x, sizeof x);
    RadParam p[] = {RAD_RANGE("M", 1, 4), RAD_INT("N", N), RAD_INT("exact", 1)};
    RadKArg a[1] = {fbuf(x, M, N)};
    for (int s = 0; s < N_ST; s++) {
        cr_assert_eq(call(find("all_reduce", NULL), g_st[s], p, 3, M, a, 1), RAD_OK);
        assert_bitwise(x, x0, M * N, "all_reduce over one rank is the identity");
    }
    void *two = NULL; /* more ranks need the communicator the root named */
    RadKernelLibConfig cfg = {sizeof cfg, 1, 0, 0, 2, NULL};
    cr_assert_eq(g_lib->init(&cfg, &two), RAD_E_ARG, "two ranks and no communicator");
}

/* Ranks as threads, each with its own init joining one communicator: the sum lands in every
 * rank's buffer, in rank order (the bits of x0 + x1 + x2, whatever the timing), over a row count
 * that does not split evenly; rows that differ between ranks are refused on every rank; and a
 * rank that aborts releases the others from a collective it never joins. */
enum { AR_W = 3, AR_M = 5, AR_N = 37 };
typedef struct ArRank {
    void *st;
    float x[AR_M * AR_N];
    int64_t m;           /* rows this rank issues */
    int abort_instead;   /* comm_abort(1) and leave, instead of issuing */
    const char *variant; /* NULL: the bitwise one (exact = 1); "arrival" (exact = 0) */
    int rc;
} ArRank;

static void *ar_rank(void *arg) {
    ArRank *r = arg;
    if (r->abort_instead) {
        g_lib->comm_abort(r->st, 1);
        r->rc = RAD_OK;
        return NULL;
    }
    RadParam p[] = {RAD_RANGE("M", r->m, r->m), RAD_INT("N", AR_N), RAD_INT("exact", r->variant ? 0 : 1)};
    RadKArg a[1] = {fbuf(r->x, (uint64_t)r->m, AR_N)};
    RadKernelArgs ka = {sizeof ka, p, 3, r->m, a, 1, NULL, NULL, NULL, r->st, 1, 1, NULL, 0};
    r->rc = find("all_reduce", r->variant ? r->variant : "generic")->run(&ka);
    return NULL;
}

static void ar_run(ArRank *rk) {
    pthread_t th[AR_W];
    for (int i = 0; i < AR_W; i++) cr_assert_eq(pthread_create(&th[i], NULL, ar_rank, &rk[i]), 0);
    for (int i = 0; i < AR_W; i++) pthread_join(th[i], NULL);
}

Test(ref, all_reduce_ranks) {
    cr_assert(g_lib->comm_id && g_lib->comm_abort, "libref names communicators");
    RadCommId id;
    cr_assert_eq(g_lib->comm_id(AR_W, &id), RAD_OK);
    static ArRank rk[AR_W];
    static float orig[AR_W][AR_M * AR_N];
    float want[AR_M * AR_N];
    for (int i = 0; i < AR_W; i++) {
        RadKernelLibConfig cfg = {sizeof cfg, 1, 0, (uint32_t)i, AR_W, &id};
        cr_assert_eq(g_lib->init(&cfg, &rk[i].st), RAD_OK, "rank %d joins", i);
        fill(rk[i].x, AR_M * AR_N);
        memcpy(orig[i], rk[i].x, sizeof orig[i]);
        rk[i].m = AR_M;
    }
    void *again = NULL;
    RadKernelLibConfig dup = {sizeof dup, 1, 0, 1, AR_W, &id};
    cr_assert_eq(g_lib->init(&dup, &again), RAD_E_ARG, "a rank joins once");
    for (int j = 0; j < AR_M * AR_N; j++) want[j] = (rk[0].x[j] + rk[1].x[j]) + rk[2].x[j];
    for (int round = 0; round < 50; round++) { /* the same bits on every rank, every round */
        float keep[AR_W][AR_M * AR_N];
        for (int i = 0; i < AR_W; i++) memcpy(keep[i], rk[i].x, sizeof keep[i]);
        ar_run(rk);
        for (int i = 0; i < AR_W; i++) {
            cr_assert_eq(rk[i].rc, RAD_OK, "round %d rank %d", round, i);
            assert_bitwise(rk[i].x, want, AR_M * AR_N, "the sum in rank order");
            memcpy(rk[i].x, keep[i], sizeof keep[i]);
        }
    }
    rk[2].m = AR_M - 1; /* one rank with other rows: refused everywhere, nothing written */
    float keep0[AR_M * AR_N];
    memcpy(keep0, rk[0].x, sizeof keep0);
    ar_run(rk);
    for (int i = 0; i < AR_W; i++) cr_assert_eq(rk[i].rc, RAD_E_SHAPE, "rank %d: rows differ", i);
    assert_bitwise(rk[0].x, keep0, AR_M * AR_N, "refused: untouched");
    rk[2].m = AR_M;
    rk[1].abort_instead = 1; /* rank 1 stopped: 0 and 2 do not wait for it */
    ar_run(rk);
    cr_assert_eq(rk[0].rc, RAD_E_IO);
    cr_assert_eq(rk[2].rc, RAD_E_IO);
    g_lib->comm_abort(rk[0].st, 0); /* every rank out of the step: usable again */
    rk[1].abort_instead = 0;
    ar_run(rk);
    for (int i = 0; i < AR_W; i++) cr_assert_eq(rk[i].rc, RAD_OK, "after the abort, rank %d", i);
    /* the arrival form (exact = 0): the sum in the order the ranks come, within a reordered
     * three-term sum's rounding of the rank-order one, the same bits on every rank */
    for (int i = 0; i < AR_W; i++) rk[i].variant = "arrival", memcpy(rk[i].x, orig[i], sizeof orig[i]);
    for (int round = 0; round < 50; round++) {
        float keep[AR_W][AR_M * AR_N];
        for (int i = 0; i < AR_W; i++) memcpy(keep[i], rk[i].x, sizeof keep[i]);
        ar_run(rk);
        for (int i = 0; i < AR_W; i++) {
            cr_assert_eq(rk[i].rc, RAD_OK, "arrival, round %d rank %d", round, i);
            assert_bitwise(rk[i].x, rk[0].x, AR_M * AR_N, "every rank holds the same sum");
            for (int j = 0; j < AR_M * AR_N; j++) {
                const float bound = 2 * 1.2e-7f * (fabsf(keep[0][j]) + fabsf(keep[1][j]) + fabsf(keep[2][j]));
                cr_assert_leq(fabsf(rk[i].x[j] - want[j]), bound, "arrival %d: %g vs %g", j, rk[i].x[j], want[j]);
            }
        }
        for (int i = 0; i < AR_W; i++) memcpy(rk[i].x, keep[i], sizeof keep[i]);
    }
    rk[2].m = AR_M - 1;
    ar_run(rk);
    for (int i = 0; i < AR_W; i++) cr_assert_eq(rk[i].rc, RAD_E_SHAPE, "arrival, rank %d: rows differ", i);
    rk[2].m = AR_M;
    ar_run(rk);
    for (int i = 0; i < AR_W; i++) cr_assert_eq(rk[i].rc, RAD_OK, "arrival after a refusal, rank %d", i);
    for (int i = 0; i < AR_W; i++) g_lib->fini(rk[i].st);
    RadCommId other = id; /* a name from another process */
    other.bytes[8] ^= 0x55;
    RadKernelLibConfig cfg = {sizeof cfg, 1, 0, 0, AR_W, &other};
    cr_assert_eq(g_lib->init(&cfg, &again), RAD_E_ARG, "another process's communicator");
}

/* all_gather over three ranks as threads: uneven column spans (13, 12, 12 of 37) land in every
 * rank's output, the same bits; spans that overlap or rows that differ are refused on every rank
 * with nothing written; one rank is a copy that must hold the whole row. */
enum { AG_W = 3, AG_M = 4, AG_COLS = 37 };
typedef struct AgRank {
    void *st;
    float x[AG_M * AG_COLS], out[AG_M * AG_COLS];
    int64_t m, col0, n;
    int rc;
} AgRank;

static void *ag_rank(void *arg) {
    AgRank *r = arg;
    RadParam p[] = {RAD_RANGE("M", r->m, r->m), RAD_INT("N", r->n), RAD_INT("col0", r->col0), RAD_INT("W", AG_COLS)};
    RadKArg a[2] = {fbuf(r->x, (uint64_t)r->m, (uint64_t)r->n), fbuf(r->out, (uint64_t)r->m, AG_COLS)};
    RadKernelArgs ka = {sizeof ka, p, 4, r->m, a, 2, NULL, NULL, NULL, r->st, 1, 1, NULL, 0};
    r->rc = find("all_gather", NULL)->run(&ka);
    return NULL;
}

static void ag_run(AgRank *rk) {
    pthread_t th[AG_W];
    for (int i = 0; i < AG_W; i++) {
        memset(rk[i].out, 0x5a, sizeof rk[i].out);
        cr_assert_eq(pthread_create(&th[i], NULL, ag_rank, &rk[i]), 0);
    }
    for (int i = 0; i < AG_W; i++) pthread_join(th[i], NULL);
}

Test(ref, all_gather_ranks) {
    RadCommId id;
    cr_assert_eq(g_lib->comm_id(AG_W, &id), RAD_OK);
    static AgRank rk[AG_W];
    float want[AG_M * AG_COLS];
    const int64_t col0[AG_W] = {0, 13, 25}, n[AG_W] = {13, 12, 12};
    for (int i = 0; i < AG_W; i++) {
        RadKernelLibConfig cfg = {sizeof cfg, 1, 0, (uint32_t)i, AG_W, &id};
        cr_assert_eq(g_lib->init(&cfg, &rk[i].st), RAD_OK, "rank %d joins", i);
        rk[i].m = AG_M, rk[i].col0 = col0[i], rk[i].n = n[i];
        fill(rk[i].x, AG_M * (int)n[i]);
        for (int r = 0; r < AG_M; r++) memcpy(want + r * AG_COLS + col0[i], rk[i].x + r * n[i], (size_t)n[i] * sizeof(float));
    }
    for (int round = 0; round < 20; round++) {
        ag_run(rk);
        for (int i = 0; i < AG_W; i++) {
            cr_assert_eq(rk[i].rc, RAD_OK, "round %d rank %d", round, i);
            assert_bitwise(rk[i].out, want, AG_M * AG_COLS, "every rank's columns in every rank's row");
        }
    }
    rk[2].col0 = 24; /* overlaps rank 1's last column (and leaves column 36 to nobody) */
    ag_run(rk);
    for (int i = 0; i < AG_W; i++) {
        cr_assert_eq(rk[i].rc, RAD_E_SHAPE, "rank %d: spans overlap", i);
        assert_untouched(rk[i].out, sizeof rk[i].out, "all_gather, overlapping spans");
    }
    rk[2].col0 = 25, rk[1].m = AG_M - 1; /* one rank with other rows */
    ag_run(rk);
    for (int i = 0; i < AG_W; i++) cr_assert_eq(rk[i].rc, RAD_E_SHAPE, "rank %d: rows differ", i);
    rk[1].m = AG_M;
    ag_run(rk);
    for (int i = 0; i < AG_W; i++) cr_assert_eq(rk[i].rc, RAD_OK, "after a refusal, rank %d", i);
    g_lib->comm_abort(rk[0].st, 1); /* a rank left its step: the others return, none waits */
    ag_run(rk);
    for (int i = 0; i < AG_W; i++) cr_assert_eq(rk[i].rc, RAD_E_IO, "poisoned, rank %d", i);
    g_lib->comm_abort(rk[0].st, 0);
    for (int i = 0; i < AG_W; i++) g_lib->fini(rk[i].st);
    /* one rank: a copy of the whole row, and only of the whole row */
    float x[2 * 8], out[2 * 8];
    fill(x, 16);
    RadParam p[] = {RAD_RANGE("M", 1, 2), RAD_INT("N", 8), RAD_INT("col0", 0), RAD_INT("W", 8)};
    RadKArg a[2] = {fbuf(x, 2, 8), fbuf(out, 2, 8)};
    for (int s = 0; s < N_ST; s++) {
        cr_assert_eq(call(find("all_gather", NULL), g_st[s], p, 4, 2, a, 2), RAD_OK);
        assert_bitwise(out, x, 16, "all_gather over one rank is a copy");
    }
    RadParam half[] = {RAD_RANGE("M", 1, 2), RAD_INT("N", 4), RAD_INT("col0", 0), RAD_INT("W", 8)};
    RadKArg ah[2] = {fbuf(x, 2, 4), fbuf(out, 2, 8)};
    memset(out, 0x5a, sizeof out);
    cr_assert_eq(call(find("all_gather", NULL), g_st[0], half, 4, 2, ah, 2), RAD_E_SHAPE, "one rank, half a row");
    assert_untouched(out, sizeof out, "all_gather, one rank, half a row");
}

/* ---- attn_paged --------------------------------------------------------------------------------------------- */

/* A hand-built paged pool ("HND", docs/OPS.md) with two sequences in one MIXED step: sequence 0
 * decodes one token after 20 cached ones; sequence 1 prefills a 13-token chunk after 22 cached
 * ones. Block size 16, block tables out of order. The test keeps the dense K/V itself. */
enum { A_B = 16, A_NBLK = 8, A_H = 6, A_HKV = 2, A_HD = 40, A_MB = 4 };
enum { A_Q0 = 1, A_C0 = 21, A_Q1 = 13, A_C1 = 35, A_M = A_Q0 + A_Q1 };

typedef struct AttnSetup {
    RadDType dt;
    size_t elem, block_bytes;
    uint8_t *pool;
    int32_t table[2 * A_MB];
    float kd[2][64][A_HKV][A_HD], vd[2][64][A_HKV][A_HD]; /* dense, as the cache holds them */
    float q[A_M * A_H * A_HD], k[A_M * A_HKV * A_HD], v[A_M * A_HKV * A_HD];
    int32_t cu[3], q_lens[2], ctx_lens[2], seq_ids[2], pos[A_M];
    struct RadBatch batch;
    RadKvState kv;
} AttnSetup;

static float round_cache(RadDType dt, float f) {
    if (dt == RAD_F16) return rad_f16_to_f32(rad_f32_to_f16(f));
    if (dt == RAD_BF16) return rad_bf16_to_f32(rad_f32_to_bf16(f));
    return f;
}
static uint8_t *slot_ptr(AttnSetup *a, int s, int slot, int g, int is_v) {
    int blk = a->table[s * A_MB + slot / A_B];
    uint8_t *base = a->pool + (size_t)blk * a->block_bytes + (is_v ? (size_t)A_HKV * A_B * A_HD * a->elem : 0);
    return base + ((size_t)(g * A_B + slot % A_B) * A_HD) * a->elem;
}
static void put_val(AttnSetup *a, uint8_t *p, float f) {
    if (a->dt == RAD_F32) memcpy(p, &f, 4);
    else {
        uint16_t h = a->dt == RAD_F16 ? rad_f32_to_f16(f) : rad_f32_to_bf16(f);
        memcpy(p, &h, 2);
    }
}

static void attn_setup(AttnSetup *a, RadDType dt) {
    memset(a, 0, sizeof *a);
    a->dt = dt;
    a->elem = dt == RAD_F32 ? 4 : 2;
    a->block_bytes = 2 * (size_t)A_HKV * A_B * A_HD * a->elem;
    a->pool = xmalloc(a->block_bytes * A_NBLK);
    memset(a->pool, 0x5a, a->block_bytes * A_NBLK);
    static const int32_t table[2 * A_MB] = {5, 2, -1, -1, /* seq 0: 21 slots, blocks 5 then 2 */
                                            7, 0, 3, -1}; /* seq 1: 35 slots, blocks 7, 0, 3 */
    memcpy(a->table, table, sizeof table);
    const int qn[2] = {A_Q0, A_Q1}, cn[2] = {A_C0, A_C1};
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < cn[s] - qn[s]; i++) /* the cached history */
            for (int g = 0; g < A_HKV; g++)
                for (int d = 0; d < A_HD; d++) {
                    float kv = round_cache(dt, frand()), vv = round_cache(dt, frand());
                    a->kd[s][i][g][d] = kv, a->vd[s][i][g][d] = vv;
                    put_val(a, slot_ptr(a, s, i, g, 0) + d * a->elem, kv);
                    put_val(a, slot_ptr(a, s, i, g, 1) + d * a->elem, vv);
                }
    fill(a->q, N_OF(a->q));
    fill(a->k, N_OF(a->k));
    fill(a->v, N_OF(a->v));
    for (size_t i = 0; i < N_OF(a->q); i++) a->q[i] *= 3.0f; /* peakier softmax */
    for (int t = 0; t < A_M; t++) { /* the new keys and values, as the cache will hold them */
        int s = t < A_Q0 ? 0 : 1, j = cn[s] - qn[s] + (t - (s ? A_Q0 : 0));
        for (int g = 0; g < A_HKV; g++)
            for (int d = 0; d < A_HD; d++) {
                a->kd[s][j][g][d] = round_cache(dt, a->k[(t * A_HKV + g) * A_HD + d]);
                a->vd[s][j][g][d] = round_cache(dt, a->v[(t * A_HKV + g) * A_HD + d]);
            }
    }
    a->cu[0] = 0, a->cu[1] = A_Q0, a->cu[2] = A_M;
    a->q_lens[0] = A_Q0, a->q_lens[1] = A_Q1;
    a->ctx_lens[0] = A_C0, a->ctx_lens[1] = A_C1;
    a->seq_ids[0] = 11, a->seq_ids[1] = 4;
    for (int t = 0; t < A_M; t++) a->pos[t] = t < A_Q0 ? A_C0 - 1 : A_C1 - A_Q1 + (t - A_Q0);
    a->kv = (RadKvState){{0}, a->table, A_MB, a->pool, dt, RAD_KVQ_NONE, A_B, A_HKV, A_HD, 0, a->block_bytes, A_NBLK};
    a->batch.struct_size = sizeof a->batch;
    a->batch.phase = RAD_PHASE_MIXED;
    a->batch.n_tok = A_M;
    a->batch.n_seq = 2;
    a->batch.n_seq_decode = 1;
    a->batch.positions = a->pos;
    a->batch.cu_seqlens = a->cu;
    a->batch.seq_ids = a->seq_ids;
    a->batch.q_lens = a->q_lens;
    a->batch.ctx_lens = a->ctx_lens;
    a->batch.max_q_len = A_Q1;
    a->batch.max_ctx_len = A_C1;
    a->batch.kv = &a->kv;
    a->batch.n_kv = 1;
}

/* Dense attention in double over the test's own K/V. */
static void attn_reference(const AttnSetup *a, float scale, double *out) {
    const int qn[2] = {A_Q0, A_Q1}, cn[2] = {A_C0, A_C1};
    for (int t = 0; t < A_M; t++) {
        int s = t < A_Q0 ? 0 : 1, jt = cn[s] - qn[s] + (t - (s ? A_Q0 : 0));
        for (int h = 0; h < A_H; h++) {
            int g = h / (A_H / A_HKV);
            double sc[64], m = -INFINITY, l = 0;
            for (int i = 0; i <= jt; i++) {
                double dot = 0;
                for (int d = 0; d < A_HD; d++) dot += (double)a->q[(t * A_H + h) * A_HD + d] * a->kd[s][i][g][d];
                sc[i] = dot * scale;
                if (sc[i] > m) m = sc[i];
            }
            for (int i = 0; i <= jt; i++) sc[i] = exp(sc[i] - m), l += sc[i];
            for (int d = 0; d < A_HD; d++) {
                double acc = 0;
                for (int i = 0; i <= jt; i++) acc += sc[i] * a->vd[s][i][g][d];
                out[(t * A_H + h) * A_HD + d] = acc / l;
            }
        }
    }
}

static int attn_run(void *st, AttnSetup *a, float *out, int n_head, int n_kv, uint32_t threads) {
    RadParam p[] = {RAD_RANGE_ROLE("M", 1, 64, RAD_PROLE_SEQ_CHUNK), RAD_INT("n_head", n_head), RAD_INT("n_head_kv", n_kv),
                    RAD_INT("head_dim", A_HD), RAD_INT("kv", 0), RAD_INT("layer", 0),
                    RAD_FLOAT("scale", 1.0 / sqrt((double)A_HD)), RAD_INT("prefill_fp8", 0)};
    RadKArg args[4] = {fbuf(a->q, A_M, (uint64_t)n_head * A_HD), fbuf(a->k, A_M, (uint64_t)n_kv * A_HD),
                       fbuf(a->v, A_M, (uint64_t)n_kv * A_HD), fbuf(out, A_M, (uint64_t)n_head * A_HD)};
    Call c = {&a->batch, &a->kv, threads};
    return call_x(find("attn_paged", NULL), st, p, N_OF(p), A_M, args, 4, &c);
}

static void check_attn(RadDType dt) {
    AttnSetup *a = xmalloc(sizeof *a);
    attn_setup(a, dt);
    const float scale = (float)(1.0 / sqrt((double)A_HD));
    double *ref = xmalloc(sizeof(double) * A_M * A_H * A_HD);
    attn_reference(a, scale, ref);
    uint8_t *pool0 = xmalloc(a->block_bytes * A_NBLK);
    memcpy(pool0, a->pool, a->block_bytes * A_NBLK);
    float *out[N_ST];
    for (int s = 0; s < N_ST; s++) {
        memcpy(a->pool, pool0, a->block_bytes * A_NBLK);
        out[s] = xmalloc(sizeof(float) * A_M * A_H * A_HD);
        cr_assert_eq(attn_run(g_st[s], a, out[s], A_H, A_HKV, 0), RAD_OK, "attn_paged %s", st_name[s]);
        char what[96];
        snprintf(what, sizeof what, "attn_paged %s cache, %s", rad_enc_info((RadEnc)dt)->name, st_name[s]);
        assert_rows_within(out[s], A_H * A_HD, ref, A_M, A_H * A_HD, find("attn_paged", NULL)->tolerance, what);
        /* the cache: every row's k and v at its slot (rounded to the cache type), nothing else moved */
        for (int sq = 0; sq < 2; sq++)
            for (int i = 0; i < (sq ? A_C1 : A_C0); i++)
                for (int g = 0; g < A_HKV; g++)
                    for (int d = 0; d < A_HD; d++) {
                        float kv, vv;
                        if (dt == RAD_F32) {
                            memcpy(&kv, slot_ptr(a, sq, i, g, 0) + d * 4, 4);
                            memcpy(&vv, slot_ptr(a, sq, i, g, 1) + d * 4, 4);
                        } else {
                            uint16_t hk, hv;
                            memcpy(&hk, slot_ptr(a, sq, i, g, 0) + d * 2, 2);
                            memcpy(&hv, slot_ptr(a, sq, i, g, 1) + d * 2, 2);
                            kv = dt == RAD_F16 ? rad_f16_to_f32(hk) : rad_bf16_to_f32(hk);
                            vv = dt == RAD_F16 ? rad_f16_to_f32(hv) : rad_bf16_to_f32(hv);
                        }
                        cr_assert_eq(bits(kv), bits(a->kd[sq][i][g][d]), "K seq %d slot %d", sq, i);
                        cr_assert_eq(bits(vv), bits(a->vd[sq][i][g][d]), "V seq %d slot %d", sq, i);
                    }
        for (int b = 0; b < A_NBLK; b++) /* blocks no table names: untouched */
            if (b == 1 || b == 4 || b == 6) assert_untouched(a->pool + b * a->block_bytes, a->block_bytes, "an unused block");
    }
    assert_bitwise(out[ST_BEST3], out[ST_BEST1], A_M * A_H * A_HD, "attn best: 3 threads vs 1");
    assert_bitwise(out[ST_GEN3], out[ST_GEN1], A_M * A_H * A_HD, "attn generic: 3 threads vs 1");
    for (int s = 0; s < N_ST; s++) free(out[s]);
    free(pool0), free(ref), free(a->pool), free(a);
}

Test(ref, attn_paged_mixed_step_f32) { check_attn(RAD_F32); }
Test(ref, attn_paged_mixed_step_f16) { check_attn(RAD_F16); }
Test(ref, attn_paged_mixed_step_bf16) { check_attn(RAD_BF16); }

/* Decode rows alone (as a DECODE step) give the same bits as in the mixed step: a row's result
 * does not depend on the rest of the batch. And MHA (n_head == n_head_kv) works too. */
Test(ref, attn_paged_batch_invariant) {
    AttnSetup *a = xmalloc(sizeof *a);
    attn_setup(a, RAD_F32);
    uint8_t *pool0 = xmalloc(a->block_bytes * A_NBLK);
    memcpy(pool0, a->pool, a->block_bytes * A_NBLK);
    float *out = xmalloc(sizeof(float) * A_M * A_H * A_HD), *out1 = xmalloc(sizeof(float) * A_M * A_H * A_HD);
    cr_assert_eq(attn_run(g_st[ST_BEST3], a, out, A_H, A_HKV, 0), RAD_OK);
    /* the decode row of sequence 0 alone */
    memcpy(a->pool, pool0, a->block_bytes * A_NBLK);
    struct RadBatch b1 = a->batch;
    int32_t cu1[2] = {0, 1};
    b1.n_tok = 1, b1.n_seq = 1, b1.n_seq_decode = 1, b1.cu_seqlens = cu1, b1.phase = RAD_PHASE_DECODE;
    struct RadBatch keep = a->batch;
    a->batch = b1;
    RadParam p[] = {RAD_RANGE_ROLE("M", 1, 64, RAD_PROLE_SEQ_CHUNK), RAD_INT("n_head", A_H), RAD_INT("n_head_kv", A_HKV),
                    RAD_INT("head_dim", A_HD), RAD_INT("kv", 0), RAD_INT("layer", 0),
                    RAD_FLOAT("scale", 1.0 / sqrt((double)A_HD)), RAD_INT("prefill_fp8", 0)};
    RadKArg args[4] = {fbuf(a->q, 1, A_H * A_HD), fbuf(a->k, 1, A_HKV * A_HD), fbuf(a->v, 1, A_HKV * A_HD),
                       fbuf(out1, 1, A_H * A_HD)};
    Call c = {&a->batch, &a->kv, 0};
    cr_assert_eq(call_x(find("attn_paged", NULL), g_st[ST_BEST3], p, N_OF(p), 1, args, 4, &c), RAD_OK);
    assert_bitwise(out1, out, A_H * A_HD, "decode row alone vs in the mixed step");
    a->batch = keep;
    /* MHA: 2 heads over 2 KV heads (the first 2 query heads' columns of q, as a [M, 2*hd] view) */
    memcpy(a->pool, pool0, a->block_bytes * A_NBLK);
    RadParam pm[] = {RAD_RANGE_ROLE("M", 1, 64, RAD_PROLE_SEQ_CHUNK), RAD_INT("n_head", 2), RAD_INT("n_head_kv", 2),
                     RAD_INT("head_dim", A_HD), RAD_INT("kv", 0), RAD_INT("layer", 0),
                     RAD_FLOAT("scale", 1.0 / sqrt((double)A_HD)), RAD_INT("prefill_fp8", 0)};
    RadKArg am[4] = {fbuf_s(a->q, A_M, 2 * A_HD, A_H * A_HD), fbuf(a->k, A_M, A_HKV * A_HD), fbuf(a->v, A_M, A_HKV * A_HD),
                     fbuf(out1, A_M, 2 * A_HD)};
    Call cm = {&a->batch, &a->kv, 0};
    for (int s = 0; s < N_ST; s++) {
        memcpy(a->pool, pool0, a->block_bytes * A_NBLK);
        cr_assert_eq(call_x(find("attn_paged", NULL), g_st[s], pm, N_OF(pm), A_M, am, 4, &cm), RAD_OK);
        /* head 1 reads KV head 1 now: compare with a reference over the same mapping */
        for (int t = 0; t < A_M; t++) {
            int sq = t < A_Q0 ? 0 : 1, jt = (sq ? A_C1 - A_Q1 + t - A_Q0 : A_C0 - 1);
            for (int h = 0; h < 2; h++) {
                double sc[64], m = -INFINITY, l = 0, o[A_HD];
                for (int i = 0; i <= jt; i++) {
                    double dot = 0;
                    for (int d = 0; d < A_HD; d++) dot += (double)a->q[(t * A_H + h) * A_HD + d] * a->kd[sq][i][h][d];
                    sc[i] = dot * (float)(1.0 / sqrt((double)A_HD));
                    if (sc[i] > m) m = sc[i];
                }
                for (int i = 0; i <= jt; i++) sc[i] = exp(sc[i] - m), l += sc[i];
                for (int d = 0; d < A_HD; d++) {
                    o[d] = 0;
                    for (int i = 0; i <= jt; i++) o[d] += sc[i] * a->vd[sq][i][h][d];
                    o[d] /= l;
                }
                assert_rows_within(out1 + (t * 2 + h) * A_HD, A_HD, o, 1, A_HD, 1e-5, "MHA");
            }
        }
    }
    free(out), free(out1), free(pool0), free(a->pool), free(a);
}

/* Refusals check everything first: neither the cache nor out is written. */
Test(ref, attn_paged_refusals_write_nothing) {
    AttnSetup *a = xmalloc(sizeof *a);
    attn_setup(a, RAD_F16);
    uint8_t *pool0 = xmalloc(a->block_bytes * A_NBLK);
    memcpy(pool0, a->pool, a->block_bytes * A_NBLK);
    float *out = xmalloc(sizeof(float) * A_M * A_H * A_HD);
    memset(out, 0x5a, sizeof(float) * A_M * A_H * A_HD);
    cr_assert_eq(attn_run(g_st[0], a, out, A_H, 4, 0), RAD_E_ARG, "n_head %% n_head_kv != 0");
    a->ctx_lens[1] = A_MB * A_B + 1; /* past the block table */
    cr_assert_eq(attn_run(g_st[0], a, out, A_H, A_HKV, 0), RAD_E_ARG, "ctx past max_blocks");
    a->ctx_lens[1] = A_C1;
    a->table[A_MB + 2] = -1; /* a block the sequence needs is missing */
    cr_assert_eq(attn_run(g_st[0], a, out, A_H, A_HKV, 0), RAD_E_ARG, "a negative block id");
    a->table[A_MB + 2] = A_NBLK; /* one past the pool (RadKvState.n_blocks) */
    cr_assert_eq(attn_run(g_st[0], a, out, A_H, A_HKV, 0), RAD_E_ARG, "a block id past the pool");
    a->table[A_MB + 2] = 3;
    a->ctx_lens[0] = 0; /* fewer tokens than this step adds */
    cr_assert_eq(attn_run(g_st[0], a, out, A_H, A_HKV, 0), RAD_E_ARG, "ctx_len < q_len");
    a->ctx_lens[0] = A_C0;
    a->batch.n_tok = A_M - 1;
    cr_assert_eq(attn_run(g_st[0], a, out, A_H, A_HKV, 0), RAD_E_SHAPE, "n_tok != M");
    a->batch.n_tok = A_M;
    a->cu[1] = 2;
    cr_assert_eq(attn_run(g_st[0], a, out, A_H, A_HKV, 0), RAD_E_SHAPE, "cu_seqlens disagrees with q_lens");
    a->cu[1] = A_Q0;
    a->kv.head_dim = A_HD + 8;
    cr_assert_eq(attn_run(g_st[0], a, out, A_H, A_HKV, 0), RAD_E_SHAPE, "KV head_dim");
    a->kv.head_dim = A_HD;
    a->kv.kv_quant = RAD_KVQ_V4;
    cr_assert_eq(attn_run(g_st[0], a, out, A_H, A_HKV, 0), RAD_E_UNSUPPORTED, "fp8 layouts");
    a->kv.kv_quant = RAD_KVQ_NONE;
    a->kv.dtype = RAD_F8_E4M3;
    cr_assert_eq(attn_run(g_st[0], a, out, A_H, A_HKV, 0), RAD_E_UNSUPPORTED, "an fp8 cache");
    a->kv.dtype = RAD_F16;
    a->kv.block_bytes = a->block_bytes + 2;
    cr_assert_eq(attn_run(g_st[0], a, out, A_H, A_HKV, 0), RAD_E_SHAPE, "block_bytes");
    a->kv.block_bytes = a->block_bytes;
    assert_untouched(out, sizeof(float) * A_M * A_H * A_HD, "attn_paged out");
    cr_assert(memcmp(a->pool, pool0, a->block_bytes * A_NBLK) == 0, "the cache was written by a refused call");
    /* and with everything put back, it runs */
    cr_assert_eq(attn_run(g_st[0], a, out, A_H, A_HKV, 0), RAD_OK);
    free(out), free(pool0), free(a->pool), free(a);
}

/* A prefill cut into two steps (the core's SEQ_CHUNK cut) equals the uncut one within the bound. */
Test(ref, attn_paged_chunked_prefill) {
    AttnSetup *a = xmalloc(sizeof *a);
    attn_setup(a, RAD_F32);
    const float scale = (float)(1.0 / sqrt((double)A_HD));
    double *ref = xmalloc(sizeof(double) * A_M * A_H * A_HD);
    attn_reference(a, scale, ref);
    float *out = xmalloc(sizeof(float) * A_M * A_H * A_HD);
    /* step 1: sequence 1's first 6 rows (ctx 22 + 6 = 28); step 2: its last 7 rows (ctx 35) */
    const int cut = 6;
    for (int step = 0; step < 2; step++) {
        const int r0 = A_Q0 + (step ? cut : 0), n = step ? A_Q1 - cut : cut;
        int32_t cu[2] = {0, n}, ql[1] = {n}, cl[1] = {A_C1 - A_Q1 + (step ? A_Q1 : cut)};
        int32_t tab[A_MB];
        memcpy(tab, a->table + A_MB, sizeof tab);
        struct RadBatch b = a->batch;
        b.n_tok = (uint32_t)n, b.n_seq = 1, b.n_seq_decode = 0, b.phase = RAD_PHASE_PREFILL;
        b.cu_seqlens = cu, b.q_lens = ql, b.ctx_lens = cl;
        RadKvState kv = a->kv;
        kv.block_table = tab;
        RadParam p[] = {RAD_RANGE_ROLE("M", 1, 64, RAD_PROLE_SEQ_CHUNK), RAD_INT("n_head", A_H), RAD_INT("n_head_kv", A_HKV),
                        RAD_INT("head_dim", A_HD), RAD_INT("kv", 0), RAD_INT("layer", 0), RAD_FLOAT("scale", 1.0 / sqrt((double)A_HD)),
                        RAD_INT("prefill_fp8", 0)};
        RadKArg args[4] = {fbuf(a->q + r0 * A_H * A_HD, (uint64_t)n, A_H * A_HD), fbuf(a->k + r0 * A_HKV * A_HD, (uint64_t)n, A_HKV * A_HD),
                           fbuf(a->v + r0 * A_HKV * A_HD, (uint64_t)n, A_HKV * A_HD), fbuf(out + r0 * A_H * A_HD, (uint64_t)n, A_H * A_HD)};
        Call c = {&b, &kv, 0};
        cr_assert_eq(call_x(find("attn_paged", NULL), g_st[0], p, N_OF(p), n, args, 4, &c), RAD_OK);
    }
    assert_rows_within(out + A_Q0 * A_H * A_HD, A_H * A_HD, ref + A_Q0 * A_H * A_HD, A_Q1, A_H * A_HD, 1e-5, "chunked prefill");
    free(out), free(ref), free(a->pool), free(a);
}

/* One decode row over a long context (300 slots, 19 blocks in shuffled order): with 3 threads and
 * only 2 KV heads the kernel runs each part of the row's keys (10 parts of 32 slots) as an item
 * and merges the parts after; on one thread one item runs the parts in turn. The bits must not
 * change, and both match a dense reference. */
/* Two decode rows of two sequences (300 and 70 keys) in one call: on 3 threads the parts are
 * items, each row's k, v appended by its last part's item and each (row, KV head) merged by
 * whoever finishes its last part; the bits equal one thread's (whole rows in turn) and each
 * row's own call alone. */
Test(ref, attn_paged_two_decode_rows_fused) {
    enum { B = 16, HKV = 2, H = 6, HD = 40, NB = 19 + 5 };
    const int ctx[2] = {300, 70};
    const size_t bb = 2 * (size_t)HKV * B * HD * 4;
    float *pool0 = xmalloc(bb * NB), *pool = xmalloc(bb * NB);
    fill(pool0, bb * NB / 4);
    int32_t table[2 * NB]; /* seq 0: blocks 0..18, seq 1: blocks 19..23 (max_blocks NB) */
    for (int i = 0; i < 2 * NB; i++) table[i] = -1;
    for (int j = 0; j < 19; j++) table[j] = (j * 7) % 19;
    for (int j = 0; j < 5; j++) table[NB + j] = 19 + (j * 3) % 5;
    float q[2][H * HD], k[2][HKV * HD], v[2][HKV * HD], out[3][2][H * HD];
    for (int r = 0; r < 2; r++) fill(q[r], H * HD), fill(k[r], HKV * HD), fill(v[r], HKV * HD);
    RadParam p[] = {RAD_RANGE_ROLE("M", 1, 64, RAD_PROLE_SEQ_CHUNK), RAD_INT("n_head", H), RAD_INT("n_head_kv", HKV),
                    RAD_INT("head_dim", HD), RAD_INT("kv", 0), RAD_INT("layer", 0), RAD_FLOAT("scale", 1.0 / sqrt((double)HD)),
                    RAD_INT("prefill_fp8", 0)};
    /* call 0: both rows on 3 threads; call 1: both on 1 thread; call 2: each row alone (3 threads) */
    for (int call_i = 0; call_i < 3; call_i++) {
        memcpy(pool, pool0, bb * NB);
        for (int part = 0; part < (call_i == 2 ? 2 : 1); part++) {
            const int m = call_i == 2 ? 1 : 2, r0 = call_i == 2 ? part : 0;
            int32_t cu[3] = {0, 1, 2}, ql[2] = {1, 1}, cl[2], pos[2], sid[2] = {0, 1};
            for (int r = 0; r < m; r++) cl[r] = ctx[r0 + r], pos[r] = ctx[r0 + r] - 1, sid[r] = r0 + r;
            struct RadBatch b;
            memset(&b, 0, sizeof b);
            b.struct_size = sizeof b, b.phase = RAD_PHASE_DECODE, b.n_tok = (uint32_t)m, b.n_seq = (uint32_t)m,
            b.n_seq_decode = (uint32_t)m;
            b.cu_seqlens = cu, b.q_lens = ql, b.ctx_lens = cl, b.positions = pos, b.seq_ids = sid;
            RadKvState kv = {{0}, table + (size_t)r0 * NB, NB, pool, RAD_F32, RAD_KVQ_NONE, B, HKV, HD, 0, bb, NB};
            RadKArg a[4] = {fbuf(q[r0], (uint64_t)m, H * HD), fbuf(k[r0], (uint64_t)m, HKV * HD), fbuf(v[r0], (uint64_t)m, HKV * HD),
                            fbuf(out[call_i][r0], (uint64_t)m, H * HD)};
            Call c = {&b, &kv, call_i == 1 ? 1 : 3};
            cr_assert_eq(call_x(find("attn_paged", NULL), g_st[call_i == 1 ? ST_BEST1 : ST_BEST3], p, N_OF(p), m, a, 4, &c), RAD_OK);
        }
    }
    assert_bitwise(out[0][0], out[1][0], 2 * H * HD, "3 threads (parts as items) vs 1");
    assert_bitwise(out[0][0], out[2][0], 2 * H * HD, "both rows vs each alone");
    /* each row's own k and v landed at its last slot */
    const int32_t blk1 = table[NB + (ctx[1] - 1) / B];
    const float *kl = pool + ((size_t)blk1 * bb + ((size_t)(1 * B + (ctx[1] - 1) % B) * HD) * 4) / 4;
    assert_bitwise(kl, k[1] + HD, HD, "row 1's k of KV head 1 at its last slot");
    free(pool), free(pool0);
}

Test(ref, attn_paged_long_decode_split_into_parts) {
    enum { B = 16, HKV = 2, H = 6, HD = 40, CTX = 300, NB = (CTX + B - 1) / B };
    const size_t bb = 2 * (size_t)HKV * B * HD * 4;
    float *pool = xmalloc(bb * NB), *pool0 = xmalloc(bb * NB);
    fill(pool, bb * NB / 4);
    memcpy(pool0, pool, bb * NB);
    int32_t table[NB];
    for (int i = 0; i < NB; i++) table[i] = (i * 7) % NB; /* 7 is coprime with 19: a permutation */
    float q[H * HD], k[HKV * HD], v[HKV * HD], out[N_ST][H * HD];
    fill(q, H * HD), fill(k, HKV * HD), fill(v, HKV * HD);
    for (int i = 0; i < H * HD; i++) q[i] *= 4.0f;
    int32_t cu[2] = {0, 1}, ql[1] = {1}, cl[1] = {CTX}, pos[1] = {CTX - 1}, sid[1] = {0};
    struct RadBatch b;
    memset(&b, 0, sizeof b);
    b.struct_size = sizeof b, b.phase = RAD_PHASE_DECODE, b.n_tok = 1, b.n_seq = 1, b.n_seq_decode = 1;
    b.cu_seqlens = cu, b.q_lens = ql, b.ctx_lens = cl, b.positions = pos, b.seq_ids = sid;
    RadKvState kv = {{0}, table, NB, pool, RAD_F32, RAD_KVQ_NONE, B, HKV, HD, 0, bb, NB};
    RadParam p[] = {RAD_RANGE_ROLE("M", 1, 64, RAD_PROLE_SEQ_CHUNK), RAD_INT("n_head", H), RAD_INT("n_head_kv", HKV),
                    RAD_INT("head_dim", HD), RAD_INT("kv", 0), RAD_INT("layer", 0), RAD_FLOAT("scale", 1.0 / sqrt((double)HD)),
                    RAD_INT("prefill_fp8", 0)};
    for (int s = 0; s < N_ST; s++) {
        memcpy(pool, pool0, bb * NB);
        RadKArg a[4] = {fbuf(q, 1, H * HD), fbuf(k, 1, HKV * HD), fbuf(v, 1, HKV * HD), fbuf(out[s], 1, H * HD)};
        Call c = {&b, &kv, 0};
        cr_assert_eq(call_x(find("attn_paged", NULL), g_st[s], p, N_OF(p), 1, a, 4, &c), RAD_OK);
    }
    assert_bitwise(out[ST_BEST3], out[ST_BEST1], H * HD, "parts as items vs in turn");
    assert_bitwise(out[ST_GEN3], out[ST_GEN1], H * HD, "generic: parts as items vs in turn");
    /* dense reference over the cache as the kernel left it (the new row appended at slot 299) */
    double ref[H * HD];
    const float scale = (float)(1.0 / sqrt((double)HD));
    for (int h = 0; h < H; h++) {
        const int g = h / (H / HKV);
        static double sc[CTX];
        double m = -INFINITY, l = 0;
        for (int i = 0; i < CTX; i++) {
            const float *kr = pool + ((size_t)table[i / B] * bb + ((size_t)(g * B + i % B) * HD) * 4) / 4;
            double dot = 0;
            for (int d = 0; d < HD; d++) dot += (double)q[h * HD + d] * kr[d];
            sc[i] = dot * scale;
            m = fmax(m, sc[i]);
        }
        for (int i = 0; i < CTX; i++) sc[i] = exp(sc[i] - m), l += sc[i];
        for (int d = 0; d < HD; d++) {
            double acc = 0;
            for (int i = 0; i < CTX; i++) {
                const float *vr = pool + ((size_t)table[i / B] * bb + (size_t)HKV * B * HD * 4 + ((size_t)(g * B + i % B) * HD) * 4) / 4;
                acc += sc[i] * vr[d];
            }
            ref[h * HD + d] = acc / l;
        }
    }
    /* the appended row is this step's k and v */
    const float *k299 = pool + ((size_t)table[(CTX - 1) / B] * bb + ((size_t)(1 * B + (CTX - 1) % B) * HD) * 4) / 4;
    assert_bitwise(k299, k + HD, HD, "k of KV head 1 at slot 299");
    for (int s = 0; s < N_ST; s++) assert_rows_within(out[s], H * HD, ref, 1, H * HD, 1e-5, st_name[s]);
    free(pool), free(pool0);
}

/* A prefill of 37 rows over four sequences gives every row the bits of the row computed alone
 * (a decode step of that row): rows run in blocks that share each chunk's K and V, and a row's
 * result must not depend on its block. Sequence 0 prefills 13 rows after 7 cached slots (parts
 * of 32, rows ending mid-part); sequence 1's 17 rows cross 512 keys (parts of 32, then 64: a
 * block is cut there); sequence 2's 6 rows have 1095..1100 keys (parts of 128, two chunks each:
 * rows end mid-chunk); sequence 3 is a decode row. f32 and f16 caches, head_dim 64 and 256,
 * no window and a window of 40 (its rows' first keys differ: they run one by one), 3 threads
 * and 1, rows alone on 3 threads (parts as items) and 1; all within the bound of a dense
 * reference in double. */
enum { PR_B = 16, PR_H = 6, PR_HKV = 2, PR_NSEQ = 4, PR_M = 37, PR_MB = 69 };

static float pr_get(RadDType dt, const uint8_t *p) {
    if (dt == RAD_F32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p, 2);
    return rad_f16_to_f32(h);
}

static void check_prefill_rows_alone(RadDType dt, int hd, int window) {
    static const int qn[PR_NSEQ] = {13, 17, 6, 1}, cn[PR_NSEQ] = {20, 522, 1100, 45};
    const size_t elem = dt == RAD_F32 ? 4 : 2, bb = 2 * (size_t)PR_HKV * PR_B * (size_t)hd * elem;
    int nblk = 0;
    int32_t table[PR_NSEQ * PR_MB], cu[PR_NSEQ + 1] = {0}, ql[PR_NSEQ], cl[PR_NSEQ], pos[PR_M], sid[PR_NSEQ], row_seq[PR_M];
    for (int s = 0; s < PR_NSEQ; s++) {
        ql[s] = qn[s], cl[s] = cn[s], sid[s] = s, cu[s + 1] = cu[s] + qn[s];
        for (int j = 0; j < PR_MB; j++) table[s * PR_MB + j] = -1;
        const int nb = (cn[s] + PR_B - 1) / PR_B;
        for (int j = 0; j < nb; j++) table[s * PR_MB + j] = nblk + (j * 5) % nb; /* out of order (5 coprime with each nb) */
        nblk += nb;
        for (int t = cu[s]; t < cu[s + 1]; t++) pos[t] = cn[s] - qn[s] + (t - cu[s]), row_seq[t] = s;
    }
    cr_assert_eq(cu[PR_NSEQ], PR_M);
    uint8_t *pool = xmalloc(bb * (size_t)nblk), *pool0 = xmalloc(bb * (size_t)nblk);
    for (size_t i = 0; i < bb * (size_t)nblk / elem; i++) { /* every slot, history or not: valid values */
        const float f = frand();
        if (dt == RAD_F32) memcpy(pool0 + 4 * i, &f, 4);
        else {
            const uint16_t h = rad_f32_to_f16(f);
            memcpy(pool0 + 2 * i, &h, 2);
        }
    }
    const size_t qw = (size_t)PR_H * hd, kw = (size_t)PR_HKV * hd;
    float *q = xmalloc(sizeof(float) * PR_M * qw), *k = xmalloc(sizeof(float) * PR_M * kw), *v = xmalloc(sizeof(float) * PR_M * kw);
    fill(q, PR_M * qw), fill(k, PR_M * kw), fill(v, PR_M * kw);
    for (size_t i = 0; i < PR_M * qw; i++) q[i] *= 3.0f; /* peakier softmax */
    RadParam p[] = {RAD_RANGE_ROLE("M", 1, 64, RAD_PROLE_SEQ_CHUNK), RAD_INT("n_head", PR_H), RAD_INT("n_head_kv", PR_HKV),
                    RAD_INT("head_dim", hd), RAD_INT("kv", 0), RAD_INT("layer", 0), RAD_FLOAT("scale", 1.0 / sqrt((double)hd)),
                    RAD_INT("prefill_fp8", 0), RAD_INT("window", window)};
    char what[128];
    /* out[0]: all rows, best ISA, 3 threads; [1] 1 thread; [2], [3]: each row alone on 3 and 1;
     * [4] all rows at RAD_REF_ISA=avx2 (the avx512 level's tiles keep every lane's arithmetic) */
    float *out[5];
    for (int o = 0; o < 5; o++) out[o] = xmalloc(sizeof(float) * PR_M * qw);
    void *avx2 = init_state("avx2", 3, 1);
    for (int o = 0; o < 5; o++) {
        if (o == 2) o = 4;
        memcpy(pool, pool0, bb * (size_t)nblk);
        struct RadBatch b;
        memset(&b, 0, sizeof b);
        b.struct_size = sizeof b, b.phase = RAD_PHASE_MIXED, b.n_tok = PR_M, b.n_seq = PR_NSEQ, b.n_seq_decode = 1;
        b.cu_seqlens = cu, b.q_lens = ql, b.ctx_lens = cl, b.positions = pos, b.seq_ids = sid;
        RadKvState kv = {{0}, table, PR_MB, pool, dt, RAD_KVQ_NONE, PR_B, PR_HKV, (uint32_t)hd, 0, bb, (uint32_t)nblk};
        RadKArg a[4] = {fbuf(q, PR_M, qw), fbuf(k, PR_M, kw), fbuf(v, PR_M, kw), fbuf(out[o], PR_M, qw)};
        Call c = {&b, &kv, o == 1 ? 1 : 3};
        cr_assert_eq(call_x(find("attn_paged", NULL), o == 4 ? avx2 : g_st[o ? ST_BEST1 : ST_BEST3], p, N_OF(p), PR_M, a, 4, &c),
                     RAD_OK);
    }
    g_lib->fini(avx2);
    /* the cache as the calls left it (every row's k, v appended): rows alone append the same */
    memcpy(pool0, pool, bb * (size_t)nblk);
    for (int o = 2; o < 4; o++)
        for (int t = 0; t < PR_M; t++) {
            const int s = row_seq[t];
            int32_t cu1[2] = {0, 1}, ql1[1] = {1}, cl1[1] = {pos[t] + 1}, pos1[1] = {pos[t]}, sid1[1] = {s};
            struct RadBatch b;
            memset(&b, 0, sizeof b);
            b.struct_size = sizeof b, b.phase = RAD_PHASE_DECODE, b.n_tok = 1, b.n_seq = 1, b.n_seq_decode = 1;
            b.cu_seqlens = cu1, b.q_lens = ql1, b.ctx_lens = cl1, b.positions = pos1, b.seq_ids = sid1;
            RadKvState kv = {{0}, table + s * PR_MB, PR_MB, pool, dt, RAD_KVQ_NONE, PR_B, PR_HKV, (uint32_t)hd, 0, bb, (uint32_t)nblk};
            RadKArg a[4] = {fbuf(q + t * qw, 1, qw), fbuf(k + t * kw, 1, kw), fbuf(v + t * kw, 1, kw), fbuf(out[o] + t * qw, 1, qw)};
            Call c = {&b, &kv, o == 2 ? 3 : 1};
            cr_assert_eq(call_x(find("attn_paged", NULL), g_st[o == 2 ? ST_BEST3 : ST_BEST1], p, N_OF(p), 1, a, 4, &c), RAD_OK);
        }
    cr_assert(memcmp(pool, pool0, bb * (size_t)nblk) == 0, "rows alone changed the cache");
    for (int t = 0; t < PR_M; t++)
        for (int o = 1; o < 5; o++) {
            snprintf(what, sizeof what, "%s cache, hd %d, window %d, row %d (seq %d, %d keys): %s vs the batch on 3 threads",
                     dt == RAD_F32 ? "f32" : "f16", hd, window, t, row_seq[t], pos[t] + 1,
                     o == 1 ? "the batch on 1 thread" : o == 2 ? "alone on 3 threads" : o == 3 ? "alone on 1 thread" : "the batch at avx2");
            assert_bitwise(out[o] + t * qw, out[0] + t * qw, qw, what);
        }
    /* dense reference in double over the cache */
    double *ref = xmalloc(sizeof(double) * qw), *sc = xmalloc(sizeof(double) * 1100);
    for (int t = 0; t < PR_M; t++) {
        const int s = row_seq[t], lo = window && pos[t] + 1 > window ? pos[t] + 1 - window : 0;
        for (int h = 0; h < PR_H; h++) {
            const int g = h / (PR_H / PR_HKV);
            double m = -INFINITY, l = 0;
            for (int i = lo; i <= pos[t]; i++) {
                const uint8_t *kp = pool + (size_t)table[s * PR_MB + i / PR_B] * bb + ((size_t)(g * PR_B + i % PR_B) * hd) * elem;
                double dot = 0;
                for (int d = 0; d < hd; d++) dot += (double)q[t * qw + h * hd + d] * pr_get(dt, kp + d * elem);
                sc[i] = dot * (float)(1.0 / sqrt((double)hd));
                if (sc[i] > m) m = sc[i];
            }
            for (int i = lo; i <= pos[t]; i++) sc[i] = exp(sc[i] - m), l += sc[i];
            for (int d = 0; d < hd; d++) {
                double acc = 0;
                for (int i = lo; i <= pos[t]; i++) {
                    const uint8_t *vp = pool + (size_t)table[s * PR_MB + i / PR_B] * bb +
                                        ((size_t)PR_HKV * PR_B * hd + (size_t)(g * PR_B + i % PR_B) * hd) * elem;
                    acc += sc[i] * pr_get(dt, vp + d * elem);
                }
                ref[h * hd + d] = acc / l;
            }
        }
        snprintf(what, sizeof what, "%s cache, hd %d, window %d, vs dense", dt == RAD_F32 ? "f32" : "f16", hd, window);
        assert_rows_within(out[0] + t * qw, qw, ref, 1, (int)qw, 1e-5, what);
    }
    for (int o = 0; o < 5; o++) free(out[o]);
    free(sc), free(ref), free(q), free(k), free(v), free(pool), free(pool0);
}

Test(ref, attn_paged_prefill_rows_as_alone) {
    test_deadline(300);
    for (int w = 0; w < 2; w++) {
        check_prefill_rows_alone(RAD_F32, 64, w ? 40 : 0);
        check_prefill_rows_alone(RAD_F16, 64, w ? 40 : 0);
        check_prefill_rows_alone(RAD_F32, 256, w ? 40 : 0);
        check_prefill_rows_alone(RAD_F16, 256, w ? 40 : 0);
    }
}
