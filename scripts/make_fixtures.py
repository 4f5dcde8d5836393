#!/usr/bin/python3
"""Writes xgrad's golden fixtures (tests/fixtures/*.json) from PyTorch.

Run with Debian's python3-torch (1.13):  /usr/bin/python3 scripts/make_fixtures.py
The C++ suite only reads the files; it never needs PyTorch. The output is deterministic: every
case seeds torch itself and runs on one thread. Format: tests/fixtures/README.md.

Cases:
  rms_norm_{float64,float32}  F.rms_norm by its formula: outputs, input and weight gradients
  silu_mul_{float64,float32}  F.silu(gate) * up (the Llama MLP's activation): output, gradients
  nn_*_{float64,float32}  the nn modules: parameters, input, output, MSE loss to a
                          target, gradients of the input and of every parameter (by state_dict key)
  optim_{mlp,encoder}_*   parameters after each of 5 optimizer steps (float64)
  lr_*                    learning rate before each of 30 scheduler steps
  clip_*                  gradient clipping: total norm and clipped gradients
  rope_scaling_*, rotary_embedding_{float64,float32}
                          RoPE as transformers' Llama: scaled inverse frequencies; the op's values
                          and input gradient
  sdpa_gqa_*              grouped-query attention: forward and gradients
  loader_roundtrip        a tiny known file for the C++ loader's own test
"""

import argparse
import copy
import json
import math
import os
import sys
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)
warnings.filterwarnings("ignore")

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")
DTYPES = {"float64": torch.float64, "float32": torch.float32}


# ---- writing ---------------------------------------------------------------------------------

def _number(v):
    # repr of a float64 round-trips exactly; JSON has no inf/nan, so those are strings.
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
    return v


def encode(t):
    """One tensor entry: {"shape", "data"} (+ "dtype" for bool and int64 tensors)."""
    t = t.detach().cpu()
    entry = {"shape": list(t.shape)}
    if t.dtype == torch.bool:
        entry["dtype"] = "bool"
        entry["data"] = [int(v) for v in t.flatten().tolist()]
    elif t.dtype == torch.int64:
        entry["dtype"] = "int64"
        entry["data"] = [int(v) for v in t.flatten().tolist()]
    elif t.is_floating_point():
        # A float32 value converted to float64 is exact; its float64 repr round-trips.
        entry["data"] = [_number(float(v)) for v in t.to(torch.float64).flatten().tolist()]
    else:
        raise TypeError(f"unsupported dtype {t.dtype}")
    return entry


WRITTEN = []


def write_case(name, dtype, config, tensors):
    for key, t in tensors.items():
        assert isinstance(t, torch.Tensor), key
    head = {"case": name, "torch_version": torch.__version__, "dtype": dtype, "config": config}
    lines = [json.dumps(head, separators=(",", ":"), allow_nan=False)[:-1] + ',"tensors":{']
    items = [json.dumps(k) + ":" + json.dumps(encode(t), separators=(",", ":"), allow_nan=False)
             for k, t in tensors.items()]
    lines.append(",\n".join(items))
    lines.append("}}\n")
    text = "\n".join(lines)
    json.loads(text)  # well-formed
    path = os.path.join(OUT_DIR, name + ".json")
    with open(path, "w") as f:
        f.write(text)
    WRITTEN.append((name, len(text), list(tensors.keys())))


# ---- op cases --------------------------------------------------------------------------------

def rms_norm_formula(x, dims, weight, eps):
    """F.rms_norm (torch >= 2.4) by its formula: torch 1.13 has no rms_norm."""
    y = x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps)
    return y if weight is None else y * weight


def rms_norm_cases():
    """rms_norm_{float64,float32}: F.rms_norm's output and the gradients of its input and weight
    for a random upstream gradient, per case of config["cases"]; eps null is finfo(dtype).eps."""
    torch.manual_seed(130)
    inputs32 = {"input": 2.0 * torch.randn(2, 3, 8) + 0.5, "weight": 1.0 + 0.5 * torch.randn(8),
                "weight_2d": 1.0 + 0.5 * torch.randn(3, 8), "grad_output": torch.randn(2, 3, 8)}
    cases = {"weight": {"normalized_shape": [8], "weight": "weight", "eps": 1e-5},
             "no_weight_default_eps": {"normalized_shape": [8], "weight": None, "eps": None},
             "2d": {"normalized_shape": [3, 8], "weight": "weight_2d", "eps": 1e-6}}
    for dtype_name, dtype in DTYPES.items():
        tensors = {k: t.to(dtype) for k, t in inputs32.items()}
        out = dict(tensors)
        for name, c in cases.items():
            x = tensors["input"].clone().requires_grad_(True)
            w = None if c["weight"] is None else tensors[c["weight"]].clone().requires_grad_(True)
            dims = tuple(range(-len(c["normalized_shape"]), 0))
            eps = torch.finfo(dtype).eps if c["eps"] is None else c["eps"]
            y = rms_norm_formula(x, dims, w, eps)
            y.backward(tensors["grad_output"])
            out[name + ".output"] = y
            out[name + ".grad.input"] = x.grad
            if w is not None:
                out[name + ".grad.weight"] = w.grad
        config = {"op": "rms_norm", "formula": "x * rsqrt(mean(x^2 over normalized_shape) + eps) * weight",
                  "cases": cases, "backward": "of the output against grad_output"}
        write_case(f"rms_norm_{dtype_name}", dtype_name, config, out)


def silu_mul_cases():
    """silu_mul_{float64,float32}: F.silu(gate) * up and the gradients of gate and up for a random
    upstream gradient; gate has 0 of both signs, values near 0 and large ones of either sign."""
    torch.manual_seed(131)
    gate = 4.0 * torch.randn(3, 37)
    specials = [0.0, -0.0, 1e-6, -1e-6, 0.5, -0.5, 20.0, -20.0, 90.0, -90.0]
    gate.view(-1)[:len(specials)] = torch.tensor(specials)
    inputs32 = {"gate": gate, "up": torch.randn(3, 37), "grad_output": torch.randn(3, 37)}
    for dtype_name, dtype in DTYPES.items():
        tensors = {k: t.to(dtype) for k, t in inputs32.items()}
        g = tensors["gate"].clone().requires_grad_(True)
        u = tensors["up"].clone().requires_grad_(True)
        y = F.silu(g) * u
        y.backward(tensors["grad_output"])
        out = dict(tensors, output=y, **{"grad.gate": g.grad, "grad.up": u.grad})
        config = {"op": "silu_mul", "formula": "F.silu(gate) * up",
                  "backward": "of the output against grad_output"}
        write_case(f"silu_mul_{dtype_name}", dtype_name, config, out)


