/* Unit tests for the contiguous KV layouts (src/kv/reserve.c and their paths in kv/manager):
 * reservation sizes per policy, one run of consecutive blocks per table at the first fit,
 * external fragmentation, waste and reservation accounting, refusals of sharing; and through
 * the engine, that a contiguous layout produces the same greedy text as the paged one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "kv/cache.h"
#include "kv/manager.h"
#include "engine/kv_samples.h"
#include "pagellm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BS 4

static pl_kv_manager_config cfg_of(pl_kv_policy policy, int32_t blocks) {
    pl_kv_manager_config c = {
        .block_size = BS, .num_blocks = blocks, .max_blocks_per_seq = 9, .watermark = 0.0,
        .policy = policy, .max_seq_tokens = 32,
    };
    return c;
}

static void check_ok(const pl_kv_manager *m) {
    if (pl_kv_manager_check(m) != PL_OK) fail_msg("manager check: %s", pl_last_error());
}

static void test_reserve_sizes(void **state) {
    (void)state;
    pl_kv_manager m;
    pl_kv_manager_config c = cfg_of(PL_KV_POLICY_PAGED, 16);
    const pl_kv_policy pol[] = {PL_KV_POLICY_PAGED, PL_KV_POLICY_MAX, PL_KV_POLICY_POW2,
                                PL_KV_POLICY_ORACLE};
    /* n = 5 prompt tokens, final length 11: paged 5, max 32, pow2 16, oracle 11 */
    const int32_t want[] = {5, 32, 16, 11}, want_blocks[] = {2, 8, 4, 3};
    for (int i = 0; i < 4; i++) {
        c.policy = pol[i];
        assert_int_equal(pl_kv_manager_init(&m, &c), PL_OK);
        assert_int_equal(pl_kv_reserve_tokens(&m, 5, 11), want[i]);
        assert_int_equal(pl_kv_admit_blocks(&m, 5, 11), want_blocks[i]);
        /* never below the tokens already there; pow2 capped at the maximum length */
        assert_true(pl_kv_reserve_tokens(&m, 9, 3) >= 9);
        if (pol[i] == PL_KV_POLICY_POW2) {
            assert_int_equal(pl_kv_reserve_tokens(&m, 5, 17), 32);
            assert_int_equal(pl_kv_reserve_tokens(&m, 5, 33), 32);
            assert_int_equal(pl_kv_reserve_tokens(&m, 5, 16), 16);
        }
        pl_kv_manager_destroy(&m);
    }
}

static void test_refusals(void **state) {
    (void)state;
    pl_kv_manager m;
    pl_kv_manager_config c = cfg_of(PL_KV_POLICY_ORACLE, 16);
    c.enable_prefix_caching = 1;
    assert_int_equal(pl_kv_manager_init(&m, &c), PL_ERR_INVALID_ARG);
    c.enable_prefix_caching = 0;
    c.num_swap_blocks = 4;
    assert_int_equal(pl_kv_manager_init(&m, &c), PL_ERR_INVALID_ARG);
    c.num_swap_blocks = 0;
    assert_int_equal(pl_kv_manager_init(&m, &c), PL_OK);
    pl_kv_manager_destroy(&m);
    /* sharing and rollback are refused by the cache's layout table */
    pl_kv_cache *kc;
    assert_int_equal(pl_kv_cache_create_blocks(&c, &kc), PL_OK);
    int32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    pl_block_table a = {0}, b = {0}, none = {0};
    assert_int_equal(pl_kv_cache_allocate(kc, &a, &none, tok, 3, 0, 3, 6, NULL), PL_OK);
    assert_int_equal(pl_kv_cache_fork(kc, &a, &none, &b, &none), PL_ERR_INVALID_ARG);
    assert_false(b.live);
    assert_int_equal(pl_kv_cache_allocate_shared(kc, &a, 1, &b, 6), PL_ERR_INVALID_ARG);
    assert_false(b.live);
    assert_int_equal(pl_kv_cache_truncate(kc, &a, &none, 2), PL_ERR_INVALID_ARG);
    assert_int_equal(a.n_tokens, 3);
    pl_kv_cache_free(kc, &a, &none);
    pl_kv_cache_free(kc, &b, &none);
    if (pl_kv_cache_check(kc) != PL_OK) fail_msg("cache check: %s", pl_last_error());
    pl_kv_cache_destroy(kc);
}

