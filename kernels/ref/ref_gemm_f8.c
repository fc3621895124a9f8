/* ref_gemm_f8.c — gemm_nt, gemm_nt2/3 and logits_gemm, variant "fp8": y = x · Wᵀ where a weight
 * may be block-scaled f8_e4m3 (codes, and one f32 scale per 128×128 block: abi/rad_types.h), as
 * DeepSeek-V3 and Qwen3-FP8 checkpoints store their linears.
 *
 * A weight row is decoded exactly — w[n][k] = e4m3(code) · scale[n/128][k/128], one f32 product;
 * a one-plane f8_e4m3 weight has scale 1 — into a per-thread row, then dotted with every row of x
 * in the exact kernel's order (ref_dot8_acc: eight lanes, then a tree). It takes f8_e4m3 weights
 * only, so it is no candidate (nor a rad-kbench row) for other models; a fused gemm_nt2/3 whose
 * parts mix f8 with another encoding does not resolve, and its parts run as gemm_nt each. f32
 * products and sums: TOLERANCE 1e-4, as "exact". Written for correctness (the CPU is not where
 * fp8 checkpoints are served); libr4d has the fast paths. */
#include "ref_gemm.h"
#include "ref_pool.h"

typedef struct F8Ctx {
    RefGemmArgs part[REF_GEMM_MAX_PARTS];
    RefGemmUnits u;
} F8Ctx;

#define CH 256 /* elements decoded at a time without a row buffer: a multiple of 8 and of every block */

/* Elements [k0, k0 + kn) of row n of w, decoded into dst (abi/rad_types.h's decoder). */
static void f8_chunk(const RadKArg *w, int64_t n, int64_t K, int64_t k0, int64_t kn, float *dst) {
    rad_f8_row_decode(ref_wrow(w, (uint64_t)n), rad_f8_scale_row((const float *)w->planes[1], (uint64_t)n, (uint64_t)K),
                      (uint64_t)k0, (uint64_t)kn, dst);
}

static void f8_range(const void *ctx, int i, int64_t c0, int64_t c1) {
    const RefGemmArgs *g = &((const F8Ctx *)ctx)->part[i];
    float *row = ref_scratch(0, (size_t)g->K * sizeof(float)), chunk[CH];
    for (int64_t n = c0; n < c1; n++) {
        if (row) f8_chunk(g->w, n, g->K, 0, g->K, row);
        for (int64_t r = 0; r < g->M; r++) {
            float acc[8] = {0};
            const float *x = ref_frow(g->x, (uint64_t)r);
            if (row) {
                ref_dot8_acc(x, row, g->K, acc);
            } else { /* no row buffer: a chunk at a time on the stack, decoded again for each row (same order) */
                for (int64_t k0 = 0; k0 < g->K; k0 += CH) {
                    const int64_t kn = g->K - k0 < CH ? g->K - k0 : CH;
                    f8_chunk(g->w, n, g->K, k0, kn, chunk);
                    ref_dot8_acc(x + k0, chunk, kn, acc);
                }
            }
            ref_frow(g->y, (uint64_t)r)[n] = ref_red8(acc);
        }
    }
}

static void f8_task(void *ctx, int tid, int nth) { ref_gemm_units_run(&((F8Ctx *)ctx)->u, tid, nth, f8_range, ctx); }

#define F8_ENCS RAD_ENC_BIT(RAD_ENC_F8_E4M3)

static int f8_run(const RadKernelArgs *a, const RefGemmArgs *g, int np) {
    F8Ctx c;
    int64_t N[REF_GEMM_MAX_PARTS];
    for (int i = 0; i < np; i++) {
        if (g[i].w->planes[1] && g[i].w->row_stride != (uint64_t)g[i].K)
            return RAD_E_SHAPE; /* the scales index whole [N, K] rows: a sliced weight is not one */
        c.part[i] = g[i];
        N[i] = g[i].N;
    }
    ref_gemm_units_init(&c.u, N, np, 4);
    int nth = ref_threads_tuned(a, (double)g[0].M * (double)c.u.cols * (double)g[0].K, 32768.0);
    if (nth > c.u.u0[np]) nth = (int)c.u.u0[np];
    ref_parallel(a, nth, f8_task, &c);
    return RAD_OK;
}

int ref_run_gemm_f8(const RadKernelArgs *a) {
    RefGemmArgs g;
    int rc = ref_gemm_args(a, F8_ENCS, &g);
    return rc ? rc : f8_run(a, &g, 1);
}

int ref_run_gemm_multi_f8(const RadKernelArgs *a) {
    RefGemmArgs g[REF_GEMM_MAX_PARTS];
    int np, rc = ref_gemm_multi_args(a, F8_ENCS, g, &np);
    return rc ? rc : f8_run(a, g, np);
}
