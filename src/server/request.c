/* server/request — OpenAI / vLLM request JSON to pl_server_request, with validation.
 *
 * Every field is optional except the prompt (completions) or messages (chat); null means absent.
 * A field of the wrong type or out of range is a 400 whose message and `param` name the field.
 * Ranges follow OpenAI where it has one (temperature 0..2, top_p (0, 1], penalties -2..2) and
 * vLLM's SamplingParams elsewhere; the sampling ranges themselves are checked by the engine
 * (pl_sampling_params_validate), this file only parses.
 *
 * Three kinds of field names: those parsed here (tools and tool_choice by tools.c); those
 * recognised but not supported (suffix, the old function calling, tools on completions), which
 * get a 400 "... is not supported" instead of a silently ignored field; and unknown ones,
 * ignored as OpenAI does and logged once per name at debug level.
 *
 * Structured output: OpenAI's response_format ({"type": "json_object"} or {"type":
 * "json_schema", "json_schema": {"schema": ...}}), vLLM's guided_json / guided_regex /
 * guided_choice / guided_grammar and its newer structured_outputs object ({"json": ...} |
 * {"regex": ...} | {"choice": [...]} | {"grammar": ...} | {"json_object": true}) become the
 * engine's constraint; two of them in one request are a 400. The engine compiles it (a bad
 * schema, regex or grammar is a 400 naming the field that carried it).
 */
#include "server/server.h"
#include "base/buf.h"

#include "base/log.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_TOKENS_LIMIT = 1 << 24 };

/* ---- field names: parsed, recognised but unsupported, unknown ---- */

static const char *const PARSED[] = {
    "model", "prompt", "messages", "add_generation_prompt", "temperature", "top_p", "min_p",
    "top_k", "presence_penalty", "frequency_penalty", "repetition_penalty", "length_penalty", "n",
    "best_of", "max_tokens", "max_completion_tokens", "min_tokens", "seed", "ignore_eos",
    "skip_special_tokens", "include_stop_str_in_output", "use_beam_search", "early_stopping",
    "add_special_tokens", "logit_bias", "stop", "stop_token_ids", "stream", "stream_options",
    "logprobs", "top_logprobs", "echo", "prompt_logprobs", "user", "chat_template_kwargs",
    "thinking_token_budget", "reasoning_budget",
    /* Accepted and meaningless here: only with tools, or only a hint for guided_*. */
    "parallel_tool_calls", "guided_decoding_backend", "guided_whitespace_pattern",
    /* Checked below: unsupported unless neutral. */
    "suffix", "functions", "function_call", "tools", "tool_choice", "response_format",
    "guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs",
};

static int is_parsed(const char *key) {
    for (size_t i = 0; i < sizeof PARSED / sizeof PARSED[0]; i++)
        if (!strcmp(key, PARSED[i])) return 1;
    return 0;
}

/* Names already logged (bounded: after LOGGED_MAX names nothing more is logged). */
enum { LOGGED_MAX = 64, LOGGED_LEN = 64 };
static char logged[LOGGED_MAX][LOGGED_LEN];
static int n_logged;
static pthread_mutex_t logged_mu = PTHREAD_MUTEX_INITIALIZER;

int pl_server_note_unknown_field(const char *key) {
    char name[LOGGED_LEN];
    snprintf(name, sizeof name, "%s", key);
    int now = 0;
    pthread_mutex_lock(&logged_mu);
    int seen = 0;
    for (int i = 0; i < n_logged && !seen; i++) seen = !strcmp(logged[i], name);
    if (!seen && n_logged < LOGGED_MAX) {
        memcpy(logged[n_logged++], name, sizeof name);
        now = 1;
    }
    pthread_mutex_unlock(&logged_mu);
    if (now) PL_DEBUG("request field '%s' is not known to pagellm: ignored (logged once)", name);
    return now;
}

/* Recognised fields that pagellm does not implement: a 400 naming the field unless the value
 * is absent, null, or the neutral value (response_format: {"type": "text"}); tools and
 * tool_choice are parsed by tools.c (chat) and ignored by completions. */
static int check_unsupported(const json_t *o, pl_server_error *err) {
    static const char *const ALWAYS[] = {"suffix", "functions", "function_call"};
    for (size_t i = 0; i < sizeof ALWAYS / sizeof ALWAYS[0]; i++) {
        json_t *v = json_object_get(o, ALWAYS[i]);
        if (v && !json_is_null(v))
            return pl_server_fail(err, 400, ALWAYS[i], "unsupported_parameter",
                                  "'%s' is not supported by this server", ALWAYS[i]);
    }
    json_t *v;
    const char *key;
    json_object_foreach((json_t *)o, key, v) {
        if (!is_parsed(key)) pl_server_note_unknown_field(key);
    }
    return 0;
}

