/* Unit tests for src/kv/manager: each operation alone, then a seeded property test of random
 * operations (prompts from shared prefixes, append, fork, free, copy-on-write, swap out/in,
 * recompute, eviction under pressure, speculative rollback), with and without a sliding window
 * (blocks released behind it), that simulates block CONTENTS in a shadow array and checks
 * every invariant after every operation.
 *
 * Replay a failure with PL_KV_SEED=<seed printed by the run> (and PL_KV_OPS=<count>). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "../ci_env.h"
#include "base/rng.h"
#include "kv/manager.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BS 4

static pl_kv_manager_config small_cfg(int32_t num_blocks, int32_t num_swap, int caching) {
    pl_kv_manager_config c = {
        .block_size = BS,
        .num_blocks = num_blocks,
        .num_swap_blocks = num_swap,
        .max_blocks_per_seq = 8,
        .watermark = 0.0,
        .enable_prefix_caching = caching,
        .hash_seed = 5,
    };
    return c;
}

static void check_ok(const pl_kv_manager *m) {
    pl_status st = pl_kv_manager_check(m);
    if (st != PL_OK) fail_msg("manager check: %s", pl_last_error());
}

static int32_t ref_of(const pl_kv_manager *m, int32_t b) { return m->pool.blocks[b].ref; }

static void seq_tokens(int32_t *t, int32_t n, int32_t base) {
    for (int32_t i = 0; i < n; i++) t[i] = base + i;
}

/* ---- unit tests ---------------------------------------------------------------------------- */

static void test_init_errors(void **state) {
    (void)state;
    pl_kv_manager m;
    pl_kv_manager_config c = small_cfg(8, 0, 1);
    c.block_size = 0;
    assert_int_equal(pl_kv_manager_init(&m, &c), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "block_size"));
    c = small_cfg(0, 0, 1);
    assert_int_equal(pl_kv_manager_init(&m, &c), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "num_blocks"));
    c = small_cfg(8, -1, 1);
    assert_int_equal(pl_kv_manager_init(&m, &c), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "num_swap_blocks"));
    c = small_cfg(8, 0, 1);
    c.watermark = 1.5;
    assert_int_equal(pl_kv_manager_init(&m, &c), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "watermark"));
    c = small_cfg(8, 0, 1);
    c.max_blocks_per_seq = 0;
    assert_int_equal(pl_kv_manager_init(&m, &c), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "max_blocks_per_seq"));
}

static void test_can_allocate(void **state) {
    (void)state;
    pl_kv_manager m;
    pl_kv_manager_config c = small_cfg(20, 0, 1);
    c.watermark = 0.1; /* 2 blocks */
    c.max_blocks_per_seq = 30;
    assert_int_equal(pl_kv_manager_init(&m, &c), PL_OK);
    assert_int_equal(m.watermark_blocks, 2);
    assert_int_equal(pl_kv_can_allocate(&m, 72), PL_ALLOC_OK);     /* 18 blocks, 2 left */
    assert_int_equal(pl_kv_can_allocate(&m, 73), PL_ALLOC_NEVER);  /* 19 blocks */
    assert_int_equal(pl_kv_can_allocate(&m, 0), PL_ALLOC_NEVER);
    pl_block_table a = {0};
    int32_t tok[40];
    seq_tokens(tok, 40, 100);
    assert_int_equal(pl_kv_allocate_prompt(&m, &a, tok, 40, 0, NULL), PL_OK); /* 10 blocks */
    assert_int_equal(pl_kv_can_allocate(&m, 32), PL_ALLOC_OK);    /* 8, leaves 2 */
    assert_int_equal(pl_kv_can_allocate(&m, 33), PL_ALLOC_LATER); /* 9, leaves 1 */
    pl_kv_free_table(&m, &a);
    assert_int_equal(pl_kv_can_allocate(&m, 33), PL_ALLOC_OK);
    pl_kv_manager_destroy(&m);
}

static void test_allocate_and_slots(void **state) {
    (void)state;
    pl_kv_manager m;
    pl_kv_manager_config c = small_cfg(6, 0, 0);
    assert_int_equal(pl_kv_manager_init(&m, &c), PL_OK);
    pl_block_table a = {0}, b = {0};
    int32_t tok[32], n_cached = -1;
    seq_tokens(tok, 32, 1);
    assert_int_equal(pl_kv_allocate_prompt(&m, &a, tok, 10, 0, &n_cached), PL_OK);
    assert_int_equal(n_cached, 0);
    assert_int_equal(a.n_blocks, 3);
    assert_int_equal(a.n_tokens, 10);
    for (int32_t p = 0; p < 10; p++)
        assert_int_equal(pl_block_table_slot(&a, p), (int64_t)a.blocks[p / BS] * BS + p % BS);
    pl_kv_stats s;
    pl_kv_get_stats(&m, &s);
    assert_int_equal(s.blocks_used, 3);
    assert_int_equal(s.blocks_free, 3);
    assert_int_equal(s.tokens_stored, 10);
    assert_true(s.waste > 2.0 / 12 - 1e-9 && s.waste < 2.0 / 12 + 1e-9);
    assert_int_equal(s.n_tables, 1);
    /* Too long for a table: invalid; too big for the free blocks: capacity, nothing changed. */
    assert_int_equal(pl_kv_allocate_prompt(&m, &b, tok, 33, 0, NULL), PL_ERR_INVALID_ARG);
    assert_int_equal(pl_kv_allocate_prompt(&m, &b, tok, 13, 0, NULL), PL_ERR_CAPACITY);
    assert_false(b.live);
    assert_null(b.blocks);
    assert_int_equal(pl_kv_allocate_prompt(&m, &a, tok, 4, 0, NULL), PL_ERR_INVALID_ARG);
    check_ok(&m);
    /* Appending 2 fills the third block, 1 more takes a fourth. */
    pl_block_copy cow;
    assert_int_equal(pl_kv_append_slots(&m, &a, 2, &cow), PL_OK);
    assert_int_equal(cow.src, -1);
    assert_int_equal(a.n_blocks, 3);
    assert_int_equal(pl_kv_append_blocks_needed(&m, &a, 1), 1);
    assert_int_equal(pl_kv_append_slots(&m, &a, 1, &cow), PL_OK);
    assert_int_equal(a.n_blocks, 4);
    assert_int_equal(a.n_tokens, 13);
    /* 3 + 8 more tokens need 2 blocks but 2 are free: ok; 12 more need 3: capacity. */
    assert_true(pl_kv_can_append(&m, &a, 11));
    assert_false(pl_kv_can_append(&m, &a, 12));
    assert_int_equal(pl_kv_append_slots(&m, &a, 12, &cow), PL_ERR_CAPACITY);
    assert_int_equal(a.n_tokens, 13);
    assert_int_equal(pl_kv_append_slots(&m, &a, 20, &cow), PL_ERR_INVALID_ARG); /* > table */
    check_ok(&m);
    pl_kv_free_table(&m, &a);
    pl_kv_free_table(&m, &a); /* idempotent */
    pl_kv_get_stats(&m, &s);
    assert_int_equal(s.blocks_used, 0);
    assert_int_equal(s.tokens_stored, 0);
    assert_int_equal(s.n_tables, 0);
    assert_int_equal(pl_kv_append_slots(&m, &a, 1, &cow), PL_ERR_INVALID_ARG);
    pl_kv_manager_destroy(&m);
}

