/* cli/cmd_tokenize — `pagellm tokenize` and `pagellm detokenize`: the model's tokenizer alone
 * (only the vocabulary is read from the file, no weights are bound). */
#include "cli/args.h"
#include "cli/cli.h"
#include "cli/flags.h"

#include "tokenizer/tokenizer.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int open_tokenizer(const char *cmd, const char *model, pl_gguf **g, pl_tokenizer **t) {
    char path[4096];
    if (pl_cli_resolve_model(model, path, sizeof path)) return 1;
    if (pl_gguf_open(path, g) != PL_OK) return pl_cli_fail(cmd, "%s", pl_last_error());
    if (pl_tokenizer_load(*g, t) != PL_OK) {
        int rc = pl_cli_fail(cmd, "%s: %s", path, pl_last_error());
        pl_gguf_close(*g);
        return rc;
    }
    return 0;
}

/* Open MODEL's tokenizer, run(cmd, t, ctx) with it and close it: run's code, or open_tokenizer's. */
static int with_tokenizer(const char *cmd, const char *model,
                          int (*run)(const char *cmd, pl_tokenizer *t, void *ctx), void *ctx) {
    pl_gguf *g;
    pl_tokenizer *t;
    int rc = open_tokenizer(cmd, model, &g, &t);
    if (rc) return rc;
    rc = run(cmd, t, ctx);
    pl_tokenizer_destroy(t);
    pl_gguf_close(g);
    return rc;
}

typedef struct {
    const char *text;
    size_t len;
    int add_special, parse_special;
} tokenize_job;

