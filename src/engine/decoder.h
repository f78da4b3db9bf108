/* engine/decoder — consumes a step's logits: the decoding algorithms as operations on sequences
 * (sampling with n / best_of forks, beam search, stopping) and the emission of outputs.
 *
 * Owns the sampler scratch, the detokenizer scratch, the end-of-generation id list and the step's
 * group list; borrows the tokenizer and the KV cache (forks, commits and truncates sequences'
 * tables, frees a finished sequence's). It knows nothing of the scheduler or the engine: the
 * contract is one way, as vLLM v1's runner output. pl_decoder_update_from_output is vLLM v1's
 * update_from_output: for every scheduled item it commits the computed K/V (prefix cache), takes
 * the prompt log-probabilities an item asked for, then samples each group whose sequences reached
 * their sampling point, applies the stop rules and pushes deltas to the groups' output channels.
 * A group that ends is finished here: its last outputs are emitted, its sequences' blocks freed,
 * and it is reported in the finished list (pl_decoder_take_finished); the engine then takes it
 * out of the scheduler and the registry and destroys it.
 * An embedding request ends in the step that computed it: its vector (embd) goes to its channel.
 *
 * Invariants: a group's sequences sample in the same step (the scheduler guarantees it); the
 * logits rows named by item_row belong to the schedule passed in the same call.
 */
#ifndef PL_ENGINE_DECODER_H
#define PL_ENGINE_DECODER_H

#include "engine/output.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"

enum { SCR_CAND, SCR_TOP, SCR_RUN, SCR_NEXT, SCR_USED, PL_DECODER_SCRATCH };

typedef struct {
    const pl_tokenizer *tok;
    pl_kv_cache *kv;              /* forks, commits, truncates; a finished sequence's tables */
    void (*drop)(void *ctx, pl_seq *q); /* gives a finished sequence's draft table back */
    void *drop_ctx;
    int32_t n_vocab;
    int32_t max_model_len;
    pl_sampler *sampler;
    pl_cons_registry *cons;       /* structured output: compiled constraints, token masks */
    float *work;                  /* [n_vocab] working copy of a logits row */
    char *piece;                  /* [piece_cap] streaming detokenizer scratch */
    size_t piece_cap;
    int32_t *eog_ids;             /* end-of-generation ids (masked before min_tokens) */
    int32_t n_eog;
    pl_seq_group **step_groups;   /* [max_items] groups sampling in the current step */
    void *scratch[PL_DECODER_SCRATCH]; /* beam search's step arrays, reused across steps */
    size_t scratch_cap[PL_DECODER_SCRATCH];
    const float *logits;          /* the current step's logits and rows (during an update) */
    const int32_t *item_row;
    const float *embd;            /* embedding models: the runner's pooled vectors [items][n_embd],
                                   else NULL */
    int32_t n_embd;
    pl_seq_group **finished;      /* [max_items] groups finished since the last take */
    int32_t n_finished, max_finished;
    /* Counters. */
    uint64_t steps;               /* updates done */
    uint64_t prompt_tokens;       /* prompt tokens computed */
    uint64_t generation_tokens;   /* tokens sampled */
    uint64_t constrained_tokens;  /* of them under a constraint */
    double constrain_seconds;     /* spent masking and advancing constraints */
    uint64_t requests_finished;
    uint64_t spec_drafts;         /* speculating sequence-steps verified */
    uint64_t spec_draft_tokens;   /* proposals verified */
    uint64_t spec_accepted_tokens;/* of those, accepted */
} pl_decoder;

/* What the decoder is given at init. */
typedef struct {
    const pl_tokenizer *tok;
    int32_t n_vocab;
    int32_t max_model_len;
    int32_t max_items;            /* items (so groups) of one step */
    pl_kv_cache *kv;
    const float *embd;            /* embedding: the runner's pooled vectors (NULL: none) */
    int32_t n_embd;
    void (*drop)(void *ctx, pl_seq *q); /* a finished sequence's draft table (NULL: no draft) */
    void *drop_ctx;
} pl_decoder_config;

pl_status pl_decoder_init(pl_decoder *d, const pl_decoder_config *c);
void pl_decoder_destroy(pl_decoder *d);
/* Its fields of the engine's stats: tokens, constraints, finished requests, speculation. */
void pl_decoder_stats(const pl_decoder *d, pl_engine_stats *s);
/* Consume one step: so is the schedule that ran, logits / item_row the runner's result. */
pl_status pl_decoder_update_from_output(pl_decoder *d, const pl_sched_output *so,
                                        const float *logits, const int32_t *item_row);
/* End a group now (reason, optional message): emit its last outputs, free its sequences'
 * blocks, and report it finished (pl_decoder_take_finished). */
void pl_decoder_finish_group(pl_decoder *d, pl_seq_group *g, pl_finish_reason why,
                             const char *error);
/* The groups finished since the last take (by an update or finish_group), in the order they
 * finished; *out is valid until the next decoder call. The caller owns them now: it takes each
 * out of the scheduler and its registry and destroys it (the engine does, engine.c). */
int32_t pl_decoder_take_finished(pl_decoder *d, pl_seq_group ***out);

#endif
