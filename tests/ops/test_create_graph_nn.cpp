// Higher-order gradients (create_graph) of matmul, linear, softmax, log_softmax, layer_norm,
// dropout, mse_loss and cross_entropy: what the registry's GradgradcheckList (double, default
// sizes) does not show. Their differentiable backwards give the first-order kernels' values in
// float too; softmax's reads its output (refused when it was changed in place); a fully masked
// log_softmax row keeps its zero gradient; under autocast the differentiable backward of linear
// runs in fp32; the gradients can be differentiated a third time; a gradient penalty through
// nn::Linear and nn::LayerNorm is right.
#include "test_util.hpp"

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <xgrad/backend/autocast.hpp>

using namespace xgrad;
using namespace xgrad::testing;

namespace {

template <class T>
Tensor<T> random(const Shape& shape, std::uint64_t seed, bool requires_grad = true) {
  Generator g(seed);
  return randn<T>(shape, g, requires_grad);
}

template <class T>
using Fn = std::function<Tensor<T>(const std::vector<Tensor<T>>&)>;

// The gradients of sum(f(inputs) * c) with and without create_graph: equal to rounding.
template <class T>
void expect_same_first_derivatives(const std::string& what, const Fn<T>& f, const std::vector<Tensor<T>>& inputs,
                                   double tol) {
  SCOPED_TRACE(what);
  const Tensor<T> c = random<T>(f(inputs).shape(), 99, false);
  const auto plain = autograd::grad({sum(f(inputs) * c)}, inputs);
  const auto graph = autograd::grad({sum(f(inputs) * c)}, inputs, {}, std::nullopt, /*create_graph=*/true);
  ASSERT_EQ(plain.size(), graph.size());
  for (std::size_t i = 0; i < plain.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_LT(max_abs_diff(graph[i].value(), plain[i].value()), tol);
  }
}

template <class T>
void check_every_op(double tol) {
  using V = const std::vector<Tensor<T>>&;
  const IndexArray target = {0, 4, 2, -100, 1, 3};
  expect_same_first_derivatives<T>(
      "matmul batched", [](V in) { return matmul(in[0], in[1]); },
      {random<T>({2, 1, 3, 4}, 1), random<T>({2, 4, 5}, 2)}, tol);
  expect_same_first_derivatives<T>(
      "matmul vector", [](V in) { return matmul(in[0], in[1]); }, {random<T>({4}, 3), random<T>({2, 4, 5}, 4)}, tol);
  expect_same_first_derivatives<T>(
      "linear", [](V in) { return linear(in[0], in[1], in[2]); },
      {random<T>({2, 3, 4}, 5), random<T>({5, 4}, 6), random<T>({5}, 7)}, tol);
  expect_same_first_derivatives<T>(
      "softmax", [](V in) { return softmax(in[0], 1); }, {random<T>({2, 3, 4}, 8)}, tol);
  expect_same_first_derivatives<T>(
      "log_softmax", [](V in) { return log_softmax(in[0], -1); }, {random<T>({2, 3, 4}, 9)}, tol);
  expect_same_first_derivatives<T>(
      "layer_norm", [](V in) { return layer_norm(in[0], Shape{4}, in[1], in[2]); },
      {random<T>({2, 3, 4}, 10), random<T>({4}, 11), random<T>({4}, 12)}, tol);
  expect_same_first_derivatives<T>(
      "dropout",
      [](V in) {
        Generator gen(5);
        return dropout(in[0], 0.3, true, &gen);
      },
      {random<T>({2, 3, 4}, 13)}, tol);
  expect_same_first_derivatives<T>(
      "mse_loss", [](V in) { return mse_loss(in[0], in[1], "sum"); }, {random<T>({2, 3}, 14), random<T>({2, 3}, 15)},
      tol);
  expect_same_first_derivatives<T>(
      "cross_entropy", [&](V in) { return cross_entropy(in[0], target, -100, "mean", 0.1); }, {random<T>({6, 5}, 16)},
      tol);
  const IndexArray target_nd = {{0, 4, 2}, {1, 1, 3}};
  expect_same_first_derivatives<T>(
      "cross_entropy none", [&](V in) { return cross_entropy(in[0], target_nd, 1, "none", 0.2); },
      {random<T>({2, 5, 3}, 17)}, tol);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(CreateGraphNn, FirstDerivativesEqualTheKernels) {
  check_every_op<double>(1e-12);
  check_every_op<float>(2e-5);
}

TEST(CreateGraphNn, SoftmaxOutputChangedInPlaceIsRefused) {
  for (const bool log : {false, true}) {
    auto x = input({2, 3}, 1);
    auto y = log ? log_softmax(x, 1) : softmax(x, 1);
    auto loss = sum(y * T64(Array<double>(random<double>({2, 3}, 2, false).value())));
    y.mutable_value()(0, 0) = 0.5;  // the formula reads y: it must refuse
    const std::string m = error_of([&] { autograd::grad({loss}, {x}, {}, std::nullopt, true); });
    EXPECT_TRUE(contains(m, "modified by an inplace operation")) << m;
    EXPECT_TRUE(contains(m, log ? "log_softmax" : "softmax")) << m;
  }
}

TEST(CreateGraphNn, FullyMaskedLogSoftmaxRowKeepsZeroGradients) {
  // Row 0 all -inf (every position masked), row 1 finite: the gradient and the Hessian-vector
  // product of row 0 are zero, row 1's are those of row 1 alone.
  const double inf = std::numeric_limits<double>::infinity();
  const T64 row = input({1, 4}, 3);
  Array<double> xv = Array<double>::from_shape({2, 4});
  for (std::size_t j = 0; j < 4; ++j) {
    xv(0, j) = -inf;
    xv(1, j) = row.value()(0, j);
  }
  const T64 x(xv, true);
  const T64 u = random<double>({2, 4}, 4, false), v = random<double>({2, 4}, 5, false);
  const T64 g = autograd::grad({log_softmax(x, 1)}, {x}, {u}, std::nullopt, true)[0];
  const T64 h = autograd::grad({sum(g * v)}, {x})[0];
  const T64 u1 = reshape(slice(u, 0, 1, 2), {1, 4}), v1 = reshape(slice(v, 0, 1, 2), {1, 4});
  const T64 g1 = autograd::grad({log_softmax(row, 1)}, {row}, {u1}, std::nullopt, true)[0];
  const T64 h1 = autograd::grad({sum(g1 * v1)}, {row})[0];
  for (std::size_t j = 0; j < 4; ++j) {
    EXPECT_EQ(g.value()(0, j), 0.0);
    EXPECT_EQ(h.value()(0, j), 0.0);
    EXPECT_NEAR(g.value()(1, j), g1.value()(0, j), 1e-14);
    EXPECT_NEAR(h.value()(1, j), h1.value()(0, j), 1e-14);
  }
}

TEST(CreateGraphNn, UnderAutocastTheDifferentiableBackwardRunsInFp32) {
  const Tensor<float> x = random<float>({3, 4}, 6), w = random<float>({5, 4}, 7), wt = random<float>({4, 5}, 10);
  const Tensor<float> u = random<float>({3, 5}, 8, false), v = random<float>({3, 4}, 9, false);
  Tensor<float> gx, gm, hw;
  {
    const AutocastGuard autocast;
    gx = autograd::grad({linear(x, w)}, {x}, {u}, std::nullopt, true)[0];
    gm = autograd::grad({matmul(x, wt)}, {x}, {u}, std::nullopt, true)[0];
    hw = autograd::grad({sum(gx * v)}, {w})[0];  // d/dW of sum((u W) * v) = u^T v
  }
  const Array<float> fp32 = matmul(u, w).value();  // no guard: fp32
  EXPECT_EQ(max_abs_diff(gx.value(), fp32), 0.0);
  EXPECT_EQ(max_abs_diff(gm.value(), matmul(u, transpose(wt, 0, 1)).value()), 0.0);
  EXPECT_LT(max_abs_diff(hw.value(), matmul(transpose(u, 0, 1), v).value()), 1e-5);
}

TEST(CreateGraphNn, ThirdDerivativesPassGradgradcheck) {
  // gradgradcheck of a first derivative taken with create_graph: the formulas' own results are
  // differentiated twice more.
  using In = const std::vector<T64>&;
  const T64 c = random<double>({2, 3, 4}, 20, false);
  const IndexArray target = {0, 3, -100, 1, 2, 2};  // for the logits as (6, 4)
  const auto first = [](const T64& y, const T64& x) {
    return autograd::grad({y}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
  };
  const std::vector<std::pair<std::string, std::function<T64(In)>>> cases = {
      {"softmax", [&](In in) { return first(sum(softmax(in[0], 1) * c), in[0]); }},
      {"log_softmax", [&](In in) { return first(sum(log_softmax(in[0], -1) * c), in[0]); }},
      {"layer_norm", [&](In in) { return first(sum(layer_norm(in[0], Shape{4}) * c), in[0]); }},
      {"mse_loss", [&](In in) { return first(mse_loss(in[0], c), in[0]); }},
      {"cross_entropy",
       [&](In in) {
         return first(cross_entropy(reshape(in[0], {6, 4}), target, -100, "mean", 0.1), in[0]);
       }},
  };
  for (const auto& [name, f] : cases) {
    SCOPED_TRACE(name);
    const GradcheckResult r = gradgradcheck(f, {input({2, 3, 4}, 21)});
    EXPECT_TRUE(r.passed) << r.summary();
  }
}

TEST(CreateGraphNn, GradientPenaltyThroughLinearAndLayerNormModules) {
  // WGAN-GP's penalty (|d critic / d x|^2 - 1)^2, whose gradient in the weights runs through the
  // modules' differentiable backwards (nn::Linear and nn::LayerNorm call linear and layer_norm).
  auto l1 = std::make_shared<nn::Linear<double>>(4, 5);
  auto norm = std::make_shared<nn::LayerNorm<double>>(nn::LayerNormOptions(5));
  auto l2 = std::make_shared<nn::Linear<double>>(5, 1);
  const T64 x = input({3, 4}, 30);
  const auto penalty = [&] {
    const GradGuard enabled(true);  // gradcheck's finite differences evaluate it under no_grad
    const T64 critic = l2->forward(gelu(norm->forward(l1->forward(x))));
    const T64 gx = autograd::grad({sum(critic)}, {x}, {}, std::nullopt, true)[0];
    return sum(pow(sum(gx * gx, {1}) - 1.0, 2.0));
  };
  NamedTensors params;
  for (const auto& m :
       {std::static_pointer_cast<nn::Module<double>>(l1), std::static_pointer_cast<nn::Module<double>>(norm),
        std::static_pointer_cast<nn::Module<double>>(l2)})
    for (const auto& p : m->named_parameters()) params.push_back(p);
  ASSERT_EQ(params.size(), 6u);
  const GradcheckResult r = gradcheck_parameters(penalty, params);
  EXPECT_TRUE(r.passed) << r.summary();
}
