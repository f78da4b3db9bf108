/* server/generate — POST /v1/completions and /v1/chat/completions.
 *
 * A job is one HTTP request: parsed and validated, its prompts rendered (chat template) and
 * tokenized here so the length check can answer 400 with the counts, then one engine request per
 * prompt (a list of prompts gives several; choice k of prompt i has index i * n + k, as vLLM).
 *
 * Waiting: the connection thread polls the first unfinished engine request with a 100 ms timeout
 * and the others without waiting; between waits it checks the client socket for a hang-up. A
 * client that went away has its unfinished requests released (aborted at the next engine step,
 * their blocks freed). Streaming responses are produced by MHD's content-reader callback running
 * the same loop and returning SSE chunks as they come; MHD calls the job's free function when the
 * response is done or the connection died, which releases whatever is unfinished.
 */
#include "server/server_internal.h"
#include "base/buf.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

enum { WAIT_MS = 100 };

typedef struct {
    pl_server *s;
    pl_server_request req;
    pl_server_resp_ctx rx;         /* id, model, created, tokenizer for responses */
    char id[48];
    int n_eng;                     /* engine requests (one per prompt) */
    int n_per;                     /* choices per prompt (n) */
    uint64_t *ids;                 /* [n_eng] engine request ids */
    uint8_t *added;                /* [n_eng] the engine accepted it */
    uint8_t *done;                 /* [n_eng] its finished output was polled */
    int32_t **prompt;              /* [n_eng] tokenized prompts */
    size_t *n_prompt;              /* [n_eng] */
    char **echo;                   /* [n_eng] prompt text for echo, or NULL */
    pl_token_logprob **ptop;       /* [n_eng] prompt logprobs [n_prompt][n_ptop + 1] or NULL */
    int32_t *n_ptop;               /* [n_eng] */
    pl_server_choice *ch;          /* [n_eng * n_per] */
    int64_t prompt_tokens;
    int64_t cached_tokens;         /* prompt tokens the prefix cache held (finished requests) */
    char *error;                   /* the first engine error message */
    int nomem;                     /* out of memory building the answer: it ends with a 503 */
    const char *fail;              /* or it ends with this (static) internal error */
    int error_sent;                /* a stream's error event went out */
    int fd;                        /* client socket, for hang-up checks */
    /* Streaming. */
    pl_strbuf out;                 /* SSE bytes not yet handed to MHD, from `off` */
    size_t off;
    size_t *text_off;              /* [n_eng * n_per] characters streamed (logprob offsets);
                                      a chat with tools: content bytes streamed */
    uint8_t *echoed;               /* [n_eng * n_per] echo text sent */
    int sent_done;
    /* The Responses and Messages APIs (compat.c). */
    pl_server_api api;
    json_t *resp_echo;             /* Responses: request fields its response object repeats */
    pl_server_compat cx;
    /* A chat's thinking and tool calls (parse.c): on when the server has a reasoning parser or
     * the request has tools in a format the template defines. */
    int parsing;
    pl_parse_cfg pcfg;
    json_t *tool_defs;             /* the request's tools (parameter types) */
    pl_parse_sent *sent;           /* [n_eng * n_per] what a stream sent of each choice */
    int64_t *think_tokens;         /* [n_eng * n_per] tokens of the thinking (once finished) */
} gen_job;

/* ---- job lifetime ---- */

static void job_free(gen_job *j) {
    if (!j) return;
    for (int i = 0; i < j->n_eng; i++) {
        if (j->added && j->added[i] && !j->done[i]) {
            pl_engine_release(j->s->eng, j->ids[i]); /* client gone: abort, free its blocks */
            pl_srv_untrack(j->s, j->ids[i]);
            pl_server_metrics_abort(&j->s->metrics, &j->req.params, (int32_t)j->n_prompt[i]);
        }
        if (j->prompt) free(j->prompt[i]);
        if (j->echo) free(j->echo[i]);
        if (j->ptop) free(j->ptop[i]);
    }
    for (int k = 0; j->ch && k < j->n_eng * j->n_per; k++) {
        pl_server_choice_destroy(&j->ch[k]);
        if (j->sent) pl_parse_sent_destroy(&j->sent[k]);
    }
    PL_FREE_ALL(j->sent, j->think_tokens);
    json_decref(j->tool_defs);
    PL_FREE_ALL(j->ids, j->added, j->done, j->prompt, j->n_prompt, j->echo, j->ptop, j->n_ptop,
                j->ch, j->error);
    pl_strbuf_destroy(&j->out);
    free(j->text_off);
    free(j->echoed);
    pl_server_request_destroy(&j->req);
    json_decref(j->resp_echo);
    pthread_mutex_lock(&j->s->mu);
    j->s->active--;
    pthread_mutex_unlock(&j->s->mu);
    free(j);
}

static void make_id(char *out, size_t cap, const char *prefix) {
    unsigned char r[16];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        for (size_t i = 0; i < sizeof r; i++) r[i] = (unsigned char)((ts.tv_nsec >> (i % 4 * 8)) + i);
    }
    size_t n = (size_t)snprintf(out, cap, "%s", prefix);
    for (size_t i = 0; i < sizeof r && n + 2 < cap; i++) n += (size_t)snprintf(out + n, cap - n, "%02x", r[i]);
}

static int client_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* ---- building the job: parse, render, tokenize, check lengths ---- */

