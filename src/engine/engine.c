/* engine/engine — the engine's lifecycle, its inbox, and the step loop:
 *
 *   step: drain the inbox (new requests, aborts) -> schedule -> fail refused requests ->
 *         run it (runner.h: block copies, step batch, logits) -> decode (decoder.h: sample,
 *         fork, beam, stop, emit)
 *
 * Only the engine thread touches groups, sequences, the scheduler and the KV cache. Client
 * threads check and tokenize their requests themselves (engine/admission.h), reach the engine
 * through the inbox (engine/inbox.h) and read outputs through each request's channel
 * (engine/output.h), found in the inbox's channel registry.
 */
#include "engine/engine_internal.h"
#include "engine/engine_parts.h"
#include "base/clock.h"
#include "base/cpucount.h"

#include "base/log.h"
#include "parallel/parallel.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { PROMPT_LOGPROB_ROWS = 256 };


/* ---- create / destroy ---- */

static pl_status setup_kv(pl_engine *e) {
    if (e->model->hp.pooling == PL_POOL_NONE) /* the weights' share of the file */
        PL_TRY(pl_engine_resolve_kv_budget(&e->cfg, pl_gguf_file_size(e->model->file) /
                                                        (uint64_t)e->model->shard.size));
    if (e->cfg.kv_cache_f32) e->cfg.kv_cache_dtype = PL_KV_CACHE_F32;
    if (!pl_kv_cache_dtype_name(e->cfg.kv_cache_dtype))
        return pl_fail(PL_ERR_INVALID_ARG, "kv_cache_dtype %d is not f16, f32, bf16, q8_0 or "
                       "q4_0", (int)e->cfg.kv_cache_dtype);
    e->cfg.kv_cache_f32 = e->cfg.kv_cache_dtype == PL_KV_CACHE_F32;
    pl_kv_cache_shape shape = pl_engine_kv_shape(&e->model->hp);
    size_t dpb = e->spec.mode == PL_SPEC_DRAFT ? pl_spec_draft_bytes_per_block(
                                                     &e->spec, e->cfg.kv_cache_f32, e->cfg.block_size)
                                               : 0;
    return pl_kv_cache_create(&e->cfg, &shape, e->adm.max_model_len, dpb, &e->kv);
}

/* The groups the decoder finished: the engine, which owns the scheduler, the KV cache and the
 * registry, takes each out of them and destroys it (their blocks are mostly free already). */
static void release_finished(pl_engine *e) {
    pl_seq_group **gs;
    int32_t n = pl_decoder_take_finished(&e->decoder, &gs);
    for (int32_t i = 0; i < n; i++) {
        pl_seq_group *g = gs[i];
        pl_scheduler_remove(&e->sched, g);
        for (int32_t j = 0; j < g->n_seqs; j++) {
            pl_kv_cache_free(e->kv, &g->seqs[j]->table, &g->seqs[j]->table_w);
            pl_spec_drop(&e->spec, g->seqs[j]);
        }
        pl_idmap_del(&e->inbox.groups, g->id);
        pl_group_destroy(g);
    }
}

void pl_group_finish(pl_engine *e, pl_seq_group *g, pl_finish_reason why, const char *error) {
    pl_decoder_finish_group(&e->decoder, g, why, error);
    release_finished(e);
}

