// The tiled path of the attention op (attention_kernels.hpp), FlashAttention-2's loop on the CPU,
// as PyTorch's aten/src/ATen/native/cpu/FlashAttentionKernel.cpp: memory linear in the length.
//
// Per batch b, q: (L, E), k: (S, E), v: (S, Ev), blocks of Br query rows i and Bc key rows j:
//   forward, per query block (parallel over (b, query block)):
//     A_ij = scale * q_i k_j^T + M_ij                 (Br, Bc)  one block of logits, masked
//     m_i' = max(m_i, rowmax(A_ij))                             running max (NaN ignored)
//     P~   = exp(A_ij - m_i')                                   unnormalised probabilities
//     l_i  = l_i exp(m_i - m_i') + rowsum(P~)                   running sum (before dropout)
//     O~_i = O~_i exp(m_i - m_i') + (P~ * D_ij) v_j             D: the dropout multipliers
//   then O_i = O~_i / l_i; m_i and 1 / l_i are kept for the backward (not lse = m + log l, which
//   loses log l when |m| is large, as with a -1e9 padding mask on every key of a row). The
//   probabilities follow the rule of attention_kernels.hpp, as on the materialized path: a row
//   with every key masked keeps m = -inf (O = 0); a row with a NaN logit has l = NaN (O = NaN);
//   zeros pass nothing (a P~ of 0 does not read its value, an exp(m - m') of 0 clears O~).
//   backward, per batch b (parallel over b, or over the groups of b sharing k and v under
//   grouped-query attention; each b's key blocks in order, so the sums into dq, dk and dv have
//   one order whatever the thread count):
//     Dr_i = rowsum(dO_i * O_i)                                 = rowsum(dP * P) of the
//                                                                 materialized backward
//     P_ij = exp(A_ij - m_i) / l_i                              recomputed (probabilities())
//     dv_j += (P_ij * D_ij)^T dO_i                              <- O = Pd v
//     dP_ij = (dO_i v_j^T) * D_ij                               <- Pd = P * D
//     dA_ij = P_ij * (dP_ij - Dr_i)                             <- P = softmax(A); 0 where P = 0
//     dq_i += scale dA_ij k_j;  dk_j += scale dA_ij^T q_i       <- A = scale q k^T
// Causal attention skips the key blocks wholly above the diagonal (j > i for every pair).
// The forward's (b, query block) units and the backward's batches are independent and each sums
// in one fixed order, so the thread count does not change the results; only a call with a single
// unit of work (one batch-head in the backward) lets its block gemms split over the pool, as any
// gemm outside a parallel region does (gemm.hpp).

// GCC 12 trips -W(maybe-)uninitialized inside xsimd's AVX-512 kernels: see attention.cpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <xgrad/ops/attention/attention_kernels.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include <xgrad/backend/autocast.hpp>
#include <xgrad/backend/gemm.hpp>
#include <xgrad/backend/parallel.hpp>
#include <xgrad/backend/simd.hpp>

