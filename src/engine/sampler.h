/* engine/sampler — choosing the next token of one sequence from its logits, and log-probabilities.
 *
 * Order (as vLLM): logit_bias added to the raw logits (before everything, greedy included), then
 * penalties (repetition: prompt and output tokens, a positive
 * logit divided by r and a negative one multiplied; presence and frequency: output tokens only),
 * then temperature, then the top-k, top-p and min-p masks, then a draw from the sequence's own
 * RNG. temperature == 0 is greedy (argmax after penalties; lowest id wins a tie). The RNG belongs
 * to the request, so a seeded request draws the same tokens whatever else is in the batch.
 * Log-probabilities reported to users are log-softmax of the RAW logits (before penalties and
 * temperature), as the CLI contract and vLLM's default specify.
 */
#ifndef PL_ENGINE_SAMPLER_H
#define PL_ENGINE_SAMPLER_H

#include "base/rng.h"
#include "base/status.h"

#include <stdint.h>

/* pl_sampling_params (with its _default and _validate) and pl_token_logprob are public
 * (pagellm.h). */

/* Scratch for one vocabulary size; reused across calls (not thread-safe: one per thread). */
typedef struct pl_sampler pl_sampler;

pl_sampler *pl_sampler_create(int32_t n_vocab);
void pl_sampler_destroy(pl_sampler *s);

/* Sample from logits (modified in place). `prompt`/`output` are the sequence's tokens so far,
 * used by the penalties. Returns the token id. */
int32_t pl_sample(pl_sampler *s, const pl_sampling_params *p, float *logits,
                  const int32_t *prompt, int32_t n_prompt, const int32_t *output,
                  int32_t n_output, pl_rng *rng);

/* The first index of the largest of x[0..n) (greedy decoding; NaNs never win, but a NaN at 0 is
 * returned as a plain scan would keep it). 0 when n <= 0. */
int32_t pl_argmax(const float *x, int32_t n);

/* Top k (id, logprob) of log_softmax(logits), descending by logprob (lower id first on ties);
 * k <= n_vocab. Also returns the logprob of `want` in *want_lp when want >= 0. */
void pl_top_logprobs(pl_sampler *s, const float *logits, int32_t k, pl_token_logprob *out,
                     int32_t want, float *want_lp);

#endif
