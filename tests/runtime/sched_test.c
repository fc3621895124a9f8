/* The scheduler on SmolLM2 (q4_1, libref, deterministic): concurrent requests give what each
 * gives alone through the engine's one-sequence path; the prefix cache, preemption, cancel,
 * logprobs and admission refusals. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/text/rad_chat.h"
#include "libcommon/runtime/rad_sched.h"

static char dir[256], model[300];

static void setup(void) {
    const char *b = getenv("RAD_BUILD");
    snprintf(dir, sizeof dir, "/tmp/rad-sched-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(model, sizeof model, "%s/m.rad", dir);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/rad-convert models/SmolLM2-135M-Instruct.Q4_1.gguf -o %s 2>&1", b ? b : "build", model);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}
static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

typedef struct Fix {
    RadEngine *en;
    RadTok *tok;
    RadSched *s;
    pthread_t th;
} Fix;

static void *loop(void *p) {
    rad_sched_run(p);
    return NULL;
}

static void fix_open(Fix *f, uint32_t max_seqs, uint32_t kv_blocks, int prefix) {
    const char *b = getenv("RAD_BUILD");
    static char d[256];
    snprintf(d, sizeof d, "%s/plugins", b ? b : "build");
    static const char *dirs[1] = {d};
    RadEngineOpts o = {.model = model, .plugin_dirs = dirs, .n_plugin_dirs = 1, .kernels = "ref", .max_tok = 48,
                       .max_seqs = max_seqs, .max_ctx = 256, .n_threads = 2, .deterministic = 1, .kv_blocks = kv_blocks};
    RadErr e = {0};
    cr_assert_eq(rad_engine_open(&f->en, &o, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_tok_init(&f->tok, rad_engine_tok_data(f->en), &e), RAD_OK, "%s", e.msg);
    RadSchedOpts so = {.max_seqs = max_seqs, .max_mixed_tok = 48, .prefix_cache = prefix};
    cr_assert_eq(rad_sched_open(&f->s, f->en, f->tok, &so, &e), RAD_OK, "%s", e.msg);
}

static void fix_start(Fix *f) { cr_assert_eq(pthread_create(&f->th, NULL, loop, f->s), 0); }

static void fix_close(Fix *f) {
    rad_sched_stop(f->s);
    if (f->th) pthread_join(f->th, NULL);
    rad_sched_close(f->s);
    rad_tok_free(f->tok);
    rad_engine_close(f->en);
}

/* What a request's sink collected. */
typedef struct Got {
    pthread_mutex_t *mu;
    pthread_cond_t *cv;
    int *n_done;
    char text[4096];
    size_t len;
    int32_t tokens[256];
    uint32_t n_tokens, n_cached, n_prompt;
    RadGenFinish finish;
    int events_after_finish;
    float logprob[256];
    RadGenTop top[256][3];
    uint32_t n_top[256];
    RadSched *cancel_in; /* cancel after this many tokens, when set */
    uint32_t cancel_after;
} Got;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int n_done;

static void sink(void *user, const RadGenEvent *ev) {
    Got *g = user;
    pthread_mutex_lock(&mu);
    if (g->finish) g->events_after_finish++;
    if (ev->len && g->len + ev->len < sizeof g->text) memcpy(g->text + g->len, ev->text, ev->len), g->len += ev->len;
    if (!ev->finish && ev->token >= 0 && g->n_tokens < 256) {
        g->logprob[g->n_tokens] = ev->logprob;
        g->n_top[g->n_tokens] = ev->n_top;
        if (ev->n_top) memcpy(g->top[g->n_tokens], ev->top, (ev->n_top < 3 ? ev->n_top : 3) * sizeof *ev->top);
        g->tokens[g->n_tokens++] = ev->token;
    }
    g->n_cached = ev->n_cached;
    g->n_prompt = ev->n_prompt;
    int cancel = g->cancel_in && !ev->finish && g->n_tokens == g->cancel_after;
    if (ev->finish) {
        g->finish = ev->finish;
        n_done++;
        pthread_cond_broadcast(&cv);
    }
    pthread_mutex_unlock(&mu);
    if (cancel) rad_sched_cancel(g->cancel_in, ev->id);
}

static void wait_done(int n) {
    pthread_mutex_lock(&mu);
    while (n_done < n) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
}

static int32_t *encode(Fix *f, const char *text, uint32_t *n) {
    int32_t *ids;
    size_t k;
    RadErr e = {0};
    cr_assert_eq(rad_tok_encode(f->tok, text, strlen(text), 1, &ids, &k, &e), RAD_OK, "%s", e.msg);
    *n = (uint32_t)k;
    return ids;
}

