// Property tests of multinomial (ops/multinomial.cpp) and sample_next_token
// (models/sampling.cpp): random weights (zeros, one non-zero, denormals, float64 values near DBL_MAX) and random
// SamplingOptions (tiny and huge temperatures, top_k 0..V+2, top_p 0..1, greedy). Whatever comes, nothing crashes, no
// zero-probability category or token is drawn, greedy is the argmax, the same seed gives the same
// tokens, and weights at the ends of the range are drawn in their proportions. A fixed seed and a
// few hundred cases: well under a second in Release.
#include "test_util.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <vector>

using namespace xgrad;
using namespace xgrad::testing;

namespace {

// The test's own randomness (not the generator under test).
struct Pick {
  Generator g;
  explicit Pick(std::uint64_t seed) : g(seed) {}
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(g.next_u64() % n); }
  double uniform() { return g.uniform(); }
  template <class V>
  V of(std::initializer_list<V> values) {
    return values.begin()[below(values.size())];
  }
};

// A weight of one of the kinds that broke samplers: zero, denormal, ordinary, huge.
template <class T>
T random_weight(Pick& pick) {
  using L = std::numeric_limits<T>;
  switch (pick.below(5)) {
    case 0:
      return T(0);
    case 1:
      return L::denorm_min() * static_cast<T>(1 + pick.below(1000));
    case 2:
      return static_cast<T>(pick.uniform());
    case 3:
      return L::max() * static_cast<T>(0.5 + 0.5 * pick.uniform());  // sums overflow
    default:
      return static_cast<T>(pick.uniform() * 1e-30);
  }
}

template <class T>
void multinomial_properties(std::uint64_t seed) {
  Pick pick(seed);
  for (int trial = 0; trial < 150; ++trial) {
    const std::size_t rows = 1 + pick.below(3), C = 1 + pick.below(12);
    std::vector<T> w(rows * C);
    for (auto& v : w) v = pick.below(4) == 0 ? T(0) : random_weight<T>(pick);
    for (std::size_t r = 0; r < rows; ++r)  // at least one positive weight per row; sometimes exactly one
      if (pick.below(4) == 0 || std::all_of(w.begin() + r * C, w.begin() + (r + 1) * C, [](T v) { return v == 0; })) {
        std::fill(w.begin() + r * C, w.begin() + (r + 1) * C, T(0));
        w[r * C + pick.below(C)] = random_weight<T>(pick) + std::numeric_limits<T>::denorm_min();
      }
    const Tensor<T> probs = from_vector<T>(w, {rows, C});
    std::size_t min_nonzero = C;
    for (std::size_t r = 0; r < rows; ++r)
      min_nonzero = std::min<std::size_t>(
          min_nonzero, std::count_if(w.begin() + r * C, w.begin() + (r + 1) * C, [](T v) { return v > 0; }));
    const bool replacement = pick.below(2) == 0;
    const std::int64_t n = static_cast<std::int64_t>(replacement ? 1 + pick.below(40) : 1 + pick.below(min_nonzero));
    Generator g1(seed * 1000 + static_cast<std::uint64_t>(trial)), g2(seed * 1000 + static_cast<std::uint64_t>(trial));
    const IndexArray a = multinomial(probs, n, replacement, &g1), b = multinomial(probs, n, replacement, &g2);
    ASSERT_EQ(a.shape(0), rows);
    ASSERT_EQ(a.shape(1), static_cast<std::size_t>(n));
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin())) << "trial " << trial << ": the same seed, other draws";
    for (std::size_t r = 0; r < rows; ++r) {
      std::set<std::int64_t> seen;
      for (std::size_t s = 0; s < static_cast<std::size_t>(n); ++s) {
        const std::int64_t c = a(r, s);
        ASSERT_GE(c, 0);
        ASSERT_LT(c, static_cast<std::int64_t>(C));
        EXPECT_GT(w[r * C + static_cast<std::size_t>(c)], T(0)) << "trial " << trial << ": drew a zero weight";
        if (!replacement) EXPECT_TRUE(seen.insert(c).second) << "trial " << trial << ": drew " << c << " twice";
      }
    }
  }
}

