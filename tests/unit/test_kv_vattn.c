/* Unit tests for src/kv/vattn (the vAttention layout's reservation, page pool and slots): bad
 * settings, a random-operation property test with every invariant checked after each operation
 * (both backends, each technique on and off), committed memory tracking the tokens stored (read
 * back with mincore), the mapper thread mapping ahead of the step (run under TSan in CI), and
 * each of the three latency-hiding techniques doing its job (and the counters moving without
 * it), and pages shared between slots (issue 37: reference counts, copy-on-write, mincore).
 *
 * PL_KV_SEED=S runs the two property tests at seeds made from S instead of their committed ones
 * (invariants and bytes only: the committed seeds also check that each run exercised forks,
 * copies and the cache), for scripts/sweep_seeds.sh; local only, refused under CI. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "../ci_env.h"
#include "base/rng.h"
#include "kv/vattn.h"

#include <inttypes.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { SLOTS = 6, ROWS = 8, REGIONS = 4, TPR = 16 };

/* Region r's row takes g_pages[r] pages (test_region_pages: a model whose layers' token rows
 * differ, gemma4), or one page each (NULL). */
static const int32_t *g_pages;
static int32_t pages_of(int32_t r) { return g_pages ? g_pages[r] : 1; }
static int64_t row_pages(void) {
    int64_t n = 0;
    for (int32_t r = 0; r < REGIONS; r++) n += pages_of(r);
    return n;
}

/* Page k of region r's row at position pos of slot (of `slots`). */
static char *page_addr(pl_vattn *va, int32_t slots, int32_t r, int32_t slot, int32_t pos, int32_t k) {
    (void)slots;
    size_t sb = pl_vattn_slot_bytes(va) * (size_t)pages_of(r);
    return (char *)pl_vattn_base(va) + pl_vattn_region_offset(va, r) + (size_t)slot * sb +
           ((size_t)pos * (size_t)pages_of(r) + (size_t)k) * 4096;
}

static pl_vattn_config base_cfg(pl_vattn_backend b, int64_t phys) {
    pl_vattn_config c = {.page_size = 4096, .n_regions = REGIONS, .n_slots = SLOTS,
                         .rows_per_slot = ROWS, .tokens_per_row = TPR, .phys_rows = phys,
                         .backend = b, .overlap = 1, .deferred_reclaim = 1, .eager = 1,
                         .start_thread = 0, .reclaim_threshold = 0.1, .region_pages = g_pages};
    return c;
}

/* PL_KV_SEED, or 0 when unset (the committed seeds). */
static uint64_t sweep_seed(void) {
    const char *v = test_env("PL_KV_SEED");
    return v && *v ? strtoull(v, NULL, 0) : 0;
}

static void check_ok(pl_vattn *va) {
    if (pl_vattn_check(va) != PL_OK) fail_msg("vattn check: %s", pl_last_error());
}

static void test_bad_settings(void **state) {
    (void)state;
    pl_vattn *va;
    pl_vattn_config c = base_cfg(PL_VATTN_MEMFD, 4);
    c.page_size = 8192;
    assert_int_equal(pl_vattn_create(&c, &va), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "kv-page-size 8192 is not supported"));
    c = base_cfg(PL_VATTN_MEMFD, 0);
    assert_int_equal(pl_vattn_create(&c, &va), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "needs at least one"));
    assert_int_equal(pl_vattn_parse_page_size("64K"), 65536);
    assert_int_equal(pl_vattn_parse_page_size("2M"), 2u << 20);
    assert_int_equal(pl_vattn_parse_page_size("8K"), 0);
    /* 2 MiB pages: either the system has huge pages or the error says it has not. */
    c = base_cfg(PL_VATTN_MEMFD, 1);
    c.page_size = 2u << 20;
    c.rows_per_slot = 1;
    pl_status st = pl_vattn_create(&c, &va);
    if (st == PL_OK) pl_vattn_destroy(va);
    else assert_true(strstr(pl_last_error(), "huge page") || strstr(pl_last_error(), "MFD_HUGETLB"));
    c.backend = PL_VATTN_ANON;
    assert_int_equal(pl_vattn_create(&c, &va), PL_ERR_UNSUPPORTED);
}

/* Every used slot's needed pages hold the stamp written when they were first needed. */
static void stamp(pl_vattn *va, int32_t slot, int32_t from_row, int32_t to_row) {
    for (int32_t r = 0; r < REGIONS; r++)
        for (int32_t j = from_row; j < to_row; j++)
            for (int32_t k = 0; k < pages_of(r); k++)
                *(int32_t *)page_addr(va, SLOTS, r, slot, j, k) = slot * 1000 + r * 100 + j + 10000 * k;
}

