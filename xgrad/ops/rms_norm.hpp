// The RMSNorm op of the Llama family (rms_norm.cpp). Its declaration joins ops/ops.hpp's section
// "rms_norm.cpp"; until then, include this header.
#pragma once

#include <optional>

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

}  // namespace xgrad
