// Internal: GELU's kernels, shared by gelu (elementwise.cpp) and the fused linear + GELU
// (linear_gelu.cpp). Include before any xtensor header (simd.hpp's pragma).
#pragma once

#include <xgrad/backend/simd.hpp>

#include <cmath>
#include <cstddef>

#include <xgrad/core/tensor.hpp>

namespace xgrad::detail {

// GELU over contiguous data in xsimd batches (xsimd's erf, exp and tanh agree with the C library to
// ~2e-7 relative in float and ~1e-14 in double).
//   exact:  y = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2));   dy/dx = Phi(x) + x phi(x),
//           phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
//   tanh:   y = 0.5 x (1 + t),  t = tanh(u),  u = sqrt(2/pi) (x + 0.044715 x^3)
//           dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// Backward (kBackward) writes out = g * dy/dx (out may be g); forward writes out = y (g unused).
// The last n % W elements go through one zero-padded batch, so every element takes the same
// instructions wherever it sits: the result is a function of the element alone, and a pass over a
// row block (linear_gelu's epilogue) gives the bits of one pass over the whole array.
template <class T, bool kTanh, bool kBackward>
void gelu_kernel(const T* x, const T* g, T* out, std::size_t n) {
  using B = simd_batch<T>;
  const T inv_sqrt2 = T(M_SQRT1_2);
  const T inv_sqrt_2pi = T(0.5 * M_2_SQRTPI * M_SQRT1_2);  // 1/sqrt(2 pi)
  const T k = T(M_2_SQRTPI * M_SQRT1_2);                   // sqrt(2/pi)
  const T c = T(0.044715);
  const T half(0.5), one(1), three_c = 3 * c;
  auto f = [&](const B& v, const B& dy) -> B {
    if constexpr (kTanh) {
      const B t = xsimd::tanh(B(k) * (v + B(c) * v * v * v));
      if constexpr (!kBackward) {
        return B(half) * v * (B(one) + t);
      } else {
        return dy * (B(half) * (B(one) + t) + B(half) * v * (B(one) - t * t) * B(k) * (B(one) + B(three_c) * v * v));
      }
    } else {
      const B e = xsimd::erf(v * B(inv_sqrt2));
      if constexpr (!kBackward) {
        return B(half) * v * (B(one) + e);
      } else {
        return dy * (B(half) * (B(one) + e) + v * B(inv_sqrt_2pi) * xsimd::exp(B(-half) * v * v));
      }
    }
  };
  constexpr std::size_t W = B::size;
  std::size_t i = 0;
  for (; i + W <= n; i += W) {
    const B dy = kBackward ? B::load_unaligned(g + i) : B(T(0));
    f(B::load_unaligned(x + i), dy).store_unaligned(out + i);
  }
  if (i < n) {  // the tail, zero-padded to one batch
    alignas(64) T xs[W] = {}, gs[W] = {}, ys[W];
    for (std::size_t j = i; j < n; ++j) {
      xs[j - i] = x[j];
      if constexpr (kBackward) gs[j - i] = g[j];
    }
    f(B::load_aligned(xs), B::load_aligned(gs)).store_aligned(ys);
    for (std::size_t j = i; j < n; ++j) out[j] = ys[j - i];
  }
}

template <class T, bool kBackward>
void gelu_kernel(bool tanh_form, const T* x, const T* g, T* out, std::size_t n) {
  if (tanh_form)
    gelu_kernel<T, true, kBackward>(x, g, out, n);
  else
    gelu_kernel<T, false, kBackward>(x, g, out, n);
}

// gelu_backward(dy, x) = dy * gelu'(x), an op of its own so that it can be differentiated again
// (elementwise.cpp); gelu's and linear_gelu's GradFormula.
template <class T>
Tensor<T> gelu_backward(const Tensor<T>& dy, const Tensor<T>& x, bool tanh_form);

}  // namespace xgrad::detail
