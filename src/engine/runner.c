/* engine/runner — see runner.h. */
#include "engine/runner.h"
#include "base/buf.h"

#include "base/status.h"
#include "model/lora.h"
#include "parallel/parallel.h"

#include <stdlib.h>
#include <string.h>

static pl_status enable_groups(pl_runner *r) {
    r->tables_w = calloc((size_t)r->max_items * (size_t)r->max_blocks, sizeof(int32_t));
    r->slots_w = malloc((size_t)r->max_tokens * sizeof(int64_t));
    if (!r->tables_w || !r->slots_w) {
        PL_FREE_ALL(r->tables_w, r->slots_w);
        return pl_fail(PL_ERR_NOMEM, "out of memory for the window layers' block tables");
    }
    return PL_OK;
}

pl_status pl_runner_init(pl_runner *r, const pl_runner_config *c) {
    pl_model *m = c->model;
    const int32_t max_tokens = c->max_tokens, max_items = c->max_items;
    const int32_t max_logit_rows = c->max_logit_rows, max_blocks = c->max_blocks;
    *r = (pl_runner){.model = m, .kv = c->kv, .swap = c->swap, .pooling = c->pooling,
                     .draft = c->draft, .dist = c->dist, .max_tokens = max_tokens,
                     .max_items = max_items, .max_logit_rows = max_logit_rows,
                     .max_blocks = max_blocks};
    const size_t T = (size_t)max_tokens, S = (size_t)max_items, V = (size_t)m->hp.n_vocab;
    r->tokens = malloc(T * sizeof(int32_t));
    r->pos = malloc(T * sizeof(int32_t));
    r->slots = malloc(T * sizeof(int64_t));
    r->rows = malloc(T * sizeof(int32_t));
    r->seq_start = malloc((S + 1) * sizeof(int32_t));
    r->ctx = malloc(S * sizeof(int32_t));
    r->item_row = malloc(S * sizeof(int32_t));
    r->tables = calloc(S * (size_t)max_blocks, sizeof(int32_t));
    const int embeds_only = m->hp.pooling != PL_POOL_NONE;
    r->logits = malloc((embeds_only ? 1 : (size_t)max_logit_rows * V) * sizeof(float));
    r->embd = malloc(S * (size_t)m->hp.dim * sizeof(float));
    r->pooled = malloc(S * sizeof(int32_t));
    r->seq_lora = malloc(S * sizeof *r->seq_lora);
    if (!r->seq_lora || !r->embd || !r->pooled || !r->tokens || !r->pos || !r->slots || !r->rows ||
        !r->seq_start || !r->ctx || !r->item_row || !r->tables || !r->logits) {
        pl_runner_destroy(r);
        return pl_fail(PL_ERR_NOMEM, "out of memory for the step buffers (%d tokens, vocab %zu)",
                       max_tokens, V);
    }
    pl_status st = pl_forward_ctx_create(m, max_tokens, max_logit_rows, c->tp, &r->fwd);
    if (st == PL_OK && c->groups) st = enable_groups(r);
    if (st == PL_OK && c->max_lora_rank > 0)
        st = pl_forward_lora_enable(r->fwd, c->max_lora_rank);
    if (st != PL_OK) pl_runner_destroy(r);
    return st;
}

void pl_runner_destroy(pl_runner *r) {
    pl_forward_ctx_destroy(r->fwd);
    PL_FREE_ALL(r->tables_w, r->slots_w);
    PL_FREE_ALL(r->tokens, r->pos, r->slots, r->rows, r->seq_start, r->ctx, r->item_row, r->tables,
                r->logits, r->embd, r->pooled, r->seq_lora);
    memset(r, 0, sizeof *r);
}

static void apply_copies(pl_runner *r, const pl_sched_output *so) {
    int32_t src[256], dst[256];
    struct {
        const pl_block_copy *c;
        int32_t n;
        pl_kv_store *from, *to;
    } jobs[3] = {{so->swap_out, so->n_swap_out, r->kv, r->swap},
                 {so->swap_in, so->n_swap_in, r->swap, r->kv},
                 {so->cow, so->n_cow, r->kv, r->kv}};
    for (int j = 0; j < 3; j++) {
        PL_ASSERT(jobs[j].n == 0 || (jobs[j].from && jobs[j].to));
        for (int32_t i = 0; i < jobs[j].n; i += 256) {
            int32_t k = jobs[j].n - i < 256 ? jobs[j].n - i : 256;
            for (int32_t t = 0; t < k; t++) {
                src[t] = jobs[j].c[i + t].src;
                dst[t] = jobs[j].c[i + t].dst;
            }
            pl_kv_store_copy(jobs[j].from, jobs[j].to, src, dst, k);
        }
    }
}

