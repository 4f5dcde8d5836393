// nn.TransformerEncoderLayer, nn.TransformerEncoder, nn.TransformerDecoderLayer,
// nn.TransformerDecoder and nn.Transformer
// (https://pytorch.org/docs/stable/generated/torch.nn.Transformer.html), as in PyTorch 1.13.
//
// Encoder layer:
//   sa(x) = dropout1(self_attn(x, x, x, src_mask, src_key_padding_mask, need_weights=false, is_causal))
//   ff(x) = dropout2(linear2(dropout(activation(linear1(x)))))
//   post-norm (norm_first=false): x = norm1(x + sa(x));  x = norm2(x + ff(x))
//   pre-norm  (norm_first=true):  x = x + sa(norm1(x));  x = x + ff(norm2(x))
//
// Decoder layer, with `memory` the encoder's output:
//   sa(x)  = dropout1(self_attn(x, x, x, tgt_mask, tgt_key_padding_mask))
//   mha(x) = dropout2(multihead_attn(x, memory, memory, memory_mask, memory_key_padding_mask))
//   ff(x)  = dropout3(linear2(dropout(activation(linear1(x)))))
//   post-norm: x = norm1(x + sa(x));  x = norm2(x + mha(x));  x = norm3(x + ff(x))
//   pre-norm:  x = x + sa(norm1(x));  x = x + mha(norm2(x));  x = x + ff(norm3(x))
//
// activation: "relu", "gelu" (the exact erf form) or "gelu_tanh" (GELU(approximate="tanh"), GPT-2's
// gelu_new; PyTorch spells it as the callable partial(F.gelu, approximate="tanh")). Submodules are registered in PyTorch's
// order, so the keys are PyTorch's: self_attn.{in_proj_weight, in_proj_bias, out_proj.weight,
// out_proj.bias}, (multihead_attn.*,) linear1.*, linear2.*, norm1.*, norm2.*(, norm3.*).
// bias=false (an option of PyTorch 2.1, not of 1.13) drops the biases of the attentions, the
// linears and the norms.
//
// TransformerEncoder(layer, num_layers, norm) and TransformerDecoder(layer, num_layers, norm) hold
// num_layers independent copies of `layer` (same initial values, separate parameters) as layers.0,
// layers.1, ..., then the optional final `norm`; their forward passes the masks to every layer.
//
// Transformer: an encoder of num_encoder_layers layers and a decoder of num_decoder_layers layers,
// each with a final LayerNorm (keys encoder.layers.0.*, encoder.norm.*, decoder.layers.0.*,
// decoder.norm.*), every parameter of more than one dim then re-drawn by xavier_uniform_.
//   memory = encoder(src, src_mask, src_key_padding_mask)
//   out    = decoder(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask)
//
// The is_causal flags (is_causal, tgt_is_causal, memory_is_causal, src_is_causal) come from
// PyTorch 2.x; 1.13 has none. true applies the causal mask itself (key j > query i masked).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <xgrad/backend/batch.hpp>
#include <xgrad/nn/activation.hpp>
#include <xgrad/arg.hpp>
#include <xgrad/nn/dropout.hpp>
#include <xgrad/nn/layer_norm.hpp>
#include <xgrad/nn/linear.hpp>
#include <xgrad/nn/module.hpp>
#include <xgrad/nn/multihead_attention.hpp>
#include <xgrad/nn/sequential.hpp>
#include <xgrad/ops/ops.hpp>

