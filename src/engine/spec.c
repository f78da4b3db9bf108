/* engine/spec — see spec.h: the n-gram proposer, the configuration, the scheduler's hook. */
#include "engine/spec.h"

#include <stdlib.h>
#include <string.h>

enum { DEFAULT_K = 4, DEFAULT_NGRAM_MIN = 1, DEFAULT_NGRAM_MAX = 4, NGRAM_LIMIT = 64 };

int32_t pl_spec_ngram(const int32_t *tokens, int32_t n, int32_t nmin, int32_t nmax, int32_t k,
                      int32_t *out) {
    for (int32_t m = nmax; m >= nmin; m--) {
        if (m < 1 || m > n - 1) continue;
        const int32_t *suffix = tokens + n - m;
        /* The most recent earlier occurrence that still has a token after it. */
        for (int32_t p = n - m - 1; p >= 0; p--) {
            if (tokens[p] != suffix[0] || memcmp(tokens + p, suffix, (size_t)m * sizeof *tokens))
                continue;
            int32_t avail = n - (p + m), c = avail < k ? avail : k;
            memcpy(out, tokens + p + m, (size_t)c * sizeof *out);
            return c;
        }
    }
    return 0;
}

pl_status pl_spec_init(pl_spec *sp, const pl_engine_config *c) {
    memset(sp, 0, sizeof *sp);
    if (c->speculative_model && c->speculative_ngram)
        return pl_fail(PL_ERR_INVALID_ARG, "speculative decoding: choose one proposer, "
                       "--speculative-model or --speculative-ngram, not both");
    if (!c->speculative_model && !c->speculative_ngram) {
        if (c->num_speculative_tokens)
            return pl_fail(PL_ERR_INVALID_ARG, "num-speculative-tokens needs a proposer: "
                           "--speculative-model DRAFT.gguf or --speculative-ngram");
        return PL_OK;
    }
    if (c->num_speculative_tokens < 0 || c->num_speculative_tokens > PL_MAX_SPECULATIVE_TOKENS)
        return pl_fail(PL_ERR_INVALID_ARG, "num-speculative-tokens must be in [1, %d], got %d",
                       PL_MAX_SPECULATIVE_TOKENS, c->num_speculative_tokens);
    sp->k = c->num_speculative_tokens ? c->num_speculative_tokens : DEFAULT_K;
    sp->ngram_min = c->ngram_min ? c->ngram_min : DEFAULT_NGRAM_MIN;
    sp->ngram_max = c->ngram_max ? c->ngram_max : DEFAULT_NGRAM_MAX;
    if (c->speculative_ngram &&
        (sp->ngram_min < 1 || sp->ngram_max < sp->ngram_min || sp->ngram_max > NGRAM_LIMIT))
        return pl_fail(PL_ERR_INVALID_ARG, "ngram-min (%d) and ngram-max (%d) must satisfy "
                       "1 <= min <= max <= %d", sp->ngram_min, sp->ngram_max, NGRAM_LIMIT);
    sp->mode = c->speculative_model ? PL_SPEC_DRAFT : PL_SPEC_NGRAM;
    return PL_OK;
}

void pl_spec_destroy(pl_spec *sp) {
    if (sp->ready) {
        pl_runner_destroy(&sp->runner);
        pl_sched_output_destroy(&sp->so);
        pl_kv_manager_destroy(&sp->mgr);
        pl_kv_store_destroy(&sp->kv);
    }
    free(sp->items);
    pl_model_destroy(sp->draft);
    memset(sp, 0, sizeof *sp);
}

int32_t pl_spec_propose(void *ctx, pl_seq *q, int32_t k_max) {
    pl_spec *sp = ctx;
    if (sp->mode == PL_SPEC_NGRAM)
        return pl_spec_ngram(q->tokens, q->n_tokens, sp->ngram_min, sp->ngram_max, k_max,
                             q->tokens + q->n_tokens);
    return sp->mode == PL_SPEC_DRAFT ? k_max : 0; /* filled by pl_spec_draft_run */
}
