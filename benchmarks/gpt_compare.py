#!/usr/bin/python3
"""xgrad's train_gpt beside PyTorch on the same language model, data and starting weights.

Run with a Python that imports torch (Debian's python3-torch as /usr/bin/python3, or a newer
PyTorch; the version that ran is printed) from the root of the repository, after building
train_gpt and bench_gpt_generate in build/release:

    /usr/bin/python3 benchmarks/gpt_compare.py                    # nanoGPT's CPU configuration
    /usr/bin/python3 benchmarks/gpt_compare.py --iters 500 --gen-tokens 100   # shorter (label it)
    /usr/bin/python3 benchmarks/gpt_compare.py --iters 500 --skip-generation --threads 1,2,4,8,16

--threads takes a list: each part then runs at every thread count (each framework in its own
process, with OMP/OpenBLAS/MKL_NUM_THREADS set to the count), followed by thread sweep tables: the
training wall time and each generation mode's time per token, their speedup and parallel
efficiency from the smallest count, and (training) the model GFLOP/s as a % of the float32 gemm
limit at that count (the fastest of xgrad's sgemm, from bench_train_step in --build, and
torch.mm, 1024^3, with as many threads; --no-limit skips it).

1. Training: nanoGPT's CPU configuration (4 layers, 4 heads, n_embd 128, context 64, batch 12,
   2000 iterations, AdamW lr 1e-3, betas (0.9, 0.99), weight decay 0.1 on the matrices, warmup
   100, cosine to 1e-4, clipping 1.0, dropout 0) on the King James Bible split as train_gpt
   splits it (the same verses held out, the same vocabulary, the same held-out windows). Both
   start from the same weights: TorchGPT's nanoGPT init, written as safetensors and given to
   train_gpt with --init-weights. The batches are random windows in both, drawn from different
   generators (so the held-out losses agree statistically, not bit for bit). The same thread
   count (--threads) for both. Reported: held-out loss (nats per character) and wall time of the
   training loop with its evaluations. xgrad's final weights (train_gpt --save-weights) are loaded
   into the PyTorch module, which must give the same held-out loss.
2. Generation: tokens per second for --gen-tokens new tokens after a prompt of 64, 256 and 1024
   tokens with a 6-layer, 6-head, n_embd 384 model (block size prompt + new tokens, random
   weights): xgrad with the KV cache, xgrad recomputing the context for every token, and PyTorch
   recomputing as nanoGPT's generate does; each in its own process, with its peak resident memory.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

import bench_common

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from make_gpt_fixture import TorchGPT, adamw, write_safetensors  # noqa: E402

BIBLE = 'COLUMNS=1000 bible "gen1:1-rev22:21"'
MASK = (1 << 64) - 1


def bible_verses():
    """The verses, their references stripped (train_gpt's read_bible)."""
    out = subprocess.run(BIBLE, shell=True, capture_output=True, text=True, check=True).stdout
    verses = []
    for line in out.split("\n"):
        stripped = line.lstrip(" ")
        if stripped == line or not stripped or not stripped[0].isdigit():
            continue
        i = 0
        while i < len(stripped) and stripped[i].isdigit():
            i += 1
        if i < len(stripped) and stripped[i] == " ":
            verses.append(stripped[i + 1:])
    return verses


def is_held_out(index, seed):
    """train_gpt's is_held_out: FNV-1a over the index's 8 bytes, then a splitmix step."""
    h = 1469598103934665603 ^ ((seed * 0x9E3779B97F4A7C15) & MASK)
    for k in range(8):
        h = ((h ^ ((index >> (8 * k)) & 0xFF)) * 1099511628211) & MASK
    return ((((h ^ (h >> 31)) * 0xBF58476D1CE4E5B9) & MASK) >> 29) % 10 == 0


def split(seed):
    train, held = [], []
    for i, verse in enumerate(bible_verses()):
        (held if is_held_out(i, seed) else train).append(verse + "\n")
    train_text, held_text = "".join(train), "".join(held)
    vocab = sorted(set(train_text))
    index = {ch: i for i, ch in enumerate(vocab)}
    train_ids = torch.tensor([index[ch] for ch in train_text], dtype=torch.int64)
    held_ids = torch.tensor([index[ch] for ch in held_text if ch in index], dtype=torch.int64)
    return vocab, train_ids, held_ids, len(train), len(held)


def lr_factor(step, a):
    """train_gpt's schedule (xgrad::optim::warmup_cosine): linear warmup, then cosine to min_lr at the last step."""
    warmup = min(a.warmup, a.iters - 1)
    if step < warmup:
        return (step + 1) / (warmup + 1)
    progress = min(1.0, (step - warmup) / max(1, a.iters - warmup))
    floor = a.min_lr / a.lr
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


@torch.no_grad()
def held_out_loss(model, held, a):
    """train_gpt's held_out_loss: eval_iters batches of windows evenly spread over the held-out text."""
    model.eval()
    T, B = a.block_size, a.batch_size
    windows, span = a.eval_iters * B, len(held) - T - 1
    total = 0.0
    for i in range(a.eval_iters):
        starts = [(i * B + j) * span // max(1, windows - 1) for j in range(B)]
        x = torch.stack([held[s:s + T] for s in starts])
        y = torch.stack([held[s + 1:s + T + 1] for s in starts])
        total += F.cross_entropy(model(x).reshape(-1, model.wte.num_embeddings), y.reshape(-1)).item() * B
    model.train()
    return total / windows


def train_torch(a, init, train_ids, held_ids, vocab_size):
    model = TorchGPT(vocab_size, a.block_size, a.n_layer, a.n_head, a.n_embd)
    model.load_state_dict(init)
    model.train()
    opt = adamw(model, a.lr, (0.9, 0.99), 0.1)
    gen = torch.Generator().manual_seed(a.seed)
    T, B = a.block_size, a.batch_size
    start = time.perf_counter()
    for step in range(a.iters):
        for group in opt.param_groups:
            group["lr"] = a.lr * lr_factor(step, a)
        ix = torch.randint(len(train_ids) - T, (B,), generator=gen)
        x = torch.stack([train_ids[i:i + T] for i in ix])
        y = torch.stack([train_ids[i + 1:i + T + 1] for i in ix])
        loss = F.cross_entropy(model(x).reshape(-1, vocab_size), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % a.eval_interval == 0 or step + 1 == a.iters:
            val = held_out_loss(model, held_ids, a)
            print(f"  torch step {step + 1}/{a.iters}: train loss {loss.item():.4f}, held-out {val:.4f}", flush=True)
    return val, time.perf_counter() - start


def hyper_flags(a):
    """The training's options, for a child process of this script."""
    return ["--iters", str(a.iters), "--n-layer", str(a.n_layer), "--n-head", str(a.n_head),
            "--n-embd", str(a.n_embd), "--block-size", str(a.block_size), "--batch-size", str(a.batch_size),
            "--lr", str(a.lr), "--min-lr", str(a.min_lr), "--warmup", str(a.warmup),
            "--eval-interval", str(a.eval_interval), "--eval-iters", str(a.eval_iters), "--seed", str(a.seed),
            "--workdir", a.workdir]


def torch_train_child(a):
    """--torch-train THREADS: PyTorch's training from the workdir's init.safetensors, in its own
    process (so that its thread environment is its own); progress on stderr, one JSON line."""
    from safetensors_interchange import read_safetensors
    vocab, train_ids, held_ids, _, _ = split(a.seed)
    init = read_safetensors(os.path.join(a.workdir, "init.safetensors"))
    sys.stdout, real_stdout = sys.stderr, sys.stdout  # train_torch's progress lines
    try:
        loss, wall = train_torch(a, init, train_ids, held_ids, len(vocab))
    finally:
        sys.stdout = real_stdout
    print(json.dumps({"threads": a.threads, "loss": loss, "wall_s": wall}))


def train_torch_process(a, threads):
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-train", str(threads), "--threads", str(threads)]
    p = subprocess.run(cmd + hyper_flags(a), stdout=subprocess.PIPE, text=True, check=True,
                       env=bench_common.thread_env(threads))
    r = json.loads(p.stdout.strip().splitlines()[-1])
    return r["loss"], r["wall_s"]


def forward_flops(a, vocab, batch, T):
    """Model matmul FLOPs of one forward (compare.py's count): per layer 24*B*T*d^2 + 4*B*T^2*d, the
    tied head 2*B*T*d*V."""
    d = a.n_embd
    return a.n_layer * (24.0 * batch * T * d * d + 4.0 * batch * T * T * d) + 2.0 * batch * T * d * vocab


def training_flops(a, vocab):
    """The training loop's model FLOPs: every step (forward + backward = 3 forwards) and the
    held-out evaluations it runs (eval_iters forwards each)."""
    evals = sum(1 for step in range(a.iters) if (step + 1) % a.eval_interval == 0 or step + 1 == a.iters)
    fwd = forward_flops(a, vocab, a.batch_size, a.block_size)
    return a.iters * 3 * fwd + evals * a.eval_iters * fwd


def train_xgrad(a, init_path, workdir, threads):
    cmd = [a.train_gpt, "--iters", str(a.iters), "--n-layer", str(a.n_layer), "--n-head", str(a.n_head),
           "--n-embd", str(a.n_embd), "--block-size", str(a.block_size), "--batch-size", str(a.batch_size),
           "--lr", str(a.lr), "--min-lr", str(a.min_lr), "--warmup", str(a.warmup),
           "--eval-interval", str(a.eval_interval), "--eval-iters", str(a.eval_iters), "--seed", str(a.seed),
           "--threads", str(threads), "--init-weights", init_path, "--plot", "", "--checkpoint-interval", "0",
           "--checkpoint", os.path.join(workdir, "compare.ckpt"), "--csv", os.path.join(workdir, "compare.csv"),
           "--save-weights", os.path.join(workdir, "xgrad_final.safetensors")]
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=bench_common.thread_env(threads)).stdout
    total = time.perf_counter() - start
    loss = wall = None
    for line in out.split("\n"):
        if line.startswith("held-out loss:"):
            loss = float(line.split()[2])
        if line.startswith("wall time:"):
            wall = float(line.split()[2])
        if line.startswith("text:") or line.startswith("vocabulary:") or line.startswith("step "):
            print("  xgrad " + line, flush=True)
    return loss, wall, total


def peak_rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


@torch.no_grad()
def torch_generate(a, context):
    """nanoGPT's generate: the whole (cropped) context through the model for every token."""
    torch.manual_seed(0)
    model = TorchGPT(65, context + a.gen_tokens, 6, 6, 384).eval()
    idx = torch.randint(65, (1, context))
    start = time.perf_counter()
    for _ in range(a.gen_tokens):
        logits = model(idx[:, -model.block_size:])[:, -1, :] / 0.8
        v, _ = torch.topk(logits, 40)
        logits[logits < v[:, [-1]]] = -float("inf")
        idx = torch.cat((idx, torch.multinomial(F.softmax(logits, dim=-1), 1)), dim=1)
    seconds = time.perf_counter() - start
    return {"framework": "torch", "mode": "recompute", "context": context, "tokens": a.gen_tokens,
            "seconds": seconds, "tokens_per_s": a.gen_tokens / seconds, "peak_rss_mib": peak_rss_mib()}


def generation(a, threads):
    rows = []
    env = bench_common.thread_env(threads)
    for context in (64, 256, 1024):
        for mode in ("cache", "recompute"):
            cmd = [a.bench_generate, "--context", str(context), "--tokens", str(a.gen_tokens),
                   "--threads", str(threads)] + (["--no-cache"] if mode == "recompute" else [])
            rows.append(json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout))
            rows[-1]["threads"] = threads
            print("  " + json.dumps(rows[-1]), flush=True)
        cmd = [sys.executable, os.path.abspath(__file__), "--torch-generate", str(context),
               "--gen-tokens", str(a.gen_tokens), "--threads", str(threads)]
        rows.append(json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout))
        rows[-1]["threads"] = threads
        print("  " + json.dumps(rows[-1]), flush=True)
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--iters", type=int, default=2000)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=12)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--eval-interval", type=int, default=250)
    p.add_argument("--eval-iters", type=int, default=20)
    p.add_argument("--seed", type=int, default=1337, help="train_gpt's --seed: the split")
    p.add_argument("--threads", default="2",
                   help="thread count for both frameworks, or a comma-separated list to sweep (e.g. 1,2,4,8,16)")
    p.add_argument("--no-limit", action="store_true", help="with several thread counts, skip the gemm limit")
    p.add_argument("--gen-tokens", type=int, default=500)
    p.add_argument("--skip-training", action="store_true")
    p.add_argument("--skip-generation", action="store_true")
    p.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    p.add_argument("--workdir", default="/tmp/xgrad_gpt_compare")
    p.add_argument("--torch-generate", type=int, help=argparse.SUPPRESS)  # a child process of the generation part
    p.add_argument("--torch-train", type=int, help=argparse.SUPPRESS)  # a child process of the training part
    a = p.parse_args()
    try:
        thread_counts = bench_common.parse_threads(a.threads)
    except ValueError as e:
        p.error(str(e))
    if a.torch_generate or a.torch_train:
        a.threads = thread_counts[0]
        torch.set_num_threads(a.threads)
        if a.torch_generate:
            print(json.dumps(torch_generate(a, a.torch_generate)))
        else:
            torch_train_child(a)
        return
    a.train_gpt = os.path.join(a.build, "examples", "train_gpt")
    a.bench_generate = os.path.join(a.build, "benchmarks", "bench_gpt_generate")
    os.makedirs(a.workdir, exist_ok=True)
    info = bench_common.torch_info(torch)
    print(f"{bench_common.describe_torch(info)}; threads {','.join(map(str, thread_counts))}")
    result = {"threads": thread_counts, "iters": a.iters, "torch": info["torch_version"], "torch_info": info}
    training, generated = {}, {}
    for threads in thread_counts:
        if not a.skip_training:
            training[threads] = train(a, threads)
        if not a.skip_generation:
            print(f"\ngeneration ({a.gen_tokens} new tokens, 6 layers, n_embd 384, {threads} threads):")
            generated[threads] = generation(a, threads)
    if len(thread_counts) == 1:  # the single run's shape, as before
        if training:
            result["training"] = training[thread_counts[0]]
        if generated:
            result["generation"] = generated[thread_counts[0]]
    else:
        result["training"], result["generation"] = training, generated
        sweep_tables(a, thread_counts, training, generated)
    print("\n" + json.dumps(result))


