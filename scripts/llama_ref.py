"""llama_ref.py: a small, literal port of the forward pass of Hugging Face transformers'
LlamaForCausalLM / Qwen2ForCausalLM / MistralForCausalLM (src/transformers/models/llama/modeling_llama.py,
models/qwen2/modular_qwen2.py, models/mistral/modeling_mistral.py, modeling_rope_utils.py, the sliding
window causal mask of masking_utils.py; eager attention) and of PEFT's LoRA Linear
(src/peft/tuners/lora/layer.py, Linear.forward / get_delta_weight), plus a plain safetensors
reader/writer. PyTorch >= 1.13 and numpy only; no transformers, peft or safetensors needed.

Two numeric modes (argument `exact`):
  exact=False  "hf-float32": what transformers computes for a float32 model on CPU with
               attn_implementation="eager": RMSNorm statistics in float32, RoPE inv_freq/cos/sin in
               float32 (inv_freq from an int64 arange cast to float32, base ** (i/dim)), softmax in
               float32, LoRA added as result + B(A(x)) * scaling.
  exact=True   "float64": the same formulas evaluated entirely in float64 (weights upcast exactly from
               their stored dtype), including inv_freq, cos/sin, RMSNorm and softmax. transformers itself
               would keep RMSNorm/RoPE/softmax in float32 even for a float64 model; this mode is the
               mathematical reference, not a transformers run.
"""
import json
import math
import struct

import numpy as np
import torch
import torch.nn.functional as F

# ----------------------------------------------------------------------------------------------
# safetensors (https://github.com/huggingface/safetensors format: u64 LE header size, JSON header,
# raw little-endian data; data_offsets relative to the end of the header)

_ST_DTYPES = {"F64": (np.float64, 8), "F32": (np.float32, 4), "F16": (np.float16, 2),
              "BF16": (np.uint16, 2), "I64": (np.int64, 8)}


def f32_to_bf16_bits(a):
    """float32 -> bfloat16 bit patterns (uint16), round to nearest, ties to even (finite input)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return r.astype(np.uint16)


def bf16_bits_to_f32(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def round_to_dtype(a, st_dtype):
    """The float32 values that a tensor stored as st_dtype holds once read back (exact upcast)."""
    a = np.asarray(a, dtype=np.float32)
    if st_dtype == "F32":
        return a.copy()
    if st_dtype == "BF16":
        return bf16_bits_to_f32(f32_to_bf16_bits(a))
    if st_dtype == "F16":
        h = a.astype(np.float16)
        assert np.all(np.isfinite(h)), "value out of float16 range"
        return h.astype(np.float32)
    raise ValueError(st_dtype)


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: (st_dtype, float32 numpy array)}; written in name order, header keys in the same
    order after __metadata__; header padded with spaces to a multiple of 8 bytes (as safetensors does)."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    blobs, off = [], 0
    for name in sorted(tensors):
        st, arr = tensors[name]
        arr = np.asarray(arr)
        if st == "BF16":
            raw = f32_to_bf16_bits(arr).astype("<u2").tobytes()
        elif st == "F16":
            raw = np.asarray(arr, dtype=np.float32).astype("<f2").tobytes()
        elif st == "F32":
            raw = np.asarray(arr, dtype="<f4").tobytes()
        elif st == "F64":
            raw = np.asarray(arr, dtype="<f8").tobytes()
        else:
            raise ValueError(st)
        header[name] = {"dtype": st, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """-> ({name: float32 numpy array}, {name: st_dtype}, metadata)."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", None)
    base = 8 + n
    out, dts = {}, {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        raw = data[base + b:base + e]
        st = info["dtype"]
        if st == "BF16":
            a = bf16_bits_to_f32(np.frombuffer(raw, dtype="<u2"))
        elif st == "F16":
            a = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif st == "F32":
            a = np.frombuffer(raw, dtype="<f4").astype(np.float32)
        elif st == "F64":
            a = np.frombuffer(raw, dtype="<f8").astype(np.float64)
        else:
            raise ValueError(st)
        out[name] = a.reshape(info["shape"])
        dts[name] = st
    return out, dts, meta


# ----------------------------------------------------------------------------------------------
# config.json -> the fields the forward pass reads (transformers 4.x keys and 5.x rope_parameters)

class Cfg:
    def __init__(self, d):
        self.d = d
        self.model_type = d.get("model_type", "llama")
        self.vocab_size = d["vocab_size"]
        self.hidden_size = d["hidden_size"]
        self.intermediate_size = d["intermediate_size"]
        self.num_hidden_layers = d["num_hidden_layers"]
        self.num_attention_heads = d["num_attention_heads"]
        self.num_key_value_heads = d.get("num_key_value_heads") or self.num_attention_heads
        # LlamaAttention: getattr(config, "head_dim", None) or hidden_size // num_attention_heads
        self.head_dim = d.get("head_dim") or self.hidden_size // self.num_attention_heads
        self.rms_norm_eps = d.get("rms_norm_eps", 1e-6)
        self.hidden_act = d.get("hidden_act", "silu")
        assert self.hidden_act == "silu"
        self.tie_word_embeddings = d.get("tie_word_embeddings", False)
        # The attention window of each layer (None: full causal attention). MistralConfig: sliding_window
        # (default 4096) on every layer; Qwen2Config: sliding_window (default 4096) on layers
        # >= max_window_layers (default 28) when use_sliding_window (default False), or on the layers
        # layer_types names "sliding_attention" (5.x).
        self.layer_windows = [None] * self.num_hidden_layers
        if self.model_type == "mistral":
            self.layer_windows = [d.get("sliding_window", 4096)] * self.num_hidden_layers
        if self.model_type == "qwen2" and d.get("use_sliding_window", False):
            types = d.get("layer_types") or [
                "sliding_attention" if i >= d.get("max_window_layers", 28) else "full_attention"
                for i in range(self.num_hidden_layers)]
            self.layer_windows = [d.get("sliding_window", 4096) if t == "sliding_attention" else None for t in types]
        if self.model_type == "qwen2":  # Qwen2Attention: q/k/v bias=True, o_proj bias=False; MLP no bias
            self.qkv_bias, self.o_bias, self.mlp_bias = True, False, False
        else:
            self.qkv_bias = self.o_bias = bool(d.get("attention_bias", False))
            self.mlp_bias = bool(d.get("mlp_bias", False))
        # RoPE: 4.x writes rope_theta + rope_scaling ({"rope_type"|"type": ...}); 5.x writes
        # rope_parameters {"rope_theta": ..., "rope_type": ..., ...}
        rp = d.get("rope_parameters")
        if rp is not None:
            self.rope_theta = rp["rope_theta"]
            self.rope = dict(rp)
        else:
            self.rope_theta = d.get("rope_theta", 10000.0)
            self.rope = dict(d.get("rope_scaling") or {})
        self.rope_type = self.rope.get("rope_type", self.rope.get("type", "default"))
        self.partial_rotary_factor = self.rope.get("partial_rotary_factor", d.get("partial_rotary_factor", 1.0))


# ----------------------------------------------------------------------------------------------
# RoPE (modeling_rope_utils.py: _compute_default_rope_parameters, _compute_linear_scaling_rope_parameters,
# _compute_llama3_parameters; LlamaRotaryEmbedding.forward; rotate_half; apply_rotary_pos_emb)

def rope_inv_freq(cfg, dtype):
    base = cfg.rope_theta
    dim = int(cfg.head_dim * cfg.partial_rotary_factor)
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=dtype) / dim))
    t = cfg.rope_type
    if t == "default":
        return inv_freq
    if t == "linear":
        return inv_freq / cfg.rope["factor"]
    if t == "llama3":
        factor = cfg.rope["factor"]
        low_freq_factor = cfg.rope["low_freq_factor"]
        high_freq_factor = cfg.rope["high_freq_factor"]
        old_context_len = cfg.rope["original_max_position_embeddings"]
        low_freq_wavelen = old_context_len / low_freq_factor
        high_freq_wavelen = old_context_len / high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
        smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
        smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
        is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
        return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)
    raise NotImplementedError("rope_type " + t)


def rope_cos_sin(inv_freq, position_ids, dtype):
    # inv_freq[None, :, None] @ position_ids[:, None, :] (a K=1 matmul: plain products), cat(freqs, freqs)
    inv = inv_freq[None, :, None].to(dtype).expand(position_ids.shape[0], -1, 1)
    pos = position_ids[:, None, :].to(dtype)
    freqs = (inv @ pos).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * 1.0, emb.sin() * 1.0  # attention_scaling is 1.0 for default/linear/llama3


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    cos = cos.unsqueeze(1)
    sin = sin.unsqueeze(1)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def repeat_kv(h, n_rep):
    b, nkv, s, d = h.shape
    if n_rep == 1:
        return h
    return h[:, :, None, :, :].expand(b, nkv, n_rep, s, d).reshape(b, nkv * n_rep, s, d)


