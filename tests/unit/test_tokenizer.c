/* Unit tests for src/tokenizer: llama.cpp's tokenizer test vectors (every vocabulary in
 * ../shared/testdata/vocab), the stories260K model's vocabulary and reference texts, special-token parsing, the
 * streaming detokenizer, and the errors. The pre-tokenizer splits are in test_tokenizer_pretok.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#define VOCAB_DIR PL_SHARED_DIR "/testdata/vocab/"
#define SPM_VOCAB VOCAB_DIR "ggml-vocab-llama-spm.gguf"
#define GPT2_VOCAB VOCAB_DIR "ggml-vocab-gpt-2.gguf"
#define GEMMA4_VOCAB VOCAB_DIR "ggml-vocab-gemma-4.gguf"
#define STORIES PL_SHARED_DIR "/models/stories260K.gguf"
#define STORIES_REF PL_SHARED_DIR "/testdata/reference/stories260K.json"

/* ---- helpers ---- */

static pl_tokenizer *load(const char *path) {
    pl_gguf *g = NULL;
    if (pl_gguf_open(path, &g) != PL_OK) fail_msg("open %s: %s", path, pl_last_error());
    pl_tokenizer *t = NULL;
    pl_status st = pl_tokenizer_load(g, &t);
    pl_gguf_close(g);
    if (st != PL_OK) fail_msg("load %s: %s", path, pl_last_error());
    return t;
}

static size_t tok(const pl_tokenizer *t, const char *s, int add_special, int parse_special,
                  int32_t **ids) {
    size_t n = 0;
    if (pl_tokenize(t, s, strlen(s), add_special, parse_special, ids, &n) != PL_OK)
        fail_msg("tokenize '%s': %s", s, pl_last_error());
    return n;
}

static char *detok(const pl_tokenizer *t, const int32_t *ids, size_t n, int skip_special) {
    char *s = NULL;
    size_t len = 0;
    if (pl_detokenize(t, ids, n, skip_special, &s, &len) != PL_OK)
        fail_msg("detokenize: %s", pl_last_error());
    assert_int_equal(strlen(s), len);
    return s;
}

static int valid_utf8(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = p[i] < 0x80 ? 1 : (p[i] & 0xE0) == 0xC0 ? 2 : (p[i] & 0xF0) == 0xE0 ? 3 : (p[i] & 0xF8) == 0xF0 ? 4 : 0;
        if (k == 0 || i + k > n) return 0;
        for (size_t j = 1; j < k; j++)
            if ((p[i + j] & 0xC0) != 0x80) return 0;
        i += k;
    }
    return 1;
}

/* Push ids one at a time (is_first = 1), check every chunk is whole UTF-8, flush; malloc'ed. */
static char *stream(const pl_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                    int is_first, int check_chunks) {
    size_t cap = PL_DETOK_CAP(pl_tokenizer_max_piece_len(t));
    char *chunk = malloc(cap), *all = malloc(n * cap + cap + 1);
    size_t len = 0;
    pl_detok_stream s;
    pl_detok_init(&s, t, skip_special, is_first);
    for (size_t i = 0; i < n; i++) {
        size_t k = pl_detok_push(&s, ids[i], chunk, cap);
        if (check_chunks) assert_true(valid_utf8(chunk, k));
        memcpy(all + len, chunk, k);
        len += k;
    }
    size_t k = pl_detok_flush(&s, chunk, cap);
    memcpy(all + len, chunk, k);
    len += k;
    all[len] = '\0';
    free(chunk);
    return all;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* ---- llama.cpp's vocabulary test vectors ---- */

/* A text llama.cpp's clean_spaces changes on the way back (" ?", " !", " .", " ," and " '"). */
static int cleanable(const char *s) {
    for (; *s; s++)
        if (s[0] == ' ' && s[1] && strchr("?!.,'", s[1])) return 1;
    return 0;
}

/* Inputs are separated by "\n__ggml_vocab_test__\n" (a trailing separator ends the list); the
 * .out file has one line of ids per input. Every input is tokenized (add_special = 0,
 * parse_special = 0) and compared with llama.cpp's ids; the ids are detokenized, whole and
 * streamed: the text must come back exactly, except where clean_spaces (a vocabulary with
 * clean_spaces set) changes it as llama.cpp's does. Prints the counts; returns the number of
 * inputs whose ids differ. */
static size_t run_vectors(const char *vocab, size_t want_cases, int clean_spaces) {
    pl_tokenizer *t = load(vocab);
    char path[1024];
    size_t in_len, out_len;
    snprintf(path, sizeof path, "%s.inp", vocab);
    char *inp = read_file(path, &in_len);
    snprintf(path, sizeof path, "%s.out", vocab);
    char *out = read_file(path, &out_len);
    const char *sep = "\n__ggml_vocab_test__\n";
    size_t pos = 0, n_cases = 0, n_bad = 0, n_round = 0;
    char *line = out;
    while (pos < in_len) {
        char *next = strstr(inp + pos, sep);
        size_t len = next ? (size_t)(next - (inp + pos)) : in_len - pos;
        char *case_text = strndup(inp + pos, len);
        pos = next ? (size_t)(next - inp) + strlen(sep) : in_len;

        char *eol = strchr(line, '\n');
        assert_non_null(eol);
        *eol = '\0';
        int32_t want[1024];
        size_t n_want = 0;
        for (char *p = line; *p && n_want < sizeof want / sizeof want[0];) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p) break;
            want[n_want++] = (int32_t)v;
            p = end;
        }
        line = eol + 1;

        int32_t *ids;
        size_t n = tok(t, case_text, 0, 0, &ids);
        if (n != n_want || memcmp(ids, want, n * sizeof *ids) != 0) {
            fprintf(stderr, "%s case %zu '%s': got", vocab, n_cases, case_text);
            for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
            fprintf(stderr, "\n   want");
            for (size_t i = 0; i < n_want; i++) fprintf(stderr, " %d", want[i]);
            fprintf(stderr, "\n");
            n_bad++;
        }

        char *back = detok(t, ids, n, 1);
        if (!clean_spaces || !cleanable(case_text)) {
            if (strcmp(back, case_text) != 0)
                fail_msg("%s case %zu: '%s' came back as '%s'", vocab, n_cases, case_text, back);
            n_round++;
        }
        char *streamed = stream(t, ids, n, 1, 1, 1);
        assert_string_equal(streamed, back);
        free(streamed);
        free(back);
        free(ids);
        free(case_text);
        n_cases++;
    }
    print_message("%s: %zu/%zu inputs tokenize as llama.cpp, %zu round-trip exactly\n", vocab,
                  n_cases - n_bad, n_cases, n_round);
    assert_int_equal(n_cases, want_cases);
    free(inp);
    free(out);
    pl_tokenizer_destroy(t);
    return n_bad;
}

