#!/usr/bin/python3
"""One Llama-family training step in PyTorch (>= 1.13): a small, literal port of Hugging Face
transformers' LlamaForCausalLM (src/transformers/models/llama/modeling_llama.py, eager attention, as
the reference of tests/fixtures/hf-llama-tiny computes it in float32): LlamaRMSNorm (statistics in
float32), rotate_half RoPE, grouped-query attention through repeat_kv, a causal additive mask, a
float32 softmax, the SiLU-gated MLP and the tied head; cross_entropy over the next tokens and
torch.optim.AdamW (lr 1e-4, weight decay 0.1 on the matrices only, as bench_llama's
weight_decay_groups). The shapes are bench_llama's (--shape smollm2-135m, llama-3.2-1b without the
llama3 rope scaling, which does not change the time, or tiny).

    /usr/bin/python3 benchmarks/llama_torch.py --shape smollm2-135m --L 1024 --steps 3 --threads 2

Prints one line of JSON: the step times, their median without the first step, the peak RSS.
"""
import argparse
import json
import resource
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import bench_common

SHAPES = bench_common.LLAMA_SHAPES


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden, eps=1e-5):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(hidden)), eps

    def forward(self, x):
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


def rope_cos_sin(head_dim, theta, t):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    freqs = torch.arange(t, dtype=torch.float32)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos()[None, None], emb.sin()[None, None]  # (1, 1, T, head_dim)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(h, n_rep):
    b, nkv, s, d = h.shape
    if n_rep == 1:
        return h
    return h[:, :, None, :, :].expand(b, nkv, n_rep, s, d).reshape(b, nkv * n_rep, s, d)


class LlamaAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.q_proj = nn.Linear(c["hidden"], c["heads"] * c["head_dim"], bias=False)
        self.k_proj = nn.Linear(c["hidden"], c["kv_heads"] * c["head_dim"], bias=False)
        self.v_proj = nn.Linear(c["hidden"], c["kv_heads"] * c["head_dim"], bias=False)
        self.o_proj = nn.Linear(c["heads"] * c["head_dim"], c["hidden"], bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        hd = self.c["head_dim"]
        q = self.q_proj(x).view(b, t, -1, hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, -1, hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, -1, hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        n_rep = self.c["heads"] // self.c["kv_heads"]
        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
        w = torch.matmul(q, k.transpose(2, 3)) * hd**-0.5 + mask
        w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
        o = torch.matmul(w, v).transpose(1, 2).contiguous().reshape(b, t, -1)
        return self.o_proj(o)


class LlamaMLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c["hidden"], c["inter"], bias=False)
        self.up_proj = nn.Linear(c["hidden"], c["inter"], bias=False)
        self.down_proj = nn.Linear(c["inter"], c["hidden"], bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn, self.mlp = LlamaAttention(c), LlamaMLP(c)
        self.input_layernorm, self.post_attention_layernorm = LlamaRMSNorm(c["hidden"]), LlamaRMSNorm(c["hidden"])

    def forward(self, h, cos, sin, mask):
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, mask)
        return h + self.mlp(self.post_attention_layernorm(h))


class LlamaForCausalLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c["vocab"], c["hidden"])
        self.layers = nn.ModuleList(LlamaDecoderLayer(c) for _ in range(c["layers"]))
        self.norm = LlamaRMSNorm(c["hidden"])
        for name, p in self.named_parameters():  # transformers' _init_weights
            if not name.endswith("norm.weight"):
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, ids):
        t = ids.shape[1]
        cos, sin = rope_cos_sin(self.c["head_dim"], self.c["theta"], t)
        mask = torch.triu(torch.full((t, t), torch.finfo(torch.float32).min), diagonal=1)[None, None]
        h = self.embed_tokens(ids)
        for layer in self.layers:
            h = layer(h, cos, sin, mask)
        return F.linear(self.norm(h), self.embed_tokens.weight)  # tied head


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="smollm2-135m", choices=sorted(SHAPES))
    ap.add_argument("--L", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=0, help="override the shape's layer count (0: keep)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    c = dict(SHAPES[a.shape])
    if a.layers > 0:
        c["layers"] = a.layers
    model = LlamaForCausalLM(c)
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4)
    tokens = torch.randint(c["vocab"], (a.L + 1,))
    x, y = tokens[:-1].unsqueeze(0), tokens[1:]
    times, loss = [], 0.0
    for _ in range(a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        l = F.cross_entropy(model(x).reshape(-1, c["vocab"]), y)
        l.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        loss = float(l)
    print(json.dumps({"framework": "torch", "torch_version": torch.__version__, "shape": a.shape,
                      "layers": c["layers"], "L": a.L, "threads": a.threads, "step_times_s": times,
                      "median_step_s": statistics.median(times[1:] if len(times) > 1 else times), "loss": loss,
                      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}))


if __name__ == "__main__":
    main()
