/* base/status — status codes, the last error message, and invariant checks.
 *
 * Every function that can fail returns a pl_status and, on failure, leaves a specific message
 * (which file, key, tensor, field or parameter; what was expected; what was found) in a
 * thread-local buffer readable with pl_last_error(). Callers that add context use
 * pl_error_prefix() so the message reads outermost-first: "model.gguf: tensor 'x': ...".
 *
 * PL_ASSERT checks internal invariants (never user input) and stays on in every build: an
 * invariant that fails is a bug and aborts with file and line.
 */
#ifndef PL_BASE_STATUS_H
#define PL_BASE_STATUS_H

#include <stdarg.h>
#include <stddef.h>

typedef enum {
    PL_OK = 0,
    PL_ERR_INVALID_ARG,   /* a parameter or flag is out of range or malformed */
    PL_ERR_IO,            /* open/read/mmap failed */
    PL_ERR_FORMAT,        /* a file's contents are malformed (bad magic, truncated, out of bounds) */
    PL_ERR_UNSUPPORTED,   /* well-formed but not supported: architecture, tensor type, tokenizer */
    PL_ERR_NOT_FOUND,     /* a key, tensor, model or token that should exist does not */
    PL_ERR_NOMEM,         /* an allocation failed or a budget is too small */
    PL_ERR_CAPACITY,      /* a bounded resource (KV blocks, queue) is full; retry may succeed */
    PL_ERR_INTERNAL,
} pl_status;

/* Record a formatted message for the current thread and return `st` (so `return pl_fail(...)`). */
pl_status pl_fail(pl_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prepend "prefix: " to the current message (used to add a file or request name). */
void pl_error_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *pl_last_error(void);
void pl_clear_error(void);
const char *pl_status_name(pl_status st);

void pl_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));
#define PL_ASSERT(e) ((e) ? (void)0 : pl_assert_fail(#e, __FILE__, __LINE__))

/* Propagate a failure: PL_TRY(f(x)); */
#define PL_TRY(expr)                      \
    do {                                  \
        pl_status pl_try_st_ = (expr);    \
        if (pl_try_st_ != PL_OK)          \
            return pl_try_st_;            \
    } while (0)

#endif
