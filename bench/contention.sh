#!/usr/bin/env bash
# Single-stream decode with a competing CPU-bound process (issue 22, the contention table):
# decode B=1 tokens/s of pagellm (and, when given, an older pagellm binary and llama.cpp's
# llama-bench) while a busy loop is pinned to one core, and without it. Every repetition runs
# each system once, interleaved, so a shared machine's load hits all of them alike.
#
#   MODEL=$MODELS/llama110m-f16.gguf LLAMA_CPP=<llama.cpp dir> [PL_BEFORE=<old pagellm>] \
#       bash bench/contention.sh
#
# Environment:
#   MODEL      GGUF model (both systems load the same file)
#   PL         the pagellm binary (build/pagellm); PL_BEFORE an older one to compare (optional)
#   PL_OTHERS  more pagellm binaries to interleave, as "label=path label=path" (optional)
#   LLAMA_CPP  a llama.cpp build directory (llama-bench under build/bin); skipped when unset
#   THREADS    threads of every system (2); BUSY_CORE the core of the busy loop (1)
#   N          decode tokens per measurement (64); REPS interleaved repetitions (3)
#   MODES      "busy quiet" (default): with the busy loop, and without it
# Prints one line per measurement: mode system rep tokens/s; then the medians.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
MODEL=${MODEL:-${MODELS:-models}/llama110m-f16.gguf}
PL=${PL:-build/pagellm}
PL_BEFORE=${PL_BEFORE:-}
THREADS=${THREADS:-2}
BUSY_CORE=${BUSY_CORE:-1}
N=${N:-64}
REPS=${REPS:-3}
MODES=${MODES:-busy quiet}
[ -f "$MODEL" ] || { echo "contention: no model at $MODEL" >&2; exit 1; }
[ -x "$PL" ] || { echo "contention: no pagellm binary at $PL (build first)" >&2; exit 1; }
[ -z "$PL_BEFORE" ] || [ -x "$PL_BEFORE" ] || { echo "contention: PL_BEFORE=$PL_BEFORE is not executable" >&2; exit 1; }
PL_OTHERS=${PL_OTHERS:-}
for o in $PL_OTHERS; do
    case $o in *=*) ;; *) echo "contention: PL_OTHERS entry '$o' is not label=path" >&2; exit 1 ;; esac
    [ -x "${o#*=}" ] || { echo "contention: PL_OTHERS: ${o#*=} is not executable" >&2; exit 1; }
done
LLAMA_BENCH=
if [ -n "${LLAMA_CPP:-}" ]; then
    LLAMA_BENCH=$LLAMA_CPP/build/bin/llama-bench
    [ -x "$LLAMA_BENCH" ] || { echo "contention: no llama-bench under \$LLAMA_CPP/build/bin" >&2; exit 1; }
    echo "peer: llama.cpp $(git -C "$LLAMA_CPP" log -1 --format='%h, commit date %cd' 2>/dev/null || echo '(no git metadata)')"
fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"

BUSY=
cleanup() { [ -z "$BUSY" ] || { kill "$BUSY" 2>/dev/null; wait "$BUSY" 2>/dev/null; }; BUSY=; }
trap cleanup EXIT INT TERM

pl_tps() { # binary -> decode tokens/s
    "$1" bench model -m "$MODEL" -p 0 -n "$N" -b 1 --ctx 0 --reps 1 -t "$THREADS" --json 2>/dev/null |
        sed -n 's/.*"test":"decode".*"tokens_per_s":\([0-9.]*\).*/\1/p' | head -1
}
llama_tps() {
    "$LLAMA_BENCH" -m "$MODEL" -t "$THREADS" -p 0 -n "$N" -r 1 -o jsonl 2>/dev/null |
        sed -n 's/.*"avg_ts": *\([0-9.]*\).*/\1/p' | head -1
}

RESULTS=$(mktemp)
for mode in $MODES; do
    if [ "$mode" = busy ]; then
        taskset -c "$BUSY_CORE" sh -c 'while :; do :; done' &
        BUSY=$!
    fi
    for rep in $(seq 1 "$REPS"); do
        [ -z "$PL_BEFORE" ] || echo "$mode pagellm-before $rep $(pl_tps "$PL_BEFORE")" | tee -a "$RESULTS"
        for o in $PL_OTHERS; do echo "$mode pagellm-${o%%=*} $rep $(pl_tps "${o#*=}")" | tee -a "$RESULTS"; done
        echo "$mode pagellm $rep $(pl_tps "$PL")" | tee -a "$RESULTS"
        [ -z "$LLAMA_BENCH" ] || echo "$mode llama.cpp $rep $(llama_tps)" | tee -a "$RESULTS"
    done
    cleanup
done
echo "medians (tokens/s):"
for key in $(cut -d' ' -f1,2 "$RESULTS" | tr ' ' ':' | sort -u); do
    vals=$(awk -v k="${key/:/ }" '$1" "$2 == k && $4 != "" {print $4}' "$RESULTS" | sort -g)
    n=$(echo "$vals" | grep -c .)
    [ "$n" -gt 0 ] || continue
    med=$(echo "$vals" | awk -v n="$n" '{a[NR]=$1} END {printf "%.2f", n % 2 ? a[(n+1)/2] : (a[n/2]+a[n/2+1])/2}')
    printf '  %-6s %-16s %8s  (%d reps)\n' "${key%%:*}" "${key#*:}" "$med" "$n"
done
rm -f "$RESULTS"
