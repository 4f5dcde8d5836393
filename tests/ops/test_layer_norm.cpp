// layer_norm: PyTorch's golden value, values against the mean/var formula, gradchecks with
// 1 and 2 normalized dims and with/without weight and bias, constant rows, float inputs with a
// large common offset, and the shape errors.
#include <cmath>

#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

// (x - mean) / sqrt(var + eps) * w + b over the last `nd` dims, by the textbook formula.
Array<double> naive_layer_norm(const Array<double>& x, std::size_t nd, const Array<double>* w,
                               const Array<double>* b, double eps) {
  std::size_t d = 1;
  for (std::size_t i = x.dimension() - nd; i < x.dimension(); ++i) d *= x.shape()[i];
  const std::size_t rows = x.size() / d;
  Array<double> y = x;
  for (std::size_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (std::size_t j = 0; j < d; ++j) mean += x.data()[r * d + j] / static_cast<double>(d);
    for (std::size_t j = 0; j < d; ++j) var += std::pow(x.data()[r * d + j] - mean, 2) / static_cast<double>(d);
    for (std::size_t j = 0; j < d; ++j) {
      double v = (x.data()[r * d + j] - mean) / std::sqrt(var + eps);
      if (w) v *= w->data()[j];
      if (b) v += b->data()[j];
      y.data()[r * d + j] = v;
    }
  }
  return y;
}

}  // namespace

TEST(LayerNorm, GoldenFromSemantics) {
  // [1, 0, 0, 0] -> [1.7320, -0.5773, -0.5773, -0.5773] (weight 1, bias 0, eps 1e-5)
  auto y = layer_norm(from_vector<double>({1, 0, 0, 0}, {4}), {4}, ones<double>({4}), zeros<double>({4}));
  const std::vector<double> golden = {1.7320, -0.5773, -0.5773, -0.5773};
  for (std::size_t i = 0; i < 4; ++i) EXPECT_NEAR(y.value()(i), golden[i], 1e-4);
}

TEST(LayerNorm, ForwardMatchesMeanVarFormula) {
  auto x = input({2, 3, 4}, 1);
  auto w = input({4}, 2), b = input({4}, 3);
  auto w2 = input({3, 4}, 4), b2 = input({3, 4}, 5);
  const double eps = 1e-5;
  EXPECT_LT(max_abs_diff(layer_norm(x, {4}, w, b).value(), naive_layer_norm(x.value(), 1, &w.value(), &b.value(), eps)),
            1e-12);
  EXPECT_LT(max_abs_diff(layer_norm(x, {4}).value(), naive_layer_norm(x.value(), 1, nullptr, nullptr, eps)), 1e-12);
  EXPECT_LT(max_abs_diff(layer_norm(x, {3, 4}, w2, b2, 0.1).value(),
                         naive_layer_norm(x.value(), 2, &w2.value(), &b2.value(), 0.1)),
            1e-12);
  EXPECT_LT(max_abs_diff(layer_norm(x, {2, 3, 4}).value(), naive_layer_norm(x.value(), 3, nullptr, nullptr, eps)),
            1e-12);
}

TEST(LayerNorm, GradcheckOneAndTwoNormalizedDims) {
  for (const Shape& ns : {Shape{4}, Shape{3, 4}}) {
    SCOPED_TRACE(shape_str(ns));
    const Shape sx = {2, 3, 4};
    expect_gradcheck([ns](const Inputs& in) { return layer_norm(in[0], ns, in[1], in[2]); },
                     {input(sx, 1), input(ns, 2), input(ns, 3)});
    expect_gradcheck([ns](const Inputs& in) { return layer_norm(in[0], ns); }, {input(sx, 1)});
    expect_gradcheck([ns](const Inputs& in) { return layer_norm(in[0], ns, in[1]); }, {input(sx, 1), input(ns, 2)});
    expect_gradcheck([ns](const Inputs& in) { return layer_norm(in[0], ns, T64(), in[1]); },
                     {input(sx, 1), input(ns, 3)});
  }
  // 1-D input; weight and bias without x requiring grad.
  expect_gradcheck([](const Inputs& in) { return layer_norm(in[0], {5}, in[1], in[2], 1e-3); },
                   {input({5}, 1), input({5}, 2), input({5}, 3)});
  auto x = input({3, 4}, 4);
  x.requires_grad_(false);
  expect_gradcheck([](const Inputs& in) { return layer_norm(in[0], {4}, in[1], in[2]); },
                   {x, input({4}, 2), input({4}, 3)});
  // Normalizing a transposed input.
  expect_gradcheck([](const Inputs& in) { return layer_norm(transpose(in[0], 0, 1), {3}, in[1], in[2]); },
                   {input({3, 4}, 6), input({3}, 7), input({3}, 8)});
}

TEST(LayerNorm, ConstantRowIsFiniteWithFiniteGradients) {
  // var = 0: xhat = 0, rstd = 1/sqrt(eps); y = bias and every gradient finite.
  for (bool with_affine : {false, true}) {
    SCOPED_TRACE(with_affine);
    T64 x(Array<double>{{2.5, 2.5, 2.5, 2.5}, {1.0, -1.0, 3.0, 0.5}}, true);
    auto w = input({4}, 2), b = input({4}, 3);
    auto y = with_affine ? layer_norm(x, {4}, w, b) : layer_norm(x, {4});
    for (std::size_t j = 0; j < 4; ++j) EXPECT_NEAR(y.value()(0, j), with_affine ? b.value()(j) : 0.0, 1e-12);
    y.backward(input({2, 4}, 4));
    for (double g : x.grad()) EXPECT_TRUE(std::isfinite(g));
    if (with_affine) {
      for (double g : w.grad()) EXPECT_TRUE(std::isfinite(g));
      for (double g : b.grad()) EXPECT_TRUE(std::isfinite(g));
    }
    // Float too.
    Tensor<float> xf(Array<float>{{7.0f, 7.0f, 7.0f}}, true);
    auto yf = layer_norm(xf, {3});
    for (float v : yf.value()) EXPECT_EQ(v, 0.0f);
    yf.backward(Tensor<float>(Array<float>{{1.0f, -2.0f, 0.5f}}));
    for (float g : xf.grad()) EXPECT_TRUE(std::isfinite(g));
  }
}

