#!/usr/bin/env bash
# LoRA adapters over HTTP (issue 36): a random base model and adapters made by `pagellm mkmodel`
# (--lora-of), served with --lora a=PATH and --allow-runtime-lora-updating behind an API key:
# /v1/models lists the adapter with `parent` the base model; `model: a` runs under it (its own
# greedy text, "model": "a" in the answer); an unknown model is a 404 naming it; POST
# /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's shapes and answers) add and remove
# one; bad adapters (another base model's, a missing file), a name in use and an unknown name are
# 400/404 naming them and the server keeps serving; the routes need the key and are counted in
# /metrics. A server without the flag answers the two routes 404.
. "$(dirname "$0")/server_lib.sh"
mk() { "$PL_BINARY" mkmodel "$@" >/dev/null || { bad "mkmodel $*"; finish; }; }
V="--vocab-from $PL_SHARED_DIR/models/stories260K.gguf"
# shellcheck disable=SC2086
mk "$TMP/base.gguf" $V --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 --seed 4
mk "$TMP/a.gguf" --lora-of "$TMP/base.gguf" --lora-rank 4 --seed 1
mk "$TMP/b.gguf" --lora-of "$TMP/base.gguf" --lora-rank 8 --lora-targets attn_q,ffn_down --type f16
# shellcheck disable=SC2086
mk "$TMP/other.gguf" $V --dim 32 --layers 2 --heads 4 --kv-heads 2 --ffn 64
mk "$TMP/aother.gguf" --lora-of "$TMP/other.gguf"
MODEL="$TMP/base.gguf"
SERVED_NAME=base start_server --api-key k --lora "a=$TMP/a.gguf" --allow-runtime-lora-updating
K=(-H 'Authorization: Bearer k' -H 'Content-Type: application/json')

http GET /v1/models "${K[@]}"
check "models: base and a, a's parent is base (got $BODY)" test \
    "$(json_get '[(m["id"], m["parent"]) for m in j["data"]]')" = "[('base', None), ('a', 'base')]"
http GET /v1/models/a "${K[@]}"
check "models/a: root is its file (got $STATUS: $BODY)" test "$(json_get 'j["root"]')" = "$TMP/a.gguf"

complete() { # complete MODEL: greedy text into $TEXT
    http POST /v1/completions "${K[@]}" -d "{\"model\": \"$1\", \"prompt\": \"Once upon a time\", \"max_tokens\": 12, \"temperature\": 0, \"ignore_eos\": true}"
    TEXT=$(json_get 'j["choices"][0]["text"]')
}
complete base
base_text=$TEXT
complete a
check "model a: 200, answers as 'a' (got $STATUS: $BODY)" test "$STATUS:$(json_get 'j["model"]')" = "200:a"
check "model a: its text differs from the base model's" test "$TEXT" != "$base_text"
a_text=$TEXT
http POST /v1/chat/completions "${K[@]}" -d '{"model": "a", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}'
check "chat under a: 200 (got $STATUS: $BODY)" test "$STATUS:$(json_get 'j["model"]')" = "200:a"
http POST /v1/messages/count_tokens "${K[@]}" -d '{"model": "a", "messages": [{"role": "user", "content": "hi"}]}'
check "count_tokens under a: 200 (got $STATUS: $BODY)" test "$STATUS" = 200
http POST /tokenize "${K[@]}" -d '{"model": "a", "prompt": "Once upon a time"}'
check "tokenize under a: 200 (got $STATUS: $BODY)" test "$STATUS" = 200
http POST /v1/completions "${K[@]}" -d '{"model": "zz", "prompt": "x"}'
check "unknown model: 404 naming it (got $STATUS: $BODY)" test \
    "$STATUS:$(json_get 'j["error"]["param"]'):$(json_get '"zz" in j["error"]["message"]')" = "404:model:True"

