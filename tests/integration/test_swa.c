/* Sliding-window attention end to end: a random-weight llama written by `pagellm mkmodel
 * --sliding-window W` (vocabulary from the shared stories260K), run
 *
 *   1. through the forward pass, one token at a time, with every block behind the window
 *      "freed" (its table entry -1, its bytes NaN): each position's logits must equal, within
 *      1e-4 (f32 KV), those of a reference that recomputes the position from scratch with only
 *      its last W tokens (at their own positions) and full causal attention: the dense mask;
 *   2. through the engine (chunked prefill, batching, block freeing, prefix caching, swap and
 *      recompute preemption in a small pool): every greedy token must be the reference's argmax
 *      (or within 1e-3 of it: a near tie), and blocks must have gone back to the pool.
 *
 * One layer, because only then is "the last W tokens alone" the same computation as the window:
 * with L layers a position's hidden state depends on up to L * (W - 1) tokens back (each layer
 * reaches W - 1 further through the previous layer's outputs), so recomputing from the last W
 * tokens would change the deeper layers' keys. The kernel's window against an explicit dense
 * mask, layer by layer, is test_attention's job.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/threadpool.h"
#include "engine/engine_parts.h"
#include "engine_util.h"
#include "kv/kv_store.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "kernels/cpu.h"
#include "../unit/isa_coverage.h"

enum { W = 24, BSZ = 16, MAXB = 64, PROMPT = 10, GEN = 200 };

static char model_path[512];
static pl_model *model;
static pl_threadpool *tp;
static pl_forward_ctx *fctx;
static pl_kv_store ref_kv; /* the reference's own cache: W tokens at most */

/* Logits of position p of `tok` from its last W tokens only, with full attention. */
static void reference_logits(const int32_t *tok, int32_t p, float *logits) {
    int32_t lo = p - W + 1 > 0 ? p - W + 1 : 0, n = p - lo + 1;
    int32_t pos[W], rows = n - 1, ss[2] = {0, n}, ctx = n, tab[MAXB];
    int64_t slots[W];
    for (int32_t i = 0; i < n; i++) {
        pos[i] = lo + i;
        slots[i] = i;
    }
    for (int32_t b = 0; b < MAXB; b++) tab[b] = b;
    pl_step_batch b = {.n_tokens = n, .token_ids = tok + lo, .positions = pos,
                       .slot_mapping = slots, .n_seqs = 1, .seq_start = ss, .context_lens = &ctx,
                       .block_tables = tab, .max_blocks = MAXB, .n_logits = 1, .logit_rows = &rows};
    int32_t saved = model->hp.sliding_window;
    model->hp.sliding_window = 0; /* the dense reference: the cache holds exactly the window */
    assert_int_equal(pl_model_forward(fctx, &ref_kv, &b, logits), PL_OK);
    model->hp.sliding_window = saved;
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static int setup(void **state) {
    (void)state;
    snprintf(model_path, sizeof model_path, "/tmp/pl_test_swa_%d.gguf", (int)getpid());
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' mkmodel '%s' --vocab-from '%s/models/stories260K.gguf' "
             "--dim 64 --layers 1 --heads 4 --kv-heads 2 --ffn 128 --ctx 1024 --seed 7 "
             "--sliding-window %d >/dev/null", PL_BINARY, model_path, PL_SHARED_DIR, (int)W);
    if (system(cmd) != 0) return -1;
    if (pl_model_load(model_path, &model) != PL_OK) return -1;
    tp = pl_threadpool_create(2);
    if (!tp || pl_forward_ctx_create(model, 256, 8, tp, &fctx) != PL_OK) return -1;
    pl_kv_layout l = {.dtype = PL_DT_F32, .block_size = BSZ, .n_kv_heads = model->hp.n_kv_heads,
                      .head_dim = model->hp.head_dim, .num_blocks = MAXB};
    return pl_kv_store_init(&ref_kv, &l, model->hp.n_layers, NULL) == PL_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    pl_kv_store_destroy(&ref_kv);
    pl_forward_ctx_destroy(fctx);
    pl_threadpool_destroy(tp);
    pl_model_destroy(model);
    unlink(model_path);
    return 0;
}

