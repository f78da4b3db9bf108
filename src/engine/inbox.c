/* engine/inbox — client threads meet the engine thread (see inbox.h for the contract). */
#include "engine/inbox.h"
#include "base/buf.h"
#include "base/clock.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

void pl_inbox_init(pl_inbox *ib) {
    memset(ib, 0, sizeof *ib);
    pthread_mutex_init(&ib->mu, NULL);
    pthread_cond_init(&ib->cv, NULL);
    pthread_mutex_init(&ib->reg_mu, NULL);
    pl_idmap_init(&ib->groups);
    pl_idmap_init(&ib->channels);
    ib->next_id = 1;
}

void pl_inbox_destroy(pl_inbox *ib) {
    for (size_t i = 0; i < ib->channels.cap; i++)
        if (ib->channels.keys[i]) pl_out_channel_unref(ib->channels.vals[i]);
    pl_idmap_destroy(&ib->channels);
    pl_idmap_destroy(&ib->groups);
    free(ib->aborts);
    pthread_mutex_destroy(&ib->mu);
    pthread_cond_destroy(&ib->cv);
    pthread_mutex_destroy(&ib->reg_mu);
}

pl_status pl_inbox_submit(pl_inbox *ib, pl_seq_group *g, int32_t max_waiting, int32_t waiting,
                          uint64_t *id) {
    pl_seq *q = g->seqs[0];
    pthread_mutex_lock(&ib->mu);
    if (max_waiting > 0 && ib->queue.n + waiting >= max_waiting) {
        pthread_mutex_unlock(&ib->mu);
        pl_group_destroy(g);
        return pl_fail(PL_ERR_CAPACITY, "the queue is full (%d requests waiting)", max_waiting);
    }
    g->id = ib->next_id++;
    uint64_t fallback_seed = g->id * 0x2545f4914f6cdd1dULL ^ (uint64_t)(g->arrival * 1e9);
    q->index = 0;
    pl_rng_seed(&q->rng, g->params.has_seed ? g->params.seed : fallback_seed);
    g->chan = pl_out_channel_create(g->id, g->params.n);
    if (!g->chan) {
        pthread_mutex_unlock(&ib->mu);
        pl_group_destroy(g);
        return pl_fail(PL_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_lock(&ib->reg_mu);
    int bad = pl_idmap_put(&ib->channels, g->id, g->chan);
    pthread_mutex_unlock(&ib->reg_mu);
    if (bad) {
        pl_out_channel_unref(g->chan); /* the client's reference */
        pthread_mutex_unlock(&ib->mu);
        pl_group_destroy(g);
        return pl_fail(PL_ERR_NOMEM, "out of memory");
    }
    g->next = NULL;
    if (ib->queue.tail) ib->queue.tail->next = g;
    else ib->queue.head = g;
    ib->queue.tail = g;
    ib->queue.n++;
    *id = g->id;
    pthread_cond_broadcast(&ib->cv);
    pthread_mutex_unlock(&ib->mu);
    return PL_OK;
}

/* Queue an abort of request id, whose channel c the caller holds a reference to. Out of memory
 * loses nothing: the channel is marked and the engine's next take scans for marked channels. */
static void push_abort(pl_inbox *ib, uint64_t id, pl_out_channel *c) {
    pthread_mutex_lock(&ib->mu);
    if (pl_array_reserve(&ib->aborts, &ib->cap_aborts, ib->n_aborts + 1, sizeof *ib->aborts)) {
        pl_out_want_abort(c);
        ib->abort_scan = 1;
    } else {
        ib->aborts[ib->n_aborts++] = id;
    }
    pthread_cond_broadcast(&ib->cv);
    pthread_mutex_unlock(&ib->mu);
}

void pl_inbox_abort(pl_inbox *ib, uint64_t id) {
    pthread_mutex_lock(&ib->reg_mu);
    pl_out_channel *c = pl_idmap_get(&ib->channels, id);
    if (c) atomic_fetch_add(&c->refs, 1); /* kept alive while we queue the abort */
    pthread_mutex_unlock(&ib->reg_mu);
    if (!c) return; /* finished and consumed, or never existed */
    push_abort(ib, id, c);
    pl_out_channel_unref(c);
}

void pl_inbox_release(pl_inbox *ib, uint64_t id) {
    pthread_mutex_lock(&ib->reg_mu);
    pl_out_channel *c = pl_idmap_del(&ib->channels, id);
    pthread_mutex_unlock(&ib->reg_mu);
    if (!c) return;
    pl_out_release(c);
    push_abort(ib, id, c);
    pl_out_channel_unref(c); /* the client's reference */
}

pl_status pl_inbox_poll(pl_inbox *ib, uint64_t id, int timeout_ms, pl_request_output **out) {
    *out = NULL;
    pthread_mutex_lock(&ib->reg_mu);
    pl_out_channel *c = pl_idmap_get(&ib->channels, id);
    pthread_mutex_unlock(&ib->reg_mu);
    if (!c) return pl_fail(PL_ERR_NOT_FOUND, "no request %llu", (unsigned long long)id);
    PL_TRY(pl_out_poll(c, timeout_ms, out));
    if ((*out)->finished) {
        pthread_mutex_lock(&ib->reg_mu);
        pl_idmap_del(&ib->channels, id);
        pthread_mutex_unlock(&ib->reg_mu);
        pl_out_channel_unref(c); /* the client's reference */
    }
    return PL_OK;
}

void pl_inbox_poke(pl_inbox *ib) {
    pthread_mutex_lock(&ib->mu);
    ib->poke = 1;
    pthread_cond_broadcast(&ib->cv);
    pthread_mutex_unlock(&ib->mu);
}

void pl_inbox_lock(pl_inbox *ib) { pthread_mutex_lock(&ib->mu); }
void pl_inbox_unlock(pl_inbox *ib) { pthread_mutex_unlock(&ib->mu); }
int32_t pl_inbox_waiting_locked(const pl_inbox *ib) { return ib->taken + ib->queue.n; }
void pl_inbox_reset_taken_locked(pl_inbox *ib) { ib->taken = 0; }

void pl_inbox_take(pl_inbox *ib, pl_inbox_take_t *t) {
    pthread_mutex_lock(&ib->mu);
    t->groups = ib->queue.head;
    ib->queue.head = ib->queue.tail = NULL;
    /* Until the next stats snapshot, the groups taken count as waiting for readers. */
    ib->taken += ib->queue.n;
    ib->queue.n = 0;
    /* Aborts are taken 64 at a time (no allocation); the rest wait for the next take. */
    t->n_aborts = ib->n_aborts < PL_INBOX_ABORTS_PER_TAKE ? ib->n_aborts : PL_INBOX_ABORTS_PER_TAKE;
    if (t->n_aborts) {
        memcpy(t->aborts, ib->aborts, t->n_aborts * sizeof *t->aborts);
        memmove(ib->aborts, ib->aborts + t->n_aborts,
                (ib->n_aborts - t->n_aborts) * sizeof *ib->aborts);
        ib->n_aborts -= t->n_aborts;
    }
    t->scan = ib->abort_scan;
    ib->abort_scan = 0;
    pthread_mutex_unlock(&ib->mu);
}

int pl_inbox_pending(pl_inbox *ib) {
    pthread_mutex_lock(&ib->mu);
    int w = ib->queue.head != NULL || ib->n_aborts > 0 || ib->abort_scan;
    pthread_mutex_unlock(&ib->mu);
    return w;
}

int pl_inbox_wait(pl_inbox *ib, int timeout_ms) {
    pthread_mutex_lock(&ib->mu);
    if (timeout_ms < 0) {
        while (!ib->queue.head && !ib->n_aborts && !ib->poke && !ib->abort_scan)
            pthread_cond_wait(&ib->cv, &ib->mu);
    } else {
        struct timespec dl = pl_clock_deadline(timeout_ms);
        while (!ib->queue.head && !ib->n_aborts && !ib->poke && !ib->abort_scan)
            if (pthread_cond_timedwait(&ib->cv, &ib->mu, &dl) == ETIMEDOUT) break;
    }
    int poke = ib->poke;
    ib->poke = 0;
    pthread_mutex_unlock(&ib->mu);
    return poke;
}
