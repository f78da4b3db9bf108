/* The engine with the real stories260K model: continuous batching, preemption (recompute and
 * swap), determinism across batches, parallel sampling and prefix caching through the block
 * stats, stopping rules, aborts. After every test the KV pool must be entirely free. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "../ci_env.h"
#include "engine_util.h"

#include "engine/engine_parts.h"
#include "engine_pool.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

static const char *MODEL = PL_SHARED_DIR "/models/stories260K.gguf";
static const char *PROMPTS[] = {
    "Once upon a time", "Lily and Tom went to the park", "The little dog was sad because",
    "One day, a big red ball", "Sam liked to eat apples", "There was a tiny bird in a tree",
    "Mom said it was time for bed", "The sun was shining and",
};
enum { N_PROMPTS = sizeof PROMPTS / sizeof PROMPTS[0] };

static const char *swap_path; /* file-backed swap pool, when set */

static pl_engine *make_engine(uint64_t kv_bytes, int32_t block_size, pl_preemption_mode mode,
                              uint64_t swap, int prefix_cache) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = MODEL;
    c.kv_cache_memory = kv_bytes;
    c.block_size = block_size;
    c.preemption_mode = mode;
    c.swap_space = swap;
    c.enable_prefix_caching = prefix_cache;
    c.swap_path = swap ? swap_path : NULL;
    c.threads = 2;
    c.max_num_seqs = 64;
    c.max_num_batched_tokens = 256;
    pl_engine *e;
    if (pl_engine_create(&c, &e) != PL_OK) fail_msg("engine: %s", pl_last_error());
    return e;
}

static void assert_pool_free(pl_engine *e) {
    assert_engine_pool_free(e);
}

static void test_reference_text(void **state) {
    (void)state;
    pl_engine *e = make_engine(64 << 20, 16, PL_PREEMPT_RECOMPUTE, 0, 1);
    pl_request_params p;
    greedy_params(&p, 48);
    uint64_t id;
    assert_int_equal(pl_engine_add_request(e, "Once upon a time", NULL, 0, &p, &id), PL_OK);
    static result r;
    memset(&r, 0, sizeof r);
    run_all(e, &id, &r, 1);
    assert_string_equal(r.text[0], ", there was a little girl named Lily. She loved to play outside "
                                   "in the park. One day, she saw a big, red ball. She wanted to play "
                                   "with it,");
    assert_int_equal(r.n_ids[0], 48);
    assert_int_equal(r.finish[0], PL_FINISH_LENGTH);
    assert_int_equal(r.n_prompt, 5);
    assert_pool_free(e);
    pl_engine_destroy(e);
}

/* Run all prompts (greedy or seeded sampling) in one engine, each request `n` completions. */
static void run_batch(pl_engine *e, int count, int sampled, result *res) {
    run_prompt_batch(e, PROMPTS, N_PROMPTS, count, sampled, res);
}

static void test_batch_determinism(void **state) {
    (void)state;
    static result alone[32], batch[32];
    for (int sampled = 0; sampled < 2; sampled++) {
        pl_engine *e = make_engine(64 << 20, 16, PL_PREEMPT_RECOMPUTE, 0, 1);
        run_batch(e, 32, sampled, batch);
        assert_pool_free(e);
        pl_engine_destroy(e);
        for (int i = 0; i < 32; i += 5) {
            pl_engine *e1 = make_engine(64 << 20, 16, PL_PREEMPT_RECOMPUTE, 0, 1);
            pl_request_params p;
            greedy_params(&p, 40 + 7 * (i % 5));
            if (sampled) {
                p.sampling.temperature = 0.9f;
                p.sampling.top_p = 0.95f;
                p.has_seed = 1;
                p.seed = 1000 + (uint64_t)i;
            }
            uint64_t id;
            memset(&alone[i], 0, sizeof alone[i]);
            assert_int_equal(pl_engine_add_request(e1, PROMPTS[i % N_PROMPTS], NULL, 0, &p, &id),
                             PL_OK);
            run_all(e1, &id, &alone[i], 1);
            assert_int_equal(alone[i].n_ids[0], batch[i].n_ids[0]);
            assert_memory_equal(alone[i].ids[0], batch[i].ids[0],
                                (size_t)alone[i].n_ids[0] * sizeof(int32_t));
            assert_string_equal(alone[i].text[0], batch[i].text[0]);
            assert_pool_free(e1);
            pl_engine_destroy(e1);
        }
    }
}

