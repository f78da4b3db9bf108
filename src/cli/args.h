/* cli/args — small helpers for parsing numeric flags with errors that name the flag. */
#ifndef PL_CLI_ARGS_H
#define PL_CLI_ARGS_H

#include <stdint.h>

/* Each returns 0 on success, -1 (after printing "pagellm CMD: FLAG: ...") on a bad value. */
int pl_arg_int(const char *cmd, const char *flag, const char *s, int64_t lo, int64_t hi,
               int64_t *out);
int pl_arg_float(const char *cmd, const char *flag, const char *s, double lo, double hi,
                 double *out);
/* A byte count with an optional K/M/G/T suffix (powers of 1024; "KiB"/"KB" forms too). */
int pl_arg_bytes(const char *cmd, const char *flag, const char *s, uint64_t *out);
/* A comma-separated list of ints (e.g. token ids); *out malloc'ed. */
int pl_arg_int_list(const char *cmd, const char *flag, const char *s, int32_t **out, int *n);

#endif
