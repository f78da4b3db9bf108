/* engine/kv_view — publish and read the KV picture (see kv_view.h for the contract). */
#include "engine/kv_view.h"
#include "base/buf.h"

#include "base/clock.h"
#include "engine/request.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long long monotonic_ms(void *ctx) {
    (void)ctx;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static long long now_ms(const pl_kv_view *v) {
    return v->cfg.now_ms(v->cfg.clock_ctx);
}

/* Bytes of a picture's states: primary, swap, then the window pool's primary and swap. */
static size_t view_bytes(const pl_kv_view *v) {
    return (size_t)v->n_blocks + (size_t)v->n_swap + (size_t)v->n_window + (size_t)v->n_window_swap;
}

pl_status pl_kv_view_init(pl_kv_view *v, const pl_kv_cache *kv, const pl_kv_view_config *cfg) {
    const pl_kv_manager *m = pl_kv_cache_manager_c(kv);
    pl_kv_stats k;
    pl_kv_get_stats(m, &k);
    memset(v, 0, sizeof *v);
    v->block_size = m->cfg.block_size;
    v->n_blocks = pl_kv_pool_blocks(m);
    v->n_swap = k.swap_total;
    const pl_kv_manager *mw = pl_kv_cache_window_manager_c(kv); /* m itself without layer kinds */
    v->n_window = mw != m ? pl_kv_pool_blocks(mw) : 0;
    if (mw != m) {
        pl_kv_stats kw;
        pl_kv_get_stats(mw, &kw);
        v->n_window_swap = kw.swap_total;
    }
    size_t n = view_bytes(v);
    for (int i = 0; i < 2; i++)
        if (!(v->buf[i].states = calloc(n ? n : 1, 1))) {
            free(v->buf[0].states);
            return pl_fail(PL_ERR_NOMEM, "out of memory (KV view, %zu blocks)", n);
        }
    pthread_mutex_init(&v->mu, NULL);
    pthread_cond_init(&v->cv, NULL);
    atomic_store(&v->stale, 1);
    if (cfg) v->cfg = *cfg;
    else v->cfg.min_interval_ms = PL_KV_VIEW_MIN_INTERVAL_MS;
    if (!v->cfg.now_ms) v->cfg.now_ms = monotonic_ms;
    v->inited = 1;
    return PL_OK;
}

void pl_kv_view_destroy(pl_kv_view *v) {
    if (!v->inited) return;
    for (int i = 0; i < 2; i++) {
        PL_FREE_ALL(v->buf[i].states, v->buf[i].seqs, v->buf[i].ids);
    }
    pthread_mutex_destroy(&v->mu);
    pthread_cond_destroy(&v->cv);
    v->inited = 0;
}

/* Append the live tables of queue q to b (with a window pool, each sequence's window table's
 * ids after its own). 0, or -1 when out of memory (tables then dropped). */
static int add_tables(const pl_kv_view *v, pl_kv_view_buf *b, const pl_group_queue *q,
                      int swapped) {
    for (const pl_seq_group *g = q->head; g; g = g->next)
        for (int32_t i = 0; i < g->n_seqs; i++) {
            const pl_block_table *t = &g->seqs[i]->table, *w = &g->seqs[i]->table_w;
            if (!t->live) continue;
            int32_t nw = v->n_window && w->live ? w->n_blocks : 0;
            if (pl_array_reserve(&b->seqs, &b->cap_seqs, (size_t)b->n_seqs + 1, sizeof *b->seqs) ||
                pl_array_reserve(&b->ids, &b->cap_ids, (size_t)(b->n_ids + t->n_blocks + nw),
                                 sizeof *b->ids))
                return -1;
            b->seqs[b->n_seqs++] = (pl_kv_seq_blocks){
                .request_id = g->id, .index = g->seqs[i]->index, .swapped = swapped,
                .n_tokens = t->n_tokens, .n_blocks = t->n_blocks, .first_block = b->n_ids,
                .n_window_blocks = nw};
            memcpy(b->ids + b->n_ids, t->blocks, (size_t)t->n_blocks * sizeof *t->blocks);
            b->n_ids += t->n_blocks;
            if (nw) memcpy(b->ids + b->n_ids, w->blocks, (size_t)nw * sizeof *w->blocks);
            b->n_ids += nw;
        }
    return 0;
}

static void publish(pl_kv_view *v, const pl_kv_cache *kv, const pl_scheduler *s, uint64_t steps,
                    int tables, long long now) {
    double t0 = pl_clock_now();
    /* The back buffer is the engine thread's alone: fill it without a lock. */
    pthread_mutex_lock(&v->mu);
    pl_kv_view_buf *b = &v->buf[1 - v->front];
    pthread_mutex_unlock(&v->mu);
    pl_kv_block_states(pl_kv_cache_manager_c(kv), b->states,
                       v->n_swap ? b->states + v->n_blocks : NULL);
    if (v->n_window) {
        uint8_t *w = b->states + v->n_blocks + v->n_swap;
        pl_kv_block_states(pl_kv_cache_window_manager_c(kv), w,
                           v->n_window_swap ? w + v->n_window : NULL);
    }
    b->n_seqs = 0;
    b->n_ids = 0;
    b->has_tables = 0;
    if (tables && add_tables(v, b, &s->running, 0) == 0 && add_tables(v, b, &s->swapped, 1) == 0)
        b->has_tables = 1;
    if (!b->has_tables) b->n_seqs = 0, b->n_ids = 0;
    b->steps = steps;
    b->version = ++v->version;
    atomic_store(&v->stale, 0);
    atomic_store(&v->reader_waits, 0);
    v->last_ms = now;
    pthread_mutex_lock(&v->mu);
    v->front = 1 - v->front;
    v->front_ms = now;
    pthread_cond_broadcast(&v->cv);
    pthread_mutex_unlock(&v->mu);
    v->publish_seconds += pl_clock_now() - t0;
}

