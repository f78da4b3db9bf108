/* Unit tests for src/server/request.c: OpenAI / vLLM request bodies to pl_server_request, and
 * every validation error with its status, param and code. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "server/server.h"

#include <string.h>

static int parse(const char *body, int chat, pl_server_request *r, pl_server_error *e) {
    memset(e, 0, sizeof *e);
    return pl_server_parse_request(body, strlen(body), chat, 20, r, e);
}

/* The body must be refused with 400 and, when given, a message containing `word` and `param`. */
static void refuse(const char *body, int chat, const char *param, const char *word) {
    pl_server_request r;
    pl_server_error e;
    int rc = parse(body, chat, &r, &e);
    if (rc != -1) fail_msg("accepted: %s", body);
    assert_int_equal(e.status, 400);
    if (param) {
        if (!e.param) fail_msg("no param for %s (message %s)", body, e.message);
        assert_string_equal(e.param, param);
    }
    if (word && !strstr(e.message, word)) fail_msg("'%s' lacks '%s' for %s", e.message, word, body);
    char *s = pl_server_error_body(&e);
    json_t *j = json_loads(s, 0, NULL);
    assert_non_null(j);
    json_t *err = json_object_get(j, "error");
    assert_true(json_is_object(err));
    assert_string_equal(json_string_value(json_object_get(err, "type")), "invalid_request_error");
    assert_string_equal(json_string_value(json_object_get(err, "message")), e.message);
    assert_non_null(json_object_get(err, "param"));
    assert_non_null(json_object_get(err, "code"));
    json_decref(j);
    free(s);
}

static void test_prompt_forms(void **state) {
    (void)state;
    pl_server_request r;
    pl_server_error e;
    assert_int_equal(parse("{\"prompt\": \"Once upon a time\"}", 0, &r, &e), 0);
    assert_int_equal(r.n_prompts, 1);
    assert_string_equal(r.prompts[0].text, "Once upon a time");
    assert_int_equal(r.params.max_tokens, 16);
    assert_int_equal(r.params.n, 1);
    assert_int_equal(r.logprobs, -1);
    assert_int_equal(r.add_special_tokens, 1);
    pl_server_request_destroy(&r);

    assert_int_equal(parse("{\"prompt\": [\"a\", \"b\", \"c\"]}", 0, &r, &e), 0);
    assert_int_equal(r.n_prompts, 3);
    assert_string_equal(r.prompts[2].text, "c");
    pl_server_request_destroy(&r);

    assert_int_equal(parse("{\"prompt\": [1, 400, 7]}", 0, &r, &e), 0);
    assert_int_equal(r.n_prompts, 1);
    assert_null(r.prompts[0].text);
    assert_int_equal(r.prompts[0].n_ids, 3);
    assert_int_equal(r.prompts[0].ids[1], 400);
    pl_server_request_destroy(&r);

    assert_int_equal(parse("{\"prompt\": [[1, 2], [3]], \"unknown_field\": {\"x\": 1}}", 0, &r, &e), 0);
    assert_int_equal(r.n_prompts, 2);
    assert_int_equal(r.prompts[1].n_ids, 1);
    assert_int_equal(r.prompts[1].ids[0], 3);
    pl_server_request_destroy(&r);
}

