/* engine/scheduler — iteration-level scheduling of sequence groups over one shared block pool.
 *
 * Three queues of groups, each kept in arrival order (FCFS): waiting (never admitted, or
 * preempted by recomputation), running, swapped. Every step pl_scheduler_schedule decides which
 * tokens run, under the budgets max_num_seqs (sequences in a step) and max_num_batched_tokens
 * (tokens in a step):
 *
 *   1. decodes of running groups, oldest first, one token per live sequence. When the pool has
 *      no block for a sequence's next token, the youngest running group is preempted, all its
 *      sequences together: by recomputation (blocks freed, back to waiting) or by swapping
 *      (blocks moved to the swap pool); the youngest may be the group itself;
 *   2. prefill chunks of running groups (prompts, or prompt + output after a recomputation),
 *      with the token budget left, so a long prompt delays decodes by at most one chunk;
 *   3. if nothing was preempted this step: swapped groups come back, oldest first;
 *   4. if nothing was preempted and nothing is swapped: waiting groups are admitted in order,
 *      first come first served (an admission that does not fit yet stops the admission loop).
 *      A waiting sequence counts the blocks of its tokens less the prefix-cache hits a table
 *      holds now; a group of several sequences back from a recomputation counts its prompt's
 *      full blocks once: the first sequence (the lead) computes them and the others share them
 *      (kv/manager.h pl_kv_allocate_shared) and start when the lead has computed them. So a
 *      group comes back in any pool it fitted before (docs/DESIGN.md, issue 31).
 *      A group that can never fit is handed back as refused. An embedding request (an
 *      embedding model's) takes no blocks: it is admitted only whole, all its tokens in this
 *      step, or it waits; the decoder finishes it after the step, so it is never preempted.
 *
 * Sliding-window caches (kv/manager.h, every layer windowed): prefill is lazy. Admission gives a
 * sequence slots for the prefix-cache hits its window reaches and a first chunk (the token
 * budget, or one window rounded up to blocks when the free blocks do not hold that), and counts
 * only those blocks; each later chunk appends its slots when
 * it is scheduled, as many as the free blocks allow (the commits behind the window free more).
 * So a sequence of any length, including one recomputed after growing past the pool, needs about
 * two windows of blocks at a time. If a step would be empty because every running group is a
 * windowed prefill short of blocks, the youngest running group is preempted so the others go on.
 *
 * The result is a pl_sched_output value: a list of (sequence, token range) items plus the block
 * copies to apply before the forward pass (swap-out, swap-in, copy-on-write, in that order; see
 * kv/manager.h) and the refused groups. The
 * scheduler never runs the model: the engine does, and tells the outcome through the sequences
 * (n_computed, tokens). That is what makes it testable with a fake model.
 */
#ifndef PL_ENGINE_SCHEDULER_H
#define PL_ENGINE_SCHEDULER_H

#include "engine/request.h"
#include "kv/cache.h"

typedef struct {
    pl_seq *seq;
    int32_t start;     /* first token to compute (the sequence's n_computed) */
    int32_t n;         /* tokens to compute: [start, start + n) */
    int sample;        /* start + n == n_tokens: the last row's logits pick the next token */
    int all_logits;    /* every row's logits are needed (prompt log-probabilities) */
    int32_t n_spec;    /* speculative decoding: the last n_spec of the n tokens are proposals
                          (seq->tokens[n_tokens .. n_tokens + n_spec)); every row has logits */
} pl_sched_item;

/* Speculative decoding (issue 15, engine/spec.h). propose writes up to k_max proposals for
 * decoding sequence q at q->tokens[q->n_tokens ..) and returns how many (0: q decodes as usual).
 * The scheduler appends their slots and counts them against the token and logits-row budgets;
 * pl_kv_truncate rolls back the rejected ones after verification (engine/decoder.c). */
typedef struct {
    int32_t k;                   /* proposals per sequence and step (0 = off) */
    int32_t max_batch;           /* no speculation in a step that decodes more sequences */
    int32_t (*propose)(void *ctx, pl_seq *q, int32_t k_max);
    void (*drop)(void *ctx, pl_seq *q); /* a preempted sequence gives its proposer state back
                                           (the draft model's table; NULL: nothing to give) */
    void *ctx;
} pl_spec_hook;

typedef struct {
    int32_t max_num_seqs;
    int32_t max_num_batched_tokens;
    int32_t max_logit_rows;      /* logits rows the runner can hold in one step */
    pl_preemption_mode mode;
    pl_spec_hook spec;           /* speculative decoding; zero = off */
} pl_scheduler_config;

/* What one step runs: the (sequence, token range) items in batch order, the block copies to apply
 * before the forward pass (swap-out, swap-in, copy-on-write, in that order), and the groups that
 * can never fit (the engine fails them). The caller owns it and passes the same one every step:
 * its arrays grow as needed and are reused, so a step allocates nothing in the steady state. */
typedef struct {
    pl_sched_item *items;         /* [n_items] in batch order */
    int32_t n_items;
    size_t items_cap;
    int32_t n_tokens;             /* tokens scheduled */
    pl_block_copy *swap_out, *swap_in, *cow;
    int32_t n_swap_out, n_swap_in, n_cow;
    size_t cap_swap_out, cap_swap_in, cap_cow;
    pl_seq_group **refused;       /* groups that can never fit */
    int32_t n_refused;
    size_t cap_refused;
} pl_sched_output;

void pl_sched_output_destroy(pl_sched_output *o);

typedef struct {
    pl_scheduler_config cfg;
    pl_kv_cache *kv;              /* the KV cache it asks (kv/cache.h) */
    pl_group_queue waiting, running, swapped;
    pl_sched_output *out;         /* the output being filled, during pl_scheduler_schedule only */
    /* Counters. */
    uint64_t preemptions;         /* groups preempted (either mode) */
    uint64_t swaps_out;           /* of those, by swapping */
    uint64_t spec_off_steps;      /* steps whose decode batch exceeded spec.max_batch */
} pl_scheduler;

pl_status pl_scheduler_init(pl_scheduler *s, const pl_scheduler_config *cfg, pl_kv_cache *kv);
void pl_scheduler_destroy(pl_scheduler *s);

/* A new group (its sequences WAITING with n_computed 0) joins the waiting queue. */
void pl_scheduler_add(pl_scheduler *s, pl_seq_group *g);
/* Take a group out of whatever queue holds it (finished, aborted, refused). Its blocks are its
 * owner's to free (the engine: kv/cache.h pl_kv_cache_free). */
void pl_scheduler_remove(pl_scheduler *s, pl_seq_group *g);
/* Decide the next step into *out (emptied first). PL_ERR_NOMEM only on allocation failure of
 * out's arrays. */
pl_status pl_scheduler_schedule(pl_scheduler *s, pl_sched_output *out);
int pl_scheduler_has_work(const pl_scheduler *s);
/* The queue of groups in state `which` (PL_SEQ_WAITING, RUNNING or SWAPPED; else NULL), to read:
 * its groups in order from head through next. */
const pl_group_queue *pl_scheduler_queue(const pl_scheduler *s, pl_seq_status which);
/* Its fields of the engine's stats: queue lengths, preemptions, speculation-off steps. */
void pl_scheduler_stats(const pl_scheduler *s, pl_engine_stats *out);
/* Sequences a group may hold at once (best_of, beam width, or its live sequences). */
int32_t pl_group_max_seqs(const pl_seq_group *g);

#endif
