/* cli/bench_kernels — `pagellm bench kernels` (being built; see the benchmark issues). */
#include "cli/cli.h"

#include <stdio.h>

int pl_bench_kernels(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "pagellm bench kernels: not built yet\n");
    return 1;
}
