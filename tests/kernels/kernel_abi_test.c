/* kernel_abi_test.c — the kernel-library ABI (abi/rad_kernels.h) through a real library:
 * $RAD_BUILD/test-plugins/kern_test.so (tests/plugins/kern_test.c) is dlopened the way the core
 * loads plugins, its rad_plugin_info and table are checked, and every kernel it implements is run
 * on small random inputs against a reference written here from docs/OPS.md.
 *
 * Tolerance: none where the library says RAD_EXACT_BITWISE (gathers, add, rmsnorm, gemm_nt and
 * logits_gemm over f32/f16/bf16): the references below evaluate docs/OPS.md's definitions in
 * the order they state, in f32 with products stored before they are added, so the outputs must
 * match bit for bit. rope and silu_mul call cos/sin/exp, whose last bit belongs to the C
 * library: they are compared with a double-precision evaluation within the tolerance the kernel
 * declares (scaled by the row's largest magnitude, as RadExactness defines it), and rope's llama3
 * frequencies against values computed by hand (Python, double precision) from transformers'
 * _compute_llama3_parameters. */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abi/rad_kernels.h"
#include "libcommon/tensor/rad_enc.h"

static void *g_dl;
static const RadKernelLib *g_lib;
static const RadPluginInfo *g_info;
static void *g_state;

static void *sym(void *dl, const char *name) { return dlsym(dl, name); }

static void load_lib(void) {
    const char *b = getenv("RAD_BUILD");
    char path[512];
    snprintf(path, sizeof path, "%s/test-plugins/kern_test.so", b && *b ? b : "build");
    g_dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    cr_assert(g_dl, "%s: cannot load: %s (make test-unit builds it)", path, dlerror());
    rad_plugin_info_fn info;
    rad_kernels_fn kern;
    void *p = sym(g_dl, "rad_plugin_info");
    memcpy(&info, &p, sizeof p);
    p = sym(g_dl, "rad_kernels");
    memcpy(&kern, &p, sizeof p);
    cr_assert(info && kern, "%s: rad_plugin_info or rad_kernels not exported", path);
    g_info = info();
    g_lib = kern();
    cr_assert(g_info && g_lib);
    g_state = NULL;
    if (g_lib->init) {
        RadKernelLibConfig cfg = {sizeof cfg, 1, 0, 0, 1, NULL};
        cr_assert_eq(g_lib->init(&cfg, &g_state), RAD_OK);
    }
}

static void unload_lib(void) {
    if (g_lib && g_lib->fini) g_lib->fini(g_state);
    if (g_dl) dlclose(g_dl);
    g_dl = NULL;
    g_lib = NULL;
    g_state = NULL;
}

TestSuite(kernel_abi, .init = load_lib, .fini = unload_lib);

static const RadKernel *find(const char *op, const char *variant) {
    for (uint32_t i = 0; i < g_lib->n_kernels; i++)
        if (strcmp(g_lib->kernels[i].op, op) == 0 && (!variant || strcmp(g_lib->kernels[i].variant, variant) == 0))
            return &g_lib->kernels[i];
    cr_assert_fail("kern_test has no kernel %s/%s", op, variant ? variant : "*");
    return NULL;
}

/* ---- operands and calls ---------------------------------------------------------------------- */

static RadKArg fbuf(float *p, uint64_t rows, uint64_t cols) {
    RadKArg a = {p, RAD_F32, rows, cols, cols, {NULL}};
    return a;
}
static RadKArg fbuf_s(float *p, uint64_t rows, uint64_t cols, uint64_t stride) {
    RadKArg a = {p, RAD_F32, rows, cols, stride, {NULL}};
    return a;
}
static RadKArg raw_i32(const int32_t *p, uint64_t n) {
    RadKArg a = {(void *)p, RAD_I32, n, 1, 1, {NULL}};
    return a;
}
static RadKArg weight(const void *p, RadDType t, uint64_t rows, uint64_t cols) {
    uint64_t esz = t == RAD_F32 ? 4 : 2;
    RadKArg a = {(void *)p, t, rows, cols, cols * esz, {p, NULL, NULL, NULL}};
    return a;
}

static int call(const RadKernel *k, const RadParam *p, uint32_t np, int64_t n, const RadKArg *args, uint32_t na) {
    RadParam prm[16];
    cr_assert(np <= 16);
    memcpy(prm, p, np * sizeof *p);
    for (uint32_t i = 0; i < np; i++) /* the ranged parameter arrives set to n */
        if (prm[i].kind == RAD_PARAM_RANGE) prm[i].lo = prm[i].hi = n;
    size_t ws = k->workspace ? k->workspace(prm, np, n) : 0;
    void *w = ws ? aligned_alloc(256, (ws + 255) / 256 * 256) : NULL;
    RadKernelArgs a = {sizeof a, prm, np, n, args, na, NULL, NULL, w, g_state, 1, 1, NULL, 0};
    int rc = k->run(&a);
    free(w);
    return rc;
}

