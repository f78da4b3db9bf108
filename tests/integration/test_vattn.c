/* --kv-layout vattention through the engine (issues 12 and 37) with the real stories260K model: a
 * batch of 16 requests growing over page rows gives bitwise the tokens of the paged layout, with greedy and seeded sampling,
 * with and without preemption (a budget of a few pages per layer), with every technique on and
 * all off, and with speculative decoding (n-gram and draft proposals rolled back); the counters
 * move as the techniques say, and each technique does its job in the engine (no mapping on the
 * critical path in steady decode, a finished slot reused without unmapping, the next request's
 * pages mapped ahead); bad settings and sharing requests get clear errors naming the
 * layout; with --vattn-share, n, best_of and beam groups share pages and give the paged
 * layout's outputs bitwise. The mapper thread runs in every engine here (CI runs this under
 * TSan). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "engine_util.h"

#include "engine/engine_parts.h"
#include "kv/vattn.h"


static const char *MODEL = PL_SHARED_DIR "/models/stories260K.gguf";
static const char *PROMPTS[] = {
    "Once upon a time", "Lily and Tom went to the park", "The little dog was sad because",
    "One day, a big red ball", "Sam liked to eat apples", "There was a tiny bird in a tree",
    "Mom said it was time for bed", "The sun was shining and",
};
enum { N_PROMPTS = sizeof PROMPTS / sizeof PROMPTS[0], BATCH = 16 };

/* stories260K, f32 KV: 5 layers, 4 KV heads of 8 dims = 32 bytes per token, head and layer,
 * so a 4K page of one head's region holds 128 tokens and a page row (a page in each of the 2 x
 * 5 x 4 regions) is 160 KiB. */
#define ROW_BYTES (160u * 1024)
enum { TPR = 128 };

static void base_config(pl_engine_config *c, pl_kv_layout_mode layout, uint64_t kv_bytes) {
    pl_engine_config_default(c);
    c->model_path = MODEL;
    c->kv_cache_memory = kv_bytes;
    c->kv_layout = layout;
    c->threads = 2;
    c->max_num_seqs = 64;
    c->max_num_batched_tokens = 256;
    c->max_model_len = 256;
    c->enable_prefix_caching = 0;
    c->kv_cache_f32 = 1; /* 128 tokens a page: requests grow over page rows */
}

static pl_engine *make(const pl_engine_config *c) {
    pl_engine *e;
    if (pl_engine_create(c, &e) != PL_OK) fail_msg("engine: %s", pl_last_error());
    return e;
}

/* BATCH requests of 120 to 165 tokens, most of them crossing into a second page row, greedy or
 * seeded. */
static void run_batch(pl_engine *e, int sampled, result *res) {
    uint64_t ids[BATCH];
    for (int i = 0; i < BATCH; i++) {
        pl_request_params p;
        pl_request_params_default(&p);
        p.sampling.temperature = sampled ? 0.9f : 0.0f;
        p.sampling.top_p = 0.95f;
        p.has_seed = sampled;
        p.seed = 1000 + (uint64_t)i;
        p.max_tokens = 110 + 12 * (i % 5);
        p.ignore_eos = 1;
        memset(&res[i], 0, sizeof res[i]);
        assert_int_equal(pl_engine_add_request(e, PROMPTS[i % N_PROMPTS], NULL, 0, &p, &ids[i]),
                         PL_OK);
    }
    run_all(e, ids, res, BATCH);
}

static void assert_same(const result *a, const result *b) {
    for (int i = 0; i < BATCH; i++) {
        assert_int_equal(a[i].n_ids[0], b[i].n_ids[0]);
        assert_memory_equal(a[i].ids[0], b[i].ids[0], (size_t)a[i].n_ids[0] * sizeof(int32_t));
        assert_string_equal(a[i].text[0], b[i].text[0]);
        assert_string_equal(a[i].error, "");
    }
}

static void assert_all_free(pl_engine *e) {
    pl_engine_stats s;
    pl_engine_get_stats(e, &s);
    assert_int_equal(s.blocks_used, 0);
    assert_int_equal(s.running + s.waiting, 0);
    assert_int_equal(pl_kv_cache_check(pl_engine_kv_cache(e)), PL_OK);
    assert_int_equal(pl_vattn_check(pl_kv_cache_vattn(pl_engine_kv_cache(e))), PL_OK);
}

