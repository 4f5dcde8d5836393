// Tensor<T>: a cheap shared handle to a node of the autograd graph. Copies alias: they share the
// value, the gradient and the place in the graph (like a Python reference to a torch.Tensor).
//
//   auto a = xgrad::randn<double>({3, 4}, /*requires_grad=*/true);
//   auto loss = xgrad::sum(a * a);
//   loss.backward();            // a.grad() == 2 * a.value()
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <xtensor/xarray.hpp>

#include <xgrad/base/check.hpp>
#include <xgrad/base/random.hpp>

namespace xgrad {

template <class T>
using Array = xt::xarray<T>;
using BoolArray = xt::xarray<bool>;
using IndexArray = xt::xarray<std::int64_t>;

template <class T>
class Tensor;

namespace detail {
// The calling thread's cache of freed Array buffers (allocator.hpp, set_array_cache): a cached
// buffer of exactly numel elements (numel > 0) taken out of the cache, or an empty Array when
// there is none. Use cached_array.
template <class T>
Array<T> take_cached(std::size_t numel);
// Hands a's buffer to the calling thread's cache (or frees it when the cache is off or full) and
// leaves `a` as no_array(); an `a` without elements is left as it is. For the places where the
// engine drops an Array it no longer needs. reset = false (an `a` about to be destroyed): `a` is
// left moved-from, or untouched when the cache did not take it.
template <class T>
void recycle(Array<T>& a, bool reset = true);
// An Array with no elements and no buffer (shape {0}): what a Node holds where it has no value
// or gradient. Unlike Array<T>() (a 0-d array of one element), it allocates nothing.
template <class T>
Array<T> no_array() {
  static const Array<T> empty(typename Array<T>::shape_type{0});  // copied: cheaper than building one
  return empty;
}
// An Array of `shape` (numel elements, uninitialized) whose buffer is a cached one when there is
// one of that size, else a new one. S: Shape or an Array's shape.
template <class T, class S>
Array<T> cached_array(const S& shape, std::size_t numel) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (numel != 0) {
      Array<T> a = take_cached<T>(numel);
      if (a.size() == numel) {
        a.resize(shape);  // the same element count: keeps the buffer
        return a;
      }
    }
  }
  return Array<T>::from_shape(shape);  // index and mask arrays are not cached
}
}  // namespace detail

// What registering a hook returns: remove() unregisters the hook (torch.utils.hooks.RemovableHandle).
// Dropping the handle keeps the hook; remove() on a handle whose tensor is gone does nothing.
class RemovableHandle {
 public:
  RemovableHandle() = default;
  explicit RemovableHandle(std::function<void()> remover) : remover_(std::move(remover)) {}
  void remove() {
    std::function<void()> r = std::move(remover_);
    remover_ = nullptr;
    if (r) r();
  }

 private:
  std::function<void()> remover_;
};

// One vertex of the graph: the value an op produced, the gradient flowing into it, and how to
// pass that gradient on to the op's inputs.
template <class T>
struct Node {
  Node() = default;
  explicit Node(Array<T>&& v) : value(std::move(v)) {}
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  // Frees the graph below iteratively, so that dropping a 100,000-op chain cannot overflow the
  // stack. Backward closures must therefore not capture Tensors: they read `inputs`.
  ~Node();

  Array<T> value = detail::no_array<T>();
  Array<T> grad = detail::no_array<T>();  // meaningful only when has_grad
  bool has_grad = false;
  bool requires_grad = false;
  bool is_leaf = true;       // made by the user, not by an op
  bool released = false;     // its graph was freed by a backward without retain_graph
  std::uint64_t visit_mark = 0;  // run_backward's traversal: equal to its pass number once visited
  // Counts in-place changes of `value` (torch's tensor._version): every Tensor::mutable_value()
  // bumps it, so optimizer steps, initializers and load_state_dict do too.
  std::uint64_t version = 0;
  const char* op = "leaf";   // the op that produced it, for error messages and to_dot
  std::vector<std::shared_ptr<Node<T>>> inputs;
  // inputs[i]->version when this node was made: a backward that reads an input's value checks
  // it is unchanged (torch's SavedVariable), see input_value.
  xt::svector<std::uint64_t, 4> input_versions;
  // Reads this node's grad (and value, inputs) and accumulates into the inputs' grads. It may
  // move from `grad` (the engine drops a non-leaf's gradient right after its backward).
  std::function<void(Node<T>&)> backward_fn;
  // Leaves only: called by run_backward once this leaf's gradient holds every contribution of the
  // current backward (Tensor::register_post_accumulate_grad_hook), in registration order.
  std::vector<std::pair<std::uint64_t, std::function<void(Tensor<T>&)>>> post_accumulate_grad_hooks;

