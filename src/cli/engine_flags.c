/* cli/engine_flags — see engine_flags.h. */
#include "cli/engine_flags.h"

#include "cli/args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char PL_ENGINE_FLAGS_HELP[] =
    "engine:\n"
    "      --block-size N             KV block size in tokens: power of two 1..256 (16)\n"
    "      --kv-cache-memory B        KV cache budget, e.g. 512M, 2G (1G); sets the block count\n"
    "      --kv-cache-dtype T         f16 (default) or f32\n"
    "      --swap-space B             swap pool for preempted requests (a bare number is GiB)\n"
    "      --swap-file PATH           keep the swap pool in this file (created; default: RAM)\n"
    "      --preemption-mode M        recompute (default) or swap (needs --swap-space)\n"
    "      --max-num-seqs N           sequences per step (128)\n"
    "      --max-num-batched-tokens N tokens per step (512); longer prompts are chunked\n"
    "      --max-model-len N          prompt + output limit (default: the model's context)\n"
    "      --enable-prefix-caching | --no-prefix-caching   (default: enabled)\n"
    "  -t, --threads N                worker threads (default: one per core)\n"
    "      --kv-layout L              paged (default) or contiguous: the paper's baseline, one\n"
    "                                 reserved run of blocks per sequence, nothing shared\n"
    "      --reserve R                contiguous: max (model length, default), pow2 (next\n"
    "                                 power of two of prompt + max tokens) or oracle (exact)\n";

int pl_engine_flag_apply(const char *cmd, int code, const char *arg, pl_engine_config *c) {
    int64_t v;
    switch (code) {
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
    case PL_OPT_KVDTYPE:
        if (strcmp(arg, "f16") && strcmp(arg, "f32")) {
            fprintf(stderr, "pagellm %s: --kv-cache-dtype: '%s' is not f16 or f32\n", cmd, arg);
            return 2;
        }
        c->kv_cache_f32 = !strcmp(arg, "f32");
        return 0;
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
    case PL_OPT_KVLAYOUT:
        if (!strcmp(arg, "paged")) c->kv_layout = PL_KV_LAYOUT_PAGED;
        else if (!strcmp(arg, "contiguous")) c->kv_layout = PL_KV_LAYOUT_CONTIGUOUS;
        else {
            fprintf(stderr, "pagellm %s: --kv-layout: '%s' is not paged or contiguous\n", cmd, arg);
            return 2;
        }
        return 0;
    case PL_OPT_RESERVE:
        if (!strcmp(arg, "max")) c->reserve = PL_RESERVE_MAX;
        else if (!strcmp(arg, "pow2")) c->reserve = PL_RESERVE_POW2;
        else if (!strcmp(arg, "oracle")) c->reserve = PL_RESERVE_ORACLE;
        else {
            fprintf(stderr, "pagellm %s: --reserve: '%s' is not max, pow2 or oracle\n", cmd, arg);
            return 2;
        }
        return 0;
    case PL_OPT_THREADS:
        if (pl_arg_int(cmd, "--threads", arg, 0, 512, &v)) return 2;
        c->threads = (int)v;
        return 0;
    }
    fprintf(stderr, "pagellm %s: internal: unknown engine option %d\n", cmd, code);
    return 2;
}
