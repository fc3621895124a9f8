/* ref_pool.c — see ref_pool.h. */
#include "ref_pool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if (defined(__x86_64__) || defined(__i386__)) && !defined(REF_NO_SIMD)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

typedef struct RefWorker {
    struct RefPool *p;
    int tid;
} RefWorker;

struct RefPool {
    int n;                  /* threads in all, the caller included */
    int oversubscribed;     /* more threads than online CPUs: yield while spinning */
    long spin_ns;           /* how long an idle worker spins before it sleeps */
    long yield_ns;          /* after this long spinning idle, yield between looks */
    int n_started;          /* workers actually running */
    pthread_t *th;
    RefWorker *w;
    /* the job: fn and ctx are written by the caller before it publishes gen, and read only by
     * the job's participants (which the caller waits for, so they cannot change under them) */
    ref_task_fn fn;
    void *ctx;
    _Atomic uint64_t gen;   /* (job counter << 16) | nth: a new job */
    _Atomic uint64_t claim; /* (job counter << 32) | next unclaimed part */
    _Atomic int done;       /* parts of the current job finished */
    _Atomic int busy;       /* a caller owns the pool */
    _Atomic int n_sleep;    /* workers asleep on cv */
    _Atomic int quit;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* Claims and runs parts of job `counter` until none is left (or the job is another one). */
static void run_parts(RefPool *p, uint64_t counter, int nth) {
    const uint64_t tag = (counter & 0xffffffffu) << 32;
    for (;;) {
        uint64_t v = atomic_load(&p->claim);
        if ((v & ~(uint64_t)0xffffffffu) != tag || (int)(v & 0xffffffffu) >= nth) return;
        if (!atomic_compare_exchange_weak(&p->claim, &v, v + 1)) continue;
        p->fn(p->ctx, (int)(v & 0xffffffffu), nth);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
    }
}

static void *worker_main(void *arg) {
    RefWorker *w = arg;
    RefPool *p = w->p;
    uint64_t seen = 0;
    for (;;) {
        uint64_t g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g == seen) {
            long t0 = now_ns();
            int yielding = 0;
            for (unsigned i = 1;; i++) {
                cpu_relax();
                g = atomic_load_explicit(&p->gen, memory_order_acquire);
                if (g != seen) break;
                if ((i & 15) == 0 && (p->oversubscribed || yielding)) sched_yield();
                if ((i & 255) == 0) {
                    const long dt = now_ns() - t0;
                    if (dt > p->spin_ns) break;
                    /* a long wait means the caller is not running: on a shared core this
                     * thread's spinning would only delay it */
                    yielding = dt > p->yield_ns;
                }
            }
            if (g == seen) { /* sleep until the next job (Dekker with the caller on gen/n_sleep) */
                pthread_mutex_lock(&p->mu);
                atomic_fetch_add(&p->n_sleep, 1);
                while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->quit)) pthread_cond_wait(&p->cv, &p->mu);
                atomic_fetch_sub(&p->n_sleep, 1);
                pthread_mutex_unlock(&p->mu);
            }
        }
        if (atomic_load(&p->quit)) break;
        seen = g;
        run_parts(p, g >> 16, (int)(g & 0xffff));
    }
    return NULL;
}

RefPool *ref_pool_create(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    if (n_threads > 4096) n_threads = 4096;
    RefPool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n_threads;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    p->oversubscribed = ncpu > 0 && n_threads > ncpu;
    p->spin_ns = 1000000L; /* 1 ms */
    p->yield_ns = 50000L;  /* decode's gaps between jobs are a few µs to a few tens */
    const char *s = getenv("RAD_REF_SPIN_US");
    if (s && *s) {
        long us = strtol(s, NULL, 10);
        if (us >= 0 && us < 10000000L) p->spin_ns = us * 1000L;
    }
    atomic_init(&p->gen, 0);
    atomic_init(&p->claim, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->busy, 0);
    atomic_init(&p->n_sleep, 0);
    atomic_init(&p->quit, 0);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (n_threads > 1) {
        p->th = calloc((size_t)n_threads - 1, sizeof *p->th);
        p->w = calloc((size_t)n_threads - 1, sizeof *p->w);
        if (!p->th || !p->w) {
            ref_pool_destroy(p);
            return NULL;
        }
        for (int i = 0; i < n_threads - 1; i++) {
            p->w[i].p = p;
            p->w[i].tid = i + 1;
            if (pthread_create(&p->th[i], NULL, worker_main, &p->w[i]) != 0) break;
            p->n_started++;
        }
        p->n = p->n_started + 1; /* fewer threads than asked if the system refused some */
    }
    return p;
}

