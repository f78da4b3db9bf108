/* engine/inbox — where client threads meet the engine thread: the queue of new requests, the
 * aborts, the request ids, the registry of output channels (id -> channel while a client may
 * poll) and the registry of unfinished groups (id -> group, engine thread only).
 *
 * Locks: `mu` guards the queue, the aborts, next_id, poke and taken; `reg_mu` guards the
 * channels. A caller holding both takes mu first; the engine's stats lock comes after mu
 * (pl_inbox_lock, then the stats lock). The groups map is the engine thread's, unlocked.
 *
 * Invariants: ids are given once, from 1 up; a queued group has its id, its first sequence's
 * RNG seeded and its channel registered; an abort that found no room in `aborts` has marked its
 * channel and set abort_scan, so no abort is ever lost; `taken` counts the groups handed to the
 * engine since its last stats snapshot (readers count them as waiting). */
#ifndef PL_ENGINE_INBOX_H
#define PL_ENGINE_INBOX_H

#include "base/idmap.h"
#include "engine/output.h"
#include "engine/request.h"

#include <pthread.h>

enum { PL_INBOX_ABORTS_PER_TAKE = 64 };

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pl_group_queue queue;         /* new groups in submission order (linked by next) */
    uint64_t *aborts;             /* ids to abort at the next take */
    size_t n_aborts, cap_aborts;
    int abort_scan;               /* an abort did not fit in `aborts` (out of memory) */
    uint64_t next_id;
    int poke;                     /* a KV snapshot reader wants a fresh picture */
    int32_t taken;                /* groups taken since pl_inbox_reset_taken */
    pthread_mutex_t reg_mu;
    pl_idmap channels;            /* id -> pl_out_channel* while a client may poll */
    pl_idmap groups;              /* engine thread: id -> every unfinished pl_seq_group* */
} pl_inbox;

/* What one take hands the engine thread. */
typedef struct {
    pl_seq_group *groups;         /* new groups, linked by next */
    uint64_t aborts[PL_INBOX_ABORTS_PER_TAKE];
    size_t n_aborts;
    int scan;                     /* look at every group's channel for a wanted abort */
} pl_inbox_take_t;

void pl_inbox_init(pl_inbox *ib);
/* Drops the channel references it holds; every group must be finished first. */
void pl_inbox_destroy(pl_inbox *ib);

/* Client threads. submit gives g its id (*id), seeds its first sequence's RNG, registers its
 * channel and queues it, unless max_waiting > 0 and the queue plus `waiting` (the engine's
 * count at its last step) reach it: PL_ERR_CAPACITY. On error g is destroyed. */
pl_status pl_inbox_submit(pl_inbox *ib, pl_seq_group *g, int32_t max_waiting, int32_t waiting,
                          uint64_t *id);
void pl_inbox_abort(pl_inbox *ib, uint64_t id);
void pl_inbox_release(pl_inbox *ib, uint64_t id);
pl_status pl_inbox_poll(pl_inbox *ib, uint64_t id, int timeout_ms, pl_request_output **out);
/* Wake an idle engine thread for a fresh KV picture. */
void pl_inbox_poke(pl_inbox *ib);
/* Under pl_inbox_lock: groups queued or taken since the last reset (they wait). */
void pl_inbox_lock(pl_inbox *ib);
void pl_inbox_unlock(pl_inbox *ib);
int32_t pl_inbox_waiting_locked(const pl_inbox *ib);
void pl_inbox_reset_taken_locked(pl_inbox *ib);

/* Engine thread. take moves the queue and up to PL_INBOX_ABORTS_PER_TAKE aborts into *t (the
 * rest wait for the next take); pending says whether a take would find anything; wait blocks
 * until something arrives (timeout_ms < 0: forever) and returns whether a poke came. */
void pl_inbox_take(pl_inbox *ib, pl_inbox_take_t *t);
int pl_inbox_pending(pl_inbox *ib);
int pl_inbox_wait(pl_inbox *ib, int timeout_ms);

#endif