def sweep_tables(a, thread_counts, training, generated):
    """The thread sweep tables of a run at several thread counts."""
    name = "PyTorch %s" % torch.__version__
    if training:
        limits = {}
        if not a.no_limit:
            limits, _ = bench_common.measure_limits(
                thread_counts, os.path.join(a.build, "benchmarks", "bench_train_step"))
        flops = training_flops(a, training[thread_counts[0]]["vocab"])
        rows = []
        for fw, key in (("xgrad train_gpt", "xgrad_wall_s"), (name, "torch_wall_s")):
            ms = {t: training[t][key] * 1e3 for t in thread_counts}
            rows.append((fw, ms, {t: flops / (ms[t] * 1e6) for t in thread_counts}))
        print(f"\ntraining ({a.iters} iterations with evaluations) by thread count: wall time; from "
              f"{min(thread_counts)} thread(s), speedup and parallel efficiency (speedup / thread ratio); in "
              "brackets the model GFLOP/s as a % of the limit at that count (the fastest float32 gemm with as many "
              "threads, first row); last column: the speedup at the largest count over the limit's own.\n")
        for line in bench_common.efficiency_table(rows, thread_counts, limits, markdown=True):
            print(line)
    if generated:
        rows = []
        for context in (64, 256, 1024):
            for fw, mode, label in (("xgrad", "cache", "xgrad, KV cache"), ("xgrad", "recompute", "xgrad, recompute"),
                                    ("torch", "recompute", name + ", recompute")):
                ms = {}
                for t in thread_counts:
                    for r in generated[t]:
                        if r["context"] == context and r["mode"] == mode and r.get("framework", "xgrad") == fw:
                            ms[t] = 1e3 / r["tokens_per_s"]
                rows.append((f"prompt {context}, {label}", ms, None))
        print(f"\ngeneration by thread count: ms per new token; speedup and parallel efficiency from "
              f"{min(thread_counts)} thread(s).\n")
        for line in bench_common.efficiency_table(rows, thread_counts, markdown=True):
            print(line)


