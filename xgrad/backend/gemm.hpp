// Internal: row-major C = alpha * op(A) op(B) + beta * C, float32 through oneDNN (dnnl_sgemm) or
// OpenBLAS (cblas_sgemm) as get_gemm_backend() says, float64 through OpenBLAS dgemm, with
// op(X) = X or X^T chosen by a flag, so transposes are never materialized.
// op(A): (m, k), op(B): (k, n), C: (m, n); lda/ldb/ldc are the row strides of A, B, C as stored.
// Implemented in gemm.cpp, the one translation unit that includes xtensor-blas. Large products are
// cut into row (or column) blocks over xgrad's pool (parallel.hpp), one single-threaded call each,
// so results are deterministic for a given thread count.
#pragma once

#include <cstddef>
#include <type_traits>

#include <xgrad/backend/bf16.hpp>

namespace xgrad::detail {

// How a product is split over the pool, by gemm (float32, float64) and oneDNN's bf16 matmul, and
// by linear's forward, which runs its bias fill and epilogue on the same blocks: from
// kGemmSplitMinMacs multiply-adds (about 1M), into blocks of whole kGemmTile-row tiles (or, for
// float32/float64 with more columns than rows, 16-column tiles), at least kGemmMinBlockTiles
// tiles a block, one single-threaded call each. Below it, one call on the calling thread.
inline constexpr std::size_t kGemmTile = 16;
inline constexpr std::size_t kGemmMinBlockTiles = 2;
inline constexpr std::size_t kGemmSplitMinMacs = std::size_t(1) << 20;

template <class T>
void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
          std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc);

// ---- bfloat16 (autocast) -------------------------------------------------------------------
// A bf16 product with float32 accumulation is float32 gemm on the operands rounded to bf16 (a
// product of two bf16 values has at most 16 significant bits, exact in float32): the portable
// path, which any BLAS runs correctly on any CPU. oneDNN's bf16 matmul gives the same values
// faster where the CPU has one.

// gemm<float>'s contract (above) with the entries of A and B rounded to bf16 first; the products
// accumulate in float32 and C (alpha, beta included) stays float32.
void gemm_bf16(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
               std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc);

// Whether gemm_bf16 of an (m, n, k) product runs oneDNN's bf16 matmul (oneDNN backend, a CPU with
// one, at least 2^18 multiply-adds), the path that takes packed operands as they are: only then
// does packing once for several gemms pay; the portable path would widen them back to float32.
bool gemm_bf16_takes_packed(std::size_t m, std::size_t n, std::size_t k);

// gemm_bf16 on operands already rounded: a is A as stored, (m, k) or (k, m) when trans_a; b is B,
// (k, n) or (n, k). The same C, bit for bit, as gemm_bf16 on the float operands they came from.
void gemm_bf16(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
               const Bf16Matrix& a, const Bf16Matrix& b, float beta, float* c, std::size_t ldc);

// Which implementation gemm_bf16 runs, for programs to print: "oneDNN bf16 matmul
// (avx512_core_bf16, native bf16; portable under 2^18 multiply-adds)" when the gemm backend is
// oneDNN and oneDNN has a bf16 matmul on this CPU, else "portable (fp32 gemm on bf16-rounded
// operands)".
const char* bf16_gemm_path();

// The gemm of an op that recorded `bf16` when it was built (autocast_gemm<T>(), autocast.hpp):
// gemm_bf16 for float when set, gemm<T> otherwise.
template <class T>
void gemm_autocast(bool bf16, bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, T alpha,
                   const T* a, std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    if (bf16) {
      gemm_bf16(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      return;
    }
  }
  gemm<T>(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace xgrad::detail
