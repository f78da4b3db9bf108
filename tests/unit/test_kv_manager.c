/* Unit tests for src/kv/manager: each operation alone. The seeded property test of random
 * operations is test_kv_property.c. */
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

/* Layer kinds (kv/cache.h): the pair over two managers, the window table in a small pool of
 * its own. A window pool too small refuses the pair and leaves both pools as they were; each
 * pool gives only its own table's blocks, and the window pool releases behind the window. */
static void test_allocate_pair_kinds(void **state) {
    (void)state;
    pl_kv_manager m, mw;
    pl_kv_manager_config c = small_cfg(32, 0, 1), cw = small_cfg(3, 0, 1);
    cw.sliding_window = 5;
    assert_int_equal(pl_kv_manager_init(&m, &c), PL_OK);
    assert_int_equal(pl_kv_manager_init(&mw, &cw), PL_OK);
    pl_block_table g = {0}, w = {0};
    int32_t tok[20], n_cached = -1;
    seq_tokens(tok, 20, 3);
    /* 13 tokens: 4 blocks each, the window pool has 3 */
    assert_int_equal(pl_kv_allocate_prompt_pair(&m, &mw, &g, &w, tok, 13, 1, 2, 13, &n_cached),
                     PL_ERR_CAPACITY);
    assert_false(g.live || w.live);
    assert_int_equal(pl_kv_num_free(&m), 32);
    assert_int_equal(pl_kv_num_free(&mw), 3);
    /* a first chunk of 8 tokens: 2 blocks from each pool */
    assert_int_equal(pl_kv_allocate_prompt_pair(&m, &mw, &g, &w, tok, 13, 1, 2, 8, &n_cached),
                     PL_OK);
    assert_int_equal(n_cached, 0);
    assert_int_equal(pl_kv_num_free(&m), 30);
    assert_int_equal(pl_kv_num_free(&mw), 1);
    assert_int_equal(pl_kv_commit(&m, &g, tok, 8), PL_OK);
    assert_int_equal(pl_kv_commit(&mw, &w, tok, 8), PL_OK);
    assert_int_equal(w.n_dropped, pl_kv_behind_window(&mw, 8)); /* (8 - 5 + 1) / 4 = 1 */
    assert_int_equal(w.n_dropped, 1);
    assert_int_equal(g.n_dropped, 0);
    /* the rest: 2 more blocks in each pool, the window's from the one it released */
    pl_block_copy cow;
    assert_int_equal(pl_kv_append_slots(&m, &g, 5, &cow), PL_OK);
    assert_int_equal(pl_kv_append_slots(&mw, &w, 5, &cow), PL_OK);
    assert_int_equal(pl_kv_commit(&m, &g, tok, 13), PL_OK);
    assert_int_equal(pl_kv_commit(&mw, &w, tok, 13), PL_OK);
    assert_int_equal(pl_kv_num_free(&m), 28);
    assert_int_equal(w.n_dropped, 2);
    assert_int_equal(pl_kv_num_free(&mw), 3 - (w.n_blocks - w.n_dropped));
    check_ok(&m);
    check_ok(&mw);
    pl_kv_free_table(&m, &g);
    pl_kv_free_table(&mw, &w);
    assert_int_equal(pl_kv_num_free(&m), 32);
    assert_int_equal(pl_kv_num_free(&mw), 3);
    pl_kv_manager_destroy(&m);
    pl_kv_manager_destroy(&mw);
}

/* A sequence's pair of group tables: refused arguments, the smaller of the two groups' hits,
 * and the window table releasing behind the window while the global one keeps everything. */