static void test_prefix_hits(void **state) {
    (void)state;
    pl_kv_manager m;
    pl_kv_manager_config c = small_cfg(16, 0, 1);
    assert_int_equal(pl_kv_manager_init(&m, &c), PL_OK);
    pl_block_table a = {0}, b = {0}, d = {0}, e = {0};
    int32_t tok[16], n_cached = -1;
    seq_tokens(tok, 16, 50);
    assert_int_equal(pl_kv_allocate_prompt(&m, &a, tok, 10, 0, &n_cached), PL_OK);
    assert_int_equal(n_cached, 0);
    /* Nothing is cached before commit: the K/V do not exist yet. */
    assert_int_equal(pl_kv_allocate_prompt(&m, &b, tok, 10, 0, &n_cached), PL_OK);
    assert_int_equal(n_cached, 0);
    pl_kv_free_table(&m, &b);
    assert_int_equal(pl_kv_commit(&m, &a, tok, 10), PL_OK);
    assert_true(m.pool.blocks[a.blocks[0]].hashed && m.pool.blocks[a.blocks[1]].hashed);
    assert_false(m.pool.blocks[a.blocks[2]].hashed);
    /* Same prompt: both full blocks hit, shared. */
    assert_int_equal(pl_kv_probe_prefix(&m, tok, 10, 0), 8);
    assert_int_equal(pl_kv_probe_prefix(&m, tok, 5, 0), 4);
    assert_int_equal(pl_kv_probe_prefix(&m, tok, 10, 1), 0);
    assert_int_equal(pl_kv_allocate_prompt(&m, &b, tok, 10, 0, &n_cached), PL_OK);
    assert_int_equal(n_cached, 8);
    assert_int_equal(b.blocks[0], a.blocks[0]);
    assert_int_equal(b.blocks[1], a.blocks[1]);
    assert_int_not_equal(b.blocks[2], a.blocks[2]);
    assert_int_equal(ref_of(&m, a.blocks[0]), 2);
    /* A prompt of exactly the 8 cached tokens still recomputes its last block. */
    assert_int_equal(pl_kv_allocate_prompt(&m, &d, tok, 8, 0, &n_cached), PL_OK);
    assert_int_equal(n_cached, 4);
    assert_int_equal(ref_of(&m, a.blocks[0]), 3);
    assert_int_equal(ref_of(&m, a.blocks[1]), 2);
    /* Another extra key (cache salt) never hits. */
    assert_int_equal(pl_kv_allocate_prompt(&m, &e, tok, 10, 77, &n_cached), PL_OK);
    assert_int_equal(n_cached, 0);
    pl_kv_stats s;
    pl_kv_get_stats(&m, &s);
    assert_int_equal(s.prefix_queries, 10 + 10 + 10 + 8 + 10);
    assert_int_equal(s.prefix_hits, 8 + 4);
    check_ok(&m);
    /* After everything is freed the full blocks stay cached and hit again. */
    int32_t a0 = a.blocks[0], a1 = a.blocks[1];
    pl_kv_free_table(&m, &a);
    pl_kv_free_table(&m, &b);
    pl_kv_free_table(&m, &d);
    pl_kv_free_table(&m, &e);
    pl_kv_get_stats(&m, &s);
    assert_int_equal(s.blocks_used, 0);
    assert_int_equal(s.blocks_cached, 2);
    /* The tail of a freed prefix is evicted before its head: a0 is nearer the queue's tail. */
    assert_int_equal(m.pool.free_tail, a0);
    assert_int_equal(pl_kv_allocate_prompt(&m, &a, tok, 12, 0, &n_cached), PL_OK);
    assert_int_equal(n_cached, 8);
    assert_int_equal(a.blocks[0], a0);
    assert_int_equal(a.blocks[1], a1);
    pl_kv_get_stats(&m, &s);
    assert_int_equal(s.blocks_cached, 0);
    assert_int_equal(s.tokens_stored, 12);
    /* A diverging second block hits only the first. */
    int32_t other[12];
    memcpy(other, tok, sizeof other);
    other[5] = -3;
    assert_int_equal(pl_kv_allocate_prompt(&m, &b, other, 12, 0, &n_cached), PL_OK);
    assert_int_equal(n_cached, 4);
    check_ok(&m);
    pl_kv_free_table(&m, &a);
    pl_kv_free_table(&m, &b);
    pl_kv_manager_destroy(&m);
}

static void test_eviction_under_pressure(void **state) {
    (void)state;
    pl_kv_manager m;
    pl_kv_manager_config c = small_cfg(4, 0, 1);
    assert_int_equal(pl_kv_manager_init(&m, &c), PL_OK);
    pl_block_table a = {0};
    int32_t t1[9], t2[16], n_cached;
    seq_tokens(t1, 9, 0);
    seq_tokens(t2, 16, 1000);
    assert_int_equal(pl_kv_allocate_prompt(&m, &a, t1, 9, 0, NULL), PL_OK);
    assert_int_equal(pl_kv_commit(&m, &a, t1, 9), PL_OK);
    int32_t a0 = a.blocks[0];
    pl_kv_free_table(&m, &a);
    pl_kv_stats s;
    pl_kv_get_stats(&m, &s);
    assert_int_equal(s.blocks_cached, 2);
    /* A freed prefix's tail is evicted before its head: 12 tokens (3 blocks) evict only the
     * second block, and the first still hits. */
    assert_int_equal(m.pool.free_tail, a0);
    assert_int_equal(pl_kv_allocate_prompt(&m, &a, t2, 12, 0, NULL), PL_OK);
    pl_kv_get_stats(&m, &s);
    assert_int_equal(s.evictions, 1);
    pl_kv_free_table(&m, &a);
    pl_block_table b = {0};
    assert_int_equal(pl_kv_allocate_prompt(&m, &b, t1, 9, 0, &n_cached), PL_OK);
    assert_int_equal(n_cached, 4);
    assert_int_equal(b.blocks[0], a0);
    pl_kv_free_table(&m, &b);
    pl_kv_get_stats(&m, &s);
    assert_int_equal(s.blocks_cached, 1);
    /* 16 tokens take all 4 blocks: the last cached one is evicted too. */
    assert_int_equal(pl_kv_allocate_prompt(&m, &a, t2, 16, 0, NULL), PL_OK);
    pl_kv_get_stats(&m, &s);
    assert_int_equal(s.evictions, 2);
    assert_int_equal(s.blocks_cached, 0);
    pl_kv_free_table(&m, &a);
    assert_int_equal(pl_kv_allocate_prompt(&m, &a, t1, 9, 0, &n_cached), PL_OK);
    assert_int_equal(n_cached, 0);
    check_ok(&m);
    pl_kv_free_table(&m, &a);
    pl_kv_manager_destroy(&m);
}