/* Tables get consecutive block ids at the first fit; a hole too small for a request stays
 * unused although enough blocks are free in total (external fragmentation). */
static void test_first_fit_and_fragmentation(void **state) {
    (void)state;
    pl_kv_manager m;
    pl_kv_manager_config c = cfg_of(PL_KV_POLICY_ORACLE, 10);
    assert_int_equal(pl_kv_manager_init(&m, &c), PL_OK);
    int32_t tok[32];
    for (int i = 0; i < 32; i++) tok[i] = 100 + i;
    pl_block_table t[4] = {{0}};
    /* oracle: final 8 -> 2 blocks, final 12 -> 3, final 8 -> 2 */
    assert_int_equal(pl_kv_allocate_reserved(&m, &t[0], tok, 3, 8, NULL), PL_OK);
    assert_int_equal(pl_kv_allocate_reserved(&m, &t[1], tok, 5, 12, NULL), PL_OK);
    assert_int_equal(pl_kv_allocate_reserved(&m, &t[2], tok, 2, 8, NULL), PL_OK);
    const int32_t want[3][3] = {{0, 1, -1}, {2, 3, 4}, {5, 6, -1}};
    for (int k = 0; k < 3; k++) {
        assert_int_equal(t[k].n_blocks, want[k][2] < 0 ? 2 : 3);
        for (int i = 0; i < t[k].n_blocks; i++) assert_int_equal(t[k].blocks[i], want[k][i]);
    }
    check_ok(&m);
    /* Free the 2-block run at 0: free = {0,1} and {7,8,9}. A 4-block request does not fit
     * although 5 blocks are free. */
    pl_kv_free_table(&m, &t[0]);
    assert_int_equal(m.pool.n_free, 5);
    assert_int_equal(pl_kv_largest_free_run(&m), 3);
    assert_int_equal(pl_kv_first_fit(&m, 4), -1);
    assert_int_equal(pl_kv_allocate_reserved(&m, &t[3], tok, 10, 16, NULL), PL_ERR_CAPACITY);
    assert_false(t[3].live);
    /* A 2-block request takes the lowest hole. */
    assert_int_equal(pl_kv_first_fit(&m, 2), 0);
    assert_int_equal(pl_kv_allocate_reserved(&m, &t[3], tok, 4, 5, NULL), PL_OK);
    assert_int_equal(t[3].blocks[0], 0);
    assert_int_equal(t[3].blocks[1], 1);
    for (int k = 1; k < 4; k++) pl_kv_free_table(&m, &t[k]);
    assert_int_equal(m.pool.n_free, 10);
    assert_int_equal(m.reserved_future, 0);
    check_ok(&m);
    pl_kv_manager_destroy(&m);
}

/* Appends inside the reservation take no block; waste = 1 - tokens / reserved slots, and the
 * reservation for future tokens shrinks as they arrive. */
