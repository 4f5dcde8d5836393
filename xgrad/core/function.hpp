// User-defined differentiable ops, as LibTorch's torch::autograd::Function<T>:
//
//   struct SiLU : xgrad::autograd::Function<SiLU> {
//     static constexpr bool once_differentiable = true;  // backward computes on arrays
//     static Tensor<double> forward(AutogradContext<double>* ctx, Tensor<double> x) {
//       ctx->save_for_backward({x});
//       Array<double> y = x.value() / (1.0 + xt::exp(-x.value()));
//       return Tensor<double>(std::move(y));
//     }
//     static std::vector<Tensor<double>> backward(AutogradContext<double>* ctx,
//                                                 std::vector<Tensor<double>> grad_outputs) {
//       const Array<double>& x = ctx->get_saved_variables()[0].value();
//       Array<double> s = 1.0 / (1.0 + xt::exp(-x));
//       return {Tensor<double>(Array<double>(grad_outputs[0].value() * s * (1.0 + x * (1.0 - s))))};
//     }
//   };
//   auto y = SiLU::apply(x);
//
// forward runs without building a graph (its result values become the outputs); backward gets one
// gradient per output (zeros for an output the loss does not reach) and returns, in order, either
// one gradient per argument of forward (LibTorch's form: an undefined Tensor in each non-Tensor
// argument's place) or one per Tensor argument; an undefined Tensor is "no gradient". Any other
// count is refused, naming X. Non-Tensor arguments are passed through to forward.
//
// Higher-order gradients: under a backward with create_graph, backward runs with grad mode on and
// gets gradients with history, so a backward written with Tensor ops (xgrad::mul, ...) is
// differentiated again like any op. A backward that computes on raw arrays (as SiLU above) must
// say so, `static constexpr bool once_differentiable = true;` in X (PyTorch's
// @once_differentiable): it then runs with grad mode off, and differentiating its gradients again
// is refused with an error naming X, never silently zero. Without create_graph, backward runs
// with grad mode off, as in PyTorch.
//
// forward must return defined tensors (an undefined one is refused, naming X and the output);
// the results' nodes are named as PyTorch names a custom Function's grad_fn, X demangled plus "Backward"
// ("my::SiLUBackward"), in every message and in to_dot. An in-place Function changes an input
// through mutable_value(), calls ctx->mark_dirty({x}) and returns x (LibTorch's form; see
// AutogradContext::mark_dirty).
#pragma once

#include <xgrad/base/check.hpp>
#include <xgrad/core/grad_mode.hpp>
#include <xgrad/core/graph.hpp>
#include <xgrad/core/profiler.hpp>
#include <xgrad/core/tensor.hpp>
#include <xgrad/core/trace.hpp>

#include <cxxabi.h>

#include <algorithm>
#include <any>
#include <cstddef>
#include <cstdlib>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <unordered_set>
#include <utility>
#include <vector>

namespace xgrad::autograd {

template <class X>
struct Function;

// What forward and backward share (torch::autograd::AutogradContext).
template <class T>
class AutogradContext {
 public:
  // Tensors backward needs. Each one's version is recorded when apply returns (after mark_dirty's
  // bump, as PyTorch's SavedVariable): get_saved_variables throws if one was changed in place
  // since, as a built-in op's backward does.
  void save_for_backward(std::vector<Tensor<T>> tensors) {
    saved_ = std::move(tensors);
    record_saved_versions();
  }
  std::vector<Tensor<T>> get_saved_variables() const {
    for (std::size_t i = 0; i < saved_.size(); ++i)
      XGRAD_CHECK(!saved_[i].defined() || saved_[i].version() == saved_versions_[i],
                  "autograd::Function: saved tensor ", i,
                  " was modified by an inplace operation: expected version ", saved_versions_[i],
                  ", got version ", saved_[i].version());
    return saved_;
  }
  // Outputs that get no gradient (an index, a mask): their requires_grad is false.
  void mark_non_differentiable(std::vector<Tensor<T>> outputs) {
    for (const auto& t : outputs) non_differentiable_.insert(t.node().get());
  }
  // Inputs forward changed in place (torch's ctx->mark_dirty), which forward must return: apply
  // bumps each one's version, and the output is that input itself (the same tensor, sharing its
  // value), its history moved below this Function's node. Whatever saved the input before (an
  // op, another Function) then refuses to use it, as in PyTorch; a leaf that requires grad is
  // refused (with grad mode on).
  void mark_dirty(std::vector<Tensor<T>> inputs) {
    for (auto& t : inputs) dirty_.push_back(std::move(t));
  }
  // needs_input_grad(i): whether the i-th Tensor argument of forward requires grad.
  bool needs_input_grad(std::size_t i) const {
    XGRAD_CHECK(i < needs_input_grad_.size(), "autograd::Function: needs_input_grad(", i,
                ") with ", needs_input_grad_.size(), " Tensor inputs");
    return needs_input_grad_[i];
  }
  // Anything else forward wants to hand to backward (torch's ctx->saved_data).
  std::map<std::string, std::any> saved_data;

