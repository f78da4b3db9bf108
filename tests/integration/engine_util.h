/* Helpers shared by the engine tests: run requests to completion and collect their outputs. */
#ifndef PL_TEST_ENGINE_UTIL_H
#define PL_TEST_ENGINE_UTIL_H

#include "pagellm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { RES_MAX_TOK = 1024, RES_MAX_N = 8 };

typedef struct {
    int32_t ids[RES_MAX_N][RES_MAX_TOK];
    int32_t n_ids[RES_MAX_N];
    char text[RES_MAX_N][8192];
    size_t text_len[RES_MAX_N];
    float logprobs[RES_MAX_N][RES_MAX_TOK];
    pl_finish_reason finish[RES_MAX_N];
    double cum[RES_MAX_N];
    int32_t n_cached;
    int32_t n_prompt;
    int finished;
    char error[512];
} result;

/* Drain everything request `id` has produced so far into r. */
static inline void collect(pl_engine *e, uint64_t id, result *r) {
    pl_request_output *o;
    while (!r->finished && pl_engine_poll(e, id, 0, &o) == PL_OK) {
        for (int32_t i = 0; i < o->n_deltas; i++) {
            const pl_completion_delta *d = &o->deltas[i];
            int k = d->index;
            if (k < 0 || k >= RES_MAX_N) continue;
            for (int32_t t = 0; t < d->n_tokens && r->n_ids[k] < RES_MAX_TOK; t++) {
                if (d->token_logprobs) r->logprobs[k][r->n_ids[k]] = d->token_logprobs[t];
                r->ids[k][r->n_ids[k]++] = d->token_ids[t];
            }
            if (r->text_len[k] + d->text_len < sizeof r->text[k]) {
                memcpy(r->text[k] + r->text_len[k], d->text, d->text_len);
                r->text_len[k] += d->text_len;
                r->text[k][r->text_len[k]] = '\0';
            }
            if (d->finish) r->finish[k] = d->finish;
            r->cum[k] = d->cumulative_logprob;
        }
        r->n_prompt = o->n_prompt_tokens;
        r->n_cached = o->n_cached_tokens;
        if (o->error) snprintf(r->error, sizeof r->error, "%s", o->error);
        r->finished = o->finished;
        pl_request_output_destroy(o);
    }
}

/* Step until every listed request finished, collecting as it goes. A run in which no request
 * gets a token or finishes for 20000 steps is stuck (a livelock: admitted requests that preempt
 * each other, or wait for room that never comes): it fails, saying what the engine holds. */
static inline void run_all(pl_engine *e, const uint64_t *ids, result *res, int n) {
    int64_t last = -1, idle = 0;
    for (;;) {
        int all = 1;
        int64_t progress = 0;
        for (int i = 0; i < n; i++) {
            collect(e, ids[i], &res[i]);
            all &= res[i].finished;
            progress += res[i].finished;
            for (int k = 0; k < RES_MAX_N; k++) progress += res[i].n_ids[k];
        }
        if (all) break;
        idle = progress == last ? idle + 1 : 0;
        last = progress;
        if (idle > 20000) {
            pl_engine_stats s;
            pl_engine_get_stats(e, &s);
            fprintf(stderr, "stuck: 20000 steps without a token (%d running, %d waiting, %d "
                    "swapped, %d of %d blocks used, %llu preemptions)\n", (int)s.running,
                    (int)s.waiting, (int)s.swapped, (int)s.blocks_used, (int)s.blocks_total,
                    (unsigned long long)s.preemptions);
#ifdef RUN_ALL_STUCK_HOOK
            RUN_ALL_STUCK_HOOK(e);
#endif
            abort();
        }
        if (pl_engine_step(e) != PL_OK) {
            fprintf(stderr, "step failed: %s\n", pl_last_error());
            abort();
        }
    }
}

/* Greedy decoding of max_tokens tokens, EOS ignored: the engine tests' usual request. */
static inline void greedy_params(pl_request_params *p, int32_t max_tokens) {
    pl_request_params_default(p);
    p->sampling.temperature = 0;
    p->max_tokens = max_tokens;
    p->ignore_eos = 1;
}

