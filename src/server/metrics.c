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
#include <stddef.h>
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

/* The gauges and counters read from pl_engine_stats at scrape time, in the order written. */
typedef enum { STAT_I32, STAT_I64, STAT_U64, STAT_F64, STAT_SWAP_USAGE } stat_kind;
typedef struct {
    const char *name, *type, *help;
    size_t offset; /* of the field in pl_engine_stats */
    stat_kind kind;
} stat_metric;

#define STAT_KIND(field)                                                                      \
    _Generic(((pl_engine_stats *)0)->field, int32_t: STAT_I32, int64_t: STAT_I64,               \
             uint64_t: STAT_U64, double: STAT_F64)
#define STAT(name, type, field, help) \
    {name, type, help, offsetof(pl_engine_stats, field), STAT_KIND(field)}
#define GAUGE(name, field, help) STAT(name, "gauge", field, help)
#define COUNTER(name, field, help) STAT(name, "counter", field, help)

static const stat_metric STAT_METRICS[] = {
    GAUGE("vllm:num_requests_running", running, "Number of requests in model execution batches."),
    GAUGE("vllm:num_requests_waiting", waiting, "Number of requests waiting to be processed."),
    GAUGE("vllm:num_requests_swapped", swapped, "Number of requests swapped to CPU."),
    GAUGE("vllm:gpu_cache_usage_perc", kv_usage,
        "KV-cache usage. 1 means 100 percent usage (the fraction of KV blocks in use)."),
    GAUGE("vllm:kv_cache_usage_perc", kv_usage,
        "KV-cache usage. 1 means 100 percent usage (the fraction of KV blocks in use)."),
    {"vllm:cpu_cache_usage_perc", "gauge", /* swap_used / swap_total */
     "Swap-pool usage (vLLM v0's CPU cache). 1 means 100 percent usage.", 0, STAT_SWAP_USAGE},
    GAUGE("pagellm_kv_swap_blocks_total", swap_total, "KV blocks in the swap pool."),
    GAUGE("pagellm_kv_swap_blocks_used", swap_used, "Swap-pool blocks holding swapped-out KV."),
    COUNTER("pagellm_swap_out_total", swaps_out,
        "Requests preempted by swapping their KV out to the swap pool."),
    GAUGE("pagellm_kv_cache_usage_perc", kv_usage,
        "KV-cache usage. 1 means 100 percent usage (the fraction of KV blocks in use)."),
    GAUGE("pagellm_kv_blocks_total", blocks_total, "KV blocks in the pool."),
    GAUGE("pagellm_kv_blocks_used", blocks_used, "KV blocks referenced by sequences."),
    GAUGE("pagellm_kv_blocks_cached", blocks_cached,
        "Free KV blocks still holding prefix-cache contents."),
    GAUGE("pagellm_kv_cache_waste_perc", waste, "1 - tokens stored / capacity of the used blocks."),
    GAUGE("pagellm_kv_window_blocks_total", window_blocks_total,
        "Layer kinds: KV blocks in the window layers' own pool (0 without one)."),
    GAUGE("pagellm_kv_window_blocks_used", window_blocks_used,
        "Layer kinds: window-pool blocks referenced by sequences."),
    GAUGE("pagellm_kv_window_cache_usage_perc", window_kv_usage,
        "Layer kinds: window-pool usage. 1 means 100 percent usage."),
    COUNTER("vllm:prefix_cache_queries_total", prefix_queries,
        "Prefix cache queries, in terms of number of queried tokens."),
    COUNTER("vllm:prefix_cache_hits_total", prefix_hits,
        "Prefix cache hits, in terms of number of cached tokens."),
    COUNTER("vllm:num_preemptions_total", preemptions, "Cumulative number of preemptions."),
    COUNTER("pagellm_kv_window_freed_blocks_total", window_freed_blocks,
        "KV blocks returned to the pool because their tokens left the sliding window."),
    COUNTER("vllm:prompt_tokens_total", prompt_tokens, "Number of prefill tokens processed."),
    COUNTER("vllm:generation_tokens_total", generation_tokens,
        "Number of generation tokens processed."),
    COUNTER("vllm:spec_decode_num_drafts_total", spec_drafts,
        "Number of spec decoding drafts (sequence-steps that verified proposals)."),
    COUNTER("vllm:spec_decode_num_draft_tokens_total", spec_draft_tokens,
        "Number of draft tokens."),
    COUNTER("vllm:spec_decode_num_accepted_tokens_total", spec_accepted_tokens,
        "Number of accepted tokens."),
    COUNTER("pagellm_engine_steps_total", steps, "Engine steps run."),
    COUNTER("pagellm_engine_step_seconds_total", step_seconds,
        "Wall time of the engine steps that ran the model (KV pictures included)."),
    COUNTER("pagellm_engine_step_cpu_seconds_total", step_cpu_seconds,
        "The engine thread's CPU time in those steps (worker threads not counted)."),
    COUNTER("pagellm_kv_pictures_total", kv_pictures,
        "KV pictures the engine thread published for GET /v1/kv/blocks."),
    COUNTER("pagellm_kv_picture_seconds_total", kv_picture_seconds,
        "Engine-thread time spent publishing KV pictures."),
    /* kv-layout vattention (0 in the other layouts): where physical pages were mapped. */
    COUNTER("pagellm_vattn_pages_mapped_sync_total", vattn_pages_mapped_sync,
        "vattention: pages mapped on the step's critical path."),
    COUNTER("pagellm_vattn_pages_mapped_background_total", vattn_pages_mapped_bg,
        "vattention: pages mapped by the background mapper thread."),
    COUNTER("pagellm_vattn_pages_unmapped_total", vattn_pages_unmapped,
        "vattention: pages unmapped (given back to the system)."),
    GAUGE("pagellm_vattn_pages_committed", vattn_pages_committed,
        "vattention: pages mapped now (needed by requests + cached for reuse)."),
    COUNTER("pagellm_vattn_slots_acquired_total", vattn_slots_acquired,
        "vattention: requests given a slot."),
    COUNTER("pagellm_vattn_slots_reused_total", vattn_slots_reused,
        "vattention: of those, slots that still had pages mapped."),
    COUNTER("pagellm_vattn_map_seconds_total", vattn_map_seconds,
        "vattention: engine-thread time mapping and unmapping pages inside steps."),
};

