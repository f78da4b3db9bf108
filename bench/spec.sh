#!/usr/bin/env bash
# Speculative decoding (issue 15, docs/BENCHMARKS.md "Speculative decoding"): `bench throughput`
# with and without speculation, single stream (max-num-seqs 1) and against batch size, one
# thread, best of ROUNDS (3); BATCHES ("2 4 8 16") are the batch sizes.
#   MODELS=/dir bash bench/spec.sh [BUILD_DIR]
# MODELS receives spec38m-{f32,q4_k_m}.gguf (seed 7: the same random weights, the second quantized
# to Q4_K) and spec38m-other-q4_k_m.gguf (seed 8: a draft that never agrees), made if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
B="$build/pagellm"
M=${MODELS:?set MODELS}
R=${ROUNDS:-3}
S=../shared/models/stories260K.gguf
mk() { [ -f "$M/$1" ] || "$B" mkmodel "$M/$1" --vocab-from "$S" --dim 768 --layers 6 --heads 12 \
         --kv-heads 4 --ffn 2048 --type "$2" --seed "$3" >/dev/null; }
mk spec38m-f32.gguf f32 7
mk spec38m-q4_k_m.gguf q4_k_m 7
mk spec38m-other-q4_k_m.gguf q4_k_m 8
F="$M/spec38m-f32.gguf"

# The workload: story prompts whose reference answers repeat (a ShareGPT-style file written here;
# the answer's length, ~90 tokens, sets the output length), greedy. (a) stories260K with n-gram
# proposals; (b) the F32 target with its Q4_K draft.
DS="$M/spec-stories.json"
python3 - "$DS" <<'PY'
import json, sys
names = ["Lily", "Tom", "Sam", "Mia", "Ben", "Anna", "Max", "Sue"]
things = ["a red ball", "a big tree", "a little dog", "a shiny box"]
conv = []
for i in range(32):
    n, t = names[i % 8], things[i % 4]
    q = f"Once upon a time, there was a child named {n}. {n} liked {t}. Every day, {n}"
    a = " ".join(f"{n} played with {t} in the park. {n} was happy." for _ in range(4))
    conv.append({"conversations": [{"from": "human", "value": q}, {"from": "gpt", "value": a}]})
json.dump(conv, open(sys.argv[1], "w"))
PY
# And one prompt, "Once upon a time", on which the random target and its Q4_K copy agree more.
ONCE="$M/spec-once.json"
python3 - "$ONCE" <<'PY'
import json, sys
a = " ".join(["Lily played with a red ball in the park."] * 6)
json.dump([{"conversations": [{"from": "human", "value": "Once upon a time"},
                              {"from": "gpt", "value": a}]}] * 16, open(sys.argv[1], "w"))
PY
# Best of ROUNDS runs of one `bench throughput` configuration, as one line: output tokens per
# second of the engine thread's CPU time (all the work with --threads 1; what a shared machine's
# load barely moves) and, for reference, per second of wall time.
best_run() {
  local what=$1; shift
  for ((r = 0; r < R; r++)); do "$B" bench throughput "$@" 2>/dev/null; done |
    python3 -c 'import json, sys
js = [json.loads(l) for l in sys.stdin if l.startswith("{")]
j = max(js, key=lambda j: j["output_tokens"] / j["step_cpu_s"])
print("batch %2d %-14s %-5s k %d %8.1f tok/cpu-s %8.1f tok/s  %5d steps  acceptance %.2f  mean accepted length %.2f" % (
    j["max_num_seqs"], sys.argv[1], j["speculative"], j["num_speculative_tokens"],
    j["output_tokens"] / j["step_cpu_s"], j["output_tokens_per_s"], j["steps"],
    j["spec_acceptance_rate"], j["spec_mean_accepted_length"]))' "$what"
}
# And code-like prompts (assignments that repeat with small changes).
CODE="$M/spec-code.json"
python3 - "$CODE" <<'PY'
import json, sys
conv = []
for i in range(8):
    v = "abcdefgh"[i]
    q = "; ".join(f"{v}{j} = {v}{j - 1} + {j}" for j in range(1, 8)) + ";"
    a = " ".join(f"{v}{j} = {v}{j - 1} + {j};" for j in range(8, 30))
    conv.append({"conversations": [{"from": "human", "value": q}, {"from": "gpt", "value": a}]})
json.dump(conv, open(sys.argv[1], "w"))
PY
D="--speculative-model $M/spec38m-q4_k_m.gguf"
N="--speculative-ngram"
OFF="--speculative-disable-by-batch-size -1"
# Single stream: the proposal counts, and a draft of other random weights (never agrees).
for ds in "$DS" "$CODE"; do
  for c in "" "$N --num-speculative-tokens 2" "$N --num-speculative-tokens 4" "$N --num-speculative-tokens 8"; do
    best_run "ngram-$(basename "$ds" .json | sed 's/spec-//')" -m "$S" --dataset "$ds" --num-prompts 8 \
        --max-num-seqs 1 --temperature 0 -t 1 $c
  done
done
for ds in "$ONCE" "$DS"; do
  for c in "" "$D --num-speculative-tokens 1" "$D --num-speculative-tokens 2" "$D --num-speculative-tokens 3" \
           "--speculative-model $M/spec38m-other-q4_k_m.gguf --num-speculative-tokens 2"; do
    best_run "draft-$(basename "$ds" .json | sed 's/spec-//')" -m "$F" --dataset "$ds" --num-prompts 2 \
        --max-num-seqs 1 --temperature 0 -t 1 $c
  done
done
# Against batch size (the cut-off off).
for b in ${BATCHES:-2 4 8 16}; do
  for c in "" "$N --num-speculative-tokens 4 $OFF"; do
    best_run ngram -m "$S" --dataset "$DS" --num-prompts 32 --max-num-seqs "$b" --temperature 0 -t 1 $c
  done
  for ds in "$ONCE" "$DS"; do
    for c in "" "$D --num-speculative-tokens 2 $OFF"; do
      best_run "draft-$(basename "$ds" .json | sed 's/spec-//')" -m "$F" --dataset "$ds" --num-prompts "$b" \
          --max-num-seqs "$b" --temperature 0 -t 1 $c
    done
  done
done
