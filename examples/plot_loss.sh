#!/bin/sh
# Renders the metrics CSV of train_toy_encoder (step,loss,accuracy,lr,elapsed) to a PNG: the
# training loss (log scale, left axis) and the held-out accuracy (right axis) against the step.
#
#   sh examples/plot_loss.sh [toy_encoder.csv [toy_encoder.png]]
#
# Needs gnuplot (apt-get install gnuplot-nox).
set -eu
csv=${1:-toy_encoder.csv}
png=${2:-${csv%.csv}.png}

if ! command -v gnuplot >/dev/null 2>&1; then
  echo "plot_loss.sh: gnuplot is not installed; install it with: apt-get install gnuplot-nox" >&2
  exit 1
fi
if [ ! -r "$csv" ]; then
  echo "plot_loss.sh: cannot read $csv" >&2
  exit 1
fi
if [ "$(wc -l <"$csv")" -lt 2 ]; then
  echo "plot_loss.sh: $csv has no rows yet" >&2
  exit 1
fi

# The file names reach gnuplot as variables, never as part of its script.
gnuplot -e "csv='$(printf %s "$csv" | sed "s/'/''/g")'; png='$(printf %s "$png" | sed "s/'/''/g")'" /dev/stdin <<'GNUPLOT'
set terminal pngcairo size 900,500 font ",11"
set output png
set datafile separator ","
set title "train\\_toy\\_encoder"
set xlabel "step"
set ylabel "training loss (mean since the last row)"
set logscale y
set ytics nomirror
set y2label "held-out token accuracy (%)"
set y2range [0:100]
set y2tics 10
set grid xtics ytics
set key center right
plot csv using 1:2 skip 1 with linespoints pt 7 ps 0.5 lw 2 title "loss" axes x1y1, \
     csv using 1:($3 * 100) skip 1 with linespoints pt 7 ps 0.5 lw 2 title "accuracy" axes x1y2
GNUPLOT
echo "wrote $png"