/* Every vocabulary of llama.cpp's vectors in VOCAB_DIR, with what its run must give: a file
 * there that is not listed fails the test (a new vocabulary has to be measured, not skipped). */
static const struct {
    const char *file;   /* ggml-vocab-<name>.gguf */
    size_t n_cases;     /* inputs in its .inp */
    int clean_spaces;   /* llama.cpp's detokenize drops the space of " ?", " 's"... */
} VOCABS[] = {
    {"ggml-vocab-llama-spm.gguf", 46, 0}, {"ggml-vocab-gpt-2.gguf", 46, 1},
    {"ggml-vocab-llama-bpe.gguf", 46, 1}, {"ggml-vocab-qwen2.gguf", 46, 0},
    {"ggml-vocab-qwen35.gguf", 50, 0},    {"ggml-vocab-gemma-4.gguf", 46, 1},
};
enum { N_VOCABS = sizeof VOCABS / sizeof VOCABS[0] };

static void test_vectors_every_vocab(void **state) {
    (void)state;
    DIR *d = opendir(VOCAB_DIR);
    if (!d) fail_msg("cannot open %s", VOCAB_DIR);
    int seen[N_VOCABS] = {0};
    size_t n_bad = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".gguf") != 0) continue;
        int k = -1;
        for (int i = 0; i < N_VOCABS; i++)
            if (strcmp(VOCABS[i].file, e->d_name) == 0) k = i;
        if (k < 0) fail_msg("%s%s is not covered: add it to VOCABS", VOCAB_DIR, e->d_name);
        char path[512];
        snprintf(path, sizeof path, "%s%s", VOCAB_DIR, e->d_name);
        n_bad += run_vectors(path, VOCABS[k].n_cases, VOCABS[k].clean_spaces);
        seen[k] = 1;
    }
    closedir(d);
    for (int i = 0; i < N_VOCABS; i++)
        if (!seen[i]) fail_msg("%s%s is missing", VOCAB_DIR, VOCABS[i].file);
    assert_int_equal(n_bad, 0);
}

static void test_load_speed(void **state) {
    (void)state;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    pl_tokenizer *t = load(SPM_VOCAB);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    assert_int_equal(pl_tokenizer_n_vocab(t), 32000);
    assert_true(s < 1.0);
    pl_tokenizer_destroy(t);
}

/* ---- stories260K ---- */

static void test_stories_basics(void **state) {
    (void)state;
    pl_tokenizer *t = load(STORIES);
    assert_int_equal(pl_tokenizer_get_kind(t), PL_TOK_SPM);
    assert_string_equal(pl_tokenizer_pre_name(t), "");
    assert_int_equal(pl_tokenizer_n_vocab(t), 512);
    assert_int_equal(pl_tokenizer_bos(t), 1);
    assert_int_equal(pl_tokenizer_eos(t), 2);
    assert_true(pl_tokenizer_add_bos(t));
    assert_false(pl_tokenizer_add_eos(t));
    assert_true(pl_tokenizer_is_eog(t, 2));
    assert_false(pl_tokenizer_is_eog(t, 1));
    assert_false(pl_tokenizer_is_eog(t, 403));
    assert_false(pl_tokenizer_is_eog(t, 512));
    assert_int_equal(pl_tokenizer_token_type(t, 0), PL_TOKEN_UNKNOWN);
    assert_int_equal(pl_tokenizer_token_type(t, 1), PL_TOKEN_CONTROL);
    assert_int_equal(pl_tokenizer_token_type(t, 3), PL_TOKEN_BYTE);
    assert_int_equal(pl_tokenizer_token_type(t, 403), PL_TOKEN_NORMAL);
    assert_string_equal(pl_tokenizer_token_text(t, 403), "\xE2\x96\x81Once");
    assert_null(pl_tokenizer_token_text(t, 512));
    assert_null(pl_tokenizer_token_text(t, -1));

    int32_t *ids;
    size_t n = tok(t, "Once upon a time", 0, 0, &ids);
    int32_t want[] = {403, 407, 261, 378};
    assert_int_equal(n, 4);
    assert_memory_equal(ids, want, sizeof want);
    free(ids);
    n = tok(t, "Once upon a time", 1, 0, &ids);
    int32_t want_bos[] = {1, 403, 407, 261, 378};
    assert_int_equal(n, 5);
    assert_memory_equal(ids, want_bos, sizeof want_bos);
    free(ids);
    n = tok(t, "", 1, 0, &ids);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 1);
    free(ids);
    n = tok(t, "", 0, 0, &ids);
    assert_int_equal(n, 0);
    free(ids);

    /* Pieces: U+2581 is a space, byte tokens are raw bytes, control tokens need `special`. */
    char buf[64];
    assert_int_equal(pl_token_to_piece(t, 403, buf, sizeof buf, 0), 5);
    assert_memory_equal(buf, " Once", 5);
    assert_int_equal(pl_token_to_piece(t, 432, buf, sizeof buf, 0), 1);
    assert_memory_equal(buf, ",", 1);
    assert_int_equal(pl_token_to_piece(t, 3 + 0xE6, buf, sizeof buf, 0), 1);
    assert_int_equal((unsigned char)buf[0], 0xE6);
    assert_int_equal(pl_token_to_piece(t, 1, buf, sizeof buf, 0), 0);
    assert_int_equal(pl_token_to_piece(t, 1, buf, sizeof buf, 1), 3);
    assert_memory_equal(buf, "<s>", 3);
    assert_int_equal(pl_token_to_piece(t, 0, buf, sizeof buf, 0), 0);
    assert_int_equal(pl_token_to_piece(t, 0, buf, sizeof buf, 1), 5);
    assert_int_equal(pl_token_to_piece(t, 403, buf, 2, 0), 5); /* truncated copy, full length */
    assert_memory_equal(buf, " O", 2);
    assert_int_equal(pl_token_to_piece(t, 9999, buf, sizeof buf, 1), 0);
    pl_tokenizer_destroy(t);
}

/* The reference texts of llama.cpp's run: prompt_text is the prompt without BOS detokenized
 * (the first token's space prefix removed); greedy_text is the continuation's pieces as they
 * stream after the prompt (its first space kept). With BOS in front, llama.cpp keeps the first
 * space: removing a leading BOS switches the space rule off. */
static void test_stories_reference(void **state) {
    (void)state;
    pl_tokenizer *t = load(STORIES);
    json_error_t jerr;
    json_t *root = json_load_file(STORIES_REF, 0, &jerr);
    if (!root) fail_msg("%s: %s", STORIES_REF, jerr.text);
    json_t *cases = json_object_get(root, "cases");
    size_t ci, checked = 0;
    json_t *c;
    json_array_foreach(cases, ci, c) {
        json_t *ptext = json_object_get(c, "prompt_text"), *gtext = json_object_get(c, "greedy_text");
        json_t *ptoks = json_object_get(c, "prompt_tokens"), *gtoks = json_object_get(c, "greedy_tokens");
        size_t np = json_array_size(ptoks), ng = json_array_size(gtoks);
        int32_t *all = malloc((np + ng) * sizeof *all);
        for (size_t i = 0; i < np; i++) all[i] = (int32_t)json_integer_value(json_array_get(ptoks, i));
        for (size_t i = 0; i < ng; i++) all[np + i] = (int32_t)json_integer_value(json_array_get(gtoks, i));
        if (ptext && gtext) {
            const char *pt = json_string_value(ptext), *gt = json_string_value(gtext);
            int32_t *ids;
            size_t n = tok(t, pt, 1, 0, &ids);
            assert_int_equal(n, np);
            assert_memory_equal(ids, all, np * sizeof *ids);
            free(ids);

            char *s = detok(t, all + 1, np - 1, 1); /* without BOS */
            assert_string_equal(s, pt);
            free(s);
            s = detok(t, all, np, 1); /* with BOS: the space stays */
            assert_int_equal(s[0], ' ');
            assert_string_equal(s + 1, pt);
            free(s);
            s = stream(t, all + np, ng, 1, 0, 1); /* continuation, not first */
            assert_string_equal(s, gt);
            free(s);
            s = detok(t, all, np + ng, 1);
            char *want = malloc(strlen(pt) + strlen(gt) + 2);
            sprintf(want, " %s%s", pt, gt);
            assert_string_equal(s, want);
            free(want);
            free(s);
            s = stream(t, all, np + ng, 1, 1, 1);
            char *whole = detok(t, all, np + ng, 1);
            assert_string_equal(s, whole);
            free(s);
            free(whole);
            checked++;
        }
        /* skip_special = 0 shows the BOS text */
        char *s = detok(t, all, np, 0);
        assert_memory_equal(s, "<s> ", 4);
        free(s);
        free(all);
    }
    assert_int_equal(checked, 3);
    json_decref(root);
    pl_tokenizer_destroy(t);
}

/* ---- special tokens ---- */

static void test_parse_special(void **state) {
    (void)state;
    pl_tokenizer *t = load(GPT2_VOCAB);
    assert_string_equal(pl_tokenizer_pre_name(t), "gpt-2");
    assert_int_equal(pl_tokenizer_get_kind(t), PL_TOK_BPE);
    assert_int_equal(pl_tokenizer_bos(t), 50256);
    assert_false(pl_tokenizer_add_bos(t));
    assert_true(pl_tokenizer_is_eog(t, 50256));
    assert_int_equal(pl_tokenizer_token_type(t, 50256), PL_TOKEN_CONTROL);
    int32_t *ids;
    const char *text = "Hello<|endoftext|>world";
    size_t n = tok(t, text, 0, 1, &ids);
    int32_t want[] = {15496, 50256, 6894};
    assert_int_equal(n, 3);
    assert_memory_equal(ids, want, sizeof want);
    char *s = detok(t, ids, n, 0);
    assert_string_equal(s, text);
    free(s);
    s = detok(t, ids, n, 1);
    assert_string_equal(s, "Helloworld");
    free(s);
    free(ids);
    n = tok(t, text, 0, 0, &ids); /* the token's text is just text */
    assert_true(n > 3);
    for (size_t i = 0; i < n; i++) assert_int_not_equal(ids[i], 50256);
    s = detok(t, ids, n, 1);
    assert_string_equal(s, text);
    free(s);
    free(ids);
    pl_tokenizer_destroy(t);

    t = load(STORIES);
    n = tok(t, "<s>Once</s>", 0, 1, &ids);
    int32_t want2[] = {1, 403, 2}; /* the text after a special token gets the space prefix */
    assert_int_equal(n, 3);
    assert_memory_equal(ids, want2, sizeof want2);
    free(ids);
    n = tok(t, "<s>Once</s>", 0, 0, &ids);
    assert_true(n > 3);
    for (size_t i = 0; i < n; i++) assert_true(ids[i] > 2);
    s = detok(t, ids, n, 1);
    assert_string_equal(s, "<s>Once</s>");
    free(s);
    free(ids);
    n = tok(t, "a<unk>b", 0, 1, &ids); /* unknown tokens split only with parse_special */
    int32_t want3[] = {261, 0, 268}; /* "▁a" <unk> "▁b" */
    assert_int_equal(n, 3);
    assert_memory_equal(ids, want3, sizeof want3);
    free(ids);
    pl_tokenizer_destroy(t);
}

/* ---- GGUF files made for the test ---- */

/* Copy every key of src into a new file, except the keys of `skip` (NULL-terminated) which are
 * replaced by what add() writes. */
typedef pl_status (*add_fn)(pl_gguf_writer *w, const pl_gguf *src);

