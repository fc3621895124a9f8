#include "libcommon/runtime/rad_sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

RadSamplerParams rad_sampler_defaults(void) {
    return (RadSamplerParams){.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f,
                              .repetition_penalty = 1.0f, .seed = 0x5eed};
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(uint64_t *s) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* Uniform in [0, 1) with 53 bits. */
static double next_unit(uint64_t *s) { return (double)(next_u64(s) >> 11) * 0x1.0p-53; }

/* Each refusal names its parameter (the server turns the name into the error's param); NaN fails
 * every check, infinities every one but a bias's -inf (a ban). */
int rad_sampler_init(RadSampler *s, const RadSamplerParams *p, uint32_t n_vocab, RadErr *e) {
    memset(s, 0, sizeof *s);
    if (!(p->temperature >= 0 && isfinite(p->temperature)))
        return rad_err_set(e, RAD_E_ARG, "sampler: temperature %g: expected a finite number >= 0 (0: greedy)", (double)p->temperature);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return rad_err_set(e, RAD_E_ARG, "sampler: top_p %g: expected a number in (0, 1] (1: off)", (double)p->top_p);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        return rad_err_set(e, RAD_E_ARG, "sampler: min_p %g: expected a number in [0, 1] (0: off)", (double)p->min_p);
    if (p->top_k < 0) return rad_err_set(e, RAD_E_ARG, "sampler: top_k %d: expected a whole number >= 0 (0: off)", (int)p->top_k);
    if (!(p->repetition_penalty > 0 && isfinite(p->repetition_penalty)))
        return rad_err_set(e, RAD_E_ARG, "sampler: repetition_penalty %g: expected a finite number > 0 (1: off)",
                           (double)p->repetition_penalty);
    if (!isfinite(p->presence_penalty))
        return rad_err_set(e, RAD_E_ARG, "sampler: presence_penalty %g: expected a finite number", (double)p->presence_penalty);
    if (!isfinite(p->frequency_penalty))
        return rad_err_set(e, RAD_E_ARG, "sampler: frequency_penalty %g: expected a finite number", (double)p->frequency_penalty);
    if (p->n_bias && !p->bias) return rad_err_set(e, RAD_E_ARG, "logit_bias: %u entries and no table", p->n_bias);
    for (uint32_t i = 0; i < p->n_bias; i++) {
        if (p->bias[i].token < 0 || (uint32_t)p->bias[i].token >= n_vocab)
            return rad_err_set(e, RAD_E_ARG, "logit_bias: token %d outside the vocabulary (%u)", p->bias[i].token, n_vocab);
        if (isnan(p->bias[i].bias) || p->bias[i].bias == INFINITY)
            return rad_err_set(e, RAD_E_ARG, "logit_bias: token %d: bias %g: expected a finite number or -inf (a ban)", p->bias[i].token,
                               (double)p->bias[i].bias);
    }
    s->p = *p;
    s->n_vocab = n_vocab;
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
    s->counts = calloc(n_vocab, sizeof *s->counts);
    s->work = malloc(n_vocab * sizeof *s->work);
    s->idx = malloc(n_vocab * sizeof *s->idx);
    s->seen = malloc(n_vocab * sizeof *s->seen);
    if (!s->counts || !s->work || !s->idx || !s->seen) {
        rad_sampler_free(s);
        return rad_err_set(e, RAD_E_NOMEM, "sampler: out of memory for a %u-token vocabulary", n_vocab);
    }
    return RAD_OK;
}

void rad_sampler_free(RadSampler *s) {
    free(s->counts);
    free(s->work);
    free(s->idx);
    free(s->seen);
    memset(s, 0, sizeof *s);
}

void rad_sampler_accept(RadSampler *s, int32_t t) {
    if (t >= 0 && (uint32_t)t < s->n_vocab && s->counts[t]++ == 0) s->seen[s->n_seen++] = t;
}

/* The first index of the largest of w[0..n) (NaN never wins; w[0] NaN: 0), as the plain loop
 * `if (w[i] > w[best]) best = i` gives. Greedy decode calls it once a token over the whole
 * vocabulary (49152 floats, just written by the other thread): 16 lanes of max, then the first
 * lane equal to it, instead of a compare and a dependent branch per element. */
static uint32_t argmax_first(const float *w, uint32_t n) {
    uint32_t best = 0, i = 0;
#if defined(__SSE2__)
    if (n >= 16 && w[0] == w[0]) {
        __m128 m0 = _mm_set1_ps(w[0]), m1 = m0, m2 = m0, m3 = m0;
        for (; i + 16 <= n; i += 16) { /* maxps(x, m): m when x is NaN */
            m0 = _mm_max_ps(_mm_loadu_ps(w + i), m0);
            m1 = _mm_max_ps(_mm_loadu_ps(w + i + 4), m1);
            m2 = _mm_max_ps(_mm_loadu_ps(w + i + 8), m2);
            m3 = _mm_max_ps(_mm_loadu_ps(w + i + 12), m3);
        }
        float lanes[4], mx = w[0];
        _mm_storeu_ps(lanes, _mm_max_ps(_mm_max_ps(m0, m1), _mm_max_ps(m2, m3)));
        for (int k = 0; k < 4; k++) mx = lanes[k] > mx ? lanes[k] : mx;
        for (uint32_t j = i; j < n; j++) mx = w[j] > mx ? w[j] : mx;
        const __m128 vm = _mm_set1_ps(mx);
        for (uint32_t j = 0; j + 4 <= n; j += 4) {
            const int hit = _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(w + j), vm));
            if (hit) return j + (uint32_t)__builtin_ctz((unsigned)hit);
        }
        for (uint32_t j = n & ~3u; j < n; j++)
            if (w[j] == mx) return j;
    }
