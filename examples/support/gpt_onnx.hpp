// --export-onnx of the GPT programs: idx (batch, seq) int64 -> logits (batch, seq, V), batch and
// seq dynamic, and FILE.sample.json: `example` with this program's logits (onnx_sample.hpp).
#pragma once

#include <xgrad/models/gpt.hpp>

#include "onnx_sample.hpp"

namespace gpt_onnx {

inline void export_model(xgrad::models::GPT<float>& model, const xgrad::IndexArray& example, const std::string& path) {
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
  onnx_sample::write(path, {{{{"idx", example}}, {{"logits", model.forward(example)}}}});
  model.train(was_training);
}

}  // namespace gpt_onnx
