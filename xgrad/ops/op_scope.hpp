// An op's identity, opened on its first line: one scope keyed by its OpKind (core/op_kinds.hpp,
// the one place its name is written) that times its forward while a profile records, gives its
// node its name and records it, with its kind and its noted arguments, in a trace.
// compile: skip (a fragment of an op's body; the files of ops/ show it whole)
//
//   template <class T>
//   Tensor<T> tril(const Tensor<T>& a, std::int64_t diagonal) {
//     const OpScope op(OpKind::tril);                 // profiled as "tril"
//     XGRAD_CHECK(a.dim() >= 2, op.name(), ": ...");  // messages name it through the scope
//     XGRAD_OP_NOTE(op, {"diagonal", diagonal});      // its non-tensor arguments, for a trace
//     return op.result<T>(std::move(y), {a}, backward, formula);   // the node "tril"
//   }
#pragma once

#include <functional>
#include <initializer_list>
#include <utility>
#include <vector>

#include <xgrad/core/graph.hpp>
#include <xgrad/core/op_kinds.hpp>
#include <xgrad/core/profiler.hpp>
#include <xgrad/core/trace.hpp>

namespace xgrad {

class OpScope {
 public:
  explicit OpScope(OpKind kind) : kind_(kind), profiled_(name(), profiler::Event::Kind::Op) {}
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

  OpKind kind() const { return kind_; }
  // The op's name ("tril"): a string that lives as long as the program.
  const char* name() const { return op_name(kind_).data(); }

  // The op's non-tensor arguments for a trace; XGRAD_OP_NOTE builds them only while one records.
  void note(std::vector<trace::Arg> args) const { noted_ = std::move(args); }

  // make_result under the op's name; a trace records it with the op's kind and noted arguments.
  template <class T>
  Tensor<T> result(Array<T>&& value, std::initializer_list<Tensor<T>> inputs, std::function<void(Node<T>&)> backward,
                   GradFormula<T> formula = nullptr) const {
    note_for_trace();
    return make_result<T>(name(), std::move(value), inputs, std::move(backward), std::move(formula));
  }
  template <class T>
  Tensor<T> result(Array<T>&& value, std::vector<Tensor<T>> inputs, std::function<void(Node<T>&)> backward,
                   GradFormula<T> formula = nullptr) const {
    note_for_trace();
    return make_result<T>(name(), std::move(value), std::move(inputs), std::move(backward), std::move(formula));
  }

 private:
  void note_for_trace() const {
    if (trace::active()) trace::detail::note(kind_, std::move(noted_));
  }
  OpKind kind_;
  profiler::detail::Range profiled_;
  mutable std::vector<trace::Arg> noted_;
};

}  // namespace xgrad

// The op's non-tensor arguments, built only while a trace records (arrays are copied):
//   XGRAD_OP_NOTE(op, {"dim", dim}, {"index", index});
#define XGRAD_OP_NOTE(scope, ...)                              \
  do {                                                         \
    if (::xgrad::trace::active()) (scope).note({__VA_ARGS__}); \
  } while (false)
