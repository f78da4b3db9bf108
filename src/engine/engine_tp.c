/* engine/engine_tp — tensor parallelism from the engine's side (rank 0): load its shard while
 * the workers load theirs, then hand them what they need to build the same pools and hook the
 * runner and forward pass (src/parallel/ does the MPI). Declared in engine_internal.h. */
#include "engine/engine_internal.h"
#include "parallel/parallel.h"

#include <stdio.h>

_Static_assert(PL_DIST_MAX_TENSORS == PL_KV_MAX_TENSORS, "the setup holds every store tensor's kind");

/* Tensor parallel, rank 0: load shard 0 while every worker loads its own, and agree. */
pl_status pl_engine_tp_load(pl_engine *e) {
    int32_t n = e->cfg.tensor_parallel_size;
    if (!pl_dist_active() || pl_dist_size() != n || pl_dist_rank() != 0)
        return pl_fail(PL_ERR_INVALID_ARG, "tensor-parallel-size %d: the engine must run on rank "
                       "0 of an MPI job of %d processes started with pl_dist_init", n, n);
    pl_status st = pl_model_load_with(e->cfg.model_path, 0, n, e->cfg.f16_weights, &e->model);
    st = pl_dist_agree(st, "could not load its shard");
    pl_dist_note_loaded(e->cfg.model_path, e->model ? e->model->owned_bytes : 0);
    if (st == PL_OK) e->dist = 1;
    return st;
}

/* Tensor parallel, rank 0, the engine otherwise ready (ok) or not: hand the workers what they
 * need to build the same pools, agree that they did, and hook the runner and forward pass. */
pl_status pl_engine_tp_start(pl_engine *e, int ok) {
    static const pl_kv_store none; /* the cache may not exist when !ok */
    const pl_kv_store *kv = e->kv ? pl_kv_cache_store(e->kv) : &none;
    const pl_kv_store *swap = e->kv ? pl_kv_cache_swap_store(e->kv) : NULL;
    pl_dist_setup su = {
        .ok = ok, .kv_dtype = (int32_t)kv->layout.dtype, .block_size = kv->layout.block_size,
        .num_blocks = (int32_t)kv->layout.num_blocks,
        .num_swap_blocks = swap ? (int32_t)swap->layout.num_blocks : 0,
        .max_tokens = e->runner.max_tokens, .max_seqs = e->runner.max_items,
        .max_blocks = e->runner.max_blocks, .max_logits = e->runner.max_logit_rows,
        .f16_as_bf16 = e->model ? e->model->f16_as_bf16 : 0,
    };
    /* the second tables: KV cache groups (one pool, half the tensors) or layer kinds */
    if (e->kv && pl_kv_cache_grouped(e->kv)) {
        su.kv_groups = kv->kinds ? 2 : 1;
        su.kv_tensors = kv->n_layers;
        su.num_blocks_w = (int32_t)kv->num_blocks_w;
        su.num_swap_blocks_w = swap ? (int32_t)swap->num_blocks_w : 0;
        for (int32_t i = 0; kv->kinds && i < kv->n_layers; i++) su.kinds[i] = kv->kinds[i];
    }
    pl_status st = pl_dist_send_setup(&su);
    if (!ok) return st;
    if (st == PL_OK)
        st = pl_dist_reserve((int64_t)su.max_tokens * e->model->hp.dim, su.max_logits,
                             e->model->hp.n_vocab);
    st = pl_dist_agree(st, "could not set up its KV cache and buffers");
    if (st != PL_OK) return st;
    e->dist = 2;
    pl_dist_hook(e->runner.fwd, e->model);
    return PL_OK;
}

pl_status pl_tp_init(int32_t n) { return pl_dist_init(n); }
int32_t pl_tp_rank(void) { return pl_dist_rank(); }
pl_status pl_tp_worker_run(const pl_engine_config *c) {
    if (!pl_dist_active() || pl_dist_rank() == 0)
        return pl_fail(PL_ERR_INVALID_ARG, "pl_tp_worker_run: call pl_tp_init first, on ranks "
                       "other than 0");
    return pl_dist_worker_run(c);
}

