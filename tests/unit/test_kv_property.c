/* Property test of src/kv/manager (split from test_kv_manager.c, which tests each operation
 * alone): seeded random operations (prompts from shared prefixes, append, fork, free,
 * copy-on-write, swap out/in, recompute, eviction under pressure, speculative rollback), with
 * and without a sliding window (blocks released behind it) and with KV cache groups (tables of
 * the global and the window group in one pool, and sequences holding one table of each kept in
 * step, in one pool or, as kv/cache.h's layer kinds, the window tables in a pool of their own),
 * that simulates block CONTENTS in a shadow array per pool and checks every invariant after
 * every operation.
 *
 * Replay a failure with PL_KV_SEED=<seed printed by the run> (and PL_KV_OPS=<count>). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "../ci_env.h"
#include "base/rng.h"
#include "kv/manager.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BS 4

/* The simulation plays the engine: it "computes" tokens by writing them into a shadow of every
 * block's contents, applies copy-on-write and swap mappings to the shadow as the engine would
 * with the byte-copy kernel, and checks that every table reads back exactly its tokens. */

enum { P_SEQS = 20, P_MAXB = 12, P_MAXTOK = P_MAXB * BS, P_PREFIXES = 4, P_PREFIX_LEN = 24 };

typedef struct {
    int live;                  /* slot in use */
    pl_block_table t;          /* the table under test */
    int32_t tok[P_MAXTOK];     /* the sequence's tokens; all t.n_tokens of them are computed */
    int group;                 /* swap group (a request's sequences) */
    uint64_t salt;             /* extra key: the cache salt (0 or 1), + 2 for a global group's
                                  table (groups must not hit each other's blocks) */
    uint64_t tag;              /* SEQ_TAG: what its slots hold, tagged by salt and group */
    pl_block_table tw;         /* pair mode: the same sequence's window group table (t is then
                                  its global group table); both kept in step as the engine must */
    uint64_t tag_w;            /* SEQ_TAG of tw */
} sim_seq;

/* What a slot holds: the token tagged with the cache salt, so a hit across salts reads wrong. */
#define SALTED(tok, salt) ((int32_t)(tok) + (int32_t)(salt) * 1000000)
/* What a sequence's slots hold: its cache salt and its table's group (a global group's block
 * holds other layers than the window group's block of the same tokens). */
#define SEQ_TAG(salt, global) ((salt) + 2u * (uint64_t)(global))

/* One pool: its manager, the shadow of its blocks and the check's scratch. */
typedef struct {
    pl_kv_manager m;
    int32_t *shadow;           /* [num_blocks * BS] token held by each primary slot, -1 never */
    int32_t *swap_shadow;      /* [num_swap_blocks * BS] */
    int32_t *cnt_p, *cnt_s;    /* scratch: references counted from the tables */
    int32_t *fill;             /* scratch: tokens per primary block as the tables see it */
} sim_pool;

typedef struct {
    sim_pool pools[2];         /* [1] with layer kinds only */
    sim_pool *pool[2];         /* of a sequence's table j: pools[0], or pools[j] with kinds */
    int n_pools;
    pl_rng rng;
    sim_seq seq[P_SEQS];
    int32_t prefix[P_PREFIXES][P_PREFIX_LEN];
    int next_group;
    int32_t W;                 /* the manager's sliding window, 0 = none */
    int groups;                /* 1: a table is of the window or the global group at random;
                                  2: every sequence has one table of each group (pairs);
                                  3: pairs with the window tables in a pool of their own */
    /* coverage: each must be > 0 at the end, or the run proved little */
    long hits, cows, swap_outs, swap_ins, capacity_fails, recomputes, forks, frees, rollbacks;
    long pair_chunks;          /* pair mode: prompts allocated in two parts */
    int evicted;               /* the failed admission may have evicted cached blocks */
} sim;

/* q's tables (t, and tw in pair mode) and what their slots hold; returns their count. */
static int seq_tables(const sim *s, sim_seq *q, pl_block_table **t, uint64_t *tags) {
    t[0] = &q->t;
    tags[0] = q->tag;
    if (s->groups < 2) return 1;
    t[1] = &q->tw;
    tags[1] = q->tag_w;
    return 2;
}

static void sim_write(sim *s, sim_seq *q, int32_t pos) {
    pl_block_table *tabs[2];
    uint64_t tags[2];
    for (int j = 0, nt = seq_tables(s, q, tabs, tags); j < nt; j++) {
        int32_t b = tabs[j]->blocks[pos / BS];
        sim_pool *p = s->pool[j];
        /* The model of a kernel write: the block must not be shared (copy-on-write happened). */
        if (p->m.pool.blocks[b].ref != 1)
            fail_msg("write of position %d into block %d with ref %d", (int)pos, (int)b,
                     (int)p->m.pool.blocks[b].ref);
        p->shadow[pl_block_table_slot(tabs[j], pos)] = SALTED(q->tok[pos], tags[j]);
    }
}

