/* server/routes — the small endpoints: /health, /version, /v1/models, /v1/models/{id}, /metrics,
 * /tokenize, /detokenize (vLLM's request and response shapes, and llama-server's), chat rendering
 * (/v1/chat/render, llama-server's /apply-template) and Anthropic's /v1/messages/count_tokens. */
#include "server/server_internal.h"

#include <stdlib.h>
#include <string.h>

enum MHD_Result pl_srv_health(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x) {
    (void)s, (void)x;
    return pl_srv_send_text(c, MHD_HTTP_OK, "text/plain", strdup(""));
}

enum MHD_Result pl_srv_version(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x) {
    (void)s, (void)x;
    return pl_srv_send_json(c, MHD_HTTP_OK, json_pack("{s:s}", "version", "0.1.0"));
}

static json_t *model_json(pl_server *s) {
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:n, s:i, s:[]}", "id", s->model_name,
                          "object", "model", "created", (json_int_t)s->created, "owned_by",
                          "pagellm", "root", s->model_path, "parent", "max_model_len",
                          s->max_model_len, "permission");
}

enum MHD_Result pl_srv_models(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x) {
    (void)x;
    json_t *o = json_pack("{s:s, s:[o]}", "object", "list", "data", model_json(s));
    if (o && pl_srv_lora_models(s, json_object_get(o, "data"))) { /* then the adapters */
        json_decref(o);
        o = NULL;
    }
    return pl_srv_send_json(c, MHD_HTTP_OK, o);
}

int pl_srv_model_not_found(pl_server *s, const char *name, const char *param,
                           pl_server_error *err) {
    return pl_server_fail(err, 404, param, "model_not_found",
                          "The model `%.200s` does not exist (this server serves `%.200s`).",
                          name, s->model_name);
}

/* GET /v1/models/{id}: the model object, or 404 model_not_found. */
enum MHD_Result pl_srv_model(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x) {
    json_t *lora = strcmp(x->arg, s->model_name) ? pl_srv_lora_model(s, x->arg) : NULL;
    if (lora) return pl_srv_send_json(c, MHD_HTTP_OK, lora);
    if (strcmp(x->arg, s->model_name)) {
        pl_server_error err;
        pl_srv_model_not_found(s, x->arg, NULL, &err);
        return pl_srv_send_error(c, &err);
    }
    return pl_srv_send_json(c, MHD_HTTP_OK, model_json(s));
}

enum MHD_Result pl_srv_metrics(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x) {
    (void)x;
    pl_engine_stats st;
    pl_engine_get_stats(s->eng, &st);
    return pl_srv_send_text(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8",
                            pl_server_metrics_render(&s->metrics, &st, pl_engine_get_config(s->eng),
                                                     s->model_name));
}

/* The template's context, as transformers builds it: messages (with their tool fields), tools
 * when the request has them, add_generation_prompt and the special tokens' texts ("" when the
 * vocabulary has none). */