# ---- nn cases --------------------------------------------------------------------------------

def perturb_(module, scale):
    """Adds scale * N(0, 1) to every parameter, so zero biases and unit norms are not special."""
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn_like(p))


def nn_case(name, seed, build, make_tensors, forward, config, grad_inputs=("input",),
            target_is_input=False, perturb=0.0, grads=True):
    """Writes name_float64 and name_float32 from the same float32-initialized values.

    build() -> module (float32, default init under the seed); make_tensors() -> dict of inputs
    (float inputs, bool masks, int64 indices, float masks); forward(module, tensors) ->
    (output, extras dict). The loss is mse_loss(output, target) with a constant target.
    """
    torch.manual_seed(seed)
    module32 = build()
    if perturb:
        perturb_(module32, perturb)
    inputs32 = make_tensors()
    if target_is_input:
        target32 = inputs32["input"].detach().clone()
    else:
        with torch.no_grad():
            probe, _ = forward(module32, inputs32)
        target32 = torch.randn(probe.shape)
    config = dict(config)
    config["seed"] = seed
    config["training"] = module32.training
    config["init"] = ("PyTorch's default init under torch.manual_seed(seed)" +
                      (f", then every parameter += {perturb} * randn" if perturb else ""))
    config["loss"] = "mse_loss(output, target), reduction mean; target is a constant" + (
        " (a copy of the input)" if target_is_input else "")

    for dtype_name, dtype in DTYPES.items():
        module = copy.deepcopy(module32).to(dtype)
        tensors = {}
        for key, t in inputs32.items():
            t = t.detach().clone()
            if t.is_floating_point():
                t = t.to(dtype)
            tensors[key] = t
        for key in grad_inputs:
            tensors[key].requires_grad_(True)
        target = target32.to(dtype)

        out = {}
        for key, t in tensors.items():
            out[key] = t
        state = {k: v.detach().clone() for k, v in module.state_dict().items()}
        for k, v in state.items():
            out["param." + k] = v
        module.zero_grad()
        output, extras = forward(module, tensors)
        assert torch.isfinite(output).all(), name
        loss = F.mse_loss(output, target)
        out["output"] = output
        out.update(extras)
        out["target"] = target
        out["loss"] = loss
        if grads:
            loss.backward()
            for key in grad_inputs:
                out["grad." + key] = tensors[key].grad
            for k, p in module.named_parameters():
                assert p.grad is not None, (name, k)
                out["grad." + k] = p.grad
        write_case(f"{name}_{dtype_name}", dtype_name, config, out)


def linear_options(in_features, out_features, bias=True):
    return {"in_features": in_features, "out_features": out_features, "bias": bias}


def mha_options(embed_dim, num_heads, batch_first, bias=True):
    return {"embed_dim": embed_dim, "num_heads": num_heads, "dropout": 0.0, "bias": bias,
            "add_bias_kv": False, "add_zero_attn": False, "kdim": None, "vdim": None,
            "batch_first": batch_first}


def layer_options(d_model, nhead, dim_feedforward, activation, batch_first, norm_first,
                  dropout=0.0, layer_norm_eps=1e-5):
    # torch 1.13's TransformerEncoderLayer has no `bias` argument: its layers always have biases.
    return {"d_model": d_model, "nhead": nhead, "dim_feedforward": dim_feedforward,
            "dropout": dropout, "activation": activation, "layer_norm_eps": layer_norm_eps,
            "batch_first": batch_first, "norm_first": norm_first}


def make_layer(o):
    return nn.TransformerEncoderLayer(**o)


def mha_forward(kwargs, query="input", key="input", value="input"):
    """forward for MultiheadAttention; kwargs: non-tensor forward args."""
    def run(m, t):
        masks = {k: t[k] for k in ("key_padding_mask", "attn_mask") if k in t}
        out, weights = m(t[query], t[key], t[value], **masks, **kwargs)
        extras = {} if weights is None else {"attn_weights": weights}
        return out, extras
    return run


def mha_config(options, kwargs, tensors, query="input", key="input", value="input"):
    fwd = {"query": query, "key": key, "value": value}
    fwd.update({k: (k if k in tensors else None) for k in ("key_padding_mask", "attn_mask")})
    fwd.update(kwargs)
    return {"module": "MultiheadAttention", "options": options, "forward": fwd}


# An attention pattern (L = S = 4) with every row keeping key 0 or 1 open, so that adding the key
# padding below (keys 2, 3 of batch 1 padded) never masks a whole row.
BOOL_PATTERN = [[False, True, False, False],
                [False, False, True, False],
                [True, False, False, True],
                [False, True, False, False]]
KEY_PADDING = [[False, False, False, True],
               [False, False, True, True]]


def causal_bool(L):
    return torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)


def causal_float(L):
    return torch.zeros(L, L).masked_fill(causal_bool(L), float("-inf"))


