#!/usr/bin/env python3
"""Weights between PyTorch and xgrad through safetensors, both ways (Debian's python3-torch).

  /usr/bin/python3 scripts/safetensors_interchange.py write
      PyTorch -> xgrad: writes tests/fixtures/torch_encoder.safetensors, the state dict of a
      2-layer nn.TransformerEncoder, and tests/fixtures/torch_encoder_io.json, an input and the
      encoder's output. tests/serialize/test_safetensors_torch.cpp loads the weights into xgrad's encoder
      and reproduces that output.
  /usr/bin/python3 scripts/safetensors_interchange.py check FILE
      xgrad -> PyTorch: loads FILE (a state dict saved by xgrad::save_safetensors, e.g. by
      `train_toy_encoder --save-weights` or by the test) into the same nn.TransformerEncoder with
      load_state_dict(strict=True) and checks that it reproduces the fixture's output.

The format is written and read here with struct and json (the `safetensors` Python package is
not needed): an 8-byte little-endian header length, the JSON header, the row-major data.
"""
import json
import os
import struct
import sys

import torch

import make_fixtures as fx

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "tests", "fixtures")
WEIGHTS = os.path.join(FIXTURES, "torch_encoder.safetensors")
DTYPES = {torch.float32: ("F32", 4), torch.float64: ("F64", 8)}
FROM_DTYPE = {"F32": torch.float32, "F64": torch.float64}


def build_encoder():
    torch.manual_seed(7)
    layer = torch.nn.TransformerEncoderLayer(d_model=4, nhead=2, dim_feedforward=16, dropout=0.0,
                                             activation="gelu", batch_first=True, norm_first=True)
    enc = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    fx.perturb_(enc, 0.1)
    return enc


def write_safetensors(state, path):
    header, offset, blobs = {}, 0, []
    for name, t in state.items():
        dtype, size = DTYPES[t.dtype]
        data = t.detach().contiguous().numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        t = torch.frombuffer(bytearray(data[begin:end]), dtype=FROM_DTYPE[e["dtype"]])
        out[name] = t.reshape(e["shape"])
    return out


def io_tensors(enc):
    torch.manual_seed(8)
    x = torch.randn(2, 3, 4)
    enc.train()  # the slow path (dropout is 0)
    with torch.no_grad():
        return {"input": x, "output": enc(x)}


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "write"
    enc = build_encoder()
    if mode == "write":
        write_safetensors(enc.state_dict(), WEIGHTS)
        fx.OUT_DIR = FIXTURES
        config = {"module": "TransformerEncoder", "num_layers": 2,
                  "layer_options": {"d_model": 4, "nhead": 2, "dim_feedforward": 16, "dropout": 0.0,
                                    "activation": "gelu", "batch_first": True, "norm_first": True},
                  "weights": "torch_encoder.safetensors"}
        fx.write_case("torch_encoder_io", "float32", config, io_tensors(enc))
        print(f"wrote {WEIGHTS} and torch_encoder_io.json")
    elif mode == "check":
        state = read_safetensors(sys.argv[2])
        enc.load_state_dict(state, strict=True)
        got = io_tensors(enc)["output"]
        want = torch.tensor(json.load(open(os.path.join(FIXTURES, "torch_encoder_io.json")))
                            ["tensors"]["output"]["data"]).reshape(got.shape)
        diff = (got - want).abs().max().item()
        print(f"{sys.argv[2]}: {len(state)} tensors loaded into torch.nn.TransformerEncoder, "
              f"output max |diff| = {diff:.3g}")
        sys.exit(0 if diff <= 1e-5 else 1)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