int pl_srv_render_chat(pl_server *s, const pl_server_request *r, int add_gen, char **out,
                       pl_server_error *err) {
    *out = NULL;
    json_t *msgs = json_array(), *ctx = json_object();
    int bad = !msgs || !ctx;
    for (int i = 0; i < r->n_messages && !bad; i++) {
        const pl_server_message *m = &r->messages[i];
        json_t *o = json_pack("{s:s, s:o}", "role", m->role, "content",
                              m->content_null ? json_null() : json_string(m->content));
        json_t *x = m->extra ? json_loads(m->extra, 0, NULL) : NULL;
        bad = !o || (m->extra && !x) || (x && json_object_update(o, x)) ||
              json_array_append_new(msgs, o) != 0;
        json_decref(x);
    }
    json_t *tools = r->tools ? json_loads(r->tools, 0, NULL) : NULL,
           *kw = r->template_kwargs ? json_loads(r->template_kwargs, 0, NULL) : NULL;
    bad = bad || (r->template_kwargs && (!kw || json_object_update(ctx, kw))); /* kwargs first */
    json_decref(kw);
    bad = bad || (r->tools && !tools) || json_object_set(ctx, "messages", msgs) ||
          (tools && json_object_set(ctx, "tools", tools)) ||
          json_object_set_new(ctx, "add_generation_prompt", json_boolean(add_gen)) ||
          json_object_set_new(ctx, "bos_token", json_string(s->bos_text ? s->bos_text : "")) ||
          json_object_set_new(ctx, "eos_token", json_string(s->eos_text ? s->eos_text : ""));
    char *text = bad ? NULL : json_dumps(ctx, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(tools);
    json_decref(msgs);
    json_decref(ctx);
    if (!text) return pl_server_nomem(err);
    pl_status st = pl_chat_template_render(s->chat, text, strlen(text), out);
    free(text);
    if (st == PL_ERR_NOMEM) return pl_server_nomem(err);
    if (st != PL_OK)
        return pl_server_fail(err, 400, "messages", "invalid_value", "%s", pl_last_error());
    return 0;
}

/* The served model or a LoRA adapter's name (same tokenizer and template), else a 404. */
static int check_model(pl_server *s, json_t *o, pl_server_error *err) {
    json_t *m = json_object_get(o, "model");
    if (!m || json_is_null(m)) return 0;
    if (!json_is_string(m))
        return pl_server_fail(err, 400, "model", "invalid_type", "'model' must be a string");
    const char *lora;
    return pl_srv_resolve_model(s, json_string_value(m), &lora, "model", err);
}

static int opt_bool(json_t *o, const char *key, int *out, pl_server_error *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v))
        return pl_server_fail(err, 400, key, "invalid_type", "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 0;
}

/* llama-server's token with its piece: {"id", "piece"}, the piece a string when its bytes are
 * valid UTF-8, else the list of its bytes. */
static json_t *piece_json(const pl_server *s, int32_t id) {
    char buf[256];
    size_t n = pl_token_to_piece(s->tok, id, buf, sizeof buf, 1);
    if (n > sizeof buf) n = sizeof buf;
    size_t m;
    char *clean = pl_server_utf8_sanitize(buf, n, &m);
    json_t *piece;
    if (clean && m == n && !memcmp(clean, buf, n)) {
        piece = json_stringn(buf, n);
    } else {
        piece = json_array();
        for (size_t i = 0; i < n; i++) json_array_append_new(piece, json_integer((unsigned char)buf[i]));
    }
    free(clean);
    return json_pack("{s:i, s:o}", "id", id, "piece", piece);
}

/* pl_tokenize for an answer: 0, or -1 with err set (out of memory, or a 400 naming `field`). */
static int tokenize(pl_server *s, const char *text, size_t len, int add_special,
                    int parse_special, const char *field, int32_t **ids, size_t *n,
                    pl_server_error *err) {
    pl_status st = pl_tokenize(s->tok, text, len, add_special, parse_special, ids, n);
    if (st == PL_OK) return 0;
    if (st == PL_ERR_NOMEM) return pl_server_nomem(err);
    return pl_server_fail(err, 400, field, "invalid_value", "%s", pl_last_error());
}

/* llama-server's {"content", "add_special" (false), "parse_special" (true), "with_pieces"
 * (false)} -> {"tokens": [ids]} or, with pieces, {"tokens": [{"id", "piece"}]}. */
static int tokenize_llama(pl_server *s, json_t *o, json_t **out, pl_server_error *err) {
    int add_special = 0, parse_special = 1, pieces = 0;
    json_t *content = json_object_get(o, "content");
    int32_t *ids = NULL;
    size_t n = 0;
    if (opt_bool(o, "add_special", &add_special, err) ||
        opt_bool(o, "parse_special", &parse_special, err) ||
        opt_bool(o, "with_pieces", &pieces, err))
        return -1;
    if (!json_is_string(content))
        return pl_server_fail(err, 400, "content", "invalid_type", "'content' must be a string");
    if (tokenize(s, json_string_value(content), json_string_length(content), add_special,
                 parse_special, "content", &ids, &n, err))
        return -1;
    json_t *tokens = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(tokens, pieces ? piece_json(s, ids[i]) : json_integer(ids[i]));
    free(ids);
    *out = json_pack("{s:o}", "tokens", tokens);
    return 0;
}

