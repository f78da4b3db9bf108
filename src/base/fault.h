/* base/fault — fault injection for the -DPL_FAULT_INJECT=ON build (tests/fault/).
 *
 * That build links every program with `-Wl,--wrap=` for malloc, calloc, realloc, strdup,
 * strndup, aligned_alloc, posix_memalign, mmap and pthread_create: the calls our code makes go
 * through this module, which fails every Nth one once armed (ENOMEM / MAP_FAILED / EAGAIN, as the
 * real call would). Calls made inside shared libraries (libc itself, libmicrohttpd) are not
 * affected, and neither is jansson's (see server/util.c: jansson 2.14 crashes on a failed
 * allocation inside json_pack).
 *
 * Configuration, read by pl_fault_arm(): PL_FAULT_EVERY=N fails calls N, 2N, 3N, ... counted from
 * arming (unset: N is drawn at random in [50, 1000] from PL_FAULT_SEED, else from the clock, and
 * printed, so every run tries another interleaving); PL_FAULT_ONLY=K instead fails the Kth call
 * alone (a sweep over K reaches every allocation of a path exactly once). In every other build
 * the functions exist and do nothing, so callers need no #ifdef. */
#ifndef PL_BASE_FAULT_H
#define PL_BASE_FAULT_H

#include <stddef.h>
#include <stdint.h>

/* Starts failing calls as configured by the environment; returns N (0 when the build has no
 * fault injection). */
uint64_t pl_fault_arm(void);
/* Programmatic arming for C tests: fail call `every`, 2*every, ... or, with every = 0, only the
 * call number `only` (1-based) after this point. */
void pl_fault_arm_with(uint64_t every, uint64_t only);
void pl_fault_disarm(void);
/* Calls intercepted and calls failed since the process started. */
uint64_t pl_fault_calls(void);
uint64_t pl_fault_failed(void);
/* 1 in the fault-injection build. */
int pl_fault_enabled(void);
/* malloc that never fails on purpose, for libraries that take an allocator and do not survive a
 * failure (jansson). */
void *pl_fault_exempt_malloc(size_t n);

#endif
