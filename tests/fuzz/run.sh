#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang, ASan + UBSan, in build-fuzz/) and runs each
# for SECONDS (default 30), one target per core at a time: first the committed regression inputs
# of tests/fuzz/regressions/<name>/ are replayed, then the target fuzzes from its seed corpus
# tests/fuzz/corpus/<name>/ (plus inputs made at run time from $PL_SHARED_DIR) into a scratch
# corpus build-fuzz/fuzz/<name>/corpus.
# Prints each target's executions and ends with one line "N passed, N failed". A crash fails its
# target; the log build-fuzz/fuzz/<name>.log and the crashing input's path are printed.
# After fixing a crash, commit its input as tests/fuzz/regressions/<name>/<what-it-was> so that
# every run replays it. One input by hand: PL_SHARED_DIR=../shared build-fuzz/fuzz_<name> FILE.
# Usage: bash tests/fuzz/run.sh [SECONDS]
set -uo pipefail
cd "$(dirname "$0")/../.."
secs="${1:-30}"
root="$(pwd)"
shared="${PL_SHARED_DIR:-$root/../shared}"
build=build-fuzz
# Every target of tests/fuzz/fuzz_*.c (a new file is fuzzed without being listed here); a subset
# for local debugging: PL_FUZZ_TARGETS="gguf sse", refused under CI=true (tests/e2e/ci_env.sh).
. tests/e2e/ci_env.sh
refuse_knob PL_FUZZ_TARGETS
all_targets=$(for f in tests/fuzz/fuzz_*.c; do t=${f##*/fuzz_}; echo "${t%.c}"; done)
targets="${PL_FUZZ_TARGETS:-$all_targets}"

echo "== fuzz build ($build)"
if ! { cmake -S . -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug \
         -DCMAKE_C_FLAGS_DEBUG="-O1 -g1" -DPL_FUZZ=ON -DPL_SHARED_DIR="$shared" >/dev/null &&
       cmake --build "$build" --target fuzz -j "$(nproc)" >"$build/fuzz-build.log" 2>&1; }; then
  [ -f "$build/fuzz-build.log" ] && tail -30 "$build/fuzz-build.log"
  echo "fuzz build failed"
  echo "0 passed, 1 failed"
  exit 1
fi

# Seeds made from the shared test data (never copied into the repo).
seeds="$build/fuzz/shared-seeds"
rm -rf "$seeds"
mkdir -p "$seeds"/{gguf,tokenizer,jinja,request}
for f in "$shared"/models/stories260K.gguf "$shared"/testdata/vocab/ggml-vocab-*.gguf; do
  [ -f "$f" ] && head -c 16384 "$f" >"$seeds/gguf/head-$(basename "$f" .gguf)"
done
python3 - "$shared" "$seeds" <<'PY' || echo "note: no seeds from $shared"
import glob, json, os, sys
shared, seeds = sys.argv[1], sys.argv[2]
for i, path in enumerate(sorted(glob.glob(shared + "/testdata/vocab/*.inp"))):
    cases = open(path, "rb").read().split(b"\n__ggml_vocab_test__\n")
    for j, case in enumerate(cases[:48]):
        # fuzz_tokenizer's control byte: bit 0 GPT-2, bit 7 llama-spm, both qwen35, bits 6+0
        # gemma-4; the others run on stories260K
        ctl = {"gpt-2": 1, "llama-spm": 128, "qwen35": 129, "gemma-4": 65}.get(
            os.path.basename(path)[len("ggml-vocab-"):-len(".gguf.inp")], 0)
        open(f"{seeds}/tokenizer/v{i}-{j}", "wb").write(bytes([ctl]) + case[:2048])
for path in sorted(glob.glob(shared + "/testdata/chat-templates/*.jinja")):
    name = os.path.basename(path)[:-6]
    open(f"{seeds}/jinja/{name}", "wb").write(open(path, "rb").read())
try:
    convs = json.load(open(shared + "/testdata/chat-templates/conversations.json"))
    convs = convs if isinstance(convs, list) else list(convs.values())
    for k, c in enumerate(convs):
        c = c.get("context", c) if isinstance(c, dict) else c
        if isinstance(c, dict) and "messages" in c:
            body = {"messages": c["messages"], "add_generation_prompt": c.get("add_generation_prompt", True)}
            open(f"{seeds}/request/conv{k}", "wb").write(b"\1" + json.dumps(body).encode())
except (OSError, ValueError):
    pass
PY

max_len() {
  case "$1" in
    gguf|jinja) echo 16384 ;;
    request) echo 8192 ;;
    *) echo 4096 ;;
  esac
}

export PL_SHARED_DIR="$shared"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# One target: replay its regressions, fuzz it, print its line and write ok/failed to $dir/result.
run_target() {
  local t=$1 bin="$build/fuzz_$1" dir="$build/fuzz/$1" log="$build/fuzz/$1.log" ok=1 execs crash
  local regs corpora
  rm -rf "$dir"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  : >"$log"
  # Regressions: every committed crashing input must now run clean.
  regs=(tests/fuzz/regressions/"$t"/*)
  if [ -e "${regs[0]}" ]; then
    if ! "$bin" "${regs[@]}" >>"$log" 2>&1; then
      ok=0
      echo "fuzz_$t: a regression input fails again: $(grep -Eo 'Running: .*' "$log" | tail -1 | cut -c10-)"
    fi
  fi
  if [ "$ok" = 1 ]; then
    corpora=("$dir/corpus" "tests/fuzz/corpus/$t")
    [ -d "$seeds/$t" ] && [ -n "$(ls -A "$seeds/$t")" ] && corpora+=("$seeds/$t")
    "$bin" -max_total_time="$secs" -print_final_stats=1 -max_len="$(max_len "$t")" -timeout=20 \
           -rss_limit_mb=2048 -artifact_prefix="$dir/artifacts/" "${corpora[@]}" >>"$log" 2>&1 || ok=0
  fi
  execs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' | tail -1)
  if [ "$ok" = 1 ]; then
    echo "fuzz_$t: ok, ${execs:-?} executions in ${secs}s"
    echo ok >"$dir/result"
  else
    echo "fuzz_$t: FAILED after ${execs:-?} executions; log $log"
    grep -E 'ERROR: (AddressSanitizer|UndefinedBehaviorSanitizer|libFuzzer)|runtime error|SUMMARY' "$log" | head -5
    crash=$(grep -Eo '(Test unit written to|artifact_prefix=[^;]*; Test unit written to) [^ ]+' "$log" | awk '{print $NF}' | tail -1)
    [ -n "$crash" ] && echo "fuzz_$t: crashing input: $crash"
    echo failed >"$dir/result"
  fi
}

# One target per core at a time (each libFuzzer process is single-threaded), so the wall time is
# about SECONDS x targets / cores while every target still fuzzes for SECONDS.
jobs_max=${PL_FUZZ_JOBS:-$(nproc)}
for t in $targets; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
  run_target "$t" &
done
wait
passed=0; failed=0
for t in $targets; do
  if [ "$(cat "$build/fuzz/$t/result" 2>/dev/null)" = ok ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
