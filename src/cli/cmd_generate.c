/* cli/cmd_generate — `pagellm generate`: one prompt (-p / --prompt-ids), or an offline batch
 * (--input prompts.jsonl --output results.jsonl), through the engine: continuous batching over
 * the paged KV cache, exactly as the server runs requests. */
#include "cli/args.h"
#include "engine/kv_samples.h"
#include "base/clock.h"
#include "base/cpucount.h"
#include "cli/cli.h"
#include "cli/engine_flags.h"
#include "cli/flags.h"
#include "cli/generate_batch.h"
#include "kernels/cpu.h"

#include "pagellm.h"
#include "server/server.h"

#include <stddef.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *C = "generate";

typedef struct {
    const char *model, *prompt, *prompt_ids, *input, *output;
    int json, verbose;
    pl_request_params p;
    const char *stops[PL_MAX_STOP_STRINGS];
    const char *choices[PL_MAX_STOP_STRINGS];
    const char *constraint_arg;  /* the flag that set p.constraint (its name, no dashes) */
    char *constraint_file;       /* --json-schema / --grammar: the file's text (p.constraint_text) */
    pl_engine_config eng;
} gen_opts;

/* One structured-output flag per run (--choice may repeat); aux is the pl_constraint_kind. */
static int set_constraint(const char *cmd, const pl_flag *f, const char *arg, void *opts) {
    gen_opts *o = opts;
    pl_constraint_kind kind = (pl_constraint_kind)f->aux;
    if (o->constraint_arg && !(kind == PL_CONSTRAINT_CHOICE && o->p.constraint == kind)) {
        fprintf(stderr, "pagellm %s: --%s and --%s exclude each other\n", cmd, o->constraint_arg,
                f->name);
        return 2;
    }
    o->constraint_arg = f->name;
    o->p.constraint = kind;
    if (kind == PL_CONSTRAINT_CHOICE) {
        if (o->p.n_constraint_choices == PL_MAX_STOP_STRINGS) {
            fprintf(stderr, "pagellm %s: at most %d --choice\n", cmd, PL_MAX_STOP_STRINGS);
            return 2;
        }
        o->choices[o->p.n_constraint_choices++] = arg;
        o->p.constraint_choices = o->choices;
    } else if (kind == PL_CONSTRAINT_JSON_SCHEMA || kind == PL_CONSTRAINT_GRAMMAR) {
        if (!(o->constraint_file = pl_cli_read_file(arg, NULL))) {
            fprintf(stderr, "pagellm %s: --%s: cannot read %s\n", cmd, f->name, arg);
            return 2;
        }
        o->p.constraint_text = o->constraint_file;
    } else {
        o->p.constraint_text = arg;
    }
    return 0;
}

static int set_seed(const char *cmd, const pl_flag *f, const char *arg, void *opts) {
    gen_opts *o = opts;
    int64_t v;
    (void)f;
    if (pl_arg_int(cmd, "--seed", arg, 0, INT64_MAX, &v)) return 2;
    o->p.has_seed = 1;
    o->p.seed = (uint64_t)v;
    return 0;
}

static int add_stop(const char *cmd, const pl_flag *f, const char *arg, void *opts) {
    gen_opts *o = opts;
    (void)f;
    if (o->p.n_stop == PL_MAX_STOP_STRINGS) {
        fprintf(stderr, "pagellm %s: at most %d --stop strings\n", cmd, PL_MAX_STOP_STRINGS);
        return 2;
    }
    o->stops[o->p.n_stop++] = arg;
    return 0;
}

static int set_beam(const char *cmd, const pl_flag *f, const char *arg, void *opts) {
    gen_opts *o = opts;
    (void)f;
    if (pl_arg_i32(cmd, "--beam-width", arg, 1, 64, &o->p.best_of)) return 2;
    o->p.use_beam_search = 1;
    return 0;
}

#define CONSTRAINT(name, meta, kind, help) PL_FLAG_ROW_FN(name, 0, set_constraint, kind, meta, help)