static int tokenize_prompts(gen_job *j, pl_server_error *err) {
    pl_server *s = j->s;
    pl_server_request *r = &j->req;
    char *chat_text = NULL;
    if (r->chat) {
        if (pl_srv_render_chat(s, r, r->add_generation_prompt,
                               &chat_text, err))
            return -1;
        j->n_eng = 1;
    } else {
        j->n_eng = r->n_prompts;
    }
    j->n_per = r->params.n;
    size_t ne = (size_t)j->n_eng, nc = ne * (size_t)j->n_per;
    j->ids = calloc(ne, sizeof *j->ids);
    j->added = calloc(ne, 1);
    j->done = calloc(ne, 1);
    j->prompt = calloc(ne, sizeof *j->prompt);
    j->n_prompt = calloc(ne, sizeof *j->n_prompt);
    j->echo = calloc(ne, sizeof *j->echo);
    j->ptop = calloc(ne, sizeof *j->ptop);
    j->n_ptop = calloc(ne, sizeof *j->n_ptop);
    j->ch = calloc(nc, sizeof *j->ch);
    j->text_off = calloc(nc, sizeof *j->text_off);
    j->echoed = calloc(nc, 1);
    j->sent = calloc(nc, sizeof *j->sent);
    j->think_tokens = calloc(nc, sizeof *j->think_tokens);
    if (chat_text)
        j->pcfg.in_reasoning = pl_parse_prompt_opens_thinking(j->pcfg.reasoning, chat_text,
                                                              strlen(chat_text));
    if (!j->sent || !j->think_tokens || !j->ids || !j->added || !j->done || !j->prompt || !j->n_prompt || !j->echo || !j->ptop ||
        !j->n_ptop || !j->ch || !j->text_off || !j->echoed) {
        free(chat_text);
        return pl_server_nomem(err);
    }
    for (size_t k = 0; k < nc; k++) j->ch[k].stop_token = -1;
    for (int i = 0; i < j->n_eng; i++) {
        const char *text = r->chat ? chat_text : r->prompts[i].text;
        if (text) {
            /* vLLM tokenizes with special tokens recognised; chat text carries its own BOS. */
            pl_status st = pl_tokenize(s->tok, text, strlen(text), r->add_special_tokens, 1,
                                       &j->prompt[i], &j->n_prompt[i]);
            if (st != PL_OK) {
                free(chat_text);
                if (st == PL_ERR_NOMEM) return pl_server_nomem(err);
                return pl_server_fail(err, 400, r->chat ? "messages" : "prompt", "invalid_value",
                                      "cannot tokenize the prompt: %s", pl_last_error());
            }
            if (r->echo && !(j->echo[i] = strdup(text))) {
                free(chat_text);
                return pl_server_nomem(err);
            }
        } else {
            const pl_server_prompt *p = &r->prompts[i];
            for (size_t t = 0; t < p->n_ids; t++)
                if (p->ids[t] >= s->n_vocab)
                    return pl_server_fail(err, 400, "prompt", "invalid_value",
                                          "token id %d at position %zu of prompt %d is out of "
                                          "range [0, %d)", p->ids[t], t, i, s->n_vocab);
            j->prompt[i] = malloc((p->n_ids ? p->n_ids : 1) * sizeof(int32_t));
            if (!j->prompt[i]) return pl_server_nomem(err);
            memcpy(j->prompt[i], p->ids, p->n_ids * sizeof(int32_t));
            j->n_prompt[i] = p->n_ids;
            if (r->echo) {
                char *t;
                size_t tl;
                pl_status st = pl_detokenize(s->tok, p->ids, p->n_ids,
                                             r->params.skip_special_tokens, &t, &tl);
                if (st == PL_OK) {
                    j->echo[i] = pl_server_utf8_sanitize(t, tl, NULL);
                    free(t);
                }
                if (st == PL_ERR_NOMEM || (st == PL_OK && !j->echo[i])) return pl_server_nomem(err);
            }
        }
    }
    free(chat_text);
    return 0;
}

/* tool_choice "required" or a named function: the answer is constrained to one call of the
 * tools in the template's format, their parameters' schemas included (after the thinking's
 * closing tag when the prompt opened it). A named function with a template of no known format
 * is only what the template is shown, as before. */
static int force_call(gen_job *j, pl_server_error *err) {
    pl_server_request *r = &j->req;
    pl_tool_format f = j->s->tool_format;
    if (!r->chat || !r->tool_force) return 0;
    if (r->tool_force == 2 && f == PL_TOOLS_NONE) return 0;
    if (!r->tools)
        return pl_server_fail(err, 400, "tool_choice", "invalid_value",
                              "'tool_choice' asks for a call but 'tools' is empty");
    if (r->constraint_field)
        return pl_server_fail(err, 400, "tool_choice", "unsupported_parameter",
                              "'tool_choice' forcing a call cannot be combined with '%s'",
                              r->constraint_field);
    if (pl_server_tool_grammar(f, r->tools, pl_parse_opening(j->pcfg.reasoning, j->pcfg.in_reasoning),
                               &r->tool_grammar, err))
        return -1;
    r->params.constraint = PL_CONSTRAINT_GRAMMAR;
    r->params.constraint_text = r->tool_grammar;
    r->constraint_field = "tool_choice";
    return 0;
}

/* thinking_token_budget: the engine's force_end with the reasoning parser's tags, tokenized with
 * special tokens recognised (a template's <think> is one token in Qwen3's vocabulary). The
 * region is open from the start when the template opened the thinking in the prompt. */
