/* server/server — pagellm's OpenAI-compatible HTTP server (`pagellm serve`).
 *
 * What it owns: the HTTP daemon (libmicrohttpd, one thread per connection), the engine thread
 * (the only caller of pl_engine_step), the mapping between OpenAI/vLLM JSON (jansson) and
 * pl_request_params / pl_request_output, server-sent events, API-key auth, request size limits,
 * Prometheus metrics and the graceful shutdown.
 *
 * Invariants:
 * - Every engine request the server adds is either polled until its finished output or released
 *   (pl_engine_release) when its client goes away: no request and no KV block outlives its HTTP
 *   request.
 * - A connection thread only blocks in pl_engine_poll with a bounded timeout, and checks between
 *   waits whether its client hung up, so a disconnect is noticed within ~100 ms.
 * - Bad input never reaches the engine unchecked: request JSON is validated here (types, ranges,
 *   the model name, the prompt length) and answered with OpenAI's error body
 *   {"error": {"message", "type", "param", "code"}} and a fitting status.
 *
 * The pure pieces (request parsing, error bodies, SSE framing, response shaping, metrics text)
 * are declared here too so unit tests can reach them without a socket.
 */
#ifndef PL_SERVER_SERVER_H
#define PL_SERVER_SERVER_H

#include "pagellm.h"
#include "base/buf.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the server ---- */

typedef struct {
    const char *host;              /* bind address, numeric IPv4/IPv6 or a name ("127.0.0.1") */
    int port;                      /* TCP port; 0 = any free port (see pl_server_port) */
    const char *served_model_name; /* the model's name in requests and responses */
    const char *model_path;        /* GGUF file (chat template, /v1/models root) */
    const char *api_key;           /* NULL or "": no auth; else every /v1 route needs "Bearer KEY" */
    size_t max_request_bytes;      /* request bodies above this get 413 (default 4 MiB) */
    double shutdown_grace;         /* seconds in-flight requests may finish on stop (10) */
    int32_t max_logprobs;          /* bound of logprobs / top_logprobs / prompt_logprobs (20; 0 = none allowed) */
    int no_webui;                  /* 1: no web page (GET / and its assets answer 404) */
    const char *chat_template_path; /* Jinja file to use instead of the GGUF's template, or NULL */
    const char *reasoning_parser;  /* --reasoning-parser NAME, or NULL: from the template's tags */
    int allow_runtime_lora;        /* 1: POST /v1/load_lora_adapter and /v1/unload_lora_adapter
                                      (vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING); 0: they 404 */
} pl_server_config;

void pl_server_config_default(pl_server_config *c);

typedef struct pl_server pl_server;

/* Start the engine thread and the HTTP daemon. The engine stays the caller's; it must outlive
 * the server. */
pl_status pl_server_start(pl_engine *e, const pl_server_config *c, pl_server **out);
int pl_server_port(const pl_server *s);
/* Stop accepting connections, let in-flight requests finish for up to `grace` seconds, abort
 * what is left, stop the daemon and the engine thread, free everything. */
void pl_server_stop(pl_server *s, double grace);

/* ---- errors ---- */

typedef struct {
    int status;          /* HTTP status */
    char message[512];   /* human-readable, names the field */
    const char *type;    /* "invalid_request_error", "authentication_error", ... */
    const char *param;   /* the offending field, or NULL */
    const char *code;    /* short machine code, or NULL */
} pl_server_error;