def nn_cases():
    # Linear: 3-D input (batch dims are flattened by x W^T + b).
    for bias in (True, False):
        o = linear_options(4, 3, bias)
        nn_case("nn_linear" + ("" if bias else "_nobias"), 101 + bias,
                lambda o=o: nn.Linear(**o),
                lambda: {"input": torch.randn(2, 5, 4)},
                lambda m, t: (m(t["input"]), {}),
                {"module": "Linear", "options": o})

    # LayerNorm over 1 and 2 trailing dims with random affine parameters; and without affine.
    for suffix, shape, ishape, eps, affine in (("1d", [6], (2, 3, 6), 1e-5, True),
                                               ("2d", [3, 4], (2, 3, 3, 4), 1e-5, True),
                                               ("noaffine", [5], (4, 5), 1e-3, False)):
        o = {"normalized_shape": shape, "eps": eps, "elementwise_affine": affine}

        def build(o=o):
            m = nn.LayerNorm(**o)
            if o["elementwise_affine"]:
                with torch.no_grad():
                    m.weight.copy_(1.0 + 0.5 * torch.randn_like(m.weight))
                    m.bias.copy_(0.5 * torch.randn_like(m.bias))
            return m
        cfg = {"module": "LayerNorm", "options": o}
        if affine:
            cfg["init_note"] = "weight = 1 + 0.5 randn, bias = 0.5 randn (set after construction)"
        nn_case("nn_layernorm_" + suffix, 110 + len(shape) + 5 * (not affine), build,
                lambda ishape=ishape: {"input": 2.0 * torch.randn(*ishape) + 0.5},
                lambda m, t: (m(t["input"]), {}), cfg)

    # Activations.
    for approximate in ("none", "tanh"):
        o = {"approximate": approximate}
        nn_case("nn_gelu_" + approximate, 120 + (approximate == "tanh"),
                lambda o=o: nn.GELU(**o),
                lambda: {"input": 2.0 * torch.randn(3, 7)},
                lambda m, t: (m(t["input"]), {}),
                {"module": "GELU", "options": o})
    nn_case("nn_relu", 125, lambda: nn.ReLU(),
            lambda: {"input": torch.randn(3, 7)},
            lambda m, t: (m(t["input"]), {}),
            {"module": "ReLU", "options": {}})

    # Embedding: repeated indices accumulate; the padding row gets no gradient.
    emb_cases = (
        ("nn_embedding_padding", {"num_embeddings": 10, "embedding_dim": 5, "padding_idx": 2},
         [[1, 2, 3, 1], [2, 7, 7, 9], [0, 1, 2, 5]]),
        ("nn_embedding", {"num_embeddings": 7, "embedding_dim": 3, "padding_idx": None},
         [[6, 0, 6], [3, 3, 3]]),
    )
    for i, (name, o, idx) in enumerate(emb_cases):
        o = dict(o, max_norm=None, norm_type=2.0, scale_grad_by_freq=False, sparse=False)
        nn_case(name, 130 + i, lambda o=o: nn.Embedding(**o),
                lambda idx=idx: {"input": torch.tensor(idx, dtype=torch.int64)},
                lambda m, t: (m(t["input"]), {}),
                {"module": "Embedding", "options": o}, grad_inputs=())

    # MultiheadAttention: E = 6, H = 2 (head dim 3), L = S = 4, N = 2.
    E, H, L, N = 6, 2, 4, 2

    def self_input(batch_first):
        return torch.randn(N, L, E) if batch_first else torch.randn(L, N, E)

    def mha_self_case(name, seed, batch_first, kwargs, masks, bias=True):
        o = mha_options(E, H, batch_first, bias)

        def tensors(batch_first=batch_first, masks=masks):
            t = {"input": self_input(batch_first)}
            t.update({k: f() for k, f in masks.items()})
            return t
        nn_case(name, seed, lambda o=o: nn.MultiheadAttention(**o), tensors,
                mha_forward(kwargs), mha_config(o, kwargs, masks), perturb=0.1)

    avg = {"need_weights": True, "average_attn_weights": True}
    mha_self_case("nn_mha_batch_first", 140, True, avg, {})
    mha_self_case("nn_mha_seq_first", 141, False,
                  {"need_weights": True, "average_attn_weights": False}, {})
    mha_self_case("nn_mha_nobias", 142, True, {"need_weights": False}, {}, bias=False)
    mha_self_case("nn_mha_key_padding", 143, True, avg,
                  {"key_padding_mask": lambda: torch.tensor(KEY_PADDING)})
    mha_self_case("nn_mha_bool_mask", 144, True, avg,
                  {"attn_mask": lambda: torch.tensor(BOOL_PATTERN)})
    mha_self_case("nn_mha_float_mask", 145, True, avg,
                  {"attn_mask": lambda: torch.randn(L, L)})

    def float_mask_3d():
        # (N*H, L, S): random logit offsets, -inf where BOOL_PATTERN is true for odd n*H + h.
        m = torch.randn(N * H, L, L)
        pattern = torch.tensor(BOOL_PATTERN)
        for b in range(1, N * H, 2):
            m[b] = m[b].masked_fill(pattern, float("-inf"))
        return m
    mha_self_case("nn_mha_float_mask_3d", 146, False, avg, {"attn_mask": float_mask_3d})
    mha_self_case("nn_mha_bool_mask_key_padding", 147, True, avg,
                  {"attn_mask": lambda: torch.tensor(BOOL_PATTERN),
                   "key_padding_mask": lambda: torch.tensor(KEY_PADDING)})
    mha_self_case("nn_mha_float_mask_key_padding", 148, True,
                  {"need_weights": True, "average_attn_weights": False},
                  {"attn_mask": lambda: torch.randn(L, L).masked_fill(
                      torch.tensor(BOOL_PATTERN), float("-inf")),
                   "key_padding_mask": lambda: torch.tensor(KEY_PADDING)})

    # Cross attention: query (N, 3, E), key and value (N, 5, E), distinct tensors.
    o = mha_options(E, H, True)
    names = ("query", "key", "value")
    kpm = [[False, False, False, False, True], [False, True, False, False, False]]
    nn_case("nn_mha_cross", 149, lambda: nn.MultiheadAttention(**o),
            lambda: {"query": torch.randn(N, 3, E), "key": torch.randn(N, 5, E),
                     "value": torch.randn(N, 5, E),
                     "key_padding_mask": torch.tensor(kpm)},
            mha_forward(avg, *names),
            mha_config(o, avg, {"key_padding_mask": 1}, *names),
            grad_inputs=names, perturb=0.1)

    # TransformerEncoderLayer.
    def layer_case(name, seed, o, shape, masks, causal_note=None):
        def tensors(shape=shape, masks=masks):
            t = {"input": torch.randn(*shape)}
            t.update({k: f() for k, f in masks.items()})
            return t

        def run(m, t):
            return m(t["input"], **{k: t[k] for k in masks}), {}
        cfg = {"module": "TransformerEncoderLayer", "options": o,
               "forward": {k: (k if k in masks else None)
                           for k in ("src_mask", "src_key_padding_mask")}}
        if causal_note:
            cfg["forward"]["src_mask_kind"] = causal_note
        nn_case(name, seed, lambda o=o: make_layer(o), tensors, run, cfg,
                target_is_input=True, perturb=0.1)

    prenorm = layer_options(4, 2, 64, "gelu", batch_first=True, norm_first=True)
    layer_case("nn_encoder_layer_prenorm_gelu", 150, prenorm, (2, 3, 4), {})
    postnorm = layer_options(6, 2, 16, "relu", batch_first=True, norm_first=False)
    Ls = 5
    kpm5 = lambda: torch.tensor([[False] * 5, [False, False, False, True, True]])
    layer_case("nn_encoder_layer_postnorm_relu_causal_bool", 151, postnorm, (2, Ls, 6),
               {"src_mask": lambda: causal_bool(Ls), "src_key_padding_mask": kpm5},
               "causal, bool: true above the diagonal")
    layer_case("nn_encoder_layer_postnorm_relu_causal_float", 152, postnorm, (2, Ls, 6),
               {"src_mask": lambda: causal_float(Ls), "src_key_padding_mask": kpm5},
               "causal, float: -inf above the diagonal, 0 elsewhere")
    seqfirst = layer_options(6, 3, 12, "relu", batch_first=False, norm_first=False,
                             layer_norm_eps=1e-6)
    layer_case("nn_encoder_layer_seq_first", 153, seqfirst, (Ls, 2, 6),
               {"src_key_padding_mask": kpm5})

    # TransformerEncoder.
    def encoder_case(name, seed, o, num_layers, final_norm, shape, masks, perturb,
                     input_seed=None, eval_mode=False):
        def build(o=o):
            layer = make_layer(o)
            norm = nn.LayerNorm(o["d_model"], eps=o["layer_norm_eps"]) if final_norm else None
            enc = nn.TransformerEncoder(layer, num_layers, norm=norm, enable_nested_tensor=False)
            if eval_mode:
                enc.eval()
            return enc

        def tensors(shape=shape, masks=masks):
            if input_seed is not None:
                # The seed example draws x under its own seed; the layer was built under `seed`.
                state = torch.get_rng_state()
                torch.manual_seed(input_seed)
                t = {"input": torch.randn(*shape)}
                torch.set_rng_state(state)
            else:
                t = {"input": torch.randn(*shape)}
            t.update({k: f() for k, f in masks.items()})
            return t

        def run(m, t):
            return m(t["input"], **{k: t[k] for k in masks}), {}
        cfg = {"module": "TransformerEncoder", "layer_options": o,
               "options": {"num_layers": num_layers,
                           "norm": ({"normalized_shape": [o["d_model"]],
                                     "eps": o["layer_norm_eps"], "elementwise_affine": True}
                                    if final_norm else None),
                           "enable_nested_tensor": False},
               "forward": {k: (k if k in masks else None)
                           for k in ("mask", "src_key_padding_mask")}}
        if input_seed is not None:
            cfg["input_seed"] = input_seed
            cfg["note"] = ("the seed example: torch.manual_seed(input_seed); x = torch.randn(2, 3, 4) "
                           "(float32); torch.manual_seed(seed); layer = TransformerEncoderLayer(...)")
        nn_case(name, seed, build, tensors, run, cfg, target_is_input=True, perturb=perturb,
                grads=not eval_mode)

    seed_layer = layer_options(4, 2, 64, "gelu", batch_first=True, norm_first=True)
    encoder_case("nn_encoder_seed", 42, seed_layer, 3, False, (2, 3, 4), {}, 0.0, input_seed=0)
    seed_layer_eval = dict(seed_layer, dropout=0.2)
    encoder_case("nn_encoder_seed_eval", 42, seed_layer_eval, 3, False, (2, 3, 4), {}, 0.0,
                 input_seed=0, eval_mode=True)
    small_prenorm = layer_options(4, 2, 16, "gelu", batch_first=True, norm_first=True)
    encoder_case("nn_encoder_final_norm", 160, small_prenorm, 2, True, (2, 3, 4), {}, 0.1)
    encoder_case("nn_encoder_postnorm_relu_masks", 161, postnorm, 2, False, (2, Ls, 6),
                 {"mask": lambda: causal_bool(Ls), "src_key_padding_mask": kpm5}, 0.1)

    # TransformerDecoderLayer, TransformerDecoder and Transformer: tgt length T = 4, memory / src
    # length S = 5, batch 2. No row is fully masked: causal rows keep key 0, which no tgt padding
    # masks, and MEMORY_PATTERN leaves keys 0 and 1 (never padded) open in every row.
    T, S = 4, 5
    tgt_kpm = lambda: torch.tensor([[False, False, False, True], [False, False, False, False]])
    memory_pattern = lambda: torch.tensor([[False, False, True, False, False],
                                           [False, True, False, False, True],
                                           [True, False, False, True, False],
                                           [False, False, False, False, True]])

    def seq_tensors(batch_first, d_model, names, masks):
        """names: input name -> length; (N, len, E) with batch_first, else (len, N, E)."""
        def make():
            t = {k: torch.randn(2, n, d_model) if batch_first else torch.randn(n, 2, d_model)
                 for k, n in names.items()}
            t.update({k: f() for k, f in masks.items()})
            return t
        return make

    decoder_mask_names = ("tgt_mask", "memory_mask", "tgt_key_padding_mask", "memory_key_padding_mask")

    def decoder_case(name, seed, o, masks, num_layers=None, final_norm=False):
        def build(o=o):
            layer = nn.TransformerDecoderLayer(**o)
            if num_layers is None:
                return layer
            norm = nn.LayerNorm(o["d_model"], eps=o["layer_norm_eps"]) if final_norm else None
            return nn.TransformerDecoder(layer, num_layers, norm=norm)

        def run(m, t):
            return m(t["tgt"], t["memory"], **{k: t[k] for k in masks}), {}
        fwd = {k: (k if k in masks else None) for k in decoder_mask_names}
        if num_layers is None:
            cfg = {"module": "TransformerDecoderLayer", "options": o, "forward": fwd}
        else:
            cfg = {"module": "TransformerDecoder", "layer_options": o,
                   "options": {"num_layers": num_layers,
                               "norm": ({"normalized_shape": [o["d_model"]],
                                         "eps": o["layer_norm_eps"], "elementwise_affine": True}
                                        if final_norm else None)},
                   "forward": fwd}
        nn_case(name, seed, build,
                seq_tensors(o["batch_first"], o["d_model"], {"tgt": T, "memory": S}, masks),
                run, cfg, grad_inputs=("tgt", "memory"), perturb=0.1)

    decoder_case("nn_decoder_layer_postnorm_relu_causal", 170,
                 layer_options(6, 2, 16, "relu", batch_first=False, norm_first=False),
                 {"tgt_mask": lambda: causal_float(T), "memory_key_padding_mask": kpm5})
    decoder_case("nn_decoder_layer_prenorm_gelu_bool_masks", 171,
                 layer_options(6, 3, 12, "gelu", batch_first=True, norm_first=True,
                               layer_norm_eps=1e-6),
                 {"tgt_mask": lambda: causal_bool(T), "memory_mask": memory_pattern,
                  "tgt_key_padding_mask": tgt_kpm, "memory_key_padding_mask": kpm5})
    decoder_case("nn_decoder_final_norm", 172,
                 layer_options(4, 2, 16, "relu", batch_first=True, norm_first=False),
                 {"tgt_mask": lambda: causal_bool(T), "memory_key_padding_mask": kpm5},
                 num_layers=2, final_norm=True)

    # nn.Transformer (d_model 8, 2 heads, 2 + 2 layers): its own init, xavier_uniform_ included.
    transformer = {"d_model": 8, "nhead": 2, "num_encoder_layers": 2, "num_decoder_layers": 2,
                   "dim_feedforward": 16, "dropout": 0.0, "activation": "relu",
                   "custom_encoder": None, "custom_decoder": None, "layer_norm_eps": 1e-5,
                   "batch_first": True, "norm_first": False}
    transformer_masks = {"src_key_padding_mask": kpm5,
                         "tgt_mask": lambda: nn.Transformer.generate_square_subsequent_mask(T),
                         "memory_key_padding_mask": kpm5}

    def run_transformer(m, t):
        return m(t["src"], t["tgt"], **{k: t[k] for k in transformer_masks}), {}
    nn_case("nn_transformer", 173, lambda: nn.Transformer(**transformer),
            seq_tensors(True, 8, {"src": S, "tgt": T}, transformer_masks), run_transformer,
            {"module": "Transformer", "options": transformer,
             "forward": {k: (k if k in transformer_masks else None)
                         for k in ("src_mask", "tgt_mask", "memory_mask", "src_key_padding_mask",
                                   "tgt_key_padding_mask", "memory_key_padding_mask")}},
            grad_inputs=("src", "tgt"), perturb=0.1)


