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

// The options Adam and AdamW share, declared once; Self is AdamOptions or AdamWOptions (the type
// the setters return).
template <class Self>
class AdamFamilyOptions : public OptionsBase<Self> {
  XGRAD_OPTIONS(Self)
  XGRAD_OPTION(double, lr) = 1e-3;
  XGRAD_OPTION(Betas, betas) = {0.9, 0.999};
  XGRAD_OPTION(double, eps) = 1e-8;
  XGRAD_OPTION(double, weight_decay) = 0;
  XGRAD_OPTION(bool, amsgrad) = false;
  XGRAD_OPTION(bool, maximize) = false;

 public:
  void validate() const override;
};

class AdamOptions : public AdamFamilyOptions<AdamOptions> {
 public:
  explicit AdamOptions(double lr = 1e-3) { this->lr(lr); }
  const char* optimizer_name() const override { return "Adam"; }
};

// AdamOptions with decoupled weight decay, by default 1e-2.
class AdamWOptions : public AdamFamilyOptions<AdamWOptions> {
 public:
  explicit AdamWOptions(double lr = 1e-3) { this->lr(lr).weight_decay(1e-2); }
  const char* optimizer_name() const override { return "AdamW"; }
};

// Adam's and AdamW's optimizer (use Adam<T> or AdamW<T>): they differ in their options type and in how weight decay applies.
template <class T, class Options, bool kDecoupled>
class AdamFamily : public Optimizer<T> {
 public:
  AdamFamily(std::vector<Tensor<T>> params, const Options& options = Options())
      : AdamFamily(std::vector<ParamGroup<T>>{ParamGroup<T>(std::move(params))}, options) {}
  AdamFamily(std::vector<ParamGroup<T>> groups, const Options& options = Options())
      : Optimizer<T>(std::move(groups), options) {}

  std::vector<std::string> state_names() const override {
    return {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  }

 protected:
  void step_group(ParamGroup<T>& group) override;
};

template <class T = float>
class Adam : public AdamFamily<T, AdamOptions, false> {
 public:
  using AdamFamily<T, AdamOptions, false>::AdamFamily;
};

template <class T = float>
class AdamW : public AdamFamily<T, AdamWOptions, true> {
 public:
  using AdamFamily<T, AdamWOptions, true>::AdamFamily;
};

extern template class AdamFamilyOptions<AdamOptions>;
extern template class AdamFamilyOptions<AdamWOptions>;
extern template class AdamFamily<float, AdamOptions, false>;
extern template class AdamFamily<double, AdamOptions, false>;
extern template class AdamFamily<float, AdamWOptions, true>;
extern template class AdamFamily<double, AdamWOptions, true>;
extern template class Adam<float>;
extern template class Adam<double>;
extern template class AdamW<float>;
extern template class AdamW<double>;

}  // namespace xgrad::optim