static void test_fork_and_cow(void **state) {
    (void)state;
    pl_kv_manager m;
    pl_kv_manager_config c = small_cfg(8, 0, 1);
    assert_int_equal(pl_kv_manager_init(&m, &c), PL_OK);
    pl_block_table a = {0}, b = {0};
    int32_t tok[8];
    seq_tokens(tok, 8, 0);
    assert_int_equal(pl_kv_allocate_prompt(&m, &a, tok, 6, 0, NULL), PL_OK);
    assert_int_equal(pl_kv_fork(&m, &a, &b), PL_OK);
    assert_int_equal(pl_kv_fork(&m, &a, &b), PL_ERR_INVALID_ARG); /* child in use */
    assert_int_equal(ref_of(&m, a.blocks[0]), 2);
    assert_int_equal(ref_of(&m, a.blocks[1]), 2);
    pl_kv_stats s;
    pl_kv_get_stats(&m, &s);
    assert_int_equal(s.blocks_used, 2);
    assert_int_equal(s.tokens_stored, 6);
    assert_int_equal(s.n_tables, 2);
    /* The shared, partly filled last block is copied before a's write. */
    int32_t old_last = a.blocks[1];
    pl_block_copy cow;
    assert_int_equal(pl_kv_append_blocks_needed(&m, &a, 1), 1);
    assert_int_equal(pl_kv_append_slots(&m, &a, 1, &cow), PL_OK);
    assert_int_equal(cow.src, old_last);
    assert_int_equal(cow.dst, a.blocks[1]);
    assert_int_not_equal(a.blocks[1], old_last);
    assert_int_equal(b.blocks[1], old_last);
    assert_int_equal(ref_of(&m, old_last), 1);
    assert_int_equal(ref_of(&m, a.blocks[0]), 2);
    /* b now owns its last block alone: no copy. */
    assert_int_equal(pl_kv_append_slots(&m, &b, 1, &cow), PL_OK);
    assert_int_equal(cow.src, -1);
    /* A shared FULL last block needs no copy: the next token opens a new block. */
    pl_block_table d = {0};
    assert_int_equal(pl_kv_append_slots(&m, &a, 1, &cow), PL_OK); /* a: 8 tokens, full */
    assert_int_equal(pl_kv_fork(&m, &a, &d), PL_OK);
    assert_int_equal(pl_kv_append_slots(&m, &d, 1, &cow), PL_OK);
    assert_int_equal(cow.src, -1);
    assert_int_equal(d.n_blocks, 3);
    check_ok(&m);
    pl_kv_free_table(&m, &a);
    pl_kv_free_table(&m, &b);
    pl_kv_free_table(&m, &d);
    pl_kv_get_stats(&m, &s);
    assert_int_equal(s.blocks_used, 0);
    pl_kv_manager_destroy(&m);
}

static void test_commit_dedup(void **state) {
    (void)state;
    pl_kv_manager m;
    pl_kv_manager_config c = small_cfg(10, 0, 1);
    assert_int_equal(pl_kv_manager_init(&m, &c), PL_OK);
    pl_block_table a = {0}, b = {0};
    int32_t tok[9];
    seq_tokens(tok, 9, 7);
    /* Two identical prompts admitted in the same step: neither can hit the other. */
    assert_int_equal(pl_kv_allocate_prompt(&m, &a, tok, 9, 0, NULL), PL_OK);
    assert_int_equal(pl_kv_allocate_prompt(&m, &b, tok, 9, 0, NULL), PL_OK);
    assert_int_equal(pl_kv_commit(&m, &a, tok, 9), PL_OK);
    int32_t b0 = b.blocks[0];
    assert_int_equal(pl_kv_commit(&m, &b, tok, 9), PL_OK);
    assert_int_equal(b.blocks[0], a.blocks[0]);
    assert_int_equal(b.blocks[1], a.blocks[1]);
    assert_int_not_equal(b.blocks[2], a.blocks[2]);
    assert_int_equal(ref_of(&m, b0), 0);
    pl_kv_stats s;
    pl_kv_get_stats(&m, &s);
    assert_int_equal(s.dedups, 2);
    assert_int_equal(s.blocks_used, 4);
    assert_int_equal(s.tokens_stored, 8 + 1 + 1);
    /* commit validates its input. */
    assert_int_equal(pl_kv_commit(&m, &a, tok, 10), PL_ERR_INVALID_ARG);
    check_ok(&m);
    pl_kv_free_table(&m, &a);
    pl_kv_free_table(&m, &b);
    pl_kv_manager_destroy(&m);
}

static void test_swap(void **state) {
    (void)state;
    pl_kv_manager m;
    pl_kv_manager_config c = small_cfg(8, 6, 1);
    assert_int_equal(pl_kv_manager_init(&m, &c), PL_OK);
    pl_block_table a = {0}, b = {0}, x = {0};
    int32_t tok[10];
    seq_tokens(tok, 10, 3);
    assert_int_equal(pl_kv_allocate_prompt(&m, &a, tok, 10, 0, NULL), PL_OK);
    assert_int_equal(pl_kv_commit(&m, &a, tok, 10), PL_OK);
    assert_int_equal(pl_kv_fork(&m, &a, &b), PL_OK);
    pl_block_copy cow;
    assert_int_equal(pl_kv_append_slots(&m, &b, 1, &cow), PL_OK); /* b copies the last block */
    assert_true(cow.src >= 0);
    int32_t a_before[3], b_before[3];
    memcpy(a_before, a.blocks, sizeof a_before);
    memcpy(b_before, b.blocks, sizeof b_before);
    pl_block_table *group[2] = {&a, &b};
    assert_int_equal(pl_kv_can_swap_out(&m, group, 2), PL_ALLOC_OK);
    pl_block_copy map[8];
    int32_t n_map = -1;
    /* Map too small: refused, nothing changed. */
    assert_int_equal(pl_kv_swap_out(&m, group, 2, map, 3, &n_map), PL_ERR_CAPACITY);
    assert_false(a.swapped);
    assert_int_equal(pl_kv_swap_out(&m, group, 2, map, 8, &n_map), PL_OK);
    assert_int_equal(n_map, 4); /* 2 shared + 2 private last blocks */
    assert_true(a.swapped && b.swapped);
    assert_int_equal(a.blocks[0], b.blocks[0]);
    assert_int_equal(a.blocks[1], b.blocks[1]);
    assert_int_equal(m.swap.blocks[a.blocks[0]].ref, 2);
    for (int32_t i = 0; i < n_map; i++) {
        bool found = false;
        for (int32_t j = 0; j < 3; j++)
            found |= (map[i].src == a_before[j] && map[i].dst == a.blocks[j]) ||
                     (map[i].src == b_before[j] && map[i].dst == b.blocks[j]);
        assert_true(found);
    }
    pl_kv_stats s;
    pl_kv_get_stats(&m, &s);
    assert_int_equal(s.swap_used, 4);
    assert_int_equal(s.blocks_used, 0);
    assert_int_equal(s.blocks_cached, 2); /* the prefix left behind is still cached */
    assert_int_equal(s.n_tables, 2);
    check_ok(&m);
    /* Swapped tables cannot grow, fork or swap out again. */
    assert_int_equal(pl_kv_append_slots(&m, &a, 1, &cow), PL_ERR_INVALID_ARG);
    assert_int_equal(pl_kv_fork(&m, &a, &x), PL_ERR_INVALID_ARG);
    assert_int_equal(pl_kv_can_swap_out(&m, group, 2), PL_ALLOC_NEVER);
    assert_int_equal(pl_kv_swap_out(&m, group, 2, map, 8, &n_map), PL_ERR_INVALID_ARG);
    /* Swap in: shared stays shared; the next commit re-enters the prefix in the cache. */
    assert_int_equal(pl_kv_can_swap_in(&m, group, 2), PL_ALLOC_OK);
    assert_int_equal(pl_kv_swap_in(&m, group, 2, map, 8, &n_map), PL_OK);
    assert_int_equal(n_map, 4);
    assert_false(a.swapped || b.swapped);
    assert_int_equal(ref_of(&m, a.blocks[0]), 2);
    assert_int_not_equal(a.blocks[2], b.blocks[2]);
    pl_kv_get_stats(&m, &s);
    assert_int_equal(s.swap_used, 0);
    assert_int_equal(s.blocks_used, 4);
    assert_int_equal(s.tokens_stored, 8 + 2 + 3);
    check_ok(&m);
    int32_t b_tok[11];
    memcpy(b_tok, tok, sizeof tok);
    b_tok[10] = 99;
    assert_int_equal(pl_kv_commit(&m, &a, tok, 10), PL_OK);
    assert_int_equal(pl_kv_commit(&m, &b, b_tok, 11), PL_OK);
    /* The swapped-in copies duplicate the cached prefix: commit dedups them onto it. */
    assert_int_equal(a.blocks[0], b.blocks[0]);
    assert_true(m.pool.blocks[a.blocks[0]].hashed);
    pl_kv_get_stats(&m, &s);
    assert_int_equal(s.blocks_cached, 0);
    check_ok(&m);
    pl_kv_free_table(&m, &a);
    pl_kv_free_table(&m, &b);
    pl_kv_manager_destroy(&m);

    /* Without a swap pool: never. */
    c = small_cfg(8, 0, 1);
    assert_int_equal(pl_kv_manager_init(&m, &c), PL_OK);
    assert_int_equal(pl_kv_allocate_prompt(&m, &a, tok, 10, 0, NULL), PL_OK);
    pl_block_table *one[1] = {&a};
    assert_int_equal(pl_kv_can_swap_out(&m, one, 1), PL_ALLOC_NEVER);
    assert_int_equal(pl_kv_swap_out(&m, one, 1, map, 8, &n_map), PL_ERR_CAPACITY);
    pl_kv_free_table(&m, &a);
    pl_kv_manager_destroy(&m);
}

static void test_caching_disabled(void **state) {
    (void)state;
    pl_kv_manager m;
    pl_kv_manager_config c = small_cfg(8, 0, 0);
    assert_int_equal(pl_kv_manager_init(&m, &c), PL_OK);
    pl_block_table a = {0}, b = {0};
    int32_t tok[9], n_cached = -1;
    seq_tokens(tok, 9, 0);
    assert_int_equal(pl_kv_allocate_prompt(&m, &a, tok, 9, 0, NULL), PL_OK);
    assert_int_equal(pl_kv_commit(&m, &a, tok, 9), PL_OK);
    assert_false(m.pool.blocks[a.blocks[0]].hashed);
    assert_int_equal(pl_kv_allocate_prompt(&m, &b, tok, 9, 0, &n_cached), PL_OK);
    assert_int_equal(n_cached, 0);
    pl_kv_stats s;
    pl_kv_get_stats(&m, &s);
    assert_int_equal(s.prefix_queries, 0);
    assert_int_equal(s.prefix_hits, 0);
    pl_kv_free_table(&m, &a);
    pl_kv_free_table(&m, &b);
    pl_kv_get_stats(&m, &s);
    assert_int_equal(s.blocks_cached, 0);
    pl_kv_manager_destroy(&m);
}

/* ---- property test ------------------------------------------------------------------------- */

/* The simulation plays the engine: it "computes" tokens by writing them into a shadow of every
 * block's contents, applies copy-on-write and swap mappings to the shadow as the engine would
 * with the byte-copy kernel, and checks that every table reads back exactly its tokens. */

enum { P_SEQS = 20, P_MAXB = 12, P_MAXTOK = P_MAXB * BS, P_PREFIXES = 4, P_PREFIX_LEN = 24 };

typedef struct {
    int live;                  /* slot in use */
    pl_block_table t;          /* the table under test */
    int32_t tok[P_MAXTOK];     /* the sequence's tokens; all t.n_tokens of them are computed */
    int group;                 /* swap group (a request's sequences) */
    uint64_t salt;             /* extra key: the cache salt (0 or 1), + 2 for a global group's
                                  table (groups must not hit each other's blocks) */
    uint64_t tag;              /* SEQ_TAG: what its slots hold, tagged by salt and group */
} sim_seq;

