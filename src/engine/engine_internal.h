/* engine/engine_internal — the engine struct (engine.c: lifecycle, inbox, step loop). The three
 * stages own their state: the scheduler (scheduler.h) and its output, the runner (runner.h), the
 * decoder (decoder.h); the engine holds them, the KV bytes and manager, and the registries. */
#ifndef PL_ENGINE_ENGINE_INTERNAL_H
#define PL_ENGINE_ENGINE_INTERNAL_H

#include "pagellm.h"

#include "base/idmap.h"
#include "base/threadpool.h"
#include "engine/decoder.h"
#include "engine/kv_samples.h"
#include "engine/kv_view.h"
#include "engine/output.h"
#include "engine/request.h"
#include "engine/runner.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/spec.h"
#include "kv/cache.h"
#include "model/model.h"

#include <pthread.h>

struct pl_engine {
    pl_engine_config cfg;
    pl_model *model;
    pl_threadpool *tp;
    pl_kv_cache *kv;            /* the KV cache: bytes, blocks, layout (kv/cache.h) */
    int dist;             /* tensor parallel: 1 shards loaded and agreed (workers wait for the
                             setup), 2 workers running (they wait for steps, then stop) */
    pl_scheduler sched;
    pl_sched_output sched_out;  /* the current step's schedule (reused every step) */
    pl_runner runner;           /* step buffers, forward pass, the step's logits */
    pl_decoder decoder;         /* sampling, beams, stopping, outputs */
    pl_spec spec;               /* speculative decoding's proposer (mode OFF: none) */
    int32_t max_model_len;
    /* Engine-thread state. */
    pl_idmap groups;            /* id -> pl_seq_group*, every unfinished group */
    /* Shared with client threads. */
    pthread_mutex_t inbox_mu;
    pthread_cond_t inbox_cv;
    pl_seq_group *inbox_head, *inbox_tail;
    int32_t inbox_n;
    uint64_t *aborts;           /* ids to abort at the next step */
    size_t n_aborts, cap_aborts;
    int abort_scan;             /* an abort did not fit in `aborts` (out of memory): its channel
                                   is marked, and the next step looks at every group's channel */
    uint64_t next_id;
    int kv_poke;                /* a KV snapshot reader wants a fresh picture (under inbox_mu) */
    pthread_mutex_t reg_mu;     /* guards `channels` */
    pl_idmap channels;          /* id -> pl_out_channel* while a client may poll */
    /* Counters, written by the engine thread only. */
    uint64_t steps;             /* steps that ran the model (the decoder counts tokens) */
    uint64_t fail_step;         /* PAGELLM_FAIL_STEP: this step fails (tests of error paths) */
    int step_delay_ms;          /* PAGELLM_STEP_DELAY_MS: sleep after each model step (tests) */
    /* A copy of the stats taken by the engine thread after every step, for other threads. */
    pthread_mutex_t stats_mu;   /* after inbox_mu when both are held */
    pl_engine_stats snapshot;
    pl_engine_kv_samples snapshot_samples; /* with `snapshot`, under stats_mu */
    int32_t taken;              /* under stats_mu: groups taken from the inbox since `snapshot`;
                                   readers count them as waiting, the queue bound does not (a
                                   request that finished in this step would still hold a place) */
    double step_seconds;        /* engine thread: time in pl_engine_step that ran the model */
    double step_cpu_seconds;    /* engine thread: its CPU time in those steps */
    pl_kv_view kv_view;         /* block states for monitoring (engine/kv_view.h) */
};


/* engine.c: end a group now (the decoder emits its last outputs; the engine forgets it). */
void pl_group_finish(pl_engine *e, pl_seq_group *g, pl_finish_reason why, const char *error);

#endif
