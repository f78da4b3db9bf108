#!/usr/bin/env bash
# End-to-end test of `pagellm mkmodel`: a tiny random Llama (dim 64, 2 layers, 4 heads, 2 KV heads,
# FFN 128, stories260K's vocabulary) in every writable type. Checks with `inspect --json` and a
# small GGUF reader in Python: architecture, hyper-parameters, tensor names, shapes and types,
# the tokenizer keys copied byte for byte, determinism of the seed; that `generate` runs on it;
# and that bad flags exit 2 and runtime failures exit 1 with a message.
set -u

: "${PL_BINARY:?PL_BINARY must point at the pagellm executable}"
: "${PL_SHARED_DIR:?PL_SHARED_DIR must point at the shared data folder}"
VOCAB="$PL_SHARED_DIR/models/stories260K.gguf"

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
no_sanitizer_report() { ! grep -Eq 'AddressSanitizer|runtime error|LeakSanitizer' "$1"; }

TINY=(--vocab-from "$VOCAB" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128)

# The tensor table and tokenizer.* values of a GGUF file, as JSON (a deliberately small reader).
cat >"$tmp/gguf_table.py" <<'EOF'
import json, struct, sys

def table(path):
    b = open(path, "rb").read()
    pos = 0
    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, b, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]
    def string():
        nonlocal pos
        n = take("Q")
        s = b[pos:pos + n]
        pos += n
        return s.decode("utf-8", "replace")
    sizes = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "B",
             10: "Q", 11: "q", 12: "d"}
    def skip(t):
        if t in sizes: take(sizes[t])
        elif t == 8: string()
        elif t == 9:
            et, n = take("I"), take("Q")
            for _ in range(n): skip(et)
        else: raise ValueError("bad type %d" % t)
    assert b[:4] == b"GGUF" and take("4s") and take("I") == 3
    n_t, n_kv = take("Q"), take("Q")
    tok = {}
    for _ in range(n_kv):
        k = string()
        t = take("I")
        start = pos
        skip(t)
        if k.startswith("tokenizer."): tok[k] = (t, b[start:pos].hex())
    tensors = []
    for _ in range(n_t):
        name = string()
        nd = take("I")
        ne = [take("Q") for _ in range(nd)]
        t = take("I")
        take("Q")
        tensors.append([name, ne, t])
    return {"tensors": tensors, "tokenizer": tok}

print(json.dumps(table(sys.argv[1])))
EOF

# ggml type ids and llama.cpp file types of the writable types.
# (the k-quant types need dim % 256; test_wtype_reference makes those.)
declare -A TYPE_ID=([f32]=0 [f16]=1 [bf16]=30 [q8_0]=8 [q4_0]=2 [q4_1]=3 [q5_0]=6 [q5_1]=7 [iq4_nl]=20)
declare -A FTYPE=([f32]=0 [f16]=1 [bf16]=32 [q8_0]=7 [q4_0]=2 [q4_1]=3 [q5_0]=8 [q5_1]=9 [iq4_nl]=25)

python3 "$tmp/gguf_table.py" "$VOCAB" >"$tmp/vocab.json" || bad "reading the vocabulary file"

for t in f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl; do
    out="$tmp/tiny-$t.gguf"
    "$PL_BINARY" mkmodel "$out" "${TINY[@]}" --type "$t" --seed 7 >"$tmp/out" 2>"$tmp/err"
    rc=$?
    check "$t: exit 0 (got $rc: $(cat "$tmp/err"))" test "$rc" -eq 0
    check "$t: nothing on stderr" test ! -s "$tmp/err"
    check "$t: one summary line" grep -q "^wrote $out: llama, 2 layers, dim 64" "$tmp/out"

    "$PL_BINARY" inspect --json "$out" >"$tmp/inspect.json" 2>"$tmp/err"
    check "$t: inspect exit 0" test $? -eq 0
    python3 "$tmp/gguf_table.py" "$out" >"$tmp/table.json" || bad "$t: reading the tensor table"
    if python3 - "$tmp/inspect.json" "$tmp/table.json" "$tmp/vocab.json" "$t" "${TYPE_ID[$t]}" \
                 "${FTYPE[$t]}" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