/* ---- structured output ---- */

/* Set the request's constraint from `field` (kind, text copied); 400 if one is set already. */
static int set_constraint(pl_server_request *r, const char *field, pl_constraint_kind kind,
                          const char *text, pl_server_error *err) {
    if (r->constraint_field)
        return pl_server_fail(err, 400, field, "unsupported_parameter",
                              "only one structured output constraint per request: got '%s' and "
                              "'%s'", r->constraint_field, field);
    r->constraint_field = field;
    r->params.constraint = kind;
    if (text && !(r->constraint_text = strdup(text))) return pl_server_nomem(err);
    r->params.constraint_text = r->constraint_text;
    return 0;
}

/* A schema given as an object or as JSON text. */
static int set_schema(pl_server_request *r, const char *field, const json_t *v,
                      pl_server_error *err) {
    if (json_is_string(v)) return set_constraint(r, field, PL_CONSTRAINT_JSON_SCHEMA, json_string_value(v), err);
    if (!json_is_object(v) && !json_is_boolean(v))
        return pl_server_fail(err, 400, field, "invalid_type",
                              "'%s' must be a JSON schema (an object, or its text)", field);
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s) return pl_server_nomem(err);
    int rc = set_constraint(r, field, PL_CONSTRAINT_JSON_SCHEMA, s, err);
    free(s);
    return rc;
}

static int set_string(pl_server_request *r, const char *field, pl_constraint_kind kind,
                      const json_t *v, pl_server_error *err) {
    if (!json_is_string(v))
        return pl_server_fail(err, 400, field, "invalid_type", "'%s' must be a string", field);
    return set_constraint(r, field, kind, json_string_value(v), err);
}

/* The strings of v (a list, or v itself when it is one string) strdup'ed into *out, which gets a
 * slot for each and a NULL after; empty ones are dropped when drop_empty. 0, or -1 with *err set
 * (an item that is not a string, named after `field`; out of memory). */
static int dup_strings(const json_t *v, const char *field, int drop_empty, char ***out,
                       int32_t *n, pl_server_error *err) {
    size_t count = json_is_array(v) ? json_array_size(v) : 1;
    if (!(*out = calloc(count + 1, sizeof **out))) return pl_server_nomem(err);
    for (size_t i = 0; i < count; i++) {
        const json_t *x = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_string(x))
            return pl_server_fail(err, 400, field, "invalid_type", "'%s[%zu]' must be a string",
                                  field, i);
        if (drop_empty && !json_string_length(x)) continue;
        if (!((*out)[(*n)++] = strdup(json_string_value(x)))) return pl_server_nomem(err);
    }
    return 0;
}

static int set_choice(pl_server_request *r, const char *field, const json_t *v,
                      pl_server_error *err) {
    if (!json_is_array(v) || json_array_size(v) == 0)
        return pl_server_fail(err, 400, field, "invalid_type",
                              "'%s' must be a non-empty list of strings", field);
    if (set_constraint(r, field, PL_CONSTRAINT_CHOICE, NULL, err) ||
        dup_strings(v, field, 0, &r->choices, &r->n_choices, err))
        return -1;
    r->params.constraint_choices = (const char *const *)r->choices;
    r->params.n_constraint_choices = r->n_choices;
    return 0;
}

/* vLLM's guided_* fields and the same constraints in its structured_outputs object. */
static const struct {
    const char *field, *key; /* "guided_json"; its key in structured_outputs ("json") */
    pl_constraint_kind kind;
} GUIDED[] = {
    {"guided_json", "json", PL_CONSTRAINT_JSON_SCHEMA},
    {"guided_regex", "regex", PL_CONSTRAINT_REGEX},
    {"guided_choice", "choice", PL_CONSTRAINT_CHOICE},
    {"guided_grammar", "grammar", PL_CONSTRAINT_GRAMMAR},
};

static int set_guided(pl_server_request *r, const char *field, pl_constraint_kind kind,
                      const json_t *v, pl_server_error *err) {
    if (kind == PL_CONSTRAINT_JSON_SCHEMA) return set_schema(r, field, v, err);
    if (kind == PL_CONSTRAINT_CHOICE) return set_choice(r, field, v, err);
    return set_string(r, field, kind, v, err);
}