static int thinking_budget(gen_job *j, pl_server_error *err) {
    pl_server_request *r = &j->req;
    const char *name = r->thinking_budget_field, *tag[2];
    if (!name) return 0;
    if (!r->chat || pl_parse_think_tags(j->pcfg.reasoning, &tag[0], &tag[1]))
        return pl_server_fail(err, 400, name, "invalid_value",
                              "'%s' needs a reasoning parser with thinking tags (this server's: "
                              "%s); see --reasoning-parser", name,
                              pl_reasoning_parser_name(j->pcfg.reasoning));
    if (r->params.use_beam_search)
        return pl_server_fail(err, 400, name, "invalid_value",
                              "'%s' cannot be combined with 'use_beam_search'", name);
    int32_t *ids[2] = {NULL, NULL};
    size_t n[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        pl_status st = pl_tokenize(j->s->tok, tag[k], strlen(tag[k]), 0, 1, &ids[k], &n[k]);
        if (st != PL_OK || n[k] == 0 || n[k] > PL_MAX_FORCE_TOKENS) {
            free(ids[0]);
            free(ids[1]);
            if (st == PL_ERR_NOMEM) return pl_server_nomem(err);
            return pl_server_fail(err, 400, name, "invalid_value",
                                  "'%s': the thinking tag '%s' does not tokenize to 1 to %d tokens",
                                  name, tag[k], PL_MAX_FORCE_TOKENS);
        }
    }
    r->force_ids = malloc((n[0] + n[1]) * sizeof *r->force_ids);
    if (r->force_ids) {
        memcpy(r->force_ids, ids[0], n[0] * sizeof *r->force_ids);
        memcpy(r->force_ids + n[0], ids[1], n[1] * sizeof *r->force_ids);
    }
    free(ids[0]);
    free(ids[1]);
    if (!r->force_ids) return pl_server_nomem(err);
    r->params.force_end = (pl_force_end){.open = r->force_ids, .n_open = (int32_t)n[0],
                                         .close = r->force_ids + n[0], .n_close = (int32_t)n[1],
                                         .after = r->thinking_budget,
                                         .open_in_prompt = j->pcfg.in_reasoning};
    return 0;
}

static int check_lengths(gen_job *j, pl_server_error *err) {
    pl_server *s = j->s;
    pl_server_request *r = &j->req;
    for (int i = 0; i < j->n_eng; i++) {
        size_t n = j->n_prompt[i];
        const char *what = r->chat ? "messages" : "prompt";
        if (n == 0)
            return pl_server_fail(err, 400, what, "invalid_value", "the prompt is empty (0 tokens)");
        if (n >= (size_t)s->max_model_len)
            return pl_server_fail(err, 400, what, "context_length_exceeded",
                                  "This model's maximum context length is %d tokens. However, "
                                  "your %s has %zu tokens.", s->max_model_len,
                                  r->chat ? "messages" : "prompt", n);
        if (r->chat && !r->max_tokens_given) {
            /* vLLM: without max_tokens a chat may use the rest of the context. */
            r->params.max_tokens = s->max_model_len - (int32_t)n;
        }
        if (n + (size_t)r->params.max_tokens > (size_t)s->max_model_len)
            return pl_server_fail(err, 400, "max_tokens",
                                  "context_length_exceeded",
                                  "This model's maximum context length is %d tokens. However, "
                                  "you requested %zu tokens (%zu in the %s, %d in the "
                                  "completion). Please reduce the length of the %s or "
                                  "completion.", s->max_model_len,
                                  n + (size_t)r->params.max_tokens, n, what,
                                  r->params.max_tokens, what);
    }
    return 0;
}

static int submit(gen_job *j, pl_server_error *err) {
    for (int i = 0; i < j->n_eng; i++) {
        pl_status st = pl_engine_add_request(j->s->eng, NULL, j->prompt[i], j->n_prompt[i],
                                             &j->req.params, &j->ids[i]);
        if (st == PL_ERR_CAPACITY)
            return pl_server_fail(err, 503, NULL, "queue_full",
                                  "the server is busy (%s); retry later", pl_last_error());
        if (st == PL_ERR_INVALID_ARG) {
            const char *param = pl_server_param_of(pl_last_error());
            static const char *const CONSTRAINT_MSG[] = {"json_schema:", "regex:", "grammar:",
                                                         "choice:", "structured output:"};
            for (size_t k = 0; !param && j->req.constraint_field && k < 5; k++)
                if (!strncmp(pl_last_error(), CONSTRAINT_MSG[k], strlen(CONSTRAINT_MSG[k])))
                    param = j->req.constraint_field;
            if (param && param == j->req.constraint_field)
                return pl_server_fail(err, 400, param, "invalid_value", "'%s': %s", param,
                                      pl_last_error());
            return pl_server_fail(err, 400, param, "invalid_value", "%s", pl_last_error());
        }
        if (st == PL_ERR_NOMEM) return pl_server_nomem(err);
        if (st == PL_ERR_NOT_FOUND) /* its adapter was unloaded since the model was resolved */
            return pl_server_fail(err, 404, "model", "model_not_found", "%s", pl_last_error());
        if (st != PL_OK)
            return pl_server_fail(err, 500, NULL, "internal_error", "%s", pl_last_error());
        if (pl_srv_track(j->s, j->ids[i])) { /* a stop could not abort it: take it back now */
            pl_engine_release(j->s->eng, j->ids[i]);
            return pl_server_nomem(err);
        }
        j->added[i] = 1;
    }
    return 0;
}

