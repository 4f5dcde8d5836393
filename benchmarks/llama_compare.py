#!/usr/bin/python3
"""The Llama family's training step side by side: xgrad (build/release/benchmarks/bench_llama) and
PyTorch (benchmarks/llama_torch.py, a literal port of transformers' LlamaForCausalLM), same shape,
context, batch 1, AdamW, interleaved in one run: each round runs both (the order swapping each
round), each in its own process, so that a changing load hits both. Reports each framework's median
over the rounds (each run's own median step, its first step excluded), the ratio (PyTorch / xgrad),
and the sgemm limit of the run (bench_common.measure_limits: the fastest 1024^3 float32 gemm of
xgrad's OpenBLAS and oneDNN and torch.mm at the same thread count, measured before the first round
and after the last, the faster kept) against the step's model FLOPs / time.

    /usr/bin/python3 benchmarks/llama_compare.py                  # SmolLM2-135M, context 1024, 2 threads, 3 rounds
    /usr/bin/python3 benchmarks/llama_compare.py --quick          # 4 layers, context 256, 2 rounds
    /usr/bin/python3 benchmarks/llama_compare.py --rounds 5 --steps 3 --xgrad-bin path/to/bench_llama

Model FLOPs of a step (matmuls only, the causal attention counted whole, as PyTorch computes it):
per layer forward 2*T*H*(2*Hq + 2*Hkv) (q, k, v, o projections; Hq = heads * head_dim, Hkv =
kv_heads * head_dim) + 6*T*H*I (gate, up, down) + 4*T^2*Hq (QK^T and PV), the tied head 2*T*H*V;
backward twice the forward.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

import bench_common

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")


def step_flops(shape, layers, t):
    c = bench_common.LLAMA_SHAPES[shape]
    h, hq, hkv = c["hidden"], c["heads"] * c["head_dim"], c["kv_heads"] * c["head_dim"]
    layer = 2 * t * h * (2 * hq + 2 * hkv) + 6 * t * h * c["inter"] + 4 * t * t * hq
    return 3 * (layers * layer + 2 * t * h * c["vocab"])


def run(cmd, threads, timeout):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=bench_common.thread_env(threads), timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": "timed out after %d s" % timeout}
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="smollm2-135m", choices=["smollm2-135m", "llama-3.2-1b", "tiny"])
    ap.add_argument("--L", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=0, help="override the shape's layer count (0: keep)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3, help="steps per run (the first is excluded from its median)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="4 layers, context 256, 2 rounds")
    ap.add_argument("--xgrad-bin", default=os.path.join(ROOT, "build/release/benchmarks/bench_llama"))
    ap.add_argument("--no-limit", action="store_true", help="skip the sgemm limit")
    ap.add_argument("--timeout", type=int, default=1800, help="per process, seconds")
    ap.add_argument("--json", help="write every run's record here")
    a = ap.parse_args()
    if a.quick:
        a.layers, a.L, a.rounds = a.layers or 4, min(a.L, 256), min(a.rounds, 2)
    layers = a.layers or bench_common.LLAMA_SHAPES[a.shape]["layers"]
    common = ["--shape", a.shape, "--L", str(a.L), "--layers", str(layers), "--steps", str(a.steps),
              "--threads", str(a.threads)]
    cmds = {"xgrad": [a.xgrad_bin] + common + ["--generate", "0"],
            "torch": [sys.executable, os.path.join(HERE, "llama_torch.py")] + common}
    gemm_bin = os.path.join(os.path.dirname(a.xgrad_bin), "bench_train_step")
    limits = []

    def measure_limit():
        if not a.no_limit:
            lim, _ = bench_common.measure_limits([a.threads], gemm_bin, log=print)
            if a.threads in lim:
                limits.append(lim[a.threads])

    print("llama_compare: %s, %d layers, context %d, batch 1, %d threads, %d steps a run, %d rounds" %
          (a.shape, layers, a.L, a.threads, a.steps, a.rounds))
    print(bench_common.describe_torch(bench_common.torch_info_child()))
    measure_limit()
    records = {"xgrad": [], "torch": []}
    for r in range(a.rounds):
        for fw in (["xgrad", "torch"] if r % 2 == 0 else ["torch", "xgrad"]):
            rec = run(cmds[fw], a.threads, a.timeout)
            rec["round"] = r
            records[fw].append(rec)
            print("round %d %-5s %s" % (r, fw, rec.get("error") or "median step %.3f s (steps %s), peak RSS %.0f MiB" % (
                rec["median_step_s"], ", ".join("%.3f" % t for t in rec["step_times_s"]), rec["peak_rss_mib"])))
    measure_limit()
    flops = step_flops(a.shape, layers, a.L)
    med = {fw: statistics.median([r["median_step_s"] for r in recs if "median_step_s" in r] or [float("nan")])
           for fw, recs in records.items()}
    print("\nstep model FLOPs: %.1f G" % (flops / 1e9))
    for fw in ("xgrad", "torch"):
        print("%-5s median step %.3f s, %.1f GFLOP/s" % (fw, med[fw], flops / med[fw] / 1e9))
    print("speedup (torch / xgrad): %.2fx" % (med["torch"] / med["xgrad"]))
    best = max(limits, key=lambda x: x["gflops"]) if limits else None
    if best:
        print("sgemm limit at %d threads: %.1f GFLOP/s (%s); xgrad's step at %.0f%% of it, torch's at %.0f%%" % (
            a.threads, best["gflops"], best["gemm"], 100 * flops / med["xgrad"] / 1e9 / best["gflops"],
            100 * flops / med["torch"] / 1e9 / best["gflops"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "flops": flops, "limits": limits, "records": records, "median_s": med}, f)


if __name__ == "__main__":
    main()
