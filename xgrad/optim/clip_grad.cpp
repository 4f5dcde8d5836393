#include <xgrad/optim/clip_grad.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include <xgrad/optim/flat_chunks.hpp>

namespace xgrad::optim {

namespace {

// The pieces of one reduction: ||g||_p^p (or max |g| for p = infinity) of each unit of
// FlatUnits::kUnit elements, in double.
template <class T>
double unit_partial(const T* d, std::size_t n, double p) {
  if (std::isinf(p)) {
    double m = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double a = std::abs(static_cast<double>(d[i]));
      if (std::isnan(a)) return a;  // NaN wins, as in torch.max
      if (a > m) m = a;
    }
    return m;
  }
  double s = 0;
  if (p == 2.0) {
    for (std::size_t i = 0; i < n; ++i) s += static_cast<double>(d[i]) * static_cast<double>(d[i]);
  } else if (p == 1.0) {
    for (std::size_t i = 0; i < n; ++i) s += std::abs(static_cast<double>(d[i]));
  } else {
    for (std::size_t i = 0; i < n; ++i) s += std::pow(std::abs(static_cast<double>(d[i])), p);
  }
  return s;
}

// ||.||_p from the partials of its units, combined in unit order.
double combine(const double* partial, std::size_t units, double p) {
  if (std::isinf(p)) {
    double m = 0;
    for (std::size_t u = 0; u < units; ++u) {
      if (std::isnan(partial[u])) return partial[u];
      if (partial[u] > m) m = partial[u];
    }
    return m;
  }
  double s = 0;
  for (std::size_t u = 0; u < units; ++u) s += partial[u];
  if (p == 2.0) return std::sqrt(s);
  if (p == 1.0) return s;
  return std::pow(s, 1.0 / p);
}

// ||values||_p of a few values in one serial pass (the total over the per-gradient norms).
template <class T>
double norm_of_values(const T* d, std::size_t n, double p) {
  const double partial = unit_partial(d, n, p);
  return combine(&partial, 1, p);
}

// The gradients of `params` that exist, with their element counts.
template <class T>
struct Gradients {
  std::vector<Array<T>*> grads;
  std::vector<std::size_t> sizes;
  flat::FlatUnits units;
  std::vector<double> partial;  // one per unit
  // A gradient listed twice (a parameter given twice) is changed twice, as in torch: then the
  // passes that write run serially, so that two threads never write the same gradient.
  bool repeats = false;
  std::vector<const Array<T>*> sorted;

  template <class F>
  void walk_writing(const F& fn) const {
    if (repeats)
      units.walk(0, units.units(), fn);
    else
      units.parallel_walk(fn);
  }
};

template <class T>
Gradients<T>& gradients_of(const std::vector<Tensor<T>>& params) {
  thread_local Gradients<T> g;  // reused: a steady-state call allocates nothing
  g.grads.clear();
  g.sizes.clear();
  for (const auto& param : params) {
    if (!param.defined() || !param.has_grad()) continue;
    Tensor<T> p = param;
    Array<T>& grad = p.mutable_grad();
    g.grads.push_back(&grad);
    g.sizes.push_back(grad.size());
  }
  g.units.reset(g.sizes);
  g.sorted.assign(g.grads.begin(), g.grads.end());
  std::sort(g.sorted.begin(), g.sorted.end());
  g.repeats = std::adjacent_find(g.sorted.begin(), g.sorted.end()) != g.sorted.end();
  return g;
}

}  // namespace

// The norm is a parallel reduction with a fixed split (flat_chunks.hpp): one partial per unit of
// each gradient, combined per gradient in unit order, so the result does not depend on the
// thread count. The gradients are then scaled in one parallel pass.
template <class T>
T clip_grad_norm_(const std::vector<Tensor<T>>& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  XGRAD_CHECK(norm_type > 0.0, "clip_grad_norm_: norm_type must be positive or infinity, got ", norm_type);
  // NaN or a negative bound would turn every gradient into NaN or flip its sign without a word;
  // infinity clips nothing (the call then only measures the norm), as in PyTorch.
  XGRAD_CHECK(max_norm >= 0.0, "clip_grad_norm_: max_norm must be a non-negative number (infinity: no "
              "clipping), got ", max_norm);
  Gradients<T>& g = gradients_of(params);
  if (g.grads.empty()) return T(0);

  g.partial.resize(g.units.units());
  g.units.parallel_walk([&](std::size_t k, std::size_t begin, std::size_t end) {
    const T* d = g.grads[k]->data();
    for (std::size_t i = begin; i < end; i += flat::FlatUnits::kUnit)
      g.partial[g.units.unit_of(k, i)] = unit_partial(d + i, std::min(end - i, flat::FlatUnits::kUnit), norm_type);
  });
  // The norm of each gradient, rounded to T as torch's per-tensor norms are, then their norm.
  Array<T> norms = empty_array<T>({g.grads.size()}, "clip_grad_norm_");
  for (std::size_t k = 0; k < g.grads.size(); ++k) {
    const std::size_t u0 = g.units.first_unit(k), u1 = g.units.first_unit(k + 1);
    norms(k) = static_cast<T>(combine(g.partial.data() + u0, u1 - u0, norm_type));
  }
  const T total = static_cast<T>(norm_of_values(norms.data(), norms.size(), norm_type));
  XGRAD_CHECK(!error_if_nonfinite || std::isfinite(total), "clip_grad_norm_: the total norm of order ", norm_type,
              " of the gradients is non-finite (", total, "), so it cannot be clipped; pass "
              "error_if_nonfinite=false to scale the gradients by it anyway");

  // clip_coef = max_norm / (total + 1e-6), clamped to at most 1 (NaN passes through); a factor of
  // exactly 1 would change nothing, so it is not applied.
  T coef = static_cast<T>(max_norm) / (total + static_cast<T>(1e-6));
  if (coef > T(1)) coef = T(1);
  if (coef != T(1)) {
    g.walk_writing([&](std::size_t k, std::size_t begin, std::size_t end) {
      T* d = g.grads[k]->data();
      for (std::size_t i = begin; i < end; ++i) d[i] *= coef;
    });
  }
  return total;
}

template <class T>
void clip_grad_value_(const std::vector<Tensor<T>>& params, double clip_value) {
  XGRAD_CHECK(clip_value >= 0.0, "clip_grad_value_: clip_value must be a non-negative number, got ", clip_value);
  const T hi = static_cast<T>(clip_value);
  const T lo = static_cast<T>(-clip_value);
  Gradients<T>& g = gradients_of(params);
  g.walk_writing([&](std::size_t k, std::size_t begin, std::size_t end) {
    T* d = g.grads[k]->data();
    // torch.clamp: NaN stays NaN
    for (std::size_t i = begin; i < end; ++i) d[i] = d[i] < lo ? lo : (d[i] > hi ? hi : d[i]);
  });
}

template float clip_grad_norm_<float>(const std::vector<Tensor<float>>&, double, double, bool);
template double clip_grad_norm_<double>(const std::vector<Tensor<double>>&, double, double, bool);
template void clip_grad_value_<float>(const std::vector<Tensor<float>>&, double);
template void clip_grad_value_<double>(const std::vector<Tensor<double>>&, double);

}  // namespace xgrad::optim