/* What a slot holds: the token tagged with the cache salt, so a hit across salts reads wrong. */
#define SALTED(tok, salt) ((int32_t)(tok) + (int32_t)(salt) * 1000000)
/* What a sequence's slots hold: its cache salt and its table's group (a global group's block
 * holds other layers than the window group's block of the same tokens). */
#define SEQ_TAG(salt, global) ((salt) + 2u * (uint64_t)(global))

typedef struct {
    pl_kv_manager m;
    pl_rng rng;
    sim_seq seq[P_SEQS];
    int32_t *shadow;           /* [num_blocks * BS] token held by each primary slot, -1 never */
    int32_t *swap_shadow;      /* [num_swap_blocks * BS] */
    int32_t prefix[P_PREFIXES][P_PREFIX_LEN];
    int next_group;
    int32_t *cnt_p, *cnt_s;    /* scratch: references counted from the tables */
    int32_t *fill;             /* scratch: tokens per primary block as the tables see it */
    int32_t W;                 /* the manager's sliding window, 0 = none */
    int groups;                /* 1: a table is of the window or the global group at random */
    /* coverage: each must be > 0 at the end, or the run proved little */
    long hits, cows, swap_outs, swap_ins, capacity_fails, recomputes, forks, frees, rollbacks;
} sim;

static void sim_write(sim *s, sim_seq *q, int32_t pos) {
    int32_t b = q->t.blocks[pos / BS];
    /* The model of a kernel write: the block must not be shared (copy-on-write happened). */
    if (s->m.pool.blocks[b].ref != 1)
        fail_msg("write of position %d into block %d with ref %d", (int)pos, (int)b,
                 (int)s->m.pool.blocks[b].ref);
    s->shadow[pl_block_table_slot(&q->t, pos)] = SALTED(q->tok[pos], q->tag);
}

/* Leading blocks table t of n committed tokens has released to the window. */
static int32_t exp_dropped(const sim *s, const pl_block_table *t, int32_t n) {
    return !t->global && s->W > 0 && n - s->W + 1 > 0 ? (n - s->W + 1) / BS : 0;
}

static void sim_check(sim *s, int step) {
    pl_kv_manager *m = &s->m;
    pl_status st = pl_kv_manager_check(m);
    if (st != PL_OK) fail_msg("step %d: %s", step, pl_last_error());
    int32_t nb = m->pool.num_blocks, ns = m->swap.num_blocks;
    memset(s->cnt_p, 0, (size_t)nb * sizeof *s->cnt_p);
    memset(s->fill, 0, (size_t)nb * sizeof *s->fill);
    if (ns) memset(s->cnt_s, 0, (size_t)ns * sizeof *s->cnt_s);
    int n_live = 0, n_resident = 0;
    for (int k = 0; k < P_SEQS; k++) {
        sim_seq *q = &s->seq[k];
        if (!q->live) {
            assert_false(q->t.live);
            continue;
        }
        n_live++;
        pl_block_table *t = &q->t;
        assert_true(t->live);
        assert_int_equal(t->n_blocks, pl_kv_blocks_for(m, t->n_tokens));
        /* Every token is committed here: exactly the blocks behind the window are released. */
        if (t->n_dropped != exp_dropped(s, t, t->n_tokens))
            fail_msg("step %d: seq %d of %d tokens released %d blocks, expected %d", step, k,
                     (int)t->n_tokens, (int)t->n_dropped, (int)exp_dropped(s, t, t->n_tokens));
        for (int32_t i = 0; i < t->n_dropped; i++) assert_int_equal(t->blocks[i], PL_KV_NO_BLOCK);
        for (int32_t i = t->n_dropped; i < t->n_blocks; i++) {
            int32_t b = t->blocks[i];
            assert_true(b >= 0);
            int32_t f = t->n_tokens - i * BS < BS ? t->n_tokens - i * BS : BS;
            if (t->swapped) {
                s->cnt_s[b]++;
            } else {
                s->cnt_p[b]++;
                if (s->fill[b] && s->fill[b] != f)
                    fail_msg("step %d: block %d shared with fills %d and %d", step, (int)b,
                             (int)s->fill[b], (int)f);
                s->fill[b] = f;
            }
        }
        n_resident += !t->swapped;
        /* Every table reads back exactly its sequence's tokens (those it still holds: at least
         * the window of its next query). */
        const int32_t *sh = t->swapped ? s->swap_shadow : s->shadow;
        if (s->W > 0) assert_true(t->n_dropped * BS <= (t->n_tokens - s->W + 1 > 0 ? t->n_tokens - s->W + 1 : 0));
        for (int32_t pos = t->n_dropped * BS; pos < t->n_tokens; pos++)
            if (sh[pl_block_table_slot(t, pos)] != SALTED(q->tok[pos], q->tag))
                fail_msg("step %d: seq %d pos %d reads %d, expected %d (%s block %d)", step, k,
                         (int)pos, (int)sh[pl_block_table_slot(t, pos)],
                         (int)SALTED(q->tok[pos], q->tag),
                         t->swapped ? "swap" : "primary", (int)t->blocks[pos / BS]);
    }
    /* Ref counts equal the holders; free xor referenced is checked by the pool check. */
    int64_t stored = 0;
    for (int32_t b = 0; b < nb; b++) {
        if (m->pool.blocks[b].ref != s->cnt_p[b])
            fail_msg("step %d: primary block %d ref %d, held by %d", step, (int)b,
                     (int)m->pool.blocks[b].ref, (int)s->cnt_p[b]);
        stored += s->fill[b];
        /* A cached block's contents are what its hash claims. */
        if (m->pool.blocks[b].hashed)
            for (int32_t i = 0; i < BS; i++)
                if (s->shadow[b * BS + i] !=
                    SALTED(m->pool.tokens[b * BS + i], m->pool.blocks[b].extra))
                    fail_msg("step %d: hashed block %d slot %d holds %d, hash says %d", step,
                             (int)b, (int)i, (int)s->shadow[b * BS + i],
                             (int)m->pool.tokens[b * BS + i]);
    }
    for (int32_t b = 0; b < ns; b++)
        if (m->swap.blocks[b].ref != s->cnt_s[b])
            fail_msg("step %d: swap block %d ref %d, held by %d", step, (int)b,
                     (int)m->swap.blocks[b].ref, (int)s->cnt_s[b]);
    pl_kv_stats st2;
    pl_kv_get_stats(m, &st2);
    assert_int_equal(st2.blocks_free + st2.blocks_used, st2.blocks_total);
    assert_int_equal(st2.n_tables, n_live);
    assert_int_equal(st2.tokens_stored, stored);
    /* Waste: less than one block per resident table. */
    assert_true((int64_t)st2.blocks_used * BS - stored <= (int64_t)n_resident * (BS - 1));
}

