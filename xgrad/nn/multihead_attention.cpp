#include <xgrad/nn/multihead_attention.hpp>
#include <xgrad/core/trace.hpp>

#include <cmath>
#include <vector>

#include <xgrad/ops/attention/attention.hpp>
#include <xgrad/nn/init.hpp>

namespace xgrad::nn {

namespace {

using i64 = std::int64_t;

template <class T>
Shape mask_shape(const AttnMask<T>& m) {
  return m.is_bool() ? shape_of(m.bool_mask()) : shape_of(m.float_mask());
}

}  // namespace

template <class T>
std::pair<Tensor<T>, Tensor<T>> functional::multi_head_attention_forward(
    const Tensor<T>& query, const Tensor<T>& key, const Tensor<T>& value,
    const MultiheadAttentionForwardFuncOptions<T>& options) {
  constexpr const char* op = "MultiheadAttention";
  const i64 e = options.embed_dim_to_check(), h = options.num_heads();
  XGRAD_CHECK(e > 0 && h > 0 && e % h == 0, op, ": embed_dim must be a positive multiple of num_heads, got ", e,
              " and ", h);
  const std::size_t E = static_cast<std::size_t>(e), H = static_cast<std::size_t>(h);

  // ---- shapes: work in (N, L, E) when batch_first or unbatched, else (L, N, E) ----
  const bool unbatched = query.dim() == 2;
  XGRAD_CHECK(query.dim() == 3 || unbatched, op, ": query must be (L, N, E), (N, L, E) or (L, E) with E=", E,
              ", got ", query.shape());
  XGRAD_CHECK(key.dim() == query.dim() && value.dim() == query.dim(), op, ": query, key and value must have "
              "the same number of dims, got ", query.shape(), ", ", key.shape(), " and ", value.shape());
  XGRAD_CHECK(query.size(-1) == e && key.size(-1) == e && value.size(-1) == e, op,
              ": query, key and value must end in embed_dim=", E, ", got ", query.shape(), ", ", key.shape(),
              " and ", value.shape());
  XGRAD_CHECK(key.shape() == value.shape(), op, ": key shape ", key.shape(), " does not match value shape ",
              value.shape());
  const bool self_attention = query.same(key) && key.same(value);
  const bool shared_kv = key.same(value);
  const bool bf = options.batch_first() || unbatched;
  const Tensor<T> q_in = unbatched ? unsqueeze(query, 0) : query;
  const Tensor<T> k_in = unbatched ? unsqueeze(key, 0) : key;
  const Tensor<T> v_in = unbatched ? unsqueeze(value, 0) : value;
  const Shape qs = q_in.shape(), ks = k_in.shape();
  const std::size_t N = qs[bf ? 0 : 1], L = qs[bf ? 1 : 0], S = ks[bf ? 1 : 0];
  XGRAD_CHECK(ks[bf ? 0 : 1] == N, op, ": query and key must have the same batch size, got ",
              query.shape(), " and ", key.shape());

  // ---- masks: checked here, then one mask for the (N, H, L, S) logits ----
  const AttnMask<T>& attn_mask = options.attn_mask();
  const AttnMask<T>& key_padding_mask = options.key_padding_mask();
  if (!attn_mask.empty()) {
    const Shape ms = mask_shape(attn_mask);
    XGRAD_CHECK(ms == Shape({L, S}) || ms == Shape({N * H, L, S}), op, ": attn_mask must be (L, S) = ",
                Shape({L, S}), " or (N*num_heads, L, S) = ", Shape({N * H, L, S}), ", got ", ms);
  }
  if (!key_padding_mask.empty()) {
    const Shape ms = mask_shape(key_padding_mask);
    const Shape want = unbatched ? Shape{S} : Shape{N, S};
    XGRAD_CHECK(ms == want, op, ": key_padding_mask must be ", (unbatched ? "(S) = " : "(N, S) = "), want,
                ", got ", ms);
  }
  trace::Composite<T> traced(OpKind::multi_head_attention,
                             {query, key, value, options.in_proj_weight(), options.in_proj_bias(),
                              options.out_proj_weight(), options.out_proj_bias()},
                             {{"num_heads", h},
                              {"batch_first", options.batch_first()},
                              trace::Arg::mask("key_padding_mask", key_padding_mask),
                              trace::Arg::mask("attn_mask", attn_mask),
                              {"need_weights", options.need_weights()},
                              {"average_attn_weights", options.average_attn_weights()},
                              {"is_causal", options.is_causal()},
                              {"dropout_p", options.training() ? options.dropout_p() : 0.0}});
  detail::AttentionArgs<T> args;
  args.mask = detail::normalize_attention_mask<T>({N, H, L, S}, attn_mask, key_padding_mask, options.is_causal());
  args.dropout_p = options.training() ? options.dropout_p() : 0.0;
  args.need_weights = options.need_weights();

  // ---- in-projection, then the heads read in place ----
  // The projections stay (N, len, .) or (len, N, .); head h of q, k and v is columns [h d, (h+1) d)
  // of its E-column block, and the attention writes o (N, L, E) or (L, N, E) directly.
  const Tensor<T>& w = options.in_proj_weight();
  const Tensor<T>& b = options.in_proj_bias();
  auto rows = [](const Tensor<T>& t, std::size_t start, std::size_t length) {
    return t.defined() ? narrow(t, 0, static_cast<i64>(start), static_cast<i64>(length)) : Tensor<T>();
  };
  std::vector<Tensor<T>> projections;
  if (self_attention) {
    projections = {linear(q_in, w, b)};  // qkv (.., .., 3E)
  } else if (shared_kv) {
    projections = {linear(q_in, rows(w, 0, E), rows(b, 0, E)), linear(k_in, rows(w, E, 2 * E), rows(b, E, 2 * E))};
  } else {
    projections = {linear(q_in, rows(w, 0, E), rows(b, 0, E)), linear(k_in, rows(w, E, E), rows(b, E, E)),
                   linear(v_in, rows(w, 2 * E, E), rows(b, 2 * E, E))};
  }
  // o (N, L, E) or (L, N, E), weights (N, H, L, S)
  const std::pair<Tensor<T>, Tensor<T>> attn = detail::attention_heads(projections, H, bf, args);
  const Tensor<T>& merged = attn.first;
  Tensor<T> out = linear(merged, options.out_proj_weight(), options.out_proj_bias());
  Tensor<T> weights = attn.second;
  if (weights.defined() && options.average_attn_weights())
    weights = sum(weights, {1}) * static_cast<T>(1.0 / static_cast<double>(H));  // (N, L, S)
  if (unbatched) {
    out = squeeze(out, 0);
    if (weights.defined()) weights = squeeze(weights, 0);
  }
  traced.finish({out, weights});
  return {out, weights};
}

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
  return functional::multi_head_attention_forward(
      query, key, value,
      functional::MultiheadAttentionForwardFuncOptions<T>(options_.embed_dim(), options_.num_heads(), in_proj_weight,
                                                          in_proj_bias, options_.dropout(), out_proj->weight,
                                                          out_proj->bias)
          .training(this->is_training())
          .key_padding_mask(key_padding_mask)
          .need_weights(need_weights)
          .attn_mask(attn_mask)
          .average_attn_weights(average_attn_weights)
          .is_causal(is_causal)
          .batch_first(options_.batch_first()));
}

template class MultiheadAttention<float>;
template class MultiheadAttention<double>;
#define XGRAD_INSTANTIATE(T)                                                                                  \
  template std::pair<Tensor<T>, Tensor<T>> functional::multi_head_attention_forward<T>(                       \
      const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, const functional::MultiheadAttentionForwardFuncOptions<T>&);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad::nn
