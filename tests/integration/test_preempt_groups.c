/* Preemption of sequence groups under every budget (issue 31), with the real stories260K model.
 *
 * A mix of single requests and groups (n, best_of, beam search; one large n = 8 group whose
 * prompt shares its first blocks with another request's) runs once in a roomy pool: that is the
 * reference. Then the same mix (same seeds) runs in pools from roomy down to the smallest that
 * admits a request, preempting by recompute (with and without prefix caching) and by swapping
 * (into a swap pool that holds only part of what is preempted, so swapping falls back to
 * recompute). Every request must either be refused up front, by pl_engine_add_request, or
 * complete with exactly its reference tokens: no request fails once admitted, and a group that
 * was preempted comes back (its shared prompt counted once) and samples what it would have
 * sampled unpreempted (its sequences' RNG states survive the preemption).
 *
 * The vAttention layout refuses groups up front, naming the layout, and runs the single requests
 * the same way down to the smallest budget.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "engine/engine_parts.h"
static void stuck_dump(pl_engine *e);
#define RUN_ALL_STUCK_HOOK stuck_dump
#include "engine_util.h"

#include <stdlib.h>
#include <unistd.h>

static const char *model = PL_SHARED_DIR "/models/stories260K.gguf"; /* the one of this test */

/* stories260K, f16 KV: 5 layers x 4 KV heads x 8 dims x 2 bytes x (K, V) = 640 bytes a token. */
enum { BS = 16, ROOMY = 400, NREQ = 8 };
static uint64_t BLOCK_BYTES = 640 * BS; /* of `model`'s KV cache */
static pl_kv_cache_dtype kv_dtype = PL_KV_CACHE_F16; /* test_vattention's sweep: f32 */

typedef struct {
    int32_t prompt_len, max_tokens, n, best_of, beam, greedy;
    int32_t share_with, share_len; /* the prompt's first share_len ids are request share_with's */
} req_spec;

static const req_spec MIX[NREQ] = {
    {60, 50, 1, 1, 0, 0, -1, 0},  /* single, sampled */
    {40, 60, 1, 1, 0, 1, -1, 0},  /* single, greedy */
    {50, 30, 2, 3, 0, 0, -1, 0},  /* best_of 3, n 2 */
    {30, 20, 3, 3, 1, 1, -1, 0},  /* beam search, width 3 */
    {90, 40, 1, 1, 0, 0, -1, 0},  /* single, sampled */
    {20, 70, 4, 4, 0, 0, -1, 0},  /* n 4, short prompt, long outputs */
    {70, 30, 3, 3, 0, 0, 7, 48},  /* n 3, its first 3 blocks are the large group's */
    {100, 40, 8, 8, 0, 0, -1, 0}, /* the large group, youngest: preempted first */
};

static int32_t prompts[NREQ][128];

static void make_prompts(void) {
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int r = 0; r < NREQ; r++) {
        prompts[r][0] = 1; /* BOS */
        for (int32_t i = 1; i < MIX[r].prompt_len; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            prompts[r][i] = 3 + (int32_t)(x % 500); /* stories260K: 512 ids */
        }
    }
    for (int r = 0; r < NREQ; r++)
        if (MIX[r].share_with >= 0)
            memcpy(prompts[r], prompts[MIX[r].share_with], (size_t)MIX[r].share_len * sizeof(int32_t));
}

static void params_of(int r, pl_request_params *p) {
    const req_spec *s = &MIX[r];
    pl_request_params_default(p);
    p->max_tokens = s->max_tokens;
    p->ignore_eos = 1;
    p->n = s->n;
    p->best_of = s->best_of;
    p->use_beam_search = s->beam;
    p->sampling.temperature = s->greedy ? 0.0f : 0.9f;
    p->sampling.top_p = 0.95f;
    p->has_seed = 1;
    p->seed = 500 + (uint64_t)r;
}