/* Fill *e; returns -1 so handlers can `return pl_server_fail(...)`. */
int pl_server_fail(pl_server_error *e, int status, const char *param, const char *code,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* 503 out_of_memory: an allocation failed while serving; the request ends, the server goes on. */
int pl_server_nomem(pl_server_error *e);
/* {"error": {"message", "type", "param", "code"}} as a malloc'ed string (NULL: out of memory). */
char *pl_server_error_body(const pl_server_error *e);

/* The API a route speaks: its request shape, its answer and its error body. */
typedef enum { PL_API_OPENAI, PL_API_RESPONSES, PL_API_ANTHROPIC } pl_server_api;
/* The error body in the API's shape: OpenAI's above (the Responses API too), or Anthropic's
 * {"type": "error", "error": {"type", "message"}} (its type from the status). */
char *pl_server_error_body_as(const pl_server_error *e, pl_server_api api);

/* Out of memory inside jansson. pl_server_json_init (once, before any thread uses jansson) routes
 * jansson's allocations through a hook that flags a failure for the calling thread; a handler
 * resets the flag, builds its JSON, and answers pl_server_nomem when the flag is set, so no
 * response goes out with a member silently missing. */
void pl_server_json_init(void);
void pl_server_json_reset(void);
int pl_server_json_failed(void);

/* ---- requests ---- */

typedef struct {
    char *text;          /* prompt text, or NULL when given as ids */
    int32_t *ids;        /* prompt token ids when given as ids */
    size_t n_ids;
} pl_server_prompt;

typedef struct {
    char *role;          /* "system", "user", "assistant", "tool" */
    char *content;       /* text (content parts of type "text" are joined) */
    int content_null;    /* content was null (an assistant's tool calls): the template sees None */
    char *extra;         /* NULL, or a JSON object of tool_calls / tool_call_id / name (tools.c) */
} pl_server_message;

typedef struct {
    int chat;                        /* 1: /v1/chat/completions, 0: /v1/completions */
    char *model;                     /* requested model name, or NULL */
    pl_server_prompt *prompts;       /* completions: [n_prompts] */
    int n_prompts;
    size_t cap_prompts;
    pl_server_message *messages;     /* chat: [n_messages] */
    int n_messages;
    int add_generation_prompt;       /* chat (1) */
    pl_request_params params;        /* stop / stop_token_ids point into the fields below */
    char **stop;                     /* [params.n_stop] */
    int32_t *stop_ids;               /* [params.n_stop_token_ids] */
    pl_logit_bias *logit_bias;       /* [params.sampling.n_logit_bias] */
    const char *constraint_field;    /* structured output: the field that set it (static), or NULL */
    char *constraint_text;           /* params.constraint_text */
    char **choices;                  /* params.constraint_choices [n_choices] */
    int n_choices;
    int max_tokens_given;            /* max_tokens was in the request (chat defaults to the rest
                                        of the context) */
    int stream, include_usage, echo;
    int32_t logprobs;                /* completions: top-k; chat: top_logprobs; -1 = none */
    int add_special_tokens;          /* completions (1), chat (0) */
    char *tools;                     /* chat: JSON list of the tools the template gets, or NULL
                                        (none given, or tool_choice "none"; a named function: it) */
    int tool_force;                  /* tool_choice: 1 "required", 2 a named function */
    char *template_kwargs;           /* chat_template_kwargs: a JSON object text, or NULL */
    char *tool_grammar;              /* the constraint forcing a call (generate.c), or NULL */
    int32_t thinking_budget;         /* chat: thinking_token_budget (or llama-server's
                                        reasoning_budget), -1 = none */
    const char *thinking_budget_field; /* the field that set it (static), or NULL */
    int32_t *force_ids;              /* params.force_end's open ++ close ids (generate.c) */
} pl_server_request;

/* Parse and validate a request body. Returns 0, or -1 with *err filled (400). Recognised but
 * unsupported fields (suffix, functions, function_call, tool_choice "required", two structured
 * output constraints at once) are a 400 naming the field with code "unsupported_parameter";
 * unknown fields are ignored (logged once each at debug level). On success free the request
 * with pl_server_request_destroy. */
int pl_server_parse_request(const char *body, size_t len, int chat, int32_t max_logprobs,
                            pl_server_request *r, pl_server_error *err);
void pl_server_request_destroy(pl_server_request *r);

/* ---- the Responses and Messages APIs (compat.c) ---- */

/* A /v1/responses or /v1/messages body as the chat request it asks for: translated to a
 * /v1/chat/completions body, then parsed by pl_server_parse_request, so templating, tools,
 * structured output and the sampling checks are the chat route's. A field of the wrong type, a
 * missing one, an unknown input item or content block type, a refused feature: 400 whose param
 * and message name the field in the API's own terms. `count_only` (/v1/messages/count_tokens):
 * max_tokens is not required. `*echo` (Responses, may be NULL): the request fields a response
 * object repeats, to be freed with json_decref. */
int pl_server_parse_api_request(pl_server_api api, const char *body, size_t len,
                                int32_t max_logprobs, int count_only, pl_server_request *r,
                                json_t **echo, pl_server_error *err);

/* An error's param, named by the chat request, renamed to the API's field (messages -> input,
 * max_tokens -> max_output_tokens, stop -> stop_sequences, ...); the message keeps its words. */
void pl_server_api_param(pl_server_api api, pl_server_error *err);

/* One answer of the Responses or Messages API being built (whole, or as its stream's events). */
typedef struct {
    pl_server_api api;
    const char *id;                /* "resp_..." / "msg_..." */
    const char *model;
    int64_t created;
    const json_t *echo;            /* Responses: request fields the response object repeats */
    int64_t input_tokens, cached_tokens, output_tokens;
    int seq;                       /* Responses: the next event's sequence_number */
    int text_open;                 /* a stream's text item / block has been started */
    const char *reasoning;         /* the answer's thinking (parse.c), or NULL */
    size_t reasoning_len;
    int64_t reasoning_tokens;
    int reasoning_sent;            /* a stream's thinking item / block went out (index 0) */
} pl_server_compat;

/* The whole answer for the generated text and the tool calls parsed out of it (chat's
 * tool_calls list, or NULL): a Responses response object, or an Anthropic message. */
json_t *pl_server_compat_answer(const pl_server_compat *x, const char *text, size_t len,
                                const json_t *calls, pl_finish_reason f, const char *stop_str);
/* Stream events, appended to *out ("event: NAME\ndata: JSON\n\n"); 0, or -1 out of memory. */
int pl_server_compat_stream_start(pl_server_compat *x, pl_strbuf *out);
int pl_server_compat_stream_text(pl_server_compat *x, pl_strbuf *out, const char *text, size_t n);
/* The thinking as one whole item / block, before any text (nothing when empty or sent). */
int pl_server_compat_stream_reasoning(pl_server_compat *x, pl_strbuf *out, const char *text,
                                      size_t n);
/* The rest: `sent` bytes of the text went out already; closes the text, sends the calls, ends. */
int pl_server_compat_stream_end(pl_server_compat *x, pl_strbuf *out, const char *text, size_t len,
                                size_t sent, const json_t *calls, pl_finish_reason f,
                                const char *stop_str);
int pl_server_compat_stream_error(pl_server_compat *x, pl_strbuf *out, const pl_server_error *e);

/* ---- tool calling (tools.c) ---- */

/* `tools` and `tool_choice` into r->tools; 0 or -1 with *err (400). */
int pl_server_parse_tools(const json_t *o, pl_server_request *r, pl_server_error *err);
/* A message's tool_calls / tool_call_id / name into m->extra; 0 or -1 with *err. */
int pl_server_parse_tool_fields(const json_t *msg, size_t i, pl_server_message *m,
                                pl_server_error *err);

/* ---- a chat answer's thinking, text and tool calls (parse.c) ---- */

/* How a template family writes its thinking (--reasoning-parser, vLLM's names: qwen3,
 * deepseek_r1, mistral, gpt_oss; gemma4 for Gemma 4's <|channel>thought ... <channel|>). */
typedef enum {
    PL_REASON_NONE, PL_REASON_QWEN3, PL_REASON_DEEPSEEK_R1, PL_REASON_MISTRAL, PL_REASON_GPT_OSS,
    PL_REASON_GEMMA4
} pl_reasoning_format;
/* How it writes tool calls: Hermes / Qwen3 <tool_call>{json}</tool_call> (also takes
 * Qwen3-Coder's body), Mistral [TOOL_CALLS] (list, or NAME[ARGS]{json}), Llama 3.x bare JSON,
 * Qwen3-Coder / Qwen3.5 / Nemotron 3 <function=NAME><parameter=K>, GLM 4.5/4.6 <arg_key>,
 * DeepSeek V3.1, Kimi K2, gpt-oss harmony, Gemma 4 <|tool_call>call:NAME{...}. */
typedef enum {
    PL_TOOLS_NONE, PL_TOOLS_HERMES, PL_TOOLS_MISTRAL, PL_TOOLS_LLAMA3, PL_TOOLS_QWEN3_CODER,
    PL_TOOLS_GLM45, PL_TOOLS_DEEPSEEK_V31, PL_TOOLS_KIMI_K2, PL_TOOLS_HARMONY, PL_TOOLS_GEMMA4
} pl_tool_format;

/* The GBNF grammar of one call, in format f, of one of the tools (a JSON list of
 * {"type": "function", "function": {...}}), after `opening` (or NULL: text the answer must start
 * with, the closing tag of a thinking the prompt opened). 0, or -1 with *err: 400 naming the
 * tool whose parameters cannot be compiled, or tool_choice when f cannot be constrained. */
int pl_server_tool_grammar(pl_tool_format f, const char *tools_json, const char *opening,
                           char **gbnf, pl_server_error *err);

/* The formats a chat template writes, by its markers (NONE when it has none). */
void pl_parse_detect(const char *template_src, size_t len, pl_reasoning_format *reasoning,
                     pl_tool_format *tools);
pl_tool_format pl_tool_format_detect(const char *template_src, size_t len);
/* A --reasoning-parser name ("none" too): 0, or -1 when unknown. */
int pl_reasoning_parser_by_name(const char *name, pl_reasoning_format *out);
const char *pl_reasoning_parser_name(pl_reasoning_format f);
/* 1 when the rendered prompt ends inside an opened thinking block (the template wrote <think>
 * for the model): the answer starts as thinking. */
int pl_parse_prompt_opens_thinking(pl_reasoning_format r, const char *prompt, size_t len);
/* What an answer that skips the thinking the prompt opened starts with (its closing tag), or
 * NULL when the prompt opened none. */
const char *pl_parse_opening(pl_reasoning_format r, int in_reasoning);
/* The thinking block's opening and closing tags of format r: 0, or -1 when r has none as plain
 * tags (none, gpt-oss's channels). */
int pl_parse_think_tags(pl_reasoning_format r, const char **open, const char **close);

typedef struct {
    pl_reasoning_format reasoning; /* NONE: no thinking is split off */
    pl_tool_format tools;          /* NONE: no tool calls are parsed */
    int in_reasoning;              /* the prompt opened the thinking */
    const json_t *tool_defs;       /* the request's tools (parameter types), or NULL */
} pl_parse_cfg;

typedef struct {
    char *name;
    pl_strbuf args;                /* JSON text of the arguments so far */
    int done;                      /* the call is closed */
} pl_parsed_call;

typedef struct {
    pl_strbuf reasoning, content;
    pl_parsed_call *calls;
    int n_calls;
    size_t cap_calls;
    int reasoning_done;            /* the thinking's closing tag was seen */
} pl_parsed;

/* Parse text[0..len): `final` 0 while more may come (then only what no later byte can change is
 * reported: every field is a prefix of the same field of a later parse). 0, or -1 out of memory.
 * Free with pl_parsed_destroy (also after a failure). */
int pl_parse_text(const pl_parse_cfg *cfg, const char *text, size_t len, int final,
                  pl_parsed *out);
void pl_parsed_destroy(pl_parsed *p);
/* The calls as OpenAI's tool_calls list (ids "call_" + 9 characters), NULL when none (or out of
 * memory). */
json_t *pl_parsed_calls_json(const pl_parsed *p);
void pl_make_call_id(char *out, size_t cap);

/* What a stream has sent of a parse. */
typedef struct {
    size_t reasoning, content;
    size_t *args;                  /* [n_calls] argument bytes sent */
    int n_calls;
    size_t cap;
} pl_parse_sent;
void pl_parse_sent_destroy(pl_parse_sent *s);
/* Put what `p` has beyond `s` into a chat delta object (reasoning_content, content, tool_calls:
 * a new call with its index, id, type, name and the arguments so far, then argument pieces),
 * cut at character boundaries. 1 something was added, 0 nothing, -1 out of memory. */
int pl_parse_diff(const pl_parsed *p, pl_parse_sent *s, json_t *delta);
/* The length of the start of s[0..n) that ends on a character boundary. */
size_t pl_utf8_whole(const char *s, size_t n);

/* Log an unknown request field's name at debug level, once per name per process (at most 64
 * names). Returns 1 if it was logged now. */
int pl_server_note_unknown_field(const char *key);

/* The request field an engine validation message is about (its first word), or NULL. */
const char *pl_server_param_of(const char *engine_message);

/* Parse a body into a JSON object (400 for malformed JSON, invalid UTF-8, not an object). */
json_t *pl_server_parse_json(const char *body, size_t len, pl_server_error *err);
/* POST /v1/load_lora_adapter (need_path) and /v1/unload_lora_adapter bodies, vLLM's:
 * `lora_name` (a string of 1 to 127 bytes) and `lora_path` (a non-empty string); other fields
 * are ignored, as vLLM ignores them. Returns the object (the caller decrefs it; *name and *path
 * point into it), or NULL with a 400 naming the field (lora_routes.c). */
json_t *pl_server_parse_lora_body(const char *body, size_t len, int need_path, const char **name,
                                  const char **path, pl_server_error *err);

/* ---- responses ---- */

/* One completion being accumulated from deltas. */
typedef struct {
    char *text;                    /* output text so far (NUL-terminated) */
    size_t len;
    int32_t *ids;                  /* [n] output token ids */
    float *lp;                     /* [n] chosen logprob, when logprobs were asked */
    pl_token_logprob *top;         /* [n][n_top + 1] */
    int32_t n, n_top;              /* tokens; top log-probabilities per token */
    pl_finish_reason finish;
    int32_t stop_token;            /* -1 or the stop id */
    char *stop_str;                /* NULL or the stop string */
    double cum_logprob;            /* cumulative log-probability of the completion */
    size_t text_cap, ids_cap, lp_cap, top_cap; /* allocated elements (base/buf.h) */
} pl_server_choice;

/* 0, or -1 when out of memory (c stays valid, without this delta). */
int pl_server_choice_add(pl_server_choice *c, const pl_completion_delta *d);
void pl_server_choice_destroy(pl_server_choice *c);

/* What response builders need to know about the request and the model. */
typedef struct {
    const char *id;                 /* "cmpl-..." / "chatcmpl-..." */
    const char *model;              /* served model name */
    int64_t created;                /* unix seconds */
    const pl_tokenizer *tok;        /* token strings for logprobs (may be NULL: "token_id:N") */
    int chat;
    int logprobs;                   /* logprobs were asked */
} pl_server_resp_ctx;

/* The finish_reason / stop_reason values of a choice (json_null while running). */
json_t *pl_server_finish_json(pl_finish_reason f);
json_t *pl_server_stop_reason_json(pl_finish_reason f, int32_t stop_token, const char *stop_str);

/* Completions logprobs object {tokens, token_logprobs, top_logprobs, text_offset} for tokens
 * ids[0..n) (lp/top may be NULL for positions without data: JSON null). `offset0` is the
 * text offset (in characters) of the first token. *offset_end gets the offset after the last. */
json_t *pl_server_completion_logprobs(const pl_server_resp_ctx *x, const int32_t *ids,
                                      const float *lp, const pl_token_logprob *top, int32_t n,
                                      int32_t n_top, int first_null, size_t offset0,
                                      size_t *offset_end);
/* Chat logprobs {"content": [{token, logprob, bytes, top_logprobs: [...]}]}. */
json_t *pl_server_chat_logprobs(const pl_server_resp_ctx *x, const int32_t *ids, const float *lp,
                                const pl_token_logprob *top, int32_t n, int32_t n_top);
/* The choice of one streamed chunk for delta d of choice k: chat {"index", "delta": {"content"},
 * "logprobs", "finish_reason", "stop_reason"}, completions {"index", "text", ...} with `prefix`
 * (echo; valid UTF-8, or NULL) in front of the text. The text is the delta's bytes sanitized
 * (pl_server_utf8_sanitize); *text_off advances over the completion logprobs' tokens. */
json_t *pl_server_chunk_choice(const pl_server_resp_ctx *x, int k, const pl_completion_delta *d,
                               const char *prefix, size_t *text_off);
/* {"prompt_tokens", "completion_tokens", "total_tokens",
 *  "prompt_tokens_details": {"cached_tokens"}} (cached: prompt tokens found in the prefix cache). */
json_t *pl_server_usage_json(int64_t prompt, int64_t completion, int64_t cached);

/* Every builder below returns NULL when out of memory. */

/* SSE framing: "data: <compact JSON>\n\n" (malloc'ed), and the closing "data: [DONE]\n\n".
 * pl_server_sse_named puts "event: NAME\n" in front (NAME NULL: none). */
char *pl_server_sse_event(const json_t *obj);
char *pl_server_sse_named(const char *event, const json_t *obj);
extern const char PL_SERVER_SSE_DONE[];

/* A token as a string for JSON: its piece with invalid UTF-8 replaced by U+FFFD (malloc'ed). */
char *pl_server_token_str(const pl_tokenizer *t, int32_t id);
/* Copy of s[0..n) with every invalid UTF-8 sequence replaced by U+FFFD (malloc'ed, NUL-ended). */
char *pl_server_utf8_sanitize(const char *s, size_t n, size_t *out_len);
/* s[0..n) as a JSON string, sanitized as above; NULL when out of memory. */
json_t *pl_server_text_json(const char *s, size_t n);
/* Unicode code points in a valid UTF-8 string (Python len()). */
size_t pl_server_utf8_chars(const char *s, size_t n);

/* ---- the KV cache view ---- */

/* GET /v1/kv/blocks's body for a snapshot and the stats (kv_blocks.c documents the shape),
 * malloc'ed; NULL when out of memory. */
char *pl_server_kv_blocks_json(const pl_kv_snapshot *k, const pl_engine_stats *s);

/* ---- auth ---- */

/* 1 if the Authorization header value is "Bearer KEY" for `key`; compares in time independent
 * of where the strings differ. */
int pl_server_auth_ok(const char *header, const char *key);
/* The same for a header that holds the bare key (Anthropic's x-api-key). */
int pl_server_auth_key_ok(const char *header, const char *key);

/* ---- metrics ---- */

enum { PL_SERVER_HIST_MAX_BUCKETS = 24 };

typedef struct {
    const double *bounds;                        /* upper bounds, ascending; +Inf implied */
    int n_bounds;
    uint64_t counts[PL_SERVER_HIST_MAX_BUCKETS]; /* per bucket (not cumulative); last = +Inf */
    uint64_t count;
    double sum;
} pl_server_hist;

typedef struct {
    pthread_mutex_t mu;
    pl_server_hist ttft, tpot, e2e;  /* seconds */
    pl_server_hist queue, prefill, decode, inference; /* seconds: arrival to first scheduled, to
                                        first token, first token to finish, scheduled to finish */
    pl_server_hist prompt_tokens, generation_tokens; /* per request (1-2-5 buckets) */
    pl_server_hist params_n, params_max_tokens;      /* the request's n and max_tokens */
    pl_server_hist iteration_tokens; /* tokens computed or generated per engine step */
    double len_bounds[PL_SERVER_HIST_MAX_BUCKETS];   /* 1, 2, 5, 10, ... <= max_model_len */
    uint64_t finished[5];            /* finished requests by pl_finish_reason (abort includes
                                        requests released when their client went away) */
    uint64_t http_requests;          /* requests received */
} pl_server_metrics;

/* max_model_len bounds the 1-2-5 buckets of the token-count histograms (as vLLM). The struct
 * must not move after init (histograms point at len_bounds). */
void pl_server_metrics_init(pl_server_metrics *m, int32_t max_model_len);
void pl_server_metrics_destroy(pl_server_metrics *m);
/* Record one finished request: its final output (times, prompt and output token counts), its
 * parameters (n, max_tokens) and why it finished. */
void pl_server_metrics_observe(pl_server_metrics *m, const pl_request_output *final,
                               const pl_request_params *p, pl_finish_reason reason);
/* Record a request released unfinished because its client went away: finished_reason abort. */
void pl_server_metrics_abort(pl_server_metrics *m, const pl_request_params *p,
                             int32_t n_prompt_tokens);
/* Record one engine step that computed or generated `tokens` tokens. */
void pl_server_metrics_iteration(pl_server_metrics *m, uint64_t tokens);
void pl_server_hist_observe(pl_server_hist *h, double v, uint64_t times);
/* Prometheus text exposition (format 0.0.4), malloc'ed. `c` (may be NULL) is the engine's
 * configuration in effect, for vllm:cache_config_info. */
char *pl_server_metrics_render(pl_server_metrics *m, const pl_engine_stats *s,
                               const pl_engine_config *c, const char *model_name);

#endif
