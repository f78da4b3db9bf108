/* cli/common — model lookup, command dispatch and error printing shared by the subcommands. */
#include "cli/cli.h"

#include "cli/args.h"
#include "cli/flags.h"

#include "parallel/parallel.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

int pl_cli_resolve_model(const char *arg, char *out, size_t cap) {
    if (!arg || !*arg) {
        fprintf(stderr, "pagellm: no model given (use -m PATH or -m NAME)\n");
        return -1;
    }
    if (is_file(arg)) {
        snprintf(out, cap, "%s", arg);
        return 0;
    }
    const char *dirs[3] = {"./models", getenv("PAGELLM_MODELS"), "../shared/models"};
    const char *suffixes[2] = {"", ".gguf"};
    int bare = strchr(arg, '/') == NULL;
    if (bare) {
        for (int d = 0; d < 3; d++) {
            if (!dirs[d] || !*dirs[d]) continue;
            for (int s = 0; s < 2; s++) {
                snprintf(out, cap, "%s/%s%s", dirs[d], arg, suffixes[s]);
                if (is_file(out)) return 0;
            }
        }
    }
    fprintf(stderr, "pagellm: model '%s' not found.\n", arg);
    if (bare) {
        fprintf(stderr, "  looked for %s and %s.gguf in: ./models", arg, arg);
        if (dirs[1] && *dirs[1]) fprintf(stderr, ", %s ($PAGELLM_MODELS)", dirs[1]);
        else fprintf(stderr, ", $PAGELLM_MODELS (not set)");
        fprintf(stderr, ", ../shared/models\n");
    }
    fprintf(stderr, "  pass a path to a GGUF file, or put one in ./models. For example:\n"
                    "    mkdir -p models && curl -L -o models/stories260K.gguf "
                    "https://huggingface.co/ggml-org/models/resolve/main/tinyllamas/"
                    "stories260K.gguf\n");
    return -1;
}

char *pl_cli_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0, r;
    char *buf = malloc(cap);
    while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        return NULL;
    }
    buf[n] = 0; /* n < cap: the loop grows the buffer when it fills */
    if (len) *len = n;
    return buf;
}

int pl_cli_dispatch(const pl_cli_command *rows, size_t n, int argc, char **argv, int *rc) {
    for (size_t i = 0; argc > 0 && i < n; i++)
        if (!strcmp(argv[0], rows[i].name)) {
            *rc = rows[i].fn(argc, argv);
            return 1;
        }
    return 0;
}

void pl_cli_list_commands(FILE *f, const pl_cli_command *rows, size_t n, int width) {
    for (size_t i = 0; i < n; i++) fprintf(f, "  %-*s %s\n", width, rows[i].name, rows[i].help);
}

int pl_cli_fail(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "pagellm %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

void pl_cli_dist_report(int always) {
    if (!always && !pl_dist_active()) return;
    char line[512];
    pl_dist_report(line, sizeof line);
    fprintf(stderr, "%s\n", line);
}

void pl_cli_dist_probe(pl_engine *e) {
    if (!pl_dist_active()) return;
    static const int32_t tokens[] = {1, 32};
    for (int i = 0; i < 2; i++) {
        double us;
        int64_t n = (int64_t)tokens[i] * pl_engine_n_embd(e);
        if (pl_dist_probe_reduce(n, 200, &us) != PL_OK) {
            fprintf(stderr, "tensor parallel probe: %s\n", pl_last_error());
            return;
        }
        fprintf(stderr, "tensor parallel probe: one reduction of %d token%s x %d floats (%.1f KiB "
                "per rank) takes %.1f us with every rank waiting in it\n", tokens[i],
                tokens[i] == 1 ? "" : "s", pl_engine_n_embd(e), (double)n * 4 / 1024, us);
    }
}

pl_status pl_cli_engine_create(const char *cmd, const pl_engine_config *c, int report,
                               pl_engine **e) {
    *e = NULL;
    if (c->tensor_parallel_size > 1) {
        PL_TRY(pl_tp_init(c->tensor_parallel_size));
        if (pl_tp_rank() != 0) {
            /* serve blocks SIGTERM for its sigwait; a worker has no server and takes it itself
             * (parallel.h: it cancels a wait on a rank that is gone) */
            sigset_t term;
            sigemptyset(&term);
            sigaddset(&term, SIGTERM);
            pthread_sigmask(SIG_UNBLOCK, &term, NULL);
            pl_status st = pl_tp_worker_run(c);
            if (st != PL_OK)
                fprintf(stderr, "pagellm %s: rank %d: %s\n", cmd, pl_dist_rank(), pl_last_error());
            else if (report)
                pl_cli_dist_report(1);
            exit(st == PL_OK ? 0 : 1);
        }
    }
    return pl_engine_create(c, e);
}

int pl_cli_emit_line(const char *cmd, const char *line, const char *output) {
    printf("%s\n", line);
    fflush(stdout);
    if (!output) return 0;
    FILE *f = fopen(output, "a");
    int bad = !f || fprintf(f, "%s\n", line) < 0;
    if (f && fclose(f)) bad = 1;
    return bad ? pl_cli_fail(cmd, "cannot append to %s", output) : 0;
}

int pl_cli_flag_rate(const char *cmd, const pl_flag *f, const char *arg, void *opts) {
    double *rate = (double *)((char *)opts + f->aux);
    if (!strcmp(arg, "inf")) *rate = INFINITY;
    else if (pl_arg_float(cmd, "--request-rate", arg, 1e-6, 1e9, rate)) return 2;
    return 0;
}
