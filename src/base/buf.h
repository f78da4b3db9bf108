/* base/buf — the one growable array and the one string builder of the code base.
 *
 * pl_array_reserve grows an array to hold at least `need` elements (capacity doubles, from 16),
 * checks the size for overflow, and on failure leaves the array and its capacity as they were,
 * so the caller still owns a valid array and only has to report the error.
 *
 * pl_strbuf is a byte string that grows as it is appended to. Invariants: `p` is NUL-terminated
 * whenever it is non-NULL (binary data may contain NULs; `len` is the length); after the first
 * failed allocation `failed` is set and every later append is a no-op, so a caller appends freely
 * and checks once at the end. A zeroed pl_strbuf is empty and valid. */
#ifndef PL_BASE_BUF_H
#define PL_BASE_BUF_H

#include <stdarg.h>
#include <stddef.h>

/* free() each of the pointers: PL_FREE_ALL(a->x, a->y, a->z) for a destructor's list. */
void pl_free_all(void *const *ptrs, size_t n);
#define PL_FREE_ALL(...)                                                                           \
    pl_free_all((void *const[]){__VA_ARGS__}, sizeof((void *const[]){__VA_ARGS__}) / sizeof(void *))

/* `bytes` of memory for large arrays that are streamed (weights, the bandwidth probe): 64-byte
 * aligned, and from 2 MiB on 2 MiB-aligned with its whole 2 MiB pages asked for as huge pages
 * (MADV_HUGEPAGE; with transparent huge pages in "madvise" mode, the usual default, they are
 * 4 KB pages otherwise, and a stream over them misses the TLB every 4 KB). NULL when out of
 * memory; free() it. */
void *pl_alloc_stream(size_t bytes);

/* `arrp` is the address of the array pointer (a T **). 0, or -1 when out of memory. */
int pl_array_reserve(void *arrp, size_t *cap, size_t need, size_t elem);

typedef struct {
    char *p;
    size_t len, cap;
    int failed;
} pl_strbuf;

void pl_strbuf_init(pl_strbuf *b);
void pl_strbuf_destroy(pl_strbuf *b);
/* Each returns 0, or -1 when this or an earlier append failed. */
int pl_strbuf_append(pl_strbuf *b, const void *s, size_t n);
int pl_strbuf_puts(pl_strbuf *b, const char *s);
int pl_strbuf_putc(pl_strbuf *b, char c);
int pl_strbuf_printf(pl_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int pl_strbuf_vprintf(pl_strbuf *b, const char *fmt, va_list ap);
/* Empties b, keeping its memory (and a failure). */
void pl_strbuf_clear(pl_strbuf *b);
/* Hands the string to the caller (free() it) and empties b; NULL when an append failed (the
 * partial string is freed) or nothing was appended. */
char *pl_strbuf_take(pl_strbuf *b);

#endif
