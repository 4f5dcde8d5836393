// Tensors made from nothing: zeros, ones, full, arange, rand, randn, from_vector, tensor (torch's
// factory functions, with requires_grad as the last argument).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <xgrad/base/random.hpp>
#include <xgrad/core/tensor.hpp>

namespace xgrad {

// A shape argument (LibTorch's IntArrayRef): a tensor's sizes() (or any std::vector<std::int64_t>),
// a Shape, or a braced list of sizes of any integer types, mixed too: zeros<float>({x.size(0), 3}).
// The factories, layer_norm's normalized_shape and nn::init take one. A negative size is refused by
// the function taking it, naming it and the value.
class ShapeArg {
 public:
  ShapeArg() = default;
  ShapeArg(const Shape& shape) : shape_(shape) {}        // NOLINT: implicit, as the Shape it replaces
  ShapeArg(Shape&& shape) : shape_(std::move(shape)) {}  // NOLINT
  ShapeArg(const std::vector<std::int64_t>& sizes) {     // NOLINT: implicit, as IntArrayRef (Sizes too)
    shape_.reserve(sizes.size());
    for (const std::int64_t d : sizes) add(d);
  }
  template <class... I,
            std::enable_if_t<(sizeof...(I) > 0) && (std::is_integral_v<I> && ...) && !(std::is_same_v<I, bool> || ...),
                             int> = 0>
  ShapeArg(I... sizes) {  // NOLINT
    shape_.reserve(sizeof...(I));
    (add(sizes), ...);
  }
  // The shape; throws naming `op` if a size was negative.
  const Shape& get(const char* op) const {
    XGRAD_CHECK(!negative_, op, ": expected non-negative sizes, got a negative size ", first_negative_);
    return shape_;
  }

 private:
  template <class I>
  void add(I size) {
    if constexpr (std::is_signed_v<I>) {
      if (size < 0 && !negative_) {
        negative_ = true;
        first_negative_ = static_cast<std::int64_t>(size);
      }
    }
    shape_.push_back(size < 0 ? 0 : static_cast<std::size_t>(size));
  }
  Shape shape_;
  bool negative_ = false;
  std::int64_t first_negative_ = 0;
};

template <class T = float>
Tensor<T> zeros(const ShapeArg& shape, bool requires_grad = false);
template <class T = float>
Tensor<T> ones(const ShapeArg& shape, bool requires_grad = false);
template <class T = float>
Tensor<T> full(const ShapeArg& shape, T fill_value, bool requires_grad = false);
// [start, end) in steps of step, like torch.arange.
template <class T = float>
Tensor<T> arange(T start, T end, T step = T(1), bool requires_grad = false);
template <class T = float>
Tensor<T> arange(T end) { return arange<T>(T(0), end); }
// Uniform on [0, 1).
template <class T = float>
Tensor<T> rand(const ShapeArg& shape, bool requires_grad = false);
template <class T = float>
Tensor<T> rand(const ShapeArg& shape, Generator& generator, bool requires_grad = false);
// Standard normal.
template <class T = float>
Tensor<T> randn(const ShapeArg& shape, bool requires_grad = false);
template <class T = float>
Tensor<T> randn(const ShapeArg& shape, Generator& generator, bool requires_grad = false);
// Row-major data with its shape; the sizes must agree.
template <class T = float>
Tensor<T> from_vector(const std::vector<T>& data, const ShapeArg& shape, bool requires_grad = false);

// torch::tensor: a tensor holding the values as written (a copy), a leaf.
//   auto s = xgrad::tensor<float>(2.5);                          // 0-d
//   auto v = xgrad::tensor<float>({1, 2, 3}, /*requires_grad=*/true);  // shape {3}
//   auto m = xgrad::tensor<float>({{1, 2}, {3, 4}});            // shape {2, 2}; rows of one length
// (The 0-d form is for arithmetic T only, so that it never captures a call of a user's own
// tensor(...) function under `using namespace xgrad`.)
template <class T = float, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
Tensor<T> tensor(T value, bool requires_grad = false) {
  return from_vector<T>(std::vector<T>{value}, Shape{}, requires_grad);
}
template <class T = float>
Tensor<T> tensor(std::initializer_list<T> values, bool requires_grad = false) {
  return from_vector<T>(std::vector<T>(values), Shape{values.size()}, requires_grad);
}
template <class T = float>
Tensor<T> tensor(std::initializer_list<std::initializer_list<T>> rows, bool requires_grad = false) {
  const std::size_t cols = rows.size() == 0 ? 0 : rows.begin()->size();
  std::vector<T> data;
  data.reserve(rows.size() * cols);
  std::size_t r = 0;
  for (const auto& row : rows) {
    XGRAD_CHECK(row.size() == cols, "tensor: expected rows of one length (", cols, ", as row 0), got ", row.size(),
                " values in row ", r);
    data.insert(data.end(), row.begin(), row.end());
    ++r;
  }
  return from_vector<T>(data, Shape{rows.size(), cols}, requires_grad);
}

}  // namespace xgrad
