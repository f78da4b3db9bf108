/* engine/config — the engine configuration (pl_engine_config of pagellm.h): its defaults and
 * names (pl_engine_config_default, pl_kv_cache_dtype_name, pl_finish_reason_name), the checks
 * create makes before loading anything, and what create resolves from the machine and the
 * model. Invariant: a configuration that passes the check has every bound the engine relies on
 * (block size a power of two, budgets, layouts, pooling, TP size); the KV layout's own checks
 * are kv/cache.h's. */
#ifndef PL_ENGINE_CONFIG_H
#define PL_ENGINE_CONFIG_H

#include "pagellm.h"

#include "kv/cache.h"
#include "model/model.h"

pl_status pl_engine_check_config(const pl_engine_config *c);
/* The KV budget in bytes (c->kv_cache_memory): given, or a fraction of the memory available
 * after the weights (`weights` bytes: memory-mapped, their pages count as available until
 * touched, so the whole file share is taken off), or the default. */
pl_status pl_engine_resolve_kv_budget(pl_engine_config *c, uint64_t weights);
/* The model's shape as the KV cache needs it. */
pl_kv_cache_shape pl_engine_kv_shape(const pl_model_hparams *hp);

#endif
