#!/usr/bin/env bash
# Which functions of the binary hold the instructions only some CPUs of a kernel level have
# (objdump): an AVX-512 CPU need not have AVX512_BF16 (Cascade Lake, Ice Lake, Tiger Lake) and
# the AVX-512 level runs there (kernels/cpu.h), and AMX is a switch on top of that level. Such an
# instruction reached on a CPU without it is a SIGILL no test here can show (this project's CPUs
# have BF16 or lack AVX-512 altogether; qemu emulates neither), so each may sit only in the
# functions that kernel choices reach through their switch (pl_cpu_avx512bf16, pl_cpu_amx);
# test_matmul_x16's test_avx512_without_bf16 checks those choices with the switch off. A new
# function holding one fails here until it is guarded like them and added below.
set -u
: "${PL_BUILD_DIR:?PL_BUILD_DIR must point at the build folder (its libpagellm.a is read)}"
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/ci_env.sh"
command -v objdump >/dev/null || skip_test "no objdump (binutils)"
LIB="$PL_BUILD_DIR/libpagellm.a"
[ -f "$LIB" ] || { echo "FAIL: $LIB is missing"; echo "0 passed, 1 failed"; exit 1; }
passed=0; failed=0
# check NAME INSN_REGEX ALLOWED_REGEX: every function holding one of the instructions, named
# FILE:FUNCTION (the library's object, as static names repeat across files; GCC's clone suffixes
# such as .constprop.0 stripped), matches ALLOWED
check() {
    local name=$1 insn=$2 allowed=$3 found bad
    found=$(objdump -d --no-show-raw-insn "$LIB" |
        awk -v re="^($insn)\$" '/^[^ ]+\.o: +file format/ { obj = $1; sub(/\.o:$/, "", obj) }
             /^[0-9a-f]+ <.*>:$/ { fn = substr($2, 2, length($2) - 3); sub(/\..*/, "", fn) }
             $2 ~ re { n[obj ":" fn]++ } END { for (f in n) print f }' | sort)
    bad=$(echo "$found" | grep -v -E "^($allowed)\$" | grep -v '^$')
    if [ -z "$found" ]; then
        echo "FAIL: $name: no function holds them (did objdump read the library? the check would pass on anything)"
        failed=$((failed + 1))
    elif [ -n "$bad" ]; then
        echo "FAIL: $name instructions in functions no switch guards: $(echo $bad)"
        failed=$((failed + 1))
    else
        echo "ok: $name only in: $(echo $found)"
        passed=$((passed + 1))
    fi
}
check "AVX512_BF16" 'vdpbf16ps|vcvtne2ps2bf16|vcvtneps2bf16' \
    'matmul_avx512.c:tile_bf16|matmul_x16_bf16_avx512.c:tile_bf16_x16(_wide)?(_next)?|roofline_avx512.c:pl_roofline_bf16_avx512|quant_avx512.c:pl_act_convert_row_avx512'
check "AMX" 'tdpbusd|tdpbssd|tileloadd|tileloaddt1|ldtilecfg|tilezero|tilestored|tilerelease' \
    'matmul_x16_amx.c:(pl_mm_gemm_x16_amx|pl_mm_amx_begin|pl_mm_amx_end)|matmul_x16_kq_amx.c:kq_amx_(tiles|tiles_q6|run)|roofline_amx.c:pl_roofline_tiles_amx'
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
