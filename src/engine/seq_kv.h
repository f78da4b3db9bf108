/* engine/seq_kv — a sequence's KV block tables, one or a pair kept in step.
 *
 * Without KV cache groups (kv->cfg.kv_groups < 2) a sequence holds one table (pl_seq.table)
 * and every call here is the manager call on it. With groups (a mixed model: some layers have
 * a sliding window, the others none, in equal numbers; engine.c decides) it holds two over the
 * one pool: pl_seq.table for the global layers (never released) and pl_seq.table_w for the
 * window layers (released behind the window), and every call applies to both following the
 * protocol of kv/manager.h: allocated together with one cached length, appended all or none,
 * committed, truncated, forked, freed and swapped together. The window group hashes with its
 * own extra key (key ^ PL_SEQ_KV_WINDOW_KEY): its blocks hold other layers than the global
 * group's blocks of the same tokens.
 *
 * Block counts (needed, admission) are the sum over the tables: both come from one pool.
 */
#ifndef PL_ENGINE_SEQ_KV_H
#define PL_ENGINE_SEQ_KV_H

#include "engine/request.h"
#include "kv/manager.h"

#define PL_SEQ_KV_WINDOW_KEY 0x5f3759df9e3779b9ull

static inline int pl_seq_kv_grouped(const pl_kv_manager *kv) { return kv->cfg.kv_groups == 2; }

/* q's tables (live or not): out[0] = table, out[1] = table_w with groups; returns 1 or 2. */
int32_t pl_seq_kv_tables(const pl_kv_manager *kv, pl_seq *q, pl_block_table **out);

/* Prompt tables for q->tokens[0 .. n_tokens): lazy (slots for the cached tokens and at most
 * max_new more, allocate_prompt_part) or whole (allocate_prompt_ex with final_tokens; not with
 * groups, which always come with a window and so with lazy prefill). *n_cached as the manager's. */
pl_status pl_seq_kv_allocate(pl_kv_manager *kv, pl_seq *q, uint64_t key, int lazy,
                             int32_t max_new, int32_t final_tokens, int32_t *n_cached);
/* Blocks a whole (not lazy) allocation of q's tokens takes from the free blocks, its first
 * n_given blocks shared from another sequence (pl_kv_prompt_blocks_needed; one table only). */
int32_t pl_seq_kv_prompt_blocks(pl_kv_manager *kv, const pl_seq *q, uint64_t key, int32_t n_given);
/* q's table for all its tokens, its first n_shared blocks those of lead's (pl_kv_allocate_shared;
 * one table only: KV cache groups always come with lazy prefill). */
pl_status pl_seq_kv_allocate_shared(pl_kv_manager *kv, const pl_seq *lead, int32_t n_shared,
                                    pl_seq *q);
/* Prompt tokens cached for every table (the smaller hit of the two groups). */
int32_t pl_seq_kv_probe(pl_kv_manager *kv, const pl_seq *q, uint64_t key);
/* Blocks a lazy admission of n_tokens with `hit` cached tokens and slots up to `upto` counts:
 * what the window table takes at most, and with groups the global table's blocks for all
 * n_tokens. The global table keeps every block, so admitting it with a first chunk only would
 * let recomputed sequences in that then preempt each other as their later chunks arrive. */
int32_t pl_seq_kv_admit_blocks(const pl_kv_manager *kv, int32_t n_tokens, int32_t upto,
                               int32_t hit);

int32_t pl_seq_kv_append_needed(const pl_kv_manager *kv, const pl_seq *q, int32_t n_new);
bool pl_seq_kv_can_append(const pl_kv_manager *kv, const pl_seq *q, int32_t n_new);
/* Slots for n_new more tokens in every table, all or none; cow[2] receives each table's
 * copy-on-write pair ({-1, -1} when none). */
pl_status pl_seq_kv_append(pl_kv_manager *kv, pl_seq *q, int32_t n_new, pl_block_copy cow[2]);
pl_status pl_seq_kv_truncate(pl_kv_manager *kv, pl_seq *q, int32_t n_keep);
pl_status pl_seq_kv_commit(pl_kv_manager *kv, pl_seq *q, int32_t n_computed);
pl_status pl_seq_kv_fork(pl_kv_manager *kv, const pl_seq *parent, pl_seq *child);
void pl_seq_kv_free(pl_kv_manager *kv, pl_seq *q);

#endif
