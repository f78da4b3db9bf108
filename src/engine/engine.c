/* engine/engine — the engine's lifecycle, its inbox, and the step loop:
 *
 *   step: drain the inbox (new requests, aborts) -> schedule -> fail refused requests ->
 *         run it (runner.h: block copies, step batch, logits) -> decode (decoder.h: sample,
 *         fork, beam, stop, emit)
 *
 * Only the engine thread touches groups, sequences, the scheduler and the KV manager. Client
 * threads reach the engine through the inbox (inbox_mu) and read outputs through each request's
 * channel (engine/output.h), found in the channel registry (reg_mu).
 */
#include "engine/engine_internal.h"
#include "base/buf.h"
#include "base/clock.h"

#include "base/log.h"
#include "parallel/parallel.h"

#include <errno.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { PROMPT_LOGPROB_ROWS = 256 };
#define DEFAULT_KV_BYTES (1ull << 30)


void pl_engine_config_default(pl_engine_config *c) {
    memset(c, 0, sizeof *c);
    c->block_size = 16;
    c->kv_cache_memory = 0; /* resolved at create: the fraction if set, else DEFAULT_KV_BYTES */
    c->preemption_mode = PL_PREEMPT_RECOMPUTE;
    c->max_num_seqs = 128;
    c->max_num_batched_tokens = 512;
    c->enable_prefix_caching = 1;
}

void pl_request_params_default(pl_request_params *p) {
    memset(p, 0, sizeof *p);
    pl_sampling_params_default(&p->sampling);
    p->n = 1;
    p->best_of = 0; /* = n */
    p->length_penalty = 1.0f;
    p->max_tokens = 16;
    p->skip_special_tokens = 1;
    p->logprobs = -1;
    p->prompt_logprobs = -1;
    p->add_special = 1;
    p->parse_special = 0;
}

const char *pl_kv_cache_dtype_name(pl_kv_cache_dtype t) {
    switch (t) {
    case PL_KV_CACHE_F16: return "f16";
    case PL_KV_CACHE_F32: return "f32";
    case PL_KV_CACHE_BF16: return "bf16";
    case PL_KV_CACHE_Q8_0: return "q8_0";
    case PL_KV_CACHE_Q4_0: return "q4_0";
    }
    return NULL;
}

const char *pl_finish_reason_name(pl_finish_reason r) {
    switch (r) {
    case PL_FINISH_NONE: return NULL;
    case PL_FINISH_STOP: return "stop";
    case PL_FINISH_LENGTH: return "length";
    case PL_FINISH_ABORT: return "abort";
    case PL_FINISH_ERROR: return "error";
    }
    return NULL;
}

static void take_snapshot(pl_engine *e);

/* ---- create / destroy ---- */

static pl_status check_config(const pl_engine_config *c) {
    if (!c->model_path) return pl_fail(PL_ERR_INVALID_ARG, "no model given");
    if (c->block_size < 1 || c->block_size > 256 || (c->block_size & (c->block_size - 1)))
        return pl_fail(PL_ERR_INVALID_ARG, "block-size must be a power of two in [1, 256], got %d",
                       c->block_size);
    if (c->max_num_seqs < 1 || c->max_num_seqs > 4096)
        return pl_fail(PL_ERR_INVALID_ARG, "max-num-seqs must be in [1, 4096], got %d",
                       c->max_num_seqs);
    if (c->max_num_batched_tokens < c->max_num_seqs || c->max_num_batched_tokens > 1 << 20)
        return pl_fail(PL_ERR_INVALID_ARG, "max-num-batched-tokens (%d) must be at least "
                       "max-num-seqs (%d) and at most 1048576", c->max_num_batched_tokens,
                       c->max_num_seqs);
    if (c->max_model_len < 0) return pl_fail(PL_ERR_INVALID_ARG, "max-model-len is negative");
    if (!(c->kv_cache_memory_fraction >= 0 && c->kv_cache_memory_fraction <= 1))
        return pl_fail(PL_ERR_INVALID_ARG, "gpu-memory-utilization (the KV cache's fraction of "
                       "available memory) must be in (0, 1], got %g", c->kv_cache_memory_fraction);
    if (c->preemption_mode == PL_PREEMPT_SWAP && c->swap_space == 0)
        return pl_fail(PL_ERR_INVALID_ARG, "preemption-mode swap needs --swap-space");
    if (c->pooling < 0 || c->pooling > 3)
        return pl_fail(PL_ERR_INVALID_ARG, "pooling must be 0 (none), 1 (mean), 2 (cls) or 3 "
                       "(last), got %d", c->pooling);
    if (c->tensor_parallel_size < 0 || c->tensor_parallel_size > 4096)
        return pl_fail(PL_ERR_INVALID_ARG, "tensor-parallel-size must be in [1, 4096], got %d",
                       c->tensor_parallel_size);
    return pl_kv_cache_check_config(c);
}