/* ---- data ------------------------------------------------------------------------------------ */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
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

/* A weight [rows, cols] of encoding t with random values, and its f32 decoding (libcommon's
 * converters: a second implementation beside the library's own). f16 exponents reach the
 * subnormals. */
static void *make_weight(RadDType t, uint64_t rows, uint64_t cols, float *dec) {
    uint64_t n = rows * cols;
    if (t == RAD_F32) {
        float *w = malloc(n * 4);
        fill(w, n);
        memcpy(dec, w, n * 4);
        return w;
    }
    uint16_t *h = malloc(n * 2);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t r = rnd();
        if (t == RAD_F16) {
            h[i] = (uint16_t)(((r & 1) << 15) | (((r >> 1) % 17) << 10) | ((r >> 8) & 0x3ff));
            dec[i] = rad_f16_to_f32(h[i]);
        } else {
            h[i] = (uint16_t)(((r & 1) << 15) | ((120 + (r >> 1) % 10) << 7) | ((r >> 8) & 0x7f));
            dec[i] = rad_bf16_to_f32(h[i]);
        }
    }
    return h;
}

/* ---- references (docs/OPS.md) ------------------------------------------------------------------ */

static void ref_gemm(const float *x, const float *w, float *y, int M, int N, int K) {
    for (int i = 0; i < M; i++)
        for (int n = 0; n < N; n++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++) {
                const float p = x[i * K + k] * w[n * K + k];
                acc = acc + p;
            }
            y[i * N + n] = acc;
        }
}

static void ref_rmsnorm(const float *x, const float *g, float *out, int M, int N, float eps) {
    for (int i = 0; i < M; i++) {
        float ss = 0.0f;
        for (int j = 0; j < N; j++) {
            const float sq = x[i * N + j] * x[i * N + j];
            ss = ss + sq;
        }
        const float r = 1.0f / sqrtf(ss / (float)N + eps);
        for (int j = 0; j < N; j++) {
            const float xr = x[i * N + j] * r;
            out[i * N + j] = xr * g[j];
        }
    }
}

static void assert_bitwise(const float *got, const float *want, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(bits(got[i]), bits(want[i]), "%s[%zu]: %.9g, reference %.9g", what, i, got[i], want[i]);
}

/* RadExactness's measure: per row, max |got - want| / (max |want| + 1e-6) <= tol. */
static void assert_rows_within(const float *got, const double *want, int M, int N, double tol, const char *what) {
    for (int i = 0; i < M; i++) {
        double err = 0, mx = 0;
        for (int j = 0; j < N; j++) {
            double d = fabs((double)got[i * N + j] - want[i * N + j]);
            if (d > err) err = d;
            if (fabs(want[i * N + j]) > mx) mx = fabs(want[i * N + j]);
        }
        cr_assert(err / (mx + 1e-6) <= tol, "%s row %d: error %.3g of %.3g exceeds %.3g", what, i, err, mx, tol);
    }
}

/* ---- the plugin ------------------------------------------------------------------------------- */

Test(kernel_abi, plugin_info) {
    cr_assert_geq(g_info->struct_size, sizeof(RadPluginInfo));
    cr_assert_eq(g_info->kind, RAD_PLUGIN_KERNELS);
    cr_assert_eq(g_info->abi_major, RAD_ABI_MAJOR);
    cr_assert_leq(g_info->abi_minor, RAD_ABI_MINOR);
    cr_assert_str_eq(g_info->name, "kern_test");
    cr_assert_str_eq(g_info->version, "0.1.0");
    cr_assert(g_info->description && *g_info->description);
}

