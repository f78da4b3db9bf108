#!/usr/bin/env bash
# End-to-end: Jinja chat templates (docs/SERVER.md "Chat templates").
# CLI: `pagellm chat-template --template F --context C.json` prints exactly what Python's jinja2
# rendered for one case of every template of $PL_SHARED_DIR/testdata/chat-templates (and fails
# with exit 1 and the template's error on stderr where it raised); `-m MODEL` uses the GGUF's
# tokenizer.chat_template (set on a copy of stories260K by gguf_patch.py) or ChatML without one.
# Server: a GGUF whose template raises gives the client a 400 invalid_request_error naming the
# problem and keeps serving; /v1/chat/render shows the rendering; tools, an assistant's tool
# calls and a tool's answer reach a tool-aware template (--chat-template Qwen 2.5); a template
# that does not compile still serves completions and answers chats with a 400.
set -u
. "$(dirname "$0")/server_lib.sh"
TPL="$PL_SHARED_DIR/testdata/chat-templates"

# ---- CLI against the reference renderings ----
python3 - "$PL_BINARY" "$TPL" "$TMP" <<'PY' || bad "CLI renderings (see above)"
import json, subprocess, sys
binary, tpl, tmp = sys.argv[1:4]
cases = json.load(open(tpl + "/expected.json"))["cases"]
# one case per template (the conformance test runs all of them in-process) and every error case
pick = [c for c in cases if c["case"] == "multi-turn" or "error" in c]
failed = 0
for c in pick:
    ctx = f"{tmp}/ctx.json"
    json.dump(c["context"], open(ctx, "w"))
    r = subprocess.run([binary, "chat-template", "--template", f"{tpl}/{c['template']}",
                        "--context", ctx, "--date", "2024-07-26"], capture_output=True)
    if "error" in c:
        ok = r.returncode == 1 and c["error"].encode() in r.stderr and r.stdout == b""
    else:
        ok = r.returncode == 0 and r.stdout == c["output"].encode()
    if not ok:
        failed += 1
        print(f"FAIL: {c['template']} / {c['case']}: exit {r.returncode}, stderr {r.stderr[:200]!r}")
print(f"CLI: {len(pick) - failed}/{len(pick)} cases as the reference")
sys.exit(1 if failed or len(pick) < 17 else 0)
PY
[ $? -eq 0 ] && ok

cat >"$TMP/raises.jinja" <<'J'
{{- bos_token }}
{%- if messages[0].role == 'system' %}
    {{- raise_exception('System role not supported') }}
{%- endif %}
{%- for m in messages %}
    {{- '<' + m.role + '>' + m.content | trim }}
{%- endfor %}
{%- if add_generation_prompt %}<assistant>{% endif %}
J
echo '{"messages": [{"role": "user", "content": " Hi "}], "add_generation_prompt": true, "bos_token": "<s>"}' >"$TMP/user.json"
echo '{"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}]}' >"$TMP/system.json"
python3 "$(dirname "$0")/gguf_patch.py" "$MODEL" "$TMP/raises.gguf" template "$TMP/raises.jinja"

out=$("$PL_BINARY" chat-template -m "$TMP/raises.gguf" --context "$TMP/user.json")
check "-m uses the GGUF's template (got [$out])" test "$out" = "<s><user>Hi<assistant>"
echo '{"messages": [{"role": "user", "content": "Hi"}]}' >"$TMP/nobos.json"
out=$("$PL_BINARY" chat-template -m "$TMP/raises.gguf" --context "$TMP/nobos.json")
check "-m: bos_token defaults to the model's (got [$out])" test "$out" = "<s><user>Hi"
"$PL_BINARY" chat-template -m "$TMP/raises.gguf" --context "$TMP/system.json" >"$TMP/o" 2>"$TMP/e"
rc=$?
check "a raising template exits 1 (got $rc)" test "$rc" = 1
check "... with its message on stderr" grep -q 'System role not supported' "$TMP/e"
check "... and nothing on stdout" test ! -s "$TMP/o"
out=$("$PL_BINARY" chat-template -m "$MODEL" --context "$TMP/user.json"; echo .)
check "no template: ChatML (got [$out])" test "$out" = "$(printf '<|im_start|>user\n Hi <|im_end|>\n<|im_start|>assistant\n.')"
printf '{%% for m in messages %%}\n{{ m.role | nosuch }}\n{%% endfor %%}' >"$TMP/bad.jinja"
"$PL_BINARY" chat-template --template "$TMP/bad.jinja" --context "$TMP/user.json" 2>"$TMP/e" >/dev/null
rc=$?
check "a template that does not compile exits 1 (got $rc)" test "$rc" = 1
check "... naming the line and the filter" grep -q "line 2: no filter named 'nosuch'" "$TMP/e"
"$PL_BINARY" chat-template --template "$TMP/bad.jinja" 2>/dev/null
check "no --context: usage error 2" test $? = 2
echo '{"messages": [' >"$TMP/broken.json"
"$PL_BINARY" chat-template --template "$TMP/raises.jinja" --context "$TMP/broken.json" 2>"$TMP/e" >/dev/null
check "a broken context exits 1 naming it" grep -q "context JSON" "$TMP/e"

