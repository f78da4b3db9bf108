#!/usr/bin/env bash
# Whole-step decode time through the engine, paged vs vattention (4K and 64K pages), over context
# length (issue 37). A point is two runs of N requests of L prompt tokens with O1 and O2 output
# tokens: the engine thread's CPU seconds (`step_cpu_s`, what a loaded machine moves least) of
# the second minus the first, over O2 - O1, is one decode step of N sequences at context about
# L + (O1 + O2) / 2 (the prefills are the same work and cancel). Layouts run interleaved inside
# each repetition; the table gives medians and the spread (min-max) over the repetitions.
#
#   MODEL=model.gguf bash bench/vattn_step.sh        # JSON lines into $OUT/step.jsonl, a table
#
# Environment: MODEL, PL (build/pagellm), OUT (bench/results/vattn), REPS (3), CTXS ("256 1024
# 1920"), N (4 requests), O1 (16), O2 (80), KV_MEM (256M).
set -uo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:?MODEL=path of a GGUF model}
PL=${PL:-build/pagellm}
OUT=${OUT:-bench/results/vattn}
REPS=${REPS:-3}
CTXS=${CTXS:-256 1024 1920}
N=${N:-4}
O1=${O1:-16}
O2=${O2:-80}
KV_MEM=${KV_MEM:-256M}
mkdir -p "$OUT"
: >"$OUT/step.jsonl"
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for rep in $(seq "$REPS"); do
    for L in $CTXS; do
        for lay in "paged" "vattention 4K" "vattention 64K"; do
            set -- $lay
            flags=(--kv-layout "$1")
            [ $# -gt 1 ] && flags+=(--kv-page-size "$2")
            for O in "$O1" "$O2"; do
                "$PL" bench throughput -m "$MODEL" -t 1 --seed 1 --dataset "fixed:$L:$O" \
                    --num-prompts "$N" --kv-cache-memory "$KV_MEM" --max-model-len 2048 \
                    "${flags[@]}" --label "$lay|$L|$O|$rep" --output "$OUT/step.jsonl" \
                    >/dev/null 2>&1 || echo "vattn_step.sh: $lay L=$L O=$O failed" >&2
            done
        done
    done
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
python3 - "$OUT/step.jsonl" "$O1" "$O2" "$N" <<'PY'
import json, statistics, sys
path, o1, o2, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
cpu = {}
for line in open(path):
    d = json.loads(line)
    lay, L, O, rep = d["label"].split("|")
    cpu[(lay, int(L), int(O), rep)] = d["step_cpu_s"]
step = {}
for (lay, L, O, rep), c in cpu.items():
    if O == o2 and (lay, L, o1, rep) in cpu:
        step.setdefault((lay, L), []).append((c - cpu[(lay, L, o1, rep)]) / (o2 - o1) * 1e3)
lays = ["paged", "vattention 4K", "vattention 64K"]
print(f"Decode step of {n} sequences, engine thread CPU ms per step (median, min-max):\n")
print("| context | " + " | ".join(lays) + " | vattention 4K / paged | vattention 64K / paged |")
print("|---|" + "---:|" * (len(lays) + 2))
for L in sorted({k[1] for k in step}):
    med = {l: statistics.median(step[(l, L)]) for l in lays if (l, L) in step}
    cells = [f"{med[l]:.2f} ({min(step[(l, L)]):.2f}-{max(step[(l, L)]):.2f})" if l in med else "-"
             for l in lays]
    ratios = [f"{med[l] / med['paged']:.3f}" if l in med and "paged" in med else "-" for l in lays[1:]]
    print(f"| {L + (o1 + o2) // 2} | " + " | ".join(cells + ratios) + " |")
PY