/* The GGUF key reaches the hyper-parameters: every layer windowed. */
static void test_hparams(void **state) {
    (void)state;
    assert_int_equal(model->hp.sliding_window, W);
    for (int32_t l = 0; l < model->hp.n_layers; l++) {
        assert_true(model->hp.swa_layers[l]);
        assert_int_equal(pl_model_layer_window(&model->hp, l), W);
    }
    assert_int_equal(pl_model_kv_window(&model->hp), W);
}

/* 1. Decode step by step with freed blocks; every position against the dense reference. */
static void test_forward_against_dense(void **state) {
    (void)state;
    const int32_t V = model->hp.n_vocab, N = PROMPT + GEN;
    pl_kv_layout l = ref_kv.layout;
    l.num_blocks = MAXB;
    pl_kv_store kv;
    assert_int_equal(pl_kv_store_init(&kv, &l, model->hp.n_layers, NULL), PL_OK);
    const size_t bb = pl_kv_block_bytes(&l);
    int32_t tok[PROMPT + GEN + 1], tab[MAXB];
    for (int32_t i = 0; i < PROMPT; i++) tok[i] = 3 + 17 * i % (V - 3);
    for (int32_t b = 0; b < MAXB; b++) tab[b] = MAXB - 1 - b; /* scattered: block b at MAXB-1-b */
    float *logits = malloc(sizeof(float) * (size_t)V), *ref = malloc(sizeof(float) * (size_t)V);
    assert_true(logits && ref);
    double worst = 0;
    int32_t freed = 0;
    for (int32_t p = 0; p < N; p++) {
        /* the step at p: blocks wholly before p - W + 1 are released (as the manager does) */
        int32_t upto = p - W + 1 > 0 ? (p - W + 1) / BSZ : 0;
        for (; freed < upto; freed++) {
            for (int32_t L = 0; L < model->hp.n_layers; L++) {
                memset((char *)pl_kv_store_k(&kv, L) + (size_t)tab[freed] * bb, 0xff, bb);
                memset((char *)pl_kv_store_v(&kv, L) + (size_t)tab[freed] * bb, 0xff, bb);
            }
            tab[freed] = -1; /* looking it up fails the kernel's range check */
        }
        int32_t ss[2] = {0, 1}, ctx = p + 1, row = 0;
        int64_t slot = (int64_t)tab[p / BSZ] * BSZ + p % BSZ;
        pl_step_batch b = {.n_tokens = 1, .token_ids = tok + p, .positions = &p,
                           .slot_mapping = &slot, .n_seqs = 1, .seq_start = ss,
                           .context_lens = &ctx, .block_tables = tab, .max_blocks = MAXB,
                           .n_logits = 1, .logit_rows = &row};
        assert_int_equal(pl_model_forward(fctx, &kv, &b, logits), PL_OK);
        reference_logits(tok, p, ref);
        for (int32_t v = 0; v < V; v++) {
            double e = fabs((double)logits[v] - ref[v]);
            if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
        }
        if (p + 1 >= PROMPT) tok[p + 1] = argmax(logits, V);
    }
    printf("    %d positions, window %d: worst |logit - dense reference| = %.2g; %d blocks freed\n",
           (int)N, (int)W, worst, (int)freed);
    assert_true(worst <= 1e-4);
    assert_true(freed >= (N - W) / BSZ);
    free(logits);
    free(ref);
    pl_kv_store_destroy(&kv);
}

static int spec_ngram; /* the next make_engine speculates with n-gram proposals */