static char *make_vocab_skip(const char *src_path, const char *const *skip, add_fn add) {
    pl_gguf *src;
    assert_int_equal(pl_gguf_open(src_path, &src), PL_OK);
    pl_gguf_writer *w = pl_gguf_writer_create();
    for (int64_t i = 0; i < pl_gguf_n_kv(src); i++) {
        int skipped = 0;
        for (const char *const *k = skip; *k; k++) skipped |= pl_gguf_str_eq(pl_gguf_key_at(src, i), *k);
        if (skipped) continue;
        assert_int_equal(pl_gguf_writer_copy_kv(w, src, i), PL_OK);
    }
    assert_int_equal(add(w, src), PL_OK);
    char *path = strdup("/tmp/pl_test_tokenizer_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(pl_gguf_writer_write(w, path), PL_OK);
    pl_gguf_writer_destroy(w);
    pl_gguf_close(src);
    return path;
}

static char *make_vocab(const char *src_path, const char *skip, add_fn add) {
    const char *const keys[] = {skip, NULL};
    return make_vocab_skip(src_path, keys, add);
}

static pl_status add_bad_pre(pl_gguf_writer *w, const pl_gguf *src) {
    (void)src;
    return pl_gguf_writer_add_str(w, "tokenizer.ggml.pre", "no-such-pre");
}
static pl_status add_bad_model(pl_gguf_writer *w, const pl_gguf *src) {
    (void)src;
    return pl_gguf_writer_add_str(w, "tokenizer.ggml.model", "bert-wordpiece-x");
}
static pl_status add_llama3_pre(pl_gguf_writer *w, const pl_gguf *src) {
    (void)src;
    return pl_gguf_writer_add_str(w, "tokenizer.ggml.pre", "llama-bpe");
}
/* stories260K with "he" (id 260) made a USER_DEFINED token. */
static pl_status add_user_defined(pl_gguf_writer *w, const pl_gguf *src) {
    pl_gguf_arr a;
    PL_TRY(pl_gguf_get_arr(src, "tokenizer.ggml.token_type", &a));
    int32_t *types = malloc(a.count * sizeof *types);
    for (uint64_t i = 0; i < a.count; i++) types[i] = (int32_t)pl_gguf_arr_int(&a, i);
    types[260] = PL_TOKEN_USER_DEFINED;
    pl_status st = pl_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", PL_GGUF_INT32, types, a.count);
    free(types);
    return st;
}

/* stories260K with two added tokens in place of "™" and "~": "<|user|>" (USER_DEFINED) and
 * "<|ctl|>" (CONTROL). */
enum { UDT_ID = 507, CTL_ID = 510 };
static pl_status add_user_and_control(pl_gguf_writer *w, const pl_gguf *src) {
    pl_gguf_arr a;
    PL_TRY(pl_gguf_get_arr(src, "tokenizer.ggml.token_type", &a));
    int32_t *types = malloc(a.count * sizeof *types);
    for (uint64_t i = 0; i < a.count; i++) types[i] = (int32_t)pl_gguf_arr_int(&a, i);
    types[UDT_ID] = PL_TOKEN_USER_DEFINED;
    types[CTL_ID] = PL_TOKEN_CONTROL;
    pl_status st = pl_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", PL_GGUF_INT32, types, a.count);
    free(types);
    PL_TRY(st);
    PL_TRY(pl_gguf_get_arr(src, "tokenizer.ggml.tokens", &a));
    char **texts = calloc(a.count, sizeof *texts);
    for (uint64_t i = 0; i < a.count; i++) texts[i] = pl_gguf_str_dup(pl_gguf_arr_str(&a, i));
    free(texts[UDT_ID]);
    free(texts[CTL_ID]);
    texts[UDT_ID] = strdup("<|user|>");
    texts[CTL_ID] = strdup("<|ctl|>");
    st = pl_gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", (const char *const *)texts, a.count);
    for (uint64_t i = 0; i < a.count; i++) free(texts[i]);
    free(texts);
    return st;
}

static pl_status add_qwen2_pre(pl_gguf_writer *w, const pl_gguf *src) {
    (void)src;
    return pl_gguf_writer_add_str(w, "tokenizer.ggml.pre", "qwen2");
}
static pl_status add_nothing(pl_gguf_writer *w, const pl_gguf *src) {
    (void)w;
    (void)src;
    return PL_OK;
}
static pl_status add_int_merges(pl_gguf_writer *w, const pl_gguf *src) {
    (void)src;
    const int32_t v[2] = {1, 2};
    return pl_gguf_writer_add_arr(w, "tokenizer.ggml.merges", PL_GGUF_INT32, v, 2);
}

static void expect_load_error(const char *path, pl_status want, const char *needle) {
    pl_gguf *g;
    assert_int_equal(pl_gguf_open(path, &g), PL_OK);
    pl_tokenizer *t = (pl_tokenizer *)1;
    assert_int_equal(pl_tokenizer_load(g, &t), want);
    assert_null(t);
    if (!strstr(pl_last_error(), needle)) fail_msg("error '%s' does not name '%s'", pl_last_error(), needle);
    pl_gguf_close(g);
}

/* src with key replaced by what add() writes must fail to load with want, naming needle. */
static void expect_bad_vocab(const char *src, const char *key, add_fn add, pl_status want,
                             const char *needle) {
    char *p = make_vocab(src, key, add);
    expect_load_error(p, want, needle);
    unlink(p);
    free(p);
}

static void test_bad_vocabularies(void **state) {
    (void)state;
    expect_bad_vocab(GPT2_VOCAB, "tokenizer.ggml.pre", add_bad_pre, PL_ERR_UNSUPPORTED, "'no-such-pre'");
    expect_bad_vocab(STORIES, "tokenizer.ggml.model", add_bad_model, PL_ERR_UNSUPPORTED,
                     "'bert-wordpiece-x'");
    /* Gemma 4: no merges, merges of the wrong type, no BOS id (it always adds BOS). */
    expect_bad_vocab(GEMMA4_VOCAB, "tokenizer.ggml.merges", add_nothing, PL_ERR_NOT_FOUND,
                     "tokenizer.ggml.merges");
    expect_bad_vocab(GEMMA4_VOCAB, "tokenizer.ggml.merges", add_int_merges, PL_ERR_FORMAT,
                     "tokenizer.ggml.merges: expected an array of strings");
    expect_bad_vocab(GEMMA4_VOCAB, "tokenizer.ggml.bos_token_id", add_nothing, PL_ERR_FORMAT,
                     "tokenizer.ggml.bos_token_id is not set");
    pl_gguf *g;
    assert_int_equal(pl_gguf_open(PL_SHARED_DIR "/models/synth-tiny-q8_0.gguf", &g), PL_OK);
    pl_tokenizer *t;
    assert_int_equal(pl_tokenizer_load(g, &t), PL_OK); /* same vocabulary as stories260K */
    assert_int_equal(pl_tokenizer_n_vocab(t), 512);
    pl_tokenizer_destroy(t);
    pl_gguf_close(g);
}

static void test_user_defined(void **state) {
    (void)state;
    pl_tokenizer *plain = load(STORIES);
    char *p = make_vocab(STORIES, "tokenizer.ggml.token_type", add_user_defined);
    pl_tokenizer *t = load(p);
    unlink(p);
    free(p);
    assert_int_equal(pl_tokenizer_token_type(t, 260), PL_TOKEN_USER_DEFINED);
    int32_t *ids;
    size_t n = tok(plain, "the", 0, 0, &ids);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 265); /* "▁the" */
    free(ids);
    /* A user-defined token splits the text even without parse_special. */
    for (int ps = 0; ps <= 1; ps++) {
        n = tok(t, "the", 0, ps, &ids);
        int32_t want[] = {259, 260}; /* "▁t" "he" */
        assert_int_equal(n, 2);
        assert_memory_equal(ids, want, sizeof want);
        char *s = detok(t, ids, n, 1); /* user-defined pieces always print */
        assert_string_equal(s, "the");
        free(s);
        free(ids);
    }
    pl_tokenizer_destroy(t);
    pl_tokenizer_destroy(plain);
}

/* One vocabulary with both kinds of added token: the USER_DEFINED one is matched in the text
 * whatever parse_special says, the CONTROL one only with parse_special (as llama.cpp). In the
 * output the user-defined text always prints, the control text only with unparse_special. */
static void test_user_defined_and_control(void **state) {
    (void)state;
    const char *const keys[] = {"tokenizer.ggml.token_type", "tokenizer.ggml.tokens", NULL};
    char *p = make_vocab_skip(STORIES, keys, add_user_and_control);
    pl_tokenizer *t = load(p);
    unlink(p);
    free(p);
    assert_int_equal(pl_tokenizer_n_vocab(t), 512);
    assert_int_equal(pl_tokenizer_token_type(t, UDT_ID), PL_TOKEN_USER_DEFINED);
    assert_int_equal(pl_tokenizer_token_type(t, CTL_ID), PL_TOKEN_CONTROL);
    assert_string_equal(pl_tokenizer_token_text(t, UDT_ID), "<|user|>");
    assert_string_equal(pl_tokenizer_token_text(t, CTL_ID), "<|ctl|>");
    assert_false(pl_tokenizer_is_eog(t, CTL_ID));

    const char *text = "<|user|>Once<|ctl|>upon<|user|>";
    int32_t *ids;
    /* parse_special = 1: both are single ids; the text after each gets the space prefix. */
    size_t n = tok(t, text, 0, 1, &ids);
    int32_t want[] = {UDT_ID, 403, CTL_ID, 407, UDT_ID}; /* "▁Once" "▁upon" */
    assert_int_equal(n, 5);
    assert_memory_equal(ids, want, sizeof want);
    char *s = detok(t, ids, n, 1); /* the control piece is dropped, the user-defined ones stay */
    assert_string_equal(s, "<|user|> Once upon<|user|>");
    free(s);
    s = detok(t, ids, n, 0);
    assert_string_equal(s, "<|user|> Once<|ctl|> upon<|user|>");
    free(s);
    s = stream(t, ids, n, 1, 1, 1);
    assert_string_equal(s, "<|user|> Once upon<|user|>");
    free(s);
    free(ids);

    /* parse_special = 0: the user-defined token still splits the text, "<|ctl|>" is plain text. */
    n = tok(t, text, 0, 0, &ids);
    assert_true(n > 5);
    assert_int_equal(ids[0], UDT_ID);
    assert_int_equal(ids[1], 403);
    assert_int_equal(ids[n - 1], UDT_ID);
    for (size_t i = 0; i < n; i++) {
        assert_int_not_equal(ids[i], CTL_ID);
        if (i > 0 && i < n - 1) assert_int_not_equal(ids[i], UDT_ID);
    }
    /* The middle is exactly what "Once<|ctl|>upon" gives alone: one SentencePiece fragment. */
    int32_t *mid;
    size_t n_mid = tok(t, "Once<|ctl|>upon", 0, 0, &mid);
    assert_int_equal(n_mid, n - 2);
    assert_memory_equal(mid, ids + 1, n_mid * sizeof *mid);
    free(mid);
    for (int skip = 0; skip <= 1; skip++) { /* nothing special is left in the middle to drop */
        s = detok(t, ids, n, skip);
        assert_string_equal(s, "<|user|> Once<|ctl|>upon<|user|>");
        free(s);
    }
    free(ids);

    /* With BOS: add_special and parse_special are independent. */
    n = tok(t, "<s><|user|>", 1, 0, &ids);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[n - 1], UDT_ID);
    for (size_t i = 1; i < n; i++) assert_int_not_equal(ids[i], 1); /* "<s>" is text */
    free(ids);
    n = tok(t, "<s><|user|>", 1, 1, &ids);
    int32_t want_bos[] = {1, 1, UDT_ID};
    assert_int_equal(n, 3);
    assert_memory_equal(ids, want_bos, sizeof want_bos);
    free(ids);

    /* Pieces: control text only with `special`, user-defined text always. */
    char buf[16];
    assert_int_equal(pl_token_to_piece(t, UDT_ID, buf, sizeof buf, 0), 8);
    assert_memory_equal(buf, "<|user|>", 8);
    assert_int_equal(pl_token_to_piece(t, CTL_ID, buf, sizeof buf, 0), 0);
    assert_int_equal(pl_token_to_piece(t, CTL_ID, buf, sizeof buf, 1), 7);
    assert_memory_equal(buf, "<|ctl|>", 7);
    pl_tokenizer_destroy(t);
}

/* The same GPT-2 vocabulary with the Llama 3 pre-tokenizer: BOS by default, merges skipped for
 * whole-token pieces, digits in threes. */
static void test_llama3_pre_on_gpt2_vocab(void **state) {
    (void)state;
    char *p = make_vocab(GPT2_VOCAB, "tokenizer.ggml.pre", add_llama3_pre);
    pl_tokenizer *t = load(p);
    unlink(p);
    free(p);
    assert_string_equal(pl_tokenizer_pre_name(t), "llama-bpe");
    assert_true(pl_tokenizer_add_bos(t));
    pl_tokenizer *g2 = load(GPT2_VOCAB);
    int32_t *a, *b, *c;
    size_t na = tok(t, "12345", 0, 0, &a), nb = tok(g2, "123", 0, 0, &b), nc = tok(g2, "45", 0, 0, &c);
    assert_int_equal(na, nb + nc);
    assert_memory_equal(a, b, nb * sizeof *a);
    assert_memory_equal(a + nb, c, nc * sizeof *a);
    free(a);
    free(b);
    free(c);
    na = tok(t, "hi", 1, 0, &a);
    assert_int_equal(a[0], 50256);
    free(a);
    pl_tokenizer_destroy(g2);
    pl_tokenizer_destroy(t);
}

