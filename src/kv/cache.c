/* kv/cache — the one door to the KV cache (see cache.h for the contract). The three layouts are
 * three tables of operations; everything else is the same code for all of them. */
#include "kv/cache.h"
#include "kv/vattn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    const char *name;
    int shares;        /* blocks taken one by one: shared (fork, prefix cache, swap) and rolled
                          back (truncate); the others refuse those calls here */
    int maps_pages;    /* slots of mapped pages (vAttention) */
    pl_status (*setup)(pl_kv_cache *c, pl_engine_config *cfg, const pl_kv_cache_shape *sh,
                       const pl_kv_layout *l, uint64_t budget, int32_t max_model_len);
    int32_t (*admit_blocks)(pl_kv_cache *c, const int32_t *tokens, int32_t n, uint64_t key,
                            int32_t first, int32_t final_tokens, int32_t n_given);
    bool (*has_place)(const pl_kv_cache *c, int32_t need);
    pl_status (*allocate)(pl_kv_cache *c, pl_block_table *t, pl_block_table *w,
                          const int32_t *tokens, int32_t n, uint64_t key, int32_t max_new,
                          int32_t final_tokens, int32_t *n_cached);
    int64_t (*request_blocks)(const pl_kv_cache *c, int32_t n_prompt, int32_t max_tokens,
                              int64_t n_seqs, int32_t k_spec);
    pl_status (*prepare_step)(pl_kv_cache *c);
    void (*stats)(const pl_kv_cache *c, pl_engine_stats *s);
    /* roll a sequence back to n_keep tokens (speculative decoding's rejected proposals) */
    pl_status (*truncate)(pl_kv_cache *c, pl_block_table *t, pl_block_table *w, int32_t n_keep);
    /* the layout's own state follows a live table: its length changed (appended, truncated),
       or it is about to be freed */
    void (*follow)(pl_kv_cache *c, const pl_block_table *t, int freeing);
} kv_ops;

struct pl_kv_cache {
    const kv_ops *ops;
    pl_kv_store store;          /* primary KV bytes (vAttention: a view of the slots) */
    pl_kv_store swap;           /* swap pool bytes */
    int has_swap, has_mgr;
    pl_kv_manager mgr;          /* who holds which block (layer kinds: the full layers') */
    /* Layer kinds (Gemma 3 / 4): the window layers' own pool, mgr_w, with its blocks behind the
     * window released; mw is &mgr_w then, else &mgr (KV cache groups over one pool, or a
     * window on every layer). The window tables (pl_seq.table_w) live in *mw. */
    pl_kv_manager mgr_w, *mw;
    int kinds, has_mgr_w;
    int32_t blocks_all_full;    /* layer kinds: the blocks the budget holds without release */
    struct pl_vattn *va;        /* vAttention: the slots and page pool, else NULL */
    /* vAttention prefix caching (--vattn-share): the slots hash computed pages and keep them
     * cached after their holder (kv/vattn.h's prefix cache) */
    int vp_cache;
    uint64_t draft_bytes;       /* the draft model's share of the budget */
    /* Memory samples (pl_kv_cache_sample). */
    uint64_t samples;
    double usage_sum, usage_peak, waste_peak;
    double tokens_sum, slots_sum, blocks_sum, refs_sum, future_sum;
    int32_t peak_blocks, peak_seqs;
};

/* Layer (store tensor) i's layout: l with that layer's KV heads and head size when they differ
 * (gemma4), else l. */
static pl_kv_layout layer_layout(const pl_kv_layout *l, const pl_kv_cache_shape *sh, int32_t i) {
    pl_kv_layout li = *l;
    if (sh->layer_shapes) {
        li.n_kv_heads = sh->layer_shapes[i].n_kv_heads;
        li.head_dim = sh->layer_shapes[i].head_dim;
    }
    return li;
}

static const pl_dtype KV_DTYPES[] = {PL_DT_F16, PL_DT_F32, PL_DT_BF16, PL_DT_Q8_0, PL_DT_Q4_0};

/* ---- the paged layout ---- */

static int grouped(const pl_kv_cache *c) { return c->mgr.cfg.kv_groups == 2; }
static int lazy(const pl_kv_cache *c) {
    return c->mw->cfg.sliding_window > 0 && c->mgr.cfg.policy == PL_KV_POLICY_PAGED;
}

/* Layer kinds: the window pool's blocks. Its sequences can never hold more at once: at most
 * S = max_num_seqs tables run (the scheduler's sequence budget, forks included; swapped ones
 * hold swap blocks), and after a step's commit each holds the blocks of positions
 * [computed - W + 1, computed + k) for its k uncomputed slots, fewer than (W - 1 + k) / bs + 2
 * blocks, where the k of all tables sum to at most a step's tokens B (prefill chunks, decodes
 * and proposals) plus one held back per sequence: ceil((S W + B) / bs) + 2 S. Admission
 * therefore counts the full pool only and the window pool never decides; should it lack (a
 * case outside that sum, e.g. prompt log-probabilities holding back a chunk's rows), allocation
 * answers PL_ERR_CAPACITY and append_needed "not now", so the scheduler waits or preempts. */
static int64_t window_pool_blocks(const pl_engine_config *cfg, int32_t W, int32_t bs) {
    int64_t S = cfg->max_num_seqs > 1 ? cfg->max_num_seqs : 1;
    int64_t B = cfg->max_num_batched_tokens > 1 ? cfg->max_num_batched_tokens : 1;
    return (S * W + B + bs - 1) / bs + 2 * S;
}

