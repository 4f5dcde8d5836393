// torch.optim.SGD (PyTorch 1.13, single-tensor form), per parameter with gradient g:
//   g = maximize ? -g : g;   g += weight_decay * θ
//   momentum μ != 0:  b = g on the first step, else b = μ b + (1 - dampening) g
//                     g = nesterov ? g + μ b : b
//   θ -= lr * g
#pragma once

#include <xgrad/optim/optimizer.hpp>

namespace xgrad::optim {

class SGDOptions : public OptionsBase<SGDOptions> {
  XGRAD_OPTIONS(SGDOptions)

 public:
  explicit SGDOptions(double lr) : lr_(lr) {}  // lr has no default, as in PyTorch
  XGRAD_OPTION(double, lr);
  XGRAD_OPTION(double, momentum) = 0;
  XGRAD_OPTION(double, dampening) = 0;
  XGRAD_OPTION(double, weight_decay) = 0;
  XGRAD_OPTION(bool, nesterov) = false;
  XGRAD_OPTION(bool, maximize) = false;

 public:
  void validate() const override;
  const char* optimizer_name() const override { return "SGD"; }
};

template <class T = float>
class SGD : public Optimizer<T> {
 public:
  SGD(std::vector<Tensor<T>> params, const SGDOptions& options)
      : SGD(std::vector<ParamGroup<T>>{ParamGroup<T>(std::move(params))}, options) {}
  SGD(std::vector<ParamGroup<T>> groups, const SGDOptions& options) : Optimizer<T>(std::move(groups), options) {}

  std::vector<std::string> state_names() const override { return {"momentum_buffer"}; }

 protected:
  void step_group(ParamGroup<T>& group) override;
};

extern template class SGD<float>;
extern template class SGD<double>;

}  // namespace xgrad::optim