static void test_preemption_identical(void **state) {
    (void)state;
    static result ref[24], got[24];
    pl_engine *e = make_engine(64 << 20, 16, PL_PREEMPT_RECOMPUTE, 0, 0);
    run_batch(e, 24, 0, ref);
    pl_engine_destroy(e);
    /* stories260K: 640 bytes per token with f16 KV, 10 KiB per block of 16: 100 KiB holds 10
     * blocks, and 24 requests of 45-80 tokens (4-6 blocks each) must preempt many times. */
    char dir[] = "/tmp/pl_swap_XXXXXX", file[64];
    assert_non_null(mkdtemp(dir));
    snprintf(file, sizeof file, "%s/swap.bin", dir);
    for (int mode = 0; mode < 3; mode++) { /* recompute, swap in RAM, swap in a file */
        swap_path = mode == 2 ? file : NULL;
        for (int sampled = 0; sampled < 2; sampled++) {
            e = make_engine(64 << 20, 16, PL_PREEMPT_RECOMPUTE, 0, 0);
            run_batch(e, 24, sampled, ref);
            pl_engine_destroy(e);
            e = make_engine(100 * 1024, 16, mode ? PL_PREEMPT_SWAP : PL_PREEMPT_RECOMPUTE,
                            mode ? 2 << 20 : 0, 0);
            run_batch(e, 24, sampled, got);
            pl_engine_stats s;
            pl_engine_get_stats(e, &s);
            print_message("mode %s sampled %d: %llu preemptions (%llu by swap)\n",
                          mode == 2 ? "swap file" : mode ? "swap" : "recompute", sampled,
                          (unsigned long long)s.preemptions, (unsigned long long)s.swaps_out);
            assert_true(s.preemptions >= 5);
            if (mode) assert_true(s.swaps_out >= 5);
            for (int i = 0; i < 24; i++) {
                assert_int_equal(ref[i].n_ids[0], got[i].n_ids[0]);
                assert_memory_equal(ref[i].ids[0], got[i].ids[0],
                                    (size_t)ref[i].n_ids[0] * sizeof(int32_t));
                assert_string_equal(ref[i].text[0], got[i].text[0]);
            }
            assert_pool_free(e);
            pl_engine_destroy(e);
        }
    }
    unlink(file);
    rmdir(dir);
    swap_path = NULL;
}

/* A prompt of exactly n token ids drawn from the reference story (valid, non-special ids). */
static void story_ids(int32_t *ids, int32_t n, int32_t salt) {
    static const int32_t base[] = {403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395,
                                   317, 426, 338, 401, 396, 267, 337, 410, 408, 419, 292, 411};
    ids[0] = 1;
    for (int32_t i = 1; i < n; i++) ids[i] = base[(i + salt) % 25];
}

static void test_parallel_sampling_shares_prompt(void **state) {
    (void)state;
    pl_engine *e = make_engine(8 << 20, 16, PL_PREEMPT_RECOMPUTE, 0, 0);
    int32_t ids[40];
    story_ids(ids, 40, 0); /* 2 full blocks + 8 tokens */
    pl_request_params p;
    pl_request_params_default(&p);
    p.n = 4;
    p.max_tokens = 20;
    p.ignore_eos = 1;
    p.has_seed = 1;
    p.seed = 7;
    uint64_t id;
    assert_int_equal(pl_engine_add_request(e, NULL, ids, 40, &p, &id), PL_OK);
    pl_engine_stats s;
    assert_int_equal(pl_engine_step(e), PL_OK); /* prefill, fork into 4, sample */
    pl_engine_get_stats(e, &s);
    assert_int_equal(s.blocks_used, 3);        /* the prompt's 3 blocks, once */
    assert_int_equal(pl_engine_step(e), PL_OK); /* each appends: the shared tail is copied */
    pl_engine_get_stats(e, &s);
    assert_int_equal(s.blocks_used, 2 + 4);    /* 2 shared full blocks + 4 private tails */
    static result r;
    memset(&r, 0, sizeof r);
    run_all(e, &id, &r, 1);
    for (int k = 0; k < 4; k++) {
        assert_int_equal(r.n_ids[k], 20);
        assert_int_equal(r.finish[k], PL_FINISH_LENGTH);
    }
    /* Different seeds per sequence: the completions are not all equal. */
    assert_true(memcmp(r.ids[0], r.ids[1], 20 * sizeof(int32_t)) ||
                memcmp(r.ids[0], r.ids[2], 20 * sizeof(int32_t)));
    assert_pool_free(e);
    pl_engine_destroy(e);
}

