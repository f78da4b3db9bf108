/* kv/reserve — the contiguous allocation policies (the PagedAttention paper's Orca baselines):
 * how much a sequence reserves at admission and where its one run of blocks goes (first fit).
 * See "Contiguous layouts" in manager.h. Also the sharing count used by the benchmarks. */
#include "kv/manager.h"

static int32_t seq_cap(const pl_kv_manager *m) {
    int64_t cap = (int64_t)m->cfg.max_blocks_per_seq * m->cfg.block_size;
    if (m->cfg.max_seq_tokens > 0 && m->cfg.max_seq_tokens < cap) cap = m->cfg.max_seq_tokens;
    return (int32_t)cap;
}

int32_t pl_kv_reserve_tokens(const pl_kv_manager *m, int32_t n, int32_t final_tokens) {
    int32_t cap = seq_cap(m), r;
    if (final_tokens < n) final_tokens = n;
    switch (m->cfg.policy) {
    case PL_KV_POLICY_MAX: r = cap; break;
    case PL_KV_POLICY_POW2: {
        int64_t p = 1;
        while (p < final_tokens) p <<= 1;
        r = p > cap ? cap : (int32_t)p;
        break;
    }
    case PL_KV_POLICY_ORACLE: r = final_tokens; break;
    case PL_KV_POLICY_PAGED:
    default: r = n; break;
    }
    return r < n ? n : r;
}

int32_t pl_kv_admit_blocks(const pl_kv_manager *m, int32_t n, int32_t final_tokens) {
    return pl_kv_blocks_for(m, pl_kv_reserve_tokens(m, n, final_tokens));
}

int32_t pl_kv_first_fit(const pl_kv_manager *m, int32_t n_blocks) {
    if (n_blocks < 1) return -1;
    if (m->cfg.policy == PL_KV_POLICY_VATTN) /* a free slot: its first block */
        for (int32_t s = 0; s * m->cfg.max_blocks_per_seq < m->pool.num_blocks; s++)
            if (m->pool.blocks[s * m->cfg.max_blocks_per_seq].ref == 0)
                return s * m->cfg.max_blocks_per_seq;
    int32_t run = 0;
    for (int32_t b = 0; b < m->pool.num_blocks; b++) {
        run = m->pool.blocks[b].ref == 0 ? run + 1 : 0;
        if (run == n_blocks) return b - n_blocks + 1;
    }
    return -1;
}

int32_t pl_kv_largest_free_run(const pl_kv_manager *m) {
    int32_t run = 0, best = 0;
    for (int32_t b = 0; b < m->pool.num_blocks; b++) {
        run = m->pool.blocks[b].ref == 0 ? run + 1 : 0;
        if (run > best) best = run;
    }
    return best;
}

int64_t pl_kv_block_refs(const pl_kv_manager *m) { return m->pool.n_refs; }
