/* Scheduler tests with a fake model: the "model" computes whatever the schedule says and emits a
 * deterministic next token, so admission order, budgets, chunked prefill, victim choice,
 * recompute and swap resumption, and refusals are checked without any kernel. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "engine/scheduler.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    pl_kv_cache *cache;         /* the KV cache door the scheduler and decoder use */
    pl_kv_manager *kv;          /* its manager */
    pl_scheduler s;
    pl_sched_output out; /* the step's schedule, reused */
    pl_seq_group *groups[64];
    int n_groups;
    int done[64];       /* finished in this step number (1-based), 0 = not yet */
    int refused[64];
    int last_run[64];   /* last step in which the group had an item */
    int first_run[64];  /* first step in which the group had an item */
    int step;
    int accept_all;     /* speculation: the fake model accepts every proposal */
    long spec_tokens;   /* proposals accepted */
} world;

static int32_t world_window; /* the KV manager's sliding window for the next world_init */

static int32_t propose_sevens(void *ctx, pl_seq *q, int32_t k_max);

/* A world whose scheduler speculates (4 proposals per sequence, none in a step that decodes more
 * than max_batch sequences) when max_batch > 0: the hook is the scheduler's option at init. */
static void world_init_spec(world *w, int32_t blocks, int32_t swap_blocks, int32_t bs,
                            int32_t seqs, int32_t tokens, pl_preemption_mode mode,
                            int32_t max_batch) {
    memset(w, 0, sizeof *w);
    pl_kv_manager_config mc = {bs, blocks, swap_blocks, 64, 0.0, 1, 1, PL_KV_POLICY_PAGED, 0,
                               world_window, 0, 1};
    assert_int_equal(pl_kv_cache_create_blocks(&mc, &w->cache), PL_OK);
    w->kv = pl_kv_cache_manager(w->cache);
    pl_scheduler_config sc = {seqs, tokens, tokens, mode, {0}};
    if (max_batch > 0) sc.spec = (pl_spec_hook){4, max_batch, propose_sevens, NULL, NULL};
    assert_int_equal(pl_scheduler_init(&w->s, &sc, w->cache), PL_OK);
}

static void world_init(world *w, int32_t blocks, int32_t swap_blocks, int32_t bs, int32_t seqs,
                       int32_t tokens, pl_preemption_mode mode) {
    world_init_spec(w, blocks, swap_blocks, bs, seqs, tokens, mode, 0);
}

/* What the engine does with a finished group (engine.c release_finished): out of the scheduler,
 * its blocks back to the KV cache, destroyed. */
static void release(world *w, pl_seq_group *g) {
    pl_scheduler_remove(&w->s, g);
    for (int32_t j = 0; j < g->n_seqs; j++)
        pl_kv_cache_free(w->cache, &g->seqs[j]->table, &g->seqs[j]->table_w);
    pl_group_destroy(g);
}

static void world_free(world *w) {
    for (int i = 0; i < w->n_groups; i++)
        if (w->groups[i]) release(w, w->groups[i]);
    pl_scheduler_destroy(&w->s);
    pl_sched_output_destroy(&w->out);
    pl_kv_stats st;
    pl_kv_get_stats(w->kv, &st);
    assert_int_equal(st.blocks_used, 0); /* everything came back */
    pl_kv_cache_destroy(w->cache);
}

/* A request arriving at `arrival` with a prompt of n tokens (distinct per request). */
static int add_group(world *w, double arrival, int32_t n_prompt, int32_t max_tokens, int32_t n) {
    pl_seq_group *g = calloc(1, sizeof *g);
    pl_request_params_default(&g->params);
    g->params.max_tokens = max_tokens;
    g->params.n = n;
    g->params.best_of = n;
    g->id = (uint64_t)w->n_groups + 1;
    g->arrival = arrival;
    g->n_prompt = n_prompt;
    g->prompt = malloc((size_t)n_prompt * sizeof(int32_t));
    for (int32_t i = 0; i < n_prompt; i++) g->prompt[i] = (int32_t)(g->id * 100 + (uint64_t)i);
    pl_seq *q = pl_seq_create(g, 0, g->prompt, n_prompt);
    assert_int_equal(pl_group_add_seq(g, q), 0);
    g->n_live = 1;
    pl_scheduler_add(&w->s, g);
    w->groups[w->n_groups] = g;
    return w->n_groups++;
}

static int index_of(world *w, pl_seq_group *g) {
    for (int i = 0; i < w->n_groups; i++)
        if (w->groups[i] == g) return i;
    return -1;
}

static void finish_group(world *w, int i) {
    release(w, w->groups[i]);
    w->groups[i] = NULL;
    w->done[i] = w->step;
}

