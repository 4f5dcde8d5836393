// xo::export_model: what the written file holds (parsed back with onnx.proto's classes), the
// modes it restores, and each bad input it refuses without leaving a file. The models' numbers
// are checked by ONNX Runtime in check_onnx_runtime.cjs (see tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <unistd.h>

#include <onnx/onnx_pb.h>

#include <xgrad/base/warning.hpp>
#include <xgrad/core/function.hpp>
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

// Every value of the graph is assigned once: the inputs, initializers and node outputs are distinct.
void expect_single_assignment(const ::onnx::ModelProto& model) {
  std::multiset<std::string> names;
  for (const auto& v : model.graph().input()) names.insert(v.name());
  for (const auto& t : model.graph().initializer()) names.insert(t.name());
  for (const auto& n : model.graph().node())
    for (const auto& o : n.output()) names.insert(o);
  for (const std::string& name : names) EXPECT_EQ(names.count(name), 1u) << name;
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

// A custom Function computing outside xgrad's ops (xtensor on the values): its output is unrecorded.
struct XtensorDouble : autograd::Function<XtensorDouble> {
  static Tensor<float> forward(autograd::AutogradContext<float>*, Tensor<float> x) {
    return Tensor<float>(Array<float>(x.value() * 2.0f));
  }
  static Tensors backward(autograd::AutogradContext<float>*, Tensors g) {
    return {Tensor<float>(Array<float>(g[0].value() * 2.0f))};
  }
};

// The same written with xgrad ops: recorded (the Function is inlined, as torch.onnx does).
struct OpsDouble : autograd::Function<OpsDouble> {
  static Tensor<float> forward(autograd::AutogradContext<float>*, Tensor<float> x) { return x * 2.0f; }
  static Tensors backward(autograd::AutogradContext<float>*, Tensors g) { return {g[0] * 2.0f}; }
};

// An output no recorded op computed is refused naming the output and what it is, and no file is
// written (the refusal's message once read past the recording: a segfault).
TEST(OnnxExport, RefusesAnOutputNoRecordedOpComputesNamingIt) {
  auto m = std::make_shared<nn::Linear<float>>(4, 3);
  const std::string path = temp_path("unrecorded.onnx");
  const auto names = xo::ExportOptions().output_names({"y", "doubled"});
  // a tensor built from a value read into C++
  expect_refused(
      [&] {
        xo::export_model(
            *m,
            [&](const xo::Inputs& in) {
              const Tensor<float> y = m->forward(in.tensor(0));
              return Tensors{y, Tensor<float>(Array<float>(y.value() * 2.0f))};
            },
            {randn<float>({2, 4})}, path, names);
      },
      path, {"output 1 ('doubled') of the forward is not computed by a recorded op", "made outside xgrad's ops",
             "Tensor(x.value() * 2)", "differs when the forward runs again on random inputs of the same sizes",
             "no constant either"});
  // a custom Function computing with xtensor, as the only output
  expect_refused(
      [&] {
        xo::export_model(*m, [&](const xo::Inputs& in) { return Tensors{XtensorDouble::apply(m->forward(in.tensor(0)))}; },
                         {randn<float>({2, 4})}, path, xo::ExportOptions().output_names({"y"}));
      },
      path, {"output 0 ('y') of the forward is not computed by a recorded op",
             "an output of custom autograd::Function '", "XtensorDouble'", "outside xgrad's ops"});
  // ... and as the input of a later op
  expect_refused(
      [&] {
        xo::export_model(*m, [&](const xo::Inputs& in) { return Tensors{relu(XtensorDouble::apply(in.tensor(0)))}; },
                         {randn<float>({2, 4})}, path);
      },
      path, {"input 0 of op 'relu' (op 1 of 1 recorded) is not computed by a recorded op", "XtensorDouble'"});
  // the output of the forward's only op taken apart: no op recorded at all
  expect_refused(
      [&] {
        xo::export_model(*m, [&](const xo::Inputs& in) { return Tensors{Tensor<float>(Array<float>(in.tensor(0).value() + 1.0f))}; },
                         {randn<float>({2, 4})}, path);
      },
      path, {"output 0 ('output_0') of the forward is not computed by a recorded op", "Of shape (2, 4), it is made "
             "inside the forward and differs when the forward runs again on random inputs of the same sizes, so"});
}

// detach() is recorded (an Identity, as torch.onnx exports it), and a custom Function written with
// xgrad ops is recorded through its ops.
TEST(OnnxExport, ExportsDetachAndACustomFunctionMadeOfOps) {
  auto m = std::make_shared<nn::Linear<float>>(4, 3);
  const std::string path = temp_path("detach.onnx");
  xo::export_model(
      *m,
      [&](const xo::Inputs& in) {
        const Tensor<float> y = m->forward(in.tensor(0));
        return Tensors{y.detach(), OpsDouble::apply(y)};
      },
      {randn<float>({2, 4})}, path, xo::ExportOptions().output_names({"detached", "doubled"}));
  const ::onnx::ModelProto model = load(path);
  std::remove(path.c_str());
  std::multiset<std::string> types;
  for (const auto& n : model.graph().node()) types.insert(n.op_type());
  EXPECT_EQ(types.count("Identity"), 3u);  // detach, and one per output
  EXPECT_EQ(types.count("Mul"), 1u);       // OpsDouble's x * 2
  EXPECT_EQ(model.graph().initializer_size(), 3);  // weight, bias, the scalar 2
  expect_single_assignment(model);
}

// Names ONNX rejects (empty, shared) are refused up front, naming the option.
TEST(OnnxExport, RefusesNamesOnnxRejects) {
  auto m = std::make_shared<nn::Linear<float>>(4, 3);
  const std::string path = temp_path("names.onnx");
  const Tensor<float> x = randn<float>({2, 4});
  auto two_in = [&](const xo::Inputs& in) { return Tensors{m->forward(in.tensor(0)) + m->forward(in.tensor(1))}; };
  auto two_out = [&](const xo::Inputs& in) {
    const Tensor<float> y = m->forward(in.tensor(0));
    return Tensors{y, -y};
  };
  expect_refused([&] { xo::export_model(*m, x, path, xo::ExportOptions().input_names({""})); }, path,
                 {"input_names[0] is empty", "give every input a name"});
  expect_refused([&] { xo::export_model(*m, x, path, xo::ExportOptions().output_names({""})); }, path,
                 {"output_names[0] is empty", "give every output a name"});
  expect_refused([&] { xo::export_model(*m, two_out, {x}, path, xo::ExportOptions().output_names({"y", ""})); }, path,
                 {"output_names[1] is empty"});
  expect_refused([&] { xo::export_model(*m, two_in, {x, x}, path, xo::ExportOptions().input_names({"a", "a"})); },
                 path, {"input_names[1] 'a' is also input_names[0] 'a'", "unique"});
  expect_refused([&] { xo::export_model(*m, two_out, {x}, path, xo::ExportOptions().output_names({"y", "y"})); },
                 path, {"output_names[1] 'y' is also output_names[0] 'y'"});
  expect_refused([&] { xo::export_model(*m, x, path, xo::ExportOptions().input_names({"x"}).output_names({"x"})); },
                 path, {"output_names[0] 'x' is also input_names[0] 'x'", "an input and an output may not share a name"});
  // against the default names
  expect_refused([&] { xo::export_model(*m, x, path, xo::ExportOptions().output_names({"input_0"})); }, path,
                 {"output_names[0] 'input_0' is also the default name 'input_0' of input 0"});
  expect_refused([&] { xo::export_model(*m, two_out, {x}, path, xo::ExportOptions().input_names({"output_1"})); },
                 path, {"the default name 'output_1' of output 1 is also input_names[0] 'output_1'"});
  // against the initializers (state_dict keys)
  expect_refused([&] { xo::export_model(*m, x, path, xo::ExportOptions().input_names({"weight"})); }, path,
                 {"input_names[0] 'weight' is the state_dict key of a parameter or buffer"});
  expect_refused([&] { xo::export_model(*m, x, path, xo::ExportOptions().output_names({"bias"})); }, path,
                 {"output_names[0] 'bias' is the state_dict key"});
}

// Names that the exporter would also generate are kept free for the user's inputs and outputs.
TEST(OnnxExport, GeneratedNamesAvoidTheInputAndOutputNames) {
  auto m = std::make_shared<nn::Linear<float>>(4, 3);
  const std::string path = temp_path("generated.onnx");
  std::set<std::string> generated;
  {
    xo::export_model(*m, randn<float>({2, 4}), path);
    const ::onnx::ModelProto model = load(path);
    for (const auto& n : model.graph().node())
      for (const auto& o : n.output()) generated.insert(o);
  }
  generated.erase("output_0");
  ASSERT_GE(generated.size(), 2u);
  const std::string in_name = *generated.begin(), out_name = *generated.rbegin();
  xo::export_model(*m, randn<float>({2, 4}), path, xo::ExportOptions().input_names({in_name}).output_names({out_name}));
  const ::onnx::ModelProto model = load(path);
  std::remove(path.c_str());
  EXPECT_EQ(model.graph().input(0).name(), in_name);
  EXPECT_EQ(model.graph().output(0).name(), out_name);
  expect_single_assignment(model);
}

// A branch on a value read into C++ is traced one way; like PyTorch's TracerWarning, the
// exporter warns through the warning handler, naming the read.
class SignBranch : public nn::Module<float> {
 public:
  SignBranch() : Module("SignBranch") {}
  Tensor<float> forward(const Tensor<float>& x) override {
    if (sum(x).item() > 0) return x * 2.0f;
    return x * -1.0f;
  }
};

std::vector<std::string> warnings_of(const std::function<void()>& f) {
  std::vector<std::string> got;
  reset_warnings();
  auto previous = set_warning_handler([&](const Warning& w) { got.push_back(w.message); });
  try {
    f();
  } catch (...) {
    set_warning_handler(previous);
    throw;
  }
  set_warning_handler(previous);
  return got;
}

TEST(OnnxExport, WarnsWhenTheForwardReadsATensorsValue) {
  SignBranch m;
  const std::string path = temp_path("branch.onnx");
  const auto got = warnings_of([&] { xo::export_model(m, randn<float>({2, 4}), path); });
  ASSERT_EQ(got.size(), 1u);
  for (const char* part : {"the forward read a tensor's value into C++ while it was traced",
                           "item() on the result of 'sum'", "after op 1 of 2 recorded",
                           "may be wrong for other inputs"})
    EXPECT_NE(got[0].find(part), std::string::npos) << got[0];
  EXPECT_TRUE(exists(path));  // a warning, not a refusal
  std::remove(path.c_str());

  // no read, no warning
  auto linear = std::make_shared<nn::Linear<float>>(4, 3);
  EXPECT_TRUE(warnings_of([&] { xo::export_model(*linear, randn<float>({2, 4}), path); }).empty());
  std::remove(path.c_str());

  // when the branch changes the ops on the second run, the refusal names the read too
  auto branchy = [&](const xo::Inputs& in) {
    const Tensor<float>& x = in.tensor(0);
    return Tensors{sum(x).item() > 50.0f ? relu(x) : neg(x)};
  };
  warnings_of([&] {
    expect_refused([&] { xo::export_model(*linear, branchy, std::vector<xo::Input>{full<float>({2, 4}, 10.0f)}, path); }, path,
                   {"the forward runs other ops", "the forward reads a tensor's value into C++: item() on the result "
                    "of 'sum'"});
  });
}

// Grouped-query attention (enable_gqa) is written with the key/value heads repeated: k and v
// (N, 2, S, d) unsqueezed, expanded to (N, 2, 2, S, d) and reshaped to (N, 4, S, d) with the run-time
// dims; equal heads need none of it. ONNX Runtime checks the numbers (export_cases: sdpa_gqa).
TEST(OnnxExport, WritesGroupedQueryAttentionByRepeatingTheKeyValueHeads) {
  nn::Module<float> m("gqa");
  const std::string path = temp_path("gqa.onnx");
  auto expands = [&](std::size_t kv_heads) {
    xo::export_model(
        m,
        [](const xo::Inputs& in) {
          return Tensors{scaled_dot_product_attention(in.tensor(0), in.tensor(1), in.tensor(2), {}, 0.0, true,
                                                      std::nullopt, /*enable_gqa=*/true)};
        },
        std::vector<xo::Input>{randn<float>({2, 4, 3, 2}), randn<float>({2, kv_heads, 5, 2}),
                               randn<float>({2, kv_heads, 5, 2})},
        path);
    const ::onnx::ModelProto model = load(path);
    std::remove(path.c_str());
    expect_single_assignment(model);
    std::vector<std::string> shapes;  // the Expand nodes' target shapes
    for (const auto& n : model.graph().node())
      if (n.op_type() == "Expand")
        for (const auto& t : model.graph().initializer())
          if (t.name() == n.input(1)) {
            std::vector<std::int64_t> dims(t.raw_data().size() / sizeof(std::int64_t));
            std::memcpy(dims.data(), t.raw_data().data(), t.raw_data().size());
            std::string s;
            for (std::int64_t x : dims) s += std::to_string(x) + " ";
            shapes.push_back(s);
          }
    return shapes;
  };
  EXPECT_EQ(expands(2), (std::vector<std::string>{"1 1 2 1 1 ", "1 1 2 1 1 "}));  // k and v: G = 2 at dim -3
  EXPECT_EQ(expands(1), (std::vector<std::string>{"1 1 4 1 1 ", "1 1 4 1 1 "}));  // multi-query
  EXPECT_TRUE(expands(4).empty());                                                // equal heads
}

}  // namespace
