/* Unit tests for constrain/: the GBNF, regex and JSON-schema compilers (accepted and rejected
 * strings, error messages), random walks through the automaton (every string it accepts parses
 * and validates), and token masks on real vocabularies (stories260K: SentencePiece with byte
 * tokens; GPT-2: byte-level BPE with tokens that end inside a UTF-8 character): the trie walk
 * allows exactly the tokens whose piece the automaton accepts, EOS only in accepting states. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/rng.h"
#include "constrain/cons_internal.h"
#include "gguf/gguf.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STORIES PL_SHARED_DIR "/models/stories260K.gguf"
#define GPT2_VOCAB PL_SHARED_DIR "/testdata/vocab/ggml-vocab-gpt-2.gguf"

static pl_grammar *compile(pl_constraint_kind kind, const char *text) {
    char *gbnf = NULL;
    pl_grammar *g = NULL;
    if (pl_cons_to_gbnf(kind, text, NULL, 0, &gbnf) != PL_OK) fail_msg("to_gbnf: %s", pl_last_error());
    if (pl_grammar_parse(gbnf, &g) != PL_OK) fail_msg("parse: %s\n%s", pl_last_error(), gbnf);
    free(gbnf);
    return g;
}

static void expect(const pl_grammar *g, const char *s, int want) {
    int got = pl_grammar_matches(g, s, strlen(s));
    if (got != want) fail_msg("'%s': matches %d, expected %d", s, got, want);
}

/* The compile of (kind, text) fails with a message containing `needle`. */
static void expect_error(pl_constraint_kind kind, const char *text, const char *needle) {
    char *gbnf = NULL;
    pl_grammar *g = NULL;
    pl_status st = pl_cons_to_gbnf(kind, text, NULL, 0, &gbnf);
    if (st == PL_OK) st = pl_grammar_parse(gbnf, &g);
    free(gbnf);
    pl_grammar_destroy(g);
    if (st != PL_ERR_INVALID_ARG) fail_msg("'%s' compiled (status %d)", text, st);
    if (!strstr(pl_last_error(), needle)) fail_msg("'%s': message '%s' lacks '%s'", text, pl_last_error(), needle);
}

static void test_gbnf(void **state) {
    (void)state;
    pl_grammar *g = compile(PL_CONSTRAINT_GRAMMAR,
                            "# a comment\n"
                            "root ::= greet (\", \" name)? \"!\"\n"
                            "greet ::= \"hi\" | \"hello\"\n"
                            "name ::= [A-Z] [a-z]{1,5}\n");
    expect(g, "hi!", 1);
    expect(g, "hello, Bob!", 1);
    expect(g, "hello, Bobbyyy!", 0);
    expect(g, "hello, bob!", 0);
    expect(g, "hi", 0);
    pl_grammar_destroy(g);
    /* multi-byte classes, negation, '.', repetition forms */
    g = compile(PL_CONSTRAINT_GRAMMAR, "root ::= [α-ω]+ [^a-z\\n] .* x{2,}\nx ::= \"€\"");
    expect(g, "αβγ!€€", 1);
    expect(g, "ω日xyz€€€", 1);
    expect(g, "a!€€", 0);
    expect(g, "αz€€", 0);
    expect(g, "α!€", 0);
    pl_grammar_destroy(g);
    /* a recursive grammar: balanced parentheses */
    g = compile(PL_CONSTRAINT_GRAMMAR, "root ::= ( \"(\" root \")\" )*");
    expect(g, "", 1);
    expect(g, "(()())()", 1);
    expect(g, "(()", 0);
    pl_grammar_destroy(g);
    /* exponentially ambiguous: 2^n pending suffixes after n a's; refused past 4096 parses */
    g = compile(PL_CONSTRAINT_GRAMMAR, "root ::= \"a\" root \"b\" | \"a\" root \"c\" | \"d\"");
    expect(g, "aadcb", 1);
    assert_int_equal(pl_grammar_matches(g, "aaaaaaaaaaaaaa", 14), -1);
    assert_non_null(strstr(pl_last_error(), "too ambiguous"));
    pl_grammar_destroy(g);
    expect_error(PL_CONSTRAINT_GRAMMAR, "root ::= root \"a\" | \"b\"", "left-recursive");
    expect_error(PL_CONSTRAINT_GRAMMAR, "root ::= x", "rule 'x' is used (line 1) but not defined");
    expect_error(PL_CONSTRAINT_GRAMMAR, "start ::= \"a\"", "no rule 'root'");
    expect_error(PL_CONSTRAINT_GRAMMAR, "root ::= \"a\nroot2 ::= [", "unterminated");
    expect_error(PL_CONSTRAINT_GRAMMAR, "root ::= \"a\" ) ", "line 1: unexpected ')'");
    expect_error(PL_CONSTRAINT_GRAMMAR, "root ::= \"a\"{3,1}", "max < min");
    expect_error(PL_CONSTRAINT_GRAMMAR, "root ::= \"a\"\nroot ::= \"b\"", "line 2: rule 'root' is defined twice");
    expect_error(PL_CONSTRAINT_GRAMMAR, "root ::= \"\\q\"", "unknown escape");
}

