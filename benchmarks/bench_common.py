"""What compare.py, gpt_long.py and gpt_compare.py share: the thread counts of a sweep and each
child's thread environment, a description of the PyTorch that actually ran (nothing here assumes
a version or a build), the float32 gemm limit at each thread count, and the parallel efficiency
of a sweep.

Parallel efficiency: with t0 the smallest thread count of the sweep and m(t) the median time at
t threads, speedup(t) = m(t0) / m(t) and efficiency(t) = speedup(t) / (t / t0): 100% is perfect
scaling. For a rate (the gemm's GFLOP/s) the speedup is rate(t) / rate(t0).
"""
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


# The Llama shapes of bench_llama's shape_config (config.json's of the published models; llama-3.2-1b's
# llama3 rope scaling left out: it changes the tables, not the time), for llama_torch.py and
# llama_compare.py.
LLAMA_SHAPES = {
    "smollm2-135m": dict(layers=30, hidden=576, heads=9, kv_heads=3, head_dim=64, inter=1536, vocab=49152,
                         theta=100000.0),
    "llama-3.2-1b": dict(layers=16, hidden=2048, heads=32, kv_heads=8, head_dim=64, inter=8192, vocab=128256,
                         theta=500000.0),
    "tiny": dict(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, inter=160, vocab=320, theta=10000.0),
}


def default_threads():
    """1, 2, 4, ... up to the machine's CPU count, and the count itself (1,2 on 2 cores;
    1,2,4,8,16 on 16)."""
    n = os.cpu_count() or 1
    counts, t = [], 1
    while t < n:
        counts.append(t)
        t *= 2
    return counts + [n]


def parse_threads(text):
    """'1,2,4' -> [1, 2, 4] (sorted, without repeats); '' or None -> default_threads()."""
    if not text:
        return default_threads()
    counts = sorted({int(t) for t in str(text).split(",") if t.strip()})
    if not counts or counts[0] < 1:
        raise ValueError(f"thread counts must be positive integers, got {text!r}")
    return counts


def thread_env(threads, base=None):
    """The environment of a child that should use `threads` threads: OpenMP (libtorch's intra-op
    pool), OpenBLAS and MKL alike. A PyTorch built on OpenBLAS (Debian's) does its matmuls there,
    which torch.set_num_threads does not reach; xgrad reads OMP_NUM_THREADS as its default."""
    env = dict(os.environ if base is None else base)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    return env


def torch_info(torch):
    """The imported torch module's version and build, as JSON-able fields of a record."""
    info = {"torch_version": torch.__version__, "torch_path": os.path.dirname(torch.__file__)}
    try:
        show = torch.__config__.show()
    except Exception:  # an unusual build: the version is what matters
        show = ""
    m = re.search(r"BLAS_INFO=([^,\s]+)", show)
    if m:
        info["torch_blas"] = m.group(1)
    m = re.search(r"Math Kernel Library Version ([\d.]+)", show)
    if m:
        info["torch_mkl"] = m.group(1)
    m = re.search(r"(?:MKL-DNN|oneDNN) v([\d.]+)", show)
    if m:
        info["torch_onednn"] = m.group(1)
    m = re.search(r"CPU capability usage: (\S+)", show)
    if m:
        info["torch_cpu_capability"] = m.group(1)
    return info