/* Leading blocks table t of n committed tokens has released to the window. */
static int32_t exp_dropped(const sim *s, const pl_block_table *t, int32_t n) {
    return !t->global && s->W > 0 && n - s->W + 1 > 0 ? (n - s->W + 1) / BS : 0;
}

static void sim_check(sim *s, int step) {
    int n_live[2] = {0, 0}, n_resident[2] = {0, 0};
    for (int pi = 0; pi < s->n_pools; pi++) {
        sim_pool *p = &s->pools[pi];
        pl_status st = pl_kv_manager_check(&p->m);
        if (st != PL_OK) fail_msg("step %d: pool %d: %s", step, pi, pl_last_error());
        int32_t nb = p->m.pool.num_blocks, ns = p->m.swap.num_blocks;
        memset(p->cnt_p, 0, (size_t)nb * sizeof *p->cnt_p);
        memset(p->fill, 0, (size_t)nb * sizeof *p->fill);
        if (ns) memset(p->cnt_s, 0, (size_t)ns * sizeof *p->cnt_s);
    }
    for (int k = 0; k < P_SEQS; k++) {
        sim_seq *q = &s->seq[k];
        if (!q->live) {
            assert_false(q->t.live || q->tw.live);
            continue;
        }
        pl_block_table *tabs[2];
        uint64_t tags[2];
        int nt = seq_tables(s, q, tabs, tags);
        if (nt == 2) { /* a pair stays in step */
            assert_int_equal(q->t.n_tokens, q->tw.n_tokens);
            assert_int_equal(q->t.swapped, q->tw.swapped);
        }
        for (int j = 0; j < nt; j++) {
        pl_block_table *t = tabs[j];
        sim_pool *p = s->pool[j];
        const int pi = (int)(p - s->pools);
        const uint64_t tag = tags[j];
        n_live[pi]++;
        assert_true(t->live);
        assert_int_equal(t->n_blocks, pl_kv_blocks_for(&p->m, t->n_tokens));
        /* Every token is committed here: exactly the blocks behind the window are released. */
        if (t->n_dropped != exp_dropped(s, t, t->n_tokens))
            fail_msg("step %d: seq %d of %d tokens released %d blocks, expected %d", step, k,
                     (int)t->n_tokens, (int)t->n_dropped, (int)exp_dropped(s, t, t->n_tokens));
        for (int32_t i = 0; i < t->n_dropped; i++) assert_int_equal(t->blocks[i], PL_KV_NO_BLOCK);
        for (int32_t i = t->n_dropped; i < t->n_blocks; i++) {
            int32_t b = t->blocks[i];
            assert_true(b >= 0);
            int32_t f = t->n_tokens - i * BS < BS ? t->n_tokens - i * BS : BS;
            if (t->swapped) {
                p->cnt_s[b]++;
            } else {
                p->cnt_p[b]++;
                if (p->fill[b] && p->fill[b] != f)
                    fail_msg("step %d: block %d shared with fills %d and %d", step, (int)b,
                             (int)p->fill[b], (int)f);
                p->fill[b] = f;
            }
        }
        n_resident[pi] += !t->swapped;
        /* Every table reads back exactly its sequence's tokens (those it still holds: at least
         * the window of its next query). */
        const int32_t *sh = t->swapped ? p->swap_shadow : p->shadow;
        if (s->W > 0) assert_true(t->n_dropped * BS <= (t->n_tokens - s->W + 1 > 0 ? t->n_tokens - s->W + 1 : 0));
        for (int32_t pos = t->n_dropped * BS; pos < t->n_tokens; pos++)
            if (sh[pl_block_table_slot(t, pos)] != SALTED(q->tok[pos], tag))
                fail_msg("step %d: seq %d pos %d reads %d, expected %d (%s block %d)", step, k,
                         (int)pos, (int)sh[pl_block_table_slot(t, pos)],
                         (int)SALTED(q->tok[pos], tag),
                         t->swapped ? "swap" : "primary", (int)t->blocks[pos / BS]);
        }
    }
    for (int pi = 0; pi < s->n_pools; pi++) {
        sim_pool *p = &s->pools[pi];
        pl_kv_manager *m = &p->m;
        int32_t nb = m->pool.num_blocks, ns = m->swap.num_blocks;
        /* Ref counts equal the holders; free xor referenced is checked by the pool check. */
        int64_t stored = 0;
        for (int32_t b = 0; b < nb; b++) {
            if (m->pool.blocks[b].ref != p->cnt_p[b])
                fail_msg("step %d: pool %d primary block %d ref %d, held by %d", step, pi, (int)b,
                         (int)m->pool.blocks[b].ref, (int)p->cnt_p[b]);
            stored += p->fill[b];
            /* A cached block's contents are what its hash claims. */
            if (m->pool.blocks[b].hashed)
                for (int32_t i = 0; i < BS; i++)
                    if (p->shadow[b * BS + i] !=
                        SALTED(m->pool.tokens[b * BS + i], m->pool.blocks[b].extra))
                        fail_msg("step %d: hashed block %d slot %d holds %d, hash says %d", step,
                                 (int)b, (int)i, (int)p->shadow[b * BS + i],
                                 (int)m->pool.tokens[b * BS + i]);
        }
        for (int32_t b = 0; b < ns; b++)
            if (m->swap.blocks[b].ref != p->cnt_s[b])
                fail_msg("step %d: pool %d swap block %d ref %d, held by %d", step, pi, (int)b,
                         (int)m->swap.blocks[b].ref, (int)p->cnt_s[b]);
        pl_kv_stats st2;
        pl_kv_get_stats(m, &st2);
        assert_int_equal(st2.blocks_free + st2.blocks_used, st2.blocks_total);
        assert_int_equal(st2.n_tables, n_live[pi]);
        assert_int_equal(st2.tokens_stored, stored);
        /* Waste: less than one block per resident table. */
        assert_true((int64_t)st2.blocks_used * BS - stored <= (int64_t)n_resident[pi] * (BS - 1));
    }
}

