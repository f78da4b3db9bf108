/* cli/bench_throughput — `pagellm bench throughput`: offline, in process, every request at time
 * 0 (the PagedAttention paper's throughput and memory figures). Prompts go in as token ids with
 * ignore_eos, so each request generates exactly its drawn output length. Prints one JSON line:
 * requests/s, total and output tokens/s, KV usage and waste sampled at every step, preemptions,
 * memory saved by sharing (parallel sampling, beams) and the prefix-cache hit rate.
 *
 * Online (--request-rate R, or --dataset chat): requests arrive by a Poisson process of rate R
 * (chat: conversations do, and each later turn arrives when the previous answer is complete) and
 * are added to the engine between steps, as a server's inbox would; the latency of a request runs
 * from its arrival (not from when the engine took it) to its last token, and the paper's
 * normalized latency is its mean over requests of latency / output length (the paper's Figures
 * 14, 16, 17 without HTTP in between). A layout that cannot share (the contiguous Orca baselines)
 * runs a group of n samples or W beams as n (W) requests of one sequence with the same prompt,
 * each with its own reservation, as Orca holds them; the group's latency is its slowest one.
 * --clock cpu times the online run on the engine thread's CPU time instead of the wall clock
 * (with -t 1 the engine thread does all the work): other processes on a shared machine then no
 * longer stretch the latencies; waiting for the next arrival with nothing to run skips ahead to
 * it. Token and finish times are taken when the benchmark sees them, right after each step. */
#include "cli/args.h"
#include "cli/flags.h"
#include "engine/kv_samples.h"
#include "kv/cache.h"
#include "base/clock.h"
#include "cli/cli.h"
#include "cli/engine_flags.h"

#include "bench/bench.h"
#include "pagellm.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *C = "bench throughput";

typedef struct {
    const char *model, *dataset, *output, *label;
    const char *json_schema;     /* --json-schema FILE: every request is constrained by it */
    char *schema_text;
    int64_t num_prompts, seed, n, beam, shared_prefix, max_in, max_out;
    double temperature;
    double rate;                 /* --request-rate: arrivals per second; 0 = offline */
    int cpu_clock;               /* --clock cpu: online times on the engine thread's CPU time */
    int verbose;
    pl_engine_config eng;
} tp_opts;


#define STR(name, field, meta, help) PL_FLAG_ROW_STR(tp_opts, name, 0, field, meta, help)
#define I64(name, field, lo, hi, meta, help) \
    PL_FLAG_ROW_I64(tp_opts, name, 0, field, lo, hi, meta, help)
static const pl_flag THROUGHPUT_FLAGS[] = {
    PL_FLAG_ROW_STR(tp_opts, "model", 'm', model, "MODEL", "GGUF path or bare name"),
    STR("dataset", dataset, "D",
     "sharegpt (default), alpaca, fixed:IN:OUT, FILE.json (a\n"
     "ShareGPT file, tokenized with the model's tokenizer) or\n"
     "chat (multi-turn conversations; online)"),
    I64("num-prompts", num_prompts, 1, 1000000, "N",
     "requests, all sent at time 0 (100); chat: conversations"),
    PL_FLAG_ROW_FN("request-rate", 0, pl_cli_flag_rate, offsetof(tp_opts, rate), "R",
     "online: Poisson arrivals per second (or inf), latency\n"
     "from arrival; chat: conversations per second"),
    PL_FLAG_ROW_CHOICE(tp_opts, "clock", 0, cpu_clock, "wall|cpu",
     "online: time on the wall clock (default) or on the\n"
     "engine thread's CPU time (with -t 1), which other\n"
     "processes do not stretch"),
    I64("seed", seed, 0, 0x1p63, "S", "dataset seed (0)"),
    I64("n", n, 1, 64, "N", "parallel samples per request (1)"),
    I64("beam-width", beam, 1, 64, "W", "beam search with W beams instead"),
    PL_FLAG_ROW_F64(tp_opts, "temperature", 0, temperature, 0, 100, "T",
     "sampling temperature (1.0)"),
    I64("shared-prefix", shared_prefix, 0, 1 << 24, "N", "every prompt starts with the same N tokens"),
    I64("max-input", max_in, 1, 1 << 24, "N", "clamp the drawn prompt lengths (1024)"),
    I64("max-output", max_out, 1, 1 << 24, "N", "clamp the drawn output lengths (1024)"),
    STR("json-schema", json_schema, "FILE",
     "constrain every output to this JSON schema (structured\n"
     "output; reports the masking time per step)"),
    STR("label", label, "S", "copied into the JSON line"),
    STR("output", output, "FILE", "also append the JSON line to FILE"),
    PL_FLAG_ROW_SET(tp_opts, "verbose", 'v', verbose, "progress on stderr"),
};
#undef STR
#undef I64