pl_status pl_engine_create(const pl_engine_config *c, pl_engine **out) {
    *out = NULL;
    pl_status cst = pl_engine_check_config(c);
    if (cst != PL_OK && c->tensor_parallel_size > 1 && pl_dist_active() && pl_dist_rank() == 0) {
        char msg[1024]; /* the workers wait to agree on loading: tell them why not */
        snprintf(msg, sizeof msg, "%s", pl_last_error());
        (void)pl_dist_agree(cst, "could not start the engine");
        return pl_fail(cst, "%s", msg);
    }
    PL_TRY(cst);
    pl_engine *e = calloc(1, sizeof *e);
    if (!e) return pl_fail(PL_ERR_NOMEM, "out of memory");
    e->cfg = *c;
    pl_inbox_init(&e->inbox);
    pl_lora_set_init(&e->loras, NULL, c->max_lora_rank);
    pthread_mutex_init(&e->stats_mu, NULL);
    const char *fs = getenv("PAGELLM_FAIL_STEP"); /* for tests: fail this step (1-based) */
    if (fs) e->steps.fail_step = strtoull(fs, NULL, 10);
    /* For tests that must act mid-answer (the web page's stop button): sleep this many ms after
     * each step that ran the model, at most 1000. */
    const char *sd = getenv("PAGELLM_STEP_DELAY_MS");
    if (sd) {
        long ms = strtol(sd, NULL, 10);
        e->steps.delay_ms = ms < 0 ? 0 : ms > 1000 ? 1000 : (int)ms;
    }
    /* For benchmarks: a line per step that ran the model (docs/SERVER.md, "Step log"). */
    const char *sl = getenv("PAGELLM_STEP_LOG");
    e->steps.log_t0 = pl_clock_now();
    if (sl && *sl && !(e->steps.log = fopen(sl, "w")))
        PL_WARN("PAGELLM_STEP_LOG: cannot write '%s' (%s); no step log", sl, strerror(errno));
    if (e->steps.log)
        fprintf(e->steps.log, "# start_s seconds items tokens prefill_tokens context_tokens "
                "free_blocks waiting running\n");
    pl_status st = c->tensor_parallel_size > 1 ? pl_engine_tp_load(e) : PL_OK;
    if (st == PL_OK) st = pl_spec_init(&e->spec, c);
    if (st == PL_OK && !e->model) {
        st = pl_model_load_with(c->model_path, 0, 1, c->f16_weights, &e->model);
        pl_dist_note_loaded(c->model_path, 0); /* for the benchmarks' memory report */
    }
    if (st == PL_OK) {
        const pl_model_hparams *hp = &e->model->hp;
        e->adm.max_model_len = c->max_model_len ? c->max_model_len : hp->n_ctx_train;
        if (e->adm.max_model_len > hp->n_ctx_train)
            st = pl_fail(PL_ERR_INVALID_ARG, "max-model-len %d exceeds the model's context "
                         "length %d", e->adm.max_model_len, hp->n_ctx_train);
    }
    if (st == PL_OK && e->spec.mode == PL_SPEC_DRAFT)
        st = pl_spec_draft_load(&e->spec, c, e->model, e->adm.max_model_len);
    int threads = c->threads;
    if (st == PL_OK && threads <= 0) { /* the default, counted once (sysfs, cgroup files) */
        char why[256];
        threads = pl_default_threads(why, sizeof why);
        PL_INFO("threads: %s", why);
    }
    if (st == PL_OK && !(e->tp = pl_threadpool_create(threads)))
        st = pl_fail(PL_ERR_NOMEM, "could not start %d threads", threads);
    if (st == PL_OK) st = setup_kv(e);
    if (st == PL_OK && e->spec.mode != PL_SPEC_OFF) { /* defaults resolved, as get_config shows */
        int32_t mb = c->speculative_max_batch ? c->speculative_max_batch : PL_SPEC_DEFAULT_MAX_BATCH;
        e->cfg.speculative_max_batch = mb;
        e->cfg.num_speculative_tokens = e->spec.k;
        e->cfg.ngram_min = e->spec.ngram_min;
        e->cfg.ngram_max = e->spec.ngram_max;
    }
    if (st == PL_OK && e->spec.mode == PL_SPEC_DRAFT)
        st = pl_spec_draft_setup(&e->spec, e->tp, pl_kv_cache_draft_bytes(e->kv), c->kv_cache_f32,
                                 c->block_size, pl_kv_cache_max_blocks_per_seq(e->kv),
                                 c->max_num_batched_tokens, c->max_num_seqs + 1);
    /* Logits rows: one per sequence that samples, plus room for prompt log-probabilities. */
    int32_t max_logit_rows = c->max_num_seqs + PROMPT_LOGPROB_ROWS;
    if (max_logit_rows > c->max_num_batched_tokens) max_logit_rows = c->max_num_batched_tokens;
    if (st == PL_OK) {
        pl_runner_config rc = {
            .model = e->model, .tp = e->tp, .kv = pl_kv_cache_store(e->kv),
            .swap = pl_kv_cache_swap_store(e->kv), .pooling = c->pooling,
            .max_tokens = c->max_num_batched_tokens, .max_items = c->max_num_seqs + 1,
            .max_logit_rows = max_logit_rows, .max_blocks = pl_kv_cache_max_blocks_per_seq(e->kv),
            .groups = pl_kv_cache_grouped(e->kv), .dist = e->dist != 0,
            .max_lora_rank = c->max_lora_rank,
        };
        st = pl_runner_init(&e->runner, &rc);
        e->loras.model = e->model;
    }
    if (st == PL_OK) {
        pl_decoder_config dc = {
            .tok = e->model->tok, .n_vocab = e->model->hp.n_vocab,
            .max_model_len = e->adm.max_model_len, .max_items = c->max_num_seqs + 1, .kv = e->kv,
            .embd = e->runner.embd, .n_embd = pl_model_embed_dim(e->model),
            .drop = e->spec.ready ? pl_spec_drop : NULL, .drop_ctx = &e->spec,
        };
        st = pl_decoder_init(&e->decoder, &dc);
    }
    if (st == PL_OK) {
        int32_t mb = e->cfg.speculative_max_batch;
        pl_spec_hook hook = {e->spec.k, mb < 0 ? INT32_MAX : mb, pl_spec_propose,
                             e->spec.ready ? pl_spec_drop : NULL, &e->spec};
        pl_scheduler_config sc = {c->max_num_seqs, c->max_num_batched_tokens, max_logit_rows,
                                  c->preemption_mode, e->spec.mode != PL_SPEC_OFF ? hook
                                                                                 : (pl_spec_hook){0}};
        st = pl_scheduler_init(&e->sched, &sc, e->kv);
    }
    if (st == PL_OK) st = pl_kv_view_init(&e->kv_view, e->kv, NULL);
    if (st == PL_OK) {
        const pl_model_hparams *hp = &e->model->hp;
        e->adm = (pl_admission){
            .tok = e->model->tok, .n_vocab = hp->n_vocab, .max_model_len = e->adm.max_model_len,
            .max_num_seqs = c->max_num_seqs, .max_num_batched_tokens = c->max_num_batched_tokens,
            .k_spec = e->cfg.num_speculative_tokens, .pooling = pl_engine_pooling(e),
            .embedding_model = hp->pooling != PL_POOL_NONE, .arch_name = hp->arch_name,
            .kv = e->kv, .cons = e->decoder.cons, .loras = &e->loras,
        };
    }
    if (e->dist) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", st != PL_OK ? pl_last_error() : "");
        pl_status ds = pl_engine_tp_start(e, st == PL_OK);
        if (st != PL_OK) pl_fail(st, "%s", msg);
        else st = ds;
    }
    if (st != PL_OK) {
        pl_engine_destroy(e);
        return st;
    }
    pl_engine_snapshot_stats(e);
    *out = e;
    return PL_OK;
}

