/* cli/flags — see flags.h. */
#include "cli/flags.h"

#include "base/status.h"
#include "cli/args.h"
#include "cli/engine_flags.h"

#include <getopt.h>
#include <stdint.h>
#include <string.h>

enum {
    HELP_COLUMN = 33,
    LABEL_WIDTH = HELP_COLUMN - 6,
    FIRST_CODE = 256, /* a row's getopt code is FIRST_CODE + its index (below the engine's) */
    MAX_FLAGS = 64,
};

static int has_value(const pl_flag *f) {
    return f->kind == PL_FLAG_FN ? f->meta != NULL : f->kind != PL_FLAG_SET;
}

void pl_flags_help_row(FILE *f, char short_name, const char *label, const char *help) {
    if (short_name) fprintf(f, "  -%c, ", short_name);
    else fputs("      ", f);
    int w = (int)strlen(label);
    fprintf(f, "%s%*s", label, w < LABEL_WIDTH ? LABEL_WIDTH - w : 3, "");
    for (const char *p = help; *p;) { /* each line, the later ones at the help column */
        size_t len = strcspn(p, "\n");
        fprintf(f, "%.*s\n", (int)len, p);
        p += len;
        if (*p == '\n' && *++p) fprintf(f, "%*s", HELP_COLUMN, "");
    }
}

void pl_flags_usage(const pl_flag_cmd *cmd, FILE *f) {
    fprintf(f, "%s(pagellm %s --help lists every flag)\n", cmd->usage, cmd->name);
}

int pl_flags_need(const pl_flag_cmd *cmd, const char *what) {
    fprintf(stderr, "pagellm %s: need %s\n", cmd->name, what);
    pl_flags_usage(cmd, stderr);
    return 2;
}

void pl_flags_help(const pl_flag_cmd *cmd, FILE *f) {
    fputs(cmd->usage, f);
    for (size_t i = 0; i < cmd->n_flags; i++) {
        const pl_flag *r = &cmd->flags[i];
        if (!r->help) continue;
        char label[96];
        snprintf(label, sizeof label, "--%s%s%s", r->name, r->meta ? " " : "",
                 r->meta ? r->meta : "");
        pl_flags_help_row(f, r->short_name, label, r->help);
    }
    pl_flags_help_row(f, 'h', "--help", "this help");
    if (cmd->engine >= 0) pl_engine_flags_help(f);
    if (cmd->about) fputs(cmd->about, f);
}

/* A PL_FLAG_CHOICE row: the index of arg among the row's names, or 2 after "pagellm CMD: --FLAG:
 * 'X' is not A, B or C". */
static int choose(const pl_flag_cmd *cmd, const pl_flag *f, const char *arg, int *out) {
    int i = 0;
    for (const char *p = f->meta;; i++) {
        size_t len = strcspn(p, "|");
        if (strlen(arg) == len && !strncmp(p, arg, len)) return *out = i, 0;
        if (!p[len]) break;
        p += len + 1;
    }
    fprintf(stderr, "pagellm %s: --%s: '%s' is not ", cmd->name, f->name, arg);
    for (const char *p = f->meta; *p; i--) {
        size_t len = strcspn(p, "|");
        fprintf(stderr, "%s%.*s", p == f->meta ? "" : i == 0 ? " or " : ", ", (int)len, p);
        p += len + (p[len] != '\0');
    }
    fputc('\n', stderr);
    return 2;
}

