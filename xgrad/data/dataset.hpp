// torch.utils.data's datasets: a Dataset is anything with a size and an example at each index;
// TensorDataset slices tensors along their first dimension, Subset picks indices of another
// dataset, random_split cuts one into disjoint random subsets (seeded).
//
//   auto ds = std::make_shared<xgrad::data::TensorDataset<float>>(std::vector{x, y});  // x (N, 3), y (N)
//   auto parts = xgrad::data::random_split(ds, {0.8, 0.2}, generator);              // train, held-out
//   parts[0]->get(5)  // {x[i], y[i]} for the 5th index of the split: shapes (3) and ()
//
// get() is const and may be called from several threads at once (the DataLoader's workers): a
// dataset of your own must allow that. An index out of range throws std::out_of_range.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <xgrad/base/random.hpp>
#include <xgrad/core/tensor.hpp>

namespace xgrad::data {

// torch.utils.data.Dataset (map-style): examples 0 .. size() - 1.
template <class Example>
class Dataset {
 public:
  using ExampleType = Example;
  virtual ~Dataset() = default;
  virtual std::size_t size() const = 0;
  virtual Example get(std::size_t index) const = 0;
};

namespace detail {
// Throws std::out_of_range "<who>: index <index> is out of range for <size> examples".
void check_index(const std::string& who, std::size_t index, std::size_t size);
// A uniformly random permutation of 0 .. n - 1 (torch.randperm), drawn from generator; `who` names
// the caller when the memory for it cannot be had (index_vector).
std::vector<std::size_t> randperm(std::size_t n, Generator& generator, const char* who = "randperm");
// n indices (zeros), e.g. one epoch of a sampler. When the memory cannot be had (num_samples = 1e9
// is 8 GB) it throws xgrad::OutOfMemoryError "<who>: not enough memory for <what> (<n> indices):
// tried to allocate <bytes> bytes" instead of a bare std::bad_alloc.
std::vector<std::size_t> index_vector(std::size_t n, const char* who, const char* what);
// Uniform on 0 .. n - 1 (n >= 1), without modulo bias.
std::size_t uniform_index(Generator& generator, std::size_t n);
// The lengths random_split uses: whole counts summing to `size`, or fractions summing to 1
// (floored, the remainder added one at a time from the first, as PyTorch does).
std::vector<std::size_t> split_lengths(const std::vector<double>& lengths, std::size_t size);
}  // namespace detail

// torch.utils.data.TensorDataset: example i is {t[i] for t in tensors}; every tensor has the same
// first dimension N. The examples are new tensors without a graph (values copied).
template <class T = float>
class TensorDataset : public Dataset<std::vector<Tensor<T>>> {
 public:
  explicit TensorDataset(std::vector<Tensor<T>> tensors);
  std::size_t size() const override { return size_; }
  std::vector<Tensor<T>> get(std::size_t index) const override;
  const std::vector<Tensor<T>>& tensors() const { return tensors_; }

 private:
  std::vector<Tensor<T>> tensors_;
  std::size_t size_ = 0;
};

extern template class TensorDataset<float>;
extern template class TensorDataset<double>;

// torch.utils.data.Subset: example i is dataset[indices[i]].
template <class Example>
class Subset : public Dataset<Example> {
 public:
  Subset(std::shared_ptr<const Dataset<Example>> dataset, std::vector<std::size_t> indices)
      : dataset_(std::move(dataset)), indices_(std::move(indices)) {
    XGRAD_CHECK(dataset_ != nullptr, "Subset: the dataset is null");
    for (std::size_t i : indices_) detail::check_index("Subset", i, dataset_->size());
  }
  std::size_t size() const override { return indices_.size(); }
  Example get(std::size_t index) const override {
    detail::check_index("Subset.get", index, indices_.size());
    return dataset_->get(indices_[index]);
  }
  const std::vector<std::size_t>& indices() const { return indices_; }
  const std::shared_ptr<const Dataset<Example>>& dataset() const { return dataset_; }

 private:
  std::shared_ptr<const Dataset<Example>> dataset_;
  std::vector<std::size_t> indices_;
};

// torch.utils.data.random_split(dataset, lengths, generator): lengths are counts summing to
// dataset->size(), or fractions summing to 1 ({0.8, 0.2}). The subsets are disjoint and cover
// the dataset; the same generator state gives the same split.
template <class D>
std::vector<std::shared_ptr<Subset<typename D::ExampleType>>> random_split(std::shared_ptr<D> dataset,
                                                                           const std::vector<double>& lengths,
                                                                           Generator& generator) {
  using Example = typename D::ExampleType;
  XGRAD_CHECK(dataset != nullptr, "random_split: the dataset is null");
  const std::vector<std::size_t> counts = detail::split_lengths(lengths, dataset->size());
  const std::vector<std::size_t> perm = detail::randperm(dataset->size(), generator);
  std::vector<std::shared_ptr<Subset<Example>>> parts;
  std::size_t offset = 0;
  for (std::size_t n : counts) {
    std::vector<std::size_t> indices(perm.begin() + offset, perm.begin() + offset + n);
    parts.push_back(std::make_shared<Subset<Example>>(dataset, std::move(indices)));
    offset += n;
  }
  return parts;
}

}  // namespace xgrad::data
