#include <xgrad/optim/sgd.hpp>

namespace xgrad::optim {

void SGDOptions::validate() const {
  XGRAD_CHECK(lr() >= 0.0, "SGD: invalid learning rate ", lr());
  XGRAD_CHECK(momentum() >= 0.0, "SGD: invalid momentum value ", momentum());
  XGRAD_CHECK(weight_decay() >= 0.0, "SGD: invalid weight_decay value ", weight_decay());
  XGRAD_CHECK(!nesterov() || (momentum() > 0.0 && dampening() == 0.0),
              "SGD: nesterov momentum requires a momentum and zero dampening (got momentum ", momentum(),
              ", dampening ", dampening(), ")");
}

// One pass over each parameter's data, in the operation order of torch 1.13's _single_tensor_sgd
// (so that double results agree to the last bits). Python scalars become T, as in ATen.
template <class T>
void SGD<T>::step_group(ParamGroup<T>& group) {
  const auto& o = static_cast<const SGDOptions&>(group.options());
  const T wd = static_cast<T>(o.weight_decay());
  const T mu = static_cast<T>(o.momentum());
  const T one_minus_dampening = static_cast<T>(1.0 - o.dampening());
  const T neg_lr = static_cast<T>(-o.lr());
  const bool use_wd = o.weight_decay() != 0.0;
  const bool use_momentum = o.momentum() != 0.0;
  const bool nesterov = o.nesterov();
  const bool maximize = o.maximize();

  for (Tensor<T>& p : group.params()) {
    if (!p.has_grad()) continue;
    const Array<T>& grad = p.grad();
    Array<T>& value = p.mutable_value();
    const T* g = grad.data();
    T* theta = value.data();
    const std::size_t n = value.size();

    T* buf = nullptr;
    bool first = false;
    if (use_momentum) {
      ParamState<T>& state = this->state_of(p);
      first = !state.has("momentum_buffer");
      if (first) state.set("momentum_buffer", empty_array<T>(value.shape(), "SGD"));
      buf = state.at("momentum_buffer").data();
    }
    for (std::size_t i = 0; i < n; ++i) {
      T d = maximize ? -g[i] : g[i];
      if (use_wd) d = d + wd * theta[i];
      if (use_momentum) {
        buf[i] = first ? d : buf[i] * mu + one_minus_dampening * d;
        d = nesterov ? d + mu * buf[i] : buf[i];
      }
      theta[i] = theta[i] + neg_lr * d;
    }
  }
}

template class SGD<float>;
template class SGD<double>;

}  // namespace xgrad::optim