static void test_regex(void **state) {
    (void)state;
    pl_grammar *g = compile(PL_CONSTRAINT_REGEX, "^\\d{3}-\\d{4}$");
    expect(g, "555-1234", 1);
    expect(g, "55-1234", 0);
    expect(g, "555-12345", 0);
    pl_grammar_destroy(g);
    g = compile(PL_CONSTRAINT_REGEX, "(?:cat|dog)s?|[^a-c\\s]x+?|\\(\\w\\)|é+|\\u00e9\\x41");
    expect(g, "cats", 1);
    expect(g, "dog", 1);
    expect(g, "dx", 1);
    expect(g, "axx", 0);
    expect(g, " x", 0);
    expect(g, "(_)", 1);
    expect(g, "éé", 1);
    expect(g, "éA", 1);
    expect(g, "catdog", 0);
    pl_grammar_destroy(g);
    g = compile(PL_CONSTRAINT_REGEX, "a.c|[\\d.-]{2}|x*");
    expect(g, "abc", 1);
    expect(g, "a\nc", 0);
    expect(g, "a日c", 1);
    expect(g, "-.", 1);
    expect(g, "", 1);
    pl_grammar_destroy(g);
    expect_error(PL_CONSTRAINT_REGEX, "(a)\\1", "backreferences are not supported");
    expect_error(PL_CONSTRAINT_REGEX, "a(?=b)", "lookaround is not supported");
    expect_error(PL_CONSTRAINT_REGEX, "(ab", "missing ')'");
    expect_error(PL_CONSTRAINT_REGEX, "ab)", "unmatched ')'");
    expect_error(PL_CONSTRAINT_REGEX, "*a", "nothing to repeat");
    expect_error(PL_CONSTRAINT_REGEX, "a^b", "'^' is only supported at the start");
    expect_error(PL_CONSTRAINT_REGEX, "[z-a]", "out of order");
    expect_error(PL_CONSTRAINT_REGEX, "\\bword", "word boundaries");
}

static void test_choice(void **state) {
    (void)state;
    const char *const ch[] = {"yes", "no", "maybe \"so\""};
    char *gbnf;
    assert_int_equal(pl_cons_to_gbnf(PL_CONSTRAINT_CHOICE, NULL, ch, 3, &gbnf), PL_OK);
    pl_grammar *g;
    assert_int_equal(pl_grammar_parse(gbnf, &g), PL_OK);
    free(gbnf);
    expect(g, "yes", 1);
    expect(g, "maybe \"so\"", 1);
    expect(g, "ye", 0);
    expect(g, "yesno", 0);
    pl_grammar_destroy(g);
    assert_int_equal(pl_cons_to_gbnf(PL_CONSTRAINT_CHOICE, NULL, ch, 0, &gbnf), PL_ERR_INVALID_ARG);
}

