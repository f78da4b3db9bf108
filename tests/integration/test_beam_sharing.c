/* The memory a beam group (and an n-sample group) shares, asserted through the KV manager's
 * counters at every step (the paper's Figure 15 measures it; this holds it to a bound).
 *
 * A group of W sequences descends from one prompt of P tokens. Every sequence's table starts
 * with the prompt's floor(P / B) full blocks (block size B): they are computed once and, as long
 * as the sequences share them copy-on-write, each is ONE used block with W holders. So after the
 * group has forked, at every step:
 *     shared = block refs - blocks used >= (W - 1) * floor(P / B)
 *     blocks used <= floor(P / B) + W * (ceil(L / B) - floor(P / B))
 * where L is the longest sequence so far (P + steps decoded). Both bounds fail if sharing broke:
 * a fork that copied blocks, or a copy-on-write that copied full blocks too, gives every
 * sequence its own prompt blocks, so refs = used (shared = 0 < (W - 1) * floor(P / B)) and
 * used = W * ceil(L / B), above the second bound by (W - 1) * floor(P / B). Beams share more
 * than the prompt (their common output prefix), which the bounds leave free.
 *
 * ignore_eos fixes every sequence's length (no beam finishes early), prefix caching is off (a
 * cached block would be a holder-less used block from another request; there is none, but the
 * bound should not depend on it), one request at a time, a budget that never preempts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "engine_util.h"

#include "base/rng.h"
#include "engine/kv_samples.h"

static const char *MODEL = PL_SHARED_DIR "/models/stories260K.gguf";

enum { B = 4, P = 30, OUT = 16, VOCAB = 512 };

static pl_engine *make_engine(void) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = MODEL;
    c.kv_cache_memory = 8 << 20;
    c.block_size = B;
    c.enable_prefix_caching = 0;
    c.threads = 1;
    pl_engine *e;
    assert_int_equal(pl_engine_create(&c, &e), PL_OK);
    return e;
}

static int32_t blocks_for(int32_t n) { return (n + B - 1) / B; }

/* Run one request of W sequences (beams or samples) and check the bounds after every step
 * in which the group is forked and unfinished; returns the steps checked. */
static int run_group(pl_engine *e, int W, int beam, uint64_t seed) {
    int32_t prompt[P];
    pl_rng r;
    pl_rng_seed(&r, seed);
    for (int i = 0; i < P; i++) prompt[i] = 3 + (int32_t)pl_rng_below(&r, VOCAB - 3);
    pl_request_params p;
    pl_request_params_default(&p);
    p.max_tokens = OUT;
    p.ignore_eos = 1;
    p.has_seed = 1;
    p.seed = seed;
    if (beam) {
        p.use_beam_search = 1;
        p.best_of = W;
        p.n = 1;
    } else {
        p.n = W;
        p.sampling.temperature = 1.0f;
    }
    uint64_t id;
    assert_int_equal(pl_engine_add_request(e, NULL, prompt, P, &p, &id), PL_OK);
    const int32_t prompt_full = P / B;
    int checked = 0, step = 0;
    static result res;
    memset(&res, 0, sizeof res);
    while (!res.finished) {
        assert_int_equal(pl_engine_step(e), PL_OK);
        step++;
        collect(e, id, &res);
        if (res.finished || step < 2) continue; /* step 1 prefills and forks */
        pl_engine_stats s;
        pl_engine_kv_samples ks;
        pl_engine_get_stats(e, &s);
        pl_engine_get_kv_samples(e, &ks);
        int64_t shared = ks.block_refs - s.blocks_used;
        int32_t longest = P + step;
        int64_t used_max = prompt_full + (int64_t)W * (blocks_for(longest) - prompt_full);
        if (shared < (int64_t)(W - 1) * prompt_full || s.blocks_used > used_max)
            fail_msg("%s W=%d step %d: %lld blocks used, %lld refs: shared %lld < (W-1) * %d "
                     "prompt blocks, or used > %lld", beam ? "beam" : "n", W, step,
                     (long long)s.blocks_used, (long long)ks.block_refs, (long long)shared,
                     prompt_full, (long long)used_max);
        checked++;
    }
    assert_string_equal(res.error, "");
    for (int k = 0; k < (beam ? 1 : W); k++) assert_int_equal(res.n_ids[k], OUT);
    /* Everything went back: nothing is held once the group finished. */
    pl_engine_stats s;
    pl_engine_get_stats(e, &s);
    assert_int_equal(s.blocks_used, 0);
    return checked;
}

static void test_groups_share_their_prompt_blocks(void **state) {
    (void)state;
    pl_engine *e = make_engine();
    for (int W = 2; W <= 6; W += 2) {
        /* The group decodes OUT tokens in OUT - 1 steps after the prefill step; all but the
         * last (which finishes it) are checked. */
        assert_int_equal(run_group(e, W, 1, 100 + (uint64_t)W), OUT - 2);
        assert_int_equal(run_group(e, W, 0, 200 + (uint64_t)W), OUT - 2);
    }
    pl_engine_destroy(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_groups_share_their_prompt_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
