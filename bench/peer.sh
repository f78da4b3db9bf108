#!/usr/bin/env bash
# Issue 22's table in one run: pagellm beside today's llama.cpp (and, with IK_LLAMA_CPP, the
# CPU-tuned fork ik_llama.cpp, issue 35) on the same mkmodel files, each row's programs
# interleaved, REPS repetitions each (docs/BENCHMARKS.md, "Against today's llama.cpp"). Prints
# the peers' commits and dates, the machine and its flags, then one markdown row per test:
# pagellm tokens/s, llama.cpp tokens/s, ratio, ik_llama.cpp tokens/s and ratio (llama-bench rows,
# with its run-time repacking -rtr 1), and pagellm's % of the relevant peak (FMA for f16, int8
# VNNI for quantized types) or of the read bandwidth (decode B=1).
#   LLAMA_CPP=<llama.cpp dir> [IK_LLAMA_CPP=<dir>] MODELS=<dir> bash bench/peer.sh [BUILD_DIR]
# An AVX2 table on an AVX-512 machine: PAGELLM_ISA=avx2 (pagellm reads it) and peers built with
# -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF.
# PAGELLM_F16_WEIGHTS=bf16 runs pagellm's F16 rows with --f16-weights bf16 (AVX-512 BF16 only;
# what ik_llama.cpp's -rtr 1 does with F16; lossy: docs/ACCURACY.md).
# LLAMA_CPP: the peer built by ../shared/peer/build-llama-cpp.sh (binaries under build/bin).
# MODELS: where llama110m-T.gguf and llama1b-T.gguf are (made with `pagellm mkmodel --shape` and
# the llama-spm vocabulary when missing). ROWS picks rows by name (default: all), REPS (3).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
PL=$build/pagellm
L=${LLAMA_CPP:?set LLAMA_CPP to the llama.cpp checkout (binaries in build/bin)}/build/bin
IK=${IK_LLAMA_CPP:+$IK_LLAMA_CPP/build/bin}
[ -z "$IK" ] || [ -x "$IK/llama-bench" ] || { echo "peer.sh: no llama-bench under \$IK_LLAMA_CPP/build/bin" >&2; exit 1; }
M=${MODELS:?set MODELS to a folder for the benchmark models}
REPS=${REPS:-3}
VOCAB=../shared/testdata/vocab/ggml-vocab-llama-spm.gguf
for b in llama-bench llama-batched-bench; do
  [ -x "$L/$b" ] || { echo "peer.sh: no $b under \$LLAMA_CPP/build/bin" >&2; exit 1; }
done
mkdir -p "$M"
model() { # shape type -> path (made once)
  local f="$M/llama$1-$2.gguf"
  [ -f "$f" ] || "$PL" mkmodel "$f" --vocab-from "$VOCAB" --shape "$1" --type "$2" >/dev/null
  echo "$f"
}
echo "peer: llama.cpp $(git -C "$L/../.." log -1 --format='%h, commit date %cd' --date=short 2>/dev/null || echo '(no git metadata)')"
[ -z "$IK" ] || echo "peer: ik_llama.cpp $(git -C "$IK/../.." log -1 --format='%h, commit date %cd' --date=short 2>/dev/null || echo '(no git metadata)')"
echo "pagellm: $(git log -1 --format='%h, %cd' --date=short 2>/dev/null)"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; load at start $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%FT%TZ)"
echo "flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|f16c|avx_vnni|avx512f|avx512bw|avx512vl|avx512dq|avx512_vnni|avx512_bf16|amx_int8)$' | tr '\n' ' ')PAGELLM_ISA=${PAGELLM_ISA:-native} PAGELLM_F16_WEIGHTS=${PAGELLM_F16_WEIGHTS:-f16}"
echo
echo "| test | pagellm tok/s | llama.cpp tok/s | ratio | ik_llama.cpp tok/s | ratio | pagellm % of peak |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"

# pagellm: mean tokens/s and %peak (or %bw) of one test of `bench model --json`
pl_run() { # file test batch args... -> "tps pct"
  local f=$1 test=$2 batch=$3; shift 3
  "$PL" bench model -m "$f" --reps 1 --json "$@" 2>/dev/null | python3 -c '
import json, sys
test, batch = sys.argv[1], int(sys.argv[2])
for l in sys.stdin:
    if not l.startswith("{"): continue
    r = json.loads(l)
    if r["test"] == test and (test == "prefill" or r["batch"] == batch):
        pct = r["bandwidth_pct"] if test == "decode" and batch == 1 else r["peak_pct"]
        print(r["tokens_per_s"], pct if pct is not None else "nan")' "$test" "$batch"
}
lb_run() { # file p n [bin dir] [flags] -> tokens/s of the one test llama-bench runs
  "${4:-$L}/llama-bench" -m "$1" -t 2 -p "$2" -n "$3" -r 1 ${5:-} -o csv 2>/dev/null |
    python3 -c 'import csv, sys; [print(r["avg_ts"]) for r in csv.DictReader(sys.stdin)]'
}
bb_run() { # file npp ntg npl -> S_TG tokens/s
  "$L/llama-batched-bench" -m "$1" -t 2 -c 8192 -b 2048 -ub 512 -npp "$2" -ntg "$3" -npl "$4" \
      --output-format jsonl 2>/dev/null | python3 -c '
import json, sys
for l in sys.stdin:
    if l.startswith("{"): print(json.loads(l)["speed_tg"])'
}
ik_run() { # file p n -> ik_llama.cpp's tokens/s with its run-time repacking, or nan
  if [ -n "$IK" ]; then lb_run "$1" "$2" "$3" "$IK" "-rtr 1"; else echo nan; fi
}
row() { # name pl-command peer-command [ik-command]: REPS interleaved runs, means
  local name=$1 plc=$2 lbc=$3 ikc=${4:-echo nan} i out pls="" pcts="" lbs="" iks=""
  case " ${ROWS:-$name} " in *" $name "*) ;; *) return 0 ;; esac
  for ((i = 0; i < REPS; i++)); do
    out=$(eval "$plc") || out="nan nan"
    pls="$pls ${out%% *}"; pcts="$pcts ${out##* }"
    lbs="$lbs $(eval "$lbc" || echo nan)"
    iks="$iks $(eval "$ikc" || echo nan)"
  done
  python3 - "$name" "$pls" "$lbs" "$pcts" "$iks" <<'PY'
import math, sys
name, pls, lbs, pcts, iks = sys.argv[1], *[[float(v) for v in a.split()] for a in sys.argv[2:]]
mean = lambda v: sum(v) / len(v) if v and not any(math.isnan(x) for x in v) else float("nan")
p, l, c, k = mean(pls), mean(lbs), mean(pcts), mean(iks)
spread = lambda v: f" ({min(v):.0f}-{max(v):.0f})" if len(v) > 1 else ""
ik = "- | -" if math.isnan(k) else f"{k:.1f}{spread(iks)} | **{p / k:.2f}x**"
print(f"| {name} | {p:.1f}{spread(pls)} | {l:.1f}{spread(lbs)} | **{p / l:.2f}x** | {ik} | {c:.0f}% |")
PY
}

for t in f16 q8_0 q4_k_m q5_k_m q3_k; do
  f=$(model 110m $t)
  row "110m-$t-prefill512" "pl_run $f prefill 0 -p 512 -n 0" "lb_run $f 512 0" "ik_run $f 512 0"
  row "110m-$t-decode1" "pl_run $f decode 1 -p 0 -n 128 -b 1 --ctx 0" "lb_run $f 0 128" "ik_run $f 0 128"
done
f=$(model 110m f16)
row "110m-f16-decode32" "pl_run $f decode 32 -p 0 -n 128 -b 32 --ctx 128" "bb_run $f 128 128 32"
for t in f16 q8_0 q4_k_m q5_k_m q3_k; do
  f=$(model 1b $t)
  row "1b-$t-prefill256" "pl_run $f prefill 0 -p 256 -n 0" "lb_run $f 256 0" "ik_run $f 256 0"
  row "1b-$t-decode1" "pl_run $f decode 1 -p 0 -n 32 -b 1 --ctx 0" "lb_run $f 0 32" "ik_run $f 0 32"
done
f=$(model 1b q4_k_m)
row "1b-q4_k_m-decode16" "pl_run $f decode 16 -p 0 -n 64 -b 16 --ctx 64" "bb_run $f 64 64 16"
echo
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
