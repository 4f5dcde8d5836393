// The engine: reverse-mode differentiation as one traversal (post_order, traverse) and two modes
// (backward_modes.hpp: Accumulate for backward(), Capture for autograd::grad). Each node's
// backward runs once all its consumers have given it their gradient: its array closure, or under
// create_graph its differentiable backward (run_node_formula), every gradient then carrying its
// history. Also queue_backward_callback, run after a backward.
#include <algorithm>
#include <atomic>
#include <exception>
#include <optional>
#include <unordered_map>
#include <utility>

#include <xgrad/backend/signals.hpp>
#include <xgrad/core/backward_modes.hpp>
#include <xgrad/core/engine_access.hpp>
#include <xgrad/core/grad_mode.hpp>
#include <xgrad/core/graph.hpp>
#include <xgrad/core/profiler.hpp>
#include <xgrad/core/tensor.hpp>

namespace xgrad {

namespace detail {
thread_local const char* running_backward_op = nullptr;  // for the messages of accumulate_grad
}  // namespace detail

namespace {
// Whether the backward running on this thread has create_graph.
thread_local bool creating_graph = false;
// The callbacks queued (queue_backward_callback) during the backward running on this thread;
// null outside a backward. A backward started from a hook gets its own list.
thread_local std::vector<std::function<void()>>* backward_callbacks = nullptr;
// Numbers the traversals: a node is visited in pass p once its visit mark == p.
std::atomic<std::uint64_t> backward_pass{0};

using detail::Accumulate;
using detail::accumulate;
using detail::Capture;
using detail::E;
using detail::released_message;
using detail::run_grad_hooks;
using detail::running_backward_op;
}  // namespace

bool is_creating_graph() { return creating_graph; }

void queue_backward_callback(std::function<void()> callback) {
  XGRAD_CHECK(backward_callbacks != nullptr,
              "queue_backward_callback: no backward is running on this thread (call it from a hook)");
  backward_callbacks->push_back(std::move(callback));
}

namespace {
// Installs a callback list for the backward `pass` runs, runs it, then the callbacks (which may
// queue more). The outer list comes back even when something throws.
template <class F>
void with_backward_callbacks(F&& pass) {
  std::vector<std::function<void()>> callbacks;
  std::vector<std::function<void()>>* outer = backward_callbacks;
  backward_callbacks = &callbacks;
  try {
    pass();
    for (std::size_t i = 0; i < callbacks.size(); ++i) {
      std::function<void()> callback = std::move(callbacks[i]);
      callback();
    }
  } catch (...) {
    backward_callbacks = outer;
    throw;
  }
  backward_callbacks = outer;
}
}  // namespace

namespace detail {
// Adds a gradient to dst: g alone, or, under create_graph, g with its history `graph` (g is a copy
// of graph's value), which the sum keeps.
template <class T>
void accumulate(Node<T>& dst, Array<T>&& g, std::shared_ptr<Node<T>> graph) {
  if (!graph) {
    dst.accumulate_grad(std::move(g));
    return;
  }
  std::shared_ptr<Node<T>> old = std::move(E<T>::grad_graph(dst));
  E<T>::grad_graph(dst) = nullptr;
  const bool had = dst.has_grad;
  Tensor<T> before = old ? Tensor<T>(old) : had ? Tensor<T>(copy_array(dst.grad, "accumulate_grad")) : Tensor<T>();
  dst.accumulate_grad(std::move(g));  // the value, checked
  const GradGuard enabled(true);
  E<T>::grad_graph(dst) = had ? detail::add_gradients(before, Tensor<T>(graph)).node() : std::move(graph);
}
}  // namespace detail

namespace {
// Under create_graph: runs node's differentiable backward (its GradFormula) on its gradient with
// history, and accumulates what it returns, history included, into the inputs.
template <class T>
void run_node_formula(Node<T>& node) {
  const GradFormula<T>& formula = E<T>::grad_formula(node);
  XGRAD_CHECK(static_cast<bool>(formula), "backward with create_graph: '", node.op,
              "' does not support double backward (its backward is not written in differentiable ops), so its "
              "gradient cannot be differentiated again; expected only ops with a differentiable backward "
              "between the outputs and the inputs (docs/higher_order.md lists them)");
  std::shared_ptr<Node<T>> graph = E<T>::grad_graph(node);
  Tensor<T> g = graph ? Tensor<T>(graph) : Tensor<T>(copy_array(node.grad, "backward"));
  std::vector<Tensor<T>> grads;
  {
    const GradGuard enabled(true);
    grads = formula(BackwardArgs<T>(node, std::move(g)));
  }
  XGRAD_CHECK(grads.size() == node.inputs.size(), "backward with create_graph: the differentiable backward of '",
              node.op, "' returned ", grads.size(), " gradients for ", node.inputs.size(), " inputs");
  for (std::size_t i = 0; i < grads.size(); ++i) {
    Node<T>* in = E<T>::edge(node, i);
    if (!grads[i].defined() || !in || !in->requires_grad) continue;
    accumulate(*in, copy_array(grads[i].value(), "backward"), grads[i].node());
  }
}

// Runs one node's backward closure (or, under create_graph, its differentiable backward), naming
// its op in what it throws.
template <class T>
void run_node_backward(Node<T>& node) {
  running_backward_op = node.op;
  try {
    const profiler::detail::Range profiled(node.op, profiler::Event::Kind::Backward);
    if (creating_graph)
      run_node_formula(node);
    else
      E<T>::backward_fn(node)(node);
  } catch (const OutOfMemoryError&) {  // from empty_array: names the op, the shape, the bytes
    running_backward_op = nullptr;
    throw;
  } catch (const std::bad_alloc&) {  // from elsewhere (a temporary, a custom Function): name the op
    running_backward_op = nullptr;
    throw OutOfMemoryError(detail::concat("the backward of '", node.op, "'"),
                           detail::concat("(an allocation failed while computing the gradients for its "
                                          "output of shape ",
                                          node.value.shape(), ")"));
  } catch (...) {
    running_backward_op = nullptr;
    throw;
  }
  running_backward_op = nullptr;
}

// The non-leaf nodes below `roots` that need a gradient, in post-order of a depth-first walk
// (iterative): reversed, a topological order (every node before its inputs). Leaves are not
// listed: their gradients arrive through accumulate_grad. Raw pointers suffice: the caller's roots
// keep the graph alive, and the inputs are released only after the last backward.
template <class T>
std::vector<Node<T>*> post_order(const std::vector<std::shared_ptr<Node<T>>>& roots) {
  const std::uint64_t pass = ++backward_pass;
  std::vector<Node<T>*> order;
  std::vector<std::pair<Node<T>*, std::size_t>> stack;
  for (const auto& root : roots) {
    if (root->is_leaf || E<T>::visit_mark(*root) == pass) continue;
    E<T>::visit_mark(*root) = pass;
    stack.emplace_back(root.get(), 0);
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (next < node->inputs.size()) {
        Node<T>* in = E<T>::edge(*node, next++);
        if (in && in->requires_grad && !in->is_leaf && E<T>::visit_mark(*in) != pass) {
          XGRAD_CHECK(!E<T>::released(*in), released_message<T>(in->op));
          E<T>::visit_mark(*in) = pass;
          stack.emplace_back(in, 0);
        }
      } else {
        order.push_back(node);
        stack.pop_back();
      }
    }
  }
  return order;
}

// The one traversal of both modes: reverse-mode differentiation from `roots` (each requires grad)
// seeded with `seeds`, each node's backward run once all its consumers have given it their
// gradient. What becomes of the gradient that reaches a leaf or a requested input, and which
// nodes run, is the mode's (Accumulate for backward(), Capture for autograd::grad):
//   mode.at_root_leaf(leaf, handle, g)  a root that is a leaf gets its seed g
//   mode.plan(order)         the nodes below the roots, in post-order, before any backward runs
//   mode.runs(k)             whether the k-th node to run (reverse post-order) runs its backward
//   mode.requested(node)     whether a non-leaf node's own gradient is wanted (its hooks then run
//                            even when its backward does not)
//   mode.at_node(node, run)  a non-leaf's total gradient, after its hooks, before its backward
//   mode.after(k)            after the k-th node (leaves it was the last to feed are complete)
//   mode.finish()            after the last node
// create_graph changes what a backward computes with, not this walk or the modes: each node runs
// its differentiable backward (run_node_formula), and every gradient carries its history beside
// its value (Node's grad_graph_; `seed_graphs` holds the seeds', empty without create_graph).
template <class T, class Mode>
void traverse(const std::vector<std::shared_ptr<Node<T>>>& roots, std::vector<Array<T>> seeds,
              std::vector<std::shared_ptr<Node<T>>> seed_graphs, bool retain_graph, Mode& mode) {
  const profiler::detail::Range profiled("backward", profiler::Event::Kind::Range);
  struct CreatingGraph {  // this thread's create_graph flag, for this pass (a hook may start another)
    bool previous = creating_graph;
    explicit CreatingGraph(bool on) { creating_graph = on; }
    ~CreatingGraph() { creating_graph = previous; }
  } const creating(!seed_graphs.empty());
  const auto seed_graph = [&](std::size_t i) { return seed_graphs.empty() ? nullptr : std::move(seed_graphs[i]); };
  for (std::size_t i = 0; i < roots.size(); ++i) {
    Node<T>& r = *roots[i];
    if (r.is_leaf)
      mode.at_root_leaf(r, roots[i], std::move(seeds[i]), seed_graph(i));
    else
      XGRAD_CHECK(!E<T>::released(r), released_message<T>(r.op));
  }
  const std::vector<Node<T>*> order = post_order(roots);
  if (order.empty()) return;
  mode.plan(order);
  for (std::size_t i = 0; i < roots.size(); ++i)
    if (!roots[i]->is_leaf) accumulate(*roots[i], std::move(seeds[i]), seed_graph(i));
  // The backward's oneDNN calls on this thread block the asynchronous signals once, at the first
  // of them, until the pass ends (signals.hpp): a signal that arrives meanwhile is delivered then.
  const detail::AsyncSignalScope one_signal_block;
  // A backward that throws leaves no gradient on the non-leaf nodes: under create_graph a node's
  // gradient graph may hold its consumer's output, which holds the node (a cycle, never freed).
  struct DropPartialGradients {
    const std::vector<Node<T>*>& order;
    const int exceptions = std::uncaught_exceptions();
    ~DropPartialGradients() {
      if (std::uncaught_exceptions() <= exceptions) return;
      for (Node<T>* node : order) {
        E<T>::grad_graph(*node) = nullptr;
        detail::recycle(node->grad);
        node->has_grad = false;
      }
    }
  } const drop_partial{order, std::uncaught_exceptions()};
  std::size_t k = 0;
  for (auto it = order.rbegin(); it != order.rend(); ++it, ++k) {
    Node<T>& node = **it;
    const bool run = mode.runs(k);
    if (node.has_grad) {
      if (!E<T>::grad_hooks(node).empty() && (run || mode.requested(node)))
        run_grad_hooks(node, node.grad, E<T>::grad_graph(node));
      mode.at_node(node, run);
      if (run) run_node_backward(node);
      // Non-leaf gradients are not kept (as in PyTorch without retain_grad()).
      detail::recycle(node.grad);
      node.has_grad = false;
      E<T>::grad_graph(node) = nullptr;
    }
    if (!retain_graph && run) {
      E<T>::backward_fn(node) = nullptr;  // frees what the closure saved
      E<T>::grad_formula(node) = nullptr;
      E<T>::released(node) = true;
    }
    mode.after(k);
  }
  mode.finish();
  if (!retain_graph)
    for (Node<T>* node : order)
      if (E<T>::released(*node)) node->inputs.clear();
}
}  // namespace