/* Gemma 4 (tokenizer.ggml.model "gemma4"): BPE in SentencePiece style. Spaces are U+2581 in
 * the tokens, a run of newlines that is a token stays whole, a character the merges cannot
 * reach falls back to "<0xNN>" byte tokens, BOS is always added, and tokenizer.ggml.pre is
 * ignored (llama.cpp always uses its gemma4 pre-tokenizer for this model). */
static void test_gemma4(void **state) {
    (void)state;
    pl_tokenizer *t = load(GEMMA4_VOCAB);
    assert_int_equal(pl_tokenizer_get_kind(t), PL_TOK_BPE);
    assert_string_equal(pl_tokenizer_pre_name(t), "gemma4");
    assert_true(pl_tokenizer_add_bos(t));
    assert_int_equal(pl_tokenizer_bos(t), 2);
    assert_int_equal(pl_tokenizer_eos(t), 1);
    assert_true(pl_tokenizer_is_eog(t, 1));       /* <eos> */
    assert_true(pl_tokenizer_is_eog(t, 106));     /* <turn|> */
    assert_true(pl_tokenizer_is_eog(t, 50));      /* <|tool_response> */
    assert_false(pl_tokenizer_is_eog(t, 212));    /* </s> is text next to <|tool_response> */
    assert_int_equal(pl_tokenizer_token_type(t, 212), PL_TOKEN_NORMAL);

    int32_t *ids;
    size_t n = tok(t, "\n\n\n", 0, 0, &ids); /* one token, not a merge of three */
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 109);
    free(ids);
    n = tok(t, "a b", 1, 0, &ids);
    assert_true(n >= 3);
    assert_int_equal(ids[0], 2);
    char buf[16];
    size_t k = pl_token_to_piece(t, ids[n - 1], buf, sizeof buf, 0); /* "▁b" prints " b" */
    assert_int_equal(k, 2);
    assert_memory_equal(buf, " b", 2);
    free(ids);
    /* U+10FFFD (private use) is not in the vocabulary: four byte tokens, printed back as bytes. */
    n = tok(t, "\xF4\x8F\xBF\xBD", 0, 0, &ids);
    assert_int_equal(n, 4);
    for (size_t i = 0; i < n; i++) assert_int_equal(pl_tokenizer_token_type(t, ids[i]), PL_TOKEN_BYTE);
    assert_string_equal(pl_tokenizer_token_text(t, ids[0]), "<0xF4>");
    char *s = detok(t, ids, n, 1);
    assert_string_equal(s, "\xF4\x8F\xBF\xBD");
    free(s);
    free(ids);

    char *p = make_vocab(GEMMA4_VOCAB, "tokenizer.ggml.pre", add_qwen2_pre);
    pl_tokenizer *q = load(p);
    unlink(p);
    free(p);
    assert_string_equal(pl_tokenizer_pre_name(q), "gemma4");
    const char *text = "Hello world 12345, it's  two\n\nlines";
    int32_t *a, *b;
    size_t na = tok(t, text, 0, 0, &a), nb = tok(q, text, 0, 0, &b);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na * sizeof *a);
    free(a);
    free(b);
    pl_tokenizer_destroy(q);
    pl_tokenizer_destroy(t);
}

/* ---- special tokens where the 2026 chat templates emit them ---- */

/* Qwen3's added tokens at their ids, in place of the qwen35 test vocabulary's [PAD...]
 * placeholders (it is Qwen2's 151936-token vocabulary, without them); USER_DEFINED as
 * convert_hf_to_gguf writes tokens that are not "special" in tokenizer.json. */
static const struct {
    int32_t id;
    const char *text;
} QWEN3_ADDED[] = {{151657, "<tool_call>"}, {151658, "</tool_call>"}, {151665, "<tool_response>"},
                   {151666, "</tool_response>"}, {151667, "<think>"}, {151668, "</think>"}};
enum { N_QWEN3_ADDED = sizeof QWEN3_ADDED / sizeof QWEN3_ADDED[0] };

static pl_status add_qwen3_tags(pl_gguf_writer *w, const pl_gguf *src) {
    pl_gguf_arr a;
    PL_TRY(pl_gguf_get_arr(src, "tokenizer.ggml.tokens", &a));
    char **texts = calloc(a.count, sizeof *texts);
    for (uint64_t i = 0; i < a.count; i++) texts[i] = pl_gguf_str_dup(pl_gguf_arr_str(&a, i));
    for (int k = 0; k < N_QWEN3_ADDED; k++) {
        free(texts[QWEN3_ADDED[k].id]);
        texts[QWEN3_ADDED[k].id] = strdup(QWEN3_ADDED[k].text);
    }
    pl_status st = pl_gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", (const char *const *)texts, a.count);
    for (uint64_t i = 0; i < a.count; i++) free(texts[i]);
    free(texts);
    return st;
}

static size_t count_str(const char *hay, const char *needle) {
    size_t n = 0, k = strlen(needle);
    for (const char *p = strstr(hay, needle); p; p = strstr(p + k, needle)) n++;
    return n;
}

/* Every output of `template` in chat-templates-2026/expected.json, tokenized with
 * parse_special: each tag of `tags` must be one token (its id as often as its text occurs),
 * and printing the tokens back (unparse_special) gives the text, clean_spaces aside. Returns
 * how many tags were seen over all outputs. */
