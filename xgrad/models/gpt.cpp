#include <xgrad/models/gpt.hpp>

#include <cmath>
#include <string>

#include <xgrad/nn/init.hpp>

namespace xgrad::models {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

template <class T>
GPT<T>::GPT(const GPTConfig& config, Generator* generator) : nn::Module<T>("GPT"), config_(config) {
  XGRAD_CHECK(config.vocab_size > 0 && config.block_size > 0 && config.n_layer > 0 && config.n_head > 0 &&
                  config.n_embd > 0,
              "GPT: vocab_size, block_size, n_layer, n_head and n_embd must be positive, got ", config.vocab_size,
              ", ", config.block_size, ", ", config.n_layer, ", ", config.n_head, ", ", config.n_embd);
  XGRAD_CHECK(config.n_embd % config.n_head == 0, "GPT: n_head (", config.n_head, ") must divide n_embd (",
              config.n_embd, ")");
  const std::int64_t C = config.n_embd;
  wte = this->register_module("wte", std::make_shared<nn::Embedding<T>>(config.vocab_size, C));
  wpe = this->register_module("wpe", std::make_shared<nn::Embedding<T>>(config.block_size, C));
  drop = this->register_module("drop", std::make_shared<nn::Dropout<T>>(config.dropout));
  const auto block = std::make_shared<nn::TransformerEncoderLayer<T>>(nn::TransformerEncoderLayerOptions(C, config.n_head)
                                                                          .dim_feedforward(4 * C)
                                                                          .dropout(config.dropout)
                                                                          .activation("gelu")
                                                                          .batch_first(true)
                                                                          .norm_first(true)
                                                                          .bias(config.bias));
  h = this->register_module("h", std::make_shared<nn::TransformerEncoder<T>>(block, config.n_layer));
  ln_f = this->register_module("ln_f", std::make_shared<nn::LayerNorm<T>>(nn::LayerNormOptions(C).bias(config.bias)));

  // nanoGPT's _init_weights, then its scaled init of the projections into the residual stream.
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config.n_layer));
  for (auto& [name, p] : this->named_parameters()) {
    if (ends_with(name, "bias")) nn::init::zeros_(p);
    else if (ends_with(name, "norm1.weight") || ends_with(name, "norm2.weight") || name == "ln_f.weight")
      nn::init::ones_(p);
    else if (ends_with(name, "out_proj.weight") || ends_with(name, "linear2.weight"))
      nn::init::normal_(p, 0.0, residual_std, generator);
    else nn::init::normal_(p, 0.0, 0.02, generator);  // wte, wpe, in_proj_weight, linear1.weight
  }
}

template <class T>
Tensor<T> GPT<T>::forward(const IndexArray& idx) {
  XGRAD_CHECK(idx.dimension() == 2, "GPT: idx must be (N, T) token indices, got shape ", shape_of(idx));
  const std::int64_t t = static_cast<std::int64_t>(idx.shape(1));
  XGRAD_CHECK(t >= 1 && t <= config_.block_size, "GPT: cannot forward a sequence of length ", t,
              ": block size is only ", config_.block_size);
  const IndexArray positions = xt::arange<std::int64_t>(t);
  Tensor<T> x = drop->forward(wte->forward(idx) + wpe->forward(positions));  // (N, T, C) + (T, C)
  x = ln_f->forward(h->forward(x, AttnMask<T>(), AttnMask<T>(), /*is_causal=*/true));
  return linear(x, wte->weight);  // (N, T, C) @ (V, C)^T: the tied head
}

template class GPT<float>;
template class GPT<double>;

}  // namespace xgrad::models