/* The greedy continuation through the engine's one-sequence path (no scheduler). */
static uint32_t greedy_alone(Fix *f, const int32_t *prompt, uint32_t n, uint32_t max, int32_t *out) {
    RadErr e = {0};
    uint32_t nv;
    int32_t eos = rad_tok_eos(f->tok), eot = rad_tok_eot(f->tok);
    cr_assert_eq(rad_engine_forward(f->en, 999, prompt, n, 0, 1, &e), RAD_OK, "%s", e.msg);
    uint32_t k = 0;
    for (; k < max; k++) {
        const float *lg = rad_engine_logits(f->en, &nv);
        int32_t best = 0;
        for (uint32_t i = 1; i < nv; i++)
            if (lg[i] > lg[best]) best = (int32_t)i;
        out[k] = best;
        if (best == eos || best == eot) return k + 1;
        if (k + 1 < max) cr_assert_eq(rad_engine_forward(f->en, 999, &best, 1, n + k, 1, &e), RAD_OK, "%s", e.msg);
    }
    rad_engine_drop_seq(f->en, 999);
    return k;
}

static const char *PROMPTS[] = {
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "1, 2, 3, 4,",
    "The three primary colours are",
    "Water boils at",
    "In 1969, the first humans to walk on the Moon were",
    "A haiku about autumn:",
};
enum { NP_ALL = 8, GEN = 12 };
/* The sanitizer build (RAD_ORACLE_QUICK) runs half the prompts: the schedule is the same kind. */
static int np(void) { return getenv("RAD_ORACLE_QUICK") ? 4 : NP_ALL; }

static void submit(Fix *f, const char *text, uint32_t max_tokens, Got *g, uint64_t *id) {
    uint32_t n;
    int32_t *ids = encode(f, text, &n);
    RadGenReq r = {.prompt = ids, .n_prompt = n, .sp = rad_sampler_defaults(), .max_tokens = max_tokens};
    RadErr e = {0};
    cr_assert_eq(rad_sched_submit(f->s, &r, sink, g, id, &e), RAD_OK, "%s", e.msg);
    free(ids);
}

TestSuite(sched, .init = setup, .fini = teardown);

/* Eight requests at once, with room for all, then again with room for three running at a time
 * and a KV pool that forces preemption: every output equals the request's alone. */
static void concurrent(uint32_t max_seqs, uint32_t kv_blocks) {
    Fix f = {0};
    fix_open(&f, max_seqs, kv_blocks, 1);
    static Got g[NP_ALL];
    const int NP = np();
    memset(g, 0, sizeof g);
    n_done = 0;
    uint64_t id;
    for (int i = 0; i < NP; i++) submit(&f, PROMPTS[i], GEN, &g[i], &id);
    fix_start(&f); /* all queued before the first step: the schedule does not depend on timing */
    wait_done(NP);
    RadSchedStats st;
    rad_sched_stats(f.s, &st);
    fix_close(&f);
    /* the reference: each alone, on a fresh engine */
    Fix r = {0};
    fix_open(&r, 1, 0, 0);
    for (int i = 0; i < NP; i++) {
        uint32_t n;
        int32_t *ids = encode(&r, PROMPTS[i], &n), want[GEN];
        uint32_t k = greedy_alone(&r, ids, n, GEN, want);
        free(ids);
        cr_assert_eq(g[i].n_tokens, k, "prompt %d: %u tokens, alone %u", i, g[i].n_tokens, k);
        for (uint32_t j = 0; j < k; j++) cr_assert_eq(g[i].tokens[j], want[j], "prompt %d token %u", i, j);
        cr_assert(g[i].finish == RAD_FINISH_LENGTH || g[i].finish == RAD_FINISH_STOP);
        cr_assert_eq(g[i].events_after_finish, 0);
    }
    fix_close(&r);
    cr_assert_eq(st.running, 0);
    cr_assert_eq(st.waiting, 0);
    cr_assert_eq(st.kv_blocks_used, 0, "blocks left held after every request finished");
    if (kv_blocks)
        cr_assert_gt(st.preemptions, 0, "the small pool should have forced a preemption (%llu steps)", (unsigned long long)st.steps);
}

Test(sched, concurrent_requests_equal_each_alone) { concurrent(8, 0); }

Test(sched, preemption_by_recompute_keeps_every_output) {
    /* blocks for about two sequences of prompt + GEN: three running at once must preempt */
    concurrent(3, 4);
}

