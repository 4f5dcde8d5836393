#!/usr/bin/env bash
# ctest's check of train_toy_encoder data-parallel over 2 ranks (label "distributed"), on a
# shortened run (the flags after WORKDIR set its size and --min-accuracy its bar):
#   1. a 2-rank run reaches --min-accuracy on the held-out sequences; rank 0 alone prints (one
#      progress line per evaluation, one header) and writes the CSV, checkpoint and weights;
#   2. the same run stopped halfway with --stop-at, then resumed by 2 ranks from the checkpoint,
#      ends with the same weights bit for bit and the same CSV rows. Dropout is on (0.1) and each
#      rank draws its masks from its own generator, so this needs every rank's generator state
#      saved and given back to that rank;
#   3. resuming that checkpoint in one process is refused (it was written by 2);
#   4. a --batch-size that 2 ranks cannot split is refused: the whole job ends non-zero with the
#      message, without hanging.
# Every mpirun is bounded by `timeout`, so a hang fails the test instead of stalling ctest.
#
#   XGRAD_MPIRUN="mpirun -np 2 --oversubscribe" test_train_toy_encoder_distributed.sh PROGRAM WORKDIR --steps K [flags...]
# XGRAD_MPIRUN: the command that starts 2 ranks (that default when unset); as root, Open MPI also
# needs --allow-run-as-root or OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (ctest sets them).
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
read -r -a launch <<<"${XGRAD_MPIRUN:-mpirun -np 2 --oversubscribe}"
ranks2() { timeout 240 "${launch[@]}" "$@"; }

rm -rf "$work"
mkdir -p "$work"
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }

echo "== 1. 2 ranks, uninterrupted"
ranks2 "$program" "${flags[@]}" --checkpoint full.ckpt --csv full.csv --save-weights full.safetensors | tee full.log
grep -q "data parallel: 2 ranks" full.log || fail "the run does not say it is data-parallel over 2 ranks"
[[ $(grep -c "^task:" full.log) == 1 ]] || fail "the header was printed more than once (by more than rank 0)"
rows=$(($(wc -l <full.csv) - 1))
lines=$(grep -c "^step " full.log)
[[ $lines == "$rows" ]] || fail "$lines progress lines for $rows evaluations: rank 0 alone must print them"
[[ $(tail -n 1 full.csv | cut -d, -f1) == "$steps" ]] || fail "the CSV does not end at step $steps"
grep -q "held-out accuracy:" full.log || fail "no final accuracy"

echo "== 2. 2 ranks stopped at step $half (--stop-at), then resumed by 2 ranks"
ranks2 "$program" "${flags[@]}" --checkpoint half.ckpt --csv half.csv --stop-at "$half"
[[ $(tail -n 1 half.csv | cut -d, -f1) -le $half ]] || fail "the run went past --stop-at"
ranks2 "$program" --resume half.ckpt --checkpoint half.ckpt --csv half.csv --save-weights half.safetensors --plot "" \
  | tee half.log
grep -q "resumed from half.ckpt at step $half" half.log || fail "no resume message"
cmp full.safetensors half.safetensors || fail "the resumed 2-rank run's weights differ from the uninterrupted one"
diff <(cut -d, -f1-4 full.csv) <(cut -d, -f1-4 half.csv) || fail "the resumed 2-rank run's CSV rows differ"

echo "== 3. a 2-rank checkpoint resumed by one process"
status=0
"$program" --resume half.ckpt --checkpoint "" --csv "" >one.log 2>&1 || status=$?
cat one.log
[[ $status != 0 ]] && grep -q "was written by a run of 2 process(es), this one has 1" one.log \
  || fail "one process resumed a 2-rank checkpoint"

echo "== 4. a batch that 2 ranks cannot split"
status=0
ranks2 "$program" --batch-size 63 --steps 2 --checkpoint "" --csv "" >odd.log 2>&1 || status=$?
cat odd.log
[[ $status != 0 && $status != 124 ]] || fail "the job exited with $status (124: it hung)"
grep -q -- "--batch-size 63 must be divisible by the 2 ranks" odd.log || fail "no message about the batch"
echo "PASS"
