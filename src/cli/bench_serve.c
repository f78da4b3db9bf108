/* cli/bench_serve — `pagellm bench serve`: an OpenAI-compatible server under Poisson arrivals
 * (the PagedAttention paper's latency-vs-rate figures). One thread drives a libcurl multi handle:
 * request i is sent at its arrival time as POST /v1/completions with the prompt as token ids,
 * max_tokens = its drawn output length, ignore_eos (so every server generates the same number of
 * tokens) and streaming; the client timestamps every content chunk. Works against any server
 * that speaks the OpenAI completions API with token-id prompts and ignore_eos (pagellm serve,
 * vLLM, llama.cpp's llama-server). Prints one JSON line (bench/bench.h: pl_bench_serve_report). */
#include "cli/args.h"
#include "cli/flags.h"
#include "base/clock.h"
#include "cli/cli.h"

#include "bench/bench.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *C = "bench serve";

typedef struct {
    const char *base_url, *model, *dataset, *tokenizer, *output, *label, *api_key, *endpoint;
    double rate, temperature, timeout;
    int64_t num_prompts, seed, vocab, max_total, max_in, max_out, shared_prefix, max_conc;
} sv_opts;

/* One request in flight. */
typedef struct {
    pl_bench_result *res;
    int32_t want_out;        /* output tokens asked for */
    double t_send, t_last;   /* absolute monotonic seconds */
    char *buf;               /* unparsed SSE bytes */
    size_t len, cap;
    int32_t chunks;          /* content chunks seen */
    int32_t usage_tokens;    /* usage.completion_tokens, or -1 */
    int done_marker;         /* saw [DONE] or a finish_reason */
    int error;               /* an error object in the stream */
    int32_t gaps_cap;
    struct curl_slist *hdr;
    CURL *h;                 /* while attached to the multi handle */
} flight;


#define STR(name, field, meta, help) PL_FLAG_ROW_STR(sv_opts, name, 0, field, meta, help)
#define I64(name, field, lo, hi, meta, help) \
    PL_FLAG_ROW_I64(sv_opts, name, 0, field, lo, hi, meta, help)
#define F64(name, field, lo, hi, meta, help) \
    PL_FLAG_ROW_F64(sv_opts, name, 0, field, lo, hi, meta, help)
static const pl_flag SERVE_FLAGS[] = {
    STR("base-url", base_url, "URL", "server root, e.g. http://127.0.0.1:8000"),
    STR("model", model, "NAME", "the model name sent in each request"),
    STR("endpoint", endpoint, "PATH", "(/v1/completions)"),
    STR("dataset", dataset, "D", "sharegpt (default), alpaca, fixed:IN:OUT or FILE.json"),
    I64("num-prompts", num_prompts, 1, 1000000, "N", "requests (100)"),
    PL_FLAG_ROW_FN("request-rate", 0, pl_cli_flag_rate, offsetof(sv_opts, rate), "R",
     "Poisson arrivals per second, or inf (all at once;\ndefault)"),
    I64("max-concurrency", max_conc, 0, 100000, "N", "at most N requests in flight (0 = no limit)"),
    I64("seed", seed, 0, 0x1p63, "S", "dataset and arrival seed (0)"),
    STR("tokenizer", tokenizer, "GGUF", "the model's tokenizer: FILE datasets, vocabulary size"),
    I64("vocab-size", vocab, 4, INT32_MAX, "N",
     "prompt ids are drawn below N (32000, or the tokenizer's)"),
    I64("max-total", max_total, 2, 1 << 24, "N",
     "prompt + output limit, the server's context (2048)"),
    I64("max-input", max_in, 1, 1 << 24, "N", "clamp the drawn prompt lengths (1024)"),
    I64("max-output", max_out, 1, 1 << 24, "N", "clamp the drawn output lengths (1024)"),
    I64("shared-prefix", shared_prefix, 0, 1 << 24, "N", "every prompt starts with the same N tokens"),
    F64("temperature", temperature, 0, 2, "T", "(0)"),
    F64("timeout", timeout, 0.001, 1e6, "S", "per request (600)"),
    STR("api-key", api_key, "KEY", "sent as a bearer token"),
    STR("label", label, "S", "copied into the JSON line"),
    STR("output", output, "FILE", "also append the JSON line to FILE"),
};
#undef STR
#undef I64
#undef F64

