/* cli/flags — a command's flags as one table: the parser, the `--help` text and every usage error
 * come from the same rows, so a flag cannot be parsed without being documented or documented
 * without being parsed.
 *
 * A row (pl_flag) says the flag's name (and one-letter form), the kind of its value, where the
 * value goes (an offset into the command's options struct: PL_FLAG_AT) and its help line. A
 * command (pl_flag_cmd) is its rows, its usage lines and, if it runs the engine, where its
 * pl_engine_config is: then every engine flag of engine_flags.h is accepted and listed too.
 *
 * Errors, each "pagellm CMD: ..." on stderr and exit code 2, then the usage: an unknown flag
 * as given (a long one with the closest known name), a flag missing its value, a value that is
 * not a number or is out of range (naming the flag and the range) or that a PL_FLAG_FN row
 * refused, an unexpected argument.
 *
 * Adopting it in a new command: turn its getopt_long table, switch
 * and usage text into pl_flag rows (plain values by kind; anything with more logic, a repeatable
 * flag or one that sets two fields, as PL_FLAG_FN), then call pl_flags_parse and read the
 * positional arguments from argv[*first_arg ..]. tests/unit/test_cli_flags.c shows the contract.
 */
#ifndef PL_CLI_FLAGS_H
#define PL_CLI_FLAGS_H

#include <stddef.h>
#include <stdio.h>

typedef enum {
    PL_FLAG_SET, /* no value: the int at the offset becomes 1 */
    PL_FLAG_STR, /* the value as given: a const char * (argv's own string) */
    PL_FLAG_I32, /* an int32_t in [lo, hi] */
    PL_FLAG_F32, /* a float in [lo, hi] */
    PL_FLAG_I64, /* an int64_t in [lo, hi] (hi >= 2^63: up to INT64_MAX) */
    PL_FLAG_F64, /* a double in [lo, hi] */
    PL_FLAG_CHOICE, /* one of meta's '|'-separated names ("wall|cpu"): the int at the offset
                       becomes its index */
    PL_FLAG_FN,  /* fn does it (with a value when meta is set, without when it is NULL) */
} pl_flag_kind;

typedef struct pl_flag pl_flag;
/* A PL_FLAG_FN row's action: 0, or 2 after printing "pagellm CMD: --FLAG: problem". */
typedef int (*pl_flag_fn)(const char *cmd, const pl_flag *f, const char *arg, void *opts);

struct pl_flag {
    const char *name;     /* the long name without dashes */
    char short_name;      /* the one-letter form, or 0 */
    pl_flag_kind kind;
    size_t offset, size;  /* where the value goes in the options struct, and its size (checked
                             against the kind): PL_FLAG_AT(type, field); 0, 0 for PL_FLAG_FN */
    double lo, hi;        /* the numeric kinds: the accepted range */
    const char *meta;     /* the value's name in the help ("N"); NULL for a flag without one */
    const char *help;     /* the help text: lines after the first are indented to the help
                             column; NULL: accepted but not listed */
    pl_flag_fn fn;        /* PL_FLAG_FN only */
    int aux;              /* PL_FLAG_FN only: which of several flags sharing fn */
};

#define PL_FLAG_AT(type, field) offsetof(type, field), sizeof(((type *)0)->field)
/* The rows of each kind: options struct T, long name, one-letter form (or 0), the field, ... */
#define PL_FLAG_ROW_SET(T, name, sh, field, help) \
    {name, sh, PL_FLAG_SET, PL_FLAG_AT(T, field), 0, 0, NULL, help, NULL, 0}
#define PL_FLAG_ROW_STR(T, name, sh, field, meta, help) \
    {name, sh, PL_FLAG_STR, PL_FLAG_AT(T, field), 0, 0, meta, help, NULL, 0}
#define PL_FLAG_ROW_I32(T, name, sh, field, lo, hi, meta, help) \
    {name, sh, PL_FLAG_I32, PL_FLAG_AT(T, field), lo, hi, meta, help, NULL, 0}
#define PL_FLAG_ROW_F32(T, name, sh, field, lo, hi, meta, help) \
    {name, sh, PL_FLAG_F32, PL_FLAG_AT(T, field), lo, hi, meta, help, NULL, 0}
#define PL_FLAG_ROW_I64(T, name, sh, field, lo, hi, meta, help) \
    {name, sh, PL_FLAG_I64, PL_FLAG_AT(T, field), lo, hi, meta, help, NULL, 0}
#define PL_FLAG_ROW_F64(T, name, sh, field, lo, hi, meta, help) \
    {name, sh, PL_FLAG_F64, PL_FLAG_AT(T, field), lo, hi, meta, help, NULL, 0}
#define PL_FLAG_ROW_CHOICE(T, name, sh, field, names, help) \
    {name, sh, PL_FLAG_CHOICE, PL_FLAG_AT(T, field), 0, 0, names, help, NULL, 0}
#define PL_FLAG_ROW_FN(name, sh, fn, aux, meta, help) \
    {name, sh, PL_FLAG_FN, 0, 0, 0, 0, meta, help, fn, aux}

typedef struct {
    const char *name;       /* the command ("generate") */
    const char *usage;      /* the usage lines, each ending in '\n' */
    const char *about;      /* printed after the flags in --help, or NULL */
    const pl_flag *flags;
    size_t n_flags;
    ptrdiff_t engine;       /* offset of the command's pl_engine_config in its options, or -1:
                               the engine flags are not accepted */
    int max_args;           /* positional arguments allowed */
} pl_flag_cmd;

enum { PL_FLAGS_HELP = -1 }; /* pl_flags_parse printed the help: exit 0 */

/* Parse argv[1 ..] into opts (its defaults set by the caller). Returns 0 with the positional
 * arguments in argv[*first_arg .. argc) (getopt_long's order: they may be given among the flags),
 * PL_FLAGS_HELP after printing the help on stdout (-h, --help), or 2 after printing why. */
int pl_flags_parse(const pl_flag_cmd *cmd, int argc, char **argv, void *opts, int *first_arg);
/* The usage lines, every flag of the table (then the engine flags, then `about`). */
void pl_flags_help(const pl_flag_cmd *cmd, FILE *f);
/* The usage lines and where to find the rest (after a usage error). */
void pl_flags_usage(const pl_flag_cmd *cmd, FILE *f);
/* "pagellm CMD: need WHAT" and the usage on stderr (a required flag or argument is missing):
 * returns 2. */
int pl_flags_need(const pl_flag_cmd *cmd, const char *what);
/* One flag's help: "  -s, LABEL" (or six spaces and LABEL) padded to the help column, then the
 * help text, its later lines at the help column (engine_flags.c lists the engine flags with it). */
void pl_flags_help_row(FILE *f, char short_name, const char *label, const char *help);

#endif
