/* cli/cmd_serve — `pagellm serve`: the OpenAI-compatible HTTP server (flags as `vllm serve`).
 *
 * SIGINT and SIGTERM are blocked in every thread (they inherit the mask) and taken by the main
 * thread with sigwait, which then stops the server gracefully: stop accepting, let in-flight
 * requests finish for --shutdown-timeout seconds, abort the rest, exit 0.
 */
#include "cli/args.h"
#include "cli/cli.h"

#include "pagellm.h"
#include "server/server.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *C = "serve";

static void usage(FILE *f) {
    fprintf(f,
            "usage: pagellm serve -m MODEL [options]\n"
            "  -m, --model MODEL              GGUF path or bare name (./models, $PAGELLM_MODELS,\n"
            "                                 ../shared/models); also accepted as the first\n"
            "                                 positional argument, as `vllm serve MODEL`\n"
            "      --host HOST                bind address (default 127.0.0.1)\n"
            "      --port PORT                TCP port (default 8000; 0 = any free port)\n"
            "      --served-model-name NAME   the model's name in the API (default: MODEL)\n"
            "      --api-key KEY              require 'Authorization: Bearer KEY' on /v1/*\n"
            "                                 (or set PAGELLM_API_KEY)\n"
            "      --max-request-bytes B      largest request body, e.g. 1M (default 4M)\n"
            "      --max-logprobs N           bound of logprobs/top_logprobs (default 20)\n"
            "      --max-waiting N            queue bound; beyond it requests get 503\n"
            "                                 (default 1024, 0 = unbounded)\n"
            "      --shutdown-timeout S       seconds in-flight requests may finish on SIGINT/\n"
            "                                 SIGTERM before they are aborted (default 10)\n"
            "engine:\n"
            "      --block-size N             KV block size in tokens (power of two; 16)\n"
            "      --kv-cache-memory B        KV cache budget, e.g. 512M (default 1G)\n"
            "      --kv-cache-dtype T         f16 (default) or f32\n"
            "      --swap-space B             swap pool for preempted requests (a bare number\n"
            "                                 is GiB, as vLLM; default 0)\n"
            "      --preemption-mode M        recompute (default) or swap\n"
            "      --max-num-seqs N           sequences per step (default 128)\n"
            "      --max-num-batched-tokens N tokens per step (default 512)\n"
            "      --max-model-len N          prompt + output limit (default: the model's)\n"
            "      --enable-prefix-caching | --no-prefix-caching   (default: enabled)\n"
            "  -t, --threads N                worker threads (default: one per core)\n");
}

typedef struct {
    const char *model;
    pl_server_config srv;
    pl_engine_config eng;
    uint64_t max_request_bytes;
} serve_opts;

enum {
    O_HOST = 256, O_PORT, O_NAME, O_KEY, O_MAXREQ, O_MAXLP, O_MAXWAIT, O_GRACE, O_BLOCK, O_KVMEM,
    O_KVDTYPE, O_SWAP, O_PREEMPT, O_SEQS, O_BATCHED, O_MODELLEN, O_PREFIX_ON, O_PREFIX_OFF,
};

