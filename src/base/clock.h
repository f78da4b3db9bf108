/* base/clock — the monotonic clock every timing in pagellm reads (latencies, benchmarks). */
#ifndef PL_BASE_CLOCK_H
#define PL_BASE_CLOCK_H

#include <time.h>

/* Seconds on the monotonic clock (an arbitrary origin; only differences mean anything). */
static inline double pl_clock_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
