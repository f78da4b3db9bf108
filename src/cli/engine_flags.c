/* cli/engine_flags — see engine_flags.h. */
#include "cli/engine_flags.h"

#include "base/status.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "cli/flags.h"
#include "kv/cache.h"
#include "parallel/parallel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define R required_argument
#define N no_argument

/* In the order of the help; the getopt table follows it too. */
static const pl_engine_flag FLAGS[] = {
    {"block-size", R, PL_OPT_BLOCK, 0, "N", NULL,
     "KV block size in tokens: power of two 1..256 (16)"},
    {"kv-cache-memory", R, PL_OPT_KVMEM, 0, "B", NULL,
     "KV cache budget, e.g. 512M, 2G; sets the block count\n"
     "(serve: 0.5 of available RAM after the weights; others 1G)"},
    {"kv-cache-memory-bytes", R, PL_OPT_KVMEM_BYTES, 0, "B", NULL,
     "the same (vLLM's name); wins over --gpu-memory-utilization"},
    {"gpu-memory-utilization", R, PL_OPT_GPU_UTIL, 0, "F", NULL,
     "KV budget = F x (MemAvailable - weights), F in (0, 1]"},
    {"kv-cache-dtype", R, PL_OPT_KVDTYPE, 0, "T", NULL,
     "f16 (default), f32, bf16, q8_0 or q4_0 (auto: as --dtype\n"
     "says); q8_0 / q4_0 keep a scale per 32 values of a head\n"
     "(head_dim must be a multiple of 32): 1.9x / 3.6x the\n"
     "blocks of f16 in the same --kv-cache-memory"},
    {"dtype", R, PL_OPT_DTYPE, 0, "T", NULL,
     "auto, float16/half, bfloat16, float32/float: sets the KV\n"
     "cache to f16, bf16 or f32 (auto: f16); activations are f32\n"
     "and weights as stored whatever is asked; of --dtype and\n"
     "--kv-cache-dtype the later wins"},
    {"f16-weights", R, PL_OPT_F16_WEIGHTS, 0, "T", NULL,
     "f16 (default) or bf16: F16 matrices rounded to bf16 at\n"
     "load for AVX-512 BF16 (vdpbf16ps: 1.5-2x F16 prefill; lossy,\n"
     "docs/ACCURACY.md); refused below the avx512 level\n"
     "(default: PAGELLM_F16_WEIGHTS, else f16)"},
    {"tensor-parallel-size", R, PL_OPT_TP, 0, "N", NULL,
     "shards every layer over the N processes of an MPI job:\n"
     "mpirun -np N pagellm CMD ... (docs/DISTRIBUTED.md); N\n"
     "divides the KV heads; the KV budget is per process"},
    {"pipeline-parallel-size", R, PL_OPT_PP, 0, "1", NULL, "(more is not built)"},
    {"swap-space", R, PL_OPT_SWAP, 0, "B", NULL,
     "swap pool for preempted requests (a bare number is GiB)"},
    {"swap-file", R, PL_OPT_SWAPFILE, 0, "PATH", NULL,
     "keep the swap pool in this file (created; default: RAM)"},
    {"preemption-mode", R, PL_OPT_PREEMPT, 0, "M", NULL,
     "recompute (default) or swap (needs --swap-space)"},
    {"max-num-seqs", R, PL_OPT_SEQS, 0, "N", NULL, "sequences per step (128)"},
    {"max-num-batched-tokens", R, PL_OPT_BATCHED, 0, "N", NULL,
     "tokens per step (512); longer prompts are chunked"},
    {"max-model-len", R, PL_OPT_MODELLEN, 0, "N", NULL,
     "prompt + output limit (default: the model's context)"},
    {"enable-prefix-caching", N, PL_OPT_PREFIX_ON, 0, NULL,
     "--enable-prefix-caching | --no-prefix-caching", "(default: enabled)"},
    {"no-prefix-caching", N, PL_OPT_PREFIX_OFF, 0, NULL, NULL, NULL},
    {"no-enable-prefix-caching", N, PL_OPT_PREFIX_OFF, 0, NULL, NULL, NULL},
    {"no-kv-groups", N, PL_OPT_KV_GROUPS_OFF, 0, NULL, NULL,
     "a model with window and global layers keeps every block\n"
     "(default: its window layers' blocks are released)"},
    {"threads", R, PL_OPT_THREADS, 't', "N", NULL, "worker threads (default: one per physical core this process may use)"},
    {"kv-layout", R, PL_OPT_KVLAYOUT, 0, "L", NULL,
     "paged (default), contiguous (the paper's baseline: one\n"
     "reserved run of blocks per sequence, nothing shared) or\n"
     "vattention (a virtually contiguous slot per sequence,\n"
     "physical pages mapped as it grows; nothing shared)"},
    {"kv-page-size", R, PL_OPT_KV_PAGE, 0, "P", NULL,
     "vattention: physical page 4K (default), 64K or 2M (needs\n"
     "reserved huge pages)"},
    {"vattn-no-overlap", N, PL_OPT_VATTN_NO_OVERLAP, 0, NULL,
     "--vattn-no-overlap, --vattn-no-deferred-reclaim, --vattn-no-eager",
     "vattention:\n"
     "turn off mapping the next step's pages in the background,\n"
     "reusing a finished request's pages, pre-mapping a free slot"},
    {"vattn-no-deferred-reclaim", N, PL_OPT_VATTN_NO_DEFER, 0, NULL, NULL, NULL},
    {"vattn-no-eager", N, PL_OPT_VATTN_NO_EAGER, 0, NULL, NULL, NULL},
    {"vattn-share", N, PL_OPT_VATTN_SHARE, 0, NULL, NULL,
     "vattention: pages of a shared-memory file, so the\n"
     "sequences of a request (n, best_of, beam) map their common\n"
     "pages once (slower to map; one memory map per page)"},
    {"reserve", R, PL_OPT_RESERVE, 0, "R", NULL,
     "contiguous: max (model length, default), pow2 (next\n"
     "power of two of prompt + max tokens) or oracle (exact)"},
    {"speculative-model", R, PL_OPT_SPEC_MODEL, 0, "M", NULL,
     "speculative decoding with draft model M (path or bare name,\n"
     "as -m; same vocabulary)"},
    {"speculative-ngram", N, PL_OPT_SPEC_NGRAM, 0, NULL, NULL,
     "speculative decoding with prompt-lookup (n-gram) proposals"},
    {"num-speculative-tokens", R, PL_OPT_SPEC_K, 0, "K", NULL,
     "proposals per sequence and step, 1..16 (4)"},
    {"ngram-min", R, PL_OPT_NGRAM_MIN, 0, NULL, "--ngram-min N, --ngram-max N",
     "n-gram lengths tried, longest first (1, 4)"},
    {"ngram-max", R, PL_OPT_NGRAM_MAX, 0, NULL, NULL, NULL},
    {"speculative-disable-by-batch-size", R, PL_OPT_SPEC_BATCH, 0, "N", NULL,
     "no speculation in a step that decodes more\n"
     "than N sequences (4, measured; -1: never off)"},
};

