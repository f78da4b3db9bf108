/* Structured output through the engine (stories260K): greedy, seeded sampling with n > 1 and a
 * recompute-preempted run produce text that satisfies the constraint and ends with "stop"; a
 * preempted seeded run equals an unpreempted one; bad constraints are refused with a message;
 * beam search with a constraint is refused.
 *
 * The outputs are checked independently of the automaton that enforced them: a JSON schema's
 * constraints by a small validator over jansson's parse (the keywords SCHEMA uses), a regex by
 * PCRE2 (anchored at both ends), a choice by string comparison, json_object by jansson. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "engine_util.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

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

/* Code points of a UTF-8 string (JSON Schema's maxLength counts those). */
static size_t utf8_len(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* 1 when v satisfies schema: type (object, array, string, integer), properties, required,
 * additionalProperties false, enum, maxLength, items, maxItems; the keywords SCHEMA uses, and a
 * schema with any other keyword fails the test rather than pass unchecked. why gets the first
 * violation. */
static int schema_valid(const json_t *schema, const json_t *v, char *why, size_t n_why) {
    const char *key;
    json_t *kw;
    json_object_foreach((json_t *)schema, key, kw) {
        if (strcmp(key, "type") && strcmp(key, "properties") && strcmp(key, "required") &&
            strcmp(key, "additionalProperties") && strcmp(key, "enum") && strcmp(key, "maxLength") &&
            strcmp(key, "items") && strcmp(key, "maxItems"))
            fail_msg("the test's validator does not know the keyword '%s'", key);
    }
    const char *type = json_string_value(json_object_get(schema, "type"));
    if (type) {
        int ok = 0;
        if (!strcmp(type, "object")) ok = json_is_object(v);
        else if (!strcmp(type, "array")) ok = json_is_array(v);
        else if (!strcmp(type, "string")) ok = json_is_string(v);
        else if (!strcmp(type, "integer")) ok = json_is_integer(v);
        else fail_msg("type '%s' unknown to the validator", type);
        if (!ok) return snprintf(why, n_why, "not of type %s", type), 0;
    }
    const json_t *en = json_object_get(schema, "enum");
    if (en) {
        size_t i;
        json_t *x;
        int found = 0;
        json_array_foreach(en, i, x) found |= json_equal(x, (json_t *)v);
        if (!found) return snprintf(why, n_why, "not one of the enum"), 0;
    }
    const json_t *ml = json_object_get(schema, "maxLength");
    if (ml && json_is_string(v) && utf8_len(json_string_value(v)) > (size_t)json_integer_value(ml))
        return snprintf(why, n_why, "'%s' longer than %lld", json_string_value(v),
                        (long long)json_integer_value(ml)), 0;
    if (json_is_array(v)) {
        const json_t *mi = json_object_get(schema, "maxItems"), *items = json_object_get(schema, "items");
        if (mi && json_array_size(v) > (size_t)json_integer_value(mi))
            return snprintf(why, n_why, "%zu items, at most %lld", json_array_size(v),
                            (long long)json_integer_value(mi)), 0;
        size_t i;
        json_t *x;
        json_array_foreach((json_t *)v, i, x) if (items && !schema_valid(items, x, why, n_why)) return 0;
    }
    if (json_is_object(v)) {
        const json_t *props = json_object_get(schema, "properties");
        const json_t *req = json_object_get(schema, "required");
        const json_t *add = json_object_get(schema, "additionalProperties");
        size_t i;
        json_t *x;
        json_array_foreach(req, i, x) if (!json_object_get(v, json_string_value(x)))
            return snprintf(why, n_why, "required '%s' missing", json_string_value(x)), 0;
        json_object_foreach((json_t *)v, key, x) {
            const json_t *sub = props ? json_object_get(props, key) : NULL;
            if (!sub && json_is_false(add)) return snprintf(why, n_why, "extra property '%s'", key), 0;
            if (sub && !schema_valid(sub, x, why, n_why)) return 0;
        }
    }
    return 1;
}

/* 1 when the whole text is one JSON value (duplicate keys refused) that satisfies the schema. */
static int json_schema_ok(const char *spec, const char *text, char *why, size_t n_why) {
    json_error_t err;
    json_t *schema = json_loads(spec, 0, &err);
    if (!schema) fail_msg("the test's schema: %s", err.text);
    json_t *v = json_loads(text, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &err);
    int ok = v ? schema_valid(schema, v, why, n_why) : (snprintf(why, n_why, "%s", err.text), 0);
    json_decref(v);
    json_decref(schema);
    return ok;
}

/* 1 when PCRE2 matches the regex against the whole text. */
static int regex_ok(const char *re, const char *text) {
    int code;
    PCRE2_SIZE off;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED,
                                  PCRE2_ANCHORED | PCRE2_ENDANCHORED | PCRE2_UTF, &code, &off, NULL);
    if (!c) fail_msg("PCRE2 does not compile the test's regex '%s' (error %d)", re, code);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(c, NULL);
    int rc = pcre2_match(c, (PCRE2_SPTR)text, strlen(text), 0, 0, md, NULL);
    pcre2_match_data_free(md);
    pcre2_code_free(c);
    return rc >= 0;
}

/* 1 when the text satisfies the constraint, judged without the constraint compiler. */
static int satisfies(pl_constraint_kind kind, const char *spec, const char *const *ch, int n_ch,
                     const char *text, char *why, size_t n_why) {
    snprintf(why, n_why, "no match");
    switch (kind) {
    case PL_CONSTRAINT_JSON_SCHEMA: return json_schema_ok(spec, text, why, n_why);
    case PL_CONSTRAINT_REGEX: return regex_ok(spec, text);
    case PL_CONSTRAINT_CHOICE:
        for (int i = 0; i < n_ch; i++)
            if (!strcmp(ch[i], text)) return 1;
        return 0;
    case PL_CONSTRAINT_JSON_OBJECT: {
        json_error_t err;
        json_t *v = json_loads(text, 0, &err);
        int ok = json_is_object(v);
        if (!v) snprintf(why, n_why, "%s", err.text);
        json_decref(v);
        return ok;
    }
    default: fail_msg("constraint kind %d unknown to the test", (int)kind);
    }
    return 0;
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
        char why[256];
        if (r->finish[k] != PL_FINISH_STOP) fail_msg("completion %d: finish %d: '%s'", k, r->finish[k], r->text[k]);
        if (!satisfies(kind, spec, ch, n_ch, r->text[k], why, sizeof why))
            fail_msg("completion %d breaks its constraint (%s): '%s'", k, why, r->text[k]);
    }
}

/* The id of the token whose text is `piece`. */
static int32_t token_id(const pl_engine *e, const char *piece) {
    const pl_tokenizer *t = pl_engine_tokenizer(e);
    char buf[64];
    for (int32_t id = 0; id < pl_tokenizer_n_vocab(t); id++) {
        size_t n = pl_token_to_piece(t, id, buf, sizeof buf - 1, 0);
        if (n == strlen(piece) && !memcmp(buf, piece, n)) return id;
    }
    fail_msg("no token '%s'", piece);
    return -1;
}

static void test_schema_greedy_and_sampled(void **state) {
    (void)state;
    pl_engine *e = make_engine(16 << 20);
    pl_request_params p;
    uint64_t ids[4];
    static result res[4];
    memset(res, 0, sizeof res);
    params(&p, PL_CONSTRAINT_JSON_SCHEMA, SCHEMA, 1, 0, 1);
    assert_int_equal(pl_engine_add_request(e, "Once upon a time", NULL, 0, &p, &ids[0]), PL_OK);
    params(&p, PL_CONSTRAINT_JSON_SCHEMA, SCHEMA, 4, 1.0f, 42);
    assert_int_equal(pl_engine_add_request(e, "Lily liked", NULL, 0, &p, &ids[1]), PL_OK);
    params(&p, PL_CONSTRAINT_JSON_OBJECT, NULL, 2, 0.8f, 7);
    p.max_tokens = 400;
    assert_int_equal(pl_engine_add_request(e, "Tom", NULL, 0, &p, &ids[2]), PL_OK);
    /* stories260K left alone writes story text into a json_object's strings until max_tokens
     * (above). Biased towards ' "' and '}' (which the mask must still refuse where it would
     * break the object, e.g. '}' inside a string is text), its objects close and end with stop. */
    params(&p, PL_CONSTRAINT_JSON_OBJECT, NULL, 4, 1.0f, 7);
    const pl_logit_bias bias[] = {{token_id(e, " \""), 8.0f}, {token_id(e, "}"), 20.0f}};
    p.sampling.logit_bias = bias;
    p.sampling.n_logit_bias = 2;
    assert_int_equal(pl_engine_add_request(e, "Tom", NULL, 0, &p, &ids[3]), PL_OK);
    run_all(e, ids, res, 4);
    check_results(&res[0], 1, PL_CONSTRAINT_JSON_SCHEMA, SCHEMA, NULL, 0);
    check_results(&res[1], 4, PL_CONSTRAINT_JSON_SCHEMA, SCHEMA, NULL, 0);
    if (getenv("PL_VERBOSE")) for (int k = 0; k < 4; k++) print_message("%s\n", res[1].text[k]);
    /* json_object: valid JSON objects unless cut by max_tokens, and at least one not cut */
    int stopped = 0;
    for (int r = 2; r < 4; r++)
        for (int k = 0; k < (r == 2 ? 2 : 4); k++) {
            char why[256];
            const char *text = res[r].text[k];
            if (getenv("PL_VERBOSE")) print_message("json_object %d.%d (finish %d): %s\n", r, k, res[r].finish[k], text);
            if (res[r].finish[k] != PL_FINISH_STOP) continue;
            stopped++;
            if (!satisfies(PL_CONSTRAINT_JSON_OBJECT, NULL, NULL, 0, text, why, sizeof why))
                fail_msg("json_object completion %d.%d is not a JSON object (%s): '%s'", r, k, why, text);
        }
    if (!stopped) fail_msg("no json_object completion ended with stop: nothing was checked");
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
    uint64_t ids[3];
    static result res[3];
    memset(res, 0, sizeof res);
    params(&p, PL_CONSTRAINT_REGEX, re, 3, 1.0f, 3);
    p.stop = (const char *const[]){"zzz"}; /* stop strings and constraints coexist */
    p.n_stop = 1;
    assert_int_equal(pl_engine_add_request(e, "Once", NULL, 0, &p, &ids[0]), PL_OK);
    params(&p, PL_CONSTRAINT_CHOICE, NULL, 3, 1.0f, 9);
    p.constraint_choices = ch;
    p.n_constraint_choices = 3;
    assert_int_equal(pl_engine_add_request(e, "Once", NULL, 0, &p, &ids[1]), PL_OK);
    /* Left alone the model writes one digit; biased towards digits and 's', a count bound
     * or a '?' the automaton got wrong would show as a fourth digit or "catss". */
    pl_logit_bias bias[11];
    for (int d = 0; d < 10; d++) bias[d] = (pl_logit_bias){token_id(e, (char[]){(char)('0' + d), 0}), 40.0f};
    bias[10] = (pl_logit_bias){token_id(e, "s"), 40.0f};
    params(&p, PL_CONSTRAINT_REGEX, re, 3, 1.0f, 5);
    p.sampling.logit_bias = bias;
    p.sampling.n_logit_bias = 11;
    assert_int_equal(pl_engine_add_request(e, "Once", NULL, 0, &p, &ids[2]), PL_OK);
    run_all(e, ids, res, 3);
    if (getenv("PL_VERBOSE"))
        for (int k = 0; k < 3; k++)
            print_message("regex: '%s', biased '%s'; choice '%s'\n", res[0].text[k], res[2].text[k], res[1].text[k]);
    check_results(&res[0], 3, PL_CONSTRAINT_REGEX, re, NULL, 0);
    check_results(&res[2], 3, PL_CONSTRAINT_REGEX, re, NULL, 0);
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