namespace {
template <class T>
const std::shared_ptr<Node<T>>& checked_root(const Tensor<T>& root) {
  const std::shared_ptr<Node<T>>& r = root.node();
  XGRAD_CHECK(r != nullptr,
              "backward: called on an undefined tensor (a default-constructed Tensor, with no value "
              "and no graph)");
  XGRAD_CHECK(r->requires_grad,
              "backward: the tensor does not require grad and has no graph "
              "(did it come from inputs without requires_grad, or under a NoGradGuard?)");
  return r;
}
}  // namespace

template <class T>
void run_backward(const Tensor<T>& root, Array<T> gradient, bool retain_graph) {
  const std::shared_ptr<Node<T>>& r = checked_root(root);
  Accumulate<T> accumulate;
  with_backward_callbacks([&] {
    std::vector<Array<T>> seeds;
    seeds.push_back(std::move(gradient));
    traverse<T>({r}, std::move(seeds), {}, retain_graph, accumulate);
  });
}

template <class T>
void run_backward(const Tensor<T>& root, const Tensor<T>& gradient, bool retain_graph, bool create_graph) {
  if (!create_graph) return run_backward(root, copy_array(gradient.value(), "backward"), retain_graph);
  const std::shared_ptr<Node<T>>& r = checked_root(root);
  Accumulate<T> accumulate;
  with_backward_callbacks([&] {
    std::vector<Array<T>> seeds;
    seeds.push_back(copy_array(gradient.value(), "backward"));
    traverse<T>({r}, std::move(seeds), {gradient.node()}, retain_graph, accumulate);
  });
}

