// Linear, LayerNorm, GELU, ReLU, Dropout, Embedding and Sequential: gradient checks in double
// over inputs and parameters, forward values, and Dropout's statistics.
#include <cmath>

#include <xtensor/xview.hpp>

#include "nn_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

// Gives every parameter random values (so that ones/zeros init is not special).
void randomize(nn::Module<double>& m, std::uint64_t seed) {
  Generator g(seed);
  for (auto p : m.parameters()) nn::init::normal_(p, 0.0, 0.7, &g);
}

}  // namespace

TEST(ModuleGradcheck, CatchesAWrongParameterGradient) {
  // The helper must fail when a parameter's analytic gradient is wrong: here the module's
  // weight enters the output through detach(), so backward gives it nothing.
  nn::Linear<double> lin(3, 2);
  auto f = [&lin](const Inputs& in) { return linear(in[0], lin.weight.detach(), lin.bias); };
  GradcheckResult r = module_gradcheck(f, {input({4, 3})}, {lin.weight, lin.bias});
  EXPECT_FALSE(r.passed);
  ASSERT_EQ(r.inputs.size(), 3u);
  EXPECT_TRUE(r.inputs[0].passed);   // the input
  EXPECT_FALSE(r.inputs[1].passed);  // weight: analytic 0, numeric not
  EXPECT_TRUE(r.inputs[2].passed);   // bias
}

TEST(NnLayers, LinearGradcheck) {
  for (bool bias : {true, false}) {
    SCOPED_TRACE(bias ? "bias" : "no bias");
    nn::Linear<double> lin(nn::LinearOptions(4, 3).bias(bias));
    for (const Shape& s : {Shape{4}, Shape{5, 4}, Shape{2, 3, 4}})
      expect_module_gradcheck([&lin](const Inputs& in) { return lin.forward(in[0]); }, {input(s)}, lin.parameters());
  }
  nn::Linear<double> lin(4, 3);
  XGRAD_EXPECT_THROW_MSG(lin.forward(zeros<double>({2, 5})), "Linear", "(*, 4)", "(2, 5)");
}

TEST(NnLayers, LinearComputesXWtPlusB) {
  nn::Linear<double> lin(2, 3);
  lin.weight.mutable_value() = Array<double>{{1, 2}, {3, 4}, {5, 6}};
  lin.bias.mutable_value() = Array<double>{0.5, -0.5, 1};
  auto y = lin.forward(from_vector<double>({1, -1, 2, 0.5}, {2, 2}));
  EXPECT_EQ(y.value(), (Array<double>{{-0.5, -1.5, 0}, {3.5, 7.5, 14}}));
}

TEST(NnLayers, LayerNormGradcheck) {
  for (bool affine : {true, false}) {
    for (bool bias : {true, false}) {
      if (!affine && !bias) continue;
      SCOPED_TRACE(std::string(affine ? "affine" : "no affine") + (bias ? ", bias" : ", no bias"));
      nn::LayerNorm<double> ln(nn::LayerNormOptions({3, 4}).elementwise_affine(affine).bias(bias).eps(1e-3));
      randomize(ln, 7);
      auto f = [&ln](const Inputs& in) { return ln.forward(in[0]); };
      if (affine) expect_module_gradcheck(f, {input({2, 3, 4})}, ln.parameters());
      else expect_gradcheck(f, {input({2, 3, 4})});
    }
  }
}

TEST(NnLayers, LayerNormGoldenValue) {
  // PyTorch: [1, 0, 0, 0] -> [1.7320, -0.5773, -0.5773, -0.5773] (weight 1, bias 0).
  nn::LayerNorm<double> ln(nn::LayerNormOptions(4));
  auto y = ln.forward(from_vector<double>({1, 0, 0, 0}, {1, 4}));
  // mean 0.25, biased variance 0.1875: y = (x - 0.25) / sqrt(0.1875 + 1e-5)
  EXPECT_NEAR(y.value()(0, 0), 0.75 / std::sqrt(0.1875 + 1e-5), 1e-12);
  EXPECT_NEAR(y.value()(0, 1), -0.25 / std::sqrt(0.1875 + 1e-5), 1e-12);
  EXPECT_NEAR(y.value()(0, 0), 1.7320, 1e-4);
  EXPECT_NEAR(y.value()(0, 3), -0.5773, 1e-4);
  // weight scales, bias shifts.
  ln.weight.mutable_value() = Array<double>{2, 2, 2, 2};
  ln.bias.mutable_value() = Array<double>{1, 1, 1, 1};
  auto z = ln.forward(from_vector<double>({1, 0, 0, 0}, {1, 4}));
  EXPECT_NEAR(z.value()(0, 0), 2 * y.value()(0, 0) + 1, 1e-12);
}

TEST(NnLayers, ActivationsGradcheckAndValues) {
  nn::GELU<double> gelu_exact;
  nn::GELU<double> gelu_tanh(nn::GELUOptions().approximate("tanh"));
  nn::ReLU<double> relu_module;
  expect_gradcheck([&](const Inputs& in) { return gelu_exact.forward(in[0]); }, {input({3, 5})});
  expect_gradcheck([&](const Inputs& in) { return gelu_tanh.forward(in[0]); }, {input({3, 5})});
  expect_gradcheck([&](const Inputs& in) { return relu_module.forward(in[0]); }, {input({3, 5}, 1, true)});
  auto x = from_vector<double>({-1.0, 0.5, 1.0}, {3});
  auto y = gelu_exact.forward(x);
  // PyTorch's values, to their 8 digits (gelu(-1) = -Phi(1) = -0.1586552539...).
  EXPECT_NEAR(y.value()(0), -0.15865529, 5e-8);
  EXPECT_NEAR(y.value()(1), 0.34573123, 5e-8);
  EXPECT_NEAR(y.value()(2), 0.84134471, 5e-8);
  EXPECT_NEAR(y.value()(2), 0.5 * (1 + std::erf(1 / std::sqrt(2.0))), 1e-15);
  auto yt = gelu_tanh.forward(x);
  for (std::size_t i = 0; i < 3; ++i) {
    const double v = x.value()(i);
    EXPECT_NEAR(yt.value()(i), 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))), 1e-14);
  }
  EXPECT_EQ(relu_module.forward(x).value(), (Array<double>{0.0, 0.5, 1.0}));
  EXPECT_TRUE(gelu_exact.state_dict().empty());
}