static const pl_flag_cmd THROUGHPUT = {
    "bench throughput",
    "usage: pagellm bench throughput -m MODEL [--dataset D] [--num-prompts N] [options]\n", NULL,
    THROUGHPUT_FLAGS, sizeof THROUGHPUT_FLAGS / sizeof THROUGHPUT_FLAGS[0], offsetof(tp_opts, eng),
    0};

static int parse(int argc, char **argv, tp_opts *o) {
    memset(o, 0, sizeof *o);
    pl_engine_config_default(&o->eng);
    o->dataset = "sharegpt";
    o->num_prompts = 100;
    o->n = 1;
    o->temperature = 1.0;
    int first, rc = pl_flags_parse(&THROUGHPUT, argc, argv, o, &first);
    if (rc) return rc == PL_FLAGS_HELP ? -1 : rc;
    if (!o->model) return pl_flags_need(&THROUGHPUT, "-m MODEL");
    if (o->cpu_clock && o->rate == 0 && strcmp(o->dataset, "chat")) {
        fprintf(stderr, "pagellm %s: --clock: only for an online run (--request-rate or --dataset "
                "chat)\n", C);
        return 2;
    }
    if (o->cpu_clock && o->eng.threads != 1) {
        fprintf(stderr, "pagellm %s: --clock cpu needs -t 1: it counts the engine thread's CPU "
                "time only, not the other threads'\n", C);
        return 2;
    }
    if (o->beam && o->n > 1) {
        fprintf(stderr, "pagellm %s: --n and --beam-width exclude each other\n", C);
        return 2;
    }
    return 0;
}

