#!/usr/bin/env bash
# End-to-end: the official OpenAI Node client (npm package `openai`, pinned with its dependencies
# by tests/e2e/package-lock.json and installed with `npm ci` into tests/e2e/node_modules) against
# `pagellm serve` with an API key.
set -u
. "$(dirname "$0")/server_lib.sh"
DIR=$(cd "$(dirname "$0")" && pwd)

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    bad "node and npm are needed (apt-get install nodejs npm)"
    finish
fi
# The client and everything it pulls in are pinned by package-lock.json (exact versions and
# integrity hashes): `npm ci` installs exactly that, and runs again whenever node_modules holds
# anything else (an older unpinned install, a hand-edited tree).
same_as_lock() {
    (cd "$DIR" && node -e '
        const fs = require("fs");
        const pick = (f) => { const p = JSON.parse(fs.readFileSync(f)).packages; delete p[""];
            return JSON.stringify(Object.keys(p).sort().map((k) => [k, p[k].version, p[k].integrity])); };
        process.exit(pick("package-lock.json") === pick("node_modules/.package-lock.json") ? 0 : 1);
    ') 2>/dev/null
}
if ! same_as_lock; then
    (cd "$DIR" && timeout 300 npm ci --no-audit --no-fund --loglevel=error) \
        >"$TMP/npm.log" 2>&1 || { cat "$TMP/npm.log"; bad "npm ci (tests/e2e/package-lock.json)"; finish; }
fi
check "node_modules matches package-lock.json" same_as_lock
check "openai client is the locked 4.104.0" test \
    "$(cd "$DIR" && node -p 'require("./node_modules/openai/package.json").version')" = 4.104.0

start_server --api-key sekret
timeout 100 node "$DIR/openai_client.mjs" "$BASE" sekret >"$TMP/node.out" 2>&1
rc=$?
cat "$TMP/node.out"
line=$(tail -n 1 "$TMP/node.out")
np=$(echo "$line" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1/p')
nf=$(echo "$line" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\2/p')
passed=$((passed + ${np:-0}))
failed=$((failed + ${nf:-0}))
check "node client exit 0 (got $rc)" test "$rc" -eq 0
check "node client printed its count" test -n "$np"
check "server alive" kill -0 "$SERVER_PID"
kill -TERM "$SERVER_PID"
wait "$SERVER_PID"
rc=$?
SERVER_PID=""
check "clean exit (got $rc)" test "$rc" -eq 0
if grep -Eq 'AddressSanitizer|runtime error|LeakSanitizer' "$TMP/server.err"; then
    bad "sanitizer report"; head -30 "$TMP/server.err"
else ok; fi

# Embeddings (issue 17): a random BERT made with the flags its llama.cpp reference records, then
# stories260K serving embeddings beside completions (--pooling last, f32 KV as the reference).
embed_run() { # embed_run NAME REF.json SERVE-FLAGS...
    local name=$1 ref=$2
    shift 2
    SERVED_NAME=$name start_server --api-key sekret "$@"
    timeout 100 node "$DIR/openai_embeddings.mjs" "$BASE" sekret "$ref" "$name" >"$TMP/node.out" 2>&1
    rc=$?
    cat "$TMP/node.out"
    line=$(tail -n 1 "$TMP/node.out")
    np=$(echo "$line" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1/p')
    nf=$(echo "$line" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\2/p')
    passed=$((passed + ${np:-0}))
    failed=$((failed + ${nf:-0}))
    check "$name: embeddings client exit 0 (got $rc)" test "$rc" -eq 0
    check "$name: embeddings client printed its count" test -n "$np"
    kill -TERM "$SERVER_PID"
    wait "$SERVER_PID"
    rc=$?
    SERVER_PID=""
    check "$name: clean exit (got $rc)" test "$rc" -eq 0
    if grep -Eq 'AddressSanitizer|runtime error|LeakSanitizer' "$TMP/server.err"; then
        bad "sanitizer report ($name)"; head -30 "$TMP/server.err"
    else ok; fi
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
