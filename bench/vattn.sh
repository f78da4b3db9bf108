#!/usr/bin/env bash
# The vAttention layout against paged and contiguous (issue 12), bounded to ~20 minutes. Writes
# JSON lines into $OUT (default bench/results/vattn/): map.jsonl (page map / unmap cost),
# attention.jsonl (decode attention over context length and batch size, paged kernel vs the
# contiguous one), layouts.jsonl (the three layouts at
# the same KV memory, ShareGPT-like and Alpaca-like), ablation.jsonl (each technique off in
# turn, tight memory, a slot per request), slots.jsonl (the same with 8 slots and roomy memory,
# so slots are handed from request to request), machine.txt. Alternatives run interleaved inside each repetition, so a shared
# machine's load falls on all of them; compare ratios within a repetition.
#
#   MODEL=$MODELS/llama110m-q8_0.gguf bash bench/vattn.sh [parts]
#
# parts: any of map attention layouts ablation slots (default: all). Environment:
#   MODEL    GGUF model (MODELS: the folder holding the mkmodel outputs; see docs/BENCHMARKS.md)
#   PL       the pagellm binary (build/pagellm)
#   THREADS  threads (1: steadiest on a shared machine)
#   KV_MEM   KV budget of the layout runs (96M); ABL_MEM of the ablation (24M)
#   REPS     repetitions of the engine runs (2)
set -uo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-${MODELS:-models}/llama110m-q8_0.gguf}
PL=${PL:-build/pagellm}
OUT=${OUT:-bench/results/vattn}
THREADS=${THREADS:-1}
KV_MEM=${KV_MEM:-96M}
ABL_MEM=${ABL_MEM:-24M}
REPS=${REPS:-2}
PARTS=${*:-map attention layouts ablation slots}
mkdir -p "$OUT"
[ -x "$PL" ] || { echo "vattn.sh: no pagellm binary at $PL (build first)" >&2; exit 1; }

{
    echo "date: $(date -u +%FT%TZ)"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
    echo "kernel: $(uname -r); huge pages reserved: $(awk '/HugePages_Total/ {print $2}' /proc/meminfo)"
    echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "model: $(basename "$MODEL"); threads: $THREADS; kv budget: $KV_MEM (ablation $ABL_MEM)"
} >>"$OUT/machine.txt"

if [[ " $PARTS " == *" map "* ]]; then
    "$PL" bench vattn --only map --reps 9 >"$OUT/map.jsonl"
fi
if [[ " $PARTS " == *" attention "* ]]; then
    "$PL" bench vattn --only attention --reps 5 --seqs 1,8,32 --threads "$THREADS" >"$OUT/attention.jsonl"
fi

[ -f "$MODEL" ] || { echo "vattn.sh: no model at $MODEL" >&2; exit 1; }
tp() { "$PL" bench throughput -m "$MODEL" -t "$THREADS" --seed 1 "$@" >/dev/null; }

if [[ " $PARTS " == *" layouts "* ]]; then
    : >"$OUT/layouts.jsonl"
    for rep in $(seq "$REPS"); do
        for ds in sharegpt:12 alpaca:32; do
            d=${ds%%:*} n=${ds##*:}
            for lay in "paged" "contiguous" "vattention 4K" "vattention 64K"; do
                set -- $lay
                flags=(--kv-layout "$1")
                [ $# -gt 1 ] && flags+=(--kv-page-size "$2")
                tp --dataset "$d" --num-prompts "$n" --kv-cache-memory "$KV_MEM" "${flags[@]}" \
                   --label "$lay|$d|$rep" --output "$OUT/layouts.jsonl"
            done
        done
    done
fi

# techniques FILE PROMPTS KV_MEMORY [flags...]: every technique on, each one off, all off, for
# both page sizes, REPS times interleaved.
techniques() {
    local file=$1 n=$2 mem=$3
    shift 3
    : >"$OUT/$file"
    for rep in $(seq "$REPS"); do
        for page in 4K 64K; do
            for v in all no-overlap no-deferred-reclaim no-eager none; do
                case $v in
                all) f=() ;;
                none) f=(--vattn-no-overlap --vattn-no-deferred-reclaim --vattn-no-eager) ;;
                *) f=(--vattn-$v) ;;
                esac
                tp --dataset alpaca --num-prompts "$n" --kv-cache-memory "$mem" "$@" \
                   --kv-layout vattention --kv-page-size "$page" "${f[@]}" \
                   --label "$v|$page|$rep" --output "$OUT/$file"
            done
        done
    done
}
[[ " $PARTS " == *" ablation "* ]] && techniques ablation.jsonl 48 "$ABL_MEM"
[[ " $PARTS " == *" slots "* ]] && techniques slots.jsonl 32 "$KV_MEM" --max-num-seqs 8
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/machine.txt"
