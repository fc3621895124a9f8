/* The scheduler: continuous batching over one engine. See rad_sched.h.
 *
 * A request is a sequence of tokens (prompt, then generated) of which n_done have their KV in
 * the cache. Each step: every running sequence with one token left to compute is a decode row;
 * what is left of max_mixed_tok goes to prefill chunks of running sequences, then to newly
 * admitted ones (each first takes the longest cached prefix of its prompt). When a decode row
 * cannot get a block, the youngest running sequence is preempted: its blocks are released (its
 * published blocks stay cached) and it goes back to the head of the queue to be recomputed. */
#include "libcommon/runtime/rad_sched.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "libcommon/runtime/rad_constrain.h"
#include "libcommon/text/rad_stop.h"

typedef struct Seq {
    uint64_t id;
    int32_t eid;                   /* the engine's sequence id */
    RadGenSink sink;
    void *user;
    int32_t *tok;                  /* [cap] prompt then generated tokens */
    uint32_t n_tok, cap, n_prompt, n_gen, max_gen;
    uint32_t n_done;               /* tokens whose KV is in the cache */
    uint32_t n_cached;             /* prompt tokens served from the prefix cache */
    uint32_t n_published;          /* full blocks published to the prefix cache */
    uint64_t *hash;                /* [cap / block_size] chain hashes of full blocks */
    RadSampler smp;
    RadLogitBias *bias;
    RadStopText text;              /* held-back bytes and stop strings */
    int32_t *stop_ids;             /* [n_stop_ids] tokens that end generation */
    uint32_t n_stop_ids;
    int ignore_eos, logprobs;
    uint32_t top_logprobs;
    RadConstraint *con;            /* the reply's grammar (owned), or NULL */
    char err[512];                 /* why emit ended it with RAD_FINISH_ERROR */
    atomic_int cancelled;
    /* speculative decoding */
    int no_spec;                   /* the request opted out */
    uint32_t n_draft;              /* drafts this step's row carries, at tok[n_tok .. n_tok + n_draft) */
    uint32_t d_done;               /* a draft model's: tokens of tok whose KV is in its cache */
    uint32_t spec_k;               /* the depth it drafts at now (adaptive, 1..spec_depth) */
    float spec_rate;               /* running share of its drafts accepted */
    uint32_t spec_rows;            /* verify rows it has had since the last pause */
    uint32_t spec_pause;           /* decode rows left without drafts (its acceptance was low) */
    double t_submit, t_admit, t_first;
    int admitted;                  /* t_admit is set (kept across preemption) */
    struct Seq *next;
} Seq;

struct RadSched {
    RadEngine *en;
    const RadTok *tok;
    RadSchedOpts o;
    uint32_t block_size;           /* what the prefix cache hashes by (RadEngineKvStats.block_size) */
    uint32_t max_ctx, n_vocab;
    uint32_t pooled;               /* an embedding model: the pooled row's width (0: generation) */
    RadEngineText *texts;          /* [max_seqs] an embedding step's texts */
    float *vec;                    /* [max_seqs * pooled] its rows */
    int32_t eos, eot;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    Seq *inbox, *inbox_tail;       /* submitted, not yet seen by the loop (mu) */
    uint64_t *cancels;             /* [n_cancels] ids to cancel (mu) */
    uint32_t n_cancels, cap_cancels;
    uint64_t next_id;              /* (mu) */
    int stop, draining;            /* (mu) */
    uint32_t n_pending;            /* waiting + running (mu) */
    RadSchedStats st;              /* (mu) for readers; the loop updates it at step ends */
    RadSchedStats cnt;             /* the loop's counters, copied into st by update_stats */
    /* loop-owned */
    Seq **wait;                    /* FIFO: [0] is the next to admit */
    uint32_t n_wait, cap_wait;
    Seq **run;                     /* admission order: the last is the youngest */
    uint32_t n_run;
    RadEngineSeq *step;            /* [max_seqs] */
    Seq **step_seq;                /* [max_seqs] */
    int32_t *row;                  /* [max_seqs] */
    uint32_t *chunk;               /* [max_seqs] */
    float *lp;                     /* [n_vocab] log-softmax scratch */
    int32_t eid_next;
    uint32_t *want;                /* [max_seqs] drafts each decode row asks for */
    RadEngineSeq *dstep;           /* [max_seqs] a draft model's step */
    Seq **dseq;                    /* [max_seqs] its sequences */
    int32_t *drow;                 /* [max_seqs] their logits rows */
};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- requests ------------------------------------------------------------------------------ */

static void seq_free(Seq *q) {
    if (!q) return;
    free(q->tok);
    free(q->hash);
    free(q->bias);
    free(q->stop_ids);
    rad_sampler_free(&q->smp);
    rad_stop_text_free(&q->text);
    if (q->con) rad_constraint_free(q->con), free(q->con);
    free(q);
}

static void fill_event(const Seq *q, RadGenEvent *ev) {
    ev->id = q->id;
    ev->n_prompt = q->n_prompt;
    ev->n_cached = q->n_cached;
    ev->n_gen = q->n_gen;
    ev->t_queue = q->admitted ? q->t_admit - q->t_submit : now() - q->t_submit;
    ev->t_first = q->t_first > 0 ? q->t_first - q->t_submit : 0;
}

/* The last event: what text is held back (not a stop string) is flushed first. */
static void finish(RadSched *s, Seq *q, RadGenFinish why, const char *msg) {
    RadGenEvent ev = {.token = -1};
    fill_event(q, &ev);
    if (why == RAD_FINISH_LENGTH || why == RAD_FINISH_STOP) {
        const char *t;
        size_t n = rad_stop_text_flush(&q->text, &t);
        if (n) {
            RadGenEvent tx = ev;
            tx.text = t, tx.len = n;
            q->sink(q->user, &tx);
        }
    }
    ev.finish = why;
    ev.msg = msg;
    q->sink(q->user, &ev);
    pthread_mutex_lock(&s->mu);
    s->n_pending--;
    pthread_mutex_unlock(&s->mu);
}

static void update_stats(RadSched *s);
static void release_seq(RadSched *s, Seq *q);