/* The JSON line: configuration, then the measurements. */
static json_t *report(const tp_opts *o, const pl_engine_stats *s, const pl_engine_kv_samples *ks,
                      double elapsed, int32_t n_requests,
                      int64_t in_tokens, int64_t out_tokens, int32_t errors, pl_summary *ttft,
                      pl_summary *tpot) {
    double d = elapsed > 0 ? elapsed : 1e-9;
    int32_t done = n_requests - errors;
    json_t *j = json_object();
    json_object_set_new(j, "bench", json_string("throughput"));
    if (o->label) json_object_set_new(j, "label", json_string(o->label));
    json_object_set_new(j, "model", json_string(o->model));
    json_object_set_new(j, "dataset", json_string(o->dataset));
    json_object_set_new(j, "num_prompts", json_integer(o->num_prompts));
    json_object_set_new(j, "seed", json_integer(o->seed));
    json_object_set_new(j, "kv_layout", json_string(pl_kv_layout_mode_name(o->eng.kv_layout)));
    json_object_set_new(j, "allocation", json_string(pl_kv_allocation_name(&o->eng)));
    json_object_set_new(j, "block_size", json_integer(o->eng.block_size));
    json_object_set_new(j, "kv_cache_memory", json_integer((json_int_t)o->eng.kv_cache_memory));
    json_object_set_new(j, "kv_cache_dtype", json_string(pl_kv_cache_dtype_name(
        o->eng.kv_cache_f32 ? PL_KV_CACHE_F32 : o->eng.kv_cache_dtype)));
    json_object_set_new(j, "blocks_total", json_integer(s->blocks_total));
    json_object_set_new(j, "preemption_mode", json_string(o->eng.preemption_mode == PL_PREEMPT_SWAP
                                                              ? "swap" : "recompute"));
    json_object_set_new(j, "prefix_caching",
                        json_boolean(o->eng.enable_prefix_caching &&
                                     (pl_kv_layout_mode_shares(o->eng.kv_layout) ||
                                      (o->eng.kv_layout == PL_KV_LAYOUT_VATTENTION &&
                                       o->eng.vattn_share))));
    json_object_set_new(j, "n", json_integer(o->n));
    json_object_set_new(j, "beam_width", json_integer(o->beam));
    json_object_set_new(j, "shared_prefix", json_integer(o->shared_prefix));
    json_object_set_new(j, "threads", json_integer(o->eng.threads));
    json_object_set_new(j, "max_num_seqs", json_integer(o->eng.max_num_seqs));
    json_object_set_new(j, "elapsed_s", json_real(elapsed));
    json_object_set_new(j, "completed", json_integer(done));
    json_object_set_new(j, "errors", json_integer(errors));
    json_object_set_new(j, "requests_per_s", json_real(done / d));
    json_object_set_new(j, "input_tokens", json_integer(in_tokens));
    json_object_set_new(j, "output_tokens", json_integer(out_tokens));
    json_object_set_new(j, "generated_tokens", json_integer((json_int_t)s->generation_tokens));
    json_object_set_new(j, "output_tokens_per_s", json_real((double)out_tokens / d));
    json_object_set_new(j, "total_tokens_per_s", json_real((double)(out_tokens + in_tokens) / d));
    json_object_set_new(j, "steps", json_integer((json_int_t)s->steps));
    /* The engine thread's CPU time in its steps: with --threads 1 all the work, and a measure a
     * shared machine's other load barely moves (wall time does). */
    json_object_set_new(j, "step_cpu_s", json_real(s->step_cpu_seconds));
    json_object_set_new(j, "peak_kv_usage_pct", json_real(100 * ks->peak_kv_usage));
    json_object_set_new(j, "mean_kv_usage_pct", json_real(100 * ks->mean_kv_usage));
    json_object_set_new(j, "peak_blocks_used", json_integer(ks->peak_blocks_used));
    json_object_set_new(j, "peak_batch_seqs", json_integer(ks->peak_batch_seqs));
    json_object_set_new(j, "mean_waste_pct", json_real(100 * ks->mean_waste));
    json_object_set_new(j, "peak_waste_pct", json_real(100 * ks->peak_waste));
    json_object_set_new(j, "mean_token_fraction_pct", json_real(100 * ks->mean_token_fraction));
    json_object_set_new(j, "mean_reserved_pct", json_real(100 * ks->mean_reserved));
    json_object_set_new(j, "mean_fragmentation_pct", json_real(100 * (ks->mean_waste - ks->mean_reserved)));
    json_object_set_new(j, "preemptions", json_integer((json_int_t)s->preemptions));
    json_object_set_new(j, "swaps_out", json_integer((json_int_t)s->swaps_out));
    json_object_set_new(j, "sliding_window", json_integer(s->sliding_window));
    json_object_set_new(j, "window_freed_blocks", json_integer((json_int_t)s->window_freed_blocks));
    if (s->window_blocks_total > 0) { /* layer kinds: the tokens the full pool holds, against
                                         the same budget with every layer keeping every block */
        json_object_set_new(j, "window_blocks_total", json_integer(s->window_blocks_total));
        json_object_set_new(j, "blocks_all_full", json_integer(s->blocks_all_full));
        json_object_set_new(j, "tokens_fit", json_integer((json_int_t)s->blocks_total *
                                                          o->eng.block_size));
        json_object_set_new(j, "tokens_fit_all_full", json_integer((json_int_t)s->blocks_all_full *
                                                                   o->eng.block_size));
        json_object_set_new(j, "tokens_fit_gain", json_real(s->blocks_all_full
            ? (double)s->blocks_total / (double)s->blocks_all_full : 0));
    }
    json_object_set_new(j, "sharing_saved_pct", json_real(100 * ks->mean_sharing_saved));
    json_object_set_new(j, "prefix_hit_pct", json_real(s->prefix_queries ? 100.0 * (double)s->prefix_hits /
                                                       (double)s->prefix_queries : 0));
    json_object_set_new(j, "ttft_ms", pl_summary_json(ttft, 1e3));
    json_object_set_new(j, "tpot_ms", pl_summary_json(tpot, 1e3));
    if (pl_kv_layout_mode_maps_pages(o->eng.kv_layout)) {
        /* Where the pages were mapped: on the step's critical path or by the mapper thread. */
        json_object_set_new(j, "kv_page_size", json_integer((json_int_t)o->eng.kv_page_size));
        json_object_set_new(j, "vattn_overlap", json_boolean(!o->eng.vattn_no_overlap));
        json_object_set_new(j, "vattn_deferred_reclaim", json_boolean(!o->eng.vattn_no_deferred_reclaim));
        json_object_set_new(j, "vattn_eager", json_boolean(!o->eng.vattn_no_eager));
        json_object_set_new(j, "vattn_share", json_boolean(o->eng.vattn_share));
        json_object_set_new(j, "vattn_pages_mapped_sync", json_integer((json_int_t)s->vattn_pages_mapped_sync));
        json_object_set_new(j, "vattn_pages_mapped_bg", json_integer((json_int_t)s->vattn_pages_mapped_bg));
        json_object_set_new(j, "vattn_pages_unmapped", json_integer((json_int_t)s->vattn_pages_unmapped));
        json_object_set_new(j, "vattn_slots_acquired", json_integer((json_int_t)s->vattn_slots_acquired));
        json_object_set_new(j, "vattn_slots_reused", json_integer((json_int_t)s->vattn_slots_reused));
        json_object_set_new(j, "vattn_map_ms", json_real(1e3 * s->vattn_map_seconds));
        json_object_set_new(j, "vattn_map_us_per_step", json_real(s->steps
            ? 1e6 * s->vattn_map_seconds / (double)s->steps : 0));
        json_object_set_new(j, "vattn_map_pct_of_step", json_real(s->step_seconds > 0
            ? 100 * s->vattn_map_seconds / s->step_seconds : 0));
    }
    /* Speculative decoding: acceptance rate and mean accepted length per speculating step (the
     * tokens a sequence gained in a step that verified proposals: accepted ones + the target's). */
    json_object_set_new(j, "speculative", json_string(o->eng.speculative_model ? "draft"
                                                      : o->eng.speculative_ngram ? "ngram" : "off"));
    json_object_set_new(j, "num_speculative_tokens", json_integer(o->eng.num_speculative_tokens));
    json_object_set_new(j, "spec_draft_tokens", json_integer((json_int_t)s->spec_draft_tokens));
    json_object_set_new(j, "spec_accepted_tokens", json_integer((json_int_t)s->spec_accepted_tokens));
    json_object_set_new(j, "spec_acceptance_rate",
                        json_real(s->spec_draft_tokens ? (double)s->spec_accepted_tokens /
                                                             (double)s->spec_draft_tokens : 0));
    json_object_set_new(j, "spec_mean_accepted_length",
                        json_real(s->spec_drafts ? 1.0 + (double)s->spec_accepted_tokens /
                                                             (double)s->spec_drafts : 0));
    json_object_set_new(j, "spec_off_steps", json_integer((json_int_t)s->spec_off_steps));
    json_object_set_new(j, "step_ms", json_real(s->steps ? 1e3 * s->step_seconds / (double)s->steps : 0));
    if (o->json_schema) {
        /* The masking cost against the step it is part of (the step time includes it). */
        json_object_set_new(j, "json_schema", json_string(o->json_schema));
        json_object_set_new(j, "constrained_tokens", json_integer((json_int_t)s->constrained_tokens));
        json_object_set_new(j, "mask_misses", json_integer((json_int_t)s->constrain_mask_misses));
        json_object_set_new(j, "constrain_s", json_real(s->constrain_seconds));
        json_object_set_new(j, "constrain_us_per_token", json_real(s->constrained_tokens
            ? 1e6 * s->constrain_seconds / (double)s->constrained_tokens : 0));
        json_object_set_new(j, "constrain_ms_per_step", json_real(s->steps
            ? 1e3 * s->constrain_seconds / (double)s->steps : 0));
        json_object_set_new(j, "constrain_pct_of_step", json_real(s->step_seconds > 0
            ? 100 * s->constrain_seconds / s->step_seconds : 0));
    }
    return j;
}

