/* server/server_internal — what server.c (daemon, dispatch, lifecycle), routes.c (small
 * endpoints), generate.c (completions and chat, streaming) and embeddings.c share. */
#ifndef PL_SERVER_SERVER_INTERNAL_H
#define PL_SERVER_SERVER_INTERNAL_H

#include "server/server.h"
#include "tokenizer/chat_template.h"

#include <microhttpd.h>
#include <stdatomic.h>

struct pl_server {
    pl_engine *eng;
    pl_server_config cfg;          /* strings below are owned copies */
    char *host, *model_name, *model_path, *api_key;
    struct MHD_Daemon *daemon;
    int port;                      /* the bound port */
    pthread_t engine_thread;
    atomic_int engine_stop;        /* the engine thread should exit */
    atomic_int draining;           /* shutting down: refuse new generation requests */
    atomic_int hard_stop;          /* stop waiting on the engine: answer at once */
    pl_server_metrics metrics;
    const pl_tokenizer *tok;
    pl_chat_template *chat;        /* --chat-template FILE, the GGUF's, or ChatML */
    pl_tool_format tool_format;    /* how its tool calls look in generated text (parse.c) */
    pl_reasoning_format reasoning; /* how its thinking looks (--reasoning-parser or detected) */
    char *bos_text, *eos_text;     /* for chat templates (NULL if the vocab has none) */
    int32_t max_model_len, n_vocab;
    int64_t created;               /* unix seconds at start */
    /* In-flight registry, for shutdown. */
    pthread_mutex_t mu;
    uint64_t *live;                /* [n_live] engine request ids not yet finished */
    size_t n_live, cap_live;
    int active;                    /* generation HTTP requests in flight */
};

/* One HTTP request's state from the first call of the access handler to its completion. */
typedef struct {
    char *body;                    /* upload (NUL-terminated) */
    size_t len, cap;
    int too_large;                 /* the body exceeded max_request_bytes: discard, then 413 */
    int nomem;                     /* no memory for the body: discard, then 503 */
    size_t discarded;
    const char *arg;               /* a prefix route's argument (the URL after the prefix) */
} pl_conn_ctx;

/* Responses. Each queues a response and returns MHD's result. */
enum MHD_Result pl_srv_send_json(struct MHD_Connection *c, unsigned status, json_t *body);
enum MHD_Result pl_srv_send_text(struct MHD_Connection *c, unsigned status, const char *ctype,
                                 char *text);
enum MHD_Result pl_srv_send_error(struct MHD_Connection *c, const pl_server_error *e);
/* The error in the API's shape (Anthropic's on /v1/messages). */
enum MHD_Result pl_srv_send_error_as(struct MHD_Connection *c, const pl_server_error *e,
                                     pl_server_api api);

/* A POST whose body is a JSON object, answered by fn: 0 with *out (sent with 200; NULL or a
 * build jansson flagged: 503 out_of_memory), PL_SRV_CLIENT_GONE (nothing sent), else the error
 * in *err. */
enum { PL_SRV_CLIENT_GONE = 2 };
typedef int (*pl_srv_json_fn)(pl_server *s, struct MHD_Connection *c, const pl_conn_ctx *x,
                              json_t *body, json_t **out, pl_server_error *err);
enum MHD_Result pl_srv_answer_json(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x,
                                   pl_srv_json_fn fn);

/* Route handlers (routes.c). */
enum MHD_Result pl_srv_health(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x);
enum MHD_Result pl_srv_version(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x);
enum MHD_Result pl_srv_models(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x);
enum MHD_Result pl_srv_model(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x);
enum MHD_Result pl_srv_metrics(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x);
enum MHD_Result pl_srv_tokenize(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x);
enum MHD_Result pl_srv_detokenize(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x);
enum MHD_Result pl_srv_chat_render(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x);
enum MHD_Result pl_srv_count_tokens(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x);
/* kv_blocks.c */
enum MHD_Result pl_srv_kv_blocks(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x);
/* webui.c: the embedded page and its files (GET /, /app.js, ...); MHD_NO-free: returns 0 when
 * url names no asset (the caller answers 404). */
int pl_srv_webui(pl_server *s, struct MHD_Connection *c, const char *url, enum MHD_Result *res);
/* generate.c */
enum MHD_Result pl_srv_completions(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x);
enum MHD_Result pl_srv_chat(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x);
enum MHD_Result pl_srv_responses(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x);
enum MHD_Result pl_srv_messages(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x);
/* embeddings.c */
enum MHD_Result pl_srv_embeddings(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x);
/* n engine embedding requests of token ids (ids[i] of n_ids[i], no special tokens added; the
 * three arrays and the id lists are taken over and freed), run to the end as /v1/embeddings
 * runs its inputs (queue waves, metrics, a client that goes away). 0: *vec = n vectors of
 * pl_engine_n_embd floats (free each and the array), *prompt_tokens their total; 2 the client
 * went away; 1 *err holds the answer (a refused input is a 400 naming `field`). */
int pl_srv_embed_ids(pl_server *s, struct MHD_Connection *c, int32_t **ids, size_t *n_ids,
                     size_t n, const char *field, float ***vec, int64_t *prompt_tokens,
                     pl_server_error *err);

/* rerank.c: POST /v1/rerank, /rerank, /v2/rerank (Cohere's, Jina's and vLLM's shape) and
 * /v1/score (vLLM's) with a reranker (pooling rank). */
enum MHD_Result pl_srv_rerank(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x);
enum MHD_Result pl_srv_score(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x);

/* Render chat messages with the model's template into *out (malloc'ed). */
int pl_srv_render_chat(pl_server *s, const pl_server_request *r, int add_gen, char **out,
                       pl_server_error *err);

/* 404 model_not_found, OpenAI's body, for a model name this server does not serve. */
/* LoRA adapters (lora_routes.c): append the adapters' model objects to data (-1: no memory);
 * one adapter's object or NULL; resolve a request's model name: the base model (*lora NULL),
 * an adapter (*lora = name) or a 404 naming it. */
int pl_srv_lora_models(pl_server *s, json_t *data);
json_t *pl_srv_lora_model(pl_server *s, const char *name);
int pl_srv_resolve_model(pl_server *s, const char *name, const char **lora, const char *param,
                         pl_server_error *err);
enum MHD_Result pl_srv_load_lora(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x);
enum MHD_Result pl_srv_unload_lora(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x);
int pl_srv_model_not_found(pl_server *s, const char *name, const char *param,
                           pl_server_error *err);

/* In-flight registry. */
/* Registers an engine request so a stop can abort it; -1 when out of memory (the caller must
 * then release the request itself). */
int pl_srv_track(pl_server *s, uint64_t id);
void pl_srv_untrack(pl_server *s, uint64_t id);

#endif
