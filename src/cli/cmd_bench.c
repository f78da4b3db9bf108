/* cli/cmd_bench — `pagellm bench SUBCOMMAND`: benchmarks print machine-readable results; they
 * are measurements, never tests (docs/BENCHMARKS.md records them with their commands). */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

static const pl_cli_command subs[] = {
    {"kernels", pl_bench_kernels, "each kernel's GB/s and GFLOP/s beside the machine's limits"},
    {"model", pl_bench_model, "prefill and decode tokens/s of a model at several batch sizes"},
    {"throughput", pl_bench_throughput, "offline engine throughput on a dataset (paper Fig. 12)"},
    {"serve", pl_bench_serve, "an OpenAI-compatible server under Poisson arrivals"},
    {"preempt", pl_bench_preempt, "swap vs recompute of one KV block per block size (paper Fig. 19a)"},
    {"vattn", pl_bench_vattn, "kv-layout vattention: page map/unmap cost, contiguous attention"},
};

#define N_SUBS (sizeof subs / sizeof subs[0])

int pl_cmd_bench(int argc, char **argv) {
    int rc;
    if (pl_cli_dispatch(subs, N_SUBS, argc - 1, argv + 1, &rc)) return rc;
    FILE *f = argc >= 2 && strcmp(argv[1], "--help") && strcmp(argv[1], "-h") ? stderr : stdout;
    if (f == stderr && argc >= 2) fprintf(stderr, "pagellm bench: unknown benchmark '%s'\n", argv[1]);
    fprintf(f, "usage: pagellm bench BENCHMARK [options]\n\nbenchmarks:\n");
    pl_cli_list_commands(f, subs, N_SUBS, 11);
    return f == stderr ? 2 : 0;
}
