// --export-onnx FILE of the training programs: after training, the model goes to FILE
// (xgrad::onnx::export_model) and, beside it, FILE.sample.json: a few inputs with this program's
// own outputs for them, in the form tests/onnx/check_onnx_runtime.cjs reads, so that a runtime can
// be checked against xgrad on the trained model.
#pragma once

#include <fstream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <xgrad/core/grad_mode.hpp>
#include <xgrad/onnx/export.hpp>
#include <xgrad/serialize/atomic_file.hpp>

namespace onnx_sample {

// One run: named inputs and the outputs they give.
struct Run {
  std::vector<std::pair<std::string, xgrad::onnx::Input>> inputs;
  std::vector<std::pair<std::string, xgrad::Tensor<float>>> outputs;
};

namespace detail {
template <class Range>
void write_values(std::ostream& out, const Range& values) {
  out << '[';
  bool first = true;
  for (auto v : values) {
    out << (first ? "" : ",") << +v;
    first = false;
  }
  out << ']';
}

template <class Dims, class Values>
void write_array(std::ostream& out, const char* type, const Dims& dims, const Values& values) {
  out << "{\"type\":\"" << type << "\",\"dims\":";
  write_values(out, dims);
  out << ",\"data\":";
  write_values(out, values);
  out << '}';
}

inline void write_input(std::ostream& out, const xgrad::onnx::Input& in) {
  if (const auto* t = std::get_if<xgrad::Tensor<float>>(&in)) write_array(out, "float32", t->shape(), t->value());
  else if (const auto* i = std::get_if<xgrad::IndexArray>(&in)) write_array(out, "int64", i->shape(), *i);
  else write_array(out, "bool", std::get<xgrad::BoolArray>(in).shape(), std::get<xgrad::BoolArray>(in));
}
}  // namespace detail

// Writes `model_path`.sample.json (atomically) for the model file `model_path`.
inline void write(const std::string& model_path, const std::vector<Run>& runs) {
  const std::string name = model_path.substr(model_path.find_last_of('/') + 1);
  xgrad::write_file_atomically(model_path + ".sample.json", [&](std::ostream& out) {
    out.precision(std::numeric_limits<float>::max_digits10);
    out << "{\"model\":\"" << name << "\",\"runs\":[";
    for (std::size_t r = 0; r < runs.size(); ++r) {
      out << (r ? "," : "") << "{\"inputs\":{";
      for (std::size_t k = 0; k < runs[r].inputs.size(); ++k) {
        out << (k ? "," : "") << '"' << runs[r].inputs[k].first << "\":";
        detail::write_input(out, runs[r].inputs[k].second);
      }
      out << "},\"outputs\":{";
      for (std::size_t k = 0; k < runs[r].outputs.size(); ++k) {
        out << (k ? "," : "") << '"' << runs[r].outputs[k].first << "\":";
        detail::write_input(out, runs[r].outputs[k].second);
      }
      out << "}}";
    }
    out << "]}\n";
  });
}

}  // namespace onnx_sample
