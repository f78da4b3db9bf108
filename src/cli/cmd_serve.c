/* cli/cmd_serve — `pagellm serve`: the OpenAI-compatible HTTP server (flags as `vllm serve`).
 *
 * SIGINT and SIGTERM are blocked in every thread (they inherit the mask) and taken by the main
 * thread with sigwait, which then stops the server gracefully: stop accepting, let in-flight
 * requests finish for --shutdown-timeout seconds, abort the rest, exit 0. In the fault-injection
 * build (-DPL_FAULT_INJECT=ON, tests/fault) SIGUSR1 is taken there too and stops the failures.
 */
#include "cli/args.h"
#include "base/fault.h"
#include "cli/cli.h"
#include "parallel/parallel.h"
#include "cli/engine_flags.h"
#include "cli/flags.h"
#include "kv/cache.h"

#include "pagellm.h"
#include "server/server.h"

#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *C = "serve";

enum { MAX_LORA = 64 };

typedef struct {
    const char *model;
    pl_server_config srv;
    pl_engine_config eng;
    const char *lora[MAX_LORA];    /* --lora NAME=PATH, as given */
    int n_lora, enable_lora;
    int32_t max_lora_rank;
} serve_opts;

static int set_max_request_bytes(const char *cmd, const pl_flag *f, const char *arg, void *opts) {
    serve_opts *o = opts;
    uint64_t b;
    (void)f;
    if (pl_arg_bytes(cmd, "--max-request-bytes", arg, &b)) return 2;
    if (b < 64 || b > (1ull << 32)) {
        fprintf(stderr, "pagellm %s: --max-request-bytes: must be in [64, 4G]\n", cmd);
        return 2;
    }
    o->srv.max_request_bytes = (size_t)b;
    return 0;
}

static int set_shutdown_timeout(const char *cmd, const pl_flag *f, const char *arg, void *opts) {
    (void)f;
    return pl_arg_float(cmd, "--shutdown-timeout", arg, 0, 3600,
                        &((serve_opts *)opts)->srv.shutdown_grace) ? 2 : 0;
}

static int set_reasoning_parser(const char *cmd, const pl_flag *f, const char *arg, void *opts) {
    pl_reasoning_format rf;
    (void)f;
    if (pl_reasoning_parser_by_name(arg, &rf)) {
        fprintf(stderr, "pagellm %s: --reasoning-parser: unknown parser '%s' (qwen3, deepseek_r1, "
                "mistral, gpt_oss, gemma4, none)\n", cmd, arg);
        return 2;
    }
    ((serve_opts *)opts)->srv.reasoning_parser = arg;
    return 0;
}

static int set_pooling(const char *cmd, const pl_flag *f, const char *arg, void *opts) {
    static const char *const names[] = {"mean", "cls", "last"}; /* pooling 1, 2, 3 */
    (void)f;
    for (int i = 0; i < 3; i++)
        if (!strcmp(arg, names[i])) {
            ((serve_opts *)opts)->eng.pooling = i + 1;
            return 0;
        }
    fprintf(stderr, "pagellm %s: --pooling: '%s' is not mean, cls or last\n", cmd, arg);
    return 2;
}

/* --lora NAME=PATH and vLLM's --lora-modules NAME=PATH (its further values: see parse). */
static int add_lora(const char *cmd, const pl_flag *f, const char *arg, void *opts) {
    serve_opts *o = opts;
    const char *eq = strchr(arg, '=');
    (void)f;
    if (!eq || eq == arg || !eq[1] || eq - arg > 127) {
        fprintf(stderr, "pagellm %s: --lora: '%s' is not NAME=PATH (a name of 1 to 127 bytes)\n",
                cmd, arg);
        return 2;
    }
    if (o->n_lora == MAX_LORA) {
        fprintf(stderr, "pagellm %s: --lora: at most %d adapters at start\n", cmd, MAX_LORA);
        return 2;
    }
    o->lora[o->n_lora++] = arg;
    return 0;
}

/* vLLM's global --seed: seeds are per request here, so it is accepted and ignored (warning). */
static int ignore_seed(const char *cmd, const pl_flag *f, const char *arg, void *opts) {
    (void)f;
    serve_opts *o = opts;
    return pl_engine_flag_apply_named(cmd, "--seed", PL_OPT_IGNORED, arg, &o->eng);
}

static const pl_flag SERVE_FLAGS[] = {
    PL_FLAG_ROW_STR(serve_opts, "model", 'm', model, "MODEL",
     "GGUF path or bare name (./models, $PAGELLM_MODELS,\n../shared/models); also accepted as "
     "the first\npositional argument, as `vllm serve MODEL`"),
    PL_FLAG_ROW_STR(serve_opts, "host", 0, srv.host, "HOST", "bind address (default 127.0.0.1)"),
    PL_FLAG_ROW_I32(serve_opts, "port", 0, srv.port, 0, 65535, "PORT",
     "TCP port (default 8000; 0 = any free port)"),
    PL_FLAG_ROW_STR(serve_opts, "served-model-name", 0, srv.served_model_name, "NAME",
     "the model's name in the API (default: MODEL)"),
    PL_FLAG_ROW_STR(serve_opts, "api-key", 0, srv.api_key, "KEY",
     "require 'Authorization: Bearer KEY' on /v1/*\n(or set PAGELLM_API_KEY)"),
    PL_FLAG_ROW_FN("max-request-bytes", 0, set_max_request_bytes, 0, "B",
     "largest request body, e.g. 1M (default 4M)"),
    PL_FLAG_ROW_I32(serve_opts, "max-logprobs", 0, srv.max_logprobs, 0, PL_MAX_LOGPROBS, "N",
     "bound of logprobs/top_logprobs (0..20, default 20)"),
    PL_FLAG_ROW_I32(serve_opts, "max-waiting", 0, eng.max_waiting, 0, INT32_MAX, "N",
     "queue bound; beyond it requests get 503\n(default 1024, 0 = unbounded)"),
    PL_FLAG_ROW_FN("shutdown-timeout", 0, set_shutdown_timeout, 0, "S",
     "seconds in-flight requests may finish on SIGINT/\nSIGTERM before they are aborted "
     "(default 10)"),
    PL_FLAG_ROW_SET(serve_opts, "no-webui", 0, srv.no_webui,
     "no web page at / (chat playground, KV cache view)"),
    PL_FLAG_ROW_FN("reasoning-parser", 0, set_reasoning_parser, 0, "NAME",
     "split the thinking into reasoning_content: qwen3,\ndeepseek_r1, mistral, gpt_oss, gemma4, "
     "none (default:\nfrom the chat template's tags)"),
    PL_FLAG_ROW_STR(serve_opts, "chat-template", 0, srv.chat_template_path, "FILE",
     "Jinja chat template to use instead of the model's\n(tokenizer.chat_template; ChatML when "
     "it has none)"),
    PL_FLAG_ROW_FN("pooling", 0, set_pooling, 0, "mean|cls|last",
     "POST /v1/embeddings from a generation model: its\nfinal-normed hidden states pooled (as "
     "llama.cpp's\n--pooling); an embedding model (bert) pools as its\nGGUF says unless this is "
     "given"),
    PL_FLAG_ROW_FN("lora", 0, add_lora, 0, "NAME=PATH",
     "serve a LoRA adapter (GGUF, as llama.cpp's\nconvert_lora_to_gguf.py writes it) as model "
     "NAME;\nrepeatable; also vLLM's --lora-modules NAME=PATH\n[NAME=PATH ...]"),
    PL_FLAG_ROW_FN("lora-modules", 0, add_lora, 0, "NAME=PATH", NULL),
    PL_FLAG_ROW_SET(serve_opts, "enable-lora", 0, enable_lora,
     "allow adapters (implied by --lora)"),
    PL_FLAG_ROW_I32(serve_opts, "max-lora-rank", 0, max_lora_rank, 1, 1024, "N",
     "the largest adapter rank (default 16)"),
    PL_FLAG_ROW_SET(serve_opts, "allow-runtime-lora-updating", 0, srv.allow_runtime_lora,
     "POST /v1/load_lora_adapter and\n/v1/unload_lora_adapter (also\n"
     "VLLM_ALLOW_RUNTIME_LORA_UPDATING=true)"),
    PL_FLAG_ROW_FN("seed", 0, ignore_seed, 0, "N", NULL),
};

static const pl_flag_cmd SERVE = {
    "serve", "usage: pagellm serve -m MODEL [options]\n", NULL, SERVE_FLAGS,
    sizeof SERVE_FLAGS / sizeof SERVE_FLAGS[0], offsetof(serve_opts, eng),
    1 << 20 /* the model, and --lora-modules' further values: checked below */};

