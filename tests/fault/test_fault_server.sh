#!/usr/bin/env bash
# Fault injection against the server (the -DPL_FAULT_INJECT=ON build; base/fault.h): once it
# listens, `pagellm serve` fails one allocation, mmap or thread start in N (N random per run and
# printed; PL_FAULT_SEED=S repeats a run). The soak client's mix (completions, chat, streaming,
# n > 1, beam, stop strings, shared prefixes, cancels, disconnects, invalid bodies) runs against
# a pool small enough to preempt and swap. Every request must end: a complete answer, a 4xx, or
# a 500/503 with an OpenAI error body (a stream: an error event, then [DONE]). Afterwards the
# server still runs, no block is held, nothing is running, waiting or swapped, and SIGTERM exits
# 0 with nothing leaked (LeakSanitizer, in the sanitized build).
set -u
. "$(dirname "$0")/../e2e/server_lib.sh"

refuse_knob FAULT_SECONDS # a shorter load: local debugging only
refuse_knob PL_FAULT_SEED # repeats one run's N: local debugging only
refuse_knob PL_FAULT_EVERY # the server's N or one call K, as chosen (base/fault.h): the same
refuse_knob PL_FAULT_ONLY
SECS=${FAULT_SECONDS:-20}
metric() { awk -v n="$1" '{ k = $1; sub(/\{.*/, "", k) } k == n { s += $NF; f = 1 } END { if (f) print s }' "$TMP/metrics"; }

start_server --threads 1 --kv-cache-memory 256K --block-size 4 --preemption-mode swap \
    --swap-space 1M --max-waiting 64
python3 "$(dirname "$0")/../e2e/soak_client.py" 127.0.0.1 "$PORT" --seconds "$SECS" --seed "${PL_FAULT_SEED:-$$}" \
    --faults >"$TMP/load.out" 2>&1
cat "$TMP/load.out"
grep '^fault injection' "$TMP/server.err"
check "every request ended (an answer or an error body)" grep -q '^OK$' "$TMP/load.out"
check "errors were injected and answered" grep -Eq "'error 50[03]'|'stream error'" "$TMP/load.out"
check "server alive after the load" kill -0 "$SERVER_PID"

# /metrics itself may get a 503 while allocations fail; ask until it answers and is idle.
idle=0
for _ in $(seq 1 300); do
    if [ "$(curl -s -o "$TMP/metrics" -w '%{http_code}' --max-time 30 "$BASE/metrics")" = 200 ] &&
        [ "$(metric pagellm_kv_blocks_used)" = 0 ] && [ "$(metric vllm:num_requests_running)" = 0 ] &&
        [ "$(metric vllm:num_requests_waiting)" = 0 ] && [ "$(metric vllm:num_requests_swapped)" = 0 ]; then
        idle=1
        break
    fi
    sleep 0.1
done
echo "metrics: blocks used $(metric pagellm_kv_blocks_used) of $(metric pagellm_kv_blocks_total)," \
    "running $(metric vllm:num_requests_running), waiting $(metric vllm:num_requests_waiting)," \
    "swapped $(metric vllm:num_requests_swapped), preemptions $(metric vllm:num_preemptions_total)"
check "idle afterwards: no block held, nothing running, waiting or swapped" test "$idle" = 1

kill -TERM "$SERVER_PID"
wait "$SERVER_PID"
rc=$?
SERVER_PID=""
grep '^fault injection' "$TMP/server.out"
check "SIGTERM: exit 0, nothing leaked (got $rc)" test "$rc" -eq 0
[ "$rc" -eq 0 ] || tail -40 "$TMP/server.err"
finish
