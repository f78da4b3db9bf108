/* The engine tests' check that a finished run left nothing behind: no block in use, no request
 * running, waiting or swapped, and the KV cache's own invariants hold. Include after <cmocka.h>
 * and engine/engine_parts.h. */
#ifndef PL_TEST_ENGINE_POOL_H
#define PL_TEST_ENGINE_POOL_H

static inline void assert_engine_pool_free(pl_engine *e) {
    pl_engine_stats s;
    pl_engine_get_stats(e, &s);
    assert_int_equal(s.blocks_used, 0);
    assert_int_equal(s.running + s.waiting + s.swapped, 0);
    assert_int_equal(pl_kv_cache_check(pl_engine_kv_cache(e)), PL_OK);
}

#endif
