/* Unit tests for tokenizer/chat_template: every family's exact output for one conversation,
 * detection from real template snippets, the ChatML fallback, names, BOS/EOS placement (also
 * through a real Llama 2 tokenizer), and refused input (bad roles, missing fields, no messages).
 *
 * The expected strings come from the formats' documentation and from llama.cpp's
 * tests/test-chat-template.cpp, which uses the same six-message conversation and no BOS text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "gguf/gguf.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

/* system + user + assistant + user + assistant (with spaces to trim) + user */
static const pl_chat_message conv[] = {
    {"system", "You are a helpful assistant"},
    {"user", "Hello"},
    {"assistant", "Hi there"},
    {"user", "Who are you"},
    {"assistant", "   I am an assistant   "},
    {"user", "Another question"},
};
enum { N_CONV = sizeof conv / sizeof conv[0] };

/* Formats conv with family f and checks the exact result. */
static void expect(pl_chat_format f, int gen, const char *bos, const char *eos, const char *want) {
    char *out = (char *)1;
    pl_status st = pl_chat_apply(f, conv, N_CONV, gen, bos, eos, &out);
    if (st != PL_OK) fail_msg("%s: %s", pl_chat_format_name(f), pl_last_error());
    if (strcmp(out, want))
        fail_msg("%s:\n got  [%s]\n want [%s]", pl_chat_format_name(f), out, want);
    free(out);
}

static void test_chatml(void **state) {
    (void)state;
    expect(PL_CHAT_CHATML, 1, "<s>", "</s>",
           "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello"
           "<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you"
           "<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>"
           "user\nAnother question<|im_end|>\n<|im_start|>assistant\n");
    /* Without the generation prompt the text ends after the last message. */
    expect(PL_CHAT_CHATML, 0, NULL, NULL,
           "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello"
           "<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you"
           "<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>"
           "user\nAnother question<|im_end|>\n");
}

static void test_llama2(void **state) {
    (void)state;
    /* Meta's template: BOS before every [INST], stripped contents, " ANSWER " before EOS. */
    expect(PL_CHAT_LLAMA2, 1, "<s>", "</s>",
           "<s>[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST] Hi there "
           "</s><s>[INST] Who are you [/INST] I am an assistant </s><s>[INST] Another question "
           "[/INST]");
    /* Without BOS text this equals llama.cpp's Jinja rendering of a content.strip() Llama 2
     * template (vigogne-2-70b-chat, bos_token ""). */
    expect(PL_CHAT_LLAMA2, 1, "", "</s>",
           "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST] Hi there </s>"
           "[INST] Who are you [/INST] I am an assistant </s>[INST] Another question [/INST]");
    /* llama.cpp's "llama2" (no <<SYS>> support): the system text becomes a line. */
    expect(PL_CHAT_LLAMA2_NOSYS, 1, "", NULL,
           "[INST] You are a helpful assistant\nHello [/INST]Hi there</s>[INST] Who are you "
           "[/INST]   I am an assistant   </s>[INST] Another question [/INST]");
    expect(PL_CHAT_LLAMA2_NOSYS, 1, "<s>", "</s>",
           "<s>[INST] You are a helpful assistant\nHello [/INST]Hi there</s>[INST] Who are you "
           "[/INST]   I am an assistant   </s>[INST] Another question [/INST]");
}

