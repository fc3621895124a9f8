/* server.c — `radiance --model m.rad` with no one-shot job: the OpenAI-compatible HTTP server
 * (docs/SERVER.md).
 *
 * Threads. The main thread loads the model and then runs the scheduler's loop (rad_sched_run),
 * which owns the engine. libmicrohttpd runs one internal polling thread (epoll) that parses
 * requests, renders and tokenises prompts, submits them and writes responses. A third thread
 * waits for SIGTERM/SIGINT/SIGHUP/SIGQUIT and runs the drain; a fourth (the reaper) closes
 * connections whose request does not arrive in time (--header-timeout, --body-timeout) and keeps
 * incomplete requests to a share of --max-conns.
 *
 * A generation request (Req) is shared by MHD's thread and the scheduler's sinks, and is
 * reference-counted: MHD's connection holds one reference (dropped when MHD reports the request
 * completed), a streaming response holds one (dropped when MHD frees it), and each submitted
 * choice holds one until its sink sees the finish event. A sink only copies the event into the
 * request's queue (under the request's mutex) and, when the connection is suspended waiting for
 * it, resumes it. MHD's thread turns queued events into JSON. Connections wait suspended
 * (MHD_suspend_connection from the access handler or the content reader, never elsewhere), so an
 * idle stream holds no thread and nothing polls: a request is marked suspended and suspended
 * under its mutex, and only the sink that clears the mark resumes it, so a connection is resumed
 * exactly once per suspension and never after MHD has finished with it (a suspended connection
 * cannot complete). */
#include <errno.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "libcommon/plugin/rad_select.h"
#include "libcommon/runtime/rad_constrain.h"
#include "libcommon/text/rad_chat.h"
#include "libcommon/runtime/rad_engine.h"
#include "libcommon/runtime/rad_sched.h"
#include "libcommon/tok/rad_tok.h"
#include "metrics.h"
#include "openai.h"
#include "radiance.h"

enum { ST_LOADING = 0, ST_READY, ST_DRAINING, ST_STOPPING };
enum { R_NONE = 0, R_HEALTH, R_METRICS, R_MODELS, R_MODEL, R_COMPLETIONS, R_CHAT, R_TOKENIZE, R_DETOKENIZE, R_EMBEDDINGS };

/* A connection's phase. "Incomplete" ones (K_WAIT: no whole request head yet, from the accept
 * or from the end of the previous request on a kept-alive connection; K_BODY: the head is read,
 * the body is not) have a deadline and are listed oldest first; K_BUSY (the request is read, or
 * answered) and K_CUT (shut down by the reaper) have none. */
enum { K_WAIT = 0, K_BODY, K_BUSY, K_CUT };

/* One per connection: MHD's socket context. */
typedef struct Conn {
    struct Conn *prev, *next;      /* (Srv.conn_mu) in Srv.inc or Srv.busy */
    int fd;
    int phase;                     /* (conn_mu) */
    double since;                  /* (conn_mu) when the phase began */
    int over;                      /* accepted past --max-conns: its requests get 503 */
    unsigned cut_status;           /* (conn_mu) 408 when it was cut waiting for a body */
    char peer[64];                 /* "address:port", for the log */
} Conn;

typedef struct ConnList {
    Conn *head, *tail;
    unsigned n;
} ConnList;

typedef struct Srv {
    const Opts *o;
    struct MHD_Daemon *d;
    atomic_int state;
    RadEngine *en;                 /* NULL until opened */
    RadTok *tok;
    RadTokTrie *trie;              /* the vocabulary's bytes, for response_format's token masks */
    pthread_mutex_t gate;          /* sched and sched_live: calls into the scheduler from MHD's thread */
    RadSched *sched;
    int sched_live;
    ApiCtx cx;
    uint32_t embed_dims[16];       /* cx.embed_dims: the model's pooling.dims */
    char model_name[256];
    Metrics met;
    atomic_uint n_conns;
    atomic_ullong next_rid;
    atomic_ullong seed_state;
    pthread_mutex_t live_mu;       /* live: requests alive (the drain waits for 0) */
    pthread_cond_t live_cv;
    unsigned live;
    pthread_t sup;
    atomic_int exiting;
    /* the hang-up watch: a suspended non-streaming request's socket, for a client that leaves
     * (libmicrohttpd does not look at a suspended connection) */
    int watch_ep;                  /* epoll, or -1 */
    int watch_pipe[2];             /* its read end in the set stops the watcher */
    pthread_t watcher;
    pthread_mutex_t watch_mu;      /* Req.watch_fd, and that a watched Req is alive */
    /* the deadlines: every connection, incomplete ones apart (conn_mu), and the reaper */
    pthread_mutex_t conn_mu;
    ConnList inc, busy;
    pthread_cond_t reap_cv;
    pthread_t reaper;
    int reap_live, reap_stop;      /* (conn_mu) */
    unsigned n_cut;                /* (conn_mu) cut, and not yet reported closed by MHD */
    double cut_log_at;             /* (conn_mu) the log says at most one cut a second */
    unsigned cut_quiet;            /* (conn_mu) cuts not logged since */
} Srv;

/* A sink's event, copied. Text and alternatives live in the queue's buffers. */
typedef struct Ev {
    uint32_t choice;
    RadGenFinish finish;
    int32_t token;
    float logprob;
    size_t off, len;               /* text in q_text */
    size_t top_off;                /* alternatives in q_top */
    uint32_t n_top;
    uint32_t n_prompt, n_cached, n_gen;
    double t_queue, t_first, t_at;
    char *msg;                     /* RAD_FINISH_ERROR */
    float *vec;                    /* an embedding's row [dim] (malloc'd), or NULL */
    uint32_t dim;
} Ev;

typedef struct Choice {
    struct Req *r;
    uint32_t index, prompt;
    uint64_t sid;                  /* the scheduler's id */
    int submitted;
    int finished;                  /* its finish event was processed */
    RadGenFinish fin;
    char *err;
    RadBuf text;               /* completions: the text; chat: unused */
    RadChatSplit split;            /* chat */
    RadBuf content, reasoning;
    RadChatCalls calls;            /* chat with tools: the calls read out of the content */
    size_t calls_sent;             /* streaming: calls already in a chunk */
    ApiLp *lp;
    size_t n_lp, cap_lp;
    uint32_t n_prompt, n_cached, n_gen;
    double t_queue, t_first, t_last;
    float *vec;                    /* /v1/embeddings: the input's row (malloc'd) */
} Choice;

typedef struct Req {
    atomic_int refs;
    Srv *s;
    uint64_t rid;
    int route;
    char method[16];
    char *path;                    /* as MHD unescaped it: any bytes (see show()) */
    struct Conn *k;                /* its connection (MHD's thread; NULL after on_completed) */
    double t0, t_submit;
    pthread_mutex_t mu;
    struct MHD_Connection *conn;   /* (mu) NULL once MHD is done with the request */
    int suspended;                 /* (mu) */
    unsigned n_fin;                /* (mu) finish events the sinks saw */
    Ev *q;                         /* (mu) events not yet processed */
    size_t nq, capq;
    RadBuf q_text;             /* (mu) */
    RadGenTop *q_top;              /* (mu) */
    size_t n_qtop, cap_qtop;
    int q_oom;                     /* (mu) an event was lost to memory: the request fails */
    /* MHD's thread only */
    RadBuf body;
    int body_over, answered, waiting, streaming;
    ApiReq api;
    Choice *ch;
    uint32_t n_ch, n_done;
    RadBuf out;                /* SSE bytes not yet sent */
    size_t out_pos;
    int stream_end;
    char id[48];
    long created;
    unsigned status;
    int outcome;                   /* MetOutcome, or -1: not a generation */
    int watch_fd;                  /* (Srv.watch_mu) its socket in the hang-up watch, or -1 */
} Req;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t splitmix(atomic_ullong *st) {
    uint64_t z = atomic_fetch_add(st, 0x9E3779B97F4A7C15ull) + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---- request lifetime --------------------------------------------------------------------- */

static void live_add(Srv *s, int d) {
    pthread_mutex_lock(&s->live_mu);
    s->live = (unsigned)((int)s->live + d);
    if (!s->live) pthread_cond_broadcast(&s->live_cv);
    pthread_mutex_unlock(&s->live_mu);
}

static Req *req_new(Srv *s, struct MHD_Connection *c, const char *method, const char *url) {
    Req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    atomic_init(&r->refs, 1);
    r->s = s;
    r->rid = atomic_fetch_add(&s->next_rid, 1) + 1;
    r->conn = c;
    r->t0 = now();
    r->outcome = -1;
    r->watch_fd = -1;
    snprintf(r->method, sizeof r->method, "%s", method);
    if (!(r->path = strdup(url))) return free(r), NULL;
    pthread_mutex_init(&r->mu, NULL);
    live_add(s, 1);
    return r;
}

static void req_unref(Req *r) {
    if (atomic_fetch_sub(&r->refs, 1) != 1) return;
    Srv *s = r->s;
    for (uint32_t i = 0; i < r->n_ch; i++) {
        Choice *c = &r->ch[i];
        free(c->err);
        free(c->lp);
        rad_buf_free(&c->text);
        rad_buf_free(&c->content);
        rad_buf_free(&c->reasoning);
        rad_chat_calls_free(&c->calls);
        free(c->vec);
    }
    for (size_t i = 0; i < r->nq; i++) free(r->q[i].msg), free(r->q[i].vec);
    free(r->q);
    free(r->q_top);
    rad_buf_free(&r->q_text);
    free(r->ch);
    api_req_free(&r->api);
    rad_buf_free(&r->body);
    rad_buf_free(&r->out);
    pthread_mutex_destroy(&r->mu);
    free(r->path);
    free(r);
    live_add(s, -1);
}

/* ---- the sink (scheduler thread): copy, maybe resume, return ---------------------------------- */

static int q_push(Req *r, const RadGenEvent *ev, uint32_t choice) {
    if (r->nq == r->capq) {
        size_t cap = r->capq ? r->capq * 2 : 16;
        Ev *q = realloc(r->q, cap * sizeof *q);
        if (!q) return -1;
        r->q = q;
        r->capq = cap;
    }
    Ev *e = &r->q[r->nq];
    memset(e, 0, sizeof *e);
    e->choice = choice;
    e->finish = ev->finish;
    e->token = ev->token;
    e->logprob = ev->logprob;
    e->n_prompt = ev->n_prompt, e->n_cached = ev->n_cached, e->n_gen = ev->n_gen;
    e->t_queue = ev->t_queue, e->t_first = ev->t_first, e->t_at = now();
    e->off = r->q_text.len;
    e->len = ev->len;
    if (rad_buf_put(&r->q_text, ev->text ? ev->text : "", ev->text ? ev->len : 0, NULL)) return -1;
    if (ev->n_top && ev->top) {
        if (r->n_qtop + ev->n_top > r->cap_qtop) {
            size_t cap = (r->cap_qtop + ev->n_top) * 2;
            RadGenTop *t = realloc(r->q_top, cap * sizeof *t);
            if (!t) return -1;
            r->q_top = t;
            r->cap_qtop = cap;
        }
        e->top_off = r->n_qtop;
        e->n_top = ev->n_top > RAD_SCHED_MAX_TOP ? RAD_SCHED_MAX_TOP : ev->n_top;
        memcpy(r->q_top + r->n_qtop, ev->top, e->n_top * sizeof *ev->top);
        r->n_qtop += e->n_top;
    }
    if (ev->finish == RAD_FINISH_ERROR && ev->msg) e->msg = strdup(ev->msg);
    if (ev->embedding) {
        if (!(e->vec = malloc(ev->dim * sizeof *e->vec))) return -1;
        memcpy(e->vec, ev->embedding, ev->dim * sizeof *e->vec);
        e->dim = ev->dim;
    }
    r->nq++;
    return 0;
}

static void sink(void *user, const RadGenEvent *ev) {
    Choice *c = user;
    Req *r = c->r;
    struct MHD_Connection *wake = NULL;
    pthread_mutex_lock(&r->mu);
    if (ev->finish) r->n_fin++;
    if (r->conn) { /* nobody reads the events of a request MHD is done with */
        if (q_push(r, ev, c->index)) {
            r->q_oom = 1;
            if (ev->finish) { /* the finish must arrive: a bare one, without text */
                RadGenEvent f = *ev;
                f.text = NULL, f.len = 0, f.n_top = 0, f.embedding = NULL; /* a lost row fails the request (q_oom) */
                if (q_push(r, &f, c->index)) r->q_oom = 2;
            }
        }
        if (r->suspended && (r->streaming || r->n_fin == r->n_ch)) {
            r->suspended = 0;
            wake = r->conn;
        }
    }
    pthread_mutex_unlock(&r->mu);
    if (wake) MHD_resume_connection(wake);
    if (ev->finish) req_unref(r);
}

/* ---- events into responses (MHD's thread) ------------------------------------------------- */

#define RAD_JSON_MODE_DEPTH 16 /* json_object: nesting at most this deep */

/* A choice's grammar (response_format): compiled for it alone (its automaton grows as it is
 * walked), ending at the turn's end tokens and EOS/EOT. */
static int constraint_new(Srv *s, const ApiReq *a, const int32_t *stop_ids, uint32_t n_stop, RadConstraint **out, RadErr *e) {
    *out = NULL;
    RadGrammar *g = NULL;
    const json_t *schema = a->args_schema ? a->args_schema : a->schema;
    int rc = schema ? rad_grammar_from_schema(schema, &g, NULL, 0, e) : rad_grammar_json_object(RAD_JSON_MODE_DEPTH, &g, e);
    if (rc) return rc;
    int32_t end[8];
    uint32_t n = 0;
    if (rad_tok_eos(s->tok) >= 0) end[n++] = rad_tok_eos(s->tok);
    if (rad_tok_eot(s->tok) >= 0) end[n++] = rad_tok_eot(s->tok);
    for (uint32_t i = 0; i < n_stop && n < 8; i++) end[n++] = stop_ids[i];
    RadConstraint *c = malloc(sizeof *c);
    if (!c) return rad_grammar_free(g), rad_err_set(e, RAD_E_NOMEM, "out of memory");
    if ((rc = rad_constraint_init(c, g, s->trie, end, n, e))) return free(c), rc;
    /* a forced call's arguments, then the format's close of the call ("}\n</tool_call>") */
    /* (the whole call's schema closes its own "}": the suffix is the rest of the close) */
    if (a->args_schema && (rc = rad_constraint_set_suffix(c, s->cx.chat->tool_call_close + (a->call_schema ? 1 : 0), e)))
        return rad_constraint_free(c), free(c), rc;
    *out = c;
    return RAD_OK;
}

static const char *finish_name(RadGenFinish f) { return f == RAD_FINISH_LENGTH ? "length" : "stop"; }
/* A chat choice's: "tool_calls" when a reply that ended by itself made calls. */
static const char *chat_finish(const Choice *c, RadGenFinish f) {
    return f != RAD_FINISH_LENGTH && c->calls.n ? "tool_calls" : finish_name(f);
}

static void out_add(Req *r, char *s) {
    if (s && rad_buf_put(&r->out, s, strlen(s), NULL)) r->stream_end = 1;
    free(s);
}

static ApiUsage usage(const Req *r) {
    ApiUsage u = {0, 0, 0};
    for (uint32_t i = 0; i < r->n_ch; i++) {
        const Choice *c = &r->ch[i];
        if (i % r->api.n == 0) u.prompt += c->n_prompt ? c->n_prompt : r->api.n_prompt[c->prompt], u.cached += c->n_cached;
        u.completion += c->n_gen;
    }
    return u;
}

static int lp_push(Choice *c, const Ev *e, const RadGenTop *top, size_t offset) {
    if (c->n_lp == c->cap_lp) {
        size_t cap = c->cap_lp ? c->cap_lp * 2 : 64;
        ApiLp *p = realloc(c->lp, cap * sizeof *p);
        if (!p) return -1;
        c->lp = p;
        c->cap_lp = cap;
    }
    ApiLp *l = &c->lp[c->n_lp++];
    l->token = e->token;
    l->logprob = e->logprob;
    l->n_top = e->n_top;
    if (e->n_top) memcpy(l->top, top, e->n_top * sizeof *top); /* logprobs without alternatives: top is NULL */
    l->text_offset = offset;
    return 0;
}

/* One event: text into the choice (or a stream chunk), timing into the metrics. */
static void on_event(Req *r, const Ev *e, const char *text, const RadGenTop *top) {
    Srv *s = r->s;
    Choice *c = &r->ch[e->choice];
    c->n_prompt = e->n_prompt, c->n_cached = e->n_cached, c->n_gen = e->n_gen;
    c->t_queue = e->t_queue;
    if (e->token >= 0) {
        if (c->t_first <= 0) {
            c->t_first = e->t_first > 0 ? e->t_first : e->t_at - r->t_submit;
            met_ttft(&s->met, c->t_first + (r->t_submit - r->t0));
            met_queue(&s->met, e->t_queue);
        } else {
            met_itl(&s->met, e->t_at - c->t_last);
        }
        c->t_last = e->t_at;
    }
    if (r->api.kind == API_EMBEDDINGS) return; /* the row is the finish event's (process_events) */
    int want_lp = r->api.logprobs && e->token >= 0;
    if (!e->len && !want_lp && !e->finish) return;
    size_t lp_from = c->n_lp;
    ApiChoice out = {.index = c->index};
    RadBuf dc = {0}, dr = {0}; /* a stream's delta */
    if (r->api.kind == API_COMPLETIONS) {
        if (want_lp && lp_push(c, e, top, c->text.len)) r->q_oom = 1;
        if (!r->streaming && rad_buf_put(&c->text, text, e->len, NULL)) r->q_oom = 1;
        if (r->streaming) c->text.len += e->len; /* only the offset is kept */
        out.text = text, out.len = e->len;
    } else {
        if (want_lp && lp_push(c, e, top, 0)) r->q_oom = 1;
        RadBuf *bc = r->streaming ? &dc : &c->content, *br = r->streaming ? &dr : &c->reasoning;
        RadBuf said = {0}; /* the reply outside its reasoning: content and tool calls */
        if (rad_chat_split_feed(&c->split, text, e->len, &said, br, NULL)) r->q_oom = 1;
        if (e->finish && rad_chat_split_flush(&c->split, &said, br, NULL)) r->q_oom = 1;
        if (rad_chat_calls_feed(&c->calls, said.p, said.len, bc, NULL)) r->q_oom = 1;
        if (e->finish && rad_chat_calls_flush(&c->calls, bc, NULL)) r->q_oom = 1;
        rad_buf_free(&said);
        out.text = dc.p, out.len = dc.len;
        out.reasoning = dr.len ? dr.p : NULL, out.reasoning_len = dr.len;
        out.calls = c->calls.calls + c->calls_sent, out.n_calls = c->calls.n - c->calls_sent, out.call0 = c->calls_sent;
        out.call_id = r->id + 9; /* the hex after "chatcmpl-" */
        if (r->streaming) c->calls_sent = c->calls.n;
    }
    if (r->streaming) {
        out.lp = c->lp + lp_from, out.n_lp = c->n_lp - lp_from;
        int fin_ok = e->finish == RAD_FINISH_STOP || e->finish == RAD_FINISH_LENGTH;
        out.finish = !fin_ok ? NULL : r->api.kind == API_CHAT ? chat_finish(c, e->finish) : finish_name(e->finish);
        if (out.len || out.reasoning_len || out.n_lp || out.n_calls || fin_ok)
            out_add(r, api_chunk(&r->api, &s->cx, r->id, r->created, &out, 0));
        c->n_lp = 0; /* a stream does not keep them */
    }
    rad_buf_free(&dc);
    rad_buf_free(&dr);
}

static void on_finish(Req *r, const Ev *e) {
    Choice *c = &r->ch[e->choice];
    if (c->finished) return;
    c->finished = 1;
    c->fin = e->finish;
    if (e->msg && !c->err) c->err = strdup(e->msg);
    r->n_done++;
    if (r->streaming && (e->finish == RAD_FINISH_ERROR || e->finish == RAD_FINISH_CANCELLED)) {
        ApiErr ae;
        if (e->finish == RAD_FINISH_ERROR) api_err(&ae, 500, "server_error", NULL, NULL, "generation failed: %s", c->err ? c->err : "engine error");
        else api_err(&ae, 503, "server_error", "cancelled", NULL, "the request was cancelled (the server is shutting down)");
        out_add(r, api_stream_error(&ae));
    }
    if (r->streaming && r->n_done == r->n_ch) {
        if (r->api.include_usage) {
            ApiUsage u = usage(r);
            out_add(r, api_usage_chunk(&r->api, &r->s->cx, r->id, r->created, &u));
        }
        if (rad_buf_put(&r->out, "data: [DONE]\n\n", 14, NULL)) r->stream_end = 1;
        r->stream_end = 1;
    }
}

/* Takes the queued events and processes them outside the request's mutex. */
static void process_events(Req *r) {
    pthread_mutex_lock(&r->mu);
    Ev *q = r->q;
    size_t nq = r->nq;
    RadBuf qt = r->q_text;
    RadGenTop *qtop = r->q_top;
    int oom = r->q_oom;
    r->q = NULL, r->nq = r->capq = 0;
    memset(&r->q_text, 0, sizeof r->q_text);
    r->q_top = NULL, r->n_qtop = r->cap_qtop = 0;
    pthread_mutex_unlock(&r->mu);
    if (oom) r->q_oom = oom;
    for (size_t i = 0; i < nq; i++) {
        on_event(r, &q[i], qt.p ? qt.p + q[i].off : "", qtop ? qtop + q[i].top_off : NULL);
        if (q[i].finish) on_finish(r, &q[i]);
        if (q[i].vec && !r->ch[q[i].choice].vec) r->ch[q[i].choice].vec = q[i].vec, q[i].vec = NULL;
        free(q[i].msg);
        free(q[i].vec);
    }
    free(q);
    free(qtop);
    rad_buf_free(&qt);
}

/* ---- HTTP responses ----------------------------------------------------------------------- */

static enum MHD_Result respond(Req *r, struct MHD_Connection *c, unsigned status, const char *ctype, char *body) {
    if (!body) {
        status = 500;
        body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}");
        ctype = "application/json";
        if (!body) return MHD_NO;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) return free(body), MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (status == 401) MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == 405) {
        int post = r->route == R_COMPLETIONS || r->route == R_CHAT || r->route == R_TOKENIZE || r->route == R_DETOKENIZE ||
                   r->route == R_EMBEDDINGS;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, post ? "POST" : "GET, HEAD");
    }
    if (status == 413 || status == 503) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    r->status = status;
    r->answered = 1;
    met_http(&r->s->met, status);
    return ret;
}

