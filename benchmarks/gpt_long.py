#!/usr/bin/python3
"""One GPT training step (forward, cross-entropy, backward, AdamW step) at batch 1 and long lengths:
xgrad's tiled and materialized attention paths (build/release/benchmarks/bench_gpt_long) and the
same module in PyTorch (TorchGPT of scripts/make_gpt_fixture.py, an nn.TransformerEncoder with a
causal float mask; whatever PyTorch the interpreter imports, its version printed). Each
configuration runs in its own process, so each peak RSS is its own. Prints the markdown table of
docs/performance.md.

    /usr/bin/python3 benchmarks/gpt_long.py [--lengths 1024,2048,4096,8192] [--layers 2]
        [--torch-lengths 1024,2048,4096] [--steps 2] [--threads 2] [--vocab 256]
    /usr/bin/python3 benchmarks/gpt_long.py --layers 12 --lengths 1024 --threads 1,2,4,8,16

--threads takes a list: every length then runs at every thread count (a row each), followed by a
thread sweep table: each path's speedup and parallel efficiency from the smallest count, and its
model GFLOP/s as a % of the float32 gemm limit at that count (the fastest of xgrad's OpenBLAS and
oneDNN sgemm, from bench_train_step beside --bin, and torch.mm, 1024^3, each measured with as many
threads; --no-limit skips it).

PyTorch runs only at --torch-lengths; at the others its column gives the projected size of the
attention probabilities it keeps for the backward: P = 12 heads x L^2 x 4 bytes per layer, saved
for the backward (softmax's output, also bmm's input), times the layers, plus one more P alive
while the softmax runs (its input): a lower bound of its peak beyond the rest of the step.
A materialized xgrad run whose probabilities do not fit shows the memory guard's message.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

import bench_common

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")


def torch_step(a, length):
    """Runs in a child process: TorchGPT steps at `length`, prints one line of JSON."""
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from make_gpt_fixture import TorchGPT, adamw
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model = TorchGPT(a.vocab, length, a.layers, a.heads, a.embd)
    model.train()
    opt = adamw(model, 1e-4, (0.9, 0.99), 0.1)
    tokens = torch.randint(a.vocab, (length + 1,))
    x, y = tokens[:-1].unsqueeze(0), tokens[1:]
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).reshape(-1, a.vocab), y)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    steady = sorted(times[1:] if len(times) > 1 else times)
    print(json.dumps({"path": "torch", "L": length, "threads": a.threads, "times_s": times,
                      "median_s": steady[len(steady) // 2],
                      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
                      **bench_common.torch_info(torch)}))


def run(cmd, threads):
    p = subprocess.run(cmd, capture_output=True, text=True, env=bench_common.thread_env(threads))
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def projected_p_gib(a, length):
    return (a.layers + 1) * a.heads * length * length * 4 / 2**30


def step_flops(a, length):
    """Model matmul FLOPs of one step, as compare.py counts them: per layer 8*T*d^2 + 4*T*d*4d +
    4*T^2*d forward (the causal attention counted whole), the tied head 2*T*d*V, backward 2x."""
    T, d = length, a.embd
    return 3.0 * (a.layers * (8.0 * T * d * d + 16.0 * T * d * d + 4.0 * T * T * d) + 2.0 * T * d * a.vocab)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/release/benchmarks/bench_gpt_long")
    ap.add_argument("--lengths", default="1024,2048,4096,8192")
    ap.add_argument("--torch-lengths", default="1024,2048,4096")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--embd", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--threads", default="2",
                    help="thread count, or a comma-separated list to sweep (e.g. 1,2,4,8,16; default 2)")
    ap.add_argument("--no-limit", action="store_true",
                    help="with several thread counts, skip measuring the gemm limit at each")
    ap.add_argument("--torch-one", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_one:
        a.threads = int(a.threads)
        torch_step(a, a.torch_one)
        return
    try:
        thread_counts = bench_common.parse_threads(a.threads)
    except ValueError as e:
        ap.error(str(e))
    common = ["--layers", str(a.layers), "--heads", str(a.heads), "--embd", str(a.embd), "--vocab", str(a.vocab),
              "--steps", str(a.steps)]
    torch_lengths = {int(x) for x in a.torch_lengths.split(",") if x}
    lengths = [int(x) for x in a.lengths.split(",") if x]
    # The PyTorch that runs, asked before the table (its name heads the columns).
    info = bench_common.torch_info_child() if torch_lengths & set(lengths) else None
    torch_name = "PyTorch %s" % info["torch_version"] if info and info.get("torch_version") else "PyTorch"
    print("%d layers, %d heads, n_embd %d, vocabulary %d, batch 1; %s" % (
        a.layers, a.heads, a.embd, a.vocab, bench_common.describe_torch(info) if info else "PyTorch not run"))
    print()
    print("| L | threads | tiled s | materialized s | %s s | peak RSS MiB tiled | materialized | %s |"
          " tiled MiB per 1k tokens beyond L = %d |" % (torch_name, torch_name, lengths[0] if lengths else 1024))
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    sys.stdout.flush()
    base = {}
    results = {}  # (path, L, threads) -> the run's record
    for length in lengths:
        for threads in thread_counts:
            flags = common + ["--threads", str(threads)]
            t = run([a.bin, "--path", "tiled", "--L", str(length)] + flags, threads)
            m = run([a.bin, "--path", "materialized", "--L", str(length)] + flags, threads)
            if length in torch_lengths:
                p = run([sys.executable, os.path.abspath(__file__), "--torch-one", str(length)] + flags, threads)
            else:
                p = {"error": "not run: projected P >= %.1f GiB" % projected_p_gib(a, length)}
            results.update({("tiled", length, threads): t, ("materialized", length, threads): m,
                            ("torch", length, threads): p})
            if threads not in base and "error" not in t:
                base[threads] = (length, t["peak_rss_mib"])
            b = base.get(threads)
            slope = ("%.0f" % ((t["peak_rss_mib"] - b[1]) / ((length - b[0]) / 1024))
                     if "error" not in t and b and length > b[0] else "")

            def cell(d, key):
                return d["error"][:160] if "error" in d else ("%.2f" % d[key] if key == "median_s" else "%.0f" % d[key])

            print("| %d | %d | %s | %s | %s | %s | %s | %s | %s |" % (
                length, threads, cell(t, "median_s"), cell(m, "median_s"),
                cell(p, "median_s") if "error" not in p else "",
                cell(t, "peak_rss_mib"), cell(m, "peak_rss_mib"), cell(p, "peak_rss_mib"), slope))
            sys.stdout.flush()
    if len(thread_counts) > 1:
        limits = {}
        if not a.no_limit:
            limits, _ = bench_common.measure_limits(
                thread_counts, os.path.join(os.path.dirname(os.path.abspath(a.bin)), "bench_train_step"))
        print("\nThread sweep: the median step at every thread count; from %d thread(s), the speedup and the "
              "parallel efficiency (speedup / thread ratio); in brackets the step's model GFLOP/s (%s) as a %% of "
              "the limit at that thread count (the fastest float32 gemm with as many threads, first row); last "
              "column: the speedup at the largest count over the limit's own.\n" % (
                  min(thread_counts), "3 (L (24 T d^2 + 4 T^2 d) + 2 T d V)"))
        rows = []
        for length in lengths:
            for path, name in (("tiled", "xgrad tiled"), ("materialized", "xgrad materialized"),
                               ("torch", torch_name)):
                ok = {t: results[(path, length, t)] for t in thread_counts
                      if "error" not in results[(path, length, t)]}
                if ok:
                    rows.append(("L %d %s" % (length, name), {t: r["median_s"] * 1e3 for t, r in ok.items()},
                                 {t: step_flops(a, length) / (r["median_s"] * 1e9) for t, r in ok.items()}))
        for line in bench_common.efficiency_table(rows, thread_counts, limits, markdown=True):
            print(line)


if __name__ == "__main__":
    main()
