// A key/value cache for generating with a causal TransformerEncoder, one token at a time: each
// layer keeps the keys and values its self-attention computed for every position seen so far, so
// a new position costs one query against them (O(context) per token) instead of a forward over
// the whole context (O(context^2)).
// compile: snippet given: extern nn::TransformerEncoder<float>& encoder; Tensor<float> prompt, next;
//   NoGradGuard no_grad;                                   // inference only
//   encoder.eval();
//   std::vector<nn::KVCache<float>> caches;                // sized by the first call
//   auto h = nn::forward_cached(encoder, prompt, caches);  // prefill: (N, t, E) with batch_first
//   for (int i = 0; i < 10; ++i)
//     h = nn::forward_cached(encoder, next, caches);       // then one position at a time
//
// forward_cached's result equals the last positions of encoder.forward(all positions, {}, {},
// /*is_causal=*/true), up to rounding. The cache stores the heads' projected keys and values as
// (N, H, capacity, d) buffers, grown by doubling (or reserve()d up front). A decoder with
// grouped-query attention (Llama's: fewer key/value heads than query heads) keeps only its Hkv
// key/value heads in the cache and attends with scaled_dot_product_attention_cached (below).
#pragma once

#include <cstdint>
#include <vector>

#include <xgrad/nn/transformer.hpp>

namespace xgrad::nn {

// The keys and values one layer's self-attention has seen, for generation (a
// TransformerEncoderLayer's, or a grouped-query attention's: scaled_dot_product_attention_cached).
// Empty at first: the first call fixes its layer, batch size N, key/value heads H, head size d and
// layout (batch_first or not); clear() forgets them and the positions. A cache belongs to one
// layer: passing it with another layer throws, naming both.
template <class T = float>
class KVCache {
 public:
  KVCache() = default;

  // Positions seen (the length of every sequence of the batch).
  std::int64_t length() const { return length_; }
  // Forgets every position, the layer, the batch size and layout, and a pending reserve(); keeps
  // the memory for the next use.
  void clear();
  // Keeps the first `length` positions (0 <= length <= length()), as Hugging Face's
  // DynamicCache.crop: generation can go back and continue from there.
  void crop(std::int64_t length);
  // Makes room for `capacity` positions, so that no append up to it reallocates; when the memory
  // cannot be had it throws and leaves the cache as it was. Before the first use it is remembered
  // and applied once the shapes are known: if it cannot be met then, that forward_cached throws,
  // the cache stays empty and the reservation is dropped.
  void reserve(std::int64_t capacity);
  // Positions the buffers hold without growing.
  std::int64_t capacity() const { return capacity_; }
  // The batch size the cache holds (0 when empty).
  std::int64_t batch_size() const { return in_use_ ? static_cast<std::int64_t>(batch_) : 0; }

  // Copies of the cached keys and values, (N, H, length, d) with H the key/value heads, k and v
  // after the in-projection (the query scaling not applied).
  Array<T> keys() const { return copy_of(k_); }
  Array<T> values() const { return copy_of(v_); }

  // For forward_cached and scaled_dot_product_attention_cached. The layer a cache serves: its
  // address, and for messages what it is, the encoder holding it and its index there (null and -1
  // for a layer called alone).
  struct Owner {
    const void* layer = nullptr;
    const void* encoder = nullptr;
    std::int64_t index = -1;
    const char* kind = "TransformerEncoderLayer";
  };
  // Checks the layer and x's shape (N, E) against what the cache holds (names `who`), fixes them
  // on first use, makes room for `t` more positions and returns the position the new ones start
  // at; when it throws the cache is as before. The caller then writes them with key()/value(),
  // calls note_nonfinite_values() if a value it wrote is Inf or NaN, and commit(t).
  std::int64_t prepare(const char* who, const Owner& owner, std::size_t batch, std::size_t heads, std::size_t head_dim,
                       bool batch_first, std::size_t t);
  void commit(std::size_t t) { length_ += static_cast<std::int64_t>(t); }
  void note_nonfinite_values() { nonfinite_values_ = true; }
  // Whether a value written since the cache was last empty may be Inf or NaN (then the attention
  // must keep it out of the positions whose probability is 0: ops/attention/attention.hpp,
  // attention_cached).
  bool may_hold_nonfinite_values() const { return nonfinite_values_; }
  // Row `pos` of head h of sequence n: d contiguous values; consecutive positions are d apart.
  T* key(std::size_t n, std::size_t h, std::size_t pos) { return k_.data() + offset(n, h, pos); }
  T* value(std::size_t n, std::size_t h, std::size_t pos) { return v_.data() + offset(n, h, pos); }

 private:
  std::size_t offset(std::size_t n, std::size_t h, std::size_t pos) const {
    return ((n * heads_ + h) * static_cast<std::size_t>(capacity_) + pos) * head_dim_;
  }
  void grow(std::size_t capacity);  // reallocates k_ and v_ keeping the cached positions
  Array<T> copy_of(const Array<T>& buffer) const;

  Array<T> k_, v_;  // (N, H, capacity, d)
  std::int64_t length_ = 0;
  std::int64_t capacity_ = 0;
  std::int64_t reserved_ = 0;  // asked for by reserve() before the shapes were known
  std::size_t batch_ = 0, heads_ = 0, head_dim_ = 0;
  bool batch_first_ = false;
  bool in_use_ = false;  // the shapes above and owner_ are fixed
  bool nonfinite_values_ = false;
  Owner owner_;
};

// Incremental causal forward of one layer (norm_first or not, batch_first or not, any
// activation): x_new holds the t newest positions ((N, t, E) batch_first, else (t, N, E)); the
// result equals the last t positions of layer.forward(x_all, AttnMask<T>(), {}, /*is_causal=*/true)
// where x_all is every position the cache has seen followed by x_new. Appends the new keys and
// values to the cache. The new queries attend to the cached keys and values directly (earlier
// positions are never recomputed); within the new block attention is causal, so a prompt can be
// prefilled in one call. Under AutocastGuard (float) the attention's products run in bf16, as the
// full forward's do. Inference only: throws unless grad mode is off (NoGradGuard) and unless the
// layer is in eval mode or has dropout 0.
template <class T>
Tensor<T> forward_cached(TransformerEncoderLayer<T>& layer, const Tensor<T>& x_new, KVCache<T>& cache);

// The whole stack (then the encoder's final norm if any); caches.size() must equal num_layers
// (an empty vector is resized for the caller).
template <class T>
Tensor<T> forward_cached(TransformerEncoder<T>& encoder, const Tensor<T>& x_new, std::vector<KVCache<T>>& caches);

// Causal grouped-query self-attention over a cache, for decoders whose attention is not
// nn::MultiheadAttention (Llama's: its own projections, RoPE on q and k, fewer key/value heads):
// appends k_new and v_new, (N, Hkv, t, d) each, to the cache, and attends the t new queries
// q_new (N, Hq, t, d), Hq a multiple of Hkv, to every cached position, query i (at position
// start = length() before the call, plus i) seeing keys 0 .. start + i, with scale 1 / sqrt(d);
// query head j reads key/value head j / (Hq / Hkv), as transformers' repeat_kv.
//   -> (N, t, Hq d): the heads side by side, as an output projection takes them; equal (up to
// rounding) to the last t query rows of scaled_dot_product_attention(q_all, k_all, v_all, {}, 0.0,
// /*is_causal=*/true, std::nullopt, /*enable_gqa=*/true) over every position so far, transposed to
// (N, t, Hq, d). `layer` identifies the layer the cache serves (one cache per layer: another layer
// throws); its key/value heads and head size are fixed by the first call. Inference only: throws
// unless grad mode is off. Under AutocastGuard (float) the products run in bf16.
template <class T>
Tensor<T> scaled_dot_product_attention_cached(const Tensor<T>& q_new, const Tensor<T>& k_new, const Tensor<T>& v_new,
                                              KVCache<T>& cache, const void* layer);

extern template class KVCache<float>;
extern template class KVCache<double>;

}  // namespace xgrad::nn
