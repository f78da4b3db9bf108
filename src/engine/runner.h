/* engine/runner — turns a schedule output into logits.
 *
 * Owns the step buffers (token ids, positions, slots, block tables, logits rows, the logits
 * themselves and the model's forward context), sized once at init for the engine's budgets, so
 * a step allocates nothing. pl_runner_execute applies the output's block copies to the KV bytes
 * (swap-out, swap-in, copy-on-write: that order, see kv/manager.h), builds the step batch (every
 * item's tokens [start, start + n) with their slots and the sequence's block table; a logits row
 * for the last token of an item that samples, or for every token of an item that wants prompt
 * log-probabilities or carries speculative proposals) and runs the model. An embedding item (a
 * whole input) gets no logits row: its pooled vector goes to embd[item_row[i]]; on an embedding
 * model (hp.pooling set) every item is one and none has KV slots.
 *
 * Invariants: item_row[i] is the first logits row of item i or -1; the rows of an all_logits
 * item are consecutive and its sampling row (if any) is its last; rows never exceed
 * max_logit_rows (the scheduler is configured with the same bound).
 */
#ifndef PL_ENGINE_RUNNER_H
#define PL_ENGINE_RUNNER_H

#include "base/threadpool.h"
#include "engine/scheduler.h"
#include "kv/kv_store.h"
#include "model/model.h"

typedef struct {
    pl_model *model;
    pl_forward_ctx *fwd;
    pl_kv_store *kv;        /* the KV bytes the model reads and writes */
    pl_kv_store *swap;      /* the swap pool (NULL if none) */
    int32_t max_tokens, max_items, max_logit_rows, max_blocks;
    int32_t *tokens, *pos, *seq_start, *ctx, *tables, *rows;
    int64_t *slots;
    int32_t *tables_w;      /* KV cache groups: the window layers' tables and slots (NULL: none, */
    int64_t *slots_w;       /* pl_runner_config.groups) */
    float *logits;          /* [max_logit_rows][n_vocab]: the last step's logits */
    int32_t *item_row;      /* [max_items]: first logits row of each item of the last step, or -1 */
    int draft;              /* 1: a draft model's runner, reading the sequences' draft tables */
    int dist;               /* 1: tensor parallel rank 0: every step's copies and batch are
                               broadcast to the workers (parallel/parallel.h) before they are run */
    float *embd;            /* [max_items][dim] the pooled vectors of the step's embedding
                               items (item i's at row item_row[i]) */
    int32_t *pooled;        /* [max_items] the step's embedding items */
    int32_t pooling;        /* pl_pooling for embedding items (0: the model's own), from init */
    const struct pl_lora **seq_lora; /* [max_items] the step's items' LoRA adapters */
} pl_runner;

/* A runner's options, all given at init. */
typedef struct {
    pl_model *model;
    pl_threadpool *tp;
    pl_kv_store *kv, *swap;     /* the KV bytes and the swap pool (NULL if none) */
    int32_t pooling;            /* pl_pooling for embedding items (0: the model's own) */
    int32_t max_tokens, max_items, max_logit_rows; /* a step's budgets */
    int32_t max_blocks;         /* blocks per sequence */
    int groups;                 /* KV cache groups (kv/cache.h): the step also carries every
                                   sequence's window table (pl_seq.table_w) for the window layers */
    int draft;                  /* a draft model's runner (reads the draft tables; no groups) */
    int dist;                   /* tensor parallel rank 0 (see pl_runner.dist) */
    int32_t max_lora_rank;      /* > 0: LoRA adapters up to this rank may join a step */
} pl_runner_config;

/* Buffers for steps of up to max_tokens tokens, max_items items, max_logit_rows logits rows and
 * max_blocks blocks per sequence. */
pl_status pl_runner_init(pl_runner *r, const pl_runner_config *c);
void pl_runner_destroy(pl_runner *r);
/* Apply so's copies, run its items; the logits are then in r->logits (rows by r->item_row). */
pl_status pl_runner_execute(pl_runner *r, const pl_sched_output *so);

#endif
