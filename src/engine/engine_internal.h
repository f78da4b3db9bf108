/* engine/engine_internal — the engine struct shared by engine.c (lifecycle, inbox, step loop),
 * runner.c (step batch and forward pass) and decode.c (sampling, forks, beams, stopping). */
#ifndef PL_ENGINE_ENGINE_INTERNAL_H
#define PL_ENGINE_ENGINE_INTERNAL_H

#include "pagellm.h"

#include "base/idmap.h"
#include "base/threadpool.h"
#include "engine/output.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "kv/kv_store.h"
#include "kv/manager.h"
#include "model/model.h"

#include <pthread.h>

struct pl_engine {
    pl_engine_config cfg;
    pl_model *model;
    pl_threadpool *tp;
    pl_kv_store kv;             /* primary KV bytes */
    pl_kv_store swap;           /* swap pool bytes (num_blocks 0 if none) */
    int has_swap;
    pl_kv_manager mgr;          /* who holds which block */
    pl_scheduler sched;
    pl_forward_ctx *fwd;
    pl_sampler *sampler;
    int32_t max_model_len;
    int32_t max_logit_rows;
    /* Step batch arrays, sized at create. */
    int32_t *b_tokens, *b_pos, *b_seq_start, *b_ctx, *b_tables, *b_rows;
    int64_t *b_slots;
    float *logits;              /* [max_logit_rows][n_vocab] */
    float *logits_tmp;          /* [n_vocab] working copy for sampling */
    int32_t *item_row;          /* [max items] first logits row of each item, or -1 (rows of
                                   an all_logits item are consecutive; the sampling row is last) */
    pl_seq_group **step_groups; /* [max items] groups that sample in the current step */
    char *piece;                /* [piece_cap] scratch for the streaming detokenizer */
    size_t piece_cap;           /* PL_DETOK_CAP(the vocabulary's longest piece) */
    int32_t *eog_ids;           /* end-of-generation ids (masked before min_tokens) */
    int32_t n_eog;
    /* Engine-thread state. */
    pl_idmap groups;            /* id -> pl_seq_group*, every unfinished group */
    /* Shared with client threads. */
    pthread_mutex_t inbox_mu;
    pthread_cond_t inbox_cv;
    pl_seq_group *inbox_head, *inbox_tail;
    int32_t inbox_n;
    uint64_t *aborts;           /* ids to abort at the next step */
    int32_t n_aborts, cap_aborts;
    uint64_t next_id;
    pthread_mutex_t reg_mu;     /* guards `channels` */
    pl_idmap channels;          /* id -> pl_out_channel* while a client may poll */
    /* Counters, written by the engine thread only. */
    uint64_t prompt_tokens, generation_tokens, requests_finished, steps;
    uint64_t fail_step;         /* PAGELLM_FAIL_STEP: this step fails (tests of error paths) */
    /* KV memory samples, engine thread only, one per step that runs the model (see pl_engine_stats). */
    uint64_t kv_samples;
    double kv_usage_sum, kv_usage_peak, kv_waste_peak;
    double kv_tokens_sum, kv_slots_sum, kv_blocks_sum, kv_refs_sum, kv_future_sum;
    int32_t kv_peak_blocks;
    /* A copy of the stats taken by the engine thread after every step, for other threads. */
    pthread_mutex_t stats_mu;
    pl_engine_stats snapshot;
};


/* runner.c: apply the step's block copies, build the batch, run the model. */
pl_status pl_runner_execute(pl_engine *e);
/* decode.c: consume the step's logits: sample, fork, beam, stop, emit deltas; finish groups. */
pl_status pl_decode_process(pl_engine *e);
/* decode.c: end a group (reason, optional message), emit its last outputs, free everything. */
void pl_group_finish(pl_engine *e, pl_seq_group *g, pl_finish_reason why, const char *error);
void pl_group_free(pl_seq_group *g);
pl_seq *pl_seq_new(pl_seq_group *g, int32_t index, const int32_t *tokens, int32_t n);
void pl_seq_free(pl_seq *q);
int pl_group_add_seq(pl_seq_group *g, pl_seq *q);

#endif
