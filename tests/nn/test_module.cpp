// The Module API: registration and its name checks, traversal order (PyTorch's state_dict keys),
// train/eval recursion, zero_grad, state_dict / load_state_dict, options and initialization.
#include <cmath>
#include <set>

#include <xtensor/xview.hpp>

#include "nn_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

// A module with a parameter, a buffer and two children, to exercise ordering.
class Net : public nn::Module<double> {
 public:
  Net() : Module("Net") {
    scale = register_parameter("scale", ones<double>({3}));
    register_buffer("steps", zeros<double>({1}));
    fc = register_module("fc", std::make_shared<nn::Linear<double>>(2, 3));
    norm = register_module("norm", std::make_shared<nn::LayerNorm<double>>(nn::LayerNormOptions(3)));
  }
  Tensor<double> forward(const Tensor<double>& x) override { return norm->forward(fc->forward(x)) * scale; }
  Tensor<double> scale;
  std::shared_ptr<nn::Linear<double>> fc;
  std::shared_ptr<nn::LayerNorm<double>> norm;
};

template <class Named>
std::vector<std::string> keys_of(const Named& named) {
  std::vector<std::string> k;
  for (const auto& [name, value] : named) k.push_back(name);
  return k;
}

std::shared_ptr<nn::TransformerEncoder<float>> small_encoder(int num_layers, bool final_norm) {
  auto layer = std::make_shared<nn::TransformerEncoderLayer<float>>(nn::TransformerEncoderLayerOptions(4, 2).dim_feedforward(8));
  return std::make_shared<nn::TransformerEncoder<float>>(
      layer, num_layers, final_norm ? std::make_shared<nn::LayerNorm<float>>(nn::LayerNormOptions(4)) : nullptr);
}

}  // namespace

TEST(Module, TraversalFollowsPyTorchOrder) {
  auto net = std::make_shared<Net>();
  EXPECT_EQ(keys_of(net->named_parameters()),
            (std::vector<std::string>{"scale", "fc.weight", "fc.bias", "norm.weight", "norm.bias"}));
  EXPECT_EQ(keys_of(net->named_parameters(/*recurse=*/false)), (std::vector<std::string>{"scale"}));
  EXPECT_EQ(keys_of(net->named_buffers()), (std::vector<std::string>{"steps"}));
  EXPECT_EQ(keys_of(net->named_children()), (std::vector<std::string>{"fc", "norm"}));
  EXPECT_EQ(keys_of(net->named_modules()), (std::vector<std::string>{"", "fc", "norm"}));
  EXPECT_EQ(net->named_modules()[0].second.get(), net.get());
  EXPECT_EQ(net->children().size(), 2u);
  // state_dict: own parameters, own buffers, then the children's entries.
  EXPECT_EQ(net->state_dict().keys(),
            (std::vector<std::string>{"scale", "steps", "fc.weight", "fc.bias", "norm.weight", "norm.bias"}));
  // parameters() alias the members.
  EXPECT_TRUE(net->parameters()[1].same(net->fc->weight));
  EXPECT_TRUE(net->parameters()[0].requires_grad());
  EXPECT_FALSE(net->buffers()[0].requires_grad());
  EXPECT_EQ(net->name(), "Net");
  EXPECT_EQ(net->fc->name(), "Linear");
}