static pl_engine *make_engine(int32_t blocks, pl_preemption_mode mode, uint64_t swap_blocks,
                              int prefix_cache) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = model_path;
    c.kv_cache_dtype = PL_KV_CACHE_F32;
    c.block_size = BSZ;
    pl_kv_layout l = ref_kv.layout;
    size_t per = pl_kv_bytes_per_block(&l, model->hp.n_layers);
    c.kv_cache_memory = (uint64_t)blocks * per;
    c.swap_space = swap_blocks * per;
    c.preemption_mode = mode;
    c.enable_prefix_caching = prefix_cache;
    c.threads = 2;
    c.max_num_seqs = 16;
    c.max_num_batched_tokens = 64; /* the prompts below take several chunks */
    c.speculative_ngram = spec_ngram;
    c.num_speculative_tokens = spec_ngram ? 4 : 0;
    pl_engine *e;
    if (pl_engine_create(&c, &e) != PL_OK) fail_msg("engine: %s", pl_last_error());
    return e;
}

static void greedy(pl_request_params *p, int32_t max_tokens) {
    pl_request_params_default(p);
    p->sampling.temperature = 0;
    p->max_tokens = max_tokens;
    p->ignore_eos = 1;
}

/* n greedy requests of prompts[n][len], max_tokens out each, run to the end (caller frees). */
static result *run_greedy(pl_engine *e, const int32_t *prompts, int32_t n, int32_t len,
                          int32_t out) {
    result *res = calloc((size_t)n, sizeof *res);
    uint64_t *ids = calloc((size_t)n, sizeof *ids);
    assert_true(res && ids);
    for (int32_t r = 0; r < n; r++) {
        pl_request_params p;
        greedy(&p, out);
        assert_int_equal(pl_engine_add_request(e, NULL, prompts + (size_t)r * len, (size_t)len,
                                               &p, &ids[r]), PL_OK);
    }
    run_all(e, ids, res, n);
    free(ids);
    return res;
}

/* Every generated token of r (prompt `prompt`) is the dense reference's argmax, or a near tie. */
static void check_greedy(const int32_t *prompt, int32_t n_prompt, const int32_t *out, int32_t n_out) {
    const int32_t V = model->hp.n_vocab;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(n_prompt + n_out));
    float *ref = malloc(sizeof(float) * (size_t)V);
    assert_true(tok && ref);
    memcpy(tok, prompt, sizeof(int32_t) * (size_t)n_prompt);
    memcpy(tok + n_prompt, out, sizeof(int32_t) * (size_t)n_out);
    for (int32_t i = 0; i < n_out; i++) {
        int32_t p = n_prompt + i - 1;
        reference_logits(tok, p, ref);
        int32_t best = argmax(ref, V);
        if (out[i] != best && !(ref[best] - ref[out[i]] < 1e-3f))
            fail_msg("token %d: the engine chose %d (logit %g), the dense reference %d (%g)",
                     (int)i, (int)out[i], ref[out[i]], (int)best, ref[best]);
    }
    free(tok);
    free(ref);
}

/* 2. Many long greedy generations in a pool smaller than one of them: the window's blocks go
 * back to the pool; preemption (swap, recompute) and prefix hits keep the results. */
