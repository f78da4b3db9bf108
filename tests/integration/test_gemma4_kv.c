/* Gemma 4's and Gemma 3's KV cache (issue 33): random-weight models written by `pagellm mkmodel`,
 * run through the engine:
 *
 *   - gemma4 whose last layers reuse an earlier layer's K/V (attention.shared_kv_layers) and
 *     whose window and full layers have their own KV heads and head sizes: the store has
 *     tensors only for the layers that compute K/V, each of its own shape, and a block costs
 *     only their bytes (with release off: twice the blocks of the same model with every layer
 *     keeping its own KV, 3 of 6 layers share);
 *   - layer kinds (kv/cache.h), for that gemma4 and a gemma3 of five window layers to one
 *     global (its real pattern, 6): the window layers' blocks live in a pool of their own,
 *     released behind the window, and the full pool holds more blocks than every layer full
 *     would; greedy generations preempted by recompute (with prefix-cache hits on a shared
 *     prompt) and by swap, seeded n = 3 and beam search of width 3 give bitwise the tokens of
 *     the same engine with release off (--no-kv-groups) in a pool that holds everything, and
 *     every block of both pools is back at the end (pl_kv_cache_check);
 *   - gemma3 with a draft model: at a budget whose rest after the draft's share keeps the
 *     kinds, and at one where the cache falls back to one pool (kv/cache.c's setup_blocks);
 *   - gemma3 with its window pool short (a table outside the engine holds 5 of its 8 blocks):
 *     the scheduler waits and preempts (recompute, swap), nothing is lost;
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
#include "kv/vattn.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { BSZ = 16, LAYERS = 6, SHARED = 3, NREQ = 4, PROMPT = 40, GEN = 140, HOLD = 5 };

#define FLAGS "--arch gemma4 --dim 64 --layers 6 --heads 4 --kv-heads 2 --kv-heads-full 1 " \
              "--head-dim 32 --head-dim-swa 16 --ffn 128 --swa-pattern 3 --sliding-window 16 " \
              "--per-layer-dim 16 --ctx 1024 --seed 5"
#define GEMMA3 "--arch gemma3 --dim 64 --layers 6 --heads 4 --kv-heads 2 --head-dim 16 " \
               "--ffn 128 --sliding-window 16 --ctx 1024 --seed 7"

static char shared_path[512], own_path[512], bad_path[512], g3_path[512], draft_path[512];
static pl_model *model;  /* the shared-KV one */
static size_t block_bytes; /* its bytes per block, f32 */

static int mk(const char *path, const char *flags, const char *extra) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' mkmodel '%s' --vocab-from '%s/models/stories260K.gguf' "
             "%s %s >/dev/null", PL_BINARY, path, PL_SHARED_DIR, flags, extra);
    return system(cmd) == 0 ? 0 : -1;
}

static int setup(void **state) {
    (void)state;
    int pid = (int)getpid();
    snprintf(shared_path, sizeof shared_path, "/tmp/pl_test_gemma4_shared_%d.gguf", pid);
    snprintf(own_path, sizeof own_path, "/tmp/pl_test_gemma4_own_%d.gguf", pid);
    snprintf(bad_path, sizeof bad_path, "/tmp/pl_test_gemma4_bad_%d.gguf", pid);
    snprintf(g3_path, sizeof g3_path, "/tmp/pl_test_gemma3_kinds_%d.gguf", pid);
    snprintf(draft_path, sizeof draft_path, "/tmp/pl_test_gemma3_draft_%d.gguf", pid);
    if (mk(shared_path, FLAGS, "--shared-kv-layers 3 --ffn-wide 256") ||
        mk(own_path, FLAGS, "") || mk(g3_path, GEMMA3, "") ||
        mk(draft_path, "--arch gemma3 --dim 32 --layers 2 --heads 2 --kv-heads 1 --head-dim 16 "
           "--ffn 64 --sliding-window 16 --ctx 1024 --seed 11", ""))
        return -1;
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
    unlink(g3_path);
    unlink(draft_path);
    return 0;
}

