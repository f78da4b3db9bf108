/* engine/seq_kv — a sequence's KV block tables, one or a pair kept in step (see seq_kv.h). */
#include "engine/seq_kv.h"

int32_t pl_seq_kv_tables(const pl_kv_manager *kv, pl_seq *q, pl_block_table **out) {
    out[0] = &q->table;
    if (!pl_seq_kv_grouped(kv)) return 1;
    out[1] = &q->table_w;
    return 2;
}

pl_status pl_seq_kv_allocate(pl_kv_manager *kv, pl_seq *q, uint64_t key, int lazy,
                             int32_t max_new, int32_t final_tokens, int32_t *n_cached) {
    if (pl_seq_kv_grouped(kv))
        return pl_kv_allocate_prompt_pair(kv, &q->table, &q->table_w, q->tokens, q->n_tokens, key,
                                          key ^ PL_SEQ_KV_WINDOW_KEY, max_new, n_cached);
    if (lazy)
        return pl_kv_allocate_prompt_part(kv, &q->table, q->tokens, q->n_tokens, key, max_new,
                                          n_cached);
    return pl_kv_allocate_prompt_ex(kv, &q->table, q->tokens, q->n_tokens, key, final_tokens,
                                    n_cached);
}

int32_t pl_seq_kv_prompt_blocks(pl_kv_manager *kv, const pl_seq *q, uint64_t key, int32_t n_given) {
    return pl_kv_prompt_blocks_needed(kv, q->tokens, q->n_tokens, key, n_given);
}

pl_status pl_seq_kv_allocate_shared(pl_kv_manager *kv, const pl_seq *lead, int32_t n_shared,
                                    pl_seq *q) {
    if (pl_seq_kv_grouped(kv))
        return pl_fail(PL_ERR_INVALID_ARG, "kv allocate_shared: not with KV cache groups");
    return pl_kv_allocate_shared(kv, &lead->table, n_shared, &q->table, q->n_tokens);
}

int32_t pl_seq_kv_probe(pl_kv_manager *kv, const pl_seq *q, uint64_t key) {
    int32_t a = pl_kv_probe_prefix(kv, q->tokens, q->n_tokens, key);
    if (!pl_seq_kv_grouped(kv)) return a;
    int32_t b = pl_kv_probe_prefix(kv, q->tokens, q->n_tokens, key ^ PL_SEQ_KV_WINDOW_KEY);
    return a < b ? a : b;
}

int32_t pl_seq_kv_admit_blocks(const pl_kv_manager *kv, int32_t n_tokens, int32_t upto,
                               int32_t hit) {
    int32_t window = pl_kv_blocks_for(kv, upto) - pl_kv_behind_window(kv, hit);
    return pl_seq_kv_grouped(kv) ? window + pl_kv_blocks_for(kv, n_tokens) : window;
}

int32_t pl_seq_kv_append_needed(const pl_kv_manager *kv, const pl_seq *q, int32_t n_new) {
    int32_t need = pl_kv_append_blocks_needed(kv, &q->table, n_new);
    if (pl_seq_kv_grouped(kv)) need += pl_kv_append_blocks_needed(kv, &q->table_w, n_new);
    return need;
}

bool pl_seq_kv_can_append(const pl_kv_manager *kv, const pl_seq *q, int32_t n_new) {
    if (!pl_kv_can_append(kv, &q->table, n_new)) return false;
    if (!pl_seq_kv_grouped(kv)) return true;
    return pl_kv_can_append(kv, &q->table_w, n_new) &&
           pl_seq_kv_append_needed(kv, q, n_new) <= kv->pool.n_free;
}

pl_status pl_seq_kv_append(pl_kv_manager *kv, pl_seq *q, int32_t n_new, pl_block_copy cow[2]) {
    cow[0] = cow[1] = (pl_block_copy){-1, -1};
    if (!pl_seq_kv_grouped(kv)) return pl_kv_append_slots(kv, &q->table, n_new, &cow[0]);
    /* All or none, checked first: a copy-on-write made by the first append must reach the
     * engine, so the second may not fail after it. */
    if (!pl_seq_kv_can_append(kv, q, n_new))
        return pl_fail(PL_ERR_CAPACITY, "kv append: %d tokens need %d blocks in the two KV cache "
                       "groups, %d free", (int)n_new, (int)pl_seq_kv_append_needed(kv, q, n_new),
                       (int)kv->pool.n_free);
    PL_TRY(pl_kv_append_slots(kv, &q->table, n_new, &cow[0]));
    pl_status st = pl_kv_append_slots(kv, &q->table_w, n_new, &cow[1]);
    PL_ASSERT(st == PL_OK);
    return st;
}

pl_status pl_seq_kv_truncate(pl_kv_manager *kv, pl_seq *q, int32_t n_keep) {
    PL_TRY(pl_kv_truncate(kv, &q->table, n_keep));
    return pl_seq_kv_grouped(kv) ? pl_kv_truncate(kv, &q->table_w, n_keep) : PL_OK;
}

pl_status pl_seq_kv_commit(pl_kv_manager *kv, pl_seq *q, int32_t n_computed) {
    PL_TRY(pl_kv_commit(kv, &q->table, q->tokens, n_computed));
    return pl_seq_kv_grouped(kv) ? pl_kv_commit(kv, &q->table_w, q->tokens, n_computed) : PL_OK;
}

pl_status pl_seq_kv_fork(pl_kv_manager *kv, const pl_seq *parent, pl_seq *child) {
    PL_TRY(pl_kv_fork(kv, &parent->table, &child->table));
    if (!pl_seq_kv_grouped(kv)) return PL_OK;
    pl_status st = pl_kv_fork(kv, &parent->table_w, &child->table_w);
    if (st != PL_OK) pl_kv_free_table(kv, &child->table);
    return st;
}

void pl_seq_kv_free(pl_kv_manager *kv, pl_seq *q) {
    pl_kv_free_table(kv, &q->table);
    pl_kv_free_table(kv, &q->table_w); /* no-op when empty */
}
