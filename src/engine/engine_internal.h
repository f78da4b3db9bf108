/* engine/engine_internal — the engine struct (engine.c: lifecycle, inbox, step loop;
 * engine_stats.c: the stats snapshot). The three stages own their state: the scheduler
 * (scheduler.h) and its output, the runner (runner.h), the decoder (decoder.h); the engine holds
 * them, the KV bytes and manager, and the registries. Only src/engine includes this header:
 * tests and tools read the engine's parts through engine/engine_parts.h. */
#ifndef PL_ENGINE_ENGINE_INTERNAL_H
#define PL_ENGINE_ENGINE_INTERNAL_H

#include "pagellm.h"

#include "base/threadpool.h"
#include "engine/admission.h"
#include "engine/config.h"
#include "engine/decoder.h"
#include "engine/inbox.h"
#include "engine/kv_samples.h"
#include "engine/kv_view.h"
#include "engine/output.h"
#include "engine/request.h"
#include "engine/runner.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/spec.h"
#include "kv/cache.h"
#include "model/lora.h"
#include "model/model.h"

#include <pthread.h>
#include <stdio.h>

/* The step loop's own counters and test hooks (engine thread). */
typedef struct {
    uint64_t n;                 /* steps that ran the model (the decoder counts tokens) */
    double seconds;             /* time in pl_engine_step that ran the model */
    double cpu_seconds;         /* its CPU time in those steps */
    uint64_t fail_step;         /* PAGELLM_FAIL_STEP: this step fails (tests of error paths) */
    int delay_ms;               /* PAGELLM_STEP_DELAY_MS: sleep after each model step (tests) */
    FILE *log;                  /* PAGELLM_STEP_LOG: one line per model step (benchmarks) */
    double log_t0;              /* its time origin: the engine's creation */
} pl_engine_steps;

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
    pl_admission adm;           /* what the request checks need (engine/admission.h) */
    pl_inbox inbox;             /* new requests, aborts, ids, channels, groups (engine/inbox.h) */
    pl_engine_steps steps;
    /* A copy of the stats taken by the engine thread after every step, for other threads. */
    pthread_mutex_t stats_mu;   /* after the inbox lock when both are held */
    pl_engine_stats snapshot;
    pl_engine_kv_samples snapshot_samples; /* with `snapshot`, under stats_mu */
    pl_kv_view kv_view;         /* block states for monitoring (engine/kv_view.h) */
    pl_lora_set loras;          /* LoRA adapters by name (engine_lora.c; any thread) */
};


/* engine_tp.c: tensor parallel, rank 0. load loads shard 0 while every worker loads its own,
 * and agrees (e->dist = 1); start, the engine otherwise ready (ok) or not, hands the workers
 * what they need to build the same pools, agrees, and hooks the runner (e->dist = 2). */
pl_status pl_engine_tp_load(pl_engine *e);
pl_status pl_engine_tp_start(pl_engine *e, int ok);

/* engine_stats.c, engine thread: refresh the stats snapshot other threads read (after every
 * step, and once at creation). */
void pl_engine_snapshot_stats(pl_engine *e);

/* engine.c: end a group now (the decoder emits its last outputs; the engine frees it). */
void pl_group_finish(pl_engine *e, pl_seq_group *g, pl_finish_reason why, const char *error);

#endif
