/* server/tools — tool calling on /v1/chat/completions: the request's `tools` and `tool_choice`,
 * the messages' tool fields (assistant `tool_calls`, tool `tool_call_id` / `name`) passed to the
 * chat template, and tool calls parsed back out of the generated text for the template families
 * that define a format: Hermes / Qwen (<tool_call>{"name", "arguments"}</tool_call>, any number),
 * Llama 3.x (the whole answer is {"name", "parameters"} objects, after an optional
 * <|python_tag|>, separated by ';'), Mistral ([TOOL_CALLS][{"name", "arguments"}, ...]). */
#include "server/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* ---- request ---- */

static int bad_tools(pl_server_error *err, const char *fmt, size_t i) {
    return pl_server_fail(err, 400, "tools", "invalid_value", fmt, i);
}

int pl_server_parse_tools(const json_t *o, pl_server_request *r, pl_server_error *err) {
    json_t *tools = json_object_get(o, "tools"), *choice = json_object_get(o, "tool_choice");
    const char *named = NULL;
    int none = 0;
    if (choice && !json_is_null(choice)) {
        if (json_is_string(choice)) {
            const char *c = json_string_value(choice);
            if (!strcmp(c, "none")) none = 1;
            else if (!strcmp(c, "required"))
                return pl_server_fail(err, 400, "tool_choice", "unsupported_parameter",
                                      "'tool_choice' \"required\" is not supported by this server "
                                      "(it needs constrained decoding); use \"auto\" or a function");
            else if (strcmp(c, "auto"))
                return pl_server_fail(err, 400, "tool_choice", "invalid_value",
                                      "'tool_choice' must be \"none\", \"auto\" or "
                                      "{\"type\": \"function\", \"function\": {\"name\": ...}}");
        } else {
            json_t *fn = json_object_get(choice, "function");
            named = json_string_value(json_object_get(fn, "name"));
            if (!json_is_object(choice) || !named)
                return pl_server_fail(err, 400, "tool_choice", "invalid_value",
                                      "'tool_choice' must be \"none\", \"auto\" or "
                                      "{\"type\": \"function\", \"function\": {\"name\": ...}}");
        }
    }
    if (!tools || json_is_null(tools)) {
        if (named)
            return pl_server_fail(err, 400, "tool_choice", "invalid_value",
                                  "'tool_choice' names the function '%.100s' but there are no 'tools'", named);
        return 0;
    }
    if (!json_is_array(tools))
        return pl_server_fail(err, 400, "tools", "invalid_type", "'tools' must be a list");
    size_t i;
    json_t *t;
    int found = 0;
    json_t *pass = json_array();
    if (!pass) return pl_server_nomem(err);
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        if (!json_is_object(t) || !json_is_string(json_object_get(t, "type")) ||
            strcmp(json_string_value(json_object_get(t, "type")), "function")) {
            json_decref(pass);
            return bad_tools(err, "'tools[%zu]' must be {\"type\": \"function\", \"function\": {...}}", i);
        }
        if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name"))) {
            json_decref(pass);
            return bad_tools(err, "'tools[%zu].function.name' must be a string", i);
        }
        int match = named && !strcmp(json_string_value(json_object_get(fn, "name")), named);
        found |= match;
        if (!named || match) json_array_append(pass, t);
    }
    if (named && !found) {
        json_decref(pass);
        return pl_server_fail(err, 400, "tool_choice", "invalid_value",
                              "'tool_choice' names the function '%.100s', which is not in 'tools'", named);
    }
    /* tool_choice none: the template gets no tools (vLLM's default); a named function: only it */
    if (!none && json_array_size(pass)) {
        r->tools = json_dumps(pass, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!r->tools) {
            json_decref(pass);
            return pl_server_nomem(err);
        }
    }
    json_decref(pass);
    return 0;
}

/* An assistant's tool_calls (arguments given as a JSON string become the object it holds, as
 * vLLM does before rendering: templates write them with tojson), a tool message's tool_call_id
 * and name: kept as a JSON object text for the template. */
