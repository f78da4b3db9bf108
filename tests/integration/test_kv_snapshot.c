/* GET /v1/kv/blocks against the block pool's state, from the bottom up:
 *  - pl_kv_block_states names every block as the pool sees it (ref counts, prefix hashes, the
 *    swap pool) through allocate, fork, copy-on-write, commit, free and swap;
 *  - pl_server_kv_blocks_json writes exactly those states, the counts and the block tables;
 *  - the engine publishes the picture only while someone watches, and what it publishes equals
 *    the pool and the sequences' block tables between steps (n = 2 shares its prompt blocks),
 *    and every block is free once the request ends (when and how often it publishes:
 *    tests/unit/test_kv_view.c);
 *  - with layer kinds (a gemma3 made by `pagellm mkmodel`) the picture carries the window pool
 *    too: its blocks' states and each sequence's window table equal the window pool's, blocks
 *    leave the window as the request runs, and none is held once it ends. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "engine/engine_parts.h"
#include "engine/kv_view.h"
#include "kv/manager.h"
#include "server/server.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BS 4

/* What the pool says about block b, in pl_kv_block_state terms. */
static int expected_state(const pl_block_pool *p, int32_t b, int swap) {
    const pl_block *k = &p->blocks[b];
    if (swap) return k->ref > 0 ? PL_KV_BLOCK_SWAPPED : PL_KV_BLOCK_FREE;
    return k->ref > 1 ? PL_KV_BLOCK_SHARED : k->ref == 1 ? PL_KV_BLOCK_USED
                                           : k->hashed   ? PL_KV_BLOCK_CACHED
                                                         : PL_KV_BLOCK_FREE;
}

/* States of m agree with its pools, block for block; returns counts per state. */
static void check_states(const pl_kv_manager *m, int counts[5]) {
    int32_t n = m->pool.num_blocks, ns = m->swap.num_blocks;
    uint8_t *st = malloc((size_t)(n + ns));
    memset(st, 0xee, (size_t)(n + ns));
    pl_kv_block_states(m, st, ns ? st + n : NULL);
    memset(counts, 0, 5 * sizeof *counts);
    for (int32_t i = 0; i < n; i++) {
        assert_int_equal(st[i], expected_state(&m->pool, i, 0));
        counts[st[i]]++;
    }
    for (int32_t i = 0; i < ns; i++) {
        assert_int_equal(st[n + i], expected_state(&m->swap, i, 1));
        counts[st[n + i]]++;
    }
    free(st);
}

static void assert_counts(const pl_kv_manager *m, int free_, int cached, int used, int shared,
                          int swapped) {
    int c[5];
    check_states(m, c);
    assert_int_equal(c[PL_KV_BLOCK_FREE], free_);
    assert_int_equal(c[PL_KV_BLOCK_CACHED], cached);
    assert_int_equal(c[PL_KV_BLOCK_USED], used);
    assert_int_equal(c[PL_KV_BLOCK_SHARED], shared);
    assert_int_equal(c[PL_KV_BLOCK_SWAPPED], swapped);
}