/* MemAvailable of /proc/meminfo in bytes, or 0 when it cannot be read. */
static uint64_t mem_available(void) {
    const char *path = getenv("PAGELLM_MEMINFO"); /* tests point it at a fake file */
    FILE *f = fopen(path ? path : "/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (uint64_t)kb * 1024;
}

/* The KV budget in bytes: given, or a fraction of the memory available after the weights (the
 * weights are memory-mapped: their pages count as available until touched, so the whole file
 * is taken off), or the default. */
static pl_status resolve_kv_budget(pl_engine *e) {
    pl_engine_config *c = &e->cfg;
    if (c->kv_cache_memory) return PL_OK;
    if (c->kv_cache_memory_fraction <= 0) {
        c->kv_cache_memory = DEFAULT_KV_BYTES;
        return PL_OK;
    }
    uint64_t avail = mem_available();
    if (!avail)
        return pl_fail(PL_ERR_IO, "gpu-memory-utilization: cannot read MemAvailable from "
                       "/proc/meminfo; give the KV budget with --kv-cache-memory");
    uint64_t weights = pl_gguf_file_size(e->model->file) / (uint64_t)e->model->shard.size;
    uint64_t rest = avail > weights ? avail - weights : 0;
    c->kv_cache_memory = (uint64_t)((double)rest * c->kv_cache_memory_fraction);
    PL_INFO("KV cache budget: %.1f MiB = %g x (%.1f MiB available - %.1f MiB of weights)",
            (double)c->kv_cache_memory / (1 << 20), c->kv_cache_memory_fraction,
            (double)avail / (1 << 20), (double)weights / (1 << 20));
    if (!c->kv_cache_memory)
        return pl_fail(PL_ERR_NOMEM, "gpu-memory-utilization %g: no memory is left for the KV "
                       "cache (%.1f MiB available, %.1f MiB of weights)",
                       c->kv_cache_memory_fraction, (double)avail / (1 << 20),
                       (double)weights / (1 << 20));
    return PL_OK;
}

/* The model's shape as the KV cache needs it. A mixed model (some layers windowed, as many
 * as the others; the i-th of each kind share store tensor i) can use KV cache groups. */
static pl_kv_cache_shape kv_shape(const pl_model_hparams *hp) {
    int32_t win = 0;
    for (int32_t l = 0; l < hp->n_layers; l++) win += pl_model_layer_window(hp, l) > 0;
    int mixed = hp->sliding_window > 0 && pl_model_kv_window(hp) <= 0 && win > 0 &&
                2 * win == hp->n_layers;
    return (pl_kv_cache_shape){
        .n_layers = hp->n_layers, .n_kv_heads = hp->n_kv_heads, .head_dim = hp->head_dim,
        .kv_window = pl_model_kv_window(hp), .mixed_window = mixed ? hp->sliding_window : 0,
        .embedding = hp->pooling != PL_POOL_NONE, .arch_name = hp->arch_name,
    };
}

static pl_status setup_kv(pl_engine *e) {
    if (e->model->hp.pooling == PL_POOL_NONE) PL_TRY(resolve_kv_budget(e));
    if (e->cfg.kv_cache_f32) e->cfg.kv_cache_dtype = PL_KV_CACHE_F32;
    if (!pl_kv_cache_dtype_name(e->cfg.kv_cache_dtype))
        return pl_fail(PL_ERR_INVALID_ARG, "kv_cache_dtype %d is not f16, f32, bf16, q8_0 or "
                       "q4_0", (int)e->cfg.kv_cache_dtype);
    e->cfg.kv_cache_f32 = e->cfg.kv_cache_dtype == PL_KV_CACHE_F32;
    pl_kv_cache_shape shape = kv_shape(&e->model->hp);
    size_t dpb = e->spec.mode == PL_SPEC_DRAFT ? pl_spec_draft_bytes_per_block(
                                                     &e->spec, e->cfg.kv_cache_f32, e->cfg.block_size)
                                               : 0;
    return pl_kv_cache_create(&e->cfg, &shape, e->max_model_len, !e->dist, dpb, &e->kv);
}

/* The decoder tells the engine a group ended: drop it from the registry. */
static void forget_group(void *ctx, pl_seq_group *g) {
    pl_engine *e = ctx;
    pl_idmap_del(&e->groups, g->id);
}

void pl_group_finish(pl_engine *e, pl_seq_group *g, pl_finish_reason why, const char *error) {
    pl_decoder_finish_group(&e->decoder, g, why, error);
}

/* Tensor parallel, rank 0: load shard 0 while every worker loads its own, and agree. */
static pl_status dist_load(pl_engine *e) {
    int32_t n = e->cfg.tensor_parallel_size;
    if (!pl_dist_active() || pl_dist_size() != n || pl_dist_rank() != 0)
        return pl_fail(PL_ERR_INVALID_ARG, "tensor-parallel-size %d: the engine must run on rank "
                       "0 of an MPI job of %d processes started with pl_dist_init", n, n);
    pl_status st = pl_model_load_shard(e->cfg.model_path, 0, n, &e->model);
    st = pl_dist_agree(st, "could not load its shard");
    pl_dist_note_loaded(e->cfg.model_path, e->model ? e->model->owned_bytes : 0);
    if (st == PL_OK) e->dist = 1;
    return st;
}

/* Tensor parallel, rank 0, the engine otherwise ready (ok) or not: hand the workers what they
 * need to build the same pools, agree that they did, and hook the runner and forward pass. */
static pl_status dist_start(pl_engine *e, int ok) {
    const pl_kv_store *kv = pl_kv_cache_store(e->kv), *swap = pl_kv_cache_swap_store(e->kv);
    pl_dist_setup su = {
        .ok = ok, .kv_dtype = (int32_t)kv->layout.dtype, .block_size = kv->layout.block_size,
        .num_blocks = (int32_t)kv->layout.num_blocks,
        .num_swap_blocks = swap ? (int32_t)swap->layout.num_blocks : 0,
        .max_tokens = e->runner.max_tokens, .max_seqs = e->runner.max_items,
        .max_blocks = e->runner.max_blocks, .max_logits = e->runner.max_logit_rows,
    };
    pl_status st = pl_dist_send_setup(&su);
    if (!ok) return st;
    if (st == PL_OK)
        st = pl_dist_reserve((int64_t)su.max_tokens * e->model->hp.dim, su.max_logits,
                             e->model->hp.n_vocab);
    st = pl_dist_agree(st, "could not set up its KV cache and buffers");
    if (st != PL_OK) return st;
    e->dist = 2;
    e->runner.dist = 1;
    pl_dist_hook(e->runner.fwd, e->model);
    return PL_OK;
}

pl_status pl_tp_init(int32_t n) { return pl_dist_init(n); }
int32_t pl_tp_rank(void) { return pl_dist_rank(); }
pl_status pl_tp_worker_run(const pl_engine_config *c) {
    if (!pl_dist_active() || pl_dist_rank() == 0)
        return pl_fail(PL_ERR_INVALID_ARG, "pl_tp_worker_run: call pl_tp_init first, on ranks "
                       "other than 0");
    return pl_dist_worker_run(c);
}

pl_status pl_engine_create(const pl_engine_config *c, pl_engine **out) {
    *out = NULL;
    pl_status cst = check_config(c);
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
    pthread_mutex_init(&e->inbox_mu, NULL);
    pthread_cond_init(&e->inbox_cv, NULL);
    pthread_mutex_init(&e->reg_mu, NULL);
    pthread_mutex_init(&e->stats_mu, NULL);
    pl_idmap_init(&e->groups);
    pl_idmap_init(&e->channels);
    e->next_id = 1;
    const char *fs = getenv("PAGELLM_FAIL_STEP"); /* for tests: fail this step (1-based) */
    if (fs) e->fail_step = strtoull(fs, NULL, 10);
    /* For tests that must act mid-answer (the web page's stop button): sleep this many ms after
     * each step that ran the model, at most 1000. */
    const char *sd = getenv("PAGELLM_STEP_DELAY_MS");
    if (sd) {
        long ms = strtol(sd, NULL, 10);
        e->step_delay_ms = ms < 0 ? 0 : ms > 1000 ? 1000 : (int)ms;
    }
    pl_status st = c->tensor_parallel_size > 1 ? dist_load(e) : PL_OK;
    if (st == PL_OK) st = pl_spec_init(&e->spec, c);
    if (st == PL_OK && !e->model) {
        st = pl_model_load(c->model_path, &e->model);
        pl_dist_note_loaded(c->model_path, 0); /* for the benchmarks' memory report */
    }
    if (st == PL_OK) {
        const pl_model_hparams *hp = &e->model->hp;
        e->max_model_len = c->max_model_len ? c->max_model_len : hp->n_ctx_train;
        if (e->max_model_len > hp->n_ctx_train)
            st = pl_fail(PL_ERR_INVALID_ARG, "max-model-len %d exceeds the model's context "
                         "length %d", e->max_model_len, hp->n_ctx_train);
    }
    if (st == PL_OK && e->spec.mode == PL_SPEC_DRAFT)
        st = pl_spec_draft_load(&e->spec, c, e->model, e->max_model_len);
    if (st == PL_OK && !(e->tp = pl_threadpool_create(c->threads)))
        st = pl_fail(PL_ERR_NOMEM, "could not start %d threads", c->threads);
    if (st == PL_OK) st = setup_kv(e);
    if (st == PL_OK)
        st = pl_decoder_init(&e->decoder, e->model->tok, e->model->hp.n_vocab, e->max_model_len,
                             e->kv, &e->sched, c->max_num_seqs + 1, forget_group, e);
    /* Logits rows: one per sequence that samples, plus room for prompt log-probabilities. */
    int32_t max_logit_rows = c->max_num_seqs + PROMPT_LOGPROB_ROWS;
    if (max_logit_rows > c->max_num_batched_tokens) max_logit_rows = c->max_num_batched_tokens;
    if (st == PL_OK) {
        pl_scheduler_config sc = {c->max_num_seqs, c->max_num_batched_tokens, max_logit_rows,
                                  c->preemption_mode};
        st = pl_scheduler_init(&e->sched, &sc, e->kv);
    }
    if (st == PL_OK && e->spec.mode != PL_SPEC_OFF) { /* defaults resolved, as get_config shows */
        int32_t mb = c->speculative_max_batch ? c->speculative_max_batch : PL_SPEC_DEFAULT_MAX_BATCH;
        e->cfg.speculative_max_batch = mb;
        e->cfg.num_speculative_tokens = e->spec.k;
        e->cfg.ngram_min = e->spec.ngram_min;
        e->cfg.ngram_max = e->spec.ngram_max;
        e->sched.spec = (pl_spec_hook){e->spec.k, mb < 0 ? INT32_MAX : mb, pl_spec_propose,
                                       &e->spec, NULL};
    }
    if (st == PL_OK && e->spec.mode == PL_SPEC_DRAFT) {
        st = pl_spec_draft_setup(&e->spec, e->tp, pl_kv_cache_draft_bytes(e->kv), c->kv_cache_f32,
                                 c->block_size, pl_kv_cache_max_blocks_per_seq(e->kv),
                                 c->max_num_batched_tokens, c->max_num_seqs + 1);
        e->sched.spec.draft_kv = e->decoder.draft_kv = st == PL_OK ? &e->spec.mgr : NULL;
    }
    if (st == PL_OK)
        st = pl_runner_init(&e->runner, e->model, e->tp, pl_kv_cache_store(e->kv),
                            pl_kv_cache_swap_store(e->kv),
                            c->max_num_batched_tokens, c->max_num_seqs + 1, max_logit_rows,
                            pl_kv_cache_max_blocks_per_seq(e->kv));
    if (st == PL_OK && pl_kv_cache_grouped(e->kv)) st = pl_runner_enable_groups(&e->runner);
    if (st == PL_OK) {
        e->runner.pooling = c->pooling;
        e->decoder.embd = e->runner.embd;
        e->decoder.n_embd = e->model->hp.dim;
    }
    if (st == PL_OK) st = pl_kv_view_init(&e->kv_view, e->kv);
    if (e->dist) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", st != PL_OK ? pl_last_error() : "");
        pl_status ds = dist_start(e, st == PL_OK);
        if (st != PL_OK) pl_fail(st, "%s", msg);
        else st = ds;
    }
    if (st != PL_OK) {
        pl_engine_destroy(e);
        return st;
    }
    take_snapshot(e);
    *out = e;
    return PL_OK;
}

