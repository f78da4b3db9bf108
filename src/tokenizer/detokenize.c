/* tokenizer/detokenize — whole-sequence detokenization as llama.cpp's llama_detokenize, and
 * its clean_spaces post-pass in two equivalent forms: in place over the whole text (as llama.cpp
 * writes it) and as a streaming filter for the incremental detokenizer.
 *
 * clean_spaces is three passes over the text, each keeping the first byte and looking at the
 * byte before and up to two after:
 *   1. " ?" " !" " ." " ,"  lose the space;
 *   2. " ' "                loses both spaces (the second space is then seen as NUL by pass 2);
 *   3. " 's" " 'm" " 're" " 've"  lose the space (the letters are case-sensitive).
 */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- the in-place passes, exactly as llama.cpp runs them ---- */

static size_t clean_inplace(char *text, size_t total) {
    if (total == 0) return 0;
    size_t n1 = total, out = 1;
    for (size_t i = 1; i < n1; i++) {
        char x = text[i];
        if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) out--;
        text[out++] = x;
    }
    size_t n2 = out;
    out = 1;
    for (size_t i = 1; i < n2; i++) {
        char x = text[i];
        if (x == '\'' && i + 1 < n2 && text[i - 1] == ' ' && text[i + 1] == ' ') {
            out--;
            text[++i] = '\0';
        }
        text[out++] = x;
    }
    size_t n3 = out;
    out = 1;
    for (size_t i = 1; i < n3; i++) {
        char x = text[i];
        if (text[i - 1] == ' ' && x == '\'' && i + 1 < n3) {
            char x1 = text[i + 1];
            if (x1 == 's' || x1 == 'm') {
                out--;
            } else if (x1 != 't' && x1 != 'd' && i + 2 < n3) {
                char x2 = text[i + 2];
                if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) out--;
            }
        }
        text[out++] = x;
    }
    return out;
}

/* ---- the same passes as a stream ----
 * Each pass holds back only what a later byte can still change: pass 1 a trailing space,
 * pass 2 " " or " '", pass 3 " ", " '" or " '" plus 'r'/'v'. */

enum { S_NONE = 0, S_SPACE, S_SPACE_APOS, S_SPACE_APOS_X };

typedef struct {
    pl_tok_cleaner *c;
    char *out;
    size_t n;
} sink;

static void emit(sink *k, char x) { k->out[k->n++] = x; }

static void pass3(sink *k, char x) {
    pl_tok_cleaner *c = k->c;
    switch (c->st3) {
    case S_SPACE_APOS_X: /* " '" + x1 in {r, v}: the space goes if x == 'e' */
        if (x != 'e') emit(k, ' ');
        emit(k, '\'');
        emit(k, c->x1);
        c->st3 = S_NONE;
        break;
    case S_SPACE_APOS:
        if (x == 'r' || x == 'v') {
            c->x1 = x;
            c->st3 = S_SPACE_APOS_X;
            return;
        }
        if (x != 's' && x != 'm') emit(k, ' ');
        emit(k, '\'');
        c->st3 = S_NONE;
        break;
    case S_SPACE:
        if (x == '\'') {
            c->st3 = S_SPACE_APOS;
            return;
        }
        emit(k, ' ');
        c->st3 = S_NONE;
        break;
    default: break;
    }
    if (x == ' ') c->st3 = S_SPACE;
    else emit(k, x);
}

static void pass3_flush(sink *k) {
    pl_tok_cleaner *c = k->c;
    if (c->st3 >= S_SPACE) emit(k, ' ');
    if (c->st3 >= S_SPACE_APOS) emit(k, '\'');
    if (c->st3 == S_SPACE_APOS_X) emit(k, c->x1);
    c->st3 = S_NONE;
}

static void pass2(sink *k, char x) {
    pl_tok_cleaner *c = k->c;
    if (c->st2 == S_SPACE_APOS) {
        c->st2 = S_NONE;
        if (x == ' ') { /* " ' " -> "'" and this space is dropped */
            pass3(k, '\'');
            return;
        }
        pass3(k, ' ');
        pass3(k, '\'');
    } else if (c->st2 == S_SPACE) {
        if (x == '\'') {
            c->st2 = S_SPACE_APOS;
            return;
        }
        pass3(k, ' ');
        c->st2 = S_NONE;
    }
    if (x == ' ') c->st2 = S_SPACE;
    else pass3(k, x);
}

static void pass2_flush(sink *k) {
    pl_tok_cleaner *c = k->c;
    if (c->st2 >= S_SPACE) pass3(k, ' ');
    if (c->st2 == S_SPACE_APOS) pass3(k, '\'');
    c->st2 = S_NONE;
}

static void pass1(sink *k, char x) {
    pl_tok_cleaner *c = k->c;
    if (c->st1 == S_SPACE) {
        c->st1 = S_NONE;
        if (!(x == '?' || x == '!' || x == '.' || x == ',')) pass2(k, ' ');
    }
    if (x == ' ') c->st1 = S_SPACE;
    else pass2(k, x);
}

size_t pl_tok_clean_feed(pl_tok_cleaner *c, const char *in, size_t n, int final, char *out) {
    sink k = {c, out, 0};
    for (size_t i = 0; i < n; i++) pass1(&k, in[i]);
    if (final) {
        if (c->st1 == S_SPACE) pass2(&k, ' ');
        c->st1 = S_NONE;
        pass2_flush(&k);
        pass3_flush(&k);
    }
    return k.n;
}

/* ---- whole sequences ---- */

pl_status pl_detokenize_ex(const pl_tokenizer *t, const int32_t *ids, size_t n, int remove_special,
                           int unparse_special, char **text, size_t *len) {
    *text = NULL;
    *len = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return pl_fail(PL_ERR_INVALID_ARG,
                           "detokenize: invalid token id %d at position %zu (the vocabulary has %d tokens)",
                           ids[i], i, t->n_vocab);
    int remove_space = t->add_space_prefix;
    if (remove_special && t->add_bos && n > 0 && ids[0] == t->bos) {
        remove_space = 0;
        ids++;
        n--;
    }
    if (remove_special && t->add_eos && n > 0 && ids[n - 1] == t->eos) n--;

    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k;
        pl_tok_piece(t, ids[i], unparse_special, &k);
        total += k;
    }
    char *out = malloc(total + 1);
    if (!out) return pl_fail(PL_ERR_NOMEM, "detokenize: out of memory for %zu bytes", total + 1);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k;
        const char *p = pl_tok_piece(t, ids[i], unparse_special, &k);
        if (remove_space && k > 0 && p[0] == ' ') p++, k--;
        remove_space = 0;
        memcpy(out + m, p, k);
        m += k;
    }
    if (t->clean_spaces) m = clean_inplace(out, m);
    out[m] = '\0';
    *text = out;
    *len = m;
    return PL_OK;
}

pl_status pl_detokenize(const pl_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                        char **text, size_t *len) {
    return pl_detokenize_ex(t, ids, n, skip_special, !skip_special, text, len);
}
