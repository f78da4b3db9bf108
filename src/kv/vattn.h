/* kv/vattn — the vAttention KV layout: one virtual reservation, request slots, a physical page
 * pool mapped on demand, and the background mapper thread (--kv-layout vattention, issue 12).
 *
 * The reservation is one mmap(PROT_NONE, MAP_NORESERVE) of
 *     [n_regions][n_slots][slot_bytes]
 * so a slot is, in every region, one virtually contiguous array of rows_per_slot rows (enough
 * for --max-model-len tokens), a row being one page, or region_pages[r] pages where a region's
 * token rows are larger (gemma4's full layers beside its window ones: every region's row holds
 * the same tokens_per_row tokens). The engine (kv/cache.c) makes a region per layer, K/V and KV
 * head (region (2l + kv) × n_kv_heads + g): slot s's rows of one KV head of a layer's K are one
 * array, which the contiguous attention kernel (kernels/attention_contig.h) reads as is; read
 * per layer, the reservation is the head-major pl_kv_store order whose "blocks" are page rows,
 * slot s's being the consecutive blocks s × rows_per_slot + j.
 *
 * The engine uses ANON for 4K and 64K pages, MEMFD for 2M and --vattn-share (ANON maps in a
 * quarter of the time and keeps two mappings per region and slot, where MEMFD makes one per
 * page and runs into vm.max_map_count).
 *
 * Physical memory is counted in page rows: a row's pages in each region (every region of a
 * slot grows in lockstep, token by token). The pool holds phys_rows rows (the
 * --kv-cache-memory budget divided by page_size × the pages of a row). A slot's mapped rows are
 * always a prefix of it: rows [0, mapped). Backends:
 *   MEMFD  row p is the memfd's pages [p × K, (p + 1) × K) (K pages a row, region after region);
 *          mapping = mmap(MAP_FIXED
 *          | MAP_SHARED) of each page into its region, unmapping = mmap(PROT_NONE, MAP_FIXED |
 *          MAP_NORESERVE) over it and a PUNCH_HOLE so the memory goes back to the system. 2 MiB
 *          pages use MFD_HUGETLB and are preallocated (a clear error when the system has none).
 *   ANON   the reservation is anonymous memory; mapping = mprotect(READ|WRITE) of the row's pages
 *          (the first touch commits them), unmapping = madvise(MADV_DONTNEED) + mprotect(NONE).
 *          Row ids are bookkeeping only. Both backends commit a mapped page at once
 *          (MADV_POPULATE_WRITE), so the thread that maps it also takes its page faults.
 *
 * Sharing (issue 37, MEMFD only: a page of the memfd can be mapped at several virtual
 * addresses). pl_vattn_share maps one slot's first rows into another slot at the same positions
 * (the same physical pages: n / best_of / beam forks, a partly filled last page included, and a
 * recomputed group's prompt); before a slot writes into a shared row, pl_vattn_unshare gives it
 * a private copy (copy-on-write: a fresh page, the bytes copied). Each row counts its mappings
 * (ref); unmapping a position drops one, and the row goes back to the pool only with its last
 * mapping. A slot that shares anything gives up all its rows at release (deferred reclamation
 * keeps only private rows, since the next request writes its rows from position 0), and a
 * shared row above a slot's need (a rollback below the fork point) is unmapped at once, so
 * shared rows are always needed rows of used slots: the rows in use are Σ need - shared
 * mappings.
 *
 * Prefix cache (issue 37, config prefix_cache, MEMFD only). Rows are the blocks of a
 * pl_block_pool (kv/block_pool.h: its hash chain, token verification and free queue).
 * pl_vattn_register gives a used slot's full computed pages their prefix hash (the chain of
 * their tokens under the slot's key); pl_vattn_map_prefix maps the rows that hold a prompt's
 * leading pages into a just acquired slot, whether other slots map them (shared) or nobody does.
 * A hashed row whose last mapping goes keeps its memory and joins the pool's free queue at the
 * LRU tail (cached: ref 0, unmapped); plain free rows sit at the head. take_row reclaims, when
 * no plain row is free, a free slot's rows, then (engine thread only) the LRU cached row (its
 * hash dropped, its memory punched), then a used slot's excess: so cached rows count against the
 * budget as free ones do, and the mapper thread never evicts what the engine just looked up. A
 * hashed row is like a shared one: never left in a free slot nor above a need (release and
 * rollback unmap it into the cache). A slot that no longer fills a hashed page (rolled back
 * below its end) drops its hash when the page is its own alone, then or later when the other
 * slots let it go (its next write is in place); while shared it keeps it (the write copies).
 *
 * Slot states: FREE or USED. A used slot has a need (rows its tokens take); the engine sets it
 * (pl_vattn_set_need) and, before each forward step, pl_vattn_prepare_step maps synchronously
 * every row a used slot needs and lacks (the "critical path"). The three techniques of the
 * vAttention paper (section 6.2), each switchable:
 *   overlap          the mapper thread maps, while step i computes, the row each used slot needs
 *                    for one more token (step i + 1's decode);
 *   deferred_reclaim a released slot keeps its rows mapped; the next request takes the free slot
 *                    with the most rows mapped (slot reuse), and rows of free slots are unmapped
 *                    only when the pool needs them or free rows drop below reclaim_threshold;
 *   eager            the mapper keeps the free slot the next request will take pre-mapped for
 *                    the largest prompt seen so far, while free rows stay above the threshold.
 *
 * Invariants (pl_vattn_check): free rows (cached ones included) + distinct mapped rows =
 * phys_rows; every row is on the free queue or mapped at exactly ref (slot, position)s, never
 * both; the pool's own invariants (pl_block_pool_check); a row with ref > 1 or a prefix hash sits
 * below the need of every slot that maps it; resident memory = distinct mapped + cached rows; a free slot has need 0; Σ need over used slots - shared
 * mappings (Σ ref - 1) <= phys_rows (the KV manager admits by it).
 *
 * Thread safety: one mutex guards all state; every function may be called from the engine
 * thread while the mapper runs. The mapper never unmaps a used slot's rows, so the forward pass
 * may read and write every row below its need without the lock.
 */