/* A running or waiting sequence ends: its blocks and its place go first, the stats follow,
 * then its sink sees the last event (so a client woken by it sees the state after). */
static void retire(RadSched *s, Seq *q, RadGenFinish why, const char *msg) {
    for (uint32_t i = 0; i < s->n_run; i++)
        if (s->run[i] == q) {
            memmove(s->run + i, s->run + i + 1, (s->n_run - i - 1) * sizeof *s->run);
            s->n_run--;
            break;
        }
    release_seq(s, q);
    update_stats(s);
    finish(s, q, why, msg);
    seq_free(q);
}

int rad_sched_submit(RadSched *s, const RadGenReq *r, RadGenSink sink, void *user, uint64_t *id, RadErr *e) {
    if (!r->n_prompt || !r->prompt) return rad_err_set(e, RAD_E_ARG, "prompt: empty");
    if (r->embed && !s->pooled)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "this is a generation model (its plugin declares logits): it has no embeddings");
    if (!r->embed && s->pooled)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "this is an embedding model (its plugin declares a pooled output): it does not "
                           "generate");
    if (r->embed && r->n_prompt > rad_engine_embed_max(s->en))
        return rad_err_set(e, RAD_E_LIMIT, "input: %u tokens; the model embeds at most %u", r->n_prompt,
                           rad_engine_embed_max(s->en));
    if (!sink) return rad_err_set(e, RAD_E_ARG, "no sink for the request's results");
    for (uint32_t i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || (uint32_t)r->prompt[i] >= s->n_vocab)
            return rad_err_set(e, RAD_E_ARG, "prompt: token %d at index %u is outside the vocabulary (%u)", r->prompt[i], i,
                               s->n_vocab);
    for (uint32_t i = 0; i < r->sp.n_bias; i++)
        if (r->sp.bias[i].token < 0 || (uint32_t)r->sp.bias[i].token >= s->n_vocab)
            return rad_err_set(e, RAD_E_ARG, "logit_bias: token %d is outside the vocabulary (%u)", r->sp.bias[i].token,
                               s->n_vocab);
    for (uint32_t i = 0; i < r->n_stop_ids; i++)
        if (r->stop_ids[i] < 0 || (uint32_t)r->stop_ids[i] >= s->n_vocab)
            return rad_err_set(e, RAD_E_ARG, "stop_ids: token %d is outside the vocabulary (%u)", r->stop_ids[i], s->n_vocab);
    if (r->top_logprobs > RAD_SCHED_MAX_TOP)
        return rad_err_set(e, RAD_E_ARG, "top_logprobs: %u is more than %d", r->top_logprobs, RAD_SCHED_MAX_TOP);
    if (!r->embed && r->n_prompt >= s->max_ctx)
        return rad_err_set(e, RAD_E_LIMIT, "prompt: %u tokens leave no room to generate in the context of %u", r->n_prompt,
                           s->max_ctx);
    if (r->max_tokens && (uint64_t)r->n_prompt + r->max_tokens > s->max_ctx)
        return rad_err_set(e, RAD_E_LIMIT, "max_tokens: %u prompt + %u generated tokens exceed the context of %u", r->n_prompt,
                           r->max_tokens, s->max_ctx);
    uint32_t total = r->embed ? r->n_prompt : r->max_tokens ? r->n_prompt + r->max_tokens : s->max_ctx;
    char why[200];
    if (!r->embed && !rad_engine_kv_fits_pool(s->en, total, s->o.max_mixed_tok, why, sizeof why))
        return rad_err_set(e, RAD_E_LIMIT, "%s", why);
    Seq *q = calloc(1, sizeof *q);
    if (!q) return rad_err_set(e, RAD_E_NOMEM, "out of memory");
    q->cap = total;
    q->tok = malloc(q->cap * sizeof *q->tok);
    q->hash = calloc(q->cap / s->block_size + 1, sizeof *q->hash);
    if (r->sp.n_bias) q->bias = malloc(r->sp.n_bias * sizeof *q->bias);
    RadSamplerParams sp = r->sp;
    if (q->bias) memcpy(q->bias, r->sp.bias, r->sp.n_bias * sizeof *q->bias), sp.bias = q->bias;
    if (r->n_stop_ids && (q->stop_ids = malloc(r->n_stop_ids * sizeof *q->stop_ids)))
        memcpy(q->stop_ids, r->stop_ids, r->n_stop_ids * sizeof *q->stop_ids), q->n_stop_ids = r->n_stop_ids;
    int rc = RAD_OK;
    if (!q->tok || !q->hash || (r->sp.n_bias && !q->bias) || (r->n_stop_ids && !q->stop_ids)) rc = rad_err_set(e, RAD_E_NOMEM, "out of memory");
    if (!rc && !r->embed) rc = rad_sampler_init(&q->smp, &sp, s->n_vocab, e);
    if (!rc) rc = rad_stop_text_init(&q->text, r->stop, r->n_stop, e);
    if (rc) return seq_free(q), rc;
    memcpy(q->tok, r->prompt, r->n_prompt * sizeof *q->tok);
    q->n_tok = q->n_prompt = r->n_prompt;
    q->max_gen = total - r->n_prompt;
    q->sink = sink;
    q->user = user;
    q->ignore_eos = r->ignore_eos;
    q->logprobs = r->logprobs || r->top_logprobs;
    q->top_logprobs = r->top_logprobs;
    q->no_spec = r->no_spec;
    q->spec_k = s->o.spec_depth;
    q->spec_rate = 1.0f;
    q->t_submit = now();
    pthread_mutex_lock(&s->mu);
    uint32_t queued = s->n_pending;
    if (s->draining || s->stop) rc = rad_err_set(e, RAD_E_DRAINING, "the server is shutting down");
    else if (queued >= s->o.max_queue + s->o.max_seqs)
        rc = rad_err_set(e, RAD_E_BUSY, "the queue is full (%u requests waiting)", s->o.max_queue);
    if (!rc) {
        q->con = r->constraint; /* the scheduler's from here (the caller keeps it on a failure) */
        q->id = ++s->next_id;
        *id = q->id;
        if (s->inbox_tail) s->inbox_tail->next = q;
        else s->inbox = q;
        s->inbox_tail = q;
        s->n_pending++;
        s->st.waiting++;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    if (rc) seq_free(q);
    return rc;
}

