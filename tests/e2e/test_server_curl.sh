#!/usr/bin/env bash
# End-to-end test of `pagellm serve` with curl: every endpoint (streaming too), the greedy
# reference continuation of stories260K, every bad-input case with its status and OpenAI error
# body, auth, body limit, queue full, and a graceful SIGTERM.
set -u
. "$(dirname "$0")/server_lib.sh"

REF=", there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball. She wanted to play with it,"

start_server
check "startup prints the model" grep -q '^model: stories' "$TMP/server.out"
check "startup prints the KV pool" grep -Eq '^KV cache: [0-9]+ blocks of 16 tokens' "$TMP/server.out"

# ---- simple endpoints ----
http GET /health
check "health 200 (got $STATUS)" test "$STATUS" = 200
http GET /version
check "version" test "$(json_get 'j["version"]')" = "0.1.0"
http GET /v1/models
check "models: id" test "$(json_get 'j["data"][0]["id"]')" = stories
check "models: object list" test "$(json_get 'j["object"]')" = list
http POST /tokenize -d '{"prompt": "Once upon a time"}'
check "tokenize 200" test "$STATUS" = 200
IDS=$(json_get 'j["tokens"]' | tr -d ' ')
check "tokenize: BOS first and count" test "$(json_get 'j["tokens"][0] == 1 and j["count"] == len(j["tokens"]) and j["max_model_len"] > 0')" = True
http POST /detokenize -d "{\"tokens\": $IDS}"
check "detokenize round trip (special tokens kept, as vLLM)" test "$(json_get 'j["prompt"]')" = "<s> Once upon a time"
http POST /tokenize -d '{"messages": [{"role": "user", "content": "Hi"}], "return_token_strs": true}'
check "tokenize chat with token strings" test "$(json_get 'len(j["token_strs"]) == j["count"] > 3')" = True

# ---- completions ----
http POST /v1/completions -H 'Content-Type: application/json' \
    -d '{"model": "stories", "prompt": "Once upon a time", "max_tokens": 48, "temperature": 0}'
check "reference: 200" test "$STATUS" = 200
check "reference text" test "$(json_get 'j["choices"][0]["text"]')" = "$REF"
check "reference: shape" test "$(json_get 'j["object"] == "text_completion" and j["id"].startswith("cmpl-") and j["model"] == "stories" and j["choices"][0]["finish_reason"] == "length" and j["usage"] == {"prompt_tokens": 5, "completion_tokens": 48, "total_tokens": 53, "prompt_tokens_details": {"cached_tokens": 0}}')" = True

http POST /v1/completions -d "{\"prompt\": $IDS, \"max_tokens\": 48, \"temperature\": 0}"
check "prompt as token ids" test "$(json_get 'j["choices"][0]["text"]')" = "$REF"
http POST /v1/completions -d "{\"prompt\": [$IDS, $IDS], \"max_tokens\": 8, \"temperature\": 0}"
check "list of id lists: two choices" test "$(json_get '[c["index"] for c in j["choices"]] == [0, 1] and j["choices"][0]["text"] == j["choices"][1]["text"]')" = True
http POST /v1/completions -d '{"prompt": ["Once upon a time", "Lily"], "max_tokens": 4, "temperature": 0}'
check "list of strings: two choices" test "$(json_get 'len(j["choices"]) == 2 and j["usage"]["completion_tokens"] == 8')" = True

http POST /v1/completions -d '{"prompt": "Once upon a time", "max_tokens": 5, "temperature": 0, "logprobs": 2}'
check "logprobs: shape" test "$(json_get 'len(j["choices"][0]["logprobs"]["tokens"]) == 5 and all(len(d) >= 2 for d in j["choices"][0]["logprobs"]["top_logprobs"]) and j["choices"][0]["logprobs"]["text_offset"] == sorted(j["choices"][0]["logprobs"]["text_offset"]) and all(x <= 0 for x in j["choices"][0]["logprobs"]["token_logprobs"])')" = True
check "logprobs: tokens join to the text" test "$(json_get '"".join(j["choices"][0]["logprobs"]["tokens"]) == j["choices"][0]["text"]')" = True
http POST /v1/completions -d '{"prompt": "Once upon a time", "max_tokens": 3, "temperature": 0, "echo": true, "logprobs": 1}'
check "echo: text starts with the prompt" test "$(json_get 'j["choices"][0]["text"].startswith("Once upon a time, there")')" = True
check "echo: prompt tokens with a null first logprob" test "$(json_get 'len(j["choices"][0]["logprobs"]["tokens"]) == 8 and j["choices"][0]["logprobs"]["token_logprobs"][0] is None')" = True