static size_t check_template_tags(const pl_tokenizer *t, const char *template, const char *const *tags,
                                  int clean_spaces) {
    const char *path = PL_SHARED_DIR "/testdata/chat-templates-2026/expected.json";
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) fail_msg("%s: %s", path, jerr.text);
    size_t i, seen = 0, n_cases = 0;
    json_t *c;
    json_array_foreach(json_object_get(root, "cases"), i, c) {
        const char *text = json_string_value(json_object_get(c, "output"));
        if (!text || strcmp(json_string_value(json_object_get(c, "template")), template) != 0) continue;
        int32_t *ids;
        size_t n = tok(t, text, 0, 1, &ids);
        for (const char *const *tag = tags; *tag; tag++) {
            int32_t *one;
            size_t n_one = tok(t, *tag, 0, 1, &one);
            if (n_one != 1) fail_msg("%s: '%s' is %zu tokens", template, *tag, n_one);
            size_t want = count_str(text, *tag), got = 0;
            for (size_t k = 0; k < n; k++) got += ids[k] == one[0];
            if (got != want)
                fail_msg("%s case %s: '%s' occurs %zu times, token %d %zu times", template,
                         json_string_value(json_object_get(c, "case")), *tag, want, one[0], got);
            seen += want;
            free(one);
        }
        char *back = NULL;
        size_t blen;
        assert_int_equal(pl_detokenize_ex(t, ids, n, 0, 1, &back, &blen), PL_OK);
        if (!clean_spaces || !cleanable(text)) assert_string_equal(back, text);
        free(back);
        free(ids);
        n_cases++;
    }
    print_message("%s: %zu outputs, %zu thinking/tool/turn tags, each one token\n", template,
                  n_cases, seen);
    assert_true(n_cases >= 7);
    json_decref(root);
    return seen;
}

static void test_chat_template_tags(void **state) {
    (void)state;
    char *p = make_vocab(VOCAB_DIR "ggml-vocab-qwen35.gguf", "tokenizer.ggml.tokens", add_qwen3_tags);
    pl_tokenizer *t = load(p);
    unlink(p);
    free(p);
    for (int k = 0; k < N_QWEN3_ADDED; k++)
        assert_int_equal(pl_tokenizer_token_type(t, QWEN3_ADDED[k].id), PL_TOKEN_USER_DEFINED);
    static const char *const qwen_tags[] = {"<|im_start|>", "<|im_end|>", "<think>", "</think>",
                                            "<tool_call>", "</tool_call>", "<tool_response>",
                                            "</tool_response>", NULL};
    assert_true(check_template_tags(t, "Qwen3.5-4B.jinja", qwen_tags, 0) > 0);
    /* USER_DEFINED tags are whole tokens even without parse_special; <|im_end|> (CONTROL) not. */
    int32_t *ids;
    size_t n = tok(t, "<think>\nhm\n</think>\n\nok<|im_end|>", 0, 0, &ids);
    assert_int_equal(ids[0], 151667);
    int has_close = 0;
    for (size_t i = 0; i < n; i++) {
        has_close |= ids[i] == 151668;
        assert_int_not_equal(ids[i], 151645);
    }
    assert_true(has_close);
    free(ids);
    pl_tokenizer_destroy(t);

    t = load(GEMMA4_VOCAB);
    static const char *const gemma_tags[] = {"<|turn>", "<turn|>", "<|channel>", "<channel|>",
                                             "<|think|>", "<|tool>", "<tool|>", "<|tool_call>",
                                             "<tool_call|>", "<|tool_response>", "<tool_response|>",
                                             "<|\"|>", NULL};
    assert_true(check_template_tags(t, "google-gemma-4-31B-it.jinja", gemma_tags, 1) > 0);
    pl_tokenizer_destroy(t);
}

/* ---- invalid input ---- */

static void test_invalid_input(void **state) {
    (void)state;
    pl_tokenizer *t = load(STORIES);
    int32_t *ids = (int32_t *)1;
    size_t n = 7;
    const char *bad[] = {"abc\xFF", "\xC3", "a\xE6\x97", "\xC0\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\x80"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(pl_tokenize(t, bad[i], strlen(bad[i]), 1, 0, &ids, &n), PL_ERR_INVALID_ARG);
        assert_null(ids);
        assert_int_equal(n, 0);
        assert_non_null(strstr(pl_last_error(), "UTF-8"));
    }
    int32_t bad_ids[] = {403, 512};
    char *s = (char *)1;
    size_t len = 5;
    assert_int_equal(pl_detokenize(t, bad_ids, 2, 1, &s, &len), PL_ERR_INVALID_ARG);
    assert_null(s);
    assert_non_null(strstr(pl_last_error(), "512"));
    bad_ids[1] = -3;
    assert_int_equal(pl_detokenize(t, bad_ids, 2, 0, &s, &len), PL_ERR_INVALID_ARG);
    assert_non_null(strstr(pl_last_error(), "-3"));
    pl_tokenizer_destroy(t);
}

/* ---- streaming ---- */

static void test_stream_utf8(void **state) {
    (void)state;
    pl_tokenizer *t = load(STORIES);
    const char *text = "Lily saw 日本 and 😀🚀, café “ok” ñ";
    int32_t *ids;
    size_t n = tok(t, text, 0, 0, &ids);
    size_t n_bytes = 0;
    for (size_t i = 0; i < n; i++) n_bytes += pl_tokenizer_token_type(t, ids[i]) == PL_TOKEN_BYTE;
    assert_true(n_bytes >= 14); /* 日本 and the two emoji come as <0xNN> tokens */
    char *whole = detok(t, ids, n, 1);
    assert_string_equal(whole, text);
    char *s = stream(t, ids, n, 1, 1, 1);
    assert_string_equal(s, whole);
    free(s);
    free(whole);

    /* Nothing comes out until a character is complete. */
    size_t cap = PL_DETOK_CAP(pl_tokenizer_max_piece_len(t));
    char *out = malloc(cap);
    pl_detok_stream st;
    pl_detok_init(&st, t, 1, 0);
    assert_int_equal(pl_detok_push(&st, 3 + 0xF0, out, cap), 0);
    assert_int_equal(pl_detok_push(&st, 3 + 0x9F, out, cap), 0);
    assert_int_equal(pl_detok_push(&st, 3 + 0x98, out, cap), 0);
    assert_int_equal(pl_detok_push(&st, 3 + 0x80, out, cap), 4);
    assert_memory_equal(out, "😀", 4);
    /* Invalid bytes become U+FFFD: a lone continuation, a lead cut short by ASCII, 0xFF. */
    assert_int_equal(pl_detok_push(&st, 3 + 0x80, out, cap), 3);
    assert_memory_equal(out, "\xEF\xBF\xBD", 3);
    assert_int_equal(pl_detok_push(&st, 3 + 0xE6, out, cap), 0);
    assert_int_equal(pl_detok_push(&st, 3 + 0x41, out, cap), 4);
    assert_memory_equal(out, "\xEF\xBF\xBD" "A", 4);
    assert_int_equal(pl_detok_push(&st, 3 + 0xFF, out, cap), 3);
    assert_int_equal(pl_detok_push(&st, 3 + 0xED, out, cap), 0);
    assert_int_equal(pl_detok_push(&st, 3 + 0xA0, out, cap), 6); /* surrogate: both invalid */
    assert_memory_equal(out, "\xEF\xBF\xBD\xEF\xBF\xBD", 6);
    /* A sequence still open at the end is flushed as U+FFFD. */
    assert_int_equal(pl_detok_push(&st, 3 + 0xE6, out, cap), 0);
    assert_int_equal(pl_detok_push(&st, 3 + 0x97, out, cap), 0);
    assert_int_equal(pl_detok_flush(&st, out, cap), 3);
    assert_memory_equal(out, "\xEF\xBF\xBD", 3);
    assert_int_equal(pl_detok_flush(&st, out, cap), 0);
    /* The first token's space prefix goes only with is_first; control tokens only unskipped. */
    pl_detok_init(&st, t, 1, 1);
    assert_int_equal(pl_detok_push(&st, 403, out, cap), 4);
    assert_memory_equal(out, "Once", 4);
    assert_int_equal(pl_detok_push(&st, 407, out, cap), 5);
    assert_int_equal(pl_detok_push(&st, 2, out, cap), 0);
    pl_detok_init(&st, t, 0, 1);
    assert_int_equal(pl_detok_push(&st, 1, out, cap), 3);
    assert_memory_equal(out, "<s>", 3);
    assert_int_equal(pl_detok_push(&st, 403, out, cap), 5);
    assert_memory_equal(out, " Once", 5);
    free(out);
    free(ids);
    pl_tokenizer_destroy(t);
}

