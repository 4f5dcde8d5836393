// F.dropout: identity in eval and at p = 0, zeros at p = 1, the statistics of the kept fraction,
// reproducibility from the seed, and a gradient equal to the forward's mask * scale.
#include <cmath>

#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

template <class T>
class DropoutTyped : public ::testing::Test {};
using ScalarTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(DropoutTyped, ScalarTypes);

// Positive values, so that a zero in the output can only come from the mask.
template <class T>
Tensor<T> positive(const Shape& shape, std::uint64_t seed) {
  Generator g(seed);
  Tensor<T> t = rand<T>(shape, g);
  for (auto& v : t.mutable_value()) v += T(0.5);
  return t;
}

}  // namespace

TYPED_TEST(DropoutTyped, EvalAndZeroProbabilityReturnTheInputItself) {
  using T = TypeParam;
  auto x = positive<T>({4, 5}, 1);
  x.requires_grad_(true);
  Generator g(7);
  const GeneratorState before = g.get_state();
  for (auto [p, training] : {std::pair{0.5, false}, std::pair{0.0, true}, std::pair{1.0, false}}) {
    auto y = dropout(x, p, training, &g);
    EXPECT_TRUE(y.same(x)) << "p=" << p << " training=" << training;
    EXPECT_EQ(y.value(), x.value());
  }
  EXPECT_EQ(g.get_state(), before) << "identity dropout must not consume random numbers";
}

TYPED_TEST(DropoutTyped, KeptFractionAndSurvivorScale) {
  using T = TypeParam;
  const std::size_t n = 100000;
  auto x = positive<T>({100, 1000}, 2);
  for (double p : {0.1, 0.3, 0.5, 0.8}) {
    SCOPED_TRACE("p=" + std::to_string(p));
    Generator g(11);
    auto y = dropout(x, p, true, &g);
    ASSERT_EQ(y.shape(), x.shape());
    std::size_t zeros = 0;
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double yi = y.value().data()[i], xi = x.value().data()[i];
      if (yi == 0) {
        ++zeros;
      } else {
        worst = std::max(worst, std::abs(yi - xi / (1 - p)) / (xi / (1 - p)));
      }
    }
    const double frac = static_cast<double>(zeros) / n;
    const double sigma = std::sqrt(p * (1 - p) / n);
    EXPECT_LE(std::abs(frac - p), 5 * sigma) << "zeroed fraction " << frac;
    const double tolerance = std::is_same_v<T, float> ? 2e-7 : 1e-15;
    EXPECT_LE(worst, tolerance) << "survivors must be x / (1 - p)";
  }
}

TYPED_TEST(DropoutTyped, ProbabilityOneGivesZerosAndZeroGradient) {
  using T = TypeParam;
  auto x = positive<T>({3, 4}, 3);
  x.requires_grad_(true);
  auto y = dropout(x, 1.0, true);
  EXPECT_FALSE(y.same(x));
  for (T v : y.value()) EXPECT_EQ(v, T(0));
  y.backward(ones<T>({3, 4}));
  for (T v : x.grad()) EXPECT_EQ(v, T(0));
}

TYPED_TEST(DropoutTyped, SameSeedSameMaskOtherSeedAnother) {
  using T = TypeParam;
  auto x = positive<T>({50, 40}, 4);
  Generator g1(42), g2(42), g3(43);
  auto a = dropout(x, 0.4, true, &g1);
  auto b = dropout(x, 0.4, true, &g2);
  auto c = dropout(x, 0.4, true, &g3);
  EXPECT_EQ(a.value(), b.value());
  EXPECT_NE(a.value(), c.value());
  // A second call continues the stream: a different mask.
  auto d = dropout(x, 0.4, true, &g1);
  EXPECT_NE(a.value(), d.value());
  // Null generator: the default one, reproducible through manual_seed.
  manual_seed(123);
  auto e = dropout(x, 0.4, true);
  manual_seed(123);
  auto f = dropout(x, 0.4);  // training defaults to true, as F.dropout
  EXPECT_EQ(e.value(), f.value());
  Generator g4(123);
  EXPECT_EQ(e.value(), dropout(x, 0.4, true, &g4).value());
}

TYPED_TEST(DropoutTyped, GradientIsTheMaskTimesTheScaleExactly) {
  using T = TypeParam;
  const double p = 0.3;
  // With x = 1 the output is the scaled mask itself: m_i in {0, 1/(1-p)}.
  Tensor<T> ones_in(xt::ones<T>({6, 7}), true);
  Generator g(9);
  auto m = dropout(ones_in, p, true, &g);
  for (T v : m.value()) EXPECT_TRUE(v == T(0) || v == T(1.0 / (1.0 - p))) << v;

  auto x = positive<T>({6, 7}, 5);
  x.requires_grad_(true);
  Generator h(9);
  auto y = dropout(x, p, true, &h);
  Generator gu(10);
  Array<T> u = randn<T>({6, 7}, gu).value();
  y.backward(Tensor<T>(u));
  const Array<T> expected = u * m.value();
  EXPECT_EQ(x.grad(), expected);
  // And the forward used the same mask.
  const Array<T> forward = x.value() * m.value();
  EXPECT_EQ(y.value(), forward);
}

TEST(Dropout, GradcheckWithAReseededGenerator) {
  for (double p : {0.2, 0.5}) {
    SCOPED_TRACE("p=" + std::to_string(p));
    expect_gradcheck(
        [p](const Inputs& in) {
          Generator g(5);
          return dropout(in[0], p, true, &g) * in[0];
        },
        {input({4, 6}, 1)});
  }
  // p = 0 inside a graph: identity, the gradient passes through.
  expect_gradcheck([](const Inputs& in) { return dropout(in[0] * in[0], 0.0, true); }, {input({3, 3}, 2)});
}

TEST(Dropout, ProbabilityOutsideTheUnitIntervalThrows) {
  auto x = positive<double>({2, 2}, 1);
  XGRAD_EXPECT_THROW_MSG(dropout(x, 1.5), "dropout: probability has to be between 0 and 1, but got 1.5");
  XGRAD_EXPECT_THROW_MSG(dropout(x, -0.1, false), "dropout", "-0.1");
  XGRAD_EXPECT_THROW_MSG(dropout(x, std::nan("")), "dropout", "nan");
}

TEST(Dropout, NoGradBuildsNoGraph) {
  auto x = positive<double>({2, 3}, 1);
  x.requires_grad_(true);
  NoGradGuard guard;
  Generator g(1);
  auto y = dropout(x, 0.5, true, &g);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(y.node()->inputs.empty());
}
