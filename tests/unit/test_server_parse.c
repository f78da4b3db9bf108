/* Unit tests for src/server/parse.c: each family's thinking and tool-call format parsed whole,
 * and streamed in every split of the text (each prefix parsed as it would be mid-generation):
 * what the stream's deltas add up to equals the whole parse, and no partial parse reports what
 * the whole does not (so no delta carries part of a tag). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "server/server.h"
#include "constrain/constrain.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    pl_reasoning_format r;
    pl_tool_format t;
    int in_reasoning;
    const char *text;
    const char *reasoning, *content; /* expected */
    const char *calls;               /* "name args|name args" or "" */
} pcase;

#define DS_CALLS "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALL "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_SEP "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>"
#define DS_END "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_ENDS "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"

static const pcase CASES[] = {
    /* qwen3 / deepseek_r1 thinking */
    {PL_REASON_QWEN3, PL_TOOLS_NONE, 0, "<think>\nLet me think.\n</think>\n\nThe answer.", "Let me think.", "The answer.", ""},
    {PL_REASON_QWEN3, PL_TOOLS_NONE, 0, "No thinking here.", "", "No thinking here.", ""},
    {PL_REASON_QWEN3, PL_TOOLS_NONE, 0, "<think>cut short", "cut short", "", ""},
    {PL_REASON_DEEPSEEK_R1, PL_TOOLS_NONE, 1, "plan \xc3\xa9t\xc3\xa9\n</think>\n\nok \xe2\x9c\x93", "plan \xc3\xa9t\xc3\xa9", "ok \xe2\x9c\x93", ""},
    {PL_REASON_QWEN3, PL_TOOLS_NONE, 0, "a < b </thinking> c", "", "a < b </thinking> c", ""},
    /* Hermes / Qwen3 */
    {PL_REASON_QWEN3, PL_TOOLS_HERMES, 0,
     "<think>x</think>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>", "x", "", "f {\"a\": 1}"},
    {PL_REASON_NONE, PL_TOOLS_HERMES, 0,
     "Let me look.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"<tool_call> \xc3\xa9\"}}\n</tool_call>\n"
     "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>", "", "Let me look.", "f {\"q\": \"<tool_call> \xc3\xa9\"}|g {}"},
    {PL_REASON_NONE, PL_TOOLS_HERMES, 0, "<tool_call>{\"arguments\": {\"a\": [1, 2]}, \"name\": \"late\"}</tool_call>", "", "", "late {\"a\": [1, 2]}"},
    {PL_REASON_NONE, PL_TOOLS_HERMES, 0, "<tool_call>{\"name\": \"s\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>", "", "", "s {\"a\": 1}"},
    {PL_REASON_NONE, PL_TOOLS_HERMES, 0, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_ca", "", "", "f {}"},
    {PL_REASON_NONE, PL_TOOLS_HERMES, 0, "<tool_call>not json</tool_call>", "", "<tool_call>not json</tool_call>", ""},
    {PL_REASON_NONE, PL_TOOLS_HERMES, 0, "Just text <b>bold</b>.", "", "Just text <b>bold</b>.", ""},
    /* Qwen3-Coder, Qwen3.5, Nemotron 3 (parameter types from the tools: days is an integer) */
    {PL_REASON_QWEN3, PL_TOOLS_QWEN3_CODER, 1,
     "hm\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n"
     "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>", "hm", "", "get_weather {\"city\": \"New York\", \"days\": 3}"},
    {PL_REASON_NONE, PL_TOOLS_QWEN3_CODER, 0, "<tool_call>\n<function=now>\n</function>\n</tool_call>", "", "", "now {}"},
    /* GLM 4.5 / 4.6 */
    {PL_REASON_QWEN3, PL_TOOLS_GLM45, 0,
     "<think>hm</think>\nOK.<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
     "<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>", "hm", "OK.", "get_weather {\"city\": \"Paris\", \"days\": 2}"},
    /* Mistral / Ministral 3 Reasoning / Devstral */
    {PL_REASON_MISTRAL, PL_TOOLS_MISTRAL, 0, "[THINK]hmm[/THINK]Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}",
     "hmm", "Sure.", "get_weather {\"city\": \"Paris\"}"},
    {PL_REASON_NONE, PL_TOOLS_MISTRAL, 0, "[TOOL_CALLS]f[CALL_ID]abc123456[ARGS]{\"a\": 1}[TOOL_CALLS]g[ARGS]{}", "", "", "f {\"a\": 1}|g {}"},
    {PL_REASON_NONE, PL_TOOLS_MISTRAL, 0, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": [1]}}, {\"name\": \"g\", \"arguments\": {}}]",
     "", "", "f {\"a\": [1]}|g {}"},
    /* DeepSeek V3.1 */
    {PL_REASON_DEEPSEEK_R1, PL_TOOLS_DEEPSEEK_V31, 1,
     "think</think>ok" DS_CALLS DS_CALL "f" DS_SEP "{\"a\": 1}" DS_END DS_CALL "g" DS_SEP "{}" DS_END DS_ENDS, "think", "ok", "f {\"a\": 1}|g {}"},
    /* Kimi K2 */
    {PL_REASON_QWEN3, PL_TOOLS_KIMI_K2, 0,
     "<think>t</think>Calling.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
     "{\"city\": \"Paris\"}<|tool_call_end|><|tool_calls_section_end|>", "t", "Calling.", "get_weather {\"city\": \"Paris\"}"},
    /* gpt-oss harmony */
    {PL_REASON_GPT_OSS, PL_TOOLS_HARMONY, 0,
     "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hi there.<|return|>", "Think.", "Hi there.", ""},
    {PL_REASON_GPT_OSS, PL_TOOLS_HARMONY, 0,
     "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
     "<|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>", "Need weather.", "", "get_weather {\"city\": \"Paris\"}"},
    /* Gemma 4 */
    {PL_REASON_GEMMA4, PL_TOOLS_GEMMA4, 0,
     "<|channel>thought\nhmm<channel|>Sure<|tool_call>call:f{city:<|\"|>Paris, \"FR\"<|\"|>,n:2,tags:[<|\"|>a<|\"|>,1]}<tool_call|>",
     "hmm", "Sure", "f {\"city\":\"Paris, \\\"FR\\\"\",\"n\":2,\"tags\":[\"a\",1]}"},
    /* Llama 3.x: the whole answer is calls, or it is text */
    {PL_REASON_NONE, PL_TOOLS_LLAMA3, 0, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\", \"parameters\": {\"x\": 1}}",
     "", "", "f {}|g {\"x\": 1}"},
    {PL_REASON_NONE, PL_TOOLS_LLAMA3, 0, "{\"name\": \"f\", \"parameters\": {}} and more words", "",
     "{\"name\": \"f\", \"parameters\": {}} and more words", ""},
};

static const char TOOL_DEFS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}}}}}]";