typedef struct {
    pl_preemption_mode mode;
    int32_t swap_blocks, max_seqs;
    int prefix_cache, release_off;
    int spec; /* n-gram speculation of 4 tokens (rolled back in both pools) */
    const char *draft; /* speculation by this draft model instead (4 tokens) */
    int vattn;         /* 1: --kv-layout vattention; 2: with --vattn-share (pages of a memfd) */
} engine_opts;

/* bytes and swap_blocks in blocks of `unit` bytes (a block of every layer that keeps KV) */
static pl_engine *make_engine(const char *path, size_t unit, int32_t blocks, engine_opts o) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = path;
    c.kv_cache_dtype = PL_KV_CACHE_F32;
    c.block_size = BSZ;
    c.kv_cache_memory = (uint64_t)blocks * unit;
    c.swap_space = (uint64_t)o.swap_blocks * unit;
    c.preemption_mode = o.mode;
    c.enable_prefix_caching = o.prefix_cache;
    c.kv_groups_off = o.release_off;
    c.speculative_ngram = o.spec;
    c.speculative_model = o.draft;
    c.num_speculative_tokens = o.spec || o.draft ? 4 : 0;
    c.threads = 2;
    c.max_num_seqs = o.max_seqs ? o.max_seqs : 8;
    c.max_num_batched_tokens = 32; /* the prompts take two chunks */
    if (o.vattn) {
        c.kv_layout = PL_KV_LAYOUT_VATTENTION;
        c.vattn_share = o.vattn == 2;
    }
    pl_engine *e;
    if (pl_engine_create(&c, &e) != PL_OK) fail_msg("engine: %s", pl_last_error());
    return e;
}

/* The shared layers own no store tensor and cost no bytes: twice the blocks of the same model
 * with every layer's own KV, from one budget (release off: one pool). */
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

    engine_opts off = {.mode = PL_PREEMPT_RECOMPUTE, .prefix_cache = 1, .release_off = 1};
    pl_engine *sh = make_engine(shared_path, block_bytes, 64, off);
    pl_engine *own = make_engine(own_path, block_bytes, 64, off);
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
    assert_null(ss->kinds);
    pl_engine_destroy(sh);
    pl_engine_destroy(own);
}

/* Layer kinds sized as kv/cache.c says: a window pool of ceil((S W + B) / 16) + 2 S = 8
 * blocks for S = 2 sequences, W = 16 and a step of B = 32 tokens, the rest of the budget full
 * blocks, within the budget; a window pool as large as the budget's blocks falls back to one
 * pool. */
static void test_kinds_sizing(void **state) {
    (void)state;
    engine_opts on = {.mode = PL_PREEMPT_RECOMPUTE, .max_seqs = 2, .prefix_cache = 1};
    /* gemma4: per block 2 units of window layers (layers 0, 1), 1 of the full layer 2 */
    pl_engine *e = make_engine(shared_path, block_bytes, 10, on);
    pl_kv_cache *kv = pl_engine_kv_cache(e);
    const pl_kv_store *st = pl_kv_cache_store(kv);
    assert_non_null(st->kinds);
    assert_int_equal(st->kinds[0], 1);
    assert_int_equal(st->kinds[1], 1);
    assert_int_equal(st->kinds[2], 0);
    assert_int_equal(st->num_blocks_w, 8);
    assert_int_equal(pl_kv_cache_window_manager_c(kv)->cfg.num_blocks, 8);
    assert_int_equal(pl_kv_cache_window_manager_c(kv)->cfg.sliding_window, 16);
    assert_int_equal(pl_kv_cache_manager(kv)->cfg.sliding_window, 0);
    /* 30 units - 8 x 2 = 14 full blocks */
    assert_int_equal(pl_kv_cache_num_blocks(kv), 14);
    assert_true(st->mapped_bytes <= 10 * block_bytes);
    pl_engine_stats s;
    pl_engine_get_stats(e, &s);
    assert_int_equal(s.blocks_total, 14);
    assert_int_equal(s.window_blocks_total, 8);
    assert_int_equal(s.blocks_all_full, 10);
    pl_engine_destroy(e);
    e = make_engine(shared_path, block_bytes, 8, on); /* 8 blocks in all: nothing to gain */
    assert_null(pl_kv_cache_store(pl_engine_kv_cache(e))->kinds);
    assert_int_equal(pl_kv_cache_num_blocks(pl_engine_kv_cache(e)), 8);
    pl_engine_destroy(e);
}

