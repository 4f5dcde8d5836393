// Internal to the attention op: what its two implementations share.
//   attention.cpp        the materialized path: P (B, L, S) kept for the backward; the one that can
//                        return the weights; the dispatch between the paths;
//   attention_tiled.cpp  the tiled path (FlashAttention-2's loop): blocks of queries against
//                        blocks of keys with an online softmax, keeping only O and one log-sum-exp
//                        per query row; the backward recomputes P block by block;
//   attention_formula.cpp  the differentiable backward both nodes carry (create_graph): P
//                        recomputed whole, with differentiable ops.
// Both read q, k, v, the mask and the dropout decisions through the types below, so that every
// mask form and every dropout mask means the same on both.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <vector>

#include <xgrad/base/philox.hpp>
#include <xgrad/base/random.hpp>
#include <xgrad/core/op_kinds.hpp>
#include <xgrad/ops/attention/attention.hpp>

namespace xgrad::detail {

// The name of the attention node and of its arrays' allocations.
inline constexpr const char* kAttentionOp = op_name(OpKind::scaled_dot_product_attention).data();

// Sizes of one call: B independent batches (one head of one sequence each), each with
// q (L, E), k (S, E), v (S, Ev). Grouped-query attention (enable_gqa): `group` consecutive batches
// share one k and v, batch b reading KV batch b / group (query head h of a sequence reads KV head
// h / group, as transformers' repeat_kv); the backward sums their gradients in order of b.
struct AttentionDims {
  std::size_t B, L, S, E, Ev;
  std::size_t group = 1;
};

// One operand of the kernels: B row-major matrices whose rows are `ld` elements apart, batch
// b = (o, h) = (b / heads, b % heads) starting at base + o * outer + h * head. A contiguous
// (B, rows, cols) array is {base, 1, rows * cols, 0, cols}; one of B / G matrices that groups of G
// batches share (k and v under grouped-query attention) is {base, G, rows * cols, 0, cols}; head h
// of a (N, len, C) projection (columns [c + h d, c + (h+1) d)) is {base + c, H, len * C, d, C}, of
// a (len, N, C) one {base + c, H, C, d, N * C}. A null base: no operand.
template <class Ptr>
struct Mat {
  Ptr base = nullptr;
  std::size_t heads = 1, outer = 0, head = 0, ld = 0;

  Ptr at(std::size_t b) const { return base + (b / heads) * outer + (b % heads) * head; }
  Ptr row(std::size_t b, std::size_t i) const { return at(b) + i * ld; }
};

// q, k and v, or their gradients.
template <class Ptr>
struct Qkv {
  Mat<Ptr> q, k, v;
};

// The normalised mask as the kernels read it: row i of batch b starts at
// b * batch_stride + i * S of bool_mask or float_mask (at most one is set).
template <class T>
struct MaskView {
  const bool* bool_mask = nullptr;
  const T* float_mask = nullptr;
  std::size_t batch_stride = 0;  // L * S, or 0 when one (L, S) mask serves every batch
  std::size_t S = 0;
  bool causal = false;

  MaskView(const AttentionMask<T>& m, std::size_t L, std::size_t S_) : S(S_), causal(m.is_causal) {
    if (m.mask.empty()) return;
    if (m.mask.is_bool())
      bool_mask = m.mask.bool_mask().data();
    else
      float_mask = m.mask.float_mask().data();
    batch_stride = m.per_batch() ? L * S : 0;
  }

  // row[0, j1 - j0) holds the scores scale q_i k_j^T of keys j0 : j1 -> the logits A[b, i, j0 : j1]:
  // -inf where a bool mask, causality or a float mask of -inf masks (replacing the score, so that
  // a NaN or Inf score of a masked key is hidden), score + the float mask's value elsewhere.
  void apply(std::size_t b, std::size_t i, std::size_t j0, std::size_t j1, T* row) const {
    const T neg_inf = -std::numeric_limits<T>::infinity();
    const std::size_t at = b * batch_stride + i * S;
    if (bool_mask) {
      const bool* m = bool_mask + at;
      for (std::size_t j = j0; j < j1; ++j)
        if (m[j]) row[j - j0] = neg_inf;
    } else if (float_mask) {
      // -inf masks as a bool mask does: it replaces the score (a NaN score stays hidden)
      const T* m = float_mask + at;
      for (std::size_t j = j0; j < j1; ++j) row[j - j0] = m[j] == neg_inf ? neg_inf : row[j - j0] + m[j];
    }
    if (causal)
      for (std::size_t j = std::max(j0, i + 1); j < j1; ++j) row[j - j0] = neg_inf;
  }
};

// Attention dropout as both paths draw it: element (b, i, j) of the probabilities is kept when
// u >= p, u in [0, 1) being word j % 4 of philox4x32_10((j / 4, i, b mod 2^32, b / 2^32), seed)
// scaled by 2^-32, and kept elements are scaled by 1 / (1 - p). The seed is drawn once per op call
// from the op's Generator, so one call's decisions depend on nothing but (seed, b, i, j): the
// backward recomputes them, whatever the block sizes or the thread count.
struct AttentionDropout {
  double p = 0.0;  // 0: no dropout
  std::uint64_t seed = 0;

  bool on() const { return p > 0.0; }

  // p and one seed from `generator` (the default generator when null); draws nothing when p = 0.
  static AttentionDropout draw(double p, Generator* generator) {
    AttentionDropout d;
    d.p = p;
    if (p > 0.0) {
      Generator& gen = generator ? *generator : default_generator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      d.seed = gen.next_u64();
    }
    return d;
  }