static int parse_structured(const json_t *o, pl_server_request *r, pl_server_error *err) {
    json_t *v = json_object_get(o, "response_format");
    if (v && !json_is_null(v)) {
        json_t *t = json_object_get(v, "type");
        if (!json_is_object(v) || !json_is_string(t))
            return pl_server_fail(err, 400, "response_format", "invalid_type",
                                  "'response_format' must be an object with a string 'type'");
        const char *type = json_string_value(t);
        if (!strcmp(type, "json_object")) {
            if (set_constraint(r, "response_format", PL_CONSTRAINT_JSON_OBJECT, NULL, err)) return -1;
        } else if (!strcmp(type, "json_schema")) {
            json_t *js = json_object_get(v, "json_schema");
            if (!json_is_object(js))
                return pl_server_fail(err, 400, "response_format", "invalid_value",
                                      "'response_format.json_schema' must be an object with the "
                                      "'schema'");
            json_t *schema = json_object_get(js, "schema");
            if (schema && !json_is_null(schema)) {
                if (set_schema(r, "response_format", schema, err)) return -1;
            } else if (set_constraint(r, "response_format", PL_CONSTRAINT_JSON_SCHEMA, "{}", err)) {
                return -1;
            }
        } else if (strcmp(type, "text")) {
            return pl_server_fail(err, 400, "response_format", "unsupported_parameter",
                                  "'response_format' of type '%.64s' is not supported; use "
                                  "text, json_object or json_schema", type);
        }
    }
    for (size_t i = 0; i < sizeof GUIDED / sizeof GUIDED[0]; i++)
        if ((v = json_object_get(o, GUIDED[i].field)) && !json_is_null(v) &&
            set_guided(r, GUIDED[i].field, GUIDED[i].kind, v, err))
            return -1;
    json_t *so = json_object_get(o, "structured_outputs");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so))
            return pl_server_fail(err, 400, "structured_outputs", "invalid_type",
                                  "'structured_outputs' must be an object");
        const char *key;
        json_object_foreach(so, key, v) {
            if (json_is_null(v)) continue;
            int rc = 0;
            size_t g = 0;
            while (g < sizeof GUIDED / sizeof GUIDED[0] && strcmp(key, GUIDED[g].key)) g++;
            if (g < sizeof GUIDED / sizeof GUIDED[0])
                rc = set_guided(r, "structured_outputs", GUIDED[g].kind, v, err);
            else if (!strcmp(key, "json_object")) rc = json_is_true(v) ? set_constraint(r, "structured_outputs", PL_CONSTRAINT_JSON_OBJECT, NULL, err) : 0;
            else if (strcmp(key, "disable_fallback") && strcmp(key, "disable_any_whitespace") &&
                     strcmp(key, "disable_additional_properties") && strcmp(key, "whitespace_pattern"))
                rc = pl_server_fail(err, 400, "structured_outputs", "unsupported_parameter",
                                    "'structured_outputs.%.64s' is not supported", key);
            if (rc) return -1;
        }
    }
    return 0;
}

/* ---- typed field readers: absent or null leaves *out unchanged and returns 0 ---- */

static int get_int(const json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out,
                   pl_server_error *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    int64_t x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v) &&
               fabs(json_real_value(v)) < 9e15) {
        x = (int64_t)json_real_value(v);
    } else {
        return pl_server_fail(err, 400, key, "invalid_type", "'%s' must be an integer", key);
    }
    if (x < lo || x > hi)
        return pl_server_fail(err, 400, key, "invalid_value",
                              "'%s' must be in [%lld, %lld], got %lld", key, (long long)lo,
                              (long long)hi, (long long)x);
    *out = x;
    return 0;
}

/* lo_open: the lower bound itself is excluded. */
static int get_float(const json_t *o, const char *key, double lo, int lo_open, double hi,
                     float *out, pl_server_error *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v))
        return pl_server_fail(err, 400, key, "invalid_type", "'%s' must be a number", key);
    double x = json_number_value(v);
    if (!(x >= lo) || (lo_open && x == lo) || !(x <= hi))
        return pl_server_fail(err, 400, key, "invalid_value", "'%s' must be in %s%g, %g], got %g",
                              key, lo_open ? "(" : "[", lo, hi, x);
    *out = (float)x;
    return 0;
}

static int get_bool(const json_t *o, const char *key, int *out, pl_server_error *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v))
        return pl_server_fail(err, 400, key, "invalid_type", "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 0;
}

static int get_string(const json_t *o, const char *key, char **out, pl_server_error *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v))
        return pl_server_fail(err, 400, key, "invalid_type", "'%s' must be a string", key);
    free(*out);
    if (!(*out = strdup(json_string_value(v)))) return pl_server_nomem(err);
    return 0;
}