tab = json.load(open(sys.argv[2]))
voc = json.load(open(sys.argv[3]))
tname, tid, ftype = sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
assert j["architecture"] == "llama", j["architecture"]
assert j["file_type"] == ftype, j["file_type"]
h = j["hparams"]
want = {"context_length": 2048, "embedding_length": 64, "block_count": 2,
        "feed_forward_length": 128, "attention.head_count": 4, "attention.head_count_kv": 2,
        "rope.dimension_count": 16, "vocab_size": 512}
for k, v in want.items():
    assert h[k] == v, (k, h.get(k), v)
assert abs(h["attention.layer_norm_rms_epsilon"] - 1e-5) < 1e-9
assert h["rope.freq_base"] == 10000
assert j["tokenizer"]["model"] == "llama" and j["tokenizer"]["n_tokens"] == 512
assert j["tokenizer"]["bos_token_id"] == 1 and j["tokenizer"]["eos_token_id"] == 2
assert j["n_tensors"] == 3 + 9 * 2 == len(tab["tensors"])
n_params = 2 * 64 * 512 + 64 + 2 * (2 * 64 + 64 * 64 * 2 + 2 * 64 * 32 + 3 * 64 * 128)
assert j["n_params"] == n_params, j["n_params"]
# Every tokenizer.* key copied with its type and encoded value unchanged, and nothing more.
assert tab["tokenizer"] == voc["tokenizer"], set(tab["tokenizer"]) ^ set(voc["tokenizer"])
# Names, shapes (ne[0] = input features) and types, in llama.cpp's order.
want_t = [["token_embd.weight", [64, 512], tid], ["output_norm.weight", [64], 0],
          ["output.weight", [64, 512], tid]]
for l in range(2):
    p = "blk.%d." % l
    want_t += [[p + "attn_norm.weight", [64], 0], [p + "attn_q.weight", [64, 64], tid],
               [p + "attn_k.weight", [64, 32], tid], [p + "attn_v.weight", [64, 32], tid],
               [p + "attn_output.weight", [64, 64], tid], [p + "ffn_norm.weight", [64], 0],
               [p + "ffn_gate.weight", [64, 128], tid], [p + "ffn_up.weight", [64, 128], tid],
               [p + "ffn_down.weight", [128, 64], tid]]
assert tab["tensors"] == want_t, tab["tensors"]
n_mat = sum(1 for t in want_t if t[2] == tid and len(t[1]) == 2)
if tname == "f32":
    assert set(j["types"]) == {"f32"} and j["types"]["f32"]["tensors"] == 21
else:
    assert j["types"][tname]["tensors"] == n_mat == 16, j["types"]
    assert j["types"]["f32"]["tensors"] == 5, j["types"]
EOF
    then ok; else bad "$t: inspect facts / tensor table"; fi

    "$PL_BINARY" generate -m "$out" -p "Hello" -n 8 --temperature 0 >"$tmp/gen" 2>"$tmp/err"
    rc=$?
    check "$t: generate exits 0 (got $rc: $(head -c 300 "$tmp/err"))" test "$rc" -eq 0
    check "$t: generate: no sanitizer report" no_sanitizer_report "$tmp/err"
done

# Same flags and seed: the same bytes; another seed: other weights, same layout.
"$PL_BINARY" mkmodel "$tmp/again.gguf" "${TINY[@]}" --type q8_0 --seed 7 >/dev/null 2>&1
check "same seed: identical file" cmp -s "$tmp/again.gguf" "$tmp/tiny-q8_0.gguf"
"$PL_BINARY" mkmodel "$tmp/other.gguf" "${TINY[@]}" --type q8_0 --seed 8 >/dev/null 2>&1
check "other seed: different file" test -n "$(cmp "$tmp/other.gguf" "$tmp/tiny-q8_0.gguf" 2>&1)"
check "other seed: same size" test "$(stat -c %s "$tmp/other.gguf")" -eq \
    "$(stat -c %s "$tmp/tiny-q8_0.gguf")"

