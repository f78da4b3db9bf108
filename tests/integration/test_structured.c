/* Structured output through the engine (stories260K): greedy, seeded sampling with n > 1 and a
 * recompute-preempted run produce text the constraint's automaton accepts and that ends with
 * "stop"; a preempted seeded run equals an unpreempted one; bad constraints are refused with a
 * message; beam search with a constraint is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "constrain/constrain.h"
#include "engine_util.h"

#include <jansson.h>

#define STORIES PL_SHARED_DIR "/models/stories260K.gguf"

static const char SCHEMA[] =
    "{\"type\": \"object\", \"properties\": {"
    " \"name\": {\"type\": \"string\", \"maxLength\": 10},"
    " \"age\": {\"type\": \"integer\"},"
    " \"mood\": {\"enum\": [\"happy\", \"sad\"]},"
    " \"friends\": {\"type\": \"array\", \"items\": {\"type\": \"string\", \"maxLength\": 6}, \"maxItems\": 2}},"
    " \"required\": [\"name\", \"age\", \"mood\"], \"additionalProperties\": false}";

static pl_engine *make_engine(uint64_t kv_bytes) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = STORIES;
    c.threads = 1;
    c.kv_cache_memory = kv_bytes;
    c.block_size = 16;
    pl_engine *e = NULL;
    if (pl_engine_create(&c, &e) != PL_OK) fail_msg("engine: %s", pl_last_error());
    return e;
}

static int matches(pl_constraint_kind kind, const char *spec, const char *const *ch, int n_ch,
                   const char *text) {
    char *gbnf;
    pl_grammar *g;
    assert_int_equal(pl_cons_to_gbnf(kind, spec, ch, n_ch, &gbnf), PL_OK);
    assert_int_equal(pl_grammar_parse(gbnf, &g), PL_OK);
    int m = pl_grammar_matches(g, text, strlen(text));
    pl_grammar_destroy(g);
    free(gbnf);
    return m;
}

static void params(pl_request_params *p, pl_constraint_kind kind, const char *spec, int n,
                   float temp, uint64_t seed) {
    pl_request_params_default(p);
    p->constraint = kind;
    p->constraint_text = spec;
    p->n = n;
    p->max_tokens = 300;
    p->sampling.temperature = temp;
    p->has_seed = 1;
    p->seed = seed;
}

static void check_results(const result *r, int n, pl_constraint_kind kind, const char *spec,
                          const char *const *ch, int n_ch) {
    assert_true(r->finished);
    for (int k = 0; k < n; k++) {
        if (r->finish[k] != PL_FINISH_STOP) fail_msg("completion %d: finish %d: '%s'", k, r->finish[k], r->text[k]);
        if (matches(kind, spec, ch, n_ch, r->text[k]) != 1) fail_msg("completion %d is not accepted: '%s'", k, r->text[k]);
    }
}

static void test_schema_greedy_and_sampled(void **state) {
    (void)state;
    pl_engine *e = make_engine(16 << 20);
    pl_request_params p;
    uint64_t ids[3];
    static result res[3];
    memset(res, 0, sizeof res);
    params(&p, PL_CONSTRAINT_JSON_SCHEMA, SCHEMA, 1, 0, 1);
    assert_int_equal(pl_engine_add_request(e, "Once upon a time", NULL, 0, &p, &ids[0]), PL_OK);
    params(&p, PL_CONSTRAINT_JSON_SCHEMA, SCHEMA, 4, 1.0f, 42);
    assert_int_equal(pl_engine_add_request(e, "Lily liked", NULL, 0, &p, &ids[1]), PL_OK);
    params(&p, PL_CONSTRAINT_JSON_OBJECT, NULL, 2, 0.8f, 7);
    p.max_tokens = 400;
    assert_int_equal(pl_engine_add_request(e, "Tom", NULL, 0, &p, &ids[2]), PL_OK);
    run_all(e, ids, res, 3);
    check_results(&res[0], 1, PL_CONSTRAINT_JSON_SCHEMA, SCHEMA, NULL, 0);
    check_results(&res[1], 4, PL_CONSTRAINT_JSON_SCHEMA, SCHEMA, NULL, 0);
    if (getenv("PL_VERBOSE")) for (int k = 0; k < 4; k++) print_message("%s\n", res[1].text[k]);
    for (int k = 0; k < 2; k++) /* json_object: valid JSON objects unless cut by max_tokens */
        if (res[2].finish[k] == PL_FINISH_STOP) {
            json_t *v = json_loads(res[2].text[k], 0, NULL);
            if (!json_is_object(v)) fail_msg("not a JSON object: '%s'", res[2].text[k]);
            json_decref(v);
        }
    /* the sampled completions differ from each other (n > 1 forks the automaton state) */
    assert_true(strcmp(res[1].text[0], res[1].text[1]) || strcmp(res[1].text[1], res[1].text[2]));
    pl_engine_destroy(e);
}

static void test_regex_choice(void **state) {
    (void)state;
    pl_engine *e = make_engine(16 << 20);
    const char *re = "(yes|no), [0-9]{1,3} (cats?|dogs?)\\.";
    const char *const ch[] = {"The cat sat.", "A dog ran!", "Lily"};
    pl_request_params p;
    uint64_t ids[2];
    static result res[2];
    memset(res, 0, sizeof res);
    params(&p, PL_CONSTRAINT_REGEX, re, 3, 1.0f, 3);
    p.stop = (const char *const[]){"zzz"}; /* stop strings and constraints coexist */
    p.n_stop = 1;
    assert_int_equal(pl_engine_add_request(e, "Once", NULL, 0, &p, &ids[0]), PL_OK);
    params(&p, PL_CONSTRAINT_CHOICE, NULL, 3, 1.0f, 9);
    p.constraint_choices = ch;
    p.n_constraint_choices = 3;
    assert_int_equal(pl_engine_add_request(e, "Once", NULL, 0, &p, &ids[1]), PL_OK);
    run_all(e, ids, res, 2);
    check_results(&res[0], 3, PL_CONSTRAINT_REGEX, re, NULL, 0);
    check_results(&res[1], 3, PL_CONSTRAINT_CHOICE, NULL, ch, 3);
    pl_engine_destroy(e);
}

/* Eight concurrent seeded requests in a KV cache that holds about two of them: recompute
 * preemption replays their outputs; the automaton state survives, and each result equals the
 * request run alone. */
static void test_preemption(void **state) {
    (void)state;
    enum { N = 8 };
    static result alone[N], crowd[N];
    memset(alone, 0, sizeof alone);
    memset(crowd, 0, sizeof crowd);
    pl_request_params p;
    uint64_t ids[N];
    pl_engine *e = make_engine(16 << 20);
    for (int i = 0; i < N; i++) {
        params(&p, PL_CONSTRAINT_JSON_SCHEMA, SCHEMA, 1, 1.0f, 100 + (uint64_t)i);
        assert_int_equal(pl_engine_add_request(e, "Once upon a time", NULL, 0, &p, &ids[i]), PL_OK);
        run_all(e, &ids[i], &alone[i], 1);
    }
    pl_engine_destroy(e);
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = STORIES;
    c.threads = 1;
    c.block_size = 16;
    /* stories260K: 5 layers x (K, V) x 32 dims x 2 bytes (f16) = 640 bytes per token; 28 blocks
     * of 16 tokens: a request may need 21, eight need about 40 */
    c.kv_cache_memory = 28ull * 16 * 640;
    e = NULL;
    assert_int_equal(pl_engine_create(&c, &e), PL_OK);
    for (int i = 0; i < N; i++) {
        params(&p, PL_CONSTRAINT_JSON_SCHEMA, SCHEMA, 1, 1.0f, 100 + (uint64_t)i);
        assert_int_equal(pl_engine_add_request(e, "Once upon a time", NULL, 0, &p, &ids[i]), PL_OK);
    }
    run_all(e, ids, crowd, N);
    pl_engine_stats st;
    pl_engine_get_stats(e, &st);
    for (int i = 0; i < N; i++) {
        check_results(&crowd[i], 1, PL_CONSTRAINT_JSON_SCHEMA, SCHEMA, NULL, 0);
        assert_string_equal(crowd[i].text[0], alone[i].text[0]);
    }
    assert_true(st.preemptions > 0);
    pl_engine_destroy(e);
}

static void expect_refused(pl_engine *e, pl_constraint_kind kind, const char *spec, const char *needle,
                           int beam) {
    pl_request_params p;
    params(&p, kind, spec, 1, 0, 1);
    if (beam) p.use_beam_search = 1, p.best_of = 2;
    uint64_t id;
    assert_int_equal(pl_engine_add_request(e, "Once", NULL, 0, &p, &id), PL_ERR_INVALID_ARG);
    if (!strstr(pl_last_error(), needle)) fail_msg("message '%s' lacks '%s'", pl_last_error(), needle);
}

static void test_refused(void **state) {
    (void)state;
    pl_engine *e = make_engine(16 << 20);
    expect_refused(e, PL_CONSTRAINT_REGEX, "a(b", "regex: missing ')'", 0);
    expect_refused(e, PL_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"number\", \"multipleOf\": 1}", "'multipleOf' is not supported", 0);
    expect_refused(e, PL_CONSTRAINT_GRAMMAR, "root ::= foo", "rule 'foo' is used", 0);
    expect_refused(e, PL_CONSTRAINT_REGEX, "a", "not supported with beam search", 1);
    expect_refused(e, PL_CONSTRAINT_CHOICE, NULL, "choice: the list of choices is empty", 0);
    pl_engine_destroy(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schema_greedy_and_sampled),
        cmocka_unit_test(test_regex_choice),
        cmocka_unit_test(test_preemption),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
