// The gated MLP's activation of the Llama family, silu(gate) * up, as one op (PyTorch has no public
// name for this fusion; transformers' LlamaMLP writes act_fn(gate_proj(x)) * up_proj(x)).
//
//   silu_mul(gate, up) == mul(silu(gate), up)
//
// gate, up: the same shape (no broadcasting: a mismatch throws naming both shapes) -> that shape.
// The same values as the two ops, bit for bit, forward and both gradients, at any thread count,
// float and double. What it saves: one pass instead of two each way, and the (L, intermediate)
// activation silu(gate) that mul would keep for its backward (the backward recomputes it from
// gate). The backward computes only the gradients its inputs need; under create_graph its
// GradFormula is made of silu, sigmoid and mul, so higher derivatives work. While a trace::Recorder
// records (ONNX export), it runs silu and mul themselves, so the recording is unchanged.
// Defined in elementwise.cpp, beside silu, whose derivative it shares.
#pragma once

#include <xgrad/core/tensor.hpp>

namespace xgrad {

// F.silu(gate) * up.
template <class T>
Tensor<T> silu_mul(const Tensor<T>& gate, const Tensor<T>& up);

}  // namespace xgrad
