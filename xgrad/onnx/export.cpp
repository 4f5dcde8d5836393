// export_model (export.hpp): trace the forward (twice when some axes are dynamic), then write
// each recorded op as ONNX nodes through protobuf's classes generated from onnx.proto.
//
// Numbers that change with the dynamic axes (reshape targets, slice bounds) are computed in the
// graph: each dynamic axis is a Shape(input)[axis] slice, and a size that changed between the two
// recordings is matched to one axis, a multiple of one, or the product of two. An index array
// made in the forward that is 0, 1, ..., n-1 in both recordings (positions) becomes Range(0, n).
#include <xgrad/onnx/export.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <unordered_map>

#include <onnx/onnx_pb.h>

#include <xgrad/base/warning.hpp>
#include <xgrad/core/grad_mode.hpp>
#include <xgrad/core/trace.hpp>
#include <xgrad/onnx/graph_builder.hpp>
#include <xgrad/serialize/atomic_file.hpp>

namespace xgrad::onnx {

const Tensor<float>& Inputs::tensor(std::size_t i) const {
  XGRAD_CHECK(i < inputs_.size() && std::holds_alternative<Tensor<float>>(inputs_[i]),
              "onnx::Inputs::tensor: input ", i, " is not a float tensor (", inputs_.size(), " inputs)");
  return std::get<Tensor<float>>(inputs_[i]);
}
const IndexArray& Inputs::indices(std::size_t i) const {
  XGRAD_CHECK(i < inputs_.size() && std::holds_alternative<IndexArray>(inputs_[i]),
              "onnx::Inputs::indices: input ", i, " is not an index array (", inputs_.size(), " inputs)");
  return std::get<IndexArray>(inputs_[i]);
}
const BoolArray& Inputs::mask(std::size_t i) const {
  XGRAD_CHECK(i < inputs_.size() && std::holds_alternative<BoolArray>(inputs_[i]),
              "onnx::Inputs::mask: input ", i, " is not a bool array (", inputs_.size(), " inputs)");
  return std::get<BoolArray>(inputs_[i]);
}

namespace {

using i64 = std::int64_t;
constexpr const char* kWho = "onnx::export_model";
constexpr const char* kChanges = "is made inside the forward and differs when the forward runs again ";
constexpr const char* kUnrecordable = ": it is computed outside xgrad's ops, which ONNX cannot record (when it "
                                      "follows a dynamic axis, the model fixes that axis)";

Shape shape_of_input(const Input& in) {
  return std::visit(
      [](const auto& v) -> Shape {
        if constexpr (std::is_same_v<std::decay_t<decltype(v)>, Tensor<float>>) return v.shape();
        else return Shape(v.shape().begin(), v.shape().end());
      },
      in);
}

// The forward run once under a recorder, in no-grad mode.
struct Recording {
  std::vector<trace::Op> ops;
  std::vector<Tensor<float>> outputs;
  std::vector<trace::ValueRead> value_reads;
  std::vector<trace::FunctionOutput> function_outputs;
};

Recording record(const Forward& forward, const std::vector<Input>& inputs) {
  NoGradGuard no_grad;
  trace::Recorder recorder;
  Recording r;
  r.outputs = forward(Inputs(inputs));
  r.ops = recorder.ops();
  r.value_reads = recorder.value_reads();
  r.function_outputs = recorder.function_outputs();
  return r;
}

// Puts every module in eval mode and gives each its own mode back.
class EvalModeGuard {
 public:
  explicit EvalModeGuard(nn::Module<float>& module) {
    for (auto& [name, m] : module.named_modules()) modes_.emplace_back(m, m->is_training());
    module.eval();
  }
  ~EvalModeGuard() {
    for (auto& [m, training] : modes_) {
      // train() recurses: restore parents first (named_modules order), children after.
      m->train(training);
    }
  }

 private:
  std::vector<std::pair<std::shared_ptr<nn::Module<float>>, bool>> modes_;
};

struct Symbol {
  std::string name;
  i64 a = 0, b = 0;        // its size in the example inputs, and in the resized ones
  std::size_t input = 0;   // where it is read at run time
  i64 axis = 0;
};

template <class A>
bool same_array(const A& x, const A& y) {
  return x.shape() == y.shape() && std::equal(x.begin(), x.end(), y.begin());
}

// 0, 1, ..., n-1 (1-D)
bool is_arange(const IndexArray& a) {
  if (a.dimension() != 1) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a(i) != static_cast<i64>(i)) return false;
  return true;
}

class Exporter {
 public:
  // b: the same forward run again on inputs_b (random values, dynamic axes resized), described by rerun.
  Exporter(nn::Module<float>& module, const std::vector<Input>& inputs, const std::vector<std::string>& input_names,
           const Recording& a, const Recording& b, const std::vector<Input>& inputs_b, std::vector<Symbol> symbols,
           std::string rerun, const std::set<std::string>& reserved_names)
      : input_names_(input_names), a_(a), b_(b), inputs_b_(inputs_b), symbols_(std::move(symbols)),
        rerun_(std::move(rerun)), g_(*model_.mutable_graph()), gb_(g_) {
    for (const std::string& name : reserved_names) gb_.reserve(name);
    for (const auto& [key, t] : module.named_parameters()) state_keys_.emplace(t.node().get(), key);
    for (const auto& [key, t] : module.named_buffers()) state_keys_.emplace(t.node().get(), key);
    for (std::size_t k = 0; k < inputs.size(); ++k)
      if (const auto* t = std::get_if<Tensor<float>>(&inputs[k])) values_[t->node().get()] = input_names[k];
  }

  pb::ModelProto& model() { return model_; }
  GraphBuilder& builder() { return gb_; }

  void run() {
    for (cur_ = 0; cur_ < a_.ops.size(); ++cur_) emit(a_.ops[cur_]);
  }

  // The value a forward output reads (`name`: its output name).
  std::string output_value(std::size_t k, const std::string& name) {
    const Tensor<float>& t = a_.outputs[k];
    XGRAD_CHECK(t.defined(), kWho, ": output ", k, " ('", name, "') of the forward is undefined");
    XGRAD_CHECK(b_.outputs[k].defined(), kWho, ": output ", k, " ('", name, "') of the forward is undefined when the "
                "forward runs again ", rerun_);
    cur_ = a_.ops.size();  // past the ops: where() names the outputs
    const std::string what = "output " + std::to_string(k) + " ('" + name + "') of the forward";
    return tensor_value(t, b_.outputs[k], what);
  }

