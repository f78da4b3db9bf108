/* server/server — the daemon and its lifecycle: engine thread, libmicrohttpd, routing, auth,
 * body limits, graceful stop.
 *
 * Threads: libmicrohttpd runs with MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION:
 * one accept thread plus one thread per connection. That lets a handler (and a streaming
 * response's reader callback) block in pl_engine_poll, which keeps the generation code a plain
 * loop; the cost, a thread per open connection, is small next to a request's KV blocks. The
 * engine thread loops pl_engine_step while there is work, else waits for work (100 ms at most, so
 * it notices the stop flag).
 */
#include "server/server_internal.h"
#include "base/clock.h"

#include "base/buf.h"
#include "base/log.h"
#include "gguf/gguf.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void pl_server_config_default(pl_server_config *c) {
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8000;
    c->max_request_bytes = 4u << 20;
    c->shutdown_grace = 10;
    c->max_logprobs = PL_MAX_LOGPROBS;
}

/* ---- responses ---- */

/* The error body when there is no memory to make one. */
static const char NOMEM_BODY[] = "{\"error\":{\"message\":\"the server ran out of memory; retry "
                                 "later\",\"type\":\"service_unavailable_error\",\"param\":null,"
                                 "\"code\":\"out_of_memory\"}}";

/* The context of a connection whose own context could not be allocated (never written). */
static pl_conn_ctx NOMEM_CONN;

static enum MHD_Result send_nomem(struct MHD_Connection *c) {
    pl_server_error e;
    pl_server_nomem(&e);
    return pl_srv_send_error(c, &e);
}

enum MHD_Result pl_srv_send_text(struct MHD_Connection *c, unsigned status, const char *ctype,
                                 char *text) {
    if (!text) return send_nomem(c);
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

enum MHD_Result pl_srv_send_json(struct MHD_Connection *c, unsigned status, json_t *body) {
    char *s = body && !pl_server_json_failed() ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (s && pl_server_json_failed()) {
        free(s);
        s = NULL;
    }
    return pl_srv_send_text(c, status, "application/json", s);
}

enum MHD_Result pl_srv_answer_json(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x,
                                   pl_srv_json_fn fn) {
    pl_server_error err;
    json_t *o = pl_server_parse_json(x->body ? x->body : "", x->len, &err);
    if (!o) return pl_srv_send_error(c, &err);
    json_t *out = NULL;
    int rc = fn(s, c, x, o, &out, &err);
    json_decref(o);
    if (rc == PL_SRV_CLIENT_GONE) {
        json_decref(out);
        return MHD_NO;
    }
    return rc ? pl_srv_send_error(c, &err) : pl_srv_send_json(c, MHD_HTTP_OK, out);
}

enum MHD_Result pl_srv_send_error(struct MHD_Connection *c, const pl_server_error *e) {
    return pl_srv_send_error_as(c, e, PL_API_OPENAI);
}

enum MHD_Result pl_srv_send_error_as(struct MHD_Connection *c, const pl_server_error *e,
                                     pl_server_api api) {
    char *s = pl_server_error_body_as(e, api);
    struct MHD_Response *r =
        s ? MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE)
          : MHD_create_response_from_buffer(sizeof NOMEM_BODY - 1, (void *)NOMEM_BODY,
                                            MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(s);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (e->status == 503) MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (e->status == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)e->status, r);
    MHD_destroy_response(r);
    return ok;
}

/* ---- routing ---- */

typedef enum MHD_Result (*handler_fn)(pl_server *, struct MHD_Connection *, pl_conn_ctx *);

/* `prefix`: the path is a prefix followed by a non-empty argument (x->arg). Every /v1 route
 * needs the API key; so do the later routes outside /v1 marked `key` (vLLM's own /tokenize and
 * /detokenize, /health, /version and /metrics stay open, as vLLM has them). */
