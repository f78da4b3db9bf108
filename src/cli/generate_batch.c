/* cli/generate_batch — see generate_batch.h. */
#include "cli/generate_batch.h"
#include "base/buf.h"
#include "base/clock.h"

#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    uint64_t id;                /* engine request id (when added) */
    int added, finished;
    json_t *result;             /* the output line, once known */
    pl_server_choice *choices;  /* [n] */
    int32_t n, logprobs;
    json_t *prompt_ids, *prompt_lp;
    int32_t n_cached;
    char *error;
} batch_item;


/* `prompt_ids` and `beam_width` are this command's conveniences over the completions API. */
static void normalise(json_t *o) {
    json_t *ids = json_object_get(o, "prompt_ids");
    if (ids && !json_object_get(o, "prompt")) json_object_set(o, "prompt", ids);
    json_t *bw = json_object_get(o, "beam_width");
    if (bw && json_is_integer(bw)) {
        json_object_set(o, "best_of", bw);
        json_object_set_new(o, "use_beam_search", json_true());
        if (!json_object_get(o, "n")) json_object_set_new(o, "n", json_integer(1));
    }
}

static json_t *error_line(size_t index, const char *msg) {
    return json_pack("{s:I,s:s}", "index", (json_int_t)index, "error", msg);
}

/* Parse one line and add it to the engine; on failure item->result is the error line. */
static void add_line(pl_engine *e, batch_item *it, size_t index, const char *line, size_t len) {
    pl_server_error err;
    json_t *o = pl_server_parse_json(line, len, &err);
    if (!o) {
        it->result = error_line(index, err.message);
        return;
    }
    normalise(o);
    /* This command's own field (the server always parses special tokens). */
    json_t *ps = json_object_get(o, "parse_special");
    if (ps && !json_is_null(ps) && !json_is_boolean(ps)) {
        it->result = error_line(index, "'parse_special' must be a boolean");
        json_decref(o);
        return;
    }
    int parse_special = json_is_true(ps);
    char *body = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    pl_server_request r;
    memset(&r, 0, sizeof r);
    int bad = pl_server_parse_request(body, strlen(body), 0, 20, &r, &err);
    free(body);
    if (bad) {
        it->result = error_line(index, err.message);
        return;
    }
    if (r.n_prompts != 1) {
        it->result = error_line(index, "one prompt per line (a string or a list of token ids)");
        pl_server_request_destroy(&r);
        return;
    }
    r.params.logprobs = r.logprobs;
    r.params.parse_special = parse_special;
    r.params.add_special = r.add_special_tokens;
    const pl_server_prompt *p = &r.prompts[0];
    if (pl_engine_add_request(e, p->text, p->ids, p->n_ids, &r.params, &it->id) != PL_OK) {
        it->result = error_line(index, pl_last_error());
    } else {
        it->added = 1;
        it->n = r.params.n;
        it->logprobs = r.params.logprobs;
        it->choices = calloc((size_t)it->n, sizeof *it->choices);
    }
    pl_server_request_destroy(&r);
}

static void finish_item(batch_item *it, size_t index) {
    if (it->error) {
        it->result = error_line(index, it->error);
    } else {
        json_t *comps = json_array();
        int64_t generated = 0;
        for (int32_t k = 0; k < it->n; k++) {
            json_t *c = pl_gen_choice_json(&it->choices[k], it->logprobs >= 0);
            json_object_set_new(c, "index", json_integer(k));
            json_array_append_new(comps, c);
            generated += it->choices[k].n;
        }
        int64_t np = it->prompt_ids ? (int64_t)json_array_size(it->prompt_ids) : 0;
        it->result = json_pack("{s:I,s:O,s:O,s:o,s:{s:I,s:I,s:I}}", "index", (json_int_t)index,
                               "prompt_ids", it->prompt_ids ? it->prompt_ids : json_null(),
                               "prompt_logprobs", it->prompt_lp ? it->prompt_lp : json_null(),
                               "completions", comps, "usage", "prompt_tokens", (json_int_t)np,
                               "completion_tokens", (json_int_t)generated, "cached_tokens",
                               (json_int_t)it->n_cached);
    }
    for (int32_t k = 0; k < it->n; k++) pl_server_choice_destroy(&it->choices[k]);
    free(it->choices);
    it->choices = NULL;
    json_decref(it->prompt_ids);
    json_decref(it->prompt_lp);
    it->prompt_ids = it->prompt_lp = NULL;
    it->finished = 1;
}

