// A character- or token-level GPT as nanoGPT's model.py, built from xgrad's own modules so that
// its state_dict keys are those of the equivalent PyTorch 1.13 module
// (scripts/make_gpt_fixture.py, benchmarks/gpt_compare.py):
//
//   idx (N, T) -> wte(idx) + wpe(0..T-1)    (N, T, C)    wte.weight (V, C), wpe.weight (block_size, C)
//              -> drop                     dropout on the embeddings
//              -> h                        TransformerEncoder of n_layer pre-norm causal blocks
//                                          (TransformerEncoderLayer(C, n_head, 4 C, dropout, "gelu",
//                                          batch_first, norm_first), keys h.layers.{i}.*; the width
//                                          4 C, the activation and LayerNorm's eps are options)
//              -> ln_f                     final LayerNorm
//              -> x @ wte.weight^T         logits (N, T, V): the head is tied to the token embedding
//
// The tied head has no parameter of its own: wte.weight is one entry of named_parameters, of the
// optimizer's state, of checkpoints and safetensors, and its gradient sums both uses.
// Init as nanoGPT: linear and embedding weights N(0, 0.02), the residual projections
// (self_attn.out_proj.weight, linear2.weight) N(0, 0.02 / sqrt(2 n_layer)), biases 0, LayerNorm
// weights 1.
//
// generate() samples continuations (nanoGPT's generate) with a KV cache (nn::forward_cached): each
// new token costs one position's forward against the cached keys and values of the context.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <xgrad/base/random.hpp>
#include <xgrad/nn/dropout.hpp>
#include <xgrad/nn/embedding.hpp>
#include <xgrad/nn/layer_norm.hpp>
#include <xgrad/nn/kv_cache.hpp>
#include <xgrad/nn/module.hpp>
#include <xgrad/nn/transformer.hpp>
#include <xgrad/models/sampling.hpp>

namespace xgrad::models {

// nanoGPT's GPTConfig (its defaults: GPT-2 small with a padded vocabulary).
struct GPTConfig {
  std::int64_t vocab_size = 50304;
  std::int64_t block_size = 1024;  // the longest sequence (positions of wpe)
  std::int64_t n_layer = 12;
  std::int64_t n_head = 12;
  std::int64_t n_embd = 768;
  double dropout = 0.0;
  bool bias = true;  // biases in the linears and LayerNorms
  // GPT-2's options beyond nanoGPT's (models/hf_gpt2.hpp reads them from Hugging Face's config.json);
  // the defaults are nanoGPT's.
  double layer_norm_eps = 1e-5;      // every LayerNorm's eps (layer_norm_epsilon)
  std::int64_t n_inner = 0;          // the MLP's hidden width; 0: 4 * n_embd (n_inner = null)
  std::string activation = "gelu";   // the MLP's: "gelu" (erf), "gelu_tanh" (GPT-2's gelu_new) or "relu"
  // Hugging Face's bos_token_id and eos_token_id, which GPT does not use: load_hf_gpt2 keeps
  // config.json's and save_hf_gpt2 writes them back. Unset (a model built here): 50256, GPT-2's
  // <|endoftext|> and GPT2Config's default, when vocab_size holds it, else vocab_size - 1. -1: none
  // (null in config.json).
  std::optional<std::int64_t> bos_token_id, eos_token_id;
  // The text save_hf_gpt2 writes as generation_config.json: load_hf_gpt2_config's is the folder's
  // (keys sorted, 2-space indent, as save_pretrained writes it). Empty (a model built here, or a
  // folder without one): save_hf_gpt2 writes transformers' default one with the token ids above.
  std::string generation_config;
};

template <class T = float>
class GPT : public nn::Module<T> {
 public:
  // Draws the initial weights from `generator` (the default generator when null).
  explicit GPT(const GPTConfig& config, Generator* generator = nullptr);

  // idx (N, T) token indices in [0, vocab_size), 1 <= T <= block_size -> logits (N, T, vocab_size).
  Tensor<T> forward(const IndexArray& idx);
  const GPTConfig& config() const { return config_; }

  // transformers' gradient_checkpointing_enable(): in training with grad mode on, each block's
  // activations are dropped after the forward and recomputed in the backward, its dropout masks
  // replayed (utils::checkpoint, core/checkpoint.hpp); the gradients are the same, bit for bit.
  void gradient_checkpointing_enable() { gradient_checkpointing_ = true; }
  void gradient_checkpointing_disable() { gradient_checkpointing_ = false; }
  bool is_gradient_checkpointing() const { return gradient_checkpointing_; }

  // Incremental forward for generation: idx_new (N, t) are the positions after the caches.front()
  // .length() ones the caches hold -> their logits (N, t, vocab_size), equal to those positions of
  // forward() over the whole sequence. Appends to the caches (one per block; an empty vector is
  // sized). Inference only: under NoGradGuard, in eval mode or with dropout 0 (forward_cached's
  // rules); the whole sequence must fit block_size.
  Tensor<T> forward_cached(const IndexArray& idx_new, std::vector<nn::KVCache<T>>& caches);

  // nanoGPT's generate: appends max_new_tokens tokens to idx (N, t) -> (N, t + max_new_tokens),
  // each drawn by sample_next_token from the logits of the last position given the context.
  // The context is the whole sequence while it fits block_size. Beyond it only with a `window`
  // (1 <= window <= block_size; 0: none, then a longer sequence is an error): when the context
  // would exceed block_size it is cropped to its last `window` tokens (nanoGPT's crop with window
  // = block_size), whose cache is filled again in one call. use_cache = false recomputes the
  // whole context for every token instead (the same tokens, up to rounding). Runs in eval mode
  // without a graph; the module's mode is restored.
  IndexArray generate(const IndexArray& idx, std::int64_t max_new_tokens, const SamplingOptions& options,
                      Generator* generator = nullptr, bool use_cache = true, std::int64_t window = 0);

  std::shared_ptr<nn::Embedding<T>> wte;             // token embedding, also the output head
  std::shared_ptr<nn::Embedding<T>> wpe;             // learned positions
  std::shared_ptr<nn::Dropout<T>> drop;
  std::shared_ptr<nn::TransformerEncoder<T>> h;      // the blocks (no final norm inside)
  std::shared_ptr<nn::LayerNorm<T>> ln_f;

 private:
  GPTConfig config_;
  bool gradient_checkpointing_ = false;
};

extern template class GPT<float>;
extern template class GPT<double>;

}  // namespace xgrad::models