 private:
  template <class X>
  friend struct Function;

  void record_saved_versions() {
    saved_versions_.clear();
    for (const auto& t : saved_) saved_versions_.push_back(t.defined() ? t.version() : 0);
  }
  bool non_differentiable(const Tensor<T>& t) const { return non_differentiable_.count(t.node().get()) != 0; }
  bool dirty(const Tensor<T>& t) const {
    for (const auto& d : dirty_)
      if (d.node() == t.node()) return true;
    return false;
  }

  std::vector<bool> needs_input_grad_;
  std::unordered_set<const Node<T>*> non_differentiable_;
  std::vector<Tensor<T>> dirty_;
  std::vector<Tensor<T>> saved_;
  std::vector<std::uint64_t> saved_versions_;
};

namespace detail {
// A type's name as written in C++ ("my::SiLU"), not as typeid mangles it ("N2my4SiLUE").
inline std::string demangle(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  return status == 0 && name ? std::string(name.get()) : std::string(mangled);
}
// The name of X's nodes, as PyTorch names a custom Function's grad_fn: "my::SiLUBackward". Never
// one of the built-in ops' names (an exporter would take the Function for that op).
template <class X>
const char* node_name() {
  static const std::string name = demangle(typeid(X).name()) + "Backward";
  return name.c_str();
}
// "autograd::Function my::SiLU", for messages.
template <class X>
std::string function_name() {
  return "autograd::Function " + demangle(typeid(X).name());
}

template <class A> struct tensor_type { using type = void; };
template <class U> struct tensor_type<Tensor<U>> { using type = U; };
template <class... A> struct first_tensor { using type = void; };
template <class A, class... R> struct first_tensor<A, R...> {
  using head = typename tensor_type<std::decay_t<A>>::type;
  using type = std::conditional_t<std::is_void_v<head>, typename first_tensor<R...>::type, head>;
};
// Whether X declares `static constexpr bool once_differentiable = true;`.
template <class X, class = void>
struct once_differentiable : std::false_type {};
template <class X>
struct once_differentiable<X, std::void_t<decltype(X::once_differentiable)>>
    : std::bool_constant<X::once_differentiable> {};
template <class T, class A> void collect(std::vector<Tensor<T>>& out, const A& a) {
  if constexpr (std::is_same_v<std::decay_t<A>, Tensor<T>>) out.push_back(a);
}
}  // namespace detail

// Derive X from Function<X> and give it static forward(ctx, args...) and backward(ctx,
// grad_outputs); call X::apply(args...). forward returns a Tensor<T> or a std::vector<Tensor<T>>.
template <class X>
struct Function {
  template <class... Args>
  static auto apply(Args&&... args) {
    // The profiler names it after X (its backward: X + "Backward").
    const profiler::detail::Range profiled(typeid(X).name(), profiler::Event::Kind::Op);
    using T = typename detail::first_tensor<Args...>::type;
    static_assert(!std::is_void_v<T>, "autograd::Function::apply: forward needs a Tensor argument");
    std::vector<Tensor<T>> inputs;
    (detail::collect<T>(inputs, args), ...);
    // Which of forward's arguments are Tensors: backward may return one gradient per argument.
    static const std::vector<bool> slots{std::is_same_v<std::decay_t<Args>, Tensor<T>>...};
    auto ctx = std::make_shared<AutogradContext<T>>();
    // The dirty tensors are apply's to read, not backward's: they are let go when apply returns
    // or throws, or the output's node would hold itself (node -> backward -> ctx -> the output).
    struct ForgetDirty {
      AutogradContext<T>& ctx;
      ~ForgetDirty() { ctx.dirty_.clear(); }
    } forget_dirty{*ctx};
    bool any_grad = false;
    for (const auto& in : inputs) {
      bool needs = is_grad_enabled() && in.defined() && in.requires_grad();
      ctx->needs_input_grad_.push_back(needs);
      any_grad = any_grad || needs;
    }
    using Out = decltype(X::forward(ctx.get(), std::forward<Args>(args)...));
    Out out = [&] {
      NoGradGuard no_grad;
      return X::forward(ctx.get(), std::forward<Args>(args)...);
    }();
    if (trace::active()) trace::function_outputs<T>(typeid(X).name(), out);  // for onnx's messages
    if constexpr (std::is_same_v<Out, Tensor<T>>) {
      XGRAD_CHECK(out.defined(), detail::function_name<X>(),
                  ": forward returned an undefined tensor; expected "
                  "a defined one (an output that gets no gradient: ctx->mark_non_differentiable)");
      check_dirty<T>(*ctx, inputs, {out});
      ctx->record_saved_versions();
      if (!any_grad || ctx->non_differentiable(out)) return out;
      auto backward = [ctx](Node<T>& node) {
        run_user_backward<T>(*ctx, node, {Tensor<T>(std::move(node.grad))}, slots);
      };
      GradFormula<T> formula = [ctx](const BackwardArgs<T>& args) {
        return user_gradients_with_graph<T>(*ctx, args.node(), {args.grad()}, slots);
      };
      if (!ctx->dirty(out))
        return make_result<T>(detail::node_name<X>(), take_value(out), inputs, std::move(backward), std::move(formula));
      const Split split = split_dirty<T>(*ctx, inputs);
      adopt<T>(out,
               make_result<T>(detail::node_name<X>(), Array<T>(T(0)), inputs, std::move(backward), std::move(formula)),
               split);
      return out;
    } else {
      for (std::size_t k = 0; k < out.size(); ++k)
        XGRAD_CHECK(out[k].defined(), detail::function_name<X>(), ": forward returned an undefined tensor as output ",
                    k, " of ", out.size(),
                    "; expected a defined one (an output that gets no gradient: "
                    "ctx->mark_non_differentiable)");
      check_dirty<T>(*ctx, inputs, out);
      ctx->record_saved_versions();
      return wrap_outputs<T>(ctx, inputs, std::move(out), any_grad, slots);
    }
  }