static const pl_flag_cmd SERVE = {
    "bench serve", "usage: pagellm bench serve --base-url URL --model NAME [options]\n", NULL,
    SERVE_FLAGS, sizeof SERVE_FLAGS / sizeof SERVE_FLAGS[0], -1, 0};

static int parse(int argc, char **argv, sv_opts *o) {
    memset(o, 0, sizeof *o);
    o->endpoint = "/v1/completions";
    o->dataset = "sharegpt";
    o->num_prompts = 100;
    o->rate = INFINITY;
    o->max_total = 2048;
    o->timeout = 600;
    int first, rc = pl_flags_parse(&SERVE, argc, argv, o, &first);
    if (rc) return rc == PL_FLAGS_HELP ? -1 : rc;
    if (!o->base_url || !o->model) return pl_flags_need(&SERVE, "--base-url and --model");
    return 0;
}

/* ---- the SSE stream ---- */

/* One "data: ..." payload. */
static void on_event(flight *f, const char *data, size_t n) {
    if (n == 6 && !memcmp(data, "[DONE]", 6)) {
        f->done_marker = 1;
        return;
    }
    json_error_t jerr;
    json_t *j = json_loadb(data, n, 0, &jerr);
    if (!j) return;
    if (json_object_get(j, "error")) f->error = 1;
    json_t *u = json_object_get(j, "usage");
    json_t *ct = json_is_object(u) ? json_object_get(u, "completion_tokens") : NULL;
    if (json_is_integer(ct)) f->usage_tokens = (int32_t)json_integer_value(ct);
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    if (json_is_object(ch)) {
        json_t *txt = json_object_get(ch, "text");
        if (!txt) txt = json_object_get(json_object_get(ch, "delta"), "content");
        json_t *fin = json_object_get(ch, "finish_reason");
        if (json_is_string(fin)) f->done_marker = 1;
        if (json_is_string(txt) && json_string_length(txt) > 0) {
            double t = pl_clock_now();
            if (f->chunks == 0) f->res->ttft = t - f->t_send;
            else {
                pl_bench_result *r = f->res;
                if (r->n_gaps == f->gaps_cap) {
                    int32_t nc = f->gaps_cap ? 2 * f->gaps_cap : 64;
                    double *g = realloc(r->gaps, (size_t)nc * sizeof *g);
                    if (g) r->gaps = g, f->gaps_cap = nc;
                }
                if (r->n_gaps < f->gaps_cap) r->gaps[r->n_gaps++] = t - f->t_last;
            }
            f->t_last = t;
            f->chunks++;
        }
    }
    json_decref(j);
}

static size_t on_data(char *p, size_t sz, size_t nm, void *ud) {
    flight *f = ud;
    size_t n = sz * nm;
    if (f->len + n + 1 > f->cap) {
        size_t nc = (f->len + n + 1) * 2;
        char *b = realloc(f->buf, nc);
        if (!b) return 0;
        f->buf = b, f->cap = nc;
    }
    memcpy(f->buf + f->len, p, n);
    f->len += n;
    f->buf[f->len] = 0;
    /* consume complete lines */
    size_t start = 0;
    for (;;) {
        char *nl = memchr(f->buf + start, '\n', f->len - start);
        if (!nl) break;
        size_t end = (size_t)(nl - f->buf), e = end;
        if (e > start && f->buf[e - 1] == '\r') e--;
        if (e - start >= 5 && !memcmp(f->buf + start, "data:", 5)) {
            size_t s = start + 5;
            while (s < e && f->buf[s] == ' ') s++;
            on_event(f, f->buf + s, e - s);
        }
        start = end + 1;
    }
    memmove(f->buf, f->buf + start, f->len - start);
    f->len -= start;
    return n;
}

/* ---- requests ---- */

static char *request_body(const sv_opts *o, const pl_bench_request *q) {
    json_t *ids = json_array();
    for (int32_t i = 0; i < q->in_len; i++) json_array_append_new(ids, json_integer(q->prompt[i]));
    json_t *b = json_pack("{s:s, s:o, s:i, s:f, s:b, s:b, s:{s:b}}", "model", o->model, "prompt",
                          ids, "max_tokens", q->out_len, "temperature", o->temperature,
                          "ignore_eos", 1, "stream", 1, "stream_options", "include_usage", 1);
    char *s = b ? json_dumps(b, JSON_COMPACT) : NULL;
    json_decref(b);
    return s;
}

