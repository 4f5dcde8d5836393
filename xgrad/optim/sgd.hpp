// torch.optim.SGD (PyTorch 1.13, single-tensor form), per parameter with gradient g:
//   g = maximize ? -g : g;   g += weight_decay * θ
//   momentum μ != 0:  b = g on the first step, else b = μ b + (1 - dampening) g
//                     g = nesterov ? g + μ b : b
//   θ -= lr * g
#pragma once

#include <xgrad/optim/optimizer.hpp>

namespace xgrad::optim {

class SGDOptions : public OptimizerOptions {
 public:
  explicit SGDOptions(double lr) : lr_(lr) {}  // lr has no default, as in PyTorch
  XGRAD_ARG(double, lr);
  XGRAD_ARG(double, momentum) = 0;
  XGRAD_ARG(double, dampening) = 0;
  XGRAD_ARG(double, weight_decay) = 0;
  XGRAD_ARG(bool, nesterov) = false;
  XGRAD_ARG(bool, maximize) = false;

 public:
  std::unique_ptr<OptimizerOptions> clone() const override { return std::make_unique<SGDOptions>(*this); }
  double get_lr() const override { return lr_; }
  void set_lr(double lr) override { lr_ = lr; }
  void validate() const override;
  const char* optimizer_name() const override { return "SGD"; }
};

template <class T = float>
class SGD : public Optimizer<T> {
 public:
  SGD(std::vector<Tensor<T>> params, const SGDOptions& options)
      : SGD(std::vector<ParamGroup<T>>{ParamGroup<T>(std::move(params))}, options) {}
  SGD(std::vector<ParamGroup<T>> groups, const SGDOptions& options) : Optimizer<T>(std::move(groups), options) {}

 protected:
  void step_group(ParamGroup<T>& group) override;
};

extern template class SGD<float>;
extern template class SGD<double>;

}  // namespace xgrad::optim
