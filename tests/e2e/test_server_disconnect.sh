#!/usr/bin/env bash
# End-to-end: 32 concurrent streaming clients, 8 of which hang up after a few chunks. Every other
# client gets its full greedy answer; afterwards /metrics shows no running or waiting request and
# 0 KV usage, and the abandoned requests stopped generating early (their blocks were freed).
set -u
. "$(dirname "$0")/server_lib.sh"

start_server --max-num-seqs 32
python3 - "$BASE" >"$TMP/py.out" 2>&1 <<'EOF'
import http.client, json, sys, threading, time, urllib.parse
base = urllib.parse.urlparse(sys.argv[1])
REF = (", there was a little girl named Lily. She loved to play outside in the park. One day, "
       "she saw a big, red ball. She wanted to play with it,")
N, MAX = 32, 400
results = [None] * N

def client(i):
    quitter = i % 4 == 3
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": MAX, "temperature": 0,
                       "ignore_eos": True, "stream": True})
    c = http.client.HTTPConnection(base.hostname, base.port, timeout=90)
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, r.status
    text, chunks, done = "", 0, False
    buf = b""
    while True:
        line = r.fp.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        if line == b"data: [DONE]":
            done = True
            break
        j = json.loads(line[6:])
        text += j["choices"][0]["text"]
        chunks += 1
        if quitter and chunks == 3:
            c.sock.shutdown(2)   # hang up mid-stream
            c.close()
            results[i] = ("quit", text)
            return
    c.close()
    results[i] = ("done" if done else "cut", text)

threads = [threading.Thread(target=client, args=(i,)) for i in range(N)]
t0 = time.time()
for t in threads: t.start()
for t in threads: t.join(100)
ok = True
full = [r for i, r in enumerate(results) if i % 4 != 3]
if not all(r and r[0] == "done" for r in full):
    print("FAIL: a full client did not get [DONE]:", [r[0] if r else None for r in full]); ok = False
texts = set(r[1] for r in full if r)
if len(texts) != 1 or not next(iter(texts)).startswith(REF):
    print("FAIL: full answers differ or miss the reference prefix"); ok = False
quit = [r for i, r in enumerate(results) if i % 4 == 3]
if not all(r and r[0] == "quit" for r in quit):
    print("FAIL: quitters", quit); ok = False
print("clients took %.1f s" % (time.time() - t0))
print("OK" if ok else "BAD")
EOF
cat "$TMP/py.out"
check "32 clients: full answers, quitters quit" grep -q '^OK$' "$TMP/py.out"
check "server alive" kill -0 "$SERVER_PID"

# Within a second everything is released: nothing running or waiting, no KV block in use.
for _ in $(seq 1 20); do
    http GET /metrics
    grep -q '^vllm:num_requests_running{model_name="stories"} 0$' "$TMP/body" &&
        grep -q '^vllm:gpu_cache_usage_perc{model_name="stories"} 0$' "$TMP/body" && break
    sleep 0.05
done
check "metrics: no running request" grep -q '^vllm:num_requests_running{model_name="stories"} 0$' "$TMP/body"
check "metrics: no waiting request" grep -q '^vllm:num_requests_waiting{model_name="stories"} 0$' "$TMP/body"
check "metrics: 0 KV usage" grep -q '^vllm:gpu_cache_usage_perc{model_name="stories"} 0$' "$TMP/body"
check "metrics: 0 KV blocks used" grep -q '^pagellm_kv_blocks_used{model_name="stories"} 0$' "$TMP/body"
# 24 full answers of 400 tokens; the 8 quitters were aborted long before their 400.
gen=$(grep '^vllm:generation_tokens_total' "$TMP/body" | awk '{print int($2)}')
check "abandoned requests stopped early (generated $gen tokens, 9600 <= n < 12800)" \
    test "$gen" -ge 9600 -a "$gen" -lt 12800
done_count=$(grep '^vllm:e2e_request_latency_seconds_count' "$TMP/body" | awk '{print int($2)}')
check "the 24 finished requests are in the latency histogram (got $done_count)" test "$done_count" -eq 24
http GET /health
check "health" test "$STATUS" = 200
stop_clean "the server"
finish