  // out[0, j1 - j0) <- the multipliers (0 or 1 / (1 - p)) of elements (b, i, j0 : j1).
  template <class T>
  void multipliers(std::size_t b, std::size_t i, std::size_t j0, std::size_t j1, T* out) const {
    // u >= p  <=>  word >= p 2^32 (word integer): a threshold up to 2^32, which no word reaches (p = 1)
    const std::uint64_t threshold = static_cast<std::uint64_t>(std::ceil(p * 4294967296.0));
    const T keep = p < 1.0 ? T(1.0 / (1.0 - p)) : T(0);
    const PhiloxKey key{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
    const std::uint32_t row = static_cast<std::uint32_t>(i), b_lo = static_cast<std::uint32_t>(b),
                        b_hi = static_cast<std::uint32_t>(static_cast<std::uint64_t>(b) >> 32);
    std::uint32_t words[64];  // the words of elements j in [4 g, 4 g + 64)
    for (std::size_t g = j0 >> 2; 4 * g < j1; g += 16) {
      philox4x32_10_lanes(static_cast<std::uint32_t>(g), row, b_lo, b_hi, key, 16, words);
      const std::size_t lo = std::max(j0, 4 * g), hi = std::min(j1, 4 * g + 64);
      for (std::size_t j = lo; j < hi; ++j) out[j - j0] = words[j - 4 * g] >= threshold ? keep : T(0);
    }
  }
};

// ---- the probability rule, the same on every path (materialized, tiled, KV cache) ----------------
//
// Row i of the logits A (scores plus mask; a masked key is -inf) gives
//   m = the largest logit that is not NaN (-inf when none),  e_j = exp(A_j - m),  l = sum_j e_j,
//   P_j = e_j / l, except that P_j = 0 wherever e_j = 0 (a masked key, or one whose logit is so far
//   below m that exp underflows), even when l is NaN;
//   m = -inf (no key the row may see): P = 0, or NaN at the NaN logits when there are some.
// A NaN logit thus makes the row's P NaN except at its zeros; every path computes P the same way,
// so that the paths agree on which entries are exactly 0 and which are NaN. docs/reliability.md
// states the rule for users.

// max_j x[j] over the entries that are not NaN: -inf when there is none.
template <class T>
T row_max(const T* x, std::size_t n);

// Whether some x[j] is NaN.
template <class T>
bool has_nan(const T* x, std::size_t n);

// row (n logits) <- P by the rule above, given the row's m and 1 / l (NaN when l is).
template <class T>
void probabilities(T* row, std::size_t n, T m, T inv_l);

// row (n logits) <- P: row_max, the sum and probabilities() in one.
template <class T>
void softmax_row(T* row, std::size_t n);

// C (m, n) = alpha op(A) B + beta C with B (k, n) row-major and op(A) (m, k) = A or A^T, as
// gemm_autocast, except that a zero entry of op(A) passes nothing: a term op(A)_ip B_pc with
// op(A)_ip == 0 is left out even where row p of B holds an Inf or a NaN (IEEE would give NaN). So
// a probability 0 never reads its key's value, nor a gradient 0 its query or key; nor does alpha
// (a NaN scale) reach them. When alpha and B are finite (the common case) this is one
// gemm_autocast after a scan of B.
template <class T>
void gemm_zeros_pass_nothing(bool bf16, bool trans_a, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
                             std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc);

// A Mat of the node with an offset in place of the base pointer: into input `input` (q, k, v) or
// into the node's value (O, W).
struct Place {
  std::size_t input = 0, offset = 0, heads = 1, outer = 0, head = 0, ld = 0;

  template <class Ptr>
  Mat<Ptr> at(Ptr base) const {
    return {base + offset, heads, outer, head, ld};
  }
};

// Where the node reads q, k and v and writes O and W (w only with need_weights).
struct NodeLayout {
  AttentionDims n;
  Shape value;  // the node's value, holding O and, with need_weights, W
  Place q, k, v, o, w;
  // The same blocks as tensors, for the differentiable backward (attention_formula), which reads
  // them with shape ops: heads = 0, the inputs and the value are (lead..., rows, columns) and a
  // block is columns [offset, offset + its width); heads = H, attention_heads' (N, len, C)
  // (batch_first) or (len, N, C) tensors, a block being H heads side by side from column offset.
  std::size_t heads = 0;
  bool batch_first = true;
};

// q, k and v where l places them; data(i) is input i's values.
template <class T, class Data>
Qkv<const T*> read_qkv(const NodeLayout& l, Data data) {
  return {l.q.at<const T*>(data(l.q.input)), l.k.at<const T*>(data(l.k.input)), l.v.at<const T*>(data(l.v.input))};
}

// The tiled path's node (attention_tiled.cpp): the value is O alone (no weights), laid out as
// l.value; alpha is the logits' scale. Same name, inputs and gradients as the materialized node,
// and the same differentiable backward, `formula` (attention_formula).
template <class T>
Tensor<T> tiled_attention_node(std::vector<Tensor<T>> inputs, const NodeLayout& l, const AttentionMask<T>& mask,
                               const AttentionDropout& dropout, T alpha, GradFormula<T> formula);

// The node's differentiable backward, one for both paths (attention_formula.cpp): under
// create_graph it recomputes P (B, L, S) from q and k with differentiable ops (softmax, matmul,
// the mask and the dropout decisions as constants) and forms the gradients from it, whichever
// path ran the forward, so that they can be differentiated again. Copies the mask.
template <class T>
GradFormula<T> attention_formula(const NodeLayout& l, const AttentionMask<T>& mask, const AttentionDropout& dropout,
                                 T alpha, bool weights);

// For tests: the tiled path's block sizes, rows of queries and rows of keys per block (0, 0: the
// defaults). Tiny blocks exercise the block edges on small shapes.
void set_attention_tiles(std::size_t query_rows, std::size_t key_rows);

}  // namespace xgrad::detail