/* A JSON array of token ids: every element an integer in [0, INT32_MAX]. */
static int parse_ids(const json_t *a, const char *key, int32_t **ids, size_t *n,
                     pl_server_error *err) {
    size_t len = json_array_size(a);
    *ids = malloc((len ? len : 1) * sizeof **ids);
    if (!*ids) return pl_server_nomem(err);
    *n = len;
    for (size_t i = 0; i < len; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > INT32_MAX) {
            free(*ids);
            *ids = NULL;
            return pl_server_fail(err, 400, key, "invalid_value",
                                  "'%s': element %zu is not a token id (a non-negative integer)",
                                  key, i);
        }
        (*ids)[i] = (int32_t)json_integer_value(v);
    }
    return 0;
}

/* ---- completions: prompt ---- */

/* The index of a new empty prompt, or -1 (out of memory, *err filled). */
static int add_prompt(pl_server_request *r, pl_server_error *err) {
    if (pl_array_reserve(&r->prompts, &r->cap_prompts, (size_t)r->n_prompts + 1, sizeof *r->prompts))
        return pl_server_nomem(err);
    memset(&r->prompts[r->n_prompts], 0, sizeof *r->prompts);
    return r->n_prompts++;
}

/* A string, a list of strings, a list of ids, or a list of lists of ids. */
static int parse_prompt(const json_t *o, pl_server_request *r, pl_server_error *err) {
    json_t *p = json_object_get(o, "prompt");
    if (!p || json_is_null(p))
        return pl_server_fail(err, 400, "prompt", "missing_required_parameter",
                              "'prompt' is required");
    if (json_is_string(p)) {
        int i = add_prompt(r, err);
        if (i < 0) return -1;
        if (!(r->prompts[i].text = strdup(json_string_value(p)))) return pl_server_nomem(err);
        return 0;
    }
    if (!json_is_array(p) || json_array_size(p) == 0)
        return pl_server_fail(err, 400, "prompt", "invalid_type",
                              "'prompt' must be a string, a list of strings, a list of token ids "
                              "or a list of lists of token ids, and not empty");
    json_t *first = json_array_get(p, 0);
    if (json_is_integer(first)) {
        int i = add_prompt(r, err);
        if (i < 0) return -1;
        return parse_ids(p, "prompt", &r->prompts[i].ids, &r->prompts[i].n_ids, err);
    }
    size_t k;
    json_t *v;
    json_array_foreach(p, k, v) {
        if (json_is_string(first) && json_is_string(v)) {
            int i = add_prompt(r, err);
            if (i < 0) return -1;
            if (!(r->prompts[i].text = strdup(json_string_value(v)))) return pl_server_nomem(err);
        } else if (json_is_array(first) && json_is_array(v)) {
            int i = add_prompt(r, err);
            if (i < 0) return -1;
            if (parse_ids(v, "prompt", &r->prompts[i].ids, &r->prompts[i].n_ids, err)) return -1;
        } else {
            return pl_server_fail(err, 400, "prompt", "invalid_type",
                                  "'prompt': element %zu does not match the first element's kind "
                                  "(all strings, or all lists of token ids)", k);
        }
    }
    return 0;
}

/* ---- chat: messages ---- */

/* OpenAI's "developer" role is its newer name for "system". */
static const char *const ROLES[] = {"system", "user", "assistant", "developer", "tool"};

static int parse_content(const json_t *c, size_t i, char **out, pl_server_error *err) {
    if (!c || json_is_null(c)) {
        *out = strdup("");
        return *out ? 0 : pl_server_nomem(err);
    }
    if (json_is_string(c)) {
        *out = strdup(json_string_value(c));
        return *out ? 0 : pl_server_nomem(err);
    }
    if (!json_is_array(c))
        return pl_server_fail(err, 400, "messages", "invalid_type",
                              "'messages[%zu].content' must be a string or a list of parts", i);
    size_t len = 0, k;
    json_t *part;
    json_array_foreach(c, k, part) {
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_string(type) || strcmp(json_string_value(type), "text") || !json_is_string(text))
            return pl_server_fail(err, 400, "messages", "invalid_value",
                                  "'messages[%zu].content[%zu]': only parts {\"type\": \"text\", "
                                  "\"text\": ...} are supported", i, k);
        len += json_string_length(text);
    }
    *out = malloc(len + 1);
    if (!*out) return pl_server_nomem(err);
    len = 0;
    json_array_foreach(c, k, part) {
        json_t *text = json_object_get(part, "text");
        memcpy(*out + len, json_string_value(text), json_string_length(text));
        len += json_string_length(text);
    }
    (*out)[len] = 0;
    return 0;
}

static int parse_messages(const json_t *o, pl_server_request *r, pl_server_error *err) {
    json_t *m = json_object_get(o, "messages");
    if (!m || json_is_null(m))
        return pl_server_fail(err, 400, "messages", "missing_required_parameter",
                              "'messages' is required");
    if (!json_is_array(m))
        return pl_server_fail(err, 400, "messages", "invalid_type", "'messages' must be a list");
    if (json_array_size(m) == 0)
        return pl_server_fail(err, 400, "messages", "invalid_value",
                              "'messages' must contain at least one message");
    r->messages = calloc(json_array_size(m), sizeof *r->messages);
    if (!r->messages) return pl_server_nomem(err);
    size_t i;
    json_t *msg;
    json_array_foreach(m, i, msg) {
        if (!json_is_object(msg))
            return pl_server_fail(err, 400, "messages", "invalid_type",
                                  "'messages[%zu]' must be an object", i);
        json_t *role = json_object_get(msg, "role");
        if (!json_is_string(role))
            return pl_server_fail(err, 400, "messages", "invalid_value",
                                  "'messages[%zu].role' must be a string", i);
        int known = 0;
        for (size_t k = 0; k < sizeof ROLES / sizeof ROLES[0]; k++)
            known |= !strcmp(json_string_value(role), ROLES[k]);
        if (!known)
            return pl_server_fail(err, 400, "messages", "invalid_value",
                                  "'messages[%zu].role' must be one of system, user, assistant, "
                                  "developer, tool; got '%s'", i, json_string_value(role));
        const char *rs = json_string_value(role);
        r->messages[i].role = strdup(strcmp(rs, "developer") ? rs : "system");
        r->n_messages = (int)i + 1;
        if (!r->messages[i].role) return pl_server_nomem(err);
        json_t *content = json_object_get(msg, "content");
        r->messages[i].content_null = !content || json_is_null(content);
        if (parse_content(content, i, &r->messages[i].content, err) ||
            pl_server_parse_tool_fields(msg, i, &r->messages[i], err))
            return -1;
    }
    return 0;
}

/* ---- shared fields ---- */

static int parse_stop(const json_t *o, pl_server_request *r, pl_server_error *err) {
    json_t *s = json_object_get(o, "stop");
    if (s && !json_is_null(s)) { /* a string, or a list of them; empty strings are dropped */
        if (!json_is_string(s) && !json_is_array(s))
            return pl_server_fail(err, 400, "stop", "invalid_type",
                                  "'stop' must be a string or a list of strings");
        size_t n = json_is_array(s) ? json_array_size(s) : 1;
        if (n > PL_MAX_STOP_STRINGS)
            return pl_server_fail(err, 400, "stop", "invalid_value",
                                  "'stop' has %zu strings, at most %d are allowed", n,
                                  PL_MAX_STOP_STRINGS);
        if (dup_strings(s, "stop", 1, &r->stop, &r->params.n_stop, err)) return -1;
    }
    r->params.stop = (const char *const *)r->stop;
    json_t *ids = json_object_get(o, "stop_token_ids");
    if (ids && !json_is_null(ids)) {
        if (!json_is_array(ids))
            return pl_server_fail(err, 400, "stop_token_ids", "invalid_type",
                                  "'stop_token_ids' must be a list of token ids");
        size_t n;
        if (parse_ids(ids, "stop_token_ids", &r->stop_ids, &n, err)) return -1;
        r->params.stop_token_ids = r->stop_ids;
        r->params.n_stop_token_ids = (int32_t)n;
    }
    return 0;
}

/* logit_bias: {"<token id>": bias, ...} (OpenAI: keys are token ids as strings). The key's
 * syntax is checked here; the count, the bias range (pl_sampling_params_validate) and the id
 * range (pl_engine_add_request, which knows the vocabulary) by the engine. */
static int parse_logit_bias(const json_t *o, pl_server_request *r, pl_server_error *err) {
    json_t *lb = json_object_get(o, "logit_bias");
    if (!lb || json_is_null(lb)) return 0;
    if (!json_is_object(lb))
        return pl_server_fail(err, 400, "logit_bias", "invalid_type",
                              "'logit_bias' must be an object mapping token ids to biases");
    size_t n = json_object_size(lb);
    r->logit_bias = malloc((n ? n : 1) * sizeof *r->logit_bias);
    const char *key;
    json_t *v;
    int32_t k = 0;
    json_object_foreach(lb, key, v) {
        char *end;
        long long id = strtoll(key, &end, 10);
        if (!*key || *end || key[0] == '+' || key[0] == ' ' || id < 0 || id > INT32_MAX)
            return pl_server_fail(err, 400, "logit_bias", "invalid_value",
                                  "'logit_bias': key '%.64s' is not a token id (a non-negative "
                                  "integer)", key);
        if (!json_is_number(v))
            return pl_server_fail(err, 400, "logit_bias", "invalid_type",
                                  "'logit_bias[\"%s\"]' must be a number", key);
        double b = json_number_value(v); /* beyond float: +-inf, refused by the validation */
        r->logit_bias[k++] = (pl_logit_bias){(int32_t)id, (float)b};
    }
    r->params.sampling.logit_bias = r->logit_bias;
    r->params.sampling.n_logit_bias = k;
    return 0;
}