Test(kernel_abi, table) {
    cr_assert_geq(g_lib->struct_size, sizeof(RadKernelLib));
    cr_assert_eq(g_lib->device, RAD_DEVICE_CPU);
    cr_assert(!g_lib->alloc && !g_lib->free && !g_lib->copy && !g_lib->sync, "a CPU library has no device-memory hooks");
    static const char *ops[] = {"embed_gather", "rmsnorm", "add_rmsnorm", "gemm_nt", "rope", "attn_paged", "silu_mul",
                                "add", "all_reduce", "logits_gather", "logits_gemm"};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) (void)find(ops[i], NULL);
    for (uint32_t i = 0; i < g_lib->n_kernels; i++) {
        const RadKernel *k = &g_lib->kernels[i];
        cr_assert_eq(k->struct_size, sizeof(RadKernel), "%s: struct_size", k->op);
        cr_assert(k->variant && *k->variant && k->run, "%s: variant and run", k->op);
        cr_assert_eq(k->act_dtype, RAD_F32, "%s: act_dtype", k->op);
        cr_assert_geq(k->n_min, 1, "%s: n_min", k->op);
        cr_assert(k->n_max == 0 || k->n_max >= k->n_min, "%s: n range", k->op);
        cr_assert(k->exactness == RAD_EXACT_BITWISE || k->tolerance > 0, "%s: a tolerance kernel states its bound", k->op);
        cr_assert_eq(k->kv_block_size, strcmp(k->op, "attn_paged") == 0 ? 16u : 0u, "%s: kv_block_size", k->op);
    }
    /* plain floats only: a q4_1 weight finds no layout here (refused at declare time) */
    const RadKernel *g = find("gemm_nt", "generic");
    cr_assert_eq(g->weight_encs, RAD_ENC_PLAIN_FLOATS);
    cr_assert_eq(g->weight_encs & RAD_ENC_BIT(RAD_ENC_Q4_1), 0);
    cr_assert_eq(find("gemm_nt", "gemv")->n_max, 1);
    cr_assert_eq(find("add", NULL)->weight_encs, 0, "no weights: weight_encs 0");
}

Test(kernel_abi, no_fused_seam) {
    rad_kernels_fn kern;
    void *p = sym(g_dl, "rad_kernels");
    memcpy(&kern, &p, sizeof p);
    setenv("KERN_TEST_NO_FUSED", "1", 1);
    const RadKernelLib *l = kern();
    unsetenv("KERN_TEST_NO_FUSED");
    cr_assert_eq(l->n_kernels + 1, g_lib->n_kernels);
    for (uint32_t i = 0; i < l->n_kernels; i++) cr_assert_str_neq(l->kernels[i].op, "add_rmsnorm");
}

/* ---- zero rows, bad shapes ------------------------------------------------------------------------ */

/* Zero rows is not a call: every kernel returns RAD_E_SHAPE and writes nothing. */
Test(kernel_abi, zero_rows) {
    float w[64], x[64], y[64], z[64], o[64];
    int32_t ids[4] = {0, 1, 2, 3};
    fill(w, 64), fill(x, 64), fill(y, 64), fill(z, 64);
    for (uint32_t i = 0; i < g_lib->n_kernels; i++) {
        const RadKernel *k = &g_lib->kernels[i];
        const char *op = k->op;
        RadParam prm[] = {RAD_RANGE("M", 1, 4), RAD_INT("N", 4), RAD_INT("K", 4), RAD_INT("V", 4), RAD_FLOAT("eps", 1e-5),
                          RAD_INT("n_head", 1), RAD_INT("head_dim", 4), RAD_INT("n_rot", 4), RAD_FLOAT("theta", 1e4),
                          RAD_INT("scaling", 0), RAD_FLOAT("factor", 1), RAD_FLOAT("low_freq_factor", 1),
                          RAD_FLOAT("high_freq_factor", 4), RAD_INT("orig_ctx", 8192), RAD_INT("exact", 1)};
        RadKArg a[4];
        uint32_t na = 0;
        memset(a, 0, sizeof a);
        if (!strcmp(op, "embed_gather")) a[0] = weight(w, RAD_F32, 4, 4), a[1] = raw_i32(ids, 4), a[2] = fbuf(o, 4, 4), na = 3;
        else if (!strcmp(op, "rmsnorm")) a[0] = weight(w, RAD_F32, 1, 4), a[1] = fbuf(x, 4, 4), a[2] = fbuf(o, 4, 4), na = 3;
        else if (!strcmp(op, "add_rmsnorm"))
            a[0] = weight(w, RAD_F32, 1, 4), a[1] = fbuf(x, 4, 4), a[2] = fbuf(o + 16, 4, 4), a[3] = fbuf(o, 4, 4), na = 4;
        else if (!strcmp(op, "gemm_nt") || !strcmp(op, "logits_gemm"))
            a[0] = weight(w, RAD_F32, 4, 4), a[1] = fbuf(x, 4, 4), a[2] = fbuf(o, 4, 4), na = 3;
        else if (!strcmp(op, "rope")) a[0] = fbuf(o, 4, 4), a[1] = raw_i32(ids, 4), na = 2;
        else if (!strcmp(op, "attn_paged"))
            a[0] = fbuf(x, 4, 4), a[1] = fbuf(y, 4, 4), a[2] = fbuf(z, 4, 4), a[3] = fbuf(o, 4, 4), na = 4;
        else if (!strcmp(op, "silu_mul") || !strcmp(op, "add") || !strcmp(op, "decls_chunked")) /* decls_chunked: add's kernel */
            a[0] = fbuf(x, 4, 4), a[1] = fbuf(y, 4, 4), a[2] = fbuf(o, 4, 4), na = 3;
        else if (!strcmp(op, "all_reduce")) a[0] = fbuf(o, 4, 4), na = 1;
        else if (!strcmp(op, "logits_gather")) a[0] = fbuf(x, 4, 4), a[1] = raw_i32(ids, 4), a[2] = fbuf(o, 4, 4), na = 3;
        else cr_assert_fail("untested op %s", op);
        memset(o, 0x5a, sizeof o);
        RadKernelArgs ka = {sizeof ka, prm, sizeof prm / sizeof *prm, 0, a, na, NULL, NULL, NULL, g_state, 1, 1, NULL, 0};
        cr_assert_eq(k->run(&ka), RAD_E_SHAPE, "%s/%s: zero rows", op, k->variant);
        for (size_t j = 0; j < sizeof o; j++) cr_assert_eq(((uint8_t *)o)[j], 0x5a, "%s: wrote on a zero-row call", op);
    }
}