# Type names in any case (GGML writes Q8_0, Q4_K_M): the same file as the lower-case name.
"$PL_BINARY" mkmodel "$tmp/upper.gguf" "${TINY[@]}" --type Q8_0 --seed 7 >/dev/null 2>&1
check "--type Q8_0: the file of --type q8_0" cmp -s "$tmp/upper.gguf" "$tmp/tiny-q8_0.gguf"

# --ctx is written.
"$PL_BINARY" mkmodel "$tmp/ctx.gguf" "${TINY[@]}" --ctx 512 >/dev/null 2>&1
if "$PL_BINARY" inspect --json "$tmp/ctx.gguf" | python3 -c '
import json, sys
assert json.load(sys.stdin)["hparams"]["context_length"] == 512'; then ok; else bad "--ctx 512"; fi

# A byte-level BPE vocabulary (50257 tokens, merges): copied whole, and the model runs.
GPT2="$PL_SHARED_DIR/testdata/vocab/ggml-vocab-gpt-2.gguf"
"$PL_BINARY" mkmodel "$tmp/bpe.gguf" --vocab-from "$GPT2" --dim 32 --layers 1 --heads 2 \
    --kv-heads 1 --ffn 64 --type q4_0 >/dev/null 2>"$tmp/err"
check "bpe vocabulary: exit 0 ($(cat "$tmp/err"))" test $? -eq 0
python3 "$tmp/gguf_table.py" "$GPT2" >"$tmp/gpt2.json"
python3 "$tmp/gguf_table.py" "$tmp/bpe.gguf" >"$tmp/bpe.json"
if python3 - "$tmp/gpt2.json" "$tmp/bpe.json" <<'EOF2'
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert "tokenizer.ggml.merges" in b["tokenizer"] and a["tokenizer"] == b["tokenizer"]
assert b["tensors"][0] == ["token_embd.weight", [32, 50257], 2], b["tensors"][0]
EOF2
then ok; else bad "bpe vocabulary: tokenizer keys and embedding shape"; fi
"$PL_BINARY" generate -m "$tmp/bpe.gguf" -p "Hello world" -n 4 --temperature 0 >/dev/null \
    2>"$tmp/err"
check "bpe vocabulary: generate exits 0 ($(head -c 300 "$tmp/err"))" test $? -eq 0

# The architectures of issue 14 (their numbers are checked against llama.cpp by
# test_wtype_reference): deterministic, the layout's own tensors and keys, and they generate.
ARCH_FLAGS=("--arch gemma2 --head-dim 24 --sliding-window 8" "--arch phi3 --sliding-window 8"
            "--rope-scaling llama3 --rope-orig-ctx 64" "--rope-scaling yarn --rope-factor 4"
            "--arch qwen3 --head-dim 24"
            "--arch mistral3 --rope-scaling yarn --rope-orig-ctx 16 --attn-temp-scale 0.1 --yarn-log-mul 1"
            "--arch gemma3 --layers 6 --sliding-window 8 --rope-base-swa 10000"
            "--arch qwen3moe --head-dim 24 --experts 4 --experts-used 2 --expert-ffn 32"
            "--experts 4 --experts-used 2"
            "--arch gpt-oss --head-dim 24 --sliding-window 8 --experts 4 --experts-used 2 --expert-ffn 32"
            "--arch gemma4 --sliding-window 8 --swa-pattern 2 --experts 4 --experts-used 2 --expert-ffn 32")
for i in 0 1 2 3 4 5 6 7 8 9 10; do
    # shellcheck disable=SC2206
    f=(${ARCH_FLAGS[$i]})
    "$PL_BINARY" mkmodel "$tmp/a$i.gguf" "${TINY[@]}" "${f[@]}" --type f16 >/dev/null 2>"$tmp/err"
    check "${f[*]}: exit 0 ($(head -c 300 "$tmp/err"))" test $? -eq 0
    "$PL_BINARY" mkmodel "$tmp/b$i.gguf" "${TINY[@]}" "${f[@]}" --type f16 >/dev/null 2>&1
    check "${f[*]}: same seed, identical file" cmp -s "$tmp/a$i.gguf" "$tmp/b$i.gguf"
    "$PL_BINARY" generate -m "$tmp/a$i.gguf" -p "Hello" -n 4 --temperature 0 >/dev/null 2>"$tmp/err"
    check "${f[*]}: generate exits 0 ($(head -c 300 "$tmp/err"))" test $? -eq 0
done
python3 "$tmp/gguf_table.py" "$tmp/a0.gguf" >"$tmp/g.json"
python3 "$tmp/gguf_table.py" "$tmp/a1.gguf" >"$tmp/p.json"
python3 "$tmp/gguf_table.py" "$tmp/a2.gguf" >"$tmp/l.json"
python3 "$tmp/gguf_table.py" "$tmp/a4.gguf" >"$tmp/q.json"
python3 "$tmp/gguf_table.py" "$tmp/a6.gguf" >"$tmp/g3.json"
if python3 - "$tmp/g.json" "$tmp/p.json" "$tmp/l.json" "$tmp/q.json" "$tmp/g3.json" <<'EOF2'
import json, sys
g, p, l, q, g3 = (dict((t[0], t[1]) for t in json.load(open(f))["tensors"]) for f in sys.argv[1:])
assert q["blk.1.attn_q_norm.weight"] == [24] and q["blk.1.attn_k_norm.weight"] == [24], q
assert q["blk.0.attn_q.weight"] == [64, 96] and "output.weight" in q, q
assert "output.weight" not in g3 and g3["blk.5.attn_q_norm.weight"] == [16], g3
assert g3["blk.5.post_attention_norm.weight"] == [64] and g3["blk.0.post_ffw_norm.weight"] == [64], g3
assert "output.weight" not in g and g["blk.1.post_attention_norm.weight"] == [64], g
assert g["blk.0.attn_q.weight"] == [64, 96] and g["blk.0.post_ffw_norm.weight"] == [64], g
assert p["blk.0.attn_qkv.weight"] == [64, 128] and p["blk.0.ffn_up.weight"] == [64, 256], p
assert "blk.0.ffn_gate.weight" not in p and "blk.0.attn_q.weight" not in p, p
assert l["rope_freqs.weight"] == [8], l
EOF2
then ok; else bad "gemma2 / phi3 / llama3 tensor layout"; fi
python3 "$tmp/gguf_table.py" "$tmp/a7.gguf" >"$tmp/qm.json"
python3 "$tmp/gguf_table.py" "$tmp/a8.gguf" >"$tmp/mx.json"
if python3 - "$tmp/qm.json" "$tmp/mx.json" <<'EOF2'
import json, sys
qm, mx = (dict((t[0], t[1:]) for t in json.load(open(f))["tensors"]) for f in sys.argv[1:])
assert qm["blk.1.ffn_gate_inp.weight"] == [[64, 4], 0], qm  # the router stays f32
assert qm["blk.1.ffn_gate_exps.weight"][0] == [64, 32, 4], qm
assert qm["blk.1.ffn_down_exps.weight"][0] == [32, 64, 4], qm
assert qm["blk.0.attn_q_norm.weight"][0] == [24] and "blk.0.ffn_gate.weight" not in qm, qm
assert mx["blk.0.ffn_up_exps.weight"][0] == [64, 128, 4] and "blk.0.ffn_down.weight" not in mx, mx
EOF2
then ok; else bad "qwen3moe / mixtral tensor layout"; fi
# gemma4's MoE variant: the dense FFN kept, experts beside it with fused gate/up
python3 "$tmp/gguf_table.py" "$tmp/a10.gguf" >"$tmp/g4m.json"
if python3 - "$tmp/g4m.json" <<'EOF2'
import json, sys
m = dict((t[0], t[1:]) for t in json.load(open(sys.argv[1]))["tensors"])
assert m["blk.1.ffn_gate_inp.weight"] == [[64, 4], 0] and m["blk.1.ffn_gate_inp.scale"][0] == [64], m
assert m["blk.1.ffn_gate_up_exps.weight"][0] == [64, 64, 4] and "blk.1.ffn_gate_exps.weight" not in m, m
assert m["blk.0.ffn_down_exps.weight"][0] == [32, 64, 4] and m["blk.0.ffn_down_exps.scale"][0] == [4], m
assert m["blk.0.ffn_down.weight"][0] == [128, 64] and m["blk.0.ffn_gate.weight"][0] == [64, 128], m
for n in ("pre_ffw_norm_2", "post_ffw_norm_1", "post_ffw_norm_2", "post_ffw_norm"):
    assert m["blk.1.%s.weight" % n][0] == [64], (n, m)
EOF2
then ok; else bad "gemma4 MoE tensor layout"; fi
# --split-experts: gate and up apart, each with a per-expert scale (llama.cpp's unfused layout)
"$PL_BINARY" mkmodel "$tmp/g4s.gguf" "${TINY[@]}" ${ARCH_FLAGS[10]} --split-experts >/dev/null 2>"$tmp/err"
check "gemma4 --split-experts: exit 0 ($(head -c 300 "$tmp/err"))" test $? -eq 0
python3 "$tmp/gguf_table.py" "$tmp/g4s.gguf" >"$tmp/g4s.json"
if python3 - "$tmp/g4s.json" <<'EOF2'
import json, sys
m = dict((t[0], t[1:]) for t in json.load(open(sys.argv[1]))["tensors"])
assert "blk.1.ffn_gate_up_exps.weight" not in m, m
for n in ("gate", "up"):
    assert m["blk.1.ffn_%s_exps.weight" % n][0] == [64, 32, 4], (n, m)
    assert m["blk.1.ffn_%s_exps.scale" % n][0] == [4], (n, m)
assert m["blk.0.ffn_down_exps.scale"][0] == [4], m
EOF2
then ok; else bad "gemma4 --split-experts tensor layout"; fi
# gpt-oss: biases, sinks, post_attention_norm as its FFN norm; --type mxfp4: the experts only
"$PL_BINARY" mkmodel "$tmp/go.gguf" "${TINY[@]}" ${ARCH_FLAGS[9]} --type mxfp4 >/dev/null 2>"$tmp/err"
check "gpt-oss mxfp4: exit 0 ($(head -c 300 "$tmp/err"))" test $? -eq 0
python3 "$tmp/gguf_table.py" "$tmp/a9.gguf" >"$tmp/go16.json"
python3 "$tmp/gguf_table.py" "$tmp/go.gguf" >"$tmp/go.json"
if python3 - "$tmp/go16.json" "$tmp/go.json" <<'EOF2'
import json, sys
a, m = (dict((t[0], t[1:]) for t in json.load(open(f))["tensors"]) for f in sys.argv[1:])
assert a["blk.0.attn_sinks.weight"] == [[4], 0] and a["blk.0.attn_output.bias"] == [[64], 0], a
assert a["blk.1.ffn_gate_exps.bias"] == [[32, 4], 0] and a["blk.1.ffn_down_exps.bias"] == [[64, 4], 0], a
assert a["blk.0.ffn_gate_inp.bias"] == [[4], 0] and a["blk.0.attn_q.bias"] == [[96], 0], a
assert "blk.0.ffn_norm.weight" not in a and a["blk.0.post_attention_norm.weight"] == [[64], 0], a
assert a["blk.0.ffn_up_exps.weight"] == [[64, 32, 4], 1], a
assert m["blk.0.ffn_up_exps.weight"] == [[64, 32, 4], 39] and m["blk.1.ffn_down_exps.weight"][1] == 39, m
assert m["blk.0.attn_q.weight"][1] == 0 and m["token_embd.weight"][1] == 0 and m["output.weight"][1] == 0, m
EOF2
then ok; else bad "gpt-oss tensor layout (and mxfp4 experts)"; fi
if "$PL_BINARY" inspect --json "$tmp/a7.gguf" | python3 -c '
import json, sys
h = json.load(sys.stdin)["hparams"]
assert h["expert_count"] == 4 and h["expert_used_count"] == 2, h
assert h["expert_feed_forward_length"] == 32, h'; then ok
else bad "inspect shows qwen3moe hyper-parameters"; fi
if "$PL_BINARY" inspect --json "$tmp/a0.gguf" | python3 -c '
import json, sys
h = json.load(sys.stdin)["hparams"]
assert h["attention.sliding_window"] == 8 and h["attn_logit_softcapping"] == 50, h'; then ok
else bad "inspect shows gemma2 hyper-parameters"; fi
if "$PL_BINARY" inspect --json "$tmp/a5.gguf" | python3 -c '
import json, sys
h = json.load(sys.stdin)["hparams"]
assert h["attention.temperature_scale"] == 0.1 and h["rope.scaling.yarn_log_multiplier"] == 1, h
assert h["rope.scaling.type"] == "yarn" and "attention.sliding_window" not in h, h'; then ok
else bad "inspect shows mistral3 hyper-parameters"; fi
if "$PL_BINARY" inspect --json "$tmp/a6.gguf" | python3 -c '
import json, sys
h = json.load(sys.stdin)["hparams"]
assert h["attention.sliding_window"] == 8 and h["rope.freq_base_swa"] == 10000, h
assert "attn_logit_softcapping" not in h and "final_logit_softcapping" not in h, h'; then ok
else bad "inspect shows gemma3 hyper-parameters"; fi
# A metadata value pagellm does not implement is refused by name (yarn -> xpos, linear -> llama3:
# llama.cpp refuses both too).
refused() { # refused DESCRIPTION PATTERN FILE
    "$PL_BINARY" generate -m "$3" -p x -n 1 >/dev/null 2>"$tmp/err"
    local rc=$?
    check "$1: exit 1 (got $rc)" test "$rc" -eq 1
    check "$1: message names it ($(head -c 300 "$tmp/err"))" grep -Eq "$2" "$tmp/err"
}
python3 "$(dirname "$0")/gguf_patch.py" "$tmp/a3.gguf" "$tmp/xpos.gguf" str llama.rope.scaling.type xpos
refused "rope scaling xpos" "llama.rope.scaling.type' = 'xpos' is not supported" "$tmp/xpos.gguf"
"$PL_BINARY" mkmodel "$tmp/lr.gguf" "${TINY[@]}" --arch phi3 --rope-scaling longrope --ctx 4096 \
    --rope-orig-ctx 64 >/dev/null 2>&1