static void test_engine_greedy(void **state) {
    (void)state;
    enum { NREQ = 6, LONG_PROMPT = 40 };
    static const struct {
        pl_preemption_mode mode;
        uint64_t swap;
        int cache;
        int32_t blocks;
    } runs[] = {{PL_PREEMPT_SWAP, 24, 1, 10}, {PL_PREEMPT_RECOMPUTE, 0, 1, 10},
                {PL_PREEMPT_RECOMPUTE, 0, 0, 10}};
    const int32_t V = model->hp.n_vocab;
    int32_t prompts[NREQ][LONG_PROMPT];
    for (int32_t r = 0; r < NREQ; r++) /* requests 0 and 1 share their whole prompt */
        for (int32_t i = 0; i < LONG_PROMPT; i++)
            prompts[r][i] = 3 + (int32_t)((7 * (r == 1 ? 0 : r) + 13 * i + i * i) % (V - 3));
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        /* 10 blocks or fewer: one request's 240 tokens would take 15 without the window */
        pl_engine *e = make_engine(runs[k].blocks, runs[k].mode, runs[k].swap, runs[k].cache);
        result *res = run_greedy(e, &prompts[0][0], NREQ, LONG_PROMPT, GEN);
        pl_engine_stats s;
        pl_engine_get_stats(e, &s);
        printf("    run %d: window %d, %llu blocks freed by the window, %llu preemptions, "
               "prefix hits %llu tokens\n", (int)k, s.sliding_window,
               (unsigned long long)s.window_freed_blocks, (unsigned long long)s.preemptions,
               (unsigned long long)s.prefix_hits);
        assert_int_equal(s.sliding_window, W);
        /* each request leaves (40 + 200 - 24) / 16 = 13 blocks behind its window (fewer when
         * preempted and recomputed; the shared prompt's blocks go back once) */
        assert_true(s.window_freed_blocks >= (uint64_t)NREQ * 8);
        assert_true(s.preemptions > 0);
        for (int32_t r = 0; r < NREQ; r++) {
            if (res[r].error[0]) fail_msg("request %d: %s", (int)r, res[r].error);
            assert_int_equal(res[r].n_ids[0], GEN);
            check_greedy(prompts[r], LONG_PROMPT, res[r].ids[0], GEN);
        }
        assert_memory_equal(res[0].ids[0], res[1].ids[0], sizeof(int32_t) * GEN);
        assert_int_equal(s.blocks_used, 0);
        assert_int_equal(pl_kv_cache_check(pl_engine_kv_cache(e)), PL_OK);
        free(res);
        pl_engine_destroy(e);
    }
}

/* Short prompts in a 5-block pool: sequences are admitted while others decode and are preempted
 * by recompute; their re-prefill takes its slots chunk by chunk behind the window (the
 * scheduler's lazy prefill), and every token is still the dense reference's. */
static void test_recompute_small_pool(void **state) {
    (void)state;
    enum { NREQ = 4, N = 8, OUT = 200 };
    const int32_t V = model->hp.n_vocab;
    int32_t prompts[NREQ][N];
    for (int32_t r = 0; r < NREQ; r++)
        for (int32_t i = 0; i < N; i++) prompts[r][i] = 3 + (int32_t)((31 * r + 7 * i) % (V - 3));
    pl_engine *e = make_engine(5, PL_PREEMPT_RECOMPUTE, 0, 1);
    result *res = run_greedy(e, &prompts[0][0], NREQ, N, OUT);
    pl_engine_stats s;
    pl_engine_get_stats(e, &s);
    printf("    %llu preemptions, %llu blocks freed by the window\n",
           (unsigned long long)s.preemptions, (unsigned long long)s.window_freed_blocks);
    assert_true(s.preemptions > 0);
    for (int32_t r = 0; r < NREQ; r++) {
        if (res[r].error[0]) fail_msg("request %d: %s", (int)r, res[r].error);
        assert_int_equal(res[r].n_ids[0], OUT);
        check_greedy(prompts[r], N, res[r].ids[0], OUT);
    }
    assert_int_equal(pl_kv_cache_check(pl_engine_kv_cache(e)), PL_OK);
    free(res);
    pl_engine_destroy(e);
}

/* A prompt cached by an earlier request: its blocks behind the first computed position's window
 * are not taken again (kv/manager.h), the rest are hits, and the result is the same. */
static void test_prefix_hit_behind_window(void **state) {
    (void)state;
    enum { N = 100, OUT = 50 };
    const int32_t V = model->hp.n_vocab;
    int32_t prompt[N];
    for (int32_t i = 0; i < N; i++) prompt[i] = 3 + (5 * i + 11) % (V - 3);
    pl_engine *e = make_engine(64, PL_PREEMPT_RECOMPUTE, 0, 1);
    result res[2];
    memset(res, 0, sizeof res);
    for (int r = 0; r < 2; r++) {
        pl_request_params p;
        greedy(&p, OUT);
        uint64_t id;
        assert_int_equal(pl_engine_add_request(e, NULL, prompt, N, &p, &id), PL_OK);
        run_all(e, &id, &res[r], 1);
        pl_engine_stats s;
        pl_engine_get_stats(e, &s);
        assert_int_equal(s.blocks_used, 0);
    }
    assert_int_equal(res[0].n_cached, 0);
    assert_int_equal(res[1].n_cached, (N - 1) / BSZ * BSZ); /* 96: every full block but the last */
    assert_int_equal(res[1].n_ids[0], OUT);
    assert_memory_equal(res[0].ids[0], res[1].ids[0], sizeof(int32_t) * OUT);
    check_greedy(prompt, N, res[1].ids[0], OUT);
    assert_int_equal(pl_kv_cache_check(pl_engine_kv_cache(e)), PL_OK);
    pl_engine_destroy(e);
}

/* Speculative decoding rolls back rejected proposals (pl_kv_truncate) in a windowed table; n > 1
 * and beam search share blocks (fork, copy-on-write) whose early entries were released. */
static void test_spec_fork_beam(void **state) {
    (void)state;
    enum { N = 30, OUT = 120 };
    const int32_t V = model->hp.n_vocab;
    int32_t prompt[N];
    for (int32_t i = 0; i < N; i++) prompt[i] = 3 + (i % 5) * 11 % (V - 3); /* repetitive: n-grams hit */
    spec_ngram = 1;
    pl_engine *e = make_engine(12, PL_PREEMPT_RECOMPUTE, 0, 1);
    spec_ngram = 0;
    result *res = run_greedy(e, prompt, 1, N, OUT);
    pl_engine_stats s;
    pl_engine_get_stats(e, &s);
    printf("    speculation: %llu proposals, %llu accepted, %llu blocks freed by the window\n",
           (unsigned long long)s.spec_draft_tokens, (unsigned long long)s.spec_accepted_tokens,
           (unsigned long long)s.window_freed_blocks);
    assert_true(s.spec_draft_tokens > s.spec_accepted_tokens && s.window_freed_blocks > 0);
    if (res[0].error[0]) fail_msg("%s", res[0].error);
    assert_int_equal(res[0].n_ids[0], OUT);
    check_greedy(prompt, N, res[0].ids[0], OUT);
    free(res);
    pl_engine_destroy(e);

    for (int beam = 0; beam < 2; beam++) {
        e = make_engine(16, PL_PREEMPT_RECOMPUTE, 0, 1);
        pl_request_params p;
        greedy(&p, OUT);
        p.n = p.best_of = 3;
        if (beam) p.use_beam_search = 1;
        else p.sampling.temperature = 1.0f, p.has_seed = 1, p.seed = 5;
        uint64_t id;
        assert_int_equal(pl_engine_add_request(e, NULL, prompt, N, &p, &id), PL_OK);
        result r;
        memset(&r, 0, sizeof r);
        run_all(e, &id, &r, 1);
        if (r.error[0]) fail_msg("%s: %s", beam ? "beam" : "n = 3", r.error);
        pl_engine_get_stats(e, &s);
        assert_true(s.window_freed_blocks > 0);
        assert_int_equal(s.blocks_used, 0);
        assert_int_equal(pl_kv_cache_check(pl_engine_kv_cache(e)), PL_OK);
        for (int k = 0; k < 3; k++) assert_true(r.n_ids[k] > 0);
        if (!beam) /* every sample ran to max_tokens (ignore_eos) */
            for (int k = 0; k < 3; k++) assert_int_equal(r.n_ids[k], OUT);
        pl_engine_destroy(e);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hparams),
        cmocka_unit_test(test_forward_against_dense),
        cmocka_unit_test(test_engine_greedy),
        cmocka_unit_test(test_prefix_hit_behind_window),
        cmocka_unit_test(test_recompute_small_pool),
        cmocka_unit_test(test_spec_fork_beam),
    };
    return isa_run_group_tests(tests, setup, teardown);
}
