/* base/threadpool — see threadpool.h.
 *
 * A job is n parts (calls fn(ctx, i, n), i < n). It is published by storing `claim` = (job
 * number << 32 | n << 16 | 0) and then bumping the 32-bit `generation`. Every thread, the caller included,
 * then claims parts with a compare-and-swap on `claim` until none is left, and the caller waits
 * until `done` counts n. A part is claimed once, by whoever comes first, so a worker that the OS
 * has not scheduled (a loaded machine) costs nothing: the caller runs its part. The job number in
 * `claim` keeps a late worker from claiming parts of a later job with a stale view, and n is in
 * the same word so that a part index is always checked against its own job's count.
 *
 * Waiting degrades gracefully: both waits (a worker for the next job, the caller for the parts
 * other threads still run) spin for a bounded time (cheap between the many small jobs of a
 * forward step) and then sleep on a futex, so a pool that shares its cores with another busy
 * process gives the cores back instead of burning the time slices its own threads need (and an
 * idle core lets the scheduler move a preempted worker there).
 *
 * No lost wake-up (the Dekker pattern on sequentially consistent atomics): a worker going to
 * sleep increments `sleepers` and then re-reads `generation`; the caller bumps `generation` and
 * then reads `sleepers`, issuing FUTEX_WAKE only when someone sleeps. One of the two sees the
 * other's write, and FUTEX_WAIT itself sleeps only while the word still holds the value the
 * worker saw. The caller's wait for `done` is the mirror image with `caller_sleeping`: the thread
 * that finishes the last part wakes it. Every wait re-checks its condition in a loop, so a
 * spurious or late wake-up only costs a re-check.
 */
#include "base/threadpool.h"

#include "base/cpucount.h"

#include "base/status.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

/* How long a waiting thread spins before it sleeps: a worker waiting for the next job, and the
 * caller waiting for the parts that other threads still run. A worker's spin is short because
 * a spinning worker on a core shared with another busy process burns the time slice its next
 * part needs, while a sleeper is woken with priority: with a busy loop on one core, decode B=1
 * ran 52 tokens/s at 200 us, 62 at 20 us and 72 at 5 us, and no slower on a quiet machine at
 * 20 us (docs/BENCHMARKS.md, the contention table); the gaps between a decode step's jobs are
 * ~4 us. */
enum { WORKER_SPIN_NS = 20000, CALLER_SPIN_NS = 50000 };

/* A pause between a worker's read of the generation and its read of the stop flag, so that a
 * destroy can land between the two: only tests/unit/test_threadpool_destroy.c, which compiles
 * this file itself, defines it; elsewhere it is nothing. */
#ifndef PL_THREADPOOL_TEST_GAP
#define PL_THREADPOOL_TEST_GAP() ((void)0)
#endif

