/* kv/vattn — see vattn.h for the layout, the techniques and the invariants. */
#include "kv/vattn.h"

#include "base/clock.h"
#include "kv/block_pool.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MFD_HUGETLB
#define MFD_HUGETLB 0x0004U
#endif
#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21U << 26)
#endif

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define HUGE_2M ((size_t)2 << 20)

static uint64_t now_ns(void) { return (uint64_t)(pl_clock_now() * 1e9); }

struct pl_vattn {
    pl_vattn_config cfg;
    char *base;           /* aligned reservation */
    void *raw;            /* what mmap returned (may start below base) */
    size_t raw_bytes, reserved, slot_bytes;
    /* region r: its row is reg_k[r] pages (1 unless region_pages says), its slots start at
     * reg_off[r] bytes into the reservation, each slot_bytes x reg_k[r] bytes; in a physical row
     * (row_k pages) its pages come after reg_row[r] pages of the regions before it */
    int32_t *reg_k;
    size_t *reg_off;
    int64_t *reg_row;
    int64_t row_k;
    int fd;               /* memfd (MEMFD backend), else -1 */
    void *view;           /* MEMFD: the whole memfd mapped once, read-only, for mincore */
    size_t view_bytes;
    int huge;             /* 2 MiB pages through hugetlb: never punched */
    int populate;         /* MADV_POPULATE_WRITE works here (cleared at its first EINVAL) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int thread_on, stop;
    uint8_t *used;        /* [n_slots] */
    uint8_t *fresh;       /* [n_slots] acquired, need not set yet (eager learns prompt sizes) */
    int32_t *need;        /* [n_slots] rows needed */
    int32_t *need_tokens; /* [n_slots] */
    int32_t *mapped;      /* [n_slots] rows mapped: positions [0, mapped) */
    int32_t *row_of;      /* [n_slots × rows_per_slot] physical row at each position, or -1 */
    int32_t *row_pos;     /* [phys_rows] the position a row was last mapped at (a row mapped at
                             several positions has the same one in every slot) */
    /* the physical rows: a block per row (ref = its (slot, position) mappings); the free queue
     * holds plain free rows at its head and the prefix cache's unmapped rows (hashed, ref 0) in
     * LRU order behind them */
    pl_block_pool pool;
    int32_t *hit_rows;    /* [rows_per_slot] scratch of a prefix walk */
    uint64_t *extra;      /* [n_slots] the prefix key the slot's pages are hashed under */
    int32_t *reg_n;       /* [n_slots] leading pages walked by pl_vattn_register */
    int32_t *reg_parent;  /* [n_slots] the hashed row that holds page reg_n - 1, or -1 */
    uint32_t *reg_gen;    /* [n_slots] reg_parent's gen then (its hash since dropped or set
                             again: the walk starts over) */
    pl_block_hash *reg_hash; /* [n_slots] the chain's hash after reg_n pages */
    int64_t need_sum;
    int64_t n_alias;      /* Σ (ref - 1) over mapped rows: positions that share another's page */
    int32_t eager_rows;   /* rows the eager slot is pre-mapped to (largest prompt seen) */
    pl_vattn_stats st;
};

static int32_t rows_for(const pl_vattn *va, int64_t tokens) {
    int64_t t = va->cfg.tokens_per_row, r = tokens <= 0 ? 0 : (tokens + t - 1) / t;
    return r > va->cfg.rows_per_slot ? va->cfg.rows_per_slot : (int32_t)r;
}

static char *page_at(const pl_vattn *va, int32_t region, int32_t slot, int32_t pos) {
    return va->base + va->reg_off[region] + (size_t)slot * va->slot_bytes * va->reg_k[region] +
           (size_t)pos * va->reg_k[region] * va->cfg.page_size;
}

/* Bytes of region r's page of one row (its tokens_per_row rows). */
static size_t row_page(const pl_vattn *va, int32_t r) {
    return (size_t)va->reg_k[r] * va->cfg.page_size;
}

/* ---- mapping one row (lock held) ------------------------------------------------------------ */

static int32_t ref_of(const pl_vattn *va, int32_t row) { return va->pool.blocks[row].ref; }
/* Free rows that hold nothing (the prefix cache's rows are free too, but hold a prefix). */
static int64_t plain_free(const pl_vattn *va) {
    return (int64_t)va->pool.n_free - va->pool.n_free_cached;
}

/* Give a row's memory back to the system (a hugetlb pool keeps its pages). */
static void punch(pl_vattn *va, int32_t row) {
    if (va->fd < 0 || va->huge) return;
    size_t P = va->cfg.page_size;
    off_t off = (off_t)row * va->row_k * (off_t)P;
    int rc = fallocate(va->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off,
                       (off_t)P * va->row_k);
    PL_ASSERT(rc == 0);
}

/* Map physical row `row` at position pos of slot's every region (over what is there: MAP_FIXED
 * replaces an earlier mapping in place). */
static int map_at(pl_vattn *va, int32_t slot, int32_t pos, int32_t row) {
    va->row_pos[row] = pos;
    for (int32_t r = 0; r < va->cfg.n_regions; r++) {
        char *p = page_at(va, r, slot, pos);
        const size_t P = row_page(va, r);
        if (va->fd >= 0) {
            off_t off = ((off_t)row * va->row_k + va->reg_row[r]) * (off_t)va->cfg.page_size;
            if (mmap(p, P, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_SHARED, va->fd, off) == MAP_FAILED)
                return -1;
        } else if (mprotect(p, P, PROT_READ | PROT_WRITE) != 0) {
            return -1;
        }
        /* Commit (fault in and zero) the page now, on this thread, so the step that writes it
         * does not take the faults; kernels before 5.14 lack it and fault at first touch. */
        if (va->populate && madvise(p, P, MADV_POPULATE_WRITE) != 0) {
            if (errno != EINVAL) return -1;
            va->populate = 0;
        }
    }
    return 0;
}

/* A fresh row at the slot's next position. */
static int map_row(pl_vattn *va, int32_t slot, int32_t row, int bg) {
    int32_t pos = va->mapped[slot];
    if (map_at(va, slot, pos, row) != 0) return -1;
    va->row_of[(size_t)slot * va->cfg.rows_per_slot + pos] = row;
    va->mapped[slot] = pos + 1;
    uint64_t pages = (uint64_t)va->row_k;
    if (bg) va->st.pages_mapped_bg += pages;
    else va->st.pages_mapped_sync += pages;
    return 0;
}

