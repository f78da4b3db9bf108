#!/usr/bin/env bash
# End-to-end: documented server features the other server tests do not reach: the API key on
# every route that needs it (and on none that does not), --max-logprobs, --no-prefix-caching,
# OpenAI details (/v1/models/{id}, model_not_found, cached_tokens, chat prompt_logprobs),
# --host ::1, and the mid-stream error event. Servers run with --threads 1 (fastest on a busy
# machine; the whole file takes a few seconds).
set -u
. "$(dirname "$0")/server_lib.sh"

# ---- API key: /v1/* needs it; /health, /version, /metrics, /tokenize, /detokenize are open ----
# (docs/SERVER.md "Security and lifecycle", as vLLM where only /v1 is protected)
start_server --threads 1 --api-key sekret --max-logprobs 3
check "startup says a key is required" grep -q '(API key required)' "$TMP/server.out"
COMP='{"prompt": "Once", "max_tokens": 2}'
CHAT='{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}'
for route in "GET /v1/models -" "POST /v1/completions $COMP" "POST /v1/chat/completions $CHAT" \
             "GET /v1/nothing -"; do
    method=${route%% *}
    rest=${route#* }
    path=${rest%% *}
    body=${rest#* }
    data=()
    [ "$body" != - ] && data=(-d "$body")
    http "$method" "$path" "${data[@]}"
    check "$method $path without a key: 401 (got $STATUS)" test "$STATUS" = 401
    check "$method $path without a key: invalid_api_key" test "$(json_get 'j["error"]["code"]')" = invalid_api_key
    http "$method" "$path" -H 'Authorization: Bearer sekre' "${data[@]}"
    check "$method $path with a wrong key: 401 (got $STATUS)" test "$STATUS" = 401
    want=200
    [ "$path" = /v1/nothing ] && want=404
    http "$method" "$path" -H 'Authorization: Bearer sekret' "${data[@]}"
    check "$method $path with the key: $want (got $STATUS)" test "$STATUS" = "$want"
done
for route in "GET /health" "GET /version" "GET /metrics" "POST /tokenize" "POST /detokenize"; do
    data=()
    case $route in
    *"/tokenize") data=(-d '{"prompt": "Once"}') ;;
    *"/detokenize") data=(-d '{"tokens": [1, 403]}') ;;
    esac
    http ${route} "${data[@]}"
    check "$route needs no key (got $STATUS)" test "$STATUS" = 200
done

