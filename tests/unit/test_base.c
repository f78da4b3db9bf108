/* Unit tests for src/base: status messages, fp16/bf16 conversions, RNG, thread pool. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/cpucount.h"
#include "base/fp16.h"
#include "base/idmap.h"
#include "base/rng.h"
#include "base/status.h"
#include "base/threadpool.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void test_status_messages(void **state) {
    (void)state;
    pl_status st = pl_fail(PL_ERR_FORMAT, "tensor '%s': bad type %d", "x", 99);
    assert_int_equal(st, PL_ERR_FORMAT);
    pl_error_prefix("model.gguf");
    assert_string_equal(pl_last_error(), "model.gguf: tensor 'x': bad type 99");
    pl_clear_error();
    assert_string_equal(pl_last_error(), "no error");
}

static void test_fp16_roundtrip(void **state) {
    (void)state;
    /* Every finite f16 value survives f16 -> f32 -> f16. */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00) continue;
        float f = pl_f16_to_f32((pl_f16)h);
        assert_int_equal(pl_f32_to_f16(f), h);
    }
    /* Every f16 widens to its value (ldexp of its fields), inf and nan to their f32 bits. */
    for (uint32_t h = 0; h < 0x10000; h++) {
        const uint32_t sign = (h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
        uint32_t want;
        if (e == 0x1f) {
            want = sign | 0x7f800000u | m << 13;
        } else {
            const float v = ldexpf((float)(e ? m + 1024 : m), e ? (int)e - 25 : -24);
            want = pl_f32_bits(v) | sign;
        }
        assert_int_equal(pl_f32_bits(pl_f16_to_f32((pl_f16)h)), want);
    }
    assert_true(pl_f16_to_f32(pl_f32_to_f16(1.0f)) == 1.0f);
    assert_true(pl_f16_to_f32(pl_f32_to_f16(65519.0f)) == 65504.0f);
    assert_int_equal(pl_f32_to_f16(65520.0f), 0x7c00); /* overflow to inf */
    /* Ties round to even: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10. */
    assert_int_equal(pl_f32_to_f16(1.0f + 0x1.0p-11f), 0x3c00);
    assert_int_equal(pl_f32_to_f16(1.0f + 3 * 0x1.0p-11f), 0x3c02);
    /* Smallest subnormal and halfway below it. */
    assert_int_equal(pl_f32_to_f16(0x1.0p-24f), 1);
    assert_int_equal(pl_f32_to_f16(0x1.0p-25f), 0);
    assert_int_equal(pl_f32_to_f16(0x1.8p-25f), 1);
}

static void test_bf16(void **state) {
    (void)state;
    assert_true(pl_bf16_to_f32(pl_f32_to_bf16(1.0f)) == 1.0f);
    assert_int_equal(pl_f32_to_bf16(1.0f + 0x1.0p-8f), 0x3f80);  /* tie to even */
    assert_int_equal(pl_f32_to_bf16(1.0f + 3 * 0x1.0p-8f), 0x3f82);
    assert_true(isnan(pl_bf16_to_f32(pl_f32_to_bf16(NAN))));
}

static void test_rng(void **state) {
    (void)state;
    pl_rng a, b;
    pl_rng_seed(&a, 42);
    pl_rng_seed(&b, 42);
    for (int i = 0; i < 100; i++) assert_true(pl_rng_next(&a) == pl_rng_next(&b));
    double sum = 0;
    int counts[10] = {0};
    for (int i = 0; i < 100000; i++) {
        double u = pl_rng_uniform(&a);
        assert_true(u >= 0 && u < 1);
        sum += u;
        counts[pl_rng_below(&a, 10)]++;
    }
    assert_true(fabs(sum / 100000 - 0.5) < 0.01);
    for (int i = 0; i < 10; i++) assert_true(counts[i] > 9000 && counts[i] < 11000);
}

typedef struct {
    atomic_int calls;
    int64_t n;
    int64_t *out;
} tp_ctx;

static void tp_job(void *p, int ith, int nth) {
    tp_ctx *c = p;
    atomic_fetch_add(&c->calls, 1);
    int64_t b, e;
    pl_split_range(c->n, ith, nth, 4, &b, &e);
    for (int64_t i = b; i < e; i++) c->out[i] += i;
}

