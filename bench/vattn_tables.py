#!/usr/bin/env python3
"""The vAttention section of docs/BENCHMARKS.md from bench/vattn.sh's JSON lines: markdown
tables on stdout, and with --dat DIR the data files bench/plot.sh draws.

    python3 bench/vattn_tables.py [RESULTS_DIR] [--dat DIR]

Engine runs repeat (REPS) with the alternatives interleaved inside each repetition; a ratio is
taken within a repetition, then the median over repetitions is printed.
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tables import load, table  # noqa: E402  (the same markdown and JSON-lines helpers)

LAYOUTS = ["paged", "contiguous", "vattention 4K", "vattention 64K"]
VARIANTS = ["all", "no-overlap", "no-deferred-reclaim", "no-eager", "none"]


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def split(label):
    a, b, rep = label.split("|")
    return a, b, int(rep)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    res = args[0] if args else "bench/results/vattn"
    dat = sys.argv[sys.argv.index("--dat") + 1] if "--dat" in sys.argv else None
    if dat:
        args = [a for a in args if a != dat]
        os.makedirs(dat, exist_ok=True)

    m = load(os.path.join(res, "map.jsonl"))
    if m:
        print("Map, first touch and unmap of one page (ns per page, median of the repetitions):\n")
        table(["page", "backend", "map (incl. commit)", "touch after", "unmap", "total", "VMAs while mapped"],
              [[d["page"], d["backend"]] + ([d["map_ns"], d["touch_ns"], d["unmap_ns"],
               d["map_touch_unmap_ns"], int(d["extra_vmas"])] if "error" not in d else [d["error"], "", "", "", ""])
               for d in m])
        if dat:
            with open(os.path.join(dat, "map.dat"), "w") as f:
                for page in (4096, 65536):
                    row = {d["backend"]: d for d in m if d["page"] == page and "error" not in d}
                    if "memfd" in row and "anon" in row:
                        f.write("%s %.2f %.2f %.2f %.2f\n" % ("4K" if page == 4096 else "64K",
                                row["memfd"]["map_ns"] / 1e3, row["anon"]["map_ns"] / 1e3,
                                row["memfd"]["unmap_ns"] / 1e3, row["anon"]["unmap_ns"] / 1e3))

    a = load(os.path.join(res, "attention.jsonl"))
    if a:
        print("Decode attention, %d sequences, 110M shape (12 heads, 4 KV heads, head_dim 64, f16), "
              "1 thread (us per call, median):\n" % a[0]["seqs"])
        table(["context", "paged (16-token blocks, scattered)", "vattention 4K", "vattention 64K",
               "4K / paged", "64K / paged"],
              [[d["ctx"], d["paged_bs16_us"], d["vattn_4k_us"], d["vattn_64k_us"],
                "%.3f" % d["vattn_4k_over_paged"], "%.3f" % d["vattn_64k_over_paged"]] for d in a])
        if dat:
            with open(os.path.join(dat, "attention.dat"), "w") as f:
                for d in a:
                    f.write("%d %.1f %.1f %.1f\n" % (d["ctx"], d["paged_bs16_us"], d["vattn_4k_us"], d["vattn_64k_us"]))

    lay = load(os.path.join(res, "layouts.jsonl"))
    if lay:
        print("The layouts at the same KV memory (medians over repetitions; ratio = requests/s "
              "over paged's in the same repetition):\n")
        rows, datrows = [], {}
        for ds in ("sharegpt", "alpaca"):
            for name in LAYOUTS:
                runs = [d for d in lay if split(d["label"])[:2] == (name, ds)]
                if not runs:
                    continue
                ratios = []
                for d in runs:
                    ref = [p for p in lay if split(p["label"]) == ("paged", ds, split(d["label"])[2])]
                    if ref:
                        ratios.append(d["requests_per_s"] / ref[0]["requests_per_s"])
                g = lambda k: med([d[k] for d in runs])
                gs = lambda k, q: med([d[k][q] for d in runs])
                rows.append([ds, name, "%.3f" % g("requests_per_s"), "%.2f" % med(ratios),
                             "%.1f" % g("output_tokens_per_s"), "%.1f" % (100 - g("mean_waste_pct")),
                             "%.1f" % g("mean_waste_pct"), "%.1f" % g("peak_kv_usage_pct"),
                             int(g("peak_batch_seqs")), int(g("preemptions")),
                             "%.0f" % gs("ttft_ms", "p50"), "%.1f" % gs("tpot_ms", "p50"),
                             "%.1f" % g("step_ms"), "%.1f" % g("step_cpu_s"), len(runs)])
                datrows.setdefault(ds, []).append((name, g("requests_per_s"), 100 - g("mean_waste_pct")))
        table(["workload", "layout", "requests/s", "/ paged", "output tok/s", "tokens % of used KV",
               "waste %", "peak KV usage %", "peak batch", "preemptions", "TTFT p50 ms",
               "TPOT p50 ms", "step ms", "engine CPU s", "runs"], rows)
        if dat:
            for ds, rs in datrows.items():
                with open(os.path.join(dat, "layouts_%s.dat" % ds), "w") as f:
                    for name, rps, used in rs:
                        f.write('"%s" %.4f %.2f\n' % (name, rps, used))

    for part, title in (("ablation", "tight memory (24M), a slot per request (48 Alpaca-like requests)"),
                        ("slots", "8 slots, roomy memory (96M): 32 Alpaca-like requests take turns")):
        ablation(res, dat, part, title)


def ablation(res, dat, part, title):
    ab = load(os.path.join(res, part + ".jsonl"))
    if ab:
        print("Each technique off in turn, %s; medians over repetitions; 'map us/step' is the "
              "engine thread's mapping time per step, on the critical path:\n" % title)
        rows = []
        with_dat = []
        for page in ("4K", "64K"):
            for v in VARIANTS:
                runs = [d for d in ab if split(d["label"])[:2] == (v, page)]
                if not runs:
                    continue
                ratios = []
                for d in runs:
                    ref = [p for p in ab if split(p["label"]) == ("all", page, split(d["label"])[2])]
                    if ref:
                        ratios.append(d["step_ms"] / ref[0]["step_ms"])
                g = lambda k: med([d[k] for d in runs])
                rows.append([page, v, int(g("vattn_pages_mapped_sync")), int(g("vattn_pages_mapped_bg")),
                             int(g("vattn_pages_unmapped")), "%d / %d" % (g("vattn_slots_reused"), g("vattn_slots_acquired")),
                             "%.1f" % g("vattn_map_us_per_step"), "%.2f" % g("vattn_map_pct_of_step"),
                             "%.2f" % g("step_ms"), "%.3f" % med(ratios), "%.2f" % g("step_cpu_s"),
                             "%.3f" % g("requests_per_s"),
                             int(g("preemptions"))])
                with_dat.append((page, v, g("vattn_map_us_per_step")))
        table(["page", "techniques", "pages mapped on the critical path", "in the background",
               "unmapped", "slots reused / acquired", "map us / step", "map % of step", "step ms",
               "step / all-on", "engine CPU s", "requests/s", "preemptions"], rows)
        if dat:
            with open(os.path.join(dat, part + ".dat"), "w") as f:
                for v in VARIANTS:
                    vals = {p: x for p, vv, x in with_dat if vv == v}
                    f.write('"%s" %.2f %.2f\n' % (v, vals.get("4K", 0), vals.get("64K", 0)))


if __name__ == "__main__":
    main()
