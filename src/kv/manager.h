/* kv/manager — who holds which KV block: block tables, prefix caching, copy-on-write, swapping.
 *
 * The manager owns the primary block pool, an optional swap pool (num_swap_blocks may be 0) and
 * the bookkeeping of every block table. It deals in block ids only and never touches K/V bytes:
 * the operations that need bytes moved return (src, dst) block pairs and the engine applies them
 * with pl_kv_store_copy before the next forward step, in this order:
 *     1. swap-out pairs (primary -> swap)   the freed primary blocks may be handed out again
 *                                            in the same step, so copy them first;
 *     2. swap-in pairs  (swap -> primary);
 *     3. copy-on-write pairs (primary -> primary);
 *     4. the forward pass writes the new tokens' K/V.
 * Allocation itself never writes bytes, so this order is safe however calls interleave in a step.
 *
 * Block tables. A pl_block_table is embedded by the caller in its sequence (zero-initialised =
 * empty) and passed to every call, so the manager needs no map from sequence ids; it counts the
 * tables that hold blocks. pl_kv_allocate_prompt and pl_kv_fork make a table live;
 * pl_kv_free_table releases everything it holds (call it on every path: finish, abort, error).
 *
 * Invariants (checked by pl_kv_manager_check and the property test):
 *  - every block of either pool is free or referenced, never both; its ref count equals the
 *    number of (table, position) entries naming it;
 *  - only a table's last block may be partly filled, so waste is below one block per table;
 *  - a block with ref > 1 is never written: append_slots copies a shared partly-filled last block
 *    first (copy-on-write), and full blocks are never written again;
 *  - a block holds a prefix hash only once its K/V are computed (pl_kv_commit).
 *
 * Prefix caching (automatic, as in vLLM v1): a prompt's full blocks are looked up along the hash
 * chain; hits are shared (ref++), and at least the prompt's last token is always recomputed so
 * its logits exist, hence at most floor((n - 1) / block_size) blocks hit. Disabled at creation:
 * no hashes, no hits, commit does nothing.
 *
 * Where pagellm differs from vLLM:
 *  - Allocation is per sequence table, with v0-style fork/copy-on-write and swap (v1 dropped both:
 *    pagellm targets CPUs, where a swap pool in a file is cheap and parallel sampling / beam search
 *    share blocks between sequences of one request).
 *  - A hit is verified token for token along the parent chain (see block_pool.h), never trusted
 *    on the hash alone.
 *  - commit deduplicates: a just-computed full block whose whole prefix is already cached is
 *    replaced in the table by the cached block and the fresh one is released (v0's prefix caching
 *    allocator did this; v1 keeps duplicates). A table's block ids may therefore change at commit;
 *    the contents they stand for do not.
 *  - Hash-less freed blocks go to the head of the free queue (v1: tail).
 *  - Swap keeps blocks shared inside a group (one copy per physical block). Swapped blocks lose
 *    their prefix hash; the primary copies they leave behind stay in the prefix cache until
 *    evicted, and the table is re-hashed on the next commit after swap-in.
 *  - One thread, no locks.
 *
 * Sliding window (cfg.sliding_window = W > 0, every layer windowed; vLLM's SlidingWindowManager
 * idea). A query at position p reads positions > p - W only, so once a table's K/V are computed
 * up to c (pl_kv_commit), its blocks wholly below c - W + 1 are released at once and their
 * entries become PL_KV_NO_BLOCK; t->n_dropped counts them (they are always a leading run). The
 * table keeps its length, so positions and slots do not move. Everything else skips those
 * entries: fork (the child shares the placeholders), free, swap (only held blocks move),
 * truncate (never cuts below c, so never reaches them), copy-on-write (the last block is always
 * held). Prefix caching: a released hashed block stays cached until evicted, so other prompts
 * still hit it; a prompt hits the leading run of still-cached blocks (the chain is verified
 * from block 0, so a hit stops at the first evicted block), and of those hits it takes only the
 * blocks the first computed position's window reaches (the rest stay placeholders). A block
 * whose parent entry is a placeholder is not registered (its chain link is gone).
 *
 * KV cache groups (vLLM v1's hybrid allocator idea). A mixed model (some
 * layers global) needs one table per sequence and group over this one pool: the window
 * layers' table (t->global = 0) releases behind cfg.sliding_window as above, the global layers'
 * table (t->global = 1) never releases. The manager treats them as unrelated tables; keeping a
 * sequence's two tables in step is the caller's job, and the two groups must pass different
 * extra keys, because a block of one group holds other layers' K/V than the same tokens' block
 * of the other (a hit across groups would read wrong data). In step means: both tables are
 * allocated together with the same cached length (pl_kv_allocate_prompt_pair), then get the
 * same appends (all or none: check both first, or roll the grown one back with pl_kv_truncate),
 * commits, truncates and forks, are freed together and swap in one group. test_kv_property
 * plays exactly this protocol; kv/cache.h is the engine.s implementation of it. With layer kinds
 * (kv/cache.h: Gemma 3 / 4) the window tables live in a second manager of the same block size,
 * the window kind's pool, under the same protocol (each call goes to its table's manager).
 *
 * Contiguous layouts (the PagedAttention paper's Orca baselines, for benchmarks; kv/reserve.c).
 * With policy != PL_KV_POLICY_PAGED every table holds ONE run of consecutive block ids, reserved
 * whole at admission (first fit over block ids, so external fragmentation is real) for the
 * sequence's maximum length (MAX), the next power of two of its final length (POW2) or exactly
 * its final length (ORACLE). Reserved blocks count as used; the slots no token fills yet count
 * as waste, so waste = 1 - tokens stored / reserved slots. Nothing is shared: prefix caching,
 * fork, rollback (truncate) and the swap pool are refused: the first two by kv/cache.c's layout
 * table (the manager's pl_kv_fork, pl_kv_allocate_shared and pl_kv_truncate are the paged
 * policy's), the others at init, which also drops a sliding window. A sequence that outgrows its reservation (it cannot when
 * the final length is right) gets further blocks as in the paged layout.
 *
 * The vAttention policy (PL_KV_POLICY_VATTN). A block is one page of every region and its ids
 * are virtual: the pool has cfg.n_slots × max_blocks_per_seq blocks, and a table in slot s
 * holds blocks s × max_blocks_per_seq + i (consecutive, so the kernel reads one contiguous
 * array). cfg.num_blocks is the physical capacity (page rows of the budget): admission, append
 * and the stats count blocks against it, so free = num_blocks - (blocks held - shared_pages),
 * shared_pages being the held blocks whose page another table maps too (--vattn-share). The
 * manager knows nothing of the pages: kv/cache.c's vAttention operations take the slot from the
 * slots (kv/vattn.h), tell it its need after every allocation, append and truncate, and give it
 * back before the table is freed. Swapping and prefix caching are refused as in the contiguous
 * layouts (with --vattn-share the slots keep a prefix cache of their own, kv/vattn.h); pl_kv_first_fit answers whether a slot is free.
 */
