// The engine: grad mode, anomaly mode, graph construction, sum_to and backward.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <optional>
#include <unordered_map>
#include <utility>

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
// The callbacks queued (queue_backward_callback) during the backward running on this thread;
// null outside a backward. A backward started from a hook gets its own list.
thread_local std::vector<std::function<void()>>* backward_callbacks = nullptr;
// Numbers run_backward's traversals: a node is visited in pass p once its visit_mark == p.
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
void set_detect_anomaly(bool enabled) { anomaly_enabled = enabled; }

template <class T>
Node<T>::~Node() {
  detail::recycle(value, /*reset=*/false);
  detail::recycle(grad, /*reset=*/false);
  // Unlink the inputs we hold the last reference to, breadth first, instead of recursing.
  std::vector<std::shared_ptr<Node<T>>> pending = std::move(inputs);
  while (!pending.empty()) {
    std::shared_ptr<Node<T>> n = std::move(pending.back());
    pending.pop_back();
    if (n && n.use_count() == 1) {
      for (auto& in : n->inputs) pending.push_back(std::move(in));
      n->inputs.clear();
    }
  }
}

template <class T>
void Node<T>::throw_modified(std::size_t i) const {
  const bool output = i >= inputs.size();
  const Node<T>& n = output ? *this : *inputs[i];
  throw std::runtime_error(detail::concat(
      "one of the variables needed for gradient computation has been modified by an inplace operation: ", op,
      "'s ", (output ? "output" : "input "), (output ? std::string() : std::to_string(i)), " of shape ",
      n.value.shape(), " is at version ", n.version, "; expected version ",
      (output ? std::uint64_t{0} : input_versions[i]), " (it was changed through mutable_value() after ", op,
      " used it; change a copy, or call backward first)"));
}

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
  if (!has_grad) {
    grad = std::move(g);
    has_grad = true;
    return;
  }
  T* dst = grad.data();
  const T* src = g.data();
  const std::size_t n = grad.size();
  for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
  detail::recycle(g, /*reset=*/false);  // g is the caller's, about to be destroyed
}

