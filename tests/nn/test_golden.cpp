// Golden values from PyTorch 1.13 (tests/fixtures/nn_*.json, written by scripts/make_fixtures.py):
// for each case the module is built from the case's options, PyTorch's initial parameters are
// loaded by state_dict key (strict, so the keys must be PyTorch's), and the forward output (and
// attention weights), the MSE loss, the gradient of every input and of every parameter by name
// are compared.
//
// Tolerance, element by element: |xgrad - torch| <= tol * max(1, |torch|), with tol = 1e-10 for
// the float64 cases and 1e-5 for the float32 ones. Each case prints its largest differences
// (absolute; and the scaled measure above) on one "[golden]" line and records them as test
// properties.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "fixture.hpp"
#include "nn_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;
using nlohmann::json;

namespace {

const std::vector<std::string> kCases = {
    "nn_linear", "nn_linear_nobias", "nn_layernorm_1d", "nn_layernorm_2d", "nn_layernorm_noaffine",
    "nn_gelu_none", "nn_gelu_tanh", "nn_relu", "nn_embedding", "nn_embedding_padding",
    "nn_mha_batch_first", "nn_mha_seq_first", "nn_mha_nobias", "nn_mha_key_padding", "nn_mha_bool_mask",
    "nn_mha_float_mask", "nn_mha_float_mask_3d", "nn_mha_bool_mask_key_padding",
    "nn_mha_float_mask_key_padding", "nn_mha_cross", "nn_encoder_layer_prenorm_gelu",
    "nn_encoder_layer_postnorm_relu_causal_bool", "nn_encoder_layer_postnorm_relu_causal_float",
    "nn_encoder_layer_seq_first", "nn_encoder_seed", "nn_encoder_seed_eval", "nn_encoder_final_norm",
    "nn_encoder_postnorm_relu_masks", "nn_decoder_layer_postnorm_relu_causal",
    "nn_decoder_layer_prenorm_gelu_bool_masks", "nn_decoder_final_norm", "nn_transformer"};

// The largest differences seen for one compared quantity.
struct Diff {
  double abs = 0;     // max |a - b|
  double scaled = 0;  // max |a - b| / max(1, |b|)
};

template <class T>
Diff compare(const std::string& what, const Array<T>& got, const Array<T>& expected, double tol) {
  Diff d;
  EXPECT_EQ(shape_of(got), shape_of(expected)) << what;
  if (shape_of(got) != shape_of(expected)) return d;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double a = got.data()[i], b = expected.data()[i];
    const double err = std::abs(a - b);
    EXPECT_TRUE(std::isfinite(a)) << what << " element " << i;
    d.abs = std::max(d.abs, err);
    d.scaled = std::max(d.scaled, err / std::max(1.0, std::abs(b)));
  }
  EXPECT_LE(d.scaled, tol) << what << ": max |xgrad - torch| = " << d.abs;
  return d;
}

template <class T>
AttnMask<T> mask_of(const Fixture& f, const json& name) {
  if (name.is_null()) return {};
  const std::string key = name.get<std::string>();
  if (f.kind(key) == "bool") return f.bool_array(key);
  return f.array<T>(key);
}

nn::TransformerEncoderLayerOptions layer_options(const json& o) {
  return nn::TransformerEncoderLayerOptions(o["d_model"], o["nhead"])
      .dim_feedforward(o["dim_feedforward"])
      .dropout(o["dropout"])
      .activation(o["activation"])
      .layer_norm_eps(o["layer_norm_eps"])
      .batch_first(o["batch_first"])
      .norm_first(o["norm_first"]);
}

nn::TransformerDecoderLayerOptions decoder_layer_options(const json& o) {
  return nn::TransformerDecoderLayerOptions(o["d_model"], o["nhead"])
      .dim_feedforward(o["dim_feedforward"])
      .dropout(o["dropout"])
      .activation(o["activation"])
      .layer_norm_eps(o["layer_norm_eps"])
      .batch_first(o["batch_first"])
      .norm_first(o["norm_first"]);
}

