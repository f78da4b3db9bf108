/* cli/cmd_bench — `pagellm bench SUBCOMMAND`: benchmarks print machine-readable results; they
 * are measurements, never tests (docs/BENCHMARKS.md records them with their commands). */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} subs[] = {
    {"kernels", pl_bench_kernels, "each kernel's GB/s and GFLOP/s beside the machine's limits"},
    {"model", pl_bench_model, "prefill and decode tokens/s of a model at several batch sizes"},
    {"throughput", pl_bench_throughput, "offline engine throughput on a dataset (paper Fig. 12)"},
    {"serve", pl_bench_serve, "an OpenAI-compatible server under Poisson arrivals"},
    {"preempt", pl_bench_preempt, "swap vs recompute of one KV block per block size (paper Fig. 19a)"},
    {"vattn", pl_bench_vattn, "kv-layout vattention: page map/unmap cost, contiguous attention"},
};

int pl_cmd_bench(int argc, char **argv) {
    if (argc >= 2)
        for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
            if (!strcmp(argv[1], subs[i].name)) return subs[i].fn(argc - 1, argv + 1);
    FILE *f = argc >= 2 && strcmp(argv[1], "--help") && strcmp(argv[1], "-h") ? stderr : stdout;
    if (f == stderr && argc >= 2) fprintf(stderr, "pagellm bench: unknown benchmark '%s'\n", argv[1]);
    fprintf(f, "usage: pagellm bench BENCHMARK [options]\n\nbenchmarks:\n");
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
        fprintf(f, "  %-11s %s\n", subs[i].name, subs[i].help);
    return f == stderr ? 2 : 0;
}
