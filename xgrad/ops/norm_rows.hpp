// Internal: the row machinery LayerNorm and RMSNorm share (layer_norm.cpp, rms_norm.cpp): rows of
// float or double data read as xsimd batches of doubles (statistics accumulate in double), the
// split of rows across threads, and a weight's gradient summed from per-piece partial sums.
// Include it first in a translation unit: simd.hpp's pragma must cover xsimd wherever xtensor
// includes it.
#pragma once

#include <xgrad/backend/simd.hpp>

#include <algorithm>
#include <cstddef>
#include <vector>

#include <xgrad/backend/parallel.hpp>
#include <xgrad/core/graph.hpp>

namespace xgrad::detail::norm_rows {

using DB = xsimd::batch<double>;
inline constexpr std::size_t kW = DB::size;

// A batch of doubles from / to kW values of T. xsimd 8 converts float <-> double one lane at a
// time through memory; with AVX the conversion is one instruction.
inline DB load_d(const double* p) { return DB::load_unaligned(p); }
inline void store_d(const DB& b, double* p) { b.store_unaligned(p); }
inline DB load_d(const float* p) {
#if defined(__AVX512F__)
  if constexpr (kW == 8) return DB(_mm512_cvtps_pd(_mm256_loadu_ps(p)));
#elif defined(__AVX__)
  if constexpr (kW == 4) return DB(_mm256_cvtps_pd(_mm_loadu_ps(p)));
#endif
  return DB::load_unaligned(p);
}
inline void store_d(const DB& b, float* p) {
#if defined(__AVX512F__)
  if constexpr (kW == 8) return _mm256_storeu_ps(p, _mm512_cvtpd_ps(b));
#elif defined(__AVX__)
  if constexpr (kW == 4) return _mm_storeu_ps(p, _mm256_cvtpd_ps(b));
#endif
  b.store_unaligned(p);
}

// The sum of a batch's lanes in xsimd::hadd's order (8 lanes: the upper half added to the lower,
// then (l0 + l1) + (l2 + l3)), through memory: GCC 12 inlines hadd's AVX-512 intrinsics into a
// false -Wuninitialized here (its bug 105593).
inline double sum_lanes(const DB& b) {
  alignas(64) double l[kW];
  b.store_aligned(l);
  if constexpr (kW == 8) {
    for (std::size_t i = 0; i < 4; ++i) l[i] = l[i + 4] + l[i];
    return (l[0] + l[1]) + (l[2] + l[3]);
  } else if constexpr (kW == 4) {
    return (l[0] + l[1]) + (l[2] + l[3]);
  } else {
    double total = 0;
    for (std::size_t i = 0; i < kW; ++i) total += l[i];
    return total;
  }
}

// sum_j f(j) over a row of n: f maps a lane start j to a batch (full batches) or a double (tail).
template <class FB, class FS>
double row_sum(std::size_t n, FB fb, FS fs) {
  DB acc(0.0);
  std::size_t j = 0;
  for (; j + kW <= n; j += kW) acc += fb(j);
  double total = sum_lanes(acc);
  for (; j < n; ++j) total += fs(j);
  return total;
}

// One row of a forward: y = (x - m) * rs [* w] [+ b] (RMSNorm: m = 0, which leaves x exact, and no b).
template <class T>
void normalize_row(const T* x, const T* w, const T* b, T* y, double m, double rs, std::size_t n) {
  const DB mb(m), rb(rs);
  std::size_t j = 0;
  for (; j + kW <= n; j += kW) {
    DB o = (load_d(x + j) - mb) * rb;
    if (w) o *= load_d(w + j);
    if (b) o += load_d(b + j);
    store_d(o, y + j);
  }
  for (; j < n; ++j) {
    double o = (x[j] - m) * rs;
    if (w) o *= w[j];
    if (b) o += b[j];
    y[j] = static_cast<T>(o);
  }
}

// Rows are split across threads in pieces of at least ~16K elements, so that small inputs stay on
// one thread. The count depends only on the shape and the thread count (the backward sums dw and
// db per piece, then across pieces in order).
inline std::size_t row_pieces(std::size_t rows, std::size_t D) {
  const std::size_t min_rows = std::max<std::size_t>(1, (std::size_t(1) << 14) / std::max<std::size_t>(D, 1));
  return std::max<std::size_t>(1, std::min<std::size_t>(get_num_threads(), rows / min_rows));
}

// A weight's or bias's gradient from its per-piece partial sums v (pieces, D), in double, added in
// piece order (the same bits at any thread count), as an Array of input `input`'s shape.
template <class T>
Array<T> sum_pieces(const Node<T>& node, const std::vector<double>& v, std::size_t pieces, std::size_t D, int input,
                    const char* who) {
  Array<T> a = empty_array<T>(node.input_shape(static_cast<std::size_t>(input)), who);
  T* pa = a.data();
  for (std::size_t j = 0; j < D; ++j) {
    double sum = v[j];
    for (std::size_t p = 1; p < pieces; ++p) sum += v[p * D + j];
    pa[j] = static_cast<T>(sum);
  }
  return a;
}

}  // namespace xgrad::detail::norm_rows
