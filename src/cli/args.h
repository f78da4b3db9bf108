/* cli/args — small helpers for parsing numeric flags with errors that name the flag. */
#ifndef PL_CLI_ARGS_H
#define PL_CLI_ARGS_H

#include <getopt.h>
#include <stdint.h>

/* Each returns 0 on success, -1 (after printing "pagellm CMD: FLAG: ...") on a bad value. */
int pl_arg_int(const char *cmd, const char *flag, const char *s, int64_t lo, int64_t hi,
               int64_t *out);
/* pl_arg_int into an int32_t (lo and hi within its range). */
int pl_arg_i32(const char *cmd, const char *flag, const char *s, int32_t lo, int32_t hi,
               int32_t *out);
/* pl_arg_float into a float. */
int pl_arg_f32(const char *cmd, const char *flag, const char *s, double lo, double hi, float *out);
int pl_arg_float(const char *cmd, const char *flag, const char *s, double lo, double hi,
                 double *out);
/* A byte count with an optional K/M/G/T suffix (powers of 1024; "KiB"/"KB" forms too). */
int pl_arg_bytes(const char *cmd, const char *flag, const char *s, uint64_t *out);
/* The known long option closest to `given` ("--gpu-memory-utilisation=0.9": dashes and any
 * "=value" are dropped) by edit distance, or NULL when none is close (more than a third of the
 * name, at least 2, differs). */
const char *pl_arg_closest(const char *given, const struct option *opts);
/* Print "pagellm CMD: unknown option 'X' (did you mean --Y?)". */
void pl_arg_unknown(const char *cmd, const char *given, const struct option *opts);
/* The same for the option getopt_long just refused ('?'): "-x" (no suggestion) for a letter it
 * does not know, also inside a group such as -xy; else the argument as written. */
void pl_arg_refused(const char *cmd, char **argv, const struct option *opts);
/* The flag as written on the command line for the option getopt_long just returned: argv[optind
 * - 1], or the one before it when the value was a separate argument. */
const char *pl_arg_flag_written(char **argv, int optind, const char *optarg);

/* A comma-separated list of ints (e.g. token ids); *out malloc'ed. */
int pl_arg_int_list(const char *cmd, const char *flag, const char *s, int32_t **out, int *n);
/* The same with 1 to max_n values, each in [lo, hi] (*out replaced: the old list is freed). */
int pl_arg_int_list_in(const char *cmd, const char *flag, const char *s, int32_t lo, int32_t hi,
                       int max_n, int32_t **out, int *n);

#endif
