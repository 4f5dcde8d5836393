// Building the graph: what every op calls to record its result and backward, and what the engine
// runs (engine.cpp). A user's own op is easier to write as an autograd::Function (function.hpp).
#pragma once

#include <functional>
#include <initializer_list>
#include <vector>

#include <xgrad/core/grad_mode.hpp>
#include <xgrad/core/tensor.hpp>

namespace xgrad {

// Wraps an op's result. When grad mode is on and any input requires grad, the result records
// the inputs and the backward closure; otherwise it is a plain leaf without a graph.
template <class T>
Tensor<T> make_result(const char* op, Array<T>&& value, std::vector<Tensor<T>> inputs,
                      std::function<void(Node<T>&)> backward_fn);
// The same for a braced list of inputs, `make_result<T>(op, y, {a, b}, ...)` (no vector built).
template <class T>
Tensor<T> make_result(const char* op, Array<T>&& value, std::initializer_list<Tensor<T>> inputs,
                      std::function<void(Node<T>&)> backward_fn);

// Runs reverse-mode differentiation from root with the given seed gradient.
template <class T>
void run_backward(const Tensor<T>& root, Array<T> gradient, bool retain_graph);

// torch's Variable._execution_engine.queue_callback: called from a hook during a backward, queues
// `callback` to run when that backward has finished (after every gradient and hook), in queue
// order. Throws when no backward is running on this thread. A backward that throws drops its
// queued callbacks.
void queue_backward_callback(std::function<void()> callback);

// Sums a (broadcast) gradient back to `shape`: the reverse of NumPy broadcasting.
template <class T>
Array<T> sum_to(const Array<T>& grad, const Shape& shape);
// The same, taking the gradient over (no copy) when it already has `shape`.
template <class T>
Array<T> sum_to(Array<T>&& grad, const Shape& shape);

}  // namespace xgrad