#ifndef PL_KV_MANAGER_H
#define PL_KV_MANAGER_H

#include "base/status.h"
#include "kv/block_pool.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    PL_KV_POLICY_PAGED = 0,       /* blocks on demand, shared by fork and the prefix cache */
    PL_KV_POLICY_MAX,             /* contiguous: reserve max_seq_tokens per sequence */
    PL_KV_POLICY_POW2,            /* contiguous: the next power of two >= the final length */
    PL_KV_POLICY_ORACLE,          /* contiguous: exactly the final length */
    PL_KV_POLICY_VATTN,           /* vAttention: a request slot, pages mapped on demand */
} pl_kv_policy;

typedef struct {
    int32_t block_size;           /* tokens per block (16 is vLLM's default) */
    int32_t num_blocks;           /* primary pool blocks */
    int32_t num_swap_blocks;      /* swap pool blocks; 0 = no swapping */
    int32_t max_blocks_per_seq;   /* table capacity: ceil(max_model_len / block_size) */
    double watermark;             /* fraction of primary blocks admission keeps free (0.01) */
    int enable_prefix_caching;    /* 0 = no hashes, no hits */
    uint64_t hash_seed;           /* XXH3 seed of prefix hashes */
    pl_kv_policy policy;          /* allocation layout (PAGED = 0) */
    int32_t max_seq_tokens;       /* a sequence's maximum length, for MAX and as the cap of
                                     POW2 (0 = max_blocks_per_seq * block_size) */
    int32_t sliding_window;       /* W > 0: every layer attends to its last W positions only,
                                     so blocks behind the window are released (paged layout
                                     only; 0 = keep every block: no window, or a layer without) */
    int32_t n_slots;              /* VATTN: request slots of max_blocks_per_seq virtual blocks */
    int kv_groups;                /* 1: tables are owned one per sequence; 2: a mixed model's
                                     sequences hold a global and a window group table each
                                     (kv/cache.h; the manager itself does not read it) */
} pl_kv_manager_config;

