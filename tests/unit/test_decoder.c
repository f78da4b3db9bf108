/* Unit tests for engine/decoder alone: no model and no runner. A real KV manager and scheduler
 * make the schedule; the test writes the logits a model would have produced (a chosen token far
 * ahead of the rest) and checks what the decoder makes of them:
 *  - greedy decoding appends the favoured token and streams it; a stop id ends the group with
 *    reason stop, the decoder reports it finished once (the test, as the engine, then takes
 *    it out of the scheduler and destroys it), and every block is freed;
 *  - n = 2 forks the prompt sequence after the prompt's logits, both sharing the prompt's
 *    blocks, and both finish by length;
 *  - prompt log-probabilities are read from every row of an all_logits item;
 *  - min_tokens masks EOS until enough tokens exist, then EOS ends the group.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "engine/decoder.h"
#include "gguf/gguf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MODEL PL_SHARED_DIR "/models/stories260K.gguf"

enum { V = 512, BS = 4, EOS = 2 };

typedef struct {
    pl_gguf *gg;
    pl_tokenizer *tok;
    pl_kv_cache *cache;         /* the KV cache door the scheduler and decoder use */
    pl_kv_manager *kv;          /* its manager */
    pl_scheduler s;
    pl_sched_output out;
    pl_decoder d;
    float *logits;        /* [64][V] */
    int32_t item_row[16];
    int forgotten;
    uint64_t next_id;
} world;

/* What the engine does with the groups the decoder reports finished (engine.c). */
static void release_finished(world *w) {
    pl_seq_group **gs;
    int32_t n = pl_decoder_take_finished(&w->d, &gs);
    for (int32_t i = 0; i < n; i++) {
        for (int32_t j = 0; j < i; j++) assert_ptr_not_equal(gs[j], gs[i]); /* once each */
        pl_scheduler_remove(&w->s, gs[i]);
        pl_group_destroy(gs[i]);
        w->forgotten++;
    }
}

static int setup(void **state) {
    world *w = calloc(1, sizeof *w);
    assert_int_equal(pl_gguf_open(MODEL, &w->gg), PL_OK);
    assert_int_equal(pl_tokenizer_load(w->gg, &w->tok), PL_OK);
    pl_kv_manager_config kc = {.block_size = BS, .num_blocks = 64, .max_blocks_per_seq = 64,
                               .watermark = 0, .enable_prefix_caching = 0};
    assert_int_equal(pl_kv_cache_create_blocks(&kc, &w->cache), PL_OK);
    w->kv = pl_kv_cache_manager(w->cache);
    pl_scheduler_config sc = {8, 64, 64, PL_PREEMPT_RECOMPUTE, {0}};
    assert_int_equal(pl_scheduler_init(&w->s, &sc, w->cache), PL_OK);
    pl_decoder_config dc = {.tok = w->tok, .n_vocab = V, .max_model_len = 256, .max_items = 9,
                            .kv = w->cache};
    assert_int_equal(pl_decoder_init(&w->d, &dc), PL_OK);
    w->logits = malloc(64 * V * sizeof(float));
    w->next_id = 1;
    *state = w;
    return 0;
}

static int teardown(void **state) {
    world *w = *state;
    pl_decoder_destroy(&w->d);
    pl_sched_output_destroy(&w->out);
    pl_scheduler_destroy(&w->s);
    pl_kv_cache_destroy(w->cache);
    pl_tokenizer_destroy(w->tok);
    pl_gguf_close(w->gg);
    free(w->logits);
    free(w);
    return 0;
}

/* A request as the engine makes one (token ids, no text); returns the client's channel. */
static pl_out_channel *add(world *w, const int32_t *ids, int32_t n, const pl_request_params *p) {
    pl_seq_group *g = calloc(1, sizeof *g);
    g->params = *p;
    if (g->params.best_of == 0) g->params.best_of = g->params.n;
    assert_int_equal(pl_group_copy_stops(g), PL_OK);
    g->prompt = malloc((size_t)n * sizeof(int32_t));
    memcpy(g->prompt, ids, (size_t)n * sizeof(int32_t));
    g->n_prompt = n;
    if (p->prompt_logprobs >= 0)
        g->prompt_top = calloc((size_t)n * (size_t)(p->prompt_logprobs + 1), sizeof(pl_token_logprob));
    pl_seq *q = pl_seq_create(g, 0, ids, n);
    assert_int_equal(pl_group_add_seq(g, q), 0);
    g->n_live = 1;
    pl_detok_init(&q->detok, w->tok, 1, 0);
    pl_rng_seed(&q->rng, p->has_seed ? p->seed : 1);
    g->id = w->next_id++;
    g->chan = pl_out_channel_create(g->id, g->params.n); /* one reference each: engine, client */
    pl_scheduler_add(&w->s, g);
    return g->chan;
}

/* Logits of one row: `tok` far ahead, `second` next, everything else equal. */
static void favour(float *row, int32_t tok, int32_t second) {
    for (int32_t i = 0; i < V; i++) row[i] = 0.0f;
    if (second >= 0) row[second] = 5.0f;
    row[tok] = 10.0f;
}

/* One step: schedule, fill each logits row with what `pick` says, decode. pick(row_token_pos)
 * gets the item and the position whose next token the row predicts. */
typedef int32_t (*pick_fn)(const pl_sched_item *it, int32_t pos);
static int32_t step(world *w, pick_fn pick, int32_t second) {
    assert_int_equal(pl_scheduler_schedule(&w->s, &w->out), PL_OK);
    int32_t rows = 0;
    for (int32_t i = 0; i < w->out.n_items; i++) {
        const pl_sched_item *it = &w->out.items[i];
        w->item_row[i] = it->all_logits || it->sample ? rows : -1;
        for (int32_t k = 0; k < it->n; k++)
            if (it->all_logits || (it->sample && k == it->n - 1))
                favour(w->logits + (size_t)rows++ * V, pick(it, it->start + k), second);
    }
    assert_int_equal(pl_decoder_update_from_output(&w->d, &w->out, w->logits, w->item_row), PL_OK);
    release_finished(w);
    assert_int_equal(pl_kv_manager_check(w->kv), PL_OK);
    return w->out.n_items;
}

typedef struct {
    int32_t ids[8][64], n[8];
    char text[8][256];
    pl_finish_reason finish[8];
    int32_t stop_token[8];
    int finished;
    pl_token_logprob *prompt_top;
    int32_t n_prompt_top;
} got;

static void drain(pl_out_channel *c, got *g) {
    pl_request_output *o;
    while (!g->finished && pl_out_poll(c, 0, &o) == PL_OK) { /* (the engine's poll stops at
                                                               the final output; the channel
                                                               keeps reporting it) */
        for (int32_t i = 0; i < o->n_deltas; i++) {
            const pl_completion_delta *d = &o->deltas[i];
            for (int32_t t = 0; t < d->n_tokens; t++) g->ids[d->index][g->n[d->index]++] = d->token_ids[t];
            strncat(g->text[d->index], d->text, sizeof g->text[0] - strlen(g->text[d->index]) - 1);
            if (d->finish) {
                g->finish[d->index] = d->finish;
                g->stop_token[d->index] = d->stop_token;
            }
        }
        if (o->prompt_top) {
            size_t sz = (size_t)o->n_prompt_tokens * (size_t)(o->n_prompt_top + 1) * sizeof *o->prompt_top;
            g->prompt_top = malloc(sz);
            memcpy(g->prompt_top, o->prompt_top, sz);
            g->n_prompt_top = o->n_prompt_top;
        }
        g->finished |= o->finished;
        pl_request_output_destroy(o);
    }
}

static void assert_pool_empty(world *w) {
    pl_kv_stats st;
    pl_kv_get_stats(w->kv, &st);
    assert_int_equal(st.blocks_used, 0);
    assert_false(pl_scheduler_has_work(&w->s));
}

/* ", there was" after "Once upon a time", then "." as the stop id. */
static int32_t story(const pl_sched_item *it, int32_t pos) {
    static const int32_t next[] = {432, 383, 286, 426};
    int32_t out = pos + 1 - it->seq->group->n_prompt; /* index of the token this row predicts */
    return out >= 0 && out < 4 ? next[out] : 426;
}

static void test_greedy_stream_and_stop_id(void **state) {
    world *w = *state;
    static const int32_t prompt[] = {1, 403, 407, 261, 378};
    pl_request_params p;
    pl_request_params_default(&p);
    p.sampling.temperature = 0;
    p.max_tokens = 10;
    int32_t stop = 426;
    p.stop_token_ids = &stop;
    p.n_stop_token_ids = 1;
    pl_out_channel *c = add(w, prompt, 5, &p);
    static got g;
    memset(&g, 0, sizeof g);
    assert_int_equal(step(w, story, 7), 1); /* prefill: samples 432 */
    drain(c, &g);
    assert_int_equal(g.n[0], 1);
    assert_int_equal(g.ids[0][0], 432);
    assert_string_equal(g.text[0], ",");
    assert_false(g.finished);
    for (int i = 0; i < 3; i++) step(w, story, 7);
    drain(c, &g);
    assert_true(g.finished);
    assert_int_equal(g.finish[0], PL_FINISH_STOP);
    assert_int_equal(g.stop_token[0], 426);
    assert_int_equal(g.ids[0][1], 383);
    assert_int_equal(g.ids[0][2], 286);
    assert_string_equal(g.text[0], ", there was");
    assert_int_equal(w->forgotten, 1);
    assert_int_equal(w->d.requests_finished, 1);
    assert_pool_empty(w);
    pl_out_channel_unref(c);
}