Test(kernel_abi, shape_mismatch_writes_nothing) {
    float w[12 * 8], x[3 * 8], y[3 * 12];
    fill(w, 96), fill(x, 24);
    memset(y, 0x5a, sizeof y);
    const RadKernel *k = find("gemm_nt", "generic");
    RadParam p[] = {RAD_RANGE("M", 1, 3), RAD_INT("N", 12), RAD_INT("K", 8)};
    RadKArg a[3] = {weight(w, RAD_F32, 12, 8), fbuf(x, 3, 7), fbuf(y, 3, 12)}; /* x is [3, 7], K is 8 */
    cr_assert_eq(call(k, p, 3, 3, a, 3), RAD_E_SHAPE);
    a[1] = fbuf(x, 3, 8);
    a[0] = weight(w, RAD_Q4_1, 12, 8); /* an encoding outside its layout */
    cr_assert_eq(call(k, p, 3, 3, a, 3), RAD_E_SHAPE);
    a[0] = weight(w, RAD_F32, 12, 8);
    cr_assert_eq(call(k, p, 3, 2, a, 2), RAD_E_SHAPE, "operand count");
    for (size_t j = 0; j < sizeof y; j++) cr_assert_eq(((uint8_t *)y)[j], 0x5a);
}

/* ---- gemm_nt, logits_gemm ---------------------------------------------------------------------- */

static void check_gemm(const char *op, const char *variant, RadDType t, int M, int N, int K) {
    float *wd = malloc((size_t)N * K * 4), *x = malloc((size_t)M * (K + 3) * 4), *xs = malloc((size_t)M * K * 4);
    float *y = malloc((size_t)M * N * 4), *ref = malloc((size_t)M * N * 4);
    void *w = make_weight(t, (uint64_t)N, (uint64_t)K, wd);
    fill(x, (size_t)M * (K + 3)); /* rows K+3 apart: the kernel must honour row_stride */
    for (int i = 0; i < M; i++) memcpy(xs + (size_t)i * K, x + (size_t)i * (K + 3), (size_t)K * 4);
    ref_gemm(xs, wd, ref, M, N, K);
    RadParam p[] = {RAD_RANGE("M", 1, 64), RAD_INT("N", N), RAD_INT("K", K)};
    RadKArg a[3] = {weight(w, t, (uint64_t)N, (uint64_t)K), fbuf_s(x, (uint64_t)M, (uint64_t)K, (uint64_t)K + 3),
                    fbuf(y, (uint64_t)M, (uint64_t)N)};
    cr_assert_eq(call(find(op, variant), p, 3, M, a, 3), RAD_OK, "%s/%s", op, variant);
    assert_bitwise(y, ref, (size_t)M * N, op);
    /* and against the exact product, as a check on the reference itself */
    double *exact = malloc((size_t)M * N * sizeof *exact);
    for (int i = 0; i < M; i++)
        for (int n = 0; n < N; n++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += (double)xs[i * K + k] * wd[n * K + k];
            exact[i * N + n] = s;
        }
    assert_rows_within(y, exact, M, N, 1e-5, op);
    free(exact), free(w), free(wd), free(x), free(xs), free(y), free(ref);
}

