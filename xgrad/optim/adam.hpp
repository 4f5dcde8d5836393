// torch.optim.Adam and torch.optim.AdamW (PyTorch 1.13, single-tensor form). Per parameter with
// gradient g, at step t (counting from 1):
//   g = maximize ? -g : g
//   Adam:  g += weight_decay * θ              AdamW: θ *= 1 - lr * weight_decay (g untouched)
//   m = β1 m + (1 - β1) g;   v = β2 v + (1 - β2) g²;   amsgrad: v_max = max(v_max, v)
//   denom = sqrt(amsgrad ? v_max : v) / sqrt(1 - β2^t) + eps
//   θ -= lr / (1 - β1^t) * m / denom
#pragma once

#include <array>

#include <xgrad/optim/optimizer.hpp>

namespace xgrad::optim {

using Betas = std::array<double, 2>;  // (β1, β2)

class AdamOptions : public OptionsBase<AdamOptions> {
 public:
  explicit AdamOptions(double lr = 1e-3) : lr_(lr) {}
  XGRAD_ARG(double, lr);
  XGRAD_ARG(Betas, betas) = {0.9, 0.999};
  XGRAD_ARG(double, eps) = 1e-8;
  XGRAD_ARG(double, weight_decay) = 0;
  XGRAD_ARG(bool, amsgrad) = false;
  XGRAD_ARG(bool, maximize) = false;

 public:
  template <class Self, class F>
  static void fields(Self& self, F&& f) {
    f("lr", self.lr_);
    f("betas", self.betas_);
    f("eps", self.eps_);
    f("weight_decay", self.weight_decay_);
    f("amsgrad", self.amsgrad_);
    f("maximize", self.maximize_);
  }
  void validate() const override;
  const char* optimizer_name() const override { return "Adam"; }
};

// AdamOptions with decoupled weight decay, by default 1e-2.
class AdamWOptions : public OptionsBase<AdamWOptions> {
 public:
  explicit AdamWOptions(double lr = 1e-3) : lr_(lr) {}
  XGRAD_ARG(double, lr);
  XGRAD_ARG(Betas, betas) = {0.9, 0.999};
  XGRAD_ARG(double, eps) = 1e-8;
  XGRAD_ARG(double, weight_decay) = 1e-2;
  XGRAD_ARG(bool, amsgrad) = false;
  XGRAD_ARG(bool, maximize) = false;

 public:
  template <class Self, class F>
  static void fields(Self& self, F&& f) {
    f("lr", self.lr_);
    f("betas", self.betas_);
    f("eps", self.eps_);
    f("weight_decay", self.weight_decay_);
    f("amsgrad", self.amsgrad_);
    f("maximize", self.maximize_);
  }
  void validate() const override;
  const char* optimizer_name() const override { return "AdamW"; }
};

template <class T = float>
class Adam : public Optimizer<T> {
 public:
  Adam(std::vector<Tensor<T>> params, const AdamOptions& options = AdamOptions())
      : Adam(std::vector<ParamGroup<T>>{ParamGroup<T>(std::move(params))}, options) {}
  Adam(std::vector<ParamGroup<T>> groups, const AdamOptions& options = AdamOptions())
      : Optimizer<T>(std::move(groups), options) {}

  std::vector<std::string> state_names() const override {
    return {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  }

 protected:
  void step_group(ParamGroup<T>& group) override;
};

template <class T = float>
class AdamW : public Optimizer<T> {
 public:
  AdamW(std::vector<Tensor<T>> params, const AdamWOptions& options = AdamWOptions())
      : AdamW(std::vector<ParamGroup<T>>{ParamGroup<T>(std::move(params))}, options) {}
  AdamW(std::vector<ParamGroup<T>> groups, const AdamWOptions& options = AdamWOptions())
      : Optimizer<T>(std::move(groups), options) {}

  std::vector<std::string> state_names() const override {
    return {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  }

 protected:
  void step_group(ParamGroup<T>& group) override;
};

extern template class Adam<float>;
extern template class Adam<double>;
extern template class AdamW<float>;
extern template class AdamW<double>;

}  // namespace xgrad::optim
