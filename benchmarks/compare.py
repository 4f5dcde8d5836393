#!/usr/bin/python3
"""xgrad against PyTorch: the float32 training step of a pre-norm GELU TransformerEncoder.

Runs, in one invocation, xgrad's bench_train_step and the same step in PyTorch
(torch.nn.TransformerEncoder, enable_nested_tensor=False, norm_first=True, activation="gelu",
dropout=0, batch_first=True; torch.optim.Adam(lr=1e-4); mse_loss against a fixed random target)
for the configurations tiny, small, medium and large, and (when named, or with --configs all)
gpt2s: a GPT-2-small-shaped language
model step (12 layers x d 768, 12 heads, 1,024 tokens, batch 1, vocabulary 256; xgrad::models::GPT
and TorchGPT of scripts/make_gpt_fixture.py, cross-entropy, AdamW). Every (framework,
configuration, precision, thread count) runs in its own process, so each peak memory (the
process's ru_maxrss) is its own; each framework is reported at its fastest thread count for each
configuration, and the thread sweep table gives every count with its parallel efficiency and its
fraction of the float32 gemm limit at that count.

Threads (--threads, default 1, 2, 4, ... up to the CPU count): xgrad gets `--threads n`
(xgrad::set_num_threads: it splits gemms and kernels over its own threads and keeps OpenBLAS
single-threaded); PyTorch gets torch.set_num_threads(n) and OPENBLAS_NUM_THREADS /
OMP_NUM_THREADS / MKL_NUM_THREADS = n (a torch built on OpenBLAS, as Debian's, does its matmuls
there, and torch.set_num_threads does not reach it). Both children get the same environment.

    /usr/bin/python3 benchmarks/compare.py            # full run, several minutes on 2 cores
    /usr/bin/python3 benchmarks/compare.py --quick    # shorter timing loops
    /usr/bin/python3 benchmarks/compare.py --rounds 3 # three sweeps; each cell the median run
    /usr/bin/python3 benchmarks/compare.py --threads 1,2,4,8,16 --configs medium,large,gpt2s --bf16

It builds bench_train_step in --build-dir (default build/release) unless --xgrad-bin is given,
prints the side-by-side table and writes it as markdown (--markdown, default
benchmarks/results.md) with the command that reproduces it and the PyTorch that ran (its version,
BLAS and oneDNN as torch reports them). Any PyTorch the interpreter imports will do: Debian's
python3-torch with /usr/bin/python3, or a newer one from pip.
"""

import argparse
import datetime
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import time

import bench_common

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name: (B batch, N sequence, d model, h heads, ff feed-forward, L layers); the same as
# bench_train_step.cpp's kConfigs.
CONFIGS = {
    "tiny": (2, 3, 4, 2, 64, 3),
    "small": (16, 32, 64, 4, 256, 2),
    "medium": (32, 64, 256, 8, 1024, 4),
    "large": (8, 128, 512, 8, 2048, 2),
    "gpt2s": (1, 1024, 768, 12, 3072, 12),
}
# The configurations that are GPT language models (a causal mask, the tied head, cross-entropy
# over the next tokens, AdamW), with their vocabulary; the others are encoders.
GPT_VOCAB = {"gpt2s": 256}

# Targets: PyTorch ms / xgrad ms at least this (gpt2s: a stretch, as fast as PyTorch at GPT-2 small's size).
SPEEDUP_TARGETS = {"tiny": 40.0, "small": 2.0, "medium": 1.3, "large": 1.3, "gpt2s": 1.0}
# bf16 autocast targets: PyTorch bf16 ms / xgrad bf16 ms at least this (otherwise: faster).
BF16_SPEEDUP_TARGETS = {"medium": 1.3, "large": 1.3, "gpt2s": 1.3}

# Model matmul FLOPs per training step (see bench_train_step.cpp): forward
# 8*T*d^2 (QKV and out-projections) + 4*B*N^2*d (QK^T and PV) + 4*T*d*ff (feed-forward) per
# layer, T = B*N, and backward = 2x forward; a GPT adds its head, 2*T*d*V forward (its causal
# attention counted whole, as PyTorch computes it).
FLOP_FORMULA = "3 * L * (8*T*d^2 + 4*T*d*ff + 4*B*N^2*d), T = B*N (+ 3 * 2*T*d*V, a GPT's head)"


def step_flops(name):
    B, N, d, h, ff, L = CONFIGS[name]
    T = B * N
    return (3.0 * L * (8.0 * T * d * d + 4.0 * T * d * ff + 4.0 * B * N * N * d)
            + 3.0 * 2.0 * T * d * GPT_VOCAB.get(name, 0))


