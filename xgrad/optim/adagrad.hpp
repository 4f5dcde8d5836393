// torch.optim.Adagrad (PyTorch 1.13, single-tensor form). Per parameter with gradient g, at step t:
//   g = maximize ? -g : g;   g += weight_decay * θ
//   clr = lr / (1 + (t - 1) lr_decay)
//   s += g²                                   (state "sum", starting at initial_accumulator_value)
//   θ -= clr g / (sqrt(s) + eps)
// State per parameter, as torch's: {"step", "sum"}. torch fills "sum" when the optimizer is built;
// here it is filled at the first step that sees a gradient, with the same values from then on.
// https://pytorch.org/docs/1.13/generated/torch.optim.Adagrad.html
//
// compile: snippet given: auto model = std::make_shared<nn::Linear<float>>(4, 2);
//   optim::Adagrad<float> opt(model->parameters(), optim::AdagradOptions(1e-2).lr_decay(1e-4));
#pragma once

#include <xgrad/optim/optimizer.hpp>

namespace xgrad::optim {

class AdagradOptions : public OptionsBase<AdagradOptions> {
  XGRAD_OPTIONS(AdagradOptions)

 public:
  explicit AdagradOptions(double lr = 1e-2) : lr_(lr) {}
  XGRAD_OPTION(double, lr);
  XGRAD_OPTION(double, lr_decay) = 0;
  XGRAD_OPTION(double, weight_decay) = 0;
  XGRAD_OPTION(double, initial_accumulator_value) = 0;
  XGRAD_OPTION(double, eps) = 1e-10;
  XGRAD_OPTION(bool, maximize) = false;

 public:
  // PyTorch's messages: "Adagrad: Invalid learning rate: -1", "... Invalid lr_decay value: ...".
  void validate() const override;
  const char* optimizer_name() const override { return "Adagrad"; }
};

template <class T = float>
class Adagrad : public Optimizer<T> {
 public:
  Adagrad(std::vector<Tensor<T>> params, const AdagradOptions& options = AdagradOptions())
      : Adagrad(std::vector<ParamGroup<T>>{ParamGroup<T>(std::move(params))}, options) {}
  Adagrad(std::vector<ParamGroup<T>> groups, const AdagradOptions& options = AdagradOptions())
      : Optimizer<T>(std::move(groups), options) {}

  std::vector<std::string> state_names() const override { return {"step", "sum"}; }

 protected:
  void step_group(ParamGroup<T>& group) override;
};

extern template class Adagrad<float>;
extern template class Adagrad<double>;

}  // namespace xgrad::optim
