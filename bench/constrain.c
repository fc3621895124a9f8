/* constrain.c — what response_format costs a token (not a test; nothing asserts on time): the
 * token mask (rad_constraint_mask: a cached state's bitset, or a walk of the vocabulary trie the
 * first time a state is reached), the masked draw against the plain one, and the automaton's
 * step, over replies sampled from noise under JSON mode and a schema on a model's real
 * vocabulary (the default model's, 49152 tokens; any GGUF or .rad's). Compare the sum with a
 * decode step (radiance --profile, or tg128's tok/s).
 *
 *   cc -std=c11 -D_GNU_SOURCE -O2 -I. -o build/bench/constrain bench/constrain.c build/libcommon.a \
 *      $(pkg-config --libs libarchive libzstd jansson libxxhash libpcre2-8 libmicrohttpd) -lm -lpthread -ldl
 *   build/bench/constrain [MODEL [REPLIES]]   (default models/SmolLM2-135M-Instruct.Q4_1.gguf, 40) */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "libcommon/format/rad_model.h"
#include "libcommon/runtime/rad_constrain.h"
#include "libcommon/runtime/rad_sampler.h"

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static uint64_t g_rng = 88172645463325252ull;
static float frand(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (float)((g_rng >> 11) * (1.0 / 9007199254740992.0));
}

static const char *WEATHER =
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"type\":\"string\",\"enum\":[\"celsius\","
    "\"fahrenheit\"]},\"days\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":3}},"
    "\"required\":[\"city\",\"unit\"],\"additionalProperties\":false}";

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    const int replies = argc > 2 ? atoi(argv[2]) : 40;
    RadModelFile m;
    RadErr e = {0};
    RadTok *tok;
    RadTokTrie *trie;
    if (rad_model_open(path, &m, &e) || rad_tok_init(&tok, &m.tok, &e)) return fprintf(stderr, "%s\n", e.msg), 1;
    double t0 = now_us();
    if (rad_tok_trie_init(&trie, tok, &e)) return fprintf(stderr, "%s\n", e.msg), 1;
    const int32_t nv = rad_tok_n_vocab(tok);
    printf("%s: %d tokens; the trie built in %.1f ms\n", path, nv, (now_us() - t0) / 1e3);
    float *lg = malloc((size_t)nv * sizeof *lg);
    const int32_t end[2] = {rad_tok_eos(tok), rad_tok_eot(tok)};
    for (int mode = 0; mode < 2; mode++) {
        for (float temp = 0.0f; temp <= 1.0f; temp += 1.0f) {
            double t_mask = 0, t_walk = 0, t_draw = 0, t_plain = 0, t_step = 0;
            uint64_t tokens = 0, walks = 0;
            for (int r = 0; r < replies; r++) {
                RadGrammar *g = NULL;
                if (mode == 0) rad_grammar_json_object(16, &g, &e);
                else {
                    json_t *s = json_loads(WEATHER, 0, NULL);
                    rad_grammar_from_schema(s, &g, NULL, 0, &e);
                    json_decref(s);
                }
                RadConstraint c;
                if (!g || rad_constraint_init(&c, g, trie, end, 2, &e)) return fprintf(stderr, "%s\n", e.msg), 1;
                RadSampler smp;
                RadSamplerParams sp = rad_sampler_defaults();
                sp.temperature = temp;
                sp.seed = (uint64_t)r;
                rad_sampler_init(&smp, &sp, (uint32_t)nv, &e);
                for (int k = 0; k < 300; k++) {
                    for (int32_t i = 0; i < nv; i++) { /* peaked like a model's: a few dozen within 40 of the best */
                        const float u = frand(), u2 = u * u, u4 = u2 * u2, u8 = u4 * u4, u16 = u8 * u8;
                        lg[i] = 60.0f * u16 * u16;
                    }
                    const uint64_t *allow;
                    const uint64_t w0 = c.n_walks;
                    double a = now_us();
                    if (rad_constraint_mask(&c, &allow, &e)) return fprintf(stderr, "%s\n", e.msg), 1;
                    double b = now_us();
                    if (c.n_walks != w0) t_walk += b - a, walks++;
                    else t_mask += b - a;
                    const int32_t t = rad_sampler_sample_masked(&smp, lg, allow);
                    double d = now_us();
                    (void)rad_sampler_sample(&smp, lg);
                    double f = now_us();
                    rad_constraint_accept(&c, tok, t, &e);
                    double h = now_us();
                    t_draw += d - b, t_plain += f - d, t_step += h - f;
                    tokens++;
                    if (t == end[0] || t == end[1] || rad_constraint_done(&c)) break;
                }
                rad_sampler_free(&smp);
                rad_constraint_free(&c);
            }
            const double hits = (double)(tokens - walks);
            printf("%-11s T=%.0f: %5llu tokens, %4llu walks (%6.1f us each); a cached mask %.1f us, masked draw %.1f us "
                   "(plain %.1f), accept %.2f us; all: %.1f us a token\n",
                   mode ? "schema" : "json_object", temp, (unsigned long long)tokens, (unsigned long long)walks,
                   walks ? t_walk / (double)walks : 0.0, hits ? t_mask / hits : 0.0, t_draw / (double)tokens,
                   t_plain / (double)tokens, t_step / (double)tokens, (t_mask + t_walk + t_draw + t_step) / (double)tokens);
        }
    }
    free(lg);
    rad_tok_trie_free(trie);
    rad_tok_free(tok);
    rad_model_free(&m);
    return 0;
}
