/* Unit tests for the BPE pre-tokenizers (src/tokenizer/pretokenize.h): the splits of tricky
 * strings (contractions, digit runs, CJK, emoji, whitespace runs, newlines) per pre-tokenizer, as
 * llama.cpp's regex lists give them (each regex splits the fragments the previous ones left,
 * keeping the unmatched gaps). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "tokenizer/pretokenize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- pre-tokenizer splits ---- */

static void check_split(const char *pre, const char *text, const char *const *want) {
    pl_pretok *p;
    pl_pretok_flags fl;
    if (pl_pretok_create(pre, &p, &fl) != PL_OK) fail_msg("%s: %s", pre, pl_last_error());
    pl_pretok_span *sp;
    size_t n;
    assert_int_equal(pl_pretok_split(p, text, strlen(text), &sp, &n), PL_OK);
    size_t k = 0;
    while (want[k]) k++;
    int ok = n == k;
    for (size_t i = 0; ok && i < n; i++)
        ok = sp[i].len == strlen(want[i]) && memcmp(text + sp[i].off, want[i], sp[i].len) == 0;
    if (!ok) {
        fprintf(stderr, "%s on '%s' gave:", pre, text);
        for (size_t i = 0; i < n; i++) fprintf(stderr, " [%.*s]", (int)sp[i].len, text + sp[i].off);
        fprintf(stderr, "\n");
        fail_msg("pre-tokenizer %s split differs", pre);
    }
    free(sp);
    pl_pretok_destroy(p);
}

#define SPLIT(pre, text, ...) check_split(pre, text, (const char *const[]){__VA_ARGS__, NULL})

static const char T1[] = "I'm sure they'LL say it's 12345 bucks!";
static const char T2[] = "  spaces   and\ttabs\n\n  newline";
static const char T3[] = "中文字符 and 日本語😀🚀 emoji";
static const char T4[] = "x=1+2;  // ok?!";

static void test_pretok_gpt2_family(void **state) {
    (void)state;
    SPLIT("gpt-2", T1, "I", "'m", " sure", " they", "'", "LL", " say", " it", "'s", " 12345", " bucks", "!");
    SPLIT("gpt-2", T2, " ", " spaces", "  ", " and", "\t", "tabs", "\n\n ", " newline");
    SPLIT("gpt-2", T3, "中文字符", " and", " 日本語", "😀🚀", " emoji");
    SPLIT("gpt-2", T4, "x", "=", "1", "+", "2", ";", " ", " //", " ok", "?!");
    SPLIT("mpt", T1, "I", "'m", " sure", " they", "'", "LL", " say", " it", "'s", " 12345", " bucks", "!");
    SPLIT("olmo", T4, "x", "=", "1", "+", "2", ";", " ", " //", " ok", "?!");
    /* default: punctuation first (so contractions are lost), then digits in threes */
    SPLIT("", T1, "I", "'", "m", " sure", " they", "'", "LL", " say", " it", "'", "s", " ", "123", "45", " bucks", "!");
    SPLIT("default", T2, " ", " spaces", "  ", " and", "\t", "tabs", "\n\n ", " newline");
    SPLIT("default", T4, "x", "=", "1", "+", "2", ";", "  ", "//", " ok", "?!");
    SPLIT("falcon", T1, "I", "'", "m", " sure", " they", "'", "LL", " say", " it", "'", "s", " ", "123", "45", " bucks", "!");
    SPLIT("falcon", T4, "x", "=", "1", "+", "2", ";", "  ", "//", " ok", "?!");
    SPLIT("falcon", "a`b 1234", "a", "`", "b", " ", "123", "4");
    /* starcoder / refact / smollm: every digit alone */
    SPLIT("starcoder", T1, "I", "'m", " sure", " they", "'", "LL", " say", " it", "'s", " ", "1", "2", "3", "4", "5", " bucks", "!");
    SPLIT("refact", T2, " ", " spaces", "  ", " and", "\t", "tabs", "\n\n ", " newline");
    SPLIT("smollm", T3, "中文字符", " and", " 日本語", "😀🚀", " emoji");
}

static void test_pretok_llama3_qwen2(void **state) {
    (void)state;
    SPLIT("llama-bpe", T1, "I", "'m", " sure", " they", "'LL", " say", " it", "'s", " ", "123", "45", " bucks", "!");
    SPLIT("llama-bpe", T2, " ", " spaces", "  ", " and", "\ttabs", "\n\n", " ", " newline");
    SPLIT("llama-bpe", T3, "中文字符", " and", " 日本語", "😀🚀", " emoji");
    SPLIT("llama-bpe", T4, "x", "=", "1", "+", "2", ";", " ", " //", " ok", "?!");
    SPLIT("llama-bpe", "a \n\n b\r\n", "a", " \n\n", " b", "\r\n");
    SPLIT("llama-bpe", ".\n\nx 1234567", ".\n\n", "x", " ", "123", "456", "7");
    SPLIT("dbrx", T1, "I", "'m", " sure", " they", "'LL", " say", " it", "'s", " ", "123", "45", " bucks", "!");
    SPLIT("qwen2", T1, "I", "'m", " sure", " they", "'LL", " say", " it", "'s", " ", "1", "2", "3", "4", "5", " bucks", "!");
    SPLIT("qwen2", T2, " ", " spaces", "  ", " and", "\ttabs", "\n\n", " ", " newline");
    SPLIT("qwen2", T3, "中文字符", " and", " 日本語", "😀🚀", " emoji");
    /* qwen35 is qwen2 except for combining marks (here U+0301 after "e" and U+0300 after a
     * space): they stay in the letter run instead of starting a punctuation run. */
    SPLIT("qwen35", T1, "I", "'m", " sure", " they", "'LL", " say", " it", "'s", " ", "1", "2", "3", "4", "5", " bucks", "!");
    SPLIT("qwen35", T2, " ", " spaces", "  ", " and", "\ttabs", "\n\n", " ", " newline");
    SPLIT("qwen2", "re\xCC\x81sume\xCC\x81 \xCC\x80" "a", "re", "\xCC\x81sume", "\xCC\x81", " \xCC\x80", "a");
    /* gemma4 (run on text whose spaces are already U+2581): lines and newline runs only */
    SPLIT("gemma4", "a\xE2\x96\x81" "b\n\nc\r\nd\n", "a\xE2\x96\x81" "b", "\n\n", "c\r", "\n", "d", "\n");
    SPLIT("qwen35", "re\xCC\x81sume\xCC\x81 \xCC\x80" "a", "re\xCC\x81sume\xCC\x81", " \xCC\x80" "a");
}