static void test_allocate_pair(void **state) {
    (void)state;
    pl_kv_manager m;
    pl_kv_manager_config c = small_cfg(32, 0, 1);
    c.sliding_window = 5;
    assert_int_equal(pl_kv_manager_init(&m, &c), PL_OK);
    pl_block_table g = {0}, w = {0}, g2 = {0}, w2 = {0}, solo = {0};
    int32_t tok[20], n_cached = -1;
    seq_tokens(tok, 20, 7);
    assert_int_equal(pl_kv_allocate_prompt_pair(&m, &m, &g, &w, tok, 13, 3, 3, 13, &n_cached),
                     PL_ERR_INVALID_ARG); /* one key for both groups */
    assert_int_equal(pl_kv_allocate_prompt_pair(&m, &m, &g, &g, tok, 13, 1, 2, 13, &n_cached),
                     PL_ERR_INVALID_ARG);
    assert_int_equal(pl_kv_allocate_prompt_pair(&m, &m, &g, &w, tok, 13, 1, 2, 0, &n_cached),
                     PL_ERR_INVALID_ARG);
    assert_false(g.live || w.live);
    assert_int_equal(pl_kv_allocate_prompt_pair(&m, &m, &g, &w, tok, 13, 1, 2, 13, &n_cached), PL_OK);
    assert_int_equal(n_cached, 0);
    assert_true(g.global && !w.global);
    assert_int_equal(pl_kv_commit(&m, &g, tok, 13), PL_OK);
    assert_int_equal(pl_kv_commit(&m, &w, tok, 13), PL_OK);
    assert_int_equal(g.n_dropped, 0);
    assert_int_equal(w.n_dropped, pl_kv_behind_window(&m, 13)); /* (13 - 5 + 1) / 4 = 2 */
    assert_int_equal(w.n_dropped, 2);
    /* Both groups have 12 tokens cached (the window table's released blocks stay cached until
     * evicted), each under its own key; a second pair takes both groups' 12 ... */
    assert_int_equal(pl_kv_allocate_prompt(&m, &solo, tok, 20, 1, &n_cached), PL_OK);
    assert_int_equal(n_cached, 12);
    assert_int_equal(pl_kv_probe_prefix(&m, tok, 20, 2), 12);
    assert_int_equal(pl_kv_allocate_prompt_pair(&m, &m, &g2, &w2, tok, 20, 1, 2, 4, &n_cached), PL_OK);
    assert_int_equal(n_cached, 12);
    assert_int_equal(g2.n_tokens, 16); /* max_new 4 */
    assert_int_equal(w2.n_tokens, 16);
    assert_int_equal(w2.n_dropped, pl_kv_behind_window(&m, 12)); /* hits it does not reach */
    assert_int_equal(g2.n_dropped, 0);
    pl_kv_free_table(&m, &g2);
    pl_kv_free_table(&m, &w2);
    /* ... and with a different salt on the window key nothing is cached there: no hit at all. */
    assert_int_equal(pl_kv_allocate_prompt_pair(&m, &m, &g2, &w2, tok, 20, 1, 9, 20, &n_cached), PL_OK);
    assert_int_equal(n_cached, 0);
    check_ok(&m);
    pl_kv_free_table(&m, &g2);
    pl_kv_free_table(&m, &w2);
    pl_kv_free_table(&m, &solo);
    pl_kv_free_table(&m, &g);
    pl_kv_free_table(&m, &w);
    pl_kv_stats st;
    pl_kv_get_stats(&m, &st);
    assert_int_equal(st.blocks_used, 0);
    check_ok(&m);
    pl_kv_manager_destroy(&m);
}

/* pl_kv_prompt_blocks_needed counts hits a table holds as free and hits on free cached blocks as
 * taken; pl_kv_allocate_shared gives a child the parent's first blocks (a recomputed group's
 * prompt) and new ones for the rest, taking exactly what the count said. */