static int32_t always_7(const pl_sched_item *it, int32_t pos) {
    (void)it;
    (void)pos;
    return 7;
}

static void test_fork_shares_prompt_blocks(void **state) {
    world *w = *state;
    static const int32_t prompt[] = {1, 403, 407, 261, 378, 432};
    pl_request_params p;
    pl_request_params_default(&p);
    p.n = 2;
    p.max_tokens = 3;
    p.has_seed = 1;
    p.seed = 3;
    p.ignore_eos = 1;
    int forgotten = w->forgotten;
    pl_out_channel *c = add(w, prompt, 6, &p);
    step(w, always_7, 8); /* prefill, then the fork */
    pl_kv_stats st;
    pl_kv_get_stats(w->kv, &st);
    assert_int_equal(st.blocks_used, 2); /* the prompt's two blocks, shared by both */
    assert_int_equal(st.n_tables, 2);
    while (pl_scheduler_has_work(&w->s)) step(w, always_7, 8);
    static got g;
    memset(&g, 0, sizeof g);
    drain(c, &g);
    assert_true(g.finished);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(g.n[k], 3);
        assert_int_equal(g.finish[k], PL_FINISH_LENGTH);
    }
    assert_int_equal(w->forgotten, forgotten + 1);
    assert_pool_empty(w);
    pl_out_channel_unref(c);
}

/* Each prompt row favours the prompt's own next token. */
static int32_t prompt_next(const pl_sched_item *it, int32_t pos) {
    const pl_seq_group *g = it->seq->group;
    return pos + 1 < g->n_prompt ? g->prompt[pos + 1] : 9;
}

static void test_prompt_logprobs(void **state) {
    world *w = *state;
    static const int32_t prompt[] = {1, 403, 407, 261, 378};
    pl_request_params p;
    pl_request_params_default(&p);
    p.sampling.temperature = 0;
    p.max_tokens = 1;
    p.prompt_logprobs = 2;
    pl_out_channel *c = add(w, prompt, 5, &p);
    while (pl_scheduler_has_work(&w->s)) step(w, prompt_next, 11);
    static got g;
    memset(&g, 0, sizeof g);
    drain(c, &g);
    assert_true(g.finished);
    assert_int_equal(g.ids[0][0], 9);
    assert_non_null(g.prompt_top);
    assert_int_equal(g.n_prompt_top, 2);
    /* log-softmax of {10, 5, 0 x 510}: the favoured token's logprob */
    double z = log(exp(10.0) + exp(5.0) + 510.0);
    for (int32_t pos = 1; pos < 5; pos++) {
        const pl_token_logprob *r = g.prompt_top + (size_t)pos * 3;
        assert_int_equal(r[0].id, prompt[pos]); /* top-1 */
        assert_int_equal(r[1].id, 11);          /* top-2 */
        assert_int_equal(r[2].id, prompt[pos]); /* the prompt token itself */
        assert_true(fabs(r[2].logprob - (10.0 - z)) < 1e-4);
    }
    free(g.prompt_top);
    assert_pool_empty(w);
    pl_out_channel_unref(c);
}

static int32_t eos(const pl_sched_item *it, int32_t pos) {
    (void)it;
    (void)pos;
    return EOS;
}

static void test_min_tokens_masks_eos(void **state) {
    world *w = *state;
    static const int32_t prompt[] = {1, 403, 407};
    pl_request_params p;
    pl_request_params_default(&p);
    p.sampling.temperature = 0;
    p.max_tokens = 8;
    p.min_tokens = 2;
    pl_out_channel *c = add(w, prompt, 3, &p);
    while (pl_scheduler_has_work(&w->s)) step(w, eos, 13);
    static got g;
    memset(&g, 0, sizeof g);
    drain(c, &g);
    assert_true(g.finished);
    assert_int_equal(g.finish[0], PL_FINISH_STOP);
    /* EOS was masked for the first two tokens: the runner-up was chosen, then EOS ended it. */
    assert_int_equal(g.ids[0][0], 13);
    assert_int_equal(g.ids[0][1], 13);
    assert_int_equal(g.stop_token[0], EOS);
    assert_pool_empty(w);
    pl_out_channel_unref(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_stream_and_stop_id),
        cmocka_unit_test(test_fork_shares_prompt_blocks),
        cmocka_unit_test(test_prompt_logprobs),
        cmocka_unit_test(test_min_tokens_masks_eos),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
