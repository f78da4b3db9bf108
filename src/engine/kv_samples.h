/* engine/kv_samples — the KV memory figures the paper's comparisons need, sampled at every step
 * that runs the model, after scheduling (since the engine was created): usage, waste, what
 * contiguous layouts reserve, what sharing saves. For benchmarks and tests (`pagellm bench`,
 * `generate --stats`); not part of the embedding API (include/pagellm.h).
 * Thread-safety: read from any thread; the engine thread refreshes them after each step. */
#ifndef PL_ENGINE_KV_SAMPLES_H
#define PL_ENGINE_KV_SAMPLES_H

#include "pagellm.h"

#include <stdint.h>

typedef struct {
    uint64_t kv_samples;                 /* steps sampled */
    double peak_kv_usage, mean_kv_usage; /* blocks used / blocks total: highest, mean */
    double peak_waste, mean_waste;       /* waste as above: highest; 1 - sum tokens / sum used
                                            slots over the samples (memory-weighted mean) */
    double mean_token_fraction;          /* tokens stored / all slots of the pool, mean */
    double mean_reserved;                /* contiguous: of the used slots, those reserved for
                                            tokens still to come (sum / sum); the rest of the
                                            waste is internal fragmentation */
    int32_t peak_blocks_used;
    int32_t peak_batch_seqs;             /* most sequences in one step (decodes + prefills) */
    int64_t block_refs;                  /* now: blocks held counting shared ones per holder */
    double mean_sharing_saved;           /* 1 - sum blocks used / sum block refs over the
                                            samples: memory saved by sharing (0 if none) */
} pl_engine_kv_samples;

void pl_engine_get_kv_samples(pl_engine *e, pl_engine_kv_samples *out);

#endif