/* The entry a table keeps for a block released by the sliding window (never read by the
 * attention kernels, kernels/attention.h). */
enum { PL_KV_NO_BLOCK = -1 };

typedef struct {
    int32_t *blocks;          /* [capacity] physical block ids, primary or swap pool (swapped) */
    pl_block_hash *hashes;    /* [capacity] chained hashes of full computed blocks, < n_hashed */
    int32_t capacity;         /* max blocks (the manager's max_blocks_per_seq) */
    int32_t block_size;       /* tokens per block, copied from the manager */
    int32_t n_blocks;         /* blocks held */
    int32_t n_tokens;         /* tokens that have a slot (computed or about to be) */
    int32_t n_hashed;         /* leading full blocks whose hash is in hashes[] */
    int32_t n_registered;     /* leading full blocks already offered to the prefix cache */
    int32_t n_cached_tokens;  /* prompt tokens found in the prefix cache at allocation */
    int32_t n_dropped;        /* leading entries released by the sliding window (PL_KV_NO_BLOCK) */
    uint64_t extra_key;       /* extra prefix-hash key (cache salt, adapter); set at allocation */
    int live;                 /* 1 while the table holds blocks (counted by the manager) */
    int swapped;              /* 1 while its blocks are in the swap pool */
    int32_t reserved_future;  /* contiguous: reserved slots kept for tokens still to come, up to
                                 the final length (the rest of the reservation is fragmentation) */
    int global;               /* KV cache group, set by the caller on the empty table: 1 = the
                                 global layers' table, never released by the window; 0 = follows
                                 cfg.sliding_window. Survives allocate/free; fork copies it. */
} pl_block_table;

typedef struct {
    int32_t src, dst; /* block ids; src = -1 means "no copy" */
} pl_block_copy;

typedef enum {
    PL_ALLOC_OK = 0,  /* fits now, keeping the watermark */
    PL_ALLOC_LATER,   /* fits once other sequences free blocks */
    PL_ALLOC_NEVER,   /* can never fit (more than the pool minus the watermark, or the table) */
} pl_alloc_status;

typedef struct {
    int32_t blocks_total;      /* primary pool size */
    int32_t blocks_used;       /* ref > 0 */
    int32_t blocks_free;       /* ref == 0, including cached */
    int32_t blocks_cached;     /* free but still holding a prefix hash (can be hit) */
    int64_t tokens_stored;     /* token slots filled in used primary blocks (shared counted once) */
    double waste;              /* fraction 0..1: 1 - tokens_stored / (blocks_used * block_size) */
    uint64_t prefix_queries;   /* prompt tokens looked up in the prefix cache (tokens) */
    uint64_t prefix_hits;      /* of those, tokens whose K/V were found cached (tokens) */
    uint64_t evictions;        /* cached blocks whose hash was dropped to reuse the block */
    uint64_t dedups;           /* computed blocks replaced by an identical cached block */
    int32_t swap_total;        /* swap pool size */
    int32_t swap_used;         /* swap blocks in use */
    int32_t n_tables;          /* live block tables */
    int64_t reserved_future;   /* contiguous: empty reserved slots that tokens will still fill */
    uint64_t window_released;  /* table entries dropped because they left the sliding window */
    uint64_t window_freed;     /* of those, blocks that went back to the pool (no other holder) */
} pl_kv_stats;

typedef struct {
    pl_kv_manager_config cfg;
    pl_block_pool pool;       /* primary blocks */
    pl_block_pool swap;       /* swap blocks (no prefix caching); num_blocks 0 if none */
    int32_t watermark_blocks; /* floor(watermark * num_blocks) */
    int32_t n_tables;         /* live tables */
    int32_t *fill;            /* [num_blocks] token slots filled in each used primary block */
    int64_t tokens_stored;    /* sum of fill over used primary blocks */
    int32_t *remap;           /* [max(num_blocks, num_swap_blocks)] swap scratch, all -1 at rest */
    uint64_t prefix_queries;  /* prompt tokens looked up */
    uint64_t prefix_hits;     /* prompt tokens hit */
    uint64_t dedups;          /* blocks deduplicated at commit */
    int64_t reserved_future;  /* sum of the live tables' reserved_future */
    uint64_t window_released; /* see pl_kv_stats */
    uint64_t window_freed;
    int32_t shared_pages;     /* VATTN: blocks held that map a page another table maps too
                                 (kv/cache.c sets it from the slots' reference counts); they
                                 are counted once against num_blocks */
} pl_kv_manager;

pl_status pl_kv_manager_init(pl_kv_manager *m, const pl_kv_manager_config *cfg);
/* Frees the bookkeeping. Tables still live must be freed first (their arrays are the caller's
 * to release with pl_kv_free_table). */
void pl_kv_manager_destroy(pl_kv_manager *m);

/* Blocks needed to hold n tokens. */
int32_t pl_kv_blocks_for(const pl_kv_manager *m, int32_t n_tokens);

/* Can a new prompt of n_tokens be admitted? Counts every block as needed (prefix hits are a bonus,
 * as in vLLM v0), cached free blocks as free, and keeps watermark_blocks free. */
pl_alloc_status pl_kv_can_allocate(const pl_kv_manager *m, int32_t n_tokens);

/* Prompt tokens allocate_prompt would find cached right now (a multiple of block_size, at most
 * n - 1); changes nothing and counts no statistics. For the scheduler's token budget. (Not
 * const: hashing uses the pool's scratch buffer.) */
int32_t pl_kv_probe_prefix(pl_kv_manager *m, const int32_t *token_ids, int32_t n, uint64_t extra_key);

/* Blocks a new paged table for token_ids[n] takes from the free blocks, its first n_given
 * blocks coming from another table (pl_kv_allocate_shared; 0: none): every block past those,
 * less the prefix-cache hits among them that a table holds now. A hit on a free cached block
 * still counts (taking it takes it off the free queue: vLLM v1's "evictable" hits). An upper
 * bound of what pl_kv_allocate_prompt (or pl_kv_allocate_shared) takes when called right after,
 * also when other tables allocate first and evict some of these hits (each evicted hit becomes
 * one new block); nothing may be freed in between. For admission (engine/scheduler.c). */
int32_t pl_kv_prompt_blocks_needed(pl_kv_manager *m, const int32_t *token_ids, int32_t n,
                                   uint64_t extra_key, int32_t n_given);

