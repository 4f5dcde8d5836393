// The bfloat16 gemm (bf16.hpp): the portable path rounds the operands into float32 scratch
// buffers and calls gemm<float>, which threads the product as usual.
#include <xgrad/autograd/bf16.hpp>

#include <algorithm>
#include <memory>

#include <xgrad/autograd/parallel.hpp>

namespace xgrad::detail {

void round_to_bf16(const float* src, float* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = round_to_bf16(src[i]);
}

namespace {

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

}  // namespace

void gemm_bf16(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
               std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc) {
  if (m == 0 || n == 0 || k == 0) {  // no operand entry is read
    gemm<float>(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
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

const char* bf16_gemm_path() { return "portable (fp32 gemm on bf16-rounded operands)"; }

}  // namespace xgrad::detail