void pl_engine_destroy(pl_engine *e) {
    if (!e) return;
    /* Finish everything still known (frees blocks and channels' engine references). */
    pthread_mutex_lock(&e->inbox_mu);
    pl_seq_group *g = e->inbox_head;
    e->inbox_head = e->inbox_tail = NULL;
    pthread_mutex_unlock(&e->inbox_mu);
    while (g) {
        pl_seq_group *next = g->next;
        g->next = NULL;
        pl_idmap_put(&e->groups, g->id, g);
        g = next;
    }
    for (size_t i = 0; i < e->groups.cap; i++)
        if (e->groups.keys[i]) {
            pl_group_finish(e, e->groups.vals[i], PL_FINISH_ABORT, NULL);
            i = (size_t)-1; /* the map changed: rescan */
        }
    for (size_t i = 0; i < e->channels.cap; i++)
        if (e->channels.keys[i]) pl_out_channel_unref(e->channels.vals[i]);
    pl_idmap_destroy(&e->channels);
    pl_idmap_destroy(&e->groups);
    if (e->dist == 2 && pl_dist_send_stop() != PL_OK)
        PL_WARN("tensor parallel: %s", pl_last_error());
    pl_scheduler_destroy(&e->sched);
    pl_kv_cache_destroy(e->kv);
    pl_runner_destroy(&e->runner);
    pl_sched_output_destroy(&e->sched_out);
    pl_decoder_destroy(&e->decoder);
    pl_spec_destroy(&e->spec);
    free(e->aborts);
    pl_threadpool_destroy(e->tp);
    pl_model_destroy(e->model);
    pthread_mutex_destroy(&e->inbox_mu);
    pthread_cond_destroy(&e->inbox_cv);
    pthread_mutex_destroy(&e->reg_mu);
    pthread_mutex_destroy(&e->stats_mu);
    pl_kv_view_destroy(&e->kv_view);
    free(e);
}

