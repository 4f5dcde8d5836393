#!/usr/bin/env python3
"""Runs bench_attention_long for each length on both paths (one process per configuration, so each
peak RSS is its own), `rounds` times with the two paths interleaved, and prints the markdown table
of docs/performance.md: per path the median over rounds of each process's median step.

    /usr/bin/python3 benchmarks/attention_long.py [--bin build/release/benchmarks/bench_attention_long]
        [--lengths 256,512,1024,2048,4096] [--causal 1] [--dropout 0] [--threads 2] [--reps 3] [--rounds 3]

Materialized runs whose probabilities would not fit (the path's memory guard throws) show as such.
"""
import argparse
import json
import subprocess


def run(binary, path, length, a):
    cmd = [binary, "--path", path, "--L", str(length), "--causal", str(a.causal), "--dropout", str(a.dropout),
           "--threads", str(a.threads), "--reps", str(a.reps)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def median_run(results):
    """The run whose step time is the median (an error when any run failed)."""
    for r in results:
        if "error" in r:
            return r
    return sorted(results, key=lambda r: r["median_s"])[len(results) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/release/benchmarks/bench_attention_long")
    ap.add_argument("--lengths", default="256,512,1024,2048,4096")
    ap.add_argument("--causal", type=int, default=1)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    print("| L | tiled s | materialized s | speedup | tiled GFLOP/s (% of sgemm) | materialized GFLOP/s (% of sgemm)"
          " | peak RSS growth MiB tiled / materialized | saved state MiB tiled / materialized |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for length in [int(x) for x in a.lengths.split(",")]:
        runs = {"tiled": [], "materialized": []}
        for _ in range(a.rounds):
            for path in runs:
                runs[path].append(run(a.bin, path, length, a))
        t, m = median_run(runs["tiled"]), median_run(runs["materialized"])

        def rate(d):
            return "%.1f (%.0f%% of %.0f)" % (d["gflops"], 100 * d["of_sgemm"], d["sgemm_gflops"])

        if "error" in m:
            print("| %d | %.3f | (%s) | | %s | | %.0f / - | %.2f / - |" % (
                length, t["median_s"], m["error"][:80], rate(t), t["rss_growth_mib"], t["saved_mib"]))
            continue
        print("| %d | %.3f | %.3f | %.2fx | %s | %s | %.0f / %.0f | %.2f / %.0f |" % (
            length, t["median_s"], m["median_s"], m["median_s"] / t["median_s"], rate(t), rate(m),
            t["rss_growth_mib"], m["rss_growth_mib"], t["saved_mib"], m["saved_mib"]))


if __name__ == "__main__":
    main()
