// tril, triu, argmax, topk, sort, multinomial (ops.hpp) and sample_next_token (models/sampling.hpp):
// values and indices against PyTorch 1.13, gradients, multinomial's statistics, determinism and
// errors, and the sampler's filters. The golden values below are inlined: they were printed by
// Debian's PyTorch 1.13 (/usr/bin/python3) from torch.manual_seed(0); x = torch.randn(2, 3, 4,
// dtype=torch.float64).round(decimals=4), and y a hand-written tensor with ties and NaN.
#include <cmath>
#include <map>
#include <vector>

#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

const double nan = std::numeric_limits<double>::quiet_NaN();
const double inf = std::numeric_limits<double>::infinity();

const std::vector<double> kX = {-2.3104, -0.3733, -1.0608, 0.9995,  -0.884,  -1.2755, -0.6232, -0.8664,
                                0.2387,  0.7335,  -1.3219, 1.3148,  -1.4875, -0.7136, 0.52,    -0.9529,
                                0.6749,  1.0469,  0.1543,  -0.7499, -0.7234, 0.0864,  -1.7464, 1.041};
// y (3, 6): ties and NaN.
const std::vector<double> kY = {1, 3, 3, 2, nan, 3, 5, 5, 0, -1, 5, 0, 2, nan, 1, nan, 2, 0};

template <class T>
Tensor<T> tensor_of(const std::vector<double>& values, const Shape& shape, bool requires_grad = false) {
  return from_vector<T>(std::vector<T>(values.begin(), values.end()), shape, requires_grad);
}

IndexArray indices_of(const std::vector<std::int64_t>& values, const Shape& shape) {
  IndexArray a = IndexArray::from_shape(shape);
  std::copy(values.begin(), values.end(), a.begin());
  return a;
}

// Equal values, NaN equal to NaN.
template <class T>
void expect_values(const Tensor<T>& t, const std::vector<double>& expected, const Shape& shape) {
  ASSERT_EQ(t.shape(), shape);
  const Array<T> e = tensor_of<T>(expected, shape).value();
  EXPECT_EQ(max_abs_diff(t.value(), e), 0.0);
}

template <class T>
class SamplingOps : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(SamplingOps, Types);

TYPED_TEST(SamplingOps, TrilTriuMatchTorch) {
  using T = TypeParam;
  const Tensor<T> x = tensor_of<T>(kX, {2, 3, 4});
  expect_values(tril(x, -1), {0.0, 0.0, 0.0, 0.0, -0.884, 0.0, 0.0, 0.0, 0.2387, 0.7335, 0.0, 0.0,
                              0.0, 0.0, 0.0, 0.0, 0.6749, 0.0, 0.0, 0.0, -0.7234, 0.0864, 0.0, 0.0},
                {2, 3, 4});
  expect_values(triu(x, 1), {0.0, -0.3733, -1.0608, 0.9995, 0.0, 0.0, -0.6232, -0.8664, 0.0, 0.0, 0.0, 1.3148,
                             0.0, -0.7136, 0.52, -0.9529, 0.0, 0.0, 0.1543, -0.7499, 0.0, 0.0, 0.0, 1.041},
                {2, 3, 4});
  expect_values(tril(x), {-2.3104, 0.0, 0.0, 0.0, -0.884, -1.2755, 0.0, 0.0, 0.2387, 0.7335, -1.3219, 0.0,
                          -1.4875, 0.0, 0.0, 0.0, 0.6749, 1.0469, 0.0, 0.0, -0.7234, 0.0864, -1.7464, 0.0},
                {2, 3, 4});
  expect_values(triu(x, -1), {-2.3104, -0.3733, -1.0608, 0.9995, -0.884, -1.2755, -0.6232, -0.8664,
                              0.0,     0.7335,  -1.3219, 1.3148,  -1.4875, -0.7136, 0.52,    -0.9529,
                              0.6749,  1.0469,  0.1543,  -0.7499, 0.0,     0.0864,  -1.7464, 1.041},
                {2, 3, 4});
  // Diagonals beyond the matrix keep everything or nothing; an empty matrix stays empty.
  EXPECT_EQ(max_abs_diff(tril(x, 5).value(), x.value()), 0.0);
  EXPECT_EQ(max_abs_diff(triu(x, 4).value(), Array<T>(xt::zeros<T>({2, 3, 4}))), 0.0);
  EXPECT_EQ(tril(zeros<T>({2, 0, 3})).shape(), (Shape{2, 0, 3}));
}