Test(sched, the_prefix_cache_serves_a_repeated_prompt) {
    Fix f = {0};
    fix_open(&f, 4, 0, 1);
    fix_start(&f);
    static Got a, b;
    memset(&a, 0, sizeof a), memset(&b, 0, sizeof b);
    n_done = 0;
    uint64_t id;
    const char *p = "Once upon a time, in a small village by the sea, there lived an old fisherman who had a dog, a cat, "
                    "and a very old boat that he painted blue every spring. One morning";
    submit(&f, p, 8, &a, &id);
    wait_done(1);
    submit(&f, p, 8, &b, &id);
    wait_done(2);
    RadSchedStats st;
    rad_sched_stats(f.s, &st);
    fix_close(&f);
    uint32_t B = 16;
    cr_assert_eq(a.n_cached, 0);
    cr_assert_geq(b.n_cached + B, b.n_prompt, "second run: %u of %u prompt tokens cached", b.n_cached, b.n_prompt);
    cr_assert_gt(b.n_cached, 0);
    cr_assert_eq(st.prefix_hits_tok, b.n_cached);
    cr_assert_eq(a.n_tokens, b.n_tokens);
    cr_assert_eq(memcmp(a.tokens, b.tokens, a.n_tokens * sizeof *a.tokens), 0, "cached KV changed the output");
    cr_assert_eq(a.len, b.len);
}

Test(sched, cancel_frees_the_sequence_at_the_next_step) {
    Fix f = {0};
    fix_open(&f, 2, 0, 0);
    fix_start(&f);
    static Got g;
    memset(&g, 0, sizeof g);
    g.cancel_in = f.s;
    g.cancel_after = 3;
    n_done = 0;
    uint64_t id;
    uint32_t n;
    int32_t *ids = encode(&f, "Once upon a time", &n);
    RadGenReq r = {.prompt = ids, .n_prompt = n, .sp = rad_sampler_defaults(), .max_tokens = 100, .ignore_eos = 1};
    RadErr e = {0};
    cr_assert_eq(rad_sched_submit(f.s, &r, sink, &g, &id, &e), RAD_OK, "%s", e.msg);
    free(ids);
    wait_done(1);
    RadSchedStats st;
    rad_sched_stats(f.s, &st);
    cr_assert_eq(g.finish, RAD_FINISH_CANCELLED, "finish %d after %u tokens: %.*s", g.finish, g.n_tokens, (int)g.len, g.text);
    cr_assert_leq(g.n_tokens, 4, "%u tokens after the cancel", g.n_tokens);
    cr_assert_eq(st.kv_blocks_used, 0);
    rad_sched_cancel(f.s, id); /* a dead id is ignored */
    fix_close(&f);
}

Test(sched, logprobs_and_top_alternatives) {
    Fix f = {0};
    fix_open(&f, 2, 0, 0);
    fix_start(&f);
    static Got g;
    memset(&g, 0, sizeof g);
    n_done = 0;
    uint32_t n;
    int32_t *ids = encode(&f, "The capital of France is", &n);
    RadGenReq r = {.prompt = ids, .n_prompt = n, .sp = rad_sampler_defaults(), .max_tokens = 6, .logprobs = 1,
                   .top_logprobs = 3};
    RadErr e = {0};
    uint64_t id;
    cr_assert_eq(rad_sched_submit(f.s, &r, sink, &g, &id, &e), RAD_OK, "%s", e.msg);
    free(ids);
    wait_done(1);
    fix_close(&f);
    cr_assert_eq(g.n_tokens, 6);
    for (uint32_t t = 0; t < g.n_tokens; t++) {
        cr_assert_eq(g.n_top[t], 3);
        cr_assert_leq(g.logprob[t], 0.0f);
        cr_assert_eq(g.top[t][0].token, g.tokens[t], "greedy: the chosen token is the most likely");
        cr_assert_float_eq(g.top[t][0].logprob, g.logprob[t], 1e-6);
        cr_assert_geq(g.top[t][0].logprob, g.top[t][1].logprob);
        cr_assert_geq(g.top[t][1].logprob, g.top[t][2].logprob);
        double mass = exp(g.top[t][0].logprob) + exp(g.top[t][1].logprob) + exp(g.top[t][2].logprob);
        cr_assert_leq(mass, 1.0 + 1e-5);
    }
}