  // A dim of an output: "" when fixed (its size in *fixed), else the symbol (or product) it follows,
  // or a name of its own when it follows the dynamic axes otherwise.
  std::string output_dim_param(std::size_t k, std::size_t d, i64* fixed) {
    const i64 va = static_cast<i64>(a_.outputs[k].shape()[d]);
    const i64 vb = static_cast<i64>(b_.outputs[k].shape()[d]);
    *fixed = va;
    if (va == vb) return "";
    const std::string symbolic = describe(va, vb);
    return symbolic.empty() ? "output_" + std::to_string(k) + "_dim_" + std::to_string(d) : symbolic;
  }

 private:
  // ---- values ----------------------------------------------------------------------------------

  // `what`: "output 0 ('y') of the forward" or "input 1 of op 'add' (op 3 of 5 recorded)".
  std::string tensor_value(const Tensor<float>& t, const Tensor<float>& tb, const std::string& what) {
    const void* key = t.node().get();
    if (auto it = values_.find(key); it != values_.end()) return it->second;
    if (auto it = state_keys_.find(key); it != state_keys_.end()) {
      gb_.initializer(it->second, t.value());
      values_[key] = it->second;
      return it->second;
    }
    // A tensor made inside the forward (not by a recorded op): a constant, if it does not change.
    if (!same_array(t.value(), tb.value()))
      XGRAD_CHECK(false, kWho, ": ", what, " is not computed by a recorded op: ", origin(t), ". Of shape ",
                  t.shape(), ", it ", kChanges, rerun_,
                  (t.shape() == tb.shape() ? std::string() : detail::concat(" (then of shape ", tb.shape(), ")")),
                  ", so it is no constant either: ONNX cannot record it (when it follows a dynamic axis, the model "
                  "fixes that axis)");
    std::string name = gb_.constant(t.value(), "const");
    values_[key] = name;
    return name;
  }

  // Where a tensor that no recorded op made comes from, as far as the recording tells.
  std::string origin(const Tensor<float>& t) const {
    for (const trace::FunctionOutput& f : a_.function_outputs)
      if (f.tensor.same(t))
        return "it is an output of custom autograd::Function '" + f.function +
               "', whose forward computes it outside xgrad's ops (only xgrad ops are recorded)";
    return "it is a tensor made outside xgrad's ops (by a factory such as ones(), or from values read into C++ "
           "such as Tensor(x.value() * 2))";
  }

  std::string input(std::size_t j) {
    const trace::Op& op = a_.ops[cur_];
    XGRAD_CHECK(j < op.inputs.size() && j < b_.ops[cur_].inputs.size(), kWho, ": ", where(), " has no input ", j);
    return tensor_value(op.inputs[j], b_.ops[cur_].inputs[j], "input " + std::to_string(j) + " of " + where());
  }

  template <class A>
  static int match_input(const trace::Arg& arg, const std::vector<Input>& inputs) {
    const A* v = std::get_if<A>(&arg.value);
    if (v == nullptr) return -1;
    for (std::size_t k = 0; k < inputs.size(); ++k) {
      if constexpr (std::is_same_v<A, Array<float>>) {
        if (const auto* t = std::get_if<Tensor<float>>(&inputs[k]))
          if (arg.data == t->value().data() || same_array(*v, t->value())) return static_cast<int>(k);
      } else {
        if (const auto* x = std::get_if<A>(&inputs[k]))
          if (arg.data == x->data() || same_array(*v, *x)) return static_cast<int>(k);
      }
    }
    return -1;
  }

  template <class A>
  std::string array_value_of(const trace::Arg& arg, const trace::Arg& arg_b) {
    // The resized inputs are random: a match there is no coincidence.
    const int k = match_input<A>(arg_b, inputs_b_);
    if (k >= 0) return input_names_[static_cast<std::size_t>(k)];
    const A& v = std::get<A>(arg.value);
    const A& vb = std::get<A>(arg_b.value);
    if constexpr (std::is_same_v<A, IndexArray>) {
      // Positions 0, 1, ..., n-1 with n a dynamic size: Range(0, n).
      if (v.size() != vb.size() && is_arange(v) && is_arange(vb) && v.size() > 0) {
        const std::string n =
            dynamic_size(static_cast<i64>(v.size()), static_cast<i64>(vb.size()), "length of a range");
        return gb_.op("Range", {gb_.scalar_int(0), gb_.op("Squeeze", {n, gb_.ints({0})}), gb_.scalar_int(1)});
      }
    }
    if (!same_array(v, vb))
      XGRAD_CHECK(false, kWho, ": the argument '", arg.name, "' of ", where(), " ", kChanges, rerun_,
                  kUnrecordable);
    return gb_.constant(v, arg.name);
  }

  // An index, bool or float array argument of the current op: a model input or a constant.
  std::string array_value(const std::string& name) {
    const trace::Arg& arg = a_.ops[cur_].arg(name);
    const trace::Arg& arg_b = b_.ops[cur_].arg(name);
    if (std::holds_alternative<IndexArray>(arg.value)) return array_value_of<IndexArray>(arg, arg_b);
    if (std::holds_alternative<BoolArray>(arg.value)) return array_value_of<BoolArray>(arg, arg_b);
    return array_value_of<Array<float>>(arg, arg_b);
  }

  void set_output(std::size_t k, const std::string& name) {
    const trace::Op& op = a_.ops[cur_];
    if (k < op.outputs.size() && op.outputs[k].defined()) values_[op.outputs[k].node().get()] = name;
  }

  // ---- sizes that may follow the dynamic axes -----------------------------------------------

  std::string where() const {
    if (cur_ >= a_.ops.size()) return "the forward's outputs (after the " + std::to_string(a_.ops.size()) + " ops recorded)";
    const trace::Op& op = a_.ops[cur_];
    std::ostringstream s;
    s << "op '" << op.type << "' (op " << op.index + 1 << " of " << a_.ops.size() << " recorded";
    if (op.index > 0) s << ", after '" << a_.ops[op.index - 1].type << "'";
    s << ")";
    return s.str();
  }