/* The JSON line on stdout, and appended to --output. */
static int print_line(const tp_opts *o, json_t *j) {
    char *line = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
    if (!line) return pl_cli_fail(C, "out of memory");
    int rc = pl_cli_emit_line(C, line, o->output);
    free(line);
    return rc;
}

/* The parameters of request i: its output length forced by ignore_eos, the sampling, n or beam
 * search (single: one sequence, for a layout that cannot share). */
static void request_params(const tp_opts *o, int32_t out_len, uint64_t i, int single,
                           pl_request_params *p) {
    pl_request_params_default(p);
    p->max_tokens = out_len;
    p->ignore_eos = 1;
    p->n = single ? 1 : (int32_t)o->n;
    p->sampling.temperature = (float)o->temperature;
    p->has_seed = 1;
    p->seed = (uint64_t)o->seed * 1000003u + i;
    if (o->schema_text) {
        p->constraint = PL_CONSTRAINT_JSON_SCHEMA;
        p->constraint_text = o->schema_text;
    }
    if (o->beam && !single) {
        p->use_beam_search = 1;
        p->best_of = (int32_t)o->beam;
        p->n = 1;
    }
}

/* ---- online: arrivals over time (--request-rate, chat) ---- */

enum { MAX_COPIES = 64 };

/* One request of the workload as the benchmark sees it. */
typedef struct {
    double arrive;               /* seconds after the start (the run's clock); INFINITY until
                                    known (a chat turn) */
    const int32_t *prompt;       /* [in_len]; a chat turn's is set when it arrives */
    int32_t in_len, out_len;
    int32_t conv, turn;          /* chat: its conversation and turn; -1 otherwise */
    int state;                   /* 0 not arrived, 1 in the engine, 2 finished */
    int32_t copies, done;        /* engine requests standing for it, finished ones */
    int error;
    double first, finish;        /* first token, last (the run's clock; 0: not yet) */
    uint64_t ids[MAX_COPIES];
} job;