TEST(Module, TransformerEncoderKeysEqualPyTorchs) {
  // list(nn.TransformerEncoder(nn.TransformerEncoderLayer(4, 2, 8), 2, norm=nn.LayerNorm(4))
  //      .state_dict().keys()) in PyTorch 1.13:
  const std::vector<std::string> expected = {
      "layers.0.self_attn.in_proj_weight", "layers.0.self_attn.in_proj_bias",
      "layers.0.self_attn.out_proj.weight", "layers.0.self_attn.out_proj.bias",
      "layers.0.linear1.weight", "layers.0.linear1.bias", "layers.0.linear2.weight", "layers.0.linear2.bias",
      "layers.0.norm1.weight", "layers.0.norm1.bias", "layers.0.norm2.weight", "layers.0.norm2.bias",
      "layers.1.self_attn.in_proj_weight", "layers.1.self_attn.in_proj_bias",
      "layers.1.self_attn.out_proj.weight", "layers.1.self_attn.out_proj.bias",
      "layers.1.linear1.weight", "layers.1.linear1.bias", "layers.1.linear2.weight", "layers.1.linear2.bias",
      "layers.1.norm1.weight", "layers.1.norm1.bias", "layers.1.norm2.weight", "layers.1.norm2.bias",
      "norm.weight", "norm.bias"};
  auto enc = small_encoder(2, true);
  EXPECT_EQ(enc->state_dict().keys(), expected);
  EXPECT_EQ(keys_of(enc->named_parameters()), expected);
  // [n for n, _ in enc.named_modules()]
  const std::vector<std::string> modules = {
      "", "layers", "layers.0", "layers.0.self_attn", "layers.0.self_attn.out_proj", "layers.0.linear1",
      "layers.0.dropout", "layers.0.linear2", "layers.0.norm1", "layers.0.norm2", "layers.0.dropout1",
      "layers.0.dropout2", "layers.1", "layers.1.self_attn", "layers.1.self_attn.out_proj", "layers.1.linear1",
      "layers.1.dropout", "layers.1.linear2", "layers.1.norm1", "layers.1.norm2", "layers.1.dropout1",
      "layers.1.dropout2", "norm"};
  EXPECT_EQ(keys_of(enc->named_modules()), modules);
  EXPECT_EQ(small_encoder(1, false)->state_dict().size(), 12u);
}

TEST(Module, NoBiasDropsTheBiasKeys) {
  nn::TransformerEncoderLayer<float> layer(nn::TransformerEncoderLayerOptions(4, 2).dim_feedforward(8).bias(false));
  EXPECT_EQ(layer.state_dict().keys(),
            (std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.out_proj.weight", "linear1.weight",
                                      "linear2.weight", "norm1.weight", "norm2.weight"}));
  nn::LayerNorm<float> plain(nn::LayerNormOptions(4).elementwise_affine(false));
  EXPECT_TRUE(plain.state_dict().empty());
}

TEST(Module, RegistrationNameErrors) {
  nn::Module<double> m("Custom");
  m.register_parameter("w", zeros<double>({2}));
  XGRAD_EXPECT_THROW_MSG(m.register_parameter("", zeros<double>({2})), "Custom", "register_parameter",
                         "must not be empty");
  XGRAD_EXPECT_THROW_MSG(m.register_parameter("a.b", zeros<double>({2})), "Custom", "\"a.b\"", "\".\"");
  XGRAD_EXPECT_THROW_MSG(m.register_parameter("w", zeros<double>({2})), "\"w\" is already a parameter");
  XGRAD_EXPECT_THROW_MSG(m.register_buffer("w", zeros<double>({2})), "register_buffer", "already a parameter");
  m.register_buffer("b", zeros<double>({2}));
  XGRAD_EXPECT_THROW_MSG(m.register_parameter("b", zeros<double>({2})), "\"b\" is already a buffer");
  m.register_module("child", std::make_shared<nn::ReLU<double>>());
  XGRAD_EXPECT_THROW_MSG(m.register_buffer("child", zeros<double>({2})), "\"child\" is already a submodule");
  XGRAD_EXPECT_THROW_MSG(m.register_module("w", std::make_shared<nn::ReLU<double>>()), "register_module",
                         "already a parameter");
  XGRAD_EXPECT_THROW_MSG(m.register_module("x.y", std::make_shared<nn::ReLU<double>>()), "register_module", "\".\"");
  XGRAD_EXPECT_THROW_MSG(m.register_module("none", std::shared_ptr<nn::ReLU<double>>()), "is null");
  // Non-leaf parameters and grad-requiring buffers are refused.
  auto a = ones<double>({2}, true);
  XGRAD_EXPECT_THROW_MSG(m.register_parameter("p", a * 2.0), "must be a leaf");
  XGRAD_EXPECT_THROW_MSG(m.register_buffer("q", ones<double>({2}, true)), "must not require grad");
  // Failed registrations left nothing behind.
  EXPECT_EQ(m.state_dict().keys(), (std::vector<std::string>{"w", "b"}));
  // The base forward names the module.
  XGRAD_EXPECT_THROW_MSG(m.forward(zeros<double>({2})), "Custom has no single-input forward");
}

