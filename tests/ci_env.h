/* Local debugging knobs that make a test do less (fewer operations, fewer beam widths, no
 * tolerance judgement, a lower kernel ISA, another random seed) must not be able to turn CI
 * green: test_env() reads one and fails the running test loudly when it is set while CI says
 * it is CI (CI=true; scripts/test.sh, which .ci/run calls, always exports it). Include after
 * <cmocka.h>; call only inside a test. */
#ifndef PL_TEST_CI_ENV_H
#define PL_TEST_CI_ENV_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline int test_under_ci(void) {
    const char *ci = getenv("CI");
    return ci && *ci && strcmp(ci, "false") != 0 && strcmp(ci, "0") != 0;
}

/* getenv(name), refused under CI. */
static inline const char *test_env(const char *name) {
    const char *v = getenv(name);
    if (v && test_under_ci())
        fail_msg("%s=%s is set under CI=%s: it weakens this test and is for local debugging "
                 "only; unset it",
                 name, v, getenv("CI"));
    return v;
}

/* getenv(name) for main(), outside any test (cmocka's fail_msg needs a running test): under CI
 * it prints why and exits 1, so the program fails before running a test. */
static inline const char *test_env_main(const char *name) {
    const char *v = getenv(name);
    if (v && test_under_ci()) {
        fprintf(stderr, "%s=%s is set under CI=%s: it weakens this test and is for local debugging "
                        "only; unset it\n", name, v, getenv("CI"));
        exit(1);
    }
    return v;
}

#endif