http POST /v1/completions -d '{"prompt": "Once upon a time", "max_tokens": 48, "temperature": 0, "stop": ["Lily"]}'
check "stop string" test "$(json_get 'j["choices"][0]["text"] == ", there was a little girl named " and j["choices"][0]["finish_reason"] == "stop" and j["choices"][0]["stop_reason"] == "Lily"')" = True
# Seeded sampling: the same seed repeats, another seed differs. Each answer must be a 200 with
# 20 tokens of text, or two failures (empty texts) would compare equal.
seeded() { # seeded SEED [EXTRA_FIELDS]: sets SEEDED to the text, empty unless a 200 with 20 tokens
    http POST /v1/completions -d "{\"prompt\": \"Once upon a time\", \"max_tokens\": 20, \"temperature\": 1.0, \"seed\": $1${2:-}}"
    SEEDED=""
    [ "$STATUS" = 200 ] && [ "$(json_get 'j["usage"]["completion_tokens"]')" = 20 ] &&
        SEEDED=$(json_get 'j["choices"][0]["text"]')
}
seeded 42
T1=$SEEDED
check "seeded sampling: 200 with 20 tokens of text (got $STATUS)" test -n "$T1"
seeded 42 ', "user": "u", "an_unknown_field": [1]'
check "seeded sampling repeats (unknown fields ignored)" test -n "$SEEDED" -a "$SEEDED" = "$T1"
seeded 43
check "another seed gives another text" test -n "$SEEDED" -a "$SEEDED" != "$T1"
http POST /v1/completions -d '{"prompt": "Once upon a time", "max_tokens": 8, "n": 3, "temperature": 0.8, "seed": 1}'
check "n = 3" test "$(json_get 'sorted(c["index"] for c in j["choices"]) == [0, 1, 2]')" = True
check "server alive after n = 3" kill -0 "$SERVER_PID"

# ---- streaming completions ----
curl -sN --max-time 60 "$BASE/v1/completions" -d '{"prompt": "Once upon a time", "max_tokens": 48, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}}' >"$TMP/sse"
if python3 - "$TMP/sse" "$REF" <<'EOF'
import json, sys
raw = open(sys.argv[1]).read()
assert raw.endswith("data: [DONE]\n\n"), raw[-100:]
events = [e for e in raw.split("\n\n") if e]
assert all(e.startswith("data: ") for e in events)
chunks = [json.loads(e[6:]) for e in events[:-1]]
text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
assert text == sys.argv[2], text
assert all(c["object"] == "text_completion" and c["id"] == chunks[0]["id"] for c in chunks)
assert chunks[-2]["choices"][0]["finish_reason"] == "length"
assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 48
assert all(c["usage"] is None for c in chunks[:-1])
EOF
then ok; else bad "streaming completions"; fi
# A stop string spanning three tokens (' g' 'ir' 'l'), starting inside the first, streamed with
# n = 2, and one starting inside ' named' and ending inside ' Lily' kept with
# include_stop_str_in_output: no chunk may carry a byte past the expected text.
for args in '"stop": ["girl"], "n": 2|, there was a little |girl' \
            '"stop": ["amed Li"], "include_stop_str_in_output": true|, there was a little girl named Li|amed Li'; do
    IFS='|' read -r extra want reason <<<"$args"
    curl -sN --max-time 60 "$BASE/v1/completions" -d "{\"prompt\": \"Once upon a time\", \"max_tokens\": 48, \"temperature\": 0, \"stream\": true, $extra}" >"$TMP/sse"
    if python3 - "$TMP/sse" "$want" "$reason" <<'EOF'
import json, sys
raw = open(sys.argv[1]).read()
assert raw.endswith("data: [DONE]\n\n"), raw[-100:]
chunks = [json.loads(e[6:]) for e in raw.split("\n\n") if e and e != "data: [DONE]"]
texts, finish = {}, {}
for c in chunks:
    for ch in c["choices"]:
        texts[ch["index"]] = texts.get(ch["index"], "") + ch["text"]
        assert sys.argv[2].startswith(texts[ch["index"]]), texts
        if ch["finish_reason"]:
            finish[ch["index"]] = (ch["finish_reason"], ch.get("stop_reason"))