static const struct {
    const char *method, *path;
    handler_fn fn;
    int prefix, key;
} ROUTES[] = {
    {"GET", "/health", pl_srv_health, 0, 0},
    {"GET", "/version", pl_srv_version, 0, 0},
    {"GET", "/metrics", pl_srv_metrics, 0, 0},
    {"GET", "/v1/models", pl_srv_models, 0, 0},
    {"GET", "/v1/models/", pl_srv_model, 1, 0},
    {"POST", "/tokenize", pl_srv_tokenize, 0, 0},
    {"POST", "/detokenize", pl_srv_detokenize, 0, 0},
    {"POST", "/v1/completions", pl_srv_completions, 0, 0},
    {"POST", "/v1/chat/completions", pl_srv_chat, 0, 0},
    {"POST", "/v1/embeddings", pl_srv_embeddings, 0, 0},
    {"POST", "/v1/rerank", pl_srv_rerank, 0, 0},
    {"POST", "/v1/score", pl_srv_score, 0, 0},
    {"POST", "/rerank", pl_srv_rerank, 0, 1},
    {"POST", "/v2/rerank", pl_srv_rerank, 0, 1},
    {"POST", "/v1/chat/render", pl_srv_chat_render, 0, 0},
    {"GET", "/v1/kv/blocks", pl_srv_kv_blocks, 0, 0},
    {"POST", "/v1/responses", pl_srv_responses, 0, 0},
    {"POST", "/v1/messages", pl_srv_messages, 0, 0},
    {"POST", "/v1/messages/count_tokens", pl_srv_count_tokens, 0, 0},
    {"POST", "/apply-template", pl_srv_chat_render, 0, 1},
    {"POST", "/v1/load_lora_adapter", pl_srv_load_lora, 0, 0},
    {"POST", "/v1/unload_lora_adapter", pl_srv_unload_lora, 0, 0},
};

/* Anthropic's routes answer errors in its shape, the others in OpenAI's. */
static pl_server_api api_of(const char *url) {
    return !strcmp(url, "/v1/messages") || !strcmp(url, "/v1/messages/count_tokens")
               ? PL_API_ANTHROPIC : PL_API_OPENAI;
}

static int needs_key(const char *url) {
    if (!strncmp(url, "/v1", 3) && (url[3] == '/' || url[3] == 0)) return 1;
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++)
        if (ROUTES[i].key && !strcmp(url, ROUTES[i].path)) return 1;
    return 0;
}