def train(a, threads):
    """The training comparison at `threads` threads: train_gpt and PyTorch from the same weights."""
    vocab, train_ids, held_ids, n_train, n_held = split(a.seed)
    print(f"KJV split: {n_train} training verses ({len(train_ids)} characters), {n_held} held out "
          f"({len(held_ids)}), vocabulary {len(vocab)}")
    torch.manual_seed(0)
    init = TorchGPT(len(vocab), a.block_size, a.n_layer, a.n_head, a.n_embd).state_dict()
    init_path = os.path.join(a.workdir, "init.safetensors")
    write_safetensors(init, {"format": "pt"}, init_path)
    loss_x, wall_x, total_x = train_xgrad(a, init_path, a.workdir, threads)
    # xgrad's final weights (--save-weights) in the PyTorch module: the same held-out loss.
    from safetensors_interchange import read_safetensors
    model = TorchGPT(len(vocab), a.block_size, a.n_layer, a.n_head, a.n_embd)
    model.load_state_dict(read_safetensors(os.path.join(a.workdir, "xgrad_final.safetensors")), strict=True)
    loss_x_in_torch = held_out_loss(model, held_ids, a)
    print(f"  xgrad's final weights in PyTorch: held-out loss {loss_x_in_torch:.4f} (xgrad: {loss_x:.4f})")
    assert abs(loss_x_in_torch - loss_x) < 1e-3, "xgrad's weights give another loss in PyTorch"
    loss_t, wall_t = train_torch_process(a, threads)
    print(f"\ntraining ({a.iters} iterations, {threads} threads):\n"
          f"  held-out loss: xgrad {loss_x:.4f}, torch {loss_t:.4f} nats/char (difference {loss_x - loss_t:+.4f})\n"
          f"  wall time: xgrad {wall_x:.1f} s (process {total_x:.1f} s), torch {wall_t:.1f} s: "
          f"{wall_t / wall_x:.2f}x")
    return {"threads": threads, "vocab": len(vocab), "xgrad_loss": loss_x, "xgrad_loss_in_torch": loss_x_in_torch,
            "xgrad_wall_s": wall_x, "xgrad_process_s": total_x, "torch_loss": loss_t, "torch_wall_s": wall_t,
            "loss_diff": loss_x - loss_t, "speedup": wall_t / wall_x}


if __name__ == "__main__":
    main()