static int sim_free_slot(sim *s) {
    int start = (int)pl_rng_below(&s->rng, P_SEQS);
    for (int i = 0; i < P_SEQS; i++)
        if (!s->seq[(start + i) % P_SEQS].live) return (start + i) % P_SEQS;
    return -1;
}

/* A random live sequence that is resident (want 0) or swapped (want 1), or -1. */
static int sim_pick(sim *s, int want) {
    int start = (int)pl_rng_below(&s->rng, P_SEQS);
    for (int i = 0; i < P_SEQS; i++) {
        sim_seq *q = &s->seq[(start + i) % P_SEQS];
        if (q->live && q->t.swapped == want) return (start + i) % P_SEQS;
    }
    return -1;
}

static void sim_free(sim *s, int k) {
    pl_kv_free_table(&s->m, &s->seq[k].t);
    assert_false(s->seq[k].t.live);
    s->seq[k].live = 0;
    s->frees++;
}

/* Admit q->tok[0..n) as a prompt; compute the uncached part; commit. */
static void sim_admit(sim *s, int k, int32_t n) {
    sim_seq *q = &s->seq[k];
    pl_kv_manager *m = &s->m;
    pl_alloc_status can = pl_kv_can_allocate(m, n);
    pl_kv_stats before, after;
    pl_kv_get_stats(m, &before);
    int32_t n_cached = -1, probed = pl_kv_probe_prefix(m, q->tok, n, q->salt);
    pl_status st = pl_kv_allocate_prompt(m, &q->t, q->tok, n, q->salt, &n_cached);
    if (can == PL_ALLOC_OK) assert_int_equal(st, PL_OK);
    if (st != PL_OK) {
        assert_int_equal(st, PL_ERR_CAPACITY);
        pl_kv_get_stats(m, &after);
        assert_int_equal(after.blocks_free, before.blocks_free);
        assert_int_equal(after.blocks_cached, before.blocks_cached);
        assert_false(q->t.live);
        q->live = 0;
        s->capacity_fails++;
        return;
    }
    q->live = 1;
    q->group = s->next_group++;
    assert_true(n_cached % BS == 0 && n_cached <= n - 1);
    assert_int_equal(n_cached, probed);
    /* Hits the first computed position's window does not reach are not taken. */
    assert_int_equal(q->t.n_dropped, exp_dropped(s, &q->t, n_cached));
    for (int32_t i = 0; i < q->t.n_dropped; i++) assert_int_equal(q->t.blocks[i], PL_KV_NO_BLOCK);
    /* A prefix-cache hit returns blocks that hold exactly the prompt's tokens. */
    for (int32_t pos = q->t.n_dropped * BS; pos < n_cached; pos++)
        assert_int_equal(s->shadow[pl_block_table_slot(&q->t, pos)], SALTED(q->tok[pos], q->tag));
    if (n_cached > 0) s->hits++;
    for (int32_t pos = n_cached; pos < n; pos++) sim_write(s, q, pos);
    assert_int_equal(pl_kv_commit(m, &q->t, q->tok, n), PL_OK);
}

static void op_new(sim *s) {
    int k = sim_free_slot(s);
    if (k < 0) return;
    sim_seq *q = &s->seq[k];
    int32_t n = 0;
    if (pl_rng_below(&s->rng, 5) > 0) { /* most prompts start with a shared prefix */
        const int32_t *p = s->prefix[pl_rng_below(&s->rng, P_PREFIXES)];
        int32_t len = (int32_t)pl_rng_below(&s->rng, P_PREFIX_LEN + 1);
        memcpy(q->tok, p, (size_t)len * sizeof *p);
        n = len;
    }
    q->t.global = s->groups && pl_rng_below(&s->rng, 2);
    q->tag = SEQ_TAG(pl_rng_below(&s->rng, 5) == 0, q->t.global);
    q->salt = q->tag; /* the group is part of the key */
    int32_t suffix = 1 + (int32_t)pl_rng_below(&s->rng, 8);
    for (int32_t i = 0; i < suffix; i++) q->tok[n++] = (int32_t)pl_rng_below(&s->rng, 3);
    sim_admit(s, k, n);
}

/* The engine's recompute preemption: drop the table and admit the whole sequence again. */
static void op_recompute(sim *s) {
    int k = sim_pick(s, 0);
    if (k < 0) return;
    int32_t n = s->seq[k].t.n_tokens;
    pl_kv_free_table(&s->m, &s->seq[k].t);
    s->seq[k].live = 0;
    sim_admit(s, k, n);
    s->recomputes++;
}

static void sim_group(sim *s, int k, pl_block_table **out, int *n) {
    *n = 0;
    for (int i = 0; i < P_SEQS; i++)
        if (s->seq[i].live && s->seq[i].group == s->seq[k].group) out[(*n)++] = &s->seq[i].t;
}

static void op_swap_out(sim *s) {
    int k = sim_pick(s, 0);
    if (k < 0) return;
    pl_block_table *g[P_SEQS];
    int n;
    sim_group(s, k, g, &n);
    pl_alloc_status can = pl_kv_can_swap_out(&s->m, g, n);
    pl_block_copy map[64];
    int32_t n_map = 0;
    pl_status st = pl_kv_swap_out(&s->m, g, n, map, 64, &n_map);
    assert_int_equal(st == PL_OK, can == PL_ALLOC_OK);
    if (st != PL_OK) return;
    for (int32_t i = 0; i < n_map; i++) /* the engine's copy, primary -> swap */
        memcpy(s->swap_shadow + map[i].dst * BS, s->shadow + map[i].src * BS, BS * sizeof(int32_t));
    s->swap_outs++;
}

static void op_swap_in(sim *s) {
    int k = sim_pick(s, 1);
    if (k < 0) return;
    pl_block_table *g[P_SEQS];
    int n;
    sim_group(s, k, g, &n);
    pl_alloc_status can = pl_kv_can_swap_in(&s->m, g, n);
    pl_block_copy map[64];
    int32_t n_map = 0;
    pl_status st = pl_kv_swap_in(&s->m, g, n, map, 64, &n_map);
    if (can == PL_ALLOC_OK) assert_int_equal(st, PL_OK);
    if (st != PL_OK) return;
    for (int32_t i = 0; i < n_map; i++) /* the engine's copy, swap -> primary */
        memcpy(s->shadow + map[i].dst * BS, s->swap_shadow + map[i].src * BS, BS * sizeof(int32_t));
    s->swap_ins++;
}

