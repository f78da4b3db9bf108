#!/usr/bin/env bash
# End-to-end: a `vllm serve` launch line works with `pagellm serve` (issue 17): --dtype,
# --gpu-memory-utilization (on a CPU: the share of MemAvailable after the weights, 0.5 by
# default; PAGELLM_MEMINFO points the engine at a fake /proc/meminfo so the budget is known),
# --kv-cache-memory-bytes, --tensor-parallel-size 1, vLLM-only flags ignored with a warning; an
# unknown flag stays an error that names the closest known flag.
set -u
. "$(dirname "$0")/server_lib.sh"

# serve_kv FLAGS...: start a server with these flags only (no --kv-cache-memory), print its
# "KV cache:" line, stop it. Its stderr is in $TMP/kv.err.
serve_kv() {
    : >"$TMP/kv.out" # as start_server: else the loop may read the previous server's lines
    "$PL_BINARY" serve -m "$MODEL" --port 0 --threads 1 "$@" >"$TMP/kv.out" 2>"$TMP/kv.err" &
    local pid=$!
    for _ in $(seq 1 1200); do # up to 60 s: an ASan build on a loaded machine starts slowly
        grep -q '^serving ' "$TMP/kv.out" 2>/dev/null && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    grep '^KV cache:' "$TMP/kv.out"
    kill -TERM "$pid" 2>/dev/null
    wait "$pid"
}
mib() { sed -n 's/.* \([0-9.]*\) MiB budget.*/\1/p'; }

WEIGHTS=$(stat -c %s "$MODEL")
printf 'MemTotal:       4194304 kB\nMemFree:        1000 kB\nMemAvailable:   1048576 kB\n' >"$TMP/meminfo"
want() { python3 -c "print('%.1f' % ($1 * (1048576 * 1024 - $WEIGHTS) / 2**20))"; }

line=$(PAGELLM_MEMINFO="$TMP/meminfo" serve_kv)
check "default: 0.5 of available after the weights ($line)" test "$(echo "$line" | mib)" = "$(want 0.5)"
check "default: the log says where the budget comes from" grep -q 'gpu-memory-utilization 0.5' <<<"$line"
line=$(PAGELLM_MEMINFO="$TMP/meminfo" serve_kv --gpu-memory-utilization 0.25)
check "--gpu-memory-utilization 0.25 ($line)" test "$(echo "$line" | mib)" = "$(want 0.25)"
line=$(PAGELLM_MEMINFO="$TMP/meminfo" serve_kv --kv-cache-memory-bytes 8388608 --gpu-memory-utilization 0.9)
check "--kv-cache-memory-bytes wins over --gpu-memory-utilization ($line)" test "$(echo "$line" | mib)" = 8.0
line=$(serve_kv --kv-cache-memory 8M --dtype float32)
check "--dtype float32: f32 KV cache ($line)" grep -q ', f32, ' <<<"$line"
line=$(serve_kv --kv-cache-memory 8M --dtype bfloat16)
check "--dtype bfloat16: bf16 KV cache, as vLLM's auto ($line)" grep -q ', bf16, ' <<<"$line"
line=$(serve_kv --kv-cache-memory 8M --dtype float32 --kv-cache-dtype f16)
check "--kv-cache-dtype after --dtype wins ($line)" grep -q ', f16, ' <<<"$line"
printf 'MemTotal: 1 kB\n' >"$TMP/meminfo_bad"
PAGELLM_MEMINFO="$TMP/meminfo_bad" timeout 20 "$PL_BINARY" serve -m "$MODEL" --port 0 >/dev/null 2>"$TMP/err"
check "no MemAvailable: exit 1" test $? = 1
check "no MemAvailable: the error says so" grep -q 'MemAvailable' "$TMP/err"

# A vLLM launch line: vLLM-only flags are ignored with a warning naming each; the server serves.
start_server --dtype auto --tensor-parallel-size 1 --pipeline-parallel-size 1 \
    --uvicorn-log-level info --disable-log-requests --disable-log-stats --trust-remote-code \
    --enforce-eager --max-log-len=100 --seed 0 --host 127.0.0.1
for f in --uvicorn-log-level --disable-log-requests --trust-remote-code --max-log-len --seed; do
    check "warning names $f" grep -q "warning: $f is a vLLM option" "$TMP/server.err"
done
http POST /v1/completions -d '{"prompt": "Once upon a time", "max_tokens": 5, "temperature": 0}'
check "vLLM launch line: serves" test "$(json_get 'j["choices"][0]["text"]')" = ", there was a little"
stop_server

# Refusals: exit 2 with a message naming the problem.
refuse() { # refuse WORD FLAGS...
    local word=$1
    shift
    timeout 20 "$PL_BINARY" serve -m "$MODEL" --port 0 "$@" >/dev/null 2>"$TMP/err"
    local rc=$?
    check "$* : exit 2 (got $rc)" test "$rc" = 2
    if grep -qF -- "$word" "$TMP/err"; then ok; else bad "$*: stderr lacks '$word': $(head -2 "$TMP/err")"; fi
}
refuse "did you mean --gpu-memory-utilization?" --gpu-memory-utilisation 0.9
refuse "did you mean --max-num-seqs?" --max-num-sqes=4
refuse "did you mean --tensor-parallel-size?" --tensor-paralel-size 1
refuse "unknown option '--frobnicate'" --frobnicate
refuse "mpirun -np 2" --tensor-parallel-size 2
refuse "pipeline parallelism is not built" --pipeline-parallel-size 2
refuse "--pipeline-parallel-size" --pipeline-parallel-size 4
refuse "'int8' is not auto" --dtype int8
refuse "(0, 1]" --gpu-memory-utilization 0
refuse "--gpu-memory-utilization" --gpu-memory-utilization 1.5
"$PL_BINARY" generate -m "$MODEL" -p x --max-num-sqs 3 >/dev/null 2>"$TMP/err"
check "generate: the closest flag too" grep -q 'did you mean --max-num-seqs?' "$TMP/err"
finish
