/* server/embeddings — POST /v1/embeddings (OpenAI's shape, vLLM's extras).
 *
 *   {"input": "text" | ["text", ...] | [id, ...] | [[id, ...], ...], "model"?,
 *    "encoding_format"?: "float" | "base64", "dimensions"?, "add_special_tokens"?, "user"?}
 *   -> {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [...] or
 *       "base64 of little-endian float32"}], "model", "usage": {"prompt_tokens", "total_tokens"}}
 *
 * Every input becomes one engine embedding request (pl_request_params.embedding): they go through
 * the inbox together, so the scheduler puts as many as fit into one step; a batch larger than the
 * engine's queue bound goes in as the queue drains. Inputs are validated
 * before any is submitted (400 naming the field: empty input or list, an empty string, mixed
 * kinds, a token id out of range, too many inputs, `dimensions` other than the model's size);
 * the engine's refusals (too long for the context or for one step; a generation model, which has
 * no pooling) are a 400 with its message. The embeddings are L2-normalized (as OpenAI's and
 * llama-server's are).
 */
#include "server/server_internal.h"
#include "base/buf.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_INPUTS = 2048, WAIT_MS = 100 };

typedef struct {
    char **text;        /* [n] input text, or NULL where ids are given */
    int32_t **ids;      /* [n] token ids, or NULL */
    size_t *n_ids;      /* [n] */
    size_t n;
} inputs;

static void inputs_free(inputs *in) {
    for (size_t i = 0; i < in->n; i++) {
        if (in->text) free(in->text[i]);
        if (in->ids) free(in->ids[i]);
    }
    PL_FREE_ALL(in->text, in->ids, in->n_ids);
}

/* A list of token ids (json array of integers) into in->ids[i]. */
static int parse_ids(pl_server *s, json_t *a, size_t i, const char *where, inputs *in,
                     pl_server_error *err) {
    size_t n = json_array_size(a);
    if (n == 0) return pl_server_fail(err, 400, "input", "invalid_value", "%s is empty", where);
    if (!(in->ids[i] = malloc(n * sizeof(int32_t)))) return pl_server_nomem(err);
    in->n_ids[i] = n;
    for (size_t k = 0; k < n; k++) {
        json_t *v = json_array_get(a, k);
        if (!json_is_integer(v))
            return pl_server_fail(err, 400, "input", "invalid_type", "%s[%zu] is not a token id "
                                  "(an integer): token ids and text cannot be mixed", where, k);
        json_int_t id = json_integer_value(v);
        if (id < 0 || id >= s->n_vocab)
            return pl_server_fail(err, 400, "input", "invalid_value", "token id %lld at %s[%zu] "
                                  "is out of range [0, %d)", (long long)id, where, k, s->n_vocab);
        in->ids[i][k] = (int32_t)id;
    }
    return 0;
}

/* OpenAI's four forms of `input`. */
static int parse_input(pl_server *s, json_t *input, inputs *in, pl_server_error *err) {
    if (!input) return pl_server_fail(err, 400, "input", "missing_required_parameter",
                                      "'input' is required");
    int one = json_is_string(input) ||
              (json_is_array(input) && json_array_size(input) > 0 &&
               json_is_integer(json_array_get(input, 0)));
    if (!one && !json_is_array(input))
        return pl_server_fail(err, 400, "input", "invalid_type", "'input' must be a string, a "
                              "list of strings, a list of token ids or a list of such lists");
    in->n = one ? 1 : json_array_size(input);
    if (in->n == 0) return pl_server_fail(err, 400, "input", "invalid_value", "'input' is empty");
    if (in->n > MAX_INPUTS)
        return pl_server_fail(err, 400, "input", "invalid_value", "'input' has %zu items; at "
                              "most %d are allowed", in->n, MAX_INPUTS);
    in->text = calloc(in->n, sizeof *in->text);
    in->ids = calloc(in->n, sizeof *in->ids);
    in->n_ids = calloc(in->n, sizeof *in->n_ids);
    if (!in->text || !in->ids || !in->n_ids) return pl_server_nomem(err);
    if (one && json_is_array(input)) return parse_ids(s, input, 0, "input", in, err);
    int kind = -1; /* 0 strings, 1 id lists: one kind per request */
    for (size_t i = 0; i < in->n; i++) {
        json_t *v = one ? input : json_array_get(input, i);
        char where[32] = "input";
        if (!one) snprintf(where, sizeof where, "input[%zu]", i);
        int k = json_is_string(v) ? 0 : json_is_array(v) ? 1 : -1;
        if (k < 0 || (kind >= 0 && k != kind))
            return pl_server_fail(err, 400, "input", "invalid_type", "%s: every item of 'input' "
                                  "must be of one kind, all strings or all lists of token ids",
                                  where);
        kind = k;
        if (k == 1) {
            if (parse_ids(s, v, i, where, in, err)) return -1;
            continue;
        }
        if (json_string_length(v) == 0)
            return pl_server_fail(err, 400, "input", "invalid_value", "%s is an empty string",
                                  where);
        if (!(in->text[i] = strndup(json_string_value(v), json_string_length(v))))
            return pl_server_nomem(err);
        if (strlen(in->text[i]) != json_string_length(v))
            return pl_server_fail(err, 400, "input", "invalid_value", "%s contains a NUL "
                                  "character", where);
    }
    return 0;
}

/* base64 of n floats as little-endian float32 bytes (x86-64 is little-endian). */
static char *base64_floats(const float *v, int32_t n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const uint8_t *b = (const uint8_t *)v;
    size_t len = (size_t)n * 4, o = 0;
    char *out = malloc((len + 2) / 3 * 4 + 1);
    if (!out) return NULL;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t w = (uint32_t)b[i] << 16 | (i + 1 < len ? (uint32_t)b[i + 1] << 8 : 0) |
                     (i + 2 < len ? b[i + 2] : 0);
        out[o++] = tab[w >> 18 & 63];
        out[o++] = tab[w >> 12 & 63];
        out[o++] = i + 1 < len ? tab[w >> 6 & 63] : '=';
        out[o++] = i + 2 < len ? tab[w & 63] : '=';
    }
    out[o] = 0;
    return out;
}

static int client_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

typedef struct {
    pl_server *s;
    inputs in;
    uint64_t *ids;      /* [n] engine request ids */
    uint8_t *added;     /* [n] */
    uint8_t *done;      /* [n] */
    float **vec;        /* [n] the embeddings */
    size_t next;        /* inputs added so far (in order) */
    size_t in_flight;   /* added and not finished */
    pl_request_params params;
    int32_t n_embd;
    int64_t prompt_tokens;
    char *error;        /* the first engine error */
    const char *field;  /* what a refused input is named after ("input", or NULL) */
} embed_job;

static void job_free(embed_job *j) {
    for (size_t i = 0; i < j->in.n; i++) {
        if (j->added && j->added[i] && !j->done[i]) {
            pl_engine_release(j->s->eng, j->ids[i]);
            pl_srv_untrack(j->s, j->ids[i]);
            pl_server_metrics_abort(&j->s->metrics, NULL, 0);
        }
        if (j->vec) free(j->vec[i]);
    }
    PL_FREE_ALL(j->ids, j->added, j->done, j->vec, j->error);
    inputs_free(&j->in);
}

static int job_init(embed_job *j, int add_special, pl_server_error *err) {
    size_t n = j->in.n;
    j->ids = calloc(n, sizeof *j->ids);
    j->added = calloc(n, 1);
    j->done = calloc(n, 1);
    j->vec = calloc(n, sizeof *j->vec);
    if (!j->ids || !j->added || !j->done || !j->vec) return pl_server_nomem(err);
    pl_request_params_default(&j->params);
    j->params.embedding = 1;
    j->params.add_special = add_special;
    j->params.parse_special = 1; /* as vLLM tokenizes */
    return 0;
}

/* Add the inputs not yet added, in order, as far as the engine's queue takes them: a full queue
 * only pauses this while some of ours are in flight (a large batch goes in waves), else 503. */
static int submit_more(embed_job *j, pl_server_error *err) {
    for (; j->next < j->in.n; j->next++) {
        size_t i = j->next;
        pl_status st = pl_engine_add_request(j->s->eng, j->in.text[i], j->in.ids[i],
                                             j->in.n_ids[i], &j->params, &j->ids[i]);
        if (st == PL_ERR_CAPACITY && j->in_flight > 0) return 0;
        if (st == PL_ERR_CAPACITY)
            return pl_server_fail(err, 503, NULL, "queue_full",
                                  "the server is busy (%s); retry later", pl_last_error());
        if (st == PL_ERR_INVALID_ARG)
            return pl_server_fail(err, 400, j->field ? j->field : "input",
                                  strstr(pl_last_error(), "maximum context length")
                                      ? "context_length_exceeded" : "invalid_value",
                                  "%s %zu: %s", j->field ? j->field : "input", i,
                                  pl_last_error());
        if (st == PL_ERR_NOMEM) return pl_server_nomem(err);
        if (st != PL_OK)
            return pl_server_fail(err, 500, NULL, "internal_error", "%s", pl_last_error());
        if (pl_srv_track(j->s, j->ids[i])) {
            pl_engine_release(j->s->eng, j->ids[i]);
            return pl_server_nomem(err);
        }
        j->added[i] = 1;
        j->in_flight++;
    }
    return 0;
}

