#include <xgrad/optim/rmsprop.hpp>

#include <cmath>

namespace xgrad::optim {

void RMSpropOptions::validate() const {
  XGRAD_CHECK(lr() >= 0.0, "RMSprop: Invalid learning rate: ", lr());
  XGRAD_CHECK(eps() >= 0.0, "RMSprop: Invalid epsilon value: ", eps());
  XGRAD_CHECK(momentum() >= 0.0, "RMSprop: Invalid momentum value: ", momentum());
  XGRAD_CHECK(weight_decay() >= 0.0, "RMSprop: Invalid weight_decay value: ", weight_decay());
  XGRAD_CHECK(alpha() >= 0.0, "RMSprop: Invalid alpha value: ", alpha());
}

// One pass over each parameter's data, in the operation order of torch 1.13's
// _single_tensor_rmsprop, Python scalars becoming T as in ATen (addcmul: v + (c g) g; addcdiv:
// θ + (c g) / avg; add with alpha: θ + α b):
//   square_avg.mul_(α).addcmul_(g, g, value=1-α)
//   grad_avg.mul_(α).add_(g, alpha=1-α);  avg = square_avg.addcmul(grad_avg, grad_avg, value=-1).sqrt_()
//   avg.add_(eps)
//   buf.mul_(μ).addcdiv_(g, avg);  θ.add_(buf, alpha=-lr)      or  θ.addcdiv_(g, avg, value=-lr)
template <class T>
void RMSprop<T>::step_group(ParamGroup<T>& group) {
  const auto& o = static_cast<const RMSpropOptions&>(group.options());
  const T alpha = static_cast<T>(o.alpha());
  const T one_minus_alpha = static_cast<T>(1.0 - o.alpha());
  const T eps = static_cast<T>(o.eps());
  const T wd = static_cast<T>(o.weight_decay());
  const T mu = static_cast<T>(o.momentum());
  const T neg_lr = static_cast<T>(-o.lr());
  const bool use_wd = o.weight_decay() != 0.0;
  const bool use_momentum = o.momentum() > 0.0;
  const bool centered = o.centered();
  const bool maximize = o.maximize();

  for (Tensor<T>& p : group.params()) {
    if (!p.has_grad()) continue;
    const Array<T>& grad = p.grad();
    Array<T>& value = p.mutable_value();
    ParamState<T>& state = this->state_of(p);
    T* v = state.zeros_if_absent("square_avg", value).data();
    T* buf = use_momentum ? state.zeros_if_absent("momentum_buffer", value).data() : nullptr;
    T* gavg = centered ? state.zeros_if_absent("grad_avg", value).data() : nullptr;
    state.step += 1;

    const T* g = grad.data();
    T* theta = value.data();
    const std::size_t n = value.size();
    for (std::size_t i = 0; i < n; ++i) {
      T d = maximize ? -g[i] : g[i];
      if (use_wd) d = d + wd * theta[i];
      v[i] = v[i] * alpha + one_minus_alpha * d * d;
      T avg;
      if (centered) {
        gavg[i] = gavg[i] * alpha + one_minus_alpha * d;
        avg = std::sqrt(v[i] + T(-1) * gavg[i] * gavg[i]);
      } else {
        avg = std::sqrt(v[i]);
      }
      avg = avg + eps;
      if (use_momentum) {
        buf[i] = buf[i] * mu + d / avg;
        theta[i] = theta[i] + neg_lr * buf[i];
      } else {
        theta[i] = theta[i] + neg_lr * d / avg;
      }
    }
  }
}

template class RMSprop<float>;
template class RMSprop<double>;

}  // namespace xgrad::optim