/* The paged policy's prompt allocation (kv/cache.c picks the layout's; the contiguous and
 * vAttention policies use pl_kv_allocate_reserved / pl_kv_allocate_slot below).
 * Give empty `t` blocks for the prompt token_ids[n] (n >= 1), reusing cached full blocks along
 * the hash chain. *n_cached receives the number of leading prompt tokens whose K/V are already
 * cached (a multiple of block_size, at most n - 1): the engine computes tokens [*n_cached, n).
 * PL_ERR_CAPACITY (t untouched) if the free blocks do not suffice; the watermark is the
 * admission check's business, not this call's. */
pl_status pl_kv_allocate_prompt(pl_kv_manager *m, pl_block_table *t, const int32_t *token_ids,
                                int32_t n, uint64_t extra_key, int32_t *n_cached);
/* The prompt allocation of the contiguous policies: one run of pl_kv_admit_blocks blocks
 * reserved for the sequence's final length (prompt + max output tokens, >= n) at the first fit.
 * *n_cached = 0 (nothing is shared). PL_ERR_CAPACITY (t untouched) when no run is free. */
pl_status pl_kv_allocate_reserved(pl_kv_manager *m, pl_block_table *t, const int32_t *token_ids,
                                  int32_t n, int32_t final_tokens, int32_t *n_cached);
/* The prompt allocation of the vAttention policy: the first pages for n tokens in `slot`, which
 * the caller took from its slots (kv/cache.c). *n_cached = 0. PL_ERR_CAPACITY (t untouched)
 * when pages run out or the slot is not free. */
pl_status pl_kv_allocate_slot(pl_kv_manager *m, pl_block_table *t, const int32_t *token_ids,
                              int32_t n, int32_t slot, int32_t *n_cached);
/* The same for a table of n tokens whose first n_shared pages are another table's (mapped into
 * the slot by kv/cache.c: a fork, a recomputed group's prompt): only need - n_shared pages are
 * counted as taken (shared_pages grows by n_shared). No token ids: nothing is hashed. */
pl_status pl_kv_allocate_slot_shared(pl_kv_manager *m, pl_block_table *t, int32_t n, int32_t slot,
                                     int32_t n_shared);
/* The vAttention slot of a live table. */
int32_t pl_kv_slot_of(const pl_kv_manager *m, const pl_block_table *t);
/* The same for the paged layout, with slots for the cached tokens and at most max_new (>= 1)
 * more: t->n_tokens = min(n, *n_cached + max_new). The caller appends the rest chunk by chunk
 * (pl_kv_append_slots), so a sliding-window sequence never holds more than its window and one
 * chunk, even when a long sequence is recomputed. */
pl_status pl_kv_allocate_prompt_part(pl_kv_manager *m, pl_block_table *t, const int32_t *token_ids,
                                     int32_t n, uint64_t extra_key, int32_t max_new,
                                     int32_t *n_cached);

/* allocate_prompt_part for a sequence's two tables of KV cache groups at once: `global`
 * becomes a global group's table in m and `window` a window group's in mw (their `global` flags
 * are set), with the distinct extra keys key_global != key_window. mw is m for groups over one
 * pool (gemma2) or the window kind's own manager (kv/cache.h's layer kinds: two pools of one
 * block size). Both take the same cached length, the smaller of the two groups' hits
 * (*n_cached), and every hit of both is taken before either takes a new block (one could evict
 * the other's hit), so one pool's free count drops by at most
 * 2 * blocks_for(upto) - behind_window(*n_cached) for upto = min(n, *n_cached + max_new)
 * slots (two pools: blocks_for(upto) in m, that less behind_window in mw): an admission check
 * counting that, as the scheduler does for one table, holds. PL_ERR_CAPACITY (both untouched)
 * if the free blocks do not suffice. */