static int parse(int argc, char **argv, serve_opts *o) {
    memset(o, 0, sizeof *o);
    pl_server_config_default(&o->srv);
    pl_engine_config_default(&o->eng);
    o->eng.max_waiting = 1024;
    /* As `vllm serve`: the KV cache takes a share of the memory left after the weights (0.5 by
     * default; --gpu-memory-utilization), unless --kv-cache-memory(-bytes) gives a size. */
    o->eng.kv_cache_memory_fraction = 0.5;
    o->srv.api_key = getenv("PAGELLM_API_KEY");
    int i, rc = pl_flags_parse(&SERVE, argc, argv, o, &i);
    if (rc) return rc;
    /* vLLM's --lora-modules takes several NAME=PATH after one flag: getopt leaves the others here */
    for (; i < argc; i++) {
        if (o->n_lora && o->n_lora < MAX_LORA && strchr(argv[i], '=') > argv[i])
            o->lora[o->n_lora++] = argv[i];
        else if (!o->model)
            o->model = argv[i];
        else {
            fprintf(stderr, "pagellm serve: unexpected argument '%s'\n", argv[i]);
            pl_flags_usage(&SERVE, stderr);
            return 2;
        }
    }
    const char *rt = getenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING");
    if (rt && (!strcmp(rt, "1") || !strcasecmp(rt, "true"))) o->srv.allow_runtime_lora = 1;
    if (o->n_lora || o->enable_lora || o->srv.allow_runtime_lora || o->max_lora_rank)
        o->eng.max_lora_rank = o->max_lora_rank ? o->max_lora_rank : 16; /* vLLM's default */
    if (!o->model) {
        fprintf(stderr, "pagellm serve: no model given (-m MODEL)\n");
        pl_flags_usage(&SERVE, stderr);
        return 2;
    }
    return 0;
}

