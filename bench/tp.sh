#!/usr/bin/env bash
# Tensor parallelism (issue 13): TP = 1 with 2 threads against TP = 2 with 1 thread per rank,
# interleaved, on one model: decode at B = 1 and B = 32, prefill; then each TP = 2 rank's report
# (resident memory, bytes per step message, reductions, the reduction probe). Prints one line
# per run and a summary.
#
# usage: bench/tp.sh MODEL.gguf [REPS]     (PL_BINARY: the pagellm binary, default build/pagellm)
# Make a model with `pagellm mkmodel` (docs/BENCHMARKS.md gives the shapes); keep it outside the
# repository.
set -eu
M=${1:?usage: bench/tp.sh MODEL.gguf [REPS]}
REPS=${2:-3}
BIN=${PL_BINARY:-build/pagellm}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# name dataset prompts field (TP_WORKLOADS replaces them, same format: shorter runs for big models)
WORKLOADS=${TP_WORKLOADS:-"decode-b1 fixed:16:128 1 output_tokens_per_s
decode-b32 fixed:16:64 32 output_tokens_per_s
prefill fixed:512:1 4 total_tokens_per_s"}

field() { python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['$1'])"; }

echo "$WORKLOADS" | while read -r name ds np f; do
    for r in $(seq 1 "$REPS"); do
        a=$("$BIN" bench throughput -m "$M" --dataset "$ds" --num-prompts "$np" -t 2 \
            --temperature 0 --kv-cache-memory 512M 2>"$tmp/err1.$name" </dev/null | field "$f")
        b=$(mpirun -np 2 "$BIN" bench throughput -m "$M" --dataset "$ds" --num-prompts "$np" -t 1 \
            --temperature 0 --kv-cache-memory 256M --tensor-parallel-size 2 2>"$tmp/err.$name" </dev/null |
            field "$f")
        echo "$name rep $r: TP=1 x 2 threads $a tok/s, TP=2 x 1 thread $b tok/s"
        echo "$name $a $b" >>"$tmp/all"
    done
    grep "one process: resident" "$tmp/err1.$name" | sed "s/^/  $name TP=1: /"
    grep -a "tensor parallel" "$tmp/err.$name" | sed "s/^/  $name: /"
done
python3 - "$tmp/all" <<'PY'
import sys, statistics
rows = {}
for line in open(sys.argv[1]):
    n, a, b = line.split()
    rows.setdefault(n, []).append((float(a), float(b)))
print("workload | TP=1 (2 threads) tok/s | TP=2 (1 thread/rank) tok/s | TP=2 / TP=1 (median of ratios)")
for n, v in rows.items():
    print(f"{n} | {statistics.median(a for a, _ in v):.1f} | {statistics.median(b for _, b in v):.1f} | "
          f"{statistics.median(b / a for a, b in v):.2f}")
PY