TYPED_TEST(SamplingOps, TrilTriuGradientIsMasked) {
  using T = TypeParam;
  Tensor<T> x = tensor_of<T>(kX, {2, 3, 4}, true);
  sum(tril(x, 1) * 2.0).backward();
  const Array<T> expected = 2.0 * tril(ones<T>({2, 3, 4}), 1).value();
  EXPECT_EQ(max_abs_diff(x.grad(), expected), 0.0);
  x.zero_grad();
  sum(triu(x, -1)).backward();
  EXPECT_EQ(max_abs_diff(x.grad(), triu(ones<T>({2, 3, 4}), -1).value()), 0.0);
  XGRAD_EXPECT_THROW_MSG(tril(ones<T>({3})), "tril", "at least 2 dimensions", "(3)");
  XGRAD_EXPECT_THROW_MSG(triu(ones<T>({})), "triu", "at least 2 dimensions");
}

TYPED_TEST(SamplingOps, ArgmaxMatchesTorch) {
  using T = TypeParam;
  const Tensor<T> x = tensor_of<T>(kX, {2, 3, 4});
  EXPECT_EQ(argmax(x, 1), indices_of({2, 2, 1, 2, 1, 1, 0, 2}, {2, 4}));
  EXPECT_EQ(argmax(x, -1, true), indices_of({3, 2, 3, 2, 1, 3}, {2, 3, 1}));
  const IndexArray flat = argmax(x);
  EXPECT_EQ(flat.dimension(), 0u);
  EXPECT_EQ(flat(), 11);
  // Ties give the first maximum, NaN counts as the maximum.
  const Tensor<T> y = tensor_of<T>(kY, {3, 6});
  EXPECT_EQ(argmax(y, 1), indices_of({4, 0, 1}, {3}));
  EXPECT_EQ(argmax(y)(), 4);
  EXPECT_EQ(argmax(tensor_of<T>({2.0}, {}), 0)(), 0);
  XGRAD_EXPECT_THROW_MSG(argmax(x, 3), "argmax");
  XGRAD_EXPECT_THROW_MSG(argmax(zeros<T>({2, 0}), 1), "argmax", "empty dimension");
  XGRAD_EXPECT_THROW_MSG(argmax(zeros<T>({0})), "argmax", "without elements");
}

TYPED_TEST(SamplingOps, TopkMatchesTorch) {
  using T = TypeParam;
  const Tensor<T> x = tensor_of<T>(kX, {2, 3, 4});
  auto [v, i] = topk(x, 2);
  expect_values(v, {0.9995, -0.3733, -0.6232, -0.8664, 1.3148, 0.7335, 0.52, -0.7136, 1.0469, 0.6749, 1.041, 0.0864},
                {2, 3, 2});
  EXPECT_EQ(i, indices_of({3, 1, 2, 3, 3, 1, 2, 1, 1, 0, 3, 1}, {2, 3, 2}));
  auto [vs, is] = topk(x, 2, 1, /*largest=*/false);
  expect_values(vs,
                {-2.3104, -1.2755, -1.3219, -0.8664, -0.884, -0.3733, -1.0608, 0.9995, -1.4875, -0.7136, -1.7464,
                 -0.9529, -0.7234, 0.0864, 0.1543, -0.7499},
                {2, 2, 4});
  EXPECT_EQ(is, indices_of({0, 1, 2, 1, 1, 0, 0, 0, 0, 0, 2, 0, 2, 2, 1, 1}, {2, 2, 4}));
  // sorted = false: the same elements, by increasing index.
  auto [vu, iu] = topk(x, 2, -1, true, /*sorted=*/false);
  EXPECT_EQ(iu, indices_of({1, 3, 2, 3, 1, 3, 1, 2, 0, 1, 1, 3}, {2, 3, 2}));
  EXPECT_EQ(vu.shape(), (Shape{2, 3, 2}));
  // k = 0 and k = size; a 0-d input.
  EXPECT_EQ(topk(x, 0).first.shape(), (Shape{2, 3, 0}));
  EXPECT_EQ(topk(x, 3, 1).second, sort(x, 1, true).second);
  auto [v0, i0] = topk(tensor_of<T>({2.0}, {}), 1);
  EXPECT_EQ(v0.shape(), Shape{});
  EXPECT_EQ(v0.item(), T(2));
  EXPECT_EQ(i0(), 0);
  XGRAD_EXPECT_THROW_MSG(topk(x, 5), "topk", "k (5)", "[0, 4]");
  XGRAD_EXPECT_THROW_MSG(topk(x, -1), "topk", "k (-1)");
  XGRAD_EXPECT_THROW_MSG(topk(x, 1, 3), "topk");
}