#undef R
#undef N

#define N_FLAGS (sizeof FLAGS / sizeof FLAGS[0])

/* vLLM's flags that tune only its own machinery: accepted, ignored with a warning (the help's
 * footer names a few), with a value and without. */
static const char *const IGNORED[] = {"uvicorn-log-level", "max-log-len", "download-dir",
                                      "distributed-executor-backend", "device"};
static const char *const IGNORED_BOOL[] = {
    "disable-log-requests", "disable-log-stats", "enable-log-requests",
    "disable-uvicorn-access-log", "disable-frontend-multiprocessing", "trust-remote-code",
    "enforce-eager", "enable-chunked-prefill"};
#define N_IGNORED (sizeof IGNORED / sizeof IGNORED[0])
#define N_IGNORED_BOOL (sizeof IGNORED_BOOL / sizeof IGNORED_BOOL[0])

static const char HELP_FOOTER[] =
    "  vLLM-only flags (--uvicorn-log-level X, --disable-log-requests, --trust-remote-code,\n"
    "  --enforce-eager, --max-log-len N, ...; serve also --seed N) are accepted and ignored\n"
    "  with a warning\n";

const struct option *pl_engine_longopts(const struct option *own) {
    enum { MAX_OWN = 64 }; /* generate has the most: 34 */
    static struct option all[MAX_OWN + N_FLAGS + N_IGNORED + N_IGNORED_BOOL + 1];
    size_t n = 0;
    for (; own[n].name; n++) {
        PL_ASSERT(n < MAX_OWN);
        all[n] = own[n];
    }
    for (size_t i = 0; i < N_FLAGS; i++)
        all[n++] = (struct option){FLAGS[i].name, FLAGS[i].has_arg, 0, FLAGS[i].code};
    for (size_t i = 0; i < N_IGNORED; i++)
        all[n++] = (struct option){IGNORED[i], required_argument, 0, PL_OPT_IGNORED};
    for (size_t i = 0; i < N_IGNORED_BOOL; i++)
        all[n++] = (struct option){IGNORED_BOOL[i], no_argument, 0, PL_OPT_IGNORED_BOOL};
    all[n] = (struct option){0, 0, 0, 0};
    return all;
}