int pl_cmd_serve(int argc, char **argv) {
    serve_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc == PL_FLAGS_HELP ? 0 : rc;
    char path[4096];
    if (pl_cli_resolve_model(o.model, path, sizeof path)) return 1;
    o.eng.model_path = path;
    /* Default name: the -m argument, or for a path its file name without ".gguf" (clients then
     * say "stories260K", whichever way the model was found). */
    char name[256];
    if (!o.srv.served_model_name) {
        const char *base = strrchr(o.model, '/') ? strrchr(o.model, '/') + 1 : o.model;
        size_t n = strlen(base);
        if (n > 5 && !strcmp(base + n - 5, ".gguf")) n -= 5;
        snprintf(name, sizeof name, "%.*s", (int)(n < 255 ? n : 255), base);
        o.srv.served_model_name = name;
    }
    o.srv.model_path = path;

    /* Block the stop signals before any thread exists so only sigwait below takes them. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    if (pl_fault_enabled()) sigaddset(&stop, SIGUSR1); /* the fault build: disarm (below) */
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);

    pl_engine *e;
    if (pl_cli_engine_create(C, &o.eng, 0, &e) != PL_OK) return pl_cli_fail(C, "%s", pl_last_error());
    for (int i = 0; i < o.n_lora; i++) { /* NAME=PATH, checked against the model */
        char nm[128];
        const char *eq = strchr(o.lora[i], '=');
        snprintf(nm, sizeof nm, "%.*s", (int)(eq - o.lora[i]), o.lora[i]);
        if (!strcmp(nm, o.srv.served_model_name) ||
            pl_engine_load_lora(e, nm, eq + 1, 1.0f) != PL_OK) {
            int r = !strcmp(nm, o.srv.served_model_name)
                        ? pl_cli_fail(C, "--lora %s: the name is the base model's", nm)
                        : pl_cli_fail(C, "--lora %s: %s", nm, pl_last_error());
            pl_engine_destroy(e);
            return r;
        }
        printf("LoRA adapter: %s (%s)\n", nm, eq + 1);
    }
    pl_engine_stats st;
    pl_engine_get_stats(e, &st);
    printf("model: %s (%s), max model length %d, vocabulary %d\n", o.srv.served_model_name, path,
           pl_engine_max_model_len(e), pl_engine_n_vocab(e));
    const pl_engine_config *ec = pl_engine_get_config(e);
    char why[96] = "";
    if (!o.eng.kv_cache_memory)
        snprintf(why, sizeof why, " (gpu-memory-utilization %g of the RAM available after the "
                 "weights)", ec->kv_cache_memory_fraction);
    static const char *const pools[] = {"", "mean", "cls", "last"};
    int32_t pool = pl_engine_pooling(e);
    if (pool > 0 && pool < 4 && !pl_engine_embedding_only(e))
        printf("embeddings: POST /v1/embeddings pools the final hidden states (%s, %d "
               "dimensions)\n", pools[pool], pl_engine_n_embd(e));
    if (pool == 4) {
        printf("reranking model (a cross-encoder, %d score%s per pair): POST /v1/rerank, /rerank, "
               "/v2/rerank and /v1/score; no KV cache\n", pl_engine_n_embd(e),
               pl_engine_n_embd(e) == 1 ? "" : "s");
    } else if (pool > 0 && pool < 4 && pl_engine_embedding_only(e)) {
        printf("embedding model (pooling %s, %d dimensions): POST /v1/embeddings only; no KV "
               "cache (each input attends over its own tokens in one step)\n", pools[pool],
               pl_engine_n_embd(e));
    } else {
        printf("KV cache: %d blocks of %d tokens (%d tokens), %s, %.1f MiB budget%s; swap %d "
               "blocks; prefix caching %s\n", st.blocks_total, ec->block_size,
               st.blocks_total * ec->block_size,
               pl_kv_cache_dtype_name(ec->kv_cache_f32 ? PL_KV_CACHE_F32 : ec->kv_cache_dtype),
               (double)ec->kv_cache_memory / (1 << 20), why, st.swap_total,
               ec->enable_prefix_caching ? "on" : "off");
        if (pl_kv_layout_mode_maps_pages(ec->kv_layout))
            printf("KV layout vattention: %d request slots, pages of %llu bytes (a block is a "
                   "page), mapper thread: overlap %s, deferred reclamation %s, eager %s, "
                   "sharing %s\n",
                   ec->max_num_seqs, (unsigned long long)ec->kv_page_size,
                   ec->vattn_no_overlap ? "off" : "on", ec->vattn_no_deferred_reclaim ? "off" : "on",
                   ec->vattn_no_eager ? "off" : "on", ec->vattn_share ? "on" : "off");
    }
    if (pl_dist_active())
        printf("tensor parallel: %d processes, each holding 1/%d of every layer and of the KV "
               "heads (the KV budget above is per process)\n", pl_dist_size(), pl_dist_size());
    if (ec->speculative_model || ec->speculative_ngram) {
        char off[48] = "never off";
        if (ec->speculative_max_batch > 0)
            snprintf(off, sizeof off, "off above %d decoding sequences", ec->speculative_max_batch);
        printf("speculative decoding: %s%s, %d proposals per sequence and step, %s\n",
               ec->speculative_model ? "draft model " : "n-gram proposals",
               ec->speculative_model ? ec->speculative_model : "", ec->num_speculative_tokens, off);
    }
    pl_server *s;
    if (pl_server_start(e, &o.srv, &s) != PL_OK) {
        int r = pl_cli_fail(C, "%s", pl_last_error());
        pl_engine_destroy(e);
        return r;
    }
    const char *host = o.srv.host;
    int v6 = strchr(host, ':') != NULL;
    printf("serving %s on http://%s%s%s:%d (API key %s)\n", o.srv.served_model_name,
           v6 ? "[" : "", host, v6 ? "]" : "", pl_server_port(s),
           o.srv.api_key && *o.srv.api_key ? "required" : "not required");
    if (!o.srv.no_webui)
        printf("web page: http://%s%s%s:%d/ (chat playground, KV cache view)\n", v6 ? "[" : "",
               host, v6 ? "]" : "", pl_server_port(s));
    /* The fault-injection build (tests/fault) fails allocations from here on: serving must
     * survive them; loading was tested on its own. SIGUSR1 stops the failures, so the test can
     * see that the server serves correctly once allocations succeed again. */
    if (pl_fault_enabled()) pl_fault_arm();
    int sig = 0;
    while (sigwait(&stop, &sig) == 0 && sig == SIGUSR1) {
        pl_fault_disarm();
        printf("fault injection: disarmed (SIGUSR1) after %llu of %llu calls failed\n",
               (unsigned long long)pl_fault_failed(), (unsigned long long)pl_fault_calls());
        fflush(stdout);
    }
    /* Tensor parallel: mpirun sends SIGTERM when another rank died; a step waiting on it gives up
     * 0.3 s later and fails its requests with the reason, so the drain below can answer them. */
    if (pl_dist_active()) pl_dist_cancel();
    printf("received %s: shutting down (grace %.0f s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
           o.srv.shutdown_grace);
    pl_server_stop(s, o.srv.shutdown_grace);
    pl_engine_destroy(e);
    if (pl_fault_enabled())
        printf("fault injection: %llu of %llu calls failed\n",
               (unsigned long long)pl_fault_failed(), (unsigned long long)pl_fault_calls());
    printf("stopped\n");
    return 0;
}
