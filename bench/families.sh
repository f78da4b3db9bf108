#!/usr/bin/env bash
# Issue 33's speed item: the new families at their real layer shapes against llama.cpp, in one
# run (docs/BENCHMARKS.md, "The new families at their real shapes"). Per family one real model's
# shape (`mkmodel --shape`, random weights) cut to DEPTH layers, and a llama model with the same
# sizes (dim, heads, KV heads, head size, FFN, depth, vocabulary) as its in-run baseline; each
# made in f16 by pagellm and quantized to Q4_K_M by llama.cpp's llama-quantize. Every rep runs
# every (model, test) pair, pagellm then llama-bench, 2 threads; the cells are medians over REPS.
# Prints per model pagellm and llama.cpp tokens/s and their ratio, then per family its ratio
# divided by its llama twin's ratio (1.00: the family is as fast against llama.cpp as llama is);
# ratios are medians of each rep's own ratio (the two programs ran back to back in it).
#   LLAMA_CPP=<llama.cpp dir> MODELS=<dir> bash bench/families.sh [BUILD_DIR]
# LLAMA_CPP: the peer (binaries in build/bin: llama-bench, llama-quantize). MODELS: a folder for
# the models (required; made when missing, never inside the repository).
# FAMILIES (default "qwen3-8b gemma3-4b mistral3-3b"), DEPTH (4), REPS (3), PROMPT (512),
# DECODE (64 steps), VOCAB (the 32,000-token llama-spm vocabulary of the other tables).
# TWIN_<shape> ("dim layers heads kv_heads ffn head_dim", the shape's name with - and . as _):
# the twin's sizes when the file has per-layer sizes (gemma4: FFN widths and head sizes per
# layer) that one llama model cannot have; say in the table which sizes were chosen.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
PL=$build/pagellm
L=${LLAMA_CPP:?set LLAMA_CPP to the llama.cpp checkout (binaries in build/bin)}/build/bin
M=${MODELS:?set MODELS to a folder for the models, outside the repository}
FAMILIES=${FAMILIES:-qwen3-8b gemma3-4b mistral3-3b}
DEPTH=${DEPTH:-4}
REPS=${REPS:-3}
PROMPT=${PROMPT:-512}
DECODE=${DECODE:-64}
VOCAB=${VOCAB:-../shared/testdata/vocab/ggml-vocab-llama-spm.gguf}
for b in llama-bench llama-quantize; do
  [ -x "$L/$b" ] || { echo "families.sh: no $b under \$LLAMA_CPP/build/bin" >&2; exit 1; }
done
mkdir -p "$M"