static void op_fork(sim *s) {
    int k = sim_pick(s, 0), c = sim_free_slot(s);
    if (k < 0 || c < 0) return;
    assert_int_equal(pl_kv_fork(&s->m, &s->seq[k].t, &s->seq[c].t), PL_OK);
    memcpy(s->seq[c].tok, s->seq[k].tok, sizeof s->seq[k].tok);
    s->seq[c].live = 1;
    s->seq[c].group = s->seq[k].group;
    s->seq[c].salt = s->seq[k].salt;
    s->seq[c].tag = s->seq[k].tag;
    assert_int_equal(s->seq[c].t.extra_key, s->seq[k].salt);
    s->forks++;
}

/* One decode step (or a few speculative tokens) of a resident sequence. */
static void op_append(sim *s) {
    int k = sim_pick(s, 0);
    if (k < 0) return;
    sim_seq *q = &s->seq[k];
    pl_kv_manager *m = &s->m;
    int32_t n_new = pl_rng_below(&s->rng, 5) ? 1 : 1 + (int32_t)pl_rng_below(&s->rng, 4);
    int32_t n0 = q->t.n_tokens;
    if (n0 + n_new > P_MAXTOK) { /* reached max length: finished */
        sim_free(s, k);
        return;
    }
    int32_t last = q->t.blocks[q->t.n_blocks - 1]; /* released only when full (n0 % BS == 0) */
    bool expect_cow = n0 % BS != 0 && m->pool.blocks[last].ref > 1;
    if (last == PL_KV_NO_BLOCK) assert_true(n0 % BS == 0 && s->W > 0);
    bool can = pl_kv_can_append(m, &q->t, n_new);
    pl_block_copy cow;
    pl_status st = pl_kv_append_slots(m, &q->t, n_new, &cow);
    assert_int_equal(st == PL_OK, can);
    if (st != PL_OK) { /* out of blocks: preempt this sequence's group, by swap or recompute */
        assert_int_equal(st, PL_ERR_CAPACITY);
        assert_int_equal(q->t.n_tokens, n0);
        s->capacity_fails++;
        if (pl_rng_below(&s->rng, 2)) op_swap_out(s);
        else sim_free(s, k);
        return;
    }
    assert_int_equal(cow.src >= 0, expect_cow);
    if (cow.src >= 0) { /* the engine's block copy before the write */
        assert_int_equal(cow.src, last);
        memcpy(s->shadow + cow.dst * BS, s->shadow + cow.src * BS, BS * sizeof(int32_t));
        s->cows++;
    }
    for (int32_t pos = n0; pos < n0 + n_new; pos++) {
        q->tok[pos] = (int32_t)pl_rng_below(&s->rng, 3);
        sim_write(s, q, pos);
    }
    assert_int_equal(pl_kv_commit(m, &q->t, q->tok, q->t.n_tokens), PL_OK);
}

/* Speculative decoding (issue 15): slots for 1..4 proposals are appended, the proposals are
 * "computed" (written), then a random number of them is accepted and the table is rolled back to
 * the accepted length; only accepted tokens are committed. Rejected proposals carry ids no real
 * token has, so finding one in a hashed block would mean a rejected token reached the cache. */
enum { P_REJECTED = 5000 };

static void op_speculate(sim *s) {
    int k = sim_pick(s, 0);
    if (k < 0) return;
    sim_seq *q = &s->seq[k];
    pl_kv_manager *m = &s->m;
    int32_t n0 = q->t.n_tokens, n_spec = 1 + (int32_t)pl_rng_below(&s->rng, 4);
    if (n0 + n_spec > P_MAXTOK) return;
    pl_kv_stats before;
    pl_kv_get_stats(m, &before);
    int32_t need = pl_kv_append_blocks_needed(m, &q->t, n_spec);
    pl_block_copy cow;
    if (pl_kv_append_slots(m, &q->t, n_spec, &cow) != PL_OK) {
        s->capacity_fails++;
        return; /* the engine then runs the sequence without speculation */
    }
    if (cow.src >= 0) {
        memcpy(s->shadow + cow.dst * BS, s->shadow + cow.src * BS, BS * sizeof(int32_t));
        s->cows++;
    }
    int32_t n_acc = (int32_t)pl_rng_below(&s->rng, (uint64_t)n_spec + 1);
    for (int32_t pos = n0; pos < n0 + n_spec; pos++) {
        q->tok[pos] = pos < n0 + n_acc ? (int32_t)pl_rng_below(&s->rng, 3) : P_REJECTED + pos;
        sim_write(s, q, pos);
    }
    int32_t n_keep = n0 + n_acc;
    assert_int_equal(pl_kv_truncate(m, &q->t, n_keep), PL_OK);
    assert_int_equal(q->t.n_tokens, n_keep);
    pl_kv_stats after;
    pl_kv_get_stats(m, &after);
    /* Exactly the blocks the kept tokens need stayed taken (plus the copy-on-write, which
     * replaced a shared block): no block leaked, none freed twice (the pool check). */
    int32_t kept_new = pl_kv_blocks_for(m, n_keep) - pl_kv_blocks_for(m, n0);
    assert_true(need >= kept_new);
    assert_int_equal(before.blocks_free - after.blocks_free,
                     kept_new + (cow.src >= 0 && m->pool.blocks[cow.src].ref > 0 ? 1 : 0));
    assert_int_equal(pl_kv_commit(m, &q->t, q->tok, n_keep), PL_OK);
    if (n_acc < n_spec) s->rollbacks++;
    /* No rejected token in the prefix cache. */
    for (int32_t b = 0; b < m->pool.num_blocks; b++)
        if (m->pool.blocks[b].hashed)
            for (int32_t i = 0; i < BS; i++)
                if (m->pool.tokens[b * BS + i] >= P_REJECTED)
                    fail_msg("rejected token %d is in hashed block %d", (int)m->pool.tokens[b * BS + i], (int)b);
    /* Invalid rollbacks are refused and change nothing. */
    assert_int_equal(pl_kv_truncate(m, &q->t, n_keep + 1), PL_ERR_INVALID_ARG);
    if (q->t.n_registered > 0)
        assert_int_equal(pl_kv_truncate(m, &q->t, q->t.n_registered * BS - 1), PL_ERR_INVALID_ARG);
    if (q->t.n_dropped > 0) /* behind the window: those K/V are gone */
        assert_int_equal(pl_kv_truncate(m, &q->t, q->t.n_dropped * BS - 1), PL_ERR_INVALID_ARG);
    assert_int_equal(q->t.n_tokens, n_keep);
}

static uint64_t env_u64(const char *name, uint64_t dflt) {
    const char *v = test_env(name);
    return v && *v ? strtoull(v, NULL, 0) : dflt;
}

