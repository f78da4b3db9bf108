/* server/metrics — Prometheus text exposition with vLLM's metric names, labels (model_name)
 * and histogram buckets (vllm/v1/metrics/loggers.py).
 *
 * Gauges and counters come from pl_engine_get_stats at scrape time. The histograms are the
 * server's: each finished request the server polled to the end adds its time to first token,
 * its end-to-end latency, its mean time per output token once per token after the first (so the
 * TPOT count equals vLLM's, which observes every inter-token gap), its queue, prefill, decode
 * and inference times, its prompt and generation token counts and its n and max_tokens. The
 * engine thread adds each step's token count (iteration_tokens_total). A request whose client
 * went away counts as finished_reason "abort" (and in the n / max_tokens / prompt histograms).
 */
#include "base/buf.h"
#include "server/server.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double TTFT_BOUNDS[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                     0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
static const double TPOT_BOUNDS[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
                                     0.4,  0.5,   0.75, 1.0,   2.5, 5.0,  7.5, 10.0};
/* vLLM's request_latency_buckets: e2e, queue, prefill, decode and inference times. */
static const double E2E_BOUNDS[] = {0.3,  0.5,  0.8,   1.0,   1.5,   2.0,    2.5,
                                    5.0,  10.0, 15.0,  20.0,  30.0,  40.0,   50.0,
                                    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
static const double ITER_BOUNDS[] = {1,   8,    16,   32,   64,   128,  256,
                                     512, 1024, 2048, 4096, 8192, 16384};
static const double N_BOUNDS[] = {1, 2, 5, 10, 20};

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static void hist_init(pl_server_hist *h, const double *b, int n) {
    memset(h, 0, sizeof *h);
    h->bounds = b;
    h->n_bounds = n;
}

void pl_server_metrics_init(pl_server_metrics *m, int32_t max_model_len) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    hist_init(&m->ttft, TTFT_BOUNDS, N_OF(TTFT_BOUNDS));
    hist_init(&m->tpot, TPOT_BOUNDS, N_OF(TPOT_BOUNDS));
    hist_init(&m->e2e, E2E_BOUNDS, N_OF(E2E_BOUNDS));
    hist_init(&m->queue, E2E_BOUNDS, N_OF(E2E_BOUNDS));
    hist_init(&m->prefill, E2E_BOUNDS, N_OF(E2E_BOUNDS));
    hist_init(&m->decode, E2E_BOUNDS, N_OF(E2E_BOUNDS));
    hist_init(&m->inference, E2E_BOUNDS, N_OF(E2E_BOUNDS));
    hist_init(&m->iteration_tokens, ITER_BOUNDS, N_OF(ITER_BOUNDS));
    hist_init(&m->params_n, N_BOUNDS, N_OF(N_BOUNDS));
    /* vLLM's build_1_2_5_buckets(max_model_len): 1, 2, 5, 10, 20, 50, ... up to the limit. */
    int n = 0;
    for (double mant = 1; n < PL_SERVER_HIST_MAX_BUCKETS - 1; mant *= 10) {
        static const double F[] = {1, 2, 5};
        int stop = 0;
        for (int k = 0; k < 3 && n < PL_SERVER_HIST_MAX_BUCKETS - 1; k++) {
            if (mant * F[k] > (max_model_len > 0 ? max_model_len : 1)) {
                stop = 1;
                break;
            }
            m->len_bounds[n++] = mant * F[k];
        }
        if (stop) break;
    }
    hist_init(&m->prompt_tokens, m->len_bounds, n);
    hist_init(&m->generation_tokens, m->len_bounds, n);
    hist_init(&m->params_max_tokens, m->len_bounds, n);
}

void pl_server_metrics_destroy(pl_server_metrics *m) { pthread_mutex_destroy(&m->mu); }

void pl_server_hist_observe(pl_server_hist *h, double v, uint64_t times) {
    if (!isfinite(v) || times == 0) return;
    if (v < 0) v = 0;
    int b = 0;
    while (b < h->n_bounds && v > h->bounds[b]) b++;
    h->counts[b] += times;
    h->count += times;
    h->sum += v * (double)times;
}

/* b - a when both times are known and in order, else NaN (not observed). */
static double span(double a, double b) { return a > 0 && b >= a ? b - a : NAN; }

