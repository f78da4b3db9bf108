/* cli/engine_flags — the engine flags every engine-running command accepts (generate, serve,
 * bench), with vLLM's names. A command puts PL_ENGINE_LONGOPTS into its getopt_long table and
 * hands codes >= PL_ENGINE_OPT_BASE to pl_engine_flag_apply.
 *
 * vLLM launch lines work unchanged: its engine flags that mean something on a CPU are mapped
 * (--dtype, --gpu-memory-utilization, --kv-cache-memory-bytes, --tensor-parallel-size), and
 * flags that only tune vLLM's own machinery (logging, uvicorn, CUDA graphs, ...) are accepted and
 * ignored with a warning naming them. Anything else stays an error. */
#ifndef PL_CLI_ENGINE_FLAGS_H
#define PL_CLI_ENGINE_FLAGS_H

#include "pagellm.h"

#include <getopt.h>

enum {
    PL_ENGINE_OPT_BASE = 1000,
    PL_OPT_BLOCK = PL_ENGINE_OPT_BASE,
    PL_OPT_KVMEM,
    PL_OPT_KVDTYPE,
    PL_OPT_SWAP,
    PL_OPT_PREEMPT,
    PL_OPT_SEQS,
    PL_OPT_BATCHED,
    PL_OPT_MODELLEN,
    PL_OPT_PREFIX_ON,
    PL_OPT_PREFIX_OFF,
    PL_OPT_KV_GROUPS_OFF,
    PL_OPT_THREADS,
    PL_OPT_KVLAYOUT,
    PL_OPT_RESERVE,
    PL_OPT_SWAPFILE,
    PL_OPT_KVMEM_BYTES,  /* vLLM's --kv-cache-memory-bytes */
    PL_OPT_GPU_UTIL,     /* vLLM's --gpu-memory-utilization: on a CPU, of available RAM */
    PL_OPT_DTYPE,        /* vLLM's --dtype: chooses the KV cache type where it means one */
    PL_OPT_TP,           /* vLLM's --tensor-parallel-size (needs the MPI build) */
    PL_OPT_PP,           /* vLLM's --pipeline-parallel-size: 1 only */
    PL_OPT_SPEC_MODEL,   /* --speculative-model DRAFT.gguf */
    PL_OPT_SPEC_NGRAM,   /* --speculative-ngram */
    PL_OPT_SPEC_K,       /* --num-speculative-tokens K */
    PL_OPT_NGRAM_MIN,
    PL_OPT_NGRAM_MAX,
    PL_OPT_SPEC_BATCH,   /* --speculative-disable-by-batch-size N (vLLM v0's name) */
    PL_OPT_KV_PAGE,      /* --kv-page-size 4K|64K|2M (vattention) */
    PL_OPT_VATTN_NO_OVERLAP,
    PL_OPT_VATTN_NO_DEFER,
    PL_OPT_VATTN_NO_EAGER,
    PL_OPT_IGNORED,      /* a vLLM-only flag with a value: accepted, ignored with a warning */
    PL_OPT_IGNORED_BOOL, /* the same without a value */
    PL_ENGINE_OPT_END,
};

