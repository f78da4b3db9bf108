/* Unit tests for src/jinja: whitespace control (trim_blocks, lstrip_blocks, -, +), loops (loop.*,
 * break, continue, else, filters), scoping, macros, namespaces, filters, tests, methods, Python
 * value semantics (slices, repr, float text, tojson), errors naming what failed (with the line),
 * and the limits on steps, recursion, output and memory. Expected texts are what Python's jinja2
 * (as transformers configures it) prints for the same template and context. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "jinja/jinja.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Renders src with ctx (JSON); NULL on error (message in pl_last_error()). */
static char *render_opts(const char *src, const char *ctx, const pl_jinja_options *o) {
    pl_jinja *t;
    if (pl_jinja_compile(src, strlen(src), &t) != PL_OK) return NULL;
    char *out = NULL;
    pl_status st = pl_jinja_render(t, ctx, strlen(ctx), o, &out, NULL);
    pl_jinja_free(t);
    return st == PL_OK ? out : NULL;
}
static char *render(const char *src, const char *ctx) { return render_opts(src, ctx, NULL); }

typedef struct { const char *src, *ctx, *want; } tcase;

static void run_cases(const tcase *cs, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char *out = render(cs[i].src, cs[i].ctx ? cs[i].ctx : "{}");
        if (!out) fail_msg("case %zu [%s]: %s", i, cs[i].src, pl_last_error());
        if (strcmp(out, cs[i].want))
            fail_msg("case %zu [%s]:\n got  [%s]\n want [%s]", i, cs[i].src, out, cs[i].want);
        free(out);
    }
}

static void expect_error(const char *src, const char *ctx, const char *substr) {
    char *out = render(src, ctx ? ctx : "{}");
    if (out) fail_msg("[%s] rendered [%s], want an error containing [%s]", src, out, substr);
    if (!strstr(pl_last_error(), substr))
        fail_msg("[%s]: error [%s] does not contain [%s]", src, pl_last_error(), substr);
}

static void test_whitespace(void **state) {
    (void)state;
    static const tcase cs[] = {
        {"a\n{% if true %}\nb\n{% endif %}\nc", NULL, "a\nb\nc"},          /* trim_blocks */
        {"a\n    {% if true %}\n    b\n    {% endif %}\nc", NULL, "a\n    b\nc"}, /* lstrip */
        {"a  {%- if true -%}  b  {%- endif -%}  c", NULL, "abc"},
        {"a\n  {%+ if true %}b{% endif %}", NULL, "a\n  b"},
        {"x {{- ' y ' -}} z", NULL, "x y z"},
        {"x  {{ 'y' }}\n z", NULL, "x  y\n z"},                          /* no trim after }} */
        {"a\n  {# note #}\nb", NULL, "a\nb"},
        {"a{# c #}b\n", NULL, "ab"},                                        /* trailing \n goes */
        {"a\r\nb\r\n\r\n", NULL, "a\nb\n"},
        {"{% raw %}{{ x }}{% endraw %}", NULL, "{{ x }}"},
        {"  {% if true %}x{% endif %}", NULL, "x"},                          /* start of text */
    };
    run_cases(cs, sizeof cs / sizeof cs[0]);
}

static void test_loops(void **state) {
    (void)state;
    static const tcase cs[] = {
        {"{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}"
         "{{ loop.length }}{{ loop.revindex }};{% endfor %}",
         "{\"xs\": [5, 6]}", "10TrueFalse22;21FalseTrue21;"},
        {"{% for x in xs %}{{ loop.previtem }}-{{ loop.nextitem }},{% endfor %}", "{\"xs\": [1, 2, 3]}",
         "-2,1-3,2-,"},
        {"{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 4 %}"
         "{% break %}{% endif %}{{ x }}{% endfor %}", NULL, "0134"},
        {"{% for x in [] %}a{% else %}empty{% endfor %}", NULL, "empty"},
        {"{% for x in range(6) if x is odd %}{{ x }}{{ loop.last }}{% endfor %}", NULL,
         "1False3False5True"},
        {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", "{\"d\": {\"b\": 1, \"a\": 2}}",
         "b=1;a=2;"},
        {"{% for k in d %}{{ k }}{% endfor %}{% for c in 'héllo' %}[{{ c }}]{% endfor %}",
         "{\"d\": {\"x\": 1, \"y\": 2}}", "xy[h][é][l][l][o]"},
        {"{% for x in undefined_thing %}x{% endfor %}ok", NULL, "ok"},
        {"{% for x in xs %}{{ loop.cycle('a', 'b') }}{% endfor %}", "{\"xs\": [1,2,3]}", "aba"},
    };
    run_cases(cs, sizeof cs / sizeof cs[0]);
}

static void test_scope_macro_namespace(void **state) {
    (void)state;
    static const tcase cs[] = {
        {"{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}", NULL, "1"},
        {"{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}", NULL, "2"},
        {"{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}"
         "{{ ns.n }}", NULL, "3"},
        {"{% macro greet(name, p='Hi') %}{{ p }} {{ name }}{% endmacro %}{{ greet('a') }}|"
         "{{ greet('b', p='Yo') }}|{{ greet(name='c') }}", NULL, "Hi a|Yo b|Hi c"},
        {"{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}",
         NULL, "321"},
        {"{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}B{% endmacro %}{{ a() }}", NULL, "B"},
        {"{% set s %}  x {{ 1 + 1 }}  {% endset %}[{{ s }}]", NULL, "[  x 2  ]"},
        {"{% filter upper %}abc{% endfilter %}{% filter trim %}  x  {% endfilter %}", NULL, "ABCx"},
        {"{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a is defined }}", NULL, "3False"},
        {"{% set a, b = [1, 2] %}{{ b }}{{ a }}", NULL, "21"},
        {"{% generation %}x{% endgeneration %}", NULL, "x"},
    };
    run_cases(cs, sizeof cs / sizeof cs[0]);
}

static void test_values(void **state) {
    (void)state;
    static const tcase cs[] = {
        {"{{ s[::-1] }}|{{ s[1:] }}|{{ s[:-1] }}|{{ s[-1] }}|{{ xs[1:] }}", "{\"s\": \"abcé\", \"xs\": [1, 2, 3]}",
         "écba|bcé|abc|é|[2, 3]"},
        {"{{ [1, 'a', none, true, 1.5, {'k': 'v'}, ('t',)] }}", NULL,
         "[1, 'a', None, True, 1.5, {'k': 'v'}, ('t',)]"},
        {"{{ \"it's\" | string }}{{ [\"it's\"] }}", NULL, "it's[\"it's\"]"},
        {"{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1e20 }} {{ 0.1 + 0.2 }}",
         NULL, "3 -4 1 2 3.5 1024 1e+20 0.30000000000000004"},
        {"{{ 'a' ~ 1 ~ none }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ 1 == 1.0 }} {{ true == 1 }}", NULL,
         "a1None ababab [1, 2] True True"},
        {"{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ 1 < 2 < 3 }}",
         NULL, "True True True True True"},
        {"{{ x if x else 'no' }} {{ none or 'd' }} {{ 0 and 1 }} {{ not [] }}", "{\"x\": 0}",
         "no d 0 True"},
        {"{{ '  a b  '.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|"
         "{{ 'x</think>y'.split('</think>')[-1] }}|{{ 'abc'.startswith('ab') }}"
         "{{ 'abc'.endswith(('x', 'c')) }}|{{ 'Hi'.upper() }}{{ 'Hi'.lower() }}|"
         "{{ 'hello world'.title() }}|{{ 'aXa'.replace('a', 'b') }}|{{ 'a-b'.rstrip('-b') }}",
         NULL, "a b|['a', 'b', '', 'c']|['a', 'b']|y|TrueTrue|HIhi|Hello World|bXb|a"},
        {"{{ d.get('a') }} {{ d.get('z', 5) }} {{ d.keys() | list }} {{ d['a'] }} {{ d.a }}",
         "{\"d\": {\"a\": 1}}", "1 5 ['a'] 1 1"},
        {"{{ m.content }}|{{ m.missing }}|{{ m.missing is defined }}", "{\"m\": {\"content\": null}}",
         "None||False"},
        {"{{ \"\\n\\t\\u00e9\\x41\" }}", NULL, "\n\té" "A"},
    };
    run_cases(cs, sizeof cs / sizeof cs[0]);
}

static void test_filters_tests(void **state) {
    (void)state;
    static const tcase cs[] = {
        {"{{ x | tojson }}", "{\"x\": {\"a\": [1, 2.5, \"é\\n\\\"\", null, true], \"b\": {}}}",
         "{\"a\": [1, 2.5, \"é\\n\\\"\", null, true], \"b\": {}}"},
        {"{{ x | tojson(indent=2) }}", "{\"x\": {\"a\": [1], \"b\": []}}",
         "{\n  \"a\": [\n    1\n  ],\n  \"b\": []\n}"},
        {"{{ x | tojson(sort_keys=true) }}", "{\"x\": {\"b\": 1, \"a\": 2}}", "{\"a\": 2, \"b\": 1}"},
        {"{{ xs | length }} {{ 'héllo' | length }} {{ xs | first }} {{ xs | last }} {{ xs | join('-') }}",
         "{\"xs\": [3, 1, 2]}", "3 5 3 2 3-1-2"},
        {"{{ xs | sort | list }} {{ xs | sort(reverse=true) | list }} {{ xs | max }} {{ xs | min }} {{ xs | sum }}",
         "{\"xs\": [3, 1, 2]}", "[1, 2, 3] [3, 2, 1] 3 1 6"},
        {"{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='c') | join(',') }}|"
         "{{ ms | rejectattr('role', 'equalto', 'user') | list | length }}|"
         "{{ ms | map(attribute='c') | map('upper') | list }}|{{ ms | selectattr('x') | list }}",
         "{\"ms\": [{\"role\": \"user\", \"c\": \"a\"}, {\"role\": \"bot\", \"c\": \"b\"}, {\"role\": \"user\", \"c\": \"d\"}]}",
         "a,d|1|['A', 'B', 'D']|[]"},
        {"{{ ['A', 'a', 'b'] | unique | list }} {{ [1, 2, 3] | select('odd') | list }} {{ [1, 2] | reject('odd') | list }}",
         NULL, "['A', 'b'] [1, 3] [2]"},
        {"{{ u | default('d') }} {{ '' | default('e', true) }} {{ 'x' | default('f') }} {{ u | d('g') }}",
         NULL, "d e x g"},
        {"{{ '  x ' | trim }}|{{ 'a\\nb\\n' | indent(2) }}|{{ 'a\\nb' | indent(2, first=true) }}|"
         "{{ 'a\\n\\nb' | indent(2, blank=true) }}", NULL, "x|a\n  b\n|  a\n  b|a\n  \n  b"},
        {"{{ '3' | int + 1 }} {{ 'x' | int }} {{ 2.7 | int }} {{ '1.5' | float }} {{ 2.567 | round(2) }}",
         NULL, "4 0 2 1.5 2.57"},
        {"{{ 'hello WORLD' | capitalize }} {{ 'a-b c' | title }} {{ '<a&\"' | escape }} {{ 'x' | safe }}",
         NULL, "Hello world A-B C &lt;a&amp;&#34; x"},
        {"{{ d | items | list }} {{ d | dictsort }} {{ [1, [2]] | string }}", "{\"d\": {\"b\": 1, \"a\": 2}}",
         "[('b', 1), ('a', 2)] [('a', 2), ('b', 1)] [1, [2]]"},
        {"{{ 'ab' | replace('a', 'x') }} {{ 'abc' | reverse }} {{ [1, 2] | reverse | list }} {{ 'a b c' | wordcount }}",
         NULL, "xb cba [2, 1] 3"},
        {"{{ none is none }} {{ 1 is number }} {{ 's' is string }} {{ {} is mapping }} {{ [] is iterable }}"
         " {{ 3 is divisibleby 3 }} {{ 1 is integer }} {{ 1.0 is float }} {{ true is boolean }}"
         " {{ x is defined }} {{ y is undefined }} {{ 2 is eq 2 }} {{ 'a' is in 'abc' }} {{ 1 is not odd }}",
         "{\"x\": 1}", "True True True True True True True True True True True True True False"},
    };
    run_cases(cs, sizeof cs / sizeof cs[0]);
}

/* Where Jinja2 differs from plain Python values: filters that give generators, Markup from
 * |safe, and unknown filters that only fail when reached inside an if. */
static void test_jinja_quirks(void **state) {
    (void)state;
    static const tcase cs[] = {
        {"{% if [] | select('odd') %}generators are true{% endif %}", NULL, "generators are true"},
        {"{{ [1, 2] | map('string') | join }} {{ [3, 4] | reverse | list }} {{ {'a': 1} | items | list }}",
         NULL, "12 [4, 3] [('a', 1)]"},
        {"{{ \"'\"|safe + \"<b>\" }} {{ \"<b>\" + \"x\"|safe }} {{ \"x\"|safe ~ \"<\" }} {{ \"<\"|e|e }}", NULL,
         "'&lt;b&gt; &lt;b&gt;x x< &lt;"},
        {"{% if false %}{{ x | no_such_filter }}{% endif %}{{ 'o' if true else z | nope }}k", NULL, "ok"},
        {"{{ '<{}|{k}|{:>4}|{:.1f}|{:03d}|{!r}>'.format(1, 'a', 2.25, 7, 's', k='K') }}{{ '{1}{0}'.format(1, 2) }}",
         NULL, "<1|K|   a|2.2|007|'s'>21"},
        {"{{ '%s=%d%%' % ('a', 5) }} {{ '%5.1f' | format(2.25) }}", NULL, "a=5%   2.2"},
        {"{{ '%d|%i' % (2.7, -2.7) }} {{ '{:.0f}'.format(1e400) }}", NULL, "2|-2 inf"},
    };
    run_cases(cs, sizeof cs / sizeof cs[0]);
    expect_error("{{ '{}{0}'.format(1) }}", NULL, "cannot switch from manual field specification");
    /* %d of a float that has no int64: Python's errors (the fuzzer's input cast inf: UB) */
    expect_error("{{ '%d' % (1e400) }}", NULL, "%d format: cannot convert float infinity to integer");
    expect_error("{{ '%i' % (1e400 - 1e400) }}", NULL, "cannot convert float NaN to integer");
    expect_error("{{ '%x' % (-1e19) }}", NULL, "cannot convert float beyond 64 bits to integer");
    expect_error("{{ '{:d}'.format(1e400) }}", NULL, "unknown format code 'd' for a float");
    expect_error("{{ [1] | map('string') | length }}", NULL, "object of type 'generator' has no len()");
    expect_error("{{ [1] | map('string') | tojson }}", NULL, "Object of type generator is not JSON serializable");
    expect_error("{% if true %}{{ x | nosuch }}{% endif %}", NULL, "line 1: no filter named 'nosuch'");
    expect_error("{% if true %}{% for i in [1] %}{{ i | nosuch }}{% endfor %}{% endif %}", NULL,
                 "no filter named 'nosuch'");
}

static void test_strftime(void **state) {
    (void)state;
    int64_t now;
    assert_int_equal(pl_jinja_parse_date("2024-07-26", &now), PL_OK);
    pl_jinja_options o = {.now = now};
    char *out = render_opts("{{ strftime_now('%d %b %Y') }}", "{}", &o);
    assert_non_null(out);
    assert_string_equal(out, "26 Jul 2024");
    free(out);
    assert_int_equal(pl_jinja_parse_date("2024-13-01", &now), PL_ERR_INVALID_ARG);
    out = render("{{ strftime_now('%Y') | length }}", "{}"); /* the real clock */
    assert_non_null(out);
    assert_string_equal(out, "4");
    free(out);
}

static void test_errors(void **state) {
    (void)state;
    expect_error("{{ raise_exception('Bad role: ' + r) }}", "{\"r\": \"x\"}", "Bad role: x");
    char *out = render("{{ raise_exception('exactly this') }}", "{}");
    assert_null(out);
    assert_string_equal(pl_last_error(), "exactly this");
    expect_error("a\n{{ x | nosuchfilter }}", NULL, "line 2: no filter named 'nosuchfilter'");
    expect_error("{% if x is nosuchtest %}{% endif %}", NULL, "no test named 'nosuchtest'");
    expect_error("{% if x %}\nunclosed", NULL, "expected 'endif'");
    expect_error("{% for x in y %}{% endif %}", NULL, "unexpected 'endif'");
    expect_error("{{ 1 + }}", NULL, "line 1: expected an expression");
    expect_error("{{ 'unterminated }}", NULL, "unterminated string");
    expect_error("{% include 'x' %}", NULL, "unsupported tag 'include'");
    expect_error("{% break %}", NULL, "outside of a loop");
    expect_error("x\n\n{{ 'a' + functions }}", NULL, "'functions' is undefined");
    expect_error("{{ later() }}{% macro later() %}x{% endmacro %}", NULL, "'later' is undefined");
    expect_error("{{ m.a.b }}", "{\"m\": {}}", "'dict object' has no attribute 'a'");
    expect_error("{{ 'a' + 1 }}", NULL, "can only concatenate str (not \"int\") to str");
    expect_error("{{ 1 / 0 }}", NULL, "division by zero");
    expect_error("{{ 'abc'.nosuchmethod() }}", NULL, "'str object' has no attribute 'nosuchmethod'");
    expect_error("{{ [1].append(2) }}", NULL, "has no attribute 'append'");
    expect_error("{% for x in none %}{% endif %}", NULL, "unexpected 'endif'");
    expect_error("{% for x in n %}{% endfor %}", "{\"n\": null}", "'NoneType' object is not iterable");
    expect_error("{% set x.y = 1 %}", "{\"x\": {}}", "non-namespace");
    expect_error("{{ x | tojson }}", NULL, "not JSON serializable");
    expect_error("{{ 1 < 'a' }}", NULL, "'<' not supported between instances of 'int' and 'str'");
    expect_error("{{ x }}", "[1]", "must be a JSON object");
    expect_error("{{ x }}", "{\"x\": ", "context JSON");
    expect_error("{{ range(1000000) }}", NULL, "Range too big");
}

static void test_limits(void **state) {
    (void)state;
    /* steps: a long loop stops at the limit instead of running on */
    pl_jinja_options o = {.max_steps = 100000};
    assert_null(render_opts("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                            "{}", &o));
    assert_non_null(strstr(pl_last_error(), "ran longer than its limit"));
    /* recursion: a macro calling itself forever */
    assert_null(render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "{}"));
    assert_non_null(strstr(pl_last_error(), "recursed too deeply"));
    /* output */
    o = (pl_jinja_options){.max_output = 1000};
    assert_null(render_opts("{% for i in range(2000) %}x{% endfor %}", "{}", &o));
    assert_non_null(strstr(pl_last_error(), "longer than its limit"));
    assert_null(render_opts("{{ 'x' * 100000 }}", "{}", &o));
    /* memory: quadratic string building */
    o = (pl_jinja_options){.max_memory = 1 << 20};
    assert_null(render_opts("{% set ns = namespace(s='') %}{% for i in range(5000) %}"
                            "{% set ns.s = ns.s + 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' %}{% endfor %}{{ ns.s | length }}",
                            "{}", &o));
    assert_non_null(strstr(pl_last_error(), "memory limit"));
    /* nesting in the parser */
    char deep[4000];
    size_t k = 0;
    k += (size_t)sprintf(deep, "{{ ");
    for (int i = 0; i < 1000; i++) deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 1000; i++) deep[k++] = ')';
    strcpy(deep + k, " }}");
    assert_null(render(deep, "{}"));
    assert_non_null(strstr(pl_last_error(), "nested too deeply"));
    /* the same compiled template renders many times */
    pl_jinja *t;
    assert_int_equal(pl_jinja_compile("{{ x }}", 7, &t), PL_OK);
    for (int i = 0; i < 3; i++) {
        char *out;
        assert_int_equal(pl_jinja_render(t, "{\"x\": 5}", 8, NULL, &out, NULL), PL_OK);
        assert_string_equal(out, "5");
        free(out);
    }
    pl_jinja_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whitespace),  cmocka_unit_test(test_loops),
        cmocka_unit_test(test_scope_macro_namespace), cmocka_unit_test(test_values),
        cmocka_unit_test(test_filters_tests), cmocka_unit_test(test_strftime),
        cmocka_unit_test(test_errors),      cmocka_unit_test(test_limits),
        cmocka_unit_test(test_jinja_quirks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