// Torch leaves the order of equal values unspecified (its topk of row 0 of y picks the 3s at 1 and
// 5): xgrad's is stable, so its indices are the prefix of torch.sort(stable=True)'s; the values
// are torch's.
TYPED_TEST(SamplingOps, TopkTiesAreStableAndNaNIsLargest) {
  using T = TypeParam;
  const Tensor<T> y = tensor_of<T>(kY, {3, 6});
  auto [v, i] = topk(y, 3);
  expect_values(v, {nan, 3, 3, 5, 5, 5, nan, nan, 2}, {3, 3});
  EXPECT_EQ(i, indices_of({4, 1, 2, 0, 1, 4, 1, 3, 0}, {3, 3}));
  auto [vs, is] = topk(y, 3, -1, /*largest=*/false);
  expect_values(vs, {1, 2, 3, -1, 0, 0, 0, 1, 2}, {3, 3});
  EXPECT_EQ(is, indices_of({0, 3, 1, 3, 2, 5, 5, 2, 0}, {3, 3}));
}

TYPED_TEST(SamplingOps, SortMatchesTorch) {
  using T = TypeParam;
  const Tensor<T> x = tensor_of<T>(kX, {2, 3, 4});
  auto [vd, id] = sort(x, 1, /*descending=*/true);
  expect_values(vd, {0.2387, 0.7335, -0.6232, 1.3148,  -0.884,  -0.3733, -1.0608, 0.9995,
                     -2.3104, -1.2755, -1.3219, -0.8664, 0.6749,  1.0469,  0.52,    1.041,
                     -0.7234, 0.0864,  0.1543,  -0.7499, -1.4875, -0.7136, -1.7464, -0.9529},
                {2, 3, 4});
  EXPECT_EQ(id, indices_of({2, 2, 1, 2, 1, 0, 0, 0, 0, 1, 2, 1, 1, 1, 0, 2, 2, 2, 1, 1, 0, 0, 2, 0}, {2, 3, 4}));
  auto [va, ia] = sort(x, 0);
  expect_values(va, {-2.3104, -0.7136, -1.0608, -0.9529, -0.884,  -1.2755, -0.6232, -0.8664,
                     -0.7234, 0.0864,  -1.7464, 1.041,   -1.4875, -0.3733, 0.52,    0.9995,
                     0.6749,  1.0469,  0.1543,  -0.7499, 0.2387,  0.7335,  -1.3219, 1.3148},
                {2, 3, 4});
  EXPECT_EQ(ia, indices_of({0, 1, 0, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 1, 0, 1, 1, 1, 1, 0, 0, 0, 0}, {2, 3, 4}));
  // Ties and NaN as torch.sort(stable=True): NaN last ascending, first descending.
  const Tensor<T> y = tensor_of<T>(kY, {3, 6});
  auto [vy, iy] = sort(y);
  expect_values(vy, {1, 2, 3, 3, 3, nan, -1, 0, 0, 5, 5, 5, 0, 1, 2, 2, nan, nan}, {3, 6});
  EXPECT_EQ(iy, indices_of({0, 3, 1, 2, 5, 4, 3, 2, 5, 0, 1, 4, 5, 2, 0, 4, 1, 3}, {3, 6}));
  auto [vyd, iyd] = sort(y, -1, true);
  expect_values(vyd, {nan, 3, 3, 3, 2, 1, 5, 5, 5, 0, 0, -1, nan, nan, 2, 2, 1, 0}, {3, 6});
  EXPECT_EQ(iyd, indices_of({4, 1, 2, 5, 3, 0, 0, 1, 4, 2, 5, 3, 1, 3, 0, 4, 2, 5}, {3, 6}));
  EXPECT_EQ(sort(zeros<T>({2, 0}), 1).first.shape(), (Shape{2, 0}));
  XGRAD_EXPECT_THROW_MSG(sort(x, -4), "sort");
}