/* llama.cpp's clean_spaces, and the streaming filter giving the same text as the whole pass. */
static void test_clean_spaces(void **state) {
    (void)state;
    pl_tokenizer *t = load(GPT2_VOCAB);
    struct {
        const char *in, *out;
    } cases[] = {
        {"a , b . c ! d ?", "a, b. c! d?"},
        {"x ' y", "x'y"},
        {"it 's he 'm we 're they 've", "it's he'm we're they've"},
        {"I 'd we 'll don 't", "I 'd we 'll don 't"},
        {"' ' ' x", "''' x"},
        {" ' ' x", "'' x"},
        {"a  ' 're", "a ''re"},
        {" 's", "'s"},
        {" 'r", " 'r"},
        {"a 'R", "a 'R"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int32_t *ids;
        size_t n = tok(t, cases[i].in, 0, 0, &ids);
        char *s = detok(t, ids, n, 1);
        if (strcmp(s, cases[i].out) != 0) fail_msg("clean '%s': got '%s', want '%s'", cases[i].in, s, cases[i].out);
        char *st = stream(t, ids, n, 1, 1, 1);
        assert_string_equal(st, s);
        free(st);
        free(s);
        free(ids);
    }
    /* Random strings over the characters the passes look at. */
    const char alphabet[] = " '.,?!srvemtdx";
    unsigned seed = 12345;
    for (int k = 0; k < 400; k++) {
        char text[24];
        int len = 1 + k % 20;
        for (int i = 0; i < len; i++) {
            seed = seed * 1103515245u + 12345u;
            text[i] = alphabet[(seed >> 16) % (sizeof alphabet - 1)];
        }
        text[len] = '\0';
        int32_t *ids;
        size_t n = tok(t, text, 0, 0, &ids);
        char *s = detok(t, ids, n, 1);
        char *st = stream(t, ids, n, 1, 1, 1);
        if (strcmp(s, st) != 0) fail_msg("'%s': whole '%s' stream '%s'", text, s, st);
        free(st);
        free(s);
        free(ids);
    }
    pl_tokenizer_destroy(t);
}

/* Random text from a mix of scripts: SentencePiece gives it back exactly, BPE too unless
 * clean_spaces applies, and the stream always equals the whole-sequence text. */
static void test_random_roundtrip(void **state) {
    (void)state;
    static const char *const atoms[] = {"a", "Z", "q", " ", "  ", "\n", "\t", "'s", "'", "7",
                                        "42", ".", ",", "?", "é", "ß", "Ω", "д", "日", "本",
                                        "한", "😀", "🦙", "\xCC\x81" /* combining acute */,
                                        "\xE2\x80\x8D" /* ZWJ */, "<s>", "</s>", "<|endoftext|>"};
    const size_t n_atoms = sizeof atoms / sizeof atoms[0];
    pl_tokenizer *vocabs[2] = {load(SPM_VOCAB), load(GPT2_VOCAB)};
    unsigned seed = 777;
    for (int v = 0; v < 2; v++) {
        pl_tokenizer *t = vocabs[v];
        for (int k = 0; k < 150; k++) {
            char text[256] = "";
            int len = 1 + k % 24;
            for (int i = 0; i < len; i++) {
                seed = seed * 1103515245u + 12345u;
                strcat(text, atoms[(seed >> 16) % n_atoms]);
            }
            int32_t *ids;
            size_t n = tok(t, text, 0, 0, &ids);
            char *s = detok(t, ids, n, 1);
            int cleanable = 0;
            for (const char *p = text; *p; p++)
                if (p[0] == ' ' && p[1] && strchr("?!.,'", p[1])) cleanable = 1;
            if (v == 0 || !cleanable) {
                if (strcmp(s, text) != 0) fail_msg("vocab %d: '%s' came back as '%s'", v, text, s);
            }
            char *st = stream(t, ids, n, 1, 1, 1);
            assert_string_equal(st, s);
            free(st);
            free(s);
            free(ids);
        }
        pl_tokenizer_destroy(t);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors_every_vocab),
        cmocka_unit_test(test_load_speed),
        cmocka_unit_test(test_stories_basics),
        cmocka_unit_test(test_stories_reference),
        cmocka_unit_test(test_parse_special),
        cmocka_unit_test(test_bad_vocabularies),
        cmocka_unit_test(test_user_defined),
        cmocka_unit_test(test_user_defined_and_control),
        cmocka_unit_test(test_llama3_pre_on_gpt2_vocab),
        cmocka_unit_test(test_gemma4),
        cmocka_unit_test(test_chat_template_tags),
        cmocka_unit_test(test_invalid_input),
        cmocka_unit_test(test_stream_utf8),
        cmocka_unit_test(test_clean_spaces),
        cmocka_unit_test(test_random_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
