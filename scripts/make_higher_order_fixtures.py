#!/usr/bin/python3
"""Writes xgrad's higher-order gradient fixtures (tests/fixtures/higher_order_*.json) from PyTorch.

Run with Debian's python3-torch (1.13):  /usr/bin/python3 scripts/make_higher_order_fixtures.py
The golden data of tests/nn/test_higher_order_golden.cpp, in the format of scripts/make_fixtures.py
(whose `encode` it uses; see tests/fixtures/README.md). Deterministic: every case seeds torch
itself, one thread. Each case is built in float32 under its seed and copied to float64, so that
both files of a case hold the same inputs and initial parameters and differ only in the precision
PyTorch computed in.

Cases (each as _float64 and _float32):
  higher_order_hvp      Hessian-vector product of a pre-norm TransformerEncoderLayer's MSE loss
  higher_order_wgan_gp  three AdamW steps of a WGAN-GP critic (gradient penalty, create_graph)
  higher_order_maml     one MAML step: inner SGD step with create_graph, outer gradient to the
                        initial weights

Every case is checked here before it is written: the Hessian-vector product and the MAML outer
gradient against central finite differences in float64, the WGAN-GP loss gradient against a
central difference along a random direction, and each float32 result against float64.
"""

import argparse
import copy
import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import encode, layer_options, perturb_  # noqa: E402  (same format and helpers)

torch.set_num_threads(1)

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")
DTYPES = {"float64": torch.float64, "float32": torch.float32}
# Recorded in every file (fixed, so that a rerun with --out gives the same bytes).
COMMAND = "/usr/bin/python3 scripts/make_higher_order_fixtures.py"

# Tolerances of the checks, as max |a - b| / max |b| over all entries of a result.
FD_REL = 1e-6       # float64 result against central finite differences in float64
FLOAT32_REL = 1e-4  # float32 result against the float64 one (same inputs)

WRITTEN = []


def write_case(name, dtype, config, tensors):
    """As make_fixtures.write_case, with the command that wrote the file in the head."""
    for key, t in tensors.items():
        assert isinstance(t, torch.Tensor), key
    head = {"case": name, "torch_version": torch.__version__, "command": COMMAND, "dtype": dtype,
            "config": config}
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
    WRITTEN.append((name, len(text)))


def rel_err(a, b):
    """max |a - b| / max |b| over lists of tensors (a, b matched by position), in float64."""
    a = torch.cat([t.detach().to(torch.float64).flatten() for t in a])
    b = torch.cat([t.detach().to(torch.float64).flatten() for t in b])
    return ((a - b).abs().max() / b.abs().max()).item()


def check(what, err, tol):
    print(f"  {what}: {err:.2e} (tolerance {tol:.0e})")
    assert err <= tol, (what, err, tol)


def float_copy(t, dtype):
    return t.detach().clone().to(dtype)


# ---- 1. Hessian-vector product of a transformer block's loss ---------------------------------

HVP_SEED = 400
HVP_LAYER = layer_options(8, 2, 16, "gelu", batch_first=True, norm_first=True)


def hvp_build():
    """(layer, input, target, v) in float32: the layer under the seed, then 0.1 randn added."""
    torch.manual_seed(HVP_SEED)
    layer = nn.TransformerEncoderLayer(**HVP_LAYER)
    perturb_(layer, 0.1)
    x = torch.randn(2, 3, 8)
    target = torch.randn(2, 3, 8)
    v = {k: torch.randn_like(p) for k, p in layer.named_parameters()}
    return layer, x, target, v


def hvp_eval(layer, x, target, v, dtype):
    """(loss, output, grads, hvp) with the layer's parameters as they are, in dtype."""
    params = [p for _, p in layer.named_parameters()]
    output = layer(x)
    loss = F.mse_loss(output, target)
    grads = torch.autograd.grad(loss, params, create_graph=True)
    gv = sum((g * v[k].to(dtype)).sum() for (k, _), g in zip(layer.named_parameters(), grads))
    hv = torch.autograd.grad(gv, params)
    return loss, output, [g.detach() for g in grads], list(hv)