static void test_llama3(void **state) {
    (void)state;
    expect(PL_CHAT_LLAMA3, 1, "", NULL,
           "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>"
           "assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user"
           "<|end_header_id|>\n\nWho are you<|eot_id|><|start_header_id|>assistant"
           "<|end_header_id|>\n\nI am an assistant<|eot_id|><|start_header_id|>user"
           "<|end_header_id|>\n\nAnother question<|eot_id|><|start_header_id|>assistant"
           "<|end_header_id|>\n\n");
    char *out;
    assert_int_equal(pl_chat_apply(PL_CHAT_LLAMA3, conv + 1, 1, 1, "<|begin_of_text|>", NULL, &out),
                     PL_OK);
    assert_string_equal(out, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello"
                             "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    free(out);
}

static void test_mistral(void **state) {
    (void)state;
    expect(PL_CHAT_MISTRAL_V1, 1, "", "</s>",
           " [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s> [INST] Who are you "
           "[/INST]    I am an assistant   </s> [INST] Another question [/INST]");
    expect(PL_CHAT_MISTRAL_V3, 1, "", "</s>",
           "[INST] You are a helpful assistant\n\nHello[/INST] Hi there</s>[INST] Who are you"
           "[/INST] I am an assistant</s>[INST] Another question[/INST]");
    expect(PL_CHAT_MISTRAL_V3_TEKKEN, 1, "", "</s>",
           "[INST]You are a helpful assistant\n\nHello[/INST]Hi there</s>[INST]Who are you[/INST]"
           "   I am an assistant   </s>[INST]Another question[/INST]");
    expect(PL_CHAT_MISTRAL_V7, 1, "", "</s>",
           "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi "
           "there</s>[INST] Who are you[/INST]    I am an assistant   </s>[INST] Another "
           "question[/INST]");
    expect(PL_CHAT_MISTRAL_V7_TEKKEN, 1, "", "</s>",
           "[SYSTEM_PROMPT]You are a helpful assistant[/SYSTEM_PROMPT][INST]Hello[/INST]Hi there"
           "</s>[INST]Who are you[/INST]   I am an assistant   </s>[INST]Another question[/INST]");
    /* With the BOS text: the official templates start with bos_token; EOS text is the model's. */
    expect(PL_CHAT_MISTRAL_V1, 0, "<s>", "<EOS>",
           "<s> [INST] You are a helpful assistant\n\nHello [/INST] Hi there<EOS> [INST] Who are "
           "you [/INST]    I am an assistant   <EOS> [INST] Another question [/INST]");
}

static void test_zephyr_phi3(void **state) {
    (void)state;
    expect(PL_CHAT_ZEPHYR, 1, "<s>", "</s>",
           "<|system|>\nYou are a helpful assistant</s>\n<|user|>\nHello</s>\n<|assistant|>\nHi "
           "there</s>\n<|user|>\nWho are you</s>\n<|assistant|>\n   I am an assistant   </s>\n"
           "<|user|>\nAnother question</s>\n<|assistant|>\n");
    /* StableLM-2 Zephyr: its EOS is <|endoftext|> (llama.cpp's zephyr expectation). */
    expect(PL_CHAT_ZEPHYR, 1, "", "<|endoftext|>",
           "<|system|>\nYou are a helpful assistant<|endoftext|>\n<|user|>\nHello<|endoftext|>\n"
           "<|assistant|>\nHi there<|endoftext|>\n<|user|>\nWho are you<|endoftext|>\n"
           "<|assistant|>\n   I am an assistant   <|endoftext|>\n<|user|>\nAnother question"
           "<|endoftext|>\n<|assistant|>\n");
    expect(PL_CHAT_PHI3, 1, "<s>", "</s>",
           "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>"
           "\nHi there<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant"
           "   <|end|>\n<|user|>\nAnother question<|end|>\n<|assistant|>\n");
}

static void test_gemma(void **state) {
    (void)state;
    expect(PL_CHAT_GEMMA, 1, "", NULL,
           "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>"
           "model\nHi there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n"
           "<start_of_turn>model\nI am an assistant<end_of_turn>\n<start_of_turn>user\nAnother "
           "question<end_of_turn>\n<start_of_turn>model\n");
    /* Two system messages join; a trailing one is kept as a user turn; BOS first. */
    const pl_chat_message m[] = {{"system", " A "}, {"system", "B"}, {"user", "Q"},
                                 {"system", "late"}};
    char *out;
    assert_int_equal(pl_chat_apply(PL_CHAT_GEMMA, m, 4, 0, "<bos>", NULL, &out), PL_OK);
    assert_string_equal(out, "<bos><start_of_turn>user\nA\n\nB\n\nQ<end_of_turn>\n"
                             "<start_of_turn>user\nlate<end_of_turn>\n");
    free(out);
}

static void test_bos_rules(void **state) {
    (void)state;
    const pl_chat_message one[] = {{"user", "hi"}};
    for (int f = PL_CHAT_UNKNOWN; f < PL_CHAT_COUNT; f++) {
        char *out;
        assert_int_equal(pl_chat_apply((pl_chat_format)f, one, 1, 1, "<BOS>", "<EOS>", &out),
                         PL_OK);
        int starts = strncmp(out, "<BOS>", 5) == 0;
        if (starts != pl_chat_format_adds_bos((pl_chat_format)f))
            fail_msg("%s: starts with BOS = %d: [%s]", pl_chat_format_name((pl_chat_format)f),
                     starts, out);
        /* Only Meta's llama2 repeats it, and only before a later [INST]. */
        assert_true(strstr(out + starts * 5, "<BOS>") == NULL);
        free(out);
    }
    assert_false(pl_chat_format_adds_bos(PL_CHAT_CHATML));
    assert_true(pl_chat_format_adds_bos(PL_CHAT_LLAMA3));
    assert_false(pl_chat_format_adds_bos((pl_chat_format)99));
}

/* Snippets of real templates (the distinctive part only). */
typedef struct {
    const char *what;
    const char *tmpl;
    pl_chat_format want; /* pl_chat_classify's answer */
} detect_case;

static const detect_case detect_cases[] = {
    {"OpenHermes / Qwen ChatML",
     "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
     "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}",
     PL_CHAT_CHATML},
    {"Llama-2-chat (Meta)",
     "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] "
     "%}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}",
     PL_CHAT_LLAMA2},
    {"Mistral-7B-Instruct-v0.2 (old)",
     "{{ bos_token }}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + "
     "' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}",
     PL_CHAT_LLAMA2_NOSYS},
    {"Mistral v1 (official)",
     "{{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}",
     PL_CHAT_MISTRAL_V1},
    {"Mistral-Large-2407 v3",
     "{{- \"[AVAILABLE_TOOLS] [\" }}{{- \"[INST] \" + message[\"content\"] + \"[/INST]\" }}",
     PL_CHAT_MISTRAL_V3},
    {"Mistral-Nemo v3-tekken",
     "{{- \"[AVAILABLE_TOOLS][\" }}{{- \"[INST]\" + message[\"content\"] + \"[/INST]\" }}",
     PL_CHAT_MISTRAL_V3_TEKKEN},
    {"Mistral-Large-2411 v7",
     "{{ '[INST] ' + message['content'] + '[/INST]' }}{% elif message['role'] == 'system' %}"
     "{{ '[SYSTEM_PROMPT] ' + message['content'] + '[/SYSTEM_PROMPT]' }}",
     PL_CHAT_MISTRAL_V7},
    {"Llama 3",
     "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
     "message['content'] | trim + '<|eot_id|>' %}",
     PL_CHAT_LLAMA3},
    {"Phi-3-mini",
     "{{'<|user|>' + '\\n' + message['content'] + '<|end|>' + '\\n' + '<|assistant|>' + '\\n'}}",
     PL_CHAT_PHI3},
    {"zephyr-7b-beta",
     "{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' + message['content'] + eos_token }}\n"
     "{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}",
     PL_CHAT_ZEPHYR},
    {"stablelm-2-zephyr",
     "{{'<|user|>\\n' + message['content'] + '<|endoftext|>' + '\\n'}}", PL_CHAT_ZEPHYR},
    {"gemma-7b-it",
     "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}",
     PL_CHAT_GEMMA},
    {"a bare family name", "mistral-v3", PL_CHAT_MISTRAL_V3},
    {"vicuna (not supported)", "{{-'USER: ' + message['content'] + '\\n'-}}ASSISTANT: ",
     PL_CHAT_UNKNOWN},
    {"phi-4 shares <|im_start|> but is not ChatML",
     "{{'<|im_start|>system<|im_sep|>' + message['content'] + '<|im_end|>'}}", PL_CHAT_UNKNOWN},
    {"ChatGLM4 shares <|user|> but is not Zephyr",
     "[gMASK]<sop>{% for item in messages %}<|{{ item['role'] }}|>\\n{{ item['content'] }}"
     "<|user|>{{ eos_token }}",
     PL_CHAT_UNKNOWN},
    {"plain text", "hello world", PL_CHAT_UNKNOWN},
};

static void test_detect(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof detect_cases / sizeof detect_cases[0]; i++) {
        const detect_case *c = &detect_cases[i];
        pl_chat_format got = pl_chat_classify(c->tmpl, strlen(c->tmpl));
        if (got != c->want)
            fail_msg("%s: classified as %s, want %s", c->what, pl_chat_format_name(got),
                     pl_chat_format_name(c->want));
        pl_chat_format d = pl_chat_detect(c->tmpl, strlen(c->tmpl));
        assert_int_equal(d, c->want == PL_CHAT_UNKNOWN ? PL_CHAT_FALLBACK : c->want);
    }
}

