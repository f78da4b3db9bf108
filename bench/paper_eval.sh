#!/usr/bin/env bash
# The PagedAttention paper's experiments that bench/run_paper.sh leaves out (issue 37): the
# chatbot (Figure 17), parallel sampling and beam search (Figure 14), shared prefixes
# (Figure 16) as normalized latency against request rate, in process (`pagellm bench
# throughput --request-rate`), pagellm's paged layout beside the Orca baselines at the same KV
# memory; and swap against recompute per block (Figure 19a, `pagellm bench preempt`).
#
#   bash bench/paper_eval.sh [parts]      then   python3 bench/paper_eval.py $OUT [CHART_DIR]
#
# parts: any of chat sampling prefix preempt cross (default: all). Every repetition runs every rate
# and configuration in turn (interleaved: a slow moment of the shared machine hits them alike);
# repetition r draws workload seed r, the same for every configuration. Latencies are on the
# engine thread's CPU time (--clock cpu, -t 1): the other developers' load on this shared machine
# stretched wall-clock latencies up to 20x, and not alike for all runs. JSON lines go to
# $OUT/{chat,sampling,prefix,preempt}.jsonl (appended), the machine and `uptime` (at the start,
# after each repetition, at the end) to $OUT/machine.txt. Environment:
#   MODEL      the scheduler experiments' model (../shared/models/stories260K.gguf: its steps
#              cost little, so the KV memory, not the kernels, decides how many requests run)
#   PRE_MODEL  bench preempt's and the cross-check's model (a 110M F16 Llama: `pagellm mkmodel $PRE_MODEL --vocab-from
#              ../shared/testdata/vocab/ggml-vocab-llama-spm.gguf --shape 110m --type f16`)
#   PL         the pagellm binary (build/pagellm);   OUT  (bench/results/eval)
#   REPS       repetitions (3);   THREADS  (1)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
MODEL=${MODEL:-../shared/models/stories260K.gguf}
PRE_MODEL=${PRE_MODEL:-}
PL=${PL:-build/pagellm}
OUT=${OUT:-bench/results/eval}
REPS=${REPS:-3}
THREADS=${THREADS:-1}
PARTS=${*:-chat sampling prefix preempt cross}
mkdir -p "$OUT"
[ -x "$PL" ] || { echo "paper_eval: no pagellm binary at $PL (build first)" >&2; exit 1; }
[ -f "$MODEL" ] || { echo "paper_eval: no model at $MODEL" >&2; exit 1; }

{
    echo "date: $(date -u +%FT%TZ)"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
    echo "model: $MODEL; preempt model: ${PRE_MODEL:-none}; threads: $THREADS; repetitions: $REPS; parts: $PARTS"
    echo "uptime at start: $(uptime)"
} >>"$OUT/machine.txt"

# note TEXT: progress on stderr, with the load, also kept in machine.txt
note() { echo "paper_eval: $1, $(uptime)" | tee -a "$OUT/machine.txt" >&2; }

# The layouts compared: pagellm's paged cache and the paper's three Orca reservations.
ORCA=(oracle pow2 max)
layout_flags() {
    case $1 in
        paged) ;;
        paged-nocache) echo "--no-prefix-caching" ;;
        *) echo "--kv-layout contiguous --reserve $1" ;;
    esac
}

# run FILE LABEL REP [bench throughput flags...]: one run, its line appended to FILE
run() {
    local file=$1 label=$2 rep=$3
    shift 3
    # shellcheck disable=SC2046
    "$PL" bench throughput -m "$MODEL" -t "$THREADS" --seed "$rep" --label "$label" --clock cpu \
        --output "$OUT/$file" "$@" >/dev/null 2>>"$OUT/errors.log" ||
        echo "paper_eval: failed: $label $* (see $OUT/errors.log)" >&2
}

# ---- chatbot (Figure 17): conversations, each turn's prompt the history + the new user turn ----
if [[ " $PARTS " == *" chat "* ]]; then
    CHAT_RATES=${CHAT_RATES:-"6 12 18 24"}   # conversations per second
    for rep in $(seq 1 "$REPS"); do
        for rate in $CHAT_RATES; do
            for cfg in paged paged-nocache "${ORCA[@]}"; do
                # shellcheck disable=SC2046
                run chat.jsonl "$cfg" "$rep" --dataset chat --num-prompts 16 --request-rate "$rate" \
                    --kv-cache-memory 4M $(layout_flags "$cfg")
            done
        done
        note "chat repetition $rep done"
    done
fi

# ---- parallel sampling and beam search (Figure 14), Alpaca-like ----
if [[ " $PARTS " == *" sampling "* ]]; then
    for rep in $(seq 1 "$REPS"); do
        for w in 2 4 6; do
            # rates around the paged layout's capacity at this width (fewer requests/s for wider groups)
            case $w in 2) rates="60 120 180 240" ;; 4) rates="35 70 105 140" ;; 6) rates="20 40 60 80" ;; esac
            for rate in $rates; do
                for kind in n beam-width; do
                    for cfg in paged "${ORCA[@]}"; do
                        # shellcheck disable=SC2046
                        run sampling.jsonl "$cfg" "$rep" --dataset alpaca --num-prompts 32 \
                            --request-rate "$rate" --kv-cache-memory 8M --"$kind" "$w" $(layout_flags "$cfg")
                    done
                done
            done
        done
        note "sampling repetition $rep done"
    done
fi

# ---- shared prefix (Figure 16): one-shot (80 tokens) and five-shot (341) prefixes ----
if [[ " $PARTS " == *" prefix "* ]]; then
    for rep in $(seq 1 "$REPS"); do
        for pre in 80 341; do
            case $pre in 80) rates="75 150 225 300" ;; *) rates="40 80 120 160" ;; esac
            for rate in $rates; do
                for cfg in paged paged-nocache oracle; do
                    # shellcheck disable=SC2046
                    run prefix.jsonl "$cfg" "$rep" --dataset alpaca --shared-prefix "$pre" \
                        --num-prompts 48 --request-rate "$rate" --kv-cache-memory 2M $(layout_flags "$cfg")
                done
            done
        done
        note "prefix repetition $rep done"
    done
fi

# ---- swap against recompute per block (Figure 19a) ----
if [[ " $PARTS " == *" preempt "* ]]; then
    [ -f "$PRE_MODEL" ] || { echo "paper_eval: preempt needs PRE_MODEL (a 110M F16 model)" >&2; exit 1; }
    "$PL" bench preempt -m "$PRE_MODEL" -t "$THREADS" --context 256 --reps "$((REPS + 2))" --clock cpu \
        >>"$OUT/preempt.jsonl" 2>>"$OUT/errors.log" || echo "paper_eval: bench preempt failed" >&2
fi
# ---- cross-check where batching pays (the 110M model): parallel sampling n = 4, all at once ----
if [[ " $PARTS " == *" cross "* ]]; then
    [ -f "$PRE_MODEL" ] || { echo "paper_eval: cross needs PRE_MODEL (a 110M F16 model)" >&2; exit 1; }
    for rep in $(seq 1 "$REPS"); do
        for cfg in paged oracle max; do
            # shellcheck disable=SC2046
            MODEL=$PRE_MODEL run cross_110m.jsonl "$cfg" "$rep" --dataset alpaca --num-prompts 16 \
                --n 4 --request-rate inf --kv-cache-memory 24M $(layout_flags "$cfg")
        done
        note "cross repetition $rep done"
    done
fi
echo "uptime at the end: $(uptime)" >>"$OUT/machine.txt"
