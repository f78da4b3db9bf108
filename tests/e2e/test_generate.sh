#!/usr/bin/env bash
# End-to-end test of `pagellm generate`, `tokenize` and `detokenize`: the reference continuation,
# the --json contract, offline batches (--input/--output), control tokens' text in the prompt
# (--parse-special, a batch line's parse_special), structured output (--regex, --json-schema,
# --choice), usage errors (exit 2), runtime errors
# and bad model files (exit 1 with exactly one line on stderr naming the problem, no crash).
set -u
: "${PL_BINARY:?PL_BINARY must point at the pagellm executable}"
: "${PL_SHARED_DIR:?PL_SHARED_DIR must point at the shared data folder}"
HERE=$(cd "$(dirname "$0")" && pwd)
M="$PL_SHARED_DIR/models/stories260K.gguf"
Q="$PL_SHARED_DIR/models/synth-tiny-q8_0.gguf"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }
expect() { if [ "$2" = "$3" ]; then ok; else bad "$1: expected [$3] got [$2]"; fi; }

REF=", there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball. She wanted to play with it,"

# ---- generate: the reference text, plain and JSON ----
out=$("$PL_BINARY" generate -m "$M" -p "Once upon a time" -n 48 --temperature 0 2>"$tmp/err")
expect "plain text" "$out" "Once upon a time$REF"
out=$(PAGELLM_MODELS="$PL_SHARED_DIR/models" "$PL_BINARY" generate -m stories260K --prompt-ids 1,403,407,261,378 -n 48 --temperature 0 \
      --json --logprobs 3 --prompt-logprobs 2 2>"$tmp/err")
expect "json exit" "$?" 0
python3 - "$out" "$REF" <<'PY' && ok || bad "json contract"
import json, sys
d = json.loads(sys.argv[1])
assert d["text"] == sys.argv[2], d["text"]
assert d["prompt_ids"] == [1, 403, 407, 261, 378]
assert len(d["ids"]) == 48 and d["ids"][0] == 432
assert d["finish_reason"] == "length"
assert len(d["logprobs"]) == 48 and all(len(s) >= 3 for s in d["logprobs"])
top = d["logprobs"][0]
assert top[0][0] == 432 and abs(top[0][1] + 0.0317) < 2e-3, top
assert all(top[i][1] >= top[i + 1][1] for i in range(2))
pl = d["prompt_logprobs"]
assert pl[0] is None and len(pl) == 5
assert any(e[0] == 403 for e in pl[1]), pl[1]
PY
# Stop strings; sampling with a seed is reproducible and another seed differs. Each run must
# succeed with 20 tokens of text, or two failures (empty outputs) would compare equal.
out=$("$PL_BINARY" generate -m "$M" -p "Once upon a time" -n 48 --temperature 0 --stop Lily --json)
python3 -c "import json,sys; d=json.loads(sys.argv[1]); assert d['text']==', there was a little girl named ' and d['finish_reason']=='stop', d" "$out" && ok || bad "stop string"
# Stop strings across tokens: "girl" is ' g' 'ir' 'l', "amed Li" starts inside ' named'.
out=$("$PL_BINARY" generate -m "$M" -p "Once upon a time" -n 48 --temperature 0 --stop girl --json)
python3 -c "import json,sys; d=json.loads(sys.argv[1]); assert d['text']==', there was a little ' and d['finish_reason']=='stop' and len(d['ids'])==8, d" "$out" && ok || bad "stop string over three tokens"
out=$("$PL_BINARY" generate -m "$M" -p "Once upon a time" -n 48 --temperature 0 --stop "amed Li" --stop "with it")
[ "$out" = "Once upon a time, there was a little girl n" ] && ok || bad "stop string inside tokens, plain output: '$out'"
seeded() { # seeded SEED: the JSON line of a sampled completion, empty unless exit 0 with 20 tokens
    local o
    o=$("$PL_BINARY" generate -m "$M" -p "Tom" -n 20 --seed "$1" --top-p 0.9 --ignore-eos --json 2>>"$tmp/seed_err") &&
        python3 -c "import json,sys; d=json.loads(sys.argv[1]); assert len(d['ids']) == 20 and d['text']" "$o" 2>/dev/null &&
        echo "$o"
}
a=$(seeded 5)
b=$(seeded 5)
c=$(seeded 6)
if [ -n "$a" ]; then ok; else bad "seeded sampling: exit 0 with 20 tokens ($(head -c 200 "$tmp/seed_err"))"; fi
if [ -n "$a" ] && [ "$a" = "$b" ]; then ok; else bad "seeded sampling reproducible: [$a] [$b]"; fi
if [ -n "$c" ] && [ "$c" != "$a" ]; then ok; else bad "another seed gives another text: [$a] [$c]"; fi

# ---- offline batch ----
cat > "$tmp/in.jsonl" <<'JL'
{"prompt": "Once upon a time", "max_tokens": 48, "temperature": 0}
{"prompt_ids": [1, 403, 407, 261, 378], "max_tokens": 4, "n": 3, "seed": 1, "logprobs": 1}

not json
{"prompt": "Lily", "beam_width": 2, "max_tokens": 6}
{"prompt": "x", "max_tokens": 0}
JL
"$PL_BINARY" generate -m "$M" --input "$tmp/in.jsonl" --output "$tmp/out.jsonl" 2>"$tmp/err"
expect "batch exit (a bad line makes it 1)" "$?" 1
python3 - "$tmp/out.jsonl" "$REF" <<'PY' && ok || bad "batch output"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert [l["index"] for l in lines] == [0, 1, 2, 3, 4], lines
assert lines[0]["completions"][0]["text"] == sys.argv[2]
assert len(lines[1]["completions"]) == 3 and all(len(c["ids"]) == 4 for c in lines[1]["completions"])
assert lines[1]["completions"][0]["logprobs"] is not None
assert "JSON" in lines[2]["error"]
assert len(lines[3]["completions"]) == 1 and len(lines[3]["completions"][0]["ids"]) == 6
assert "max_tokens" in lines[4]["error"]
PY

# ---- engine flags from the CLI, checked through `generate --verbose` statistics ----
# Four 300-token requests in a 30-block pool must preempt. With --preemption-mode swap (and
# --swap-space as a bare number of GiB, as vLLM) every preemption swaps; recompute swaps none; the
# greedy outputs are the same either way.
for p in "Once upon a time" "Lily" "Tom had a dog" "The sun"; do
    echo "{\"prompt\": \"$p\", \"max_tokens\": 300, \"ignore_eos\": true, \"temperature\": 0}"
done >"$tmp/preempt.jsonl"
for mode in recompute swap; do
    "$PL_BINARY" generate -m "$M" --input "$tmp/preempt.jsonl" --output "$tmp/preempt_$mode.jsonl" \
        --kv-cache-memory 300K --threads 1 -v --preemption-mode "$mode" --swap-space 0.001 2>"$tmp/preempt_$mode.err"
    expect "preemption $mode: exit" "$?" 0
done
pre() { sed -n 's/.* \([0-9]*\) preemptions (\([0-9]*\) by swapping).*/\1 \2/p' "$tmp/preempt_$1.err"; }
read -r n_rec n_rec_swap <<<"$(pre recompute)"
read -r n_swap n_swap_swap <<<"$(pre swap)"
if [ "${n_rec:-0}" -ge 1 ] && [ "$n_rec_swap" = 0 ]; then ok; else bad "recompute: preemptions, none by swapping ($(pre recompute))"; fi
if [ "${n_swap:-0}" -ge 1 ] && [ "$n_swap_swap" = "$n_swap" ]; then ok; else bad "--preemption-mode swap: every preemption swaps ($(pre swap))"; fi
if cmp -s "$tmp/preempt_recompute.jsonl" "$tmp/preempt_swap.jsonl" && [ "$(wc -l <"$tmp/preempt_swap.jsonl")" = 4 ]; then ok
else bad "swap and recompute give the same 4 answers"; fi