static const pl_flag GEN_FLAGS[] = {
    PL_FLAG_ROW_STR(gen_opts, "model", 'm', model, "MODEL",
     "GGUF path or bare name (./models, $PAGELLM_MODELS,\n../shared/models)"),
    PL_FLAG_ROW_STR(gen_opts, "prompt", 'p', prompt, "TEXT",
     "prompt text (BOS added when the model says so)"),
    PL_FLAG_ROW_SET(gen_opts, "parse-special", 0, p.parse_special,
     "the text of control tokens in -p (\"<s>\",\n\"<|im_start|>\") becomes those tokens; "
     "user-defined\ntokens' text always does (--input: \"parse_special\")"),
    PL_FLAG_ROW_STR(gen_opts, "prompt-ids", 0, prompt_ids, "IDS",
     "prompt token ids, comma-separated (nothing added)"),
    PL_FLAG_ROW_STR(gen_opts, "input", 0, input, "F",
     "offline batch (with --output): one JSON request per line\n(prompt or prompt_ids, "
     "OpenAI/vLLM sampling and structured\noutput fields, parse_special)"),
    PL_FLAG_ROW_STR(gen_opts, "output", 0, output, "F",
     "one result line per request of --input, in its order"),
    PL_FLAG_ROW_I32(gen_opts, "max-tokens", 'n', p.max_tokens, 1, 1 << 24, "N",
     "tokens to generate (default 128)"),
    PL_FLAG_ROW_F32(gen_opts, "temperature", 0, p.sampling.temperature, 0, 100, "T",
     "0 = greedy (default 1.0)"),
    PL_FLAG_ROW_I32(gen_opts, "top-k", 0, p.sampling.top_k, -1, INT32_MAX, "K", "top-k sampling (-1: off)"),
    PL_FLAG_ROW_F32(gen_opts, "top-p", 0, p.sampling.top_p, 1e-9, 1, "P", "nucleus sampling"),
    PL_FLAG_ROW_F32(gen_opts, "min-p", 0, p.sampling.min_p, 0, 1, "P", "min-p sampling"),
    PL_FLAG_ROW_F32(gen_opts, "repetition-penalty", 0, p.sampling.repetition_penalty, 1e-6, 100, "R",
     "penalty of tokens already seen (1: none)"),
    PL_FLAG_ROW_F32(gen_opts, "presence-penalty", 0, p.sampling.presence_penalty, -2, 2, "P",
     "OpenAI's presence penalty"),
    PL_FLAG_ROW_F32(gen_opts, "frequency-penalty", 0, p.sampling.frequency_penalty, -2, 2, "F",
     "OpenAI's frequency penalty"),
    PL_FLAG_ROW_FN("seed", 0, set_seed, 0, "S", "seed of this request's sampler"),
    PL_FLAG_ROW_I32(gen_opts, "n", 0, p.n, 1, 64, "N", "completions returned"),
    PL_FLAG_ROW_I32(gen_opts, "best-of", 0, p.best_of, 1, 64, "N", "completions generated"),
    PL_FLAG_ROW_FN("beam-width", 0, set_beam, 0, "W", "beam search with W beams"),
    PL_FLAG_ROW_F32(gen_opts, "length-penalty", 0, p.length_penalty, -10, 10, "L",
     "beam search's length penalty"),
    PL_FLAG_ROW_FN("stop", 0, add_stop, 0, "STR", "stop string (repeatable)"),
    PL_FLAG_ROW_SET(gen_opts, "ignore-eos", 0, p.ignore_eos,
     "do not stop at end-of-generation tokens"),
    PL_FLAG_ROW_I32(gen_opts, "min-tokens", 0, p.min_tokens, 0, 1 << 24, "N", "no stop before N tokens"),
    PL_FLAG_ROW_I32(gen_opts, "logprobs", 0, p.logprobs, 0, 20, "K",
     "top K log-probabilities of each generated token"),
    PL_FLAG_ROW_I32(gen_opts, "prompt-logprobs", 0, p.prompt_logprobs, 0, 20, "K",
     "top K log-probabilities of each prompt token"),
    CONSTRAINT("json-schema", "FILE", PL_CONSTRAINT_JSON_SCHEMA,
               "structured output: the text is JSON valid against the\nschema in FILE "
               "(docs/SERVER.md: the subset)"),
    CONSTRAINT("json-object", NULL, PL_CONSTRAINT_JSON_OBJECT, "... any JSON object"),
    CONSTRAINT("regex", "RE", PL_CONSTRAINT_REGEX, "... the whole text matches RE"),
    CONSTRAINT("grammar", "FILE", PL_CONSTRAINT_GRAMMAR, "... the GBNF grammar in FILE (rule root)"),
    CONSTRAINT("choice", "STR", PL_CONSTRAINT_CHOICE, "... one of these strings (repeatable)"),
    PL_FLAG_ROW_SET(gen_opts, "json", 0, json, "one JSON object per completion on stdout"),
    PL_FLAG_ROW_SET(gen_opts, "verbose", 'v', verbose,
     "model, KV cache and speed details on stderr"),
};