# the llama twin's sizes of a shape: "dim layers heads kv_heads ffn head_dim" from its file
sizes() {
  "$PL" inspect "$1" 2>/dev/null | python3 -c '
import re, sys
t = sys.stdin.read()
def k(name, default=None):
    m = re.search(r"^\s*" + re.escape(name) + r"\s+(\d+)\s*$", t, re.M)
    if m: return int(m.group(1))
    if default is None: sys.exit("families.sh: no " + name + " in the inspect output")
    return default
d, h = k("embedding_length"), k("attention.head_count")
print(d, k("block_count"), h, k("attention.head_count_kv"), k("feed_forward_length"),
      k("attention.key_length", d // h))'
}
quantize() { # f16-file q4-file
  [ -f "$2" ] || "$L/llama-quantize" "$1" "$2" Q4_K_M >/dev/null 2>&1 ||
    { echo "families.sh: llama-quantize failed on $1" >&2; exit 1; }
}
models=()  # "family-file twin-file" per family
for s in $FAMILIES; do
  f16="$M/$s-L$DEPTH-f16.gguf" q4="$M/$s-L$DEPTH-q4_k_m.gguf"
  [ -f "$f16" ] || "$PL" mkmodel "$f16" --vocab-from "$VOCAB" --shape "$s" --layers "$DEPTH" \
      --type f16 >/dev/null
  quantize "$f16" "$q4"
  tv="TWIN_${s//[-.]/_}"
  if [ -n "${!tv:-}" ]; then read -r dim layers heads kv ffn hd <<<"${!tv}"
  else read -r dim layers heads kv ffn hd < <(sizes "$f16"); fi
  t16="$M/llama-$s-L$DEPTH-f16.gguf" t4="$M/llama-$s-L$DEPTH-q4_k_m.gguf"
  [ -f "$t16" ] || "$PL" mkmodel "$t16" --vocab-from "$VOCAB" --dim "$dim" --layers "$layers" \
      --heads "$heads" --kv-heads "$kv" --ffn "$ffn" --head-dim "$hd" --type f16 >/dev/null
  quantize "$t16" "$t4"
  models+=("$q4 $t4")
done

echo "peer: llama.cpp $(git -C "$L/../.." log -1 --format='%h, commit date %cd' --date=short 2>/dev/null || echo '(no git metadata)')"
echo "pagellm: $(git log -1 --format='%h, %cd' --date=short 2>/dev/null)"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; load at start $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%FT%TZ)"
echo "depth $DEPTH layers, prompt $PROMPT, decode $DECODE steps at batch 1, 2 threads, $REPS reps (medians)"

pl_run() { # file test args... -> tokens/s
  local f=$1 test=$2; shift 2
  "$PL" bench model -m "$f" --threads 2 --reps 1 --json "$@" 2>/dev/null | python3 -c '
import json, sys
for l in sys.stdin:
    if l.startswith("{") and json.loads(l)["test"] == sys.argv[1]:
        print(json.loads(l)["tokens_per_s"]); break
else: print("nan")' "$test" || echo nan
}
lb_run() { # file p n -> tokens/s
  "$L/llama-bench" -m "$1" -t 2 -p "$2" -n "$3" -r 1 -o csv 2>/dev/null | tr -d '"' |
    awk -F, 'NR == 1 {for (i = 1; i <= NF; i++) c[$i] = i; next} {print $c["avg_ts"]}' || echo nan
}
res=$(mktemp)
trap 'rm -f "$res"' EXIT
for ((r = 0; r < REPS; r++)); do
  echo "families.sh: rep $((r + 1)) of $REPS, $(date -u +%T)" >&2
  for pair in "${models[@]}"; do
    for f in $pair; do
      echo "$f prefill pagellm $(pl_run "$f" prefill -p "$PROMPT" -n 0)" >>"$res"
      echo "$f prefill llama.cpp $(lb_run "$f" "$PROMPT" 0)" >>"$res"
      echo "$f decode pagellm $(pl_run "$f" decode -p 0 -n "$DECODE" -b 1 --ctx 0)" >>"$res"
      echo "$f decode llama.cpp $(lb_run "$f" 0 "$DECODE")" >>"$res"
    done
  done
done
python3 - "$res" "${models[@]}" <<'PY'
import math, os, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f, test, prog, v = line.split()
    runs.setdefault((f, test, prog), []).append(float(v))
def med(f, test, prog):
    v = runs.get((f, test, prog), [])
    return statistics.median(v) if v and not any(math.isnan(x) for x in v) else float("nan")
def cell(f, test, prog):
    v = runs[(f, test, prog)]
    return f"{med(f, test, prog):.1f} ({min(v):.1f}-{max(v):.1f})"
def ratio(f, test): # median over reps of each rep's pagellm / llama.cpp (run back to back)
    return statistics.median(p / l for p, l in zip(runs[(f, test, "pagellm")],
                                                   runs[(f, test, "llama.cpp")]))
def rel(fam, twin, test): # median over reps of each rep's family ratio / twin ratio
    v = [(a / b) / (c / d) for a, b, c, d in zip(*(runs[(f, test, p)] for f in (fam, twin)
                                                    for p in ("pagellm", "llama.cpp")))]
    return statistics.median(v)
name = lambda f: os.path.basename(f).removesuffix(".gguf")
print("\n| model | test | pagellm tok/s | llama.cpp tok/s | ratio |")
print("| --- | --- | ---: | ---: | ---: |")
for pair in sys.argv[2:]:
    for f in pair.split():
        for test in ("prefill", "decode"):
            r = ratio(f, test)
            print(f"| {name(f)} | {test} | {cell(f, test, 'pagellm')} | {cell(f, test, 'llama.cpp')} | **{r:.2f}x** |")
print("\n| family | test | family ratio | llama twin ratio | family / twin |")
print("| --- | --- | ---: | ---: | ---: |")
for pair in sys.argv[2:]:
    fam, twin = pair.split()
    for test in ("prefill", "decode"):
        print(f"| {name(fam)} | {test} | {ratio(fam, test):.2f}x | {ratio(twin, test):.2f}x | "
              f"**{rel(fam, twin, test):.2f}** |")
PY
echo
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