static void test_fallback(void **state) {
    (void)state;
    assert_int_equal(PL_CHAT_FALLBACK, PL_CHAT_CHATML);
    assert_int_equal(pl_chat_classify(NULL, 0), PL_CHAT_UNKNOWN);
    assert_int_equal(pl_chat_detect(NULL, 0), PL_CHAT_CHATML);
    assert_int_equal(pl_chat_detect("", 0), PL_CHAT_CHATML);
    /* The length is honoured: the template need not be NUL-terminated, and bytes past len are
     * not looked at. */
    const char buf[] = "xxxxxxxx<start_of_turn>";
    assert_int_equal(pl_chat_classify(buf, 8), PL_CHAT_UNKNOWN);
    assert_int_equal(pl_chat_classify(buf, sizeof buf - 1), PL_CHAT_GEMMA);
    assert_int_equal(pl_chat_classify("llama3 ", 6), PL_CHAT_LLAMA3);
    /* Formatting with PL_CHAT_UNKNOWN is formatting with the fallback. */
    char *a, *b;
    assert_int_equal(pl_chat_apply(PL_CHAT_UNKNOWN, conv, N_CONV, 1, "<s>", NULL, &a), PL_OK);
    assert_int_equal(pl_chat_apply(PL_CHAT_CHATML, conv, N_CONV, 1, "<s>", NULL, &b), PL_OK);
    assert_string_equal(a, b);
    free(a);
    free(b);
}

