// gradcheck_parameters: the finite-difference check over tensors a function reads by handle
// (a module's parameters), perturbed in place.
#include "test_util.hpp"

namespace xgrad::testing {
namespace {

TEST(GradcheckParameters, PassesForALinearLayerAndNamesEveryParameter) {
  manual_seed(3);
  auto fc = std::make_shared<nn::Linear<double>>(4, 3);
  const T64 x = input({2, 4}, 7);
  GradcheckResult r = gradcheck_parameters([&] { return gelu(fc->forward(x)); }, fc->named_parameters());
  EXPECT_TRUE(r.passed) << r.summary();
  ASSERT_EQ(r.inputs.size(), 2u);
  EXPECT_EQ(r.inputs[0].name, "weight");
  EXPECT_EQ(r.inputs[0].shape, (Shape{3, 4}));
  EXPECT_EQ(r.inputs[1].name, "bias");
  EXPECT_EQ(r.inputs[1].input, 1u);
  EXPECT_LT(r.inputs[0].max_abs_error, 1e-7);
  EXPECT_NE(r.summary().find("weight (3, 4)"), std::string::npos) << r.summary();
}

TEST(GradcheckParameters, DetectsAWrongGradientInOneParameterOnly) {
  T64 a = input({3}, 1, true);
  T64 b = input({3}, 2, true);
  // a * b with a backward that is right for a and doubles b's gradient.
  auto f = [&] {
    Array<double> y = a.value() * b.value();
    return make_result<double>("half_wrong_mul", std::move(y), {a, b}, [](Node<double>& out) {
      out.input(0).accumulate_grad(Array<double>(out.grad * out.input_value(1)));
      out.input(1).accumulate_grad(Array<double>(2.0 * out.grad * out.input_value(0)));
    });
  };
  GradcheckResult r = gradcheck_parameters(f, {{"a", a}, {"b", b}});
  EXPECT_FALSE(r.passed);
  ASSERT_EQ(r.inputs.size(), 2u);
  EXPECT_TRUE(r.inputs[0].passed) << r.summary();
  EXPECT_FALSE(r.inputs[1].passed) << r.summary();
  EXPECT_GT(r.inputs[1].max_abs_error, 1e-2);
  // The worst element's analytic value is twice the numeric one.
  EXPECT_NEAR(r.inputs[1].analytic, 2.0 * r.inputs[1].numeric, 1e-6);
  EXPECT_NE(r.summary().find("b (3): "), std::string::npos) << r.summary();
}

TEST(GradcheckParameters, LeavesValuesAndGradientsAsTheyWere) {
  T64 w = input({2, 3}, 1);
  T64 v = input({3}, 2);
  const Array<double> w0 = w.value(), v0 = v.value();
  w.set_grad(Array<double>(xt::ones<double>({2, 3}) * 5.0));  // an earlier gradient
  GradcheckResult r = gradcheck_parameters([&] { return sum(tanh(w * v)); }, {{"w", w}, {"v", v}});
  EXPECT_TRUE(r.passed) << r.summary();
  EXPECT_EQ(w.value(), w0);  // bit for bit: every perturbation was undone
  EXPECT_EQ(v.value(), v0);
  ASSERT_TRUE(w.has_grad());
  EXPECT_EQ(w.grad(), Array<double>(xt::ones<double>({2, 3}) * 5.0));
  EXPECT_FALSE(v.has_grad());
}

TEST(GradcheckParameters, ChecksAReusedParameterAndSkipsFrozenOnes) {
  T64 p = input({4}, 1);
  T64 frozen = input({4}, 2).detach();
  // p used twice: both contributions must be in the analytic gradient.
  GradcheckResult r = gradcheck_parameters([&] { return p * p * frozen + p; }, {{"frozen", frozen}, {"p", p}});
  EXPECT_TRUE(r.passed) << r.summary();
  ASSERT_EQ(r.inputs.size(), 1u);
  EXPECT_EQ(r.inputs[0].name, "p");
  EXPECT_EQ(r.inputs[0].input, 1u);
}

TEST(GradcheckParameters, DropoutWithAReseededGeneratorPasses) {
  manual_seed(0);
  auto fc = std::make_shared<nn::Linear<double>>(5, 6);
  auto drop = std::make_shared<nn::Dropout<double>>(0.3);
  const T64 x = input({4, 5}, 3);
  auto f = [&] {
    manual_seed(11);  // the same mask at every evaluation
    return mse_loss(drop->forward(fc->forward(x)), Tensor<double>(xt::zeros<double>({4, 6})));
  };
  GradcheckResult r = gradcheck_parameters(f, fc->named_parameters());
  EXPECT_TRUE(r.passed) << r.summary();
  // Without the reseed every evaluation draws a new mask and the check must fail.
  auto unseeded = [&] { return mse_loss(drop->forward(fc->forward(x)), Tensor<double>(xt::zeros<double>({4, 6}))); };
  EXPECT_FALSE(gradcheck_parameters(unseeded, fc->named_parameters()).passed);
}

TEST(GradcheckParameters, RejectsNonLeavesAndUndefinedTensors) {
  T64 p = input({2}, 1);
  T64 q = p * 2.0;
  XGRAD_EXPECT_THROW_MSG(gradcheck_parameters([&] { return sum(q); }, {{"q", q}}), "gradcheck_parameters", "\"q\"",
                         "leaf");
  XGRAD_EXPECT_THROW_MSG(gradcheck_parameters([&] { return sum(p); }, {{"none", T64()}}), "\"none\"", "undefined");
}

}  // namespace
}  // namespace xgrad::testing