static gen_job *job_create(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x, int chat,
                           pl_server_api api, pl_server_error *err) {
    gen_job *j = calloc(1, sizeof *j);
    if (!j) {
        pl_server_nomem(err);
        return NULL;
    }
    j->s = s;
    pthread_mutex_lock(&s->mu);
    s->active++;
    pthread_mutex_unlock(&s->mu);
    j->fd = -1;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci) j->fd = ci->connect_fd;
    j->api = api;
    if (api == PL_API_OPENAI ? pl_server_parse_request(x->body ? x->body : "", x->len, chat,
                                                       s->cfg.max_logprobs, &j->req, err)
                             : pl_server_parse_api_request(api, x->body ? x->body : "", x->len,
                                                           s->cfg.max_logprobs, 0, &j->req,
                                                           &j->resp_echo, err))
        goto fail;
    if (atomic_load(&s->draining)) {
        pl_server_fail(err, 503, NULL, "shutting_down", "the server is shutting down");
        goto fail;
    }
    if (pl_srv_resolve_model(s, j->req.model, &j->req.params.lora, "model", err))
        goto fail; /* a LoRA adapter's name runs the request under it (vLLM) */
    const char *model = j->req.params.lora ? j->req.params.lora : s->model_name;
    make_id(j->id, sizeof j->id, api == PL_API_RESPONSES   ? "resp_"
                                 : api == PL_API_ANTHROPIC ? "msg_"
                                 : chat                    ? "chatcmpl-"
                                                           : "cmpl-");
    j->rx = (pl_server_resp_ctx){.id = j->id, .model = model, .created = (int64_t)time(NULL),
                                 .tok = s->tok, .chat = chat, .logprobs = j->req.logprobs >= 0};
    if (chat) {
        j->pcfg.reasoning = s->reasoning;
        if (j->req.tools && s->tool_format != PL_TOOLS_NONE) {
            j->pcfg.tools = s->tool_format;
            j->pcfg.tool_defs = j->tool_defs = json_loads(j->req.tools, 0, NULL);
        }
        /* gpt-oss and Gemma 4 write their reasoning in a format that is also their tool calls' */
        if (j->pcfg.reasoning == PL_REASON_GPT_OSS) j->pcfg.tools = PL_TOOLS_HARMONY;
        j->parsing = j->pcfg.reasoning != PL_REASON_NONE || j->pcfg.tools != PL_TOOLS_NONE;
        /* The tags ([THINK], [TOOL_CALLS], <|channel|>, ...) are special tokens in their vocabularies:
         * keep them in the text that is parsed. */
        if (j->parsing) j->req.params.skip_special_tokens = 0;
    }
    if (tokenize_prompts(j, err) || force_call(j, err) || thinking_budget(j, err) ||
        check_lengths(j, err) || submit(j, err))
        goto fail;
    j->cx = (pl_server_compat){.api = api, .id = j->id, .model = model,
                               .created = j->rx.created, .echo = j->resp_echo,
                               .input_tokens = (int64_t)j->n_prompt[0]};
    return j;
fail:
    job_free(j);
    return NULL;
}

/* ---- consuming outputs ---- */

static void out_append(gen_job *j, const char *s, size_t n) {
    if (pl_strbuf_append(&j->out, s, n)) j->nomem = 1;
}

/* Frames and queues one event built since the last pl_server_json_reset; a NULL object or a
 * failure inside jansson marks the job instead (the stream then ends with an error event). */
static void out_event(gen_job *j, json_t *o) {
    char *e = o && !pl_server_json_failed() ? pl_server_sse_event(o) : NULL;
    json_decref(o);
    if (!e || pl_server_json_failed()) j->nomem = 1;
    else out_append(j, e, strlen(e));
    free(e);
}

static json_t *chunk_base(gen_job *j) {
    json_t *o = json_pack("{s:s, s:s, s:I, s:s}", "id", j->id, "object",
                          j->req.chat ? "chat.completion.chunk" : "text_completion", "created",
                          (json_int_t)j->rx.created, "model", j->rx.model);
    if (j->req.include_usage) json_object_set_new(o, "usage", json_null());
    return o;
}

/* o[key] = v (stolen), or the job is marked out of memory: jansson's setters drop a NULL value
 * silently, and an answer with a member missing must never go out. */
static void set(gen_job *j, json_t *o, const char *key, json_t *v) {
    if (!o || !v || json_object_set_new(o, key, v)) j->nomem = 1;
}

/* Parse choice k's text so far (final: it is whole). */
static int parse_choice(gen_job *j, int k, int final, pl_parsed *p) {
    const pl_server_choice *c = &j->ch[k];
    if (pl_parse_text(&j->pcfg, c->text ? c->text : "", c->len, final, p)) {
        j->nomem = 1;
        return -1;
    }
    return 0;
}

/* The tokens of finished choice k that belong to its thinking: the shortest start of its
 * tokens whose text closes the thinking (all of them when it never closes). */
static int64_t count_thinking(gen_job *j, int k) {
    const pl_server_choice *c = &j->ch[k];
    pl_parsed p;
    if (parse_choice(j, k, 1, &p)) return 0;
    int done = p.reasoning_done, any = p.reasoning.len > 0 || done;
    pl_parsed_destroy(&p);
    if (!any) return 0;
    if (!done) return c->n;
    int32_t lo = 1, hi = c->n; /* the thinking is closed after hi tokens, not after lo - 1 */
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        char *t = NULL;
        size_t tl = 0;
        if (pl_detokenize(j->s->tok, c->ids, (size_t)mid, j->req.params.skip_special_tokens, &t, &tl) != PL_OK)
            return c->n;
        int closed = !pl_parse_text(&j->pcfg, t, tl, 0, &p) && p.reasoning_done;
        pl_parsed_destroy(&p);
        free(t);
        if (closed) hi = mid;
        else lo = mid + 1;
    }
    return hi;
}