int pl_server_parse_tool_fields(const json_t *msg, size_t i, pl_server_message *m,
                                pl_server_error *err) {
    json_t *calls = json_object_get(msg, "tool_calls"), *id = json_object_get(msg, "tool_call_id"),
           *name = json_object_get(msg, "name");
    if ((!calls || json_is_null(calls)) && !json_is_string(id) && !json_is_string(name)) return 0;
    json_t *x = json_object();
    if (!x) return pl_server_nomem(err);
    if (calls && !json_is_null(calls)) {
        if (!json_is_array(calls)) {
            json_decref(x);
            return pl_server_fail(err, 400, "messages", "invalid_type",
                                  "'messages[%zu].tool_calls' must be a list", i);
        }
        json_t *copy = json_deep_copy(calls), *c;
        size_t k;
        json_array_foreach(copy, k, c) {
            json_t *fn = json_object_get(c, "function");
            if (!json_is_object(c) || !json_is_object(fn) || !json_is_string(json_object_get(fn, "name"))) {
                json_decref(copy);
                json_decref(x);
                return pl_server_fail(err, 400, "messages", "invalid_value",
                                      "'messages[%zu].tool_calls[%zu]' must have a function with a name", i, k);
            }
            json_t *args = json_object_get(fn, "arguments");
            if (json_is_string(args)) {
                json_t *parsed = json_loads(json_string_value(args), JSON_DECODE_ANY, NULL);
                if (json_is_object(parsed)) json_object_set_new(fn, "arguments", parsed);
                else json_decref(parsed);
            }
        }
        json_object_set_new(x, "tool_calls", copy);
    }
    if (json_is_string(id)) json_object_set(x, "tool_call_id", id);
    if (json_is_string(name)) json_object_set(x, "name", name);
    m->extra = json_dumps(x, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(x);
    return m->extra ? 0 : pl_server_nomem(err);
}

/* ---- output ---- */

pl_tool_format pl_tool_format_detect(const char *src, size_t len) {
    if (!src) return PL_TOOLS_NONE;
    char *s = strndup(src, len);
    if (!s) return PL_TOOLS_NONE;
    pl_tool_format f = strstr(s, "<tool_call>") ? PL_TOOLS_HERMES
                       : strstr(s, "[TOOL_CALLS]") ? PL_TOOLS_MISTRAL
                       : strstr(s, "<|start_header_id|>") && strstr(s, "parameters") ? PL_TOOLS_LLAMA3
                       : PL_TOOLS_NONE;
    free(s);
    return f;
}

static void make_call_id(char *out, size_t cap) {
    static const char digits[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    static _Atomic unsigned long counter;
    unsigned char rnd[9];
    unsigned long c = ++counter;
    if (getrandom(rnd, sizeof rnd, GRND_NONBLOCK) != (ssize_t)sizeof rnd)
        for (size_t i = 0; i < sizeof rnd; i++) rnd[i] = (unsigned char)(c >> (i % 8 * 8)) ^ (unsigned char)(i * 37);
    size_t n = (size_t)snprintf(out, cap, "call_");
    for (size_t i = 0; i < sizeof rnd && n + 1 < cap; i++) out[n++] = digits[rnd[i] % 62];
    out[n] = '\0';
}

/* One call {"name", "arguments" or "parameters"} as OpenAI's tool call; NULL if it is not one. */
static json_t *to_call(json_t *obj, const char *args_key) {
    json_t *name = json_object_get(obj, "name"), *args = json_object_get(obj, args_key);
    if (!json_is_object(obj) || !json_is_string(name)) return NULL;
    char *a = !args ? strdup("{}")
              : json_is_string(args) ? strdup(json_string_value(args))
                                     : json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
    if (!a) return NULL;
    char id[32];
    make_call_id(id, sizeof id);
    json_t *c = json_pack("{s:s, s:s, s:{s:O, s:s}}", "id", id, "type", "function", "function",
                          "name", name, "arguments", a);
    free(a);
    return c;
}

static const char *skip_ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) p++;
    return p;
}