/* A hashed row now mapped at one position only. A slot that rolled back below the end of a
 * page it shared kept the page's prefix for the others (pl_vattn_set_need evicts only a row of
 * its own); now that the page is its own, its next write changes it in place and no copy
 * comes first: if the slot does not fill the page, the prefix goes now. (Without this a later
 * prefix hit mapped the rewritten page as the old prefix's.) */
static void unhash_if_unfilled(pl_vattn *va, int32_t row) {
    const int32_t pos = va->row_pos[row], R = va->cfg.rows_per_slot;
    for (int32_t s = 0; s < va->cfg.n_slots; s++)
        if (va->used[s] && pos < va->mapped[s] && va->row_of[(size_t)s * R + pos] == row) {
            if (va->need_tokens[s] < (pos + 1) * va->cfg.tokens_per_row)
                pl_block_pool_evict(&va->pool, row);
            return;
        }
}

/* A position let go of its row: one user less; the last one's going frees it (the memory goes
 * back to the system) or, if it holds a prefix, moves it to the prefix cache's LRU tail with its
 * memory. */
static void drop_row(pl_vattn *va, int32_t row) {
    pl_block_pool_release(&va->pool, row);
    if (ref_of(va, row) > 0) va->n_alias--;
    else if (!va->pool.blocks[row].hashed) punch(va, row);
    if (ref_of(va, row) == 1 && va->pool.blocks[row].hashed) unhash_if_unfilled(va, row);
}

/* Unmap the slot's last mapped row; the row goes back to the free list when no other position
 * maps it. The reservation is restored (PROT_NONE). Failure here would leave a page we cannot
 * account for, so it is asserted (the calls only fail on bad arguments). */
static void unmap_last(pl_vattn *va, int32_t slot, int bg) {
    int32_t pos = va->mapped[slot] - 1;
    PL_ASSERT(pos >= 0);
    size_t k = (size_t)slot * va->cfg.rows_per_slot + pos;
    int32_t row = va->row_of[k];
    for (int32_t r = 0; r < va->cfg.n_regions; r++) {
        char *p = page_at(va, r, slot, pos);
        const size_t P = row_page(va, r);
        if (va->fd >= 0) {
            void *q = mmap(p, P, PROT_NONE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                           -1, 0);
            PL_ASSERT(q != MAP_FAILED);
        } else {
            int rc = madvise(p, P, MADV_DONTNEED);
            rc |= mprotect(p, P, PROT_NONE);
            PL_ASSERT(rc == 0);
        }
    }
    va->row_of[k] = -1;
    va->mapped[slot] = pos;
    drop_row(va, row);
    uint64_t pages = (uint64_t)va->row_k;
    if (bg) va->st.pages_unmapped_bg += pages;
    else va->st.pages_unmapped_sync += pages;
}

/* Does the slot map, at positions >= from, a row another position maps too or one that holds a
 * prefix (the prefix cache may map it elsewhere any time)? Such rows are never left in a free
 * slot nor above a need. */
static int common_from(const pl_vattn *va, int32_t slot, int32_t from) {
    const int32_t *rows = va->row_of + (size_t)slot * va->cfg.rows_per_slot;
    for (int32_t j = from; j < va->mapped[slot]; j++)
        if (ref_of(va, rows[j]) > 1 || va->pool.blocks[rows[j]].hashed) return 1;
    return 0;
}

/* The free slot with the fewest (> 0) or the most rows mapped; -1 if none has any. */
static int32_t free_slot_with_rows(const pl_vattn *va, int most) {
    int32_t best = -1;
    for (int32_t s = 0; s < va->cfg.n_slots; s++) {
        if (va->used[s] || va->mapped[s] == 0) continue;
        if (best < 0 || (most ? va->mapped[s] > va->mapped[best] : va->mapped[s] < va->mapped[best]))
            best = s;
    }
    return best;
}

/* A row for `slot` (ref 1): a plain free one, else reclaimed from a free slot (the fewest mapped
 * first: big cached slots are the ones worth reusing), else (on the engine thread) the prefix
 * cache's least recently used row, else (excess) from a used slot's rows beyond its need. -1 if
 * none. The mapper thread never evicts the prefix cache, so what a prefix walk found on the
 * engine thread is still there when it maps it. */
static int32_t take_row(pl_vattn *va, int excess, int bg) {
    if (plain_free(va) == 0) {
        int32_t victim = free_slot_with_rows(va, 0);
        if (victim < 0 && (bg || va->pool.n_free_cached == 0) && excess)
            for (int32_t s = 0; s < va->cfg.n_slots; s++)
                if (va->used[s] && va->mapped[s] > va->need[s]) { /* slot too: above pos */
                    victim = s;
                    break;
                }
        if (victim >= 0) unmap_last(va, victim, bg);
        else if (bg || va->pool.n_free_cached == 0) return -1;
    }
    int evict = va->pool.blocks[va->pool.free_head].hashed;
    int32_t row = pl_block_pool_alloc(&va->pool);
    if (evict) { /* its old bytes go: the new user starts from zeroed memory, as from a free row */
        punch(va, row);
        va->st.rows_evicted++;
    }
    return row;
}

static int map_next(pl_vattn *va, int32_t slot, int excess, int bg) {
    int32_t row = take_row(va, excess, bg);
    if (row < 0) return 1;
    if (map_row(va, slot, row, bg) != 0) {
        drop_row(va, row);
        return -1;
    }
    return 0;
}

/* ---- background work (lock held) ------------------------------------------------------------ */

static int64_t keep_free(const pl_vattn *va) {
    return (int64_t)(va->cfg.reclaim_threshold * (double)va->cfg.phys_rows);
}