void pl_kv_view_after_step(pl_kv_view *v, const pl_kv_cache *kv, const pl_scheduler *s,
                           uint64_t steps) {
    long long until = atomic_load(&v->want_until_ms);
    if (until == 0) { /* nobody ever looked: not even a clock read */
        atomic_store(&v->stale, 1);
        return;
    }
    long long now = now_ms(v);
    if (now >= until ||
        (now - v->last_ms < v->cfg.min_interval_ms && !atomic_load(&v->reader_waits))) {
        atomic_store(&v->stale, 1);
        return;
    }
    publish(v, kv, s, steps, now < atomic_load(&v->tables_until_ms), now);
}

void pl_kv_view_idle(pl_kv_view *v, const pl_kv_cache *kv, const pl_scheduler *s,
                     uint64_t steps, int force) {
    long long now = now_ms(v);
    if (now >= atomic_load(&v->want_until_ms)) return;
    int tables = now < atomic_load(&v->tables_until_ms);
    int need = force || atomic_load(&v->stale);
    if (!need && tables) {
        pthread_mutex_lock(&v->mu);
        need = !v->buf[v->front].has_tables;
        pthread_mutex_unlock(&v->mu);
    }
    if (need) publish(v, kv, s, steps, tables, now);
}

void pl_kv_view_stats(const pl_kv_view *v, pl_engine_stats *s) {
    s->kv_pictures = v->version;
    s->kv_picture_seconds = v->publish_seconds;
}

int pl_kv_view_want(pl_kv_view *v, int with_tables, uint64_t *seen) {
    long long until = now_ms(v) + PL_KV_VIEW_WANT_MS;
    atomic_store(&v->want_until_ms, until);
    if (with_tables) atomic_store(&v->tables_until_ms, until);
    pthread_mutex_lock(&v->mu);
    const pl_kv_view_buf *f = &v->buf[v->front];
    *seen = f->version;
    long long age_ms = until - PL_KV_VIEW_WANT_MS - v->front_ms;
    int need = f->version == 0 || (with_tables && !f->has_tables) ||
               (atomic_load(&v->stale) && age_ms >= PL_KV_VIEW_FRESH_MS);
    pthread_mutex_unlock(&v->mu);
    if (need) atomic_store(&v->reader_waits, 1);
    return need;
}

pl_status pl_kv_view_read(pl_kv_view *v, int need_fresh, uint64_t seen, int timeout_ms,
                          pl_kv_snapshot *out) {
    memset(out, 0, sizeof *out);
    size_t n = view_bytes(v);
    pthread_mutex_lock(&v->mu);
    if (need_fresh && timeout_ms > 0) {
        struct timespec dl = pl_clock_deadline(timeout_ms);
        while (v->buf[v->front].version == seen)
            if (pthread_cond_timedwait(&v->cv, &v->mu, &dl) == ETIMEDOUT) break;
    }
    const pl_kv_view_buf *f = &v->buf[v->front];
    *out = (pl_kv_snapshot){.version = f->version, .steps = f->steps,
                            .block_size = v->block_size, .n_blocks = v->n_blocks,
                            .n_swap_blocks = v->n_swap, .n_window_blocks = v->n_window,
                            .n_window_swap_blocks = v->n_window_swap,
                            .has_tables = f->has_tables};
    out->states = malloc(n ? n : 1);
    if (f->has_tables) {
        out->n_seqs = f->n_seqs;
        out->seqs = malloc((size_t)(f->n_seqs ? f->n_seqs : 1) * sizeof *out->seqs);
        out->block_ids = malloc((size_t)(f->n_ids ? f->n_ids : 1) * sizeof *out->block_ids);
    }
    if (!out->states || (f->has_tables && (!out->seqs || !out->block_ids))) {
        pthread_mutex_unlock(&v->mu);
        pl_kv_snapshot_destroy(out);
        return pl_fail(PL_ERR_NOMEM, "out of memory (KV snapshot)");
    }
    memcpy(out->states, f->states, n);
    if (f->n_seqs) /* tables of no sequence: a buffer that never held one has no arrays */
        memcpy(out->seqs, f->seqs, (size_t)f->n_seqs * sizeof *out->seqs);
    if (f->n_ids) memcpy(out->block_ids, f->ids, (size_t)f->n_ids * sizeof *out->block_ids);
    pthread_mutex_unlock(&v->mu);
    return PL_OK;
}

void pl_kv_snapshot_destroy(pl_kv_snapshot *s) {
    if (!s) return;
    PL_FREE_ALL(s->states, s->seqs, s->block_ids);
    memset(s, 0, sizeof *s);
}
