#!/usr/bin/env bash
# Runs unit tests of a built tree on an emulated CPU: qemu-user (Debian's qemu-user) with a CPU
# model whose CPUID has AVX2 but no AVX-512 (default EPYC-Milan, a Zen 3: avx2 fma f16c, no
# avx_vnni). Unlike PAGELLM_ISA=avx2 on an AVX-512 machine, which only lowers the kernels chosen,
# here CPUID itself says AVX2 (so start-up detection, x16 repacking and every dispatch take the
# AVX2 machine's path) and any AVX-512 instruction that leaked outside the avx512 files faults
# (SIGILL). The tests' ISA coverage check reads the model's flags from PL_TEST_EMULATED_FLAGS
# (tests/unit/isa_coverage.h: honoured only where CPUID names a qemu model). TCG runs SIMD
# ~200x slower than the host, so the default list is the kernel tests and a few engine tests, and
# the tests' ISA loops leave the scalar level (whose code does not depend on CPUID) to the native
# runs (isa_level_runs).
# Usage: bash scripts/emu_cpu.sh [TEST ...]   EMU_JOBS tests at once (default: one per core);
#        another CPU: EMU_CPU=model EMU_FLAGS="its /proc/cpuinfo flags" EMU_LEVEL=its kernel level
# Ends with "N passed, N failed"; each failure's log is build/emu-TEST.log.
set -uo pipefail
cd "$(dirname "$0")/.."
cpu="${EMU_CPU:-EPYC-Milan}"
flags="${EMU_FLAGS:-sse4_2 avx avx2 fma f16c bmi2}"
command -v qemu-x86_64 >/dev/null || { echo "qemu-x86_64 is missing: apt-get install qemu-user" >&2; exit 2; }
tests=("$@")
# default (CI's): every kernel family at the AVX2 level, and models loaded and run as an AVX2
# machine loads them (repacking chosen by CPUID); about a minute of CPU. Longer ones to pass by
# name: test_attention test_kv_quant test_engine test_reference test_spec (40-180 s each), and
# test_wtype_reference test_preempt_groups (7-9 minutes). Not test_vattn and test_kv_vattn: they
# count resident pages with mincore(2), which qemu-user answers from its own map of the guest and
# fails (ENOMEM) over the PROT_NONE reservation, where a CPU's kernel answers.
[ ${#tests[@]} -gt 0 ] || tests=(test_matmul_x16 test_moe test_matmul_gemm test_attention_contig test_matmul test_gptoss
  test_moe_engine test_sampler test_ops test_f16_bf16 test_wtypes test_qwen2 test_lora)
jobs="${EMU_JOBS:-$(nproc)}"
# run_one TEST: runs it on the emulated CPU, writes "ok ..." or "FAIL ..." to build/emu-TEST.result
run_one() {
  local t=$1 start rc why
  start=$(date +%s)
  (cd build && PL_TEST_EMULATED_FLAGS="$flags" qemu-x86_64 -cpu "$cpu" "./$t") >"build/emu-$t.log" 2>&1
  rc=$?
  why=$(grep -v "TCG doesn't support" "build/emu-$t.log" | grep -m1 -E 'ERROR|FAIL|Illegal|signal')
  # a test with ISA loops must say it ran on a CPU detected as the model's level, not the host's
  if [ $rc -eq 0 ] && grep -q 'ISAs tested' "build/emu-$t.log" &&
     grep 'ISAs tested' "build/emu-$t.log" | grep -q -v "detected ${EMU_LEVEL:-avx2})"; then
    rc=1; why="not detected as ${EMU_LEVEL:-avx2}: $(grep -m1 'ISAs tested' "build/emu-$t.log")"
  fi
  if [ $rc -eq 0 ]; then echo "ok   $t ($(( $(date +%s) - start )) s)"
  else echo "FAIL $t ($(( $(date +%s) - start )) s, exit $rc): $why"; fi >"build/emu-$t.result"
}
for t in "${tests[@]}"; do
  [ -x "build/$t" ] || { echo "build/$t is missing: build first (cmake --build build)" >&2; exit 2; }
  rm -f "build/emu-$t.result"
done
for t in "${tests[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  run_one "$t" &
done
wait
passed=0; failed=0
for t in "${tests[@]}"; do
  r=$(cat "build/emu-$t.result" 2>/dev/null || echo "FAIL $t: no result")
  echo "$r"
  case "$r" in ok*) passed=$((passed + 1)) ;; *) failed=$((failed + 1)) ;; esac
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
