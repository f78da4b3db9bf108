/* engine/kv_view on its own, its time driven by a fake clock given at init: nothing is copied
 * while nobody watches; a watched step publishes at most once per min_interval_ms unless a reader
 * found the picture stale and old; min_interval_ms 0 publishes every watched step; the watch
 * ends PL_KV_VIEW_WANT_MS after the last ask; the idle engine publishes a stale (or table-less,
 * when tables are wanted) picture; and every published picture equals the pool it was taken of. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "engine/kv_view.h"
#include "kv/manager.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    long long now;     /* the fake monotonic clock, ms */
    pl_kv_cache *cache;
    pl_kv_manager *m;
    pl_scheduler s;    /* empty: the tables come from the manager's tables only */
    pl_kv_view v;
    pl_block_table t[8];
    int n_t;
} world;

static long long fake_now(void *ctx) {
    return ((world *)ctx)->now;
}

static void world_init(world *w, int min_interval_ms) {
    memset(w, 0, sizeof *w);
    w->now = 1000;
    pl_kv_manager_config mc = {4, 16, 4, 16, 0.0, 1, 1, PL_KV_POLICY_PAGED, 0, 0, 0, 1};
    assert_int_equal(pl_kv_cache_create_blocks(&mc, &w->cache), PL_OK);
    w->m = pl_kv_cache_manager(w->cache);
    pl_scheduler_config sc = {4, 64, 64, PL_PREEMPT_RECOMPUTE, {0}};
    assert_int_equal(pl_scheduler_init(&w->s, &sc, w->cache), PL_OK);
    pl_kv_view_config vc = {min_interval_ms, fake_now, w};
    assert_int_equal(pl_kv_view_init(&w->v, w->cache, &vc), PL_OK);
}

static void world_free(world *w) {
    for (int i = 0; i < w->n_t; i++) pl_kv_free_table(w->m, &w->t[i]);
    pl_kv_view_destroy(&w->v);
    pl_scheduler_destroy(&w->s);
    pl_kv_cache_destroy(w->cache);
}

/* The pool changes: one more table of n tokens (distinct ones, no prefix hit). */
static void grow(world *w, int32_t n) {
    int32_t tok[16];
    assert_true(n <= 16 && w->n_t < 8);
    for (int32_t i = 0; i < n; i++) tok[i] = 1000 * (w->n_t + 1) + i;
    assert_int_equal(pl_kv_allocate_prompt(w->m, &w->t[w->n_t++], tok, n, 0, NULL), PL_OK);
}

static void step(world *w, uint64_t n) {
    pl_kv_view_after_step(&w->v, w->cache, &w->s, n);
}

/* The front picture: its version, and whether its states equal the pool's right now. */
static uint64_t front(world *w, int *matches, int *tables) {
    pl_kv_snapshot k;
    assert_int_equal(pl_kv_view_read(&w->v, 0, 0, 0, &k), PL_OK);
    int32_t n = pl_kv_pool_blocks(w->m);
    assert_int_equal(k.n_blocks, n);
    assert_int_equal(k.n_swap_blocks, 4);
    uint8_t *st = malloc((size_t)n + 4);
    pl_kv_block_states(w->m, st, st + n);
    *matches = !memcmp(st, k.states, (size_t)n + 4);
    if (tables) *tables = k.has_tables;
    free(st);
    uint64_t v = k.version;
    pl_kv_snapshot_destroy(&k);
    return v;
}

static void test_unwatched_copies_nothing(void **state) {
    (void)state;
    world w;
    world_init(&w, PL_KV_VIEW_MIN_INTERVAL_MS);
    int ok;
    for (int i = 0; i < 3; i++) {
        grow(&w, 5);
        w.now += 1000;
        step(&w, (uint64_t)i + 1);
        pl_kv_view_idle(&w.v, w.cache, &w.s, (uint64_t)i + 1, 1); /* even forced */
        assert_true(atomic_load(&w.v.stale));
        assert_int_equal(front(&w, &ok, NULL), 0);
        assert_int_equal(w.v.version, 0);
    }
    world_free(&w);
}

static void test_rate_limited_while_watched(void **state) {
    (void)state;
    world w;
    world_init(&w, PL_KV_VIEW_MIN_INTERVAL_MS);
    uint64_t seen;
    int ok, tables;
    /* The first ask: no picture yet, so the reader waits and the next step publishes. */
    assert_int_equal(pl_kv_view_want(&w.v, 0, &seen), 1);
    assert_int_equal(seen, 0);
    grow(&w, 5);
    step(&w, 1);
    assert_int_equal(front(&w, &ok, &tables), 1);
    assert_true(ok);
    assert_false(tables);
    assert_false(atomic_load(&w.v.stale));
    /* Within min_interval_ms of it: the step marks the picture stale and copies nothing. */
    grow(&w, 3);
    w.now += PL_KV_VIEW_MIN_INTERVAL_MS - 1;
    step(&w, 2);
    assert_int_equal(front(&w, &ok, NULL), 1);
    assert_false(ok);
    assert_true(atomic_load(&w.v.stale));
    /* A reader finds it stale but younger than PL_KV_VIEW_FRESH_MS: fresh enough, no wait. */
    assert_int_equal(pl_kv_view_want(&w.v, 0, &seen), 0);
    assert_false(atomic_load(&w.v.reader_waits));
    /* min_interval_ms after the last publication the next step publishes. */
    w.now += 1;
    step(&w, 3);
    assert_int_equal(front(&w, &ok, NULL), 2);
    assert_true(ok);
    /* Tables asked for: the next publication carries them. */
    assert_int_equal(pl_kv_view_want(&w.v, 1, &seen), 1);
    assert_int_equal(seen, 2);
    step(&w, 4);
    assert_int_equal(front(&w, &ok, &tables), 3);
    assert_true(tables);
    /* The watch ends PL_KV_VIEW_WANT_MS after the last ask: steps mark stale again. */
    grow(&w, 2);
    w.now += PL_KV_VIEW_WANT_MS;
    step(&w, 5);
    assert_int_equal(front(&w, &ok, NULL), 3);
    assert_true(atomic_load(&w.v.stale));
    assert_int_equal(w.v.version, 3);
    world_free(&w);
}

