// The exporter's op table (xgrad/onnx/op_table.hpp) against the list of op kinds the trace records
// (xgrad/core/op_kinds.hpp): every kind has a sample forward here; run under a trace, the sample
// records its op under the kind's name (an op renamed in its .cpp fails here instead of silently
// falling out of the exporter); exported, it is written (parsed back: the file holds nodes) or
// refused with an error naming the op and why. A kind added to the list without a sample fails
// EveryOpKindHasASample; without a row in the table, op_table.cpp does not compile.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <unistd.h>

#include <onnx/onnx_pb.h>

#include <xgrad/core/graph.hpp>
#include <xgrad/core/grad_mode.hpp>
#include <xgrad/core/trace.hpp>
#include <xgrad/nn/nn.hpp>
#include <xgrad/onnx/export.hpp>
#include <xgrad/onnx/op_table.hpp>
#include <xgrad/nn/rms_norm.hpp>
#include <xgrad/ops/ops.hpp>
#include <xgrad/core/op_kinds.hpp>

namespace {

using namespace xgrad;
namespace xo = xgrad::onnx;
using Tensors = std::vector<Tensor<float>>;
using Sample = std::function<Tensors(const Tensor<float>& x)>;  // x: (2, 3, 4)

std::string temp_path(const std::string& name) {
  return testing::TempDir() + "xgrad_op_table_" + std::to_string(::getpid()) + "_" + name;
}

// One forward per op kind that runs that op on x (among others it may need).
const std::map<OpKind, Sample>& samples() {
  static const auto mha = std::make_shared<nn::MultiheadAttention<float>>(4, 2);
  // One row per kind.
  // clang-format off
  static const std::map<OpKind, Sample> all = {
      {OpKind::add, [](const Tensor<float>& x) { return Tensors{add(x, x)}; }},
      {OpKind::sub, [](const Tensor<float>& x) { return Tensors{sub(x, x)}; }},
      {OpKind::mul, [](const Tensor<float>& x) { return Tensors{mul(x, 2.0f)}; }},
      {OpKind::div, [](const Tensor<float>& x) { return Tensors{div(x, x)}; }},
      {OpKind::rsub, [](const Tensor<float>& x) { return Tensors{rsub(x, 1.0f)}; }},
      {OpKind::rdiv, [](const Tensor<float>& x) { return Tensors{rdiv(x, 1.0f)}; }},
      {OpKind::neg, [](const Tensor<float>& x) { return Tensors{neg(x)}; }},
      {OpKind::pow, [](const Tensor<float>& x) { return Tensors{pow(x, 3.0f)}; }},
      {OpKind::exp, [](const Tensor<float>& x) { return Tensors{exp(x)}; }},
      {OpKind::log, [](const Tensor<float>& x) { return Tensors{log(x)}; }},
      {OpKind::sqrt, [](const Tensor<float>& x) { return Tensors{sqrt(x)}; }},
      {OpKind::abs, [](const Tensor<float>& x) { return Tensors{abs(x)}; }},
      {OpKind::tanh, [](const Tensor<float>& x) { return Tensors{tanh(x)}; }},
      {OpKind::sigmoid, [](const Tensor<float>& x) { return Tensors{sigmoid(x)}; }},
      {OpKind::silu, [](const Tensor<float>& x) { return Tensors{silu(x)}; }},
      {OpKind::relu, [](const Tensor<float>& x) { return Tensors{relu(x)}; }},
      {OpKind::gelu, [](const Tensor<float>& x) { return Tensors{gelu(x, "tanh")}; }},
      {OpKind::clamp, [](const Tensor<float>& x) { return Tensors{clamp<float>(x, -0.5f, 0.5f)}; }},
      {OpKind::detach, [](const Tensor<float>& x) { return Tensors{x.detach()}; }},
      {OpKind::sum, [](const Tensor<float>& x) { return Tensors{sum(x, {1}, true)}; }},
      {OpKind::mean, [](const Tensor<float>& x) { return Tensors{mean(x)}; }},
      {OpKind::var, [](const Tensor<float>& x) { return Tensors{var(x, {2})}; }},
      {OpKind::amax, [](const Tensor<float>& x) { return Tensors{amax(x, {0, 2})}; }},
      {OpKind::max, [](const Tensor<float>& x) { return Tensors{max(x, 1).first}; }},
      {OpKind::transpose, [](const Tensor<float>& x) { return Tensors{transpose(x, 0, 2)}; }},
      {OpKind::permute, [](const Tensor<float>& x) { return Tensors{permute(x, {1, 2, 0})}; }},
      {OpKind::reshape, [](const Tensor<float>& x) { return Tensors{reshape(x, {6, 4})}; }},
      {OpKind::flatten, [](const Tensor<float>& x) { return Tensors{flatten(x, 1)}; }},
      {OpKind::unsqueeze, [](const Tensor<float>& x) { return Tensors{unsqueeze(x, 1)}; }},
      {OpKind::squeeze, [](const Tensor<float>& x) { return Tensors{squeeze(narrow(x, 1, 0, 1), 1)}; }},
      {OpKind::expand, [](const Tensor<float>& x) { return Tensors{expand(narrow(x, 1, 0, 1), {2, 3, 4})}; }},
      {OpKind::cat, [](const Tensor<float>& x) { return Tensors{cat<float>({x, x}, 1)}; }},
      {OpKind::stack, [](const Tensor<float>& x) { return Tensors{stack<float>({x, x}, 0)}; }},
      {OpKind::narrow, [](const Tensor<float>& x) { return Tensors{narrow(x, 2, 1, 2)}; }},
      {OpKind::slice, [](const Tensor<float>& x) { return Tensors{slice(x, 2, 0, 4, 2)}; }},
      {OpKind::index_select, [](const Tensor<float>& x) { return Tensors{index_select(x, 1, IndexArray{2, 0})}; }},
      {OpKind::embedding, [](const Tensor<float>& x) { return Tensors{embedding(IndexArray{{1, 0}}, flatten(x, 1))}; }},
      {OpKind::masked_fill,
       [](const Tensor<float>& x) { return Tensors{masked_fill(x, BoolArray{true, false, false, true}, 0.0f)}; }},
      {OpKind::where,
       [](const Tensor<float>& x) { return Tensors{xgrad::where(BoolArray{true, false, true, false}, x, neg(x))}; }},
      {OpKind::matmul, [](const Tensor<float>& x) { return Tensors{matmul(x, transpose(x, 1, 2))}; }},
      {OpKind::linear,
       [](const Tensor<float>& x) {
         static const auto fc = std::make_shared<nn::Linear<float>>(4, 5);
         return Tensors{fc->forward(x)};
       }},
      {OpKind::softmax, [](const Tensor<float>& x) { return Tensors{softmax(x, -1)}; }},
      {OpKind::log_softmax, [](const Tensor<float>& x) { return Tensors{log_softmax(x, 1)}; }},
      {OpKind::layer_norm, [](const Tensor<float>& x) { return Tensors{layer_norm<float>(x, {4})}; }},
      {OpKind::rotary_embedding,
       [](const Tensor<float>& x) {  // x (2, 3, 4) as (H, T, D), tables of positions 0..2
         const auto [cos, sin] = rope_cos_sin(rope_inv_freq<float>(4, 10000.0), IndexArray{0, 1, 2});
         return Tensors{rotary_embedding(x, cos, sin)};
       }},
      {OpKind::dropout, [](const Tensor<float>& x) { return Tensors{dropout(x, 0.5, /*training=*/true)}; }},
      {OpKind::mse_loss, [](const Tensor<float>& x) { return Tensors{mse_loss(x, neg(x))}; }},
      {OpKind::cross_entropy,
       [](const Tensor<float>& x) { return Tensors{cross_entropy(reshape(x, {6, 4}), IndexArray{0, 1, 2, 3, 0, 1})}; }},
      {OpKind::rms_norm,
       [](const Tensor<float>& x) {
         static const auto norm = std::make_shared<nn::RMSNorm<float>>(4);
         return Tensors{norm->forward(x), rms_norm<float>(x, {3, 4})};
       }},
      {OpKind::tril, [](const Tensor<float>& x) { return Tensors{tril(x)}; }},
      {OpKind::triu, [](const Tensor<float>& x) { return Tensors{triu(x, 1)}; }},
      {OpKind::topk, [](const Tensor<float>& x) { return Tensors{topk(x, 2).first}; }},
      {OpKind::sort, [](const Tensor<float>& x) { return Tensors{sort(x).first}; }},
      {OpKind::scaled_dot_product_attention,
       [](const Tensor<float>& x) { return Tensors{scaled_dot_product_attention(x, x, x)}; }},
      {OpKind::multi_head_attention, [](const Tensor<float>& x) { return Tensors{mha->forward(x, x, x).first}; }},
  };
  // clang-format on
  return all;
}

std::string name_of(OpKind kind) { return std::string(op_name(kind)); }

TEST(OnnxOpTable, EveryOpKindHasASample) {
  for (OpKind kind : kOpKinds)
    EXPECT_EQ(samples().count(kind), 1u) << "no sample for op kind '" << name_of(kind)
                                         << "' in tests/onnx/test_op_table.cpp: add one that runs it";
}

TEST(OnnxOpTable, KindsAndRowsAreKeyedByIdentity) {
  EXPECT_EQ(kOpKindCount, std::size(kOpKinds));
  for (std::size_t i = 0; i < kOpKindCount; ++i) {
    const OpKind kind = kOpKinds[i];
    EXPECT_EQ(static_cast<std::size_t>(kind), i);
    EXPECT_EQ(xo::op_export(kind).kind, kind) << name_of(kind);
  }
  EXPECT_EQ(op_name(OpKind::linear), "linear");
}

// Every op records itself with its kind, under its kind's name.
TEST(OnnxOpTable, EverySampleRecordsItsOpUnderItsKindsName) {
  const Tensor<float> x = randn<float>({2, 3, 4});
  for (const auto& [kind, sample] : samples()) {
    NoGradGuard no_grad;
    trace::Recorder recorder;
    sample(x);
    bool found = false;
    std::string recorded;
    for (const trace::Op& op : recorder.ops()) {
      found = found || (op.kind == kind && op.type == name_of(kind));
      recorded += " '" + op.type + "'";
    }
    EXPECT_TRUE(found) << "the sample of op kind '" << name_of(kind) << "' recorded" << recorded
                       << ": does the op open its OpScope (xgrad/ops/op_scope.hpp) with its kind?";
  }
}

TEST(OnnxOpTable, EveryOpKindExportsOrIsRefusedByName) {
  auto holder = std::make_shared<nn::Sequential<float>>();
  const Tensor<float> x = randn<float>({2, 3, 4});
  for (const auto& [kind, sample] : samples()) {
    const std::string name = name_of(kind);
    const std::string path = temp_path(name + ".onnx");
    const xo::OpExport& row = xo::op_export(kind);
    const auto forward = [&, sample = sample](const xo::Inputs& in) { return sample(in.tensor(0)); };
    try {
      xo::export_model(*holder, forward, {x}, path);
      EXPECT_NE(row.write, nullptr) << "op '" << name << "' is refused by the table, yet exported";
      std::ifstream in(path, std::ios::binary);
      ::onnx::ModelProto model;
      ASSERT_TRUE(model.ParseFromIstream(&in)) << name;
      EXPECT_GT(model.graph().node_size(), 0) << name;
      std::remove(path.c_str());
    } catch (const std::exception& e) {
      const std::string what = e.what();
      EXPECT_EQ(row.write, nullptr) << "op '" << name << "' has an exporter, yet: " << what;
      EXPECT_NE(what.find("no exporter for op '" + name + "'"), std::string::npos) << what;
      if (row.refusal != nullptr) {
        EXPECT_NE(what.find(row.refusal), std::string::npos) << what;
      }
      EXPECT_FALSE(std::ifstream(path).good()) << name;
    }
  }
}

// A node no op of xgrad's made (a user's own make_result) has no kind, and is refused by name,
// even when it is named like one of xgrad's ops: the exporter keys on the kind, not the name.
TEST(OnnxOpTable, RefusesANodeWithoutAnOpKind) {
  for (const char* name : {"renamed_relu", "relu"}) {
    auto holder = std::make_shared<nn::Sequential<float>>();
    const std::string path = temp_path(std::string(name) + "_node.onnx");
    try {
      xo::export_model(
          *holder,
          [name](const xo::Inputs& in) {
            Array<float> y = in.tensor(0).value();
            return Tensors{make_result<float>(name, std::move(y), {in.tensor(0)}, nullptr)};
          },
          {randn<float>({2, 3})}, path);
      ADD_FAILURE() << name << ": no exception";
    } catch (const std::exception& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("no exporter for op '" + std::string(name) + "' (op 1 of 1 recorded)"), std::string::npos)
          << what;
      EXPECT_NE(what.find("no op of xgrad's"), std::string::npos) << what;
    }
    EXPECT_FALSE(std::ifstream(path).good()) << name;
  }
}

}  // namespace
