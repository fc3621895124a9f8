/* rad_sched.h — the scheduler: continuous batching of generation requests over one engine.
 *
 * One thread (rad_sched_run) owns the engine and runs steps: decode rows of running sequences
 * first, then prefill chunks of admitted ones fill what is left of max_mixed_tok (chunked
 * prefill), as the spec's mixed-step rules require. KV is paged with a global prefix cache (a
 * hash chain over full blocks, shared ref-counted blocks, LRU eviction of free cached blocks);
 * when KV runs out a running sequence is preempted by recompute. With a drafter (RadSchedOpts.spec)
 * each decode row may carry drafted tokens, verified in the same step, the KV of rejected ones
 * rolled back before anything is published (docs/ENGINE.md, "Speculative decoding"). Other threads submit and
 * cancel requests; results come back through each request's sink, called on the scheduler
 * thread (a sink must be quick: copy, signal, return).
 *
 * Text is produced here, not by callers: pieces are detokenised with UTF-8 tails held back,
 * stop strings are matched across token boundaries and never emitted, and special tokens
 * are not printed. */
#ifndef RAD_SCHED_H
#define RAD_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "libcommon/runtime/rad_engine.h"
#include "libcommon/base/rad_err.h"
#include "libcommon/runtime/rad_sampler.h"
#include "libcommon/runtime/rad_spec.h"
#include "libcommon/tok/rad_tok.h"

#define RAD_SCHED_MAX_TOP 20   /* top_logprobs at most (OpenAI's limit) */

typedef struct RadGenReq {
    const int32_t *prompt;         /* [n_prompt] token ids (copied at submit) */
    uint32_t n_prompt;             /* >= 1 */
    RadSamplerParams sp;           /* temperature, top_k/p, min_p, penalties, logit bias, seed */
    uint32_t max_tokens;           /* 0: up to the context */
    const char *const *stop;       /* [n_stop] stop strings (copied), never emitted */
    uint32_t n_stop;               /* 0: no stop strings */
    int ignore_eos;                /* 1: EOS/EOT do not end generation */
    int logprobs;                  /* 1: each token event carries its logprob */
    uint32_t top_logprobs;         /* 0..RAD_SCHED_MAX_TOP alternatives per token */
    /* [n_stop_ids] token ids (copied) that end generation with RAD_FINISH_STOP, not emitted,
     * ignore_eos or not: a chat format's turn end that is neither EOS nor EOT */
    const int32_t *stop_ids;
    uint32_t n_stop_ids;
    /* a grammar the reply must follow (response_format; rad_constrain.h), or NULL: on a successful
     * submit the scheduler owns it (freed with the request); on a failed one the caller does */
    struct RadConstraint *constraint;
    /* 1: an embedding of the prompt (the whole text, specials included): one pooled row, nothing
     * generated; only an embedding model takes it, and only it (rad_engine_pooled_dim) */
    int embed;
    int no_spec;                   /* 1: this request is not speculated (its rows carry no drafts) */
} RadGenReq;

typedef enum RadGenFinish {
    RAD_FINISH_NONE = 0,           /* not finished (a text event) */
    RAD_FINISH_STOP,               /* EOS/EOT, a stop id or a stop string: OpenAI "stop" */
    RAD_FINISH_LENGTH,             /* max_tokens or the context: "length" */
    RAD_FINISH_CANCELLED,          /* rad_sched_cancel or shutdown */
    RAD_FINISH_ERROR,              /* the engine failed the step; msg says why */
} RadGenFinish;

typedef struct RadGenTop {
    int32_t token;                 /* a token id in the vocabulary */
    float logprob;                 /* its log-softmax (<= 0) */
} RadGenTop;

typedef struct RadGenEvent {
    uint64_t id;                   /* the request's id from rad_sched_submit */
    RadGenFinish finish;           /* NONE: a text event; else the last event of the request */
    const char *text;              /* [len] new text, not NUL-terminated (may be empty) */
    size_t len;                    /* bytes of text */
    /* the token this event ends with (text events; -1 on a finish event carrying no token) */
    int32_t token;
    float logprob;                 /* log-softmax of the logits before sampling (when asked) */
    const RadGenTop *top;          /* [n_top] best alternatives, descending (when asked) */
    uint32_t n_top;                /* <= the request's top_logprobs */
    /* usage and timing, filled on every event */
    uint32_t n_prompt;             /* prompt tokens */
    uint32_t n_cached;             /* of which served from the prefix cache */
    uint32_t n_gen;                /* tokens generated so far */
    double t_queue;                /* seconds from submit to admission */
    double t_first;                /* seconds from submit to the first token (0 before it) */
    const char *msg;               /* RAD_FINISH_ERROR: one line */
    /* an embedding request's finish event (RAD_FINISH_STOP): its pooled row [dim]; else NULL */
    const float *embedding;
    uint32_t dim;
} RadGenEvent;

