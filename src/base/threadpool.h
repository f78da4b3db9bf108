/* base/threadpool — a persistent pool of worker threads for data-parallel kernels.
 *
 * pl_threadpool_run(tp, fn, ctx) calls fn(ctx, ith, nth) once for each part ith < nth (nth = the
 * pool's size) and returns when all have finished. The parts are claimed by whichever thread
 * comes first (the caller included), so part ith need not run on thread ith and a worker the OS
 * has not scheduled delays nothing: a part must depend only on (ctx, ith, nth), never on the
 * calling thread. Workers are created once, spin briefly (~20 us) for the next job and then
 * sleep on a futex, so a run costs a few microseconds and no thread is created per step. The
 * caller, once every part is claimed, spins briefly (~50 us) for the parts other threads still
 * run and then sleeps too, so a pool sharing its cores with other busy processes degrades
 * gracefully instead of spinning away the time slices its own threads need. No wake-up is lost
 * (threadpool.c says why). Jobs split their work by ith/nth (see pl_split_range) and write
 * disjoint outputs. A pool is driven by one thread at a time (the engine thread).
 */
#ifndef PL_BASE_THREADPOOL_H
#define PL_BASE_THREADPOOL_H

#include <stdint.h>

typedef struct pl_threadpool pl_threadpool;
typedef void (*pl_job_fn)(void *ctx, int ith, int nth);

/* n_threads <= 0 means pl_default_threads() (base/cpucount.h: one per physical core this process
 * may use). Returns NULL on failure (message set). */
pl_threadpool *pl_threadpool_create(int n_threads);
void pl_threadpool_destroy(pl_threadpool *tp);
int pl_threadpool_size(const pl_threadpool *tp);
/* Run fn on every thread of the pool; tp may be NULL (runs fn(ctx, 0, 1) inline). */
void pl_threadpool_run(pl_threadpool *tp, pl_job_fn fn, void *ctx);
/* Run fn as n parts (1 <= n, at most the pool's size). */
void pl_threadpool_run_n(pl_threadpool *tp, int n, pl_job_fn fn, void *ctx);
/* How often, since creation, a worker went to sleep waiting for a job and the caller went to
 * sleep waiting for parts to finish (tests, benchmarks). tp may be NULL (both 0). */
void pl_threadpool_sleep_counts(const pl_threadpool *tp, int64_t *worker, int64_t *caller);
/* Workers asleep (or about to sleep) waiting for a job right now. */
int pl_threadpool_sleeping(const pl_threadpool *tp);

/* The part [*begin, *end) of [0, n) that thread ith of nth owns, in chunks of `align` items. */
static inline void pl_split_range(int64_t n, int ith, int nth, int64_t align, int64_t *begin,
                                  int64_t *end) {
    int64_t chunks = (n + align - 1) / align;
    int64_t per = chunks / nth, extra = chunks % nth;
    int64_t c0 = ith * per + (ith < extra ? ith : extra);
    int64_t c1 = c0 + per + (ith < extra ? 1 : 0);
    *begin = c0 * align < n ? c0 * align : n;
    *end = c1 * align < n ? c1 * align : n;
}

/* Work stealing over a range of units [0, n): each of nth threads owns a contiguous share (as
 * pl_split_range gives it) and claims units from its front, a few at a time; a thread whose
 * share is done takes the back half of what is left of the fullest other share, and so on until
 * no share has units left. So parts whose threads run at unequal speed (another process, the
 * memory system) still end together, while each thread reads mostly one sequential stream.
 * Every unit is claimed exactly once. The slots are set before the job starts; nth <=
 * PL_STEAL_MAX. Part ith calls pl_steal_next(s, ith, nth, ...) until it returns 0. */
enum { PL_STEAL_MAX = 64 };
typedef struct {
    _Alignas(64) _Atomic(uint64_t) range; /* front << 32 | end, units; one cache line each */
} pl_steal_slot;
void pl_steal_init(pl_steal_slot *s, int nth, int64_t n);
/* The next units [*begin, *end) for thread ith; 0 when none is left anywhere. */
int pl_steal_next(pl_steal_slot *s, int ith, int nth, int64_t *begin, int64_t *end);

#endif