assert all(t == sys.argv[2] for t in texts.values()) and texts, texts
assert all(f == ("stop", sys.argv[3]) for f in finish.values()) and len(finish) == len(texts), finish
EOF
    then ok; else bad "streaming stop across tokens: $extra"; fi
done

# ---- chat ----
http POST /v1/chat/completions -d '{"model": "stories", "messages": [{"role": "system", "content": "You tell stories."}, {"role": "user", "content": "Tell me a story"}], "max_tokens": 16, "temperature": 0}'
check "chat: 200" test "$STATUS" = 200
check "chat: shape" test "$(json_get 'j["object"] == "chat.completion" and j["id"].startswith("chatcmpl-") and j["choices"][0]["message"]["role"] == "assistant" and len(j["choices"][0]["message"]["content"]) > 0 and j["usage"]["completion_tokens"] == 16')" = True
http POST /v1/chat/completions -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "logprobs": true, "top_logprobs": 2}'
check "chat logprobs" test "$(json_get 'len(j["choices"][0]["logprobs"]["content"]) == 4 and len(j["choices"][0]["logprobs"]["content"][0]["top_logprobs"]) == 2')" = True
curl -sN --max-time 60 "$BASE/v1/chat/completions" -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 10, "stream": true}' >"$TMP/sse"
if python3 - "$TMP/sse" <<'EOF'
import json, sys
raw = open(sys.argv[1]).read()
assert raw.endswith("data: [DONE]\n\n")
chunks = [json.loads(e[6:]) for e in raw.split("\n\n") if e and e != "data: [DONE]"]
assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
assert all(c["object"] == "chat.completion.chunk" for c in chunks)
assert chunks[-1]["choices"][0]["finish_reason"] == "length"
assert len("".join(c["choices"][0]["delta"].get("content", "") for c in chunks)) > 0
EOF
then ok; else bad "streaming chat"; fi

# ---- metrics: every series present; the idle gauges are 0 (whole lines: "0.5" is not "0") ----
http GET /metrics
for m in 'vllm:num_requests_running{model_name="stories"} 0' 'vllm:num_requests_waiting{model_name="stories"} 0' \
         'vllm:num_requests_swapped{model_name="stories"} 0' 'vllm:gpu_cache_usage_perc{model_name="stories"} 0' \
         'pagellm_kv_cache_usage_perc{model_name="stories"} 0' 'pagellm_kv_blocks_used{model_name="stories"} 0' \
         'vllm:spec_decode_num_draft_tokens_total{model_name="stories"} 0' \
         'vllm:spec_decode_num_accepted_tokens_total{model_name="stories"} 0'; do
    if grep -qxF -- "$m" "$TMP/body"; then ok; else bad "metrics lack the line '$m'"; fi
done
for m in vllm:prefix_cache_queries_total vllm:prefix_cache_hits_total vllm:num_preemptions_total \
         vllm:prompt_tokens_total vllm:generation_tokens_total 'vllm:time_to_first_token_seconds_bucket' \
         vllm:time_per_output_token_seconds_count vllm:e2e_request_latency_seconds_sum; do
    if grep -q -- "^$m{" "$TMP/body"; then ok; else bad "metrics lack '$m'"; fi
done
check "metrics: latency histogram counted requests" test "$(grep '^vllm:e2e_request_latency_seconds_count' "$TMP/body" | awk '{print ($2 >= 10)}')" = 1

