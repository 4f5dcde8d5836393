// The engine: grad mode, anomaly mode, graph construction, sum_to and backward.
#include <algorithm>
#include <exception>
#include <atomic>
#include <cmath>
#include <optional>
#include <unordered_map>
#include <utility>

#include <xgrad/backend/parallel_loops.hpp>
#include <xgrad/backend/signals.hpp>
#include <xgrad/backend/strided.hpp>
#include <xgrad/core/node_pool.hpp>
#include <xgrad/core/tensor.hpp>
#include <xgrad/core/grad_mode.hpp>
#include <xgrad/core/graph.hpp>
#include <xgrad/core/profiler.hpp>
#include <xgrad/core/trace.hpp>

namespace xgrad {

namespace {
thread_local bool grad_enabled = true;
thread_local bool anomaly_enabled = false;
thread_local const char* running_backward_op = nullptr;  // for anomaly messages
// Whether the backward running on this thread has create_graph.
thread_local bool creating_graph = false;
// The callbacks queued (queue_backward_callback) during the backward running on this thread;
// null outside a backward. A backward started from a hook gets its own list.
thread_local std::vector<std::function<void()>>* backward_callbacks = nullptr;
// Numbers the traversals: a node is visited in pass p once its visit mark == p.
std::atomic<std::uint64_t> backward_pass{0};

template <class T>
std::string released_message(const char* op) {
  return detail::concat(
      "backward: trying to backward through the graph a second time (through '", op,
      "'), or to read saved values after they were freed. Its buffers were released by the "
      "first backward; pass retain_graph=true to the first backward() to keep them.");
}
}  // namespace

bool is_grad_enabled() { return grad_enabled; }
void set_grad_enabled(bool enabled) { grad_enabled = enabled; }
bool is_anomaly_enabled() { return anomaly_enabled; }
bool is_creating_graph() { return creating_graph; }
void set_detect_anomaly(bool enabled) { anomaly_enabled = enabled; }

namespace detail {
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
}  // namespace detail

template <class T>
Node<T>::~Node() {
  detail::recycle(value, /*reset=*/false);
  detail::recycle(grad, /*reset=*/false);
  // Take apart the nodes below that this one holds the last reference to, iteratively instead of
  // recursively (a 100,000-op chain would overflow the stack), and without allocating: they wait
  // on a stack linked through their own next_to_free_ field. Each popped node has no inputs left,
  // so its own destructor finds nothing to do.
  std::shared_ptr<Node<T>> stack;
  const auto release = [&stack](std::shared_ptr<Node<T>>& edge) {
    std::shared_ptr<Node<T>> n = std::move(edge);
    if (n && n.use_count() == 1) {  // an input listed twice is pushed once: the first release drops a count
      n->next_to_free_ = std::move(stack);
      stack = std::move(n);
    }
  };
  const auto release_all = [&release](Node<T>& n) {
    for (auto it = n.inputs.rbegin(); it != n.inputs.rend(); ++it) release(*it);
    n.inputs.clear();
    release(n.rebased_from_);
    release(n.grad_graph_);
  };
  release_all(*this);
  while (stack) {
    std::shared_ptr<Node<T>> n = std::move(stack);
    stack = std::move(n->next_to_free_);
    release_all(*n);
  }
}

template <class T>
void Node<T>::throw_modified(std::size_t i) const {
  const bool output = i >= inputs.size();
  const Node<T>& n = output ? *this : *inputs[i];
  throw std::runtime_error(detail::concat(
      "one of the variables needed for gradient computation has been modified by an inplace operation: ", op, "'s ",
      (output ? "output" : "input "), (output ? std::string() : std::to_string(i)), " of shape ", n.value.shape(),
      " is at version ", n.version, "; expected version ", (output ? std::uint64_t{0} : input_versions_[i]),
      " (it was changed through mutable_value() after ", op, " used it; change a copy, or call backward first)"));
}

namespace detail {
// The sum of two gradients of one shape as a differentiable op (the engine's own: core does not
// call ops/), for the gradients a backward with create_graph accumulates.
template <class T>
Tensor<T> add_gradients(const Tensor<T>& a, const Tensor<T>& b) {
  Array<T> sum = copy_array(a.value(), "add (accumulating gradients)");
  sum += b.value();
  const auto both = [](Node<T>& out) {
    for (std::size_t i = 0; i < 2; ++i)
      if (out.input_needs_grad(i)) out.input(i).accumulate_grad(copy_array(out.grad, "add"));
  };
  const GradFormula<T> formula = [](const BackwardArgs<T>& args) {
    return std::vector<Tensor<T>>{args.grad(), args.grad()};
  };
  return make_result<T>("add", std::move(sum), {a, b}, both, formula);
}
}  // namespace detail

template <class T>
void Node<T>::accumulate_grad(Array<T>&& g) {
  XGRAD_CHECK(g.shape() == value.shape(), "autograd: the backward of '",
              (running_backward_op ? running_backward_op : "?"), "' produced a gradient of shape ",
              g.shape(), " for an input of shape ", value.shape());
  if (anomaly_enabled) {
    for (const T x : g) {
      if (!std::isfinite(x)) {
        throw std::runtime_error(detail::concat(
            "anomaly: the backward of '", (running_backward_op ? running_backward_op : "?"),
            "' returned ", (std::isnan(x) ? "nan" : "inf"), " values in the gradient of an input of shape ",
            value.shape(), " (produced by '", op, "')"));
      }
    }
  }
  if (grad_graph_) {  // a gradient with history (create_graph) gets a constant added: it keeps it
    const GradGuard enabled(true);
    grad_graph_ = detail::add_gradients(Tensor<T>(grad_graph_), Tensor<T>(copy_array(g, "accumulate_grad"))).node();
  }
  if (!has_grad) {
    grad = std::move(g);
    has_grad = true;
    return;
  }
  T* dst = grad.data();
  const T* src = g.data();
  detail::parallel_blocks(grad.size(), [&](std::size_t i0, std::size_t i1) {  // serial below 64K elements
    for (std::size_t i = i0; i < i1; ++i) dst[i] += src[i];
  });
  detail::recycle(g, /*reset=*/false);  // g is the caller's, about to be destroyed
}

namespace {
template <class T, class It>
Tensor<T> make_result_from(const char* op, Array<T>&& value, It first, It last,
                           std::function<void(Node<T>&)>&& backward_fn, GradFormula<T>&& formula) {
  auto node = std::allocate_shared<Node<T>>(detail::NodeAllocator<Node<T>>(), std::move(value));
  node->op = op;
  if (grad_enabled &&
      std::any_of(first, last, [](const Tensor<T>& t) { return t.defined() && t.requires_grad(); })) {
    node->requires_grad = true;
    node->is_leaf = false;
    node->inputs.reserve(static_cast<std::size_t>(last - first));
    for (It t = first; t != last; ++t) {
      node->inputs.push_back(t->node());
      detail::Engine<T>::input_versions(*node).push_back(t->defined() ? t->node()->version : 0);
    }
    detail::Engine<T>::backward_fn(*node) = std::move(backward_fn);
    detail::Engine<T>::grad_formula(*node) = std::move(formula);
  }
  Tensor<T> result(std::move(node));
  if (trace::active()) trace::record_result<T>(op, first, last, result);
  if (profiler::detail::on() && profiler::detail::wants_shapes()) {
    std::vector<std::vector<std::int64_t>> shapes;
    for (It t = first; t != last; ++t) {
      const Shape shape = t->defined() ? t->shape() : Shape();
      shapes.emplace_back(shape.begin(), shape.end());
    }
    profiler::detail::set_input_shapes(std::move(shapes));
  }
  return result;
}
}  // namespace

template <class T>
Tensor<T> make_result(const char* op, Array<T>&& value, std::vector<Tensor<T>> inputs,
                      std::function<void(Node<T>&)> backward_fn, GradFormula<T> formula) {
  return make_result_from<T>(op, std::move(value), inputs.begin(), inputs.end(), std::move(backward_fn),
                             std::move(formula));
}

template <class T>
Tensor<T> make_result(const char* op, Array<T>&& value, std::initializer_list<Tensor<T>> inputs,
                      std::function<void(Node<T>&)> backward_fn, GradFormula<T> formula) {
  return make_result_from<T>(op, std::move(value), inputs.begin(), inputs.end(), std::move(backward_fn),
                             std::move(formula));
}

template <class T>
std::function<void(Node<T>&)> backward_from_formula(GradFormula<T> formula) {
  return [formula = std::move(formula)](Node<T>& out) {
    const NoGradGuard no_grad;
    std::vector<Tensor<T>> grads = formula(BackwardArgs<T>(out, Tensor<T>(std::move(out.grad))));
    for (std::size_t i = 0; i < grads.size() && i < out.inputs.size(); ++i)
      if (grads[i].defined() && out.input_needs_grad(i)) out.input(i).accumulate_grad(Array<T>(grads[i].value()));
  };
}

template <class T>
Tensor<T> BackwardArgs<T>::input(std::size_t i) const {
  (void)node_.input_value(i);  // throws if it changed in place since
  return Tensor<T>(detail::Engine<T>::edge_handle(node_, i));
}

template <class T>
Tensor<T> BackwardArgs<T>::output() const {
  (void)node_.output_value();
  return Tensor<T>(node_.shared_from_this());
}

void queue_backward_callback(std::function<void()> callback) {
  XGRAD_CHECK(backward_callbacks != nullptr,
              "queue_backward_callback: no backward is running on this thread (call it from a hook)");
  backward_callbacks->push_back(std::move(callback));
}

namespace {
template <class T>
using E = detail::Engine<T>;

template <class T>
void run_post_accumulate_grad_hooks(Node<T>& leaf, const std::shared_ptr<Node<T>>& handle) {
  if (!leaf.has_grad || E<T>::post_accumulate_grad_hooks(leaf).empty()) return;
  Tensor<T> tensor(handle);
  // A copy: a hook may remove itself (or others) while they run.
  auto hooks = E<T>::post_accumulate_grad_hooks(leaf);
  for (auto& hook : hooks) hook.second(tensor);
}

// A replacement gradient from a register_hook hook must have the tensor's shape.
template <class T>
void check_hook_result(const Node<T>& node, const Array<T>& replaced) {
  XGRAD_CHECK(replaced.shape() == node.value.shape(), "register_hook: a hook on a tensor of shape ", node.value.shape(),
              " (", node.op, ") returned a gradient of shape ", replaced.shape(), "; expected the tensor's shape");
}

// A hook on the Tensor (LibTorch's form) runs with grad mode set to create_graph, as in PyTorch:
// under create_graph it gets the gradient with its history `graph`, and what it returns replaces
// both, so the hook's computation is part of the gradient's graph.
template <class T>
void run_tensor_hook(Node<T>& node, const std::function<Tensor<T>(Tensor<T>)>& hook, Array<T>& grad,
                     std::shared_ptr<Node<T>>& graph) {
  Tensor<T> g = creating_graph && graph ? Tensor<T>(graph) : Tensor<T>(copy_array(grad, "register_hook"));
  Tensor<T> replaced;
  {
    const GradGuard mode(creating_graph);
    replaced = hook(std::move(g));
  }
  if (!replaced.defined()) return;  // LibTorch: an undefined result keeps the gradient
  check_hook_result(node, replaced.value());
  grad = copy_array(replaced.value(), "register_hook");
  if (creating_graph) graph = replaced.node();
}

// Passes `grad` (and under create_graph `graph`, its history) through node's register_hook hooks,
// in registration order.
template <class T>
void run_grad_hooks(Node<T>& node, Array<T>& grad, std::shared_ptr<Node<T>>& graph) {
  auto hooks = E<T>::grad_hooks(node);  // a copy: a hook may remove itself (or others) while they run
  for (auto& hook : hooks) {
    if (hook.on_tensor) {
      run_tensor_hook(node, hook.on_tensor, grad, graph);
      continue;
    }
    std::optional<Array<T>> replaced = hook.on_array(grad);
    if (!replaced) continue;
    XGRAD_CHECK(!creating_graph, "register_hook: a hook on the Array gradient of a tensor of shape ",
                node.value.shape(), " (", node.op,
                ") replaced it during a backward with create_graph; an "
                "Array has no history and would cut the gradient's graph: expected a hook taking Tensor<T> "
                "(its result is part of the graph), or one that only looks");
    check_hook_result(node, *replaced);
    grad = std::move(*replaced);
  }
}

// Leaves whose grad() is set aside while a pass collects that pass's contributions alone in its
// place: for a leaf's register_hook hooks (they see this backward's sum, not the accumulated
// grad()), and for autograd::grad, which must leave every grad() as it was. Whatever is still set
// aside when this goes away (a backward that threw) gets its old grad() back.
template <class T>
class SetAsideGrads {
 public:
  SetAsideGrads() = default;
  SetAsideGrads(const SetAsideGrads&) = delete;
  SetAsideGrads& operator=(const SetAsideGrads&) = delete;
  ~SetAsideGrads() {
    for (auto& [leaf, entry] : entries_) restore(*leaf, entry);
  }
  void add(Node<T>* leaf) {
    if (entries_.count(leaf)) return;
    Entry& e = entries_[leaf];
    e.grad = std::move(leaf->grad);
    e.has_grad = leaf->has_grad;
    e.graph = std::move(E<T>::grad_graph(*leaf));
    E<T>::grad_graph(*leaf) = nullptr;
    leaf->grad = detail::no_array<T>();
    leaf->has_grad = false;
  }
  bool contains(Node<T>* leaf) const { return entries_.count(leaf) != 0; }
  // Moves this pass's gradient of `leaf` into `out` (and its history, under create_graph, into
  // `graph`; false if it got none) and gives the leaf its own gradient back.
  bool take(Node<T>* leaf, Array<T>& out, std::shared_ptr<Node<T>>& graph) {
    auto it = entries_.find(leaf);
    const bool got = leaf->has_grad;
    if (got) out = std::move(leaf->grad);
    graph = std::move(E<T>::grad_graph(*leaf));
    restore(*leaf, it->second);
    entries_.erase(it);
    return got;
  }

