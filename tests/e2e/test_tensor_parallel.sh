#!/usr/bin/env bash
# Tensor parallelism over MPI (issue 13), end to end with `mpirun --oversubscribe -np 2`:
#   - TP = 2 against TP = 1 (stories260K with an f32 cache, synth-tiny q8_0): a batch of 8 greedy
#     requests and one of n = 2 (copy-on-write) under a KV budget small enough to preempt
#     (recompute, then swap; then with n-gram speculation), ids equal up to the first near-tie
#     and log-probabilities within docs/ACCURACY.md's bounds;
#   - two TP = 2 runs of seeded sampling give the same tokens and log-probabilities, bit for bit;
#   - refusals: N that does not divide the KV heads, a column slice off the quantization blocks
#     (q4_K), a world size that differs from N, a rank that cannot load its shard;
#   - TP = 4 (one KV head per rank) against TP = 1, and two TP = 4 runs bit for bit;
#   - a mixture of experts (a random gpt-oss, f32) at TP = 2 against TP = 1;
#   - issue 33's families (gemma3, gemma4 with per-layer embeddings and shared KV, gemma4's MoE)
#     at TP = 2 against TP = 1;
#   - --f16-weights bf16 (synth-tiny-f16): TP = 2 against TP = 1 in the mode (greedy ids
#     bitwise), ranks in different modes refused; below the avx512 level the mode's refusal;
#   - faults: a rank killed mid-run ends the job within seconds (generate: rank 1, rank 0; serve,
#     whose request in flight gets an error); a rank stopped (SIGSTOP) ends it at the
#     collectives' deadline.
# Skips (exit 77) when mpirun is not installed or the build has no MPI; under CI=true either is a
# failure (scripts/setup.sh installs Open MPI, and CMake builds with it when it is there).
set -u
: "${PL_BINARY:?PL_BINARY must point at the pagellm executable}"
: "${PL_SHARED_DIR:?PL_SHARED_DIR must point at the shared data folder}"
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/ci_env.sh"
command -v mpirun >/dev/null 2>&1 || skip_test "no mpirun (apt-get install openmpi-bin, or scripts/setup.sh)"
S="$PL_SHARED_DIR/models/stories260K.gguf"
Q="$PL_SHARED_DIR/models/synth-tiny-q8_0.gguf"
K="$PL_SHARED_DIR/models/synth-tiny-q4_k_m.gguf"
tmp=$(mktemp -d)
MPI_PID=""
trap '[ -n "$MPI_PID" ] && kill -KILL "$MPI_PID" 2>/dev/null; rm -rf "$tmp"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }

# Open MPI refuses root unless told; CI runs as root. Under ASan, Open MPI's own leaks are
# suppressed (tests/lsan_openmpi.supp names only its libraries).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export LSAN_OPTIONS="suppressions=$HERE/../lsan_openmpi.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
exec </dev/null # mpirun forwards stdin to rank 0: nothing here may eat the script's input
MPIRUN=(mpirun --oversubscribe --bind-to none -x LSAN_OPTIONS -x ASAN_OPTIONS -x PAGELLM_STEP_DELAY_MS
        -x PAGELLM_DIST_TIMEOUT)
# Open MPI unloads its plugins at MPI_Finalize, which leaves LeakSanitizer frames it cannot name:
# keep them loaded, and unwind fully (libraries without frame pointers), so the suppressions match.
export OMPI_MCA_mca_base_component_disable_dlclose=1
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
export PAGELLM_DIST_TIMEOUT=20 PAGELLM_STEP_DELAY_MS=0

if ! "${MPIRUN[@]}" -np 2 "$PL_BINARY" generate -m "$S" -p hi -n 2 --temperature 0 -t 1 \
        --tensor-parallel-size 2 >"$tmp/probe" 2>&1; then
    if grep -q "this build has no MPI" "$tmp/probe"; then
        skip_test "this build has no MPI (CMake found no Open MPI pkg-config ompi-c: apt-get install libopenmpi-dev)"
    fi
    echo "mpirun probe failed:"; cat "$tmp/probe"; exit 1
fi

# ---- TP = 2 against TP = 1: a batch of 8 that preempts ----
for i in 0 1 2 3 4 5 6 7; do
    echo "{\"prompt\": \"Once upon a time $i\", \"max_tokens\": 64, \"temperature\": 0, \"logprobs\": 2, \"ignore_eos\": true}"
done >"$tmp/greedy.jsonl"
# two greedy completions of one prompt share its blocks: the first append copies on write
echo '{"prompt": "Once upon a time", "n": 2, "max_tokens": 64, "temperature": 0, "logprobs": 2, "ignore_eos": true}' \
    >>"$tmp/greedy.jsonl"
# compare NAME MODEL BOUND TIE KV_TP1 KV_TP2 [engine flags]: the KV budgets give both the same
# block count (a TP = 2 rank holds half the KV heads, so half the bytes per block). The batch has
# 10 completions of 64 tokens: at least half of those 640 must be compared (tp_compare.py goes on
# while the ids agree; they may part only at a near-tie), so a TP = 2 run that parts early or
# returns less cannot pass by comparing little.
compare() {
    local name=$1 model=$2 bound=$3 tie=$4 kv1=$5 kv2=$6
    shift 6
    "$PL_BINARY" generate -m "$model" --input "$tmp/greedy.jsonl" --output "$tmp/$name.1" -t 1 \
        --kv-cache-memory "$kv1" -v "$@" 2>"$tmp/$name.err1" >/dev/null
    timeout 120 "${MPIRUN[@]}" -np 2 "$PL_BINARY" generate -m "$model" --input "$tmp/greedy.jsonl" \
        --output "$tmp/$name.2" -t 1 --kv-cache-memory "$kv2" -v --tensor-parallel-size 2 "$@" \
        2>"$tmp/$name.err2" >/dev/null
    local rc=$?
    if [ "$rc" != 0 ]; then bad "$name: TP=2 exit $rc: $(tail -3 "$tmp/$name.err2")"; return; fi
    local p1 p2
    p1=$(sed -n 's/.* \([0-9][0-9]*\) preemptions.*/\1/p' "$tmp/$name.err1")
    p2=$(sed -n 's/.* \([0-9][0-9]*\) preemptions.*/\1/p' "$tmp/$name.err2")
    if [ "${p1:-0}" -gt 0 ] && [ "$p1" = "$p2" ]; then ok; else bad "$name: preemptions $p1 vs $p2"; fi
    if python3 "$HERE/tp_compare.py" "$tmp/$name.1" "$tmp/$name.2" "$bound" "$tie" --min-compared 320 \
        >"$tmp/$name.cmp" 2>&1
    then ok; echo "$name: $(cat "$tmp/$name.cmp")"; else bad "$name: $(tail -2 "$tmp/$name.cmp")"; fi
}
# stories260K, f32 weights and cache: the f32 bound of docs/ACCURACY.md (1e-4).
compare stories "$S" 1e-4 0.02 400K 200K --kv-cache-dtype f32
# swap preemption instead of recompute: the copy lists reach the workers.
compare stories-swap "$S" 1e-4 0.02 400K 200K --kv-cache-dtype f32 --swap-space 4M \
    --preemption-mode swap
if grep -q "by swapping" "$tmp/stories-swap.err2" && ! grep -q "(0 by swapping)" "$tmp/stories-swap.err2"
then ok; else bad "stories-swap: no swap: $(grep preempt "$tmp/stories-swap.err2")"; fi
# speculative decoding (n-gram proposals verified in one step: several logits rows per sequence)
compare stories-spec "$S" 1e-4 0.02 400K 200K --kv-cache-dtype f32 --speculative-ngram
# synth-tiny q8_0, f16 cache: the q8_0 with f16 KV bound (0.25 = 1.5 x 0.166).
compare q8_0 "$Q" 0.25 0.5 1M 512K

# TP = 4 (stories260K has 4 KV heads: one per rank), one request, against TP = 1
head -1 "$tmp/greedy.jsonl" >"$tmp/one.jsonl"
"$PL_BINARY" generate -m "$S" --input "$tmp/one.jsonl" --output "$tmp/tp4.1" -t 1 --kv-cache-dtype f32 \
    2>/dev/null >/dev/null
if timeout 120 "${MPIRUN[@]}" -np 4 "$PL_BINARY" generate -m "$S" --input "$tmp/one.jsonl" \
        --output "$tmp/tp4.4" -t 1 --kv-cache-dtype f32 --tensor-parallel-size 4 2>"$tmp/tp4.err" >/dev/null &&
   python3 "$HERE/tp_compare.py" "$tmp/tp4.1" "$tmp/tp4.4" 1e-4 0.02 --min-compared 32 >"$tmp/tp4.cmp" 2>&1
then ok; echo "TP=4: $(cat "$tmp/tp4.cmp")"; else bad "TP=4: $(tail -n 2 "$tmp/tp4.err" "$tmp/tp4.cmp")"; fi
# ... and again: above 2 ranks the sums go through a reduce-scatter, in the same fixed order
timeout 120 "${MPIRUN[@]}" -np 4 "$PL_BINARY" generate -m "$S" --input "$tmp/one.jsonl" \
    --output "$tmp/tp4.again" -t 1 --kv-cache-dtype f32 --tensor-parallel-size 4 2>/dev/null >/dev/null
if python3 "$HERE/tp_compare.py" "$tmp/tp4.4" "$tmp/tp4.again" 0 0 --exact --min-compared 64 >/dev/null 2>&1; then ok
else bad "TP=4: two runs differ"; fi

# ---- a mixture of experts (issue 34): gpt-oss, f32 (router and biases, sinks, a window) ----
# every expert cut as a dense FFN over the ranks; 2 greedy requests against TP = 1
"$PL_BINARY" mkmodel "$tmp/moe.gguf" --vocab-from "$S" --arch gpt-oss --dim 64 --layers 2 \
    --heads 4 --kv-heads 2 --head-dim 16 --ffn 64 --sliding-window 8 --experts 4 --experts-used 2 \
    --expert-ffn 64 --seed 5 >/dev/null
head -2 "$tmp/greedy.jsonl" >"$tmp/two.jsonl"
"$PL_BINARY" generate -m "$tmp/moe.gguf" --input "$tmp/two.jsonl" --output "$tmp/moe.1" -t 1 \
    --kv-cache-dtype f32 2>/dev/null >/dev/null
if timeout 120 "${MPIRUN[@]}" -np 2 "$PL_BINARY" generate -m "$tmp/moe.gguf" --input "$tmp/two.jsonl" \
        --output "$tmp/moe.2" -t 1 --kv-cache-dtype f32 --tensor-parallel-size 2 2>"$tmp/moe.err" >/dev/null &&
   python3 "$HERE/tp_compare.py" "$tmp/moe.1" "$tmp/moe.2" 1e-4 0.02 --min-compared 64 >"$tmp/moe.cmp" 2>&1
then ok; echo "MoE TP=2: $(cat "$tmp/moe.cmp")"; else bad "MoE TP=2: $(tail -n 2 "$tmp/moe.err" "$tmp/moe.cmp")"; fi

# ---- issue 33's families: gemma3 (window layers with their own RoPE base, Q/K norms, soft-cap),
# gemma4 with per-layer embeddings and shared-KV layers (the workers' KV store of per-layer
# shapes), gemma4's MoE (dense FFN and experts reduced apart); 2 greedy requests each against
# TP = 1, within each family's f32 bound of docs/ACCURACY.md (gemma4 1e-3, its MoE 2.8e-4; the
# Gemma post-norms amplify the regrouped sums) ----
fam_base=(--vocab-from "$S" --dim 64 --heads 4 --kv-heads 2 --head-dim 16 --ffn 64 --seed 5)
g4=(--arch gemma4 --swa-pattern 2 --head-dim 16 --head-dim-swa 8 --kv-heads-full 2 --sliding-window 8
    --final-softcap 3)
