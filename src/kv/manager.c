/* kv/manager — see manager.h for the operations, the invariants and the differences from vLLM. */
#include "kv/manager.h"

#include <stdlib.h>
#include <string.h>

/* ---- small helpers ------------------------------------------------------------------------- */

int32_t pl_kv_blocks_for(const pl_kv_manager *m, int32_t n_tokens) {
    int32_t bs = m->cfg.block_size;
    return n_tokens <= 0 ? 0 : (int32_t)(((int64_t)n_tokens + bs - 1) / bs);
}

static int32_t min_i32(int32_t a, int32_t b) { return a < b ? a : b; }

/* Token slots of a table with n_tokens that fall into its block i. */
static int32_t fill_of(int32_t bs, int32_t n_tokens, int32_t i) {
    return min_i32(bs, n_tokens - i * bs);
}

static void set_fill(pl_kv_manager *m, int32_t b, int32_t f) {
    m->tokens_stored += f - m->fill[b];
    m->fill[b] = f;
}

/* A table takes a cached block found by hash (free or used). */
static void take_hit(pl_kv_manager *m, int32_t b) {
    bool was_free = m->pool.blocks[b].ref == 0;
    pl_block_pool_touch(&m->pool, b);
    if (was_free) set_fill(m, b, m->cfg.block_size);
}

/* A table drops primary block b. */
static void drop_primary(pl_kv_manager *m, int32_t b) {
    pl_block_pool_release(&m->pool, b);
    if (m->pool.blocks[b].ref == 0) set_fill(m, b, 0);
}

static bool caching(const pl_kv_manager *m) { return m->cfg.enable_prefix_caching != 0; }
static bool contiguous(const pl_kv_manager *m) { return m->cfg.policy != PL_KV_POLICY_PAGED; }
static bool vattn(const pl_kv_manager *m) { return m->cfg.policy == PL_KV_POLICY_VATTN; }

/* Blocks that can still be taken: the free queue, or (vattention) the physical pages not held. */
static int32_t free_blocks(const pl_kv_manager *m) {
    return vattn(m) ? m->cfg.num_blocks - (m->pool.num_blocks - m->pool.n_free - m->shared_pages)
                    : m->pool.n_free;
}

/* vattention: the table's slot, and its i-th (virtual) block taken off the free queue. */
int32_t pl_kv_slot_of(const pl_kv_manager *m, const pl_block_table *t) {
    return t->blocks[0] / m->cfg.max_blocks_per_seq;
}

static int32_t vattn_block(pl_kv_manager *m, int32_t slot, int32_t i) {
    int32_t b = slot * m->cfg.max_blocks_per_seq + i;
    pl_block_pool_touch(&m->pool, b); /* free and hash-less: off the queue, ref 1 */
    return b;
}

int32_t pl_kv_behind_window(const pl_kv_manager *m, int32_t pos) {
    int32_t W = m->cfg.sliding_window;
    if (W <= 0 || pos - W + 1 <= 0) return 0;
    return (pos - W + 1) / m->cfg.block_size;
}

/* pl_kv_behind_window for table t: 0 for a global group's table (see manager.h). */
static int32_t table_behind(const pl_kv_manager *m, const pl_block_table *t, int32_t pos) {
    return t->global ? 0 : pl_kv_behind_window(m, pos);
}

/* Release t's blocks behind the window of a query at position pos (see manager.h). */
static void slide(pl_kv_manager *m, pl_block_table *t, int32_t pos) {
    int32_t upto = table_behind(m, t, pos);
    if (upto > t->n_blocks) upto = t->n_blocks;
    for (int32_t i = t->n_dropped; i < upto; i++) {
        int32_t b = t->blocks[i];
        drop_primary(m, b);
        m->window_released++;
        m->window_freed += m->pool.blocks[b].ref == 0;
        t->blocks[i] = PL_KV_NO_BLOCK;
    }
    if (upto > t->n_dropped) t->n_dropped = upto;
}

int32_t pl_kv_held_blocks_max(const pl_kv_manager *m, int32_t n_tokens, int32_t k_spec) {
    int32_t all = pl_kv_blocks_for(m, n_tokens);
    int32_t W = m->cfg.sliding_window;
    if (W <= 0) return all;
    /* blocks floor((c - W + 1) / bs) .. floor((c + k) / bs): at most (W - 1 + k) / bs + 2 */
    int64_t win = ((int64_t)W - 1 + (k_spec > 0 ? k_spec : 0)) / m->cfg.block_size + 2;
    return win < all ? (int32_t)win : all;
}

/* Empty t (its group survives: it belongs to the caller's sequence, not to one allocation). */
static void table_reset(pl_block_table *t) {
    int global = t->global;
    memset(t, 0, sizeof *t);
    t->global = global;
}

static pl_status table_arrays(pl_kv_manager *m, pl_block_table *t) {
    int32_t cap = m->cfg.max_blocks_per_seq;
    table_reset(t);
    t->blocks = malloc((size_t)cap * sizeof *t->blocks);
    t->hashes = caching(m) ? malloc((size_t)cap * sizeof *t->hashes) : NULL;
    if (!t->blocks || (caching(m) && !t->hashes)) {
        free(t->blocks);
        free(t->hashes);
        table_reset(t);
        return pl_fail(PL_ERR_NOMEM, "kv manager: cannot allocate a block table of %d blocks", (int)cap);
    }
    t->capacity = cap;
    t->block_size = m->cfg.block_size;
    return PL_OK;
}

static void table_arrays_free(pl_block_table *t) {
    free(t->blocks);
    free(t->hashes);
    table_reset(t);
}

/* ---- life cycle ---------------------------------------------------------------------------- */

/* The refusal of a config count below its minimum. */
static pl_status below_min(const char *field, int min, int32_t got) {
    return pl_fail(PL_ERR_INVALID_ARG, "kv manager: %s must be >= %d, got %d", field, min, (int)got);
}

