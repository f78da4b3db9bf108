#!/usr/bin/env bash
# Decode and prefill speed of the weight types of issue 18, pagellm beside llama.cpp in the same
# run (docs/BENCHMARKS.md): for each type, `pagellm bench model` then `llama-bench` on the same
# mkmodel file (the 110M Llama of docs/BENCHMARKS.md), 2 threads, interleaved per type.
#   LLAMA_CPP=<llama.cpp dir> MODELS=<dir> bash bench/wtypes.sh [BUILD_DIR]
# LLAMA_CPP: the peer built by ../shared/peer/build-llama-cpp.sh (binaries under build/bin).
# MODELS holds llama110m-T.gguf (made if missing). Prints one line per (type, program).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
L=${LLAMA_CPP:?set LLAMA_CPP}
M=${MODELS:?set MODELS}
echo "peer: llama.cpp $(git -C "$L" log -1 --format='%h, commit date %cd' 2>/dev/null || echo '(no git metadata)')"
for t in ${TYPES:-q4_1 q5_0 q5_1 iq4_nl q2_k q3_k iq4_xs}; do
  f="$M/llama110m-$t.gguf"
  [ -f "$f" ] || "$build/pagellm" mkmodel "$f" --vocab-from ../shared/testdata/vocab/ggml-vocab-llama-spm.gguf \
      --dim 768 --layers 12 --heads 12 --kv-heads 4 --ffn 2048 --type "$t" >/dev/null
  echo "== $t pagellm: $("$build/pagellm" bench model -m "$f" -p 512 -n 128 -b 1 --ctx 0 --reps 3 --json 2>/dev/null | tr '\n' ' ')"
  echo "== $t llama.cpp: $("$L/build/bin/llama-bench" -m "$f" -t 2 -p 512 -n 128 -r 3 -o csv 2>/dev/null | \
      tr -d '"' | awk -F, 'NR == 1 {for (i = 1; i <= NF; i++) c[$i] = i; next}
        {printf "pp%s tg%s %s +- %s t/s; ", $c["n_prompt"], $c["n_gen"], $c["avg_ts"], $c["stddev_ts"]}')"
done