/* One step of the fake engine. Returns the number of items scheduled. */
static int32_t fake_step(world *w) {
    const pl_scheduler *sc = &w->s;
    pl_sched_output *s = &w->out;
    w->step++;
    assert_int_equal(pl_scheduler_schedule(&w->s, s), PL_OK);
    for (int32_t i = 0; i < s->n_refused; i++) {
        int k = index_of(w, s->refused[i]);
        w->refused[k] = 1;
        finish_group(w, k);
    }
    assert_true(s->n_tokens <= sc->cfg.max_num_batched_tokens);
    assert_true(s->n_items <= sc->cfg.max_num_seqs);
    for (int32_t i = 0; i < s->n_items; i++) {
        pl_sched_item *it = &s->items[i];
        int k = index_of(w, it->seq->group);
        if (!w->first_run[k]) w->first_run[k] = w->step;
        w->last_run[k] = w->step;
        if (it->n_spec > 0) continue; /* verified below */
        it->seq->n_computed = it->start + it->n;
        assert_int_equal(pl_kv_commit(w->kv, &it->seq->table, it->seq->tokens,
                                      it->seq->n_computed), PL_OK);
    }
    for (int32_t i = 0; i < s->n_items; i++) {
        pl_sched_item *it = &s->items[i];
        pl_seq *q = it->seq;
        pl_seq_group *g = q->group;
        if (!it->sample || q->status != PL_SEQ_RUNNING) continue;
        if (!g->prefilled) { /* fork into n, as the engine does */
            g->prefilled = 1;
            for (int32_t k = 1; k < g->params.n; k++) {
                pl_seq *c = pl_seq_create(g, k, q->tokens, q->n_tokens);
                c->n_computed = q->n_computed;
                c->status = PL_SEQ_RUNNING;
                assert_int_equal(pl_kv_fork(w->kv, &q->table, &c->table), PL_OK);
                assert_int_equal(pl_group_add_seq(g, c), 0);
                g->n_live++;
                c->tokens[c->n_tokens++] = 7 + k;
                if (c->n_tokens - g->n_prompt >= g->params.max_tokens) {
                    c->status = PL_SEQ_FINISHED;
                    pl_kv_free_table(w->kv, &c->table);
                    g->n_live--;
                }
            }
        }
        int32_t tok = 7; /* the fake model's token */
        if (it->n_spec > 0) { /* the fake model agrees with the first `acc` proposals (7s) */
            int32_t acc = w->accept_all ? it->n_spec : (int32_t)((q->n_tokens + w->step) % (it->n_spec + 1));
            q->n_tokens += acc;
            q->n_computed = q->n_tokens;
            q->n_spec = 0;
            assert_int_equal(pl_kv_truncate(w->kv, &q->table, q->n_computed), PL_OK);
            assert_int_equal(pl_kv_commit(w->kv, &q->table, q->tokens, q->n_computed), PL_OK);
            w->spec_tokens += acc;
            if (acc < it->n_spec) tok = 8; /* where it disagrees, its own token differs */
        }
        q->tokens[q->n_tokens++] = tok;
        if (q->n_tokens - g->n_prompt >= g->params.max_tokens) {
            q->status = PL_SEQ_FINISHED;
            pl_kv_free_table(w->kv, &q->table);
            g->n_live--;
        }
    }
    for (int i = 0; i < w->n_groups; i++)
        if (w->groups[i] && w->groups[i]->n_live == 0) finish_group(w, i);
    assert_int_equal(pl_kv_manager_check(w->kv), PL_OK);
    return s->n_items;
}

/* The fake proposer: k_max 7s, as the fake model will say. */
static int32_t propose_sevens(void *ctx, pl_seq *q, int32_t k_max) {
    (void)ctx;
    for (int32_t i = 0; i < k_max; i++) q->tokens[q->n_tokens + i] = 7;
    return k_max;
}

static void run_to_end(world *w) {
    for (int i = 0; i < 10000 && pl_scheduler_has_work(&w->s); i++) fake_step(w);
    assert_false(pl_scheduler_has_work(&w->s));
}

