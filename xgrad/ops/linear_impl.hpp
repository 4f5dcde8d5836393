// Internal: linear's forward and backward pieces, shared by linear (matmul.cpp) and the fused
// linear + GELU (linear_gelu.cpp). Not part of the API.
#pragma once

#include <cstddef>
#include <functional>

#include <xgrad/backend/bf16.hpp>
#include <xgrad/core/graph.hpp>
#include <xgrad/core/tensor.hpp>

namespace xgrad::detail {

// What a linear forward keeps for its backward's two gemms: x is (rows, in), W (outf, in); the
// gemms run in bf16 when `bf16` (autocast), on operands rounded once (xb, wb) when `packed`.
struct LinearGemms {
  std::size_t rows = 0, in = 0, outf = 0;
  bool bf16 = false, packed = false;
  Bf16Matrix xb, wb;
};

// Checks x (*, in), W (out, in) and b (out) or undefined, naming `op`; returns the output shape (*, out).
template <class T>
Shape linear_output_shape(const char* op, const Tensor<T>& x, const Tensor<T>& weight, const Tensor<T>& bias);

// epilogue(r0, r1, c0, c1): work on the block of rows [r0, r1) and columns [c0, c1) of y just
// computed.
using LinearEpilogue = std::function<void(std::size_t, std::size_t, std::size_t, std::size_t)>;

// y (rows, out) = x W^T + b, block by block: each block is filled with the bias, gets its gemm
// (beta = 1; beta = 0 without a bias), then the epilogue while it is in cache. The blocks are those
// the gemm backend cuts such a product into (gemm.hpp's split: 16-row tiles, or 16-column tiles
// for fp32/fp64 with more columns than rows, from 2^20 multiply-adds), one fork/join in all, each a
// single-threaded call: y has the bits of one gemm call on a bias-filled y. Only bf16's portable
// path (no bf16 matmul here, or the OpenBLAS backend) fills and runs the epilogue by rows over the
// pool before and after its one call.
template <class T>
LinearGemms linear_forward(const Tensor<T>& x, const Tensor<T>& weight, const Tensor<T>& bias, T* y,
                           const LinearEpilogue& epilogue);

// The backward's products for an upstream gradient dy (rows, out): dx = dy W into input 0 and
// dW = dy^T x into input 1, each when needed.
template <class T>
void linear_backward_gemms(Node<T>& out, const LinearGemms& s, const T* dy);

// f(c0, c1) on contiguous column ranges covering [0, cols) of a (rows, cols) pass, split over the
// pool in units of 64 columns (each chunk at least kChunk elements): a column's rows are visited in
// order by one thread, so a sum down the columns has the serial bits at any thread count.
void for_column_blocks(std::size_t rows, std::size_t cols, const std::function<void(std::size_t, std::size_t)>& f);

// db[j] = sum over r of dy[r, j] for j in [c0, c1), the rows added in order from 0.
template <class T>
void sum_rows(const T* dy, std::size_t rows, std::size_t cols, std::size_t c0, std::size_t c1, T* db) {
  for (std::size_t j = c0; j < c1; ++j) db[j] = T(0);
  for (std::size_t r = 0; r < rows; ++r) {
    const T* row = dy + r * cols;
    for (std::size_t j = c0; j < c1; ++j) db[j] += row[j];
  }
}

}  // namespace xgrad::detail
