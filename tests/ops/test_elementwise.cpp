// Gradchecks and forward values of the arithmetic and pointwise ops.
#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {
const std::vector<std::pair<Shape, Shape>> kBroadcastPairs = {
    {{3, 4}, {3, 4}}, {{3, 4}, {4}}, {{3, 1}, {1, 4}}, {{2, 3, 4}, {1, 3, 1}}, {{}, {2, 3}}, {{2, 3}, {}},
};
}

TEST(Elementwise, BinaryOpsGradcheckOnBroadcastPairs) {
  for (const auto& [sa, sb] : kBroadcastPairs) {
    SCOPED_TRACE(shape_str(sa) + " with " + shape_str(sb));
    expect_gradcheck([](const Inputs& in) { return in[0] + in[1]; }, {input(sa, 1), input(sb, 2)});
    expect_gradcheck([](const Inputs& in) { return in[0] - in[1]; }, {input(sa, 1), input(sb, 2)});
    expect_gradcheck([](const Inputs& in) { return in[0] * in[1]; }, {input(sa, 1), input(sb, 2)});
    expect_gradcheck([](const Inputs& in) { return in[0] / in[1]; }, {input(sa, 1), positive_input(sb, 2)});
  }
}

TEST(Elementwise, BroadcastForwardValuesAndShapes) {
  auto a = from_vector<double>({1, 2, 3}, {3, 1});
  auto b = from_vector<double>({10, 20}, {1, 2});
  auto y = a * b;
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(y.value(), (Array<double>{{10, 20}, {20, 40}, {30, 60}}));
  XGRAD_EXPECT_THROW_MSG(zeros<double>({3, 4}) + zeros<double>({3}), "add", "(3, 4)", "(3)");
}

TEST(Elementwise, ScalarOps) {
  auto x = input({2, 3});
  expect_gradcheck([](const Inputs& in) { return in[0] * 2.5; }, {x});
  expect_gradcheck([](const Inputs& in) { return 2.5 * in[0] + 1.0; }, {x});
  expect_gradcheck([](const Inputs& in) { return 1.0 - in[0]; }, {x});
  expect_gradcheck([](const Inputs& in) { return in[0] - 1.0; }, {x});
  expect_gradcheck([](const Inputs& in) { return in[0] / 4.0; }, {x});
  expect_gradcheck([](const Inputs& in) { return 3.0 / in[0]; }, {positive_input({2, 3})});
  expect_gradcheck([](const Inputs& in) { return -in[0]; }, {x});
  // A 0-d tensor times a tensor.
  expect_gradcheck([](const Inputs& in) { return in[0] * in[1]; }, {input({}, 3), x});
}

TEST(Elementwise, PointwiseFunctionsGradcheck) {
  for (const Shape& s : {Shape{5}, Shape{2, 3}, Shape{2, 3, 4}}) {
    SCOPED_TRACE(shape_str(s));
    expect_gradcheck([](const Inputs& in) { return exp(in[0]); }, {input(s)});
    expect_gradcheck([](const Inputs& in) { return log(in[0]); }, {positive_input(s)});
    expect_gradcheck([](const Inputs& in) { return sqrt(in[0]); }, {positive_input(s)});
    expect_gradcheck([](const Inputs& in) { return abs(in[0]); }, {input(s, 1, true)});
    expect_gradcheck([](const Inputs& in) { return tanh(in[0]); }, {input(s)});
    expect_gradcheck([](const Inputs& in) { return sigmoid(in[0]); }, {input(s)});
    expect_gradcheck([](const Inputs& in) { return silu(in[0]); }, {input(s)});
    expect_gradcheck([](const Inputs& in) { return relu(in[0]); }, {input(s, 1, true)});
    expect_gradcheck([](const Inputs& in) { return gelu(in[0]); }, {input(s)});
    expect_gradcheck([](const Inputs& in) { return gelu(in[0], "tanh"); }, {input(s)});
    expect_gradcheck([](const Inputs& in) { return pow(in[0], 3.0); }, {input(s)});
    expect_gradcheck([](const Inputs& in) { return pow(in[0], 2.0); }, {input(s)});
    expect_gradcheck([](const Inputs& in) { return pow(in[0], -1.5); }, {positive_input(s)});
    expect_gradcheck([](const Inputs& in) { return clamp<double>(in[0], -0.5, 0.7); }, {input(s, 5, true)});
    expect_gradcheck([](const Inputs& in) { return clamp<double>(in[0], std::nullopt, 0.3); }, {input(s, 6, true)});
  }
}

