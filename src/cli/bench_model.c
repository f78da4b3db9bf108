/* cli/bench_model — `pagellm bench model` (being built; see the benchmark issues). */
#include "cli/cli.h"

#include <stdio.h>

int pl_bench_model(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "pagellm bench model: not built yet\n");
    return 1;
}
