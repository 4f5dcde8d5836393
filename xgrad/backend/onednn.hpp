// Internal: the oneDNN kernels behind the float32 gemm and the bf16 gemm (gemm.cpp decides when
// they run). Row-major throughout, with gemm.hpp's argument convention: C = alpha op(A) op(B) +
// beta C, op(A): (m, k), op(B): (k, n), C: (m, n), lda/ldb/ldc the row strides as stored.
// Implemented in onednn.cpp, the one translation unit that includes oneDNN and <omp.h>. Every call
// runs on the calling thread alone, with the asynchronous signals blocked (signals.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace xgrad::detail {

// dnnl_sgemm on the calling thread.
void onednn_sgemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                  const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                  std::size_t ldc);

// bfloat16 gemm: A and B are rounded to bf16 (round to nearest even), multiplied by oneDNN's
// bf16 x bf16 matmul with fp32 accumulation, C fp32. Primitives are cached per thread, keyed by
// shape, transposes, ldc, alpha and beta. Large products are cut into row blocks over xgrad's
// pool, one single-threaded oneDNN call each. Returns false (C untouched) when oneDNN has no bf16
// matmul on this CPU, so the caller falls back to its portable kernel.
bool onednn_gemm_bf16(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                      const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                      std::size_t ldc);

// onednn_gemm_bf16 on operands already rounded (pack_bf16, bf16.hpp): pa the dense bf16 bits of A
// as stored, (m, k) or (k, m) when transposed, pb those of B, (k, n) or (n, k). Same result as
// onednn_gemm_bf16 on the float operands they were packed from.
bool onednn_gemm_bf16_packed(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                             const std::uint16_t* pa, const std::uint16_t* pb, float beta, float* c,
                             std::size_t ldc);

// The instruction set oneDNN dispatches on this CPU ("avx512_core_bf16", "avx2", ...), and
// whether its bf16 kernels are native (avx512_bf16 or AMX) rather than emulated in fp32 lanes.
std::string onednn_isa();
bool onednn_bf16_native();

}  // namespace xgrad::detail
