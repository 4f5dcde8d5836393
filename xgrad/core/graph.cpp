// Building the graph (graph.hpp): make_result, which every op calls to record its result over its
// inputs with its backward closure and differentiable backward; backward_from_formula and
// BackwardArgs, the formula's view of a node; and Node's own members: its iterative destructor,
// the in-place check's message, and accumulate_grad, the one place where gradients meet.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>

#include <xgrad/backend/autocast.hpp>
#include <xgrad/backend/parallel_loops.hpp>
#include <xgrad/core/engine_access.hpp>
#include <xgrad/core/grad_mode.hpp>
#include <xgrad/core/graph.hpp>
#include <xgrad/core/node_pool.hpp>
#include <xgrad/core/profiler.hpp>
#include <xgrad/core/tensor.hpp>
#include <xgrad/core/trace.hpp>

namespace xgrad {

template <class T>
Node<T>::~Node() {
  // autocast's frozen-weight cache keeps a float leaf's bf16 copy while the leaf lives, no longer.
  if constexpr (std::is_same_v<T, float>) detail::autocast_forget(this);
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
              (detail::running_backward_op ? detail::running_backward_op : "?"), "' produced a gradient of shape ",
              g.shape(), " for an input of shape ", value.shape());
  if (is_anomaly_enabled()) {
    for (const T x : g) {
      if (!std::isfinite(x)) {
        throw std::runtime_error(detail::concat(
            "anomaly: the backward of '", (detail::running_backward_op ? detail::running_backward_op : "?"),
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
  if (is_grad_enabled() &&
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

#define XGRAD_INSTANTIATE(T)                                                                                        \
  template struct Node<T>;                                                                                          \
  template class BackwardArgs<T>;                                                                                   \
  template std::function<void(Node<T>&)> backward_from_formula<T>(GradFormula<T>);                                  \
  template Tensor<T> make_result<T>(const char*, Array<T>&&, std::vector<Tensor<T>>, std::function<void(Node<T>&)>, \
                                    GradFormula<T>);                                                                \
  template Tensor<T> make_result<T>(const char*, Array<T>&&, std::initializer_list<Tensor<T>>,                      \
                                    std::function<void(Node<T>&)>, GradFormula<T>);                                 \
  template Tensor<T> detail::add_gradients<T>(const Tensor<T>&, const Tensor<T>&);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad
