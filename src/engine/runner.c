/* engine/runner — turns the scheduler's decision into one forward step.
 *
 * First the block copies the KV manager asked for are applied to the bytes (swap-out, swap-in,
 * copy-on-write: that order, see kv/manager.h); then the step batch is built: every scheduled
 * item's tokens, positions, slots and block table, and the logits rows wanted (the last token of
 * an item that samples, or every row for prompt log-probabilities); then the model runs.
 */
#include "engine/engine_internal.h"

#include <string.h>

static void apply_copies(pl_engine *e) {
    pl_scheduler *s = &e->sched;
    int32_t src[256], dst[256];
    struct {
        const pl_block_copy *c;
        int32_t n;
        pl_kv_store *from, *to;
    } jobs[3] = {{s->swap_out, s->n_swap_out, &e->kv, &e->swap},
                 {s->swap_in, s->n_swap_in, &e->swap, &e->kv},
                 {s->cow, s->n_cow, &e->kv, &e->kv}};
    for (int j = 0; j < 3; j++)
        for (int32_t i = 0; i < jobs[j].n; i += 256) {
            int32_t k = jobs[j].n - i < 256 ? jobs[j].n - i : 256;
            for (int32_t t = 0; t < k; t++) {
                src[t] = jobs[j].c[i + t].src;
                dst[t] = jobs[j].c[i + t].dst;
            }
            pl_kv_store_copy(jobs[j].from, jobs[j].to, src, dst, k);
        }
}

pl_status pl_runner_execute(pl_engine *e) {
    pl_scheduler *s = &e->sched;
    apply_copies(e);
    const int32_t max_blocks = e->mgr.cfg.max_blocks_per_seq;
    int32_t t = 0, rows = 0;
    for (int32_t i = 0; i < s->n_items; i++) {
        const pl_sched_item *it = &s->items[i];
        const pl_seq *q = it->seq;
        /* The table holds a slot for every token up to the newest, and no more. */
        PL_ASSERT(it->start + it->n <= q->table.n_tokens && q->table.n_tokens <= q->n_tokens);
        e->item_row[i] = it->all_logits || it->sample ? rows : -1;
        e->b_seq_start[i] = t;
        e->b_ctx[i] = it->start + it->n;
        memcpy(e->b_tables + (size_t)i * max_blocks, q->table.blocks,
               (size_t)q->table.n_blocks * sizeof(int32_t));
        for (int32_t k = 0; k < it->n; k++, t++) {
            int32_t pos = it->start + k;
            e->b_tokens[t] = q->tokens[pos];
            e->b_pos[t] = pos;
            e->b_slots[t] = pl_block_table_slot(&q->table, pos);
            if (it->all_logits || (it->sample && k == it->n - 1)) e->b_rows[rows++] = t;
        }
    }
    e->b_seq_start[s->n_items] = t;
    PL_ASSERT(t == s->n_tokens && rows <= e->max_logit_rows);
    pl_step_batch b = {
        .n_tokens = t, .token_ids = e->b_tokens, .positions = e->b_pos,
        .slot_mapping = e->b_slots, .n_seqs = s->n_items, .seq_start = e->b_seq_start,
        .context_lens = e->b_ctx, .block_tables = e->b_tables, .max_blocks = max_blocks,
        .n_logits = rows, .logit_rows = e->b_rows,
    };
    return pl_model_forward(e->fwd, &e->kv, &b, e->logits);
}
