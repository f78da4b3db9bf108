/* tokenizer/piece — the bytes each token stands for (llama.cpp's token_to_piece).
 *
 * Built once at load for every id, as llama.cpp's cache does (with special = true):
 *   CONTROL / UNKNOWN / USER_DEFINED  the token's text as stored;
 *   NORMAL   SentencePiece and SentencePiece-style BPE (Gemma 4): the text with U+2581 turned
 *            into spaces; byte-level BPE: the GPT-2 byte map
 *            undone (a code point outside the map is written "[UNK_BYTE_0x<hex><text>]", as
 *            llama.cpp does);
 *   BYTE     the one byte of "<0xNN>";
 *   other    (UNUSED, UNDEFINED) nothing.
 * At lookup, CONTROL and UNKNOWN tokens give "" unless `special`.
 */
#include "tokenizer/tok_internal.h"
#include "base/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *v;
    size_t n, cap;
} buf;

static int put(buf *b, const void *p, size_t n) {
    if (pl_array_reserve(&b->v, &b->cap, b->n + n, 1)) return 0;
    memcpy(b->v + b->n, p, n);
    b->n += n;
    return 1;
}

/* One code point as llama.cpp's unicode_cpt_from_utf8 reads it (continuation bytes are only
 * checked for 10xxxxxx); an invalid sequence is U+FFFD and consumes one byte. */
static uint32_t lenient_cp(const uint8_t *s, size_t len, size_t *n) {
    uint8_t b = s[0];
    size_t k = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
    if (k == 0 || k > len) goto bad;
    for (size_t i = 1; i < k; i++)
        if ((s[i] & 0xC0) != 0x80) goto bad;
    *n = k;
    if (k == 1) return b;
    uint32_t cp = b & (0x7F >> k);
    for (size_t i = 1; i < k; i++) cp = (cp << 6) | (s[i] & 0x3F);
    return cp > 0x10FFFF ? 0xFFFD : cp;
bad:
    *n = 1;
    return 0xFFFD;
}

/* BPE: undo the byte map. */
static int decode_bpe(buf *b, const char *text, size_t len) {
    const uint8_t *s = (const uint8_t *)text;
    for (size_t i = 0; i < len;) {
        size_t n;
        uint32_t cp = lenient_cp(s + i, len - i, &n);
        i += n;
        int byte = pl_tok_cp_to_byte(cp);
        if (byte >= 0) {
            uint8_t c = (uint8_t)byte;
            if (!put(b, &c, 1)) return 0;
            continue;
        }
        char u[4], hex[16];
        size_t un = pl_tok_utf8_put(cp, u);
        if (!put(b, "[UNK_BYTE_0x", 12)) return 0;
        for (size_t j = 0; j < un; j++) {
            snprintf(hex, sizeof hex, "%02x", (uint8_t)u[j]);
            if (!put(b, hex, 2)) return 0;
        }
        if (!put(b, text, len) || !put(b, "]", 1)) return 0;
    }
    return 1;
}

/* SentencePiece: U+2581 -> ' '. */
static int decode_spm(buf *b, const char *text, size_t len) {
    for (size_t i = 0; i < len;) {
        if (i + 3 <= len && memcmp(text + i, "\xE2\x96\x81", 3) == 0) {
            if (!put(b, " ", 1)) return 0;
            i += 3;
        } else {
            if (!put(b, text + i, 1)) return 0;
            i++;
        }
    }
    return 1;
}

/* llama.cpp's token_to_byte: the hex digits at text[3..5) ("<0xNN>"). */
static uint8_t byte_of(const char *text, size_t len) {
    char hex[3] = {0, 0, 0};
    for (size_t i = 0; i < 2 && 3 + i < len; i++) hex[i] = text[3 + i];
    return (uint8_t)strtol(hex, NULL, 16);
}

pl_status pl_tok_build_pieces(pl_tokenizer *t) {
    buf b = {0};
    t->piece_off = malloc((size_t)t->n_vocab * sizeof *t->piece_off);
    t->piece_len = malloc((size_t)t->n_vocab * sizeof *t->piece_len);
    if (!t->piece_off || !t->piece_len) goto oom;
    t->max_piece_len = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const char *text = pl_tok_text(t, id);
        size_t len = t->text_len[id], start = b.n;
        uint16_t a = t->attr[id];
        int ok = 1;
        if (a & (PL_ATTR_UNKNOWN | PL_ATTR_CONTROL | PL_ATTR_USER_DEFINED)) {
            ok = put(&b, text, len);
        } else if (a & PL_ATTR_NORMAL) {
            ok = t->kind != PL_TOK_BPE || t->spm_bpe ? decode_spm(&b, text, len)
                                                     : decode_bpe(&b, text, len);
        } else if (a & PL_ATTR_BYTE) {
            uint8_t c = byte_of(text, len);
            ok = put(&b, &c, 1);
        }
        if (!ok) goto oom;
        if (b.n > UINT32_MAX) {
            free(b.v);
            return pl_fail(PL_ERR_FORMAT, "tokenizer: token pieces exceed 4 GiB");
        }
        t->piece_off[id] = (uint32_t)start;
        t->piece_len[id] = (uint32_t)(b.n - start);
        if (b.n - start > t->max_piece_len) t->max_piece_len = b.n - start;
    }
    t->piece_arena = b.v ? b.v : malloc(1);
    if (!t->piece_arena) goto oom;
    return PL_OK;
oom:
    free(b.v);
    return pl_fail(PL_ERR_NOMEM, "tokenizer: out of memory building token pieces");
}

/* The piece of id (NULL with *n = 0 for an invalid id); "" for control/unknown unless special. */
const char *pl_tok_piece(const pl_tokenizer *t, int32_t id, int special, size_t *n) {
    *n = 0;
    if (id < 0 || id >= t->n_vocab) return NULL;
    if (!special && (t->attr[id] & (PL_ATTR_UNKNOWN | PL_ATTR_CONTROL))) return "";
    *n = t->piece_len[id];
    return t->piece_arena + t->piece_off[id];
}

size_t pl_token_to_piece(const pl_tokenizer *t, int32_t id, char *out, size_t cap, int special) {
    size_t n;
    const char *p = pl_tok_piece(t, id, special, &n);
    if (p) memcpy(out, p, n < cap ? n : cap);
    return n;
}