python3 "$(dirname "$0")/gguf_patch.py" "$tmp/lr.gguf" "$tmp/lr1.gguf" drop rope_factors_long.weight
refused "phi3 without its long factors" "rope_factors_long.weight' is missing" "$tmp/lr1.gguf"
"$PL_BINARY" mkmodel "$tmp/lin.gguf" "${TINY[@]}" --rope-scaling linear >/dev/null 2>&1
python3 "$(dirname "$0")/gguf_patch.py" "$tmp/lin.gguf" "$tmp/l3.gguf" str llama.rope.scaling.type llama3
refused "rope scaling llama3" "'llama3' is not supported" "$tmp/l3.gguf"
python3 "$(dirname "$0")/gguf_patch.py" "$tmp/a1.gguf" "$tmp/phi9.gguf" arch phi9
refused "architecture phi9" "architecture 'phi9' is not supported" "$tmp/phi9.gguf"

# ---- usage errors: exit 2 with a message naming the problem ----
usage_error() { # usage_error DESCRIPTION WORD ARGS...
    local what=$1 word=$2
    shift 2
    "$PL_BINARY" mkmodel "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    check "$what: exit 2 (got $rc)" test "$rc" -eq 2
    check "$what: message mentions '$word'" grep -q -- "$word" "$tmp/err"
    check "$what: usage on stderr" grep -q "usage: pagellm mkmodel" "$tmp/err"
    check "$what: no file written" test ! -e "$tmp/bad.gguf"
    check "$what: no sanitizer report" no_sanitizer_report "$tmp/err"
}
B="$tmp/bad.gguf"
usage_error "no arguments" "no output file"
usage_error "no --vocab-from" "--vocab-from is required" "$B" --dim 64 --layers 2 --heads 4 \
    --kv-heads 2 --ffn 128
