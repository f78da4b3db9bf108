/* cli/cmd_generate — `pagellm generate`: one prompt, one completion, through the paged KV cache.
 *
 * The prompt is prefilled in chunks, then tokens are decoded one at a time; the sequence's KV
 * lives in blocks of a pl_kv_store addressed through its block table (here the trivial table
 * 0, 1, 2, ...: one sequence needs no sharing; the engine's block manager replaces it).
 */
#include "cli/args.h"
#include "cli/cli.h"

#include "base/log.h"
#include "base/rng.h"
#include "engine/sampler.h"
#include "engine/stop.h"
#include "model/model.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_STOPS = 16, PREFILL_CHUNK = 256 };

typedef struct {
    const char *model, *prompt, *prompt_ids;
    int64_t max_tokens, logprobs, prompt_logprobs, block_size, threads, seed;
    int has_seed, ignore_eos, json, verbose;
    uint64_t kv_bytes;
    const char *kv_dtype;
    pl_sampling_params sp;
    const char *stops[MAX_STOPS];
    int n_stops;
} gen_opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: pagellm generate -m MODEL (-p TEXT | --prompt-ids 1,2,3) [options]\n"
            "  -m, --model MODEL          GGUF path or bare name (./models, $PAGELLM_MODELS,\n"
            "                             ../shared/models)\n"
            "  -p, --prompt TEXT          prompt text (BOS added when the model says so)\n"
            "      --prompt-ids IDS       prompt token ids, comma-separated (nothing added)\n"
            "  -n, --max-tokens N         tokens to generate (default 128)\n"
            "      --temperature T        0 = greedy (default 1.0)\n"
            "      --top-k K  --top-p P  --min-p P\n"
            "      --repetition-penalty R  --presence-penalty P  --frequency-penalty F\n"
            "      --seed S               seed of this request's sampler\n"
            "      --stop STR             stop string (repeatable)\n"
            "      --ignore-eos           do not stop at end-of-generation tokens\n"
            "      --logprobs K           top K log-probabilities of each generated token\n"
            "      --prompt-logprobs K    top K log-probabilities of each prompt token\n"
            "      --json                 one JSON object per completion on stdout\n"
            "      --block-size N         KV block size in tokens (power of two, 1..256; 16)\n"
            "      --kv-cache-memory B    KV cache budget, e.g. 512M (default 1G)\n"
            "      --kv-cache-dtype T     f16 (default) or f32\n"
            "  -t, --threads N            worker threads (default: one per core)\n"
            "  -v, --verbose              print model, KV and speed details to stderr\n");
}