static void test_all_fields(void **state) {
    (void)state;
    pl_server_request r;
    pl_server_error e;
    const char *body =
        "{\"model\": \"m\", \"prompt\": \"x\", \"n\": 2, \"best_of\": 3, \"echo\": true, "
        "\"logprobs\": 3, \"max_tokens\": 48, \"temperature\": 0, \"top_p\": 0.5, "
        "\"stop\": [\"a\", \"\", \"bc\"], \"seed\": 7, \"presence_penalty\": 0.5, "
        "\"frequency_penalty\": -0.5, \"stream\": true, \"stream_options\": {\"include_usage\": "
        "true}, \"user\": \"u\", \"top_k\": 5, \"min_p\": 0.1, \"repetition_penalty\": 1.2, "
        "\"ignore_eos\": true, \"min_tokens\": 4, \"use_beam_search\": false, "
        "\"length_penalty\": 0.8, \"skip_special_tokens\": false, "
        "\"include_stop_str_in_output\": true, \"stop_token_ids\": [2, 3]}";
    assert_int_equal(parse(body, 0, &r, &e), 0);
    assert_string_equal(r.model, "m");
    assert_int_equal(r.params.n, 2);
    assert_int_equal(r.params.best_of, 3);
    assert_int_equal(r.echo, 1);
    assert_int_equal(r.logprobs, 3);
    assert_int_equal(r.params.logprobs, 3);
    assert_int_equal(r.params.prompt_logprobs, 3); /* echo + logprobs asks for the prompt's */
    assert_int_equal(r.params.max_tokens, 48);
    assert_true(r.params.sampling.temperature == 0.0f);
    assert_true(r.params.sampling.top_p == 0.5f);
    assert_int_equal(r.params.n_stop, 2); /* the empty string is dropped */
    assert_string_equal(r.params.stop[0], "a");
    assert_string_equal(r.params.stop[1], "bc");
    assert_int_equal(r.params.has_seed, 1);
    assert_int_equal(r.params.seed, 7);
    assert_int_equal(r.stream, 1);
    assert_int_equal(r.include_usage, 1);
    assert_int_equal(r.params.sampling.top_k, 5);
    assert_true(r.params.sampling.min_p > 0.09f && r.params.sampling.min_p < 0.11f);
    assert_int_equal(r.params.ignore_eos, 1);
    assert_int_equal(r.params.min_tokens, 4);
    assert_int_equal(r.params.skip_special_tokens, 0);
    assert_int_equal(r.params.include_stop_str_in_output, 1);
    assert_int_equal(r.params.n_stop_token_ids, 2);
    assert_int_equal(r.params.stop_token_ids[1], 3);
    pl_server_request_destroy(&r);

    /* A single stop string, integral floats for integers, nulls as absent. */
    assert_int_equal(parse("{\"prompt\": \"x\", \"stop\": \"\\n\", \"max_tokens\": 8.0, "
                           "\"temperature\": null, \"seed\": null}", 0, &r, &e), 0);
    assert_int_equal(r.params.n_stop, 1);
    assert_string_equal(r.params.stop[0], "\n");
    assert_int_equal(r.params.max_tokens, 8);
    assert_int_equal(r.params.has_seed, 0);
    pl_server_request_destroy(&r);
}

static void test_chat(void **state) {
    (void)state;
    pl_server_request r;
    pl_server_error e;
    const char *body = "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
                       "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Hel\"}, "
                       "{\"type\": \"text\", \"text\": \"lo\"}]}, {\"role\": \"developer\", "
                       "\"content\": \"d\"}, {\"role\": \"assistant\", \"content\": null}], "
                       "\"logprobs\": true, \"top_logprobs\": 2, \"max_completion_tokens\": 9, "
                       "\"max_tokens\": 100}";
    assert_int_equal(parse(body, 1, &r, &e), 0);
    assert_int_equal(r.n_messages, 4);
    assert_string_equal(r.messages[0].role, "system");
    assert_string_equal(r.messages[1].content, "Hello");
    assert_string_equal(r.messages[2].role, "system");
    assert_string_equal(r.messages[3].content, "");
    assert_int_equal(r.logprobs, 2);
    assert_int_equal(r.params.max_tokens, 9); /* max_completion_tokens wins */
    assert_int_equal(r.max_tokens_given, 1);
    assert_int_equal(r.add_special_tokens, 0);
    assert_int_equal(r.add_generation_prompt, 1);
    pl_server_request_destroy(&r);

    assert_int_equal(parse("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                           "\"logprobs\": true}", 1, &r, &e), 0);
    assert_int_equal(r.logprobs, 0); /* logprobs of the chosen tokens only */
    assert_int_equal(r.max_tokens_given, 0);
    pl_server_request_destroy(&r);
}

