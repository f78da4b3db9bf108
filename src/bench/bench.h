/* bench/bench — what `pagellm bench throughput` and `pagellm bench serve` share: the workloads
 * (datasets), the arrival process, the latency statistics and the JSON reports. No I/O beyond
 * reading a dataset file, no HTTP (the libcurl client lives in the CLI), no engine.
 *
 * Datasets. A workload is a list of requests, each a prompt (token ids) and an output length
 * that the benchmark enforces with ignore_eos, so every system generates the same tokens count:
 *   sharegpt      synthetic lengths fitted to the PagedAttention paper's ShareGPT statistics
 *                 (mean input 161, mean output 338 tokens, long tails: log-normal);
 *   alpaca        the same for Alpaca (mean input 19, mean output 58, short tails);
 *   fixed:IN:OUT  every request IN prompt tokens and OUT output tokens;
 *   FILE.json     a real ShareGPT file (a list of {"conversations": [{"from": "human", "value":
 *                 ...}, {"from": "gpt", "value": ...}, ...]}): the first human turn is the
 *                 prompt, the length of the first answer the output length (needs a tokenizer).
 * Synthetic lengths are drawn from a log-normal clamped to [lo, hi], whose log-mean is solved
 * numerically so that the CLAMPED distribution has the stated mean; prompt ids are uniform over
 * the vocabulary minus its first few (special) ids. Everything is a function of the seed only.
 * Invariants: 1 <= in_len, 1 <= out_len, in_len + out_len <= max_total when max_total > 0.
 *
 * Arrivals. A Poisson process of rate R requests/s: exponential gaps of mean 1/R, drawn from
 * the seed; R = infinity sends everything at time 0.
 *
 * Statistics. Percentiles interpolate linearly between order statistics (numpy's default).
 */
#ifndef PL_BENCH_BENCH_H
#define PL_BENCH_BENCH_H

#include "base/status.h"

#include <jansson.h>
#include <stdint.h>

struct pl_tokenizer;

typedef enum { PL_DS_SHAREGPT = 0, PL_DS_ALPACA, PL_DS_FIXED, PL_DS_FILE, PL_DS_CHAT } pl_dataset_kind;

typedef struct {
    pl_dataset_kind kind;
    int32_t fixed_in, fixed_out;  /* fixed:IN:OUT */
    const char *path;             /* FILE.json (points into the parsed string) */
} pl_dataset_spec;

typedef struct {
    int32_t n_vocab;              /* prompt ids are drawn from [first_id, n_vocab) */
    int32_t first_id;             /* (3: skips unk/bos/eos of Llama vocabularies) */
    int32_t max_in, max_out;      /* clamps of the synthetic lengths and file filters (0 = the
                                     dataset's defaults: 1024 and 1024) */
    int32_t max_total;            /* in + out limit, e.g. the model length (0 = none) */
    int32_t shared_prefix;        /* the first this-many prompt tokens are the same in every
                                     request (prefix-caching workloads); prompts get longer */
    const struct pl_tokenizer *tok; /* FILE datasets: to count tokens (NULL otherwise) */
} pl_dataset_opts;

typedef struct {
    int32_t in_len, out_len;      /* prompt tokens, output tokens to generate */
    int32_t *prompt;              /* [in_len] token ids */
} pl_bench_request;

typedef struct {
    int32_t n;
    pl_bench_request *req;        /* [n] */
} pl_dataset;

/* The clamped log-normal behind a synthetic dataset. */
typedef struct {
    double mean, sigma;           /* target mean of the clamped values; log-space sigma */
    int32_t lo, hi;               /* clamp */
} pl_length_dist;

/* "sharegpt", "alpaca", "fixed:IN:OUT", "chat" (conversations: pl_chat_make; pl_dataset_make
 * refuses it) or a path ending in .json. */
pl_status pl_dataset_parse(const char *s, pl_dataset_spec *out);
/* The input and output length distributions of a synthetic kind (with opts' clamps). */
void pl_dataset_dists(pl_dataset_kind kind, const pl_dataset_opts *o, pl_length_dist *in,
                      pl_length_dist *out);
