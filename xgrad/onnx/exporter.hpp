// The graph walk of export_model (export.hpp), internal to xgrad::onnx: the forward's two
// recordings (export.cpp makes them) in, an onnx ModelProto out. Each recorded op is written by its
// kind's row of the op table (op_table.hpp); the rows read the op's inputs, arguments and sizes
// through the Exporter, which knows what every tensor of the recording is in the graph (an input,
// an initializer under its state_dict key, a constant, an earlier op's output).
//
// Numbers that change with the dynamic axes (reshape targets, slice bounds) are computed in the
// graph: each dynamic axis is a Shape(input)[axis] slice, and a size that changed between the two
// recordings is matched to one axis, a multiple of one, or the product of two. An index array
// made in the forward that is 0, 1, ..., n-1 in both recordings (positions) becomes Range(0, n).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <onnx/onnx_pb.h>

#include <xgrad/core/trace.hpp>
#include <xgrad/onnx/export.hpp>
#include <xgrad/onnx/graph_builder.hpp>

namespace xgrad::onnx::detail {

using i64 = std::int64_t;
inline constexpr const char* kWho = "onnx::export_model";

// The forward run once under a recorder, in no-grad mode.
struct Recording {
  std::vector<trace::Op> ops;
  std::vector<Tensor<float>> outputs;
  std::vector<trace::ValueRead> value_reads;
  std::vector<trace::FunctionOutput> function_outputs;
};

// A dynamic axis of the inputs.
struct Symbol {
  std::string name;
  i64 a = 0, b = 0;       // its size in the example inputs, and in the resized ones
  std::size_t input = 0;  // where it is read at run time
  i64 axis = 0;
};

class Exporter {
 public:
  // b: the same forward run again on inputs_b (random values, dynamic axes resized), described by rerun.
  Exporter(nn::Module<float>& module, const std::vector<Input>& inputs, const std::vector<std::string>& input_names,
           const Recording& a, const Recording& b, const std::vector<Input>& inputs_b, std::vector<Symbol> symbols,
           std::string rerun, const std::set<std::string>& reserved_names);

  pb::ModelProto& model() { return model_; }
  GraphBuilder& builder() { return gb_; }

  // Writes every recorded op, in order.
  void run();

  // The value a forward output reads (`name`: its output name).
  std::string output_value(std::size_t k, const std::string& name);
  // A dim of an output: "" when fixed (its size in *fixed), else the symbol (or product) it follows,
  // or a name of its own when it follows the dynamic axes otherwise.
  std::string output_dim_param(std::size_t k, std::size_t d, i64* fixed);

  // ---- for the op table: the op being written ---------------------------------------------------

  // The value of its input j.
  std::string input(std::size_t j);
  // An index, bool or float array argument: a model input or a constant.
  std::string array_value(const std::string& name);
  // A real argument as a float scalar constant.
  std::string scalar(const std::string& name);
  // Its output k reads `value`.
  void set_output(std::size_t k, const std::string& value);
  // Its output 0's shape as a 1-D int64 value, computed from the inputs' shapes where it follows
  // the dynamic axes (`what` names it in errors).
  std::string output_shape_value(const char* what);
  // An integer argument, in the first recording or in the resized one.
  i64 int_arg(const char* name, bool resized) const;
  // A 1-D int64 value: constant where the two recordings agree, computed from shapes elsewhere.
  std::string sizes(const std::vector<i64>& va, const std::vector<i64>& vb, const char* what);
  // "op 'relu' (op 2 of 5 recorded, after 'linear')", for messages.
  std::string where() const;

 private:
  struct SizeMatch {
    const Symbol* s = nullptr;
    const Symbol* t = nullptr;
    i64 factor = 1;
  };

  void emit(const trace::Op& op);
  std::string tensor_value(const Tensor<float>& t, const Tensor<float>& tb, const std::string& what);
  std::string origin(const Tensor<float>& t) const;
  template <class A>
  static int match_input(const trace::Arg& arg, const std::vector<Input>& inputs);
  template <class A>
  std::string array_value_of(const trace::Arg& arg, const trace::Arg& arg_b);
  SizeMatch match(i64 va, i64 vb) const;
  std::string describe(i64 va, i64 vb) const;
  std::string symbol_size(const Symbol& s);
  std::string dynamic_size(i64 va, i64 vb, const char* what);
  std::vector<i64> out_dims(std::size_t k, bool resized) const;

  const std::vector<std::string>& input_names_;
  const Recording& a_;
  const Recording& b_;
  const std::vector<Input>& inputs_b_;
  std::vector<Symbol> symbols_;
  std::string rerun_;
  pb::ModelProto model_;
  GraphBuilder gb_;
  std::unordered_map<const void*, std::string> values_;
  std::unordered_map<const void*, std::string> state_keys_;
  std::map<std::string, std::string> symbol_values_;
  std::size_t cur_ = 0;
};

// export.cpp
Shape shape_of_input(const Input& in);

// model_file.cpp: the graph's inputs and outputs (the forward's `outputs` as first recorded), the
// model's header, the file at `path` (nothing left there on failure).
void write_model(Exporter& ex, nn::Module<float>& module, const std::vector<Input>& example_inputs,
                 const std::vector<std::string>& input_names, const std::vector<std::string>& output_names,
                 const std::vector<Tensor<float>>& outputs, const ExportOptions& options, const std::string& path);

template <class A>
bool same_array(const A& x, const A& y) {
  return x.shape() == y.shape() && std::equal(x.begin(), x.end(), y.begin());
}

}  // namespace xgrad::onnx::detail