static void test_waste_accounting(void **state) {
    (void)state;
    pl_kv_manager m;
    pl_kv_manager_config c = cfg_of(PL_KV_POLICY_POW2, 16);
    assert_int_equal(pl_kv_manager_init(&m, &c), PL_OK);
    int32_t tok[16] = {0};
    pl_block_table t = {0};
    /* 3 prompt tokens, final 9 -> pow2 16 tokens = 4 blocks; 6 slots for future tokens */
    assert_int_equal(pl_kv_allocate_reserved(&m, &t, tok, 3, 9, NULL), PL_OK);
    pl_kv_stats s;
    pl_kv_get_stats(&m, &s);
    assert_int_equal(s.blocks_used, 4);
    assert_int_equal(s.tokens_stored, 3);
    assert_int_equal(s.reserved_future, 6);
    assert_true(s.waste > 1.0 - 3.0 / 16 - 1e-9 && s.waste < 1.0 - 3.0 / 16 + 1e-9);
    check_ok(&m);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(pl_kv_append_blocks_needed(&m, &t, 1), 0);
        pl_block_copy cow;
        assert_int_equal(pl_kv_append_slots(&m, &t, 1, &cow), PL_OK);
        assert_int_equal(cow.src, -1);
        check_ok(&m);
    }
    pl_kv_get_stats(&m, &s);
    assert_int_equal(s.blocks_used, 4);
    assert_int_equal(s.tokens_stored, 9);
    assert_int_equal(s.reserved_future, 0);
    assert_int_equal(t.n_blocks, 4);
    /* Past the final length (not expected, but allowed): still inside the run, then beyond it. */
    pl_block_copy cow;
    assert_int_equal(pl_kv_append_slots(&m, &t, 7, &cow), PL_OK);
    assert_int_equal(t.n_blocks, 4);
    assert_int_equal(pl_kv_append_blocks_needed(&m, &t, 1), 1);
    assert_int_equal(pl_kv_append_slots(&m, &t, 1, &cow), PL_OK);
    assert_int_equal(t.n_blocks, 5);
    check_ok(&m);
    pl_kv_free_table(&m, &t);
    pl_kv_get_stats(&m, &s);
    assert_int_equal(s.blocks_used, 0);
    assert_int_equal(s.tokens_stored, 0);
    check_ok(&m);
    pl_kv_manager_destroy(&m);
}

/* Through the engine: greedy text is the same in every layout; sharing requests are refused. */
static char *run_text(pl_kv_layout_mode layout, pl_reserve_policy res) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = PL_SHARED_DIR "/models/stories260K.gguf";
    c.kv_cache_memory = 4u << 20;
    c.threads = 1;
    c.kv_layout = layout;
    c.reserve = res;
    c.max_model_len = 256;
    pl_engine *e;
    if (pl_engine_create(&c, &e) != PL_OK) fail_msg("create: %s", pl_last_error());
    pl_request_params p;
    pl_request_params_default(&p);
    p.max_tokens = 40;
    p.sampling.temperature = 0;
    uint64_t ids[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(pl_engine_add_request(e, i == 1 ? "Tom had a dog" : "Once upon a time",
                                               NULL, 0, &p, &ids[i]), PL_OK);
    if (layout == PL_KV_LAYOUT_CONTIGUOUS) {
        pl_request_params q = p;
        q.n = 2;
        uint64_t bad;
        assert_int_equal(pl_engine_add_request(e, "x", NULL, 0, &q, &bad), PL_ERR_INVALID_ARG);
    }
    assert_int_equal(pl_engine_run(e), PL_OK);
    pl_engine_kv_samples st;
    pl_engine_get_kv_samples(e, &st);
    assert_true(st.kv_samples > 0);
    assert_true(st.peak_kv_usage > 0 && st.peak_kv_usage <= 1);
    assert_true(st.mean_waste >= 0 && st.mean_waste < 1);
    if (layout == PL_KV_LAYOUT_CONTIGUOUS && res == PL_RESERVE_MAX)
        assert_true(st.mean_waste > 0.5); /* 256 slots each for ~45 tokens */
    char *all = calloc(1, 4096);
    for (int i = 0; i < 3; i++) {
        pl_request_output *o;
        while (pl_engine_poll(e, ids[i], 0, &o) == PL_OK) {
            for (int k = 0; k < o->n_deltas; k++) strncat(all, o->deltas[k].text, 4000 - strlen(all));
            int done = o->finished;
            pl_request_output_destroy(o);
            if (done) break;
        }
        strcat(all, "|");
    }
    pl_engine_destroy(e);
    return all;
}

static void test_engine_layouts_agree(void **state) {
    (void)state;
    char *ref = run_text(PL_KV_LAYOUT_PAGED, PL_RESERVE_MAX);
    assert_true(strlen(ref) > 30);
    const pl_reserve_policy res[] = {PL_RESERVE_MAX, PL_RESERVE_POW2, PL_RESERVE_ORACLE};
    for (int i = 0; i < 3; i++) {
        char *t = run_text(PL_KV_LAYOUT_CONTIGUOUS, res[i]);
        assert_string_equal(t, ref);
        free(t);
    }
    free(ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reserve_sizes),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_first_fit_and_fragmentation),
        cmocka_unit_test(test_waste_accounting),
        cmocka_unit_test(test_engine_layouts_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