pl_status pl_kv_manager_init(pl_kv_manager *m, const pl_kv_manager_config *cfg) {
    memset(m, 0, sizeof *m);
    if (!cfg) return pl_fail(PL_ERR_INVALID_ARG, "kv manager: no config");
    int32_t max_bs = cfg->policy == PL_KV_POLICY_VATTN ? 1 << 24 : 4096; /* vattention: a page */
    if (cfg->block_size < 1 || cfg->block_size > max_bs)
        return pl_fail(PL_ERR_INVALID_ARG, "kv manager: block_size must be in [1, %d], got %d",
                       (int)max_bs, (int)cfg->block_size);
    if (cfg->num_blocks < 1) return below_min("num_blocks", 1, cfg->num_blocks);
    if (cfg->num_swap_blocks < 0) return below_min("num_swap_blocks", 0, cfg->num_swap_blocks);
    if (cfg->max_blocks_per_seq < 1 || (int64_t)cfg->max_blocks_per_seq * cfg->block_size > INT32_MAX)
        return pl_fail(PL_ERR_INVALID_ARG,
                       "kv manager: max_blocks_per_seq must be >= 1 and hold < 2^31 tokens, got %d",
                       (int)cfg->max_blocks_per_seq);
    if (cfg->policy < PL_KV_POLICY_PAGED || cfg->policy > PL_KV_POLICY_VATTN)
        return pl_fail(PL_ERR_INVALID_ARG, "kv manager: unknown allocation policy %d", (int)cfg->policy);
    if (cfg->policy != PL_KV_POLICY_PAGED && (cfg->enable_prefix_caching || cfg->num_swap_blocks))
        return pl_fail(PL_ERR_INVALID_ARG, "kv manager: a contiguous layout shares and swaps "
                       "nothing: prefix caching and the swap pool must be off");
    if (cfg->sliding_window < 0) return below_min("sliding_window", 0, cfg->sliding_window);
    if (cfg->max_seq_tokens < 0) return below_min("max_seq_tokens", 0, cfg->max_seq_tokens);
    if (!(cfg->watermark >= 0.0 && cfg->watermark < 1.0))
        return pl_fail(PL_ERR_INVALID_ARG, "kv manager: watermark must be in [0, 1), got %g",
                       cfg->watermark);
    int64_t pool_blocks = cfg->num_blocks;
    if (cfg->policy == PL_KV_POLICY_VATTN) {
        if (cfg->n_slots < 1) return below_min("n_slots", 1, cfg->n_slots);
        pool_blocks = (int64_t)cfg->n_slots * cfg->max_blocks_per_seq;
        if (pool_blocks > INT32_MAX / 2)
            return pl_fail(PL_ERR_INVALID_ARG, "kv manager: %d slots x %d pages exceed 2^30 blocks",
                           (int)cfg->n_slots, (int)cfg->max_blocks_per_seq);
    }
    m->cfg = *cfg;
    if (cfg->policy != PL_KV_POLICY_PAGED) m->cfg.sliding_window = 0; /* see manager.h */
    m->watermark_blocks = (int32_t)(cfg->watermark * cfg->num_blocks);
    /* The pool's block size only sizes prefix hashing, which vattention never does (its pages
     * may hold more tokens than a hashed block may). */
    PL_TRY(pl_block_pool_init(&m->pool, (int32_t)pool_blocks,
                              cfg->policy == PL_KV_POLICY_VATTN ? 1 : cfg->block_size,
                              cfg->enable_prefix_caching, cfg->hash_seed));
    pl_status st = PL_OK;
    if (cfg->num_swap_blocks > 0)
        st = pl_block_pool_init(&m->swap, cfg->num_swap_blocks, cfg->block_size, 0, 0);
    if (st != PL_OK) {
        pl_block_pool_destroy(&m->pool);
        pl_error_prefix("kv manager: swap pool");
        return st;
    }
    int32_t n_remap = pool_blocks > cfg->num_swap_blocks ? (int32_t)pool_blocks : cfg->num_swap_blocks;
    m->fill = calloc((size_t)pool_blocks, sizeof *m->fill);
    m->remap = malloc((size_t)n_remap * sizeof *m->remap);
    if (!m->fill || !m->remap) {
        pl_kv_manager_destroy(m);
        return pl_fail(PL_ERR_NOMEM, "kv manager: cannot allocate bookkeeping for %d blocks",
                       (int)n_remap);
    }
    for (int32_t i = 0; i < n_remap; i++) m->remap[i] = -1;
    return PL_OK;
}

void pl_kv_manager_destroy(pl_kv_manager *m) {
    pl_block_pool_destroy(&m->pool);
    if (m->swap.blocks) pl_block_pool_destroy(&m->swap);
    free(m->fill);
    free(m->remap);
    memset(m, 0, sizeof *m);
}

/* ---- admission and prompts ----------------------------------------------------------------- */

/* Walk the prompt's hash chain without changing anything: the number of leading full blocks
 * cached (at most (n - 1) / block_size, so the last token is always computed). blocks/hashes
 * (optional) receive the hits; *hits_free counts those that are on the free queue, from the
 * free_from-th hit on. */
static int32_t prefix_walk_from(pl_kv_manager *m, const int32_t *token_ids, int32_t n,
                                uint64_t extra_key, int32_t *blocks, pl_block_hash *hashes,
                                int32_t *hits_free, int32_t free_from) {
    int32_t bs = m->cfg.block_size, hits = 0, parent = -1, max_hits = (n - 1) / bs;
    pl_block_hash ph = pl_block_hash_root;
    if (hits_free) *hits_free = 0;
    if (!caching(m)) return 0;
    while (hits < max_hits) {
        const int32_t *tok = token_ids + (size_t)hits * bs;
        pl_block_hash h = pl_block_pool_hash(&m->pool, ph, extra_key, tok);
        int32_t b = pl_block_pool_lookup(&m->pool, h, parent, extra_key, tok);
        if (b < 0) break;
        if (blocks) blocks[hits] = b;
        if (hashes) hashes[hits] = h;
        if (hits_free && hits >= free_from) *hits_free += m->pool.blocks[b].ref == 0;
        hits++;
        parent = b;
        ph = h;
    }
    return hits;
}

