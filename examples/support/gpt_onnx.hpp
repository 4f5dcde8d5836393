// --export-onnx of the GPT programs: idx (batch, seq) int64 -> logits (batch, seq, V), batch and
// seq dynamic, and FILE.sample.json: inputs with this program's logits (onnx_sample.hpp).
#pragma once

#include <xgrad/models/gpt.hpp>

#include "onnx_sample.hpp"

namespace gpt_onnx {

// `samples`: the inputs of FILE.sample.json (default: the example alone).
inline void export_model(xgrad::models::GPT<float>& model, const xgrad::IndexArray& example, const std::string& path,
                         std::vector<xgrad::IndexArray> samples = {}) {
  xgrad::onnx::export_model(
      model,
      [&model](const xgrad::onnx::Inputs& in) {
        return std::vector<xgrad::Tensor<float>>{model.forward(in.indices(0))};
      },
      {example}, path,
      xgrad::onnx::ExportOptions()
          .input_names({"idx"})
          .output_names({"logits"})
          .dynamic_axes({{"idx", {{0, "batch"}, {1, "seq"}}}}));
  xgrad::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  if (samples.empty()) samples.push_back(example);
  std::vector<onnx_sample::Run> runs;
  for (const xgrad::IndexArray& idx : samples) runs.push_back({{{"idx", idx}}, {{"logits", model.forward(idx)}}});
  onnx_sample::write(path, runs);
  model.train(was_training);
}

}  // namespace gpt_onnx
