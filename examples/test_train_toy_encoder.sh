#!/usr/bin/env bash
# ctest's check of train_toy_encoder, on a shortened run (the flags after WORKDIR set its size and
# --min-accuracy its bar):
#   1. an uninterrupted run reaches --min-accuracy on the held-out sequences, well above what the
#      positional prior of sorted digits gives (34%), and its accuracy rises along the CSV;
#   2. the same run stopped halfway with --stop-at, then resumed from its checkpoint, ends with the
#      same weights bit for bit (the safetensors files are byte-identical) and the same CSV rows
#      (all columns but the elapsed time);
#   3. the same for a real SIGINT (Ctrl-C) at whatever step the run has reached: it saves a
#      checkpoint and exits with 130;
#   4. --resume with a larger --steps extends the run (the cosine reaches 0 at the new last step);
#   5. a bad flag, and a --resume with a flag that contradicts the checkpoint, are refused; so is
#      every path flag given a FIFO or /dev/zero (under a timeout), and --seed -1 or 2^64; an output
#      path in a missing folder is refused before training, naming the flag;
#   5b. --resume of the finished run with no larger --steps trains nothing and rewrites neither the
#      checkpoint nor the CSV (its weights, and with ONNX --export-onnx, come from the checkpoint);
#      --help names the CSV's columns (step,loss,val_accuracy,lr,elapsed);
#   6. when XGRAD_ONNX_TOOLS (tests/onnx) and XGRAD_ONNXRUNTIME (onnxruntime-node's folder) are set:
#      run 1's --export-onnx model passes onnx's checker, ONNX Runtime gives the program's logits on
#      its sample, and examples/onnx/sort_digits.mjs, copied into a folder of its own, prints the
#      program's own prediction for its first held-out sequence.
# Dropout is on (0.1) so that resuming must also restore the generator. With --bf16 among the flags,
# the runs also print the bfloat16 path, and stage 2's resume (given no flags) restores --bf16.
#
#   test_train_toy_encoder.sh PROGRAM WORKDIR --steps K [flags...]
set -euo pipefail
program=$1
work=$2
shift 2
flags=("$@" --dropout 0.1 --plot "" --checkpoint-interval 0)
steps=
for ((i = 1; i <= $#; i++)); do
  if [[ ${!i} == --steps ]]; then j=$((i + 1)); steps=${!j}; fi
done
[[ -n $steps ]] || { echo "give --steps" >&2; exit 2; }
half=$((steps / 2))
onnx_flags=()
[[ -n ${XGRAD_ONNX_TOOLS:-} ]] && onnx_flags=(--export-onnx toy.onnx)

rm -rf "$work"
mkdir -p "$work"
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
same_run() {  # $1 $2: two runs' weights and CSVs
  cmp "$1.safetensors" "$2.safetensors" || fail "the weights of $2 differ from $1"
  diff <(cut -d, -f1-4 "$1.csv") <(cut -d, -f1-4 "$2.csv") || fail "the CSV rows of $2 differ from $1"
}

echo "== 1. uninterrupted run"
"$program" "${flags[@]}" --checkpoint full.ckpt --csv full.csv --save-weights full.safetensors "${onnx_flags[@]}" |
  tee full.log
first=$(sed -n 2p full.csv | cut -d, -f3)
last=$(tail -n 1 full.csv | cut -d, -f3)
[[ $(tail -n 1 full.csv | cut -d, -f1) == "$steps" ]] || fail "the CSV does not end at step $steps"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b > a && b > 0.4) }' || fail "accuracy went from $first to $last"
[[ $(head -n 1 full.csv) == "step,loss,val_accuracy,lr,elapsed" ]] || fail "the CSV header is $(head -n 1 full.csv)"
echo "held-out accuracy rose from $first to $last"

