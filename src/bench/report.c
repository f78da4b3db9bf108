/* bench/report — Poisson arrivals, latency summaries and the serving report. See bench.h. */
#include "bench/bench.h"

#include "base/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void pl_poisson_arrivals(double rate, int32_t n, uint64_t seed, double *t) {
    pl_rng r;
    pl_rng_seed(&r, seed);
    double now = 0;
    for (int32_t i = 0; i < n; i++) {
        if (rate > 0 && isfinite(rate)) now += -log(1.0 - pl_rng_uniform(&r)) / rate;
        t[i] = now;
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double pl_percentile_sorted(const double *v, int32_t n, double p) {
    if (n < 1) return 0;
    double rank = p / 100.0 * (n - 1);
    if (rank <= 0) return v[0];
    if (rank >= n - 1) return v[n - 1];
    int32_t i = (int32_t)rank;
    double f = rank - i;
    return v[i] + f * (v[i + 1] - v[i]);
}

void pl_summarize(double *v, int32_t n, pl_summary *s) {
    memset(s, 0, sizeof *s);
    if (n < 1) return;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double sum = 0;
    for (int32_t i = 0; i < n; i++) sum += v[i];
    s->n = n;
    s->mean = sum / n;
    s->p50 = pl_percentile_sorted(v, n, 50);
    s->p90 = pl_percentile_sorted(v, n, 90);
    s->p99 = pl_percentile_sorted(v, n, 99);
    s->max = v[n - 1];
}

json_t *pl_summary_json(const pl_summary *s, double scale) {
    return json_pack("{s:i, s:f, s:f, s:f, s:f, s:f}", "n", s->n, "mean", s->mean * scale, "p50",
                     s->p50 * scale, "p90", s->p90 * scale, "p99", s->p99 * scale, "max",
                     s->max * scale);
}

json_t *pl_bench_serve_report(const pl_bench_result *r, int32_t n, double duration) {
    int32_t n_ok = 0, n_gaps = 0, n_tpot = 0;
    for (int32_t i = 0; i < n; i++)
        if (r[i].ok) {
            n_ok++;
            n_gaps += r[i].n_gaps;
        }
    double *ttft = malloc(((size_t)n_ok + 1) * sizeof *ttft);
    double *e2e = malloc(((size_t)n_ok + 1) * sizeof *e2e);
    double *tpot = malloc(((size_t)n_ok + 1) * sizeof *tpot);
    double *norm = malloc(((size_t)n_ok + 1) * sizeof *norm);
    double *itl = malloc(((size_t)n_gaps + 1) * sizeof *itl);
    if (!ttft || !e2e || !tpot || !norm || !itl) {
        free(ttft), free(e2e), free(tpot), free(norm), free(itl);
        return NULL;
    }
    int64_t out_tokens = 0, in_tokens = 0;
    int32_t k = 0, g = 0;
    for (int32_t i = 0; i < n; i++) {
        const pl_bench_result *q = &r[i];
        if (!q->ok) continue;
        ttft[k] = q->ttft;
        e2e[k] = q->e2e;
        norm[k] = q->out_len > 0 ? q->e2e / q->out_len : q->e2e;
        if (q->out_len > 1) tpot[n_tpot++] = (q->e2e - q->ttft) / (q->out_len - 1);
        for (int32_t j = 0; j < q->n_gaps; j++) itl[g++] = q->gaps[j];
        out_tokens += q->out_len;
        in_tokens += q->in_len;
        k++;
    }
    pl_summary s_ttft, s_e2e, s_tpot, s_itl, s_norm;
    pl_summarize(ttft, k, &s_ttft);
    pl_summarize(e2e, k, &s_e2e);
    pl_summarize(tpot, n_tpot, &s_tpot);
    pl_summarize(itl, g, &s_itl);
    pl_summarize(norm, k, &s_norm);
    double d = duration > 0 ? duration : 1e-9;
    json_t *j = json_pack(
        "{s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:I, s:I, s:o, s:o, s:o, s:o, s:f, s:o}",
        "num_prompts", n, "completed", n_ok, "errors", n - n_ok, "duration_s", duration,
        "request_throughput", n_ok / d, "output_throughput", (double)out_tokens / d,
        "total_token_throughput", (double)(out_tokens + in_tokens) / d, "input_tokens",
        (json_int_t)in_tokens, "output_tokens", (json_int_t)out_tokens, "ttft_ms",
        pl_summary_json(&s_ttft, 1e3), "tpot_ms", pl_summary_json(&s_tpot, 1e3), "itl_ms",
        pl_summary_json(&s_itl, 1e3), "e2e_ms", pl_summary_json(&s_e2e, 1e3),
        "normalized_latency_s_per_token", s_norm.mean, "normalized_latency",
        pl_summary_json(&s_norm, 1.0));
    free(ttft), free(e2e), free(tpot), free(norm), free(itl);
    return j;
}
