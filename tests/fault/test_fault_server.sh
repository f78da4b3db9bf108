#!/usr/bin/env bash
# Fault injection against the server (the -DPL_FAULT_INJECT=ON build; base/fault.h): once it
# listens, `pagellm serve` fails one allocation, mmap or thread start in N (N random per run and
# printed; PL_FAULT_SEED=S repeats a run). The soak client's mix (completions, chat, streaming,
# n > 1, beam, stop strings, shared prefixes, cancels, disconnects, invalid bodies) runs against
# a pool small enough to preempt and swap. Every request must end: a complete answer, a 4xx, or
# a 500/503 with an OpenAI error body (a stream: an error event, then [DONE]); a request that
# hangs is a failure, at least one fault must have reached a client, and at least 5 % of the
# valid requests must be answered (about 9 % are with the smallest N, 50; 70 % with N = 389). Afterwards the server still runs, no block is held, nothing
# is running, waiting or swapped; then SIGUSR1 stops the failures and the server must serve
# again: /health 200 and a greedy completion with the reference text (a server stuck answering
# 500 fails here). SIGTERM exits 0 with nothing leaked (LeakSanitizer, in the sanitized build).
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
    --faults --min-answered 0.05 >"$TMP/load.out" 2>&1
cat "$TMP/load.out"
grep '^fault injection' "$TMP/server.err"
check "every request ended (an answer or an error body), none hung, 5 % answered" grep -q '^OK$' "$TMP/load.out"
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

# Failures off (SIGUSR1, cli/cmd_serve.c): whatever the faults left behind must not keep the
# server from answering correctly.
kill -USR1 "$SERVER_PID"
for _ in $(seq 1 100); do grep -q '^fault injection: disarmed' "$TMP/server.out" && break; sleep 0.05; done
check "faults disarmed (SIGUSR1)" grep -q '^fault injection: disarmed' "$TMP/server.out"
grep '^fault injection: disarmed' "$TMP/server.out"
http GET /health
check "health 200 after the faults (got $STATUS)" test "$STATUS" = 200
http POST /v1/completions -d '{"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0}'
check "reference text after the faults (got $STATUS: $BODY)" \
    test "$(json_get 'j["choices"][0]["text"].startswith(", there was a little girl named Lily")')" = True
http POST /v1/chat/completions -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "stream": true}'
check "a streamed chat completion after the faults (got $STATUS)" \
    grep -q '"finish_reason":"length"' "$TMP/body"

kill -TERM "$SERVER_PID"
wait "$SERVER_PID"
rc=$?
SERVER_PID=""
grep '^fault injection' "$TMP/server.out"
check "SIGTERM: exit 0, nothing leaked (got $rc)" test "$rc" -eq 0
[ "$rc" -eq 0 ] || tail -40 "$TMP/server.err"
finish