Test(sched, admission_refusals_name_the_field) {
    Fix f = {0};
    fix_open(&f, 2, 0, 0);
    fix_start(&f);
    int32_t big[300];
    for (int i = 0; i < 300; i++) big[i] = 100 + i;
    RadGenReq r = {.prompt = big, .n_prompt = 300, .sp = rad_sampler_defaults()};
    RadErr e = {0};
    uint64_t id;
    static Got g;
    cr_assert_eq(rad_sched_submit(f.s, &r, sink, &g, &id, &e), RAD_E_LIMIT);
    cr_assert(strstr(e.msg, "prompt") && strstr(e.msg, "context"), "%s", e.msg);
    r.n_prompt = 10, r.max_tokens = 250;
    rad_err_clear(&e);
    cr_assert_eq(rad_sched_submit(f.s, &r, sink, &g, &id, &e), RAD_E_LIMIT);
    cr_assert(strstr(e.msg, "max_tokens") != NULL, "%s", e.msg);
    r.max_tokens = 4;
    RadLogitBias bias = {60000, 1.0f};
    r.sp.bias = &bias, r.sp.n_bias = 1;
    rad_err_clear(&e);
    cr_assert_eq(rad_sched_submit(f.s, &r, sink, &g, &id, &e), RAD_E_ARG);
    cr_assert(strstr(e.msg, "logit_bias") != NULL, "%s", e.msg);
    r.sp.n_bias = 0;
    big[3] = -5;
    rad_err_clear(&e);
    cr_assert_eq(rad_sched_submit(f.s, &r, sink, &g, &id, &e), RAD_E_ARG);
    cr_assert(strstr(e.msg, "index 3") != NULL, "%s", e.msg);
    rad_sched_drain(f.s);
    big[3] = 7;
    rad_err_clear(&e);
    cr_assert_eq(rad_sched_submit(f.s, &r, sink, &g, &id, &e), RAD_E_DRAINING);
    cr_assert(strstr(e.msg, "shutting down") != NULL, "%s", e.msg);
    fix_close(&f);
}

/* A full queue is RAD_E_BUSY ("try again": HTTP 429), a code of its own, not RAD_E_LIMIT (a
 * request that can never fit: 400) told apart by its message. With no loop running, max_seqs 2
 * and the default queue of 1024, request 1027 finds it full. */
Test(sched, full_queue_is_busy_not_limit) {
    Fix f = {0};
    fix_open(&f, 2, 0, 0);
    int32_t p[4] = {100, 101, 102, 103};
    RadGenReq r = {.prompt = p, .n_prompt = 4, .max_tokens = 2, .sp = rad_sampler_defaults()};
    RadErr e = {0};
    uint64_t id;
    static Got g[1027];
    for (int i = 0; i < 1026; i++) cr_assert_eq(rad_sched_submit(f.s, &r, sink, &g[i], &id, &e), RAD_OK, "%d: %s", i, e.msg);
    cr_assert_eq(rad_sched_submit(f.s, &r, sink, &g[1026], &id, &e), RAD_E_BUSY, "%s", e.msg);
    cr_assert(strstr(e.msg, "queue is full") != NULL, "%s", e.msg);
    fix_close(&f);
}

/* Runs what is queued to its end on this thread (the CLI's way: rad_sched_run_idle). */
static void run_one(Fix *f, const int32_t *ids, uint32_t n, uint32_t max_tokens, const int32_t *stop_ids,
                    uint32_t n_stop_ids, Got *g) {
    memset(g, 0, sizeof *g);
    RadGenReq r = {.prompt = ids, .n_prompt = n, .sp = rad_sampler_defaults(), .max_tokens = max_tokens, .ignore_eos = 1,
                   .stop_ids = stop_ids, .n_stop_ids = n_stop_ids};
    RadErr e = {0};
    uint64_t id;
    cr_assert_eq(rad_sched_submit(f->s, &r, sink, g, &id, &e), RAD_OK, "%s", e.msg);
    rad_sched_run_idle(f->s);
    cr_assert_neq(g->finish, RAD_FINISH_NONE, "rad_sched_run_idle returned before the request finished");
}

/* The first index of t in g's tokens, or g->n_tokens. */
static uint32_t index_of(const Got *g, int32_t t) {
    uint32_t k = 0;
    while (k < g->n_tokens && g->tokens[k] != t) k++;
    return k;
}

/* A stop id ends generation where it is sampled, with finish STOP, ignore_eos or not; it is not
 * emitted, and what comes before is what the request without it gives. */