namespace xgrad::nn {

// The feed-forward activation an `activation` option names ("relu", "gelu" or "gelu_tanh") applied
// to x; `who` names the layer in the error for another name.
template <class T>
Tensor<T> transformer_activation(const char* who, const std::string& activation, const Tensor<T>& x);

// The transformer layers' residual lines (not in PyTorch): norm(x + r), and {x + r, norm(x + r)},
// as one fused pass each way (ops.hpp, add_layer_norm). `norm` is read for its parameters and options (its
// forward is not called: as torch's fast path, which reads a LayerNorm's fields).
template <class T>
Tensor<T> residual_norm(const Tensor<T>& x, const Tensor<T>& r, const LayerNorm<T>& norm) {
  return add_layer_norm(x, r, norm.options().normalized_shape(), norm.weight, norm.bias, norm.options().eps());
}
template <class T>
std::pair<Tensor<T>, Tensor<T>> residual_and_norm(const Tensor<T>& x, const Tensor<T>& r, const LayerNorm<T>& norm) {
  return add_layer_norm_with_sum(x, r, norm.options().normalized_shape(), norm.weight, norm.bias, norm.options().eps());
}

struct TransformerEncoderLayerOptions {
  TransformerEncoderLayerOptions(std::int64_t d_model, std::int64_t nhead) : d_model_(d_model), nhead_(nhead) {}
  XGRAD_ARG(std::int64_t, d_model);
  XGRAD_ARG(std::int64_t, nhead);
  XGRAD_ARG(std::int64_t, dim_feedforward) = 2048;
  XGRAD_ARG(double, dropout) = 0.1;
  XGRAD_ARG(std::string, activation) = "relu";
  XGRAD_ARG(double, layer_norm_eps) = 1e-5;
  XGRAD_ARG(bool, batch_first) = false;
  XGRAD_ARG(bool, norm_first) = false;
  XGRAD_ARG(bool, bias) = true;
};

template <class T = float>
class TransformerEncoderLayer : public Module<T> {
 public:
  explicit TransformerEncoderLayer(const TransformerEncoderLayerOptions& options);

  // src: (S, N, E), (N, S, E) with batch_first, or (S, E). Masks as MultiheadAttention's
  // attn_mask and key_padding_mask.
  Tensor<T> forward(const Tensor<T>& src, const AttnMask<T>& src_mask, const AttnMask<T>& src_key_padding_mask = {},
                    bool is_causal = false);
  Tensor<T> forward(const Tensor<T>& src) override { return forward(src, AttnMask<T>()); }
  const TransformerEncoderLayerOptions& options() const { return options_; }

  std::shared_ptr<MultiheadAttention<T>> self_attn;
  std::shared_ptr<Linear<T>> linear1;    // d_model -> dim_feedforward
  std::shared_ptr<Dropout<T>> dropout;   // after the activation
  std::shared_ptr<Linear<T>> linear2;    // dim_feedforward -> d_model
  std::shared_ptr<LayerNorm<T>> norm1;
  std::shared_ptr<LayerNorm<T>> norm2;
  std::shared_ptr<Dropout<T>> dropout1;  // on the attention block's output
  std::shared_ptr<Dropout<T>> dropout2;  // on the feed-forward block's output

  // The layer's structure (the residuals, the norms, dropout1 and the feed-forward block) around
  // a self-attention attend(h) -> what self_attn gives for h. forward() is block(src, self_attn
  // with its masks); nn::forward_cached (kv_cache.hpp) runs the layer through it with a KV cache's
  // attention, so that both are this one definition. Not in PyTorch.
  template <class Attend>
  Tensor<T> block(const Tensor<T>& src, const Attend& attend) {
    const detail::BackendBatch one_batch;  // the layer's kernel calls as one run (backend/batch.hpp)
    const auto sa = [&](const Tensor<T>& h) { return dropout1->forward(attend(h)); };
    if (options_.norm_first()) {  // s = x + sa(norm1(x)) and norm2(s) in one pass; then s + ff(norm2(s))
      const auto [s, h] = residual_and_norm(src, sa(norm1->forward(src)), *norm2);
      return s + ff_block(h);
    }
    const Tensor<T> x = residual_norm(src, sa(src), *norm1);
    return residual_norm(x, ff_block(x), *norm2);
  }

 private:
  Tensor<T> ff_block(const Tensor<T>& x);

  TransformerEncoderLayerOptions options_;
};

template <class T = float>
class TransformerEncoder : public Module<T> {
 public:
  // `encoder_layer` itself is not part of the encoder (PyTorch deep-copies it); copying it draws
  // no random numbers. `norm` (any module with a single-input forward, usually a LayerNorm) is
  // registered as it is, when given.
  TransformerEncoder(const std::shared_ptr<TransformerEncoderLayer<T>>& encoder_layer, std::int64_t num_layers,
                     std::shared_ptr<Module<T>> norm = nullptr);