def notebook_check():
    """Prints the seed example's eval output next to the notebook's (run on mps, float32)."""
    notebook = [[[-0.0296, -0.0916, 1.0885, -1.0260], [0.6635, 0.4575, 1.4182, -0.2418],
                 [0.4502, 0.3450, 0.7149, 0.3737]],
                [[0.1837, -0.0224, 1.0295, 1.6342], [0.3983, -0.1241, 0.9514, 0.5204],
                 [1.1837, 1.0843, 1.0421, 0.6918]]]
    with open(os.path.join(OUT_DIR, "nn_encoder_seed_eval_float32.json")) as f:
        out = json.load(f)["tensors"]["output"]["data"]
    diff = max(abs(a - b) for a, b in zip(out, torch.tensor(notebook).flatten().tolist()))
    print(f"seed example, eval output vs the notebook's printout: max |diff| = {diff:.2e} "
          "(the notebook ran on device 'mps', whose random streams for x and the initial "
          "weights are not the CPU's)")
    # PyTorch's eval fast path (no grad) against the slow path recorded in the fixture.
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4)
    torch.manual_seed(42)
    layer = nn.TransformerEncoderLayer(**layer_options(4, 2, 64, "gelu", True, True, dropout=0.2))
    enc = nn.TransformerEncoder(layer, 3, enable_nested_tensor=False).eval()
    with torch.no_grad():
        fast = enc(x).flatten().tolist()
    diff = max(abs(a - b) for a, b in zip(out, fast))
    print(f"seed example, eval output: PyTorch's no-grad fast path vs the fixture: {diff:.2e}")


