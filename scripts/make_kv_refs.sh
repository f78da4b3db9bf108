#!/usr/bin/env bash
# Makes tests/data/kvtypes/MODEL.KV.json, the llama.cpp references of the quantized and bf16 KV
# caches (tests/integration/test_wtype_reference.c, test_kv_types_against_llama_cpp): llama.cpp's
# library (scripts/wtype_ref.c) with -ctk/-ctv = KV (type_k = type_v) and flash attention, greedy
# continuations of the same fixed prompts, on the shared test models: synth-tiny-f32 (head_dim 32)
# in bf16, q8_0 and q4_0, stories260K (head_dim 8: llama.cpp, like pagellm, refuses q8_0 / q4_0
# there) in bf16.
#   LLAMA_CPP=/path/to/llama.cpp bash scripts/make_kv_refs.sh
# llama.cpp built by ../shared/peer/build-llama-cpp.sh. Only the JSON (a few KB) is committed.
set -euo pipefail
cd "$(dirname "$0")/.."
L=${LLAMA_CPP:?set LLAMA_CPP to a llama.cpp built by ../shared/peer/build-llama-cpp.sh}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
gcc -O2 -Wall -Wextra -o "$tmp/wtype_ref" scripts/wtype_ref.c -I"$L/include" -I"$L/ggml/include" \
    -L"$L/build/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$L/build/bin" -lm
mkdir -p tests/data/kvtypes
for mk in synth-tiny-f32:bf16 synth-tiny-f32:q8_0 synth-tiny-f32:q4_0 stories260K:bf16; do
  m=${mk%%:*} kv=${mk#*:}
  "$tmp/wtype_ref" "../shared/models/$m.gguf" "$m" "$kv" > "tests/data/kvtypes/$m.$kv.json"
  echo "tests/data/kvtypes/$m.$kv.json"
done