/* Called on the scheduler thread; text and top point into scheduler memory valid only during
 * the call. The finish event is the last call for the request; after it the id is dead. */
typedef void (*RadGenSink)(void *user, const RadGenEvent *ev);

typedef struct RadSchedOpts {
    uint32_t max_seqs;             /* sequences running at once (engine max_seqs) */
    uint32_t max_mixed_tok;        /* tokens per step (engine max_tok) */
    uint32_t max_queue;            /* waiting requests before submit refuses (0: 1024) */
    int prefix_cache;              /* 1: share full prompt blocks between requests */
    /* speculative decoding (docs/ENGINE.md, "Speculative decoding"): each decode row carries up to
     * spec_depth drafted tokens, verified in the one step (the engine opened with max_spec >= it) */
    RadSpecKind spec;              /* NONE, NGRAM (prompt lookup) or DRAFT (a draft model) */
    uint32_t spec_depth;           /* drafts a row carries at most (1..RAD_SPEC_DEPTH_MAX) */
    RadEngine *draft;              /* DRAFT: the draft model's engine (not owned; the target's tokenizer
                                      (rad_spec_check_vocab), max_seqs and context at least the target's) */
} RadSchedOpts;

typedef struct RadSchedStats {    /* a snapshot for /metrics */
    uint32_t waiting;              /* requests submitted, not yet admitted (preempted ones too) */
    uint32_t running;              /* requests admitted, holding KV */
    uint32_t kv_blocks_used;       /* KV blocks held by sequences (n_blocks - free) */
    uint32_t kv_blocks_free;       /* KV blocks a reservation can take */
    uint32_t kv_blocks_cached;     /* of the free ones, those still holding a published prefix */
    uint64_t prefix_lookups_tok;   /* prompt tokens looked up in the prefix cache (since open) */
    uint64_t prefix_hits_tok;      /* of which served from it */
    uint64_t prompt_tokens;        /* prompt tokens admitted (a preempted request counts once) */
    uint64_t generated_tokens;     /* tokens sampled */
    uint64_t preemptions;          /* sequences preempted to be recomputed */
    uint64_t steps;                /* engine steps run (a failed one too) */
    uint64_t spec_rows;            /* decode rows that carried drafts (verify rows) */
    uint64_t spec_drafted;         /* tokens drafted into them */
    uint64_t spec_accepted;        /* of which the target accepted */
} RadSchedStats;

typedef struct RadSched RadSched;

/* The engine must be open with max_seqs and max_tok matching opts (rad_sched_open checks);
 * the scheduler does not own en or tok. */
int rad_sched_open(RadSched **s, RadEngine *en, const RadTok *tok, const RadSchedOpts *o, RadErr *e);
/* Stops the loop (if running), cancels what is left (their sinks see CANCELLED), frees. */
void rad_sched_close(RadSched *s);

/* Runs steps until rad_sched_stop; call on the thread that owns the engine. */
void rad_sched_run(RadSched *s);
void rad_sched_stop(RadSched *s);
/* Runs steps until no request is waiting or running (or rad_sched_stop), then returns with the
 * scheduler open for more: a caller that submits and drives the loop on its own thread (the
 * CLI: submit, run until idle, the request's finish event has been seen). */
void rad_sched_run_idle(RadSched *s);

/* An embedding model's scheduler (the engine declares a pooled output) takes only embed
 * requests, and a generation model's only generation ones; the other kind is refused at submit
 * (RAD_E_UNSUPPORTED). Embed requests wait in the same queue and run FIFO, as many whole texts a
 * step as max_seqs and max_mixed_tok allow; each finishes with one event carrying its row. */

/* Queues a request. Refused at admission with a one-line message (nothing queued, the sink is
 * never called): RAD_E_ARG for an empty prompt or a bad parameter (a prompt token, logit bias
 * or stop id outside the vocabulary), RAD_E_LIMIT when the prompt plus max_tokens (or the
 * prompt alone when max_tokens is 0) cannot fit the context or the whole KV pool, or the queue
 * is full. *id is set on success. Thread-safe. */
int rad_sched_submit(RadSched *s, const RadGenReq *r, RadGenSink sink, void *user, uint64_t *id, RadErr *e);
/* Cancels a request (client gone): its blocks are freed at the next step and its sink gets one
 * CANCELLED event there. Unknown or finished ids are ignored. Thread-safe. */
void rad_sched_cancel(RadSched *s, uint64_t id);

/* Stop admitting (SIGTERM drain): later submits are refused with RAD_E_LIMIT "shutting down". */
void rad_sched_drain(RadSched *s);
/* Requests waiting or running. */
uint32_t rad_sched_pending(RadSched *s);
void rad_sched_stats(RadSched *s, RadSchedStats *st);

/* The context a request may use: prompt + generated tokens <= this. */
uint32_t rad_sched_max_ctx(const RadSched *s);

#endif
