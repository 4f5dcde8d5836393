#include <xgrad/core/tensor.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include <xgrad/core/node_pool.hpp>
#include <xgrad/core/factories.hpp>
#include <xgrad/core/graph.hpp>
#include <xgrad/core/trace.hpp>

namespace xgrad {

template <class T>
Tensor<T>::Tensor(Array<T> value, bool requires_grad) : node_(std::allocate_shared<Node<T>>(detail::NodeAllocator<Node<T>>(), std::move(value))) {
  node_->requires_grad = requires_grad;
}

template <class T>
Node<T>& Tensor<T>::checked() const {
  XGRAD_CHECK(node_ != nullptr, "Tensor: the tensor is undefined (default-constructed)");
  return *node_;
}

template <class T>
const Array<T>& Tensor<T>::grad() const {
  const Node<T>& n = checked();
  XGRAD_CHECK(n.has_grad, "Tensor::grad: this ", (n.is_leaf ? "leaf" : "non-leaf"), " tensor of shape ",
              shape(), " has no gradient",
              (n.requires_grad ? " yet (call backward() first)" : " (it does not require grad)"));
  return n.grad;
}

template <class T>
Array<T>& Tensor<T>::mutable_grad() {
  Array<T>& g = const_cast<Array<T>&>(grad());
  checked().grad_graph_ = nullptr;  // changed in place: its history no longer describes it
  return g;
}

template <class T>
Tensor<T> Tensor<T>::grad_tensor() const {
  const Node<T>& n = checked();
  if (!n.has_grad) return Tensor<T>();
  if (n.grad_graph_) return Tensor<T>(n.grad_graph_);
  return Tensor<T>(copy_array(n.grad, "grad_tensor"));
}

template <class T>
void Tensor<T>::set_grad(Array<T> g) {
  Node<T>& n = checked();
  XGRAD_CHECK(g.shape() == n.value.shape(), "Tensor::set_grad: expected a gradient of shape ",
              n.value.shape(), ", got ", g.shape());
  n.grad = std::move(g);
  n.has_grad = true;
  n.grad_graph_ = nullptr;
}

template <class T>
void Tensor<T>::zero_grad(bool set_to_none) {
  Node<T>& n = checked();
  n.grad_graph_ = nullptr;
  if (set_to_none) {
    detail::recycle(n.grad);
    n.has_grad = false;
  } else if (n.has_grad) {
    std::fill(n.grad.begin(), n.grad.end(), T(0));
  }
}

template <class T>
Sizes Tensor<T>::sizes() const {
  const auto& shape = value().shape();
  return Sizes(shape.begin(), shape.end());
}

template <class T>
std::int64_t Tensor<T>::size(std::int64_t d) const {
  const auto& shape = value().shape();
  return static_cast<std::int64_t>(shape[normalize_dim(d, shape.size(), "Tensor::size")]);
}

template <class T>
T Tensor<T>::item() const {
  XGRAD_CHECK(numel() == 1, "Tensor::item: expected a tensor with one element, got shape ", shape());
  if (trace::active()) trace::detail::value_read("item()", op());  // an exporter warns (onnx)
  return *value().data();
}

template <class T>
Tensor<T>& Tensor<T>::requires_grad_(bool requires_grad) {
  Node<T>& n = checked();
  XGRAD_CHECK(n.is_leaf, "requires_grad_: can only change requires_grad of a leaf tensor; this one "
              "was produced by '", n.op, "' (use detach())");
  n.requires_grad = requires_grad;
  return *this;
}

template <class T>
Tensor<T> Tensor<T>::detach() const {
  Tensor<T> result(value(), false);
  if (trace::active()) {  // exported as Identity
    trace::detail::note(OpKind::detach, {});
    trace::record_result<T>(op_name(OpKind::detach).data(), this, this + 1, result);
  }
  return result;
}

template <class T>
RemovableHandle Tensor<T>::register_post_accumulate_grad_hook(std::function<void(Tensor<T>&)> hook) {
  Node<T>& n = checked();
  XGRAD_CHECK(n.is_leaf, "register_post_accumulate_grad_hook: post accumulate grad hooks cannot be "
              "registered on non-leaf tensors (this one was produced by '", n.op, "')");
  XGRAD_CHECK(n.requires_grad, "register_post_accumulate_grad_hook: cannot register a hook on a tensor "
              "that doesn't require gradient");
  XGRAD_CHECK(static_cast<bool>(hook), "register_post_accumulate_grad_hook: the hook is empty");
  static std::atomic<std::uint64_t> next_id{0};
  const std::uint64_t id = ++next_id;
  n.post_accumulate_grad_hooks_.emplace_back(id, std::move(hook));
  std::weak_ptr<Node<T>> weak = node_;
  return RemovableHandle([weak, id] {
    if (auto node = weak.lock()) {
      auto& hooks = node->post_accumulate_grad_hooks_;
      hooks.erase(std::remove_if(hooks.begin(), hooks.end(), [id](const auto& h) { return h.first == id; }),
                  hooks.end());
    }
  });
}

template <class T>
RemovableHandle Tensor<T>::add_grad_hook(ArrayHook on_array, TensorHook on_tensor) {
  Node<T>& n = checked();
  XGRAD_CHECK(n.requires_grad, "register_hook: cannot register a hook on a tensor that doesn't require gradient "
              "(this ", (n.is_leaf ? "leaf" : "result of '"), (n.is_leaf ? "" : n.op), (n.is_leaf ? "" : "'"),
              " of shape ", n.value.shape(), " has requires_grad false)");
  XGRAD_CHECK(static_cast<bool>(on_array) != static_cast<bool>(on_tensor), "register_hook: the hook is empty");
  static std::atomic<std::uint64_t> next_id{0};
  const std::uint64_t id = ++next_id;
  n.grad_hooks_.push_back({id, std::move(on_array), std::move(on_tensor)});
  std::weak_ptr<Node<T>> weak = node_;
  return RemovableHandle([weak, id] {
    if (auto node = weak.lock()) {
      auto& hooks = node->grad_hooks_;
      hooks.erase(std::remove_if(hooks.begin(), hooks.end(), [id](const auto& h) { return h.id == id; }), hooks.end());
    }
  });
}

template <class T>
void Tensor<T>::backward(const Tensor<T>& gradient, std::optional<bool> retain_graph, bool create_graph) const {
  XGRAD_CHECK(node_ != nullptr,
              "backward: called on an undefined tensor (a default-constructed Tensor, with no "
              "value and no graph)");
  if (gradient.defined())
    XGRAD_CHECK(gradient.value().shape() == value().shape(), "backward: expected a gradient of shape ", shape(),
                ", got ", gradient.value().shape());
  else
    XGRAD_CHECK(numel() == 1, "backward: grad can be implicitly created only for scalar outputs; got shape ", shape(),
                " (pass a gradient of that shape)");
  const auto ones = [&] { return full_array<T>(value().shape(), T(1), "backward"); };
  const bool retain = retain_graph.value_or(create_graph);
  if (!create_graph)  // the seed's value alone: it needs no history
    run_backward(*this, gradient.defined() ? copy_array(gradient.value(), "backward") : ones(), retain);
  else
    run_backward(*this, gradient.defined() ? gradient : Tensor<T>(ones()), retain, true);
}

// ---- factories ----------------------------------------------------------------------------

namespace {
template <class T>
Tensor<T> filled(const char* who, const Shape& shape, T fill_value, bool requires_grad) {
  return Tensor<T>(full_array<T>(shape, fill_value, who), requires_grad);
}
}  // namespace

template <class T>
Tensor<T> zeros(const ShapeArg& shape, bool requires_grad) {
  return filled<T>("zeros", shape.get("zeros"), T(0), requires_grad);
}

template <class T>
Tensor<T> ones(const ShapeArg& shape, bool requires_grad) {
  return filled<T>("ones", shape.get("ones"), T(1), requires_grad);
}

template <class T>
Tensor<T> full(const ShapeArg& shape, T fill_value, bool requires_grad) {
  return filled<T>("full", shape.get("full"), fill_value, requires_grad);
}

template <class T>
Tensor<T> arange(T start, T end, T step, bool requires_grad) {
  XGRAD_CHECK(step != T(0), "arange: step must be nonzero");
  XGRAD_CHECK((step > 0 && end >= start) || (step < 0 && end <= start), "arange: upper bound ", end,
              " and lower bound ", start, " inconsistent with step sign ", step);
  const auto n = static_cast<std::size_t>(std::ceil(static_cast<double>(end - start) / static_cast<double>(step)));
  Array<T> a = empty_array<T>({n}, "arange");
  for (std::size_t i = 0; i < n; ++i) a(i) = start + static_cast<T>(i) * step;
  return Tensor<T>(std::move(a), requires_grad);
}

template <class T>
Tensor<T> rand(const ShapeArg& shape, Generator& generator, bool requires_grad) {
  Array<T> a = empty_array<T>(shape.get("rand"), "rand");
  std::lock_guard<std::mutex> lock(generator.mutex());
  for (auto& x : a) {
    if constexpr (std::is_same_v<T, float>) x = generator.uniform_float();
    else x = static_cast<T>(generator.uniform());
  }
  return Tensor<T>(std::move(a), requires_grad);
}

template <class T>
Tensor<T> rand(const ShapeArg& shape, bool requires_grad) {
  return rand<T>(shape, default_generator(), requires_grad);
}

template <class T>
Tensor<T> randn(const ShapeArg& shape, Generator& generator, bool requires_grad) {
  Array<T> a = empty_array<T>(shape.get("randn"), "randn");
  std::lock_guard<std::mutex> lock(generator.mutex());
  for (auto& x : a) x = static_cast<T>(generator.normal());
  return Tensor<T>(std::move(a), requires_grad);
}

template <class T>
Tensor<T> randn(const ShapeArg& shape, bool requires_grad) {
  return randn<T>(shape, default_generator(), requires_grad);
}

template <class T>
Tensor<T> from_vector(const std::vector<T>& data, const ShapeArg& sizes, bool requires_grad) {
  const Shape& shape = sizes.get("from_vector");
  const std::size_t n = checked_numel(shape, sizeof(T), "from_vector");
  XGRAD_CHECK(n == data.size(), "from_vector: shape ", shape, " holds ", n, " elements, got ", data.size(),
              " values");
  Array<T> a = empty_array<T>(shape, "from_vector");
  std::copy(data.begin(), data.end(), a.begin());
  return Tensor<T>(std::move(a), requires_grad);
}

std::size_t normalize_dim(std::int64_t dim, std::size_t ndim, const char* op) {
  const auto n = static_cast<std::int64_t>(ndim);
  XGRAD_CHECK(dim >= -n && dim < n, op, ": dimension out of range (expected to be in range of [", -n,
              ", ", n - 1, "], but got ", dim, ")");
  return static_cast<std::size_t>(dim < 0 ? dim + n : dim);
}

#define XGRAD_INSTANTIATE(T)                                      \
  template class Tensor<T>;                                       \
  template Tensor<T> zeros<T>(const ShapeArg&, bool);             \
  template Tensor<T> ones<T>(const ShapeArg&, bool);              \
  template Tensor<T> full<T>(const ShapeArg&, T, bool);           \
  template Tensor<T> arange<T>(T, T, T, bool);                    \
  template Tensor<T> rand<T>(const ShapeArg&, bool);              \
  template Tensor<T> rand<T>(const ShapeArg&, Generator&, bool);  \
  template Tensor<T> randn<T>(const ShapeArg&, bool);             \
  template Tensor<T> randn<T>(const ShapeArg&, Generator&, bool); \
  template Tensor<T> from_vector<T>(const std::vector<T>&, const ShapeArg&, bool);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad
