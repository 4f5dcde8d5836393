// The RMSNorm op of the Llama family (rms_norm.cpp). Its declaration joins ops/ops.hpp's section
// "rms_norm.cpp"; until then, include this header.
#pragma once

#include <optional>
#include <utility>

#include <xgrad/core/factories.hpp>
#include <xgrad/core/tensor.hpp>

namespace xgrad {

// ---- rms_norm.cpp -----------------------------------------------------------------------------

// F.rms_norm (PyTorch >= 2.4; transformers' LlamaRMSNorm) over the trailing normalized_shape dims:
// y = x / sqrt(mean(x^2) + eps) * weight, no centering and no bias; weight (of normalized_shape) may
// be undefined; eps defaults to std::numeric_limits<T>::epsilon() (torch.finfo(x.dtype).eps). One
// fused node with its statistics accumulated in double.
template <class T>
Tensor<T> rms_norm(const Tensor<T>& x, const ShapeArg& normalized_shape, const Tensor<T>& weight = {},
                   std::optional<double> eps = std::nullopt);

// The residual add fused into the RMSNorm after it, for the pre-norm residual line of a Llama
// block (add_layer_norm_with_sum's layout, ops.hpp):
//   add_rms_norm_with_sum(x, r, ...) == {x + r, rms_norm(x + r, ...)}
// bit for bit (values and gradients), at any thread count. One pass per row each way: the forward
// writes s = x + r and normalizes the row while it is in cache; the backward writes ds = rms_norm's
// dx + the gradient of s for x and for r in the same pass. x and r of different shapes
// (broadcasting) and a running trace::Recorder take the unfused ops (add, then rms_norm). The
// backward recomputes s from x and r: changing either in place before it is refused, as for any op
// that saves its inputs.
template <class T>
std::pair<Tensor<T>, Tensor<T>> add_rms_norm_with_sum(const Tensor<T>& x, const Tensor<T>& r,
                                                      const ShapeArg& normalized_shape, const Tensor<T>& weight = {},
                                                      std::optional<double> eps = std::nullopt);

}  // namespace xgrad