# ---- optimizers ------------------------------------------------------------------------------

def mlp_model():
    torch.manual_seed(200)
    model = nn.Sequential(nn.Linear(4, 8, dtype=torch.float64), nn.GELU(),
                          nn.Linear(8, 3, dtype=torch.float64))
    x = torch.randn(5, 4, dtype=torch.float64)
    target = torch.randn(5, 3, dtype=torch.float64)
    config = {"model": "mlp",
              "model_note": "Sequential(Linear(4, 8), GELU(approximate='none'), Linear(8, 3))",
              "model_seed": 200,
              "loss": "mse_loss(model(input), target)"}
    first = ["0.weight", "0.bias"]
    return model, x, target, config, first


ENCODER_LAYER = layer_options(4, 2, 16, "gelu", batch_first=True, norm_first=True)


def encoder_model():
    torch.manual_seed(201)
    layer = nn.TransformerEncoderLayer(**ENCODER_LAYER, dtype=torch.float64)
    model = nn.TransformerEncoder(layer, 2, norm=None, enable_nested_tensor=False)
    x = torch.randn(2, 3, 4, dtype=torch.float64)
    config = {"model": "encoder", "layer_options": ENCODER_LAYER,
              "encoder_options": {"num_layers": 2, "norm": None, "enable_nested_tensor": False},
              "model_seed": 201,
              "loss": "mse_loss(model(input), target), target a constant copy of input"}
    first = [k for k, _ in model.named_parameters() if k.startswith("layers.0.")]
    return model, x, x.clone(), config, first


STEPS = 5