static pl_engine *make(pl_kv_layout_mode layout, uint64_t kv_bytes, pl_preemption_mode mode,
                       uint64_t swap_bytes, int prefix_cache) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = model;
    c.kv_cache_memory = kv_bytes;
    c.block_size = BS;
    c.kv_layout = layout;
    c.preemption_mode = mode;
    c.swap_space = swap_bytes;
    c.enable_prefix_caching = prefix_cache;
    c.kv_cache_dtype = kv_dtype;
    c.threads = 2;
    c.max_num_seqs = 32;
    c.max_num_batched_tokens = 128; /* the prompts take a chunk or two */
    c.max_model_len = 256;
    pl_engine *e;
    if (pl_engine_create(&c, &e) != PL_OK) fail_msg("engine: %s", pl_last_error());
    return e;
}

/* Adds the requests of `which` (a bit per request) in order; a refused one gets its error in
 * res[r].error and refused[r] = 1. Runs the rest to completion. */
static void run_mix(pl_engine *e, unsigned which, result *res, int *refused) {
    uint64_t ids[NREQ];
    int idx[NREQ], n = 0;
    for (int r = 0; r < NREQ; r++) {
        memset(&res[r], 0, sizeof res[r]);
        refused[r] = 0;
        if (!(which & (1u << r))) continue;
        pl_request_params p;
        params_of(r, &p);
        if (pl_engine_add_request(e, NULL, prompts[r], (size_t)MIX[r].prompt_len, &p, &ids[n]) !=
            PL_OK) {
            refused[r] = 1;
            snprintf(res[r].error, sizeof res[r].error, "%s", pl_last_error());
            continue;
        }
        idx[n++] = r;
    }
    static result got[NREQ];
    memset(got, 0, sizeof got);
    run_all(e, ids, got, n);
    for (int i = 0; i < n; i++) res[idx[i]] = got[i];
}

static void assert_pool_free(pl_engine *e) {
    pl_engine_stats s;
    pl_engine_get_stats(e, &s);
    if (s.blocks_used != 0 || s.running + s.waiting + s.swapped != 0)
        fail_msg("after the run: %d blocks used, %d running, %d waiting, %d swapped",
                 (int)s.blocks_used, (int)s.running, (int)s.waiting, (int)s.swapped);
    assert_int_equal(pl_kv_cache_check(pl_engine_kv_cache(e)), PL_OK);
}

/* Request r completed with exactly the reference's completions. */
static void assert_same(int r, const result *ref, const result *got, const char *where) {
    if (got->error[0])
        fail_msg("%s: request %d (n %d, best_of %d, beam %d) failed after admission: %s", where,
                 r, MIX[r].n, MIX[r].best_of, MIX[r].beam, got->error);
    assert_true(got->finished);
    for (int k = 0; k < MIX[r].n; k++) {
        if (got->n_ids[k] != ref->n_ids[k] ||
            memcmp(got->ids[k], ref->ids[k], (size_t)ref->n_ids[k] * sizeof(int32_t)) != 0)
            fail_msg("%s: request %d completion %d differs from the roomy run (%d tokens, %d in "
                     "the reference)", where, r, k, got->n_ids[k], ref->n_ids[k]);
        assert_string_equal(got->text[k], ref->text[k]);
        assert_int_equal(got->finish[k], ref->finish[k]);
    }
}

static result ref[NREQ], got[NREQ];

static void reference(void) {
    int refused[NREQ];
    make_prompts();
    pl_engine *e = make(PL_KV_LAYOUT_PAGED, (uint64_t)ROOMY * BLOCK_BYTES, PL_PREEMPT_RECOMPUTE, 0, 1);
    run_mix(e, (1u << NREQ) - 1, ref, refused);
    pl_engine_stats s;
    pl_engine_get_stats(e, &s);
    assert_int_equal(s.preemptions, 0);
    for (int r = 0; r < NREQ; r++) {
        assert_false(refused[r]);
        assert_string_equal(ref[r].error, "");
        for (int k = 0; k < MIX[r].n; k++) assert_int_equal(ref[r].n_ids[k], MIX[r].max_tokens);
    }
    assert_pool_free(e);
    pl_engine_destroy(e);
}

