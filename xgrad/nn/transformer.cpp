#include <xgrad/nn/transformer.hpp>

#include <limits>

#include <xgrad/nn/init.hpp>
#include <xgrad/ops/linear_gelu.hpp>

namespace xgrad::nn {

namespace {

// PyTorch's _get_clones: num_layers deep copies of `layer` appended to `layers`. A copy is a fresh
// layer with the same options, then the same values. Building it draws initial values from the
// default generator; restoring the generator's state makes the copies draw nothing.
template <class T, class Layer>
void append_clones(ModuleList<T>& layers, const Layer& layer, std::int64_t num_layers) {
  const StateDict<T> values = layer.state_dict();
  const GeneratorState rng = default_generator().get_state();
  for (std::int64_t i = 0; i < num_layers; ++i) {
    auto copy = std::make_shared<Layer>(layer.options());
    copy->load_state_dict(values);
    copy->train(layer.is_training());
    layers.push_back(copy);
  }
  default_generator().set_state(rng);
}

// The feed-forward block's activation(linear1(x)): for the GELUs one fused op (ops/linear_gelu.hpp,
// the same values as the two ops, bit for bit), for relu the two ops.
template <class T>
Tensor<T> linear_activation(const char* who, const std::string& activation, Linear<T>& linear1, const Tensor<T>& x) {
  if (activation == "gelu" || activation == "gelu_tanh")
    return xgrad::detail::linear_gelu(x, linear1.weight, linear1.bias, activation == "gelu" ? "none" : "tanh");
  return transformer_activation(who, activation, linear1.forward(x));
}

}  // namespace

template <class T>
Tensor<T> transformer_activation(const char* who, const std::string& activation, const Tensor<T>& x) {
  if (activation == "relu") return relu(x);
  if (activation == "gelu") return gelu(x);
  XGRAD_CHECK(activation == "gelu_tanh", who, ": activation should be relu/gelu, not ", activation,
              " (or gelu_tanh: GELU(approximate=\"tanh\"))");
  return gelu(x, "tanh");
}

template <class T>
TransformerEncoderLayer<T>::TransformerEncoderLayer(const TransformerEncoderLayerOptions& options)
    : Module<T>("TransformerEncoderLayer"), options_(options) {
  XGRAD_CHECK(options.activation() == "relu" || options.activation() == "gelu" || options.activation() == "gelu_tanh",
              "TransformerEncoderLayer: activation should be relu/gelu, not ", options.activation(),
              " (or gelu_tanh: GELU(approximate=\"tanh\"))");
  const std::int64_t d = options.d_model(), ff = options.dim_feedforward();
  self_attn = this->register_module("self_attn", std::make_shared<MultiheadAttention<T>>(
      MultiheadAttentionOptions(d, options.nhead()).dropout(options.dropout()).bias(options.bias())
          .batch_first(options.batch_first())));
  linear1 = this->register_module("linear1", std::make_shared<Linear<T>>(LinearOptions(d, ff).bias(options.bias())));
  dropout = this->register_module("dropout", std::make_shared<Dropout<T>>(options.dropout()));
  linear2 = this->register_module("linear2", std::make_shared<Linear<T>>(LinearOptions(ff, d).bias(options.bias())));
  const auto norm_options = LayerNormOptions(d).eps(options.layer_norm_eps()).bias(options.bias());
  norm1 = this->register_module("norm1", std::make_shared<LayerNorm<T>>(norm_options));
  norm2 = this->register_module("norm2", std::make_shared<LayerNorm<T>>(norm_options));
  dropout1 = this->register_module("dropout1", std::make_shared<Dropout<T>>(options.dropout()));
  dropout2 = this->register_module("dropout2", std::make_shared<Dropout<T>>(options.dropout()));
}

template <class T>
Tensor<T> TransformerEncoderLayer<T>::ff_block(const Tensor<T>& x) {
  const Tensor<T> h = linear_activation("TransformerEncoderLayer", options_.activation(), *linear1, x);
  return dropout2->forward(linear2->forward(dropout->forward(h)));
}

template <class T>
Tensor<T> TransformerEncoderLayer<T>::forward(const Tensor<T>& src, const AttnMask<T>& src_mask,
                                              const AttnMask<T>& src_key_padding_mask, bool is_causal) {
  return block(src, [&](const Tensor<T>& x) {
    const auto attended = self_attn->forward(x, x, x, src_key_padding_mask, /*need_weights=*/false, src_mask,
                                             /*average_attn_weights=*/true, is_causal);
    return attended.first;
  });
}

template <class T>
TransformerEncoder<T>::TransformerEncoder(const std::shared_ptr<TransformerEncoderLayer<T>>& encoder_layer,
                                          std::int64_t num_layers, std::shared_ptr<Module<T>> norm_module)
    : Module<T>("TransformerEncoder") {
  XGRAD_CHECK(encoder_layer != nullptr, "TransformerEncoder: encoder_layer is null");
  XGRAD_CHECK(num_layers >= 0, "TransformerEncoder: num_layers must be non-negative, got ", num_layers);
  layers = this->register_module("layers", std::make_shared<ModuleList<T>>());
  append_clones(*layers, *encoder_layer, num_layers);
  if (norm_module) norm = this->register_module("norm", std::move(norm_module));
}

template <class T>
std::shared_ptr<TransformerEncoderLayer<T>> TransformerEncoder<T>::layer(std::int64_t i) const {
  XGRAD_CHECK(i >= 0, "TransformerEncoder::layer: expected a non-negative index, got ", i);
  return layers->template ptr<TransformerEncoderLayer<T>>(static_cast<std::size_t>(i));
}

template <class T>
Tensor<T> TransformerEncoder<T>::forward(const Tensor<T>& src, const AttnMask<T>& mask,
                                         const AttnMask<T>& src_key_padding_mask, bool is_causal) {
  Tensor<T> x = src;
  for (std::int64_t i = 0; i < num_layers(); ++i) x = layer(i)->forward(x, mask, src_key_padding_mask, is_causal);
  if (norm) x = norm->forward(x);
  return x;
}

// ---- decoder -----------------------------------------------------------------------------------

template <class T>
TransformerDecoderLayer<T>::TransformerDecoderLayer(const TransformerDecoderLayerOptions& options)
    : Module<T>("TransformerDecoderLayer"), options_(options) {
  XGRAD_CHECK(options.activation() == "relu" || options.activation() == "gelu" || options.activation() == "gelu_tanh",
              "TransformerDecoderLayer: activation should be relu/gelu, not ", options.activation(),
              " (or gelu_tanh: GELU(approximate=\"tanh\"))");
  const std::int64_t d = options.d_model(), ff = options.dim_feedforward();
  const auto attention_options = MultiheadAttentionOptions(d, options.nhead()).dropout(options.dropout())
                                     .bias(options.bias()).batch_first(options.batch_first());
  self_attn = this->register_module("self_attn", std::make_shared<MultiheadAttention<T>>(attention_options));
  multihead_attn = this->register_module("multihead_attn", std::make_shared<MultiheadAttention<T>>(attention_options));
  linear1 = this->register_module("linear1", std::make_shared<Linear<T>>(LinearOptions(d, ff).bias(options.bias())));
  dropout = this->register_module("dropout", std::make_shared<Dropout<T>>(options.dropout()));
  linear2 = this->register_module("linear2", std::make_shared<Linear<T>>(LinearOptions(ff, d).bias(options.bias())));
  const auto norm_options = LayerNormOptions(d).eps(options.layer_norm_eps()).bias(options.bias());
  norm1 = this->register_module("norm1", std::make_shared<LayerNorm<T>>(norm_options));
  norm2 = this->register_module("norm2", std::make_shared<LayerNorm<T>>(norm_options));
  norm3 = this->register_module("norm3", std::make_shared<LayerNorm<T>>(norm_options));
  dropout1 = this->register_module("dropout1", std::make_shared<Dropout<T>>(options.dropout()));
  dropout2 = this->register_module("dropout2", std::make_shared<Dropout<T>>(options.dropout()));
  dropout3 = this->register_module("dropout3", std::make_shared<Dropout<T>>(options.dropout()));
}

template <class T>
Tensor<T> TransformerDecoderLayer<T>::sa_block(const Tensor<T>& x, const AttnMask<T>& attn_mask,
                                               const AttnMask<T>& key_padding_mask, bool is_causal) {
  Tensor<T> a = self_attn->forward(x, x, x, key_padding_mask, /*need_weights=*/false, attn_mask,
                                   /*average_attn_weights=*/true, is_causal).first;
  return dropout1->forward(a);
}

template <class T>
Tensor<T> TransformerDecoderLayer<T>::mha_block(const Tensor<T>& x, const Tensor<T>& memory,
                                                const AttnMask<T>& attn_mask, const AttnMask<T>& key_padding_mask,
                                                bool is_causal) {
  Tensor<T> a = multihead_attn->forward(x, memory, memory, key_padding_mask, /*need_weights=*/false, attn_mask,
                                        /*average_attn_weights=*/true, is_causal).first;
  return dropout2->forward(a);
}

template <class T>
Tensor<T> TransformerDecoderLayer<T>::ff_block(const Tensor<T>& x) {
  const Tensor<T> h = linear_activation("TransformerDecoderLayer", options_.activation(), *linear1, x);
  return dropout3->forward(linear2->forward(dropout->forward(h)));
}

template <class T>
Tensor<T> TransformerDecoderLayer<T>::forward(const Tensor<T>& tgt, const Tensor<T>& memory,
                                              const AttnMask<T>& tgt_mask, const AttnMask<T>& memory_mask,
                                              const AttnMask<T>& tgt_key_padding_mask,
                                              const AttnMask<T>& memory_key_padding_mask, bool tgt_is_causal,
                                              bool memory_is_causal) {
  const std::int64_t d = options_.d_model();
  XGRAD_CHECK((tgt.dim() == 3 || tgt.dim() == 2) && memory.dim() == tgt.dim(),
              "TransformerDecoderLayer: tgt and memory must both be batched (3 dims) or both unbatched (2 dims), got ",
              tgt.shape(), " and ", memory.shape());
  XGRAD_CHECK(tgt.size(-1) == d && memory.size(-1) == d, "TransformerDecoderLayer: tgt and memory must end in d_model=",
              d, ", got ", tgt.shape(), " and ", memory.shape());
  const std::int64_t batch_dim = options_.batch_first() ? 0 : 1;
  XGRAD_CHECK(tgt.dim() == 2 || tgt.size(batch_dim) == memory.size(batch_dim),
              "TransformerDecoderLayer: tgt and memory must have the same batch size (dim ", batch_dim,
              options_.batch_first() ? " with batch_first" : " without batch_first", "), got ", tgt.shape(), " and ",
              memory.shape());
  const detail::BackendBatch one_batch;  // as in the encoder layer
  // Each residual add with the norm after it (norm_first: the next block's) fused (residual_norm).
  if (options_.norm_first()) {
    const auto [s1, h2] =
        residual_and_norm(tgt, sa_block(norm1->forward(tgt), tgt_mask, tgt_key_padding_mask, tgt_is_causal), *norm2);
    const auto [s2, h3] =
        residual_and_norm(s1, mha_block(h2, memory, memory_mask, memory_key_padding_mask, memory_is_causal), *norm3);
    return s2 + ff_block(h3);
  }
  Tensor<T> x = residual_norm(tgt, sa_block(tgt, tgt_mask, tgt_key_padding_mask, tgt_is_causal), *norm1);
  x = residual_norm(x, mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal), *norm2);
  return residual_norm(x, ff_block(x), *norm3);
}