static void run_property_groups(int caching, uint64_t default_seed, long default_ops, int32_t W,
                                int groups) {
    uint64_t seed = env_u64("PL_KV_SEED", default_seed);
    long ops = (long)env_u64("PL_KV_OPS", (uint64_t)default_ops);
    printf("kv property test: caching %d, window %d, groups %d, PL_KV_SEED=%" PRIu64
           " PL_KV_OPS=%ld\n", caching, (int)W, groups + 1, seed, ops);
    fflush(stdout);
    sim *s = calloc(1, sizeof *s);
    assert_non_null(s);
    pl_kv_manager_config c = {
        .block_size = BS,
        .num_blocks = 40,
        .num_swap_blocks = 24,
        .max_blocks_per_seq = P_MAXB,
        .watermark = 0.05,
        .enable_prefix_caching = caching,
        .hash_seed = seed,
        .sliding_window = W,
    };
    s->W = W;
    s->groups = groups;
    assert_int_equal(pl_kv_manager_init(&s->m, &c), PL_OK);
    pl_rng_seed(&s->rng, seed);
    s->shadow = malloc((size_t)c.num_blocks * BS * sizeof(int32_t));
    s->swap_shadow = malloc((size_t)c.num_swap_blocks * BS * sizeof(int32_t));
    s->cnt_p = malloc((size_t)c.num_blocks * sizeof(int32_t));
    s->cnt_s = malloc((size_t)c.num_swap_blocks * sizeof(int32_t));
    s->fill = malloc((size_t)c.num_blocks * sizeof(int32_t));
    assert_true(s->shadow && s->swap_shadow && s->cnt_p && s->cnt_s && s->fill);
    memset(s->shadow, 0xff, (size_t)c.num_blocks * BS * sizeof(int32_t));
    memset(s->swap_shadow, 0xff, (size_t)c.num_swap_blocks * BS * sizeof(int32_t));
    /* Prefixes 0 and 1 share their first 6 tokens, so chains diverge mid-block too. */
    for (int p = 0; p < P_PREFIXES; p++)
        for (int i = 0; i < P_PREFIX_LEN; i++)
            s->prefix[p][i] = (p == 1 && i < 6) ? s->prefix[0][i] : 100 + (int32_t)pl_rng_below(&s->rng, 50);
    for (long step = 0; step < ops; step++) {
        uint64_t r = pl_rng_below(&s->rng, 100);
        if (r < 14) op_new(s);
        else if (r < 50) op_append(s);
        else if (r < 62) op_speculate(s);
        else if (r < 70) op_fork(s);
        else if (r < 78) {
            int k = (int)pl_rng_below(&s->rng, P_SEQS);
            if (s->seq[k].live) sim_free(s, k);
        } else if (r < 84) op_swap_out(s);
        else if (r < 94) op_swap_in(s);
        else op_recompute(s);
        sim_check(s, (int)step);
    }
    pl_kv_stats st;
    pl_kv_get_stats(&s->m, &st);
    printf("  hits %ld, cows %ld, swap out %ld / in %ld, capacity fails %ld, recomputes %ld, forks "
           "%ld, frees %ld, rollbacks %ld, evictions %" PRIu64 ", dedups %" PRIu64 ", prefix hits %" PRIu64
           " of %" PRIu64 " tokens\n",
           s->hits, s->cows, s->swap_outs, s->swap_ins, s->capacity_fails, s->recomputes, s->forks,
           s->frees, s->rollbacks, st.evictions, st.dedups, st.prefix_hits, st.prefix_queries);
    printf("  window: %" PRIu64 " table entries released, %" PRIu64 " blocks back to the pool\n",
           st.window_released, st.window_freed);
    if (ops >= 10000) { /* coverage: every mechanism was exercised */
        assert_true(s->cows > 0 && s->swap_outs > 0 && s->swap_ins > 0);
        /* a window of a couple of tokens frees so much that the pool never runs out */
        if (W == 0 || W > BS) assert_true(s->capacity_fails > 0);
        assert_true(s->forks > 0 && s->recomputes > 0 && s->rollbacks > 0);
        if (caching) assert_true(s->hits > 0 && st.evictions > 0 && st.dedups > 0);
        else assert_true(s->hits == 0 && st.prefix_hits == 0);
        if (W > 0) assert_true(st.window_freed > 0 && st.window_released >= st.window_freed);
        else assert_true(st.window_released == 0);
    }
    /* Freeing everything returns every block. */
    for (int k = 0; k < P_SEQS; k++)
        if (s->seq[k].live) sim_free(s, k);
    sim_check(s, (int)ops);
    pl_kv_get_stats(&s->m, &st);
    assert_int_equal(st.blocks_free, st.blocks_total);
    assert_int_equal(st.blocks_used, 0);
    assert_int_equal(st.swap_used, 0);
    assert_int_equal(st.tokens_stored, 0);
    assert_int_equal(st.n_tables, 0);
    pl_kv_manager_destroy(&s->m);
    free(s->shadow);
    free(s->swap_shadow);
    free(s->cnt_p);
    free(s->cnt_s);
    free(s->fill);
    free(s);
}

static void run_property(int caching, uint64_t default_seed, long default_ops, int32_t W) {
    run_property_groups(caching, default_seed, default_ops, W, 0);
}

static void test_property_caching(void **state) {
    (void)state;
    run_property(1, 20240601, 100000, 0);
}

static void test_property_no_caching(void **state) {
    (void)state;
    run_property(0, 777, 20000, 0);
}

/* Sliding windows: shorter than a block, a few blocks long, not a multiple of the block. */
static void test_property_window(void **state) {
    (void)state;
    run_property(1, 99, 100000, 7);
    run_property(1, 98, 20000, 2);
    run_property(0, 97, 20000, 13);
}

/* KV cache groups (a mixed model's window and global layers): tables of both groups share one
 * pool; only the window group's release, and no hit crosses groups. */
static void test_property_groups(void **state) {
    (void)state;
    run_property_groups(1, 96, 100000, 7, 1);
    run_property_groups(0, 95, 20000, 13, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_errors),
        cmocka_unit_test(test_can_allocate),
        cmocka_unit_test(test_allocate_and_slots),
        cmocka_unit_test(test_prefix_hits),
        cmocka_unit_test(test_eviction_under_pressure),
        cmocka_unit_test(test_fork_and_cow),
        cmocka_unit_test(test_commit_dedup),
        cmocka_unit_test(test_swap),
        cmocka_unit_test(test_caching_disabled),
        cmocka_unit_test(test_property_caching),
        cmocka_unit_test(test_property_no_caching),
        cmocka_unit_test(test_property_window),
        cmocka_unit_test(test_property_groups),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
