// Internal: row-major C = alpha * op(A) op(B) + beta * C, float32 through oneDNN (dnnl_sgemm) or
// OpenBLAS (cblas_sgemm) as get_gemm_backend() says, float64 through OpenBLAS dgemm, with
// op(X) = X or X^T chosen by a flag, so transposes are never materialized.
// op(A): (m, k), op(B): (k, n), C: (m, n); lda/ldb/ldc are the row strides of A, B, C as stored.
// Implemented in matmul.cpp, the one translation unit that includes xtensor-blas.
#pragma once

#include <cstddef>

namespace xgrad::detail {

template <class T>
void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
          std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc);

}  // namespace xgrad::detail