void pl_engine_flags_help(FILE *f) {
    fputs("engine:\n", f);
    for (size_t i = 0; i < N_FLAGS; i++) {
        const pl_engine_flag *e = &FLAGS[i];
        if (!e->help) continue;
        char label[96];
        if (e->label) snprintf(label, sizeof label, "%s", e->label);
        else snprintf(label, sizeof label, "--%s%s%s", e->name, e->meta ? " " : "",
                      e->meta ? e->meta : "");
        pl_flags_help_row(f, e->short_name, label, e->help);
    }
    fputs(HELP_FOOTER, f);
}

const char *pl_engine_shortopts(void) {
    static char s[2 * N_FLAGS + 1];
    if (!s[0]) {
        size_t n = 0;
        for (size_t i = 0; i < N_FLAGS; i++)
            if (FLAGS[i].short_name) {
                s[n++] = FLAGS[i].short_name;
                if (FLAGS[i].has_arg == required_argument) s[n++] = ':';
            }
    }
    return s;
}

int pl_engine_flag_or_unknown(const char *cmd, int code, char **argv, const struct option *opts,
                              pl_engine_config *c) {
    for (size_t i = 0; i < N_FLAGS; i++) /* a one-letter form (-t N) */
        if (FLAGS[i].short_name && code == FLAGS[i].short_name) code = FLAGS[i].code;
    if (code >= PL_ENGINE_OPT_BASE && code < PL_ENGINE_OPT_END)
        return pl_engine_flag_apply_named(cmd, pl_arg_flag_written(argv, optind, optarg), code,
                                          optarg, c);
    pl_arg_refused(cmd, argv, opts);
    return -1;
}

int pl_arg_f16_weights(const char *cmd, const char *arg, pl_f16_weights *out) {
    if (!strcmp(arg, "f16") || !strcmp(arg, "float16")) *out = PL_F16_WEIGHTS_F16;
    else if (!strcmp(arg, "bf16") || !strcmp(arg, "bfloat16")) *out = PL_F16_WEIGHTS_BF16;
    else {
        fprintf(stderr, "pagellm %s: --f16-weights: '%s' is not f16 or bf16\n", cmd, arg);
        return -1;
    }
    return 0;
}

int pl_engine_flag_apply(const char *cmd, int code, const char *arg, pl_engine_config *c) {
    return pl_engine_flag_apply_named(cmd, NULL, code, arg, c);
}