pl_status pl_kv_allocate_prompt_pair(pl_kv_manager *m, pl_kv_manager *mw, pl_block_table *global,
                                     pl_block_table *window, const int32_t *token_ids, int32_t n,
                                     uint64_t key_global, uint64_t key_window, int32_t max_new,
                                     int32_t *n_cached);

/* kv/reserve.c. Token slots a new table of n tokens (final length final_tokens) takes at
 * admission: n when paged, else the policy's reservation (never below n). */
int32_t pl_kv_reserve_tokens(const pl_kv_manager *m, int32_t n, int32_t final_tokens);
/* Blocks of that reservation. */
int32_t pl_kv_admit_blocks(const pl_kv_manager *m, int32_t n, int32_t final_tokens);
/* First fit: the lowest block id starting n_blocks consecutive free primary blocks, or -1. A
 * free block still holding a prefix hash counts as free (contiguous layouts hash nothing). */
int32_t pl_kv_first_fit(const pl_kv_manager *m, int32_t n_blocks);
/* Longest run of consecutive free primary blocks (external fragmentation = free - this). */
int32_t pl_kv_largest_free_run(const pl_kv_manager *m);
/* Sum of every used primary block's ref count: the blocks the live resident tables would hold
 * if nothing were shared (parallel sampling, beams, prefix hits). O(1): the pool keeps the sum. */
int64_t pl_kv_block_refs(const pl_kv_manager *m);

/* The most blocks one table of up to n_tokens tokens holds at once while it decodes (with
 * proposals of up to k_spec tokens): all of its blocks, or with a sliding window those of the
 * last W positions plus the newest tokens' blocks. For admission limits (engine check_fits). */
int32_t pl_kv_held_blocks_max(const pl_kv_manager *m, int32_t n_tokens, int32_t k_spec);

/* Leading blocks of a table that no query at position >= pos reads: those wholly below
 * pos - W + 1 (0 without a sliding window; a global group's table releases none of them). */
int32_t pl_kv_behind_window(const pl_kv_manager *m, int32_t pos);

/* Blocks append_slots(t, n_new) would take from the free queue (copy-on-write included). */
int32_t pl_kv_append_blocks_needed(const pl_kv_manager *m, const pl_block_table *t, int32_t n_new);
bool pl_kv_can_append(const pl_kv_manager *m, const pl_block_table *t, int32_t n_new);

/* Reserve slots for the next n_new tokens of live, resident t. If the partly-filled last block is
 * shared it is first replaced by a private copy: *cow = {old, new} (else {-1, -1}); the engine
 * copies the bytes before writing. PL_ERR_CAPACITY (t untouched) if blocks run out. */
pl_status pl_kv_append_slots(pl_kv_manager *m, pl_block_table *t, int32_t n_new,
                             pl_block_copy *cow);

/* Roll back speculative slots (issue 15): t keeps its first n_keep tokens, t->n_tokens >= n_keep
 * >= the tokens already offered to the prefix cache (n_registered * block_size), so nothing
 * rolled back was ever hashed. Blocks left empty return to the pool; a partly filled last block
 * keeps its first n_keep % block_size slots (their K/V stay valid; the rest are overwritten by
 * the next append). Paged layout only (a contiguous reservation is never speculated on). */
pl_status pl_kv_truncate(pl_kv_manager *m, pl_block_table *t, int32_t n_keep);

/* The forward step computed the K/V of t's first n_computed tokens (token_ids[0 .. n_computed)
 * are the sequence's tokens). Full blocks among them are hashed and entered in the prefix cache
 * now; a block whose prefix is already cached is replaced by the cached block (dedup). Then,
 * with a sliding window W, every block whose positions are all below n_computed - W + 1 (no
 * later query sees them: the next one is at n_computed or after, and nothing before
 * n_computed is computed again in this table) is released and its entry becomes
 * PL_KV_NO_BLOCK; a hashed one stays in the prefix cache until evicted. */
pl_status pl_kv_commit(pl_kv_manager *m, pl_block_table *t, const int32_t *token_ids,
                       int32_t n_computed);

