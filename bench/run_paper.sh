#!/usr/bin/env bash
# Reproduce the PagedAttention paper's evaluation with pagellm (issue 6), bounded to minutes.
# Writes JSON lines into $OUT (default bench/results/): layouts.jsonl, serve.jsonl,
# block_size.jsonl, preempt.jsonl, sharing.jsonl, prefix.jsonl, machine.txt. Then run
# bench/plot.sh to draw the charts.
#
#   MODEL=$MODELS/llama110m-q8_0.gguf LLAMA_CPP=<llama.cpp dir> bash bench/run_paper.sh [parts]
#
# parts: any of layouts serve blocks preempt sharing prefix (default: all). Environment:
#   MODEL         GGUF model (required to exist; both systems load the same file)
#   LLAMA_CPP     the peer: a llama.cpp checkout built by ../shared/peer/build-llama-cpp.sh
#                 (binaries under build/bin); its commit date goes into machine.txt
#   LLAMA_SERVER  llama.cpp's llama-server binary ($LLAMA_CPP/build/bin/llama-server by
#                 default); the peer is skipped when neither is set
#   NP_LIST       llama-server slot counts swept, each with and without -kvu ("1 4 8 16"): the
#                 best setting whose outputs are all complete runs the rate sweep
#   PL            the pagellm binary (build/pagellm)
#   THREADS       threads of each system (1: robust on a shared machine)
#   KV_MEM        KV budget of every pagellm run (96M); llama-server gets the same in tokens
#   N_LAYOUT N_SERVE N_ABL   prompts per run (32, 24, 48)
#   RATES         request rates of the serving sweep ("0.1 0.2 0.4 0.8")
#   SERVE_MEM     KV budgets of the serving sweeps, one sweep each ("$KV_MEM")
# Servers bind 127.0.0.1 only and are killed on exit.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
MODEL=${MODEL:-${MODELS:-models}/llama110m-q8_0.gguf}  # MODELS: the folder holding the mkmodel outputs
PL=${PL:-build/pagellm}
OUT=${OUT:-bench/results}
THREADS=${THREADS:-1}
KV_MEM=${KV_MEM:-96M}
N_LAYOUT=${N_LAYOUT:-32}
N_SERVE=${N_SERVE:-24}
N_ABL=${N_ABL:-48}
RATES=${RATES:-"0.1 0.2 0.4 0.8"}
PARTS=${*:-layouts serve blocks preempt sharing prefix}
NP_LIST=${NP_LIST:-1 4 8 16}
if [ -z "${LLAMA_SERVER:-}" ] && [ -n "${LLAMA_CPP:-}" ]; then LLAMA_SERVER=$LLAMA_CPP/build/bin/llama-server; fi
if [ -n "${LLAMA_SERVER:-}" ] && [ ! -x "$LLAMA_SERVER" ]; then
    echo "run_paper: LLAMA_SERVER=$LLAMA_SERVER is not executable" >&2; exit 1
fi
mkdir -p "$OUT"
[ -f "$MODEL" ] || { echo "run_paper: no model at $MODEL" >&2; exit 1; }
[ -x "$PL" ] || { echo "run_paper: no pagellm binary at $PL (build first)" >&2; exit 1; }

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; PIDS=(); }
trap cleanup EXIT INT TERM

{
    echo "date: $(date -u +%FT%TZ)"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
    echo "memory: $(free -g | awk '/Mem:/ {print $2 " GiB"}')"
    echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "model: $MODEL; threads: $THREADS; kv budget: $KV_MEM"
    if [ -n "${LLAMA_SERVER:-}" ]; then # the peer's checkout holds its binary
        echo "peer: llama.cpp $(git -C "$(dirname "$LLAMA_SERVER")" log -1 --format='%h, commit date %cd' 2>/dev/null || echo '(commit unknown: no git checkout around the binary)')"
    fi
} >"$OUT/machine.txt"

tp() { "$PL" bench throughput -m "$MODEL" -t "$THREADS" --kv-cache-memory "$KV_MEM" "$@"; }