usage_error "no --ffn" "--ffn is required" "$B" --vocab-from "$VOCAB" --dim 64 --layers 2 \
    --heads 4 --kv-heads 2
usage_error "dim not a multiple of heads" "not a multiple of --heads" "$B" "${TINY[@]}" --heads 5
usage_error "heads not a multiple of kv-heads" "not a multiple of --kv-heads" "$B" "${TINY[@]}" \
    --kv-heads 3
usage_error "odd head size" "is odd" "$B" "${TINY[@]}" --dim 24 --heads 8 --kv-heads 8
usage_error "q8_0 needs dim % 32" "block size of q8_0" "$B" "${TINY[@]}" --dim 48 --type q8_0
usage_error "window on bert" "bert attends bidirectionally" "$B" "${TINY[@]}" --arch bert \
    --sliding-window 8
usage_error "rope scaling on gemma2" "--rope-scaling yarn is for --arch llama" "$B" "${TINY[@]}" \
    --arch gemma2 --rope-scaling yarn
usage_error "longrope on llama" "--rope-scaling longrope is for --arch phi3" "$B" "${TINY[@]}" \
    --rope-scaling longrope
usage_error "unknown arch" "is not llama, qwen3, qwen3moe, gpt-oss, mistral3, gemma2," "$B" \
    "${TINY[@]}" --arch gpt2
usage_error "temperature on llama" "--attn-temp-scale and --yarn-\* are for --arch mistral3" "$B" \
    "${TINY[@]}" --attn-temp-scale 0.1
usage_error "split experts without gemma4's experts" "--split-experts is for --arch gemma4 --experts N" \
    "$B" "${TINY[@]}" --arch gemma4 --split-experts
usage_error "swa base on gemma2" "--rope-base-swa is for --arch gemma3" "$B" "${TINY[@]}" \
    --arch gemma2 --rope-base-swa 10000
usage_error "unknown rope scaling" "is not none, linear, yarn, llama3 or longrope" "$B" \
    "${TINY[@]}" --rope-scaling su
usage_error "q4_0 needs ffn % 32" "--ffn 100" "$B" "${TINY[@]}" --ffn 100 --type q4_0
usage_error "unknown type" "q5_k" "$B" "${TINY[@]}" --type q5_k
usage_error "zero layers" "--layers" "$B" "${TINY[@]}" --layers 0
usage_error "negative dim" "--dim" "$B" "${TINY[@]}" --dim -64
usage_error "not a number" "'abc' is not an integer" "$B" "${TINY[@]}" --ffn abc
usage_error "unknown option" "--frobnicate" "$B" "${TINY[@]}" --frobnicate
usage_error "missing value" "--seed" "$B" "${TINY[@]}" --seed
usage_error "two outputs" "unexpected argument" "$B" "$tmp/second.gguf" "${TINY[@]}"
usage_error "unknown shape" "--shape: '7b'" "$B" --vocab-from "$VOCAB" --shape 7b
usage_error "experts on gemma2" "--experts and --experts-used are for" "$B" "${TINY[@]}" --arch gemma2 --experts 4
usage_error "mxfp4 without experts" "--type mxfp4 is for the experts" "$B" "${TINY[@]}" --type mxfp4
usage_error "too many used experts" "--experts-used 5 is more than --experts 4" "$B" "${TINY[@]}" --experts 4 --experts-used 5