static void calls_str(const pl_parsed *p, char *out, size_t cap) {
    size_t n = 0;
    out[0] = 0;
    for (int i = 0; i < p->n_calls; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s%s %.*s", i ? "|" : "", p->calls[i].name,
                              (int)p->calls[i].args.len, p->calls[i].args.p ? p->calls[i].args.p : "");
}

static int is_prefix(const pl_strbuf *a, const pl_strbuf *b) {
    return a->len <= b->len && (!a->len || !memcmp(a->p, b->p, a->len));
}

/* Concatenate a delta's members into the stream's copies. */
static void collect(json_t *delta, pl_strbuf *r, pl_strbuf *c, pl_strbuf *calls_name, pl_strbuf *args,
                    int *n_calls) {
    const char *s;
    if ((s = json_string_value(json_object_get(delta, "reasoning_content")))) pl_strbuf_puts(r, s);
    if ((s = json_string_value(json_object_get(delta, "content")))) pl_strbuf_puts(c, s);
    size_t i;
    json_t *tc;
    json_array_foreach(json_object_get(delta, "tool_calls"), i, tc) {
        int idx = (int)json_integer_value(json_object_get(tc, "index"));
        json_t *fn = json_object_get(tc, "function");
        if (json_object_get(tc, "id")) {
            assert_int_equal(idx, *n_calls);
            const char *id = json_string_value(json_object_get(tc, "id"));
            assert_true(id && !strncmp(id, "call_", 5) && strlen(id) == 14);
            assert_string_equal(json_string_value(json_object_get(tc, "type")), "function");
            assert_non_null(json_string_value(json_object_get(fn, "name")));
            (*n_calls)++;
            pl_strbuf_puts(calls_name, "");
        } else {
            assert_true(idx < *n_calls);
            assert_null(json_object_get(fn, "name"));
        }
        assert_non_null(json_string_value(json_object_get(fn, "arguments")));
        if (json_object_get(tc, "id"))
            pl_strbuf_printf(&args[idx], "%s %s", json_string_value(json_object_get(fn, "name")),
                             json_string_value(json_object_get(fn, "arguments")));
        else
            pl_strbuf_puts(&args[idx], json_string_value(json_object_get(fn, "arguments")));
    }
}

static void test_parsers(void **state) {
    (void)state;
    json_t *defs = json_loads(TOOL_DEFS, 0, NULL);
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const pcase *t = &CASES[i];
        pl_parse_cfg cfg = {.reasoning = t->r, .tools = t->t, .in_reasoning = t->in_reasoning, .tool_defs = defs};
        size_t n = strlen(t->text);
        pl_parsed whole;
        assert_int_equal(pl_parse_text(&cfg, t->text, n, 1, &whole), 0);
        char calls[1024];
        calls_str(&whole, calls, sizeof calls);
        if (whole.reasoning.len != strlen(t->reasoning) || memcmp(whole.reasoning.p ? whole.reasoning.p : "", t->reasoning, whole.reasoning.len) ||
            whole.content.len != strlen(t->content) || memcmp(whole.content.p ? whole.content.p : "", t->content, whole.content.len) ||
            strcmp(calls, t->calls))
            fail_msg("case %zu: reasoning [%.*s] content [%.*s] calls [%s]", i, (int)whole.reasoning.len,
                     whole.reasoning.p ? whole.reasoning.p : "", (int)whole.content.len, whole.content.p ? whole.content.p : "", calls);
        for (int k = 0; k < whole.n_calls; k++) { /* the arguments are JSON objects */
            json_t *a = json_loadb(whole.calls[k].args.p, whole.calls[k].args.len, 0, NULL);
            if (!json_is_object(a)) fail_msg("case %zu: call %d's arguments are not an object", i, k);
            json_decref(a);
            assert_true(whole.calls[k].done);
        }
        /* streamed: every prefix is parsed as more may come, the last as whole */
        pl_parse_sent sent = {0};
        pl_strbuf r = {0}, c = {0}, names = {0}, args[8] = {{0}};
        int n_calls = 0;
        for (size_t len = 0; len <= n; len++) {
            pl_parsed p;
            assert_int_equal(pl_parse_text(&cfg, t->text, len, len == n, &p), 0);
            if (!is_prefix(&p.reasoning, &whole.reasoning) || !is_prefix(&p.content, &whole.content) ||
                p.n_calls > whole.n_calls)
                fail_msg("case %zu: the parse of %zu bytes is not a prefix of the whole", i, len);
            for (int k = 0; k < p.n_calls; k++)
                if (strcmp(p.calls[k].name, whole.calls[k].name) || !is_prefix(&p.calls[k].args, &whole.calls[k].args))
                    fail_msg("case %zu: call %d after %zu bytes: %s [%.*s]", i, k, len, p.calls[k].name,
                             (int)p.calls[k].args.len, p.calls[k].args.p);
            json_t *delta = json_object();
            assert_true(pl_parse_diff(&p, &sent, delta) >= 0);
            collect(delta, &r, &c, &names, args, &n_calls);
            json_decref(delta);
            pl_parsed_destroy(&p);
        }
        char streamed[1024] = "";
        size_t sl = 0;
        for (int k = 0; k < n_calls; k++)
            sl += (size_t)snprintf(streamed + sl, sizeof streamed - sl, "%s%.*s", k ? "|" : "", (int)args[k].len, args[k].p);
        if (r.len != whole.reasoning.len || c.len != whole.content.len || strcmp(streamed, calls) ||
            (r.len && memcmp(r.p, whole.reasoning.p, r.len)) || (c.len && memcmp(c.p, whole.content.p, c.len)))
            fail_msg("case %zu: streamed reasoning [%.*s] content [%.*s] calls [%s]", i, (int)r.len, r.p ? r.p : "",
                     (int)c.len, c.p ? c.p : "", streamed);
        pl_strbuf_destroy(&r);
        pl_strbuf_destroy(&c);
        pl_strbuf_destroy(&names);
        for (int k = 0; k < 8; k++) pl_strbuf_destroy(&args[k]);
        pl_parse_sent_destroy(&sent);
        /* the whole calls in OpenAI's shape */
        json_t *cj = pl_parsed_calls_json(&whole);
        assert_int_equal(cj ? (int)json_array_size(cj) : 0, whole.n_calls);
        json_decref(cj);
        pl_parsed_destroy(&whole);
    }
    json_decref(defs);
}

static void test_detect(void **state) {
    (void)state;
    static const struct { const char *file; pl_reasoning_format r; pl_tool_format t; } T[] = {
        {"Qwen-Qwen3-0.6B.jinja", PL_REASON_QWEN3, PL_TOOLS_HERMES},
        {"Qwen3-Coder.jinja", PL_REASON_NONE, PL_TOOLS_QWEN3_CODER},
        {"Qwen3.5-4B.jinja", PL_REASON_QWEN3, PL_TOOLS_QWEN3_CODER},
        {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", PL_REASON_QWEN3, PL_TOOLS_QWEN3_CODER},
        {"openai-gpt-oss-120b.jinja", PL_REASON_GPT_OSS, PL_TOOLS_HARMONY},
        {"google-gemma-4-31B-it.jinja", PL_REASON_GEMMA4, PL_TOOLS_GEMMA4},
        {"mistralai-Ministral-3-14B-Reasoning-2512.jinja", PL_REASON_MISTRAL, PL_TOOLS_MISTRAL},
        {"unsloth-mistral-Devstral-Small-2507.jinja", PL_REASON_NONE, PL_TOOLS_MISTRAL},
        {"Mistral-Small-3.2-24B-Instruct-2506.jinja", PL_REASON_NONE, PL_TOOLS_MISTRAL},
        {"deepseek-ai-DeepSeek-V3.1.jinja", PL_REASON_DEEPSEEK_R1, PL_TOOLS_DEEPSEEK_V31},
        {"GLM-4.6.jinja", PL_REASON_QWEN3, PL_TOOLS_GLM45},
        {"moonshotai-Kimi-K2.jinja", PL_REASON_NONE, PL_TOOLS_KIMI_K2},
        {"ibm-granite-granite-4.0.jinja", PL_REASON_NONE, PL_TOOLS_HERMES},
        {"HuggingFaceTB-SmolLM3-3B.jinja", PL_REASON_QWEN3, PL_TOOLS_NONE},
    };
    const char *dir = getenv("PL_SHARED_DIR");
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/testdata/chat-templates-2026/%s", dir ? dir : "../shared", T[i].file);
        FILE *f = fopen(path, "rb");
        if (!f) fail_msg("cannot open %s", path);
        static char buf[1 << 20];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        pl_reasoning_format r;
        pl_tool_format t;
        pl_parse_detect(buf, n, &r, &t);
        if (r != T[i].r || t != T[i].t) fail_msg("%s: reasoning %d tools %d, want %d %d", T[i].file, r, t, T[i].r, T[i].t);
    }
    pl_reasoning_format r;
    assert_int_equal(pl_reasoning_parser_by_name("deepseek_r1", &r), 0);
    assert_int_equal(r, PL_REASON_DEEPSEEK_R1);
    assert_int_equal(pl_reasoning_parser_by_name("nope", &r), -1);
    assert_string_equal(pl_reasoning_parser_name(PL_REASON_GPT_OSS), "gpt_oss");
    /* the prompt opened the thinking, or closed it (enable_thinking false) */
    assert_int_equal(pl_parse_prompt_opens_thinking(PL_REASON_QWEN3, "<|im_start|>assistant\n<think>\n", 30), 1);
    const char *off = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    assert_int_equal(pl_parse_prompt_opens_thinking(PL_REASON_QWEN3, off, strlen(off)), 0);
    assert_int_equal(pl_parse_prompt_opens_thinking(PL_REASON_QWEN3, "<|im_start|>assistant\n", 22), 0);
}

/* tool_choice "required": one call in the family's format, its arguments by the schema */
static void test_tool_grammar(void **state) {
    (void)state;
    static const pl_tool_format F[] = {PL_TOOLS_HERMES, PL_TOOLS_LLAMA3, PL_TOOLS_MISTRAL, PL_TOOLS_DEEPSEEK_V31,
                                       PL_TOOLS_KIMI_K2, PL_TOOLS_HARMONY, PL_TOOLS_QWEN3_CODER, PL_TOOLS_GLM45,
                                       PL_TOOLS_GEMMA4};
    const char *tools = "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
                        "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": "
                        "{\"type\": \"integer\"}}, \"required\": [\"city\", \"days\"]}}}, {\"type\": \"function\", "
                        "\"function\": {\"name\": \"now\"}}]";
    static const char *const ACCEPT[] = {
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>",
        "{\"name\": \"now\", \"parameters\": {}}",
        "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"days\": 2}",
        DS_CALLS DS_CALL "now" DS_SEP "{}" DS_END DS_ENDS,
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.now:0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"P\", \"days\": 1}<|call|>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
        "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:2}<tool_call|>",
    };
    for (size_t i = 0; i < sizeof F / sizeof *F; i++) {
        char *g = NULL;
        pl_server_error e;
        if (pl_server_tool_grammar(F[i], tools, NULL, &g, &e)) fail_msg("format %d: %s", F[i], e.message);
        pl_grammar *gr;
        if (pl_grammar_parse(g, &gr) != PL_OK) fail_msg("format %d: %s\n%s", F[i], pl_last_error(), g);
        pl_gscratch *sc = pl_gscratch_create();
        pl_gstate st = {0};
        assert_int_equal(pl_gstate_start(gr, sc, &st), PL_OK);
        int ok = pl_gstate_advance(gr, sc, &st, (const uint8_t *)ACCEPT[i], strlen(ACCEPT[i]));
        if (ok != 1) fail_msg("format %d rejects [%s]\n%s", F[i], ACCEPT[i], g);
        /* and a call whose arguments break the schema is refused */
        pl_gstate_free(&st);
        assert_int_equal(pl_gstate_start(gr, sc, &st), PL_OK);
        const char *bad = F[i] == PL_TOOLS_HERMES ? "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"days\": \"x\""
                          : F[i] == PL_TOOLS_GEMMA4 ? "<|tool_call>call:get_weather{\"city\":" /* JSON's keys */
                                                    : "nothing like a call";
        assert_int_equal(pl_gstate_advance(gr, sc, &st, (const uint8_t *)bad, strlen(bad)), 0);
        pl_gstate_free(&st);
        pl_gscratch_destroy(sc);
        pl_grammar_destroy(gr);
        free(g);
    }
    /* a schema the automaton cannot compile names its tool; a format that cannot be constrained
     * names tool_choice */
    char *g = NULL;
    pl_server_error e;
    assert_int_equal(pl_server_tool_grammar(PL_TOOLS_HERMES, "[{\"type\": \"function\", \"function\": {\"name\": \"f\", "
                                            "\"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"$ref\": \"#/nope\"}}, "
                                            "\"required\": [\"a\"]}}}]", NULL, &g, &e), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.param, "tools");
    assert_non_null(strstr(e.message, "tools[0]"));
    assert_int_equal(pl_server_tool_grammar(PL_TOOLS_NONE, "[]", NULL, &g, &e), -1);
    assert_string_equal(e.param, "tool_choice");
}

/* Gemma 4's arguments: bare keys, <|"|> strings, enum and const values in that syntax, nothing
 * between the parts; what the grammar accepts, the parser turns into the JSON arguments. */
static void test_tool_grammar_gemma(void **state) {
    (void)state;
    const char *tools = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
                        "{\"type\": \"object\", \"properties\": {\"city\": {\"enum\": [\"Paris\", \"London\"]}, "
                        "\"opt\": {\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\"}, "
                        "\"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\", \"maxLength\": 3}}}}, "
                        "\"k\": {\"const\": {\"a\": [true, null]}}}, \"required\": [\"city\", \"k\"]}}}]";
    char *g = NULL;
    pl_server_error e;
    if (pl_server_tool_grammar(PL_TOOLS_GEMMA4, tools, NULL, &g, &e)) fail_msg("%s", e.message);
    pl_grammar *gr;
    if (pl_grammar_parse(g, &gr) != PL_OK) fail_msg("%s\n%s", pl_last_error(), g);
    pl_gscratch *sc = pl_gscratch_create();
    static const struct { const char *text; int ok; } T[] = {
        {"<|tool_call>call:f{city:<|\"|>London<|\"|>,opt:{n:-3,tags:[<|\"|>ab<|\"|>]},k:{a:[true,null]}}<tool_call|>", 1},
        {"<|tool_call>call:f{city:<|\"|>Paris<|\"|>,k:{a:[true,null]}}<tool_call|>", 1},
        {"<|tool_call>call:f{city:<|\"|>Rome<|\"|>", 0},                     /* not in the enum */
        {"<|tool_call>call:f{city:\"Paris\"", 0},                             /* JSON's string */
        {"<|tool_call>call:f{city: <|\"|>Paris", 0},                          /* whitespace */
        {"<|tool_call>call:f{city:<|\"|>Paris<|\"|>,opt:{tags:[<|\"|>abcd", 0}, /* maxLength */
        {"<|tool_call>call:f{city:<|\"|>Paris<|\"|>}", 0},                    /* k is required */
    };
    for (size_t i = 0; i < sizeof T / sizeof *T; i++) {
        pl_gstate st = {0};
        assert_int_equal(pl_gstate_start(gr, sc, &st), PL_OK);
        int ok = pl_gstate_advance(gr, sc, &st, (const uint8_t *)T[i].text, strlen(T[i].text));
        if (T[i].ok && ok == 1) ok = pl_gstate_accepting(&st);
        if ((ok == 1) != T[i].ok) fail_msg("[%s]: %d, want %d\n%s", T[i].text, ok, T[i].ok, g);
        pl_gstate_free(&st);
    }
    /* the accepted call parses into JSON arguments */
    pl_parse_cfg cfg = {.tools = PL_TOOLS_GEMMA4};
    pl_parsed out = {0};
    const char *text = T[0].text;
    assert_int_equal(pl_parse_text(&cfg, text, strlen(text), 1, &out), 0);
    assert_int_equal(out.n_calls, 1);
    assert_string_equal(out.calls[0].name, "f");
    assert_string_equal(out.calls[0].args.p, "{\"city\":\"London\",\"opt\":{\"n\":-3,\"tags\":[\"ab\"]},\"k\":{\"a\":[true,null]}}");
    pl_parsed_destroy(&out);
    pl_gscratch_destroy(sc);
    pl_grammar_destroy(gr);
    free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parsers),
        cmocka_unit_test(test_detect),
        cmocka_unit_test(test_tool_grammar),
        cmocka_unit_test(test_tool_grammar_gemma),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
