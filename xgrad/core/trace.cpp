// The op recorder behind xgrad/core/trace.hpp.
#include <xgrad/core/trace.hpp>

#include <cstdlib>
#include <memory>

#include <cxxabi.h>

#include <xgrad/base/check.hpp>

namespace xgrad::trace {

namespace detail {
thread_local Recorder* current = nullptr;
}  // namespace detail

struct Access {
  static Recorder& recorder() { return *detail::current; }
  static std::vector<Op>& ops() { return detail::current->ops_; }
  static std::optional<OpKind>& noted() { return detail::current->noted_; }
  static std::vector<Arg>& noted_args() { return detail::current->args_; }
  static int& depth() { return detail::current->composite_depth_; }
  static std::vector<ValueRead>& value_reads() { return detail::current->value_reads_; }
  static std::vector<FunctionOutput>& function_outputs() { return detail::current->function_outputs_; }
};

Recorder::Recorder() {
  XGRAD_CHECK(detail::current == nullptr, "trace::Recorder: this thread is already recording a trace");
  detail::current = this;
}

Recorder::~Recorder() { detail::current = nullptr; }

const Arg& Op::arg(const std::string& name) const {
  for (const Arg& a : args)
    if (a.name == name) return a;
  XGRAD_CHECK(false, "trace: op '", type, "' (op ", index, " recorded) has no argument '", name, "'");
  return args.front();  // unreachable
}

bool Op::has(const std::string& name) const {
  for (const Arg& a : args)
    if (a.name == name) return !std::holds_alternative<std::monostate>(a.value);
  return false;
}

namespace {
template <class V>
const V& get(const Op& op, const std::string& name, const char* kind) {
  const Arg& a = op.arg(name);
  const V* v = std::get_if<V>(&a.value);
  XGRAD_CHECK(v != nullptr, "trace: argument '", name, "' of op '", op.type, "' is not ", kind);
  return *v;
}
}  // namespace

std::int64_t Op::integer(const std::string& name) const { return get<std::int64_t>(*this, name, "an integer"); }
double Op::real(const std::string& name) const { return get<double>(*this, name, "a real number"); }
const std::string& Op::text(const std::string& name) const { return get<std::string>(*this, name, "a string"); }
const std::vector<std::int64_t>& Op::integers(const std::string& name) const {
  return get<std::vector<std::int64_t>>(*this, name, "a list of integers");
}

namespace detail {

void note(OpKind kind, std::vector<Arg> args) {
  if (Access::depth() > 0) return;
  Access::noted() = kind;
  Access::noted_args() = std::move(args);
}

void record(const char* op, const Tensor<float>* first, const Tensor<float>* last, const Tensor<float>& result) {
  if (Access::depth() > 0) return;
  Op rec;
  rec.type = op;
  rec.inputs.assign(first, last);
  rec.outputs = {result};
  rec.index = Access::ops().size();
  if (Access::noted() && op_name(*Access::noted()) == op) {
    rec.kind = Access::noted();
    rec.args = std::move(Access::noted_args());
    Access::noted_args().clear();
    Access::noted().reset();
  }
  Access::ops().push_back(std::move(rec));
}

void reject_double(const char* op) {
  XGRAD_CHECK(false, "trace: op '", op, "' ran on double tensors while recording; only float models are traced");
}

void enter_composite() { ++Access::depth(); }
void leave_composite() { --Access::depth(); }

void record_composite(OpKind kind, std::vector<Tensor<float>> inputs, std::vector<Arg> args,
                      std::vector<Tensor<float>> outputs) {
  if (Access::depth() > 0) return;
  Op rec;
  rec.type = op_name(kind);
  rec.kind = kind;
  rec.inputs = std::move(inputs);
  rec.outputs = std::move(outputs);
  rec.args = std::move(args);
  rec.index = Access::ops().size();
  Access::ops().push_back(std::move(rec));
}

void value_read(const char* how, const char* op) {
  if (Access::depth() > 0) return;
  Access::value_reads().push_back(ValueRead{how, op, Access::ops().size()});
}

void function_output(const char* type_name, const Tensor<float>& output) {
  if (Access::depth() > 0) return;
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(type_name, nullptr, nullptr, &status),
                                                   std::free);
  Access::function_outputs().push_back(
      FunctionOutput{output, status == 0 && demangled ? demangled.get() : type_name});
}

}  // namespace detail

}  // namespace xgrad::trace