// The values' gradient lands on the chosen indices (repeated choice impossible: each index once).
TYPED_TEST(SamplingOps, TopkAndSortGradientsScatterBack) {
  using T = TypeParam;
  Tensor<T> x = tensor_of<T>({0.5, -1.0, 2.0, 0.25}, {4}, true);
  const Tensor<T> w = tensor_of<T>({10, 20}, {2});
  sum(topk(x, 2).first * w).backward();  // picks 2.0 (index 2) then 0.5 (index 0)
  expect_values(Tensor<T>(x.grad()), {20, 0, 10, 0}, {4});
  x.zero_grad();
  sum(sort(x, 0, true).first * tensor_of<T>({1, 2, 3, 4}, {4})).backward();  // order 2, 0, 3, 1
  expect_values(Tensor<T>(x.grad()), {2, 4, 1, 3}, {4});
}

TEST(SamplingGradcheck, TopkAndSortAlongOtherDims) {
  const T64 x = input({3, 4, 2}, 3);
  expect_gradcheck([](const Inputs& in) { return topk(in[0], 2, 0, false).first; }, {x});
  expect_gradcheck([](const Inputs& in) { return tril(sort(in[0], 1).first, -1); }, {x});
  expect_gradcheck([](const Inputs& in) { return triu(in[0], 1); }, {input({4, 2}, 4)});
}

// ---- multinomial --------------------------------------------------------------------------------

// sum (observed - expected)^2 / expected over the categories.
double chi_square(const std::vector<double>& observed, const std::vector<double>& expected) {
  double chi2 = 0;
  for (std::size_t c = 0; c < observed.size(); ++c) chi2 += std::pow(observed[c] - expected[c], 2) / expected[c];
  return chi2;
}

TYPED_TEST(SamplingOps, MultinomialWithReplacementFollowsTheWeights) {
  using T = TypeParam;
  // Unnormalized weights with a zero: category 2 is never drawn.
  const Tensor<T> w = tensor_of<T>({1, 2, 0, 3, 4}, {5});
  Generator gen(123);
  const std::int64_t n = 20000;
  const IndexArray s = multinomial(w, n, /*replacement=*/true, &gen);
  ASSERT_EQ(shape_of(s), Shape{20000});
  std::vector<double> counts(5, 0);
  for (std::int64_t c : s) ++counts.at(static_cast<std::size_t>(c));
  EXPECT_EQ(counts[2], 0);
  counts.erase(counts.begin() + 2);
  // 3 degrees of freedom: P(chi2 > 16.27) = 0.001 (the seed fixes the outcome; this only says the
  // draws are plausible).
  EXPECT_LT(chi_square(counts, {n * 0.1, n * 0.2, n * 0.3, n * 0.4}), 16.27);
}

TYPED_TEST(SamplingOps, MultinomialWithoutReplacementDrawsInOrderOfRemoval) {
  using T = TypeParam;
  // 6000 rows of the same weights, 2 draws each: the ordered pair (i, j) has probability
  // p_i p_j / (1 - p_i), drawing one at a time and removing it.
  const std::vector<double> p = {0.1, 0.2, 0.3, 0.4};
  const std::size_t rows = 6000;
  std::vector<double> weights;
  for (std::size_t r = 0; r < rows; ++r) weights.insert(weights.end(), p.begin(), p.end());
  Generator gen(7);
  const IndexArray s = multinomial(tensor_of<T>(weights, {rows, 4}), 2, false, &gen);
  ASSERT_EQ(shape_of(s), (Shape{rows, 2}));
  std::map<std::pair<std::int64_t, std::int64_t>, double> count;
  for (std::size_t r = 0; r < rows; ++r) {
    ASSERT_NE(s(r, 0), s(r, 1));
    ++count[{s(r, 0), s(r, 1)}];
  }
  std::vector<double> observed, expected;
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 4; ++j)
      if (i != j) {
        observed.push_back(count[{static_cast<std::int64_t>(i), static_cast<std::int64_t>(j)}]);
        expected.push_back(rows * p[i] * p[j] / (1 - p[i]));
      }
  // 11 degrees of freedom: P(chi2 > 31.26) = 0.001.
  EXPECT_LT(chi_square(observed, expected), 31.26);
  // Every category, each once, when num_samples equals the count of positive weights.
  const IndexArray all = multinomial(tensor_of<T>({0, 5, 1, 0, 2}, {5}), 3, false, &gen);
  std::vector<std::int64_t> sorted(all.begin(), all.end());
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<std::int64_t>{1, 2, 4}));
}

