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

#include "pagellm.h" /* pl_status and its codes, pl_last_error, pl_clear_error, pl_status_name */


/* Record a formatted message for the current thread and return `st` (so `return pl_fail(...)`). */
pl_status pl_fail(pl_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prepend "prefix: " to the current message (used to add a file or request name). */
void pl_error_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

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
