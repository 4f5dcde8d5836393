// Higher-order gradients (create_graph): the engine's part. Gradients with history from
// autograd::grad and backward(), differentiated again; LibTorch's argument order; gradgradcheck;
// refusals by name (an op without a differentiable backward, a once_differentiable Function, a
// hook on the Array that replaces a gradient); a hook on the Tensor is part of the graph. Each
// op's second derivatives are checked by the registry (tests/gradcheck, GradgradcheckEntries.*).
#include "test_util.hpp"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include <xgrad/core/function.hpp>

using namespace xgrad;
using namespace xgrad::testing;

namespace {
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST(CreateGraph, SecondAndThirdDerivativeOfACube) {
  auto x = vec({0.5, -2.0, 3.0});
  auto y = sum(x * x * x);
  auto g = autograd::grad({y}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];  // 3 x^2
  ASSERT_TRUE(g.requires_grad());
  auto h = autograd::grad({sum(g)}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];  // 6 x
  auto t = autograd::grad({sum(h)}, {x})[0];                                           // 6
  for (std::size_t i = 0; i < 3; ++i) {
    const double xi = x.value()(i);
    EXPECT_DOUBLE_EQ(g.value()(i), 3 * xi * xi);
    EXPECT_DOUBLE_EQ(h.value()(i), 6 * xi);
    EXPECT_DOUBLE_EQ(t.value()(i), 6.0);
  }
  EXPECT_FALSE(t.requires_grad());  // without create_graph: a plain value
}

TEST(CreateGraph, HessianVectorProductOfAQuadraticForm) {
  // f(x) = 0.5 x^T A x with A symmetric: H v = A v.
  auto a = from_vector<double>({2, 1, 0, 1, 3, 1, 0, 1, 4}, {3, 3});
  auto x = vec({1, -1, 2});
  auto v = vec({0.5, 2, -1}, false);
  auto f = sum(x * sum(a * reshape(x, {1, 3}), {1})) * 0.5;
  auto g = autograd::grad({f}, {x}, {}, std::nullopt, true)[0];
  auto hv = autograd::grad({sum(g * v)}, {x})[0];
  const std::vector<double> expected = {2 * 0.5 + 1 * 2, 1 * 0.5 + 3 * 2 - 1, 2 - 4};
  for (std::size_t i = 0; i < 3; ++i) EXPECT_NEAR(hv.value()(i), expected[i], 1e-12);
}

TEST(CreateGraph, BackwardWithCreateGraphGivesALeafAGradWithHistory) {
  auto x = vec({1.0, 2.0});
  auto y = sum(exp(x));
  y.backward(T64(), std::nullopt, /*create_graph=*/true);
  EXPECT_NEAR(x.grad()(1), std::exp(2.0), 1e-12);  // the value as always
  T64 gx = x.grad_tensor();
  ASSERT_TRUE(gx.requires_grad());  // d/dx of exp(x): exp(x), with history
  auto penalty = sum(gx * gx);      // sum exp(2x)
  x.zero_grad(true);
  penalty.backward();
  EXPECT_NEAR(x.grad()(0), 2 * std::exp(2.0), 1e-12);
  EXPECT_NEAR(x.grad()(1), 2 * std::exp(4.0), 1e-10);
}

TEST(CreateGraph, AGradAccumulatedTwiceKeepsBothHistories) {
  auto x = vec({1.5});
  sum(x * x).backward(T64(), std::nullopt, true);      // 2x
  sum(x * x * x).backward(T64(), std::nullopt, true);  // + 3x^2
  auto g = x.grad_tensor();
  EXPECT_DOUBLE_EQ(g.value()(0), 2 * 1.5 + 3 * 1.5 * 1.5);
  auto d = autograd::grad({sum(g)}, {x})[0];  // 2 + 6x
  EXPECT_DOUBLE_EQ(d.value()(0), 2 + 6 * 1.5);
  x.zero_grad(true);
  EXPECT_FALSE(x.grad_tensor().defined());
}

TEST(CreateGraph, RetainGraphDefaultsToCreateGraph) {
  auto x = vec({0.3, 0.7});
  auto y = sum(tanh(x));
  autograd::grad({y}, {x}, {}, std::nullopt, /*create_graph=*/true);
  EXPECT_NO_THROW(autograd::grad({y}, {x}));  // the graph was retained
  EXPECT_TRUE(contains(error_of([&] { autograd::grad({y}, {x}); }), "a second time"));
}

TEST(CreateGraph, GradOutputsWithHistoryAreDifferentiated) {
  // d/dv of (v^T J) for y = x * c: J = diag(c), so the derivative of sum(v * c * w) by v is c * w.
  auto x = vec({1, 2, 3});
  auto c = vec({4, 5, 6}, false);
  auto v = vec({1, 1, 1});
  auto g = autograd::grad({x * c}, {x}, {v}, std::nullopt, true)[0];
  auto dv = autograd::grad({sum(g * vec({1, 2, 3}, false))}, {v})[0];
  EXPECT_DOUBLE_EQ(dv.value()(0), 4);
  EXPECT_DOUBLE_EQ(dv.value()(2), 18);
}

TEST(CreateGraph, LibTorchArgumentOrderAllowUnusedIsSixth) {
  auto x = vec({1, 2});
  auto unused = vec({3});
  auto loss = sum(x * x);
  auto g = autograd::grad({loss}, {x, unused}, {}, /*retain_graph=*/true, /*create_graph=*/false,
                          /*allow_unused=*/true);
  EXPECT_FALSE(g[1].defined());
  EXPECT_FALSE(g[0].requires_grad());
  // The fifth argument is create_graph: the old order's allow_unused=true now means create_graph.
  EXPECT_TRUE(contains(error_of([&] {
                         autograd::grad({loss}, {x, unused}, {}, true, true);
                       }),
                       "appears to not have been used"));
}

namespace {
// An op with no differentiable backward (as a user's own make_result without a formula).
T64 square_without_formula(const T64& x) {
  Array<double> y = x.value() * x.value();
  return make_result<double>("square_without_formula", std::move(y), {x}, [](Node<double>& out) {
    Array<double> g = out.grad * out.input_value(0) * 2.0;
    out.input(0).accumulate_grad(std::move(g));
  });
}

struct ArraySquare : autograd::Function<ArraySquare> {
  static constexpr bool once_differentiable = true;
  static T64 forward(autograd::AutogradContext<double>* ctx, T64 x) {
    ctx->save_for_backward({x});
    return T64(Array<double>(x.value() * x.value()));
  }
  static std::vector<T64> backward(autograd::AutogradContext<double>* ctx, std::vector<T64> g) {
    const Array<double>& x = ctx->get_saved_variables()[0].value();
    return {T64(Array<double>(g[0].value() * x * 2.0))};
  }
};

struct TensorSquare : autograd::Function<TensorSquare> {
  static T64 forward(autograd::AutogradContext<double>* ctx, T64 x) {
    ctx->save_for_backward({x});
    return T64(Array<double>(x.value() * x.value()));
  }
  static std::vector<T64> backward(autograd::AutogradContext<double>* ctx, std::vector<T64> g) {
    return {g[0] * ctx->get_saved_variables()[0] * 2.0};
  }
};

struct TwoOutputs : autograd::Function<TwoOutputs> {  // (x^2, x^3), backward in Tensor ops
  static std::vector<T64> forward(autograd::AutogradContext<double>* ctx, T64 x) {
    ctx->save_for_backward({x});
    return {T64(Array<double>(x.value() * x.value())), T64(Array<double>(x.value() * x.value() * x.value()))};
  }
  static std::vector<T64> backward(autograd::AutogradContext<double>* ctx, std::vector<T64> g) {
    const T64 x = ctx->get_saved_variables()[0];
    return {g[0] * x * 2.0 + g[1] * x * x * 3.0};
  }
};
}  // namespace

TEST(CreateGraph, AnOpWithoutADifferentiableBackwardIsRefusedByName) {
  auto x = vec({1, 2});
  auto y = sum(square_without_formula(x));
  const std::string m = error_of([&] { autograd::grad({y}, {x}, {}, std::nullopt, true); });
  EXPECT_TRUE(contains(m, "'square_without_formula' does not support double backward")) << m;
  // First order still works.
  EXPECT_DOUBLE_EQ(autograd::grad({sum(square_without_formula(x))}, {x})[0].value()(1), 4.0);
}

TEST(CreateGraph, OnceDifferentiableFunctionRefusesASecondDifferentiationByName) {
  auto x = vec({1, 2});
  auto g = autograd::grad({sum(ArraySquare::apply(x))}, {x}, {}, std::nullopt, true)[0];
  EXPECT_DOUBLE_EQ(g.value()(1), 4.0);  // the first derivative is right
  ASSERT_TRUE(g.requires_grad());       // and cannot be silently constant
  const std::string m = error_of([&] { autograd::grad({sum(g)}, {x}); });
  EXPECT_TRUE(contains(m, "once_differentiable")) << m;
  EXPECT_TRUE(contains(m, "ArraySquare")) << m;
}

TEST(CreateGraph, FunctionWithATensorBackwardIsDifferentiatedAgain) {
  auto x = vec({1.5, -2});
  auto g = autograd::grad({sum(TensorSquare::apply(x))}, {x}, {}, std::nullopt, true)[0];  // 2x
  auto h = autograd::grad({sum(g * x)}, {x})[0];                                           // d/dx (2 x^2) = 4x
  EXPECT_DOUBLE_EQ(h.value()(0), 6.0);
  EXPECT_DOUBLE_EQ(h.value()(1), -8.0);
  const auto r = gradgradcheck(
      [](const std::vector<T64>& in) { return TwoOutputs::apply(in[0])[1] * TwoOutputs::apply(in[0])[0]; },
      {input({4}, 3)});
  EXPECT_TRUE(r.passed) << r.summary();
}

TEST(CreateGraph, AHookOnTheArrayThatReplacesAGradientIsRefusedUnderCreateGraph) {
  auto x = vec({1, 2});
  auto y = x * x;
  y.register_hook([](const Array<double>& g) { return Array<double>(g * 2.0); });
  const std::string m = error_of([&] { autograd::grad({sum(y)}, {x}, {}, std::nullopt, true); });
  EXPECT_TRUE(contains(m, "create_graph")) << m;
  EXPECT_TRUE(contains(m, "expected a hook taking Tensor<T>")) << m;
  auto z = x * x;
  z.register_hook([](const Array<double>&) {});  // looking is fine
  EXPECT_NO_THROW(autograd::grad({sum(z)}, {x}, {}, std::nullopt, true));
}

// LibTorch: a hook on the Tensor that replaces a gradient under create_graph is part of the graph.
// It gets the gradient with its history and its result's history is kept, so the second
// derivative goes through the hook's own computation. (It used to be refused.)
TEST(CreateGraph, AHookOnTheTensorIsPartOfTheGraph) {
  auto x = vec({0.5, -1.5, 2.0});
  auto y = x * x;
  y.register_hook([x](T64 g) { return g * x; });  // dL/dy * x, where x is differentiated too
  auto g = autograd::grad({sum(y)}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];  // x * 2x
  ASSERT_TRUE(g.requires_grad());
  auto h = autograd::grad({sum(g)}, {x})[0];  // d/dx 2x^2 = 4x (2x if the hook's x were a constant)
  for (std::size_t i = 0; i < 3; ++i) {
    const double xi = x.value()(i);
    EXPECT_DOUBLE_EQ(g.value()(i), 2 * xi * xi);
    EXPECT_DOUBLE_EQ(h.value()(i), 4 * xi);
  }
}

TEST(CreateGraph, AHookOnALeafIsPartOfTheGraphOfBackward) {
  auto x = vec({0.5, -1.5, 2.0});
  RemovableHandle squares = x.register_hook([](T64 g) { return g * g; });  // (3x^2)^2 = 9x^4
  sum(x * x * x).backward({}, std::nullopt, /*create_graph=*/true);
  T64 gx = x.grad_tensor();
  ASSERT_TRUE(gx.requires_grad());
  squares.remove();                            // else it would square the next gradient of x too
  auto d = autograd::grad({sum(gx)}, {x})[0];  // 36x^3
  for (std::size_t i = 0; i < 3; ++i) {
    const double xi = x.value()(i);
    EXPECT_NEAR(x.grad()(i), 9 * std::pow(xi, 4), 1e-12);
    EXPECT_NEAR(d.value()(i), 36 * std::pow(xi, 3), 1e-12);
  }
  x.zero_grad();  // the gradient's graph holds x: let both go
}

// Against finite differences of the first-order gradients. As in PyTorch the hook also runs in
// the second backward wherever it passes through y, so no op's differentiable backward here reads
// y's value (only add's, exp's and mul's: they read their inputs or exp's own output).
TEST(CreateGraph, AHookOnTheTensorPassesGradgradcheck) {
  const auto f = [](const std::vector<T64>& in) {
    T64 y = exp(in[0]) * in[1];
    y.register_hook([w = in[1]](T64 g) { return g * tanh(w); });
    return y + in[0];
  };
  const auto r = gradgradcheck(f, {input({2, 3}, 5), input({2, 3}, 6)});
  EXPECT_TRUE(r.passed) << r.summary();
}

TEST(CreateGraph, AGraphOfGradientsIsFreed) {
  std::weak_ptr<Node<double>> weak;
  {
    auto x = vec({1, 2});
    auto g = autograd::grad({sum(exp(x) * x)}, {x}, {}, std::nullopt, true)[0];
    weak = g.node();
    autograd::grad({sum(g)}, {x});
  }
  EXPECT_TRUE(weak.expired());
}

TEST(Gradgradcheck, PassesForSmoothElementwiseOpsAndCatchesAWrongSecondDerivative) {
  const std::vector<T64> one = {input({2, 3}, 1, /*away_from_zero=*/true)};
  const auto run = [&](auto f, std::vector<T64> in) { return gradgradcheck(f, in); };
  using In = const std::vector<T64>&;
  EXPECT_TRUE(run([](In in) { return tanh(in[0]) * sigmoid(in[0]); }, one).passed);
  EXPECT_TRUE(run([](In in) { return gelu(in[0]); }, one).passed);
  EXPECT_TRUE(run([](In in) { return gelu(in[0], "tanh"); }, one).passed);
  EXPECT_TRUE(run([](In in) { return silu(in[0]) / (exp(in[0]) + 1.0); }, one).passed);
  EXPECT_TRUE(run([](In in) { return in[0] * in[1] - in[1] / in[0]; }, {one[0], input({3}, 2, true)}).passed);
  // A Function whose Tensor backward is wrong by a constant factor in its second derivative:
  // first order right (2x g), second order wrong (its derivative in x is 3 g, not 2 g).
  struct Wrong : autograd::Function<Wrong> {
    static T64 forward(autograd::AutogradContext<double>* ctx, T64 x) {
      ctx->save_for_backward({x});
      return T64(Array<double>(x.value() * x.value()));
    }
    static std::vector<T64> backward(autograd::AutogradContext<double>* ctx, std::vector<T64> g) {
      const T64 x = ctx->get_saved_variables()[0];
      return {g[0] * x * 3.0 - g[0] * x.detach()};
    }
  };
  EXPECT_TRUE(gradcheck([](In in) { return Wrong::apply(in[0]); }, one).passed);
  EXPECT_FALSE(run([](In in) { return Wrong::apply(in[0]); }, one).passed);
}

TEST(CreateGraph, AFailedCreateGraphBackwardFreesItsGraph) {
  // tanh's gradient graph holds tanh's output, and it waits on the node below (which refuses):
  // unless the failed pass drops it, node -> its gradient's graph -> tanh's output -> node.
  std::weak_ptr<Node<double>> weak;
  {
    auto x = vec({0.5, 1.5});
    auto t = tanh(square_without_formula(x));
    weak = t.node();
    auto y = sum(t);
    EXPECT_FALSE(error_of([&] { autograd::grad({y}, {x}, {}, std::nullopt, true); }).empty());
  }
  EXPECT_TRUE(weak.expired());
}
