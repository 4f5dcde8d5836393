// Internal helpers for ops that broadcast their operands NumPy-style (not part of the API).
#pragma once

#include <algorithm>
#include <vector>

#include <xgrad/backend/parallel_loops.hpp>
#include <xgrad/backend/strided.hpp>
#include <xgrad/core/tensor.hpp>

namespace xgrad::detail {

// NumPy broadcasting of two shapes; throws naming op and both shapes.
inline Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const std::size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t da = k < a.size() ? a[a.size() - 1 - k] : 1;
    const std::size_t db = k < b.size() ? b[b.size() - 1 - k] : 1;
    XGRAD_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b,
                " cannot be broadcast together (dimension ", n - 1 - k, ": ", da, " vs ", db, ")");
    out[n - 1 - k] = da == 1 ? db : da;
  }
  return out;
}

// Row-major strides of `shape` seen inside broadcast shape `out`: 0 on broadcast dims.
inline std::vector<std::size_t> broadcast_strides(const Shape& shape, const Shape& out) {
  std::vector<std::size_t> strides(out.size(), 0);
  std::size_t stride = 1;
  for (std::size_t k = 0; k < shape.size(); ++k) {
    const std::size_t d = shape.size() - 1 - k;
    if (shape[d] != 1) strides[out.size() - 1 - k] = stride;
    stride *= shape[d];
  }
  return strides;
}

// out[i] = f(a[i'], b[i'']) with a and b broadcast to a common shape. Split across the pool in
// blocks of elements (same shapes) or ranges of rows (broadcast); serial below 64K elements.
template <class T, class F>
Array<T> binary_map(const Array<T>& a, const Array<T>& b, const char* op, F f) {
  if (a.shape() == b.shape()) {
    Array<T> out = empty_array<T>(a.shape(), op);
    const T* pa = a.data();
    const T* pb = b.data();
    T* po = out.data();
    parallel_blocks(out.size(), [&](std::size_t i0, std::size_t i1) {
      for (std::size_t i = i0; i < i1; ++i) po[i] = f(pa[i], pb[i]);
    });
    return out;
  }
  const Shape sa = shape_of(a), sb = shape_of(b);
  const Shape so = broadcast_shapes(sa, sb, op);
  const auto ta = broadcast_strides(sa, so), tb = broadcast_strides(sb, so);
  Array<T> out = empty_array<T>(so, op);
  const T* pa = a.data();
  const T* pb = b.data();
  T* po = out.data();
  parallel_for_each_index(so, ta, tb,
                          [&](std::size_t i, std::size_t ia, std::size_t ib) { po[i] = f(pa[ia], pb[ib]); });
  return out;
}

}  // namespace xgrad::detail