 private:
  struct Entry {
    Array<T> grad = detail::no_array<T>();
    bool has_grad = false;
    std::shared_ptr<Node<T>> graph;
  };
  static void restore(Node<T>& leaf, Entry& e) {
    leaf.grad = std::move(e.grad);
    leaf.has_grad = e.has_grad;
    E<T>::grad_graph(leaf) = std::move(e.graph);
  }
  std::unordered_map<Node<T>*, Entry> entries_;
};

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

// backward(): every node runs; gradients accumulate into the leaves' grad(). A leaf with hooks is
// complete once the last node that feeds it has run: its register_hook hooks then see this
// backward's sum (its grad() is set aside until then), and its post-accumulate-grad hooks run.
template <class T>
class Accumulate {
 public:
  void at_root_leaf(Node<T>& leaf, const std::shared_ptr<Node<T>>& handle, Array<T>&& g,
                    std::shared_ptr<Node<T>> graph) {
    if (!E<T>::grad_hooks(leaf).empty()) run_grad_hooks(leaf, g, graph);
    accumulate(leaf, std::move(g), std::move(graph));
    run_post_accumulate_grad_hooks(leaf, handle);
  }
  void plan(const std::vector<Node<T>*>& order) {
    std::unordered_map<const Node<T>*, std::size_t> last;  // hooked leaf -> index of its last consumer
    std::size_t k = 0;
    for (auto it = order.rbegin(); it != order.rend(); ++it, ++k)
      for (std::size_t i = 0; i < (*it)->inputs.size(); ++i)
        if (Node<T>* in = E<T>::edge(**it, i); in && in->is_leaf && in->requires_grad && hooked(*in)) last[in] = k;
    if (last.empty()) return;
    hooks_after_.resize(order.size());
    k = 0;
    for (auto it = order.rbegin(); it != order.rend(); ++it, ++k)
      for (std::size_t i = 0; i < (*it)->inputs.size(); ++i) {
        const std::shared_ptr<Node<T>>& in = E<T>::edge_handle(**it, i);
        auto found = in ? last.find(in.get()) : last.end();
        if (found != last.end() && found->second == k) {
          hooks_after_[k].push_back(in);
          if (!E<T>::grad_hooks(*in).empty()) set_aside_.add(in.get());
          last.erase(found);  // listed once even if the node uses it twice
        }
      }
  }
  bool runs(std::size_t) const { return true; }
  bool requested(const Node<T>&) const { return false; }
  void at_node(Node<T>&, bool) {}
  void after(std::size_t k) {
    if (hooks_after_.empty()) return;
    for (const auto& leaf : hooks_after_[k]) {
      Array<T> g = detail::no_array<T>();
      std::shared_ptr<Node<T>> graph;
      if (set_aside_.contains(leaf.get()) && set_aside_.take(leaf.get(), g, graph)) {
        run_grad_hooks(*leaf, g, graph);
        accumulate(*leaf, std::move(g), std::move(graph));
      }
      run_post_accumulate_grad_hooks(*leaf, leaf);
    }
  }
  void finish() {}