  Tensor<T> forward(const Tensor<T>& src, const AttnMask<T>& mask, const AttnMask<T>& src_key_padding_mask = {},
                    bool is_causal = false);
  Tensor<T> forward(const Tensor<T>& src) override { return forward(src, AttnMask<T>()); }

  std::int64_t num_layers() const { return static_cast<std::int64_t>(layers->size()); }
  // layers[i] as the TransformerEncoderLayer it is.
  std::shared_ptr<TransformerEncoderLayer<T>> layer(std::int64_t i) const;

  std::shared_ptr<ModuleList<T>> layers;
  std::shared_ptr<Module<T>> norm;  // null when absent
};

struct TransformerDecoderLayerOptions {
  TransformerDecoderLayerOptions(std::int64_t d_model, std::int64_t nhead) : d_model_(d_model), nhead_(nhead) {}
  XGRAD_ARG(std::int64_t, d_model);
  XGRAD_ARG(std::int64_t, nhead);
  XGRAD_ARG(std::int64_t, dim_feedforward) = 2048;
  XGRAD_ARG(double, dropout) = 0.1;
  XGRAD_ARG(std::string, activation) = "relu";
  XGRAD_ARG(double, layer_norm_eps) = 1e-5;
  XGRAD_ARG(bool, batch_first) = false;
  XGRAD_ARG(bool, norm_first) = false;
  XGRAD_ARG(bool, bias) = true;
};

template <class T = float>
class TransformerDecoderLayer : public Module<T> {
 public:
  explicit TransformerDecoderLayer(const TransformerDecoderLayerOptions& options);

  // tgt: (T, N, E), (N, T, E) with batch_first, or (T, E); memory: (S, N, E), (N, S, E) or (S, E),
  // with E = d_model -> tgt's shape. tgt_mask (T, T) or (N*nhead, T, T), memory_mask (T, S) or
  // (N*nhead, T, S), tgt_key_padding_mask (N, T), memory_key_padding_mask (N, S): bool (true = may
  // not attend) or float (added to the logits), as MultiheadAttention's.
  Tensor<T> forward(const Tensor<T>& tgt, const Tensor<T>& memory, const AttnMask<T>& tgt_mask = {},
                    const AttnMask<T>& memory_mask = {}, const AttnMask<T>& tgt_key_padding_mask = {},
                    const AttnMask<T>& memory_key_padding_mask = {}, bool tgt_is_causal = false,
                    bool memory_is_causal = false);
  const TransformerDecoderLayerOptions& options() const { return options_; }

  std::shared_ptr<MultiheadAttention<T>> self_attn;       // over tgt
  std::shared_ptr<MultiheadAttention<T>> multihead_attn;  // tgt's queries over memory
  std::shared_ptr<Linear<T>> linear1;    // d_model -> dim_feedforward
  std::shared_ptr<Dropout<T>> dropout;   // after the activation
  std::shared_ptr<Linear<T>> linear2;    // dim_feedforward -> d_model
  std::shared_ptr<LayerNorm<T>> norm1;
  std::shared_ptr<LayerNorm<T>> norm2;
  std::shared_ptr<LayerNorm<T>> norm3;
  std::shared_ptr<Dropout<T>> dropout1;  // on the self-attention block's output
  std::shared_ptr<Dropout<T>> dropout2;  // on the cross-attention block's output
  std::shared_ptr<Dropout<T>> dropout3;  // on the feed-forward block's output

 private:
  Tensor<T> sa_block(const Tensor<T>& x, const AttnMask<T>& attn_mask, const AttnMask<T>& key_padding_mask,
                     bool is_causal);
  Tensor<T> mha_block(const Tensor<T>& x, const Tensor<T>& memory, const AttnMask<T>& attn_mask,
                      const AttnMask<T>& key_padding_mask, bool is_causal);
  Tensor<T> ff_block(const Tensor<T>& x);

  TransformerDecoderLayerOptions options_;
};

template <class T = float>
class TransformerDecoder : public Module<T> {
 public:
  // As TransformerEncoder: `decoder_layer` is copied num_layers times (drawing no random
  // numbers) and is not part of the decoder; `norm` is registered as it is, when given.
  TransformerDecoder(const std::shared_ptr<TransformerDecoderLayer<T>>& decoder_layer, std::int64_t num_layers,
                     std::shared_ptr<Module<T>> norm = nullptr);

