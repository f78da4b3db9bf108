/* KV cache groups end to end (kv/cache.h): a random-weight gemma2 written by `pagellm
 * mkmodel --arch gemma2 --sliding-window W` (vocabulary from the shared stories260K), whose
 * layers alternate between a window of W and global attention, run by
 *
 *   - the engine with groups (the default): the window layers' blocks are released behind the
 *     window while the global layers keep theirs, in a pool smaller than the requests need
 *     without it (preemption by swap and by recompute, prefix-cache hits, n > 1, beam search,
 *     n-gram speculation);
 *   - the engine with --no-kv-groups (one table per sequence, every block kept: the code that
 *     test_wtype_reference checks against llama.cpp), in a pool that holds everything.
 *
 * Both get the same KV bytes per run; every greedy token, every sampled token of a seeded n > 1
 * request and every beam must be identical (the kernels' results do not depend on where a
 * block lives, on the batch or on the chunking: kernels/attention.h), and the grouped engine
 * must have released blocks and returned every block at the end.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "engine/engine_parts.h"
#include "engine_util.h"
#include "kv/kv_store.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { W = 24, BSZ = 16, LAYERS = 4, NREQ = 6, PROMPT = 40, GEN = 160 };

static char model_path[512];
static pl_model *model;
static size_t full_block; /* bytes of one block of every layer (f32) */

static int setup(void **state) {
    (void)state;
    snprintf(model_path, sizeof model_path, "/tmp/pl_test_kv_groups_%d.gguf", (int)getpid());
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' mkmodel '%s' --arch gemma2 --vocab-from "
             "'%s/models/stories260K.gguf' --dim 64 --layers %d --heads 4 --kv-heads 2 "
             "--head-dim 16 --ffn 128 --ctx 1024 --seed 11 --sliding-window %d >/dev/null",
             PL_BINARY, model_path, PL_SHARED_DIR, (int)LAYERS, (int)W);
    if (system(cmd) != 0) return -1;
    if (pl_model_load(model_path, &model) != PL_OK) return -1;
    pl_kv_layout l = {.dtype = PL_DT_F32, .block_size = BSZ, .n_kv_heads = model->hp.n_kv_heads,
                      .head_dim = model->hp.head_dim};
    full_block = pl_kv_bytes_per_block(&l, model->hp.n_layers);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    pl_model_destroy(model);
    unlink(model_path);
    return 0;
}

static int spec_ngram; /* the next make_engine speculates with n-gram proposals */

static pl_engine *make_engine(int32_t full_blocks, pl_preemption_mode mode, int32_t swap_blocks,
                              int prefix_cache, int groups_off) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = model_path;
    c.kv_cache_dtype = PL_KV_CACHE_F32;
    c.block_size = BSZ;
    c.kv_cache_memory = (uint64_t)full_blocks * full_block;
    c.swap_space = (uint64_t)swap_blocks * full_block;
    c.preemption_mode = mode;
    c.enable_prefix_caching = prefix_cache;
    c.threads = 2;
    c.max_num_seqs = 16;
    c.max_num_batched_tokens = 64; /* the prompts take several chunks */
    c.kv_groups_off = groups_off;
    c.speculative_ngram = spec_ngram;
    c.num_speculative_tokens = spec_ngram ? 4 : 0;
    pl_engine *e;
    if (pl_engine_create(&c, &e) != PL_OK) fail_msg("engine: %s", pl_last_error());
    return e;
}

