// rms_norm: values against the formula, the default eps per dtype, PyTorch's golden values
// (tests/fixtures/rms_norm_*.json, F.rms_norm's formula in torch), HF's float32 LlamaRMSNorm
// recipe, gradchecks and gradgradchecks, and the argument errors; add_rms_norm_with_sum against
// the unfused ops, bit for bit.
#include <cmath>
#include <limits>
#include <string>
#include <tuple>

#include <xgrad/ops/ops.hpp>

#include "fixture.hpp"
#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

// x / sqrt(mean(x^2) + eps) * w over the last `nd` dims, by the textbook formula in double.
template <class T>
Array<double> naive_rms_norm(const Array<T>& x, std::size_t nd, const Array<T>* w, double eps) {
  std::size_t d = 1;
  for (std::size_t i = x.dimension() - nd; i < x.dimension(); ++i) d *= x.shape()[i];
  const std::size_t rows = x.size() / d;
  Array<double> y = xt::cast<double>(x);
  for (std::size_t r = 0; r < rows; ++r) {
    double mean_sq = 0;
    for (std::size_t j = 0; j < d; ++j) mean_sq += std::pow(y.data()[r * d + j], 2) / static_cast<double>(d);
    for (std::size_t j = 0; j < d; ++j) {
      y.data()[r * d + j] /= std::sqrt(mean_sq + eps);
      if (w) y.data()[r * d + j] *= static_cast<double>(w->data()[j]);
    }
  }
  return y;
}

template <class T>
Tensor<T> cast(const T64& t) {
  return Tensor<T>(Array<T>(xt::cast<T>(t.value())), true);
}

// PyTorch's values: each case of the fixture's config, forward and backward, in T.
template <class T>
void expect_golden(const std::string& name, double tolerance) {
  const Fixture f = load_fixture(name);
  EXPECT_EQ(f.config().at("cases").size(), 3u);
  for (const auto& item : f.config().at("cases").items()) {
    const std::string key = item.key();
    const nlohmann::json& c = item.value();
    SCOPED_TRACE(name + ", case " + key);
    Tensor<T> x = f.tensor<T>("input", true);
    Tensor<T> w = c.at("weight").is_null() ? Tensor<T>() : f.tensor<T>(c.at("weight").get<std::string>(), true);
    std::optional<double> eps;
    if (!c.at("eps").is_null()) eps = c.at("eps").get<double>();
    Tensor<T> y = rms_norm(x, c.at("normalized_shape").get<std::vector<std::int64_t>>(), w, eps);
    EXPECT_LT(max_abs_diff(y.value(), f.array<T>(key + ".output")), tolerance);
    y.backward(f.tensor<T>("grad_output"));
    EXPECT_LT(max_abs_diff(x.grad(), f.array<T>(key + ".grad.input")), tolerance);
    if (w.defined()) {
      EXPECT_LT(max_abs_diff(w.grad(), f.array<T>(key + ".grad.weight")), tolerance);
    }
  }
}

}  // namespace

TEST(RmsNorm, ForwardMatchesFormula) {
  const T64 x = input({2, 3, 4}, 1), w = input({4}, 2), w2 = input({3, 4}, 3);
  EXPECT_LT(max_abs_diff(rms_norm(x, {4}, w, 1e-5).value(), naive_rms_norm(x.value(), 1, &w.value(), 1e-5)), 1e-12);
  EXPECT_LT(max_abs_diff(rms_norm(x, {4}).value(), naive_rms_norm<double>(x.value(), 1, nullptr, 0.0)), 1e-12);
  EXPECT_LT(max_abs_diff(rms_norm(x, {3, 4}, w2, 0.1).value(), naive_rms_norm(x.value(), 2, &w2.value(), 0.1)), 1e-12);
  EXPECT_LT(max_abs_diff(rms_norm(x, x.sizes()).value(), naive_rms_norm<double>(x.value(), 3, nullptr, 0.0)), 1e-12);
  // A row longer than a SIMD batch with a tail, in float.
  const T64 long_x = input({3, 37}, 4), long_w = input({37}, 5);
  const Tensor<float> xf = cast<float>(long_x), wf = cast<float>(long_w);
  EXPECT_LT(max_abs_diff(rms_norm(xf, {37}, wf, 1e-6).value(), naive_rms_norm(xf.value(), 1, &wf.value(), 1e-6)), 1e-6);
}

