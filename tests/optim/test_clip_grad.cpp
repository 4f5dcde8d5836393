// clip_grad_norm_ and clip_grad_value_ on hand-computed cases.
#include "test_util.hpp"

#include <cmath>
#include <limits>

using namespace xgrad;
using namespace xgrad::testing;
using namespace xgrad::optim;

namespace {
T64 param_with_grad(const std::vector<double>& grad) {
  T64 p = zeros<double>({grad.size()}, true);
  p.set_grad(from_vector<double>(grad, {grad.size()}).value());
  return p;
}
}  // namespace

TEST(ClipGradNorm, TwoNormOverAllGradientsTogether) {
  // ||(3, 4, 12)|| = 13 (the norm of the per-tensor norms 5 and 12)
  auto a = param_with_grad({3.0, 4.0}), b = param_with_grad({12.0});
  const double total = clip_grad_norm_<double>({a, b}, 6.5);
  EXPECT_DOUBLE_EQ(total, 13.0);
  const double coef = 6.5 / (13.0 + 1e-6);
  EXPECT_DOUBLE_EQ(a.grad()(0), 3.0 * coef);
  EXPECT_DOUBLE_EQ(a.grad()(1), 4.0 * coef);
  EXPECT_DOUBLE_EQ(b.grad()(0), 12.0 * coef);
  // the clipped norm is max_norm up to the 1e-6 guard
  EXPECT_NEAR(std::sqrt(9.0 + 16.0 + 144.0) * coef, 6.5, 1e-6);
}

TEST(ClipGradNorm, BelowTheMaximumNothingChanges) {
  auto a = param_with_grad({0.3, -0.4});
  EXPECT_DOUBLE_EQ(clip_grad_norm_<double>({a}, 0.5 + 1e-3), 0.5);
  EXPECT_EQ(a.grad(), (Array<double>{0.3, -0.4}));
  // exactly at max_norm the coefficient is max_norm / (norm + 1e-6) < 1: PyTorch scales slightly
  auto b = param_with_grad({0.3, -0.4});
  clip_grad_norm_<double>({b}, 0.5);
  EXPECT_LT(std::abs(b.grad()(0)), 0.3);
  EXPECT_NEAR(b.grad()(0), 0.3 * 0.5 / (0.5 + 1e-6), 1e-16);
}

TEST(ClipGradNorm, InfinityAndOneNorms) {
  const double inf = std::numeric_limits<double>::infinity();
  auto a = param_with_grad({1.0, -7.0}), b = param_with_grad({2.0, 3.0, -4.0});
  EXPECT_DOUBLE_EQ(clip_grad_norm_<double>({a, b}, 3.5, inf), 7.0);
  EXPECT_DOUBLE_EQ(a.grad()(1), -7.0 * 3.5 / (7.0 + 1e-6));
  EXPECT_DOUBLE_EQ(b.grad()(2), -4.0 * 3.5 / (7.0 + 1e-6));
  auto c = param_with_grad({1.0, -2.0}), d = param_with_grad({3.0});
  EXPECT_DOUBLE_EQ(clip_grad_norm_<double>({c, d}, 100.0, 1.0), 6.0);
  // p = 3: (1 + 8 + 27)^(1/3)
  auto e = param_with_grad({1.0, -2.0}), f = param_with_grad({3.0});
  EXPECT_NEAR(clip_grad_norm_<double>({e, f}, 100.0, 3.0), std::cbrt(36.0), 1e-14);
}

TEST(ClipGradNorm, SkipsParametersWithoutGradient) {
  auto a = param_with_grad({3.0, 4.0});
  T64 none = zeros<double>({4}, true);
  EXPECT_DOUBLE_EQ(clip_grad_norm_<double>({a, none}, 1.0), 5.0);
  EXPECT_FALSE(none.has_grad());
  EXPECT_EQ(clip_grad_norm_<double>({none}, 1.0), 0.0);
  EXPECT_EQ(clip_grad_norm_<double>({}, 1.0), 0.0);
}

TEST(ClipGradNorm, NonFiniteTotal) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto a = param_with_grad({nan, 1.0}), b = param_with_grad({2.0});
  XGRAD_EXPECT_THROW_MSG(clip_grad_norm_<double>({a, b}, 1.0, 2.0, /*error_if_nonfinite=*/true),
                         "clip_grad_norm_", "non-finite");
  // by default, PyTorch 1.13 scales by the NaN coefficient: every gradient becomes NaN
  EXPECT_TRUE(std::isnan(clip_grad_norm_<double>({a, b}, 1.0)));
  EXPECT_TRUE(std::isnan(b.grad()(0)));
  auto c = param_with_grad({1.0, nan, 5.0});
  EXPECT_TRUE(std::isnan(clip_grad_norm_<double>({c}, 1.0, std::numeric_limits<double>::infinity())));
  XGRAD_EXPECT_THROW_MSG(clip_grad_norm_<double>({c}, 1.0, 0.0), "norm_type must be positive");
}

TEST(ClipGradNorm, Float) {
  auto a = zeros<float>({2}, true);
  a.set_grad(Array<float>{3.0f, 4.0f});
  EXPECT_FLOAT_EQ(clip_grad_norm_<float>({a}, 1.0), 5.0f);
  EXPECT_NEAR(a.grad()(0), 0.6f, 1e-6);
}

TEST(ClipGradValue, ClampsEveryElement) {
  auto a = param_with_grad({-3.0, -0.1, 0.0, 0.2, 5.0});
  T64 none = zeros<double>({2}, true);
  clip_grad_value_<double>({a, none}, 0.15);
  EXPECT_EQ(a.grad(), (Array<double>{-0.15, -0.1, 0.0, 0.15, 0.15}));
  EXPECT_FALSE(none.has_grad());
}

TEST(ClipGradNorm, RefusesANaNOrNegativeMaxNormAndLeavesTheGradientsAlone) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto a = param_with_grad({3.0, 4.0});
  XGRAD_EXPECT_THROW_MSG(clip_grad_norm_<double>({a}, nan), "clip_grad_norm_", "max_norm must be a non-negative",
                         "nan");
  XGRAD_EXPECT_THROW_MSG(clip_grad_norm_<double>({a}, -1.0), "max_norm must be a non-negative", "-1");
  EXPECT_EQ(a.grad(), (Array<double>{3.0, 4.0}));
  // Infinity clips nothing and returns the norm, as torch.nn.utils.clip_grad_norm_(p, inf).
  EXPECT_EQ(clip_grad_norm_<double>({a}, std::numeric_limits<double>::infinity()), 5.0);
  EXPECT_EQ(a.grad(), (Array<double>{3.0, 4.0}));
  XGRAD_EXPECT_THROW_MSG(clip_grad_value_<double>({a}, nan), "clip_grad_value_", "non-negative");
}