static int background_locked(pl_vattn *va) {
    const pl_vattn_config *c = &va->cfg;
    if (c->overlap) /* step i + 1's row of every decoding slot */
        for (int32_t s = 0; s < c->n_slots; s++) {
            if (!va->used[s] || va->need[s] == 0) continue;
            if (va->mapped[s] < rows_for(va, (int64_t)va->need_tokens[s] + 1))
                return map_next(va, s, 0, 1) == 0;
        }
    if (c->deferred_reclaim && va->pool.n_free < keep_free(va)) {
        int32_t victim = free_slot_with_rows(va, 0);
        if (victim >= 0) {
            unmap_last(va, victim, 1);
            return 1;
        }
    }
    if (c->eager && va->eager_rows > 0 && plain_free(va) - 1 >= keep_free(va)) {
        int32_t target = -1;
        for (int32_t s = 0; s < c->n_slots; s++)
            if (!va->used[s] && (target < 0 || va->mapped[s] > va->mapped[target])) target = s;
        if (target >= 0 && va->mapped[target] < va->eager_rows)
            return map_next(va, target, 0, 1) == 0;
    }
    return 0;
}

int pl_vattn_background_once(pl_vattn *va) {
    pthread_mutex_lock(&va->mu);
    int r = background_locked(va);
    pthread_mutex_unlock(&va->mu);
    return r;
}

static void *mapper_main(void *arg) {
    pl_vattn *va = arg;
    pthread_mutex_lock(&va->mu);
    while (!va->stop) {
        if (background_locked(va)) { /* one unit per lock hold: the engine waits <= one row */
            pthread_mutex_unlock(&va->mu);
            pthread_mutex_lock(&va->mu);
            continue;
        }
        pthread_cond_wait(&va->cv, &va->mu);
    }
    pthread_mutex_unlock(&va->mu);
    return NULL;
}

static void wake(pl_vattn *va) {
    if (va->thread_on) pthread_cond_signal(&va->cv);
}

/* ---- life cycle ----------------------------------------------------------------------------- */

size_t pl_vattn_parse_page_size(const char *s) {
    if (!s) return 0;
    if (!strcmp(s, "4K") || !strcmp(s, "4k") || !strcmp(s, "4096")) return 4096;
    if (!strcmp(s, "64K") || !strcmp(s, "64k") || !strcmp(s, "65536")) return 65536;
    if (!strcmp(s, "2M") || !strcmp(s, "2m") || !strcmp(s, "2097152")) return HUGE_2M;
    return 0;
}

static pl_status setup_memory(pl_vattn *va) {
    const pl_vattn_config *c = &va->cfg;
    size_t P = c->page_size;
    va->huge = P == HUGE_2M;
    if (c->backend == PL_VATTN_MEMFD) {
        unsigned flags = MFD_CLOEXEC | (va->huge ? MFD_HUGETLB | MFD_HUGE_2MB : 0);
        va->fd = memfd_create("pagellm-kv-vattn", flags);
        if (va->fd < 0)
            return pl_fail(PL_ERR_UNSUPPORTED, "kv-page-size %zu: memfd_create%s failed: %s", P,
                           va->huge ? " with MFD_HUGETLB (2 MiB huge pages)" : "", strerror(errno));
        off_t bytes = (off_t)c->phys_rows * va->row_k * (off_t)P;
        if (ftruncate(va->fd, bytes) != 0)
            return pl_fail(PL_ERR_NOMEM, "kv-cache-memory: cannot size the page pool to %lld bytes: %s",
                           (long long)bytes, strerror(errno));
        /* Huge pages are taken now, so a system without enough says so at start, not mid-step. */
        if (va->huge && fallocate(va->fd, 0, 0, bytes) != 0)
            return pl_fail(PL_ERR_UNSUPPORTED, "kv-page-size 2M: the system cannot provide %lld "
                           "MiB of 2 MiB huge pages (%s); reserve them (vm.nr_hugepages) or use "
                           "kv-page-size 4K or 64K", (long long)(bytes >> 20), strerror(errno));
        /* mincore of the file's pages (a shared page once, however often it is mapped) */
        va->view = mmap(NULL, (size_t)bytes, PROT_READ, MAP_SHARED | MAP_NORESERVE, va->fd, 0);
        if (va->view == MAP_FAILED) {
            va->view = NULL;
            return pl_fail(PL_ERR_NOMEM, "kv-layout vattention: cannot map the page pool's view: "
                           "%s", strerror(errno));
        }
        va->view_bytes = (size_t)bytes;
    } else if (va->huge) {
        return pl_fail(PL_ERR_UNSUPPORTED, "kv-page-size 2M needs the memfd backend (hugetlb)");
    }
    int prot = PROT_NONE, flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    va->raw_bytes = va->reserved + P;
    va->raw = mmap(NULL, va->raw_bytes, prot, flags, -1, 0);
    if (va->raw == MAP_FAILED) {
        va->raw = NULL;
        return pl_fail(PL_ERR_NOMEM, "kv-layout vattention: cannot reserve %zu MiB of address "
                       "space: %s", va->reserved >> 20, strerror(errno));
    }
    uintptr_t a = ((uintptr_t)va->raw + P - 1) & ~(uintptr_t)(P - 1);
    va->base = (char *)a;
    return PL_OK;
}

