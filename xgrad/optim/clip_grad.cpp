#include <xgrad/optim/clip_grad.hpp>

#include <cmath>

namespace xgrad::optim {

namespace {

// ||g||_p of one gradient, accumulated in double.
template <class T>
double norm_of(const Array<T>& g, double p) {
  const T* d = g.data();
  const std::size_t n = g.size();
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
    return std::sqrt(s);
  }
  if (p == 1.0) {
    for (std::size_t i = 0; i < n; ++i) s += std::abs(static_cast<double>(d[i]));
    return s;
  }
  for (std::size_t i = 0; i < n; ++i) s += std::pow(std::abs(static_cast<double>(d[i])), p);
  return std::pow(s, 1.0 / p);
}

}  // namespace

template <class T>
T clip_grad_norm_(const std::vector<Tensor<T>>& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  XGRAD_CHECK(norm_type > 0.0, "clip_grad_norm_: norm_type must be positive or infinity, got ", norm_type);
  // NaN or a negative bound would turn every gradient into NaN or flip its sign without a word;
  // infinity clips nothing (the call then only measures the norm), as in PyTorch.
  XGRAD_CHECK(max_norm >= 0.0, "clip_grad_norm_: max_norm must be a non-negative number (infinity: no "
              "clipping), got ", max_norm);
  std::vector<Tensor<T>> with_grad;
  for (const auto& p : params)
    if (p.defined() && p.has_grad()) with_grad.push_back(p);
  if (with_grad.empty()) return T(0);

  // The norm of each gradient, rounded to T as torch's per-tensor norms are, then their norm.
  Array<T> norms = empty_array<T>({with_grad.size()}, "clip_grad_norm_");
  for (std::size_t k = 0; k < with_grad.size(); ++k) norms(k) = static_cast<T>(norm_of(with_grad[k].grad(), norm_type));
  const T total = static_cast<T>(norm_of(norms, norm_type));
  XGRAD_CHECK(!error_if_nonfinite || std::isfinite(total), "clip_grad_norm_: the total norm of order ", norm_type,
              " of the gradients is non-finite (", total, "), so it cannot be clipped; pass "
              "error_if_nonfinite=false to scale the gradients by it anyway");

  // clip_coef = max_norm / (total + 1e-6), clamped to at most 1 (NaN passes through); a factor of
  // exactly 1 would change nothing, so it is not applied.
  T coef = static_cast<T>(max_norm) / (total + static_cast<T>(1e-6));
  if (coef > T(1)) coef = T(1);
  if (coef != T(1)) {
    for (auto& p : with_grad) {
      Array<T>& g = p.mutable_grad();
      T* d = g.data();
      for (std::size_t i = 0, n = g.size(); i < n; ++i) d[i] *= coef;
    }
  }
  return total;
}

template <class T>
void clip_grad_value_(const std::vector<Tensor<T>>& params, double clip_value) {
  XGRAD_CHECK(clip_value >= 0.0, "clip_grad_value_: clip_value must be a non-negative number, got ", clip_value);
  const T hi = static_cast<T>(clip_value);
  const T lo = static_cast<T>(-clip_value);
  for (const auto& param : params) {
    if (!param.defined() || !param.has_grad()) continue;
    Tensor<T> p = param;
    Array<T>& g = p.mutable_grad();
    T* d = g.data();
    // torch.clamp: NaN stays NaN
    for (std::size_t i = 0, n = g.size(); i < n; ++i) d[i] = d[i] < lo ? lo : (d[i] > hi ? hi : d[i]);
  }
}

template float clip_grad_norm_<float>(const std::vector<Tensor<float>>&, double, double, bool);
template double clip_grad_norm_<double>(const std::vector<Tensor<double>>&, double, double, bool);
template void clip_grad_value_<float>(const std::vector<Tensor<float>>&, double);
template void clip_grad_value_<double>(const std::vector<Tensor<double>>&, double);

}  // namespace xgrad::optim