static void collect(pl_engine *e, batch_item *it, size_t index, int64_t *tokens) {
    pl_request_output *out;
    while (!it->finished && pl_engine_poll(e, it->id, 0, &out) == PL_OK) {
        if (out->prompt_ids) {
            it->prompt_ids = json_array();
            for (int32_t i = 0; i < out->n_prompt_tokens; i++)
                json_array_append_new(it->prompt_ids, json_integer(out->prompt_ids[i]));
            it->prompt_lp = pl_gen_prompt_logprobs_json(out);
            it->n_cached = out->n_cached_tokens;
        }
        for (int32_t i = 0; i < out->n_deltas; i++) {
            const pl_completion_delta *d = &out->deltas[i];
            if (d->index < 0 || d->index >= it->n) continue;
            pl_server_choice_add(&it->choices[d->index], d);
            *tokens += d->n_tokens;
        }
        if (out->error && !it->error) it->error = strdup(out->error);
        int fin = out->finished;
        pl_request_output_destroy(out);
        if (fin) finish_item(it, index);
    }
}

static void progress(size_t done, size_t total, int64_t tokens, double t0, int tty, int final) {
    double el = pl_clock_now() - t0, rate = el > 0 ? (double)tokens / el : 0;
    double eta = done ? el / (double)done * (double)(total - done) : 0;
    if (tty) {
        int w = 30, fill = total ? (int)((double)w * (double)done / (double)total) : w;
        fprintf(stderr, "\r[%.*s%*s] %zu/%zu requests | %.1f tok/s | ETA %d:%02d ", fill,
                "##############################", w - fill, "", done, total, rate,
                (int)eta / 60, (int)eta % 60);
        if (final) fputc('\n', stderr);
    } else {
        fprintf(stderr, "generate: %zu/%zu requests done, %lld tokens, %.1f tok/s, ETA %.0f s\n",
                done, total, (long long)tokens, rate, eta);
    }
}

int pl_gen_batch(pl_engine *e, const char *input, const char *output, int verbose) {
    FILE *in = fopen(input, "rb");
    if (!in) return pl_cli_fail("generate", "cannot read --input '%s'", input);
    FILE *out = fopen(output, "wb");
    if (!out) {
        fclose(in);
        return pl_cli_fail("generate", "cannot write --output '%s'", output);
    }
    batch_item *items = NULL;
    size_t n = 0, cap = 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    while ((len = getline(&line, &lcap, in)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        size_t k = 0;
        while (k < (size_t)len && (line[k] == ' ' || line[k] == '\t')) k++;
        if (k == (size_t)len) continue; /* blank line */
        if (pl_array_reserve(&items, &cap, n + 1, sizeof *items)) break;
        memset(&items[n], 0, sizeof items[n]);
        add_line(e, &items[n], n, line, (size_t)len);
        n++;
    }
    free(line);
    fclose(in);

    int tty = isatty(2), rc = 0;
    double t0 = pl_clock_now(), last = t0;
    size_t written = 0, done = 0;
    int64_t tokens = 0;
    for (;;) {
        for (size_t i = written; i < n; i++)
            if (items[i].added && !items[i].finished) collect(e, &items[i], i, &tokens);
        while (written < n && items[written].result) {
            char *s = json_dumps(items[written].result, JSON_COMPACT | JSON_ENSURE_ASCII);
            fprintf(out, "%s\n", s);
            free(s);
            rc |= json_object_get(items[written].result, "error") != NULL;
            json_decref(items[written].result);
            free(items[written].error);
            written++;
            done++;
        }
        if (written == n) break;
        double t = pl_clock_now();
        if (t - last > (tty ? 0.2 : 10.0)) {
            progress(done, n, tokens, t0, tty, 0);
            last = t;
        }
        if (pl_engine_step(e) != PL_OK) {
            pl_cli_fail("generate", "%s", pl_last_error());
            rc = 1;
        }
    }
    if (tty || verbose) progress(done, n, tokens, t0, tty, 1);
    free(items);
    if (fclose(out) != 0) return pl_cli_fail("generate", "writing '%s' failed", output);
    return rc ? 1 : 0;
}
