// nn.MultiheadAttention
// (https://pytorch.org/docs/stable/generated/torch.nn.MultiheadAttention.html), as
// F.multi_head_attention_forward computes it, with E = embed_dim, H = num_heads, d = E / H:
//
//   q = query W_q^T + b_q,  k = key W_k^T + b_k,  v = value W_v^T + b_v   (W_q, W_k, W_v: rows
//       [0, E), [E, 2E), [2E, 3E) of in_proj_weight (3E, E); likewise in_proj_bias (3E))
//   head h owns feature columns [h d, (h+1) d); the batch-head index is n H + h
//   O_{n,h} = softmax(q_{n,h} k_{n,h}^T / sqrt(d) + M) v_{n,h}        (L, d) per batch-head
//   out = concat_h(O_{n,h}) out_proj.weight^T + out_proj.bias          (L, N, E) or (N, L, E)
//
// Layout: (L, N, E) inputs by default, (N, L, E) with batch_first, (L, E) unbatched.
// Masks: attn_mask (L, S) or (N H, L, S) and key_padding_mask (N, S), each bool (true = may NOT
// attend) or float (added to the logits); they combine (bool OR, float sum), and is_causal adds
// the causal mask (key j > query i masked) itself. A query whose keys are all masked gets a zero
// attention output (so `out` is out_proj.bias there) and zero gradients, never NaN.
// need_weights also returns the attention probabilities (after dropout, as PyTorch), averaged
// over heads (N, L, S) or per head (N, H, L, S); the output is computed from those same
// probabilities. Dropout on the probabilities applies in training only.
//
// Init: in_proj_weight xavier-uniform, in_proj_bias and out_proj.bias zero, out_proj.weight as
// Linear. kdim/vdim other than embed_dim, add_bias_kv and add_zero_attn are not supported.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include <xgrad/arg.hpp>
#include <xgrad/nn/linear.hpp>
#include <xgrad/nn/module.hpp>

namespace xgrad::nn {

struct MultiheadAttentionOptions {
  MultiheadAttentionOptions(std::int64_t embed_dim, std::int64_t num_heads)
      : embed_dim_(embed_dim), num_heads_(num_heads) {}
  XGRAD_ARG(std::int64_t, embed_dim);
  XGRAD_ARG(std::int64_t, num_heads);
  XGRAD_ARG(double, dropout) = 0.0;
  XGRAD_ARG(bool, bias) = true;
  XGRAD_ARG(bool, batch_first) = false;
};

template <class T = float>
class MultiheadAttention : public Module<T> {
 public:
  explicit MultiheadAttention(const MultiheadAttentionOptions& options);
  MultiheadAttention(std::int64_t embed_dim, std::int64_t num_heads)
      : MultiheadAttention(MultiheadAttentionOptions(embed_dim, num_heads)) {}

  // Returns (attn_output, attn_weights); attn_weights is undefined when need_weights is false.
  std::pair<Tensor<T>, Tensor<T>> forward(const Tensor<T>& query, const Tensor<T>& key, const Tensor<T>& value,
                                          const AttnMask<T>& key_padding_mask = {}, bool need_weights = true,
                                          const AttnMask<T>& attn_mask = {}, bool average_attn_weights = true,
                                          bool is_causal = false);

  // xavier_uniform_(in_proj_weight); in_proj_bias = 0, out_proj.bias = 0.
  void reset_parameters();
  const MultiheadAttentionOptions& options() const { return options_; }

  Tensor<T> in_proj_weight;  // (3E, E)
  Tensor<T> in_proj_bias;    // (3E); undefined without bias
  std::shared_ptr<Linear<T>> out_proj;  // E -> E, registered as "out_proj"

 private:
  MultiheadAttentionOptions options_;
};

extern template class MultiheadAttention<float>;
extern template class MultiheadAttention<double>;

}  // namespace xgrad::nn