TEST(SamplingProperties, MultinomialNeverDrawsAZeroWeightWhateverTheWeightsFloat64) {
  multinomial_properties<double>(1);
}
TEST(SamplingProperties, MultinomialNeverDrawsAZeroWeightWhateverTheWeightsFloat32) {
  multinomial_properties<float>(2);
}

// The share of category c in `draws` draws of multinomial(w, draws, replacement), or of the
// first draw over `draws` calls without replacement.
template <class T>
std::vector<double> shares(const std::vector<T>& w, bool replacement, std::size_t draws, std::uint64_t seed) {
  Generator g(seed);
  const Tensor<T> probs = from_vector<T>(w, {w.size()});
  std::vector<double> count(w.size(), 0.0);
  if (replacement) {
    const IndexArray a = multinomial(probs, static_cast<std::int64_t>(draws), true, &g);
    for (const std::int64_t c : a) count[static_cast<std::size_t>(c)] += 1;
  } else {
    for (std::size_t i = 0; i < draws; ++i) count[static_cast<std::size_t>(multinomial(probs, 1, false, &g)(0))] += 1;
  }
  for (double& c : count) c /= static_cast<double>(draws);
  return count;
}

// [1e308, 1e308] summed to inf, and every draw was the last category (with replacement) or the
// first (without: keys 1e308 / e overflowed to inf and tied). torch 1.13 does not refuse these
// weights (each is finite, the sum is > 0), so they are drawn as weights: in proportion.
TEST(SamplingProperties, Float64WeightsWhoseSumOverflowsAreDrawnInProportion) {
  for (const bool replacement : {true, false}) {
    const std::vector<double> s2 = shares<double>({1e308, 1e308}, replacement, 4000, 11);
    EXPECT_NEAR(s2[0], 0.5, 0.04) << "replacement " << replacement;
    const std::vector<double> s3 = shares<double>({1.5e308, 0.0, 1.5e308, 0.75e308}, replacement, 4000, 12);
    EXPECT_NEAR(s3[0], 0.4, 0.04) << "replacement " << replacement;
    EXPECT_EQ(s3[1], 0.0);
    EXPECT_NEAR(s3[2], 0.4, 0.04) << "replacement " << replacement;
    EXPECT_NEAR(s3[3], 0.2, 0.04) << "replacement " << replacement;
  }
}

// Denormal weights 1:3 were drawn 1:7 (the sum and the uniform number rounded to a few multiples
// of the smallest denormal).
TEST(SamplingProperties, DenormalWeightsAreDrawnInProportion) {
  const double d = std::numeric_limits<double>::denorm_min();
  EXPECT_NEAR(shares<double>({d, 3 * d}, true, 4000, 13)[0], 0.25, 0.03);
  const float f = std::numeric_limits<float>::denorm_min();
  EXPECT_NEAR(shares<float>({f, 3 * f}, true, 4000, 14)[0], 0.25, 0.03);
}

// Sizes: num_samples whose result cannot be allocated, or whose element count overflows, is
// refused naming multinomial (it segfaulted: the allocation's byte count wrapped).
TEST(SamplingProperties, HugeNumSamplesAreRefused) {
  const Tensor<float> probs = ones<float>({3});
  for (const int bits : {60, 61, 62})
    XGRAD_EXPECT_THROW_MSG(multinomial(probs, std::int64_t{1} << bits, true), "multinomial: the shape (",
                           "more than can be allocated");
  XGRAD_EXPECT_THROW_MSG(multinomial(ones<float>({4, 3}), std::int64_t{1} << 62, true),
                         "multinomial: the shape (4, 4611686018427387904) has too many elements");
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // 2^59 int64: 4 EiB, within PTRDIFF_MAX but more than any address space.
  try {
    multinomial(probs, std::int64_t{1} << 59, true);
    ADD_FAILURE() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("multinomial: not enough memory for a tensor of shape (576460752303423488)"),
              std::string::npos)
        << e.what();
  }
#endif
}

// ---- sample_next_token ---------------------------------------------------------------------------

template <class T>
T random_logit(Pick& pick) {
  switch (pick.below(6)) {
    case 0:
      return -std::numeric_limits<T>::infinity();
    case 1:
      return static_cast<T>(pick.uniform() * 1e30 - 5e29);
    case 2:
      return std::numeric_limits<T>::lowest() * static_cast<T>(pick.uniform());
    case 3:
      return std::numeric_limits<T>::max() * static_cast<T>(pick.uniform());
    default:
      return static_cast<T>(8 * pick.uniform() - 4);
  }
}

