// sum_to: the reverse of broadcasting on arrays, which the backward of every broadcasting op
// (the binary ops, matmul, the losses, layer_norm) uses to give a broadcast operand its gradient.
// The differentiable op on tensors is sum_to in ops.hpp.
#pragma once

#include <xgrad/backend/array.hpp>
#include <xgrad/base/check.hpp>

namespace xgrad {

// Sums a (broadcast) gradient back to `shape`: the reverse of NumPy broadcasting.
template <class T>
Array<T> sum_to(const Array<T>& grad, const Shape& shape);
// The same, taking the gradient over (no copy) when it already has `shape`.
template <class T>
Array<T> sum_to(Array<T>&& grad, const Shape& shape);

}  // namespace xgrad