static int sim_free_slot(sim *s) {
    int start = (int)pl_rng_below(&s->rng, P_SEQS);
    for (int i = 0; i < P_SEQS; i++)
        if (!s->seq[(start + i) % P_SEQS].live) return (start + i) % P_SEQS;
    return -1;
}

/* A random live sequence that is resident (want 0) or swapped (want 1), or -1. */
static int sim_pick(sim *s, int want) {
    int start = (int)pl_rng_below(&s->rng, P_SEQS);
    for (int i = 0; i < P_SEQS; i++) {
        sim_seq *q = &s->seq[(start + i) % P_SEQS];
        if (q->live && q->t.swapped == want) return (start + i) % P_SEQS;
    }
    return -1;
}

/* Free every table of sequence k (the engine's finish, abort or recompute preemption). */
static void sim_drop(sim *s, int k) {
    pl_kv_free_table(&s->pool[0]->m, &s->seq[k].t);
    pl_kv_free_table(&s->pool[1]->m, &s->seq[k].tw);
    assert_false(s->seq[k].t.live || s->seq[k].tw.live);
    s->seq[k].live = 0;
}

static void sim_free(sim *s, int k) {
    sim_drop(s, k);
    s->frees++;
}

/* Pair mode: allocate both tables of q at once, with the same cached length (the smaller of
 * the two groups' hits); the blocks taken must be exactly the ones predicted. With layer kinds
 * the window table lives in the second pool. */
static pl_status pair_allocate(sim *s, sim_seq *q, int32_t n, int32_t *n_cached, int32_t *probed) {
    pl_kv_manager *m = &s->pool[0]->m, *mw = &s->pool[1]->m;
    int32_t a = pl_kv_probe_prefix(m, q->tok, n, q->tag), b = pl_kv_probe_prefix(mw, q->tok, n, q->tag_w);
    *probed = a < b ? a : b;
    pl_kv_stats before[2], after[2];
    pl_kv_get_stats(m, &before[0]);
    pl_kv_get_stats(mw, &before[1]);
    int32_t max_new = pl_rng_below(&s->rng, 3) ? n : 1 + (int32_t)pl_rng_below(&s->rng, (uint64_t)n);
    PL_TRY(pl_kv_allocate_prompt_pair(m, mw, &q->t, &q->tw, q->tok, n, q->tag, q->tag_w, max_new,
                                      n_cached));
    assert_true(q->t.global && !q->tw.global);
    assert_int_equal(q->t.n_tokens, q->tw.n_tokens);
    int32_t upto = n - *n_cached > max_new ? *n_cached + max_new : n;
    assert_int_equal(q->t.n_tokens, upto);
    pl_kv_get_stats(m, &after[0]);
    pl_kv_get_stats(mw, &after[1]);
    /* exactly the new blocks and the free hits leave the free count (their ref is 1 now; a
     * hit another table held has ref > 1): at most the admission bound */
    int32_t taken[2] = {0, 0};
    for (int j = 0; j < 2; j++) {
        pl_block_table *t = j ? &q->tw : &q->t;
        pl_kv_manager *mj = &s->pool[j]->m;
        for (int32_t i = t->n_dropped; i < t->n_blocks; i++)
            taken[j] += mj->pool.blocks[t->blocks[i]].ref == 1;
    }
    const int32_t bound_w = pl_kv_blocks_for(m, upto) - pl_kv_behind_window(mw, *n_cached);
    if (m == mw) {
        assert_int_equal(before[0].blocks_free - after[0].blocks_free, taken[0] + taken[1]);
        assert_true(taken[0] + taken[1] <= pl_kv_blocks_for(m, upto) + bound_w);
    } else { /* each pool its own table's */
        assert_int_equal(before[0].blocks_free - after[0].blocks_free, taken[0]);
        assert_int_equal(before[1].blocks_free - after[1].blocks_free, taken[1]);
        assert_true(taken[0] <= pl_kv_blocks_for(m, upto) && taken[1] <= bound_w);
    }
    if (upto < n) { /* the rest of the prompt, as the scheduler's lazy prefill appends it */
        s->pair_chunks++;
        pl_status st = PL_OK;
        for (int j = 0; j < 2 && st == PL_OK; j++) {
            pl_block_table *t = j ? &q->tw : &q->t;
            pl_block_copy cow;
            st = pl_kv_append_slots(&s->pool[j]->m, t, n - upto, &cow);
            assert_true(cow.src < 0); /* a fresh table's last block is its own */
        }
        if (st != PL_OK) { /* (the first part's new blocks may have evicted cached ones) */
            pl_kv_free_table(m, &q->t);
            pl_kv_free_table(mw, &q->tw);
            s->evicted = 1;
            return st;
        }
    }
    return PL_OK;
}

