/* base/threadpool: every pl_threadpool_destroy returns, however it meets the workers.
 *
 * Pools are created, run and destroyed thousands of times: destroyed right after their creation
 * (workers still starting or spinning), right after one job and after a few jobs, with a random
 * pause before the destroy. A worker reads the generation and the stop flag after each wake-up;
 * read in the wrong order (stop first), a destroy that lands between the two reads makes the
 * worker take the destroy's generation as one it has seen, and it sleeps through its only
 * wake-up: the join never returns. Those two reads are adjacent, so a destroy almost never lands
 * between them by chance (6000 pools of a pure stress test never hung with the stop-first
 * order); this test compiles threadpool.c itself with PL_THREADPOOL_TEST_GAP, a pause between
 * the reads that lasts until the generation moves again (the next job, or the destroy) or 200 us,
 * so that it does: the stop-first order hung in each of 22 runs, at pool 10 to 1136. A
 * watchdog turns a hang into a failure: when no pool has been destroyed for STALL_S seconds, it
 * says which one hangs and exits non-zero. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static void test_gap(atomic_uint *generation);
#define PL_THREADPOOL_TEST_GAP() test_gap(&tp->generation)
#include "base/threadpool.c"

/* The gap: until the generation moves again (the next job, or a destroy) or GAP_NS pass. */
enum { GAP_NS = 200000 };
static void test_gap(atomic_uint *generation) {
    unsigned g = atomic_load(generation);
    for (int64_t end = now_ns() + GAP_NS; atomic_load(generation) == g && now_ns() < end;)
        sched_yield(); /* the caller may need this core to get to the destroy */
}

enum { POOLS = 2000, STALL_S = 5 };

typedef struct {
    atomic_int progress; /* pools destroyed so far */
    atomic_int finished;
    atomic_int size, jobs; /* the pool being driven (for the watchdog's report) */
} stress_state;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *watchdog(void *p) {
    stress_state *st = p;
    int last = -1;
    double since = now_s();
    while (!atomic_load(&st->finished)) {
        int now = atomic_load(&st->progress);
        if (now != last) {
            last = now;
            since = now_s();
        } else if (now_s() - since > STALL_S) {
            fprintf(stderr,
                    "test_threadpool_destroy: pool %d (%d threads, destroyed after %d jobs) is "
                    "still in pl_threadpool_destroy after %d s: a worker missed the destroy's "
                    "wake-up\n",
                    now, atomic_load(&st->size), atomic_load(&st->jobs), STALL_S);
            _exit(1);
        }
        usleep(10000);
    }
    return NULL;
}

static void count_job(void *p, int ith, int nth) {
    (void)ith;
    (void)nth;
    atomic_fetch_add((atomic_int *)p, 1);
}

static void test_create_run_destroy(void **state) {
    (void)state;
    stress_state st;
    atomic_init(&st.progress, 0);
    atomic_init(&st.finished, 0);
    atomic_init(&st.size, 0);
    atomic_init(&st.jobs, 0);
    pthread_t dog;
    assert_int_equal(pthread_create(&dog, NULL, watchdog, &st), 0);
    uint64_t seed = 777;
    for (int i = 0; i < POOLS; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        int size = 2 + (int)((seed >> 33) % 4);
        int jobs = i % 3 == 0 ? 0 : i % 3 == 1 ? 1 : 2 + (int)((seed >> 40) % 3);
        atomic_store(&st.size, size);
        atomic_store(&st.jobs, jobs);
        pl_threadpool *tp = pl_threadpool_create(size);
        assert_non_null(tp);
        atomic_int calls;
        atomic_init(&calls, 0);
        for (int j = 0; j < jobs; j++) pl_threadpool_run(tp, count_job, &calls);
        assert_int_equal(atomic_load(&calls), jobs * size);
        /* 0 to 50 us: the workers that woke for the last job reach their gap */
        for (int64_t end = now_ns() + (int64_t)((seed >> 45) % 50000); now_ns() < end;) cpu_relax();
        pl_threadpool_destroy(tp);
        atomic_fetch_add(&st.progress, 1);
    }
    atomic_store(&st.finished, 1);
    pthread_join(dog, NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_create_run_destroy)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
