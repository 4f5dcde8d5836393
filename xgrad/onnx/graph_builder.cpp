// GraphBuilder (graph_builder.hpp): nodes, initializers and value infos of an ONNX graph.
#include <xgrad/onnx/graph_builder.hpp>

#include <cstring>
#include <sstream>

namespace xgrad::onnx {

std::string GraphBuilder::fresh(const std::string& hint) {
  std::string name;
  do {
    name = hint + "_" + std::to_string(counter_++);
  } while (reserved_.count(name));
  return name;
}

std::vector<std::string> GraphBuilder::ops(const std::string& type, const std::vector<std::string>& inputs,
                                           std::size_t n, const std::vector<Attribute>& attributes) {
  pb::NodeProto* node = g_.add_node();
  node->set_op_type(type);
  node->set_name(fresh(type));
  for (const std::string& in : inputs) node->add_input(in);
  std::vector<std::string> outputs;
  for (std::size_t k = 0; k < n; ++k) {
    outputs.push_back(fresh(type + "_out"));
    node->add_output(outputs.back());
  }
  for (const Attribute& a : attributes) *node->add_attribute() = a;
  return outputs;
}

std::string GraphBuilder::op(const std::string& type, const std::vector<std::string>& inputs,
                             const std::vector<Attribute>& attributes) {
  return ops(type, inputs, 1, attributes)[0];
}

Attribute GraphBuilder::attr(const std::string& name, std::int64_t value) {
  Attribute a;
  a.set_name(name);
  a.set_type(pb::AttributeProto::INT);
  a.set_i(value);
  return a;
}

Attribute GraphBuilder::attr(const std::string& name, float value) {
  Attribute a;
  a.set_name(name);
  a.set_type(pb::AttributeProto::FLOAT);
  a.set_f(value);
  return a;
}

Attribute GraphBuilder::attr(const std::string& name, const std::vector<std::int64_t>& values) {
  Attribute a;
  a.set_name(name);
  a.set_type(pb::AttributeProto::INTS);
  for (std::int64_t v : values) a.add_ints(v);
  return a;
}

pb::TensorProto* GraphBuilder::new_initializer(const std::string& name, int elem_type,
                                               const std::vector<std::size_t>& shape) {
  pb::TensorProto* t = g_.add_initializer();
  t->set_name(name);
  t->set_data_type(elem_type);
  for (std::size_t d : shape) t->add_dims(static_cast<std::int64_t>(d));
  return t;
}

void GraphBuilder::initializer(const std::string& name, const Array<float>& value) {
  pb::TensorProto* t = new_initializer(name, pb::TensorProto::FLOAT, {value.shape().begin(), value.shape().end()});
  t->set_raw_data(value.data(), value.size() * sizeof(float));  // little-endian, as ONNX stores raw data
}

std::string GraphBuilder::constant(const Array<float>& value, const std::string& hint) {
  const std::string name = fresh(hint);
  initializer(name, value);
  return name;
}

std::string GraphBuilder::constant(const IndexArray& value, const std::string& hint) {
  const std::string name = fresh(hint);
  pb::TensorProto* t = new_initializer(name, pb::TensorProto::INT64, {value.shape().begin(), value.shape().end()});
  t->set_raw_data(value.data(), value.size() * sizeof(std::int64_t));
  return name;
}

std::string GraphBuilder::constant(const BoolArray& value, const std::string& hint) {
  const std::string name = fresh(hint);
  pb::TensorProto* t = new_initializer(name, pb::TensorProto::BOOL, {value.shape().begin(), value.shape().end()});
  std::string bytes(value.size(), '\0');
  for (std::size_t i = 0; i < value.size(); ++i) bytes[i] = value.data()[i] ? 1 : 0;
  t->set_raw_data(bytes);
  return name;
}

std::string GraphBuilder::scalar(float value) {
  std::ostringstream key;
  key.precision(9);
  key << "f" << value;
  auto it = shared_.find(key.str());
  if (it != shared_.end()) return it->second;
  const std::string name = fresh("scalar");
  new_initializer(name, pb::TensorProto::FLOAT, {})->set_raw_data(&value, sizeof value);
  return shared_[key.str()] = name;
}

std::string GraphBuilder::scalar_int(std::int64_t value) {
  const std::string key = "i" + std::to_string(value);
  auto it = shared_.find(key);
  if (it != shared_.end()) return it->second;
  const std::string name = fresh("scalar");
  new_initializer(name, pb::TensorProto::INT64, {})->set_raw_data(&value, sizeof value);
  return shared_[key] = name;
}

std::string GraphBuilder::ints(const std::vector<std::int64_t>& values) {
  std::string key = "l";
  for (std::int64_t v : values) key += std::to_string(v) + ",";
  auto it = shared_.find(key);
  if (it != shared_.end()) return it->second;
  const std::string name = fresh("ints");
  new_initializer(name, pb::TensorProto::INT64, {values.size()})
      ->set_raw_data(values.data(), values.size() * sizeof(std::int64_t));
  return shared_[key] = name;
}

std::string GraphBuilder::shape(const std::string& x, std::int64_t start, std::int64_t end) {
  return op("Shape", {x}, {attr("start", start), attr("end", end)});
}

namespace {
void set_type(pb::ValueInfoProto* v, int elem_type, const std::vector<std::pair<std::int64_t, std::string>>& dims) {
  pb::TypeProto_Tensor* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem_type);
  pb::TensorShapeProto* s = t->mutable_shape();
  for (const auto& [size, param] : dims) {
    pb::TensorShapeProto_Dimension* d = s->add_dim();
    if (param.empty()) d->set_dim_value(size);
    else d->set_dim_param(param);
  }
}
}  // namespace

void GraphBuilder::graph_input(const std::string& name, int elem_type,
                               const std::vector<std::pair<std::int64_t, std::string>>& dims) {
  set_type(g_.add_input(), elem_type, dims);
  g_.mutable_input(g_.input_size() - 1)->set_name(name);
}

void GraphBuilder::graph_output(const std::string& name, const std::string& value,
                                const std::vector<std::pair<std::int64_t, std::string>>& dims) {
  pb::NodeProto* node = g_.add_node();
  node->set_op_type("Identity");
  node->set_name(fresh("output"));
  node->add_input(value);
  node->add_output(name);
  pb::ValueInfoProto* v = g_.add_output();
  v->set_name(name);
  set_type(v, pb::TensorProto::FLOAT, dims);
}

}  // namespace xgrad::onnx
