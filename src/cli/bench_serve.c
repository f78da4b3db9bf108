/* cli/bench_serve — `pagellm bench serve` (being built; see the benchmark issues). */
#include "cli/cli.h"

#include <stdio.h>

int pl_bench_serve(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "pagellm bench serve: not built yet\n");
    return 1;
}