static void test_equal_to_paged(void **state) {
    (void)state;
    static result ref[BATCH], got[BATCH];
    for (int sampled = 0; sampled < 2; sampled++) {
        pl_engine_config c;
        base_config(&c, PL_KV_LAYOUT_PAGED, 64u << 20);
        pl_engine *e = make(&c);
        run_batch(e, sampled, ref);
        pl_engine_destroy(e);
        /* 0: roomy, every technique; 1: 6 pages per layer (preempts), every technique; 2: the
         * same budget with all three techniques off (everything mapped on the critical path);
         * 3: deferred reclamation alone, where nothing depends on the mapper thread's timing. */
        for (int v = 0; v < 4; v++) {
            base_config(&c, PL_KV_LAYOUT_VATTENTION, v == 0 ? 64u << 20 : 6 * ROW_BYTES);
            c.vattn_no_overlap = c.vattn_no_eager = v >= 2;
            c.vattn_no_deferred_reclaim = v == 2;
            e = make(&c);
            run_batch(e, sampled, got);
            assert_same(ref, got);
            pl_engine_stats s;
            pl_engine_get_stats(e, &s);
            print_message("vattention sampled %d variant %d: %llu preemptions, pages mapped %llu "
                          "sync %llu background, %llu unmapped, slots %llu (%llu reused), %.3f ms "
                          "mapping in steps\n", sampled, v, (unsigned long long)s.preemptions,
                          (unsigned long long)s.vattn_pages_mapped_sync,
                          (unsigned long long)s.vattn_pages_mapped_bg,
                          (unsigned long long)s.vattn_pages_unmapped,
                          (unsigned long long)s.vattn_slots_acquired,
                          (unsigned long long)s.vattn_slots_reused, s.vattn_map_seconds * 1e3);
            if (v > 0) assert_true(s.preemptions >= 5);
            else assert_int_equal(s.preemptions, 0);
            assert_true(s.vattn_slots_acquired >= BATCH);
            if (v == 2) {
                assert_int_equal(s.vattn_pages_mapped_bg, 0);
                assert_int_equal(s.vattn_slots_reused, 0);
                assert_int_equal(s.vattn_pages_committed, 0); /* everything given back */
                assert_true(s.vattn_pages_mapped_sync > 0);
            } else if (v == 3) { /* preempted requests come back to their kept pages */
                assert_int_equal(s.vattn_pages_mapped_bg, 0);
                assert_true(s.vattn_slots_reused > 0);
            }
            assert_all_free(e);
            pl_engine_destroy(e);
        }
    }
}

/* With the three techniques off nothing is mapped ahead or kept: after every step the memory
 * the process holds in the reservation is exactly the pages the stored tokens need, read back
 * from the kernel, and it goes back to zero when the requests end. */
static void test_memory_tracks_tokens(void **state) {
    (void)state;
    pl_engine_config c;
    base_config(&c, PL_KV_LAYOUT_VATTENTION, 64u << 20);
    c.vattn_no_overlap = c.vattn_no_deferred_reclaim = c.vattn_no_eager = 1;
    pl_engine *e = make(&c);
    const int32_t tpr = pl_engine_get_config(e)->block_size;
    const pl_model_hparams *hp = &pl_engine_model(e)->hp;
    const int32_t regions = 2 * hp->n_layers * hp->n_kv_heads;
    assert_int_equal(tpr, TPR);
    uint64_t ids[6];
    result res[6];
    for (int i = 0; i < 6; i++) {
        pl_request_params p;
        pl_request_params_default(&p);
        p.max_tokens = 30 + 40 * i;
        p.ignore_eos = 1;
        memset(&res[i], 0, sizeof res[i]);
        assert_int_equal(pl_engine_add_request(e, PROMPTS[i], NULL, 0, &p, &ids[i]), PL_OK);
    }
    int64_t peak = 0;
    while (pl_engine_has_work(e)) {
        assert_int_equal(pl_engine_step(e), PL_OK);
        pl_engine_stats s;
        pl_engine_get_stats(e, &s);
        int64_t resident = pl_vattn_resident_pages(pl_kv_cache_vattn(pl_engine_kv_cache(e)));
        /* blocks_used = pages per region the live sequences' tokens need */
        assert_int_equal(resident, (int64_t)s.blocks_used * regions);
        assert_int_equal(s.vattn_pages_committed, resident);
        assert_true((int64_t)s.blocks_used * tpr >= s.tokens_stored);
        assert_true(((int64_t)s.blocks_used - s.running) * tpr < s.tokens_stored || s.blocks_used == 0);
        if (resident > peak) peak = resident;
        for (int i = 0; i < 6; i++) collect(e, ids[i], &res[i]);
    }
    assert_true(peak >= 6 * regions); /* six requests of a page row at least each */
    assert_int_equal(pl_vattn_resident_pages(pl_kv_cache_vattn(pl_engine_kv_cache(e))), 0);
    pl_engine_destroy(e);
}

