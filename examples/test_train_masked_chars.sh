#!/usr/bin/env bash
# ctest's check of train_masked_chars on a small word list (tests/fixtures/words_small.txt, 400
# lines of /usr/share/dict/words, 19 of them not lower-case a-z), with a small model:
#   1. the training loss falls along the CSV;
#   2. a run stopped mid-epoch with --stop-at, then resumed from its checkpoint (the DataLoader's
#      position, with 2 worker threads, included), ends with the same weights bit for bit and the
#      same CSV rows as an uninterrupted one;
#   2b. --resume of the finished run with no larger --steps trains nothing and rewrites neither the
#      checkpoint nor the CSV (its weights come from the checkpoint);
#   3. --resume with a larger --steps extends the run;
#   4. --predict fills the blanks with the top 3 letters from the checkpoint;
#   5. a missing word list, a bad flag, --predict without a checkpoint and a --resume with a
#      contradicting flag are refused with a message naming the fix; so is every path flag given a
#      FIFO or /dev/zero, under a timeout, and --seed -1; an output path in a missing folder is
#      refused before the word list is read, naming the flag; --help names the CSV's columns.
#   6. when XGRAD_ONNX_TOOLS (tests/onnx) and XGRAD_ONNXRUNTIME (onnxruntime-node's folder) are set:
#      run 1's --export-onnx model passes onnx's checker and ONNX Runtime gives the program's logits
#      on its sample (two batch sizes and word lengths).
#
#   test_train_masked_chars.sh PROGRAM WORKDIR WORDS
set -euo pipefail
program=$1
work=$2
words=$3
flags=(--words "$words" --steps 160 --batch-size 32 --d-model 32 --layers 1 --heads 2 --dim-feedforward 64
       --warmup 20 --lr 0.01 --eval-interval 40 --workers 2 --plot "" --checkpoint-interval 0)

rm -rf "$work"
mkdir -p "$work"
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }

echo "== 1. uninterrupted run"
onnx_flags=()
[[ -n ${XGRAD_ONNX_TOOLS:-} ]] && onnx_flags=(--export-onnx chars.onnx)
"$program" "${flags[@]}" --checkpoint full.ckpt --csv full.csv --save-weights full.safetensors "${onnx_flags[@]}" |
  tee full.log
grep -q "341 training, 40 held out, 19 lines skipped" full.log || fail "the word counts are not printed"
[[ $(tail -n 1 full.csv | cut -d, -f1) == 160 ]] || fail "the CSV does not end at step 160"
first=$(sed -n 2p full.csv | cut -d, -f2)
last=$(tail -n 1 full.csv | cut -d, -f2)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.2) }' || fail "the loss went from $first to $last"
echo "training loss fell from $first to $last"
[[ $(head -n 1 full.csv) == "step,loss,val_accuracy,lr,elapsed" ]] || fail "the CSV header is $(head -n 1 full.csv)"

echo "== 2b. --resume of the finished run with no more steps: nothing trained nor rewritten"
ls -l --time-style=+%s.%N full.ckpt full.csv >before.txt
"$program" --resume full.ckpt --checkpoint full.ckpt --csv full.csv --save-weights only.safetensors --plot "" \
  --workers 2 --eval-interval 40 | tee only.log
grep -q "0 steps in this run" only.log || fail "resuming the finished run trained"
ls -l --time-style=+%s.%N full.ckpt full.csv | diff before.txt - || fail "resuming the finished run rewrote a file"
cmp full.safetensors only.safetensors || fail "the weights of the checkpoint differ from the run's"

echo "== 2. stopped at step 75 (mid-epoch), then resumed"
"$program" "${flags[@]}" --checkpoint half.ckpt --csv half.csv --stop-at 75
"$program" --resume half.ckpt --checkpoint half.ckpt --csv half.csv --save-weights half.safetensors --plot "" \
  --workers 2 --eval-interval 40
cmp full.safetensors half.safetensors || fail "the resumed run's weights differ"
diff <(cut -d, -f1-4 full.csv) <(cut -d, -f1-4 half.csv) || fail "the resumed run's CSV differs"

