// The Llama family as transformers' LlamaForCausalLM (eager attention), which also covers
// Qwen2ForCausalLM (q/k/v biases) and MistralForCausalLM (no sliding window reached): RMSNorm,
// rotary position embeddings (rotate_half), grouped-query attention and a SiLU-gated MLP. The
// modules are named as transformers names them, so state_dict() keys are the checkpoint's:
//
//   input_ids (N, T) -> model.embed_tokens                                        h (N, T, C)
//   per layer i, model.layers.{i}:
//     x = input_layernorm(h);           h = h + self_attn.o_proj(attention(x))
//     x = post_attention_layernorm(h);  h = h + mlp.down_proj(silu(mlp.gate_proj(x)) * mlp.up_proj(x))
//   -> model.norm -> lm_head (embed_tokens.weight when tie_word_embeddings)    logits (N, T, V)
//
// attention(x): q = q_proj(x) (N, H, T, d), k = k_proj(x) and v = v_proj(x) (N, Hkv, T, d), RoPE on
// q and k at positions 0..T-1, causal scaled_dot_product_attention with enable_gqa (query head j
// reads KV head j / (H / Hkv)), heads side by side (N, T, H d). Where no gradient will be taken
// (generation, inference under NoGradGuard) RoPE rotates q and k in place (rotary_embedding_, the
// same bits), so the decode path makes no copy of them.
//
// models/hf_llama.hpp loads and saves the Hugging Face folders.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <xgrad/base/random.hpp>
#include <xgrad/models/llama_config.hpp>
#include <xgrad/models/sampling.hpp>
#include <xgrad/nn/embedding.hpp>
#include <xgrad/nn/kv_cache.hpp>
#include <xgrad/nn/linear.hpp>
#include <xgrad/nn/module.hpp>
#include <xgrad/nn/rms_norm.hpp>
#include <xgrad/nn/sequential.hpp>

namespace xgrad::models {

// Rotary tables for positions [start, start + t): cos and sin, each (t, head_dim).
template <class T>
struct RopeTables {
  Tensor<T> cos, sin;
};

template <class T = float>
class LlamaAttention : public nn::Module<T> {
 public:
  explicit LlamaAttention(const LlamaConfig& config);
  // x (N, T, C) -> (N, T, C). Without a cache: causal over the T positions. With one: x holds the
  // t positions after the cache's, whose keys and values (the KV heads only) it appends to
  // (inference: nn::scaled_dot_product_attention_cached).
  Tensor<T> forward(const Tensor<T>& x, const RopeTables<T>& rope, nn::KVCache<T>* cache = nullptr);

  std::shared_ptr<nn::Linear<T>> q_proj, k_proj, v_proj, o_proj;

 private:
  std::int64_t heads_, kv_heads_, head_dim_;
};

template <class T = float>
class LlamaMLP : public nn::Module<T> {
 public:
  explicit LlamaMLP(const LlamaConfig& config);
  Tensor<T> forward(const Tensor<T>& x) override;  // down(silu(gate(x)) * up(x))

  std::shared_ptr<nn::Linear<T>> gate_proj, up_proj, down_proj;
};

template <class T = float>
class LlamaDecoderLayer : public nn::Module<T> {
 public:
  explicit LlamaDecoderLayer(const LlamaConfig& config);
  Tensor<T> forward(const Tensor<T>& h, const RopeTables<T>& rope, nn::KVCache<T>* cache = nullptr);

  std::shared_ptr<LlamaAttention<T>> self_attn;
  std::shared_ptr<LlamaMLP<T>> mlp;
  std::shared_ptr<nn::RMSNorm<T>> input_layernorm, post_attention_layernorm;
};

// transformers' LlamaModel: the embedding, the layers and the final norm (no head).
template <class T = float>
class LlamaModel : public nn::Module<T> {
 public:
  explicit LlamaModel(const LlamaConfig& config);
  // input_ids (N, t) at positions [start, start + t) -> hidden states (N, t, C). With caches (one
  // per layer; an empty vector is sized), start is their length and they are appended to.
  Tensor<T> forward(const IndexArray& input_ids, std::vector<nn::KVCache<T>>* caches = nullptr);
  RopeTables<T> rope_tables(std::int64_t start, std::int64_t t) const;

  // transformers' gradient_checkpointing_enable(): in training with grad mode on, each decoder
  // layer's activations are dropped after the forward and recomputed in the backward
  // (utils::checkpoint, core/checkpoint.hpp); the gradients are the same, bit for bit.
  void gradient_checkpointing_enable() { gradient_checkpointing_ = true; }
  void gradient_checkpointing_disable() { gradient_checkpointing_ = false; }
  bool is_gradient_checkpointing() const { return gradient_checkpointing_; }

  std::shared_ptr<nn::Embedding<T>> embed_tokens;
  std::shared_ptr<nn::ModuleList<T>> layers;
  std::shared_ptr<nn::RMSNorm<T>> norm;

 private:
  LlamaConfig config_;
  bool gradient_checkpointing_ = false;
  Tensor<T> inv_freq_;  // (head_dim / 2), from rope_theta and rope_scaling (a constant)
};

template <class T = float>
class LlamaForCausalLM : public nn::Module<T> {
 public:
  // Draws the initial weights as transformers' _init_weights: N(0, initializer_range) for linears
  // and the embedding, biases 0, norm weights 1.
  explicit LlamaForCausalLM(const LlamaConfig& config, Generator* generator = nullptr);

  // input_ids (N, T), 1 <= T <= max_position_embeddings -> logits (N, T, vocab_size).
  Tensor<T> forward(const IndexArray& input_ids);
  // The t positions after the caches' -> their logits (N, t, V), equal to those of forward() over
  // the whole sequence (to rounding). One cache per layer (an empty vector is sized). Inference:
  // under NoGradGuard.
  Tensor<T> forward_cached(const IndexArray& input_ids, std::vector<nn::KVCache<T>>& caches);
  // Appends up to max_new_tokens tokens to input_ids (N, t), each drawn by sample_next_token from
  // the last position's logits, with the cache; stops early once every sequence has produced one
  // of the eos_token_id ids (a finished sequence is padded with pad_token_id, else the first EOS),
  // both from generation_config.json when the folder had one, else from config.json, as
  // transformers' generate. Runs in eval mode without a graph.
  IndexArray generate(const IndexArray& input_ids, std::int64_t max_new_tokens, const SamplingOptions& options,
                      Generator* generator = nullptr);

  const LlamaConfig& config() const { return config_; }
  // The output head's weight (V, C): lm_head.weight, or model.embed_tokens.weight when tied.
  const Tensor<T>& head_weight() const;

  // Per-layer activation checkpointing of the decoder (LlamaModel's, as transformers forwards it).
  void gradient_checkpointing_enable() { model->gradient_checkpointing_enable(); }
  void gradient_checkpointing_disable() { model->gradient_checkpointing_disable(); }
  bool is_gradient_checkpointing() const { return model->is_gradient_checkpointing(); }

  std::shared_ptr<LlamaModel<T>> model;
  std::shared_ptr<nn::Linear<T>> lm_head;  // null when tie_word_embeddings

 private:
  LlamaConfig config_;
};

extern template class LlamaAttention<float>;
extern template class LlamaAttention<double>;
extern template class LlamaMLP<float>;
extern template class LlamaMLP<double>;
extern template class LlamaDecoderLayer<float>;
extern template class LlamaDecoderLayer<double>;
extern template class LlamaModel<float>;
extern template class LlamaModel<double>;
extern template class LlamaForCausalLM<float>;
extern template class LlamaForCausalLM<double>;

}  // namespace xgrad::models