void pl_server_metrics_observe(pl_server_metrics *m, const pl_request_output *o,
                               const pl_request_params *p, pl_finish_reason reason) {
    int32_t n_output_tokens = o->n_output_tokens;
    pthread_mutex_lock(&m->mu);
    if ((int)reason >= 0 && (int)reason < N_OF(m->finished)) m->finished[reason]++;
    pl_server_hist_observe(&m->prompt_tokens, o->n_prompt_tokens, 1);
    pl_server_hist_observe(&m->generation_tokens, n_output_tokens, 1);
    if (p) {
        pl_server_hist_observe(&m->params_n, p->n, 1);
        pl_server_hist_observe(&m->params_max_tokens, p->max_tokens, 1);
    }
    pl_server_hist_observe(&m->queue, span(o->arrival_time, o->first_scheduled_time), 1);
    pl_server_hist_observe(&m->prefill, span(o->first_scheduled_time, o->first_token_time), 1);
    pl_server_hist_observe(&m->decode, span(o->first_token_time, o->finish_time), 1);
    pl_server_hist_observe(&m->inference, span(o->first_scheduled_time, o->finish_time), 1);
    if (o->arrival_time > 0 && o->finish_time >= o->arrival_time)
        pl_server_hist_observe(&m->e2e, o->finish_time - o->arrival_time, 1);
    if (o->arrival_time > 0 && o->first_token_time >= o->arrival_time) {
        pl_server_hist_observe(&m->ttft, o->first_token_time - o->arrival_time, 1);
        if (n_output_tokens > 1 && o->finish_time >= o->first_token_time)
            pl_server_hist_observe(&m->tpot,
                                   (o->finish_time - o->first_token_time) / (n_output_tokens - 1),
                                   (uint64_t)(n_output_tokens - 1));
    }
    pthread_mutex_unlock(&m->mu);
}

void pl_server_metrics_abort(pl_server_metrics *m, const pl_request_params *p,
                             int32_t n_prompt_tokens) {
    pthread_mutex_lock(&m->mu);
    m->finished[PL_FINISH_ABORT]++;
    pl_server_hist_observe(&m->prompt_tokens, n_prompt_tokens, 1);
    if (p) {
        pl_server_hist_observe(&m->params_n, p->n, 1);
        pl_server_hist_observe(&m->params_max_tokens, p->max_tokens, 1);
    }
    pthread_mutex_unlock(&m->mu);
}

void pl_server_metrics_iteration(pl_server_metrics *m, uint64_t tokens) {
    if (!tokens) return;
    pthread_mutex_lock(&m->mu);
    pl_server_hist_observe(&m->iteration_tokens, (double)tokens, 1);
    pthread_mutex_unlock(&m->mu);
}

/* The cache_dtype label: torch names for the float types, as vLLM prints them; GGML names else. */
static const char *cache_dtype_label(const pl_engine_config *c) {
    pl_kv_cache_dtype t = c->kv_cache_f32 ? PL_KV_CACHE_F32 : c->kv_cache_dtype;
    switch (t) {
    case PL_KV_CACHE_F32: return "float32";
    case PL_KV_CACHE_BF16: return "bfloat16";
    case PL_KV_CACHE_F16: return "float16";
    default: return pl_kv_cache_dtype_name(t) ? pl_kv_cache_dtype_name(t) : "float16";
    }
}

static void metric(pl_strbuf *b, const char *name, const char *type, const char *help,
                   const char *labels, double v) {
    pl_strbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s{%s} %.17g\n", name, help, name, type, name,
              labels, v);
}

static void hist(pl_strbuf *b, const char *name, const char *help, const char *labels,
                 const pl_server_hist *h) {
    pl_strbuf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < h->n_bounds; i++) {
        cum += h->counts[i];
        pl_strbuf_printf(b, "%s_bucket{%s,le=\"%g\"} %llu\n", name, labels, h->bounds[i],
                  (unsigned long long)cum);
    }
    pl_strbuf_printf(b, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, labels, (unsigned long long)h->count);
    pl_strbuf_printf(b, "%s_sum{%s} %.17g\n%s_count{%s} %llu\n", name, labels, h->sum, name, labels,
              (unsigned long long)h->count);
}