static int parse_sampling(const json_t *o, pl_server_request *r, pl_server_error *err) {
    pl_request_params *p = &r->params;
    pl_sampling_params *s = &p->sampling;
    int64_t v;
    if (get_float(o, "temperature", 0, 0, 2, &s->temperature, err) ||
        get_float(o, "top_p", 0, 1, 1, &s->top_p, err) ||
        get_float(o, "min_p", 0, 0, 1, &s->min_p, err) ||
        get_float(o, "presence_penalty", -2, 0, 2, &s->presence_penalty, err) ||
        get_float(o, "frequency_penalty", -2, 0, 2, &s->frequency_penalty, err) ||
        get_float(o, "repetition_penalty", 0, 1, 100, &s->repetition_penalty, err) ||
        get_float(o, "length_penalty", -100, 0, 100, &p->length_penalty, err))
        return -1;
    v = s->top_k;
    if (get_int(o, "top_k", -1, INT32_MAX, &v, err)) return -1;
    s->top_k = (int32_t)v;

    v = 1;
    if (get_int(o, "n", 1, PL_MAX_BEST_OF, &v, err)) return -1;
    p->n = (int32_t)v;
    v = p->n;
    if (get_int(o, "best_of", 1, PL_MAX_BEST_OF, &v, err)) return -1;
    if (v < p->n)
        return pl_server_fail(err, 400, "best_of", "invalid_value",
                              "'best_of' (%lld) must be at least 'n' (%d)", (long long)v, p->n);
    p->best_of = (int32_t)v;

    v = p->max_tokens;
    const char *mt = r->chat && json_object_get(o, "max_completion_tokens") &&
                             !json_is_null(json_object_get(o, "max_completion_tokens"))
                         ? "max_completion_tokens"
                         : "max_tokens";
    json_t *mtv = json_object_get(o, mt);
    r->max_tokens_given = mtv && !json_is_null(mtv);
    if (get_int(o, mt, 1, MAX_TOKENS_LIMIT, &v, err)) return -1;
    p->max_tokens = (int32_t)v;
    /* vLLM's thinking_token_budget (>= 0), or llama-server's reasoning_budget (-1: none) */
    r->thinking_budget = -1;
    for (int k = 0; k < 2; k++) {
        const char *name = k ? "reasoning_budget" : "thinking_token_budget";
        json_t *b = json_object_get(o, name);
        if (!b || json_is_null(b)) continue;
        if (r->thinking_budget_field)
            return pl_server_fail(err, 400, name, "invalid_value",
                                  "'%s' and '%s' are the same budget: give one", name,
                                  r->thinking_budget_field);
        v = -1;
        if (get_int(o, name, k ? -1 : 0, MAX_TOKENS_LIMIT, &v, err)) return -1;
        if (v < 0) continue; /* reasoning_budget -1: unlimited */
        if (!r->chat)
            return pl_server_fail(err, 400, name, "invalid_value",
                                  "'%s' applies to chat requests only", name);
        r->thinking_budget = (int32_t)v;
        r->thinking_budget_field = name;
    }
    v = 0;
    if (get_int(o, "min_tokens", 0, MAX_TOKENS_LIMIT, &v, err)) return -1;
    if (r->max_tokens_given && v > p->max_tokens)
        return pl_server_fail(err, 400, "min_tokens", "invalid_value",
                              "'min_tokens' (%lld) must not exceed '%s' (%d)", (long long)v, mt,
                              p->max_tokens);
    p->min_tokens = (int32_t)v;

    json_t *seed = json_object_get(o, "seed");
    if (seed && !json_is_null(seed)) {
        if (!json_is_integer(seed))
            return pl_server_fail(err, 400, "seed", "invalid_type", "'seed' must be an integer");
        p->has_seed = 1;
        p->seed = (uint64_t)json_integer_value(seed);
    }
    if (get_bool(o, "ignore_eos", &p->ignore_eos, err) ||
        get_bool(o, "skip_special_tokens", &p->skip_special_tokens, err) ||
        get_bool(o, "include_stop_str_in_output", &p->include_stop_str_in_output, err) ||
        get_bool(o, "use_beam_search", &p->use_beam_search, err) ||
        get_bool(o, "early_stopping", &p->early_stopping, err) ||
        get_bool(o, "add_special_tokens", &r->add_special_tokens, err))
        return -1;
    return 0;
}