#undef CONSTRAINT

static const pl_flag_cmd GENERATE = {
    "generate",
    "usage: pagellm generate -m MODEL (-p TEXT | --prompt-ids 1,2,3) [options]\n"
    "       pagellm generate -m MODEL --input prompts.jsonl --output results.jsonl\n",
    NULL, GEN_FLAGS, sizeof GEN_FLAGS / sizeof GEN_FLAGS[0], offsetof(gen_opts, eng), 0};

static int parse(int argc, char **argv, gen_opts *o) {
    memset(o, 0, sizeof *o);
    pl_engine_config_default(&o->eng);
    pl_request_params_default(&o->p);
    o->p.max_tokens = 128;
    int first, rc = pl_flags_parse(&GENERATE, argc, argv, o, &first);
    if (rc == PL_FLAGS_HELP) exit(0);
    if (rc) return rc;
    o->p.stop = o->stops;
    int modes = (o->prompt != NULL) + (o->prompt_ids != NULL) + (o->input != NULL);
    if (!o->model || modes != 1 || (o->input != NULL) != (o->output != NULL)) {
        fprintf(stderr, "pagellm generate: need -m MODEL and exactly one of -p, --prompt-ids, "
                        "or --input with --output\n");
        pl_flags_usage(&GENERATE, stderr);
        return 2;
    }
    if (o->p.best_of && o->p.best_of < o->p.n) {
        fprintf(stderr, "pagellm generate: --best-of must be at least --n\n");
        return 2;
    }
    return 0;
}

/* [[id, logprob], ...]: the top k, then the chosen token if it is not among them (as vLLM). */
static json_t *top_list(const pl_token_logprob *top, int32_t k) {
    json_t *a = json_array();
    int have = 0;
    for (int32_t i = 0; i < k; i++) {
        json_array_append_new(a, json_pack("[i,f]", top[i].id, (double)top[i].logprob));
        have |= top[i].id == top[k].id;
    }
    if (!have) json_array_append_new(a, json_pack("[i,f]", top[k].id, (double)top[k].logprob));
    return a;
}

json_t *pl_gen_choice_json(const pl_server_choice *c, int with_logprobs) {
    json_t *ids = json_array(), *lp = with_logprobs ? json_array() : json_null();
    for (int32_t i = 0; i < c->n; i++) {
        json_array_append_new(ids, json_integer(c->ids[i]));
        if (with_logprobs && c->top)
            json_array_append_new(lp, top_list(c->top + (size_t)i * (c->n_top + 1), c->n_top));
    }
    size_t len;
    char *text = pl_server_utf8_sanitize(c->text ? c->text : "", c->len, &len);
    const char *fin = pl_finish_reason_name(c->finish);
    json_t *o = json_pack("{s:o,s:s%,s:s,s:o,s:o}", "ids", ids, "text", text, len,
                          "finish_reason", fin ? fin : "length", "logprobs", lp,
                          "cumulative_logprob",
                          isnan(c->cum_logprob) ? json_null() : json_real(c->cum_logprob));
    free(text);
    return o;
}

