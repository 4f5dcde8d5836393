// Internal: bfloat16 rounding, for the bf16 gemm behind autocast (gemm.hpp, autocast.hpp).
//
// bfloat16 is float32's sign, 8-bit exponent and top 7 mantissa bits: a float32 whose low 16 bits
// are 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>


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
// A stored (rows, cols) float matrix with row stride ld -> dst, dense (rows, cols), rounded; rows
// split over xgrad's pool when large (inline inside a parallel region).
void round_to_bf16(const float* src, std::size_t ld, std::size_t rows, std::size_t cols, float* dst);
// dst[i] = the float32 whose upper half is bits[i], for i < n (exact).
void widen_bf16(const std::uint16_t* bits, float* dst, std::size_t n);

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
// How many matrices to_bf16 has cast in this process, on every thread (for tests: the cast cache
// of autocast.hpp saves calls to it).
std::uint64_t to_bf16_calls();

}  // namespace xgrad::detail
