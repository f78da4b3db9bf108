/* base/buf — see buf.h. */
#include "base/buf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

void pl_free_all(void *const *ptrs, size_t n) {
    for (size_t i = 0; i < n; i++) free(ptrs[i]);
}

void *pl_alloc_stream(size_t bytes) {
    const size_t huge = (size_t)2 << 20;
    void *p = NULL;
    if (bytes > SIZE_MAX - 63) return NULL;
    if (posix_memalign(&p, bytes >= huge ? huge : 64, (bytes + 63) / 64 * 64)) return NULL;
    if (bytes >= huge) (void)madvise(p, bytes / huge * huge, MADV_HUGEPAGE); /* a hint */
    return p;
}

int pl_array_reserve(void *arrp, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    if (!elem || need > SIZE_MAX / elem) return -1;
    size_t c = *cap ? *cap : 16;
    while (c < need) c = c > SIZE_MAX / 2 / elem ? need : c * 2;
    void *old;
    memcpy(&old, arrp, sizeof old); /* arrp points at a T *, which has void *'s representation */
    void *p = realloc(old, c * elem);
    if (!p) return -1;
    memcpy(arrp, &p, sizeof p);
    *cap = c;
    return 0;
}

void pl_strbuf_init(pl_strbuf *b) { *b = (pl_strbuf){0}; }

void pl_strbuf_destroy(pl_strbuf *b) {
    free(b->p);
    pl_strbuf_init(b);
}

/* Room for n more bytes plus the NUL. */
static int room(pl_strbuf *b, size_t n) {
    if (b->failed) return -1;
    if (n > SIZE_MAX - b->len - 1 || pl_array_reserve(&b->p, &b->cap, b->len + n + 1, 1)) {
        b->failed = 1;
        return -1;
    }
    return 0;
}

int pl_strbuf_append(pl_strbuf *b, const void *s, size_t n) {
    if (room(b, n)) return -1;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

int pl_strbuf_puts(pl_strbuf *b, const char *s) { return pl_strbuf_append(b, s, strlen(s)); }

int pl_strbuf_putc(pl_strbuf *b, char c) { return pl_strbuf_append(b, &c, 1); }

int pl_strbuf_vprintf(pl_strbuf *b, const char *fmt, va_list ap) {
    if (b->failed) return -1;
    va_list aq;
    va_copy(aq, ap);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, aq);
    va_end(aq);
    if (n < 0) {
        b->failed = 1;
        return -1;
    }
    if ((size_t)n < sizeof small) return pl_strbuf_append(b, small, (size_t)n);
    if (room(b, (size_t)n)) return -1;
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return 0;
}

int pl_strbuf_printf(pl_strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = pl_strbuf_vprintf(b, fmt, ap);
    va_end(ap);
    return r;
}

void pl_strbuf_clear(pl_strbuf *b) {
    b->len = 0;
    if (b->p) b->p[0] = '\0';
}

char *pl_strbuf_take(pl_strbuf *b) {
    char *p = b->failed ? NULL : b->p;
    if (b->failed) free(b->p);
    pl_strbuf_init(b);
    return p;
}