TYPED_TEST(SamplingOps, MultinomialIsDeterministicPerSeed) {
  using T = TypeParam;
  const Tensor<T> w = tensor_of<T>({0.3, 0.1, 0.6, 0.2, 0.9, 0.4}, {2, 3});
  for (bool replacement : {true, false}) {
    Generator a(5), b(5), c(6);
    const IndexArray sa = multinomial(w, 3, replacement, &a), sb = multinomial(w, 3, replacement, &b);
    EXPECT_EQ(sa, sb);
    EXPECT_EQ(a.get_state(), b.get_state());
    bool differs = false;  // another seed gives other draws somewhere in 20 tries
    for (int t = 0; t < 20 && !differs; ++t) differs = multinomial(w, 3, replacement, &c) != sa;
    EXPECT_TRUE(differs);
    // The default generator, through manual_seed.
    manual_seed(11);
    const IndexArray d1 = multinomial(w, 3, replacement);
    manual_seed(11);
    EXPECT_EQ(multinomial(w, 3, replacement), d1);
  }
}

TYPED_TEST(SamplingOps, MultinomialErrorsAsTorch) {
  using T = TypeParam;
  Generator gen(1);
  const GeneratorState before = gen.get_state();
  XGRAD_EXPECT_THROW_MSG(multinomial(tensor_of<T>({1, -1}, {2}), 1, true, &gen), "multinomial", "element < 0",
                         "category 1");
  XGRAD_EXPECT_THROW_MSG(multinomial(tensor_of<T>({1, inf}, {2}), 1, true, &gen), "inf, nan");
  XGRAD_EXPECT_THROW_MSG(multinomial(tensor_of<T>({nan, 1}, {2}), 1, true, &gen), "inf, nan");
  XGRAD_EXPECT_THROW_MSG(multinomial(tensor_of<T>({1, 1, 0, 0}, {2, 2}), 1, true, &gen), "sum of probabilities <= 0",
                         "row 1");
  XGRAD_EXPECT_THROW_MSG(multinomial(tensor_of<T>({1, 2}, {2}), 0, true, &gen), "num_samples <= 0");
  XGRAD_EXPECT_THROW_MSG(multinomial(tensor_of<T>({1}, {1, 1, 1}), 1, true, &gen), "1-D (C) or 2-D (N, C)");
  XGRAD_EXPECT_THROW_MSG(multinomial(tensor_of<T>({1, 2}, {2}), 3, false, &gen), "without replacement");
  XGRAD_EXPECT_THROW_MSG(multinomial(tensor_of<T>({1, 0, 2}, {3}), 3, false, &gen), "not enough non-zero",
                         "has 2");
  EXPECT_EQ(gen.get_state(), before);  // nothing was drawn
  EXPECT_EQ(shape_of(multinomial(tensor_of<T>({1, 2}, {2}), 5, true, &gen)), Shape{5});  // more than C: fine
}

// ---- sample_next_token --------------------------------------------------------------------------

// How often each token is drawn from the same logits row (N rows of it at once).
template <class T>
std::vector<double> frequencies(const std::vector<double>& row, const SamplingOptions& options, std::size_t n,
                                std::uint64_t seed) {
  std::vector<double> logits;
  for (std::size_t r = 0; r < n; ++r) logits.insert(logits.end(), row.begin(), row.end());
  Generator gen(seed);
  const IndexArray tokens = sample_next_token(tensor_of<T>(logits, {n, row.size()}), options, &gen);
  EXPECT_EQ(shape_of(tokens), Shape{n});
  std::vector<double> counts(row.size(), 0);
  for (std::int64_t t : tokens) ++counts.at(static_cast<std::size_t>(t));
  return counts;
}

TYPED_TEST(SamplingOps, SampleNextTokenGreedyIsArgmaxOfTheLastPosition) {
  using T = TypeParam;
  SamplingOptions greedy;
  greedy.greedy = true;
  // (N, L, V) = (2, 2, 3): the last position decides.
  const Tensor<T> logits = tensor_of<T>({9, 0, 0, 0.1, 0.3, 0.2, 0, 0, 9, 0.5, 0.1, 0.5}, {2, 2, 3});
  EXPECT_EQ(sample_next_token(logits, greedy), indices_of({1, 0}, {2}));
  EXPECT_EQ(sample_next_token(tensor_of<T>({0.1, 0.3, 0.2}, {3}), greedy), indices_of({1}, {1}));
  // top_k = 1 and a tiny top_p keep only the best token: every draw is the argmax.
  const std::vector<double> row = {0.5, 1.5, -1.0, 1.4, 0.0};
  SamplingOptions top1;
  top1.top_k = 1;
  EXPECT_EQ(frequencies<T>(row, top1, 200, 3), (std::vector<double>{0, 200, 0, 0, 0}));
  SamplingOptions nucleus;
  nucleus.top_p = 1e-9;
  nucleus.temperature = 5.0;
  EXPECT_EQ(frequencies<T>(row, nucleus, 200, 4), (std::vector<double>{0, 200, 0, 0, 0}));
}

TYPED_TEST(SamplingOps, SampleNextTokenFollowsTemperatureTopKAndTopP) {
  using T = TypeParam;
  const std::size_t n = 8000;
  const std::vector<double> w = {0.1, 0.2, 0.3, 0.4};
  std::vector<double> row;
  for (double p : w) row.push_back(std::log(p));
  // Temperature 1: softmax(log w) = w. Temperature 2: p ~ sqrt(w).
  SamplingOptions plain;
  EXPECT_LT(chi_square(frequencies<T>(row, plain, n, 1), {n * 0.1, n * 0.2, n * 0.3, n * 0.4}), 16.27);
  SamplingOptions hot;
  hot.temperature = 2.0;
  double z = 0;
  for (double p : w) z += std::sqrt(p);
  std::vector<double> expected;
  for (double p : w) expected.push_back(n * std::sqrt(p) / z);
  EXPECT_LT(chi_square(frequencies<T>(row, hot, n, 2), expected), 16.27);
  // A low temperature concentrates on the best token.
  SamplingOptions cold;
  cold.temperature = 0.05;
  EXPECT_GT(frequencies<T>(row, cold, n, 3)[3], n * 0.99);
  // A tiny temperature is greedy (the logits' spread divided by it overflows no exponential).
  SamplingOptions frozen;
  frozen.temperature = 1e-300;
  EXPECT_EQ(frequencies<T>(row, frozen, 100, 3), (std::vector<double>{0, 0, 0, 100}));
  // top_k = 2: only 0.3 and 0.4, renormalized (3:4); chi-square with 1 degree of freedom,
  // P(> 10.83) = 0.001.
  SamplingOptions k2;
  k2.top_k = 2;
  std::vector<double> counts = frequencies<T>(row, k2, n, 4);
  EXPECT_EQ(counts[0] + counts[1], 0);
  EXPECT_LT(chi_square({counts[2], counts[3]}, {n * 3.0 / 7, n * 4.0 / 7}), 10.83);
  // top_p = 0.6: 0.4 alone is short of 0.6, 0.4 + 0.3 reaches it; 0.65 keeps the same two,
  // 0.75 adds 0.2.
  for (double p : {0.6, 0.65}) {
    SamplingOptions nucleus;
    nucleus.top_p = p;
    counts = frequencies<T>(row, nucleus, n, 5);
    EXPECT_EQ(counts[0] + counts[1], 0) << "top_p " << p;
    EXPECT_LT(chi_square({counts[2], counts[3]}, {n * 3.0 / 7, n * 4.0 / 7}), 10.83) << "top_p " << p;
  }
  SamplingOptions wider;
  wider.top_p = 0.75;
  counts = frequencies<T>(row, wider, n, 6);
  EXPECT_EQ(counts[0], 0);
  EXPECT_GT(counts[1], 0);
  // top_k and top_p together: top-k first (0.3, 0.4 renormalized to 3/7, 4/7), then top_p 0.5
  // keeps only 4/7.
  SamplingOptions both;
  both.top_k = 2;
  both.top_p = 0.5;
  EXPECT_EQ(frequencies<T>(row, both, 300, 7), (std::vector<double>{0, 0, 0, 300}));
  // -inf logits (masked tokens) are never drawn; top_k larger than V keeps everything.
  SamplingOptions big_k;
  big_k.top_k = 100;
  counts = frequencies<T>({0.0, -inf, 0.0}, big_k, 400, 8);
  EXPECT_EQ(counts[1], 0);
  EXPECT_GT(counts[0], 100);
  EXPECT_GT(counts[2], 100);
}

