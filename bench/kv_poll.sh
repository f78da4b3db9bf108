#!/usr/bin/env bash
# The cost of watching the KV cache (issue 19): mean engine step time while one client polls
# GET /v1/kv/blocks?tables=1 at 10 Hz (what the web page's KV view does, at 2.5x its rate)
# against no poller, same server, same workload, runs interleaved A B A B ...
#
#   bash bench/kv_poll.sh        # MODEL, KV_MEM, ROUNDS, N, DATASET, CONC, THREADS, PL to change
#
# Step time = pagellm_engine_step_seconds_total / pagellm_engine_steps_total over each run
# (/metrics, read before and after; reading /metrics asks for no KV picture). The smallest model
# and a large pool make the worst case: the per-step copy is one byte per block, and a step of
# stories260K is a fraction of a millisecond.
set -uo pipefail
cd "$(dirname "$0")/.."
PL=${PL:-build/pagellm}
MODEL=${MODEL:-../shared/models/stories260K.gguf}
KV_MEM=${KV_MEM:-1G}
ROUNDS=${ROUNDS:-3}
N=${N:-64}
DATASET=${DATASET:-fixed:64:128}
CONC=${CONC:-16}
THREADS=${THREADS:-1}
TMP=$(mktemp -d)
SERVER=""
POLLER=""
trap '[ -n "$POLLER" ] && kill $POLLER 2>/dev/null; [ -n "$SERVER" ] && kill $SERVER 2>/dev/null; rm -rf "$TMP"' EXIT

"$PL" serve -m "$MODEL" --port 0 --served-model-name m --kv-cache-memory "$KV_MEM" \
    --threads "$THREADS" >"$TMP/out" 2>"$TMP/err" &
SERVER=$!
for _ in $(seq 1 200); do
    BASE=$(sed -n 's|^serving .* on \(http://[^ ]*:[0-9][0-9]*\) .*|\1|p' "$TMP/out")
    [ -n "$BASE" ] && break
    sleep 0.05
done
[ -n "$BASE" ] || { cat "$TMP/out" "$TMP/err"; exit 1; }
grep '^KV cache' "$TMP/out"

counters() { # prints "steps seconds"
    curl -s "$BASE/metrics" | awk '/^pagellm_engine_steps_total/ {s=$2} /^pagellm_engine_step_seconds_total/ {t=$2} END {print s, t}'
}
run() { # run LABEL: one workload, prints the mean step time
    read -r s0 t0 < <(counters)
    "$PL" bench serve --base-url "$BASE" --model m --dataset "$DATASET" --num-prompts "$N" \
        --max-concurrency "$CONC" --vocab-size 512 --max-total 512 >"$TMP/bench.json" 2>&1 \
        || { cat "$TMP/bench.json"; exit 1; }
    read -r s1 t1 < <(counters)
    python3 -c "
s=$s1-$s0; t=$t1-$t0
print('%-8s steps %6d  step time %.4f ms' % ('$1', s, 1000*t/s))"
}
for r in $(seq 1 "$ROUNDS"); do
    run none
    python3 - "$BASE" >"$TMP/poll.out" 2>&1 <<'PY' &
import http.client, sys, time, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
n, t = 0, time.monotonic()
while True:
    c.request("GET", "/v1/kv/blocks?tables=1")
    r = c.getresponse(); r.read(); n += 1
    t += 0.1
    time.sleep(max(0, t - time.monotonic()))
PY
    POLLER=$!
    sleep 0.3
    run "10 Hz"
    kill $POLLER; wait $POLLER 2>/dev/null; POLLER=""
done
