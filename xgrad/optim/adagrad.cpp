#include <xgrad/optim/adagrad.hpp>

#include <cmath>

#include <xtensor/xbuilder.hpp>

namespace xgrad::optim {

void AdagradOptions::validate() const {
  XGRAD_CHECK(lr() >= 0.0, "Adagrad: Invalid learning rate: ", lr());
  XGRAD_CHECK(lr_decay() >= 0.0, "Adagrad: Invalid lr_decay value: ", lr_decay());
  XGRAD_CHECK(weight_decay() >= 0.0, "Adagrad: Invalid weight_decay value: ", weight_decay());
  XGRAD_CHECK(initial_accumulator_value() >= 0.0, "Adagrad: Invalid initial_accumulator_value value: ",
              initial_accumulator_value());
  XGRAD_CHECK(eps() >= 0.0, "Adagrad: Invalid epsilon value: ", eps());
}

// One pass over each parameter's data, in the operation order of torch 1.13's
// _single_tensor_adagrad (Python scalars becoming T as in ATen):
//   grad = grad.add(param, alpha=weight_decay);  clr = lr / (1 + (step - 1) * lr_decay)
//   state_sum.addcmul_(grad, grad, value=1);  std = state_sum.sqrt().add_(eps)
//   param.addcdiv_(grad, std, value=-clr)
template <class T>
void Adagrad<T>::step_group(ParamGroup<T>& group) {
  const auto& o = static_cast<const AdagradOptions&>(group.options());
  const T wd = static_cast<T>(o.weight_decay());
  const T eps = static_cast<T>(o.eps());
  const bool use_wd = o.weight_decay() != 0.0;
  const bool maximize = o.maximize();

  for (Tensor<T>& p : group.params()) {
    if (!p.has_grad()) continue;
    const Array<T>& grad = p.grad();
    Array<T>& value = p.mutable_value();
    ParamState<T>& state = this->state_of(p);
    if (!state.has("sum"))
      state.set("sum", full_array<T>(value.shape(), static_cast<T>(o.initial_accumulator_value()), "Adagrad"));
    T* sum = state.at("sum").data();
    state.step += 1;
    const T neg_clr = static_cast<T>(-(o.lr() / (1.0 + static_cast<double>(state.step - 1) * o.lr_decay())));

    const T* g = grad.data();
    T* theta = value.data();
    const std::size_t n = value.size();
    for (std::size_t i = 0; i < n; ++i) {
      T d = maximize ? -g[i] : g[i];
      if (use_wd) d = d + wd * theta[i];
      sum[i] = sum[i] + d * d;
      theta[i] = theta[i] + neg_clr * d / (std::sqrt(sum[i]) + eps);
    }
  }
}

template class Adagrad<float>;
template class Adagrad<double>;

}  // namespace xgrad::optim
