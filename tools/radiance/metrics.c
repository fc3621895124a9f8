/* metrics.c — Prometheus text for GET /metrics (metrics.h). */
#include "metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/base/rad_buf.h"

/* Bucket bounds in seconds (vLLM's, so dashboards carry over). */
static const double LE_TTFT[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
static const double LE_ITL[] = {0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5};
static const double LE_E2E[] = {0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0};

#define N_OF(a) (int)(sizeof(a) / sizeof((a)[0]))

void met_init(Metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->ttft = (MetHist){.le = LE_TTFT, .n = N_OF(LE_TTFT)};
    m->itl = (MetHist){.le = LE_ITL, .n = N_OF(LE_ITL)};
    m->e2e = (MetHist){.le = LE_E2E, .n = N_OF(LE_E2E)};
    m->queue = (MetHist){.le = LE_TTFT, .n = N_OF(LE_TTFT)};
}

void met_free(Metrics *m) { pthread_mutex_destroy(&m->mu); }

static void observe(Metrics *m, MetHist *h, double s) {
    if (s < 0) s = 0;
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < h->n && s > h->le[i]) i++;
    h->count[i]++;
    h->sum += s;
    pthread_mutex_unlock(&m->mu);
}

void met_ttft(Metrics *m, double s) { observe(m, &m->ttft, s); }
void met_itl(Metrics *m, double s) { observe(m, &m->itl, s); }
void met_e2e(Metrics *m, double s) { observe(m, &m->e2e, s); }
void met_queue(Metrics *m, double s) { observe(m, &m->queue, s); }

void met_request(Metrics *m, MetEndpoint ep, MetOutcome o) {
    pthread_mutex_lock(&m->mu);
    m->requests[ep][o]++;
    pthread_mutex_unlock(&m->mu);
}

void met_http(Metrics *m, unsigned status) {
    unsigned c = status / 100;
    if (c < 1 || c > 5) return;
    pthread_mutex_lock(&m->mu);
    m->http[c]++;
    pthread_mutex_unlock(&m->mu);
}

void met_cut(Metrics *m, MetCut why) {
    pthread_mutex_lock(&m->mu);
    m->cut[why]++;
    pthread_mutex_unlock(&m->mu);
}

/* The page is built in one RadBuf; running out of memory drops the rest (the scrape fails). */
typedef struct Page {
    RadBuf b;
    int oom;
} Page;

static void bprintf(Page *pg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bprintf(Page *pg, const char *fmt, ...) {
    if (pg->oom) return;
    va_list ap;
    va_start(ap, fmt);
    if (rad_buf_vprintf(&pg->b, NULL, fmt, ap)) pg->oom = 1;
    va_end(ap);
}

static void hist(Page *b, const char *name, const char *help, const MetHist *h) {
    bprintf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->count[i];
        bprintf(b, "%s_bucket{le=\"%g\"} %llu\n", name, h->le[i], (unsigned long long)cum);
    }
    cum += h->count[h->n];
    bprintf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name, (unsigned long long)cum, name, h->sum, name,
            (unsigned long long)cum);
}

static void one(Page *b, const char *type, const char *name, const char *help, double v) {
    bprintf(b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

char *met_render(Metrics *m, const RadSchedStats *st, int ready, uint32_t connections) {
    static const char *ep[] = {"completions", "chat_completions", "embeddings"};
    static const char *oc[] = {"stop", "length", "cancelled", "error", "rejected"};
    Page b = {0};
    pthread_mutex_lock(&m->mu);
    bprintf(&b, "# HELP radiance_requests_total Generation and embedding requests finished, by endpoint and outcome.\n"
                "# TYPE radiance_requests_total counter\n");
    for (int e = 0; e < MET_N_ENDPOINT; e++)
        for (int o = 0; o < MET_N_OUTCOME; o++)
            bprintf(&b, "radiance_requests_total{endpoint=\"%s\",outcome=\"%s\"} %llu\n", ep[e], oc[o],
                    (unsigned long long)m->requests[e][o]);
    bprintf(&b, "# HELP radiance_http_responses_total HTTP responses, by status class.\n# TYPE radiance_http_responses_total counter\n");
    for (int c = 1; c <= 5; c++) bprintf(&b, "radiance_http_responses_total{code=\"%dxx\"} %llu\n", c, (unsigned long long)m->http[c]);
    static const char *cut[] = {"header_timeout", "body_timeout", "incomplete_share"};
    bprintf(&b, "# HELP radiance_http_closed_incomplete_total Connections closed before their request arrived, by reason.\n"
                "# TYPE radiance_http_closed_incomplete_total counter\n");
    for (int c = 0; c < MET_N_CUT; c++)
        bprintf(&b, "radiance_http_closed_incomplete_total{reason=\"%s\"} %llu\n", cut[c], (unsigned long long)m->cut[c]);
    hist(&b, "radiance_time_to_first_token_seconds", "Seconds from a request's arrival to its first token.", &m->ttft);
    hist(&b, "radiance_inter_token_latency_seconds", "Seconds between consecutive tokens of a request.", &m->itl);
    hist(&b, "radiance_e2e_request_latency_seconds", "Seconds from a generation request's arrival to its last token.", &m->e2e);
    hist(&b, "radiance_queue_time_seconds", "Seconds a request waited before admission.", &m->queue);
    pthread_mutex_unlock(&m->mu);
    one(&b, "gauge", "radiance_ready", "1 when the model is loaded and requests are admitted.", ready);
    one(&b, "gauge", "radiance_http_connections", "Open HTTP connections.", connections);
    if (st) {
        one(&b, "gauge", "radiance_queue_depth", "Requests waiting for admission.", st->waiting);
        one(&b, "gauge", "radiance_running_sequences", "Sequences running.", st->running);
        one(&b, "gauge", "radiance_kv_blocks_used", "KV blocks held by sequences.", st->kv_blocks_used);
        one(&b, "gauge", "radiance_kv_blocks_free", "KV blocks free (cached ones included).", st->kv_blocks_free);
        one(&b, "gauge", "radiance_kv_blocks_cached", "Free KV blocks holding a reusable prefix.", st->kv_blocks_cached);
        one(&b, "gauge", "radiance_prefix_cache_hit_rate", "Prompt tokens served from the prefix cache / prompt tokens looked up.",
            st->prefix_lookups_tok ? (double)st->prefix_hits_tok / (double)st->prefix_lookups_tok : 0.0);
        one(&b, "counter", "radiance_prefix_cache_queries_tokens_total", "Prompt tokens looked up in the prefix cache.",
            (double)st->prefix_lookups_tok);
        one(&b, "counter", "radiance_prefix_cache_hits_tokens_total", "Prompt tokens served from the prefix cache.",
            (double)st->prefix_hits_tok);
        one(&b, "counter", "radiance_prompt_tokens_total", "Prompt tokens admitted.", (double)st->prompt_tokens);
        one(&b, "counter", "radiance_generation_tokens_total", "Tokens generated.", (double)st->generated_tokens);
        one(&b, "counter", "radiance_preemptions_total", "Sequences preempted (recomputed) when KV ran out.", (double)st->preemptions);
        one(&b, "counter", "radiance_spec_verify_rows_total", "Decode rows that carried drafted tokens.", (double)st->spec_rows);
        one(&b, "counter", "radiance_spec_draft_tokens_total", "Tokens drafted for verification.", (double)st->spec_drafted);
        one(&b, "counter", "radiance_spec_accepted_tokens_total", "Drafted tokens the target accepted.", (double)st->spec_accepted);
        one(&b, "gauge", "radiance_spec_acceptance_rate", "Accepted over drafted tokens since start (0 before any draft).",
            st->spec_drafted ? (double)st->spec_accepted / (double)st->spec_drafted : 0.0);
        one(&b, "counter", "radiance_steps_total", "Engine steps run.", (double)st->steps);
    }
    if (b.oom || !b.b.p) {
        rad_buf_free(&b.b);
        return NULL;
    }
    return b.b.p;
}