/* Pool and manager of the paged and contiguous layouts. */
static pl_status setup_blocks(pl_kv_cache *c, pl_engine_config *cfg, const pl_kv_cache_shape *sh,
                              const pl_kv_layout *lay, uint64_t budget, int32_t max_model_len) {
    pl_kv_layout l = *lay;
    int groups = c->mgr.cfg.kv_groups == 2; /* decided by create */
    int kinds = groups && c->kinds;
    const int32_t tensors = groups && !kinds ? sh->n_layers / 2 : sh->n_layers; /* a block: one
                                                                                  group's */
    size_t per_block = pl_kv_bytes_per_block_shaped(&l, tensors, sh->layer_shapes);
    uint64_t nb = budget / per_block, nbw = 0;
    uint8_t kind[PL_KV_MAX_TENSORS];
    size_t per_w = 0, per_f = per_block;
    if (kinds && tensors > PL_KV_MAX_TENSORS)
        return pl_fail(PL_ERR_INVALID_ARG, "KV cache: %d KV tensors, at most %d", (int)tensors,
                       PL_KV_MAX_TENSORS);
    if (kinds) { /* the window pool for what its sequences hold at once, the rest full */
        per_f = 0;
        for (int32_t i = 0; i < tensors; i++) {
            kind[i] = sh->tensor_window[i] != 0;
            const pl_kv_layout li = layer_layout(&l, sh, i);
            *(kind[i] ? &per_w : &per_f) += pl_kv_bytes_per_block(&li, 1);
        }
        c->blocks_all_full = (int32_t)(nb < INT32_MAX / 2 ? nb : INT32_MAX / 2);
        nbw = (uint64_t)window_pool_blocks(cfg, sh->kinds_window, l.block_size);
        nb = nbw * per_w < budget ? (budget - nbw * per_w) / per_f : 0;
        if (nbw > INT32_MAX / 2) nbw = INT32_MAX / 2;
        if (nb <= (uint64_t)c->blocks_all_full) { /* the budget left to this cache (a draft
                                                     model's share taken) gains nothing */
            kinds = groups = c->kinds = 0;
            c->mgr.cfg.kv_groups = 1;
            c->blocks_all_full = 0;
            nb = budget / per_block;
            nbw = 0;
        }
    }
    /* An embedding model keeps nothing between steps (its attention reads the step's own K/V):
     * the pool is a nominal two blocks, so the rest of the engine stays one code path. */
    if (sh->embedding) nb = 2;
    int32_t max_blocks = (max_model_len + l.block_size - 1) / l.block_size + 1;
    if (nb < 2)
        return pl_fail(PL_ERR_INVALID_ARG, "kv-cache-memory %llu bytes holds %llu blocks of %zu "
                       "bytes: too small", (unsigned long long)cfg->kv_cache_memory,
                       (unsigned long long)nb, per_block);
    if (nb > INT32_MAX / 2) nb = INT32_MAX / 2;
    l.num_blocks = (int64_t)nb;
    PL_TRY(pl_kv_store_init_kinds(&c->store, &l, tensors, sh->layer_shapes, kinds ? kind : NULL,
                                  (int64_t)nbw, NULL));
    int32_t n_swap = 0, n_swap_w = 0;
    static const pl_kv_policy policy[] = {PL_KV_POLICY_MAX, PL_KV_POLICY_POW2, PL_KV_POLICY_ORACLE};
    int contig = cfg->kv_layout == PL_KV_LAYOUT_CONTIGUOUS;
    /* a reservation is one run of blocks: per KV head one run of rows, the contiguous kernel's */
    c->store.head_major = contig;
    if (contig && nb * (uint64_t)l.block_size > INT32_MAX)
        return pl_fail(PL_ERR_INVALID_ARG, "kv-layout contiguous: %llu blocks of %d tokens exceed "
                       "2^31 token slots; lower kv-cache-memory", (unsigned long long)nb,
                       (int)l.block_size);
    if (cfg->swap_space) {
        uint64_t ns = cfg->swap_space / per_block, nsw = 0;
        if (kinds) { /* split as the primary pools are, at least a block each */
            double fw = (double)(nbw * per_w) / (double)(nbw * per_w + nb * per_f);
            nsw = (uint64_t)((double)cfg->swap_space * fw / (double)per_w);
            ns = (uint64_t)((double)cfg->swap_space * (1 - fw) / (double)per_f);
            if (nsw < 1) nsw = 1;
            if (nsw > INT32_MAX / 2) nsw = INT32_MAX / 2;
        }
        if (ns < 1)
            return pl_fail(PL_ERR_INVALID_ARG, "swap-space %llu bytes holds no block of %zu bytes",
                           (unsigned long long)cfg->swap_space, per_block);
        if (ns > INT32_MAX / 2) ns = INT32_MAX / 2;
        pl_kv_layout sl = l;
        sl.num_blocks = (int64_t)ns;
        PL_TRY(pl_kv_store_init_kinds(&c->swap, &sl, tensors, sh->layer_shapes,
                                      kinds ? kind : NULL, (int64_t)nsw, cfg->swap_path));
        c->has_swap = 1;
        n_swap = (int32_t)ns;
        n_swap_w = (int32_t)nsw;
    }
    pl_kv_manager_config mc = {
        .block_size = l.block_size, .num_blocks = (int32_t)nb, .num_swap_blocks = n_swap,
        /* The watermark keeps room for running sequences to grow; a contiguous reservation
         * never grows, so it keeps none (one max-length sequence fits a budget of exactly it). */
        .max_blocks_per_seq = max_blocks, .watermark = contig ? 0.0 : 0.01,
        .enable_prefix_caching = contig ? 0 : cfg->enable_prefix_caching,
        .hash_seed = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ULL,
        .policy = contig ? policy[cfg->reserve] : PL_KV_POLICY_PAGED,
        .max_seq_tokens = max_model_len,
        /* blocks behind the window are released only when no layer reads them again */
        .sliding_window = contig || kinds ? 0 : groups ? sh->mixed_window : sh->kv_window,
        .kv_groups = groups ? 2 : 1,
    };
    if (contig) cfg->enable_prefix_caching = 0; /* a contiguous layout shares nothing */
    PL_TRY(pl_kv_manager_init(&c->mgr, &mc));
    c->has_mgr = 1;
    if (!kinds) return PL_OK;
    pl_kv_manager_config mw = mc; /* sized for its sequences: no watermark */
    mw.num_blocks = (int32_t)nbw;
    mw.num_swap_blocks = n_swap_w;
    mw.watermark = 0.0;
    mw.sliding_window = sh->kinds_window;
    PL_TRY(pl_kv_manager_init(&c->mgr_w, &mw));
    c->has_mgr_w = 1;
    c->mw = &c->mgr_w;
    return PL_OK;
}

static int32_t paged_admit_blocks(pl_kv_cache *c, const int32_t *tokens, int32_t n, uint64_t key,
                                  int32_t first, int32_t final_tokens, int32_t n_given) {
    (void)final_tokens;
    if (!lazy(c)) return pl_kv_prompt_blocks_needed(&c->mgr, tokens, n, key, n_given);
    /* the window table takes at most its hits' window and a first chunk; with groups the
     * global table takes every block: admitting it with a first chunk only would let recomputed
     * sequences in that then preempt each other as their later chunks arrive */
    int32_t hit = pl_kv_cache_probe(c, tokens, n, key);
    int32_t upto = n - hit > first ? hit + first : n;
    int32_t window = pl_kv_blocks_for(c->mw, upto) - pl_kv_behind_window(c->mw, hit);
    if (c->kinds) return pl_kv_blocks_for(&c->mgr, n); /* the window pool is sized for it */
    return grouped(c) ? window + pl_kv_blocks_for(&c->mgr, n) : window;
}

static bool paged_has_place(const pl_kv_cache *c, int32_t need) {
    (void)c;
    (void)need;
    return true;
}

static pl_status paged_allocate(pl_kv_cache *c, pl_block_table *t, pl_block_table *w,
                                const int32_t *tokens, int32_t n, uint64_t key, int32_t max_new,
                                int32_t final_tokens, int32_t *n_cached) {
    (void)final_tokens;
    if (grouped(c))
        return pl_kv_allocate_prompt_pair(&c->mgr, c->mw, t, w, tokens, n, key,
                                          key ^ PL_KV_WINDOW_KEY, max_new, n_cached);
    if (lazy(c)) return pl_kv_allocate_prompt_part(&c->mgr, t, tokens, n, key, max_new, n_cached);
    return pl_kv_allocate_prompt(&c->mgr, t, tokens, n, key, n_cached);
}

static int64_t paged_request_blocks(const pl_kv_cache *c, int32_t n_prompt, int32_t max_tokens,
                                    int64_t seqs, int32_t k_spec) {
    const pl_kv_manager *m = c->mw;
    const int32_t bs = m->cfg.block_size, total = n_prompt + max_tokens;
    /* with a sliding window a sequence holds only its window's blocks past the prompt */
    int64_t out_blocks = (max_tokens + bs - 1) / bs;
    if (c->kinds) { /* the full pool's blocks: the window pool is sized for its sequences */
        int64_t full = (n_prompt + bs - 1) / bs + seqs * (out_blocks + 1);
        int64_t again = seqs * ((total + bs - 1) / bs); /* recomputed one by one, as below */
        return seqs > 1 && again > full ? again : full;
    }
    int64_t win = pl_kv_held_blocks_max(m, total, k_spec);
    /* and its prompt is prefilled chunk by chunk behind the window (engine/scheduler.c: a first
     * chunk of one window, later ones as blocks free up) */
    int32_t W = m->cfg.sliding_window, chunk = (W + bs - 1) / bs * bs;
    int64_t prompt = W > 0 ? pl_kv_held_blocks_max(m, n_prompt, chunk) : (n_prompt + bs - 1) / bs;
    int64_t need = prompt + seqs * ((out_blocks < win ? out_blocks : win) + 1);
    if (grouped(c)) /* and the global layers' table keeps every block */
        need += (n_prompt + bs - 1) / bs + seqs * (out_blocks + 1);
    if (lazy(c) && seqs > 1) {
        /* A group preempted by recompute comes back one sequence at a time, each admitted with
         * its own window and first chunk (and, with groups, its own global table): the prompt
         * blocks behind a window cannot be shared again as the first admission's fork shared
         * them. A group admitted here must be able to come back (issue 31), so its bound is
         * the larger of the two. */
        int64_t again = pl_kv_held_blocks_max(m, total, chunk > k_spec ? chunk : k_spec);
        if (grouped(c)) again += (total + bs - 1) / bs;
        if (seqs * again > need) need = seqs * again;
    }
    return need;
}

static pl_status paged_truncate(pl_kv_cache *c, pl_block_table *t, pl_block_table *w,
                                int32_t n_keep) {
    PL_TRY(pl_kv_truncate(&c->mgr, t, n_keep));
    return grouped(c) ? pl_kv_truncate(c->mw, w, n_keep) : PL_OK;
}

static pl_status unshared(const pl_kv_cache *c, const char *what);

static pl_status no_truncate(pl_kv_cache *c, pl_block_table *t, pl_block_table *w,
                             int32_t n_keep) {
    (void)t, (void)w, (void)n_keep;
    return unshared(c, "truncate");
}