static enum MHD_Result dispatch(pl_server *s, struct MHD_Connection *c, const char *url,
                                const char *method, pl_conn_ctx *x) {
    pl_server_error err;
    pl_server_api api = api_of(url);
    pl_server_json_reset();
    pthread_mutex_lock(&s->metrics.mu);
    s->metrics.http_requests++;
    pthread_mutex_unlock(&s->metrics.mu);
    if (x->too_large) {
        pl_server_fail(&err, 413, NULL, "request_too_large",
                       "the request body exceeds the limit of %zu bytes", s->cfg.max_request_bytes);
        return pl_srv_send_error_as(c, &err, api);
    }
    if (s->api_key && needs_key(url)) {
        /* "Authorization: Bearer KEY" or Anthropic's "x-api-key: KEY". */
        const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION),
                   *xk = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
        if (!pl_server_auth_ok(h, s->api_key) && !pl_server_auth_key_ok(xk, s->api_key)) {
            pl_server_fail(&err, 401, NULL, "invalid_api_key",
                           h || xk ? "Incorrect API key provided."
                                   : "Missing API key: send 'Authorization: Bearer KEY' or "
                                     "'x-api-key: KEY'.");
            return pl_srv_send_error_as(c, &err, api);
        }
    }
    enum MHD_Result res;
    if ((!strcmp(method, "GET") || !strcmp(method, "HEAD")) && pl_srv_webui(s, c, url, &res))
        return res;
    int path_known = 0;
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++) {
        size_t pl = strlen(ROUTES[i].path);
        if (ROUTES[i].prefix ? strncmp(url, ROUTES[i].path, pl) || !url[pl]
                             : strcmp(url, ROUTES[i].path))
            continue;
        x->arg = ROUTES[i].prefix ? url + pl : NULL;
        path_known = 1;
        if (!strcmp(method, ROUTES[i].method)) return ROUTES[i].fn(s, c, x);
    }
    if (path_known) {
        pl_server_fail(&err, 405, NULL, "method_not_allowed", "method %s is not allowed on %s",
                       method, url);
        return pl_srv_send_error_as(c, &err, api);
    }
    pl_server_fail(&err, 404, NULL, "not_found", "no route %s %s", method, url);
    return pl_srv_send_error_as(c, &err, api);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
    (void)version;
    pl_server *s = cls;
    pl_conn_ctx *x = *con_cls;
    size_t limit = s->cfg.max_request_bytes;
    if (!x) { /* first call: headers only */
        x = calloc(1, sizeof *x);
        if (!x) x = &NOMEM_CONN; /* answered 503 once the body has been read */
        *con_cls = x;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (x != &NOMEM_CONN && cl && strtoull(cl, NULL, 10) > limit) x->too_large = 1;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (x == &NOMEM_CONN) return MHD_YES; /* read and drop: the answer is a 503 */
        if (!x->too_large && x->len + n > limit) {
            x->too_large = 1;
            free(x->body);
            x->body = NULL;
            x->len = x->cap = 0;
        }
        if (x->too_large) {
            /* Read and drop the rest so the client sees the 413; give up on absurd sizes. */
            x->discarded += n;
            return x->discarded > limit * 4 + (64u << 20) ? MHD_NO : MHD_YES;
        }
        if (x->nomem) return MHD_YES;
        if (pl_array_reserve(&x->body, &x->cap, x->len + n + 1, 1)) {
            x->nomem = 1; /* read and drop the rest; the answer is a 503 */
            return MHD_YES;
        }
        memcpy(x->body + x->len, upload, n);
        x->len += n;
        x->body[x->len] = 0;
        return MHD_YES;
    }
    if (x == &NOMEM_CONN || x->nomem) return send_nomem(c);
    return dispatch(s, c, url, method, x);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)cls, (void)c, (void)toe;
    pl_conn_ctx *x = *con_cls;
    if (!x || x == &NOMEM_CONN) return;
    free(x->body);
    free(x);
    *con_cls = NULL;
}

/* ---- in-flight registry ---- */

int pl_srv_track(pl_server *s, uint64_t id) {
    pthread_mutex_lock(&s->mu);
    int ok = !pl_array_reserve(&s->live, &s->cap_live, s->n_live + 1, sizeof *s->live);
    if (ok) s->live[s->n_live++] = id;
    pthread_mutex_unlock(&s->mu);
    return ok ? 0 : -1;
}

void pl_srv_untrack(pl_server *s, uint64_t id) {
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->n_live; i++)
        if (s->live[i] == id) {
            s->live[i] = s->live[--s->n_live];
            break;
        }
    pthread_mutex_unlock(&s->mu);
}

/* ---- lifecycle ---- */

static void *engine_main(void *arg) {
    pl_server *s = arg;
    pl_engine_stats st;
    pl_engine_get_stats(s->eng, &st);
    uint64_t tokens = st.prompt_tokens + st.generation_tokens; /* for iteration_tokens_total */
    while (!atomic_load(&s->engine_stop)) {
        if (pl_engine_has_work(s->eng)) {
            if (pl_engine_step(s->eng) != PL_OK) PL_ERROR("engine step: %s", pl_last_error());
            pl_engine_get_stats(s->eng, &st);
            uint64_t now = st.prompt_tokens + st.generation_tokens;
            pl_server_metrics_iteration(&s->metrics, now - tokens);
            tokens = now;
        } else {
            pl_engine_wait_for_work(s->eng, 100);
        }
    }
    return NULL;
}

static char *dup_or_null(const char *s) { return s && *s ? strdup(s) : NULL; }