typedef struct {
    pl_engine *e;
    const tp_opts *o;
    job *jobs;
    int32_t n, finished, errors;
    const pl_chat_dataset *chat;
    pl_chat_history *hist;       /* [chat->n] */
    int32_t max_prompt_total;    /* chat: prompt + output limit (the model length) */
    int64_t in_tokens, out_tokens;
    double t0;                   /* the clock at the start */
    double skipped;              /* cpu clock: idle time skipped to the next arrival */
} online;

/* Seconds since the start on the run's clock: wall, or this (the engine's) thread's CPU time
 * plus the idle waits skipped. */
static double run_clock(const online *r) {
    return r->o->cpu_clock ? pl_clock_thread_cpu() - r->t0 + r->skipped : pl_clock_now() - r->t0;
}

static int submit(online *r, int32_t j) {
    job *b = &r->jobs[j];
    if (b->conv >= 0) {
        int32_t lim = r->max_prompt_total - b->out_len;
        if (r->o->max_in > 0 && r->o->max_in < lim) lim = (int32_t)r->o->max_in;
        if (pl_chat_turn(&r->hist[b->conv], &r->chat->conv[b->conv], b->turn, lim, &b->prompt,
                         &b->in_len) != PL_OK)
            return pl_cli_fail(C, "%s", pl_last_error());
    }
    for (int32_t k = 0; k < b->copies; k++) {
        pl_request_params p;
        request_params(r->o, b->out_len, (uint64_t)j * MAX_COPIES + (uint64_t)k, b->copies > 1, &p);
        if (pl_engine_add_request(r->e, NULL, b->prompt, (size_t)b->in_len, &p, &b->ids[k]) != PL_OK)
            return pl_cli_fail(C, "request %d (%d prompt tokens, %d output): %s", j, b->in_len,
                               b->out_len, pl_last_error());
    }
    r->in_tokens += (int64_t)b->in_len * b->copies;
    b->state = 1;
    return 0;
}

/* Take what a job's engine requests produced; a finished chat turn lets the next one arrive. */
static int poll_job(online *r, int32_t j) {
    job *b = &r->jobs[j];
    for (int32_t k = 0; k < b->copies; k++) {
        pl_request_output *out;
        while (b->ids[k] && pl_engine_poll(r->e, b->ids[k], 0, &out) == PL_OK) {
            double now = run_clock(r);
            for (int32_t d = 0; d < out->n_deltas; d++) {
                const pl_completion_delta *dl = &out->deltas[d];
                b->error |= dl->finish == PL_FINISH_ERROR;
                if (dl->n_tokens > 0 && b->first == 0) b->first = now;
                if (b->conv >= 0 && k == 0 && dl->index == 0 &&
                    pl_chat_answer(&r->hist[b->conv], dl->token_ids, dl->n_tokens) != PL_OK)
                    b->error = 1;
            }
            int fin = out->finished;
            if (fin) {
                b->error |= out->error != NULL;
                r->out_tokens += out->n_output_tokens;
                if (b->first == 0) b->first = now;
                b->finish = now; /* the copies finish in order: the last one's time stays */
                b->ids[k] = 0;
                b->done++;
            }
            pl_request_output_destroy(out);
            if (fin) break;
        }
    }
    if (b->done < b->copies) return 0;
    b->state = 2;
    r->finished++;
    r->errors += b->error;
    if (b->conv >= 0 && b->turn + 1 < r->chat->conv[b->conv].n_turns) {
        r->jobs[j + 1].arrive = b->finish; /* the next turn: the user answers at once */
    }
    return 0;
}

/* Step the engine, adding each job when its time comes, until every job finished. */
static int run_online(online *r, int verbose) {
    r->t0 = r->o->cpu_clock ? pl_clock_thread_cpu() : pl_clock_now();
    int32_t next_scan = 0; /* jobs before it have all arrived */
    uint64_t last_report = 0;
    while (r->finished < r->n) {
        double t = run_clock(r), next = INFINITY;
        for (int32_t j = next_scan; j < r->n; j++) {
            job *b = &r->jobs[j];
            if (b->state == 0 && b->arrive <= t) {
                int rc = submit(r, j);
                if (rc) return rc;
            }
            if (b->state == 0 && b->arrive < next) next = b->arrive;
        }
        while (next_scan < r->n && r->jobs[next_scan].state != 0) next_scan++;
        if (!pl_engine_has_work(r->e)) {
            if (isinf(next)) return pl_cli_fail(C, "online: nothing runs and nothing will arrive");
            double wait = next - run_clock(r);
            if (wait > 0 && r->o->cpu_clock) r->skipped += wait;
            else if (wait > 0) {
                struct timespec ts = {(time_t)wait, (long)((wait - floor(wait)) * 1e9)};
                nanosleep(&ts, NULL);
            }
            continue;
        }
        if (pl_engine_step(r->e) != PL_OK) return pl_cli_fail(C, "engine step: %s", pl_last_error());
        for (int32_t j = 0; j < r->n; j++)
            if (r->jobs[j].state == 1) poll_job(r, j);
        if (verbose) {
            pl_engine_stats s;
            pl_engine_get_stats(r->e, &s);
            if (s.steps >= last_report + 50) {
                last_report = s.steps;
                fprintf(stderr, "\r%s: step %llu, %d/%d done, %d running, kv %.0f%%   ", C,
                        (unsigned long long)s.steps, r->finished, r->n, s.running, 100 * s.kv_usage);
            }
        }
    }
    if (verbose) fputc('\n', stderr);
    return 0;
}

