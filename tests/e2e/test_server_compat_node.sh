#!/usr/bin/env bash
# End-to-end: OpenAI's Responses API (POST /v1/responses) and Anthropic's Messages API
# (POST /v1/messages, /v1/messages/count_tokens) through their official clients from npm, the
# `openai` and `@anthropic-ai/sdk` packages pinned by tests/e2e/package-lock.json
# (compat_clients.mjs: whole and streamed, with a tool, and the refusals); then with curl the
# pieces no client sends: llama-server's /apply-template and /tokenize with_pieces under the API
# key, x-api-key on the OpenAI routes, bad bodies in each route's error shape, the size limit,
# and the metrics of the new routes. Under ASan (PL_SANITIZE) the server's log must stay clean.
set -u
. "$(dirname "$0")/server_lib.sh"
DIR=$(cd "$(dirname "$0")" && pwd)
TPL="$PL_SHARED_DIR/testdata/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja"

npm_ready
check "@anthropic-ai/sdk is the locked 1.14.0" test \
    "$(cd "$DIR" && node -p 'require("./node_modules/@anthropic-ai/sdk/package.json").version')" = 1.14.0

start_server --api-key sekret --chat-template "$TPL" --max-request-bytes 65536
node_run compat "$DIR/compat_clients.mjs" "$BASE" sekret

K=(-H 'Authorization: Bearer sekret')
X=(-H 'x-api-key: sekret')
# llama-server's routes: /apply-template needs the key; /tokenize answers llama-server's shape.
http POST /apply-template -d '{"messages": [{"role": "user", "content": "Hi"}]}'
check "/apply-template without the key: 401 (got $STATUS)" test "$STATUS" = 401
http POST /apply-template "${X[@]}" -d '{"messages": [{"role": "user", "content": "Hi"}]}'
check "/apply-template: the template's text (got $STATUS $BODY)" \
    test "$(json_get 'j["prompt"].endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")')" = True
http POST /tokenize -d '{"content": "Hello world", "with_pieces": true}'
check "/tokenize with_pieces: ids and pieces (got $BODY)" \
    test "$(json_get '"".join(t["piece"] for t in j["tokens"]) + str(all(type(t["id"]) is int for t in j["tokens"]))')" = " Hello worldTrue"
http POST /tokenize -d '{"content": "Hello world"}'
check "/tokenize content: a list of ids (got $BODY)" test "$(json_get 'all(type(t) is int for t in j["tokens"])')" = True
ids=$(json_get 'j["tokens"]')
http POST /detokenize -d "{\"tokens\": $ids}"
check "/detokenize: content and prompt (got $BODY)" test "$(json_get 'j["content"] == j["prompt"] == "Hello world"')" = True
http POST /tokenize -d '{"content": 5}'
check "/tokenize content of the wrong type: 400 naming it" test "$STATUS/$(json_get 'j["error"]["param"]')" = 400/content

# tool_choice "required" is the chat route's: the answer is constrained to a call
http POST /v1/responses "${K[@]}" -d '{"input": "x", "tool_choice": "required", "tools": [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {"c": {"enum": ["a", "b"]}}, "required": ["c"]}}], "max_output_tokens": 200}'
check "/v1/responses tool_choice required: a function_call with an object (got $STATUS $BODY)" \
    test "$STATUS/$(json_get 'j["output"][0]["type"] + str(type(json.loads(j["output"][0]["arguments"])) is dict)')" = 200/function_callTrue
# x-api-key works on the OpenAI routes too; a wrong key is refused in each route's shape.
http POST /v1/responses "${X[@]}" -d '{"input": "Hi", "max_output_tokens": 2}'
check "/v1/responses with x-api-key: 200 (got $STATUS)" test "$STATUS" = 200
http POST /v1/responses -H 'x-api-key: nope' -d '{"input": "Hi"}'
check "/v1/responses with a wrong key: 401 OpenAI shape" test "$STATUS/$(json_get 'j["error"]["code"]')" = 401/invalid_api_key
http POST /v1/messages/count_tokens "${K[@]}" -d '{"model": "stories", "messages": [{"role": "user", "content": "Hi"}]}'
check "count_tokens with Authorization: 200 (got $STATUS $BODY)" test "$STATUS" = 200