/* Speculative decoding on the vAttention layout: a rejected proposal is rolled back by lowering
 * the sequence's length (its pages stay mapped). n-gram proposals (many rejected), greedy roomy
 * and preempting and seeded preempting, and a draft model: bitwise the tokens of the paged
 * layout with the same proposer, and every page back in the pool at the end. */
static pl_engine *make_spec(pl_kv_layout_mode layout, uint64_t kv_bytes, int draft) {
    pl_engine_config c;
    base_config(&c, layout, kv_bytes);
    c.speculative_ngram = !draft;
    c.speculative_model = draft ? MODEL : NULL; /* stories260K drafting for itself */
    c.num_speculative_tokens = 4;
    c.speculative_max_batch = -1; /* speculate in every batch */
    c.threads = 1;                /* a tiny model: a second thread only spins */
    return make(&c);
}

static void test_speculative_equal_to_paged(void **state) {
    (void)state;
    static result ref[BATCH], got[BATCH];
    for (int v = 0; v < 3; v++) {
        const int sampled = v == 1, draft = v == 2;
        pl_engine *e = make_spec(PL_KV_LAYOUT_PAGED, 64u << 20, draft);
        run_batch(e, sampled, ref);
        pl_engine_destroy(e);
        for (int tight = sampled; tight < 2 - draft; tight++) { /* n-gram: tight; greedy: roomy */
            e = make_spec(PL_KV_LAYOUT_VATTENTION, tight ? 6 * ROW_BYTES : 64u << 20, draft);
            run_batch(e, sampled, got);
            assert_same(ref, got);
            pl_engine_stats s;
            pl_engine_get_stats(e, &s);
            print_message("vattention speculative %s%s%s: %llu of %llu proposals accepted, %llu "
                          "preemptions\n", draft ? "draft" : "ngram", sampled ? " sampled" : "",
                          tight ? " tight" : "", (unsigned long long)s.spec_accepted_tokens,
                          (unsigned long long)s.spec_draft_tokens,
                          (unsigned long long)s.preemptions);
            assert_true(s.spec_accepted_tokens > 0);
            if (!draft) assert_true(s.spec_draft_tokens > s.spec_accepted_tokens); /* rollbacks */
            if (tight) assert_true(s.preemptions > 0);
            assert_all_free(e);
            pl_engine_destroy(e);
        }
    }
}

/* The three techniques through the engine, the mapper's work finished between steps (the test
 * thread runs what is left of it, as a mapper faster than a step would have: deterministic):
 * overlap: after the prefill, steady decode over several page rows maps nothing on the engine
 * thread; deferred reclamation: the next request takes the finished one's slot with its pages
 * (nothing unmapped); eager (deferred off): the next request's prompt pages are mapped before
 * it arrives. After every step the reservation's resident pages are the pages mapped. */
static uint64_t step_and_drain(pl_engine *e, const uint64_t *ids, result *res, int n) {
    struct pl_vattn *va = pl_kv_cache_vattn(pl_engine_kv_cache(e));
    assert_int_equal(pl_engine_step(e), PL_OK);
    while (pl_vattn_background_once(va)) {}
    pl_vattn_stats s; /* live (the engine's stats are a snapshot of the step's end) */
    pl_vattn_get_stats(va, &s);
    assert_int_equal(pl_vattn_resident_pages(va),
                     s.rows_committed * pl_vattn_get_config(va)->n_regions);
    assert_int_equal(pl_vattn_check(va), PL_OK);
    for (int i = 0; i < n; i++) collect(e, ids[i], &res[i]);
    return s.pages_mapped_sync;
}