static void test_refusals(void **state) {
    (void)state;
    refuse("{\"prompt\": \"x\"", 0, NULL, "not valid JSON");
    refuse("[1, 2]", 0, NULL, "JSON object");
    refuse("{\"prompt\": \"\xff\xfe\"}", 0, NULL, "UTF-8");
    refuse("{}", 0, "prompt", "required");
    refuse("{\"prompt\": 5}", 0, "prompt", NULL);
    refuse("{\"prompt\": []}", 0, "prompt", NULL);
    refuse("{\"prompt\": [\"a\", 1]}", 0, "prompt", "element 1");
    refuse("{\"prompt\": [1, -2]}", 0, "prompt", "element 1");
    refuse("{\"prompt\": [[1], [\"a\"]]}", 0, "prompt", NULL);
    refuse("{\"prompt\": \"x\", \"n\": 0}", 0, "n", "[1, 64]");
    refuse("{\"prompt\": \"x\", \"n\": \"2\"}", 0, "n", "integer");
    refuse("{\"prompt\": \"x\", \"n\": 1.5}", 0, "n", "integer");
    refuse("{\"prompt\": \"x\", \"n\": true}", 0, "n", "integer");
    refuse("{\"prompt\": \"x\", \"n\": 3, \"best_of\": 2}", 0, "best_of", "at least");
    refuse("{\"prompt\": \"x\", \"max_tokens\": 0}", 0, "max_tokens", NULL);
    refuse("{\"prompt\": \"x\", \"max_tokens\": -5}", 0, "max_tokens", NULL);
    refuse("{\"prompt\": \"x\", \"temperature\": 2.5}", 0, "temperature", NULL);
    refuse("{\"prompt\": \"x\", \"temperature\": -1}", 0, "temperature", NULL);
    refuse("{\"prompt\": \"x\", \"temperature\": \"hot\"}", 0, "temperature", "number");
    refuse("{\"prompt\": \"x\", \"top_p\": 0}", 0, "top_p", NULL);
    refuse("{\"prompt\": \"x\", \"top_p\": 1.5}", 0, "top_p", NULL);
    refuse("{\"prompt\": \"x\", \"logprobs\": 21}", 0, "logprobs", NULL);
    refuse("{\"prompt\": \"x\", \"logprobs\": -1}", 0, "logprobs", NULL);
    refuse("{\"prompt\": \"x\", \"presence_penalty\": 3}", 0, "presence_penalty", NULL);
    refuse("{\"prompt\": \"x\", \"stop\": 5}", 0, "stop", NULL);
    refuse("{\"prompt\": \"x\", \"stop\": [\"a\", 5]}", 0, "stop", "stop[1]");
    refuse("{\"prompt\": \"x\", \"stream\": \"yes\"}", 0, "stream", "boolean");
    refuse("{\"prompt\": \"x\", \"stream_options\": {\"include_usage\": true}}", 0,
           "stream_options", "stream");
    refuse("{\"prompt\": \"x\", \"min_tokens\": 9, \"max_tokens\": 4}", 0, "min_tokens", NULL);
    refuse("{\"prompt\": \"x\", \"model\": 3}", 0, "model", "string");
    refuse("{\"prompt\": \"x\", \"user\": 3}", 0, "user", "string");
    refuse("{\"prompt\": \"x\", \"seed\": \"s\"}", 0, "seed", NULL);
    refuse("{\"prompt\": \"x\", \"stop_token_ids\": [\"a\"]}", 0, "stop_token_ids", NULL);
    refuse("{\"messages\": []}", 1, "messages", "at least one");
    refuse("{\"messages\": \"hi\"}", 1, "messages", "list");
    refuse("{}", 1, "messages", "required");
    refuse("{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}", 1, "messages", "wizard");
    refuse("{\"messages\": [{\"content\": \"x\"}]}", 1, "messages", "role");
    refuse("{\"messages\": [{\"role\": \"user\", \"content\": 7}]}", 1, "messages", NULL);
    refuse("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}", 1,
           "messages", "text");
    refuse("{\"messages\": [\"hi\"]}", 1, "messages", "object");
    refuse("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_logprobs\": 2}", 1,
           "top_logprobs", "logprobs");
    refuse("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logprobs\": true, "
           "\"top_logprobs\": 50}", 1, "top_logprobs", NULL);
}

/* logit_bias: {"id": bias}; the key's syntax here, the ranges by pl_sampling_params_validate,
 * every refusal naming logit_bias. */
static void test_logit_bias(void **state) {
    (void)state;
    pl_server_request r;
    pl_server_error e;
    assert_int_equal(parse("{\"prompt\": \"x\", \"logit_bias\": {\"5\": -100, \"300\": 42.5}}", 0,
                           &r, &e), 0);
    assert_int_equal(r.params.sampling.n_logit_bias, 2);
    assert_ptr_equal(r.params.sampling.logit_bias, r.logit_bias);
    int seen = 0;
    for (int i = 0; i < 2; i++) {
        const pl_logit_bias *b = &r.params.sampling.logit_bias[i];
        if (b->id == 5 && b->bias == -100.0f) seen |= 1;
        if (b->id == 300 && b->bias == 42.5f) seen |= 2;
    }
    assert_int_equal(seen, 3);
    pl_server_request_destroy(&r);
    assert_int_equal(parse("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                           "\"logit_bias\": {}}", 1, &r, &e), 0);
    assert_int_equal(r.params.sampling.n_logit_bias, 0);
    pl_server_request_destroy(&r);
    assert_int_equal(parse("{\"prompt\": \"x\", \"logit_bias\": null}", 0, &r, &e), 0);
    pl_server_request_destroy(&r);
    refuse("{\"prompt\": \"x\", \"logit_bias\": [1]}", 0, "logit_bias", "object");
    refuse("{\"prompt\": \"x\", \"logit_bias\": {\"abc\": 1}}", 0, "logit_bias", "'abc'");
    refuse("{\"prompt\": \"x\", \"logit_bias\": {\"-3\": 1}}", 0, "logit_bias", "'-3'");
    refuse("{\"prompt\": \"x\", \"logit_bias\": {\"\": 1}}", 0, "logit_bias", "token id");
    refuse("{\"prompt\": \"x\", \"logit_bias\": {\"12x\": 1}}", 0, "logit_bias", "'12x'");
    refuse("{\"prompt\": \"x\", \"logit_bias\": {\"99999999999\": 1}}", 0, "logit_bias", NULL);
    refuse("{\"prompt\": \"x\", \"logit_bias\": {\"5\": \"1\"}}", 0, "logit_bias", "number");
    refuse("{\"prompt\": \"x\", \"logit_bias\": {\"5\": 100.5}}", 0, "logit_bias", "[-100, 100]");
    refuse("{\"prompt\": \"x\", \"logit_bias\": {\"5\": -1e300}}", 0, "logit_bias", "[-100, 100]");
}

/* Recognised but unsupported fields are a 400 naming them ("not supported"); their neutral
 * values pass; unknown fields pass and are noted once. */
static void test_unsupported_fields(void **state) {
    (void)state;
    static const char *const FIELDS[] = {"suffix", "functions", "function_call"};
    char body[256];
    for (size_t i = 0; i < sizeof FIELDS / sizeof FIELDS[0]; i++) {
        snprintf(body, sizeof body, "{\"prompt\": \"x\", \"%s\": [{\"a\": 1}]}", FIELDS[i]);
        refuse(body, 0, FIELDS[i], "not supported");
        snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                                    "\"%s\": \"auto\"}", FIELDS[i]);
        refuse(body, 1, FIELDS[i], "not supported");
    }
    refuse("{\"prompt\": \"x\", \"tools\": [{\"a\": 1}]}", 0, "tools", "not supported on /v1/completions");
    refuse("{\"prompt\": \"x\", \"tool_choice\": \"auto\"}", 0, "tool_choice", "not supported");
    refuse("{\"prompt\": \"x\", \"suffix\": \"\"}", 0, "suffix", "'suffix' is not supported");
    refuse("{\"prompt\": \"x\", \"stream\": true, \"prompt_logprobs\": 1}", 0, "prompt_logprobs",
           "stream");
    refuse("{\"prompt\": \"x\", \"response_format\": \"text\"}", 0, "response_format", "object");
    pl_server_request r;
    pl_server_error e;
    static const char *const OK[] = {
        "{\"prompt\": \"x\", \"suffix\": null, \"tools\": null, \"functions\": null}",
        "{\"prompt\": \"x\", \"tools\": [], \"tool_choice\": \"none\"}",
        "{\"prompt\": \"x\", \"response_format\": {\"type\": \"text\"}}",
        "{\"prompt\": \"x\", \"guided_json\": null, \"guided_decoding_backend\": \"xgrammar\"}",
        "{\"prompt\": \"x\", \"frobnicate_17\": {\"deep\": [1, 2]}, \"service_tier\": \"auto\"}",
    };
    for (size_t i = 0; i < sizeof OK / sizeof OK[0]; i++) {
        if (parse(OK[i], 0, &r, &e)) fail_msg("refused %s: %s", OK[i], e.message);
        pl_server_request_destroy(&r);
    }
    /* Logged while parsing above: not again. A new name once. */
    assert_int_equal(pl_server_note_unknown_field("frobnicate_17"), 0);
    assert_int_equal(pl_server_note_unknown_field("unheard_of_17"), 1);
    assert_int_equal(pl_server_note_unknown_field("unheard_of_17"), 0);
}

#define TOOL "{\"type\": \"function\", \"function\": {\"name\": \"%s\", \"parameters\": {}}}"
#define USER "\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]"

/* Tool calling: tools and tool_choice for the template, tool messages, and tool calls parsed
 * back out of generated text in each family's format. */
static void test_tools(void **state) {
    (void)state;
    pl_server_request r;
    pl_server_error e;
    char body[1024];
    snprintf(body, sizeof body, "{" USER ", \"tools\": [" TOOL ", " TOOL "], \"tool_choice\": \"auto\"}", "f", "g");
    if (parse(body, 1, &r, &e)) fail_msg("%s", e.message);
    assert_non_null(r.tools);
    assert_non_null(strstr(r.tools, "\"f\""));
    assert_non_null(strstr(r.tools, "\"g\""));
    pl_server_request_destroy(&r);
    snprintf(body, sizeof body, "{" USER ", \"tools\": [" TOOL ", " TOOL "], \"tool_choice\": "
             "{\"type\": \"function\", \"function\": {\"name\": \"g\"}}}", "f", "g");
    if (parse(body, 1, &r, &e)) fail_msg("%s", e.message);
    assert_null(strstr(r.tools, "\"f\"")); /* a named function: the template gets only it */
    assert_non_null(strstr(r.tools, "\"g\""));
    pl_server_request_destroy(&r);
    snprintf(body, sizeof body, "{" USER ", \"tools\": [" TOOL "], \"tool_choice\": \"none\"}", "f");
    if (parse(body, 1, &r, &e)) fail_msg("%s", e.message);
    assert_null(r.tools);
    pl_server_request_destroy(&r);
    snprintf(body, sizeof body, "{" USER ", \"tools\": [" TOOL "], \"tool_choice\": "
             "{\"type\": \"function\", \"function\": {\"name\": \"zz\"}}}", "f");
    refuse(body, 1, "tool_choice", "not in 'tools'");
    snprintf(body, sizeof body, "{" USER ", \"tools\": [" TOOL "], \"tool_choice\": \"required\"}", "f");
    if (parse(body, 1, &r, &e)) fail_msg("%s", e.message);
    assert_int_equal(r.tool_force, 1); /* constrained to a call when the job is made */
    pl_server_request_destroy(&r);
    refuse("{" USER ", \"tool_choice\": \"required\"}", 1, "tool_choice", "no 'tools'");
    /* chat_template_kwargs reach the template's context; wrong types name the kwarg */
    if (parse("{" USER ", \"chat_template_kwargs\": {\"enable_thinking\": false, \"x\": [1]}}", 1, &r, &e))
        fail_msg("%s", e.message);
    assert_string_equal(r.template_kwargs, "{\"enable_thinking\":false,\"x\":[1]}");
    pl_server_request_destroy(&r);
    refuse("{" USER ", \"chat_template_kwargs\": {\"enable_thinking\": \"no\"}}", 1, "chat_template_kwargs",
           "enable_thinking' must be a boolean");
    refuse("{" USER ", \"chat_template_kwargs\": {\"messages\": []}}", 1, "chat_template_kwargs", "messages");
    refuse("{" USER ", \"chat_template_kwargs\": [1]}", 1, "chat_template_kwargs", "must be an object");
    refuse("{" USER ", \"tool_choice\": \"maybe\"}", 1, "tool_choice", "must be");
    refuse("{" USER ", \"tools\": {}}", 1, "tools", "must be a list");
    refuse("{" USER ", \"tools\": [{\"type\": \"function\", \"function\": {}}]}", 1, "tools", "name");
    refuse("{" USER ", \"tools\": [{\"type\": \"code\"}]}", 1, "tools", "function");
    /* messages: an assistant's tool calls (arguments decoded), a tool's answer */
    const char *conv = "{\"messages\": [{\"role\": \"user\", \"content\": \"w?\"}, {\"role\": "
                       "\"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"c1\", \"type\": "
                       "\"function\", \"function\": {\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}}]}, "
                       "{\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"42\"}]}";
    if (parse(conv, 1, &r, &e)) fail_msg("%s", e.message);
    assert_int_equal(r.n_messages, 3);
    assert_int_equal(r.messages[1].content_null, 1);
    assert_string_equal(r.messages[1].extra,
                        "{\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":{\"a\":1}}}]}");
    assert_string_equal(r.messages[2].role, "tool");
    assert_string_equal(r.messages[2].extra, "{\"tool_call_id\":\"c1\"}");
    assert_null(r.messages[0].extra);
    pl_server_request_destroy(&r);
    refuse("{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": {}}]}", 1, "messages", "must be a list");
    refuse("{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {}}]}]}", 1,
           "messages", "name");

    /* formats and the parsing of calls: test_server_parse.c */
}