  Node<T>& input(std::size_t i) { return *inputs[i]; }
  // For backward closures. input_value and output_value read a value saved for the backward:
  // they throw, as PyTorch does, if it was changed in place since this node was made. An op
  // whose backward needs only shapes (add, sub, reshape, ...) reads input_shape, which never
  // throws. Code that fills a fresh result before anyone uses it may write `value` directly.
  const Array<T>& input_value(std::size_t i) const {
    if (inputs[i]->version != input_versions[i]) throw_modified(i);
    return inputs[i]->value;
  }
  Shape input_shape(std::size_t i) const { return Shape(inputs[i]->value.shape().begin(), inputs[i]->value.shape().end()); }
  const Array<T>& output_value() const {
    if (version != 0) throw_modified(inputs.size());
    return value;
  }
  bool input_needs_grad(std::size_t i) const { return inputs[i]->requires_grad; }

  // The one place where gradients meet: checks the shape, then adds (or moves in the first
  // contribution). In anomaly mode, also checks that g is finite.
  void accumulate_grad(Array<T>&& g);
  void accumulate_grad(const Array<T>& g) { accumulate_grad(Array<T>(g)); }

 private:
  // "one of the variables needed for gradient computation has been modified by an inplace
  // operation: ..." naming this op, the input (i < inputs.size()) or the output, and both versions.
  [[noreturn]] void throw_modified(std::size_t i) const;
};

template <class T = float>
class Tensor {
 public:
  Tensor() = default;  // an undefined tensor (like an empty c10::optional)
  explicit Tensor(Array<T> value, bool requires_grad = false);
  explicit Tensor(std::shared_ptr<Node<T>> node) : node_(std::move(node)) {}

  bool defined() const { return node_ != nullptr; }

  const Array<T>& value() const { return checked().value; }
  // In-place access for optimizers and initializers (as torch's `with no_grad(): p.copy_(...)`).
  // Each call bumps version(): a backward that needs the old value then throws instead of
  // computing a wrong gradient. Write through the reference right away; do not keep it.
  Array<T>& mutable_value() {
    Node<T>& n = checked();
    ++n.version;
    return n.value;
  }
  // How many times mutable_value() was called (torch's tensor._version).
  std::uint64_t version() const { return checked().version; }

  bool has_grad() const { return checked().has_grad; }
  // The accumulated gradient; throws if backward() has not reached this tensor.
  const Array<T>& grad() const;
  Array<T>& mutable_grad();
  void set_grad(Array<T> g);
  // Zeros the gradient, or forgets it when set_to_none (PyTorch's default for optimizers).
  void zero_grad(bool set_to_none = false);

  Shape shape() const;
  std::size_t size(int dim) const;   // negative dims count from the end
  std::size_t dim() const { return value().dimension(); }
  std::size_t numel() const { return value().size(); }
  T item() const;

  bool requires_grad() const { return checked().requires_grad; }
  Tensor& requires_grad_(bool requires_grad = true);  // only on leaves
  bool is_leaf() const { return checked().is_leaf; }
  const char* op() const { return checked().op; }

  // A new leaf sharing nothing with the graph (the value is copied).
  Tensor detach() const;

  // torch's Tensor.register_post_accumulate_grad_hook: on a leaf that requires grad, `hook` runs
  // once per backward that reaches this tensor, after its gradient has received every
  // contribution of that backward (so grad() is complete), with this tensor as its argument.
  // Leaves complete in reverse-topological order (the gradients of the layers nearest the loss
  // first), which is what DistributedDataParallel uses to start its all-reduces early. The hook
  // is kept by the tensor: capture no Tensor handle of it in the hook (that would be a cycle);
  // use the argument.
  RemovableHandle register_post_accumulate_grad_hook(std::function<void(Tensor<T>&)> hook);

  // backward() on a scalar seeds its gradient with 1; a non-scalar needs the gradient.
  void backward(bool retain_graph = false) const;
  void backward(const Array<T>& gradient, bool retain_graph = false) const;

  const std::shared_ptr<Node<T>>& node() const { return node_; }
  bool same(const Tensor& other) const { return node_ == other.node_; }

 private:
  Node<T>& checked() const;
  std::shared_ptr<Node<T>> node_;
};

// ---- grad mode and anomaly mode ----------------------------------------------------------

bool is_grad_enabled();
void set_grad_enabled(bool enabled);

// torch.no_grad(): no graph is built while one is alive.
class NoGradGuard {
 public:
  NoGradGuard() : previous_(is_grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

bool is_anomaly_enabled();
void set_detect_anomaly(bool enabled);

// torch.autograd.detect_anomaly(): a NaN or Inf produced in backward throws an error naming
// the op whose backward produced it.
class DetectAnomalyGuard {
 public:
  DetectAnomalyGuard() : previous_(is_anomaly_enabled()) { set_detect_anomaly(true); }
  ~DetectAnomalyGuard() { set_detect_anomaly(previous_); }
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool previous_;
};

// ---- building the graph ------------------------------------------------------------------

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

// ---- factories ---------------------------------------------------------------------------

template <class T = float>
Tensor<T> zeros(const Shape& shape, bool requires_grad = false);
template <class T = float>
Tensor<T> ones(const Shape& shape, bool requires_grad = false);
template <class T = float>
Tensor<T> full(const Shape& shape, T fill_value, bool requires_grad = false);
// [start, end) in steps of step, like torch.arange.
template <class T = float>
Tensor<T> arange(T start, T end, T step = T(1), bool requires_grad = false);
template <class T = float>
Tensor<T> arange(T end) { return arange<T>(T(0), end); }
// Uniform on [0, 1).
template <class T = float>
Tensor<T> rand(const Shape& shape, bool requires_grad = false);
template <class T = float>
Tensor<T> rand(const Shape& shape, Generator& generator, bool requires_grad = false);
// Standard normal.
template <class T = float>
Tensor<T> randn(const Shape& shape, bool requires_grad = false);
template <class T = float>
Tensor<T> randn(const Shape& shape, Generator& generator, bool requires_grad = false);
// Row-major data with its shape; the sizes must agree.
template <class T = float>
Tensor<T> from_vector(const std::vector<T>& data, const Shape& shape, bool requires_grad = false);

// An Array<T> of the given shape (uninitialized), from_shape spelled for std::vector shapes,
// reusing a buffer from the thread's array cache when one of that size is free (float, double).
// The shape is checked first (checked_numel): an error names `who`.
// When the memory cannot be had it throws OutOfMemoryError (a std::bad_alloc) naming `who`, the
// shape and the bytes.
template <class T>
Array<T> empty_array(const Shape& shape, const char* who = "allocating a tensor") {
  const std::size_t numel = checked_numel(shape, sizeof(T), who);
  try {
    return detail::cached_array<T>(shape, numel);
  } catch (const std::bad_alloc&) {
    throw OutOfMemoryError(who, shape, numel * sizeof(T));
  }
}

template <class E>
Shape shape_of(const E& array) {
  return Shape(array.shape().begin(), array.shape().end());
}

// Normalizes a possibly negative dim against `ndim` dims (ndim + 1 for unsqueeze-like ops);
// throws naming `op` when out of range.
std::size_t normalize_dim(int dim, std::size_t ndim, const char* op);

extern template Array<float> detail::take_cached<float>(std::size_t);
extern template Array<double> detail::take_cached<double>(std::size_t);
extern template void detail::recycle<float>(Array<float>&, bool);
extern template void detail::recycle<double>(Array<double>&, bool);
extern template struct Node<float>;
extern template struct Node<double>;
extern template class Tensor<float>;
extern template class Tensor<double>;

}  // namespace xgrad
