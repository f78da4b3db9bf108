#!/usr/bin/env bash
# The golden set: every output path of the engine, written to files that a refactoring must leave
# byte for byte the same (issue 32). Run it with the binary before and after a change, then diff:
#
#   bash scripts/golden.sh OUT_BEFORE BIN_BEFORE;  bash scripts/golden.sh OUT_AFTER BIN_AFTER
#   diff -r OUT_BEFORE OUT_AFTER && echo "golden set unchanged"
#
# BIN defaults to build/pagellm. Both runs must be on the same machine at the same kernel level
# (outputs depend on it; PAGELLM_ISA may pin it). Covers greedy, seeded sampling, n, best_of, beam,
# stop strings, logprobs and prompt logprobs, structured output (JSON schema, regex, choice,
# json_object), the paged / contiguous / vAttention layouts, every KV dtype, budgets that preempt
# by recompute and by swap, speculative decoding (n-gram and a draft model), and TP = 2 under
# mpirun when it is on the PATH. Each result file ends with what the run printed on stderr
# minus its timings, so refusals and error texts are compared too.
set -uo pipefail
OUT=${1:?usage: golden.sh OUT_DIR [PAGELLM_BINARY]}
BIN=${2:-$(dirname "$0")/../build/pagellm}
BIN=$(realpath "$BIN")
SHARED=${PL_SHARED_DIR:-$(dirname "$0")/../../shared}
M=$SHARED/models/stories260K.gguf
Q8=$SHARED/models/synth-tiny-q8_0.gguf
mkdir -p "$OUT"
IN=$OUT/requests.jsonl
cat >"$IN" <<'JL'
{"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0, "logprobs": 2}
{"prompt": "Lily went to the park", "max_tokens": 30, "temperature": 0.9, "top_p": 0.9, "seed": 7}
{"prompt": "Tom had a dog", "max_tokens": 24, "n": 3, "seed": 11, "temperature": 1.0}
{"prompt": "The sun was", "max_tokens": 20, "n": 1, "best_of": 3, "seed": 5, "temperature": 0.8}
{"prompt": "One day", "max_tokens": 12, "beam_width": 3}
{"prompt": "Once upon a time", "max_tokens": 60, "temperature": 0, "stop": ["park", "."]}
{"prompt": "Ben and Mia", "max_tokens": 16, "temperature": 0, "prompt_logprobs": 2}
{"prompt": "The cat", "max_tokens": 30, "temperature": 0.7, "seed": 3, "response_format": {"type": "json_object"}}
{"prompt": "A list:", "max_tokens": 40, "temperature": 0.7, "seed": 4, "guided_json": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"}}, "required": ["name", "age"]}}
{"prompt": "Say", "max_tokens": 12, "temperature": 0.9, "seed": 9, "guided_regex": "(yes|no), [0-9]{1,3} cats?\\."}
{"prompt": "Pick", "max_tokens": 8, "temperature": 0.9, "seed": 2, "guided_choice": ["red", "green", "blue"]}
{"prompt": "Once upon a time there was a little girl named Lily. She loved to play", "max_tokens": 120, "temperature": 0, "ignore_eos": true}
{"prompt": "Once upon a time there was a little girl named Lily. She loved to play", "max_tokens": 90, "n": 2, "seed": 1, "ignore_eos": true}
JL
GROUPLESS=$OUT/requests_single.jsonl   # the vAttention layout refuses groups: the rest
grep -v '"n": [2-9]\|"best_of"\|"beam_width"' "$IN" >"$GROUPLESS"

run() { # name, then generate's arguments
    local name=$1
    shift
    "$BIN" generate --threads 2 --output "$OUT/$name.jsonl" "$@" 2>"$OUT/$name.err"
    echo "exit $?" >>"$OUT/$name.jsonl"
    # stderr with what varies from run to run (times and rates) blanked
    sed -E 's/[0-9.]+ tok(ens)?\/s/<rate>/g; s/[0-9]+(\.[0-9]+)? ?(s|ms|us)\b/<time>/g' \
        "$OUT/$name.err" >>"$OUT/$name.jsonl"
    rm -f "$OUT/$name.err"
}
for dt in f16 f32 bf16; do
    run "paged_$dt" -m "$M" --input "$IN" --kv-cache-dtype "$dt"
done
for dt in q8_0 q4_0; do # quantized rows need head_dim % 32 == 0: the synth model
    run "paged_q8model_kv_$dt" -m "$Q8" --input "$IN" --kv-cache-dtype "$dt"
done
run paged_q8model -m "$Q8" --input "$IN"
run paged_block1 -m "$M" --input "$IN" --block-size 1
run paged_noprefix -m "$M" --input "$IN" --no-prefix-caching
run contiguous -m "$M" --input "$IN" --kv-layout contiguous
run contiguous_pow2 -m "$M" --input "$IN" --kv-layout contiguous --reserve pow2
run vattention -m "$M" --input "$GROUPLESS" --kv-layout vattention
run vattention_groups -m "$M" --input "$IN" --kv-layout vattention
run preempt_recompute -m "$M" --input "$IN" --kv-cache-memory 150K -v
run preempt_swap -m "$M" --input "$IN" --kv-cache-memory 150K --preemption-mode swap --swap-space 0.001 -v
run preempt_q8_0 -m "$Q8" --input "$IN" --kv-cache-memory 300K --kv-cache-dtype q8_0 -v
run spec_ngram -m "$M" --input "$IN" --speculative-ngram
run spec_draft -m "$M" --input "$IN" --speculative-model "$M" --num-speculative-tokens 3
run spec_preempt -m "$M" --input "$IN" --speculative-ngram --kv-cache-memory 150K -v
if command -v mpirun >/dev/null 2>&1; then
    MPI="mpirun --allow-run-as-root --oversubscribe -np 2"
    $MPI "$BIN" generate --threads 1 -m "$M" --input "$IN" --output "$OUT/tp2.jsonl" \
        --tensor-parallel-size 2 >/dev/null 2>&1
    echo "exit $?" >>"$OUT/tp2.jsonl"
else
    echo "golden.sh: no mpirun, the TP = 2 case is left out" >&2
fi
rm -f "$IN" "$GROUPLESS"
ls "$OUT" | wc -l | sed 's/$/ result files/'
