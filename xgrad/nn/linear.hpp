// nn.Linear (https://pytorch.org/docs/stable/generated/torch.nn.Linear.html):
// x (*, in_features) -> y = x W^T + b (*, out_features); weight (out_features, in_features),
// bias (out_features). Init: W, b ~ U(-1/sqrt(in_features), 1/sqrt(in_features)) from the
// default generator (PyTorch's kaiming_uniform_(a=sqrt(5)) and its bias bound).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include <xgrad/arg.hpp>
#include <xgrad/nn/module.hpp>

namespace xgrad::nn {

struct LinearOptions {
  LinearOptions(std::int64_t in_features, std::int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}
  XGRAD_ARG(std::int64_t, in_features);
  XGRAD_ARG(std::int64_t, out_features);
  XGRAD_ARG(bool, bias) = true;
};

// What a layer adds to a Linear (nn/lora.hpp's LoRA): the layer's forward returns
// adapter.forward_linear(x, weight, bias), its own output with the adapter's part added.
template <class T = float>
class LinearAdapter : public Module<T> {
 public:
  using Module<T>::Module;
  // input (*, in_features), the layer's weight (out_features, in_features) and bias (out_features)
  // or undefined -> the output (*, out_features).
  virtual Tensor<T> forward_linear(const Tensor<T>& input, const Tensor<T>& weight, const Tensor<T>& bias) = 0;
};

template <class T = float>
class Linear : public Module<T> {
 public:
  explicit Linear(const LinearOptions& options);
  Linear(std::int64_t in_features, std::int64_t out_features) : Linear(LinearOptions(in_features, out_features)) {}

  Tensor<T> forward(const Tensor<T>& input) override;
  // Redraws weight and bias as at construction.
  void reset_parameters();
  const LinearOptions& options() const { return options_; }
  // Routes forward through `adapter` (null: none). The adapter's parameters are registered by
  // whoever attaches it (LoRA registers lora_A and lora_B under this module, as PEFT names them).
  void set_adapter(std::shared_ptr<LinearAdapter<T>> adapter) { adapter_ = std::move(adapter); }
  const std::shared_ptr<LinearAdapter<T>>& adapter() const { return adapter_; }

  Tensor<T> weight;  // (out_features, in_features)
  Tensor<T> bias;    // (out_features), undefined when options.bias() is false

 private:
  LinearOptions options_;
  std::shared_ptr<LinearAdapter<T>> adapter_;
};

extern template class Linear<float>;
extern template class Linear<double>;

}  // namespace xgrad::nn