 private:
  static bool hooked(Node<T>& leaf) {
    return !E<T>::post_accumulate_grad_hooks(leaf).empty() || !E<T>::grad_hooks(leaf).empty();
  }

  std::vector<std::vector<std::shared_ptr<Node<T>>>> hooks_after_;  // [k]: the hooked leaves the k-th node completes
  SetAsideGrads<T> set_aside_;
};

// autograd::grad: only the nodes on a path to a requested input run their backward; the requested
// inputs' gradients go to grads (one slot per distinct input), no grad() changes and no
// post-accumulate-grad hook runs.
template <class T>
class Capture {
 public:
  std::unordered_map<const Node<T>*, std::size_t> slot;  // requested input -> index in grads
  std::vector<Array<T>> grads;
  std::vector<std::shared_ptr<Node<T>>> graphs;  // under create_graph: each gradient's history
  std::vector<bool> has;

  void at_root_leaf(Node<T>& leaf, const std::shared_ptr<Node<T>>&, Array<T>&& g, std::shared_ptr<Node<T>> graph) {
    auto found = slot.find(&leaf);
    if (found == slot.end()) return;
    if (!E<T>::grad_hooks(leaf).empty()) run_grad_hooks(leaf, g, graph);
    add(found->second, std::move(g), std::move(graph));
  }
  void plan(const std::vector<Node<T>*>& order) {
    std::unordered_map<const Node<T>*, bool> needed;  // non-leaf -> on a path to a requested input
    std::vector<char> runs_post(order.size(), 0);
    for (std::size_t i = 0; i < order.size(); ++i) {  // post-order: inputs first
      bool any = false;
      for (std::size_t j = 0; j < order[i]->inputs.size(); ++j) {
        const Node<T>* in = E<T>::edge(*order[i], j);
        if (!in || !in->requires_grad) continue;
        any = any || (in->is_leaf ? slot.count(in) != 0 : needed[in]);
      }
      runs_post[i] = any;
      needed[order[i]] = any || slot.count(order[i]) != 0;
    }
    runs_.assign(runs_post.rbegin(), runs_post.rend());
    // Every leaf a running backward can write to gets its grad() set aside.
    for (std::size_t i = 0; i < order.size(); ++i)
      if (runs_post[i])
        for (std::size_t j = 0; j < order[i]->inputs.size(); ++j)
          if (Node<T>* in = E<T>::edge(*order[i], j); in && in->is_leaf && in->requires_grad) set_aside_.add(in);
  }
  bool runs(std::size_t k) const { return runs_[k] != 0; }
  bool requested(const Node<T>& node) const { return slot.count(&node) != 0; }
  void at_node(Node<T>& node, bool run) {
    if (auto found = slot.find(&node); found != slot.end())
      add(found->second, run ? copy_array(node.grad, "autograd::grad") : std::move(node.grad), E<T>::grad_graph(node));
  }
  void after(std::size_t) {}
  void finish() {
    for (const auto& [leaf, s] : slot) {
      Node<T>* l = const_cast<Node<T>*>(leaf);
      Array<T> g = detail::no_array<T>();
      std::shared_ptr<Node<T>> graph;
      if (l->is_leaf && set_aside_.contains(l) && set_aside_.take(l, g, graph)) {
        if (!E<T>::grad_hooks(*l).empty()) run_grad_hooks(*l, g, graph);
        add(s, std::move(g), std::move(graph));
      }
    }
  }

