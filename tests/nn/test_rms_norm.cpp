// nn.RMSNorm: options and their defaults, the "weight" parameter (ones, reset_parameters),
// elementwise_affine=false, the forward against F.rms_norm's golden values from PyTorch
// (tests/fixtures/rms_norm_*.json), a gradcheck over input and weight, and the option errors.
#include <cmath>
#include <limits>
#include <vector>

#include <xgrad/nn/rms_norm.hpp>
#include <xgrad/ops/ops.hpp>

#include "fixture.hpp"
#include "nn_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

TEST(NnRMSNorm, OptionsDefaultAsPyTorch) {
  const nn::RMSNormOptions o({3, 4});
  EXPECT_EQ(o.normalized_shape(), (std::vector<std::int64_t>{3, 4}));
  EXPECT_FALSE(o.eps().has_value());
  EXPECT_TRUE(o.elementwise_affine());
  EXPECT_EQ(*nn::RMSNormOptions(8).eps(1e-6).eps(), 1e-6);
}

TEST(NnRMSNorm, WeightIsOnesUnderItsStateDictName) {
  nn::RMSNorm<double> m(nn::RMSNormOptions({2, 3}));
  const auto named = m.named_parameters();
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].first, "weight");
  EXPECT_EQ(m.weight.value(), (Array<double>(xt::ones<double>({2, 3}))));
  m.weight.mutable_value() = Array<double>(xt::zeros<double>({2, 3}));
  m.reset_parameters();
  EXPECT_EQ(m.weight.value(), (Array<double>(xt::ones<double>({2, 3}))));

  nn::RMSNorm<float> plain(nn::RMSNormOptions(4).elementwise_affine(false));
  EXPECT_TRUE(plain.named_parameters().empty());
  EXPECT_FALSE(plain.weight.defined());
  plain.reset_parameters();  // nothing to reset
}

// The module is the op with its weight and eps: PyTorch's values for weight (8), eps 1e-5, and
// for no weight with the default eps.
TEST(NnRMSNorm, ForwardMatchesPyTorchGolden) {
  for (const char* name : {"rms_norm_float64", "rms_norm_float32"}) {
    SCOPED_TRACE(name);
    const Fixture f = load_fixture(name);
    const double tolerance = f.dtype() == "float64" ? 1e-12 : 2e-6;
    nn::RMSNorm<double> m(nn::RMSNormOptions(8).eps(1e-5));
    m.weight.mutable_value() = f.array<double>("weight");
    EXPECT_LT(max_abs_diff(m.forward(f.tensor<double>("input")).value(), f.array<double>("weight.output")), tolerance);
    if (f.dtype() == "float32") {  // the default eps is float's
      nn::RMSNorm<float> plain(nn::RMSNormOptions(8).elementwise_affine(false));
      EXPECT_LT(
          max_abs_diff(plain.forward(f.tensor<float>("input")).value(), f.array<float>("no_weight_default_eps.output")),
          tolerance);
    }
  }
}

TEST(NnRMSNorm, Gradcheck) {
  nn::RMSNorm<double> m(nn::RMSNormOptions({3, 4}).eps(1e-3));
  Generator g(7);
  nn::init::normal_(m.weight, 1.0, 0.7, &g);
  expect_module_gradcheck([&m](const Inputs& in) { return m.forward(in[0]); }, {input({2, 3, 4})}, m.parameters());
}

TEST(NnRMSNorm, OptionErrors) {
  XGRAD_EXPECT_THROW_MSG(nn::RMSNorm<float>(nn::RMSNormOptions(std::vector<std::int64_t>{})), "RMSNorm",
                         "at least one dim");
  XGRAD_EXPECT_THROW_MSG(nn::RMSNorm<float>(nn::RMSNormOptions({3, -1})), "RMSNorm", "non-negative", "-1");
  XGRAD_EXPECT_THROW_MSG(nn::RMSNorm<float>(nn::RMSNormOptions(4).eps(-1.0)), "RMSNorm: expected eps >= 0, got -1");
  XGRAD_EXPECT_THROW_MSG(nn::RMSNorm<float>(nn::RMSNormOptions(4).eps(std::nan(""))),
                         "RMSNorm: expected eps >= 0, got nan");
  nn::RMSNorm<double> m(4);
  XGRAD_EXPECT_THROW_MSG(m.forward(zeros<double>({2, 5})),
                         "rms_norm: expected input with trailing shape (4), got (2, 5)");
}
