/* ref_comm.c — libref's collectives: tensor-parallel ranks that are threads of one process,
 * meeting in shared memory (docs/OPS.md, all_reduce; docs/ENGINE.md, "Tensor parallelism").
 *
 * A communicator is named by comm_id (RadCommId: this process's id and a serial number, no
 * memory of its own) and made by the first rank whose init names it; each rank's fini leaves
 * it and the last one frees it, so an open that fails half way leaks nothing.
 *
 * all_reduce (sum, in place) publishes each rank's buffer, meets at a barrier, and then every
 * rank sums its own slice of the elements over all ranks in rank order 0, 1, ..., W-1 and writes
 * the sum into every rank's buffer (no rank reads another's slice, so no copy is needed); a
 * second barrier ends it. The order of the additions is fixed, whatever the timing, and every
 * rank holds the same bits: the exact form, served for exact = 0 too (a lossy wire buys nothing
 * in shared memory).
 *
 * all_gather (a vocabulary-parallel head's logits) publishes each rank's rows, output and column
 * span, checks that the spans tile the row, and each rank copies its own columns into every
 * rank's output: a copy, the same bits everywhere. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ref_common.h"

#define REF_COMM_MAX 64              /* ranks a communicator may have */
#define REF_COMM_MAGIC "refcomm1"

struct RefComm {
    struct RefComm *next;            /* the registry's list */
    uint64_t serial;                 /* the RadCommId's */
    uint32_t world;                  /* ranks */
    uint32_t members;                /* ranks joined and not yet left */
    uint64_t joined[REF_COMM_MAX / 64]; /* which ranks joined (a rank joins once) */
    _Atomic uint32_t arrived;        /* at the current barrier */
    _Atomic uint64_t gen;            /* barriers passed */
    _Atomic int poisoned;            /* comm_abort(1): every collective fails until comm_abort(0) */
    float *_Atomic bufs[REF_COMM_MAX];   /* each rank's buffer in the current collective */
    _Atomic uint64_t count[REF_COMM_MAX]; /* its elements (all_gather: its rows) */
    /* all_gather: each rank's output [rows, W] and where its columns go in it */
    float *_Atomic outs[REF_COMM_MAX];
    _Atomic uint64_t col0[REF_COMM_MAX], cols[REF_COMM_MAX], width[REF_COMM_MAX];
    /* the arrival form: two sums, used by turns (a rank starting turn k+2 has passed turn k+1's
       barrier, which every rank reached after copying turn k's sum out) */
    pthread_mutex_t mu;
    float *acc[2];                   /* the running sum of each turn */
    uint64_t acc_cap[2], acc_n[2];   /* floats allocated; the turn's elements */
    uint32_t acc_in[2];              /* ranks added into it so far this turn */
    int acc_bad[2];                  /* a rank brought another element count */
    uint64_t turn[REF_COMM_MAX];     /* each rank's arrival collectives so far */
};

typedef struct RefCommName {
    char magic[8];
    int32_t pid;
    uint32_t world;
    uint64_t serial;
} RefCommName;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static RefComm *g_comms;             /* communicators with members */
static uint64_t g_serial;

int ref_comm_id(uint32_t world_size, RadCommId *id) {
    if (!id || world_size < 2 || world_size > REF_COMM_MAX) return RAD_E_ARG;
    RefCommName n = {.pid = (int32_t)getpid(), .world = world_size};
    memcpy(n.magic, REF_COMM_MAGIC, sizeof n.magic);
    pthread_mutex_lock(&g_mu);
    n.serial = ++g_serial;
    pthread_mutex_unlock(&g_mu);
    memset(id, 0, sizeof *id);
    memcpy(id->bytes, &n, sizeof n);
    return RAD_OK;
}

int ref_comm_join(const void *comm, uint32_t rank, uint32_t world, RefComm **out) {
    RefCommName n;
    memcpy(&n, comm, sizeof n);
    if (memcmp(n.magic, REF_COMM_MAGIC, sizeof n.magic) || n.pid != (int32_t)getpid()) return RAD_E_ARG; /* not ours */
    if (n.world != world || rank >= world) return RAD_E_ARG;
    pthread_mutex_lock(&g_mu);
    RefComm *c = g_comms;
    while (c && c->serial != n.serial) c = c->next;
    if (!c && (c = calloc(1, sizeof *c))) {
        c->serial = n.serial, c->world = world;
        pthread_mutex_init(&c->mu, NULL);
        c->next = g_comms, g_comms = c;
    }
    int rc = !c ? RAD_E_NOMEM : (c->joined[rank / 64] >> (rank % 64)) & 1 ? RAD_E_ARG : RAD_OK;
    if (!rc) c->joined[rank / 64] |= 1ull << (rank % 64), c->members++, *out = c;
    pthread_mutex_unlock(&g_mu);
    return rc;
}

