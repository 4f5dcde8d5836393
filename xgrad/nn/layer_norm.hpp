// nn.LayerNorm (https://pytorch.org/docs/stable/generated/torch.nn.LayerNorm.html):
// y = (x - E[x]) / sqrt(Var[x] + eps) * weight + bias over the trailing normalized_shape dims
// (biased variance). weight ("the learnable scale", ones) and bias ("the learnable shift", zeros)
// have shape normalized_shape; elementwise_affine=false drops both, bias=false drops the shift.
#pragma once

#include <cstdint>
#include <vector>

#include <xgrad/arg.hpp>
#include <xgrad/nn/module.hpp>

namespace xgrad::nn {

struct LayerNormOptions {
  // One trailing dim (`LayerNormOptions(d_model)`) or several (`LayerNormOptions({3, 4})`), as
  // LibTorch's std::vector<int64_t>; each size must be non-negative.
  LayerNormOptions(std::int64_t normalized_shape) : normalized_shape_{normalized_shape} {}  // NOLINT
  LayerNormOptions(std::vector<std::int64_t> normalized_shape)  // NOLINT
      : normalized_shape_(std::move(normalized_shape)) {}
  XGRAD_ARG(std::vector<std::int64_t>, normalized_shape);
  XGRAD_ARG(double, eps) = 1e-5;
  XGRAD_ARG(bool, elementwise_affine) = true;
  XGRAD_ARG(bool, bias) = true;
};

template <class T = float>
class LayerNorm : public Module<T> {
 public:
  explicit LayerNorm(const LayerNormOptions& options);

  Tensor<T> forward(const Tensor<T>& input) override;
  // weight = 1, bias = 0.
  void reset_parameters();
  const LayerNormOptions& options() const { return options_; }

  Tensor<T> weight;  // normalized_shape; undefined without elementwise_affine
  Tensor<T> bias;    // normalized_shape; undefined without elementwise_affine or bias

 private:
  LayerNormOptions options_;
  Shape normalized_shape_;  // options_.normalized_shape(), checked
};

extern template class LayerNorm<float>;
extern template class LayerNorm<double>;

}  // namespace xgrad::nn