/* An embedding model's step: every item is a whole input (positions from 0, no KV slots). */
static pl_status execute_embed(pl_runner *r, const pl_sched_output *so) {
    int32_t t = 0;
    for (int32_t i = 0; i < so->n_items; i++) {
        const pl_sched_item *it = &so->items[i];
        PL_ASSERT(it->start == 0 && it->n == it->seq->n_tokens && it->seq->group->embed);
        r->item_row[i] = i;
        r->seq_start[i] = t;
        for (int32_t k = 0; k < it->n; k++, t++) {
            r->tokens[t] = it->seq->tokens[k];
            r->pos[t] = k;
        }
    }
    r->seq_start[so->n_items] = t;
    PL_ASSERT(t == so->n_tokens);
    if (so->n_items == 0) return PL_OK;
    pl_step_batch b = {.n_tokens = t, .token_ids = r->tokens, .positions = r->pos,
                       .n_seqs = so->n_items, .seq_start = r->seq_start};
    return pl_model_embed(r->fwd, &b, r->pooling, r->embd);
}

pl_status pl_runner_execute(pl_runner *r, const pl_sched_output *so) {
    PL_ASSERT(so->n_items <= r->max_items && so->n_tokens <= r->max_tokens);
    if (r->model->hp.pooling != PL_POOL_NONE) return execute_embed(r, so);
    const int32_t max_blocks = r->max_blocks;
    int32_t t = 0, rows = 0, n_pooled = 0, n_lora = 0;
    for (int32_t i = 0; i < so->n_items; i++) {
        const pl_sched_item *it = &so->items[i];
        const pl_seq *q = it->seq;
        const pl_block_table *tab = r->draft ? &q->draft_table : &q->table;
        /* The table holds a slot for every token up to the newest (and its proposals), no more. */
        PL_ASSERT(it->start + it->n <= tab->n_tokens && tab->n_tokens <= q->n_tokens + q->n_spec);
        PL_ASSERT(tab->n_blocks <= max_blocks);
        const int embed = q->group->embed != 0; /* a whole input: pooled, no logits */
        PL_ASSERT(!embed || (it->start == 0 && it->sample && it->n_spec == 0));
        int every_row = !embed && (it->all_logits || it->n_spec > 0);
        r->item_row[i] = embed ? n_pooled : every_row || it->sample ? rows : -1;
        if (embed) r->pooled[n_pooled++] = i;
        r->seq_start[i] = t;
        r->ctx[i] = it->start + it->n;
        r->seq_lora[i] = r->draft ? NULL : q->group->lora; /* a draft model runs bare */
        n_lora += r->seq_lora[i] != NULL;
        memcpy(r->tables + (size_t)i * max_blocks, tab->blocks, (size_t)tab->n_blocks * sizeof(int32_t));
        const pl_block_table *tw = r->tables_w && !r->draft ? &q->table_w : NULL;
        if (tw) {
            PL_ASSERT(tw->n_tokens == tab->n_tokens && tw->n_blocks <= max_blocks);
            memcpy(r->tables_w + (size_t)i * max_blocks, tw->blocks, (size_t)tw->n_blocks * sizeof(int32_t));
        }
        for (int32_t k = 0; k < it->n; k++, t++) {
            int32_t pos = it->start + k;
            r->tokens[t] = q->tokens[pos];
            r->pos[t] = pos;
            r->slots[t] = pl_block_table_slot(tab, pos);
            if (tw) r->slots_w[t] = pl_block_table_slot(tw, pos);
            if (!embed && (every_row || (it->sample && k == it->n - 1))) r->rows[rows++] = t;
        }
    }
    r->seq_start[so->n_items] = t;
    PL_ASSERT(t == so->n_tokens && rows <= r->max_logit_rows);
    pl_step_batch b = {
        .n_tokens = t, .token_ids = r->tokens, .positions = r->pos,
        .slot_mapping = r->slots, .n_seqs = so->n_items, .seq_start = r->seq_start,
        .context_lens = r->ctx, .block_tables = r->tables, .max_blocks = max_blocks,
        .n_logits = rows, .logit_rows = r->rows,
        .slot_mapping_w = r->tables_w && !r->draft ? r->slots_w : NULL,
        .block_tables_w = r->tables_w && !r->draft ? r->tables_w : NULL,
        .seq_lora = n_lora ? (const struct pl_lora *const *)r->seq_lora : NULL,
    };
    if (r->dist) { /* the workers apply the same copies and run the same batch (if any) */
        pl_dist_copies cp = {so->swap_out, so->swap_in, so->cow, so->n_swap_out, so->n_swap_in,
                             so->n_cow};
        PL_TRY(pl_dist_send_step(&cp, &b, r->kv->layout.block_size));
    }
    apply_copies(r, so);
    if (so->n_items == 0) return PL_OK;
    pl_pool_request pool = {n_pooled, r->pooled, r->pooling, r->embd};
    return pl_model_forward_pooled(r->fwd, r->kv, &b, r->logits, n_pooled ? &pool : NULL);
}
