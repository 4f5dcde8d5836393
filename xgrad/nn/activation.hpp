// Activation modules: nn.GELU (https://pytorch.org/docs/stable/generated/torch.nn.GELU.html)
// and nn.ReLU. No parameters.
//   GELU, approximate="none": 0.5 x (1 + erf(x / sqrt 2));
//         approximate="tanh": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
//   ReLU: max(x, 0).
#pragma once

#include <string>

#include <xgrad/arg.hpp>
#include <xgrad/nn/module.hpp>

namespace xgrad::nn {

struct GELUOptions {
  XGRAD_ARG(std::string, approximate) = "none";
};

template <class T = float>
class GELU : public Module<T> {
 public:
  explicit GELU(const GELUOptions& options = {});
  Tensor<T> forward(const Tensor<T>& input) override;
  const GELUOptions& options() const { return options_; }

 private:
  GELUOptions options_;
};

template <class T = float>
class ReLU : public Module<T> {
 public:
  ReLU() : Module<T>("ReLU") {}
  Tensor<T> forward(const Tensor<T>& input) override;
};

extern template class GELU<float>;
extern template class GELU<double>;
extern template class ReLU<float>;
extern template class ReLU<double>;

}  // namespace xgrad::nn