static void test_fcfs_admission(void **state) {
    (void)state;
    world w;
    world_init(&w, 64, 0, 4, 2, 64, PL_PREEMPT_RECOMPUTE); /* two sequences at a time */
    for (int i = 0; i < 5; i++) add_group(&w, i, 6, 3, 1);
    /* pl_scheduler_queue, which the engine tests read the queues through, names each of them. */
    const pl_group_queue *waiting = pl_scheduler_queue(&w.s, PL_SEQ_WAITING);
    assert_ptr_equal(waiting, &w.s.waiting);
    assert_ptr_equal(pl_scheduler_queue(&w.s, PL_SEQ_RUNNING), &w.s.running);
    assert_ptr_equal(pl_scheduler_queue(&w.s, PL_SEQ_SWAPPED), &w.s.swapped);
    assert_null(pl_scheduler_queue(&w.s, PL_SEQ_FINISHED));
    assert_int_equal(waiting->n, 5);
    assert_ptr_equal(waiting->head, w.groups[0]);
    run_to_end(&w);
    /* First come, first served: they finish in arrival order, two at a time. */
    for (int i = 1; i < 5; i++) assert_true(w.done[i] >= w.done[i - 1]);
    assert_true(w.done[2] > w.done[1]);
    world_free(&w);
}

static void test_chunked_prefill_never_stalls_decodes(void **state) {
    (void)state;
    world w;
    world_init(&w, 64, 0, 4, 8, 8, PL_PREEMPT_RECOMPUTE); /* 8 tokens per step */
    add_group(&w, 0, 3, 20, 1);                            /* a short request that decodes */
    fake_step(&w);                                         /* its prefill */
    int big = add_group(&w, 1, 30, 2, 1);                  /* then a 30-token prompt */
    int32_t chunks[8], n_chunks = 0;
    while (w.groups[big] && w.groups[big]->seqs[0]->n_computed < 30) {
        fake_step(&w);
        int decode = 0;
        for (int32_t i = 0; i < w.out.n_items; i++) {
            if (w.out.items[i].seq->group == w.groups[0]) decode = 1;
            else chunks[n_chunks++] = w.out.items[i].n;
        }
        assert_true(decode); /* every step still decodes the short request */
    }
    /* 7 tokens of budget left beside the decode: chunks of 7, 7, 7, 7, 2. */
    assert_int_equal(n_chunks, 5);
    for (int i = 0; i < 4; i++) assert_int_equal(chunks[i], 7);
    assert_int_equal(chunks[4], 2);
    run_to_end(&w);
    world_free(&w);
}

static void test_budgets(void **state) {
    (void)state;
    world w;
    world_init(&w, 256, 0, 4, 3, 10, PL_PREEMPT_RECOMPUTE);
    for (int i = 0; i < 6; i++) add_group(&w, i, 5, 4, 1);
    int max_items = 0;
    while (pl_scheduler_has_work(&w.s)) {
        int32_t n = fake_step(&w);
        if (n > max_items) max_items = n;
        assert_true(w.out.n_tokens <= 10);
    }
    assert_int_equal(max_items, 3);
    world_free(&w);
}

/* Pool of 8 blocks of 4 tokens: three requests of 8-token prompts growing to 20 cannot all fit;
 * the youngest is preempted, all its sequences together, and resumes before a newer request. */
static void check_preemption(pl_preemption_mode mode, int32_t swap_blocks) {
    world w;
    world_init(&w, 8, swap_blocks, 4, 8, 64, mode);
    int a = add_group(&w, 0, 8, 12, 1);
    int b = add_group(&w, 1, 8, 12, 1);
    int c = add_group(&w, 2, 4, 12, 2); /* two sequences sharing the prompt */
    fake_step(&w);
    uint64_t before = w.s.preemptions;
    int victim_seen = 0;
    while (w.s.preemptions == before && pl_scheduler_has_work(&w.s)) fake_step(&w);
    assert_true(w.s.preemptions > before);
    /* The youngest (c) went, whole. */
    pl_seq_group *gc = w.groups[c];
    assert_non_null(gc);
    for (int32_t i = 0; i < gc->n_seqs; i++)
        if (gc->seqs[i]->status != PL_SEQ_FINISHED) {
            assert_int_equal(gc->seqs[i]->status,
                             mode == PL_PREEMPT_SWAP ? PL_SEQ_SWAPPED : PL_SEQ_WAITING);
            victim_seen = 1;
        }
    assert_true(victim_seen);
    assert_non_null(w.groups[a]);
    assert_non_null(w.groups[b]);
    if (mode == PL_PREEMPT_SWAP) assert_true(w.s.swaps_out > 0);
    /* A newer request must not be admitted before the preempted one resumes. */
    int d = add_group(&w, 3, 4, 2, 1);
    int preempted_at = w.step;
    int resumed = 0;
    while (pl_scheduler_has_work(&w.s)) {
        fake_step(&w);
        if (!resumed && w.last_run[c] > preempted_at) resumed = w.step;
    }
    assert_true(resumed > 0 && w.first_run[d] > 0);
    assert_true(resumed <= w.first_run[d]);
    assert_true(w.done[c] > 0 && w.done[d] > 0);
    world_free(&w);
}