Test(kernel_abi, gemm_nt_f32) { check_gemm("gemm_nt", "generic", RAD_F32, 5, 7, 33); }
Test(kernel_abi, gemm_nt_f16) { check_gemm("gemm_nt", "generic", RAD_F16, 4, 9, 64); }
Test(kernel_abi, gemm_nt_bf16) { check_gemm("gemm_nt", "generic", RAD_BF16, 3, 6, 40); }
Test(kernel_abi, gemm_nt_gemv_variant) { check_gemm("gemm_nt", "gemv", RAD_BF16, 1, 16, 96); }
Test(kernel_abi, logits_gemm) { check_gemm("logits_gemm", "generic", RAD_F16, 2, 50, 24); }

/* ---- rmsnorm, add_rmsnorm, add ---------------------------------------------------------------- */

Test(kernel_abi, rmsnorm) {
    enum { M = 4, N = 48 };
    float g[N], x[M * N], out[M * N], ref[M * N];
    fill(g, N), fill(x, M * N);
    ref_rmsnorm(x, g, ref, M, N, 1e-5f);
    RadParam p[] = {RAD_RANGE("M", 1, 8), RAD_INT("N", N), RAD_FLOAT("eps", 1e-5)};
    RadKArg a[3] = {weight(g, RAD_F32, 1, N), fbuf(x, M, N), fbuf(out, M, N)};
    cr_assert_eq(call(find("rmsnorm", NULL), p, 3, M, a, 3), RAD_OK);
    assert_bitwise(out, ref, M * N, "rmsnorm");
    /* in place (out aliases x), with a bf16 gamma */
    uint16_t gb[N];
    float gd[N];
    for (int j = 0; j < N; j++) gb[j] = (uint16_t)(bits(g[j]) >> 16), gd[j] = rad_bf16_to_f32(gb[j]);
    ref_rmsnorm(x, gd, ref, M, N, 1e-5f);
    a[0] = weight(gb, RAD_BF16, 1, N), a[2] = fbuf(x, M, N);
    cr_assert_eq(call(find("rmsnorm", NULL), p, 3, M, a, 3), RAD_OK);
    assert_bitwise(x, ref, M * N, "rmsnorm in place");
}

/* add_rmsnorm is exactly add(res, x -> res) then rmsnorm(res -> out): the `replaces` chain. */
Test(kernel_abi, add_rmsnorm_replaces_chain) {
    enum { M = 3, N = 40 };
    float g[N], x[M * N], res[M * N], out[M * N], res2[M * N], out2[M * N];
    fill(g, N), fill(x, M * N), fill(res, M * N);
    memcpy(res2, res, sizeof res);
    RadParam p[] = {RAD_RANGE("M", 1, 8), RAD_INT("N", N), RAD_FLOAT("eps", 1e-6)};
    RadKArg f[4] = {weight(g, RAD_F32, 1, N), fbuf(x, M, N), fbuf(res, M, N), fbuf(out, M, N)};
    cr_assert_eq(call(find("add_rmsnorm", NULL), p, 3, M, f, 4), RAD_OK);
    RadKArg ad[3] = {fbuf(res2, M, N), fbuf(x, M, N), fbuf(res2, M, N)};
    cr_assert_eq(call(find("add", NULL), p, 2, M, ad, 3), RAD_OK);
    RadKArg nm[3] = {weight(g, RAD_F32, 1, N), fbuf(res2, M, N), fbuf(out2, M, N)};
    cr_assert_eq(call(find("rmsnorm", NULL), p, 3, M, nm, 3), RAD_OK);
    assert_bitwise(res, res2, M * N, "add_rmsnorm res");
    assert_bitwise(out, out2, M * N, "add_rmsnorm out");
}

Test(kernel_abi, add) {
    enum { M = 5, N = 13 };
    float x[M * N], y[M * N], out[M * N], ref[M * N];
    fill(x, M * N), fill(y, M * N);
    for (int i = 0; i < M * N; i++) ref[i] = x[i] + y[i];
    RadParam p[] = {RAD_RANGE("M", 1, 8), RAD_INT("N", N)};
    RadKArg a[3] = {fbuf(x, M, N), fbuf(y, M, N), fbuf(out, M, N)};
    cr_assert_eq(call(find("add", NULL), p, 2, M, a, 3), RAD_OK);
    assert_bitwise(out, ref, M * N, "add");
    a[2] = fbuf(x, M, N); /* out aliases a */
    cr_assert_eq(call(find("add", NULL), p, 2, M, a, 3), RAD_OK);
    assert_bitwise(x, ref, M * N, "add in place");
}