static enum MHD_Result respond_json(Req *r, struct MHD_Connection *c, unsigned status, char *body) {
    return respond(r, c, status, "application/json", body);
}

static enum MHD_Result respond_err(Req *r, struct MHD_Connection *c, const ApiErr *e) {
    if (r->route == R_COMPLETIONS || r->route == R_CHAT || r->route == R_EMBEDDINGS) r->outcome = MET_REJECTED;
    return respond_json(r, c, (unsigned)e->status, api_err_body(e));
}

/* ---- generation ----------------------------------------------------------------------------- */

static void cancel_all(Req *r) {
    Srv *s = r->s;
    pthread_mutex_lock(&s->gate);
    if (s->sched_live)
        for (uint32_t i = 0; i < r->n_ch; i++)
            if (r->ch[i].submitted) rad_sched_cancel(s->sched, r->ch[i].sid);
    pthread_mutex_unlock(&s->gate);
}

/* The non-streaming answer once every choice finished. */
static enum MHD_Result respond_done(Req *r, struct MHD_Connection *c) {
    process_events(r);
    ApiErr e;
    for (uint32_t i = 0; i < r->n_ch; i++) {
        if (r->ch[i].fin == RAD_FINISH_ERROR) {
            api_err(&e, 500, "server_error", NULL, NULL, "generation failed: %s", r->ch[i].err ? r->ch[i].err : "engine error");
            return respond_json(r, c, 500, api_err_body(&e));
        }
        if (r->ch[i].fin == RAD_FINISH_CANCELLED || !r->ch[i].finished) {
            api_err(&e, 503, "server_error", "cancelled", NULL, "the request was cancelled (the server is shutting down)");
            return respond_json(r, c, 503, api_err_body(&e));
        }
    }
    if (r->q_oom) {
        api_err(&e, 500, "server_error", NULL, NULL, "out of memory collecting the response");
        return respond_json(r, c, 500, api_err_body(&e));
    }
    if (r->api.kind == API_EMBEDDINGS) {
        const float **vec = calloc(r->n_ch, sizeof *vec);
        if (!vec) return respond_json(r, c, 500, NULL);
        uint32_t tokens = 0;
        for (uint32_t i = 0; i < r->n_ch; i++) vec[i] = r->ch[i].vec, tokens += r->api.n_prompt[i];
        for (uint32_t i = 0; i < r->n_ch; i++)
            if (!vec[i]) {
                free(vec);
                api_err(&e, 500, "server_error", NULL, NULL, "input %u: no embedding came back", i);
                return respond_json(r, c, 500, api_err_body(&e));
            }
        char *body = api_embeddings_response(&r->api, &r->s->cx, vec, r->n_ch, tokens);
        free(vec);
        return respond_json(r, c, 200, body);
    }
    ApiChoice *out = calloc(r->n_ch, sizeof *out);
    if (!out) return respond_json(r, c, 500, NULL);
    for (uint32_t i = 0; i < r->n_ch; i++) {
        Choice *ch = &r->ch[i];
        out[i].index = ch->index;
        if (r->api.kind == API_COMPLETIONS) {
            out[i].text = ch->text.p, out[i].len = ch->text.len;
        } else {
            out[i].text = ch->content.p, out[i].len = ch->content.len;
            out[i].reasoning = ch->split.start ? ch->reasoning.p : NULL, out[i].reasoning_len = ch->reasoning.len;
            out[i].calls = ch->calls.calls, out[i].n_calls = ch->calls.n, out[i].call_id = r->id + 9;
        }
        out[i].finish = r->api.kind == API_CHAT ? chat_finish(ch, ch->fin) : finish_name(ch->fin);
        out[i].lp = ch->lp, out[i].n_lp = ch->n_lp;
    }
    ApiUsage u = usage(r);
    char *body = api_response(&r->api, &r->s->cx, r->id, r->created, out, r->n_ch, &u);
    free(out);
    return respond_json(r, c, 200, body);
}

/* The content reader of a stream: what is buffered, else suspend until a sink resumes us. */
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    Req *r = cls;
    (void)pos;
    for (;;) {
        if (r->out_pos < r->out.len) {
            size_t n = r->out.len - r->out_pos;
            if (n > max) n = max;
            memcpy(buf, r->out.p + r->out_pos, n);
            r->out_pos += n;
            if (r->out_pos == r->out.len) r->out_pos = r->out.len = 0;
            return (ssize_t)n;
        }
        if (r->stream_end) return MHD_CONTENT_READER_END_OF_STREAM;
        pthread_mutex_lock(&r->mu);
        if (!r->nq) {
            r->suspended = 1;
            MHD_suspend_connection(r->conn);
            pthread_mutex_unlock(&r->mu);
            return 0;
        }
        pthread_mutex_unlock(&r->mu);
        process_events(r);
    }
}

static void sse_free(void *cls) { req_unref(cls); }

/* ---- the hang-up watch ------------------------------------------------------------------------ */

/* Watches a suspended non-streaming request's socket for the client closing it. */
static void watch_add(Req *r, struct MHD_Connection *c) {
    Srv *s = r->s;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (s->watch_ep < 0 || !ci) return;
    pthread_mutex_lock(&s->watch_mu);
    struct epoll_event ev = {.events = EPOLLRDHUP | EPOLLHUP | EPOLLERR, .data.ptr = r};
    if (epoll_ctl(s->watch_ep, EPOLL_CTL_ADD, ci->connect_fd, &ev) == 0) r->watch_fd = ci->connect_fd;
    pthread_mutex_unlock(&s->watch_mu);
}

/* Before MHD closes the socket (on_completed), and by the watcher once it fired. */
static void watch_del_locked(Srv *s, Req *r) {
    if (r->watch_fd < 0) return;
    epoll_ctl(s->watch_ep, EPOLL_CTL_DEL, r->watch_fd, NULL);
    r->watch_fd = -1;
}

/* A client that hangs up while its request waits has its choices cancelled: their blocks are
 * freed at the scheduler's next step, and the finish events resume the connection, which MHD
 * then closes. A request is only touched while it is in the set (watch_mu), and on_completed
 * takes it out before dropping its reference, so the watcher never sees a freed request. */
static void *watch_loop(void *arg) {
    Srv *s = arg;
    struct epoll_event evs[64];
    for (;;) {
        int n = epoll_wait(s->watch_ep, evs, 64, -1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return NULL;
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == NULL) return NULL; /* the stop pipe */
            Req *r = evs[i].data.ptr;
            pthread_mutex_lock(&s->watch_mu);
            int live = r->watch_fd >= 0;
            if (live) {
                watch_del_locked(s, r);
                cancel_all(r);
            }
            pthread_mutex_unlock(&s->watch_mu);
        }
    }
}

static void watch_start(Srv *s) {
    pthread_mutex_init(&s->watch_mu, NULL);
    s->watch_ep = epoll_create1(EPOLL_CLOEXEC);
    if (s->watch_ep < 0) return;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (pipe(s->watch_pipe) || epoll_ctl(s->watch_ep, EPOLL_CTL_ADD, s->watch_pipe[0], &ev) ||
        pthread_create(&s->watcher, NULL, watch_loop, s)) {
        close(s->watch_ep);
        s->watch_ep = -1;
    }
}

static void watch_stop(Srv *s) {
    if (s->watch_ep < 0) return;
    (void)!write(s->watch_pipe[1], "x", 1);
    pthread_join(s->watcher, NULL);
    close(s->watch_pipe[0]), close(s->watch_pipe[1]), close(s->watch_ep);
    s->watch_ep = -1;
}

/* The parameter a scheduler or sampler message begins with ("sampler: top_p ...", "logit_bias:
 * ..."), for the error's param; NULL when it names none. */
static const char *msg_param(const char *msg, char *out, size_t cap) {
    int sampler = !strncmp(msg, "sampler: ", 9);
    if (sampler) msg += 9;
    size_t n = strspn(msg, "abcdefghijklmnopqrstuvwxyz_");
    if (!n || n >= cap || (msg[n] != ':' && !(sampler && msg[n] == ' '))) return NULL;
    memcpy(out, msg, n);
    out[n] = 0;
    return out;
}

static enum MHD_Result start_generation(Req *r, struct MHD_Connection *c, ApiKind kind) {
    Srv *s = r->s;
    ApiErr e;
    r->outcome = MET_REJECTED;
    if (kind != API_EMBEDDINGS && s->cx.embed_dim)
        return api_err(&e, 400, "invalid_request_error", "model_not_supported", "model", "the model '%.200s' is an embedding model: "
                       "it does not generate (use /v1/embeddings)", s->cx.model),
               respond_err(r, c, &e);
    if (kind == API_EMBEDDINGS ? api_parse_embeddings(r->body.p ? r->body.p : "", r->body.len, &s->cx, &r->api, &e)
                               : api_parse(kind, r->body.p ? r->body.p : "", r->body.len, &s->cx, &r->api, &e))
        return respond_err(r, c, &e);
    r->n_ch = r->api.n_prompts * r->api.n;
    r->ch = calloc(r->n_ch, sizeof *r->ch);
    if (!r->ch) return respond_json(r, c, 500, NULL);
    uint64_t base = r->api.have_seed ? r->api.sp.seed : splitmix(&s->seed_state);
    for (uint32_t i = 0; i < r->n_ch; i++) {
        Choice *ch = &r->ch[i];
        ch->r = r;
        ch->index = i;
        ch->prompt = i / r->api.n;
        rad_chat_split_init(&ch->split, kind == API_CHAT ? s->cx.chat : NULL, r->api.in_reasoning);
        rad_chat_calls_init(&ch->calls, r->api.tools ? s->cx.chat : NULL, r->api.tools, r->api.parallel_tool_calls ? 0 : 1);
        if (r->api.tool_prefix) { /* the call the prompt opened is the reply's start */
            RadBuf none = {0};
            if (rad_chat_calls_feed(&ch->calls, r->api.tool_prefix, strlen(r->api.tool_prefix), &none, NULL)) r->q_oom = 1;
            rad_buf_free(&none);
        }
    }
    r->created = (long)time(NULL);
    snprintf(r->id, sizeof r->id, "%s-%016" PRIx64, kind == API_CHAT ? "chatcmpl" : kind == API_EMBEDDINGS ? "embd" : "cmpl",
             splitmix(&s->seed_state));
    r->streaming = r->api.stream;
    r->t_submit = now();
    RadErr re = {0};
    int rc = RAD_OK;
    pthread_mutex_lock(&s->gate);
    if (!s->sched_live || atomic_load(&s->state) != ST_READY) {
        rc = RAD_E_DRAINING;
        rad_err_set(&re, RAD_E_DRAINING, "shutting down");
    }
    for (uint32_t i = 0; !rc && i < r->n_ch; i++) {
        Choice *ch = &r->ch[i];
        RadGenReq g = {.prompt = r->api.prompt[ch->prompt], .n_prompt = r->api.n_prompt[ch->prompt], .sp = r->api.sp,
                       .max_tokens = r->api.max_tokens, .stop = (const char *const *)r->api.stop, .n_stop = r->api.n_stop,
                       .logprobs = r->api.logprobs, .top_logprobs = r->api.top_logprobs, .embed = kind == API_EMBEDDINGS,
                       .no_spec = r->api.no_spec};
        if (kind == API_CHAT) g.stop_ids = s->cx.chat_stop_ids, g.n_stop_ids = s->cx.n_chat_stop_ids; /* the turn's end */
        g.sp.seed = base + i; /* choice i of a seeded request: seed + i */
        if ((r->api.json_mode || r->api.args_schema) && (rc = constraint_new(s, &r->api, g.stop_ids, g.n_stop_ids, &g.constraint, &re)))
            break;
        atomic_fetch_add(&r->refs, 1);
        rc = rad_sched_submit(s->sched, &g, sink, ch, &ch->sid, &re);
        if (rc) {
            atomic_fetch_sub(&r->refs, 1);
            if (g.constraint) rad_constraint_free(g.constraint), free(g.constraint);
        } else {
            ch->submitted = 1;
        }
    }
    int draining = atomic_load(&s->state) != ST_READY;
    pthread_mutex_unlock(&s->gate);
    if (rc) {
        cancel_all(r);
        char param[64];
        /* a drain is 503, a full queue 429 (try again); RAD_E_LIMIT is a request that can never
         * fit (the KV pool, the context): 400 */
        if (draining || rc == RAD_E_DRAINING)
            api_err(&e, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
        else if (rc == RAD_E_BUSY)
            api_err(&e, 429, "server_error", "server_busy", NULL, "the server is busy: %s", re.msg);
        else if (rc == RAD_E_LIMIT || rc == RAD_E_ARG) {
            const char *pp = msg_param(re.msg, param, sizeof param);
            if (pp && kind == API_EMBEDDINGS && !strcmp(pp, "prompt")) pp = "input"; /* the scheduler's word for it */
            api_err(&e, 400, "invalid_request_error", NULL, pp, "%s", re.msg);
        } else api_err(&e, 500, "server_error", NULL, NULL, "%s", re.msg);
        return respond_err(r, c, &e);
    }
    r->outcome = MET_STOP; /* decided at the end */
    if (r->streaming) {
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_read, r, sse_free);
        if (!resp) {
            cancel_all(r);
            return respond_json(r, c, 500, NULL);
        }
        atomic_fetch_add(&r->refs, 1); /* the response's */
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        if (kind == API_CHAT)
            for (uint32_t i = 0; i < r->n_ch; i++) {
                ApiChoice rc0 = {.index = i};
                out_add(r, api_chunk(&r->api, &s->cx, r->id, r->created, &rc0, 1));
            }
        enum MHD_Result ret = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        r->status = 200;
        r->answered = 1;
        met_http(&s->met, 200);
        return ret;
    }
    pthread_mutex_lock(&r->mu);
    if (r->n_fin < r->n_ch) {
        r->waiting = 1;
        r->suspended = 1;
        MHD_suspend_connection(c);
        pthread_mutex_unlock(&r->mu);
        watch_add(r, c);
        return MHD_YES;
    }
    pthread_mutex_unlock(&r->mu);
    return respond_done(r, c);
}

/* ---- routing, limits, auth -------------------------------------------------------------- */

static int route_of(const char *url) {
    static const struct {
        const char *path;
        int route;
    } t[] = {{"/health", R_HEALTH}, {"/metrics", R_METRICS}, {"/v1/models", R_MODELS}, {"/v1/completions", R_COMPLETIONS},
             {"/v1/chat/completions", R_CHAT}, {"/tokenize", R_TOKENIZE}, {"/detokenize", R_DETOKENIZE},
             {"/v1/embeddings", R_EMBEDDINGS}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(url, t[i].path)) return t[i].route;
    if (!strncmp(url, "/v1/models/", 11) && url[11]) return R_MODEL;
    return R_NONE;
}

/* Constant-time comparison of the presented key with the configured one: every byte of the
 * longer is looked at, whatever matches. */
static int key_ok(const char *have, const char *want) {
    size_t a = strlen(have), b = strlen(want), n = a > b ? a : b;
    volatile unsigned char d = (unsigned char)(a != b);
    for (size_t i = 0; i < n; i++) d |= (unsigned char)((i < a ? have[i] : 0) ^ (i < b ? want[i] : 0));
    return d == 0;
}

static int needs_key(int route) { return route != R_HEALTH && route != R_METRICS && route != R_NONE; }

static const char *mget(int route) { return route == R_HEALTH || route == R_METRICS || route == R_MODELS || route == R_MODEL ? "GET" : "POST"; }

/* A client's bytes (a path MHD has unescaped, a method) for a message or the log: printable
 * ASCII as is, any other byte as %XX, at most about 200 characters. */
static const char *show(const char *p, char *out, size_t cap) {
    size_t o = 0;
    for (; *p && o + 4 < cap && o < 200; p++) {
        unsigned char b = (unsigned char)*p;
        if (b > 0x20 && b < 0x7f && b != '%') out[o++] = (char)b;
        else o += (size_t)snprintf(out + o, cap - o, "%%%02X", b);
    }
    if (*p && o + 4 <= cap) memcpy(out + o, "...", 3), o += 3;
    out[o] = 0;
    return out;
}

/* ---- connections: the header and body deadlines, and the share of incomplete requests ------- */

/* Requests still arriving may hold at most this many connections; past it the oldest incomplete
 * one is closed, so clients that trickle their headers cannot lock out those that send whole
 * requests. */
static unsigned incomplete_share(unsigned max_conns) { return max_conns * 3 / 4 ? max_conns * 3 / 4 : 1; }

/* A connection that could not be tracked (no memory): no deadline, and its requests get 503. */
static Conn conn_untracked = {.fd = -1, .phase = K_BUSY, .over = 1};

static void kl_add(ConnList *l, Conn *k) {
    k->next = NULL;
    k->prev = l->tail;
    if (l->tail) l->tail->next = k;
    else l->head = k;
    l->tail = k;
    l->n++;
}

static void kl_del(ConnList *l, Conn *k) {
    if (k->prev) k->prev->next = k->next;
    else l->head = k->next;
    if (k->next) k->next->prev = k->prev;
    else l->tail = k->prev;
    k->prev = k->next = NULL;
    l->n--;
}

static ConnList *kl_of(Srv *s, const Conn *k) { return k->phase == K_WAIT || k->phase == K_BODY ? &s->inc : &s->busy; }

/* MHD's thread: a connection moves on (a cut one stays cut; a phase entered again restarts its
 * clock at the tail, so the list stays oldest first). */
static void conn_set(Srv *s, Conn *k, int phase) {
    if (!k || k == &conn_untracked) return;
    pthread_mutex_lock(&s->conn_mu);
    if (k->phase != K_CUT && (k->phase != phase || phase == K_WAIT)) {
        kl_del(kl_of(s, k), k);
        k->phase = phase;
        k->since = now();
        kl_add(kl_of(s, k), k);
    }
    pthread_mutex_unlock(&s->conn_mu);
}

/* Closes an incomplete connection under conn_mu: one waiting for a body is answered 408 first
 * (its client has sent a request and waits for an answer; one waiting for a request head is
 * closed without one, as an idle connection is). shutdown() makes MHD read end-of-file and close
 * it; the fd cannot be another connection's yet, since MHD tells us it closed (on_connection,
 * under conn_mu) before it closes the socket. */
static void conn_cut_locked(Srv *s, Conn *k, MetCut why) {
    const Opts *o = s->o;
    char msg[256];
    if (why == MET_CUT_HEADER)
        snprintf(msg, sizeof msg, "the request's headers did not arrive within --header-timeout %g s", o->header_timeout);
    else if (why == MET_CUT_BODY)
        snprintf(msg, sizeof msg, "the request's body did not arrive within --body-timeout %g s", o->body_timeout);
    else
        snprintf(msg, sizeof msg, "the oldest incomplete request, closed to keep room: requests still arriving may hold %u of "
                                  "--max-conns %u connections", incomplete_share(o->max_conns), o->max_conns);
    if (k->phase == K_BODY) {
        char body[384], head[512];
        int nb = snprintf(body, sizeof body, "{\"error\":{\"message\":\"%s\",\"type\":\"invalid_request_error\",\"param\":null,"
                                             "\"code\":\"request_timeout\"}}", msg);
        int nh = snprintf(head, sizeof head, "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nConnection: close\r\n"
                                             "Content-Length: %d\r\n\r\n%s", nb, body);
        /* MHD writes nothing while it reads a body (a 100 Continue aside, sent the moment the head
         * is read), so these bytes cannot interleave with its own */
        if (nh > 0 && nh < (int)sizeof head) (void)!send(k->fd, head, (size_t)nh, MSG_NOSIGNAL | MSG_DONTWAIT);
        k->cut_status = 408;
    }
    shutdown(k->fd, SHUT_RDWR);
    kl_del(&s->inc, k);
    k->phase = K_CUT;
    kl_add(&s->busy, k);
    s->n_cut++;
    met_cut(&s->met, why);
    double t = now();
    if (t - s->cut_log_at >= 1.0) {
        if (s->cut_quiet) fprintf(stderr, "radiance: http: closed %u more incomplete connections in the last second\n", s->cut_quiet);
        fprintf(stderr, "radiance: http: closed %s: %s\n", k->peer[0] ? k->peer : "a connection", msg);
        s->cut_log_at = t;
        s->cut_quiet = 0;
    } else {
        s->cut_quiet++;
    }
}

/* The share: past it, the oldest incomplete connection is cut, once it has been incomplete for a
 * second. A burst of clients that send whole requests is not mistaken for slow ones: MHD accepts
 * several connections before it reads any, so a new connection's request may be whole in the
 * kernel and not yet parsed; a second later, only a slow client is still incomplete. */
#define SHARE_GRACE_S 1.0

static void share_keep_locked(Srv *s, const Conn *except, double t) {
    unsigned share = incomplete_share(s->o->max_conns);
    while (s->inc.n > share && s->inc.head != except && t - s->inc.head->since >= SHARE_GRACE_S)
        conn_cut_locked(s, s->inc.head, MET_CUT_SHARE);
}

/* The reaper: every 200 ms, incomplete connections past their deadline are cut, and the share
 * kept (a burst that was too young to cut at its arrival). */