Test(sched, stop_ids_end_generation_even_with_ignore_eos) {
    Fix f = {0};
    fix_open(&f, 1, 0, 1);
    uint32_t n;
    int32_t *ids = encode(&f, "Once upon a time", &n);
    static Got a, b;
    run_one(&f, ids, n, 16, NULL, 0, &a);
    cr_assert_eq(a.finish, RAD_FINISH_LENGTH);
    cr_assert_eq(a.n_tokens, 16);
    int32_t t = a.tokens[5], stops[2] = {60, t};
    uint32_t k = index_of(&a, t);
    if (index_of(&a, 60) < k) stops[0] = t;
    run_one(&f, ids, n, 16, stops, 2, &b);
    cr_assert_eq(b.finish, RAD_FINISH_STOP, "finish %d after %u tokens", b.finish, b.n_tokens);
    cr_assert_eq(b.n_tokens, k, "stopped after %u tokens, token %d is at %u", b.n_tokens, t, k);
    cr_assert_eq(memcmp(a.tokens, b.tokens, k * sizeof *a.tokens), 0);
    cr_assert(b.len <= a.len && memcmp(a.text, b.text, b.len) == 0, "'%.*s' is not a prefix of '%.*s'", (int)b.len, b.text,
              (int)a.len, a.text);
    /* a stop id outside the vocabulary is refused by name */
    int32_t bad = 60000;
    RadGenReq r = {.prompt = ids, .n_prompt = n, .sp = rad_sampler_defaults(), .max_tokens = 4, .stop_ids = &bad, .n_stop_ids = 1};
    RadErr e = {0};
    uint64_t id;
    cr_assert_eq(rad_sched_submit(f.s, &r, sink, &b, &id, &e), RAD_E_ARG);
    cr_assert(strstr(e.msg, "stop_ids") != NULL, "%s", e.msg);
    free(ids);
    fix_close(&f);
}

/* A chat format whose turn end is neither EOS nor EOT: ChatML as a model would have it whose
 * turn ends at <|im_start|> (SmolLM2's BOS; its EOS <|im_end|> is passed over with ignore_eos,
 * as a tokenizer naming another EOS would). rad_chat_stop_ids makes the format's stop string a
 * stop id, and the reply ends there with STOP. */
Test(sched, a_chat_turn_end_that_is_not_eos_stops) {
    Fix f = {0};
    fix_open(&f, 1, 0, 1);
    static const char *const stop[] = {"<|im_start|>", "not one token", NULL};
    RadChatFormat cf = {.struct_size = sizeof cf, .kind = "chatml", .bos = "", .system_start = "<|im_start|>system\n",
                        .system_end = "<|im_end|>\n", .user_start = "<|im_start|>user\n", .user_end = "<|im_end|>\n",
                        .assistant_start = "<|im_start|>assistant\n", .assistant_end = "<|im_end|>\n", .stop = stop};
    int32_t stop_ids[RAD_CHAT_MAX_STOP_IDS];
    uint32_t n_stop;
    RadErr e = {0};
    cr_assert_eq(rad_chat_stop_ids(&cf, f.tok, stop_ids, &n_stop, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(n_stop, 1, "<|im_start|> is one special token; the rest are not");
    int32_t end = stop_ids[0];
    cr_assert(end != rad_tok_eos(f.tok) && end != rad_tok_eot(f.tok), "the turn end %d is EOS or EOT", end);
    RadChatMsg msgs[] = {{.role = RAD_ROLE_USER, .content = "What is 2+2?"}};
    int32_t *ids;
    size_t n;
    cr_assert_eq(rad_chat_encode(&cf, f.tok, msgs, 1, RAD_CHAT_GEN_PROMPT, &ids, &n, NULL, NULL, &e), RAD_OK, "%s", e.msg);
    static Got a, b;
    run_one(&f, ids, (uint32_t)n, 48, NULL, 0, &a); /* without the stop id it runs on into the next turn */
    uint32_t k = index_of(&a, end);
    cr_assert_lt(k, a.n_tokens, "the model never samples the turn end in %u tokens: %.*s", a.n_tokens, (int)a.len, a.text);
    run_one(&f, ids, (uint32_t)n, 48, stop_ids, n_stop, &b);
    cr_assert_eq(b.finish, RAD_FINISH_STOP, "finish %d after %u tokens: %.*s", b.finish, b.n_tokens, (int)b.len, b.text);
    cr_assert_eq(b.n_tokens, k, "stopped after %u tokens, the turn end is at %u", b.n_tokens, k);
    free(ids);
    fix_close(&f);
}
