// Rotary position embeddings (RoPE) as Hugging Face's Llama applies them: the op, and the tables
// of inverse frequencies and of cos / sin it is fed with. rotary_embedding.cpp has all three.
//
//   const Tensor<float> inv_freq = rope_inv_freq<float>(head_dim, 10000.0);   // once, a constant
//   const auto [cos, sin] = rope_cos_sin(inv_freq, positions);               // (T, head_dim) each
//   q = rotary_embedding(q, cos, sin);                                       // q: (B, H, T, head_dim)
//
// The layout is transformers' rotate_half, NOT interleaved pairs: element j of a head's first half
// rotates with element j + D/2 (Hugging Face checkpoints' q/k rows are permuted for this layout).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <xgrad/core/tensor.hpp>

namespace xgrad {

// transformers' LlamaModel apply_rotary_pos_emb, for one of q or k:
//   y = x * cos + rotate_half(x) * sin,   rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2])
// x: (..., T, D) with D even ((B, H, T, D) in the models); cos, sin: one shape, broadcastable to
// x's with the same last dim D: (T, D), (1, T, D), (B, 1, T, D) for x (B, H, T, D). y: x's shape.
// cos and sin are constants of the model (transformers computes them under no_grad): one that
// requires grad is refused. The gradient goes to x only, exact for any cos and sin:
//   dx = g * cos + rotate_half^T(g * sin),   rotate_half^T(u) = cat(u[..., D/2:], -u[..., :D/2])
// One node; differentiable again (create_graph). In float32 its values and gradients are torch's
// bit for bit (the same products and sums, unfused).
template <class T>
Tensor<T> rotary_embedding(const Tensor<T>& x, const Tensor<T>& cos, const Tensor<T>& sin);

// The same in place, for inference (a KV-cache decode step): x's value becomes
// rotary_embedding(x, cos, sin)'s, bit for bit, without a node or a new array; returns x. Its
// version() is bumped, so a node that saved x refuses its backward. Refused while grad mode is on
// and x requires grad (no gradient would be recorded: use rotary_embedding) and while a trace
// records (an ONNX export would miss it).
template <class T>
const Tensor<T>& rotary_embedding_(const Tensor<T>& x, const Tensor<T>& cos, const Tensor<T>& sin);

// config.json's rope_scaling, as transformers' modeling_rope_utils reads it (its key `type` is an
// old spelling of rope_type). rope_type:
//   "default"  no scaling (the other fields are unused)
//   "linear"   inv_freq / factor
//   "llama3"   Llama 3.1's: wavelen = 2 pi / inv_freq; low-frequency wavelengths
//              (> original_max_position_embeddings / low_freq_factor) are divided by factor,
//              high-frequency ones (< original / high_freq_factor) kept, those between blended
//              (_compute_llama3_parameters).
// Any other rope_type is refused by name. The defaults below the type are Llama 3.1's values for
// the llama3 fields (its factor is 8; here 1, so that "linear" without a factor changes nothing).
struct RopeScaling {
  std::string rope_type = "default";
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  std::int64_t original_max_position_embeddings = 8192;
};

// The dim / 2 inverse frequencies of LlamaRotaryEmbedding (its inv_freq buffer), dim =
// int(head_dim * partial_rotary_factor), even:
//   inv_freq[i] = 1 / rope_theta^(2i / dim), then rope_scaling applied.
// Computed in T throughout, in transformers' order of operations: for T = float its float32 values
// (torch.arange(0, dim, 2).float() / dim, the power and the scaling in float32), for T = double
// the same in float64. A plain tensor (no grad).
template <class T>
Tensor<T> rope_inv_freq(std::int64_t head_dim, double rope_theta, const RopeScaling& scaling = {},
                        double partial_rotary_factor = 1.0);

// LlamaRotaryEmbedding.forward: for positions of any shape (P...), with n = inv_freq's length,
//   freqs = position * inv_freq (in T),  emb = cat(freqs, freqs),  cos = cos(emb), sin = sin(emb)
// as (P..., 2n) tensors (no grad). Positions (T) give the (T, D) tables rotary_embedding takes;
// (B, T) gives (B, T, D), to unsqueeze to (B, 1, T, D). attention_scaling is 1 for the rope types
// above.
template <class T>
std::pair<Tensor<T>, Tensor<T>> rope_cos_sin(const Tensor<T>& inv_freq, const IndexArray& positions);

}  // namespace xgrad
