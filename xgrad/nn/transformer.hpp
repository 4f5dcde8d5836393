// nn.TransformerEncoderLayer and nn.TransformerEncoder
// (https://pytorch.org/docs/stable/generated/torch.nn.TransformerEncoderLayer.html).
//
//   sa(x) = dropout1(self_attn(x, x, x, src_mask, src_key_padding_mask, need_weights=false, is_causal))
//   ff(x) = dropout2(linear2(dropout(activation(linear1(x)))))
//   post-norm (norm_first=false): x = norm1(x + sa(x));  x = norm2(x + ff(x))
//   pre-norm  (norm_first=true):  x = x + sa(norm1(x));  x = x + ff(norm2(x))
//
// activation: "relu" or "gelu" (the exact erf form). Submodules are registered in PyTorch's
// order, so the keys are self_attn.{in_proj_weight, in_proj_bias, out_proj.weight,
// out_proj.bias}, linear1.*, linear2.*, norm1.*, norm2.*. bias=false drops the biases of the
// attention, both linears and both norms.
//
// TransformerEncoder(layer, num_layers, norm) holds num_layers independent copies of `layer`
// (same initial values, separate parameters) as layers.0, layers.1, ..., then the optional
// final `norm`. Its forward passes mask, src_key_padding_mask and is_causal to every layer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <xgrad/nn/activation.hpp>
#include <xgrad/arg.hpp>
#include <xgrad/nn/dropout.hpp>
#include <xgrad/nn/layer_norm.hpp>
#include <xgrad/nn/linear.hpp>
#include <xgrad/nn/module.hpp>
#include <xgrad/nn/multihead_attention.hpp>
#include <xgrad/nn/sequential.hpp>

namespace xgrad::nn {

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

 private:
  Tensor<T> sa_block(const Tensor<T>& x, const AttnMask<T>& attn_mask, const AttnMask<T>& key_padding_mask,
                     bool is_causal);
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

extern template class TransformerEncoderLayer<float>;
extern template class TransformerEncoderLayer<double>;
extern template class TransformerEncoder<float>;
extern template class TransformerEncoder<double>;

}  // namespace xgrad::nn
