/* cli/cli — the `pagellm` subcommands and what they share.
 *
 * Each subcommand is `int pl_cmd_NAME(int argc, char **argv)` with argv[0] = NAME, returning the
 * process exit code: 0 success, 1 runtime error (one clear line on stderr), 2 usage error (usage
 * on stderr).
 */
#ifndef PL_CLI_CLI_H
#define PL_CLI_CLI_H

#include "pagellm.h"

#include <stddef.h>
#include <stdio.h>

int pl_cmd_generate(int argc, char **argv);
int pl_cmd_tokenize(int argc, char **argv);
int pl_cmd_detokenize(int argc, char **argv);
int pl_cmd_inspect(int argc, char **argv);
int pl_cmd_bench(int argc, char **argv);
/* `pagellm bench` subcommands (argv[0] = the subcommand's name), one file each: bench_NAME.c */
int pl_bench_kernels(int argc, char **argv);
int pl_bench_model(int argc, char **argv);
int pl_bench_vattn(int argc, char **argv);
int pl_bench_throughput(int argc, char **argv);
int pl_bench_serve(int argc, char **argv);
int pl_bench_preempt(int argc, char **argv);
int pl_cmd_serve(int argc, char **argv);
int pl_cmd_mkmodel(int argc, char **argv);
/* mkmodel with --lora-of: a random LoRA adapter of a base model (mkmodel_lora.c) */
int pl_cmd_mkmodel_lora(int argc, char **argv);
int pl_cmd_chat_template(int argc, char **argv);

/* Resolve a model argument: an existing path is used as is; a bare name is looked up as NAME and
 * NAME.gguf in ./models, $PAGELLM_MODELS and ../shared/models. On failure prints where it looked
 * and how to get a model to stderr and returns -1; on success writes the path into out. */
int pl_cli_resolve_model(const char *arg, char *out, size_t cap);

/* A whole file, malloc'ed and NUL-terminated (*len bytes before the NUL; len may be NULL);
 * NULL when it cannot be read or memory runs out. */
char *pl_cli_read_file(const char *path, size_t *len);

/* A benchmark's result line: printed on stdout (flushed) and, when output is not NULL, appended
 * to that file. 0, or 1 after "pagellm CMD: cannot append to FILE" on stderr. */
int pl_cli_emit_line(const char *cmd, const char *line, const char *output);

/* pl_engine_create, and under --tensor-parallel-size N > 1 first joining the MPI job
 * (parallel/parallel.h): rank 0 returns with the engine; every other rank runs as a worker until
 * rank 0 stops it and then exits the process here (0, or 1 after printing why; with `report`, its
 * pl_dist_report line on stderr first). */
pl_status pl_cli_engine_create(const char *cmd, const pl_engine_config *c, int report,
                               pl_engine **e);
/* Rank 0's pl_dist_report line on stderr, under tensor parallelism or if `always`. */
void pl_cli_dist_report(int always);
/* Under tensor parallelism, time the reduction of 1 and of 32 tokens' hidden states with every
 * rank in the loop (parallel.h: pl_dist_probe_reduce) and print it on stderr. */
void pl_cli_dist_probe(pl_engine *e);

/* A dispatch table's row: `pagellm` commands (main.c) and `pagellm bench` benchmarks. */
typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} pl_cli_command;

/* Run the row named argv[0] with (argc, argv) and return 1 with its exit code in *rc, or return
 * 0 when no row has that name. */
int pl_cli_dispatch(const pl_cli_command *rows, size_t n, int argc, char **argv, int *rc);
/* Each row as "  NAME HELP", the names padded to `width`. */
void pl_cli_list_commands(FILE *f, const pl_cli_command *rows, size_t n, int width);

/* A cli/flags.h PL_FLAG_FN action for --request-rate R: Poisson arrivals per second in [1e-6,
 * 1e9], or inf, into the double at byte offset aux of the options. */
struct pl_flag;
int pl_cli_flag_rate(const char *cmd, const struct pl_flag *f, const char *arg, void *opts);

/* Runtime error helper: prints "pagellm CMD: MESSAGE" to stderr and returns 1. */
int pl_cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
