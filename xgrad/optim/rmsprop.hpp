// torch.optim.RMSprop (PyTorch 1.13, single-tensor form). Per parameter with gradient g:
//   g = maximize ? -g : g;   g += weight_decay * θ
//   v = α v + (1 - α) g²                                  (state "square_avg")
//   centered:  ḡ = α ḡ + (1 - α) g;   avg = sqrt(v - ḡ²) + eps   ("grad_avg")
//   else:                             avg = sqrt(v) + eps
//   momentum μ > 0:  b = μ b + g / avg;   θ -= lr b         ("momentum_buffer")
//   else:                                 θ -= lr g / avg
// State per parameter, as torch's: {"step", "square_avg", "momentum_buffer" (μ > 0),
// "grad_avg" (centered)}, created at the first step that sees a gradient.
// https://pytorch.org/docs/1.13/generated/torch.optim.RMSprop.html
//
// compile: snippet given: auto model = std::make_shared<nn::Linear<float>>(4, 2);
//   optim::RMSprop<float> opt(model->parameters(), optim::RMSpropOptions(1e-3).momentum(0.9).centered(true));
#pragma once

#include <xgrad/optim/optimizer.hpp>

namespace xgrad::optim {

class RMSpropOptions : public OptionsBase<RMSpropOptions> {
  XGRAD_OPTIONS(RMSpropOptions)

 public:
  explicit RMSpropOptions(double lr = 1e-2) : lr_(lr) {}
  XGRAD_OPTION(double, lr);
  XGRAD_OPTION(double, alpha) = 0.99;
  XGRAD_OPTION(double, eps) = 1e-8;
  XGRAD_OPTION(double, weight_decay) = 0;
  XGRAD_OPTION(double, momentum) = 0;
  XGRAD_OPTION(bool, centered) = false;
  XGRAD_OPTION(bool, maximize) = false;

 public:
  // PyTorch's messages: "RMSprop: Invalid learning rate: -1", "... Invalid alpha value: ...".
  void validate() const override;
  const char* optimizer_name() const override { return "RMSprop"; }
};

template <class T = float>
class RMSprop : public Optimizer<T> {
 public:
  RMSprop(std::vector<Tensor<T>> params, const RMSpropOptions& options = RMSpropOptions())
      : RMSprop(std::vector<ParamGroup<T>>{ParamGroup<T>(std::move(params))}, options) {}
  RMSprop(std::vector<ParamGroup<T>> groups, const RMSpropOptions& options = RMSpropOptions())
      : Optimizer<T>(std::move(groups), options) {}

  std::vector<std::string> state_names() const override {
    return {"step", "square_avg", "momentum_buffer", "grad_avg"};
  }

 protected:
  void step_group(ParamGroup<T>& group) override;
};

extern template class RMSprop<float>;
extern template class RMSprop<double>;

}  // namespace xgrad::optim
