// nn.RMSNorm (https://pytorch.org/docs/stable/generated/torch.nn.RMSNorm.html), the norm of the
// Llama family: y = x / sqrt(mean(x^2) + eps) * weight over the trailing normalized_shape dims.
// weight ("the learnable scale", ones) has shape normalized_shape; elementwise_affine=false drops
// it. eps unset: the input's std::numeric_limits<T>::epsilon() (torch.finfo(x.dtype).eps).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <xgrad/arg.hpp>
#include <xgrad/nn/module.hpp>

namespace xgrad::nn {

struct RMSNormOptions {
  // One trailing dim (`RMSNormOptions(d_model)`) or several (`RMSNormOptions({3, 4})`), as
  // LibTorch's std::vector<int64_t>; each size must be non-negative.
  RMSNormOptions(std::int64_t normalized_shape) : normalized_shape_{normalized_shape} {}  // NOLINT
  RMSNormOptions(std::vector<std::int64_t> normalized_shape)                              // NOLINT
      : normalized_shape_(std::move(normalized_shape)) {}
  XGRAD_ARG(std::vector<std::int64_t>, normalized_shape);
  XGRAD_ARG(std::optional<double>, eps) = std::nullopt;
  XGRAD_ARG(bool, elementwise_affine) = true;
};

template <class T = float>
class RMSNorm : public Module<T> {
 public:
  explicit RMSNorm(const RMSNormOptions& options);

  Tensor<T> forward(const Tensor<T>& input) override;
  // weight = 1.
  void reset_parameters();
  const RMSNormOptions& options() const { return options_; }

  Tensor<T> weight;  // normalized_shape; undefined without elementwise_affine

 private:
  RMSNormOptions options_;
  Shape normalized_shape_;  // options_.normalized_shape(), checked
};

extern template class RMSNorm<float>;
extern template class RMSNorm<double>;

}  // namespace xgrad::nn
