/* oracle_golden.h — reads a RADORCL1 golden (docs/ORACLE.md): the prompt, the oracle's greedy
 * continuation, and per position the log-sum-exp, the mass outside the top k, the top k ids and
 * log-probabilities, then n_full whole rows of logits. For the oracle and rope-scaling suites. */
#ifndef RAD_TEST_ORACLE_GOLDEN_H
#define RAD_TEST_ORACLE_GOLDEN_H

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Case {
    uint32_t vocab, n_prompt, n_gen, k, n_pos, n_full;
    int32_t *prompt, *gen, *top_id;  /* [n_prompt], [n_gen], [n_pos][k] */
    float *lse, *rest, *top_lp;      /* [n_pos], [n_pos], [n_pos][k] */
    uint32_t *full_pos;              /* [n_full] positions with whole rows */
    float *full;                     /* [n_full][vocab] */
    uint8_t *buf;                    /* the file; free it */
} Case;

/* 0 when the file is missing; a malformed file fails the test. */
static inline int load_case(const char *path, Case *c) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    cr_assert_gt(n, 40, "%s: too short", path);
    c->buf = malloc((size_t)n);
    cr_assert_eq(fread(c->buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    cr_assert_eq(memcmp(c->buf, "RADORCL1", 8), 0, "%s: bad magic", path);
    uint32_t h[8];
    memcpy(h, c->buf + 8, sizeof h);
    c->vocab = h[1], c->n_prompt = h[2], c->n_gen = h[3], c->k = h[4], c->n_pos = h[5], c->n_full = h[6];
    cr_assert_eq(c->n_pos, c->n_prompt + c->n_gen - 1, "%s: header", path);
    uint8_t *p = c->buf + 40;
#define TAKE(dst, type, count) (dst = (type *)(void *)p, p += 4 * (size_t)(count))
    TAKE(c->prompt, int32_t, c->n_prompt);
    TAKE(c->gen, int32_t, c->n_gen);
    TAKE(c->lse, float, c->n_pos);
    TAKE(c->rest, float, c->n_pos);
    TAKE(c->top_id, int32_t, (size_t)c->n_pos * c->k);
    TAKE(c->top_lp, float, (size_t)c->n_pos * c->k);
    TAKE(c->full_pos, uint32_t, c->n_full);
    TAKE(c->full, float, (size_t)c->n_full * c->vocab);
#undef TAKE
    cr_assert_eq(p - c->buf, n, "%s: size differs from its header's layout", path);
    return 1;
}

#endif
