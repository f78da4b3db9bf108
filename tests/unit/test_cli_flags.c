/* Unit tests for cli/flags: one table gives the parser, the --help text and the usage errors
 * (each naming the flag), with the engine flags of cli/engine_flags for an engine command. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cli/flags.h"
#include "pagellm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const char *name;
    int quiet;
    int32_t count;
    float scale;
    int64_t big;
    double ratio;
    int pick;
    int calls, last_aux;
    const char *last_arg;
    pl_engine_config eng;
} opts;

static int note(const char *cmd, const pl_flag *f, const char *arg, void *o_) {
    opts *o = o_;
    if (arg && !strcmp(arg, "refuse")) {
        fprintf(stderr, "pagellm %s: --%s: refused\n", cmd, f->name);
        return 2;
    }
    o->calls++;
    o->last_aux = f->aux;
    o->last_arg = arg;
    return 0;
}

static const pl_flag FLAGS[] = {
    PL_FLAG_ROW_STR(opts, "name", 'N', name, "S", "a name"),
    PL_FLAG_ROW_SET(opts, "quiet", 'q', quiet, "say less"),
    PL_FLAG_ROW_I32(opts, "count", 'c', count, 1, 10, "N", "how many, 1..10\nsecond line"),
    PL_FLAG_ROW_F32(opts, "scale", 0, scale, 0, 2, "F", "a factor"),
    PL_FLAG_ROW_I64(opts, "big", 0, big, -0x1p63, 0x1p63, "N", "any int64_t"),
    PL_FLAG_ROW_F64(opts, "ratio", 0, ratio, 1e-3, 1e12, "R", "a double"),
    PL_FLAG_ROW_CHOICE(opts, "pick", 0, pick, "one|two|three", "a name, stored as its index"),
    PL_FLAG_ROW_FN("note", 0, note, 7, "X", "calls note (repeatable)"),
    PL_FLAG_ROW_FN("mark", 'k', note, 9, NULL, "calls note without a value"),
    PL_FLAG_ROW_SET(opts, "hidden", 0, quiet, NULL),
};

static const pl_flag_cmd PLAIN = {"demo", "usage: pagellm demo [options] [ARG]\n", "the end\n",
                                  FLAGS, sizeof FLAGS / sizeof FLAGS[0], -1, 1};
static const pl_flag_cmd ENGINE = {"demo", "usage: pagellm demo [options]\n", NULL, FLAGS,
                                   sizeof FLAGS / sizeof FLAGS[0], offsetof(opts, eng), 0};

static char captured[16384];

/* Parse the NULL-terminated arguments after the command's name with stream fd (1 or 2) captured
 * into `captured`. */
static int parse_capture(const pl_flag_cmd *cmd, opts *o, int *first, int fd, ...) {
    char *argv[32] = {(char *)"demo"};
    int argc = 1;
    va_list ap;
    va_start(ap, fd);
    for (const char *a; (a = va_arg(ap, const char *));) argv[argc++] = (char *)a;
    va_end(ap);
    memset(o, 0, sizeof *o);
    pl_engine_config_default(&o->eng);
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    fflush(fd == 1 ? stdout : stderr);
    int saved = dup(fd);
    dup2(fileno(tmp), fd);
    int rc = pl_flags_parse(cmd, argc, argv, o, first);
    fflush(fd == 1 ? stdout : stderr);
    dup2(saved, fd);
    close(saved);
    rewind(tmp);
    size_t n = fread(captured, 1, sizeof captured - 1, tmp);
    captured[n] = '\0';
    fclose(tmp);
    return rc;
}

#define PARSE(cmd, o, first, ...) parse_capture(cmd, o, first, 2, __VA_ARGS__, (const char *)NULL)

