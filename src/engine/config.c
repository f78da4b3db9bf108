/* engine/config — the engine configuration: defaults, names, checks, and what create resolves
 * from the machine and the model (the KV budget, the model's shape for the KV cache). See
 * config.h. */
#include "engine/config.h"
#include "base/log.h"
#include "base/meminfo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_KV_BYTES (1ull << 30)

void pl_engine_config_default(pl_engine_config *c) {
    memset(c, 0, sizeof *c);
    c->block_size = 16;
    c->kv_cache_memory = 0; /* resolved at create: the fraction if set, else DEFAULT_KV_BYTES */
    c->preemption_mode = PL_PREEMPT_RECOMPUTE;
    c->max_num_seqs = 128;
    c->max_num_batched_tokens = 512;
    c->enable_prefix_caching = 1;
}

const char *pl_kv_cache_dtype_name(pl_kv_cache_dtype t) {
    switch (t) {
    case PL_KV_CACHE_F16: return "f16";
    case PL_KV_CACHE_F32: return "f32";
    case PL_KV_CACHE_BF16: return "bf16";
    case PL_KV_CACHE_Q8_0: return "q8_0";
    case PL_KV_CACHE_Q4_0: return "q4_0";
    }
    return NULL;
}

const char *pl_finish_reason_name(pl_finish_reason r) {
    switch (r) {
    case PL_FINISH_NONE: return NULL;
    case PL_FINISH_STOP: return "stop";
    case PL_FINISH_LENGTH: return "length";
    case PL_FINISH_ABORT: return "abort";
    case PL_FINISH_ERROR: return "error";
    }
    return NULL;
}

pl_status pl_engine_check_config(const pl_engine_config *c) {
    if (!c->model_path) return pl_fail(PL_ERR_INVALID_ARG, "no model given");
    if (c->block_size < 1 || c->block_size > 256 || (c->block_size & (c->block_size - 1)))
        return pl_fail(PL_ERR_INVALID_ARG, "block-size must be a power of two in [1, 256], got %d",
                       c->block_size);
    if (c->max_num_seqs < 1 || c->max_num_seqs > 4096)
        return pl_fail(PL_ERR_INVALID_ARG, "max-num-seqs must be in [1, 4096], got %d",
                       c->max_num_seqs);
    if (c->max_num_batched_tokens < c->max_num_seqs || c->max_num_batched_tokens > 1 << 20)
        return pl_fail(PL_ERR_INVALID_ARG, "max-num-batched-tokens (%d) must be at least "
                       "max-num-seqs (%d) and at most 1048576", c->max_num_batched_tokens,
                       c->max_num_seqs);
    if (c->max_model_len < 0) return pl_fail(PL_ERR_INVALID_ARG, "max-model-len is negative");
    if (!(c->kv_cache_memory_fraction >= 0 && c->kv_cache_memory_fraction <= 1))
        return pl_fail(PL_ERR_INVALID_ARG, "gpu-memory-utilization (the KV cache's fraction of "
                       "available memory) must be in (0, 1], got %g", c->kv_cache_memory_fraction);
    if (c->preemption_mode == PL_PREEMPT_SWAP && c->swap_space == 0)
        return pl_fail(PL_ERR_INVALID_ARG, "preemption-mode swap needs --swap-space");
    if (c->pooling < 0 || c->pooling > 3)
        return pl_fail(PL_ERR_INVALID_ARG, "pooling must be 0 (none), 1 (mean), 2 (cls) or 3 "
                       "(last), got %d", c->pooling);
    if (c->tensor_parallel_size < 0 || c->tensor_parallel_size > 4096)
        return pl_fail(PL_ERR_INVALID_ARG, "tensor-parallel-size must be in [1, 4096], got %d",
                       c->tensor_parallel_size);
    if (c->max_lora_rank < 0 || c->max_lora_rank > 1024)
        return pl_fail(PL_ERR_INVALID_ARG, "max-lora-rank must be in [1, 1024], got %d",
                       c->max_lora_rank);
    if (c->max_lora_rank > 0 && c->tensor_parallel_size > 1)
        return pl_fail(PL_ERR_UNSUPPORTED, "LoRA adapters (--lora, --enable-lora) do not run "
                       "with --tensor-parallel-size %d > 1 yet", c->tensor_parallel_size);
    return pl_kv_cache_check_config(c);
}

/* The KV budget in bytes: given, or a fraction of the memory available after the weights (the
 * weights are memory-mapped: their pages count as available until touched, so the whole file
 * is taken off), or the default. */
pl_status pl_engine_resolve_kv_budget(pl_engine_config *c, uint64_t weights) {
    if (c->kv_cache_memory) return PL_OK;
    if (c->kv_cache_memory_fraction <= 0) {
        c->kv_cache_memory = DEFAULT_KV_BYTES;
        return PL_OK;
    }
    uint64_t avail = pl_mem_available();
    if (!avail)
        return pl_fail(PL_ERR_IO, "gpu-memory-utilization: cannot read MemAvailable from "
                       "/proc/meminfo; give the KV budget with --kv-cache-memory");
    uint64_t rest = avail > weights ? avail - weights : 0;
    c->kv_cache_memory = (uint64_t)((double)rest * c->kv_cache_memory_fraction);
    PL_INFO("KV cache budget: %.1f MiB = %g x (%.1f MiB available - %.1f MiB of weights)",
            (double)c->kv_cache_memory / (1 << 20), c->kv_cache_memory_fraction,
            (double)avail / (1 << 20), (double)weights / (1 << 20));
    if (!c->kv_cache_memory)
        return pl_fail(PL_ERR_NOMEM, "gpu-memory-utilization %g: no memory is left for the KV "
                       "cache (%.1f MiB available, %.1f MiB of weights)",
                       c->kv_cache_memory_fraction, (double)avail / (1 << 20),
                       (double)weights / (1 << 20));
    return PL_OK;
}

/* The model's shape as the KV cache needs it. A mixed model (some layers windowed, as many
 * as the others; the i-th of each kind share store tensor i) can use KV cache groups, unless
 * its layers have shapes of their own (gemma4); any other mixed model layer kinds (two pools,
 * kv/cache.h). Layers that share another layer's KV
 * (gemma4's shared_kv_layers) get no store tensor: the cache sizes blocks by the others. */
pl_kv_cache_shape pl_engine_kv_shape(const pl_model_hparams *hp) {
    int32_t win = 0;
    for (int32_t l = 0; l < hp->n_layers; l++) win += pl_model_layer_window(hp, l) > 0;
    const int any_mix = hp->sliding_window > 0 && pl_model_kv_window(hp) <= 0 && win > 0;
    int mixed = any_mix && 2 * win == hp->n_layers && !hp->kv_shaped;
    return (pl_kv_cache_shape){
        .n_layers = pl_model_kv_tensors(hp), .n_kv_heads = hp->n_kv_heads,
        .head_dim = hp->head_dim, .layer_shapes = pl_model_kv_shapes(hp),
        .kv_window = pl_model_kv_window(hp), .mixed_window = mixed ? hp->sliding_window : 0,
        .kinds_window = any_mix && !mixed ? hp->sliding_window : 0,
        .tensor_window = hp->swa_layers, /* store tensor i is layer i */
        .embedding = hp->pooling != PL_POOL_NONE, .arch_name = hp->arch_name,
    };
}