static void no_follow(pl_kv_cache *c, const pl_block_table *t, int freeing) {
    (void)c, (void)t, (void)freeing;
}

static pl_status no_prepare(pl_kv_cache *c) {
    (void)c;
    return PL_OK;
}

static void no_stats(const pl_kv_cache *c, pl_engine_stats *s) {
    (void)c;
    (void)s;
}

/* ---- the contiguous layouts (kv/reserve.c) ---- */

static int32_t contig_admit_blocks(pl_kv_cache *c, const int32_t *tokens, int32_t n,
                                   uint64_t key, int32_t first, int32_t final_tokens,
                                   int32_t n_given) {
    (void)tokens, (void)key, (void)first, (void)n_given;
    return pl_kv_admit_blocks(&c->mgr, n, final_tokens);
}

/* One run of consecutive blocks (first fit: external fragmentation is real), or a free slot. */
static bool run_has_place(const pl_kv_cache *c, int32_t need) {
    return pl_kv_first_fit(&c->mgr, need) >= 0;
}

static pl_status contig_allocate(pl_kv_cache *c, pl_block_table *t, pl_block_table *w,
                                 const int32_t *tokens, int32_t n, uint64_t key, int32_t max_new,
                                 int32_t final_tokens, int32_t *n_cached) {
    (void)w, (void)key, (void)max_new;
    return pl_kv_allocate_reserved(&c->mgr, t, tokens, n, final_tokens, n_cached);
}

static int64_t contig_request_blocks(const pl_kv_cache *c, int32_t n_prompt, int32_t max_tokens,
                                     int64_t seqs, int32_t k_spec) {
    (void)seqs, (void)k_spec;
    return pl_kv_admit_blocks(&c->mgr, n_prompt, n_prompt + max_tokens);
}

/* ---- the vAttention layout (kv/vattn.h) ---- */