/* best_of = 5, n = 2 returns exactly the 2 best by cumulative log-probability of the 5 that
 * best_of = n = 5 streams with the same seed (sequence i draws from the same RNG either way). */
static void test_best_of(void **state) {
    (void)state;
    pl_engine *e = make_engine(8 << 20, 16, PL_PREEMPT_RECOMPUTE, 0, 1);
    pl_request_params p;
    pl_request_params_default(&p);
    p.n = 5;
    p.best_of = 5;
    p.max_tokens = 12;
    p.ignore_eos = 1;
    p.has_seed = 1;
    p.seed = 3;
    p.logprobs = 0; /* streamed completions report their cumulative logprob only when asked */
    uint64_t id;
    static result all, best;
    memset(&all, 0, sizeof all);
    memset(&best, 0, sizeof best);
    assert_int_equal(pl_engine_add_request(e, "Once upon a time", NULL, 0, &p, &id), PL_OK);
    run_all(e, &id, &all, 1);
    p.n = 2;
    p.logprobs = -1;
    assert_int_equal(pl_engine_add_request(e, "Once upon a time", NULL, 0, &p, &id), PL_OK);
    run_all(e, &id, &best, 1);
    /* The two best of the five, by cumulative logprob (distinct, so the order is defined). */
    int first = -1, second = -1;
    for (int k = 0; k < 5; k++) {
        assert_int_equal(all.n_ids[k], 12);
        double sum = 0;
        for (int t = 0; t < 12; t++) sum += all.logprobs[k][t];
        assert_true(fabs(sum - all.cum[k]) < 1e-4);
        if (first < 0 || all.cum[k] > all.cum[first]) second = first, first = k;
        else if (second < 0 || all.cum[k] > all.cum[second]) second = k;
    }
    for (int k = 0; k < 5; k++)
        if (k != first && k != second) assert_true(all.cum[k] < all.cum[second]);
    assert_true(all.cum[first] > all.cum[second]);
    /* Seed 3: the best two are not the first two sequences, so "the first n" would differ. */
    assert_true(first >= 2 || second >= 2);
    const int want[2] = {first, second};
    for (int k = 0; k < 2; k++) {
        assert_int_equal(best.n_ids[k], 12);
        assert_memory_equal(best.ids[k], all.ids[want[k]], 12 * sizeof(int32_t));
        assert_string_equal(best.text[k], all.text[want[k]]);
        assert_true(best.cum[k] == all.cum[want[k]]);
        assert_int_equal(best.finish[k], PL_FINISH_LENGTH);
    }
    assert_int_equal(best.n_ids[2], 0); /* only n completions */
    assert_pool_free(e);
    pl_engine_destroy(e);
}

