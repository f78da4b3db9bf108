/* cli/bench_throughput — `pagellm bench throughput` (being built; see the benchmark issues). */
#include "cli/cli.h"

#include <stdio.h>

int pl_bench_throughput(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "pagellm bench throughput: not built yet\n");
    return 1;
}
