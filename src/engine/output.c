/* engine/output — see output.h. */
#include "base/status.h"
#include "engine/output.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

pl_out_channel *pl_out_channel_new(uint64_t id, int32_t n_slots) {
    pl_out_channel *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->pending = calloc((size_t)n_slots, sizeof *c->pending);
    c->has_pending = calloc((size_t)n_slots, 1);
    if (!c->pending || !c->has_pending) {
        free(c->pending);
        free(c->has_pending);
        free(c);
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
    free(d->token_ids);
    free(d->text);
    free(d->token_logprobs);
    free(d->top);
    free(d->stop_str);
    memset(d, 0, sizeof *d);
}

void pl_out_channel_unref(pl_out_channel *c) {
    if (!c || atomic_fetch_sub(&c->refs, 1) != 1) return;
    for (int32_t i = 0; i < c->n_slots; i++) delta_clear(&c->pending[i]);
    free(c->pending);
    free(c->has_pending);
    free(c->error);
    free(c->prompt_ids);
    free(c->prompt_top);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

static void *grow(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) abort(); /* out of memory while recording output: nothing sensible remains */
    return q;
}

/* Append delta d (n_top per token) to the pending slot of its completion. */
static void coalesce(pl_completion_delta *p, const pl_completion_delta *d, int32_t n_top) {
    int32_t n0 = p->n_tokens, n1 = n0 + d->n_tokens;
    p->index = d->index;
    if (d->n_tokens) {
        p->token_ids = grow(p->token_ids, (size_t)n1 * sizeof(int32_t));
        memcpy(p->token_ids + n0, d->token_ids, (size_t)d->n_tokens * sizeof(int32_t));
        if (d->token_logprobs) {
            p->token_logprobs = grow(p->token_logprobs, (size_t)n1 * sizeof(float));
            memcpy(p->token_logprobs + n0, d->token_logprobs, (size_t)d->n_tokens * sizeof(float));
            size_t w = (size_t)n_top + 1;
            p->top = grow(p->top, (size_t)n1 * w * sizeof(pl_token_logprob));
            memcpy(p->top + (size_t)n0 * w, d->top, (size_t)d->n_tokens * w * sizeof(*d->top));
            p->n_top = n_top;
        }
    }
    p->text = grow(p->text, p->text_len + d->text_len + 1);
    memcpy(p->text + p->text_len, d->text, d->text_len);
    p->text_len += d->text_len;
    p->text[p->text_len] = '\0';
    p->n_tokens = n1;
    if (d->finish != PL_FINISH_NONE) {
        p->finish = d->finish;
        p->stop_token = d->stop_token;
        free(p->stop_str);
        p->stop_str = d->stop_str ? strdup(d->stop_str) : NULL;
    }
    p->cumulative_logprob = d->cumulative_logprob;
}

void pl_out_push(pl_out_channel *c, const pl_completion_delta *d, int32_t n_top) {
    pthread_mutex_lock(&c->mu);
    if (d->index >= 0 && d->index < c->n_slots) {
        if (!c->has_pending[d->index]) {
            memset(&c->pending[d->index], 0, sizeof c->pending[0]);
            c->pending[d->index].stop_token = -1;
        }
        coalesce(&c->pending[d->index], d, n_top);
        c->has_pending[d->index] = 1;
        c->n_output_tokens += d->n_tokens;
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

void pl_out_set_prompt(pl_out_channel *c, const int32_t *ids, int32_t n, int32_t n_cached,
                       const pl_token_logprob *top, int32_t n_top) {
    pthread_mutex_lock(&c->mu);
    c->n_prompt = n;
    c->prompt_ids = grow(NULL, (size_t)n * sizeof(int32_t));
    memcpy(c->prompt_ids, ids, (size_t)n * sizeof(int32_t));
    c->n_cached = n_cached;
    if (top && n_top > 0) {
        size_t sz = (size_t)n * (size_t)(n_top + 1) * sizeof(*top);
        c->prompt_top = grow(NULL, sz);
        memcpy(c->prompt_top, top, sz);
        c->n_prompt_top = n_top;
    }
    c->prompt_ready = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

void pl_out_finish(pl_out_channel *c, const char *error, double arrival, double first_scheduled,
                   double first_token, double finish_time) {
    pthread_mutex_lock(&c->mu);
    c->finished = 1;
    if (error && !c->error) c->error = strdup(error);
    c->arrival = arrival;
    c->first_scheduled = first_scheduled;
    c->first_token = first_token;
    c->finish_time = finish_time;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

int pl_out_released(pl_out_channel *c) {
    pthread_mutex_lock(&c->mu);
    int r = c->released;
    pthread_mutex_unlock(&c->mu);
    return r;
}

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
            struct timespec dl;
            clock_gettime(CLOCK_REALTIME, &dl);
            dl.tv_sec += timeout_ms / 1000;
            dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
            if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
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
    if (!o || !o->deltas) {
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
        o->error = c->error ? strdup(c->error) : NULL;
        o->arrival_time = c->arrival;
        o->first_scheduled_time = c->first_scheduled;
        o->first_token_time = c->first_token;
        o->finish_time = c->finish_time;
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

void pl_request_output_free(pl_request_output *o) {
    if (!o) return;
    for (int32_t i = 0; i < o->n_deltas; i++) delta_clear(&o->deltas[i]);
    free(o->deltas);
    free(o->error);
    free(o->prompt_ids);
    free(o->prompt_top);
    free(o);
}