static CURL *start_request(const sv_opts *o, const char *url, const pl_bench_request *q,
                           flight *f, const char *auth) {
    char *body = request_body(o, q);
    CURL *h = body ? curl_easy_init() : NULL;
    if (!h) {
        free(body);
        return NULL;
    }
    f->hdr = curl_slist_append(NULL, "Content-Type: application/json");
    f->hdr = curl_slist_append(f->hdr, "Accept: text/event-stream");
    if (auth) f->hdr = curl_slist_append(f->hdr, auth);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, f->hdr);
    curl_easy_setopt(h, CURLOPT_COPYPOSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, f);
    curl_easy_setopt(h, CURLOPT_PRIVATE, f);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(o->timeout * 1000));
    free(body);
    f->t_send = pl_clock_now();
    f->usage_tokens = -1;
    return h;
}

static void finish_request(CURL *h, CURLcode rc, flight *f, int32_t *mismatches) {
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    pl_bench_result *r = f->res;
    r->e2e = pl_clock_now() - f->t_send;
    int32_t got = f->usage_tokens >= 0 ? f->usage_tokens : f->want_out;
    r->out_len = got;
    r->ok = rc == CURLE_OK && code == 200 && !f->error && f->done_marker && f->chunks > 0;
    if (r->ok && got != f->want_out) (*mismatches)++;
    if (!r->ok) {
        static int shown;
        if (shown++ < 3)
            fprintf(stderr, "pagellm %s: request failed: %s, HTTP %ld%s\n", C,
                    rc == CURLE_OK ? "ok" : curl_easy_strerror(rc), code,
                    f->error ? ", error in the stream" : "");
    }
    curl_slist_free_all(f->hdr);
    free(f->buf);
    f->buf = NULL;
    f->hdr = NULL;
}

static int write_line(const sv_opts *o, json_t *j) {
    char *line = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
    if (!line) return pl_cli_fail(C, "out of memory");
    int rc = pl_cli_emit_line(C, line, o->output);
    free(line);
    return rc;
}

static int run(const sv_opts *o, const pl_dataset *ds, const double *arrival, json_t **report) {
    int32_t n = ds->n, sent = 0, finished = 0, active = 0, mismatches = 0;
    pl_bench_result *res = calloc((size_t)n, sizeof *res);
    flight *fl = calloc((size_t)n, sizeof *fl);
    CURLM *multi = curl_multi_init();
    char url[2048], auth[1024];
    snprintf(url, sizeof url, "%s%s", o->base_url, o->endpoint);
    if (o->api_key) snprintf(auth, sizeof auth, "Authorization: Bearer %s", o->api_key);
    int rc = 0;
    if (!res || !fl || !multi) {
        rc = pl_cli_fail(C, "out of memory");
        goto out;
    }
    curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);
    double t0 = pl_clock_now(), t_end = t0;
    while (finished < n) {
        double t = pl_clock_now() - t0;
        while (sent < n && arrival[sent] <= t && (o->max_conc == 0 || active < o->max_conc)) {
            flight *f = &fl[sent];
            f->res = &res[sent];
            f->want_out = ds->req[sent].out_len;
            res[sent].in_len = ds->req[sent].in_len;
            res[sent].send = pl_clock_now() - t0;
            CURL *h = start_request(o, url, &ds->req[sent], f, o->api_key ? auth : NULL);
            if (!h || curl_multi_add_handle(multi, h) != CURLM_OK) {
                rc = pl_cli_fail(C, "cannot start request %d", sent);
                if (h) curl_easy_cleanup(h);
                curl_slist_free_all(f->hdr);
                goto out;
            }
            f->h = h;
            sent++;
            active++;
        }
        int still = 0;
        curl_multi_perform(multi, &still);
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(multi, &left))) {
            if (m->msg != CURLMSG_DONE) continue;
            CURL *h = m->easy_handle;
            flight *f;
            curl_easy_getinfo(h, CURLINFO_PRIVATE, (char **)&f);
            finish_request(h, m->data.result, f, &mismatches);
            curl_multi_remove_handle(multi, h);
            curl_easy_cleanup(h);
            f->h = NULL;
            finished++;
            active--;
            t_end = pl_clock_now();
        }
        int wait_ms = 50;
        if (sent < n && (o->max_conc == 0 || active < o->max_conc)) {
            double dt = arrival[sent] - (pl_clock_now() - t0);
            wait_ms = dt <= 0 ? 0 : dt * 1000 < 50 ? (int)(dt * 1000) + 1 : 50;
        }
        if (finished < n) curl_multi_poll(multi, NULL, 0, wait_ms, NULL);
    }
    *report = pl_bench_serve_report(res, n, t_end - t0);
    if (!*report) rc = pl_cli_fail(C, "out of memory");
    else json_object_set_new(*report, "length_mismatches", json_integer(mismatches));