# ---- --max-logprobs 3 bounds logprobs, top_logprobs and prompt_logprobs ----
K=(-H 'Authorization: Bearer sekret')
http POST /v1/completions "${K[@]}" -d '{"prompt": "Once", "max_tokens": 2, "logprobs": 3}'
check "logprobs 3 <= --max-logprobs 3: 200 (got $STATUS)" test "$STATUS" = 200
check "logprobs 3: 3 alternatives per token" test "$(json_get 'all(len(d) >= 3 for d in j["choices"][0]["logprobs"]["top_logprobs"])')" = True
for req in '/v1/completions logprobs {"prompt": "Once", "logprobs": 4}' \
           '/v1/completions prompt_logprobs {"prompt": "Once", "prompt_logprobs": 4}' \
           '/v1/chat/completions top_logprobs {"messages": [{"role": "user", "content": "Hi"}], "logprobs": true, "top_logprobs": 4}'; do
    set -- $req
    path=$1 param=$2
    body=${req#* * }
    http POST "$path" "${K[@]}" -d "$body"
    check "$param 4 > --max-logprobs 3: 400 (got $STATUS)" test "$STATUS" = 400
    check "$param 4: the error names $param" test "$(json_get 'j["error"]["param"]')" = "$param"
done
stop_server

# ---- --no-prefix-caching: the same 40-token prompt twice finds nothing cached ----
# (with --max-logprobs 0: no log-probabilities at all, rather than the default 20)
start_server --threads 1 --no-prefix-caching --max-logprobs 0
http POST /v1/completions -d '{"prompt": "Once", "max_tokens": 2, "logprobs": 1}'
check "logprobs 1 > --max-logprobs 0: 400 (got $STATUS)" test "$STATUS" = 400
check "startup says prefix caching off" grep -q 'prefix caching off' "$TMP/server.out"
P40=$(python3 -c 'print(list(range(10, 50)))')
for i in 1 2; do
    http POST /v1/completions -d "{\"prompt\": $P40, \"max_tokens\": 8, \"temperature\": 0, \"ignore_eos\": true}"
    check "no prefix caching: request $i 200" test "$STATUS" = 200
    check "no prefix caching: request $i has cached_tokens 0" test "$(json_get 'j["usage"]["prompt_tokens_details"]["cached_tokens"]')" = 0
    texts[$i]=$(json_get 'j["choices"][0]["text"]')
done
check "no prefix caching: same answer twice" test -n "${texts[1]}" -a "${texts[1]}" = "${texts[2]}"
http GET /metrics
for line in 'vllm:prefix_cache_hits_total{model_name="stories"} 0' \
            'pagellm_kv_blocks_cached{model_name="stories"} 0' \
            'vllm:prompt_tokens_total{model_name="stories"} 80'; do
    if grep -qxF -- "$line" "$TMP/body"; then ok; else bad "no prefix caching: want '$line', got '$(grep -F -- "${line% *} " "$TMP/body")'"; fi
done
stop_server

# ---- OpenAI details: /v1/models/{id}, 404 model_not_found, cached_tokens, chat prompt_logprobs ----
start_server --threads 1
http GET /v1/models/stories
check "/v1/models/stories: 200 (got $STATUS)" test "$STATUS" = 200
check "/v1/models/stories: the model object" test "$(json_get 'j["id"] == "stories" and j["object"] == "model" and j["max_model_len"] > 0')" = True
http GET /v1/models/gpt-9
check "/v1/models/gpt-9: 404 (got $STATUS)" test "$STATUS" = 404
check "/v1/models/gpt-9: OpenAI's error body" test "$(json_get 'j["error"]["code"] == "model_not_found" and j["error"]["type"] == "invalid_request_error" and "gpt-9" in j["error"]["message"]')" = True
for path in /v1/completions /v1/chat/completions; do
    http POST $path -d '{"model": "gpt-9", "prompt": "x", "messages": [{"role": "user", "content": "x"}]}'
    check "$path unknown model: 404 (got $STATUS)" test "$STATUS" = 404
    check "$path unknown model: model_not_found naming model" test "$(json_get 'j["error"]["code"] == "model_not_found" and j["error"]["param"] == "model"')" = True
done
P40=$(python3 -c 'print(list(range(10, 50)))')
for i in 1 2; do
    http POST /v1/completions -d "{\"prompt\": $P40, \"max_tokens\": 4, \"temperature\": 0}"
    cached[$i]=$(json_get 'j["usage"]["prompt_tokens_details"]["cached_tokens"]')
done
check "cached_tokens: 0 the first time (got ${cached[1]})" test "${cached[1]}" = 0
check "cached_tokens: 2 full blocks the second time (got ${cached[2]})" test "${cached[2]}" = 32
curl -sN --max-time 60 "$BASE/v1/completions" -d "{\"prompt\": $P40, \"max_tokens\": 2, \"stream\": true, \"stream_options\": {\"include_usage\": true}}" >"$TMP/sse_usage"
check "cached_tokens in the streamed usage" grep -q '"prompt_tokens_details": *{"cached_tokens": *32}' "$TMP/sse_usage"
http POST /v1/chat/completions -d '{"messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 2, "prompt_logprobs": 2}'
check "chat prompt_logprobs: 200 (got $STATUS)" test "$STATUS" = 200
check "chat prompt_logprobs: one entry per prompt token, the first null" test "$(json_get 'len(j["prompt_logprobs"]) == j["usage"]["prompt_tokens"] and j["prompt_logprobs"][0] is None and all(2 <= len(d) <= 3 and all("logprob" in v and "decoded_token" in v for v in d.values()) for d in j["prompt_logprobs"][1:])')" = True
http POST /v1/chat/completions -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}'
check "chat without prompt_logprobs: no field" test "$(json_get '"prompt_logprobs" in j')" = False
http POST /v1/chat/completions -d '{"messages": [{"role": "user", "content": "Hi"}], "stream": true, "prompt_logprobs": 1}'
check "stream with prompt_logprobs: 400 naming it (got $STATUS)" test "$STATUS $(json_get 'j["error"]["param"]')" = "400 prompt_logprobs"
# A client that goes away mid-stream counts as finished_reason "abort" (a soak test found it
# counted nowhere); the cache configuration is an info gauge. The client closes right after the
# first token's event, so the request is still decoding (a timed disconnect raced the model's
# whole 512-token context on a fast machine: 'length', not 'abort').
python3 - "$BASE" <<'PY'
import socket, sys, urllib.parse
u = urllib.parse.urlsplit(sys.argv[1])
body = b'{"prompt": "Once", "max_tokens": 2000, "ignore_eos": true, "stream": true}'
s = socket.create_connection((u.hostname, u.port), timeout=30)
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
got = b""
while b"data: {" not in got:
    chunk = s.recv(4096)
    if not chunk:
        sys.exit("the stream ended before its first event")
    got += chunk