void rad_sched_cancel(RadSched *s, uint64_t id) {
    pthread_mutex_lock(&s->mu);
    if (s->n_cancels == s->cap_cancels) {
        uint32_t cap = s->cap_cancels ? 2 * s->cap_cancels : 64;
        uint64_t *g = realloc(s->cancels, cap * sizeof *g);
        if (g) s->cancels = g, s->cap_cancels = cap;
    }
    if (s->n_cancels < s->cap_cancels) s->cancels[s->n_cancels++] = id;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* ---- open / close -------------------------------------------------------------------------- */

int rad_sched_open(RadSched **out, RadEngine *en, const RadTok *tok, const RadSchedOpts *o, RadErr *e) {
    *out = NULL;
    RadEngineKvStats kv;
    rad_engine_kv_stats(en, &kv);
    const RadEngineLimits lim = rad_engine_limits(en);
    const uint32_t pooled = rad_engine_pooled_dim(en);
    if (kv.n_groups < 1 && !pooled)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "the scheduler serves models with a KV cache (this has no group)");
    uint32_t nv = 0;
    if (!pooled && (!rad_engine_logits(en, &nv) || !nv))
        return rad_err_set(e, RAD_E_UNSUPPORTED, "the model has no logits head to sample from");
    if (pooled) { /* the tokenizer's ids the model has rows for (a request with another is refused, not the step) */
        const RadModelMeta *mm = rad_engine_meta(en);
        nv = rad_tok_n_vocab(tok);
        if (mm->n_vocab > 0 && (uint32_t)mm->n_vocab < nv) nv = (uint32_t)mm->n_vocab;
    }
    if (o->max_seqs > lim.max_seqs || o->max_mixed_tok > lim.max_tok)
        return rad_err_set(e, RAD_E_ARG, "scheduler: max_seqs %u / max_mixed_tok %u exceed the engine's %u / %u", o->max_seqs,
                           o->max_mixed_tok, lim.max_seqs, lim.max_tok);
    if (o->spec) {
        if (pooled) return rad_err_set(e, RAD_E_UNSUPPORTED, "speculative decoding: an embedding model does not generate");
        if (o->spec_depth < 1 || o->spec_depth > lim.max_spec)
            return rad_err_set(e, RAD_E_ARG, "scheduler: spec_depth %u: the engine verifies 1..%u drafts a row (max_spec)",
                               o->spec_depth, lim.max_spec);
        if (o->spec == RAD_SPEC_DRAFT) {
            if (!o->draft) return rad_err_set(e, RAD_E_ARG, "scheduler: a draft model's speculation without its engine");
            const RadEngineLimits dl = rad_engine_limits(o->draft);
            uint32_t dv = 0;
            rad_engine_logits(o->draft, &dv);
            if (dl.max_seqs < (o->max_seqs ? o->max_seqs : lim.max_seqs) || dl.max_ctx < lim.max_ctx)
                return rad_err_set(e, RAD_E_ARG, "scheduler: the draft model's engine serves %u sequences of %u tokens, the "
                                   "target %u of %u", dl.max_seqs, dl.max_ctx, o->max_seqs ? o->max_seqs : lim.max_seqs,
                                   lim.max_ctx);
            if (dv != nv)
                return rad_err_set(e, RAD_E_ARG, "scheduler: the draft model's logits are %u wide, the target's %u", dv, nv);
        }
    }
    RadSched *s = calloc(1, sizeof *s);
    if (!s) return rad_err_set(e, RAD_E_NOMEM, "out of memory");
    s->en = en;
    s->tok = tok;
    s->o = *o;
    if (!s->o.max_seqs) s->o.max_seqs = lim.max_seqs;
    if (!s->o.max_mixed_tok) s->o.max_mixed_tok = lim.max_tok;
    if (!s->o.max_queue) s->o.max_queue = 1024;
    s->pooled = pooled;
    s->block_size = kv.block_size ? kv.block_size : 1;
    s->max_ctx = lim.max_ctx;
    s->n_vocab = nv;
    s->eos = tok ? rad_tok_eos(tok) : -1; /* no tokenizer (ids in, ids out): generation ends at max_tokens */
    s->eot = tok ? rad_tok_eot(tok) : -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    uint32_t S = s->o.max_seqs;
    s->run = calloc(S, sizeof *s->run);
    s->step = calloc(S, sizeof *s->step);
    s->step_seq = calloc(S, sizeof *s->step_seq);
    s->row = calloc(S, sizeof *s->row);
    s->chunk = calloc(S, sizeof *s->chunk);
    s->lp = malloc(nv * sizeof *s->lp);
    s->want = calloc(S, sizeof *s->want);
    s->dstep = calloc(S, sizeof *s->dstep);
    s->dseq = calloc(S, sizeof *s->dseq);
    s->drow = calloc(S, sizeof *s->drow);
    if (pooled) s->texts = calloc(S, sizeof *s->texts), s->vec = malloc((size_t)S * pooled * sizeof *s->vec);
    if (!s->run || !s->step || !s->step_seq || !s->row || !s->chunk || !s->lp || (pooled && (!s->texts || !s->vec)) || !s->want ||
        !s->dstep || !s->dseq || !s->drow) {
        rad_sched_close(s);
        return rad_err_set(e, RAD_E_NOMEM, "out of memory");
    }
    update_stats(s); /* /metrics shows the pool before the first request */
    *out = s;
    return RAD_OK;
}

static void release_seq(RadSched *s, Seq *q) {
    rad_engine_drop_seq(s->en, q->eid);
    if (s->o.draft) rad_engine_drop_seq(s->o.draft, q->eid);
    q->n_done = 0;
    q->n_published = 0;
    q->d_done = 0;
    q->n_draft = 0;
}

