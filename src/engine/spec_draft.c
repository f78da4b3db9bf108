/* engine/spec_draft — the draft-model proposer (see spec.h).
 *
 * The draft keeps its own paged KV cache (its own store, manager and runner; no prefix caching,
 * no swap) and one block table per sequence (pl_seq.draft_table), valid for the sequence's first
 * draft_computed tokens. Every target step, for the sequences the scheduler let speculate:
 *   round 1   the draft computes what it has not seen yet (the tokens accepted last step, or the
 *             whole sequence after a preemption dropped its table; at most the token budget,
 *             in chunks, proposing nothing until it has caught up) and proposes d1 = argmax;
 *   round j   it computes d(j-1) and proposes dj, for the sequences that asked for j or more.
 * A sequence the draft cannot serve (its pool is full) proposes fewer tokens: its target item
 * and slots shrink before the target runs. After verification the decoder lowers draft_computed
 * to the target's computed tokens (the rejected proposals' draft K/V are overwritten later).
 * Proposals are the draft's argmax, so q is a point mass whatever the request's sampling: see
 * verify_seq in decoder.c for why that keeps a seeded request's tokens exact.
 */
#include "engine/sampler.h"
#include "engine/spec.h"
#include "kv/cache.h"

#include <stdlib.h>
#include <string.h>

pl_status pl_spec_draft_load(pl_spec *sp, const pl_engine_config *c, const pl_model *target,
                             int32_t max_model_len) {
    PL_TRY(pl_model_load_with(c->speculative_model, 0, 1, c->f16_weights, &sp->draft));
    const pl_tokenizer *a = target->tok, *b = sp->draft->tok;
    int32_t na = pl_tokenizer_n_vocab(a), nb = pl_tokenizer_n_vocab(b);
    if (na != nb || target->hp.n_vocab != sp->draft->hp.n_vocab)
        return pl_fail(PL_ERR_INVALID_ARG, "speculative-model %s: its vocabulary has %d tokens, "
                       "the target's %d: a draft must share the target's tokenizer",
                       c->speculative_model, nb, na);
    for (int32_t i = 0; i < na; i++) {
        const char *x = pl_tokenizer_token_text(a, i), *y = pl_tokenizer_token_text(b, i);
        if (strcmp(x ? x : "", y ? y : ""))
            return pl_fail(PL_ERR_INVALID_ARG, "speculative-model %s: its vocabulary differs from "
                           "the target's at token %d ('%.40s' vs '%.40s')", c->speculative_model,
                           (int)i, y ? y : "", x ? x : "");
    }
    if (sp->draft->hp.n_ctx_train < max_model_len)
        return pl_fail(PL_ERR_INVALID_ARG, "speculative-model %s: its context (%d) is shorter "
                       "than max-model-len %d", c->speculative_model, sp->draft->hp.n_ctx_train,
                       max_model_len);
    return PL_OK;
}

static pl_kv_layout draft_layout(const pl_spec *sp, int kv_f32, int32_t block_size) {
    return (pl_kv_layout){.dtype = kv_f32 ? PL_DT_F32 : PL_DT_F16, .block_size = block_size,
                          .n_kv_heads = sp->draft->hp.n_kv_heads, .head_dim = sp->draft->hp.head_dim};
}

size_t pl_spec_draft_bytes_per_block(const pl_spec *sp, int kv_f32, int32_t block_size) {
    pl_kv_layout l = draft_layout(sp, kv_f32, block_size);
    return pl_kv_bytes_per_block(&l, sp->draft->hp.n_layers);
}

pl_status pl_spec_draft_setup(pl_spec *sp, pl_threadpool *tp, uint64_t kv_bytes, int kv_f32,
                              int32_t block_size, int32_t max_blocks, int32_t max_tokens,
                              int32_t max_items) {
    pl_kv_layout l = draft_layout(sp, kv_f32, block_size);
    uint64_t nb = kv_bytes / pl_kv_bytes_per_block(&l, sp->draft->hp.n_layers);
    if (nb < 2)
        return pl_fail(PL_ERR_INVALID_ARG, "speculative-model: its share of the KV budget (%llu "
                       "bytes) holds fewer than 2 blocks", (unsigned long long)kv_bytes);
    if (nb > INT32_MAX / 2) nb = INT32_MAX / 2;
    l.num_blocks = (int64_t)nb;
    PL_TRY(pl_kv_store_init(&sp->kv, &l, sp->draft->hp.n_layers, NULL));
    pl_kv_manager_config mc = {.block_size = block_size, .num_blocks = (int32_t)nb,
                               .max_blocks_per_seq = max_blocks, .watermark = 0.0};
    pl_status st = pl_kv_manager_init(&sp->mgr, &mc);
    if (st == PL_OK) {
        pl_runner_config rc = {.model = sp->draft, .tp = tp, .kv = &sp->kv,
                               .max_tokens = max_tokens, .max_items = max_items,
                               .max_logit_rows = max_items, .max_blocks = max_blocks, .draft = 1};
        st = pl_runner_init(&sp->runner, &rc);
        if (st != PL_OK) pl_kv_manager_destroy(&sp->mgr);
    }
    sp->so.items = malloc((size_t)max_items * sizeof *sp->so.items);
    sp->so.items_cap = sp->so.items ? (size_t)max_items : 0;
    sp->items = malloc((size_t)max_items * sizeof *sp->items);
    if (st == PL_OK && (!sp->items || !sp->so.items)) {
        pl_runner_destroy(&sp->runner);
        pl_kv_manager_destroy(&sp->mgr);
        st = pl_fail(PL_ERR_NOMEM, "out of memory for the draft's step");
    }
    if (st != PL_OK) {
        pl_kv_store_destroy(&sp->kv);
        pl_sched_output_destroy(&sp->so);
        free(sp->items);
        sp->items = NULL;
        return st;
    }
    sp->max_tokens = max_tokens;
    sp->max_items = max_items;
    sp->ready = 1;
    return PL_OK;
}

