/* engine/kv_samples — the KV memory figures the paper's comparisons need, sampled at every step
 * that runs the model, after scheduling (since the engine was created): usage, waste, what
 * contiguous layouts reserve, what sharing saves. For benchmarks and tests (`pagellm bench`,
 * `generate --stats`); not part of the embedding API (include/pagellm.h).
 * Thread-safety: read from any thread; the engine thread refreshes them after each step. */
#ifndef PL_ENGINE_KV_SAMPLES_H
#define PL_ENGINE_KV_SAMPLES_H

#include "pagellm.h"
#include "kv/cache.h"

#include <stdint.h>

typedef pl_kv_samples pl_engine_kv_samples; /* kv/cache.h */

void pl_engine_get_kv_samples(pl_engine *e, pl_engine_kv_samples *out);

#endif
