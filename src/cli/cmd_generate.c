/* cli/cmd_generate — placeholder until the forward pass lands (this commit is the skeleton). */
#include "cli/cli.h"

int pl_cmd_generate(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return pl_cli_fail("generate", "not built yet");
}