OPTIMIZERS = [
    # name, class, options, two groups (first lr, rest lr) or None, the case it must differ from
    ("sgd", torch.optim.SGD, {"lr": 0.1}, None, None),
    ("sgd_momentum", torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}, None, "sgd"),
    ("sgd_dampening", torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "dampening": 0.1}, None,
     "sgd_momentum"),
    ("sgd_nesterov", torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "nesterov": True}, None,
     "sgd_momentum"),
    ("sgd_weight_decay", torch.optim.SGD, {"lr": 0.1, "weight_decay": 0.01}, None, "sgd"),
    # (lr 0.01: at 0.1 gradient ascent on the encoder diverges to 1e12 within 5 steps)
    ("sgd_maximize", torch.optim.SGD,
     {"lr": 0.01, "momentum": 0.9, "weight_decay": 0.01, "maximize": True}, None, "sgd_momentum"),
    ("sgd_momentum_groups", torch.optim.SGD, {"lr": 0.01, "momentum": 0.9}, (0.1, 0.01),
     "sgd_momentum"),
    ("adam", torch.optim.Adam, {}, None, None),
    ("adam_weight_decay", torch.optim.Adam, {"lr": 0.01, "weight_decay": 0.1}, None, None),
    ("adam_amsgrad", torch.optim.Adam, {"lr": 0.01, "betas": (0.9, 0.9), "amsgrad": True}, None,
     "adam_amsgrad_off"),
    ("adam_maximize", torch.optim.Adam, {"lr": 0.01, "weight_decay": 0.01, "maximize": True},
     None, None),
    ("adam_groups", torch.optim.Adam, {"lr": 0.01}, (0.1, 0.01), None),
    ("adamw", torch.optim.AdamW, {}, None, "adam"),
    ("adamw_amsgrad", torch.optim.AdamW, {"lr": 0.01, "betas": (0.9, 0.9), "amsgrad": True},
     None, "adamw_amsgrad_off"),
    ("rmsprop", torch.optim.RMSprop, {}, None, None),
    ("rmsprop_centered", torch.optim.RMSprop, {"lr": 0.01, "centered": True}, None, "rmsprop"),
    ("rmsprop_momentum", torch.optim.RMSprop, {"lr": 0.01, "momentum": 0.9}, None, "rmsprop"),
    ("rmsprop_centered_momentum", torch.optim.RMSprop,
     {"lr": 0.005, "alpha": 0.9, "eps": 1e-6, "momentum": 0.5, "centered": True}, None,
     "rmsprop_centered"),
    ("rmsprop_weight_decay", torch.optim.RMSprop, {"lr": 0.01, "weight_decay": 0.1}, None,
     "rmsprop"),
    ("rmsprop_maximize", torch.optim.RMSprop,
     {"lr": 0.001, "momentum": 0.9, "weight_decay": 0.01, "maximize": True}, None,
     "rmsprop_momentum"),
    ("rmsprop_groups", torch.optim.RMSprop, {"lr": 0.01, "momentum": 0.5}, (0.02, 0.005),
     "rmsprop_momentum"),
]
# Twins that only exist to prove an option changed the numbers (not written).
TWINS = {"adam_amsgrad_off": (torch.optim.Adam, {"lr": 0.01, "betas": (0.9, 0.9)}),
         "adamw_amsgrad_off": (torch.optim.AdamW, {"lr": 0.01, "betas": (0.9, 0.9)})}


def run_optimizer(make_model, cls, options, groups):
    model, x, target, config, first = make_model()
    keys = [k for k, _ in model.named_parameters()]
    params = dict(model.named_parameters())
    if groups:
        rest = [k for k in keys if k not in first]
        param_groups = [{"params": [params[k] for k in first], "lr": groups[0]},
                        {"params": [params[k] for k in rest], "lr": groups[1]}]
        group_keys = [first, rest]
    else:
        param_groups = [{"params": [params[k] for k in keys]}]
        group_keys = [keys]
    opt = cls(param_groups, **options)
    tensors = {"input": x.clone(), "target": target.clone()}
    for k in keys:
        tensors["param." + k] = params[k].detach().clone()
    losses = []
    for step in range(1, STEPS + 1):
        opt.zero_grad()
        loss = F.mse_loss(model(x), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        for k in keys:
            tensors[f"step{step}.param.{k}"] = params[k].detach().clone()
        assert all(torch.isfinite(p).all() for p in model.parameters())
    tensors["losses"] = torch.tensor(losses, dtype=torch.float64)
    recorded = []
    for g, gk in zip(opt.param_groups, group_keys):
        entry = {"params": gk}
        for k, v in g.items():
            if k != "params":
                entry[k] = list(v) if isinstance(v, tuple) else v
        recorded.append(entry)
    config = dict(config)
    config.update({"optimizer": cls.__name__, "optimizer_options": options, "param_groups": recorded,
                   "steps": STEPS,
                   "step": "zero_grad(); loss = mse_loss(model(input), target); "
                           "loss.backward(); step()  (losses[i] is the loss before step i+1)"})
    return config, tensors


def optim_cases():
    for model_name, make_model in (("mlp", mlp_model), ("encoder", encoder_model)):
        finals = {}
        for name, (cls, options) in TWINS.items():
            _, t = run_optimizer(make_model, cls, options, None)
            finals[name] = t
        for name, cls, options, groups, differs_from in OPTIMIZERS:
            config, tensors = run_optimizer(make_model, cls, options, groups)
            finals[name] = tensors
            if differs_from:
                other = finals[differs_from]
                last = [k for k in tensors if k.startswith(f"step{STEPS}.")]
                diff = max((tensors[k] - other[k]).abs().max().item() for k in last)
                assert diff > 1e-6, (model_name, name, differs_from, diff)
            write_case(f"optim_{model_name}_{name}", "float64", config, tensors)


# ---- learning-rate schedules -----------------------------------------------------------------

SCHEDULE_STEPS = 30
BASE_LR = 0.1


def schedule_case(name, make, config):
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=BASE_LR)
    sched = make(opt)
    lrs = []
    for _ in range(SCHEDULE_STEPS):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    config = dict(config, optimizer="SGD", base_lr=BASE_LR, steps=SCHEDULE_STEPS,
                  loop="for each step: lrs.append(lr); optimizer.step(); scheduler.step()")
    write_case("lr_" + name, "float64", config, {"lrs": torch.tensor(lrs, dtype=torch.float64)})