void ref_comm_leave(RefComm *c) {
    if (!c) return;
    pthread_mutex_lock(&g_mu);
    if (--c->members == 0) {
        RefComm **p = &g_comms;
        while (*p && *p != c) p = &(*p)->next;
        if (*p) *p = c->next;
        pthread_mutex_destroy(&c->mu);
        free(c->acc[0]), free(c->acc[1]);
        free(c);
    }
    pthread_mutex_unlock(&g_mu);
}

void ref_comm_abort(void *state, int on) {
    RefState *s = state;
    if (!s || !s->comm) return;
    RefComm *c = s->comm;
    if (!on) { /* every rank has left the step: no barrier or sum is half met, and the turns start again */
        atomic_store(&c->arrived, 0);
        c->acc_in[0] = c->acc_in[1] = 0;
        memset(c->turn, 0, sizeof c->turn);
    }
    atomic_store(&c->poisoned, on != 0);
}

/* Every rank meets here; RAD_E_IO when the communicator is (or becomes) poisoned. Spins a
 * while (a decode step's messages are microseconds apart), then yields: ranks may outnumber
 * the cores. */
static int comm_barrier(RefComm *c) {
    const uint64_t gen = atomic_load(&c->gen);
    if (atomic_fetch_add(&c->arrived, 1) + 1 == c->world) {
        atomic_store(&c->arrived, 0);
        atomic_fetch_add(&c->gen, 1);
        return RAD_OK;
    }
    for (uint32_t spin = 0; atomic_load(&c->gen) == gen; spin++) {
        if (atomic_load(&c->poisoned)) return RAD_E_IO;
        if (spin < 4096) {
#if REF_X86
            __builtin_ia32_pause();
#endif
        } else {
            sched_yield();
        }
    }
    return RAD_OK;
}

/* Every collective's communicator: RAD_OK with *c NULL for one rank (the collective is local),
 * RAD_E_UNSUPPORTED when more ranks have none, RAD_E_IO while it is poisoned. */
static int comm_of(const RadKernelArgs *a, RefComm **c) {
    const RefState *s = a->lib_state;
    *c = NULL;
    if (!s || s->world_size <= 1) return RAD_OK;
    if (!s->comm) return RAD_E_UNSUPPORTED;
    if (atomic_load(&s->comm->poisoned)) return RAD_E_IO;
    *c = s->comm;
    return RAD_OK;
}

/* What both forms check first. RAD_OK with *c NULL: one rank, the sum is its own rows; else the
 * communicator, the rows' *total elements (whole rows: one run of n * N floats) and `exact`. */
static int ar_begin(const RadKernelArgs *a, RefComm **c, uint64_t *total, int64_t *exact) {
    *c = NULL;
    int rc = ref_preamble(a, 1);
    if (rc) return rc;
    int64_t N;
    if (!ref_pint(a, "N", &N) || !ref_pint(a, "exact", exact) || N < 1) return RAD_E_ARG;
    if (!ref_buf_ok(&a->args[0], (uint64_t)a->n, (uint64_t)N)) return RAD_E_SHAPE;
    if ((rc = comm_of(a, c)) || !*c) return rc;
    if (a->args[0].row_stride != (uint64_t)N) return RAD_E_SHAPE;
    *total = (uint64_t)a->n * (uint64_t)N;
    return RAD_OK;
}

int ref_run_all_reduce(const RadKernelArgs *a) {
    RefComm *c;
    uint64_t total;
    int64_t exact;
    int rc = ar_begin(a, &c, &total, &exact);
    if (rc || !c) return rc;
    const RadKArg *x = &a->args[0];
    const uint32_t W = c->world, r = ((const RefState *)a->lib_state)->rank;
    atomic_store(&c->bufs[r], (float *)x->data);
    atomic_store(&c->count[r], total);
    if ((rc = comm_barrier(c))) return rc;
    for (uint32_t q = 0; q < W; q++) /* one rank with other rows: every rank refuses, none writes */
        if (atomic_load(&c->count[q]) != total) return comm_barrier(c) ? RAD_E_IO : RAD_E_SHAPE;
    float *b[REF_COMM_MAX];
    for (uint32_t q = 0; q < W; q++) b[q] = atomic_load(&c->bufs[q]);
    int64_t lo, hi;
    ref_split((int64_t)total, (int)r, (int)W, 16, &lo, &hi);
    enum { CHUNK = 256 };
    float acc[CHUNK];
    for (int64_t i = lo; i < hi; i += CHUNK) {
        const int64_t n = hi - i < CHUNK ? hi - i : CHUNK;
        for (int64_t j = 0; j < n; j++) acc[j] = b[0][i + j];
        for (uint32_t q = 1; q < W; q++)
            for (int64_t j = 0; j < n; j++) acc[j] += b[q][i + j];
        for (uint32_t q = 0; q < W; q++) memcpy(b[q] + i, acc, (size_t)n * sizeof *acc);
    }
    return comm_barrier(c);
}

/* The arrival form (exact = 0 only: the selector gives exact = 1 to the bitwise form): each rank
 * adds its rows into the turn's sum as it arrives, the first copying, so the ranks that finish
 * their GEMMs first do the adding while the last still computes; one barrier, then every rank
 * copies the sum out. The order of the additions is the order of arrival: the result differs
 * from the rank-order sum by the rounding of a reordered W-term sum (TOLERANCE 1e-5). */
