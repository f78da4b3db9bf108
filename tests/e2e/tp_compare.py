#!/usr/bin/env python3
"""Compare two `pagellm generate --output` result files (TP = 1 and TP = N): the same requests
(indexes) with the same number of completions each; per completion, greedy ids must agree until
they part, and they may part only at a near-tie of the first file (a top-2 gap below `tie`);
every log-probability of the agreeing prefix (same ids, so the same context) must be within
`bound`, and completions that never part have the same length. At least `--min-compared` tokens
must have been compared in all.

usage: tp_compare.py A.jsonl B.jsonl BOUND TIE [--exact] [--min-compared N]
--exact: the files must agree in ids and log-probabilities bit for bit (two TP = N runs).
--min-compared N (default 1): fewer compared tokens fail the comparison, so a run that stops
  at a near-tie or an empty result cannot pass by comparing (almost) nothing."""
import argparse
import json
import sys


def load(path):
    with open(path) as f:
        return sorted((json.loads(line) for line in f), key=lambda r: r["index"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("bound", type=float)
    ap.add_argument("tie", type=float)
    ap.add_argument("--exact", action="store_true")
    ap.add_argument("--min-compared", type=int, default=1)
    o = ap.parse_args()
    a, b = load(o.a), load(o.b)
    assert len(a) == len(b) and a, f"requests: {len(a)} vs {len(b)}"
    worst, compared, parted = 0.0, 0, 0
    for ra, rb in zip(a, b):
        i = ra["index"]
        assert i == rb["index"], f"request indexes {i} vs {rb['index']}"
        assert len(ra["completions"]) == len(rb["completions"]) and ra["completions"], \
            f"request {i}: {len(ra['completions'])} vs {len(rb['completions'])} completions"
        for k, (ca, cb) in enumerate(zip(ra["completions"], rb["completions"])):
            for c in (ca, cb):
                if "logprobs" in c or not o.exact:
                    assert len(c["logprobs"]) == len(c["ids"]), \
                        f"request {i}.{k}: {len(c['logprobs'])} log-probabilities for {len(c['ids'])} ids"
            if o.exact:
                assert ca["ids"] == cb["ids"], (i, k, ca["ids"], cb["ids"])
                assert ca.get("logprobs") == cb.get("logprobs"), (i, k)
                compared += len(ca["ids"])
                continue
            apart = False
            for t, (ia, ib) in enumerate(zip(ca["ids"], cb["ids"])):
                la, lb = ca["logprobs"][t], cb["logprobs"][t]
                if ia != ib:
                    gap = la[0][1] - la[1][1]
                    assert gap < o.tie, f"request {i}.{k} token {t}: {ia} vs {ib}, gap {gap}"
                    apart = True
                    break
                err = abs(la[0][1] - lb[0][1])
                worst = max(worst, err)
                assert err <= o.bound, f"request {i}.{k} token {t}: logprob off by {err}"
                compared += 1
            parted += apart
            assert apart or len(ca["ids"]) == len(cb["ids"]), \
                f"request {i}.{k}: {len(ca['ids'])} vs {len(cb['ids'])} ids, equal as far as both go"
    print(f"compared {compared} tokens, largest log-probability difference {worst:.3g}"
          f" ({parted} completions parted at a near-tie)")
    assert compared >= o.min_compared, f"compared {compared} tokens, fewer than {o.min_compared}"


main()