def schedule_cases():
    lrs = torch.optim.lr_scheduler
    schedule_case("step", lambda o: lrs.StepLR(o, step_size=7, gamma=0.5),
                  {"scheduler": "StepLR", "options": {"step_size": 7, "gamma": 0.5}})
    schedule_case("cosine", lambda o: lrs.CosineAnnealingLR(o, T_max=10, eta_min=0.001),
                  {"scheduler": "CosineAnnealingLR", "options": {"T_max": 10, "eta_min": 0.001},
                   "note": "30 steps with T_max 10: PyTorch's recursive form rises again after T_max"})
    schedule_case("linear", lambda o: lrs.LinearLR(o, start_factor=0.1, end_factor=1.0,
                                                   total_iters=5),
                  {"scheduler": "LinearLR",
                   "options": {"start_factor": 0.1, "end_factor": 1.0, "total_iters": 5}})
    schedule_case("lambda", lambda o: lrs.LambdaLR(o, lambda e: 0.95 ** e),
                  {"scheduler": "LambdaLR", "options": {"lr_lambda": "lambda epoch: 0.95 ** epoch"}})

    def sequential(o):
        warm = lrs.LinearLR(o, start_factor=0.1, end_factor=1.0, total_iters=5)
        cos = lrs.CosineAnnealingLR(o, T_max=25)
        return lrs.SequentialLR(o, [warm, cos], milestones=[5])
    schedule_case("sequential", sequential,
                  {"scheduler": "SequentialLR",
                   "options": {"schedulers": [
                       {"scheduler": "LinearLR",
                        "options": {"start_factor": 0.1, "end_factor": 1.0, "total_iters": 5}},
                       {"scheduler": "CosineAnnealingLR", "options": {"T_max": 25, "eta_min": 0}}],
                       "milestones": [5]},
                   "note": "both schedulers are built on the same optimizer before SequentialLR"})


# ---- gradient clipping -----------------------------------------------------------------------

def clip_case(name, seed, fn, options):
    torch.manual_seed(seed)
    shapes = [(3, 4), (5,), (2, 3, 2)]
    params = [torch.randn(*s, dtype=torch.float64, requires_grad=True) for s in shapes]
    for p in params:
        p.grad = torch.randn_like(p)
    tensors = {f"grad.{i}": p.grad.clone() for i, p in enumerate(params)}
    result = fn(params, **options)
    for i, p in enumerate(params):
        tensors[f"clipped.{i}"] = p.grad.clone()
    config = {"function": fn.__name__, "options": dict(options), "seed": seed,
              "params": "3 parameters; grad.i before, clipped.i after the call"}
    if isinstance(options.get("norm_type"), float) and math.isinf(options["norm_type"]):
        config["options"]["norm_type"] = "inf"
    if result is not None:
        tensors["total_norm"] = result.detach().clone()
    write_case("clip_" + name, "float64", config, tensors)


def clip_cases():
    norm = torch.nn.utils.clip_grad_norm_
    clip_case("norm_l2", 300, norm, {"max_norm": 0.5, "norm_type": 2.0,
                                     "error_if_nonfinite": False})
    clip_case("norm_inf", 301, norm, {"max_norm": 0.5, "norm_type": float("inf"),
                                      "error_if_nonfinite": False})
    clip_case("norm_l2_noclip", 302, norm, {"max_norm": 100.0, "norm_type": 2.0,
                                            "error_if_nonfinite": False})
    clip_case("value", 303, torch.nn.utils.clip_grad_value_, {"clip_value": 0.1})


# ---- rotary position embeddings (transformers' Llama) -------------------------------------------
# Literal ports of modeling_rope_utils (_compute_default_rope_parameters, the linear scaling,
# _compute_llama3_parameters), LlamaRotaryEmbedding.forward, rotate_half and apply_rotary_pos_emb.

def rope_inv_freq(head_dim, theta, dtype, scaling=None):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).to(dtype) / head_dim))
    rope_type = (scaling or {}).get("rope_type", "default")
    if rope_type == "linear":
        return inv_freq / scaling["factor"]
    if rope_type == "llama3":
        factor = scaling["factor"]
        low_freq_factor = scaling["low_freq_factor"]
        high_freq_factor = scaling["high_freq_factor"]
        old_context_len = scaling["original_max_position_embeddings"]
        low_freq_wavelen = old_context_len / low_freq_factor
        high_freq_wavelen = old_context_len / high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
        smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
        smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
        is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
        return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)
    assert rope_type == "default", rope_type
    return inv_freq


def rope_cos_sin(inv_freq, positions):
    # LlamaRotaryEmbedding.forward for one sequence: (T, D) tables
    freqs = (inv_freq[:, None] @ positions[None, :].to(inv_freq.dtype)).transpose(0, 1)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_cases():
    scalings = {
        "linear": {"head_dim": 64, "rope_theta": 10000.0,
                   "rope_scaling": {"rope_type": "linear", "factor": 4.0}},
        "llama3": {"head_dim": 128, "rope_theta": 500000.0,  # Llama 3.1's
                   "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
    }
    for dtype_name, dtype in DTYPES.items():
        tensors = {name: rope_inv_freq(c["head_dim"], c["rope_theta"], dtype, c["rope_scaling"])
                   for name, c in scalings.items()}
        write_case("rope_scaling_" + dtype_name, dtype_name, scalings, tensors)

    # The op: x (B, H, T, D) with the tables of positions 0..T-1 (head_dim 8, theta 10000), and with
    # random (B, 1, T, D) tables whose halves differ (the backward must not assume cat(f, f)).
    for dtype_name, dtype in DTYPES.items():
        torch.manual_seed(400)
        B, H, T, D = 2, 3, 5, 8
        x = torch.randn(B, H, T, D, dtype=dtype, requires_grad=True)
        cos, sin = rope_cos_sin(rope_inv_freq(D, 10000.0, dtype), torch.arange(T, dtype=torch.int64))
        cos_b, sin_b = torch.randn(B, 1, T, D, dtype=dtype), torch.randn(B, 1, T, D, dtype=dtype)
        grad_output = torch.randn(B, H, T, D, dtype=dtype)
        tensors = {"input": x, "cos": cos, "sin": sin, "cos_b": cos_b, "sin_b": sin_b,
                   "grad_output": grad_output}
        for suffix, c, s in (("", cos, sin), ("_b", cos_b, sin_b)):
            y = x * c + rotate_half(x) * s
            (g,) = torch.autograd.grad(y, x, grad_output)
            tensors["output" + suffix], tensors["grad.input" + suffix] = y, g
        config = {"head_dim": D, "rope_theta": 10000.0, "positions": list(range(T)), "seed": 400,
                  "formula": "x * cos + rotate_half(x) * sin; _b: the random (B, 1, T, D) tables"}
        write_case("rotary_embedding_" + dtype_name, dtype_name, config, tensors)


# ---- grouped-query attention -----------------------------------------------------------------

def sdpa_reference(q, k, v, mask, is_causal, scale):
    """F.scaled_dot_product_attention(q, k, v, mask, 0.0, is_causal, scale, enable_gqa=True) as
    PyTorch's math path computes it: torch 1.13 has neither, so k and v are repeat_interleave'd
    along dim -3 (transformers' repeat_kv) and the attention is spelled out. mask: None, bool
    (True = may NOT attend, xgrad's convention) or float (added to the logits)."""
    group = q.shape[-3] // k.shape[-3]
    k = k.repeat_interleave(group, dim=-3)
    v = v.repeat_interleave(group, dim=-3)
    L, S = q.shape[-2], k.shape[-2]
    logits = q @ k.transpose(-2, -1) * (scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))
    if is_causal:
        logits = logits.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
    if mask is not None:
        logits = logits.masked_fill(mask, float("-inf")) if mask.dtype == torch.bool else logits + mask
    return torch.softmax(logits, dim=-1) @ v