static int parse_stream(const json_t *o, pl_server_request *r, pl_server_error *err) {
    if (get_bool(o, "stream", &r->stream, err)) return -1;
    json_t *so = json_object_get(o, "stream_options");
    if (!so || json_is_null(so)) return 0;
    if (!json_is_object(so))
        return pl_server_fail(err, 400, "stream_options", "invalid_type",
                              "'stream_options' must be an object");
    if (!r->stream)
        return pl_server_fail(err, 400, "stream_options", "invalid_value",
                              "'stream_options' is only allowed when 'stream' is true");
    return get_bool(so, "include_usage", &r->include_usage, err);
}

static int parse_logprobs(const json_t *o, pl_server_request *r, int32_t max_lp,
                          pl_server_error *err) {
    int64_t v = -1;
    if (r->chat) {
        int want = 0;
        if (get_bool(o, "logprobs", &want, err)) return -1;
        v = 0;
        if (get_int(o, "top_logprobs", 0, max_lp, &v, err)) return -1;
        json_t *tl = json_object_get(o, "top_logprobs");
        if (!want && tl && !json_is_null(tl))
            return pl_server_fail(err, 400, "top_logprobs", "invalid_value",
                                  "'top_logprobs' needs 'logprobs' set to true");
        r->logprobs = want ? (int32_t)v : -1;
    } else {
        if (get_int(o, "logprobs", 0, max_lp, &v, err)) return -1;
        r->logprobs = (int32_t)v;
        if (get_bool(o, "echo", &r->echo, err)) return -1;
    }
    r->params.logprobs = r->logprobs;
    v = -1;
    if (get_int(o, "prompt_logprobs", 0, max_lp, &v, err)) return -1;
    if (v >= 0 && r->stream) /* as vLLM: they would arrive with no chunk to carry them */
        return pl_server_fail(err, 400, "prompt_logprobs", "invalid_value",
                              "'prompt_logprobs' is not available when 'stream' is true");
    /* Echo with logprobs reports the prompt tokens' logprobs too (as vLLM). */
    if (r->echo && r->logprobs > v) v = r->logprobs;
    r->params.prompt_logprobs = (int32_t)v;
    return 0;
}

/* Engine messages start with the parameter they are about ("top_p must be ...", "logit_bias:
 * ..."): that parameter, as a static string, when it is a request field. */
const char *pl_server_param_of(const char *engine_message) {
    static const char *const FIELDS[] = {
        "temperature", "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty",
        "frequency_penalty", "logit_bias", "max_tokens", "min_tokens", "best_of", "n",
        "logprobs", "prompt_logprobs", "stop_token_ids", "length_penalty"};
    size_t w = strspn(engine_message, "abcdefghijklmnopqrstuvwxyz_");
    for (size_t i = 0; i < sizeof FIELDS / sizeof FIELDS[0]; i++)
        if (strlen(FIELDS[i]) == w && !strncmp(engine_message, FIELDS[i], w)) return FIELDS[i];
    return NULL;
}

json_t *pl_server_parse_json(const char *body, size_t len, pl_server_error *err) {
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_ALLOW_NUL, &je);
    if (!o) {
        if (json_error_code(&je) == json_error_out_of_memory || pl_server_json_failed())
            pl_server_nomem(err);
        else if (json_error_code(&je) == json_error_invalid_utf8)
            pl_server_fail(err, 400, NULL, "invalid_utf8",
                           "request body is not valid UTF-8 (byte %d)", je.position);
        else
            pl_server_fail(err, 400, NULL, "invalid_json",
                           "request body is not valid JSON: %s (line %d, column %d)", je.text,
                           je.line, je.column);
        return NULL;
    }
    if (!json_is_object(o)) {
        json_decref(o);
        pl_server_fail(err, 400, NULL, "invalid_json", "request body must be a JSON object");
        return NULL;
    }
    return o;
}

/* chat_template_kwargs (vLLM): extra variables of the template's context, such as
 * enable_thinking. The ones the templates read are checked for their type; the context's own
 * variables cannot be replaced. */
static int parse_template_kwargs(const json_t *o, pl_server_request *r, pl_server_error *err) {
    json_t *kw = json_object_get(o, "chat_template_kwargs"), *v;
    if (!kw || json_is_null(kw)) return 0;
    if (!json_is_object(kw))
        return pl_server_fail(err, 400, "chat_template_kwargs", "invalid_type",
                              "'chat_template_kwargs' must be an object");
    static const char *const RESERVED[] = {"messages", "tools", "add_generation_prompt",
                                           "bos_token", "eos_token"};
    static const char *const BOOLS[] = {"enable_thinking", "thinking"};
    const char *k;
    json_object_foreach(kw, k, v) {
        for (size_t i = 0; i < sizeof RESERVED / sizeof *RESERVED; i++)
            if (!strcmp(k, RESERVED[i]))
                return pl_server_fail(err, 400, "chat_template_kwargs", "invalid_value",
                                      "'chat_template_kwargs.%s' cannot be set: the server "
                                      "gives the template its '%s'", k, k);
        for (size_t i = 0; i < sizeof BOOLS / sizeof *BOOLS; i++)
            if (!strcmp(k, BOOLS[i]) && !json_is_boolean(v))
                return pl_server_fail(err, 400, "chat_template_kwargs", "invalid_type",
                                      "'chat_template_kwargs.%s' must be a boolean", k);
        if (!strcmp(k, "reasoning_effort") && !json_is_string(v))
            return pl_server_fail(err, 400, "chat_template_kwargs", "invalid_type",
                                  "'chat_template_kwargs.reasoning_effort' must be a string");
    }
    r->template_kwargs = json_dumps(kw, JSON_COMPACT | JSON_PRESERVE_ORDER);
    return r->template_kwargs ? 0 : pl_server_nomem(err);
}

int pl_server_parse_request(const char *body, size_t len, int chat, int32_t max_logprobs,
                            pl_server_request *r, pl_server_error *err) {
    memset(r, 0, sizeof *r);
    r->chat = chat;
    pl_request_params_default(&r->params);
    r->logprobs = -1;
    r->add_special_tokens = !chat;
    r->add_generation_prompt = 1;
    json_t *o = pl_server_parse_json(body, len, err);
    if (!o) return -1;
    int rc = -1;
    if (get_string(o, "model", &r->model, err) || check_unsupported(o, err)) goto done;
    if (chat) {
        if (parse_messages(o, r, err) || pl_server_parse_tools(o, r, err) ||
            parse_template_kwargs(o, r, err) ||
            get_bool(o, "add_generation_prompt", &r->add_generation_prompt, err))
            goto done;
    } else if (parse_prompt(o, r, err)) {
        goto done;
    } else {
        for (int k = 0; k < 2; k++) {
            const char *f = k ? "tool_choice" : "tools";
            json_t *v = json_object_get(o, f);
            if (v && !json_is_null(v) && !(json_is_array(v) && !json_array_size(v)) &&
                !(json_is_string(v) && !strcmp(json_string_value(v), "none"))) {
                pl_server_fail(err, 400, f, "unsupported_parameter",
                               "'%s' is not supported on /v1/completions (use /v1/chat/completions)", f);
                goto done;
            }
        }
    }
    if (parse_sampling(o, r, err) || parse_logit_bias(o, r, err) || parse_stop(o, r, err) ||
        parse_structured(o, r, err) ||
        parse_stream(o, r, err) ||
        parse_logprobs(o, r, max_logprobs, err))
        goto done;
    json_t *user = json_object_get(o, "user");
    if (user && !json_is_null(user) && !json_is_string(user)) {
        pl_server_fail(err, 400, "user", "invalid_type", "'user' must be a string");
        goto done;
    }
    if (pl_sampling_params_validate(&r->params.sampling) != PL_OK) {
        pl_server_fail(err, 400, pl_server_param_of(pl_last_error()), "invalid_value", "%s",
                       pl_last_error());
        goto done;
    }
    rc = 0;
done:
    json_decref(o);
    if (rc) pl_server_request_destroy(r);
    return rc;
}

void pl_server_request_destroy(pl_server_request *r) {
    free(r->force_ids);
    for (int i = 0; i < r->n_prompts; i++) {
        free(r->prompts[i].text);
        free(r->prompts[i].ids);
    }
    free(r->prompts);
    for (int i = 0; i < r->n_messages; i++) {
        free(r->messages[i].role);
        free(r->messages[i].content);
        free(r->messages[i].extra);
    }
    free(r->tools);
    free(r->template_kwargs);
    free(r->tool_grammar);
    free(r->messages);
    for (int i = 0; i < r->params.n_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->stop_ids);
    free(r->logit_bias);
    for (int i = 0; i < r->n_choices; i++) free(r->choices[i]);
    free(r->choices);
    free(r->constraint_text);
    free(r->model);
    memset(r, 0, sizeof *r);
}