json_t *pl_gen_prompt_logprobs_json(const pl_request_output *o) {
    if (!o->prompt_top || o->n_prompt_top <= 0) return json_null();
    json_t *a = json_array();
    json_array_append_new(a, json_null());
    for (int32_t i = 1; i < o->n_prompt_tokens; i++)
        json_array_append_new(a, top_list(o->prompt_top + (size_t)i * (o->n_prompt_top + 1),
                                          o->n_prompt_top));
    return a;
}

static void print_stats(pl_engine *e, double secs, int64_t prompt, int64_t generated) {
    pl_engine_stats s;
    pl_engine_get_stats(e, &s);
    pl_engine_kv_samples ks;
    pl_engine_get_kv_samples(e, &ks);
    fprintf(stderr, "%lld prompt tokens computed, %lld generated in %.3f s (%.1f tokens/s); "
            "%llu steps, %llu preemptions (%llu by swapping)\n", (long long)prompt,
            (long long)generated, secs, secs > 0 ? (double)generated / secs : 0.0,
            (unsigned long long)s.steps, (unsigned long long)s.preemptions,
            (unsigned long long)s.swaps_out);
    fprintf(stderr, "KV: %d blocks; over the run: peak %.2f%% used (%d blocks), mean %.2f%%; "
            "waste mean %.2f%%, peak %.2f%%; now %d used, %d cached; prefix cache: %llu of %llu "
            "prompt tokens hit\n", s.blocks_total, 100 * ks.peak_kv_usage, ks.peak_blocks_used,
            100 * ks.mean_kv_usage, 100 * ks.mean_waste, 100 * ks.peak_waste, s.blocks_used,
            s.blocks_cached, (unsigned long long)s.prefix_hits,
            (unsigned long long)s.prefix_queries);
    if (s.sliding_window > 0)
        fprintf(stderr, "sliding window %d: %llu blocks returned to the pool as their tokens "
                "left it\n", s.sliding_window, (unsigned long long)s.window_freed_blocks);
    if (s.spec_drafts || s.spec_off_steps)
        fprintf(stderr, "speculative decoding: %llu of %llu proposals accepted (%.1f%%), mean "
                "accepted length %.2f tokens per sequence-step, %llu steps too large to "
                "speculate\n", (unsigned long long)s.spec_accepted_tokens,
                (unsigned long long)s.spec_draft_tokens,
                s.spec_draft_tokens ? 100.0 * s.spec_accepted_tokens / s.spec_draft_tokens : 0.0,
                s.spec_drafts ? 1.0 + (double)s.spec_accepted_tokens / s.spec_drafts : 0.0,
                (unsigned long long)s.spec_off_steps);
}


static int run_single(pl_engine *e, gen_opts *o) {
    int32_t *ids = NULL;
    int n_ids = 0;
    if (o->prompt_ids && pl_arg_int_list(C, "--prompt-ids", o->prompt_ids, &ids, &n_ids)) return 2;
    uint64_t id;
    double t0 = pl_clock_now();
    if (pl_engine_add_request(e, o->prompt, ids, (size_t)n_ids, &o->p, &id) != PL_OK) {
        free(ids);
        return pl_cli_fail(C, "%s", pl_last_error());
    }
    free(ids);
    int32_t n = o->p.n;
    pl_server_choice *ch = calloc((size_t)n, sizeof *ch);
    json_t *prompt_ids = NULL, *prompt_lp = NULL;
    int rc = 0, done = 0, streamed = !o->json && n == 1;
    char *error = NULL;
    if (streamed && o->prompt) fputs(o->prompt, stdout);
    while (!done) {
        pl_request_output *out;
        while (pl_engine_poll(e, id, 0, &out) == PL_OK) {
            if (out->prompt_ids) {
                prompt_ids = json_array();
                for (int32_t i = 0; i < out->n_prompt_tokens; i++)
                    json_array_append_new(prompt_ids, json_integer(out->prompt_ids[i]));
                prompt_lp = pl_gen_prompt_logprobs_json(out);
            }
            for (int32_t i = 0; i < out->n_deltas; i++) {
                const pl_completion_delta *d = &out->deltas[i];
                if (d->index < 0 || d->index >= n) continue;
                pl_server_choice_add(&ch[d->index], d);
                if (streamed) fwrite(d->text, 1, d->text_len, stdout), fflush(stdout);
            }
            done = out->finished;
            if (out->error) error = strdup(out->error);
            pl_request_output_destroy(out);
            if (done) break;
        }
        if (!done && pl_engine_step(e) != PL_OK) {
            rc = pl_cli_fail(C, "%s", pl_last_error());
            break;
        }
    }
    double secs = pl_clock_now() - t0;
    if (error) {
        rc = pl_cli_fail(C, "%s", error);
    } else if (rc == 0 && o->json) {
        for (int32_t k = 0; k < n; k++) {
            json_t *obj = pl_gen_choice_json(&ch[k], o->p.logprobs >= 0);
            json_object_set(obj, "prompt_ids", prompt_ids ? prompt_ids : json_null());
            json_object_set(obj, "prompt_logprobs", prompt_lp ? prompt_lp : json_null());
            char *s = json_dumps(obj, JSON_COMPACT | JSON_ENSURE_ASCII);
            puts(s);
            free(s);
            json_decref(obj);
        }
    } else if (rc == 0) {
        for (int32_t k = 0; k < n && !streamed; k++) printf("[%d] %s\n", k, ch[k].text ? ch[k].text : "");
        if (streamed) putchar('\n');
    }
    if (o->verbose && rc == 0) {
        int64_t gen = 0;
        for (int32_t k = 0; k < n; k++) gen += ch[k].n;
        print_stats(e, secs, (int64_t)json_array_size(prompt_ids), gen);
    }
    for (int32_t k = 0; k < n; k++) pl_server_choice_destroy(&ch[k]);
    free(ch);
    free(error);
    json_decref(prompt_ids);
    json_decref(prompt_lp);
    return rc;
}