  // A size that is va in the first recording and vb in the second, as factor * s (* t): one
  // dynamic axis, a multiple of one, or the product of two. s is null when none fits.
  struct SizeMatch {
    const Symbol* s = nullptr;
    const Symbol* t = nullptr;
    i64 factor = 1;
  };
  SizeMatch match(i64 va, i64 vb) const {
    for (const Symbol& s : symbols_)
      if (s.a == va && s.b == vb) return {&s, nullptr, 1};
    for (const Symbol& s : symbols_)
      if (va % s.a == 0 && vb % s.b == 0 && va / s.a == vb / s.b) return {&s, nullptr, va / s.a};
    for (const Symbol& s : symbols_)
      for (const Symbol& t : symbols_)
        if (&s < &t && s.a * t.a == va && s.b * t.b == vb) return {&s, &t, 1};
    return {};
  }

  std::string describe(i64 va, i64 vb) const {
    const SizeMatch m = match(va, vb);
    if (m.s == nullptr) return "";
    return (m.factor != 1 ? std::to_string(m.factor) + "*" : "") + m.s->name + (m.t ? "*" + m.t->name : "");
  }

  // The 1-D int64 value of one size: Shape(input)[axis] (times a factor).
  std::string symbol_size(const Symbol& s) {
    auto it = symbol_values_.find(s.name);
    if (it != symbol_values_.end()) return it->second;
    const std::string v = gb_.shape(input_names_[s.input], s.axis, s.axis + 1);
    symbol_values_[s.name] = v;
    return v;
  }

  std::string dynamic_size(i64 va, i64 vb, const char* what) {
    const SizeMatch m = match(va, vb);
    if (m.t != nullptr) return gb_.op("Mul", {symbol_size(*m.s), symbol_size(*m.t)});
    if (m.s != nullptr)
      return m.factor == 1 ? symbol_size(*m.s) : gb_.op("Mul", {symbol_size(*m.s), gb_.ints({m.factor})});
    XGRAD_CHECK(false, kWho, ": the ", what, " of ", where(), " is ", va, " with the example inputs and ", vb,
                " with the dynamic axes resized, which is no dynamic axis nor a multiple or product of them: the "
                "model fixes a dynamic axis");
    return "";
  }

  // A 1-D int64 value: constant where the two recordings agree, computed from shapes elsewhere.
  std::string sizes(const std::vector<i64>& va, const std::vector<i64>& vb, const char* what) {
    if (va == vb) return gb_.ints(va);
    std::vector<std::string> pieces;
    std::vector<i64> run;
    for (std::size_t d = 0; d < va.size(); ++d) {
      if (va[d] == vb[d]) {
        run.push_back(va[d]);
        continue;
      }
      if (!run.empty()) pieces.push_back(gb_.ints(run));
      run.clear();
      pieces.push_back(dynamic_size(va[d], vb[d], what));
    }
    if (!run.empty()) pieces.push_back(gb_.ints(run));
    return pieces.size() == 1 ? pieces[0] : gb_.op("Concat", pieces, {gb_.attr("axis", i64(0))});
  }

  static std::vector<i64> dims(const Shape& s) { return std::vector<i64>(s.begin(), s.end()); }
  std::vector<i64> out_dims(std::size_t k, bool resized) const {
    const trace::Op& op = (resized ? b_.ops : a_.ops)[cur_];
    return dims(op.outputs[k].shape());
  }
  std::string output_shape_value(const char* what) { return sizes(out_dims(0, false), out_dims(0, true), what); }
  i64 int_arg(const char* name, bool resized) const {
    return (resized ? b_.ops : a_.ops)[cur_].integer(name);
  }

  // ---- ops -------------------------------------------------------------------------------------

  void emit(const trace::Op& op);
  void emit_attention(const trace::Op& op);
  void emit_multi_head_attention(const trace::Op& op);
  // softmax(scale q k^T + masks) v for q (.., L, d), k (.., S, d), v (.., S, dv) of rank `rank`.
  std::pair<std::string, std::string> attend(const std::string& q, const std::string& k, const std::string& v,
                                             std::size_t rank, double scale,
                                             const std::vector<std::pair<std::string, bool>>& masks, bool causal);

