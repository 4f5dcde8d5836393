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
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <xgrad/backend/array.hpp>
#include <xgrad/base/check.hpp>
#include <xgrad/core/sizes.hpp>

namespace xgrad {

template <class T>
class Tensor;

namespace detail {
template <class F>
struct is_std_function : std::false_type {};
template <class S>
struct is_std_function<std::function<S>> : std::true_type {};
template <class F>
struct always_false : std::false_type {};
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

namespace detail {
// The engine's access to a Node's private fields (engine_access.hpp).
template <class T>
struct Engine;
}  // namespace detail

template <class T>
class BackwardArgs;  // graph.hpp

// One vertex of the graph: the value an op produced, the gradient flowing into it, and how to
// pass that gradient on to the op's inputs. Ops read and write the public part from their backward
// closures; the fields only the engine uses (its traversal marks, the closure, the recorded input
// versions, the hooks) are private to it (detail::Engine) and to Tensor (which registers hooks).
template <class T>
struct Node : std::enable_shared_from_this<Node<T>> {
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
  bool is_leaf = true;  // made by the user, not by an op
  // Counts in-place changes of `value` (torch's tensor._version): every Tensor::mutable_value()
  // bumps it, so optimizer steps, initializers and load_state_dict do too.
  std::uint64_t version = 0;
  const char* op = "leaf";   // the op that produced it, for error messages and to_dot
  std::vector<std::shared_ptr<Node<T>>> inputs;

  // The node the i-th input's gradient goes to: inputs[i], or, when an in-place
  // autograd::Function (ctx->mark_dirty) rebased that input's history after this node used it,
  // the history it had then (as PyTorch's edges point at the old grad_fn).
  Node<T>& input(std::size_t i) { return *edge(i); }
  // For backward closures. input_value and output_value read a value saved for the backward:
  // they throw, as PyTorch does, if it was changed in place since this node was made. An op
  // whose backward needs only shapes (add, sub, reshape, ...) reads input_shape, which never
  // throws. Code that fills a fresh result before anyone uses it may write `value` directly.
  const Array<T>& input_value(std::size_t i) const {
    if (inputs[i]->version != input_versions_[i]) throw_modified(i);
    return inputs[i]->value;
  }
  Shape input_shape(std::size_t i) const { return Shape(inputs[i]->value.shape().begin(), inputs[i]->value.shape().end()); }
  const Array<T>& output_value() const {
    if (version != 0) throw_modified(inputs.size());
    return value;
  }
  bool input_needs_grad(std::size_t i) const { return edge(i)->requires_grad; }

  // The one place where gradients meet: checks the shape, then adds (or moves in the first
  // contribution). In anomaly mode, also checks that g is finite.
  void accumulate_grad(Array<T>&& g);
  void accumulate_grad(const Array<T>& g) { accumulate_grad(Array<T>(g)); }

 private:
  friend struct detail::Engine<T>;
  friend class Tensor<T>;

  Node<T>* edge(std::size_t i) const {
    Node<T>* n = inputs[i].get();
    if (n->version == input_versions_[i]) return n;  // unchanged since: not rebased either
    while (n->rebased_from_ && input_versions_[i] < n->rebased_at_) n = n->rebased_from_.get();
    return n;
  }
  // "one of the variables needed for gradient computation has been modified by an inplace
  // operation: ..." naming this op, the input (i < inputs.size()) or the output, and both versions.
  [[noreturn]] void throw_modified(std::size_t i) const;