int pl_cmd_generate(int argc, char **argv) {
    gen_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) {
        free(o.constraint_file);
        return rc;
    }
    if (o.input && o.constraint_arg) {
        free(o.constraint_file);
        fprintf(stderr, "pagellm generate: --%s applies to -p / --prompt-ids, not --input\n",
                o.constraint_arg);
        return 2;
    }
    char path[4096];
    pl_engine *e;
    if (pl_cli_resolve_model(o.model, path, sizeof path)) {
        free(o.constraint_file);
        return 1;
    }
    o.eng.model_path = path;
    if (pl_cli_engine_create("generate", &o.eng, o.verbose, &e) != PL_OK) {
        free(o.constraint_file);
        return pl_cli_fail(C, "%s", pl_last_error());
    }
    if (o.verbose) {
        pl_engine_stats s;
        pl_engine_get_stats(e, &s);
        fprintf(stderr, "model: %s\nKV cache: %d blocks of %d tokens, %s, max model length %d\n"
                "kernels: %s%s%s\n", path, s.blocks_total, pl_engine_get_config(e)->block_size,
                pl_kv_cache_dtype_name(o.eng.kv_cache_f32 ? PL_KV_CACHE_F32 : o.eng.kv_cache_dtype), pl_engine_max_model_len(e),
                pl_isa_name(pl_cpu_isa()),
                pl_cpu_isa() == PL_ISA_AVX512 && !pl_cpu_avx512bf16() ? " (no AVX512-BF16: bf16 runs AVX2's)" : "",
                pl_cpu_amx() ? " + AMX" : "");
        char why[256];
        if (o.eng.threads > 0) snprintf(why, sizeof why, "%d (-t)", o.eng.threads);
        else pl_default_threads(why, sizeof why);
        fprintf(stderr, "threads: %s\n", why);
    }
    if (o.input) {
        double t0 = pl_clock_now();
        rc = pl_gen_batch(e, o.input, o.output, o.verbose);
        if (o.verbose && rc != 2) { /* the same totals as one prompt, over the whole batch */
            pl_engine_stats s;
            pl_engine_get_stats(e, &s);
            print_stats(e, pl_clock_now() - t0, (int64_t)s.prompt_tokens,
                        (int64_t)s.generation_tokens);
        }
    } else {
        rc = run_single(e, &o);
    }
    if (o.verbose) pl_cli_dist_report(0);
    pl_engine_destroy(e);
    free(o.constraint_file);
    return rc;
}