s.close()
PY
ABORT='vllm:request_success_total{model_name="stories",finished_reason="abort"} 1'
for _ in $(seq 1 50); do
    http GET /metrics
    grep -qxF -- "$ABORT" "$TMP/body" && break
    sleep 0.1
done
check "disconnected stream counted as abort" grep -qxF -- "$ABORT" "$TMP/body"
check "vllm:cache_config_info" grep -q '^vllm:cache_config_info{block_size="16",cache_dtype="float16",enable_prefix_caching="True",.*} 1$' "$TMP/body"
stop_server

# ---- --host ::1 (IPv6 literal): the printed URL is http://[::1]:PORT and it serves ----
if python3 -c 'import socket; socket.socket(socket.AF_INET6).bind(("::1", 0))' 2>/dev/null; then
    start_server --threads 1 --host ::1
    check "--host ::1: URL http://[::1]:PORT ($BASE)" test "$BASE" = "http://[::1]:$PORT"
    http GET /health
    check "--host ::1: health 200 (got $STATUS)" test "$STATUS" = 200
    http POST /v1/completions -d '{"prompt": "Once upon a time", "max_tokens": 5, "temperature": 0}'
    check "--host ::1: completion" test "$(json_get 'j["choices"][0]["text"]')" = ", there was a little"
    stop_server
elif under_ci; then
    bad "--host ::1: no IPv6 loopback here, and under CI=$CI nothing may skip"
else
    echo "SKIP: --host ::1 (no IPv6 loopback here)"
fi

# ---- an engine error mid-stream: data: {"error": ...} before [DONE], the server lives on ----
# PAGELLM_FAIL_STEP=5 (a test hook in the engine) fails the 5th engine step: the stream's first
# tokens come, then the error event.
PAGELLM_FAIL_STEP=5 start_server --threads 1
curl -sN --max-time 60 "$BASE/v1/completions" -d '{"prompt": "Once upon a time", "max_tokens": 20, "temperature": 0, "stream": true}' >"$TMP/sse_err"
if python3 - "$TMP/sse_err" <<'EOF'
import json, sys
raw = open(sys.argv[1]).read()
events = [e[6:] for e in raw.split("\n\n") if e]
assert raw.endswith("data: [DONE]\n\n"), raw[-200:]
objs = [json.loads(e) for e in events[:-1]]
err = [o for o in objs if "error" in o]
assert len(err) == 1 and objs[-1] is err[0], objs
e = err[0]["error"]
assert set(e) == {"message", "type", "param", "code"} and "injected failure" in e["message"], e
chunks = [o for o in objs if "choices" in o]
text = "".join(c["choices"][0]["text"] for c in chunks)
assert text.startswith(", there was a") and len(text) < 60, text
assert chunks[-1]["choices"][0]["finish_reason"] == "error", chunks[-1]
EOF
then ok; else bad "mid-stream error event: $(head -c 600 "$TMP/sse_err")"; fi
http POST /v1/completions -d '{"prompt": "Once upon a time", "max_tokens": 5, "temperature": 0}'
check "after the error: the next request works" test "$(json_get 'j["choices"][0]["text"]')" = ", there was a little"
http GET /metrics
check "after the error: counted as an error" grep -qxF 'vllm:request_success_total{model_name="stories",finished_reason="error"} 1' "$TMP/body"
stop_clean "the server"
finish
