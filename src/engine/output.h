/* engine/output — a request's output channel: the one place the engine thread and a client
 * thread meet for a request.
 *
 * The engine pushes deltas; the client polls them. Deltas of the same completion coalesce
 * while unpolled (tokens, text and log-probabilities are appended), so the channel holds at most
 * one pending delta per completion however slowly the client reads: memory is bounded by the
 * output itself, and the engine never blocks on a client.
 *
 * Lifetime: two references, the engine's and the client's. The engine drops its reference after
 * pushing the final delta (or on release); the client drops its reference when it polled the
 * finished output or released the request. The last one frees the channel.
 */
#ifndef PL_ENGINE_OUTPUT_H
#define PL_ENGINE_OUTPUT_H

#include "pagellm.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct pl_out_channel {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int refs;
    uint64_t id;
    int32_t n_slots;               /* completions (n) */
    pl_completion_delta *pending;  /* [n_slots] coalesced unpolled deltas */
    uint8_t *has_pending;          /* [n_slots] */
    int finished;                  /* the engine pushed the last delta */
    int taken_final;               /* the client received finished = 1 */
    int released;                  /* the client went away: engine should abort */
    int abort_wanted;              /* pl_engine_abort or release asked for it (see engine.c) */
    char error[256];               /* error message of a failed request ("" if none) */
    int lost;                      /* an allocation failed: output was dropped, finish fails */
    /* First-output data (prompt), handed out once. */
    int32_t n_prompt;
    int32_t *prompt_ids;
    int32_t n_cached;
    int32_t n_prompt_top;
    pl_token_logprob *prompt_top;
    int prompt_ready, prompt_taken;
    int32_t n_output_tokens;
    float *embedding;              /* embedding requests: the vector, handed out with the finish */
    int32_t n_embd;
    double arrival, first_scheduled, first_token, finish_time;
} pl_out_channel;

pl_out_channel *pl_out_channel_create(uint64_t id, int32_t n_slots);
void pl_out_channel_unref(pl_out_channel *c);

/* Engine side. push and set_prompt return -1 when out of memory: the data is dropped, the
 * channel remembers it (`lost`), and its finish reports an error whatever the engine says, so
 * no client takes a truncated answer for a whole one. */
int pl_out_push(pl_out_channel *c, const pl_completion_delta *d, int32_t n_top);
int pl_out_set_prompt(pl_out_channel *c, const int32_t *ids, int32_t n, int32_t n_cached,
                       const pl_token_logprob *top, int32_t n_top);
/* An embedding request's vector (copied); -1 when out of memory (the finish then fails). */
int pl_out_set_embedding(pl_out_channel *c, const float *v, int32_t n);
void pl_out_finish(pl_out_channel *c, const char *error, double arrival, double first_scheduled,
                   double first_token,
                   double finish_time);
int pl_out_released(pl_out_channel *c);
/* The fallback path of an abort when out of memory: mark, and test, the channel. */
void pl_out_want_abort(pl_out_channel *c);
int pl_out_abort_wanted(pl_out_channel *c);

/* Client side: take what is there (waiting as pl_engine_poll describes). */
pl_status pl_out_poll(pl_out_channel *c, int timeout_ms, pl_request_output **out);
void pl_out_release(pl_out_channel *c);

#endif