#endif
    for (i = 1; i < n; i++)
        if (w[i] > w[best]) best = i;
    return best;
}

uint32_t rad_argmax(const float *w, uint32_t n) { return argmax_first(w, n); }

static int by_logit_desc(const void *a, const void *b, void *ctx) {
    const float *w = ctx;
    float x = w[*(const int32_t *)a], y = w[*(const int32_t *)b];
    if (x != y) return x > y ? -1 : 1;
    return *(const int32_t *)a - *(const int32_t *)b; /* ties: lower id first, deterministically */
}

int32_t rad_sampler_sample(RadSampler *s, const float *logits) { return rad_sampler_sample_masked(s, logits, NULL); }

/* Bias or a penalty changes the logits before a choice. */
static int adjusts(const RadSamplerParams *p) {
    return p->n_bias || p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
}

int rad_sampler_plain_greedy(const RadSampler *s) { return s->p.temperature == 0.0f && !adjusts(&s->p); }

/* The logits a choice is made from: bias, penalties and the mask applied (in s->work), or the
 * row itself when none applies. *only >= 0: every allowed logit is NaN or -inf, nothing can be
 * ranked, and that token (the first allowed) is the choice. */
static const float *adjusted(RadSampler *s, const float *logits, const uint64_t *allow, int32_t *only) {
    uint32_t n = s->n_vocab;
    const float rp = s->p.repetition_penalty;
    *only = -1;
    if (!adjusts(&s->p) && !allow) return logits; /* plain greedy and plain sampling read the logits in place */
    float *w = s->work;
    memcpy(w, logits, n * sizeof *w);
    for (uint32_t i = 0; i < s->p.n_bias; i++) w[s->p.bias[i].token] += s->p.bias[i].bias;
    for (uint32_t j = 0; j < s->n_seen; j++) { /* the history's tokens, not the vocabulary */
        const int32_t i = s->seen[j];
        if (rp != 1.0f) w[i] = w[i] > 0 ? w[i] / rp : w[i] * rp;
        w[i] -= s->p.presence_penalty + s->p.frequency_penalty * (float)s->counts[i];
    }
    if (allow) { /* a word at a time: most words of a mask are all 0 or all 1 */
        int32_t any = -1;
        for (uint32_t k = 0; k < (n + 63) / 64; k++) {
            const uint64_t m = allow[k];
            const uint32_t i0 = 64 * k, i1 = i0 + 64 < n ? i0 + 64 : n;
            if (m == ~0ull) {
                if (any < 0) any = (int32_t)i0;
                continue;
            }
            for (uint32_t i = i0; i < i1; i++)
                if (!(m >> (i - i0) & 1)) w[i] = -INFINITY;
                else if (any < 0) any = (int32_t)i;
        }
        /* every allowed logit NaN or -inf would leave nothing ranked: the first allowed token */
        float best = -INFINITY;
        for (uint32_t i = 0; i < n && best == -INFINITY; i++) best = w[i] > best ? w[i] : best;
        if (best == -INFINITY) *only = any < 0 ? 0 : any;
    }
    return w;
}

/* The distribution a draw is made from: candidates s->idx[0..m) by descending logit with their
 * probabilities pr[0..m) (malloc'ed; their sum *total, below 1 after top-p or min-p cut it), or
 * NULL when out of memory. Tokens more than 40 temperature units below the best are left out
 * before sorting: each has probability below e^-40 of the best's, so all of them together hold
 * under 1e-12 of the mass (no top-p, top-k or draw can tell), and sorting a few hundred
 * candidates instead of the vocabulary keeps a sampled token's cost near a greedy one's. */