static const char SCHEMA[] =
    "{\"type\": \"object\", \"properties\": {"
    "  \"name\": {\"type\": \"string\", \"maxLength\": 8},"
    "  \"age\": {\"type\": \"integer\"},"
    "  \"tags\": {\"type\": \"array\", \"items\": {\"enum\": [\"a\", \"b\", 3]}, \"minItems\": 1, \"maxItems\": 3},"
    "  \"pet\": {\"anyOf\": [{\"$ref\": \"#/$defs/pet\"}, {\"type\": \"null\"}]},"
    "  \"code\": {\"type\": \"string\", \"pattern\": \"^[A-Z]{2}\\\\d\\\"?$\"},"
    "  \"ok\": {\"type\": [\"boolean\", \"number\"]}},"
    " \"required\": [\"name\", \"tags\", \"code\"], \"additionalProperties\": false,"
    " \"$defs\": {\"pet\": {\"type\": \"object\", \"properties\": {\"kind\": {\"const\": \"cat\"},"
    "   \"kids\": {\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/pet\"}, \"maxItems\": 2}},"
    "   \"required\": [\"kind\"]}}}";

static void test_schema(void **state) {
    (void)state;
    pl_grammar *g = compile(PL_CONSTRAINT_JSON_SCHEMA, SCHEMA);
    expect(g, "{\"name\": \"Bo\", \"tags\": [\"a\"], \"code\": \"AB1\"}", 1);
    expect(g, "{\"name\":\"Bo\",\"age\":-12,\"tags\":[3,\"b\"],\"pet\":{\"kind\":\"cat\",\"kids\":"
              "[{\"kind\":\"cat\"}]},\"code\":\"XY9\\\"\",\"ok\":1.5e3}", 1);
    expect(g, "{\n  \"name\": \"\\u00e9t\\n\",\n  \"tags\": [ \"b\" ],\n  \"code\": \"AA0\",\n  \"ok\": true\n}", 1);
    expect(g, "{\"tags\": [\"a\"], \"code\": \"AB1\"}", 0);                 /* name missing */
    expect(g, "{\"name\": \"Bo\", \"tags\": [], \"code\": \"AB1\"}", 0);    /* minItems */
    expect(g, "{\"name\": \"Bo\", \"tags\": [\"c\"], \"code\": \"AB1\"}", 0); /* enum */
    expect(g, "{\"name\": \"123456789\", \"tags\": [\"a\"], \"code\": \"AB1\"}", 0); /* maxLength */
    expect(g, "{\"name\": \"Bo\", \"tags\": [\"a\"], \"code\": \"ab1\"}", 0); /* pattern */
    expect(g, "{\"name\": \"Bo\", \"code\": \"AB1\", \"tags\": [\"a\"]}", 0); /* order */
    expect(g, "{\"name\": \"Bo\", \"tags\": [\"a\"], \"code\": \"AB1\", \"x\": 1}", 0);
    expect(g, "{\"name\": \"Bo\", \"age\": 01, \"tags\": [\"a\"], \"code\": \"AB1\"}", 0);
    pl_grammar_destroy(g);
    g = compile(PL_CONSTRAINT_JSON_OBJECT, NULL);
    expect(g, "{\"a\": [1, {\"b\": null}], \"c\": \"d\"}", 1);
    expect(g, "{}", 1);
    expect(g, "[1]", 0);
    expect(g, "{\"a\" 1}", 0);
    pl_grammar_destroy(g);
    expect_error(PL_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"integer\", \"multipleOf\": 3}", "at '#': 'multipleOf' is not supported");
    expect_error(PL_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"number\", \"maximum\": 3}", "supported only as 'minimum': 0");
    expect_error(PL_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"integer\", \"minimum\": 3, \"maximum\": 2.5}", "no integer lies within");
    expect_error(PL_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"strin\"}}}",
                 "at '#/properties/a': unknown type 'strin'");
    expect_error(PL_CONSTRAINT_JSON_SCHEMA, "{\"type\": ", "not valid JSON");
    expect_error(PL_CONSTRAINT_JSON_SCHEMA, "{\"$ref\": \"#/$defs/x\"}", "'#/$defs/x' is not found");
    expect_error(PL_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"string\", \"pattern\": \"(a\"}", "pattern: regex: missing ')'");
    expect_error(PL_CONSTRAINT_JSON_SCHEMA, "{\"properties\": {\"a\": {}}, \"required\": [\"b\"]}", "'required' names 'b'");
    expect_error(PL_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"object\", \"required\": [\"b\"]}", "'properties' is empty");
}