// eps unset is torch.finfo(x.dtype).eps: 2^-23 for float, 2^-52 for double. A zero row makes it
// visible: y = 0 and rstd = eps^(-1/2), so dx = dy * w / sqrt(eps).
TEST(RmsNorm, DefaultEpsIsTheDtypesEpsilon) {
  T64 xd(Array<double>{{0.0, 0.0}}, true);
  rms_norm(xd, {2}).backward(T64(Array<double>{{1.0, 2.0}}));
  const double rd = 1 / std::sqrt(std::numeric_limits<double>::epsilon());
  EXPECT_DOUBLE_EQ(xd.grad()(0, 0), rd);
  EXPECT_DOUBLE_EQ(xd.grad()(0, 1), 2 * rd);
  Tensor<float> xf(Array<float>{{0.0f, 0.0f}}, true);
  rms_norm(xf, {2}).backward(Tensor<float>(Array<float>{{1.0f, 2.0f}}));
  EXPECT_FLOAT_EQ(xf.grad()(0, 0), 2048.0f * std::sqrt(2.0f));  // 2^-23 -> 2^11.5
  EXPECT_FLOAT_EQ(xf.grad()(0, 1), 4096.0f * std::sqrt(2.0f));
  // Given explicitly, it is used as is.
  T64 x0(Array<double>{{0.0, 0.0}}, true);
  rms_norm(x0, {2}, T64(), 0.25).backward(T64(Array<double>{{1.0, 1.0}}));
  EXPECT_DOUBLE_EQ(x0.grad()(0, 0), 2.0);
}

TEST(RmsNorm, GoldenFromPyTorchFloat64) { expect_golden<double>("rms_norm_float64", 1e-12); }

TEST(RmsNorm, GoldenFromPyTorchFloat32) { expect_golden<float>("rms_norm_float32", 2e-6); }

// transformers' LlamaRMSNorm for float32 input: variance = x.pow(2).mean(-1, keepdim=True);
// weight * (x * torch.rsqrt(variance + eps)), all in float32. xgrad's double statistics agree
// within float rounding.
TEST(RmsNorm, MatchesHuggingFaceLlamaRecipeInFloat32) {
  const std::size_t rows = 16, D = 64;
  const float eps = 1e-6f;
  const Tensor<float> x = cast<float>(input({rows, D}, 7)), w = cast<float>(input({D}, 8));
  const Array<float> y = rms_norm(x, {static_cast<std::int64_t>(D)}, w, eps).value();
  const float* px = x.value().data();
  for (std::size_t r = 0; r < rows; ++r) {
    float variance = 0;
    for (std::size_t j = 0; j < D; ++j) variance += px[r * D + j] * px[r * D + j];
    variance /= static_cast<float>(D);
    const float rsqrt = 1.0f / std::sqrt(variance + eps);
    for (std::size_t j = 0; j < D; ++j) {
      const float hf = w.value()(j) * (px[r * D + j] * rsqrt);
      EXPECT_NEAR(y(r, j), hf, 1e-6 * std::abs(hf) + 1e-30) << "row " << r << ", column " << j;
    }
  }
}

TEST(RmsNorm, Gradcheck) {
  for (const Shape& ns : {Shape{4}, Shape{3, 4}}) {
    SCOPED_TRACE(shape_str(ns));
    const Shape sx = {2, 3, 4};
    expect_gradcheck([ns](const Inputs& in) { return rms_norm(in[0], ns, in[1], 1e-5); }, {input(sx, 1), input(ns, 2)});
    expect_gradcheck([ns](const Inputs& in) { return rms_norm(in[0], ns); }, {input(sx, 1)});
  }
  // The weight alone requiring grad; a transposed input; a row of 37 (SIMD batches and a tail).
  T64 x = input({3, 4}, 4);
  x.requires_grad_(false);
  expect_gradcheck([](const Inputs& in) { return rms_norm(in[0], {4}, in[1]); }, {x, input({4}, 2)});
  expect_gradcheck([](const Inputs& in) { return rms_norm(transpose(in[0], 0, 1), {3}, in[1]); },
                   {input({3, 4}, 6), input({3}, 7)});
  expect_gradcheck([](const Inputs& in) { return rms_norm(in[0], {37}, in[1], 0.01); },
                   {input({2, 37}, 8), input({37}, 9)});
}

// Second derivatives through the GradFormula (create_graph).
TEST(RmsNorm, Gradgradcheck) {
  const auto check = [](const GradcheckFunction& f, const Inputs& in) {
    const GradcheckResult r = gradgradcheck(f, in);
    EXPECT_TRUE(r.passed) << r.summary();
  };
  check([](const Inputs& in) { return rms_norm(in[0], {4}, in[1], 1e-3); }, {input({2, 3, 4}, 1), input({4}, 2)});
  check([](const Inputs& in) { return rms_norm(in[0], {3, 4}); }, {input({2, 3, 4}, 3)});
}

