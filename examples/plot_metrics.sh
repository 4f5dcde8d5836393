#!/bin/sh
# Renders the metrics CSV of an xgrad::train::Trainer (step,loss,<metric>,lr,elapsed: one row per
# evaluation, <metric> named by the program, e.g. val_accuracy or val_loss) to a PNG, one panel per
# metric against the step: the training loss (log scale) with the held-out loss beside it when
# the CSV has a *loss column, then each other metric (an accuracy in %), then the learning rate.
# The title is the program's (--title), else the CSV's file name.
#
#   sh examples/plot_metrics.sh [--title NAME] METRICS.csv [OUT.png]     (OUT: METRICS.png)
#
# Needs gnuplot (apt-get install gnuplot-nox). The PNG is written as xgrad writes its files
# (docs/reliability.md, "Output rule"): into a temporary file beside it, renamed over it once
# gnuplot succeeded; a target that is not a regular file (a FIFO, a device) is refused.
set -eu
usage() {
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
}
title=
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --title) [ $# -ge 2 ] || { echo "plot_metrics.sh: --title needs a value" >&2; exit 2; }; title=$2; shift 2 ;;
    --) shift; break ;;
    -*) echo "plot_metrics.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  usage >&2
  exit 2
fi
csv=$1
png=${2:-${csv%.csv}.png}
[ -n "$title" ] || title=$(basename "$csv" .csv)

if ! command -v gnuplot >/dev/null 2>&1; then
  echo "plot_metrics.sh: gnuplot is not installed; install it with: apt-get install gnuplot-nox" >&2
  exit 1
fi
if [ ! -r "$csv" ] || [ ! -f "$csv" ]; then
  echo "plot_metrics.sh: cannot read $csv" >&2
  exit 1
fi
header=$(head -n 1 "$csv")
case $header in
  step,loss,*) ;;
  *) echo "plot_metrics.sh: $csv is not a Trainer CSV (expected a header step,loss,...; got '$header')" >&2; exit 1 ;;
esac
if [ "$(wc -l <"$csv")" -lt 2 ]; then
  echo "plot_metrics.sh: $csv has no rows yet" >&2
  exit 1
fi

# The panels: "loss" (training loss, and every other *loss column on the same axis), each other
# metric column, and "lr". Columns are numbered from 1 (gnuplot's).
losses=""; others=""; lr=0; n=0
old_ifs=$IFS; IFS=,
for name in $header; do
  n=$((n + 1))
  case $name in
    step|elapsed) ;;
    lr) lr=$n ;;
    loss) ;;
    *loss*) losses="$losses $n:$name" ;;
    *) others="$others $n:$name" ;;
  esac
done
IFS=$old_ifs
panels=1
for _ in $others; do panels=$((panels + 1)); done
[ "$lr" -eq 0 ] || panels=$((panels + 1))
if [ -e "$png" ] && [ ! -f "$png" ]; then
  echo "plot_metrics.sh: $png is not a regular file; refusing to replace it" >&2
  exit 1
fi
tmp=$(dirname "$png")/.$(basename "$png").tmp-$$
trap 'rm -f "$tmp"' EXIT

quote() { printf %s "$1" | sed "s/'/''/g"; }
esc() { printf %s "$1" | sed 's/_/\\\\_/g'; }
{
  echo "set terminal pngcairo size 900,$((220 * panels + 60)) font ',11'"
  echo "set output '$(quote "$tmp")'"
  echo "set datafile separator ','"
  echo "set multiplot layout $panels,1 title '$(quote "$(esc "$title")")'"
  echo "set grid xtics ytics"
  echo "set key top right"
  echo "set logscale y"
  echo "set ylabel 'loss'"
  plot="plot csv using 1:2 skip 1 with linespoints pt 7 ps 0.5 lw 2 title 'training loss (mean since the last row)'"
  for c in $losses; do
    plot="$plot, csv using 1:${c%%:*} skip 1 with linespoints pt 7 ps 0.5 lw 2 title 'held-out $(esc "${c#*:}")'"
  done
  echo "$plot"
  echo "unset logscale y"
  for c in $others; do
    name=${c#*:}
    case $name in
      *acc*) echo "set ylabel '$(esc "$name") (%)'"
             echo "plot csv using 1:(\$${c%%:*} * 100) skip 1 with linespoints pt 7 ps 0.5 lw 2 title '$(esc "$name")'" ;;
      *) echo "set ylabel '$(esc "$name")'"
         echo "plot csv using 1:${c%%:*} skip 1 with linespoints pt 7 ps 0.5 lw 2 title '$(esc "$name")'" ;;
    esac
  done
  if [ "$lr" -ne 0 ]; then
    echo "set xlabel 'step'"
    echo "set ylabel 'learning rate'"
    echo "plot csv using 1:$lr skip 1 with lines lw 2 title 'lr'"
  fi
  echo "unset multiplot"
} | gnuplot -e "csv='$(quote "$csv")'" /dev/stdin
mv -f "$tmp" "$png"
echo "wrote $png"