echo "== 2. stopped at step $half (--stop-at), then resumed"
"$program" "${flags[@]}" --checkpoint half.ckpt --csv half.csv --stop-at "$half"
[[ $(tail -n 1 half.csv | cut -d, -f1) -le $half ]] || fail "the run went past --stop-at"
"$program" --resume half.ckpt --checkpoint half.ckpt --csv half.csv --save-weights half.safetensors --plot ""
same_run full half

echo "== 3. interrupted by SIGINT, then resumed (with the same flags again)"
"$program" "${flags[@]}" --checkpoint int.ckpt --csv int.csv >int.log 2>&1 &
pid=$!
# Interrupt as soon as the first evaluation is written: most of the run is still ahead.
for ((t = 0; t < 6000; t++)); do
  [[ -f int.csv && $(wc -l <int.csv) -ge 2 ]] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.01
done
kill -INT "$pid" 2>/dev/null || true
status=0
wait "$pid" || status=$?
cat int.log
[[ $status == 130 ]] || fail "the interrupted run exited with $status, not 130"
grep -q "stopped by Ctrl-C at step" int.log || fail "no message about the interruption"
if [[ " ${flags[*]} " == *" --bf16 "* ]]; then
  grep -q "precision: bfloat16 autocast, gemm: " int.log || fail "a --bf16 run does not say which bf16 path ran"
fi
[[ -f int.ckpt ]] || fail "no checkpoint after SIGINT"
"$program" "${flags[@]}" --resume int.ckpt --checkpoint int.ckpt --csv int.csv --save-weights int.safetensors
same_run full int

echo "== 4. extended: --resume with twice the --steps continues to the new last step"
long=$((steps * 2))
"$program" --resume full.ckpt --steps "$long" --checkpoint long.ckpt --csv long.csv --save-weights "" --plot "" \
  | tee long.log
[[ $(tail -n 1 long.csv | cut -d, -f1) == "$long" ]] || fail "the extended CSV does not end at step $long"
first=$(sed -n 2p long.csv | cut -d, -f4)  # the lr of the first extended evaluation: the new cosine's, not ~0
awk -v lr="$first" 'BEGIN { exit !(lr > 1e-5) }' || fail "the extended run's learning rate is $first"
status=0
"$program" --resume long.ckpt --steps "$steps" --checkpoint "" --csv "" >bad.log 2>&1 || status=$?
cat bad.log
[[ $status != 0 ]] && grep -q -- "is below the checkpoint's step" bad.log || fail "--steps below the checkpoint's step was accepted"

echo "== 5. refused flags"
status=0
"$program" --steps 0 >bad.log 2>&1 || status=$?
cat bad.log
[[ $status != 0 ]] && grep -q -- "--steps" bad.log || fail "--steps 0 was not refused with a message"
status=0
"$program" --resume full.ckpt --d-model 8 --checkpoint "" --csv "" >bad.log 2>&1 || status=$?
cat bad.log
[[ $status != 0 ]] && grep -q -- "--d-model 8 differs from the checkpoint" bad.log || fail "a contradicting flag was accepted"
# Path flags given a FIFO (which blocked forever) or /dev/zero (read until memory ran out), and
# seeds outside [0, 2^64 - 1] (CLI11 took -1 as 2^64 - 1).
mkfifo fifo
refused() {  # expected message, then the command
  local expected=$1 status=0
  shift
  "$@" >bad.log 2>&1 || status=$?
  cat bad.log
  [[ $status != 0 ]] && grep -q -- "$expected" bad.log || fail "not refused with '$expected': $*"
}
for flag in --resume --checkpoint --csv --save-weights --plot --export-onnx; do
  refused "^$flag: expected a regular file, got 'fifo', a FIFO (named pipe)$" timeout 60 "$program" "$flag" fifo
  refused "^$flag: expected a regular file, got '/dev/zero', a character device$" timeout 60 "$program" "$flag" /dev/zero
