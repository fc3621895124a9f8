/* The sampler's parameter checks: each refusal names its parameter (and only it), NaN and the
 * infinities are refused, the edges of each range pass. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "libcommon/runtime/rad_sampler.h"

enum { NV = 8 };

static void refused(RadSamplerParams p, const char *prefix, const char *what) {
    RadSampler s;
    RadErr e = {0};
    int rc = rad_sampler_init(&s, &p, NV, &e);
    if (rc == RAD_OK) rad_sampler_free(&s);
    cr_assert_eq(rc, RAD_E_ARG, "%s: accepted", what);
    cr_assert(!strncmp(e.msg, prefix, strlen(prefix)), "%s: the refusal does not begin '%s': %s", what, prefix, e.msg);
}

static void accepted(RadSamplerParams p, const char *what) {
    RadSampler s;
    RadErr e = {0};
    cr_assert_eq(rad_sampler_init(&s, &p, NV, &e), RAD_OK, "%s: %s", what, e.msg);
    rad_sampler_free(&s);
}

Test(sampler_check, each_refusal_names_its_parameter) {
    const RadSamplerParams d = rad_sampler_defaults();
    RadSamplerParams p;
    const float bad_temp[] = {-1.0f, NAN, INFINITY};
    for (size_t i = 0; i < 3; i++) p = d, p.temperature = bad_temp[i], refused(p, "sampler: temperature ", "temperature");
    const float bad_top_p[] = {0.0f, (float)1e-300, -0.5f, 1.5f, NAN, INFINITY};
    for (size_t i = 0; i < 6; i++) p = d, p.top_p = bad_top_p[i], refused(p, "sampler: top_p ", "top_p");
    const float bad_min_p[] = {-0.1f, 1.1f, NAN};
    for (size_t i = 0; i < 3; i++) p = d, p.min_p = bad_min_p[i], refused(p, "sampler: min_p ", "min_p");
    p = d, p.top_k = -1, refused(p, "sampler: top_k ", "top_k");
    const float bad_rep[] = {0.0f, -1.0f, NAN, INFINITY};
    for (size_t i = 0; i < 4; i++) p = d, p.repetition_penalty = bad_rep[i], refused(p, "sampler: repetition_penalty ", "repetition_penalty");
    const float bad_pen[] = {NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < 3; i++) {
        p = d, p.presence_penalty = bad_pen[i], refused(p, "sampler: presence_penalty ", "presence_penalty");
        p = d, p.frequency_penalty = bad_pen[i], refused(p, "sampler: frequency_penalty ", "frequency_penalty");
    }
    RadLogitBias b[2] = {{1, 2.0f}, {3, NAN}};
    p = d, p.bias = b, p.n_bias = 2, refused(p, "logit_bias: token 3", "a NaN bias");
    b[1].bias = INFINITY;
    refused(p, "logit_bias: token 3", "a +inf bias");
    b[1] = (RadLogitBias){NV, 1.0f};
    refused(p, "logit_bias: token 8", "a token outside the vocabulary");
    p = d, p.bias = NULL, p.n_bias = 3, refused(p, "logit_bias:", "entries without a table");
}

Test(sampler_check, range_edges_pass) {
    const RadSamplerParams d = rad_sampler_defaults();
    RadSamplerParams p;
    accepted(d, "the defaults");
    p = d, p.top_p = 1e-45f, accepted(p, "the smallest top_p a float holds");
    p = d, p.top_p = 1.0f, p.min_p = 1.0f, accepted(p, "top_p 1, min_p 1");
    p = d, p.temperature = 100.0f, p.top_k = 1 << 30, accepted(p, "temperature 100, a large top_k");
    p = d, p.presence_penalty = -2.0f, p.frequency_penalty = 2.0f, accepted(p, "penalties at +-2");
    RadLogitBias ban = {2, -INFINITY};
    p = d, p.bias = &ban, p.n_bias = 1, accepted(p, "a -inf bias (a ban)");
}