template <class T>
nn::TransformerOptions<T> transformer_options(const json& o) {
  EXPECT_TRUE(o["custom_encoder"].is_null() && o["custom_decoder"].is_null());
  return nn::TransformerOptions<T>(o["d_model"], o["nhead"])
      .num_encoder_layers(o["num_encoder_layers"])
      .num_decoder_layers(o["num_decoder_layers"])
      .dim_feedforward(o["dim_feedforward"])
      .dropout(o["dropout"])
      .activation(o["activation"])
      .layer_norm_eps(o["layer_norm_eps"])
      .batch_first(o["batch_first"])
      .norm_first(o["norm_first"]);
}

nn::LayerNormOptions layer_norm_options(const json& o) {
  return nn::LayerNormOptions(o["normalized_shape"].get<std::vector<std::int64_t>>())
      .eps(o["eps"])
      .elementwise_affine(o["elementwise_affine"]);
}

template <class T>
std::shared_ptr<nn::Module<T>> build(const json& c) {
  const std::string m = c["module"];
  const json& o = c.contains("options") ? c["options"] : json();
  if (m == "Linear")
    return std::make_shared<nn::Linear<T>>(nn::LinearOptions(o["in_features"], o["out_features"]).bias(o["bias"]));
  if (m == "LayerNorm") return std::make_shared<nn::LayerNorm<T>>(layer_norm_options(o));
  if (m == "GELU") return std::make_shared<nn::GELU<T>>(nn::GELUOptions().approximate(o["approximate"]));
  if (m == "ReLU") return std::make_shared<nn::ReLU<T>>();
  if (m == "Embedding") {
    nn::EmbeddingOptions e(o["num_embeddings"], o["embedding_dim"]);
    if (!o["padding_idx"].is_null()) e.padding_idx(o["padding_idx"].get<std::int64_t>());
    return std::make_shared<nn::Embedding<T>>(e);
  }
  if (m == "MultiheadAttention") {
    EXPECT_TRUE(o["kdim"].is_null() && o["vdim"].is_null() && !o["add_bias_kv"] && !o["add_zero_attn"]);
    return std::make_shared<nn::MultiheadAttention<T>>(nn::MultiheadAttentionOptions(o["embed_dim"], o["num_heads"])
                                                           .dropout(o["dropout"])
                                                           .bias(o["bias"])
                                                           .batch_first(o["batch_first"]));
  }
  if (m == "TransformerEncoderLayer") return std::make_shared<nn::TransformerEncoderLayer<T>>(layer_options(o));
  if (m == "TransformerEncoder") {
    auto layer = std::make_shared<nn::TransformerEncoderLayer<T>>(layer_options(c["layer_options"]));
    std::shared_ptr<nn::Module<T>> norm;
    if (!o["norm"].is_null()) norm = std::make_shared<nn::LayerNorm<T>>(layer_norm_options(o["norm"]));
    return std::make_shared<nn::TransformerEncoder<T>>(layer, o["num_layers"].get<std::int64_t>(), norm);
  }
  if (m == "TransformerDecoderLayer")
    return std::make_shared<nn::TransformerDecoderLayer<T>>(decoder_layer_options(o));
  if (m == "TransformerDecoder") {
    auto layer = std::make_shared<nn::TransformerDecoderLayer<T>>(decoder_layer_options(c["layer_options"]));
    std::shared_ptr<nn::Module<T>> norm;
    if (!o["norm"].is_null()) norm = std::make_shared<nn::LayerNorm<T>>(layer_norm_options(o["norm"]));
    return std::make_shared<nn::TransformerDecoder<T>>(layer, o["num_layers"].get<std::int64_t>(), norm);
  }
  if (m == "Transformer") return std::make_shared<nn::Transformer<T>>(transformer_options<T>(o));
  ADD_FAILURE() << "unknown module " << m;
  return nullptr;
}

