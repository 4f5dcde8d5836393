// Recording the ops a forward executes, for exporters (xgrad/onnx/export.hpp). While a
// trace::Recorder is alive on a thread, every op's result built by make_result on that thread is
// appended to it: the op's name and kind (OpKind, core/op_kinds.hpp), its input tensors, its
// result, and the non-tensor arguments the op noted (dims, scalars, index and mask arrays).
// Nothing is recorded otherwise, and an op pays one thread-local test for it.
// compile: skip (fragments of an op's and of a composite's body, which the files of ops/ show whole)
//   In an op:        XGRAD_OP_NOTE(op, {"dim", dim});   // its OpScope (ops/op_scope.hpp) notes them
//   In a composite:  trace::Composite<T> traced(OpKind::multi_head_attention, {q, k, v}, {...});
//                    ... ops (not recorded) ...
//                    traced.finish({out, weights});                  // recorded as one op
//
// Only float tensors are traced: an op on doubles run while recording throws.
//
// What leaves the recording is noted too, for the exporter's messages: a value read into C++
// (Tensor::item) and the outputs of custom autograd::Functions, whose forward may compute outside
// xgrad's ops. Tensor::detach is recorded as an op ("detach", the identity).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <xgrad/core/op_kinds.hpp>
#include <xgrad/core/tensor.hpp>

namespace xgrad::trace {

// A non-tensor argument of an op. Arrays are copied; `data` keeps the address the op read them
// from, so that an exporter can tell a model input passed through from a constant.
struct Arg {
  using Value = std::variant<std::monostate, std::int64_t, double, std::string, std::vector<std::int64_t>,
                             IndexArray, BoolArray, Array<float>>;
  std::string name;
  Value value;
  const void* data = nullptr;

  template <class I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
  Arg(std::string n, I v) : name(std::move(n)), value(static_cast<std::int64_t>(v)) {}
  Arg(std::string n, double v) : name(std::move(n)), value(v) {}
  Arg(std::string n, const char* v) : name(std::move(n)), value(std::string(v)) {}
  Arg(std::string n, std::string v) : name(std::move(n)), value(std::move(v)) {}
  template <class I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
  Arg(std::string n, const std::vector<I>& v)
      : name(std::move(n)), value(std::vector<std::int64_t>(v.begin(), v.end())) {}
  Arg(std::string n, const IndexArray& v) : name(std::move(n)), value(v), data(v.data()) {}
  Arg(std::string n, const BoolArray& v) : name(std::move(n)), value(v), data(v.data()) {}
  template <class T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Arg(std::string n, const Array<T>& v) : name(std::move(n)), value(Array<float>(xt::cast<float>(v))), data(v.data()) {}
  // An AttnMask (ops.hpp): absent, bool or float.
  template <class M, class = decltype(std::declval<const M&>().is_bool())>
  static Arg mask(std::string n, const M& m) {
    if (m.empty()) return Arg(std::move(n));
    return m.is_bool() ? Arg(std::move(n), m.bool_mask()) : Arg(std::move(n), m.float_mask());
  }
  explicit Arg(std::string n) : name(std::move(n)) {}  // absent
};

// One recorded op. `inputs` may hold undefined tensors where an optional one was absent
// (composites); `index` is its position in the recording.
struct Op {
  std::string type;
  // The op's identity, which exporters key on; nullopt for a node no op of xgrad's made (a custom
  // autograd::Function's, named after its class, or a user's own make_result).
  std::optional<OpKind> kind;
  std::vector<Tensor<float>> inputs;
  std::vector<Tensor<float>> outputs;
  std::vector<Arg> args;
  std::size_t index = 0;

