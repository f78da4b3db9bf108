/* tokenizer/bpe — byte-level BPE as llama.cpp does it (llm_tokenizer_bpe_session).
 *
 * The text is split by the pre-tokenizer; each piece is byte-encoded (every byte becomes the
 * printable code point of the GPT-2 byte map) and then merged on its own: it starts as one
 * symbol per encoded character, the adjacent pair whose "left right" merge has the lowest rank
 * (ties: the leftmost) is merged, and so on until no pair is a known merge. With ignore_merges a
 * piece that is already a token is taken whole.
 *
 * A final symbol that is not a token (which a consistent vocabulary never produces) falls back
 * as llama.cpp does: each single byte of its encoded text that is a token is emitted, the others
 * are dropped.
 *
 * SentencePiece-style BPE (Gemma 4, t->spm_bpe) differs in three places, as llama.cpp's: spaces
 * become U+2581 before the pre-tokenizer runs, a piece is merged over its raw UTF-8 (no byte
 * map), and a symbol that is not a token falls back to the "<0xNN>" token of each of its bytes
 * (SentencePiece's byte fallback). With t->newline_runs, a piece made only of newlines that is a
 * token ("\n\n\n") is taken whole.
 */
#include "base/buf.h"
#include "tokenizer/bigram_queue.h"
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

typedef pl_tok_sym sym;

/* Scratch memory reused across the pieces of one call. */
typedef struct {
    char *word; /* the byte-encoded piece */
    size_t word_cap;
    sym *syms;
    size_t syms_cap;
    char *key; /* "left right" merge lookup key */
    size_t key_cap;
    pl_bigram_queue h;
} scratch;


static int word_has_other_than(const char *w, size_t n, char c) {
    for (size_t i = 0; i < n; i++)
        if (w[i] != c) return 1;
    return 0;
}

static int try_add(const pl_tokenizer *t, scratch *sc, int left, int right) {
    if (left < 0 || right < 0) return 1;
    const sym *l = &sc->syms[left], *r = &sc->syms[right];
    size_t klen = l->n + 1 + r->n;
    if (pl_array_reserve(&sc->key, &sc->key_cap, klen, 1)) return 0;
    memcpy(sc->key, l->text, l->n);
    sc->key[l->n] = ' ';
    memcpy(sc->key + l->n + 1, r->text, r->n);
    int32_t rank = pl_tok_map_get(&t->merge_map, sc->key, klen);
    if (rank < 0) return 1;
    return pl_bigram_push(&sc->h, (pl_bigram){left, right, -(double)rank, l->n + r->n});
}

/* Merge one encoded word and append its tokens. */
static pl_status merge_word(const pl_tokenizer *t, scratch *sc, size_t wlen, pl_tok_ids *out) {
    const char *w = sc->word;
    if (t->ignore_merges || (t->newline_runs && wlen > 0 && !word_has_other_than(w, wlen, '\n'))) {
        int32_t id = pl_tok_map_get(&t->tok_map, w, wlen);
        if (id >= 0) return pl_tok_ids_push(out, id);
    }
    if (pl_array_reserve(&sc->syms, &sc->syms_cap, wlen, sizeof(sym)))
        return pl_fail(PL_ERR_NOMEM, "tokenize: out of memory");
    sym *s = sc->syms;
    int n = pl_tok_split_chars(w, wlen, s);
    sc->h.n = 0;
    for (int i = 1; i < n; i++)
        if (!try_add(t, sc, i - 1, i)) return pl_fail(PL_ERR_NOMEM, "tokenize: out of memory");
    while (sc->h.n > 0) {
        pl_bigram b = pl_bigram_pop(&sc->h);
        if (!pl_tok_sym_merge(s, b.left, b.right, b.size)) continue; /* stale */
        if (!try_add(t, sc, s[b.left].prev, b.left) || !try_add(t, sc, b.left, s[b.left].next))
            return pl_fail(PL_ERR_NOMEM, "tokenize: out of memory");
    }
    for (int i = 0; i != -1; i = s[i].next) {
        int32_t id = pl_tok_map_get(&t->tok_map, s[i].text, s[i].n);
        if (id >= 0) {
            PL_TRY(pl_tok_ids_push(out, id));
            continue;
        }
        for (size_t j = 0; j < s[i].n; j++) {
            int32_t bid = t->spm_bpe ? t->byte_tok[(uint8_t)s[i].text[j]]
                                     : pl_tok_map_get(&t->tok_map, s[i].text + j, 1);
            if (bid >= 0) PL_TRY(pl_tok_ids_push(out, bid));
        }
    }
    return PL_OK;
}

pl_status pl_tok_bpe(const pl_tokenizer *t, const char *text, size_t len, pl_tok_ids *out) {
    char *escaped = NULL;
    if (t->spm_bpe) {
        escaped = pl_tok_escape_spaces(text, len, 0, &len);
        if (!escaped) return pl_fail(PL_ERR_NOMEM, "tokenize: out of memory");
        text = escaped;
    }
    pl_pretok_span *spans = NULL;
    size_t n_spans = 0;
    pl_status st = pl_pretok_split(t->pretok, text, len, &spans, &n_spans);
    scratch sc = {0};
    for (size_t i = 0; i < n_spans && st == PL_OK; i++) {
        const uint8_t *p = (const uint8_t *)text + spans[i].off;
        if (pl_array_reserve(&sc.word, &sc.word_cap, spans[i].len * 2, 1)) {
            st = pl_fail(PL_ERR_NOMEM, "tokenize: out of memory");
            break;
        }
        size_t wlen = 0;
        if (t->spm_bpe) {
            memcpy(sc.word, p, spans[i].len);
            wlen = spans[i].len;
        } else {
            for (size_t j = 0; j < spans[i].len; j++) {
                size_t k;
                const char *e = pl_tok_byte_to_utf8(p[j], &k);
                memcpy(sc.word + wlen, e, k);
                wlen += k;
            }
        }
        st = merge_word(t, &sc, wlen, out);
    }
    free(escaped);
    free(spans);
    free(sc.word);
    free(sc.syms);
    free(sc.key);
    free(sc.h.v);
    return st;
}
