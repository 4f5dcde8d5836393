#!/usr/bin/python3
"""LoRA against full fine-tuning, and activation checkpointing against none, in one run.

Runs bench_llama (a Llama-family model of a published shape, random weights, batch 1, forward,
cross-entropy, backward, AdamW) for these configurations, each in its own process so that each
peak RSS is its own, interleaved over --rounds so that a slow spell of the machine touches them
all:

    full           every weight trains
    lora           LoRA of rank --rank on --targets (alpha 2 r), every other weight frozen
    full+ckpt      full, each layer recomputed in the backward (gradient_checkpointing_enable)
    lora+ckpt      both

Each configuration's time is the median of its steps after the first (the first allocates
AdamW's moments and faults in fresh memory; the second of a full run is often slower than the later
ones too, hence 5 steps) over all rounds; the table gives it against the full step's
and the peak RSS against the full run's (full+ckpt's when full did not run, as for a model that
fits only with checkpointing). The target LoRA was built for: a step at most 0.7x the full
step's (SmolLM2-135M's shape, context 1,024, 2 threads); docs/lora.md has where it stands.

    /usr/bin/python3 benchmarks/lora_step.py                          # SmolLM2-135M, L 1024, 5 steps, 2 rounds
    /usr/bin/python3 benchmarks/lora_step.py --configs full,lora --rounds 3
    /usr/bin/python3 benchmarks/lora_step.py --shape llama-3.2-1b --configs full+ckpt,lora+ckpt --steps 2 --rounds 1
    /usr/bin/python3 benchmarks/lora_step.py --bin old=/tmp/old/bench_llama --bin new=build/release/benchmarks/bench_llama

With several --bin LABEL=PATH, every binary runs every configuration in each round (for a before
and after side by side); ratios are to the full step of the same binary.
"""

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = ("full", "lora", "full+ckpt", "lora+ckpt")


def flags(config, rank, targets):
    f = []
    if config.startswith("lora"):
        f += ["--lora", str(rank), "--lora-targets"] + targets
    if config.endswith("+ckpt"):
        f += ["--gradient-checkpointing"]
    return f


def summarize(records):
    """records: bench_llama's JSON lines, each with "bin" and "config" added. Returns rows
    (bin, config, median s, steps, ratio to full, peak MiB, peak ratio to full) in input order."""
    groups = {}
    for r in records:
        g = groups.setdefault((r["bin"], r["config"]), {"steps": [], "peaks": []})
        g["steps"] += r["step_times_s"][1:] if len(r["step_times_s"]) > 1 else r["step_times_s"]
        g["peaks"].append(r["peak_rss_mib"])
    rows = []
    for (b, c), g in groups.items():
        full = groups.get((b, "full")) or groups.get((b, "full+ckpt"))
        med, peak = statistics.median(g["steps"]), max(g["peaks"])
        ratio = med / statistics.median(full["steps"]) if full else None
        peak_ratio = peak / max(full["peaks"]) if full else None
        rows.append((b, c, med, g["steps"], ratio, peak, peak_ratio))
    return rows


def table(rows):
    out = ["| binary | configuration | step (median) | steps | vs full | peak RSS | vs full |",
           "| --- | --- | ---: | --- | ---: | ---: | ---: |"]
    for b, c, med, steps, ratio, peak, peak_ratio in rows:
        out.append("| %s | %s | %.2f s | %s | %s | %.0f MiB | %s |" % (
            b, c, med, ", ".join("%.2f" % s for s in steps), "%.2fx" % ratio if ratio is not None else "-", peak,
            "%.2fx" % peak_ratio if peak_ratio is not None else "-"))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", action="append", default=[],
                    help="LABEL=PATH of a bench_llama (repeatable; default build/release's)")
    ap.add_argument("--shape", default="smollm2-135m")
    ap.add_argument("--L", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=0, help="override the shape's layer count (0: keep)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--targets", default="all-linear", help="comma-separated module names, or all-linear")
    ap.add_argument("--configs", default="full,lora,full+ckpt", help="of " + ", ".join(CONFIGS))
    ap.add_argument("--json", help="also write every run's JSON line here")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds allowed per run")
    args = ap.parse_args()

    bins = [b.split("=", 1) for b in args.bin] or [["xgrad", os.path.join(REPO, "build/release/benchmarks/bench_llama")]]
    configs = args.configs.split(",")
    for c in configs:
        if c not in CONFIGS:
            ap.error("unknown configuration %r (expected one of %s)" % (c, ", ".join(CONFIGS)))
    records = []
    for rnd in range(args.rounds):
        for label, path in bins:
            for c in configs:
                cmd = [path, "--shape", args.shape, "--L", str(args.L), "--steps", str(args.steps), "--generate", "0",
                       "--threads", str(args.threads), "--layers", str(args.layers)]
                cmd += flags(c, args.rank, args.targets.split(","))
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
                if p.returncode != 0:
                    sys.exit("failed (%d): %s\n%s" % (p.returncode, shlex.join(cmd), p.stderr[-2000:]))
                r = json.loads(p.stdout.strip().splitlines()[-1])
                r.update(bin=label, config=c, round=rnd, command=shlex.join(cmd))
                records.append(r)
                print("round %d %s %s: steps %s s, peak %.0f MiB" % (
                    rnd + 1, label, c, ", ".join("%.2f" % t for t in r["step_times_s"]), r["peak_rss_mib"]),
                    flush=True)
    if args.json:
        with open(args.json, "w") as f:
            f.write("".join(json.dumps(r) + "\n" for r in records))
    print()
    print("%s, context %d, batch 1, %d threads, %d rounds; each step time the median of steps 2.. of every run"
          % (args.shape, args.L, args.threads, args.rounds))
    print(table(summarize(records)))


if __name__ == "__main__":
    main()
