/* The engine with the real stories260K model: continuous batching, preemption (recompute and
 * swap), determinism across batches, parallel sampling and prefix caching through the block
 * stats, stopping rules, aborts. After every test the KV pool must be entirely free. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "engine_util.h"

#include "engine/engine_internal.h"

static const char *MODEL = PL_SHARED_DIR "/models/stories260K.gguf";
static const char *PROMPTS[] = {
    "Once upon a time", "Lily and Tom went to the park", "The little dog was sad because",
    "One day, a big red ball", "Sam liked to eat apples", "There was a tiny bird in a tree",
    "Mom said it was time for bed", "The sun was shining and",
};
enum { N_PROMPTS = sizeof PROMPTS / sizeof PROMPTS[0] };

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
    c.threads = 2;
    c.max_num_seqs = 64;
    c.max_num_batched_tokens = 256;
    pl_engine *e;
    if (pl_engine_create(&c, &e) != PL_OK) fail_msg("engine: %s", pl_last_error());
    return e;
}

static void assert_pool_free(pl_engine *e) {
    pl_engine_stats s;
    pl_engine_get_stats(e, &s);
    assert_int_equal(s.blocks_used, 0);
    assert_int_equal(s.running + s.waiting + s.swapped, 0);
    assert_int_equal(pl_kv_manager_check(&e->mgr), PL_OK);
}

static void greedy_params(pl_request_params *p, int32_t max_tokens) {
    pl_request_params_default(p);
    p->sampling.temperature = 0;
    p->max_tokens = max_tokens;
    p->ignore_eos = 1;
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
    uint64_t ids[64];
    for (int i = 0; i < count; i++) {
        pl_request_params p;
        greedy_params(&p, 40 + 7 * (i % 5));
        if (sampled) {
            p.sampling.temperature = 0.9f;
            p.sampling.top_p = 0.95f;
            p.has_seed = 1;
            p.seed = 1000 + (uint64_t)i;
        }
        memset(&res[i], 0, sizeof res[i]);
        assert_int_equal(pl_engine_add_request(e, PROMPTS[i % N_PROMPTS], NULL, 0, &p, &ids[i]),
                         PL_OK);
    }
    run_all(e, ids, res, count);
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
    for (int mode = 0; mode < 2; mode++) {
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
                          mode ? "swap" : "recompute", sampled,
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
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_text),
        cmocka_unit_test(test_batch_determinism),
        cmocka_unit_test(test_preemption_identical),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