static void test_names(void **state) {
    (void)state;
    static const char *const required[] = {"llama2", "llama3", "chatml", "mistral-v1",
                                           "mistral-v3", "mistral-v7", "zephyr", "phi3", "gemma"};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        pl_chat_format f = PL_CHAT_UNKNOWN;
        assert_int_equal(pl_chat_format_by_name(required[i], &f), PL_OK);
        assert_string_equal(pl_chat_format_name(f), required[i]);
    }
    for (int f = PL_CHAT_UNKNOWN + 1; f < PL_CHAT_COUNT; f++) { /* every name round-trips */
        pl_chat_format g;
        assert_int_equal(pl_chat_format_by_name(pl_chat_format_name((pl_chat_format)f), &g), PL_OK);
        assert_int_equal(g, f);
        const char *n = pl_chat_format_name((pl_chat_format)f);
        assert_int_equal(pl_chat_classify(n, strlen(n)), f);
    }
    pl_chat_format g = PL_CHAT_GEMMA;
    assert_int_equal(pl_chat_format_by_name("llama-2", &g), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "'llama-2'"));
    assert_non_null(strstr(pl_last_error(), "mistral-v7"));
    assert_int_equal(g, PL_CHAT_GEMMA); /* untouched */
    assert_int_equal(pl_chat_format_by_name("unknown", &g), PL_ERR_INVALID_ARG);
    assert_int_equal(pl_chat_format_by_name(NULL, &g), PL_ERR_INVALID_ARG);
    assert_string_equal(pl_chat_format_name(PL_CHAT_UNKNOWN), "unknown");
    assert_string_equal(pl_chat_format_name((pl_chat_format)-1), "unknown");
}

static void test_bad_input(void **state) {
    (void)state;
    char *out = (char *)1;
    const pl_chat_message tool[] = {{"user", "hi"}, {"tool", "42"}};
    for (int f = PL_CHAT_UNKNOWN; f < PL_CHAT_COUNT; f++) {
        out = (char *)1;
        assert_int_equal(pl_chat_apply((pl_chat_format)f, tool, 2, 1, "<s>", "</s>", &out),
                         PL_ERR_INVALID_ARG);
        assert_null(out);
        assert_non_null(strstr(pl_last_error(), "'tool'"));
        assert_non_null(strstr(pl_last_error(), "message 1"));
    }
    const pl_chat_message upper[] = {{"User", "hi"}}; /* roles are case-sensitive */
    assert_int_equal(pl_chat_apply(PL_CHAT_CHATML, upper, 1, 1, NULL, NULL, &out),
                     PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "'User'"));
    const pl_chat_message no_role[] = {{NULL, "hi"}};
    assert_int_equal(pl_chat_apply(PL_CHAT_CHATML, no_role, 1, 1, NULL, NULL, &out),
                     PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "no role"));
    const pl_chat_message no_content[] = {{"user", "a"}, {"assistant", NULL}};
    assert_int_equal(pl_chat_apply(PL_CHAT_LLAMA3, no_content, 2, 1, NULL, NULL, &out),
                     PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "message 1 has no content"));
    /* No messages. */
    out = (char *)1;
    assert_int_equal(pl_chat_apply(PL_CHAT_CHATML, conv, 0, 1, NULL, NULL, &out),
                     PL_ERR_INVALID_ARG);
    assert_null(out);
    assert_non_null(strstr(pl_last_error(), "no messages"));
    assert_int_equal(pl_chat_apply(PL_CHAT_CHATML, NULL, 3, 1, NULL, NULL, &out),
                     PL_ERR_INVALID_ARG);
    assert_int_equal(pl_chat_apply((pl_chat_format)77, conv, N_CONV, 1, NULL, NULL, &out),
                     PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "77"));
}

