#!/usr/bin/env bash
# The cost of watching the KV cache (issue 19): engine step time while one client polls
# GET /v1/kv/blocks?tables=1 at 10 Hz (what the web page's KV view does, at 2.5x its rate),
# against no client and against a control client polling /metrics at 10 Hz (an HTTP client
# that asks for no KV picture). Same server, same workload, runs interleaved, medians printed.
#
#   bash bench/kv_poll.sh     # env: MODEL, KV_MEM, ROUNDS, N, DATASET, CONC, THREADS, PL
#
# Per run, from /metrics before and after (reading /metrics asks for no KV picture):
#   wall = pagellm_engine_step_seconds_total / steps       (includes time the OS gave others)
#   cpu  = pagellm_engine_step_cpu_seconds_total / steps   (the engine thread's own CPU time;
#          with THREADS=1 it does all the compute)
#   pub  = pagellm_kv_picture_seconds_total / steps        (publishing pictures, engine thread)
# The smallest model and a large pool make the worst case: a picture reads every block's struct
# (6 MB for 104,857 blocks) and a step of stories260K takes about a millisecond.
set -uo pipefail
cd "$(dirname "$0")/.."
PL=${PL:-build/pagellm}
MODEL=${MODEL:-../shared/models/stories260K.gguf}
KV_MEM=${KV_MEM:-1G}
ROUNDS=${ROUNDS:-5}
N=${N:-256}
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

counters() { # steps wall cpu pictures picture_seconds
    curl -s "$BASE/metrics" | awk '/^pagellm_engine_steps_total/ {s=$2}
        /^pagellm_engine_step_seconds_total/ {t=$2} /^pagellm_engine_step_cpu_seconds_total/ {c=$2}
        /^pagellm_kv_pictures_total/ {p=$2} /^pagellm_kv_picture_seconds_total/ {q=$2}
        END {print s, t, c, p, q}'
}
run() { # run LABEL
    read -r s0 t0 c0 p0 q0 < <(counters)
    "$PL" bench serve --base-url "$BASE" --model m --dataset "$DATASET" --num-prompts "$N" \
        --max-concurrency "$CONC" --vocab-size 512 --max-total 512 >"$TMP/bench.json" 2>&1 \
        || { cat "$TMP/bench.json"; exit 1; }
    read -r s1 t1 c1 p1 q1 < <(counters)
    python3 -c "
s=$s1-$s0; t=$t1-$t0; c=$c1-$c0; p=$p1-$p0; q=$q1-$q0
print('%-7s steps %5d  wall %.4f ms  cpu %.4f ms  pub %.4f ms  (%d pictures, %.0f us each)' %
      ('$1', s, 1e3*t/s, 1e3*c/s, 1e3*q/s, p, 1e6*q/p if p else 0))" | tee -a "$TMP/results"
}
poll() { # poll PATH: 10 Hz on one keep-alive connection, in the background
    python3 - "$BASE" "$1" >/dev/null 2>&1 <<'PY' &
import http.client, sys, time, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
t = time.monotonic()
while True:
    c.request("GET", sys.argv[2])
    c.getresponse().read()
    t += 0.1
    time.sleep(max(0, t - time.monotonic()))
PY
    POLLER=$!
    sleep 0.3
}
unpoll() { kill "$POLLER"; wait "$POLLER" 2>/dev/null; POLLER=""; }
for r in $(seq 1 "$ROUNDS"); do
    run none
    poll /v1/kv/blocks?tables=1; run kv10Hz; unpoll
    sleep 2.5 # the engine keeps publishing for 2 s after the last poll
    poll /metrics; run met10Hz; unpoll
done
python3 - "$TMP/results" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    rows.setdefault(f[0], []).append([float(x) for x in re.findall(r"(wall|cpu|pub) ([0-9.]+)", line) and
                                      [m[1] for m in re.findall(r"(wall|cpu|pub) ([0-9.]+)", line)]])
med = {k: [statistics.median(r[i] for r in v) for i in range(3)] for k, v in rows.items()}
base = med["none"]
for k in ("none", "kv10Hz", "met10Hz"):
    w, c, p = med[k]
    print("median %-7s wall %.4f ms (x%.3f)  cpu %.4f ms (x%.3f)  pub %.4f ms (%.2f%% of a step)" %
          (k, w, w / base[0], c, c / base[1], p, 100 * p / base[1]))
PY