static void test_preempt_recompute(void **state) {
    (void)state;
    check_preemption(PL_PREEMPT_RECOMPUTE, 0);
}

static void test_preempt_swap(void **state) {
    (void)state;
    check_preemption(PL_PREEMPT_SWAP, 16);
}

static void test_refuse_impossible(void **state) {
    (void)state;
    world w;
    world_init(&w, 4, 0, 4, 8, 64, PL_PREEMPT_RECOMPUTE);
    int big = add_group(&w, 0, 40, 2, 1); /* 10 blocks > a pool of 4 */
    int ok = add_group(&w, 1, 4, 2, 1);
    run_to_end(&w);
    assert_true(w.refused[big]);
    assert_false(w.refused[ok]);
    assert_true(w.done[ok] > 0);
    world_free(&w);
}

/* A sliding-window cache (window 6, blocks of 4): a prompt of 40 tokens (10 blocks) is admitted
 * into a pool of 8 and prefilled chunk by chunk, and requests growing to 68 tokens (17 blocks)
 * run side by side, preempted and recomputed as needed, never refused; the pool is never
 * overdrawn and every block comes back. */
static void test_window_accounting(void **state) {
    (void)state;
    for (int mode = 0; mode < 2; mode++) {
        world w;
        world_window = 6;
        world_init(&w, 8, mode ? 8 : 0, 4, 8, 16, mode ? PL_PREEMPT_SWAP : PL_PREEMPT_RECOMPUTE);
        world_window = 0;
        int big = add_group(&w, 0, 40, 20, 1);
        int g[4];
        for (int i = 0; i < 4; i++) g[i] = add_group(&w, 1 + i, 8, 60, 1);
        int32_t peak = 0;
        for (int i = 0; i < 10000 && pl_scheduler_has_work(&w.s); i++) {
            fake_step(&w);
            pl_kv_stats st;
            pl_kv_get_stats(w.kv, &st);
            peak = st.blocks_used > peak ? st.blocks_used : peak;
        }
        assert_false(pl_scheduler_has_work(&w.s));
        assert_false(w.refused[big]);
        assert_true(w.done[big] > 0);
        for (int i = 0; i < 4; i++) assert_true(!w.refused[g[i]] && w.done[g[i]] > 0);
        pl_kv_stats st;
        pl_kv_get_stats(w.kv, &st);
        print_message("    window 6, %s: peak %d of 8 blocks, %llu preemptions, %llu blocks "
                      "freed by the window\n", mode ? "swap" : "recompute", (int)peak,
                      (unsigned long long)w.s.preemptions, (unsigned long long)st.window_freed);
        assert_true(st.window_freed > 0);
        world_free(&w);
    }
}

/* Speculative decoding's share of a step: one token per decode first, proposals (k + 1 rows
 * each) from what the token budget leaves, oldest first; none when too many sequences decode. */
static void test_speculation_budget(void **state) {
    (void)state;
    world w;
    world_init_spec(&w, 256, 0, 4, 4, 10, PL_PREEMPT_RECOMPUTE, 8);
    w.accept_all = 1;
    for (int i = 0; i < 4; i++) add_group(&w, i, 2, 20, 1);
    fake_step(&w); /* the prefills (8 tokens) */
    fake_step(&w);
    assert_int_equal(w.out.n_items, 4);
    assert_int_equal(w.out.n_tokens, 10); /* 4 decodes + 4 + 2 proposals */
    assert_int_equal(w.out.items[0].n_spec, 4);
    assert_int_equal(w.out.items[0].n, 5);
    assert_int_equal(w.out.items[1].n_spec, 2);
    assert_int_equal(w.out.items[2].n_spec, 0);
    assert_int_equal(w.out.items[3].n_spec, 0);
    assert_int_equal(w.s.spec_off_steps, 0);
    run_to_end(&w);
    for (int i = 0; i < 4; i++) assert_true(w.done[i] > 0);
    world_free(&w);
    /* The same requests with a cut-off of 3: four decodes are more, nobody speculates. */
    world_init_spec(&w, 256, 0, 4, 4, 10, PL_PREEMPT_RECOMPUTE, 3);
    w.accept_all = 1;
    for (int i = 0; i < 4; i++) add_group(&w, i, 2, 20, 1);
    fake_step(&w);
    assert_int_equal(w.s.spec_off_steps, 0); /* a prefill-only step decodes nothing */
    fake_step(&w);
    assert_int_equal(w.out.n_items, 4);
    assert_int_equal(w.out.n_tokens, 4);
    assert_int_equal(w.s.spec_off_steps, 1);
    run_to_end(&w);
    for (int i = 0; i < 4; i++) assert_true(w.done[i] > 0);
    world_free(&w);
}