int ref_run_all_reduce_arrival(const RadKernelArgs *a) {
    RefComm *c;
    uint64_t total;
    int64_t exact;
    int rc = ar_begin(a, &c, &total, &exact);
    if (rc || !c) return rc;
    if (exact) return RAD_E_UNSUPPORTED; /* a fixed order was asked */
    float *v = a->args[0].data;
    const int t = (int)(c->turn[((const RefState *)a->lib_state)->rank]++ & 1);
    pthread_mutex_lock(&c->mu);
    if (c->acc_in[t] == 0) { /* the first to arrive: the turn's sum is its rows */
        c->acc_bad[t] = 0, c->acc_n[t] = total;
        if (c->acc_cap[t] < total) {
            float *p = realloc(c->acc[t], total * sizeof *p);
            if (p) c->acc[t] = p, c->acc_cap[t] = total;
            else c->acc_bad[t] = RAD_E_NOMEM;
        }
        if (!c->acc_bad[t]) memcpy(c->acc[t], v, total * sizeof *v);
    } else if (c->acc_n[t] != total) {
        c->acc_bad[t] = RAD_E_SHAPE;
    } else if (!c->acc_bad[t]) {
        float *sum = c->acc[t];
        for (uint64_t i = 0; i < total; i++) sum[i] += v[i];
    }
    if (++c->acc_in[t] == c->world) c->acc_in[t] = 0; /* the next turn of this parity starts afresh */
    pthread_mutex_unlock(&c->mu);
    if ((rc = comm_barrier(c))) return rc;
    if (c->acc_bad[t]) return c->acc_bad[t]; /* every rank sees it: none writes */
    memcpy(v, c->acc[t], total * sizeof *v);
    return RAD_OK;
}

/* ---- all_gather ------------------------------------------------------------------------------ */

/* Every rank's x [M, N] lands in columns [col0, col0 + N) of every rank's out [M, W]. The ranks'
 * spans must tile [0, W) and their M agree, else every rank refuses (RAD_E_SHAPE) and none writes. */
int ref_run_all_gather(const RadKernelArgs *a) {
    int rc = ref_preamble(a, 2);
    if (rc) return rc;
    int64_t N, col0, W;
    if (!ref_pint(a, "N", &N) || !ref_pint(a, "col0", &col0) || !ref_pint(a, "W", &W) || N < 1 || col0 < 0 ||
        col0 + N > W)
        return RAD_E_ARG;
    const RadKArg *x = &a->args[0], *out = &a->args[1];
    const uint64_t M = (uint64_t)a->n;
    if (!ref_buf_ok(x, M, (uint64_t)N) || !ref_buf_ok(out, M, (uint64_t)W)) return RAD_E_SHAPE;
    RefComm *c;
    if ((rc = comm_of(a, &c))) return rc;
    if (!c) { /* one rank holds the whole row */
        if (col0 != 0 || N != W) return RAD_E_SHAPE;
        for (uint64_t i = 0; i < M; i++) memcpy(ref_frow(out, i), ref_frow(x, i), (size_t)N * sizeof(float));
        return RAD_OK;
    }
    if (x->row_stride != (uint64_t)N || out->row_stride != (uint64_t)W) return RAD_E_SHAPE;
    const uint32_t Wr = c->world, r = ((const RefState *)a->lib_state)->rank;
    atomic_store(&c->outs[r], (float *)out->data);
    atomic_store(&c->count[r], M);
    atomic_store(&c->col0[r], (uint64_t)col0);
    atomic_store(&c->cols[r], (uint64_t)N);
    atomic_store(&c->width[r], (uint64_t)W);
    if ((rc = comm_barrier(c))) return rc;
    uint64_t covered = 0;
    int bad = 0;
    for (uint32_t q = 0; q < Wr && !bad; q++) {
        const uint64_t q0 = atomic_load(&c->col0[q]), qn = atomic_load(&c->cols[q]);
        bad = atomic_load(&c->count[q]) != M || atomic_load(&c->width[q]) != (uint64_t)W;
        for (uint32_t p = 0; p < q && !bad; p++) { /* no two spans overlap */
            const uint64_t p0 = atomic_load(&c->col0[p]), pn = atomic_load(&c->cols[p]);
            bad = p0 < q0 + qn && q0 < p0 + pn;
        }
        covered += qn;
    }
    if (bad || covered != (uint64_t)W) return comm_barrier(c) ? RAD_E_IO : RAD_E_SHAPE;
    for (uint32_t q = 0; q < Wr; q++) {
        float *o = atomic_load(&c->outs[q]);
        for (uint64_t i = 0; i < M; i++)
            memcpy(o + i * (uint64_t)W + (uint64_t)col0, ref_frow(x, i), (size_t)N * sizeof(float));
    }
    return comm_barrier(c);
}