/* Admit q->tok[0..n) as a prompt; compute the uncached part; commit. */
static void sim_admit(sim *s, int k, int32_t n) {
    sim_seq *q = &s->seq[k];
    pl_kv_manager *m = &s->pool[0]->m;
    pl_alloc_status can = pl_kv_can_allocate(m, n);
    pl_kv_stats before, after, before_w, after_w;
    pl_kv_get_stats(m, &before);
    pl_kv_get_stats(&s->pool[1]->m, &before_w);
    int32_t n_cached = -1, probed;
    pl_status st;
    s->evicted = 0;
    if (s->groups >= 2) {
        st = pair_allocate(s, q, n, &n_cached, &probed);
    } else {
        probed = pl_kv_probe_prefix(m, q->tok, n, q->salt);
        st = pl_kv_allocate_prompt(m, &q->t, q->tok, n, q->salt, &n_cached);
        if (can == PL_ALLOC_OK) assert_int_equal(st, PL_OK);
    }
    if (st != PL_OK) {
        assert_int_equal(st, PL_ERR_CAPACITY);
        pl_kv_get_stats(m, &after);
        pl_kv_get_stats(&s->pool[1]->m, &after_w);
        assert_int_equal(after.blocks_free, before.blocks_free);
        assert_int_equal(after_w.blocks_free, before_w.blocks_free);
        if (!s->evicted) assert_int_equal(after.blocks_cached, before.blocks_cached);
        if (!s->evicted) assert_int_equal(after_w.blocks_cached, before_w.blocks_cached);
        assert_false(q->t.live || q->tw.live);
        q->live = 0;
        s->capacity_fails++;
        return;
    }
    q->live = 1;
    q->group = s->next_group++;
    assert_true(n_cached % BS == 0 && n_cached <= n - 1);
    assert_int_equal(n_cached, probed);
    pl_block_table *tabs[2];
    uint64_t tags[2];
    for (int j = 0, nt = seq_tables(s, q, tabs, tags); j < nt; j++) {
        pl_block_table *t = tabs[j];
        /* Hits the first computed position's window does not reach are not taken. */
        assert_int_equal(t->n_dropped, exp_dropped(s, t, n_cached));
        for (int32_t i = 0; i < t->n_dropped; i++) assert_int_equal(t->blocks[i], PL_KV_NO_BLOCK);
        /* A prefix-cache hit returns blocks that hold exactly the prompt's tokens. */
        for (int32_t pos = t->n_dropped * BS; pos < n_cached; pos++)
            assert_int_equal(s->pool[j]->shadow[pl_block_table_slot(t, pos)],
                             SALTED(q->tok[pos], tags[j]));
    }
    if (n_cached > 0) s->hits++;
    for (int32_t pos = n_cached; pos < n; pos++) sim_write(s, q, pos);
    assert_int_equal(pl_kv_commit(m, &q->t, q->tok, n), PL_OK);
    if (s->groups >= 2) assert_int_equal(pl_kv_commit(&s->pool[1]->m, &q->tw, q->tok, n), PL_OK);
}

static void op_new(sim *s) {
    int k = sim_free_slot(s);
    if (k < 0) return;
    sim_seq *q = &s->seq[k];
    int32_t n = 0;
    if (pl_rng_below(&s->rng, 5) > 0) { /* most prompts start with a shared prefix */
        const int32_t *p = s->prefix[pl_rng_below(&s->rng, P_PREFIXES)];
        int32_t len = (int32_t)pl_rng_below(&s->rng, P_PREFIX_LEN + 1);
        memcpy(q->tok, p, (size_t)len * sizeof *p);
        n = len;
    }
    q->t.global = s->groups >= 2 || (s->groups && pl_rng_below(&s->rng, 2));
    uint64_t salt = pl_rng_below(&s->rng, 5) == 0;
    q->tag = SEQ_TAG(salt, q->t.global);
    q->salt = q->tag; /* the group is part of the key */
    q->tw.global = 0;
    q->tag_w = SEQ_TAG(salt, 0);
    int32_t suffix = 1 + (int32_t)pl_rng_below(&s->rng, 8);
    for (int32_t i = 0; i < suffix; i++) q->tok[n++] = (int32_t)pl_rng_below(&s->rng, 3);
    sim_admit(s, k, n);
}

/* The engine's recompute preemption: drop the table and admit the whole sequence again. */
static void op_recompute(sim *s) {
    int k = sim_pick(s, 0);
    if (k < 0) return;
    int32_t n = s->seq[k].t.n_tokens;
    sim_drop(s, k);
    sim_admit(s, k, n);
    s->recomputes++;
}