static void make_prompts(int32_t V, int32_t prompts[NREQ][PROMPT]) {
    for (int32_t r = 0; r < NREQ; r++) /* requests 0 and 1 share their prompt */
        for (int32_t i = 0; i < PROMPT; i++)
            prompts[r][i] = 3 + (int32_t)((7 * (r == 1 ? 0 : r) + 13 * i + i * i) % (V - 3));
}

static void same(const result *a, const result *b, int32_t n, int32_t per_req, int32_t n_out,
                 const char *what) {
    char msg[256];
    if (results_differ(a, b, n, per_req, n_out, msg, sizeof msg))
        fail_msg("%s: %s (first: layer kinds, second: release off)", what, msg);
}

/* Layer kinds were on, released window blocks and hold no block of either pool. */
static void check_released(pl_engine *e, const char *what) {
    pl_engine_stats s;
    pl_engine_get_stats(e, &s);
    print_message("%s: %d full + %d window blocks (%d every layer full), %llu released, %llu "
                  "preemptions, %llu swapped out, prefix hits %llu tokens\n", what,
                  (int)s.blocks_total, (int)s.window_blocks_total, (int)s.blocks_all_full,
                  (unsigned long long)s.window_freed_blocks, (unsigned long long)s.preemptions,
                  (unsigned long long)s.swaps_out, (unsigned long long)s.prefix_hits);
    assert_true(s.window_blocks_total > 0);
    assert_true(s.blocks_total > s.blocks_all_full);
    assert_true(s.window_freed_blocks > 0);
    assert_int_equal(s.blocks_used, 0);
    pl_kv_cache *kv = pl_engine_kv_cache(e);
    pl_kv_stats w;
    pl_kv_get_stats(pl_kv_cache_window_manager_c(kv), &w);
    assert_int_equal(w.blocks_used, 0);
    assert_int_equal(w.swap_used, 0);
    assert_int_equal(pl_kv_cache_check(kv), PL_OK);
}

/* One model's runs with layer kinds against release off: greedy under preemption (the first
 * n_greedy of recompute, swap, recompute with n-gram speculation), or with forks: seeded n = 3
 * and beam search. unit: its bytes per block. */
static void kinds_equal(const char *path, size_t unit, int32_t V, int forks, size_t n_greedy) {
    int32_t prompts[NREQ][PROMPT];
    make_prompts(V, prompts);
    pl_request_params p;
    greedy_params(&p, GEN);
    engine_opts off = {.mode = PL_PREEMPT_RECOMPUTE, .release_off = 1};
    pl_engine *big = forks ? NULL : make_engine(path, unit, 64, off);
    result *ref = forks ? NULL : run_prompt_ids(big, &prompts[0][0], NREQ, PROMPT, &p);
    if (big) pl_engine_destroy(big);
    static const engine_opts runs[] = {
        {PL_PREEMPT_RECOMPUTE, 0, 2, 1, 0, 0, NULL, 0}, {PL_PREEMPT_SWAP, 16, 2, 0, 0, 0, NULL, 0},
        {PL_PREEMPT_RECOMPUTE, 0, 2, 1, 0, 1, NULL, 0}};
    static const char *const names[] = {"recompute", "swap", "speculation"};
    for (size_t k = 0; !forks && k < n_greedy && k < sizeof runs / sizeof runs[0]; k++) {
        /* a request ends with 180 tokens: 12 blocks; two of them fill more than the full pool
         * (gemma4: 14 blocks; gemma3: 20), which every layer full (10 blocks) cannot hold */
        pl_engine *e = make_engine(path, unit, 10, runs[k]);
        result *res = run_prompt_ids(e, &prompts[0][0], NREQ, PROMPT, &p);
        same(res, ref, NREQ, 1, GEN, names[k]);
        check_released(e, names[k]);
        pl_engine_stats s;
        pl_engine_get_stats(e, &s);
        assert_true(s.preemptions > 0);
        if (runs[k].mode == PL_PREEMPT_SWAP) assert_true(s.swaps_out > 0);
        else assert_true(s.prefix_hits > 0); /* request 1 and recomputed prompts hit */
        if (runs[k].spec) assert_true(s.spec_draft_tokens > 0);
        free(res);
        pl_engine_destroy(e);
    }
    free(ref);
    /* seeded n = 3 (forks, copy-on-write) and beam search of width 3 */
    enum { N_REQ = 1, OUT = 48 };
    for (int beam = 0; forks && beam < 2; beam++) {
        three_params(&p, OUT, beam);
        pl_engine *r_e = make_engine(path, unit, 64, off);
        ref = run_prompt_ids(r_e, &prompts[0][0], N_REQ, PROMPT, &p);
        pl_engine_destroy(r_e);
        engine_opts on = {.mode = PL_PREEMPT_RECOMPUTE, .max_seqs = 3, .prefix_cache = 1};
        pl_engine *e = make_engine(path, unit, 24, on);
        result *res = run_prompt_ids(e, &prompts[0][0], N_REQ, PROMPT, &p);
        same(res, ref, N_REQ, 3, OUT, beam ? "beam" : "n = 3");
        check_released(e, beam ? "beam" : "n = 3");
        free(res);
        free(ref);
        pl_engine_destroy(e);
    }
}