static void test_threadpool(void **state) {
    (void)state;
    int64_t out[1001];
    for (int n = 1; n <= 3; n++) {
        pl_threadpool *tp = pl_threadpool_create(n);
        assert_non_null(tp);
        memset(out, 0, sizeof out);
        tp_ctx c = {.n = 1001, .out = out};
        for (int rep = 0; rep < 200; rep++) pl_threadpool_run(tp, tp_job, &c);
        assert_int_equal(atomic_load(&c.calls), 200 * n);
        for (int i = 0; i < 1001; i++) assert_true(out[i] == 200 * (int64_t)i);
        pl_threadpool_destroy(tp);
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Many jobs of every size, with gaps around the workers' spin time so that some jobs find the
 * workers spinning and some find them asleep: each part runs exactly once per job, with its
 * (ith, nth), and the workers did go to sleep. */
typedef struct {
    atomic_int calls[8];
    int64_t sum[8];
} parts_ctx;

static void parts_job(void *p, int ith, int nth) {
    parts_ctx *c = p;
    atomic_fetch_add(&c->calls[ith], 1);
    c->sum[ith] += 1000 * nth + ith; /* only part ith writes sum[ith] */
}

static void test_threadpool_many_jobs(void **state) {
    (void)state;
    uint64_t seed = 12345;
    for (int size = 2; size <= 4; size++) {
        pl_threadpool *tp = pl_threadpool_create(size);
        assert_non_null(tp);
        parts_ctx c;
        memset(&c, 0, sizeof c);
        int64_t want_calls[8] = {0}, want_sum[8] = {0};
        for (int round = 0; round < 3000; round++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            int n = 1 + (int)((seed >> 33) % (uint64_t)size);
            pl_threadpool_run_n(tp, n, parts_job, &c);
            for (int i = 0; i < n; i++) {
                want_calls[i]++;
                want_sum[i] += n == 1 ? 1000 : 1000 * n + i;
            }
            if (round % 64 == 0) usleep((useconds_t)((seed >> 40) % 2000)); /* 0-2 ms */
        }
        /* idle workers do go to sleep (a loaded machine may have hidden every gap above) */
        double t0 = now_s();
        while (pl_threadpool_sleeping(tp) < size - 1 && now_s() - t0 < 20.0) usleep(200);
        assert_int_equal(pl_threadpool_sleeping(tp), size - 1);
        for (int i = 0; i < 8; i++) {
            assert_int_equal(atomic_load(&c.calls[i]), want_calls[i]);
            assert_true(c.sum[i] == want_sum[i]);
        }
        int64_t worker_sleeps, caller_sleeps;
        pl_threadpool_sleep_counts(tp, &worker_sleeps, &caller_sleeps);
        assert_true(worker_sleeps > 0);
        pl_threadpool_destroy(tp);
    }
}

/* A rendezvous job: every part waits until all nth parts have started, so (the caller being
 * blocked in one of them) each worker must have woken up and claimed a part. A lost wake-up
 * leaves a worker asleep and the rendezvous times out. */
typedef struct {
    atomic_int arrived;
    atomic_int timeouts;
    pthread_t caller;
    int worker_naps_us; /* > 0: parts on a worker sleep this long after the rendezvous */
} rdv_ctx;

static void rdv_job(void *p, int ith, int nth) {
    (void)ith;
    rdv_ctx *c = p;
    atomic_fetch_add(&c->arrived, 1);
    double t0 = now_s();
    while (atomic_load(&c->arrived) < nth) {
        if (now_s() - t0 > 20.0) {
            atomic_fetch_add(&c->timeouts, 1);
            return;
        }
        sched_yield();
    }
    if (c->worker_naps_us > 0 && !pthread_equal(pthread_self(), c->caller))
        usleep((useconds_t)c->worker_naps_us);
}

static void test_threadpool_sleep_and_wake(void **state) {
    (void)state;
    for (int size = 2; size <= 3; size++) {
        pl_threadpool *tp = pl_threadpool_create(size);
        assert_non_null(tp);
        rdv_ctx c = {.caller = pthread_self()};
        /* Workers asleep for sure: wait until they all sleep, then wake them with a job. */
        for (int round = 0; round < 20; round++) {
            double t0 = now_s();
            while (pl_threadpool_sleeping(tp) < size - 1 && now_s() - t0 < 20.0) usleep(200);
            assert_int_equal(pl_threadpool_sleeping(tp), size - 1);
            atomic_store(&c.arrived, 0);
            pl_threadpool_run(tp, rdv_job, &c);
            assert_int_equal(atomic_load(&c.arrived), size);
        }
        /* Jobs published while workers are on their way to sleep (gaps around the spin time). */
        uint64_t seed = 99;
        for (int round = 0; round < 400; round++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            usleep((useconds_t)(150 + (seed >> 33) % 150));
            atomic_store(&c.arrived, 0);
            pl_threadpool_run(tp, rdv_job, &c);
            assert_int_equal(atomic_load(&c.arrived), size);
        }
        assert_int_equal(atomic_load(&c.timeouts), 0);
        /* The caller sleeps while a worker still runs its part, and is woken when it ends (on
         * a loaded machine the caller itself may be preempted for the whole nap: at least once
         * in 20 rounds, not every time). */
        int64_t w0, caller0, w1, caller1;
        pl_threadpool_sleep_counts(tp, &w0, &caller0);
        c.worker_naps_us = 5000;
        for (int round = 0; round < 20; round++) {
            atomic_store(&c.arrived, 0);
            pl_threadpool_run(tp, rdv_job, &c);
            assert_int_equal(atomic_load(&c.arrived), size);
        }
        c.worker_naps_us = 0;
        pl_threadpool_sleep_counts(tp, &w1, &caller1);
        assert_true(caller1 - caller0 >= 1);
        assert_int_equal(atomic_load(&c.timeouts), 0);
        pl_threadpool_destroy(tp);
    }
}

static void test_split_range(void **state) {
    (void)state;
    for (int64_t n = 0; n < 50; n++)
        for (int nth = 1; nth < 5; nth++) {
            int64_t next = 0;
            for (int i = 0; i < nth; i++) {
                int64_t b, e;
                pl_split_range(n, i, nth, 8, &b, &e);
                assert_true(b == next && e >= b && e <= n);
                if (e < n) assert_true(e % 8 == 0);
                next = e;
            }
            assert_true(next == n);
        }
}

/* Work stealing: every unit is claimed once, by one part, whatever the split and speeds. */
typedef struct {
    pl_steal_slot slots[PL_STEAL_MAX];
    atomic_int *claims;   /* [n] times unit u was claimed */
    atomic_int stolen;    /* units claimed outside the claiming part's initial share */
    int64_t n;
    int nap_us;           /* part 0 naps this long per claim, so the others steal from it */
} steal_ctx;

static void steal_job(void *p, int ith, int nth) {
    steal_ctx *c = p;
    int64_t own0, own1, b, e;
    pl_split_range(c->n, ith, nth, 1, &own0, &own1);
    while (pl_steal_next(c->slots, ith, nth, &b, &e)) {
        assert_true(b >= 0 && b < e && e <= c->n);
        for (int64_t u = b; u < e; u++) {
            atomic_fetch_add(&c->claims[u], 1);
            if (u < own0 || u >= own1) atomic_fetch_add(&c->stolen, 1);
        }
        if (ith == 0 && c->nap_us) usleep((useconds_t)c->nap_us);
    }
}

static void test_steal(void **state) {
    (void)state;
    const int64_t sizes[] = {0, 1, 2, 3, 7, 64, 1000};
    /* one thread alone takes its share, then every other share, in halves */
    for (int nth = 1; nth <= 4; nth++)
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
            steal_ctx c = {.n = sizes[k]};
            c.claims = calloc((size_t)c.n + 1, sizeof *c.claims);
            pl_steal_init(c.slots, nth, c.n);
            steal_job(&c, nth - 1, nth);
            for (int i = 0; i < nth; i++) { /* the others find nothing left */
                int64_t b, e;
                assert_false(pl_steal_next(c.slots, i, nth, &b, &e));
            }
            for (int64_t u = 0; u < c.n; u++) assert_int_equal(atomic_load(&c.claims[u]), 1);
            free(c.claims);
        }
    /* a pool, one part slow: the others take over part of its share */
    for (int size = 2; size <= 4; size++) {
        pl_threadpool *tp = pl_threadpool_create(size);
        assert_non_null(tp);
        int stolen = 0;
        for (int rep = 0; rep < 20; rep++)
            for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
                steal_ctx c = {.n = sizes[k], .nap_us = rep % 2 ? 200 : 0};
                c.claims = calloc((size_t)c.n + 1, sizeof *c.claims);
                pl_steal_init(c.slots, size, c.n);
                pl_threadpool_run(tp, steal_job, &c);
                for (int64_t u = 0; u < c.n; u++) assert_int_equal(atomic_load(&c.claims[u]), 1);
                if (c.nap_us) stolen += atomic_load(&c.stolen);
                free(c.claims);
            }
        assert_true(stolen > 0);
        pl_threadpool_destroy(tp);
    }
}