static int32_t prefix_walk(pl_kv_manager *m, const int32_t *token_ids, int32_t n,
                           uint64_t extra_key, int32_t *blocks, pl_block_hash *hashes,
                           int32_t *hits_free) {
    return prefix_walk_from(m, token_ids, n, extra_key, blocks, hashes, hits_free, 0);
}

int32_t pl_kv_prompt_blocks_needed(pl_kv_manager *m, const int32_t *token_ids, int32_t n,
                                   uint64_t extra_key, int32_t n_given) {
    int32_t total = pl_kv_blocks_for(m, n);
    if (!token_ids || n < 1 || n_given >= total) return 0;
    if (n_given < 0) n_given = 0;
    int32_t hits_free = 0;
    int32_t hits = prefix_walk_from(m, token_ids, n, extra_key, NULL, NULL, &hits_free, n_given);
    int32_t held = hits > n_given ? hits - n_given - hits_free : 0;
    return total - n_given - held;
}

int32_t pl_kv_probe_prefix(pl_kv_manager *m, const int32_t *token_ids, int32_t n, uint64_t extra_key) {
    if (!token_ids || n < 1) return 0;
    return prefix_walk(m, token_ids, n, extra_key, NULL, NULL, NULL) * m->cfg.block_size;
}

pl_alloc_status pl_kv_can_allocate(const pl_kv_manager *m, int32_t n_tokens) {
    int32_t need = pl_kv_blocks_for(m, n_tokens);
    if (n_tokens < 1 || need > m->cfg.max_blocks_per_seq) return PL_ALLOC_NEVER;
    if (m->cfg.num_blocks - need < m->watermark_blocks) return PL_ALLOC_NEVER;
    if (free_blocks(m) - need < m->watermark_blocks) return PL_ALLOC_LATER;
    return PL_ALLOC_OK;
}

static pl_status check_prompt(const pl_kv_manager *m, const pl_block_table *t,
                              const int32_t *token_ids, int32_t n);

/* A vattention table in a free slot: its first blocks. */
pl_status pl_kv_allocate_slot(pl_kv_manager *m, pl_block_table *t, const int32_t *token_ids,
                              int32_t n, int32_t slot, int32_t *n_cached) {
    PL_TRY(check_prompt(m, t, token_ids, n));
    if (n_cached) *n_cached = 0;
    return pl_kv_allocate_slot_shared(m, t, n, slot, 0);
}

pl_status pl_kv_allocate_slot_shared(pl_kv_manager *m, pl_block_table *t, int32_t n, int32_t slot,
                                     int32_t n_shared) {
    int32_t bs = m->cfg.block_size, need = pl_kv_blocks_for(m, n);
    if (!vattn(m) || t->live || n < 1 || need > m->cfg.max_blocks_per_seq || n_shared < 0 ||
        n_shared > need)
        return pl_fail(PL_ERR_INVALID_ARG, "kv allocate_slot: %d tokens, %d of their pages "
                       "shared, a table of %d pages (vattention, empty table)", (int)n,
                       (int)n_shared, (int)m->cfg.max_blocks_per_seq);
    if (slot < 0 || slot >= m->cfg.n_slots ||
        m->pool.blocks[slot * m->cfg.max_blocks_per_seq].ref != 0)
        return pl_fail(PL_ERR_CAPACITY, "kv allocate_prompt: request slot %d is not free",
                       (int)slot);
    if (need - n_shared > free_blocks(m))
        return pl_fail(PL_ERR_CAPACITY, "kv allocate_prompt: %d tokens need %d pages per layer, "
                       "%d free", (int)n, (int)(need - n_shared), (int)free_blocks(m));
    PL_TRY(table_arrays(m, t));
    for (int32_t i = 0; i < need; i++) {
        t->blocks[i] = vattn_block(m, slot, i);
        set_fill(m, t->blocks[i], fill_of(bs, n, i));
    }
    t->n_blocks = need;
    t->n_tokens = n;
    t->live = 1;
    m->n_tables++;
    m->shared_pages += n_shared; /* kv/cache.c sets the count from the slots after the mapping */
    return PL_OK;
}

static pl_status allocate(pl_kv_manager *m, pl_block_table *t, const int32_t *token_ids,
                          int32_t n, uint64_t extra_key, int32_t max_new, int32_t *n_cached);

/* A contiguous table: one run of pl_kv_admit_blocks blocks at the first fit. */
pl_status pl_kv_allocate_reserved(pl_kv_manager *m, pl_block_table *t, const int32_t *token_ids,
                                  int32_t n, int32_t final_tokens, int32_t *n_cached) {
    PL_TRY(check_prompt(m, t, token_ids, n));
    int32_t bs = m->cfg.block_size, need = pl_kv_admit_blocks(m, n, final_tokens);
    if (need > m->cfg.max_blocks_per_seq)
        return pl_fail(PL_ERR_INVALID_ARG, "kv allocate_prompt: reserving %d tokens needs %d "
                       "blocks, a sequence may hold %d", (int)pl_kv_reserve_tokens(m, n, final_tokens),
                       (int)need, (int)m->cfg.max_blocks_per_seq);
    int32_t start = pl_kv_first_fit(m, need);
    if (start < 0)
        return pl_fail(PL_ERR_CAPACITY, "kv allocate_prompt: no run of %d free blocks (%d free, "
                       "longest run %d)", (int)need, (int)m->pool.n_free,
                       (int)pl_kv_largest_free_run(m));
    PL_TRY(table_arrays(m, t));
    for (int32_t i = 0; i < need; i++) {
        int32_t b = start + i;
        pl_block_pool_touch(&m->pool, b); /* free and hash-less: off the queue, ref 1 */
        t->blocks[i] = b;
        if (i * bs < n) set_fill(m, b, fill_of(bs, n, i));
    }
    t->n_blocks = need;
    t->n_tokens = n;
    t->live = 1;
    int64_t until = final_tokens < (int64_t)need * bs ? final_tokens : (int64_t)need * bs;
    t->reserved_future = until > n ? (int32_t)(until - n) : 0;
    m->reserved_future += t->reserved_future;
    m->n_tables++;
    if (n_cached) *n_cached = 0;
    return PL_OK;
}