/* From roomy down to the budget that admits nothing: refusals only up front, and once a request
 * is refused it stays refused in every smaller pool; every admitted request gives the reference. */
static void sweep(pl_preemption_mode mode, int prefix_cache) {
    const char *name = mode == PL_PREEMPT_SWAP ? "swap" : prefix_cache ? "recompute" : "recompute, no prefix cache";
    int was_refused[NREQ] = {0}, refused[NREQ];
    uint64_t preemptions = 0, swaps = 0, group_runs = 0;
    for (int32_t blocks = 150; blocks >= 2; blocks -= blocks > 60 ? 6 : 2) {
        /* the swap pool holds a third of the primary: big groups fall back to recompute */
        pl_engine *e = make(PL_KV_LAYOUT_PAGED, (uint64_t)blocks * BLOCK_BYTES, mode,
                            mode == PL_PREEMPT_SWAP ? (uint64_t)(blocks / 3 + 1) * BLOCK_BYTES : 0,
                            prefix_cache);
        run_mix(e, (1u << NREQ) - 1, got, refused);
        char where[96];
        snprintf(where, sizeof where, "%s, %d blocks", name, (int)blocks);
        int admitted = 0;
        for (int r = 0; r < NREQ; r++) {
            if (refused[r]) {
                assert_non_null(strstr(got[r].error, "KV blocks"));
                was_refused[r] = 1;
                continue;
            }
            if (was_refused[r]) fail_msg("%s: request %d admitted after a larger pool refused it", where, r);
            assert_same(r, &ref[r], &got[r], where);
            admitted++;
            group_runs += MIX[r].best_of > 1;
        }
        pl_engine_stats s;
        pl_engine_get_stats(e, &s);
        preemptions += s.preemptions;
        swaps += s.swaps_out;
        assert_pool_free(e);
        pl_engine_destroy(e);
        if (!admitted) break;
    }
    print_message("%s (%s): %llu preemptions (%llu by swapping), %llu group runs\n", name,
                  strrchr(model, '/') + 1, (unsigned long long)preemptions,
                  (unsigned long long)swaps, (unsigned long long)group_runs);
    for (int r = 0; r < NREQ; r++) assert_true(was_refused[r]); /* down to the smallest */
    assert_true(preemptions > 20);
    if (mode == PL_PREEMPT_SWAP) assert_true(swaps > 0 && swaps < preemptions);
}

static void test_recompute(void **state) {
    (void)state;
    sweep(PL_PREEMPT_RECOMPUTE, 1);
}

static void test_recompute_no_prefix_cache(void **state) {
    (void)state;
    sweep(PL_PREEMPT_RECOMPUTE, 0);
}

static void test_swap(void **state) {
    (void)state;
    sweep(PL_PREEMPT_SWAP, 1);
}

/* vattention: groups are refused up front and the refusal names the layout; the single requests
 * complete with the paged layout's tokens (an f32 cache, its own reference) in every budget that
 * admits them, preempting each other, down to one page row. A page row is a 4K page in every
 * region (a layer's K or V of one KV head: 5 x 2 x 4 regions), 160 KiB, and holds 128 tokens
 * (4096 / (8 dims x 4 bytes)) of each, so request 4 (130 tokens) needs two rows and is refused
 * by a pool of one, the others fit one (an f16 page would hold 256 tokens, more than
 * max_model_len: no request would ever grow into a second page, so none would be preempted). */
