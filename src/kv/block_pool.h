/* kv/block_pool — a fixed set of KV blocks: ref counts, the free queue that is also the LRU of
 * the prefix cache, and the map from content hash to block.
 *
 * The pool knows block ids, never bytes. A block is either FREE (ref 0, on the free queue) or
 * USED (ref > 0 = the number of block tables holding it, off the queue); never both.
 *
 * Free queue. An intrusive doubly-linked list threaded through the blocks. Allocation pops the
 * head. A block released to ref 0 goes to the TAIL if it holds a hash (it may still be hit by the
 * prefix cache, so it is evicted last, in least-recently-freed order) and to the HEAD if it does
 * not (nothing can ever hit it, reuse it first). When the head block that allocation pops still
 * holds a hash, that hash is evicted (removed from the map) right then. A prefix-cache hit on a
 * free block ("touch") unlinks it from the middle of the queue. All of it is O(1).
 *   vLLM v1 sends every freed block to the tail; pagellm puts hash-less blocks at the head so a
 *   cached prefix survives longer when most traffic has nothing to cache.
 *
 * Prefix hashes. A full block's identity is the whole prefix up to its end. Its 128-bit hash
 * chains: hash(parent block's hash, extra key, this block's tokens), XXH3-128 with the pool's
 * seed, so equal hashes mean equal whole prefixes with overwhelming probability. pagellm does not
 * rely on that probability: a hashed block also stores its tokens, its extra key and a link to
 * its parent block (id + the parent's generation, which changes whenever the parent's hash is
 * set or cleared). A lookup succeeds only if all of these match exactly and the caller's parent
 * is that same, still-cached parent block; by induction from the first block, a hit means the
 * whole prefix is token-for-token equal. A hash collision can only cost a hit, never return
 * wrong K/V. (vLLM v1 trusts the hash, sha256 optionally, and stores no tokens.)
 *
 * The map holds at most one block per hash (vLLM v1 keeps every duplicate); kv/manager
 * deduplicates instead: a freshly computed block whose prefix is already cached is swapped for
 * the cached one.
 */
#ifndef PL_KV_BLOCK_POOL_H
#define PL_KV_BLOCK_POOL_H

#include "base/status.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    uint64_t lo, hi;
} pl_block_hash;

typedef struct {
    int32_t ref;          /* number of block tables holding the block; 0 = free */
    int32_t prev, next;   /* free-queue neighbours (block ids), -1 at the ends; only when free */
    uint8_t in_free;      /* 1 iff on the free queue (iff ref == 0) */
    uint8_t hashed;       /* 1 iff the block holds a hash and is in the map */
    uint32_t gen;         /* bumped each time the hash is set or cleared */
    pl_block_hash hash;   /* chained content hash, valid when hashed */
    int32_t parent;       /* block holding the previous block of the prefix, -1 = first block */
    uint32_t parent_gen;  /* the parent's gen when this block was hashed */
    uint64_t extra;       /* extra key (cache salt, adapter id) the hash was built with */
} pl_block;

typedef struct {
    int32_t num_blocks;     /* blocks in the pool, ids 0 .. num_blocks-1 */
    int32_t block_size;     /* tokens per block */
    int enable_caching;     /* 0 = no hashes, no map, no tokens */
    uint64_t seed;          /* XXH3 seed of the block hashes */
    pl_block *blocks;       /* [num_blocks] */
    int32_t *tokens;        /* [num_blocks][block_size] tokens of hashed blocks; NULL if no caching */
    int32_t free_head;      /* first block to allocate, -1 if none free */
    int32_t free_tail;      /* last block to allocate */
    int32_t n_free;         /* blocks on the free queue */
    int32_t n_free_cached;  /* free blocks still holding a hash */
    int32_t n_hashed;       /* blocks holding a hash (free or used) = entries in the map */
    int64_t n_refs;         /* sum of every block's ref (block-table entries), kept per change */
    int32_t *map;           /* [map_cap] open addressing, linear probing: block id or -1 */
    uint32_t map_cap;       /* power of two, >= 2 * num_blocks; 0 if no caching */
    uint64_t n_evictions;   /* hashes dropped because their block was reallocated */
    uint8_t *hash_buf;      /* [16 + 8 + 4 * block_size] scratch for hashing */
} pl_block_pool;

/* The parent hash of the first block of every prefix. */
extern const pl_block_hash pl_block_hash_root;

/* num_blocks >= 1, block_size >= 1. All blocks start free (ids in ascending order). */
pl_status pl_block_pool_init(pl_block_pool *p, int32_t num_blocks, int32_t block_size,
                             int enable_caching, uint64_t seed);
void pl_block_pool_destroy(pl_block_pool *p);

/* Pop the head of the free queue (evicting its hash if any); ref = 1. -1 if no block is free. */
int32_t pl_block_pool_alloc(pl_block_pool *p);
/* Another table holds used block b: ref++. */
void pl_block_pool_incref(pl_block_pool *p, int32_t b);
/* A prefix-cache hit on b: if free, unlink it from the queue (it keeps its hash); ref++. */
void pl_block_pool_touch(pl_block_pool *p, int32_t b);
/* A table drops b: ref--; at 0 it joins the queue (tail if hashed, head if not). */
void pl_block_pool_release(pl_block_pool *p, int32_t b);
/* Drop b's hash (map entry, tokens); a free b moves to the head. No-op if b holds no hash. */
void pl_block_pool_evict(pl_block_pool *p, int32_t b);

/* Hash of one full block: tokens[block_size], chained to `parent`. */
pl_block_hash pl_block_pool_hash(pl_block_pool *p, pl_block_hash parent, uint64_t extra,
                                 const int32_t *tokens);
/* The cached block with this hash whose parent link is `parent` (a hashed block id, or -1 for
 * the first block) and whose extra key and tokens are exactly these. -1 if none. No change. */
int32_t pl_block_pool_lookup(const pl_block_pool *p, pl_block_hash h, int32_t parent,
                             uint64_t extra, const int32_t *tokens);
/* Give used, hash-less block b the hash h (parent: hashed block id or -1). Returns false and
 * leaves b hash-less if another live block holds h (a collision, or a duplicate the caller
 * should have found with lookup). An entry whose parent link is broken (stale) is replaced. */
bool pl_block_pool_register(pl_block_pool *p, int32_t b, pl_block_hash h, int32_t parent,
                            uint64_t extra, const int32_t *tokens);
/* The block the map holds for h, unverified (tests, debugging). -1 if none. */
int32_t pl_block_pool_find(const pl_block_pool *p, pl_block_hash h);

/* Full consistency check (queue links and counts, ref/free agreement, map <-> hashed blocks):
 * O(num_blocks + map_cap). Returns PL_ERR_INTERNAL with a message naming the first violation. */
pl_status pl_block_pool_check(const pl_block_pool *p);

#endif