# KV tokens of the budget and the model length, from `pagellm inspect` (K and V, f16, per layer)
source bench/serve_lib.sh # kv_tokens, wait_http

# ---- 1. memory and throughput per KV layout (paper Fig. 2 and 12/13, offline) ----
if [[ " $PARTS " == *" layouts "* ]]; then
    : >"$OUT/layouts.jsonl"
    for ds in sharegpt alpaca; do
        tp --dataset $ds --num-prompts "$N_LAYOUT" --seed 1 --label "paged $ds" --output "$OUT/layouts.jsonl" >/dev/null
        for r in oracle pow2 max; do
            tp --dataset $ds --num-prompts "$N_LAYOUT" --seed 1 --kv-layout contiguous --reserve $r \
               --label "$r $ds" --output "$OUT/layouts.jsonl" >/dev/null
        done
    done
fi

# ---- 2. serving: normalized latency against request rate, pagellm and llama-server ----
serve_sweep() { # serve_sweep SYSTEM PORT
    for rate in $RATES; do
        "$PL" bench serve --base-url "http://127.0.0.1:$2" --model m --dataset sharegpt \
            --num-prompts "$N_SERVE" --request-rate "$rate" --seed 2 --max-total "$CTX" \
            --label "$1" --output "$OUT/serve_$MEM.jsonl" >/dev/null || echo "run_paper: $1 at $rate failed" >&2
    done
}
if [[ " $PARTS " == *" serve "* ]]; then
  for MEM in ${SERVE_MEM:-$KV_MEM}; do
    : >"$OUT/serve_$MEM.jsonl"
    read -r TOK CTX < <(kv_tokens "$MODEL" "$MEM")
    PORT=$((20000 + RANDOM % 20000))
    "$PL" serve -m "$MODEL" --host 127.0.0.1 --port "$PORT" --served-model-name m -t "$THREADS" \
        --kv-cache-memory "$MEM" >"$OUT/pagellm_serve_$MEM.log" 2>&1 &
    PIDS+=($!)
    wait_http "http://127.0.0.1:$PORT/v1/models" "${PIDS[-1]}" && serve_sweep pagellm "$PORT"
    cleanup
    if [ -n "${LLAMA_SERVER:-}" ]; then
        # Same GGUF, threads and KV tokens (-c). llama-server's best setting: every -np of NP_LIST
        # with and without a unified KV cache (-kvu), each given the whole dataset at once; a
        # setting counts only if its outputs are complete (no failed request and no output cut
        # short: bench serve's errors and length_mismatches both 0), and the one with the most
        # output tokens/s among those runs the rate sweep.
        best="" best_tps=0
        : >"$OUT/llama_settings_$MEM.jsonl"
        for np in $NP_LIST; do
            for kvu in -no-kvu -kvu; do
                PORT=$((20000 + RANDOM % 20000))
                "$LLAMA_SERVER" -m "$MODEL" --host 127.0.0.1 --port "$PORT" -t "$THREADS" -tb "$THREADS" \
                    -c "$TOK" -np "$np" $kvu -cb >"$OUT/llama_server_${MEM}_np${np}${kvu}.log" 2>&1 &
                PIDS+=($!)
                if wait_http "http://127.0.0.1:$PORT/health" "${PIDS[-1]}"; then
                    line=$("$PL" bench serve --base-url "http://127.0.0.1:$PORT" --model m --dataset sharegpt \
                        --num-prompts "$N_SERVE" --request-rate inf --seed 2 --max-total "$CTX" \
                        --label "llama.cpp -np $np $kvu" 2>/dev/null | tail -1)
                    [ -n "$line" ] && echo "$line" >>"$OUT/llama_settings_$MEM.jsonl"
                    read -r ok tps < <(echo "$line" | python3 -c '
import json, sys
try: d = json.loads(sys.stdin.read())
except ValueError: print(0, 0); sys.exit()
ok = d.get("errors", 1) == 0 and d.get("length_mismatches", 1) == 0 and d.get("completed", 0) > 0
print(int(ok), d.get("output_throughput", 0))')
                    echo "llama-server at $MEM: -c $TOK -np $np $kvu: $tps output tok/s, complete: $ok" >>"$OUT/machine.txt"
                    if [ "${ok:-0}" = 1 ] && python3 -c "import sys; sys.exit(not $tps > $best_tps)"; then
                        best="-np $np $kvu" best_tps=$tps
                    fi
                fi
                cleanup
            done
        done
        if [ -z "$best" ]; then
            echo "llama-server at $MEM: no setting of NP_LIST completed every output; no peer sweep" >>"$OUT/machine.txt"
        else
            echo "llama-server at $MEM: best complete setting -c $TOK $best ($best_tps output tok/s)" >>"$OUT/machine.txt"
            PORT=$((20000 + RANDOM % 20000))
            # shellcheck disable=SC2086 # $best is two flags
            "$LLAMA_SERVER" -m "$MODEL" --host 127.0.0.1 --port "$PORT" -t "$THREADS" -tb "$THREADS" \
                -c "$TOK" $best -cb >"$OUT/llama_server_$MEM.log" 2>&1 &
            PIDS+=($!)
            wait_http "http://127.0.0.1:$PORT/health" "${PIDS[-1]}" && serve_sweep "llama.cpp" "$PORT"
            cleanup
        fi
    fi
  done
fi

# ---- 3. ablations ----
if [[ " $PARTS " == *" blocks "* ]]; then # block size (paper Fig. 18b)
    : >"$OUT/block_size.jsonl"
    for bs in 1 8 16 32 64 128 256; do
        tp --dataset alpaca --num-prompts "$N_ABL" --seed 3 --block-size $bs \
           --label "block $bs" --output "$OUT/block_size.jsonl" >/dev/null
    done
fi
if [[ " $PARTS " == *" preempt "* ]]; then # recompute against swap (paper Fig. 19), a tight budget
    : >"$OUT/preempt.jsonl"
    for bs in 16 64 256; do
        tp --dataset sharegpt --num-prompts "$N_ABL" --seed 4 --block-size $bs --kv-cache-memory 24M \
           --max-output 256 --label "recompute $bs" --output "$OUT/preempt.jsonl" >/dev/null
        tp --dataset sharegpt --num-prompts "$N_ABL" --seed 4 --block-size $bs --kv-cache-memory 24M \
           --max-output 256 --preemption-mode swap --swap-space 256M --label "swap $bs" \
           --output "$OUT/preempt.jsonl" >/dev/null
    done
fi
if [[ " $PARTS " == *" sharing "* ]]; then # parallel sampling and beam search (paper Fig. 15)
    : >"$OUT/sharing.jsonl"
    for k in 2 4 6; do
        tp --dataset alpaca --num-prompts 16 --seed 5 --n $k --label "parallel $k" \
           --output "$OUT/sharing.jsonl" >/dev/null
        tp --dataset alpaca --num-prompts 16 --seed 5 --beam-width $k --label "beam $k" \
           --output "$OUT/sharing.jsonl" >/dev/null
    done
fi
if [[ " $PARTS " == *" prefix "* ]]; then # a shared 1000-token prefix (paper Fig. 16/17)
    : >"$OUT/prefix.jsonl"
    for pc in --enable-prefix-caching --no-prefix-caching; do
        PORT=$((20000 + RANDOM % 20000))
        "$PL" serve -m "$MODEL" --host 127.0.0.1 --port "$PORT" --served-model-name m -t "$THREADS" \
            --kv-cache-memory "$KV_MEM" $pc >"$OUT/prefix_serve.log" 2>&1 &
        PIDS+=($!)
        if wait_http "http://127.0.0.1:$PORT/v1/models" "${PIDS[-1]}"; then
            "$PL" bench serve --base-url "http://127.0.0.1:$PORT" --model m --dataset fixed:40:16 \
                --shared-prefix 1000 --num-prompts 12 --request-rate 0.5 --seed 6 \
                --label "prefix ${pc#--}" --output "$OUT/prefix.jsonl" >/dev/null
        fi
        cleanup
    done
fi
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/machine.txt"
echo "run_paper: results in $OUT" >&2