def shape_text(name):
    return "B{} N{} d{} h{} ff{} L{}".format(*CONFIGS[name]) + (f" V{GPT_VOCAB[name]}" if name in GPT_VOCAB else "")


# The gemm rates compare.py prints, at 1024^3: (record "gemm" field, label, float32?).
GEMM_KINDS = [("openblas", "OpenBLAS sgemm", True), ("onednn", "oneDNN sgemm", True), ("torch_mm", "torch.mm", True),
              ("bf16", "xgrad bf16 gemm", False), ("torch_bf16", "torch bf16 (autocast mm)", False)]
FP32_GEMMS = {k for k, _, fp32 in GEMM_KINDS if fp32}

# Target: a step's model GFLOP/s at least this fraction of the fastest float32 gemm of the run.
LIMIT_TARGETS = {"small": 0.50, "medium": 0.75, "large": 0.75, "gpt2s": 0.80}


def gemm_kind(r):
    """The gemm a record measured (records from before the oneDNN backend carry none)."""
    return r.get("gemm") or ("openblas" if r["framework"] == "xgrad" else "torch_mm")


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def quantile(sorted_ms, q):
    pos = q * (len(sorted_ms) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_ms) - 1)
    return sorted_ms[lo] + (pos - lo) * (sorted_ms[hi] - sorted_ms[lo])


def time_calls(call, t, on_timed_start=lambda: None):
    """Warm-up (at least t.warmup calls and t.warmup_time s), then on_timed_start(), then each
    call timed until both t.min_reps calls and t.min_time seconds are reached (or t.max_reps); as
    bench_train_step."""
    start = time.perf_counter()
    i = 0
    while i < t.warmup or time.perf_counter() - start < t.warmup_time:
        call()
        i += 1
    on_timed_start()
    ms = []
    start = time.perf_counter()
    while len(ms) < t.max_reps and (len(ms) < t.min_reps or time.perf_counter() - start < t.min_time):
        t0 = time.perf_counter()
        call()
        ms.append((time.perf_counter() - t0) * 1e3)
    ms.sort()
    return {"reps": len(ms), "median_ms": quantile(ms, 0.5), "p25_ms": quantile(ms, 0.25),
            "p75_ms": quantile(ms, 0.75), "min_ms": ms[0], "max_ms": ms[-1]}


# ---- the PyTorch side, run in a child process (--worker) ---------------------------------------

def torch_worker(args):
    baseline = peak_rss_mib()
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    baseline_torch = peak_rss_mib()
    info = bench_common.torch_info(torch)
    torch.manual_seed(0)
    if args.worker == "gemm":
        # torch.mm in float32, and under bf16 autocast (fp32 operands converted to bf16, oneDNN's
        # bf16 matmul; what xgrad's bf16 gemm does too).
        n = 1024
        a, b = torch.randn(n, n), torch.randn(n, n)
        c = torch.empty(n, n)
        args.min_time = min(args.min_time, 1.5)
        args.min_reps = max(args.min_reps, 10)

        def mm_bf16():
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                return torch.mm(a, b)

        flops = 2.0 * n ** 3
        for kind, call in (("torch_mm", lambda: torch.mm(a, b, out=c)), ("torch_bf16", mm_bf16)):
            s = time_calls(call, args)
            print(json.dumps(dict(kind="gemm", framework="torch", gemm=kind, n=n, threads=args.threads, **info, **s,
                                  gflops=flops / (s["median_ms"] * 1e6), gflops_best=flops / (s["min_ms"] * 1e6),
                                  peak_rss_mib=peak_rss_mib())))
        return 0

    B, N, d, h, ff, L = CONFIGS[args.config]
    if args.config in GPT_VOCAB:
        # xgrad::models::GPT's PyTorch twin (a causal float mask, the tied head) and nanoGPT's AdamW.
        sys.path.insert(0, os.path.join(REPO, "scripts"))
        from make_gpt_fixture import TorchGPT, adamw
        vocab = GPT_VOCAB[args.config]
        assert ff == 4 * d, "TorchGPT's MLP is 4 d wide"
        model = TorchGPT(vocab, N, L, h, d)
        model.train()
        opt = adamw(model, 1e-4, (0.9, 0.99), 0.1)
        tokens = torch.randint(vocab, (B, N + 1))
        x, y = tokens[:, :-1], tokens[:, 1:].reshape(-1)  # (B, N), (B*N)

        def forward_loss():
            return F.cross_entropy(model(x).reshape(-1, vocab), y)
    else:
        layer = torch.nn.TransformerEncoderLayer(d, h, dim_feedforward=ff, dropout=0.0, activation="gelu",
                                                 batch_first=True, norm_first=True)
        model = torch.nn.TransformerEncoder(layer, L, enable_nested_tensor=False)
        del layer  # only copied from, as in bench_train_step
        model.train()
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        x = torch.randn(B, N, d)       # (B, N, d)
        target = torch.randn(B, N, d)  # (B, N, d)

        def forward_loss():
            return F.mse_loss(model(x), target)
    last = {}
    phases = None  # per timed step: zero_grad | forward and loss | backward | Adam step

    def step():
        t0 = time.perf_counter()
        opt.zero_grad()
        t1 = time.perf_counter()
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=args.bf16):
            loss = forward_loss()
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        opt.step()
        t4 = time.perf_counter()
        last["loss"] = loss
        if phases is not None:
            for i, (a, b) in enumerate(((t0, t1), (t1, t2), (t2, t3), (t3, t4))):
                phases[i].append((b - a) * 1e3)

    def start_phases():
        nonlocal phases
        phases = [[], [], [], []]

    s = time_calls(step, args, start_phases)
    phase_median = [quantile(sorted(p), 0.5) for p in phases]
    loss = float(last["loss"].item())
    flops = step_flops(args.config)
    print(json.dumps(dict(kind="train_step", framework="torch", config=args.config,
                          model="gpt" if args.config in GPT_VOCAB else "encoder", B=B, N=N, d=d, h=h, ff=ff, L=L,
                          vocab=GPT_VOCAB.get(args.config, 0),
                          threads=args.threads, **(dict(precision="bf16") if args.bf16 else {}),
                          **info, flops=flops, **s,
                          gflops=flops / (s["median_ms"] * 1e6), peak_rss_mib=peak_rss_mib(),
                          baseline_rss_mib=baseline_torch, interpreter_rss_mib=baseline, final_loss=loss,
                          phases_median_ms=dict(zip(("zero_grad", "forward_loss", "backward", "step"),
                                                    phase_median)))))
    return 0 if loss == loss and abs(loss) != float("inf") else 1


