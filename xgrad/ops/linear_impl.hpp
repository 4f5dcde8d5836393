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

// y (rows, out) = x W^T + b, block by block of rows: each block is filled with the bias, gets its
// gemm (beta = 1; beta = 0 without a bias), then epilogue(r0, r1) on its rows while they are in
// cache. The blocks are the 16-row tiles the gemm backend cuts such a product into (gemm.cpp,
// onednn.cpp), one fork/join in all, so y has the bits of one gemm call on a bias-filled y. Where
// the backend would cut columns instead (more columns than rows, fp32/fp64), the bias fill and the
// epilogue run over the pool by rows before and after that one call.
template <class T>
LinearGemms linear_forward(const Tensor<T>& x, const Tensor<T>& weight, const Tensor<T>& bias, T* y,
                           const std::function<void(std::size_t, std::size_t)>& epilogue);

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