static void test_gemma4_kinds(void **state) {
    (void)state;
    kinds_equal(shared_path, block_bytes, model->hp.n_vocab, 0, 2);
}

static void test_gemma4_kinds_forks(void **state) {
    (void)state;
    kinds_equal(shared_path, block_bytes, model->hp.n_vocab, 1, 0);
}

/* --kv-layout vattention on gemma4, whose window layers' token rows (2 KV heads of 16 dims, f32:
 * 64 bytes) are half its full layer's (1 of 32: 128 bytes): every region's row holds 64 tokens,
 * a page in a window layer's regions, two in the full layer's (kv/vattn.h), and the store view
 * reads each layer with its own shape. Greedy requests preempted (a budget of 8 rows for four
 * requests of 3), and with --vattn-share seeded n = 3 and beam search (their pages shared and
 * copied on write, two pages at a time in the full layer), give bitwise the paged layout's
 * tokens; every page is back at the end. */
static void test_gemma4_vattention(void **state) {
    (void)state;
    int32_t prompts[NREQ][PROMPT];
    make_prompts(model->hp.n_vocab, prompts);
    pl_request_params p;
    greedy_params(&p, GEN);
    engine_opts off = {.mode = PL_PREEMPT_RECOMPUTE, .release_off = 1};
    pl_engine *big = make_engine(shared_path, block_bytes, 64, off);
    result *ref = run_prompt_ids(big, &prompts[0][0], NREQ, PROMPT, &p);
    pl_engine_destroy(big);
    /* 8 rows of 64 tokens: 4 blocks of 16 each */
    engine_opts va = {.mode = PL_PREEMPT_RECOMPUTE, .vattn = 1};
    pl_engine *e = make_engine(shared_path, block_bytes, 32, va);
    pl_kv_cache *kv = pl_engine_kv_cache(e);
    const pl_vattn_config *vc = pl_vattn_get_config(pl_kv_cache_vattn(kv));
    assert_int_equal(vc->tokens_per_row, 64);
    assert_int_equal(vc->phys_rows, 8);
    assert_int_equal(vc->n_regions, 2 * (2 + 2 + 1));
    const pl_kv_store *st = pl_kv_cache_store(kv);
    for (int32_t t = 0; t < st->n_layers; t++) {
        pl_kv_layout lt = pl_kv_store_layer_layout(st, t);
        assert_int_equal(lt.head_dim, pl_model_layer_shape(&model->hp, t).head_dim);
        assert_int_equal(lt.n_kv_heads, pl_model_layer_shape(&model->hp, t).n_kv_heads);
        /* layer t's K starts at its first region; its V after its KV heads' K regions */
        const size_t k_off = (size_t)((char *)pl_kv_store_k(st, t) - (char *)st->base);
        const size_t v_off = (size_t)((char *)pl_kv_store_v(st, t) - (char *)st->base);
        assert_int_equal(v_off - k_off, (size_t)lt.n_kv_heads * vc->n_slots * vc->rows_per_slot *
                                            (lt.head_dim == 32 ? 2 : 1) * 4096);
    }
    result *res = run_prompt_ids(e, &prompts[0][0], NREQ, PROMPT, &p);
    same(res, ref, NREQ, 1, GEN, "vattention, recompute");
    pl_engine_stats s;
    pl_engine_get_stats(e, &s);
    assert_true(s.preemptions > 0);
    assert_int_equal(s.blocks_used, 0);
    assert_int_equal(pl_kv_cache_check(kv), PL_OK);
    free(res);
    free(ref);
    pl_engine_destroy(e);
    enum { OUT = 48 };
    for (int beam = 0; beam < 2; beam++) {
        three_params(&p, OUT, beam);
        pl_engine *r_e = make_engine(shared_path, block_bytes, 64, off);
        ref = run_prompt_ids(r_e, &prompts[0][0], 1, PROMPT, &p);
        pl_engine_destroy(r_e);
        engine_opts sh = {.mode = PL_PREEMPT_RECOMPUTE, .max_seqs = 3, .vattn = 2};
        e = make_engine(shared_path, block_bytes, 64, sh);
        res = run_prompt_ids(e, &prompts[0][0], 1, PROMPT, &p);
        same(res, ref, 1, 3, OUT, beam ? "vattention, beam" : "vattention, n = 3");
        pl_vattn_stats vs;
        pl_vattn_get_stats(pl_kv_cache_vattn(pl_engine_kv_cache(e)), &vs);
        /* the forks mapped the lead's pages, or copied its partly filled last page into a
         * reused slot's own (which of the two depends on the mapper thread's timing) */
        assert_true(vs.pages_shared + vs.pages_copied > 0);
        assert_int_equal(pl_kv_cache_check(pl_engine_kv_cache(e)), PL_OK);
        free(res);
        free(ref);
        pl_engine_destroy(e);
    }
}

