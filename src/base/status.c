/* base/status — see status.h. */
#include "base/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PL_ERRMSG_MAX = 1024 };
static _Thread_local char errmsg[PL_ERRMSG_MAX];

pl_status pl_fail(pl_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errmsg, sizeof errmsg, fmt, ap);
    va_end(ap);
    return st;
}

void pl_error_prefix(const char *fmt, ...) {
    char old[PL_ERRMSG_MAX];
    memcpy(old, errmsg, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(errmsg, sizeof errmsg, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof errmsg - 2) return;
    size_t len = (size_t)n;
    errmsg[len++] = ':';
    errmsg[len++] = ' ';
    size_t room = sizeof errmsg - len - 1, olen = strlen(old);
    if (olen > room) olen = room;
    memcpy(errmsg + len, old, olen);
    errmsg[len + olen] = '\0';
}

const char *pl_last_error(void) { return errmsg[0] ? errmsg : "no error"; }

void pl_clear_error(void) { errmsg[0] = '\0'; }

const char *pl_status_name(pl_status st) {
    switch (st) {
    case PL_OK: return "ok";
    case PL_ERR_INVALID_ARG: return "invalid argument";
    case PL_ERR_IO: return "I/O error";
    case PL_ERR_FORMAT: return "malformed input";
    case PL_ERR_UNSUPPORTED: return "unsupported";
    case PL_ERR_NOT_FOUND: return "not found";
    case PL_ERR_NOMEM: return "out of memory";
    case PL_ERR_CAPACITY: return "capacity exhausted";
    case PL_ERR_INTERNAL: return "internal error";
    case PL_ERR_TIMEOUT: return "timed out";
    }
    return "unknown status";
}

void pl_assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "pagellm: internal invariant failed: %s (%s:%d)\n", expr, file, line);
    abort();
}