TEST(NnLayers, EmbeddingGradcheckAndPadding) {
  const IndexArray idx{{1, 2, 4}, {4, 4, 0}};
  // Gradient w.r.t. the weight; repeated index 4 accumulates.
  nn::Embedding<double> plain(6, 3);
  expect_module_gradcheck([&](const Inputs&) { return plain.forward(idx); }, {}, plain.parameters());
  // With padding_idx the forward still reads the padding row but, as in PyTorch, gives it no
  // gradient (so finite differences would disagree there by design): checked exactly below.
  nn::Embedding<double> emb(nn::EmbeddingOptions(6, 3).padding_idx(2));
  auto y = emb.forward(idx);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 3}));
  EXPECT_EQ(xt::amax(xt::abs(xt::view(y.value(), 0, 1, xt::all())))(), 0.0);  // the padding row is zero
  EXPECT_EQ(Array<double>(xt::view(y.value(), 1, 0, xt::all())), Array<double>(xt::view(emb.weight.value(), 4, xt::all())));
  emb.zero_grad();
  sum(emb.forward(idx)).backward();
  const Array<double>& g = emb.weight.grad();
  EXPECT_EQ(Array<double>(xt::view(g, 4, xt::all())), (Array<double>{3, 3, 3}));
  EXPECT_EQ(Array<double>(xt::view(g, 2, xt::all())), (Array<double>{0, 0, 0}));
  EXPECT_EQ(Array<double>(xt::view(g, 3, xt::all())), (Array<double>{0, 0, 0}));
}

TEST(NnLayers, SequentialGradcheck) {
  // The feed-forward block of the documents: Linear(d, 4d), GELU (tanh form), Linear(4d, d).
  nn::Sequential<double> ff;
  ff.push_back(std::make_shared<nn::Linear<double>>(3, 12));
  ff.push_back(std::make_shared<nn::GELU<double>>(nn::GELUOptions().approximate("tanh")));
  ff.push_back(std::make_shared<nn::Linear<double>>(12, 3));
  expect_module_gradcheck([&](const Inputs& in) { return ff.forward(in[0]); }, {input({2, 4, 3})}, ff.parameters());
}

// ---- Dropout -----------------------------------------------------------------------------------

TEST(NnDropout, EvalIsTheIdentityBitForBit) {
  nn::Dropout<float> drop(0.3);
  drop.eval();
  auto x = randn<float>({50, 40}, true);
  auto y = drop.forward(x);
  EXPECT_EQ(y.value(), x.value());
  sum(y * y).backward();
  EXPECT_EQ(x.grad(), Array<float>(2.0f * x.value()));
}

TEST(NnDropout, ZeroProbabilityIsTheIdentityInTraining) {
  nn::Dropout<double> drop(0.0);
  EXPECT_TRUE(drop.is_training());
  auto x = input({20, 30});
  EXPECT_EQ(drop.forward(x).value(), x.value());
}

TEST(NnDropout, TrainingZeroesAFractionPAndScalesSurvivors) {
  manual_seed(123);
  for (double p : {0.1, 0.5, 0.8}) {
    SCOPED_TRACE(p);
    nn::Dropout<double> drop(p);
    Generator g(5);
    auto x = rand<double>({200, 250}, g);  // values in [0, 1): never exactly zero below
    for (auto& v : x.mutable_value()) v += 0.5;
    auto y = drop.forward(x);
    const std::size_t n = x.value().size();
    std::size_t zeros_seen = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double out = y.value().data()[i], in = x.value().data()[i];
      if (out == 0.0) ++zeros_seen;
      else EXPECT_DOUBLE_EQ(out, in / (1.0 - p));
    }
    // Binomial(n, p): within 5 standard deviations.
    const double sd = std::sqrt(n * p * (1 - p));
    EXPECT_NEAR(static_cast<double>(zeros_seen), n * p, 5 * sd);
  }
  // p = 1 zeroes everything.
  nn::Dropout<double> all(1.0);
  EXPECT_EQ(xt::amax(xt::abs(all.forward(input({5, 5})).value()))(), 0.0);
}

TEST(NnDropout, GradientUsesTheSameMaskAndSeedReproduces) {
  nn::Dropout<double> drop(0.4);
  auto x = input({30, 30});
  manual_seed(77);
  auto y1 = drop.forward(x);
  y1.backward(ones<double>({30, 30}));
  // dy/dx is the mask: 0 where dropped, 1/(1-p) where kept.
  for (std::size_t i = 0; i < x.value().size(); ++i) {
    const double g = x.grad().data()[i], out = y1.value().data()[i];
    EXPECT_DOUBLE_EQ(g, out == 0.0 ? 0.0 : 1.0 / 0.6);
  }
  manual_seed(77);
  EXPECT_EQ(drop.forward(x).value(), y1.value());
  // Re-seeding before each evaluation makes dropout deterministic, so gradcheck applies.
  expect_gradcheck([&](const Inputs& in) {
    manual_seed(78);
    return drop.forward(in[0]);
  }, {input({4, 5})});
}