 private:
  // mark_dirty: every dirty tensor is an input that forward returns; each one's version is bumped
  // (torch's get_and_bump_dirty).
  template <class T>
  static void check_dirty(AutogradContext<T>& ctx, const std::vector<Tensor<T>>& inputs,
                          const std::vector<Tensor<T>>& outs) {
    for (auto& d : ctx.dirty_) {
      const auto same = [&](const Tensor<T>& t) { return t.node() == d.node(); };
      XGRAD_CHECK(d.defined() && std::any_of(inputs.begin(), inputs.end(), same), detail::function_name<X>(),
                  ": ctx->mark_dirty was given a tensor that is not a Tensor argument of forward; expected "
                  "only inputs changed in place");
      XGRAD_CHECK(std::any_of(outs.begin(), outs.end(), same), detail::function_name<X>(),
                  ": an input marked dirty (ctx->mark_dirty) is not returned by forward; the inputs "
                  "changed in place must all be outputs of the Function");
      ++d.node()->version;
    }
  }
  // Splits the dirty inputs' histories (detail::split_history), putting each one's old history in
  // its place in `inputs`; returns the pairs (dirty node, its old history).
  using Split = std::vector<std::pair<const void*, std::shared_ptr<void>>>;
  template <class T>
  static Split split_dirty(AutogradContext<T>& ctx, std::vector<Tensor<T>>& inputs) {
    static const std::string who = detail::function_name<X>();
    Split split;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (!ctx.dirty(inputs[i])) continue;
      const std::shared_ptr<Node<T>> x = inputs[i].node();
      std::shared_ptr<Node<T>> prev = ::xgrad::detail::split_history<T>(*x, who.c_str());
      for (std::size_t j = i; j < inputs.size(); ++j)  // an input passed twice is split once
        if (inputs[j].node() == x) inputs[j] = Tensor<T>(prev);
      split.emplace_back(x.get(), std::move(prev));
    }
    return split;
  }
  // Gives the dirty output `out` the history of `result`, over its old history.
  template <class T>
  static void adopt(Tensor<T>& out, Tensor<T> result, const Split& split) {
    std::shared_ptr<Node<T>> old;
    for (const auto& [x, prev] : split)
      if (x == out.node().get()) old = std::static_pointer_cast<Node<T>>(prev);
    ::xgrad::detail::adopt_history<T>(*out.node(), *result.node(), std::move(old));
  }