namespace {
template <class T>
std::vector<Tensor<T>> grad_of(const std::vector<Tensor<T>>& outputs, const std::vector<Tensor<T>>& inputs,
                               const std::vector<Tensor<T>>& grad_outputs, std::optional<bool> retain,
                               bool create_graph, bool allow_unused) {
  XGRAD_CHECK(!outputs.empty(), "autograd::grad: expected at least one output, got none");
  XGRAD_CHECK(!inputs.empty(), "autograd::grad: grad requires non-empty inputs");
  XGRAD_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(),
              "autograd::grad: grad_outputs should have one gradient per output (", outputs.size(),
              "), or none for scalar outputs; got ", grad_outputs.size());
  const bool retain_graph = retain.value_or(create_graph);
  std::vector<std::shared_ptr<Node<T>>> roots;
  std::vector<Array<T>> seeds;
  std::vector<std::shared_ptr<Node<T>>> seed_graphs;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const Tensor<T>& out = outputs[i];
    XGRAD_CHECK(out.defined(), "autograd::grad: output ", i, " is undefined");
    XGRAD_CHECK(out.requires_grad(), "autograd::grad: element ", i,
                " of tensors does not require grad and does not have a grad_fn");
    Tensor<T> seed;
    if (grad_outputs.empty() || !grad_outputs[i].defined()) {
      XGRAD_CHECK(out.numel() == 1, "autograd::grad: grad can be implicitly created only for scalar outputs; "
                  "output ", i, " has shape ", out.shape(), " (pass grad_outputs)");
      seed = Tensor<T>(full_array<T>(out.value().shape(), T(1), "autograd::grad"));
    } else {
      XGRAD_CHECK(grad_outputs[i].value().shape() == out.value().shape(),
                  "autograd::grad: Mismatch in shape: "
                  "grad_output[",
                  i, "] has a shape of ", grad_outputs[i].value().shape(), " and output[", i, "] has a shape of ",
                  out.value().shape());
      seed = grad_outputs[i];
    }
    seeds.push_back(copy_array(seed.value(), "autograd::grad"));
    if (create_graph) seed_graphs.push_back(seed.node());
    roots.push_back(out.node());
  }
  Capture<T> capture;
  std::vector<std::size_t> slot_of(inputs.size());
  for (std::size_t j = 0; j < inputs.size(); ++j) {
    XGRAD_CHECK(inputs[j].defined(), "autograd::grad: input ", j, " is undefined");
    XGRAD_CHECK(inputs[j].requires_grad(), "autograd::grad: One of the differentiated Tensors does not require "
                "grad (input ", j, " of shape ", inputs[j].shape(), ")");
    auto [it, fresh] = capture.slot.emplace(inputs[j].node().get(), capture.grads.size());
    if (fresh) {
      capture.grads.push_back(detail::no_array<T>());
      capture.graphs.push_back(nullptr);
      capture.has.push_back(false);
    }
    slot_of[j] = it->second;
  }
  with_backward_callbacks([&] { traverse<T>(roots, std::move(seeds), std::move(seed_graphs), retain_graph, capture); });
  std::vector<Tensor<T>> result(inputs.size());
  for (std::size_t j = 0; j < inputs.size(); ++j) {
    const std::size_t s = slot_of[j];
    if (!capture.has[s]) {
      XGRAD_CHECK(allow_unused, "autograd::grad: One of the differentiated Tensors appears to not have been used "
                  "in the graph. Set allow_unused=True if this is the desired behavior. (input ", j,
                  " of shape ", inputs[j].shape(), ")");
      continue;
    }
    // An input listed twice gets the same gradient (under create_graph, the same tensor).
    if (create_graph && capture.graphs[s])
      result[j] = Tensor<T>(capture.graphs[s]);
    else
      result[j] = Tensor<T>(capture.grads[s]);
  }
  return result;
}
}  // namespace