TEST(LayerNorm, FloatAround1e4MatchesDoubleWithin1eMinus6) {
  // x = 1e4 + N(0, 1) in float. The double reference runs on exactly the same (float-rounded)
  // values, so the difference is xgrad's float error alone. Measured on this machine: max abs
  // diff 1.2e-7 for the normalized output (the float rounding of the result), 2.9e-7 with weight
  // and bias, 3.8e-7 for dx (|dx| up to 7.7), 3.4e-7 for dw, 2.5e-7 for db. PyTorch's float
  // kernel is off by ~1e-3 here; a one-pass E[x^2] - E[x]^2 variance in float
  // would be wrong in the first digit.
  Generator g(11);
  Array<float> v = randn<float>({8, 64}, g).value() + 1e4f;
  Tensor<float> xf(v, true);
  T64 xd(Array<double>(xt::cast<double>(v)), true);
  auto wd = input({64}, 2), bd = input({64}, 3);
  Tensor<float> wf(Array<float>(xt::cast<float>(wd.value())), true);
  Tensor<float> bf(Array<float>(xt::cast<float>(bd.value())), true);
  auto yf = layer_norm(xf, {64});
  auto yd = layer_norm(xd, {64});
  EXPECT_LT(max_abs_diff(yf.value(), yd.value()), 1e-6);
  auto yfa = layer_norm(xf, {64}, wf, bf);
  auto yda = layer_norm(xd, {64}, wd, bd);
  EXPECT_LT(max_abs_diff(yfa.value(), yda.value()), 2e-6);
  Array<double> u = input({8, 64}, 4).value();
  yfa.backward(Tensor<float>(xt::cast<float>(u)));
  yda.backward(Tensor<double>(u));
  EXPECT_LT(max_abs_diff(xf.grad(), xd.grad()), 4e-6);
  EXPECT_LT(max_abs_diff(wf.grad(), wd.grad()), 4e-6);
  EXPECT_LT(max_abs_diff(bf.grad(), bd.grad()), 4e-6);
}

TEST(LayerNorm, FloatMatchesDouble) {
  auto x = input({4, 6}, 5), w = input({6}, 6), b = input({6}, 7);
  auto cast = [](const T64& t) { return Tensor<float>(Array<float>(xt::cast<float>(t.value())), true); };
  auto xf = cast(x), wf = cast(w), bf = cast(b);
  EXPECT_LT(max_abs_diff(layer_norm(xf, {6}, wf, bf).value(), layer_norm(x, {6}, w, b).value()), 1e-6);
}

TEST(LayerNorm, IsOneNodeOverItsDefinedInputs) {
  auto y = layer_norm(input({2, 4}, 1), {4}, T64(), input({4}, 2));
  EXPECT_STREQ(y.op(), "layer_norm");
  EXPECT_EQ(y.node()->inputs.size(), 2u);
}

TEST(LayerNorm, ShapeErrors) {
  XGRAD_EXPECT_THROW_MSG(layer_norm(zeros<double>({2, 3, 5}), {4}),
                         "layer_norm: expected input with trailing shape (4), got (2, 3, 5)");
  XGRAD_EXPECT_THROW_MSG(layer_norm(zeros<double>({5}), {2, 5}), "layer_norm", "(2, 5)", "got (5)");
  XGRAD_EXPECT_THROW_MSG(layer_norm(zeros<double>({2, 4}), {4}, zeros<double>({5})), "layer_norm",
                         "weight of shape (4)", "got (5)");
  XGRAD_EXPECT_THROW_MSG(layer_norm(zeros<double>({2, 4}), {4}, T64(), zeros<double>({2, 4})), "layer_norm",
                         "bias of shape (4)", "got (2, 4)");
  XGRAD_EXPECT_THROW_MSG(layer_norm(zeros<double>({2, 4}), {}), "layer_norm", "at least 1-dimensional");
}

// normalized_shape takes LibTorch's int64 sizes ({x.size(-1)}, x.sizes()) as well as a Shape (it took
// a Shape of std::size_t only: {x.size(-1)} was a narrowing error under clang); a negative size is
// refused naming layer_norm and the value.
TEST(LayerNorm, NormalizedShapeTakesInt64Sizes) {
  const T64 x = input({2, 3, 4}, 5);
  const std::int64_t d = x.size(-1);
  const Array<double> expected = layer_norm(x, Shape{4}).value();
  EXPECT_EQ(layer_norm(x, {x.size(-1)}).value(), expected);
  EXPECT_EQ(layer_norm(x, {d}).value(), expected);
  EXPECT_EQ(layer_norm(x, std::vector<std::int64_t>{d}).value(), expected);
  EXPECT_EQ(layer_norm(x, x.sizes()).value(), layer_norm(x, Shape{2, 3, 4}).value());
  XGRAD_EXPECT_THROW_MSG(layer_norm(x, {d - 7}), "layer_norm: expected non-negative sizes, got a negative size -3");
}
