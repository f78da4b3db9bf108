/* engine/spec — speculative decoding's proposers (issue 15).
 *
 * A proposer guesses the next k tokens of a decoding sequence; the target model then checks all
 * of them in ONE step (k + 1 query rows, as a prefill chunk) and the decoder keeps the longest
 * prefix it agrees with, plus its own next token (engine/decoder.c, verify_seq). One weight pass
 * can so yield several tokens: on a CPU a single stream is bound by reading the weights.
 *
 *   - n-gram (prompt lookup): the last n tokens (n from ngram_max down to ngram_min) are looked
 *     for earlier in the sequence's own prompt and output; the tokens that followed the most
 *     recent earlier match are proposed. Free, and strong on repetitive text.
 *   - draft model (spec_draft.c): a small model with the same vocabulary runs k greedy steps on
 *     its own paged KV cache. Its blocks come out of the same KV budget: the engine divides the
 *     budget between the two caches in proportion to their bytes per token, so both hold the
 *     same number of tokens. Its tables live in the sequences (pl_seq.draft_table).
 *
 * The flow of one step: the scheduler asks pl_spec_propose for each decoding sequence it can
 * give room to (scheduler.h, pl_spec_hook); the n-gram proposer writes its proposals into the
 * sequence's token array at once, the draft proposer only reserves k and pl_spec_draft_run fills
 * them after scheduling (one batched draft forward per proposal). Proposals always sit at
 * seq->tokens[n_tokens .. n_tokens + n_spec) and never count as the sequence's tokens until the
 * decoder accepts them.
 */
#ifndef PL_ENGINE_SPEC_H
#define PL_ENGINE_SPEC_H

#include "pagellm.h"

#include "base/threadpool.h"
#include "engine/runner.h"
#include "engine/scheduler.h"
#include "kv/kv_store.h"
#include "kv/manager.h"
#include "model/model.h"

typedef enum { PL_SPEC_OFF = 0, PL_SPEC_NGRAM, PL_SPEC_DRAFT } pl_spec_mode;

/* Speculation turns off in a step that decodes more sequences than this unless the engine config
 * says otherwise (measured: docs/BENCHMARKS.md, "Speculative decoding"). */
enum { PL_SPEC_DEFAULT_MAX_BATCH = 4 };

typedef struct {
    pl_spec_mode mode;
    int32_t k;                  /* proposals per sequence and step */
    int32_t ngram_min, ngram_max;
    /* Draft model (mode DRAFT). */
    pl_model *draft;
    pl_kv_store kv;             /* the draft's KV bytes */
    pl_kv_manager mgr;          /* the draft's blocks (no prefix caching, no swap) */
    pl_runner runner;           /* the draft's step buffers and forward context */
    pl_sched_output so;         /* the draft's step, rebuilt k times per target step */
    int32_t *items;             /* [max_items] target items whose sequences propose this step */
    int32_t max_items, max_tokens;
    int ready;                  /* draft: kv, mgr, runner and so exist */
} pl_spec;

/* Longest-first prompt lookup in tokens[0..n): up to k tokens that followed the most recent
 * earlier occurrence of the last m tokens (m = nmax .. nmin, the first that matches), written to
 * out. Returns how many (0: no match). */
int32_t pl_spec_ngram(const int32_t *tokens, int32_t n, int32_t nmin, int32_t nmax, int32_t k,
                      int32_t *out);

/* The config's speculation, checked (0 when none is asked). The draft model is loaded by
 * pl_spec_draft_init. */
pl_status pl_spec_init(pl_spec *sp, const pl_engine_config *c);
void pl_spec_destroy(pl_spec *sp);

/* pl_spec_hook.propose: ctx is the pl_spec. */
int32_t pl_spec_propose(void *ctx, pl_seq *q, int32_t k_max);

/* spec_draft.c. Load the draft model and check its vocabulary against the target's (by size and
 * token for token) and its context against max_model_len. */
pl_status pl_spec_draft_load(pl_spec *sp, const pl_engine_config *c, const pl_model *target,
                             int32_t max_model_len);
/* The draft's KV bytes per block (for dividing the budget); the model must be loaded. */
size_t pl_spec_draft_bytes_per_block(const pl_spec *sp, int kv_f32, int32_t block_size);
/* Its KV cache of kv_bytes and step buffers for the engine's budgets. */
pl_status pl_spec_draft_setup(pl_spec *sp, pl_threadpool *tp, uint64_t kv_bytes, int kv_f32,
                              int32_t block_size, int32_t max_blocks, int32_t max_tokens,
                              int32_t max_items);
/* Fill the proposals the scheduler reserved in so (items with n_spec > 0) by running the draft;
 * a sequence the draft cannot serve (its cache is full) gets fewer or none, and its item and the
 * target's slots shrink accordingly (rolled back). */
pl_status pl_spec_draft_run(pl_spec *sp, pl_sched_output *so, pl_kv_cache *target_kv);
/* pl_spec_hook.drop and the decoder's drop: a sequence leaves the running set (finished,
 * preempted, swapped) and gives its draft blocks back; ctx is the pl_spec (a draft proposer's
 * once set up; otherwise nothing to do). */
void pl_spec_drop(void *ctx, pl_seq *q);
/* The draft model's block manager once set up (mode DRAFT), else NULL: to read and check. */
const pl_kv_manager *pl_spec_draft_manager(const pl_spec *sp);

#endif
