/* server/tools — tool calling on /v1/chat/completions: the request's `tools` and `tool_choice`,
 * and the messages' tool fields (assistant `tool_calls`, tool `tool_call_id` / `name`) passed to
 * the chat template. The calls in the generated text are parsed by parse.c. */
#include "server/server.h"
#include "constrain/constrain.h"

#include <ctype.h>

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
            else if (!strcmp(c, "required")) r->tool_force = 1;
            else if (strcmp(c, "auto"))
                return pl_server_fail(err, 400, "tool_choice", "invalid_value",
                                      "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                                      "{\"type\": \"function\", \"function\": {\"name\": ...}}");
        } else {
            json_t *fn = json_object_get(choice, "function");
            named = json_string_value(json_object_get(fn, "name"));
            if (!json_is_object(choice) || !named)
                return pl_server_fail(err, 400, "tool_choice", "invalid_value",
                                      "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                                      "{\"type\": \"function\", \"function\": {\"name\": ...}}");
            r->tool_force = 2;
        }
    }
    if (!tools || json_is_null(tools)) {
        if (r->tool_force == 1)
            return pl_server_fail(err, 400, "tool_choice", "invalid_value",
                                  "'tool_choice' is \"required\" but there are no 'tools'");
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

/* ---- tool_choice "required" or a named function: the answer is one call ---- */

/* GBNF text with every rule name prefixed (strings, classes and {m,n} left alone). */
static int gbnf_prefixed(pl_strbuf *b, const char *g, const char *prefix) {
    for (const char *p = g; *p;) {
        char c = *p;
        if (c == '"' || c == '[') {
            char close = c == '"' ? '"' : ']';
            const char *q = p + 1;
            while (*q && *q != close) q += q[0] == '\\' && q[1] ? 2 : 1;
            if (*q) q++;
            pl_strbuf_append(b, p, (size_t)(q - p));
            p = q;
        } else if (c == '{') {
            const char *q = strchr(p, '}');
            q = q ? q + 1 : p + strlen(p);
            pl_strbuf_append(b, p, (size_t)(q - p));
            p = q;
        } else if (isalnum((unsigned char)c) || c == '_' || c == '-') {
            const char *q = p;
            while (isalnum((unsigned char)*q) || *q == '_' || *q == '-') q++;
            pl_strbuf_printf(b, "%s%.*s", prefix, (int)(q - p), p);
            p = q;
        } else {
            pl_strbuf_putc(b, c);
            p++;
        }
    }
    return pl_strbuf_putc(b, '\n');
}

/* s as a GBNF string literal. */
static void gbnf_lit(pl_strbuf *b, const char *s) {
    pl_strbuf_putc(b, '"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') pl_strbuf_printf(b, "\\%c", *s);
        else if (*s == '\n') pl_strbuf_puts(b, "\\n");
        else pl_strbuf_putc(b, *s);
    }
    pl_strbuf_puts(b, "\" ");
}

/* The schema's grammar as rules prefixed `prefix` (its start: prefix + "root"). */
static int schema_rules(pl_strbuf *b, const json_t *schema, const char *prefix, size_t i,
                        pl_schema_dialect d, pl_server_error *err) {
    json_t *obj = schema ? NULL : json_pack("{s:s}", "type", "object"); /* no parameters: {} */
    char *text = json_dumps(schema ? schema : obj, JSON_COMPACT), *g = NULL;
    json_decref(obj);
    if (!text) return pl_server_nomem(err);
    pl_status st = pl_schema_to_gbnf_dialect(text, d, &g);
    free(text);
    if (st == PL_ERR_NOMEM) return pl_server_nomem(err);
    if (st != PL_OK)
        return pl_server_fail(err, 400, "tools", "invalid_value",
                              "'tools[%zu].function.parameters' cannot constrain a tool call "
                              "(tool_choice): %s", i, pl_last_error());
    gbnf_prefixed(b, g, prefix);
    free(g);
    return 0;
}

int pl_server_tool_grammar(pl_tool_format f, const char *tools_json, const char *opening,
                           char **gbnf, pl_server_error *err) {
    /* the text around a call: before the name, between it and the arguments, after them */
    static const struct { pl_tool_format f; const char *pre, *mid, *post; } FMT[] = {
        {PL_TOOLS_HERMES, "<tool_call>\n{\"name\": \"", "\", \"arguments\": ", "}\n</tool_call>"},
        {PL_TOOLS_LLAMA3, "{\"name\": \"", "\", \"parameters\": ", "}"},
        {PL_TOOLS_MISTRAL, "[TOOL_CALLS]", "[ARGS]", ""},
        {PL_TOOLS_DEEPSEEK_V31,
         "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c><\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>",
         "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>",
         "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c><\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"},
        {PL_TOOLS_KIMI_K2, "<|tool_calls_section_begin|><|tool_call_begin|>functions.",
         ":0<|tool_call_argument_begin|>", "<|tool_call_end|><|tool_calls_section_end|>"},
        {PL_TOOLS_HARMONY, "<|channel|>commentary to=functions.", " <|constrain|>json<|message|>", "<|call|>"},
        /* parameters as text: per parameter kopen K kclose V vclose */
        {PL_TOOLS_QWEN3_CODER, "<tool_call>\n<function=", ">\n", "</function>\n</tool_call>"},
        {PL_TOOLS_GLM45, "<tool_call>", "\n", "</tool_call>"},
        /* arguments in Gemma's own syntax (bare keys, <|"|> strings) */
        {PL_TOOLS_GEMMA4, "<|tool_call>call:", "", "<tool_call|>"},
    };
    int k = -1;
    for (int i = 0; i < (int)(sizeof FMT / sizeof *FMT); i++)
        if (FMT[i].f == f) k = i;
    if (k < 0)
        return pl_server_fail(err, 400, "tool_choice", "unsupported_parameter",
                              "'tool_choice' \"required\" or a named function needs a chat template "
                              "whose tool-call format this server can constrain (Hermes, Qwen3-Coder, "
                              "GLM, Mistral, Llama 3, DeepSeek V3.1, Kimi K2, gpt-oss, Gemma 4)");
    json_t *tools = json_loads(tools_json, 0, NULL);
    if (!tools) return pl_server_nomem(err);
    pl_strbuf b = {0};
    pl_strbuf_puts(&b, "root ::= ");
    if (opening) gbnf_lit(&b, opening);
    pl_strbuf_puts(&b, "( ");
    for (size_t i = 0; i < json_array_size(tools); i++) pl_strbuf_printf(&b, "%st%zu-call ", i ? "| " : "", i);
    pl_strbuf_puts(&b, ")\n");
    int xml = f == PL_TOOLS_QWEN3_CODER || f == PL_TOOLS_GLM45, rc = 0;
    pl_schema_dialect dialect = f == PL_TOOLS_GEMMA4 ? PL_SCHEMA_GEMMA : PL_SCHEMA_JSON;
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function"), *params = json_object_get(fn, "parameters");
        char prefix[32];
        snprintf(prefix, sizeof prefix, "t%zu-", i);
        pl_strbuf_printf(&b, "t%zu-call ::= ", i);
        gbnf_lit(&b, FMT[k].pre);
        gbnf_lit(&b, json_string_value(json_object_get(fn, "name")));
        gbnf_lit(&b, FMT[k].mid);
        if (!xml) {
            pl_strbuf_printf(&b, "t%zu-root ", i);
            gbnf_lit(&b, FMT[k].post);
            pl_strbuf_putc(&b, '\n');
            if ((rc = schema_rules(&b, params, prefix, i, dialect, err))) break;
            continue;
        }
        /* the required parameters, in order, each as text (a string) or as JSON */
        json_t *props = json_object_get(params, "properties"), *req = json_object_get(params, "required"), *name;
        size_t q;
        pl_strbuf rules = {0};
        json_array_foreach(req, q, name) {
            const char *key = json_string_value(name);
            json_t *ps = json_object_get(props, key ? key : "");
            if (!key) continue;
            pl_strbuf open = {0};
            pl_strbuf_printf(&open, f == PL_TOOLS_GLM45 ? "<arg_key>%s</arg_key>\n<arg_value>" : "<parameter=%s>\n", key);
            gbnf_lit(&b, open.p);
            pl_strbuf_destroy(&open);
            const char *ty = json_string_value(json_object_get(ps, "type"));
            if (!ty || !strcmp(ty, "string")) {
                pl_strbuf_puts(&b, "[^<]* ");
            } else {
                char pp[48];
                snprintf(pp, sizeof pp, "t%zu-p%zu-", i, q);
                pl_strbuf_printf(&b, "t%zu-p%zu-root ", i, q);
                if ((rc = schema_rules(&rules, ps, pp, i, dialect, err))) break;
            }
            gbnf_lit(&b, f == PL_TOOLS_GLM45 ? "</arg_value>\n" : "\n</parameter>\n");
        }
        gbnf_lit(&b, FMT[k].post);
        pl_strbuf_putc(&b, '\n');
        if (rules.len) pl_strbuf_append(&b, rules.p, rules.len);
        pl_strbuf_destroy(&rules);
        if (rc) break;
    }
    json_decref(tools);
    if (rc || b.failed) {
        pl_strbuf_destroy(&b);
        return rc ? rc : pl_server_nomem(err);
    }
    *gbnf = pl_strbuf_take(&b);
    return *gbnf ? 0 : pl_server_nomem(err);
}