void pl_spec_drop(void *ctx, pl_seq *q) {
    pl_spec *sp = ctx;
    if (sp->ready) pl_kv_free_table(&sp->mgr, &q->draft_table);
    q->draft_computed = 0;
}

const pl_kv_manager *pl_spec_draft_manager(const pl_spec *sp) {
    return sp->ready ? &sp->mgr : NULL;
}

/* Target item i proposes k tokens now instead of its n_spec: shrink the item and roll back the
 * target slots the scheduler appended for the rest. */
static pl_status shrink(pl_sched_output *so, int32_t i, int32_t k, pl_kv_cache *target_kv) {
    pl_sched_item *it = &so->items[i];
    pl_seq *q = it->seq;
    if (k >= it->n_spec) return PL_OK;
    so->n_tokens -= it->n_spec - k;
    it->n = 1 + k;
    it->n_spec = q->n_spec = k;
    return pl_kv_cache_truncate(target_kv, &q->table, &q->table_w, q->n_tokens + k);
}

/* Draft slots for q's tokens up to n (allocating its table when it has none). */
static bool draft_slots(pl_spec *sp, pl_seq *q, int32_t n) {
    pl_block_table *t = &q->draft_table;
    if (!t->live) {
        q->draft_computed = 0;
        return pl_kv_allocate_prompt(&sp->mgr, t, q->tokens, n, 0, NULL) == PL_OK;
    }
    if (t->n_tokens < n) return pl_kv_append_slots(&sp->mgr, t, n - t->n_tokens, NULL) == PL_OK;
    return true;
}

pl_status pl_spec_draft_run(pl_spec *sp, pl_sched_output *so, pl_kv_cache *target_kv) {
    pl_sched_output *d = &sp->so;
    const int32_t V = sp->draft->hp.n_vocab;
    int32_t n = 0, used = 0;
    /* Round 1: catch up and propose d1. */
    d->n_items = d->n_tokens = 0;
    for (int32_t i = 0; i < so->n_items; i++) {
        pl_sched_item *it = &so->items[i];
        if (it->n_spec < 1) continue;
        pl_seq *q = it->seq;
        int32_t N = q->n_tokens;
        if (!q->draft_table.live) q->draft_computed = 0;
        if (q->draft_table.live) { /* forget what the draft computed past the target's tokens */
            if (q->draft_computed > q->n_computed) q->draft_computed = q->n_computed;
            if (q->draft_table.n_tokens > q->draft_computed && q->draft_computed > 0)
                PL_TRY(pl_kv_truncate(&sp->mgr, &q->draft_table, q->draft_computed));
            else if (q->draft_computed == 0) pl_kv_free_table(&sp->mgr, &q->draft_table);
        }
        int32_t left = N - q->draft_computed, room = sp->max_tokens - used;
        int32_t chunk = left <= room ? left : room;
        if (chunk < 1 || !draft_slots(sp, q, q->draft_computed + chunk)) {
            PL_TRY(shrink(so, i, 0, target_kv));
            continue;
        }
        d->items[d->n_items++] = (pl_sched_item){.seq = q, .start = q->draft_computed, .n = chunk,
                                                 .sample = chunk == left};
        d->n_tokens += chunk;
        used += chunk;
        q->draft_computed += chunk;
        if (chunk < left) { /* still catching up: no proposals this step */
            PL_TRY(shrink(so, i, 0, target_kv));
            continue;
        }
        sp->items[n++] = i;
    }
    for (int32_t j = 1; d->n_items > 0; j++) {
        PL_TRY(pl_runner_execute(&sp->runner, d));
        /* Read the proposals dj, then queue the next round: the sequences that want more. */
        int32_t row = 0, m = 0;
        for (int32_t r = 0; r < d->n_items; r++) {
            pl_sched_item *di = &d->items[r];
            if (!di->sample) continue;
            di->seq->tokens[di->seq->n_tokens + j - 1] = pl_argmax(sp->runner.logits + (size_t)row++ * V, V);
        }
        d->n_items = d->n_tokens = 0;
        for (int32_t s = 0; s < n; s++) {
            pl_sched_item *it = &so->items[sp->items[s]];
            pl_seq *q = it->seq;
            if (it->n_spec <= j) continue;
            int32_t pos = q->n_tokens + j - 1; /* dj's position */
            if (!draft_slots(sp, q, pos + 1)) {
                PL_TRY(shrink(so, sp->items[s], j, target_kv));
                continue;
            }
            d->items[d->n_items++] = (pl_sched_item){.seq = q, .start = pos, .n = 1, .sample = 1};
            d->n_tokens++;
            q->draft_computed = pos + 1;
            sp->items[m++] = sp->items[s];
        }
        n = m;
    }
    return PL_OK;
}
