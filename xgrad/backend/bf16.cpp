// Rounding float32 to bfloat16 (bf16.hpp), over the pool when large.
#include <xgrad/backend/bf16.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>

#include <xgrad/backend/parallel.hpp>

namespace xgrad::detail {

void round_to_bf16(const float* src, float* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = round_to_bf16(src[i]);
}

void round_to_bf16(const float* src, std::size_t ld, std::size_t rows, std::size_t cols, float* dst) {
  if (ld == cols) {
    const std::size_t n = rows * cols;
    constexpr std::size_t kGrain = std::size_t(1) << 16;
    parallel_for(n, kGrain, [&](std::size_t i0, std::size_t i1) { round_to_bf16(src + i0, dst + i0, i1 - i0); });
    return;
  }
  const std::size_t grain = std::max<std::size_t>(1, (std::size_t(1) << 16) / std::max<std::size_t>(1, cols));
  parallel_for(rows, grain, [&](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r) round_to_bf16(src + r * ld, dst + r * cols, cols);
  });
}

void widen_bf16(const std::uint16_t* bits, float* dst, std::size_t n) {
  parallel_for(n, std::size_t(1) << 16, [&](std::size_t i0, std::size_t i1) {
    for (std::size_t i = i0; i < i1; ++i) {
      const std::uint32_t u = std::uint32_t(bits[i]) << 16;
      std::memcpy(dst + i, &u, sizeof u);
    }
  });
}

void pack_bf16(const float* src, std::size_t rows, std::size_t cols, std::size_t ld, std::uint16_t* dst) {
  const std::size_t grain = std::max<std::size_t>(1, (std::size_t(1) << 16) / std::max<std::size_t>(cols, 1));
  parallel_for(rows, grain, [&](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r) {
      const float* s = src + r * ld;
      std::uint16_t* d = dst + r * cols;
      for (std::size_t j = 0; j < cols; ++j) d[j] = bf16_bits(s[j]);
    }
  });
}

namespace {
std::atomic<std::uint64_t> casts{0};
}  // namespace

std::uint64_t to_bf16_calls() { return casts.load(std::memory_order_relaxed); }

Bf16Matrix to_bf16(const float* src, std::size_t rows, std::size_t cols, std::size_t ld) {
  casts.fetch_add(1, std::memory_order_relaxed);
  std::shared_ptr<std::uint16_t[]> bits(new std::uint16_t[rows * cols]);
  pack_bf16(src, rows, cols, ld, bits.get());
  return Bf16Matrix{std::move(bits), rows, cols};
}

}  // namespace xgrad::detail