  bool released_ = false;         // its graph was freed by a backward without retain_graph
  std::uint64_t visit_mark_ = 0;  // the traversal's: equal to its pass number once visited
  // inputs[i]->version when this node was made: a backward that reads an input's value checks
  // it is unchanged (torch's SavedVariable), see input_value.
  xt::svector<std::uint64_t, 4> input_versions_;
  // Reads this node's grad (and value, inputs) and accumulates into the inputs' grads. It may
  // move from `grad` (the engine drops a non-leaf's gradient right after its backward).
  std::function<void(Node<T>&)> backward_fn_;
  // Leaves only: called by the engine once this leaf's gradient holds every contribution of the
  // current backward (Tensor::register_post_accumulate_grad_hook), in registration order.
  std::vector<std::pair<std::uint64_t, std::function<void(Tensor<T>&)>>> post_accumulate_grad_hooks_;
  // One Tensor::register_hook hook: `on_array` for a hook on the Array (its replacement is a plain
  // value), `on_tensor` for LibTorch's form on a Tensor, which under create_graph gets the gradient
  // with its history and whose result's history the gradient keeps (the hook is part of the graph).
  struct GradHook {
    std::uint64_t id = 0;
    std::function<std::optional<Array<T>>(const Array<T>&)> on_array;
    std::function<Tensor<T>(Tensor<T>)> on_tensor;
  };
  // The hooks, in registration order: each gets the gradient flowing into this node (its total for
  // the current backward) and may return a replacement. Empty for almost every node: the engine
  // only checks emptiness on its fast path.
  std::vector<GradHook> grad_hooks_;
  // The backward written in differentiable ops (graph.hpp, GradFormula), run instead of
  // backward_fn_ by a backward with create_graph; empty for an op that has none (such a backward
  // is refused, naming the op).
  std::function<std::vector<Tensor<T>>(const BackwardArgs<T>&)> grad_formula_;
  // During a backward with create_graph: the gradient as a tensor with its own history (its value
  // is `grad`'s). On a leaf it stays after the backward (Tensor::grad_tensor), until the gradient
  // is zeroed, set or changed in place.
  std::shared_ptr<Node<T>> grad_graph_;
  // Set by an in-place autograd::Function (mark_dirty): the history this node had before, and its
  // version from then on; nodes made from it earlier (input_versions_ below rebased_at_) send
  // their gradient there.
  std::shared_ptr<Node<T>> rebased_from_;
  std::uint64_t rebased_at_ = 0;
  // ~Node's stack of the nodes it takes apart, linked through this field so that freeing a graph
  // allocates nothing (a destructor that allocates can throw, and a throwing destructor
  // terminates the program).
  std::shared_ptr<Node<T>> next_to_free_;
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
  // The gradient as a Tensor (LibTorch's x.grad()): after a backward with create_graph=true it
  // carries that backward's graph and can be differentiated again; otherwise it is a new leaf
  // holding a copy of grad(). Undefined when there is no gradient.
  Tensor<T> grad_tensor() const;
  // Forgets the gradient (has_grad() becomes false), or zeros it when !set_to_none. The default is
  // PyTorch 2's, the same as Module::zero_grad and Optimizer::zero_grad.
  void zero_grad(bool set_to_none = true);

  // As LibTorch: sizes, dims and counts are std::int64_t. sizes() is LibTorch's, shape() Python's
  // name for the same sizes (a Sizes converts to a Shape where std::size_t sizes are needed).
  Sizes sizes() const;
  Sizes shape() const { return sizes(); }
  std::int64_t size(std::int64_t dim) const;  // negative dims count from the end
  std::int64_t dim() const { return static_cast<std::int64_t>(value().dimension()); }
  std::int64_t numel() const { return static_cast<std::int64_t>(value().size()); }
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