/* {"prompt": str} or {"messages": [...]} -> {"count", "max_model_len", "tokens", "token_strs"};
 * llama-server's {"content": str} -> {"tokens"} (tokenize_llama). */
static int tokenize_answer(pl_server *s, struct MHD_Connection *c, const pl_conn_ctx *x,
                           json_t *o, json_t **out, pl_server_error *err) {
    (void)c;
    if (json_object_get(o, "content") && !json_object_get(o, "prompt") &&
        !json_object_get(o, "messages"))
        return tokenize_llama(s, o, out, err);
    char *text = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    int is_chat = json_object_get(o, "messages") != NULL, add_special = !is_chat, add_gen = 1,
        want_strs = 0;
    if (check_model(s, o, err) || opt_bool(o, "add_special_tokens", &add_special, err) ||
        opt_bool(o, "add_generation_prompt", &add_gen, err) ||
        opt_bool(o, "return_token_strs", &want_strs, err))
        return -1;
    if (is_chat) {
        /* Reuse the chat request parser for the messages. */
        pl_server_request r;
        if (pl_server_parse_request(x->body, x->len, 1, s->cfg.max_logprobs, &r, err)) return -1;
        int rc = pl_srv_render_chat(s, &r, add_gen, &text, err);
        pl_server_request_destroy(&r);
        if (rc) {
            free(text);
            return -1;
        }
    } else {
        json_t *p = json_object_get(o, "prompt");
        if (!json_is_string(p))
            return pl_server_fail(err, 400, "prompt", "invalid_type",
                                  "'prompt' (a string) or 'messages' is required");
        if (!(text = strdup(json_string_value(p)))) return pl_server_nomem(err);
    }
    int rc = tokenize(s, text, strlen(text), add_special, 1, "prompt", &ids, &n, err);
    free(text);
    if (rc) return -1;
    json_t *tokens = json_array(), *strs = want_strs ? json_array() : json_null();
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(tokens, json_integer(ids[i]));
        if (want_strs) {
            char *t = pl_server_token_str(s->tok, ids[i]);
            if (!t) { /* the answer would lack it: fail the whole answer */
                json_decref(strs);
                strs = NULL;
                break;
            }
            json_array_append_new(strs, json_string(t));
            free(t);
        }
    }
    free(ids);
    *out = json_pack("{s:I, s:i, s:o, s:o}", "count", (json_int_t)n, "max_model_len",
                     s->max_model_len, "tokens", tokens, "token_strs", strs);
    return 0;
}

enum MHD_Result pl_srv_tokenize(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x) {
    return pl_srv_answer_json(s, c, x, tokenize_answer);
}

/* {"tokens": [ids]} -> {"prompt": text, "content": text} (vLLM's name, llama-server's) */
static int detokenize_answer(pl_server *s, struct MHD_Connection *c, const pl_conn_ctx *x,
                             json_t *o, json_t **out, pl_server_error *err) {
    (void)c;
    (void)x;
    json_t *t = json_object_get(o, "tokens");
    if (check_model(s, o, err)) return -1;
    if (!json_is_array(t))
        return pl_server_fail(err, 400, "tokens", "invalid_type",
                              "'tokens' must be a list of token ids");
    size_t n = json_array_size(t);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) return pl_server_nomem(err);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(t, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) >= s->n_vocab) {
            free(ids);
            return pl_server_fail(err, 400, "tokens", "invalid_value",
                                  "'tokens[%zu]' is not a token id in [0, %d)", i, s->n_vocab);
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    char *text;
    size_t len;
    pl_status st = pl_detokenize(s->tok, ids, n, 0, &text, &len);
    free(ids);
    if (st != PL_OK)
        return st == PL_ERR_NOMEM
                   ? pl_server_nomem(err)
                   : pl_server_fail(err, 400, "tokens", "invalid_value", "%s", pl_last_error());
    char *clean = pl_server_utf8_sanitize(text, len, &len);
    free(text);
    *out = json_pack("{s:s%, s:s%}", "prompt", clean, len, "content", clean, len);
    free(clean);
    return 0;
}