static void add_long(pl_engine *e, int i, int32_t max_tokens, uint64_t *id) {
    pl_request_params p;
    pl_request_params_default(&p);
    p.sampling.temperature = 0;
    p.max_tokens = max_tokens;
    p.ignore_eos = 1;
    assert_int_equal(pl_engine_add_request(e, PROMPTS[i], NULL, 0, &p, id), PL_OK);
}

static void test_techniques_in_engine(void **state) {
    (void)state;
    for (int deferred = 1; deferred >= 0; deferred--) {
        pl_engine_config c;
        base_config(&c, PL_KV_LAYOUT_VATTENTION, 64u << 20);
        c.vattn_no_deferred_reclaim = !deferred;
        c.max_model_len = 512;
        pl_engine *e = make(&c);
        static result res[5];
        memset(res, 0, sizeof res);
        uint64_t ids[5];
        for (int i = 0; i < 4; i++) add_long(e, i, 3 * TPR, &ids[i]); /* 3-4 page rows each */
        /* the prefills: mapped on the engine thread, or already by the mapper thread if it got
         * there first (it maps what a slot needs for one more token) */
        const uint64_t warm = step_and_drain(e, ids, res, 4);
        while (pl_engine_has_work(e)) /* steady decode: the mapper keeps a row ahead */
            assert_int_equal(step_and_drain(e, ids, res, 4), warm);
        pl_engine_stats s;
        pl_engine_get_stats(e, &s);
        assert_true(s.vattn_pages_mapped_bg > 0);
        const uint64_t unmapped = s.vattn_pages_unmapped, reused = s.vattn_slots_reused;
        add_long(e, 4, 8, &ids[4]); /* the next request arrives */
        while (pl_engine_has_work(e)) assert_int_equal(step_and_drain(e, ids, res, 5), warm);
        pl_engine_get_stats(e, &s);
        if (deferred) { /* a kept slot, nothing given back */
            assert_int_equal(s.vattn_slots_reused, reused + 1);
            assert_int_equal(s.vattn_pages_unmapped, 0);
        } else { /* the finished slots were unmapped; eager mapped the next one ahead */
            assert_true(unmapped > 0);
            assert_int_equal(s.vattn_slots_reused, reused + 1);
        }
        for (int i = 0; i < 5; i++) assert_string_equal(res[i].error, "");
        assert_all_free(e);
        pl_engine_destroy(e);
    }
}

/* ---- sharing (issue 37, --vattn-share): n, best_of and beam groups map their common pages ----
 * A mix of groups, token-id prompts (one longer than a page, so a full page is shared at the
 * fork; beams share full pages as they grow past one), seeded: every output of every request is
 * bitwise the paged layout's, roomy and in a pool that preempts (a recomputed group's prompt
 * shared again), with the techniques on and off. After every step the invariants hold (pl_kv_
 * cache_check: reference counts, a shared page only below its slots' needs), mincore of the
 * memfd says the resident pages are the distinct pages mapped (a shared page once), and with
 * the techniques off exactly the pages the stored tokens need. */
typedef struct {
    int32_t prompt_len, max_tokens, n, best_of, beam;
} group_spec;

static const group_spec GROUPS[] = {
    {180, 50, 3, 3, 0},  /* n 3 after a prompt of more than a page */
    {20, 140, 2, 4, 0},  /* best_of 4, n 2, outputs crossing a page */
    {30, 140, 3, 3, 1},  /* beam width 3, beams crossing a page */
    {40, 100, 1, 1, 0},  /* a single request beside them */
    {150, 90, 4, 4, 0},  /* n 4, youngest: preempted first, its prompt page shared again */
};
enum { N_GROUPS = sizeof GROUPS / sizeof GROUPS[0] };
static int32_t group_prompts[N_GROUPS][200];