def torch_info_child(python=None, timeout=120):
    """torch_info() of the torch that `python` (default: this interpreter) imports, asked in a
    child process so that the caller never loads libtorch itself; {"torch_version": None,
    "torch_error": ...} when it cannot be imported."""
    code = ("import json, sys; sys.path.insert(0, %r); import bench_common, torch; "
            "print(json.dumps(bench_common.torch_info(torch)))" % HERE)
    try:
        p = subprocess.run([python or sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
        if p.returncode == 0:
            return json.loads(p.stdout.strip().splitlines()[-1])
        err = (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as e:
        err = str(e)
    return {"torch_version": None, "torch_error": err}


def describe_torch(info):
    """'PyTorch 2.11.0 (/path/torch; BLAS mkl, MKL 2024.2, oneDNN 3.7.1, AVX512)' from torch_info()."""
    if not info or not info.get("torch_version"):
        return "PyTorch (not importable: %s)" % (info or {}).get("torch_error", "unknown")
    parts = [info.get("torch_path", "")]
    if "torch_blas" in info:
        parts.append("BLAS " + info["torch_blas"])
    if "torch_mkl" in info:
        parts.append("MKL " + info["torch_mkl"])
    if "torch_onednn" in info:
        parts.append("oneDNN " + info["torch_onednn"])
    if "torch_cpu_capability" in info:
        parts.append(info["torch_cpu_capability"])
    parts = [p for p in parts if p]
    return "PyTorch %s" % info["torch_version"] + (" (%s)" % "; ".join(parts) if parts else "")


def torch_info_of(records):
    """The torch_info fields of the first record that has them (a child's), or None."""
    for r in records:
        if r.get("torch_version"):
            return {k: v for k, v in r.items() if k.startswith("torch_")}
    return None


def sweep(values, rate=False):
    """values: {threads: median time (or a rate when `rate`)}; returns {threads: (speedup,
    efficiency)} from the smallest thread count present."""
    counts = sorted(t for t, v in values.items() if v)
    if not counts:
        return {}
    t0, v0 = counts[0], values[counts[0]]
    out = {}
    for t in counts:
        speedup = values[t] / v0 if rate else v0 / values[t]
        out[t] = (speedup, speedup / (t / t0))
    return out


def measure_limits(thread_counts, bench_train_step=None, timeout=600, log=None):
    """The float32 gemm limit at each thread count: the fastest of xgrad's 1024^3 sgemm
    (bench_train_step --gemm: OpenBLAS and oneDNN, when that program exists) and torch.mm
    (compare.py's gemm worker), each in its own process with thread_env(t). Returns
    {threads: {"gflops": ..., "gemm": label}} and the torch.mm records' torch_info."""
    limits, info = {}, None
    timing = ["--min-time", "1", "--min-reps", "10", "--warmup", "1", "--warmup-time", "0.2"]
    for t in thread_counts:
        cmds = [[sys.executable, os.path.join(HERE, "compare.py"), "--worker", "gemm", "--threads", str(t)] + timing]
        if bench_train_step and os.access(bench_train_step, os.X_OK):
            cmds.append([bench_train_step, "--gemm", "--json", "--threads", str(t)] + timing)
        for cmd in cmds:
            try:
                p = subprocess.run(cmd, env=thread_env(t), capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                continue
            for line in p.stdout.splitlines():
                if not line.startswith("{"):
                    continue
                r = json.loads(line)
                if r.get("kind") != "gemm" or r.get("dtype") == "bf16" or r.get("gemm") in ("bf16", "torch_bf16"):
                    continue
                info = info or torch_info_of([r])
                label = "%s %s" % (r["framework"], r.get("gemm", ""))
                if t not in limits or r["gflops"] > limits[t]["gflops"]:
                    limits[t] = {"gflops": r["gflops"], "gemm": label.strip()}
        if log and t in limits:
            log("limit at %d thread(s): %.1f GFLOP/s (%s)" % (t, limits[t]["gflops"], limits[t]["gemm"]))
    return limits, info


def efficiency_table(rows, thread_counts, limits=None, markdown=False):
    """Lines of a thread-sweep table. rows: [(label, {threads: median ms}, {threads: GFLOP/s} or None)];
    limits: {threads: {"gflops": ...}}. Each cell: the time, speedup and efficiency from the
    smallest count, and with GFLOP/s and limits [the % of that count's limit]; with limits, a first
    row for the limit itself (its speedup and efficiency as a rate) and a last column: the row's
    speedup at the largest count over the limit's speedup there."""
    lim = {t: limits[t]["gflops"] for t in thread_counts if limits and t in limits}
    lim_sweep = sweep(lim, rate=True)
    top = max(thread_counts)
    out = []
    head = ["work"] + ["%dt" % t for t in thread_counts] + (["vs limit's speedup at %dt" % top] if lim else [])
    if markdown:
        out += ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    else:
        out.append("  ".join("%-30s" % h if i == 0 else "%24s" % h for i, h in enumerate(head)))

    def emit(cells):
        if markdown:
            out.append("| " + " | ".join(cells) + " |")
        else:
            out.append("  ".join("%-30s" % c if i == 0 else "%24s" % c for i, c in enumerate(cells)))

    if lim:
        cells = ["limit: fastest fp32 gemm, GFLOP/s"]
        for t in thread_counts:
            if t in lim:
                sp, eff = lim_sweep[t]
                cells.append("%.1f" % lim[t] + ("" if t == min(lim) else " %.2fx %.0f%%" % (sp, 100 * eff)))
            else:
                cells.append("-")
        emit(cells + [""])
    for label, times, flops in rows:
        s = sweep(times)
        cells = [label]
        for t in thread_counts:
            v = times.get(t)
            if not v:
                cells.append("-")
                continue
            cell = fmt_time(v)
            if t != min(s):
                cell += " %.2fx %.0f%%" % (s[t][0], 100 * s[t][1])
            f = (flops or {}).get(t)
            if f and t in lim:
                cell += " [%.0f%%]" % (100 * f / lim[t])
            cells.append(cell)
        rel = ""
        if top in s and top in lim_sweep and lim_sweep[top][0] > 0 and top != min(s):
            rel = "%.0f%%" % (100 * s[top][0] / lim_sweep[top][0])
        emit(cells + ([rel] if lim else []))
    return out


def fmt_time(ms):
    """A median in ms, to a precision that suits its size (a GPT step is seconds)."""
    if ms >= 1000:
        return "%.2f s" % (ms / 1000)
    return "%.*f ms" % (4 if ms < 0.1 else 3 if ms < 10 else 1, ms)