static void test_values_go_where_the_table_says(void **state) {
    (void)state;
    opts o;
    int first;
    assert_int_equal(PARSE(&PLAIN, &o, &first, "-N", "x", "--quiet", "--count=4", "--scale",
                           "1.5", "arg", "--note", "a", "-k"), 0);
    assert_string_equal(o.name, "x");
    assert_int_equal(o.quiet, 1);
    assert_int_equal(o.count, 4);
    assert_true(o.scale == 1.5f);
    assert_int_equal(o.calls, 2);
    assert_int_equal(o.last_aux, 9);
    assert_null(o.last_arg); /* --mark takes no value */
    assert_int_equal(first, 10); /* the positional argument, moved after the flags */
    assert_string_equal(captured, "");
    assert_int_equal(PARSE(&PLAIN, &o, &first, "-c", "10", "--note", "b"), 0);
    assert_int_equal(o.count, 10);
    assert_int_equal(o.last_aux, 7);
    assert_string_equal(o.last_arg, "b");
    assert_int_equal(PARSE(&PLAIN, &o, &first, "--big", "9223372036854775807", "--ratio",
                           "1e-3"), 0);
    assert_true(o.big == INT64_MAX);
    assert_true(o.ratio == 1e-3); /* the double as parsed, not a float's rounding */
    assert_int_equal(PARSE(&PLAIN, &o, &first, "--big", "-9223372036854775808"), 0);
    assert_true(o.big == INT64_MIN);
    assert_int_equal(PARSE(&PLAIN, &o, &first, "--pick", "three"), 0);
    assert_int_equal(o.pick, 2);
    assert_int_equal(PARSE(&PLAIN, &o, &first, "--pick", "one"), 0);
    assert_int_equal(o.pick, 0);
}

static void test_errors_name_the_flag(void **state) {
    (void)state;
    opts o;
    int first;
    assert_int_equal(PARSE(&PLAIN, &o, &first, "--cou", "3"), 0); /* a unique prefix */
    assert_int_equal(o.count, 3);
    assert_int_equal(PARSE(&PLAIN, &o, &first, "--counts", "3"), 2);
    assert_non_null(strstr(captured, "pagellm demo: unknown option '--counts' (did you mean "
                                     "--count?)"));
    assert_non_null(strstr(captured, "usage: pagellm demo"));
    /* an unknown letter is named, also inside a group and after a flag's value */
    assert_int_equal(PARSE(&PLAIN, &o, &first, "--note", "b", "-qxz"), 2); /* -q is --quiet */
    assert_non_null(strstr(captured, "pagellm demo: unknown option '-x'\n"));
    assert_int_equal(PARSE(&ENGINE, &o, &first, "-c", "2", "-9"), 2);
    assert_non_null(strstr(captured, "pagellm demo: unknown option '-9'\n"));
    assert_int_equal(PARSE(&PLAIN, &o, &first, "--count"), 2);
    assert_non_null(strstr(captured, "pagellm demo: --count needs a value"));
    assert_int_equal(PARSE(&PLAIN, &o, &first, "--count", "many"), 2);
    assert_non_null(strstr(captured, "--count: 'many' is not an integer"));
    assert_int_equal(PARSE(&PLAIN, &o, &first, "-c", "11"), 2);
    assert_non_null(strstr(captured, "--count: 11 is out of range [1, 10]"));
    assert_non_null(strstr(captured, "usage: pagellm demo")); /* a bad value: the usage too */
    assert_int_equal(PARSE(&PLAIN, &o, &first, "--big", "9223372036854775808"), 2);
    assert_non_null(strstr(captured, "--big: "));
    assert_int_equal(PARSE(&PLAIN, &o, &first, "--ratio", "1e13"), 2);
    assert_non_null(strstr(captured, "--ratio: 1e+13 is out of range"));
    assert_int_equal(PARSE(&PLAIN, &o, &first, "--pick", "tw"), 2); /* whole names only */
    assert_non_null(strstr(captured, "pagellm demo: --pick: 'tw' is not one, two or three\n"));
    assert_int_equal(PARSE(&PLAIN, &o, &first, "--scale", "2.5"), 2);
    assert_non_null(strstr(captured, "--scale: 2.5 is out of range"));
    assert_int_equal(PARSE(&PLAIN, &o, &first, "--scale", "nan"), 2);
    assert_non_null(strstr(captured, "--scale: 'nan' is not a number"));
    assert_int_equal(PARSE(&PLAIN, &o, &first, "--note", "refuse"), 2);
    assert_non_null(strstr(captured, "pagellm demo: --note: refused"));
    assert_int_equal(PARSE(&PLAIN, &o, &first, "a", "b"), 2);
    assert_non_null(strstr(captured, "pagellm demo: unexpected argument 'b'"));
    assert_int_equal(PARSE(&ENGINE, &o, &first, "a"), 2);
    assert_non_null(strstr(captured, "unexpected argument 'a'"));
    /* The engine flags are not a plain command's. */
    assert_int_equal(PARSE(&PLAIN, &o, &first, "--block-size", "32"), 2);
    assert_non_null(strstr(captured, "unknown option '--block-size'"));
}