  const std::vector<std::string>& input_names_;
  const Recording& a_;
  const Recording& b_;
  const std::vector<Input>& inputs_b_;
  std::vector<Symbol> symbols_;
  std::string rerun_;
  pb::ModelProto model_;
  pb::GraphProto& g_;
  GraphBuilder gb_;
  std::unordered_map<const void*, std::string> values_;
  std::unordered_map<const void*, std::string> state_keys_;
  std::map<std::string, std::string> symbol_values_;
  std::size_t cur_ = 0;
};

void Exporter::emit(const trace::Op& op) {
  const std::string& t = op.type;
  const std::size_t n_in = op.inputs.size();
  auto unary = [&](const char* onnx_type) { set_output(0, gb_.op(onnx_type, {input(0)})); };
  auto scalar = [&](const char* name) { return gb_.scalar(static_cast<float>(op.real(name))); };

  static const std::map<std::string, const char*> kUnary = {{"neg", "Neg"},   {"exp", "Exp"},   {"log", "Log"},
                                                            {"sqrt", "Sqrt"}, {"abs", "Abs"},   {"tanh", "Tanh"},
                                                            {"sigmoid", "Sigmoid"}, {"relu", "Relu"}};
  static const std::map<std::string, const char*> kBinary = {
      {"add", "Add"}, {"sub", "Sub"}, {"mul", "Mul"}, {"div", "Div"}};
  if (auto it = kUnary.find(t); it != kUnary.end()) return unary(it->second);
  if (auto it = kBinary.find(t); it != kBinary.end()) {
    if (n_in == 2) return set_output(0, gb_.op(it->second, {input(0), input(1)}));
    return set_output(0, gb_.op(it->second, {input(0), scalar("other")}));  // add(a, s), mul(a, s)
  }
  if (t == "detach") return set_output(0, gb_.op("Identity", {input(0)}));
  if (t == "rsub") return set_output(0, gb_.op("Sub", {scalar("other"), input(0)}));
  if (t == "rdiv") return set_output(0, gb_.op("Div", {scalar("other"), input(0)}));
  if (t == "pow") return set_output(0, gb_.op("Pow", {input(0), scalar("exponent")}));
  if (t == "clamp") return set_output(0, gb_.op("Clip", {input(0), scalar("min"), scalar("max")}));
  if (t == "silu") {
    const std::string x = input(0);
    return set_output(0, gb_.op("Mul", {x, gb_.op("Sigmoid", {x})}));
  }
  if (t == "gelu") {
    // Opset 17 has no Gelu: the formulas of F.gelu, spelled out.
    const std::string x = input(0);
    std::string inner;
    if (op.text("approximate") == "tanh") {  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
      const std::string cube = gb_.op("Mul", {gb_.op("Mul", {x, x}), x});
      const std::string u = gb_.op("Add", {x, gb_.op("Mul", {cube, gb_.scalar(0.044715f)})});
      inner = gb_.op("Tanh", {gb_.op("Mul", {u, gb_.scalar(static_cast<float>(std::sqrt(2.0 / M_PI)))})});
    } else {  // 0.5 x (1 + erf(x / sqrt 2))
      inner = gb_.op("Erf", {gb_.op("Mul", {x, gb_.scalar(static_cast<float>(M_SQRT1_2))})});
    }
    const std::string half_x = gb_.op("Mul", {x, gb_.scalar(0.5f)});
    return set_output(0, gb_.op("Mul", {half_x, gb_.op("Add", {inner, gb_.scalar(1.0f)})}));
  }
  if (t == "sum" || t == "mean" || t == "amax" || t == "max") {
    const bool all = !op.has("dim");
    const i64 keep = all ? 0 : op.integer("keepdim");
    std::vector<Attribute> attrs{gb_.attr("keepdims", keep)};
    if (t == "sum") {  // ReduceSum takes its axes as an input from opset 13
      std::vector<std::string> in{input(0)};
      if (!all) in.push_back(gb_.ints(op.integers("dim")));
      return set_output(0, gb_.op("ReduceSum", in, attrs));
    }
    if (!all) attrs.push_back(gb_.attr("axes", op.integers("dim")));
    return set_output(0, gb_.op(t == "mean" ? "ReduceMean" : "ReduceMax", {input(0)}, attrs));
  }
  if (t == "var") {
    // sum((x - mean)^2) / (n - unbiased), n the count of reduced elements, from the run-time shape
    const std::string x = input(0);
    std::vector<i64> axes;
    if (op.has("dim")) {
      axes = op.integers("dim");
    } else {
      for (i64 d = 0; d < op.inputs[0].dim(); ++d) axes.push_back(d);
    }
    const i64 keep = op.has("dim") ? op.integer("keepdim") : 0;
    const std::string centered = gb_.op("Sub", {x, gb_.op("ReduceMean", {x}, {gb_.attr("axes", axes),
                                                                         gb_.attr("keepdims", i64(1))})});
    const std::string squares = gb_.op("ReduceSum", {gb_.op("Mul", {centered, centered}), gb_.ints(axes)},
                                       {gb_.attr("keepdims", keep)});
    const std::string sizes = gb_.op("Gather", {gb_.op("Shape", {x}), gb_.ints(axes)});
    const std::string n = gb_.op("Cast", {gb_.op("ReduceProd", {sizes}, {gb_.attr("keepdims", i64(0))})},
                                 {gb_.attr("to", i64(pb::TensorProto::FLOAT))});
    const std::string divisor = gb_.op("Sub", {n, gb_.scalar(op.integer("unbiased") ? 1.0f : 0.0f)});
    return set_output(0, gb_.op("Div", {squares, divisor}));
  }
  if (t == "transpose" || t == "permute")
    return set_output(0, gb_.op("Transpose", {input(0)}, {gb_.attr("perm", op.integers("perm"))}));
  if (t == "reshape" || t == "flatten" || t == "unsqueeze" || t == "squeeze")
    return set_output(0, gb_.op("Reshape", {input(0), output_shape_value("target shape")}));
  if (t == "expand") return set_output(0, gb_.op("Expand", {input(0), output_shape_value("target shape")}));
  if (t == "cat" || t == "stack") {
    std::vector<std::string> parts;
    for (std::size_t j = 0; j < n_in; ++j)
      parts.push_back(t == "cat" ? input(j) : gb_.op("Unsqueeze", {input(j), gb_.ints({op.integer("dim")})}));
    return set_output(0, gb_.op("Concat", parts, {gb_.attr("axis", op.integer("dim"))}));
  }
  if (t == "narrow" || t == "slice") {
    auto ends = [&](bool resized) {
      return int_arg("start", resized) + (int_arg("length", resized) - 1) * int_arg("step", resized) + 1;
    };
    const std::string starts = sizes({int_arg("start", false)}, {int_arg("start", true)}, "start");
    const std::string stops = int_arg("length", false) == 0 ? starts : sizes({ends(false)}, {ends(true)}, "end");
    return set_output(0, gb_.op("Slice", {input(0), starts, stops, gb_.ints({op.integer("dim")}),
                                          gb_.ints({op.integer("step")})}));
  }
  if (t == "index_select")
    return set_output(0, gb_.op("Gather", {input(0), array_value("index")}, {gb_.attr("axis", op.integer("dim"))}));
  if (t == "embedding") return set_output(0, gb_.op("Gather", {input(0), array_value("indices")}));
  if (t == "masked_fill")
    return set_output(0, gb_.op("Where", {array_value("mask"), scalar("value"), input(0)}));
  if (t == "where") return set_output(0, gb_.op("Where", {array_value("condition"), input(0), input(1)}));
  if (t == "matmul") return set_output(0, gb_.op("MatMul", {input(0), input(1)}));
  if (t == "linear") {
    // x (*, in) W^T (in, out) + b: the weight stays as stored, (out, in), under its state_dict key.
    const std::string w_t = gb_.op("Transpose", {input(1)}, {gb_.attr("perm", std::vector<i64>{1, 0})});
    std::string y = gb_.op("MatMul", {input(0), w_t});
    if (n_in == 3) y = gb_.op("Add", {y, input(2)});
    return set_output(0, y);
  }
  if (t == "tril" || t == "triu")  // Trilu keeps j - i <= k (upper = 0) or j - i >= k (upper = 1)
    return set_output(0, gb_.op("Trilu", {input(0), gb_.scalar_int(op.integer("diagonal"))},
                                {gb_.attr("upper", i64(t == "triu"))}));
  if (t == "softmax" || t == "log_softmax")
    return set_output(0, gb_.op(t == "softmax" ? "Softmax" : "LogSoftmax", {input(0)},
                                {gb_.attr("axis", op.integer("dim"))}));
  if (t == "layer_norm") {
    const i64 nd = op.integer("normalized_dims");
    const bool has_weight = op.integer("has_weight") != 0;
    std::vector<std::string> in{input(0)};
    if (has_weight) {
      in.push_back(input(1));
    } else {  // LayerNormalization needs a scale: ones of the normalized shape
      const Shape xs = op.inputs[0].shape();
      in.push_back(gb_.constant(full_array<float>(Shape(xs.end() - nd, xs.end()), 1.0f, "onnx::export_model"), "ones"));
    }
    if (n_in > (has_weight ? 2u : 1u)) in.push_back(input(has_weight ? 2 : 1));
    return set_output(0, gb_.op("LayerNormalization", in,
                                {gb_.attr("axis", -nd), gb_.attr("epsilon", static_cast<float>(op.real("eps")))}));
  }
  if (t == "scaled_dot_product_attention") return emit_attention(op);
  if (t == "multi_head_attention") return emit_multi_head_attention(op);
  XGRAD_CHECK(false, kWho, ": no exporter for ", where(), "; docs/onnx.md lists the ops covered");
}

std::pair<std::string, std::string> Exporter::attend(const std::string& q, const std::string& k,
                                                     const std::string& v, std::size_t rank, double scale,
                                                     const std::vector<std::pair<std::string, bool>>& masks,
                                                     bool causal) {
  std::vector<i64> perm(rank);
  for (std::size_t d = 0; d < rank; ++d) perm[d] = static_cast<i64>(d);
  std::swap(perm[rank - 1], perm[rank - 2]);
  std::string logits = gb_.op("MatMul", {q, gb_.op("Transpose", {k}, {gb_.attr("perm", perm)})});
  logits = gb_.op("Mul", {logits, gb_.scalar(static_cast<float>(scale))});
  std::string blocked;  // bool: true = may not attend
  auto block = [&](const std::string& m) { blocked = blocked.empty() ? m : gb_.op("Or", {blocked, m}); };
  for (const auto& [m, is_bool] : masks) {
    if (is_bool) block(m);
    else logits = gb_.op("Add", {logits, m});
  }
  if (causal) {  // key j > query i, for the run-time L and S
    auto positions = [&](const std::string& t) {
      const std::string n = gb_.op("Squeeze", {gb_.shape(t, -2, -1), gb_.ints({0})});
      return gb_.op("Range", {gb_.scalar_int(0), n, gb_.scalar_int(1)});
    };
    const std::string rows = gb_.op("Unsqueeze", {positions(q), gb_.ints({1})});  // (L, 1)
    const std::string cols = gb_.op("Unsqueeze", {positions(k), gb_.ints({0})});  // (1, S)
    block(gb_.op("Greater", {cols, rows}));
  }
  const float neg_inf = -std::numeric_limits<float>::infinity();
  if (!blocked.empty()) logits = gb_.op("Where", {blocked, gb_.scalar(neg_inf), logits});
  std::string probs = gb_.op("Softmax", {logits}, {gb_.attr("axis", i64(-1))});
  if (!masks.empty()) {
    // A query whose keys are all masked attends to nothing (xgrad's zero output), not NaN.
    const std::string row_max = gb_.op("ReduceMax", {logits}, {gb_.attr("axes", std::vector<i64>{-1}),
                                                               gb_.attr("keepdims", i64(1))});
    const std::string dead = gb_.op("IsInf", {row_max}, {gb_.attr("detect_positive", i64(0))});
    probs = gb_.op("Where", {dead, gb_.scalar(0.0f), probs});
  }
  return {gb_.op("MatMul", {probs, v}), probs};
}

void Exporter::emit_attention(const trace::Op& op) {
  XGRAD_CHECK(op.real("dropout_p") == 0.0, kWho, ": ", where(), " has dropout_p ", op.real("dropout_p"),
              "; export a model whose attention has no dropout in eval mode");
  const Shape qs = op.inputs[0].shape();
  const double scale = op.has("scale") ? op.real("scale") : 1.0 / std::sqrt(static_cast<double>(qs.back()));
  std::vector<std::pair<std::string, bool>> masks;
  if (op.has("attn_mask"))
    masks.emplace_back(array_value("attn_mask"), std::holds_alternative<BoolArray>(op.arg("attn_mask").value));
  const auto [out, probs] = attend(input(0), input(1), input(2), qs.size(), scale, masks, op.integer("is_causal") != 0);
  set_output(0, out);
}

void Exporter::emit_multi_head_attention(const trace::Op& op) {
  // inputs: query, key, value, in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias
  XGRAD_CHECK(op.real("dropout_p") == 0.0, kWho, ": ", where(), " has dropout_p ", op.real("dropout_p"));
  const Shape qs = op.inputs[0].shape();
  const bool unbatched = qs.size() == 2, batch_first = op.integer("batch_first") != 0 || unbatched;
  const i64 E = static_cast<i64>(qs.back()), H = op.integer("num_heads"), d = E / H;
  const bool has_bias = op.inputs[4].defined();

  // (N, len, E) for every layout
  auto to_batch_first = [&](std::size_t j) {
    std::string x = input(j);
    if (unbatched) return gb_.op("Unsqueeze", {x, gb_.ints({0})});
    if (!batch_first) x = gb_.op("Transpose", {x}, {gb_.attr("perm", std::vector<i64>{1, 0, 2})});
    return x;
  };
  const std::string q_in = to_batch_first(0);
  const std::string k_in = op.inputs[1].same(op.inputs[0]) ? q_in : to_batch_first(1);
  const std::string v_in = op.inputs[2].same(op.inputs[1]) ? k_in : to_batch_first(2);

  // W^T (E, 3E) split into the q, k and v blocks; likewise the bias.
  const std::string w_t = gb_.op("Transpose", {input(3)}, {gb_.attr("perm", std::vector<i64>{1, 0})});
  const std::vector<std::string> w = gb_.ops("Split", {w_t, gb_.ints({E, E, E})}, 3, {gb_.attr("axis", i64(1))});
  std::vector<std::string> b;
  if (has_bias) b = gb_.ops("Split", {input(4), gb_.ints({E, E, E})}, 3, {gb_.attr("axis", i64(0))});
  // (N, len, E) -> heads (N, H, len, d)
  auto project = [&](const std::string& x, std::size_t part) {
    std::string y = gb_.op("MatMul", {x, w[part]});
    if (has_bias) y = gb_.op("Add", {y, b[part]});
    y = gb_.op("Reshape", {y, gb_.ints({0, 0, H, d})});
    return gb_.op("Transpose", {y}, {gb_.attr("perm", std::vector<i64>{0, 2, 1, 3})});
  };
  const std::string q = project(q_in, 0), k = project(k_in, 1), v = project(v_in, 2);

  // Masks, as (N, H, L, S)-broadcastable values: attn_mask (L, S) as is or (N H, L, S) split
  // into (N, H, L, S); key_padding_mask (N, S) as (N, 1, 1, S), (S) as is.
  std::vector<std::pair<std::string, bool>> masks;
  if (op.has("attn_mask")) {
    std::string m = array_value("attn_mask");
    const trace::Arg& arg = op.arg("attn_mask");
    const bool is_bool = std::holds_alternative<BoolArray>(arg.value);
    const std::size_t rank =
        is_bool ? std::get<BoolArray>(arg.value).dimension() : std::get<Array<float>>(arg.value).dimension();
    if (rank == 3)
      m = gb_.op("Reshape", {m, gb_.op("Concat", {gb_.ints({-1, H}), gb_.shape(m, 1, 3)}, {gb_.attr("axis", i64(0))})});
    masks.emplace_back(m, is_bool);
  }
  if (op.has("key_padding_mask")) {
    std::string m = array_value("key_padding_mask");
    if (!unbatched) m = gb_.op("Unsqueeze", {m, gb_.ints({1, 2})});
    masks.emplace_back(m, std::holds_alternative<BoolArray>(op.arg("key_padding_mask").value));
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const auto [o, probs] = attend(q, k, v, 4, scale, masks, op.integer("is_causal") != 0);

  // heads (N, H, L, d) -> (N, L, E) -> out_proj, back to the input's layout
  std::string out = gb_.op("Transpose", {o}, {gb_.attr("perm", std::vector<i64>{0, 2, 1, 3})});
  out = gb_.op("Reshape", {out, gb_.ints({0, 0, E})});
  out = gb_.op("MatMul", {out, gb_.op("Transpose", {input(5)}, {gb_.attr("perm", std::vector<i64>{1, 0})})});
  if (op.inputs[6].defined()) out = gb_.op("Add", {out, input(6)});
  if (unbatched) out = gb_.op("Squeeze", {out, gb_.ints({0})});
  else if (!batch_first) out = gb_.op("Transpose", {out}, {gb_.attr("perm", std::vector<i64>{1, 0, 2})});
  set_output(0, out);
  if (op.outputs.size() > 1 && op.outputs[1].defined()) {
    std::string weights = probs;  // (N, H, L, S)
    if (op.integer("average_attn_weights") != 0)
      weights = gb_.op("ReduceMean", {weights}, {gb_.attr("axes", std::vector<i64>{1}), gb_.attr("keepdims", i64(0))});
    if (unbatched) weights = gb_.op("Squeeze", {weights, gb_.ints({0})});
    set_output(1, weights);
  }
}

// ---- the driver ---------------------------------------------------------------------------------

std::vector<std::string> names_or_default(const std::vector<std::string>& given, std::size_t n, const char* what,
                                          const char* prefix) {
  XGRAD_CHECK(given.empty() || given.size() == n, kWho, ": expected ", n, " ", what, " (one per ",
              (std::string(what) == "input_names" ? "example input" : "output of the forward"), "), got ",
              given.size());
  std::vector<std::string> names = given;
  for (std::size_t k = names.size(); k < n; ++k) names.push_back(prefix + std::to_string(k));
  return names;
}

// The graph's input and output names: non-empty (ONNX reads "" as "no value"), unique, none an
// output's and an input's at once, none a state_dict key (the initializers' names). `outputs` may
// be the option as given (before the forward's outputs are counted).
void check_names(const std::vector<std::string>& inputs, bool inputs_given, const std::vector<std::string>& outputs,
                 bool outputs_given, const std::set<std::string>& state_keys) {
  struct Named {
    const std::string* name;
    std::string label;  // "input_names[1] 'x'" or "the default name 'input_1' of input 1"
    bool input;
  };
  std::vector<Named> all;
  for (std::size_t k = 0; k < inputs.size(); ++k)
    all.push_back({&inputs[k], inputs_given ? "input_names[" + std::to_string(k) + "] '" + inputs[k] + "'"
                                            : "the default name '" + inputs[k] + "' of input " + std::to_string(k),
                   true});
  for (std::size_t k = 0; k < outputs.size(); ++k)
    all.push_back({&outputs[k], outputs_given ? "output_names[" + std::to_string(k) + "] '" + outputs[k] + "'"
                                              : "the default name '" + outputs[k] + "' of output " + std::to_string(k),
                   false});
  for (std::size_t i = 0; i < all.size(); ++i) {
    const std::string& name = *all[i].name;
    XGRAD_CHECK(!name.empty(), kWho, ": ", (all[i].input ? "input_names[" : "output_names["),
                i - (all[i].input ? 0 : inputs.size()), "] is empty; ONNX reads an empty name as 'no value': give every ",
                (all[i].input ? "input" : "output"), " a name");
    for (std::size_t j = 0; j < i; ++j)
      XGRAD_CHECK(*all[j].name != name, kWho, ": ", all[i].label, " is also ", all[j].label,
                  (all[i].input == all[j].input ? "" : " (an input and an output may not share a name)"),
                  "; ONNX needs every input and output name to be unique");
    XGRAD_CHECK(!state_keys.count(name), kWho, ": ", all[i].label, " is the state_dict key of a parameter or buffer "
                "of the model, which names its initializer in the graph; choose another name");
  }
}

// "item() on the result of 'sum'"
std::string describe(const trace::ValueRead& r) {
  return r.how + " on " + (r.op == "leaf" ? std::string("a tensor no op made") : "the result of '" + r.op + "'");
}

// The example inputs with every dynamic axis resized to its symbol's `b` size, random values.
std::vector<Input> resized_inputs(const std::vector<Input>& inputs, const std::vector<std::string>& names,
                                  const ExportOptions& options, const std::vector<Symbol>& symbols) {
  std::mt19937_64 rng(20251125);
  std::vector<Input> out;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    Shape s = shape_of_input(inputs[k]);
    if (auto it = options.dynamic_axes().find(names[k]); it != options.dynamic_axes().end())
      for (const auto& [axis, sym] : it->second)
        for (const Symbol& y : symbols)
          if (y.name == sym) s[static_cast<std::size_t>(axis < 0 ? axis + static_cast<i64>(s.size()) : axis)] = y.b;
    if (std::holds_alternative<Tensor<float>>(inputs[k])) {
      std::normal_distribution<float> normal;
      Array<float> v = empty_array<float>(s, "onnx::export_model");
      for (float& x : v) x = normal(rng);
      out.emplace_back(Tensor<float>(std::move(v)));
    } else if (const auto* idx = std::get_if<IndexArray>(&inputs[k])) {
      const i64 lo = idx->size() ? *std::min_element(idx->begin(), idx->end()) : 0;
      const i64 hi = idx->size() ? *std::max_element(idx->begin(), idx->end()) : 0;
      std::uniform_int_distribution<i64> pick(lo, hi);
      IndexArray v = empty_array<std::int64_t>(s, "onnx::export_model");
      for (i64& x : v) x = pick(rng);
      out.emplace_back(std::move(v));
    } else {
      std::bernoulli_distribution masked(0.25);
      BoolArray v = empty_array<bool>(s, "onnx::export_model");
      for (auto&& x : v) x = masked(rng);
      out.emplace_back(std::move(v));
    }
  }
  return out;
}

}  // namespace

