/* decode.c — the GEMMs of one decode step through libref, nothing else (not a test; nothing
 * asserts on time), as the engine issues them at M = 1, every weight its own buffer past any cache:
 *   DECODE_MODEL=smollm2 (default): SmolLM2-135M, 30 layers of q/k/v/o/gate/up/down in q4_1 and
 *     the q8_0 lm_head (96 MB);
 *   DECODE_MODEL=qwen15: Qwen2.5-Coder-1.5B Q4_K_M, 28 layers in q4_k (v and down q6_k every other
 *     layer) and the q6_k head (980 MB: what a token reads).
 * Prints ms per step and the weight bytes streamed per second, best of R steps, for 1 and T
 * threads, so the kernels and the pool can be judged against bench/membw.c without the engine
 * (radiance --profile gives the engine's own step). DECODE_PACK=1 packs the weights the library
 * packs (its load-time layout, as the engine does under --fast).
 *
 *   cc -std=c11 -D_GNU_SOURCE -O2 -I. -o build/bench/decode bench/decode.c -ldl -lm
 *   build/bench/decode [THREADS [STEPS [VARIANT [kern_ref.so]]]]   (default 2 50 q8act) */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "abi/rad_kernels.h"

static uint64_t g_rng = 88172645463325252ull;
static uint64_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

typedef struct Gemm {
    int64_t N, K;
    RadDType e;
    uint8_t *w;
    uint64_t rb;
} Gemm;

