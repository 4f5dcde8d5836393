// nn::init::NoInitWeights (transformers' no_init_weights): under the guard the random initializers
// leave their tensor and the generator as they are, constant fills still write, guards nest, and
// a module built under it draws nothing.
#include <gtest/gtest.h>

#include <xgrad/nn/init.hpp>
#include <xgrad/nn/linear.hpp>
#include <xgrad/nn/no_init_weights.hpp>

using namespace xgrad;

namespace {

Tensor<double> sevens() { return Tensor<double>(full_array<double>(Shape{3, 4}, 7.0, "sevens")); }

bool all_equal(const Tensor<double>& t, double v) {
  for (double x : t.value())
    if (x != v) return false;
  return true;
}

}  // namespace

TEST(NoInitWeights, RandomInitializersLeaveTheTensorAndTheGenerator) {
  Generator g(5), untouched(5);
  {
    nn::init::NoInitWeights no_init;
    EXPECT_FALSE(nn::init::init_weights_enabled());
    EXPECT_TRUE(all_equal(nn::init::normal_(sevens(), 0.0, 1.0, &g), 7.0));
    EXPECT_TRUE(all_equal(nn::init::uniform_(sevens(), -1.0, 1.0, &g), 7.0));
    EXPECT_TRUE(all_equal(nn::init::kaiming_uniform_(sevens(), 2.0, "fan_in", "leaky_relu", &g), 7.0));
    EXPECT_TRUE(all_equal(nn::init::xavier_uniform_(sevens(), 1.0, &g), 7.0));
    EXPECT_TRUE(all_equal(nn::init::ones_(sevens()), 1.0));                           // cheap fills still write
    EXPECT_THROW(nn::init::normal_(sevens(), 0.0, -1.0, &g), std::invalid_argument);  // arguments still checked
  }
  EXPECT_TRUE(nn::init::init_weights_enabled());
  EXPECT_EQ(g.normal(), untouched.normal());  // nothing was drawn
  EXPECT_FALSE(all_equal(nn::init::normal_(sevens(), 0.0, 1.0, &g), 7.0));
}

TEST(NoInitWeights, GuardsNestAndRestore) {
  {
    nn::init::NoInitWeights outer;
    {
      nn::init::NoInitWeights inner;
      EXPECT_FALSE(nn::init::init_weights_enabled());
    }
    EXPECT_FALSE(nn::init::init_weights_enabled());
  }
  EXPECT_TRUE(nn::init::init_weights_enabled());
}

TEST(NoInitWeights, ModulesBuiltUnderTheGuardDrawNothing) {
  manual_seed(3);
  const double expected = default_generator().normal();
  manual_seed(3);
  {
    nn::init::NoInitWeights no_init;
    nn::Linear<double> linear(nn::LinearOptions(64, 32));
  }
  EXPECT_EQ(default_generator().normal(), expected);
}