  // torch's Tensor.register_hook: on any tensor that requires grad (leaf or not), `hook` runs each
  // time a gradient for this tensor is computed, with that gradient, and may replace it. Two forms:
  //   x.register_hook([](Tensor<T> g) { return g * 2.0; });                 // LibTorch's: doubles it
  //   x.register_hook([](const Tensor<T>& g) { std::cout << g.value(); });  // only looks
  //   x.register_hook([](const Array<T>& g) { return Array<T>(g * 2.0); }); // on the Array
  //   x.register_hook([](const Array<T>& g) { std::cout << g; });
  // A hook taking a Tensor<T> (by value or const&) returns void or a Tensor<T> (an undefined one
  // keeps the gradient, as LibTorch). As in PyTorch it runs with grad mode set to the backward's
  // create_graph: in a plain backward it gets a leaf holding a copy of the gradient; in a backward
  // with create_graph it gets the gradient with its history, and what it returns (its history too)
  // becomes the gradient, so a hook like `g * w` is differentiated again with the rest.
  // A hook taking `const Array<T>&` returns void (keep the gradient), an Array<T> (or an
  // expression convertible to one) that replaces it, or a std::optional<Array<T>> (std::nullopt
  // keeps it); an Array has no history, so a backward with create_graph refuses its replacement.
  // Any other callable is refused by one static_assert. A replacement must have the tensor's
  // shape. On a non-leaf, the gradient is this
  // tensor's total gradient of the backward, before it flows on to its inputs; on a leaf, the sum
  // of this backward's contributions, before it is added to grad() (and before the
  // post-accumulate-grad hooks). Several hooks run in registration order, each one seeing the
  // previous one's result. autograd::grad runs them too. The same cycle rule as above applies:
  // capture no Tensor handle of this tensor in the hook.
  using ArrayHook = std::function<std::optional<Array<T>>(const Array<T>&)>;
  using TensorHook = std::function<Tensor<T>(Tensor<T>)>;
  // An empty std::function or a null function pointer is refused here (not as a
  // std::bad_function_call during a later backward).
  template <class F>
  RemovableHandle register_hook(F&& hook) {
    using D = std::decay_t<F>;
    constexpr bool on_array = std::is_invocable_v<D&, const Array<T>&>;
    constexpr bool on_tensor = !on_array && std::is_invocable_v<D&, Tensor<T>>;
    if constexpr (on_array || on_tensor) {
      if constexpr (detail::is_std_function<D>::value || std::is_pointer_v<D>)
        XGRAD_CHECK(static_cast<bool>(hook),
                    "register_hook: the hook is empty (an empty std::function or a null "
                    "function pointer); expected a callable taking const Array<T>& or Tensor<T>");
    }
    if constexpr (on_array) {
      using R = std::invoke_result_t<D&, const Array<T>&>;
      if constexpr (std::is_void_v<R>) {
        auto looks = [h = D(std::forward<F>(hook))](const Array<T>& g) mutable -> std::optional<Array<T>> {
          h(g);
          return std::nullopt;
        };
        return add_grad_hook(std::move(looks), nullptr);
      } else if constexpr (std::is_same_v<std::decay_t<R>, std::optional<Array<T>>>) {
        return add_grad_hook(ArrayHook(std::forward<F>(hook)), nullptr);
      } else if constexpr (std::is_constructible_v<Array<T>, R>) {
        auto replaces = [h = D(std::forward<F>(hook))](const Array<T>& g) mutable -> std::optional<Array<T>> {
          return Array<T>(h(g));
        };
        return add_grad_hook(std::move(replaces), nullptr);
      } else {
        static_assert(detail::always_false<F>::value,
                      "register_hook: a hook taking const Array<T>& must return "
                      "void, an Array<T> or a std::optional<Array<T>>");
        return RemovableHandle();
      }
    } else if constexpr (on_tensor) {
      using R = std::invoke_result_t<D&, Tensor<T>>;
      if constexpr (std::is_void_v<R>) {
        return add_grad_hook(nullptr, [h = D(std::forward<F>(hook))](Tensor<T> g) mutable -> Tensor<T> {
          h(std::move(g));
          return Tensor<T>();
        });
      } else if constexpr (std::is_convertible_v<R, Tensor<T>>) {
        return add_grad_hook(nullptr, [h = D(std::forward<F>(hook))](Tensor<T> g) mutable -> Tensor<T> {
          return h(std::move(g));  // undefined: LibTorch keeps the gradient
        });
      } else {
        static_assert(detail::always_false<F>::value,
                      "register_hook: a hook taking Tensor<T> must return void or a "
                      "Tensor<T>");
        return RemovableHandle();
      }
    } else {
      static_assert(detail::always_false<F>::value,
                    "register_hook: the hook must be callable with a Tensor<T> "
                    "(returning void or Tensor<T>) or a const Array<T>& (returning void, Array<T> or "
                    "std::optional<Array<T>>)");
      return RemovableHandle();
    }
  }

  // LibTorch's backward(gradient, retain_graph, create_graph), the only form. An undefined
  // gradient ({}) seeds a scalar with 1 (a non-scalar needs the gradient, a Tensor of its shape:
  // wrap an Array as Tensor<T>(array)). retain_graph defaults to create_graph, as in PyTorch:
  //   loss.backward();            // seed 1, free the graph
  //   loss.backward({}, true);    // seed 1, keep the graph for another backward
  //   y.backward(Tensor<T>(dy));  // seed dy
  // With create_graph the gradients are built from differentiable ops (they have a history:
  // grad_tensor() can be differentiated again, see docs/higher_order.md). As in PyTorch, a leaf's
  // gradient with history holds the leaf (a cycle): prefer autograd::grad, or zero_grad() the
  // leaves when done.
  void backward(const Tensor<T>& gradient = {}, std::optional<bool> retain_graph = std::nullopt,
                bool create_graph = false) const;
  // Anything else in the gradient's place (an Array, a bool meant as retain_graph) is refused at
  // compile time: backward(bool) and backward(const Array<T>&, bool) were removed, because
  // backward({}, true) chose the Array form and seeded zeros.
  template <class G, class... Rest, std::enable_if_t<!std::is_convertible_v<G&&, const Tensor<T>&>, int> = 0>
  void backward(G&&, Rest&&...) const {
    static_assert(detail::always_false<G>::value,
                  "backward: the gradient must be a Tensor<T> (wrap an Array as Tensor<T>(array)); "
                  "retain_graph is the second argument: backward({}, true)");
  }

  const std::shared_ptr<Node<T>>& node() const { return node_; }
  bool same(const Tensor& other) const { return node_ == other.node_; }

 private:
  Node<T>& checked() const;
  RemovableHandle add_grad_hook(ArrayHook on_array, TensorHook on_tensor);
  std::shared_ptr<Node<T>> node_;
};

// Normalizes a possibly negative dim against `ndim` dims (ndim + 1 for unsqueeze-like ops);
// throws naming `op` when out of range.
std::size_t normalize_dim(std::int64_t dim, std::size_t ndim, const char* op);

extern template struct Node<float>;
extern template struct Node<double>;
extern template class Tensor<float>;
extern template class Tensor<double>;

}  // namespace xgrad
