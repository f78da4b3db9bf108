/* base/fault — see fault.h. */
#include "base/fault.h"

#include <stdlib.h>

#ifdef PL_FAULT_INJECT

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static _Atomic uint64_t g_every, g_only, g_count, g_calls, g_failed;
static atomic_int g_armed;

/* 1 when this call is to fail. */
static int should_fail(void) {
    atomic_fetch_add_explicit(&g_calls, 1, memory_order_relaxed);
    if (!atomic_load_explicit(&g_armed, memory_order_acquire)) return 0;
    uint64_t k = atomic_fetch_add_explicit(&g_count, 1, memory_order_relaxed) + 1;
    uint64_t every = atomic_load_explicit(&g_every, memory_order_relaxed);
    int fail = every ? k % every == 0 : k == atomic_load_explicit(&g_only, memory_order_relaxed);
    if (fail) atomic_fetch_add_explicit(&g_failed, 1, memory_order_relaxed);
    return fail;
}

void pl_fault_arm_with(uint64_t every, uint64_t only) {
    atomic_store(&g_armed, 0);
    atomic_store(&g_every, every);
    atomic_store(&g_only, only);
    atomic_store(&g_count, 0);
    atomic_store(&g_armed, 1);
}

uint64_t pl_fault_arm(void) {
    const char *e = getenv("PL_FAULT_EVERY"), *o = getenv("PL_FAULT_ONLY");
    uint64_t every = e ? strtoull(e, NULL, 10) : 0, only = o ? strtoull(o, NULL, 10) : 0;
    if (!e && !o) {
        const char *sd = getenv("PL_FAULT_SEED");
        uint64_t x = sd ? strtoull(sd, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16);
        x = (x ^ (x >> 31)) * 0x9e3779b97f4a7c15ull; /* a splitmix step spreads close seeds */
        every = 50 + (x >> 33) % 951;
    }
    if (!every && !only) every = 1;
    fprintf(stderr, "fault injection: failing %s %llu of every allocation, mmap and thread start\n",
            every ? "one in" : "call", (unsigned long long)(every ? every : only));
    pl_fault_arm_with(every, every ? 0 : only);
    return every;
}

void pl_fault_disarm(void) { atomic_store(&g_armed, 0); }
uint64_t pl_fault_calls(void) { return atomic_load(&g_calls); }
uint64_t pl_fault_failed(void) { return atomic_load(&g_failed); }
int pl_fault_enabled(void) { return 1; }

void *__real_malloc(size_t);
void *__real_calloc(size_t, size_t);
void *__real_realloc(void *, size_t);
char *__real_strdup(const char *);
char *__real_strndup(const char *, size_t);
void *__real_aligned_alloc(size_t, size_t);
int __real_posix_memalign(void **, size_t, size_t);
void *__real_mmap(void *, size_t, int, int, int, off_t);
int __real_pthread_create(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t m);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
void *__wrap_aligned_alloc(size_t a, size_t n);
int __wrap_posix_memalign(void **p, size_t a, size_t n);
void *__wrap_mmap(void *a, size_t n, int prot, int flags, int fd, off_t off);
int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *at, void *(*f)(void *), void *arg);

#define FAIL_NULL()                                                                                \
    do {                                                                                           \
        if (should_fail()) {                                                                       \
            errno = ENOMEM;                                                                        \
            return NULL;                                                                           \
        }                                                                                          \
    } while (0)

void *__wrap_malloc(size_t n) { FAIL_NULL(); return __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t m) { FAIL_NULL(); return __real_calloc(n, m); }
void *__wrap_realloc(void *p, size_t n) { FAIL_NULL(); return __real_realloc(p, n); }
char *__wrap_strdup(const char *s) { FAIL_NULL(); return __real_strdup(s); }
char *__wrap_strndup(const char *s, size_t n) { FAIL_NULL(); return __real_strndup(s, n); }
void *__wrap_aligned_alloc(size_t a, size_t n) { FAIL_NULL(); return __real_aligned_alloc(a, n); }

int __wrap_posix_memalign(void **p, size_t a, size_t n) {
    return should_fail() ? ENOMEM : __real_posix_memalign(p, a, n);
}

void *__wrap_mmap(void *a, size_t n, int prot, int flags, int fd, off_t off) {
    if (should_fail()) {
        errno = ENOMEM;
        return MAP_FAILED;
    }
    return __real_mmap(a, n, prot, flags, fd, off);
}

int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *at, void *(*f)(void *), void *arg) {
    return should_fail() ? EAGAIN : __real_pthread_create(t, at, f, arg);
}

void *pl_fault_exempt_malloc(size_t n) { return __real_malloc(n); }

#else

uint64_t pl_fault_arm(void) { return 0; }
void pl_fault_arm_with(uint64_t every, uint64_t only) { (void)every, (void)only; }
void pl_fault_disarm(void) {}
uint64_t pl_fault_calls(void) { return 0; }
uint64_t pl_fault_failed(void) { return 0; }
int pl_fault_enabled(void) { return 0; }
void *pl_fault_exempt_malloc(size_t n) { return malloc(n); }

#endif
