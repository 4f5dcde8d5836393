// xsimd first (see backend/simd.hpp)
#include <xgrad/backend/simd.hpp>

#include <xgrad/optim/adam.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include <xgrad/optim/flat_chunks.hpp>

namespace xgrad::optim {

namespace {

// Adam's and AdamW's options, read once per group.
struct AdamConfig {
  double lr, beta1, beta2, eps, weight_decay;
  bool amsgrad, maximize, decoupled;
};

void validate_adam(const char* name, double lr, const Betas& betas, double eps, double weight_decay) {
  XGRAD_CHECK(lr >= 0.0, name, ": invalid learning rate ", lr);
  XGRAD_CHECK(eps >= 0.0, name, ": invalid epsilon value ", eps);
  for (int i = 0; i < 2; ++i)
    XGRAD_CHECK(betas[i] >= 0.0 && betas[i] < 1.0, name, ": invalid beta parameter at index ", i, ": ", betas[i]);
  XGRAD_CHECK(weight_decay >= 0.0, name, ": invalid weight_decay value ", weight_decay);
}

// The per-step scalars of one parameter, already in T.
template <class T>
struct AdamScalars {
  T beta1, one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay, decay, neg_step_size, bias_correction2_sqrt;
};

enum class Decay { kNone, kCoupled, kDecoupled };  // none, Adam's L2 term, AdamW's θ *= 1 - lr wd

// torch.maximum (NaN wins) and sqrt, for a scalar and for a SIMD batch.
template <class T>
T nan_max(T a, T b) { return (a != a || a > b) ? a : b; }
template <class T>
T root(T x) { return std::sqrt(x); }
template <class T, class A>
xsimd::batch<T, A> nan_max(const xsimd::batch<T, A>& a, const xsimd::batch<T, A>& b) {
  return xsimd::select(xsimd::isnan(a) | (a > b), a, b);
}
template <class T, class A>
xsimd::batch<T, A> root(const xsimd::batch<T, A>& x) { return xsimd::sqrt(x); }

// The update of one element (V = T) or of one SIMD batch of elements (V = xsimd::batch<T>), in
// the operation order of torch 1.13's _single_tensor_adam / _single_tensor_adamw (Python scalars
// become T, as in ATen):
//   θ.mul_(1 - lr*wd)                                  (AdamW)
//   g = -g (maximize);  g = g.add(θ, alpha=wd)         (Adam, wd != 0)
//   m.mul_(β1).add_(g, alpha=1-β1);  v.mul_(β2).addcmul_(g, g, value=1-β2)
//   v_max = maximum(v_max, v)                          (amsgrad; NaN wins)
//   denom = (v.sqrt() / sqrt(bias_correction2)).add_(eps)
//   θ.addcdiv_(m, denom, value=-lr/bias_correction1)   (addcdiv: θ + (value*m)/denom)
template <bool kMaximize, bool kAmsgrad, Decay kDecay, class V, class T>
void adam_update(V g, V& theta, V& m, V& v, V& vmax, const AdamScalars<T>& s) {
  if constexpr (kMaximize) g = -g;
  if constexpr (kDecay == Decay::kDecoupled) theta = theta * V(s.decay);
  if constexpr (kDecay == Decay::kCoupled) g = g + V(s.weight_decay) * theta;
  m = m * V(s.beta1);
  m = m + V(s.one_minus_beta1) * g;
  v = v * V(s.beta2);
  v = v + V(s.one_minus_beta2) * g * g;
  V second = v;
  if constexpr (kAmsgrad) {
    vmax = nan_max(vmax, v);
    second = vmax;
  }
  const V denom = root(second) / V(s.bias_correction2_sqrt) + V(s.eps);
  theta = theta + V(s.neg_step_size) * m / denom;
}

// One pass over a parameter's contiguous data: SIMD batches, then the remaining elements. The
// options are template flags, so the loop has no branches.
template <class T, bool kMaximize, bool kAmsgrad, Decay kDecay>
void adam_kernel(std::size_t n, const T* g, T* theta, T* m, T* v, T* vmax, const AdamScalars<T>& s) {
  std::size_t i = 0;
  using B = detail::simd_batch<T>;
  for (; i + B::size <= n; i += B::size) {
    B th = B::load_unaligned(theta + i), mi = B::load_unaligned(m + i), vi = B::load_unaligned(v + i);
    B vm = kAmsgrad ? B::load_unaligned(vmax + i) : B(T(0));
    adam_update<kMaximize, kAmsgrad, kDecay>(B::load_unaligned(g + i), th, mi, vi, vm, s);
    th.store_unaligned(theta + i);
    mi.store_unaligned(m + i);
    vi.store_unaligned(v + i);
    if constexpr (kAmsgrad) vm.store_unaligned(vmax + i);
  }
  for (; i < n; ++i) {
    T vm = kAmsgrad ? vmax[i] : T(0);
    adam_update<kMaximize, kAmsgrad, kDecay>(g[i], theta[i], m[i], v[i], vm, s);
    if constexpr (kAmsgrad) vmax[i] = vm;
  }
}

// One parameter's pointers and its per-step scalars (the step count, so the bias corrections, is
// the parameter's own).
template <class T>
struct AdamTensor {
  const T* g;
  T *theta, *m, *v, *vmax;
  AdamScalars<T> s;
};

// The kernel over every parameter of the list as one flat range (optim/flat_chunks.hpp): one
// fork/join for the whole group, each thread a contiguous run of pieces. Elementwise, and pieces
// split tensors at multiples of the SIMD width, so each element is computed exactly as by one
// pass over its tensor alone.
template <class T, bool kMaximize, bool kAmsgrad, Decay kDecay>
void adam_flat(const std::vector<AdamTensor<T>>& list, const flat::FlatUnits& units) {
  units.parallel_walk([&](std::size_t k, std::size_t i, std::size_t end) {
    const AdamTensor<T>& t = list[k];
    T* vm = kAmsgrad ? t.vmax + i : nullptr;
    adam_kernel<T, kMaximize, kAmsgrad, kDecay>(end - i, t.g + i, t.theta + i, t.m + i, t.v + i, vm, t.s);
  });
}

template <class T, bool kMaximize, bool kAmsgrad>
void adam_dispatch_decay(Decay decay, const std::vector<AdamTensor<T>>& list, const flat::FlatUnits& units) {
  switch (decay) {
    case Decay::kNone:
      return adam_flat<T, kMaximize, kAmsgrad, Decay::kNone>(list, units);
    case Decay::kCoupled:
      return adam_flat<T, kMaximize, kAmsgrad, Decay::kCoupled>(list, units);
    case Decay::kDecoupled:
      return adam_flat<T, kMaximize, kAmsgrad, Decay::kDecoupled>(list, units);
  }
}

// The lists one step builds, kept per thread so that a steady-state step allocates nothing.
template <class T>
struct AdamScratch {
  std::vector<AdamTensor<T>> list;
  std::vector<std::size_t> sizes;
  flat::FlatUnits units;
};

// One step for every parameter of a group that has a gradient; state_of(p) returns the
// parameter's (possibly new) state. The bias corrections are computed in double, as in Python.
// First, serially, each parameter's state and scalars (the states are created and the steps
// counted in parameter order, as before); then one parallel pass over all of them.
template <class T, class StateOf>
void adam_step(ParamGroup<T>& group, const AdamConfig& c, StateOf state_of) {
  AdamScalars<T> s{};
  s.beta1 = static_cast<T>(c.beta1);
  s.one_minus_beta1 = static_cast<T>(1.0 - c.beta1);
  s.beta2 = static_cast<T>(c.beta2);
  s.one_minus_beta2 = static_cast<T>(1.0 - c.beta2);
  s.eps = static_cast<T>(c.eps);
  s.weight_decay = static_cast<T>(c.weight_decay);
  s.decay = static_cast<T>(1.0 - c.lr * c.weight_decay);
  const Decay decay = c.decoupled ? Decay::kDecoupled : (c.weight_decay != 0.0 ? Decay::kCoupled : Decay::kNone);

  thread_local AdamScratch<T> scratch;
  std::vector<AdamTensor<T>>& list = scratch.list;
  list.clear();
  scratch.sizes.clear();
  for (Tensor<T>& p : group.params()) {
    if (!p.has_grad()) continue;
    const Array<T>& grad = p.grad();
    Array<T>& value = p.mutable_value();
    ParamState<T>& state = state_of(p);
    AdamTensor<T> t{};
    t.m = state.zeros_if_absent("exp_avg", value).data();
    t.v = state.zeros_if_absent("exp_avg_sq", value).data();
    t.vmax = c.amsgrad ? state.zeros_if_absent("max_exp_avg_sq", value).data() : nullptr;
    state.step += 1;

    const double step = static_cast<double>(state.step);
    const double bias_correction1 = 1.0 - std::pow(c.beta1, step);
    const double bias_correction2 = 1.0 - std::pow(c.beta2, step);
    t.s = s;
    t.s.neg_step_size = static_cast<T>(-(c.lr / bias_correction1));
    t.s.bias_correction2_sqrt = static_cast<T>(std::sqrt(bias_correction2));
    t.g = grad.data();
    t.theta = value.data();
    list.push_back(t);
    scratch.sizes.push_back(value.size());
  }
  if (list.empty()) return;
  scratch.units.reset(scratch.sizes);

  if (c.maximize) {
    if (c.amsgrad)
      adam_dispatch_decay<T, true, true>(decay, list, scratch.units);
    else
      adam_dispatch_decay<T, true, false>(decay, list, scratch.units);
  } else {
    if (c.amsgrad)
      adam_dispatch_decay<T, false, true>(decay, list, scratch.units);
    else
      adam_dispatch_decay<T, false, false>(decay, list, scratch.units);
  }
}

template <class O>
AdamConfig config_of(const O& o, bool decoupled) {
  return {o.lr(), o.betas()[0], o.betas()[1], o.eps(), o.weight_decay(), o.amsgrad(), o.maximize(), decoupled};
}

}  // namespace

template <class Self>
void AdamFamilyOptions<Self>::validate() const {
  validate_adam(this->optimizer_name(), this->lr(), this->betas(), this->eps(), this->weight_decay());
}

template <class T, class Options, bool kDecoupled>
void AdamFamily<T, Options, kDecoupled>::step_group(ParamGroup<T>& group) {
  const auto config = config_of(static_cast<const Options&>(group.options()), kDecoupled);
  adam_step<T>(group, config, [this](const Tensor<T>& p) -> ParamState<T>& { return this->state_of(p); });
}

template class AdamFamilyOptions<AdamOptions>;
template class AdamFamilyOptions<AdamWOptions>;
template class AdamFamily<float, AdamOptions, false>;
template class AdamFamily<double, AdamOptions, false>;
template class AdamFamily<float, AdamWOptions, true>;
template class AdamFamily<double, AdamWOptions, true>;
template class Adam<float>;
template class Adam<double>;
template class AdamW<float>;
template class AdamW<double>;

}  // namespace xgrad::optim
