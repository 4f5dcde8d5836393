// xo::export_model: what the written file holds (parsed back with onnx.proto's classes), the
// modes it restores, and each bad input it refuses without leaving a file. The models' numbers
// are checked by ONNX Runtime in check_onnx_runtime.cjs (see tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <unistd.h>

#include <onnx/onnx_pb.h>

#include <xgrad/nn/nn.hpp>
#include <xgrad/onnx/export.hpp>

namespace {

using namespace xgrad;
namespace xo = xgrad::onnx;  // `onnx` alone would also name onnx.proto's namespace
using Tensors = std::vector<Tensor<float>>;

std::string temp_path(const std::string& name) {
  return testing::TempDir() + "xgrad_onnx_" + std::to_string(::getpid()) + "_" + name;
}

bool exists(const std::string& path) { return std::ifstream(path).good(); }

::onnx::ModelProto load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ::onnx::ModelProto model;
  EXPECT_TRUE(model.ParseFromIstream(&in));
  return model;
}

// Runs f, expecting std::exception whose message contains every part; no file at path after.
template <class F>
void expect_refused(F f, const std::string& path, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const std::exception& e) {
    for (const std::string& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
  EXPECT_FALSE(exists(path));
}

std::shared_ptr<nn::Sequential<float>> mlp() {
  return std::make_shared<nn::Sequential<float>>(std::vector<std::shared_ptr<nn::Module<float>>>{
      std::make_shared<nn::Linear<float>>(4, 8), std::make_shared<nn::Dropout<float>>(0.5),
      std::make_shared<nn::GELU<float>>(), std::make_shared<nn::Linear<float>>(8, 2)});
}

TEST(OnnxExport, WritesOpset17WithStateDictInitializersAndNamedInputs) {
  auto m = mlp();
  const std::string path = temp_path("mlp.onnx");
  xo::export_model(*m, randn<float>({3, 4}), path,
                     xo::ExportOptions().input_names({"x"}).output_names({"y"}).dynamic_axes({{"x", {{0, "batch"}}}}));
  const ::onnx::ModelProto model = load(path);
  std::remove(path.c_str());
  EXPECT_EQ(model.ir_version(), 8);
  ASSERT_EQ(model.opset_import_size(), 1);
  EXPECT_EQ(model.opset_import(0).version(), 17);
  std::set<std::string> initializers;
  for (const auto& t : model.graph().initializer()) initializers.insert(t.name());
  for (const std::string& key : m->state_dict().keys()) EXPECT_TRUE(initializers.count(key)) << key;
  ASSERT_EQ(model.graph().input_size(), 1);
  EXPECT_EQ(model.graph().input(0).name(), "x");
  EXPECT_EQ(model.graph().input(0).type().tensor_type().shape().dim(0).dim_param(), "batch");
  EXPECT_EQ(model.graph().input(0).type().tensor_type().shape().dim(1).dim_value(), 4);
  ASSERT_EQ(model.graph().output_size(), 1);
  EXPECT_EQ(model.graph().output(0).name(), "y");
  EXPECT_EQ(model.graph().output(0).type().tensor_type().shape().dim(0).dim_param(), "batch");
  std::set<std::string> types;
  for (const auto& n : model.graph().node()) types.insert(n.op_type());
  EXPECT_TRUE(types.count("Erf"));       // GELU's erf form, spelled out
  EXPECT_FALSE(types.count("Dropout"));  // identity in eval mode
}

TEST(OnnxExport, TracesInEvalModeAndRestoresEachModulesMode) {
  auto m = mlp();
  m->train();
  (*m)[1]->eval();
  const std::string path = temp_path("modes.onnx");
  xo::export_model(
      *m,
      [&](const xo::Inputs& in) {
        EXPECT_FALSE(m->is_training());
        EXPECT_FALSE((*m)[1]->is_training());
        return Tensors{m->forward(in.tensor(0))};
      },
      {randn<float>({2, 4})}, path);
  std::remove(path.c_str());
  EXPECT_TRUE(m->is_training());
  EXPECT_FALSE((*m)[1]->is_training());
  EXPECT_TRUE((*m)[0]->is_training());
}

TEST(OnnxExport, RefusesAnOpWithoutExporterNamingItAndItsPlace) {
  auto m = std::make_shared<nn::Linear<float>>(4, 3);
  const std::string path = temp_path("var.onnx");
  expect_refused(
      [&] {
        xo::export_model(
            *m,
            [&](const xo::Inputs& in) {
              const Tensor<float> y = m->forward(in.tensor(0));
              return Tensors{mse_loss(y, y)};
            },
            {randn<float>({2, 4})}, path);
      },
      path, {"no exporter for op 'mse_loss'", "op 2 of 2 recorded", "after 'linear'"});
}

TEST(OnnxExport, RefusesAnExampleInputOfTheWrongShape) {
  auto m = std::make_shared<nn::Linear<float>>(4, 3);
  const std::string path = temp_path("shape.onnx");
  expect_refused([&] { xo::export_model(*m, randn<float>({2, 5}), path); }, path,
                 {"the forward failed on the example inputs", "Linear: expected input of shape (*, 4), got (2, 5)"});
  expect_refused([&] { xo::export_model(*m, Tensor<float>(), path); }, path, {"undefined tensor"});
}

TEST(OnnxExport, RefusesAPathThatCannotBeWritten) {
  auto m = std::make_shared<nn::Linear<float>>(4, 3);
  const std::string path = temp_path("missing-folder") + "/model.onnx";
  expect_refused([&] { xo::export_model(*m, randn<float>({2, 4}), path); }, path, {path});
}

TEST(OnnxExport, RefusesADynamicAxisTheModelFixes) {
  auto m = std::make_shared<nn::Linear<float>>(4, 3);
  const std::string path = temp_path("fixed.onnx");
  const auto batch = xo::ExportOptions().dynamic_axes({{"input_0", {{0, "batch"}}}});
  // a reshape to a literal size: fails when the batch is resized
  expect_refused(
      [&] {
        xo::export_model(*m, [&](const xo::Inputs& in) { return Tensors{reshape(m->forward(in.tensor(0)), {6})}; },
                           {randn<float>({2, 4})}, path, batch);
      },
      path, {"the model fixes a dynamic axis", "batch 2 -> 3"});
  // a tensor made inside the forward from the batch size
  expect_refused(
      [&] {
        xo::export_model(
            *m,
            [&](const xo::Inputs& in) {
              const auto batch_size = static_cast<std::size_t>(in.tensor(0).size(0));
              return Tensors{m->forward(in.tensor(0)) + ones<float>({batch_size, 1})};
            },
            {randn<float>({2, 4})}, path, batch);
      },
      path, {"is made inside the forward and differs when the forward runs again on random inputs with batch 2 -> 3",
             "the model fixes that axis"});
  // a size that follows the batch but is no product of dynamic axes (batch - 1)
  expect_refused(
      [&] {
        xo::export_model(
            *m,
            [&](const xo::Inputs& in) { return Tensors{narrow(in.tensor(0), 0, 0, in.tensor(0).size(0) - 1)}; },
            {randn<float>({3, 4})}, path, batch);
      },
      path, {"the end of op 'narrow' (op 1 of 1 recorded) is 2 with the example inputs and 1 with the dynamic axes "
             "resized, which is no dynamic axis nor a multiple or product of them"});
  // an output axis marked dynamic that does not follow the inputs
  expect_refused(
      [&] {
        xo::export_model(*m, [&](const xo::Inputs& in) { return Tensors{sum(m->forward(in.tensor(0)), {0})}; },
                           {randn<float>({2, 4})}, path,
                           xo::ExportOptions().output_names({"y"}).dynamic_axes(
                               {{"input_0", {{0, "batch"}}}, {"y", {{0, "batch"}}}}));
      },
      path, {"fixes dynamic axis 'batch' of output 'y'"});
}

TEST(OnnxExport, RefusesAnArrayComputedFromTheInputsValues) {
  // A mask made from x's values outside the ops would be frozen into the file: refused.
  auto m = std::make_shared<nn::Linear<float>>(4, 3);
  const std::string path = temp_path("values.onnx");
  expect_refused(
      [&] {
        xo::export_model(
            *m,
            [&](const xo::Inputs& in) {
              const Tensor<float> y = m->forward(in.tensor(0));
              return Tensors{masked_fill(y, BoolArray(y.value() > 0.0f), 0.0f)};
            },
            {randn<float>({2, 4})}, path);
      },
      path, {"the argument 'mask' of op 'masked_fill'", "differs when the forward runs again on random inputs of the "
             "same sizes", "computed outside xgrad's ops"});
}

TEST(OnnxExport, RefusesBadOptions) {
  auto m = std::make_shared<nn::Linear<float>>(4, 3);
  const std::string path = temp_path("options.onnx");
  const Tensor<float> x = randn<float>({2, 4});
  expect_refused([&] { xo::export_model(*m, x, path, xo::ExportOptions().opset_version(13)); }, path,
                 {"opset_version must be 17, got 13"});
  expect_refused([&] { xo::export_model(*m, x, path, xo::ExportOptions().input_names({"a", "b"})); }, path,
                 {"expected 1 input_names", "got 2"});
  expect_refused([&] { xo::export_model(*m, x, path, xo::ExportOptions().dynamic_axes({{"z", {{0, "n"}}}})); },
                 path, {"'z', which is no input or output name"});
  expect_refused(
      [&] { xo::export_model(*m, x, path, xo::ExportOptions().dynamic_axes({{"input_0", {{2, "n"}}}})); }, path,
      {"dynamic axis 2 of input 'input_0' is out of range"});
  expect_refused([&] {
    xo::export_model(*m, randn<float>({1, 4}), path, xo::ExportOptions().dynamic_axes({{"input_0", {{0, "n"}}}}));
  }, path, {"must be at least 2, got 1"});
}

}  // namespace
