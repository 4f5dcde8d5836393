// The memory-bound loops of the elementwise, broadcast, reduction and indexing ops on the pool
// (internal, not part of the API). Each splits its work into fixed units that do not depend on the
// thread count, so every element is computed by the same instructions (the same SIMD or scalar
// path, the same order of additions) whatever the count: results are bit for bit the same at 1,
// 2 or 16 threads. Work below about kSerialBelow elements runs inline on the caller (no fork/join).
//
//   parallel_blocks(n, f)                    f(begin, end) over [0, n), blocks of kBlock elements
//   parallel_for_each_index(shape, s..., f)  for_each_index split by whole rows of `shape`
//   parallel_reduce_visit(shape, out, f)     f(i, o) for each element i of a reduction onto o,
//                                            split by output: each o sees its i in the same
//                                            (row-major) order as a serial walk, so any fold
//                                            (a sum, a max, a first argmax) gives the serial result
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include <xgrad/backend/parallel.hpp>
#include <xgrad/backend/strided.hpp>

namespace xgrad::detail {

// A block is a multiple of every SIMD width (so a block boundary never moves an element between
// a vector body and a scalar tail); a thread takes at least kChunk elements, so work below
// 2 * kChunk (64K elements, 256 KiB of float) stays on the caller. A pointwise pass over 32K
// float runs in about 10-20 us on one core: below the cost of waking a worker on a busy machine
// (an add of (512, 64) at 2 threads ran 3x slower split than inline, bench_train_step small).
constexpr std::size_t kBlock = 4096;
constexpr std::size_t kChunk = 32768;
constexpr std::size_t kSerialBelow = 2 * kChunk;

// The grain, in units of `unit` elements each, that gives every chunk at least kChunk elements.
inline std::size_t grain_for_units(std::size_t unit) {
  unit = std::max<std::size_t>(unit, 1);
  return std::max<std::size_t>(1, (kChunk + unit - 1) / unit);
}

// f(begin, end) on contiguous ranges covering [0, n), each a whole number of kBlock blocks
// (the last one ragged); parallel from kSerialBelow elements.
template <class F>
void parallel_blocks(std::size_t n, const F& f) {
  if (n < kSerialBelow) {
    if (n > 0) f(std::size_t(0), n);
    return;
  }
  parallel_for((n + kBlock - 1) / kBlock, kChunk / kBlock,
               [&](std::size_t b0, std::size_t b1) { f(b0 * kBlock, std::min(b1 * kBlock, n)); });
}

// for_each_index(shape, strides_0, ..., strides_{K-1}, f) split into ranges of whole rows (runs
// along the last dim; a 1-D shape into blocks of kBlock): for an f that writes element i only
// (any elementwise map), the same result as the serial walk.
template <class... Args>
void parallel_for_each_index(const Shape& shape, Args&&... args) {
  constexpr std::size_t K = sizeof...(Args) - 1;
  const std::size_t n = numel(shape);
  if (n < kSerialBelow || shape.empty()) {
    for_each_index(shape, std::forward<Args>(args)...);
    return;
  }
  const auto all = std::forward_as_tuple(args...);
  auto& f = std::get<K>(all);
  const std::size_t nd = shape.size(), inner = shape[nd - 1], rows = n / inner;
  const strided::StridePtrs<K> strides = strided::stride_ptrs(all, std::make_index_sequence<K>());
  strided::Offsets<K> step;
  for (std::size_t k = 0; k < K; ++k) step[k] = strides[k][nd - 1];
  if (nd == 1) {  // one row: blocks of it
    parallel_blocks(n, [&](std::size_t i0, std::size_t i1) {
      strided::Offsets<K> off;
      for (std::size_t k = 0; k < K; ++k) off[k] = i0 * step[k];
      strided::call_row(f, i0, i1 - i0, off, step, std::make_index_sequence<K>());
    });
    return;
  }
  parallel_for(rows, grain_for_units(inner), [&](std::size_t r0, std::size_t r1) {
    strided::walk_rows<K>(shape, strides, r0, r1, [&](std::size_t r, const strided::Offsets<K>& off) {
      strided::call_row(f, r * inner, inner, off, step, std::make_index_sequence<K>());
    });
  });
}

// A reduction's index space merged into at most three runs of dims, (K1, R, K2): K1 and K2 kept
// (output dims), R reduced; input element (a, r, b) at (a * R + r) * K2 + b goes to output
// a * K2 + b. False when the dims do not merge so (a kept dim between two reduced runs, or a
// kept dim whose output stride is not row-major: a permuted output).
struct ReduceRuns {
  std::size_t k1 = 1, r = 1, k2 = 1;
};

inline bool reduce_runs(const Shape& shape, const std::vector<std::size_t>& out_stride, ReduceRuns& runs) {
  // Runs of (kept?, size, stride of the run's last dim), size-1 dims dropped.
  struct Run {
    bool kept;
    std::size_t size, stride;
  };
  std::vector<Run> rs;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    const bool kept = out_stride[d] != 0;
    if (!rs.empty() && rs.back().kept == kept && (!kept || rs.back().stride == out_stride[d] * shape[d])) {
      rs.back().size *= shape[d];
      rs.back().stride = out_stride[d];
      continue;
    }
    rs.push_back({kept, shape[d], out_stride[d]});
  }
  std::size_t at = 0;
  runs = ReduceRuns{};
  if (at < rs.size() && rs[at].kept) runs.k1 = rs[at++].size;
  if (at < rs.size() && !rs[at].kept) runs.r = rs[at++].size;
  if (at < rs.size() && rs[at].kept) runs.k2 = rs[at++].size;
  if (at != rs.size()) return false;
  // The output must be row-major over (K1, K2): K2's stride 1, K1's stride K2.
  std::size_t expect = 1;
  for (std::size_t i = rs.size(); i-- > 0;) {
    if (!rs[i].kept) continue;
    if (rs[i].stride != expect) return false;
    expect *= rs[i].size;
  }
  return true;
}