/* The live tables of k's group in pool p (every table when there is one pool). */
static void sim_group(sim *s, int k, int p, pl_block_table **out, int *n) {
    *n = 0;
    for (int i = 0; i < P_SEQS; i++)
        if (s->seq[i].live && s->seq[i].group == s->seq[k].group) {
            if (p == 0) out[(*n)++] = &s->seq[i].t;
            if (s->groups >= 2 && s->pool[1] == &s->pools[p]) out[(*n)++] = &s->seq[i].tw;
        }
}

/* The engine's copies of a swap's pairs in pool sp. */
static void sim_copy(sim_pool *sp, const pl_block_copy *map, int32_t n_map, int out) {
    for (int32_t i = 0; i < n_map; i++)
        if (out) memcpy(sp->swap_shadow + map[i].dst * BS, sp->shadow + map[i].src * BS,
                        BS * sizeof(int32_t));
        else memcpy(sp->shadow + map[i].dst * BS, sp->swap_shadow + map[i].src * BS,
                    BS * sizeof(int32_t));
}

/* Swap k's group out (out = 1) or in. One pool: the manager's call, which must succeed when
 * its can_* said OK (swap out: exactly then). Two pools: every pool its tables, all or none,
 * each pool asked first, as kv/cache.c does. */
static void sim_swap(sim *s, int k, int out) {
    pl_block_table *g[2][2 * P_SEQS];
    int n[2] = {0, 0};
    pl_alloc_status can[2];
    for (int p = 0; p < s->n_pools; p++) {
        sim_group(s, k, p, g[p], &n[p]);
        can[p] = out ? pl_kv_can_swap_out(&s->pools[p].m, g[p], n[p])
                     : pl_kv_can_swap_in(&s->pools[p].m, g[p], n[p]);
    }
    if (s->n_pools == 2 && (can[0] != PL_ALLOC_OK || can[1] != PL_ALLOC_OK)) return;
    for (int p = 0; p < s->n_pools; p++) {
        sim_pool *sp = &s->pools[p];
        pl_block_copy map[64];
        int32_t n_map = 0;
        pl_status st = out ? pl_kv_swap_out(&sp->m, g[p], n[p], map, 64, &n_map)
                           : pl_kv_swap_in(&sp->m, g[p], n[p], map, 64, &n_map);
        if (out) assert_int_equal(st == PL_OK, can[p] == PL_ALLOC_OK);
        else if (can[p] == PL_ALLOC_OK) assert_int_equal(st, PL_OK);
        if (st != PL_OK) return; /* (one pool only: two were both OK) */
        sim_copy(sp, map, n_map, out);
    }
    if (out) s->swap_outs++;
    else s->swap_ins++;
}

static void op_swap_out(sim *s) {
    int k = sim_pick(s, 0);
    if (k >= 0) sim_swap(s, k, 1);
}

static void op_swap_in(sim *s) {
    int k = sim_pick(s, 1);
    if (k >= 0) sim_swap(s, k, 0);
}

static void op_fork(sim *s) {
    int k = sim_pick(s, 0), c = sim_free_slot(s);
    if (k < 0 || c < 0) return;
    assert_int_equal(pl_kv_fork(&s->pool[0]->m, &s->seq[k].t, &s->seq[c].t), PL_OK);
    if (s->groups >= 2) {
        assert_int_equal(pl_kv_fork(&s->pool[1]->m, &s->seq[k].tw, &s->seq[c].tw), PL_OK);
        s->seq[c].tag_w = s->seq[k].tag_w;
        assert_false(s->seq[c].tw.global);
    }
    assert_int_equal(s->seq[c].t.global, s->seq[k].t.global);
    memcpy(s->seq[c].tok, s->seq[k].tok, sizeof s->seq[k].tok);
    s->seq[c].live = 1;
    s->seq[c].group = s->seq[k].group;
    s->seq[c].salt = s->seq[k].salt;
    s->seq[c].tag = s->seq[k].tag;
    assert_int_equal(s->seq[c].t.extra_key, s->seq[k].salt);
    s->forks++;
}

/* Slots for n_new more tokens in every table of q, with the engine's copy-on-write applied to
 * the shadow; if a table cannot grow, the ones already grown are rolled back (all or none).
 * check: the outcome must match can_append. */
