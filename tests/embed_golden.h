/* embed_golden.h — the embedding oracles' goldens (scripts/gen-embed-goldens.py): NAME.golden.zst,
 * a header line naming dim and n, then "<i> <n_ids> <id,...> <dim floats>" per text; and the
 * cosine every embedding test scores by. Header-only, for tests/runtime/embed*_test.c. */
#ifndef RAD_TEST_EMBED_GOLDEN_H
#define RAD_TEST_EMBED_GOLDEN_H

#include <math.h>

#include "tests/test_util.h"

typedef struct EmbedGolden {
    uint32_t n_ids;
    int32_t *ids;                  /* [n_ids] the oracle's token ids, specials included */
    float *v;                      /* [dim] sentence-transformers' vector */
} EmbedGolden;

/* Exactly n_want texts of `dim` floats, each at most max_ids ids; the header must say both. */
static inline EmbedGolden *embed_golden_load(const char *path, int dim, int n_want, uint32_t max_ids) {
    size_t n;
    char *t = unzstd(path, &n), *save = NULL;
    EmbedGolden *g = calloc((size_t)n_want, sizeof *g);
    cr_assert(g);
    char want[64];
    snprintf(want, sizeof want, "dim=%d n=%d ", dim, n_want);
    int k = 0;
    for (char *line = strtok_r(t, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#') {
            cr_assert(strstr(line, want), "%s: header %.100s", path, line);
            continue;
        }
        cr_assert_lt(k, n_want);
        char *p = line, *end;
        cr_assert_eq(strtol(p, &end, 10), k);
        g[k].n_ids = (uint32_t)strtoul(end, &p, 10);
        cr_assert(g[k].n_ids > 0 && g[k].n_ids <= max_ids);
        g[k].ids = malloc(g[k].n_ids * sizeof *g[k].ids);
        g[k].v = malloc((size_t)dim * sizeof *g[k].v);
        cr_assert(g[k].ids && g[k].v);
        for (uint32_t i = 0; i < g[k].n_ids; i++) {
            g[k].ids[i] = (int32_t)strtol(p + 1, &end, 10); /* skip ' ' or ',' */
            p = end;
        }
        for (int d = 0; d < dim; d++) {
            g[k].v[d] = strtof(p, &end);
            cr_assert(end != p, "%s: text %d: %d values", path, k, d);
            p = end;
        }
        k++;
    }
    cr_assert_eq(k, n_want);
    free(t);
    return g;
}

static inline void embed_golden_free(EmbedGolden *g, int n) {
    for (int i = 0; g && i < n; i++) free(g[i].ids), free(g[i].v);
    free(g);
}

static inline double embed_cosine(const float *a, const float *b, int n) {
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) ab += (double)a[i] * b[i], aa += (double)a[i] * a[i], bb += (double)b[i] * b[i];
    return ab / sqrt(aa * bb);
}

#endif