void pl_engine_destroy(pl_engine *e) {
    if (!e) return;
    /* Finish everything still known (frees blocks and channels' engine references). */
    pl_inbox_take_t t;
    pl_inbox_take(&e->inbox, &t);
    pl_idmap *groups = &e->inbox.groups;
    for (pl_seq_group *g = t.groups, *next; g; g = next) {
        next = g->next;
        g->next = NULL;
        pl_idmap_put(groups, g->id, g);
    }
    for (size_t i = 0; i < groups->cap; i++)
        if (groups->keys[i]) {
            pl_group_finish(e, groups->vals[i], PL_FINISH_ABORT, NULL);
            i = (size_t)-1; /* the map changed: rescan */
        }
    if (e->dist == 2 && pl_dist_send_stop() != PL_OK)
        PL_WARN("tensor parallel: %s", pl_last_error());
    pl_scheduler_destroy(&e->sched);
    pl_kv_cache_destroy(e->kv);
    pl_runner_destroy(&e->runner);
    pl_sched_output_destroy(&e->sched_out);
    pl_decoder_destroy(&e->decoder);
    pl_spec_destroy(&e->spec);
    pl_threadpool_destroy(e->tp);
    pl_lora_set_destroy(&e->loras); /* the groups gave theirs back above */
    pl_model_destroy(e->model);
    pl_inbox_destroy(&e->inbox);
    pthread_mutex_destroy(&e->stats_mu);
    pl_kv_view_destroy(&e->kv_view);
    if (e->steps.log) fclose(e->steps.log);
    free(e);
}

/* ---- requests ---- */

pl_status pl_engine_add_request(pl_engine *e, const char *text, const int32_t *ids, size_t n_ids,
                                const pl_request_params *params, uint64_t *id) {
    pl_seq_group *g;
    PL_TRY(pl_admit(&e->adm, text, ids, n_ids, params, &g));
    /* The waiting queue belongs to the engine thread: bound by its count at the last step. */
    pthread_mutex_lock(&e->stats_mu);
    int32_t waiting = e->snapshot.waiting;
    pthread_mutex_unlock(&e->stats_mu);
    return pl_inbox_submit(&e->inbox, g, e->cfg.max_waiting, waiting, id);
}