/* The log-mean mu such that E[clamp(exp(mu + sigma Z), lo, hi)] = mean. */
double pl_length_dist_mu(const pl_length_dist *d);
/* n requests drawn with seed. */
pl_status pl_dataset_make(const pl_dataset_spec *spec, int32_t n, uint64_t seed,
                          const pl_dataset_opts *o, pl_dataset *out);
void pl_dataset_destroy(pl_dataset *d);

/* Chatbot conversations (the PagedAttention paper's Figure 17). A conversation is n_turns user
 * turns, each with the length of the answer to generate for it. Turn k's prompt is the history
 * (turn 0's user ids, the answer the model actually gave, turn 1's user ids, ...) plus user turn
 * k, truncated at the front to its last max_prompt tokens, so a turn is only known once the
 * previous answer is: turns arrive after the previous answer (no think time). Lengths (seeded,
 * clamped log-normals as above): user turns mean 40, sigma 0.8, in [4, 256]; answers mean 80,
 * sigma 0.8, in [4, 256] (and <= opts.max_out); 2 to 6 turns, uniform. User ids are uniform as
 * in the synthetic datasets. Invariants: 1 <= n_turns, every length >= 1. */
typedef struct {
    int32_t n_turns;
    int32_t *user_len, *out_len;  /* [n_turns] */
    int32_t **user;               /* [n_turns][user_len[k]] token ids */
} pl_conversation;

typedef struct {
    int32_t n;
    pl_conversation *conv;        /* [n] */
} pl_chat_dataset;

/* A conversation's history: the ids of every user turn and answer so far, untruncated. */
typedef struct {
    int32_t *ids;
    int32_t n, cap;
} pl_chat_history;

pl_status pl_chat_make(int32_t n_conv, uint64_t seed, const pl_dataset_opts *o,
                       pl_chat_dataset *out);
void pl_chat_destroy(pl_chat_dataset *d);
/* Append user turn k of c to h and point *prompt at the prompt of that turn: the last
 * min(h->n, max_prompt) ids of h (valid until h changes). max_prompt >= 1. */
pl_status pl_chat_turn(pl_chat_history *h, const pl_conversation *c, int32_t k,
                       int32_t max_prompt, const int32_t **prompt, int32_t *n_prompt);
/* Append the answer the model gave to h. */
pl_status pl_chat_answer(pl_chat_history *h, const int32_t *ids, int32_t n);
void pl_chat_history_free(pl_chat_history *h);

/* Arrival times in seconds from the start, non-decreasing: t[0] is the first gap. rate <= 0 or
 * infinite: all 0. */
void pl_poisson_arrivals(double rate, int32_t n, uint64_t seed, double *t);

typedef struct {
    int32_t n;
    double mean, p50, p90, p99, max;
} pl_summary;

/* Sorts v[n] in place; an empty set gives all zeros. */
void pl_summarize(double *v, int32_t n, pl_summary *s);
double pl_percentile_sorted(const double *v, int32_t n, double p); /* p in [0, 100] */

/* One request of a serving benchmark as the client saw it. */
typedef struct {
    int ok;                       /* completed with the expected output */
    double send;                  /* seconds from the benchmark start */
    double ttft, e2e;             /* first token, last byte: seconds after send */
    int32_t in_len, out_len;      /* prompt tokens; output tokens received */
    int32_t n_gaps;               /* inter-token (chunk) latencies recorded */
    double *gaps;                 /* [n_gaps] seconds between consecutive content chunks */
} pl_bench_result;

/* The serving report: {"completed", "errors", "duration_s", "request_throughput",
 * "output_throughput", "total_token_throughput", "ttft_ms": {mean, p50, p90, p99, max},
 * "tpot_ms": {...}, "itl_ms": {...}, "e2e_ms": {...}, "normalized_latency_s_per_token",
 * "normalized_latency_p50", ...}. Per-request TPOT = (e2e - ttft) / (out - 1) for out > 1;
 * normalized latency = mean over requests of e2e / out (the paper's metric). */
json_t *pl_bench_serve_report(const pl_bench_result *r, int32_t n, double duration);
/* {"n": .., "mean": .., "p50": .., "p90": .., "p99": .., "max": ..} scaled by `scale`. */
json_t *pl_summary_json(const pl_summary *s, double scale);

#endif