static void test_prefix_cache_skips_shared_tokens(void **state) {
    (void)state;
    pl_engine *e = make_engine(8 << 20, 16, PL_PREEMPT_RECOMPUTE, 0, 1);
    int32_t a[100], b[110];
    story_ids(a, 100, 3);
    memcpy(b, a, 96 * sizeof(int32_t)); /* 6 full blocks in common */
    story_ids(b + 96, 14, 11);
    pl_request_params p;
    greedy_params(&p, 4);
    uint64_t ia, ib;
    static result ra, rb;
    memset(&ra, 0, sizeof ra);
    memset(&rb, 0, sizeof rb);
    assert_int_equal(pl_engine_add_request(e, NULL, a, 100, &p, &ia), PL_OK);
    run_all(e, &ia, &ra, 1);
    pl_engine_stats s0, s1;
    pl_engine_get_stats(e, &s0);
    assert_int_equal(s0.prompt_tokens, 100);
    assert_int_equal(pl_engine_add_request(e, NULL, b, 110, &p, &ib), PL_OK);
    run_all(e, &ib, &rb, 1);
    pl_engine_get_stats(e, &s1);
    assert_int_equal(rb.n_cached, 96);
    assert_int_equal(s1.prompt_tokens - s0.prompt_tokens, 110 - 96);
    assert_true(s1.prefix_hits >= 96);
    /* The same request again computes only its last block's tokens (at least one token). */
    uint64_t ic;
    static result rc;
    memset(&rc, 0, sizeof rc);
    assert_int_equal(pl_engine_add_request(e, NULL, b, 110, &p, &ic), PL_OK);
    run_all(e, &ic, &rc, 1);
    assert_int_equal(rc.n_cached, 96);
    assert_memory_equal(rc.ids[0], rb.ids[0], 4 * sizeof(int32_t));
    assert_pool_free(e);
    pl_engine_destroy(e);
}

/* Prefix caching changes what is computed, never the result: the same requests, one after the
 * other, in an engine with prefix caching and one without give bitwise-equal ids and
 * log-probabilities. Hits that end mid-block (the prompt or the shared prefix ends inside a
 * block, a prompt of whole blocks whose last block is recomputed), a sampled request over a hit,
 * and a hit after a long prompt evicted most cached blocks of a 16-block pool. */
enum { PC_REQS = 7 };

static void prefix_requests(pl_engine *e, result *res) {
    int32_t a[50], b[60], d[210];
    story_ids(a, 50, 3);
    memcpy(b, a, 40 * sizeof(int32_t)); /* shares 2.5 blocks with a */
    story_ids(b + 40, 20, 11);
    story_ids(d, 210, 7);
    struct { const int32_t *ids; int32_t n; int sampled; } req[PC_REQS] = {
        {a, 50, 0}, {a, 50, 0}, {b, 60, 0}, {a, 48, 0}, {a, 50, 1}, {d, 210, 0}, {a, 50, 0},
    };
    for (int i = 0; i < PC_REQS; i++) {
        pl_request_params p;
        greedy_params(&p, 8);
        p.logprobs = 0;
        if (req[i].sampled) {
            p.sampling.temperature = 0.8f;
            p.n = 2;
            p.has_seed = 1;
            p.seed = 5;
        }
        uint64_t id;
        memset(&res[i], 0, sizeof res[i]);
        assert_int_equal(pl_engine_add_request(e, NULL, req[i].ids, (size_t)req[i].n, &p, &id),
                         PL_OK);
        run_all(e, &id, &res[i], 1);
        assert_pool_free(e);
    }
}

static void test_prefix_cache_matches_no_cache(void **state) {
    (void)state;
    static result pc[PC_REQS], nc[PC_REQS];
    const uint64_t pool = 16 * 16 * 640; /* 16 blocks of 16 tokens (640 B a token, f16 KV) */
    pl_engine *e = make_engine(pool, 16, PL_PREEMPT_RECOMPUTE, 0, 1);
    prefix_requests(e, pc);
    pl_engine_destroy(e);
    e = make_engine(pool, 16, PL_PREEMPT_RECOMPUTE, 0, 0);
    prefix_requests(e, nc);
    pl_engine_destroy(e);
    const int32_t cached[PC_REQS] = {0, 48, 32, 32, 48, 0, -1};
    for (int i = 0; i < PC_REQS; i++) {
        if (getenv("PC_DEBUG")) print_message("request %d: %d cached\n", i, pc[i].n_cached);
        assert_int_equal(nc[i].n_cached, 0);
        if (cached[i] >= 0) assert_int_equal(pc[i].n_cached, cached[i]);
        for (int k = 0; k < RES_MAX_N; k++) {
            size_t n = (size_t)nc[i].n_ids[k];
            if (pc[i].n_ids[k] != nc[i].n_ids[k] || memcmp(pc[i].ids[k], nc[i].ids[k], n * 4) ||
                memcmp(pc[i].logprobs[k], nc[i].logprobs[k], n * sizeof(float)))
                fail_msg("request %d (%d cached) completion %d: ids or logprobs differ from the "
                         "engine without prefix caching", i, pc[i].n_cached, k);
        }
    }
    assert_int_equal(pc[4].n_ids[1], 8); /* the sampled request's two completions */
    /* The long prompt evicted some of a's cached blocks (the pool holds 16): a partial hit. */
    assert_true(pc[6].n_cached > 0 && pc[6].n_cached < 48);
}