# ---- bad input: status and OpenAI error body ----
expect_error() { # expect_error STATUS PARAM_OR_- DESCRIPTION METHOD PATH [curl args]
    local want=$1 param=$2 what=$3
    shift 3
    http "$@"
    check "$what: status $want (got $STATUS)" test "$STATUS" = "$want"
    local shape
    shape=$(json_get 'set(j["error"]) == {"message", "type", "param", "code"} and len(j["error"]["message"]) > 0 and (j["error"]["param"] or "-") == "'"$param"'"')
    check "$what: error body ($BODY)" test "$shape" = True
}
C=/v1/completions
expect_error 400 - "malformed JSON" POST $C -d '{"prompt": "x",'
expect_error 400 - "not an object" POST $C -d '[1]'
printf '{"prompt": "\xff\xfe"}' >"$TMP/bad_utf8"
expect_error 400 - "invalid UTF-8" POST $C --data-binary "@$TMP/bad_utf8"
expect_error 400 prompt "missing prompt" POST $C -d '{}'
expect_error 400 prompt "prompt of the wrong type" POST $C -d '{"prompt": {"a": 1}}'
expect_error 400 max_tokens "max_tokens as a string" POST $C -d '{"prompt": "x", "max_tokens": "9"}'
expect_error 400 n "n = 0" POST $C -d '{"prompt": "x", "n": 0}'
expect_error 400 best_of "best_of < n" POST $C -d '{"prompt": "x", "n": 3, "best_of": 2}'
expect_error 400 max_tokens "max_tokens = 0" POST $C -d '{"prompt": "x", "max_tokens": 0}'
expect_error 400 temperature "temperature = 3" POST $C -d '{"prompt": "x", "temperature": 3}'
expect_error 400 top_p "top_p = 0" POST $C -d '{"prompt": "x", "top_p": 0}'
expect_error 400 logprobs "logprobs = 50" POST $C -d '{"prompt": "x", "logprobs": 50}'
expect_error 404 model "unknown model" POST $C -d '{"prompt": "x", "model": "gpt-9"}'
expect_error 400 prompt "token id out of range" POST $C -d '{"prompt": [1, 99999]}'
LONG=$(python3 -c 'print([5] * 3000)')
expect_error 400 prompt "prompt longer than the model" POST $C -d "{\"prompt\": $LONG}"
expect_error 400 max_tokens "prompt + max_tokens too long" POST $C -d '{"prompt": "x", "max_tokens": 4000}'
expect_error 400 messages "empty messages" POST /v1/chat/completions -d '{"messages": []}'
expect_error 400 messages "unknown role" POST /v1/chat/completions -d '{"messages": [{"role": "robot", "content": "x"}]}'
expect_error 404 - "unknown route" GET /v1/nothing
expect_error 405 - "wrong method" GET /v1/completions
expect_error 400 tokens "detokenize bad id" POST /detokenize -d '{"tokens": [1, -4]}'
http GET /health
check "health after every bad request" test "$STATUS" = 200
check "server alive" kill -0 "$SERVER_PID"

# ---- graceful stop: SIGTERM ----
kill -TERM "$SERVER_PID"
wait "$SERVER_PID"
rc=$?
SERVER_PID=""
check "SIGTERM when idle: exit 0 (got $rc)" test "$rc" -eq 0
check "SIGTERM: stopped message" grep -q '^stopped' "$TMP/server.out"
# In flight at SIGTERM: a stream and a whole request finish with every token within the grace
# (long, so a slow machine still makes it), while a new request on an open connection gets 503.
# --threads 1: one thread is fastest on a busy machine, so the drill takes ~1 s.
sigterm_drill() { # sigterm_drill grace|expire
    python3 "$(dirname "$0")/shutdown_client.py" "$BASE" "$SERVER_PID" "$TMP/server.out" "$1" >"$TMP/drill.out" 2>&1
    # a client that failed before its SIGTERM must not leave the test waiting forever
    ( sleep 150 && kill -KILL "$SERVER_PID" ) >/dev/null 2>&1 &
    local watchdog=$!
    wait "$SERVER_PID"
    rc=$?
    pkill -P "$watchdog" 2>/dev/null; kill "$watchdog" 2>/dev/null
    SERVER_PID=""
    cat "$TMP/drill.out" | grep -v '^OK$'
    check "SIGTERM drill ($1)" grep -q '^OK$' "$TMP/drill.out"
    check "SIGTERM drill ($1): exit 0 (got $rc)" test "$rc" -eq 0
}
start_server --threads 1 --shutdown-timeout 120
sigterm_drill grace
# A grace that expires: what is left is aborted (the stream ends with "abort" and [DONE]).
start_server --shutdown-timeout 0.3
t0=$(date +%s.%N)
sigterm_drill expire
check "SIGTERM drill (expire): stopped within a few seconds" \
    python3 -c "import sys; sys.exit(not float('$(date +%s.%N)') - $t0 < 8)"

