# The shell side of tests/ci_env.h (sourced, not run). CI runs with CI=true (scripts/test.sh, which
# .ci/run calls, exports it): there a test may neither skip nor be weakened by a local knob.
under_ci() { case "${CI:-}" in "" | false | 0) return 1 ;; *) return 0 ;; esac; }

# skip_test REASON: exit 77 (ctest counts it as skipped) when a tool the test needs is missing;
# under CI a missing tool is a failure (scripts/setup.sh installs every one of them).
skip_test() {
    if under_ci; then
        echo "FAIL: $1: under CI=$CI nothing may skip (scripts/setup.sh installs what the tests need)"
        echo "0 passed, 1 failed"
        exit 1
    fi
    echo "SKIP: $1"
    exit 77
}

# refuse_knob NAME: a test's local debugging knob that makes it do less is refused under CI.
refuse_knob() {
    if [ -n "${!1+set}" ] && under_ci; then
        echo "FAIL: $1=${!1} is set under CI=$CI: it weakens this test and is for local debugging only; unset it"
        echo "0 passed, 1 failed"
        exit 1
    fi
}