static int parse(int argc, char **argv, gen_opts *o) {
    static const struct option longopts[] = {
        {"model", required_argument, 0, 'm'},      {"prompt", required_argument, 0, 'p'},
        {"prompt-ids", required_argument, 0, 1},   {"max-tokens", required_argument, 0, 'n'},
        {"temperature", required_argument, 0, 2},  {"top-k", required_argument, 0, 3},
        {"top-p", required_argument, 0, 4},        {"min-p", required_argument, 0, 5},
        {"repetition-penalty", required_argument, 0, 6},
        {"presence-penalty", required_argument, 0, 7},
        {"frequency-penalty", required_argument, 0, 8},
        {"seed", required_argument, 0, 9},         {"stop", required_argument, 0, 10},
        {"ignore-eos", no_argument, 0, 11},        {"logprobs", required_argument, 0, 12},
        {"prompt-logprobs", required_argument, 0, 13},
        {"json", no_argument, 0, 14},              {"block-size", required_argument, 0, 15},
        {"kv-cache-memory", required_argument, 0, 16},
        {"kv-cache-dtype", required_argument, 0, 17},
        {"threads", required_argument, 0, 't'},    {"verbose", no_argument, 0, 'v'},
        {"help", no_argument, 0, 'h'},             {0, 0, 0, 0}};
    const char *C = "generate";
    int64_t iv;
    double dv;
    memset(o, 0, sizeof *o);
    o->max_tokens = 128;
    o->block_size = 16;
    o->kv_bytes = 1ull << 30;
    o->kv_dtype = "f16";
    pl_sampling_params_default(&o->sp);
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":m:p:n:t:vh", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'p': o->prompt = optarg; break;
        case 1: o->prompt_ids = optarg; break;
        case 'n':
            if (pl_arg_int(C, "--max-tokens", optarg, 0, 1 << 24, &o->max_tokens)) return 2;
            break;
        case 2:
            if (pl_arg_float(C, "--temperature", optarg, 0, 100, &dv)) return 2;
            o->sp.temperature = (float)dv;
            break;
        case 3:
            if (pl_arg_int(C, "--top-k", optarg, -1, INT32_MAX, &iv)) return 2;
            o->sp.top_k = (int32_t)iv;
            break;
        case 4:
            if (pl_arg_float(C, "--top-p", optarg, 1e-9, 1, &dv)) return 2;
            o->sp.top_p = (float)dv;
            break;
        case 5:
            if (pl_arg_float(C, "--min-p", optarg, 0, 1, &dv)) return 2;
            o->sp.min_p = (float)dv;
            break;
        case 6:
            if (pl_arg_float(C, "--repetition-penalty", optarg, 1e-6, 100, &dv)) return 2;
            o->sp.repetition_penalty = (float)dv;
            break;
        case 7:
            if (pl_arg_float(C, "--presence-penalty", optarg, -2, 2, &dv)) return 2;
            o->sp.presence_penalty = (float)dv;
            break;
        case 8:
            if (pl_arg_float(C, "--frequency-penalty", optarg, -2, 2, &dv)) return 2;
            o->sp.frequency_penalty = (float)dv;
            break;
        case 9:
            if (pl_arg_int(C, "--seed", optarg, 0, INT64_MAX, &o->seed)) return 2;
            o->has_seed = 1;
            break;
        case 10:
            if (o->n_stops == MAX_STOPS) {
                fprintf(stderr, "pagellm generate: at most %d --stop strings\n", MAX_STOPS);
                return 2;
            }
            o->stops[o->n_stops++] = optarg;
            break;
        case 11: o->ignore_eos = 1; break;
        case 12:
            if (pl_arg_int(C, "--logprobs", optarg, 0, 1000, &o->logprobs)) return 2;
            break;
        case 13:
            if (pl_arg_int(C, "--prompt-logprobs", optarg, 0, 1000, &o->prompt_logprobs))
                return 2;
            break;
        case 14: o->json = 1; break;
        case 15:
            if (pl_arg_int(C, "--block-size", optarg, 1, 256, &o->block_size)) return 2;
            if (o->block_size & (o->block_size - 1)) {
                fprintf(stderr, "pagellm generate: --block-size: %lld is not a power of two\n",
                        (long long)o->block_size);
                return 2;
            }
            break;
        case 16:
            if (pl_arg_bytes(C, "--kv-cache-memory", optarg, &o->kv_bytes)) return 2;
            break;
        case 17:
            if (strcmp(optarg, "f16") && strcmp(optarg, "f32")) {
                fprintf(stderr, "pagellm generate: --kv-cache-dtype: '%s' is not f16 or f32\n",
                        optarg);
                return 2;
            }
            o->kv_dtype = optarg;
            break;
        case 't':
            if (pl_arg_int(C, "--threads", optarg, 1, 512, &o->threads)) return 2;
            break;
        case 'v': o->verbose = 1; break;
        case 'h': usage(stdout); exit(0);
        case ':':
            fprintf(stderr, "pagellm generate: %s needs a value\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        default:
            fprintf(stderr, "pagellm generate: unknown option '%s'\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "pagellm generate: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (!o->model || (!o->prompt == !o->prompt_ids)) {
        fprintf(stderr, "pagellm generate: need -m MODEL and exactly one of -p or --prompt-ids\n");
        usage(stderr);
        return 2;
    }
    return 0;
}

/* One sequence: its tokens, KV blocks (identity table) and outputs. */
typedef struct {
    pl_model *model;
    pl_threadpool *tp;
    pl_kv_store kv;
    pl_forward_ctx *fwd;
    pl_sampler *sampler;
    int32_t *block_table;   /* [max_blocks] */
    int32_t max_blocks;
    float *logits;          /* [PREFILL_CHUNK][n_vocab] */
    float *raw;             /* [n_vocab] raw logits kept for log-probabilities */
} gen_state;

static void gen_free(gen_state *g) {
    free(g->logits);
    free(g->raw);
    free(g->block_table);
    pl_sampler_free(g->sampler);
    pl_forward_ctx_free(g->fwd);
    pl_kv_store_free(&g->kv);
    pl_threadpool_destroy(g->tp);
    pl_model_free(g->model);
}

/* Run tokens[0..n) at positions start.. as one step; logits for every row when all_logits,
 * else for the last row only. */
static pl_status run_step(gen_state *g, const int32_t *tokens, int32_t n, int32_t start,
                          int all_logits) {
    int32_t pos[PREFILL_CHUNK], rows[PREFILL_CHUNK];
    int64_t slots[PREFILL_CHUNK];
    int32_t bs = g->kv.layout.block_size;
    for (int32_t i = 0; i < n; i++) {
        pos[i] = start + i;
        slots[i] = (int64_t)g->block_table[pos[i] / bs] * bs + pos[i] % bs;
        rows[i] = i;
    }
    int32_t seq_start[2] = {0, n}, ctx = start + n;
    pl_step_batch b = {
        .n_tokens = n, .token_ids = tokens, .positions = pos, .slot_mapping = slots,
        .n_seqs = 1, .seq_start = seq_start, .context_lens = &ctx,
        .block_tables = g->block_table, .max_blocks = g->max_blocks,
        .n_logits = all_logits ? n : 1, .logit_rows = all_logits ? rows : &rows[n - 1],
    };
    return pl_model_forward(g->fwd, &g->kv, &b, g->logits);
}

static json_t *logprob_list(pl_sampler *s, const float *logits, int32_t k, int32_t actual) {
    pl_token_logprob top[1001];
    float actual_lp = 0;
    pl_top_logprobs(s, logits, k, top, actual, &actual_lp);
    json_t *arr = json_array();
    int have = 0;
    for (int32_t i = 0; i < k; i++) {
        json_array_append_new(arr, json_pack("[i,f]", top[i].id, (double)top[i].logprob));
        have |= top[i].id == actual;
    }
    if (!have && actual >= 0)
        json_array_append_new(arr, json_pack("[i,f]", actual, (double)actual_lp));
    return arr;
}

int pl_cmd_generate(int argc, char **argv) {
    gen_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc;
    char path[4096];
    if (pl_cli_resolve_model(o.model, path, sizeof path)) return 1;

    gen_state g;
    memset(&g, 0, sizeof g);
    int32_t *prompt = NULL, *out_ids = NULL;
    size_t n_prompt = 0;
    char *text = NULL;
    json_t *lp_json = NULL, *plp_json = NULL;
    pl_status st = pl_model_load(path, &g.model);
    if (st != PL_OK) return pl_cli_fail("generate", "%s", pl_last_error());
    const pl_model_hparams *hp = &g.model->hp;
    const pl_tokenizer *tok = g.model->tok;

    if (o.prompt) {
        st = pl_tokenize(tok, o.prompt, strlen(o.prompt), 1, 0, &prompt, &n_prompt);
        if (st != PL_OK) { rc = pl_cli_fail("generate", "prompt: %s", pl_last_error()); goto done; }
    } else {
        int n;
        if (pl_arg_int_list("generate", "--prompt-ids", o.prompt_ids, &prompt, &n)) {
            rc = 2;
            goto done;
        }
        n_prompt = (size_t)n;
        for (int i = 0; i < n; i++)
            if (prompt[i] < 0 || prompt[i] >= hp->n_vocab) {
                rc = pl_cli_fail("generate", "--prompt-ids: token id %d is out of range [0, %d)",
                                 prompt[i], hp->n_vocab);
                goto done;
            }
    }
    if (n_prompt == 0) { rc = pl_cli_fail("generate", "the prompt is empty"); goto done; }
    int64_t total = (int64_t)n_prompt + o.max_tokens;
    if (total > hp->n_ctx_train) {
        rc = pl_cli_fail("generate", "prompt (%zu tokens) + --max-tokens (%lld) = %lld exceeds "
                         "the model's context length %d", n_prompt, (long long)o.max_tokens,
                         (long long)total, hp->n_ctx_train);
        goto done;
    }

    pl_kv_layout layout = {
        .dtype = strcmp(o.kv_dtype, "f32") ? PL_DT_F16 : PL_DT_F32,
        .block_size = (int32_t)o.block_size, .n_kv_heads = hp->n_kv_heads,
        .head_dim = hp->head_dim,
    };
    size_t per_block = pl_kv_bytes_per_block(&layout, hp->n_layers);
    layout.num_blocks = (int64_t)(o.kv_bytes / per_block);
    g.max_blocks = (int32_t)((total + o.block_size - 1) / o.block_size);
    if (layout.num_blocks < g.max_blocks) {
        rc = pl_cli_fail("generate", "--kv-cache-memory %llu bytes holds %lld blocks of %lld "
                         "tokens (%zu bytes each) but this request needs %d",
                         (unsigned long long)o.kv_bytes, (long long)layout.num_blocks,
                         (long long)o.block_size, per_block, g.max_blocks);
        goto done;
    }
    if (layout.num_blocks > g.max_blocks) layout.num_blocks = g.max_blocks; /* one sequence */
    g.tp = pl_threadpool_create((int)o.threads);
    g.block_table = malloc((size_t)g.max_blocks * sizeof(int32_t));
    g.sampler = pl_sampler_create(hp->n_vocab);
    g.logits = malloc((size_t)PREFILL_CHUNK * hp->n_vocab * sizeof(float));
    g.raw = malloc((size_t)hp->n_vocab * sizeof(float));
    out_ids = malloc((size_t)(o.max_tokens + 1) * sizeof(int32_t));
    if (!g.tp || !g.block_table || !g.sampler || !g.logits || !g.raw || !out_ids) {
        rc = pl_cli_fail("generate", "out of memory");
        goto done;
    }
    for (int32_t i = 0; i < g.max_blocks; i++) g.block_table[i] = i;
    if ((st = pl_kv_store_init(&g.kv, &layout, hp->n_layers, NULL)) != PL_OK ||
        (st = pl_forward_ctx_create(g.model, PREFILL_CHUNK, PREFILL_CHUNK, g.tp, &g.fwd)) != PL_OK) {
        rc = pl_cli_fail("generate", "%s", pl_last_error());
        goto done;
    }
    if (o.verbose)
        fprintf(stderr, "model: %s (%s, %d layers, dim %d, vocab %d)\nKV cache: %lld blocks of "
                "%d tokens, %s, %zu bytes\n", path, hp->arch_name, hp->n_layers, hp->dim,
                hp->n_vocab, (long long)layout.num_blocks, layout.block_size, o.kv_dtype,
                (size_t)layout.num_blocks * per_block);

    pl_rng rng;
    pl_rng_seed(&rng, o.has_seed ? (uint64_t)o.seed : (uint64_t)time(NULL) ^ (uint64_t)clock());
    if (o.prompt_logprobs) {
        plp_json = json_array();
        json_array_append_new(plp_json, json_null());
    }
    if (o.logprobs) lp_json = json_array();

    struct timespec t0, t1, t2;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* Prefill in chunks; the last chunk's last row gives the first token's logits. */
    const float *last = NULL;
    for (size_t at = 0; at < n_prompt; at += PREFILL_CHUNK) {
        int32_t n = (int32_t)(n_prompt - at < PREFILL_CHUNK ? n_prompt - at : PREFILL_CHUNK);
        if ((st = run_step(&g, prompt + at, n, (int32_t)at, o.prompt_logprobs > 0)) != PL_OK) {
            rc = pl_cli_fail("generate", "%s", pl_last_error());
            goto done;
        }
        for (int32_t i = 0; o.prompt_logprobs && i < n; i++)
            if (at + i + 1 < n_prompt)
                json_array_append_new(plp_json,
                                      logprob_list(g.sampler, g.logits + (size_t)i * hp->n_vocab,
                                                   (int32_t)o.prompt_logprobs,
                                                   prompt[at + i + 1]));
        last = g.logits + (size_t)(o.prompt_logprobs ? n - 1 : 0) * hp->n_vocab;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);

    /* Decode. The text is built with the streaming detokenizer, so it is always valid UTF-8. */
    size_t text_cap = 4096, text_len = 0, emitted = 0;
    text = malloc(text_cap);
    pl_detok_stream ds;
    pl_detok_init(&ds, tok, 1, 0); /* output follows the prompt: keep its leading space */
    const char *finish = "length";
    int stopped_by_string = 0;
    int32_t n_out = 0;
    if (!o.json && o.prompt) fputs(o.prompt, stdout);
    while (n_out < o.max_tokens) {
        float *lg = (float *)last;
        if (o.logprobs) /* log-probabilities are of the raw logits: keep them before sampling */
            memcpy(g.raw, lg, (size_t)hp->n_vocab * sizeof(float));
        int32_t id = pl_sample(g.sampler, &o.sp, lg, prompt, (int32_t)n_prompt, out_ids, n_out,
                               &rng);
        if (o.logprobs)
            json_array_append_new(lp_json,
                                  logprob_list(g.sampler, g.raw, (int32_t)o.logprobs, id));
        out_ids[n_out++] = id;
        if (!o.ignore_eos && pl_tokenizer_is_eog(tok, id)) {
            finish = "stop";
            break;
        }
        char piece[512];
        size_t plen = pl_detok_push(&ds, id, piece, sizeof piece);
        if (text_len + plen + 1 > text_cap) {
            text_cap = (text_len + plen + 1) * 2;
            text = realloc(text, text_cap);
        }
        memcpy(text + text_len, piece, plen);
        text_len += plen;
        pl_stop_result sr = pl_stop_scan(text, text_len, plen, o.stops, o.n_stops);
        if (sr.found) {
            text_len = sr.match_at;
            finish = "stop";
            stopped_by_string = 1;
            break;
        }
        if (!o.json && sr.safe_len > emitted) {
            fwrite(text + emitted, 1, sr.safe_len - emitted, stdout);
            fflush(stdout);
            emitted = sr.safe_len;
        }
        if (n_out == o.max_tokens) break;
        int32_t pos = (int32_t)n_prompt + n_out - 1;
        if ((st = run_step(&g, &id, 1, pos, 0)) != PL_OK) {
            rc = pl_cli_fail("generate", "%s", pl_last_error());
            goto done;
        }
        last = g.logits;
    }
    if (!stopped_by_string) {
        char tail[16];
        size_t tl = pl_detok_flush(&ds, tail, sizeof tail);
        if (text_len + tl + 1 > text_cap) text = realloc(text, text_len + tl + 1);
        memcpy(text + text_len, tail, tl);
        text_len += tl;
    }
    text[text_len] = '\0';
    clock_gettime(CLOCK_MONOTONIC, &t2);

    if (o.json) {
        json_t *obj = json_object();
        json_t *pids = json_array(), *ids = json_array();
        for (size_t i = 0; i < n_prompt; i++) json_array_append_new(pids, json_integer(prompt[i]));
        for (int32_t i = 0; i < n_out; i++) json_array_append_new(ids, json_integer(out_ids[i]));
        json_object_set_new(obj, "prompt_ids", pids);
        json_object_set_new(obj, "ids", ids);
        json_object_set_new(obj, "text", json_stringn(text, text_len));
        json_object_set_new(obj, "finish_reason", json_string(finish));
        json_object_set_new(obj, "logprobs", lp_json ? lp_json : json_null());
        json_object_set_new(obj, "prompt_logprobs", plp_json ? plp_json : json_null());
        lp_json = plp_json = NULL;
        char *s = json_dumps(obj, JSON_COMPACT | JSON_ENSURE_ASCII);
        puts(s);
        free(s);
        json_decref(obj);
    } else {
        if (text_len > emitted) fwrite(text + emitted, 1, text_len - emitted, stdout);
        fputc('\n', stdout);
    }
    if (o.verbose) {
        double tp = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
        double td = (double)(t2.tv_sec - t1.tv_sec) + (double)(t2.tv_nsec - t1.tv_nsec) * 1e-9;
        fprintf(stderr, "prompt: %zu tokens in %.3f s (%.1f t/s); generated: %d tokens in "
                "%.3f s (%.1f t/s); finish: %s\n", n_prompt, tp, (double)n_prompt / tp, n_out,
                td, n_out / (td > 0 ? td : 1e-9), finish);
        int64_t stored = (int64_t)n_prompt + n_out - 1;
        int64_t used = (stored + o.block_size - 1) / o.block_size;
        fprintf(stderr, "KV: %lld blocks used, %lld tokens stored, waste %.2f%%\n",
                (long long)used, (long long)stored,
                used ? 100.0 * (1.0 - (double)stored / (double)(used * o.block_size)) : 0.0);
    }
done:
    json_decref(lp_json);
    json_decref(plp_json);
    free(text);
    free(out_ids);
    free(prompt);
    gen_free(&g);
    return rc;
}