static void run_groups(pl_engine *e, result *res, int exact) {
    uint64_t x = 0x9e3779b97f4a7c15ull, ids[N_GROUPS];
    for (int g = 0; g < N_GROUPS; g++) {
        group_prompts[g][0] = 1; /* BOS */
        for (int32_t i = 1; i < GROUPS[g].prompt_len; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            group_prompts[g][i] = 3 + (int32_t)(x % 500); /* stories260K: 512 ids */
        }
        pl_request_params p;
        pl_request_params_default(&p);
        p.max_tokens = GROUPS[g].max_tokens;
        p.ignore_eos = 1;
        p.n = GROUPS[g].n;
        p.best_of = GROUPS[g].best_of;
        p.use_beam_search = GROUPS[g].beam;
        p.sampling.temperature = GROUPS[g].beam ? 0.0f : 0.9f;
        p.sampling.top_p = 0.95f;
        p.has_seed = 1;
        p.seed = 700 + (uint64_t)g;
        memset(&res[g], 0, sizeof res[g]);
        if (pl_engine_add_request(e, NULL, group_prompts[g], (size_t)GROUPS[g].prompt_len, &p,
                                  &ids[g]) != PL_OK)
            fail_msg("request %d: %s", g, pl_last_error());
    }
    pl_kv_cache *kv = pl_engine_kv_cache(e);
    struct pl_vattn *va = pl_kv_cache_vattn(kv);
    while (pl_engine_has_work(e)) {
        assert_int_equal(pl_engine_step(e), PL_OK);
        for (int g = 0; g < N_GROUPS; g++) collect(e, ids[g], &res[g]);
        if (!va) continue;
        if (pl_kv_cache_check(kv) != PL_OK) fail_msg("after a step: %s", pl_last_error());
        pl_vattn_stats v;
        pl_vattn_get_stats(va, &v);
        const int64_t regions = pl_vattn_get_config(va)->n_regions;
        assert_int_equal(pl_vattn_resident_pages(va), v.rows_committed * regions);
        pl_engine_stats s;
        pl_engine_get_stats(e, &s);
        /* a shared page's tokens once: never more tokens than the pages in use hold */
        assert_true(s.tokens_stored <= (int64_t)s.blocks_used * TPR && s.waste >= 0);
        if (exact) assert_int_equal(v.rows_committed, s.blocks_used);
    }
}

static void assert_groups_same(const result *a, const result *b) {
    for (int g = 0; g < N_GROUPS; g++) {
        assert_string_equal(a[g].error, "");
        assert_string_equal(b[g].error, "");
        for (int k = 0; k < GROUPS[g].n; k++) {
            assert_int_equal(a[g].n_ids[k], b[g].n_ids[k]);
            assert_true(a[g].n_ids[k] > 0);
            assert_memory_equal(a[g].ids[k], b[g].ids[k], (size_t)a[g].n_ids[k] * sizeof(int32_t));
        }
    }
}

static void test_sharing_equal_to_paged(void **state) {
    (void)state;
    static result ref[N_GROUPS], got[N_GROUPS];
    pl_engine_config c;
    base_config(&c, PL_KV_LAYOUT_PAGED, 64u << 20);
    c.max_model_len = 512;
    pl_engine *e = make(&c);
    run_groups(e, ref, 0);
    pl_engine_destroy(e);
    /* 0: roomy, every technique; 1: 16 page rows (preempts), every technique; 2: the same
     * budget, the techniques off (resident = needed, exactly) */
    for (int v = 0; v < 3; v++) {
        base_config(&c, PL_KV_LAYOUT_VATTENTION, v == 0 ? 64u << 20 : 16 * ROW_BYTES);
        c.max_model_len = 512;
        c.vattn_share = 1;
        c.vattn_no_overlap = c.vattn_no_eager = c.vattn_no_deferred_reclaim = v == 2;
        e = make(&c);
        run_groups(e, got, v == 2);
        assert_groups_same(ref, got);
        pl_engine_stats s;
        pl_engine_get_stats(e, &s);
        pl_vattn_stats vs;
        struct pl_vattn *va = pl_kv_cache_vattn(pl_engine_kv_cache(e));
        pl_vattn_get_stats(va, &vs);
        print_message("vattention sharing variant %d: %llu preemptions, %llu pages mapped shared, "
                      "%llu copied (copy-on-write), %llu mapped, %llu slots acquired\n", v,
                      (unsigned long long)s.preemptions, (unsigned long long)vs.pages_shared,
                      (unsigned long long)vs.pages_copied,
                      (unsigned long long)(vs.pages_mapped_sync + vs.pages_mapped_bg),
                      (unsigned long long)vs.slots_acquired);
        assert_true(vs.pages_shared > 0 && vs.pages_copied > 0);
        if (v > 0) assert_true(s.preemptions > 0);
        else assert_int_equal(s.preemptions, 0);
        /* unpreempted, every sequence takes a slot once: a beam step's fork takes the slot of
         * a beam it drops (remapping only what differs), never a fresh one */
        int64_t seqs = 0;
        for (int g = 0; g < N_GROUPS; g++) seqs += GROUPS[g].best_of;
        if (v == 0) assert_int_equal(vs.slots_acquired, seqs);
        assert_all_free(e);
        if (v == 2) assert_int_equal(pl_vattn_resident_pages(va), 0);
        pl_engine_destroy(e);
    }
}