static int64_t thinking_tokens(const gen_job *j) {
    int64_t n = 0;
    for (int k = 0; k < j->n_eng * j->n_per; k++) n += j->think_tokens[k];
    return n;
}

/* Responses / Messages: the thinking goes out as its own item once it is over, the text streams
 * as it is known; the calls and the end go out once the answer is whole (compat_end). */
static void compat_delta(gen_job *j, int k, const pl_completion_delta *d) {
    if (d->finish != PL_FINISH_NONE) return;
    const pl_server_choice *c = &j->ch[k];
    if (!j->parsing) {
        size_t safe = pl_utf8_whole(c->text ? c->text : "", c->len);
        if (safe > j->text_off[k] &&
            pl_server_compat_stream_text(&j->cx, &j->out, c->text + j->text_off[k], safe - j->text_off[k]))
            j->nomem = 1;
        if (safe > j->text_off[k]) j->text_off[k] = safe;
        return;
    }
    pl_parsed p;
    if (!parse_choice(j, k, 0, &p)) {
        int over = p.reasoning_done || p.content.len || p.n_calls;
        if (over && pl_server_compat_stream_reasoning(&j->cx, &j->out, p.reasoning.p, p.reasoning.len))
            j->nomem = 1;
        size_t safe = pl_utf8_whole(p.content.p, p.content.len);
        if (over && safe > j->text_off[k]) {
            if (pl_server_compat_stream_text(&j->cx, &j->out, p.content.p + j->text_off[k], safe - j->text_off[k]))
                j->nomem = 1;
            j->text_off[k] = safe;
        }
    }
    pl_parsed_destroy(&p);
}

/* The whole answer of the Responses / Messages APIs (stream: its last events). */
static void compat_finish(gen_job *j, int stream, json_t **whole) {
    const pl_server_choice *c = &j->ch[0];
    j->cx.input_tokens = j->prompt_tokens;
    j->cx.cached_tokens = j->cached_tokens;
    j->cx.output_tokens = c->n;
    j->cx.reasoning_tokens = j->think_tokens[0];
    pl_parsed p = {0};
    json_t *calls = NULL;
    const char *text = c->text ? c->text : "";
    size_t len = c->len;
    if (j->parsing) {
        if (parse_choice(j, 0, 1, &p)) goto out;
        calls = pl_parsed_calls_json(&p);
        if (p.n_calls && !calls) {
            j->nomem = 1;
            goto out;
        }
        text = p.content.p ? p.content.p : "";
        len = p.content.len;
        j->cx.reasoning = p.reasoning.p;
        j->cx.reasoning_len = p.reasoning.len;
    }
    if (stream) {
        if (pl_server_compat_stream_end(&j->cx, &j->out, text, len, j->text_off[0], calls,
                                        c->finish, c->stop_str))
            j->nomem = 1;
    } else {
        *whole = pl_server_compat_answer(&j->cx, text, len, calls, c->finish, c->stop_str);
    }
out:
    j->cx.reasoning = NULL;
    j->cx.reasoning_len = 0;
    json_decref(calls);
    pl_parsed_destroy(&p);
}

static void compat_end(gen_job *j) { compat_finish(j, 1, NULL); }

static json_t *compat_whole(gen_job *j) {
    json_t *o = NULL;
    compat_finish(j, 0, &o);
    return o;
}

/* A chat delta for choice k from its parse: reasoning_content, content, tool_calls pieces, and
 * the finish reason on the last. */
static void stream_parsed(gen_job *j, int k, const pl_completion_delta *d) {
    int final = d->finish != PL_FINISH_NONE;
    pl_parsed p;
    if (parse_choice(j, k, final, &p)) {
        pl_parsed_destroy(&p);
        return;
    }
    json_t *delta = json_object();
    int any = delta ? pl_parse_diff(&p, &j->sent[k], delta) : -1;
    if (any < 0) j->nomem = 1;
    if (any > 0 || (any == 0 && final)) {
        json_t *fin = !final ? json_null()
                      : p.n_calls ? json_string("tool_calls")
                                  : pl_server_finish_json(d->finish);
        json_t *choice = json_pack("{s:i, s:O, s:n, s:o, s:o}", "index", k, "delta", delta,
                                   "logprobs", "finish_reason", fin, "stop_reason",
                                   final ? pl_server_stop_reason_json(d->finish, d->stop_token, d->stop_str)
                                         : json_null());
        json_t *o = chunk_base(j);
        set(j, o, "choices", choice ? json_pack("[o]", choice) : NULL);
        out_event(j, o);
    }
    json_decref(delta);
    pl_parsed_destroy(&p);
}

/* One streamed chunk for a delta of choice k (engine request i). */
static void stream_delta(gen_job *j, int i, int k, const pl_completion_delta *d) {
    if (j->api != PL_API_OPENAI) {
        compat_delta(j, k, d);
        return;
    }
    if (j->parsing) {
        stream_parsed(j, k, d);
        return;
    }
    int logp = j->rx.logprobs && d->token_logprobs && d->n_tokens > 0;
    if (!d->text_len && d->finish == PL_FINISH_NONE && !logp) return;
    /* Echo: the prompt goes in front of a completion's first chunk. */
    const char *prefix = !j->req.chat && j->echo[i] && !j->echoed[k] ? j->echo[i] : NULL;
    json_t *choice = pl_server_chunk_choice(&j->rx, k, d, prefix, &j->text_off[k]);
    if (prefix) j->echoed[k] = 1;
    json_t *o = chunk_base(j);
    set(j, o, "choices", choice ? json_pack("[o]", choice) : NULL);
    out_event(j, o);
}

