// The one strided index walker (internal, not part of the API): visits a row-major index space
// while carrying the offset of the current element in K other arrays, each seen through its own
// element strides (0 on broadcast dims). Every op that broadcasts, un-broadcasts, permutes,
// reduces or batches walks its elements with it, and the product of a shape is numel() below.
//
//   // y (2, 3) = a (2, 1) + b (3): a's strides (1, 0), b's (0, 1)
//   for_each_index(shape, stride_a, stride_b, [&](std::size_t i, std::size_t ia, std::size_t ib) {
//     y[i] = a[ia] + b[ib];
//   });
//
// The odometer runs over the outer dims only; the last dim is a tight loop that adds its stride.
#pragma once

#include <array>
#include <cstddef>
#include <tuple>
#include <utility>
#include <vector>

#include <xgrad/base/check.hpp>

namespace xgrad::detail {

// Product of shape[begin, end): how many elements that block of dims holds (1 when begin >= end).
inline std::size_t numel(const Shape& shape, std::size_t begin, std::size_t end) {
  std::size_t n = 1;
  for (std::size_t d = begin; d < end; ++d) n *= shape[d];
  return n;
}

inline std::size_t numel(const Shape& shape) { return numel(shape, 0, shape.size()); }

// Rows of a row-major shape: runs along its last dim (a 0-d or 1-D shape is one row).
inline std::size_t row_count(const Shape& shape) {
  return shape.size() < 2 ? 1 : numel(shape, 0, shape.size() - 1);
}

namespace strided {

template <std::size_t K>
using Offsets = std::array<std::size_t, K>;
template <std::size_t K>
using StridePtrs = std::array<const std::size_t*, K>;

// f(i, off[0], ..., off[K-1])
template <class F, std::size_t K, std::size_t... Ks>
inline void call(F& f, std::size_t i, const Offsets<K>& off, std::index_sequence<Ks...>) {
  f(i, off[Ks]...);
}

// f(base + j, off[0] + j * step[0], ..., off[K-1] + j * step[K-1]) for j in [0, n)
template <class F, std::size_t K, std::size_t... Ks>
inline void call_row(F& f, std::size_t base, std::size_t n, const Offsets<K>& off, const Offsets<K>& step,
                     std::index_sequence<Ks...>) {
  for (std::size_t j = 0; j < n; ++j) f(base + j, off[Ks] + j * step[Ks]...);
}

// Calls row(r, off) for rows r in [first, last) of `shape` (first < last <= row_count(shape)),
// off[k] = sum over the outer dims d of idx[d] * strides[k][d]: operand k's offset of the row's
// first element. The odometer starts at `first`, so a thread can take any range of rows.
template <std::size_t K, class Row>
void walk_rows(const Shape& shape, const StridePtrs<K>& strides, std::size_t first, std::size_t last, Row&& row) {
  Offsets<K> off{};
  if (shape.size() < 2) {  // a single row
    for (std::size_t r = first; r < last; ++r) row(r, off);
    return;
  }
  const std::size_t outer = shape.size() - 1;
  std::vector<std::size_t> idx(outer, 0);
  for (std::size_t d = outer, rest = first; d-- > 0; rest /= shape[d]) {
    idx[d] = rest % shape[d];
    for (std::size_t k = 0; k < K; ++k) off[k] += idx[d] * strides[k][d];
  }
  for (std::size_t r = first; r < last; ++r) {
    row(r, off);
    for (std::size_t d = outer; d-- > 0;) {
      if (++idx[d] < shape[d]) {
        for (std::size_t k = 0; k < K; ++k) off[k] += strides[k][d];
        break;
      }
      for (std::size_t k = 0; k < K; ++k) off[k] -= strides[k][d] * (idx[d] - 1);
      idx[d] = 0;
    }
  }
}

// The data of the first K arguments (the stride vectors; the callback comes last).
template <class Tuple, std::size_t... Ks>
StridePtrs<sizeof...(Ks)> stride_ptrs(const Tuple& args, std::index_sequence<Ks...>) {
  return {std::get<Ks>(args).data()...};
}

}  // namespace strided

// for_each_row(shape, first, last, strides_0, ..., strides_{K-1}, f):
// f(r, off_0, ..., off_{K-1}) for each row r in [first, last) of `shape`, off_k being the offset
// in operand k of the row's first element; the caller loops along the row with the last stride.
// Each strides_k is a std::vector<std::size_t> of shape.size() element strides.
template <class... Args>
void for_each_row(const Shape& shape, std::size_t first, std::size_t last, Args&&... args) {
  constexpr std::size_t K = sizeof...(Args) - 1;
  const auto all = std::forward_as_tuple(args...);
  auto& f = std::get<K>(all);
  if (first >= last) return;
  strided::walk_rows<K>(shape, strided::stride_ptrs(all, std::make_index_sequence<K>()), first, last,
                        [&](std::size_t r, const strided::Offsets<K>& off) {
                          strided::call(f, r, off, std::make_index_sequence<K>());
                        });
}

// for_each_index(shape, strides_0, ..., strides_{K-1}, f):
// f(i, off_0, ..., off_{K-1}) for every element of a row-major array of `shape`, in order: i its
// flat index, off_k = sum_d idx[d] * strides_k[d] its offset in operand k. Nothing is called
// when a dim is 0; a 0-d shape is one element (i = 0, every off_k = 0).
template <class... Args>
void for_each_index(const Shape& shape, Args&&... args) {
  constexpr std::size_t K = sizeof...(Args) - 1;
  const auto all = std::forward_as_tuple(args...);
  auto& f = std::get<K>(all);
  const std::size_t n = numel(shape);
  if (n == 0) return;
  if (shape.empty()) {
    strided::call(f, 0, strided::Offsets<K>{}, std::make_index_sequence<K>());
    return;
  }
  const std::size_t nd = shape.size(), inner = shape[nd - 1];
  const strided::StridePtrs<K> strides = strided::stride_ptrs(all, std::make_index_sequence<K>());
  // Set unconditionally: a step that might stay 0 keeps GCC from vectorizing the row loop.
  strided::Offsets<K> step;
  for (std::size_t k = 0; k < K; ++k) step[k] = strides[k][nd - 1];
  strided::walk_rows<K>(shape, strides, 0, n / inner, [&](std::size_t r, const strided::Offsets<K>& off) {
    strided::call_row(f, r * inner, inner, off, step, std::make_index_sequence<K>());
  });
}

}  // namespace xgrad::detail