/* Submit and wait for every input: 0 done, -1 the client went away, 1 out of memory, 2 *err
 * holds the answer (an input refused). */
static int run_all(embed_job *j, int fd, pl_server_error *err) {
    for (;;) {
        if (submit_more(j, err)) return 2;
        int waited = 0;
        for (size_t i = 0; i < j->next; i++) {
            if (j->done[i]) continue;
            pl_request_output *o = NULL;
            pl_status st = pl_engine_poll(j->s->eng, j->ids[i], waited ? 0 : WAIT_MS, &o);
            waited = 1;
            if (st == PL_ERR_NOMEM) return 1;
            if (st == PL_ERR_NOT_FOUND) { /* cannot happen while we hold it */
                j->done[i] = 1;
                j->in_flight--;
                pl_srv_untrack(j->s, j->ids[i]);
                if (!j->error) j->error = strdup("the engine no longer knows this request");
                continue;
            }
            if (st != PL_OK || !o->finished) {
                pl_request_output_destroy(o);
                continue;
            }
            j->done[i] = 1;
            j->in_flight--;
            pl_srv_untrack(j->s, j->ids[i]);
            j->prompt_tokens += o->n_prompt_tokens;
            if (o->error && !j->error) {
                j->error = o->error;
                o->error = NULL;
            } else if (o->embedding) {
                j->vec[i] = o->embedding;
                j->n_embd = o->n_embd;
                o->embedding = NULL;
            } else if (!j->error && !(j->error = strdup("no embedding was produced"))) {
                pl_request_output_destroy(o);
                return 1;
            }
            pl_server_metrics_observe(&j->s->metrics, o, NULL,
                                      j->vec[i] ? PL_FINISH_STOP : PL_FINISH_ERROR);
            pl_request_output_destroy(o);
        }
        if (j->next == j->in.n && j->in_flight == 0) return 0;
        if (client_gone(fd)) return -1;
    }
}

static json_t *response(embed_job *j, int base64) {
    json_t *data = json_array();
    int bad = !data;
    for (size_t i = 0; i < j->in.n && !bad; i++) {
        json_t *e;
        if (base64) {
            char *b = base64_floats(j->vec[i], j->n_embd);
            e = b ? json_string(b) : NULL;
            free(b);
        } else {
            e = json_array();
            for (int32_t k = 0; e && k < j->n_embd; k++)
                if (json_array_append_new(e, json_real(j->vec[i][k]))) {
                    json_decref(e);
                    e = NULL;
                }
        }
        json_t *item = e ? json_pack("{s:s, s:I, s:o}", "object", "embedding", "index",
                                     (json_int_t)i, "embedding", e) : NULL;
        bad = !item || json_array_append_new(data, item);
    }
    json_t *o = bad ? NULL : json_pack("{s:s, s:o, s:s, s:{s:I, s:I}}", "object", "list", "data",
                                       data, "model", j->s->model_name, "usage", "prompt_tokens",
                                       (json_int_t)j->prompt_tokens, "total_tokens",
                                       (json_int_t)j->prompt_tokens);
    if (bad) json_decref(data);
    if (!o || pl_server_json_failed()) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* Run inputs already parsed (j->in) to the end: 0 every vector in j->vec, -1 the client went
 * away, else *err holds the answer. */
static int job_run(embed_job *j, struct MHD_Connection *c, pl_server_error *err) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    int w = run_all(j, ci ? ci->connect_fd : -1, err);
    if (w == 2) return 1;
    if (w < 0) return -1;
    if (w == 1) return pl_server_nomem(err), 1;
    if (j->error)
        return pl_server_fail(err, 500, NULL, "internal_error", "%s", j->error), 1;
    return 0;
}

int pl_srv_embed_ids(pl_server *s, struct MHD_Connection *c, int32_t **ids, size_t *n_ids,
                     size_t n, const char *field, float ***vec, int64_t *prompt_tokens,
                     pl_server_error *err) {
    embed_job j = {.s = s, .field = field};
    j.in.n = n;
    j.in.ids = ids;
    j.in.n_ids = n_ids;
    int rc = (j.in.text = calloc(n, sizeof *j.in.text)) ? job_init(&j, 0, err)
                                                       : pl_server_nomem(err);
    if (rc) rc = 1;
    else if ((rc = job_run(&j, c, err)) < 0) rc = 2;
    if (!rc) {
        *vec = j.vec;
        *prompt_tokens = j.prompt_tokens;
        j.vec = NULL;
    }
    job_free(&j);
    return rc;
}

enum MHD_Result pl_srv_embeddings(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x) {
    pl_server_error err;
    json_t *o = pl_server_parse_json(x->body ? x->body : "", x->len, &err);
    if (!o) return pl_srv_send_error(c, &err);
    embed_job j = {.s = s};
    int base64 = 0, add_special = 1, rc = 0;
    pthread_mutex_lock(&s->mu);
    s->active++;
    pthread_mutex_unlock(&s->mu);
    json_t *model = json_object_get(o, "model"), *fmt = json_object_get(o, "encoding_format"),
           *dims = json_object_get(o, "dimensions"), *as = json_object_get(o, "add_special_tokens");
    if (atomic_load(&s->draining)) {
        rc = pl_server_fail(&err, 503, NULL, "shutting_down", "the server is shutting down");
    } else if (model && !json_is_null(model) &&
               (!json_is_string(model) || strcmp(json_string_value(model), s->model_name))) {
        rc = json_is_string(model)
                 ? pl_srv_model_not_found(s, json_string_value(model), "model", &err)
                 : pl_server_fail(&err, 400, "model", "invalid_type", "'model' must be a string");
    } else if (fmt && !json_is_null(fmt) &&
               (!json_is_string(fmt) || (strcmp(json_string_value(fmt), "float") &&
                                         strcmp(json_string_value(fmt), "base64")))) {
        rc = pl_server_fail(&err, 400, "encoding_format", "invalid_value",
                            "'encoding_format' must be \"float\" or \"base64\"");
    } else if (dims && !json_is_null(dims) &&
               (!json_is_integer(dims) || json_integer_value(dims) != pl_engine_n_embd(s->eng))) {
        rc = pl_server_fail(&err, 400, "dimensions", "unsupported_parameter",
                            "this model does not support 'dimensions' (it was not trained to "
                            "shorten its embeddings); its embeddings have %d dimensions",
                            pl_engine_n_embd(s->eng));
    } else if (as && !json_is_null(as) && !json_is_boolean(as)) {
        rc = pl_server_fail(&err, 400, "add_special_tokens", "invalid_type",
                            "'add_special_tokens' must be a boolean");
    } else if (pl_engine_pooling(s->eng) == 4) {
        rc = pl_server_fail(&err, 400, "model", "invalid_value", "this model (%s) is a reranker "
                            "(pooling rank): it scores query-document pairs on POST /v1/rerank "
                            "and /v1/score, not embeddings", s->model_name);
    } else if (!pl_engine_pooling(s->eng)) {
        rc = pl_server_fail(&err, 400, "model", "invalid_value", "this model (%s) cannot compute "
                            "embeddings: it is a generation model without a pooling type; serve "
                            "an embedding model (e.g. a bert GGUF) or start the server with "
                            "--pooling mean|cls|last", s->model_name);
    } else {
        base64 = fmt && json_is_string(fmt) && !strcmp(json_string_value(fmt), "base64");
        if (as && json_is_boolean(as)) add_special = json_is_true(as);
        rc = parse_input(s, json_object_get(o, "input"), &j.in, &err);
        if (!rc) rc = job_init(&j, add_special, &err);
    }
    json_decref(o);
    enum MHD_Result res;
    if (rc) {
        res = pl_srv_send_error(c, &err);
    } else {
        int w = job_run(&j, c, &err);
        if (w > 0) res = pl_srv_send_error(c, &err);
        else if (w < 0) res = MHD_NO; /* the client went away: job_free releases the rest */
        else res = pl_srv_send_json(c, MHD_HTTP_OK, response(&j, base64));
    }
    job_free(&j);
    pthread_mutex_lock(&s->mu);
    s->active--;
    pthread_mutex_unlock(&s->mu);
    return res;
}
