// The attention op's differentiable backward (attention_kernels.hpp: attention_formula), the
// GradFormula both paths give their node: under create_graph the gradients are recomputed from q, k
// and v with differentiable ops, so that they can be differentiated again (Hessian-vector
// products, gradient penalties). It materializes P (B, L, S) whichever path ran the forward: the
// tiled path switches to the materialized recomputation here, and its memory under create_graph
// is O(L S) per batch-head, as the materialized path's. The first-order backward stays the fused
// kernels' (attention.cpp, attention_tiled.cpp).
//
// Per batch b (B = the leading dims, or N num_heads), q: (L, E), k: (S, E), v: (S, Ev), dO: (L, Ev),
// with the forward's mask and dropout decisions as constants:
//   A   = scale q k^T + M          (L, S)  M: the float mask; a masked logit (bool mask, causal,
//                                          a float mask's -inf) set to a finite floor instead
//   P   = softmax(A), then 0 at the masked logits (a row with no key it may see: P = 0, as the
//         kernels give, and no NaN: the floor is finite)
//   Pd  = P * D                            D: the dropout multipliers (AttentionDropout), or 1
//   dv  = Pd^T dO                          <- O = Pd v
//   dPd = dO v^T + dW                      dW: the weights' gradient (need_weights), W = Pd
//   dP  = dPd * D                          <- Pd = P * D
//   dA  = P * (dP - rowsum(dP * P))        <- P = softmax(A)
//   dq  = scale dA k;  dk = scale dA^T q   <- A = scale q k^T
// Under grouped-query attention k and v are repeated to every query head first (repeat_kv) and
// each KV head's dk and dv are the sums over its query heads.
// The kernels' care for Inf and NaN (zeros pass nothing: attention_kernels.hpp) is not repeated
// here: in the products a zero times a NaN or Inf (a masked key's, a value row's) gives NaN, as
// IEEE has it.
#include <xgrad/ops/attention/attention_kernels.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

namespace xgrad {

namespace {

using detail::AttentionDropout;
using detail::AttentionMask;
using detail::NodeLayout;
using detail::Place;

std::int64_t i64(std::size_t x) { return static_cast<std::int64_t>(x); }

// Block p of t (an input, or the node's value, or its gradient) as (B / group, rows, cols): group > 1
// for k and v under grouped-query attention (contiguous inputs only).
template <class T>
Tensor<T> read_block(const Tensor<T>& t, const Place& p, const NodeLayout& l, std::size_t rows, std::size_t cols,
                     std::size_t group = 1) {
  const std::size_t H = l.heads, width = (H ? H : 1) * cols;
  // (lead..., rows, C) -> (B, rows, C); or (N, len, C) / (len, N, C) as they are
  Tensor<T> x = H ? t : reshape(t, {i64(l.n.B / group), i64(rows), t.size(-1)});
  if (p.offset != 0 || i64(width) != x.size(-1)) x = narrow(x, -1, i64(p.offset), i64(width));
  if (!H) return x;
  // (N, len, H cols) or (len, N, H cols) -> (N, H, len, cols) -> (B, rows, cols)
  x = reshape(x, {x.size(0), x.size(1), i64(H), i64(cols)});
  x = permute(x, l.batch_first ? std::vector<std::int64_t>{0, 2, 1, 3} : std::vector<std::int64_t>{1, 2, 0, 3});
  return reshape(x, {i64(l.n.B), i64(rows), i64(cols)});
}

// The reverse of read_block: g (B, rows, cols) -> the block's columns of a tensor of `shape`.
template <class T>
Tensor<T> block_columns(const Tensor<T>& g, const Shape& shape, const NodeLayout& l, std::size_t rows,
                        std::size_t cols) {
  const std::size_t H = l.heads;
  std::vector<std::int64_t> part(shape.begin(), shape.end());
  part.back() = i64((H ? H : 1) * cols);
  if (!H) return reshape(g, part);
  // (N, H, len, cols) -> (N, len, H, cols) or (len, N, H, cols)
  Tensor<T> x = reshape(g, {i64(l.n.B / H), i64(H), i64(rows), i64(cols)});
  x = permute(x, l.batch_first ? std::vector<std::int64_t>{0, 2, 1, 3} : std::vector<std::int64_t>{2, 0, 1, 3});
  return reshape(x, part);
}

// x (B / G, rows, cols) -> (B, rows, cols): each batch repeated G times in place, as
// repeat_interleave(x, G, 0) (transformers' repeat_kv); its gradient sums over each group.
template <class T>
Tensor<T> repeat_kv(const Tensor<T>& x, std::size_t G) {
  if (G == 1) return x;
  const std::int64_t kv = x.size(0), rows = x.size(1), cols = x.size(2);
  return reshape(expand(reshape(x, {kv, 1, rows, cols}), {kv, i64(G), rows, cols}), {kv * i64(G), rows, cols});
}

// g (B, rows, cols) -> (B / G, rows, cols): the sum of each group of G consecutive batches.
template <class T>
Tensor<T> sum_groups(const Tensor<T>& g, std::size_t G) {
  if (G == 1 || !g.defined()) return g;
  return sum(reshape(g, {g.size(0) / i64(G), i64(G), g.size(1), g.size(2)}), {1});
}

// The forward's mask as constants over the logits (B, L, S), each (L, S) or (B, L, S):
// masked = true where a key may not be seen (a bool mask, a float mask's -inf, causality);
// added = the float mask with 0 at its -inf. Empty arrays where there is nothing of the kind.
template <class T>
struct MaskConstants {
  BoolArray masked;
  Array<T> added;
};

template <class T>
MaskConstants<T> mask_constants(const AttentionMask<T>& m, const detail::AttentionDims& n) {
  MaskConstants<T> c;
  if (m.mask.empty() && !m.is_causal) return c;
  const Shape shape = m.per_batch() ? Shape{n.B, n.L, n.S} : Shape{n.L, n.S};
  c.masked = full_array<bool>(shape, false, detail::kAttentionOp);
  bool* masked = c.masked.data();
  const std::size_t count = c.masked.size();
  if (m.mask.is_bool()) {
    std::copy_n(m.mask.bool_mask().data(), count, masked);
  } else if (!m.mask.empty()) {
    const T neg_inf = -std::numeric_limits<T>::infinity();
    c.added = copy_array(m.mask.float_mask(), detail::kAttentionOp);
    T* added = c.added.data();
    for (std::size_t e = 0; e < count; ++e)
      if (added[e] == neg_inf) {
        masked[e] = true;
        added[e] = T(0);
      }
  }
  if (m.is_causal)  // key j > query i, in every (L, S) matrix
    for (std::size_t e = 0; e < count; ++e)
      if (e % n.S > e / n.S % n.L) masked[e] = true;
  return c;
}

// The dropout multipliers (B, L, S) of the forward's decisions (as the materialized path keeps them).
template <class T>
Array<T> dropout_multipliers(const AttentionDropout& dropout, const detail::AttentionDims& n) {
  Array<T> D = empty_array<T>({n.B, n.L, n.S}, detail::kAttentionOp);
  for (std::size_t r = 0; r < n.B * n.L; ++r) dropout.multipliers(r / n.L, r % n.L, 0, n.S, D.data() + r * n.S);
  return D;
}

}  // namespace

template <class T>
GradFormula<T> detail::attention_formula(const NodeLayout& l, const AttentionMask<T>& mask,
                                         const AttentionDropout& dropout, T alpha, bool weights) {
  auto saved = std::make_shared<const AttentionMask<T>>(mask);
  return [l, saved, dropout, alpha, weights](const BackwardArgs<T>& args) {
    const detail::AttentionDims& n = l.n;
    const bool need_q = args.needs(l.q.input), need_k = args.needs(l.k.input), need_v = args.needs(l.v.input);
    const Tensor<T> q = read_block(args.input(l.q.input), l.q, l, n.L, n.E);
    // k, v: (B / G, S, .) under grouped-query attention, repeated to (B, S, .)
    const Tensor<T> k = repeat_kv(read_block(args.input(l.k.input), l.k, l, n.S, n.E, n.group), n.group);
    const Tensor<T> v = repeat_kv(read_block(args.input(l.v.input), l.v, l, n.S, n.Ev, n.group), n.group);
    const Tensor<T> dO = read_block(args.grad(), l.o, l, n.L, n.Ev);

    // P = softmax(scale q k^T + M), 0 where masked;  Pd = P * D
    const MaskConstants<T> c = mask_constants(*saved, n);
    Tensor<T> A = matmul(q, transpose(k, 1, 2)) * alpha;
    if (c.added.dimension() > 0) A = A + Tensor<T>(c.added);
    if (c.masked.dimension() > 0) A = masked_fill(A, c.masked, std::numeric_limits<T>::lowest() / 2);
    Tensor<T> P = softmax(A, -1);
    if (c.masked.dimension() > 0) P = masked_fill(P, c.masked, T(0));
    const Tensor<T> D = dropout.on() ? Tensor<T>(dropout_multipliers<T>(dropout, n)) : Tensor<T>();
    const Tensor<T> Pd = dropout.on() ? P * D : P;

    Tensor<T> dq, dk, dv;
    if (need_v) dv = matmul(transpose(Pd, 1, 2), dO);  // dv = Pd^T dO
    if (need_q || need_k) {
      Tensor<T> dP = matmul(dO, transpose(v, 1, 2));  // dPd = dO v^T (+ dW)
      if (weights) dP = dP + read_block(args.grad(), l.w, l, n.L, n.S);
      if (dropout.on()) dP = dP * D;                            // dP = dPd * D
      const Tensor<T> dA = P * (dP - sum(dP * P, {-1}, true));  // dA = P (dP - rowsum(dP P))
      if (need_q) dq = matmul(dA, k) * alpha;                   // dq = scale dA k
      if (need_k) dk = matmul(transpose(dA, 1, 2), q) * alpha;  // dk = scale dA^T q
    }
    // a KV head's gradient: the sum over the query heads that read it
    dk = sum_groups(dk, n.group);
    dv = sum_groups(dv, n.group);

    // Each input's gradient: its blocks' gradients side by side (they tile its columns).
    struct Block {
      const Place& at;
      const Tensor<T>& grad;
      std::size_t rows, cols;
    };
    const Block blocks[3] = {{l.q, dq, n.L, n.E}, {l.k, dk, n.S, n.E}, {l.v, dv, n.S, n.Ev}};
    std::vector<Tensor<T>> grads(args.num_inputs());
    for (std::size_t i = 0; i < grads.size(); ++i) {
      if (!args.needs(i)) continue;
      std::vector<std::pair<std::size_t, Tensor<T>>> parts;  // (first column, part)
      for (const Block& b : blocks)
        if (b.at.input == i)
          parts.emplace_back(b.at.offset, block_columns(b.grad, args.input_shape(i), l, b.rows, b.cols));
      std::sort(parts.begin(), parts.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
      std::vector<Tensor<T>> side_by_side;
      for (auto& p : parts) side_by_side.push_back(std::move(p.second));
      grads[i] = side_by_side.size() == 1 ? side_by_side[0] : cat(side_by_side, -1);
    }
    return grads;
  };
}

template GradFormula<float> detail::attention_formula<float>(const NodeLayout&, const AttentionMask<float>&,
                                                             const AttentionDropout&, float, bool);
template GradFormula<double> detail::attention_formula<double>(const NodeLayout&, const AttentionMask<double>&,
                                                               const AttentionDropout&, double, bool);

}  // namespace xgrad