# ----------------------------------------------------------------------------------------------
# the model

class LoRA:
    """PEFT LoRA on nn.Linear targets: y = W x + b + (B (A dropout(x))) * scaling, scaling = alpha / r
    (alpha / sqrt(r) with use_rslora). A: (r, in_features), B: (out_features, r), no bias (bias="none")."""

    def __init__(self, adapter_config, weights):
        self.r = adapter_config["r"]
        self.alpha = adapter_config["lora_alpha"]
        self.scaling = self.alpha / math.sqrt(self.r) if adapter_config.get("use_rslora") else self.alpha / self.r
        assert not adapter_config.get("fan_in_fan_out", False)
        assert adapter_config.get("bias", "none") == "none"
        self.w = {}  # module path (e.g. "model.layers.0.self_attn.q_proj") -> {"A": arr, "B": arr}
        for k, v in weights.items():
            assert k.startswith("base_model.model.") and k.endswith((".lora_A.weight", ".lora_B.weight")), k
            mod = k[len("base_model.model."):].rsplit(".lora_", 1)[0]
            self.w.setdefault(mod, {})["A" if ".lora_A." in k else "B"] = v


class Model:
    def __init__(self, cfg, weights, exact, lora=None, requires_grad_lora=False):
        """weights: {name: float32 numpy array} (already rounded to their stored dtype)."""
        self.cfg, self.exact = cfg, exact
        self.dtype = torch.float64 if exact else torch.float32
        self.P = {k: torch.tensor(np.asarray(v, dtype=np.float64 if exact else np.float32)) for k, v in weights.items()}
        self.inv_freq = rope_inv_freq(cfg, self.dtype)
        self.lora = {}
        if lora is not None:
            for mod, ab in lora.w.items():
                A = torch.tensor(np.asarray(ab["A"], dtype=np.float64 if exact else np.float32), requires_grad=requires_grad_lora)
                B = torch.tensor(np.asarray(ab["B"], dtype=np.float64 if exact else np.float32), requires_grad=requires_grad_lora)
                self.lora[mod] = (A, B, lora.scaling)

    def linear(self, x, mod, bias):
        y = F.linear(x, self.P[mod + ".weight"], self.P[mod + ".bias"] if bias else None)
        if mod in self.lora:  # peft/tuners/lora/layer.py Linear.forward (lora_dropout p=0 / eval: identity)
            A, B, s = self.lora[mod]
            y = y + F.linear(F.linear(x, A), B) * s
        return y

    def rmsnorm(self, x, w):
        # LlamaRMSNorm: statistics in float32, then weight * hidden.to(input_dtype)
        input_dtype = x.dtype
        h = x if self.exact else x.to(torch.float32)
        variance = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(variance + self.cfg.rms_norm_eps)
        return w * h.to(input_dtype)

    def attention(self, x, p, cos, sin, mask):
        c = self.cfg
        b, t, _ = x.shape
        hd = c.head_dim
        q = self.linear(x, p + "q_proj", c.qkv_bias).view(b, t, -1, hd).transpose(1, 2)
        k = self.linear(x, p + "k_proj", c.qkv_bias).view(b, t, -1, hd).transpose(1, 2)
        v = self.linear(x, p + "v_proj", c.qkv_bias).view(b, t, -1, hd).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        n_rep = c.num_attention_heads // c.num_key_value_heads
        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
        scaling = hd ** -0.5
        w = torch.matmul(q, k.transpose(2, 3)) * scaling
        w = w + mask
        w = F.softmax(w, dim=-1, dtype=self.dtype).to(q.dtype)
        o = torch.matmul(w, v).transpose(1, 2).contiguous().reshape(b, t, -1)
        return self.linear(o, p + "o_proj", c.o_bias)

    def mlp(self, x, p):
        c = self.cfg
        g = self.linear(x, p + "gate_proj", c.mlp_bias)
        u = self.linear(x, p + "up_proj", c.mlp_bias)
        return self.linear(F.silu(g) * u, p + "down_proj", c.mlp_bias)

    def layer(self, h, i, cos, sin, mask):
        p = "model.layers.%d." % i
        r = h
        h = self.rmsnorm(h, self.P[p + "input_layernorm.weight"])
        h = r + self.attention(h, p + "self_attn.", cos, sin, mask)
        r = h
        h = self.rmsnorm(h, self.P[p + "post_attention_layernorm.weight"])
        return r + self.mlp(h, p + "mlp.")

    def forward(self, input_ids, checkpoint_layers=False):
        """input_ids: LongTensor (B, T) without padding -> logits (B, T, V) in the model dtype."""
        c = self.cfg
        b, t = input_ids.shape
        h = F.embedding(input_ids, self.P["model.embed_tokens.weight"])
        position_ids = torch.arange(t)[None, :].expand(b, t)
        cos, sin = rope_cos_sin(self.inv_freq, position_ids, self.dtype)
        mn = torch.finfo(self.dtype).min
        causal = torch.triu(torch.full((t, t), mn, dtype=self.dtype), diagonal=1)[None, None]
        for i in range(c.num_hidden_layers):
            mask = causal
            w = c.layer_windows[i]
            if w is not None:  # masking_utils.sliding_window_overlay: key k is seen by query q iff k > q - w
                mask = causal + torch.tril(torch.full((t, t), mn, dtype=self.dtype), diagonal=-w)[None, None]
                mask = mask.clamp(min=mn)
            if checkpoint_layers:
                import torch.utils.checkpoint as ckpt
                h = ckpt.checkpoint(self.layer, h, i, cos, sin, mask, use_reentrant=False)
            else:
                h = self.layer(h, i, cos, sin, mask)
        h = self.rmsnorm(h, self.P["model.norm.weight"])
        W = self.P["model.embed_tokens.weight"] if c.tie_word_embeddings else self.P["lm_head.weight"]
        return F.linear(h, W)

    def loss(self, input_ids, labels, checkpoint_layers=False):
        """ForCausalLMLoss: logits.float(), labels padded with -100 and shifted left by one, cross entropy
        with ignore_index=-100, mean over the non-ignored targets."""
        logits = self.forward(input_ids, checkpoint_layers)
        if not self.exact:
            logits = logits.float()
        lab = F.pad(labels, (0, 1), value=-100)[..., 1:].contiguous()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), lab.reshape(-1), ignore_index=-100, reduction="mean")

    @torch.no_grad()
    def greedy(self, prompt, n):
        """argmax decoding of n new tokens (full recompute each step, no EOS stop); also returns the
        smallest top1-top2 logit gap seen, so a checker knows how close to a tie the choices were."""
        ids = list(prompt)
        margin = float("inf")
        for _ in range(n):
            logits = self.forward(torch.tensor([ids]))[0, -1]
            top = torch.topk(logits, 2).values
            margin = min(margin, float(top[0] - top[1]))
            ids.append(int(torch.argmax(logits)))
        return ids[len(prompt):], margin