/* A group swapped back in is not among the decodes counted when the step began: its first
 * sequence's proposals must still leave its second sequence the block it needs (else the step
 * would schedule half the group and fail). Pool of 10: R decodes in 1 block, a stranger holds 5,
 * G (two sequences sharing 2 full blocks) comes back from swap with exactly the 2 blocks its
 * two decodes need left over. */
static void test_speculation_leaves_group_room(void **state) {
    (void)state;
    world w;
    world_init_spec(&w, 10, 16, 4, 8, 64, PL_PREEMPT_SWAP, 8);
    w.accept_all = 1;
    int r = add_group(&w, 0, 3, 2, 1);  /* decodes once more, no room to propose (max_tokens) */
    int g = add_group(&w, 1, 8, 8, 2); /* two sequences of 9 tokens after the first step */
    fake_step(&w);
    pl_seq_group *G = w.groups[g];
    assert_int_equal(G->n_seqs, 2);
    /* Swap G out by hand and park it in the swapped queue, as a preemption would. */
    pl_block_table *tabs[2] = {&G->seqs[0]->table, &G->seqs[1]->table};
    pl_block_copy map[4];
    int32_t n_map = 0;
    assert_int_equal(pl_kv_swap_out(w.kv, tabs, 2, map, 4, &n_map), PL_OK);
    assert_int_equal(n_map, 2);
    for (int i = 0; i < 2; i++) G->seqs[i]->status = PL_SEQ_SWAPPED;
    pl_group_queue *run = &w.s.running, *sw = &w.s.swapped;
    if (G->prev) G->prev->next = G->next;
    else run->head = G->next;
    if (G->next) G->next->prev = G->prev;
    else run->tail = G->prev;
    run->n--;
    G->next = G->prev = NULL;
    sw->head = sw->tail = G;
    sw->n = 1;
    G->queue = sw;
    pl_block_table stranger = {0};
    int32_t toks[20] = {0};
    assert_int_equal(pl_kv_allocate_prompt(w.kv, &stranger, toks, 20, 99, NULL), PL_OK);
    pl_kv_stats st;
    pl_kv_get_stats(w.kv, &st);
    assert_int_equal(st.blocks_free, 4);
    fake_step(&w); /* asserts the schedule succeeded */
    int items_g = 0;
    for (int32_t i = 0; i < w.out.n_items; i++) /* R's sequence is freed: compare pointers only */
        items_g += w.out.items[i].seq == G->seqs[0] || w.out.items[i].seq == G->seqs[1];
    assert_int_equal(items_g, 2);
    assert_true(w.done[r] > 0);
    pl_kv_free_table(w.kv, &stranger);
    run_to_end(&w);
    assert_true(w.done[g] > 0);
    world_free(&w);
}

/* Speculation under memory pressure: requests of one and two sequences in a small pool, proposals
 * partly accepted (the table rolled back), preemption by recompute or swap. Every step stays in
 * its budgets (fake_step), every group finishes, every block comes back (world_free). */
static void check_speculation_pressure(pl_preemption_mode mode, int32_t swap_blocks) {
    world w;
    world_init_spec(&w, 20, swap_blocks, 4, 8, 32, mode, 8);
    for (int i = 0; i < 12; i++) add_group(&w, i, 3 + (i * 5) % 9, 10 + (i * 7) % 21, 1 + i % 2);
    run_to_end(&w);
    for (int i = 0; i < 12; i++) assert_true(w.done[i] > 0 && !w.refused[i]);
    assert_true(w.s.preemptions > 0 && w.spec_tokens > 0);
    if (mode == PL_PREEMPT_SWAP) assert_true(w.s.swaps_out > 0);
    world_free(&w);
}

static void test_speculation_pressure(void **state) {
    (void)state;
    check_speculation_pressure(PL_PREEMPT_RECOMPUTE, 0);
    check_speculation_pressure(PL_PREEMPT_SWAP, 32);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fcfs_admission),
        cmocka_unit_test(test_chunked_prefill_never_stalls_decodes),
        cmocka_unit_test(test_budgets),
        cmocka_unit_test(test_speculation_budget),
        cmocka_unit_test(test_speculation_pressure),
        cmocka_unit_test(test_speculation_leaves_group_room),
        cmocka_unit_test(test_preempt_recompute),
        cmocka_unit_test(test_preempt_swap),
        cmocka_unit_test(test_refuse_impossible),
        cmocka_unit_test(test_window_accounting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
