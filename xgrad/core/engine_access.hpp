// Internal (the engine's files: graph.cpp, engine.cpp, backward_modes.hpp, grad_hooks.cpp,
// history.cpp): detail::Engine, their access to the fields of Node that only the engine uses
// (private to Node, which befriends it), and the few functions those files share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <xgrad/core/graph.hpp>
#include <xgrad/core/tensor.hpp>

namespace xgrad::detail {

// The engine's access to the fields of Node it alone uses (private to Node).
template <class T>
struct Engine {
  static bool& released(Node<T>& n) { return n.released_; }
  static std::uint64_t& visit_mark(Node<T>& n) { return n.visit_mark_; }
  static std::function<void(Node<T>&)>& backward_fn(Node<T>& n) { return n.backward_fn_; }
  static GradFormula<T>& grad_formula(Node<T>& n) { return n.grad_formula_; }
  static std::shared_ptr<Node<T>>& grad_graph(Node<T>& n) { return n.grad_graph_; }
  static xt::svector<std::uint64_t, 4>& input_versions(Node<T>& n) { return n.input_versions_; }
  static auto& grad_hooks(Node<T>& n) { return n.grad_hooks_; }
  static auto& post_accumulate_grad_hooks(Node<T>& n) { return n.post_accumulate_grad_hooks_; }
  // The node the i-th input's gradient goes to (Node::input; null for an undefined input).
  static Node<T>* edge(const Node<T>& n, std::size_t i) { return n.inputs[i] ? n.edge(i) : nullptr; }
  static const std::shared_ptr<Node<T>>& edge_handle(const Node<T>& n, std::size_t i) {
    const std::shared_ptr<Node<T>>* p = &n.inputs[i];
    if (!*p || (*p)->version == n.input_versions_[i]) return *p;
    while (*p && (*p)->rebased_from_ && n.input_versions_[i] < (*p)->rebased_at_) p = &(*p)->rebased_from_;
    return *p;
  }
  static std::shared_ptr<Node<T>>& rebased_from(Node<T>& n) { return n.rebased_from_; }
  static std::uint64_t& rebased_at(Node<T>& n) { return n.rebased_at_; }
};

template <class T>
using E = Engine<T>;  // short, for the engine's files

// The op whose backward is running on this thread (engine.cpp sets it), for the messages of
// Node::accumulate_grad (graph.cpp); null outside a node's backward.
extern thread_local const char* running_backward_op;

// What a backward says on reaching a node whose graph an earlier backward freed.
template <class T>
std::string released_message(const char* op) {
  return detail::concat("backward: trying to backward through the graph a second time (through '", op,
                        "'), or to read saved values after they were freed. Its buffers were released by the "
                        "first backward; pass retain_graph=true to the first backward() to keep them.");
}

// The sum of two gradients of one shape as a differentiable op (the engine's own: core does not
// call ops/), for the gradients a backward with create_graph accumulates (graph.cpp).
template <class T>
Tensor<T> add_gradients(const Tensor<T>& a, const Tensor<T>& b);

// Adds a gradient to dst, and under create_graph its history (engine.cpp).
template <class T>
void accumulate(Node<T>& dst, Array<T>&& g, std::shared_ptr<Node<T>> graph);

// Runs node's register_hook hooks on a gradient (grad_hooks.cpp).
template <class T>
void run_grad_hooks(Node<T>& node, Array<T>& grad, std::shared_ptr<Node<T>>& graph);
// Runs a leaf's post-accumulate-grad hooks on its gradient, if it has one (grad_hooks.cpp).
template <class T>
void run_post_accumulate_grad_hooks(Node<T>& leaf, const std::shared_ptr<Node<T>>& handle);

}  // namespace xgrad::detail
