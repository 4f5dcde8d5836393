// F.scaled_dot_product_attention
// (https://pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html)
// and the fused op behind it and nn.MultiheadAttention (attention.hpp): the attention_forward /
// attention_backward kernel pair (llm.c's) over per-head matrices read in place (contiguous, or
// one head's columns of an in-projection output), gemm for the products, batches split over
// threads, and the node that joins them: the materialized path, which keeps P for the backward.
// The node hands the call to the tiled path (attention_tiled.cpp, memory linear in L) when
// set_attention_path says so, or by size under Auto, unless the weights are asked for. The mask
// normaliser is in attention_mask.cpp; what the paths share is in attention_kernels.hpp; the
// differentiable backward both nodes carry for create_graph is in attention_formula.cpp.
//
// Per batch b (batch = product of the leading dims), q: (L, E), k: (S, E), v: (S, Ev):
//   A  = scale * q k^T + M        (L, S)   M: the float mask, or -inf where masked (bool, causal)
//   P  = softmax(A) along S       (L, S)   max-subtracted; a row whose keys are all masked gets
//                                          P = 0 (PyTorch gives NaN there on some paths); NaN
//                                          and zeros by the rule of attention_kernels.hpp
//   Pd = P * D                    (L, S)   D: dropout mask, 0 or 1/(1-p), from Philox (the same
//                                          on both paths, AttentionDropout); D = 1 when p = 0
//   O  = Pd v                     (L, Ev)  an entry Pd = 0 reads nothing of v (no 0 x NaN)
//   W  = Pd                       (L, S)   the weights, returned when asked for
// Grouped-query attention (enable_gqa): k and v have G times fewer heads than q, and batch b reads
// those of KV batch b / G in place (no repeated copy); the backward runs each KV batch's G batches
// in order on one thread, summing their dk and dv (attention_kernels.hpp: AttentionDims).
// A float mask is a constant array: it gets no gradient. A bool mask follows
// nn.MultiheadAttention's convention, true = may NOT attend (ops.hpp); note that
// torch's F.scaled_dot_product_attention reads its bool masks the other way (true = attend).

// GCC 12's avx512fintrin.h trips -W(maybe-)uninitialized inside xsimd's AVX-512 kernels (GCC bug
// 105593, fixed in GCC 13). The warning fires where the intrinsics are inlined, in this file, so
// simd.hpp's push/pop around its include does not cover it: ignore it for the whole unit.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <xgrad/ops/attention/attention_kernels.hpp>
#include <xgrad/ops/op_scope.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include <xgrad/backend/allocator.hpp>
#include <xgrad/backend/autocast.hpp>
#include <xgrad/backend/bf16.hpp>
#include <xgrad/backend/gemm.hpp>
#include <xgrad/backend/memory_limit.hpp>
#include <xgrad/backend/parallel.hpp>
#include <xgrad/backend/simd.hpp>
#include <xgrad/backend/strided.hpp>

namespace xgrad {

// ---- the probability rule and the gemm that skips zeros (attention_kernels.hpp) ----------------

template <class T>
T detail::row_max(const T* x, std::size_t n) {
  // select(x > acc, x, acc) keeps acc where x is NaN (xsimd::max's result would depend on the order)
  using B = simd_batch<T>;
  constexpr std::size_t W = B::size;
  T m = -std::numeric_limits<T>::infinity();
  std::size_t j = 0;
  if (n >= W) {
    B acc(m);
    for (; j + W <= n; j += W) {
      const B v = B::load_unaligned(x + j);
      acc = xsimd::select(v > acc, v, acc);
    }
    alignas(64) T lanes[W];
    acc.store_aligned(lanes);
    for (std::size_t l = 0; l < W; ++l) m = lanes[l] > m ? lanes[l] : m;
  }
  for (; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

template <class T>
bool detail::has_nan(const T* x, std::size_t n) {
  for (std::size_t j = 0; j < n; ++j)
    if (std::isnan(x[j])) return true;
  return false;
}

template <class T>
void detail::probabilities(T* row, std::size_t n, T m, T inv_l) {
  if (m == -std::numeric_limits<T>::infinity()) {  // no key the row may see
    for (std::size_t j = 0; j < n; ++j) row[j] = std::isnan(row[j]) ? row[j] : T(0);
    return;
  }
  detail::simd_exp_sub_sum(row, m, row, n);
  if (std::isnan(inv_l)) {  // a NaN logit: NaN but where e = 0
    for (std::size_t j = 0; j < n; ++j) row[j] = row[j] == T(0) ? T(0) : inv_l;
    return;
  }
  for (std::size_t j = 0; j < n; ++j) row[j] *= inv_l;
}

template <class T>
void detail::softmax_row(T* row, std::size_t n) {
  const T m = row_max(row, n);
  if (m == -std::numeric_limits<T>::infinity()) {
    probabilities(row, n, m, T(0));
    return;
  }
  // probabilities() without recomputing e: l is NaN exactly when some logit is (m is finite)
  const T inv = T(1) / detail::simd_exp_sub_sum(row, m, row, n);
  if (std::isnan(inv)) {
    for (std::size_t j = 0; j < n; ++j) row[j] = row[j] == T(0) ? T(0) : inv;
    return;
  }
  for (std::size_t j = 0; j < n; ++j) row[j] *= inv;
}

namespace {

// Whether x[0, n) is all finite: x * 0 is 0 for a finite x, NaN for an Inf or a NaN.
template <class T>
bool all_finite(const T* x, std::size_t n) {
  using B = detail::simd_batch<T>;
  constexpr std::size_t W = B::size;
  B acc(T(0));
  std::size_t j = 0;
  for (; j + W <= n; j += W) acc += B::load_unaligned(x + j) * B(T(0));
  T total = xsimd::hadd(acc);
  for (; j < n; ++j) total += x[j] * T(0);
  return total == T(0);
}

}  // namespace

template <class T>
void detail::gemm_zeros_pass_nothing(bool bf16, bool trans_a, std::size_t m, std::size_t n, std::size_t k, T alpha,
                                     const T* a, std::size_t lda, const T* b, std::size_t ldb, T beta, T* c,
                                     std::size_t ldc) {
  if (!std::isfinite(alpha)) {  // alpha x 0 is NaN too (scale = NaN): fold alpha into op(A) first
    std::vector<T> scaled(m * k);
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t p = 0; p < k; ++p) {
        const T x = trans_a ? a[p * lda + i] : a[i * lda + p];
        scaled[i * k + p] = x == T(0) ? T(0) : alpha * x;
      }
    gemm_zeros_pass_nothing<T>(bf16, false, m, n, k, T(1), scaled.data(), k, b, ldb, beta, c, ldc);
    return;
  }
  std::vector<std::size_t> bad;  // rows of B holding an Inf or a NaN
  for (std::size_t p = 0; p < k; ++p)
    if (!all_finite(b + p * ldb, n)) bad.push_back(p);
  if (bad.empty()) {
    gemm_autocast<T>(bf16, trans_a, false, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // C = alpha op(A) B0 + beta C with B's bad rows zeroed, then the bad rows' terms where op(A) != 0
  std::vector<T> b0(k * n);
  for (std::size_t p = 0; p < k; ++p) std::copy_n(b + p * ldb, n, b0.data() + p * n);
  for (std::size_t p : bad) std::fill_n(b0.data() + p * n, n, T(0));
  gemm_autocast<T>(bf16, trans_a, false, m, n, k, alpha, a, lda, b0.data(), n, beta, c, ldc);
  for (std::size_t p : bad) {
    const T* bp = b + p * ldb;
    for (std::size_t i = 0; i < m; ++i) {
      const T x = trans_a ? a[p * lda + i] : a[i * lda + p];
      if (x == T(0)) continue;
      T* ci = c + i * ldc;
      for (std::size_t col = 0; col < n; ++col) ci[col] += alpha * x * bp[col];
    }
  }
}

#define XGRAD_INSTANTIATE(T)                                                                                       \
  template T detail::row_max<T>(const T*, std::size_t);                                                            \
  template bool detail::has_nan<T>(const T*, std::size_t);                                                         \
  template void detail::probabilities<T>(T*, std::size_t, T, T);                                                   \
  template void detail::softmax_row<T>(T*, std::size_t);                                                           \
  template void detail::gemm_zeros_pass_nothing<T>(bool, bool, std::size_t, std::size_t, std::size_t, T, const T*, \
                                                   std::size_t, const T*, std::size_t, T, T*, std::size_t);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

namespace {

constexpr const char* kOp = detail::kAttentionOp;

using Dims = detail::AttentionDims;
using detail::MaskView;
using detail::Mat;
using detail::NodeLayout;
using detail::Place;
using detail::Qkv;
using detail::read_qkv;

// ---- the kernels --------------------------------------------------------------------------------

// Batches per thread chunk: at least ~64K multiply-adds of score work, so that tiny attention stays
// on one thread. Each batch (one head of one sequence) is independent, with its own gemms.
std::size_t batch_grain(const Dims& n) {
  return std::max<std::size_t>(1, (std::size_t(1) << 16) / std::max<std::size_t>(1, n.L * n.S * std::max(n.E, n.Ev)));
}

// q (B, L, E), k (B, S, E), v (B, S, Ev), D (B, L, S) dropout multipliers or null
//   -> P (B, L, S): the probabilities before dropout (kept for the backward)
//      out (B, L, Ev): O;  w (B, L, S), when its base is set: W = Pd
// bf16: the gemms take bf16-rounded operands (autocast, decided by the caller's thread).
template <class T>
void attention_forward(const Mat<T*>& out, const Mat<T*>& w, T* P, const Qkv<const T*>& in, const T* D,
                       const MaskView<T>& mask, const Dims& n, T alpha, bool bf16) {
  const std::size_t L = n.L, S = n.S, E = n.E, Ev = n.Ev;
  const bool weights = w.base != nullptr;
  detail::parallel_for(n.B, batch_grain(n), [&](std::size_t b0, std::size_t b1) {
    std::vector<T> dropped(D && !weights ? L * S : 0);  // Pd of one batch, when not in `w`
    for (std::size_t b = b0; b < b1; ++b) {
      T* pb = P + b * L * S;
      // A = scale * q k^T
      detail::gemm_autocast<T>(bf16, false, true, L, S, E, alpha, in.q.at(b), in.q.ld, in.k.at(b), in.k.ld, T(0), pb,
                               S);
      for (std::size_t i = 0; i < L; ++i) {
        T* row = pb + i * S;
        // A += M
        mask.apply(b, i, 0, S, row);
        // P = softmax(A)
        detail::softmax_row(row, S);
      }
      // Pd = P * D;  W = Pd
      const T* pd = pb;
      std::size_t ld_pd = S;
      if (weights || D) {
        T* dst = weights ? w.at(b) : dropped.data();
        ld_pd = weights ? w.ld : S;
        for (std::size_t i = 0; i < L; ++i) {
          const T* p = pb + i * S;
          T* wi = dst + i * ld_pd;
          if (D) {
            const T* d = D + (b * L + i) * S;
            for (std::size_t j = 0; j < S; ++j) wi[j] = p[j] * d[j];
          } else {
            std::copy(p, p + S, wi);
          }
        }
        pd = dst;
      }
      // O = Pd v  (a probability 0 reads nothing of its value, be it NaN)
      detail::gemm_zeros_pass_nothing<T>(bf16, false, L, Ev, S, T(1), pd, ld_pd, in.v.at(b), in.v.ld, T(0), out.at(b),
                                         out.ld);
    }
  });
}

// From dO (B, L, Ev) and, when its base is set, dW (B, L, S)
//   -> d.q (B, L, E), d.k (B / G, S, E), d.v (B / G, S, Ev), each overwritten; null ones are
//      skipped. G = n.group: the batches sharing a KV batch (grouped-query attention) run in order
//      on one thread, the first writing its dk and dv, the others adding to them.
// P, in = (q, k, v), D, the sizes and bf16 are attention_forward's.
// Zeros pass nothing, as in the forward: where P, D or dA is 0 the products leave out the other
// factor, NaN or not (gemm_zeros_pass_nothing), so a masked or dropped key gets and gives no NaN.
template <class T>
void attention_backward(const Qkv<T*>& d, const Mat<const T*>& dout, const Mat<const T*>& dw, const T* P,
                        const Qkv<const T*>& in, const T* D, const Dims& n, T alpha, bool bf16) {
  const std::size_t L = n.L, S = n.S, E = n.E, Ev = n.Ev, G = n.group;
  const bool need_scores = d.q.base || d.k.base;
  // units of work: the KV batches, each with its G batches
  detail::parallel_for(n.B / G, std::max<std::size_t>(1, batch_grain(n) / G), [&](std::size_t u0, std::size_t u1) {
    std::vector<T> dA(need_scores ? L * S : 0);
    std::vector<T> dropped(D && d.v.base ? L * S : 0);
    for (std::size_t b = u0 * G; b < u1 * G; ++b) {
      const T kv_beta = b % G == 0 ? T(0) : T(1);  // dk, dv: the group's first batch writes, the others add
      const T* pb = P + b * L * S;
      const T* db = D ? D + b * L * S : nullptr;
      const T* dOb = dout.at(b);
      if (d.v.base) {
        // dV = Pd^T dO                          <- O = Pd v
        const T* pd = pb;
        if (D) {
          for (std::size_t m = 0; m < L * S; ++m) dropped[m] = pb[m] * db[m];
          pd = dropped.data();
        }
        detail::gemm_zeros_pass_nothing<T>(bf16, true, S, Ev, L, T(1), pd, S, dOb, dout.ld, kv_beta, d.v.at(b), d.v.ld);
      }
      if (!need_scores) continue;
      // dPd = dO v^T + dW                       <- O = Pd v;  W = Pd
      detail::gemm_autocast<T>(bf16, false, true, L, S, Ev, T(1), dOb, dout.ld, in.v.at(b), in.v.ld, T(0), dA.data(),
                               S);
      const T* dWb = dw.base ? dw.at(b) : nullptr;
      for (std::size_t i = 0; i < L; ++i) {
        T* g = dA.data() + i * S;
        const T* p = pb + i * S;
        if (dWb) {
          const T* dwi = dWb + i * dw.ld;
          for (std::size_t j = 0; j < S; ++j) g[j] += dwi[j];
        }
        // dP = dPd * D                          <- Pd = P * D
        if (db) {
          const T* m = db + i * S;
          for (std::size_t j = 0; j < S; ++j) g[j] = m[j] == T(0) ? T(0) : g[j] * m[j];
        }
        // Dr = rowsum(dP * P) over the keys with P != 0 (a masked key's dP may be NaN: it passes
        // nothing). As softmax's backward computes it, from dP itself: under autocast dO O would
        // differ by the rounding of O's bf16 product. The tiled path, which keeps no P, uses dO O
        // (equal in exact arithmetic).
        T dr = 0;
        for (std::size_t j = 0; j < S; ++j)
          if (p[j] != T(0)) dr += p[j] * g[j];
        // dA = P * (dP - Dr)                    <- P = softmax(A); 0 wherever P = 0: masked
        //                                          keys and fully masked rows pass no gradient
        for (std::size_t j = 0; j < S; ++j) g[j] = p[j] == T(0) ? T(0) : p[j] * (g[j] - dr);
      }
      // dQ = scale * dA k;  dK = scale * dA^T q  <- A = scale * q k^T
      if (d.q.base)
        detail::gemm_zeros_pass_nothing<T>(bf16, false, L, E, S, alpha, dA.data(), S, in.k.at(b), in.k.ld, T(0),
                                           d.q.at(b), d.q.ld);
      if (d.k.base)
        detail::gemm_zeros_pass_nothing<T>(bf16, true, S, E, L, alpha, dA.data(), S, in.q.at(b), in.q.ld, kv_beta,
                                           d.k.at(b), d.k.ld);
    }
  });
}

// ---- the node -----------------------------------------------------------------------------------

std::atomic<AttentionPath> attention_path{AttentionPath::Auto};

// Auto's choice: the tiled path from this many logits per batch-head (L S) up, causal or not.
// Measured with benchmarks/bench_attention_long at (1, 12, L, 64) float32, forward + backward, 2
// threads (docs/performance.md): causal, the paths were even at L = 128 and tiled ahead from 256
// up; without causal masking tiled was 8% behind at 256, 10% behind at 512 (it recomputes q k^T:
// 7/6 of the gemm work, in smaller products) and 15% ahead at 1024.
constexpr std::size_t kTiledFromScoresCausal = std::size_t(256) * 256;
constexpr std::size_t kTiledFromScores = std::size_t(1024) * 1024;

// Arrays from this size up are checked against what the process can still get (reading /proc at
// each call); smaller ones only against its whole limit, so that small attention pays nothing.
constexpr std::size_t kCheckAvailableFrom = std::size_t(64) << 20;

// Throws, naming the shape and the bytes, when the materialized path's (B, L, S) arrays (P, the
// dropout multipliers D, the weights W) would not fit in the memory the process can have: its
// limit (physical memory or its cgroup's), and for large arrays what it can still get (the limit
// minus what it holds, at most the machine's available memory), so that a model whose layers each
// fit but whose saved probabilities together do not is refused at the layer that would not fit.
void check_materialized_fits(const Dims& n, std::size_t element_size, bool dropping, bool weights) {
  const std::size_t arrays = 1 + (dropping ? 1 : 0) + (weights ? 1 : 0);
  const std::size_t per_array = n.B * n.L * n.S * element_size;
  const bool large = per_array >= kCheckAvailableFrom / arrays;
  // The thread's array cache is held but free to use (an allocation that fails empties it first).
  const std::size_t limit =
      large ? detail::process_memory_available() + array_cache_stats().cached_bytes : detail::process_memory_limit();
  XGRAD_CHECK(per_array <= limit / arrays, kOp, ": the materialized path needs ", arrays, " arrays of (B, L, S) = (",
              n.B, ", ", n.L, ", ", n.S, ") elements of ", element_size, " bytes (the probabilities",
              dropping ? ", the dropout multipliers" : "", weights ? ", the returned weights" : "", "), ",
              arrays * per_array, " bytes in all, more than the ", limit,
              large ? " bytes this process can still get (physical memory or its cgroup's limit, less what it holds, "
                      "at most the machine's available memory)"
                    : " bytes this process can have (physical memory or its cgroup's limit)",
              "; without need_weights the tiled path (xgrad::set_attention_path(xgrad::AttentionPath::Tiled)) "
              "needs O(B L) bytes");
}

// Whether the op takes the tiled path (attention_tiled.cpp): never with need_weights; always when
// set_attention_path says Tiled; under Auto from a size of the scores (smaller when causal).
template <class T>
bool takes_tiled_path(const Dims& n, const detail::AttentionArgs<T>& args) {
  const AttentionPath path = attention_path.load();
  const std::size_t tiled_from = args.mask.is_causal ? kTiledFromScoresCausal : kTiledFromScores;
  return !args.need_weights &&
         (path == AttentionPath::Tiled || (path == AttentionPath::Auto && n.L * n.S >= tiled_from));
}

// The dropout multipliers (B, L, S), the decisions of AttentionDropout, over the pool by rows.
template <class T>
Array<T> dropout_multipliers(const Dims& n, const detail::AttentionDropout& dropout) {
  Array<T> D = empty_array<T>({n.B, n.L, n.S}, kOp);
  T* pd = D.data();
  const std::size_t rows = n.B * n.L, grain = std::max<std::size_t>(1, 4096 / std::max<std::size_t>(1, n.S));
  detail::parallel_for(rows, grain, [&](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r) dropout.multipliers(r / n.L, r % n.L, 0, n.S, pd + r * n.S);
  });
  return D;
}

// The materialized path's backward: each input's gradient, when it needs one, written whole by
// attention_backward from the probabilities P (B, L, S) and the multipliers D (null without dropout).
template <class T>
void materialized_backward(Node<T>& node, const NodeLayout& l, const T* P, const T* D, T alpha, bool weights,
                           bool bf16) {
  const std::size_t count = node.inputs.size();
  std::vector<Array<T>> g(count);  // each input's gradient, when it needs one
  std::vector<char> need(count);   // (a default Array is 0-d, one element: not "none")
  for (std::size_t i = 0; i < count; ++i)
    if ((need[i] = node.input_needs_grad(i))) g[i] = empty_array<T>(node.input_shape(i), kOp);
  auto grad = [&](const Place& p) { return need[p.input] ? p.at(g[p.input].data()) : Mat<T*>{}; };
  const T* dy = node.grad.data();
  attention_backward<T>(Qkv<T*>{grad(l.q), grad(l.k), grad(l.v)}, l.o.at(dy), weights ? l.w.at(dy) : Mat<const T*>{}, P,
                        read_qkv<T>(l, [&](std::size_t i) { return node.input_value(i).data(); }), D, l.n, alpha, bf16);
  for (std::size_t i = 0; i < count; ++i)
    if (need[i]) node.input(i).accumulate_grad(std::move(g[i]));
}

// The op: one node over `inputs`, its value laid out as l.value, O and W where l.o and l.w say. The
// gradient of each input is written whole by the blocks it holds (q, k and v tile its columns).
// Without need_weights the tiled path may take it (attention_tiled.cpp; same value and gradients).
template <class T>
Tensor<T> attention_node(std::vector<Tensor<T>> inputs, const NodeLayout& l, const detail::AttentionArgs<T>& args) {
  const Dims& n = l.n;
  const bool weights = args.need_weights, dropping = args.dropout_p > 0.0, tiled = takes_tiled_path(n, args);
  const T alpha = T(args.scale ? *args.scale : 1.0 / std::sqrt(static_cast<double>(n.E)));
  if (!tiled) check_materialized_fits(n, sizeof(T), dropping, weights);

  const auto dropout = detail::AttentionDropout::draw(args.dropout_p, args.generator);
  // The differentiable backward, which create_graph runs on either path (attention_formula.cpp);
  // made only when the node is recorded (it copies the mask).
  GradFormula<T> formula;
  if (is_grad_enabled() &&
      std::any_of(inputs.begin(), inputs.end(), [](const Tensor<T>& x) { return x.requires_grad(); }))
    formula = detail::attention_formula<T>(l, args.mask, dropout, alpha, weights);
  if (tiled)
    return detail::tiled_attention_node<T>(std::move(inputs), l, args.mask, dropout, alpha, std::move(formula));

  Array<T> D = dropping ? dropout_multipliers<T>(n, dropout) : Array<T>();  // unused when p = 0
  Array<T> out = empty_array<T>(l.value, kOp);
  Array<T> P = empty_array<T>({n.B, n.L, n.S}, kOp);
  const bool bf16 = detail::autocast_gemm<T>();  // here, not on the pool threads; recorded for the backward
  attention_forward<T>(l.o.at(out.data()), weights ? l.w.at(out.data()) : Mat<T*>{}, P.data(),
                       read_qkv<T>(l, [&](std::size_t i) { return inputs[i].value().data(); }),
                       dropping ? D.data() : nullptr, MaskView<T>(args.mask, n.L, n.S), n, alpha, bf16);
  return make_result<T>(
      kOp, std::move(out), std::move(inputs),
      // P and D go back to the array cache when the engine frees this closure.
      [P = detail::RecycledArray<T>(std::move(P)), D = detail::RecycledArray<T>(std::move(D)), alpha, l, weights,
       dropping, bf16](Node<T>& node) {
        materialized_backward<T>(node, l, P.get().data(), dropping ? D.get().data() : nullptr, alpha, weights, bf16);
      },
      std::move(formula));
}

// The leading dims of q, k and v, and the sizes they give.
struct Layout {
  Shape lead;
  Dims n;
};

// (lead..., L, S): the logits' shape, which masks broadcast to.
Shape logits_shape(const Layout& l) {
  Shape t = l.lead;
  t.push_back(l.n.L);
  t.push_back(l.n.S);
  return t;
}

// Contiguous q (lead..., L, E), k (lead_kv..., S, E), v (lead_kv..., S, Ev) as inputs 0, 1, 2,
// lead_kv = lead but for G times fewer heads at dim -3 (n.group = G; batch b reads KV batch b / G);
// the value (lead..., L, Ev [+ S]) holds [O | W] in each row.
NodeLayout contiguous_layout(const Layout& layout, bool weights) {
  const Dims& n = layout.n;
  const std::size_t R = n.Ev + (weights ? n.S : 0);
  NodeLayout l{n, layout.lead, {}, {}, {}, {}, {}};
  l.value.push_back(n.L);
  l.value.push_back(R);
  l.q = {0, 0, 1, n.L * n.E, 0, n.E};
  l.k = {1, 0, n.group, n.S * n.E, 0, n.E};
  l.v = {2, 0, n.group, n.S * n.Ev, 0, n.Ev};
  l.o = {0, 0, 1, n.L * R, 0, R};
  l.w = {0, n.Ev, 1, n.L * R, 0, R};
  return l;
}

// The node's value -> (O, W): O alone is the value; with weights, two narrow views of it.
template <class T>
std::pair<Tensor<T>, Tensor<T>> split_value(const Tensor<T>& y, std::size_t Ev, std::size_t S, bool weights) {
  if (!weights) return {y, Tensor<T>()};
  return {narrow(y, -1, 0, static_cast<std::int64_t>(Ev)),
          narrow(y, -1, static_cast<std::int64_t>(Ev), static_cast<std::int64_t>(S))};
}

// ---- argument checks ----------------------------------------------------------------------------

// "q (..), k (..), v (..)" for error messages, formatted only when a check fails.
struct QkvShapes {
  const Shape& q;
  const Shape& k;
  const Shape& v;
};
std::ostream& operator<<(std::ostream& s, const QkvShapes& g) {
  return s << "q " << shape_str(g.q) << ", k " << shape_str(g.k) << ", v " << shape_str(g.v);
}

// The query heads per KV head: 1 unless enable_gqa lets k and v have fewer heads (dim -3) than q.
// The leading dims before the heads must be equal.
std::size_t gqa_group(const QkvShapes& got, bool enable_gqa) {
  const Shape &sq = got.q, &sk = got.k, &sv = got.v;
  const std::size_t nd = sq.size(), heads = nd >= 3 ? nd - 3 : 0;  // heads: the dim -3, when there is one
  const bool outer_equal =
      std::equal(sq.begin(), sq.begin() + heads, sk.begin()) && std::equal(sq.begin(), sq.begin() + heads, sv.begin());
  XGRAD_CHECK(outer_equal && (nd < 3 || sk[heads] == sv[heads]), kOp, ": q, k and v must have equal leading dims, got ",
              got);
  if (nd < 3 || sq[heads] == sk[heads]) return 1;
  const std::size_t hq = sq[heads], hkv = sk[heads];
  XGRAD_CHECK(enable_gqa, kOp, ": q, k and v must have equal leading dims, but q has ", hq,
              " heads (dim -3) and k and v ", hkv, " (", got, ")",
              hkv > 0 && hq % hkv == 0 ? "; pass enable_gqa=true for grouped-query attention" : "");
  XGRAD_CHECK(hkv > 0 && hq % hkv == 0, kOp,
              ": with enable_gqa, q's heads (dim -3) must be a multiple of k's and v's, ", "got ", hq, " and ", hkv,
              " (", got, ")");
  return hq / hkv;
}

// q (lead..., L, E), k (lead_kv..., S, E), v (lead_kv..., S, Ev), checked: lead_kv = lead, or with
// enable_gqa lead with fewer heads at dim -3 (gqa_group).
Layout layout_of(const QkvShapes& got, bool enable_gqa = false) {
  const Shape &sq = got.q, &sk = got.k, &sv = got.v;
  const std::size_t nd = sq.size();
  XGRAD_CHECK(nd >= 2 && sk.size() == nd && sv.size() == nd, kOp,
              ": expected q (..., L, E), k (..., S, E) and v (..., S, Ev) of the same rank, at least 2, got ", got);
  XGRAD_CHECK(!enable_gqa || nd >= 3, kOp, ": enable_gqa needs q (..., Hq, L, E), k (..., Hkv, S, E) and ",
              "v (..., Hkv, S, Ev), rank at least 3, got ", got);
  const std::size_t group = gqa_group(got, enable_gqa);
  XGRAD_CHECK(sk[nd - 1] == sq[nd - 1], kOp, ": q and k must have the same embedding size E, got ", got);
  XGRAD_CHECK(sv[nd - 2] == sk[nd - 2], kOp, ": k and v must have the same sequence length S, got ", got);
  XGRAD_CHECK(sq[nd - 1] > 0, kOp, ": the embedding size E must be positive, got ", got);
  Shape lead(sq.begin(), sq.end() - 2);
  const std::size_t B = detail::numel(lead);
  return {std::move(lead), Dims{B, sq[nd - 2], sk[nd - 2], sq[nd - 1], sv[nd - 1], group}};
}

void check_dropout(double dropout_p) {
  XGRAD_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, kOp, ": dropout_p has to be between 0 and 1, but got ", dropout_p);
}

// scaled_dot_product_attention's arguments -> the op's.
template <class T>
detail::AttentionArgs<T> sdpa_args(const Layout& layout, const AttnMask<T>& attn_mask, double dropout_p, bool is_causal,
                                   std::optional<double> scale, Generator* generator, const QkvShapes& got) {
  XGRAD_CHECK(!(is_causal && !attn_mask.empty()), kOp, ": explicit attn_mask should not be set when is_causal=true (",
              got, ")");
  check_dropout(dropout_p);
  const Shape target = logits_shape(layout);
  if (!attn_mask.empty()) {
    const Shape sm = attn_mask.is_bool() ? shape_of(attn_mask.bool_mask()) : shape_of(attn_mask.float_mask());
    XGRAD_CHECK(detail::mask_broadcasts_to(sm, target), kOp, ": attn_mask of shape ", sm,
                " cannot be broadcast to (..., L, S) = ", target, " (", got, ")");
  }
  detail::AttentionArgs<T> args;
  args.mask = detail::normalize_attention_mask<T>(target, attn_mask, {}, is_causal);
  args.dropout_p = dropout_p;
  args.scale = scale;
  args.generator = generator;
  return args;
}

}  // namespace

void set_attention_path(AttentionPath path) { attention_path.store(path); }
AttentionPath get_attention_path() { return attention_path.load(); }

template <class T>
std::pair<Tensor<T>, Tensor<T>> detail::attention(const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v,
                                                  const AttentionArgs<T>& args) {
  XGRAD_PROFILE_OP("attention");
  const Shape sq = q.shape(), sk = k.shape(), sv = v.shape();
  const Layout layout = layout_of(QkvShapes{sq, sk, sv});
  check_dropout(args.dropout_p);
  const Tensor<T> y = attention_node<T>({q, k, v}, contiguous_layout(layout, args.need_weights), args);
  return split_value(y, layout.n.Ev, layout.n.S, args.need_weights);
}

namespace {

constexpr const char* kHeadsOp = "attention_heads";

// Checks that every projection is (N, len, C) (batch_first) or (len, N, C) with one N and that their
// last dims sum to 3 E, E a positive multiple of H; returns that sum.
template <class T>
std::size_t projection_columns(const std::vector<Tensor<T>>& projections, std::size_t H, std::size_t nd) {
  XGRAD_CHECK(!projections.empty() && projections.size() <= 3, kHeadsOp, ": expected 1 to 3 projections, got ",
              projections.size());
  std::size_t columns = 0;
  for (const Tensor<T>& p : projections) {
    XGRAD_CHECK(p.dim() == 3 && p.size(nd) == projections[0].size(nd), kHeadsOp,
                ": every projection must be (N, len, C) (batch_first) or (len, N, C) with one N, got ", p.shape(),
                " and ", projections[0].shape());
    columns += p.size(-1);
  }
  XGRAD_CHECK(H > 0 && columns % (3 * H) == 0 && columns > 0, kHeadsOp,
              ": the projections' last dims must sum to 3 E with E ", "a positive multiple of num_heads=", H, ", got ",
              columns);
  return columns;
}

// The node's layout over the projections: block x (q, k, v) is columns [x E, (x+1) E) of the
// concatenated projections, each within one of them; the value (N, L, R) or (L, N, R), row (n, i)
// holding O's heads side by side, then W's (R = E + H S with need_weights).
template <class T>
NodeLayout heads_layout(const std::vector<Tensor<T>>& projections, std::size_t H, bool batch_first, bool weights) {
  const std::size_t nd = batch_first ? 0 : 1;  // the batch dim
  const std::size_t columns = projection_columns(projections, H, nd);
  const std::size_t E = columns / 3, d = E / H, N = projections[0].size(nd);
  Place blocks[3];
  std::size_t len[3];
  for (std::size_t x = 0, input = 0, start = 0; x < 3; ++x) {
    while (x * E >= start + projections[input].size(-1)) start += projections[input++].size(-1);
    const std::size_t C = projections[input].size(-1), col = x * E - start;
    XGRAD_CHECK(col + E <= C, kHeadsOp, ": q, k and v must each lie within one projection, got last dims summing to ",
                columns);
    len[x] = projections[input].size(1 - nd);
    blocks[x] = batch_first ? Place{input, col, H, len[x] * C, d, C} : Place{input, col, H, C, d, N * C};
  }
  const std::size_t L = len[0], S = len[1];
  XGRAD_CHECK(len[2] == S, kHeadsOp, ": k and v must have the same length, got ", S, " and ", len[2]);
  const std::size_t R = E + (weights ? H * S : 0);
  NodeLayout l{Dims{N * H, L, S, d, d},
               batch_first ? Shape{N, L, R} : Shape{L, N, R},
               blocks[0],
               blocks[1],
               blocks[2],
               {},
               {},
               H,
               batch_first};
  l.o = batch_first ? Place{0, 0, H, L * R, d, R} : Place{0, 0, H, R, d, N * R};
  l.w = batch_first ? Place{0, E, H, L * R, S, R} : Place{0, E, H, R, S, N * R};
  return l;
}

}  // namespace

template <class T>
std::pair<Tensor<T>, Tensor<T>> detail::attention_heads(const std::vector<Tensor<T>>& projections,
                                                        std::size_t num_heads, bool batch_first,
                                                        const AttentionArgs<T>& args) {
  XGRAD_PROFILE_OP("attention_heads");
  const bool weights = args.need_weights;
  const NodeLayout l = heads_layout(projections, num_heads, batch_first, weights);
  check_dropout(args.dropout_p);
  const Tensor<T> y = attention_node<T>(projections, l, args);
  if (!weights) return {y, Tensor<T>()};
  // W: (.., .., H, S) -> (N, H, L, S), one copy (the weights path only).
  const std::size_t H = num_heads, E = H * l.n.E, L = l.n.L, S = l.n.S, N = l.n.B / H;
  const Tensor<T> w = narrow(y, -1, static_cast<std::int64_t>(E), static_cast<std::int64_t>(H * S));
  const auto i64 = [](std::size_t x) { return static_cast<std::int64_t>(x); };
  return {narrow(y, -1, 0, static_cast<std::int64_t>(E)),
          batch_first ? permute(reshape(w, {i64(N), i64(L), i64(H), i64(S)}), {0, 2, 1, 3})
                      : permute(reshape(w, {i64(L), i64(N), i64(H), i64(S)}), {1, 2, 0, 3})};
}

template <class T>
Tensor<T> scaled_dot_product_attention(const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v,
                                       const AttnMask<T>& attn_mask, double dropout_p, bool is_causal,
                                       std::optional<double> scale, bool enable_gqa, Generator* generator) {
  const OpScope op(OpKind::scaled_dot_product_attention);
  const Shape sq = q.shape(), sk = k.shape(), sv = v.shape();
  const QkvShapes got{sq, sk, sv};
  const Layout layout = layout_of(got, enable_gqa);
  trace::Composite<T> traced(op.kind(), {q, k, v},
                             {trace::Arg::mask("attn_mask", attn_mask),
                              {"dropout_p", dropout_p},
                              {"is_causal", is_causal},
                              scale ? trace::Arg("scale", *scale) : trace::Arg("scale"),
                              {"enable_gqa", enable_gqa}});
  Tensor<T> out = attention_node<T>({q, k, v}, contiguous_layout(layout, false),
                                    sdpa_args(layout, attn_mask, dropout_p, is_causal, scale, generator, got));
  traced.finish({out});
  return out;
}

#define XGRAD_INSTANTIATE(T)                                                                                          \
  template std::pair<Tensor<T>, Tensor<T>> detail::attention<T>(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, \
                                                                const AttentionArgs<T>&);                             \
  template std::pair<Tensor<T>, Tensor<T>> detail::attention_heads<T>(const std::vector<Tensor<T>>&, std::size_t,     \
                                                                      bool, const AttentionArgs<T>&);                 \
  template Tensor<T> scaled_dot_product_attention<T>(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&,            \
                                                     const AttnMask<T>&, double, bool, std::optional<double>, bool,   \
                                                     Generator*);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad
