// Internal: the feed-forward block's first half, linear then GELU, as one op (the transformer
// layers' ff_block uses it; PyTorch has no public name for this fusion). Not part of the API.
//
//   detail::linear_gelu(x, W, b, approximate) == gelu(linear(x, W, b), approximate)
//
// x: (*, in), W: (out, in), b: (out) or undefined -> (*, out). The same values as the two ops, bit
// for bit, forward and every gradient, at any thread count, float and double, under autocast too
// (the gemms in bf16 exactly as linear's). What it saves: the forward applies the bias and GELU to
// each block of rows right after that block's gemm, while it is in cache, and keeps the
// pre-activation h for the backward (as the two ops would: recomputing it would cost a gemm); the
// backward computes dh = gelu'(h) * dy and the bias gradient in one pass over dy, then the two gemms
// of linear. Under create_graph its GradFormula recomputes h with linear and differentiates through
// gelu_backward, so higher derivatives work. While a trace::Recorder records (ONNX export), it runs
// linear and gelu themselves, so the recording is unchanged.
#pragma once

#include <string>

#include <xgrad/core/tensor.hpp>

namespace xgrad::detail {

// approximate: "none" (the exact erf form) or "tanh", as gelu's.
template <class T>
Tensor<T> linear_gelu(const Tensor<T>& x, const Tensor<T>& weight, const Tensor<T>& bias,
                      const std::string& approximate = "none");

}  // namespace xgrad::detail
