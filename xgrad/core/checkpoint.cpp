// Activation checkpointing (checkpoint.hpp): a discovery forward, one node over the inputs and
// the leaves it found, and a backward that recomputes and calls autograd::grad.
#include <xgrad/core/checkpoint.hpp>

#include <algorithm>
#include <memory>
#include <unordered_set>
#include <utility>

#include <xgrad/base/check.hpp>
#include <xgrad/base/random.hpp>
#include <xgrad/core/grad_mode.hpp>
#include <xgrad/core/graph.hpp>

namespace xgrad::utils {

namespace {

// What the backward needs to run the function again: the function, the generator's state before
// the forward, and the outputs' shapes (to check the recompute gives the same outputs).
template <class T>
struct Recipe {
  CheckpointFunction<T> function;
  std::size_t num_inputs = 0;
  std::vector<Shape> shapes;
  bool preserve_rng_state = true;
  GeneratorState rng;
};

// Sets the default generator to the forward's state for the recompute, and back to where it was
// when the recompute ends (or throws): the backward draws no number as far as the rest can see.
class ReplayRng {
 public:
  ReplayRng(bool on, const GeneratorState& state) : on_(on) {
    if (!on_) return;
    now_ = default_generator().get_state();
    default_generator().set_state(state);
  }
  ~ReplayRng() {
    if (on_) default_generator().set_state(now_);
  }
  ReplayRng(const ReplayRng&) = delete;
  ReplayRng& operator=(const ReplayRng&) = delete;