static int run_tokenize(const char *cmd, pl_tokenizer *t, void *ctx) {
    const tokenize_job *j = ctx;
    int32_t *ids;
    size_t n;
    if (pl_tokenize(t, j->text, j->len, j->add_special, j->parse_special, &ids, &n) != PL_OK)
        return pl_cli_fail(cmd, "%s", pl_last_error());
    putchar('[');
    for (size_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
    puts("]");
    free(ids);
    return 0;
}

typedef struct {
    const int32_t *ids;
    size_t n;
} detokenize_job;

static int run_detokenize(const char *cmd, pl_tokenizer *t, void *ctx) {
    const detokenize_job *j = ctx;
    char *text;
    size_t len;
    if (pl_detokenize(t, j->ids, j->n, 0, &text, &len) != PL_OK)
        return pl_cli_fail(cmd, "%s", pl_last_error());
    fwrite(text, 1, len, stdout);
    putchar('\n');
    free(text);
    return 0;
}

typedef struct {
    const char *model, *file;
    int add_special, parse_special;
} tokenize_opts;

/* -m MODEL, the same in both commands */
#define MODEL_ROW(T)                                                                      \
    PL_FLAG_ROW_STR(T, "model", 'm', model, "MODEL",                                      \
                    "GGUF path or bare name (./models, $PAGELLM_MODELS,\n../shared/models)")

static const pl_flag TOKENIZE_FLAGS[] = {
    MODEL_ROW(tokenize_opts),
    PL_FLAG_ROW_STR(tokenize_opts, "file", 'f', file, "F",
     "tokenize this file's text instead of TEXT"),
    PL_FLAG_ROW_SET(tokenize_opts, "add-special", 0, add_special,
     "add BOS / EOS as the model says"),
    PL_FLAG_ROW_SET(tokenize_opts, "parse-special", 0, parse_special,
     "the text of control tokens (\"<s>\") becomes those tokens"),
};

static const pl_flag_cmd TOKENIZE = {
    "tokenize", "usage: pagellm tokenize -m MODEL [--add-special] [--parse-special] (TEXT | --file F)\n",
    NULL, TOKENIZE_FLAGS, sizeof TOKENIZE_FLAGS / sizeof TOKENIZE_FLAGS[0], -1, 1};

int pl_cmd_tokenize(int argc, char **argv) {
    tokenize_opts o = {0};
    int first, rc = pl_flags_parse(&TOKENIZE, argc, argv, &o, &first);
    if (rc) return rc == PL_FLAGS_HELP ? 0 : rc;
    const char *model = o.model, *file = o.file;
    if (!model || (file != NULL) == (first < argc)) {
        fprintf(stderr, "pagellm tokenize: need -m MODEL and one of TEXT or --file F\n");
        pl_flags_usage(&TOKENIZE, stderr);
        return 2;
    }
    size_t len;
    char *text;
    if (file) {
        text = pl_cli_read_file(file, &len);
        if (!text) return pl_cli_fail("tokenize", "cannot read '%s'", file);
    } else {
        text = strdup(argv[first]);
        if (!text) return pl_cli_fail("tokenize", "out of memory");
        len = strlen(text);
    }
    tokenize_job job = {text, len, o.add_special, o.parse_special};
    rc = with_tokenizer("tokenize", model, run_tokenize, &job);
    free(text);
    return rc;
}

typedef struct {
    const char *model;
} detokenize_opts;

static const pl_flag DETOKENIZE_FLAGS[] = {MODEL_ROW(detokenize_opts)};

static const pl_flag_cmd DETOKENIZE = {
    "detokenize", "usage: pagellm detokenize -m MODEL ID...\n",
    "The ids may be given as 1 2 3, 1,2,3 or [1, 2, 3].\n", DETOKENIZE_FLAGS,
    sizeof DETOKENIZE_FLAGS / sizeof DETOKENIZE_FLAGS[0], -1, INT_MAX};

/* The ids in args[0 .. n), each one or more comma-separated ids with brackets and spaces around
 * them ignored: the count, or -1 after printing which one is not an id. */
static int parse_ids(char **args, int n, int32_t **out) {
    size_t cap = 0;
    for (int i = 0; i < n; i++)
        for (const char *p = args[i]; *p; p++) cap += *p == ',';
    int32_t *ids = malloc((cap + (size_t)n) * sizeof *ids);
    if (!ids) {
        pl_cli_fail("detokenize", "out of memory");
        return -1;
    }
    int k = 0;
    for (int i = 0; i < n; i++)
        for (char *s = args[i], *next; s; s = next) {
            next = strchr(s, ',');
            if (next) *next++ = '\0';
            while (*s == '[' || *s == ' ') s++;
            size_t l = strlen(s);
            while (l && (s[l - 1] == ']' || s[l - 1] == ' ')) s[--l] = '\0';
            if (!*s) continue; /* "1," "2": the comma's empty side */
            int64_t v;
            if (pl_arg_int("detokenize", "ID", s, 0, INT32_MAX, &v)) {
                free(ids);
                return -1;
            }
            ids[k++] = (int32_t)v;
        }
    *out = ids;
    return k;
}

int pl_cmd_detokenize(int argc, char **argv) {
    /* a negative number would reach getopt as a flag ("-5": unknown option '-5', "-12": '-1'):
     * name it as the id it was meant to be */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--")) break;
        if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) i++;
        else if (argv[i][0] == '-' && argv[i][1] >= '0' && argv[i][1] <= '9') {
            fprintf(stderr, "pagellm detokenize: ID: '%s' is negative: token ids are 0 or more\n",
                    argv[i]);
            pl_flags_usage(&DETOKENIZE, stderr);
            return 2;
        }
    }
    detokenize_opts o = {0};
    int first, rc = pl_flags_parse(&DETOKENIZE, argc, argv, &o, &first);
    if (rc) return rc == PL_FLAGS_HELP ? 0 : rc;
    if (!o.model || first >= argc)
        return pl_flags_need(&DETOKENIZE, !o.model ? "-m MODEL" : "one or more IDs");
    int32_t *ids = NULL;
    int n = parse_ids(argv + first, argc - first, &ids);
    if (n < 0) return 2;
    if (n == 0) {
        free(ids);
        return pl_flags_need(&DETOKENIZE, "one or more IDs");
    }
    detokenize_job job = {ids, (size_t)n};
    rc = with_tokenizer("detokenize", o.model, run_detokenize, &job);
    free(ids);
    return rc;
}
