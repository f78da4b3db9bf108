/* server/rerank — a reranker's routes (a cross-encoder: bert with a classification head,
 * pooling_type rank):
 *
 *   POST /v1/rerank, /rerank, /v2/rerank (vLLM's, Jina's and Cohere's shape)
 *     {"query": "text", "documents": ["text" | {"text": "text"}, ...], "model"?, "top_n"?,
 *      "return_documents"? (default true)}
 *     -> {"id": "rerank-...", "model", "usage": {"prompt_tokens", "total_tokens"},
 *         "results": [{"index", "relevance_score", "document": {"text"}}, ...]}
 *        sorted by relevance_score, highest first (ties: lower index first), the top_n first
 *   POST /v1/score (vLLM's)
 *     {"text_1": "text" | ["text", ...], "text_2": "text" | ["text", ...], "model"?}
 *     -> {"id": "score-...", "object": "list", "created", "model", "data": [{"index",
 *         "object": "score", "score"}], "usage": {...}}
 *        text_1 of one item is scored against every text_2; lists of equal length pair up.
 *
 * Each pair is one engine embedding request of token ids, built as llama-server's
 * format_prompt_rerank builds it: [BOS] query [EOS] [SEP] document [EOS] as the vocabulary's
 * add_bos / add_eos / add_sep say (EOS falls back to SEP) — a BERT cross-encoder's
 * [CLS] query [SEP] document [SEP]; token type 0 throughout, as llama.cpp's bert. The score is
 * the head's raw output on the CLS state (the first of n_cls_out; no sigmoid), llama.cpp's.
 * Pairs run as /v1/embeddings' inputs do (pl_srv_embed_ids: one step if they fit, metrics,
 * queue waves). Bad input is a 400 naming the field: a missing or non-string query or text, an
 * empty one, an empty or oversized list, top_n not a positive integer, return_documents not a
 * boolean, lists of different lengths, and a model that is not a reranker.
 */
#include "server/server_internal.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

enum { MAX_DOCS = 2048 };

static void make_id(char *out, size_t cap, const char *prefix) {
    unsigned char r[12] = {0};
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        for (size_t i = 0; i < sizeof r; i++) r[i] = (unsigned char)((ts.tv_nsec >> (i % 4 * 8)) + i);
    }
    size_t n = (size_t)snprintf(out, cap, "%s", prefix);
    for (size_t i = 0; i < sizeof r && n + 2 < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, "%02x", r[i]);
}

/* A text field: a non-empty string without NUL (named `where` in the error). */
static int get_text(json_t *v, const char *field, const char *where, const char **out,
                    pl_server_error *err) {
    if (!v) return pl_server_fail(err, 400, field, "missing_required_parameter",
                                  "'%s' is required", where);
    if (!json_is_string(v))
        return pl_server_fail(err, 400, field, "invalid_type", "'%s' must be a string", where);
    if (json_string_length(v) == 0)
        return pl_server_fail(err, 400, field, "invalid_value", "'%s' is an empty string", where);
    if (strlen(json_string_value(v)) != json_string_length(v))
        return pl_server_fail(err, 400, field, "invalid_value", "'%s' contains a NUL character",
                              where);
    *out = json_string_value(v);
    return 0;
}

/* A text or a list of texts (documents: items may be {"text": ...}). *items = n borrowed. */
static int get_texts(json_t *v, const char *field, int objects, int one_ok, const char ***items,
                     size_t *n, pl_server_error *err) {
    if (!v) return pl_server_fail(err, 400, field, "missing_required_parameter",
                                  "'%s' is required", field);
    if (one_ok && json_is_string(v)) {
        if (!(*items = malloc(sizeof **items))) return pl_server_nomem(err);
        *n = 1;
        return get_text(v, field, field, &(*items)[0], err);
    }
    if (!json_is_array(v))
        return pl_server_fail(err, 400, field, "invalid_type", "'%s' must be %s", field,
                              one_ok ? "a string or a list of strings" : "a list of strings");
    *n = json_array_size(v);
    if (*n == 0) return pl_server_fail(err, 400, field, "invalid_value", "'%s' is empty", field);
    if (*n > MAX_DOCS)
        return pl_server_fail(err, 400, field, "invalid_value", "'%s' has %zu items; at most %d "
                              "are allowed", field, *n, MAX_DOCS);
    if (!(*items = calloc(*n, sizeof **items))) return pl_server_nomem(err);
    for (size_t i = 0; i < *n; i++) {
        json_t *e = json_array_get(v, i);
        char where[48];
        snprintf(where, sizeof where, "%s[%zu]", field, i);
        if (objects && json_is_object(e)) {
            e = json_object_get(e, "text");
            snprintf(where, sizeof where, "%s[%zu].text", field, i);
        }
        if (get_text(e, field, where, &(*items)[i], err)) return -1;
    }
    return 0;
}

/* The pair's token ids (pl_tokenize_pair: llama-server's format_prompt_rerank). */
static int pair_ids(pl_server *s, const char *q, const char *d, int32_t **out, size_t *n,
                    pl_server_error *err) {
    pl_status st = pl_tokenize_pair(s->tok, q, strlen(q), d, strlen(d), out, n);
    if (st == PL_ERR_NOMEM) return pl_server_nomem(err);
    if (st != PL_OK)
        return pl_server_fail(err, 400, "documents", "invalid_value", "%s", pl_last_error());
    return 0;
}

/* Score n pairs (q[i or 0], d[i]); *scores malloc'ed. 0 ok, 2 the client went away, else
 * *err holds the answer. */
static int score_pairs(pl_server *s, struct MHD_Connection *c, const char **q, size_t nq,
                       const char **d, size_t n, float **scores, int64_t *prompt_tokens,
                       pl_server_error *err) {
    int32_t **ids = calloc(n, sizeof *ids);
    size_t *n_ids = calloc(n, sizeof *n_ids);
    if (!ids || !n_ids) {
        free(ids);
        free(n_ids);
        return pl_server_nomem(err);
    }
    for (size_t i = 0; i < n; i++)
        if (pair_ids(s, q[nq == 1 ? 0 : i], d[i], &ids[i], &n_ids[i], err)) {
            for (size_t k = 0; k < n; k++) free(ids[k]);
            free(ids);
            free(n_ids);
            return 1;
        }
    float **vec = NULL;
    int rc = pl_srv_embed_ids(s, c, ids, n_ids, n, "documents", &vec, prompt_tokens, err);
    if (rc) return rc;
    *scores = malloc(n * sizeof **scores);
    for (size_t i = 0; i < n; i++) {
        if (*scores) (*scores)[i] = vec[i][0];
        free(vec[i]);
    }
    free(vec);
    return *scores ? 0 : (pl_server_nomem(err), 1);
}

/* The checks both routes share: draining, `model`, a reranker being served. */
static int common_checks(pl_server *s, json_t *o, pl_server_error *err) {
    json_t *model = json_object_get(o, "model");
    if (atomic_load(&s->draining))
        return pl_server_fail(err, 503, NULL, "shutting_down", "the server is shutting down");
    if (model && !json_is_null(model) &&
        (!json_is_string(model) || strcmp(json_string_value(model), s->model_name)))
        return json_is_string(model)
                   ? pl_srv_model_not_found(s, json_string_value(model), "model", err)
                   : pl_server_fail(err, 400, "model", "invalid_type", "'model' must be a string");
    if (pl_engine_pooling(s->eng) != 4)
        return pl_server_fail(err, 400, "model", "invalid_value", "this model (%s) is not a "
                              "reranker: scoring needs a cross-encoder (a bert GGUF with a "
                              "classification head and pooling_type rank)", s->model_name);
    return 0;
}

typedef struct {
    size_t index;
    float score;
} ranked;

