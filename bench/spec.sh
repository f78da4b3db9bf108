#!/usr/bin/env bash
# Speculative decoding (issue 15, docs/BENCHMARKS.md "Speculative decoding"): single-stream decode
# with and without speculation, interleaved in one run (best of ROUNDS), then throughput against
# batch size with and without it.
#   MODELS=/dir bash bench/spec.sh [BUILD_DIR]
# MODELS receives spec38m-{f32,q4_k_m}.gguf (seed 7: the same random weights, the second quantized
# to Q4_K) and spec38m-other-q4_k_m.gguf (seed 8: a draft that never agrees), made if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
B="$build/pagellm"
M=${MODELS:?set MODELS}
R=${ROUNDS:-3}
T=${THREADS:-2}
S=../shared/models/stories260K.gguf
mk() { [ -f "$M/$1" ] || "$B" mkmodel "$M/$1" --vocab-from "$S" --dim 768 --layers 6 --heads 12 \
         --kv-heads 4 --ffn 2048 --type "$2" --seed "$3" >/dev/null; }
mk spec38m-f32.gguf f32 7
mk spec38m-q4_k_m.gguf q4_k_m 7
mk spec38m-other-q4_k_m.gguf q4_k_m 8

# One generate run: "seconds steps accepted/proposed".
gen() {
  local model=$1 prompt=$2 n=$3; shift 3
  "$B" generate -m "$model" -p "$prompt" -n "$n" --temperature 0 --ignore-eos -t "$T" -v "$@" 2>&1 >/dev/null |
    awk '/generated in/ {for (i = 1; i <= NF; i++) { if ($i == "in") s = $(i + 1); if ($i == "steps,") st = $(i - 1) } }
         /speculative decoding:/ {a = $3 "/" $5}
         END {printf "%s %s %s\n", s, st, a ? a : "-"}'
}

# Single stream: each config ROUNDS times, interleaved; the best time of each.
single() {
  local name=$1 model=$2 prompt=$3 n=$4; shift 4
  local -a cfgs=("$@") best=() steps=() acc=()
  local i r s st a
  for ((r = 0; r < R; r++)); do
    for i in "${!cfgs[@]}"; do
      read -r s st a <<<"$(gen "$model" "$prompt" "$n" ${cfgs[$i]})"
      if [ -z "${best[$i]:-}" ] || awk -v x="$s" -v y="${best[$i]}" 'BEGIN {exit !(x < y)}'; then best[$i]=$s; fi
      steps[$i]=$st acc[$i]=$a
    done
  done
  for i in "${!cfgs[@]}"; do
    awk -v n="$name" -v c="${cfgs[$i]:-off}" -v s="${best[$i]}" -v b="${best[0]}" -v st="${steps[$i]}" -v a="${acc[$i]}" -v t="$n" \
      'BEGIN {split(a, x, "/"); printf "single %-8s %-60s %6.3f s %7.1f tok/s  speed-up %.2fx  %3d steps  accepted %s%s\n",
              n, c, s, t / s, b / s, st, a, (x[2] > 0 ? sprintf(" (%.0f%%)", 100 * x[1] / x[2]) : "")}'
  done
}

STORY="Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day,"
CODE="x = 1; y = 2; x = x + y; y = y + x; x = x + y; y = y + x; x = x + y;"
single stories "$S" "$STORY" 256 "" "--speculative-ngram" "--speculative-ngram --num-speculative-tokens 8"
single code "$S" "$CODE" 256 "" "--speculative-ngram" "--speculative-ngram --num-speculative-tokens 8"
F="$M/spec38m-f32.gguf"
single draft "$F" "Once upon a time" 64 "" \
  "--speculative-model $M/spec38m-q4_k_m.gguf --num-speculative-tokens 1" \
  "--speculative-model $M/spec38m-q4_k_m.gguf --num-speculative-tokens 2" \
  "--speculative-model $M/spec38m-q4_k_m.gguf --num-speculative-tokens 4" \
  "--speculative-model $M/spec38m-other-q4_k_m.gguf --num-speculative-tokens 2"

# Throughput against batch size: B requests of 16 prompt and OUT output tokens, max-num-seqs B,
# greedy, the Q4_K draft with k = 2 and speculation never turned off.
OUT=${OUT:-32}
for b in ${BATCHES:-1 2 4 8 16}; do
  for c in "" "--speculative-model $M/spec38m-q4_k_m.gguf --num-speculative-tokens 2 --speculative-disable-by-batch-size -1"; do
    "$B" bench throughput -m "$F" --dataset "fixed:16:$OUT" --num-prompts "$b" --max-num-seqs "$b" \
        --temperature 0 -t "$T" $c 2>/dev/null |
      python3 -c 'import json, sys; j = json.loads(sys.stdin.read())
print("batch %2d %-5s %7.1f output tok/s  %4d steps  acceptance %.2f  mean accepted length %.2f" % (
    j["num_prompts"], j["speculative"], j["output_tokens_per_s"], j["steps"], j["spec_acceptance_rate"],
    j["spec_mean_accepted_length"]))'
  done
done