# ----------------------------------------------------------------------------------------------
# helpers for the generators

def f32_list(a):
    """float32 values as JSON numbers: the shortest decimal that reads back to the same float32."""
    a = np.asarray(a, dtype=np.float32)
    if a.ndim == 0:
        return float(repr(a[()]))
    return [f32_list(x) for x in a]


def f64_list(a):
    a = np.asarray(a, dtype=np.float64)
    return a.tolist()


def llama4x_config_json(fields, transformers_version):
    """config.json as transformers 4.4x-4.5x save_pretrained writes it: to_diff_dict() (class attributes
    always, base PretrainedConfig attributes only where they differ), json.dumps(indent=2, sort_keys=True)."""
    return json.dumps(dict(fields, transformers_version=transformers_version), indent=2, sort_keys=True) + "\n"


def weight_shapes(cfg):
    """(name, shape, kind) in a fixed order, HF names and nn.Linear (out_features, in_features) shapes."""
    c = cfg
    H, I, V, hd = c.hidden_size, c.intermediate_size, c.vocab_size, c.head_dim
    nq, nkv = c.num_attention_heads * hd, c.num_key_value_heads * hd
    out = [("model.embed_tokens.weight", (V, H), "embed")]
    for i in range(c.num_hidden_layers):
        p = "model.layers.%d." % i
        out.append((p + "input_layernorm.weight", (H,), "norm"))
        for m, shp in (("q_proj", (nq, H)), ("k_proj", (nkv, H)), ("v_proj", (nkv, H)), ("o_proj", (H, nq))):
            out.append((p + "self_attn.%s.weight" % m, shp, m))
            if (m != "o_proj" and c.qkv_bias) or (m == "o_proj" and c.o_bias):
                out.append((p + "self_attn.%s.bias" % m, (shp[0],), "bias"))
        out.append((p + "post_attention_layernorm.weight", (H,), "norm"))
        for m, shp in (("gate_proj", (I, H)), ("up_proj", (I, H)), ("down_proj", (H, I))):
            out.append((p + "mlp.%s.weight" % m, shp, m))
            if c.mlp_bias:
                out.append((p + "mlp.%s.bias" % m, (shp[0],), "bias"))
    out.append(("model.norm.weight", (H,), "norm"))
    if not c.tie_word_embeddings:
        out.append(("lm_head.weight", (V, H), "lm_head"))
    return out