/* n requests (parameters p) of the token prompts[n][len], run to the end in e: their results
 * (the caller frees them). */
/* Three completions of max_tokens each, ignoring EOS: beam search of width 3 (beam), or
 * seeded sampling with n = 3 at temperature 0.9 (forked tables, copy-on-write). */
static inline void three_params(pl_request_params *p, int32_t max_tokens, int beam) {
    pl_request_params_default(p);
    p->max_tokens = max_tokens;
    p->ignore_eos = 1;
    p->n = 3;
    if (beam) {
        p->use_beam_search = 1;
        p->best_of = 3;
        p->sampling.temperature = 0;
    } else {
        p->sampling.temperature = 0.9f;
        p->has_seed = 1;
        p->seed = 1234;
    }
}

static inline result *run_prompt_ids(pl_engine *e, const int32_t *prompts, int32_t n, int32_t len,
                                     const pl_request_params *p) {
    result *res = calloc((size_t)n, sizeof *res);
    uint64_t *ids = calloc((size_t)n, sizeof *ids);
    if (!res || !ids) abort();
    for (int32_t r = 0; r < n; r++)
        if (pl_engine_add_request(e, NULL, prompts + (size_t)r * len, (size_t)len, p, &ids[r]) !=
            PL_OK) {
            fprintf(stderr, "add_request %d: %s\n", (int)r, pl_last_error());
            abort();
        }
    run_all(e, ids, res, n);
    free(ids);
    return res;
}

/* The batch the engine tests share: request i is prompts[i % n_prompts] with max_tokens
 * 40 + 7 (i % 5), EOS ignored, greedy or (sampled) seeded with 1000 + i at temperature 0.9,
 * top_p 0.95; runs them all to completion in e. */
static inline void run_prompt_batch(pl_engine *e, const char *const *prompts, int n_prompts,
                                    int count, int sampled, result *res) {
    uint64_t ids[64];
    for (int i = 0; i < count && i < 64; i++) {
        pl_request_params p;
        pl_request_params_default(&p);
        p.sampling.temperature = 0;
        p.max_tokens = 40 + 7 * (i % 5);
        p.ignore_eos = 1;
        if (sampled) {
            p.sampling.temperature = 0.9f;
            p.sampling.top_p = 0.95f;
            p.has_seed = 1;
            p.seed = 1000 + (uint64_t)i;
        }
        memset(&res[i], 0, sizeof res[i]);
        if (pl_engine_add_request(e, prompts[i % n_prompts], NULL, 0, &p, &ids[i]) != PL_OK) {
            fprintf(stderr, "add_request: %s\n", pl_last_error());
            abort();
        }
    }
    run_all(e, ids, res, count < 64 ? count : 64);
}

/* 0 when requests a[n] and b[n] both completed per_req completions of exactly n_out tokens
 * each, the same ids; else 1 with what differs first in msg. */
static inline int results_differ(const result *a, const result *b, int32_t n, int32_t per_req,
                                 int32_t n_out, char *msg, size_t cap) {
    for (int32_t r = 0; r < n; r++) {
        if (a[r].error[0] || b[r].error[0]) {
            snprintf(msg, cap, "request %d failed: %.100s%.100s", (int)r, a[r].error,
                     b[r].error);
            return 1;
        }
        for (int32_t k = 0; k < per_req; k++) {
            if (a[r].n_ids[k] != n_out || b[r].n_ids[k] != n_out) {
                snprintf(msg, cap, "request %d completion %d has %d and %d tokens, not %d",
                         (int)r, (int)k, (int)a[r].n_ids[k], (int)b[r].n_ids[k], (int)n_out);
                return 1;
            }
            for (int32_t i = 0; i < n_out; i++)
                if (a[r].ids[k][i] != b[r].ids[k][i]) {
                    snprintf(msg, cap, "request %d completion %d token %d: %d, %d", (int)r,
                             (int)k, (int)i, (int)a[r].ids[k][i], (int)b[r].ids[k][i]);
                    return 1;
                }
        }
    }
    return 0;
}

#endif