void rad_sched_close(RadSched *s) {
    if (!s) return;
    /* whatever is left sees CANCELLED */
    Seq *q = s->inbox;
    while (q) {
        Seq *n = q->next;
        finish(s, q, RAD_FINISH_CANCELLED, NULL);
        seq_free(q);
        q = n;
    }
    for (uint32_t i = 0; i < s->n_wait; i++) finish(s, s->wait[i], RAD_FINISH_CANCELLED, NULL), seq_free(s->wait[i]);
    for (uint32_t i = 0; i < s->n_run; i++) {
        release_seq(s, s->run[i]);
        finish(s, s->run[i], RAD_FINISH_CANCELLED, NULL);
        seq_free(s->run[i]);
    }
    free(s->wait);
    free(s->run);
    free(s->step);
    free(s->step_seq);
    free(s->row);
    free(s->chunk);
    free(s->lp);
    free(s->want);
    free(s->dstep);
    free(s->dseq);
    free(s->drow);
    free(s->texts);
    free(s->vec);
    free(s->cancels);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

void rad_sched_stop(RadSched *s) {
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void rad_sched_drain(RadSched *s) {
    pthread_mutex_lock(&s->mu);
    s->draining = 1;
    pthread_mutex_unlock(&s->mu);
}

uint32_t rad_sched_pending(RadSched *s) {
    pthread_mutex_lock(&s->mu);
    uint32_t n = s->n_pending;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void rad_sched_stats(RadSched *s, RadSchedStats *st) {
    pthread_mutex_lock(&s->mu);
    *st = s->st;
    pthread_mutex_unlock(&s->mu);
}

uint32_t rad_sched_max_ctx(const RadSched *s) { return s->max_ctx; }

/* ---- the loop ------------------------------------------------------------------------------- */

static int wait_push(RadSched *s, Seq *q, int front) {
    if (s->n_wait == s->cap_wait) {
        uint32_t cap = s->cap_wait ? 2 * s->cap_wait : 64;
        Seq **g = realloc(s->wait, cap * sizeof *g);
        if (!g) return RAD_E_NOMEM;
        s->wait = g, s->cap_wait = cap;
    }
    if (front) memmove(s->wait + 1, s->wait, s->n_wait * sizeof *s->wait), s->wait[0] = q;
    else s->wait[s->n_wait] = q;
    s->n_wait++;
    return RAD_OK;
}

/* Takes in the inbox and the cancels; 0 when the loop should stop. Waits while idle, or (not
 * `wait`: rad_sched_run_idle) returns 0 there. */
static int intake(RadSched *s, int wait) {
    pthread_mutex_lock(&s->mu);
    while (wait && !s->stop && !s->inbox && !s->n_cancels && !s->n_wait && !s->n_run) pthread_cond_wait(&s->cv, &s->mu);
    int go = !s->stop && (s->inbox || s->n_cancels || s->n_wait || s->n_run);
    Seq *in = s->inbox;
    s->inbox = s->inbox_tail = NULL;
    uint32_t nc = s->n_cancels;
    uint64_t cancels[256];
    if (nc > 256) nc = 256;
    if (nc) {
        memcpy(cancels, s->cancels, nc * sizeof *cancels);
        memmove(s->cancels, s->cancels + nc, (s->n_cancels - nc) * sizeof *s->cancels);
        s->n_cancels -= nc;
    }
    pthread_mutex_unlock(&s->mu);
    for (Seq *q = in, *n; q; q = n) {
        n = q->next;
        q->next = NULL;
        q->eid = s->eid_next = (s->eid_next + 1) & 0x3fffffff;
        if (wait_push(s, q, 0)) finish(s, q, RAD_FINISH_ERROR, "out of memory queueing the request"), seq_free(q);
    }
    for (uint32_t c = 0; c < nc; c++) {
        for (uint32_t i = 0; i < s->n_wait; i++)
            if (s->wait[i]->id == cancels[c]) atomic_store(&s->wait[i]->cancelled, 1);
        for (uint32_t i = 0; i < s->n_run; i++)
            if (s->run[i]->id == cancels[c]) atomic_store(&s->run[i]->cancelled, 1);
    }
    for (uint32_t i = 0; i < s->n_wait;) {
        Seq *q = s->wait[i];
        if (!atomic_load(&q->cancelled)) {
            i++;
            continue;
        }
        memmove(s->wait + i, s->wait + i + 1, (s->n_wait - i - 1) * sizeof *s->wait);
        s->n_wait--;
        retire(s, q, RAD_FINISH_CANCELLED, NULL);
    }
    for (uint32_t i = 0; i < s->n_run;) {
        Seq *q = s->run[i];
        if (!atomic_load(&q->cancelled)) {
            i++;
            continue;
        }
        retire(s, q, RAD_FINISH_CANCELLED, NULL);
    }
    return go;
}

/* Preempts the youngest running sequence: blocks released (published ones stay cached), back
 * to the head of the queue to be recomputed. Returns the one preempted. */
static Seq *preempt(RadSched *s) {
    Seq *q = s->run[s->n_run - 1];
    s->n_run--;
    release_seq(s, q);
    if (wait_push(s, q, 1)) {
        finish(s, q, RAD_FINISH_ERROR, "out of memory requeueing a preempted request");
        seq_free(q);
        return NULL;
    }
    s->cnt.preemptions++;
    return q;
}


/* A newly admitted sequence takes the longest cached prefix of its tokens (full blocks only,
 * and never the last token, whose logits the step must produce). */
static void adopt_prefix(RadSched *s, Seq *q) {
    uint32_t B = s->block_size, nb = (q->n_tok - 1) / B;
    int got = rad_engine_kv_adopt_prefix(s->en, q->eid, q->tok, nb, s->o.prefix_cache, q->hash);
    if (got < 0) return;
    uint32_t hit = (uint32_t)got;
    q->n_done = hit * B;
    q->n_published = hit;
    if (!q->admitted) {
        q->n_cached = q->n_done < q->n_prompt ? q->n_done : q->n_prompt;
        s->cnt.prefix_lookups_tok += q->n_prompt;
        s->cnt.prefix_hits_tok += q->n_cached;
    }
}

/* Publishes the sequence's newly full blocks (prompt and generated alike). */
static void publish(RadSched *s, Seq *q) {
    if (!s->o.prefix_cache) return;
    uint32_t B = s->block_size, full = q->n_done / B;
    if (full <= q->n_published) return;
    if (rad_engine_kv_publish(s->en, q->eid, q->tok, q->n_published, full, q->hash)) return;
    q->n_published = full;
}

/* The log-softmax of a row into s->lp; returns nothing, fills logprob/top of ev. */
static void logprobs(RadSched *s, const Seq *q, const float *lg, int32_t tok, RadGenEvent *ev, RadGenTop *top) {
    uint32_t n = s->n_vocab;
    float mx = lg[0];
    for (uint32_t i = 1; i < n; i++)
        if (lg[i] > mx) mx = lg[i];
    double sum = 0;
    for (uint32_t i = 0; i < n; i++) sum += exp((double)lg[i] - mx);
    float lse = mx + (float)log(sum);
    ev->logprob = lg[tok] - lse;
    uint32_t k = 0;
    for (uint32_t i = 0; i < n && q->top_logprobs; i++) { /* insertion into a short sorted list */
        float v = lg[i] - lse;
        if (k == q->top_logprobs && v <= top[k - 1].logprob) continue;
        uint32_t j = k < q->top_logprobs ? k++ : k - 1;
        while (j > 0 && top[j - 1].logprob < v) top[j] = top[j - 1], j--;
        top[j] = (RadGenTop){(int32_t)i, v};
    }
    ev->top = top;
    ev->n_top = k;
}

/* The token row lg gives: a draw, or (draft >= 0) the verification of a drafted token (*acc
 * says whether it was accepted). An error finishes the sequence. */
static RadGenFinish choose(Seq *q, const float *lg, int32_t draft, int32_t *t, int *acc) {
    const uint64_t *allow = NULL;
    RadErr ce = {0};
    *acc = 0;
    if (q->con && rad_constraint_mask(q->con, &allow, &ce)) {
        snprintf(q->err, sizeof q->err, "%s", ce.msg);
        return RAD_FINISH_ERROR;
    }
    *t = draft >= 0 ? rad_sampler_verify(&q->smp, lg, allow, draft, acc) : rad_sampler_sample_masked(&q->smp, lg, allow);
    return RAD_FINISH_NONE;
}

/* The sequence's next token t (chosen from row lg) and its text; why it is done, or NONE. */
static RadGenFinish commit(RadSched *s, Seq *q, const float *lg, int32_t t) {
    RadErr ce = {0};
    if (q->con && rad_constraint_accept(q->con, s->tok, t, &ce)) {
        snprintf(q->err, sizeof q->err, "%s", ce.msg);
        return RAD_FINISH_ERROR;
    }
    RadGenEvent ev = {.token = t};
    RadGenTop top[RAD_SCHED_MAX_TOP];
    if (q->logprobs) logprobs(s, q, lg, t, &ev, top);
    rad_sampler_accept(&q->smp, t);
    q->tok[q->n_tok++] = t;
    q->n_gen++;
    if (q->t_first <= 0) q->t_first = now();
    s->cnt.generated_tokens++;
    if (!q->ignore_eos && (t == s->eos || t == s->eot)) return RAD_FINISH_STOP;
    for (uint32_t i = 0; i < q->n_stop_ids; i++)
        if (t == q->stop_ids[i]) return RAD_FINISH_STOP;
    char piece[256];
    int n = !s->tok || rad_tok_is_special(s->tok, t) ? 0 : rad_tok_piece(s->tok, t, piece, sizeof piece);
    if (n < 0) n = 0;
    if (n > (int)sizeof piece) n = (int)sizeof piece;
    const char *out;
    size_t len;
    int stopped = rad_stop_text_push(&q->text, piece, (size_t)n, &out, &len);
    fill_event(q, &ev);
    ev.text = out, ev.len = len;
    q->sink(q->user, &ev);
    if (stopped) return RAD_FINISH_STOP;
    if (q->con && rad_constraint_done(q->con)) return RAD_FINISH_STOP; /* the value is whole: only its end could follow */
    if (q->n_gen >= q->max_gen || q->n_tok >= s->max_ctx) return RAD_FINISH_LENGTH;
    return RAD_FINISH_NONE;
}

/* A row whose token is the logits' first maximum and nothing else reads its logits: greedy with
 * no penalty, bias, grammar or logprobs. A step of such rows only can take the device's argmax
 * (rad_engine_want_ids) and copy back one id a row instead of the logits. */
static int plain_greedy(const Seq *q) { return rad_sampler_plain_greedy(&q->smp) && !q->con && !q->logprobs; }

/* After the step: the sequence's sampled token and its text; why it is done, or NONE. */
static RadGenFinish emit(RadSched *s, Seq *q, const float *lg) {
    int32_t t;
    int acc;
    RadGenFinish why = choose(q, lg, -1, &t, &acc);
    return why ? why : commit(s, q, lg, t);
}

/* ---- speculative decoding ---------------------------------------------------------------------
 * A decode row carries up to its depth of drafted tokens after the last sampled one; the step
 * gives the logits of all of them, and the target accepts the longest prefix its own choices
 * agree with (rad_sampler_verify), then adds the token the first disagreeing row (or the row
 * past the last draft) gives. The KV written for rejected drafts is rolled back, in the target and
 * in a draft model, before anything is published. */

/* Drafts q's row may carry now: its adaptive depth, within the tokens it may still generate,
 * the context and the step's budget; 0 while paused or opted out. */
static uint32_t spec_want(const RadSched *s, Seq *q, uint32_t budget) {
    if (!s->o.spec || q->no_spec) return 0;
    if (q->spec_pause) return q->spec_pause--, 0;
    uint32_t k = q->spec_k;
    const uint32_t gen_left = q->max_gen - q->n_gen, ctx_left = s->max_ctx - q->n_tok;
    if (k + 1 > gen_left) k = gen_left ? gen_left - 1 : 0; /* a verify row yields at most k + 1 tokens */
    if (k + 1 > ctx_left) k = ctx_left ? ctx_left - 1 : 0;
    if (k > budget) k = budget;
    return k;
}

/* The depth after a verify row of k drafts with a accepted: one more after a full acceptance,
 * else what was accepted plus one; a sequence whose running acceptance falls under a quarter
 * stops drafting for 16 rows, then starts again at depth 1. */
static void spec_adapt(const RadSched *s, Seq *q, uint32_t k, uint32_t a) {
    q->spec_rate = 0.7f * q->spec_rate + 0.3f * (float)a / (float)k;
    q->spec_rows++;
    if (a == k) q->spec_k = q->spec_k < s->o.spec_depth ? q->spec_k + 1 : s->o.spec_depth;
    else q->spec_k = a + 1 < q->spec_k ? a + 1 : q->spec_k;
    if (q->spec_rows >= 4 && q->spec_rate < 0.25f) q->spec_pause = 16, q->spec_k = 1, q->spec_rate = 0.5f, q->spec_rows = 0;
}

/* A draft model's drafts for decode rows 0..n of the step: each sequence's tokens its cache
 * lacks (a whole prompt the first time, then one or two), then greedy decode steps, every
 * sequence in one step of the draft's engine. q->n_draft gets how many each drafted; a step the
 * draft engine refuses (its KV full) leaves those sequences without drafts this time. */
/* One step of the draft model's engine over s->dstep[0..m) (rows into s->drow): its status, and
 * its logits in *lg (*nv wide). */
static int draft_step(RadSched *s, uint32_t m, const float **lg, uint32_t *nv) {
    RadErr e = {0};
    const int rc = rad_engine_step_seqs(s->o.draft, s->dstep, m, s->drow, &e);
    *lg = rad_engine_logits(s->o.draft, nv);
    return rc;
}

static void draft_model(RadSched *s, uint32_t n) {
    RadEngine *de = s->o.draft;
    const uint32_t T = rad_engine_limits(de).max_tok;
    uint32_t nv = 0;
    const float *lg;
    /* 1. catch up, in steps of at most T tokens; the last chunk's logits give the first draft */
    for (;;) {
        uint32_t m = 0, used = 0;
        for (uint32_t i = 0; i < n && used < T; i++) {
            Seq *q = s->step_seq[i];
            if (!s->want[i] || q->n_draft || q->d_done >= q->n_tok) continue;
            uint32_t c = q->n_tok - q->d_done;
            if (c > T - used) c = T - used;
            s->dstep[m] = (RadEngineSeq){.seq_id = q->eid, .tokens = q->tok + q->d_done, .n = c, .pos = q->d_done,
                                         .want_logits = q->d_done + c == q->n_tok};
            s->dseq[m++] = q;
            used += c;
        }
        if (!m) break;
        const int rc = draft_step(s, m, &lg, &nv);
        for (uint32_t j = 0; j < m; j++) {
            Seq *q = s->dseq[j];
            if (rc) { /* no drafts this time; its cache is rebuilt when it drafts again */
                rad_engine_drop_seq(de, q->eid);
                q->d_done = 0;
                for (uint32_t i = 0; i < n; i++) s->want[i] *= s->step_seq[i] != q;
                continue;
            }
            q->d_done += s->dstep[j].n;
            if (s->drow[j] >= 0) q->tok[q->n_tok] = (int32_t)rad_argmax(lg + (size_t)s->drow[j] * nv, nv), q->n_draft = 1;
        }
    }
    /* 2. one decode step a draft, over every sequence still drafting */
    for (uint32_t d = 1;; d++) {
        uint32_t m = 0;
        for (uint32_t i = 0; i < n; i++) {
            Seq *q = s->step_seq[i];
            if (q->n_draft != d || s->want[i] <= d) continue;
            s->dstep[m] = (RadEngineSeq){.seq_id = q->eid, .tokens = q->tok + q->n_tok + d - 1, .n = 1,
                                         .pos = q->n_tok + d - 1, .want_logits = 1};
            s->dseq[m++] = q;
        }
        if (!m) break;
        const int rc = draft_step(s, m, &lg, &nv);
        for (uint32_t j = 0; j < m; j++) {
            Seq *q = s->dseq[j];
            if (rc) { /* keep the drafts it has; the one fed was not written */
                rad_engine_kv_truncate(de, q->eid, q->d_done);
                for (uint32_t i = 0; i < n; i++)
                    if (s->step_seq[i] == q) s->want[i] = q->n_draft;
                continue;
            }
            q->d_done = q->n_tok + d;
            q->tok[q->n_tok + d] = (int32_t)rad_argmax(lg + (size_t)s->drow[j] * nv, nv);
            q->n_draft = d + 1;
        }
    }
}

/* A draft model's cache cut back to tok[0..keep): what it computed past that is another
 * continuation's (rejected drafts, or drafts never verified). */
static void draft_rollback(RadSched *s, Seq *q, uint32_t keep) {
    if (!s->o.draft || q->d_done <= keep) return;
    q->d_done = keep;
    rad_engine_kv_truncate(s->o.draft, q->eid, keep);
}

/* A draft model's cache follows the target's prefill, chunk for chunk, in one step of its engine
 * for the step's chunks (no logits): a sequence's first drafts wait for no prompt, and the draft's
 * prompt is computed beside the target's, before the first token. A chunk the draft engine
 * cannot take leaves that sequence to catch up when it drafts. */
static void draft_follow(RadSched *s, uint32_t n) {
    if (!s->o.draft) return;
    uint32_t m = 0;
    for (uint32_t k = 0; k < n; k++) {
        Seq *q = s->step_seq[k];
        if (s->step[k].n_draft || s->chunk[k] < 2 || q->no_spec || q->d_done != s->step[k].pos) continue;
        s->dstep[m] = (RadEngineSeq){.seq_id = q->eid, .tokens = s->step[k].tokens, .n = s->step[k].n, .pos = s->step[k].pos};
        s->dseq[m++] = q;
    }
    if (!m) return;
    RadErr e = {0};
    int rc = rad_engine_step_seqs(s->o.draft, s->dstep, m, NULL, &e);
    for (uint32_t j = 0; j < m; j++) {
        Seq *q = s->dseq[j];
        if (!rc) q->d_done += s->dstep[j].n;
        else rad_engine_drop_seq(s->o.draft, q->eid), q->d_done = 0;
    }
}

/* Drafts for the step's decode rows s->step[0..n), within *budget, each row's KV grown to hold
 * them (a row whose drafts do not fit goes without). */
static void spec_plan(RadSched *s, uint32_t n, uint32_t *budget) {
    if (!s->o.spec) return;
    uint32_t left = *budget;
    for (uint32_t i = 0; i < n; i++) {
        s->want[i] = spec_want(s, s->step_seq[i], left);
        left -= s->want[i];
        s->step_seq[i]->n_draft = 0;
    }
    if (s->o.spec == RAD_SPEC_DRAFT) {
        draft_model(s, n);
    } else {
        for (uint32_t i = 0; i < n; i++) {
            Seq *q = s->step_seq[i];
            q->n_draft = s->want[i] ? rad_spec_ngram(q->tok, q->n_tok, RAD_SPEC_NGRAM_MAX, RAD_SPEC_NGRAM_MIN, s->want[i],
                                                     q->tok + q->n_tok) : 0;
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        Seq *q = s->step_seq[i];
        RadErr e = {0};
        if (q->n_draft > s->want[i]) q->n_draft = s->want[i];
        if (q->n_draft && (!rad_engine_kv_fits(s->en, q->eid, q->n_tok + q->n_draft) ||
                           rad_engine_reserve(s->en, q->eid, q->n_tok + q->n_draft, &e))) {
            q->n_draft = 0;
            draft_rollback(s, q, q->n_tok);
        }
        s->step[i].n = 1 + q->n_draft;
        s->step[i].n_draft = q->n_draft;
        *budget -= q->n_draft;
    }
}

/* After the step: row lg[0..k] of a decode row with k drafts. Tokens are taken in order while
 * the drafts are accepted, and one more after them; the KV past what was kept is rolled back. */
static RadGenFinish verify(RadSched *s, Seq *q, const float *lg) {
    const uint32_t k = q->n_draft, n_tok0 = q->n_tok;
    int32_t d[RAD_SPEC_DEPTH_MAX];
    memcpy(d, q->tok + n_tok0, k * sizeof *d); /* commit writes over them */
    RadGenFinish why = RAD_FINISH_NONE;
    uint32_t a = 0;
    for (uint32_t j = 0; j <= k && !why; j++) {
        int32_t t;
        int acc;
        const float *row = lg + (size_t)j * s->n_vocab;
        if ((why = choose(q, row, j < k ? d[j] : -1, &t, &acc))) break;
        why = commit(s, q, row, t);
        if (!acc) break;
        a++;
    }
    q->n_draft = 0;
    s->cnt.spec_rows++, s->cnt.spec_drafted += k, s->cnt.spec_accepted += a;
    spec_adapt(s, q, k, a);
    q->n_done += 1 + a; /* the last sampled token and the accepted drafts: their KV is this step's */
    rad_engine_kv_truncate(s->en, q->eid, q->n_done);
    draft_rollback(s, q, n_tok0 + a); /* it drafted from tok[n_tok0 - 1] on: the accepted drafts' KV is right */
    publish(s, q);
    return why;
}

/* One step: 0 when nothing could run. */
/* An embedding model's step: the queue's head texts, FIFO, whole, while max_seqs and the token
 * budget last; each finishes with its pooled row. */
static int embed_step(RadSched *s) {
    uint32_t n = 0, t = 0;
    while (n < s->n_wait && n < s->o.max_seqs && t + s->wait[n]->n_prompt <= s->o.max_mixed_tok) {
        Seq *q = s->wait[n];
        s->texts[n] = (RadEngineText){q->tok, q->n_prompt};
        t += q->n_prompt;
        if (!q->admitted) q->admitted = 1, q->t_admit = now(), s->cnt.prompt_tokens += q->n_prompt;
        s->step_seq[n++] = q;
    }
    if (!n) return 0;
    memmove(s->wait, s->wait + n, (s->n_wait - n) * sizeof *s->wait);
    s->n_wait -= n;
    RadErr e = {0};
    int rc = rad_engine_embed(s->en, s->texts, n, s->vec, &e);
    s->cnt.steps++;
    for (uint32_t k = 0; k < n; k++) {
        Seq *q = s->step_seq[k];
        if (rc) {
            retire(s, q, RAD_FINISH_ERROR, e.msg);
            continue;
        }
        q->t_first = now();
        RadGenEvent ev = {.token = -1, .finish = RAD_FINISH_STOP, .embedding = s->vec + (size_t)k * s->pooled, .dim = s->pooled};
        fill_event(q, &ev);
        update_stats(s);
        q->sink(q->user, &ev);
        pthread_mutex_lock(&s->mu);
        s->n_pending--;
        pthread_mutex_unlock(&s->mu);
        seq_free(q);
    }
    return 1;
}

static int step(RadSched *s) {
    if (s->pooled) return embed_step(s);
    uint32_t budget = s->o.max_mixed_tok, n = 0;
    /* 1. decode rows, oldest first; a row that cannot get a block preempts the youngest */
    for (uint32_t i = 0; i < s->n_run && budget;) {
        Seq *q = s->run[i];
        if (q->n_tok - q->n_done != 1) {
            i++;
            continue;
        }
        /* short of a block: the youngest goes (rows before i are older, so never one already
         * in the step); when that is q itself, the loop ends with it */
        RadErr e = {0};
        if (!rad_engine_kv_fits(s->en, q->eid, q->n_tok) || rad_engine_reserve(s->en, q->eid, q->n_tok, &e)) {
            preempt(s);
            continue;
        }
        s->step[n] = (RadEngineSeq){.seq_id = q->eid, .tokens = q->tok + q->n_done, .n = 1, .pos = q->n_done, .want_logits = 1};
        s->step_seq[n] = q, s->chunk[n++] = 1, budget--;
        i++;
    }
    spec_plan(s, n, &budget); /* the decode rows' drafts, before prefill takes what is left */
    /* 2. prefill chunks of running sequences, then admissions, while tokens and blocks last */
    for (uint32_t pass = 0; pass < 2 && budget; pass++) {
        for (uint32_t i = 0; budget && n < s->o.max_seqs; i++) {
            Seq *q;
            if (pass == 0) {
                if (i >= s->n_run) break;
                q = s->run[i];
                if (q->n_tok - q->n_done <= 1) continue;
                int in_step = 0;
                for (uint32_t j = 0; j < n; j++) in_step |= s->step_seq[j] == q;
                if (in_step) continue;
            } else {
                if (!s->n_wait || s->n_run >= s->o.max_seqs) break;
                q = s->wait[0];
                memmove(s->wait, s->wait + 1, (s->n_wait - 1) * sizeof *s->wait);
                s->n_wait--;
                s->run[s->n_run++] = q;
                adopt_prefix(s, q);
                if (!q->admitted) q->admitted = 1, q->t_admit = now(), s->cnt.prompt_tokens += q->n_prompt;
                i = 0;
            }
            uint32_t left = q->n_tok - q->n_done, c = left < budget ? left : budget;
            /* as many tokens as the free blocks of every group (and the slack of the last held block) allow */
            uint32_t room = rad_engine_kv_room(s->en, q->eid);
            if (c > room) c = room;
            if (!c) {
                if (pass == 1) { /* admitted but no room: back to the head of the queue */
                    s->n_run--;
                    release_seq(s, q);
                    wait_push(s, q, 1);
                }
                budget = 0;
                break;
            }
            RadErr e = {0};
            if (rad_engine_reserve(s->en, q->eid, q->n_done + c, &e)) break;
            s->step[n] = (RadEngineSeq){.seq_id = q->eid, .tokens = q->tok + q->n_done, .n = c, .pos = q->n_done,
                                        .want_logits = q->n_done + c == q->n_tok};
            s->step_seq[n] = q, s->chunk[n++] = c, budget -= c;
        }
    }
    if (!n) return 0;
    RadErr e = {0};
    int ids_only = rad_engine_serves_ids(s->en);
    for (uint32_t k = 0; k < n && ids_only; k++)
        ids_only = !s->step[k].n_draft && (!s->step[k].want_logits || plain_greedy(s->step_seq[k]));
    rad_engine_want_ids(s->en, ids_only);
    int rc = rad_engine_step_seqs(s->en, s->step, n, s->row, &e);
    s->cnt.steps++;
    if (!rc) draft_follow(s, n);
    const float *lg = rad_engine_logits(s->en, NULL);
    const int32_t *ids = rad_engine_ids(s->en); /* set when the step answered with ids (lg is then NULL) */
    for (uint32_t k = 0; k < n; k++) {
        Seq *q = s->step_seq[k];
        if (rc) { /* the engine failed the step: every sequence in it ends with the reason */
            retire(s, q, RAD_FINISH_ERROR, e.msg);
            continue;
        }
        RadGenFinish why;
        if (s->step[k].n_draft) {
            why = verify(s, q, lg + (size_t)s->row[k] * s->n_vocab);
        } else {
            q->n_done += s->chunk[k];
            publish(s, q);
            why = s->row[k] < 0 ? RAD_FINISH_NONE
                  : ids         ? commit(s, q, NULL, ids[s->row[k]])
                                : emit(s, q, lg + (size_t)s->row[k] * s->n_vocab);
        }
        if (why) retire(s, q, why, why == RAD_FINISH_ERROR ? q->err : NULL);
    }
    return 1;
}

static void update_stats(RadSched *s) {
    pthread_mutex_lock(&s->mu);
    s->st.waiting = s->n_wait;
    for (Seq *q = s->inbox; q; q = q->next) s->st.waiting++;
    s->st.running = s->n_run;
    RadEngineKvStats kv;
    rad_engine_kv_stats(s->en, &kv);
    s->st.kv_blocks_free = kv.n_free;
    s->st.kv_blocks_used = kv.n_blocks - kv.n_free;
    s->st.kv_blocks_cached = kv.n_cached_free;
    s->st.prefix_lookups_tok = s->cnt.prefix_lookups_tok, s->st.prefix_hits_tok = s->cnt.prefix_hits_tok;
    s->st.prompt_tokens = s->cnt.prompt_tokens, s->st.generated_tokens = s->cnt.generated_tokens;
    s->st.preemptions = s->cnt.preemptions, s->st.steps = s->cnt.steps;
    s->st.spec_rows = s->cnt.spec_rows, s->st.spec_drafted = s->cnt.spec_drafted, s->st.spec_accepted = s->cnt.spec_accepted;
    pthread_mutex_unlock(&s->mu);
}

static void run_loop(RadSched *s, int until_idle) {
    while (intake(s, !until_idle)) {
        int ran = step(s);
        if (!ran && s->n_run > 1) preempt(s); /* prefills stuck on each other's blocks: one yields */
        else if (!ran && s->n_run == 1) {  /* cannot happen (admission checks the pool); never spin */
            retire(s, s->run[0], RAD_FINISH_ERROR, "the request does not fit the KV cache");
        }
        update_stats(s);
        if (!ran && s->n_run == 0 && s->n_wait) {
            /* nothing runs and nothing holds blocks: the head request can never fit */
            Seq *q = s->wait[0];
            memmove(s->wait, s->wait + 1, (s->n_wait - 1) * sizeof *s->wait);
            s->n_wait--;
            retire(s, q, RAD_FINISH_ERROR, "the request does not fit the KV cache");
        }
        if (rad_engine_fail_closed(s->en)) { /* --mmap, file changed: admit nothing; each step fails what is left */
            rad_sched_drain(s);
            pthread_mutex_lock(&s->mu);
            int more = s->inbox != NULL;
            pthread_mutex_unlock(&s->mu);
            if (!more && !s->n_run && !s->n_wait) break;
        }
    }
    update_stats(s);
}

void rad_sched_run(RadSched *s) { run_loop(s, 0); }
void rad_sched_run_idle(RadSched *s) { run_loop(s, 1); }