# Bad bodies: a 400 naming the field, in the route's shape; the server goes on.
bad_body() { # bad_body PATH BODY WANT: WANT is "param" (OpenAI) or a word of Anthropic's message
    http POST "$1" "${K[@]}" -d "$2"
    if [ "$1" = /v1/responses ]; then
        check "$1 $2: 400 param $3 (got $STATUS $BODY)" test "$STATUS/$(json_get 'j["error"]["param"]')" = "400/$3"
    else
        check "$1 $2: 400 naming $3 (got $STATUS $BODY)" \
            test "$STATUS/$(json_get 'j["type"] + "/" + j["error"]["type"] + "/" + str("'"$3"'" in j["error"]["message"])')" = 400/error/invalid_request_error/True
    fi
}
bad_body /v1/responses "[1]" None
bad_body /v1/responses '{"input": 5}' input
bad_body /v1/responses '{"input": [5]}' input
bad_body /v1/responses '{"input": [{"type": "computer_call"}]}' input
bad_body /v1/responses '{"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}' input
bad_body /v1/responses '{"input": [{"role": "robot", "content": "x"}]}' input
bad_body /v1/responses '{"input": "x", "instructions": 3}' instructions
bad_body /v1/responses '{"input": "x", "temperature": "hot"}' temperature
bad_body /v1/responses '{"input": "x", "max_output_tokens": 0}' max_output_tokens
bad_body /v1/responses '{"input": "x", "tools": {}}' tools
bad_body /v1/responses '{"input": "x", "tool_choice": {"type": "mcp"}}' tool_choice
bad_body /v1/responses '{"input": "x", "text": {"format": {"type": "json_schema"}}}' text
bad_body /v1/responses '{"input": "x", "text": {"format": {"type": "json_schema", "schema": {"type": "object", "multipleOf": 2}}}}' text
bad_body /v1/responses '{"input": "x", "background": true}' background
bad_body /v1/responses '{"input": "x", "stream": "yes"}' stream
bad_body /v1/messages '{"model": "stories", "max_tokens": 4}' messages
bad_body /v1/messages '{"max_tokens": 4, "messages": [{"role": "user", "content": "x"}]}' model
bad_body /v1/messages '{"model": "stories", "max_tokens": "4", "messages": [{"role": "user", "content": "x"}]}' max_tokens
bad_body /v1/messages '{"model": "stories", "max_tokens": 4, "messages": [{"role": "system", "content": "x"}]}' 'messages[0].role'
bad_body /v1/messages '{"model": "stories", "max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "document"}]}]}' 'messages[0].content[0].type'
bad_body /v1/messages '{"model": "stories", "max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "tool_result"}]}]}' tool_use_id
bad_body /v1/messages '{"model": "stories", "max_tokens": 4, "messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": 3}]}]}' input
bad_body /v1/messages '{"model": "stories", "max_tokens": 4, "system": 7, "messages": [{"role": "user", "content": "x"}]}' system
bad_body /v1/messages '{"model": "stories", "max_tokens": 4, "messages": [{"role": "user", "content": "x"}], "tools": [{"name": "f"}]}' input_schema
bad_body /v1/messages '{"model": "stories", "max_tokens": 4, "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "web_search_20250305", "name": "w"}]}' 'tools[0].type'
bad_body /v1/messages '{"model": "stories", "max_tokens": 4, "messages": [{"role": "user", "content": "x"}], "top_k": 1.5}' top_k
bad_body /v1/messages '{"model": "stories", "max_tokens": 4, "messages": [{"role": "user", "content": "x"}], "thinking": {"type": "maybe"}}' thinking
bad_body /v1/messages/count_tokens '{"model": "stories", "messages": "x"}' messages
http POST /v1/messages "${X[@]}" -d '{"model": "nope", "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]}'
check "/v1/messages unknown model: 404 not_found_error (got $STATUS $BODY)" test "$STATUS/$(json_get 'j["error"]["type"]')" = 404/not_found_error
# Oversized: a prompt beyond the context is a 400 naming the field; a body beyond the limit a 413.
long=$(python3 -c 'print("hello " * 2000)')
http POST /v1/responses "${K[@]}" -d "{\"input\": \"$long\"}"
check "/v1/responses over the context: 400 input (got $STATUS)" test "$STATUS/$(json_get 'j["error"]["param"]')" = 400/input
http POST /v1/messages "${X[@]}" -d "{\"model\": \"stories\", \"max_tokens\": 2, \"messages\": [{\"role\": \"user\", \"content\": \"$long\"}]}"
check "/v1/messages over the context: 400 (got $STATUS)" test "$STATUS/$(json_get 'j["error"]["type"]')" = 400/invalid_request_error
python3 -c 'import json; print(json.dumps({"model": "stories", "max_tokens": 2, "messages": [{"role": "user", "content": "x" * 70000}]}))' >"$TMP/big.json"
http POST /v1/messages "${X[@]}" --data-binary @"$TMP/big.json"
check "/v1/messages beyond --max-request-bytes: 413 Anthropic shape (got $STATUS $BODY)" \
    test "$STATUS/$(json_get 'j["error"]["type"]')" = 413/request_too_large
# The metrics count the new routes' requests like the others.
http GET /metrics
check "metrics: finished requests counted (got $(grep -c finished_reason "$TMP/body"))" \
    test "$(grep -E '^vllm:request_success_total\{.*finished_reason="length"' "$TMP/body" | awk '{s += $2} END {print (s >= 8)}')" = 1
http POST /v1/messages "${X[@]}" -d '{"model": "stories", "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]}'
check "still serving after the bad bodies: 200 (got $STATUS)" test "$STATUS" = 200
stop_clean compat
finish