namespace {
template <class T, class It>
Tensor<T> make_result_from(const char* op, Array<T>&& value, It first, It last,
                           std::function<void(Node<T>&)>&& backward_fn) {
  auto node = std::allocate_shared<Node<T>>(detail::NodeAllocator<Node<T>>(), std::move(value));
  node->op = op;
  if (grad_enabled &&
      std::any_of(first, last, [](const Tensor<T>& t) { return t.defined() && t.requires_grad(); })) {
    node->requires_grad = true;
    node->is_leaf = false;
    node->inputs.reserve(static_cast<std::size_t>(last - first));
    for (It t = first; t != last; ++t) {
      node->inputs.push_back(t->node());
      node->input_versions.push_back(t->defined() ? t->node()->version : 0);
    }
    node->backward_fn = std::move(backward_fn);
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
                      std::function<void(Node<T>&)> backward_fn) {
  return make_result_from<T>(op, std::move(value), inputs.begin(), inputs.end(), std::move(backward_fn));
}

template <class T>
Tensor<T> make_result(const char* op, Array<T>&& value, std::initializer_list<Tensor<T>> inputs,
                      std::function<void(Node<T>&)> backward_fn) {
  return make_result_from<T>(op, std::move(value), inputs.begin(), inputs.end(), std::move(backward_fn));
}

void queue_backward_callback(std::function<void()> callback) {
  XGRAD_CHECK(backward_callbacks != nullptr,
              "queue_backward_callback: no backward is running on this thread (call it from a hook)");
  backward_callbacks->push_back(std::move(callback));
}

namespace {
template <class T>
void run_post_accumulate_grad_hooks(const std::shared_ptr<Node<T>>& leaf) {
  if (!leaf->has_grad || leaf->post_accumulate_grad_hooks.empty()) return;
  Tensor<T> tensor(leaf);
  // A copy: a hook may remove itself (or others) while they run.
  auto hooks = leaf->post_accumulate_grad_hooks;
  for (auto& hook : hooks) hook.second(tensor);
}

// Passes `grad` through node's register_hook hooks, in registration order.
template <class T>
void run_grad_hooks(const Node<T>& node, Array<T>& grad) {
  auto hooks = node.grad_hooks;  // a copy: a hook may remove itself (or others) while they run
  for (auto& hook : hooks) {
    std::optional<Array<T>> replaced = hook.second(grad);
    if (!replaced) continue;
    XGRAD_CHECK(replaced->shape() == node.value.shape(), "register_hook: a hook on a tensor of shape ",
                node.value.shape(), " (", node.op, ") returned a gradient of shape ", replaced->shape(),
                "; expected the tensor's shape");
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
    leaf->grad = detail::no_array<T>();
    leaf->has_grad = false;
  }
  bool contains(Node<T>* leaf) const { return entries_.count(leaf) != 0; }
  // Moves this pass's gradient of `leaf` into `out` (false if it got none) and gives the leaf its
  // own gradient back.
  bool take(Node<T>* leaf, Array<T>& out) {
    auto it = entries_.find(leaf);
    const bool got = leaf->has_grad;
    if (got) out = std::move(leaf->grad);
    restore(*leaf, it->second);
    entries_.erase(it);
    return got;
  }

 private:
  struct Entry {
    Array<T> grad = detail::no_array<T>();
    bool has_grad = false;
  };
  static void restore(Node<T>& leaf, Entry& e) {
    leaf.grad = std::move(e.grad);
    leaf.has_grad = e.has_grad;
  }
  std::unordered_map<Node<T>*, Entry> entries_;
};

// autograd::grad's inputs: the gradient each one receives, instead of its grad().
template <class T>
struct Capture {
  std::unordered_map<const Node<T>*, std::size_t> slot;  // input node -> index in grads
  std::vector<Array<T>> grads;
  std::vector<bool> has;
  void add(std::size_t s, Array<T>&& g) {
    if (!has[s]) {
      grads[s] = std::move(g);
      has[s] = true;
    } else {
      grads[s] += g;
    }
  }
};

template <class T>
void run_backward_pass(const std::vector<std::shared_ptr<Node<T>>>& roots, std::vector<Array<T>> seeds,
                       bool retain_graph, Capture<T>* capture);

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

template <class T>
void run_backward(const Tensor<T>& root, Array<T> gradient, bool retain_graph) {
  const std::shared_ptr<Node<T>>& r = root.node();
  XGRAD_CHECK(r != nullptr,
              "backward: called on an undefined tensor (a default-constructed Tensor, with no value "
              "and no graph)");
  XGRAD_CHECK(r->requires_grad, "backward: the tensor does not require grad and has no graph "
              "(did it come from inputs without requires_grad, or under a NoGradGuard?)");
  with_backward_callbacks([&] {
    std::vector<Array<T>> seeds;
    seeds.push_back(std::move(gradient));
    run_backward_pass<T>({r}, std::move(seeds), retain_graph, nullptr);
  });
}

namespace {
// One pass of reverse-mode differentiation from `roots` (each requires grad) seeded with `seeds`.
// Without `capture` (backward()): gradients accumulate into the leaves' grad(). With it
// (autograd::grad): only the nodes on a path to one of the captured inputs run their backward,
// the captured inputs' gradients go to `capture`, no grad() changes and no post-accumulate-grad
// hook runs.
template <class T>
void run_backward_pass(const std::vector<std::shared_ptr<Node<T>>>& roots, std::vector<Array<T>> seeds,
                       bool retain_graph, Capture<T>* capture) {
  const profiler::detail::Range profiled("backward", profiler::Event::Kind::Range);
  // Leaf roots take their seed right away.
  for (std::size_t i = 0; i < roots.size(); ++i) {
    Node<T>& r = *roots[i];
    if (!r.is_leaf) {
      XGRAD_CHECK(!r.released, released_message<T>(r.op));
      continue;
    }
    Array<T> g = std::move(seeds[i]);
    if (capture == nullptr) {
      if (!r.grad_hooks.empty()) run_grad_hooks(r, g);
      r.accumulate_grad(std::move(g));
      run_post_accumulate_grad_hooks(roots[i]);
    } else if (auto found = capture->slot.find(&r); found != capture->slot.end()) {
      if (!r.grad_hooks.empty()) run_grad_hooks(r, g);
      capture->add(found->second, std::move(g));
    }
  }

  // Iterative depth-first post-order over the nodes that need a gradient; reversed, it is a
  // topological order (every node before its inputs). Leaves are not listed: their gradients
  // arrive through accumulate_grad.
  // Raw pointers suffice: the caller's roots keep the graph alive, and the inputs are released
  // only after the last backward, in post-order (each node before the consumers that own it).
  const std::uint64_t pass = ++backward_pass;
  std::vector<Node<T>*> order;
  std::vector<std::pair<Node<T>*, std::size_t>> stack;
  for (const auto& root : roots) {
    if (root->is_leaf || root->visit_mark == pass) continue;
    root->visit_mark = pass;
    stack.emplace_back(root.get(), 0);
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (next < node->inputs.size()) {
        Node<T>* in = node->inputs[next++].get();
        if (in && in->requires_grad && !in->is_leaf && in->visit_mark != pass) {
          XGRAD_CHECK(!in->released, released_message<T>(in->op));
          in->visit_mark = pass;
          stack.emplace_back(in, 0);
        }
      } else {
        order.push_back(node);
        stack.pop_back();
      }
    }
  }
  if (order.empty()) return;

  SetAsideGrads<T> set_aside;
  // autograd::grad: runs[k], whether the k-th node run (in reverse post-order) has an input on a
  // path to a captured input, i.e. whether its backward is needed.
  std::vector<char> runs;
  // backward(): the leaves with post-accumulate-grad hooks or register_hook hooks are complete
  // once the last node (in the order below) that feeds them has run its backward. hooks_after[k]:
  // the leaves whose last consumer is the k-th node run.
  std::vector<std::vector<std::shared_ptr<Node<T>>>> hooks_after;
  if (capture != nullptr) {
    std::unordered_map<const Node<T>*, bool> needed;  // non-leaf -> on a path to a captured input
    std::vector<char> runs_post(order.size(), 0);
    for (std::size_t i = 0; i < order.size(); ++i) {  // post-order: inputs first
      bool any = false;
      for (const auto& in : order[i]->inputs) {
        if (!in || !in->requires_grad) continue;
        any = any || (in->is_leaf ? capture->slot.count(in.get()) != 0 : needed[in.get()]);
      }
      runs_post[i] = any;
      needed[order[i]] = any || capture->slot.count(order[i]) != 0;
    }
    runs.assign(runs_post.rbegin(), runs_post.rend());
    // Every leaf a running backward can write to gets its grad() set aside.
    for (std::size_t i = 0; i < order.size(); ++i)
      if (runs_post[i])
        for (const auto& in : order[i]->inputs)
          if (in && in->is_leaf && in->requires_grad) set_aside.add(in.get());
  } else {
    std::unordered_map<const Node<T>*, std::size_t> last;  // hooked leaf -> index of its last consumer
    std::size_t k = 0;
    for (auto it = order.rbegin(); it != order.rend(); ++it, ++k)
      for (const auto& in : (*it)->inputs)
        if (in && in->is_leaf && in->requires_grad &&
            (!in->post_accumulate_grad_hooks.empty() || !in->grad_hooks.empty()))
          last[in.get()] = k;
    if (!last.empty()) {
      hooks_after.resize(order.size());
      k = 0;
      for (auto it = order.rbegin(); it != order.rend(); ++it, ++k)
        for (const auto& in : (*it)->inputs) {
          auto found = in ? last.find(in.get()) : last.end();
          if (found != last.end() && found->second == k) {
            hooks_after[k].push_back(in);
            if (!in->grad_hooks.empty()) set_aside.add(in.get());
            last.erase(found);  // listed once even if the node uses it twice
          }
        }
    }
  }

  for (std::size_t i = 0; i < roots.size(); ++i)
    if (!roots[i]->is_leaf) roots[i]->accumulate_grad(std::move(seeds[i]));
  // The backward's oneDNN calls on this thread block the asynchronous signals once, at the first
  // of them, until the pass ends (signals.hpp): a signal that arrives meanwhile is delivered then.
  const detail::AsyncSignalScope one_signal_block;
  std::size_t k = 0;
  for (auto it = order.rbegin(); it != order.rend(); ++it, ++k) {
    Node<T>& node = **it;
    const bool run = capture == nullptr || runs[k];
    if (node.has_grad) {
      if (!node.grad_hooks.empty() && (run || capture->slot.count(&node))) run_grad_hooks(node, node.grad);
      if (capture != nullptr)
        if (auto found = capture->slot.find(&node); found != capture->slot.end())
          capture->add(found->second, run ? copy_array(node.grad, "autograd::grad") : std::move(node.grad));
      if (run) {
        running_backward_op = node.op;
        try {
          const profiler::detail::Range profiled(node.op, profiler::Event::Kind::Backward);
          node.backward_fn(node);
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
      // Non-leaf gradients are not kept (as in PyTorch without retain_grad()).
      detail::recycle(node.grad);
      node.has_grad = false;
    }
    if (!retain_graph && run) {
      node.backward_fn = nullptr;  // frees what the closure saved
      node.released = true;
    }
    if (!hooks_after.empty())
      for (const auto& leaf : hooks_after[k]) {
        Array<T> g = detail::no_array<T>();
        if (set_aside.contains(leaf.get()) && set_aside.take(leaf.get(), g)) {
          run_grad_hooks(*leaf, g);
          leaf->accumulate_grad(std::move(g));
        }
        run_post_accumulate_grad_hooks(leaf);
      }
  }
  if (capture != nullptr) {
    for (const auto& [leaf, s] : capture->slot) {
      Node<T>* l = const_cast<Node<T>*>(leaf);
      Array<T> g = detail::no_array<T>();
      if (l->is_leaf && set_aside.contains(l) && set_aside.take(l, g)) {
        if (!l->grad_hooks.empty()) run_grad_hooks(*l, g);
        capture->add(s, std::move(g));
      }
    }
  }
  if (!retain_graph)
    for (Node<T>* node : order)
      if (node->released) node->inputs.clear();
}
}  // namespace

namespace {
template <class T>
std::vector<Tensor<T>> grad_of(const std::vector<Tensor<T>>& outputs, const std::vector<Tensor<T>>& inputs,
                               const std::vector<Array<T>>& grad_outputs, bool retain_graph, bool allow_unused) {
  XGRAD_CHECK(!outputs.empty(), "autograd::grad: expected at least one output, got none");
  XGRAD_CHECK(!inputs.empty(), "autograd::grad: grad requires non-empty inputs");
  XGRAD_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(),
              "autograd::grad: grad_outputs should have one gradient per output (", outputs.size(),
              "), or none for scalar outputs; got ", grad_outputs.size());
  std::vector<std::shared_ptr<Node<T>>> roots;
  std::vector<Array<T>> seeds;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const Tensor<T>& out = outputs[i];
    XGRAD_CHECK(out.defined(), "autograd::grad: output ", i, " is undefined");
    XGRAD_CHECK(out.requires_grad(), "autograd::grad: element ", i,
                " of tensors does not require grad and does not have a grad_fn");
    if (grad_outputs.empty()) {
      XGRAD_CHECK(out.numel() == 1, "autograd::grad: grad can be implicitly created only for scalar outputs; "
                  "output ", i, " has shape ", out.shape(), " (pass grad_outputs)");
      seeds.push_back(full_array<T>(out.value().shape(), T(1), "autograd::grad"));
    } else {
      XGRAD_CHECK(grad_outputs[i].shape() == out.value().shape(), "autograd::grad: Mismatch in shape: grad_output[",
                  i, "] has a shape of ", grad_outputs[i].shape(), " and output[", i, "] has a shape of ",
                  out.value().shape());
      seeds.push_back(copy_array(grad_outputs[i], "autograd::grad"));
    }
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
      capture.has.push_back(false);
    }
    slot_of[j] = it->second;
  }
  with_backward_callbacks([&] { run_backward_pass<T>(roots, std::move(seeds), retain_graph, &capture); });
  std::vector<Tensor<T>> result(inputs.size());
  for (std::size_t j = 0; j < inputs.size(); ++j) {
    const std::size_t s = slot_of[j];
    if (!capture.has[s]) {
      XGRAD_CHECK(allow_unused, "autograd::grad: One of the differentiated Tensors appears to not have been used "
                  "in the graph. Set allow_unused=True if this is the desired behavior. (input ", j,
                  " of shape ", inputs[j].shape(), ")");
      continue;
    }
    result[j] = Tensor<T>(capture.grads[s]);
  }
  return result;
}
}  // namespace

namespace autograd {
std::vector<Tensor<float>> grad(const std::vector<Tensor<float>>& outputs, const std::vector<Tensor<float>>& inputs,
                                const std::vector<Array<float>>& grad_outputs, bool retain_graph, bool allow_unused) {
  return grad_of(outputs, inputs, grad_outputs, retain_graph, allow_unused);
}
std::vector<Tensor<double>> grad(const std::vector<Tensor<double>>& outputs,
                                 const std::vector<Tensor<double>>& inputs,
                                 const std::vector<Array<double>>& grad_outputs, bool retain_graph,
                                 bool allow_unused) {
  return grad_of(outputs, inputs, grad_outputs, retain_graph, allow_unused);
}
std::vector<Tensor<float>> grad(const Tensor<float>& output, const std::vector<Tensor<float>>& inputs,
                                const std::vector<Array<float>>& grad_outputs, bool retain_graph, bool allow_unused) {
  return grad_of(std::vector<Tensor<float>>{output}, inputs, grad_outputs, retain_graph, allow_unused);
}
std::vector<Tensor<double>> grad(const Tensor<double>& output, const std::vector<Tensor<double>>& inputs,
                                 const std::vector<Array<double>>& grad_outputs, bool retain_graph,
                                 bool allow_unused) {
  return grad_of(std::vector<Tensor<double>>{output}, inputs, grad_outputs, retain_graph, allow_unused);
}
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
  if (has_shape(grad, shape)) return grad;
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
  detail::for_each_index(shape_of(grad), out_stride, [&](std::size_t i, std::size_t o) { dst[o] += src[i]; });
  return out;
}

#define XGRAD_INSTANTIATE(T)                                                                \
  template struct Node<T>;                                                                  \
  template Tensor<T> make_result<T>(const char*, Array<T>&&, std::vector<Tensor<T>>,        \
                                    std::function<void(Node<T>&)>);                         \
  template Tensor<T> make_result<T>(const char*, Array<T>&&, std::initializer_list<Tensor<T>>, \
                                    std::function<void(Node<T>&)>);                         \
  template void run_backward<T>(const Tensor<T>&, Array<T>, bool);                          \
  template Array<T> sum_to<T>(const Array<T>&, const Shape&);                               \
  template Array<T> sum_to<T>(Array<T>&&, const Shape&);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad
