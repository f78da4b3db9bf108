/* kv/block_pool — see block_pool.h for the idea and the invariants. */
#include "kv/block_pool.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

const pl_block_hash pl_block_hash_root = {0x9e3779b97f4a7c15ull, 0x6a09e667f3bcc909ull};

static bool hash_eq(pl_block_hash a, pl_block_hash b) { return a.lo == b.lo && a.hi == b.hi; }

static int32_t *block_tokens(const pl_block_pool *p, int32_t b) {
    return p->tokens + (size_t)b * (size_t)p->block_size;
}

/* ---- free queue ---------------------------------------------------------------------------- */

static void queue_unlink(pl_block_pool *p, int32_t b) {
    pl_block *x = &p->blocks[b];
    PL_ASSERT(x->in_free);
    if (x->prev >= 0) p->blocks[x->prev].next = x->next;
    else p->free_head = x->next;
    if (x->next >= 0) p->blocks[x->next].prev = x->prev;
    else p->free_tail = x->prev;
    x->prev = x->next = -1;
    x->in_free = 0;
    p->n_free--;
    if (x->hashed) p->n_free_cached--;
}

/* Link block b into the free queue at one end (at_head: a compile-time constant at each call);
 * `near` is that end, `far` the other one, which b becomes as well when the queue was empty. */
static inline void queue_push(pl_block_pool *p, int32_t b, int at_head) {
    pl_block *x = &p->blocks[b];
    int32_t *near = at_head ? &p->free_head : &p->free_tail;
    int32_t *far = at_head ? &p->free_tail : &p->free_head;
    *(at_head ? &x->prev : &x->next) = -1;
    *(at_head ? &x->next : &x->prev) = *near;
    if (*near >= 0) *(at_head ? &p->blocks[*near].prev : &p->blocks[*near].next) = b;
    else *far = b;
    *near = b;
    x->in_free = 1;
    p->n_free++;
    if (x->hashed) p->n_free_cached++;
}

static void queue_push_head(pl_block_pool *p, int32_t b) { queue_push(p, b, 1); }
static void queue_push_tail(pl_block_pool *p, int32_t b) { queue_push(p, b, 0); }

/* ---- hash map: open addressing, linear probing, backward-shift deletion -------------------- */

static uint32_t map_home(const pl_block_pool *p, pl_block_hash h) {
    return (uint32_t)(h.lo ^ (h.hi >> 17)) & (p->map_cap - 1);
}

/* Slot holding h, or the empty slot where it would go. */
static uint32_t map_slot(const pl_block_pool *p, pl_block_hash h) {
    uint32_t i = map_home(p, h);
    while (p->map[i] >= 0 && !hash_eq(p->blocks[p->map[i]].hash, h)) i = (i + 1) & (p->map_cap - 1);
    return i;
}

static void map_remove_slot(pl_block_pool *p, uint32_t i) {
    uint32_t mask = p->map_cap - 1;
    p->map[i] = -1;
    /* Shift later entries of the same probe run back so no lookup hits a hole before them. */
    for (uint32_t j = (i + 1) & mask; p->map[j] >= 0; j = (j + 1) & mask) {
        uint32_t k = map_home(p, p->blocks[p->map[j]].hash);
        bool k_in_gap = (i <= j) ? (i < k && k <= j) : (i < k || k <= j);
        if (k_in_gap) continue;
        p->map[i] = p->map[j];
        p->map[j] = -1;
        i = j;
    }
}

/* ---- life cycle ---------------------------------------------------------------------------- */

pl_status pl_block_pool_init(pl_block_pool *p, int32_t num_blocks, int32_t block_size,
                             int enable_caching, uint64_t seed) {
    memset(p, 0, sizeof *p);
    p->free_head = p->free_tail = -1;
    if (num_blocks < 1 || num_blocks > (1 << 28))
        return pl_fail(PL_ERR_INVALID_ARG, "block pool: num_blocks must be in [1, 2^28], got %d",
                       (int)num_blocks);
    if (block_size < 1 || block_size > 4096)
        return pl_fail(PL_ERR_INVALID_ARG, "block pool: block_size must be in [1, 4096], got %d",
                       (int)block_size);
    p->num_blocks = num_blocks;
    p->block_size = block_size;
    p->enable_caching = enable_caching ? 1 : 0;
    p->seed = seed;
    p->blocks = calloc((size_t)num_blocks, sizeof *p->blocks);
    if (!p->blocks) goto nomem;
    if (p->enable_caching) {
        p->tokens = malloc((size_t)num_blocks * (size_t)block_size * sizeof *p->tokens);
        p->map_cap = 16;
        while (p->map_cap < 2u * (uint32_t)num_blocks) p->map_cap <<= 1;
        p->map = malloc(p->map_cap * sizeof *p->map);
        p->hash_buf = malloc(24 + 4 * (size_t)block_size);
        if (!p->tokens || !p->map || !p->hash_buf) goto nomem;
        for (uint32_t i = 0; i < p->map_cap; i++) p->map[i] = -1;
    }
    for (int32_t b = 0; b < num_blocks; b++) {
        p->blocks[b].parent = -1;
        queue_push_tail(p, b);
    }
    return PL_OK;
nomem:
    pl_block_pool_destroy(p);
    return pl_fail(PL_ERR_NOMEM, "block pool: cannot allocate bookkeeping for %d blocks of %d tokens",
                   (int)num_blocks, (int)block_size);
}

