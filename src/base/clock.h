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

/* Seconds of CPU time the calling thread has used (benchmarks on a shared machine: other
 * processes' load does not stretch it as it stretches the monotonic clock). */
static inline double pl_clock_thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The CLOCK_REALTIME instant `ms` milliseconds from now, as pthread_cond_timedwait wants it. */
static inline struct timespec pl_clock_deadline(int ms) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += ms / 1000;
    dl.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
    return dl;
}

#endif