pl_status pl_vattn_create(const pl_vattn_config *c, pl_vattn **out) {
    *out = NULL;
    size_t P = c->page_size;
    if (P != 4096 && P != 65536 && P != HUGE_2M)
        return pl_fail(PL_ERR_INVALID_ARG, "kv-page-size %zu is not supported: use 4K, 64K or 2M", P);
    if ((size_t)sysconf(_SC_PAGESIZE) > P)
        return pl_fail(PL_ERR_UNSUPPORTED, "kv-page-size %zu is below the system page size %ld", P,
                       sysconf(_SC_PAGESIZE));
    if (c->n_regions < 2 || c->n_slots < 1 || c->rows_per_slot < 1 || c->tokens_per_row < 1)
        return pl_fail(PL_ERR_INVALID_ARG, "vattn: %d regions, %d slots, %d rows per slot, %d "
                       "tokens per row: each must be >= 1 (regions >= 2)", (int)c->n_regions,
                       (int)c->n_slots, (int)c->rows_per_slot, (int)c->tokens_per_row);
    int64_t row_k = 0; /* pages of a physical row */
    for (int32_t r = 0; r < c->n_regions; r++) {
        const int32_t k = c->region_pages ? c->region_pages[r] : 1;
        if (k < 1 || k > 4096)
            return pl_fail(PL_ERR_INVALID_ARG, "vattn: region %d takes %d pages a row (1..4096)",
                           (int)r, (int)k);
        row_k += k;
    }
    if (c->phys_rows < 1 || c->phys_rows > INT32_MAX / 2)
        return pl_fail(PL_ERR_INVALID_ARG, "kv-cache-memory holds %lld pages of %zu bytes per "
                       "layer K and V; it needs at least one (%d regions, %lld pages of %zu "
                       "bytes = %llu bytes)", (long long)c->phys_rows, P, (int)c->n_regions,
                       (long long)row_k, P, (unsigned long long)row_k * P);
    if (!(c->reclaim_threshold >= 0 && c->reclaim_threshold < 1))
        return pl_fail(PL_ERR_INVALID_ARG, "vattn: reclaim threshold must be in [0, 1)");
    uint64_t slot_bytes = (uint64_t)c->rows_per_slot * P;
    uint64_t total = slot_bytes * (uint64_t)c->n_slots * (uint64_t)row_k;
    if (total / (uint64_t)row_k / c->n_slots != slot_bytes || total > ((uint64_t)1 << 46))
        return pl_fail(PL_ERR_INVALID_ARG, "kv-layout vattention: %d slots x %lld pages a row "
                       "(%d regions) x %llu bytes exceed the address space this process may "
                       "reserve (64 TiB)", (int)c->n_slots, (long long)row_k, (int)c->n_regions,
                       (unsigned long long)slot_bytes);
    pl_vattn *va = calloc(1, sizeof *va);
    if (!va) return pl_fail(PL_ERR_NOMEM, "vattn: out of memory");
    va->cfg = *c;
    va->cfg.region_pages = NULL; /* the caller's array: copied into reg_k */
    va->fd = -1;
    va->populate = 1;
    va->slot_bytes = (size_t)slot_bytes;
    va->reserved = (size_t)total;
    va->row_k = row_k;
    va->reg_k = malloc((size_t)c->n_regions * sizeof *va->reg_k);
    va->reg_off = malloc((size_t)c->n_regions * sizeof *va->reg_off);
    va->reg_row = malloc((size_t)c->n_regions * sizeof *va->reg_row);
    if (va->reg_k && va->reg_off && va->reg_row) {
        size_t off = 0;
        int64_t in_row = 0;
        for (int32_t r = 0; r < c->n_regions; r++) {
            va->reg_k[r] = c->region_pages ? c->region_pages[r] : 1;
            va->reg_off[r] = off;
            va->reg_row[r] = in_row;
            off += (size_t)slot_bytes * (size_t)va->reg_k[r] * (size_t)c->n_slots;
            in_row += va->reg_k[r];
        }
    }
    pthread_mutex_init(&va->mu, NULL);
    pthread_cond_init(&va->cv, NULL);
    size_t ns = (size_t)c->n_slots, npos = ns * (size_t)c->rows_per_slot;
    va->used = calloc(ns, 1);
    va->fresh = calloc(ns, 1);
    va->need = calloc(ns, sizeof *va->need);
    va->need_tokens = calloc(ns, sizeof *va->need_tokens);
    va->mapped = calloc(ns, sizeof *va->mapped);
    va->row_of = malloc(npos * sizeof *va->row_of);
    va->row_pos = calloc((size_t)c->phys_rows, sizeof *va->row_pos);
    va->hit_rows = malloc((size_t)c->rows_per_slot * sizeof *va->hit_rows);
    va->extra = calloc(ns, sizeof *va->extra);
    va->reg_n = calloc(ns, sizeof *va->reg_n);
    va->reg_parent = calloc(ns, sizeof *va->reg_parent);
    va->reg_gen = calloc(ns, sizeof *va->reg_gen);
    va->reg_hash = calloc(ns, sizeof *va->reg_hash);
    pl_status st = PL_OK;
    if (!va->used || !va->fresh || !va->need || !va->need_tokens || !va->mapped || !va->row_of ||
        !va->row_pos ||
        !va->hit_rows || !va->extra || !va->reg_n || !va->reg_parent || !va->reg_gen ||
        !va->reg_hash ||
        !va->reg_k || !va->reg_off || !va->reg_row)
        st = pl_fail(PL_ERR_NOMEM, "vattn: cannot allocate bookkeeping for %d slots", (int)ns);
    if (st == PL_OK && c->prefix_cache && c->backend != PL_VATTN_MEMFD)
        st = pl_fail(PL_ERR_UNSUPPORTED, "kv-layout vattention: a prefix cache maps a page at "
                     "several addresses and needs the memfd backend (--vattn-share)");
    if (st == PL_OK && c->prefix_cache && c->tokens_per_row > 4096)
        st = pl_fail(PL_ERR_UNSUPPORTED, "kv-layout vattention: a page of %d tokens is too long "
                     "for the prefix cache (at most 4096): use a smaller kv-page-size",
                     (int)c->tokens_per_row);
    if (st == PL_OK) {
        for (size_t i = 0; i < npos; i++) va->row_of[i] = -1;
        /* Lowest row ids first: a fresh pool maps the memfd front to back. Without a prefix
         * cache the pool holds no tokens (its block size is nominal). */
        st = pl_block_pool_init(&va->pool, (int32_t)c->phys_rows,
                                c->prefix_cache ? c->tokens_per_row : 1, c->prefix_cache,
                                0x9e3779b97f4a7c15ULL);
    }
    if (st == PL_OK) st = setup_memory(va);
    if (st == PL_OK && c->start_thread && (c->overlap || c->eager || c->deferred_reclaim)) {
        if (pthread_create(&va->thread, NULL, mapper_main, va) != 0)
            st = pl_fail(PL_ERR_NOMEM, "vattn: cannot start the mapper thread");
        else va->thread_on = 1;
    }
    if (st != PL_OK) {
        pl_vattn_destroy(va);
        return st;
    }
    *out = va;
    return PL_OK;
}