static void test_abort_frees_blocks(void **state) {
    (void)state;
    pl_engine *e = make_engine(8 << 20, 16, PL_PREEMPT_RECOMPUTE, 0, 1);
    pl_request_params p;
    greedy_params(&p, 200);
    uint64_t id[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(pl_engine_add_request(e, PROMPTS[i], NULL, 0, &p, &id[i]), PL_OK);
    /* Nothing has run yet: a poll that waits ends with PL_ERR_TIMEOUT (not an error of the
     * request, not "capacity"). */
    pl_request_output *none = NULL;
    assert_int_equal(pl_engine_poll(e, id[0], 20, &none), PL_ERR_TIMEOUT);
    assert_null(none);
    for (int i = 0; i < 10; i++) assert_int_equal(pl_engine_step(e), PL_OK);
    pl_engine_stats s;
    pl_engine_get_stats(e, &s);
    assert_true(s.blocks_used > 0);
    pl_engine_abort(e, id[1]);
    pl_engine_release(e, id[2]); /* a client that went away */
    assert_int_equal(pl_engine_step(e), PL_OK);
    static result r1;
    memset(&r1, 0, sizeof r1);
    collect(e, id[1], &r1);
    assert_true(r1.finished);
    assert_int_equal(r1.finish[0], PL_FINISH_ABORT);
    assert_int_equal(pl_engine_poll(e, id[2], 0, &(pl_request_output *){NULL}), PL_ERR_NOT_FOUND);
    pl_engine_abort(e, id[0]);
    assert_int_equal(pl_engine_step(e), PL_OK);
    assert_pool_free(e);
    pl_engine_destroy(e); /* the unpolled output of id[0] is freed here */
}

static void test_stop_rules(void **state) {
    (void)state;
    pl_engine *e = make_engine(8 << 20, 16, PL_PREEMPT_RECOMPUTE, 0, 1);
    const char *stops[] = {"Lily"};
    static result r[4];
    memset(r, 0, sizeof r);
    uint64_t id[4];
    pl_request_params p;
    greedy_params(&p, 48);
    p.stop = stops;
    p.n_stop = 1;
    assert_int_equal(pl_engine_add_request(e, "Once upon a time", NULL, 0, &p, &id[0]), PL_OK);
    p.include_stop_str_in_output = 1;
    assert_int_equal(pl_engine_add_request(e, "Once upon a time", NULL, 0, &p, &id[1]), PL_OK);
    /* Stop id 432 (",") is the first greedy token; min_tokens 3 masks it for 3 tokens. */
    int32_t stop_ids[] = {432};
    greedy_params(&p, 48);
    p.stop_token_ids = stop_ids;
    p.n_stop_token_ids = 1;
    assert_int_equal(pl_engine_add_request(e, "Once upon a time", NULL, 0, &p, &id[2]), PL_OK);
    p.min_tokens = 3;
    assert_int_equal(pl_engine_add_request(e, "Once upon a time", NULL, 0, &p, &id[3]), PL_OK);
    run_all(e, id, r, 4);
    assert_string_equal(r[0].text[0], ", there was a little girl named ");
    assert_int_equal(r[0].finish[0], PL_FINISH_STOP);
    assert_string_equal(r[1].text[0], ", there was a little girl named Lily");
    assert_int_equal(r[2].n_ids[0], 1);
    assert_int_equal(r[2].ids[0][0], 432);
    assert_string_equal(r[2].text[0], "");
    assert_int_equal(r[2].finish[0], PL_FINISH_STOP);
    assert_true(r[3].n_ids[0] > 3);
    for (int t = 0; t < 3; t++) assert_int_not_equal(r[3].ids[0][t], 432);
    assert_int_equal(r[3].ids[0][r[3].n_ids[0] - 1], 432);
    assert_pool_free(e);
    pl_engine_destroy(e);
}

static void test_refusals(void **state) {
    (void)state;
    pl_engine *e = make_engine(100 * 1024, 16, PL_PREEMPT_RECOMPUTE, 0, 1);
    pl_request_params p;
    greedy_params(&p, 2100); /* > the model's 2048-token context */
    uint64_t id;
    assert_int_equal(pl_engine_add_request(e, "Once upon a time", NULL, 0, &p, &id),
                     PL_ERR_INVALID_ARG);
    if (!strstr(pl_last_error(), "maximum context length is 2048")) fail_msg("%s", pl_last_error());
    greedy_params(&p, 300); /* fits the model, not the 10-block pool */
    assert_int_equal(pl_engine_add_request(e, "Once upon a time", NULL, 0, &p, &id),
                     PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "KV blocks"));
    int32_t bad[] = {1, 5000};
    greedy_params(&p, 4);
    assert_int_equal(pl_engine_add_request(e, NULL, bad, 2, &p, &id), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "5000"));
    assert_int_equal(pl_engine_add_request(e, NULL, bad, 0, &p, &id), PL_ERR_INVALID_ARG);
    p.n = 0;
    assert_int_equal(pl_engine_add_request(e, "x", NULL, 0, &p, &id), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "n must be"));
    greedy_params(&p, 4);
    p.sampling.top_p = 2;
    assert_int_equal(pl_engine_add_request(e, "x", NULL, 0, &p, &id), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "top_p"));
    assert_pool_free(e);
    pl_engine_destroy(e);
}

