// Tensors made from nothing: zeros, ones, full, arange, rand, randn, from_vector (torch's
// factory functions, with requires_grad as the last argument).
#pragma once

#include <vector>

#include <xgrad/base/random.hpp>
#include <xgrad/core/tensor.hpp>

namespace xgrad {

template <class T = float>
Tensor<T> zeros(const Shape& shape, bool requires_grad = false);
template <class T = float>
Tensor<T> ones(const Shape& shape, bool requires_grad = false);
template <class T = float>
Tensor<T> full(const Shape& shape, T fill_value, bool requires_grad = false);
// [start, end) in steps of step, like torch.arange.
template <class T = float>
Tensor<T> arange(T start, T end, T step = T(1), bool requires_grad = false);
template <class T = float>
Tensor<T> arange(T end) { return arange<T>(T(0), end); }
// Uniform on [0, 1).
template <class T = float>
Tensor<T> rand(const Shape& shape, bool requires_grad = false);
template <class T = float>
Tensor<T> rand(const Shape& shape, Generator& generator, bool requires_grad = false);
// Standard normal.
template <class T = float>
Tensor<T> randn(const Shape& shape, bool requires_grad = false);
template <class T = float>
Tensor<T> randn(const Shape& shape, Generator& generator, bool requires_grad = false);
// Row-major data with its shape; the sizes must agree.
template <class T = float>
Tensor<T> from_vector(const std::vector<T>& data, const Shape& shape, bool requires_grad = false);

}  // namespace xgrad