template <class T>
TransformerDecoder<T>::TransformerDecoder(const std::shared_ptr<TransformerDecoderLayer<T>>& decoder_layer,
                                          std::int64_t num_layers, std::shared_ptr<Module<T>> norm_module)
    : Module<T>("TransformerDecoder") {
  XGRAD_CHECK(decoder_layer != nullptr, "TransformerDecoder: decoder_layer is null");
  XGRAD_CHECK(num_layers >= 0, "TransformerDecoder: num_layers must be non-negative, got ", num_layers);
  layers = this->register_module("layers", std::make_shared<ModuleList<T>>());
  append_clones(*layers, *decoder_layer, num_layers);
  if (norm_module) norm = this->register_module("norm", std::move(norm_module));
}

template <class T>
std::shared_ptr<TransformerDecoderLayer<T>> TransformerDecoder<T>::layer(std::int64_t i) const {
  XGRAD_CHECK(i >= 0, "TransformerDecoder::layer: expected a non-negative index, got ", i);
  return layers->template ptr<TransformerDecoderLayer<T>>(static_cast<std::size_t>(i));
}

template <class T>
Tensor<T> TransformerDecoder<T>::forward(const Tensor<T>& tgt, const Tensor<T>& memory, const AttnMask<T>& tgt_mask,
                                         const AttnMask<T>& memory_mask, const AttnMask<T>& tgt_key_padding_mask,
                                         const AttnMask<T>& memory_key_padding_mask, bool tgt_is_causal,
                                         bool memory_is_causal) {
  Tensor<T> x = tgt;
  for (std::int64_t i = 0; i < num_layers(); ++i)
    x = layer(i)->forward(x, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
                          tgt_is_causal, memory_is_causal);
  if (norm) x = norm->forward(x);
  return x;
}

// ---- transformer -------------------------------------------------------------------------------

template <class T>
Transformer<T>::Transformer(const TransformerOptions<T>& options)
    : Module<T>("Transformer"), options_(options) {
  const std::int64_t d = options.d_model();
  const auto final_norm = [&] {
    return std::make_shared<LayerNorm<T>>(LayerNormOptions(d).eps(options.layer_norm_eps()).bias(options.bias()));
  };
  if (options.custom_encoder()) {
    encoder = this->register_module("encoder", options.custom_encoder());
  } else {
    auto layer = std::make_shared<TransformerEncoderLayer<T>>(
        TransformerEncoderLayerOptions(d, options.nhead()).dim_feedforward(options.dim_feedforward())
            .dropout(options.dropout()).activation(options.activation()).layer_norm_eps(options.layer_norm_eps())
            .batch_first(options.batch_first()).norm_first(options.norm_first()).bias(options.bias()));
    encoder = this->register_module(
        "encoder", std::make_shared<TransformerEncoder<T>>(layer, options.num_encoder_layers(), final_norm()));
  }
  if (options.custom_decoder()) {
    decoder = this->register_module("decoder", options.custom_decoder());
  } else {
    auto layer = std::make_shared<TransformerDecoderLayer<T>>(
        TransformerDecoderLayerOptions(d, options.nhead()).dim_feedforward(options.dim_feedforward())
            .dropout(options.dropout()).activation(options.activation()).layer_norm_eps(options.layer_norm_eps())
            .batch_first(options.batch_first()).norm_first(options.norm_first()).bias(options.bias()));
    decoder = this->register_module(
        "decoder", std::make_shared<TransformerDecoder<T>>(layer, options.num_decoder_layers(), final_norm()));
  }
  reset_parameters();
}

