// The model file of export_model (exporter.hpp): the graph's inputs (with their dynamic dims) and
// outputs, the model's header (IR version 8, opset 17), serialized and written atomically.
#include <xgrad/onnx/exporter.hpp>

#include <xgrad/serialize/atomic_file.hpp>

namespace xgrad::onnx::detail {

void write_model(Exporter& ex, nn::Module<float>& module, const std::vector<Input>& example_inputs,
                 const std::vector<std::string>& input_names, const std::vector<std::string>& output_names,
                 const std::vector<Tensor<float>>& outputs, const ExportOptions& options, const std::string& path) {
  GraphBuilder& gb = ex.builder();

  for (std::size_t k = 0; k < example_inputs.size(); ++k) {
    const Input& in = example_inputs[k];
    const auto elem = std::holds_alternative<Tensor<float>>(in) ? pb::TensorProto::FLOAT
                      : std::holds_alternative<IndexArray>(in)  ? pb::TensorProto::INT64
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
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    const std::string value = ex.output_value(k, output_names[k]);
    const Shape s = outputs[k].shape();
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
        XGRAD_CHECK(!param.empty(), kWho, ": the model fixes dynamic axis '", sym, "' of output '", output_names[k],
                    "': its size stays ", size, " when the input axes are resized");
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
  write_file_atomically(
      path, [&](std::ostream& out) { out.write(bytes.data(), static_cast<std::streamsize>(bytes.size())); });
}

}  // namespace xgrad::onnx::detail
