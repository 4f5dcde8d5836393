// Collating: how a DataLoader turns the examples of one batch into one batch.
//
// default_collate stacks examples of equal shape along a new first dimension (PyTorch's
// default_collate): Tensor<T> examples of shape S -> (B, *S); TensorDataset's examples
// {x_i, y_i} -> {stack(x), stack(y)}; arrays (Array<T>, IndexArray) the same way.
//
// pad_collate is for sequences of different lengths (torch.nn.utils.rnn.pad_sequence with
// batch_first=True): sequences (L_i, *S) -> padded (B, max L_i, *S) filled with padding_value
// past each end, with the key padding mask (B, max L_i), true at the padded positions, the
// convention of nn.MultiheadAttention's key_padding_mask and TransformerEncoder's
// src_key_padding_mask.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <xgrad/core/tensor.hpp>

namespace xgrad::data {

template <class T>
Tensor<T> default_collate(const std::vector<Tensor<T>>& examples);
template <class T>
std::vector<Tensor<T>> default_collate(const std::vector<std::vector<Tensor<T>>>& examples);
template <class V>
xt::xarray<V> default_collate(const std::vector<xt::xarray<V>>& examples);

template <class V>
struct PaddedBatch {
  xt::xarray<V> padded;               // (B, L, *S), L = the longest sequence
  BoolArray key_padding_mask;         // (B, L): true = padding (not a real position)
  std::vector<std::size_t> lengths;   // (B): each sequence's length
};

template <class V>
PaddedBatch<V> pad_collate(const std::vector<xt::xarray<V>>& sequences, V padding_value = V(0));

// The collate a DataLoader uses when it is given none; defined for the example types above.
template <class Example>
struct DefaultCollate;  // no definition: pass a collate_fn to the DataLoader for other types
template <class T>
struct DefaultCollate<Tensor<T>> {
  using Batch = Tensor<T>;
  static Batch collate(const std::vector<Tensor<T>>& e) { return default_collate(e); }
};
template <class T>
struct DefaultCollate<std::vector<Tensor<T>>> {
  using Batch = std::vector<Tensor<T>>;
  static Batch collate(const std::vector<std::vector<Tensor<T>>>& e) { return default_collate(e); }
};
template <class V>
struct DefaultCollate<xt::xarray<V>> {
  using Batch = xt::xarray<V>;
  static Batch collate(const std::vector<xt::xarray<V>>& e) { return default_collate(e); }
};

#define XGRAD_DECLARE(T)                                                                              \
  extern template Tensor<T> default_collate<T>(const std::vector<Tensor<T>>&);                        \
  extern template std::vector<Tensor<T>> default_collate<T>(const std::vector<std::vector<Tensor<T>>>&);
XGRAD_DECLARE(float)
XGRAD_DECLARE(double)
#undef XGRAD_DECLARE
#define XGRAD_DECLARE(V)                                                                   \
  extern template xt::xarray<V> default_collate<V>(const std::vector<xt::xarray<V>>&);     \
  extern template PaddedBatch<V> pad_collate<V>(const std::vector<xt::xarray<V>>&, V);
XGRAD_DECLARE(float)
XGRAD_DECLARE(double)
XGRAD_DECLARE(std::int64_t)
#undef XGRAD_DECLARE

}  // namespace xgrad::data
