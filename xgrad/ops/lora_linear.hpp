// Internal: a Linear with a LoRA adapter as one op (nn::LoraLayer uses it when its dropout is off;
// PEFT computes the same sum in Python, with no fusion). Not part of the API.
//
//   detail::lora_linear(x, W, b, A, B, s) == linear(x, W, b) + linear(linear(x, A), B * s)
//
// x: (*, in), W: (out, in), b: (out) or undefined, A: (r, in), B: (out, r) -> (*, out). The same
// values as the ops on the right, bit for bit, forward and every gradient, at any thread count,
// float and double, under either gemm backend. What it saves: keeping the base output and the
// adapter's (*, out) product alive for the sum's backward (the forward computes v = u (sB)^T,
// u = x A^T of shape (*, r), with linear's own gemm calls, adds it to each block of y right after
// the block's base gemm, while it is in cache, and frees it), the sum's separate pass, and backward
// the (*, in) input gradient of the adapter and its sum with the base's (du A is accumulated into
// g W by the gemm, beta = 1).
// Under bf16 autocast, and while a trace::Recorder records (ONNX export), it runs the ops on the
// right themselves. Under create_graph its GradFormula is made of matmul, so higher derivatives
// work.
#pragma once

#include <xgrad/core/tensor.hpp>

namespace xgrad::detail {

template <class T>
Tensor<T> lora_linear(const Tensor<T>& x, const Tensor<T>& weight, const Tensor<T>& bias, const Tensor<T>& lora_A,
                      const Tensor<T>& lora_B, double scaling);

}  // namespace xgrad::detail