/* gemma3's unit: the bytes of a block of every layer (f32); its vocabulary in *V. */
static size_t gemma3_unit(int32_t *V) {
    pl_model *m;
    assert_int_equal(pl_model_load(g3_path, &m), PL_OK);
    pl_kv_layout l = {.dtype = PL_DT_F32, .block_size = BSZ, .n_kv_heads = m->hp.n_kv_heads,
                      .head_dim = m->hp.head_dim};
    size_t unit = pl_kv_bytes_per_block(&l, m->hp.n_layers);
    *V = m->hp.n_vocab;
    pl_model_destroy(m);
    return unit;
}

/* gemma3's greedy tokens for the NREQ prompts with release off (one pool holding everything);
 * the prompts in prompts, its unit in *unit. */
static result *gemma3_ref(int32_t prompts[NREQ][PROMPT], size_t *unit, pl_request_params *p) {
    int32_t V;
    *unit = gemma3_unit(&V);
    make_prompts(V, prompts);
    greedy_params(p, GEN);
    engine_opts off = {.mode = PL_PREEMPT_RECOMPUTE, .release_off = 1};
    pl_engine *big = make_engine(g3_path, *unit, 64, off);
    result *ref = run_prompt_ids(big, &prompts[0][0], NREQ, PROMPT, p);
    pl_engine_destroy(big);
    return ref;
}

/* Gemma 3's real pattern: five window layers, then a global one. */
static void test_gemma3_kinds(void **state) {
    (void)state;
    pl_model *m;
    assert_int_equal(pl_model_load(g3_path, &m), PL_OK);
    int32_t win = 0;
    for (int32_t l = 0; l < m->hp.n_layers; l++) win += pl_model_layer_window(&m->hp, l) > 0;
    assert_int_equal(win, 5);
    assert_int_equal(pl_model_layer_window(&m->hp, 5), 0);
    pl_model_destroy(m);
    int32_t V;
    size_t unit = gemma3_unit(&V);
    kinds_equal(g3_path, unit, V, 0, 3);
    kinds_equal(g3_path, unit, V, 1, 0);
}

