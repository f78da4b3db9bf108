# bench/serve_lib.sh — shell helpers of the serving benchmarks (sourced by bench/run_paper.sh and
# bench/moe.sh; needs $PL, the pagellm binary).
#   kv_tokens FILE MEM  -> "TOKENS CTX": the tokens an f16 KV cache of MEM (e.g. 96M) holds for
#                          FILE (head size attention.key_length, else dim / heads), and the
#                          model's context_length: llama-server's -c at pagellm's KV memory
#   wait_http URL PID   -> 0 once URL answers, 1 if PID exits first or after 120 s
kv_tokens() {
    "$PL" inspect "$1" | awk -v mem="$2" '
        $1 == "context_length" {ctx = $2} $1 == "embedding_length" {d = $2}
        $1 == "block_count" {l = $2} $1 == "attention.head_count" {h = $2}
        $1 == "attention.head_count_kv" {kh = $2} $1 == "attention.key_length" {hd = $2}
        END {
            u = toupper(substr(mem, length(mem))); b = mem + 0
            if (u == "K") b *= 1024; else if (u == "M") b *= 1048576; else if (u == "G") b *= 1073741824
            if (!kh) kh = h
            if (!hd) hd = d / h
            print int(b / (2 * l * kh * hd * 2)), ctx
        }'
}
wait_http() {
    for _ in $(seq 1 1200); do
        curl -sf "$1" >/dev/null 2>&1 && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