TEST(Module, TrainEvalRecurse) {
  auto enc = small_encoder(2, true);
  for (const auto& [name, m] : enc->named_modules()) EXPECT_TRUE(m->is_training()) << name;
  enc->eval();
  for (const auto& [name, m] : enc->named_modules()) EXPECT_FALSE(m->is_training()) << name;
  enc->layer(1)->train();
  EXPECT_FALSE(enc->is_training());
  EXPECT_TRUE(enc->layer(1)->dropout2->is_training());
  EXPECT_FALSE(enc->layer(0)->dropout2->is_training());
  enc->train();
  for (const auto& [name, m] : enc->named_modules()) EXPECT_TRUE(m->is_training()) << name;
}

TEST(Module, ZeroGradForgetsOrZeroes) {
  auto net = std::make_shared<Net>();
  auto x = from_vector<double>({1, 2, -1, 0.5}, {2, 2});
  sum(net->forward(x) * net->forward(x)).backward();
  for (const auto& p : net->parameters()) EXPECT_TRUE(p.has_grad());
  net->zero_grad(/*set_to_none=*/false);
  for (const auto& p : net->parameters()) {
    ASSERT_TRUE(p.has_grad());
    EXPECT_EQ(xt::amax(xt::abs(p.grad()))(), 0.0);
  }
  net->zero_grad(/*set_to_none=*/true);
  for (const auto& p : net->parameters()) EXPECT_FALSE(p.has_grad());
}

TEST(Module, ZeroGradForgetsByDefaultAsPyTorch2) {
  auto net = std::make_shared<Net>();
  auto x = from_vector<double>({1, 2, -1, 0.5}, {2, 2});
  sum(net->forward(x)).backward();
  net->zero_grad();
  for (const auto& [name, p] : net->named_parameters()) EXPECT_FALSE(p.has_grad()) << name;
}

TEST(Module, StateDictRoundTripKeepsParameterIdentity) {
  manual_seed(1);
  auto a = small_encoder(2, true);
  auto b = small_encoder(2, true);
  ASSERT_GT(max_abs_diff(a->layer(0)->linear1->weight.value(), b->layer(0)->linear1->weight.value()), 0.0);
  const Tensor<float> held = b->layer(0)->linear1->weight;  // as an optimizer would hold it
  const nn::StateDict<float> state = a->state_dict();
  auto result = b->load_state_dict(state);
  EXPECT_TRUE(result.missing_keys.empty());
  EXPECT_TRUE(result.unexpected_keys.empty());
  for (const auto& [key, value] : b->state_dict()) EXPECT_EQ(value, state.at(key)) << key;
  EXPECT_TRUE(held.same(b->layer(0)->linear1->weight));
  EXPECT_EQ(held.value(), a->layer(0)->linear1->weight.value());
  // state_dict copies: changing the module afterwards does not change the dict.
  a->layer(0)->linear1->weight.mutable_value()(0, 0) += 1.0f;
  EXPECT_NE(state.at("layers.0.linear1.weight")(0, 0), a->layer(0)->linear1->weight.value()(0, 0));
}

