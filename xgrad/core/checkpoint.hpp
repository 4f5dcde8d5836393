// Activation checkpointing, as torch.utils.checkpoint.checkpoint(function, *args,
// use_reentrant=False, preserve_rng_state=True): the intermediate activations of `function` are
// not kept for the backward; the backward runs `function` again on the same inputs and
// differentiates that.
//
//   auto layer = model.layers[i];                       // captured by value: it runs again later
//   h = xgrad::utils::checkpoint<float>([layer, rope](const Tensor<float>& x) {
//         return layer->forward(x, rope);
//       }, h);
//   // several tensors: checkpoint<float>([](const std::vector<Tensor<float>>& in) {...}, {a, b})
//
// The C++ shape: PyTorch's *args become a vector of Tensors (the tensors whose gradient flows
// through the block), and every other argument (rotary tables, masks, options, the module
// itself) is captured by the callable, which is kept until the backward: capture by value, never
// a reference to a local. A callable of one Tensor returning one Tensor is the common case (a
// decoder layer) and has its own overload.
//
// Semantics (use_reentrant=False, the form PyTorch recommends):
// - The result's gradient reaches the inputs AND every leaf that requires grad which the function
//   uses (its parameters), even when no input requires grad: a frozen base model with LoRA
//   adapters inside the layer trains the adapters (the reentrant form would silently train
//   nothing). Tensors with a history that the function reads must be among `inputs`: a captured
//   one is differentiated through to its own leaves, which walks its history on every call.
// - preserve_rng_state: the default generator's state before the forward is replayed by the
//   recompute, so dropout draws the same mask; after the backward the generator is where it was
//   before the recompute (as if there had been none). A Generator passed explicitly to an op
//   inside is not replayed (as PyTorch replays only the default generators).
// - Under no_grad, or when neither the inputs nor any leaf the function reads requires grad,
//   the function just runs.
// - A backward with create_graph recomputes with grad mode on from the inputs as they are (with
//   their history) and differentiates with create_graph, so the gradients can be differentiated
//   again where the function's ops support it (docs/higher_order.md).
// - An input changed in place between the forward and the backward (or a parameter: an optimizer
//   step) is refused by the backward, as a built-in op's is.
//
// How (xgrad has no saved-tensor hooks): the forward runs the function once with grad mode on,
// walks the graph it made from the outputs down to the inputs to find the leaves that require
// grad, keeps only the output values and drops that graph (one layer's graph, alive only during
// the call). The outputs hang from one node over the inputs and those leaves; its backward sets
// the generator back, reruns the function (on copies of the inputs that need a gradient, the
// others as they are) and takes autograd::grad of the outputs with respect to the inputs and
// leaves that need it (a backward inside a backward), with the incoming gradients. The cost: two
// forwards and one backward per block (as PyTorch's), and at most one block's graph alive at a
// time besides the outputs. docs/higher_order.md ("Activation checkpointing") has the numbers.
#pragma once

#include <functional>
#include <vector>

#include <xgrad/arg.hpp>
#include <xgrad/core/tensor.hpp>

namespace xgrad::utils {

struct CheckpointOptions {
  XGRAD_ARG(bool, preserve_rng_state) = true;
};

template <class T>
using CheckpointFunction = std::function<std::vector<Tensor<T>>(const std::vector<Tensor<T>>&)>;
template <class T>
using CheckpointFunction1 = std::function<Tensor<T>(const Tensor<T>&)>;

namespace detail {
template <class U>
struct identity {
  using type = U;
};
}  // namespace detail

// function(inputs) with its activations recomputed in the backward. Every input must be defined
// and the function must return at least one tensor, each defined; the same count and shapes when
// it runs again (else the backward throws).
template <class T>
std::vector<Tensor<T>> checkpoint(const typename detail::identity<CheckpointFunction<T>>::type& function,
                                  const std::vector<Tensor<T>>& inputs, const CheckpointOptions& options = {});
template <class T>
Tensor<T> checkpoint(const typename detail::identity<CheckpointFunction1<T>>::type& function, const Tensor<T>& input,
                     const CheckpointOptions& options = {});

extern template std::vector<Tensor<float>> checkpoint<float>(const CheckpointFunction<float>&,
                                                             const std::vector<Tensor<float>>&,
                                                             const CheckpointOptions&);
extern template std::vector<Tensor<double>> checkpoint<double>(const CheckpointFunction<double>&,
                                                               const std::vector<Tensor<double>>&,
                                                               const CheckpointOptions&);
extern template Tensor<float> checkpoint<float>(const CheckpointFunction1<float>&, const Tensor<float>&,
                                                const CheckpointOptions&);
extern template Tensor<double> checkpoint<double>(const CheckpointFunction1<double>&, const Tensor<double>&,
                                                  const CheckpointOptions&);

}  // namespace xgrad::utils