/* ---- requests ---- */

static pl_status check_params(const pl_engine *e, pl_request_params *p) {
    if (p->n < 1 || p->n > PL_MAX_BEST_OF)
        return pl_fail(PL_ERR_INVALID_ARG, "n must be in [1, %d], got %d", PL_MAX_BEST_OF, p->n);
    if (p->best_of == 0) p->best_of = p->n;
    if (p->best_of < p->n || p->best_of > PL_MAX_BEST_OF)
        return pl_fail(PL_ERR_INVALID_ARG, "best_of must be in [n, %d], got %d", PL_MAX_BEST_OF,
                       p->best_of);
    if (p->best_of > e->cfg.max_num_seqs)
        return pl_fail(PL_ERR_INVALID_ARG, "best_of %d exceeds max-num-seqs %d", p->best_of,
                       e->cfg.max_num_seqs);
    if (p->max_tokens < 1)
        return pl_fail(PL_ERR_INVALID_ARG, "max_tokens must be at least 1, got %d", p->max_tokens);
    if (!pl_kv_cache_shares(e->kv) && (p->best_of > 1 || p->use_beam_search))
        return pl_fail(PL_ERR_INVALID_ARG, "kv-layout %s holds one sequence per request "
                       "(no sharing): n, best_of and beam search need kv-layout paged",
                       pl_kv_cache_layout_name(e->kv));
    if (p->min_tokens < 0 || p->min_tokens > p->max_tokens)
        return pl_fail(PL_ERR_INVALID_ARG, "min_tokens must be in [0, max_tokens], got %d",
                       p->min_tokens);
    if (p->logprobs < -1 || p->logprobs > PL_MAX_LOGPROBS)
        return pl_fail(PL_ERR_INVALID_ARG, "logprobs must be in [0, %d], got %d", PL_MAX_LOGPROBS,
                       p->logprobs);
    if (p->prompt_logprobs < -1 || p->prompt_logprobs > PL_MAX_LOGPROBS)
        return pl_fail(PL_ERR_INVALID_ARG, "prompt_logprobs must be in [0, %d], got %d",
                       PL_MAX_LOGPROBS, p->prompt_logprobs);
    if (!isfinite(p->length_penalty))
        return pl_fail(PL_ERR_INVALID_ARG, "length_penalty must be finite");
    if (p->n_stop < 0 || p->n_stop > PL_MAX_STOP_STRINGS || (p->n_stop && !p->stop))
        return pl_fail(PL_ERR_INVALID_ARG, "at most %d stop strings", PL_MAX_STOP_STRINGS);
    if (p->n_stop_token_ids < 0 || p->n_stop_token_ids > 1024 ||
        (p->n_stop_token_ids && !p->stop_token_ids))
        return pl_fail(PL_ERR_INVALID_ARG, "at most 1024 stop token ids");
    for (int32_t i = 0; i < p->n_stop_token_ids; i++)
        if (p->stop_token_ids[i] < 0 || p->stop_token_ids[i] >= e->model->hp.n_vocab)
            return pl_fail(PL_ERR_INVALID_ARG, "stop token id %d is out of range [0, %d)",
                           p->stop_token_ids[i], e->model->hp.n_vocab);
    for (int32_t i = 0; i < p->sampling.n_logit_bias && p->sampling.logit_bias; i++)
        if (p->sampling.logit_bias[i].id < 0 || p->sampling.logit_bias[i].id >= e->model->hp.n_vocab)
            return pl_fail(PL_ERR_INVALID_ARG, "logit_bias: token id %d is out of range [0, %d)",
                           p->sampling.logit_bias[i].id, e->model->hp.n_vocab);
    if (p->use_beam_search && p->sampling.n_logit_bias)
        return pl_fail(PL_ERR_INVALID_ARG, "logit_bias is not supported with beam search");
    if (p->constraint != PL_CONSTRAINT_NONE && p->use_beam_search)
        return pl_fail(PL_ERR_INVALID_ARG, "structured output is not supported with beam search");
    if (p->constraint < PL_CONSTRAINT_NONE || p->constraint > PL_CONSTRAINT_GRAMMAR)
        return pl_fail(PL_ERR_INVALID_ARG, "unknown constraint kind %d", (int)p->constraint);
    if (p->use_beam_search) {
        /* Beam search is deterministic: the sampling parameters do not apply (as in vLLM,
         * which requires them neutral; pagellm simply ignores them). */
        pl_sampling_params_default(&p->sampling);
        p->sampling.temperature = 0;
    }
    return pl_sampling_params_validate(&p->sampling);
}