#ifndef PL_KV_VATTN_H
#define PL_KV_VATTN_H

#include "base/status.h"

#include <stddef.h>
#include <stdint.h>

typedef enum { PL_VATTN_MEMFD = 0, PL_VATTN_ANON = 1 } pl_vattn_backend;

typedef struct {
    size_t page_size;           /* 4096, 65536 or 2 MiB */
    int32_t n_regions;          /* the engine's: 2 × layers × KV heads */
    int32_t n_slots;            /* request slots (max-num-seqs) */
    int32_t rows_per_slot;      /* virtual pages per region and slot */
    int32_t tokens_per_row;     /* tokens one row of a region holds (its page or pages) */
    const int32_t *region_pages; /* [n_regions] pages of page_size region r's row takes (a layer
                                    whose token rows are larger than another's: gemma4), or NULL:
                                    one each. Read by pl_vattn_create only. */
    int64_t phys_rows;          /* physical page rows of the budget (>= 1) */
    pl_vattn_backend backend;
    int overlap, deferred_reclaim, eager; /* the techniques (1 = on) */
    int start_thread;           /* 1: run the mapper thread (if overlap or eager or deferred) */
    double reclaim_threshold;   /* fraction of rows kept free by background reclamation (0.10) */
    int prefix_cache;           /* 1: hash computed pages, keep them cached after their holder */
} pl_vattn_config;

typedef struct {
    uint64_t pages_mapped_sync;   /* physical pages mapped on the engine thread (critical path) */
    uint64_t pages_mapped_bg;     /* physical pages mapped by the mapper thread */
    uint64_t pages_unmapped_sync; /* unmapped on the engine thread */
    uint64_t pages_unmapped_bg;   /* unmapped by the mapper thread */
    uint64_t slots_acquired;      /* requests given a slot */
    uint64_t slots_reused;        /* of those, slots that still had rows mapped */
    uint64_t map_ns_in_step;      /* nanoseconds the engine thread spent mapping / unmapping */
    uint64_t steps;               /* pl_vattn_prepare_step calls */
    uint64_t pages_shared;        /* mappings of another slot's page made (pl_vattn_share) */
    uint64_t pages_copied;        /* shared pages copied before a write (copy-on-write) */
    int64_t rows_committed;       /* distinct rows mapped now (a shared row once) */
    int64_t rows_needed;          /* distinct rows the used slots need (Σ need - rows_shared) */
    int64_t rows_shared;          /* positions mapping a row another position maps too */
    int64_t rows_free;            /* plain free rows (holding nothing) */
    int64_t rows_cached;          /* unmapped rows the prefix cache holds (resident) */
    uint64_t rows_from_cache;     /* cached rows mapped again by a prefix hit */
    uint64_t rows_evicted;        /* cached rows whose prefix was dropped to reuse the row */
    int32_t slots_used;
} pl_vattn_stats;

typedef struct pl_vattn pl_vattn;

/* Page sizes: 4096, 65536, 2097152. Errors name the page size, the budget or the system call. */
pl_status pl_vattn_create(const pl_vattn_config *c, pl_vattn **out);
void pl_vattn_destroy(pl_vattn *va);

/* The reservation (region r of slot s starts at base + (r × n_slots + s) × slot_bytes when every
 * region's row is one page; in general at base + pl_vattn_region_offset(r) + s × slot_bytes ×
 * region_pages[r]). */
void *pl_vattn_base(const pl_vattn *va);
size_t pl_vattn_slot_bytes(const pl_vattn *va);
size_t pl_vattn_region_offset(const pl_vattn *va, int32_t region);
size_t pl_vattn_reserved_bytes(const pl_vattn *va);
const pl_vattn_config *pl_vattn_get_config(const pl_vattn *va);