static void test_states_follow_the_pool(void **state) {
    (void)state;
    pl_kv_manager m;
    pl_kv_manager_config c = {.block_size = BS, .num_blocks = 12, .num_swap_blocks = 6,
                              .max_blocks_per_seq = 8, .enable_prefix_caching = 1,
                              .hash_seed = 7};
    assert_int_equal(pl_kv_manager_init(&m, &c), PL_OK);
    /* 12 primary + 6 swap blocks, all free. */
    assert_counts(&m, 18, 0, 0, 0, 0);
    int32_t tok[10];
    for (int i = 0; i < 10; i++) tok[i] = 100 + i;
    pl_block_table a = {0}, b = {0}, x = {0};
    assert_int_equal(pl_kv_allocate_prompt(&m, &a, tok, 10, 0, NULL), PL_OK);
    assert_counts(&m, 15, 0, 3, 0, 0); /* 10 tokens: 3 blocks */
    assert_int_equal(pl_kv_commit(&m, &a, tok, 10), PL_OK); /* two full blocks hashed */
    assert_counts(&m, 15, 0, 3, 0, 0);
    assert_int_equal(pl_kv_fork(&m, &a, &b), PL_OK);
    assert_counts(&m, 15, 0, 0, 3, 0); /* n = 2: everything shared */
    pl_block_copy cow;
    assert_int_equal(pl_kv_append_slots(&m, &b, 1, &cow), PL_OK);
    assert_true(cow.src >= 0);          /* the partial last block was copied on write */
    assert_counts(&m, 14, 0, 2, 2, 0);
    /* Swap the group out: its 4 distinct blocks move, shared ones once. */
    pl_block_table *group[2] = {&a, &b};
    pl_block_copy map[12];
    int32_t n_map;
    assert_int_equal(pl_kv_swap_out(&m, group, 2, map, 12, &n_map), PL_OK);
    int c5[5];
    check_states(&m, c5);
    assert_int_equal(c5[PL_KV_BLOCK_SWAPPED], 4);
    assert_int_equal(c5[PL_KV_BLOCK_USED] + c5[PL_KV_BLOCK_SHARED], 0);
    assert_int_equal(c5[PL_KV_BLOCK_CACHED], 2); /* the hashed primary copies stay cached */
    assert_int_equal(pl_kv_swap_in(&m, group, 2, map, 12, &n_map), PL_OK);
    assert_counts(&m, 12, 2, 2, 2, 0); /* back in fresh blocks; the old copies still cached */
    /* A third sequence with the same prompt hits the cached prefix: those blocks are shared 3x. */
    pl_kv_free_table(&m, &b);
    int32_t hit = -1;
    assert_int_equal(pl_kv_commit(&m, &a, tok, 10), PL_OK);
    assert_int_equal(pl_kv_allocate_prompt(&m, &x, tok, 10, 0, &hit), PL_OK);
    assert_int_equal(hit, 8);
    check_states(&m, c5);
    assert_int_equal(c5[PL_KV_BLOCK_SHARED], 2);
    /* Free all: the hashed blocks stay as free-but-cached, the rest is free. */
    pl_kv_free_table(&m, &a);
    pl_kv_free_table(&m, &x);
    check_states(&m, c5);
    assert_int_equal(c5[PL_KV_BLOCK_USED] + c5[PL_KV_BLOCK_SHARED] + c5[PL_KV_BLOCK_SWAPPED], 0);
    assert_int_equal(c5[PL_KV_BLOCK_CACHED], 2);
    assert_int_equal(pl_kv_manager_check(&m), PL_OK);
    pl_kv_manager_destroy(&m);
}