# ---- metrics values after a known sequence (a fresh server, one sequence at a time) ----
# Twice the same 40-token prompt (ids, no BOS), 8 greedy tokens each: the second finds the
# prompt's 2 full blocks in the prefix cache. Then a 2000-token stream runs while a second request
# waits (--max-num-seqs 1), and the gauges must describe that one running sequence.
start_server --threads 1 --max-num-seqs 1
P40=$(python3 -c 'print(list(range(10, 50)))')
for i in 1 2; do
    http POST /v1/completions -d "{\"prompt\": $P40, \"max_tokens\": 8, \"temperature\": 0, \"ignore_eos\": true}"
    check "metrics sequence: request $i 200" test "$STATUS" = 200
done
http GET /metrics
cp "$TMP/body" "$TMP/metrics_idle"
metric_is() { # metric_is FILE SERIES VALUE: the line "SERIES VALUE" exactly (SERIES without labels gets model_name)
    local series=$2
    case $series in *'{'*) ;; *) series="$series{model_name=\"stories\"}" ;; esac
    if grep -qxF -- "$series $3" "$1"; then ok; else bad "metrics: want '$series $3', got '$(grep -F -- "$series " "$1")'"; fi
}
for kv in vllm:num_requests_running=0 vllm:num_requests_waiting=0 vllm:num_requests_swapped=0 \
          vllm:gpu_cache_usage_perc=0 pagellm_kv_cache_usage_perc=0 pagellm_kv_blocks_total=3276 \
          pagellm_kv_blocks_used=0 pagellm_kv_blocks_cached=2 pagellm_kv_cache_waste_perc=0 \
          pagellm_kv_window_blocks_total=0 pagellm_kv_window_blocks_used=0 \
          vllm:prefix_cache_queries_total=80 vllm:prefix_cache_hits_total=32 \
          vllm:num_preemptions_total=0 vllm:prompt_tokens_total=48 vllm:generation_tokens_total=16 \
          pagellm_engine_steps_total=16 vllm:time_to_first_token_seconds_count=2 \
          vllm:time_per_output_token_seconds_count=14 vllm:e2e_request_latency_seconds_count=2 \
          'vllm:time_to_first_token_seconds_bucket{model_name="stories",le="+Inf"}=2' \
          'vllm:request_success_total{model_name="stories",finished_reason="length"}=2' \
          'vllm:request_success_total{model_name="stories",finished_reason="stop"}=0' \
          'vllm:request_success_total{model_name="stories",finished_reason="abort"}=0' \
          vllm:kv_cache_usage_perc=0 vllm:cpu_cache_usage_perc=0 pagellm_swap_out_total=0 \
          vllm:request_prompt_tokens_count=2 vllm:request_prompt_tokens_sum=80 \
          'vllm:request_prompt_tokens_bucket{model_name="stories",le="20"}=0' \
          'vllm:request_prompt_tokens_bucket{model_name="stories",le="50"}=2' \
          vllm:request_generation_tokens_sum=16 vllm:request_params_n_count=2 \
          'vllm:request_params_n_bucket{model_name="stories",le="1"}=2' \
          vllm:request_params_max_tokens_sum=16 \
          vllm:iteration_tokens_total_count=16 vllm:iteration_tokens_total_sum=64 \
          'vllm:iteration_tokens_total_bucket{model_name="stories",le="32"}=15' \
          vllm:request_queue_time_seconds_count=2 vllm:request_prefill_time_seconds_count=2 \
          vllm:request_decode_time_seconds_count=2 vllm:request_inference_time_seconds_count=2; do
    metric_is "$TMP/metrics_idle" "${kv%=*}" "${kv##*=}"
done
# While the stream runs, one sequence holds n = 2 + g - 1 tokens (prompt + g generated, the last
# not yet computed; g = generated - the 16 above): used = ceil(n / 16) blocks, usage = used /
# total, waste = 1 - n / (16 used), one step per token. Python, so the scrapes are quick enough
# to see the 2000-token stream while the second request waits.
if python3 - "$BASE" <<'EOF'
import http.client, json, re, sys, threading, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
def conn(): return http.client.HTTPConnection(u.hostname, u.port, timeout=60)
a = conn()
a.request("POST", "/v1/completions", json.dumps({"prompt": "Once", "max_tokens": 2000, "ignore_eos": True, "temperature": 0, "stream": True}))
ra = a.getresponse()
ra.readline()
def second():
    c = conn()
    c.request("POST", "/v1/completions", json.dumps({"prompt": "Once", "max_tokens": 4}))
    c.getresponse().read()
