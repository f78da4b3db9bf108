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