/* Blocks the request may need at its peak: the prompt once, then every sequence's own output
 * blocks plus a copied partial block. More than the pool minus the watermark can never run. */
static pl_status check_fits(const pl_engine *e, const pl_seq_group *g) {
    int32_t total = g->n_prompt + g->params.max_tokens;
    if (total > e->max_model_len)
        return pl_fail(PL_ERR_INVALID_ARG, "this model's maximum context length is %d tokens, "
                       "but %d were requested (%d in the prompt, %d for the completion)",
                       e->max_model_len, total, g->n_prompt, g->params.max_tokens);
    int64_t seqs = pl_group_max_seqs(g);
    int64_t need = pl_kv_cache_request_blocks(e->kv, g->n_prompt, g->params.max_tokens, seqs,
                                              e->cfg.num_speculative_tokens);
    int64_t have = pl_kv_cache_capacity(e->kv);
    if (need > have)
        return pl_fail(PL_ERR_INVALID_ARG, "the request may need %lld KV blocks (%d prompt "
                       "tokens, %d max tokens, %lld sequences) but the cache has %lld",
                       (long long)need, g->n_prompt, g->params.max_tokens, (long long)seqs,
                       (long long)have);
    return PL_OK;
}

/* Generation requests need a generation model, embedding requests a model with a pooling type.
 * An embedding request keeps only its tokenization fields (the rest is reset to defaults). */
static pl_status check_kind(const pl_engine *e, pl_request_params *p) {
    const pl_model_hparams *hp = &e->model->hp;
    if (p->embedding && pl_engine_pooling(e) == PL_POOL_NONE)
        return pl_fail(PL_ERR_INVALID_ARG, "this model (architecture %s) cannot compute "
                       "embeddings: it has no pooling type (an embedding model, e.g. bert, has "
                       "'%s.pooling_type'; a generation model needs --pooling)", hp->arch_name,
                       hp->arch_name);
    if (!p->embedding && hp->pooling != PL_POOL_NONE)
        return pl_fail(PL_ERR_INVALID_ARG, "this model (architecture %s) is an embedding model: "
                       "it computes embeddings only and cannot generate text", hp->arch_name);
    if (p->embedding) {
        int add_special = p->add_special, parse_special = p->parse_special;
        pl_request_params_default(p);
        p->max_tokens = 1; /* nothing is generated; the scheduler reserves for prompt + 1 */
        p->embedding = 1;
        p->add_special = add_special;
        p->parse_special = parse_special;
    }
    return PL_OK;
}

/* An embedding input runs whole in one step: it must fit the model and the step's budget (and a
 * generation model's KV pool, where it holds blocks for that step). */
static pl_status check_embed_fits(const pl_engine *e, const pl_seq_group *g) {
    const int32_t bs = pl_kv_cache_block_size(e->kv);
    int64_t have = pl_kv_cache_capacity(e->kv);
    if (e->model->hp.pooling == PL_POOL_NONE && (g->n_prompt + 1 + bs - 1) / bs > have)
        return pl_fail(PL_ERR_INVALID_ARG, "the input needs %d KV blocks for its step but the "
                       "cache has %lld", (g->n_prompt + 1 + bs - 1) / bs, (long long)have);
    if (g->n_prompt > e->max_model_len)
        return pl_fail(PL_ERR_INVALID_ARG, "this model's maximum context length is %d tokens, "
                       "but the input has %d", e->max_model_len, g->n_prompt);
    if (g->n_prompt > e->cfg.max_num_batched_tokens)
        return pl_fail(PL_ERR_INVALID_ARG, "the input has %d tokens, more than one step computes "
                       "(max-num-batched-tokens %d); an embedding input runs in one step",
                       g->n_prompt, e->cfg.max_num_batched_tokens);
    return PL_OK;
}

