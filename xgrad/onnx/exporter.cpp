// The graph walk of export_model (exporter.hpp): each recorded op through its row of the op
// table, the values the rows read (inputs, initializers, constants, sizes from the shapes).
#include <xgrad/onnx/exporter.hpp>

#include <optional>
#include <sstream>

#include <xgrad/onnx/op_table.hpp>

namespace xgrad::onnx::detail {

namespace {

constexpr const char* kChanges = "is made inside the forward and differs when the forward runs again ";
constexpr const char* kUnrecordable =
    ": it is computed outside xgrad's ops, which ONNX cannot record (when it "
    "follows a dynamic axis, the model fixes that axis)";

// 0, 1, ..., n-1 (1-D)
bool is_arange(const IndexArray& a) {
  if (a.dimension() != 1) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a(i) != static_cast<i64>(i)) return false;
  return true;
}

}  // namespace

Exporter::Exporter(nn::Module<float>& module, const std::vector<Input>& inputs,
                   const std::vector<std::string>& input_names, const Recording& a, const Recording& b,
                   const std::vector<Input>& inputs_b, std::vector<Symbol> symbols, std::string rerun,
                   const std::set<std::string>& reserved_names)
    : input_names_(input_names),
      a_(a),
      b_(b),
      inputs_b_(inputs_b),
      symbols_(std::move(symbols)),
      rerun_(std::move(rerun)),
      gb_(*model_.mutable_graph()) {
  for (const std::string& name : reserved_names) gb_.reserve(name);
  for (const auto& [key, t] : module.named_parameters()) state_keys_.emplace(t.node().get(), key);
  for (const auto& [key, t] : module.named_buffers()) state_keys_.emplace(t.node().get(), key);
  for (std::size_t k = 0; k < inputs.size(); ++k)
    if (const auto* t = std::get_if<Tensor<float>>(&inputs[k])) values_[t->node().get()] = input_names[k];
}

void Exporter::run() {
  for (cur_ = 0; cur_ < a_.ops.size(); ++cur_) emit(a_.ops[cur_]);
}

// The value a forward output reads (`name`: its output name).
std::string Exporter::output_value(std::size_t k, const std::string& name) {
  const Tensor<float>& t = a_.outputs[k];
  XGRAD_CHECK(t.defined(), kWho, ": output ", k, " ('", name, "') of the forward is undefined");
  XGRAD_CHECK(b_.outputs[k].defined(), kWho, ": output ", k, " ('", name,
              "') of the forward is undefined when the forward runs again ", rerun_);
  cur_ = a_.ops.size();  // past the ops: where() names the outputs
  const std::string what = "output " + std::to_string(k) + " ('" + name + "') of the forward";
  return tensor_value(t, b_.outputs[k], what);
}

// A dim of an output: "" when fixed (its size in *fixed), else the symbol (or product) it follows,
// or a name of its own when it follows the dynamic axes otherwise.
std::string Exporter::output_dim_param(std::size_t k, std::size_t d, i64* fixed) {
  const i64 va = static_cast<i64>(a_.outputs[k].shape()[d]);
  const i64 vb = static_cast<i64>(b_.outputs[k].shape()[d]);
  *fixed = va;
  if (va == vb) return "";
  const std::string symbolic = describe(va, vb);
  return symbolic.empty() ? "output_" + std::to_string(k) + "_dim_" + std::to_string(d) : symbolic;
}

// ---- values ------------------------------------------------------------------------------------

// `what`: "output 0 ('y') of the forward" or "input 1 of op 'add' (op 3 of 5 recorded)".
std::string Exporter::tensor_value(const Tensor<float>& t, const Tensor<float>& tb, const std::string& what) {
  const void* key = t.node().get();
  if (auto it = values_.find(key); it != values_.end()) return it->second;
  if (auto it = state_keys_.find(key); it != state_keys_.end()) {
    gb_.initializer(it->second, t.value());
    values_[key] = it->second;
    return it->second;
  }
  // A tensor made inside the forward (not by a recorded op): a constant, if it does not change.
  if (!same_array(t.value(), tb.value()))
    XGRAD_CHECK(false, kWho, ": ", what, " is not computed by a recorded op: ", origin(t), ". Of shape ", t.shape(),
                ", it ", kChanges, rerun_,
                (t.shape() == tb.shape() ? std::string() : xgrad::detail::concat(" (then of shape ", tb.shape(), ")")),
                ", so it is no constant either: ONNX cannot record it (when it follows a dynamic axis, the model "
                "fixes that axis)");
  std::string name = gb_.constant(t.value(), "const");
  values_[key] = name;
  return name;
}

// Where a tensor that no recorded op made comes from, as far as the recording tells.
std::string Exporter::origin(const Tensor<float>& t) const {
  for (const trace::FunctionOutput& f : a_.function_outputs)
    if (f.tensor.same(t))
      return "it is an output of custom autograd::Function '" + f.function +
             "', whose forward computes it outside xgrad's ops (only xgrad ops are recorded)";
  return "it is a tensor made outside xgrad's ops (by a factory such as ones(), or from values read into C++ "
         "such as Tensor(x.value() * 2))";
}

std::string Exporter::input(std::size_t j) {
  const trace::Op& op = a_.ops[cur_];
  XGRAD_CHECK(j < op.inputs.size() && j < b_.ops[cur_].inputs.size(), kWho, ": ", where(), " has no input ", j);
  return tensor_value(op.inputs[j], b_.ops[cur_].inputs[j], "input " + std::to_string(j) + " of " + where());
}

template <class A>
int Exporter::match_input(const trace::Arg& arg, const std::vector<Input>& inputs) {
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
std::string Exporter::array_value_of(const trace::Arg& arg, const trace::Arg& arg_b) {
  // The resized inputs are random: a match there is no coincidence.
  const int k = match_input<A>(arg_b, inputs_b_);
  if (k >= 0) return input_names_[static_cast<std::size_t>(k)];
  const A& v = std::get<A>(arg.value);
  const A& vb = std::get<A>(arg_b.value);
  if constexpr (std::is_same_v<A, IndexArray>) {
    // Positions 0, 1, ..., n-1 with n a dynamic size: Range(0, n).
    if (v.size() != vb.size() && is_arange(v) && is_arange(vb) && v.size() > 0) {
      const std::string n = dynamic_size(static_cast<i64>(v.size()), static_cast<i64>(vb.size()), "length of a range");
      return gb_.op("Range", {gb_.scalar_int(0), gb_.op("Squeeze", {n, gb_.ints({0})}), gb_.scalar_int(1)});
    }
  }
  if (!same_array(v, vb))
    XGRAD_CHECK(false, kWho, ": the argument '", arg.name, "' of ", where(), " ", kChanges, rerun_, kUnrecordable);
  return gb_.constant(v, arg.name);
}

// An index, bool or float array argument of the current op: a model input or a constant.
std::string Exporter::array_value(const std::string& name) {
  const trace::Arg& arg = a_.ops[cur_].arg(name);
  const trace::Arg& arg_b = b_.ops[cur_].arg(name);
  if (std::holds_alternative<IndexArray>(arg.value)) return array_value_of<IndexArray>(arg, arg_b);
  if (std::holds_alternative<BoolArray>(arg.value)) return array_value_of<BoolArray>(arg, arg_b);
  return array_value_of<Array<float>>(arg, arg_b);
}

void Exporter::set_output(std::size_t k, const std::string& name) {
  const trace::Op& op = a_.ops[cur_];
  if (k < op.outputs.size() && op.outputs[k].defined()) values_[op.outputs[k].node().get()] = name;
}

// ---- sizes that may follow the dynamic axes -----------------------------------------------

std::string Exporter::where() const {
  if (cur_ >= a_.ops.size())
    return "the forward's outputs (after the " + std::to_string(a_.ops.size()) + " ops recorded)";
  const trace::Op& op = a_.ops[cur_];
  std::ostringstream s;
  s << "op '" << op.type << "' (op " << op.index + 1 << " of " << a_.ops.size() << " recorded";
  if (op.index > 0) s << ", after '" << a_.ops[op.index - 1].type << "'";
  s << ")";
  return s.str();
}

// A size that is va in the first recording and vb in the second, as factor * s (* t): one
// dynamic axis, a multiple of one, or the product of two. s is null when none fits.
Exporter::SizeMatch Exporter::match(i64 va, i64 vb) const {
  for (const Symbol& s : symbols_)
    if (s.a == va && s.b == vb) return {&s, nullptr, 1};
  for (const Symbol& s : symbols_)
    if (va % s.a == 0 && vb % s.b == 0 && va / s.a == vb / s.b) return {&s, nullptr, va / s.a};
  for (const Symbol& s : symbols_)
    for (const Symbol& t : symbols_)
      if (&s < &t && s.a * t.a == va && s.b * t.b == vb) return {&s, &t, 1};
  return {};
}

std::string Exporter::describe(i64 va, i64 vb) const {
  const SizeMatch m = match(va, vb);
  if (m.s == nullptr) return "";
  return (m.factor != 1 ? std::to_string(m.factor) + "*" : "") + m.s->name + (m.t ? "*" + m.t->name : "");
}

// The 1-D int64 value of one size: Shape(input)[axis] (times a factor).
std::string Exporter::symbol_size(const Symbol& s) {
  auto it = symbol_values_.find(s.name);
  if (it != symbol_values_.end()) return it->second;
  const std::string v = gb_.shape(input_names_[s.input], s.axis, s.axis + 1);
  symbol_values_[s.name] = v;
  return v;
}

std::string Exporter::dynamic_size(i64 va, i64 vb, const char* what) {
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
std::string Exporter::sizes(const std::vector<i64>& va, const std::vector<i64>& vb, const char* what) {
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

std::vector<i64> Exporter::out_dims(std::size_t k, bool resized) const {
  const Shape& s = (resized ? b_.ops : a_.ops)[cur_].outputs[k].shape();
  return std::vector<i64>(s.begin(), s.end());
}

std::string Exporter::output_shape_value(const char* what) {
  return sizes(out_dims(0, false), out_dims(0, true), what);
}

i64 Exporter::int_arg(const char* name, bool resized) const { return (resized ? b_.ops : a_.ops)[cur_].integer(name); }

std::string Exporter::scalar(const std::string& name) {
  return gb_.scalar(static_cast<float>(a_.ops[cur_].real(name)));
}

// ---- the walk ----------------------------------------------------------------------------------

void Exporter::emit(const trace::Op& op) {
  const std::optional<OpKind> kind = op.kind;
  XGRAD_CHECK(kind.has_value(), kWho, ": no exporter for ", where(),
              ": it is no op of xgrad's (xgrad/core/op_kinds.hpp lists them), e.g. the node of a custom "
              "autograd::Function run with gradients on; docs/onnx.md lists the ops covered");
  const OpExport& row = op_export(*kind);
  XGRAD_CHECK(row.write != nullptr, kWho, ": no exporter for ", where(), ": ", row.refusal,
              "; docs/onnx.md lists the ops covered");
  row.write(*this, op);
}

}  // namespace xgrad::onnx::detail