/* The model is mixed (half the layers windowed), so only groups release anything. */
static void test_mixed_model(void **state) {
    (void)state;
    int32_t win = 0;
    for (int32_t l = 0; l < model->hp.n_layers; l++) win += pl_model_layer_window(&model->hp, l) == W;
    assert_int_equal(win * 2, model->hp.n_layers);
    assert_int_equal(pl_model_kv_window(&model->hp), 0);
    pl_engine *on = make_engine(8, PL_PREEMPT_RECOMPUTE, 0, 1, 0);
    pl_engine *off = make_engine(8, PL_PREEMPT_RECOMPUTE, 0, 1, 1);
    pl_kv_cache *on_kv = pl_engine_kv_cache(on);
    const pl_kv_manager *mon = pl_kv_cache_manager(on_kv);
    const pl_kv_manager *moff = pl_kv_cache_manager(pl_engine_kv_cache(off));
    assert_int_equal(mon->cfg.kv_groups, 2);
    assert_int_equal(mon->cfg.sliding_window, W);
    assert_int_equal(pl_kv_cache_store(on_kv)->n_layers, LAYERS / 2);
    assert_int_equal(mon->cfg.num_blocks, 2 * moff->cfg.num_blocks); /* half-size blocks */
    assert_int_equal(moff->cfg.kv_groups, 1);
    assert_int_equal(moff->cfg.sliding_window, 0);
    pl_engine_destroy(on);
    pl_engine_destroy(off);
}

static void same_results(const result *a, const result *b, int32_t n, int32_t n_out,
                         int32_t per_req, const char *what) {
    char msg[256];
    if (results_differ(a, b, n, per_req, n_out, msg, sizeof msg))
        fail_msg("%s: %s (first: with KV cache groups, second: without)", what, msg);
}

/* After a run the grouped engine has released blocks and holds none. */
static void check_released(pl_engine *e, int want_preemption, const char *what) {
    pl_engine_stats s;
    pl_engine_get_stats(e, &s);
    printf("    %s: %llu blocks released by the window, %llu preemptions, prefix hits %llu "
           "tokens\n", what, (unsigned long long)s.window_freed_blocks,
           (unsigned long long)s.preemptions, (unsigned long long)s.prefix_hits);
    assert_true(s.window_freed_blocks > 0);
    if (want_preemption) assert_true(s.preemptions > 0);
    assert_int_equal(s.blocks_used, 0);
    assert_int_equal(pl_kv_cache_check(pl_engine_kv_cache(e)), PL_OK);
}

static void make_prompts(int32_t prompts[NREQ][PROMPT]) {
    const int32_t V = model->hp.n_vocab;
    for (int32_t r = 0; r < NREQ; r++) /* requests 0 and 1 share their whole prompt */
        for (int32_t i = 0; i < PROMPT; i++)
            prompts[r][i] = 3 + (int32_t)((7 * (r == 1 ? 0 : r) + 13 * i + i * i) % (V - 3));
}

/* Greedy long generations: the same tokens as every block kept, in a pool where one request's
 * 200 tokens (13 blocks of every layer) fill more than half of it, so requests are preempted. */
static void test_greedy_equal(void **state) {
    (void)state;
    static const struct {
        pl_preemption_mode mode;
        int32_t swap;
        int cache, spec;
    } runs[] = {{PL_PREEMPT_SWAP, 24, 1, 0}, {PL_PREEMPT_RECOMPUTE, 0, 1, 0},
                {PL_PREEMPT_RECOMPUTE, 0, 0, 0}, {PL_PREEMPT_RECOMPUTE, 0, 1, 1}};
    int32_t prompts[NREQ][PROMPT];
    make_prompts(prompts);
    pl_request_params p;
    greedy_params(&p, GEN);
    pl_engine *ref_e = make_engine(NREQ * 14 + 4, PL_PREEMPT_RECOMPUTE, 0, 0, 1);
    result *ref = run_prompt_ids(ref_e, &prompts[0][0], NREQ, PROMPT, &p);
    pl_engine_stats rs;
    pl_engine_get_stats(ref_e, &rs);
    assert_int_equal(rs.window_freed_blocks, 0); /* one table per sequence: nothing released */
    assert_int_equal(rs.preemptions, 0);
    pl_engine_destroy(ref_e);
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        /* 20 blocks of every layer: 40 half blocks; a request holds 13 global halves and at
         * most 4 window halves at its end */
        spec_ngram = runs[k].spec; /* speculation rolls both tables back (truncate) */
        pl_engine *e = make_engine(20, runs[k].mode, runs[k].swap, runs[k].cache, 0);
        spec_ngram = 0;
        result *res = run_prompt_ids(e, &prompts[0][0], NREQ, PROMPT, &p);
        char what[64];
        snprintf(what, sizeof what, "greedy run %d", (int)k);
        same_results(res, ref, NREQ, GEN, 1, what);
        check_released(e, 1, what);
        pl_engine_stats s;
        pl_engine_get_stats(e, &s);
        if (runs[k].mode == PL_PREEMPT_SWAP) assert_true(s.swaps_out > 0); /* both tables moved */
        if (runs[k].spec) assert_true(s.spec_draft_tokens > 0);
        free(res);
        pl_engine_destroy(e);
    }
    free(ref);
}

