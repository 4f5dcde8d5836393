#include <xgrad/models/llama.hpp>

#include <algorithm>
#include <numeric>
#include <optional>
#include <string>

#include <xgrad/core/checkpoint.hpp>
#include <xgrad/core/grad_mode.hpp>
#include <xgrad/core/trace.hpp>
#include <xgrad/nn/init.hpp>
#include <xgrad/ops/ops.hpp>
#include <xgrad/ops/silu_mul.hpp>

namespace xgrad::models {

namespace {

template <class T>
std::shared_ptr<nn::Linear<T>> make_linear(std::int64_t in, std::int64_t out, bool bias) {
  return std::make_shared<nn::Linear<T>>(nn::LinearOptions(in, out).bias(bias));
}

// (N, T, heads * d) -> (N, heads, T, d)
template <class T>
Tensor<T> split_heads(const Tensor<T>& x, std::int64_t heads, std::int64_t d) {
  const std::int64_t n = x.size(0), t = x.size(1);
  return transpose(reshape(x, {n, t, heads, d}), 1, 2);
}

// (N, heads, T, d) -> (N, T, heads * d)
template <class T>
Tensor<T> merge_heads(const Tensor<T>& x) {
  const std::int64_t n = x.size(0), heads = x.size(1), t = x.size(2), d = x.size(3);
  return reshape(transpose(x, 1, 2), {n, t, heads * d});
}

// RoPE on q or k (N, heads, T, d), a fresh tensor of this layer's: rotated in place where no
// gradient will be taken of it (generation, inference under NoGradGuard), so the decode path
// makes no copy; as a new node where one will (training) or while a trace records (an ONNX
// export). The same bits either way.
template <class T>
Tensor<T> rotary(const Tensor<T>& x, const RopeTables<T>& rope) {
  if ((is_grad_enabled() && x.requires_grad()) || trace::active()) return rotary_embedding(x, rope.cos, rope.sin);
  return rotary_embedding_(x, rope.cos, rope.sin);
}

// The config's own consistency (LlamaConfig::check), and what this model does not implement.
void check_config(const LlamaConfig& c) {
  c.check();
  XGRAD_CHECK(c.partial_rotary_factor == 1.0, "LlamaForCausalLM: partial_rotary_factor is ", c.partial_rotary_factor,
              ": xgrad's Llama rotates whole heads (1.0)");
}

}  // namespace

// ---- attention -----------------------------------------------------------------------------------

template <class T>
LlamaAttention<T>::LlamaAttention(const LlamaConfig& c)
    : nn::Module<T>("LlamaAttention"),
      heads_(c.num_attention_heads),
      kv_heads_(c.num_key_value_heads),
      head_dim_(c.head_dim) {
  const bool qkv_bias = c.qkv_bias();
  q_proj = this->register_module("q_proj", make_linear<T>(c.hidden_size, heads_ * head_dim_, qkv_bias));
  k_proj = this->register_module("k_proj", make_linear<T>(c.hidden_size, kv_heads_ * head_dim_, qkv_bias));
  v_proj = this->register_module("v_proj", make_linear<T>(c.hidden_size, kv_heads_ * head_dim_, qkv_bias));
  o_proj = this->register_module("o_proj", make_linear<T>(heads_ * head_dim_, c.hidden_size, c.o_proj_bias()));
}

template <class T>
Tensor<T> LlamaAttention<T>::forward(const Tensor<T>& x, const RopeTables<T>& rope, nn::KVCache<T>* cache) {
  const Tensor<T> q = rotary(split_heads(q_proj->forward(x), heads_, head_dim_), rope);
  const Tensor<T> k = rotary(split_heads(k_proj->forward(x), kv_heads_, head_dim_), rope);
  const Tensor<T> v = split_heads(v_proj->forward(x), kv_heads_, head_dim_);
  if (cache != nullptr) return o_proj->forward(nn::scaled_dot_product_attention_cached(q, k, v, *cache, this));
  const Tensor<T> o = scaled_dot_product_attention(q, k, v, AttnMask<T>(), 0.0, /*is_causal=*/true, std::nullopt,
                                                   /*enable_gqa=*/true);
  return o_proj->forward(merge_heads(o));
}

// ---- MLP and layer -------------------------------------------------------------------------------

template <class T>
LlamaMLP<T>::LlamaMLP(const LlamaConfig& c) : nn::Module<T>("LlamaMLP") {
  gate_proj = this->register_module("gate_proj", make_linear<T>(c.hidden_size, c.intermediate_size, c.mlp_has_bias()));
  up_proj = this->register_module("up_proj", make_linear<T>(c.hidden_size, c.intermediate_size, c.mlp_has_bias()));
  down_proj = this->register_module("down_proj", make_linear<T>(c.intermediate_size, c.hidden_size, c.mlp_has_bias()));
}

template <class T>
Tensor<T> LlamaMLP<T>::forward(const Tensor<T>& x) {
  return down_proj->forward(silu_mul(gate_proj->forward(x), up_proj->forward(x)));
}

template <class T>
LlamaDecoderLayer<T>::LlamaDecoderLayer(const LlamaConfig& c) : nn::Module<T>("LlamaDecoderLayer") {
  self_attn = this->register_module("self_attn", std::make_shared<LlamaAttention<T>>(c));
  mlp = this->register_module("mlp", std::make_shared<LlamaMLP<T>>(c));
  const auto norm = [&] {
    return std::make_shared<nn::RMSNorm<T>>(nn::RMSNormOptions(c.hidden_size).eps(c.rms_norm_eps));
  };
  input_layernorm = this->register_module("input_layernorm", norm());
  post_attention_layernorm = this->register_module("post_attention_layernorm", norm());
}

template <class T>
Tensor<T> LlamaDecoderLayer<T>::forward(const Tensor<T>& h, const RopeTables<T>& rope, nn::KVCache<T>* cache) {
  const Tensor<T> a = h + self_attn->forward(input_layernorm->forward(h), rope, cache);
  return a + mlp->forward(post_attention_layernorm->forward(a));
}

// ---- the model -----------------------------------------------------------------------------------

template <class T>
LlamaModel<T>::LlamaModel(const LlamaConfig& c)
    : nn::Module<T>("LlamaModel"), config_(c), inv_freq_(rope_inv_freq<T>(c.head_dim, c.rope_theta, c.rope_scaling)) {
  embed_tokens = this->register_module("embed_tokens", std::make_shared<nn::Embedding<T>>(c.vocab_size, c.hidden_size));
  layers = this->register_module("layers", std::make_shared<nn::ModuleList<T>>());
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(std::make_shared<LlamaDecoderLayer<T>>(c));
  norm = this->register_module("norm",
                               std::make_shared<nn::RMSNorm<T>>(nn::RMSNormOptions(c.hidden_size).eps(c.rms_norm_eps)));
}

template <class T>
RopeTables<T> LlamaModel<T>::rope_tables(std::int64_t start, std::int64_t t) const {
  IndexArray positions = empty_array<std::int64_t>({static_cast<std::size_t>(t)}, "LlamaModel");
  std::iota(positions.begin(), positions.end(), start);
  auto [cos, sin] = rope_cos_sin(inv_freq_, positions);
  return {std::move(cos), std::move(sin)};
}

template <class T>
Tensor<T> LlamaModel<T>::forward(const IndexArray& input_ids, std::vector<nn::KVCache<T>>* caches) {
  XGRAD_CHECK(input_ids.dimension() == 2 && input_ids.shape(1) >= 1,
              "LlamaModel: input_ids must be (N, T) token indices with T >= 1, got shape ", shape_of(input_ids));
  if (caches != nullptr && caches->empty()) caches->resize(layers->size());
  XGRAD_CHECK(caches == nullptr || caches->size() == layers->size(), "LlamaModel: expected one KV cache per layer (",
              layers->size(), "), got ", caches == nullptr ? 0 : caches->size());
  const std::int64_t start = caches != nullptr ? caches->front().length() : 0;
  const std::int64_t t = static_cast<std::int64_t>(input_ids.shape(1));
  XGRAD_CHECK(start + t <= config_.max_position_embeddings, "LlamaModel: cannot forward ", t, " positions after ",
              start, ": max_position_embeddings is ", config_.max_position_embeddings);
  XGRAD_CHECK(!config_.sliding_window || start + t <= *config_.sliding_window, "LlamaModel: ", start + t,
              " positions exceed the sliding window (", config_.sliding_window.value_or(0),
              "), which xgrad does not implement: use a shorter context");
  const RopeTables<T> rope = rope_tables(start, t);
  Tensor<T> h = embed_tokens->forward(input_ids);
  // As transformers: only where a backward will follow (training, grad mode on, no cache).
  const bool checkpointed = gradient_checkpointing_ && this->is_training() && is_grad_enabled() && caches == nullptr;
  for (std::size_t i = 0; i < layers->size(); ++i) {
    const auto layer = layers->template ptr<LlamaDecoderLayer<T>>(i);
    if (checkpointed)  // the layer and the tables by value: the backward runs it again
      h = utils::checkpoint<T>([layer, rope](const Tensor<T>& x) { return layer->forward(x, rope); }, h);
    else
      h = layer->forward(h, rope, caches != nullptr ? &(*caches)[i] : nullptr);
  }
  return norm->forward(h);
}

template <class T>
LlamaForCausalLM<T>::LlamaForCausalLM(const LlamaConfig& c, Generator* generator)
    : nn::Module<T>("LlamaForCausalLM"), config_(c) {
  check_config(c);
  model = this->register_module("model", std::make_shared<LlamaModel<T>>(c));
  if (!c.tie_word_embeddings)
    lm_head = this->register_module("lm_head", make_linear<T>(c.hidden_size, c.vocab_size, false));
  const double initializer_range = c.source.is_object() ? c.source.value("initializer_range", 0.02) : 0.02;
  for (auto& [name, p] : this->named_parameters()) {  // transformers' _init_weights
    if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0)
      nn::init::zeros_(p);
    else if (name.find("norm.weight") != std::string::npos)
      nn::init::ones_(p);
    else
      nn::init::normal_(p, 0.0, initializer_range, generator);
  }
}

template <class T>
const Tensor<T>& LlamaForCausalLM<T>::head_weight() const {
  return lm_head ? lm_head->weight : model->embed_tokens->weight;
}

template <class T>
Tensor<T> LlamaForCausalLM<T>::forward(const IndexArray& input_ids) {
  return linear(model->forward(input_ids), head_weight());
}

template <class T>
Tensor<T> LlamaForCausalLM<T>::forward_cached(const IndexArray& input_ids, std::vector<nn::KVCache<T>>& caches) {
  XGRAD_CHECK(!is_grad_enabled(), "LlamaForCausalLM::forward_cached: inference only: call it under NoGradGuard");
  return linear(model->forward(input_ids, &caches), head_weight());
}

template <class T>
IndexArray LlamaForCausalLM<T>::generate(const IndexArray& input_ids, std::int64_t max_new_tokens,
                                         const SamplingOptions& options, Generator* generator) {
  XGRAD_CHECK(input_ids.dimension() == 2 && input_ids.shape(1) >= 1,
              "LlamaForCausalLM::generate: input_ids must be (N, t) token indices with t >= 1, got shape ",
              shape_of(input_ids));
  XGRAD_CHECK(max_new_tokens >= 0, "LlamaForCausalLM::generate: max_new_tokens must be >= 0, got ", max_new_tokens);
  options.check();
  NoGradGuard no_grad;
  const bool was_training = this->is_training();
  this->eval();
  const std::size_t n = input_ids.shape(0), t0 = input_ids.shape(1);
  // As transformers' generate: the ids of generation_config.json when the folder has one, else
  // config.json's; a finished sequence is padded with pad_token_id, else its first EOS.
  const auto& generation = config_.generation_config;
  const std::vector<std::int64_t>& eos = generation ? generation->eos_token_id : config_.eos_token_id;
  const std::optional<std::int64_t> pad_token_id = generation ? generation->pad_token_id : config_.pad_token_id;
  const std::int64_t pad = pad_token_id.value_or(eos.empty() ? 0 : eos.front());
  std::vector<std::vector<std::int64_t>> seqs(n);
  for (std::size_t i = 0; i < n; ++i) seqs[i].assign(&input_ids(i, 0), &input_ids(i, 0) + t0);
  std::vector<bool> done(n, false);
  std::vector<nn::KVCache<T>> caches;
  IndexArray step = input_ids;
  try {
    for (std::int64_t k = 0; k < max_new_tokens; ++k) {
      const IndexArray next = sample_next_token(forward_cached(step, caches), options, generator);
      step = empty_array<std::int64_t>(Shape{n, 1}, "LlamaForCausalLM::generate");
      for (std::size_t i = 0; i < n; ++i) {
        const std::int64_t token = done[i] ? pad : next(i);
        seqs[i].push_back(token);
        step(i, 0) = token;
        done[i] = done[i] || std::find(eos.begin(), eos.end(), token) != eos.end();
      }
      if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
    }
  } catch (...) {
    this->train(was_training);
    throw;
  }
  this->train(was_training);
  IndexArray out = empty_array<std::int64_t>(Shape{n, seqs.front().size()}, "LlamaForCausalLM::generate");
  for (std::size_t i = 0; i < n; ++i) std::copy(seqs[i].begin(), seqs[i].end(), &out(i, 0));
  return out;
}

template class LlamaAttention<float>;
template class LlamaAttention<double>;
template class LlamaMLP<float>;
template class LlamaMLP<double>;
template class LlamaDecoderLayer<float>;
template class LlamaDecoderLayer<double>;
template class LlamaModel<float>;
template class LlamaModel<double>;
template class LlamaForCausalLM<float>;
template class LlamaForCausalLM<double>;

}  // namespace xgrad::models