def hvp_case():
    layer32, x32, target32, v32 = hvp_build()
    keys = [k for k, _ in layer32.named_parameters()]
    config = {"module": "TransformerEncoderLayer", "options": HVP_LAYER,
              "forward": {"src_mask": None, "src_key_padding_mask": None},
              "seed": HVP_SEED, "training": True,
              "init": "PyTorch's default init under torch.manual_seed(seed), then every parameter "
                      "+= 0.1 * randn; then input, target and v.<key> (in named_parameters order) "
                      "are drawn with randn",
              "loss": "mse_loss(output, target), reduction mean; target is a constant",
              "hvp": "g = autograd.grad(loss, params, create_graph=True); "
                     "hvp = autograd.grad(sum_k (g_k * v_k).sum(), params)  (= H v)",
              "check": f"float64 hvp against (g(theta + h v) - g(theta - h v)) / 2h, h = 1e-5, "
                       f"within {FD_REL} relative (max abs diff / max abs)"}
    results = {}
    print("higher_order_hvp")
    for dtype_name, dtype in DTYPES.items():
        layer = copy.deepcopy(layer32).to(dtype)
        x, target = float_copy(x32, dtype), float_copy(target32, dtype)
        state = {k: t.detach().clone() for k, t in layer.state_dict().items()}
        loss, output, grads, hv = hvp_eval(layer, x, target, v32, dtype)
        results[dtype_name] = (loss, grads, hv)

        if dtype == torch.float64:
            # Central difference of the gradient along v, and the symmetry of H: u.Hv = v.Hu.
            h = 1e-5
            params = [p for _, p in layer.named_parameters()]

            def grads_at(sign):
                with torch.no_grad():
                    for k, p in zip(keys, params):
                        p.copy_(state[k] + sign * h * v32[k].to(dtype))
                g = torch.autograd.grad(F.mse_loss(layer(x), target), params)
                return g
            plus, minus = grads_at(1.0), grads_at(-1.0)
            with torch.no_grad():
                for k, p in zip(keys, params):
                    p.copy_(state[k])
            fd = [(a - b) / (2 * h) for a, b in zip(plus, minus)]
            check("float64 hvp vs central difference of the gradient", rel_err(hv, fd), FD_REL)
            torch.manual_seed(HVP_SEED + 1)
            u = {k: torch.randn_like(p) for k, p in layer.named_parameters()}
            _, _, _, hu = hvp_eval(layer, x, target, u, dtype)
            uhv = sum((u[k] * t).sum() for k, t in zip(keys, hv)).item()
            vhu = sum((v32[k].to(dtype) * t).sum() for k, t in zip(keys, hu)).item()
            check("float64 symmetry u.Hv vs v.Hu", abs(uhv - vhu) / abs(vhu), FD_REL)

        tensors = {"input": x, "target": target}
        for k, t in state.items():
            tensors["param." + k] = t
        for k in keys:
            tensors["v." + k] = float_copy(v32[k], dtype)
        tensors["output"] = output.detach()
        tensors["loss"] = loss.detach()
        for k, g in zip(keys, grads):
            tensors["grad." + k] = g
        for k, t in zip(keys, hv):
            tensors["hvp." + k] = t
        write_case(f"higher_order_hvp_{dtype_name}", dtype_name, config, tensors)
    l32, g32, hv32 = results["float32"]
    l64, g64, hv64 = results["float64"]
    check("float32 gradient vs float64", rel_err(g32, g64), FLOAT32_REL)
    check("float32 hvp vs float64", rel_err(hv32, hv64), FLOAT32_REL)


# ---- 2. WGAN-GP critic -----------------------------------------------------------------------