/* Greedy, seeded parallel sampling, best_of and beam search in one batch give what each gives
 * alone. */
static void submit_mixed(pl_engine *e, int which, uint64_t *id) {
    pl_request_params p;
    greedy_params(&p, 24);
    switch (which) {
    case 1: p.sampling.temperature = 0.8f; p.n = 3; p.has_seed = 1; p.seed = 11; break;
    case 2: p.sampling.temperature = 1.0f; p.n = 2; p.best_of = 4; p.has_seed = 1; p.seed = 12; break;
    case 3: p.use_beam_search = 1; p.best_of = 3; p.n = 2; p.ignore_eos = 0; break;
    default: break;
    }
    assert_int_equal(pl_engine_add_request(e, PROMPTS[which], NULL, 0, &p, id), PL_OK);
}

static void test_mixed_methods_in_one_batch(void **state) {
    (void)state;
    static result alone[4], mixed[4];
    memset(alone, 0, sizeof alone);
    memset(mixed, 0, sizeof mixed);
    for (int w = 0; w < 4; w++) {
        pl_engine *e = make_engine(8 << 20, 16, PL_PREEMPT_RECOMPUTE, 0, 1);
        uint64_t id;
        submit_mixed(e, w, &id);
        run_all(e, &id, &alone[w], 1);
        pl_engine_destroy(e);
    }
    pl_engine *e = make_engine(8 << 20, 16, PL_PREEMPT_RECOMPUTE, 0, 1);
    uint64_t ids[4];
    for (int w = 0; w < 4; w++) submit_mixed(e, w, &ids[w]);
    run_all(e, ids, mixed, 4);
    for (int w = 0; w < 4; w++)
        for (int k = 0; k < RES_MAX_N; k++) {
            assert_int_equal(alone[w].n_ids[k], mixed[w].n_ids[k]);
            assert_memory_equal(alone[w].ids[k], mixed[w].ids[k],
                                (size_t)alone[w].n_ids[k] * sizeof(int32_t));
            assert_string_equal(alone[w].text[k], mixed[w].text[k]);
        }
    assert_int_equal(mixed[1].n_ids[2], 24); /* the three samples of request 1 */
    assert_true(mixed[3].n_ids[1] > 0);      /* two beams returned */
    assert_pool_free(e);
    pl_engine_destroy(e);
}

/* Bitwise identical tokens and log-probabilities with 1 and 2 worker threads (every kernel splits
 * work without changing any row's arithmetic). */
