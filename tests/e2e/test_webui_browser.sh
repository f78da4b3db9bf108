#!/usr/bin/env bash
# End-to-end: the web page of `pagellm serve` in Debian's `chromium`, driven by puppeteer-core
# (npm, pinned by tests/e2e/package-lock.json, installed with `npm ci`; PUPPETEER_SKIP_DOWNLOAD=1:
# the system chromium is used, no browser is downloaded). The server runs with an API key and
# PAGELLM_STEP_DELAY_MS so answers last long enough to be stopped and watched. Checks: the key
# dialog, streaming, Enter / Shift+Enter, log-probabilities on hover, the rendered prompt, TTFT
# and tokens/s, stop mid-answer (server running count and used blocks back to 0), the KV view
# with used and shared blocks for n = 2, then every block free, and no window pool shown. Then
# the KV view of a random gemma3 with a window pool (layer kinds): that pool shown beside the
# full one, following /v1/kv/blocks while a request slides through the window. Screenshots:
# $PL_BUILD_DIR/webui-chat.png, webui-kv.png and webui-kv-window.png (CI artifacts).
# Skips (exit 77) only when no chromium is installed (scripts/setup.sh installs it); under CI=true
# that is a failure.
set -u
. "$(dirname "$0")/server_lib.sh"
DIR=$(cd "$(dirname "$0")" && pwd)
OUT=${PL_BUILD_DIR:-$TMP}
export PUPPETEER_SKIP_DOWNLOAD=1

CHROMIUM=${PL_CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
[ -n "$CHROMIUM" ] || skip_test "no chromium (apt-get install chromium, or scripts/setup.sh)"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    bad "node and npm are needed (apt-get install nodejs npm)"
    finish
fi
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
check "puppeteer-core is the locked 24.43.1" test \
    "$(cd "$DIR" && node -p 'require("./node_modules/puppeteer-core/package.json").version')" = 24.43.1

# Without --no-webui the page is there; with it, / is a 404 and the API still works.
start_server --no-webui
http GET /
check "--no-webui: GET / is 404 (got $STATUS)" test "$STATUS" = 404
http GET /app.js
check "--no-webui: GET /app.js is 404 (got $STATUS)" test "$STATUS" = 404
http GET /v1/models
check "--no-webui: the API still answers (got $STATUS)" test "$STATUS" = 200
stop_server

PAGELLM_STEP_DELAY_MS=${PL_STEP_DELAY_MS:-25} start_server --api-key sekret
http GET /app.js
check "GET /app.js is 200 (got $STATUS)" test "$STATUS" = 200
http GET /v1/kv/blocks
check "/v1/kv/blocks needs the key (got $STATUS)" test "$STATUS" = 401
node_run browser "$DIR/webui_browser.mjs" "$BASE" sekret "$OUT" "$CHROMIUM"
check "screenshots saved under $OUT" test -s "$OUT/webui-chat.png" -a -s "$OUT/webui-kv.png"
check "server alive" kill -0 "$SERVER_PID"
kill -TERM "$SERVER_PID"
wait "$SERVER_PID"
rc=$?
SERVER_PID=""
check "clean exit (got $rc)" test "$rc" -eq 0
if grep -Eq 'AddressSanitizer|runtime error|LeakSanitizer|ThreadSanitizer' "$TMP/server.err"; then
    bad "sanitizer report"; head -30 "$TMP/server.err"
else ok; fi

# A gemma3 (5 window layers to 1 global, window 16): its window layers keep a pool of their own,
# and with a swap space a swap pool of their own too.
G3="$TMP/gemma3.gguf"
"$PL_BINARY" mkmodel "$G3" --vocab-from "$MODEL" --arch gemma3 --dim 64 --layers 6 --heads 4 \
    --kv-heads 2 --head-dim 16 --ffn 128 --sliding-window 16 --ctx 1024 --seed 7 >"$TMP/mk.log" 2>&1
check "mkmodel --arch gemma3 ($(tail -1 "$TMP/mk.log"))" test -s "$G3"
MODEL="$G3" PAGELLM_STEP_DELAY_MS=${PL_STEP_DELAY_MS:-25} start_server --swap-space 1M
node_run browser-window "$DIR/webui_browser.mjs" "$BASE" "" "$OUT" "$CHROMIUM" window
check "window pool screenshot saved under $OUT" test -s "$OUT/webui-kv-window.png"
stop_clean gemma3
finish
