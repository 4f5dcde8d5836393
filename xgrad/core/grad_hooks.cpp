// Running a tensor's hooks during a backward: its register_hook hooks, which see the gradient
// flowing into it and may replace it (under create_graph, with its history), and a leaf's
// post-accumulate-grad hooks, which see its grad() once this backward has added to it. The
// engine (engine.cpp) and its modes (backward_modes.hpp) decide when each runs.
#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include <xgrad/base/check.hpp>
#include <xgrad/core/engine_access.hpp>
#include <xgrad/core/grad_mode.hpp>
#include <xgrad/core/graph.hpp>
#include <xgrad/core/tensor.hpp>

namespace xgrad::detail {

template <class T>
void run_post_accumulate_grad_hooks(Node<T>& leaf, const std::shared_ptr<Node<T>>& handle) {
  if (!leaf.has_grad || E<T>::post_accumulate_grad_hooks(leaf).empty()) return;
  Tensor<T> tensor(handle);
  // A copy: a hook may remove itself (or others) while they run.
  auto hooks = E<T>::post_accumulate_grad_hooks(leaf);
  for (auto& hook : hooks) hook.second(tensor);
}

namespace {
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
  Tensor<T> g = is_creating_graph() && graph ? Tensor<T>(graph) : Tensor<T>(copy_array(grad, "register_hook"));
  Tensor<T> replaced;
  {
    const GradGuard mode(is_creating_graph());
    replaced = hook(std::move(g));
  }
  if (!replaced.defined()) return;  // LibTorch: an undefined result keeps the gradient
  check_hook_result(node, replaced.value());
  grad = copy_array(replaced.value(), "register_hook");
  if (is_creating_graph()) graph = replaced.node();
}
}  // namespace

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
    XGRAD_CHECK(!is_creating_graph(), "register_hook: a hook on the Array gradient of a tensor of shape ",
                node.value.shape(), " (", node.op,
                ") replaced it during a backward with create_graph; an "
                "Array has no history and would cut the gradient's graph: expected a hook taking Tensor<T> "
                "(its result is part of the graph), or one that only looks");
    check_hook_result(node, *replaced);
    grad = std::move(*replaced);
  }
}

#define XGRAD_INSTANTIATE(T)                                                       \
  template void run_grad_hooks<T>(Node<T>&, Array<T>&, std::shared_ptr<Node<T>>&); \
  template void run_post_accumulate_grad_hooks<T>(Node<T>&, const std::shared_ptr<Node<T>>&);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad::detail
