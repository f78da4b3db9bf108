/* Gemma 4's KV cache (issue 33): a random-weight gemma4 written by `pagellm mkmodel --arch
 * gemma4` whose last layers reuse an earlier layer's K/V (attention.shared_kv_layers) and whose
 * window and full layers have their own KV heads and head sizes, run through the engine:
 *
 *   - the store has tensors only for the layers that compute K/V, each of its own shape, and a
 *     block costs only their bytes: from the same budget the pool holds twice the blocks of the
 *     same model with every layer keeping its own KV (3 of 6 layers share);
 *   - greedy generations in a pool small enough to preempt (by recompute and by swap, with
 *     prefix-cache hits on a shared prompt) give the tokens of a pool that holds everything,
 *     and every block is back in the pool at the end (pl_kv_cache_check);
 *   - bad files: a missing or mis-shaped per-layer tensor, a pattern array of the wrong length
 *     or inconsistent with the shared layers, a missing key: load errors naming the tensor or
 *     the key.
 * (The forward pass itself is checked against llama.cpp in test_wtype_reference.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "engine/engine_parts.h"
#include "engine_util.h"
#include "kernels/cpu.h"
#include "../unit/isa_coverage.h"
#include "kv/kv_store.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { BSZ = 16, LAYERS = 6, SHARED = 3, NREQ = 4, PROMPT = 40, GEN = 60 };

#define FLAGS "--arch gemma4 --dim 64 --layers 6 --heads 4 --kv-heads 2 --kv-heads-full 1 " \
              "--head-dim 32 --head-dim-swa 16 --ffn 128 --swa-pattern 3 --sliding-window 16 " \
              "--per-layer-dim 16 --ctx 1024 --seed 5"

static char shared_path[512], own_path[512], bad_path[512];
static pl_model *model;  /* the shared-KV one */
static size_t block_bytes; /* its bytes per block, f32 */

static int mk(const char *path, const char *extra) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' mkmodel '%s' --vocab-from '%s/models/stories260K.gguf' "
             FLAGS " %s >/dev/null", PL_BINARY, path, PL_SHARED_DIR, extra);
    return system(cmd) == 0 ? 0 : -1;
}

static int setup(void **state) {
    (void)state;
    int pid = (int)getpid();
    snprintf(shared_path, sizeof shared_path, "/tmp/pl_test_gemma4_shared_%d.gguf", pid);
    snprintf(own_path, sizeof own_path, "/tmp/pl_test_gemma4_own_%d.gguf", pid);
    snprintf(bad_path, sizeof bad_path, "/tmp/pl_test_gemma4_bad_%d.gguf", pid);
    if (mk(shared_path, "--shared-kv-layers 3 --ffn-wide 256") || mk(own_path, "")) return -1;
    if (pl_model_load(shared_path, &model) != PL_OK) return -1;
    pl_kv_layout l = {.dtype = PL_DT_F32, .block_size = BSZ};
    block_bytes = pl_kv_bytes_per_block_shaped(&l, pl_model_kv_tensors(&model->hp),
                                               pl_model_kv_shapes(&model->hp));
    return 0;
}

static int teardown(void **state) {
    (void)state;
    pl_model_destroy(model);
    unlink(shared_path);
    unlink(own_path);
    unlink(bad_path);
    return 0;
}

static pl_engine *make_engine(const char *path, uint64_t bytes, pl_preemption_mode mode,
                              int32_t swap_blocks, int prefix_cache) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = path;
    c.kv_cache_dtype = PL_KV_CACHE_F32;
    c.block_size = BSZ;
    c.kv_cache_memory = bytes;
    c.swap_space = (uint64_t)swap_blocks * block_bytes;
    c.preemption_mode = mode;
    c.enable_prefix_caching = prefix_cache;
    c.threads = 2;
    c.max_num_seqs = 8;
    c.max_num_batched_tokens = 64;
    pl_engine *e;
    if (pl_engine_create(&c, &e) != PL_OK) fail_msg("engine: %s", pl_last_error());
    return e;
}

/* The shared layers own no store tensor and cost no bytes: twice the blocks of the same model
 * with every layer's own KV, from one budget. */
static void test_shared_layers_take_no_blocks(void **state) {
    (void)state;
    const pl_model_hparams *hp = &model->hp;
    assert_int_equal(hp->n_kv_shared, SHARED);
    assert_int_equal(pl_model_kv_tensors(hp), LAYERS - SHARED);
    /* layers 0 1 window, 2 full own their KV; 3 4 (window) read layer 1's, 5 (full) layer 2's */
    static const int32_t src[LAYERS] = {0, 1, 2, 1, 1, 2};
    for (int32_t l = 0; l < LAYERS; l++) assert_int_equal(pl_model_kv_tensor(hp, l), src[l]);
    assert_int_equal(pl_model_layer_shape(hp, 0).head_dim, 16);
    assert_int_equal(pl_model_layer_shape(hp, 0).n_kv_heads, 2);
    assert_int_equal(pl_model_layer_shape(hp, 2).head_dim, 32);
    assert_int_equal(pl_model_layer_shape(hp, 2).n_kv_heads, 1);
    /* f32: a window layer 2 heads x 16 dims, the full one 1 x 32: 16 tokens x 32 x 4 bytes,
     * K and V, 3 layers */
    assert_int_equal(block_bytes, 3 * 2 * BSZ * 32 * 4);

    pl_engine *sh = make_engine(shared_path, 64 * block_bytes, PL_PREEMPT_RECOMPUTE, 0, 1);
    pl_engine *own = make_engine(own_path, 64 * block_bytes, PL_PREEMPT_RECOMPUTE, 0, 1);
    pl_kv_cache *sh_kv = pl_engine_kv_cache(sh), *own_kv = pl_engine_kv_cache(own);
    const pl_kv_store *ss = pl_kv_cache_store(sh_kv), *os = pl_kv_cache_store(own_kv);
    assert_int_equal(ss->n_layers, LAYERS - SHARED);
    assert_int_equal(os->n_layers, LAYERS);
    for (int32_t t = 0; t < ss->n_layers; t++) {
        pl_kv_layout lt = pl_kv_store_layer_layout(ss, t);
        assert_int_equal(lt.head_dim, pl_model_layer_shape(&model->hp, t).head_dim);
        assert_int_equal(lt.n_kv_heads, pl_model_layer_shape(&model->hp, t).n_kv_heads);
    }
    assert_int_equal(pl_kv_cache_manager(sh_kv)->cfg.num_blocks, 64);
    assert_int_equal(pl_kv_cache_manager(own_kv)->cfg.num_blocks, 32);
    assert_int_equal(ss->mapped_bytes, 64 * block_bytes);
    pl_engine_destroy(sh);
    pl_engine_destroy(own);
}

/* Preemption (recompute, swap) and prefix hits in a small pool give the tokens of a pool that
 * holds everything, and the pool is whole at the end. */
static void test_blocks_freed(void **state) {
    (void)state;
    int32_t prompts[NREQ][PROMPT];
    const int32_t V = model->hp.n_vocab;
    for (int32_t r = 0; r < NREQ; r++) /* requests 0 and 1 share their prompt */
        for (int32_t i = 0; i < PROMPT; i++)
            prompts[r][i] = 3 + (int32_t)((7 * (r == 1 ? 0 : r) + 13 * i + i * i) % (V - 3));
    pl_request_params p;
    greedy_params(&p, GEN);
    pl_engine *big = make_engine(shared_path, 64 * block_bytes, PL_PREEMPT_RECOMPUTE, 0, 0);
    result *ref = run_prompt_ids(big, &prompts[0][0], NREQ, PROMPT, &p);
    pl_engine_destroy(big);
    static const struct {
        pl_preemption_mode mode;
        int32_t swap;
    } runs[] = {{PL_PREEMPT_RECOMPUTE, 0}, {PL_PREEMPT_SWAP, 16}};
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        /* a request ends with 100 tokens: 7 blocks; 12 blocks hold fewer than two */
        pl_engine *e = make_engine(shared_path, 12 * block_bytes, runs[k].mode, runs[k].swap, 1);
        result *res = run_prompt_ids(e, &prompts[0][0], NREQ, PROMPT, &p);
        for (int32_t r = 0; r < NREQ; r++) {
            if (res[r].error[0]) fail_msg("run %zu request %d: %s", k, (int)r, res[r].error);
            assert_int_equal(res[r].n_ids[0], GEN);
            assert_memory_equal(res[r].ids[0], ref[r].ids[0], GEN * sizeof(int32_t));
        }
        pl_engine_stats s;
        pl_engine_get_stats(e, &s);
        print_message("run %zu: %llu preemptions, %llu swapped out, prefix hits %llu tokens\n", k,
                      (unsigned long long)s.preemptions, (unsigned long long)s.swaps_out,
                      (unsigned long long)s.prefix_hits);
        assert_true(s.preemptions > 0);
        if (runs[k].mode == PL_PREEMPT_SWAP) assert_true(s.swaps_out > 0);
        if (runs[k].mode == PL_PREEMPT_RECOMPUTE) assert_true(s.prefix_hits > 0); /* recomputed
                                                                   prompts hit their blocks */
        assert_int_equal(s.blocks_used, 0);
        assert_int_equal(pl_kv_cache_check(pl_engine_kv_cache(e)), PL_OK);
        free(res);
        pl_engine_destroy(e);
    }
    free(ref);
}

