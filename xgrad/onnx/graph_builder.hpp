// GraphBuilder: appends nodes, constants, inputs and outputs to an onnx::GraphProto (protobuf's
// class generated from onnx.proto), naming every value. Internal to xgrad::onnx.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <onnx/onnx_pb.h>

#include <xgrad/backend/array.hpp>

namespace pb = ::onnx;

namespace xgrad::onnx {

using Attribute = pb::AttributeProto;

class GraphBuilder {
 public:
  explicit GraphBuilder(pb::GraphProto& graph) : g_(graph) {}

  // A name the graph's generated names must avoid (a graph input or output, an initializer).
  void reserve(const std::string& name) { reserved_.insert(name); }

  // A node of the default domain with one output; returns the output's name.
  std::string op(const std::string& type, const std::vector<std::string>& inputs,
                 const std::vector<Attribute>& attributes = {});
  // The same with n outputs.
  std::vector<std::string> ops(const std::string& type, const std::vector<std::string>& inputs, std::size_t n,
                               const std::vector<Attribute>& attributes = {});

  static Attribute attr(const std::string& name, std::int64_t value);
  static Attribute attr(const std::string& name, float value);
  static Attribute attr(const std::string& name, const std::vector<std::int64_t>& values);

  // Constants (initializers), shared when equal: a float or int64 scalar, a 1-D int64 list.
  std::string scalar(float value);
  std::string scalar_int(std::int64_t value);
  std::string ints(const std::vector<std::int64_t>& values);
  // An array as a new initializer named after `hint`.
  std::string constant(const Array<float>& value, const std::string& hint);
  std::string constant(const IndexArray& value, const std::string& hint);
  std::string constant(const BoolArray& value, const std::string& hint);
  // A named initializer (a parameter or buffer under its state_dict key).
  void initializer(const std::string& name, const Array<float>& value);

  // Shape(x)[start:end] as a 1-D int64 value (opset 15's start/end attributes).
  std::string shape(const std::string& x, std::int64_t start, std::int64_t end);

  // dims: (size, symbolic name); a non-empty name makes the dim dynamic.
  void graph_input(const std::string& name, int elem_type,
                   const std::vector<std::pair<std::int64_t, std::string>>& dims);
  // The output `name` reads `value` (through an Identity node).
  void graph_output(const std::string& name, const std::string& value,
                    const std::vector<std::pair<std::int64_t, std::string>>& dims);

 private:
  std::string fresh(const std::string& hint);
  pb::TensorProto* new_initializer(const std::string& name, int elem_type, const std::vector<std::size_t>& shape);

  pb::GraphProto& g_;
  std::size_t counter_ = 0;
  std::map<std::string, std::string> shared_;  // key of a small constant -> its name
  std::set<std::string> reserved_;
};

}  // namespace xgrad::onnx