template <class T>
void sampler_properties(std::uint64_t seed) {
  Pick pick(seed);
  for (int trial = 0; trial < 150; ++trial) {
    const std::size_t N = 1 + pick.below(3), V = 1 + pick.below(20);
    std::vector<T> logits(N * V);
    for (auto& v : logits) v = random_logit<T>(pick);
    for (std::size_t r = 0; r < N; ++r)  // one finite logit at least
      if (pick.below(5) == 0 ||
          std::none_of(logits.begin() + r * V, logits.begin() + (r + 1) * V, [](T v) { return std::isfinite(v); })) {
        std::fill(logits.begin() + r * V, logits.begin() + (r + 1) * V, -std::numeric_limits<T>::infinity());
        logits[r * V + pick.below(V)] = static_cast<T>(pick.uniform());
      }
    SamplingOptions o;
    o.temperature = pick.of({1e-300, 1e-30, 1e-6, 0.7, 1.0, 3.0, 1e6, 1e300});
    o.top_k = static_cast<std::int64_t>(pick.below(V + 3));
    o.top_p = pick.of({1e-12, 0.1, 0.5, 0.9, 0.999999, 1.0});
    o.greedy = pick.below(5) == 0;
    const Tensor<T> t = from_vector<T>(logits, {N, V});
    Generator g1(seed * 7919 + static_cast<std::uint64_t>(trial)), g2(seed * 7919 + static_cast<std::uint64_t>(trial));
    const IndexArray a = sample_next_token(t, o, &g1), b = sample_next_token(t, o, &g2);
    ASSERT_EQ(a.size(), N);
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin())) << "trial " << trial;
    for (std::size_t r = 0; r < N; ++r) {
      const T* row = logits.data() + r * V;
      const std::int64_t c = a(r);
      ASSERT_GE(c, 0);
      ASSERT_LT(c, static_cast<std::int64_t>(V));
      const T x = row[c];
      EXPECT_NE(x, -std::numeric_limits<T>::infinity()) << "trial " << trial << ": drew a -inf logit";
      const T best = *std::max_element(row, row + V);
      if (o.greedy) {
        EXPECT_EQ(c, std::max_element(row, row + V) - row) << "trial " << trial << ": greedy is the first argmax";
        continue;
      }
      if (o.top_k > 0 && static_cast<std::size_t>(o.top_k) < V) {  // within the top k (ties with the k-th stay)
        std::vector<T> sorted(row, row + V);
        std::sort(sorted.begin(), sorted.end(), std::greater<T>());
        EXPECT_GE(x, sorted[static_cast<std::size_t>(o.top_k) - 1]) << "trial " << trial << ": outside the top k";
      }
      // A tiny temperature leaves only the largest logit (and its ties) a probability.
      if (o.temperature <= 1e-30) EXPECT_EQ(x, best) << "trial " << trial;
    }
  }
}

// Found by the test above: top-k compared the scaled scores (s - max) / temperature, where -1.2
// and -2.4 beside a max of 3e38 round to one value and tied with the k-th, so token 2 was drawn.
TEST(SamplingProperties, TopKIsChosenOnTheLogitsNotOnRoundedScores) {
  const Tensor<float> logits = from_vector<float>({3e38f, -1.2f, -2.4f}, {3});
  SamplingOptions o;
  o.top_k = 2;
  o.temperature = 1e300;  // the two kept tokens equally likely
  Generator g(5);
  std::vector<int> count(3, 0);
  for (int i = 0; i < 400; ++i) ++count[static_cast<std::size_t>(sample_next_token(logits, o, &g)(0))];
  EXPECT_EQ(count[2], 0);
  EXPECT_GT(count[0], 100);
  EXPECT_GT(count[1], 100);
}

TEST(SamplingProperties, SampleNextTokenNeverDrawsAFilteredTokenFloat64) { sampler_properties<double>(3); }
TEST(SamplingProperties, SampleNextTokenNeverDrawsAFilteredTokenFloat32) { sampler_properties<float>(4); }

}  // namespace
