#!/usr/bin/env bash
# End-to-end test of `pagellm inspect`: facts about stories260K in text and JSON, usage errors
# (exit 2), and missing or malformed files (exit 1 with exactly one line on stderr, no sanitizer
# report).
set -u

: "${PL_BINARY:?PL_BINARY must point at the pagellm executable}"
: "${PL_SHARED_DIR:?PL_SHARED_DIR must point at the shared data folder}"
MODEL="$PL_SHARED_DIR/models/stories260K.gguf"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

passed=0
failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }
check() { # check DESCRIPTION COMMAND...: passes if the command succeeds
    local what=$1
    shift
    if "$@"; then ok; else bad "$what"; fi
}

# ---- stories260K, text ----
out=$("$PL_BINARY" inspect "$MODEL" 2>"$tmp/err")
rc=$?
check "text: exit 0 (got $rc)" test "$rc" -eq 0
check "text: nothing on stderr" test ! -s "$tmp/err"
for pat in '^GGUF version: *3$' '^architecture: *llama$' '^name: *llama$' \
           'block_count *5$' 'embedding_length *64$' 'attention.head_count_kv *4$' \
           'context_length *2048$' '^  model *llama$' '^  tokens *512$' '^  bos id *1$' \
           '^  eos id *2$' '^  merges *no$' '^tensors: *48$' 'f32 *48 tensors' \
           '^parameters: *292\.8K \(292800\)$'; do
    if grep -Eq -- "$pat" <<<"$out"; then ok; else bad "text output lacks /$pat/"; fi
done

# ---- a bare name resolves through $PAGELLM_MODELS ----
out=$(PAGELLM_MODELS="$PL_SHARED_DIR/models" "$PL_BINARY" inspect synth-tiny-q4_k_m 2>&1)
check "bare name: exit 0" test $? -eq 0
if grep -Eq '^file type: *Q4_K_M \(15\)$' <<<"$out"; then ok; else bad "bare name: file type Q4_K_M"; fi

# ---- stories260K, JSON ----
"$PL_BINARY" inspect "$MODEL" --json >"$tmp/out.json" 2>"$tmp/err"
rc=$?
check "json: exit 0 (got $rc)" test "$rc" -eq 0
check "json: nothing on stderr" test ! -s "$tmp/err"
if python3 - "$tmp/out.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["gguf_version"] == 3, j["gguf_version"]
assert j["architecture"] == "llama"
assert j["hparams"]["block_count"] == 5
assert j["hparams"]["embedding_length"] == 64
assert j["hparams"]["attention.head_count"] == 8
assert abs(j["hparams"]["attention.layer_norm_rms_epsilon"] - 1e-5) < 1e-9
assert j["tokenizer"]["model"] == "llama"
assert j["tokenizer"]["n_tokens"] == 512
assert j["tokenizer"]["bos_token_id"] == 1 and j["tokenizer"]["eos_token_id"] == 2
assert j["tokenizer"]["has_merges"] is False and j["tokenizer"]["has_chat_template"] is False
assert j["n_tensors"] == 48
assert j["types"] == {"f32": {"tensors": 48, "bytes": 1171200}}, j["types"]
assert j["n_params"] == 292800 and j["n_params_human"] == "292.8K"
assert j["file_type"] is None
EOF
then ok; else bad "json: fields"; fi

# q4_k_m: file type and per-type counts in JSON.
if "$PL_BINARY" inspect "$PL_SHARED_DIR/models/synth-tiny-q4_k_m.gguf" --json | python3 -c '
import json, sys
j = json.load(sys.stdin)
assert j["file_type"] == 15 and j["file_type_name"] == "Q4_K_M"
t = j["types"]
assert sum(v["tensors"] for v in t.values()) == j["n_tensors"] == 39
assert set(t) == {"f32", "q4_K", "q6_K"}, t
'; then ok; else bad "json q4_k_m: file type / types"; fi

# ---- usage errors: exit 2 ----
"$PL_BINARY" inspect >/dev/null 2>"$tmp/err"
rc=$?
check "no args: exit 2 (got $rc)" test "$rc" -eq 2
check "no args: usage on stderr" grep -q "usage: pagellm inspect" "$tmp/err"
"$PL_BINARY" inspect --frobnicate "$MODEL" >/dev/null 2>&1
check "unknown option: exit 2" test $? -eq 2
"$PL_BINARY" inspect "$MODEL" "$MODEL" >/dev/null 2>&1
check "two files: exit 2" test $? -eq 2
"$PL_BINARY" inspect --help >"$tmp/help" 2>&1
check "--help: exit 0" test $? -eq 0

# ---- runtime errors: exit 1, one line on stderr ----
runtime_error() { # runtime_error DESCRIPTION FILE WORD
    local what=$1 file=$2 word=$3
    "$PL_BINARY" inspect "$file" >"$tmp/out" 2>"$tmp/err"
    local rc=$? lines
    lines=$(wc -l <"$tmp/err")
    check "$what: exit 1 (got $rc)" test "$rc" -eq 1
    check "$what: one line on stderr (got $lines)" test "$lines" -eq 1
    check "$what: message starts with 'pagellm inspect: '" grep -q '^pagellm inspect: ' "$tmp/err"
    check "$what: message mentions '$word'" grep -q -- "$word" "$tmp/err"
    if grep -Eq 'AddressSanitizer|runtime error|LeakSanitizer' "$tmp/err"; then
        bad "$what: sanitizer report"
    else ok; fi
    check "$what: nothing on stdout" test ! -s "$tmp/out"
}

runtime_error "missing file" "$tmp/no-such-model.gguf" "No such file"
: >"$tmp/empty.gguf"
runtime_error "empty file" "$tmp/empty.gguf" "empty"
printf 'PK\003\004 this is a zip file' >"$tmp/zip.gguf"
runtime_error "wrong magic" "$tmp/zip.gguf" "not a GGUF file"
for n in 6 24 5000 14000 600000; do
    head -c "$n" "$MODEL" >"$tmp/trunc$n.gguf"
    runtime_error "truncated at $n bytes" "$tmp/trunc$n.gguf" "end of the file"
done
python3 - "$MODEL" "$tmp" <<'EOF'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
out = sys.argv[2]
v1 = bytearray(b); v1[4:8] = struct.pack("<I", 1)
open(out + "/v1.gguf", "wb").write(v1)
kv = bytearray(b); kv[16:24] = struct.pack("<Q", 1 << 62)
open(out + "/kvcount.gguf", "wb").write(kv)
EOF
runtime_error "GGUF v1" "$tmp/v1.gguf" "version 1"
runtime_error "absurd metadata count" "$tmp/kvcount.gguf" "exceeds the file"
runtime_error "a directory" "$tmp" "directory"

echo "$passed passed, $failed failed"
test "$failed" -eq 0