template <class T>
void Transformer<T>::reset_parameters() {
  for (auto& p : this->parameters())
    if (p.dim() > 1) init::xavier_uniform_(p);
}

template <class T>
Tensor<T> Transformer<T>::forward(const Tensor<T>& src, const Tensor<T>& tgt, const AttnMask<T>& src_mask,
                                  const AttnMask<T>& tgt_mask, const AttnMask<T>& memory_mask,
                                  const AttnMask<T>& src_key_padding_mask, const AttnMask<T>& tgt_key_padding_mask,
                                  const AttnMask<T>& memory_key_padding_mask, bool src_is_causal, bool tgt_is_causal,
                                  bool memory_is_causal) {
  XGRAD_CHECK((src.dim() == 3 || src.dim() == 2) && tgt.dim() == src.dim(),
              "Transformer: src and tgt must both be batched (3 dims) or both unbatched (2 dims), got ", src.shape(),
              " and ", tgt.shape());
  const std::int64_t batch_dim = options_.batch_first() ? 0 : 1;
  XGRAD_CHECK(src.dim() == 2 || src.size(batch_dim) == tgt.size(batch_dim),
              "Transformer: the batch number of src and tgt must be equal (dim ", batch_dim,
              options_.batch_first() ? " with batch_first" : " without batch_first", "), got ", src.shape(), " and ",
              tgt.shape());
  XGRAD_CHECK(src.size(-1) == options_.d_model() && tgt.size(-1) == options_.d_model(),
              "Transformer: the feature number of src and tgt must be equal to d_model=", options_.d_model(), ", got ",
              src.shape(), " and ", tgt.shape());
  const Tensor<T> memory = encoder->forward(src, src_mask, src_key_padding_mask, src_is_causal);
  return decoder->forward(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
                          tgt_is_causal, memory_is_causal);
}

template <class T>
Tensor<T> Transformer<T>::generate_square_subsequent_mask(std::int64_t sz) {
  XGRAD_CHECK(sz >= 0, "Transformer::generate_square_subsequent_mask: expected a non-negative size, got ", sz);
  const auto n = static_cast<std::size_t>(sz);
  Array<T> mask = empty_array<T>({n, n}, "Transformer::generate_square_subsequent_mask");
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) mask(i, j) = j > i ? -std::numeric_limits<T>::infinity() : T(0);
  return Tensor<T>(std::move(mask));
}

template Tensor<float> transformer_activation<float>(const char*, const std::string&, const Tensor<float>&);
template Tensor<double> transformer_activation<double>(const char*, const std::string&, const Tensor<double>&);
template class TransformerEncoderLayer<float>;
template class TransformerEncoderLayer<double>;
template class TransformerEncoder<float>;
template class TransformerEncoder<double>;
template class TransformerDecoderLayer<float>;
template class TransformerDecoderLayer<double>;
template class TransformerDecoder<float>;
template class TransformerDecoder<double>;
template class Transformer<float>;
template class Transformer<double>;

}  // namespace xgrad::nn