char *pl_server_metrics_render(pl_server_metrics *m, const pl_engine_stats *s,
                               const pl_engine_config *c, const char *model_name) {
    pl_strbuf b = {0};
    char labels[512];
    /* Label values escape backslash, quote and newline. */
    size_t j = (size_t)snprintf(labels, sizeof labels, "model_name=\"");
    for (const char *p = model_name; *p && j + 4 < sizeof labels; p++) {
        if (*p == '\\' || *p == '"') labels[j++] = '\\';
        if (*p == '\n') {
            labels[j++] = '\\';
            labels[j++] = 'n';
            continue;
        }
        labels[j++] = *p;
    }
    snprintf(labels + j, sizeof labels - j, "\"");

    metric(&b, "vllm:num_requests_running", "gauge",
           "Number of requests in model execution batches.", labels, s->running);
    metric(&b, "vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
           labels, s->waiting);
    metric(&b, "vllm:num_requests_swapped", "gauge", "Number of requests swapped to CPU.", labels,
           s->swapped);
    metric(&b, "vllm:gpu_cache_usage_perc", "gauge",
           "KV-cache usage. 1 means 100 percent usage (the fraction of KV blocks in use).", labels,
           s->kv_usage);
    metric(&b, "vllm:kv_cache_usage_perc", "gauge",
           "KV-cache usage. 1 means 100 percent usage (the fraction of KV blocks in use).", labels,
           s->kv_usage);
    metric(&b, "vllm:cpu_cache_usage_perc", "gauge",
           "Swap-pool usage (vLLM v0's CPU cache). 1 means 100 percent usage.", labels,
           s->swap_total ? (double)s->swap_used / s->swap_total : 0.0);
    metric(&b, "pagellm_kv_swap_blocks_total", "gauge", "KV blocks in the swap pool.", labels,
           s->swap_total);
    metric(&b, "pagellm_kv_swap_blocks_used", "gauge", "Swap-pool blocks holding swapped-out KV.",
           labels, s->swap_used);
    metric(&b, "pagellm_swap_out_total", "counter",
           "Requests preempted by swapping their KV out to the swap pool.", labels,
           (double)s->swaps_out);
    metric(&b, "pagellm_kv_cache_usage_perc", "gauge",
           "KV-cache usage. 1 means 100 percent usage (the fraction of KV blocks in use).", labels,
           s->kv_usage);
    metric(&b, "pagellm_kv_blocks_total", "gauge", "KV blocks in the pool.", labels,
           s->blocks_total);
    metric(&b, "pagellm_kv_blocks_used", "gauge", "KV blocks referenced by sequences.", labels,
           s->blocks_used);
    metric(&b, "pagellm_kv_blocks_cached", "gauge",
           "Free KV blocks still holding prefix-cache contents.", labels, s->blocks_cached);
    metric(&b, "pagellm_kv_cache_waste_perc", "gauge",
           "1 - tokens stored / capacity of the used blocks.", labels, s->waste);
    metric(&b, "vllm:prefix_cache_queries_total", "counter",
           "Prefix cache queries, in terms of number of queried tokens.", labels,
           (double)s->prefix_queries);
    metric(&b, "vllm:prefix_cache_hits_total", "counter",
           "Prefix cache hits, in terms of number of cached tokens.", labels,
           (double)s->prefix_hits);
    metric(&b, "vllm:num_preemptions_total", "counter", "Cumulative number of preemptions.",
           labels, (double)s->preemptions);
    metric(&b, "pagellm_kv_window_freed_blocks_total", "counter",
           "KV blocks returned to the pool because their tokens left the sliding window.",
           labels, (double)s->window_freed_blocks);
    metric(&b, "vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
           labels, (double)s->prompt_tokens);
    metric(&b, "vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
           labels, (double)s->generation_tokens);
    metric(&b, "vllm:spec_decode_num_drafts_total", "counter",
           "Number of spec decoding drafts (sequence-steps that verified proposals).", labels,
           (double)s->spec_drafts);
    metric(&b, "vllm:spec_decode_num_draft_tokens_total", "counter",
           "Number of draft tokens.", labels, (double)s->spec_draft_tokens);
    metric(&b, "vllm:spec_decode_num_accepted_tokens_total", "counter",
           "Number of accepted tokens.", labels, (double)s->spec_accepted_tokens);
    metric(&b, "pagellm_engine_steps_total", "counter", "Engine steps run.", labels,
           (double)s->steps);
    metric(&b, "pagellm_engine_step_seconds_total", "counter",
           "Wall time of the engine steps that ran the model (KV pictures included).", labels,
           s->step_seconds);
    metric(&b, "pagellm_engine_step_cpu_seconds_total", "counter",
           "The engine thread's CPU time in those steps (worker threads not counted).", labels,
           s->step_cpu_seconds);
    metric(&b, "pagellm_kv_pictures_total", "counter",
           "KV pictures the engine thread published for GET /v1/kv/blocks.", labels,
           (double)s->kv_pictures);
    metric(&b, "pagellm_kv_picture_seconds_total", "counter",
           "Engine-thread time spent publishing KV pictures.", labels, s->kv_picture_seconds);
    /* kv-layout vattention (0 in the other layouts): where physical pages were mapped. */
    metric(&b, "pagellm_vattn_pages_mapped_sync_total", "counter",
           "vattention: pages mapped on the step's critical path.", labels,
           (double)s->vattn_pages_mapped_sync);
    metric(&b, "pagellm_vattn_pages_mapped_background_total", "counter",
           "vattention: pages mapped by the background mapper thread.", labels,
           (double)s->vattn_pages_mapped_bg);
    metric(&b, "pagellm_vattn_pages_unmapped_total", "counter",
           "vattention: pages unmapped (given back to the system).", labels,
           (double)s->vattn_pages_unmapped);
    metric(&b, "pagellm_vattn_pages_committed", "gauge",
           "vattention: pages mapped now (needed by requests + cached for reuse).", labels,
           (double)s->vattn_pages_committed);
    metric(&b, "pagellm_vattn_slots_acquired_total", "counter",
           "vattention: requests given a slot.", labels, (double)s->vattn_slots_acquired);
    metric(&b, "pagellm_vattn_slots_reused_total", "counter",
           "vattention: of those, slots that still had pages mapped.", labels,
           (double)s->vattn_slots_reused);
    metric(&b, "pagellm_vattn_map_seconds_total", "counter",
           "vattention: engine-thread time mapping and unmapping pages inside steps.", labels,
           s->vattn_map_seconds);

    pthread_mutex_lock(&m->mu);
    pl_strbuf_printf(&b, "# HELP vllm:request_success_total Count of finished requests by reason.\n"
                  "# TYPE vllm:request_success_total counter\n");
    for (int r = PL_FINISH_STOP; r <= PL_FINISH_ERROR; r++)
        pl_strbuf_printf(&b, "vllm:request_success_total{%s,finished_reason=\"%s\"} %llu\n", labels,
                  pl_finish_reason_name((pl_finish_reason)r),
                  (unsigned long long)m->finished[r]);
    metric(&b, "pagellm_http_requests_total", "counter", "HTTP requests received.", labels,
           (double)m->http_requests);
    metric(&b, "pagellm_lora_adapters", "gauge", "LoRA adapters loaded.", labels,
           (double)s->lora_adapters);
    metric(&b, "pagellm_lora_requests_total", "counter", "Requests admitted under a LoRA adapter.",
           labels, (double)s->lora_requests);
    hist(&b, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
         labels, &m->ttft);
    hist(&b, "vllm:time_per_output_token_seconds",
         "Histogram of time per output token in seconds.", labels, &m->tpot);
    hist(&b, "vllm:e2e_request_latency_seconds",
         "Histogram of end to end request latency in seconds.", labels, &m->e2e);
    hist(&b, "vllm:request_queue_time_seconds",
         "Histogram of time spent in WAITING phase for request.", labels, &m->queue);
    hist(&b, "vllm:request_prefill_time_seconds",
         "Histogram of time spent in PREFILL phase for request.", labels, &m->prefill);
    hist(&b, "vllm:request_decode_time_seconds",
         "Histogram of time spent in DECODE phase for request.", labels, &m->decode);
    hist(&b, "vllm:request_inference_time_seconds",
         "Histogram of time spent in RUNNING phase for request.", labels, &m->inference);
    hist(&b, "vllm:request_prompt_tokens", "Number of prefill tokens processed.", labels,
         &m->prompt_tokens);
    hist(&b, "vllm:request_generation_tokens", "Number of generation tokens processed.", labels,
         &m->generation_tokens);
    hist(&b, "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
         labels, &m->iteration_tokens);
    hist(&b, "vllm:request_params_n", "Histogram of the n request parameter.", labels,
         &m->params_n);
    hist(&b, "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.",
         labels, &m->params_max_tokens);
    pthread_mutex_unlock(&m->mu);
    if (c) /* an info metric: a gauge fixed at 1 whose labels are the cache configuration */
        pl_strbuf_printf(&b, "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
                      "# TYPE vllm:cache_config_info gauge\n"
                      "vllm:cache_config_info{block_size=\"%d\",cache_dtype=\"%s\","
                      "enable_prefix_caching=\"%s\",gpu_memory_utilization=\"%g\","
                      "kv_cache_memory_bytes=\"%llu\",num_cpu_blocks=\"%d\","
                      "num_gpu_blocks=\"%d\",swap_space_bytes=\"%llu\",engine=\"0\"} 1\n",
                  c->block_size, cache_dtype_label(c),
                  c->enable_prefix_caching ? "True" : "False", c->kv_cache_memory_fraction,
                  (unsigned long long)c->kv_cache_memory, s->swap_total, s->blocks_total,
                  (unsigned long long)c->swap_space);
    return pl_strbuf_take(&b);
}
