#!/usr/bin/env bash
# End-to-end: the official OpenAI Node client (npm package `openai`, installed here into
# tests/e2e/node_modules when missing) against `pagellm serve` with an API key.
set -u
. "$(dirname "$0")/server_lib.sh"
DIR=$(cd "$(dirname "$0")" && pwd)

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    bad "node and npm are needed (apt-get install nodejs npm)"
    finish
fi
if [ ! -d "$DIR/node_modules/openai" ]; then
    (cd "$DIR" && timeout 300 npm install --no-package-lock --no-audit --no-fund --loglevel=error) \
        >"$TMP/npm.log" 2>&1 || { cat "$TMP/npm.log"; bad "npm install openai"; finish; }
fi

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
finish