/* Random puts and deletes against a shadow array: every get agrees. */
static void test_idmap(void **state) {
    (void)state;
    enum { K = 3000 };
    static void *shadow[K];
    memset(shadow, 0, sizeof shadow);
    pl_idmap m;
    pl_idmap_init(&m);
    pl_rng r;
    pl_rng_seed(&r, 5);
    size_t n = 0;
    for (int op = 0; op < 200000; op++) {
        uint64_t k = 1 + pl_rng_below(&r, K - 1);
        if (pl_rng_below(&r, 3)) {
            void *v = (void *)(uintptr_t)(op + 1);
            if (!shadow[k]) n++;
            assert_int_equal(pl_idmap_put(&m, k * 0x10000 + 7, v), 0);
            shadow[k] = v;
        } else {
            void *v = pl_idmap_del(&m, k * 0x10000 + 7);
            assert_ptr_equal(v, shadow[k]);
            if (shadow[k]) n--;
            shadow[k] = NULL;
        }
        if (op % 1000 == 0)
            for (uint64_t j = 1; j < K; j++) assert_ptr_equal(pl_idmap_get(&m, j * 0x10000 + 7), shadow[j]);
        assert_int_equal(m.n, n);
    }
    pl_idmap_destroy(&m);
}

/* A file of a fake machine under root: its directories made, text written. */
static void fake_file(const char *root, const char *path, const char *text) {
    char full[1024], cmd[1200];
    snprintf(full, sizeof full, "%s%s", root, path);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", full);
    assert_int_equal(system(cmd), 0);
    FILE *f = fopen(full, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* n CPUs whose cores are given by core[i] (the core's CPUs as a cpulist) */
static void fake_topology(const char *root, int n, const char *const *core) {
    for (int i = 0; i < n; i++) {
        char path[128];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/core_cpus_list", i);
        fake_file(root, path, core[i]);
    }
}

/* The default thread count (base/cpucount.h) on fake machines: SMT siblings, a hybrid CPU, an
 * affinity mask, cgroup v2 and v1 quotas, and no sysfs at all; then this machine's. */
static void test_default_threads(void **state) {
    (void)state;
    char root[] = "/tmp/pl_cpucount_XXXXXX", why[256], cmd[128];
    assert_non_null(mkdtemp(root));
    /* no files: every allowed CPU is a core */
    assert_int_equal(pl_default_threads_at(root, "0-5", why, sizeof why), 6);
    assert_int_equal(pl_default_threads_at(root, "3,9", NULL, 0), 2);
    assert_int_equal(pl_default_threads_at(root, "garbage", NULL, 0), 1); /* at least one */
    /* 4 cores x 2 threads, siblings i and i + 4 (Intel's numbering) */
    static const char *const smt[] = {"0,4\n", "1,5\n", "2,6\n", "3,7\n", "0,4\n", "1,5\n", "2,6\n", "3,7\n"};
    fake_topology(root, 8, smt);
    assert_int_equal(pl_default_threads_at(root, "0-7", why, sizeof why), 4);
    print_message("SMT 4 x 2: %s\n", why);
    assert_int_equal(pl_default_threads_at(root, "0,4", NULL, 0), 1); /* taskset -c 0,4: one core */
    assert_int_equal(pl_default_threads_at(root, "0-3", NULL, 0), 4);
    assert_int_equal(pl_default_threads_at(root, "2,3,6", NULL, 0), 2);
    /* a hybrid CPU: P-cores 0-7 (4 x 2, siblings 2k, 2k + 1), E-cores 8-15 */
    static const char *const hyb[] = {"0-1\n", "0-1\n", "2-3\n", "2-3\n", "4-5\n", "4-5\n", "6-7\n", "6-7\n",
                                      "8\n",   "9\n",   "10\n",  "11\n",  "12\n",  "13\n",  "14\n",  "15\n"};
    fake_topology(root, 16, hyb);
    fake_file(root, "/sys/devices/cpu_core/cpus", "0-7\n");
    fake_file(root, "/sys/devices/cpu_atom/cpus", "8-15\n");
    assert_int_equal(pl_default_threads_at(root, "0-15", why, sizeof why), 4);
    assert_non_null(strstr(why, "P-cores"));
    print_message("hybrid 4 x 2 + 8: %s\n", why);
    assert_int_equal(pl_default_threads_at(root, "8-15", NULL, 0), 8);   /* only E-cores allowed */
    assert_int_equal(pl_default_threads_at(root, "1,8-11", NULL, 0), 1); /* its one P-core */
    /* cgroup v2: the smallest quota on the way up (2.5 CPUs -> 2), "max" is none */
    fake_file(root, "/proc/self/cgroup", "0::/kubepods/pod1/c1\n");
    fake_file(root, "/sys/fs/cgroup/kubepods/pod1/c1/cpu.max", "max 100000\n");
    fake_file(root, "/sys/fs/cgroup/kubepods/pod1/cpu.max", "250000 100000\n");
    fake_file(root, "/sys/fs/cgroup/kubepods/cpu.max", "800000 100000\n");
    assert_int_equal(pl_default_threads_at(root, "0-15", why, sizeof why), 2);
    assert_non_null(strstr(why, "quota"));
    print_message("cgroup v2 quota 2.5: %s\n", why);
    fake_file(root, "/sys/fs/cgroup/cpu.max", "50000 100000\n"); /* half a CPU: still one thread */
    assert_int_equal(pl_default_threads_at(root, "0-15", NULL, 0), 1);
    fake_file(root, "/sys/fs/cgroup/cpu.max", "max 100000\n");
    fake_file(root, "/sys/fs/cgroup/kubepods/pod1/cpu.max", "1600000 100000\n"); /* above the cores */
    assert_int_equal(pl_default_threads_at(root, "0-15", NULL, 0), 4);
    /* cgroup v1 (no "0::" line): cpu,cpuacct's quota */
    fake_file(root, "/proc/self/cgroup", "12:cpu,cpuacct:/docker/abc\n11:memory:/docker/abc\n");
    fake_file(root, "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "300000\n");
    fake_file(root, "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
    assert_int_equal(pl_default_threads_at(root, "8-15", NULL, 0), 3);
    fake_file(root, "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n"); /* none */
    assert_int_equal(pl_default_threads_at(root, "8-15", NULL, 0), 8);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
    /* this machine: at least one, at most the CPUs of the affinity mask */
    cpu_set_t set;
    assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
    int n = pl_default_threads(why, sizeof why);
    print_message("this machine: %s\n", why);
    assert_true(n >= 1 && n <= CPU_COUNT(&set));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_messages), cmocka_unit_test(test_fp16_roundtrip),
        cmocka_unit_test(test_bf16),            cmocka_unit_test(test_rng),
        cmocka_unit_test(test_threadpool),      cmocka_unit_test(test_split_range),
        cmocka_unit_test(test_idmap),           cmocka_unit_test(test_threadpool_many_jobs),
        cmocka_unit_test(test_threadpool_sleep_and_wake), cmocka_unit_test(test_steal),
        cmocka_unit_test(test_default_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
