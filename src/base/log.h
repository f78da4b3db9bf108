/* base/log — leveled logging to stderr. The level is process-wide, set once at start
 * (PAGELLM_LOG=debug|info|warn|error or pl_log_set_level). Messages are single lines. */
#ifndef PL_BASE_LOG_H
#define PL_BASE_LOG_H

typedef enum { PL_LOG_DEBUG = 0, PL_LOG_INFO, PL_LOG_WARN, PL_LOG_ERROR, PL_LOG_OFF } pl_log_level;

void pl_log_set_level(pl_log_level lvl);
pl_log_level pl_log_get_level(void);
void pl_log(pl_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define PL_DEBUG(...) pl_log(PL_LOG_DEBUG, __VA_ARGS__)
#define PL_INFO(...) pl_log(PL_LOG_INFO, __VA_ARGS__)
#define PL_WARN(...) pl_log(PL_LOG_WARN, __VA_ARGS__)
#define PL_ERROR(...) pl_log(PL_LOG_ERROR, __VA_ARGS__)

#endif