void ref_pool_destroy(RefPool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->quit, 1);
    atomic_fetch_add(&p->gen, (uint64_t)1 << 16);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->th[i], NULL);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->th);
    free(p->w);
    free(p);
}

int ref_pool_size(const RefPool *p) { return p ? p->n : 1; }

void ref_pool_run(RefPool *p, int nth, ref_task_fn fn, void *ctx) {
    if (nth > 65535) nth = 65535;
    if (nth < 1) nth = 1;
    if (nth == 1 || ref_pool_size(p) <= 1) {
        for (int t = 0; t < nth; t++) fn(ctx, t, nth);
        return;
    }
    if (atomic_exchange(&p->busy, 1)) { /* another caller owns the pool: run the parts here */
        for (int t = 0; t < nth; t++) fn(ctx, t, nth);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    const uint64_t counter = (atomic_load(&p->gen) >> 16) + 1;
    atomic_store(&p->done, 0);
    atomic_store(&p->claim, (counter & 0xffffffffu) << 32);
    atomic_store(&p->gen, counter << 16 | (uint64_t)nth); /* seq_cst: publishes the job, then n_sleep is read */
    if (atomic_load(&p->n_sleep) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    run_parts(p, counter, nth); /* the caller takes parts too, all of them if no worker comes */
    for (unsigned i = 1; atomic_load_explicit(&p->done, memory_order_acquire) < nth; i++) {
        cpu_relax();
        if ((i & 1023) == 0 || (p->oversubscribed && (i & 15) == 0)) sched_yield();
    }
    atomic_store_explicit(&p->busy, 0, memory_order_release);
}

/* ---- per-thread scratch ------------------------------------------------------------------- */

typedef struct ScratchSet {
    struct ScratchSet *prev, *next; /* every live set, so none is lost (and none leaks) */
    void *buf[REF_SCRATCH_SLOTS];
    size_t cap[REF_SCRATCH_SLOTS];
} ScratchSet;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_key;
static int g_key_ok;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static ScratchSet *g_sets;

static void set_free(ScratchSet *s) {
    for (int i = 0; i < REF_SCRATCH_SLOTS; i++) free(s->buf[i]);
    free(s);
}

static void set_unlink(ScratchSet *s) {
    if (s->prev) s->prev->next = s->next;
    else g_sets = s->next;
    if (s->next) s->next->prev = s->prev;
}

static void thread_exit(void *v) {
    ScratchSet *s = v;
    pthread_mutex_lock(&g_mu);
    set_unlink(s);
    pthread_mutex_unlock(&g_mu);
    set_free(s);
}

static void key_once(void) { g_key_ok = pthread_key_create(&g_key, thread_exit) == 0; }

/* At dlclose: no thread may later run a destructor that lives in this library. */
__attribute__((destructor)) static void scratch_unload(void) {
    if (!g_key_ok) return;
    pthread_key_delete(g_key);
    g_key_ok = 0;
    pthread_mutex_lock(&g_mu);
    while (g_sets) {
        ScratchSet *s = g_sets;
        set_unlink(s);
        set_free(s);
    }
    pthread_mutex_unlock(&g_mu);
}

void *ref_scratch(int slot, size_t bytes) {
    if (slot < 0 || slot >= REF_SCRATCH_SLOTS) return NULL;
    pthread_once(&g_once, key_once);
    if (!g_key_ok) return NULL;
    ScratchSet *s = pthread_getspecific(g_key);
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s) return NULL;
        if (pthread_setspecific(g_key, s) != 0) {
            free(s);
            return NULL;
        }
        pthread_mutex_lock(&g_mu);
        s->next = g_sets;
        if (g_sets) g_sets->prev = s;
        g_sets = s;
        pthread_mutex_unlock(&g_mu);
    }
    if (bytes == 0) bytes = 64;
    if (s->cap[slot] < bytes) {
        size_t cap = s->cap[slot] + s->cap[slot] / 2;
        if (cap < bytes) cap = bytes;
        cap = (cap + 4095) & ~(size_t)4095;
        void *nb = aligned_alloc(64, cap);
        if (!nb) return NULL;
        free(s->buf[slot]);
        s->buf[slot] = nb;
        s->cap[slot] = cap;
    }
    return s->buf[slot];
}
