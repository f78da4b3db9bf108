/* server/compat — OpenAI's Responses API (POST /v1/responses) and Anthropic's Messages API
 * (POST /v1/messages, /v1/messages/count_tokens) on top of the chat route.
 *
 * Requests: each body is translated into the /v1/chat/completions body it means (input items or
 * content blocks to messages with their tool fields, instructions / system to a system message,
 * flat function tools to chat's, text.format to response_format, stop_sequences to stop, ...)
 * and then parsed by pl_server_parse_request, so the chat template, tool calling, structured
 * output and every sampling check are the chat route's own. Whatever the translation cannot carry
 * is a 400 naming the field rather than something silently dropped: item and block types other
 * than text and tool calls (images, files, hosted tools), `previous_response_id`, `store: true`,
 * `background`. Responses' "required" and Anthropic's "any" go to the chat route's "required",
 * which constrains the answer to a call. Fields that change nothing here (metadata, truncation, service_tier, reasoning,
 * thinking, cache_control) are accepted and ignored; the model's thinking, split off by the
 * server's reasoning parser (parse.c), comes back as a `reasoning` output item / a `thinking`
 * content block before the answer.
 *
 * Answers: the generated text and the tool calls tools.c parses out of it become a response
 * object with message and function_call output items, or an Anthropic message with text and
 * tool_use blocks; streams send the APIs' typed events (named SSE events), text as it is
 * generated and the calls once the text is whole.
 */
#include "server/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- requests ---- */

/* A 400 naming `param` (a static string: the top-level field) in the code's terms. */
#define BAD(err, param, code, ...) pl_server_fail(err, 400, param, code, __VA_ARGS__)

static int present(const json_t *v) { return v && !json_is_null(v); }

/* o[key] = v (stolen); -1 with *err when out of memory. */
static int put(json_t *o, const char *key, json_t *v, pl_server_error *err) {
    return !v || json_object_set_new(o, key, v) ? pl_server_nomem(err) : 0;
}

/* Copy the fields that mean the same in the chat request. */
static int copy_fields(const json_t *in, json_t *out, const char *const *keys, size_t n,
                       pl_server_error *err) {
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_object_get(in, keys[i]);
        if (present(v) && json_object_set(out, keys[i], v)) return pl_server_nomem(err);
    }
    return 0;
}

/* The text of a string or of a list of text parts whose type is one of `types` (NULL-ended);
 * `path` names the field in the error. *out is a new json string. */
static int join_text(const json_t *c, const char *param, const char *path,
                     const char *const *types, json_t **out, pl_server_error *err) {
    *out = NULL;
    if (json_is_string(c)) {
        *out = json_incref((json_t *)c);
        return 0;
    }
    if (!json_is_array(c))
        return BAD(err, param, "invalid_type", "'%s' must be a string or a list of text parts",
                   path);
    pl_strbuf b = {0};
    size_t k;
    json_t *part;
    json_array_foreach(c, k, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        json_t *text = json_object_get(part, "text");
        int ok = 0;
        for (size_t t = 0; type && types[t] && !ok; t++) ok = !strcmp(type, types[t]);
        if (!json_is_object(part) || !type) {
            pl_strbuf_destroy(&b);
            return BAD(err, param, "invalid_type", "'%s[%zu]' must be an object with a 'type'",
                       path, k);
        }
        if (!ok) {
            pl_strbuf_destroy(&b);
            return BAD(err, param, "unsupported_parameter",
                       "'%s[%zu].type' '%.64s' is not supported (only text: %s)", path, k, type,
                       types[0]);
        }
        if (!json_is_string(text)) {
            pl_strbuf_destroy(&b);
            return BAD(err, param, "invalid_type", "'%s[%zu].text' must be a string", path, k);
        }
        pl_strbuf_append(&b, json_string_value(text), json_string_length(text));
    }
    if (b.failed) {
        pl_strbuf_destroy(&b);
        return pl_server_nomem(err);
    }
    *out = json_stringn(b.p ? b.p : "", b.len);
    pl_strbuf_destroy(&b);
    return *out ? 0 : pl_server_nomem(err);
}

static json_t *chat_message(const char *role, json_t *content) {
    return json_pack("{s:s, s:o}", "role", role, "content", content ? content : json_null());
}

/* A tool call of an assistant message in chat's shape; arguments an object (dumped) or a string. */
static json_t *chat_call(const char *id, const char *name, const json_t *args) {
    char *a = json_is_string(args) ? strdup(json_string_value(args))
                                   : json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY);
    json_t *c = a ? json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function",
                              "function", "name", name, "arguments", a)
                  : NULL;
    free(a);
    return c;
}

/* Append a call to the last message when it is the assistant's, else to a new assistant message
 * with no content. */
static int add_call(json_t *msgs, json_t *call, pl_server_error *err) {
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    const char *role = json_string_value(json_object_get(last, "role"));
    if (!role || strcmp(role, "assistant")) {
        last = chat_message("assistant", NULL);
        if (!last || json_array_append_new(msgs, last)) {
            json_decref(call);
            return pl_server_nomem(err);
        }
    }
    json_t *calls = json_object_get(last, "tool_calls");
    if (!calls) {
        calls = json_array();
        if (put(last, "tool_calls", calls, err)) {
            json_decref(call);
            return -1;
        }
    }
    return !call || json_array_append_new(calls, call) ? pl_server_nomem(err) : 0;
}

static int append(json_t *msgs, json_t *m, pl_server_error *err) {
    return !m || json_array_append_new(msgs, m) ? pl_server_nomem(err) : 0;
}