/* Integer bounds: for random ranges (negative, mixed, one-sided, exclusive, fractional bounds),
 * an integer matches exactly when it is inside; leading zeros and "-0" never match. */
static void test_int_ranges(void **state) {
    (void)state;
    pl_rng rng;
    pl_rng_seed(&rng, 11);
    static const int64_t EDGES[] = {-100000, -1234, -100, -99, -10, -9, -1, 0, 1, 9, 10, 99, 100, 101, 999, 1000, 4567, 99999};
    const int NE = sizeof EDGES / sizeof EDGES[0];
    for (int t = 0; t < 40; t++) {
        int64_t lo = EDGES[pl_rng_next(&rng) % NE], hi = EDGES[pl_rng_next(&rng) % NE];
        if (lo > hi) { int64_t x = lo; lo = hi; hi = x; }
        int has_lo = t % 5 != 1, has_hi = t % 5 != 2, excl = t % 3 == 0;
        char schema[256];
        int n = snprintf(schema, sizeof schema, "{\"type\": \"integer\"");
        /* t % 4 == 0: fractional bounds with the same integers inside */
        double frac = t % 4 == 0 ? 0.5 : 0, flo = (double)lo + (excl ? frac : -frac),
               fhi = (double)hi + (excl ? -frac : frac);
        if (has_lo) n += snprintf(schema + n, sizeof schema - n, ", \"%s\": %.1f",
                                  excl ? "exclusiveMinimum" : "minimum", flo);
        if (has_hi) n += snprintf(schema + n, sizeof schema - n, ", \"%s\": %.1f",
                                  excl ? "exclusiveMaximum" : "maximum", fhi);
        snprintf(schema + n, sizeof schema - n, "}");
        int64_t in_lo = has_lo ? (excl ? lo + 1 : lo) : INT64_MIN, in_hi = has_hi ? (excl ? hi - 1 : hi) : INT64_MAX;
        if (in_lo > in_hi) continue;
        pl_grammar *g = compile(PL_CONSTRAINT_JSON_SCHEMA, schema);
        for (int64_t x = -1300; x <= 1300; x += 1 + (int64_t)(pl_rng_next(&rng) % 7)) {
            char s[32];
            snprintf(s, sizeof s, "%lld", (long long)x);
            int want = x >= in_lo && x <= in_hi;
            if (pl_grammar_matches(g, s, strlen(s)) != want) fail_msg("%s: %s matches %d", schema, s, !want);
        }
        for (size_t k = 0; k < (size_t)NE; k++) {
            char s[32];
            snprintf(s, sizeof s, "%lld", (long long)EDGES[k]);
            int want = EDGES[k] >= in_lo && EDGES[k] <= in_hi;
            if (pl_grammar_matches(g, s, strlen(s)) != want) fail_msg("%s: %s matches %d", schema, s, !want);
        }
        expect(g, "-0", 0);
        expect(g, "007", 0);
        pl_grammar_destroy(g);
    }
    pl_grammar *g = compile(PL_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"number\", \"minimum\": 0}");
    expect(g, "0.5e-3", 1);
    expect(g, "-1", 0);
    pl_grammar_destroy(g);
}

/* Random walks: from the start state pick random accepted bytes (ending as soon as the state
 * accepts, with rising probability); every finished string must be valid JSON with the
 * schema's required keys. */
static void test_random_walks(void **state) {
    (void)state;
    pl_grammar *g = compile(PL_CONSTRAINT_JSON_SCHEMA, SCHEMA);
    pl_gscratch *s = pl_gscratch_create();
    pl_gstate st = {0};
    pl_rng rng;
    pl_rng_seed(&rng, 7);
    int finished = 0;
    for (int walk = 0; walk < 60; walk++) {
        assert_int_equal(pl_gstate_start(g, s, &st), PL_OK);
        char buf[4096];
        size_t n = 0;
        int done = 0;
        while (n + 1 < sizeof buf && !done) {
            if (pl_gstate_accepting(&st) && pl_rng_uniform(&rng) < 0.5 + (double)n / 1000) {
                done = 1;
                break;
            }
            /* bytes accepted now: prefer ASCII printable so strings stay readable */
            uint8_t ok[256];
            int k = 0;
            for (int c = 0; c < 256; c++) {
                pl_gstate t = {0};
                assert_int_equal(pl_gstate_copy(&t, &st), PL_OK);
                int r = pl_gstate_advance(g, s, &t, (uint8_t[]){(uint8_t)c}, 1);
                pl_gstate_free(&t);
                assert_true(r >= 0);
                if (r == 1) ok[k++] = (uint8_t)c;
            }
            if (!k) break;
            /* closing brackets / quotes are favoured later so that walks end */
            uint8_t c = ok[pl_rng_next(&rng) % (uint64_t)k];
            for (int i = 0; i < k && n > 40; i++)
                if (strchr("\"]}", ok[i]) && pl_rng_uniform(&rng) < 0.7) c = ok[i];
            assert_int_equal(pl_gstate_advance(g, s, &st, &c, 1), 1);
            buf[n++] = (char)c;
        }
        if (!done) continue;
        buf[n] = 0;
        finished++;
        json_error_t je;
        json_t *v = json_loads(buf, 0, &je);
        if (!v) fail_msg("walk %d produced invalid JSON: %s (%s)", walk, buf, je.text);
        assert_non_null(json_object_get(v, "name"));
        const char *name = json_string_value(json_object_get(v, "name"));
        size_t chars = 0; /* maxLength counts characters, not bytes */
        for (const char *q = name; *q; q++) chars += ((unsigned char)*q & 0xC0) != 0x80;
        if (chars > 8) fail_msg("walk %d: name '%s' has %zu characters", walk, name, chars);
        assert_true(json_array_size(json_object_get(v, "tags")) >= 1);
        assert_true(json_array_size(json_object_get(v, "tags")) <= 3);
        const char *code = json_string_value(json_object_get(v, "code"));
        assert_non_null(code);
        assert_true(code[0] >= 'A' && code[0] <= 'Z' && code[2] >= '0' && code[2] <= '9');
        json_decref(v);
    }
    assert_true(finished >= 30);
    pl_gstate_free(&st);
    pl_gscratch_destroy(s);
    pl_grammar_destroy(g);
}

static pl_tokenizer *load(const char *path) {
    pl_gguf *gg = NULL;
    if (pl_gguf_open(path, &gg) != PL_OK) fail_msg("open %s: %s", path, pl_last_error());
    pl_tokenizer *t = NULL;
    pl_status st = pl_tokenizer_load(gg, &t);
    pl_gguf_close(gg);
    if (st != PL_OK) fail_msg("load %s: %s", path, pl_last_error());
    return t;
}

/* For each state along `text`: the mask equals "the automaton accepts the token's piece" for
 * every token, EOS iff accepting. */
static void check_masks(const pl_tokenizer *tok, pl_constraint_kind kind, const char *spec,
                        const char *const *choices, int32_t n_choices, const char *text) {
    pl_cons_registry *r = pl_cons_registry_create(tok);
    assert_non_null(r);
    pl_cons *c;
    if (pl_cons_acquire(r, kind, spec, choices, n_choices, &c) != PL_OK) fail_msg("%s", pl_last_error());
    const pl_grammar *g = pl_cons_grammar(c);
    pl_gscratch *s = pl_gscratch_create();
    pl_gstate st = {0}, t = {0};
    assert_int_equal(pl_cons_start(c, &st), PL_OK);
    int32_t V = pl_tokenizer_n_vocab(tok);
    char piece[512];
    for (size_t pos = 0;; pos++) {
        int32_t n_allowed = 0, count = 0;
        const uint64_t *m = pl_cons_mask(r, c, &st, &n_allowed);
        assert_non_null(m);
        for (int32_t id = 0; id < V; id++) {
            int allowed = (int)(m[id >> 6] >> (id & 63) & 1);
            count += allowed;
            int want;
            pl_token_type ty = pl_tokenizer_token_type(tok, id);
            if (pl_tokenizer_is_eog(tok, id)) {
                want = pl_gstate_accepting(&st);
            } else if (ty == PL_TOKEN_CONTROL || ty == PL_TOKEN_UNKNOWN || ty == PL_TOKEN_UNUSED) {
                want = 0;
            } else {
                size_t n = pl_token_to_piece(tok, id, piece, sizeof piece, 0);
                assert_int_equal(pl_gstate_copy(&t, &st), PL_OK);
                want = n > 0 && pl_gstate_advance(g, s, &t, (const uint8_t *)piece, n) == 1;
            }
            if (allowed != want) fail_msg("'%s' at %zu: token %d ('%s') allowed %d, want %d", spec ? spec : "choice", pos, id,
                                          pl_tokenizer_token_text(tok, id), allowed, want);
        }
        assert_int_equal(count, n_allowed);
        assert_true(n_allowed > 0);
        /* a second lookup hits the cache */
        int32_t again;
        assert_ptr_equal(pl_cons_mask(r, c, &st, &again), m);
        if (!text[pos]) break;
        assert_int_equal(pl_gstate_advance(g, s, &st, (const uint8_t *)text + pos, 1), 1);
    }
    assert_true(pl_gstate_accepting(&st));
    pl_cons_stats cs;
    pl_cons_get_stats(r, &cs);
    assert_true(cs.mask_hits > 0 && cs.mask_misses > 0);
    pl_gstate_free(&st);
    pl_gstate_free(&t);
    pl_gscratch_destroy(s);
    pl_cons_release(r, c);
    pl_cons_registry_destroy(r);
}

static void test_masks_stories(void **state) {
    (void)state;
    pl_tokenizer *tok = load(STORIES);
    check_masks(tok, PL_CONSTRAINT_JSON_SCHEMA,
                "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", \"maxLength\": 6},"
                " \"n\": {\"type\": \"integer\"}}, \"required\": [\"name\", \"n\"]}",
                NULL, 0, "{\"name\": \"Tim é\", \"n\": 42}");
    const char *const ch[] = {"happy", "sad"};
    check_masks(tok, PL_CONSTRAINT_CHOICE, NULL, ch, 2, "sad");
    pl_tokenizer_destroy(tok);
}

static void test_masks_gpt2(void **state) {
    (void)state;
    pl_tokenizer *tok = load(GPT2_VOCAB);
    check_masks(tok, PL_CONSTRAINT_REGEX, "[α-ω日]+( [a-z]+)?", NULL, 0, "αβ日 ok");
    /* GPT-2 cleans " ," to "," when detokenizing; a constrained sequence's stream must not
     * (the constraint matched the raw bytes) */
    int32_t *ids;
    size_t n;
    assert_int_equal(pl_tokenize(tok, "a , b", 5, 0, 0, &ids, &n), PL_OK);
    for (int raw = 0; raw < 2; raw++) {
        pl_detok_stream ds;
        pl_detok_init(&ds, tok, 1, 0);
        ds.no_clean = raw;
        char out[256];
        size_t len = 0;
        for (size_t i = 0; i < n; i++) len += pl_detok_push(&ds, ids[i], out + len, sizeof out - len);
        len += pl_detok_flush(&ds, out + len, sizeof out - len);
        out[len] = 0;
        assert_string_equal(out, raw ? "a , b" : "a, b");
    }
    free(ids);
    pl_tokenizer_destroy(tok);
}

/* A bound on the masks of all grammars: past it the biggest cache loses its oldest masks; the
 * masks stay right (recomputed). */
static void test_cache_bound(void **state) {
    (void)state;
    pl_tokenizer *tok = load(STORIES);
    pl_cons_registry *r = pl_cons_registry_create(tok);
    pl_cons_registry_limit(r, 6);
    pl_cons *a, *b;
    assert_int_equal(pl_cons_acquire(r, PL_CONSTRAINT_REGEX, "[a-z]{0,20}", NULL, 0, &a), PL_OK);
    assert_int_equal(pl_cons_acquire(r, PL_CONSTRAINT_REGEX, "[a-z]{0,20}x", NULL, 0, &b), PL_OK);
    pl_gstate sa = {0}, sb = {0};
    pl_gscratch *scr = pl_gscratch_create();
    assert_int_equal(pl_cons_start(a, &sa), PL_OK);
    assert_int_equal(pl_cons_start(b, &sb), PL_OK);
    int32_t first = -1, n;
    for (int round = 0; round < 2; round++) {
        pl_gstate_free(&sa);
        assert_int_equal(pl_cons_start(a, &sa), PL_OK);
        for (int i = 0; i < 12; i++) {
            const uint64_t *m = pl_cons_mask(r, a, &sa, &n);
            assert_non_null(m);
            if (i == 0 && round == 0) first = n;
            if (i == 0) assert_int_equal(n, first); /* recomputed after eviction: the same */
            assert_non_null(pl_cons_mask(r, b, &sb, &n));
            assert_int_equal(pl_gstate_advance(pl_cons_grammar(a), scr, &sa, (const uint8_t *)"q", 1), 1);
        }
    }
    pl_cons_stats s;
    pl_cons_get_stats(r, &s);
    assert_true(s.cached_masks <= 6);
    assert_true(s.mask_misses > 12);
    pl_gscratch_destroy(scr);
    pl_gstate_free(&sa);
    pl_gstate_free(&sb);
    pl_cons_release(r, a);
    pl_cons_release(r, b);
    pl_cons_registry_destroy(r);
    pl_tokenizer_destroy(tok);
}

static void test_registry_shares(void **state) {
    (void)state;
    pl_tokenizer *tok = load(STORIES);
    pl_cons_registry *r = pl_cons_registry_create(tok);
    pl_cons *a, *b, *c;
    assert_int_equal(pl_cons_acquire(r, PL_CONSTRAINT_REGEX, "[ab]+", NULL, 0, &a), PL_OK);
    assert_int_equal(pl_cons_acquire(r, PL_CONSTRAINT_REGEX, "[ab]+", NULL, 0, &b), PL_OK);
    assert_ptr_equal(a, b);
    assert_int_equal(pl_cons_acquire(r, PL_CONSTRAINT_GRAMMAR, "root ::= [ab]+", NULL, 0, &c), PL_OK);
    assert_ptr_not_equal(a, c);
    pl_cons *d;
    assert_int_equal(pl_cons_acquire(r, PL_CONSTRAINT_REGEX, "(", NULL, 0, &d), PL_ERR_INVALID_ARG);
    pl_cons_release(r, a);
    pl_cons_release(r, b);
    pl_cons_stats s;
    pl_cons_get_stats(r, &s);
    assert_int_equal(s.grammars, 2);
    pl_cons_registry_destroy(r);
    pl_tokenizer_destroy(tok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gbnf),           cmocka_unit_test(test_regex),
        cmocka_unit_test(test_choice),         cmocka_unit_test(test_schema),
        cmocka_unit_test(test_int_ranges),
        cmocka_unit_test(test_random_walks),   cmocka_unit_test(test_masks_stories),
        cmocka_unit_test(test_masks_gpt2),     cmocka_unit_test(test_registry_shares),
        cmocka_unit_test(test_cache_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
