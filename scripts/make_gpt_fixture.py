#!/usr/bin/python3
"""Writes the GPT parity fixtures from PyTorch: tests/fixtures/gpt_parity_{float32,float64}.safetensors.

Run with Debian's python3-torch (1.13):  /usr/bin/python3 scripts/make_gpt_fixture.py
tests/models/test_gpt_parity.cpp reads them; the suite never needs PyTorch. Deterministic (seeded,
one thread): a rerun gives identical bytes.

The model is TorchGPT below, the PyTorch module equivalent to xgrad::models::GPT (the same
state_dict keys): nanoGPT's GPT written with nn.TransformerEncoderLayer(norm_first=True,
batch_first=True, activation="gelu") blocks under an explicit causal float mask, and the output
head tied to wte.weight. A tiny configuration (CONFIG) gets nanoGPT's init under
torch.manual_seed(0) in float32; then, in each dtype (the float64 case computed in float64 from the
same float32 values), 10 AdamW steps (lr 1e-3, betas (0.9, 0.99), nanoGPT's two groups: weight
decay 0.1 on the tensors of 2 or more dims, 0 on the others) on 10 random batches, without dropout.

Each file holds, as F32 or F64 tensors:
  init.<key>     every state_dict entry before the first step
  final.<key>    every state_dict entry after the 10th step
  batch.idx      (10, B, T) token indices (small integers, exact as floats)
  batch.targets  (10, B, T) the next tokens to predict
  losses         (10) cross_entropy of each step's batch, before that step's update
and the configuration as __metadata__ strings.
"""
import json
import math
import os
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")
CONFIG = dict(vocab_size=20, block_size=8, n_layer=2, n_head=2, n_embd=8, batch_size=2, steps=10,
              lr=1e-3, beta1=0.9, beta2=0.99, weight_decay=0.1)


class TorchGPT(nn.Module):
    """xgrad::models::GPT in PyTorch 1.13: idx (N, T) -> logits (N, T, vocab_size)."""

    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd, dropout=0.0):
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(n_embd, n_head, 4 * n_embd, dropout, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.h = nn.TransformerEncoder(layer, n_layer, enable_nested_tensor=False)
        self.ln_f = nn.LayerNorm(n_embd)
        # nanoGPT's init: N(0, 0.02) weights, zero biases, the residual projections scaled.
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif name.endswith(("norm1.weight", "norm2.weight")) or name == "ln_f.weight":
                nn.init.ones_(p)
            elif name.endswith(("out_proj.weight", "linear2.weight")):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer))
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx):
        t = idx.size(1)
        assert t <= self.block_size, f"cannot forward a sequence of length {t}: block size is {self.block_size}"
        pos = torch.arange(t, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        mask = torch.triu(torch.full((t, t), float("-inf"), dtype=x.dtype, device=x.device), 1)
        x = self.ln_f(self.h(x, mask=mask))
        return F.linear(x, self.wte.weight)  # the tied head


def adamw(model, lr, betas, weight_decay):
    """nanoGPT's configure_optimizers: decay on the tensors of 2 or more dims only."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=betas)


def write_safetensors(tensors, metadata, path):
    kinds = {torch.float32: ("F32", "<f4"), torch.float64: ("F64", "<f8")}
    header, offset, blobs = {"__metadata__": metadata}, 0, []
    for name, t in tensors.items():
        data = t.detach().contiguous().numpy().astype(kinds[t.dtype][1]).tobytes()
        header[name] = {"dtype": kinds[t.dtype][0], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    print(f"wrote {path} ({8 + len(text) + offset} bytes)")


def main():
    c = CONFIG
    torch.manual_seed(0)
    model32 = TorchGPT(c["vocab_size"], c["block_size"], c["n_layer"], c["n_head"], c["n_embd"])
    init = {k: v.clone() for k, v in model32.state_dict().items()}
    shape = (c["steps"], c["batch_size"], c["block_size"])
    idx = torch.randint(0, c["vocab_size"], shape)
    targets = torch.randint(0, c["vocab_size"], shape)
    for dtype, name in ((torch.float32, "float32"), (torch.float64, "float64")):
        model = TorchGPT(c["vocab_size"], c["block_size"], c["n_layer"], c["n_head"], c["n_embd"]).to(dtype)
        model.load_state_dict({k: v.to(dtype) for k, v in init.items()})
        model.train()
        opt = adamw(model, c["lr"], (c["beta1"], c["beta2"]), c["weight_decay"])
        losses = []
        for step in range(c["steps"]):
            logits = model(idx[step])
            loss = F.cross_entropy(logits.view(-1, c["vocab_size"]), targets[step].view(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        tensors = {"init." + k: v.to(dtype) for k, v in init.items()}
        tensors.update({"final." + k: v.detach().clone() for k, v in model.state_dict().items()})
        tensors["batch.idx"] = idx.to(dtype)
        tensors["batch.targets"] = targets.to(dtype)
        tensors["losses"] = torch.tensor(losses, dtype=dtype)
        metadata = {k: repr(v) for k, v in c.items()}
        metadata.update(torch_version=torch.__version__, dtype=name)
        write_safetensors(tensors, metadata, os.path.join(OUT_DIR, f"gpt_parity_{name}.safetensors"))


if __name__ == "__main__":
    main()
