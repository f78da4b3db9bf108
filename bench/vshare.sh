#!/usr/bin/env bash
# Sharing in the vAttention layout (issue 37, --vattn-share) against paged sharing and against
# the vAttention layout without it (each sequence of a group its own request, as the Orca
# baselines run groups), on the paper's parallel-sampling and beam-search workloads (Figure 14:
# Alpaca-like requests, n or beam width 2, 4, 6), at the same KV memory. The model is a random
# one with head_dim 128 (made here with mkmodel, never committed), so a 4K page of a KV head
# holds 16 f16 tokens: vAttention's pages and the paged layout's blocks (16 tokens) have the
# same size and the counts compare one to one. Writes JSON lines into $OUT/sharing.jsonl
# (roomy: 64M, nothing preempted, the memory the workload takes; tight: 4M), prefix.jsonl (the
# shared-prefix workload of Figure 16: 80- and 341-token prefixes, 48 requests at 40 and 160
# requests/s, 8M; vattention hits the pages running requests hold and those finished ones left
# in its prefix cache) and machine.txt.
#
#   bash bench/vshare.sh
#
# Environment: PL (build/pagellm), OUT (bench/results/vshare), REPS (1), THREADS (1).
set -uo pipefail
cd "$(dirname "$0")/.."
PL=${PL:-build/pagellm}
OUT=${OUT:-bench/results/vshare}
REPS=${REPS:-1}
THREADS=${THREADS:-1}
VOCAB=${VOCAB:-../shared/models/stories260K.gguf}
[ -x "$PL" ] || { echo "vshare.sh: no pagellm binary at $PL (build first)" >&2; exit 1; }
mkdir -p "$OUT"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
MODEL=$TMP/hd128.gguf
"$PL" mkmodel "$MODEL" --vocab-from "$VOCAB" --dim 256 --layers 2 --heads 2 --kv-heads 1 \
    --ffn 512 >/dev/null || exit 1
{ date -u; uptime; git rev-parse --short HEAD; } >"$OUT/machine.txt"
: >"$OUT/sharing.jsonl"
for rep in $(seq 1 "$REPS"); do
  for mem in 64M 4M; do
    for width in "--n 2" "--n 4" "--n 6" "--beam-width 2" "--beam-width 4" "--beam-width 6"; do
      for layout in "--kv-layout paged" "--kv-layout vattention --vattn-share" \
                    "--kv-layout vattention"; do
        # shellcheck disable=SC2086
        "$PL" bench throughput -m "$MODEL" -t "$THREADS" --clock cpu --dataset alpaca \
            --num-prompts 32 --request-rate inf --kv-cache-memory $mem --max-model-len 1024 \
            $width $layout --seed "$rep" 2>"$TMP/err" >>"$OUT/sharing.jsonl" ||
          { echo "vshare.sh: failed: $mem $width $layout" >&2; cat "$TMP/err" >&2; }
      done
    done
  done
done
: >"$OUT/prefix.jsonl"
for rep in $(seq 1 "$REPS"); do
  for prefix in 80 341; do
    for rate in 40 160; do
      for layout in "--kv-layout paged" "--kv-layout vattention --vattn-share" \
                    "--kv-layout vattention"; do
        # shellcheck disable=SC2086
        "$PL" bench throughput -m "$MODEL" -t "$THREADS" --clock cpu --dataset alpaca \
            --shared-prefix $prefix --num-prompts 48 --request-rate $rate --kv-cache-memory 8M \
            --max-model-len 1024 $layout --seed "$rep" 2>"$TMP/err" >>"$OUT/prefix.jsonl" ||
          { echo "vshare.sh: failed: prefix $prefix rate $rate $layout" >&2; cat "$TMP/err" >&2; }
      done
    done
  done
done
uptime >>"$OUT/machine.txt"