def random_weights(cfg, seed, qk_gain=2.0, lm_std=None, tied_scale=None):
    """Deterministic weights from numpy's legacy RandomState (a frozen stream): embeddings N(0,1), linear
    weights N(0, gain^2/in_features), biases N(0, 0.1^2), norm weights 1 + N(0, 0.1^2) (not 1, so a
    swapped norm shows), lm_head N(0, lm_std^2). float32."""
    rs = np.random.RandomState(seed)
    H = cfg.hidden_size
    lm_std = lm_std if lm_std is not None else 3.0 / math.sqrt(H)
    w = {}
    for name, shp, kind in weight_shapes(cfg):
        z = rs.standard_normal(shp)
        if kind == "embed":
            a = z * (tied_scale if (cfg.tie_word_embeddings and tied_scale) else 1.0)
        elif kind == "norm":
            a = 1.0 + 0.1 * z
        elif kind == "bias":
            a = 0.1 * z
        elif kind == "lm_head":
            a = lm_std * z
        else:
            g = qk_gain if kind in ("q_proj", "k_proj") else 1.0
            a = z * (g / math.sqrt(shp[1]))
        w[name] = a.astype(np.float32)
    return w


def random_lora(cfg, seed, r, targets, b_std=0.2):
    """PEFT key names and shapes; A drawn like PEFT's default init (kaiming_uniform_(a=sqrt(5)) on an
    (r, in) weight = U(-1/sqrt(in), 1/sqrt(in))), B ~ N(0, b_std^2) instead of PEFT's zeros, as after
    some training, so that the adapter changes the logits."""
    rs = np.random.RandomState(seed)
    shapes = {n: s for n, s, _ in weight_shapes(cfg)}
    w = {}
    for i in range(cfg.num_hidden_layers):
        for m in targets:
            sub = "self_attn" if m in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
            mod = "model.layers.%d.%s.%s" % (i, sub, m)
            out_f, in_f = shapes[mod + ".weight"]
            bound = 1.0 / math.sqrt(in_f)
            w["base_model.model." + mod + ".lora_A.weight"] = rs.uniform(-bound, bound, (r, in_f)).astype(np.float32)
            w["base_model.model." + mod + ".lora_B.weight"] = (b_std * rs.standard_normal((out_f, r))).astype(np.float32)
    return w


def peft_config_json(fields):
    """adapter_config.json as PEFT's PeftConfigMixin.save_pretrained writes it (json.dumps(indent=2,
    sort_keys=True), no trailing newline)."""
    return json.dumps(fields, indent=2, sort_keys=True)


# LoraConfig fields (asdict, runtime_config popped) of peft 0.20.1.dev0 (huggingface/peft main,
# src/peft/tuners/lora/config.py + src/peft/config.py), with their defaults
PEFT_LORA_DEFAULTS = {
    "alora_invocation_tokens": None, "alpha_pattern": {}, "arrow_config": None, "auto_mapping": None,
    "base_model_name_or_path": None, "bias": "none", "corda_config": None, "ensure_weight_tying": False,
    "eva_config": None, "exclude_modules": None, "fan_in_fan_out": False, "inference_mode": True,
    "init_lora_weights": True, "kasa_config": None, "layer_replication": None, "layers_pattern": None,
    "layers_to_transform": None, "loftq_config": {}, "lora_alpha": 8, "lora_bias": False, "lora_dropout": 0.0,
    "lora_ga_config": None, "megatron_config": None, "megatron_core": "megatron.core", "modules_to_save": None,
    "monteclora_config": None, "peft_type": "LORA", "peft_version": "0.20.1.dev0", "qalora_group_size": 16,
    "r": 8, "rank_pattern": {}, "revision": None, "target_modules": None, "target_parameters": None,
    "task_type": "CAUSAL_LM", "trainable_token_indices": None, "use_bdlora": None, "use_dora": False,
    "use_qalora": False, "use_rslora": False, "velora_config": None,
}
