#!/usr/bin/env python3
"""Print the markdown tables of docs/BENCHMARKS.md from bench/run_paper.sh's JSON lines.

    python3 bench/tables.py [RESULTS_DIR]
"""
import glob
import json
import os
import sys


def load(path):
    if not os.path.exists(path):
        return []
    return [json.loads(line) for line in open(path) if line.strip()]


def table(head, rows):
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---:" if i else "---" for i in range(len(head))) + "|")
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")
    print()


def sustainable(rows, limit):
    pts = sorted((r["request_rate"], r["normalized_latency_s_per_token"]) for r in rows
                 if isinstance(r["request_rate"], (int, float)))
    if not pts or pts[0][1] > limit:
        return "< %g" % pts[0][0] if pts else "-"
    for (r0, l0), (r1, l1) in zip(pts, pts[1:]):
        if l1 > limit:
            return "%.2f" % (r0 + (r1 - r0) * (limit - l0) / (l1 - l0))
    return "> %g" % pts[-1][0]


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    rows = load(f"{d}/layouts.jsonl")
    if rows:
        print("### Memory and throughput per KV layout\n")
        table(["workload", "layout", "tokens % of used slots", "reserved %", "fragmentation %",
               "mean KV usage %", "peak KV usage %", "requests/s", "output tok/s", "preemptions"],
              [[r["dataset"], r["allocation"], f"{100 - r['mean_waste_pct']:.1f}",
                f"{r['mean_reserved_pct']:.1f}", f"{r['mean_fragmentation_pct']:.1f}",
                f"{r['mean_kv_usage_pct']:.1f}", f"{r['peak_kv_usage_pct']:.1f}",
                f"{r['requests_per_s']:.3f}", f"{r['output_tokens_per_s']:.1f}", r["preemptions"]]
               for r in rows])
    for f in sorted(glob.glob(f"{d}/serve_*.jsonl")):
        rows = load(f)
        if not rows:
            continue
        mem = os.path.basename(f)[len("serve_"):-len(".jsonl")]
        rows.sort(key=lambda r: (r["label"], r["request_rate"] if isinstance(r["request_rate"], (int, float)) else 1e9))
        print(f"### Serving, ShareGPT-like, KV budget {mem}\n")
        table(["system", "rate (req/s)", "req/s done", "output tok/s", "normalized latency (s/tok)",
               "TTFT mean / p99 (ms)", "TPOT mean (ms)", "ITL p50 / p99 (ms)", "E2E p50 / p99 (s)",
               "errors"],
              [[r["label"], r["request_rate"], f"{r['request_throughput']:.3f}",
                f"{r['output_throughput']:.1f}", f"{r['normalized_latency_s_per_token']:.4f}",
                f"{r['ttft_ms']['mean']:.0f} / {r['ttft_ms']['p99']:.0f}",
                f"{r['tpot_ms']['mean']:.1f}",
                f"{r['itl_ms']['p50']:.1f} / {r['itl_ms']['p99']:.1f}",
                f"{r['e2e_ms']['p50'] / 1e3:.1f} / {r['e2e_ms']['p99'] / 1e3:.1f}", r["errors"]]
               for r in rows])
        print(f"Sustainable rate (highest request rate whose normalized latency stays at or below "
              f"the threshold, linear between measured rates; '>' = never crossed):\n")
        systems = sorted({r["label"] for r in rows})
        thresholds = [0.015, 0.02, 0.03]
        table(["system"] + [f"rate at <= {t} s/token" for t in thresholds],
              [[s] + [sustainable([r for r in rows if r["label"] == s], t) for t in thresholds]
               for s in systems])
    rows = load(f"{d}/block_size.jsonl")
    if rows:
        print("### Block size\n")
        table(["block size", "requests/s", "output tok/s", "mean waste %", "peak KV usage %",
               "preemptions"],
              [[r["block_size"], f"{r['requests_per_s']:.3f}", f"{r['output_tokens_per_s']:.1f}",
                f"{r['mean_waste_pct']:.1f}", f"{r['peak_kv_usage_pct']:.1f}", r["preemptions"]]
               for r in rows])
    rows = load(f"{d}/preempt.jsonl")
    if rows:
        print("### Recompute against swap\n")
        table(["mode", "block size", "requests/s", "output tok/s", "preemptions", "swaps out"],
              [[r["preemption_mode"], r["block_size"], f"{r['requests_per_s']:.3f}",
                f"{r['output_tokens_per_s']:.1f}", r["preemptions"], r["swaps_out"]] for r in rows])
    rows = load(f"{d}/sharing.jsonl")
    if rows:
        print("### Sharing: parallel sampling and beam search\n")
        table(["decoding", "width", "memory saved by sharing %", "generated tok/s",
               "peak KV usage %"],
              [["beam search" if r["beam_width"] else "parallel sampling",
                r["beam_width"] or r["n"], f"{r['sharing_saved_pct']:.1f}",
                f"{r['generated_tokens'] / r['elapsed_s']:.1f}", f"{r['peak_kv_usage_pct']:.1f}"]
               for r in rows])
    rows = load(f"{d}/prefix.jsonl")
    if rows:
        print("### Prefix caching, 1,000-token shared prefix\n")
        table(["prefix caching", "TTFT mean / p50 / p99 (ms)", "E2E mean (s)", "req/s"],
              [[r["label"].replace("prefix ", ""),
                f"{r['ttft_ms']['mean']:.0f} / {r['ttft_ms']['p50']:.0f} / {r['ttft_ms']['p99']:.0f}",
                f"{r['e2e_ms']['mean'] / 1e3:.2f}", f"{r['request_throughput']:.3f}"] for r in rows])


if __name__ == "__main__":
    main()
