/* base/threadpool — see threadpool.h.
 *
 * A job is n parts (calls fn(ctx, i, n), i < n). It is published by storing `claim` = (job
 * number << 32 | 0) and then bumping `generation` under the mutex; workers spin on the
 * generation for a short while (cheap wake-up between the many small jobs of a forward step) and
 * otherwise wait on the condition variable. Every thread, the caller included, then claims parts
 * with a compare-and-swap on `claim` until none is left, and the caller waits until `done`
 * counts n. A part is claimed once, by whoever comes first, so a worker that the OS has not
 * scheduled (a loaded machine) costs nothing: the caller runs its part. The job number in
 * `claim` keeps a late worker from claiming parts of a later job with a stale view.
 */
#include "base/threadpool.h"

#include "base/status.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

enum { SPIN_ITERS = 20000, WAIT_SPIN_ITERS = 4000 };

struct pl_threadpool {
    int n;                     /* threads including the caller */
    pthread_t *threads;        /* n - 1 workers */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint_fast64_t generation; /* bumped once per job (wakes the workers) */
    atomic_uint_fast64_t claim;      /* job number << 32 | next unclaimed part */
    atomic_int done;                 /* parts of the current job finished */
    _Atomic(pl_job_fn) fn;           /* the current job (atomic: a late worker may read them */
    _Atomic(void *) ctx;             /*  while the next job is set; its claim then fails) */
    atomic_int parts;
    uint32_t job;                    /* the caller's job counter */
    atomic_int stop;                 /* destroy: workers exit */
};

typedef struct {
    pl_threadpool *tp;
    int ith;
} worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Claim and run parts of job `job` until none is left (or a later job replaced it). */
static void run_parts(pl_threadpool *tp, uint64_t job) {
    for (;;) {
        uint_fast64_t v = atomic_load_explicit(&tp->claim, memory_order_acquire);
        if (v >> 32 != job) return;
        int parts = atomic_load_explicit(&tp->parts, memory_order_relaxed);
        int i = (int)(v & 0xffffffffu);
        if (i >= parts) return;
        if (!atomic_compare_exchange_weak_explicit(&tp->claim, &v, v + 1, memory_order_acq_rel,
                                                   memory_order_relaxed))
            continue;
        /* Part i of this job is ours: the job cannot end before it is done, so what we read now
         * is this job's. */
        pl_job_fn fn = atomic_load_explicit(&tp->fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&tp->ctx, memory_order_relaxed);
        parts = atomic_load_explicit(&tp->parts, memory_order_relaxed);
        fn(ctx, i, parts);
        atomic_fetch_add_explicit(&tp->done, 1, memory_order_release);
    }
}

static void *worker_main(void *p) {
    worker_arg *wa = p;
    pl_threadpool *tp = wa->tp;
    free(wa);
    uint_fast64_t seen = 0;
    for (;;) {
        uint_fast64_t g = atomic_load_explicit(&tp->generation, memory_order_acquire);
        for (int i = 0; g == seen && i < SPIN_ITERS; i++) {
            cpu_relax();
            g = atomic_load_explicit(&tp->generation, memory_order_acquire);
        }
        if (g == seen) {
            pthread_mutex_lock(&tp->mu);
            while ((g = atomic_load(&tp->generation)) == seen && !atomic_load(&tp->stop))
                pthread_cond_wait(&tp->cv, &tp->mu);
            pthread_mutex_unlock(&tp->mu);
        }
        if (atomic_load(&tp->stop)) return NULL;
        seen = g;
        run_parts(tp, atomic_load_explicit(&tp->claim, memory_order_acquire) >> 32);
    }
}

int pl_num_online_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

pl_threadpool *pl_threadpool_create(int n_threads) {
    if (n_threads <= 0) n_threads = pl_num_online_cores();
    if (n_threads > 512) {
        pl_fail(PL_ERR_INVALID_ARG, "threads: %d is more than the 512 supported", n_threads);
        return NULL;
    }
    pl_threadpool *tp = calloc(1, sizeof *tp);
    if (!tp) return NULL;
    tp->n = n_threads;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv, NULL);
    atomic_init(&tp->generation, 0);
    atomic_init(&tp->claim, 0);
    atomic_init(&tp->done, 0);
    atomic_init(&tp->fn, NULL);
    atomic_init(&tp->ctx, NULL);
    atomic_init(&tp->parts, 0);
    atomic_init(&tp->stop, 0);
    tp->threads = calloc((size_t)n_threads, sizeof(pthread_t));
    if (!tp->threads) { free(tp); return NULL; }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) { tp->n = i; pl_threadpool_destroy(tp); return NULL; }
        wa->tp = tp;
        wa->ith = i;
        if (pthread_create(&tp->threads[i - 1], NULL, worker_main, wa) != 0) {
            free(wa);
            tp->n = i;
            pl_threadpool_destroy(tp);
            pl_fail(PL_ERR_NOMEM, "threads: could not start worker %d", i);
            return NULL;
        }
    }
    return tp;
}

void pl_threadpool_destroy(pl_threadpool *tp) {
    if (!tp) return;
    pthread_mutex_lock(&tp->mu);
    atomic_store(&tp->stop, 1);
    atomic_fetch_add(&tp->generation, 1);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 1; i < tp->n; i++) pthread_join(tp->threads[i - 1], NULL);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->cv);
    free(tp->threads);
    free(tp);
}

int pl_threadpool_size(const pl_threadpool *tp) { return tp ? tp->n : 1; }

void pl_threadpool_run_n(pl_threadpool *tp, int n, pl_job_fn fn, void *ctx) {
    if (!tp || tp->n == 1 || n <= 1) {
        fn(ctx, 0, 1);
        return;
    }
    if (n > tp->n) n = tp->n;
    uint64_t job = ++tp->job; /* 32 bits: wraps after 4e9 jobs, long after any late worker */
    atomic_store_explicit(&tp->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&tp->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&tp->parts, n, memory_order_relaxed);
    atomic_store_explicit(&tp->done, 0, memory_order_relaxed);
    atomic_store_explicit(&tp->claim, job << 32, memory_order_release);
    pthread_mutex_lock(&tp->mu);
    atomic_fetch_add_explicit(&tp->generation, 1, memory_order_release);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
    run_parts(tp, job);
    /* Every part is claimed; wait for those other threads are still running. Yield now and then:
     * if one was preempted (the machine is oversubscribed) spinning would only keep it off the
     * core it needs. */
    for (int i = 0; atomic_load_explicit(&tp->done, memory_order_acquire) < n; i++) {
        if (i < WAIT_SPIN_ITERS) cpu_relax();
        else sched_yield();
    }
}

void pl_threadpool_run(pl_threadpool *tp, pl_job_fn fn, void *ctx) {
    pl_threadpool_run_n(tp, tp ? tp->n : 1, fn, ctx);
}
