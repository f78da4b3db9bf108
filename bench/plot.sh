#!/usr/bin/env bash
# Turn bench/run_paper.sh's JSON lines into SVG charts with gnuplot (Debian: gnuplot-nox) and
# markdown tables on stdout.   bash bench/plot.sh [RESULTS_DIR] [CHART_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
IN=${1:-bench/results}
OUT=${2:-docs/bench}
mkdir -p "$OUT"
command -v gnuplot >/dev/null || { echo "plot: gnuplot is missing (apt-get install gnuplot-nox)" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
TERM_SVG='set terminal svg size 720,420 dynamic font "sans,12" background "white"'

# jcol FILE PY_EXPR_PER_LINE: one output line per JSON line (d = the record)
jcol() { python3 -c "
import json, sys
for l in open('$1'):
    l = l.strip()
    if l:
        d = json.loads(l); print($2)"; }

# ---- memory per layout ----
if [ -s "$IN/layouts.jsonl" ]; then
    for ds in sharegpt alpaca; do
        jcol "$IN/layouts.jsonl" "'\"%s\" %.2f %.2f %.2f %.3f' % (d['allocation'], 100 - d['mean_waste_pct'], d['mean_reserved_pct'], d['mean_fragmentation_pct'], d['requests_per_s']) if d['dataset'] == '$ds' else ''" \
            | sed '/^$/d' >"$TMP/layout_$ds.dat"
    done
    gnuplot <<EOF
$TERM_SVG
set terminal svg size 900,460 dynamic font "sans,12" background "white"
set output "$OUT/memory_layouts.svg"
set title "Used KV memory: tokens, reservations, fragmentation (mean over steps)"
set style data histograms
set style histogram rowstacked
set style fill solid 0.8 border -1
set boxwidth 0.6
set yrange [0:100]
set ylabel "% of allocated KV slots"
set key below horizontal
set multiplot layout 1,2
set title "ShareGPT-like"
plot "$TMP/layout_sharegpt.dat" using 2:xtic(1) title "tokens", '' using 3 title "reserved", '' using 4 title "fragmentation"
set title "Alpaca-like"
plot "$TMP/layout_alpaca.dat" using 2:xtic(1) title "tokens", '' using 3 title "reserved", '' using 4 title "fragmentation"
unset multiplot
EOF
    gnuplot <<EOF
$TERM_SVG
set output "$OUT/throughput_layouts.svg"
set title "Offline throughput per KV layout, same KV budget"
set style data histograms
set style fill solid 0.8 border -1
set boxwidth 0.8
set ylabel "requests / s"
set yrange [0:*]
plot "$TMP/layout_sharegpt.dat" using 5:xtic(1) title "ShareGPT-like", "$TMP/layout_alpaca.dat" using 5 title "Alpaca-like"
EOF
fi

# ---- normalized latency against request rate, one chart per KV budget (serve_BUDGET.jsonl) ----
for f in "$IN"/serve_*.jsonl; do
    [ -s "$f" ] || continue
    mem=$(basename "$f" .jsonl); mem=${mem#serve_}
    for sys in pagellm llama.cpp; do
        jcol "$f" "'%s %.4f %.4f' % (d['request_rate'], d['normalized_latency_s_per_token'], d['request_throughput']) if d.get('label') == '$sys' else ''" \
            | sed '/^$/d' | sort -g >"$TMP/serve_$sys.dat"
    done
    gnuplot <<EOF
$TERM_SVG
set output "$OUT/normalized_latency_$mem.svg"
set title "ShareGPT-like serving, KV budget $mem: normalized latency against request rate"
set xlabel "request rate (req/s)"
set ylabel "normalized latency (s/token)"
set key left top
set grid
set logscale y
set yrange [0.005:*]
set xrange [0:*]
plot "$TMP/serve_pagellm.dat" using 1:2 with linespoints lw 2 pt 7 title "pagellm", \
     "$TMP/serve_llama.cpp.dat" using 1:2 with linespoints lw 2 pt 5 title "llama.cpp llama-server"
EOF
done

# ---- ablations ----
if [ -s "$IN/block_size.jsonl" ]; then
    jcol "$IN/block_size.jsonl" "'%d %.3f %.2f' % (d['block_size'], d['requests_per_s'], d['mean_waste_pct'])" >"$TMP/bs.dat"
    gnuplot <<EOF
$TERM_SVG
set output "$OUT/block_size.svg"
set title "Block size: throughput and waste (Alpaca-like, offline)"
set logscale x 2
set xlabel "block size (tokens)"
set ylabel "requests / s"
set y2label "waste (% of used slots)"
set ytics nomirror
set y2tics
set grid
plot "$TMP/bs.dat" using 1:2 with linespoints lw 2 pt 7 title "throughput", '' using 1:3 axes x1y2 with linespoints lw 2 pt 5 title "waste"
EOF
fi
if [ -s "$IN/preempt.jsonl" ]; then
    for m in recompute swap; do
        jcol "$IN/preempt.jsonl" "'%d %.3f %d' % (d['block_size'], d['requests_per_s'], d['preemptions']) if d['preemption_mode'] == '$m' else ''" | sed '/^$/d' >"$TMP/pre_$m.dat"
    done
    gnuplot <<EOF
$TERM_SVG
set output "$OUT/preemption.svg"
set title "Recompute against swap under a tight KV budget (ShareGPT-like)"
set logscale x 2
set xlabel "block size (tokens)"
set ylabel "requests / s"
set grid
plot "$TMP/pre_recompute.dat" using 1:2 with linespoints lw 2 pt 7 title "recompute", "$TMP/pre_swap.dat" using 1:2 with linespoints lw 2 pt 5 title "swap"
EOF
fi
if [ -s "$IN/sharing.jsonl" ]; then
    for m in parallel beam; do
        jcol "$IN/sharing.jsonl" "'%d %.2f' % (max(d['n'], d['beam_width']), d['sharing_saved_pct']) if (d['beam_width'] > 0) == ('$m' == 'beam') else ''" | sed '/^$/d' >"$TMP/share_$m.dat"
    done
    gnuplot <<EOF
$TERM_SVG
set output "$OUT/sharing.svg"
set title "KV memory saved by sharing blocks (Alpaca-like)"
set xlabel "parallel samples n / beam width"
set ylabel "memory saved (%)"
set yrange [0:100]
set grid
plot "$TMP/share_parallel.dat" using 1:2 with linespoints lw 2 pt 7 title "parallel sampling", "$TMP/share_beam.dat" using 1:2 with linespoints lw 2 pt 5 title "beam search"
EOF
fi
# ---- the vAttention layout (bench/vattn.sh's results in $IN/vattn) ----
if [ -d "$IN/vattn" ]; then
    python3 bench/vattn_tables.py "$IN/vattn" --dat "$TMP/vattn" >/dev/null
    if [ -s "$TMP/vattn/map.dat" ]; then
        gnuplot <<EOF
$TERM_SVG
set output "$OUT/vattn_map.svg"
set title "Mapping one physical page (commit included) and unmapping it"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set ylabel "microseconds per page"
set yrange [0:*]
set key top left
plot "$TMP/vattn/map.dat" using 2:xtic(1) title "map, memfd", '' using 3 title "map, anon", '' using 4 title "unmap, memfd", '' using 5 title "unmap, anon"
EOF
    fi
    if [ -s "$TMP/vattn/attention.dat" ]; then
        gnuplot <<EOF
$TERM_SVG
set output "$OUT/vattn_attention.svg"
set title "Paged kernel latency over the contiguous kernel's (Figure 18a; CPU time, 1 thread)"
set logscale x 2
set xlabel "context length (tokens)"
set ylabel "paged / contiguous (4K pages)"
set yrange [0:*]
set key top left
set grid
plot "$TMP/vattn/attention.dat" using 1:2 with linespoints lw 2 pt 7 title "1 sequence", '' using 1:3 with linespoints lw 2 pt 5 title "8 sequences", '' using 1:4 with linespoints lw 2 pt 9 title "32 sequences", 1 with lines dt 2 lc rgb "gray" notitle
EOF
    fi
    if [ -s "$TMP/vattn/layouts_sharegpt.dat" ]; then
        gnuplot <<EOF
$TERM_SVG
set terminal svg size 900,420 dynamic font "sans,12" background "white"
set output "$OUT/vattn_layouts.svg"
set style data histograms
set style fill solid 0.8 border -1
set boxwidth 0.8
set key below horizontal
set multiplot layout 1,2
set title "Requests / s at the same KV memory"
set yrange [0:*]
plot "$TMP/vattn/layouts_sharegpt.dat" using 2:xtic(1) title "ShareGPT-like", "$TMP/vattn/layouts_alpaca.dat" using 2 title "Alpaca-like"
set title "Tokens as % of used KV memory"
set yrange [0:100]
plot "$TMP/vattn/layouts_sharegpt.dat" using 3:xtic(1) title "ShareGPT-like", "$TMP/vattn/layouts_alpaca.dat" using 3 title "Alpaca-like"
unset multiplot
EOF
    fi
    for part in ablation slots; do
    [ -s "$TMP/vattn/$part.dat" ] || continue
    case $part in ablation) what="tight memory, a slot per request" ;; *) what="8 slots taken in turn" ;; esac
        gnuplot <<EOF
$TERM_SVG
set output "$OUT/vattn_$part.svg"
set title "Engine-thread mapping time per step, each technique off in turn ($what)"
set style data histograms
set style fill solid 0.8 border -1
set ylabel "microseconds per step (critical path)"
set yrange [0:*]
set key top left
plot "$TMP/vattn/$part.dat" using 2:xtic(1) title "4K pages", '' using 3 title "64K pages"
EOF
    done
fi
echo "plot: charts in $OUT" >&2