static void test_json_shape(void **state) {
    (void)state;
    /* 5 primary, 2 swap, 4 window, 3 window swap */
    uint8_t st[14] = {0, 1, 2, 3, 3, 0, 4, 2, 0, 1, 2, 4, 0, 4};
    pl_kv_seq_blocks seqs[2] = {
        {.request_id = 9, .index = 0, .n_tokens = 7, .n_blocks = 2, .first_block = 0,
         .n_window_blocks = 2},
        {.request_id = 9, .index = 1, .swapped = 1, .n_tokens = 3, .n_blocks = 1, .first_block = 4,
         .n_window_blocks = 2},
    };
    /* seq 0: full 3 4, window -1 (released) 3; seq 1 (swapped): 1, window swap 0 2 */
    int32_t ids[7] = {3, 4, -1, 3, 1, 0, 2};
    pl_kv_snapshot k = {.version = 5, .steps = 11, .block_size = 16, .n_blocks = 5,
                        .n_swap_blocks = 2, .n_window_blocks = 4, .n_window_swap_blocks = 3,
                        .states = st, .n_seqs = 2, .seqs = seqs, .block_ids = ids,
                        .has_tables = 1};
    pl_engine_stats s;
    memset(&s, 0, sizeof s);
    s.running = 1, s.waiting = 2, s.prefix_queries = 40, s.prefix_hits = 10, s.preemptions = 3;
    s.window_blocks_total = 12, s.window_blocks_used = 3, s.window_kv_usage = 0.25;
    char *txt = pl_server_kv_blocks_json(&k, &s);
    assert_non_null(txt);
    json_error_t err;
    json_t *j = json_loads(txt, 0, &err);
    if (!j) fail_msg("not JSON (%s): %s", err.text, txt);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "kv.blocks");
    assert_int_equal(json_integer_value(json_object_get(j, "version")), 5);
    assert_int_equal(json_integer_value(json_object_get(j, "num_blocks")), 5);
    json_t *b = json_object_get(j, "blocks"), *sb = json_object_get(j, "swap_blocks");
    assert_int_equal(json_array_size(b), 5);
    assert_int_equal(json_array_size(sb), 2);
    for (int i = 0; i < 5; i++) assert_int_equal(json_integer_value(json_array_get(b, i)), st[i]);
    for (int i = 0; i < 2; i++)
        assert_int_equal(json_integer_value(json_array_get(sb, i)), st[5 + i]);
    json_t *c = json_object_get(j, "counts");
    assert_int_equal(json_integer_value(json_object_get(c, "free")), 2);
    assert_int_equal(json_integer_value(json_object_get(c, "cached")), 1);
    assert_int_equal(json_integer_value(json_object_get(c, "used")), 1);
    assert_int_equal(json_integer_value(json_object_get(c, "shared")), 2);
    assert_int_equal(json_integer_value(json_object_get(c, "swapped")), 1);
    /* the window pool: its own states, its swap pool's, and counts over both */
    assert_int_equal(json_integer_value(json_object_get(j, "num_window_blocks")), 4);
    json_t *wb = json_object_get(j, "window_blocks"), *wc = json_object_get(j, "window_counts");
    assert_int_equal(json_array_size(wb), 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(json_integer_value(json_array_get(wb, i)), st[7 + i]);
    assert_int_equal(json_integer_value(json_object_get(j, "num_window_swap_blocks")), 3);
    json_t *wsb = json_object_get(j, "window_swap_blocks");
    assert_int_equal(json_array_size(wsb), 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(json_integer_value(json_array_get(wsb, i)), st[11 + i]);
    assert_int_equal(json_integer_value(json_object_get(wc, "free")), 2);
    assert_int_equal(json_integer_value(json_object_get(wc, "cached")), 1);
    assert_int_equal(json_integer_value(json_object_get(wc, "used")), 2);
    assert_int_equal(json_integer_value(json_object_get(wc, "shared")), 0);
    assert_int_equal(json_integer_value(json_object_get(wc, "swapped")), 2);
    json_t *stats = json_object_get(j, "stats");
    assert_int_equal(json_integer_value(json_object_get(stats, "waiting")), 2);
    assert_float_equal(json_real_value(json_object_get(stats, "prefix_hit_rate")), 0.25, 1e-9);
    /* layer kinds: the window pool's own figures (the blocks above are the full pool's) */
    assert_int_equal(json_integer_value(json_object_get(stats, "window_blocks_total")), 12);
    assert_int_equal(json_integer_value(json_object_get(stats, "window_blocks_used")), 3);
    assert_float_equal(json_real_value(json_object_get(stats, "window_kv_usage")), 0.25, 1e-9);
    json_t *t = json_object_get(j, "tables");
    assert_int_equal(json_array_size(t), 2);
    json_t *t1 = json_array_get(t, 1);
    assert_true(json_is_true(json_object_get(t1, "swapped")));
    assert_int_equal(json_integer_value(json_array_get(json_object_get(t1, "blocks"), 0)), 1);
    json_t *t0 = json_array_get(t, 0), *t0w = json_object_get(t0, "window_blocks");
    assert_int_equal(json_array_size(json_object_get(t0, "blocks")), 2);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(t0, "blocks"), 1)), 4);
    assert_int_equal(json_array_size(t0w), 2);
    assert_int_equal(json_integer_value(json_array_get(t0w, 0)), -1);
    assert_int_equal(json_integer_value(json_array_get(t0w, 1)), 3);
    json_t *t1w = json_object_get(t1, "window_blocks"); /* ids in the window swap pool */
    assert_int_equal(json_array_size(t1w), 2);
    assert_int_equal(json_integer_value(json_array_get(t1w, 1)), 2);
    json_decref(j);
    free(txt);
    /* Without tables: no "tables" key; no block at all is valid too. */
    k.has_tables = 0;
    k.n_blocks = 0;
    k.n_swap_blocks = 0;
    k.n_window_blocks = 0;
    k.n_window_swap_blocks = 0;
    txt = pl_server_kv_blocks_json(&k, &s);
    j = json_loads(txt, 0, &err);
    assert_non_null(j);
    assert_null(json_object_get(j, "tables"));
    assert_int_equal(json_array_size(json_object_get(j, "blocks")), 0);
    assert_int_equal(json_integer_value(json_object_get(j, "num_window_blocks")), 0);
    assert_int_equal(json_array_size(json_object_get(j, "window_blocks")), 0);
    assert_int_equal(json_array_size(json_object_get(j, "window_swap_blocks")), 0);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "window_counts"),
                                                        "free")), 0);
    json_decref(j);
    free(txt);
}

/* The published picture equals the engine's pool and tables right now (between steps). */
static void check_snapshot_matches(pl_engine *e, const pl_kv_snapshot *k) {
    pl_kv_cache *kv = pl_engine_kv_cache(e);
    const pl_kv_manager *m = pl_kv_cache_manager(kv), *mw = pl_kv_cache_window_manager_c(kv);
    assert_int_equal(k->n_blocks, m->pool.num_blocks);
    assert_int_equal(k->n_swap_blocks, m->swap.num_blocks);
    assert_int_equal(k->n_window_blocks, mw != m ? mw->pool.num_blocks : 0);
    assert_int_equal(k->n_window_swap_blocks, mw != m ? mw->swap.num_blocks : 0);
    for (int32_t i = 0; i < k->n_blocks; i++)
        assert_int_equal(k->states[i], expected_state(&m->pool, i, 0));
    for (int32_t i = 0; i < k->n_swap_blocks; i++)
        assert_int_equal(k->states[k->n_blocks + i], expected_state(&m->swap, i, 1));
    const uint8_t *wst = k->states + k->n_blocks + k->n_swap_blocks;
    for (int32_t i = 0; i < k->n_window_blocks; i++)
        assert_int_equal(wst[i], expected_state(&mw->pool, i, 0));
    for (int32_t i = 0; i < k->n_window_swap_blocks; i++)
        assert_int_equal(wst[k->n_window_blocks + i], expected_state(&mw->swap, i, 1));
    if (!k->has_tables) return;
    int32_t n = 0;
    for (int sw = 0; sw < 2; sw++) { /* running, then swapped: the snapshot's order */
        const pl_group_queue *gq =
            pl_scheduler_queue(pl_engine_scheduler(e), sw ? PL_SEQ_SWAPPED : PL_SEQ_RUNNING);
        for (const pl_seq_group *g = gq->head; g; g = g->next)
            for (int32_t i = 0; i < g->n_seqs; i++) {
                const pl_block_table *t = &g->seqs[i]->table;
                if (!t->live) continue;
                assert_true(n < k->n_seqs);
                const pl_kv_seq_blocks *q = &k->seqs[n++];
                assert_int_equal(q->swapped, sw);
                assert_int_equal(q->request_id, g->id);
                assert_int_equal(q->n_blocks, t->n_blocks);
                assert_int_equal(q->n_tokens, t->n_tokens);
                assert_memory_equal(k->block_ids + q->first_block, t->blocks,
                                    (size_t)t->n_blocks * sizeof *t->blocks);
                const pl_block_table *w = &g->seqs[i]->table_w;
                assert_int_equal(q->n_window_blocks, k->n_window_blocks ? w->n_blocks : 0);
                if (q->n_window_blocks)
                    assert_memory_equal(k->block_ids + q->first_block + q->n_blocks, w->blocks,
                                        (size_t)w->n_blocks * sizeof *w->blocks);
            }
    }
    assert_int_equal(n, k->n_seqs);
}

/* Request id has ended: take its outputs, then the picture of the idle, watched engine (the wait
 * for work publishes the freed pools unless the last step did) into *k: it equals the pools,
 * and no sequence holds any block of any pool. */
static void picture_after_end(pl_engine *e, uint64_t id, pl_kv_snapshot *k) {
    pl_request_output *o;
    while (pl_engine_poll(e, id, 0, &o) == PL_OK) {
        int fin = o->finished;
        pl_request_output_destroy(o);
        if (fin) break;
    }
    pl_engine_wait_for_work(e, 0);
    assert_int_equal(pl_engine_kv_snapshot(e, 1, 0, k), PL_OK);
    check_snapshot_matches(e, k);
    assert_int_equal(k->n_seqs, 0);
    const uint8_t *wst = k->states + k->n_blocks + k->n_swap_blocks;
    for (int32_t i = 0; i < k->n_blocks; i++) assert_true(k->states[i] <= PL_KV_BLOCK_CACHED);
    for (int32_t i = 0; i < k->n_window_blocks; i++) assert_true(wst[i] <= PL_KV_BLOCK_CACHED);
}

static void test_engine_publishes_while_watched(void **state) {
    (void)state;
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = PL_SHARED_DIR "/models/stories260K.gguf";
    c.kv_cache_memory = 4 << 20;
    c.threads = 2;
    pl_engine *e;
    if (pl_engine_create(&c, &e) != PL_OK) fail_msg("engine: %s", pl_last_error());
    pl_request_params p;
    pl_request_params_default(&p);
    p.n = 2;
    p.max_tokens = 40;
    p.ignore_eos = 1;
    uint64_t id;
    /* Nobody watches: steps publish nothing. */
    /* Longer than a block (16 tokens): the prompt's full blocks stay shared by the two
     * sequences whatever they sample (a partly filled last block is copied on the first append,
     * and whether the copies become shared again through the prefix cache depends on the
     * sampled tokens: a shorter prompt made this test flaky). */
    const char *prompt = "Once upon a time, there was a little girl named Lily. She liked to play "
                         "in the park with her friends every day after school.";
    p.has_seed = 1;
    p.seed = 7;
    assert_int_equal(pl_engine_add_request(e, prompt, NULL, 0, &p, &id), PL_OK);
    for (int i = 0; i < 3; i++) assert_int_equal(pl_engine_step(e), PL_OK);
    pl_kv_snapshot k;
    assert_int_equal(pl_engine_kv_snapshot(e, 1, 0, &k), PL_OK); /* asks; nothing yet */
    assert_int_equal(k.version, 0);
    assert_int_equal(k.n_blocks, pl_kv_pool_blocks(pl_kv_cache_manager(pl_engine_kv_cache(e))));
    assert_int_equal(k.n_window_blocks, 0); /* a llama: one pool */
    for (int32_t i = 0; i < k.n_blocks; i++) assert_int_equal(k.states[i], 0);
    pl_kv_snapshot_destroy(&k);
    /* Now watched: the next step publishes (a reader waits for the first picture), tables
     * included; n = 2 shares its prompt. */
    assert_int_equal(pl_engine_step(e), PL_OK);
    assert_int_equal(pl_engine_kv_snapshot(e, 1, 0, &k), PL_OK);
    assert_int_equal(k.version, 1);
    assert_true(k.has_tables);
    assert_int_equal(k.n_seqs, 2);
    check_snapshot_matches(e, &k);
    int shared = 0, used = 0;
    for (int32_t i = 0; i < k.n_blocks; i++) {
        shared += k.states[i] == PL_KV_BLOCK_SHARED;
        used += k.states[i] == PL_KV_BLOCK_USED;
    }
    assert_true(shared > 0);
    assert_true(used > 0);
    uint64_t last = k.version;
    pl_kv_snapshot_destroy(&k);
    /* Run to the end while watched. The engine publishes after a step at most every
     * PL_KV_VIEW_MIN_INTERVAL_MS unless a reader waits (tests/unit/test_kv_view.c drives that
     * with a fake clock); a picture published by this thread's last step equals the pool now. */
    while (pl_engine_has_work(e)) {
        assert_int_equal(pl_engine_step(e), PL_OK);
        assert_int_equal(pl_engine_kv_snapshot(e, 1, 0, &k), PL_OK);
        assert_true(k.version >= last);
        if (k.version > last) check_snapshot_matches(e, &k);
        last = k.version;
        pl_kv_snapshot_destroy(&k);
    }
    picture_after_end(e, id, &k);
    assert_true(k.version >= 2); /* taken after the run, by its last step or by the wait */
    pl_kv_snapshot_destroy(&k);
    pl_engine_destroy(e);
}

/* An engine on a random gemma3 (5 window layers to 1 global, window 16; 4 sequences, 2 threads)
 * with c's KV memory, swap space, preemption mode and step tokens (0: the defaults'). */
static pl_engine *gemma3_engine(const pl_engine_config *want) {
    char path[256], cmd[1024];
    snprintf(path, sizeof path, "/tmp/pl_test_kv_snapshot_gemma3_%d.gguf", (int)getpid());
    snprintf(cmd, sizeof cmd, "'%s' mkmodel '%s' --vocab-from '%s/models/stories260K.gguf' "
             "--arch gemma3 --dim 64 --layers 6 --heads 4 --kv-heads 2 --head-dim 16 --ffn 128 "
             "--sliding-window 16 --ctx 1024 --seed 7 >/dev/null", PL_BINARY, path, PL_SHARED_DIR);
    assert_int_equal(system(cmd), 0);
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = path;
    c.kv_cache_memory = want->kv_cache_memory;
    c.swap_space = want->swap_space;
    c.preemption_mode = want->preemption_mode;
    if (want->max_num_batched_tokens) c.max_num_batched_tokens = want->max_num_batched_tokens;
    c.max_num_seqs = 4;
    c.threads = 2;
    pl_engine *e;
    if (pl_engine_create(&c, &e) != PL_OK) fail_msg("engine: %s", pl_last_error());
    unlink(path);
    return e;
}

/* A gemma3 (5 window layers to 1 global, window 16): layer kinds give its window layers a pool
 * of their own, and the picture carries it. */
static void test_engine_window_pool(void **state) {
    (void)state;
    pl_engine *e = gemma3_engine(&(pl_engine_config){.kv_cache_memory = 4 << 20});
    const pl_kv_manager *mw = pl_kv_cache_window_manager_c(pl_engine_kv_cache(e));
    assert_ptr_not_equal(mw, pl_kv_cache_manager(pl_engine_kv_cache(e))); /* two pools */
    pl_request_params p;
    pl_request_params_default(&p);
    p.n = 2; /* the forked window tables share their blocks until they diverge */
    p.max_tokens = 24; /* ~20 prompt tokens and 24 more: two blocks leave the window */
    p.ignore_eos = 1;
    p.has_seed = 1;
    p.seed = 3;
    uint64_t id;
    assert_int_equal(pl_engine_add_request(e, "Once upon a time, there was a little girl named "
                                           "Lily. She liked to play in the park.", NULL, 0, &p,
                                           &id), PL_OK);
    pl_kv_snapshot k;
    assert_int_equal(pl_engine_kv_snapshot(e, 1, 0, &k), PL_OK); /* from now on watched */
    pl_kv_snapshot_destroy(&k);
    uint64_t last = 0;
    int used = 0, released = 0;
    while (pl_engine_has_work(e)) {
        /* a step publishes at most every PL_KV_VIEW_MIN_INTERVAL_MS: wait that long, so that
         * every step does and the picture sees each block leave the window */
        usleep((PL_KV_VIEW_MIN_INTERVAL_MS + 2) * 1000);
        assert_int_equal(pl_engine_step(e), PL_OK);
        assert_int_equal(pl_engine_kv_snapshot(e, 1, 0, &k), PL_OK);
        assert_int_equal(k.n_window_blocks, mw->pool.num_blocks);
        if (k.version > last) {
            check_snapshot_matches(e, &k);
            for (int32_t i = 0; i < k.n_window_blocks; i++)
                used += k.states[k.n_blocks + k.n_swap_blocks + i] >= PL_KV_BLOCK_USED;
            for (int32_t i = 0; i < k.n_seqs; i++)
                released += k.seqs[i].n_window_blocks > 0 &&
                            k.block_ids[k.seqs[i].first_block + k.seqs[i].n_blocks] < 0;
        }
        last = k.version;
        pl_kv_snapshot_destroy(&k);
    }
    assert_true(used > 0);     /* window blocks held while it ran */
    assert_true(released > 0); /* and its first blocks left the window (-1 in its table) */
    picture_after_end(e, id, &k);
    pl_kv_snapshot_destroy(&k);
    pl_engine_stats st;
    pl_engine_get_stats(e, &st);
    assert_true(st.window_freed_blocks > 0);
    pl_engine_destroy(e);
}




/* A budget that keeps layer kinds (the window pool: 16 blocks of 10 KB) and leaves the full pool
 * 24 blocks of 2 KB (384 tokens) for four sequences of ~147: they swap. */
enum { KV_SWAPPED = 212992 };
/* The window pool's own swap pool: under swap preemption a gemma3's swapped sequences keep their
 * window tables there, and every picture shows those blocks swapped (state 4) and the tables'
 * ids, as the pools and the swapped queue hold them. */
static void test_engine_window_pool_swapped(void **state) {
    (void)state;
    /* 64 tokens a step: the window pool is 4 windows and a chunk (16 blocks) */
    pl_engine *e = gemma3_engine(&(pl_engine_config){.kv_cache_memory = KV_SWAPPED,
                                                      .swap_space = 1 << 20,
                                                      .preemption_mode = PL_PREEMPT_SWAP,
                                                      .max_num_batched_tokens = 64});
    pl_request_params p;
    pl_request_params_default(&p);
    p.max_tokens = 120;
    p.ignore_eos = 1;
    uint64_t ids[4];
    for (int i = 0; i < 4; i++)
        if (pl_engine_add_request(e, "Once upon a time, there was a little girl named Lily. She "
                                  "liked to play in the park.", NULL, 0, &p, &ids[i]) != PL_OK)
            fail_msg("request %d: %s", i, pl_last_error());
    pl_kv_snapshot k;
    assert_int_equal(pl_engine_kv_snapshot(e, 1, 0, &k), PL_OK); /* from now on watched */
    assert_true(k.n_window_blocks > 0 && k.n_window_swap_blocks > 0);
    pl_kv_snapshot_destroy(&k);
    uint64_t last = 0;
    int swapped_blocks = 0, swapped_tables = 0;
    while (pl_engine_has_work(e)) {
        usleep((PL_KV_VIEW_MIN_INTERVAL_MS + 2) * 1000);
        assert_int_equal(pl_engine_step(e), PL_OK);
        assert_int_equal(pl_engine_kv_snapshot(e, 1, 0, &k), PL_OK);
        if (k.version > last) {
            check_snapshot_matches(e, &k);
            const uint8_t *wsw = k.states + k.n_blocks + k.n_swap_blocks + k.n_window_blocks;
            for (int32_t i = 0; i < k.n_window_swap_blocks; i++)
                swapped_blocks += wsw[i] == PL_KV_BLOCK_SWAPPED;
            for (int32_t i = 0; i < k.n_seqs; i++)
                swapped_tables += k.seqs[i].swapped && k.seqs[i].n_window_blocks > 0;
        }
        last = k.version;
        pl_kv_snapshot_destroy(&k);
        for (int i = 0; i < 4; i++) {
            pl_request_output *o;
            while (pl_engine_poll(e, ids[i], 0, &o) == PL_OK) pl_request_output_destroy(o);
        }
    }
    pl_engine_stats st;
    pl_engine_get_stats(e, &st);
    print_message("window pool swapped: %d swaps out, %d swapped window blocks and %d swapped "
                  "tables seen\n", (int)st.swaps_out, swapped_blocks, swapped_tables);
    assert_true(swapped_blocks > 0); /* the window pool's blocks went to its swap pool */
    assert_true(swapped_tables > 0); /* and the swapped tables named them */
    pl_engine_wait_for_work(e, 0);
    assert_int_equal(pl_engine_kv_snapshot(e, 1, 0, &k), PL_OK);
    check_snapshot_matches(e, &k);
    const uint8_t *wsw = k.states + k.n_blocks + k.n_swap_blocks + k.n_window_blocks;
    for (int32_t i = 0; i < k.n_window_swap_blocks; i++) assert_int_equal(wsw[i], PL_KV_BLOCK_FREE);
    pl_kv_snapshot_destroy(&k);
    pl_engine_destroy(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_states_follow_the_pool),
        cmocka_unit_test(test_json_shape),
        cmocka_unit_test(test_engine_publishes_while_watched),
        cmocka_unit_test(test_engine_window_pool),
        cmocka_unit_test(test_engine_window_pool_swapped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