void pl_vattn_destroy(pl_vattn *va) {
    if (!va) return;
    if (va->thread_on) {
        pthread_mutex_lock(&va->mu);
        va->stop = 1;
        pthread_cond_signal(&va->cv);
        pthread_mutex_unlock(&va->mu);
        pthread_join(va->thread, NULL);
    }
    if (va->raw) munmap(va->raw, va->raw_bytes);
    if (va->view) munmap(va->view, va->view_bytes);
    if (va->fd >= 0) close(va->fd);
    pthread_mutex_destroy(&va->mu);
    pthread_cond_destroy(&va->cv);
    free(va->used);
    free(va->fresh);
    free(va->need);
    free(va->need_tokens);
    free(va->mapped);
    free(va->row_of);
    free(va->row_pos);
    pl_block_pool_destroy(&va->pool);
    free(va->hit_rows);
    free(va->extra);
    free(va->reg_n);
    free(va->reg_parent);
    free(va->reg_gen);
    free(va->reg_hash);
    free(va->reg_k);
    free(va->reg_off);
    free(va->reg_row);
    free(va);
}

void *pl_vattn_base(const pl_vattn *va) { return va->base; }
size_t pl_vattn_slot_bytes(const pl_vattn *va) { return va->slot_bytes; }
size_t pl_vattn_region_offset(const pl_vattn *va, int32_t r) { return va->reg_off[r]; }
size_t pl_vattn_reserved_bytes(const pl_vattn *va) { return va->reserved; }
const pl_vattn_config *pl_vattn_get_config(const pl_vattn *va) { return &va->cfg; }

/* ---- slots ---------------------------------------------------------------------------------- */

/* pl_vattn_register starts over at the slot's first page. */
static void forget_walk(pl_vattn *va, int32_t slot) {
    va->reg_n[slot] = 0;
    va->reg_parent[slot] = -1;
    va->reg_hash[slot] = pl_block_hash_root;
}

/* Map rows[0, n) (each mapped elsewhere or in the prefix cache) at the used slot's positions
 * [0, n); the slot's own rows there are let go. */
static int map_rows_into(pl_vattn *va, int32_t to, const int32_t *rows, int32_t n) {
    int32_t *dst = va->row_of + (size_t)to * va->cfg.rows_per_slot;
    for (int32_t j = 0; j < n; j++) {
        if (j < va->mapped[to] && dst[j] == rows[j]) continue;
        if (map_at(va, to, j, rows[j]) != 0) return -1;
        if (ref_of(va, rows[j]) > 0) {
            va->n_alias++;
            va->st.pages_shared += (uint64_t)va->row_k;
        } else {
            va->st.rows_from_cache++;
        }
        pl_block_pool_touch(&va->pool, rows[j]);
        const int32_t own = j < va->mapped[to] ? dst[j] : -1;
        dst[j] = rows[j];
        if (own >= 0) drop_row(va, own); /* the slot's own page, replaced */
        else va->mapped[to] = j + 1;
    }
    return 0;
}

int32_t pl_vattn_acquire(pl_vattn *va) {
    pthread_mutex_lock(&va->mu);
    int32_t best = -1;
    for (int32_t s = 0; s < va->cfg.n_slots; s++)
        if (!va->used[s] && (best < 0 || va->mapped[s] > va->mapped[best])) best = s;
    if (best >= 0) {
        va->used[best] = 1;
        va->fresh[best] = 1;
        va->need[best] = va->need_tokens[best] = 0;
        va->extra[best] = 0;
        forget_walk(va, best);
        va->st.slots_acquired++;
        if (va->mapped[best] > 0) va->st.slots_reused++;
        wake(va); /* eager: pre-map the next free slot */
    }
    pthread_mutex_unlock(&va->mu);
    return best;
}

void pl_vattn_release(pl_vattn *va, int32_t slot) {
    pthread_mutex_lock(&va->mu);
    PL_ASSERT(slot >= 0 && slot < va->cfg.n_slots && va->used[slot]);
    va->used[slot] = va->fresh[slot] = 0;
    va->need_sum -= va->need[slot];
    va->need[slot] = va->need_tokens[slot] = 0;
    /* A slot sharing pages gives up all of them (the next request would write over the shared
     * ones, and its mapped rows stay a prefix), so a free slot's rows are always its own. */
    if ((!va->cfg.deferred_reclaim || common_from(va, slot, 0)) && va->mapped[slot] > 0) {
        uint64_t t0 = now_ns();
        while (va->mapped[slot] > 0) unmap_last(va, slot, 0);
        va->st.map_ns_in_step += now_ns() - t0;
    }
    wake(va);
    pthread_mutex_unlock(&va->mu);
}

void pl_vattn_set_need(pl_vattn *va, int32_t slot, int32_t n_tokens) {
    pthread_mutex_lock(&va->mu);
    PL_ASSERT(slot >= 0 && slot < va->cfg.n_slots && va->used[slot] && n_tokens >= 0);
    int32_t rows = rows_for(va, n_tokens);
    /* a shared page is only ever needed: one above the new need is let go now (rolled back
     * below a fork point), with the rows mapped after it */
    if (rows < va->mapped[slot] && common_from(va, slot, rows)) {
        uint64_t t0 = now_ns();
        while (va->mapped[slot] > rows && common_from(va, slot, rows)) unmap_last(va, slot, 0);
        va->st.map_ns_in_step += now_ns() - t0;
    }
    /* a page the slot no longer fills holds no prefix any more: it will be written again */
    const int32_t full = n_tokens / va->cfg.tokens_per_row;
    if (full < va->reg_n[slot]) forget_walk(va, slot);
    for (int32_t j = full; va->cfg.prefix_cache && j < va->mapped[slot] && j < rows; j++) {
        int32_t r = va->row_of[(size_t)slot * va->cfg.rows_per_slot + j];
        if (ref_of(va, r) == 1) pl_block_pool_evict(&va->pool, r); /* shared: copied first */
    }
    va->need_sum += rows - va->need[slot];
    va->need[slot] = rows;
    va->need_tokens[slot] = n_tokens;
    PL_ASSERT(va->need_sum - va->n_alias <= va->cfg.phys_rows);
    if (va->fresh[slot] && rows > 0) {
        va->fresh[slot] = 0;
        if (rows > va->eager_rows) va->eager_rows = rows;
    }
    pthread_mutex_unlock(&va->mu);
}