# Runtime loading, vLLM's shapes.
http POST /v1/load_lora_adapter -H 'Content-Type: application/json' -d "{\"lora_name\": \"b\", \"lora_path\": \"$TMP/b.gguf\"}"
check "load without the key: 401 (got $STATUS)" test "$STATUS" = 401
http POST /v1/load_lora_adapter "${K[@]}" -d "{\"lora_name\": \"b\", \"lora_path\": \"$TMP/b.gguf\"}"
check "load b: 200 Success (got $STATUS: $BODY)" test "$STATUS:$BODY" = "200:Success: LoRA adapter 'b' added successfully."
complete b
check "model b: 200 (got $STATUS: $BODY)" test "$STATUS:$(json_get 'j["model"]')" = "200:b"
http GET /v1/models "${K[@]}"
check "models: b listed" test "$(json_get '[m["id"] for m in j["data"]]')" = "['base', 'a', 'b']"
bad_load() { # bad_load BODY STATUS NEEDLE
    http POST /v1/load_lora_adapter "${K[@]}" -d "$1"
    check "load $1: $2 naming '$3' (got $STATUS: $BODY)" \
        test "$STATUS:$(json_get "'''$3''' in j['error']['message']")" = "$2:True"
}
bad_load "{\"lora_name\": \"b\", \"lora_path\": \"$TMP/a.gguf\"}" 400 "'b': the name is in use"
bad_load "{\"lora_name\": \"c\", \"lora_path\": \"$TMP/aother.gguf\"}" 400 "blk.0.attn_q.weight"
bad_load "{\"lora_name\": \"c\", \"lora_path\": \"$TMP/base.gguf\"}" 400 "general.type"
bad_load "{\"lora_name\": \"c\", \"lora_path\": \"$TMP/none.gguf\"}" 404 "none.gguf"
bad_load '{"lora_path": "x"}' 400 "lora_name"
bad_load '{"lora_name": "c"}' 400 "lora_path"
bad_load '{"lora_name": 3, "lora_path": "x"}' 400 "lora_name"
bad_load '{"lora_name": "c", "lora_path": "/nonexistent/x", "load_inplace": false}' 404 "/nonexistent/x"
bad_load '{"lora_name": "base", "lora_path": "x"}' 400 "base model"
http POST /v1/unload_lora_adapter "${K[@]}" -d '{"lora_name": "zz"}'
check "unload unknown: 404 naming it (got $STATUS: $BODY)" test \
    "$STATUS:$(json_get '"zz" in j["error"]["message"]')" = "404:True"
http POST /v1/unload_lora_adapter "${K[@]}" -d '{"lora_name": "b"}'
check "unload b: 200 Success (got $STATUS: $BODY)" test "$STATUS:$BODY" = "200:Success: LoRA adapter 'b' removed successfully."
complete b
check "model b after unloading: 404 (got $STATUS)" test "$STATUS" = 404
complete a
check "still serving a, same text (got $STATUS)" test "$STATUS:$TEXT" = "200:$a_text"
http GET /metrics
n=$(sed -n 's/^pagellm_http_requests_total[^ ]* \([0-9]*\).*/\1/p' "$TMP/body")
check "metrics count the requests ($n)" test "${n:-0}" -ge 20
check "metrics: 1 adapter loaded, 4 requests under adapters" test \
    "$(grep -E '^pagellm_lora_(adapters|requests_total)' "$TMP/body" | awk '{print $2}' | tr '\n' ' ')" = "1 4 "
stop_clean base

# Without --allow-runtime-lora-updating the routes answer 404, naming the flag.
SERVED_NAME=base start_server
http POST /v1/load_lora_adapter -H 'Content-Type: application/json' -d "{\"lora_name\": \"b\", \"lora_path\": \"$TMP/b.gguf\"}"
check "load without the flag: 404 naming it (got $STATUS: $BODY)" test \
    "$STATUS:$(json_get '"--allow-runtime-lora-updating" in j["error"]["message"]')" = "404:True"
stop_clean base
# A bad --lora at start: exit 1 naming the tensor; vLLM's --lora-modules with several NAME=PATH
# after one flag reads them all (the second, bad one, is refused).
"$PL_BINARY" serve "$TMP/base.gguf" --port 0 --lora-modules "x=$TMP/a.gguf" "y=$TMP/aother.gguf" >"$TMP/o" 2>"$TMP/e"
rc=$?
check "--lora-modules x=.. y=..: y refused (rc $rc: $(cat "$TMP/e"))" \
    test "$rc:$(grep -c "lora y: .*blk.0.attn_q.weight" "$TMP/e")" = "1:1"
"$PL_BINARY" serve -m "$TMP/base.gguf" --port 0 --lora "x=$TMP/aother.gguf" >"$TMP/o" 2>"$TMP/e"
rc=$?
check "bad --lora: exit 1 naming the tensor (rc $rc: $(cat "$TMP/e"))" \
    test "$rc:$(grep -c 'blk.0.attn_q.weight' "$TMP/e")" = "1:1"
finish