namespace xgrad {

namespace {

using detail::AttentionDropout;
using detail::MaskView;
using detail::Mat;
using detail::Qkv;
using Dims = detail::AttentionDims;

// Block sizes: rows of queries and of keys per block. 0: the defaults.
std::atomic<std::size_t> forced_query_rows{0}, forced_key_rows{0};

// The default blocks: at (1, 12, 2048, 64) causal float32 on 2 threads, 128 x 128 came out ahead
// of 64 x 64, 256 x 128, 128 x 256 and 256 x 256 (by 7-12%, one noisy run on a shared machine;
// benchmarks/bench_attention_long --tiles Q,K).
constexpr std::size_t kQueryRows = 128, kKeyRows = 128;

struct Tiles {
  std::size_t q, k;
};

Tiles tiles() {
  const std::size_t q = forced_query_rows.load(), k = forced_key_rows.load();
  return {q ? q : kQueryRows, k ? k : kKeyRows};
}

// Units of work per thread chunk: at least ~64K multiply-adds, so that tiny attention stays on
// the caller. `macs`: one unit's multiply-adds.
std::size_t grain_for(std::size_t macs) {
  return std::max<std::size_t>(1, (std::size_t(1) << 16) / std::max<std::size_t>(1, macs));
}

// The keys query rows [i0, i1) may see: all S, or with causal masking j <= i, so [0, min(S, i1)).
template <class T>
std::size_t key_end(const MaskView<T>& mask, std::size_t i1, std::size_t S) {
  return mask.causal ? std::min(S, i1) : S;
}

// The softmax statistics the backward keeps per query row, (B, L) each: m and 1 / l.
template <class Ptr>
struct RowStats {
  Ptr m, inv_l;
};

// q, k, v -> out (B, L, Ev) where `out` places it, stats.
template <class T>
void tiled_forward(const Mat<T*>& out, const RowStats<T*>& stats, const Qkv<const T*>& in, const MaskView<T>& mask,
                   const AttentionDropout& dropout, const Dims& n, T alpha, bool bf16, Tiles t) {
  const std::size_t L = n.L, S = n.S, E = n.E, Ev = n.Ev;
  const std::size_t blocks = (L + t.q - 1) / t.q;
  const T neg_inf = -std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
  detail::parallel_for(n.B * blocks, grain_for(t.q * S * std::max(E, Ev)), [&](std::size_t u0, std::size_t u1) {
    std::vector<T> a(t.q * t.k), acc(t.q * Ev), m(t.q), l(t.q), keep(dropout.on() ? t.k : 0);
    for (std::size_t u = u0; u < u1; ++u) {
      const std::size_t b = u / blocks, i0 = (u % blocks) * t.q, rows = std::min(t.q, L - i0);
      const T* q = in.q.row(b, i0);
      std::fill(acc.begin(), acc.end(), T(0));
      std::fill(m.begin(), m.end(), neg_inf);
      std::fill(l.begin(), l.end(), T(0));
      const std::size_t j_end = key_end(mask, i0 + rows, S);
      for (std::size_t j0 = 0; j0 < j_end; j0 += t.k) {
        const std::size_t cols = std::min(t.k, j_end - j0);
        // A = scale * q_i k_j^T
        detail::gemm_autocast<T>(bf16, false, true, rows, cols, E, alpha, q, in.q.ld, in.k.row(b, j0), in.k.ld, T(0),
                                 a.data(), cols);
        for (std::size_t r = 0; r < rows; ++r) {
          T* row = a.data() + r * cols;
          const std::size_t i = i0 + r;
          // A += M
          mask.apply(b, i, j0, j0 + cols, row);
          const T m_new = std::max(m[r], detail::row_max(row, cols));
          if (m_new == neg_inf) {  // every key so far masked: nothing to add, unless a NaN logit
            if (detail::has_nan(row, cols)) l[r] = nan;
            std::fill(row, row + cols, T(0));
            continue;
          }
          // P~ = exp(A - m');  l = l exp(m - m') + rowsum(P~);  O~ *= exp(m - m')
          const T shrink = std::exp(m[r] - m_new);
          l[r] = l[r] * shrink + detail::simd_exp_sub_sum(row, m_new, row, cols);
          m[r] = m_new;
          if (shrink != T(1)) {
            T* o = acc.data() + r * Ev;
            if (shrink == T(0))  // zeros pass nothing: a NaN of an earlier value goes too
              std::fill(o, o + Ev, T(0));
            else
              for (std::size_t c = 0; c < Ev; ++c) o[c] *= shrink;
          }
          // P~ * D
          if (dropout.on()) {
            dropout.multipliers(b, i, j0, j0 + cols, keep.data());
            for (std::size_t j = 0; j < cols; ++j) row[j] *= keep[j];
          }
        }
        // O~ += (P~ * D) v_j
        detail::gemm_zeros_pass_nothing<T>(bf16, false, rows, Ev, cols, T(1), a.data(), cols, in.v.row(b, j0), in.v.ld,
                                           T(1), acc.data(), Ev);
      }
      // O = O~ / l: 0 when every key is masked, NaN when a logit is
      for (std::size_t r = 0; r < rows; ++r) {
        T* o = out.row(b, i0 + r);
        const T* o_acc = acc.data() + r * Ev;
        const T inv = std::isnan(l[r]) ? nan : m[r] == neg_inf ? T(0) : T(1) / l[r];
        if (std::isnan(inv))
          std::fill(o, o + Ev, nan);
        else
          for (std::size_t c = 0; c < Ev; ++c) o[c] = o_acc[c] * inv;
        stats.m[b * L + i0 + r] = m[r];
        stats.inv_l[b * L + i0 + r] = inv;
      }
    }
  });
}

// rows [r0, r1) of batch b of `x`, `cols` wide, <- 0.
template <class T>
void zero_rows(const Mat<T*>& x, std::size_t b, std::size_t r0, std::size_t r1, std::size_t cols) {
  for (std::size_t r = r0; r < r1; ++r) std::fill(x.row(b, r), x.row(b, r) + cols, T(0));
}

// From dO (B, L, Ev), the forward's O and row statistics -> d.q (B, L, E), d.k (B / G, S, E),
// d.v (B / G, S, Ev), each overwritten; null ones are skipped. G = n.group: the batches sharing a
// KV batch (grouped-query attention) run in order on one thread, the first clearing its dk and dv.
template <class T>
void tiled_backward(const Qkv<T*>& d, const Mat<const T*>& dout, const Mat<const T*>& out,
                    const RowStats<const T*>& stats, const Qkv<const T*>& in, const MaskView<T>& mask,
                    const AttentionDropout& dropout, const Dims& n, T alpha, bool bf16, Tiles t) {
  const std::size_t L = n.L, S = n.S, E = n.E, Ev = n.Ev, G = n.group;
  const bool need_scores = d.q.base || d.k.base;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  // units of work: the KV batches, each with its G batches
  detail::parallel_for(n.B / G, grain_for(G * L * S * std::max(E, Ev)), [&](std::size_t u0, std::size_t u1) {
    std::vector<T> p(t.q * t.k), dp(need_scores ? t.q * t.k : 0), keep(dropout.on() ? t.k : 0), rowdot(L);
    for (std::size_t b = u0 * G; b < u1 * G; ++b) {
      const bool first_of_group = b % G == 0;
      const T* m_b = stats.m + b * L;
      const T* inv_b = stats.inv_l + b * L;
      // Dr = rowsum(dO * O)
      for (std::size_t i = 0; i < L; ++i) rowdot[i] = detail::simd_dot(dout.row(b, i), out.row(b, i), Ev);
      if (d.q.base) zero_rows(d.q, b, 0, L, E);
      for (std::size_t j0 = 0; j0 < S; j0 += t.k) {
        const std::size_t cols = std::min(t.k, S - j0);
        if (d.k.base && first_of_group) zero_rows(d.k, b, j0, j0 + cols, E);
        if (d.v.base && first_of_group) zero_rows(d.v, b, j0, j0 + cols, Ev);
        // Causal: the query blocks holding a row i >= j0.
        const std::size_t i_begin = mask.causal ? j0 / t.q * t.q : 0;
        for (std::size_t i0 = i_begin; i0 < L; i0 += t.q) {
          const std::size_t rows = std::min(t.q, L - i0);
          const T* q = in.q.row(b, i0);
          const T* dO = dout.row(b, i0);
          // A = scale * q_i k_j^T;  dPd = dO_i v_j^T
          detail::gemm_autocast<T>(bf16, false, true, rows, cols, E, alpha, q, in.q.ld, in.k.row(b, j0), in.k.ld, T(0),
                                   p.data(), cols);
          if (need_scores)
            detail::gemm_autocast<T>(bf16, false, true, rows, cols, Ev, T(1), dO, dout.ld, in.v.row(b, j0), in.v.ld,
                                     T(0), dp.data(), cols);
          for (std::size_t r = 0; r < rows; ++r) {
            const std::size_t i = i0 + r;
            T* pr = p.data() + r * cols;
            T* dpr = need_scores ? dp.data() + r * cols : nullptr;
            if (m_b[i] == neg_inf && !std::isnan(inv_b[i])) {  // every key masked: P = 0, no gradient
              std::fill(pr, pr + cols, T(0));
              if (dpr) std::fill(dpr, dpr + cols, T(0));
              continue;
            }
            // P = exp(A + M - m) / l
            mask.apply(b, i, j0, j0 + cols, pr);
            detail::probabilities(pr, cols, m_b[i], inv_b[i]);
            if (dropout.on()) dropout.multipliers(b, i, j0, j0 + cols, keep.data());
            if (dpr) {
              // dP = dPd * D;  dA = P * (dP - Dr), 0 where P or D is
              const T dr = rowdot[i];
              if (dropout.on())
                for (std::size_t j = 0; j < cols; ++j) {
                  const T g = keep[j] == T(0) ? T(0) : dpr[j] * keep[j];
                  dpr[j] = pr[j] == T(0) ? T(0) : pr[j] * (g - dr);
                }
              else
                for (std::size_t j = 0; j < cols; ++j) dpr[j] = pr[j] == T(0) ? T(0) : pr[j] * (dpr[j] - dr);
            }
            // Pd = P * D, for dv
            if (dropout.on())
              for (std::size_t j = 0; j < cols; ++j) pr[j] *= keep[j];
          }
          // dv_j += Pd^T dO_i;  dq_i += scale dA k_j;  dk_j += scale dA^T q_i
          //   (zeros pass nothing, as in the forward)
          if (d.v.base)
            detail::gemm_zeros_pass_nothing<T>(bf16, true, cols, Ev, rows, T(1), p.data(), cols, dO, dout.ld, T(1),
                                               d.v.row(b, j0), d.v.ld);
          if (d.q.base)
            detail::gemm_zeros_pass_nothing<T>(bf16, false, rows, E, cols, alpha, dp.data(), cols, in.k.row(b, j0),
                                               in.k.ld, T(1), d.q.row(b, i0), d.q.ld);
          if (d.k.base)
            detail::gemm_zeros_pass_nothing<T>(bf16, true, cols, E, rows, alpha, dp.data(), cols, q, in.q.ld, T(1),
                                               d.k.row(b, j0), d.k.ld);
        }
      }
    }
  });
}

}  // namespace

void detail::set_attention_tiles(std::size_t query_rows, std::size_t key_rows) {
  forced_query_rows.store(query_rows);
  forced_key_rows.store(key_rows);
}

template <class T>
Tensor<T> detail::tiled_attention_node(std::vector<Tensor<T>> inputs, const NodeLayout& l, const AttentionMask<T>& mask,
                                       const AttentionDropout& dropout, T alpha, GradFormula<T> formula) {
  const Dims& n = l.n;
  const Tiles t = tiles();
  Array<T> out = empty_array<T>(l.value, kAttentionOp);
  Array<T> m = empty_array<T>({n.B, n.L}, kAttentionOp), inv_l = empty_array<T>({n.B, n.L}, kAttentionOp);
  const bool bf16 = detail::autocast_gemm<T>();  // here, not on the pool threads; recorded for the backward
  tiled_forward<T>(l.o.at(out.data()), RowStats<T*>{m.data(), inv_l.data()},
                   read_qkv<T>(l, [&](std::size_t i) { return inputs[i].value().data(); }), MaskView<T>(mask, n.L, n.S),
                   dropout, n, alpha, bf16, t);

  const std::size_t count = inputs.size();
  return make_result<T>(
      kAttentionOp, std::move(out), std::move(inputs),
      [m = std::move(m), inv_l = std::move(inv_l), mask, dropout, alpha, l, bf16, t, count](Node<T>& node) {
        std::vector<Array<T>> g(count);  // each input's gradient, when it needs one
        std::vector<char> need(count);   // (a default Array is 0-d, one element: not "none")
        for (std::size_t i = 0; i < count; ++i)
          if ((need[i] = node.input_needs_grad(i))) g[i] = empty_array<T>(node.input_shape(i), kAttentionOp);
        auto grad = [&](const Place& p) { return need[p.input] ? p.at(g[p.input].data()) : Mat<T*>{}; };
        const T* dy = node.grad.data();
        const T* y = node.output_value().data();
        tiled_backward<T>(Qkv<T*>{grad(l.q), grad(l.k), grad(l.v)}, l.o.at(dy), l.o.at(y),
                          RowStats<const T*>{m.data(), inv_l.data()},
                          read_qkv<T>(l, [&](std::size_t i) { return node.input_value(i).data(); }),
                          MaskView<T>(mask, l.n.L, l.n.S), dropout, l.n, alpha, bf16, t);
        for (std::size_t i = 0; i < count; ++i)
          if (need[i]) node.input(i).accumulate_grad(std::move(g[i]));
      },
      std::move(formula));
}

template Tensor<float> detail::tiled_attention_node<float>(std::vector<Tensor<float>>, const NodeLayout&,
                                                           const AttentionMask<float>&, const AttentionDropout&, float,
                                                           GradFormula<float>);
template Tensor<double> detail::tiled_attention_node<double>(std::vector<Tensor<double>>, const NodeLayout&,
                                                             const AttentionMask<double>&, const AttentionDropout&,
                                                             double, GradFormula<double>);

}  // namespace xgrad