static void *reap_loop(void *arg) {
    Srv *s = arg;
    pthread_mutex_lock(&s->conn_mu);
    while (!s->reap_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 200 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&s->reap_cv, &s->conn_mu, &ts);
        double t = now();
        for (Conn *k = s->inc.head, *nx; k; k = nx) {
            nx = k->next;
            double lim = k->phase == K_WAIT ? s->o->header_timeout : s->o->body_timeout;
            if (lim > 0 && t - k->since >= lim) conn_cut_locked(s, k, k->phase == K_WAIT ? MET_CUT_HEADER : MET_CUT_BODY);
        }
        share_keep_locked(s, NULL, t);
    }
    pthread_mutex_unlock(&s->conn_mu);
    return NULL;
}

static void reap_start(Srv *s) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->reap_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&s->reaper, NULL, reap_loop, s) == 0) s->reap_live = 1;
    else fprintf(stderr, "radiance: cannot start the connection reaper: --header-timeout and --body-timeout are off\n");
}

static void reap_stop(Srv *s) {
    if (!s->reap_live) return;
    pthread_mutex_lock(&s->conn_mu);
    s->reap_stop = 1;
    pthread_cond_signal(&s->reap_cv);
    pthread_mutex_unlock(&s->conn_mu);
    pthread_join(s->reaper, NULL);
    s->reap_live = 0;
}

static Conn *conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* The first call for a request, headers read: what can be answered before the body. */
static enum MHD_Result on_headers(Req *r, struct MHD_Connection *c) {
    Srv *s = r->s;
    ApiErr e;
    char m[256], p[256];
    if (!r->k || r->k->over)
        return api_err(&e, 503, "server_error", "too_many_connections", NULL, "too many connections (--max-conns %u)", s->o->max_conns),
               respond_err(r, c, &e);
    r->route = route_of(r->path);
    if (r->route == R_NONE)
        return api_err(&e, 404, "invalid_request_error", "not_found", NULL, "no such endpoint: %s %s", show(r->method, m, sizeof m),
                       show(r->path, p, sizeof p)),
               respond_err(r, c, &e);
    int head = !strcmp(r->method, "HEAD") && !strcmp(mget(r->route), "GET");
    if (strcmp(r->method, mget(r->route)) && !head)
        return api_err(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "%s takes %s, not %s", r->path,
                       mget(r->route), show(r->method, m, sizeof m)),
               respond_err(r, c, &e);
    if (s->o->api_key && needs_key(r->route)) {
        const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        if (!h || strncmp(h, "Bearer ", 7) || !key_ok(h + 7, s->o->api_key))
            return api_err(&e, 401, "invalid_request_error", "invalid_api_key", NULL,
                           h ? "Incorrect API key provided" : "no API key: send 'Authorization: Bearer KEY'"),
                   respond_err(r, c, &e);
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > s->o->max_body)
        return api_err(&e, 413, "invalid_request_error", "request_too_large", NULL, "the body is %.20s bytes, more than --max-body %zu",
                       cl, s->o->max_body),
               respond_err(r, c, &e);
    return MHD_YES;
}

/* The whole request is read: answer it. */
static enum MHD_Result on_request(Req *r, struct MHD_Connection *c) {
    Srv *s = r->s;
    ApiErr e;
    int st = atomic_load(&s->state);
    if (r->body_over)
        return api_err(&e, 413, "invalid_request_error", "request_too_large", NULL, "the body is more than --max-body %zu bytes",
                       s->o->max_body),
               respond_err(r, c, &e);
    if (r->route == R_HEALTH) {
        const char *name = st == ST_READY ? "ok" : st == ST_LOADING ? "loading" : "draining";
        char *b = malloc(64);
        if (b) snprintf(b, 64, "{\"status\":\"%s\"}", name);
        return respond_json(r, c, st == ST_READY ? 200 : 503, b);
    }
    if (r->route == R_METRICS) {
        RadSchedStats ss;
        int have = 0;
        pthread_mutex_lock(&s->gate);
        if (s->sched_live) rad_sched_stats(s->sched, &ss), have = 1;
        pthread_mutex_unlock(&s->gate);
        return respond(r, c, 200, "text/plain; version=0.0.4", met_render(&s->met, have ? &ss : NULL, st == ST_READY, atomic_load(&s->n_conns)));
    }
    if (st == ST_LOADING)
        return api_err(&e, 503, "server_error", "loading", NULL, "the model is loading"), respond_err(r, c, &e);
    if (st != ST_READY && (r->route == R_COMPLETIONS || r->route == R_CHAT || r->route == R_EMBEDDINGS))
        return api_err(&e, 503, "server_error", "shutting_down", NULL, "the server is shutting down"), respond_err(r, c, &e);
    const char *b = r->body.p ? r->body.p : "";
    char *out;
    switch (r->route) {
    case R_MODELS: return respond_json(r, c, 200, api_models(&s->cx, (long)time(NULL)));
    case R_MODEL:
        if (strcmp(r->path + 11, s->cx.model)) {
            char id[256];
            return api_err(&e, 404, "invalid_request_error", "model_not_found", "model", "The model '%s' does not exist",
                           show(r->path + 11, id, sizeof id)),
                   respond_err(r, c, &e);
        }
        return respond_json(r, c, 200, api_model(&s->cx, (long)time(NULL)));
    case R_TOKENIZE:
    case R_DETOKENIZE:
        out = r->route == R_TOKENIZE ? api_tokenize(b, r->body.len, &s->cx, &e) : api_detokenize(b, r->body.len, &s->cx, &e);
        return out ? respond_json(r, c, 200, out) : respond_err(r, c, &e);
    case R_COMPLETIONS: return start_generation(r, c, API_COMPLETIONS);
    case R_CHAT: return start_generation(r, c, API_CHAT);
    case R_EMBEDDINGS: return start_generation(r, c, API_EMBEDDINGS);
    }
    return respond_json(r, c, 500, NULL);
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url, const char *method, const char *version,
                                 const char *upload, size_t *upload_size, void **con_cls) {
    Srv *s = cls;
    Req *r = *con_cls;
    (void)version;
    if (!r) {
        if (!(r = req_new(s, c, method, url))) return MHD_NO;
        *con_cls = r;
        r->k = conn_of(c);
        conn_set(s, r->k, K_BODY);
        enum MHD_Result ret = on_headers(r, c);
        if (r->answered) conn_set(s, r->k, K_BUSY); /* MHD reads no body after an early answer */
        return ret;
    }
    if (*upload_size) {
        if (!r->answered && !r->body_over) {
            if (r->body.len + *upload_size > s->o->max_body) {
                r->body_over = 1;
                rad_buf_free(&r->body);
            } else if (rad_buf_put(&r->body, upload, *upload_size, NULL)) {
                return MHD_NO;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (r->answered) return MHD_YES;
    conn_set(s, r->k, K_BUSY); /* the whole request is read: no deadline while it is answered */
    if (r->waiting) return respond_done(r, c); /* resumed: every choice finished */
    return on_request(r, c);
}

static const char *outcome_name(int o) {
    static const char *n[] = {"stop", "length", "cancelled", "error", "rejected"};
    return o >= 0 && o < MET_N_OUTCOME ? n[o] : "-";
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    Srv *s = cls;
    Req *r = *con_cls;
    (void)c;
    if (!r) return;
    *con_cls = NULL;
    if (r->k && r->k != &conn_untracked) {
        pthread_mutex_lock(&s->conn_mu);
        if (r->k->cut_status) r->status = r->k->cut_status;
        pthread_mutex_unlock(&s->conn_mu);
        conn_set(s, r->k, K_WAIT); /* a kept-alive connection waits for its next request */
    }
    r->k = NULL;
    pthread_mutex_lock(&s->watch_mu);
    watch_del_locked(s, r); /* before MHD closes the socket and before our reference goes */
    pthread_mutex_unlock(&s->watch_mu);
    pthread_mutex_lock(&r->mu);
    r->conn = NULL;
    pthread_mutex_unlock(&r->mu);
    int disconnected = toe != MHD_REQUEST_TERMINATED_COMPLETED_OK;
    if (r->n_ch && r->n_done < r->n_ch) cancel_all(r);
    double total = now() - r->t0;
    if (r->outcome != -1 && r->outcome != MET_REJECTED) {
        int o = MET_STOP;
        for (uint32_t i = 0; i < r->n_ch; i++) {
            Choice *ch = &r->ch[i];
            int oc = !ch->finished ? MET_CANCELLED : ch->fin == RAD_FINISH_ERROR ? MET_ERROR : ch->fin == RAD_FINISH_CANCELLED ? MET_CANCELLED
                                                     : ch->fin == RAD_FINISH_LENGTH ? MET_LENGTH : MET_STOP;
            if (oc == MET_ERROR || (oc == MET_CANCELLED && o != MET_ERROR) || (oc == MET_LENGTH && o == MET_STOP)) o = oc;
        }
        r->outcome = o;
        met_e2e(&s->met, total);
    }
    if (r->outcome != -1)
        met_request(&s->met, r->route == R_CHAT ? MET_CHAT : r->route == R_EMBEDDINGS ? MET_EMBEDDINGS : MET_COMPLETIONS,
                    (MetOutcome)r->outcome);
    double queue = 0, ttft = 0;
    for (uint32_t i = 0; i < r->n_ch; i++) {
        if (r->ch[i].t_queue > queue) queue = r->ch[i].t_queue;
        double t = r->ch[i].t_first > 0 ? r->ch[i].t_first + (r->t_submit - r->t0) : 0;
        if (t > 0 && (ttft == 0 || t < ttft)) ttft = t;
    }
    ApiUsage u = r->n_ch ? usage(r) : (ApiUsage){0, 0, 0};
    char lm[64], lp[256];
    fprintf(stderr,
            "radiance: request id=%" PRIu64 " method=%s path=%s status=%u prompt_tokens=%u cached_tokens=%u generated_tokens=%u "
            "n=%u stream=%d queue_ms=%.1f ttft_ms=%.1f total_ms=%.1f outcome=%s%s\n",
            r->rid, show(r->method, lm, sizeof lm), show(r->path, lp, sizeof lp), r->status, u.prompt, u.cached, u.completion, r->n_ch,
            r->streaming, queue * 1e3,
            ttft * 1e3, total * 1e3, disconnected && r->outcome != -1 && r->outcome != MET_REJECTED && r->outcome != MET_STOP && r->outcome != MET_LENGTH
                                                    ? "disconnected" : outcome_name(r->outcome),
            disconnected ? " client=gone" : "");
    req_unref(r);
}

/* A connection opens: it is incomplete until its request head is read; past the share of
 * incomplete ones, the oldest is cut (never the new one: a client that sends a whole request at
 * once is the youngest), so the new one finds room. It closes: it leaves the lists before MHD
 * closes its socket. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode code) {
    Srv *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        unsigned n = atomic_fetch_add(&s->n_conns, 1) + 1;
        Conn *k = calloc(1, sizeof *k);
        const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ad = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (!k || !fd) {
            free(k);
            *socket_context = &conn_untracked;
            return;
        }
        k->fd = fd->connect_fd;
        char host[48] = "", serv[8] = "";
        if (ad && ad->client_addr) {
            socklen_t len = ad->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
            if (!getnameinfo(ad->client_addr, len, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV))
                snprintf(k->peer, sizeof k->peer, "%s:%s", host, serv);
        }
        pthread_mutex_lock(&s->conn_mu);
        k->phase = K_WAIT;
        k->since = now();
        kl_add(&s->inc, k);
        share_keep_locked(s, k, k->since);
        k->over = n - s->n_cut > s->o->max_conns; /* the ones cut count no more, though MHD still holds them */
        pthread_mutex_unlock(&s->conn_mu);
        *socket_context = k;
    } else {
        atomic_fetch_sub(&s->n_conns, 1);
        Conn *k = *socket_context;
        if (k && k != &conn_untracked) {
            pthread_mutex_lock(&s->conn_mu);
            if (k->phase == K_CUT) s->n_cut--;
            kl_del(kl_of(s, k), k);
            pthread_mutex_unlock(&s->conn_mu);
            free(k);
        }
        *socket_context = NULL;
    }
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    line[strcspn(line, "\r\n")] = 0;
    /* a client that left mid-request, or one the reaper cut (which says why, rate-limited): a
     * line per connection would let a flood of them fill the log */
    if (strstr(line, "when reading request")) return;
    fprintf(stderr, "radiance: http: %s\n", line);
}

/* ---- start, drain, stop --------------------------------------------------------------------- */

static int start_http(Srv *s) {
    const Opts *o = s->o;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%u", o->port);
    int gai = getaddrinfo(o->host, port, &hints, &ai);
    if (gai) return fprintf(stderr, "radiance: --host %s: %s\n", o->host, gai_strerror(gai)), 1;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    /* MHD's own limit sits a little above --max-conns, so the connections past it are still
     * accepted and told 503 rather than left in the listen queue */
    unsigned hard = o->max_conns + 64;
    size_t mem = o->max_header * 2 < 8192 ? 8192 : o->max_header * 2;
    s->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_access, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
                            MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_CONNECTION_LIMIT, hard, MHD_OPTION_CONNECTION_TIMEOUT, o->idle_timeout,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, mem, MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
                            MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->d) return fprintf(stderr, "radiance: cannot listen on %s:%u: %s\n", o->host, o->port, errno ? strerror(errno) : "libmicrohttpd refused"), 1;
    return 0;
}