static double *candidates(RadSampler *s, const float *w, uint32_t *m_out, double *total) {
    uint32_t n = s->n_vocab;
    float wmax = w[0];
    for (uint32_t i = 1; i < n; i++)
        if (w[i] > wmax) wmax = w[i];
    const float floor_w = wmax - 40.0f * s->p.temperature;
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++)
        if (w[i] >= floor_w) s->idx[m++] = (int32_t)i;
    if (!m) s->idx[m++] = 0; /* every logit NaN: nothing to rank */
    qsort_r(s->idx, m, sizeof *s->idx, by_logit_desc, (void *)w);
    if (s->p.top_k > 0 && (uint32_t)s->p.top_k < m) m = (uint32_t)s->p.top_k;
    /* softmax at the temperature over the candidates, in double for a stable sum */
    double mx = w[s->idx[0]], sum = 0;
    double *pr = malloc(m * sizeof *pr);
    if (!pr) return NULL;
    for (uint32_t i = 0; i < m; i++) sum += pr[i] = exp(((double)w[s->idx[i]] - mx) / s->p.temperature);
    for (uint32_t i = 0; i < m; i++) pr[i] /= sum;
    /* top-p: the smallest prefix whose mass reaches top_p; min-p: drop below min_p * best */
    if (s->p.top_p < 1.0f) {
        double c = 0;
        for (uint32_t i = 0; i < m; i++) {
            c += pr[i];
            if (c >= s->p.top_p) {
                m = i + 1;
                break;
            }
        }
    }
    if (s->p.min_p > 0.0f) {
        uint32_t k = 1;
        while (k < m && pr[k] >= s->p.min_p * pr[0]) k++;
        m = k;
    }
    double t = 0;
    for (uint32_t i = 0; i < m; i++) t += pr[i];
    *m_out = m;
    *total = t;
    return pr;
}

/* A draw from candidates [0, m) by pr, leaving out candidate `skip` (-1: none) whose share is gone
 * from `total`. */
static int32_t draw(RadSampler *s, const double *pr, uint32_t m, double total, int64_t skip) {
    double r = next_unit(s->rng) * total, c = 0;
    int32_t pick = s->idx[skip == (int64_t)m - 1 && m > 1 ? m - 2 : m - 1];
    for (uint32_t i = 0; i < m; i++) {
        if ((int64_t)i == skip) continue;
        c += pr[i];
        if (r < c) {
            pick = s->idx[i];
            break;
        }
    }
    return pick;
}

int32_t rad_sampler_sample_masked(RadSampler *s, const float *logits, const uint64_t *allow) {
    int32_t only;
    const float *w = adjusted(s, logits, allow, &only);
    if (only >= 0) return only;
    if (s->p.temperature == 0.0f) return (int32_t)argmax_first(w, s->n_vocab); /* greedy: the first maximum */
    uint32_t m;
    double total;
    double *pr = candidates(s, w, &m, &total);
    if (!pr) return s->idx[0];
    int32_t pick = draw(s, pr, m, total, -1);
    free(pr);
    return pick;
}

int32_t rad_sampler_verify(RadSampler *s, const float *logits, const uint64_t *allow, int32_t draft, int *accepted) {
    int32_t only;
    const float *w = adjusted(s, logits, allow, &only);
    int32_t t;
    if (only >= 0) {
        t = only;
    } else if (s->p.temperature == 0.0f) {
        t = (int32_t)argmax_first(w, s->n_vocab);
    } else {
        uint32_t m;
        double total;
        double *pr = candidates(s, w, &m, &total);
        if (!pr) return *accepted = 0, s->idx[0];
        int64_t j = -1;
        for (uint32_t i = 0; i < m && j < 0; i++)
            if (s->idx[i] == draft) j = i;
        /* q is one-hot at the draft: accept with min(1, p/q) = p; else draw from (p - q)+ = p without it */
        const double pd = j >= 0 ? pr[j] / total : 0.0;
        if (j >= 0 && next_unit(s->rng) < pd) {
            free(pr);
            return *accepted = 1, draft;
        }
        t = j >= 0 && m == 1 ? s->idx[0] : draw(s, pr, m, j >= 0 ? total - pr[j] : total, j);
        free(pr);
        return *accepted = 0, t;
    }
    *accepted = t == draft;
    return t;
}