TEST(Module, LoadStateDictListsEveryProblemAndChangesNothing) {
  manual_seed(2);
  auto enc = small_encoder(1, true);
  const nn::StateDict<float> before = enc->state_dict();
  nn::StateDict<float> state;
  for (const auto& [key, value] : before) {
    if (key == "layers.0.linear1.bias" || key == "norm.weight") continue;  // missing
    if (key == "layers.0.norm2.weight") {
      state.insert(key, xt::zeros<float>({5}));  // mis-shaped
      continue;
    }
    state.insert(key, value + 1.0f);
  }
  state.insert("layers.0.extra", xt::zeros<float>({1}));  // unexpected
  state.insert("head.weight", xt::zeros<float>({2, 2}));  // unexpected
  XGRAD_EXPECT_THROW_MSG(enc->load_state_dict(state), "Error(s) in loading state_dict for TransformerEncoder",
                         "Missing key(s) in state_dict: \"layers.0.linear1.bias\", \"norm.weight\"",
                         "Unexpected key(s) in state_dict: \"layers.0.extra\", \"head.weight\"",
                         "size mismatch for layers.0.norm2.weight: copying a param with shape (5) from checkpoint, "
                         "the shape in current model is (4)");
  // Nothing was copied.
  for (const auto& [key, value] : enc->state_dict()) EXPECT_EQ(value, before.at(key)) << key;

  // Non-strict: mis-shaped keys are still an error; missing and unexpected ones are reported.
  XGRAD_EXPECT_THROW_MSG(enc->load_state_dict(state, /*strict=*/false), "size mismatch for layers.0.norm2.weight");
  nn::StateDict<float> partial;
  partial.insert("norm.bias", xt::ones<float>({4}));
  partial.insert("unused", xt::ones<float>({4}));
  auto result = enc->load_state_dict(partial, /*strict=*/false);
  EXPECT_EQ(result.unexpected_keys, (std::vector<std::string>{"unused"}));
  EXPECT_EQ(result.missing_keys.size(), before.size() - 1);
  EXPECT_EQ(enc->norm->state_dict().at("bias"), (Array<float>(xt::ones<float>({4}))));
}

TEST(Module, StateDictTypeIsOrderedAndChecked) {
  nn::StateDict<double> s;
  s.insert("b", xt::zeros<double>({1}));
  s.insert("a", xt::ones<double>({2}));
  EXPECT_EQ(s.keys(), (std::vector<std::string>{"b", "a"}));
  EXPECT_TRUE(s.contains("a"));
  EXPECT_EQ(s.find("c"), nullptr);
  EXPECT_EQ(s.at("a").size(), 2u);
  XGRAD_EXPECT_THROW_MSG(s.insert("a", xt::zeros<double>({1})), "duplicate key \"a\"");
  XGRAD_EXPECT_THROW_MSG(s.at("c"), "no key \"c\"");
}

