// Collating examples into batches (collate.hpp): plain copies of contiguous rows.
#include <xgrad/data/collate.hpp>

#include <algorithm>
#include <cstring>

namespace xgrad::data {

namespace {

// Stacks arrays of one shape S into (B, *S).
template <class V>
xt::xarray<V> stack_arrays(const char* who, const std::vector<const xt::xarray<V>*>& items) {
  XGRAD_CHECK(!items.empty(), who, ": a batch needs at least one example");
  const Shape shape = shape_of(*items[0]);
  for (std::size_t b = 1; b < items.size(); ++b) {
    const Shape other = shape_of(*items[b]);
    XGRAD_CHECK(other == shape, who, ": every example must have the same shape to be stacked: example 0 has ",
                shape, ", example ", b, " has ", other, " (pad_collate pads sequences of different lengths)");
  }
  Shape out_shape{items.size()};
  out_shape.insert(out_shape.end(), shape.begin(), shape.end());
  xt::xarray<V> out = empty_array<V>(out_shape);
  const std::size_t n = items[0]->size();
  for (std::size_t b = 0; b < items.size(); ++b)
    if (n > 0) std::copy(items[b]->data(), items[b]->data() + n, out.data() + b * n);
  return out;
}

}  // namespace

template <class T>
Tensor<T> default_collate(const std::vector<Tensor<T>>& examples) {
  std::vector<const Array<T>*> items;
  for (const auto& e : examples) items.push_back(&e.value());
  return Tensor<T>(stack_arrays<T>("default_collate", items));
}

template <class T>
std::vector<Tensor<T>> default_collate(const std::vector<std::vector<Tensor<T>>>& examples) {
  XGRAD_CHECK(!examples.empty(), "default_collate: a batch needs at least one example");
  const std::size_t fields = examples[0].size();
  std::vector<Tensor<T>> batch;
  for (std::size_t f = 0; f < fields; ++f) {
    std::vector<const Array<T>*> items;
    for (std::size_t b = 0; b < examples.size(); ++b) {
      XGRAD_CHECK(examples[b].size() == fields, "default_collate: example 0 has ", fields, " tensors, example ", b,
                  " has ", examples[b].size());
      items.push_back(&examples[b][f].value());
    }
    batch.emplace_back(stack_arrays<T>("default_collate", items));
  }
  return batch;
}

template <class V>
xt::xarray<V> default_collate(const std::vector<xt::xarray<V>>& examples) {
  std::vector<const xt::xarray<V>*> items;
  for (const auto& e : examples) items.push_back(&e);
  return stack_arrays<V>("default_collate", items);
}

template <class V>
PaddedBatch<V> pad_collate(const std::vector<xt::xarray<V>>& sequences, V padding_value) {
  XGRAD_CHECK(!sequences.empty(), "pad_collate: a batch needs at least one sequence");
  const Shape first = shape_of(sequences[0]);
  XGRAD_CHECK(!first.empty(), "pad_collate: sequences must be (L, *S), got a scalar as sequence 0");
  const Shape rest(first.begin() + 1, first.end());  // S, the same for every sequence
  std::size_t step = 1;  // elements per position
  for (std::size_t d : rest) step *= d;
  PaddedBatch<V> out;
  std::size_t max_len = 0;
  for (std::size_t b = 0; b < sequences.size(); ++b) {
    const Shape s = shape_of(sequences[b]);
    XGRAD_CHECK(!s.empty() && Shape(s.begin() + 1, s.end()) == rest, "pad_collate: sequence ", b, " has shape ", s,
                ", expected (L, *S) with S = ", rest, " as sequence 0");
    out.lengths.push_back(s[0]);
    max_len = std::max(max_len, s[0]);
  }
  Shape shape{sequences.size(), max_len};
  shape.insert(shape.end(), rest.begin(), rest.end());
  out.padded = empty_array<V>(shape);
  std::fill(out.padded.begin(), out.padded.end(), padding_value);
  out.key_padding_mask = empty_array<bool>({sequences.size(), max_len}, "pad_sequences");
  for (std::size_t b = 0; b < sequences.size(); ++b) {
    const std::size_t n = out.lengths[b] * step;
    if (n > 0) std::copy(sequences[b].data(), sequences[b].data() + n, out.padded.data() + b * max_len * step);
    for (std::size_t t = 0; t < max_len; ++t) out.key_padding_mask(b, t) = t >= out.lengths[b];
  }
  return out;
}

#define XGRAD_INSTANTIATE(T)                                                                   \
  template Tensor<T> default_collate<T>(const std::vector<Tensor<T>>&);                        \
  template std::vector<Tensor<T>> default_collate<T>(const std::vector<std::vector<Tensor<T>>>&);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE
#define XGRAD_INSTANTIATE(V)                                                        \
  template xt::xarray<V> default_collate<V>(const std::vector<xt::xarray<V>>&);     \
  template PaddedBatch<V> pad_collate<V>(const std::vector<xt::xarray<V>>&, V);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
XGRAD_INSTANTIATE(std::int64_t)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad::data
