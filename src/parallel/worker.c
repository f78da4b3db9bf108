/* parallel/worker — a worker rank (1..N-1): its shard, its KV pools, and the step loop.
 *
 *   load shard (agreed) -> setup from rank 0 -> KV pool (+ swap pool) and scratch (agreed) ->
 *   loop: receive step; stop? -> apply swap-out, swap-in, copy-on-write -> forward (its logits
 *   columns go to rank 0)
 */
#include "parallel/step_msg.h"

#include "base/buf.h"
#include "base/threadpool.h"
#include "kv/kv_store.h"
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    pl_model *m;
    pl_threadpool *tp;
    pl_kv_store kv, swap;
    int has_kv, has_swap;
    pl_forward_ctx *fwd;
    int32_t *tables;   /* [max_seqs][max_blocks] */
    int32_t *tables_w; /* the same for the second tables (the setup's kv_groups), or NULL */
} worker;

static void worker_destroy(worker *w) {
    pl_forward_ctx_destroy(w->fwd);
    if (w->has_swap) pl_kv_store_destroy(&w->swap);
    if (w->has_kv) pl_kv_store_destroy(&w->kv);
    pl_threadpool_destroy(w->tp);
    pl_model_destroy(w->m);
    free(w->tables);
    free(w->tables_w);
    pl_dist_msg_free();
}

static pl_status worker_setup(worker *w, const pl_engine_config *c, const pl_dist_setup *su) {
    const pl_model_hparams *hp = &w->m->hp;
    if (!(w->tp = pl_threadpool_create(c->threads)))
        return pl_fail(PL_ERR_NOMEM, "could not start %d threads", c->threads);
    pl_kv_layout l = {.dtype = (pl_dtype)su->kv_dtype, .block_size = su->block_size,
                      .n_kv_heads = hp->n_kv_heads, .head_dim = hp->head_dim,
                      .num_blocks = su->num_blocks};
    /* one tensor per layer with its own KV, of its (local) shape: gemma4's differ by layer; KV
     * cache groups: the first half's (a block holds a window and a full layer's); layer kinds:
     * the window-kind tensors in a pool of their own (kv/cache.c, setup_blocks) */
    const int32_t tensors = su->kv_groups ? su->kv_tensors : pl_model_kv_tensors(hp);
    if (su->kv_groups && (tensors < 1 || tensors > pl_model_kv_tensors(hp) ||
                          tensors > PL_DIST_MAX_TENSORS))
        return pl_fail(PL_ERR_INTERNAL, "tensor parallel: a KV cache of %d tensors for a model of "
                       "%d", tensors, pl_model_kv_tensors(hp));
    const uint8_t *kinds = su->kv_groups == 2 ? su->kinds : NULL;
    PL_TRY(pl_kv_store_init_kinds(&w->kv, &l, tensors, pl_model_kv_shapes(hp), kinds,
                                  kinds ? su->num_blocks_w : 0, NULL));
    w->has_kv = 1;
    if (su->num_swap_blocks > 0) {
        l.num_blocks = su->num_swap_blocks;
        PL_TRY(pl_kv_store_init_kinds(&w->swap, &l, tensors, pl_model_kv_shapes(hp), kinds,
                                      kinds ? su->num_swap_blocks_w : 0,
                                      NULL)); /* RAM on workers */
        w->has_swap = 1;
    }
    const size_t n_ids = (size_t)su->max_seqs * (size_t)su->max_blocks;
    w->tables = calloc(n_ids, sizeof(int32_t));
    w->tables_w = su->kv_groups ? calloc(n_ids, sizeof(int32_t)) : NULL;
    if (!w->tables || (su->kv_groups && !w->tables_w))
        return pl_fail(PL_ERR_NOMEM, "out of memory for the block tables");
    PL_TRY(pl_forward_ctx_create(w->m, su->max_tokens, su->max_logits, w->tp, &w->fwd));
    PL_TRY(pl_dist_reserve((int64_t)su->max_tokens * hp->dim, su->max_logits, hp->n_vocab));
    pl_dist_hook(w->fwd, w->m);
    return PL_OK;
}

static pl_status serve_steps(worker *w, const pl_dist_setup *su) {
    for (;;) {
        pl_dist_step_view v;
        PL_TRY(pl_dist_recv_step(&v, su, w->tables, w->tables_w)); /* checked against the setup */
        if (v.kind == PL_DIST_MSG_STOP) return PL_OK;
        if (v.kind == PL_DIST_MSG_PROBE) {
            double us;
            PL_TRY(pl_dist_probe_loop(v.probe_floats, v.probe_iters, &us));
            continue;
        }
        pl_kv_store *from[3] = {&w->kv, &w->swap, &w->kv}, *to[3] = {&w->swap, &w->kv, &w->kv};
        for (int j = 0; j < 3; j++) {
            if (v.n_copies[j] == 0) continue;
            if (j < 2 && !w->has_swap)
                return pl_fail(PL_ERR_INTERNAL, "tensor parallel: swap copies without a swap pool");
            pl_kv_store_copy(from[j], to[j], v.copy_src[j], v.copy_dst[j], v.n_copies[j]);
        }
        if (v.batch.n_tokens > 0) PL_TRY(pl_model_forward(w->fwd, &w->kv, &v.batch, NULL));
    }
}

pl_status pl_dist_worker_run(const pl_engine_config *c) {
    worker w;
    memset(&w, 0, sizeof w);
    pl_status st = pl_model_load_with(c->model_path, pl_dist_rank(), pl_dist_size(), c->f16_weights, &w.m);
    st = pl_dist_agree(st, "could not load its shard");
    pl_dist_note_loaded(c->model_path, w.m ? w.m->owned_bytes : 0);
    pl_dist_setup su = {0};
    if (st == PL_OK) st = pl_dist_recv_setup(&su);
    if (st == PL_OK && !su.ok)
        st = pl_fail(PL_ERR_INTERNAL, "tensor parallel: rank 0 could not start the engine");
    if (st == PL_OK) {
        /* each rank resolved --f16-weights (or PAGELLM_F16_WEIGHTS, which reaches another
         * machine's ranks only through mpirun -x) on its own: shards of two modes would compute
         * a model that is neither, silently */
        const char *what = "could not set up its KV cache and buffers";
        if (!su.f16_as_bf16 != !w.m->f16_as_bf16) {
            what = "holds its F16 weights unlike rank 0";
            st = pl_fail(PL_ERR_INVALID_ARG, "--f16-weights: rank 0 holds its F16 matrices as "
                         "%s, this rank as %s: give every rank the same --f16-weights "
                         "(PAGELLM_F16_WEIGHTS reaches the ranks of other machines only with "
                         "mpirun -x PAGELLM_F16_WEIGHTS)", su.f16_as_bf16 ? "bf16" : "f16",
                         w.m->f16_as_bf16 ? "bf16" : "f16");
        }
        if (st == PL_OK) st = worker_setup(&w, c, &su);
        st = pl_dist_agree(st, what);
    }
    if (st == PL_OK) st = serve_steps(&w, &su);
    pl_dist_note_done();
    worker_destroy(&w);
    return st;
}