/* The shared model rewritten: tensor `drop` left out, tensor `reshape` with its rows halved,
 * key `key` replaced by the bools pattern[n] (n 0: left out). */
static void rewrite(const char *drop, const char *reshape, const char *key, const uint8_t *pattern,
                    int n) {
    pl_gguf *g;
    assert_int_equal(pl_gguf_open(shared_path, &g), PL_OK);
    pl_gguf_writer *w = pl_gguf_writer_create();
    assert_non_null(w);
    for (int64_t i = 0; i < pl_gguf_n_kv(g); i++) {
        pl_gguf_str k = pl_gguf_key_at(g, i);
        if (key && strlen(key) == k.len && !memcmp(key, k.ptr, k.len)) continue;
        assert_int_equal(pl_gguf_writer_copy_kv(w, g, i), PL_OK);
    }
    if (key && n) assert_int_equal(pl_gguf_writer_add_arr(w, key, PL_GGUF_BOOL, pattern, n), PL_OK);
    for (int64_t i = 0; i < pl_gguf_n_tensors(g); i++) {
        const pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        if (drop && !strcmp(t->name, drop)) continue;
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        if (reshape && !strcmp(t->name, reshape)) ne[t->n_dims - 1] /= 2;
        assert_int_equal(pl_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, ne, t->data),
                         PL_OK);
    }
    assert_int_equal(pl_gguf_writer_write(w, bad_path), PL_OK);
    pl_gguf_writer_destroy(w);
    pl_gguf_close(g);
}

static void expect_load_error(const char *what) {
    pl_model *m = NULL;
    assert_int_not_equal(pl_model_load(bad_path, &m), PL_OK);
    assert_null(m);
    if (!strstr(pl_last_error(), what))
        fail_msg("load error '%s' does not name '%s'", pl_last_error(), what);
}

static void test_bad_files(void **state) {
    (void)state;
    const char *pat = "gemma4.attention.sliding_window_pattern";
    rewrite("blk.4.inp_gate.weight", NULL, NULL, NULL, 0);
    expect_load_error("blk.4.inp_gate.weight");
    rewrite(NULL, "per_layer_token_embd.weight", NULL, NULL, 0);
    expect_load_error("per_layer_token_embd.weight");
    rewrite(NULL, "blk.1.proj.weight", NULL, NULL, 0);
    expect_load_error("blk.1.proj.weight");
    static const uint8_t five[5] = {1, 1, 0, 1, 1};
    rewrite(NULL, NULL, pat, five, 5); /* 5 entries for 6 layers */
    expect_load_error(pat);
    /* layer 1 full, 5 window: the window layer 5 would reuse full layer 1's KV */
    static const uint8_t mixed[LAYERS] = {1, 0, 1, 1, 1, 1};
    rewrite(NULL, NULL, pat, mixed, LAYERS);
    expect_load_error("inconsistent");
    rewrite(NULL, NULL, pat, NULL, 0);
    expect_load_error(pat);
    rewrite(NULL, NULL, "gemma4.embedding_length_per_layer_input", NULL, 0);
    expect_load_error("gemma4.embedding_length_per_layer_input");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_layers_take_no_blocks),
        cmocka_unit_test(test_blocks_freed),
        cmocka_unit_test(test_bad_files),
    };
    return isa_run_group_tests(tests, setup, teardown);
}