pl_status pl_kv_allocate_prompt(pl_kv_manager *m, pl_block_table *t, const int32_t *token_ids,
                                int32_t n, uint64_t extra_key, int32_t *n_cached) {
    return allocate(m, t, token_ids, n, extra_key, n, n_cached);
}

pl_status pl_kv_allocate_prompt_part(pl_kv_manager *m, pl_block_table *t, const int32_t *token_ids,
                                     int32_t n, uint64_t extra_key, int32_t max_new,
                                     int32_t *n_cached) {
    if (max_new < 1)
        return pl_fail(PL_ERR_INVALID_ARG, "kv allocate_prompt_part: max_new >= 1 only (got %d)",
                       (int)max_new);
    return allocate(m, t, token_ids, n, extra_key, max_new, n_cached);
}


/* A paged prompt allocation in phases, so that a pair of tables takes every hit before either
 * takes a new block (a new block may evict a cached one the other table would hit). */
typedef struct {
    int32_t hits;       /* leading cached blocks found */
    int32_t skip;       /* of those, left as placeholders (behind the window) */
    int32_t hits_free;  /* hits taken off the free queue */
    int32_t n_slots;    /* tokens that get a slot now */
    int32_t need;       /* blocks the table holds entries for */
} prompt_plan;

static pl_status check_prompt(const pl_kv_manager *m, const pl_block_table *t,
                              const int32_t *token_ids, int32_t n) {
    if (t->live) return pl_fail(PL_ERR_INVALID_ARG, "kv allocate_prompt: the block table is in use");
    if (!token_ids || n < 1)
        return pl_fail(PL_ERR_INVALID_ARG, "kv allocate_prompt: need >= 1 prompt tokens, got %d", (int)n);
    int32_t need = pl_kv_blocks_for(m, n);
    if (need > m->cfg.max_blocks_per_seq)
        return pl_fail(PL_ERR_INVALID_ARG,
                       "kv allocate_prompt: %d tokens need %d blocks, a sequence may hold %d",
                       (int)n, (int)need, (int)m->cfg.max_blocks_per_seq);
    return PL_OK;
}

/* Phase 1: t's arrays and the hits it will take (at most max_cached tokens' worth); the pool is
 * not touched. */
static pl_status plan_prompt(pl_kv_manager *m, pl_block_table *t, const int32_t *token_ids,
                             int32_t n, uint64_t extra_key, int32_t max_new, int32_t max_cached,
                             prompt_plan *p) {
    int32_t bs = m->cfg.block_size;
    PL_TRY(table_arrays(m, t));
    int32_t walk = max_cached < n ? max_cached + 1 : n; /* hits <= (walk - 1) / bs */
    p->hits = prefix_walk(m, token_ids, walk, extra_key, t->blocks, t->hashes, &p->hits_free);
    /* hits the first computed position's window does not reach stay placeholders */
    p->skip = table_behind(m, t, p->hits * bs);
    for (int32_t i = 0; i < p->skip; i++) {
        p->hits_free -= m->pool.blocks[t->blocks[i]].ref == 0;
        t->blocks[i] = PL_KV_NO_BLOCK;
    }
    p->n_slots = n - p->hits * bs > max_new ? p->hits * bs + max_new : n;
    p->need = pl_kv_blocks_for(m, p->n_slots);
    return PL_OK;
}

/* Phase 2: take the planned hits off the free queue. */
static void take_hits(pl_kv_manager *m, pl_block_table *t, const prompt_plan *p) {
    for (int32_t i = p->skip; i < p->hits; i++) take_hit(m, t->blocks[i]);
}

/* Phase 3: new blocks for the rest, and the table goes live. */
static void finish_prompt(pl_kv_manager *m, pl_block_table *t, int32_t n, uint64_t extra_key,
                          const prompt_plan *p) {
    int32_t bs = m->cfg.block_size;
    for (int32_t i = p->hits; i < p->need; i++) {
        int32_t b = pl_block_pool_alloc(&m->pool);
        PL_ASSERT(b >= 0);
        t->blocks[i] = b;
        set_fill(m, b, fill_of(bs, p->n_slots, i));
    }
    t->n_blocks = p->need;
    t->n_tokens = p->n_slots;
    t->n_hashed = t->n_registered = p->hits;
    t->n_dropped = p->skip;
    t->n_cached_tokens = p->hits * bs;
    t->extra_key = extra_key;
    t->live = 1;
    m->n_tables++;
    if (caching(m)) {
        m->prefix_queries += (uint64_t)n;
        m->prefix_hits += (uint64_t)p->hits * (uint64_t)bs;
    }
}

/* allocate_prompt, with slots for at most max_new tokens past the cached ones. */
static pl_status allocate(pl_kv_manager *m, pl_block_table *t, const int32_t *token_ids,
                          int32_t n, uint64_t extra_key, int32_t max_new, int32_t *n_cached) {
    PL_TRY(check_prompt(m, t, token_ids, n));
    prompt_plan p;
    PL_TRY(plan_prompt(m, t, token_ids, n, extra_key, max_new, n, &p));
    if (m->pool.n_free - p.hits_free < p.need - p.hits) {
        table_arrays_free(t);
        return pl_fail(PL_ERR_CAPACITY, "kv allocate_prompt: %d tokens need %d new blocks, %d free",
                       (int)n, (int)(p.need - p.hits), (int)(m->pool.n_free - p.hits_free));
    }
    /* Hits first: taking them off the free queue keeps the allocations below from evicting them. */
    take_hits(m, t, &p);
    finish_prompt(m, t, n, extra_key, &p);
    if (n_cached) *n_cached = p.hits * m->cfg.block_size;
    return PL_OK;
}

pl_status pl_kv_allocate_prompt_pair(pl_kv_manager *m, pl_kv_manager *mw, pl_block_table *global,
                                     pl_block_table *window, const int32_t *token_ids, int32_t n,
                                     uint64_t key_global, uint64_t key_window, int32_t max_new,
                                     int32_t *n_cached) {
    if (max_new < 1 || global == window || key_global == key_window ||
        m->cfg.block_size != mw->cfg.block_size)
        return pl_fail(PL_ERR_INVALID_ARG, "kv allocate_prompt_pair: two tables, two extra keys, "
                       "one block size and max_new >= 1 only (got %d)", (int)max_new);
    PL_TRY(check_prompt(m, global, token_ids, n));
    PL_TRY(check_prompt(mw, window, token_ids, n));
    int32_t bs = m->cfg.block_size;
    int32_t a = prefix_walk(m, token_ids, n, key_global, NULL, NULL, NULL);
    int32_t b = prefix_walk(mw, token_ids, n, key_window, NULL, NULL, NULL);
    int32_t cap = (a < b ? a : b) * bs;
    global->global = 1;
    window->global = 0;
    prompt_plan pg, pw;
    PL_TRY(plan_prompt(m, global, token_ids, n, key_global, max_new, cap, &pg));
    pl_status st = plan_prompt(mw, window, token_ids, n, key_window, max_new, cap, &pw);
    if (st != PL_OK) {
        table_arrays_free(global);
        return st;
    }
    PL_ASSERT(pg.hits == pw.hits && pg.n_slots == pw.n_slots);
    /* distinct keys: no block is a hit of both; one pool or two (kv/cache.h's layer kinds) */
    int32_t fresh_g = pg.need - pg.hits, fresh_w = pw.need - pw.hits;
    int32_t avail_g = m->pool.n_free - pg.hits_free, avail_w = mw->pool.n_free - pw.hits_free;
    int ok = m == mw ? avail_g - pw.hits_free >= fresh_g + fresh_w
                     : avail_g >= fresh_g && avail_w >= fresh_w;
    if (!ok) {
        table_arrays_free(global);
        table_arrays_free(window);
        return pl_fail(PL_ERR_CAPACITY, "kv allocate_prompt_pair: %d tokens need %d + %d new "
                       "blocks, %d + %d free", (int)n, (int)fresh_g, (int)fresh_w, (int)avail_g,
                       (int)avail_w);
    }
    take_hits(m, global, &pg); /* both tables' hits before any new block */
    take_hits(mw, window, &pw);
    finish_prompt(m, global, n, key_global, &pg);
    finish_prompt(mw, window, n, key_window, &pw);
    if (n_cached) *n_cached = pg.hits * bs;
    return PL_OK;
}

/* ---- decoding: append, commit, fork, free -------------------------------------------------- */

/* The block holding the table's last token (its last block, except in a contiguous
 * reservation, whose later blocks wait empty). */
static int32_t last_filled(const pl_block_table *t) { return (t->n_tokens - 1) / t->block_size; }

static bool last_block_shared_partial(const pl_kv_manager *m, const pl_block_table *t) {
    return t->n_tokens % t->block_size != 0 && m->pool.blocks[t->blocks[last_filled(t)]].ref > 1;
}

int32_t pl_kv_append_blocks_needed(const pl_kv_manager *m, const pl_block_table *t, int32_t n_new) {
    if (!t->live || t->swapped || n_new <= 0) return 0;
    int32_t need = pl_kv_blocks_for(m, t->n_tokens + n_new) - t->n_blocks;
    return (need > 0 ? need : 0) + (last_block_shared_partial(m, t) ? 1 : 0);
}

bool pl_kv_can_append(const pl_kv_manager *m, const pl_block_table *t, int32_t n_new) {
    if (!t->live || t->swapped || n_new < 0 || n_new > t->capacity * t->block_size - t->n_tokens)
        return false;
    return pl_kv_append_blocks_needed(m, t, n_new) <= free_blocks(m);
}

pl_status pl_kv_append_slots(pl_kv_manager *m, pl_block_table *t, int32_t n_new,
                             pl_block_copy *cow) {
    int32_t bs = m->cfg.block_size;
    if (cow) *cow = (pl_block_copy){-1, -1};
    if (!t->live || t->swapped)
        return pl_fail(PL_ERR_INVALID_ARG, "kv append_slots: the block table is %s",
                       t->live ? "swapped out" : "empty");
    if (n_new < 0 || n_new > t->capacity * bs - t->n_tokens)
        return pl_fail(PL_ERR_INVALID_ARG,
                       "kv append_slots: %d new tokens after %d exceed the table's %d slots",
                       (int)n_new, (int)t->n_tokens, (int)(t->capacity * bs));
    if (n_new == 0) return PL_OK;
    int32_t need = pl_kv_append_blocks_needed(m, t, n_new);
    if (need > free_blocks(m))
        return pl_fail(PL_ERR_CAPACITY, "kv append_slots: need %d blocks, %d free", (int)need,
                       (int)free_blocks(m));
    if (last_block_shared_partial(m, t)) {
        int32_t last = last_filled(t), src = t->blocks[last];
        int32_t dst = pl_block_pool_alloc(&m->pool);
        PL_ASSERT(dst >= 0);
        set_fill(m, dst, m->fill[src]);
        t->blocks[last] = dst;
        drop_primary(m, src);
        if (cow) *cow = (pl_block_copy){src, dst};
    }
    int32_t n_total = t->n_tokens + n_new, blocks_total = pl_kv_blocks_for(m, n_total);
    for (int32_t i = t->n_blocks; i < blocks_total; i++) {
        int32_t b = vattn(m) ? vattn_block(m, pl_kv_slot_of(m, t), i) : pl_block_pool_alloc(&m->pool);
        PL_ASSERT(b >= 0);
        t->blocks[i] = b;
    }
    for (int32_t i = t->n_tokens / bs; i < blocks_total; i++) set_fill(m, t->blocks[i], fill_of(bs, n_total, i));
    if (blocks_total > t->n_blocks) t->n_blocks = blocks_total;
    int32_t filled = n_new < t->reserved_future ? n_new : t->reserved_future;
    t->reserved_future -= filled;
    m->reserved_future -= filled;
    t->n_tokens = n_total;
    return PL_OK;
}

