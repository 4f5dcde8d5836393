// xgrad::onnx::export_model: torch.onnx.export for xgrad models. Runs the model's forward once
// in eval mode on example inputs while recording the ops it executes (xgrad/core/trace.hpp), and
// writes them as an ONNX model (opset 17, IR version 8) that onnx's checker accepts and ONNX
// Runtime runs, with the parameters and buffers as initializers named by their state_dict keys.
//
// compile: snippet
//   auto layer = std::make_shared<nn::TransformerEncoderLayer<float>>(nn::TransformerEncoderLayerOptions(16, 4));
//   auto model = std::make_shared<nn::TransformerEncoder<float>>(layer, 2);
//   Tensor<float> x = randn<float>({5, 2, 16});  // (seq, batch, d_model)
//   onnx::export_model(*model,
//                      [&](const onnx::Inputs& in) {
//                        return std::vector<Tensor<float>>{model->forward(in.tensor(0))};
//                      },
//                      {x}, "encoder.onnx",
//                      onnx::ExportOptions().input_names({"x"}).output_names({"y"})
//                          .dynamic_axes({{"x", {{0, "seq"}, {1, "batch"}}}}));
//
// Inputs are float tensors, index arrays (int64: embedding indices) or bool arrays (attention
// masks, true = may not attend). Arrays reach the model's ops by value; an array argument of an
// op that equals an input (the same buffer, or the same shape and values) reads that input, any
// other is a constant.
//
// Dynamic axes: the forward is traced a second time with every dynamic axis resized, and the
// two recordings are compared: a size that changes with them is computed in the graph from the
// inputs' shapes; a constant or an op sequence that changes, or a forward that fails at the new
// sizes, means that the model fixes the axis, and export_model throws saying so.
//
// Ops covered: see docs/onnx.md. An op without an exporter throws naming it and its place in the
// recording. The file is written atomically: on any failure nothing is left at `path`.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include <xgrad/arg.hpp>
#include <xgrad/nn/module.hpp>

namespace xgrad::onnx {

// One model input: a float tensor, an int64 index array or a bool mask.
using Input = std::variant<Tensor<float>, IndexArray, BoolArray>;

// The inputs as the forward sees them, with typed access (throwing when the kind differs).
class Inputs {
 public:
  explicit Inputs(const std::vector<Input>& inputs) : inputs_(inputs) {}
  std::size_t size() const { return inputs_.size(); }
  const Tensor<float>& tensor(std::size_t i) const;
  const IndexArray& indices(std::size_t i) const;
  const BoolArray& mask(std::size_t i) const;

 private:
  const std::vector<Input>& inputs_;
};

// The forward to export: the inputs -> the outputs.
using Forward = std::function<std::vector<Tensor<float>>(const Inputs&)>;

// input or output name -> {axis -> symbolic name}; axes sharing a name share a size.
using DynamicAxes = std::map<std::string, std::map<std::int64_t, std::string>>;

struct ExportOptions {
  // Default: "input_0", "input_1", ... and "output_0", ...; names must be unique.
  XGRAD_ARG(std::vector<std::string>, input_names);
  XGRAD_ARG(std::vector<std::string>, output_names);
  XGRAD_ARG(DynamicAxes, dynamic_axes);
  XGRAD_ARG(std::int64_t, opset_version) = 17;  // the only one supported
};

// Exports `forward` (over `module`'s parameters and buffers) as traced on `example_inputs`.
// The module is put in eval mode for the tracing and given its modes back after.
void export_model(nn::Module<float>& module, const Forward& forward, const std::vector<Input>& example_inputs,
                  const std::string& path, const ExportOptions& options = {});

// The module's single-input forward (Sequential, Linear, TransformerEncoder ...).
void export_model(nn::Module<float>& module, const Tensor<float>& example_input, const std::string& path,
                  const ExportOptions& options = {});

}  // namespace xgrad::onnx