/* The jobs of the workload: one per request, or per conversation turn (chat). */
static int make_jobs(online *r, const pl_dataset *ds, int32_t copies) {
    int32_t n = ds ? ds->n : 0;
    if (r->chat)
        for (int32_t c = 0; c < r->chat->n; c++) n += r->chat->conv[c].n_turns;
    r->jobs = calloc((size_t)n, sizeof *r->jobs);
    int32_t n_start = r->chat ? r->chat->n : n;
    double *arr = malloc((size_t)n_start * sizeof *arr);
    if (!r->jobs || !arr) {
        free(arr);
        return pl_cli_fail(C, "out of memory");
    }
    r->n = n;
    double rate = isinf(r->o->rate) ? 0 : r->o->rate;
    pl_poisson_arrivals(rate, n_start, (uint64_t)r->o->seed ^ 0xa5a5a5a5ull, arr);
    for (int32_t j = 0, c = 0; j < n; c++) {
        if (r->chat) {
            const pl_conversation *cv = &r->chat->conv[c];
            for (int32_t k = 0; k < cv->n_turns; k++, j++)
                r->jobs[j] = (job){.arrive = k ? INFINITY : arr[c], .out_len = cv->out_len[k],
                                   .conv = c, .turn = k, .copies = copies};
        } else {
            r->jobs[j] = (job){.arrive = arr[j], .prompt = ds->req[j].prompt,
                               .in_len = ds->req[j].in_len, .out_len = ds->req[j].out_len,
                               .conv = -1, .turn = -1, .copies = copies};
            j++;
        }
    }
    free(arr);
    return 0;
}

/* Latency from arrival: normalized (per output token), end to end, first token, per token. */
static void online_latency(const online *r, json_t *j, pl_summary *ttft, pl_summary *tpot) {
    double *e2e = calloc((size_t)r->n + 1, sizeof *e2e), *norm = calloc((size_t)r->n + 1, sizeof *norm);
    double *ft = calloc((size_t)r->n + 1, sizeof *ft), *pt = calloc((size_t)r->n + 1, sizeof *pt);
    int32_t m = 0, mp = 0;
    for (int32_t i = 0; e2e && norm && ft && pt && i < r->n; i++) {
        const job *b = &r->jobs[i];
        if (b->error || b->finish <= 0) continue;
        double arrive = b->arrive;
        e2e[m] = b->finish - arrive;
        norm[m] = e2e[m] / b->out_len;
        ft[m] = b->first > 0 ? b->first - arrive : e2e[m];
        if (b->out_len > 1 && b->first > 0) pt[mp++] = (b->finish - b->first) / (b->out_len - 1);
        m++;
    }
    pl_summary se, sn;
    pl_summarize(e2e, m, &se);
    pl_summarize(norm, m, &sn);
    pl_summarize(ft, m, ttft);
    pl_summarize(pt, mp, tpot);
    json_object_set_new(j, "request_rate", isinf(r->o->rate) ? json_string("inf") : json_real(r->o->rate));
    json_object_set_new(j, "requests", json_integer(r->n));
    json_object_set_new(j, "copies_per_request", json_integer(r->jobs[0].copies));
    json_object_set_new(j, "clock", json_string(r->o->cpu_clock ? "cpu" : "wall"));
    if (r->chat) json_object_set_new(j, "conversations", json_integer(r->chat->n));
    json_object_set_new(j, "normalized_latency_s_per_token", json_real(sn.mean));
    json_object_set_new(j, "normalized_latency_p50", json_real(sn.p50));
    json_object_set_new(j, "e2e_ms", pl_summary_json(&se, 1e3));
    free(e2e);
    free(norm);
    free(ft);
    free(pt);
}

/* The online benchmark on engine e: the JSON line into *out. */
static int bench_online(const tp_opts *o, pl_engine *e, const pl_dataset_spec *spec,
                        const pl_dataset_opts *dopt, json_t **out) {
    online r = {.e = e, .o = o, .max_prompt_total = dopt->max_total};
    pl_dataset ds = {0};
    pl_chat_dataset chat = {0};
    int rc = 0;
    int shares = pl_kv_layout_mode_shares(o->eng.kv_layout) ||
                 (pl_kv_layout_mode_maps_pages(o->eng.kv_layout) && o->eng.vattn_share);
    int single = !shares && (o->n > 1 || o->beam > 1);
    int32_t copies = single ? (int32_t)(o->beam > 1 ? o->beam : o->n) : 1;
    if (spec->kind == PL_DS_CHAT) {
        if (o->shared_prefix) return pl_cli_fail(C, "--shared-prefix: not with --dataset chat");
        if (pl_chat_make((int32_t)o->num_prompts, (uint64_t)o->seed, dopt, &chat) != PL_OK)
            return pl_cli_fail(C, "%s", pl_last_error());
        r.chat = &chat;
        r.hist = calloc((size_t)chat.n, sizeof *r.hist);
        if (!r.hist) rc = pl_cli_fail(C, "out of memory");
    } else if (pl_dataset_make(spec, (int32_t)o->num_prompts, (uint64_t)o->seed, dopt, &ds) != PL_OK) {
        return pl_cli_fail(C, "%s", pl_last_error());
    }
    if (!rc) rc = make_jobs(&r, r.chat ? NULL : &ds, copies);
    if (!rc) rc = run_online(&r, o->verbose);
    if (!rc) {
        double elapsed = run_clock(&r);
        pl_engine_stats st;
        pl_engine_kv_samples ks;
        pl_engine_get_stats(e, &st);
        pl_engine_get_kv_samples(e, &ks);
        json_t *lat = json_object();
        pl_summary ttft, tpot;
        online_latency(&r, lat, &ttft, &tpot);
        *out = report(o, &st, &ks, elapsed, r.n, r.in_tokens, r.out_tokens, r.errors, &ttft, &tpot);
        if (!*out || !lat) rc = pl_cli_fail(C, "out of memory");
        else json_object_update(*out, lat);
        json_decref(lat);
    }
    for (int32_t c = 0; r.hist && c < chat.n; c++) pl_chat_history_free(&r.hist[c]);
    free(r.hist);
    free(r.jobs);
    pl_chat_destroy(&chat);
    pl_dataset_destroy(&ds);
    return rc;
}

/* Collect every request's outputs: tokens, errors, time to first token. */
static void drain(pl_engine *e, const uint64_t *ids, int32_t n, int64_t *out_tokens,
                  int32_t *errors, double *ttft, int32_t *n_ttft, double *tpot, int32_t *n_tpot) {
    for (int32_t i = 0; i < n; i++) {
        pl_request_output *out;
        while (pl_engine_poll(e, ids[i], 0, &out) == PL_OK) {
            int done = out->finished;
            if (done) {
                int err = out->error != NULL;
                for (int32_t k = 0; k < out->n_deltas; k++)
                    err |= out->deltas[k].finish == PL_FINISH_ERROR;
                if (err) (*errors)++;
                else {
                    *out_tokens += out->n_output_tokens;
                    if (out->first_token_time > 0)
                        ttft[(*n_ttft)++] = out->first_token_time - out->arrival_time;
                    int32_t per = out->n_output_tokens; /* TPOT of one completion (n = 1) */
                    if (out->first_token_time > 0 && per > 1 && out->finish_time > 0)
                        tpot[(*n_tpot)++] = (out->finish_time - out->first_token_time) / (per - 1);
                }
            }
            pl_request_output_destroy(out);
            if (done) break;
        }
    }
}

int pl_bench_throughput(int argc, char **argv) {
    tp_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc; /* -1: --help */
    char path[4096];
    if (pl_cli_resolve_model(o.model, path, sizeof path)) return 1;
    pl_dataset_spec spec;
    if (pl_dataset_parse(o.dataset, &spec) != PL_OK) return pl_cli_fail(C, "%s", pl_last_error());
    o.eng.model_path = path;
    if (o.json_schema) {
        if (!(o.schema_text = pl_cli_read_file(o.json_schema, NULL)))
            return pl_cli_fail(C, "--json-schema: cannot read %s", o.json_schema);
    }
    pl_engine *e;
    if (pl_cli_engine_create("bench throughput", &o.eng, 1, &e) != PL_OK) {
        free(o.schema_text);
        return pl_cli_fail(C, "%s", pl_last_error());
    }
    pl_dataset_opts dopt = {
        .n_vocab = pl_engine_n_vocab(e), .first_id = 3, .max_in = (int32_t)o.max_in,
        .max_out = (int32_t)o.max_out, .max_total = pl_engine_max_model_len(e),
        .shared_prefix = (int32_t)o.shared_prefix, .tok = pl_engine_tokenizer(e),
    };
    o.eng.kv_cache_memory = pl_engine_get_config(e)->kv_cache_memory; /* the resolved budget */
    o.eng.kv_page_size = pl_engine_get_config(e)->kv_page_size;
    o.eng.block_size = pl_engine_get_config(e)->block_size; /* vattention: tokens per page */
    if (o.rate > 0 || spec.kind == PL_DS_CHAT) {
        if (o.rate == 0) o.rate = INFINITY;
        json_t *j = NULL;
        rc = bench_online(&o, e, &spec, &dopt, &j);
        if (!rc) rc = print_line(&o, j);
        if (!rc && json_integer_value(json_object_get(j, "errors")))
            rc = pl_cli_fail(C, "%lld requests failed",
                             (long long)json_integer_value(json_object_get(j, "errors")));
        json_decref(j);
        free(o.schema_text);
        pl_cli_dist_probe(e);
        pl_cli_dist_report(1);
        pl_engine_destroy(e);
        return rc;
    }
    pl_dataset ds;
    if (pl_dataset_make(&spec, (int32_t)o.num_prompts, (uint64_t)o.seed, &dopt, &ds) != PL_OK) {
        rc = pl_cli_fail(C, "%s", pl_last_error());
        pl_engine_destroy(e);
        free(o.schema_text);
        return rc;
    }
    int32_t n = ds.n, n_ttft = 0, n_tpot = 0, errors = 0;
    uint64_t *ids = calloc((size_t)n, sizeof *ids);
    double *ttft = calloc((size_t)n + 1, sizeof *ttft), *tpot = calloc((size_t)n + 1, sizeof *tpot);
    int64_t in_tokens = 0, out_tokens = 0;
    if (!ids || !ttft || !tpot) {
        rc = pl_cli_fail(C, "out of memory");
        goto done;
    }
    double t0 = pl_clock_now();
    for (int32_t i = 0; i < n; i++) {
        pl_request_params p;
        request_params(&o, ds.req[i].out_len, (uint64_t)i, 0, &p);
        if (pl_engine_add_request(e, NULL, ds.req[i].prompt, (size_t)ds.req[i].in_len, &p,
                                  &ids[i]) != PL_OK) {
            rc = pl_cli_fail(C, "request %d (%d prompt tokens, %d output): %s", i,
                             ds.req[i].in_len, ds.req[i].out_len, pl_last_error());
            goto done;
        }
        in_tokens += ds.req[i].in_len;
    }
    uint64_t last_report = 0;
    while (pl_engine_has_work(e)) {
        if (pl_engine_step(e) != PL_OK) {
            rc = pl_cli_fail(C, "engine step: %s", pl_last_error());
            goto done;
        }
        if (o.verbose) {
            pl_engine_stats s;
            pl_engine_get_stats(e, &s);
            if (s.steps >= last_report + 50) {
                last_report = s.steps;
                fprintf(stderr, "\r%s: step %llu, %llu/%d done, %d running, kv %.0f%%   ", C,
                        (unsigned long long)s.steps, (unsigned long long)s.requests_finished, n,
                        s.running, 100 * s.kv_usage);
            }
        }
    }
    double elapsed = pl_clock_now() - t0;
    if (o.verbose) fputc('\n', stderr);
    pl_engine_stats st;
    pl_engine_get_stats(e, &st);
    pl_engine_kv_samples ks;
    pl_engine_get_kv_samples(e, &ks);
    drain(e, ids, n, &out_tokens, &errors, ttft, &n_ttft, tpot, &n_tpot);
    pl_summary s_ttft, s_tpot;
    pl_summarize(ttft, n_ttft, &s_ttft);
    pl_summarize(tpot, n_tpot, &s_tpot);
    json_t *j = report(&o, &st, &ks, elapsed, n, in_tokens, out_tokens, errors, &s_ttft, &s_tpot);
    rc = print_line(&o, j);
    json_decref(j);
    if (!rc && errors) rc = pl_cli_fail(C, "%d of %d requests failed", errors, n);
done:
    free(o.schema_text);
    free(ids);
    free(ttft);
    free(tpot);
    pl_dataset_destroy(&ds);
    pl_cli_dist_probe(e);
    pl_cli_dist_report(1);
    pl_engine_destroy(e);
    return rc;
}
