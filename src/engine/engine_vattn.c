/* engine/engine_vattn — wiring of --kv-layout vattention into the engine (issue 12): the page
 * pool and request slots (kv/vattn.h) replace the paged pool, the KV store is a view of the
 * slots' reservation whose "blocks" are pages, and the KV manager runs PL_KV_POLICY_VATTN. The
 * rest of the engine (scheduler, runner, kernels) is unchanged: a sequence's block table is its
 * slot's consecutive pages, one contiguous array per layer. */
#include "engine/engine_internal.h"
#include "kv/vattn.h"

#include <stdlib.h>
#include <string.h>

pl_status pl_engine_check_vattn(const pl_engine_config *c) {
    if (c->kv_layout != PL_KV_LAYOUT_VATTENTION) return PL_OK;
    if (c->preemption_mode == PL_PREEMPT_SWAP || c->swap_space)
        return pl_fail(PL_ERR_INVALID_ARG, "kv-layout vattention preempts by recompute only: "
                       "drop --swap-space and --preemption-mode swap");
    if (c->speculative_model || c->speculative_ngram)
        return pl_fail(PL_ERR_INVALID_ARG, "kv-layout vattention does not support speculative "
                       "decoding (its pages are not rolled back): use kv-layout paged");
    uint64_t p = c->kv_page_size ? c->kv_page_size : 4096;
    if (p != 4096 && p != 65536 && p != (2u << 20))
        return pl_fail(PL_ERR_INVALID_ARG, "kv-page-size %llu is not supported: use 4K, 64K or 2M",
                       (unsigned long long)p);
    return PL_OK;
}

/* mprotect/madvise on anonymous memory for 4K and 64K pages, a hugetlb memfd for 2M (docs/
 * DESIGN.md says why); PAGELLM_VATTN_BACKEND=memfd forces the memfd (benchmarks). */
static pl_vattn_backend backend_for(size_t page) {
    const char *b = getenv("PAGELLM_VATTN_BACKEND");
    if (page == (2u << 20) || (b && !strcmp(b, "memfd"))) return PL_VATTN_MEMFD;
    return PL_VATTN_ANON;
}

pl_status pl_engine_setup_vattn(pl_engine *e, const pl_kv_layout *l, uint64_t budget) {
    const pl_model_hparams *hp = &e->model->hp;
    if (hp->pooling != PL_POOL_NONE)
        return pl_fail(PL_ERR_INVALID_ARG, "kv-layout vattention serves generation models; this "
                       "is an embedding model (architecture %s)", hp->arch_name);
    size_t page = e->cfg.kv_page_size ? (size_t)e->cfg.kv_page_size : 4096;
    e->cfg.kv_page_size = page;
    pl_kv_layout one = *l;
    one.block_size = 1;
    size_t token_bytes = pl_kv_block_bytes(&one); /* one token, every KV head, of one layer */
    if (token_bytes == 0 || page % token_bytes != 0)
        return pl_fail(PL_ERR_UNSUPPORTED, "kv-layout vattention: a page of %zu bytes does not "
                       "hold a whole number of tokens of %zu bytes (%d KV heads x %d dims, %s) "
                       "per layer; use another kv-page-size or kv-cache-dtype", page, token_bytes,
                       (int)l->n_kv_heads, (int)l->head_dim, pl_kv_cache_dtype_name(e->cfg.kv_cache_dtype));
    int32_t tpr = (int32_t)(page / token_bytes);
    int32_t rows = (e->max_model_len + tpr - 1) / tpr;
    uint64_t row_bytes = (uint64_t)page * 2 * (uint64_t)hp->n_layers;
    uint64_t phys = budget / row_bytes;
    if (phys < 1)
        return pl_fail(PL_ERR_INVALID_ARG, "kv-cache-memory %llu bytes is smaller than one page "
                       "per layer for K and V (%d layers x 2 x %zu bytes = %llu bytes)",
                       (unsigned long long)budget, (int)hp->n_layers, page,
                       (unsigned long long)row_bytes);
    if (phys > INT32_MAX / 4) phys = INT32_MAX / 4;
    pl_vattn_config vc = {
        .page_size = page, .n_regions = 2 * hp->n_layers, .n_slots = e->cfg.max_num_seqs,
        .rows_per_slot = rows, .tokens_per_row = tpr, .phys_rows = (int64_t)phys,
        .backend = backend_for(page), .overlap = !e->cfg.vattn_no_overlap,
        .deferred_reclaim = !e->cfg.vattn_no_deferred_reclaim, .eager = !e->cfg.vattn_no_eager,
        .start_thread = 1, .reclaim_threshold = 0.10,
    };
    PL_TRY(pl_vattn_create(&vc, &e->va));
    /* The store view: per region, n_slots x rows pages, each a "block" of tpr tokens. */
    memset(&e->kv, 0, sizeof e->kv);
    e->kv.layout = *l;
    e->kv.layout.block_size = tpr;
    e->kv.layout.num_blocks = (int64_t)vc.n_slots * rows;
    e->kv.n_layers = hp->n_layers;
    e->kv.layer_bytes = (size_t)vc.n_slots * pl_vattn_slot_bytes(e->va);
    e->kv.base = pl_vattn_base(e->va);
    e->kv.mapped_bytes = 0; /* the vattn owns the reservation */
    e->cfg.enable_prefix_caching = 0; /* nothing is shared */
    e->cfg.block_size = tpr; /* a block is a page: pl_engine_get_config says how many tokens */
    pl_kv_manager_config mc = {
        .block_size = tpr, .num_blocks = (int32_t)phys, .max_blocks_per_seq = rows,
        .watermark = 0.01, .policy = PL_KV_POLICY_VATTN, .max_seq_tokens = e->max_model_len,
        .vattn = e->va,
    };
    return pl_kv_manager_init(&e->mgr, &mc);
}

void pl_engine_destroy_vattn(pl_engine *e) {
    if (!e->va) return;
    memset(&e->kv, 0, sizeof e->kv); /* a view: the reservation goes with the slots */
    pl_vattn_destroy(e->va);
    e->va = NULL;
}

void pl_engine_vattn_stats(pl_engine *e, pl_engine_stats *s) {
    if (!e->va) return;
    pl_vattn_stats v;
    pl_vattn_get_stats(e->va, &v);
    uint64_t regions = (uint64_t)pl_vattn_get_config(e->va)->n_regions;
    s->vattn_pages_mapped_sync = v.pages_mapped_sync;
    s->vattn_pages_mapped_bg = v.pages_mapped_bg;
    s->vattn_pages_unmapped = v.pages_unmapped_sync + v.pages_unmapped_bg;
    s->vattn_slots_acquired = v.slots_acquired;
    s->vattn_slots_reused = v.slots_reused;
    s->vattn_map_seconds = (double)v.map_ns_in_step * 1e-9;
    s->vattn_pages_committed = v.rows_committed * (int64_t)regions;
}