 private:
  bool on_;
  GeneratorState now_;
};

// function(inputs), checked: at least one output, each defined.
template <class T>
std::vector<Tensor<T>> call(const CheckpointFunction<T>& function, const std::vector<Tensor<T>>& inputs,
                            const char* who) {
  std::vector<Tensor<T>> outs = function(inputs);
  XGRAD_CHECK(!outs.empty(), who, ": the function returned no tensor; expected at least one output");
  for (std::size_t k = 0; k < outs.size(); ++k)
    XGRAD_CHECK(outs[k].defined(), who, ": output ", k, " of ", outs.size(),
                " returned by the function is undefined; expected a defined tensor");
  return outs;
}

// The leaves that require grad below `outputs` in the graph the function made, not below the
// inputs (the walk stops there), each once, in the order found.
template <class T>
std::vector<Tensor<T>> leaves_requiring_grad(const std::vector<Tensor<T>>& outputs,
                                             const std::vector<Tensor<T>>& inputs) {
  std::unordered_set<const Node<T>*> seen;
  for (const auto& in : inputs) seen.insert(in.node().get());
  std::vector<Node<T>*> stack;
  for (const auto& out : outputs)
    if (out.requires_grad()) stack.push_back(out.node().get());
  std::vector<Tensor<T>> leaves;
  while (!stack.empty()) {
    Node<T>* node = stack.back();
    stack.pop_back();
    if (!seen.insert(node).second) continue;
    if (node->is_leaf) {
      leaves.emplace_back(node->shared_from_this());
      continue;
    }
    for (std::size_t i = 0; i < node->inputs.size(); ++i)
      if (node->input_needs_grad(i)) stack.push_back(&node->input(i));
  }
  return leaves;
}

// A tensor's value, moved out when nothing else holds its node (an output of the discovery
// forward, whose graph is dropped next; a gradient autograd::grad returned), copied otherwise (an
// input or a parameter returned as it is).
template <class T>
Array<T> take_value(Tensor<T>& t) {
  if (t.node().use_count() == 1) return std::move(t.node()->value);
  return Array<T>(t.value());
}

// Runs the function again (the forward's random state replayed, grad mode on) and returns the
// gradients of its outputs `which` (seeded with `grads`) with respect to `targets`, undefined
// where a target is not reached.
template <class T>
std::vector<Tensor<T>> recompute_gradients(const Recipe<T>& recipe, const std::vector<Tensor<T>>& inputs,
                                           const std::vector<Tensor<T>>& targets, const std::vector<std::size_t>& which,
                                           const std::vector<Tensor<T>>& grads, bool create_graph) {
  static const char* who = "checkpoint (backward's recompute)";
  std::vector<Tensor<T>> outs;
  {
    const ReplayRng replay(recipe.preserve_rng_state, recipe.rng);
    const GradGuard grad_on(true);
    outs = call(recipe.function, inputs, who);
  }
  XGRAD_CHECK(outs.size() == recipe.shapes.size(), who, ": the function returned ", outs.size(),
              " tensors; the forward returned ", recipe.shapes.size(), " (expected the same outputs)");
  std::vector<Tensor<T>> roots;
  for (std::size_t k : which) {
    XGRAD_CHECK(Shape(outs[k].shape()) == recipe.shapes[k], who, ": output ", k, " has shape ", Shape(outs[k].shape()),
                "; in the forward it had ", recipe.shapes[k]);
    XGRAD_CHECK(outs[k].requires_grad(), who, ": output ", k,
                " does not require grad, though it did in the forward (is the function deterministic?)");
    roots.push_back(outs[k]);
  }
  return autograd::grad(roots, targets, grads, /*retain_graph=*/create_graph, create_graph, /*allow_unused=*/true);
}

// The outputs that got a gradient (parked by their nodes): their indices and gradients, taken
// from the slots (as Tensors with history under create_graph).
template <class T>
std::pair<std::vector<std::size_t>, std::vector<Tensor<T>>> take_parked(::xgrad::detail::ParkedGradients<T>& slots,
                                                                        bool graphs) {
  std::vector<std::size_t> which;
  std::vector<Tensor<T>> grads;
  for (std::size_t k = 0; k < slots.has.size(); ++k) {
    if (!slots.has[k]) continue;
    which.push_back(k);
    grads.push_back(graphs ? std::move(slots.graphs[k]) : Tensor<T>(std::move(slots.grads[k])));
    slots.graphs[k] = Tensor<T>();
    slots.has[k] = false;
  }
  return {std::move(which), std::move(grads)};
}

// The first-order backward: the inputs that need a gradient are copied into new leaves (so the
// recompute's graph stops there), the others are used as they are; the gradients of the inputs
// and leaves are accumulated.
template <class T>
void checkpoint_backward(const Recipe<T>& recipe, ::xgrad::detail::ParkedGradients<T>& slots, Node<T>& node) {
  auto [which, grads] = take_parked(slots, /*graphs=*/false);
  if (which.empty()) return;
  std::vector<Tensor<T>> inputs, targets;
  std::vector<std::size_t> target_of;
  for (std::size_t i = 0; i < node.inputs.size(); ++i) {
    const Array<T>& value = node.input_value(i);  // throws if changed in place since the forward
    const bool needs = node.input_needs_grad(i);
    Tensor<T> as_is(node.input(i).shared_from_this());
    if (i < recipe.num_inputs) inputs.push_back(needs ? Tensor<T>(Array<T>(value), true) : as_is);
    if (!needs) continue;
    targets.push_back(i < recipe.num_inputs ? inputs.back() : as_is);
    target_of.push_back(i);
  }
  if (targets.empty()) return;
  std::vector<Tensor<T>> g = recompute_gradients(recipe, inputs, targets, which, grads, /*create_graph=*/false);
  for (std::size_t j = 0; j < g.size(); ++j)
    if (g[j].defined()) node.input(target_of[j]).accumulate_grad(take_value(g[j]));
}

// The backward under create_graph: the recompute starts from the inputs with their history and
// the gradients keep theirs, so the next backward differentiates through the recomputed graph.
template <class T>
std::vector<Tensor<T>> checkpoint_formula(const Recipe<T>& recipe, ::xgrad::detail::ParkedGradients<T>& slots,
                                          const BackwardArgs<T>& a) {
  auto [which, grads] = take_parked(slots, /*graphs=*/true);
  std::vector<Tensor<T>> result(a.num_inputs()), inputs, targets;
  std::vector<std::size_t> target_of;
  for (std::size_t i = 0; i < a.num_inputs(); ++i) {
    if (i < recipe.num_inputs) inputs.push_back(a.input(i));
    if (!a.needs(i)) continue;
    targets.push_back(i < recipe.num_inputs ? inputs.back() : a.input(i));
    target_of.push_back(i);
  }
  if (which.empty() || targets.empty()) return result;
  std::vector<Tensor<T>> g = recompute_gradients(recipe, inputs, targets, which, grads, /*create_graph=*/true);
  for (std::size_t j = 0; j < g.size(); ++j)
    result[target_of[j]] =
        g[j].defined() ? g[j] : Tensor<T>(full_array<T>(a.input_shape(target_of[j]), T(0), "checkpoint"));
  return result;
}

}  // namespace

template <class T>
std::vector<Tensor<T>> checkpoint(const typename detail::identity<CheckpointFunction<T>>::type& function,
                                  const std::vector<Tensor<T>>& inputs, const CheckpointOptions& options) {
  XGRAD_CHECK(static_cast<bool>(function), "checkpoint: the function is empty; expected a callable");
  for (std::size_t i = 0; i < inputs.size(); ++i)
    XGRAD_CHECK(inputs[i].defined(), "checkpoint: input ", i, " of ", inputs.size(),
                " is undefined; expected a defined tensor (capture the arguments that are not tensors "
                "in the function)");
  if (!is_grad_enabled()) return call(function, inputs, "checkpoint");
  auto recipe = std::make_shared<Recipe<T>>();
  recipe->function = function;
  recipe->num_inputs = inputs.size();
  recipe->preserve_rng_state = options.preserve_rng_state();
  if (recipe->preserve_rng_state) recipe->rng = default_generator().get_state();
  // The discovery forward: its graph lives until the end of this function.
  std::vector<Tensor<T>> outs = call(function, inputs, "checkpoint");
  std::vector<Tensor<T>> over = inputs;
  for (auto& leaf : leaves_requiring_grad(outs, inputs)) over.push_back(std::move(leaf));
  std::vector<bool> differentiable;
  for (const auto& o : outs) {
    differentiable.push_back(o.requires_grad());
    recipe->shapes.emplace_back(o.shape());
  }
  if (std::find(differentiable.begin(), differentiable.end(), true) == differentiable.end()) return outs;
  std::vector<Array<T>> values;
  for (auto& o : outs) values.push_back(take_value(o));
  outs.clear();  // drops the discovery graph: what the backward needs it recomputes
  auto slots = std::make_shared<::xgrad::detail::ParkedGradients<T>>(values.size());
  Tensor<T> fn = make_result<T>(
      "CheckpointBackward", Array<T>(T(0)), over,
      [recipe, slots](Node<T>& node) { checkpoint_backward(*recipe, *slots, node); },
      [recipe, slots](const BackwardArgs<T>& a) { return checkpoint_formula(*recipe, *slots, a); });
  std::vector<Tensor<T>> result;
  for (std::size_t k = 0; k < values.size(); ++k) {
    if (!differentiable[k]) {
      result.emplace_back(std::move(values[k]));
      continue;
    }
    auto [park, park_graph] = ::xgrad::detail::park_gradient<T>(slots, k);
    result.push_back(
        make_result<T>("CheckpointBackward", std::move(values[k]), {fn}, std::move(park), std::move(park_graph)));
  }
  return result;
}

template <class T>
Tensor<T> checkpoint(const typename detail::identity<CheckpointFunction1<T>>::type& function, const Tensor<T>& input,
                     const CheckpointOptions& options) {
  XGRAD_CHECK(static_cast<bool>(function), "checkpoint: the function is empty; expected a callable");
  const CheckpointFunction<T> each = [function](const std::vector<Tensor<T>>& in) {
    return std::vector<Tensor<T>>{function(in[0])};
  };
  return checkpoint<T>(each, std::vector<Tensor<T>>{input}, options)[0];
}

template std::vector<Tensor<float>> checkpoint<float>(const CheckpointFunction<float>&,
                                                      const std::vector<Tensor<float>>&, const CheckpointOptions&);
template std::vector<Tensor<double>> checkpoint<double>(const CheckpointFunction<double>&,
                                                        const std::vector<Tensor<double>>&, const CheckpointOptions&);
template Tensor<float> checkpoint<float>(const CheckpointFunction1<float>&, const Tensor<float>&,
                                         const CheckpointOptions&);
template Tensor<double> checkpoint<double>(const CheckpointFunction1<double>&, const Tensor<double>&,
                                           const CheckpointOptions&);

}  // namespace xgrad::utils
