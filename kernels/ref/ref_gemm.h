/* ref_gemm.h — what ref_gemm.c (the "exact" variant) and ref_gemm_q8.c (the "q8act" variant)
 * share: the operand checks of gemm_nt / logits_gemm. */
#ifndef REF_GEMM_H
#define REF_GEMM_H

#include "ref_common.h"

typedef struct RefGemmArgs {
    const RadKArg *w, *x, *y;
    int64_t M, N, K;
} RefGemmArgs;

/* Parameters N, K and operands W [N, K] (an encoding of `encs`), x [M, K], y [M, N]: RAD_OK,
 * RAD_E_SHAPE or RAD_E_ARG (docs/OPS.md: gemm_nt). */
static inline int ref_gemm_args(const RadKernelArgs *a, uint64_t encs, RefGemmArgs *g) {
    int rc = ref_preamble(a, 3);
    if (rc) return rc;
    int64_t N, K;
    if (!ref_pint(a, "N", &N) || !ref_pint(a, "K", &K) || N < 1 || K < 1) return RAD_E_ARG;
    g->w = &a->args[0];
    g->x = &a->args[1];
    g->y = &a->args[2];
    g->M = a->n;
    g->N = N;
    g->K = K;
    if (!ref_weight_ok(g->w, encs, (uint64_t)N, (uint64_t)K)) return RAD_E_SHAPE;
    if (!ref_buf_ok(g->x, (uint64_t)g->M, (uint64_t)K) || !ref_buf_ok(g->y, (uint64_t)g->M, (uint64_t)N)) return RAD_E_SHAPE;
    return RAD_OK;
}

#endif