WGAN_SEED = 410
WGAN_STEPS = 3
WGAN_LAMBDA = 10.0
WGAN_ADAMW = {"lr": 1e-3, "betas": (0.0, 0.9), "eps": 1e-8, "weight_decay": 0.01,
              "amsgrad": False}


def make_critic():
    return nn.Sequential(nn.Linear(4, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 1))


def wgan_loss(critic, real, fake, eps):
    """(loss, penalty, grad_x): the critic's WGAN-GP loss on one batch."""
    x_hat = (eps * real + (1 - eps) * fake).detach().requires_grad_(True)
    (grad_x,) = torch.autograd.grad(critic(x_hat).sum(), x_hat, create_graph=True)
    penalty = WGAN_LAMBDA * ((grad_x.norm(2, dim=1) - 1) ** 2).mean()
    loss = critic(fake).mean() - critic(real).mean() + penalty
    return loss, penalty, grad_x


def wgan_case():
    torch.manual_seed(WGAN_SEED)
    critic32 = make_critic()
    perturb_(critic32, 0.1)
    batches = [(torch.randn(8, 4) + 1.0, torch.randn(8, 4), torch.rand(8, 1))
               for _ in range(WGAN_STEPS)]
    keys = [k for k, _ in critic32.named_parameters()]
    config = {"model": "critic",
              "model_note": "Sequential(Linear(4, 16), LayerNorm(16), GELU(approximate='none'), "
                            "Linear(16, 1))",
              "seed": WGAN_SEED,
              "init": "PyTorch's default init under torch.manual_seed(seed), then every parameter "
                      "+= 0.1 * randn; then for each step k: real = randn(8, 4) + 1, "
                      "fake = randn(8, 4), eps = rand(8, 1)",
              "lambda": WGAN_LAMBDA,
              "x_hat": "eps * real + (1 - eps) * fake, detached, requires_grad",
              "penalty": "grad_x = autograd.grad(critic(x_hat).sum(), x_hat, create_graph=True); "
                         "penalty = lambda * ((grad_x.norm(2, dim=1) - 1) ** 2).mean()",
              "loss": "critic(fake).mean() - critic(real).mean() + penalty",
              "optimizer": "AdamW", "optimizer_options": dict(WGAN_ADAMW,
                                                              betas=list(WGAN_ADAMW["betas"])),
              "steps": WGAN_STEPS,
              "step": "zero_grad(); loss.backward(); step()  (step<k>.loss, penalty, grad_x "
                      "and grad.* are computed before step k's update, step<k>.param.* after it)",
              "check": "float64 step-1 gradient against a central difference of the loss along "
                       f"a random direction (h = 1e-5), within {FD_REL} relative"}
    results = {}
    print("higher_order_wgan_gp")
    for dtype_name, dtype in DTYPES.items():
        critic = copy.deepcopy(critic32).to(dtype)
        params = [p for _, p in critic.named_parameters()]
        opt = torch.optim.AdamW(params, **WGAN_ADAMW)
        tensors = {}
        for k, p in critic.named_parameters():
            tensors["param." + k] = p.detach().clone()
        grads_all = []
        for step, (real32, fake32, eps32) in enumerate(batches, 1):
            real, fake, eps = (float_copy(t, dtype) for t in (real32, fake32, eps32))
            opt.zero_grad()
            loss, penalty, grad_x = wgan_loss(critic, real, fake, eps)
            loss.backward()
            grads = [p.grad.detach().clone() for p in params]
            grads_all += grads
            if step == 1 and dtype == torch.float64:
                # Directional central difference of the loss: checks the penalty's double backward.
                torch.manual_seed(WGAN_SEED + 1)
                d = [torch.randn_like(p) for p in params]
                h = 1e-5
                start = [p.detach().clone() for p in params]

                def loss_at(sign):
                    with torch.no_grad():
                        for p, s, di in zip(params, start, d):
                            p.copy_(s + sign * h * di)
                    return wgan_loss(critic, real, fake, eps)[0].item()
                fd = (loss_at(1.0) - loss_at(-1.0)) / (2 * h)
                with torch.no_grad():
                    for p, s in zip(params, start):
                        p.copy_(s)
                gd = sum((g * di).sum() for g, di in zip(grads, d)).item()
                check("float64 step-1 gradient . d vs central difference", abs(gd - fd) / abs(fd),
                      FD_REL)
                # The penalty's own gradient must matter (else the case tests no double backward).
                # (allow_unused: the last bias does not enter the input gradient.)
                pg = torch.autograd.grad(wgan_loss(critic, real, fake, eps)[1], params,
                                         allow_unused=True)
                share = math.sqrt(sum((g ** 2).sum().item() for g in pg if g is not None)) / \
                    math.sqrt(sum((g ** 2).sum().item() for g in grads))
                print(f"  float64 step-1 |grad penalty| / |grad loss| = {share:.2f}")
                assert share > 0.1, share
            opt.step()
            tensors[f"step{step}.real"] = real
            tensors[f"step{step}.fake"] = fake
            tensors[f"step{step}.eps"] = eps
            tensors[f"step{step}.loss"] = loss.detach()
            tensors[f"step{step}.penalty"] = penalty.detach()
            tensors[f"step{step}.grad_x"] = grad_x.detach()
            for k, g in zip(keys, grads):
                tensors[f"step{step}.grad.{k}"] = g
            for k, p in zip(keys, params):
                tensors[f"step{step}.param.{k}"] = p.detach().clone()
            assert all(torch.isfinite(p).all() for p in params)
        results[dtype_name] = (grads_all, [p.detach().clone() for p in params])
        write_case(f"higher_order_wgan_gp_{dtype_name}", dtype_name, config, tensors)
    check("float32 gradients (all steps) vs float64",
          rel_err(results["float32"][0], results["float64"][0]), FLOAT32_REL)
    check("float32 final parameters vs float64",
          rel_err(results["float32"][1], results["float64"][1]), FLOAT32_REL)


