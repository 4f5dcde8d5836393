// Datasets (dataset.hpp) and the random draws of random_split.
#include <xgrad/data/dataset.hpp>

#include <cmath>
#include <cstring>
#include <new>
#include <stdexcept>

#include <xgrad/base/check.hpp>

namespace xgrad::data {

namespace detail {

void check_index(const std::string& who, std::size_t index, std::size_t size) {
  if (index >= size)
    throw std::out_of_range(who + ": index " + std::to_string(index) + " is out of range for " +
                            std::to_string(size) + " examples");
}

namespace {
// Uniform on [0, n), n >= 1, without modulo bias (Lemire's multiply-and-reject).
std::uint64_t uniform_below(Generator& generator, std::uint64_t n) {
  unsigned __int128 m = static_cast<unsigned __int128>(generator.next_u64()) * n;
  auto low = static_cast<std::uint64_t>(m);
  if (low < n) {
    const std::uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(generator.next_u64()) * n;
      low = static_cast<std::uint64_t>(m);
    }
  }
  return static_cast<std::uint64_t>(m >> 64);
}
}  // namespace

std::vector<std::size_t> index_vector(std::size_t n, const char* who, const char* what) {
  try {
    return std::vector<std::size_t>(n);
  } catch (const std::bad_alloc&) {
  } catch (const std::length_error&) {  // n beyond the vector's max_size()
  }
  const auto bytes = static_cast<unsigned __int128>(n) * sizeof(std::size_t);
  throw OutOfMemoryError(who, xgrad::detail::concat("for ", what, " (", n, " indices): tried to allocate ",
                                                    bytes >> 64 ? std::string("more than 2^64")
                                                                : std::to_string(static_cast<std::uint64_t>(bytes)),
                                                    " bytes"));
}

std::vector<std::size_t> randperm(std::size_t n, Generator& generator, const char* who) {
  std::vector<std::size_t> perm = index_vector(n, who, "a permutation of the dataset's indices");
  for (std::size_t i = 0; i < n; ++i) perm[i] = i;
  // Fisher-Yates from the back: position i takes a uniform pick of 0..i.
  for (std::size_t i = n; i > 1; --i) std::swap(perm[i - 1], perm[uniform_below(generator, i)]);
  return perm;
}

std::size_t uniform_index(Generator& generator, std::size_t n) { return uniform_below(generator, n); }

std::vector<std::size_t> split_lengths(const std::vector<double>& lengths, std::size_t size) {
  XGRAD_CHECK(!lengths.empty(), "random_split: lengths is empty");
  double total = 0;
  for (double l : lengths) {
    XGRAD_CHECK(std::isfinite(l) && l >= 0, "random_split: lengths must be >= 0, got ", l);
    total += l;
  }
  std::vector<std::size_t> counts;
  if (std::abs(total - 1.0) < 1e-9 && total <= 1.0 + 1e-9 && size != 1) {
    // Fractions: floor(size * f) each, then one more for each in turn until they sum to size.
    std::size_t assigned = 0;
    for (double f : lengths) {
      counts.push_back(static_cast<std::size_t>(std::floor(static_cast<double>(size) * f)));
      assigned += counts.back();
    }
    for (std::size_t i = 0; assigned < size; i = (i + 1) % counts.size(), ++assigned) ++counts[i];
    return counts;
  }
  std::size_t sum = 0;
  for (double l : lengths) {
    XGRAD_CHECK(l == std::floor(l), "random_split: lengths must be whole counts or fractions summing to 1, got ",
                l);
    counts.push_back(static_cast<std::size_t>(l));
    sum += counts.back();
  }
  XGRAD_CHECK(sum == size, "random_split: the lengths sum to ", sum, ", the dataset has ", size,
              " examples (fractions must sum to 1)");
  return counts;
}

}  // namespace detail

template <class T>
TensorDataset<T>::TensorDataset(std::vector<Tensor<T>> tensors) : tensors_(std::move(tensors)) {
  XGRAD_CHECK(!tensors_.empty(), "TensorDataset: expected at least one tensor");
  for (std::size_t k = 0; k < tensors_.size(); ++k) {
    XGRAD_CHECK(tensors_[k].defined() && tensors_[k].dim() >= 1, "TensorDataset: tensor ", k,
                " must have a first dimension, got shape ", tensors_[k].defined() ? tensors_[k].shape() : Shape{});
    XGRAD_CHECK(tensors_[k].size(0) == tensors_[0].size(0), "TensorDataset: every tensor needs the same first ",
                "dimension: tensor 0 has ", tensors_[0].size(0), ", tensor ", k, " has shape ", tensors_[k].shape());
  }
  size_ = tensors_[0].size(0);
}

template <class T>
std::vector<Tensor<T>> TensorDataset<T>::get(std::size_t index) const {
  detail::check_index("TensorDataset.get", index, size_);
  std::vector<Tensor<T>> example;
  example.reserve(tensors_.size());
  for (const auto& t : tensors_) {
    // t[index]: the row's elements are contiguous (row-major).
    const Shape full = t.shape();
    const Shape row_shape(full.begin() + 1, full.end());
    Array<T> row = empty_array<T>(row_shape);
    const std::size_t n = row.size();
    if (n > 0) std::memcpy(row.data(), t.value().data() + index * n, n * sizeof(T));
    example.emplace_back(std::move(row));
  }
  return example;
}

template class TensorDataset<float>;
template class TensorDataset<double>;

}  // namespace xgrad::data
