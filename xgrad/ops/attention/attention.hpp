// The fused attention op behind F.scaled_dot_product_attention and nn.MultiheadAttention
// (internal: the public entry points are in ops.hpp and nn/multihead_attention.hpp).
//
// Two steps, each in one place:
//   1. normalize_attention_mask (attention_mask.cpp): every mask kind the API takes (bool or
//      float, 2-D or 3-D attn_mask, key_padding_mask, is_causal) -> one AttentionMask, the layout
//      the kernel reads;
//   2. attention / attention_heads: one node computing softmax(scale q k^T + M) v
//      and, on request, the probabilities themselves, with gradients through both (attention.cpp
//      holds the attention_forward / attention_backward kernel pair; attention_tiled.cpp the tiled
//      path).
// Beside them, attention_cached: the same attention for a KV cache's decode steps (inference).
//
// Higher-order gradients: both paths give their node one differentiable backward
// (attention_formula.cpp), which a backward with create_graph runs instead of the fused kernels: it
// recomputes P (B, L, S) from q and k with differentiable ops (softmax, matmul; the mask and the
// dropout decisions as constants) and forms the gradients from it. So under create_graph the tiled
// path switches to the materialized computation, and its memory is O(L S) per batch-head, not
// O(L); the first-order backward (without create_graph) keeps each path's kernels. The cached
// path records no node (forward_cached refuses grad mode): nothing to differentiate.
#pragma once

#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

#include <xgrad/ops/ops.hpp>
#include <xgrad/base/random.hpp>

namespace xgrad::detail {

// The one mask the kernel reads, for logits of shape target = (lead..., L, S) and
// B = prod(lead) batches:
//   mask: none, or one contiguous array of shape (L, S) shared by every batch, or (B, L, S);
//         bool (true = may NOT attend) when every given mask is bool, else float (added to the
//         logits, a bool mask counting as 0 / -inf);
//   is_causal: also masks key j > query i (top-left aligned when L != S).
template <class T>
struct AttentionMask {
  AttnMask<T> mask;
  bool is_causal = false;

  bool per_batch() const;  // mask holds (B, L, S), not one (L, S)
};

// Whether a mask of shape `mask` broadcasts (NumPy rules, no dims beyond target's) to `target`.
bool mask_broadcasts_to(const Shape& mask, const Shape& target);

// Every mask kind -> AttentionMask, for target = (lead..., L, S):
//   attn_mask: broadcastable to target (F.scaled_dot_product_attention), or (B, L, S) (the
//     (N*num_heads, L, S) mask of nn.MultiheadAttention when lead = (N, num_heads));
//   key_padding_mask: (S), or (N, S) with N = lead[0]: key j of batch n is masked for every
//     head and every query (nn.MultiheadAttention's);
//   several masks combine as PyTorch combines them: logical or when all are bool, else the sum
//     of their float forms.
// Masks that vary only along L and S come out as one (L, S) array. Throws when a shape fits
// none of the forms; callers check first to name their own arguments.
template <class T>
AttentionMask<T> normalize_attention_mask(const Shape& target, const AttnMask<T>& attn_mask,
                                          const AttnMask<T>& key_padding_mask = {}, bool is_causal = false);

// What the op takes besides q, k and v.
template <class T>
struct AttentionArgs {
  AttentionMask<T> mask;
  double dropout_p = 0.0;          // on the probabilities; in [0, 1]
  std::optional<double> scale;     // default 1 / sqrt(E)
  bool need_weights = false;       // also return the probabilities (after dropout)
  Generator* generator = nullptr;  // dropout's (one seed drawn per call); the default one when null
};

// q (lead..., L, E), k (lead..., S, E), v (lead..., S, Ev) -> (out (lead..., L, Ev),
// weights (lead..., L, S)): out = Pd v with Pd = dropout(softmax(scale q k^T + M)), weights = Pd
// when need_weights (else undefined). Gradients flow from both outputs into q, k and v. Shapes
// must already be checked (scaled_dot_product_attention does it). Runs the path that
// set_attention_path (ops.hpp) selects; need_weights always runs the materialized one. One node, named
// "scaled_dot_product_attention", over {q, k, v}; with need_weights the two outputs are narrow
// views of it.
template <class T>
std::pair<Tensor<T>, Tensor<T>> attention(const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v,
                                          const AttentionArgs<T>& args);

// nn.MultiheadAttention's form, reading each head in place (no head split or merge copies):
// `projections` are the in-projection outputs, each (N, len, C) when batch_first, else (len, N, C);
// their last dims, concatenated, hold q, k and v as three blocks of E = num_heads * d columns:
// {qkv (.., L, 3E)} (self-attention), {q (.., L, E), kv (.., S, 2E)} or {q, k, v}. Head h of a
// block is its columns [h d, (h+1) d); batch b = n * num_heads + h, so masks and dropout are those
// of the (N, num_heads, L, S) logits.
//   -> (o (N, L, E) or (L, N, E): the heads side by side, as out_proj takes them;
//       weights (N, num_heads, L, S) when need_weights, else undefined).
// One node over the projections, the same kernels as attention(); gemms read the heads with
// leading dimension C (batch_first) or N C, and write o with leading dimension E or N E.
template <class T>
std::pair<Tensor<T>, Tensor<T>> attention_heads(const std::vector<Tensor<T>>& projections, std::size_t num_heads,
                                                bool batch_first, const AttentionArgs<T>& args);

// The cached decode path (attention_cached.cpp), behind nn::forward_cached and
// nn::scaled_dot_product_attention_cached: t new queries against the S = start + t keys and values
// of a KV cache, causal (new query i, at position start + i, sees keys 0 .. start + i), for each of
// the B = N H batch-heads b = n H + h, which reads KV head g = h / (H / Hkv) (grouped-query
// attention when the cache holds Hkv < H heads; g = h when Hkv = H):
//   O_b = P_b V_{n,g},  P_b = softmax(scale q_b K_{n,g}^T)  with scale = 1 / sqrt(d),
// P by the probability rule every attention path follows (attention_kernels.hpp), so that it
// agrees with the materialized and tiled paths on every NaN, Inf and zero. Inference only: no
// node, no gradient. Under autocast (float) the products run in bf16, as on the other paths.
template <class T>
struct CachedAttention {
  const char* who = "attention (cached)";          // names the caller in errors (out of memory)
  std::size_t batch = 0, heads = 0, head_dim = 0;  // N, H (the query heads), d
  std::size_t start = 0, new_positions = 0;        // keys cached before the new queries, t
  // Hkv: the key/value heads the cache holds, H a multiple of it (grouped-query attention); 0: H
  std::size_t kv_heads = 0;
  // The queries: row i of sequence n at q + (n t + i) q_row_stride, head h at columns [h d, (h+1) d)
  // of that row (an (N, t, 3E) in-projection output: q_row_stride = 3E).
  const T* q = nullptr;
  std::size_t q_row_stride = 0;
  // The keys and values, (N, Hkv, capacity, d) each: key j of KV head g of sequence n at
  // k + ((n Hkv + g) capacity + j) d.
  const T* k = nullptr;
  const T* v = nullptr;
  std::size_t capacity = 0;
  // Whether a value may be Inf or NaN: then a probability 0 must not read its value row (else a
  // hidden NaN would leak through 0 x NaN); false lets the product run as one plain gemm.
  bool values_may_be_nonfinite = true;
};

// -> O (N, t, E = H d), the heads side by side (as out_proj takes them).
template <class T>
Array<T> attention_cached(const CachedAttention<T>& a);

extern template struct AttentionMask<float>;
extern template struct AttentionMask<double>;

}  // namespace xgrad::detail