#define PL_ENGINE_LONGOPTS                                                                        \
    {"block-size", required_argument, 0, PL_OPT_BLOCK},                                          \
        {"kv-cache-memory", required_argument, 0, PL_OPT_KVMEM},                                 \
        {"kv-cache-dtype", required_argument, 0, PL_OPT_KVDTYPE},                                \
        {"swap-space", required_argument, 0, PL_OPT_SWAP},                                       \
        {"preemption-mode", required_argument, 0, PL_OPT_PREEMPT},                               \
        {"max-num-seqs", required_argument, 0, PL_OPT_SEQS},                                     \
        {"max-num-batched-tokens", required_argument, 0, PL_OPT_BATCHED},                        \
        {"max-model-len", required_argument, 0, PL_OPT_MODELLEN},                                \
        {"enable-prefix-caching", no_argument, 0, PL_OPT_PREFIX_ON},                             \
        {"no-prefix-caching", no_argument, 0, PL_OPT_PREFIX_OFF},                                \
        {"no-kv-groups", no_argument, 0, PL_OPT_KV_GROUPS_OFF},                                  \
        {"no-enable-prefix-caching", no_argument, 0, PL_OPT_PREFIX_OFF},                         \
        {"threads", required_argument, 0, PL_OPT_THREADS},                                       \
        {"kv-layout", required_argument, 0, PL_OPT_KVLAYOUT},                                    \
        {"reserve", required_argument, 0, PL_OPT_RESERVE},                                       \
        {"swap-file", required_argument, 0, PL_OPT_SWAPFILE},                                    \
        {"kv-cache-memory-bytes", required_argument, 0, PL_OPT_KVMEM_BYTES},                     \
        {"gpu-memory-utilization", required_argument, 0, PL_OPT_GPU_UTIL},                       \
        {"dtype", required_argument, 0, PL_OPT_DTYPE},                                           \
        {"tensor-parallel-size", required_argument, 0, PL_OPT_TP},                               \
        {"pipeline-parallel-size", required_argument, 0, PL_OPT_PP},                             \
        {"speculative-model", required_argument, 0, PL_OPT_SPEC_MODEL},                          \
        {"speculative-ngram", no_argument, 0, PL_OPT_SPEC_NGRAM},                                \
        {"num-speculative-tokens", required_argument, 0, PL_OPT_SPEC_K},                         \
        {"ngram-min", required_argument, 0, PL_OPT_NGRAM_MIN},                                   \
        {"ngram-max", required_argument, 0, PL_OPT_NGRAM_MAX},                                   \
        {"speculative-disable-by-batch-size", required_argument, 0, PL_OPT_SPEC_BATCH},          \
        {"kv-page-size", required_argument, 0, PL_OPT_KV_PAGE},                                  \
        {"vattn-no-overlap", no_argument, 0, PL_OPT_VATTN_NO_OVERLAP},                           \
        {"vattn-no-deferred-reclaim", no_argument, 0, PL_OPT_VATTN_NO_DEFER},                    \
        {"vattn-no-eager", no_argument, 0, PL_OPT_VATTN_NO_EAGER},                               \
        {"uvicorn-log-level", required_argument, 0, PL_OPT_IGNORED},                             \
        {"max-log-len", required_argument, 0, PL_OPT_IGNORED},                                   \
        {"download-dir", required_argument, 0, PL_OPT_IGNORED},                                  \
        {"distributed-executor-backend", required_argument, 0, PL_OPT_IGNORED},                  \
        {"device", required_argument, 0, PL_OPT_IGNORED},                                        \
        {"disable-log-requests", no_argument, 0, PL_OPT_IGNORED_BOOL},                           \
        {"disable-log-stats", no_argument, 0, PL_OPT_IGNORED_BOOL},                              \
        {"enable-log-requests", no_argument, 0, PL_OPT_IGNORED_BOOL},                            \
        {"disable-uvicorn-access-log", no_argument, 0, PL_OPT_IGNORED_BOOL},                     \
        {"disable-frontend-multiprocessing", no_argument, 0, PL_OPT_IGNORED_BOOL},               \
        {"trust-remote-code", no_argument, 0, PL_OPT_IGNORED_BOOL},                              \
        {"enforce-eager", no_argument, 0, PL_OPT_IGNORED_BOOL},                                  \
        {"enable-chunked-prefill", no_argument, 0, PL_OPT_IGNORED_BOOL}

extern const char PL_ENGINE_FLAGS_HELP[];

/* Apply one engine flag. Returns 0, or 2 after printing "pagellm CMD: FLAG: problem". `flag` is
 * the flag as written (argv[optind - 1]), used to name an ignored vLLM flag in its warning. */
int pl_engine_flag_apply(const char *cmd, int code, const char *arg, pl_engine_config *c);
int pl_engine_flag_apply_named(const char *cmd, const char *flag, int code, const char *arg,
                               pl_engine_config *c);

#endif
