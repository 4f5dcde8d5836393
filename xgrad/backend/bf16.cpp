// The bfloat16 gemm (bf16.hpp): oneDNN's bf16 x bf16 -> fp32 matmul (onednn.hpp) when the gemm
// backend is oneDNN and oneDNN has a bf16 matmul on this CPU; otherwise the portable path, which
// rounds the operands into float32 scratch buffers and calls gemm<float>, threaded as usual.
#include <xgrad/backend/bf16.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <xgrad/base/check.hpp>
#include <xgrad/backend/gemm_backend.hpp>
#include <xgrad/backend/onednn.hpp>
#include <xgrad/backend/parallel.hpp>

namespace xgrad::detail {

void round_to_bf16(const float* src, float* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = round_to_bf16(src[i]);
}

namespace {

// oneDNN's bf16 matmul costs about 8 us more per call than the portable path's fp32 gemm on small
// products (1 thread, avx512_core_bf16: 32x32x16 12.7 vs 4.2 us, 64x64x32 16.9 vs 17.8 us,
// 128x128x64 48 vs 103 us), so products under 2^17 multiply-adds (attention's per-head products
// at small sizes) take the portable path; the two agree to fp32 accumulation order.
constexpr std::size_t kOneDnnBf16MinMacs = std::size_t(1) << 17;

// A stored matrix (rows, cols) with row stride ld -> dst (rows, cols), packed and rounded; large
// ones split their rows over the pool (inline inside a parallel region, e.g. attention's heads).
void round_matrix(const float* src, std::size_t ld, std::size_t rows, std::size_t cols, float* dst) {
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

// dst[i] = the float32 whose upper half is bits[i], for i < n, over the pool when large.
void widen_bf16(const std::uint16_t* bits, float* dst, std::size_t n) {
  parallel_for(n, std::size_t(1) << 16, [&](std::size_t i0, std::size_t i1) {
    for (std::size_t i = i0; i < i1; ++i) {
      const std::uint32_t u = std::uint32_t(bits[i]) << 16;
      std::memcpy(dst + i, &u, sizeof u);
    }
  });
}

// Whether oneDNN has a bf16 matmul here: a 1x1x1 product, asked once.
bool onednn_has_bf16() {
  static const bool has = [] {
    const float a = 1.0f, b = 1.0f;
    float c = 0.0f;
    return onednn_gemm_bf16(false, false, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);
  }();
  return has;
}

}  // namespace

void gemm_bf16(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
               std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc) {
  if (m == 0 || n == 0 || k == 0) {  // no operand entry is read
    gemm<float>(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  if (m * n * k >= kOneDnnBf16MinMacs && get_gemm_backend() == GemmBackend::onednn &&
      onednn_gemm_bf16(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
    return;
  // Stored A: (m, k), or (k, m) when transposed; stored B: (k, n), or (n, k).
  const std::size_t ra = trans_a ? k : m, ca = trans_a ? m : k;
  const std::size_t rb = trans_b ? n : k, cb = trans_b ? k : n;
  // Scratch for the call alone (uninitialized; with allocator tuning, reused heap): held for good,
  // as a per-thread cache, it would add the largest operands of the step to the peak memory.
  const std::unique_ptr<float[]> buf(new float[ra * ca + rb * cb]);
  float* sa = buf.get();
  float* sb = sa + ra * ca;
  round_matrix(a, lda, ra, ca, sa);
  round_matrix(b, ldb, rb, cb, sb);
  gemm<float>(trans_a, trans_b, m, n, k, alpha, sa, ca, sb, cb, beta, c, ldc);
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

Bf16Matrix to_bf16(const float* src, std::size_t rows, std::size_t cols, std::size_t ld) {
  std::shared_ptr<std::uint16_t[]> bits(new std::uint16_t[rows * cols]);
  pack_bf16(src, rows, cols, ld, bits.get());
  return Bf16Matrix{std::move(bits), rows, cols};
}

void gemm_bf16(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
               const Bf16Matrix& a, const Bf16Matrix& b, float beta, float* c, std::size_t ldc) {
  XGRAD_CHECK(a.rows == (trans_a ? k : m) && a.cols == (trans_a ? m : k) && b.rows == (trans_b ? n : k) &&
                  b.cols == (trans_b ? k : n),
              "gemm_bf16: for (m, n, k) = (", m, ", ", n, ", ", k, ") expected A (", trans_a ? k : m, ", ",
              trans_a ? m : k, ") and B (", trans_b ? n : k, ", ", trans_b ? k : n, "), got A (", a.rows, ", ",
              a.cols, ") and B (", b.rows, ", ", b.cols, ")");
  if (m != 0 && n != 0 && k != 0 && m * n * k >= kOneDnnBf16MinMacs && get_gemm_backend() == GemmBackend::onednn &&
      onednn_gemm_bf16_packed(trans_a, trans_b, m, n, k, alpha, a.bits.get(), b.bits.get(), beta, c, ldc))
    return;
  // The portable path on the same rounded values: the bits widened back to float32 (exact).
  const std::size_t na = a.rows * a.cols, nb = b.rows * b.cols;
  const std::unique_ptr<float[]> buf(new float[na + nb]);
  float* sa = buf.get();
  float* sb = sa + na;
  widen_bf16(a.bits.get(), sa, na);
  widen_bf16(b.bits.get(), sb, nb);
  gemm<float>(trans_a, trans_b, m, n, k, alpha, sa, a.cols, sb, b.cols, beta, c, ldc);
}

bool gemm_bf16_takes_packed(std::size_t m, std::size_t n, std::size_t k) {
  return m != 0 && n != 0 && k != 0 && m * n * k >= kOneDnnBf16MinMacs && get_gemm_backend() == GemmBackend::onednn &&
         onednn_has_bf16();
}

const char* bf16_gemm_path() {
  static const char* const portable = "portable (fp32 gemm on bf16-rounded operands)";
  static const std::string onednn = [] {
    if (!onednn_has_bf16()) return std::string();
    return "oneDNN bf16 matmul (" + onednn_isa() + (onednn_bf16_native() ? ", native bf16" : ", bf16 emulated") +
           "; portable under 2^17 multiply-adds)";
  }();
  if (get_gemm_backend() != GemmBackend::onednn || onednn.empty()) return portable;
  return onednn.c_str();
}

}  // namespace xgrad::detail