pl_status pl_vattn_share(pl_vattn *va, int32_t from, int32_t to, int32_t n_rows) {
    pthread_mutex_lock(&va->mu);
    const pl_vattn_config *c = &va->cfg;
    PL_ASSERT(from >= 0 && from < c->n_slots && to >= 0 && to < c->n_slots && from != to &&
              va->used[from] && va->used[to] && n_rows >= 0 && n_rows <= c->rows_per_slot);
    pl_status st = PL_OK;
    uint64_t t0 = now_ns();
    errno = 0;
    if (va->fd < 0) {
        st = pl_fail(PL_ERR_UNSUPPORTED, "kv-layout vattention: sharing pages needs the memfd "
                     "backend (--vattn-share)");
        goto out;
    }
    /* from's pages first (a lead just admitted may have none mapped yet) */
    while (va->mapped[from] < n_rows)
        if (map_next(va, from, 1, 0) != 0) goto nomem;
    va->extra[to] = va->extra[from]; /* same tokens: its pages hash under the same key */
    forget_walk(va, to);
    const int32_t *src = va->row_of + (size_t)from * c->rows_per_slot;
    const int32_t last = n_rows - 1, own = last >= 0 && last < va->mapped[to]
                                                 ? va->row_of[(size_t)to * c->rows_per_slot + last]
                                                 : -1;
    /* from's partly filled last page over a private page `to` has there (a beam step's fork
     * into a dropped beam's slot): copy the bytes in place rather than map the page and copy it
     * at the next write */
    int copy = own >= 0 && own != src[last] && n_rows == va->need[from] &&
               va->need_tokens[from] % c->tokens_per_row != 0 && ref_of(va, own) == 1 &&
               !va->pool.blocks[own].hashed;
    if (map_rows_into(va, to, src, copy ? last : n_rows) != 0) goto nomem;
    /* The copy keeps a row of its own that the caller's accounting (and the KV manager's, which
     * counts every forked page shared) does not expect until the next write: only where the
     * needs, with to's set to n_rows rows, leave a row for it; else the page is mapped shared
     * and copied at that write, as any shared last page (pl_vattn_unshare). A fresh slot
     * reused under deferred reclamation at a full pool otherwise broke the needs' bound. */
    if (copy && va->need_sum - va->need[to] + n_rows - va->n_alias > c->phys_rows) {
        copy = 0;
        if (map_rows_into(va, to, src, n_rows) != 0) goto nomem;
    }
    if (copy) {
        for (int32_t r = 0; r < c->n_regions; r++)
            memcpy(page_at(va, r, to, last), page_at(va, r, from, last), row_page(va, r));
        va->st.pages_copied += (uint64_t)va->row_k;
    }
    goto out;
nomem:
    st = pl_fail(PL_ERR_NOMEM, "kv-layout vattention: cannot map %d shared pages of slot %d into "
                 "slot %d: %s", (int)n_rows, (int)from, (int)to,
                 errno ? strerror(errno) : "no page left");
out:
    va->st.map_ns_in_step += now_ns() - t0;
    pthread_mutex_unlock(&va->mu);
    return st;
}

int pl_vattn_row_shared(pl_vattn *va, int32_t slot, int32_t pos) {
    pthread_mutex_lock(&va->mu);
    int shared = pos >= 0 && pos < va->mapped[slot] &&
                 ref_of(va, va->row_of[(size_t)slot * va->cfg.rows_per_slot + pos]) > 1;
    pthread_mutex_unlock(&va->mu);
    return shared;
}

pl_status pl_vattn_unshare(pl_vattn *va, int32_t slot, int32_t pos) {
    pthread_mutex_lock(&va->mu);
    const pl_vattn_config *c = &va->cfg;
    const size_t R = (size_t)c->rows_per_slot;
    PL_ASSERT(slot >= 0 && slot < c->n_slots && va->used[slot] && pos >= 0 &&
              pos < va->mapped[slot] && ref_of(va, va->row_of[slot * R + pos]) > 1);
    uint64_t t0 = now_ns();
    pl_status st = PL_OK;
    int32_t old = va->row_of[slot * R + pos], other = -1;
    /* a shared row sits at the same position in every slot that maps it: copy from another */
    for (int32_t s = 0; s < c->n_slots && other < 0; s++)
        if (s != slot && pos < va->mapped[s] && va->row_of[s * R + pos] == old) other = s;
    PL_ASSERT(other >= 0);
    errno = 0;
    int32_t row = take_row(va, 1, 0);
    if (row < 0 || map_at(va, slot, pos, row) != 0) {
        if (row >= 0) drop_row(va, row);
        st = pl_fail(PL_ERR_NOMEM, "kv-layout vattention: cannot copy a shared page of slot %d: "
                     "%s", (int)slot, errno ? strerror(errno) : "no page left");
    } else {
        for (int32_t r = 0; r < c->n_regions; r++)
            memcpy(page_at(va, r, slot, pos), page_at(va, r, other, pos), row_page(va, r));
        va->row_of[slot * R + pos] = row;
        drop_row(va, old);
        va->st.pages_copied += (uint64_t)va->row_k;
        va->st.pages_mapped_sync += (uint64_t)va->row_k;
    }
    va->st.map_ns_in_step += now_ns() - t0;
    pthread_mutex_unlock(&va->mu);
    return st;
}

int pl_vattn_shares(const pl_vattn *va) { return va->fd >= 0; }

/* ---- the prefix cache ----------------------------------------------------------------------- */

/* The leading pages of tokens (at most n_pages) whose rows hold that prefix under `extra`, into
 * va->hit_rows; *mapped counts those mapped now (the rest are in the prefix cache). */
static int32_t walk(pl_vattn *va, const int32_t *tokens, int32_t n_pages, uint64_t extra,
                    int32_t *mapped) {
    const int32_t tpr = va->cfg.tokens_per_row;
    pl_block_hash h = pl_block_hash_root;
    int32_t j = 0, parent = -1;
    if (mapped) *mapped = 0;
    if (!va->cfg.prefix_cache || !tokens) return 0;
    if (n_pages > va->cfg.rows_per_slot) n_pages = va->cfg.rows_per_slot;
    for (; j < n_pages; j++) {
        const int32_t *tok = tokens + (size_t)j * tpr;
        h = pl_block_pool_hash(&va->pool, h, extra, tok);
        int32_t r = pl_block_pool_lookup(&va->pool, h, parent, extra, tok);
        if (r < 0) break;
        va->hit_rows[j] = parent = r;
        if (mapped && ref_of(va, r) > 0) ++*mapped;
    }
    return j;
}