static void verify(pl_vattn *va, int32_t slot, int32_t rows) {
    for (int32_t r = 0; r < REGIONS; r++)
        for (int32_t j = 0; j < rows; j++)
            for (int32_t k = 0; k < pages_of(r); k++)
                assert_int_equal(*(int32_t *)page_addr(va, SLOTS, r, slot, j, k),
                                 slot * 1000 + r * 100 + j + 10000 * k);
}

/* Every used slot given back: nothing needed, nothing leaked. */
static void release_all(pl_vattn *va, int32_t slots, const int *used, int64_t phys,
                        pl_vattn_stats *st) {
    for (int32_t i = 0; i < slots; i++)
        if (used[i]) pl_vattn_release(va, i);
    check_ok(va);
    pl_vattn_get_stats(va, st);
    assert_int_equal(st->rows_needed, 0);
    assert_int_equal(st->slots_used, 0);
    assert_int_equal(st->rows_free + st->rows_cached + st->rows_committed, phys);
}

static void run_property(pl_vattn_backend b, int overlap, int deferred, int eager, uint64_t seed) {
    const int64_t phys = 20;
    pl_vattn_config c = base_cfg(b, phys);
    c.overlap = overlap, c.deferred_reclaim = deferred, c.eager = eager;
    pl_vattn *va;
    assert_int_equal(pl_vattn_create(&c, &va), PL_OK);
    int32_t tokens[SLOTS], stamped[SLOTS];
    int used[SLOTS] = {0};
    int64_t need_sum = 0;
    pl_rng rng;
    pl_rng_seed(&rng, seed);
    for (int op = 0; op < 3000; op++) {
        int kind = (int)((uint32_t)pl_rng_next(&rng) % 5);
        int32_t s = (int32_t)((uint32_t)pl_rng_next(&rng) % SLOTS);
        if (kind == 0) { /* arrival: a prompt of 1..3 rows' tokens, if it fits */
            int32_t n = 1 + (int32_t)((uint32_t)pl_rng_next(&rng) % (3 * TPR));
            int32_t rows = (n + TPR - 1) / TPR;
            if (need_sum + rows > phys) continue;
            int32_t got = pl_vattn_acquire(va);
            int any_free = 0;
            for (int i = 0; i < SLOTS; i++) any_free |= !used[i];
            if (!any_free) { assert_int_equal(got, -1); continue; }
            assert_true(got >= 0 && got < SLOTS);
            assert_false(used[got]); /* no slot shared */
            used[got] = 1;
            tokens[got] = n;
            stamped[got] = 0;
            need_sum += rows;
            pl_vattn_set_need(va, got, n);
        } else if (kind == 1 && used[s]) { /* growth: decode or a chunk */
            int32_t add = 1 + (int32_t)((uint32_t)pl_rng_next(&rng) % TPR);
            int32_t n = tokens[s] + add;
            if (n > ROWS * TPR) continue;
            int32_t d = (n + TPR - 1) / TPR - (tokens[s] + TPR - 1) / TPR;
            if (need_sum + d > phys) continue;
            need_sum += d;
            tokens[s] = n;
            pl_vattn_set_need(va, s, n);
        } else if (kind == 2 && used[s]) { /* finish */
            verify(va, s, stamped[s]);
            pl_vattn_release(va, s);
            used[s] = 0;
            need_sum -= (tokens[s] + TPR - 1) / TPR;
        } else if (kind == 3) { /* a step: everything needed gets mapped */
            assert_int_equal(pl_vattn_prepare_step(va), PL_OK);
            pl_vattn_stats st;
            pl_vattn_get_stats(va, &st);
            int64_t cached = 0;
            for (int i = 0; i < SLOTS; i++) {
                int32_t m = pl_vattn_mapped_rows(va, i), need = used[i] ? (tokens[i] + TPR - 1) / TPR : 0;
                assert_true(m >= need);
                cached += m - need;
                if (used[i]) {
                    verify(va, i, stamped[i]); /* nothing moved under the data */
                    stamp(va, i, stamped[i], need);
                    stamped[i] = need;
                }
            }
            /* committed pages = pages needed + cached */
            assert_int_equal(st.rows_committed, need_sum + cached);
            assert_int_equal(st.rows_needed, need_sum);
        } else if (kind == 4) {
            pl_vattn_background_once(va);
        }
        check_ok(va);
    }
    pl_vattn_stats st;
    release_all(va, SLOTS, used, phys, &st);
    if (!deferred && !eager) assert_int_equal(st.rows_committed, 0);
    if (deferred) assert_true(st.slots_reused > 0);
    if (!deferred && !eager) assert_int_equal(st.slots_reused, 0);
    pl_vattn_destroy(va);
}

