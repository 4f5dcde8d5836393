#!/usr/bin/env bash
# Interrupts train_toy_encoder with SIGINT (Ctrl-C) right after its first evaluation, N times, and
# checks each time that it saved a checkpoint and exited with 130 (the scenario of the example's
# ctest, stage 3, on its own). A crash (a signal landing in a oneDNN kernel used to corrupt the
# heap) fails it at once.
#   scripts/sigint_loop.sh PROGRAM [N=100] [flags...]     (flags default to --steps 400 --dropout 0.1)
set -euo pipefail
program=$(realpath "$1")
runs=${2:-100}
shift $(($# >= 2 ? 2 : 1))
flags=("$@")
((${#flags[@]})) || flags=(--steps 400 --dropout 0.1)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
for ((run = 1; run <= runs; run++)); do
  rm -f int.ckpt int.csv
  "$program" "${flags[@]}" --plot "" --checkpoint-interval 0 --checkpoint int.ckpt --csv int.csv >int.log 2>&1 &
  pid=$!
  for ((t = 0; t < 6000; t++)); do
    [[ -f int.csv && $(wc -l <int.csv) -ge 2 ]] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.01
  done
  kill -INT "$pid" 2>/dev/null || true
  status=0
  wait "$pid" || status=$?
  if [[ $status != 130 || ! -f int.ckpt ]] || ! grep -q "stopped by Ctrl-C at step" int.log; then
    echo "run $run of $runs: exit $status, checkpoint $([[ -f int.ckpt ]] && echo written || echo missing)" >&2
    tail -n 5 int.log >&2
    exit 1
  fi
done
echo "sigint_loop: $runs of $runs interrupted runs saved a checkpoint and exited with 130"