/* ---- silu_mul ---------------------------------------------------------------------------------- */

Test(kernel_abi, silu_mul) {
    enum { M = 3, N = 64 };
    float g[M * N], u[M * N], out[M * N];
    double ref[M * N];
    fill(g, M * N), fill(u, M * N);
    g[0] = 30.0f, g[1] = -30.0f, g[2] = 0.0f, g[3] = -100.0f; /* saturation, and exp(100) in f32 is inf */
    for (int i = 0; i < M * N; i++) ref[i] = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
    RadParam p[] = {RAD_RANGE("M", 1, 8), RAD_INT("N", N)};
    RadKArg a[3] = {fbuf(g, M, N), fbuf(u, M, N), fbuf(out, M, N)};
    const RadKernel *k = find("silu_mul", NULL);
    cr_assert_eq(call(k, p, 2, M, a, 3), RAD_OK);
    assert_rows_within(out, ref, M, N, k->tolerance, "silu_mul");
    cr_assert(isfinite(out[3]) && fabsf(out[3]) < 1e-30f, "silu(-100) = %g", out[3]);
}

/* ---- rope ---------------------------------------------------------------------------------------- */

/* The rotation in double, given each pair's frequency. */
static void ref_rope(const float *x, double *out, int n_head, int hd, int n_rot, const double *inv, double pos) {
    for (int h = 0; h < n_head; h++) {
        const float *v = x + h * hd;
        double *o = out + h * hd;
        for (int j = 0; j < hd; j++) o[j] = v[j];
        for (int j = 0; j < n_rot / 2; j++) {
            double c = cos(pos * inv[j]), s = sin(pos * inv[j]);
            o[j] = v[j] * c - v[j + n_rot / 2] * s;
            o[j + n_rot / 2] = v[j + n_rot / 2] * c + v[j] * s;
        }
    }
}

static int run_rope(float *x, const int32_t *pos, int M, int n_head, int hd, int n_rot, double theta, int scaling,
                    double factor, double lo, double hi, int orig) {
    RadParam p[] = {RAD_RANGE("M", 1, 64), RAD_INT("n_head", n_head), RAD_INT("head_dim", hd), RAD_INT("n_rot", n_rot),
                    RAD_FLOAT("theta", theta), RAD_INT("scaling", scaling), RAD_FLOAT("factor", factor),
                    RAD_FLOAT("low_freq_factor", lo), RAD_FLOAT("high_freq_factor", hi), RAD_INT("orig_ctx", orig)};
    RadKArg a[2] = {fbuf(x, (uint64_t)M, (uint64_t)(n_head * hd)), raw_i32(pos, (uint64_t)M)};
    return call(find("rope", NULL), p, sizeof p / sizeof *p, M, a, 2);
}

/* none and linear, with a partial rotation (n_rot < head_dim: the rest passes through). */
Test(kernel_abi, rope_none_linear_partial) {
    enum { M = 3, H = 2, HD = 16, NR = 8 };
    const int32_t pos[M] = {0, 7, 1234};
    for (int scaling = 0; scaling <= 1; scaling++) {
        float x[M * H * HD], x0[M * H * HD];
        double ref[M * H * HD], inv[NR / 2];
        fill(x, M * H * HD);
        memcpy(x0, x, sizeof x);
        double factor = scaling ? 4.0 : 1.0;
        for (int j = 0; j < NR / 2; j++) inv[j] = pow(10000.0, -2.0 * j / NR) / factor; /* positions / factor */
        for (int i = 0; i < M; i++) ref_rope(x0 + i * H * HD, ref + i * H * HD, H, HD, NR, inv, pos[i]);
        cr_assert_eq(run_rope(x, pos, M, H, HD, NR, 10000.0, scaling, factor, 1, 4, 8192), RAD_OK);
        /* angle = pos * inv_freq in f32: relative error ~6e-8 of the angle, up to 1234 rad here */
        assert_rows_within(x, ref, M, H * HD, 2e-4, scaling ? "rope linear" : "rope none");
        for (int i = 0; i < M; i++)
            for (int h = 0; h < H; h++)
                for (int j = NR; j < HD; j++)
                    cr_assert_eq(bits(x[(i * H + h) * HD + j]), bits(x0[(i * H + h) * HD + j]), "dims past n_rot move");
    }
    /* position 0 is the identity, exactly */
    float x[H * HD], x0[H * HD];
    const int32_t z = 0;
    fill(x, H * HD);
    memcpy(x0, x, sizeof x);
    cr_assert_eq(run_rope(x, &z, 1, H, HD, HD, 10000.0, 0, 1, 1, 4, 8192), RAD_OK);
    assert_bitwise(x, x0, H * HD, "rope at position 0");
}