static void free_server(pl_server *s) {
    PL_FREE_ALL(s->host, s->model_name, s->model_path, s->api_key, s->bos_text, s->eos_text,
                s->live);
    pl_chat_template_free(s->chat);
    pthread_mutex_destroy(&s->mu);
    pl_server_metrics_destroy(&s->metrics);
    free(s);
}

/* The chat template: --chat-template FILE, else the GGUF's tokenizer.chat_template, else
 * ChatML. One that does not compile is kept: chat requests then get a 400 naming the error. */
static pl_status load_chat_template(pl_server *s) {
    pl_status st;
    if (s->cfg.chat_template_path) {
        FILE *f = fopen(s->cfg.chat_template_path, "rb");
        if (!f) return pl_fail(PL_ERR_IO, "--chat-template %s: cannot open", s->cfg.chat_template_path);
        pl_strbuf b = {0};
        char chunk[4096];
        size_t n;
        while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) pl_strbuf_append(&b, chunk, n);
        int bad = ferror(f);
        fclose(f);
        if (bad || b.failed) {
            pl_strbuf_destroy(&b);
            return pl_fail(bad ? PL_ERR_IO : PL_ERR_NOMEM, "--chat-template %s: cannot read",
                           s->cfg.chat_template_path);
        }
        st = pl_chat_template_new(b.p ? b.p : "", b.len, s->cfg.chat_template_path, &s->chat);
        pl_parse_detect(b.p, b.len, &s->reasoning, &s->tool_format);
        pl_strbuf_destroy(&b);
    } else {
        pl_gguf *g;
        PL_TRY(pl_gguf_open(s->model_path, &g));
        pl_gguf_str t = {0};
        int has = pl_gguf_get_str(g, "tokenizer.chat_template", &t) == PL_OK;
        st = pl_chat_template_new(has ? t.ptr : NULL, has ? t.len : 0, "gguf", &s->chat);
        pl_parse_detect(has ? t.ptr : NULL, has ? t.len : 0, &s->reasoning, &s->tool_format);
        pl_gguf_close(g);
    }
    /* --reasoning-parser NAME overrides what the template's tags suggest ("none": off) */
    if (s->cfg.reasoning_parser && pl_reasoning_parser_by_name(s->cfg.reasoning_parser, &s->reasoning))
        return pl_fail(PL_ERR_INVALID_ARG,
                       "--reasoning-parser %s: unknown (qwen3, deepseek_r1, mistral, gpt_oss, "
                       "gemma4, none)", s->cfg.reasoning_parser);
    if (st == PL_OK && s->reasoning != PL_REASON_NONE)
        PL_INFO("reasoning parser: %s", pl_reasoning_parser_name(s->reasoning));
    if (st == PL_OK && pl_chat_template_error(s->chat))
        PL_WARN("the chat template (%s) does not compile; chat requests will get a 400: %s",
                pl_chat_template_origin(s->chat), pl_chat_template_error(s->chat));
    return st;
}

