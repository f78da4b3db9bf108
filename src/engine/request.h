/* engine/request — sequences and sequence groups (internal to the engine).
 *
 * A request is a sequence group: its prompt and one or more sequences (n samples, best_of
 * candidates or beams) that are scheduled, preempted and resumed together. Each sequence owns
 * its output tokens, its block table, its RNG and its detokenizer state. All of it is touched
 * by the engine thread only; the output channel (engine/output.h) is the one shared part.
 *
 * Token accounting of a sequence: tokens = prompt ++ output; n_computed of them have their K/V
 * in the cache. A sequence needs a prefill while n_computed < n_tokens - 1 ... (prompt, or
 * prompt ++ output after a recompute preemption); a decode when n_computed == n_tokens - 1
 * (only the newest token's K/V is missing).
 */
#ifndef PL_ENGINE_REQUEST_H
#define PL_ENGINE_REQUEST_H

#include "pagellm.h"

#include "base/rng.h"
#include "constrain/constrain.h"
#include "kv/manager.h"
#include "tokenizer/tokenizer.h"

#include <stdint.h>

typedef enum {
    PL_SEQ_WAITING = 0, /* not yet admitted, or preempted by recompute */
    PL_SEQ_RUNNING,
    PL_SEQ_SWAPPED,
    PL_SEQ_FINISHED,
} pl_seq_status;

typedef struct pl_seq_group pl_seq_group;

enum { PL_EMBED_LOCAL = 1, PL_EMBED_PAGED = 2 };

typedef struct pl_seq {
    pl_seq_group *group;
    int32_t index;              /* completion index within the group (beams: slot) */
    pl_seq_status status;
    int32_t *tokens;            /* [cap] prompt ++ output */
    int32_t n_tokens, cap;
    int32_t n_computed;         /* tokens whose K/V are in the cache */
    int32_t n_spec;             /* speculative proposals at tokens[n_tokens ..) during a step
                                   (the scheduler places them, the decoder verifies them) */
    pl_block_table table;       /* its KV blocks (with KV cache groups: the global layers') */
    pl_block_table table_w;     /* with KV cache groups: the window layers' blocks, kept in step
                                   with table (kv/cache.h); else empty */
    pl_block_table draft_table; /* its draft model's KV blocks (engine/spec_draft.c), or empty */
    int32_t draft_computed;     /* leading tokens whose draft K/V are valid */
    pl_rng rng;
    double cum_logprob;         /* sum of the chosen tokens' logprobs (raw logits) */
    int32_t logits_row;         /* this step's sampling row in the engine's logits, or -1 */
    pl_finish_reason finish;
    int32_t stop_token;         /* id that stopped it, or -1 */
    const char *stop_str;       /* stop string that stopped it, or NULL */
    /* Output text: everything decoded so far, and how much of it was already emitted. */
    pl_detok_stream detok;
    char *text;
    size_t text_len, text_cap, text_sent, text_safe; /* safe: emittable (no partial stop) */
    /* Pending delta (not yet pushed to the channel): output tokens from pending_from on. */
    int32_t pending_from;
    int32_t out_cap;            /* output tokens the arrays below can hold (max_tokens) */
    float *logprobs;            /* [out_cap] logprob of each output token */
    pl_token_logprob *top;      /* [out_cap][n_top + 1] when logprobs are asked, else NULL */
    uint8_t *forced;            /* [out_cap] 1 where force_end put the output token, or NULL
                                   (no force_end) */
    pl_gstate cstate;           /* structured output: the automaton's state after the output so
                                   far (kept through preemption; copied by a fork) */
} pl_seq;

struct pl_seq_group {
    uint64_t id;
    pl_request_params params;   /* stop strings, stop ids and logit_bias point at copies owned
                                   here */
    char **stop_copy;
    int32_t *stop_ids_copy;
    pl_logit_bias *logit_bias_copy;
    int32_t *force_copy;        /* force_end's open ++ close ids */
    pl_cons *cons;              /* structured output's compiled constraint (a reference), or NULL */
    pl_cons_registry *cons_reg; /* where cons came from */
    struct pl_lora *lora;       /* its LoRA adapter (a reference, model/lora.h), or NULL */
    int32_t *prompt;            /* [n_prompt] */
    int32_t n_prompt;
    pl_seq **seqs;              /* [n_seqs] live and finished sequences */
    int32_t n_seqs;
    size_t seqs_cap;
    int32_t n_live;             /* sequences not finished */
    int32_t n_cached_tokens;    /* prompt tokens hit in the prefix cache at first admission */
    int prefilled;              /* the prompt's logits were sampled once (n/beam fork done) */
    pl_seq *lead;               /* after a recomputation: the sequence that computes the prompt
                                   blocks the others share (engine/scheduler.c); they wait until
                                   lead->n_computed reaches lead_tokens. NULL otherwise */
    int32_t lead_tokens;
    int embed;                  /* an embedding request (one whole-input step, pooled vector):
                                   PL_EMBED_LOCAL (an embedding model's: no KV blocks) or
                                   PL_EMBED_PAGED (a generation model's: blocks for its step) */
    int aborted;
    int oom;                    /* an allocation for it failed while decoding: ends with an error */
    int cons_forced;            /* ... because its constraint refused a force_end token */
    int cons_ambiguous;         /* ... because its constraint had too many parses at once */
    int emitted_prompt;         /* the first output (prompt ids, logprobs) was sent */
    pl_token_logprob *prompt_top; /* [n_prompt][n_top + 1] prompt logprobs, when asked */
    struct pl_out_channel *chan;
    double arrival, first_token, finished_at;
    double first_scheduled;     /* first step that ran any of it (0: not yet) */
    uint64_t step_mark;         /* engine step in which it last sampled (dedup in decode) */
    /* Beam search: finished hypotheses (kept sorted by score). */
    pl_seq **beam_done;
    int32_t n_beam_done;
    size_t beam_done_cap;
    pl_seq_group *next, *prev;  /* intrusive queue links (waiting / running / swapped) */
    struct pl_group_queue_ *queue; /* the queue holding it, or NULL */
};

/* A queue of groups (the scheduler's waiting / running / swapped, the inbox's new requests). */
typedef struct pl_group_queue_ {
    pl_seq_group *head, *tail;
    int32_t n;
} pl_group_queue;

/* Top log-probabilities kept per output token (0 when not asked, or asked with k = 0). */
static inline int32_t n_top_of(const pl_seq_group *g) {
    return g->params.logprobs > 0 ? g->params.logprobs : 0;
}

/* A sequence of group g holding tokens[0..n) (the prompt, or prompt ++ output), with room for
 * max_tokens outputs; NULL when out of memory. Its blocks are the KV manager's business. */
pl_seq *pl_seq_create(pl_seq_group *g, int32_t index, const int32_t *tokens, int32_t n);
void pl_seq_destroy(pl_seq *q);
/* A copy of q's tokens, logprobs, text and RNG (not its blocks); NULL when out of memory. */
pl_seq *pl_seq_clone(pl_seq *q, int32_t index);
/* Append q to g's sequences (-1 when out of memory; q is then still the caller's). */
int pl_group_add_seq(pl_seq_group *g, pl_seq *q);
/* Copy the caller's stop strings and ids into the group (params then point at the copies). */
pl_status pl_group_copy_stops(pl_seq_group *g);
/* Free a group, its sequences, finished beams, copies and its reference to the channel. */
void pl_group_destroy(pl_seq_group *g);

#endif