static int need_string(const json_t *o, const char *key, const char *param, const char *path,
                       size_t i, pl_server_error *err) {
    if (json_is_string(json_object_get(o, key))) return 0;
    return BAD(err, param, json_object_get(o, key) ? "invalid_type" : "missing_required_parameter",
               "'%s[%zu].%s' must be a string", path, i, key);
}

/* ---- /v1/responses ---- */

static const char *const RESP_TEXT_PARTS[] = {"input_text", "output_text", "text", NULL};

static int responses_item(const json_t *item, size_t i, json_t *msgs, pl_server_error *err) {
    if (!json_is_object(item))
        return BAD(err, "input", "invalid_type", "'input[%zu]' must be an object", i);
    json_t *t = json_object_get(item, "type");
    if (present(t) && !json_is_string(t))
        return BAD(err, "input", "invalid_type", "'input[%zu].type' must be a string", i);
    const char *type = present(t) ? json_string_value(t) : "message";
    if (!strcmp(type, "message")) {
        const char *role = json_string_value(json_object_get(item, "role"));
        if (!role || (strcmp(role, "user") && strcmp(role, "assistant") &&
                      strcmp(role, "system") && strcmp(role, "developer")))
            return BAD(err, "input", "invalid_value",
                       "'input[%zu].role' must be one of user, assistant, system, developer", i);
        json_t *content;
        char path[48];
        snprintf(path, sizeof path, "input[%zu].content", i);
        if (join_text(json_object_get(item, "content"), "input", path, RESP_TEXT_PARTS, &content,
                      err))
            return -1;
        return append(msgs, chat_message(strcmp(role, "developer") ? role : "system", content),
                      err);
    }
    if (!strcmp(type, "function_call")) {
        json_t *args = json_object_get(item, "arguments");
        if (need_string(item, "call_id", "input", "input", i, err) ||
            need_string(item, "name", "input", "input", i, err))
            return -1;
        if (!json_is_string(args) && !json_is_object(args))
            return BAD(err, "input", "invalid_type",
                       "'input[%zu].arguments' must be a string (JSON text)", i);
        return add_call(msgs, chat_call(json_string_value(json_object_get(item, "call_id")),
                                        json_string_value(json_object_get(item, "name")), args),
                        err);
    }
    if (!strcmp(type, "function_call_output")) {
        json_t *out;
        char path[48];
        snprintf(path, sizeof path, "input[%zu].output", i);
        if (need_string(item, "call_id", "input", "input", i, err) ||
            join_text(json_object_get(item, "output"), "input", path, RESP_TEXT_PARTS, &out, err))
            return -1;
        json_t *m = chat_message("tool", out);
        if (m && json_object_set(m, "tool_call_id", json_object_get(item, "call_id"))) {
            json_decref(m);
            m = NULL;
        }
        return append(msgs, m, err);
    }
    if (!strcmp(type, "reasoning")) return 0; /* a thought of an earlier turn: not re-read */
    return BAD(err, "input", "unsupported_parameter",
               "'input[%zu].type' '%.64s' is not supported (message, function_call, "
               "function_call_output, reasoning)", i, type);
}

/* `tools` as chat's list: each element's chat tool made by `one` (NULL with *err filled). */
static int tools_list(const json_t *in, json_t *out,
                      json_t *(*one)(const json_t *t, size_t i, pl_server_error *err),
                      pl_server_error *err) {
    json_t *tools = json_object_get(in, "tools");
    if (!present(tools)) return 0;
    if (!json_is_array(tools)) return BAD(err, "tools", "invalid_type", "'tools' must be a list");
    json_t *list = json_array();
    if (put(out, "tools", list, err)) return -1;
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        if (!json_is_object(t))
            return BAD(err, "tools", "invalid_type", "'tools[%zu]' must be an object", i);
        if (need_string(t, "name", "tools", "tools", i, err)) return -1;
        json_t *fn = one(t, i, err);
        if (!fn) return -1;
        if (append(list, json_pack("{s:s, s:o}", "type", "function", "function", fn), err))
            return -1;
    }
    return 0;
}

/* A chat function {"name", "description"?, "parameters"?}; NULL when out of memory. */
static json_t *chat_function(const json_t *t, json_t *params, pl_server_error *err) {
    json_t *fn = json_pack("{s:O}", "name", json_object_get(t, "name")),
           *d = json_object_get(t, "description");
    if (fn && ((present(d) && json_object_set(fn, "description", d)) ||
               (present(params) && json_object_set(fn, "parameters", params)))) {
        json_decref(fn);
        fn = NULL;
    }
    if (!fn) pl_server_nomem(err);
    return fn;
}

/* {"type": "function", "name", "description", "parameters"} (flat). */
static json_t *responses_tool(const json_t *t, size_t i, pl_server_error *err) {
    const char *type = json_string_value(json_object_get(t, "type"));
    if (!type || strcmp(type, "function")) {
        BAD(err, "tools", "unsupported_parameter",
            "'tools[%zu].type' '%.64s' is not supported (only function tools)", i,
            type ? type : "(none)");
        return NULL;
    }
    return chat_function(t, json_object_get(t, "parameters"), err);
}

static int responses_tools(const json_t *in, json_t *out, pl_server_error *err) {
    json_t *choice = json_object_get(in, "tool_choice");
    if (tools_list(in, out, responses_tool, err)) return -1;
    if (!present(choice) || json_is_string(choice))
        return present(choice) && json_object_set(out, "tool_choice", choice) ? pl_server_nomem(err) : 0;
    const char *type = json_string_value(json_object_get(choice, "type"));
    if (!json_is_object(choice) || !type || strcmp(type, "function") ||
        !json_is_string(json_object_get(choice, "name")))
        return BAD(err, "tool_choice", "invalid_value",
                   "'tool_choice' must be \"none\", \"auto\" or {\"type\": \"function\", \"name\": ...}");
    return put(out, "tool_choice",
               json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name",
                         json_object_get(choice, "name")), err);
}