static void test_empty_and_long_contents(void **state) {
    (void)state;
    /* Empty contents are fine; a long content grows the buffer. */
    const pl_chat_message e[] = {{"user", ""}};
    char *out;
    assert_int_equal(pl_chat_apply(PL_CHAT_PHI3, e, 1, 0, NULL, NULL, &out), PL_OK);
    assert_string_equal(out, "<|user|>\n<|end|>\n");
    free(out);
    size_t n = 100000;
    char *big = malloc(n + 1);
    assert_non_null(big);
    memset(big, 'x', n);
    big[n] = '\0';
    const pl_chat_message m[] = {{"user", big}, {"assistant", big}};
    assert_int_equal(pl_chat_apply(PL_CHAT_CHATML, m, 2, 1, NULL, NULL, &out), PL_OK);
    assert_int_equal(strlen(out), 2 * n + strlen("<|im_start|>user\n<|im_end|>\n") +
                                      strlen("<|im_start|>assistant\n<|im_end|>\n") +
                                      strlen("<|im_start|>assistant\n"));
    free(out);
    free(big);
}

/* The BOS decision end to end: Llama 2's text, tokenized the way the server will (parse_special
 * = 1, add_special = 0) with a real Llama 2 vocabulary, starts with the BOS id and has one BOS and
 * one EOS per finished turn, exactly where Meta's template puts them. */
static void test_tokenized_llama2(void **state) {
    (void)state;
    pl_gguf *g;
    assert_int_equal(pl_gguf_open(PL_SHARED_DIR "/testdata/vocab/ggml-vocab-llama-spm.gguf", &g),
                     PL_OK);
    pl_tokenizer *t;
    assert_int_equal(pl_tokenizer_load(g, &t), PL_OK);
    int32_t bos = pl_tokenizer_bos(t), eos = pl_tokenizer_eos(t);
    const char *bos_text = pl_tokenizer_token_text(t, bos);
    const char *eos_text = pl_tokenizer_token_text(t, eos);
    assert_string_equal(bos_text, "<s>");
    char *text;
    assert_int_equal(pl_chat_apply(PL_CHAT_LLAMA2, conv, N_CONV, 1, bos_text, eos_text, &text),
                     PL_OK);
    int32_t *ids;
    size_t n;
    assert_int_equal(pl_tokenize(t, text, strlen(text), 0, 1, &ids, &n), PL_OK);
    assert_true(n > 10);
    assert_int_equal(ids[0], bos);
    size_t n_bos = 0, n_eos = 0;
    for (size_t i = 0; i < n; i++) {
        n_bos += ids[i] == bos;
        n_eos += ids[i] == eos;
        if (ids[i] == eos) { /* the next turn opens with BOS */
            assert_true(i + 1 < n);
            assert_int_equal(ids[i + 1], bos);
        }
    }
    assert_int_equal(n_bos, 3);
    assert_int_equal(n_eos, 2);
    free(ids);
    free(text);
    /* ChatML has no BOS in its text, so none is tokenized. */
    assert_int_equal(pl_chat_apply(PL_CHAT_CHATML, conv, 2, 1, bos_text, eos_text, &text), PL_OK);
    assert_int_equal(pl_tokenize(t, text, strlen(text), 0, 1, &ids, &n), PL_OK);
    for (size_t i = 0; i < n; i++) assert_int_not_equal(ids[i], bos);
    free(ids);
    free(text);
    pl_tokenizer_destroy(t);
    pl_gguf_close(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chatml),
        cmocka_unit_test(test_llama2),
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_mistral),
        cmocka_unit_test(test_zephyr_phi3),
        cmocka_unit_test(test_gemma),
        cmocka_unit_test(test_bos_rules),
        cmocka_unit_test(test_detect),
        cmocka_unit_test(test_fallback),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_empty_and_long_contents),
        cmocka_unit_test(test_tokenized_llama2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