static void test_thread_count_invariance(void **state) {
    (void)state;
    static result r[2][4];
    memset(r, 0, sizeof r);
    for (int t = 0; t < 2; t++) {
        pl_engine_config c;
        pl_engine_config_default(&c);
        c.model_path = PL_SHARED_DIR "/models/synth-tiny-q4_k_m.gguf";
        c.kv_cache_memory = 16 << 20;
        c.threads = t + 1;
        pl_engine *e;
        if (pl_engine_create(&c, &e) != PL_OK) fail_msg("engine: %s", pl_last_error());
        uint64_t ids[4];
        for (int i = 0; i < 4; i++) {
            pl_request_params p;
            greedy_params(&p, 24);
            p.logprobs = 2;
            assert_int_equal(pl_engine_add_request(e, PROMPTS[i], NULL, 0, &p, &ids[i]), PL_OK);
        }
        run_all(e, ids, r[t], 4);
        pl_engine_destroy(e);
    }
    for (int i = 0; i < 4; i++) {
        assert_int_equal(r[0][i].n_ids[0], r[1][i].n_ids[0]);
        assert_memory_equal(r[0][i].ids[0], r[1][i].ids[0], 24 * sizeof(int32_t));
        assert_memory_equal(r[0][i].logprobs[0], r[1][i].logprobs[0], 24 * sizeof(float));
    }
}

/* logit_bias (OpenAI semantics): added to the raw logits before anything else, greedy included.
 * -100 on the greedy token of every step bans it; +100 on a token forces it at every step;
 * a bias on a token id outside the vocabulary or out of [-100, 100] is refused naming logit_bias,
 * and the caller's array is copied at add (the caller may free it at once). */
static void test_logit_bias(void **state) {
    (void)state;
    pl_engine *e = make_engine(64 << 20, 16, PL_PREEMPT_RECOMPUTE, 0, 1);
    pl_request_params p;
    greedy_params(&p, 8);
    uint64_t id;
    static result plain, banned, forced;
    memset(&plain, 0, sizeof plain);
    memset(&banned, 0, sizeof banned);
    memset(&forced, 0, sizeof forced);
    assert_int_equal(pl_engine_add_request(e, "Once upon a time", NULL, 0, &p, &id), PL_OK);
    run_all(e, &id, &plain, 1);
    assert_int_equal(plain.n_ids[0], 8);

    /* Ban every token the unbiased greedy run chose. */
    pl_logit_bias *ban = malloc(8 * sizeof *ban);
    for (int i = 0; i < 8; i++) ban[i] = (pl_logit_bias){plain.ids[0][i], -100.0f};
    p.sampling.logit_bias = ban;
    p.sampling.n_logit_bias = 8;
    assert_int_equal(pl_engine_add_request(e, "Once upon a time", NULL, 0, &p, &id), PL_OK);
    memset(ban, 0xff, 8 * sizeof *ban); /* copied at add: the engine must not read this */
    free(ban);
    run_all(e, &id, &banned, 1);
    assert_int_equal(banned.n_ids[0], 8);
    for (int i = 0; i < 8; i++)
        for (int k = 0; k < 8; k++) assert_int_not_equal(banned.ids[0][i], plain.ids[0][k]);

    /* Force a token that greedy never picks here. */
    const int32_t want = 300;
    pl_logit_bias force = {want, 100.0f};
    p.sampling.logit_bias = &force;
    p.sampling.n_logit_bias = 1;
    p.sampling.temperature = 1.0f; /* sampling too, not only greedy */
    p.has_seed = 1;
    p.seed = 7;
    assert_int_equal(pl_engine_add_request(e, "Once upon a time", NULL, 0, &p, &id), PL_OK);
    run_all(e, &id, &forced, 1);
    assert_int_equal(forced.n_ids[0], 8);
    for (int i = 0; i < 8; i++) assert_int_equal(forced.ids[0][i], want);

    /* Refusals name logit_bias. */
    pl_logit_bias bad = {pl_engine_n_vocab(e), 1.0f};
    p.sampling.logit_bias = &bad;
    assert_int_equal(pl_engine_add_request(e, "x", NULL, 0, &p, &id), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "logit_bias"));
    bad = (pl_logit_bias){5, 100.5f};
    assert_int_equal(pl_engine_add_request(e, "x", NULL, 0, &p, &id), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "logit_bias"));
    bad = (pl_logit_bias){5, NAN};
    assert_int_equal(pl_engine_add_request(e, "x", NULL, 0, &p, &id), PL_ERR_INVALID_ARG);
    bad = (pl_logit_bias){-1, 1};
    assert_int_equal(pl_engine_add_request(e, "x", NULL, 0, &p, &id), PL_ERR_INVALID_ARG);
    p.sampling.n_logit_bias = PL_MAX_LOGIT_BIAS + 1;
    assert_int_equal(pl_engine_add_request(e, "x", NULL, 0, &p, &id), PL_ERR_INVALID_ARG);
    p.sampling.n_logit_bias = 1;
    bad = (pl_logit_bias){5, 1};
    p.use_beam_search = 1;
    p.best_of = 2;
    assert_int_equal(pl_engine_add_request(e, "x", NULL, 0, &p, &id), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "logit_bias"));
    assert_pool_free(e);
    pl_engine_destroy(e);
}