# ---- 3. MAML -----------------------------------------------------------------------------------

MAML_SEED = 420
MAML_INNER_LR = 0.1
MAML_KEYS = ["0.weight", "0.bias", "2.weight", "2.bias"]


def maml_forward(params, x):
    """Sequential(Linear(3, 8), GELU, Linear(8, 1)), functional; params in MAML_KEYS order."""
    w1, b1, w2, b2 = params
    return F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)


def maml_step(params, xs, ys, xq, yq, create_graph=True):
    """(inner_loss, inner_grads, adapted, outer_loss) for params that require grad."""
    inner_loss = F.mse_loss(maml_forward(params, xs), ys)
    inner_grads = torch.autograd.grad(inner_loss, params, create_graph=create_graph)
    adapted = [p - MAML_INNER_LR * g for p, g in zip(params, inner_grads)]
    outer_loss = F.mse_loss(maml_forward(adapted, xq), yq)
    return inner_loss, inner_grads, adapted, outer_loss


def maml_case():
    torch.manual_seed(MAML_SEED)
    model = nn.Sequential(nn.Linear(3, 8), nn.GELU(), nn.Linear(8, 1))
    assert [k for k, _ in model.named_parameters()] == MAML_KEYS
    init32 = [p.detach().clone() for p in model.parameters()]
    data32 = {"support_x": torch.randn(6, 3), "support_y": torch.randn(6, 1),
              "query_x": torch.randn(6, 3), "query_y": torch.randn(6, 1)}
    config = {"model": "Sequential(Linear(3, 8), GELU(approximate='none'), Linear(8, 1))",
              "seed": MAML_SEED,
              "init": "PyTorch's default init under torch.manual_seed(seed); then support_x, "
                      "support_y, query_x, query_y drawn with randn in that order",
              "inner_lr": MAML_INNER_LR, "inner_steps": 1,
              "forward": "F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2) with "
                         "(w1, b1, w2, b2) = param.{0.weight, 0.bias, 2.weight, 2.bias}",
              "inner": "inner_loss = mse_loss(f(support_x; theta), support_y); inner_grad = "
                       "autograd.grad(inner_loss, theta, create_graph=True); "
                       "adapted = theta - inner_lr * inner_grad",
              "outer": "outer_loss = mse_loss(f(query_x; adapted), query_y); "
                       "outer_grad = autograd.grad(outer_loss, theta)",
              "check": "float64 outer_grad against central differences of outer_loss(theta) "
                       f"(inner step included) per entry, h = 1e-5, within {FD_REL} relative"}
    results = {}
    print("higher_order_maml")
    for dtype_name, dtype in DTYPES.items():
        params = [float_copy(p, dtype).requires_grad_(True) for p in init32]
        data = {k: float_copy(t, dtype) for k, t in data32.items()}
        xs, ys, xq, yq = data["support_x"], data["support_y"], data["query_x"], data["query_y"]
        inner_loss, inner_grads, adapted, outer_loss = maml_step(params, xs, ys, xq, yq)
        outer_grads = torch.autograd.grad(outer_loss, params)
        results[dtype_name] = list(outer_grads)

        if dtype == torch.float64:
            h = 1e-5

            def outer_at(theta):
                theta = [t.detach().requires_grad_(True) for t in theta]
                return maml_step(theta, xs, ys, xq, yq, create_graph=False)[3].item()
            fd = []
            for i, p in enumerate(params):
                g = torch.zeros_like(p)
                for j in range(p.numel()):
                    theta_p = [q.detach().clone() for q in params]
                    theta_m = [q.detach().clone() for q in params]
                    theta_p[i].view(-1)[j] += h
                    theta_m[i].view(-1)[j] -= h
                    g.view(-1)[j] = (outer_at(theta_p) - outer_at(theta_m)) / (2 * h)
                fd.append(g)
            check("float64 outer gradient vs central differences", rel_err(outer_grads, fd),
                  FD_REL)
            # First-order MAML (no second derivative) must differ, else the case tests nothing.
            first = [a.detach().requires_grad_(True) for a in adapted]
            fo = torch.autograd.grad(F.mse_loss(maml_forward(first, xq), yq), first)
            diff = rel_err(fo, outer_grads)
            print(f"  float64 first-order MAML gradient differs by {diff:.2e} relative")
            assert diff > 1e-3, diff

        tensors = dict(data)
        for k, p in zip(MAML_KEYS, params):
            tensors["param." + k] = p.detach().clone()
        tensors["inner_loss"] = inner_loss.detach()
        for k, g in zip(MAML_KEYS, inner_grads):
            tensors["inner_grad." + k] = g.detach()
        for k, a in zip(MAML_KEYS, adapted):
            tensors["adapted." + k] = a.detach()
        tensors["outer_loss"] = outer_loss.detach()
        for k, g in zip(MAML_KEYS, outer_grads):
            tensors["outer_grad." + k] = g
        write_case(f"higher_order_maml_{dtype_name}", dtype_name, config, tensors)
    check("float32 outer gradient vs float64", rel_err(results["float32"], results["float64"]),
          FLOAT32_REL)


def main():
    global OUT_DIR
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=OUT_DIR, help="output directory (default tests/fixtures)")
    args = parser.parse_args()
    OUT_DIR = os.path.abspath(args.out)
    os.makedirs(OUT_DIR, exist_ok=True)
    torch.set_default_dtype(torch.float32)

    hvp_case()
    wgan_case()
    maml_case()

    total = sum(size for _, size in WRITTEN)
    largest = max(WRITTEN, key=lambda w: w[1])
    print(f"wrote {len(WRITTEN)} files to {OUT_DIR}: {total / 1024:.0f} KiB in all, "
          f"largest {largest[0]} {largest[1] / 1024:.0f} KiB (torch {torch.__version__})")
    assert largest[1] < 200 * 1024


if __name__ == "__main__":
    sys.exit(main())