void export_model(nn::Module<float>& module, const Forward& forward, const std::vector<Input>& example_inputs,
                  const std::string& path, const ExportOptions& options) {
  XGRAD_CHECK(options.opset_version() == 17, kWho, ": opset_version must be 17, got ", options.opset_version());
  XGRAD_CHECK(!example_inputs.empty(), kWho, ": expected at least one example input, got none");
  const std::vector<std::string> input_names =
      names_or_default(options.input_names(), example_inputs.size(), "input_names", "input_");
  for (std::size_t k = 0; k < example_inputs.size(); ++k)
    if (const auto* t = std::get_if<Tensor<float>>(&example_inputs[k]))
      XGRAD_CHECK(t->defined(), kWho, ": example input ", k, " ('", input_names[k], "') is an undefined tensor");

  // Symbols of the dynamic axes marked on inputs, each with its example size.
  std::vector<Symbol> symbols;
  std::set<std::string> state_keys;
  for (const auto& [key, t] : module.named_parameters()) state_keys.insert(key);
  for (const auto& [key, t] : module.named_buffers()) state_keys.insert(key);
  check_names(input_names, !options.input_names().empty(), options.output_names(), true, state_keys);
  for (const auto& [name, axes] : options.dynamic_axes()) {
    const auto it = std::find(input_names.begin(), input_names.end(), name);
    if (it == input_names.end()) continue;  // an output's: checked after tracing
    const std::size_t k = static_cast<std::size_t>(it - input_names.begin());
    const Shape s = shape_of_input(example_inputs[k]);
    for (const auto& [axis, sym] : axes) {
      const i64 rank = static_cast<i64>(s.size());
      XGRAD_CHECK(axis >= -rank && axis < rank, kWho, ": dynamic axis ", axis, " of input '", name,
                  "' is out of range for its example of shape ", s);
      const i64 ax = axis < 0 ? axis + rank : axis;
      const i64 size = static_cast<i64>(s[static_cast<std::size_t>(ax)]);
      auto found = std::find_if(symbols.begin(), symbols.end(), [&](const Symbol& y) { return y.name == sym; });
      if (found != symbols.end()) {
        XGRAD_CHECK(found->a == size, kWho, ": dynamic axis '", sym, "' is ", found->a, " in input '",
                    input_names[found->input], "' and ", size, " in input '", name, "'");
        continue;
      }
      XGRAD_CHECK(size >= 2, kWho, ": the example size of dynamic axis '", sym, "' (input '", name, "', axis ",
                  axis, ") must be at least 2, got ", size, " (a size of 1 broadcasts)");
      const i64 n = static_cast<i64>(symbols.size());
      symbols.push_back(Symbol{sym, size, size >= 3 + n ? size - 1 - n : size + 1 + n, k, ax});
    }
  }
  for (std::size_t i = 0; i < symbols.size(); ++i)
    for (std::size_t j = i + 1; j < symbols.size(); ++j)
      XGRAD_CHECK(symbols[i].a != symbols[j].a || symbols[i].b != symbols[j].b, kWho, ": dynamic axes '",
                  symbols[i].name, "' and '", symbols[j].name, "' need different sizes in the example inputs to be "
                  "told apart, both are ", symbols[i].a);

  EvalModeGuard eval_mode(module);
  Recording a;
  try {
    a = record(forward, example_inputs);
  } catch (const std::exception& e) {
    XGRAD_CHECK(false, kWho, ": the forward failed on the example inputs: ", e.what());
  }
  const std::vector<std::string> output_names =
      names_or_default(options.output_names(), a.outputs.size(), "output_names", "output_");
  check_names(input_names, !options.input_names().empty(), output_names, !options.output_names().empty(),
              state_keys);
  if (!a.value_reads.empty()) {
    // PyTorch's TracerWarning ("Converting a tensor to a Python boolean might cause the trace to be
    // incorrect"): the number read is a constant to the recording.
    const trace::ValueRead& r = a.value_reads.front();
    std::ostringstream more;
    if (a.value_reads.size() > 1) more << ", and " << a.value_reads.size() - 1 << " more read";
    XGRAD_WARN_ONCE(kWho, ": the forward read a tensor's value into C++ while it was traced (", describe(r),
                    ", after op ", r.after, " of ", a.ops.size(), " recorded", more.str(), "). The recording cannot "
                    "follow what C++ does with that number (a branch, a loop count, a scale): the exported graph "
                    "does what the forward did with the example inputs and may be wrong for other inputs. Compute "
                    "it with xgrad ops (where, masked_fill, mul, ...) to have it recorded");
  }
  for (const auto& [name, axes] : options.dynamic_axes())
    XGRAD_CHECK(std::count(input_names.begin(), input_names.end(), name) +
                        std::count(output_names.begin(), output_names.end(), name) > 0,
                kWho, ": dynamic_axes names '", name, "', which is no input or output name");

  // The second recording, on random inputs with the dynamic axes resized: what changes with the
  // sizes is computed from shapes; an array that changes with the values cannot be exported.
  const std::vector<Input> inputs_b = resized_inputs(example_inputs, input_names, options, symbols);
  std::ostringstream rerun;
  rerun << "on random inputs";
  for (const Symbol& y : symbols)
    rerun << (&y == &symbols[0] ? " with " : ", ") << y.name << " " << y.a << " -> " << y.b;
  if (symbols.empty()) rerun << " of the same sizes";
  const char* fixes = symbols.empty() ? "" : "the model fixes a dynamic axis: ";
  Recording b;
  try {
    b = record(forward, inputs_b);
  } catch (const std::exception& e) {
    XGRAD_CHECK(false, kWho, ": ", fixes, "run again ", rerun.str(), ", the forward fails: ", e.what());
  }
  bool same = a.ops.size() == b.ops.size() && a.outputs.size() == b.outputs.size();
  for (std::size_t i = 0; same && i < a.ops.size(); ++i)
    same = a.ops[i].type == b.ops[i].type && a.ops[i].inputs.size() == b.ops[i].inputs.size() &&
           a.ops[i].outputs.size() == b.ops[i].outputs.size();
  XGRAD_CHECK(same, kWho, ": ", fixes, "run again ", rerun.str(), ", the forward runs other ops (", b.ops.size(),
              " instead of ", a.ops.size(), (a.outputs.size() != b.outputs.size() ? ", other outputs" : ""),
              "): a graph that depends on the inputs cannot be exported",
              (a.value_reads.empty() ? "" : " (the forward reads a tensor's value into C++: " +
                                                describe(a.value_reads.front()) + ")"));

  std::set<std::string> reserved = state_keys;  // no generated name may take one of these
  reserved.insert(input_names.begin(), input_names.end());
  reserved.insert(output_names.begin(), output_names.end());
  Exporter ex(module, example_inputs, input_names, a, b, inputs_b, symbols, rerun.str(), reserved);
  ex.run();
  GraphBuilder& gb = ex.builder();

  for (std::size_t k = 0; k < example_inputs.size(); ++k) {
    const Input& in = example_inputs[k];
    const auto elem = std::holds_alternative<Tensor<float>>(in) ? pb::TensorProto::FLOAT
                      : std::holds_alternative<IndexArray>(in) ? pb::TensorProto::INT64
                                                                : pb::TensorProto::BOOL;
    const Shape s = shape_of_input(in);
    std::vector<std::pair<i64, std::string>> dims;
    const auto axes = options.dynamic_axes().find(input_names[k]);
    for (std::size_t d = 0; d < s.size(); ++d) {
      std::string param;
      if (axes != options.dynamic_axes().end())
        for (const auto& [axis, sym] : axes->second)
          if (axis == static_cast<i64>(d) || axis + static_cast<i64>(s.size()) == static_cast<i64>(d)) param = sym;
      dims.emplace_back(static_cast<i64>(s[d]), param);
    }
    gb.graph_input(input_names[k], elem, dims);
  }
  for (std::size_t k = 0; k < a.outputs.size(); ++k) {
    const std::string value = ex.output_value(k, output_names[k]);
    const Shape s = a.outputs[k].shape();
    std::vector<std::pair<i64, std::string>> dims;
    for (std::size_t d = 0; d < s.size(); ++d) {
      i64 size = 0;
      const std::string param = ex.output_dim_param(k, d, &size);
      dims.emplace_back(size, param);
    }
    if (auto axes = options.dynamic_axes().find(output_names[k]); axes != options.dynamic_axes().end())
      for (const auto& [axis, sym] : axes->second) {
        const i64 rank = static_cast<i64>(s.size());
        XGRAD_CHECK(axis >= -rank && axis < rank, kWho, ": dynamic axis ", axis, " of output '", output_names[k],
                    "' is out of range for its shape ", s);
        auto& [size, param] = dims[static_cast<std::size_t>(axis < 0 ? axis + rank : axis)];
        XGRAD_CHECK(!param.empty(), kWho, ": the model fixes dynamic axis '", sym, "' of output '",
                    output_names[k], "': its size stays ", size, " when the input axes are resized");
        param = sym;
      }
    gb.graph_output(output_names[k], value, dims);
  }

  pb::ModelProto& model = ex.model();
  model.set_ir_version(8);
  model.set_producer_name("xgrad");
  model.set_producer_version("0.1.0");
  pb::OperatorSetIdProto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(options.opset_version());
  model.mutable_graph()->set_name(module.name());
  std::string bytes;
  XGRAD_CHECK(model.SerializeToString(&bytes), kWho, ": protobuf could not serialize the model");
  write_file_atomically(path, [&](std::ostream& out) {
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  });
}

void export_model(nn::Module<float>& module, const Tensor<float>& example_input, const std::string& path,
                  const ExportOptions& options) {
  export_model(
      module, [&module](const Inputs& in) { return std::vector<Tensor<float>>{module.forward(in.tensor(0))}; },
      {example_input}, path, options);
}

}  // namespace xgrad::onnx
