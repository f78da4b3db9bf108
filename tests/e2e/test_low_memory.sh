#!/usr/bin/env bash
# A model whose repacked weights would not fit in the memory available runs from its memory map
# instead of being killed for its copies (issue 34: "a model larger than free RAM loads from the
# memory map and runs"). PAGELLM_MEMINFO points the loader at a fake /proc/meminfo: with almost
# nothing available every weight keeps the file's layout (the same tokens as PAGELLM_REPACK=0,
# which keeps the rows everywhere); with room for the dense matrices only, the experts keep it.
set -u
: "${PL_BINARY:?PL_BINARY must point at the pagellm executable}"
: "${PL_SHARED_DIR:?PL_SHARED_DIR must point at the shared data folder}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }
expect() { if [ "$2" = "$3" ]; then ok; else bad "$1: expected [$3] got [$2]"; fi; }

M="$tmp/moe.gguf"
"$PL_BINARY" mkmodel "$M" --vocab-from "$PL_SHARED_DIR/models/stories260K.gguf" --arch qwen3moe \
    --dim 128 --layers 2 --heads 4 --kv-heads 2 --experts 8 --experts-used 2 --expert-ffn 64 \
    --ffn 128 --type q8_0 >/dev/null || { bad "mkmodel"; echo "$passed passed, $failed failed"; exit 1; }
gen() { "$PL_BINARY" generate -m "$M" -p "Once upon a time" -n 16 --temperature 0 --json "$@"; }
ids() { python3 -c 'import json, sys; r = json.loads(sys.stdin.read()); print(r["ids"], r["finish_reason"])'; }
meminfo() { printf 'MemTotal: 16000000 kB\nMemAvailable: %s kB\n' "$1" >"$tmp/meminfo"; }

rows=$(PAGELLM_REPACK=0 gen 2>"$tmp/err0" | ids)
expect "rows everywhere: 16 tokens" "${rows##* }" length

meminfo 64 # 48 kB of room: not even the dense matrices' copies
got=$(PAGELLM_MEMINFO="$tmp/meminfo" gen 2>"$tmp/err1" | ids)
expect "nothing repacked: the same tokens as the rows" "$got" "$rows"
expect "nothing repacked: the warning names it" "$(grep -c "all weights keep the file's layout" "$tmp/err1")" 1

meminfo 400 # 300 kB of room: the dense matrices' copies (~200 kB) fit, the experts' do not
got=$(PAGELLM_MEMINFO="$tmp/meminfo" gen 2>"$tmp/err2" | ids)
expect "experts kept: 16 tokens" "${got##* }" length
expect "experts kept: the warning names them" "$(grep -c "the experts keep the file's layout" "$tmp/err2")" 1

meminfo 16000000 # room for everything: no warning
PAGELLM_MEMINFO="$tmp/meminfo" gen >/dev/null 2>"$tmp/err3"
expect "room for every copy: no warning" "$(grep -c "keep the file's layout" "$tmp/err3")" 0

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