/* A free slot for a new request (deferred reclamation: the one with the most rows mapped), USED
 * with need 0, or -1 when every slot is used. */
int32_t pl_vattn_acquire(pl_vattn *va);
/* The request left the slot: FREE; its rows stay mapped (deferred reclamation) or are unmapped
 * now (timed as mapping inside the step). */
void pl_vattn_release(pl_vattn *va, int32_t slot);
/* The used slot's sequence holds n_tokens: its need becomes ceil(n_tokens / tokens_per_row)
 * rows. The caller keeps Σ need <= phys_rows (checked). Maps nothing. */
void pl_vattn_set_need(pl_vattn *va, int32_t slot, int32_t n_tokens);
/* Before a forward step: map every missing needed row now (taking free rows, else reclaiming
 * cached rows of free slots, else the excess of used ones), timed; then wake the mapper for
 * step i + 1. PL_ERR_NOMEM with the system call's error if the kernel refuses a mapping. */
pl_status pl_vattn_prepare_step(pl_vattn *va);
/* Used slot `to` (just acquired, need not set; or a used slot taken over for a fork) maps used
 * slot `from`'s rows [0, n_rows) at the same positions (from's missing ones are mapped first;
 * to's rows there that are not from's already are let go, the others cost nothing; from's partly
 * filled last page is copied into a private page `to` has there instead of mapped, where the
 * needs with to's at n_rows rows leave a row for it: the caller counts every page shared). The caller
 * then sets to's need (>= n_rows rows). PL_ERR_UNSUPPORTED on the ANON backend,
 * PL_ERR_NOMEM if a mapping fails (what was mapped stays, consistent). */
pl_status pl_vattn_share(pl_vattn *va, int32_t from, int32_t to, int32_t n_rows);
/* The row at the slot's position pos is mapped somewhere else too. */
int pl_vattn_row_shared(pl_vattn *va, int32_t slot, int32_t pos);
/* Copy-on-write: the used slot's shared row at pos is replaced by a fresh private row holding
 * a copy of its bytes (the shared row loses one user). PL_ERR_NOMEM if no row can be had. */
pl_status pl_vattn_unshare(pl_vattn *va, int32_t slot, int32_t pos);
/* Prefix cache (prefix_cache = 1; else these find nothing and do nothing). Leading full pages
 * (at most n_pages) of tokens whose K/V some row holds under key `extra`, verified token for
 * token; *n_mapped (optional) counts those mapped now (the others are cached). */
int32_t pl_vattn_prefix_probe(pl_vattn *va, const int32_t *tokens, int32_t n_pages,
                              uint64_t extra, int32_t *n_mapped);
/* The used slot, just acquired (need not set), maps those rows at positions [0, *n_hit) (its own
 * rows there are let go) and hashes its later pages under `extra`. PL_ERR_NOMEM if a mapping
 * fails (*n_hit: the hits mapped before it). */
pl_status pl_vattn_map_prefix(pl_vattn *va, int32_t slot, const int32_t *tokens, int32_t n_pages,
                              uint64_t extra, int32_t *n_hit);
/* The used slot's pages [0, n_pages) hold the K/V of tokens (n_pages × tokens_per_row, computed):
 * they get their prefix hashes (incrementally: pages hashed by an earlier call are not hashed
 * again; a rollback below them starts over). A page whose prefix another row holds already
 * stays unhashed. */
void pl_vattn_register(pl_vattn *va, int32_t slot, const int32_t *tokens, int32_t n_pages);
/* Pages can be shared (the MEMFD backend). */
int pl_vattn_shares(const pl_vattn *va);
/* Tokens the used slots store (their needs), a shared page's once (its fullest mapping's); -1 if
 * out of memory. O(slots x rows) when something is shared. */
int64_t pl_vattn_tokens_stored(pl_vattn *va);
/* Positions mapping a row another position maps too (pl_vattn_stats.rows_shared), O(1). */
int64_t pl_vattn_shared_rows(pl_vattn *va);
/* One unit of background work as the mapper thread does it (for tests without the thread):
 * returns 1 if it did something. */
int pl_vattn_background_once(pl_vattn *va);

int32_t pl_vattn_mapped_rows(pl_vattn *va, int32_t slot);
void pl_vattn_get_stats(pl_vattn *va, pl_vattn_stats *s);
/* 4 KiB pages the kernel holds in memory now (mincore), -1 on error: what the layout actually
 * commits, for tests and benchmarks. ANON: the reservation's (O(reserved bytes / 4 KiB)); MEMFD:
 * the memfd's own pages through a read-only view of it, so a page mapped into several slots
 * counts once (O(pool bytes / 4 KiB)). */
int64_t pl_vattn_resident_pages(const pl_vattn *va);
/* The invariants above (O(slots × rows)). */
pl_status pl_vattn_check(pl_vattn *va);

/* Bytes from "4K", "64K", "2M" (or their byte counts); 0 if not one of the three. */
size_t pl_vattn_parse_page_size(const char *s);

#endif
