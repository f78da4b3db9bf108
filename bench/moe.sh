#!/usr/bin/env bash
# Issue 34's MoE speed rows in one run: pagellm, llama.cpp and (when built) ik_llama.cpp on the
# same GGUF files, 2 threads, every row's programs interleaved, REPS repetitions each, medians
# (docs/BENCHMARKS.md, "Mixtures of experts"). Prints the peers' commits, the machine, its load,
# then one markdown row per (model, test).
#   LLAMA_CPP=<dir> [IK_LLAMA_CPP=<dir>] bash bench/moe.sh MODEL.gguf...
# Tests: prefill 512 (llama-bench pp512), decode B=1 of N1 tokens from an empty context
# (tgN1), decode B=16 of N16 steps over 16-token contexts (llama-batched-bench's S_TG).
# REPS (3), N1 (32), N16 (32), PL (build/pagellm), OLD_PL (another pagellm binary, optional).
# SERVE=1 adds a serving row per model (issue 34's serving target): N_SERVE (32) ShareGPT-like
# requests sent at once to `pagellm serve` and to llama-server with the same KV memory (KV_MEM,
# 256M: pagellm's --kv-cache-memory, llama-server's -c in tokens of an f16 cache, one unified
# cache (-kvu) for -np N_SERVE slots), prompts/outputs clamped to MAX_IN (512) / MAX_OUT (128);
# output tokens/s of `pagellm bench serve`, REPS rounds, and whether every output was complete.
# SERVE_ONLY=1 skips the other rows.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/serve_lib.sh # kv_tokens, wait_http (they call $PL)
PL=$(realpath "${PL:-build/pagellm}")
L=${LLAMA_CPP:?set LLAMA_CPP to the llama.cpp checkout (binaries in build/bin)}/build/bin
IK=${IK_LLAMA_CPP:+$IK_LLAMA_CPP/build/bin}
REPS=${REPS:-3} N1=${N1:-32} N16=${N16:-32}
[ $# -ge 1 ] || { echo "usage: LLAMA_CPP=<dir> bash bench/moe.sh MODEL.gguf..." >&2; exit 2; }
commit() { git -C "$1/../.." log -1 --format='%h, commit date %cd' --date=short 2>/dev/null || echo '(no git metadata)'; }
echo "llama.cpp: $(commit "$L")${IK:+; ik_llama.cpp: $(commit "$IK")}"
echo "pagellm: $(git log -1 --format='%h, %cd' --date=short 2>/dev/null)${OLD_PL:+; old: $OLD_PL}"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; $(grep -o -w -E 'avx2|fma|f16c|avx_vnni|avx512f|avx512bw|avx512vl|avx512dq|avx512_vnni|avx512_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "load: $(uptime | sed 's/.*load/load/'); $(date -u +%FT%TZ)"

models=(); for f in "$@"; do models+=("$(realpath "$f")"); done
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cd "$work" # the peers write llama.log where they run

pl_run() { # binary file test batch args... -> tokens/s
  local b=$1 f=$2 test=$3 batch=$4; shift 4
  "$b" bench model -m "$f" -t 2 --reps 1 --json "$@" 2>/dev/null | python3 -c '
import json, sys
test, batch = sys.argv[1], int(sys.argv[2])
for l in sys.stdin:
    if l.startswith("{"):
        r = json.loads(l)
        if r["test"] == test and (test == "prefill" or r["batch"] == batch): print(r["tokens_per_s"])' "$test" "$batch"
}
lb_run() { # bin-dir file p n -> tokens/s of the one test llama-bench runs
  "$1/llama-bench" -m "$2" -t 2 -p "$3" -n "$4" -r 1 -o json 2>/dev/null | python3 -c '
import json, sys
for r in json.load(sys.stdin): print(r["avg_ts"])' # (ik_llama.cpp has no jsonl)
}
bb_run() { # bin-dir file -> S_TG tokens/s of 16 sequences, 16-token prompts, N16 steps
  # (the table: ik_llama.cpp prints it on stderr)
  "$1/llama-batched-bench" -m "$2" -t 2 -c 4096 -b 2048 -ub 512 -npp 16 -ntg "$N16" -npl 16 \
      2>&1 | awk -F'|' '$2 ~ /^ *16 *$/ && $4 ~ /^ *16 *$/ {gsub(/ /, "", $9); print $9}'
}
row() { # name, then one command per program: REPS interleaved rounds, medians
  local name=$1 i c; shift
  local -a cmds=("$@") vals=()
  for ((i = 0; i < REPS; i++)); do
    for c in "${!cmds[@]}"; do vals[c]="${vals[c]:-} $(eval "${cmds[c]}" 2>/dev/null || echo nan)"; done
  done
  python3 - "$name" "$npeers" "${vals[@]}" <<'PY'
import statistics, sys
name, npeers = sys.argv[1], int(sys.argv[2])
cols = [[float(v) for v in a.split() if v != "nan"] for a in sys.argv[3:]]
med = [statistics.median(c) if c else float("nan") for c in cols]
cells = [f"{m:.1f} ({min(c):.0f}-{max(c):.0f})" if c else "-" for m, c in zip(med, cols)]
peers = [m for m in med[-npeers:] if m == m]
ratio = f"{med[0] / max(peers):.2f}x" if peers else "-"
print(f"| {name} | " + " | ".join(cells) + f" | {ratio} |")
PY
}

npeers=1; [ -n "$IK" ] && npeers=2

KV_MEM=${KV_MEM:-256M} N_SERVE=${N_SERVE:-32} MAX_IN=${MAX_IN:-512} MAX_OUT=${MAX_OUT:-128}
srv_pid=""
stop_srv() { [ -z "$srv_pid" ] || { kill "$srv_pid" 2>/dev/null; wait "$srv_pid" 2>/dev/null; srv_pid=""; }; }
trap 'stop_srv; rm -rf "$work"' EXIT
sv_run() { # pagellm|llama file -> output tokens/s (with a * when some output was incomplete)
  local port=$((20000 + RANDOM % 20000)) tok ready
  if [ "$1" = pagellm ]; then
    "$PL" serve -m "$2" --host 127.0.0.1 --port "$port" --served-model-name m -t 2 \
        --kv-cache-memory "$KV_MEM" >"$work/serve.log" 2>&1 & srv_pid=$!
    ready="/v1/models"
  else
    read -r tok _ < <(kv_tokens "$2" "$KV_MEM")
    "$L/llama-server" -m "$2" --host 127.0.0.1 --port "$port" -t 2 -tb 2 -c "$tok" \
        -np "$N_SERVE" -kvu -cb >"$work/serve.log" 2>&1 & srv_pid=$!
    ready="/health"
  fi
  if wait_http "http://127.0.0.1:$port$ready" "$srv_pid"; then
    "$PL" bench serve --base-url "http://127.0.0.1:$port" --model m --dataset sharegpt \
        --num-prompts "$N_SERVE" --request-rate inf --seed 2 --tokenizer "$2" \
        --max-input "$MAX_IN" --max-output "$MAX_OUT" 2>/dev/null | tail -1 | python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
ok = d.get("errors", 1) == 0 and d.get("length_mismatches", 1) == 0
print(str(d["output_throughput"]) + ("" if ok else "*"))'
  fi
  stop_srv
}
hdr="| row | pagellm"; [ -n "${OLD_PL:-}" ] && hdr="$hdr | pagellm (old)"
hdr="$hdr | llama.cpp"; [ -n "$IK" ] && hdr="$hdr | ik_llama.cpp"
echo; echo "$hdr | pagellm / best peer |"
echo "| --- |$(echo "$hdr" | sed 's/[^|]//g; s/|/ ---: |/g')"
for f in "${models[@]}"; do
  n=$(basename "$f" .gguf)
  if [ "${SERVE:-0}" = 1 ]; then # columns: pagellm, llama.cpp (no ik_llama.cpp server row)
    vals=("" "")
    for ((i = 0; i < REPS; i++)); do
      vals[0]="${vals[0]} $(sv_run pagellm "$f" || echo nan)"
      vals[1]="${vals[1]} $(sv_run llama "$f" || echo nan)"
    done
    echo "| $n serve $N_SERVE x sharegpt, KV $KV_MEM | pagellm:${vals[0]} | llama-server:${vals[1]} | (* = an output incomplete) |"
  fi
  [ "${SERVE_ONLY:-0}" = 1 ] && continue
  for t in prefill512 decode1 decode16; do
    case $t in
      prefill512) p="prefill 0 -p 512 -n 0"; l="512 0" ;;
      decode1) p="decode 1 -p 0 -n $N1 -b 1 --ctx 0"; l="0 $N1" ;;
      decode16) p="decode 16 -p 0 -n $N16 -b 16 --ctx 16"; l="" ;;
    esac
    cmds=("pl_run $PL $f $p")
    [ -n "${OLD_PL:-}" ] && cmds+=("pl_run $OLD_PL $f $p")
    if [ -n "$l" ]; then cmds+=("lb_run $L $f $l"); [ -n "$IK" ] && cmds+=("lb_run $IK $f $l")
    else cmds+=("bb_run $L $f"); [ -n "$IK" ] && cmds+=("bb_run $IK $f"); fi
    row "$n $t" "${cmds[@]}"
  done
done