// (output, attn_weights or undefined)
template <class T>
std::pair<Tensor<T>, Tensor<T>> run_forward(nn::Module<T>& module, const Fixture& f, const json& c,
                                            std::map<std::string, Tensor<T>>& inputs) {
  const std::string m = c["module"];
  const json& fwd = c.contains("forward") ? c["forward"] : json::object();
  if (m == "Embedding") return {dynamic_cast<nn::Embedding<T>&>(module).forward(f.index_array("input")), {}};
  if (m == "MultiheadAttention") {
    // Equal names give the same tensor, as in PyTorch's `mha(x, x, x)` (self-attention).
    return dynamic_cast<nn::MultiheadAttention<T>&>(module).forward(
        inputs.at(fwd["query"]), inputs.at(fwd["key"]), inputs.at(fwd["value"]), mask_of<T>(f, fwd["key_padding_mask"]),
        fwd["need_weights"], mask_of<T>(f, fwd["attn_mask"]), fwd.value("average_attn_weights", true));
  }
  if (m == "TransformerEncoderLayer")
    return {dynamic_cast<nn::TransformerEncoderLayer<T>&>(module).forward(
                inputs.at("input"), mask_of<T>(f, fwd["src_mask"]), mask_of<T>(f, fwd["src_key_padding_mask"])),
            {}};
  if (m == "TransformerEncoder")
    return {dynamic_cast<nn::TransformerEncoder<T>&>(module).forward(
                inputs.at("input"), mask_of<T>(f, fwd["mask"]), mask_of<T>(f, fwd["src_key_padding_mask"])),
            {}};
  if (m == "TransformerDecoderLayer")
    return {dynamic_cast<nn::TransformerDecoderLayer<T>&>(module).forward(
                inputs.at("tgt"), inputs.at("memory"), mask_of<T>(f, fwd["tgt_mask"]),
                mask_of<T>(f, fwd["memory_mask"]), mask_of<T>(f, fwd["tgt_key_padding_mask"]),
                mask_of<T>(f, fwd["memory_key_padding_mask"])),
            {}};
  if (m == "TransformerDecoder")
    return {dynamic_cast<nn::TransformerDecoder<T>&>(module).forward(
                inputs.at("tgt"), inputs.at("memory"), mask_of<T>(f, fwd["tgt_mask"]),
                mask_of<T>(f, fwd["memory_mask"]), mask_of<T>(f, fwd["tgt_key_padding_mask"]),
                mask_of<T>(f, fwd["memory_key_padding_mask"])),
            {}};
  if (m == "Transformer")
    return {dynamic_cast<nn::Transformer<T>&>(module).forward(
                inputs.at("src"), inputs.at("tgt"), mask_of<T>(f, fwd["src_mask"]), mask_of<T>(f, fwd["tgt_mask"]),
                mask_of<T>(f, fwd["memory_mask"]), mask_of<T>(f, fwd["src_key_padding_mask"]),
                mask_of<T>(f, fwd["tgt_key_padding_mask"]), mask_of<T>(f, fwd["memory_key_padding_mask"])),
            {}};
  return {module.forward(inputs.at("input")), {}};
}

std::string fmt(double v) {
  std::ostringstream s;
  s << std::setprecision(2) << std::scientific << v;
  return s.str();
}