pl_status pl_kv_truncate(pl_kv_manager *m, pl_block_table *t, int32_t n_keep) {
    int32_t bs = m->cfg.block_size;
    if (!t->live || t->swapped)
        return pl_fail(PL_ERR_INVALID_ARG, "kv truncate: the block table is %s",
                       t->live ? "swapped out" : "empty");
    if (n_keep < 1 || n_keep > t->n_tokens || n_keep < t->n_registered * bs ||
        n_keep < t->n_dropped * bs)
        return pl_fail(PL_ERR_INVALID_ARG, "kv truncate: keep %d of %d tokens (%d in the prefix "
                       "cache, %d behind the sliding window)", (int)n_keep, (int)t->n_tokens,
                       (int)(t->n_registered * bs), (int)(t->n_dropped * bs));
    int32_t keep_blocks = pl_kv_blocks_for(m, n_keep);
    for (int32_t i = t->n_blocks - 1; i >= keep_blocks; i--) drop_primary(m, t->blocks[i]);
    t->n_blocks = keep_blocks;
    int32_t last = t->blocks[keep_blocks - 1];
    /* The kept last block was appended to or copied on write this step: it is private, unless it
     * was full before (then its fill is already bs, or the window released it: n_keep is at
     * least the committed length, so only a full block can have been released). */
    if (last == PL_KV_NO_BLOCK) PL_ASSERT(n_keep % bs == 0);
    else if (m->pool.blocks[last].ref == 1) set_fill(m, last, fill_of(bs, n_keep, keep_blocks - 1));
    else PL_ASSERT(m->fill[last] == fill_of(bs, n_keep, keep_blocks - 1));
    if (t->n_hashed > n_keep / bs) t->n_hashed = n_keep / bs;
    t->n_tokens = n_keep;
    return PL_OK;
}

pl_status pl_kv_commit(pl_kv_manager *m, pl_block_table *t, const int32_t *token_ids,
                       int32_t n_computed) {
    int32_t bs = m->cfg.block_size;
    if (!t->live || t->swapped)
        return pl_fail(PL_ERR_INVALID_ARG, "kv commit: the block table is %s",
                       t->live ? "swapped out" : "empty");
    if (n_computed < 0 || n_computed > t->n_tokens || (n_computed > 0 && !token_ids))
        return pl_fail(PL_ERR_INVALID_ARG, "kv commit: %d computed tokens, the table has %d slots",
                       (int)n_computed, (int)t->n_tokens);
    if (!caching(m)) {
        slide(m, t, n_computed);
        return PL_OK;
    }
    int32_t full = n_computed / bs;
    for (int32_t i = t->n_registered; i < full; i++) {
        const int32_t *tok = token_ids + (size_t)i * bs;
        if (i >= t->n_hashed) {
            pl_block_hash ph = i > 0 ? t->hashes[i - 1] : pl_block_hash_root;
            t->hashes[i] = pl_block_pool_hash(&m->pool, ph, t->extra_key, tok);
            t->n_hashed = i + 1;
        }
        t->n_registered = i + 1;
        int32_t b = t->blocks[i], parent = i > 0 ? t->blocks[i - 1] : -1;
        if (b == PL_KV_NO_BLOCK || (i > 0 && parent == PL_KV_NO_BLOCK)) continue; /* released */
        if (m->pool.blocks[b].hashed) continue; /* hit, or registered by a table sharing it */
        if (parent >= 0 && !m->pool.blocks[parent].hashed) continue; /* chain broken: no link */
        int32_t c = pl_block_pool_lookup(&m->pool, t->hashes[i], parent, t->extra_key, tok);
        if (c >= 0) {
            take_hit(m, c);
            t->blocks[i] = c;
            drop_primary(m, b);
            m->dedups++;
        } else {
            (void)pl_block_pool_register(&m->pool, b, t->hashes[i], parent, t->extra_key, tok);
        }
    }
    slide(m, t, n_computed);
    return PL_OK;
}

pl_status pl_kv_fork(pl_kv_manager *m, const pl_block_table *parent, pl_block_table *child) {
    if (!parent->live || parent->swapped)
        return pl_fail(PL_ERR_INVALID_ARG, "kv fork: the parent table is %s",
                       parent->live ? "swapped out" : "empty");
    if (child->live || child == parent)
        return pl_fail(PL_ERR_INVALID_ARG, "kv fork: the child table is in use");
    PL_TRY(table_arrays(m, child));
    int32_t *blocks = child->blocks;
    pl_block_hash *hashes = child->hashes;
    *child = *parent;
    child->blocks = blocks;
    child->hashes = hashes;
    memcpy(child->blocks, parent->blocks, (size_t)parent->n_blocks * sizeof *blocks);
    if (hashes) memcpy(child->hashes, parent->hashes, (size_t)parent->n_hashed * sizeof *hashes);
    for (int32_t i = parent->n_dropped; i < parent->n_blocks; i++)
        pl_block_pool_incref(&m->pool, parent->blocks[i]);
    m->n_tables++;
    return PL_OK;
}