 private:
  void add(std::size_t s, Array<T>&& g, std::shared_ptr<Node<T>> graph) {
    if (graph && graphs[s]) {
      const GradGuard enabled(true);
      graphs[s] = detail::add_gradients(Tensor<T>(graphs[s]), Tensor<T>(graph)).node();
    } else if (graph) {
      graphs[s] = std::move(graph);
    }
    if (!has[s]) {
      grads[s] = std::move(g);
      has[s] = true;
    } else {
      grads[s] += g;
    }
  }
  std::vector<char> runs_;  // [k]: whether the k-th node to run has an input on a path to a requested one
  SetAsideGrads<T> set_aside_;
};
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

namespace detail {
template <class T>
std::shared_ptr<Node<T>> split_history(Node<T>& x, const char* who) {
  XGRAD_CHECK(!(x.is_leaf && x.requires_grad), who,
              ": a leaf Variable that requires grad is being used in an in-place operation "
              "(ctx->mark_dirty on a leaf that requires grad; modify a copy, or work under a NoGradGuard)");
  XGRAD_CHECK(!E<T>::released(x), released_message<T>(x.op));
  auto prev =
      std::allocate_shared<Node<T>>(NodeAllocator<Node<T>>(), copy_array(x.value, "mark_dirty (the history's shape)"));
  prev->requires_grad = x.requires_grad;
  prev->is_leaf = x.is_leaf;
  prev->op = x.op;
  prev->inputs = std::move(x.inputs);
  x.inputs.clear();
  // Its value was changed in place: its backward's output_value() refuses it.
  prev->version = x.version;
  E<T>::input_versions(*prev) = std::move(E<T>::input_versions(x));
  E<T>::input_versions(x).clear();
  E<T>::backward_fn(*prev) = std::move(E<T>::backward_fn(x));
  E<T>::backward_fn(x) = nullptr;
  E<T>::grad_formula(*prev) = std::move(E<T>::grad_formula(x));
  E<T>::grad_formula(x) = nullptr;
  E<T>::rebased_from(*prev) = std::move(E<T>::rebased_from(x));
  E<T>::rebased_at(*prev) = E<T>::rebased_at(x);
  return prev;
}

template <class T>
void adopt_history(Node<T>& x, Node<T>& result, std::shared_ptr<Node<T>> prev) {
  x.requires_grad = result.requires_grad;
  x.is_leaf = result.is_leaf;
  x.op = result.op;
  x.inputs = std::move(result.inputs);
  result.inputs.clear();
  E<T>::input_versions(x) = std::move(E<T>::input_versions(result));
  E<T>::backward_fn(x) = std::move(E<T>::backward_fn(result));
  E<T>::grad_formula(x) = std::move(E<T>::grad_formula(result));
  E<T>::rebased_from(x) = std::move(prev);
  E<T>::rebased_at(x) = x.version;
}
}  // namespace detail

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

namespace {
template <class T>
bool has_shape(const Array<T>& a, const Shape& shape) {
  return a.dimension() == shape.size() && std::equal(shape.begin(), shape.end(), a.shape().begin());
}
}  // namespace

template <class T>
Array<T> sum_to(Array<T>&& grad, const Shape& shape) {
  if (has_shape(grad, shape)) return std::move(grad);
  return sum_to(static_cast<const Array<T>&>(grad), shape);
}

template <class T>
Array<T> sum_to(const Array<T>& grad, const Shape& shape) {
  const std::size_t gd = grad.dimension();
  const std::size_t sd = shape.size();
  if (has_shape(grad, shape)) return copy_array(grad, "sum_to");  // from the array cache, on the pool
  XGRAD_CHECK(gd >= sd, "sum_to: cannot sum a gradient of shape ", grad.shape(), " to shape ", shape);
  // Output stride of each grad dim: 0 where the target broadcast (absent or 1), else the
  // target's row-major stride.
  std::vector<std::size_t> out_stride(gd, 0);
  std::size_t stride = 1;
  for (std::size_t k = 0; k < sd; ++k) {
    const std::size_t d = sd - 1 - k;        // target dim
    const std::size_t g = gd - 1 - k;        // grad dim
    const std::size_t gs = grad.shape()[g];
    XGRAD_CHECK(shape[d] == gs || shape[d] == 1, "sum_to: cannot sum a gradient of shape ", grad.shape(),
                " to shape ", shape);
    if (shape[d] == gs) out_stride[g] = stride;
    stride *= shape[d];
  }
  Array<T> out = full_array<T>(shape, T(0), "sum_to (a broadcast operand's gradient)");
  T* dst = out.data();
  const T* src = grad.data();
  // Split by output (rows x column blocks of the kept dims), each output summing its elements in
  // row-major order as the serial walk: the same result at any thread count (parallel_loops.hpp).
  detail::parallel_reduce_visit(shape_of(grad), out_stride, [&](std::size_t i, std::size_t o) { dst[o] += src[i]; });
  return out;
}

#define XGRAD_INSTANTIATE(T)                                                                                        \
  template struct Node<T>;                                                                                          \
  template class BackwardArgs<T>;                                                                                   \
  template std::function<void(Node<T>&)> backward_from_formula<T>(GradFormula<T>);                                  \
  template Tensor<T> make_result<T>(const char*, Array<T>&&, std::vector<Tensor<T>>, std::function<void(Node<T>&)>, \
                                    GradFormula<T>);                                                                \
  template Tensor<T> make_result<T>(const char*, Array<T>&&, std::initializer_list<Tensor<T>>,                      \
                                    std::function<void(Node<T>&)>, GradFormula<T>);                                 \
  template void run_backward<T>(const Tensor<T>&, Array<T>, bool);                                                  \
  template void run_backward<T>(const Tensor<T>&, const Tensor<T>&, bool, bool);                                    \
  template std::shared_ptr<Node<T>> detail::split_history<T>(Node<T>&, const char*);                                \
  template void detail::adopt_history<T>(Node<T>&, Node<T>&, std::shared_ptr<Node<T>>);                             \
  template Array<T> sum_to<T>(const Array<T>&, const Shape&);                                                       \
  template Array<T> sum_to<T>(Array<T>&&, const Shape&);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad
