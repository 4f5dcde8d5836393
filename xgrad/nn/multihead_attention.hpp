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
//
// forward is nn::functional::multi_head_attention_forward (below) on the module's parameters:
// the in-projection, one fused attention node (the same with or without need_weights: the
// weights are its second output and gradients flow through both), the out-projection.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include <xgrad/arg.hpp>
#include <xgrad/nn/linear.hpp>
#include <xgrad/nn/module.hpp>

namespace xgrad::nn {

namespace functional {

// F.multi_head_attention_forward's arguments, under PyTorch's names (as LibTorch's
// MultiheadAttentionForwardFuncOptions): the constructor takes the required ones, setters the
// rest. bias_k, bias_v, add_zero_attn, use_separate_proj_weight and static_k/v are not
// supported. batch_first is xgrad's own: (N, L, E) inputs read as they are, where PyTorch's
// module transposes them to (L, N, E) first.
template <class T = float>
struct MultiheadAttentionForwardFuncOptions {
  MultiheadAttentionForwardFuncOptions(std::int64_t embed_dim_to_check, std::int64_t num_heads,
                                       Tensor<T> in_proj_weight, Tensor<T> in_proj_bias, double dropout_p,
                                       Tensor<T> out_proj_weight, Tensor<T> out_proj_bias)
      : embed_dim_to_check_(embed_dim_to_check), num_heads_(num_heads), in_proj_weight_(std::move(in_proj_weight)),
        in_proj_bias_(std::move(in_proj_bias)), dropout_p_(dropout_p), out_proj_weight_(std::move(out_proj_weight)),
        out_proj_bias_(std::move(out_proj_bias)) {}
  XGRAD_ARG(std::int64_t, embed_dim_to_check);
  XGRAD_ARG(std::int64_t, num_heads);
  XGRAD_ARG(Tensor<T>, in_proj_weight);   // (3E, E)
  XGRAD_ARG(Tensor<T>, in_proj_bias);     // (3E) or undefined
  XGRAD_ARG(double, dropout_p);
  XGRAD_ARG(Tensor<T>, out_proj_weight);  // (E, E)
  XGRAD_ARG(Tensor<T>, out_proj_bias);    // (E) or undefined
  XGRAD_ARG(bool, training) = true;
  XGRAD_ARG(AttnMask<T>, key_padding_mask);
  XGRAD_ARG(bool, need_weights) = true;
  XGRAD_ARG(AttnMask<T>, attn_mask);
  XGRAD_ARG(bool, average_attn_weights) = true;
  XGRAD_ARG(bool, is_causal) = false;
  XGRAD_ARG(bool, batch_first) = false;
};

// F.multi_head_attention_forward: query (L, N, E), key and value (S, N, E) ((N, L, E) and
// (N, S, E) with batch_first; (L, E) and (S, E) unbatched) -> (attn_output in query's layout,
// attn_weights (N, L, S) averaged over heads or (N, H, L, S), (L, S) / (H, L, S) unbatched;
// undefined unless need_weights). Masks as MultiheadAttention's; dropout only when training.
template <class T>
std::pair<Tensor<T>, Tensor<T>> multi_head_attention_forward(const Tensor<T>& query, const Tensor<T>& key,
                                                             const Tensor<T>& value,
                                                             const MultiheadAttentionForwardFuncOptions<T>& options);

extern template std::pair<Tensor<float>, Tensor<float>> multi_head_attention_forward<float>(
    const Tensor<float>&, const Tensor<float>&, const Tensor<float>&,
    const MultiheadAttentionForwardFuncOptions<float>&);
extern template std::pair<Tensor<double>, Tensor<double>> multi_head_attention_forward<double>(
    const Tensor<double>&, const Tensor<double>&, const Tensor<double>&,
    const MultiheadAttentionForwardFuncOptions<double>&);

}  // namespace functional

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
