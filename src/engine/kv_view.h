/* engine/kv_view — the picture of the KV block pool that the engine thread publishes for
 * monitoring (pl_engine_kv_snapshot, GET /v1/kv/blocks, the web UI's grid).
 *
 * What it owns: a double buffer of block states (one byte per primary and swap block, and
 * with layer kinds per window-pool primary and swap block) and, on demand, the per-sequence
 * block tables (the window tables' ids after each sequence's own), plus the "someone is
 * watching" deadlines.
 *
 * Invariants:
 * - Only the engine thread writes, and only the BACK buffer, without a lock; publishing flips
 *   `front` under `mu`. Readers touch only the front buffer, only under `mu`, and only to copy
 *   it: the step never waits for a reader longer than one memcpy of the front buffer.
 * - Nothing is copied when nobody asked within the last PL_KV_VIEW_WANT_MS: the step then only
 *   marks the picture stale (one clock read per step).
 * - A published picture is consistent: it is taken between steps, when every block's ref count
 *   equals the number of tables naming it (kv/manager.h).
 */
#ifndef PL_ENGINE_KV_VIEW_H
#define PL_ENGINE_KV_VIEW_H

#include "pagellm.h"
#include "engine/scheduler.h"
#include "kv/cache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* Publish while someone asked within WANT_MS; at most once per MIN_INTERVAL_MS of steps (a
 * poller at 10 Hz needs no picture per step: on a 100k-block pool the copy reads 6 MB of block
 * structs), unless a reader waits for a fresher one; a picture younger than FRESH_MS is fresh
 * enough for a reader. */
enum { PL_KV_VIEW_WANT_MS = 2000, PL_KV_VIEW_MIN_INTERVAL_MS = 40, PL_KV_VIEW_FRESH_MS = 100 };

/* Its options at init (NULL: the defaults, as the engine runs it). */
typedef struct {
    int min_interval_ms;            /* PL_KV_VIEW_MIN_INTERVAL_MS; 0: every step while watched */
    long long (*now_ms)(void *ctx); /* the monotonic clock in ms (NULL: CLOCK_MONOTONIC); a test
                                       drives time with its own */
    void *clock_ctx;
} pl_kv_view_config;

typedef struct {
    uint64_t version, steps;
    uint8_t *states;             /* [n_blocks + n_swap + n_window + n_window_swap] */
    pl_kv_seq_blocks *seqs;      /* [n_seqs] when has_tables */
    int32_t n_seqs;
    size_t cap_seqs;
    int32_t *ids;                /* [n_ids] block ids of seqs, concatenated */
    int64_t n_ids;
    size_t cap_ids;
    int has_tables;
} pl_kv_view_buf;

typedef struct {
    int inited;
    pthread_mutex_t mu;          /* guards front and the front buffer */
    pthread_cond_t cv;           /* signalled at every publication */
    pl_kv_view_buf buf[2];
    int front;
    int32_t block_size, n_blocks, n_swap;
    int32_t n_window;            /* layer kinds: the window pool's primary blocks, else 0 */
    int32_t n_window_swap;       /* ... and its swap blocks */
    uint64_t version;            /* engine thread: publications so far */
    atomic_llong want_until_ms;  /* publish while the monotonic clock (ms) is below this */
    atomic_llong tables_until_ms;/* ... and include the block tables while below this */
    atomic_int stale;            /* blocks may have changed since the last publication */
    atomic_int reader_waits;     /* a reader waits for a picture: publish after the next step */
    long long last_ms;           /* engine thread: monotonic ms of the last publication */
    long long front_ms;          /* under mu: when the front picture was taken */
    pl_kv_view_config cfg;       /* as given at init, now_ms set */
    double publish_seconds;      /* engine thread: time spent publishing (version = count) */
} pl_kv_view;

pl_status pl_kv_view_init(pl_kv_view *v, const pl_kv_cache *kv, const pl_kv_view_config *cfg);
void pl_kv_view_destroy(pl_kv_view *v);

/* Engine thread, after every step: publish if someone is watching (and the last picture is
 * older than min_interval_ms or a reader waits), else mark stale. */
void pl_kv_view_after_step(pl_kv_view *v, const pl_kv_cache *kv, const pl_scheduler *s,
                           uint64_t steps);
/* Engine thread, idle: publish if someone is watching and the picture is stale (or `force`). */
void pl_kv_view_idle(pl_kv_view *v, const pl_kv_cache *kv, const pl_scheduler *s,
                     uint64_t steps, int force);

/* Any thread: keep the engine publishing (tables too if with_tables) for PL_KV_VIEW_WANT_MS.
 * Returns 1 when the current picture is missing, lacks tables that are wanted, or is stale and
 * older than PL_KV_VIEW_FRESH_MS: the caller should wake an idle engine and then call
 * pl_kv_view_read with a timeout. */
/* Engine thread: its fields of the engine's stats (pictures published, time spent). */
void pl_kv_view_stats(const pl_kv_view *v, pl_engine_stats *s);
int pl_kv_view_want(pl_kv_view *v, int with_tables, uint64_t *seen);
/* Any thread: copy the front picture into *out; with timeout_ms > 0 and need_fresh, first wait
 * up to that long for a publication newer than version `seen` (from pl_kv_view_want). */
pl_status pl_kv_view_read(pl_kv_view *v, int need_fresh, uint64_t seen, int timeout_ms,
                          pl_kv_snapshot *out);

#endif
