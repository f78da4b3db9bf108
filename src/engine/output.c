/* engine/output — see output.h. */
#include "base/status.h"
#include "base/buf.h"
#include "base/clock.h"
#include "engine/output.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

pl_out_channel *pl_out_channel_create(uint64_t id, int32_t n_slots) {
    pl_out_channel *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->pending = calloc((size_t)n_slots, sizeof *c->pending);
    c->has_pending = calloc((size_t)n_slots, 1);
    if (!c->pending || !c->has_pending) {
        PL_FREE_ALL(c->pending, c->has_pending, c);
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    atomic_init(&c->refs, 2);
    c->id = id;
    c->n_slots = n_slots;
    return c;
}

static void delta_clear(pl_completion_delta *d) {
    PL_FREE_ALL(d->token_ids, d->text, d->token_logprobs, d->top, d->forced, d->stop_str);
    memset(d, 0, sizeof *d);
}

void pl_out_channel_unref(pl_out_channel *c) {
    if (!c || atomic_fetch_sub(&c->refs, 1) != 1) return;
    for (int32_t i = 0; i < c->n_slots; i++) delta_clear(&c->pending[i]);
    PL_FREE_ALL(c->pending, c->has_pending, c->prompt_ids, c->prompt_top, c->embedding);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

/* Grows *p to n bytes; on failure *p is unchanged (and still valid). */
static int grow(void *pp, size_t n) {
    void *p;
    memcpy(&p, pp, sizeof p);
    void *q = realloc(p, n ? n : 1);
    if (!q) return -1;
    memcpy(pp, &q, sizeof q);
    return 0;
}

/* Append delta d (n_top per token) to the pending slot of its completion: all of it, or (out
 * of memory) none of it — a grown buffer still holds the same bytes. */
static int coalesce(pl_completion_delta *p, const pl_completion_delta *d, int32_t n_top) {
    int32_t n0 = p->n_tokens, n1 = n0 + d->n_tokens;
    size_t w = (size_t)n_top + 1;
    char *stop = NULL;
    if ((d->n_tokens && grow(&p->token_ids, (size_t)n1 * sizeof(int32_t))) ||
        (d->n_tokens && d->token_logprobs &&
         (grow(&p->token_logprobs, (size_t)n1 * sizeof(float)) ||
          grow(&p->top, (size_t)n1 * w * sizeof(pl_token_logprob)))) ||
        (d->n_tokens && d->forced && grow(&p->forced, (size_t)n1)) ||
        grow(&p->text, p->text_len + d->text_len + 1) ||
        (d->finish != PL_FINISH_NONE && d->stop_str && !(stop = strdup(d->stop_str))))
        return -1;
    p->index = d->index;
    if (d->n_tokens) {
        memcpy(p->token_ids + n0, d->token_ids, (size_t)d->n_tokens * sizeof(int32_t));
        if (d->token_logprobs) {
            memcpy(p->token_logprobs + n0, d->token_logprobs, (size_t)d->n_tokens * sizeof(float));
            memcpy(p->top + (size_t)n0 * w, d->top, (size_t)d->n_tokens * w * sizeof(*d->top));
            p->n_top = n_top;
        }
        if (d->forced) memcpy(p->forced + n0, d->forced, (size_t)d->n_tokens);
    }
    memcpy(p->text + p->text_len, d->text, d->text_len);
    p->text_len += d->text_len;
    p->text[p->text_len] = '\0';
    p->n_tokens = n1;
    if (d->finish != PL_FINISH_NONE) {
        p->finish = d->finish;
        p->stop_token = d->stop_token;
        free(p->stop_str);
        p->stop_str = stop;
    }
    p->cumulative_logprob = d->cumulative_logprob;
    return 0;
}

static const char LOST[] = "out of memory while recording the output";

int pl_out_push(pl_out_channel *c, const pl_completion_delta *d, int32_t n_top) {
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    if (d->index >= 0 && d->index < c->n_slots) {
        if (!c->has_pending[d->index]) {
            memset(&c->pending[d->index], 0, sizeof c->pending[0]);
            c->pending[d->index].stop_token = -1;
        }
        rc = coalesce(&c->pending[d->index], d, n_top);
        c->has_pending[d->index] = 1;
        if (rc) c->lost = 1;
        else c->n_output_tokens += d->n_tokens;
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int pl_out_set_prompt(pl_out_channel *c, const int32_t *ids, int32_t n, int32_t n_cached,
                      const pl_token_logprob *top, int32_t n_top) {
    pthread_mutex_lock(&c->mu);
    c->n_prompt = n;
    c->n_cached = n_cached;
    int rc = grow(&c->prompt_ids, (size_t)n * sizeof(int32_t));
    if (!rc) memcpy(c->prompt_ids, ids, (size_t)n * sizeof(int32_t));
    if (!rc && top && n_top > 0) {
        size_t sz = (size_t)n * (size_t)(n_top + 1) * sizeof(*top);
        rc = grow(&c->prompt_top, sz);
        if (!rc) {
            memcpy(c->prompt_top, top, sz);
            c->n_prompt_top = n_top;
        }
    }
    if (rc) c->lost = 1;
    c->prompt_ready = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int pl_out_set_embedding(pl_out_channel *c, const float *v, int32_t n) {
    pthread_mutex_lock(&c->mu);
    int rc = grow(&c->embedding, (size_t)n * sizeof(float));
    if (!rc) {
        memcpy(c->embedding, v, (size_t)n * sizeof(float));
        c->n_embd = n;
    } else {
        c->lost = 1;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void pl_out_finish(pl_out_channel *c, const char *error, double arrival, double first_scheduled,
                   double first_token, double finish_time) {
    pthread_mutex_lock(&c->mu);
    c->finished = 1;
    if (c->lost && !c->error[0]) error = LOST;
    if (error && !c->error[0]) snprintf(c->error, sizeof c->error, "%s", error);
    c->arrival = arrival;
    c->first_scheduled = first_scheduled;
    c->first_token = first_token;
    c->finish_time = finish_time;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

void pl_out_want_abort(pl_out_channel *c) {
    pthread_mutex_lock(&c->mu);
    c->abort_wanted = 1;
    pthread_mutex_unlock(&c->mu);
}

/* One flag of c (a field of c), read under its lock. */
static int flag_locked(pl_out_channel *c, const int *flag) {
    pthread_mutex_lock(&c->mu);
    int r = *flag;
    pthread_mutex_unlock(&c->mu);
    return r;
}

int pl_out_abort_wanted(pl_out_channel *c) { return flag_locked(c, &c->abort_wanted); }

int pl_out_released(pl_out_channel *c) { return flag_locked(c, &c->released); }

static int has_news(const pl_out_channel *c) {
    if (c->finished || (c->prompt_ready && !c->prompt_taken)) return 1;
    for (int32_t i = 0; i < c->n_slots; i++)
        if (c->has_pending[i]) return 1;
    return 0;
}

pl_status pl_out_poll(pl_out_channel *c, int timeout_ms, pl_request_output **out) {
    *out = NULL;
    pthread_mutex_lock(&c->mu);
    if (timeout_ms != 0 && !has_news(c)) {
        if (timeout_ms < 0) {
            while (!has_news(c)) pthread_cond_wait(&c->cv, &c->mu);
        } else {
            struct timespec dl = pl_clock_deadline(timeout_ms);
            while (!has_news(c))
                if (pthread_cond_timedwait(&c->cv, &c->mu, &dl) == ETIMEDOUT) break;
        }
    }
    if (!has_news(c)) {
        pthread_mutex_unlock(&c->mu);
        return pl_fail(PL_ERR_TIMEOUT, "request %llu: no new output yet",
                       (unsigned long long)c->id);
    }
    /* Out of memory here loses nothing: the news stay in the channel for the next poll. */
    pl_request_output *o = calloc(1, sizeof *o);
    if (o) o->deltas = calloc((size_t)c->n_slots, sizeof *o->deltas);
    if (o && c->finished && c->error[0]) o->error = strdup(c->error);
    if (!o || !o->deltas || (c->finished && c->error[0] && !o->error)) {
        if (o) free(o->deltas), free(o->error);
        free(o);
        pthread_mutex_unlock(&c->mu);
        return pl_fail(PL_ERR_NOMEM, "request %llu: out of memory for its output",
                       (unsigned long long)c->id);
    }
    o->id = c->id;
    for (int32_t i = 0; i < c->n_slots; i++) {
        if (!c->has_pending[i]) continue;
        o->deltas[o->n_deltas++] = c->pending[i];
        memset(&c->pending[i], 0, sizeof c->pending[i]);
        c->has_pending[i] = 0;
    }
    o->n_prompt_tokens = c->n_prompt;
    o->n_cached_tokens = c->n_cached;
    if (c->prompt_ready && !c->prompt_taken) {
        o->prompt_ids = c->prompt_ids;
        o->prompt_top = c->prompt_top;
        o->n_prompt_top = c->n_prompt_top;
        c->prompt_ids = NULL;
        c->prompt_top = NULL;
        c->prompt_taken = 1;
    }
    o->n_output_tokens = c->n_output_tokens;
    if (c->finished) {
        o->finished = 1;
        o->arrival_time = c->arrival;
        o->first_scheduled_time = c->first_scheduled;
        o->first_token_time = c->first_token;
        o->finish_time = c->finish_time;
        o->embedding = c->embedding;
        o->n_embd = c->n_embd;
        c->embedding = NULL;
        c->taken_final = 1;
    }
    pthread_mutex_unlock(&c->mu);
    *out = o;
    return PL_OK;
}

void pl_out_release(pl_out_channel *c) {
    pthread_mutex_lock(&c->mu);
    c->released = 1;
    pthread_mutex_unlock(&c->mu);
}

void pl_request_output_destroy(pl_request_output *o) {
    if (!o) return;
    for (int32_t i = 0; i < o->n_deltas; i++) delta_clear(&o->deltas[i]);
    PL_FREE_ALL(o->deltas, o->error, o->prompt_ids, o->prompt_top, o->embedding, o);
}
