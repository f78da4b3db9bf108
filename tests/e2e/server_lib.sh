# Shared by the server e2e tests (sourced, not run): start `pagellm serve` on a free loopback
# port, kill it on exit, count checks.
: "${PL_BINARY:?PL_BINARY must point at the pagellm executable}"
: "${PL_SHARED_DIR:?PL_SHARED_DIR must point at the shared data folder}"
MODEL="$PL_SHARED_DIR/models/stories260K.gguf"
. "$(dirname "${BASH_SOURCE[0]}")/ci_env.sh" # under_ci, skip_test, refuse_knob

TMP=$(mktemp -d)
SERVER_PID=""
stop_server() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -KILL "$SERVER_PID" 2>/dev/null
        wait "$SERVER_PID" 2>/dev/null
    fi
    SERVER_PID=""
}
trap 'stop_server; rm -rf "$TMP"' EXIT

passed=0
failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }
check() { # check DESCRIPTION COMMAND...
    local what=$1
    shift
    if "$@"; then ok; else bad "$what"; fi
}
finish() {
    echo "$passed passed, $failed failed"
    test "$failed" -eq 0
    exit
}

# start_server [serve flags...]: port 0 lets the kernel pick; the server prints the URL.
start_server() {
    # Empty the log first: the redirection below happens in the background job, so without this
    # the loop could read the previous server's "serving ... on" line and its (closed) port.
    : >"$TMP/server.out"
    "$PL_BINARY" serve -m "$MODEL" --port 0 --served-model-name "${SERVED_NAME:-stories}" --kv-cache-memory 32M \
        --threads 2 "$@" >"$TMP/server.out" 2>"$TMP/server.err" &
    SERVER_PID=$!
    BASE=""
    for _ in $(seq 1 200); do
        # "serving NAME on http://127.0.0.1:PORT (...)", or http://[::1]:PORT with --host ::1
        BASE=$(sed -n 's|^serving .* on \(http://[^ ]*:[0-9][0-9]*\) .*|\1|p' "$TMP/server.out" 2>/dev/null)
        [ -n "$BASE" ] && break
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.05
    done
    if [ -z "$BASE" ]; then
        echo "server did not start:"; cat "$TMP/server.out" "$TMP/server.err"
        bad "server start"
        finish
    fi
    PORT=${BASE##*:}
}

# http METHOD PATH [curl args...]: sets STATUS and BODY (the body is also in $TMP/body).
http() {
    local m=$1 p=$2
    shift 2
    STATUS=$(curl -s -g -o "$TMP/body" -w '%{http_code}' --max-time 60 -X "$m" "$BASE$p" "$@")
    BODY=$(cat "$TMP/body")
}

# json_get EXPR: evaluate a Python expression on the JSON body `j`.
json_get() { python3 -c "import json,sys; j=json.load(open('$TMP/body')); print($1)" 2>/dev/null; }

# npm_ready: the npm clients of tests/e2e, pinned with their dependencies by package-lock.json
# (exact versions and integrity hashes), installed with `npm ci` into tests/e2e/node_modules;
# `npm ci` runs again whenever node_modules holds anything else (an older unpinned install, a
# hand-edited tree). Ends the test when node or the install is missing.
npm_ready() {
    local dir
    dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
        bad "node and npm are needed (apt-get install nodejs npm)"
        finish
    fi
    if ! same_as_lock "$dir"; then
        (cd "$dir" && timeout 300 npm ci --no-audit --no-fund --loglevel=error) \
            >"$TMP/npm.log" 2>&1 || { cat "$TMP/npm.log"; bad "npm ci (tests/e2e/package-lock.json)"; finish; }
    fi
    check "node_modules matches package-lock.json" same_as_lock "$dir"
}
same_as_lock() {
    (cd "$1" && node -e '
        const fs = require("fs");
        const pick = (f) => { const p = JSON.parse(fs.readFileSync(f)).packages; delete p[""];
            return JSON.stringify(Object.keys(p).sort().map((k) => [k, p[k].version, p[k].integrity])); };
        process.exit(pick("package-lock.json") === pick("node_modules/.package-lock.json") ? 0 : 1);
    ') 2>/dev/null
}

# node_run NAME SCRIPT ARGS...: run a node client that ends with "N passed, N failed" and add its
# counts to ours.
node_run() {
    local name=$1 rc line np nf
    shift
    timeout 240 node "$@" >"$TMP/node.out" 2>&1
    rc=$?
    cat "$TMP/node.out"
    line=$(tail -n 1 "$TMP/node.out")
    np=$(echo "$line" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1/p')
    nf=$(echo "$line" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\2/p')
    passed=$((passed + ${np:-0}))
    failed=$((failed + ${nf:-0}))
    check "$name: node client exit 0 (got $rc)" test "$rc" -eq 0
    check "$name: node client printed its count" test -n "$np"
}

# stop_clean NAME: SIGTERM the server, expect exit 0 and no sanitizer report in its log.
stop_clean() {
    local rc
    kill -TERM "$SERVER_PID"
    wait "$SERVER_PID"
    rc=$?
    SERVER_PID=""
    check "$1: clean exit (got $rc)" test "$rc" -eq 0
    if grep -Eq 'AddressSanitizer|runtime error|LeakSanitizer' "$TMP/server.err"; then
        bad "$1: sanitizer report"; head -30 "$TMP/server.err"
    else ok; fi
}