/* Another thread reading the stats while requests arrive must always count a submitted
 * request: in the inbox or in the last snapshot, never in neither (the server's /metrics
 * gauges are these stats). `armed` holds the snapshot's step count at submission (+1; 0 when
 * nothing is in flight); a reading whose snapshot is from that step and counts nothing missed
 * a request the engine had already taken from its inbox. */
typedef struct {
    pl_engine *e;
    atomic_ullong armed;
    atomic_int stop;
    long reads, missed;
} stats_reader;

static void *read_stats(void *arg) {
    stats_reader *r = arg;
    while (!atomic_load(&r->stop)) {
        unsigned long long a = atomic_load(&r->armed);
        pl_engine_stats s;
        pl_engine_get_stats(r->e, &s);
        r->reads++;
        if (a && s.steps == a - 1 && s.running + s.waiting + s.swapped == 0) r->missed++;
    }
    return NULL;
}

static void test_stats_count_every_request(void **state) {
    (void)state;
    pl_engine *e = make_engine(8 << 20, 16, PL_PREEMPT_RECOMPUTE, 0, 1);
    stats_reader r = {.e = e};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, read_stats, &r), 0);
    pl_request_params p;
    greedy_params(&p, 2);
    for (int round = 0; round < 300; round++) {
        pl_engine_stats s;
        pl_engine_get_stats(e, &s);
        uint64_t id;
        assert_int_equal(pl_engine_add_request(e, PROMPTS[round % N_PROMPTS], NULL, 0, &p, &id),
                         PL_OK);
        atomic_store(&r.armed, (unsigned long long)s.steps + 1);
        static result res;
        memset(&res, 0, sizeof res);
        run_all(e, &id, &res, 1);
        atomic_store(&r.armed, 0);
        assert_int_equal(res.n_ids[0], 2);
    }
    atomic_store(&r.stop, 1);
    pthread_join(th, NULL);
    print_message("stats readings: %ld, a request counted nowhere: %ld\n", r.reads, r.missed);
    assert_true(r.reads > 0);
    assert_int_equal(r.missed, 0);
    assert_pool_free(e);
    pl_engine_destroy(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_text),
        cmocka_unit_test(test_batch_determinism),
        cmocka_unit_test(test_preemption_identical),
        cmocka_unit_test(test_parallel_sampling_shares_prompt),
        cmocka_unit_test(test_best_of),
        cmocka_unit_test(test_prefix_cache_skips_shared_tokens),
        cmocka_unit_test(test_prefix_cache_matches_no_cache),
        cmocka_unit_test(test_abort_frees_blocks),
        cmocka_unit_test(test_stop_rules),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_mixed_methods_in_one_batch),
        cmocka_unit_test(test_thread_count_invariance),
        cmocka_unit_test(test_logit_bias),
        cmocka_unit_test(test_stats_count_every_request),
    };
    const char *filter = test_env_main("PL_TEST_FILTER"); /* a subset: local debugging only */
    if (filter) cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