namespace autograd {
#define XGRAD_GRAD(T)                                                                                               \
  std::vector<Tensor<T>> grad(const std::vector<Tensor<T>>& outputs, const std::vector<Tensor<T>>& inputs,          \
                              const std::vector<Tensor<T>>& grad_outputs, std::optional<bool> retain_graph,         \
                              bool create_graph, bool allow_unused) {                                               \
    return grad_of(outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused);                        \
  }                                                                                                                 \
  std::vector<Tensor<T>> grad(const Tensor<T>& output, const std::vector<Tensor<T>>& inputs,                        \
                              const std::vector<Tensor<T>>& grad_outputs, std::optional<bool> retain_graph,         \
                              bool create_graph, bool allow_unused) {                                               \
    return grad_of(std::vector<Tensor<T>>{output}, inputs, grad_outputs, retain_graph, create_graph, allow_unused); \
  }
XGRAD_GRAD(float)
XGRAD_GRAD(double)
#undef XGRAD_GRAD
}  // namespace autograd

#define XGRAD_INSTANTIATE(T)                                                     \
  template void run_backward<T>(const Tensor<T>&, Array<T>, bool);               \
  template void run_backward<T>(const Tensor<T>&, const Tensor<T>&, bool, bool); \
  template void detail::accumulate<T>(Node<T>&, Array<T>&&, std::shared_ptr<Node<T>>);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad
