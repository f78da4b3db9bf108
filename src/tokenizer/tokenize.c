/* tokenizer/tokenize — pl_tokenize: special-token partition, then SentencePiece or BPE.
 *
 * Partition (llama.cpp's tokenizer_st_partition): the input starts as one text fragment; for each
 * special token in turn (longest text first) every text fragment is cut at each occurrence of
 * that token's text, the occurrence becoming a token fragment. CONTROL and UNKNOWN tokens take
 * part only with parse_special; USER_DEFINED tokens always do (as Hugging Face tokenizers split
 * added tokens first). A token with LSTRIP/RSTRIP eats the whitespace before/after it.
 *
 * SentencePiece then gets a space prefix on every text fragment that starts the input or follows
 * a token fragment (when add_space_prefix), and spaces become U+2581.
 */
#include "tokenizer/tok_internal.h"
#include "base/buf.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

pl_status pl_tok_ids_push(pl_tok_ids *ids, int32_t id) {
    if (pl_array_reserve(&ids->v, &ids->cap, ids->n + 1, sizeof *ids->v))
        return pl_fail(PL_ERR_NOMEM, "tokenize: out of memory");
    ids->v[ids->n++] = id;
    return PL_OK;
}

typedef struct {
    int32_t id;      /* token id, or -1 for a text fragment */
    size_t off, len; /* the text fragment's bytes in the input */
} frag;

typedef struct {
    frag *v;
    size_t n, cap;
} frag_vec;

static int frag_push(frag_vec *f, int32_t id, size_t off, size_t len) {
    if (id < 0 && len == 0) return 1;
    if (pl_array_reserve(&f->v, &f->cap, f->n + 1, sizeof *f->v)) return 0;
    f->v[f->n++] = (frag){id, off, len};
    return 1;
}

/* Cut the text fragments of `in` at every occurrence of special token id, into `out`. */
static int cut(const pl_tokenizer *t, int32_t id, const char *text, const frag_vec *in,
               frag_vec *out) {
    const char *tok = pl_tok_text(t, id);
    size_t tl = t->text_len[id];
    uint16_t a = t->attr[id];
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        frag f = in->v[i];
        if (f.id >= 0) {
            if (!frag_push(out, f.id, 0, 0)) return 0;
            continue;
        }
        size_t base = f.off, blen = f.len;
        while (blen > 0) {
            const char *m = memmem(text + base, blen, tok, tl);
            if (!m) break;
            size_t mo = (size_t)(m - text);
            size_t left = mo - base;
            if (a & PL_ATTR_LSTRIP)
                while (left > 0 && isspace((unsigned char)text[base + left - 1])) left--;
            if (!frag_push(out, -1, base, left) || !frag_push(out, id, 0, 0)) return 0;
            size_t roff = mo + tl, rlen = base + blen - roff;
            if (a & PL_ATTR_RSTRIP)
                while (rlen > 0 && isspace((unsigned char)text[roff])) roff++, rlen--;
            base = roff;
            blen = rlen;
        }
        if (!frag_push(out, -1, base, blen)) return 0;
    }
    return 1;
}

static pl_status partition(const pl_tokenizer *t, const char *text, size_t len, int parse_special,
                           frag_vec *res) {
    frag_vec a = {0}, b = {0};
    if (!frag_push(&a, -1, 0, len)) goto oom;
    for (int32_t k = 0; k < t->n_special; k++) {
        int32_t id = t->special[k];
        if (!parse_special && (t->attr[id] & (PL_ATTR_CONTROL | PL_ATTR_UNKNOWN))) continue;
        if (!cut(t, id, text, &a, &b)) goto oom;
        frag_vec tmp = a;
        a = b;
        b = tmp;
    }
    free(b.v);
    *res = a;
    return PL_OK;
oom:
    free(a.v);
    free(b.v);
    return pl_fail(PL_ERR_NOMEM, "tokenize: out of memory");
}

char *pl_tok_escape_spaces(const char *s, size_t len, int prefix, size_t *n_out) {
    size_t spaces = prefix;
    for (size_t i = 0; i < len; i++) spaces += s[i] == ' ';
    char *esc = malloc(len + 2 * spaces + 1);
    if (!esc) return NULL;
    size_t n = 0;
    if (prefix) memcpy(esc + n, "\xE2\x96\x81", 3), n += 3;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ' ') {
            memcpy(esc + n, "\xE2\x96\x81", 3);
            n += 3;
        } else {
            esc[n++] = s[i];
        }
    }
    *n_out = n;
    return esc;
}

/* SentencePiece on one text fragment: optional leading space, spaces -> U+2581. */
static pl_status spm_fragment(const pl_tokenizer *t, const char *s, size_t len, int prefix,
                              pl_tok_ids *out) {
    size_t n;
    char *esc = pl_tok_escape_spaces(s, len, prefix, &n);
    if (!esc) return pl_fail(PL_ERR_NOMEM, "tokenize: out of memory");
    pl_status st = pl_tok_spm(t, esc, n, out);
    free(esc);
    return st;
}

static pl_status run(const pl_tokenizer *t, const char *text, const frag_vec *frags,
                     int add_special, pl_tok_ids *out) {
    const int wpm = t->kind == PL_TOK_WPM; /* llama.cpp: [CLS] text [SEP] whatever add_bos says */
    if (add_special && (t->add_bos || wpm) && t->bos >= 0) PL_TRY(pl_tok_ids_push(out, t->bos));
    int prev_special = 1; /* SentencePiece: the first fragment gets the space prefix */
    for (size_t i = 0; i < frags->n; i++) {
        const frag *f = &frags->v[i];
        if (f->id >= 0) {
            PL_TRY(pl_tok_ids_push(out, f->id));
            prev_special = 1;
        } else if (t->kind == PL_TOK_SPM) {
            PL_TRY(spm_fragment(t, text + f->off, f->len, t->add_space_prefix && prev_special, out));
            prev_special = 0;
        } else if (wpm) {
            PL_TRY(pl_tok_wpm(t, text + f->off, f->len, out));
        } else {
            PL_TRY(pl_tok_bpe(t, text + f->off, f->len, out));
        }
    }
    if (add_special && wpm && t->sep >= 0) PL_TRY(pl_tok_ids_push(out, t->sep));
    else if (add_special && t->add_eos) PL_TRY(pl_tok_ids_push(out, t->eos));
    return PL_OK;
}

pl_status pl_tokenize(const pl_tokenizer *t, const char *text, size_t len, int add_special,
                      int parse_special, int32_t **ids, size_t *n_ids) {
    *ids = NULL;
    *n_ids = 0;
    if (!text && len > 0) return pl_fail(PL_ERR_INVALID_ARG, "tokenize: NULL text of length %zu", len);
    size_t bad = pl_tok_utf8_invalid_at(text, len);
    if (bad < len)
        return pl_fail(PL_ERR_INVALID_ARG, "tokenize: invalid UTF-8 at byte %zu (0x%02X)", bad,
                       (uint8_t)text[bad]);
    frag_vec frags = {0};
    if (len > 0) PL_TRY(partition(t, text, len, parse_special, &frags));
    pl_tok_ids out = {0};
    pl_status st = run(t, text, &frags, add_special, &out);
    free(frags.v);
    if (st == PL_OK && !out.v) { /* always hand back an allocation */
        out.v = malloc(sizeof *out.v);
        if (!out.v) st = pl_fail(PL_ERR_NOMEM, "tokenize: out of memory");
    }
    if (st != PL_OK) {
        free(out.v);
        return st;
    }
    *ids = out.v;
    *n_ids = out.n;
    return PL_OK;
}

pl_status pl_tokenize_pair(const pl_tokenizer *t, const char *a, size_t na, const char *b,
                           size_t nb, int32_t **ids, size_t *n_ids) {
    int32_t *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    *ids = NULL;
    *n_ids = 0;
    pl_status st = pl_tokenize(t, a, na, 0, 0, &x, &nx);
    if (st == PL_OK) st = pl_tokenize(t, b, nb, 0, 0, &y, &ny);
    int32_t *v = st == PL_OK ? malloc((nx + ny + 4) * sizeof *v) : NULL;
    if (st == PL_OK && !v) st = pl_fail(PL_ERR_NOMEM, "tokenize: out of memory");
    if (st == PL_OK) {
        const int32_t eos = t->eos >= 0 ? t->eos : t->sep;
        const int add_eos = t->add_eos && eos >= 0;
        size_t k = 0;
        if (t->add_bos && t->bos >= 0) v[k++] = t->bos;
        memcpy(v + k, x, nx * sizeof *v);
        k += nx;
        if (add_eos) v[k++] = eos;
        if (t->add_sep && t->sep >= 0) v[k++] = t->sep;
        memcpy(v + k, y, ny * sizeof *v);
        k += ny;
        if (add_eos) v[k++] = eos;
        *ids = v;
        *n_ids = k;
    }
    free(x);
    free(y);
    return st;
}