static size_t gcd_size(size_t a, size_t b) {
    while (b) {
        size_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* mprotect/madvise on anonymous memory for 4K and 64K pages, a memfd for 2M (hugetlb) and for
 * --vattn-share (a page mapped at several addresses) (docs/DESIGN.md says why);
 * PAGELLM_VATTN_BACKEND=memfd forces the memfd (benchmarks). */
static pl_vattn_backend backend_for(const pl_engine_config *cfg, size_t page) {
    const char *b = getenv("PAGELLM_VATTN_BACKEND");
    if (page == (2u << 20) || cfg->vattn_share || (b && !strcmp(b, "memfd")))
        return PL_VATTN_MEMFD;
    return PL_VATTN_ANON;
}

/* Anonymous memory keeps a region of a used slot as two mappings (its mapped pages, the rest);
 * the memfd one per mapped page and one per run of unmapped ones: refuse up front a
 * configuration whose slots could need more than the kernel allows a process
 * (vm.max_map_count), rather than fail a step's mapping later. With sharing the bound counts
 * every page of the pool mapped once and a hole between each two (sharing adds mappings
 * without memory: docs/DESIGN.md says where that stops). */
static pl_status check_map_count(const pl_engine_config *cfg, int64_t regions, size_t page,
                                 int64_t phys) {
    long max = 65530;
    FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
    if (f) {
        if (fscanf(f, "%ld", &max) != 1) max = 65530;
        fclose(f);
    }
    const int anon = backend_for(cfg, page) == PL_VATTN_ANON;
    const int64_t need = 4096 + regions * (anon ? 2 * (int64_t)cfg->max_num_seqs
                                                : 2 * phys + cfg->max_num_seqs);
    if (need <= max) return PL_OK;
    if (!anon)
        return pl_fail(PL_ERR_INVALID_ARG, "kv-layout vattention with a memfd (--vattn-share or "
                       "2M pages): %lld pages x %lld regions (layers x K/V x KV heads) can need "
                       "%lld memory mappings, more than vm.max_map_count %ld: lower "
                       "kv-cache-memory, use a larger kv-page-size, or raise vm.max_map_count",
                       (long long)phys, (long long)regions, (long long)need, max);
    int64_t seqs = (max - 4096) / (2 * regions);
    return pl_fail(PL_ERR_INVALID_ARG, "kv-layout vattention: %d slots (max-num-seqs) x %lld "
                   "regions (layers x K/V x KV heads) can need %lld memory mappings, more than "
                   "vm.max_map_count %ld: use max-num-seqs %lld or less, or raise "
                   "vm.max_map_count", (int)cfg->max_num_seqs, (long long)regions,
                   (long long)need, max, (long long)(seqs > 0 ? seqs : 0));
}

/* The page pool and request slots replace the paged pool: the KV store is a view of the slots'
 * reservation whose "blocks" are pages, and the manager runs PL_KV_POLICY_VATTN. The rest of
 * the engine (scheduler, runner, kernels) is unchanged: a sequence's block table is its slot's
 * consecutive pages, one contiguous array per layer. */
static pl_status vattn_setup(pl_kv_cache *c, pl_engine_config *cfg, const pl_kv_cache_shape *sh,
                             const pl_kv_layout *l, uint64_t budget, int32_t max_model_len) {
    if (sh->embedding)
        return pl_fail(PL_ERR_INVALID_ARG, "kv-layout vattention serves generation models; this "
                       "is an embedding model (architecture %s)", sh->arch_name);
    size_t page = cfg->kv_page_size ? (size_t)cfg->kv_page_size : 4096;
    cfg->kv_page_size = page;
    /* A region per layer, K/V and KV head: a slot's rows of one head are one array, head-major
     * as the contiguous kernel reads them. Every region's row holds the same tokens: the fewest
     * whose token rows fill whole pages in every layer (a page's worth of the largest where
     * they divide it; gemma4's window layers, of smaller rows, then take fewer pages a row). */
    const int32_t nl = sh->n_layers;
    int64_t tpr = 1, regions = 0, row_pages = 0;
    for (int32_t i = 0; i < nl; i++) {
        const pl_kv_layout li = layer_layout(l, sh, i);
        const size_t rb = pl_kv_row_bytes(&li);
        const int64_t t = rb ? (int64_t)(page / gcd_size(page, rb)) : 0;
        if (t > 0) tpr = tpr / (int64_t)gcd_size((size_t)tpr, (size_t)t) * t;
        if (t == 0 || (uint64_t)tpr * rb > 64 * (uint64_t)page)
            return pl_fail(PL_ERR_UNSUPPORTED, "kv-layout vattention: a page of %zu bytes does not "
                           "hold a whole number of rows of %zu bytes (one KV head of %d dims, %s%s) "
                           "within 64 pages; use another kv-page-size or kv-cache-dtype", page, rb,
                           (int)li.head_dim, pl_kv_cache_dtype_name(cfg->kv_cache_dtype),
                           sh->layer_shapes ? ", and the other layers' rows" : "");
        regions += 2 * (int64_t)li.n_kv_heads;
    }
    int32_t *region_pages = malloc((size_t)regions * sizeof *region_pages);
    if (!region_pages) return pl_fail(PL_ERR_NOMEM, "kv-layout vattention: out of memory");
    for (int32_t i = 0, r = 0; i < nl; i++) {
        const pl_kv_layout li = layer_layout(l, sh, i);
        const int32_t k = (int32_t)((uint64_t)tpr * pl_kv_row_bytes(&li) / page);
        for (int32_t j = 0; j < 2 * li.n_kv_heads; j++) region_pages[r++] = k;
        row_pages += 2 * (int64_t)li.n_kv_heads * k;
    }
    int32_t rows = (int32_t)((max_model_len + tpr - 1) / tpr);
    uint64_t row_bytes = (uint64_t)page * (uint64_t)row_pages;
    uint64_t phys = budget / row_bytes;
    if (phys < 1) {
        free(region_pages);
        return pl_fail(PL_ERR_INVALID_ARG, "kv-cache-memory %llu bytes is smaller than one page "
                       "per layer, K/V and KV head (%d layers: %lld pages of %zu bytes = %llu "
                       "bytes)", (unsigned long long)budget, (int)sh->n_layers,
                       (long long)row_pages, page, (unsigned long long)row_bytes);
    }
    if (phys > INT32_MAX / 4) phys = INT32_MAX / 4;
    pl_status mst = check_map_count(cfg, regions, page, (int64_t)phys);
    if (mst != PL_OK) {
        free(region_pages);
        return mst;
    }
    /* prefix hits on the pages running and finished sequences computed, with --vattn-share */
    cfg->enable_prefix_caching = cfg->enable_prefix_caching && cfg->vattn_share;
    c->vp_cache = cfg->enable_prefix_caching;
    pl_vattn_config vc = {
        /* sharing: a beam step forks its new beams before it drops the parents they leave,
         * so up to twice the sequences hold a slot for a moment */
        .page_size = page, .n_regions = (int32_t)regions,
        .n_slots = cfg->max_num_seqs * (cfg->vattn_share ? 2 : 1),
        .rows_per_slot = rows, .tokens_per_row = (int32_t)tpr, .phys_rows = (int64_t)phys,
        .region_pages = region_pages,
        .backend = backend_for(cfg, page), .overlap = !cfg->vattn_no_overlap,
        .deferred_reclaim = !cfg->vattn_no_deferred_reclaim, .eager = !cfg->vattn_no_eager,
        .start_thread = 1, .reclaim_threshold = 0.10, .prefix_cache = c->vp_cache,
    };
    pl_status vst = pl_vattn_create(&vc, &c->va);
    free(region_pages);
    PL_TRY(vst);
    /* The store view: a layer's K (V) is its KV heads' regions, each n_slots x rows pages; a
     * "block" is a page row of tpr tokens, so the head-major order of kv_store.h is exactly
     * [kv_head][slot][page][row]. */
    memset(&c->store, 0, sizeof c->store);
    c->store.layout = *l;
    c->store.layout.block_size = tpr;
    c->store.layout.num_blocks = (int64_t)vc.n_slots * rows;
    c->store.n_layers = sh->n_layers;
    /* layer 0's K regions end where its V regions start (region n_kv_heads) */
    c->store.layer_bytes = pl_vattn_region_offset(c->va, l->n_kv_heads);
    if (sh->layer_shapes) { /* each layer its shape, at its first region */
        c->store.shapes = malloc((size_t)nl * sizeof *c->store.shapes);
        c->store.layer_off = malloc((size_t)nl * sizeof *c->store.layer_off);
        if (!c->store.shapes || !c->store.layer_off)
            return pl_fail(PL_ERR_NOMEM, "kv-layout vattention: out of memory");
        for (int32_t i = 0, r = 0; i < nl; r += 2 * sh->layer_shapes[i].n_kv_heads, i++) {
            c->store.shapes[i] = sh->layer_shapes[i];
            c->store.layer_off[i] = pl_vattn_region_offset(c->va, r);
        }
    }
    c->store.base = pl_vattn_base(c->va);
    c->store.mapped_bytes = 0; /* the vattn owns the reservation */
    c->store.head_major = 1;
    cfg->block_size = tpr; /* a block is a page: pl_engine_get_config says how many tokens */
    pl_kv_manager_config mc = {
        .block_size = tpr, .num_blocks = (int32_t)phys, .max_blocks_per_seq = rows,
        .watermark = 0.01, .policy = PL_KV_POLICY_VATTN, .max_seq_tokens = max_model_len,
        .n_slots = vc.n_slots,
    };
    PL_TRY(pl_kv_manager_init(&c->mgr, &mc));
    c->has_mgr = 1;
    return PL_OK;
}

/* The manager counts a shared page once: it learns how many of its blocks are shared from the
 * slots' reference counts after every change. */
static void vattn_sync_shared(pl_kv_cache *c) {
    c->mgr.shared_pages = (int32_t)pl_vattn_shared_rows(c->va);
}

/* --vattn-share: t in a free slot for n tokens, its first n_shared pages those of slot `from`
 * mapped into it. */
static pl_status vattn_share(pl_kv_cache *c, int32_t from, pl_block_table *t, int32_t n,
                             int32_t n_shared) {
    int32_t slot = pl_vattn_acquire(c->va);
    if (slot < 0) return pl_fail(PL_ERR_CAPACITY, "kv fork: every request slot is in use");
    pl_status st = pl_kv_allocate_slot_shared(&c->mgr, t, n, slot, n_shared);
    if (st == PL_OK)
        st = pl_vattn_share(c->va, from, slot, n_shared);
    if (st == PL_OK) {
        pl_vattn_set_need(c->va, slot, n);
        vattn_sync_shared(c);
        return PL_OK;
    }
    pl_vattn_release(c->va, slot);
    pl_kv_free_table(&c->mgr, t);
    vattn_sync_shared(c);
    return st;
}

/* vAttention prefix hits: the most leading full pages of tokens[n] (at most (n - 1) / page, so
 * the last token is computed) whose K/V rows hold under the same key, mapped by running
 * sequences or cached after finished ones (verified token for token); *mapped of them mapped
 * now (they cost no page); 0 when prefix caching is off. */
static int32_t vattn_probe(const pl_kv_cache *c, const int32_t *tokens, int32_t n, uint64_t key,
                           int32_t *mapped) {
    *mapped = 0;
    if (!c->vp_cache || !tokens || n < 2) return 0;
    return pl_vattn_prefix_probe(c->va, tokens, (n - 1) / c->mgr.cfg.block_size, key, mapped);
}

/* A free slot (deferred reclamation: the one with most pages still mapped), its first blocks,
 * and the slot told its need. */
static pl_status vattn_allocate(pl_kv_cache *c, pl_block_table *t, pl_block_table *w,
                                const int32_t *tokens, int32_t n, uint64_t key, int32_t max_new,
                                int32_t final_tokens, int32_t *n_cached) {
    (void)w, (void)max_new, (void)final_tokens;
    if (!c->va) { /* bookkeeping only (pl_kv_cache_create_blocks): the first free slot */
        int32_t first = pl_kv_first_fit(&c->mgr, 1);
        return pl_kv_allocate_slot(&c->mgr, t, tokens, n,
                                   first < 0 ? -1 : first / c->mgr.cfg.max_blocks_per_seq, n_cached);
    }
    int32_t mapped, hit = vattn_probe(c, tokens, n, key, &mapped);
    int32_t slot = pl_vattn_acquire(c->va);
    if (slot < 0) return pl_fail(PL_ERR_CAPACITY, "kv allocate_prompt: every request slot is in use");
    /* hits: computed pages of running or finished sequences, mapped, not computed again (the
     * manager counts those mapped now once) */
    pl_status st = hit > 0 ? pl_kv_allocate_slot_shared(&c->mgr, t, n, slot, mapped)
                           : pl_kv_allocate_slot(&c->mgr, t, tokens, n, slot, n_cached);
    if (st == PL_OK && c->vp_cache) {
        st = pl_vattn_map_prefix(c->va, slot, tokens, hit, key, &hit);
        c->mgr.prefix_queries += (uint64_t)n;
        c->mgr.prefix_hits += (uint64_t)hit * (uint64_t)c->mgr.cfg.block_size;
    }
    if (st != PL_OK) {
        pl_vattn_release(c->va, slot);
        if (t->live) pl_kv_free_table(&c->mgr, t);
        vattn_sync_shared(c);
        return st;
    }
    pl_vattn_set_need(c->va, slot, n);
    vattn_sync_shared(c);
    if (n_cached) *n_cached = hit * c->mgr.cfg.block_size;
    return PL_OK;
}

static void vattn_follow(pl_kv_cache *c, const pl_block_table *t, int freeing) {
    if (!c->va || !t->live) return;
    const int32_t slot = pl_kv_slot_of(&c->mgr, t);
    if (freeing) pl_vattn_release(c->va, slot);
    else pl_vattn_set_need(c->va, slot, t->n_tokens);
    vattn_sync_shared(c);
}

static int32_t vattn_admit_blocks(pl_kv_cache *c, const int32_t *tokens, int32_t n, uint64_t key,
                                  int32_t first, int32_t final_tokens, int32_t n_given) {
    /* hits on pages mapped now take none; cached ones take theirs back from the free pages */
    int32_t mapped = 0;
    if (!n_given) vattn_probe(c, tokens, n, key, &mapped);
    return contig_admit_blocks(c, tokens, n, key, first, final_tokens, 0) - n_given - mapped;
}

/* One sequence: its slot's pages for its whole length. More (n, best_of, beam, shared): the
 * prompt's pages once, then each sequence's own pages and a copied partial one, as paged. */
static int64_t vattn_request_blocks(const pl_kv_cache *c, int32_t n_prompt, int32_t max_tokens,
                                    int64_t seqs, int32_t k_spec) {
    if (seqs <= 1) return pl_kv_blocks_for(&c->mgr, n_prompt + max_tokens);
    return paged_request_blocks(c, n_prompt, max_tokens, seqs, k_spec);
}

static pl_status vattn_prepare(pl_kv_cache *c) {
    return c->va ? pl_vattn_prepare_step(c->va) : PL_OK; /* pages the step lacks */
}

static void vattn_stats(const pl_kv_cache *c, pl_engine_stats *s) {
    if (!c->va) return;
    pl_vattn_stats v;
    pl_vattn_get_stats(c->va, &v);
    uint64_t regions = (uint64_t)pl_vattn_get_config(c->va)->n_regions;
    s->vattn_pages_mapped_sync = v.pages_mapped_sync;
    s->vattn_pages_mapped_bg = v.pages_mapped_bg;
    s->vattn_pages_unmapped = v.pages_unmapped_sync + v.pages_unmapped_bg;
    s->vattn_slots_acquired = v.slots_acquired;
    s->vattn_slots_reused = v.slots_reused;
    s->vattn_map_seconds = (double)v.map_ns_in_step * 1e-9;
    s->vattn_pages_committed = v.rows_committed * (int64_t)regions;
    s->blocks_cached = v.rows_cached; /* --vattn-share's prefix cache: unmapped pages kept */
}

/* A vattention rollback (paged_truncate: no groups there) lowers the sequence's length: its slot
 * needs fewer pages (vattn_follow), but the pages it had stay mapped (cached above the need),
 * so the next proposals take no mapping. */
static const kv_ops PAGED = {"paged", 1, 0, setup_blocks, paged_admit_blocks, paged_has_place,
                             paged_allocate, paged_request_blocks, no_prepare, no_stats,
                             paged_truncate, no_follow};
static const kv_ops CONTIGUOUS = {"contiguous", 0, 0, setup_blocks, contig_admit_blocks,
                                  run_has_place, contig_allocate, contig_request_blocks,
                                  no_prepare, no_stats, no_truncate, no_follow};
static const kv_ops VATTENTION = {"vattention", 0, 1, vattn_setup, vattn_admit_blocks,
                                  run_has_place, vattn_allocate, vattn_request_blocks,
                                  vattn_prepare, vattn_stats, paged_truncate, vattn_follow};

/* By pl_kv_layout_mode. */
static const kv_ops *const LAYOUTS[] = {&PAGED, &CONTIGUOUS, &VATTENTION};
#define N_LAYOUTS ((int)(sizeof LAYOUTS / sizeof LAYOUTS[0]))

static int known_layout(pl_kv_layout_mode m) { return (int)m >= 0 && (int)m < N_LAYOUTS; }
/* An unknown mode is the paged layout's (pl_kv_cache_check_config refuses it first). */
static const kv_ops *ops_of(pl_kv_layout_mode m) { return known_layout(m) ? LAYOUTS[m] : &PAGED; }

static const char *const RESERVES[] = {"max", "pow2", "oracle"}; /* by pl_reserve_policy */

int pl_kv_layout_parse(const char *name, pl_kv_layout_mode *out) {
    for (int i = 0; i < N_LAYOUTS; i++)
        if (!strcmp(name, LAYOUTS[i]->name)) {
            *out = (pl_kv_layout_mode)i;
            return 0;
        }
    return -1;
}

const char *pl_kv_layout_mode_name(pl_kv_layout_mode m) { return ops_of(m)->name; }
const char *pl_kv_layout_names(void) { return "paged, contiguous or vattention"; }
int pl_kv_layout_mode_shares(pl_kv_layout_mode m) { return ops_of(m)->shares; }
int pl_kv_layout_mode_maps_pages(pl_kv_layout_mode m) { return ops_of(m)->maps_pages; }

int pl_kv_reserve_parse(const char *name, pl_reserve_policy *out) {
    for (int i = 0; i < (int)(sizeof RESERVES / sizeof RESERVES[0]); i++)
        if (!strcmp(name, RESERVES[i])) {
            *out = (pl_reserve_policy)i;
            return 0;
        }
    return -1;
}

const char *pl_kv_allocation_name(const pl_engine_config *c) {
    if (c->kv_layout != PL_KV_LAYOUT_CONTIGUOUS) return pl_kv_layout_mode_name(c->kv_layout);
    return c->reserve >= PL_RESERVE_MAX && c->reserve <= PL_RESERVE_ORACLE ? RESERVES[c->reserve]
                                                                          : "?";
}

/* ---- create / destroy ---- */

pl_status pl_kv_cache_check_config(const pl_engine_config *c) {
    if (!known_layout(c->kv_layout))
        return pl_fail(PL_ERR_INVALID_ARG, "unknown kv-layout %d", (int)c->kv_layout);
    if (c->kv_layout == PL_KV_LAYOUT_VATTENTION) {
        if (c->preemption_mode == PL_PREEMPT_SWAP || c->swap_space)
            return pl_fail(PL_ERR_INVALID_ARG, "kv-layout vattention preempts by recompute only: "
                           "drop --swap-space and --preemption-mode swap");
        uint64_t p = c->kv_page_size ? c->kv_page_size : 4096;
        if (p != 4096 && p != 65536 && p != (2u << 20))
            return pl_fail(PL_ERR_INVALID_ARG, "kv-page-size %llu is not supported: use 4K, 64K "
                           "or 2M", (unsigned long long)p);
    }
    if (c->reserve < PL_RESERVE_MAX || c->reserve > PL_RESERVE_ORACLE)
        return pl_fail(PL_ERR_INVALID_ARG, "unknown reserve policy %d", (int)c->reserve);
    if (c->kv_layout == PL_KV_LAYOUT_CONTIGUOUS && (c->preemption_mode == PL_PREEMPT_SWAP ||
                                                    c->swap_space))
        return pl_fail(PL_ERR_INVALID_ARG, "kv-layout contiguous preempts by recompute only: "
                       "drop --swap-space and --preemption-mode swap");
    if (c->kv_layout == PL_KV_LAYOUT_CONTIGUOUS && (c->speculative_model || c->speculative_ngram))
        return pl_fail(PL_ERR_INVALID_ARG, "speculative decoding needs kv-layout paged (rejected "
                       "proposals are rolled back block by block)");
    return PL_OK;
}

static pl_kv_layout layout_of(const pl_engine_config *c, const pl_kv_cache_shape *sh) {
    return (pl_kv_layout){
        .dtype = KV_DTYPES[c->kv_cache_dtype], .block_size = c->block_size,
        .n_kv_heads = sh->n_kv_heads, .head_dim = sh->head_dim,
    };
}

/* 1: KV cache groups over one pool (gemma2's equal halves); 2: layer kinds, two pools (any
 * other mix of window and full layers), when its window pool is smaller than the pool the
 * budget gives every layer (else nothing would be saved); 0: one table per sequence. */
static int groups_for(const pl_engine_config *c, const pl_kv_cache_shape *sh, size_t per_block,
                      uint64_t budget) {
    if (c->kv_groups_off || sh->embedding || c->kv_layout != PL_KV_LAYOUT_PAGED)
        return 0;
    if (sh->mixed_window > 0) return 1;
    if (sh->kinds_window <= 0 || !sh->tensor_window || c->block_size <= 0) return 0;
    return (uint64_t)window_pool_blocks(c, sh->kinds_window, c->block_size) < budget / per_block
               ? 2 : 0;
}

size_t pl_kv_cache_bytes_per_block(const pl_engine_config *c, const pl_kv_cache_shape *sh) {
    pl_kv_layout l = layout_of(c, sh);
    return pl_kv_bytes_per_block_shaped(&l, sh->n_layers, sh->layer_shapes);
}

pl_status pl_kv_cache_create(pl_engine_config *cfg, const pl_kv_cache_shape *sh,
                             int32_t max_model_len, size_t draft_bytes_per_block,
                             pl_kv_cache **out) {
    *out = NULL;
    pl_kv_layout l = layout_of(cfg, sh);
    PL_TRY(pl_kv_layout_check(&l)); /* e.g. q8_0 with head_dim 8: names both */
    pl_kv_cache *c = calloc(1, sizeof *c);
    if (!c) return pl_fail(PL_ERR_NOMEM, "out of memory");
    c->ops = ops_of(cfg->kv_layout);
    c->mw = &c->mgr;
    size_t per_block = pl_kv_bytes_per_block_shaped(&l, sh->n_layers, sh->layer_shapes);
    uint64_t budget = cfg->kv_cache_memory;
    const int groups = per_block ? groups_for(cfg, sh, per_block, budget) : 0;
    c->mgr.cfg.kv_groups = groups ? 2 : 1;
    c->kinds = groups == 2;
    if (groups == 1) per_block = pl_kv_bytes_per_block_shaped(&l, sh->n_layers / 2, NULL);
    if (draft_bytes_per_block) { /* the draft's share: both caches hold as many tokens */
        size_t dpb = draft_bytes_per_block;
        c->draft_bytes = (uint64_t)((double)budget * (double)dpb / (double)(dpb + per_block));
        budget -= c->draft_bytes;
    }
    pl_status st = c->ops->setup(c, cfg, sh, &l, budget, max_model_len);
    if (st != PL_OK) {
        pl_kv_cache_destroy(c);
        return st;
    }
    *out = c;
    return PL_OK;
}

pl_status pl_kv_cache_create_blocks(const pl_kv_manager_config *mc, pl_kv_cache **out) {
    *out = NULL;
    pl_kv_cache *c = calloc(1, sizeof *c);
    if (!c) return pl_fail(PL_ERR_NOMEM, "out of memory");
    c->mw = &c->mgr;
    c->ops = mc->policy == PL_KV_POLICY_PAGED   ? &PAGED
             : mc->policy == PL_KV_POLICY_VATTN ? &VATTENTION : &CONTIGUOUS;
    pl_status st = pl_kv_manager_init(&c->mgr, mc);
    if (st != PL_OK) {
        free(c);
        return st;
    }
    c->has_mgr = 1;
    *out = c;
    return PL_OK;
}

void pl_kv_cache_destroy(pl_kv_cache *c) {
    if (!c) return;
    if (c->has_mgr) pl_kv_manager_destroy(&c->mgr);
    if (c->has_mgr_w) pl_kv_manager_destroy(&c->mgr_w);
    if (c->va) {
        c->store.base = NULL; /* a view: the reservation goes with the slots */
        pl_vattn_destroy(c->va);
    }
    pl_kv_store_destroy(&c->store);
    if (c->has_swap) pl_kv_store_destroy(&c->swap);
    free(c);
}

/* ---- parts and shape ---- */

pl_kv_store *pl_kv_cache_store(pl_kv_cache *c) { return &c->store; }
pl_kv_store *pl_kv_cache_swap_store(pl_kv_cache *c) { return c->has_swap ? &c->swap : NULL; }
pl_kv_manager *pl_kv_cache_manager(pl_kv_cache *c) { return &c->mgr; }
const pl_kv_manager *pl_kv_cache_manager_c(const pl_kv_cache *c) { return &c->mgr; }
struct pl_vattn *pl_kv_cache_vattn(pl_kv_cache *c) { return c->va; }
uint64_t pl_kv_cache_draft_bytes(const pl_kv_cache *c) { return c->draft_bytes; }

pl_status pl_kv_cache_check(const pl_kv_cache *c) {
    PL_TRY(pl_kv_manager_check(&c->mgr));
    if (c->has_mgr_w) PL_TRY(pl_kv_manager_check(&c->mgr_w));
    return c->va ? pl_vattn_check(c->va) : PL_OK;
}

int32_t pl_kv_cache_block_size(const pl_kv_cache *c) { return c->mgr.cfg.block_size; }
int32_t pl_kv_cache_num_blocks(const pl_kv_cache *c) { return c->mgr.cfg.num_blocks; }
int32_t pl_kv_cache_max_blocks_per_seq(const pl_kv_cache *c) {
    return c->mgr.cfg.max_blocks_per_seq;
}
int32_t pl_kv_cache_window(const pl_kv_cache *c) { return c->mw->cfg.sliding_window; }
int32_t pl_kv_cache_copy_blocks(const pl_kv_cache *c) {
    return c->mgr.cfg.num_blocks + (c->kinds ? c->mgr_w.cfg.num_blocks : 0);
}
const pl_kv_manager *pl_kv_cache_window_manager_c(const pl_kv_cache *c) { return c->mw; }
pl_kv_manager *pl_kv_cache_window_manager(pl_kv_cache *c) { return c->mw; }
int pl_kv_cache_grouped(const pl_kv_cache *c) { return grouped(c); }
int pl_kv_cache_lazy_prefill(const pl_kv_cache *c) { return lazy(c); }
/* The paged layout, or vattention with --vattn-share (its forks map the same pages). */
static int shares(const pl_kv_cache *c) {
    return c->ops->shares || (c->va && pl_vattn_shares(c->va));
}
int pl_kv_cache_shares(const pl_kv_cache *c) { return shares(c); }
const char *pl_kv_cache_layout_name(const pl_kv_cache *c) { return c->ops->name; }

/* ---- admission ---- */

int32_t pl_kv_cache_blocks_free(const pl_kv_cache *c) { return pl_kv_num_free(&c->mgr); }

int32_t pl_kv_cache_headroom(const pl_kv_cache *c) {
    return pl_kv_cache_blocks_free(c) - c->mgr.watermark_blocks;
}

int32_t pl_kv_cache_capacity(const pl_kv_cache *c) {
    return c->mgr.cfg.num_blocks - c->mgr.watermark_blocks;
}

bool pl_kv_cache_too_long(const pl_kv_cache *c, int32_t n_tokens) {
    return pl_kv_blocks_for(&c->mgr, n_tokens + 1) > c->mgr.cfg.max_blocks_per_seq;
}

int64_t pl_kv_cache_request_blocks(const pl_kv_cache *c, int32_t n_prompt, int32_t max_tokens,
                                   int64_t n_seqs, int32_t k_spec) {
    return c->ops->request_blocks(c, n_prompt, max_tokens, n_seqs, k_spec);
}

int32_t pl_kv_cache_admit_blocks(pl_kv_cache *c, const int32_t *tokens, int32_t n, uint64_t key,
                                 int32_t first, int32_t final_tokens, int32_t n_given) {
    return c->ops->admit_blocks(c, tokens, n, key, first, final_tokens, n_given);
}

pl_alloc_status pl_kv_cache_can_admit(const pl_kv_cache *c, int32_t need) {
    pl_kv_stats st;
    pl_kv_get_stats(&c->mgr, &st);
    if (need > st.blocks_total - c->mgr.watermark_blocks) return PL_ALLOC_NEVER;
    if (need > st.blocks_free - c->mgr.watermark_blocks) return PL_ALLOC_LATER;
    return c->ops->has_place(c, need) ? PL_ALLOC_OK : PL_ALLOC_LATER;
}

int32_t pl_kv_cache_probe(pl_kv_cache *c, const int32_t *tokens, int32_t n, uint64_t key) {
    int32_t mapped;
    if (c->vp_cache) return vattn_probe(c, tokens, n, key, &mapped) * c->mgr.cfg.block_size;
    int32_t a = pl_kv_probe_prefix(&c->mgr, tokens, n, key);
    if (!grouped(c)) return a;
    int32_t b = pl_kv_probe_prefix(c->mw, tokens, n, key ^ PL_KV_WINDOW_KEY);
    return a < b ? a : b;
}

/* ---- a sequence's tables ---- */

int32_t pl_kv_cache_tables(const pl_kv_cache *c, pl_block_table *t, pl_block_table *w,
                           pl_block_table **out) {
    out[0] = t;
    if (!grouped(c)) return 1;
    out[1] = w;
    return 2;
}

pl_status pl_kv_cache_allocate(pl_kv_cache *c, pl_block_table *t, pl_block_table *w,
                               const int32_t *tokens, int32_t n, uint64_t key, int32_t max_new,
                               int32_t final_tokens, int32_t *n_cached) {
    return c->ops->allocate(c, t, w, tokens, n, key, max_new, final_tokens, n_cached);
}

/* A layout that shares nothing refuses what would share or roll back blocks. */
static pl_status unshared(const pl_kv_cache *c, const char *what) {
    return pl_fail(PL_ERR_INVALID_ARG, "kv %s: a %s layout shares no blocks", what,
                   c->ops->name);
}

pl_status pl_kv_cache_allocate_shared(pl_kv_cache *c, const pl_block_table *lead,
                                      int32_t n_shared, pl_block_table *t, int32_t n) {
    if (!shares(c)) return unshared(c, "allocate_shared");
    if (grouped(c))
        return pl_fail(PL_ERR_INVALID_ARG, "kv allocate_shared: not with KV cache groups");
    if (c->va) {
        if (!lead->live || n_shared < 1 || (int64_t)n_shared * c->mgr.cfg.block_size >= n ||
            (int64_t)n_shared * c->mgr.cfg.block_size > lead->n_tokens)
            return pl_fail(PL_ERR_INVALID_ARG, "kv allocate_shared: %d shared pages of a %d-token "
                           "lead for %d tokens", (int)n_shared, (int)lead->n_tokens, (int)n);
        return vattn_share(c, pl_kv_slot_of(&c->mgr, lead), t, n, n_shared);
    }
    return pl_kv_allocate_shared(&c->mgr, lead, n_shared, t, n);
}

/* vattention: t's partly filled last page is shared (a fork's), so its next token copies it
 * first (a page the manager does not see: its virtual blocks are never shared). */
static int32_t vattn_cow(const pl_kv_cache *c, const pl_block_table *t, int32_t n_new) {
    const int32_t bs = c->mgr.cfg.block_size;
    if (!c->va || !t->live || n_new <= 0 || t->n_tokens % bs == 0) return 0;
    return pl_vattn_row_shared(c->va, pl_kv_slot_of(&c->mgr, t), t->n_tokens / bs);
}

int32_t pl_kv_cache_append_needed(const pl_kv_cache *c, const pl_block_table *t,
                                  const pl_block_table *w, int32_t n_new) {
    int32_t need = pl_kv_append_blocks_needed(&c->mgr, t, n_new) + vattn_cow(c, t, n_new);
    if (!grouped(c)) return need;
    int32_t need_w = pl_kv_append_blocks_needed(c->mw, w, n_new);
    if (!c->kinds) return need + need_w;
    /* the window pool never decides (window_pool_blocks); should it lack, never now */
    return need_w <= pl_kv_num_free(c->mw) ? need : c->mgr.cfg.num_blocks + 1;
}

bool pl_kv_cache_can_append(const pl_kv_cache *c, const pl_block_table *t,
                            const pl_block_table *w, int32_t n_new) {
    if (!pl_kv_can_append(&c->mgr, t, n_new)) return false;
    if (!grouped(c) && !vattn_cow(c, t, n_new)) return true;
    if (c->kinds) return pl_kv_can_append(c->mw, w, n_new); /* each pool its own */
    return (!grouped(c) || pl_kv_can_append(&c->mgr, w, n_new)) &&
           pl_kv_cache_append_needed(c, t, w, n_new) <= pl_kv_num_free(&c->mgr);
}

pl_status pl_kv_cache_append(pl_kv_cache *c, pl_block_table *t, pl_block_table *w,
                             int32_t n_new, pl_block_copy cow[2]) {
    cow[0] = cow[1] = (pl_block_copy){-1, -1};
    if (!grouped(c)) {
        if (vattn_cow(c, t, n_new)) { /* copy-on-write of the shared partial page, all or none */
            if (!pl_kv_cache_can_append(c, t, w, n_new))
                return pl_fail(PL_ERR_CAPACITY, "kv append: %d tokens need %d pages, %d free",
                               (int)n_new, (int)pl_kv_cache_append_needed(c, t, w, n_new),
                               (int)pl_kv_num_free(&c->mgr));
            const int32_t bs = c->mgr.cfg.block_size;
            pl_status st = pl_vattn_unshare(c->va, pl_kv_slot_of(&c->mgr, t), t->n_tokens / bs);
            vattn_sync_shared(c);
            PL_TRY(st);
        }
        PL_TRY(pl_kv_append_slots(&c->mgr, t, n_new, &cow[0]));
        c->ops->follow(c, t, 0);
        return PL_OK;
    }
    /* All or none, checked first: a copy-on-write made by the first append must reach the
     * engine, so the second may not fail after it. */
    if (!pl_kv_cache_can_append(c, t, w, n_new))
        return pl_fail(PL_ERR_CAPACITY, "kv append: %d tokens need %d blocks in the two KV cache "
                       "groups, %d free", (int)n_new,
                       (int)pl_kv_cache_append_needed(c, t, w, n_new), (int)c->mgr.pool.n_free);
    PL_TRY(pl_kv_append_slots(&c->mgr, t, n_new, &cow[0]));
    pl_status st = pl_kv_append_slots(c->mw, w, n_new, &cow[1]);
    PL_ASSERT(st == PL_OK);
    if (c->kinds && cow[1].src >= 0) { /* the store names window blocks after the full ones */
        cow[1].src += c->mgr.cfg.num_blocks;
        cow[1].dst += c->mgr.cfg.num_blocks;
    }
    return st;
}

pl_status pl_kv_cache_truncate(pl_kv_cache *c, pl_block_table *t, pl_block_table *w,
                               int32_t n_keep) {
    PL_TRY(c->ops->truncate(c, t, w, n_keep));
    c->ops->follow(c, t, 0);
    return PL_OK;
}

pl_status pl_kv_cache_commit(pl_kv_cache *c, pl_block_table *t, pl_block_table *w,
                             const int32_t *tokens, int32_t n_computed) {
    PL_TRY(pl_kv_commit(&c->mgr, t, tokens, n_computed));
    if (c->vp_cache && t->live) { /* vAttention: the full computed pages become hits */
        int32_t full = (n_computed < t->n_tokens ? n_computed : t->n_tokens) /
                       c->mgr.cfg.block_size;
        pl_vattn_register(c->va, pl_kv_slot_of(&c->mgr, t), tokens, full);
    }
    return grouped(c) ? pl_kv_commit(c->mw, w, tokens, n_computed) : PL_OK;
}

pl_status pl_kv_cache_fork(pl_kv_cache *c, const pl_block_table *pt, const pl_block_table *pw,
                           pl_block_table *t, pl_block_table *w) {
    if (!shares(c)) return unshared(c, "fork");
    if (c->va) { /* every page of the parent mapped; the partial one copied at the next write */
        if (!pt->live || t->live || pt == t)
            return pl_fail(PL_ERR_INVALID_ARG, "kv fork: the parent table is empty or the "
                           "child's in use");
        return vattn_share(c, pl_kv_slot_of(&c->mgr, pt), t, pt->n_tokens, pt->n_blocks);
    }
    PL_TRY(pl_kv_fork(&c->mgr, pt, t));
    if (!grouped(c)) return PL_OK;
    pl_status st = pl_kv_fork(c->mw, pw, w);
    if (st != PL_OK) pl_kv_free_table(&c->mgr, t);
    return st;
}

pl_status pl_kv_cache_refork(pl_kv_cache *c, const pl_block_table *pt, const pl_block_table *pw,
                             pl_block_table *t, pl_block_table *w) {
    if (!c->va || !pt->live || !t->live || pt == t) {
        pl_kv_cache_free(c, t, w);
        return pl_kv_cache_fork(c, pt, pw, t, w);
    }
    /* the slot stays taken: the manager's table is made again over it, the slots map what
     * differs (beams share most of their history) */
    const int32_t slot = pl_kv_slot_of(&c->mgr, t);
    pl_kv_free_table(&c->mgr, t);
    pl_status st = pl_kv_allocate_slot_shared(&c->mgr, t, pt->n_tokens, slot, pt->n_blocks);
    if (st == PL_OK) st = pl_vattn_share(c->va, pl_kv_slot_of(&c->mgr, pt), slot, pt->n_blocks);
    if (st == PL_OK) pl_vattn_set_need(c->va, slot, pt->n_tokens);
    else {
        pl_vattn_release(c->va, slot);
        pl_kv_free_table(&c->mgr, t);
    }
    vattn_sync_shared(c);
    return st;
}

void pl_kv_cache_free(pl_kv_cache *c, pl_block_table *t, pl_block_table *w) {
    c->ops->follow(c, t, 1);
    pl_kv_free_table(&c->mgr, t);
    pl_kv_free_table(c->mw, w); /* no-op when empty */
}

/* Layer kinds: a group's tables split by pool, the window tables (global == 0) in *mw. */
static int32_t split_tables(pl_block_table *const *tables, int32_t n, pl_block_table **full,
                            pl_block_table **win, int32_t *n_win) {
    int32_t nf = 0;
    *n_win = 0;
    for (int32_t i = 0; i < n; i++) {
        if (tables[i]->global) full[nf++] = tables[i];
        else win[(*n_win)++] = tables[i];
    }
    return nf;
}

/* Both pools' answers: NEVER if either's, OK if both's, else LATER. */
static pl_alloc_status both(pl_alloc_status a, pl_alloc_status b) {
    if (a == PL_ALLOC_NEVER || b == PL_ALLOC_NEVER) return PL_ALLOC_NEVER;
    return a == PL_ALLOC_OK && b == PL_ALLOC_OK ? PL_ALLOC_OK : PL_ALLOC_LATER;
}

static pl_alloc_status can_swap(const pl_kv_cache *c, pl_block_table *const *tables, int32_t n,
                                int out) {
    pl_alloc_status (*can)(const pl_kv_manager *, pl_block_table *const *, int32_t) =
        out ? pl_kv_can_swap_out : pl_kv_can_swap_in;
    if (!c->kinds) return can(&c->mgr, tables, n);
    pl_block_table *full[n > 0 ? n : 1], *win[n > 0 ? n : 1];
    int32_t nw, nf = split_tables(tables, n, full, win, &nw);
    return both(can(&c->mgr, full, nf), can(c->mw, win, nw));
}

/* Swap out (out = 1) or in; layer kinds: each pool its tables, the window pairs named after
 * the full blocks of each store (pl_kv_store_copy). */
static pl_status swap(pl_kv_cache *c, pl_block_table *const *tables, int32_t n,
                      pl_block_copy *map, int32_t cap, int32_t *n_map, int out) {
    pl_status (*op)(pl_kv_manager *, pl_block_table *const *, int32_t, pl_block_copy *, int32_t,
                    int32_t *) = out ? pl_kv_swap_out : pl_kv_swap_in;
    if (!c->kinds) return op(&c->mgr, tables, n, map, cap, n_map);
    if (can_swap(c, tables, n, out) != PL_ALLOC_OK)
        return pl_fail(PL_ERR_CAPACITY, "kv swap %s: a pool of the two layer kinds lacks blocks",
                       out ? "out" : "in");
    pl_block_table *full[n > 0 ? n : 1], *win[n > 0 ? n : 1];
    int32_t nw, nf = split_tables(tables, n, full, win, &nw), kf = 0, kw = 0;
    PL_TRY(op(&c->mgr, full, nf, map, cap, &kf));
    pl_status st = op(c->mw, win, nw, map + kf, cap - kf, &kw);
    PL_ASSERT(st == PL_OK); /* checked first: the full pool's pairs must reach the engine */
    const int32_t np = c->mgr.cfg.num_blocks, ns = c->mgr.cfg.num_swap_blocks;
    for (int32_t i = kf; i < kf + kw; i++) {
        map[i].src += out ? np : ns;
        map[i].dst += out ? ns : np;
    }
    *n_map = kf + kw;
    return st;
}

pl_alloc_status pl_kv_cache_can_swap_out(const pl_kv_cache *c, pl_block_table *const *tables,
                                         int32_t n) {
    return can_swap(c, tables, n, 1);
}
pl_alloc_status pl_kv_cache_can_swap_in(const pl_kv_cache *c, pl_block_table *const *tables,
                                        int32_t n) {
    return can_swap(c, tables, n, 0);
}
pl_status pl_kv_cache_swap_out(pl_kv_cache *c, pl_block_table *const *tables, int32_t n,
                               pl_block_copy *map, int32_t cap, int32_t *n_map) {
    return swap(c, tables, n, map, cap, n_map, 1);
}
pl_status pl_kv_cache_swap_in(pl_kv_cache *c, pl_block_table *const *tables, int32_t n,
                              pl_block_copy *map, int32_t cap, int32_t *n_map) {
    return swap(c, tables, n, map, cap, n_map, 0);
}

pl_status pl_kv_cache_prepare_step(pl_kv_cache *c) { return c->ops->prepare_step(c); }

/* ---- statistics ---- */

/* The manager's stats; with pages shared (vAttention) a shared page's tokens counted once (the
 * manager counts its virtual blocks, one per sharer). */
static void kv_stats(const pl_kv_cache *c, pl_kv_stats *k) {
    pl_kv_get_stats(&c->mgr, k);
    if (!c->va || c->mgr.shared_pages == 0) return;
    int64_t tokens = pl_vattn_tokens_stored(c->va);
    if (tokens < 0) return;
    k->tokens_stored = tokens;
    k->waste = k->blocks_used > 0
                   ? 1.0 - (double)tokens / ((double)k->blocks_used * c->mgr.cfg.block_size)
                   : 0.0;
}

void pl_kv_cache_stats(const pl_kv_cache *c, pl_engine_stats *s) {
    pl_kv_stats k;
    kv_stats(c, &k);
    s->blocks_total = k.blocks_total;
    s->blocks_used = k.blocks_used;
    s->blocks_cached = k.blocks_cached;
    s->swap_total = k.swap_total;
    s->swap_used = k.swap_used;
    s->kv_usage = k.blocks_total ? (double)k.blocks_used / k.blocks_total : 0;
    s->waste = k.waste;
    s->tokens_stored = k.tokens_stored;
    s->prefix_queries = k.prefix_queries;
    s->prefix_hits = k.prefix_hits;
    s->sliding_window = c->mw->cfg.sliding_window;
    s->window_freed_blocks = k.window_freed;
    if (c->kinds) {
        pl_kv_stats w;
        pl_kv_get_stats(c->mw, &w);
        s->window_freed_blocks = w.window_freed;
        s->window_blocks_total = w.blocks_total;
        s->window_blocks_used = w.blocks_used;
        s->window_kv_usage = w.blocks_total ? (double)w.blocks_used / w.blocks_total : 0;
        s->blocks_all_full = c->blocks_all_full;
        s->prefix_queries += w.prefix_queries; /* both tables, as with groups over one pool */
        s->prefix_hits += w.prefix_hits;
    }
    c->ops->stats(c, s);
}

void pl_kv_cache_sample(pl_kv_cache *c, int32_t n_seqs) {
    pl_kv_stats k;
    kv_stats(c, &k);
    double usage = k.blocks_total ? (double)k.blocks_used / k.blocks_total : 0;
    double slots = (double)k.blocks_used * c->mgr.cfg.block_size;
    int64_t refs = pl_kv_block_refs(&c->mgr);
    c->samples++;
    c->usage_sum += usage;
    if (usage > c->usage_peak) c->usage_peak = usage;
    if (k.blocks_used > 0 && k.waste > c->waste_peak) c->waste_peak = k.waste;
    if (k.blocks_used > c->peak_blocks) c->peak_blocks = k.blocks_used;
    if (n_seqs > c->peak_seqs) c->peak_seqs = n_seqs;
    c->tokens_sum += (double)k.tokens_stored;
    c->slots_sum += slots;
    c->blocks_sum += k.blocks_used;
    c->refs_sum += (double)refs;
    c->future_sum += (double)k.reserved_future;
}

void pl_kv_cache_samples(const pl_kv_cache *c, pl_kv_samples *ks) {
    memset(ks, 0, sizeof *ks);
    ks->block_refs = pl_kv_block_refs(&c->mgr);
    ks->kv_samples = c->samples;
    if (!c->samples) return;
    double n = (double)c->samples;
    double pool_slots = (double)c->mgr.cfg.num_blocks * c->mgr.cfg.block_size;
    ks->peak_kv_usage = c->usage_peak;
    ks->mean_kv_usage = c->usage_sum / n;
    ks->peak_waste = c->waste_peak;
    ks->mean_waste = c->slots_sum > 0 ? 1.0 - c->tokens_sum / c->slots_sum : 0;
    ks->mean_token_fraction = pool_slots > 0 ? c->tokens_sum / n / pool_slots : 0;
    ks->peak_blocks_used = c->peak_blocks;
    ks->peak_batch_seqs = c->peak_seqs;
    ks->mean_reserved = c->slots_sum > 0 ? c->future_sum / c->slots_sum : 0;
    ks->mean_sharing_saved = c->refs_sum > 0 ? 1.0 - c->blocks_sum / c->refs_sum : 0;
}