  // Calls X::backward (without create_graph: grad mode off, as PyTorch) and accumulates its
  // results into the inputs' gradients. `slots`: whether each argument of forward is a Tensor.
  template <class T>
  static void run_user_backward(AutogradContext<T>& ctx, Node<T>& node, std::vector<Tensor<T>> grads,
                                const std::vector<bool>& slots) {
    std::vector<Tensor<T>> gi;
    {
      const NoGradGuard no_grad;
      gi = user_gradients<T>(ctx, node, std::move(grads), slots);
    }
    for (std::size_t i = 0; i < gi.size(); ++i)
      if (gi[i].defined() && node.input_needs_grad(i)) node.input(i).accumulate_grad(take_value(gi[i]));
  }

  // Under create_graph: X::backward runs with grad mode on, on gradients with history, and what it
  // computes with Tensor ops is differentiated by the next backward. A Function marked
  // once_differentiable (its backward computes on raw arrays) runs it with grad mode off instead,
  // and its gradients get a node that refuses a second differentiation by name (PyTorch's
  // @once_differentiable).
  template <class T>
  static std::vector<Tensor<T>> user_gradients_with_graph(AutogradContext<T>& ctx, const Node<T>& node,
                                                          std::vector<Tensor<T>> grads,
                                                          const std::vector<bool>& slots) {
    if constexpr (!detail::once_differentiable<X>::value) {
      return user_gradients<T>(ctx, node, std::move(grads), slots);
    } else {
      std::vector<Tensor<T>> gi;
      {
        const NoGradGuard no_grad;
        std::vector<Tensor<T>> plain;
        for (const auto& g : grads) plain.push_back(g.detach());
        gi = user_gradients<T>(ctx, node, std::move(plain), slots);
      }
      // Every gradient gets the refusing node, over the gradients and X's inputs, so that whatever
      // depends on it requires grad and reaches the refusal (PyTorch's DelayedError).
      std::vector<Tensor<T>> over = grads;
      for (const auto& in : node.inputs) over.push_back(Tensor<T>(in));
      static const std::string name = detail::demangle(typeid(X).name()) + "Backward (once_differentiable)";
      const auto refuse = [](auto&&...) -> std::vector<Tensor<T>> {
        throw std::runtime_error(::xgrad::detail::concat(
            "trying to differentiate twice a function that was marked with once_differentiable: ",
            detail::function_name<X>(),
            " (its backward computes on raw arrays; write it with Tensor ops and drop "
            "once_differentiable to differentiate it again)"));
      };
      for (auto& g : gi)
        if (g.defined())
          g = make_result<T>(
              name.c_str(), take_value(g), over, [refuse](Node<T>&) { refuse(); }, refuse);
      return gi;
    }
  }

