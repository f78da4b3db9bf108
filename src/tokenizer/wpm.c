/* tokenizer/wpm — WordPiece (tokenizer.ggml.model "bert") on one text fragment, as llama.cpp's
 * llm_tokenizer_wpm does:
 *
 *   1. BERT's basic split, code point by code point: with strip_accents every code point becomes
 *      the first of its canonical decomposition and marks (M*) are dropped; white space ends a
 *      word; NUL, U+FFFD and control characters are dropped; with lowercase letters are
 *      lowercased; punctuation, ASCII symbols and CJK ideographs are words of their own.
 *   2. Each word, prefixed with U+2581 (the GGUF spells word-initial pieces that way and `##`
 *      continuations without it), is cut greedily into the longest vocabulary entries from left
 *      to right; a word with any part that matches nothing becomes [UNK] whole.
 */
#include "tokenizer/tok_internal.h"
#include "base/buf.h"

#include <stdlib.h>
#include <string.h>

#define WORD_START "\xE2\x96\x81" /* U+2581 */

static int is_cjk(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

typedef struct {
    char *v;       /* U+2581 then the word's bytes */
    size_t n, cap;
} word_buf;

/* Greedy longest-match-first over the word's bytes; the word is then emptied. */
static pl_status flush_word(const pl_tokenizer *t, word_buf *w, pl_tok_ids *out) {
    const size_t n = w->n;
    if (n <= 3) return PL_OK; /* nothing after U+2581 */
    const size_t before = out->n;
    for (size_t i = 0; i < n; i++) {
        size_t j = i + t->max_token_len + 1 < n ? i + t->max_token_len + 1 : n;
        int32_t id = -1;
        for (; j > i; j--)
            if ((id = pl_tok_map_get(&t->tok_map, w->v + i, j - i)) >= 0) break;
        if (id < 0) {
            out->n = before; /* one part matches nothing: the whole word is unknown */
            break;
        }
        PL_TRY(pl_tok_ids_push(out, id));
        i = j - 1;
    }
    if (out->n == before && t->unk >= 0) PL_TRY(pl_tok_ids_push(out, t->unk));
    w->n = 3;
    return PL_OK;
}

static pl_status put_cp(word_buf *w, uint32_t cp) {
    if (pl_array_reserve(&w->v, &w->cap, w->n + 4, 1))
        return pl_fail(PL_ERR_NOMEM, "tokenize: out of memory");
    w->n += pl_tok_utf8_put(cp, w->v + w->n);
    return PL_OK;
}

static pl_status split(const pl_tokenizer *t, const char *text, size_t len, word_buf *w,
                       pl_tok_ids *out) {
    for (size_t i = 0; i < len;) {
        size_t k;
        uint32_t cp = pl_tok_utf8_get(text + i, len - i, &k);
        i += k;
        if (t->strip_accents) cp = pl_tok_cpt_nfd_first(cp);
        unsigned f = pl_tok_cpt_flags(cp);
        if (f & PL_UNI_SPACE) {
            PL_TRY(flush_word(t, w, out));
            continue;
        }
        if (cp == 0 || cp == 0xFFFD || (f & PL_UNI_CONTROL)) continue;
        if (t->strip_accents && (f & PL_UNI_MARK)) continue;
        uint32_t c = t->lowercase ? pl_tok_cpt_lower(cp) : cp;
        if ((f & PL_UNI_PUNCT) || (cp < 0x7F && (f & PL_UNI_SYMBOL)) || is_cjk(cp)) {
            PL_TRY(flush_word(t, w, out));
            PL_TRY(put_cp(w, c));
            PL_TRY(flush_word(t, w, out));
        } else {
            PL_TRY(put_cp(w, c));
        }
    }
    return flush_word(t, w, out);
}

pl_status pl_tok_wpm(const pl_tokenizer *t, const char *text, size_t len, pl_tok_ids *out) {
    word_buf w = {0};
    if (pl_array_reserve(&w.v, &w.cap, 64, 1)) return pl_fail(PL_ERR_NOMEM, "tokenize: out of memory");
    memcpy(w.v, WORD_START, 3);
    w.n = 3;
    pl_status st = split(t, text, len, &w, out);
    free(w.v);
    return st;
}
