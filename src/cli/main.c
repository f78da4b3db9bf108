/* cli/main — `pagellm COMMAND ...`: dispatch to the subcommands in cli/cmd_*.c. */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

static const pl_cli_command commands[] = {
    {"generate", pl_cmd_generate, "generate text from a prompt"},
    {"tokenize", pl_cmd_tokenize, "print the token ids of a text as a JSON array"},
    {"detokenize", pl_cmd_detokenize, "print the text of token ids"},
    {"inspect", pl_cmd_inspect, "describe a GGUF model file"},
    {"chat-template", pl_cmd_chat_template, "render a chat template (Jinja) for a context"},
    {"bench", pl_cmd_bench, "benchmarks: kernels, model, throughput, serve"},
    {"serve", pl_cmd_serve, "run the OpenAI-compatible HTTP server"},
    {"mkmodel", pl_cmd_mkmodel, "write a random-weight Llama GGUF (tests, benchmarks)"},
};

#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f) {
    fprintf(f, "usage: pagellm COMMAND [options]\n\ncommands:\n");
    pl_cli_list_commands(f, commands, N_COMMANDS, 12);
    fprintf(f, "\n'pagellm COMMAND --help' describes a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("pagellm 0.1.0\n");
        return 0;
    }
    int rc;
    if (pl_cli_dispatch(commands, N_COMMANDS, argc - 1, argv + 1, &rc)) return rc;
    fprintf(stderr, "pagellm: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
