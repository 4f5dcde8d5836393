#include <xgrad/nn/multihead_attention.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <xgrad/nn/init.hpp>

namespace xgrad::nn {

namespace {

using i64 = std::int64_t;

// A bool mask as the float mask it stands for: 0 where attended, -inf where masked.
template <class T>
Array<T> additive(const AttnMask<T>& m) {
  if (!m.is_bool()) return m.float_mask();
  const BoolArray& b = m.bool_mask();
  Array<T> f = Array<T>::from_shape(b.shape());
  std::transform(b.begin(), b.end(), f.begin(),
                 [](bool masked) { return masked ? -std::numeric_limits<T>::infinity() : T(0); });
  return f;
}

// The masks that are present, broadcast together: bool OR when all are bool, else the sum of
// their float forms (PyTorch: logical_or, or masked_fill(-inf), or the sum of float masks).
template <class T>
AttnMask<T> combine(const std::vector<AttnMask<T>>& masks) {
  std::vector<const AttnMask<T>*> present;
  bool all_bool = true;
  for (const auto& m : masks) {
    if (m.empty()) continue;
    present.push_back(&m);
    all_bool = all_bool && m.is_bool();
  }
  if (present.empty()) return {};
  if (present.size() == 1) return *present[0];
  if (all_bool) {
    BoolArray r = present[0]->bool_mask();
    for (std::size_t i = 1; i < present.size(); ++i) {
      BoolArray next = r || present[i]->bool_mask();
      r = std::move(next);
    }
    return r;
  }
  Array<T> r = additive(*present[0]);
  for (std::size_t i = 1; i < present.size(); ++i) {
    Array<T> next = r + additive(*present[i]);
    r = std::move(next);
  }
  return r;
}

// Rows (over the last dim S) of the mask in which every key is masked: shape (..., L', 1).
template <class T>
BoolArray fully_masked_rows(const AttnMask<T>& m, bool& any) {
  const Shape shape = m.is_bool() ? shape_of(m.bool_mask()) : shape_of(m.float_mask());
  Shape row_shape = shape;
  row_shape.back() = 1;
  BoolArray dead = BoolArray::from_shape(row_shape);
  const std::size_t s = shape.back();
  any = false;
  for (std::size_t r = 0; r < dead.size(); ++r) {
    bool all = s > 0;
    for (std::size_t j = 0; all && j < s; ++j)
      all = m.is_bool() ? m.bool_mask().data()[r * s + j]
                        : m.float_mask().data()[r * s + j] == -std::numeric_limits<T>::infinity();
    dead.data()[r] = all;
    any = any || all;
  }
  return dead;
}

// key_padding_mask (N, S) -> (N H, 1, S): row n H + h is row n (PyTorch's view/expand/reshape).
template <class A>
A expand_key_padding(const A& kpm, std::size_t n, std::size_t h, std::size_t s) {
  A out = A::from_shape({n * h, 1, s});
  for (std::size_t b = 0; b < n; ++b)
    for (std::size_t k = 0; k < h; ++k) std::copy(kpm.data() + b * s, kpm.data() + (b + 1) * s, out.data() + (b * h + k) * s);
  return out;
}

template <class T>
Shape mask_shape(const AttnMask<T>& m) {
  return m.is_bool() ? shape_of(m.bool_mask()) : shape_of(m.float_mask());
}

}  // namespace

template <class T>
MultiheadAttention<T>::MultiheadAttention(const MultiheadAttentionOptions& options)
    : Module<T>("MultiheadAttention"), options_(options) {
  const i64 e = options.embed_dim(), h = options.num_heads();
  XGRAD_CHECK(e > 0 && h > 0, "MultiheadAttention: embed_dim and num_heads must be positive, got ", e, " and ", h);
  XGRAD_CHECK(e % h == 0, "MultiheadAttention: embed_dim must be divisible by num_heads, got ", e, " and ", h);
  XGRAD_CHECK(options.dropout() >= 0.0 && options.dropout() <= 1.0,
              "MultiheadAttention: dropout probability has to be between 0 and 1, but got ", options.dropout());
  const auto E = static_cast<std::size_t>(e);
  in_proj_weight = this->register_parameter("in_proj_weight", zeros<T>({3 * E, E}));
  if (options.bias()) in_proj_bias = this->register_parameter("in_proj_bias", zeros<T>({3 * E}));
  // PyTorch's NonDynamicallyQuantizableLinear: a Linear.
  out_proj = this->register_module("out_proj", std::make_shared<Linear<T>>(LinearOptions(e, e).bias(options.bias())));
  reset_parameters();
}

template <class T>
void MultiheadAttention<T>::reset_parameters() {
  init::xavier_uniform_(in_proj_weight);
  if (in_proj_bias.defined()) init::zeros_(in_proj_bias);
  if (out_proj->bias.defined()) init::zeros_(out_proj->bias);
}

template <class T>
std::pair<Tensor<T>, Tensor<T>> MultiheadAttention<T>::forward(const Tensor<T>& query, const Tensor<T>& key,
                                                               const Tensor<T>& value,
                                                               const AttnMask<T>& key_padding_mask, bool need_weights,
                                                               const AttnMask<T>& attn_mask,
                                                               bool average_attn_weights, bool is_causal) {
  constexpr const char* op = "MultiheadAttention";
  const std::size_t E = static_cast<std::size_t>(options_.embed_dim());
  const std::size_t H = static_cast<std::size_t>(options_.num_heads());
  const std::size_t d = E / H;

  // ---- shapes: work in (N, L, E) when batch_first or unbatched, else (L, N, E) ----
  const bool unbatched = query.dim() == 2;
  XGRAD_CHECK(query.dim() == 3 || unbatched, op, ": query must be (L, N, E), (N, L, E) or (L, E) with E=", E,
              ", got ", query.shape());
  XGRAD_CHECK(key.dim() == query.dim() && value.dim() == query.dim(), op, ": query, key and value must have "
              "the same number of dims, got ", query.shape(), ", ", key.shape(), " and ", value.shape());
  XGRAD_CHECK(query.size(-1) == E && key.size(-1) == E && value.size(-1) == E, op,
              ": query, key and value must end in embed_dim=", E, ", got ", query.shape(), ", ", key.shape(),
              " and ", value.shape());
  XGRAD_CHECK(key.shape() == value.shape(), op, ": key shape ", key.shape(), " does not match value shape ",
              value.shape());
  const bool self_attention = query.same(key) && key.same(value);
  const bool shared_kv = key.same(value);
  const bool bf = options_.batch_first() || unbatched;
  const Tensor<T> q_in = unbatched ? unsqueeze(query, 0) : query;
  const Tensor<T> k_in = unbatched ? unsqueeze(key, 0) : key;
  const Tensor<T> v_in = unbatched ? unsqueeze(value, 0) : value;
  const std::size_t N = q_in.size(bf ? 0 : 1), L = q_in.size(bf ? 1 : 0), S = k_in.size(bf ? 1 : 0);
  XGRAD_CHECK(k_in.size(bf ? 0 : 1) == N, op, ": query and key must have the same batch size, got ",
              query.shape(), " and ", key.shape());

  // ---- masks -> one mask in the (N H, L, S) frame (or (L, S)) ----
  std::vector<AttnMask<T>> masks;
  if (!attn_mask.empty()) {
    const Shape ms = mask_shape(attn_mask);
    XGRAD_CHECK(ms == Shape({L, S}) || ms == Shape({N * H, L, S}), op, ": attn_mask must be (L, S) = ",
                Shape({L, S}), " or (N*num_heads, L, S) = ", Shape({N * H, L, S}), ", got ", ms);
    masks.push_back(attn_mask);
  }
  if (!key_padding_mask.empty()) {
    const Shape ms = mask_shape(key_padding_mask);
    const Shape want = unbatched ? Shape{S} : Shape{N, S};
    XGRAD_CHECK(ms == want, op, ": key_padding_mask must be ", (unbatched ? "(S) = " : "(N, S) = "), want,
                ", got ", ms);
    if (key_padding_mask.is_bool()) masks.emplace_back(expand_key_padding(key_padding_mask.bool_mask(), N, H, S));
    else masks.emplace_back(expand_key_padding(key_padding_mask.float_mask(), N, H, S));
  }
  // is_causal: key j > query i is masked (top-left aligned when L != S).
  const bool causal_only = is_causal && masks.empty() && !need_weights;
  if (is_causal && !causal_only) {
    BoolArray causal = BoolArray::from_shape({L, S});
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t j = 0; j < S; ++j) causal(i, j) = j > i;
    masks.emplace_back(std::move(causal));
  }
  const AttnMask<T> mask = combine(masks);

  // ---- in-projection, then heads: q (N H, L, d), k and v (N H, S, d) ----
  // (len, N, E) or (N, len, E) -> (N H, len, d); head h takes columns [h d, (h+1) d). Each split
  // is one permute-copy (detail::permute_reshape).
  const std::vector<std::size_t> head_perm = bf ? std::vector<std::size_t>{0, 2, 1, 3} : std::vector<std::size_t>{1, 2, 0, 3};
  auto split_heads = [&](const Tensor<T>& x, std::size_t len) {
    return detail::permute_reshape(x, bf ? Shape{N, len, H, d} : Shape{len, N, H, d}, head_perm, Shape{N * H, len, d});
  };
  auto rows = [](const Tensor<T>& t, std::size_t start, std::size_t length) {
    return t.defined() ? narrow(t, 0, static_cast<i64>(start), static_cast<i64>(length)) : Tensor<T>();
  };
  Tensor<T> q, k, v;
  if (self_attention) {
    // qkv (.., .., 3E) viewed (.., .., 3, H, d) -> (3, N, H, L, d) = (3, N H, L, d) in one copy;
    // q, k and v are its contiguous blocks (the fused attention reads them in place).
    Tensor<T> qkv = linear(q_in, in_proj_weight, in_proj_bias);
    qkv = detail::permute_reshape(qkv, bf ? Shape{N, L, 3, H, d} : Shape{L, N, 3, H, d},
                                  bf ? std::vector<std::size_t>{2, 0, 3, 1, 4} : std::vector<std::size_t>{2, 1, 3, 0, 4},
                                  need_weights ? Shape{3 * N * H, L, d} : Shape{3, N * H, L, d});
    if (need_weights) {
      const i64 nh = static_cast<i64>(N * H);
      q = narrow(qkv, 0, 0, nh);
      k = narrow(qkv, 0, nh, nh);
      v = narrow(qkv, 0, 2 * nh, nh);
    } else {
      q = qkv;  // packed
    }
  } else if (shared_kv) {
    q = split_heads(linear(q_in, rows(in_proj_weight, 0, E), rows(in_proj_bias, 0, E)), L);
    Tensor<T> kv = linear(k_in, rows(in_proj_weight, E, 2 * E), rows(in_proj_bias, E, 2 * E));
    k = split_heads(narrow(kv, -1, 0, static_cast<i64>(E)), S);
    v = split_heads(narrow(kv, -1, static_cast<i64>(E), static_cast<i64>(E)), S);
  } else {
    q = split_heads(linear(q_in, rows(in_proj_weight, 0, E), rows(in_proj_bias, 0, E)), L);
    k = split_heads(linear(k_in, rows(in_proj_weight, E, E), rows(in_proj_bias, E, E)), S);
    v = split_heads(linear(v_in, rows(in_proj_weight, 2 * E, E), rows(in_proj_bias, 2 * E, E)), S);
  }
  const i64 n = static_cast<i64>(N), h = static_cast<i64>(H);

  const double p = this->is_training() ? options_.dropout() : 0.0;
  Tensor<T> o, weights;  // o: (N H, L, d)
  if (!need_weights && self_attention) {
    o = detail::self_attention_packed(q, mask, p, causal_only);
  } else if (!need_weights) {
    o = scaled_dot_product_attention(q, k, v, mask, p, causal_only);
  } else {
    // The same computation composed from ops, so that the probabilities can be returned:
    // A = q k^T / sqrt(d) + M (N H, L, S); P = softmax(A); P = dropout(P); o = P v.
    Tensor<T> logits = matmul(q * static_cast<T>(1.0 / std::sqrt(static_cast<double>(d))), transpose(k, -2, -1));
    if (!mask.empty()) {
      if (mask.is_bool()) logits = masked_fill(logits, mask.bool_mask(), -std::numeric_limits<T>::infinity());
      else logits = logits + Tensor<T>(mask.float_mask());
    }
    // Fully masked rows: softmax over a finite row (0s), then zeroed, so no NaN reaches forward
    // or backward.
    bool any_dead = false;
    BoolArray dead;
    if (!mask.empty()) dead = fully_masked_rows(mask, any_dead);
    if (any_dead) logits = masked_fill(logits, dead, T(0));
    Tensor<T> probs = softmax(logits, -1);
    if (any_dead) probs = masked_fill(probs, dead, T(0));
    if (p > 0.0) probs = dropout(probs, p, true);
    o = matmul(probs, v);
    weights = reshape(probs, {n, h, static_cast<i64>(L), static_cast<i64>(S)});  // (N, H, L, S)
    if (average_attn_weights) weights = sum(weights, {1}) * static_cast<T>(1.0 / static_cast<double>(H));
    if (unbatched) weights = squeeze(weights, 0);
  }

  // (N H, L, d) viewed (N, H, L, d) -> (N, L, E) or (L, N, E), one copy -> out_proj.
  const Tensor<T> merged = detail::permute_reshape(
      o, Shape{N, H, L, d}, bf ? std::vector<std::size_t>{0, 2, 1, 3} : std::vector<std::size_t>{2, 0, 1, 3},
      bf ? Shape{N, L, E} : Shape{L, N, E});
  Tensor<T> out = out_proj->forward(merged);
  if (unbatched) out = squeeze(out, 0);
  return {out, weights};
}

template class MultiheadAttention<float>;
template class MultiheadAttention<double>;

}  // namespace xgrad::nn