TEST(Module, SequentialNamesChildrenByPosition) {
  auto seq = std::make_shared<nn::Sequential<double>>(std::vector<std::shared_ptr<nn::Module<double>>>{
      std::make_shared<nn::Linear<double>>(2, 3), std::make_shared<nn::ReLU<double>>(),
      std::make_shared<nn::Linear<double>>(3, 1)});
  EXPECT_EQ(seq->state_dict().keys(), (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(seq->size(), 3u);
  EXPECT_EQ((*seq)[1]->name(), "ReLU");
  auto x = input({4, 2});
  auto lin0 = std::dynamic_pointer_cast<nn::Linear<double>>((*seq)[0]);
  auto lin2 = std::dynamic_pointer_cast<nn::Linear<double>>((*seq)[2]);
  EXPECT_EQ(seq->forward(x).value(), lin2->forward(relu(lin0->forward(x))).value());
  // A module without a single-input forward cannot run inside Sequential.
  seq->push_back(std::make_shared<nn::Embedding<double>>(3, 2));
  XGRAD_EXPECT_THROW_MSG(seq->forward(x), "Embedding has no single-input forward");
  XGRAD_EXPECT_THROW_MSG((*seq)[7], "Sequential", "out of range");
}

TEST(Module, ModuleListHoldsModulesByPositionAndCastsThem) {
  nn::ModuleList<double> list;
  auto lin = list.push_back(std::make_shared<nn::Linear<double>>(2, 3));
  list.push_back(std::make_shared<nn::ReLU<double>>());
  EXPECT_EQ(list.size(), 2u);
  EXPECT_EQ(list.state_dict().keys(), (std::vector<std::string>{"0.weight", "0.bias"}));
  EXPECT_EQ(list.ptr<nn::Linear<double>>(0), lin);
  XGRAD_EXPECT_THROW_MSG(list.ptr<nn::Linear<double>>(1), "ModuleList", "module 1 is a ReLU");
  XGRAD_EXPECT_THROW_MSG(list[2], "ModuleList", "index 2 is out of range for 2 modules");
  XGRAD_EXPECT_THROW_MSG(list.forward(input({1, 2})), "ModuleList has no single-input forward");
  // TransformerEncoder's layers live in its `layers` list only: layer(i) is layers[i].
  auto enc = small_encoder(2, false);
  for (std::size_t i = 0; i < 2; ++i) EXPECT_EQ(enc->layer(i), (*enc->layers)[i]);
  EXPECT_EQ(enc->num_layers(), enc->layers->size());
  XGRAD_EXPECT_THROW_MSG(enc->layer(2), "ModuleList", "out of range");
}

TEST(Module, OptionsHavePyTorchDefaultsAndChain) {
  nn::TransformerEncoderLayerOptions o(4, 2);
  EXPECT_EQ(o.d_model(), 4);
  EXPECT_EQ(o.nhead(), 2);
  EXPECT_EQ(o.dim_feedforward(), 2048);
  EXPECT_EQ(o.dropout(), 0.1);
  EXPECT_EQ(o.activation(), "relu");
  EXPECT_EQ(o.layer_norm_eps(), 1e-5);
  EXPECT_FALSE(o.batch_first());
  EXPECT_FALSE(o.norm_first());
  EXPECT_TRUE(o.bias());
  o.dim_feedforward(64).dropout(0.2).activation("gelu").layer_norm_eps(1e-6).batch_first(true).norm_first(true).bias(false);
  EXPECT_EQ(o.dim_feedforward(), 64);
  EXPECT_EQ(o.dropout(), 0.2);
  EXPECT_EQ(o.activation(), "gelu");
  EXPECT_EQ(o.layer_norm_eps(), 1e-6);
  EXPECT_TRUE(o.batch_first() && o.norm_first() && !o.bias());

  nn::MultiheadAttentionOptions m(8, 2);
  EXPECT_EQ(m.dropout(), 0.0);
  EXPECT_TRUE(m.bias());
  EXPECT_FALSE(m.batch_first());
  EXPECT_TRUE(nn::LinearOptions(2, 3).bias());
  nn::LayerNormOptions ln({3, 4});
  EXPECT_EQ(ln.normalized_shape(), (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(ln.eps(), 1e-5);
  EXPECT_TRUE(ln.elementwise_affine() && ln.bias());
  EXPECT_EQ(nn::GELUOptions().approximate(), "none");
  EXPECT_EQ(nn::DropoutOptions().p(), 0.5);
  EXPECT_FALSE(nn::EmbeddingOptions(5, 2).padding_idx().has_value());

  XGRAD_EXPECT_THROW_MSG(nn::TransformerEncoderLayer<float>(nn::TransformerEncoderLayerOptions(4, 2).activation("tanh")),
                         "activation should be relu/gelu, not tanh");
  XGRAD_EXPECT_THROW_MSG(nn::MultiheadAttention<float>(6, 4), "embed_dim must be divisible by num_heads");
  XGRAD_EXPECT_THROW_MSG(nn::Dropout<float>(1.5), "between 0 and 1", "1.5");
  XGRAD_EXPECT_THROW_MSG(nn::GELU<float>(nn::GELUOptions().approximate("fast")), "GELU", "fast");
  XGRAD_EXPECT_THROW_MSG(nn::Embedding<float>(nn::EmbeddingOptions(5, 2).padding_idx(5)), "padding_idx");
}

TEST(Module, InitializationMatchesPyTorchsDistributions) {
  manual_seed(3);
  // Linear: weight and bias ~ U(-1/sqrt(in), 1/sqrt(in)).
  nn::Linear<double> lin(100, 300);
  const double bound = 1.0 / std::sqrt(100.0);
  for (const Array<double>* a : {&lin.weight.value(), &lin.bias.value()}) {
    EXPECT_LE(xt::amax(*a)(), bound);
    EXPECT_GE(xt::amin(*a)(), -bound);
    EXPECT_GT(xt::amax(*a)(), 0.9 * bound);
    EXPECT_LT(xt::amin(*a)(), -0.9 * bound);
  }
  // Uniform variance bound^2 / 3 over 30,000 draws.
  const double var = xt::mean(xt::square(lin.weight.value()))();
  EXPECT_NEAR(var, bound * bound / 3, 0.05 * bound * bound / 3);

  // MultiheadAttention: xavier-uniform in_proj_weight (3E, E): bound sqrt(6 / (E + 3E)); zero biases.
  nn::MultiheadAttention<double> mha(64, 4);
  const double xb = std::sqrt(6.0 / (64 + 192));
  EXPECT_LE(xt::amax(xt::abs(mha.in_proj_weight.value()))(), xb);
  EXPECT_GT(xt::amax(xt::abs(mha.in_proj_weight.value()))(), 0.95 * xb);
  EXPECT_EQ(xt::amax(xt::abs(mha.in_proj_bias.value()))(), 0.0);
  EXPECT_EQ(xt::amax(xt::abs(mha.out_proj->bias.value()))(), 0.0);
  EXPECT_LE(xt::amax(xt::abs(mha.out_proj->weight.value()))(), 1.0 / 8.0);
  EXPECT_GT(xt::amax(xt::abs(mha.out_proj->weight.value()))(), 0.9 / 8.0);

  // LayerNorm: ones and zeros.
  nn::LayerNorm<double> ln(nn::LayerNormOptions({2, 3}));
  EXPECT_EQ(ln.weight.value(), (Array<double>(xt::ones<double>({2, 3}))));
  EXPECT_EQ(ln.bias.value(), (Array<double>(xt::zeros<double>({2, 3}))));

  // Embedding: N(0, 1), padding row zero.
  nn::Embedding<double> emb(nn::EmbeddingOptions(200, 50).padding_idx(-1));
  EXPECT_EQ(emb.padding_idx(), 199);
  const Array<double>& w = emb.weight.value();
  EXPECT_EQ(xt::amax(xt::abs(xt::view(w, 199, xt::all())))(), 0.0);
  const double m = xt::mean(w)(), s2 = xt::mean(xt::square(w))();
  EXPECT_NEAR(m, 0.0, 0.03);
  EXPECT_NEAR(s2, 1.0 * 199 / 200, 0.04);

  // The same seed gives the same initial values.
  manual_seed(9);
  nn::Linear<float> a(3, 4);
  manual_seed(9);
  nn::Linear<float> b(3, 4);
  EXPECT_EQ(a.weight.value(), b.weight.value());
  EXPECT_EQ(a.bias.value(), b.bias.value());
}

TEST(Module, InitFunctions) {
  Generator g(5);
  auto t = zeros<double>({400, 100});
  nn::init::normal_(t, 2.0, 0.5, &g);
  EXPECT_NEAR(xt::mean(t.value())(), 2.0, 0.01);
  EXPECT_NEAR(std::sqrt(xt::mean(xt::square(t.value() - 2.0))()), 0.5, 0.01);
  nn::init::uniform_(t, -3.0, -1.0, &g);
  EXPECT_GE(xt::amin(t.value())(), -3.0);
  EXPECT_LT(xt::amax(t.value())(), -1.0);
  EXPECT_NEAR(xt::mean(t.value())(), -2.0, 0.01);
  nn::init::constant_(t, 0.25);
  EXPECT_EQ(xt::amin(t.value())(), 0.25);
  EXPECT_EQ(xt::amax(t.value())(), 0.25);
  nn::init::zeros_(t);
  EXPECT_EQ(xt::amax(xt::abs(t.value()))(), 0.0);
  nn::init::ones_(t);
  EXPECT_EQ(xt::amin(t.value())(), 1.0);
  // A generator passed in gives reproducible draws and leaves the default generator alone.
  Generator g1(11), g2(11);
  auto u1 = nn::init::xavier_uniform_(zeros<float>({3, 5}), 1.0, &g1);
  auto u2 = nn::init::xavier_uniform_(zeros<float>({3, 5}), 1.0, &g2);
  EXPECT_EQ(u1.value(), u2.value());
  EXPECT_EQ(nn::init::calculate_fan_in_and_fan_out({3, 5, 2}), (std::pair<double, double>{10.0, 6.0}));
  // LibTorch's int64 sizes and the tensor itself (_calculate_fan_in_and_fan_out(tensor)); a negative
  // size is refused naming the function.
  const std::int64_t out = 3;
  EXPECT_EQ(nn::init::calculate_fan_in_and_fan_out({out, std::int64_t{5}}), (std::pair<double, double>{5.0, 3.0}));
  EXPECT_EQ(nn::init::calculate_fan_in_and_fan_out(zeros<float>({3, 5, 2})), (std::pair<double, double>{10.0, 6.0}));
  XGRAD_EXPECT_THROW_MSG(nn::init::calculate_fan_in_and_fan_out({out, out - 4}),
                         "init::calculate_fan_in_and_fan_out: expected non-negative sizes, got a negative size -1");
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("leaky_relu", std::sqrt(5.0)), std::sqrt(1.0 / 3.0));
  XGRAD_EXPECT_THROW_MSG(nn::init::xavier_uniform_(zeros<float>({3})), "fewer than 2 dimensions");
  XGRAD_EXPECT_THROW_MSG(nn::init::kaiming_uniform_(zeros<float>({3, 3}), 0.0, "fan_avg"), "fan_avg");
}

TEST(Module, EncoderLayersAreIndependentCopies) {
  manual_seed(4);
  auto layer = std::make_shared<nn::TransformerEncoderLayer<float>>(nn::TransformerEncoderLayerOptions(4, 2).dim_feedforward(8));
  const GeneratorState rng = default_generator().get_state();
  nn::TransformerEncoder<float> enc(layer, 3);
  EXPECT_EQ(default_generator().get_state(), rng);  // copying drew no random numbers
  EXPECT_EQ(enc.num_layers(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    for (const auto& [key, value] : enc.layer(i)->state_dict()) EXPECT_EQ(value, layer->state_dict().at(key)) << key;
    EXPECT_FALSE(enc.layer(i)->linear1->weight.same(layer->linear1->weight));
  }
  enc.layer(0)->linear1->weight.mutable_value()(0, 0) += 1.0f;
  EXPECT_NE(enc.layer(1)->linear1->weight.value()(0, 0), enc.layer(0)->linear1->weight.value()(0, 0));
  EXPECT_NE(layer->linear1->weight.value()(0, 0), enc.layer(0)->linear1->weight.value()(0, 0));
  // 3 layers x 12 tensors, all distinct.
  std::set<const Node<float>*> nodes;
  for (const auto& p : enc.parameters()) nodes.insert(p.node().get());
  EXPECT_EQ(nodes.size(), 36u);
}