TEST(Elementwise, GeluGoldenValues) {
  // PyTorch: gelu(-1) = -0.15865529, gelu(0.5) = 0.34573123, gelu(1) = 0.84134471
  // (these 8-digit values are good to about 4e-8: the exact values are x Phi(x), e.g.
  // gelu(-1) = -0.1586552539..., so they are compared in float and the double results with Phi.)
  auto y = gelu(from_vector<float>({-1.0f, 0.5f, 1.0f}, {3}));
  EXPECT_NEAR(y.value()(0), -0.15865529f, 1e-7);
  EXPECT_NEAR(y.value()(1), 0.34573123f, 1e-7);
  EXPECT_NEAR(y.value()(2), 0.84134471f, 1e-7);
  auto yd = gelu(from_vector<double>({-1.0, 0.5, 1.0}, {3}));
  for (std::size_t i = 0; i < 3; ++i) {
    const double v = yd.value()(i) / std::vector<double>{-1.0, 0.5, 1.0}[i];  // Phi(x)
    EXPECT_NEAR(v, 0.5 * std::erfc(-std::vector<double>{-1.0, 0.5, 1.0}[i] / std::sqrt(2.0)), 1e-15);
  }
  // tanh form against its formula
  auto x = from_vector<double>({-2.0, 0.3, 1.7}, {3});
  auto yt = gelu(x, "tanh");
  for (std::size_t i = 0; i < 3; ++i) {
    const double v = x.value()(i);
    EXPECT_NEAR(yt.value()(i), 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))), 1e-14);
  }
  XGRAD_EXPECT_THROW_MSG(gelu(x, "fast"), "gelu", "fast");
}

TEST(Elementwise, SigmoidIsStableForLargeInputs) {
  auto y = sigmoid(from_vector<float>({-1000.0f, 1000.0f}, {2}));
  EXPECT_EQ(y.value()(0), 0.0f);
  EXPECT_EQ(y.value()(1), 1.0f);
}

TEST(Elementwise, SiluMatchesTorch) {
  // torch.nn.functional.silu and its gradient (torch 1.13, float64), large inputs included.
  auto x = from_vector<double>({-1000.0, -3.0, -0.5, 0.0, 0.5, 3.0, 1000.0}, {7}, /*requires_grad=*/true);
  const std::vector<double> y = {-0.0, -0.14227761953270035, -0.1887703343990727, 0.0, 0.3112296656009273,
                                 2.8577223804672998, 1000.0};
  const std::vector<double> dy = {-0.0, -0.08810410601516962, 0.2600388126973482, 0.5, 0.7399611873026519,
                                  1.0881041060151693, 1.0};
  auto out = silu(x);
  sum(out).backward();
  for (std::size_t i = 0; i < y.size(); ++i) {
    EXPECT_NEAR(out.value()(i), y[i], 1e-15) << i;
    EXPECT_NEAR(x.grad()(i), dy[i], 1e-15) << i;
  }
}

TEST(Elementwise, FloatOpsMatchDouble) {
  auto xd = input({4, 5});
  Tensor<float> xf(Array<float>(xt::cast<float>(xd.value())));
  auto yd = gelu(tanh(xd) * xd + 1.0);
  auto yf = gelu(tanh(xf) * xf + 1.0f);
  EXPECT_LT(max_abs_diff(yf.value(), yd.value()), 1e-6);
}