void pl_engine_abort(pl_engine *e, uint64_t id) { pl_inbox_abort(&e->inbox, id); }
void pl_engine_release(pl_engine *e, uint64_t id) { pl_inbox_release(&e->inbox, id); }
pl_status pl_engine_poll(pl_engine *e, uint64_t id, int timeout_ms, pl_request_output **out) {
    return pl_inbox_poll(&e->inbox, id, timeout_ms, out);
}

/* The aborts that found no room in the inbox: finish every group whose channel is marked. */
static void scan_aborts(pl_engine *e) {
    pl_idmap *groups = &e->inbox.groups;
    for (int again = 1; again;) {
        again = 0;
        for (size_t i = 0; i < groups->cap && !again; i++) {
            pl_seq_group *g = groups->keys[i] ? groups->vals[i] : NULL;
            if (g && pl_out_abort_wanted(g->chan)) {
                pl_group_finish(e, g, PL_FINISH_ABORT, NULL); /* changes the map: start over */
                again = 1;
            }
        }
    }
}

/* Move new requests into the scheduler and apply aborts (engine thread). */
static void drain_inbox(pl_engine *e) {
    pl_inbox_take_t t;
    pl_inbox_take(&e->inbox, &t);
    for (pl_seq_group *g = t.groups, *next; g; g = next) {
        next = g->next;
        g->next = NULL;
        if (pl_idmap_put(&e->inbox.groups, g->id, g)) {
            pl_group_finish(e, g, PL_FINISH_ERROR, "out of memory");
        } else {
            pl_scheduler_add(&e->sched, g);
        }
    }
    for (size_t i = 0; i < t.n_aborts; i++) {
        pl_seq_group *ag = pl_idmap_get(&e->inbox.groups, t.aborts[i]);
        if (ag) pl_group_finish(e, ag, PL_FINISH_ABORT, NULL);
    }
    if (t.scan) scan_aborts(e);
}

static pl_status step(pl_engine *e);

/* The step log's line for the step that began at t0 and took dt: its items (sequences), tokens
 * and, of those, prefill tokens (items computing more than one token that are not speculative
 * proposals: prompt chunks, recomputation after preemption) and the context tokens the items'
 * attention reads (the sum of their contexts), then the KV blocks free and the groups waiting
 * and running after it. */
static void log_step(pl_engine *e, double t0, double dt) {
    const pl_sched_output *s = &e->sched_out;
    int32_t prefill = 0;
    int64_t context = 0;
    for (int32_t i = 0; i < s->n_items; i++) {
        if (s->items[i].n > 1 && s->items[i].n_spec == 0) prefill += s->items[i].n;
        context += s->items[i].start + s->items[i].n;
    }
    fprintf(e->steps.log, "%.6f %.6f %d %d %d %lld %d %d %d\n", t0 - e->steps.log_t0, dt,
            s->n_items, s->n_tokens, prefill, (long long)context, pl_kv_cache_blocks_free(e->kv),
            (int)e->sched.waiting.n, (int)e->sched.running.n);
}

pl_status pl_engine_step(pl_engine *e) {
    double t0 = pl_clock_now(), c0 = pl_clock_thread_cpu();
    uint64_t steps0 = e->steps.n;
    pl_status st = step(e);
    pl_kv_view_after_step(&e->kv_view, e->kv, &e->sched, e->steps.n);
    if (e->steps.n != steps0) {
        const double dt = pl_clock_now() - t0;
        e->steps.seconds += dt;
        e->steps.cpu_seconds += pl_clock_thread_cpu() - c0;
        if (e->steps.log) log_step(e, t0, dt);
    }
    pl_engine_snapshot_stats(e);
    if (e->steps.delay_ms && e->steps.n != steps0)
        nanosleep(&(struct timespec){e->steps.delay_ms / 1000, (e->steps.delay_ms % 1000) * 1000000L},
                  NULL);
    return st;
}