int32_t pl_vattn_prefix_probe(pl_vattn *va, const int32_t *tokens, int32_t n_pages,
                              uint64_t extra, int32_t *n_mapped) {
    pthread_mutex_lock(&va->mu);
    int32_t hits = walk(va, tokens, n_pages, extra, n_mapped);
    pthread_mutex_unlock(&va->mu);
    return hits;
}

pl_status pl_vattn_map_prefix(pl_vattn *va, int32_t slot, const int32_t *tokens, int32_t n_pages,
                              uint64_t extra, int32_t *n_hit) {
    pthread_mutex_lock(&va->mu);
    PL_ASSERT(slot >= 0 && slot < va->cfg.n_slots && va->used[slot] && va->need[slot] == 0);
    uint64_t t0 = now_ns();
    pl_status st = PL_OK;
    errno = 0;
    int32_t hits = walk(va, tokens, n_pages, extra, NULL);
    va->extra[slot] = extra;
    forget_walk(va, slot);
    if (map_rows_into(va, slot, va->hit_rows, hits) != 0) {
        st = pl_fail(PL_ERR_NOMEM, "kv-layout vattention: cannot map %d cached prefix pages into "
                     "slot %d: %s", (int)hits, (int)slot, strerror(errno));
        hits = 0;
        while (hits < va->mapped[slot] && va->row_of[(size_t)slot * va->cfg.rows_per_slot + hits] ==
                                              va->hit_rows[hits])
            hits++;
    }
    *n_hit = hits;
    va->st.map_ns_in_step += now_ns() - t0;
    pthread_mutex_unlock(&va->mu);
    return st;
}

void pl_vattn_register(pl_vattn *va, int32_t slot, const int32_t *tokens, int32_t n_pages) {
    pthread_mutex_lock(&va->mu);
    const int32_t tpr = va->cfg.tokens_per_row;
    PL_ASSERT(slot >= 0 && slot < va->cfg.n_slots && va->used[slot]);
    if (n_pages > va->need[slot]) n_pages = va->need[slot];
    if (n_pages > va->mapped[slot]) n_pages = va->mapped[slot];
    /* the row holding the walk's last page may have lost its prefix since (another slot's
     * duplicate, rolled back, or a cached row taken for another use): start over, so the
     * chain never names a parent that is not hashed as it was */
    const int32_t last = va->reg_parent[slot];
    if (last >= 0 && (!va->pool.blocks[last].hashed || va->pool.blocks[last].gen != va->reg_gen[slot]))
        forget_walk(va, slot);
    int32_t j = va->reg_n[slot], parent = va->reg_parent[slot];
    pl_block_hash h = va->reg_hash[slot];
    const int32_t *rows = va->row_of + (size_t)slot * va->cfg.rows_per_slot;
    for (; va->cfg.prefix_cache && j < n_pages; j++) {
        const int32_t *tok = tokens + (size_t)j * tpr;
        pl_block_hash hj = pl_block_pool_hash(&va->pool, h, va->extra[slot], tok);
        const pl_block *b = &va->pool.blocks[rows[j]];
        int32_t holder = rows[j];
        if (b->hashed) { /* mapped from another slot or the cache: that prefix already */
            if (b->hash.lo != hj.lo || b->hash.hi != hj.hi) break;
        } else {
            int32_t dup = pl_block_pool_lookup(&va->pool, hj, parent, va->extra[slot], tok);
            if (dup >= 0) { /* computed twice at once: the chain goes on through the first */
                holder = dup;
            } else {
                int32_t old = pl_block_pool_find(&va->pool, hj);
                if (!pl_block_pool_register(&va->pool, rows[j], hj, parent, va->extra[slot], tok))
                    break;
                /* a stale cached entry the map dropped for it: its memory goes */
                if (old >= 0 && old != rows[j] && ref_of(va, old) == 0 &&
                    !va->pool.blocks[old].hashed)
                    punch(va, old);
            }
        }
        h = hj;
        parent = holder;
    }
    va->reg_n[slot] = j;
    va->reg_parent[slot] = parent;
    va->reg_gen[slot] = parent >= 0 ? va->pool.blocks[parent].gen : 0;
    va->reg_hash[slot] = h;
    pthread_mutex_unlock(&va->mu);
}

int64_t pl_vattn_tokens_stored(pl_vattn *va) {
    pthread_mutex_lock(&va->mu);
    const pl_vattn_config *c = &va->cfg;
    int64_t n = 0;
    int32_t *most = va->n_alias ? calloc((size_t)c->phys_rows, sizeof *most) : NULL;
    for (int32_t s = 0; s < c->n_slots; s++) {
        if (!va->used[s]) continue;
        if (!most) { /* nothing shared: every slot's tokens are its own */
            n += va->need_tokens[s];
            continue;
        }
        for (int32_t j = 0; j < va->need[s]; j++) {
            int32_t fill = va->need_tokens[s] - j * c->tokens_per_row;
            if (fill > c->tokens_per_row) fill = c->tokens_per_row;
            if (j >= va->mapped[s]) { /* to be mapped: a fresh page of its own */
                n += fill;
                continue;
            }
            int32_t row = va->row_of[(size_t)s * c->rows_per_slot + j];
            if (fill > most[row]) n += fill - most[row], most[row] = fill;
        }
    }
    if (va->n_alias && !most) n = -1;
    free(most);
    pthread_mutex_unlock(&va->mu);
    return n;
}

int64_t pl_vattn_shared_rows(pl_vattn *va) {
    pthread_mutex_lock(&va->mu);
    int64_t n = va->n_alias;
    pthread_mutex_unlock(&va->mu);
    return n;
}