/* Structured output fields become the engine's constraint; two at once, or wrong types, are a 400
 * naming the field. */
static void test_structured(void **state) {
    (void)state;
    pl_server_request r;
    pl_server_error e;
    static const struct {
        const char *body;
        pl_constraint_kind kind;
        const char *text;
    } OK[] = {
        {"{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_object\"}}", PL_CONSTRAINT_JSON_OBJECT, NULL},
        {"{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": "
         "{\"name\": \"a\", \"strict\": true, \"schema\": {\"type\": \"integer\"}}}}", PL_CONSTRAINT_JSON_SCHEMA, "{\"type\":\"integer\"}"},
        {"{\"prompt\": \"x\", \"guided_json\": {\"type\": \"string\"}}", PL_CONSTRAINT_JSON_SCHEMA, "{\"type\":\"string\"}"},
        {"{\"prompt\": \"x\", \"guided_json\": \"{\\\"type\\\": 1}\"}", PL_CONSTRAINT_JSON_SCHEMA, "{\"type\": 1}"},
        {"{\"prompt\": \"x\", \"guided_regex\": \"a+\"}", PL_CONSTRAINT_REGEX, "a+"},
        {"{\"prompt\": \"x\", \"guided_grammar\": \"root ::= \\\"a\\\"\"}", PL_CONSTRAINT_GRAMMAR, "root ::= \"a\""},
        {"{\"prompt\": \"x\", \"guided_choice\": [\"a\", \"b\"]}", PL_CONSTRAINT_CHOICE, NULL},
        {"{\"prompt\": \"x\", \"structured_outputs\": {\"regex\": \"b\"}}", PL_CONSTRAINT_REGEX, "b"},
        {"{\"prompt\": \"x\", \"structured_outputs\": {\"json_object\": true}}", PL_CONSTRAINT_JSON_OBJECT, NULL},
        {"{\"prompt\": \"x\", \"response_format\": {\"type\": \"text\"}, \"guided_json\": null}", PL_CONSTRAINT_NONE, NULL},
    };
    for (size_t i = 0; i < sizeof OK / sizeof OK[0]; i++) {
        if (parse(OK[i].body, 0, &r, &e)) fail_msg("refused %s: %s", OK[i].body, e.message);
        assert_int_equal(r.params.constraint, OK[i].kind);
        if (OK[i].text) assert_string_equal(r.params.constraint_text, OK[i].text);
        if (OK[i].kind == PL_CONSTRAINT_CHOICE) {
            assert_int_equal(r.params.n_constraint_choices, 2);
            assert_string_equal(r.params.constraint_choices[1], "b");
        }
        pl_server_request_destroy(&r);
    }
    refuse("{\"prompt\": \"x\", \"guided_regex\": \"a\", \"guided_json\": {}}", 0, "guided_regex",
           "only one structured output constraint");
    refuse("{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_object\"}, \"guided_choice\": [\"a\"]}",
           0, "guided_choice", "'response_format' and 'guided_choice'");
    refuse("{\"prompt\": \"x\", \"guided_choice\": []}", 0, "guided_choice", "non-empty list");
    refuse("{\"prompt\": \"x\", \"guided_choice\": [1]}", 0, "guided_choice", "must be a string");
    refuse("{\"prompt\": \"x\", \"guided_regex\": 5}", 0, "guided_regex", "must be a string");
    refuse("{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_schema\"}}", 0,
           "response_format", "json_schema");
    refuse("{\"prompt\": \"x\", \"response_format\": {\"type\": \"yaml\"}}", 0,
           "response_format", "'yaml' is not supported");
    refuse("{\"prompt\": \"x\", \"structured_outputs\": {\"structural_tag\": \"x\"}}", 0,
           "structured_outputs", "not supported");
}

/* The LoRA routes' bodies (vLLM's load / unload_lora_adapter): each refusal a 400 naming its
 * field; other fields ignored. */
static void test_lora_bodies(void **state) {
    (void)state;
    static const struct { const char *body; int path; const char *param; } bad[] = {
        {"{\"lora_path\": \"x\"}", 1, "lora_name"},
        {"{\"lora_name\": 3, \"lora_path\": \"x\"}", 1, "lora_name"},
        {"{\"lora_name\": \"\", \"lora_path\": \"x\"}", 1, "lora_name"},
        {"{\"lora_name\": \"a\\u0000b\", \"lora_path\": \"x\"}", 1, "lora_name"},
        {"{\"lora_name\": \"a\"}", 1, "lora_path"},
        {"{\"lora_name\": \"a\", \"lora_path\": [\"x\"]}", 1, "lora_path"},
        {"[1]", 0, NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pl_server_error e;
        const char *n, *p;
        json_t *o = pl_server_parse_lora_body(bad[i].body, strlen(bad[i].body), bad[i].path, &n,
                                              &p, &e);
        if (o || e.status != 400 || (bad[i].param ? !e.param || strcmp(e.param, bad[i].param) : !!e.param))
            fail_msg("%s: accepted or the wrong param", bad[i].body);
    }
    char name128[160];
    snprintf(name128, sizeof name128, "{\"lora_name\": \"%0128d\"}", 0);
    pl_server_error e;
    const char *n = NULL, *p = NULL;
    assert_null(pl_server_parse_lora_body(name128, strlen(name128), 0, &n, &p, &e));
    const char *ok = "{\"lora_name\": \"sql\", \"lora_path\": \"/a.gguf\", \"lora_int_id\": 1}";
    json_t *o = pl_server_parse_lora_body(ok, strlen(ok), 1, &n, &p, &e);
    assert_non_null(o);
    assert_string_equal(n, "sql");
    assert_string_equal(p, "/a.gguf");
    json_decref(o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lora_bodies),
        cmocka_unit_test(test_tools),
        cmocka_unit_test(test_structured),
        cmocka_unit_test(test_prompt_forms),
        cmocka_unit_test(test_all_fields),
        cmocka_unit_test(test_chat),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_logit_bias),
        cmocka_unit_test(test_unsupported_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