/* No block of either pool (nor of the draft's) held, and the books agree. */
static void check_all_back(pl_engine *e) {
    pl_kv_cache *kv = pl_engine_kv_cache(e);
    pl_engine_stats s = {0};
    pl_kv_cache_stats(kv, &s); /* now, not the last step's snapshot */
    assert_int_equal(s.blocks_used, 0);
    assert_int_equal(s.window_blocks_used, 0);
    assert_int_equal(s.swap_used, 0);
    pl_kv_stats w;
    pl_kv_get_stats(pl_kv_cache_window_manager_c(kv), &w);
    assert_int_equal(w.blocks_used, 0);
    assert_int_equal(pl_kv_cache_check(kv), PL_OK);
    const pl_kv_manager *d = pl_spec_draft_manager(pl_engine_spec(e));
    if (d) {
        pl_kv_get_stats(d, &w);
        assert_int_equal(w.blocks_used, 0);
        assert_int_equal(pl_kv_manager_check(d), PL_OK);
    }
}

/* Speculative decoding with a draft model (commit ee23497): the draft's cache takes its share of
 * the budget first; layer kinds are kept when the rest still holds more full blocks than every
 * layer full would, else the cache falls back to one pool. gemma3 of pattern 6 (its block: 1
 * unit, 5/6 of it the window layers'), a draft whose block costs 1/6 unit (so 1/7 of the
 * budget), 8 sequences: a window pool of ceil((8 x 16 + 32) / 16) + 2 x 8 = 26 blocks. 40
 * units keep the kinds (34 left: 26 x 5/6 window, the rest 75 full blocks > 34); 28 units are
 * kinds by the whole budget (26 < 28) but fall back once the draft took its share (24 left:
 * the window pool alone would take 21.7). Both give the greedy tokens of release off without
 * speculation, with proposals rolled back, and every block back. */
static void test_gemma3_draft_fallback(void **state) {
    (void)state;
    int32_t prompts[NREQ][PROMPT];
    size_t unit;
    pl_request_params p;
    result *ref = gemma3_ref(prompts, &unit, &p);
    static const int32_t budget[2] = {40, 28};
    for (int k = 0; k < 2; k++) {
        engine_opts on = {.mode = PL_PREEMPT_RECOMPUTE, .prefix_cache = 1, .draft = draft_path};
        pl_engine *e = make_engine(g3_path, unit, budget[k], on);
        pl_kv_cache *kv = pl_engine_kv_cache(e);
        uint64_t draft = pl_kv_cache_draft_bytes(kv);
        assert_true(draft > 0);
        pl_engine_stats s;
        pl_engine_get_stats(e, &s);
        print_message("draft, %d units: %llu bytes to the draft, %d full + %d window blocks (%d "
                      "every layer full)\n", (int)budget[k], (unsigned long long)draft,
                      (int)s.blocks_total, (int)s.window_blocks_total, (int)s.blocks_all_full);
        uint64_t left = (uint64_t)budget[k] * unit - draft;
        if (k == 0) { /* kinds kept: more full blocks than the rest holds with every layer */
            assert_non_null(pl_kv_cache_store(kv)->kinds);
            assert_int_equal(s.window_blocks_total, 26);
            assert_true(s.blocks_total > s.blocks_all_full);
            assert_int_equal(s.blocks_all_full, (int32_t)(left / unit));
        } else { /* fallen back: one pool of every layer's blocks, nothing released */
            assert_null(pl_kv_cache_store(kv)->kinds);
            assert_int_equal(s.window_blocks_total, 0);
            assert_int_equal(s.blocks_all_full, 0);
            assert_int_equal(s.blocks_total, (int32_t)(left / unit));
            assert_false(pl_kv_cache_grouped(kv));
        }
        result *res = run_prompt_ids(e, &prompts[0][0], NREQ, PROMPT, &p);
        same(res, ref, NREQ, 1, GEN, k ? "draft, one pool" : "draft, layer kinds");
        pl_engine_get_stats(e, &s);
        assert_true(s.spec_draft_tokens > s.spec_accepted_tokens); /* some rolled back */
        if (k == 0) assert_true(s.window_freed_blocks > 0);
        else assert_int_equal(s.window_freed_blocks, 0);
        check_all_back(e);
        free(res);
        pl_engine_destroy(e);
    }
    free(ref);
}

