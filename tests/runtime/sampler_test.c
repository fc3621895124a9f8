/* The sampler: greedy, seeds, top-k/top-p/min-p support, penalties and logit bias. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "libcommon/runtime/rad_sampler.h"

enum { NV = 8 };
static const float LOGITS[NV] = {1.0f, 3.0f, 2.9f, -1.0f, 0.5f, 2.0f, -4.0f, 0.0f};

static RadSampler make(RadSamplerParams p) {
    RadSampler s;
    RadErr e = {0};
    cr_assert_eq(rad_sampler_init(&s, &p, NV, &e), RAD_OK, "%s", e.msg);
    return s;
}

Test(sampler, greedy_is_the_first_maximum) {
    RadSampler s = make(rad_sampler_defaults());
    cr_assert_eq(rad_sampler_sample(&s, LOGITS), 1);
    rad_sampler_free(&s);
}

/* The vectorised greedy scan (16 lanes of max, then the first equal lane) against the plain
 * loop's answer over a vocabulary-sized row: ties, the maximum in the tail, NaNs, signed zeros. */
static uint32_t plain_argmax(const float *w, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (w[i] > w[best]) best = i;
    return best;
}
Test(sampler, greedy_scan_equals_the_plain_loop) {
    enum { N = 49157 };
    static float w[N];
    const uint32_t sizes[] = {N, 16, 17, 33, 5, 1};
    unsigned seed = 3;
    for (int c = 0; c < 9; c++) {
        for (uint32_t i = 0; i < N; i++) {
            seed = seed * 1103515245u + 12345u;
            w[i] = (float)((int)((seed >> 8) & 0xffff) - 32768) / 1024.0f;
        }
        if (c == 1) w[N - 1] = 100.0f;                      /* in the last, partial group */
        if (c == 2) w[7] = w[40000] = w[123] = 100.0f;       /* ties: the first */
        if (c == 3) w[0] = NAN, w[500] = 100.0f;             /* w[0] NaN: the loop keeps 0 */
        if (c == 4) w[3] = NAN, w[9000] = NAN, w[77] = 99.0f;/* NaNs never win */
        if (c == 5) for (uint32_t i = 0; i < N; i++) w[i] = -fabsf(w[i]) - 1.0f; /* all negative */
        if (c == 6) for (uint32_t i = 0; i < N; i++) w[i] = i == 20 ? 0.0f : i == 10 ? -0.0f : -1.0f;
        if (c == 7) for (uint32_t i = 0; i < N; i++) w[i] = -INFINITY;
        if (c == 8) w[N - 3] = INFINITY, w[100] = INFINITY;
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            RadSampler s;
            RadErr e = {0};
            RadSamplerParams p = rad_sampler_defaults();
            cr_assert_eq(rad_sampler_init(&s, &p, sizes[k], &e), RAD_OK, "%s", e.msg);
            cr_assert_eq((uint32_t)rad_sampler_sample(&s, w), plain_argmax(w, sizes[k]), "case %d, n %u", c, sizes[k]);
            rad_sampler_free(&s);
        }
    }
}

Test(sampler, a_seed_reproduces_a_run_and_another_seed_differs) {
    RadSamplerParams p = rad_sampler_defaults();
    p.temperature = 1.5f;
    p.seed = 42;
    int a[64], b[64], c[64];
    RadSampler s1 = make(p), s2 = make(p);
    p.seed = 43;
    RadSampler s3 = make(p);
    for (int i = 0; i < 64; i++) {
        a[i] = rad_sampler_sample(&s1, LOGITS);
        b[i] = rad_sampler_sample(&s2, LOGITS);
        c[i] = rad_sampler_sample(&s3, LOGITS);
    }
    cr_assert_eq(memcmp(a, b, sizeof a), 0);
    cr_assert_neq(memcmp(a, c, sizeof a), 0);
    rad_sampler_free(&s1), rad_sampler_free(&s2), rad_sampler_free(&s3);
}

/* Every draw lies in the set the filter allows, and the set is reached. */
static void support(RadSamplerParams p, const int *allowed, int n_allowed) {
    RadSampler s = make(p);
    int seen[NV] = {0};
    for (int i = 0; i < 2000; i++) seen[rad_sampler_sample(&s, LOGITS)]++;
    for (int t = 0; t < NV; t++) {
        int ok = 0;
        for (int j = 0; j < n_allowed; j++) ok |= allowed[j] == t;
        if (ok) cr_assert_gt(seen[t], 0, "token %d never drawn", t);
        else cr_assert_eq(seen[t], 0, "token %d drawn %d times", t, seen[t]);
    }
    rad_sampler_free(&s);
}

Test(sampler, top_k_top_p_min_p_restrict_the_draw) {
    RadSamplerParams p = rad_sampler_defaults();
    p.temperature = 1.0f;
    p.top_k = 3;
    support(p, (int[]){1, 2, 5}, 3);
    p.top_k = 0;
    p.top_p = 0.5f; /* softmax: p(1) ~ 0.38, p(2) ~ 0.35: the prefix reaching 0.5 is {1, 2} */
    support(p, (int[]){1, 2}, 2);
    p.top_p = 1.0f;
    p.min_p = 0.3f; /* keeps tokens with p >= 0.3 * p(1): 1, 2, 5 (exp(-1) ~ 0.37) */
    support(p, (int[]){1, 2, 5}, 3);
}

Test(sampler, penalties_and_bias_move_the_greedy_choice) {
    RadSamplerParams p = rad_sampler_defaults();
    RadLogitBias ban = {1, -INFINITY};
    p.bias = &ban;
    p.n_bias = 1;
    RadSampler s = make(p);
    cr_assert_eq(rad_sampler_sample(&s, LOGITS), 2);
    rad_sampler_free(&s);
    p = rad_sampler_defaults();
    p.repetition_penalty = 1.1f; /* 3.0 / 1.1 = 2.73 < 2.9 */
    s = make(p);
    rad_sampler_accept(&s, 1);
    cr_assert_eq(rad_sampler_sample(&s, LOGITS), 2);
    rad_sampler_free(&s);
    p = rad_sampler_defaults();
    p.frequency_penalty = 0.06f; /* twice seen: 3.0 - 0.12 < 2.9 */
    s = make(p);
    rad_sampler_accept(&s, 1);
    cr_assert_eq(rad_sampler_sample(&s, LOGITS), 1);
    rad_sampler_accept(&s, 1);
    cr_assert_eq(rad_sampler_sample(&s, LOGITS), 2);
    rad_sampler_free(&s);
    p = rad_sampler_defaults();
    p.presence_penalty = 0.2f;
    s = make(p);
    rad_sampler_accept(&s, 1);
    cr_assert_eq(rad_sampler_sample(&s, LOGITS), 2);
    rad_sampler_free(&s);
}

Test(sampler, refuses_bad_parameters_naming_them) {
    RadSamplerParams p = rad_sampler_defaults();
    p.top_p = 0;
    RadSampler s;
    RadErr e = {0};
    cr_assert_eq(rad_sampler_init(&s, &p, NV, &e), RAD_E_ARG);
    cr_assert(strstr(e.msg, "top_p") != NULL);
    p = rad_sampler_defaults();
    RadLogitBias b = {NV, 1.0f};
    p.bias = &b;
    p.n_bias = 1;
    rad_err_clear(&e);
    cr_assert_eq(rad_sampler_init(&s, &p, NV, &e), RAD_E_ARG);
    cr_assert(strstr(e.msg, "logit_bias") != NULL, "%s", e.msg);
}