/* text.format: text, json_object or json_schema ({"name", "schema", "strict"}, flat). */
static int responses_text(const json_t *in, json_t *out, pl_server_error *err) {
    json_t *text = json_object_get(in, "text");
    if (!present(text)) return 0;
    json_t *f = json_object_get(text, "format");
    if (!json_is_object(text) || (present(f) && !json_is_object(f)))
        return BAD(err, "text", "invalid_type", "'text' must be an object and 'text.format' an object");
    if (!present(f)) return 0;
    const char *type = json_string_value(json_object_get(f, "type"));
    if (!type) return BAD(err, "text", "invalid_type", "'text.format.type' must be a string");
    if (!strcmp(type, "text")) return 0;
    if (!strcmp(type, "json_object"))
        return put(out, "response_format", json_pack("{s:s}", "type", "json_object"), err);
    if (strcmp(type, "json_schema"))
        return BAD(err, "text", "unsupported_parameter",
                   "'text.format.type' '%.64s' is not supported (text, json_object, json_schema)", type);
    json_t *schema = json_object_get(f, "schema");
    if (!json_is_object(schema))
        return BAD(err, "text", present(schema) ? "invalid_type" : "missing_required_parameter",
                   "'text.format.schema' must be an object (a JSON schema)");
    return put(out, "response_format",
               json_pack("{s:s, s:{s:O}}", "type", "json_schema", "json_schema", "schema", schema),
               err);
}

/* Fields that would change what the server keeps or does beyond one answer: refused. */
static int responses_refused(const json_t *in, pl_server_error *err) {
    static const char *const KEYS[] = {"previous_response_id", "conversation", "prompt"};
    for (size_t i = 0; i < sizeof KEYS / sizeof KEYS[0]; i++)
        if (present(json_object_get(in, KEYS[i])))
            return BAD(err, KEYS[i], "unsupported_parameter",
                       "'%s' is not supported: this server keeps no responses (store is off)", KEYS[i]);
    if (json_is_true(json_object_get(in, "store")))
        return BAD(err, "store", "unsupported_parameter",
                   "'store': true is not supported: this server keeps no responses");
    if (json_is_true(json_object_get(in, "background")))
        return BAD(err, "background", "unsupported_parameter", "'background': true is not supported");
    json_t *tl = json_object_get(in, "top_logprobs");
    if (present(tl) && !(json_is_integer(tl) && json_integer_value(tl) == 0))
        return BAD(err, "top_logprobs", "unsupported_parameter", "'top_logprobs' is not supported");
    static const char *const BOOLS[] = {"store", "background", "stream", "parallel_tool_calls"};
    for (size_t i = 0; i < sizeof BOOLS / sizeof BOOLS[0]; i++) {
        json_t *v = json_object_get(in, BOOLS[i]);
        if (present(v) && !json_is_boolean(v))
            return BAD(err, BOOLS[i], "invalid_type", "'%s' must be a boolean", BOOLS[i]);
    }
    return 0;
}

/* A positive integer field renamed for the chat request. */
static int max_tokens_field(const json_t *in, const char *key, int required, json_t *out,
                            pl_server_error *err) {
    json_t *v = json_object_get(in, key);
    if (!present(v)) {
        if (required)
            return BAD(err, key, "missing_required_parameter", "'%s' is required", key);
        return 0;
    }
    if (!json_is_integer(v)) return BAD(err, key, "invalid_type", "'%s' must be an integer", key);
    if (json_integer_value(v) < 1)
        return BAD(err, key, "invalid_value", "'%s' must be at least 1, got %lld", key,
                   (long long)json_integer_value(v));
    return json_object_set(out, "max_tokens", v) ? pl_server_nomem(err) : 0;
}

/* Sampling and vLLM's extra fields (structured output among them), the same in all three APIs. */
static const char *const SAME[] = {
    "model", "temperature", "top_p", "top_k", "min_p", "seed", "repetition_penalty",
    "presence_penalty", "frequency_penalty", "stream", "user", "parallel_tool_calls",
    "structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
};

static int responses_to_chat(const json_t *in, json_t *out, json_t **echo, pl_server_error *err) {
    if (responses_refused(in, err) || copy_fields(in, out, SAME, sizeof SAME / sizeof SAME[0], err) ||
        max_tokens_field(in, "max_output_tokens", 0, out, err))
        return -1;
    json_t *msgs = json_array(), *instr = json_object_get(in, "instructions"),
           *input = json_object_get(in, "input");
    if (put(out, "messages", msgs, err)) return -1;
    if (present(instr)) {
        if (!json_is_string(instr))
            return BAD(err, "instructions", "invalid_type", "'instructions' must be a string");
        if (append(msgs, chat_message("system", json_incref(instr)), err)) return -1;
    }
    if (!present(input)) return BAD(err, "input", "missing_required_parameter", "'input' is required");
    if (json_is_string(input)) {
        if (append(msgs, chat_message("user", json_incref(input)), err)) return -1;
    } else if (json_is_array(input)) {
        size_t i;
        json_t *item;
        json_array_foreach(input, i, item) if (responses_item(item, i, msgs, err)) return -1;
    } else {
        return BAD(err, "input", "invalid_type", "'input' must be a string or a list of input items");
    }
    if (!json_array_size(msgs))
        return BAD(err, "input", "invalid_value", "'input' must hold at least one message");
    if (responses_tools(in, out, err) || responses_text(in, out, err)) return -1;
    if (!echo) return 0;
    /* What the response object repeats, as OpenAI's does. */
    static const char *const ECHO[] = {"instructions", "max_output_tokens", "temperature", "top_p",
                                       "tools", "tool_choice", "parallel_tool_calls", "text",
                                       "metadata", "reasoning", "user", "truncation"};
    *echo = json_pack("{s:n, s:n, s:n, s:n, s:[], s:s, s:b, s:{s:{s:s}}, s:{}, s:n, s:n, s:s}",
                      "instructions", "max_output_tokens", "temperature", "top_p", "tools",
                      "tool_choice", "auto", "parallel_tool_calls", 1, "text", "format", "type",
                      "text", "metadata", "reasoning", "user", "truncation", "disabled");
    if (!*echo) return pl_server_nomem(err);
    for (size_t i = 0; i < sizeof ECHO / sizeof ECHO[0]; i++) {
        json_t *v = json_object_get(in, ECHO[i]);
        if (present(v) && json_object_set(*echo, ECHO[i], v)) return pl_server_nomem(err);
    }
    return 0;
}