static int by_score(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static json_t *usage(int64_t n) {
    return json_pack("{s:I, s:I}", "prompt_tokens", (json_int_t)n, "total_tokens", (json_int_t)n);
}

static void active(pl_server *s, int d) {
    pthread_mutex_lock(&s->mu);
    s->active += d;
    pthread_mutex_unlock(&s->mu);
}

/* /v1/rerank's answer: the documents by score, the top_n first (all when 0); NULL without
 * memory. */
static json_t *rerank_answer(const pl_server *s, const char **docs, size_t n, const float *scores,
                             int64_t tokens, json_int_t top_n, int return_docs) {
    ranked *r = malloc(n * sizeof *r);
    json_t *results = json_array(), *out = NULL;
    int bad = !r || !results;
    if (!bad) {
        for (size_t i = 0; i < n; i++) r[i] = (ranked){i, scores[i]};
        qsort(r, n, sizeof *r, by_score);
        size_t k = top_n > 0 && (size_t)top_n < n ? (size_t)top_n : n;
        for (size_t i = 0; i < k && !bad; i++) {
            json_t *e = json_pack("{s:I, s:f}", "index", (json_int_t)r[i].index,
                                  "relevance_score", (double)r[i].score);
            if (e && return_docs)
                json_object_set_new(e, "document", json_pack("{s:s}", "text", docs[r[i].index]));
            bad = !e || json_array_append_new(results, e);
        }
    }
    char id[48];
    make_id(id, sizeof id, "rerank-");
    if (!bad) {
        out = json_pack("{s:s, s:s, s:o, s:o}", "id", id, "model", s->model_name, "usage",
                        usage(tokens), "results", results);
        results = NULL;
    }
    json_decref(results);
    free(r);
    return out;
}

/* /score's answer: one score per pair, in order; NULL without memory. */
static json_t *score_answer(const pl_server *s, const float *scores, size_t n, int64_t tokens) {
    json_t *data = json_array(), *out = NULL;
    int bad = !data;
    for (size_t i = 0; i < n && !bad; i++) {
        json_t *e = json_pack("{s:I, s:s, s:f}", "index", (json_int_t)i, "object", "score",
                              "score", (double)scores[i]);
        bad = !e || json_array_append_new(data, e);
    }
    char id[48];
    make_id(id, sizeof id, "score-");
    if (!bad) {
        out = json_pack("{s:s, s:s, s:I, s:s, s:o, s:o}", "id", id, "object", "list", "created",
                        (json_int_t)time(NULL), "model", s->model_name, "data", data, "usage",
                        usage(tokens));
        data = NULL;
    }
    json_decref(data);
    return out;
}

/* The fields of /v1/rerank (and /rerank, /v2/rerank) and its answer. */
static int rerank(pl_server *s, struct MHD_Connection *c, const pl_conn_ctx *x, json_t *o,
                  json_t **out, pl_server_error *err) {
    (void)x;
    const char *query = NULL, **docs = NULL;
    size_t n = 0;
    json_int_t top_n = 0;
    int return_docs = 1;
    float *scores = NULL;
    int64_t tokens = 0;
    json_t *tn = json_object_get(o, "top_n"), *rd = json_object_get(o, "return_documents");
    int rc = common_checks(s, o, err);
    if (!rc) rc = get_text(json_object_get(o, "query"), "query", "query", &query, err);
    if (!rc) rc = get_texts(json_object_get(o, "documents"), "documents", 1, 0, &docs, &n, err);
    if (!rc && tn && !json_is_null(tn)) {
        if (!json_is_integer(tn) || json_integer_value(tn) < 1)
            rc = pl_server_fail(err, 400, "top_n", json_is_integer(tn) ? "invalid_value"
                                : "invalid_type", "'top_n' must be a positive integer");
        else top_n = json_integer_value(tn);
    }
    if (!rc && rd && !json_is_null(rd)) {
        if (!json_is_boolean(rd))
            rc = pl_server_fail(err, 400, "return_documents", "invalid_type",
                                "'return_documents' must be a boolean");
        else return_docs = json_is_true(rd);
    }
    if (!rc) rc = score_pairs(s, c, &query, 1, docs, n, &scores, &tokens, err);
    if (!rc) *out = rerank_answer(s, docs, n, scores, tokens, top_n, return_docs);
    free(scores);
    free(docs);
    return rc;
}

/* The fields of /v1/score and its answer. */
static int score(pl_server *s, struct MHD_Connection *c, const pl_conn_ctx *x, json_t *o,
                 json_t **out, pl_server_error *err) {
    (void)x;
    const char **t1 = NULL, **t2 = NULL;
    size_t n1 = 0, n2 = 0;
    float *scores = NULL;
    int64_t tokens = 0;
    int rc = common_checks(s, o, err);
    if (!rc) rc = get_texts(json_object_get(o, "text_1"), "text_1", 0, 1, &t1, &n1, err);
    if (!rc) rc = get_texts(json_object_get(o, "text_2"), "text_2", 0, 1, &t2, &n2, err);
    if (!rc && n1 != 1 && n1 != n2)
        rc = pl_server_fail(err, 400, "text_2", "invalid_value", "'text_1' has %zu items and "
                            "'text_2' %zu: they must be as many, or 'text_1' one text", n1, n2);
    if (!rc) rc = score_pairs(s, c, t1, n1, t2, n2, &scores, &tokens, err);
    if (!rc) *out = score_answer(s, scores, n2, tokens);
    free(scores);
    free(t1);
    free(t2);
    return rc;
}

/* Each scoring request counts as active (a draining server waits for it) while it runs. */
static enum MHD_Result serve_scoring(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x,
                                     pl_srv_json_fn fn) {
    active(s, 1);
    enum MHD_Result res = pl_srv_answer_json(s, c, x, fn);
    active(s, -1);
    return res;
}

enum MHD_Result pl_srv_rerank(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x) {
    return serve_scoring(s, c, x, rerank);
}

enum MHD_Result pl_srv_score(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x) {
    return serve_scoring(s, c, x, score);
}