pl_status pl_kv_allocate_shared(pl_kv_manager *m, const pl_block_table *parent, int32_t n_shared,
                                pl_block_table *child, int32_t n) {
    int32_t bs = m->cfg.block_size;
    if (!parent->live || parent->swapped)
        return pl_fail(PL_ERR_INVALID_ARG, "kv allocate_shared: the parent table is %s",
                       parent->live ? "swapped out" : "empty");
    if (child->live || child == parent)
        return pl_fail(PL_ERR_INVALID_ARG, "kv allocate_shared: the child table is in use");
    if (parent->n_dropped > 0)
        return pl_fail(PL_ERR_INVALID_ARG, "kv allocate_shared: nothing released by a sliding "
                       "window");
    int32_t need = pl_kv_blocks_for(m, n);
    if (n_shared < 1 || (int64_t)n_shared * bs >= n || (int64_t)n_shared * bs > parent->n_tokens ||
        need > m->cfg.max_blocks_per_seq)
        return pl_fail(PL_ERR_INVALID_ARG, "kv allocate_shared: %d shared blocks of a %d-token "
                       "parent for %d tokens (a sequence may hold %d blocks)", (int)n_shared,
                       (int)parent->n_tokens, (int)n, (int)m->cfg.max_blocks_per_seq);
    if (need - n_shared > m->pool.n_free)
        return pl_fail(PL_ERR_CAPACITY, "kv allocate_shared: %d tokens need %d new blocks, %d "
                       "free", (int)n, (int)(need - n_shared), (int)m->pool.n_free);
    int global = child->global;
    PL_TRY(table_arrays(m, child));
    child->global = global;
    memcpy(child->blocks, parent->blocks, (size_t)n_shared * sizeof *child->blocks);
    for (int32_t i = 0; i < n_shared; i++) pl_block_pool_incref(&m->pool, parent->blocks[i]);
    child->n_hashed = min_i32(parent->n_hashed, n_shared);
    child->n_registered = min_i32(parent->n_registered, n_shared);
    if (child->hashes)
        memcpy(child->hashes, parent->hashes, (size_t)child->n_hashed * sizeof *child->hashes);
    for (int32_t i = n_shared; i < need; i++) {
        int32_t b = pl_block_pool_alloc(&m->pool);
        PL_ASSERT(b >= 0);
        child->blocks[i] = b;
        set_fill(m, b, fill_of(bs, n, i));
    }
    child->n_blocks = need;
    child->n_tokens = n;
    child->extra_key = parent->extra_key;
    child->live = 1;
    m->n_tables++;
    return PL_OK;
}

void pl_kv_free_table(pl_kv_manager *m, pl_block_table *t) {
    if (!t->live) {
        table_arrays_free(t);
        return;
    }
    for (int32_t i = t->n_blocks - 1; i >= t->n_dropped; i--) {
        if (t->swapped) pl_block_pool_release(&m->swap, t->blocks[i]);
        else drop_primary(m, t->blocks[i]);
    }
    m->n_tables--;
    m->reserved_future -= t->reserved_future;
    table_arrays_free(t);
}

/* ---- swapping ------------------------------------------------------------------------------ */

/* Distinct blocks held by the group, or -1 if a table is not live, in the wrong place, or
 * listed twice. Uses m->remap as scratch and leaves it all -1. */
static int32_t group_distinct(const pl_kv_manager *m, pl_block_table *const *tables, int32_t n,
                              int swapped) {
    if (!tables || n < 1) return -1;
    for (int32_t k = 0; k < n; k++) {
        if (!tables[k] || !tables[k]->live || tables[k]->swapped != swapped) return -1;
        for (int32_t j = 0; j < k; j++)
            if (tables[j] == tables[k]) return -1;
    }
    int32_t distinct = 0;
    for (int32_t pass = 0; pass < 2; pass++)
        for (int32_t k = 0; k < n; k++)
            for (int32_t i = tables[k]->n_dropped; i < tables[k]->n_blocks; i++) {
                int32_t b = tables[k]->blocks[i];
                if (pass == 0 && m->remap[b] == -1) {
                    m->remap[b] = -2;
                    distinct++;
                } else if (pass == 1) {
                    m->remap[b] = -1;
                }
            }
    return distinct;
}

pl_alloc_status pl_kv_can_swap_out(const pl_kv_manager *m, pl_block_table *const *tables, int32_t n) {
    int32_t d = group_distinct(m, tables, n, 0);
    if (d < 0 || d > m->swap.num_blocks) return PL_ALLOC_NEVER;
    return d <= m->swap.n_free ? PL_ALLOC_OK : PL_ALLOC_LATER;
}

pl_alloc_status pl_kv_can_swap_in(const pl_kv_manager *m, pl_block_table *const *tables, int32_t n) {
    int32_t d = group_distinct(m, tables, n, 1);
    if (d < 0 || m->cfg.num_blocks - d < m->watermark_blocks) return PL_ALLOC_NEVER;
    return m->pool.n_free - d >= m->watermark_blocks ? PL_ALLOC_OK : PL_ALLOC_LATER;
}

