#!/usr/bin/env bash
# Makes tests/data/wtypes/T.json, the llama.cpp references of tests/integration/
# test_wtype_reference.c, for the weight types of issue 18 (q4_1 q5_0 q5_1 iq4_nl q2_k q3_k
# iq4_xs) and q5_k_m (TYPES="..." makes only those): `pagellm mkmodel --type T` (the test's flags), then scripts/wtype_ref.c, linked
# against llama.cpp's library, computes the continuations on that file.
# With --llama-quantized it instead measures, without writing references, pagellm on models that
# llama.cpp's own llama-quantize made (--pure, from the same model in f32): the reading of
# llama.cpp-quantized files (docs/ACCURACY.md).
#   LLAMA_CPP=/path/to/llama.cpp bash scripts/make_wtype_refs.sh [--llama-quantized] [BUILD_DIR]
# llama.cpp built by ../shared/peer/build-llama-cpp.sh. Nothing made from llama.cpp is committed
# except the JSON references (a few KB of log-probabilities).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=refs
if [ "${1:-}" = "--llama-quantized" ]; then mode=llq; shift; fi
build=${1:-build}
L=${LLAMA_CPP:?set LLAMA_CPP to a llama.cpp built by ../shared/peer/build-llama-cpp.sh}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
gcc -O2 -Wall -Wextra -o "$tmp/wtype_ref" scripts/wtype_ref.c -I"$L/include" -I"$L/ggml/include" \
    -L"$L/build/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$L/build/bin" -lm
mk() { "$build/pagellm" mkmodel "$1" --vocab-from ../shared/models/stories260K.gguf --dim 256 \
         --layers 2 --heads 8 --kv-heads 4 --ffn 768 --type "$2" --seed 7 >/dev/null; }
types=${TYPES:-"q4_1 q5_0 q5_1 iq4_nl q2_k q3_k iq4_xs q5_k_m"}
if [ $mode = refs ]; then
  mkdir -p tests/data/wtypes
  for t in $types; do
    mk "$tmp/$t.gguf" "$t"
    "$tmp/wtype_ref" "$tmp/$t.gguf" "$t" > "tests/data/wtypes/$t.json"
    echo "tests/data/wtypes/$t.json"
  done
  exit 0
fi
# --llama-quantized: llama-quantize --pure from f32, references on those files, then pagellm
# (teacher-forced, every ISA) through test_wtype_reference's comparison in measuring mode.
mk "$tmp/f32.gguf" f32
mkdir -p "$tmp/src/tests/data/wtypes"
declare -A lq=([q4_1]=Q4_1 [q5_0]=Q5_0 [q5_1]=Q5_1 [iq4_nl]=IQ4_NL [q2_k]=Q2_K [q3_k]=Q3_K_S [iq4_xs]=IQ4_XS [q5_k_m]=Q5_K_M)
for t in $types; do
  "$L/build/bin/llama-quantize" --pure "$tmp/f32.gguf" "$tmp/$t.gguf" "${lq[$t]}" >/dev/null 2>&1
  "$tmp/wtype_ref" "$tmp/$t.gguf" "$t" > "$tmp/src/tests/data/wtypes/$t.json"
done
isas="scalar avx2"; grep -qw avx512f /proc/cpuinfo && isas="$isas avx512"
for isa in $isas; do
  echo "== PAGELLM_ISA=$isa, llama-quantize'd models"
  CI= PAGELLM_ISA=$isa PL_REF_MEASURE=1 PL_WTYPE_MODELS="$tmp" PL_WTYPE_REFS="$tmp/src" \
    "$build/test_wtype_reference" 2>&1 | grep 'max |'
done