out:
    for (int32_t i = 0; res && i < n; i++) free(res[i].gaps);
    for (int32_t i = 0; fl && i < n; i++) free(fl[i].buf);
    if (multi) {
        for (int32_t i = 0; fl && i < n; i++) /* anything still attached after a failure */
            if (fl[i].h) {
                curl_multi_remove_handle(multi, fl[i].h);
                curl_easy_cleanup(fl[i].h);
                curl_slist_free_all(fl[i].hdr);
            }
        curl_multi_cleanup(multi);
    }
    free(res);
    free(fl);
    return rc;
}

int pl_bench_serve(int argc, char **argv) {
    sv_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc; /* -1: --help */
    pl_dataset_spec spec;
    if (pl_dataset_parse(o.dataset, &spec) != PL_OK) return pl_cli_fail(C, "%s", pl_last_error());
    pl_gguf *g = NULL;
    pl_tokenizer *tok = NULL;
    if (o.tokenizer && (pl_gguf_open(o.tokenizer, &g) != PL_OK || pl_tokenizer_load(g, &tok) != PL_OK)) {
        rc = pl_cli_fail(C, "--tokenizer %s: %s", o.tokenizer, pl_last_error());
        pl_gguf_close(g);
        return rc;
    }
    pl_dataset_opts dopt = {
        .n_vocab = o.vocab ? (int32_t)o.vocab : tok ? pl_tokenizer_n_vocab(tok) : 32000,
        .first_id = 3, .max_in = (int32_t)o.max_in, .max_out = (int32_t)o.max_out,
        .max_total = (int32_t)o.max_total, .shared_prefix = (int32_t)o.shared_prefix, .tok = tok,
    };
    pl_dataset ds;
    double *arrival = NULL;
    json_t *rep = NULL;
    if (pl_dataset_make(&spec, (int32_t)o.num_prompts, (uint64_t)o.seed, &dopt, &ds) != PL_OK) {
        rc = pl_cli_fail(C, "%s", pl_last_error());
        goto done_tok;
    }
    arrival = malloc((size_t)ds.n * sizeof *arrival);
    if (!arrival) {
        rc = pl_cli_fail(C, "out of memory");
        goto done;
    }
    pl_poisson_arrivals(o.rate, ds.n, (uint64_t)o.seed ^ 0xa5a5a5a5ull, arrival);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        rc = pl_cli_fail(C, "libcurl initialisation failed");
        goto done;
    }
    rc = run(&o, &ds, arrival, &rep);
    curl_global_cleanup();
    if (!rc) {
        json_t *head = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I}", "bench", "serve", "base_url",
                                 o.base_url, "model", o.model, "dataset", o.dataset, "seed",
                                 (json_int_t)o.seed, "max_concurrency", (json_int_t)o.max_conc);
        json_object_set_new(head, "request_rate", isfinite(o.rate) ? json_real(o.rate)
                                                                   : json_string("inf"));
        if (o.label) json_object_set_new(head, "label", json_string(o.label));
        json_object_update(head, rep);
        rc = write_line(&o, head);
        int errors = (int)json_integer_value(json_object_get(rep, "errors"));
        json_decref(head);
        if (!rc && errors == ds.n) rc = pl_cli_fail(C, "every request failed");
    }
    json_decref(rep);
done:
    free(arrival);
    pl_dataset_destroy(&ds);
done_tok:
    pl_tokenizer_destroy(tok);
    pl_gguf_close(g);
    return rc;
}