  Tensor<T> forward(const Tensor<T>& tgt, const Tensor<T>& memory, const AttnMask<T>& tgt_mask = {},
                    const AttnMask<T>& memory_mask = {}, const AttnMask<T>& tgt_key_padding_mask = {},
                    const AttnMask<T>& memory_key_padding_mask = {}, bool tgt_is_causal = false,
                    bool memory_is_causal = false);

  std::int64_t num_layers() const { return static_cast<std::int64_t>(layers->size()); }
  // layers[i] as the TransformerDecoderLayer it is.
  std::shared_ptr<TransformerDecoderLayer<T>> layer(std::int64_t i) const;

  std::shared_ptr<ModuleList<T>> layers;
  std::shared_ptr<Module<T>> norm;  // null when absent
};

// nn.Transformer's arguments. custom_encoder / custom_decoder replace the encoder / decoder that
// would be built (PyTorch takes any module with their forward; here they are a TransformerEncoder
// and a TransformerDecoder). bias is PyTorch 2.1's (1.13 has none: always biased).
template <class T = float>
struct TransformerOptions {
  TransformerOptions(std::int64_t d_model = 512, std::int64_t nhead = 8) : d_model_(d_model), nhead_(nhead) {}
  XGRAD_ARG(std::int64_t, d_model);
  XGRAD_ARG(std::int64_t, nhead);
  XGRAD_ARG(std::int64_t, num_encoder_layers) = 6;
  XGRAD_ARG(std::int64_t, num_decoder_layers) = 6;
  XGRAD_ARG(std::int64_t, dim_feedforward) = 2048;
  XGRAD_ARG(double, dropout) = 0.1;
  XGRAD_ARG(std::string, activation) = "relu";
  XGRAD_ARG(std::shared_ptr<TransformerEncoder<T>>, custom_encoder);
  XGRAD_ARG(std::shared_ptr<TransformerDecoder<T>>, custom_decoder);
  XGRAD_ARG(double, layer_norm_eps) = 1e-5;
  XGRAD_ARG(bool, batch_first) = false;
  XGRAD_ARG(bool, norm_first) = false;
  XGRAD_ARG(bool, bias) = true;
};

template <class T = float>
class Transformer : public Module<T> {
 public:
  explicit Transformer(const TransformerOptions<T>& options = {});

  // src: (S, N, E), (N, S, E) with batch_first, or (S, E); tgt: (T, N, E), (N, T, E) or (T, E),
  // with E = d_model and the same N -> (T, N, E), (N, T, E) or (T, E). src_mask (S, S),
  // tgt_mask (T, T), memory_mask (T, S) (or with N*nhead leading), key padding masks (N, S),
  // (N, T), (N, S).
  Tensor<T> forward(const Tensor<T>& src, const Tensor<T>& tgt, const AttnMask<T>& src_mask = {},
                    const AttnMask<T>& tgt_mask = {}, const AttnMask<T>& memory_mask = {},
                    const AttnMask<T>& src_key_padding_mask = {}, const AttnMask<T>& tgt_key_padding_mask = {},
                    const AttnMask<T>& memory_key_padding_mask = {}, bool src_is_causal = false,
                    bool tgt_is_causal = false, bool memory_is_causal = false);

  // (sz, sz): -inf above the diagonal, 0 elsewhere; pass `.value()` as a float mask.
  static Tensor<T> generate_square_subsequent_mask(std::int64_t sz);
  const TransformerOptions<T>& options() const { return options_; }

  std::shared_ptr<TransformerEncoder<T>> encoder;
  std::shared_ptr<TransformerDecoder<T>> decoder;

 private:
  // PyTorch's _reset_parameters: xavier_uniform_ on every parameter with more than one dim.
  void reset_parameters();

  TransformerOptions<T> options_;
};

extern template class TransformerEncoderLayer<float>;
extern template class TransformerEncoderLayer<double>;
extern template class TransformerEncoder<float>;
extern template class TransformerEncoder<double>;
extern template class TransformerDecoderLayer<float>;
extern template class TransformerDecoderLayer<double>;
extern template class TransformerDecoder<float>;
extern template class TransformerDecoder<double>;
extern template class Transformer<float>;
extern template class Transformer<double>;

}  // namespace xgrad::nn
