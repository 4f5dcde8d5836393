#!/usr/bin/python3
"""One GPT training step (forward, cross-entropy, backward, AdamW step) at batch 1 and long lengths:
xgrad's tiled and materialized attention paths (build/release/benchmarks/bench_gpt_long) and the
same module in PyTorch 1.13 (TorchGPT of scripts/make_gpt_fixture.py, its only attention path the
materialized one). Each configuration runs in its own process, so each peak RSS is its own. Prints
the markdown table of docs/performance.md.

    /usr/bin/python3 benchmarks/gpt_long.py [--lengths 1024,2048,4096,8192] [--layers 2]
        [--torch-lengths 1024,2048,4096] [--steps 2] [--threads 2] [--vocab 256]

PyTorch runs only at --torch-lengths; at the others its column gives the projected size of the
attention probabilities it keeps for the backward: P = 12 heads x L^2 x 4 bytes per layer, saved
for the backward (softmax's output, also bmm's input), times the layers, plus one more P alive
while the softmax runs (its input): a lower bound of its peak beyond the rest of the step.
A materialized xgrad run whose probabilities do not fit shows the memory guard's message.
"""
import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time

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
    print(json.dumps({"path": "torch", "L": length, "times_s": times, "median_s": steady[len(steady) // 2],
                      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}))


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def projected_p_gib(a, length):
    return (a.layers + 1) * a.heads * length * length * 4 / 2**30


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
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--torch-one", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_one:
        torch_step(a, a.torch_one)
        return
    common = ["--layers", str(a.layers), "--heads", str(a.heads), "--embd", str(a.embd), "--vocab", str(a.vocab),
              "--steps", str(a.steps), "--threads", str(a.threads)]
    torch_lengths = {int(x) for x in a.torch_lengths.split(",") if x}
    print("| L | tiled s | materialized s | PyTorch 1.13 s | peak RSS MiB tiled | materialized | PyTorch 1.13 |"
          " tiled MiB per 1k tokens beyond L = 1024 |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    base = None
    for length in [int(x) for x in a.lengths.split(",")]:
        t = run([a.bin, "--path", "tiled", "--L", str(length)] + common)
        m = run([a.bin, "--path", "materialized", "--L", str(length)] + common)
        if length in torch_lengths:
            p = run([sys.executable, os.path.abspath(__file__), "--torch-one", str(length)] + common)
        else:
            p = {"error": "not run: projected P >= %.1f GiB" % projected_p_gib(a, length)}
        if base is None and "error" not in t:
            base = (length, t["peak_rss_mib"])
        slope = ("%.0f" % ((t["peak_rss_mib"] - base[1]) / ((length - base[0]) / 1024))
                 if "error" not in t and base and length > base[0] else "")

        def cell(d, key):
            return d["error"][:160] if "error" in d else ("%.2f" % d[key] if key == "median_s" else "%.0f" % d[key])

        print("| %d | %s | %s | %s | %s | %s | %s | %s |" % (
            length, cell(t, "median_s"), cell(m, "median_s"), cell(p, "median_s") if "error" not in p else "",
            cell(t, "peak_rss_mib"), cell(m, "peak_rss_mib"), cell(p, "peak_rss_mib"), slope))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