/* The `listening on` line: only once the model is served, so a start-up the engine refuses is its
 * one line (the socket is bound from the start: /health answers 503 while loading). */
static void announce_http(const Srv *s) {
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr, "radiance: listening on http://%s:%u\n", s->o->host, di ? di->port : s->o->port);
}

/* The signals that stop the server, each with the drain (docs/OPERATIONS.md): SIGTERM (systemd,
 * kill), SIGINT (Ctrl-C), SIGHUP (the terminal went away; there is no reload) and SIGQUIT (no
 * core dump: a server asked to quit finishes what it serves). */
static void stop_signals(sigset_t *set) {
    sigemptyset(set);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGHUP);
    sigaddset(set, SIGQUIT);
}

static const char *sig_name(int sig) {
    return sig == SIGINT ? "SIGINT" : sig == SIGHUP ? "SIGHUP" : sig == SIGQUIT ? "SIGQUIT" : "SIGTERM";
}

/* The drain: on one of those signals stop admitting, wait for in-flight requests up to
 * --drain-timeout (a second signal cuts it short), then stop the scheduler's loop. */
static void *supervise(void *arg) {
    Srv *s = arg;
    sigset_t set;
    stop_signals(&set);
    int sig = 0;
    if (sigwait(&set, &sig) || atomic_load(&s->exiting)) return NULL;
    fprintf(stderr, "radiance: %s: draining, up to %u s for requests in flight\n", sig_name(sig), s->o->drain_timeout);
    pthread_mutex_lock(&s->gate);
    int was = atomic_exchange(&s->state, ST_DRAINING);
    if (s->sched_live) rad_sched_drain(s->sched);
    pthread_mutex_unlock(&s->gate);
    if (was == ST_LOADING) return NULL; /* the loader sees the state and exits */
    double deadline = now() + s->o->drain_timeout;
    struct timespec zero = {0, 0};
    for (;;) {
        pthread_mutex_lock(&s->live_mu);
        unsigned live = s->live;
        if (live) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 100 * 1000 * 1000;
            if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
            pthread_cond_timedwait(&s->live_cv, &s->live_mu, &ts);
            live = s->live;
        }
        pthread_mutex_unlock(&s->live_mu);
        pthread_mutex_lock(&s->gate);
        uint32_t pend = s->sched_live ? rad_sched_pending(s->sched) : 0;
        pthread_mutex_unlock(&s->gate);
        if ((!live && !pend) || now() >= deadline) break;
        int again = sigtimedwait(&set, NULL, &zero);
        if (again > 0) {
            fprintf(stderr, "radiance: second signal (%s): stopping now\n", sig_name(again));
            break;
        }
    }
    if (now() >= deadline) fprintf(stderr, "radiance: drain timeout: cancelling what is left\n");
    atomic_store(&s->state, ST_STOPPING);
    pthread_mutex_lock(&s->gate);
    if (s->sched_live) rad_sched_stop(s->sched);
    pthread_mutex_unlock(&s->gate);
    return NULL;
}

/* The defaults a request's omitted sampling parameters take: the container's generation.* keys
 * (generation_config.json), else OpenAI's (temperature 1, top_p 1). */
static RadSamplerParams gen_defaults(const RadModelMeta *m) {
    RadSamplerParams p = rad_sampler_defaults();
    double d;
    int64_t i;
    bool sample;
    p.temperature = 1.0f;
    p.top_p = 1.0f;
    /* a value the sampler would refuse is left out, so a container cannot make every request fail */
    if (rad_meta_f64(m, "generation.temperature", 0, &d) > 0 && d >= 0 && d <= 100) p.temperature = (float)d;
    if (rad_meta_f64(m, "generation.top_p", 0, &d) > 0 && (float)d > 0 && d <= 1) p.top_p = (float)d;
    if (rad_meta_i64(m, "generation.top_k", 0, &i) > 0 && i >= 0 && i <= INT32_MAX) p.top_k = (int32_t)i;
    if (rad_meta_f64(m, "generation.min_p", 0, &d) > 0 && d >= 0 && d <= 1) p.min_p = (float)d;
    if (rad_meta_f64(m, "generation.repetition_penalty", 0, &d) > 0 && (float)d > 0 && d <= 100) p.repetition_penalty = (float)d;
    if (rad_meta_bool(m, "generation.do_sample", true, &sample) > 0 && !sample) p.temperature = 0; /* greedy by default */
    return p;
}