static void take_output(gen_job *j, int i, pl_request_output *o, int streaming) {
    if (o->n_prompt_top > 0 && o->prompt_top && !j->ptop[i] && o->n_prompt_tokens > 0) {
        j->ptop[i] = o->prompt_top; /* taken over: the output is freed without it */
        o->prompt_top = NULL;
        j->n_ptop[i] = o->n_prompt_top;
    }
    for (int32_t d = 0; d < o->n_deltas; d++) {
        const pl_completion_delta *dl = &o->deltas[d];
        if (dl->index < 0 || dl->index >= j->n_per) continue;
        int k = i * j->n_per + dl->index;
        if (pl_server_choice_add(&j->ch[k], dl)) j->nomem = 1;
        else if (streaming) stream_delta(j, i, k, dl);
        if (dl->finish != PL_FINISH_NONE && j->parsing && j->pcfg.reasoning != PL_REASON_NONE)
            j->think_tokens[k] = count_thinking(j, k);
    }
    if (o->error && !j->error) { /* taken over, like the prompt data */
        j->error = o->error;
        o->error = NULL;
    }
    if (o->finished) {
        j->done[i] = 1;
        pl_srv_untrack(j->s, j->ids[i]);
        j->prompt_tokens += (int64_t)j->n_prompt[i];
        j->cached_tokens += o->n_cached_tokens;
        pl_finish_reason why = j->error ? PL_FINISH_ERROR : j->ch[i * j->n_per].finish;
        pl_server_metrics_observe(&j->s->metrics, o, &j->req.params, why);
        if (streaming && j->error && !j->error_sent && j->api != PL_API_OPENAI) {
            pl_server_error e;
            pl_server_fail(&e, 500, NULL, "internal_error", "%s", j->error);
            if (pl_server_compat_stream_error(&j->cx, &j->out, &e)) j->nomem = 1;
            else j->error_sent = 1;
        } else if (streaming && j->error && !j->error_sent) {
            pl_server_error e;
            pl_server_fail(&e, 500, NULL, "internal_error", "%s", j->error);
            char *body = pl_server_error_body(&e);
            if (body) {
                out_append(j, "data: ", 6);
                out_append(j, body, strlen(body));
                out_append(j, "\n\n", 2);
                j->error_sent = 1;
            } else {
                j->nomem = 1;
            }
            free(body);
        }
    }
}

/* Out of memory while answering: give up the engine requests still running (their blocks go
 * back at the next step) so the answer can end now, with an error. */
static void drop_unfinished(gen_job *j) {
    for (int i = 0; i < j->n_eng; i++) {
        if (j->done[i] || !j->added[i]) continue;
        pl_engine_release(j->s->eng, j->ids[i]);
        pl_srv_untrack(j->s, j->ids[i]);
        j->done[i] = 1;
    }
}

static int all_done(const gen_job *j) {
    for (int i = 0; i < j->n_eng; i++)
        if (!j->done[i]) return 0;
    return 1;
}

/* Poll every unfinished request once, waiting on the first. Returns -1 if the client is gone. */
static int poll_round(gen_job *j, int streaming) {
    int waited = 0;
    for (int i = 0; i < j->n_eng; i++) {
        if (j->done[i]) continue;
        pl_request_output *o = NULL;
        pl_status st = pl_engine_poll(j->s->eng, j->ids[i], waited ? 0 : WAIT_MS, &o);
        waited = 1;
        if (st == PL_OK) {
            take_output(j, i, o, streaming);
            pl_request_output_destroy(o);
        } else if (st == PL_ERR_NOT_FOUND) { /* cannot happen while we hold it; do not spin */
            j->done[i] = 1;
            pl_srv_untrack(j->s, j->ids[i]);
            j->fail = "the engine no longer knows this request";
        } else if (st == PL_ERR_NOMEM) {
            j->nomem = 1; /* the output stays in the engine; we give the request up */
        }
        if (j->nomem || j->fail) drop_unfinished(j);
    }
    return client_gone(j->fd) ? -1 : 0;
}

static int64_t completion_tokens(const gen_job *j) {
    int64_t n = 0;
    for (int k = 0; k < j->n_eng * j->n_per; k++) n += j->ch[k].n;
    return n;
}

/* usage, with completion_tokens_details.reasoning_tokens when thinking is parsed */
static json_t *usage_json(gen_job *j) {
    json_t *u = pl_server_usage_json(j->prompt_tokens, completion_tokens(j), j->cached_tokens);
    if (u && j->pcfg.reasoning != PL_REASON_NONE)
        set(j, u, "completion_tokens_details",
            json_pack("{s:I}", "reasoning_tokens", (json_int_t)thinking_tokens(j)));
    return u;
}

/* ---- whole (non-streaming) responses ---- */