pl_status pl_engine_add_request(pl_engine *e, const char *text, const int32_t *ids, size_t n_ids,
                                const pl_request_params *params, uint64_t *id) {
    pl_seq_group *g = calloc(1, sizeof *g);
    if (!g) return pl_fail(PL_ERR_NOMEM, "out of memory");
    g->params = *params;
    pl_status st = check_kind(e, &g->params);
    g->embed = !params->embedding ? 0
               : e->model->hp.pooling != PL_POOL_NONE ? PL_EMBED_LOCAL : PL_EMBED_PAGED;
    if (st == PL_OK) st = check_params(e, &g->params);
    if (st != PL_OK) g->params.n_stop = 0; /* nothing copied yet: pl_group_destroy frees none */
    if (st == PL_OK) st = pl_group_copy_stops(g);
    if (st == PL_OK && g->params.constraint != PL_CONSTRAINT_NONE) {
        /* Compiled here, in the caller's thread, so that a bad one is an error with a message;
         * requests with the same constraint share the compiled automaton and its mask cache. */
        g->cons_reg = e->decoder.cons;
        st = pl_cons_acquire(g->cons_reg, g->params.constraint, g->params.constraint_text,
                             g->params.constraint_choices, g->params.n_constraint_choices,
                             &g->cons);
    }
    g->params.constraint_text = NULL; /* the caller's: not kept */
    g->params.constraint_choices = NULL;
    if (st == PL_OK && text) {
        size_t n = 0;
        st = pl_tokenize(e->model->tok, text, strlen(text), g->params.add_special,
                         g->params.parse_special, &g->prompt, &n);
        if (st == PL_OK && n > (size_t)INT32_MAX) st = pl_fail(PL_ERR_INVALID_ARG, "prompt too long");
        g->n_prompt = (int32_t)n;
    } else if (st == PL_OK) {
        if (n_ids > (size_t)e->max_model_len) {
            st = pl_fail(PL_ERR_INVALID_ARG, "this model's maximum context length is %d tokens, "
                         "but the prompt has %zu", e->max_model_len, n_ids);
        } else if ((g->prompt = malloc((n_ids ? n_ids : 1) * sizeof(int32_t))) == NULL) {
            st = pl_fail(PL_ERR_NOMEM, "out of memory");
        } else {
            g->n_prompt = (int32_t)n_ids;
            for (size_t i = 0; i < n_ids && st == PL_OK; i++) {
                if (ids[i] < 0 || ids[i] >= e->model->hp.n_vocab)
                    st = pl_fail(PL_ERR_INVALID_ARG, "token id %d at position %zu is out of range "
                                 "[0, %d)", ids[i], i, e->model->hp.n_vocab);
                g->prompt[i] = ids[i];
            }
        }
    }
    if (st == PL_OK && g->n_prompt == 0) st = pl_fail(PL_ERR_INVALID_ARG, "the prompt is empty");
    if (st == PL_OK) st = g->embed ? check_embed_fits(e, g) : check_fits(e, g);
    pl_seq *q = NULL;
    if (st == PL_OK && (q = pl_seq_create(g, 0, g->prompt, g->n_prompt)) != NULL &&
        pl_group_add_seq(g, q)) {
        pl_seq_destroy(q);
        q = NULL;
    }
    if (st == PL_OK && !q) st = pl_fail(PL_ERR_NOMEM, "out of memory");
    if (st == PL_OK && g->cons) st = pl_cons_start(g->cons, &q->cstate);
    if (st != PL_OK) {
        pl_group_destroy(g);
        return st;
    }
    g->n_live = 1;
    g->arrival = pl_clock_now();
    pl_detok_init(&q->detok, e->model->tok, g->params.skip_special_tokens, 0);
    q->detok.no_clean = g->cons != NULL;

    /* The waiting queue belongs to the engine thread: bound by its count at the last step. */
    pthread_mutex_lock(&e->stats_mu);
    int32_t waiting = e->snapshot.waiting;
    pthread_mutex_unlock(&e->stats_mu);
    pthread_mutex_lock(&e->inbox_mu);
    if (e->cfg.max_waiting > 0 && e->inbox_n + waiting >= e->cfg.max_waiting) {
        pthread_mutex_unlock(&e->inbox_mu);
        pl_group_destroy(g);
        return pl_fail(PL_ERR_CAPACITY, "the queue is full (%d requests waiting)",
                       e->cfg.max_waiting);
    }
    g->id = e->next_id++;
    uint64_t fallback_seed = g->id * 0x2545f4914f6cdd1dULL ^ (uint64_t)(g->arrival * 1e9);
    q->index = 0;
    pl_rng_seed(&q->rng, g->params.has_seed ? g->params.seed : fallback_seed);
    g->chan = pl_out_channel_create(g->id, g->params.n);
    if (!g->chan) {
        pthread_mutex_unlock(&e->inbox_mu);
        pl_group_destroy(g);
        return pl_fail(PL_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_lock(&e->reg_mu);
    int bad = pl_idmap_put(&e->channels, g->id, g->chan);
    pthread_mutex_unlock(&e->reg_mu);
    if (bad) {
        pl_out_channel_unref(g->chan); /* the client's reference */
        pthread_mutex_unlock(&e->inbox_mu);
        pl_group_destroy(g);
        return pl_fail(PL_ERR_NOMEM, "out of memory");
    }
    g->next = NULL;
    if (e->inbox_tail) e->inbox_tail->next = g;
    else e->inbox_head = g;
    e->inbox_tail = g;
    e->inbox_n++;
    *id = g->id;
    pthread_cond_broadcast(&e->inbox_cv);
    pthread_mutex_unlock(&e->inbox_mu);
    return PL_OK;
}

/* Queue an abort of request id, whose channel c the caller holds a reference to. Out of memory
 * loses nothing: the channel is marked and the engine's next step scans for marked channels. */
static void push_abort(pl_engine *e, uint64_t id, pl_out_channel *c) {
    pthread_mutex_lock(&e->inbox_mu);
    if (pl_array_reserve(&e->aborts, &e->cap_aborts, e->n_aborts + 1, sizeof *e->aborts)) {
        pl_out_want_abort(c);
        e->abort_scan = 1;
    } else {
        e->aborts[e->n_aborts++] = id;
    }
    pthread_cond_broadcast(&e->inbox_cv);
    pthread_mutex_unlock(&e->inbox_mu);
}

void pl_engine_abort(pl_engine *e, uint64_t id) {
    pthread_mutex_lock(&e->reg_mu);
    pl_out_channel *c = pl_idmap_get(&e->channels, id);
    if (c) atomic_fetch_add(&c->refs, 1); /* kept alive while we queue the abort */
    pthread_mutex_unlock(&e->reg_mu);
    if (!c) return; /* finished and consumed, or never existed */
    push_abort(e, id, c);
    pl_out_channel_unref(c);
}

void pl_engine_release(pl_engine *e, uint64_t id) {
    pthread_mutex_lock(&e->reg_mu);
    pl_out_channel *c = pl_idmap_del(&e->channels, id);
    pthread_mutex_unlock(&e->reg_mu);
    if (!c) return;
    pl_out_release(c);
    push_abort(e, id, c);
    pl_out_channel_unref(c); /* the client's reference */
}

/* The aborts that found no room in `aborts`: finish every group whose channel is marked. */
static void scan_aborts(pl_engine *e) {
    for (int again = 1; again;) {
        again = 0;
        for (size_t i = 0; i < e->groups.cap && !again; i++) {
            pl_seq_group *g = e->groups.keys[i] ? e->groups.vals[i] : NULL;
            if (g && pl_out_abort_wanted(g->chan)) {
                pl_group_finish(e, g, PL_FINISH_ABORT, NULL); /* changes the map: start over */
                again = 1;
            }
        }
    }
}

/* Move new requests into the scheduler and apply aborts (engine thread). */
static void drain_inbox(pl_engine *e) {
    pthread_mutex_lock(&e->inbox_mu);
    pl_seq_group *g = e->inbox_head;
    e->inbox_head = e->inbox_tail = NULL;
    /* Until the next snapshot, the groups taken count as waiting for readers of the stats
     * (pl_engine_get_stats, which holds inbox_mu too, finds them in one of the two places). */
    pthread_mutex_lock(&e->stats_mu);
    e->taken += e->inbox_n;
    pthread_mutex_unlock(&e->stats_mu);
    e->inbox_n = 0;
    /* Aborts are taken 64 at a time (no allocation); the rest wait for the next step. */
    uint64_t ids[64];
    size_t n_ab = e->n_aborts < 64 ? e->n_aborts : 64;
    if (n_ab) {
        memcpy(ids, e->aborts, n_ab * sizeof *ids);
        memmove(e->aborts, e->aborts + n_ab, (e->n_aborts - n_ab) * sizeof *ids);
        e->n_aborts -= n_ab;
    }
    int scan = e->abort_scan;
    e->abort_scan = 0;
    pthread_mutex_unlock(&e->inbox_mu);
    while (g) {
        pl_seq_group *next = g->next;
        g->next = NULL;
        if (pl_idmap_put(&e->groups, g->id, g)) {
            pl_group_finish(e, g, PL_FINISH_ERROR, "out of memory");
        } else {
            pl_scheduler_add(&e->sched, g);
        }
        g = next;
    }
    for (size_t i = 0; i < n_ab; i++) {
        pl_seq_group *ag = pl_idmap_get(&e->groups, ids[i]);
        if (ag) pl_group_finish(e, ag, PL_FINISH_ABORT, NULL);
    }
    if (scan) scan_aborts(e);
}

static pl_status step(pl_engine *e);

static double thread_cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

pl_status pl_engine_step(pl_engine *e) {
    double t0 = pl_clock_now(), c0 = thread_cpu_now();
    uint64_t steps0 = e->steps;
    pl_status st = step(e);
    pl_kv_view_after_step(&e->kv_view, e->kv, &e->sched, e->steps);
    if (e->steps != steps0) {
        e->step_seconds += pl_clock_now() - t0;
        e->step_cpu_seconds += thread_cpu_now() - c0;
    }
    take_snapshot(e);
    if (e->step_delay_ms && e->steps != steps0)
        nanosleep(&(struct timespec){e->step_delay_ms / 1000, (e->step_delay_ms % 1000) * 1000000L},
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
    pl_status st = e->steps + 1 == e->fail_step
                       ? pl_fail(PL_ERR_INTERNAL, "injected failure of step %llu (PAGELLM_FAIL_STEP)",
                                 (unsigned long long)e->fail_step)
                       : PL_OK;
    if (st == PL_OK && e->spec.ready) st = pl_spec_draft_run(&e->spec, &e->sched_out, e->kv);
    if (st == PL_OK) st = pl_kv_cache_prepare_step(e->kv); /* vAttention: pages the step lacks */
    if (st == PL_OK) st = pl_runner_execute(&e->runner, s);
    if (st == PL_OK)
        st = pl_decoder_update_from_output(&e->decoder, s, e->runner.logits, e->runner.item_row);
    e->steps++;
    if (st != PL_OK) {
        /* An internal failure: fail the step's requests rather than loop on them. */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", pl_last_error());
        PL_ERROR("step failed: %s", msg);
        for (int32_t i = 0; i < s->n_items; i++) {
            pl_seq_group *g = pl_idmap_get(&e->groups, s->items[i].seq->group->id);
            if (g == s->items[i].seq->group) pl_group_finish(e, g, PL_FINISH_ERROR, msg);
        }
        return pl_fail(st, "%s", msg);
    }
    return PL_OK;
}

int pl_engine_has_work(pl_engine *e) {
    pthread_mutex_lock(&e->inbox_mu);
    int w = e->inbox_head != NULL || e->n_aborts > 0 || e->abort_scan;
    pthread_mutex_unlock(&e->inbox_mu);
    return w || pl_scheduler_has_work(&e->sched);
}

pl_status pl_engine_run(pl_engine *e) {
    while (pl_engine_has_work(e)) PL_TRY(pl_engine_step(e));
    return PL_OK;
}

void pl_engine_wait_for_work(pl_engine *e, int timeout_ms) {
    if (pl_scheduler_has_work(&e->sched)) return;
    pl_kv_view_idle(&e->kv_view, e->kv, &e->sched, e->steps, 0);
    pthread_mutex_lock(&e->inbox_mu);
    if (timeout_ms < 0) {
        while (!e->inbox_head && !e->n_aborts && !e->kv_poke && !e->abort_scan)
            pthread_cond_wait(&e->inbox_cv, &e->inbox_mu);
    } else {
        struct timespec dl = pl_clock_deadline(timeout_ms);
        while (!e->inbox_head && !e->n_aborts && !e->kv_poke && !e->abort_scan)
            if (pthread_cond_timedwait(&e->inbox_cv, &e->inbox_mu, &dl) == ETIMEDOUT) break;
    }
    int poke = e->kv_poke;
    e->kv_poke = 0;
    pthread_mutex_unlock(&e->inbox_mu);
    /* Idle and someone looks at the KV cache: publish now rather than at the next step. */
    if (poke) pl_kv_view_idle(&e->kv_view, e->kv, &e->sched, e->steps, 0);
}

pl_status pl_engine_kv_snapshot(pl_engine *e, int with_tables, int timeout_ms,
                                pl_kv_snapshot *out) {
    uint64_t seen;
    int need = pl_kv_view_want(&e->kv_view, with_tables, &seen);
    if (need) { /* wake an idle engine thread (a busy one publishes after its step) */
        pthread_mutex_lock(&e->inbox_mu);
        e->kv_poke = 1;
        pthread_cond_broadcast(&e->inbox_cv);
        pthread_mutex_unlock(&e->inbox_mu);
    }
    return pl_kv_view_read(&e->kv_view, need, seen, timeout_ms, out);
}

pl_status pl_engine_poll(pl_engine *e, uint64_t id, int timeout_ms, pl_request_output **out) {
    *out = NULL;
    pthread_mutex_lock(&e->reg_mu);
    pl_out_channel *c = pl_idmap_get(&e->channels, id);
    pthread_mutex_unlock(&e->reg_mu);
    if (!c) return pl_fail(PL_ERR_NOT_FOUND, "no request %llu", (unsigned long long)id);
    PL_TRY(pl_out_poll(c, timeout_ms, out));
    if ((*out)->finished) {
        pthread_mutex_lock(&e->reg_mu);
        pl_idmap_del(&e->channels, id);
        pthread_mutex_unlock(&e->reg_mu);
        pl_out_channel_unref(c); /* the client's reference */
    }
    return PL_OK;
}

/* Engine thread: refresh the snapshot other threads read. */
static void take_snapshot(pl_engine *e) {
    pl_engine_stats s;
    memset(&s, 0, sizeof s);
    s.running = e->sched.running.n;
    s.waiting = e->sched.waiting.n;
    s.swapped = e->sched.swapped.n;
    s.preemptions = e->sched.preemptions;
    s.swaps_out = e->sched.swaps_out;
    s.prompt_tokens = e->decoder.prompt_tokens;
    s.generation_tokens = e->decoder.generation_tokens;
    s.constrained_tokens = e->decoder.constrained_tokens;
    s.constrain_seconds = e->decoder.constrain_seconds;
    pl_cons_stats cs;
    pl_cons_get_stats(e->decoder.cons, &cs);
    s.constrain_mask_misses = cs.mask_misses;
    s.requests_finished = e->decoder.requests_finished;
    s.steps = e->steps;
    s.spec_drafts = e->decoder.spec_drafts;
    s.spec_draft_tokens = e->decoder.spec_draft_tokens;
    s.spec_accepted_tokens = e->decoder.spec_accepted_tokens;
    s.spec_off_steps = e->sched.spec_off_steps;
    s.step_seconds = e->step_seconds;
    s.step_cpu_seconds = e->step_cpu_seconds;
    s.kv_pictures = e->kv_view.version;
    s.kv_picture_seconds = e->kv_view.publish_seconds;
    pl_kv_cache_stats(e->kv, &s);
    pl_engine_kv_samples ks;
    pl_kv_cache_samples(e->kv, &ks);
    pthread_mutex_lock(&e->stats_mu);
    e->snapshot = s;
    e->snapshot_samples = ks;
    e->taken = 0;
    pthread_mutex_unlock(&e->stats_mu);
}

void pl_engine_get_kv_samples(pl_engine *e, pl_engine_kv_samples *out) {
    pthread_mutex_lock(&e->stats_mu);
    *out = e->snapshot_samples;
    pthread_mutex_unlock(&e->stats_mu);
}

/* Any thread: the snapshot of the last step, plus requests still in the inbox. Both read under
 * inbox_mu (lock order inbox_mu, then stats_mu, as in drain_inbox), so a request moving from
 * the inbox to the scheduler is counted once, never zero times. */
void pl_engine_get_stats(pl_engine *e, pl_engine_stats *s) {
    pthread_mutex_lock(&e->inbox_mu);
    pthread_mutex_lock(&e->stats_mu);
    *s = e->snapshot;
    s->waiting += e->taken;
    pthread_mutex_unlock(&e->stats_mu);
    s->waiting += e->inbox_n;
    pthread_mutex_unlock(&e->inbox_mu);
}

const struct pl_tokenizer *pl_engine_tokenizer(const pl_engine *e) { return e->model->tok; }
int32_t pl_engine_max_model_len(const pl_engine *e) { return e->max_model_len; }
int32_t pl_engine_n_vocab(const pl_engine *e) { return e->model->hp.n_vocab; }
int32_t pl_engine_pooling(const pl_engine *e) {
    return e->cfg.pooling ? e->cfg.pooling : (int32_t)e->model->hp.pooling;
}
int32_t pl_engine_n_embd(const pl_engine *e) { return e->model->hp.dim; }
int pl_engine_embedding_only(const pl_engine *e) { return e->model->hp.pooling != PL_POOL_NONE; }
const pl_engine_config *pl_engine_get_config(const pl_engine *e) { return &e->cfg; }