static void raise_nofile(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl)) fprintf(stderr, "radiance: cannot raise the open-file limit: %s\n", strerror(errno));
    }
}

/* Whether s is valid UTF-8 (the served name is in every JSON answer). */
static int utf8_ok(const char *s) {
    for (size_t i = 0, n = strlen(s), l; i < n; i += l)
        if (!(l = rad_utf8_len(s + i, n - i))) return 0;
    return 1;
}

/* The container's file stem, as valid UTF-8 (a file name's bytes may not be; ill-formed ones
 * become U+FFFD). */
static void stem(const char *path, char *out, size_t cap) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    char *t = NULL;
    size_t n = 0;
    if (!rad_utf8_lossy(b, strlen(b), &t, &n, NULL)) snprintf(out, cap, "%.*s", (int)n, t);
    else snprintf(out, cap, "model");
    free(t);
    out[strlen(out) - rad_utf8_tail(out, strlen(out))] = 0; /* snprintf may have cut a character */
    char *dot = strrchr(out, '.');
    if (dot && dot != out) *dot = 0;
}

int serve(const Opts *o) {
    static Srv srv; /* one per process; its address is handed to MHD and the signal thread */
    Srv *s = &srv;
    memset(s, 0, sizeof *s);
    s->o = o;
    if (o->served_model_name && !utf8_ok(o->served_model_name))
        return fprintf(stderr, "radiance: --served-model-name: not valid UTF-8\n"), 2;
    pthread_mutex_init(&s->gate, NULL);
    pthread_mutex_init(&s->live_mu, NULL);
    pthread_cond_init(&s->live_cv, NULL);
    met_init(&s->met);
    atomic_init(&s->seed_state, (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32));
    raise_nofile();
    signal(SIGPIPE, SIG_IGN); /* a client that leaves is an EPIPE on its socket, not our death */
    sigset_t set;
    stop_signals(&set);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* every thread from here on: the supervisor takes them */
    s->watch_ep = -1;
    watch_start(s);
    pthread_mutex_init(&s->conn_mu, NULL);
    reap_start(s);
    if (start_http(s)) return reap_stop(s), watch_stop(s), 1;
    pthread_create(&s->sup, NULL, supervise, s);

    RadErr e = {0};
    RadEngineOpts eo = {.model = o->model, .plugin_dirs = o->plugin_dirs, .n_plugin_dirs = o->n_plugin_dirs, .kernels = o->kernels,
                        .n_threads = o->threads, .max_tok = o->max_mixed_tok, .max_seqs = o->max_seqs, .max_ctx = o->ctx,
                        .kv_blocks = o->kv_blocks, .deterministic = o->deterministic, .max_tolerance = o->max_tolerance,
                        .mmap_weights = o->mmap_weights, .no_repack = o->no_repack, .no_verify = o->no_verify,
                        .tune = o->tune, .tune_ignore_mismatch = o->tune_ignore_mismatch,
                        .speculate = o->spec != RAD_SPEC_NONE, .spec_depth = o->spec_depth};
    rad_engine_deploy_apply(&eo, &o->deploy);
    double t0 = now();
    int rc = rad_engine_open(&s->en, &eo, &e);
    if (!rc && rad_engine_tune_warning(s->en)) fprintf(stderr, "radiance: warning: %s\n", rad_engine_tune_warning(s->en));
    if (!rc) rc = rad_tok_init(&s->tok, rad_engine_tok_data(s->en), &e);
    RadSched *sched = NULL;
    RadSchedOpts so = {.max_seqs = o->max_seqs, .max_mixed_tok = o->max_mixed_tok, .max_queue = o->max_queue,
                       .prefix_cache = !o->no_prefix_cache};
    RadEngine *draft = NULL;
    if (!rc) rc = spec_setup(o, &eo, s->en, s->tok, &draft, &so, &e);
    if (!rc) rc = rad_sched_open(&sched, s->en, s->tok, &so, &e);
    if (!rc) {
        if (o->served_model_name) snprintf(s->model_name, sizeof s->model_name, "%s", o->served_model_name);
        else stem(o->model, s->model_name, sizeof s->model_name);
        s->cx = (ApiCtx){.model = s->model_name, .tok = s->tok, .max_ctx = rad_sched_max_ctx(sched), .defaults = gen_defaults(rad_engine_meta(s->en))};
        rc = rad_chat_format_get(rad_engine_arch(s->en), rad_engine_meta(s->en), &s->cx.chat, &e); /* checked before it is read */
        if (!rc) rc = rad_chat_stop_ids(s->cx.chat, s->tok, s->cx.chat_stop_ids, &s->cx.n_chat_stop_ids, &e);
        if (!rc) rc = rad_tok_trie_init(&s->trie, s->tok, &e);
        s->cx.chat_special = o->chat_special;
        if (!rc && (s->cx.embed_dim = rad_engine_pooled_dim(s->en))) { /* an embedding model */
            const RadModelMeta *mm = rad_engine_meta(s->en);
            bool norm = false;
            rad_meta_bool(mm, "pooling.normalize", false, &norm);
            s->cx.embed_normalized = norm;
            s->cx.embed_max = rad_engine_embed_max(s->en);
            if (rad_meta_u32s(mm, "pooling.dims", s->embed_dims, 16, &s->cx.n_embed_dims) < 0)
                rc = rad_err_set(&e, RAD_E_FORMAT, "%s: metadata 'pooling.dims' is not a list of at most 16 sizes", o->model);
            s->cx.embed_dims = s->embed_dims;
        }
        s->cx.default_max_tokens = o->default_max_tokens;
    }
    int run = 0;
    pthread_mutex_lock(&s->gate);
    if (!rc) {
        s->sched = sched;
        s->sched_live = 1;
        int expect = ST_LOADING;
        run = atomic_compare_exchange_strong(&s->state, &expect, ST_READY);
    }
    pthread_mutex_unlock(&s->gate);
    if (rc) fprintf(stderr, "radiance: %s\n", e.msg); /* the refusal's one line: nothing was announced */
    else if (run) announce_http(s);
    char tp_words[64] = "";
    if (run && rad_engine_world(s->en) > 1)
        snprintf(tp_words, sizeof tp_words, ", tensor parallel over %u ranks", rad_engine_world(s->en));
    if (run)
        fprintf(stderr, "radiance: ready in %.2f s: model '%s', context %u, max_seqs %u, max_mixed_tok %u, %s%s, chat %s%s%.200s%s%.300s\n",
                now() - t0, s->model_name, s->cx.max_ctx, o->max_seqs, o->max_mixed_tok,
                o->deterministic ? "deterministic" : "not deterministic", tp_words, s->cx.chat ? s->cx.chat->kind : "none",
                o->tune && !rad_engine_tune_warning(s->en) ? ", kernels from the tuning table " : "",
                o->tune && !rad_engine_tune_warning(s->en) ? o->tune : "",
                o->spec == RAD_SPEC_NGRAM ? ", speculation: prompt lookup" : o->spec ? ", speculation: draft model " : "",
                o->spec == RAD_SPEC_DRAFT ? o->draft : "");
    if (run) rad_sched_run(sched); /* until the drain stops it, or the weights change under --mmap */
    const char *why_changed = run ? rad_engine_fail_closed(s->en) : NULL;
    const int changed = why_changed != NULL; /* exit RAD_EXIT_MODEL_CHANGED (docs/TOOLS.md) */
    if (changed) fprintf(stderr, "radiance: %s\n", why_changed);

    /* shut down: no new calls into the scheduler, then cancel what is left (its sinks resume
     * every waiting connection), give the answers a moment to leave, stop HTTP */
    atomic_store(&s->exiting, 1);
    atomic_store(&s->state, ST_STOPPING);
    pthread_mutex_lock(&s->gate);
    s->sched_live = 0;
    pthread_mutex_unlock(&s->gate);
    if (sched) rad_sched_close(sched);
    pthread_mutex_lock(&s->live_mu);
    double until = now() + 2.0;
    while (s->live && now() < until) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&s->live_cv, &s->live_mu, &ts);
    }
    pthread_mutex_unlock(&s->live_mu);
    pthread_kill(s->sup, SIGTERM); /* wakes the supervisor if no signal came (it is pending there) */
    pthread_join(s->sup, NULL);
    reap_stop(s);
    MHD_stop_daemon(s->d);
    for (ConnList *l = &s->inc; l; l = l == &s->inc ? &s->busy : NULL) /* any MHD did not report closed */
        while (l->head) {
            Conn *k = l->head;
            kl_del(l, k);
            free(k);
        }
    watch_stop(s);
    rad_tok_trie_free(s->trie);
    rad_tok_free(s->tok);
    rad_engine_close(s->en);
    rad_engine_close(draft);
    met_free(&s->met);
    if (!rc) fprintf(stderr, "radiance: stopped\n");
    return changed ? RAD_EXIT_MODEL_CHANGED : rc ? 1 : 0;
}
