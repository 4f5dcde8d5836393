// Building the graph: what every op calls to record its result and backward (graph.cpp), and what
// the engine runs (engine.cpp). A user's own op is easier to write as an autograd::Function (function.hpp).
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <xgrad/core/grad_mode.hpp>
#include <xgrad/core/tensor.hpp>

namespace xgrad {

// What an op's differentiable backward (its GradFormula) reads when a backward runs with
// create_graph: the gradient flowing into its result, and its inputs and result as Tensors with
// their history, so that the gradients it returns, built from differentiable ops, have a history
// too (PyTorch's derivatives.yaml formulas).
template <class T>
class BackwardArgs {
 public:
  BackwardArgs(Node<T>& node, Tensor<T> grad) : node_(node), grad_(std::move(grad)) {}
  // d(loss)/d(result), with a history when it was computed from tensors that require grad.
  const Tensor<T>& grad() const { return grad_; }
  // The i-th input as the op saw it (throws, as input_value does, if it was changed in place).
  Tensor<T> input(std::size_t i) const;
  // The op's result (throws if it was changed in place).
  Tensor<T> output() const;
  bool needs(std::size_t i) const { return node_.input_needs_grad(i); }
  Shape input_shape(std::size_t i) const { return node_.input_shape(i); }
  std::size_t num_inputs() const { return node_.inputs.size(); }
  const Node<T>& node() const { return node_; }

 private:
  Node<T>& node_;
  Tensor<T> grad_;
};

// An op's backward in differentiable ops: one gradient per input, in order (an undefined Tensor
// where !args.needs(i)), each of the input's shape. The first-order backward keeps its fused
// kernel (backward_fn); the formula runs only under create_graph, and is itself differentiated
// by the next backward.
template <class T>
using GradFormula = std::function<std::vector<Tensor<T>>(const BackwardArgs<T>&)>;

// Wraps an op's result. When grad mode is on and any input requires grad, the result records
// the inputs, the backward closure and the differentiable backward (without one, a backward with
// create_graph through this op is refused, naming it); otherwise it is a plain leaf.
template <class T>
Tensor<T> make_result(const char* op, Array<T>&& value, std::vector<Tensor<T>> inputs,
                      std::function<void(Node<T>&)> backward_fn, GradFormula<T> formula = nullptr);
// The same for a braced list of inputs, `make_result<T>(op, y, {a, b}, ...)` (no vector built).
template <class T>
Tensor<T> make_result(const char* op, Array<T>&& value, std::initializer_list<Tensor<T>> inputs,
                      std::function<void(Node<T>&)> backward_fn, GradFormula<T> formula = nullptr);

// A backward closure that evaluates `formula` on plain values, grad mode off: for an op whose
// backward is written once, in differentiable ops (the simple way where speed does not matter,
// and the backward ops of other ops, such as gelu's derivative).
template <class T>
std::function<void(Node<T>&)> backward_from_formula(GradFormula<T> formula);

// Runs reverse-mode differentiation from root with the given seed gradient.
template <class T>
void run_backward(const Tensor<T>& root, Array<T> gradient, bool retain_graph);
// The same with create_graph: the seed may have a history (gradient.requires_grad()).
template <class T>
void run_backward(const Tensor<T>& root, const Tensor<T>& gradient, bool retain_graph, bool create_graph);

// Whether the backward running on this thread has create_graph (false outside a backward).
bool is_creating_graph();

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

// Several outputs of one op (autograd::Function, add_layer_norm_with_sum): the op's node, over
// the inputs with a scalar placeholder value, runs the backward once; each output is a node over
// it that parks its gradient here (an Array, or under create_graph a Tensor with history) and
// passes the op's node a scalar zero. The op's backward takes the parked gradients (has[k]: output
// k got one) and clears `has`.
template <class T>
struct ParkedGradients {
  explicit ParkedGradients(std::size_t outputs) : grads(outputs, no_array<T>()), graphs(outputs), has(outputs) {}
  std::vector<Array<T>> grads;
  std::vector<Tensor<T>> graphs;
  std::vector<bool> has;
};
// The backward and the formula of output k's node.
template <class T>
std::pair<std::function<void(Node<T>&)>, GradFormula<T>> park_gradient(std::shared_ptr<ParkedGradients<T>> slots,
                                                                       std::size_t k) {
  auto park = [slots, k](Node<T>& node) {
    slots->grads[k] = std::move(node.grad);
    slots->has[k] = true;
    node.input(0).accumulate_grad(Array<T>(T(0)));
  };
  GradFormula<T> park_graph = [slots, k](const BackwardArgs<T>& a) {
    slots->graphs[k] = a.grad();
    slots->has[k] = true;
    return std::vector<Tensor<T>>{Tensor<T>(Array<T>(T(0)))};
  };
  return {std::move(park), std::move(park_graph)};
}
}  // namespace detail

// torch's Variable._execution_engine.queue_callback: called from a hook during a backward, queues
// `callback` to run when that backward has finished (after every gradient and hook), in queue
// order. Throws when no backward is running on this thread. A backward that throws drops its
// queued callbacks.
void queue_backward_callback(std::function<void()> callback);

}  // namespace xgrad

namespace xgrad::autograd {

// torch.autograd.grad / LibTorch's torch::autograd::grad, in LibTorch's argument order: the
// gradients of `outputs` with respect to `inputs`, one per input, in order. Nothing else changes:
// no tensor's grad() is written and no post-accumulate-grad hook runs, while register_hook hooks
// on the tensors the gradient flows through (inputs included) do run. Only the part of the graph
// between the outputs and the inputs runs its backward.
//   grad_outputs: one gradient per output, of its shape ("vector-Jacobian product"); may be
//     omitted ({}) when every output has one element (each is seeded with 1).
//   retain_graph: as in backward(); defaults to create_graph. Without it, the part of the graph
//     that ran is freed.
//   create_graph: the gradients are built from differentiable ops and have a history (when they
//     depend on something that requires grad), so they can be differentiated again: gradient
//     penalties, Hessian-vector products, MAML (docs/higher_order.md). Without it they are plain
//     values that do not require grad.
//   allow_unused: an input the outputs do not depend on gets an undefined Tensor; without it,
//     that throws.
//   auto g = xgrad::autograd::grad({loss}, {w, b});   // g[0] == dloss/dw, w.grad() untouched
//   auto gw = xgrad::autograd::grad({loss}, {w}, {}, std::nullopt, /*create_graph=*/true)[0];
//   auto hv = xgrad::autograd::grad({xgrad::sum(gw * v)}, {w})[0];   // Hessian-vector product
std::vector<Tensor<float>> grad(const std::vector<Tensor<float>>& outputs, const std::vector<Tensor<float>>& inputs,
                                const std::vector<Tensor<float>>& grad_outputs = {},
                                std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
                                bool allow_unused = false);
std::vector<Tensor<double>> grad(const std::vector<Tensor<double>>& outputs, const std::vector<Tensor<double>>& inputs,
                                 const std::vector<Tensor<double>>& grad_outputs = {},
                                 std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
                                 bool allow_unused = false);
// One output: autograd::grad(loss, {w, b}).
std::vector<Tensor<float>> grad(const Tensor<float>& output, const std::vector<Tensor<float>>& inputs,
                                const std::vector<Tensor<float>>& grad_outputs = {},
                                std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
                                bool allow_unused = false);
std::vector<Tensor<double>> grad(const Tensor<double>& output, const std::vector<Tensor<double>>& inputs,
                                 const std::vector<Tensor<double>>& grad_outputs = {},
                                 std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
                                 bool allow_unused = false);

}  // namespace xgrad::autograd
