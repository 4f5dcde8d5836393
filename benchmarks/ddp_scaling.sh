#!/usr/bin/env bash
# Data-parallel scaling of bench_ddp's configuration (large by default) on this machine: samples/s
# for 1 rank x 1 thread, 2 ranks x 1 thread and 1 rank x 2 threads, each the best of --rounds runs
# (the rounds interleaved, so that a burst of load elsewhere hits every setup alike), with the
# ratios to 1 rank x 1 thread and the 2-rank all-reduce figures. Prints a Markdown table. "cores
# used" is CPU time / wall time over the run's processes: on a machine that other work shares it
# falls below ranks x threads, and the samples/s with it.
#
#   benchmarks/ddp_scaling.sh [BENCH_DDP] [--rounds R] [bench_ddp flags: --config large --steps 8 ...]
#
# mpirun runs as root through OMPI_ALLOW_RUN_AS_ROOT; the 1-rank setups run without mpirun (so
# that no core binding keeps a rank's 2 threads on one core).
set -euo pipefail
bench=${1:-build/release/benchmarks/bench_ddp}
shift || true
rounds=3
args=()
while [[ $# -gt 0 ]]; do
  if [[ $1 == --rounds ]]; then rounds=$2; shift 2; else args+=("$1"); shift; fi
done
[[ -x $bench ]] || { echo "no $bench: build the target bench_ddp (cmake --build build/release --target bench_ddp)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1  # a rank waiting in an all-reduce yields its core
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((r = 1; r <= rounds; r++)); do
  "$bench" "${args[@]}" --threads 1 --json | sed 's/^/1x1 /' >>"$out"
  mpirun -np 2 --oversubscribe "$bench" "${args[@]}" --threads 1 --json | sed 's/^/2x1 /' >>"$out"
  "$bench" "${args[@]}" --threads 2 --json | sed 's/^/1x2 /' >>"$out"
done
/usr/bin/python3 - "$out" "$rounds" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    setup, obj = line.split(" ", 1)
    rows.setdefault(setup, []).append(json.loads(obj))
best = {k: max(v, key=lambda o: o["samples_per_s"]) for k, v in rows.items()}
base = best["1x1"]["samples_per_s"]
c = best["1x1"]
print(f"config {c['config']}, global batch {c['batch']}, best of {sys.argv[2]} rounds of {c['steps']} timed steps")
print()
print("| ranks x threads | step ms (median) | samples/s | vs 1x1 | cores used | samples per CPU s | all-reduce span ms | waited after backward ms | overlapped | blocking all-reduce ms |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for k in ["1x1", "2x1", "1x2"]:
    o = best[k]
    ddp = o["ranks"] > 1
    extra = (f"{o['allreduce_span_ms']:.1f} | {o['wait_ms']:.1f} | {100 * o['overlap']:.0f}% | {o['blocking_allreduce_ms']:.1f}"
             if ddp else "- | - | - | -")
    print(f"| {o['ranks']} x {o['threads']} | {o['median_ms']:.0f} | {o['samples_per_s']:.2f} | "
          f"{o['samples_per_s'] / base:.2f}x | {o['cores_used']:.2f} | {o['samples_per_cpu_s']:.2f} | {extra} |")
print()
print("every round (samples/s):", {k: [round(o["samples_per_s"], 2) for o in v] for k, v in rows.items()})
PY
