/* ref_gemm.c — a microbenchmark of libref's gemm_nt (not a test; nothing asserts on time).
 *
 *   cc -std=c11 -D_GNU_SOURCE -O2 -I. -o build/bench_ref_gemm bench/ref_gemm.c -ldl -lm
 *   build/bench_ref_gemm [path/to/kern_ref.so]
 *   build/bench_ref_gemm --same-bits OLD/kern_ref.so NEW/kern_ref.so   (a same-bits change's check)
 *
 * For each shape (N x K weight, encoding) and variant ("exact", "q8act") it times M = 1 (decode)
 * and M = 64 (a prefill chunk) at 1 and 2 threads, and prints GFLOP/s (2·M·N·K per call) and the
 * weight bytes streamed per second (GB/s, M = 1). One thread is timed in process CPU time (a
 * busy machine does not inflate it), two threads in wall time (run it on an idle machine). Weights are random blocks with sane scales;
 * activations uniform in [-1, 1). RAD_REF_ISA=generic in the environment times the portable path. */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "abi/rad_kernels.h"

static uint64_t g_rng = 88172645463325252ull;
static uint64_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}
static float frand(void) { return (float)((double)(rnd() >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

/* f16 of a small positive value (scale-like): exponent 2^-10 .. 2^-5 */
static uint16_t rand_scale(void) { return (uint16_t)(((5 + rnd() % 5) << 10) | (rnd() & 0x3ff)); }

static void *make_weight(RadDType e, int64_t N, int64_t K, uint64_t *row_bytes) {
    const RadEncInfo *ei = rad_enc_info((RadEnc)e);
    uint64_t rb = (uint64_t)K / ei->block_elems * ei->block_bytes;
    uint8_t *w = aligned_alloc(64, (size_t)(rb * (uint64_t)N + 63) & ~(size_t)63);
    for (uint64_t i = 0; i < rb * (uint64_t)N; i++) w[i] = (uint8_t)rnd();
    /* sane scales: overwrite each block's f16 fields */
    for (int64_t n = 0; n < N; n++)
        for (uint64_t b = 0; b < rb / ei->block_bytes; b++) {
            uint8_t *blk = w + n * rb + b * ei->block_bytes;
            uint16_t s1 = rand_scale(), s2 = rand_scale();
            switch ((int)e) {
            case RAD_Q8_0: case RAD_Q4_0: memcpy(blk, &s1, 2); break;
            case RAD_Q5_0: memcpy(blk, &s1, 2); break;
            case RAD_Q4_1: case RAD_Q4_K: case RAD_Q5_1: case RAD_Q5_K: memcpy(blk, &s1, 2); memcpy(blk + 2, &s2, 2); break;
            case RAD_Q6_K: memcpy(blk + 208, &s1, 2); break;
            case RAD_F32: for (uint32_t j = 0; j < ei->block_bytes / 4; j++) { float f = frand(); memcpy(blk + 4 * j, &f, 4); } break;
            case RAD_F16: case RAD_BF16: { uint16_t h = (uint16_t)(e == RAD_F16 ? (0x3000 | (rnd() & 0x3ff)) : (0x3e00 | (rnd() & 0x7f))); memcpy(blk, &h, 2); } break;
            default: break;
            }
        }
    *row_bytes = rb;
    return w;
}

static double clk(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static double now(void) { return clk(CLOCK_MONOTONIC); }

static const RadKernel *find(const RadKernelLib *l, const char *op, const char *var) {
    for (uint32_t i = 0; i < l->n_kernels; i++) {
        const RadKernel *k = rad_kernel_at(l, i);
        if (!strcmp(k->op, op) && !strcmp(k->variant, var)) return k;
    }
    return NULL;
}

/* The library at path, initialised with 2 threads: *dl and *state set, NULL on a failure (said). */
static const RadKernelLib *open_lib(const char *path, void **dl, void **state) {
    *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!*dl) { fprintf(stderr, "%s\n", dlerror()); return NULL; }
    rad_kernels_fn kf;
    void *p = dlsym(*dl, "rad_kernels");
    memcpy(&kf, &p, sizeof p);
    const RadKernelLib *lib = kf();
    *state = NULL;
    RadKernelLibConfig cfg = {sizeof cfg, 2, 0, 0, 1, NULL};
    if (lib->init(&cfg, state)) { fprintf(stderr, "%s: init failed\n", path); dlclose(*dl); return NULL; }
    return lib;
}

/* --same-bits A.so B.so: every GGML encoding's gemm_nt (exact, q8act) at M = 1, 4, 5, 7 through
 * both libraries on the same weights and activations, outputs compared bit for bit (at the
 * RAD_REF_ISA the environment gives): for a change meant to keep every bit. Exit 1 on a difference. */
static int run_lib(const char *path, const char *var, RadDType e, int64_t M, int64_t N, int64_t K, void *w, uint64_t rb, float *x,
                   float *y) {
    void *dl, *state;
    const RadKernelLib *lib = open_lib(path, &dl, &state);
    if (!lib) return -1;
    const RadKernel *k = find(lib, "gemm_nt", var);
    RadParam prm[3] = {RAD_RANGE("M", M, M), RAD_INT("N", N), RAD_INT("K", K)};
    RadKArg args[3] = {{w, e, (uint64_t)N, (uint64_t)K, rb, {w, 0, 0, 0}}, {x, RAD_F32, (uint64_t)M, (uint64_t)K, (uint64_t)K, {0}},
                       {y, RAD_F32, (uint64_t)M, (uint64_t)N, (uint64_t)N, {0}}};
    RadKernelArgs a = {sizeof a, prm, 3, M, args, 3, NULL, NULL, NULL, state, 2, 1, NULL, 0};
    const int rc = k ? k->run(&a) : -1;
    lib->fini(state);
    dlclose(dl);
    return rc;
}
static int same_bits(const char *pa, const char *pb) {
    static const RadDType es[] = {RAD_Q8_0, RAD_Q4_0, RAD_Q4_1, RAD_Q5_0, RAD_Q5_1, RAD_Q4_K, RAD_Q5_K, RAD_Q6_K};
    static const char *const vars[] = {"exact", "q8act"};
    static const int64_t Ms[] = {1, 4, 5, 7};
    const int64_t N = 301, K = 1024;
    int bad = 0;
    for (size_t ei = 0; ei < sizeof es / sizeof es[0]; ei++)
        for (int vi = 0; vi < 2; vi++)
            for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
                const int64_t M = Ms[mi];
                uint64_t rb;
                void *w = make_weight(es[ei], N, K, &rb);
                float *x = malloc(sizeof(float) * (size_t)(M * K)), *y0 = malloc(sizeof(float) * (size_t)(M * N)),
                      *y1 = malloc(sizeof(float) * (size_t)(M * N));
                for (int64_t i = 0; i < M * K; i++) x[i] = frand();
                const int ra = run_lib(pa, vars[vi], es[ei], M, N, K, w, rb, x, y0), rb2 = run_lib(pb, vars[vi], es[ei], M, N, K, w, rb, x, y1);
                const int same = ra == 0 && rb2 == 0 && !memcmp(y0, y1, sizeof(float) * (size_t)(M * N));
                printf("%-5s %-6s M=%lld: %s\n", rad_enc_info((RadEnc)es[ei])->name, vars[vi], (long long)M,
                       same ? "same bits" : ra || rb2 ? "FAILED TO RUN" : "DIFFERENT");
                bad |= !same;
                free(w), free(x), free(y0), free(y1);
            }
    return bad;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--same-bits")) return same_bits(argv[2], argv[3]);
    void *dl, *state;
    const RadKernelLib *lib = open_lib(argc > 1 ? argv[1] : "build/plugins/kern_ref.so", &dl, &state);
    if (!lib) return 1;
    struct { int64_t N, K; RadDType e; } shapes[] = {
        {576, 1536, RAD_Q4_1}, {1536, 576, RAD_Q4_1}, {49152, 576, RAD_Q8_0},
        {576, 1536, RAD_Q4_0}, {576, 1536, RAD_Q8_0}, {576, 1536, RAD_Q4_K}, {576, 1536, RAD_Q6_K},
        {576, 1536, RAD_F32}, {576, 1536, RAD_F16}, {576, 1536, RAD_BF16},
    };
    const char *vars[] = {"exact", "q8act"};
    int Ms[] = {1, 64};
    printf("%-6s %6s %6s %-6s %3s %3s %10s %10s %10s\n", "enc", "N", "K", "var", "M", "thr", "us/call", "GFLOP/s", "GB/s(w)");
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t N = shapes[si].N, K = shapes[si].K;
        uint64_t rb;
        void *w = make_weight(shapes[si].e, N, K, &rb);
        float *x = malloc(sizeof(float) * (size_t)(64 * K)), *y = malloc(sizeof(float) * (size_t)(64 * N));
        for (int64_t i = 0; i < 64 * K; i++) x[i] = frand();
        for (int vi = 0; vi < 2; vi++) {
            const RadKernel *k = find(lib, "gemm_nt", vars[vi]);
            if (!k || !(k->weight_encs & RAD_ENC_BIT(shapes[si].e))) continue;
            for (int mi = 0; mi < 2; mi++)
                for (uint32_t th = 1; th <= 2; th++) {
                    int64_t M = Ms[mi];
                    RadParam prm[3] = {RAD_RANGE("M", M, M), RAD_INT("N", N), RAD_INT("K", K)};
                    RadKArg args[3] = {{w, shapes[si].e, (uint64_t)N, (uint64_t)K, rb, {w, 0, 0, 0}},
                                       {x, RAD_F32, (uint64_t)M, (uint64_t)K, (uint64_t)K, {0}},
                                       {y, RAD_F32, (uint64_t)M, (uint64_t)N, (uint64_t)N, {0}}};
                    RadKernelArgs a = {sizeof a, prm, 3, M, args, 3, NULL, NULL, NULL, state, th, 1, NULL, 0};
                    for (int r = 0; r < 3; r++) k->run(&a);
                    int iters = 0;
                    double t0 = now(), c0 = clk(CLOCK_PROCESS_CPUTIME_ID), t;
                    do {
                        k->run(&a);
                        iters++;
                        t = now() - t0;
                    } while (t < 0.3);
                    double cpu = (clk(CLOCK_PROCESS_CPUTIME_ID) - c0) / iters;
                    /* one thread: CPU time, which a loaded machine does not inflate; more: wall time */
                    double per = th == 1 ? cpu : t / iters;
                    double gflops = 2.0 * (double)M * (double)N * (double)K / per * 1e-9;
                    double gbs = (double)rb * (double)N / per * 1e-9;
                    printf("%-6s %6lld %6lld %-6s %3lld %3u %10.1f %10.2f %10.2f\n", rad_enc_info((RadEnc)shapes[si].e)->name,
                           (long long)N, (long long)K, vars[vi], (long long)M, th, per * 1e6, gflops, M == 1 ? gbs : 0.0);
                }
        }
        free(w);
        free(x);
        free(y);
    }
    lib->fini(state);
    dlclose(dl);
    return 0;
}