done
refused "^--seed: expected an integer in \[0, 18446744073709551615\], got '-1'$" "$program" --seed -1
refused "^--seed: expected an integer in \[0, 18446744073709551615\], got '18446744073709551616'$" \
  "$program" --seed 18446744073709551616

for flag in --checkpoint --csv --save-weights --plot --export-onnx; do
  [[ $flag == --export-onnx && -z ${XGRAD_ONNX_TOOLS:-} ]] && continue  # a build without ONNX refuses the flag
  refused "^$flag nodir/out: the folder nodir does not exist$" "$program" --steps 2 "$flag" nodir/out
  grep -q "^step " bad.log && fail "$flag nodir/out was refused only after training"
done
"$program" --help >help.txt; grep -q "step,loss,val_accuracy,lr,elapsed" help.txt || fail "--help does not name the CSV's columns"

echo "== 5b. --resume of the finished run with no more steps: nothing trained nor rewritten"
ls -l --time-style=+%s.%N full.ckpt full.csv >before.txt
cmp_ckpt=$(md5sum <full.ckpt)
export_flags=()
[[ -n ${XGRAD_ONNX_TOOLS:-} ]] && export_flags=(--export-onnx only.onnx)
"$program" --resume full.ckpt --checkpoint full.ckpt --csv full.csv --save-weights only.safetensors --plot "" \
  "${export_flags[@]}" | tee only.log
grep -q "0 steps in this run" only.log || fail "resuming the finished run trained"
ls -l --time-style=+%s.%N full.ckpt full.csv | diff before.txt - || fail "resuming the finished run rewrote a file"
[[ $(md5sum <full.ckpt) == "$cmp_ckpt" ]] || fail "the checkpoint changed"
cmp full.safetensors only.safetensors || fail "the weights of the checkpoint differ from the run's"
[[ -z ${XGRAD_ONNX_TOOLS:-} || -s only.onnx ]] || fail "--export-onnx wrote nothing"
plot=$(dirname "$0")/plot_metrics.sh
sh "$plot" --help >plot_help.txt; grep -q "step,loss,<metric>,lr,elapsed" plot_help.txt || fail "plot_metrics.sh --help does not name the columns"
if command -v gnuplot >/dev/null 2>&1; then
  sh "$plot" --title train_toy_encoder full.csv full.png && [[ -s full.png ]] || fail "plot_metrics.sh drew nothing"
fi

if [[ -n ${XGRAD_ONNX_TOOLS:-} ]]; then
  echo "== 6. the exported model in onnx's checker and ONNX Runtime"
  /usr/bin/python3 "$XGRAD_ONNX_TOOLS/check_onnx_models.py" toy.onnx
  if [[ ! -f ${XGRAD_ONNXRUNTIME:-}/package.json ]]; then
    echo "SKIP (ONNX Runtime part of step 6): onnxruntime-node is not in '${XGRAD_ONNXRUNTIME:-}'" \
         "(ctest's onnx_runtime_install could not install it: npm's registry unreachable?)"
  else
    node "$XGRAD_ONNX_TOOLS/check_onnx_runtime.cjs" "$XGRAD_ONNXRUNTIME" toy.onnx.sample.json
    mkdir -p js/node_modules
    cp "$(dirname "$0")/onnx/sort_digits.mjs" js/
    ln -sfn "$XGRAD_ONNXRUNTIME" js/node_modules/onnxruntime-node
    line=$(grep -m 1 -E '^  [0-9 ]+-> [0-9 ]+ +\((right|wrong)\)$' full.log)  # "  3 1 ... -> 1 3 ...  (right)"
    digits=${line%%->*}
    want=$(echo "${line#*->}" | sed -E 's/ +\((right|wrong)\)$//; s/^ +//')
    got=$(node js/sort_digits.mjs toy.onnx $digits)
    echo "sort_digits.mjs:$digits-> $got"
    [[ $got == "$want" ]] || fail "sort_digits.mjs printed '$got', the program predicted '$want'"
  fi
fi
echo "PASS"