/* llama3 (Llama 3.1's rope_scaling: factor 8, low 1, high 4, original 8192; theta 500000, head_dim
 * 128): one pair from each band, set to (1, 0) so the output is (cos, sin) of pos * inv_freq'.
 * The frequencies were computed by hand, in double, from transformers' formula:
 *   pair  0: wavelen 2*pi < 2048: high band, unchanged            inv' = 1
 *   pair 32: wavelen 4442.88, medium: s = (8192/wavelen - 1) / 3 = 0.2812825545741043,
 *            inv' = (1 - s) * inv / 8 + s * inv with inv = 500000^(-64/128) = 0.001414213445968926
 *            (its f32 value)                                         inv' = 5.248460551919039e-04
 *   pair 63: wavelen 2.56e6 > 8192: low band, inv / 8 with inv = 2.4551407022954663e-06
 *                                                                    inv' = 3.0689258778693329e-07 */
Test(kernel_abi, rope_llama3_hand_computed) {
    enum { HD = 128 };
    static const struct { int pair; double inv; int32_t pos; } cases[] = {
        {0, 1.0, 3}, {32, 5.248460551919039e-04, 1000}, {63, 3.0689258778693329e-07, 100000},
        {32, 5.248460551919039e-04, 20000},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        float x[HD] = {0};
        x[cases[c].pair] = 1.0f;
        cr_assert_eq(run_rope(x, &cases[c].pos, 1, 1, HD, HD, 500000.0, 2, 8.0, 1.0, 4.0, 8192), RAD_OK);
        double ang = cases[c].pos * cases[c].inv;
        /* inv' in f32 is within 2^-23 of the value above, so the angle within pos * inv' * 1.2e-7 */
        double tol = 1e-6 + ang * 2.4e-7;
        cr_assert(fabs(x[cases[c].pair] - cos(ang)) <= tol, "pair %d at %d: cos %.9g, want %.9g", cases[c].pair, cases[c].pos,
                  x[cases[c].pair], cos(ang));
        cr_assert(fabs(x[cases[c].pair + HD / 2] - sin(ang)) <= tol, "pair %d at %d: sin %.9g, want %.9g", cases[c].pair,
                  cases[c].pos, x[cases[c].pair + HD / 2], sin(ang));
        for (int j = 0; j < HD; j++)
            if (j != cases[c].pair && j != cases[c].pair + HD / 2) cr_assert_eq(x[j], 0.0f);
    }
}

Test(kernel_abi, rope_refuses_bad_params) {
    float x[16];
    fill(x, 16);
    float x0[16];
    memcpy(x0, x, sizeof x);
    const int32_t pos = 1, neg = -1;
    cr_assert_eq(run_rope(x, &pos, 1, 1, 16, 7, 1e4, 0, 1, 1, 4, 8192), RAD_E_ARG, "odd n_rot");
    cr_assert_eq(run_rope(x, &pos, 1, 1, 16, 32, 1e4, 0, 1, 1, 4, 8192), RAD_E_ARG, "n_rot > head_dim");
    cr_assert_eq(run_rope(x, &pos, 1, 1, 16, 16, 1e4, 3, 1, 1, 4, 8192), RAD_E_ARG, "unknown scaling");
    cr_assert_eq(run_rope(x, &pos, 1, 1, 16, 16, 1e4, 2, 8, 4, 4, 8192), RAD_E_ARG, "llama3 with high == low");
    cr_assert_eq(run_rope(x, &neg, 1, 1, 16, 16, 1e4, 0, 1, 1, 4, 8192), RAD_E_ARG, "negative position");
    assert_bitwise(x, x0, 16, "rope after refusals");
}

/* ---- gathers --------------------------------------------------------------------------------------- */