  // X::backward's results, one per input node (undefined: no gradient), checked.
  template <class T>
  static std::vector<Tensor<T>> user_gradients(AutogradContext<T>& ctx, const Node<T>& node,
                                               std::vector<Tensor<T>> grads, const std::vector<bool>& slots) {
    std::vector<Tensor<T>> gi = X::backward(&ctx, std::move(grads));
    if (gi.size() != node.inputs.size()) {
      XGRAD_CHECK(gi.size() == slots.size(), detail::function_name<X>(), ": backward should return ", slots.size(),
                  " gradients (one per argument of forward",
                  slots.size() == node.inputs.size()
                      ? ")"
                      : ", an undefined Tensor for a non-Tensor one) or " + std::to_string(node.inputs.size()) +
                            " (one per Tensor argument)",
                  ", got ", gi.size());
      std::vector<Tensor<T>> per_tensor;
      for (std::size_t a = 0; a < slots.size(); ++a) {
        if (slots[a]) {
          per_tensor.push_back(std::move(gi[a]));
        } else {
          XGRAD_CHECK(!gi[a].defined(), detail::function_name<X>(),
                      ": backward returned a defined gradient at "
                      "position ",
                      a, ", but argument ", a,
                      " of forward is not a Tensor; expected an undefined "
                      "Tensor there");
        }
      }
      gi = std::move(per_tensor);
    }
    return gi;
  }

  // A tensor's value, moved out when no other handle can see it (a fresh result of forward or
  // backward), copied otherwise (an input returned as is).
  template <class T>
  static Array<T> take_value(Tensor<T>& t) {
    if (t.node().use_count() == 1 && t.node()->is_leaf && !t.node()->requires_grad)
      return std::move(t.node()->value);
    return Array<T>(t.value());
  }

  // Several outputs: one hidden node (a scalar placeholder value) runs X::backward once; each
  // differentiable output is a node over it that parks its gradient in a shared slot.
  template <class T>
  static std::vector<Tensor<T>> wrap_outputs(std::shared_ptr<AutogradContext<T>> ctx, std::vector<Tensor<T>> inputs,
                                             std::vector<Tensor<T>> outs, bool any_grad,
                                             const std::vector<bool>& arg_slots) {
    if (!any_grad) return outs;
    const Split split = split_dirty<T>(*ctx, inputs);
    // The outputs' gradients, parked until the hidden node runs (graph.hpp); an output that got
    // none gives X::backward zeros of its shape.
    auto slots = std::make_shared<xgrad::detail::ParkedGradients<T>>(outs.size());
    std::vector<Shape> shapes;
    for (const auto& o : outs) shapes.push_back(o.shape());
    Tensor<T> fn = make_result<T>(
        detail::node_name<X>(), Array<T>(T(0)), inputs,
        [ctx, slots, shapes, args = &arg_slots](Node<T>& node) {
          std::vector<Tensor<T>> grads;
          for (std::size_t k = 0; k < slots->grads.size(); ++k) {
            if (!slots->has[k]) slots->grads[k] = full_array<T>(shapes[k], T(0), "autograd::Function (backward)");
            grads.emplace_back(std::move(slots->grads[k]));
            slots->has[k] = false;
          }
          run_user_backward<T>(*ctx, node, std::move(grads), *args);
        },
        [ctx, slots, shapes, args = &arg_slots](const BackwardArgs<T>& a) {
          std::vector<Tensor<T>> grads;
          for (std::size_t k = 0; k < slots->graphs.size(); ++k) {
            grads.push_back(slots->has[k] ? std::move(slots->graphs[k])
                                          : Tensor<T>(full_array<T>(shapes[k], T(0), "autograd::Function (backward)")));
            slots->graphs[k] = Tensor<T>();
            slots->has[k] = false;
          }
          return user_gradients_with_graph<T>(*ctx, a.node(), std::move(grads), *args);
        });
    std::vector<Tensor<T>> result;
    for (std::size_t k = 0; k < outs.size(); ++k) {
      if (ctx->non_differentiable(outs[k])) {
        result.push_back(outs[k]);
        continue;
      }
      auto [park, park_graph] = xgrad::detail::park_gradient<T>(slots, k);
      if (ctx->dirty(outs[k])) {
        adopt<T>(outs[k],
                 make_result<T>(detail::node_name<X>(), Array<T>(T(0)), {fn}, std::move(park), std::move(park_graph)),
                 split);
        result.push_back(outs[k]);
      } else {
        result.push_back(
            make_result<T>(detail::node_name<X>(), take_value(outs[k]), {fn}, std::move(park), std::move(park_graph)));
      }
    }
    return result;
  }
};

}  // namespace xgrad::autograd