/* Empty `child` shares every block of live, resident `parent` (ref++). */
pl_status pl_kv_fork(pl_kv_manager *m, const pl_block_table *parent, pl_block_table *child);

/* Empty `child` for n tokens (paged layout, no block released by a window): its first n_shared
 * blocks are those of live, resident `parent` (ref++: full blocks of tokens both sequences
 * begin with; n_shared * block_size < n and <= parent->n_tokens), the rest are new. The shared
 * blocks' K/V are the parent's to compute (they may not be yet): the caller computes the
 * child's tokens from n_shared * block_size on, and only once the parent has computed the
 * shared ones. For a group of sequences recomputed after preemption (engine/scheduler.c): their
 * common prompt is computed once, as at their first admission. PL_ERR_CAPACITY (child
 * untouched) if the free blocks do not suffice. */
pl_status pl_kv_allocate_shared(pl_kv_manager *m, const pl_block_table *parent, int32_t n_shared,
                                pl_block_table *child, int32_t n);

/* Release every block of t (hashed ones stay cached at the LRU tail; the last block is released
 * first so a prefix outlives its tail) and its arrays; t becomes empty. No-op on an empty t. */
void pl_kv_free_table(pl_kv_manager *m, pl_block_table *t);

/* Swap blocks for a whole group of live tables (all resident for swap_out, all swapped for
 * swap_in). A block shared inside the group moves once and stays shared. can_* count distinct
 * blocks; can_swap_in keeps the watermark. */
pl_alloc_status pl_kv_can_swap_out(const pl_kv_manager *m, pl_block_table *const *tables, int32_t n);
pl_alloc_status pl_kv_can_swap_in(const pl_kv_manager *m, pl_block_table *const *tables, int32_t n);
/* map[cap] receives the (src, dst) pairs, *n_map their count (<= the distinct blocks; cap =
 * the source pool's size always suffices). PL_ERR_CAPACITY, nothing changed, if the target pool
 * lacks blocks or cap is too small. */
pl_status pl_kv_swap_out(pl_kv_manager *m, pl_block_table *const *tables, int32_t n,
                         pl_block_copy *map, int32_t cap, int32_t *n_map);
pl_status pl_kv_swap_in(pl_kv_manager *m, pl_block_table *const *tables, int32_t n,
                        pl_block_copy *map, int32_t cap, int32_t *n_map);

/* Physical slot of token position pos (< t->n_tokens): block * block_size + offset. */
static inline int64_t pl_block_table_slot(const pl_block_table *t, int32_t pos) {
    return (int64_t)t->blocks[pos / t->block_size] * t->block_size + pos % t->block_size;
}

void pl_kv_get_stats(const pl_kv_manager *m, pl_kv_stats *s);
/* Free primary blocks (pl_kv_stats.blocks_free), O(1). */
int32_t pl_kv_num_free(const pl_kv_manager *m);
/* Blocks of the primary pool, ids included (vattention: virtual, n_slots x max_blocks_per_seq;
 * else cfg.num_blocks): the size pl_kv_block_states writes. */
int32_t pl_kv_pool_blocks(const pl_kv_manager *m);

/* One byte per block for views of the pool (GET /v1/kv/blocks, the web UI's grid), codes
 * pl_kv_block_state of pagellm.h: primary[num_blocks] gets FREE (ref 0, no hash), CACHED (ref 0,
 * still holds a prefix hash), USED (ref 1) or SHARED (ref > 1); swap[num_swap_blocks] (may be
 * NULL when there is no swap pool) gets FREE or SWAPPED. O(num_blocks), reads only. */
void pl_kv_block_states(const pl_kv_manager *m, uint8_t *primary, uint8_t *swap);

/* Both pools' consistency, the fill accounting and the live-table count (O(pool sizes)). */
pl_status pl_kv_manager_check(const pl_kv_manager *m);

#endif