/* The window pool short (outside its sizing bound, kv/cache.c's window_pool_blocks): blocks of
 * it held by a table outside the engine leave room for about one sequence's window. Allocation
 * answers "capacity" (the group waits), appends "not now" (the scheduler preempts); every request
 * still completes with the tokens of release off, and every block comes back. The full pool is
 * large (64 units): only the window pool can make anyone wait. */
static void test_gemma3_window_pool_short(void **state) {
    (void)state;
    int32_t prompts[NREQ][PROMPT];
    size_t unit;
    pl_request_params p;
    result *ref = gemma3_ref(prompts, &unit, &p);
    static const engine_opts runs[] = {{PL_PREEMPT_RECOMPUTE, 0, 2, 1, 0, 0, NULL, 0},
                                       {PL_PREEMPT_SWAP, 32, 2, 0, 0, 0, NULL, 0}};
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        pl_engine *e = make_engine(g3_path, unit, 64, runs[k]);
        pl_kv_cache *kv = pl_engine_kv_cache(e);
        pl_kv_manager *mw = pl_kv_cache_window_manager(kv);
        /* 2 sequences: ceil((2 x 16 + 32) / 16) + 4 = 8 window blocks; HOLD = 5 taken leave
         * 3: one sequence's window and chunk (a first chunk of 32 tokens: 2 blocks; decoding:
         * 2, 3 across a block boundary), not two */
        assert_int_equal(mw->cfg.num_blocks, 8);
        int32_t toks[HOLD * BSZ];
        for (int32_t i = 0; i < HOLD * BSZ; i++) toks[i] = 3 + i;
        pl_block_table hold = {0};
        assert_int_equal(pl_kv_allocate_prompt(mw, &hold, toks, HOLD * BSZ, 77, NULL), PL_OK);
        pl_engine_stats s = {0}; /* the cache's now (the engine's are a step's snapshot) */
        pl_kv_cache_stats(kv, &s);
        assert_int_equal(s.window_blocks_used, HOLD);
        assert_float_equal(s.window_kv_usage, HOLD / 8.0, 1e-9);
        result *res = run_prompt_ids(e, &prompts[0][0], NREQ, PROMPT, &p);
        same(res, ref, NREQ, 1, GEN, runs[k].mode == PL_PREEMPT_SWAP ? "short, swap"
                                                                     : "short, recompute");
        pl_engine_get_stats(e, &s);
        print_message("window pool short (%s): %d full + %d window blocks, %llu preemptions, "
                      "%llu swapped out\n", runs[k].mode == PL_PREEMPT_SWAP ? "swap" : "recompute",
                      (int)s.blocks_total, (int)s.window_blocks_total,
                      (unsigned long long)s.preemptions, (unsigned long long)s.swaps_out);
        assert_true(s.preemptions > 0); /* the full pool alone never preempts here */
        assert_int_equal(s.window_blocks_used, HOLD); /* only the held table's */
        pl_kv_free_table(mw, &hold);
        check_all_back(e);
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
    /* gemma4's forward (shared KV, shapes by kind) under preemption at every kernel level; the
     * sizing, the forks and the gemma3 runs test the cache, at the default level (as
     * test_kv_groups) */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_layers_take_no_blocks),
        cmocka_unit_test(test_gemma4_kinds),
        cmocka_unit_test(test_bad_files),
    };
    const struct CMUnitTest once[] = {
        cmocka_unit_test(test_kinds_sizing),
        cmocka_unit_test(test_gemma4_kinds_forks),
        cmocka_unit_test(test_gemma3_kinds),
        cmocka_unit_test(test_gemma3_draft_fallback),
        cmocka_unit_test(test_gemma3_window_pool_short),
        cmocka_unit_test(test_gemma4_vattention),
    };
    int failed = isa_run_group_tests(tests, setup, teardown);
    return failed | cmocka_run_group_tests(once, setup, teardown);
}
