/* cli/engine_flags — the engine flags every engine-running command accepts (generate, serve,
 * bench), with vLLM's names. A command puts PL_ENGINE_LONGOPTS into its getopt_long table and
 * hands codes >= PL_ENGINE_OPT_BASE to pl_engine_flag_apply. */
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
    PL_OPT_THREADS,
    PL_OPT_KVLAYOUT,
    PL_OPT_RESERVE,
    PL_OPT_SWAPFILE,
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
        {"no-enable-prefix-caching", no_argument, 0, PL_OPT_PREFIX_OFF},                         \
        {"threads", required_argument, 0, PL_OPT_THREADS},                                       \
        {"kv-layout", required_argument, 0, PL_OPT_KVLAYOUT},                                    \
        {"reserve", required_argument, 0, PL_OPT_RESERVE},                                       \
        {"swap-file", required_argument, 0, PL_OPT_SWAPFILE}

extern const char PL_ENGINE_FLAGS_HELP[];

/* Apply one engine flag. Returns 0, or 2 after printing "pagellm CMD: FLAG: problem". */
int pl_engine_flag_apply(const char *cmd, int code, const char *arg, pl_engine_config *c);

#endif
