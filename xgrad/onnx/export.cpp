// export_model (export.hpp): check the options, trace the forward twice (the second time on
// random inputs with the dynamic axes resized), hand both recordings to the graph walk
// (exporter.hpp), and write the model with its graph inputs and outputs (model_file.cpp).
#include <xgrad/onnx/export.hpp>

#include <algorithm>
#include <random>
#include <set>
#include <sstream>

#include <xgrad/base/warning.hpp>
#include <xgrad/core/grad_mode.hpp>
#include <xgrad/onnx/exporter.hpp>

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

namespace detail {

Shape shape_of_input(const Input& in) {
  return std::visit(
      [](const auto& v) -> Shape {
        if constexpr (std::is_same_v<std::decay_t<decltype(v)>, Tensor<float>>) return v.shape();
        else return Shape(v.shape().begin(), v.shape().end());
      },
      in);
}

}  // namespace detail

namespace {

using namespace detail;

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
  write_model(ex, module, example_inputs, input_names, output_names, a.outputs, options, path);
}

void export_model(nn::Module<float>& module, const Tensor<float>& example_input, const std::string& path,
                  const ExportOptions& options) {
  export_model(
      module, [&module](const Inputs& in) { return std::vector<Tensor<float>>{module.forward(in.tensor(0))}; },
      {example_input}, path, options);
}

}  // namespace xgrad::onnx
