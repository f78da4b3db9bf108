#!/usr/bin/env bash
# End-to-end: thinking_token_budget (vLLM's name; llama-server's reasoning_budget as an alias)
# ends the thinking by writing the reasoning parser's closing tag after N thinking tokens
# (issue 33: the engine's force_end). Qwen3.5's template opens <think> in the prompt, so the
# region is open from the first token; stories260K never closes it by itself, so without a
# budget the whole answer is thinking, and with one the reasoning_content holds at most N tokens
# and the answer follows. Then the refusals: a bad value, a completion request, a server with
# no reasoning parser; each a 400 naming the field.
set -u
. "$(dirname "$0")/server_lib.sh"
TPL="$PL_SHARED_DIR/testdata/chat-templates-2026/Qwen3.5-4B.jinja"

start_server --chat-template "$TPL"
http POST /tokenize -d '{"prompt": "</think>", "add_special_tokens": false}'
N_CLOSE=$(json_get 'len(j["tokens"])')
check "the closing tag tokenizes (got $BODY)" test "${N_CLOSE:-0}" -ge 1
chat() { # chat EXTRA_FIELDS
    http POST /v1/chat/completions -d "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 40, \"temperature\": 0$1}"
}
chat ''
check "no budget: all thinking (got $STATUS $BODY)" \
    test "$STATUS/$(json_get 'str(bool(j["choices"][0]["message"].get("content")))')" = 200/False
for f in thinking_token_budget reasoning_budget; do
    for n in 0 5; do
        chat ", \"$f\": $n"
        think=$(json_get 'j["usage"]["completion_tokens_details"]["reasoning_tokens"]')
        check "$f $n: 200, at most $n thinking tokens + the tag (got $STATUS $think $BODY)" \
            test "$STATUS" = 200 -a "${think:-999}" -le $((n + N_CLOSE))
        check "$f $n: the answer follows (got $BODY)" \
            test "$(json_get 'str(len(j["choices"][0]["message"]["content"]) > 0)')" = True
    done
done
chat ', "thinking_token_budget": 5, "stream": true'
check "streamed: 200 with content deltas after the thinking (got $STATUS)" \
    test "$STATUS/$(grep -c '"content":"[^"]' "$TMP/body")" != "200/0" -a "$STATUS" = 200
chat ', "reasoning_budget": -1'
check "reasoning_budget -1: unlimited (got $STATUS $BODY)" \
    test "$STATUS/$(json_get 'str(bool(j["choices"][0]["message"].get("content")))')" = 200/False
for bad in '"thinking_token_budget": -1' '"thinking_token_budget": "x"' '"reasoning_budget": -2' \
           '"thinking_token_budget": 3, "reasoning_budget": 3' \
           '"thinking_token_budget": 3, "use_beam_search": true, "n": 2'; do
    chat ", $bad"
    check "$bad: 400 naming the field (got $STATUS $BODY)" \
        test "$STATUS/$(json_get '"budget" in j["error"]["param"]')" = 400/True
done
http POST /v1/completions -d '{"prompt": "x", "max_tokens": 2, "thinking_token_budget": 3}'
check "a completion: 400 naming the field (got $STATUS $BODY)" \
    test "$STATUS/$(json_get 'j["error"]["param"]')" = 400/thinking_token_budget
stop_clean budget

start_server --chat-template "$TPL" --reasoning-parser none
chat ', "thinking_token_budget": 3'
check "no reasoning parser: 400 naming the field (got $STATUS $BODY)" \
    test "$STATUS/$(json_get 'j["error"]["param"]')" = 400/thinking_token_budget
stop_clean "no parser"
finish
