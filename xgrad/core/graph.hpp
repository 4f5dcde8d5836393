// Building the graph: what every op calls to record its result and backward, and what the engine
// runs (engine.cpp). A user's own op is easier to write as an autograd::Function (function.hpp).
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
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

namespace detail {
// An in-place result (autograd::Function's mark_dirty, torch's rebase_history), in two steps:
// split_history moves x's history (its op, inputs and backward) into a new node and returns it
// (x is then a leaf; the new node's value is a copy of x's, for its shape, and its version is
// x's, so its backward's output_value() refuses the changed value); the in-place op then makes
// its result over that node in x's place, and adopt_history gives x the result's history. Nodes
// made from x before the split keep sending their gradient to the old history (Node::input).
// split_history refuses a leaf that requires grad, naming `who`.
template <class T>
std::shared_ptr<Node<T>> split_history(Node<T>& x, const char* who);
template <class T>
void adopt_history(Node<T>& x, Node<T>& result, std::shared_ptr<Node<T>> prev);
}  // namespace detail

// torch's Variable._execution_engine.queue_callback: called from a hook during a backward, queues
// `callback` to run when that backward has finished (after every gradient and hook), in queue
// order. Throws when no backward is running on this thread. A backward that throws drops its
// queued callbacks.
void queue_backward_callback(std::function<void()> callback);

}  // namespace xgrad

namespace xgrad::autograd {

// torch.autograd.grad without create_graph: the gradients of `outputs` with respect to `inputs`,
// one per input, in order, as new tensors that do not require grad. Nothing else changes: no
// tensor's grad() is written and no post-accumulate-grad hook runs, while register_hook hooks on
// the tensors the gradient flows through (inputs included) do run. Only the part of the graph
// between the outputs and the inputs runs its backward.
//   grad_outputs: one gradient per output, of its shape ("vector-Jacobian product"); may be
//     omitted ({}) when every output has one element (each is seeded with 1).
//   retain_graph: as in backward(); without it, the part of the graph that ran is freed.
//   allow_unused: an input the outputs do not depend on gets an undefined Tensor; without it,
//     that throws.
// The gradients are not differentiable again (there is no create_graph): they are plain values.
//   auto g = xgrad::autograd::grad({loss}, {w, b});   // g[0] == dloss/dw, w.grad() untouched
std::vector<Tensor<float>> grad(const std::vector<Tensor<float>>& outputs, const std::vector<Tensor<float>>& inputs,
                                const std::vector<Array<float>>& grad_outputs = {}, bool retain_graph = false,
                                bool allow_unused = false);
std::vector<Tensor<double>> grad(const std::vector<Tensor<double>>& outputs,
                                 const std::vector<Tensor<double>>& inputs,
                                 const std::vector<Array<double>>& grad_outputs = {}, bool retain_graph = false,
                                 bool allow_unused = false);
// One output: autograd::grad(loss, {w, b}).
std::vector<Tensor<float>> grad(const Tensor<float>& output, const std::vector<Tensor<float>>& inputs,
                                const std::vector<Array<float>>& grad_outputs = {}, bool retain_graph = false,
                                bool allow_unused = false);
std::vector<Tensor<double>> grad(const Tensor<double>& output, const std::vector<Tensor<double>>& inputs,
                                 const std::vector<Array<double>>& grad_outputs = {}, bool retain_graph = false,
                                 bool allow_unused = false);

}  // namespace xgrad::autograd

namespace xgrad {

// Sums a (broadcast) gradient back to `shape`: the reverse of NumPy broadcasting.
template <class T>
Array<T> sum_to(const Array<T>& grad, const Shape& shape);
// The same, taking the gradient over (no copy) when it already has `shape`.
template <class T>
Array<T> sum_to(Array<T>&& grad, const Shape& shape);

}  // namespace xgrad