# ---- server: the GGUF's template raises for a system message ----
MODEL="$TMP/raises.gguf" start_server --threads 1
http POST /v1/chat/completions -d '{"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}], "max_tokens": 2}'
check "a raising template: 400 (got $STATUS)" test "$STATUS" = 400
check "... invalid_request_error" test "$(json_get 'j["error"]["type"]')" = invalid_request_error
check "... naming the problem (got $BODY)" test "$(json_get 'j["error"]["message"]')" = "chat template: System role not supported"
http POST /v1/chat/completions -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}'
check "then a good chat: 200 (got $STATUS)" test "$STATUS" = 200
http POST /v1/chat/render -d '{"messages": [{"role": "user", "content": " Hi "}]}'
check "/v1/chat/render: the template's text (got $BODY)" test "$(json_get 'j["prompt"]')" = "<s><user>Hi<assistant>"
check "/v1/chat/render: template gguf" test "$(json_get 'j["template"]')" = gguf
stop_server

# ---- server: tools reach a tool-aware template (Qwen 2.5's, Hermes format) ----
start_server --threads 1 --chat-template "$TPL/Qwen-Qwen2.5-7B-Instruct.jinja"
TOOLS='"tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]'
http POST /v1/chat/render -d "{\"messages\": [{\"role\": \"user\", \"content\": \"Paris?\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"22C\"}], $TOOLS}"
check "tools render: 200 (got $STATUS $BODY)" test "$STATUS" = 200
python3 - "$TMP/body" <<'PY' && ok || bad "the template got the tools, the call and the answer"
import json, sys
p = json.load(open(sys.argv[1]))["prompt"]
want = ['<tools>\n{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}\n</tools>',
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>',
        '<|im_start|>user\n<tool_response>\n22C\n</tool_response><|im_end|>\n<|im_start|>assistant\n']
missing = [w for w in want if w not in p]
if missing: print("prompt:", p, "\nmissing:", missing)
sys.exit(1 if missing else 0)
PY
http POST /v1/chat/completions -d "{\"messages\": [{\"role\": \"user\", \"content\": \"Paris?\"}], $TOOLS, \"max_tokens\": 12, \"temperature\": 0}"
check "a chat with tools: 200 and a text answer (got $STATUS $BODY)" test "$(json_get 'type(j["choices"][0]["message"]["content"]).__name__ + j["choices"][0]["finish_reason"]')" = strlength
whole=$(json_get 'j["choices"][0]["message"]["content"]')
http POST /v1/chat/completions -d "{\"messages\": [{\"role\": \"user\", \"content\": \"Paris?\"}], $TOOLS, \"max_tokens\": 12, \"temperature\": 0, \"stream\": true}"
streamed=$(python3 -c "
import json, sys
chunks = [json.loads(l[6:]) for l in open('$TMP/body') if l.startswith('data: {')]
print(len([c for c in chunks if c['choices'] and c['choices'][0]['delta'].get('content')]), ''.join(c['choices'][0]['delta'].get('content') or '' for c in chunks if c['choices']))")
# (how many chunks depends on how fast the reader is: the engine coalesces unread deltas)
check "streamed with tools: the same text (got [$streamed], want [$whole])" test "${streamed#* }" = "$whole"
check "... then [DONE]" grep -q '^data: \[DONE\]' "$TMP/body"
stop_server

# ---- server: --chat-template FILE that does not compile ----
start_server --threads 1 --chat-template "$TMP/bad.jinja"
check "startup warns about the template" grep -q "does not compile" "$TMP/server.err"
http POST /v1/chat/completions -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}'
check "chat with a broken template: 400 (got $STATUS)" test "$STATUS" = 400
check "... naming the line (got $BODY)" test "$(json_get 'j["error"]["message"]')" = "chat template: line 2: no filter named 'nosuch'"
http POST /v1/completions -d '{"prompt": "Once", "max_tokens": 2}'
check "completions still served (got $STATUS)" test "$STATUS" = 200
stop_server
finish