static void test_pretok_deepseek(void **state) {
    (void)state;
    SPLIT("deepseek-coder", T1, "I", "'", "m", " sure", " they", "'", "LL", " say", " it", "'", "s", " ", "1", "2", "3", "4", "5", " bucks", "!");
    SPLIT("deepseek-coder", T2, " ", " spaces", "  ", " and", "\ttabs", "\n", "\n", " ", " newline");
    SPLIT("deepseek-coder", T3, "中文字符", " and", " ", "日本語", "😀🚀", " emoji");
    /* deepseek-llm: cased-letter words, then runs of [!-/:-~] (a class that includes the ASCII
     * letters, so "Ωmega" loses its "mega"), trailing spaces, CJK, digits. */
    SPLIT("deepseek-llm", "Hello, World!! 你好 \xCE\xA9mega 42  ", "Hello", ",", " World", "!!", " ",
          "你好", " \xCE\xA9", "mega", " ", "42", "  ");
}

static void test_pretok_unknown(void **state) {
    (void)state;
    pl_pretok *p = (pl_pretok *)1;
    assert_int_equal(pl_pretok_create("gpt-5-imaginary", &p, NULL), PL_ERR_UNSUPPORTED);
    assert_null(p);
    assert_non_null(strstr(pl_last_error(), "'gpt-5-imaginary'"));
    pl_pretok_flags f;
    assert_int_equal(pl_pretok_create("llama3", &p, &f), PL_OK);
    assert_true(f.ignore_merges && f.add_bos && f.clean_spaces);
    pl_pretok_destroy(p);
    assert_int_equal(pl_pretok_create("qwen2", &p, &f), PL_OK);
    assert_false(f.clean_spaces);
    pl_pretok_destroy(p);
}

/* Mistral's tekken and GPT-4o / Llama 4: case-aware words (lookahead classes). */
static void test_pretok_cased(void **state) {
    (void)state;
    const char *t = "HelloWorld ABCdef I'm 12345 a/b//\n";
    SPLIT("tekken", t, "Hello", "World", " ABCdef", " I", "'m", " ", "1", "2", "3", "4", "5", " a", "/b", "//\n");
    SPLIT("gpt-4o", t, "Hello", "World", " ABCdef", " I'm", " ", "123", "45", " a", "/b", "//\n");
    SPLIT("llama4", "ÉcoleNormale été", "École", "Normale", " été");
}

/* Every name llama.cpp maps to an implemented pre-tokenizer compiles. */
static void test_pretok_all_names(void **state) {
    (void)state;
    static const char *const names[] = {
        "default", "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
        "lfm2", "dbrx", "smaug-bpe", "glm4", "chatglm-bpe", "deepseek-llm", "deepseek-coder",
        "falcon", "gpt-2", "phi-2", "mpt", "olmo", "jais", "jina-es", "jina-de", "jina-v2-es",
        "jina-v2-de", "gigachat", "a.x-4.0", "mellum", "modern-bert", "exaone4", "trillion",
        "granite-docling", "starcoder", "refact", "codeshell", "exaone", "minerva-7b", "mellum2",
        "command-r", "smollm", "qwen2", "qwen35", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez",
        "stablelm2", "tekken", "gpt-4o", "llama4", "gemma4", "granite-embed-multi-311m"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        pl_pretok *p;
        if (pl_pretok_create(names[i], &p, NULL) != PL_OK) fail_msg("%s: %s", names[i], pl_last_error());
        pl_pretok_span *sp;
        size_t n;
        const char *text = "Hi there, 123 \xE6\x97\xA5\xF0\x9F\x98\x80!\n";
        assert_int_equal(pl_pretok_split(p, text, strlen(text), &sp, &n), PL_OK);
        size_t covered = 0; /* the spans tile the text */
        for (size_t k = 0; k < n; k++) {
            assert_int_equal(sp[k].off, covered);
            covered += sp[k].len;
        }
        assert_int_equal(covered, strlen(text));
        free(sp);
        pl_pretok_destroy(p);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pretok_gpt2_family),
        cmocka_unit_test(test_pretok_llama3_qwen2),
        cmocka_unit_test(test_pretok_deepseek),
        cmocka_unit_test(test_pretok_unknown),
        cmocka_unit_test(test_pretok_cased),
        cmocka_unit_test(test_pretok_all_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
