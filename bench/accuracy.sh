#!/usr/bin/env bash
# Measures pagellm against llama.cpp's reference continuations ($SHARED/testdata/reference) on
# every instruction set this machine has, and prints the markdown table of docs/ACCURACY.md:
# per model and ISA, max and mean |Δ logprob| over all reference steps (teacher-forced, f32 KV
# cache, block size 16), then the f16-KV rows of the block-size matrix.
#   bash bench/accuracy.sh [BUILD_DIR]      (BUILD_DIR: a build with test_reference; build/)
# It runs test_reference with PL_REF_MEASURE=1 (report, do not judge) and PAGELLM_ISA set.
# A measurement, not a test: CI is cleared for it (the tests refuse both knobs under CI=true).
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:-build}/test_reference"
[ -x "$bin" ] || { echo "accuracy.sh: $bin not built" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
isas="scalar avx2"
grep -qw avx512f /proc/cpuinfo && isas="$isas avx512"
for isa in $isas; do
  CI= PAGELLM_ISA=$isa PL_REF_MEASURE=1 "$bin" 2>&1 | grep 'max |' | sed "s/^/$isa /" >>"$tmp/all"
done
python3 - "$tmp/all" $isas <<'EOF'
import sys, collections
rows = collections.OrderedDict()
isas = sys.argv[2:]
for line in open(sys.argv[1]):
    f = line.split()
    isa, model, bs, kv = f[0], f[1], f[2], f[3]
    mx, mean = float(f[f.index('|Δ|') + 1]), float(f[f.index('mean') + 1])
    if bs != 'bs=16' and kv == 'kv=f32':
        continue  # the f32 rows of other block sizes repeat bs=16's
    rows.setdefault((model, kv), {})[isa] = (mx, mean)
print('| model | KV | ' + ' | '.join(f'{i} max | {i} mean' for i in isas) + ' | largest |')
print('| --- | --- | ' + ' | '.join('---: | ---:' for _ in isas) + ' | ---: |')
for (model, kv), per in rows.items():
    cells = ' | '.join(f'{per[i][0]:.2e} | {per[i][1]:.2e}' if i in per else '- | -' for i in isas)
    print(f'| {model} | {kv[3:]} | {cells} | {max(v[0] for v in per.values()):.2e} |')
EOF