int pl_engine_flag_apply_named(const char *cmd, const char *flag, int code, const char *arg,
                               pl_engine_config *c) {
    int64_t v;
    double d;
    switch (code) {
    case PL_OPT_KVMEM_BYTES:
        return pl_arg_bytes(cmd, "--kv-cache-memory-bytes", arg, &c->kv_cache_memory) ? 2 : 0;
    case PL_OPT_GPU_UTIL:
        if (pl_arg_float(cmd, "--gpu-memory-utilization", arg, 0, 1, &d)) return 2;
        if (d <= 0) {
            fprintf(stderr, "pagellm %s: --gpu-memory-utilization: must be in (0, 1], got %s\n",
                    cmd, arg);
            return 2;
        }
        c->kv_cache_memory_fraction = d;
        return 0;
    case PL_OPT_DTYPE:
        /* The model's compute type chooses the KV cache's (vLLM's --kv-cache-dtype auto): f32
         * for float32, bf16 for bfloat16, f16 otherwise. Activations are f32 and weights stay
         * as stored whatever is asked. A later --kv-cache-dtype overrides. */
        c->kv_cache_f32 = 0;
        if (!strcmp(arg, "float32") || !strcmp(arg, "float")) {
            c->kv_cache_dtype = PL_KV_CACHE_F32;
        } else if (!strcmp(arg, "bfloat16")) {
            c->kv_cache_dtype = PL_KV_CACHE_BF16;
        } else if (!strcmp(arg, "auto") || !strcmp(arg, "float16") || !strcmp(arg, "half")) {
            c->kv_cache_dtype = PL_KV_CACHE_F16;
        } else {
            fprintf(stderr, "pagellm %s: --dtype: '%s' is not auto, float16, half, bfloat16, "
                    "float32 or float\n", cmd, arg);
            return 2;
        }
        return 0;
    case PL_OPT_F16_WEIGHTS:
        if (pl_arg_f16_weights(cmd, arg, &c->f16_weights)) return 2;
        return 0;
    case PL_OPT_TP:
        if (pl_arg_int(cmd, "--tensor-parallel-size", arg, 1, 4096, &v)) return 2;
        if (v > 1) { /* under mpirun? (Open MPI's, or a PMI launcher's, environment) */
            const char *w = getenv("OMPI_COMM_WORLD_SIZE");
            if (!w) w = getenv("PMI_SIZE");
            if (!w) {
                fprintf(stderr, "pagellm %s: --tensor-parallel-size %lld needs %lld processes: "
                        "start pagellm under mpirun -np %lld (docs/DISTRIBUTED.md)\n", cmd,
                        (long long)v, (long long)v, (long long)v);
                return 2;
            }
            if (strtoll(w, NULL, 10) != v) {
                fprintf(stderr, "pagellm %s: --tensor-parallel-size %lld but the MPI job has %s "
                        "processes: start it as mpirun -np %lld\n", cmd, (long long)v, w,
                        (long long)v);
                return 2;
            }
        }
        if (v > 1 && !pl_dist_available()) {
            fprintf(stderr, "pagellm %s: --tensor-parallel-size %lld: this build has no MPI "
                    "(install Open MPI: openmpi-bin libopenmpi-dev, and configure again); use 1\n",
                    cmd, (long long)v);
            return 2;
        }
        c->tensor_parallel_size = (int32_t)v;
        return 0;
    case PL_OPT_PP:
        if (pl_arg_int(cmd, "--pipeline-parallel-size", arg, 1, 4096, &v)) return 2;
        if (v > 1) {
            fprintf(stderr, "pagellm %s: --pipeline-parallel-size %lld: pipeline parallelism is "
                    "not built (tensor parallelism is: --tensor-parallel-size N under mpirun -np "
                    "N); use 1\n", cmd, (long long)v);
            return 2;
        }
        return 0;
    case PL_OPT_IGNORED:
    case PL_OPT_IGNORED_BOOL:
        fprintf(stderr, "pagellm %s: warning: %.*s is a vLLM option with no meaning here: "
                "ignored\n", cmd, flag ? (int)strcspn(flag, "=") : 12, flag ? flag : "a vLLM flag");
        return 0;
    case PL_OPT_BLOCK:
        if (pl_arg_int(cmd, "--block-size", arg, 1, 256, &v)) return 2;
        if (v & (v - 1)) {
            fprintf(stderr, "pagellm %s: --block-size: %lld is not a power of two\n", cmd,
                    (long long)v);
            return 2;
        }
        c->block_size = (int32_t)v;
        return 0;
    case PL_OPT_KVMEM:
        return pl_arg_bytes(cmd, "--kv-cache-memory", arg, &c->kv_cache_memory) ? 2 : 0;
    case PL_OPT_KVDTYPE: {
        if (!strcmp(arg, "auto")) return 0; /* as --dtype says (f16 by default) */
        static const char *const alias[][2] = {{"float16", "f16"}, {"float32", "f32"},
                                               {"bfloat16", "bf16"}};
        for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
            if (!strcmp(arg, alias[i][0])) arg = alias[i][1];
        for (int t = PL_KV_CACHE_F16; t <= PL_KV_CACHE_Q4_0; t++)
            if (!strcmp(arg, pl_kv_cache_dtype_name((pl_kv_cache_dtype)t))) {
                c->kv_cache_dtype = (pl_kv_cache_dtype)t;
                c->kv_cache_f32 = 0;
                return 0;
            }
        fprintf(stderr, "pagellm %s: --kv-cache-dtype: '%s' is not one of auto, f16, bf16, f32, "
                "q8_0, q4_0\n", cmd, arg);
        return 2;
    }
    case PL_OPT_SWAP: {
        char *end;
        double g = strtod(arg, &end);
        if (end != arg && !*end && g >= 0 && g < 1e6) { /* a bare number is GiB, as vLLM */
            c->swap_space = (uint64_t)(g * (double)(1ull << 30));
            return 0;
        }
        return pl_arg_bytes(cmd, "--swap-space", arg, &c->swap_space) ? 2 : 0;
    }
    case PL_OPT_PREEMPT:
        if (!strcmp(arg, "recompute")) c->preemption_mode = PL_PREEMPT_RECOMPUTE;
        else if (!strcmp(arg, "swap")) c->preemption_mode = PL_PREEMPT_SWAP;
        else {
            fprintf(stderr, "pagellm %s: --preemption-mode: '%s' is not recompute or swap\n", cmd,
                    arg);
            return 2;
        }
        return 0;
    case PL_OPT_SEQS:
        if (pl_arg_int(cmd, "--max-num-seqs", arg, 1, 4096, &v)) return 2;
        c->max_num_seqs = (int32_t)v;
        return 0;
    case PL_OPT_BATCHED:
        if (pl_arg_int(cmd, "--max-num-batched-tokens", arg, 1, 1 << 20, &v)) return 2;
        c->max_num_batched_tokens = (int32_t)v;
        return 0;
    case PL_OPT_MODELLEN:
        if (pl_arg_int(cmd, "--max-model-len", arg, 1, 1 << 24, &v)) return 2;
        c->max_model_len = (int32_t)v;
        return 0;
    case PL_OPT_SWAPFILE: c->swap_path = arg; return 0;
    case PL_OPT_PREFIX_ON: c->enable_prefix_caching = 1; return 0;
    case PL_OPT_PREFIX_OFF: c->enable_prefix_caching = 0; return 0;
    case PL_OPT_KV_GROUPS_OFF: c->kv_groups_off = 1; return 0;
    case PL_OPT_KVLAYOUT:
        if (pl_kv_layout_parse(arg, &c->kv_layout)) {
            fprintf(stderr, "pagellm %s: --kv-layout: '%s' is not %s\n", cmd, arg,
                    pl_kv_layout_names());
            return 2;
        }
        return 0;
    case PL_OPT_KV_PAGE:
        if (!strcmp(arg, "4K") || !strcmp(arg, "4k") || !strcmp(arg, "4096")) c->kv_page_size = 4096;
        else if (!strcmp(arg, "64K") || !strcmp(arg, "64k") || !strcmp(arg, "65536")) c->kv_page_size = 65536;
        else if (!strcmp(arg, "2M") || !strcmp(arg, "2m") || !strcmp(arg, "2097152")) c->kv_page_size = 2u << 20;
        else {
            fprintf(stderr, "pagellm %s: --kv-page-size: '%s' is not supported: use 4K, 64K or 2M\n",
                    cmd, arg);
            return 2;
        }
        return 0;
    case PL_OPT_VATTN_NO_OVERLAP: c->vattn_no_overlap = 1; return 0;
    case PL_OPT_VATTN_NO_DEFER: c->vattn_no_deferred_reclaim = 1; return 0;
    case PL_OPT_VATTN_NO_EAGER: c->vattn_no_eager = 1; return 0;
    case PL_OPT_VATTN_SHARE: c->vattn_share = 1; return 0;
    case PL_OPT_RESERVE:
        if (pl_kv_reserve_parse(arg, &c->reserve)) {
            fprintf(stderr, "pagellm %s: --reserve: '%s' is not max, pow2 or oracle\n", cmd, arg);
            return 2;
        }
        return 0;
    case PL_OPT_SPEC_MODEL: { /* a path or a bare name, found as -m finds the model */
        static char draft_path[4096];
        if (pl_cli_resolve_model(arg, draft_path, sizeof draft_path)) return 2;
        c->speculative_model = draft_path;
        return 0;
    }
    case PL_OPT_SPEC_NGRAM: c->speculative_ngram = 1; return 0;
    case PL_OPT_SPEC_K:
        if (pl_arg_int(cmd, "--num-speculative-tokens", arg, 1, PL_MAX_SPECULATIVE_TOKENS, &v))
            return 2;
        c->num_speculative_tokens = (int32_t)v;
        return 0;
    case PL_OPT_NGRAM_MIN:
    case PL_OPT_NGRAM_MAX:
        if (pl_arg_int(cmd, code == PL_OPT_NGRAM_MIN ? "--ngram-min" : "--ngram-max", arg, 1, 64, &v))
            return 2;
        *(code == PL_OPT_NGRAM_MIN ? &c->ngram_min : &c->ngram_max) = (int32_t)v;
        return 0;
    case PL_OPT_SPEC_BATCH:
        if (pl_arg_int(cmd, "--speculative-disable-by-batch-size", arg, -1, 1 << 20, &v)) return 2;
        if (v == 0) {
            fprintf(stderr, "pagellm %s: --speculative-disable-by-batch-size: give N >= 1, or -1 "
                    "for never\n", cmd);
            return 2;
        }
        c->speculative_max_batch = (int32_t)v;
        return 0;
    case PL_OPT_THREADS:
        if (pl_arg_int(cmd, "--threads", arg, 0, 512, &v)) return 2;
        c->threads = (int)v;
        return 0;
    }
    fprintf(stderr, "pagellm %s: internal: unknown engine option %d\n", cmd, code);
    return 2;
}
