/* cli/engine_flags — the engine flags every engine-running command accepts (generate, serve,
 * bench throughput), with vLLM's names. pl_flags_parse (cli/flags.h) builds such a command's
 * getopt_long table with pl_engine_longopts, prints pl_engine_flags_help in its --help and hands
 * the codes its own rows do not take to pl_engine_flag_or_unknown, when the command's
 * pl_flag_cmd.engine says where its pl_engine_config is; all three come from one table of flags.
 *
 * vLLM launch lines work unchanged: its engine flags that mean something on a CPU are mapped
 * (--dtype, --gpu-memory-utilization, --kv-cache-memory-bytes, --tensor-parallel-size), and
 * flags that only tune vLLM's own machinery (logging, uvicorn, CUDA graphs, ...) are accepted and
 * ignored with a warning naming them. Anything else stays an error. */
#ifndef PL_CLI_ENGINE_FLAGS_H
#define PL_CLI_ENGINE_FLAGS_H

#include "pagellm.h"

#include <getopt.h>
#include <stdio.h>

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
    PL_OPT_VATTN_SHARE,  /* --vattn-share (vattention: memfd pages, shared by forks) */
    PL_OPT_F16_WEIGHTS,  /* --f16-weights f16|bf16 (issue 35) */
    PL_OPT_IGNORED,      /* a vLLM-only flag with a value: accepted, ignored with a warning */
    PL_OPT_IGNORED_BOOL, /* the same without a value */
    PL_ENGINE_OPT_END,
};

/* The one table of the engine flags (engine_flags.c): each flag's getopt entry and its help. */
typedef struct {
    const char *name;     /* long name without dashes */
    int has_arg;          /* no_argument / required_argument */
    int code;             /* PL_OPT_* */
    char short_name;      /* the one-letter form ('t'), or 0 */
    const char *meta;     /* the value's name in the help ("N"), or NULL */
    const char *label;    /* replaces "--name META" in the help (flags documented together) */
    const char *help;     /* its lines after the first are indented to the help column; NULL:
                             not listed (documented by another entry's label, or in the footer) */
} pl_engine_flag;

/* A command's getopt_long table: own[] (up to its zero entry) then every engine flag, then a
 * zero entry. Static storage, rebuilt by each call. */
const struct option *pl_engine_longopts(const struct option *own);
/* The "engine:" section of a command's --help. */
void pl_engine_flags_help(FILE *f);
/* getopt's short options of the engine flags ("t:"), for a command's optstring. */
const char *pl_engine_shortopts(void);
/* A getopt_long code the command did not handle: an engine flag (or its one-letter form) is applied (0, or 2 after its
 * message), anything else is reported as unknown, naming the closest known flag (-1). */
int pl_engine_flag_or_unknown(const char *cmd, int code, char **argv, const struct option *opts,
                              pl_engine_config *c);

/* --f16-weights T (engine flag and bench model's): f16 or bf16 into *out; 0, or -1 after
 * printing "pagellm CMD: --f16-weights: ..." (the CPU check is the model loader's). */
int pl_arg_f16_weights(const char *cmd, const char *arg, pl_f16_weights *out);

/* Apply one engine flag. Returns 0, or 2 after printing "pagellm CMD: FLAG: problem". `flag` is
 * the flag as written (argv[optind - 1]), used to name an ignored vLLM flag in its warning. */
int pl_engine_flag_apply(const char *cmd, int code, const char *arg, pl_engine_config *c);
int pl_engine_flag_apply_named(const char *cmd, const char *flag, int code, const char *arg,
                               pl_engine_config *c);

#endif