void pl_block_pool_destroy(pl_block_pool *p) {
    free(p->blocks);
    free(p->tokens);
    free(p->map);
    free(p->hash_buf);
    memset(p, 0, sizeof *p);
    p->free_head = p->free_tail = -1;
}

/* ---- allocate, share, release -------------------------------------------------------------- */

int32_t pl_block_pool_alloc(pl_block_pool *p) {
    int32_t b = p->free_head;
    if (b < 0) return -1;
    queue_unlink(p, b);
    if (p->blocks[b].hashed) {
        pl_block_pool_evict(p, b);
        p->n_evictions++;
    }
    p->blocks[b].ref = 1;
    p->n_refs++;
    return b;
}

void pl_block_pool_incref(pl_block_pool *p, int32_t b) {
    PL_ASSERT(b >= 0 && b < p->num_blocks && p->blocks[b].ref > 0);
    p->blocks[b].ref++;
    p->n_refs++;
}

void pl_block_pool_touch(pl_block_pool *p, int32_t b) {
    PL_ASSERT(b >= 0 && b < p->num_blocks);
    if (p->blocks[b].ref == 0) queue_unlink(p, b);
    p->blocks[b].ref++;
    p->n_refs++;
}

void pl_block_pool_release(pl_block_pool *p, int32_t b) {
    PL_ASSERT(b >= 0 && b < p->num_blocks && p->blocks[b].ref > 0);
    p->n_refs--;
    if (--p->blocks[b].ref > 0) return;
    if (p->blocks[b].hashed) queue_push_tail(p, b);
    else queue_push_head(p, b);
}

void pl_block_pool_evict(pl_block_pool *p, int32_t b) {
    pl_block *x = &p->blocks[b];
    if (!x->hashed) return;
    uint32_t i = map_slot(p, x->hash);
    PL_ASSERT(p->map[i] == b);
    map_remove_slot(p, i);
    bool was_free = x->in_free;
    if (was_free) queue_unlink(p, b);
    x->hashed = 0;
    x->gen++;
    x->parent = -1;
    x->parent_gen = 0;
    x->extra = 0;
    p->n_hashed--;
    if (was_free) queue_push_head(p, b);
}

/* ---- prefix hashes ------------------------------------------------------------------------- */

pl_block_hash pl_block_pool_hash(pl_block_pool *p, pl_block_hash parent, uint64_t extra,
                                 const int32_t *tokens) {
    PL_ASSERT(p->hash_buf);
    uint8_t *buf = p->hash_buf;
    size_t tok_bytes = 4 * (size_t)p->block_size;
    memcpy(buf, &parent.lo, 8);
    memcpy(buf + 8, &parent.hi, 8);
    memcpy(buf + 16, &extra, 8);
    memcpy(buf + 24, tokens, tok_bytes);
    XXH128_hash_t h = XXH3_128bits_withSeed(buf, 24 + tok_bytes, p->seed);
    return (pl_block_hash){h.low64, h.high64};
}

int32_t pl_block_pool_find(const pl_block_pool *p, pl_block_hash h) {
    if (!p->enable_caching) return -1;
    return p->map[map_slot(p, h)];
}

/* b's parent link still names the same parent contents it was hashed with. */
static bool parent_link_live(const pl_block_pool *p, const pl_block *x) {
    if (x->parent < 0) return true;
    const pl_block *par = &p->blocks[x->parent];
    return par->hashed && par->gen == x->parent_gen;
}

int32_t pl_block_pool_lookup(const pl_block_pool *p, pl_block_hash h, int32_t parent,
                             uint64_t extra, const int32_t *tokens) {
    int32_t b = pl_block_pool_find(p, h);
    if (b < 0) return -1;
    const pl_block *x = &p->blocks[b];
    if (x->parent != parent || x->extra != extra) return -1;
    if (parent >= 0) {
        const pl_block *par = &p->blocks[parent];
        if (!par->hashed || par->gen != x->parent_gen) return -1;
    }
    if (memcmp(block_tokens(p, b), tokens, 4 * (size_t)p->block_size) != 0) return -1;
    return b;
}

