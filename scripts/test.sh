#!/usr/bin/env bash
# Builds pagellm (optimised, and again with AddressSanitizer + UndefinedBehaviorSanitizer) and
# runs the whole test suite under both. Ends with one line "N passed, N failed, N skipped": a test
# that skipped (exit 77: a tool it needs is missing) counts as failed too, as CI runs with
# CI=true and a skip there means the suite did not test what it claims.
set -uo pipefail
cd "$(dirname "$0")/.."
# This is the CI run (.ci/run calls it): the tests refuse their local debugging knobs that make
# them do less (tests/ci_env.h) when CI=true, so say so whatever the caller set, and stop early
# when one of the knobs is in the environment.
export CI=true
weakening="PL_REF_MEASURE PL_REF_DUMP PL_KV_OPS PL_KV_SEED WSTART NOPC PAGELLM_ISA PL_TEST_FILTER
           PL_TEST_EMULATED_FLAGS PL_FUZZ_TARGETS FAULT_SECONDS PL_FAULT_SEED PL_FAULT_EVERY PL_FAULT_ONLY PL_ARCH_ONLY"
for v in $weakening; do
  if [ -n "${!v+set}" ]; then
    echo "test.sh: $v=${!v} is set; it weakens the tests and is refused under CI=true" >&2
    echo "0 passed, 1 failed, 0 skipped"
    exit 1
  fi
done
bash scripts/setup.sh --asan || { echo "0 passed, 1 failed, 0 skipped"; exit 1; }

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
passed=0; failed=0; skipped=0
# tally LOG: adds a ctest log's counts. ctest counts a skipped test (SKIP_RETURN_CODE) as not
# failed and lists it under "The following tests did not run" as "(Skipped)"; here it is neither
# passed nor forgiven: it counts as failed, and as skipped for the closing line. No summary line
# at all (ctest did not run, or found no test) is one failure.
tally() {
  local line total f s
  line=$(grep -E 'tests passed, [0-9]+ tests failed out of [0-9]+' "$1" || true)
  total=$(echo "$line" | grep -Eo 'out of [0-9]+' | grep -Eo '[0-9]+' || echo 0)
  f=$(echo "$line" | grep -Eo '[0-9]+ tests failed' | grep -Eo '^[0-9]+' || echo 1)
  [ -z "$line" ] && { total=0; f=1; }
  s=$(grep -Ec '^[[:space:]]*[0-9]+ - .* \(Skipped\)$' "$1" || true)
  [ "$s" -gt 0 ] && echo "$1: $s skipped test(s) count as failed under CI:" &&
    grep -E '^[[:space:]]*[0-9]+ - .* \(Skipped\)$' "$1"
  passed=$((passed + total - f - s)); failed=$((failed + f + s)); skipped=$((skipped + s))
}
# Three tests at a time on CI's two cores: the end-to-end tests wait on servers, clients and
# mpirun for part of their time, so a third fills the gaps (2026-11-28, Zen 4, 2 cores: plain
# 161 -> 131 s, ASan ~270 -> 233 s; the processes then kept 1.9 cores busy, so -j 4 gains little).
for dir in build build-asan; do
  echo "== ctest in $dir (at ${SECONDS} s)"
  ctest --test-dir "$dir" --output-on-failure -j 3 --timeout 900 | tee "$dir/ctest.log"
  tally "$dir/ctest.log"
  # The soak test's figures (requests by kind and how they ended, blocks, RSS) even when it passed.
  echo "-- soak figures ($dir)"
  grep -E '^(sent by kind|ended|status|violations|answered|metrics|preemptions|RSS):' "$dir/Testing/Temporary/LastTest.log" || true
