/* rad_sampler.h — choosing the next token from a row of logits. The order is llama.cpp's and
 * vLLM's: logit bias, then repetition / presence / frequency penalties over the tokens seen,
 * then greedy (temperature 0) or top-k, temperature, top-p, min-p and a draw from a seeded
 * generator, so a run with a seed is reproducible. */
#ifndef RAD_SAMPLER_H
#define RAD_SAMPLER_H

#include <stdint.h>

#include "libcommon/base/rad_err.h"

typedef struct RadLogitBias {
    int32_t token;
    float bias;              /* added to the logit; -INFINITY bans the token */
} RadLogitBias;

typedef struct RadSamplerParams {
    float temperature;       /* 0: greedy */
    int32_t top_k;           /* 0: off */
    float top_p;             /* 1: off */
    float min_p;             /* 0: off */
    float repetition_penalty;/* 1: off; >1 divides positive logits of seen tokens, multiplies negative */
    float presence_penalty;  /* subtracted once from each seen token's logit */
    float frequency_penalty; /* subtracted per occurrence */
    const RadLogitBias *bias;
    uint32_t n_bias;
    uint64_t seed;
} RadSamplerParams;

typedef struct RadSampler {
    RadSamplerParams p;
    uint64_t rng[4];         /* xoshiro256** state from the seed */
    uint32_t n_vocab;
    uint32_t *counts;        /* [n_vocab] occurrences in the history */
    int32_t *seen;           /* [n_vocab] the distinct tokens of the history, first seen first */
    uint32_t n_seen;
    float *work;             /* [n_vocab] scratch logits */
    int32_t *idx;            /* [n_vocab] scratch indices */
} RadSampler;

/* Sensible defaults: greedy. */
RadSamplerParams rad_sampler_defaults(void);
int rad_sampler_init(RadSampler *s, const RadSamplerParams *p, uint32_t n_vocab, RadErr *e);
void rad_sampler_free(RadSampler *s);
/* Records a token of the history (prompt or generated) for the penalties. */
void rad_sampler_accept(RadSampler *s, int32_t token);
/* The next token from logits[n_vocab] (not modified). */
int32_t rad_sampler_sample(RadSampler *s, const float *logits);
/* The same among the tokens whose bit is set in allow[(n_vocab + 63) / 64] (a grammar's mask;
 * NULL: all): the others are out after bias and penalties, before temperature, top-k/p and
 * min-p, as llama.cpp's grammar sampler and vLLM's logits processors place it. The caller
 * allows at least one token. */
int32_t rad_sampler_sample_masked(RadSampler *s, const float *logits, const uint64_t *allow);
/* 1 when, without a mask, this sampler's choice is rad_argmax of the logits as they are:
 * temperature 0, no bias, no penalty. */
int rad_sampler_plain_greedy(const RadSampler *s);
/* The first index of the largest of w[0..n) (what greedy sampling picks; a greedy drafter). */
uint32_t rad_argmax(const float *w, uint32_t n);
/* Speculative verification of a drafted token against the row that predicts it (bias, penalties
 * and mask as sample_masked applies them): with a deterministic drafter (its proposal q one-hot
 * at `draft`), the standard rule accepts with probability min(1, p(draft)/q(draft)) = p(draft),
 * else draws from (p - q)+, which is p without the draft, renormalised: the token returned is
 * then distributed exactly as a plain draw from p (Leviathan et al. 2023). Greedy: the argmax,
 * accepted when it is the draft. *accepted says which; the draft is returned when accepted. */
int32_t rad_sampler_verify(RadSampler *s, const float *logits, const uint64_t *allow, int32_t draft, int *accepted);

#endif