enum MHD_Result pl_srv_detokenize(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x) {
    return pl_srv_answer_json(s, c, x, detokenize_answer);
}

/* The template's text for a chat request and its token count. */
static int render_count(pl_server *s, const pl_server_request *r, int add_gen, char **text,
                        size_t *n, pl_server_error *err) {
    int32_t *ids = NULL;
    if (pl_srv_render_chat(s, r, add_gen, text, err)) return -1;
    int rc = tokenize(s, *text, strlen(*text), 0, 1, "messages", &ids, n, err);
    free(ids);
    if (rc) {
        free(*text);
        *text = NULL;
    }
    return rc;
}

/* POST /v1/chat/render and llama-server's POST /apply-template: {"messages",
 * "add_generation_prompt"?} -> {"prompt": the text the chat template produced, "count": its
 * tokens, "template": where the template came from ("gguf", the --chat-template file,
 * "chatml")}. What a chat request with these messages would feed the model (the web UI shows
 * it). */
static int chat_render_answer(pl_server *s, struct MHD_Connection *c, const pl_conn_ctx *x,
                              json_t *o, json_t **out, pl_server_error *err) {
    (void)c;
    char *text = NULL;
    size_t n = 0;
    int add_gen = 1;
    if (check_model(s, o, err) || opt_bool(o, "add_generation_prompt", &add_gen, err)) return -1;
    if (!json_is_array(json_object_get(o, "messages")))
        return pl_server_fail(err, 400, "messages", "invalid_type",
                              "'messages' (a list) is required");
    pl_server_request r;
    if (pl_server_parse_request(x->body, x->len, 1, s->cfg.max_logprobs, &r, err)) return -1;
    int rc = render_count(s, &r, add_gen, &text, &n, err);
    pl_server_request_destroy(&r);
    if (rc) return -1;
    size_t len;
    char *clean = pl_server_utf8_sanitize(text, strlen(text), &len);
    free(text);
    *out = json_pack("{s:s%, s:I, s:s}", "prompt", clean, len, "count", (json_int_t)n,
                     "template", pl_chat_template_origin(s->chat));
    free(clean);
    return 0;
}

enum MHD_Result pl_srv_chat_render(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x) {
    return pl_srv_answer_json(s, c, x, chat_render_answer);
}

/* POST /v1/messages/count_tokens (Anthropic): a Messages request without max_tokens ->
 * {"input_tokens": the tokens of its rendered prompt, tools included}. */
enum MHD_Result pl_srv_count_tokens(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x) {
    pl_server_error err;
    pl_server_request r;
    char *text = NULL;
    size_t n = 0;
    if (pl_server_parse_api_request(PL_API_ANTHROPIC, x->body ? x->body : "", x->len,
                                    s->cfg.max_logprobs, 1, &r, NULL, &err))
        return pl_srv_send_error_as(c, &err, PL_API_ANTHROPIC);
    const char *lora;
    int rc = pl_srv_resolve_model(s, r.model, &lora, "model", &err) ||
             render_count(s, &r, 1, &text, &n, &err);
    pl_server_request_destroy(&r);
    free(text);
    if (rc) return pl_srv_send_error_as(c, &err, PL_API_ANTHROPIC);
    return pl_srv_send_json(c, MHD_HTTP_OK, json_pack("{s:I}", "input_tokens", (json_int_t)n));
}