/* ---- /v1/messages ---- */

static const char *const ANT_TEXT[] = {"text", NULL};

/* A content block list (or string) of one message into chat messages. */
static int anthropic_message(const json_t *m, size_t i, json_t *msgs, pl_server_error *err) {
    const char *role = json_string_value(json_object_get(m, "role"));
    if (!json_is_object(m))
        return BAD(err, "messages", "invalid_type", "'messages[%zu]' must be an object", i);
    if (!role || (strcmp(role, "user") && strcmp(role, "assistant")))
        return BAD(err, "messages", "invalid_value", "'messages[%zu].role' must be user or assistant", i);
    json_t *c = json_object_get(m, "content");
    if (json_is_string(c)) return append(msgs, chat_message(role, json_incref(c)), err);
    if (!json_is_array(c))
        return BAD(err, "messages", present(c) ? "invalid_type" : "missing_required_parameter",
                   "'messages[%zu].content' must be a string or a list of content blocks", i);
    int assistant = !strcmp(role, "assistant");
    pl_strbuf text = {0};
    json_t *calls = json_array();
    int rc = calls ? 0 : pl_server_nomem(err), has_text = 0;
    size_t k;
    json_t *b;
    json_array_foreach(c, k, b) {
        if (rc) break;
        const char *type = json_string_value(json_object_get(b, "type"));
        if (!json_is_object(b) || !type) {
            rc = BAD(err, "messages", "invalid_type",
                     "'messages[%zu].content[%zu]' must be an object with a 'type'", i, k);
        } else if (!strcmp(type, "text")) {
            json_t *t = json_object_get(b, "text");
            if (!json_is_string(t))
                rc = BAD(err, "messages", "invalid_type",
                         "'messages[%zu].content[%zu].text' must be a string", i, k);
            else pl_strbuf_append(&text, json_string_value(t), json_string_length(t));
            has_text = 1;
        } else if (!strcmp(type, "tool_use") && assistant) {
            json_t *in = json_object_get(b, "input");
            char path[40];
            snprintf(path, sizeof path, "messages[%zu].content", i);
            if (need_string(b, "id", "messages", path, k, err) ||
                need_string(b, "name", "messages", path, k, err))
                rc = -1;
            else if (!json_is_object(in))
                rc = BAD(err, "messages", "invalid_type",
                         "'messages[%zu].content[%zu].input' must be an object", i, k);
            else {
                json_t *call = chat_call(json_string_value(json_object_get(b, "id")),
                                         json_string_value(json_object_get(b, "name")), in);
                if (!call || json_array_append_new(calls, call)) rc = pl_server_nomem(err);
            }
        } else if (!strcmp(type, "tool_result") && !assistant) {
            /* Tool results come first in a user turn: each becomes a tool message. */
            char path[96];
            snprintf(path, sizeof path, "messages[%zu].content[%zu].content", i, k);
            json_t *rc_content = json_object_get(b, "content"), *out = NULL;
            if (!json_is_string(json_object_get(b, "tool_use_id")))
                rc = BAD(err, "messages", "invalid_type",
                         "'messages[%zu].content[%zu].tool_use_id' must be a string", i, k);
            else if (!present(rc_content))
                out = json_string("");
            else
                rc = join_text(rc_content, "messages", path, ANT_TEXT, &out, err);
            if (!rc) {
                json_t *tm = out ? chat_message("tool", out) : NULL;
                if (tm && json_object_set(tm, "tool_call_id", json_object_get(b, "tool_use_id"))) {
                    json_decref(tm);
                    tm = NULL;
                }
                rc = append(msgs, tm, err);
            }
        } else if (strcmp(type, "thinking") && strcmp(type, "redacted_thinking")) {
            rc = BAD(err, "messages", "unsupported_parameter",
                     "'messages[%zu].content[%zu].type' '%.64s' is not supported in a%s %s "
                     "message (text%s)", i, k, type, assistant ? "n" : "", role,
                     assistant ? ", tool_use, thinking" : ", tool_result");
        }
    }
    if (!rc && text.failed) rc = pl_server_nomem(err);
    if (!rc && (has_text || json_array_size(calls) || !json_array_size(c))) {
        json_t *msg = chat_message(role, has_text || !json_array_size(calls)
                                             ? json_stringn(text.p ? text.p : "", text.len) : NULL);
        if (msg && json_array_size(calls) && json_object_set(msg, "tool_calls", calls)) {
            json_decref(msg);
            msg = NULL;
        }
        rc = append(msgs, msg, err);
    }
    json_decref(calls);
    pl_strbuf_destroy(&text);
    return rc;
}

/* {"name", "description", "input_schema"}, type absent or "custom". */
static json_t *anthropic_tool(const json_t *t, size_t i, pl_server_error *err) {
    json_t *type = json_object_get(t, "type"), *schema = json_object_get(t, "input_schema");
    if (present(type) && (!json_is_string(type) || strcmp(json_string_value(type), "custom"))) {
        BAD(err, "tools", "unsupported_parameter",
            "'tools[%zu].type' is not supported (only custom tools with an input_schema)", i);
        return NULL;
    }
    if (!json_is_object(schema)) {
        BAD(err, "tools", present(schema) ? "invalid_type" : "missing_required_parameter",
            "'tools[%zu].input_schema' must be an object (a JSON schema)", i);
        return NULL;
    }
    return chat_function(t, schema, err);
}

static int anthropic_tools(const json_t *in, json_t *out, pl_server_error *err) {
    json_t *choice = json_object_get(in, "tool_choice");
    if (tools_list(in, out, anthropic_tool, err)) return -1;
    if (!present(choice)) return 0;
    const char *type = json_string_value(json_object_get(choice, "type"));
    if (!json_is_object(choice) || !type)
        return BAD(err, "tool_choice", "invalid_type", "'tool_choice' must be an object with a 'type'");
    if (!strcmp(type, "auto") || !strcmp(type, "none"))
        return put(out, "tool_choice", json_string(type), err);
    if (!strcmp(type, "any")) /* some tool must be called: the chat route's "required" */
        return put(out, "tool_choice", json_string("required"), err);
    if (strcmp(type, "tool") || !json_is_string(json_object_get(choice, "name")))
        return BAD(err, "tool_choice", "invalid_value",
                   "'tool_choice' must be {\"type\": \"auto\" | \"none\" | \"any\"} or {\"type\": \"tool\", \"name\": ...}");
    return put(out, "tool_choice",
               json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name",
                         json_object_get(choice, "name")), err);
}

static int anthropic_to_chat(const json_t *in, int count_only, json_t *out, pl_server_error *err) {
    json_t *model = json_object_get(in, "model"), *sys = json_object_get(in, "system"),
           *m = json_object_get(in, "messages"), *stop = json_object_get(in, "stop_sequences"),
           *thinking = json_object_get(in, "thinking"), *mcp = json_object_get(in, "mcp_servers");
    if (!json_is_string(model))
        return BAD(err, "model", present(model) ? "invalid_type" : "missing_required_parameter",
                   "'model' (a string) is required");
    if (json_object_set(out, "model", model) ||
        copy_fields(in, out, SAME, sizeof SAME / sizeof SAME[0], err))
        return pl_server_nomem(err);
    if (!count_only && max_tokens_field(in, "max_tokens", 1, out, err)) return -1;
    if (present(thinking)) {
        const char *t = json_string_value(json_object_get(thinking, "type"));
        if (!t || (strcmp(t, "enabled") && strcmp(t, "disabled") && strcmp(t, "adaptive")))
            return BAD(err, "thinking", "invalid_value",
                       "'thinking' must be {\"type\": \"enabled\" | \"disabled\", ...}");
    }
    if (present(mcp) && (!json_is_array(mcp) || json_array_size(mcp)))
        return BAD(err, "mcp_servers", "unsupported_parameter", "'mcp_servers' is not supported");
    if (present(stop)) {
        if (!json_is_array(stop))
            return BAD(err, "stop_sequences", "invalid_type", "'stop_sequences' must be a list of strings");
        size_t i;
        json_t *v;
        json_array_foreach(stop, i, v) if (!json_is_string(v))
            return BAD(err, "stop_sequences", "invalid_type", "'stop_sequences[%zu]' must be a string", i);
        if (json_object_set(out, "stop", stop)) return pl_server_nomem(err);
    }
    json_t *msgs = json_array();
    if (put(out, "messages", msgs, err)) return -1;
    if (present(sys)) {
        json_t *text;
        if (join_text(sys, "system", "system", ANT_TEXT, &text, err) ||
            append(msgs, chat_message("system", text), err))
            return -1;
    }
    if (!json_is_array(m))
        return BAD(err, "messages", present(m) ? "invalid_type" : "missing_required_parameter",
                   "'messages' (a list) is required");
    if (!json_array_size(m))
        return BAD(err, "messages", "invalid_value", "'messages' must hold at least one message");
    size_t i;
    json_t *msg;
    json_array_foreach(m, i, msg) if (anthropic_message(msg, i, msgs, err)) return -1;
    return anthropic_tools(in, out, err);
}

void pl_server_api_param(pl_server_api api, pl_server_error *err) {
    static const char *const MAP[][3] = {
        /* api, chat's, the API's */
        {"r", "messages", "input"}, {"r", "max_tokens", "max_output_tokens"},
        {"r", "response_format", "text"}, {"a", "stop", "stop_sequences"},
    };
    const char *a = api == PL_API_RESPONSES ? "r" : "a";
    for (size_t i = 0; err->param && i < sizeof MAP / sizeof MAP[0]; i++)
        if (!strcmp(MAP[i][0], a) && !strcmp(err->param, MAP[i][1])) {
            err->param = MAP[i][2];
            return;
        }
}

int pl_server_parse_api_request(pl_server_api api, const char *body, size_t len,
                                int32_t max_logprobs, int count_only, pl_server_request *r,
                                json_t **echo, pl_server_error *err) {
    memset(r, 0, sizeof *r);
    if (echo) *echo = NULL;
    json_t *in = pl_server_parse_json(body, len, err);
    if (!in) return -1;
    json_t *out = json_object();
    int rc = out ? 0 : pl_server_nomem(err);
    if (!rc && api == PL_API_RESPONSES) rc = responses_to_chat(in, out, echo, err);
    else if (!rc && api == PL_API_ANTHROPIC) rc = anthropic_to_chat(in, count_only, out, err);
    char *chat = rc ? NULL : json_dumps(out, JSON_COMPACT);
    if (!rc && !chat) rc = pl_server_nomem(err);
    json_decref(in);
    json_decref(out);
    if (!rc) rc = pl_server_parse_request(chat, strlen(chat), 1, max_logprobs, r, err);
    free(chat);
    if (rc) {
        pl_server_api_param(api, err);
        if (echo) {
            json_decref(*echo);
            *echo = NULL;
        }
        return -1;
    }
    if (r->constraint_field && !strcmp(r->constraint_field, "response_format") &&
        api == PL_API_RESPONSES)
        r->constraint_field = "text";
    return 0;
}

/* ---- answers ---- */

static const char *fn_field(const json_t *call, const char *key) {
    return json_string_value(json_object_get(json_object_get(call, "function"), key));
}

/* An id's random part (after its prefix's '_') behind another prefix. */
static void re_prefix(char *out, size_t cap, const char *prefix, const char *id) {
    const char *u = strchr(id, '_');
    snprintf(out, cap, "%s%s", prefix, u ? u + 1 : id);
}

static json_t *output_text_part(json_t *text) {
    return json_pack("{s:s, s:o, s:[], s:[]}", "type", "output_text", "text",
                     text ? text : json_string(""), "annotations", "logprobs");
}

static json_t *message_item(const pl_server_compat *x, json_t *text, const char *status) {
    char id[64];
    re_prefix(id, sizeof id, "msg_", x->id);
    return json_pack("{s:s, s:s, s:s, s:s, s:o}", "type", "message", "id", id, "status", status,
                     "role", "assistant", "content",
                     text ? json_pack("[o]", output_text_part(text)) : json_array());
}

static json_t *response_object(const pl_server_compat *x, const char *status, json_t *output,
                               json_t *usage, json_t *incomplete) {
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:b, s:n, s:o, s:s, s:o, s:o, s:b, s:n}", "id",
                          x->id, "object", "response", "created_at", (json_int_t)x->created,
                          "status", status, "background", 0, "error", "incomplete_details",
                          incomplete ? incomplete : json_null(), "model", x->model, "output",
                          output, "usage", usage ? usage : json_null(), "store", 0,
                          "previous_response_id");
    if (o && x->echo && json_object_update(o, (json_t *)x->echo)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static const char *anthropic_stop(pl_finish_reason f, const json_t *calls, const char *stop_str) {
    if (calls) return "tool_use";
    if (f == PL_FINISH_LENGTH) return "max_tokens";
    return f == PL_FINISH_STOP && stop_str ? "stop_sequence" : "end_turn";
}

/* Whether the answer has a text item / block: text, no calls, or one already streamed. */
static int has_text(const pl_server_compat *x, size_t len, const json_t *calls) {
    return len > 0 || !calls || x->text_open;
}

/* The thinking as a Responses reasoning item or an Anthropic thinking block (text NULL: empty,
 * as a stream announces it). */
static json_t *reasoning_item(const pl_server_compat *x, const char *text, size_t len,
                              const char *status) {
    if (x->api == PL_API_ANTHROPIC)
        return json_pack("{s:s, s:o, s:s}", "type", "thinking", "thinking",
                         pl_server_text_json(text ? text : "", text ? len : 0), "signature", "");
    char id[64];
    re_prefix(id, sizeof id, "rs_", x->id);
    return json_pack("{s:s, s:s, s:[], s:o, s:s}", "type", "reasoning", "id", id, "summary",
                     "content",
                     text ? json_pack("[{s:s, s:o}]", "type", "reasoning_text", "text",
                                      pl_server_text_json(text, len))
                          : json_array(),
                     "status", status);
}

json_t *pl_server_compat_answer(const pl_server_compat *x, const char *text, size_t len,
                                const json_t *calls, pl_finish_reason f, const char *stop_str) {
    json_t *out = json_array();
    int incomplete = f == PL_FINISH_LENGTH && !calls, bad = !out;
    if (!bad && x->reasoning_len) {
        json_t *item = reasoning_item(x, x->reasoning, x->reasoning_len, "completed");
        bad = !item || json_array_append_new(out, item);
    }
    if (!bad && has_text(x, len, calls)) {
        json_t *t = pl_server_text_json(text, len);
        json_t *item = x->api == PL_API_RESPONSES
                           ? message_item(x, t, incomplete ? "incomplete" : "completed")
                           : json_pack("{s:s, s:o}", "type", "text", "text", t);
        bad = !t || !item || json_array_append_new(out, item);
    }
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        const char *id = json_string_value(json_object_get(c, "id")), *name = fn_field(c, "name"),
                   *args = fn_field(c, "arguments");
        if (!id || !name || !args) continue;
        char item_id[64];
        json_t *item;
        if (x->api == PL_API_RESPONSES) {
            re_prefix(item_id, sizeof item_id, "fc_", id);
            item = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "type", "function_call", "id",
                             item_id, "call_id", id, "name", name, "arguments", args, "status",
                             "completed");
        } else {
            json_t *input = json_loads(args, 0, NULL);
            if (!json_is_object(input)) {
                json_decref(input);
                input = json_object();
            }
            re_prefix(item_id, sizeof item_id, "toolu_", id);
            item = json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id", item_id, "name",
                             name, "input", input);
        }
        bad |= !item || json_array_append_new(out, item);
    }
    if (bad) {
        json_decref(out);
        return NULL;
    }
    int64_t in = x->input_tokens, cached = x->cached_tokens, gen = x->output_tokens;
    if (x->api == PL_API_RESPONSES)
        return response_object(
            x, incomplete ? "incomplete" : "completed", out,
            json_pack("{s:I, s:{s:I}, s:I, s:{s:I}, s:I}", "input_tokens", (json_int_t)in,
                      "input_tokens_details", "cached_tokens", (json_int_t)cached,
                      "output_tokens", (json_int_t)gen, "output_tokens_details",
                      "reasoning_tokens", (json_int_t)x->reasoning_tokens, "total_tokens", (json_int_t)(in + gen)),
            incomplete ? json_pack("{s:s}", "reason", "max_output_tokens") : NULL);
    /* Anthropic's input_tokens are those not read from a cache. */
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:o, s:{s:I, s:I, s:i, s:I}}", "id", x->id,
                     "type", "message", "role", "assistant", "model", x->model, "content", out,
                     "stop_reason", anthropic_stop(f, calls, stop_str), "stop_sequence",
                     !calls && f == PL_FINISH_STOP && stop_str ? pl_server_text_json(stop_str, strlen(stop_str))
                                                               : json_null(),
                     "usage", "input_tokens", (json_int_t)(in - cached), "output_tokens",
                     (json_int_t)gen, "cache_creation_input_tokens", 0, "cache_read_input_tokens",
                     (json_int_t)cached);
}

