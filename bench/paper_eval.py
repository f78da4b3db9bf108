#!/usr/bin/env python3
"""Tables (markdown, stdout) and SVG charts (gnuplot) of bench/paper_eval.sh's results.

    python3 bench/paper_eval.py RESULTS_DIR [CHART_DIR]

Each cell is the median over the repetitions with the spread (min-max) beside it; the charts
plot the median with the spread as error bars. Normalized latency is in ms per output token
(the mean over requests of end-to-end latency / output length, the paper's metric)."""
import json
import os
import statistics
import subprocess
import sys
import tempfile

CONFIGS = ["paged", "paged-nocache", "oracle", "pow2", "max"]
NAMES = {"paged": "pagellm (paged, prefix cache)", "paged-nocache": "pagellm, no prefix cache",
         "oracle": "Orca (Oracle)", "pow2": "Orca (Pow2)", "max": "Orca (Max)"}
SVG = 'set terminal svg size 720,420 dynamic font "sans,12" background "white"'


def load(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def spread(v):
    return statistics.median(v), min(v), max(v)


def cell(v, fmt="%.2f"):
    if not v:
        return "-"
    m, lo, hi = spread(v)
    return (fmt + " (" + fmt + "–" + fmt + ")") % (m, lo, hi)


def group(rows, key, val):
    out = {}
    for d in rows:
        out.setdefault(key(d), []).append(val(d))
    return out


def of_width(rows, kind, w):
    """Runs of parallel sampling (kind "n") or beam search ("beam") at width w."""
    return [d for d in rows if (d["beam_width"] == w if kind == "beam" else
                                (d["beam_width"] == 0 and d["n"] == w))]


def nl_ms(d):
    return 1e3 * d["normalized_latency_s_per_token"]


def latency_table(rows, title, configs, extra=None):
    """Rows: request rate; columns: configurations' normalized latency."""
    rates = sorted({d["request_rate"] for d in rows})
    cfgs = [c for c in configs if any(d["label"] == c for d in rows)]
    g = group(rows, lambda d: (d["request_rate"], d["label"]), nl_ms)
    print("\n%s: normalized latency, ms per output token, median (min–max) of %d repetitions\n"
          % (title, max(len(v) for v in g.values())))
    print("| rate (req/s) | " + " | ".join(NAMES[c] for c in cfgs) + " |")
    print("|---:|" + "---:|" * len(cfgs))
    for r in rates:
        print("| %g | " % r + " | ".join(cell(g.get((r, c), [])) for c in cfgs) + " |")
    if extra:
        name, fn, fmt = extra
        g2 = group(rows, lambda d: (d["request_rate"], d["label"]), fn)
        print("\n%s (median, min–max)\n" % name)
        print("| rate (req/s) | " + " | ".join(NAMES[c] for c in cfgs) + " |")
        print("|---:|" + "---:|" * len(cfgs))
        for r in rates:
            print("| %g | " % r + " | ".join(cell(g2.get((r, c), []), fmt) for c in cfgs) + " |")
    return rates, cfgs, g


def write_dat(tmp, name, rates, g, cfg):
    path = os.path.join(tmp, "%s_%s.dat" % (name, cfg))
    with open(path, "w") as f:
        for r in rates:
            v = g.get((r, cfg))
            if v:
                m, lo, hi = spread(v)
                f.write("%g %.5f %.5f %.5f\n" % (r, m, lo, hi))
    return path


def plot_panel(tmp, name, rates, cfgs, g, title, xlabel, ylabel="normalized latency (ms/token)",
               scale="set logscale y"):
    lines = []
    for i, c in enumerate(cfgs):
        p = write_dat(tmp, name, rates, g, c)
        lines.append('"%s" using 1:2:3:4 with yerrorlines lw 2 pt %d title "%s"' % (p, 5 + 2 * i, NAMES[c]))
    return ('set title "%s"\nset xlabel "%s"\nset ylabel "%s"\n%s\n'
            'set grid\nset key left top\nset xrange [0:*]\nplot %s\n'
            % (title, xlabel, ylabel, scale, ", ".join(lines)))


def gnuplot(script):
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


def multiplot(charts, name, size, layout, panels):
    gnuplot('set terminal svg size %s dynamic font "sans,11" background "white"\n'
            'set output "%s/%s.svg"\nset multiplot layout %s\n' % (size, charts, name, layout) +
            "".join(panels) + "unset multiplot\n")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    src = sys.argv[1]
    charts = sys.argv[2] if len(sys.argv) > 2 else None
    if charts:
        os.makedirs(charts, exist_ok=True)
    tmp = tempfile.mkdtemp()

    chat = load(os.path.join(src, "chat.jsonl"))
    if chat:
        rates, cfgs, g = latency_table(chat, "Chatbot (Figure 17), 16 conversations of 2–6 turns, "
                                       "rate = conversations/s", CONFIGS,
                                       ("Prefix-cache hits, % of prompt tokens", lambda d: d["prefix_hit_pct"], "%.0f"))
        if charts:
            gnuplot(SVG + '\nset output "%s/eval_chat.svg"\n' % charts +
                    plot_panel(tmp, "chat", rates, cfgs, g, "Chatbot: multi-round conversations, KV 4M",
                               "conversations / s"))

    samp = load(os.path.join(src, "sampling.jsonl"))
    if samp:
        panels = []
        for kind, label in (("n", "parallel sampling"), ("beam", "beam search")):
            for w in (2, 4, 6):
                rows = of_width(samp, kind, w)
                if not rows:
                    continue
                rates, cfgs, g = latency_table(rows, "%s, width %d (Figure 14)" % (label, w), CONFIGS)
                panels.append(plot_panel(tmp, "samp_%s%d" % (kind, w), rates, cfgs, g,
                                         "%s, %s = %d" % (label, "n" if kind == "n" else "width", w),
                                         "requests / s"))
        print("\nMemory saved by sharing (paged; mean over steps of 1 − blocks used / blocks the "
              "sequences hold), median (min–max) over every rate and repetition\n")
        print("| decoding | width | memory saved % | Orca baselines |")
        print("|---|---:|---:|---:|")
        plots = []
        for kind, label in (("n", "parallel sampling"), ("beam", "beam search")):
            dat = os.path.join(tmp, "saved_%s.dat" % kind)
            with open(dat, "w") as f:
                for w in (2, 4, 6):
                    v = [d["sharing_saved_pct"] for d in of_width(samp, kind, w) if d["label"] == "paged"]
                    if v:
                        print("| %s | %d | %s | 0 (one reservation per sequence) |" % (label, w, cell(v, "%.1f")))
                        f.write("%d %.3f %.3f %.3f\n" % ((w,) + spread(v)))
            plots.append('"%s" using 1:2:3:4 with yerrorlines lw 2 pt %d title "%s"'
                         % (dat, 7 if kind == "n" else 5, label))
        if charts:
            gnuplot(SVG + '\nset output "%s/eval_sharing.svg"\n' % charts +
                    'set title "KV memory saved by sharing during the online runs (paged, Alpaca-like)"\n'
                    'set xlabel "parallel samples n / beam width"\nset ylabel "memory saved (%)"\n'
                    'set xrange [1:7]\nset yrange [0:100]\nset grid\nset key left top\nplot ' +
                    ", ".join(plots) + "\n")
        if charts and panels:
            multiplot(charts, "eval_sampling", "1200,720", "2,3", panels)

    pre = load(os.path.join(src, "prefix.jsonl"))
    if pre:
        panels, tput = [], []
        for p, label in ((80, "one-shot (80-token prefix)"), (341, "five-shot (341-token prefix)")):
            rows = [d for d in pre if d["shared_prefix"] == p]
            if not rows:
                continue
            rates, cfgs, g = latency_table(rows, "Shared prefix, %s (Figure 16)" % label, CONFIGS,
                                           ("Throughput, requests/s completed", lambda d: d["requests_per_s"], "%.1f"))
            panels.append(plot_panel(tmp, "prefix%d" % p, rates, cfgs, g, label, "offered requests / s"))
            gt = group(rows, lambda d: (d["request_rate"], d["label"]), lambda d: d["requests_per_s"])
            tput.append(plot_panel(tmp, "prefix_tput%d" % p, rates, cfgs, gt, label + ": throughput",
                                   "offered requests / s", "completed requests / s",
                                   "unset logscale y\nset yrange [0:*]"))
        if charts and panels:
            multiplot(charts, "eval_prefix", "1100,780", "2,2", panels + tput)

    cross = load(os.path.join(src, "cross_110m.jsonl"))
    if cross:
        print("\nCross-check with the 110M F16 model: parallel sampling n = 4, 16 Alpaca-like requests "
              "at once, KV 24M; median (min–max) of %d repetitions\n"
              % max(len(v) for v in group(cross, lambda d: d["label"], lambda d: 0).values()))
        print("| layout | CPU seconds | requests / CPU s | normalized latency (ms/token) | peak batch |")
        print("|---|---:|---:|---:|---:|")
        for c in CONFIGS:
            rows = [d for d in cross if d["label"] == c]
            if rows:
                print("| %s | %s | %s | %s | %s |" % (
                    NAMES[c], cell([d["elapsed_s"] for d in rows], "%.1f"),
                    cell([d["requests_per_s"] for d in rows], "%.2f"), cell([nl_ms(d) for d in rows], "%.0f"),
                    cell([d["peak_batch_seqs"] for d in rows], "%d")))

    pp = load(os.path.join(src, "preempt.jsonl"))
    if pp:
        print("\nSwap against recompute of one block (Figure 19a), µs per block, median (min–max) "
              "of %d repetitions\n" % pp[0]["reps"])
        print("| block size | bytes / block | recompute | swap out | swap in | recompute / swap out |")
        print("|---:|---:|---:|---:|---:|---:|")
        dat = os.path.join(tmp, "preempt.dat")
        with open(dat, "w") as f:
            for d in sorted(pp, key=lambda d: d["block_size"]):
                r, so, si = (d[k + "_us_per_block"] for k in ("recompute", "swap_out", "swap_in"))
                print("| %d | %d | %.0f (%.0f–%.0f) | %.2f (%.2f–%.2f) | %.2f (%.2f–%.2f) | %.0fx |"
                      % (d["block_size"], d["bytes_per_block"], r["median"], r["min"], r["max"],
                         so["median"], so["min"], so["max"], si["median"], si["min"], si["max"],
                         r["median"] / so["median"]))
                f.write("%d %g %g %g %g %g %g %g %g %g\n" % (
                    d["block_size"], r["median"], r["min"], r["max"], so["median"], so["min"],
                    so["max"], si["median"], si["min"], si["max"]))
        if charts:
            gnuplot(SVG + '\nset output "%s/eval_preempt.svg"\n' % charts +
                    'set title "Preempting one KV block: recompute against swap (110M F16)"\n'
                    'set logscale xy\nset xlabel "block size (tokens)"\n'
                    'set ylabel "microseconds per block"\nset grid\nset key left top\n'
                    'plot "%s" using 1:2:3:4 with yerrorlines lw 2 pt 7 title "recompute", '
                    '"" using 1:5:6:7 with yerrorlines lw 2 pt 5 title "swap out", '
                    '"" using 1:8:9:10 with yerrorlines lw 2 pt 9 title "swap in"\n' % dat)


if __name__ == "__main__":
    main()