json_t *pl_server_tool_calls_parse(pl_tool_format f, const char *text, size_t len, size_t *content_len) {
    const char *e = text + len;
    json_t *calls = json_array();
    if (!calls) return NULL;
    *content_len = len;
    if (f == PL_TOOLS_HERMES) {
        const char *p = text, *first = NULL;
        while ((p = memmem(p, (size_t)(e - p), "<tool_call>", 11))) {
            const char *body = p + 11, *end = memmem(body, (size_t)(e - body), "</tool_call>", 12);
            json_t *obj = json_loadb(body, (size_t)((end ? end : e) - body), 0, NULL);
            json_t *c = to_call(obj, "arguments");
            json_decref(obj);
            if (!c) break;
            json_array_append_new(calls, c);
            if (!first) first = p;
            p = end ? end + 12 : e;
        }
        if (first) *content_len = (size_t)(first - text);
    } else if (f == PL_TOOLS_MISTRAL) {
        const char *p = memmem(text, len, "[TOOL_CALLS]", 12);
        if (p) {
            json_t *arr = json_loadb(p + 12, (size_t)(e - p - 12), JSON_DISABLE_EOF_CHECK, NULL);
            size_t k;
            json_t *obj;
            json_array_foreach(arr, k, obj) {
                json_t *c = to_call(obj, "arguments");
                if (c) json_array_append_new(calls, c);
            }
            json_decref(arr);
            if (json_array_size(calls)) *content_len = (size_t)(p - text);
        }
    } else if (f == PL_TOOLS_LLAMA3) {
        const char *p = skip_ws(text, e);
        if (e - p >= 14 && !memcmp(p, "<|python_tag|>", 14)) p = skip_ws(p + 14, e);
        while (p < e && *p == '{') {
            json_error_t je;
            json_t *obj = json_loadb(p, (size_t)(e - p), JSON_DISABLE_EOF_CHECK, &je);
            json_t *c = obj ? to_call(obj, json_object_get(obj, "parameters") ? "parameters" : "arguments") : NULL;
            json_decref(obj);
            if (!c) {
                json_array_clear(calls);
                break;
            }
            json_array_append_new(calls, c);
            p = skip_ws(p + je.position, e);
            if (p < e && *p == ';') p = skip_ws(p + 1, e);
        }
        if (p != e) json_array_clear(calls); /* text after the calls: it was an answer */
        if (json_array_size(calls)) *content_len = 0;
    }
    if (!json_array_size(calls)) {
        *content_len = len;
        json_decref(calls);
        return NULL;
    }
    while (*content_len && strchr(" \n\t\r", text[*content_len - 1])) (*content_len)--;
    return calls;
}

/* How much of a text still being generated is surely content: everything before a call's marker
 * (or a marker's beginning at the end), without trailing whitespace (which the parse drops
 * before calls). Llama 3.x answers that start like a call are held whole. */
size_t pl_server_tool_content_prefix(pl_tool_format f, const char *text, size_t len) {
    const char *marker = f == PL_TOOLS_HERMES ? "<tool_call>" : f == PL_TOOLS_MISTRAL ? "[TOOL_CALLS]" : NULL;
    size_t safe = len;
    if (marker) {
        size_t ml = strlen(marker);
        const char *p = memmem(text, len, marker, ml);
        if (p) safe = (size_t)(p - text);
        else
            for (size_t k = ml - 1; k > 0; k--)
                if (len >= k && !memcmp(text + len - k, marker, k)) {
                    safe = len - k;
                    break;
                }
    } else if (f == PL_TOOLS_LLAMA3) {
        const char *p = skip_ws(text, text + len);
        if (p == text + len || *p == '{' || *p == '<') return 0;
    }
    while (safe && strchr(" \n\t\r", text[safe - 1])) safe--;
    return safe;
}
