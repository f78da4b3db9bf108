/* Fuzz target: the tokenizers, with the stories260K SentencePiece vocabulary and llama.cpp's
 * test vocabularies (loaded once from $PL_SHARED_DIR): GPT-2 byte-level BPE, llama-spm, Qwen3.5
 * (qwen35 pre-tokenizer) and Gemma 4 (SentencePiece-style BPE).
 *
 * Input: one control byte, then text. Bits 0, 7 and 6 pick the vocabulary (VOCABS below: 0
 * stories260K, bit 0 GPT-2, bit 7 llama-spm, both Qwen3.5, bit 6 with bit 0 or 7 Gemma 4); bits
 * 1-2 are add_special and parse_special. Properties checked (what
 * tests/unit/test_tokenizer.c asserts on real text):
 * - invalid UTF-8 is refused with a message; valid UTF-8 gives ids that are all in range;
 * - without special tokens, detokenize(tokenize(text)) == text (SentencePiece removes the space
 *   prefix it added; BPE too, except that llama.cpp's clean_spaces drops the space of " ?",
 *   " !", " .", " ," and around "'", so texts with those are not compared; in SentencePiece and
 *   Gemma 4 a U+2581 in the text is a space on the way back, as in llama.cpp);
 * - BPE with parse_special: printing the special tokens back gives the text again;
 * - the streaming detokenizer gives the same text as pl_detokenize (both skip_special values),
 *   in chunks that are each valid UTF-8;
 * - the remaining control bytes' text is also read as raw token ids: detokenizing them must not
 *   crash, and the streaming detokenizer must still give only valid UTF-8. */
#include "base/status.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "fuzz_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The vocabularies; escapes_spaces: U+2581 in the text comes back as a space. */
static const struct {
    const char *path; /* under $PL_SHARED_DIR */
    int escapes_spaces;
} VOCABS[] = {
    {"models/stories260K.gguf", 1},
    {"testdata/vocab/ggml-vocab-gpt-2.gguf", 0},
    {"testdata/vocab/ggml-vocab-llama-spm.gguf", 1},
    {"testdata/vocab/ggml-vocab-qwen35.gguf", 0},
    {"testdata/vocab/ggml-vocab-gemma-4.gguf", 1},
};
enum { N_VOCABS = sizeof VOCABS / sizeof VOCABS[0] };
/* control bits 0, 7, 6 -> VOCABS index (without bit 6 as before: stories, GPT-2, llama-spm) */
static const int PICK[8] = {0, 1, 2, 3, 0, 4, 4, 3};
static pl_tokenizer *g_tok[N_VOCABS];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    for (int i = 0; i < N_VOCABS; i++) g_tok[i] = fuzz_load_tokenizer(VOCABS[i].path, "fuzz_tokenizer");
    return 0;
}

/* Stream ids through the incremental detokenizer; every chunk must be valid UTF-8. malloc'ed. */
static char *stream(const pl_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                    size_t *len) {
    size_t cap = PL_DETOK_CAP(pl_tokenizer_max_piece_len(t));
    char *chunk = malloc(cap), *all = malloc(n * cap + cap + 1);
    size_t m = 0;
    pl_detok_stream s;
    pl_detok_init(&s, t, skip_special, 1);
    for (size_t i = 0; i < n; i++) {
        size_t k = pl_detok_push(&s, ids[i], chunk, cap);
        if (k > cap || !valid_utf8(chunk, k)) abort();
        memcpy(all + m, chunk, k);
        m += k;
    }
    size_t k = pl_detok_flush(&s, chunk, cap);
    if (k > cap || !valid_utf8(chunk, k)) abort();
    memcpy(all + m, chunk, k);
    m += k;
    all[m] = '\0';
    free(chunk);
    *len = m;
    return all;
}

static int has_cleaned_space(const char *s, size_t n) {
    for (size_t i = 0; i + 1 < n; i++)
        if (s[i] == ' ' && strchr("?!.,'", s[i + 1]) && s[i + 1]) return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int v = PICK[(data[0] & 1) | ((data[0] >> 6) & 2) | ((data[0] >> 4) & 4)];
    const pl_tokenizer *t = g_tok[v];
    int add_special = (data[0] >> 1) & 1, parse_special = (data[0] >> 2) & 1;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t n_vocab = pl_tokenizer_n_vocab(t);

    int32_t *ids = NULL;
    size_t n = 0;
    pl_status st = pl_tokenize(t, text, len, add_special, parse_special, &ids, &n);
    if (!valid_utf8(text, len)) {
        if (st != PL_ERR_INVALID_ARG) abort();
        const char *msg = pl_last_error();
        if (!msg || !*msg) abort();
    } else {
        if (st != PL_OK) abort();
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= n_vocab) abort();
        char *back = NULL;
        size_t blen = 0;
        if (pl_detokenize(t, ids, n, 1, &back, &blen) != PL_OK) abort();
        if (strlen(back) > blen) abort();
        const int escaped_space = VOCABS[v].escapes_spaces && memmem(text, len, "\xE2\x96\x81", 3);
        if (!add_special && !parse_special) {
            int lossless = !escaped_space &&
                           (pl_tokenizer_get_kind(t) == PL_TOK_SPM || !has_cleaned_space(text, len));
            if (lossless && (blen != len || memcmp(back, text, len) != 0)) {
                fprintf(stderr, "round trip differs: %zu bytes in, %zu out\n", len, blen);
                abort();
            }
            size_t slen;
            char *streamed = stream(t, ids, n, 1, &slen);
            if (slen != blen || memcmp(streamed, back, blen) != 0) {
                fprintf(stderr, "streamed text differs from pl_detokenize\n");
                abort();
            }
            free(streamed);
        }
        free(back);
        /* BPE with special tokens parsed: printing them back gives the text again (their text
         * is what matched), as test_parse_special asserts for "Hello<|endoftext|>world". */
        if (pl_tokenizer_get_kind(t) == PL_TOK_BPE && parse_special && !add_special &&
            !has_cleaned_space(text, len) && !escaped_space) {
            if (pl_detokenize(t, ids, n, 0, &back, &blen) != PL_OK) abort();
            if (blen != len || memcmp(back, text, len) != 0) {
                fprintf(stderr, "round trip with special tokens differs\n");
                abort();
            }
            free(back);
        }
        /* Streaming equals whole-sequence detokenization, whatever the flags. */
        for (int skip = 0; skip < 2; skip++) {
            if (pl_detokenize(t, ids, n, skip, &back, &blen) != PL_OK) abort();
            size_t slen;
            char *streamed = stream(t, ids, n, skip, &slen);
            if (slen != blen || memcmp(streamed, back, blen) != 0) {
                fprintf(stderr, "streamed text differs from pl_detokenize (skip_special %d)\n", skip);
                abort();
            }
            free(streamed);
            free(back);
        }
    }
    free(ids);

    /* The same bytes as raw ids (some out of range): nothing may crash, streaming stays UTF-8. */
    size_t n_raw = len / 2;
    int32_t *raw = malloc((n_raw ? n_raw : 1) * sizeof *raw);
    for (size_t i = 0; i < n_raw; i++) {
        int32_t v = (int32_t)(data[1 + 2 * i] | (data[2 + 2 * i] << 8));
        raw[i] = (data[0] & 8) ? v % (n_vocab + 2) - 1 : v % n_vocab; /* -1 and n_vocab too */
    }
    char *out = NULL;
    size_t olen = 0;
    pl_status ds = pl_detokenize_ex(t, raw, n_raw, (data[0] >> 4) & 1, (data[0] >> 5) & 1, &out, &olen);
    if (ds == PL_OK) {
        if (strlen(out) > olen) abort();
        free(out);
    } else {
        if (!(data[0] & 8)) abort(); /* only invalid ids may be refused */
        if (out) abort();
        const char *msg = pl_last_error();
        if (!msg || !*msg) abort();
    }
    size_t slen;
    free(stream(t, raw, n_raw, (data[0] >> 6) & 1, &slen));
    char piece[64];
    for (size_t i = 0; i < n_raw && i < 8; i++) {
        size_t k = pl_token_to_piece(t, raw[i], piece, sizeof piece, 1);
        (void)k;
    }
    free(raw);
    return 0;
}