TYPED_TEST(SamplingOps, SampleNextTokenIsDeterministicPerSeed) {
  using T = TypeParam;
  const Tensor<T> logits = tensor_of<T>(kX, {2, 3, 4}, /*requires_grad=*/true);
  SamplingOptions options;
  options.temperature = 1.5;
  options.top_k = 3;
  options.top_p = 0.9;
  Generator a(42), b(42);
  const IndexArray first = sample_next_token(logits, options, &a);
  EXPECT_EQ(shape_of(first), Shape{2});
  EXPECT_EQ(sample_next_token(logits, options, &b), first);
  EXPECT_EQ(a.get_state(), b.get_state());
}

TYPED_TEST(SamplingOps, SampleNextTokenRejectsBadOptionsAndLogits) {
  using T = TypeParam;
  const Tensor<T> logits = tensor_of<T>({0.1, 0.2, 0.3}, {3});
  const auto with = [](auto change) {
    SamplingOptions o;
    change(o);
    return o;
  };
  XGRAD_EXPECT_THROW_MSG(sample_next_token(logits, with([](SamplingOptions& o) { o.temperature = 0; })),
                         "temperature must be a finite number > 0", "greedy", "got 0");
  XGRAD_EXPECT_THROW_MSG(sample_next_token(logits, with([](SamplingOptions& o) { o.temperature = -1; })),
                         "temperature");
  XGRAD_EXPECT_THROW_MSG(sample_next_token(logits, with([](SamplingOptions& o) { o.temperature = nan; })),
                         "temperature");
  XGRAD_EXPECT_THROW_MSG(sample_next_token(logits, with([](SamplingOptions& o) { o.top_k = -1; })),
                         "top_k must be >= 0 (0 = off), got -1");
  XGRAD_EXPECT_THROW_MSG(sample_next_token(logits, with([](SamplingOptions& o) { o.top_p = 0; })),
                         "top_p must be in (0, 1]", "got 0");
  XGRAD_EXPECT_THROW_MSG(sample_next_token(logits, with([](SamplingOptions& o) { o.top_p = 1.5; })), "top_p");
  EXPECT_NO_THROW(SamplingOptions().check());
  const SamplingOptions ok;
  XGRAD_EXPECT_THROW_MSG(sample_next_token(tensor_of<T>({0.1, nan}, {2}), ok), "NaN or +inf", "token 1");
  XGRAD_EXPECT_THROW_MSG(sample_next_token(tensor_of<T>({0.1, inf}, {2}), ok), "NaN or +inf");
  XGRAD_EXPECT_THROW_MSG(sample_next_token(tensor_of<T>({0.1, 0.2, -inf, -inf}, {2, 2}), ok), "row 1", "all -inf");
  XGRAD_EXPECT_THROW_MSG(sample_next_token(zeros<T>({1, 1, 1, 3}), ok), "(V), (N, V) or (N, L, V)");
  XGRAD_EXPECT_THROW_MSG(sample_next_token(zeros<T>({2, 0}), ok), "no vocabulary");
}

}  // namespace