/* Prefix hits with --vattn-share: requests whose prompts begin with another request's computed
 * pages map them instead of computing them, whether the holder still runs (its pages are
 * mapped) or has finished (its pages wait unmapped in the prefix cache). A first request with a
 * 300-token prompt, then, once it is computed (done = 0) or once it has finished (done = 1),
 * five more with its first 260 tokens and suffixes of their own: bitwise the paged layout's
 * outputs (with its prefix cache), the hits counted, the invariants and mincore (resident =
 * mapped + cached pages) checked after every step. */
static void run_prefix(pl_engine *e, result *res, int check, int done) {
    static int32_t prompts[6][320];
    uint64_t x = 0x2545f4914f6cdd1dull, ids[6];
    for (int r = 0; r < 6; r++) {
        int32_t len = r == 0 ? 300 : 260 + 10 * r;
        for (int32_t i = 0; i < len; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            prompts[r][i] = i == 0 ? 1 : r > 0 && i < 260 ? prompts[0][i] : 3 + (int32_t)(x % 500);
        }
        pl_request_params p;
        pl_request_params_default(&p);
        p.max_tokens = 40;
        p.ignore_eos = 1;
        p.sampling.temperature = 0.9f;
        p.has_seed = 1;
        p.seed = 900 + (uint64_t)r;
        memset(&res[r], 0, sizeof res[r]);
        if (pl_engine_add_request(e, NULL, prompts[r], (size_t)len, &p, &ids[r]) != PL_OK)
            fail_msg("request %d: %s", r, pl_last_error());
        if (r == 0) /* its prompt computed (or all of it done) before the others arrive */
            for (int k = 0; done ? pl_engine_has_work(e) : k < 4; k++) {
                assert_int_equal(pl_engine_step(e), PL_OK);
                collect(e, ids[0], &res[0]);
            }
    }
    pl_kv_cache *kv = pl_engine_kv_cache(e);
    struct pl_vattn *va = pl_kv_cache_vattn(kv);
    while (pl_engine_has_work(e)) {
        assert_int_equal(pl_engine_step(e), PL_OK);
        for (int r = 0; r < 6; r++) collect(e, ids[r], &res[r]);
        if (!check) continue;
        if (pl_kv_cache_check(kv) != PL_OK) fail_msg("after a step: %s", pl_last_error());
        pl_vattn_stats v;
        pl_vattn_get_stats(va, &v);
        assert_int_equal(pl_vattn_resident_pages(va),
                         (v.rows_committed + v.rows_cached) * pl_vattn_get_config(va)->n_regions);
    }
}

static void prefix_hits_equal_to_paged(int done) {
    static result ref[6], got[6];
    pl_engine_config c;
    base_config(&c, PL_KV_LAYOUT_PAGED, 64u << 20);
    c.max_model_len = 512;
    c.enable_prefix_caching = 1;
    pl_engine *e = make(&c);
    run_prefix(e, ref, 0, done);
    pl_engine_destroy(e);
    base_config(&c, PL_KV_LAYOUT_VATTENTION, 64u << 20);
    c.max_model_len = 512;
    c.enable_prefix_caching = 1;
    c.vattn_share = 1;
    e = make(&c);
    assert_true(pl_engine_get_config(e)->enable_prefix_caching);
    run_prefix(e, got, 1, done);
    for (int r = 0; r < 6; r++) {
        assert_string_equal(got[r].error, "");
        assert_int_equal(ref[r].n_ids[0], got[r].n_ids[0]);
        assert_memory_equal(ref[r].ids[0], got[r].ids[0],
                            (size_t)ref[r].n_ids[0] * sizeof(int32_t));
        if (r > 0) assert_int_equal(got[r].n_cached, 256); /* two pages of 128 tokens */
    }
    pl_engine_stats s;
    pl_engine_get_stats(e, &s);
    assert_int_equal(s.prefix_hits, 5 * 256);
    pl_vattn_stats v;
    pl_vattn_get_stats(pl_kv_cache_vattn(pl_engine_kv_cache(e)), &v);
    /* the finished holder's two prompt pages came back from the cache, once (then shared) */
    assert_int_equal(v.rows_from_cache, done ? 2 : 0);
    assert_true(v.rows_cached > 0); /* every request's full pages stay cached after it */
    assert_all_free(e);
    pl_engine_destroy(e);
}

