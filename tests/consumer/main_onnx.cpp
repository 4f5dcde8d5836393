// Uses xgrad::onnx as a client would: exports a Linear layer and checks that the file was written.
#include <cstdio>
#include <fstream>
#include <memory>

#include <xgrad/nn/linear.hpp>
#include <xgrad/onnx/export.hpp>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  auto model = std::make_shared<xgrad::nn::Linear<float>>(3, 2);
  xgrad::onnx::export_model(*model, xgrad::randn<float>({4, 3}), argv[1]);
  const bool ok = std::ifstream(argv[1], std::ios::binary).peek() != EOF;
  std::printf("%s\n", ok ? "consumer: ONNX file written" : "consumer: NO ONNX file");
  return ok ? 0 : 1;
}