static void test_allocate_shared(void **state) {
    (void)state;
    pl_kv_manager m;
    pl_kv_manager_config c = small_cfg(12, 0, 1);
    assert_int_equal(pl_kv_manager_init(&m, &c), PL_OK);
    int32_t tok[14], other[14];
    seq_tokens(tok, 14, 100);
    seq_tokens(other, 14, 500);
    pl_block_table a = {0}, b = {0}, d = {0};
    int32_t cached;
    assert_int_equal(pl_kv_prompt_blocks_needed(&m, tok, 10, 0, 0), 3); /* nothing cached */
    assert_int_equal(pl_kv_allocate_prompt(&m, &a, tok, 10, 0, &cached), PL_OK);
    assert_int_equal(pl_kv_commit(&m, &a, tok, 10), PL_OK); /* blocks 0, 1 hashed */
    /* a prompt beginning with a's 8 tokens: its 2 hits are held by a */
    assert_int_equal(pl_kv_prompt_blocks_needed(&m, tok, 14, 0, 0), 2);
    assert_int_equal(pl_kv_prompt_blocks_needed(&m, tok, 14, 0, 2), 2);
    assert_int_equal(pl_kv_prompt_blocks_needed(&m, tok, 14, 7, 0), 4); /* another key */
    assert_int_equal(pl_kv_prompt_blocks_needed(&m, other, 14, 0, 1), 3);
    /* shared: b takes a's first 2 blocks and 2 new ones for its 14 tokens */
    int32_t free0 = m.pool.n_free, needed = pl_kv_prompt_blocks_needed(&m, other, 14, 0, 2);
    assert_int_equal(pl_kv_allocate_shared(&m, &a, 2, &b, 14), PL_OK);
    assert_int_equal(free0 - m.pool.n_free, needed);
    assert_int_equal(b.n_blocks, 4);
    assert_int_equal(b.n_tokens, 14);
    assert_int_equal(b.blocks[0], a.blocks[0]);
    assert_int_equal(b.blocks[1], a.blocks[1]);
    assert_int_equal(ref_of(&m, a.blocks[1]), 2);
    assert_int_equal(ref_of(&m, a.blocks[2]), 1); /* a's partial block is its own */
    check_ok(&m);
    /* b's commit over the shared blocks registers nothing twice */
    assert_int_equal(pl_kv_commit(&m, &b, tok, 12), PL_OK);
    check_ok(&m);
    /* errors: the shared part must be full blocks of the parent, short of the child's end */
    assert_int_equal(pl_kv_allocate_shared(&m, &a, 3, &d, 14), PL_ERR_INVALID_ARG);
    assert_int_equal(pl_kv_allocate_shared(&m, &a, 2, &d, 8), PL_ERR_INVALID_ARG);
    assert_int_equal(pl_kv_allocate_shared(&m, &a, 0, &d, 8), PL_ERR_INVALID_ARG);
    assert_int_equal(pl_kv_allocate_shared(&m, &a, 2, &b, 14), PL_ERR_INVALID_ARG); /* in use */
    assert_int_equal(pl_kv_allocate_shared(&m, &a, 1, &d, 36), PL_ERR_INVALID_ARG); /* > table */
    /* capacity: 3 free, 20 tokens need 5 blocks, 1 shared */
    pl_block_table f = {0};
    assert_int_equal(m.pool.n_free, 7);
    assert_int_equal(pl_kv_allocate_prompt(&m, &f, other, 14, 0, &cached), PL_OK);
    assert_int_equal(m.pool.n_free, 3);
    assert_int_equal(pl_kv_allocate_shared(&m, &a, 1, &d, 20), PL_ERR_CAPACITY);
    assert_false(d.live);
    assert_int_equal(pl_kv_allocate_shared(&m, &a, 1, &d, 16), PL_OK); /* 3 new */
    check_ok(&m);
    pl_kv_free_table(&m, &d);
    pl_kv_free_table(&m, &f);
    /* freed, a's hashed blocks stay cached but free: a hit on them takes them */
    pl_kv_free_table(&m, &b);
    pl_kv_free_table(&m, &a);
    assert_int_equal(pl_kv_prompt_blocks_needed(&m, tok, 14, 0, 0), 4);
    check_ok(&m);
    pl_kv_manager_destroy(&m);
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
        cmocka_unit_test(test_allocate_pair),
        cmocka_unit_test(test_allocate_pair_kinds),
        cmocka_unit_test(test_allocate_shared),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
