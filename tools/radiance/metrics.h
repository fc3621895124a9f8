/* metrics.h — the server's counters and latency histograms, written out in Prometheus' text
 * format (GET /metrics) with the scheduler's snapshot (rad_sched_stats). Thread-safe. */
#ifndef RADIANCE_METRICS_H
#define RADIANCE_METRICS_H

#include <pthread.h>
#include <stdint.h>

#include "libcommon/runtime/rad_sched.h"

#define MET_MAX_BUCKETS 24

typedef struct MetHist {
    const double *le;             /* [n] upper bounds, ascending (+Inf implied) */
    int n;
    uint64_t count[MET_MAX_BUCKETS + 1]; /* per bucket, not cumulative; [n] is +Inf */
    double sum;
} MetHist;

/* Outcomes of generation requests (the `outcome` label). */
typedef enum MetOutcome {
    MET_STOP = 0,                 /* finished: EOS or a stop string */
    MET_LENGTH,                   /* finished: max_tokens or the context */
    MET_CANCELLED,                /* the client went away, or shutdown */
    MET_ERROR,                    /* the engine failed */
    MET_REJECTED,                 /* refused before generation (4xx, 503) */
    MET_N_OUTCOME
} MetOutcome;

typedef enum MetEndpoint { MET_COMPLETIONS = 0, MET_CHAT, MET_EMBEDDINGS, MET_N_ENDPOINT } MetEndpoint;

/* Why the server closed a connection whose request had not arrived (the `reason` label). */
typedef enum MetCut {
    MET_CUT_HEADER = 0,           /* --header-timeout */
    MET_CUT_BODY,                 /* --body-timeout (answered 408) */
    MET_CUT_SHARE,                /* the oldest incomplete one, past 3/4 of --max-conns */
    MET_N_CUT
} MetCut;

typedef struct Metrics {
    pthread_mutex_t mu;
    uint64_t requests[MET_N_ENDPOINT][MET_N_OUTCOME];
    uint64_t http[6];             /* responses by status class: [1] 1xx .. [5] 5xx */
    uint64_t cut[MET_N_CUT];
    MetHist ttft, itl, e2e, queue;
} Metrics;

void met_init(Metrics *m);
void met_free(Metrics *m);
void met_request(Metrics *m, MetEndpoint ep, MetOutcome o);
void met_http(Metrics *m, unsigned status);
void met_cut(Metrics *m, MetCut why);
void met_ttft(Metrics *m, double s);
void met_itl(Metrics *m, double s);
void met_e2e(Metrics *m, double s);
void met_queue(Metrics *m, double s);

/* The exposition text (malloc'd). st may be NULL while the model loads. */
char *met_render(Metrics *m, const RadSchedStats *st, int ready, uint32_t connections);

#endif
