#include <xgrad/nn/transformer.hpp>
#include <xgrad/core/gradcheck_registry.hpp>

#include <xgrad/backend/signals.hpp>

namespace xgrad::nn {

template <class T>
TransformerEncoderLayer<T>::TransformerEncoderLayer(const TransformerEncoderLayerOptions& options)
    : Module<T>("TransformerEncoderLayer"), options_(options) {
  XGRAD_CHECK(options.activation() == "relu" || options.activation() == "gelu",
              "TransformerEncoderLayer: activation should be relu/gelu, not ", options.activation());
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
Tensor<T> TransformerEncoderLayer<T>::sa_block(const Tensor<T>& x, const AttnMask<T>& attn_mask,
                                               const AttnMask<T>& key_padding_mask, bool is_causal) {
  Tensor<T> a = self_attn->forward(x, x, x, key_padding_mask, /*need_weights=*/false, attn_mask,
                                   /*average_attn_weights=*/true, is_causal).first;
  return dropout1->forward(a);
}

template <class T>
Tensor<T> TransformerEncoderLayer<T>::ff_block(const Tensor<T>& x) {
  Tensor<T> h = linear1->forward(x);
  h = options_.activation() == "relu" ? relu(h) : gelu(h);
  return dropout2->forward(linear2->forward(dropout->forward(h)));
}

template <class T>
Tensor<T> TransformerEncoderLayer<T>::forward(const Tensor<T>& src, const AttnMask<T>& src_mask,
                                              const AttnMask<T>& src_key_padding_mask, bool is_causal) {
  // The layer's oneDNN calls block the asynchronous signals once, not once per product
  // (backend/signals.hpp): a signal arriving meanwhile is handled when the layer is done.
  const detail::AsyncSignalScope one_signal_block;
  Tensor<T> x = src;
  if (options_.norm_first()) {
    x = x + sa_block(norm1->forward(x), src_mask, src_key_padding_mask, is_causal);
    x = x + ff_block(norm2->forward(x));
  } else {
    x = norm1->forward(x + sa_block(x, src_mask, src_key_padding_mask, is_causal));
    x = norm2->forward(x + ff_block(x));
  }
  return x;
}

template <class T>
TransformerEncoder<T>::TransformerEncoder(const std::shared_ptr<TransformerEncoderLayer<T>>& encoder_layer,
                                          std::int64_t num_layers, std::shared_ptr<Module<T>> norm_module)
    : Module<T>("TransformerEncoder") {
  XGRAD_CHECK(encoder_layer != nullptr, "TransformerEncoder: encoder_layer is null");
  XGRAD_CHECK(num_layers >= 0, "TransformerEncoder: num_layers must be non-negative, got ", num_layers);
  layers = this->register_module("layers", std::make_shared<ModuleList<T>>());
  const StateDict<T> values = encoder_layer->state_dict();
  // A deep copy: a fresh layer with the same options, then the same values. Building it draws
  // initial values from the default generator; restoring its state makes the copy draw nothing.
  const GeneratorState rng = default_generator().get_state();
  for (std::int64_t i = 0; i < num_layers; ++i) {
    auto layer = std::make_shared<TransformerEncoderLayer<T>>(encoder_layer->options());
    layer->load_state_dict(values);
    layer->train(encoder_layer->is_training());
    layers->push_back(layer);
  }
  default_generator().set_state(rng);
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
  const detail::AsyncSignalScope one_signal_block;  // for all the layers, as in each layer
  Tensor<T> x = src;
  for (std::int64_t i = 0; i < num_layers(); ++i) x = layer(i)->forward(x, mask, src_key_padding_mask, is_causal);
  if (norm) x = norm->forward(x);
  return x;
}

template class TransformerEncoderLayer<float>;
template class TransformerEncoderLayer<double>;
template class TransformerEncoder<float>;
template class TransformerEncoder<double>;

}  // namespace xgrad::nn

// Finite-difference checks of its modules (see xgrad/core/gradcheck_registry.hpp).
XGRAD_GRADCHECKS(nn_transformer) {
  using namespace xgrad::gradcheck_support;
  using O = xgrad::GradcheckOptions;
  using Sizes = xgrad::GradcheckSizes;
  namespace nn = xgrad::nn;
  const auto encoder_layer = [](const Sizes& s, bool norm_first) {
    return std::make_shared<nn::TransformerEncoderLayer<double>>(nn::TransformerEncoderLayerOptions(s.D, s.H)
                                                                     .dim_feedforward(s.F)
                                                                     .dropout(0.2)
                                                                     .activation(norm_first ? "gelu" : "relu")
                                                                     .batch_first(true)
                                                                     .norm_first(norm_first));
  };
  for (const bool norm_first : {false, true}) {
    checks.add({norm_first ? "nn.TransformerEncoderLayer_pre_norm" : "nn.TransformerEncoderLayer",
                 norm_first ? "pre-norm, gelu, dim_feedforward F, dropout 0.2, batch_first"
                            : "post-norm, relu, dim_feedforward F, dropout 0.2, batch_first",
                 [=](const Sizes& s, const O& o) {
                   xgrad::manual_seed(s.seed);
                   auto m = encoder_layer(s, norm_first);
                   const T64 x = Maker(s.seed)({s.B, s.L, s.D});
                   return module_check(*m, x, reseeded(s.seed, [=] { return m->forward(x); }), o);
                 }});
  }
  checks.add({"nn.TransformerEncoder", "2 pre-norm gelu layers + final LayerNorm, causal, dropout 0.2",
               [=](const Sizes& s, const O& o) {
                 xgrad::manual_seed(s.seed);
                 auto m = std::make_shared<nn::TransformerEncoder<double>>(
                     encoder_layer(s, true), 2, std::make_shared<nn::LayerNorm<double>>(s.D));
                 const T64 x = Maker(s.seed)({s.B, s.L, s.D});
                 return module_check(*m, x, reseeded(s.seed, [=] {
                                       return m->forward(x, xgrad::AttnMask<double>(), xgrad::AttnMask<double>(),
                                                         /*is_causal=*/true);
                                     }),
                                     o);
               }});
}