// f(i, o) for every element i of `shape` (a reduction's index space), o = sum_d idx[d] *
// out_stride[d] its output. Each output's elements arrive in row-major order, as in the serial
// for_each_index(shape, out_stride, f); the work is split by output (rows of K1 x column blocks
// of K2), so f may fold into o without a race. A full reduction (one output) and index spaces
// that do not merge into (K1, R, K2) run serially.
template <class F>
void parallel_reduce_visit(const Shape& shape, const std::vector<std::size_t>& out_stride, const F& f) {
  ReduceRuns runs;
  const std::size_t n = numel(shape);
  if (n < kSerialBelow || !reduce_runs(shape, out_stride, runs) || runs.k1 * runs.k2 < 2) {
    for_each_index(shape, out_stride, [&](std::size_t i, std::size_t o) { f(i, o); });
    return;
  }
  const std::size_t K1 = runs.k1, R = runs.r, K2 = runs.k2;
  // Column blocks of 16 outputs (a 64-byte line of float): a unit is (a, column block).
  constexpr std::size_t kCols = 16;
  const std::size_t col_blocks = (K2 + kCols - 1) / kCols;
  parallel_for(K1 * col_blocks, grain_for_units(R * std::min(K2, kCols)), [&](std::size_t u0, std::size_t u1) {
    // Whole column ranges of one a at a time: a unit range [u0, u1) may span several a.
    for (std::size_t u = u0; u < u1;) {
      const std::size_t a = u / col_blocks, cb = u % col_blocks;
      const std::size_t cb_end = std::min(col_blocks, cb + (u1 - u));
      const std::size_t b0 = cb * kCols, b1 = std::min(K2, cb_end * kCols);
      for (std::size_t r = 0; r < R; ++r) {
        const std::size_t base = (a * R + r) * K2;
        for (std::size_t b = b0; b < b1; ++b) f(base + b, a * K2 + b);
      }
      u += cb_end - cb;
    }
  });
}

}  // namespace xgrad::detail
