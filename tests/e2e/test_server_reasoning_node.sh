#!/usr/bin/env bash
# End-to-end: thinking and tool calls parsed out of the generated text (src/server/parse.c),
# through the official `openai` npm client (reasoning_clients.mjs) and the Anthropic one, once
# per family: the server runs Qwen3's, Ministral 3 Reasoning's, Gemma 4's and gpt-oss's chat
# templates (each one's reasoning parser and tool-call format are picked from the template's
# tags); stories260K writes neither by itself, so the tags are forced with structured_outputs
# regexes, and tool_choice "required" with the grammar the server builds from the tools, so the
# parsing path is the one a real answer of that family takes. Then the refusals: an
# unknown --reasoning-parser, a kwarg of the wrong type, a tool schema the automaton cannot
# compile; the server keeps serving. Under ASan (PL_SANITIZE) the server's log must stay clean.
set -u
. "$(dirname "$0")/server_lib.sh"
DIR=$(cd "$(dirname "$0")" && pwd)
TPL="$PL_SHARED_DIR/testdata/chat-templates-2026/Qwen-Qwen3-0.6B.jinja"

npm_ready
"$PL_BINARY" serve -m "$MODEL" --reasoning-parser nope >"$TMP/out" 2>&1
rc=$?
check "--reasoning-parser nope: exit 2 naming it (got $rc $(cat "$TMP/out"))" \
    test "$rc/$(grep -c "unknown parser 'nope'" "$TMP/out")" = 2/1

# no --reasoning-parser: each family's parser is picked from its template (the answers show it)
T26="$PL_SHARED_DIR/testdata/chat-templates-2026"
for fam in mistral3:mistralai-Ministral-3-14B-Reasoning-2512 gemma4:google-gemma-4-31B-it \
           gpt_oss:openai-gpt-oss-120b; do
    start_server --chat-template "$T26/${fam#*:}.jinja"
    node_run "reasoning ${fam%%:*}" "$DIR/reasoning_clients.mjs" "$BASE" "${fam%%:*}"
    stop_clean "reasoning ${fam%%:*}"
done
start_server --chat-template "$TPL"
node_run "reasoning qwen3" "$DIR/reasoning_clients.mjs" "$BASE" qwen3

http POST /v1/chat/completions -d '{"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"enable_thinking": "no"}}'
check "a kwarg of the wrong type: 400 naming it (got $STATUS $BODY)" \
    test "$STATUS/$(json_get 'j["error"]["param"] + str("enable_thinking" in j["error"]["message"])')" = 400/chat_template_kwargsTrue
http POST /v1/chat/completions -d '{"messages": [{"role": "user", "content": "x"}], "tool_choice": "required", "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"$ref": "#/nope"}}, "required": ["a"]}}}]}'
check "a tool schema the automaton cannot compile: 400 naming the tool (got $STATUS $BODY)" \
    test "$STATUS/$(json_get 'j["error"]["param"] + str("tools[0]" in j["error"]["message"])')" = 400/toolsTrue
http POST /v1/chat/completions -d '{"messages": [{"role": "user", "content": "x"}], "max_tokens": 2}'
check "still serving after the bad bodies: 200 (got $STATUS)" test "$STATUS" = 200
stop_clean reasoning
finish