def sdpa_gqa_cases():
    """sdpa_gqa_{float64,float32}: three calls, their tensors prefixed by the call's name."""
    torch.manual_seed(400)
    float_mask = torch.randn(2, 3)
    float_mask[1, 2] = float("-inf")
    calls = [  # name, q shape, k shape, v shape, mask, is_causal, scale; small: the files' total is capped
        ("causal", (1, 4, 3, 2), (1, 2, 3, 2), (1, 2, 3, 2), None, True, None),
        ("float_mask_mqa", (2, 3, 2, 2), (2, 1, 3, 2), (2, 1, 3, 1), float_mask, False, 0.3),
    ]
    values32 = {}
    for name, qs, ks, vs, mask, causal, scale in calls:
        values32[name] = {"q": torch.randn(*qs), "k": torch.randn(*ks), "v": torch.randn(*vs),
                          "grad_output": torch.randn(*qs[:-1], vs[-1])}
    for dtype_name, dtype in DTYPES.items():
        tensors, config = {}, {"seed": 400, "calls": {}}
        for name, qs, ks, vs, mask, causal, scale in calls:
            x = {key: t.to(dtype) for key, t in values32[name].items()}
            q, k, v = (x[key].clone().requires_grad_(True) for key in ("q", "k", "v"))
            m = None if mask is None else (mask if mask.dtype == torch.bool else mask.to(dtype))
            out = sdpa_reference(q, k, v, m, causal, scale)
            out.backward(x["grad_output"])
            for key in ("q", "k", "v", "grad_output"):
                tensors[f"{name}.{key}"] = x[key]
            if m is not None:
                tensors[f"{name}.attn_mask"] = m
            tensors[f"{name}.output"] = out.detach()
            for key, t in (("q", q), ("k", k), ("v", v)):
                tensors[f"{name}.grad.{key}"] = t.grad
            config["calls"][name] = {"dropout_p": 0.0, "is_causal": causal, "scale": scale, "enable_gqa": True,
                                     "attn_mask": None if m is None else ("bool, True = may not attend"
                                                                          if m.dtype == torch.bool else "float")}
        config["note"] = ("F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, scale, "
                          "enable_gqa=True) computed as softmax(q repeat_kv(k)^T scale + mask) repeat_kv(v), "
                          "repeat_kv = repeat_interleave along dim -3; grad.* = d(output . grad_output)/d*")
        write_case("sdpa_gqa_" + dtype_name, dtype_name, config, tensors)


# ---- the loader's own test -------------------------------------------------------------------

def loader_case():
    tensors = {
        "matrix": torch.tensor([[0.1, -2.5, 1.0 / 3.0], [1e-300, math.pi, -0.0]],
                               dtype=torch.float64),
        "special": torch.tensor([float("inf"), float("-inf"), float("nan"), 5e-324],
                                dtype=torch.float64),
        "scalar": torch.tensor(2.0 ** 0.5, dtype=torch.float64),
        "empty": torch.zeros(0, 3, dtype=torch.float64),
        "mask": torch.tensor([[True, False], [False, True]]),
        "index": torch.tensor([0, -1, 2 ** 40], dtype=torch.int64),
        "param.a": torch.tensor([1.0, 2.0], dtype=torch.float64),
        "param.b.weight": torch.tensor([[3.0], [4.0]], dtype=torch.float64),
    }
    write_case("loader_roundtrip", "float64",
               {"purpose": "the C++ loader's own test", "nested": {"list": [1, 2], "flag": True}},
               tensors)


def main():
    global OUT_DIR
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=OUT_DIR, help="output directory (default tests/fixtures)")
    args = parser.parse_args()
    OUT_DIR = os.path.abspath(args.out)
    os.makedirs(OUT_DIR, exist_ok=True)
    torch.set_default_dtype(torch.float32)

    loader_case()
    nn_cases()
    rms_norm_cases()
    silu_mul_cases()
    optim_cases()
    schedule_cases()
    clip_cases()
    rope_cases()
    sdpa_gqa_cases()
    notebook_check()

    total = sum(size for _, size, _ in WRITTEN)
    largest = max(WRITTEN, key=lambda w: w[1])
    print(f"wrote {len(WRITTEN)} files to {OUT_DIR}: {total / 1024:.0f} KiB in all, "
          f"largest {largest[0]} {largest[1] / 1024:.0f} KiB (torch {torch.__version__})")
    assert largest[1] < 200 * 1024 and total < 3.5 * 1024 * 1024


if __name__ == "__main__":
    sys.exit(main())