static void test_vattention(void **state) {
    (void)state;
    const uint64_t row = 160u * 1024;
    int was_refused[NREQ] = {0}, refused[NREQ];
    unsigned singles = 0;
    for (int r = 0; r < NREQ; r++)
        if (MIX[r].best_of == 1 && !MIX[r].beam) singles |= 1u << r;
    kv_dtype = PL_KV_CACHE_F32;
    static result vref[NREQ];
    pl_engine *p = make(PL_KV_LAYOUT_PAGED, (uint64_t)ROOMY * BLOCK_BYTES * 2,
                        PL_PREEMPT_RECOMPUTE, 0, 0);
    run_mix(p, singles, vref, refused);
    for (int r = 0; r < NREQ; r++)
        if (singles & (1u << r)) assert_false(refused[r]);
    pl_engine_destroy(p);
    uint64_t preemptions = 0;
    for (int32_t rows = 16; rows >= 1; rows--) {
        pl_engine *e = make(PL_KV_LAYOUT_VATTENTION, rows * row, PL_PREEMPT_RECOMPUTE, 0, 0);
        run_mix(e, (1u << NREQ) - 1, got, refused);
        char where[64];
        snprintf(where, sizeof where, "vattention, %d page rows", (int)rows);
        for (int r = 0; r < NREQ; r++) {
            if (!(singles & (1u << r))) {
                assert_true(refused[r]);
                assert_non_null(strstr(got[r].error, "vattention"));
                continue;
            }
            if (refused[r]) {
                assert_non_null(strstr(got[r].error, "KV blocks"));
                was_refused[r] = 1;
                continue;
            }
            if (was_refused[r]) fail_msg("%s: request %d admitted after a larger pool refused it", where, r);
            assert_same(r, &vref[r], &got[r], where);
        }
        pl_engine_stats s;
        pl_engine_get_stats(e, &s);
        preemptions += s.preemptions;
        assert_int_equal(s.blocks_used, 0);
        assert_int_equal(pl_kv_cache_check(pl_engine_kv_cache(e)), PL_OK);
        pl_engine_destroy(e);
    }
    kv_dtype = PL_KV_CACHE_F16;
    print_message("vattention: %llu preemptions\n", (unsigned long long)preemptions);
    for (int r = 0; r < NREQ; r++)
        if (singles & (1u << r)) assert_int_equal(was_refused[r], r == 4); /* 130 tokens: 2 rows */
    assert_true(preemptions > 0);
}

/* Admission counts the prefix-cache hits a running request holds (as vLLM v1): B's prompt is A's
 * 96 tokens and 16 more. In 12 blocks, A holds 7 after its prefill and first token, so B's 7
 * blocks do not fit among the 5 free, but B needs only its one block past A's 6: it is admitted
 * at once instead of waiting for A to finish. Both complete with the roomy run's tokens (B is
 * preempted as A grows, and comes back on A's blocks again). */
static void test_admission_counts_cached_prefix(void **state) {
    (void)state;
    int32_t ids[112];
    for (int i = 0; i < 112; i++) ids[i] = i == 0 ? 1 : 3 + (i * 37) % 500;
    result rr[2], rg[2];
    for (int roomy = 1; roomy >= 0; roomy--) {
        result *res = roomy ? rr : rg;
        memset(res, 0, 2 * sizeof *res);
        pl_engine *e = make(PL_KV_LAYOUT_PAGED, (uint64_t)(roomy ? ROOMY : 12) * BLOCK_BYTES,
                            PL_PREEMPT_RECOMPUTE, 0, 1);
        pl_request_params p;
        params_of(1, &p); /* greedy */
        uint64_t id[2];
        assert_int_equal(pl_engine_add_request(e, NULL, ids, 96, &p, &id[0]), PL_OK);
        assert_int_equal(pl_engine_step(e), PL_OK);
        p.max_tokens = 20;
        assert_int_equal(pl_engine_add_request(e, NULL, ids, 112, &p, &id[1]), PL_OK);
        assert_int_equal(pl_engine_step(e), PL_OK);
        pl_engine_stats s;
        pl_engine_get_stats(e, &s);
        if (s.running != 2)
            fail_msg("%s pool: %d running, %d waiting after B's first step: B's cached prefix "
                     "was not counted", roomy ? "roomy" : "12-block", (int)s.running, (int)s.waiting);
        run_all(e, id, res, 2);
        assert_int_equal(res[1].n_cached, 96);
        assert_pool_free(e);
        pl_engine_destroy(e);
    }
    assert_same(1, &rr[0], &rg[0], "12 blocks, A");
    assert_same(1, &rr[1], &rg[1], "12 blocks, B");
}

