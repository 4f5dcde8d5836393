// Internal: the oneDNN kernels behind detail::gemm<float> (when the backend is
// GemmBackend::onednn) and behind bfloat16 autocast. Row-major throughout, with the argument
// convention of detail::gemm (backend/gemm.hpp): C = alpha * op(A) op(B) + beta * C,
// op(A): (m, k), op(B): (k, n), C: (m, n), lda/ldb/ldc the row strides as stored.
// Implemented in onednn.cpp, the one translation unit that includes oneDNN and <omp.h>.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <xgrad/backend/gemm_backend.hpp>

namespace xgrad::detail {

// Products below this many multiply-adds (m n k) run on OpenBLAS under either backend:
// dnnl_sgemm costs about 0.5-1 us more per call than cblas_sgemm there (measured: 6x4x4 900 vs
// 260 ns, 16^3 1.0 vs 0.6 us, 32^3 1.7 vs 2.5 us, 64^3 7 vs 13 us), which the tiny training step
// (hundreds of such calls) would pay.
constexpr std::size_t kOneDnnMinMacs = std::size_t(1) << 14;

// dnnl_sgemm on `threads` OpenMP threads (1 inside an xgrad pool chunk, so the two never
// oversubscribe). The calling thread's OpenMP thread count is restored afterwards.
void onednn_sgemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                  const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                  std::size_t ldc, int threads);

// Products with at least this many multiply-adds (m n k) run as one oneDNN call on oneDNN's own
// OpenMP threads; smaller ones are cut into row blocks over xgrad's pool, one single-threaded
// oneDNN call each. Measured on 2-core AVX-512 machines (see README, "oneDNN"): SIZE_MAX, i.e.
// the pool split always. The bf16 matmul (onednn_gemm_bf16*) follows the same rule; measured on
// the large step's linear shapes (2 threads, shared machine) its own threading was 1.1-8x slower
// than the pool split, with the same bits in C. Settable for benchmarks and tests.
std::size_t onednn_own_threading_min_macs();
void set_onednn_own_threading_min_macs(std::size_t macs);

// bfloat16 gemm: A and B are rounded to bf16 (round to nearest even), multiplied by oneDNN's
// bf16 x bf16 matmul with fp32 accumulation, C fp32. Primitives are cached per thread, keyed by
// shape, transposes, ldc, alpha and beta. Row blocks are split over xgrad's pool as for fp32.
// Returns false (C untouched) when oneDNN has no bf16 matmul on this CPU, so the caller falls
// back to its portable kernel.
bool onednn_gemm_bf16(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                      const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                      std::size_t ldc);

// onednn_gemm_bf16 on operands already rounded (pack_bf16, bf16.hpp): pa the dense bf16 bits of A
// as stored, (m, k) or (k, m) when transposed, pb those of B, (k, n) or (n, k). Same result as
// onednn_gemm_bf16 on the float operands they were packed from. Products of at least
// onednn_own_threading_min_macs() run as one call on oneDNN's own OpenMP threads.
bool onednn_gemm_bf16_packed(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                             const std::uint16_t* pa, const std::uint16_t* pb, float beta, float* c,
                             std::size_t ldc);

// The instruction set oneDNN dispatches on this CPU ("avx512_core_bf16", "avx2", ...), and
// whether its bf16 kernels are native (avx512_bf16 or AMX) rather than emulated in fp32 lanes.
std::string onednn_isa();
bool onednn_bf16_native();

// xgrad::set_num_threads's hook: sets the calling thread's OpenMP thread count (oneDNN's runtime).
void onednn_set_num_threads(int n);

}  // namespace xgrad::detail