  // The argument of that name; throws naming the op when absent.
  const Arg& arg(const std::string& name) const;
  std::int64_t integer(const std::string& name) const;
  double real(const std::string& name) const;
  const std::string& text(const std::string& name) const;
  const std::vector<std::int64_t>& integers(const std::string& name) const;
  bool has(const std::string& name) const;
};

// A tensor's value read into C++ while recording (Tensor::item): what the program does with it
// (a branch, a loop count, a number passed to an op) is invisible to the recording.
struct ValueRead {
  std::string how;        // "item()"
  std::string op;         // the op that made the tensor read ("leaf": an input, a parameter, ...)
  std::size_t after = 0;  // how many ops were recorded before the read
};

// An output of a custom autograd::Function run while recording, with the Function's name.
struct FunctionOutput {
  Tensor<float> tensor;
  std::string function;
};

// Records, on this thread, every op run while it is alive. At most one per thread.
class Recorder {
 public:
  Recorder();
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;
  const std::vector<Op>& ops() const { return ops_; }
  const std::vector<ValueRead>& value_reads() const { return value_reads_; }
  const std::vector<FunctionOutput>& function_outputs() const { return function_outputs_; }

 private:
  friend struct Access;
  std::vector<Op> ops_;
  std::vector<ValueRead> value_reads_;
  std::vector<FunctionOutput> function_outputs_;
  std::optional<OpKind> noted_;  // the op that noted `args_` and has not yet made its result
  std::vector<Arg> args_;
  int composite_depth_ = 0;     // inside a composite, inner ops are not recorded
};

namespace detail {
extern thread_local Recorder* current;
// An op's OpScope (xgrad/ops/op_scope.hpp) notes its identity and its non-tensor arguments just
// before it makes its result; the record of that result carries them.
void note(OpKind kind, std::vector<Arg> args);
void record(const char* op, const Tensor<float>* first, const Tensor<float>* last, const Tensor<float>& result);
void reject_double(const char* op);
void enter_composite();
void leave_composite();
void record_composite(OpKind kind, std::vector<Tensor<float>> inputs, std::vector<Arg> args,
                      std::vector<Tensor<float>> outputs);
// Tensor::item's report: `how` the value was read, `op` the op that made the tensor.
void value_read(const char* how, const char* op);
// autograd::Function::apply's report; `type_name` is typeid's (demangled here).
void function_output(const char* type_name, const Tensor<float>& output);
}  // namespace detail

inline bool active() { return detail::current != nullptr; }

// make_result's report (graph.cpp).
template <class T, class It>
void record_result(const char* op, It first, It last, const Tensor<T>& result) {
  if constexpr (std::is_same_v<T, float>) {
    const std::vector<Tensor<float>> inputs(first, last);
    detail::record(op, inputs.data(), inputs.data() + inputs.size(), result);
  } else {
    detail::reject_double(op);
  }
}

// autograd::Function::apply's report of its forward's outputs (function.hpp), when recording.
template <class T>
void function_outputs(const char* type_name, const Tensor<T>& output) {
  if constexpr (std::is_same_v<T, float>) {
    if (output.defined()) detail::function_output(type_name, output);
  }
}
template <class T>
void function_outputs(const char* type_name, const std::vector<Tensor<T>>& outputs) {
  for (const Tensor<T>& t : outputs) function_outputs<T>(type_name, t);
}

// An op made of ops, recorded as one (MultiheadAttention, scaled_dot_product_attention): the ops
// it runs between construction and finish() are not recorded. Does nothing when not tracing.
template <class T>
class Composite {
 public:
  Composite(OpKind kind, std::vector<Tensor<T>> inputs, std::vector<Arg> args) : kind_(kind) {
    if (!active()) return;
    if constexpr (std::is_same_v<T, float>) {
      inputs_ = std::move(inputs);
      args_ = std::move(args);
      detail::enter_composite();
      entered_ = true;
    } else {
      detail::reject_double(op_name(kind).data());
    }
  }
  ~Composite() {
    if (entered_) detail::leave_composite();
  }
  Composite(const Composite&) = delete;
  Composite& operator=(const Composite&) = delete;

  void finish(std::vector<Tensor<T>> outputs) {
    if (!entered_) return;
    if constexpr (std::is_same_v<T, float>) {
      detail::leave_composite();
      entered_ = false;
      detail::record_composite(kind_, std::move(inputs_), std::move(args_), std::move(outputs));
    }
  }

 private:
  OpKind kind_;
  bool entered_ = false;
  std::vector<Tensor<float>> inputs_;
  std::vector<Arg> args_;
};

}  // namespace xgrad::trace