static void test_prefix_hits_equal_to_paged(void **state) {
    (void)state;
    prefix_hits_equal_to_paged(0);
    prefix_hits_equal_to_paged(1);
}

static void expect_create_error(const pl_engine_config *c, const char *needle) {
    pl_engine *e = NULL;
    pl_status st = pl_engine_create(c, &e);
    if (st == PL_OK) {
        pl_engine_destroy(e);
        fail_msg("engine created; expected an error with '%s'", needle);
    }
    if (!strstr(pl_last_error(), needle)) fail_msg("error '%s' lacks '%s'", pl_last_error(), needle);
}

static void test_bad_settings(void **state) {
    (void)state;
    pl_engine_config c;
    base_config(&c, PL_KV_LAYOUT_VATTENTION, 4u << 20);
    c.kv_page_size = 8192;
    expect_create_error(&c, "kv-page-size 8192 is not supported");
    base_config(&c, PL_KV_LAYOUT_VATTENTION, ROW_BYTES - 1);
    expect_create_error(&c, "smaller than one page per layer");
    base_config(&c, PL_KV_LAYOUT_VATTENTION, 4u << 20);
    c.max_num_seqs = c.max_num_batched_tokens = 4096; /* x 40 regions x 2 mappings: 327680 */
    expect_create_error(&c, "vm.max_map_count");
    base_config(&c, PL_KV_LAYOUT_VATTENTION, 256u << 20); /* 1638 rows x 40 regions, x 2 */
    c.vattn_share = 1; /* the memfd: a mapping per page */
    expect_create_error(&c, "with a memfd (--vattn-share or 2M pages)");
    base_config(&c, PL_KV_LAYOUT_VATTENTION, 4u << 20);
    c.swap_space = 1u << 20;
    expect_create_error(&c, "kv-layout vattention preempts by recompute only");
    /* 2 MiB pages: this machine either has huge pages reserved or says it has not. */
    base_config(&c, PL_KV_LAYOUT_VATTENTION, 96u << 20); /* a row of 40 2M pages: 80 MiB */
    c.kv_page_size = 2u << 20;
    pl_engine *e = NULL;
    if (pl_engine_create(&c, &e) == PL_OK) pl_engine_destroy(e);
    else assert_non_null(strstr(pl_last_error(), "huge page"));
    /* Sharing requests are refused, naming the layout. */
    base_config(&c, PL_KV_LAYOUT_VATTENTION, 4u << 20);
    e = make(&c);
    pl_request_params p;
    pl_request_params_default(&p);
    p.n = 2;
    uint64_t id;
    assert_int_equal(pl_engine_add_request(e, "Once", NULL, 0, &p, &id), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "kv-layout vattention holds one sequence"));
    assert_non_null(strstr(pl_last_error(), "--vattn-share"));
    pl_request_params_default(&p);
    p.best_of = 2;
    p.use_beam_search = 1;
    assert_int_equal(pl_engine_add_request(e, "Once", NULL, 0, &p, &id), PL_ERR_INVALID_ARG);
    /* A request longer than the whole page pool can hold is refused at once. */
    pl_engine_destroy(e);
    base_config(&c, PL_KV_LAYOUT_VATTENTION, ROW_BYTES);
    e = make(&c);
    pl_request_params_default(&p);
    p.max_tokens = 200;
    assert_int_equal(pl_engine_add_request(e, "Once upon a time", NULL, 0, &p, &id), PL_ERR_INVALID_ARG);
    pl_engine_destroy(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_settings),
        cmocka_unit_test(test_equal_to_paged),
        cmocka_unit_test(test_memory_tracks_tokens),
        cmocka_unit_test(test_speculative_equal_to_paged),
        cmocka_unit_test(test_techniques_in_engine),
        cmocka_unit_test(test_sharing_equal_to_paged),
        cmocka_unit_test(test_prefix_hits_equal_to_paged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