# ---- the driver ---------------------------------------------------------------------------------

def run_json(cmd, threads, timeout):
    """Runs cmd with `threads` BLAS/OpenMP threads; returns its JSON lines, or one record of kind
    "error" when it fails or times out (the sweep goes on; the tables show the cell as failed)."""
    try:
        p = subprocess.run(cmd, env=bench_common.thread_env(threads), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"compare.py: timed out after {timeout} s: {shlex.join(cmd)}", file=sys.stderr)
        return [dict(kind="error", error=f"timed out after {timeout} s", command=shlex.join(cmd))]
    if p.returncode != 0:
        print(f"compare.py: failed ({p.returncode}): {shlex.join(cmd)}\n{p.stderr}", file=sys.stderr)
        last = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
        return [dict(kind="error", error=last[:300], command=shlex.join(cmd))]
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


def timing_flags(t):
    return ["--min-time", str(t.min_time), "--min-reps", str(t.min_reps), "--max-reps", str(t.max_reps),
            "--warmup", str(t.warmup), "--warmup-time", str(t.warmup_time)]


def build_xgrad(build_dir):
    if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
        subprocess.run(["cmake", "-S", REPO, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                        "-DXGRAD_BUILD_BENCHMARKS=ON"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", build_dir, "--target", "bench_train_step", "-j2"], check=True,
                   stdout=subprocess.DEVNULL)
    return os.path.join(build_dir, "benchmarks", "bench_train_step")


# The CPU, its count and the date printed with the tables: this machine's and today's unless
# --from-json reads a run that recorded its own.
machine = {}


def cpu_model():
    if "cpu" in machine:
        return machine["cpu"]
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def ms_decimals(ms):
    return 4 if ms < 0.1 else 3 if ms < 10 else 1


def fmt_ms(r):
    return f"{r['median_ms']:.{ms_decimals(r['median_ms'])}f}"


def fmt_spread(r):
    """The interquartile range, to the median's precision."""
    n = ms_decimals(r["median_ms"])
    return f"{r['p25_ms']:.{n}f}-{r['p75_ms']:.{n}f}"


def fmt_mem(r):
    return f"{r['peak_rss_mib']:.0f} (+{r['peak_rss_mib'] - r['baseline_rss_mib']:.0f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="shorter timing loops (about 1 s per run)")
    ap.add_argument("--configs", default=",".join(c for c in CONFIGS if c not in GPT_VOCAB),
                    help="comma-separated subset of " + ",".join(CONFIGS) + " (default: all but gpt2s, whose step "
                         "takes seconds), or 'all'")
    ap.add_argument("--threads", default="",
                    help="comma-separated thread counts to sweep for each framework, e.g. 1,2,4,8,16 "
                         "(default 1, 2, 4, ... up to the CPU count: " +
                         ",".join(map(str, bench_common.default_threads())) + " here)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="repeat the whole sweep; each cell is then the run with the median time (default 1)")
    ap.add_argument("--xgrad-bin", help="a built bench_train_step (default: build it in --build-dir)")
    ap.add_argument("--build-dir", default=os.path.join(REPO, "build", "release"))
    ap.add_argument("--no-build", action="store_true", help="use --build-dir's binary as it is")
    ap.add_argument("--markdown", default=os.path.join(REPO, "benchmarks", "results.md"),
                    help="where to write the markdown table ('' for nowhere)")
    ap.add_argument("--json", help="also write every measurement here, one JSON object per line")
    ap.add_argument("--from-json", help="only print and write the tables of an earlier run's --json file")
    ap.add_argument("--min-time", type=float, help="seconds of timed steps per run (default 3, quick 1)")
    ap.add_argument("--min-reps", type=int, help="timed steps per run at least (default 5, quick 3)")
    ap.add_argument("--max-reps", type=int, default=100000)
    ap.add_argument("--warmup", type=int, help="warm-up steps at least (default 3, quick 1)")
    ap.add_argument("--warmup-time", type=float, help="warm-up seconds at least (default 0.5, quick 0.2)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds allowed per child process")
    ap.add_argument("--bf16", action="store_true",
                    help="also every configuration under bf16 autocast (xgrad::AutocastGuard, torch.autocast)")
    # The PyTorch child: --worker train --config NAME --threads N, or --worker gemm --threads N.
    ap.add_argument("--worker", choices=["train", "gemm"], help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    args = ap.parse_args()
    for name, quick, full in (("min_time", 1.0, 3.0), ("min_reps", 3, 5), ("warmup", 1, 3),
                              ("warmup_time", 0.2, 0.5)):
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)

    if args.worker:
        args.threads = int(args.threads)
        return torch_worker(args)

    configs = list(CONFIGS) if args.configs == "all" else [c for c in args.configs.split(",") if c]
    for c in configs:
        if c not in CONFIGS:
            ap.error(f"unknown configuration {c}; choose from {', '.join(CONFIGS)}")
    try:
        thread_counts = bench_common.parse_threads(args.threads)
    except ValueError as e:
        ap.error(str(e))
    command = shlex.join([sys.executable, os.path.relpath(os.path.abspath(__file__), os.getcwd())] + sys.argv[1:])

    records = []
    if args.from_json:
        # Re-render the tables of an earlier run (its --json file) without measuring again, with
        # its machine and date (runs recorded before those were: this machine's and today's).
        with open(args.from_json) as f:
            records = [json.loads(line) for line in f if line.strip()]
        meta = next(r for r in records if r["kind"] == "meta")
        command, args.rounds, thread_counts = meta["command"], meta["rounds"], meta["threads"]
        machine.update({k: meta[k] for k in ("cpu", "cpus", "date") if k in meta})
        configs = [c for c in meta["configs"]]
        return report(args, records, configs, thread_counts, command)

    xgrad_bin = args.xgrad_bin
    if not xgrad_bin:
        xgrad_bin = (os.path.join(args.build_dir, "benchmarks", "bench_train_step") if args.no_build
                     else build_xgrad(args.build_dir))
    if not os.access(xgrad_bin, os.X_OK):
        sys.exit(f"compare.py: no bench_train_step at {xgrad_bin}")

    flags = timing_flags(args)
    torch_cmd = [sys.executable, os.path.abspath(__file__)] + flags
    records.append(dict(kind="meta", framework="", command=command, rounds=args.rounds, threads=thread_counts,
                        configs=configs, cpu=cpu_model(), cpus=os.cpu_count(), date=datetime.date.today().isoformat()))
    started = time.time()

    def log(msg):
        print(f"[{time.time() - started:6.1f} s] {msg}", file=sys.stderr, flush=True)

    def run_xgrad(extra, t, rnd, every=False):
        rs = run_json([xgrad_bin] + extra + ["--json", "--threads", str(t)] + flags, t, args.timeout)
        for r in rs:
            r.update(threads=t, round=rnd, framework=r.get("framework", "xgrad"))
        records.extend(rs)
        return rs if every else rs[-1]

    def run_torch(extra, t, rnd, every=False):
        rs = run_json(torch_cmd + extra + ["--threads", str(t)], t, args.timeout)
        for r in rs:
            r.update(threads=t, round=rnd, framework=r.get("framework", "torch"))
        records.extend(rs)
        return rs if every else rs[-1]

    def outcome(r):
        return f"{r['median_ms']:.3f} ms" if "median_ms" in r else f"FAILED: {r.get('error', '?')}"

    # Rounds of: the gemm rates (OpenBLAS and oneDNN sgemm and oneDNN bf16 through xgrad, torch.mm
    # in float32 and under bf16 autocast), then
    # every configuration, per thread count, the two frameworks alternating (and swapping which
    # goes first each round) so that drifting load hits both alike.
    for rnd in range(args.rounds):
        for t in thread_counts:
            gs = run_xgrad(["--gemm"], t, rnd, every=True) + run_torch(["--worker", "gemm"], t, rnd, every=True)
            log(f"round {rnd + 1}: gemm 1024^3 with {t} thread(s), GFLOP/s: "
                + ", ".join(f"{gemm_kind(g)} {g['gflops']:.1f}" for g in gs if g["kind"] == "gemm")
                + "".join(f"; FAILED: {g['error']}" for g in gs if g["kind"] == "error"))
        for c in configs:
            for bf16 in ([False, True] if args.bf16 else [False]):
                extra = ["--bf16"] if bf16 else []
                for t in thread_counts:
                    runs = [("xgrad", lambda: run_xgrad(["--config", c] + extra, t, rnd)),
                            ("torch", lambda: run_torch(["--worker", "train", "--config", c] + extra, t, rnd))]
                    for name, run in (runs if rnd % 2 == 0 else runs[::-1]):
                        log(f"round {rnd + 1}: {c:6s} {'bf16 ' if bf16 else ''}{name} {t} thread(s): "
                            f"{outcome(run())}")

    if args.json:
        with open(args.json, "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
    log("done")
    return report(args, records, configs, thread_counts, command)


def report(args, records, configs, thread_counts, command):
    """Prints the side-by-side table of `records` and writes it as markdown."""

    def typical(kind, framework, config, threads, precision="fp32"):
        """The run with the median step time over the rounds (the lower middle one for even counts)."""
        rs = sorted((r for r in records if r["kind"] == kind and r["framework"] == framework
                     and r.get("config") == config and r["threads"] == threads
                     and r.get("precision", "fp32") == precision), key=lambda r: r["median_ms"])
        return rs[(len(rs) - 1) // 2] if rs else None

    def best(kind, framework, config=None, precision="fp32"):
        """The fastest thread count's typical run."""
        rs = [typical(kind, framework, config, t, precision) for t in thread_counts]
        rs = [r for r in rs if r]
        return min(rs, key=lambda r: r["median_ms"]) if rs else None

    def gemm_runs(kind, threads, rnd=None):
        return [r for r in records if r["kind"] == "gemm" and gemm_kind(r) == kind and r["threads"] == threads
                and (rnd is None or r["round"] == rnd)]

    def gemm_typical(kind, threads):
        rs = sorted(gemm_runs(kind, threads), key=lambda r: r["median_ms"])
        return rs[(len(rs) - 1) // 2] if rs else None

    def round_gemm_rate(rnd):
        """The fastest float32 gemm of round rnd (OpenBLAS, oneDNN or torch.mm, any thread count):
        the limit a run of that round is read against (the load of a shared machine changes
        between rounds)."""
        return max((r["gflops"] for r in records
                    if r["kind"] == "gemm" and gemm_kind(r) in FP32_GEMMS and r["round"] == rnd), default=float("nan"))

    def limit_at(t):
        """The limit at t threads: the fastest float32 gemm's median run at that count."""
        gs = [gemm_typical(k, t) for k in FP32_GEMMS]
        gs = [g for g in gs if g]
        return max(gs, key=lambda r: r["gflops"]) if gs else None

    limit = max((limit_at(t) for t in thread_counts if limit_at(t)), key=lambda r: r["gflops"],
                default=dict(gflops=float("nan"), gemm="none measured", threads=0, framework=""))
    isa = next((r["isa"] for r in records if "isa" in r), "unknown")
    bf16_native = next((r["bf16_native"] for r in records if "bf16_native" in r), None)
    torch_text = bench_common.describe_torch(
        bench_common.torch_info_of([r for r in records if r["framework"] == "torch"]))
    blas = next((r["blas"] for r in records if "blas" in r), "unknown BLAS")
    errors = [r for r in records if r["kind"] == "error"]

    rows, failed = [], []
    for c in configs:
        x, p = best("train_step", "xgrad", c), best("train_step", "torch", c)
        if not x or not p:
            failed.append(c)
            continue
        speedup = p["median_ms"] / x["median_ms"]
        frac = x["gflops"] / round_gemm_rate(x["round"])
        checks = [(f">= {SPEEDUP_TARGETS[c]:g}x", speedup >= SPEEDUP_TARGETS[c])]
        if c in LIMIT_TARGETS:
            checks.append((f">= {100 * LIMIT_TARGETS[c]:.0f}% limit", frac >= LIMIT_TARGETS[c]))
        if c == "medium":
            checks.append(("peak <= PyTorch", x["peak_rss_mib"] <= p["peak_rss_mib"]))
        ok = all(met for _, met in checks)
        target = ", ".join(f"{name} {'met' if met else 'MISSED'}" for name, met in checks)
        rows.append(dict(config=c, shape=shape_text(c), x=x, p=p, speedup=speedup,
                         frac=frac, target=target, ok=ok))

    # bf16 autocast: xgrad large >= 1.6x faster than xgrad float32 large, and faster
    # than PyTorch's bf16 autocast on every configuration (medium, large, gpt2s: >= 1.3x).
    bf16_rows = []
    for r in rows:
        xb, pb = best("train_step", "xgrad", r["config"], "bf16"), best("train_step", "torch", r["config"], "bf16")
        if not xb or not pb:
            continue
        vs_fp32 = r["x"]["median_ms"] / xb["median_ms"]
        want = BF16_SPEEDUP_TARGETS.get(r["config"])
        checks = ([(f">= {want:g}x PyTorch bf16", pb["median_ms"] / xb["median_ms"] >= want)] if want
                  else [("faster than PyTorch bf16", xb["median_ms"] < pb["median_ms"])])
        if r["config"] == "large":
            checks.append((">= 1.6x xgrad fp32", vs_fp32 >= 1.6))
        bf16_rows.append(dict(config=r["config"], x=xb, p=pb, speedup=pb["median_ms"] / xb["median_ms"], vs_fp32=vs_fp32,
                              path=xb.get("bf16_path", "?"),
                              target=", ".join(f"{n} {'met' if m else 'MISSED'}" for n, m in checks)))

    # ---- the console table ----
    print(f"\nxgrad vs {torch_text}:\nfloat32 training step of a pre-norm GELU TransformerEncoder "
          f"(dropout 0, batch_first), Adam; gpt2s: a GPT language model step (causal, tied head, cross-entropy), AdamW")
    print(f"{cpu_model()}, {machine.get('cpus', os.cpu_count())} CPUs; xgrad's {blas}")
    print(f"oneDNN ISA: {isa}" + ("" if bf16_native is None else f" (bf16 {'native' if bf16_native else 'emulated'})")
          + "; xgrad's float32 gemm backend in the training runs: "
          + ", ".join(sorted({r.get("gemm_backend", "openblas") for r in records
                              if r["kind"] == "train_step" and r["framework"] == "xgrad"})))
    print("\ngemm 1024^3, GFLOP/s (median run) by thread count; % of limit = against the fastest float32 gemm "
          f"of this run, {limit['gflops']:.1f} GFLOP/s ({limit_label(limit)}, {limit['threads']} thread(s))")
    for kind, label, _ in GEMM_KINDS:
        cells = []
        for t in thread_counts:
            g = gemm_typical(kind, t)
            cells.append(f"{t}t {g['gflops']:7.1f} ({100 * g['gflops'] / limit['gflops']:5.1f}%)" if g else f"{t}t  -")
        print(f"  {label:26s} " + "   ".join(cells))
    if args.rounds > 1:
        print("fastest float32 gemm by round (each round's runs are read against its own): "
              + ", ".join(f"{round_gemm_rate(i):.1f}" for i in range(args.rounds)) + " GFLOP/s")
    print(f"GFLOP/s = model matmul FLOPs / median step; FLOPs = {FLOP_FORMULA}, backward = 2x forward")
    print("ms: median step [p25-p75] (threads); speedup = PyTorch ms / xgrad ms; MiB: process peak RSS "
          "(ru_maxrss) and, in parentheses, its growth once the model was built\n")
    header = (f"{'config':7s} {'xgrad ms':>22s} {'PyTorch ms':>22s} {'speedup':>8s} {'GFLOP/s':>8s} {'%limit':>7s} "
              f"{'xgrad MiB':>12s} {'torch MiB':>12s}  target")
    print(header)
    print("-" * len(header))
    for c in failed:
        reasons = sorted({e["error"] for e in errors if error_config(e) == c}) or ["no run"]
        print(f"{c:7s} FAILED: " + "; ".join(reasons))
    for r in rows:
        x, p = r["x"], r["p"]
        xs = f"{fmt_ms(x)} [{fmt_spread(x)}] ({x['threads']})"
        ps = f"{fmt_ms(p)} [{fmt_spread(p)}] ({p['threads']})"
        print(f"{r['config']:7s} {xs:>22s} {ps:>22s} {r['speedup']:7.2f}x {x['gflops']:8.2f} {100 * r['frac']:6.1f}% "
              f"{fmt_mem(x):>12s} {fmt_mem(p):>12s}  {r['target']}")
    if bf16_rows:
        print(f"\nbf16 autocast (xgrad: {bf16_rows[0]['path']}; PyTorch: torch.autocast(\"cpu\", torch.bfloat16))")
        print(f"{'config':7s} {'xgrad bf16 ms':>16s} {'PyTorch bf16 ms':>16s} {'speedup':>8s} {'vs xgrad fp32':>14s}  target")
        for b in bf16_rows:
            print(f"{b['config']:7s} {fmt_ms(b['x']) + ' (' + str(b['x']['threads']) + ')':>16s} "
                  f"{fmt_ms(b['p']) + ' (' + str(b['p']['threads']) + ')':>16s} {b['speedup']:7.2f}x "
                  f"{b['vs_fp32']:13.2f}x  {b['target']}")
    print("\nphases at the chosen thread counts (median ms): zero_grad / forward+loss / backward / Adam step")
    for r in rows:
        cells = []
        for fw, rec in (("xgrad", r["x"]), ("PyTorch", r["p"])):
            ph = rec["phases_median_ms"]
            cells.append(f"{fw} " + " / ".join(fmt_ms(dict(median_ms=ph[k]))
                                               for k in ("zero_grad", "forward_loss", "backward", "step")))
        print(f"  {r['config']:7s} " + "   ".join(cells))
    limits = {t: limit_at(t) for t in thread_counts if limit_at(t)}
    sweep = sweep_rows(configs, thread_counts, typical)
    if sweep:
        print(f"\nthread sweep: median step at each thread count; from {min(thread_counts)} thread(s), speedup and "
              "parallel efficiency (speedup / thread ratio);\n[% of the limit at that thread count: the fastest "
              "float32 gemm of the run with as many threads; bf16 rows too];\nlast column: the speedup at the largest count over "
              "the limit's own")
        for line in bench_common.efficiency_table(sweep, thread_counts, limits):
            print("  " + line)
    print("\nevery run (median ms by thread count):")
    for c in configs:
        parts = []
        for fw in ("xgrad", "torch"):
            for r in records:
                if (r["kind"] == "train_step" and r["framework"] == fw and r["config"] == c
                        and r.get("precision", "fp32") == "fp32"):
                    tag = f" r{r['round'] + 1}" if args.rounds > 1 else ""
                    parts.append(f"{fw}/{r['threads']}t{tag} {r['median_ms']:.3f}")
        print(f"  {c:7s} " + "   ".join(parts))

    if args.markdown:
        write_markdown(args.markdown, rows, typical, thread_counts, args.rounds,
                       [round_gemm_rate(i) for i in range(args.rounds)], command, torch_text, blas, limit,
                       gemm_typical, isa, configs, bf16_rows, bench_common.efficiency_table(sweep, thread_counts,
                                                                                            limits, markdown=True))
        print(f"\nmarkdown written to {os.path.relpath(args.markdown)}")
    return 0


def gemm_label(kind):
    return next(label for k, label, _ in GEMM_KINDS if k == kind)


def limit_label(r):
    return gemm_label(gemm_kind(r)) if r.get("framework") else r["gemm"]


def error_config(e):
    """The configuration of a failed run's command (None for a gemm run)."""
    words = shlex.split(e.get("command", ""))
    return words[words.index("--config") + 1] if "--config" in words[:-1] else None


def sweep_rows(configs, thread_counts, typical):
    """The rows of bench_common.efficiency_table: every (configuration, precision, framework) with
    its median ms and GFLOP/s at each thread count."""
    rows = []
    for c in configs:
        for precision in ("fp32", "bf16"):
            for fw, name in (("xgrad", "xgrad"), ("torch", "PyTorch")):
                recs = {t: typical("train_step", fw, c, t, precision) for t in thread_counts}
                recs = {t: r for t, r in recs.items() if r}
                if recs:
                    rows.append((f"{c} {precision} {name}", {t: r["median_ms"] for t, r in recs.items()},
                                 {t: r["gflops"] for t, r in recs.items()}))
    return rows


def write_markdown(path, rows, typical, thread_counts, rounds, round_rates, command, torch_text, blas, limit,
                   gemm_typical, isa, configs, bf16_rows, sweep_table):
    lines = [
        "# Training step: xgrad vs PyTorch",
        "",
        f"Measured {machine.get('date', datetime.date.today().isoformat())} on {cpu_model()} "
        f"({machine.get('cpus', os.cpu_count())} CPUs), "
        f"{torch_text}; xgrad's {blas}. Reproduce with:",
        "",
        "```bash",
        command,
        "```",
        "",
        "One float32 training step (`zero_grad`, forward, `mse_loss` against a fixed random target, backward, "
        "Adam step) of a pre-norm GELU `TransformerEncoder`, dropout 0, batch_first"
        + ("; gpt2s is a GPT-2-small-shaped language model step instead (`xgrad::models::GPT` and `TorchGPT` of "
           "scripts/make_gpt_fixture.py: causal, the tied head over a vocabulary of 256, `cross_entropy` over the "
           "next tokens, AdamW lr 1e-4, betas (0.9, 0.99), weight decay 0.1 on the matrices)"
           if any(c in GPT_VOCAB for c in configs) else "")
        + ". Each cell is the median "
        "over the timed steps after warm-up, with the interquartile range; each framework at its fastest thread "
        "count for that configuration (in brackets)"
        + (f"; of {rounds} rounds of the whole sweep, the run with the median time" if rounds > 1 else "")
        + ". Speedup = PyTorch ms / xgrad ms. GFLOP/s counts model "
        f"matmul FLOPs, `{FLOP_FORMULA}` (backward = 2x forward); % of limit reads it against the fastest "
        f"float32 gemm of the run (table below): **{limit['gflops']:.1f} GFLOP/s**, {limit_label(limit)} "
        f"with {limit['threads']} thread(s)"
        + (f"; by round {', '.join(f'{g:.1f}' for g in round_rates)}, and each run is read against its own "
           "round's rate" if rounds > 1 else "")
        + ". Peak MiB is each run's own process peak RSS "
        "(`ru_maxrss`; each configuration runs in a separate process; the PyTorch process includes the "
        "interpreter and libtorch); (+model) is the growth over the process's peak before the model was built.",
        "",
        "| config | B N d h ff L | xgrad ms | PyTorch ms | speedup | xgrad GFLOP/s | % of limit "
        "| xgrad peak MiB (+model) | PyTorch peak MiB (+model) | target |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        x, p = r["x"], r["p"]
        lines.append(
            f"| {r['config']} | {' '.join(str(v) for v in CONFIGS[r['config']])}"
            f"{' V' + str(GPT_VOCAB[r['config']]) if r['config'] in GPT_VOCAB else ''} "
            f"| {fmt_ms(x)} ({fmt_spread(x)}) [{x['threads']}t] | {fmt_ms(p)} ({fmt_spread(p)}) [{p['threads']}t] "
            f"| {r['speedup']:.2f}x | {x['gflops']:.2f} | {100 * r['frac']:.1f}% "
            f"| {fmt_mem(x)} | {fmt_mem(p)} | {r['target']} |")
    lines += ["", f"gemm 1024x1024x1024, GFLOP/s (median run), and % of the fastest float32 gemm; oneDNN ISA "
              f"`{isa}`. bf16 rows round the fp32 operands to bf16 and accumulate in fp32.", "",
              "| gemm | " + " | ".join(f"{t} thread(s)" for t in thread_counts) + " |",
              "|---|" + "---:|" * len(thread_counts)]
    for kind, label, _ in GEMM_KINDS:
        cells = []
        for t in thread_counts:
            g = gemm_typical(kind, t)
            cells.append(f"{g['gflops']:.1f} ({100 * g['gflops'] / limit['gflops']:.0f}%)" if g else "")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if bf16_rows:
        lines += ["", f"bf16 autocast, each framework at its fastest thread count: xgrad `AutocastGuard` "
                  f"({bf16_rows[0]['path']}), PyTorch `torch.autocast(\"cpu\", dtype=torch.bfloat16)` (oneDNN bf16).",
                  "", "| config | xgrad bf16 ms | PyTorch bf16 ms | speedup | xgrad bf16 vs xgrad fp32 | target |",
                  "|---|---:|---:|---:|---:|---|"]
        for b in bf16_rows:
            lines.append(f"| {b['config']} | {fmt_ms(b['x'])} [{b['x']['threads']}t] | {fmt_ms(b['p'])} "
                         f"[{b['p']['threads']}t] | {b['speedup']:.2f}x | {b['vs_fp32']:.2f}x | {b['target']} |")
    lines += ["", "Phases at those thread counts (median ms): zero_grad / forward+loss / backward / Adam step.", "",
              "| config | xgrad | PyTorch |", "|---|---:|---:|"]
    for r in rows:
        cells = [" / ".join(fmt_ms(dict(median_ms=rec["phases_median_ms"][k]))
                            for k in ("zero_grad", "forward_loss", "backward", "step")) for rec in (r["x"], r["p"])]
        lines.append(f"| {r['config']} | {cells[0]} | {cells[1]} |")
    lines += ["", f"Thread sweep: the median step at every thread count; from {min(thread_counts)} thread(s), the "
              "speedup and the parallel efficiency (speedup / thread ratio); in brackets the step's GFLOP/s as a % "
              "of the limit at that thread count (the fastest float32 gemm of the run with as many threads, first "
              "row; bf16 rows are read against it too); last column: the speedup at the largest count over the "
              "limit's own speedup there.", ""]
    lines += sweep_table
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