static void test_reader_waits_beats_the_interval(void **state) {
    (void)state;
    world w;
    world_init(&w, 1000000);
    uint64_t seen;
    int ok;
    assert_int_equal(pl_kv_view_want(&w.v, 0, &seen), 1);
    step(&w, 1); /* the first picture (a reader waits for it) */
    assert_int_equal(front(&w, &ok, NULL), 1);
    grow(&w, 5);
    w.now += 10;
    step(&w, 2); /* rate limited */
    assert_int_equal(front(&w, &ok, NULL), 1);
    assert_true(atomic_load(&w.v.stale));
    /* The front picture is stale and old: the reader asks, the next step publishes. */
    w.now += PL_KV_VIEW_FRESH_MS;
    assert_int_equal(pl_kv_view_want(&w.v, 0, &seen), 1);
    assert_int_equal(seen, 1);
    step(&w, 3);
    assert_int_equal(front(&w, &ok, NULL), 2);
    assert_true(ok);
    assert_false(atomic_load(&w.v.reader_waits));
    /* ... once: the step after is rate limited again. */
    grow(&w, 2);
    w.now += 10;
    step(&w, 4);
    assert_int_equal(front(&w, &ok, NULL), 2);
    assert_false(ok);
    /* A reader waiting with a timeout and no publication gets the latest picture. */
    pl_kv_snapshot k;
    assert_int_equal(pl_kv_view_read(&w.v, 1, 2, 5, &k), PL_OK);
    assert_int_equal(k.version, 2);
    pl_kv_snapshot_destroy(&k);
    world_free(&w);
}

static void test_every_step_without_interval(void **state) {
    (void)state;
    world w;
    world_init(&w, 0);
    uint64_t seen;
    int ok;
    assert_int_equal(pl_kv_view_want(&w.v, 0, &seen), 1);
    for (uint64_t i = 1; i <= 5; i++) { /* the clock does not move: still every step */
        grow(&w, (int32_t)i);
        step(&w, i);
        assert_int_equal(front(&w, &ok, NULL), i);
        assert_true(ok);
    }
    pl_kv_snapshot k;
    assert_int_equal(pl_kv_view_read(&w.v, 0, 0, 0, &k), PL_OK);
    assert_int_equal(k.steps, 5);
    pl_kv_snapshot_destroy(&k);
    world_free(&w);
}

static void test_idle_publishes_stale_or_tableless(void **state) {
    (void)state;
    world w;
    world_init(&w, PL_KV_VIEW_MIN_INTERVAL_MS);
    uint64_t seen;
    int ok, tables;
    grow(&w, 5);
    pl_kv_view_want(&w.v, 0, &seen);
    pl_kv_view_idle(&w.v, w.cache, &w.s, 0, 0); /* watched, no picture yet (stale) */
    assert_int_equal(front(&w, &ok, &tables), 1);
    assert_true(ok);
    assert_false(tables);
    pl_kv_view_idle(&w.v, w.cache, &w.s, 0, 0); /* not stale: nothing */
    assert_int_equal(front(&w, &ok, NULL), 1);
    pl_kv_view_idle(&w.v, w.cache, &w.s, 0, 1); /* forced */
    assert_int_equal(front(&w, &ok, NULL), 2);
    grow(&w, 3);
    w.now += 1;
    step(&w, 1); /* rate limited: stale */
    assert_int_equal(front(&w, &ok, NULL), 2);
    pl_kv_view_idle(&w.v, w.cache, &w.s, 1, 0);
    assert_int_equal(front(&w, &ok, NULL), 3);
    assert_true(ok);
    pl_kv_view_want(&w.v, 1, &seen); /* tables wanted, the front picture has none */
    pl_kv_view_idle(&w.v, w.cache, &w.s, 1, 0);
    assert_int_equal(front(&w, &ok, &tables), 4);
    assert_true(tables);
    w.now += PL_KV_VIEW_WANT_MS; /* nobody watches any more: idle copies nothing */
    pl_kv_view_idle(&w.v, w.cache, &w.s, 1, 1);
    assert_int_equal(front(&w, &ok, NULL), 4);
    pl_engine_stats st;
    memset(&st, 0, sizeof st);
    pl_kv_view_stats(&w.v, &st);
    assert_int_equal(st.kv_pictures, 4);
    world_free(&w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unwatched_copies_nothing),
        cmocka_unit_test(test_rate_limited_while_watched),
        cmocka_unit_test(test_reader_waits_beats_the_interval),
        cmocka_unit_test(test_every_step_without_interval),
        cmocka_unit_test(test_idle_publishes_stale_or_tableless),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
