#!/usr/bin/env python3
"""Compare two `pagellm generate --output` result files (TP = 1 and TP = N): per request and
completion, greedy ids must agree up to the first near-tie of the first file (a top-2 gap below
`tie`), and every log-probability of the agreeing prefix must be within `bound`.

usage: tp_compare.py A.jsonl B.jsonl BOUND TIE [--exact]
--exact: the files must agree in ids and log-probabilities bit for bit (two TP = N runs)."""
import json
import sys


def load(path):
    with open(path) as f:
        return sorted((json.loads(line) for line in f), key=lambda r: r["index"])


def main():
    a, b = load(sys.argv[1]), load(sys.argv[2])
    bound, tie = float(sys.argv[3]), float(sys.argv[4])
    exact = "--exact" in sys.argv[5:]
    assert len(a) == len(b) and a, (len(a), len(b))
    worst, compared = 0.0, 0
    for ra, rb in zip(a, b):
        for ca, cb in zip(ra["completions"], rb["completions"]):
            if exact:
                assert ca["ids"] == cb["ids"], (ra["index"], ca["ids"], cb["ids"])
                assert ca.get("logprobs") == cb.get("logprobs"), ra["index"]
                compared += len(ca["ids"])
                continue
            for t, (ia, ib) in enumerate(zip(ca["ids"], cb["ids"])):
                la, lb = ca["logprobs"][t], cb["logprobs"][t]
                if ia != ib:
                    gap = la[0][1] - la[1][1]
                    assert gap < tie, f"request {ra['index']} token {t}: {ia} vs {ib}, gap {gap}"
                    break
                err = abs(la[0][1] - lb[0][1])
                worst = max(worst, err)
                assert err <= bound, f"request {ra['index']} token {t}: logprob off by {err}"
                compared += 1
                if len(la) > 1 and la[0][1] - la[1][1] < tie:
                    break  # a near-tie: the runs may part here
    print(f"compared {compared} tokens, largest log-probability difference {worst:.3g}")


main()
