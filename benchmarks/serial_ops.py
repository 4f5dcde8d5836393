#!/usr/bin/python3
"""Which ops do not split: each op's self time per training step at 1 and 2 threads.

Runs bench_train_step --config C --threads N --profile FILE for each configuration and thread
count, reads the Chrome traces (each event's "self us", on the profiled thread) and prints one
markdown table per configuration: per op (forward, or a node's backward), its self time per step
at each count, the speedup from the first count to the last, and the pool chunks it ran per step at
the last count (0: the op never split its work). An op whose speedup stays below 1.5 at 2 threads
runs (mostly) serially; on a machine whose other core is busy, the chunk count is the surer sign.

    /usr/bin/python3 benchmarks/serial_ops.py --xgrad-bin build/rel/benchmarks/bench_train_step
    /usr/bin/python3 benchmarks/serial_ops.py --configs medium --threads 1,4 --rounds 3
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict


def profile(binary, config, threads, min_time, workdir):
    """{name: self ms per step} and {name: pool chunks per step} of one run (a chunk is named
    after the op that split the job), and the number of timed steps."""
    path = os.path.join(workdir, f"{config}.{threads}.json")
    cmd = [binary, "--config", config, "--threads", str(threads), "--min-time", str(min_time), "--profile", path]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    profiled = [e for e in events if e.get("ph") == "X" and e.get("tid") == 0]
    steps = sum(1 for e in profiled if e["name"] == "backward") or 1
    self_us, chunks = defaultdict(float), defaultdict(int)
    for e in profiled:
        self_us[e["name"]] += e.get("args", {}).get("self us", 0.0)
    for e in events:
        if e.get("ph") == "X" and e["name"].startswith("chunk: "):
            chunks[e["name"][len("chunk: "):]] += 1
    return ({name: us / 1e3 / steps for name, us in self_us.items()},
            {name: n / steps for name, n in chunks.items()}, steps)


def median_of(dicts):
    """{name: the median over dicts of dict[name] (0 where absent)}."""
    names = set().union(*(d.keys() for d in dicts))
    return {n: statistics.median(d.get(n, 0.0) for d in dicts) for n in names}


def table(config, counts, runs, chunks, min_ms):
    lo, hi = counts[0], counts[-1]
    names = sorted(set().union(*(r.keys() for r in runs.values())), key=lambda n: -runs[lo].get(n, 0.0))
    lines = [f"| {config}: op | pass | " + " | ".join(f"{t} thr (ms/step)" for t in counts) +
             f" | speedup {lo}->{hi} | chunks/step at {hi} |",
             "|---|---|" + "---:|" * (len(counts) + 2)]
    total = {t: sum(runs[t].values()) for t in counts}
    for name in names:
        if runs[lo].get(name, 0.0) < min_ms:
            continue
        kind = "backward" if name.endswith("Backward") else ("engine" if name == "backward" else "forward")
        ms = [runs[t].get(name, 0.0) for t in counts]
        speedup = ms[0] / ms[-1] if ms[-1] > 0 else float("inf")
        mark = " **serial**" if speedup < 1.5 else ""
        lines.append(f"| {name} | {kind} | " + " | ".join(f"{m:.2f}" for m in ms) + f" | {speedup:.2f}{mark} | "
                     f"{chunks.get(name, 0.0):.0f} |")
    lines.append(f"| (all) | | " + " | ".join(f"{total[t]:.2f}" for t in counts) +
                 f" | {total[lo] / total[hi]:.2f} | |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--xgrad-bin", default="build/rel/benchmarks/bench_train_step")
    ap.add_argument("--configs", default="medium,large")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--min-time", type=float, default=3.0, help="seconds of timed steps per run")
    ap.add_argument("--min-ms", type=float, default=0.05, help="leave out ops below this at the first count")
    ap.add_argument("--rounds", type=int, default=1, help="runs of each (config, count); each cell the median")
    args = ap.parse_args()
    counts = sorted({int(t) for t in args.threads.split(",")})
    with tempfile.TemporaryDirectory() as workdir:
        for config in args.configs.split(","):
            samples = {t: [] for t in counts}
            for _ in range(args.rounds):  # the counts interleaved, so that a busy spell hits each
                for t in counts:
                    samples[t].append(profile(args.xgrad_bin, config, t, args.min_time, workdir))
            runs = {t: median_of([s[0] for s in samples[t]]) for t in counts}
            chunks = median_of([s[1] for s in samples[counts[-1]]])
            steps = {t: sum(s[2] for s in samples[t]) for t in counts}
            print(f"\n{config}: " + ", ".join(f"{steps[t]} steps at {t} thread(s)" for t in counts) +
                  f" in {args.rounds} round(s); each cell the median of the rounds\n")
            print(table(config, counts, runs, chunks, args.min_ms))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