static void test_property(void **state) {
    (void)state;
    uint64_t seed = sweep_seed() ? sweep_seed() * 100 : 12;
    if (sweep_seed()) print_message("vattn property: PL_KV_SEED=%" PRIu64 "\n", sweep_seed());
    for (int b = 0; b < 2; b++)
        for (int mask = 0; mask < 8; mask++)
            run_property((pl_vattn_backend)b, mask & 1, (mask >> 1) & 1, (mask >> 2) & 1, seed++);
}

static void write_tokens(pl_vattn *va, int32_t slot, int32_t n_tokens) {
    int32_t rows = (n_tokens + TPR - 1) / TPR;
    stamp(va, slot, 0, rows);
}

static void tracks_tokens(pl_vattn_backend b) {
    pl_vattn_config c = base_cfg(b, 40);
    c.overlap = c.deferred_reclaim = c.eager = 0;
    pl_vattn *va;
    assert_int_equal(pl_vattn_create(&c, &va), PL_OK);
    assert_int_equal(pl_vattn_resident_pages(va), 0);
    int32_t s0 = pl_vattn_acquire(va), s1 = pl_vattn_acquire(va);
    int32_t t0 = 0, t1 = 0;
    for (int step = 0; step < 3 * TPR; step++) { /* two sequences decode token by token */
        t0 += 1;
        t1 += 2;
        pl_vattn_set_need(va, s0, t0);
        pl_vattn_set_need(va, s1, t1);
        assert_int_equal(pl_vattn_prepare_step(va), PL_OK);
        write_tokens(va, s0, t0);
        write_tokens(va, s1, t1);
        int64_t rows = (t0 + TPR - 1) / TPR + (t1 + TPR - 1) / TPR;
        assert_int_equal(pl_vattn_resident_pages(va), rows * row_pages());
    }
    pl_vattn_release(va, s1);
    assert_int_equal(pl_vattn_resident_pages(va), (int64_t)((t0 + TPR - 1) / TPR) * row_pages());
    pl_vattn_release(va, s0);
    assert_int_equal(pl_vattn_resident_pages(va), 0);
    pl_vattn_destroy(va);
}

static void test_memory_tracks_tokens(void **state) {
    (void)state;
    tracks_tokens(PL_VATTN_MEMFD);
    tracks_tokens(PL_VATTN_ANON);
}

/* The mapper thread maps the row of a slot's next token while "the step" runs, keeps a free slot
 * pre-mapped, and the invariants hold throughout. */
static void test_mapper_thread(void **state) {
    (void)state;
    pl_vattn_config c = base_cfg(PL_VATTN_MEMFD, 24);
    c.start_thread = 1;
    pl_vattn *va;
    assert_int_equal(pl_vattn_create(&c, &va), PL_OK);
    pl_rng rng;
    pl_rng_seed(&rng, 7);
    int32_t tokens[SLOTS] = {0}, slot_of[SLOTS];
    int n_live = 0;
    for (int step = 0; step < 400; step++) {
        if (n_live < 3) { /* arrivals */
            int32_t s = pl_vattn_acquire(va);
            assert_true(s >= 0);
            slot_of[n_live] = s;
            tokens[n_live] = 1 + (int32_t)((uint32_t)pl_rng_next(&rng) % TPR);
            pl_vattn_set_need(va, s, tokens[n_live]);
            n_live++;
        }
        assert_int_equal(pl_vattn_prepare_step(va), PL_OK);
        for (int i = 0; i < n_live; i++) write_tokens(va, slot_of[i], tokens[i]);
        check_ok(va);
        for (int i = 0; i < n_live; i++) { /* decode; finish at 4 rows */
            if (++tokens[i] > 4 * TPR) {
                pl_vattn_release(va, slot_of[i]);
                slot_of[i] = slot_of[n_live - 1];
                tokens[i] = tokens[n_live - 1];
                n_live--;
                i--;
                continue;
            }
            pl_vattn_set_need(va, slot_of[i], tokens[i]);
        }
        if (step % 50 == 0) { /* let the mapper catch up now and then */
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
    }
    pl_vattn_stats st;
    pl_vattn_get_stats(va, &st);
    assert_true(st.pages_mapped_bg > 0);
    assert_true(st.slots_reused > 0);
    for (int i = 0; i < n_live; i++) pl_vattn_release(va, slot_of[i]);
    check_ok(va);
    pl_vattn_destroy(va);
}

/* ---- the three techniques, each shown doing its job (and failing without it) ----
 *
 * The mapper thread's work is run here as the thread runs it, one unit at a time
 * (pl_vattn_background_once) while "the step computes", so each test is deterministic. After
 * every operation the invariants hold and the pages resident in the reservation (mincore) are
 * exactly the rows the pool says are mapped. */

static void check_resident(pl_vattn *va) {
    check_ok(va);
    pl_vattn_stats st;
    pl_vattn_get_stats(va, &st);
    assert_int_equal(pl_vattn_resident_pages(va), st.rows_committed * row_pages());
}

static void mapper_catches_up(pl_vattn *va) {
    while (pl_vattn_background_once(va)) check_resident(va);
}

static uint64_t pages_sync(pl_vattn *va) {
    pl_vattn_stats st;
    pl_vattn_get_stats(va, &st);
    return st.pages_mapped_sync;
}

/* Overlap: in steady decode the engine thread maps nothing before a step (the mapper mapped each
 * slot's next row during the previous one); without overlap every row boundary is mapped on the
 * critical path. */
static void steady_decode(int overlap) {
    pl_vattn_config c = base_cfg(PL_VATTN_ANON, 24);
    c.overlap = overlap, c.deferred_reclaim = c.eager = 0;
    pl_vattn *va;
    assert_int_equal(pl_vattn_create(&c, &va), PL_OK);
    int32_t s[3], n[3] = {5, TPR - 1, 2 * TPR};
    for (int i = 0; i < 3; i++) {
        s[i] = pl_vattn_acquire(va);
        pl_vattn_set_need(va, s[i], n[i]);
    }
    assert_int_equal(pl_vattn_prepare_step(va), PL_OK); /* the prefill: mapped synchronously */
    mapper_catches_up(va);
    const uint64_t warm = pages_sync(va);
    assert_int_equal(warm, (1 + 1 + 2) * row_pages());
    for (int step = 0; step < 4 * TPR; step++) { /* every slot crosses rows several times */
        for (int i = 0; i < 3; i++) pl_vattn_set_need(va, s[i], ++n[i]);
        assert_int_equal(pl_vattn_prepare_step(va), PL_OK);
        check_resident(va);
        mapper_catches_up(va); /* the step computes */
    }
    if (overlap) assert_int_equal(pages_sync(va), warm); /* the counter stays after warm-up */
    else assert_int_equal(pages_sync(va), warm + 3 * 4 * row_pages());
    for (int i = 0; i < 3; i++) pl_vattn_release(va, s[i]);
    check_resident(va);
    pl_vattn_destroy(va);
}

static void test_overlap_hides_mapping(void **state) {
    (void)state;
    steady_decode(1);
    steady_decode(0);
}

/* A vattn with only `deferred` and `eager` as given (overlap off) that has served one request
 * of n tokens (mapped on the critical path) which has finished; the mapper then had idle time. */
static pl_vattn *after_one_request(int deferred, int eager, int32_t n, int32_t *slot) {
    pl_vattn_config c = base_cfg(PL_VATTN_ANON, 24);
    c.overlap = 0, c.deferred_reclaim = deferred, c.eager = eager;
    pl_vattn *va;
    assert_int_equal(pl_vattn_create(&c, &va), PL_OK);
    *slot = pl_vattn_acquire(va);
    pl_vattn_set_need(va, *slot, n);
    assert_int_equal(pl_vattn_prepare_step(va), PL_OK);
    pl_vattn_release(va, *slot);
    check_resident(va);
    mapper_catches_up(va);
    return va;
}

/* Deferred reclamation: a finished request's slot keeps its pages and the next request takes
 * that slot without unmapping or mapping anything; without it the pages go at the finish. */
static void reuse_after_finish(int deferred) {
    int32_t a;
    /* free rows stay above the threshold: the mapper reclaims nothing */
    pl_vattn *va = after_one_request(deferred, 0, 3 * TPR, &a);
    pl_vattn_stats before, after;
    pl_vattn_get_stats(va, &before);
    int32_t b = pl_vattn_acquire(va);
    pl_vattn_set_need(va, b, 2 * TPR + 1);
    assert_int_equal(pl_vattn_prepare_step(va), PL_OK);
    check_resident(va);
    pl_vattn_get_stats(va, &after);
    if (deferred) {
        assert_int_equal(b, a);
        assert_int_equal(after.slots_reused, 1);
        assert_int_equal(after.pages_unmapped_sync + after.pages_unmapped_bg, 0);
        assert_int_equal(after.pages_mapped_sync, before.pages_mapped_sync); /* no new mapping */
        assert_int_equal(pl_vattn_mapped_rows(va, b), 3);
    } else {
        assert_int_equal(before.pages_unmapped_sync, 3 * row_pages());
        assert_int_equal(after.slots_reused, 0);
        assert_int_equal(after.pages_mapped_sync, before.pages_mapped_sync + 3 * row_pages());
    }
    pl_vattn_release(va, b);
    pl_vattn_destroy(va);
}

static void test_deferred_reclaim_reuses_slot(void **state) {
    (void)state;
    reuse_after_finish(1);
    reuse_after_finish(0);
}

/* Eager allocation: once a prompt of R rows has been seen, the mapper keeps the free slot the
 * next request will take mapped for R rows, so that request's prefill maps nothing on the
 * critical path (deferred reclamation off: the pages come from eager mapping, not from a kept
 * slot). */
static void next_request_premapped(int eager) {
    int32_t a; /* a 3-row prompt, unmapped at its finish; then eager pre-maps the next slot */
    pl_vattn *va = after_one_request(0, eager, 2 * TPR + 3, &a);
    const uint64_t sync = pages_sync(va);
    int32_t b = pl_vattn_acquire(va);
    assert_int_equal(pl_vattn_mapped_rows(va, b), eager ? 3 : 0);
    pl_vattn_set_need(va, b, 2 * TPR + 9);
    assert_int_equal(pl_vattn_prepare_step(va), PL_OK);
    check_resident(va);
    assert_int_equal(pages_sync(va), sync + (eager ? 0 : 3 * row_pages()));
    pl_vattn_release(va, b);
    pl_vattn_destroy(va);
}

static void test_eager_premaps_next_request(void **state) {
    (void)state;
    next_request_premapped(1);
    next_request_premapped(0);
}

/* ---- sharing (issue 37): one physical page at several virtual addresses ----------------------
 *
 * A model of what every slot's pages must read: exp[slot][pos] is the word each region's page at
 * that position starts with. Sequences arrive, fork (every page of the parent mapped into the
 * child), grow (a shared partial page copied before the write, as kv/cache.c does), roll back,
 * finish and step, in random order; after every operation: the invariants (reference counts,
 * shared rows only below a need), mincore's resident pages = the distinct rows in use, every
 * slot reads what was written into it (a write into a page still shared would show in another
 * slot), and a shared page is the same bytes through every mapping.
 * With the prefix cache (issue 37), a page's word is a hash of the tokens it ends (so equal
 * prefixes mean equal bytes); computed sequences register their full pages, arrivals map the
 * pages of their prompt's prefix that a running or a finished sequence computed (their words
 * then read back as the prefix says), and the small pool evicts the cache LRU-first; mincore's
 * resident pages = distinct rows in use + cached rows. */

static int32_t exp_word[2 * SLOTS][ROWS];
static int32_t toks[2 * SLOTS][ROWS * TPR];
static int32_t family[2][ROWS * TPR];

/* The word of a page holding tokens[0, end) up to its end. */
static int32_t word_of(const int32_t *t, int32_t end) {
    uint32_t h = 2166136261u;
    for (int32_t i = 0; i < end; i++) h = (h ^ (uint32_t)t[i]) * 16777619u;
    return (int32_t)(h & 0x0fffffff);
}

static int32_t *word_at(pl_vattn *va, int32_t slots, int32_t r, int32_t slot, int32_t pos) {
    return (int32_t *)page_addr(va, slots, r, slot, pos, 0);
}

/* The word v + r in region r's row, its later pages (if any) v + r + 1000 k. */
static void write_word(pl_vattn *va, int32_t slots, int32_t slot, int32_t pos, int32_t v) {
    assert_false(pl_vattn_row_shared(va, slot, pos)); /* never written while shared */
    for (int32_t r = 0; r < REGIONS; r++)
        for (int32_t k = 0; k < pages_of(r); k++)
            *(int32_t *)page_addr(va, slots, r, slot, pos, k) = v + r + 1000 * k;
    exp_word[slot][pos] = v;
}

static void check_shared(pl_vattn *va, int32_t slots, const int *used, const int32_t *written) {
    check_ok(va);
    pl_vattn_stats st;
    pl_vattn_get_stats(va, &st);
    assert_int_equal(pl_vattn_resident_pages(va), (st.rows_committed + st.rows_cached) * row_pages());
    assert_true(st.rows_needed <= 12);
    for (int32_t s = 0; s < slots; s++) {
        if (!used[s]) continue;
        for (int32_t j = 0; j < (written[s] + TPR - 1) / TPR; j++)
            for (int32_t r = 0; r < REGIONS; r++)
                for (int32_t k = 0; k < pages_of(r); k++)
                    assert_int_equal(*(int32_t *)page_addr(va, slots, r, s, j, k),
                                     exp_word[s][j] + r + 1000 * k);
    }
}

static void run_sharing(int deferred, int cache, uint64_t seed) {
    const int32_t slots = 2 * SLOTS;
    pl_vattn_config c = base_cfg(PL_VATTN_MEMFD, 12);
    c.n_slots = slots, c.deferred_reclaim = deferred, c.overlap = 1, c.eager = 1;
    c.prefix_cache = cache;
    pl_vattn *va;
    assert_int_equal(pl_vattn_create(&c, &va), PL_OK);
    int used[2 * SLOTS] = {0};
    int32_t tokens[2 * SLOTS] = {0}, written[2 * SLOTS] = {0}, next = 1;
    uint64_t forks = 0, cows = 0, hits = 0, copies = 0;
    pl_rng rng;
    pl_rng_seed(&rng, seed);
    for (int f = 0; f < 2; f++)
        for (int32_t i = 0; i < ROWS * TPR; i++) family[f][i] = (int32_t)(pl_rng_next(&rng) % 50);
    for (int op = 0; op < 2000; op++) {
        int kind = (int)((uint32_t)pl_rng_next(&rng) % 7);
        int32_t s = (int32_t)((uint32_t)pl_rng_next(&rng) % slots);
        pl_vattn_stats st;
        pl_vattn_get_stats(va, &st);
        if (kind == 0) { /* arrival */
            int32_t n = 1 + (int32_t)((uint32_t)pl_rng_next(&rng) % (2 * TPR));
            if (st.rows_needed + (n + TPR - 1) / TPR > 12) continue;
            int32_t got = pl_vattn_acquire(va);
            if (got < 0) continue;
            /* a prompt: one of two families' tokens up to a random point, then its own */
            const int32_t *fam = family[pl_rng_next(&rng) % 2];
            int32_t same = pl_rng_next(&rng) % 4 ? n
                                                  : (int32_t)((uint32_t)pl_rng_next(&rng) %
                                                              (uint32_t)(n + 1));
            for (int32_t i = 0; i < ROWS * TPR; i++)
                toks[got][i] = i < same ? fam[i] : 50 + (int32_t)(pl_rng_next(&rng) % 1000);
            int32_t hit = 0;
            if (cache) {
                assert_int_equal(pl_vattn_map_prefix(va, got, toks[got], (n - 1) / TPR, 0, &hit),
                                 PL_OK);
                for (int32_t j = 0; j < hit; j++) exp_word[got][j] = word_of(toks[got], (j + 1) * TPR);
                hits += (uint64_t)hit;
            }
            used[got] = 1, tokens[got] = n, written[got] = hit * TPR;
            pl_vattn_set_need(va, got, n);
        } else if (kind == 1 && used[s] && written[s] == tokens[s]) { /* fork a computed one */
            int32_t got = pl_vattn_acquire(va);
            if (got < 0) continue;
            int32_t rows = (tokens[s] + TPR - 1) / TPR;
            assert_int_equal(pl_vattn_share(va, s, got, rows), PL_OK);
            pl_vattn_set_need(va, got, tokens[s]);
            used[got] = 1, tokens[got] = written[got] = tokens[s];
            memcpy(exp_word[got], exp_word[s], sizeof exp_word[s]);
            memcpy(toks[got], toks[s], sizeof toks[s]);
            /* every page shared, but a partly filled last page over a page the (reused) slot
             * still had: copied there (its bytes checked below as every page's) */
            for (int32_t j = 0; j < rows; j++)
                if (!pl_vattn_row_shared(va, got, j)) {
                    assert_true(j == rows - 1 && tokens[s] % TPR != 0);
                    copies++;
                }
            forks++;
        } else if (kind == 2 && used[s] && written[s] == tokens[s]) { /* grow */
            int32_t n = tokens[s] + 1 + (int32_t)((uint32_t)pl_rng_next(&rng) % TPR);
            if (n > ROWS * TPR) continue;
            int cow = tokens[s] % TPR && pl_vattn_row_shared(va, s, tokens[s] / TPR);
            int32_t d = (n + TPR - 1) / TPR - (tokens[s] + TPR - 1) / TPR;
            if (st.rows_needed + d + cow > 12) continue;
            if (cow) {
                int32_t before = exp_word[s][tokens[s] / TPR];
                assert_int_equal(pl_vattn_unshare(va, s, tokens[s] / TPR), PL_OK);
                assert_false(pl_vattn_row_shared(va, s, tokens[s] / TPR));
                for (int32_t r = 0; r < REGIONS; r++) /* the copy holds the bytes */
                    for (int32_t k = 0; k < pages_of(r); k++)
                        assert_int_equal(*(int32_t *)page_addr(va, slots, r, s, tokens[s] / TPR, k),
                                         before + r + 1000 * k);
                cows++;
            }
            for (int32_t i = tokens[s]; i < n; i++) /* often what another sequence said next */
                toks[s][i] = pl_rng_next(&rng) % 4 ? family[0][i]
                                                   : 50 + (int32_t)(pl_rng_next(&rng) % 1000);
            tokens[s] = n;
            pl_vattn_set_need(va, s, n);
        } else if (kind == 3 && used[s] && tokens[s] > 1) { /* roll back */
            int32_t n = 1 + (int32_t)((uint32_t)pl_rng_next(&rng) % (uint32_t)tokens[s]);
            tokens[s] = n;
            if (written[s] > n) written[s] = n;
            pl_vattn_set_need(va, s, n);
        } else if (kind == 4 && used[s]) { /* finish */
            pl_vattn_release(va, s);
            used[s] = 0;
        } else if (kind == 5) { /* a step: map what is needed, write the new tokens' pages */
            assert_int_equal(pl_vattn_prepare_step(va), PL_OK);
            check_shared(va, slots, used, written);
            for (int32_t i = 0; i < slots; i++) {
                if (!used[i] || written[i] == tokens[i]) continue;
                for (int32_t j = written[i] / TPR; j < (tokens[i] + TPR - 1) / TPR; j++) {
                    int32_t end = (j + 1) * TPR < tokens[i] ? (j + 1) * TPR : tokens[i];
                    write_word(va, slots, i, j, cache ? word_of(toks[i], end) : next++ * 16);
                }
                written[i] = tokens[i];
                /* computed: its full pages hashed (kv/cache.c's commit) */
                if (cache) pl_vattn_register(va, i, toks[i], written[i] / TPR);
            }
        } else if (kind == 6) {
            pl_vattn_background_once(va);
        }
        check_shared(va, slots, used, written);
    }
    pl_vattn_stats st;
    pl_vattn_get_stats(va, &st);
    const int exercised = !sweep_seed(); /* a random seed may do less of each */
    if (exercised) assert_true(forks > 20 && cows > 5 && (!deferred || copies > 5));
    /* the cache did its three jobs: hits, hits on pages nobody mapped any more, evictions */
    if (exercised && cache) assert_true(hits > 10 && st.rows_from_cache > 1 && st.rows_evicted > 5);
    release_all(va, slots, used, 12, &st);
    assert_int_equal(st.rows_shared, 0);
    if (exercised) assert_true(st.pages_shared > 0 && st.pages_copied > 0);
    pl_vattn_destroy(va);
}

/* Regions whose rows take 1, 2, 1 and 3 pages (a layer's token rows larger than another's,
 * gemma4): the properties above (a region's every page of a row stamped and read back, the
 * sharing's copies copying all of them), and memory tracking tokens at 7 pages a row. */
static void test_region_pages(void **state) {
    (void)state;
    static const int32_t pages[REGIONS] = {1, 2, 1, 3};
    g_pages = pages;
    pl_vattn *va;
    pl_vattn_config c = base_cfg(PL_VATTN_MEMFD, 4);
    assert_int_equal(pl_vattn_create(&c, &va), PL_OK);
    /* regions back to back, each SLOTS slots of ROWS rows of its pages */
    size_t off = 0;
    for (int32_t r = 0; r < REGIONS; r++) {
        assert_int_equal(pl_vattn_region_offset(va, r), off);
        off += (size_t)SLOTS * ROWS * pages[r] * 4096;
    }
    assert_int_equal(pl_vattn_reserved_bytes(va), off);
    pl_vattn_destroy(va);
    static const int32_t bad[REGIONS] = {1, 0, 1, 1};
    c.region_pages = bad;
    assert_int_equal(pl_vattn_create(&c, &va), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "region 1 takes 0 pages"));
    run_property(PL_VATTN_MEMFD, 1, 1, 1, 401);
    run_property(PL_VATTN_ANON, 0, 0, 0, 402);
    run_property(PL_VATTN_ANON, 1, 1, 0, 403);
    tracks_tokens(PL_VATTN_MEMFD);
    tracks_tokens(PL_VATTN_ANON);
    run_sharing(1, 0, 92);
    run_sharing(0, 1, 95);
    g_pages = NULL;
}

static void test_sharing_property(void **state) {
    (void)state;
    static const struct { int deferred, cache; uint64_t seed; } runs[] = {
        {1, 0, 91}, {0, 0, 92}, {1, 1, 93}, {0, 1, 94},
        /* seeds that broke the library's own invariants before their fixes: a fork into a
         * reused slot at a full pool copying its partly filled last page into a row nobody had
         * counted (304; 10262: the first fix counted the aliases of the pages before it
         * twice), and a prefix walk continuing from a row whose hash had been dropped since
         * (318: no deferred reclamation, 319: with it) */
        {1, 0, 304}, {1, 0, 10262}, {0, 1, 318}, {1, 1, 319},
        /* a slot rolled back below the end of a page it shared, then the others let the page
         * go: it rewrote the page in place under the old prefix's hash, and a later prompt's
         * hit mapped it (its words differed: 183, 331, 393, 543), or wrote a page a hit had
         * mapped since (131, 483) */
        {1, 1, 183}, {0, 1, 331}, {1, 1, 393}, {1, 1, 543}, {0, 1, 131}, {1, 1, 483},
    };
    if (sweep_seed()) { /* the four configurations at seeds made from PL_KV_SEED */
        print_message("vattn sharing: PL_KV_SEED=%" PRIu64 "\n", sweep_seed());
        for (int i = 0; i < 4; i++) run_sharing(i >> 1, i & 1, sweep_seed() * 10 + (uint64_t)i);
        return;
    }
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++)
        run_sharing(runs[i].deferred, runs[i].cache, runs[i].seed);
}

/* The life of one shared page, step by step: mapped into a second slot it costs no memory and
 * reads the same bytes; a write through it needs a copy first; the parent's going unmaps it
 * there but the child keeps it; the child's going frees it. The anonymous backend refuses. */
static void test_sharing_lifecycle(void **state) {
    (void)state;
    pl_vattn_config c = base_cfg(PL_VATTN_MEMFD, 8);
    c.overlap = c.deferred_reclaim = c.eager = 0;
    pl_vattn *va;
    assert_int_equal(pl_vattn_create(&c, &va), PL_OK);
    int32_t p = pl_vattn_acquire(va);
    pl_vattn_set_need(va, p, 2 * TPR + 3); /* two full pages and a partial one */
    assert_int_equal(pl_vattn_prepare_step(va), PL_OK);
    for (int32_t j = 0; j < 3; j++)
        for (int32_t r = 0; r < REGIONS; r++) *word_at(va, SLOTS, r, p, j) = 100 * j + r;
    assert_int_equal(pl_vattn_resident_pages(va), 3 * row_pages());
    int32_t k = pl_vattn_acquire(va);
    assert_int_equal(pl_vattn_share(va, p, k, 3), PL_OK);
    pl_vattn_set_need(va, k, 2 * TPR + 3);
    check_ok(va);
    assert_int_equal(pl_vattn_resident_pages(va), 3 * row_pages()); /* no new memory */
    pl_vattn_stats st;
    pl_vattn_get_stats(va, &st);
    assert_int_equal(st.rows_needed, 3);
    assert_int_equal(st.rows_shared, 3);
    assert_int_equal(pl_vattn_tokens_stored(va), 2 * TPR + 3); /* a shared page's tokens once */
    for (int32_t j = 0; j < 3; j++)
        for (int32_t r = 0; r < REGIONS; r++) {
            assert_int_equal(*word_at(va, SLOTS, r, k, j), 100 * j + r);
            assert_ptr_not_equal(word_at(va, SLOTS, r, k, j), word_at(va, SLOTS, r, p, j));
        }
    *word_at(va, SLOTS, 0, p, 0) = 7; /* one page: a write shows through both addresses */
    assert_int_equal(*word_at(va, SLOTS, 0, k, 0), 7);
    /* the child's next token goes into the partial page: copied first */
    assert_true(pl_vattn_row_shared(va, k, 2));
    assert_int_equal(pl_vattn_unshare(va, k, 2), PL_OK);
    check_ok(va);
    assert_int_equal(pl_vattn_resident_pages(va), 4 * row_pages());
    assert_int_equal(pl_vattn_tokens_stored(va), 2 * TPR + 6); /* the copied page's too */
    *word_at(va, SLOTS, 1, k, 2) = -1;
    assert_int_equal(*word_at(va, SLOTS, 1, p, 2), 201);
    assert_int_equal(*word_at(va, SLOTS, 2, k, 2), 202);
    /* the parent goes: its private page is freed, the shared ones stay the child's */
    pl_vattn_release(va, p);
    check_ok(va);
    assert_int_equal(pl_vattn_mapped_rows(va, p), 0);
    assert_int_equal(pl_vattn_resident_pages(va), 3 * row_pages());
    assert_int_equal(*word_at(va, SLOTS, 0, k, 0), 7);
    assert_int_equal(*word_at(va, SLOTS, 3, k, 1), 103);
    assert_false(pl_vattn_row_shared(va, k, 0));
    pl_vattn_release(va, k);
    check_ok(va);
    assert_int_equal(pl_vattn_resident_pages(va), 0);
    pl_vattn_get_stats(va, &st);
    assert_int_equal(st.rows_free, 8);
    pl_vattn_destroy(va);
    c.backend = PL_VATTN_ANON;
    assert_int_equal(pl_vattn_create(&c, &va), PL_OK);
    p = pl_vattn_acquire(va);
    k = pl_vattn_acquire(va);
    pl_vattn_set_need(va, p, 1);
    assert_int_equal(pl_vattn_share(va, p, k, 1), PL_ERR_UNSUPPORTED);
    assert_non_null(strstr(pl_last_error(), "memfd"));
    pl_vattn_destroy(va);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_settings),
        cmocka_unit_test(test_property),
        cmocka_unit_test(test_memory_tracks_tokens),
        cmocka_unit_test(test_mapper_thread),
        cmocka_unit_test(test_overlap_hides_mapping),
        cmocka_unit_test(test_deferred_reclaim_reuses_slot),
        cmocka_unit_test(test_eager_premaps_next_request),
        cmocka_unit_test(test_sharing_lifecycle),
        cmocka_unit_test(test_sharing_property),
        cmocka_unit_test(test_region_pages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