/* Move the group's blocks from one pool to the other; see pl_kv_swap_out / pl_kv_swap_in. */
static pl_status swap_group(pl_kv_manager *m, pl_block_table *const *tables, int32_t n,
                            pl_block_copy *map, int32_t cap, int32_t *n_map, int out) {
    const char *what = out ? "kv swap_out" : "kv swap_in";
    pl_block_pool *to = out ? &m->swap : &m->pool;
    if (n_map) *n_map = 0;
    int32_t d = group_distinct(m, tables, n, out ? 0 : 1);
    if (d < 0)
        return pl_fail(PL_ERR_INVALID_ARG, "%s: %d tables, each must be live, %s, and listed once",
                       what, (int)n, out ? "resident" : "swapped out");
    if (d > to->n_free || d > cap || !map || !n_map)
        return pl_fail(PL_ERR_CAPACITY, "%s: %d distinct blocks, %d free in the target pool, map holds %d",
                       what, (int)d, (int)to->n_free, (int)(map ? cap : 0));
    int32_t k_map = 0, bs = m->cfg.block_size;
    for (int32_t k = 0; k < n; k++) {
        pl_block_table *t = tables[k];
        for (int32_t i = t->n_blocks - 1; i >= t->n_dropped; i--) { /* tail first, as free */
            int32_t src = t->blocks[i], dst = m->remap[src];
            if (dst < 0) {
                dst = pl_block_pool_alloc(to);
                PL_ASSERT(dst >= 0);
                m->remap[src] = dst;
                map[k_map++] = (pl_block_copy){src, dst};
                if (!out) set_fill(m, dst, fill_of(bs, t->n_tokens, i));
            } else {
                pl_block_pool_incref(to, dst);
            }
            t->blocks[i] = dst;
            if (out) drop_primary(m, src);
            else pl_block_pool_release(&m->swap, src);
        }
        t->swapped = out;
        t->n_registered = 0; /* the new blocks hold no hash: re-enter them on the next commit */
    }
    for (int32_t j = 0; j < k_map; j++) m->remap[map[j].src] = -1;
    PL_ASSERT(k_map == d);
    *n_map = k_map;
    return PL_OK;
}

pl_status pl_kv_swap_out(pl_kv_manager *m, pl_block_table *const *tables, int32_t n,
                         pl_block_copy *map, int32_t cap, int32_t *n_map) {
    if (m->swap.num_blocks == 0) {
        if (n_map) *n_map = 0;
        return pl_fail(PL_ERR_CAPACITY, "kv swap_out: no swap pool (num_swap_blocks = 0)");
    }
    return swap_group(m, tables, n, map, cap, n_map, 1);
}

pl_status pl_kv_swap_in(pl_kv_manager *m, pl_block_table *const *tables, int32_t n,
                        pl_block_copy *map, int32_t cap, int32_t *n_map) {
    return swap_group(m, tables, n, map, cap, n_map, 0);
}

/* ---- stats and checks ---------------------------------------------------------------------- */

void pl_kv_get_stats(const pl_kv_manager *m, pl_kv_stats *s) {
    memset(s, 0, sizeof *s);
    s->blocks_total = m->cfg.num_blocks;
    s->blocks_free = free_blocks(m);
    s->blocks_used = s->blocks_total - s->blocks_free;
    s->blocks_cached = m->pool.n_free_cached;
    s->tokens_stored = m->tokens_stored;
    s->waste = s->blocks_used > 0
                   ? 1.0 - (double)m->tokens_stored / ((double)s->blocks_used * m->cfg.block_size)
                   : 0.0;
    s->prefix_queries = m->prefix_queries;
    s->prefix_hits = m->prefix_hits;
    s->evictions = m->pool.n_evictions;
    s->dedups = m->dedups;
    s->swap_total = m->swap.num_blocks;
    s->swap_used = m->swap.num_blocks - m->swap.n_free;
    s->n_tables = m->n_tables;
    s->reserved_future = m->reserved_future;
    s->window_released = m->window_released;
    s->window_freed = m->window_freed;
}

int32_t pl_kv_num_free(const pl_kv_manager *m) { return free_blocks(m); }
int32_t pl_kv_pool_blocks(const pl_kv_manager *m) { return m->pool.num_blocks; }

void pl_kv_block_states(const pl_kv_manager *m, uint8_t *primary, uint8_t *swap) {
    const pl_block *b = m->pool.blocks;
    for (int32_t i = 0; i < m->pool.num_blocks; i++)
        primary[i] = (uint8_t)(b[i].ref > 1    ? PL_KV_BLOCK_SHARED
                               : b[i].ref == 1 ? PL_KV_BLOCK_USED
                               : b[i].hashed   ? PL_KV_BLOCK_CACHED
                                               : PL_KV_BLOCK_FREE);
    if (!swap) return;
    for (int32_t i = 0; i < m->swap.num_blocks; i++)
        swap[i] = (uint8_t)(m->swap.blocks[i].ref > 0 ? PL_KV_BLOCK_SWAPPED : PL_KV_BLOCK_FREE);
}

pl_status pl_kv_manager_check(const pl_kv_manager *m) {
    pl_status st = pl_block_pool_check(&m->pool);
    if (st != PL_OK) {
        pl_error_prefix("primary pool");
        return st;
    }
    if (m->swap.num_blocks > 0 && (st = pl_block_pool_check(&m->swap)) != PL_OK) {
        pl_error_prefix("swap pool");
        return st;
    }
    int64_t sum = 0;
    for (int32_t b = 0; b < m->pool.num_blocks; b++) {
        int32_t f = m->fill[b];
        bool used = m->pool.blocks[b].ref > 0;
        if (used ? (f < (contiguous(m) ? 0 : 1) || f > m->cfg.block_size) : f != 0)
            return pl_fail(PL_ERR_INTERNAL, "block %d: ref %d but fill %d", (int)b,
                           (int)m->pool.blocks[b].ref, (int)f);
        sum += f;
    }
    if (sum != m->tokens_stored)
        return pl_fail(PL_ERR_INTERNAL, "tokens stored %lld, blocks hold %lld",
                       (long long)m->tokens_stored, (long long)sum);
    for (int32_t i = 0; i < (m->pool.num_blocks > m->swap.num_blocks ? m->pool.num_blocks : m->swap.num_blocks); i++)
        if (m->remap[i] != -1) return pl_fail(PL_ERR_INTERNAL, "swap scratch slot %d not reset", (int)i);
    return PL_OK;
}
