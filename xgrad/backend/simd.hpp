// Internal: row kernels over contiguous float/double data with xsimd batches (exp ~20x faster
// than a scalar std::exp loop with AVX-512). Reductions are in T, lane-wise, then summed across
// lanes: results may differ from a sequential loop in the last bits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

// GCC 12 flags its own AVX-512 intrinsics (_mm512_undefined_*) as maybe-uninitialized. The
// pragma only holds where those intrinsics are first parsed: include this header before any
// xtensor header in a translation unit.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <xsimd/xsimd.hpp>
#pragma GCC diagnostic pop

namespace xgrad::detail {

template <class T>
using simd_batch = xsimd::batch<T>;

// max_j x[j] (-inf for n = 0).
template <class T>
T simd_max(const T* x, std::size_t n) {
  using B = simd_batch<T>;
  constexpr std::size_t W = B::size;
  std::size_t j = 0;
  T m = -std::numeric_limits<T>::infinity();
  if (n >= W) {
    B acc = B::load_unaligned(x);
    for (j = W; j + W <= n; j += W) acc = xsimd::max(acc, B::load_unaligned(x + j));
    alignas(64) T lanes[W];
    acc.store_aligned(lanes);
    for (std::size_t l = 0; l < W; ++l) m = std::max(m, lanes[l]);
  }
  for (; j < n; ++j) m = std::max(m, x[j]);
  return m;
}

// y[j] = exp(x[j] - shift); returns sum_j y[j]. y may alias x.
template <class T>
T simd_exp_sub_sum(const T* x, T shift, T* y, std::size_t n) {
  using B = simd_batch<T>;
  constexpr std::size_t W = B::size;
  const B s(shift);
  B acc(T(0));
  std::size_t j = 0;
  for (; j + W <= n; j += W) {
    const B e = xsimd::exp(B::load_unaligned(x + j) - s);
    e.store_unaligned(y + j);
    acc += e;
  }
  T total = xsimd::hadd(acc);
  for (; j < n; ++j) total += (y[j] = std::exp(x[j] - shift));
  return total;
}

// sum_j exp(x[j] - shift)
template <class T>
T simd_sum_exp_sub(const T* x, T shift, std::size_t n) {
  using B = simd_batch<T>;
  constexpr std::size_t W = B::size;
  const B s(shift);
  B acc(T(0));
  std::size_t j = 0;
  for (; j + W <= n; j += W) acc += xsimd::exp(B::load_unaligned(x + j) - s);
  T total = xsimd::hadd(acc);
  for (; j < n; ++j) total += std::exp(x[j] - shift);
  return total;
}

// sum_j a[j] * b[j]
template <class T>
T simd_dot(const T* a, const T* b, std::size_t n) {
  using B = simd_batch<T>;
  constexpr std::size_t W = B::size;
  B acc(T(0));
  std::size_t j = 0;
  for (; j + W <= n; j += W) acc = xsimd::fma(B::load_unaligned(a + j), B::load_unaligned(b + j), acc);
  T total = xsimd::hadd(acc);
  for (; j < n; ++j) total += a[j] * b[j];
  return total;
}

// sum_j a[j]
template <class T>
T simd_sum(const T* a, std::size_t n) {
  using B = simd_batch<T>;
  constexpr std::size_t W = B::size;
  B acc(T(0));
  std::size_t j = 0;
  for (; j + W <= n; j += W) acc += B::load_unaligned(a + j);
  T total = xsimd::hadd(acc);
  for (; j < n; ++j) total += a[j];
  return total;
}

// out[j] = a[j] - c * exp(b[j])   (the log_softmax backward: dx = dy - exp(y) sum(dy))
template <class T>
void simd_sub_scaled_exp(const T* a, T c, const T* b, T* out, std::size_t n) {
  using B = simd_batch<T>;
  constexpr std::size_t W = B::size;
  const B cb(c);
  std::size_t j = 0;
  for (; j + W <= n; j += W)
    xsimd::fnma(cb, xsimd::exp(B::load_unaligned(b + j)), B::load_unaligned(a + j)).store_unaligned(out + j);
  for (; j < n; ++j) out[j] = a[j] - c * std::exp(b[j]);
}

}  // namespace xgrad::detail