static json_t *completion_logprobs(gen_job *j, int i, const pl_server_choice *c) {
    if (j->req.logprobs < 0) return json_null();
    size_t off = 0;
    json_t *out = pl_server_completion_logprobs(&j->rx, c->ids, c->lp, c->top, c->n, c->n_top,
                                                0, 0, NULL);
    if (!j->req.echo) return out;
    /* Echo: the prompt's tokens first (the first has no logprob), then the completion's. */
    int32_t np = (int32_t)j->n_prompt[i], w = j->n_ptop[i] + 1;
    float *lp = NULL;
    if (j->ptop[i]) {
        lp = malloc((size_t)(np ? np : 1) * sizeof *lp);
        if (!lp) {
            json_decref(out);
            return NULL;
        }
        for (int32_t t = 0; t < np; t++) lp[t] = j->ptop[i][(size_t)t * (size_t)w + (size_t)(w - 1)].logprob;
    }
    json_t *pre = pl_server_completion_logprobs(&j->rx, j->prompt[i], lp, j->ptop[i], np,
                                                j->n_ptop[i], 1, 0, &off);
    free(lp);
    json_decref(out);
    out = pl_server_completion_logprobs(&j->rx, c->ids, c->lp, c->top, c->n, c->n_top, 0, off,
                                        NULL);
    if (!pre || !out) {
        json_decref(pre);
        json_decref(out);
        return NULL;
    }
    const char *keys[] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
    for (int k = 0; k < 4; k++) json_array_extend(json_object_get(pre, keys[k]), json_object_get(out, keys[k]));
    json_decref(out);
    return pre;
}

/* vLLM's prompt_logprobs: [null, {"id": {"logprob", "decoded_token"}}, ...]. */
static json_t *prompt_logprobs_json(gen_job *j, int i) {
    if (!j->ptop[i] || j->req.params.prompt_logprobs < 0) return NULL;
    json_t *a = json_array();
    int32_t w = j->n_ptop[i] + 1;
    for (size_t t = 0; t < j->n_prompt[i]; t++) {
        if (t == 0) {
            json_array_append_new(a, json_null());
            continue;
        }
        json_t *d = json_object();
        for (int32_t k = w - 1; k >= 0; k--) { /* the prompt token first, then the top */
            const pl_token_logprob *e = &j->ptop[i][t * (size_t)w + (size_t)k];
            char key[16], *ts = pl_server_token_str(j->s->tok, e->id);
            if (!ts) {
                json_decref(a);
                json_decref(d);
                return json_null(); /* not NULL (= not asked): the caller checks for null */
            }
            snprintf(key, sizeof key, "%d", e->id);
            set(j, d, key, json_pack("{s:f, s:s}", "logprob",
                                                  e->logprob > -9999.0f ? e->logprob : -9999.0,
                                                  "decoded_token", ts));
            free(ts);
        }
        json_array_append_new(a, d);
    }
    return a;
}

static json_t *whole_response(gen_job *j) {
    json_t *choices = json_array();
    for (int i = 0; i < j->n_eng; i++) {
        for (int k = 0; k < j->n_per; k++) {
            int idx = i * j->n_per + k;
            pl_server_choice *c = &j->ch[idx];
            json_t *choice;
            if (j->req.chat) {
                json_t *lp = j->req.logprobs >= 0
                                 ? pl_server_chat_logprobs(&j->rx, c->ids, c->lp, c->top, c->n, c->n_top)
                                 : json_null();
                json_t *calls = NULL, *content, *reasoning = NULL;
                if (j->parsing) {
                    pl_parsed p;
                    if (!parse_choice(j, idx, 1, &p)) {
                        calls = pl_parsed_calls_json(&p);
                        if (p.n_calls && !calls) j->nomem = 1;
                        content = calls && !p.content.len ? json_null()
                                                          : pl_server_text_json(p.content.p ? p.content.p : "", p.content.len);
                        if (j->pcfg.reasoning != PL_REASON_NONE)
                            reasoning = p.reasoning.len ? pl_server_text_json(p.reasoning.p, p.reasoning.len)
                                                        : json_null();
                    } else {
                        content = NULL;
                    }
                    pl_parsed_destroy(&p);
                } else {
                    content = pl_server_text_json(c->text, c->len);
                }
                choice = json_pack("{s:i, s:{s:s, s:o}, s:o, s:o, s:o}", "index", idx, "message",
                                   "role", "assistant", "content", content,
                                   "logprobs", lp, "finish_reason",
                                   calls ? json_string("tool_calls") : pl_server_finish_json(c->finish),
                                   "stop_reason",
                                   pl_server_stop_reason_json(c->finish, c->stop_token, c->stop_str));
                json_t *msg = json_object_get(choice, "message");
                if (reasoning) set(j, msg, "reasoning_content", reasoning);
                if (calls) set(j, msg, "tool_calls", calls);
            } else {
                size_t el = j->echo[i] ? strlen(j->echo[i]) : 0;
                char *t = malloc(el + c->len + 1);
                if (!t) {
                    json_decref(choices);
                    return NULL;
                }
                if (el) memcpy(t, j->echo[i], el);
                memcpy(t + el, c->text ? c->text : "", c->len);
                t[el + c->len] = 0;
                choice = json_pack("{s:i, s:o, s:o, s:o, s:o}", "index", idx, "text",
                                   pl_server_text_json(t, el + c->len), "logprobs",
                                   completion_logprobs(j, i, c), "finish_reason",
                                   pl_server_finish_json(c->finish), "stop_reason",
                                   pl_server_stop_reason_json(c->finish, c->stop_token, c->stop_str));
                free(t);
                json_t *pl = prompt_logprobs_json(j, i);
                if (pl && json_is_null(pl)) {
                    json_decref(choice);
                    json_decref(choices);
                    return NULL;
                }
                if (pl) set(j, choice, "prompt_logprobs", pl);
            }
            if (!choice || json_array_append_new(choices, choice)) j->nomem = 1;
        }
    }
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:o, s:o}", "id", j->id, "object",
                          j->req.chat ? "chat.completion" : "text_completion", "created",
                          (json_int_t)j->rx.created, "model", j->rx.model, "choices", choices,
                          "usage", usage_json(j));
    /* vLLM puts a chat's prompt log-probabilities beside the choices (one prompt per chat). */
    json_t *pl = j->req.chat ? prompt_logprobs_json(j, 0) : NULL;
    if (pl && json_is_null(pl)) j->nomem = 1; /* out of memory building it */
    else if (pl) set(j, o, "prompt_logprobs", pl);
    return o;
}

