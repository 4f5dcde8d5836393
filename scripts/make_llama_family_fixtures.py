#!/usr/bin/python3
"""Writes the tiny Qwen2 and Mistral folders of tests/fixtures (hf-qwen2-tiny, hf-mistral-tiny), each with
its reference numbers, and a half-precision copy of each (hf-qwen2-tiny/bf16 in transformers 5.x's keys,
hf-mistral-tiny/f16 in 4.x's) with the numbers of its rounded weights.

    /usr/bin/python3 scripts/make_llama_family_fixtures.py [OUT]   # OUT: default tests/fixtures

PyTorch >= 1.13 and numpy; one thread; a rerun writes identical bytes. The forward pass is llama_ref.py
(beside this script), a literal port of transformers' Llama/Qwen2/Mistral modeling code; the folders are
written by hand in the formats transformers' save_pretrained writes (no transformers needed)."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from llama_ref import (Cfg, Model, f32_list, f64_list, llama4x_config_json, random_weights,  # noqa: E402
                       read_safetensors, round_to_dtype, write_safetensors)

torch.set_num_threads(1)
OUT = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(HERE, "..", "tests", "fixtures")
N_NEW = 30

# Qwen2.5's layout, shrunk: q/k/v biases, tied embeddings, no head_dim key (hidden / heads), a
# sliding_window that use_sliding_window false turns off, ids beyond the tokenizer's ordinary ones.
QWEN2 = {
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 126,
    "eos_token_id": 127,
    "hidden_act": "silu",
    "hidden_size": 32,
    "initializer_range": 0.02,
    "intermediate_size": 64,
    "max_position_embeddings": 128,
    "max_window_layers": 2,
    "model_type": "qwen2",
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "sliding_window": 32768,
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 128,
}
QWEN2_GENERATION = {"bos_token_id": 126, "do_sample": True, "eos_token_id": [127, 125], "pad_token_id": 125,
                    "repetition_penalty": 1.05, "temperature": 0.7, "top_k": 20, "top_p": 0.8,
                    "transformers_version": "4.46.3"}
# Mistral's layout, shrunk: head_dim 16 with hidden 32 and 4 heads (o_proj takes 64), untied head, a
# sliding_window (48) longer than every input here (at most 6 + 30 = 36 tokens): never reached.
MISTRAL = {
    "architectures": ["MistralForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "head_dim": 16,
    "hidden_act": "silu",
    "hidden_size": 32,
    "initializer_range": 0.02,
    "intermediate_size": 96,
    "max_position_embeddings": 128,
    "model_type": "mistral",
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0,
    "sliding_window": 48,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "use_cache": True,
    "vocab_size": 128,
}
MISTRAL_GENERATION = {"_from_model_config": True, "bos_token_id": 1, "eos_token_id": 2,
                      "transformers_version": "4.46.3"}


def v5_config_json(fields):
    """The same config as transformers 5.x writes it: dtype for torch_dtype, rope_parameters for
    rope_theta + rope_scaling."""
    d = dict(fields)
    d["dtype"] = d.pop("torch_dtype")
    d["rope_parameters"] = {"rope_theta": d.pop("rope_theta"), "rope_type": "default"}
    d.pop("rope_scaling", None)
    d["transformers_version"] = "5.0.0"
    return json.dumps(d, indent=2, sort_keys=True) + "\n"


def greedy_prompt(cfg, W, eos):
    """The first candidate prompt whose float64 greedy continuation never emits an EOS (so generate does
    not stop early) and never comes within 0.05 of a top-2 tie (so float32 rounding cannot flip it)."""
    m = Model(cfg, W, True)
    for ps in range(1000, 1100):
        prompt = [cfg.d["bos_token_id"]] + np.random.RandomState(ps).randint(3, cfg.vocab_size - 3, size=5).tolist()
        g, margin = m.greedy(prompt, N_NEW)
        if margin >= 0.05 and not set(g) & set(eos):
            return prompt
    raise RuntimeError("no prompt without EOS and ties")


def references(cfg, W, seqs, prompt):
    exp = {"input_ids": seqs, "greedy_prompt": prompt, "greedy_new_tokens": N_NEW}
    for exact, tag in ((True, "float64"), (False, "float32")):
        m = Model(cfg, W, exact)
        conv = f64_list if exact else f32_list
        exp["logits_" + tag] = [conv(m.forward(torch.tensor([s]))[0].detach().numpy()) for s in seqs]
        exp["greedy_" + tag], exp["greedy_min_top2_margin_" + tag] = m.greedy(prompt, N_NEW)
    return exp


def write_folder(out, config_text, generation, tensors):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        f.write(config_text)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        f.write(json.dumps(generation, indent=2, sort_keys=True) + "\n")
    write_safetensors(os.path.join(out, "model.safetensors"), tensors, metadata={"format": "pt"})


def dump(path, exp):
    with open(path, "w") as f:
        json.dump(exp, f, separators=(",", ":"))
        f.write("\n")


def make(name, fields, generation, seed, half, half_config, tied_scale=None, lm_std=None):
    out = os.path.join(OUT, name)
    cfg = Cfg(fields)
    weights = random_weights(cfg, seed=seed, tied_scale=tied_scale, lm_std=lm_std)
    write_folder(out, llama4x_config_json(fields, "4.46.3"), generation,
                 {k: ("F32", v) for k, v in weights.items()})
    cfg = Cfg(json.load(open(os.path.join(out, "config.json"))))
    W, _, _ = read_safetensors(os.path.join(out, "model.safetensors"))
    rs = np.random.RandomState(7)
    seqs = [[fields["bos_token_id"]] + rs.randint(3, cfg.vocab_size - 3, size=8).tolist(),
            [fields["bos_token_id"]] + rs.randint(3, cfg.vocab_size - 3, size=11).tolist()]
    eos = {fields["eos_token_id"]} | set(np.atleast_1d(generation["eos_token_id"]).tolist())
    prompt = greedy_prompt(cfg, W, eos)
    exp = references(cfg, W, seqs, prompt)
    # Without any window the numbers are the same bit for bit: the window is never reached.
    unwindowed = Model(Cfg(dict(fields, sliding_window=None, use_sliding_window=False)), W, True)
    for s, want in zip(seqs, exp["logits_float64"]):
        assert unwindowed.forward(torch.tensor([s]))[0].detach().numpy().tolist() == want
    dump(os.path.join(out, "expected.json"), exp)

    # The half-precision copy: the weights rounded (round to nearest even), the same numbers computed
    # from the rounded values.
    st, dtype = half
    copy = os.path.join(out, st.lower())
    write_folder(copy, half_config(dict(fields, torch_dtype=dtype)), generation,
                 {k: (st, v) for k, v in weights.items()})
    Wh, dts, _ = read_safetensors(os.path.join(copy, "model.safetensors"))
    assert set(dts.values()) == {st}
    assert all(np.array_equal(Wh[k], round_to_dtype(weights[k], st)) for k in weights)
    dump(os.path.join(copy, "expected.json"),
         references(Cfg(json.load(open(os.path.join(copy, "config.json")))), Wh, seqs, prompt))
    print(name, "greedy", exp["greedy_float64"], "margin", exp["greedy_min_top2_margin_float64"],
          "float32 equal:", exp["greedy_float32"] == exp["greedy_float64"])


make("hf-qwen2-tiny", QWEN2, QWEN2_GENERATION, 20250201, ("BF16", "bfloat16"), v5_config_json, tied_scale=0.5)
# lm_head N(0, (2/sqrt(32))^2): logits of a few units, so that float32 rounding stays well under 1e-5
make("hf-mistral-tiny", MISTRAL, MISTRAL_GENERATION, 20250301, ("F16", "float16"),
     lambda d: llama4x_config_json(d, "4.46.3"), lm_std=2.0 / 32 ** 0.5)