done
# The kernel tests and a few engine tests on an emulated AVX2-only CPU (qemu-user, a Zen 3 model):
# CPUID says AVX2, so detection, repacking and dispatch take an AVX2 machine's path whatever this
# machine has, and an AVX-512 instruction outside the avx512 kernels faults. About 30 s.
echo "== emulated AVX2 CPU (scripts/emu_cpu.sh) (at ${SECONDS} s)"
bash scripts/emu_cpu.sh | tee build/emu.log
line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' build/emu.log | tail -1)
if [ -n "$line" ]; then
  passed=$((passed + ${line%% passed*})); f=${line#*, }; failed=$((failed + ${f%% failed}))
else
  failed=$((failed + 1))
fi
# The AVX-VNNI tiles and the AMX kernels on a CPU without them (Zen 4, Ice Lake, AVX2-only
# CPUs): a build whose AVX-VNNI files compute vpdpbusd / vpdpwssd exactly with AVX2
# (src/kernels/avxvnni_emulate.h) and whose AMX files compute the tile instructions in C
# (src/kernels/amx_emulate.h; no qemu emulates either) runs the kernel and model tests at the
# avxvnni level and at the avx512 level with AMX on (where the CPU has AVX-512), bitwise against
# the scalar kernels and within docs/ACCURACY.md against llama.cpp. Where the CPU has both, the
# plain builds run the real instructions instead. About 35 s of build and 20 s of tests.
flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
if [[ " $flags " == *" avx2 "* && ( " $flags " != *" avx_vnni "* || " $flags " != *" amx_int8 "* ) ]]; then
  echo "== emulated AVX-VNNI and AMX (build-emu) (at ${SECONDS} s)"
  emu_tests='^(test_matmul_x16|test_matmul|test_matmul_gemm|test_moe|test_gptoss|test_wtypes|test_wtype_reference|test_reference)$'
  # -O1: 31 s of build against Release's 45, the tests as fast
  if cmake -S . -B build-emu -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-O1" \
         -DPL_EMULATE_AVXVNNI=ON -DPL_EMULATE_AMX=ON -DPL_MPI=OFF >/dev/null &&
     cmake --build build-emu -j "$(nproc)" --target pagellm_cli test_matmul_x16 test_matmul test_matmul_gemm \
           test_moe test_gptoss test_wtypes test_wtype_reference test_reference >/dev/null; then
    ctest --test-dir build-emu --output-on-failure -j 2 --timeout 900 -R "$emu_tests" | tee build-emu/ctest.log
    tally build-emu/ctest.log
  else
    echo "emulated AVX-VNNI and AMX build failed"; failed=$((failed + 1))
  fi
fi
# The tests where threads meet (engine inbox and output channels, the server) also run under
# ThreadSanitizer.
# Only what those tests run is built (the CLI for the e2e ones): the whole tree took a minute
# more of CI for ~75 test programs that never ran here. A test the pattern matches whose program
# is missing fails ("Could not find executable"), so the two lists cannot drift apart silently.
echo "== ThreadSanitizer build (at ${SECONDS} s)"
tsan_tests='^(test_base|test_engine|test_kv_snapshot|test_vattn|test_kv_vattn|e2e_test_server_disconnect|e2e_test_webui_browser)$'
if cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DPL_TSAN=ON \
       -DCMAKE_C_FLAGS_DEBUG="-O1 -g1" >/dev/null &&
   cmake --build build-tsan -j "$(nproc)" --target pagellm_cli test_base test_engine \
         test_kv_snapshot test_vattn test_kv_vattn >/dev/null; then
  export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
  ctest --test-dir build-tsan --output-on-failure -j 2 --timeout 900 -R "$tsan_tests" | tee build-tsan/ctest.log
  tally build-tsan/ctest.log
else
  echo "ThreadSanitizer build failed"; failed=$((failed + 1))
fi
# Fault injection (base/fault.h): the engine and the server with one allocation, mmap or thread
# start in N failing (N random per run; the logs print it and how to repeat it), ASan + UBSan.
echo "== fault injection build (at ${SECONDS} s)"
if cmake -S . -B build-fault -G Ninja -DCMAKE_BUILD_TYPE=Debug -DPL_SANITIZE=ON -DPL_FAULT_INJECT=ON \
       -DCMAKE_C_FLAGS_DEBUG="-O1 -g1" >/dev/null &&
   cmake --build build-fault -j "$(nproc)" --target pagellm_cli test_fault_engine >/dev/null; then
  ctest --test-dir build-fault -V -j 2 --timeout 900 -R '^test_fault' | tee build-fault/ctest.log |
    grep -E '^[0-9]+: (load|fault injection|ended:|status:|violations|answered:|metrics:|FAIL)|tests passed|tests failed|Passed|Failed|Skipped'
  f0=$failed
  tally build-fault/ctest.log
  [ "$failed" != "$f0" ] && tail -80 build-fault/ctest.log
else
  echo "fault injection build failed"; failed=$((failed + 1))
fi
# Fuzzing (libFuzzer, clang, ASan + UBSan): every target 30 s from its seed corpus, after
# replaying its committed regression inputs.
echo "== fuzz (at ${SECONDS} s)"
mkdir -p build-fuzz
bash tests/fuzz/run.sh 30 | tee build-fuzz/run.log
line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' build-fuzz/run.log | tail -1)
if [ -n "$line" ]; then
  passed=$((passed + ${line%% passed*})); f=${line#*, }; failed=$((failed + ${f%% failed}))
else
  failed=$((failed + 1))
fi
echo "== done (at ${SECONDS} s)"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