TEST(RmsNorm, IsOneNodeOverItsDefinedInputs) {
  const T64 y = rms_norm(input({2, 4}, 1), {4}, input({4}, 2));
  EXPECT_STREQ(y.op(), "rms_norm");
  EXPECT_EQ(y.node()->inputs.size(), 2u);
  EXPECT_EQ(rms_norm(input({2, 4}, 1), {4}).node()->inputs.size(), 1u);
}

TEST(RmsNorm, ArgumentErrors) {
  XGRAD_EXPECT_THROW_MSG(rms_norm(zeros<double>({2, 3, 5}), {4}),
                         "rms_norm: expected input with trailing shape (4), got (2, 3, 5)");
  XGRAD_EXPECT_THROW_MSG(rms_norm(zeros<double>({5}), {2, 5}), "rms_norm", "(2, 5)", "got (5)");
  XGRAD_EXPECT_THROW_MSG(rms_norm(zeros<double>({2, 4}), {4}, zeros<double>({5})),
                         "rms_norm: expected weight of shape (4), got (5)");
  XGRAD_EXPECT_THROW_MSG(rms_norm(zeros<double>({2, 4}), {}), "rms_norm", "at least 1-dimensional");
  XGRAD_EXPECT_THROW_MSG(rms_norm(zeros<double>({2, 4}), {4}, T64(), -1e-5), "rms_norm: expected eps >= 0, got -1e-05");
  XGRAD_EXPECT_THROW_MSG(rms_norm(zeros<float>({2, 4}), {4}, Tensor<float>(), std::nan("")),
                         "rms_norm: expected eps >= 0, got nan");
  XGRAD_EXPECT_THROW_MSG(rms_norm(zeros<double>({2, 4}), {std::int64_t(-4)}),
                         "rms_norm: expected non-negative sizes, got a negative size -4");
}

// add_rms_norm_with_sum == {x + r, rms_norm(x + r)} bit for bit: both values, and the gradients of
// x, r and the weight with both results used (pre-norm: s is the next residual), y only and s only;
// at 1 and 4 threads (512 rows of 64 split in pieces: the weight's gradient sums them in order).
TEST(AddRmsNorm, WithSumMatchesTheUnfusedOpsBitForBit) {
  ThreadCountGuard guard;
  const Shape shape{512, 64};
  const Tensor<float> u = random_leaf<float>(shape, 5).detach(), v = random_leaf<float>(shape, 6).detach();
  for (int threads : {1, 4}) {
    set_num_threads(threads);
    for (const char* use : {"both", "y", "s"}) {
      SCOPED_TRACE(std::string(use) + " at " + std::to_string(threads) + " threads");
      Tensor<float> x[2], r[2], w[2], s[2], y[2];
      for (int k = 0; k < 2; ++k) {
        x[k] = random_leaf<float>(shape, 1), r[k] = random_leaf<float>(shape, 2), w[k] = random_leaf<float>({64}, 3);
      }
      std::tie(s[0], y[0]) = add_rms_norm_with_sum(x[0], r[0], {64}, w[0], 1e-6);
      s[1] = x[1] + r[1];
      y[1] = rms_norm(s[1], {64}, w[1], 1e-6);
      EXPECT_STREQ(y[0].op(), "add_rms_norm");  // the fused node
      for (int k = 0; k < 2; ++k) {
        const Tensor<float> loss = std::string(use) == "both" ? sum(y[k] * u + s[k] * v)
                                   : std::string(use) == "y"  ? sum(y[k] * u)
                                                              : sum(s[k] * v);
        loss.backward();
      }
      EXPECT_EQ(s[0].value(), s[1].value());
      EXPECT_EQ(y[0].value(), y[1].value());
      EXPECT_EQ(x[0].grad(), x[1].grad());
      EXPECT_EQ(r[0].grad(), r[1].grad());
      if (std::string(use) != "s") {
        EXPECT_EQ(w[0].grad(), w[1].grad());
      }
    }
  }
}

TEST(AddRmsNorm, GradgradcheckAndUnfusedFallback) {
  const GradcheckResult r = gradgradcheck(
      [](const Inputs& in) {
        const auto [s, y] = add_rms_norm_with_sum(in[0], in[1], {4}, in[2], 1e-3);
        return s * y;
      },
      {input({2, 3, 4}, 1), input({2, 3, 4}, 2), input({4}, 3)});
  EXPECT_TRUE(r.passed) << r.summary();
  // r broadcast over x: the unfused ops, the same values.
  const T64 x = input({2, 3, 4}, 1), b = input({4}, 2);
  const auto [s, y] = add_rms_norm_with_sum(x, b, {4});
  EXPECT_STREQ(y.op(), "rms_norm");
  EXPECT_EQ(y.value(), rms_norm(x + b, {4}).value());
  XGRAD_EXPECT_THROW_MSG(add_rms_norm_with_sum(x, x, {3}), "add_rms_norm: expected input with trailing shape (3)");
}