/* ---- streaming ---- */

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    gen_job *j = cls;
    pl_server_json_reset();
    for (;;) {
        if (j->nomem || (j->fail && !j->error_sent)) {
            /* Out of memory (or lost): what is queued may have holes, so it is dropped and the
             * stream ends with an error event written straight into MHD's buffer. */
            drop_unfinished(j);
            if (j->sent_done) return MHD_CONTENT_READER_END_OF_STREAM;
            pl_server_error e;
            if (j->nomem) pl_server_nomem(&e);
            else pl_server_fail(&e, 500, NULL, "internal_error", "%s", j->fail);
            int n = j->api == PL_API_ANTHROPIC
                        ? snprintf(buf, max, "event: error\ndata: {\"type\":\"error\",\"error\":"
                                   "{\"type\":\"%s\",\"message\":\"%s\"}}\n\n",
                                   j->nomem ? "overloaded_error" : "api_error", e.message)
                    : j->api == PL_API_RESPONSES
                        ? snprintf(buf, max, "event: error\ndata: {\"type\":\"error\",\"code\":"
                                   "\"%s\",\"message\":\"%s\",\"param\":null}\n\n", e.code,
                                   e.message)
                        : snprintf(buf, max, "data: {\"error\":{\"message\":\"%s\",\"type\":"
                                   "\"%s\",\"param\":null,\"code\":\"%s\"}}\n\n%s", e.message,
                                   e.type, e.code, PL_SERVER_SSE_DONE);
            j->sent_done = j->error_sent = 1;
            return n > 0 && (size_t)n < max ? (ssize_t)n : MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (j->off < j->out.len) {
            size_t n = j->out.len - j->off < max ? j->out.len - j->off : max;
            memcpy(buf, j->out.p + j->off, n);
            j->off += n;
            return (ssize_t)n;
        }
        j->off = 0;
        pl_strbuf_clear(&j->out);
        if (j->sent_done) return MHD_CONTENT_READER_END_OF_STREAM;
        if (all_done(j) && j->api != PL_API_OPENAI) {
            if (!j->error_sent) compat_end(j); /* an error event ended the stream already */
            j->sent_done = 1;
            continue;
        }
        if (all_done(j)) {
            if (j->req.include_usage) {
                json_t *o = chunk_base(j);
                set(j, o, "choices", json_array());
                set(j, o, "usage", usage_json(j));
                out_event(j, o);
            }
            out_append(j, PL_SERVER_SSE_DONE, strlen(PL_SERVER_SSE_DONE));
            j->sent_done = 1;
            continue;
        }
        if (poll_round(j, 1) < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static void stream_free(void *cls) { job_free(cls); }

static enum MHD_Result start_stream(struct MHD_Connection *c, gen_job *j) {
    if (j->api != PL_API_OPENAI) {
        if (pl_server_compat_stream_start(&j->cx, &j->out)) j->nomem = 1;
    } else if (j->req.chat) /* the assistant role first, as OpenAI does */
        for (int k = 0; k < j->n_per; k++) {
            json_t *o = chunk_base(j);
            set(j, o, "choices",
                                json_pack("[{s:i, s:{s:s, s:s}, s:n, s:n}]", "index", k, "delta",
                                          "role", "assistant", "content", "", "logprobs",
                                          "finish_reason"));
            out_event(j, o);
        }
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read,
                                                               j, stream_free);
    if (!r) {
        job_free(j);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream; charset=utf-8");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r); /* frees the job via stream_free once MHD is done with it */
    return ok;
}

static enum MHD_Result generate(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x, int chat,
                                pl_server_api api) {
    pl_server_error err;
    gen_job *j = job_create(s, c, x, chat, api, &err);
    if (!j) {
        pl_server_api_param(api, &err);
        return pl_srv_send_error_as(c, &err, api);
    }
    if (j->req.stream) return start_stream(c, j);
    while (!all_done(j)) {
        if (poll_round(j, 0) < 0) {
            job_free(j); /* releases the unfinished requests */
            return MHD_NO;
        }
    }
    enum MHD_Result ok;
    if (j->nomem) {
        pl_server_nomem(&err);
        ok = pl_srv_send_error_as(c, &err, api);
    } else if (j->error || j->fail) {
        pl_server_fail(&err, 500, NULL, "internal_error", "%s", j->error ? j->error : j->fail);
        ok = pl_srv_send_error_as(c, &err, api);
    } else {
        json_t *body = api == PL_API_OPENAI ? whole_response(j) : compat_whole(j);
        if (j->nomem) { /* a member could not be made: never send the rest as if whole */
            json_decref(body);
            body = NULL;
        }
        ok = pl_srv_send_json(c, MHD_HTTP_OK, body);
    }
    job_free(j);
    return ok;
}

enum MHD_Result pl_srv_completions(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x) {
    return generate(s, c, x, 0, PL_API_OPENAI);
}

enum MHD_Result pl_srv_chat(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x) {
    return generate(s, c, x, 1, PL_API_OPENAI);
}

enum MHD_Result pl_srv_responses(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x) {
    return generate(s, c, x, 1, PL_API_RESPONSES);
}

enum MHD_Result pl_srv_messages(pl_server *s, struct MHD_Connection *c, pl_conn_ctx *x) {
    return generate(s, c, x, 1, PL_API_ANTHROPIC);
}