# --max-num-batched-tokens L: a 200-token prompt is prefilled in ceil(200 / L) steps, then one
# step per further token; the tokens do not depend on L.
P200=$(python3 -c 'print(",".join(str(10 + i) for i in range(200)))')
for L in 16 50 512; do
    out=$("$PL_BINARY" generate -m "$M" --prompt-ids "$P200" -n 3 --temperature 0 --threads 1 -v --json \
          --kv-cache-memory 32M --max-num-seqs 4 --max-num-batched-tokens $L 2>"$tmp/mnbt.err")
    expect "--max-num-batched-tokens $L: exit" "$?" 0
    steps=$(sed -n 's/.*; \([0-9]*\) steps,.*/\1/p' "$tmp/mnbt.err")
    expect "--max-num-batched-tokens $L: steps" "$steps" $(((200 + L - 1) / L + 2))
    ids=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['ids'])" "$out")
    [ "$L" = 16 ] && ids16=$ids
    expect "--max-num-batched-tokens $L: same tokens" "$ids" "$ids16"
done

# PAGELLM_ISA=scalar runs the scalar kernels (generate -v says which) and gives the native greedy
# tokens on stories260K with an f32 KV cache; an unknown value is ignored with one warning.
isa_run() { # isa_run VALUE: ids on stdout, stderr in $tmp/isa.err
    PAGELLM_ISA=$1 "$PL_BINARY" generate -m "$M" -p "Once upon a time" -n 48 --temperature 0 --threads 1 \
        --kv-cache-dtype f32 --kv-cache-memory 32M -v --json 2>"$tmp/isa.err" |
        python3 -c "import json,sys; print(json.load(sys.stdin)['ids'])"
}
native=$(isa_run "")
native_isa=$(sed -n 's/^kernels: //p' "$tmp/isa.err")
scalar=$(isa_run scalar)
expect "PAGELLM_ISA=scalar: kernels used" "$(sed -n 's/^kernels: //p' "$tmp/isa.err")" scalar
if [ -n "$native" ] && [ "$scalar" = "$native" ]; then ok; else bad "PAGELLM_ISA=scalar: greedy tokens [$scalar] != native ($native_isa) [$native]"; fi
bogus=$(isa_run bogus)
expect "PAGELLM_ISA=bogus: native kernels" "$(sed -n 's/^kernels: //p' "$tmp/isa.err")" "$native_isa"
expect "PAGELLM_ISA=bogus: same tokens" "$bogus" "$native"
expect "PAGELLM_ISA=bogus: one warning naming it" "$(grep -c "PAGELLM_ISA='bogus' is not scalar, avx2, avxvnni or avx512" "$tmp/isa.err")" 1

# The default thread count is one per physical core the process may use (base/cpucount.h): under
# `taskset -c 0` it is 1 whatever the machine has; -t overrides it.
if command -v taskset >/dev/null; then
    taskset -c 0 "$PL_BINARY" generate -m "$M" -p hi -n 2 -v 2>"$tmp/thr.err" >/dev/null
    expect "taskset -c 0: one thread" "$(sed -n 's/^threads: \([0-9]*\) .*/\1/p' "$tmp/thr.err")" 1
    "$PL_BINARY" generate -m "$M" -p hi -n 2 -v -t 3 2>"$tmp/thr.err" >/dev/null
    expect "-t 3: three threads" "$(sed -n 's/^threads: //p' "$tmp/thr.err")" "3 (-t)"
else
    skip_test "no taskset (util-linux)"
fi