/* Store one row's value (arg NULL for a flag without one): 0, or 2 after printing why. */
static int apply(const pl_flag_cmd *cmd, const pl_flag *f, const char *arg, void *opts) {
    char *at = (char *)opts + f->offset;
    char flag[80];
    snprintf(flag, sizeof flag, "--%s", f->name);
    switch (f->kind) {
    case PL_FLAG_SET:
        PL_ASSERT(f->size == sizeof(int));
        *(int *)at = 1;
        return 0;
    case PL_FLAG_STR:
        PL_ASSERT(f->size == sizeof(const char *));
        *(const char **)at = arg;
        return 0;
    case PL_FLAG_I32:
        PL_ASSERT(f->size == sizeof(int32_t) && f->lo >= INT32_MIN && f->hi <= INT32_MAX);
        return pl_arg_i32(cmd->name, flag, arg, (int32_t)f->lo, (int32_t)f->hi, (int32_t *)at) ? 2
                                                                                               : 0;
    case PL_FLAG_F32:
        PL_ASSERT(f->size == sizeof(float));
        return pl_arg_f32(cmd->name, flag, arg, f->lo, f->hi, (float *)at) ? 2 : 0;
    case PL_FLAG_I64: {
        PL_ASSERT(f->size == sizeof(int64_t));
        int64_t hi = f->hi >= 0x1p63 ? INT64_MAX : (int64_t)f->hi;
        return pl_arg_int(cmd->name, flag, arg, (int64_t)f->lo, hi, (int64_t *)at) ? 2 : 0;
    }
    case PL_FLAG_F64:
        PL_ASSERT(f->size == sizeof(double));
        return pl_arg_float(cmd->name, flag, arg, f->lo, f->hi, (double *)at) ? 2 : 0;
    case PL_FLAG_CHOICE:
        PL_ASSERT(f->size == sizeof(int));
        return choose(cmd, f, arg, (int *)at);
    case PL_FLAG_FN:
        return f->fn(cmd->name, f, arg, opts);
    }
    return 2;
}

int pl_flags_parse(const pl_flag_cmd *cmd, int argc, char **argv, void *opts, int *first_arg) {
    PL_ASSERT(cmd->n_flags < MAX_FLAGS);
    struct option own[MAX_FLAGS + 2];
    char shorts[2 * MAX_FLAGS + 8] = ":h";
    size_t ns = 2;
    for (size_t i = 0; i < cmd->n_flags; i++) {
        const pl_flag *f = &cmd->flags[i];
        int arg = has_value(f);
        own[i] = (struct option){f->name, arg ? required_argument : no_argument, 0,
                                 FIRST_CODE + (int)i};
        if (f->short_name) {
            shorts[ns++] = f->short_name;
            if (arg) shorts[ns++] = ':';
        }
    }
    own[cmd->n_flags] = (struct option){"help", no_argument, 0, 'h'};
    own[cmd->n_flags + 1] = (struct option){0, 0, 0, 0};
    const struct option *longopts = own;
    pl_engine_config *eng = NULL;
    if (cmd->engine >= 0) {
        eng = (pl_engine_config *)((char *)opts + cmd->engine);
        longopts = pl_engine_longopts(own);
        const char *es = pl_engine_shortopts();
        PL_ASSERT(ns + strlen(es) < sizeof shorts);
        memcpy(shorts + ns, es, strlen(es));
        ns += strlen(es);
    }
    shorts[ns] = '\0';
    optind = 0; /* not 1: glibc then also forgets a group (-xy) a refused parse left half read */
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, shorts, longopts, NULL)) != -1) {
        const pl_flag *f = NULL;
        if (c >= FIRST_CODE && c < FIRST_CODE + (int)cmd->n_flags) f = &cmd->flags[c - FIRST_CODE];
        for (size_t i = 0; !f && c > 0 && c < 128 && i < cmd->n_flags; i++)
            if (cmd->flags[i].short_name == c) f = &cmd->flags[i];
        if (f) {
            int rc = apply(cmd, f, has_value(f) ? optarg : NULL, opts);
            if (rc) {
                pl_flags_usage(cmd, stderr);
                return rc;
            }
        } else if (c == 'h') {
            pl_flags_help(cmd, stdout);
            return PL_FLAGS_HELP;
        } else if (c == ':') {
            fprintf(stderr, "pagellm %s: %s needs a value\n", cmd->name, argv[optind - 1]);
            pl_flags_usage(cmd, stderr);
            return 2;
        } else {
            int rc = eng ? pl_engine_flag_or_unknown(cmd->name, c, argv, longopts, eng) : -1;
            if (rc < 0 && !eng) pl_arg_refused(cmd->name, argv, longopts);
            if (rc) {
                pl_flags_usage(cmd, stderr);
                return 2;
            }
        }
    }
    if (argc - optind > cmd->max_args) {
        fprintf(stderr, "pagellm %s: unexpected argument '%s'\n", cmd->name,
                argv[optind + cmd->max_args]);
        pl_flags_usage(cmd, stderr);
        return 2;
    }
    *first_arg = optind;
    return 0;
}