pl_status pl_server_start(pl_engine *e, const pl_server_config *cfg, pl_server **out) {
    *out = NULL;
    if (!cfg->model_path || !cfg->served_model_name)
        return pl_fail(PL_ERR_INVALID_ARG, "server: model path and served model name are required");
    if (cfg->port < 0 || cfg->port > 65535)
        return pl_fail(PL_ERR_INVALID_ARG, "server: port %d is out of range [0, 65535]", cfg->port);
    pl_server *s = calloc(1, sizeof *s);
    if (!s) return pl_fail(PL_ERR_NOMEM, "out of memory");
    s->eng = e;
    s->cfg = *cfg;
    pthread_mutex_init(&s->mu, NULL);
    pl_server_metrics_init(&s->metrics, pl_engine_max_model_len(e));
    s->host = strdup(cfg->host ? cfg->host : "127.0.0.1");
    s->model_name = strdup(cfg->served_model_name);
    s->model_path = strdup(cfg->model_path);
    s->api_key = dup_or_null(cfg->api_key);
    if (!s->host || !s->model_name || !s->model_path || (cfg->api_key && *cfg->api_key && !s->api_key)) {
        free_server(s);
        return pl_fail(PL_ERR_NOMEM, "server: out of memory");
    }
    s->cfg.host = s->host;
    s->cfg.served_model_name = s->model_name;
    s->cfg.model_path = s->model_path;
    s->cfg.api_key = s->api_key;
    if (s->cfg.max_logprobs < 0 || s->cfg.max_logprobs > PL_MAX_LOGPROBS) s->cfg.max_logprobs = PL_MAX_LOGPROBS;
    if (s->cfg.max_request_bytes == 0) s->cfg.max_request_bytes = 4u << 20;
    s->tok = pl_engine_tokenizer(e);
    s->max_model_len = pl_engine_max_model_len(e);
    s->n_vocab = pl_engine_n_vocab(e);
    s->created = (int64_t)time(NULL);
    int32_t bos = pl_tokenizer_bos(s->tok), eos = pl_tokenizer_eos(s->tok);
    s->bos_text = bos >= 0 ? dup_or_null(pl_tokenizer_token_text(s->tok, bos)) : NULL;
    s->eos_text = eos >= 0 ? dup_or_null(pl_tokenizer_token_text(s->tok, eos)) : NULL;
    if ((bos >= 0 && *pl_tokenizer_token_text(s->tok, bos) && !s->bos_text) ||
        (eos >= 0 && *pl_tokenizer_token_text(s->tok, eos) && !s->eos_text)) {
        free_server(s);
        return pl_fail(PL_ERR_NOMEM, "server: out of memory");
    }
    pl_server_json_init();
    pl_status st = load_chat_template(s);
    if (st != PL_OK) {
        free_server(s);
        return st;
    }

    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", cfg->port);
    int gai = getaddrinfo(s->host, port, &hints, &ai);
    if (gai) {
        free_server(s);
        return pl_fail(PL_ERR_INVALID_ARG, "server: cannot resolve host '%s': %s", cfg->host,
                       gai_strerror(gai));
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                     MHD_USE_POLL | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    if (pthread_create(&s->engine_thread, NULL, engine_main, s)) {
        freeaddrinfo(ai);
        free_server(s);
        return pl_fail(PL_ERR_INTERNAL, "server: cannot start the engine thread");
    }
    s->daemon = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, on_request, s,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                 MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)1024,
                                 MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1,
                                 MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->daemon) {
        atomic_store(&s->engine_stop, 1);
        pthread_join(s->engine_thread, NULL);
        free_server(s);
        return pl_fail(PL_ERR_IO, "server: cannot listen on %s port %d (in use, or not an "
                       "address of this machine?)", cfg->host, cfg->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : cfg->port;
    *out = s;
    return PL_OK;
}

int pl_server_port(const pl_server *s) { return s->port; }


static int wait_idle(pl_server *s, double seconds) {
    double end = pl_clock_now() + seconds;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int active = s->active;
        pthread_mutex_unlock(&s->mu);
        if (active == 0) return 1;
        if (pl_clock_now() >= end) return 0;
        usleep(20000);
    }
}

void pl_server_stop(pl_server *s, double grace) {
    if (!s) return;
    atomic_store(&s->draining, 1);
    MHD_socket lfd = MHD_quiesce_daemon(s->daemon); /* stop accepting */
    if (lfd != MHD_INVALID_SOCKET) close(lfd);
    if (!wait_idle(s, grace)) {
        pthread_mutex_lock(&s->mu);
        PL_INFO("shutdown: aborting %zu unfinished requests", s->n_live);
        for (size_t i = 0; i < s->n_live; i++) pl_engine_abort(s->eng, s->live[i]);
        pthread_mutex_unlock(&s->mu);
        wait_idle(s, 5);
    }
    atomic_store(&s->hard_stop, 1);
    MHD_stop_daemon(s->daemon); /* closes connections; their jobs release what is left */
    atomic_store(&s->engine_stop, 1);
    pthread_join(s->engine_thread, NULL);
    free_server(s);
}