static pl_status sim_append(sim *s, sim_seq *q, int32_t n_new, bool check, pl_block_copy *cows) {
    pl_block_table *tabs[2];
    uint64_t tags[2];
    int nt = seq_tables(s, q, tabs, tags);
    int32_t n0 = q->t.n_tokens;
    for (int j = 0; j < nt; j++) {
        pl_kv_manager *m = &s->pool[j]->m;
        int32_t *shadow = s->pool[j]->shadow;
        pl_block_table *t = tabs[j];
        int32_t last = t->blocks[t->n_blocks - 1]; /* released only when full (n0 % BS == 0) */
        bool expect_cow = n0 % BS != 0 && m->pool.blocks[last].ref > 1;
        if (last == PL_KV_NO_BLOCK) assert_true(n0 % BS == 0 && s->W > 0 && !t->global);
        bool can = pl_kv_can_append(m, t, n_new);
        pl_block_copy cow;
        pl_status st = pl_kv_append_slots(m, t, n_new, &cow);
        if (cows) cows[j] = cow;
        if (check) assert_int_equal(st == PL_OK, can);
        if (st != PL_OK) {
            assert_int_equal(t->n_tokens, n0);
            for (int i = 0; i < j; i++)
                assert_int_equal(pl_kv_truncate(&s->pool[i]->m, tabs[i], n0), PL_OK);
            return st;
        }
        assert_int_equal(cow.src >= 0, expect_cow);
        if (cow.src >= 0) { /* the engine's block copy before the write */
            assert_int_equal(cow.src, last);
            memcpy(shadow + cow.dst * BS, shadow + cow.src * BS, BS * sizeof(int32_t));
            s->cows++;
        }
    }
    return PL_OK;
}

/* One decode step (or a few speculative tokens) of a resident sequence. */
static void op_append(sim *s) {
    int k = sim_pick(s, 0);
    if (k < 0) return;
    sim_seq *q = &s->seq[k];
    pl_kv_manager *m = &s->pool[0]->m;
    int32_t n_new = pl_rng_below(&s->rng, 5) ? 1 : 1 + (int32_t)pl_rng_below(&s->rng, 4);
    int32_t n0 = q->t.n_tokens;
    if (n0 + n_new > P_MAXTOK) { /* reached max length: finished */
        sim_free(s, k);
        return;
    }
    pl_status st = sim_append(s, q, n_new, true, NULL);
    if (st != PL_OK) { /* out of blocks: preempt this sequence's group, by swap or recompute */
        assert_int_equal(st, PL_ERR_CAPACITY);
        assert_int_equal(q->t.n_tokens, n0);
        s->capacity_fails++;
        if (pl_rng_below(&s->rng, 2)) op_swap_out(s);
        else sim_free(s, k);
        return;
    }
    for (int32_t pos = n0; pos < n0 + n_new; pos++) {
        q->tok[pos] = (int32_t)pl_rng_below(&s->rng, 3);
        sim_write(s, q, pos);
    }
    assert_int_equal(pl_kv_commit(m, &q->t, q->tok, q->t.n_tokens), PL_OK);
    if (s->groups >= 2)
        assert_int_equal(pl_kv_commit(&s->pool[1]->m, &q->tw, q->tok, q->tw.n_tokens), PL_OK);
}

/* Speculative decoding (issue 15): slots for 1..4 proposals are appended, the proposals are
 * "computed" (written), then a random number of them is accepted and the table is rolled back to
 * the accepted length; only accepted tokens are committed. Rejected proposals carry ids no real
 * token has, so finding one in a hashed block would mean a rejected token reached the cache. */
enum { P_REJECTED = 5000 };

static void op_speculate(sim *s) {
    int k = sim_pick(s, 0);
    if (k < 0) return;
    sim_seq *q = &s->seq[k];
    pl_kv_manager *m = &s->pool[0]->m;
    int32_t n0 = q->t.n_tokens, n_spec = 1 + (int32_t)pl_rng_below(&s->rng, 4);
    if (n0 + n_spec > P_MAXTOK) return;
    pl_kv_stats before[2];
    for (int p = 0; p < s->n_pools; p++) pl_kv_get_stats(&s->pools[p].m, &before[p]);
    pl_block_table *tabs[2];
    uint64_t tags[2];
    int nt = seq_tables(s, q, tabs, tags);
    int32_t need = 0;
    for (int j = 0; j < nt; j++) need += pl_kv_append_blocks_needed(&s->pool[j]->m, tabs[j], n_spec);
    pl_block_copy cows[2];
    if (sim_append(s, q, n_spec, false, cows) != PL_OK) {
        s->capacity_fails++;
        return; /* the engine then runs the sequence without speculation */
    }
    int32_t n_acc = (int32_t)pl_rng_below(&s->rng, (uint64_t)n_spec + 1);
    for (int32_t pos = n0; pos < n0 + n_spec; pos++) {
        q->tok[pos] = pos < n0 + n_acc ? (int32_t)pl_rng_below(&s->rng, 3) : P_REJECTED + pos;
        sim_write(s, q, pos);
    }
    int32_t n_keep = n0 + n_acc;
    for (int j = 0; j < nt; j++) {
        assert_int_equal(pl_kv_truncate(&s->pool[j]->m, tabs[j], n_keep), PL_OK);
        assert_int_equal(tabs[j]->n_tokens, n_keep);
    }
    /* Exactly the blocks the kept tokens need stayed taken (plus the copy-on-write, which
     * replaced a shared block): no block leaked, none freed twice (the pool check). */
    int32_t kept_new = pl_kv_blocks_for(m, n_keep) - pl_kv_blocks_for(m, n0), expect[2] = {0, 0};
    assert_true(need >= nt * kept_new);
    for (int j = 0; j < nt; j++) {
        const pl_kv_manager *mj = &s->pool[j]->m;
        expect[s->pool[j] - s->pools] +=
            kept_new + (cows[j].src >= 0 && mj->pool.blocks[cows[j].src].ref > 0 ? 1 : 0);
    }
    for (int p = 0; p < s->n_pools; p++) {
        pl_kv_stats after;
        pl_kv_get_stats(&s->pools[p].m, &after);
        assert_int_equal(before[p].blocks_free - after.blocks_free, expect[p]);
    }
    for (int j = 0; j < nt; j++)
        assert_int_equal(pl_kv_commit(&s->pool[j]->m, tabs[j], q->tok, n_keep), PL_OK);
    if (n_acc < n_spec) s->rollbacks++;
    /* No rejected token in the prefix cache. */
    for (int p = 0; p < s->n_pools; p++) {
        const pl_kv_manager *mp = &s->pools[p].m;
        for (int32_t b = 0; b < mp->pool.num_blocks; b++)
            if (mp->pool.blocks[b].hashed)
                for (int32_t i = 0; i < BS; i++)
                    if (mp->pool.tokens[b * BS + i] >= P_REJECTED)
                        fail_msg("rejected token %d is in hashed block %d",
                                 (int)mp->pool.tokens[b * BS + i], (int)b);
    }
    /* Invalid rollbacks are refused and change nothing. */
    for (int j = 0; j < nt; j++) {
        pl_block_table *t = tabs[j];
        pl_kv_manager *mj = &s->pool[j]->m;
        assert_int_equal(pl_kv_truncate(mj, t, n_keep + 1), PL_ERR_INVALID_ARG);
        if (t->n_registered > 0)
            assert_int_equal(pl_kv_truncate(mj, t, t->n_registered * BS - 1), PL_ERR_INVALID_ARG);
        if (t->n_dropped > 0) /* behind the window: those K/V are gone */
            assert_int_equal(pl_kv_truncate(mj, t, t->n_dropped * BS - 1), PL_ERR_INVALID_ARG);
        assert_int_equal(t->n_tokens, n_keep);
    }
}

