/* tokenizer/utf8 — UTF-8 validation, encoding and the byte-level BPE byte <-> code point map.
 *
 * GPT-2's byte-level BPE writes every byte as a printable code point: the bytes '!'..'~',
 * 0xA1..0xAC and 0xAE..0xFF stand for themselves, the other 68 bytes (controls, space, 0x7F..0xA0,
 * 0xAD) take U+0100, U+0101, ... in increasing byte order. So a space is U+0120 'Ġ'.
 */
#include "tokenizer/tok_internal.h"

#include <pthread.h>

size_t pl_tok_utf8_len(uint8_t lead) {
    static const uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[lead >> 4];
}

/* Length of the valid sequence at s (1..4), or 0 if the bytes there are not valid UTF-8. */
static size_t valid_seq(const uint8_t *s, size_t len) {
    uint8_t b = s[0];
    if (b < 0x80) return 1;
    size_t n;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (b >= 0xC2 && b <= 0xDF) {
        n = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
        n = 3;
        if (b == 0xE0) lo = 0xA0; /* no overlongs */
        if (b == 0xED) hi = 0x9F; /* no surrogates */
    } else if (b >= 0xF0 && b <= 0xF4) {
        n = 4;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F; /* nothing above U+10FFFF */
    } else {
        return 0;
    }
    if (len < n) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return n;
}

size_t pl_tok_utf8_invalid_at(const char *s, size_t len) {
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0;
    while (i < len) {
        size_t n = valid_seq(p + i, len - i);
        if (n == 0) return i;
        i += n;
    }
    return len;
}

uint32_t pl_tok_utf8_get(const char *s, size_t len, size_t *n) {
    const uint8_t *p = (const uint8_t *)s;
    size_t k = pl_tok_utf8_len(p[0]);
    if (k > len) k = len;
    *n = k;
    switch (k) {
    case 1: return p[0];
    case 2: return ((uint32_t)(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
    case 3: return ((uint32_t)(p[0] & 0x0F) << 12) | ((uint32_t)(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    default:
        return ((uint32_t)(p[0] & 0x07) << 18) | ((uint32_t)(p[1] & 0x3F) << 12) |
               ((uint32_t)(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
    }
}

size_t pl_tok_utf8_put(uint32_t cp, char *out) {
    uint8_t *o = (uint8_t *)out;
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | (cp >> 18));
    o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

static struct {
    char utf8[256][2];    /* the code point of each byte, UTF-8 encoded */
    uint8_t n[256];       /* its length (1 or 2) */
    int16_t byte_of[324]; /* code point (< 0x144) -> byte, -1 if none */
} bytemap;
static pthread_once_t bytemap_once = PTHREAD_ONCE_INIT;

static int byte_is_printable(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

static void bytemap_build(void) {
    for (int i = 0; i < 324; i++) bytemap.byte_of[i] = -1;
    int next = 0;
    for (int b = 0; b < 256; b++) {
        uint32_t cp = byte_is_printable(b) ? (uint32_t)b : (uint32_t)(256 + next++);
        char tmp[4];
        size_t n = pl_tok_utf8_put(cp, tmp);
        bytemap.utf8[b][0] = tmp[0];
        bytemap.utf8[b][1] = n > 1 ? tmp[1] : 0;
        bytemap.n[b] = (uint8_t)n;
        bytemap.byte_of[cp] = (int16_t)b;
    }
}

const char *pl_tok_byte_to_utf8(uint8_t b, size_t *n) {
    pthread_once(&bytemap_once, bytemap_build);
    *n = bytemap.n[b];
    return bytemap.utf8[b];
}

int pl_tok_cp_to_byte(uint32_t cp) {
    pthread_once(&bytemap_once, bytemap_build);
    return cp < 324 ? bytemap.byte_of[cp] : -1;
}