template <class T>
void run_case(const std::string& name) {
  const Fixture f = load_fixture(name);
  const json& c = f.config();
  const double tol = std::is_same_v<T, double> ? 1e-10 : 1e-5;
  ASSERT_EQ(f.dtype(), (std::is_same_v<T, double> ? "float64" : "float32"));

  auto module = build<T>(c);
  ASSERT_NE(module, nullptr);
  module->train(c["training"].get<bool>());
  // PyTorch's initial values by state_dict key; strict, so the key sets must be equal.
  nn::StateDict<T> state;
  for (auto& [key, value] : f.arrays_with_prefix<T>("param.")) state.insert(key, value);
  module->load_state_dict(state);

  std::map<std::string, Tensor<T>> inputs;
  for (const char* in : {"input", "query", "key", "value", "src", "tgt", "memory"})
    if (f.has(in) && f.kind(in) == "float") inputs[in] = f.tensor<T>(in, f.has(std::string("grad.") + in));

  module->zero_grad();
  auto [output, weights] = run_forward(*module, f, c, inputs);
  const Tensor<T> loss = mse_loss(output, f.tensor<T>("target"));

  std::map<std::string, Diff> diffs;  // by quantity, for the report
  diffs["output"] = compare("output", output.value(), f.array<T>("output"), tol);
  if (f.has("attn_weights")) {
    ASSERT_TRUE(weights.defined());
    diffs["attn_weights"] = compare("attn_weights", weights.value(), f.array<T>("attn_weights"), tol);
  } else {
    EXPECT_FALSE(weights.defined());
  }
  diffs["loss"] = compare("loss", loss.value(), f.array<T>("loss"), tol);

  std::string worst_param;
  Diff params;
  std::size_t compared_params = 0;
  if (c["training"].get<bool>()) {
    loss.backward();
    for (auto& [in, t] : inputs) {
      if (!t.requires_grad()) continue;
      diffs["grad." + in] = compare("grad." + in, t.grad(), f.array<T>("grad." + in), tol);
    }
    for (const auto& [key, p] : module->named_parameters()) {
      const Diff d = compare("grad." + key, p.grad(), f.array<T>("grad." + key), tol);
      ++compared_params;
      if (d.scaled >= params.scaled) worst_param = key;
      params.abs = std::max(params.abs, d.abs);
      params.scaled = std::max(params.scaled, d.scaled);
    }
    // Every gradient in the file was compared.
    std::size_t input_grads = 0;
    for (auto& [in, t] : inputs) input_grads += t.requires_grad();
    EXPECT_EQ(f.names_with_prefix("grad.").size(), compared_params + input_grads);
  } else {
    EXPECT_TRUE(f.names_with_prefix("grad.").empty());
  }

  std::ostringstream line;
  line << "[golden] " << name << " max |diff| (scaled):";
  for (const auto& [what, d] : diffs) {
    line << " " << what << " " << fmt(d.abs) << " (" << fmt(d.scaled) << ")";
    ::testing::Test::RecordProperty("max_abs_diff_" + what, fmt(d.abs));
  }
  if (compared_params > 0) {
    line << "; " << compared_params << " parameter grads " << fmt(params.abs) << " (" << fmt(params.scaled)
         << ", worst " << worst_param << ")";
    ::testing::Test::RecordProperty("max_abs_diff_param_grads", fmt(params.abs));
  }
  std::cout << line.str() << std::endl;
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, Float64Within1e10Relative) { run_case<double>(GetParam() + "_float64"); }
TEST_P(Golden, Float32Within1e5Relative) { run_case<float>(GetParam() + "_float32"); }

INSTANTIATE_TEST_SUITE_P(PyTorch, Golden, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace

TEST(GoldenSeedExample, EncoderBuiltFromEveryOptionAtPyTorchsInitialWeights) {
  // Every option spelled out: TransformerEncoderLayer(d_model=4, nhead=2, dim_feedforward=64,
  // dropout=0.2, activation="gelu", layer_norm_eps=1e-5, batch_first=True, norm_first=True,
  // bias=True), TransformerEncoder(layer, num_layers=3, norm=None), built with these options
  // (not from the fixture's config), PyTorch's weights loaded, evaluated in eval mode.
  auto layer = std::make_shared<nn::TransformerEncoderLayer<double>>(
      nn::TransformerEncoderLayerOptions(4, 2).dim_feedforward(64).dropout(0.2).activation("gelu")
          .layer_norm_eps(1e-5).batch_first(true).norm_first(true).bias(true));
  nn::TransformerEncoder<double> enc(layer, 3, nullptr);
  const Fixture f = load_fixture("nn_encoder_seed_eval_float64");
  nn::StateDict<double> state;
  for (auto& [key, value] : f.arrays_with_prefix<double>("param.")) state.insert(key, value);
  enc.load_state_dict(state);
  enc.eval();
  auto x = f.tensor<double>("input");
  auto y = enc.forward(x);
  EXPECT_LT(max_abs_diff(y.value(), f.array<double>("output")), 1e-12);
  EXPECT_NEAR(mse_loss(y, x).item(), f.scalar<double>("loss"), 1e-12);
  // In training mode, dropout 0.2 changes the output (xgrad's stream, not PyTorch's).
  enc.train();
  manual_seed(24);
  EXPECT_GT(max_abs_diff(enc.forward(x).value(), f.array<double>("output")), 1e-3);
}