/* Seeded sampling with n = 3 (forked tables share blocks, copy-on-write) and beam search of
 * width 3 (forks and frees every step): the same completions as every block kept. */
static void test_n_and_beam_equal(void **state) {
    (void)state;
    enum { N_REQ = 3, OUT = 80 };
    int32_t prompts[NREQ][PROMPT];
    make_prompts(prompts);
    for (int beam = 0; beam < 2; beam++) {
        pl_request_params p;
        three_params(&p, OUT, beam);
        pl_engine *ref_e = make_engine(N_REQ * 3 * 8 + 8, PL_PREEMPT_RECOMPUTE, 0, 1, 1);
        result *ref = run_prompt_ids(ref_e, &prompts[0][0], N_REQ, PROMPT, &p);
        pl_engine_destroy(ref_e);
        pl_engine *e = make_engine(24, PL_PREEMPT_RECOMPUTE, 0, 1, 0);
        result *res = run_prompt_ids(e, &prompts[0][0], N_REQ, PROMPT, &p);
        same_results(res, ref, N_REQ, OUT, 3, beam ? "beam" : "n = 3");
        check_released(e, 0, beam ? "beam" : "n = 3");
        free(res);
        free(ref);
        pl_engine_destroy(e);
    }
}

/* A prompt cached by an earlier request: both groups' blocks are hit (the window group's
 * released ones stay cached until evicted; those behind the first computed position's window
 * are not taken again), and the completion is the same as with every block kept. */
static void test_prefix_hits(void **state) {
    (void)state;
    enum { N = 100, OUT = 30 };
    const int32_t V = model->hp.n_vocab;
    int32_t prompt[N];
    for (int32_t i = 0; i < N; i++) prompt[i] = 3 + (int32_t)((5 + 11 * i + 3 * i * i) % (V - 3));
    pl_request_params p;
    greedy_params(&p, OUT);
    pl_engine *ref_e = make_engine(40, PL_PREEMPT_RECOMPUTE, 0, 0, 1);
    result *ref = run_prompt_ids(ref_e, prompt, 1, N, &p);
    pl_engine_destroy(ref_e);
    pl_engine *e = make_engine(40, PL_PREEMPT_RECOMPUTE, 0, 1, 0);
    for (int k = 0; k < 2; k++) {
        result *res = run_prompt_ids(e, prompt, 1, N, &p);
        same_results(res, ref, 1, OUT, 1, k ? "cached prompt" : "first prompt");
        free(res);
    }
    pl_engine_stats s;
    pl_engine_get_stats(e, &s);
    printf("    prefix hits %llu tokens of the %d-token prompt\n",
           (unsigned long long)s.prefix_hits, (int)N);
    /* (N - 1) / 16 = 6 blocks hit in both groups: 96 tokens (hits count per table) */
    assert_int_equal(s.prefix_hits, 2 * 96);
    check_released(e, 0, "prefix hits");
    free(ref);
    pl_engine_destroy(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mixed_model),
        cmocka_unit_test(test_greedy_equal),
        cmocka_unit_test(test_n_and_beam_equal),
        cmocka_unit_test(test_prefix_hits),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
