#!/usr/bin/env bash
# End-to-end: the official OpenAI Node client (npm package `openai`, pinned with its dependencies
# by tests/e2e/package-lock.json and installed with `npm ci` into tests/e2e/node_modules) against
# `pagellm serve` with an API key.
set -u
. "$(dirname "$0")/server_lib.sh"
DIR=$(cd "$(dirname "$0")" && pwd)

npm_ready
check "openai client is the locked 4.104.0" test \
    "$(cd "$DIR" && node -p 'require("./node_modules/openai/package.json").version')" = 4.104.0

start_server --api-key sekret
node_run openai "$DIR/openai_client.mjs" "$BASE" sekret
check "server alive" kill -0 "$SERVER_PID"
stop_clean openai

# Embeddings (issue 17): a random BERT made with the flags its llama.cpp reference records, then
# stories260K serving embeddings beside completions (--pooling last, f32 KV as the reference).
embed_run() { # embed_run NAME REF.json SERVE-FLAGS...
    local name=$1 ref=$2
    shift 2
    SERVED_NAME=$name start_server --api-key sekret "$@"
    node_run "$name: embeddings" "$DIR/openai_embeddings.mjs" "$BASE" sekret "$ref" "$name"
    stop_clean "$name"
}
REF="$DIR/../data/embeddings/bert-mean-f32.json"
flags=$(node -p "JSON.parse(require('fs').readFileSync('$REF')).mkmodel")
# shellcheck disable=SC2086
"$PL_BINARY" mkmodel "$TMP/bert.gguf" --vocab-from "$PL_SHARED_DIR/models/stories260K.gguf" \
    $flags >/dev/null || bad "mkmodel --arch bert"
STORIES=$MODEL
MODEL="$TMP/bert.gguf"
embed_run bert "$REF" --max-waiting 8 # an 18-input batch goes in as the queue drains
MODEL=$STORIES
embed_run stories "$DIR/../data/embeddings/stories260K-last.json" --pooling last --kv-cache-dtype f32
finish