static int parse(int argc, char **argv, serve_opts *o) {
    static const struct option longopts[] = {
        {"model", required_argument, 0, 'm'},
        {"host", required_argument, 0, O_HOST},
        {"port", required_argument, 0, O_PORT},
        {"served-model-name", required_argument, 0, O_NAME},
        {"api-key", required_argument, 0, O_KEY},
        {"max-request-bytes", required_argument, 0, O_MAXREQ},
        {"max-logprobs", required_argument, 0, O_MAXLP},
        {"max-waiting", required_argument, 0, O_MAXWAIT},
        {"shutdown-timeout", required_argument, 0, O_GRACE},
        {"block-size", required_argument, 0, O_BLOCK},
        {"kv-cache-memory", required_argument, 0, O_KVMEM},
        {"kv-cache-dtype", required_argument, 0, O_KVDTYPE},
        {"swap-space", required_argument, 0, O_SWAP},
        {"preemption-mode", required_argument, 0, O_PREEMPT},
        {"max-num-seqs", required_argument, 0, O_SEQS},
        {"max-num-batched-tokens", required_argument, 0, O_BATCHED},
        {"max-model-len", required_argument, 0, O_MODELLEN},
        {"enable-prefix-caching", no_argument, 0, O_PREFIX_ON},
        {"no-prefix-caching", no_argument, 0, O_PREFIX_OFF},
        {"no-enable-prefix-caching", no_argument, 0, O_PREFIX_OFF},
        {"threads", required_argument, 0, 't'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int64_t iv;
    double dv;
    memset(o, 0, sizeof *o);
    pl_server_config_default(&o->srv);
    pl_engine_config_default(&o->eng);
    o->eng.max_waiting = 1024;
    o->srv.api_key = getenv("PAGELLM_API_KEY");
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":m:t:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case O_HOST: o->srv.host = optarg; break;
        case O_PORT:
            if (pl_arg_int(C, "--port", optarg, 0, 65535, &iv)) return 2;
            o->srv.port = (int)iv;
            break;
        case O_NAME: o->srv.served_model_name = optarg; break;
        case O_KEY: o->srv.api_key = optarg; break;
        case O_MAXREQ:
            if (pl_arg_bytes(C, "--max-request-bytes", optarg, &o->max_request_bytes)) return 2;
            if (o->max_request_bytes < 64 || o->max_request_bytes > (1ull << 32)) {
                fprintf(stderr, "pagellm serve: --max-request-bytes: must be in [64, 4G]\n");
                return 2;
            }
            o->srv.max_request_bytes = (size_t)o->max_request_bytes;
            break;
        case O_MAXLP:
            if (pl_arg_int(C, "--max-logprobs", optarg, 0, 1000, &iv)) return 2;
            o->srv.max_logprobs = (int32_t)iv;
            break;
        case O_MAXWAIT:
            if (pl_arg_int(C, "--max-waiting", optarg, 0, INT32_MAX, &iv)) return 2;
            o->eng.max_waiting = (int32_t)iv;
            break;
        case O_GRACE:
            if (pl_arg_float(C, "--shutdown-timeout", optarg, 0, 3600, &dv)) return 2;
            o->srv.shutdown_grace = dv;
            break;
        case O_BLOCK:
            if (pl_arg_int(C, "--block-size", optarg, 1, 256, &iv)) return 2;
            if (iv & (iv - 1)) {
                fprintf(stderr, "pagellm serve: --block-size: %lld is not a power of two\n",
                        (long long)iv);
                return 2;
            }
            o->eng.block_size = (int32_t)iv;
            break;
        case O_KVMEM:
            if (pl_arg_bytes(C, "--kv-cache-memory", optarg, &o->eng.kv_cache_memory)) return 2;
            break;
        case O_KVDTYPE:
            if (!strcmp(optarg, "f16") || !strcmp(optarg, "auto")) o->eng.kv_cache_f32 = 0;
            else if (!strcmp(optarg, "f32")) o->eng.kv_cache_f32 = 1;
            else {
                fprintf(stderr, "pagellm serve: --kv-cache-dtype: '%s' is not f16 or f32\n", optarg);
                return 2;
            }
            break;
        case O_SWAP: {
            char *end;
            double g = strtod(optarg, &end);
            if (end != optarg && !*end && g >= 0 && g <= 1024) {
                o->eng.swap_space = (uint64_t)(g * (double)(1ull << 30)); /* GiB, as vLLM */
            } else if (pl_arg_bytes(C, "--swap-space", optarg, &o->eng.swap_space)) {
                return 2;
            }
            break;
        }
        case O_PREEMPT:
            if (!strcmp(optarg, "recompute")) o->eng.preemption_mode = PL_PREEMPT_RECOMPUTE;
            else if (!strcmp(optarg, "swap")) o->eng.preemption_mode = PL_PREEMPT_SWAP;
            else {
                fprintf(stderr, "pagellm serve: --preemption-mode: '%s' is not recompute or swap\n",
                        optarg);
                return 2;
            }
            break;
        case O_SEQS:
            if (pl_arg_int(C, "--max-num-seqs", optarg, 1, 65536, &iv)) return 2;
            o->eng.max_num_seqs = (int32_t)iv;
            break;
        case O_BATCHED:
            if (pl_arg_int(C, "--max-num-batched-tokens", optarg, 1, 1 << 24, &iv)) return 2;
            o->eng.max_num_batched_tokens = (int32_t)iv;
            break;
        case O_MODELLEN:
            if (pl_arg_int(C, "--max-model-len", optarg, 1, 1 << 24, &iv)) return 2;
            o->eng.max_model_len = (int32_t)iv;
            break;
        case O_PREFIX_ON: o->eng.enable_prefix_caching = 1; break;
        case O_PREFIX_OFF: o->eng.enable_prefix_caching = 0; break;
        case 't':
            if (pl_arg_int(C, "--threads", optarg, 0, 1024, &iv)) return 2;
            o->eng.threads = (int)iv;
            break;
        case 'h': usage(stdout); return -1;
        case ':':
            fprintf(stderr, "pagellm serve: %s needs a value\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        default:
            fprintf(stderr, "pagellm serve: unknown option '%s'\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc && !o->model) o->model = argv[optind++];
    if (optind < argc) {
        fprintf(stderr, "pagellm serve: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (!o->model) {
        fprintf(stderr, "pagellm serve: no model given (-m MODEL)\n");
        usage(stderr);
        return 2;
    }
    return 0;
}

int pl_cmd_serve(int argc, char **argv) {
    serve_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    char path[4096];
    if (pl_cli_resolve_model(o.model, path, sizeof path)) return 1;
    o.eng.model_path = path;
    if (!o.srv.served_model_name) o.srv.served_model_name = o.model;
    o.srv.model_path = path;

    /* Block the stop signals before any thread exists so only sigwait below takes them. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);

    pl_engine *e;
    if (pl_engine_create(&o.eng, &e) != PL_OK) return pl_cli_fail(C, "%s", pl_last_error());
    pl_engine_stats st;
    pl_engine_get_stats(e, &st);
    printf("model: %s (%s), max model length %d, vocabulary %d\n", o.srv.served_model_name, path,
           pl_engine_max_model_len(e), pl_engine_n_vocab(e));
    printf("KV cache: %d blocks of %d tokens (%d tokens), %s, %.1f MiB budget; swap %d blocks; "
           "prefix caching %s\n", st.blocks_total, o.eng.block_size,
           st.blocks_total * o.eng.block_size, o.eng.kv_cache_f32 ? "f32" : "f16",
           (double)o.eng.kv_cache_memory / (1 << 20), st.swap_total,
           o.eng.enable_prefix_caching ? "on" : "off");
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
    int sig = 0;
    sigwait(&stop, &sig);
    printf("received %s: shutting down (grace %.0f s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
           o.srv.shutdown_grace);
    pl_server_stop(s, o.srv.shutdown_grace);
    pl_engine_destroy(e);
    printf("stopped\n");
    return 0;
}