struct pl_threadpool {
    int n;                     /* threads including the caller */
    pthread_t *threads;        /* n - 1 workers */
    atomic_uint generation;    /* bumped once per job (the workers' futex word) */
    atomic_uint_fast64_t claim; /* job number << 32 | parts << 16 | next unclaimed part */
    atomic_int done;           /* parts of the current job finished (the caller's futex word) */
    _Atomic(pl_job_fn) fn;     /* the current job (atomic: a late worker may read them */
    _Atomic(void *) ctx;       /*  while the next job is set; its claim then fails) */
    uint32_t job;              /* the caller's job counter */
    atomic_int stop;           /* destroy: workers exit */
    atomic_int sleepers;       /* workers asleep (or about to be) on `generation` */
    atomic_int caller_sleeping; /* the caller is asleep (or about to be) on `done` */
    atomic_llong worker_sleeps, caller_sleeps; /* statistics (tests, benchmarks) */
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

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* FUTEX_SLEEP: sleep while *word == val (returns at once if it differs, may return spuriously);
 * FUTEX_WAKEUP: wake up to val sleepers. Elsewhere than Linux a sleep is a short nap. */
enum { FUTEX_SLEEP, FUTEX_WAKEUP };
static void futex(void *word, int op, unsigned val) {
#if defined(__linux__)
    syscall(SYS_futex, word, op == FUTEX_SLEEP ? FUTEX_WAIT_PRIVATE : FUTEX_WAKE_PRIVATE, val,
            NULL, NULL, 0);
#else
    (void)word;
    (void)val;
    if (op == FUTEX_SLEEP) nanosleep(&(struct timespec){0, 50000}, NULL);
#endif
}

static void futex_wait(void *word, unsigned expected) { futex(word, FUTEX_SLEEP, expected); }
static void futex_wake(void *word, int n) { futex(word, FUTEX_WAKEUP, (unsigned)n); }

/* Spin until `*word != value` or `spin_ns` have passed (checking the clock now and then);
 * returns whether the word changed. */
static int spin_while_equal(atomic_uint *word, unsigned value, int64_t spin_ns) {
    int64_t deadline = 0;
    for (int i = 1;; i++) {
        if (atomic_load_explicit(word, memory_order_acquire) != value) return 1;
        cpu_relax();
        if ((i & 63) == 0) {
            int64_t t = now_ns();
            if (!deadline) deadline = t + spin_ns;
            else if (t >= deadline) return 0;
        }
    }
}

/* Claim and run parts of job `job` until none is left (or a later job replaced it). */
static void run_parts(pl_threadpool *tp, uint64_t job) {
    for (;;) {
        uint_fast64_t v = atomic_load_explicit(&tp->claim, memory_order_acquire);
        if (v >> 32 != job) return;
        /* the part count travels in the claim word: read separately, a late worker could pair
         * job J's claim with the next job's count and run a part J does not have */
        int parts = (int)((v >> 16) & 0xffffu);
        int i = (int)(v & 0xffffu);
        if (i >= parts) return;
        if (!atomic_compare_exchange_weak_explicit(&tp->claim, &v, v + 1, memory_order_acq_rel,
                                                   memory_order_relaxed))
            continue;
        /* Part i of this job is ours: the job cannot end before it is done, so what we read now
         * is this job's. */
        pl_job_fn fn = atomic_load_explicit(&tp->fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&tp->ctx, memory_order_relaxed);
        fn(ctx, i, parts);
        /* seq_cst: the increment must be visible before caller_sleeping is read (see top). */
        if (atomic_fetch_add(&tp->done, 1) + 1 == parts && atomic_load(&tp->caller_sleeping))
            futex_wake(&tp->done, 1);
    }
}

static void *worker_main(void *p) {
    worker_arg *wa = p;
    pl_threadpool *tp = wa->tp;
    free(wa);
    unsigned seen = 0;
    for (;;) {
        if (!spin_while_equal(&tp->generation, seen, WORKER_SPIN_NS)) {
            atomic_fetch_add(&tp->sleepers, 1);
            atomic_fetch_add_explicit(&tp->worker_sleeps, 1, memory_order_relaxed);
            while (atomic_load(&tp->generation) == seen) futex_wait(&tp->generation, seen);
            atomic_fetch_sub(&tp->sleepers, 1);
        }
        /* the generation first, then stop: read the other way round, a destroy landing between
         * the two (stop = 1, generation + 1, wake) left `seen` equal to the final generation, and
         * the worker slept through its only wake-up (pl_threadpool_destroy hung in the join) */
        seen = atomic_load_explicit(&tp->generation, memory_order_acquire);
        PL_THREADPOOL_TEST_GAP();
        if (atomic_load(&tp->stop)) return NULL;
        run_parts(tp, atomic_load_explicit(&tp->claim, memory_order_acquire) >> 32);
    }
}

pl_threadpool *pl_threadpool_create(int n_threads) {
    if (n_threads <= 0) n_threads = pl_default_threads(NULL, 0);
    if (n_threads > 512) {
        pl_fail(PL_ERR_INVALID_ARG, "threads: %d is more than the 512 supported", n_threads);
        return NULL;
    }
    pl_threadpool *tp = calloc(1, sizeof *tp);
    if (!tp) return NULL;
    tp->n = n_threads;
    atomic_init(&tp->generation, 0);
    atomic_init(&tp->claim, 0);
    atomic_init(&tp->done, 0);
    atomic_init(&tp->fn, NULL);
    atomic_init(&tp->ctx, NULL);
    atomic_init(&tp->stop, 0);
    atomic_init(&tp->sleepers, 0);
    atomic_init(&tp->caller_sleeping, 0);
    atomic_init(&tp->worker_sleeps, 0);
    atomic_init(&tp->caller_sleeps, 0);
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
    atomic_store(&tp->stop, 1);
    atomic_fetch_add(&tp->generation, 1);
    futex_wake(&tp->generation, INT_MAX);
    for (int i = 1; i < tp->n; i++) pthread_join(tp->threads[i - 1], NULL);
    free(tp->threads);
    free(tp);
}

int pl_threadpool_size(const pl_threadpool *tp) { return tp ? tp->n : 1; }

void pl_threadpool_sleep_counts(const pl_threadpool *tp, int64_t *worker, int64_t *caller) {
    *worker = tp ? atomic_load_explicit(&tp->worker_sleeps, memory_order_relaxed) : 0;
    *caller = tp ? atomic_load_explicit(&tp->caller_sleeps, memory_order_relaxed) : 0;
}

int pl_threadpool_sleeping(const pl_threadpool *tp) { return tp ? atomic_load(&tp->sleepers) : 0; }

/* The caller waits until the n parts are done: spin, then sleep on `done`. */
static void wait_done(pl_threadpool *tp, int n) {
    int64_t deadline = 0;
    for (int i = 1; atomic_load_explicit(&tp->done, memory_order_acquire) < n; i++) {
        cpu_relax();
        if ((i & 63) != 0) continue;
        int64_t t = now_ns();
        if (!deadline) {
            deadline = t + CALLER_SPIN_NS;
            continue;
        }
        if (t < deadline) continue;
        atomic_store(&tp->caller_sleeping, 1);
        atomic_fetch_add_explicit(&tp->caller_sleeps, 1, memory_order_relaxed);
        int d;
        while ((d = atomic_load(&tp->done)) < n) futex_wait(&tp->done, (unsigned)d);
        atomic_store(&tp->caller_sleeping, 0);
        break;
    }
}

void pl_threadpool_run_n(pl_threadpool *tp, int n, pl_job_fn fn, void *ctx) {
    if (!tp || tp->n == 1 || n <= 1) {
        fn(ctx, 0, 1);
        return;
    }
    if (n > tp->n) n = tp->n;
    uint64_t job = ++tp->job; /* 32 bits: wraps after 4e9 jobs, long after any late worker */
    atomic_store_explicit(&tp->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&tp->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&tp->done, 0, memory_order_relaxed);
    atomic_store_explicit(&tp->claim, job << 32 | (uint64_t)n << 16, memory_order_release);
    /* seq_cst: the bump must be visible before `sleepers` is read (see top). */
    atomic_fetch_add(&tp->generation, 1);
    if (atomic_load(&tp->sleepers) > 0) futex_wake(&tp->generation, n - 1);
    run_parts(tp, job);
    wait_done(tp, n);
}

void pl_steal_init(pl_steal_slot *s, int nth, int64_t n) {
    PL_ASSERT(nth >= 1 && nth <= PL_STEAL_MAX && n >= 0 && n < ((int64_t)1 << 31));
    for (int i = 0; i < nth; i++) {
        int64_t b, e;
        pl_split_range(n, i, nth, 1, &b, &e);
        atomic_init(&s[i].range, (uint64_t)b << 32 | (uint64_t)e);
    }
}

int pl_steal_next(pl_steal_slot *s, int ith, int nth, int64_t *begin, int64_t *end) {
    for (;;) {
        /* the front of our own share: an eighth of what is left (at least one unit), so the
         * claims are few while the last ones are small enough to leave little to wait for */
        uint64_t v = atomic_load_explicit(&s[ith].range, memory_order_relaxed);
        while ((uint32_t)(v >> 32) < (uint32_t)v) {
            uint32_t f = (uint32_t)(v >> 32), e = (uint32_t)v, k = (e - f) / 8 ? (e - f) / 8 : 1;
            if (atomic_compare_exchange_weak_explicit(&s[ith].range, &v,
                                                      (uint64_t)(f + k) << 32 | e,
                                                      memory_order_relaxed, memory_order_relaxed)) {
                *begin = f;
                *end = f + k;
                return 1;
            }
        }
        /* ours is done: the back half of the fullest other share becomes ours */
        int victim = -1;
        uint32_t most = 0;
        for (int i = 0; i < nth; i++) {
            uint64_t w = atomic_load_explicit(&s[i].range, memory_order_relaxed);
            uint32_t left = (uint32_t)w - (uint32_t)(w >> 32);
            if (i != ith && (uint32_t)(w >> 32) < (uint32_t)w && left > most) {
                most = left;
                victim = i;
            }
        }
        if (victim < 0) return 0;
        uint64_t w = atomic_load_explicit(&s[victim].range, memory_order_relaxed);
        uint32_t f = (uint32_t)(w >> 32), e = (uint32_t)w;
        if (f >= e) continue;
        uint32_t mid = e - ((e - f + 1) / 2);
        if (!atomic_compare_exchange_strong_explicit(&s[victim].range, &w, (uint64_t)f << 32 | mid,
                                                     memory_order_relaxed, memory_order_relaxed))
            continue;
        /* only we change an empty share of ours, so a plain store cannot lose a claim */
        atomic_store_explicit(&s[ith].range, (uint64_t)mid << 32 | e, memory_order_relaxed);
    }
}

void pl_threadpool_run(pl_threadpool *tp, pl_job_fn fn, void *ctx) {
    pl_threadpool_run_n(tp, tp ? tp->n : 1, fn, ctx);
}
