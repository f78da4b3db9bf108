/* Helpers shared by the gguf unit tests (test_gguf.c, test_gguf_malformed.c): a temporary
 * directory for generated files, reading and writing whole files, little-endian patching, and
 * the expectation that a file fails to open with a given status and message. */
#ifndef PL_TESTS_GGUF_TEST_UTIL_H
#define PL_TESTS_GGUF_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "gguf/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MODELS PL_SHARED_DIR "/models"
#define STORIES MODELS "/stories260K.gguf"
#define Q4KM MODELS "/synth-tiny-q4_k_m.gguf"

static char tmpdir[64];
static int n_tmp; /* files made in tmpdir (named f0, f1, ...) */

static inline int setup(void **state) {
    (void)state;
    /* Thousands of small files are written: prefer tmpfs (/dev/shm) over a disk. */
    snprintf(tmpdir, sizeof tmpdir, "/dev/shm/pl_test_gguf_XXXXXX");
    if (mkdtemp(tmpdir)) return 0;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/pl_test_gguf_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static inline int teardown(void **state) {
    (void)state;
    char p[128];
    for (int i = 0; i < n_tmp; i++) {
        snprintf(p, sizeof p, "%s/f%d", tmpdir, i);
        unlink(p);
    }
    return rmdir(tmpdir);
}

/* A fresh path in tmpdir (in a static buffer: copy it to keep it across calls). */
static inline const char *tmp_path(void) {
    static char p[128];
    snprintf(p, sizeof p, "%s/f%d", tmpdir, n_tmp++);
    return p;
}

static inline uint8_t *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static inline const char *spill(const void *b, size_t n) {
    const char *p = tmp_path();
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
    return p;
}

static inline void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> 8 * i);
}
static inline void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> 8 * i);
}
static inline uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* Opening `b` (n bytes) must fail with st and a message containing word and the path. */
static inline void expect_bad(const void *b, size_t n, pl_status st, const char *word) {
    const char *p = spill(b, n);
    pl_gguf *g = (pl_gguf *)1;
    pl_status got = pl_gguf_open(p, &g);
    if (got != st || !strstr(pl_last_error(), word) || strncmp(pl_last_error(), p, strlen(p)))
        print_error("size %zu: got %s: '%s', want %s with '%s'\n", n, pl_status_name(got),
                    pl_last_error(), pl_status_name(st), word);
    assert_int_equal(got, st);
    assert_null(g);
    assert_non_null(strstr(pl_last_error(), word));
    assert_int_equal(strncmp(pl_last_error(), p, strlen(p)), 0);
}

static inline pl_gguf *open_ok(const char *path) {
    pl_gguf *g = NULL;
    pl_status st = pl_gguf_open(path, &g);
    if (st != PL_OK) print_error("%s\n", pl_last_error());
    assert_int_equal(st, PL_OK);
    return g;
}

static inline void assert_str(pl_gguf_str s, const char *want) {
    if (!pl_gguf_str_eq(s, want)) print_error("got '%.*s' want '%s'\n", (int)s.len, s.ptr, want);
    assert_true(pl_gguf_str_eq(s, want));
}

/* Position of the first occurrence of needle (as a GGUF string: u64 length + bytes) at or after
 * `from`; returns the offset of the length field. */
static inline size_t find_gguf_str(const uint8_t *b, size_t n, size_t from, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = from; i + 8 + k <= n; i++)
        if (get64(b + i) == k && !memcmp(b + i + 8, needle, k)) return i;
    fail_msg("'%s' not found", needle);
    return 0;
}


/* Encoding helpers for nested array values. */
typedef struct {
    uint8_t b[4096];
    size_t n;
} enc;
static inline void e32(enc *e, uint32_t v) { put32(e->b + e->n, v), e->n += 4; }
static inline void e64(enc *e, uint64_t v) { put64(e->b + e->n, v), e->n += 8; }
static inline void estr(enc *e, const char *s) {
    e64(e, strlen(s));
    memcpy(e->b + e->n, s, strlen(s));
    e->n += strlen(s);
}

#endif