/* Every weight in one anonymous map with transparent huge pages asked, as the engine keeps them. */
static uint8_t *g_arena;
static size_t g_used, g_cap;
static void *arena_take(size_t bytes) {
    if (!g_arena) {
        g_cap = (size_t)1 << 30;
        g_arena = mmap(NULL, g_cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (g_arena == MAP_FAILED) abort();
        madvise(g_arena, g_cap, MADV_HUGEPAGE);
    }
    void *p = g_arena + g_used;
    g_used += (bytes + 63) & ~(size_t)63;
    if (g_used > g_cap) abort();
    return p;
}

static void make(Gemm *g, int64_t N, int64_t K, RadDType e) {
    const RadEncInfo *ei = rad_enc_info((RadEnc)e);
    g->N = N, g->K = K, g->e = e;
    g->rb = (uint64_t)K / ei->block_elems * ei->block_bytes;
    const size_t bytes = (size_t)(g->rb * (uint64_t)N + 63) & ~(size_t)63;
    g->w = arena_take(bytes);
    for (size_t i = 0; i < bytes; i++) g->w[i] = (uint8_t)rnd();
    for (int64_t b = 0; b < N * K / (int64_t)ei->block_elems; b++) { /* small positive f16 scales */
        uint8_t *blk = g->w + b * ei->block_bytes;
        const uint16_t s = (uint16_t)(((5 + rnd() % 5) << 10) | (rnd() & 0x3ff));
        memcpy(blk + (e == RAD_Q6_K ? 208 : 0), &s, 2);
        if (e == RAD_Q4_1 || e == RAD_Q4_K) memcpy(blk + 2, &s, 2); /* m, dmin */
    }
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    const int T = argc > 1 ? atoi(argv[1]) : 2, R = argc > 2 ? atoi(argv[2]) : 50;
    const char *var = argc > 3 ? argv[3] : "q8act", *path = argc > 4 ? argv[4] : "build/plugins/kern_ref.so";
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    rad_kernels_fn kf;
    void *p = dlsym(dl, "rad_kernels");
    memcpy(&kf, &p, sizeof p);
    const RadKernelLib *lib = kf();
    const RadKernel *gemm = NULL, *head = NULL;
    for (uint32_t i = 0; i < lib->n_kernels; i++) {
        const RadKernel *k = rad_kernel_at(lib, i);
        if (!strcmp(k->variant, var) && !strcmp(k->op, "gemm_nt")) gemm = k;
        if (!strcmp(k->variant, var) && !strcmp(k->op, "logits_gemm")) head = k;
    }
    if (!gemm || !head) {
        fprintf(stderr, "decode: no gemm_nt/logits_gemm variant %s\n", var);
        return 1;
    }
    void *state = NULL;
    RadKernelLibConfig cfg = {sizeof cfg, (uint32_t)T, 0, 0, 1, NULL};
    if (lib->init(&cfg, &state)) {
        fprintf(stderr, "init failed\n");
        return 1;
    }
    /* the model: layers of PER weights [N, K] (encoding: q4_1, or for qwen15 q4_k with v and down
     * q6_k in even layers, as its Q4_K_M file), then the head */
    enum { PER = 7, LMAX = 30 }; /* LMAX: the most layers of the models below */
    const int qwen = getenv("DECODE_MODEL") && !strcmp(getenv("DECODE_MODEL"), "qwen15");
    static const int64_t smol[PER][2] = {{576, 576}, {192, 576}, {192, 576}, {576, 576}, {1536, 576}, {1536, 576}, {576, 1536}};
    static const int64_t qw[PER][2] = {{1536, 1536}, {256, 1536}, {256, 1536}, {1536, 1536}, {8960, 1536}, {8960, 1536}, {1536, 8960}};
    const int L = qwen ? 28 : 30;
    const int64_t(*shp)[2] = qwen ? qw : smol, HN = qwen ? 151936 : 49152, HK = qwen ? 1536 : 576;
    const RadDType HE = qwen ? RAD_Q6_K : RAD_Q8_0;
    static Gemm g[LMAX * PER + 1];
    double bytes = 0;
    for (int l = 0; l < L; l++)
        for (int j = 0; j < PER; j++) {
            const RadDType e = !qwen ? RAD_Q4_1 : (j == 2 || j == 6) && l % 2 == 0 ? RAD_Q6_K : RAD_Q4_K;
            make(&g[l * PER + j], shp[j][0], shp[j][1], e);
            bytes += (double)(g[l * PER + j].rb * (uint64_t)shp[j][0]);
        }
    const int packed = getenv("DECODE_PACK") && atoi(getenv("DECODE_PACK"));
    for (int i = 0; packed && i < L * PER; i++) { /* the library's load-time layout, as the engine packs it */
        const size_t pb = lib->pack_size(state, g[i].e, (uint64_t)g[i].N, (uint64_t)g[i].K);
        if (!pb) continue; /* stored: the library keeps this one */
        uint8_t *tmp = malloc(pb);
        lib->pack(state, g[i].e, (uint64_t)g[i].N, (uint64_t)g[i].K, g[i].w, g[i].rb, tmp);
        memcpy(g[i].w, tmp, pb); /* same size, in place */
        free(tmp);
        g[i].e = (RadDType)(g[i].e | RAD_PACKED);
    }
    make(&g[L * PER], HN, HK, HE);
    const double head_bytes = (double)(g[L * PER].rb * (uint64_t)HN);
    bytes += head_bytes;
    float *x = malloc(sizeof(float) * 151936), *y = malloc(sizeof(float) * 151936);
    for (int i = 0; i < 151936; i++) x[i] = (float)((double)(rnd() >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    for (int th = 1; th <= T; th += (T > 1 ? T - 1 : 1)) {
        double best = 1e30, sum = 0, best_layers = 1e30, best_head = 1e30;
        for (int r = 0; r < R + 2; r++) {
            const double t0 = now();
            double th0 = t0;
            for (int i = 0; i < L * PER + 1; i++) {
                if (i == L * PER) th0 = now();
                RadParam prm[3] = {RAD_RANGE("M", 1, 1), RAD_INT("N", g[i].N), RAD_INT("K", g[i].K)};
                RadKArg args[3] = {{g[i].w, g[i].e, (uint64_t)g[i].N, (uint64_t)g[i].K, g[i].rb, {g[i].w, 0, 0, 0}},
                                   {x, RAD_F32, 1, (uint64_t)g[i].K, (uint64_t)g[i].K, {0}},
                                   {y, RAD_F32, 1, (uint64_t)g[i].N, (uint64_t)g[i].N, {0}}};
                RadKernelArgs a = {sizeof a, prm, 3, 1, args, 3, NULL, NULL, NULL, state, (uint32_t)th, 1, NULL, 0};
                if ((i == L * PER ? head : gemm)->run(&a)) {
                    fprintf(stderr, "run failed\n");
                    return 1;
                }
            }
            const double t1 = now(), t = t1 - t0;
            if (r >= 2) { /* two warm-up steps */
                best = t < best ? t : best;
                best_layers = th0 - t0 < best_layers ? th0 - t0 : best_layers;
                best_head = t1 - th0 < best_head ? t1 - th0 : best_head;
                sum += t;
            }
        }
        printf("%s %d thread%s: best %.3f ms/step (%.2f GB/s, %.1f steps/s), mean %.3f ms\n", var, th, th > 1 ? "s" : "",
               best * 1e3, bytes / best * 1e-9, 1.0 / best, sum / R * 1e3);
        printf("  layers best %.3f ms (%.2f GB/s), head best %.3f ms (%.2f GB/s)\n", best_layers * 1e3,
               (bytes - head_bytes) / best_layers * 1e-9, best_head * 1e3, head_bytes / best_head * 1e-9);
    }
    lib->fini(state);
    dlclose(dl);
    return 0;
}