static uint64_t env_u64(const char *name, uint64_t dflt) {
    const char *v = test_env(name);
    return v && *v ? strtoull(v, NULL, 0) : dflt;
}

static void run_property_groups(int caching, uint64_t default_seed, long default_ops, int32_t W,
                                int groups) {
    uint64_t seed = env_u64("PL_KV_SEED", default_seed);
    long ops = (long)env_u64("PL_KV_OPS", (uint64_t)default_ops);
    static const char *const mode[] = {"one", "mixed tables", "a table of each per sequence",
                                       "a table of each per sequence, a pool per layer kind"};
    printf("kv property test: caching %d, window %d, groups: %s, PL_KV_SEED=%" PRIu64
           " PL_KV_OPS=%ld\n", caching, (int)W, mode[groups], seed, ops);
    fflush(stdout);
    sim *s = calloc(1, sizeof *s);
    assert_non_null(s);
    pl_kv_manager_config c = {
        .block_size = BS,
        .num_blocks = 40,
        .num_swap_blocks = 24,
        .max_blocks_per_seq = P_MAXB,
        .watermark = 0.05,
        .enable_prefix_caching = caching,
        .hash_seed = seed,
        .sliding_window = W,
    };
    s->W = W;
    s->groups = groups;
    s->n_pools = groups == 3 ? 2 : 1;
    for (int p = 0; p < s->n_pools; p++) {
        pl_kv_manager_config cp = c;
        if (p == 1) { /* the window pool: smaller, no watermark, as kv/cache.c makes it */
            cp.num_blocks = 24;
            cp.num_swap_blocks = 12;
            cp.watermark = 0;
        }
        sim_pool *sp = &s->pools[p];
        assert_int_equal(pl_kv_manager_init(&sp->m, &cp), PL_OK);
        sp->shadow = malloc((size_t)cp.num_blocks * BS * sizeof(int32_t));
        sp->swap_shadow = malloc((size_t)cp.num_swap_blocks * BS * sizeof(int32_t));
        sp->cnt_p = malloc((size_t)cp.num_blocks * sizeof(int32_t));
        sp->cnt_s = malloc((size_t)cp.num_swap_blocks * sizeof(int32_t));
        sp->fill = malloc((size_t)cp.num_blocks * sizeof(int32_t));
        assert_true(sp->shadow && sp->swap_shadow && sp->cnt_p && sp->cnt_s && sp->fill);
        memset(sp->shadow, 0xff, (size_t)cp.num_blocks * BS * sizeof(int32_t));
        memset(sp->swap_shadow, 0xff, (size_t)cp.num_swap_blocks * BS * sizeof(int32_t));
    }
    s->pool[0] = &s->pools[0];
    s->pool[1] = &s->pools[s->n_pools - 1];
    pl_rng_seed(&s->rng, seed);
    /* Prefixes 0 and 1 share their first 6 tokens, so chains diverge mid-block too. */
    for (int p = 0; p < P_PREFIXES; p++)
        for (int i = 0; i < P_PREFIX_LEN; i++)
            s->prefix[p][i] = (p == 1 && i < 6) ? s->prefix[0][i] : 100 + (int32_t)pl_rng_below(&s->rng, 50);
    for (long step = 0; step < ops; step++) {
        uint64_t r = pl_rng_below(&s->rng, 100);
        if (r < 14) op_new(s);
        else if (r < 50) op_append(s);
        else if (r < 62) op_speculate(s);
        else if (r < 70) op_fork(s);
        else if (r < 78) {
            int k = (int)pl_rng_below(&s->rng, P_SEQS);
            if (s->seq[k].live) sim_free(s, k);
        } else if (r < 84) op_swap_out(s);
        else if (r < 94) op_swap_in(s);
        else op_recompute(s);
        sim_check(s, (int)step);
    }
    pl_kv_stats st, stw;
    pl_kv_get_stats(&s->pools[0].m, &st);
    pl_kv_get_stats(&s->pool[1]->m, &stw);
    if (s->n_pools == 2) { /* the window pool's releases */
        st.window_released += stw.window_released;
        st.window_freed += stw.window_freed;
        st.prefix_hits += stw.prefix_hits;
    }
    printf("  hits %ld, cows %ld, swap out %ld / in %ld, capacity fails %ld, recomputes %ld, forks "
           "%ld, frees %ld, rollbacks %ld, evictions %" PRIu64 ", dedups %" PRIu64 ", prefix hits %" PRIu64
           " of %" PRIu64 " tokens\n",
           s->hits, s->cows, s->swap_outs, s->swap_ins, s->capacity_fails, s->recomputes, s->forks,
           s->frees, s->rollbacks, st.evictions, st.dedups, st.prefix_hits, st.prefix_queries);
    printf("  window: %" PRIu64 " table entries released, %" PRIu64 " blocks back to the pool; "
           "pair prompts in two parts %ld\n", st.window_released, st.window_freed, s->pair_chunks);
    if (ops >= 10000) { /* coverage: every mechanism was exercised */
        assert_true(s->cows > 0 && s->swap_outs > 0 && s->swap_ins > 0);
        /* a window of a couple of tokens frees so much that the pool never runs out */
        if (W == 0 || W > BS) assert_true(s->capacity_fails > 0);
        assert_true(s->forks > 0 && s->recomputes > 0 && s->rollbacks > 0);
        if (caching) assert_true(s->hits > 0 && st.evictions > 0 && st.dedups > 0);
        else assert_true(s->hits == 0 && st.prefix_hits == 0);
        if (W > 0) assert_true(st.window_freed > 0 && st.window_released >= st.window_freed);
        else assert_true(st.window_released == 0);
    }
    /* Freeing everything returns every block. */
    for (int k = 0; k < P_SEQS; k++)
        if (s->seq[k].live) sim_free(s, k);
    sim_check(s, (int)ops);
    for (int p = 0; p < s->n_pools; p++) {
        sim_pool *sp = &s->pools[p];
        pl_kv_get_stats(&sp->m, &st);
        assert_int_equal(st.blocks_free, st.blocks_total);
        assert_int_equal(st.blocks_used, 0);
        assert_int_equal(st.swap_used, 0);
        assert_int_equal(st.tokens_stored, 0);
        assert_int_equal(st.n_tables, 0);
        pl_kv_manager_destroy(&sp->m);
        free(sp->shadow);
        free(sp->swap_shadow);
        free(sp->cnt_p);
        free(sp->cnt_s);
        free(sp->fill);
    }
    free(s);
}

