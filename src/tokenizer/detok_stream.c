/* tokenizer/detok_stream — incremental detokenization (pl_detok_*).
 *
 * Each pushed id's piece goes through three steps: the SentencePiece leading-space rule (first
 * token only), a UTF-8 assembler that holds back an incomplete sequence and turns bytes that can
 * never complete one into U+FFFD, and the clean_spaces filter when the vocabulary uses it. The
 * pieces are processed in small chunks through stack buffers, so a push allocates nothing.
 */
#include "tokenizer/tok_internal.h"

#include <string.h>

enum { CHUNK = 64 };

static const char REPLACEMENT[3] = {(char)0xEF, (char)0xBF, (char)0xBD}; /* U+FFFD */

void pl_detok_init(pl_detok_stream *s, const pl_tokenizer *t, int skip_special, int is_first) {
    memset(s, 0, sizeof *s);
    s->tok = t;
    s->skip_special = skip_special;
    s->first = is_first;
}

/* Bytes a lead byte announces (2..4), 0 if it cannot start a sequence. */
static int seq_len(uint8_t b) {
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) return 3;
    if (b >= 0xF0 && b <= 0xF4) return 4;
    return 0;
}

/* Whether b may follow the pending bytes. */
static int fits(const pl_detok_stream *s, uint8_t b) {
    if (s->n_pending == 1) {
        uint8_t lead = s->pending[0];
        uint8_t lo = 0x80, hi = 0xBF;
        if (lead == 0xE0) lo = 0xA0;
        if (lead == 0xED) hi = 0x9F;
        if (lead == 0xF0) lo = 0x90;
        if (lead == 0xF4) hi = 0x8F;
        return b >= lo && b <= hi;
    }
    return (b & 0xC0) == 0x80;
}

/* Feed raw bytes to the UTF-8 assembler; complete characters go to out (<= 3 * n + 3 bytes). */
static size_t assemble(pl_detok_stream *s, const uint8_t *in, size_t n, char *out) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = in[i];
        if (s->n_pending > 0) {
            if (fits(s, b)) {
                s->pending[s->n_pending++] = b;
                if (s->n_pending == seq_len(s->pending[0])) {
                    memcpy(out + m, s->pending, (size_t)s->n_pending);
                    m += (size_t)s->n_pending;
                    s->n_pending = 0;
                }
                continue;
            }
            memcpy(out + m, REPLACEMENT, 3); /* the pending prefix can never complete */
            m += 3;
            s->n_pending = 0;
        }
        if (b < 0x80) {
            out[m++] = (char)b;
        } else if (seq_len(b)) {
            s->pending[s->n_pending++] = b;
        } else {
            memcpy(out + m, REPLACEMENT, 3);
            m += 3;
        }
    }
    return m;
}

/* Valid text -> clean_spaces filter (if any) -> out[*pos...]. */
static void deliver(pl_detok_stream *s, const char *text, size_t n, int final, char *out,
                    size_t cap, size_t *pos) {
    char buf[3 * CHUNK + 32];
    const char *src = text;
    if (s->tok->clean_spaces && !s->no_clean) {
        n = pl_tok_clean_feed(&s->clean, text, n, final, buf);
        src = buf;
    }
    PL_ASSERT(*pos + n <= cap); /* the caller's buffer is smaller than PL_DETOK_CAP promises */
    memcpy(out + *pos, src, n);
    *pos += n;
}

size_t pl_detok_push(pl_detok_stream *s, int32_t id, char *out, size_t cap) {
    size_t k;
    const char *p = pl_tok_piece(s->tok, id, !s->skip_special, &k);
    if (s->first) {
        if (s->tok->add_space_prefix && k > 0 && p[0] == ' ') p++, k--;
        s->first = 0;
    }
    size_t pos = 0;
    char valid[3 * CHUNK + 8];
    for (size_t off = 0; off < k; off += CHUNK) {
        size_t c = k - off < CHUNK ? k - off : CHUNK;
        size_t m = assemble(s, (const uint8_t *)p + off, c, valid);
        deliver(s, valid, m, 0, out, cap, &pos);
    }
    return pos;
}

size_t pl_detok_flush(pl_detok_stream *s, char *out, size_t cap) {
    size_t pos = 0, m = 0;
    char valid[8];
    if (s->n_pending > 0) {
        memcpy(valid, REPLACEMENT, 3);
        m = 3;
        s->n_pending = 0;
    }
    deliver(s, valid, m, 1, out, cap, &pos);
    return pos;
}
