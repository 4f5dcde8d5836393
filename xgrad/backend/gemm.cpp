// The gemm dispatch: which library computes each product. float32 on oneDNN (onednn.hpp) or
// OpenBLAS as get_gemm_backend() says, float64 on OpenBLAS, bf16 on oneDNN's bf16 matmul when this
// CPU has one, else on the portable path (float32 gemm on the rounded operands). The one
// translation unit that includes xtensor-blas, whose xblas.hpp declares ::cblas_sgemm and
// ::cblas_dgemm (OpenBLAS's <cblas.h> must not join it: the CBLAS enums would be defined twice).
#include <xgrad/backend/gemm.hpp>

#include <xtensor-blas/xblas.hpp>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <memory>
#include <string>
#include <type_traits>

#include <xgrad/backend/bf16.hpp>
#include <xgrad/backend/gemm_backend.hpp>
#include <xgrad/backend/onednn.hpp>
#include <xgrad/backend/parallel.hpp>
#include <xgrad/base/check.hpp>

// OpenBLAS (the BLAS xgrad links, see cmake/XgradDependencies.cmake).
extern "C" void openblas_set_num_threads(int num_threads);

namespace xgrad {

// ---- backend selection ---------------------------------------------------------------------

namespace {

constexpr int kUnset = -1;
std::atomic<int> backend_override{kUnset};  // set_gemm_backend's choice, else XGRAD_GEMM_BACKEND

GemmBackend backend_from_env() {
  const char* env = std::getenv("XGRAD_GEMM_BACKEND");
  if (env == nullptr || *env == '\0') return GemmBackend::onednn;
  const std::string v = env;
  if (v == "onednn") return GemmBackend::onednn;
  if (v == "openblas") return GemmBackend::openblas;
  XGRAD_CHECK(false, "XGRAD_GEMM_BACKEND: expected \"onednn\" or \"openblas\", got \"", v, "\"");
  return GemmBackend::onednn;
}

}  // namespace

void set_gemm_backend(GemmBackend backend) {
  XGRAD_CHECK(backend == GemmBackend::onednn || backend == GemmBackend::openblas,
              "set_gemm_backend: expected GemmBackend::onednn or GemmBackend::openblas, got ",
              static_cast<int>(backend));
  backend_override.store(static_cast<int>(backend), std::memory_order_relaxed);
}

GemmBackend get_gemm_backend() {
  const int b = backend_override.load(std::memory_order_relaxed);
  if (b != kUnset) return static_cast<GemmBackend>(b);
  static const GemmBackend from_env = backend_from_env();  // read once; a bad value throws each time
  return from_env;
}

const char* gemm_backend_name(GemmBackend backend) {
  return backend == GemmBackend::openblas ? "openblas" : "onednn";
}

namespace detail {

// ---- float32 and float64 -------------------------------------------------------------------

namespace {

// dnnl_sgemm costs about half a microsecond more per call than cblas_sgemm, which products under
// this many multiply-adds (m n k), hundreds of them in a tiny model's step, would pay.
constexpr std::size_t kOneDnnMinMacs = std::size_t(1) << 14;

// xgrad threads the products itself (row blocks, below), so OpenBLAS runs single-threaded inside
// each call: set once, before the first BLAS call of the process.
void use_single_threaded_blas() {
  static const bool once = (openblas_set_num_threads(1), true);
  (void)once;
}

}  // namespace

template <class T>
void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
          std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "gemm: float or double");
  if (m == 0 || n == 0) return;
  if (k == 0) {
    // op(A) op(B) is an (m, n) matrix of zeros: C = beta C (beta = 0 overwrites, NaN included).
    for (std::size_t i = 0; i < m; ++i) {
      T* row = c + i * ldc;
      if (beta == T(0)) std::fill(row, row + n, T(0));
      else for (std::size_t j = 0; j < n; ++j) row[j] *= beta;
    }
    return;
  }
  // float32 on oneDNN (the default backend, see gemm_backend.hpp) from kOneDnnMinMacs
  // multiply-adds up, in the same row blocks as OpenBLAS: one single-threaded call per block.
  bool onednn = false;
  if constexpr (std::is_same_v<T, float>)
    onednn = m * n * k >= kOneDnnMinMacs && get_gemm_backend() == GemmBackend::onednn;
  use_single_threaded_blas();
  constexpr std::size_t kMax = INT_MAX;
  XGRAD_CHECK(m <= kMax && n <= kMax && k <= kMax && lda <= kMax && ldb <= kMax && ldc <= kMax,
              "gemm: sizes (m, n, k) = (", m, ", ", n, ", ", k, ") exceed the BLAS int range");
  const auto ta = trans_a ? CblasTrans : CblasNoTrans;
  const auto tb = trans_b ? CblasTrans : CblasNoTrans;
  // BLAS rejects a leading dimension below the stored row length even when it is never used.
  const std::size_t min_lda = trans_a ? m : k, min_ldb = trans_b ? k : n;
  const int ilda = static_cast<int>(std::max(lda, min_lda));
  const int ildb = static_cast<int>(std::max(ldb, min_ldb));
  const int ildc = static_cast<int>(std::max(ldc, n));
  const int ik = static_cast<int>(k);
  // One single-threaded BLAS call on rows [r0, r1) and columns [c0, c1) of C.
  auto block = [&](std::size_t r0, std::size_t r1, std::size_t c0, std::size_t c1) {
    const T* ab = trans_a ? a + r0 : a + r0 * lda;  // op(A) rows r0.. (columns of a stored A^T)
    const T* bb = trans_b ? b + c0 * ldb : b + c0;  // op(B) columns c0..
    const int im = static_cast<int>(r1 - r0), in = static_cast<int>(c1 - c0);
    T* cb = c + r0 * ldc + c0;
    if constexpr (std::is_same_v<T, float>) {
      if (onednn) onednn_sgemm(trans_a, trans_b, r1 - r0, c1 - c0, k, alpha, ab, lda, bb, ldb, beta, cb, ldc);
      else ::cblas_sgemm(CblasRowMajor, ta, tb, im, in, ik, alpha, ab, ilda, bb, ildb, beta, cb, ildc);
    } else {
      ::cblas_dgemm(CblasRowMajor, ta, tb, im, in, ik, alpha, ab, ilda, bb, ildb, beta, cb, ildc);
    }
  };
  // A product of at least kGemmSplitMinMacs multiply-adds is cut into blocks of whole 16-row (or
  // 16-column) tiles along the longer of m and n, one block per thread (see backend/parallel.hpp).
  constexpr std::size_t kTile = kGemmTile;
  if (m * n * k < kGemmSplitMinMacs) {
    block(0, m, 0, n);
    return;
  }
  const bool split_rows = m >= n;
  const std::size_t tiles = ((split_rows ? m : n) + kTile - 1) / kTile;
  parallel_for(tiles, kGemmMinBlockTiles, [&](std::size_t t0, std::size_t t1) {
    const std::size_t lo = t0 * kTile, hi = std::min(t1 * kTile, split_rows ? m : n);
    if (split_rows)
      block(lo, hi, 0, n);
    else
      block(0, m, lo, hi);
  });
}