static void test_engine_flags(void **state) {
    (void)state;
    opts o;
    int first;
    assert_int_equal(PARSE(&ENGINE, &o, &first, "--block-size", "32", "-t", "3", "-c", "2",
                           "--no-prefix-caching"), 0);
    assert_int_equal(o.eng.block_size, 32);
    assert_int_equal(o.eng.threads, 3);
    assert_int_equal(o.eng.enable_prefix_caching, 0);
    assert_int_equal(o.count, 2);
    assert_int_equal(PARSE(&ENGINE, &o, &first, "--block-size", "3"), 2);
    assert_non_null(strstr(captured, "--block-size: 3 is not a power of two"));
    assert_int_equal(PARSE(&ENGINE, &o, &first, "-t"), 2);
    assert_non_null(strstr(captured, "-t needs a value"));
    assert_int_equal(PARSE(&ENGINE, &o, &first, "--block-sise", "16"), 2);
    assert_non_null(strstr(captured, "(did you mean --block-size?)"));
    assert_int_equal(PARSE(&ENGINE, &o, &first, "--enforce-eager"), 0); /* vLLM-only: a warning */
    assert_non_null(strstr(captured, "--enforce-eager is a vLLM option"));
}

static void test_help_lists_every_listed_row(void **state) {
    (void)state;
    opts o;
    int first;
    assert_int_equal(parse_capture(&PLAIN, &o, &first, 1, "--help", (const char *)NULL),
                     PL_FLAGS_HELP);
    assert_true(strncmp(captured, "usage: pagellm demo [options] [ARG]\n", 36) == 0);
    for (size_t i = 0; i < sizeof FLAGS / sizeof FLAGS[0]; i++) {
        char label[64];
        snprintf(label, sizeof label, "--%s", FLAGS[i].name);
        if (FLAGS[i].help) assert_non_null(strstr(captured, label));
        else assert_null(strstr(captured, label));
    }
    assert_non_null(strstr(captured, "  -c, --count N                  how many, 1..10\n"
                                     "                                 second line\n"));
    assert_non_null(strstr(captured, "  -k, --mark                     calls note"));
    assert_null(strstr(captured, "--mark X"));
    assert_null(strstr(captured, "engine:"));
    assert_non_null(strstr(captured, "the end\n"));
    assert_int_equal(parse_capture(&ENGINE, &o, &first, 1, "-h", (const char *)NULL),
                     PL_FLAGS_HELP);
    assert_non_null(strstr(captured, "engine:\n"));
    assert_non_null(strstr(captured, "--kv-cache-memory B"));
    assert_non_null(strstr(captured, "-t, --threads N"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values_go_where_the_table_says),
        cmocka_unit_test(test_errors_name_the_flag),
        cmocka_unit_test(test_engine_flags),
        cmocka_unit_test(test_help_lists_every_listed_row),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