bool pl_block_pool_register(pl_block_pool *p, int32_t b, pl_block_hash h, int32_t parent,
                            uint64_t extra, const int32_t *tokens) {
    PL_ASSERT(p->enable_caching && b >= 0 && b < p->num_blocks);
    pl_block *x = &p->blocks[b];
    PL_ASSERT(x->ref > 0 && !x->hashed);
    PL_ASSERT(parent < 0 || p->blocks[parent].hashed);
    uint32_t i = map_slot(p, h);
    if (p->map[i] >= 0) {
        if (parent_link_live(p, &p->blocks[p->map[i]])) return false;
        pl_block_pool_evict(p, p->map[i]); /* stale: its prefix is gone, nothing can hit it */
        i = map_slot(p, h);
    }
    p->map[i] = b;
    x->hashed = 1;
    x->gen++;
    x->hash = h;
    x->parent = parent;
    x->parent_gen = parent >= 0 ? p->blocks[parent].gen : 0;
    x->extra = extra;
    memcpy(block_tokens(p, b), tokens, 4 * (size_t)p->block_size);
    p->n_hashed++;
    return true;
}

/* ---- checks -------------------------------------------------------------------------------- */

pl_status pl_block_pool_check(const pl_block_pool *p) {
    int32_t n = 0, n_cached = 0, prev = -1;
    for (int32_t b = p->free_head; b >= 0; b = p->blocks[b].next) {
        if (b >= p->num_blocks) return pl_fail(PL_ERR_INTERNAL, "free queue: bad id %d", (int)b);
        const pl_block *x = &p->blocks[b];
        if (!x->in_free || x->ref != 0)
            return pl_fail(PL_ERR_INTERNAL, "free queue: block %d has in_free %d ref %d", (int)b,
                           x->in_free, (int)x->ref);
        if (x->prev != prev)
            return pl_fail(PL_ERR_INTERNAL, "free queue: block %d prev %d, expected %d", (int)b,
                           (int)x->prev, (int)prev);
        if (++n > p->num_blocks) return pl_fail(PL_ERR_INTERNAL, "free queue: cycle");
        n_cached += x->hashed;
        prev = b;
    }
    if (prev != p->free_tail)
        return pl_fail(PL_ERR_INTERNAL, "free queue: tail %d, walk ends at %d", (int)p->free_tail,
                       (int)prev);
    if (n != p->n_free || n_cached != p->n_free_cached)
        return pl_fail(PL_ERR_INTERNAL, "free queue: %d blocks (%d cached), counters say %d (%d)",
                       (int)n, (int)n_cached, (int)p->n_free, (int)p->n_free_cached);
    int32_t n_zero = 0, n_hashed = 0;
    int64_t n_refs = 0;
    for (int32_t b = 0; b < p->num_blocks; b++) {
        const pl_block *x = &p->blocks[b];
        n_refs += x->ref;
        if (x->ref < 0 || (x->ref == 0) != (x->in_free == 1))
            return pl_fail(PL_ERR_INTERNAL, "block %d: ref %d but in_free %d", (int)b, (int)x->ref,
                           x->in_free);
        n_zero += x->ref == 0;
        if (x->hashed) {
            n_hashed++;
            if (!p->enable_caching || pl_block_pool_find(p, x->hash) != b)
                return pl_fail(PL_ERR_INTERNAL, "block %d: hashed but not in the map", (int)b);
        }
    }
    if (n_zero != n) return pl_fail(PL_ERR_INTERNAL, "%d blocks have ref 0, %d are queued", (int)n_zero, (int)n);
    if (n_refs != p->n_refs)
        return pl_fail(PL_ERR_INTERNAL, "blocks hold %lld refs, counter says %lld",
                       (long long)n_refs, (long long)p->n_refs);
    if (n_hashed != p->n_hashed)
        return pl_fail(PL_ERR_INTERNAL, "%d hashed blocks, counter says %d", (int)n_hashed,
                       (int)p->n_hashed);
    int32_t n_map = 0;
    for (uint32_t i = 0; i < p->map_cap; i++) {
        int32_t b = p->map[i];
        if (b < 0) continue;
        n_map++;
        if (b >= p->num_blocks || !p->blocks[b].hashed || map_slot(p, p->blocks[b].hash) != i)
            return pl_fail(PL_ERR_INTERNAL, "map slot %u: block %d unreachable or not hashed", i, (int)b);
    }
    if (n_map != n_hashed)
        return pl_fail(PL_ERR_INTERNAL, "map holds %d entries, %d blocks hashed", (int)n_map, (int)n_hashed);
    return PL_OK;
}