/* The same sweeps with a sliding-window model (its prompts are prefilled chunk by chunk behind
 * the window, and a recomputed group's sequences are admitted one window at a time): a random
 * llama whose every layer attends to its last 32 positions, and a gemma2 whose even layers do
 * (KV cache groups: the window layers' blocks are released, the global ones' kept). */
static void windowed(const char *flags) {
    char path[256], cmd[1024];
    snprintf(path, sizeof path, "/tmp/pl_test_preempt_%d.gguf", (int)getpid());
    snprintf(cmd, sizeof cmd, "'%s' mkmodel '%s' --vocab-from '%s/models/stories260K.gguf' "
             "--dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 --ctx 1024 --seed 3 "
             "--sliding-window 32 %s >/dev/null", PL_BINARY, path, PL_SHARED_DIR, flags);
    assert_int_equal(system(cmd), 0);
    const char *saved = model;
    uint64_t saved_bytes = BLOCK_BYTES;
    model = path;
    pl_engine *e = make(PL_KV_LAYOUT_PAGED, 4u << 20, PL_PREEMPT_RECOMPUTE, 0, 1);
    pl_engine_stats st;
    pl_engine_get_stats(e, &st);
    BLOCK_BYTES = (4u << 20) / (uint64_t)st.blocks_total;
    pl_engine_destroy(e);
    result saved_ref[NREQ];
    memcpy(saved_ref, ref, sizeof ref);
    reference();
    sweep(PL_PREEMPT_RECOMPUTE, 1);
    sweep(PL_PREEMPT_RECOMPUTE, 0);
    sweep(PL_PREEMPT_SWAP, 1);
    memcpy(ref, saved_ref, sizeof ref);
    model = saved;
    BLOCK_BYTES = saved_bytes;
    unlink(path);
}

static void test_sliding_window(void **state) {
    (void)state;
    windowed("");
}

static void test_kv_groups(void **state) {
    (void)state;
    windowed("--arch gemma2");
}

static int setup(void **state) {
    (void)state;
    reference();
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recompute),
        cmocka_unit_test(test_recompute_no_prefix_cache),
        cmocka_unit_test(test_swap),
        cmocka_unit_test(test_vattention),
        cmocka_unit_test(test_admission_counts_cached_prefix),
        cmocka_unit_test(test_sliding_window),
        cmocka_unit_test(test_kv_groups),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}

static void dump_q(const char *name, const pl_seq_group *g) {
    for (; g; g = g->next) {
        fprintf(stderr, "%s group %llu n_seqs %d prefilled %d lead %p:", name, (unsigned long long)g->id, g->n_seqs, g->prefilled, (void*)g->lead);
        for (int i = 0; i < g->n_seqs; i++) {
            pl_seq *q = g->seqs[i];
            fprintf(stderr, " [st %d tok %d comp %d tab %d/%d live %d w %d/%d live %d]", q->status, q->n_tokens, q->n_computed, q->table.n_blocks, q->table.n_tokens, q->table.live, q->table_w.n_blocks, q->table_w.n_tokens, q->table_w.live);
        }
        fprintf(stderr, "\n");
    }
}
static void stuck_dump(pl_engine *e) {
    const pl_scheduler *s = pl_engine_scheduler(e);
    dump_q("running", pl_scheduler_queue(s, PL_SEQ_RUNNING)->head);
    dump_q("waiting", pl_scheduler_queue(s, PL_SEQ_WAITING)->head);
    dump_q("swapped", pl_scheduler_queue(s, PL_SEQ_SWAPPED)->head);
}
