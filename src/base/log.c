/* base/log — see log.h. */
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int level = -1; /* -1: not yet read from the environment */

static pl_log_level env_level(void) {
    const char *s = getenv("PAGELLM_LOG");
    if (!s) return PL_LOG_WARN;
    if (!strcmp(s, "debug")) return PL_LOG_DEBUG;
    if (!strcmp(s, "info")) return PL_LOG_INFO;
    if (!strcmp(s, "error")) return PL_LOG_ERROR;
    if (!strcmp(s, "off")) return PL_LOG_OFF;
    return PL_LOG_WARN;
}

void pl_log_set_level(pl_log_level lvl) { level = (int)lvl; }

pl_log_level pl_log_get_level(void) {
    if (level < 0) level = (int)env_level();
    return (pl_log_level)level;
}

void pl_log(pl_log_level lvl, const char *fmt, ...) {
    static const char *names[] = {"debug", "info", "warn", "error"};
    if (lvl < pl_log_get_level() || lvl >= PL_LOG_OFF) return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "pagellm %s: %s\n", names[lvl], buf);
}
