// The history rebase of an in-place result (graph.hpp, detail::split_history and adopt_history):
// what autograd::Function's mark_dirty does to a tensor it changed in place, as torch's
// rebase_history. The nodes made from the tensor before keep their edges to its old history
// (Node::input follows rebased_from_).
#include <memory>
#include <utility>

#include <xgrad/base/check.hpp>
#include <xgrad/core/engine_access.hpp>
#include <xgrad/core/graph.hpp>
#include <xgrad/core/node_pool.hpp>
#include <xgrad/core/tensor.hpp>

namespace xgrad {

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

#define XGRAD_INSTANTIATE(T)                                                         \
  template std::shared_ptr<Node<T>> detail::split_history<T>(Node<T>&, const char*); \
  template void detail::adopt_history<T>(Node<T>&, Node<T>&, std::shared_ptr<Node<T>>);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad
