#!/usr/bin/env python3
"""Split a run's engine time by batch size and set each step against the kernels' floors.

Reads a step log (PAGELLM_STEP_LOG, docs/SERVER.md) and the model's sizes, and prints, for
buckets of steps by tokens computed, the time the steps took and the floor they could not go
under: per step max(weight bytes / read bandwidth, FLOPs / FMA peak), where FLOPs = 2 x (layer
matrix parameters x tokens + output matrix parameters x items), each item sampling one row
(attention is left out: the floor is a lower bound). Peak and bandwidth: `pagellm bench kernels
--only limits` at the level the run used. With --kv-bytes-per-token the bytes also count the
K and V the step's attention reads (the log's context tokens times that), with
--attn-flops-per-key the FLOPs its attention does over them.

usage: step_floor.py LOG --layer-params N --out-params N --weight-bytes N --fma-peak GFLOPS --bw GBS
                     [--kv-bytes-per-token N]
"""
import argparse
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--layer-params", type=float, required=True, help="matrix parameters of all layers")
    ap.add_argument("--out-params", type=float, required=True, help="output matrix parameters")
    ap.add_argument("--weight-bytes", type=float, required=True, help="bytes a step reads at least")
    ap.add_argument("--fma-peak", type=float, required=True, help="GFLOP/s")
    ap.add_argument("--bw", type=float, required=True, help="GB/s")
    ap.add_argument("--kv-bytes-per-token", type=float, default=0, help="K and V, all layers")
    ap.add_argument("--attn-flops-per-key", type=float, default=0,
                    help="QK and AV FLOPs per token and key seen (4 x layers x heads x head size)")
    a = ap.parse_args()
    buckets = [(0, "prefill (any prompt tokens)"), (1, "decode 1-6"), (7, "decode 7-16"),
               (17, "decode 17-32"), (33, "decode 33+")]
    acc = {name: [0, 0.0, 0.0, 0] for _, name in buckets}
    for line in open(a.log):
        if line.startswith("#") or not line.strip():
            continue
        f = line.split()
        secs, items, tokens, prefill, context = float(f[1]), int(f[2]), int(f[3]), int(f[4]), int(f[5])
        # attention: each item's context once (a decode token's keys; a prompt chunk's are more,
        # so this stays a lower bound)
        flops = 2 * (a.layer_params * tokens + a.out_params * items) + a.attn_flops_per_key * context
        read = a.weight_bytes + a.kv_bytes_per_token * context
        floor = max(read / (a.bw * 1e9), flops / (a.fma_peak * 1e9))
        if prefill:
            name = buckets[0][1]
        else:
            name = [n for lo, n in buckets[1:] if tokens >= lo][-1]
        b = acc[name]
        b[0] += 1
        b[1] += secs
        b[2] += floor
        b[3] += tokens
    print("| steps | count | tokens | seconds | floor (s) | floor / seconds |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    tot = [0, 0.0, 0.0, 0]
    for _, name in buckets:
        b = acc[name]
        if not b[0]:
            continue
        print(f"| {name} | {b[0]} | {b[3]} | {b[1]:.2f} | {b[2]:.2f} | {100 * b[2] / b[1]:.0f} % |")
        tot = [t + v for t, v in zip(tot, b)]
    if tot[1] > 0:
        print(f"| all | {tot[0]} | {tot[3]} | {tot[1]:.2f} | {tot[2]:.2f} | {100 * tot[2] / tot[1]:.0f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
