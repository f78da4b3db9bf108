/* cli/cmd_tokenize — `pagellm tokenize` and `pagellm detokenize`: the model's tokenizer alone
 * (only the vocabulary is read from the file, no weights are bound). */
#include "cli/args.h"
#include "cli/cli.h"
#include "cli/flags.h"

#include "tokenizer/tokenizer.h"

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

static const pl_flag TOKENIZE_FLAGS[] = {
    PL_FLAG_ROW_STR(tokenize_opts, "model", 'm', model, "MODEL",
     "GGUF path or bare name (./models, $PAGELLM_MODELS,\n../shared/models)"),
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

int pl_cmd_detokenize(int argc, char **argv) {
    const char *model = NULL;
    int first = 1;
    for (; first < argc; first++) {
        if ((!strcmp(argv[first], "-m") || !strcmp(argv[first], "--model")) && first + 1 < argc)
            model = argv[++first];
        else if (!strcmp(argv[first], "-h") || !strcmp(argv[first], "--help")) {
            printf("usage: pagellm detokenize -m MODEL ID...\n");
            return 0;
        } else
            break;
    }
    if (!model || first >= argc) {
        fprintf(stderr, "usage: pagellm detokenize -m MODEL ID...\n");
        return 2;
    }
    int n = argc - first;
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    for (int i = 0; i < n; i++) {
        int64_t v;
        /* Accept "1 2 3", "1,2,3" and "[1, 2, 3]" forms alike. */
        char *s = argv[first + i];
        while (*s == '[') s++;
        size_t l = strlen(s);
        while (l && (s[l - 1] == ']' || s[l - 1] == ',')) s[--l] = '\0';
        if (pl_arg_int("detokenize", "ID", s, INT32_MIN, INT32_MAX, &v)) {
            free(ids);
            return 2;
        }
        ids[i] = (int32_t)v;
    }
    detokenize_job job = {ids, (size_t)n};
    int rc = with_tokenizer("detokenize", model, run_detokenize, &job);
    free(ids);
    return rc;
}