/* ---- streams ---- */

/* One event: {"type": event, ...o} (o stolen; Responses events get their sequence_number). */
static int emit(pl_server_compat *x, pl_strbuf *out, const char *event, json_t *o) {
    json_t *e = json_pack("{s:s}", "type", event);
    int bad = !o || !e || json_object_update(e, o);
    json_decref(o);
    if (!bad && x->api == PL_API_RESPONSES)
        bad = json_object_set_new(e, "sequence_number", json_integer(x->seq++));
    char *s = bad ? NULL : pl_server_sse_named(event, e);
    json_decref(e);
    bad = !s || pl_strbuf_append(out, s, strlen(s));
    free(s);
    return bad ? -1 : 0;
}

int pl_server_compat_stream_start(pl_server_compat *x, pl_strbuf *out) {
    if (x->api == PL_API_ANTHROPIC)
        return emit(x, out, "message_start",
                    json_pack("{s:{s:s, s:s, s:s, s:s, s:[], s:n, s:n, s:{s:I, s:i}}}", "message",
                              "id", x->id, "type", "message", "role", "assistant", "model",
                              x->model, "content", "stop_reason", "stop_sequence", "usage",
                              "input_tokens", (json_int_t)x->input_tokens, "output_tokens", 0)) ||
               emit(x, out, "ping", json_object());
    json_t *r = response_object(x, "in_progress", json_array(), NULL, NULL);
    int rc = emit(x, out, "response.created", json_pack("{s:O}", "response", r)) ||
             emit(x, out, "response.in_progress", json_pack("{s:O}", "response", r));
    json_decref(r);
    return rc ? -1 : 0;
}

int pl_server_compat_stream_reasoning(pl_server_compat *x, pl_strbuf *out, const char *text,
                                      size_t n) {
    if (!n || x->reasoning_sent || x->text_open) return 0;
    x->reasoning_sent = 1;
    json_t *added = reasoning_item(x, NULL, 0, "in_progress"), *done = reasoning_item(x, text, n, "completed");
    int rc;
    if (x->api == PL_API_ANTHROPIC)
        rc = emit(x, out, "content_block_start",
                  json_pack("{s:i, s:O}", "index", 0, "content_block", added)) ||
             emit(x, out, "content_block_delta",
                  json_pack("{s:i, s:{s:s, s:O}}", "index", 0, "delta", "type", "thinking_delta",
                            "thinking", json_object_get(done, "thinking"))) ||
             emit(x, out, "content_block_stop", json_pack("{s:i}", "index", 0));
    else {
        json_t *id = json_object_get(done, "id"),
               *t = json_object_get(json_array_get(json_object_get(done, "content"), 0), "text");
        rc = emit(x, out, "response.output_item.added", json_pack("{s:i, s:O}", "output_index", 0, "item", added)) ||
             emit(x, out, "response.reasoning_text.delta",
                  json_pack("{s:O, s:i, s:i, s:O}", "item_id", id, "output_index", 0,
                            "content_index", 0, "delta", t)) ||
             emit(x, out, "response.reasoning_text.done",
                  json_pack("{s:O, s:i, s:i, s:O}", "item_id", id, "output_index", 0,
                            "content_index", 0, "text", t)) ||
             emit(x, out, "response.output_item.done", json_pack("{s:i, s:O}", "output_index", 0, "item", done));
    }
    json_decref(added);
    json_decref(done);
    return rc ? -1 : 0;
}

static int open_text(pl_server_compat *x, pl_strbuf *out) {
    x->text_open = 1;
    int k = x->reasoning_sent;
    if (x->api == PL_API_ANTHROPIC)
        return emit(x, out, "content_block_start",
                    json_pack("{s:i, s:{s:s, s:s}}", "index", k, "content_block", "type", "text",
                              "text", ""));
    json_t *item = message_item(x, NULL, "in_progress");
    const char *id = json_string_value(json_object_get(item, "id"));
    int rc = emit(x, out, "response.output_item.added", json_pack("{s:i, s:O}", "output_index", k, "item", item)) ||
             emit(x, out, "response.content_part.added",
                  json_pack("{s:s?, s:i, s:i, s:o}", "item_id", id, "output_index", k,
                            "content_index", 0, "part", output_text_part(NULL)));
    json_decref(item);
    return rc ? -1 : 0;
}

int pl_server_compat_stream_text(pl_server_compat *x, pl_strbuf *out, const char *text, size_t n) {
    if (!n) return 0;
    if (!x->text_open && open_text(x, out)) return -1;
    json_t *t = pl_server_text_json(text, n);
    if (x->api == PL_API_ANTHROPIC)
        return emit(x, out, "content_block_delta",
                    json_pack("{s:i, s:{s:s, s:o}}", "index", x->reasoning_sent, "delta", "type",
                              "text_delta", "text", t));
    char id[64];
    re_prefix(id, sizeof id, "msg_", x->id);
    return emit(x, out, "response.output_text.delta",
                json_pack("{s:s, s:i, s:i, s:o, s:[]}", "item_id", id, "output_index", x->reasoning_sent,
                          "content_index", 0, "delta", t, "logprobs"));
}

/* A Responses output item's closing events (a function call's whole life). */
static int responses_item_events(pl_server_compat *x, pl_strbuf *out, int k, json_t *item) {
    const char *type = json_string_value(json_object_get(item, "type"));
    json_t *id = json_object_get(item, "id");
    int rc = 0;
    if (!strcmp(type, "message")) {
        json_t *part = json_array_get(json_object_get(item, "content"), 0);
        rc = emit(x, out, "response.output_text.done",
                  json_pack("{s:O, s:i, s:i, s:O, s:[]}", "item_id", id, "output_index", k,
                            "content_index", 0, "text", json_object_get(part, "text"), "logprobs")) ||
             emit(x, out, "response.content_part.done",
                  json_pack("{s:O, s:i, s:i, s:O}", "item_id", id, "output_index", k,
                            "content_index", 0, "part", part));
    } else {
        json_t *args = json_object_get(item, "arguments"), *added = json_deep_copy(item);
        if (added) {
            json_object_set_new(added, "arguments", json_string(""));
            json_object_set_new(added, "status", json_string("in_progress"));
        }
        rc = emit(x, out, "response.output_item.added",
                  json_pack("{s:i, s:o}", "output_index", k, "item", added)) ||
             emit(x, out, "response.function_call_arguments.delta",
                  json_pack("{s:O, s:i, s:O}", "item_id", id, "output_index", k, "delta", args)) ||
             emit(x, out, "response.function_call_arguments.done",
                  json_pack("{s:O, s:i, s:O, s:O}", "item_id", id, "output_index", k, "name",
                            json_object_get(item, "name"), "arguments", args));
    }
    return rc || emit(x, out, "response.output_item.done",
                      json_pack("{s:i, s:O}", "output_index", k, "item", item));
}

/* An Anthropic content block's closing events (a tool_use block's whole life). */
static int anthropic_block_events(pl_server_compat *x, pl_strbuf *out, int k, json_t *block) {
    if (!strcmp(json_string_value(json_object_get(block, "type")), "tool_use")) {
        char *args = json_dumps(json_object_get(block, "input"), JSON_COMPACT);
        int rc = !args ||
                 emit(x, out, "content_block_start",
                      json_pack("{s:i, s:{s:s, s:O, s:O, s:{}}}", "index", k, "content_block",
                                "type", "tool_use", "id", json_object_get(block, "id"), "name",
                                json_object_get(block, "name"), "input")) ||
                 emit(x, out, "content_block_delta",
                      json_pack("{s:i, s:{s:s, s:s}}", "index", k, "delta", "type",
                                "input_json_delta", "partial_json", args));
        free(args);
        if (rc) return -1;
    }
    return emit(x, out, "content_block_stop", json_pack("{s:i}", "index", k));
}

int pl_server_compat_stream_end(pl_server_compat *x, pl_strbuf *out, const char *text, size_t len,
                                size_t sent, const json_t *calls, pl_finish_reason f,
                                const char *stop_str) {
    if (pl_server_compat_stream_reasoning(x, out, x->reasoning, x->reasoning_len)) return -1;
    if (has_text(x, len, calls) && !x->text_open && open_text(x, out)) return -1;
    if (len > sent && pl_server_compat_stream_text(x, out, text + sent, len - sent)) return -1;
    json_t *whole = pl_server_compat_answer(x, text, len, calls, f, stop_str);
    if (!whole) return -1;
    int anthropic = x->api == PL_API_ANTHROPIC, rc = 0;
    json_t *items = json_object_get(whole, anthropic ? "content" : "output"), *item;
    size_t k;
    json_array_foreach(items, k, item) {
        if (k == 0 && x->reasoning_sent) continue; /* the thinking went out whole */
        rc = anthropic ? anthropic_block_events(x, out, (int)k, item)
                       : responses_item_events(x, out, (int)k, item);
        if (rc) break;
    }
    if (!rc && anthropic)
        rc = emit(x, out, "message_delta",
                  json_pack("{s:{s:O, s:O}, s:O}", "delta", "stop_reason",
                            json_object_get(whole, "stop_reason"), "stop_sequence",
                            json_object_get(whole, "stop_sequence"), "usage",
                            json_object_get(whole, "usage"))) ||
             emit(x, out, "message_stop", json_object());
    else if (!rc)
        rc = emit(x, out,
                  strcmp(json_string_value(json_object_get(whole, "status")), "incomplete")
                      ? "response.completed" : "response.incomplete",
                  json_pack("{s:O}", "response", whole));
    json_decref(whole);
    return rc ? -1 : 0;
}

int pl_server_compat_stream_error(pl_server_compat *x, pl_strbuf *out, const pl_server_error *e) {
    if (x->api == PL_API_RESPONSES)
        return emit(x, out, "error",
                    json_pack("{s:s?, s:s, s:s?}", "code", e->code, "message", e->message,
                              "param", e->param));
    char *body = pl_server_error_body_as(e, x->api);
    int rc = !body || pl_strbuf_printf(out, "event: error\ndata: %s\n\n", body);
    free(body);
    return rc ? -1 : 0;
}
