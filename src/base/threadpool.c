/* base/threadpool — see threadpool.h.
 *
 * A job is published by bumping `generation` under the mutex; workers spin on it for a short
 * while (cheap wake-up between the many small jobs of a forward step) and otherwise wait on the
 * condition variable. Completion is counted with an atomic that the caller spins on.
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
    atomic_uint_fast64_t generation; /* bumped once per job */
    atomic_int pending;        /* workers still running the current job */
    pl_job_fn fn;
    void *ctx;
    int active;                /* threads that take part in the current job */
    int stop;
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

static void *worker_main(void *p) {
    worker_arg *wa = p;
    pl_threadpool *tp = wa->tp;
    int ith = wa->ith;
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
            while ((g = atomic_load(&tp->generation)) == seen && !tp->stop)
                pthread_cond_wait(&tp->cv, &tp->mu);
            pthread_mutex_unlock(&tp->mu);
        }
        if (tp->stop) return NULL;
        seen = g;
        if (ith < tp->active) tp->fn(tp->ctx, ith, tp->active);
        atomic_fetch_sub_explicit(&tp->pending, 1, memory_order_acq_rel);
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
    atomic_init(&tp->pending, 0);
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
    tp->stop = 1;
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
    tp->fn = fn;
    tp->ctx = ctx;
    tp->active = n;
    atomic_store(&tp->pending, tp->n - 1);
    pthread_mutex_lock(&tp->mu);
    atomic_fetch_add_explicit(&tp->generation, 1, memory_order_release);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
    fn(ctx, 0, n);
    /* spin for the stragglers, but yield now and then: if a worker was preempted (the machine
     * is oversubscribed) spinning would only keep it off the core it is waiting for */
    for (int i = 0; atomic_load_explicit(&tp->pending, memory_order_acquire) > 0; i++) {
        if (i < WAIT_SPIN_ITERS) cpu_relax();
        else sched_yield();
    }
}

void pl_threadpool_run(pl_threadpool *tp, pl_job_fn fn, void *ctx) {
    pl_threadpool_run_n(tp, tp ? tp->n : 1, fn, ctx);
}