# ---- named shapes (--shape): the benchmark tables' hyper-parameters; flags override them ----
shape_case() { # shape_case NAME TYPE DIM HEADS KV FFN [extra flags]: one layer of the shape
    local name=$1 type=$2 dim=$3 heads=$4 kv=$5 ffn=$6 more=${SHAPE_MORE:-}
    shift 6
    "$PL_BINARY" mkmodel "$tmp/shape.gguf" --vocab-from "$VOCAB" --shape "$name" --layers 1 \
        --type "$type" "$@" >"$tmp/out" 2>&1 || { bad "--shape $name: mkmodel failed"; return; }
    "$PL_BINARY" inspect --json "$tmp/shape.gguf" >"$tmp/shape.json" 2>&1
    check "--shape $name ($type): hyper-parameters" python3 -c "
import json; h = json.load(open('$tmp/shape.json'))['hparams']
want = {'embedding_length': $dim, 'block_count': 1, 'attention.head_count': $heads,
        'attention.head_count_kv': $kv, 'feed_forward_length': $ffn$more}
bad = {k: (h.get(k), v) for k, v in want.items() if h.get(k) != v}
assert not bad, bad"
    rm -f "$tmp/shape.gguf"
}
shape_case 110m f16 768 12 4 2048
shape_case 1b q4_0 2048 32 8 256 --ffn 256       # --ffn overrides the shape's 8192
shape_case 3b q8_0 3072 24 8 256 --ffn 256
# the real models' shapes carry their layout and RoPE settings
SHAPE_MORE=", 'attention.key_length': 128, 'rope.freq_base': 1e6" \
    shape_case qwen3-0.6b q8_0 1024 16 8 3072
SHAPE_MORE=", 'attention.sliding_window': 512, 'rope.freq_base_swa': 1e4" \
    shape_case gemma3-1b q8_0 1152 4 1 256 --ffn 256
SHAPE_MORE=", 'attention.temperature_scale': 0.1, 'rope.scaling.original_context_length': 16384" \
    shape_case mistral3-3b q4_0 3072 32 8 256 --ffn 256
SHAPE_MORE=", 'attention.key_length': 64, 'attention.sliding_window': 128, 'expert_count': 2, 'expert_used_count': 2, 'rope.scaling.original_context_length': 4096" \
    shape_case gpt-oss-20b mxfp4 2880 64 8 256 --ffn 256 --expert-ffn 256 --experts 2 --experts-used 2
"$PL_BINARY" mkmodel --help >"$tmp/out" 2>&1
check "--help: exit 0" test $? -eq 0
check "--help: usage" grep -q "usage: pagellm mkmodel" "$tmp/out"
"$PL_BINARY" --help | grep -q "mkmodel"
check "listed in pagellm --help" test $? -eq 0

# ---- runtime errors: exit 1, one line on stderr ----
runtime_error() { # runtime_error DESCRIPTION WORD OUT ARGS...
    local what=$1 word=$2
    shift 2
    "$PL_BINARY" mkmodel "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$? lines
    lines=$(wc -l <"$tmp/err")
    check "$what: exit 1 (got $rc)" test "$rc" -eq 1
    check "$what: one line on stderr (got $lines)" test "$lines" -eq 1
    check "$what: message starts with 'pagellm mkmodel: '" grep -q '^pagellm mkmodel: ' "$tmp/err"
    check "$what: message mentions '$word'" grep -q -- "$word" "$tmp/err"
    check "$what: no sanitizer report" no_sanitizer_report "$tmp/err"
}
runtime_error "missing vocabulary file" "No such file" "$B" --vocab-from "$tmp/none.gguf" \
    --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128
printf 'not a gguf file at all' >"$tmp/junk.gguf"
runtime_error "vocabulary file not GGUF" "not a GGUF file" "$B" --vocab-from "$tmp/junk.gguf" \
    --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128
# A valid GGUF without a vocabulary: header v3, no tensors, one key.
python3 - "$tmp/novocab.gguf" <<'EOF'
import struct, sys
k, v = b"general.architecture", b"llama"
b = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(k)) + k
b += struct.pack("<IQ", 8, len(v)) + v
open(sys.argv[1], "wb").write(b)
EOF
runtime_error "vocabulary file without tokens" "tokenizer.ggml.tokens" "$B" \
    --vocab-from "$tmp/novocab.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128
runtime_error "output directory missing" "cannot create" "$tmp/no/such/dir/x.gguf" "${TINY[@]}"
check "no partial output after failures" test ! -e "$B"

echo "$passed passed, $failed failed"
test "$failed" -eq 0