Test(kernel_abi, embed_gather) {
    enum { V = 11, N = 20, M = 6 };
    for (int t = 0; t < 3; t++) {
        RadDType dt = t == 0 ? RAD_F32 : t == 1 ? RAD_F16 : RAD_BF16;
        float dec[V * N], out[M * N];
        void *tab = make_weight(dt, V, N, dec);
        const int32_t ids[M] = {3, 0, 10, 3, 7, 1};
        RadParam p[] = {RAD_RANGE("M", 1, 8), RAD_INT("N", N), RAD_INT("V", V)};
        RadKArg a[3] = {weight(tab, dt, V, N), raw_i32(ids, M), fbuf(out, M, N)};
        cr_assert_eq(call(find("embed_gather", NULL), p, 3, M, a, 3), RAD_OK);
        for (int i = 0; i < M; i++) assert_bitwise(out + i * N, dec + ids[i] * N, N, "embed_gather");
        /* an id outside [0, V): RAD_E_ARG, nothing written */
        const int32_t bad[M] = {1, 2, 3, 4, 5, V};
        memset(out, 0x5a, sizeof out);
        a[1] = raw_i32(bad, M);
        cr_assert_eq(call(find("embed_gather", NULL), p, 3, M, a, 3), RAD_E_ARG);
        for (size_t j = 0; j < sizeof out; j++) cr_assert_eq(((uint8_t *)out)[j], 0x5a);
        free(tab);
    }
}

Test(kernel_abi, logits_gather) {
    enum { T = 9, N = 12, M = 3 };
    float x[T * N], out[M * N];
    fill(x, T * N);
    const int32_t rows[M] = {8, 2, 8};
    RadParam p[] = {RAD_RANGE("M", 1, 4), RAD_INT("N", N)};
    RadKArg a[3] = {fbuf(x, T, N), raw_i32(rows, M), fbuf(out, M, N)};
    cr_assert_eq(call(find("logits_gather", NULL), p, 2, M, a, 3), RAD_OK);
    for (int i = 0; i < M; i++) assert_bitwise(out + i * N, x + rows[i] * N, N, "logits_gather");
    const int32_t bad[M] = {0, T, 1};
    memset(out, 0x5a, sizeof out);
    a[1] = raw_i32(bad, M);
    cr_assert_eq(call(find("logits_gather", NULL), p, 2, M, a, 3), RAD_E_ARG);
    for (size_t j = 0; j < sizeof out; j++) cr_assert_eq(((uint8_t *)out)[j], 0x5a);
}

/* ---- all_reduce, attn_paged ------------------------------------------------------------------------ */

Test(kernel_abi, all_reduce_one_rank) {
    enum { M = 2, N = 8 };
    float x[M * N], x0[M * N];
    fill(x, M * N);
    memcpy(x0, x, sizeof x);
    RadParam p[] = {RAD_RANGE("M", 1, 4), RAD_INT("N", N), RAD_INT("exact", 1)};
    RadKArg a[1] = {fbuf(x, M, N)};
    cr_assert_eq(call(find("all_reduce", NULL), p, 3, M, a, 1), RAD_OK);
    assert_bitwise(x, x0, M * N, "all_reduce over one rank");
    /* two ranks: this library has no transport and says so */
    void *st = NULL;
    RadKernelLibConfig cfg = {sizeof cfg, 1, 0, 0, 2, NULL};
    cr_assert_eq(g_lib->init(&cfg, &st), RAD_OK);
    RadParam prm[] = {RAD_RANGE("M", M, M), RAD_INT("N", N), RAD_INT("exact", 1)};
    RadKernelArgs ka = {sizeof ka, prm, 3, M, a, 1, NULL, NULL, NULL, st, 1, 1, NULL, 0};
    cr_assert_eq(find("all_reduce", NULL)->run(&ka), RAD_E_UNSUPPORTED);
    g_lib->fini(st);
}

/* Declared with its block size; not run until the paged KV manager exists (issue 4). */
Test(kernel_abi, attn_paged_declared_not_run) {
    const RadKernel *k = find("attn_paged", NULL);
    cr_assert_eq(k->kv_block_size, 16);
    cr_assert_eq(k->weight_encs, 0);
    float q[64], kk[64], v[64], o[64];
    fill(q, 64), fill(kk, 64), fill(v, 64);
    memset(o, 0x5a, sizeof o);
    RadParam p[] = {RAD_RANGE_ROLE("M", 1, 4, RAD_PROLE_SEQ_CHUNK), RAD_INT("n_head", 2), RAD_INT("n_head_kv", 1),
                    RAD_INT("head_dim", 8), RAD_INT("kv", 0), RAD_INT("layer", 0), RAD_FLOAT("scale", 0.35355339),
                    RAD_INT("prefill_fp8", 0)};
    RadKArg a[4] = {fbuf(q, 4, 16), fbuf(kk, 4, 8), fbuf(v, 4, 8), fbuf(o, 4, 16)};
    cr_assert_eq(call(k, p, 8, 4, a, 4), RAD_E_UNSUPPORTED);
    for (size_t j = 0; j < sizeof o; j++) cr_assert_eq(((uint8_t *)o)[j], 0x5a);
}
