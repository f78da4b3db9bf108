/* server/tools — tool calling on /v1/chat/completions: the request's `tools` and `tool_choice`,
 * and the messages' tool fields (assistant `tool_calls`, tool `tool_call_id` / `name`) passed to
 * the chat template. The calls in the generated text are parsed by parse.c. */
#include "server/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