#undef STAT
#undef GAUGE
#undef COUNTER

static double stat_value(const pl_engine_stats *s, const stat_metric *r) {
    const char *f = (const char *)s + r->offset;
    switch (r->kind) {
    case STAT_I32: return *(const int32_t *)f;
    case STAT_I64: return (double)*(const int64_t *)f;
    case STAT_U64: return (double)*(const uint64_t *)f;
    case STAT_F64: return *(const double *)f;
    case STAT_SWAP_USAGE: break;
    }
    return s->swap_total ? (double)s->swap_used / s->swap_total : 0.0;
}

/* The histograms, in the order written. */
static const struct {
    const char *name, *help;
    size_t offset; /* of the pl_server_hist in pl_server_metrics */
} HISTS[] = {
#define HIST(name, field, help) {name, help, offsetof(pl_server_metrics, field)}
    HIST("vllm:time_to_first_token_seconds", ttft,
         "Histogram of time to first token in seconds."),
    HIST("vllm:time_per_output_token_seconds", tpot,
         "Histogram of time per output token in seconds."),
    HIST("vllm:e2e_request_latency_seconds", e2e,
         "Histogram of end to end request latency in seconds."),
    HIST("vllm:request_queue_time_seconds", queue,
         "Histogram of time spent in WAITING phase for request."),
    HIST("vllm:request_prefill_time_seconds", prefill,
         "Histogram of time spent in PREFILL phase for request."),
    HIST("vllm:request_decode_time_seconds", decode,
         "Histogram of time spent in DECODE phase for request."),
    HIST("vllm:request_inference_time_seconds", inference,
         "Histogram of time spent in RUNNING phase for request."),
    HIST("vllm:request_prompt_tokens", prompt_tokens,
         "Number of prefill tokens processed."),
    HIST("vllm:request_generation_tokens", generation_tokens,
         "Number of generation tokens processed."),
    HIST("vllm:iteration_tokens_total", iteration_tokens,
         "Histogram of number of tokens per engine_step."),
    HIST("vllm:request_params_n", params_n,
         "Histogram of the n request parameter."),
    HIST("vllm:request_params_max_tokens", params_max_tokens,
         "Histogram of the max_tokens request parameter."),
#undef HIST
};

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

    for (size_t i = 0; i < sizeof STAT_METRICS / sizeof STAT_METRICS[0]; i++) {
        const stat_metric *r = &STAT_METRICS[i];
        metric(&b, r->name, r->type, r->help, labels, stat_value(s, r));
    }

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
    for (size_t i = 0; i < sizeof HISTS / sizeof HISTS[0]; i++)
        hist(&b, HISTS[i].name, HISTS[i].help, labels,
             (const pl_server_hist *)((const char *)m + HISTS[i].offset));
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