static pl_status step(pl_engine *e) {
    drain_inbox(e);
    const pl_sched_output *s = &e->sched_out;
    /* A failed schedule (out of memory) still hands back a consistent partial step: what it
     * scheduled has moved blocks (swaps, copy-on-write) whose copies must run, so it runs; the
     * group that could not get memory stays queued and tries again next step. */
    pl_status sched_st = pl_scheduler_schedule(&e->sched, &e->sched_out);
    if (sched_st != PL_OK) PL_WARN("schedule: %s (the rest of the step runs)", pl_last_error());
    for (int32_t i = 0; i < s->n_refused; i++) {
        pl_seq_group *g = s->refused[i];
        char msg[256];
        snprintf(msg, sizeof msg, "request %llu can never fit in the KV cache (%d blocks of %d "
                 "tokens)", (unsigned long long)g->id, pl_kv_cache_num_blocks(e->kv),
                 pl_kv_cache_block_size(e->kv));
        pl_group_finish(e, g, PL_FINISH_ERROR, msg);
    }
    if (s->n_items == 0) return PL_OK;
    double now = pl_clock_now();
    for (int32_t i = 0; i < s->n_items; i++) /* the end of its queueing (vLLM's scheduled_ts) */
        if (s->items[i].seq->group->first_scheduled == 0)
            s->items[i].seq->group->first_scheduled = now;
    pl_kv_cache_sample(e->kv, s->n_items); /* the step's blocks are all allocated, none freed */
    pl_status st = e->steps.n + 1 == e->steps.fail_step
                       ? pl_fail(PL_ERR_INTERNAL, "injected failure of step %llu (PAGELLM_FAIL_STEP)",
                                 (unsigned long long)e->steps.fail_step)
                       : PL_OK;
    if (st == PL_OK && e->spec.ready) st = pl_spec_draft_run(&e->spec, &e->sched_out, e->kv);
    if (st == PL_OK) st = pl_kv_cache_prepare_step(e->kv); /* vAttention: pages the step lacks */
    if (st == PL_OK) st = pl_runner_execute(&e->runner, s);
    if (st == PL_OK)
        st = pl_decoder_update_from_output(&e->decoder, s, e->runner.logits, e->runner.item_row);
    release_finished(e); /* what finished before a failure too */
    e->steps.n++;
    if (st != PL_OK) {
        /* An internal failure: fail the step's requests rather than loop on them. */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", pl_last_error());
        PL_ERROR("step failed: %s", msg);
        for (int32_t i = 0; i < s->n_items; i++) {
            pl_seq_group *g = pl_idmap_get(&e->inbox.groups, s->items[i].seq->group->id);
            if (g == s->items[i].seq->group) pl_group_finish(e, g, PL_FINISH_ERROR, msg);
        }
        return pl_fail(st, "%s", msg);
    }
    return PL_OK;
}

int pl_engine_has_work(pl_engine *e) {
    return pl_inbox_pending(&e->inbox) || pl_scheduler_has_work(&e->sched);
}

pl_status pl_engine_run(pl_engine *e) {
    while (pl_engine_has_work(e)) PL_TRY(pl_engine_step(e));
    return PL_OK;
}

void pl_engine_wait_for_work(pl_engine *e, int timeout_ms) {
    if (pl_scheduler_has_work(&e->sched)) return;
    pl_kv_view_idle(&e->kv_view, e->kv, &e->sched, e->steps.n, 0);
    /* Idle and someone looks at the KV cache: publish now rather than at the next step. */
    if (pl_inbox_wait(&e->inbox, timeout_ms))
        pl_kv_view_idle(&e->kv_view, e->kv, &e->sched, e->steps.n, 0);
}

pl_status pl_engine_kv_snapshot(pl_engine *e, int with_tables, int timeout_ms,
                                pl_kv_snapshot *out) {
    uint64_t seen;
    int need = pl_kv_view_want(&e->kv_view, with_tables, &seen);
    if (need) pl_inbox_poke(&e->inbox); /* wake an idle engine thread (a busy one publishes
                                           after its step) */
    return pl_kv_view_read(&e->kv_view, need, seen, timeout_ms, out);
}

const struct pl_tokenizer *pl_engine_tokenizer(const pl_engine *e) { return e->model->tok; }
int32_t pl_engine_max_model_len(const pl_engine *e) { return e->adm.max_model_len; }
int32_t pl_engine_n_vocab(const pl_engine *e) { return e->model->hp.n_vocab; }
int32_t pl_engine_pooling(const pl_engine *e) {
    if (e->model->hp.pooling == PL_POOL_RANK) return PL_POOL_RANK; /* a reranker scores */
    return e->cfg.pooling ? e->cfg.pooling : (int32_t)e->model->hp.pooling;
}
int32_t pl_engine_n_embd(const pl_engine *e) { return pl_model_embed_dim(e->model); }
int pl_engine_embedding_only(const pl_engine *e) { return e->model->hp.pooling != PL_POOL_NONE; }
const pl_engine_config *pl_engine_get_config(const pl_engine *e) { return &e->cfg; }

pl_kv_cache *pl_engine_kv_cache(const pl_engine *e) { return e->kv; }
const pl_scheduler *pl_engine_scheduler(const pl_engine *e) { return &e->sched; }
const pl_spec *pl_engine_spec(const pl_engine *e) { return &e->spec; }
const pl_model *pl_engine_model(const pl_engine *e) { return e->model; }