pl_status pl_vattn_prepare_step(pl_vattn *va) {
    pthread_mutex_lock(&va->mu);
    uint64_t t0 = now_ns();
    pl_status st = PL_OK;
    for (int32_t s = 0; s < va->cfg.n_slots && st == PL_OK; s++)
        while (va->used[s] && va->mapped[s] < va->need[s]) {
            int rc = map_next(va, s, 1, 0);
            PL_ASSERT(rc >= 0 || errno != 0);
            if (rc != 0) {
                st = pl_fail(PL_ERR_NOMEM, "kv-layout vattention: cannot map a page of %zu bytes "
                             "into slot %d: %s", va->cfg.page_size, (int)s,
                             rc > 0 ? "no page left (accounting bug)" : strerror(errno));
                break;
            }
        }
    va->st.map_ns_in_step += now_ns() - t0;
    va->st.steps++;
    wake(va);
    pthread_mutex_unlock(&va->mu);
    return st;
}

/* ---- inspection ----------------------------------------------------------------------------- */

int32_t pl_vattn_mapped_rows(pl_vattn *va, int32_t slot) {
    pthread_mutex_lock(&va->mu);
    int32_t m = va->mapped[slot];
    pthread_mutex_unlock(&va->mu);
    return m;
}

void pl_vattn_get_stats(pl_vattn *va, pl_vattn_stats *s) {
    pthread_mutex_lock(&va->mu);
    *s = va->st;
    s->rows_free = plain_free(va);
    s->rows_cached = va->pool.n_free_cached;
    s->rows_needed = va->need_sum - va->n_alias;
    s->rows_shared = va->n_alias;
    s->rows_committed = 0;
    s->slots_used = 0;
    for (int32_t i = 0; i < va->cfg.n_slots; i++) {
        s->rows_committed += va->mapped[i];
        s->slots_used += va->used[i];
    }
    s->rows_committed -= va->n_alias; /* a shared row once */
    pthread_mutex_unlock(&va->mu);
}

int64_t pl_vattn_resident_pages(const pl_vattn *va) {
    /* MEMFD: the pool's own pages (a page mapped at several addresses is one); ANON: the
     * reservation's (nothing is shared there) */
    char *at = va->view ? va->view : va->base;
    size_t bytes = va->view ? va->view_bytes : va->reserved;
    size_t np = bytes / 4096;
    unsigned char *v = malloc(np ? np : 1);
    if (!v) return -1;
    int64_t n = -1;
    if (mincore(at, bytes, v) == 0) {
        n = 0;
        for (size_t i = 0; i < np; i++) n += v[i] & 1;
    }
    free(v);
    return n;
}

pl_status pl_vattn_check(pl_vattn *va) {
    pthread_mutex_lock(&va->mu);
    const pl_vattn_config *c = &va->cfg;
    pl_status st = PL_OK;
    uint8_t *seen = calloc((size_t)c->phys_rows, 1);
    if (!seen) {
        pthread_mutex_unlock(&va->mu);
        return pl_fail(PL_ERR_NOMEM, "vattn check: out of memory");
    }
    int64_t mapped = 0, need = 0, distinct = 0, alias = 0;
    int32_t *refs = calloc((size_t)c->phys_rows, sizeof *refs);
    if (!refs) {
        free(seen);
        pthread_mutex_unlock(&va->mu);
        return pl_fail(PL_ERR_NOMEM, "vattn check: out of memory");
    }
#define BAD(...) do { st = pl_fail(PL_ERR_INTERNAL, __VA_ARGS__); goto done; } while (0)
    st = pl_block_pool_check(&va->pool); /* queue, counts, ref 0 = free, hash map */
    if (st != PL_OK) goto done;
    for (int64_t r = 0; r < c->phys_rows; r++) seen[r] = va->pool.blocks[r].in_free;
    for (int32_t s = 0; s < c->n_slots; s++) {
        if (va->mapped[s] < 0 || va->mapped[s] > c->rows_per_slot) BAD("slot %d: %d rows mapped", (int)s, (int)va->mapped[s]);
        if (!va->used[s] && va->need[s] != 0) BAD("free slot %d needs %d rows", (int)s, (int)va->need[s]);
        need += va->need[s];
        mapped += va->mapped[s];
        for (int32_t j = 0; j < c->rows_per_slot; j++) {
            int32_t r = va->row_of[(size_t)s * c->rows_per_slot + j];
            if (j >= va->mapped[s]) {
                if (r != -1) BAD("slot %d position %d beyond its %d mapped rows holds row %d", (int)s,
                                 (int)j, (int)va->mapped[s], (int)r);
                continue;
            }
            if (r < 0 || r >= c->phys_rows || seen[r] == 1)
                BAD("row %d at slot %d position %d is out of range or also free", (int)r, (int)s,
                    (int)j);
            if (!seen[r]) distinct++;
            else alias++;
            seen[r] = 2;
            refs[r]++;
            /* a shared page, and one holding a prefix, is needed wherever it is mapped (and
             * so never in a free slot) */
            if ((ref_of(va, r) > 1 || va->pool.blocks[r].hashed) && j >= va->need[s])
                BAD("shared or prefix row %d at slot %d position %d is above the slot's need %d",
                    (int)r, (int)s, (int)j, (int)va->need[s]);
        }
    }
    for (int64_t r = 0; r < c->phys_rows; r++)
        if (refs[r] != ref_of(va, (int32_t)r))
            BAD("row %lld: %d mappings, reference count %d", (long long)r, (int)refs[r],
                (int)ref_of(va, (int32_t)r));
    if (va->pool.n_free + distinct != c->phys_rows || alias != va->n_alias)
        BAD("%lld free (%lld of them cached) + %lld mapped rows != %lld in the pool, or %lld "
            "shared mappings != %lld recorded", (long long)va->pool.n_free,
            (long long)va->pool.n_free_cached, (long long)distinct, (long long)c->phys_rows,
            (long long)alias, (long long)va->n_alias);
    (void)mapped;
    if (need != va->need_sum || need - alias > c->phys_rows)
        BAD("needs sum to %lld, recorded %lld, pool %lld", (long long)need, (long long)va->need_sum,
            (long long)c->phys_rows);
#undef BAD
done:
    free(seen);
    free(refs);
    pthread_mutex_unlock(&va->mu);
    return st;
}