template void gemm<float>(bool, bool, std::size_t, std::size_t, std::size_t, float, const float*, std::size_t,
                          const float*, std::size_t, float, float*, std::size_t);
template void gemm<double>(bool, bool, std::size_t, std::size_t, std::size_t, double, const double*,
                           std::size_t, const double*, std::size_t, double, double*, std::size_t);

// ---- bfloat16 ------------------------------------------------------------------------------

namespace {

// oneDNN's bf16 matmul has a fixed cost per call (a few microseconds) that small products do not
// earn back, so products under 2^18 multiply-adds (attention's per-head products at small sizes)
// take the portable path; the two agree to fp32 accumulation order. 2^18, not 2^17: medium's
// per-head products (64 x 64 x 32, 2^17) took the bf16 step from 230 to 186 ms at 1 thread and
// 141 to 132 ms at 2 by the portable path (medians of 7 interleaved runs, a Xeon with AMX).
constexpr std::size_t kOneDnnBf16MinMacs = std::size_t(1) << 18;

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
  round_to_bf16(a, lda, ra, ca, sa);
  round_to_bf16(b, ldb, rb, cb, sb);
  gemm<float>(trans_a, trans_b, m, n, k, alpha, sa, ca, sb, cb, beta, c, ldc);
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
           "; portable under 2^18 multiply-adds)";
  }();
  if (get_gemm_backend() != GemmBackend::onednn || onednn.empty()) return portable;
  return onednn.c_str();
}

}  // namespace detail
}  // namespace xgrad