family() { # family NAME BOUND MKMODEL_FLAGS...
    local name=$1 bound=$2
    shift 2
    "$PL_BINARY" mkmodel "$tmp/$name.gguf" "${fam_base[@]}" "$@" >/dev/null || { bad "$name: mkmodel"; return; }
    "$PL_BINARY" generate -m "$tmp/$name.gguf" --input "$tmp/two.jsonl" --output "$tmp/$name.1" -t 1 \
        --kv-cache-dtype f32 2>/dev/null >/dev/null
    if timeout 120 "${MPIRUN[@]}" -np 2 "$PL_BINARY" generate -m "$tmp/$name.gguf" --input "$tmp/two.jsonl" \
            --output "$tmp/$name.2" -t 1 --kv-cache-dtype f32 --tensor-parallel-size 2 2>"$tmp/$name.err" >/dev/null &&
       python3 "$HERE/tp_compare.py" "$tmp/$name.1" "$tmp/$name.2" "$bound" 0.02 --min-compared 64 >"$tmp/$name.cmp" 2>&1
    then ok; echo "$name TP=2: $(cat "$tmp/$name.cmp")"; else bad "$name TP=2: $(tail -n 2 "$tmp/$name.err" "$tmp/$name.cmp")"; fi
}
family gemma3 1e-4 --layers 2 --arch gemma3 --swa-pattern 2 --sliding-window 8 --final-softcap 3
family gemma4 1e-3 --layers 4 "${g4[@]}" --shared-kv-layers 2 --per-layer-dim 8 --ffn-wide 128
family gemma4-moe 2.8e-4 --layers 2 "${g4[@]}" --experts 4 --experts-used 2 --expert-ffn 64
# every layer windowed (Mistral-style): blocks behind the window leave the tables (-1 entries in
# the step message; a worker refused them and the step hung until the collective timed out)
family all-window 1e-4 --layers 2 --sliding-window 8
# KV cache groups (gemma3's halves: two tables, one pool) and layer kinds (gemma4: the window
# layers' own pool) run under TP too: the step message carries both tables, and the blocks that
# leave the window return to the pool on every rank as they do alone (greedy, no EOS: the same
# 60 tokens either way, so the same blocks leave the window; sampled, a run that met EOS early
# released fewer)
for name in gemma3 gemma4; do
    alone=$("$PL_BINARY" generate -m "$tmp/$name.gguf" -p "Once upon a time" -n 60 --temperature 0 --ignore-eos -t 1 -v 2>&1 >/dev/null |
            grep "blocks returned to the pool")
    tp=$(timeout 120 "${MPIRUN[@]}" -np 2 "$PL_BINARY" generate -m "$tmp/$name.gguf" -p "Once upon a time" \
            -n 60 --temperature 0 --ignore-eos -t 1 --tensor-parallel-size 2 -v 2>&1 >/dev/null | grep "blocks returned to the pool" | head -1)
    if [ -n "$alone" ] && [ "$alone" = "$tp" ]; then ok; echo "$name TP=2: $tp"
    else bad "$name TP=2 window release: alone [$alone], TP=2 [$tp]"; fi
done

# ---- seeded sampling: two TP = 2 runs agree bit for bit ----
for i in 0 1 2 3; do
    echo "{\"prompt\": \"Once upon a time $i\", \"max_tokens\": 48, \"temperature\": 1, \"seed\": $((7 + i)), \"logprobs\": 1}"
done >"$tmp/seeded.jsonl"
for r in a b; do
    timeout 120 "${MPIRUN[@]}" -np 2 "$PL_BINARY" generate -m "$S" --input "$tmp/seeded.jsonl" \
        --output "$tmp/seeded.$r" -t 1 --tensor-parallel-size 2 2>"$tmp/seeded.err" >/dev/null ||
        bad "seeded run $r: $(tail -2 "$tmp/seeded.err")"
done
if python3 "$HERE/tp_compare.py" "$tmp/seeded.a" "$tmp/seeded.b" 0 0 --exact --min-compared 96 \
        >"$tmp/seeded.cmp" 2>&1
then ok; echo "seeded: $(cat "$tmp/seeded.cmp")"; else bad "seeded: $(tail -2 "$tmp/seeded.cmp")"; fi

# ---- refusals: every rank exits non-zero, the message names the problem ----
refuse() { # refuse WORDS NP ARGS...
    local words=$1 np=$2
    shift 2
    timeout 60 "${MPIRUN[@]}" -np "$np" "$@" >"$tmp/refuse.out" 2>&1
    local rc=$?
    if [ "$rc" != 0 ] && [ "$rc" != 124 ] && grep -qF -- "$words" "$tmp/refuse.out"; then ok
    else bad "refuse '$words': exit $rc: $(head -3 "$tmp/refuse.out")"; fi
}
refuse "does not divide the model's 4 KV heads" 3 "$PL_BINARY" generate -m "$S" -p hi -n 2 -t 1 \
    --tensor-parallel-size 3
refuse "not a whole number of quantization blocks" 2 "$PL_BINARY" generate -m "$K" -p hi -n 2 -t 1 \
    --tensor-parallel-size 2
refuse "but the MPI job has 2 processes" 2 "$PL_BINARY" generate -m "$S" -p hi -n 2 -t 1 \
    --tensor-parallel-size 4
printf 'GGUF but not really' >"$tmp/broken.gguf"
timeout 60 mpirun --oversubscribe -x LSAN_OPTIONS -x ASAN_OPTIONS -np 1 "$PL_BINARY" generate -m "$S" \
    -p hi -n 2 -t 1 --tensor-parallel-size 2 : -np 1 "$PL_BINARY" generate -m "$tmp/broken.gguf" \
    -p hi -n 2 -t 1 --tensor-parallel-size 2 >"$tmp/refuse.out" 2>&1
rc=$?
if [ "$rc" != 0 ] && grep -q "rank 1 could not load its shard: .*broken.gguf" "$tmp/refuse.out"; then ok
else bad "shard load failure: exit $rc: $(head -3 "$tmp/refuse.out")"; fi

# ---- --f16-weights bf16 (issue 35): every rank rounds its F16 slices to bf16 at load ----
# The mode exists only at the avx512 level (AVX512-BF16's vdpbf16ps): below it every rank refuses
# it, naming the flag. That refusal is checked everywhere (PAGELLM_ISA=avx2 forces the level of an
# AVX2-only machine); the computation where /proc/cpuinfo has the avx512 level's features.
F16="$PL_SHARED_DIR/models/synth-tiny-f16.gguf"
refuse "--f16-weights bf16 (PAGELLM_F16_WEIGHTS) needs the avx512 kernel level" 2 \
    env PAGELLM_ISA=avx2 "$PL_BINARY" generate -m "$F16" -p hi -n 2 -t 1 --f16-weights bf16 \
    --tensor-parallel-size 2
cpu_flags=$(grep -m1 '^flags' /proc/cpuinfo)
has_bf16=1
for f in avx512f avx512bw avx512vl avx512dq avx512_vnni avx512_bf16 fma f16c; do
    [[ " $cpu_flags " == *" $f "* ]] || has_bf16=0
done
# a level forced below avx512 (a developer's run as an AVX2 machine; CI refuses the knob) is
# such a machine here too
case "${PAGELLM_ISA:-}" in "" | avx512) ;; *) has_bf16=0 ;; esac
if [ "$has_bf16" = 1 ]; then
    # TP = 2 against TP = 1 in the mode, greedy: the ids bitwise (tie 0: no parting at all; these
    # two requests have no near-tie there), log-probabilities within 1.5x the largest difference
    # measured (2.0e-2: bf16 activations turn the regrouped sums' last bits into bf16 steps, as
    # f16 ones do into f16 steps: 3.6e-3). A rank holding f16 weights parts request 0 at token 33.
    "$PL_BINARY" generate -m "$F16" --input "$tmp/two.jsonl" --output "$tmp/bf16.1" -t 1 \
        --f16-weights bf16 2>/dev/null >/dev/null
    if timeout 120 "${MPIRUN[@]}" -np 2 "$PL_BINARY" generate -m "$F16" --input "$tmp/two.jsonl" \
            --output "$tmp/bf16.2" -t 1 --f16-weights bf16 --tensor-parallel-size 2 \
            2>"$tmp/bf16.err" >/dev/null &&
       python3 "$HERE/tp_compare.py" "$tmp/bf16.1" "$tmp/bf16.2" 3e-2 0 --min-compared 128 >"$tmp/bf16.cmp" 2>&1
    then ok; echo "f16 weights as bf16 TP=2: $(cat "$tmp/bf16.cmp")"
    else bad "f16 weights as bf16 TP=2: $(tail -n 2 "$tmp/bf16.err" "$tmp/bf16.cmp")"; fi
    # ranks in different modes (a remote rank without PAGELLM_F16_WEIGHTS, say) are refused
    refuse "rank 0 holds its F16 matrices as bf16, this rank as f16" 1 "$PL_BINARY" generate \
        -m "$F16" -p hi -n 2 -t 1 --f16-weights bf16 --tensor-parallel-size 2 : -np 1 \
        "$PL_BINARY" generate -m "$F16" -p hi -n 2 -t 1 --f16-weights f16 --tensor-parallel-size 2
else
    echo "f16 weights as bf16: no AVX512-BF16 here (/proc/cpuinfo), so the mode is refused (checked" \
         "above) and TP = 2 against TP = 1 in it was not compared"
fi

# ---- a rank killed mid-run ends the job within seconds ----
# run_killed NAME CMD...: ranks write their pid, rank 1 is killed 1.5 s in; the job must be over
# 10 s later.
run_killed() {
    local name=$1
    shift
    rm -f "$tmp"/pid.*
    PAGELLM_STEP_DELAY_MS=20 "${MPIRUN[@]}" -np 2 sh -c \
        'echo $$ > "$0/pid.$OMPI_COMM_WORLD_RANK"; exec "$@"' "$tmp" "$@" \
        >"$tmp/$name.out" 2>"$tmp/$name.err" &
    MPI_PID=$!
}
wait_killed() { # wait_killed NAME [RANK [SIGNAL]]: signal a rank (1, KILL), check the job ends soon
    local name=$1 rank=${2:-1} sig=${3:-KILL}
    # running steps: generate -v has printed its KV cache line, serve its URL (startup under ASan
    # takes seconds, and a kill inside MPI's start-up is another story)
    for _ in $(seq 1 400); do
        grep -aq "^KV cache\|^serving" "$tmp/$name.err" "$tmp/$name.out" 2>/dev/null && break
        sleep 0.05
    done
    sleep 1.5
    kill -"$sig" "$(cat "$tmp/pid.$rank")" 2>/dev/null || bad "$name: no rank $rank to signal"
    local t0=$SECONDS
    for _ in $(seq 1 100); do kill -0 "$MPI_PID" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$MPI_PID" 2>/dev/null; then
        bad "$name: the job still runs 10 s after rank $rank got SIG$sig"
        kill -KILL "$MPI_PID"
    else
        ok
    fi
    wait "$MPI_PID"
    local rc=$?
    MPI_PID=""
    if [ "$rc" != 0 ]; then ok; else bad "$name: exit 0 after a rank died"; fi
    echo "$name: job over $((SECONDS - t0)) s after rank $rank got SIG$sig, exit $rc; the first" \
         "error: $(grep -a -m1 "tensor parallel" "$tmp/$name.err")"
}
run_killed generate "$PL_BINARY" generate -m "$S" -p "Once upon a time" -n 400 --ignore-eos -t 1 -v \
    --tensor-parallel-size 2
wait_killed generate

# rank 0 dies: the worker, waiting for its next step, leaves too
run_killed generate0 "$PL_BINARY" generate -m "$S" -p "Once upon a time" -n 400 --ignore-eos -t 1 -v \
    --tensor-parallel-size 2
wait_killed generate0 0
# a rank that stops answering without dying: the collective's deadline ends the job
PAGELLM_DIST_TIMEOUT=2 run_killed stopped "$PL_BINARY" generate -m "$S" -p "Once upon a time" -n 400 \
    --ignore-eos -t 1 -v --tensor-parallel-size 2
wait_killed stopped 1 STOP
if grep -aq "timed out (PAGELLM_DIST_TIMEOUT)" "$tmp/stopped.err"; then ok
else bad "stopped rank: no timeout message: $(tail -3 "$tmp/stopped.err")"; fi

run_killed serve "$PL_BINARY" serve -m "$S" --port 0 --kv-cache-memory 8M -t 1 \
    --tensor-parallel-size 2
BASE=""
for _ in $(seq 1 200); do
    BASE=$(sed -n 's|^serving .* on \(http://[^ ]*:[0-9][0-9]*\) .*|\1|p' "$tmp/serve.out" 2>/dev/null)
    [ -n "$BASE" ] && break
    sleep 0.05
done
if [ -z "$BASE" ]; then
    bad "serve TP=2 did not start: $(tail -3 "$tmp/serve.err")"
    kill -KILL "$MPI_PID"
else
    curl -s -N --max-time 30 "$BASE/v1/completions" -H 'Content-Type: application/json' \
        -d '{"prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": true, "stream": true}' \
        >"$tmp/stream.out" 2>&1 &
    CURL_PID=$!
    wait_killed serve
    wait "$CURL_PID"
    echo "serve: the stream ended with: $(grep -o '"error":{[^}]*}' "$tmp/stream.out" | head -1)"
    if grep -q '"error"' "$tmp/stream.out"; then ok
    else bad "serve: the request in flight got no error: $(tail -c 300 "$tmp/stream.out")"; fi
fi

echo "$passed passed, $failed failed"
test "$failed" -eq 0
