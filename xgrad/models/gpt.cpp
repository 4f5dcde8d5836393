#include <xgrad/models/gpt.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include <xgrad/core/checkpoint.hpp>
#include <xgrad/core/grad_mode.hpp>
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
  XGRAD_CHECK(config.n_inner >= 0, "GPT: n_inner must be positive, or 0 for 4 * n_embd, got ", config.n_inner);
  XGRAD_CHECK(config.layer_norm_eps >= 0, "GPT: layer_norm_eps must be non-negative, got ", config.layer_norm_eps);
  const std::int64_t C = config.n_embd;
  wte = this->register_module("wte", std::make_shared<nn::Embedding<T>>(config.vocab_size, C));
  wpe = this->register_module("wpe", std::make_shared<nn::Embedding<T>>(config.block_size, C));
  drop = this->register_module("drop", std::make_shared<nn::Dropout<T>>(config.dropout));
  const auto block = std::make_shared<nn::TransformerEncoderLayer<T>>(nn::TransformerEncoderLayerOptions(C, config.n_head)
                                                                          .dim_feedforward(config.n_inner > 0 ? config.n_inner : 4 * C)
                                                                          .dropout(config.dropout)
                                                                          .activation(config.activation)
                                                                          .layer_norm_eps(config.layer_norm_eps)
                                                                          .batch_first(true)
                                                                          .norm_first(true)
                                                                          .bias(config.bias));
  h = this->register_module("h", std::make_shared<nn::TransformerEncoder<T>>(block, config.n_layer));
  ln_f = this->register_module("ln_f", std::make_shared<nn::LayerNorm<T>>(nn::LayerNormOptions(C).eps(config.layer_norm_eps).bias(config.bias)));

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
  IndexArray positions = empty_array<std::int64_t>({static_cast<std::size_t>(t)}, "GPT");  // 0, 1, ..., t - 1
  std::iota(positions.begin(), positions.end(), std::int64_t{0});
  Tensor<T> x = drop->forward(wte->forward(idx) + wpe->forward(positions));  // (N, T, C) + (T, C)
  if (gradient_checkpointing_ && this->is_training() && is_grad_enabled()) {
    for (std::int64_t i = 0; i < h->num_layers(); ++i) {  // h->forward's loop, one checkpoint per block
      const auto block = h->layer(i);
      x = utils::checkpoint<T>(
          [block](const Tensor<T>& in) { return block->forward(in, AttnMask<T>(), AttnMask<T>(), /*is_causal=*/true); },
          x);
    }
    if (h->norm) x = h->norm->forward(x);
  } else {
    x = h->forward(x, AttnMask<T>(), AttnMask<T>(), /*is_causal=*/true);
  }
  x = ln_f->forward(x);
  return linear(x, wte->weight);  // (N, T, C) @ (V, C)^T: the tied head
}

template <class T>
Tensor<T> GPT<T>::forward_cached(const IndexArray& idx_new, std::vector<nn::KVCache<T>>& caches) {
  XGRAD_CHECK(idx_new.dimension() == 2 && idx_new.shape(1) >= 1,
              "GPT::forward_cached: idx_new must be (N, t) token indices with t >= 1, got shape ", shape_of(idx_new));
  const std::int64_t past = caches.empty() ? 0 : caches.front().length();
  const std::int64_t t = static_cast<std::int64_t>(idx_new.shape(1));
  XGRAD_CHECK(past + t <= config_.block_size, "GPT::forward_cached: cannot forward ", t, " positions after ", past,
              " cached ones: block size is only ", config_.block_size);
  IndexArray positions = empty_array<std::int64_t>({static_cast<std::size_t>(t)}, "GPT::forward_cached");
  std::iota(positions.begin(), positions.end(), past);                                 // past, ..., past + t - 1
  const Tensor<T> x = drop->forward(wte->forward(idx_new) + wpe->forward(positions));  // (N, t, C)
  return linear(ln_f->forward(nn::forward_cached(*h, x, caches)), wte->weight);
}

template <class T>
IndexArray GPT<T>::generate(const IndexArray& idx, std::int64_t max_new_tokens, const SamplingOptions& options,
                            Generator* generator, bool use_cache, std::int64_t window) {
  XGRAD_CHECK(idx.dimension() == 2 && idx.shape(1) >= 1,
              "GPT::generate: idx must be (N, t) token indices with t >= 1, got shape ", shape_of(idx));
  XGRAD_CHECK(max_new_tokens >= 0, "GPT::generate: max_new_tokens must be >= 0, got ", max_new_tokens);
  XGRAD_CHECK(window >= 0 && window <= config_.block_size, "GPT::generate: window must be in [0, block_size = ",
              config_.block_size, "] (0: none), got ", window);
  const std::int64_t n = static_cast<std::int64_t>(idx.shape(0)), t0 = static_cast<std::int64_t>(idx.shape(1));
  // The length of the result, t0 + max_new_tokens, checked: INT64_MAX new tokens would wrap.
  const std::int64_t total_length =
      checked_add(t0, max_new_tokens, "GPT::generate", "the length of the result (prompt length + max_new_tokens)");
  // The last forward sees the sequence without its last new token.
  XGRAD_CHECK(window > 0 || total_length - 1 <= config_.block_size, "GPT::generate: ", t0, " tokens and ",
              max_new_tokens, " new ones exceed the block size ", config_.block_size, ": generate at most ",
              std::max<std::int64_t>(0, config_.block_size - t0 + 1),
              ", or pass a window to keep the last tokens of a longer sequence");
  options.check();
  NoGradGuard no_grad;
  struct EvalMode {  // eval mode until generate returns or throws
    nn::Module<T>& module;
    const bool was_training = module.is_training();
    explicit EvalMode(nn::Module<T>& m) : module(m) { module.eval(); }
    ~EvalMode() { module.train(was_training); }
  } eval_mode(*this);
  const std::size_t N = static_cast<std::size_t>(n), total = static_cast<std::size_t>(total_length);
  IndexArray seq = empty_array<std::int64_t>({N, total}, "GPT::generate");
  for (std::size_t i = 0; i < N; ++i)
    for (std::size_t j = 0; j < static_cast<std::size_t>(t0); ++j) seq(i, j) = idx(i, j);
  const auto columns = [&](std::size_t begin, std::size_t end) {  // seq[:, begin:end]
    IndexArray out = empty_array<std::int64_t>({N, end - begin}, "GPT::generate");
    for (std::size_t i = 0; i < N; ++i)
      for (std::size_t j = begin; j < end; ++j) out(i, j - begin) = seq(i, j);
    return out;
  };
  std::vector<nn::KVCache<T>> caches;
  std::size_t start = 0, cached = 0;  // the context is seq[:, start:length]; the caches hold seq[:, start:cached]
  for (std::size_t length = static_cast<std::size_t>(t0); length < total; ++length) {
    if (static_cast<std::int64_t>(length - start) > config_.block_size) {  // crop to the last `window` tokens
      start = length - static_cast<std::size_t>(window);
      for (auto& cache : caches) cache.clear();
      cached = start;
    }
    Tensor<T> logits;  // (N, t, V): the context's last positions
    if (use_cache) {
      logits = forward_cached(columns(cached, length), caches);
      cached = length;
    } else {
      logits = forward(columns(start, length));
    }
    const IndexArray next = sample_next_token(logits, options, generator);  // the last position's
    for (std::size_t i = 0; i < N; ++i) seq(i, length) = next(i);
  }
  return seq;
}

template class GPT<float>;
template class GPT<double>;

}  // namespace xgrad::models
