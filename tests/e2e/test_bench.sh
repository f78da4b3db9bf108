#!/usr/bin/env bash
# End-to-end checks of `pagellm bench throughput` (offline and online), `pagellm bench serve` and
# `pagellm bench preempt` with stories260K:
# the JSON lines carry every field the docs promise, workloads are honoured (output tokens =
# the drawn lengths), each KV layout runs, and usage errors exit 2. Never checks speed.
source "$(dirname "$0")/server_lib.sh"

# fields FILE KEY...: every key is present in the JSON line in FILE
fields() {
    local f=$1
    shift
    python3 - "$f" "$@" <<'PY'
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
missing = [k for k in sys.argv[2:] if k not in d]
assert not missing, missing
PY
}

# ---- bench model: tokens/s with the work rates and the share of the machine's limits ----
"$PL_BINARY" bench model -m "$MODEL" -p 16 -n 4 -b 1,2 --ctx 4 --reps 1 -t 1 --json \
    >"$TMP/bm.out" 2>"$TMP/bm.err"
check "bench model exit" test $? -eq 0
check "bench model table has GFLOP/s, GB/s, %peak, %bw" grep -Eq 'GFLOP/s +GB/s +%peak +%bw' "$TMP/bm.out"
check "bench model prints the limits" grep -Eq '^limits: f32 FMA peak [0-9.]+ GFLOP/s, read bandwidth [0-9.]+ GB/s' "$TMP/bm.out"
check "bench model JSON rates" python3 - "$TMP/bm.out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
assert [r["test"] for r in rows] == ["prefill", "decode", "decode"], rows
for r in rows:
    assert r["gflops_per_s"] > 0 and r["gb_per_s"] > 0, r
    assert r["fma_peak_gflops"] > 0 and r["read_peak_gb_per_s"] > 0, r
    assert abs(r["peak_pct"] - 100 * r["gflops_per_s"] / r["fma_peak_gflops"]) < 0.2 + 0.01 * r["peak_pct"], r
    # %bw: each repetition against the bandwidth measured beside it, then the mean
    bw = r["reps_read_gb_per_s"]
    assert len(bw) == len(r["reps"]) and min(bw) > 0, r
    assert abs(r["read_peak_gb_per_s"] - sum(bw) / len(bw)) < 0.06, r
    want = 100 * sum(r["bytes_per_token"] * t / 1e9 / b for t, b in zip(r["reps"], bw)) / len(bw)
    assert abs(r["bandwidth_pct"] - want) < 0.2 + 0.01 * want, (r, want)
# the work model: stories260K (dim 64, 5 layers, 8 heads of 8, 4 KV, ffn 172, vocab 512), f32;
# decode B=1, 4 steps from 4 cached tokens: 2 FLOPs per matrix parameter per token (output matrix
# included), 4 x layers x heads x head size per key seen (5 + 6 + 7 + 8 keys)
d = rows[1]
flops = d["gflops_per_s"] * 1e9 * d["tokens"] * d["batch"] / d["tokens_per_s"]
layer = 64 * 64 * 2 + 32 * 64 * 2 + 3 * 172 * 64
want = 2 * (5 * layer + 512 * 64) * 4 + 4 * 5 * 8 * 8 * (5 + 6 + 7 + 8)
assert abs(flops / want - 1) < 0.03, (flops, want)
PY
"$PL_BINARY" bench model -m "$PL_SHARED_DIR/models/synth-tiny-q8_0.gguf" -p 0 -n 2 -b 1 --ctx 2 \
    --reps 1 -t 1 --json >"$TMP/bq.out" 2>"$TMP/bq.err"
check "bench model, quantized matrices: GOP/s and % of the int8 peak" python3 - "$TMP/bq.out" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][0]
assert r["gops_per_s"] > 0 and "gflops_per_s" not in r and "fma_peak_gflops" not in r, r
if r["int8_peak_gops"] > 0:  # AVX2 and up: % of the level's int8 peak; scalar: none, no %
    assert abs(r["peak_pct"] - 100 * r["gops_per_s"] / r["int8_peak_gops"]) < 0.2, r
else:
    assert r["peak_pct"] is None, r
PY
check "quantized table header says GOP/s" grep -Eq 'GOP/s +GB/s' "$TMP/bq.out"

# a mixture of experts (f32, 2 layers, 4 experts of 160, top 2): a step's bytes count the experts
# its tokens chose, so 8 sequences read more experts than one (in each of the 2 steps: 2 a
# layer at B=1, 2-4 at B=8), a whole number of experts more
"$PL_BINARY" mkmodel "$TMP/moe.gguf" --vocab-from "$PL_SHARED_DIR/models/stories260K.gguf" \
    --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn 160 --experts 4 --experts-used 2 >/dev/null 2>&1
"$PL_BINARY" bench model -m "$TMP/moe.gguf" -p 0 -n 2 -b 1,8 --ctx 2 --reps 1 -t 1 --json \
    >"$TMP/bmoe.out" 2>"$TMP/bmoe.err"
check "bench model, MoE: bytes of the experts a step's tokens chose" python3 - "$TMP/bmoe.out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
assert [r["batch"] for r in rows] == [1, 8], rows
n, layers, k, ne, expert = 2, 2, 2, 4, 3 * 64 * 160 * 4  # f32 gate, up, down of one expert
kv_key = 2 * layers * 2 * 16 * 2                          # f16 K and V of 2 heads of 16
def weights(r):  # the bytes of the n steps less the K and V they read
    keys = r["batch"] * (n * (r["ctx"] + 1) + n * (n - 1) // 2)
    # bytes_per_token, not gb_per_s x time: gb_per_s has two decimals, too few at ASan's speed
    return r["bytes_per_token"] * r["tokens"] * r["batch"] - kv_key * keys
more = (weights(rows[1]) - weights(rows[0])) / expert  # experts the steps of 8 read beyond 1's
assert abs(more - round(more)) < 0.05 and 1 <= round(more) <= n * layers * (ne - k), more
PY

# ---- bench throughput ----
"$PL_BINARY" bench throughput -m "$MODEL" --dataset fixed:20:12 --num-prompts 16 -t 1 \
    --kv-cache-memory 2M --seed 3 --output "$TMP/tp.jsonl" >"$TMP/tp.out" 2>"$TMP/tp.err"
check "throughput exit" test $? -eq 0
check "throughput fields" fields "$TMP/tp.out" requests_per_s total_tokens_per_s \
    output_tokens_per_s peak_kv_usage_pct mean_waste_pct peak_waste_pct preemptions \
    mean_kv_usage_pct mean_token_fraction_pct sharing_saved_pct ttft_ms elapsed_s errors
check "throughput --output appends the same line" cmp -s "$TMP/tp.out" "$TMP/tp.jsonl"
check "fixed workload: 16 x 12 output tokens, 16 x 20 input" python3 -c "
import json; d = json.load(open('$TMP/tp.out'))
assert d['output_tokens'] == 192 and d['input_tokens'] == 320 and d['errors'] == 0, d"

for r in max pow2 oracle; do
    "$PL_BINARY" bench throughput -m "$MODEL" --dataset alpaca --num-prompts 12 -t 1 \
        --kv-cache-memory 2M --max-model-len 256 --kv-layout contiguous --reserve $r \
        >"$TMP/c.out" 2>"$TMP/c.err"
    check "contiguous $r runs" python3 -c "
import json; d = json.load(open('$TMP/c.out'))
assert d['allocation'] == '$r' and d['errors'] == 0 and d['completed'] == 12, d
assert 0 < d['mean_waste_pct'] < 100 and d['prefix_caching'] is False, d"
done
# the vattention layout runs, reports where its pages were mapped, and refuses sharing
"$PL_BINARY" bench throughput -m "$MODEL" --dataset alpaca --num-prompts 12 -t 1 \
    --kv-cache-memory 2M --max-model-len 256 --kv-layout vattention >"$TMP/v.out" 2>"$TMP/v.err"
check "vattention runs with its counters" python3 -c "
import json; d = json.load(open('$TMP/v.out'))
assert d['kv_layout'] == 'vattention' and d['errors'] == 0 and d['completed'] == 12, d
assert d['vattn_pages_mapped_sync'] + d['vattn_pages_mapped_bg'] > 0, d
assert d['vattn_slots_acquired'] >= 12 and d['kv_page_size'] == 4096 and 'tpot_ms' in d, d"
"$PL_BINARY" bench throughput -m "$MODEL" --num-prompts 2 --kv-layout vattention --n 2 \
    >/dev/null 2>"$TMP/e"
check "vattention refuses n > 1 naming the layout" grep -q "kv-layout vattention" "$TMP/e"
"$PL_BINARY" bench throughput -m "$MODEL" --dataset alpaca --num-prompts 6 -t 1 --n 2 \
    --kv-cache-memory 2M --max-model-len 256 --kv-layout vattention --vattn-share \
    >"$TMP/vs.out" 2>"$TMP/e"
check "vattention --vattn-share runs n = 2 as groups" python3 -c "
import json; d = json.load(open('$TMP/vs.out'))
assert d['vattn_share'] is True and d['errors'] == 0 and d['completed'] == 6, d
assert d['n'] == 2 and d['peak_batch_seqs'] >= 2, d"
"$PL_BINARY" bench throughput -m "$MODEL" --kv-layout vattention --kv-page-size 8K >/dev/null 2>&1
check "bad --kv-page-size exits 2" test $? -eq 2
"$PL_BINARY" generate -m "$MODEL" -p "Once upon a time" -n 8 --kv-layout vattention \
    --kv-page-size 2M >/dev/null 2>"$TMP/e"
if [ "$(awk '/HugePages_Total/ {print $2}' /proc/meminfo)" = 0 ]; then
    check "2M pages without huge pages: a clear error" grep -q "huge pages" "$TMP/e"
fi

# parallel sampling shares the prompt's blocks
"$PL_BINARY" bench throughput -m "$MODEL" --dataset fixed:64:8 --num-prompts 4 --n 4 -t 1 \
    --kv-cache-memory 2M >"$TMP/n.out" 2>"$TMP/n.err"
check "parallel sampling saves memory" python3 -c "
import json; d = json.load(open('$TMP/n.out'))
assert d['sharing_saved_pct'] > 30 and d['generated_tokens'] == 4 * 4 * 8, d"

# online: Poisson arrivals in process, latency from arrival, the paper's normalized latency
"$PL_BINARY" bench throughput -m "$MODEL" --dataset fixed:20:12 --num-prompts 12 -t 1 \
    --kv-cache-memory 2M --request-rate 200 --seed 4 >"$TMP/on.out" 2>"$TMP/on.err"
check "online run: every request, latency from arrival" python3 -c "
import json; d = json.load(open('$TMP/on.out'))
assert d['request_rate'] == 200 and d['requests'] == 12 and d['completed'] == 12, d
assert d['output_tokens'] == 144 and d['errors'] == 0 and d['copies_per_request'] == 1, d
e = d['e2e_ms']; assert e['n'] == 12 and 0 < e['p50'] <= e['max'], e
# normalized latency = mean over requests of e2e / 12 tokens = mean e2e / 12
n = d['normalized_latency_s_per_token'] * 1e3 * 12
assert abs(n - e['mean']) <= 1e-3 * e['mean'], (n, e)"
# an Orca baseline cannot share: n = 3 runs as 3 one-sequence requests, each its own reservation
"$PL_BINARY" bench throughput -m "$MODEL" --dataset fixed:20:12 --num-prompts 4 -t 1 --n 3 \
    --kv-cache-memory 2M --max-model-len 256 --kv-layout contiguous --reserve oracle \
    --request-rate inf >"$TMP/oc.out" 2>"$TMP/oc.err"
check "contiguous n = 3: three copies per request" python3 -c "
import json; d = json.load(open('$TMP/oc.out'))
assert d['copies_per_request'] == 3 and d['requests'] == 4 and d['errors'] == 0, d
assert d['output_tokens'] == 4 * 3 * 12 and d['input_tokens'] == 4 * 3 * 20, d"
# chat: later turns carry the history, so prompts grow and the prefix cache hits them
"$PL_BINARY" bench throughput -m "$MODEL" --dataset chat --num-prompts 4 -t 1 \
    --kv-cache-memory 4M --request-rate 100 --seed 5 >"$TMP/ch.out" 2>"$TMP/ch.err"
check "chat: every turn of 4 conversations, history hits the prefix cache" python3 -c "
import json; d = json.load(open('$TMP/ch.out'))
assert d['conversations'] == 4 and 8 <= d['requests'] <= 24 and d['errors'] == 0, d
assert d['completed'] == d['requests'] and d['prefix_hit_pct'] > 20, d
assert d['input_tokens'] > d['output_tokens'], d"
# the engine thread's CPU clock: idle waits are skipped ahead (the run's clock still spans the
# arrivals, about 6 s for 12 requests at 2/s) and every request is timed on it
"$PL_BINARY" bench throughput -m "$MODEL" --dataset fixed:20:12 --num-prompts 12 -t 1 \
    --kv-cache-memory 2M --request-rate 2 --clock cpu --seed 4 >"$TMP/cc.out" 2>"$TMP/cc.err"
check "cpu clock: idle skipped, every request timed" python3 -c "
import json; d = json.load(open('$TMP/cc.out'))
assert d['clock'] == 'cpu' and d['completed'] == 12 and d['errors'] == 0, d
assert d['elapsed_s'] > 2 and d['e2e_ms']['n'] == 12 and d['e2e_ms']['p50'] > 0, d"
"$PL_BINARY" bench throughput -m "$MODEL" --request-rate 5 --clock gpu >/dev/null 2>"$TMP/e"
check "bad --clock exits 2 naming it" grep -q -- "--clock: 'gpu'" "$TMP/e"
"$PL_BINARY" bench throughput -m "$MODEL" --clock cpu >/dev/null 2>"$TMP/e"
check "--clock offline is refused" grep -q -- "only for an online run" "$TMP/e"
"$PL_BINARY" bench throughput -m "$MODEL" --request-rate 5 --clock cpu -t 2 >/dev/null 2>"$TMP/e"
check "--clock cpu with 2 threads is refused" grep -q -- "--clock cpu needs -t 1" "$TMP/e"
"$PL_BINARY" bench throughput -m "$MODEL" --request-rate -1 >/dev/null 2>"$TMP/e"
check "bad --request-rate exits 2 naming it" grep -q -- "--request-rate" "$TMP/e"
"$PL_BINARY" bench serve --base-url http://127.0.0.1:1 --model x --dataset chat >/dev/null 2>"$TMP/e"
check "bench serve refuses chat, saying why" grep -q "conversations" "$TMP/e"

# ---- bench preempt: swap and recompute of one block per block size ----
"$PL_BINARY" bench preempt -m "$MODEL" --block-sizes 1,4,16 --context 32 --reps 2 --clock cpu \
    >"$TMP/pp.out" 2>"$TMP/pp.err"
check "preempt: one line per block size, per block = per token x block size" python3 - "$TMP/pp.out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["block_size"] for r in rows] == [1, 4, 16], rows
for r in rows:
    B = r["block_size"]
    assert r["clock"] == "cpu" and r["reps"] == 2, r
    # stories260K: 5 layers x K+V x 4 KV heads x 8 dims x 2 bytes (f16) per token
    assert r["blocks"] == 32 // B and r["bytes_per_block"] == 5 * 2 * 4 * 8 * 2 * B, r
    for k in ("recompute", "swap_out", "swap_in"):
        b, t = r[k + "_us_per_block"], r[k + "_us_per_token"]
        assert 0 < b["min"] <= b["median"] <= b["max"], r
        assert abs(b["median"] - t["median"] * B) <= 1e-3 + 1e-3 * b["median"], r
PY
"$PL_BINARY" bench preempt -m "$MODEL" --block-sizes 16 --context 40 >/dev/null 2>"$TMP/e"
check "preempt: a context not a multiple of the block exits 2 naming --context" \
    grep -q -- "--context 40" "$TMP/e"
"$PL_BINARY" bench preempt -m "$MODEL" --block-sizes 0 >/dev/null 2>"$TMP/e"
check "preempt: a bad block size names --block-sizes" grep -q -- "--block-sizes" "$TMP/e"
"$PL_BINARY" bench preempt -m "$MODEL" --clock gpu >/dev/null 2>"$TMP/e"
check "preempt: a bad --clock exits 2 naming it" grep -q -- "--clock: 'gpu'" "$TMP/e"

"$PL_BINARY" bench throughput --dataset alpaca >/dev/null 2>&1
check "throughput without -m exits 2" test $? -eq 2
"$PL_BINARY" bench throughput -m "$MODEL" --dataset fixed:1 >/dev/null 2>"$TMP/e"
check "bad dataset exits 1 naming it" grep -q -- "--dataset" "$TMP/e"
"$PL_BINARY" bench throughput -m "$MODEL" --kv-layout striped >/dev/null 2>&1
check "bad --kv-layout exits 2" test $? -eq 2

# ---- bench serve against pagellm serve ----
start_server
"$PL_BINARY" bench serve --base-url "$BASE" --model stories --dataset alpaca --num-prompts 12 \
    --request-rate 50 --vocab-size 512 --max-total 256 --seed 1 >"$TMP/sv.out" 2>"$TMP/sv.err"
check "serve exit" test $? -eq 0
check "serve fields" fields "$TMP/sv.out" request_throughput output_throughput ttft_ms tpot_ms \
    itl_ms e2e_ms normalized_latency_s_per_token normalized_latency errors completed \
    length_mismatches request_rate duration_s
check "serve: all completed, every length honoured" python3 -c "
import json; d = json.load(open('$TMP/sv.out'))
assert d['completed'] == 12 and d['errors'] == 0 and d['length_mismatches'] == 0, d
for k in ('ttft_ms', 'e2e_ms'):
    s = d[k]; assert s['n'] == 12 and 0 < s['p50'] <= s['p90'] <= s['p99'] <= s['max'], s"
stop_server
# vattention behind the server: the requests run and /metrics counts its slots and pages
start_server --kv-layout vattention --max-model-len 256
"$PL_BINARY" bench serve --base-url "$BASE" --model stories --dataset alpaca --num-prompts 6 \
    --request-rate 50 --vocab-size 512 --max-total 256 --seed 2 >"$TMP/vs.out" 2>"$TMP/vs.err"
check "vattention serve: all completed" python3 -c "
import json; d = json.load(open('$TMP/vs.out'))
assert d['completed'] == 6 and d['errors'] == 0, d"
curl -s "$BASE/metrics" >"$TMP/metrics"
check "vattention /metrics counts slots" awk '/^pagellm_vattn_slots_acquired_total/ {ok = $2 >= 6} END {exit !ok}' "$TMP/metrics"
check "vattention /metrics counts mapped pages" grep -q "^pagellm_vattn_pages_mapped_sync_total" "$TMP/metrics"
stop_server
"$PL_BINARY" bench serve --base-url "$BASE" --model stories --num-prompts 2 --vocab-size 512 \
    --timeout 5 >"$TMP/down.out" 2>"$TMP/down.err"
check "server gone: every request fails, exit 1" test $? -eq 1
"$PL_BINARY" bench serve --model x >/dev/null 2>&1
check "serve without --base-url exits 2" test $? -eq 2
"$PL_BINARY" bench serve --base-url "$BASE" --model x --request-rate fast >/dev/null 2>&1
check "bad --request-rate exits 2" test $? -eq 2
finish
