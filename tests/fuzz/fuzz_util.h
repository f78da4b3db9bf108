/* Helpers shared by the fuzz targets: a strict UTF-8 check and loading a vocabulary from
 * $PL_SHARED_DIR (or the build's PL_SHARED_DIR). */
#ifndef PL_FUZZ_UTIL_H
#define PL_FUZZ_UTIL_H

#include "base/status.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>

/* Strict UTF-8: no overlongs, surrogates or code points above U+10FFFF. */
static inline int valid_utf8(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        size_t k;
        unsigned lo = 0x80, hi = 0xBF;
        if (c < 0x80) k = 1;
        else if (c >= 0xC2 && c <= 0xDF) k = 2;
        else if (c >= 0xE0 && c <= 0xEF) k = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        else if (c >= 0xF0 && c <= 0xF4) k = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        else return 0;
        if (i + k > n) return 0;
        if (k > 1 && (p[i + 1] < lo || p[i + 1] > hi)) return 0;
        for (size_t j = 2; j < k; j++)
            if ((p[i + j] & 0xC0) != 0x80) return 0;
        i += k;
    }
    return 1;
}

/* The tokenizer of $PL_SHARED_DIR/rel; exits naming the file when it cannot be loaded. */
static inline pl_tokenizer *fuzz_load_tokenizer(const char *rel, const char *who) {
    const char *dir = getenv("PL_SHARED_DIR");
    if (!dir || !*dir) dir = PL_SHARED_DIR;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    pl_gguf *g;
    pl_tokenizer *t = NULL;
    if (pl_gguf_open(path, &g) != PL_OK || pl_tokenizer_load(g, &t) != PL_OK) {
        fprintf(stderr, "%s: cannot load %s: %s\n", who, path, pl_last_error());
        exit(1);
    }
    pl_gguf_close(g);
    return t;
}

#endif