echo "== 3. extended to 200 steps"
"$program" --resume full.ckpt --steps 200 --checkpoint long.ckpt --csv full.csv --plot "" --eval-interval 10 \
  | tee long.log
grep -q "at step 160 of 200" long.log || fail "the run was not extended"
lr=$(grep "^170," full.csv | cut -d, -f4)  # the lr of step 170's update: the new cosine's, not ~0
awk -v lr="$lr" 'BEGIN { exit !(lr > 1e-4) }' || fail "the extended run's learning rate is $lr"
[[ $(tail -n 1 full.csv | cut -d, -f1) == 200 ]] || fail "the extended CSV does not end at step 200"

echo "== 4. --predict"
"$program" --checkpoint full.ckpt --predict "h_llo w_rld" | tee predict.log
grep -Eq "^h_llo: blank 2:  [a-z] 0\.[0-9]{3}  [a-z] 0\.[0-9]{3}  [a-z] 0\.[0-9]{3}$" predict.log ||
  fail "--predict printed no top-3 letters"
grep -q "^w_rld: blank 2:" predict.log || fail "--predict skipped a word"

echo "== 5. refused"
refused() {  # expected message, then the command
  local expected=$1 status=0
  shift
  "$@" >bad.log 2>&1 || status=$?
  cat bad.log
  [[ $status != 0 ]] && grep -q -- "$expected" bad.log || fail "not refused with '$expected': $*"
}
refused "no word list missing.txt: apt-get install wamerican, or pass --words FILE" "$program" --words missing.txt
refused "--steps" "$program" --steps abc
# Flag errors are one short line (CLI11's own check printed a 300-digit range); --threads 0 is
# refused, as torch.set_num_threads(0) is.
refused "^--lr: expected a positive number, got 'abc'$" "$program" --lr abc
refused "^--threads: expected an integer in .1, 256., got '0'$" "$program" --threads 0
refused "train first, or pass --checkpoint FILE" "$program" --predict "h_llo" --checkpoint none.ckpt
refused "--d-model 8 differs from the checkpoint" "$program" --resume full.ckpt --d-model 8 --csv ""
# Path flags given a FIFO (which blocked forever) or /dev/zero (read until memory ran out).
mkfifo fifo
for flag in --words --resume --checkpoint --csv --save-weights --plot --export-onnx; do
  refused "^$flag: expected a regular file, got 'fifo', a FIFO (named pipe)$" timeout 60 "$program" "$flag" fifo
  refused "^$flag: expected a regular file, got '/dev/zero', a character device$" timeout 60 "$program" "$flag" /dev/zero
done
refused "^--checkpoint: expected a regular file, got 'fifo', a FIFO (named pipe)$" \
  timeout 60 "$program" --predict "h_llo" --checkpoint fifo
refused "^--seed: expected an integer in \[0, 18446744073709551615\], got '-1'$" "$program" --seed -1
for flag in --checkpoint --csv --save-weights --plot; do
  refused "^$flag nodir/out: the folder nodir does not exist$" "$program" --words "$words" "$flag" nodir/out
  grep -q "^words:" bad.log && fail "$flag nodir/out was refused only after reading the words"
done
"$program" --help >help.txt; grep -q "step,loss,val_accuracy,lr,elapsed" help.txt || fail "--help does not name the CSV's columns"

if [[ -n ${XGRAD_ONNX_TOOLS:-} ]]; then
  echo "== 6. the exported model in onnx's checker and ONNX Runtime"
  /usr/bin/python3 "$XGRAD_ONNX_TOOLS/check_onnx_models.py" chars.onnx
  if [[ ! -f ${XGRAD_ONNXRUNTIME:-}/package.json ]]; then
    echo "SKIP (ONNX Runtime part of step 6): onnxruntime-node is not in '${XGRAD_ONNXRUNTIME:-}'" \
         "(ctest's onnx_runtime_install could not install it: npm's registry unreachable?)"
  else
    node "$XGRAD_ONNX_TOOLS/check_onnx_runtime.cjs" "$XGRAD_ONNXRUNTIME" chars.onnx.sample.json
  fi
fi
echo "PASS"