# ---- tokenize / detokenize ----
expect "tokenize" "$("$PL_BINARY" tokenize -m "$M" "Once upon a time")" "[403, 407, 261, 378]"
expect "tokenize --add-special" "$("$PL_BINARY" tokenize -m "$M" --add-special "Once upon a time")" "[1, 403, 407, 261, 378]"
expect "detokenize" "$("$PL_BINARY" detokenize -m "$M" 403 407 261 378)" "Once upon a time"
# the flag table: -m after the ids, ids as 1,2 or [1, 2]; a negative id named as an id, not
# read as a flag; a bad id or a missing one is a usage error (2)
expect "detokenize ids before -m" "$("$PL_BINARY" detokenize 403,407 261 -m "$M")" "Once upon a"
expect "detokenize [a, b]" "$("$PL_BINARY" detokenize -m "$M" "[403," "407]")" "Once upon"
for args in "403 -5" "-12" "x" "" "403 --bogus"; do
    # shellcheck disable=SC2086
    "$PL_BINARY" detokenize -m "$M" $args >/dev/null 2>"$tmp/err"
    expect "detokenize $args: usage error" "$?" 2
done
"$PL_BINARY" detokenize -m "$M" 403 -5 >/dev/null 2>"$tmp/err"
grep -q "ID: '-5' is negative" "$tmp/err" && ok || bad "detokenize -5 names the id: $(cat "$tmp/err")"

# ---- control tokens' text in the prompt: plain text unless --parse-special ----
# stories260K: "<s>" is id 1 (CONTROL, BOS), "</s>" id 2 (CONTROL, EOS), "▁Once" 403.
SP="<s>Once</s>"
tok_plain=$("$PL_BINARY" tokenize -m "$M" --add-special "$SP")
tok_special=$("$PL_BINARY" tokenize -m "$M" --add-special --parse-special "$SP")
expect "tokenize --parse-special" "$tok_special" "[1, 1, 403, 2]"
plain=$("$PL_BINARY" generate -m "$M" -p "$SP" -n 1 --temperature 0 --json 2>"$tmp/err")
expect "generate without --parse-special exit" "$?" 0
special=$("$PL_BINARY" generate -m "$M" -p "$SP" -n 1 --temperature 0 --json --parse-special 2>"$tmp/err")
expect "generate --parse-special exit" "$?" 0
python3 - "$plain" "$special" "$tok_plain" <<'PY' && ok || bad "generate --parse-special prompt ids"
import json, sys
plain, special, tok_plain = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
ids = plain["prompt_ids"]
assert ids == tok_plain, (ids, tok_plain)                 # the engine tokenizes as `tokenize` does
assert ids[0] == 1 and 1 not in ids[1:] and 2 not in ids, ids  # BOS added, "<s>" "</s>" are text
assert len(ids) > 4, ids
assert special["prompt_ids"] == [1, 1, 403, 2], special["prompt_ids"]
assert len(special["ids"]) == 1 and len(plain["ids"]) == 1
PY
cat > "$tmp/ps.jsonl" <<JL
{"prompt": "$SP", "max_tokens": 1, "temperature": 0}
{"prompt": "$SP", "max_tokens": 1, "temperature": 0, "parse_special": true}
{"prompt": "$SP", "max_tokens": 1, "temperature": 0, "parse_special": false}
{"prompt": "$SP", "max_tokens": 1, "parse_special": 1}
{"prompt": "$SP", "max_tokens": 1, "temperature": 0, "parse_special": null}
{"prompt": "Once upon a time", "max_tokens": 1, "temperature": 0, "add_special_tokens": false}
{"prompt": "Once upon a time", "max_tokens": 1, "temperature": 0, "add_special_tokens": true}
JL
"$PL_BINARY" generate -m "$M" --input "$tmp/ps.jsonl" --output "$tmp/ps_out.jsonl" 2>"$tmp/err"
expect "batch parse_special exit (a bad line makes it 1)" "$?" 1
python3 - "$tmp/ps_out.jsonl" "$tok_plain" <<'PY' && ok || bad "batch parse_special"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
plain = json.loads(sys.argv[2])
assert [l["index"] for l in lines] == [0, 1, 2, 3, 4, 5, 6], lines
assert lines[0]["prompt_ids"] == plain, lines[0]
assert lines[1]["prompt_ids"] == [1, 1, 403, 2], lines[1]
assert lines[2]["prompt_ids"] == plain, lines[2]
assert "'parse_special'" in lines[3]["error"] and "boolean" in lines[3]["error"], lines[3]
assert lines[4]["prompt_ids"] == plain, lines[4]
assert lines[5]["prompt_ids"] == [403, 407, 261, 378], lines[5]      # add_special_tokens: false
assert lines[6]["prompt_ids"] == [1, 403, 407, 261, 378], lines[6]
PY
"$PL_BINARY" generate --help | grep -q -- "--parse-special" && ok || bad "--parse-special in generate --help"

# ---- usage errors: exit 2 ----
for args in "" "-m $M" "-m $M -p x --prompt-ids 1" "-m $M -p x --temperature hot" \
            "-m $M -p x --block-size 3" "-m $M -p x --kv-cache-dtype q4" "-m $M -p x --bogus" \
            "-m $M --input $tmp/in.jsonl" "-m $M -p x --top-p 0"; do
    # shellcheck disable=SC2086
    "$PL_BINARY" generate $args >/dev/null 2>&1
    expect "usage error ($args)" "$?" 2
done

# ---- runtime errors and bad model files: exit 1, one line on stderr ----
one_line() { # one_line DESCRIPTION PATTERN COMMAND...
    local what=$1 pat=$2
    shift 2
    "$@" >/dev/null 2>"$tmp/err"
    local rc=$?
    local n
    n=$(wc -l <"$tmp/err")
    if [ "$rc" -eq 1 ] && [ "$n" -eq 1 ] && grep -Eqi -- "$pat" "$tmp/err" &&
        ! grep -q "Sanitizer\|runtime error" "$tmp/err"; then ok
    else bad "$what: rc=$rc lines=$n: $(head -c 300 "$tmp/err")"; fi
}
one_line "token id out of range" "token id 9999" "$PL_BINARY" generate -m "$M" --prompt-ids 1,9999
one_line "prompt too long" "context length" "$PL_BINARY" generate -m "$M" -p "x" -n 5000
one_line "tiny kv budget" "kv-cache-memory" "$PL_BINARY" generate -m "$M" -p x --kv-cache-memory 1K
one_line "q8_0 KV cache, head_dim 8" "KV cache dtype q8_0 with head_dim 8.*multiple of 32" \
    "$PL_BINARY" generate -m "$M" -p x --kv-cache-dtype q8_0
"$PL_BINARY" generate -m "$M" -p x --kv-cache-dtype q3 >/dev/null 2>"$tmp/err"
expect "--kv-cache-dtype q3: usage error" "$?" 2
grep -q "'q3' is not one of auto, f16, bf16, f32, q8_0, q4_0" "$tmp/err" && ok ||
    bad "--kv-cache-dtype q3 names the valid values: $(cat "$tmp/err")"
: >"$tmp/empty.gguf"
one_line "empty file" "empty" "$PL_BINARY" generate -m "$tmp/empty.gguf" -p x
printf 'PK\003\004not a gguf at all' >"$tmp/zip.gguf"
one_line "wrong magic" "magic" "$PL_BINARY" generate -m "$tmp/zip.gguf" -p x
for cut in 10 100 1000 50000 1000000; do
    head -c $cut "$M" >"$tmp/cut.gguf"
    one_line "truncated at $cut" "truncated|end of the file|exceeds|beyond" \
        "$PL_BINARY" generate -m "$tmp/cut.gguf" -p x
done
python3 "$HERE/gguf_patch.py" "$M" "$tmp/arch.gguf" arch gpt9x
one_line "unknown architecture" "architecture 'gpt9x'" "$PL_BINARY" generate -m "$tmp/arch.gguf" -p x
python3 "$HERE/gguf_patch.py" "$Q" "$tmp/type.gguf" type blk.0.attn_q.weight 16
one_line "unsupported tensor type" "blk.0.attn_q.weight.*iq2_xxs" "$PL_BINARY" generate -m "$tmp/type.gguf" -p x
python3 "$HERE/gguf_patch.py" "$M" "$tmp/drop.gguf" drop blk.3.ffn_up.weight
one_line "missing tensor" "missing tensor 'blk.3.ffn_up.weight'" "$PL_BINARY" generate -m "$tmp/drop.gguf" -p x


# ---- structured output from the CLI ----
out=$("$PL_BINARY" generate -m "$M" -p "Lily is" -n 40 --seed 3 --n 3 --json \
      --regex "(happy|sad), [0-9]{1,2} years" 2>"$tmp/err")
python3 - "$out" <<'PY' && ok || bad "generate --regex: $out $(head -c 300 "$tmp/err")"
import json, re, sys
lines = [json.loads(l) for l in sys.argv[1].splitlines()]
assert len(lines) == 3, lines
for d in lines:
    assert re.fullmatch(r"(happy|sad), [0-9]{1,2} years", d["text"]) and d["finish_reason"] == "stop", d
PY
printf '{"type": "object", "properties": {"n": {"type": "integer"}, "ok": {"type": "boolean"}}, "required": ["n", "ok"]}' >"$tmp/s.json"
out=$("$PL_BINARY" generate -m "$M" -p "Tom" -n 60 --temperature 0.8 --seed 1 --json --json-schema "$tmp/s.json" 2>"$tmp/err")
python3 -c "import json,sys; d=json.loads(sys.argv[1]); v=json.loads(d['text']); assert type(v['n']) is int and type(v['ok']) is bool, d" "$out" && ok || bad "generate --json-schema: $out"
out=$("$PL_BINARY" generate -m "$M" -p "Tom" -n 10 --temperature 0 --choice yes --choice "no way" --json)
python3 -c "import json,sys; d=json.loads(sys.argv[1]); assert d['text'] in ('yes', 'no way'), d" "$out" && ok || bad "generate --choice: $out"
one_line "bad regex" "regex: missing '\)'" "$PL_BINARY" generate -m "$M" -p x --regex "a("
one_line "bad schema" "json_schema: at '#': 'multipleOf' is not supported" "$PL_BINARY" generate -m "$M" -p x \
    --json-schema <(echo '{"type": "integer", "multipleOf": 2}')
"$PL_BINARY" generate -m "$M" -p x --regex a --choice b >/dev/null 2>"$tmp/err"
expect "two constraints: usage error" "$?" 2

# ---- PAGELLM_STEP_LOG: one line per model step (docs/SERVER.md, "Step log") ----
PAGELLM_STEP_LOG="$tmp/steps.log" "$PL_BINARY" generate -m "$M" --prompt-ids 1,403,407,261,378 \
    -n 6 --temperature 0 >/dev/null 2>"$tmp/err"
expect "step log: generate exit" "$?" 0
python3 - "$tmp/steps.log" <<'PY' && ok || bad "step log lines"
import sys
lines = open(sys.argv[1]).read().splitlines()
assert lines[0].split() == ["#", "start_s", "seconds", "items", "tokens", "prefill_tokens",
                            "context_tokens", "free_blocks", "waiting", "running"], lines[0]
rows = [[float(v) for v in l.split()] for l in lines[1:]]
# the 5-token prompt in one step, then one token a step for the 5 tokens after the first
assert [r[3] for r in rows] == [5, 1, 1, 1, 1, 1], rows
assert [r[4] for r in rows] == [5, 0, 0, 0, 0, 0], rows
assert [r[5] for r in rows] == [5, 6, 7, 8, 9, 10], rows
assert all(r[2] == 1 and r[1] > 0 and r[6] >= 0 for r in rows), rows
assert all(a[0] < b[0] for a, b in zip(rows, rows[1:])), rows
assert rows[-1][8] in (0, 1) and rows[0][8] == 1, rows
PY
PAGELLM_STEP_LOG="$tmp/no/such/dir/steps.log" "$PL_BINARY" generate -m "$M" -p x -n 2 >/dev/null 2>"$tmp/err"
expect "step log: an unwritable path still generates" "$?" 0
grep -q "PAGELLM_STEP_LOG: cannot write" "$tmp/err" && ok || bad "step log: unwritable path warns: $(cat "$tmp/err")"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
