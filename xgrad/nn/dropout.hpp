// nn.Dropout (https://pytorch.org/docs/stable/generated/torch.nn.Dropout.html): in training,
// zeroes each element with probability p and scales the others by 1/(1-p); in eval (or p = 0)
// returns its input. Masks come from the default generator (xgrad::manual_seed).
#pragma once

#include <xgrad/arg.hpp>
#include <xgrad/nn/module.hpp>
#include <xgrad/base/random.hpp>

namespace xgrad::nn {

struct DropoutOptions {
  DropoutOptions(double p = 0.5) : p_(p) {}  // NOLINT: DropoutOptions(0.2) reads as PyTorch's Dropout(0.2)
  XGRAD_ARG(double, p);
};

template <class T = float>
class Dropout : public Module<T> {
 public:
  explicit Dropout(const DropoutOptions& options = {});
  Tensor<T> forward(const Tensor<T>& input) override;
  const DropoutOptions& options() const { return options_; }

 private:
  DropoutOptions options_;
};

extern template class Dropout<float>;
extern template class Dropout<double>;

}  // namespace xgrad::nn