static void run_property(int caching, uint64_t default_seed, long default_ops, int32_t W) {
    run_property_groups(caching, default_seed, default_ops, W, 0);
}

static void test_property_caching(void **state) {
    (void)state;
    run_property(1, 20240601, 100000, 0);
}

static void test_property_no_caching(void **state) {
    (void)state;
    run_property(0, 777, 20000, 0);
}

/* Sliding windows: shorter than a block, a few blocks long, not a multiple of the block. */
static void test_property_window(void **state) {
    (void)state;
    run_property(1, 99, 100000, 7);
    run_property(1, 98, 20000, 2);
    run_property(0, 97, 20000, 13);
}

/* KV cache groups (a mixed model's window and global layers): tables of both groups share one
 * pool; only the window group's release, and no hit crosses groups. */
static void test_property_groups(void **state) {
    (void)state;
    run_property_groups(1, 96, 100000, 7, 1);
    run_property_groups(0, 95, 20000, 13, 1);
    /* pairs: each sequence's two tables kept in step, as the engine must */
    run_property_groups(1, 94, 100000, 7, 2);
    run_property_groups(0, 93, 20000, 13, 2);
}

/* Layer kinds (kv/cache.h): each sequence's global table in the full pool and its window table
 * in a smaller pool of its own, kept in step; both pools' invariants after every operation. */
static void test_property_kinds(void **state) {
    (void)state;
    run_property_groups(1, 92, 100000, 7, 3);
    run_property_groups(0, 91, 20000, 13, 3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_property_caching),
        cmocka_unit_test(test_property_no_caching),
        cmocka_unit_test(test_property_window),
        cmocka_unit_test(test_property_groups),
        cmocka_unit_test(test_property_kinds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