t = threading.Thread(target=second)
t.start()
mc, seen = conn(), None
for _ in range(2000):
    mc.request("GET", "/metrics")
    m = {k: float(v) for k, v in re.findall(r'^(\S+)\{model_name="stories"\} (\S+)$', mc.getresponse().read().decode(), re.M)}
    if m["vllm:num_requests_waiting"] == 1:
        seen = m
        break
ra.read()
t.join()
assert seen, "never saw the second request waiting"
m = seen
assert m["vllm:num_requests_running"] == 1, m
g = m["vllm:generation_tokens_total"] - 16
n = 2 + g - 1
used, total = m["pagellm_kv_blocks_used"], m["pagellm_kv_blocks_total"]
assert 1 <= g < 2000 and used == -(-n // 16) and total == 3276, (g, m)
assert m["vllm:gpu_cache_usage_perc"] == m["pagellm_kv_cache_usage_perc"] and abs(m["vllm:gpu_cache_usage_perc"] - used / total) < 1e-12, m
assert abs(m["pagellm_kv_cache_waste_perc"] - (1 - n / (16 * used))) < 1e-12, (n, m)
assert m["pagellm_engine_steps_total"] == 16 + g and m["vllm:prompt_tokens_total"] == 48 + 2, m
EOF
then ok; else bad "metrics while one sequence runs and one waits"; fi
stop_server

# ---- auth, body limit, queue full ----
PAGELLM_API_KEY=sekret start_server --max-request-bytes 4K --max-num-seqs 1 --max-waiting 1
http GET /v1/models
check "no key: 401 (got $STATUS)" test "$STATUS" = 401
check "no key: error body" test "$(json_get 'j["error"]["code"]')" = invalid_api_key
http GET /v1/models -H 'Authorization: Bearer wrong'
check "wrong key: 401" test "$STATUS" = 401
http POST /v1/completions -H 'Authorization: Bearer sekret' -d '{"prompt": "Once upon a time", "max_tokens": 48, "temperature": 0}'
check "right key: reference" test "$(json_get 'j["choices"][0]["text"]')" = "$REF"
http GET /health
check "health needs no key" test "$STATUS" = 200
python3 -c 'import json; print(json.dumps({"prompt": "x" * 10000}))' >"$TMP/big"
http POST /v1/completions -H 'Authorization: Bearer sekret' --data-binary "@$TMP/big"
check "body over the limit: 413 (got $STATUS)" test "$STATUS" = 413
check "413 error body" test "$(json_get 'j["error"]["code"]')" = request_too_large
# One running (max-num-seqs 1), one waiting (max-waiting 1): of 6 at once some are refused.
LONGREQ='{"prompt": "Once", "max_tokens": 1000, "ignore_eos": true}'
pids=""
for i in 1 2 3 4 5 6; do
    curl -s -D "$TMP/h$i" -o /dev/null -w '%{http_code}' --max-time 60 -H 'Authorization: Bearer sekret' \
        "$BASE/v1/completions" -d "$LONGREQ" >"$TMP/s$i" &
    pids="$pids $!"
done
wait $pids
codes=$(cat "$TMP"/s? | sort | uniq -c | tr '\n' ' ')
check "queue full: of 6 at once, some 503 and some 200 ($codes)" test "$(cat "$TMP"/s? | grep -c 503)" -ge 1 -a "$(cat "$TMP"/s? | grep -c 200)" -ge 1
for i in 1 2 3 4 5 6; do
    if grep -q 503 "$TMP/s$i"; then
        check "queue full: Retry-After" grep -qi '^Retry-After: ' "$TMP/h$i"
        break
    fi
done
http GET /health
check "health after the overload" test "$STATUS" = 200
kill -INT "$SERVER_PID"
wait "$SERVER_PID"
rc=$?
SERVER_PID=""
check "SIGINT: exit 0 (got $rc)" test "$rc" -eq 0
if grep -Eq 'AddressSanitizer|runtime error|LeakSanitizer' "$TMP/server.err"; then
    bad "sanitizer report"; cat "$TMP/server.err"
else ok; fi
finish
