// Internal: the bfloat16 gemm behind autocast (autocast.hpp).
//
// bfloat16 is float32's sign, 8-bit exponent and top 7 mantissa bits: a float32 whose low 16 bits
// are 0. A product of two such values has at most 16 significant bits, so it is exact in float32;
// a gemm on bf16 operands with float32 accumulation is therefore float32 gemm on the operands
// rounded to bf16 -- the portable path below, which any BLAS runs correctly on any CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>

#include <xgrad/backend/gemm.hpp>

namespace xgrad::detail {

// The bits of x rounded to the nearest bfloat16 (ties to even): the upper half of the float32 it
// equals. NaN stays NaN (made quiet, sign kept); a finite value past bf16's largest rounds to
// +-inf, as in torch. Branch-free, so loops over it vectorize.
inline std::uint16_t bf16_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const std::uint32_t nan = (u | 0x00400000u) >> 16;
  return static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

// x rounded to the nearest bfloat16, as the float32 it equals (bf16_bits' rule).
inline float round_to_bf16(float x) {
  const std::uint32_t r = std::uint32_t(bf16_bits(x)) << 16;
  float y;
  std::memcpy(&y, &r, sizeof y);
  return y;
}

// dst[i] = round_to_bf16(src[i]) for i < n (dst may be src).
void round_to_bf16(const float* src, float* dst, std::size_t n);

// gemm<float>'s contract (gemm.hpp) with the entries of A and B rounded to bf16 first; the products
// accumulate in float32 and C (alpha, beta included) stays float32.
void gemm_bf16(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
               std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc);

// A stored (rows, cols) float matrix with row stride ld -> its dense bf16 bits (bf16_bits), rows
// split over xgrad's pool when large.
void pack_bf16(const float* src, std::size_t rows, std::size_t cols, std::size_t ld, std::uint16_t* dst);

// A float matrix rounded to bf16 once, dense (rows, cols), for several gemms to share: linear
// rounds x and W for its forward and keeps them for its backward, as torch autocast saves the bf16
// casts it multiplied. Copies share the bits.
struct Bf16Matrix {
  std::shared_ptr<const std::uint16_t[]> bits;
  std::size_t rows = 0, cols = 0;
};
Bf16Matrix to_bf16(const float* src, std::size_t rows, std::size_t cols, std::size_t ld);

// Whether gemm_bf16 of an (m, n, k) product runs oneDNN's bf16 matmul (oneDNN backend, a CPU with
// one, at least 2^17 multiply-adds), the path that takes packed operands as they are: only then
// does packing once for several gemms pay; the portable path would widen them back to float32.
bool gemm_bf16_takes_packed(std::size_t m, std::size_t n, std::size_t k);

// gemm_bf16 on operands already rounded: a is A as stored, (m, k) or (k, m) when trans_a; b is B,
// (k, n) or (n, k). The same C, bit for bit, as gemm_bf16 on the float operands they came from.
void gemm_bf16(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
               const Bf16Matrix& a, const Bf16Matrix& b, float beta, float* c, std::size_t ldc);

// Which implementation gemm_bf16 runs, for programs to print: "oneDNN bf16 matmul
// (avx512_core_bf16, native bf16; portable under 2^17 multiply-adds)" when the gemm backend is
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
