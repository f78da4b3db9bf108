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
        batches = sorted({d["seqs"] for d in a})
        for seqs in batches:
            print("Decode attention (the PagedAttention paper's Figure 18a), %d sequence(s), 110M "
                  "shape (12 heads, 4 KV heads, head_dim 64, f16 KV), 1 thread: CPU us per call, "
                  "median (wall us in the last column, paged / contiguous 4K):\n" % seqs)
            table(["context", "paged kernel (16-token blocks, scattered)", "contiguous kernel, 4K pages",
                   "contiguous kernel, 64K pages", "paged / contiguous 4K", "paged / contiguous 64K",
                   "wall us"],
                  [[d["ctx"], d["paged_bs16_cpu_us"], d["contig_4k_cpu_us"], d["contig_64k_cpu_us"],
                    "%.3f" % d["paged_over_contig_4k_cpu"], "%.3f" % d["paged_over_contig_64k_cpu"],
                    "%.0f / %.0f" % (d["paged_bs16_us"], d["contig_4k_us"])]
                   for d in a if d["seqs"] == seqs])
        if dat: # context, then paged / contiguous 4K for each batch size
            with open(os.path.join(dat, "attention.dat"), "w") as f:
                f.write("# ctx " + " ".join("seqs%d" % b for b in batches) + "\n")
                for ctx in sorted({d["ctx"] for d in a}):
                    r = {d["seqs"]: d["paged_over_contig_4k_cpu"] for d in a if d["ctx"] == ctx}
                    f.write("%d %s\n" % (ctx, " ".join("%.3f" % r.get(b, float("nan")) for b in batches)))

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
