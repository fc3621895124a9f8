/* ref_pool.h — libref's thread pool: one per init, a parallel-for the kernels call.
 *
 * ref_pool_run(p, nth, fn, ctx) runs fn(ctx, part, nth) once for each part = 0 .. nth-1 and
 * returns when all have finished. Parts are claimed from an atomic counter by the calling thread
 * and the workers alike, so a worker the OS has not scheduled yet costs nothing: the caller takes
 * its part. Workers spin for a short while after a job (decode issues hundreds of small jobs per
 * token; a condition-variable wake-up per job would cost more than the job), then sleep on a
 * condition variable. Nothing is allocated per call.
 *
 * A part may run on any thread; the kernels give every output to exactly one part, with a
 * reduction order that does not depend on the part or the thread, so results do not depend on
 * scheduling. The pool serves one caller at a time: a second caller (the core may run kernels
 * from two lanes at once) finds it busy and runs its parts itself, one after another. */
#ifndef REF_POOL_H
#define REF_POOL_H

#include <stddef.h>

typedef void (*ref_task_fn)(void *ctx, int tid, int nth);

typedef struct RefPool RefPool;

/* A pool of n_threads threads in all (the caller counts as one: n_threads - 1 workers).
 * NULL on failure (out of memory, or no thread could be started). */
RefPool *ref_pool_create(int n_threads);
void ref_pool_destroy(RefPool *p);
/* Threads in the pool, the caller included (1 for a NULL pool). */
int ref_pool_size(const RefPool *p);
/* fn(ctx, part, nth) for each part < nth, nth clamped to [1, 65535]; at most ref_pool_size(p)
 * threads take part. */
void ref_pool_run(RefPool *p, int nth, ref_task_fn fn, void *ctx);

/* Per-thread scratch: slot s (0 .. REF_SCRATCH_SLOTS-1) of the calling thread, at least `bytes`
 * long, 64-byte aligned, grown (never shrunk) on demand and kept for the thread's life. NULL when
 * out of memory. Contents are not kept across a growth. */
#define REF_SCRATCH_SLOTS 4
void *ref_scratch(int slot, size_t bytes);

#endif
