// rotary_embedding and the RoPE tables (xgrad/ops/rotary_embedding.hpp): values against a direct
// loop, the rotate_half layout (not interleaved pairs), broadcast tables, errors, and PyTorch's
// values (tests/fixtures: rotary_embedding_*, rope_scaling_*, written by scripts/make_fixtures.py;
// rope_inv_freq, copied from the hf-llama-tiny reference numbers).
#include <cmath>
#include <cstring>
#include <limits>

#include <xtensor/xview.hpp>

#include "fixture.hpp"
#include "test_util.hpp"

#include <xgrad/core/trace.hpp>

#include <xgrad/ops/ops.hpp>

using namespace xgrad;
using namespace xgrad::testing;

namespace {

// y = x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x[D/2:], x[:D/2]), element by element
// (tables (T, D), x (..., T, D)).
Array<double> direct_rope(const Array<double>& x, const Array<double>& cos, const Array<double>& sin) {
  const std::size_t D = x.shape().back(), T = cos.shape()[0], h = D / 2;
  Array<double> y = x;
  for (std::size_t r = 0; r < x.size() / D; ++r)
    for (std::size_t j = 0; j < D; ++j) {
      const double rotated = j < h ? -x.data()[r * D + j + h] : x.data()[r * D + j - h];
      const std::size_t t = (r % T) * D + j;
      y.data()[r * D + j] = x.data()[r * D + j] * cos.data()[t] + rotated * sin.data()[t];
    }
  return y;
}

T64 constant(const Shape& shape, std::uint64_t seed) { return input(shape, seed).detach(); }

// Float32 values within `ulps` units in the last place.
void expect_ulps(const Array<float>& got, const Array<float>& want, int ulps, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float a = got.data()[i], b = want.data()[i];
    EXPECT_LE(std::abs(a - b), ulps * (std::nextafter(std::abs(b), 1e30f) - std::abs(b)))
        << what << "[" << i << "]: " << a << " vs " << b;
  }
}

void expect_relative(const Array<double>& got, const Array<double>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_LE(std::abs(got.data()[i] - want.data()[i]), tol * std::abs(want.data()[i])) << what << "[" << i << "]";
}

bool bitwise_equal(const Array<float>& a, const Array<float>& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST(RotaryEmbedding, ForwardMatchesADirectLoop) {
  const T64 x = input({2, 3, 4, 6}, 1);
  const T64 cos = constant({4, 6}, 2), sin = constant({4, 6}, 3);
  EXPECT_LT(max_abs_diff(rotary_embedding(x, cos, sin).value(), direct_rope(x.value(), cos.value(), sin.value())),
            1e-15);
}

// Element j of the first half pairs with j + D/2 (transformers' rotate_half); the interleaved
// layout of the RoPE paper (and of Meta's original checkpoints) pairs 2i with 2i + 1 and fails here.
TEST(RotaryEmbedding, RotatesHalvesNotInterleavedPairs) {
  const T64 cos = zeros<double>({1, 4}), sin = ones<double>({1, 4});  // a quarter turn
  const auto e = [](std::size_t k) {
    Array<double> v = xt::zeros<double>({1, 4});
    v(0, k) = 1;
    return T64(v);
  };
  EXPECT_EQ(rotary_embedding(e(0), cos, sin).value(), e(2).value());     // x0 -> y2 (interleaved: y1)
  EXPECT_EQ(rotary_embedding(e(2), cos, sin).value(), (-e(0)).value());  // x2 -> -y0
  EXPECT_EQ(rotary_embedding(e(1), cos, sin).value(), e(3).value());     // x1 -> y3 (interleaved: -y0)
  // With the tables of positions 0..2: position p turns the pair (j, j + D/2) by p * inv_freq[j].
  const auto [c, s] = rope_cos_sin(rope_inv_freq<double>(4, 10000.0), IndexArray{0, 1, 2});
  const Array<double> y = rotary_embedding(T64(xt::ones<double>({3, 4})), c, s).value();
  for (std::size_t p = 0; p < 3; ++p)
    for (std::size_t j = 0; j < 2; ++j) {
      const double angle = static_cast<double>(p) / std::pow(10000.0, 2.0 * static_cast<double>(j) / 4);
      EXPECT_NEAR(y(p, j), std::cos(angle) - std::sin(angle), 1e-15);
      EXPECT_NEAR(y(p, j + 2), std::cos(angle) + std::sin(angle), 1e-15);
    }
}

// Tables (T, D), (1, T, D) and (B, 1, T, D) against x (B, H, T, D): each row of x uses its
// batch's and position's row.
TEST(RotaryEmbedding, BroadcastsTheTables) {
  const T64 x = input({2, 3, 4, 6}, 4);
  const T64 cos = constant({2, 1, 4, 6}, 5), sin = constant({2, 1, 4, 6}, 6);
  const Array<double> y = rotary_embedding(x, cos, sin).value();
  for (std::size_t b = 0; b < 2; ++b) {
    const Array<double> cb = xt::view(cos.value(), b, 0), sb = xt::view(sin.value(), b, 0);
    const Array<double> xb = xt::view(x.value(), b), yb = xt::view(y, b);
    EXPECT_LT(max_abs_diff(yb, direct_rope(xb, cb, sb)), 1e-15) << b;
  }
  const T64 c1 = constant({4, 6}, 7), s1 = constant({4, 6}, 8);
  EXPECT_EQ(rotary_embedding(x, reshape(c1, {1, 4, 6}), reshape(s1, {1, 4, 6})).value(),
            rotary_embedding(x, c1, s1).value());
}

TEST(RotaryEmbedding, GradientIsExactForAnyTables) {
  const T64 cos = constant({4, 6}, 9), sin = constant({4, 6}, 10);  // halves differ: not cat(f, f)
  expect_gradcheck([&](const Inputs& in) { return rotary_embedding(in[0], cos, sin); }, {input({2, 4, 6}, 11)});
  // Linear in x: the backward is the transpose, <y(x), g> = <x, dx(g)>.
  const T64 x = input({2, 4, 6}, 12);
  const T64 g = constant({2, 4, 6}, 13);
  const T64 y = rotary_embedding(x, cos, sin);
  y.backward(g);
  EXPECT_NEAR(xt::sum(y.value() * g.value())(), xt::sum(x.value() * x.grad())(), 1e-12);
}

TEST(RotaryEmbedding, RefusesBadShapesAndTablesThatRequireGrad) {
  const T64 c = constant({3, 4}, 1);
  XGRAD_EXPECT_THROW_MSG(rotary_embedding(input({2, 3, 5}), constant({3, 5}, 1), constant({3, 5}, 2)),
                         "rotary_embedding", "D (the head dim) even", "(2, 3, 5)");
  XGRAD_EXPECT_THROW_MSG(rotary_embedding(input({2, 3, 4}), c, constant({3, 2}, 2)), "cos and sin must have one shape",
                         "(3, 4)", "(3, 2)");
  XGRAD_EXPECT_THROW_MSG(rotary_embedding(input({2, 5, 4}), c, c), "must broadcast to x's shape (2, 5, 4)",
                         "got (3, 4)");
  XGRAD_EXPECT_THROW_MSG(rotary_embedding(input({2, 3, 4}), constant({3, 6}, 1), constant({3, 6}, 2)),
                         "with its last dim 4", "got (3, 6)");
  XGRAD_EXPECT_THROW_MSG(rotary_embedding(input({3, 4}), constant({2, 3, 4}, 1), constant({2, 3, 4}, 2)),
                         "must broadcast");
  XGRAD_EXPECT_THROW_MSG(rotary_embedding(input({2, 3, 4}), input({3, 4}), c), "constants of the model",
                         "cos that requires grad");
  XGRAD_EXPECT_THROW_MSG(rotary_embedding(input({2, 3, 4}), c, input({3, 4})), "sin that requires grad");
}

// PyTorch's values (make_fixtures.py: transformers' apply_rotary_pos_emb, torch 1.13): in float32
// bit for bit, forward and gradient, with the tables of positions 0..T-1 and with random
// (B, 1, T, D) ones.
TEST(RotaryEmbedding, MatchesPyTorch) {
  for (const char* dtype : {"float32", "float64"}) {
    SCOPED_TRACE(dtype);
    const Fixture f = load_fixture(std::string("rotary_embedding_") + dtype);
    for (const std::string suffix : {"", "_b"}) {
      if (std::string(dtype) == "float32") {
        const Tensor<float> x = f.tensor<float>("input", true);
        const Tensor<float> y = rotary_embedding(x, f.tensor<float>("cos" + suffix), f.tensor<float>("sin" + suffix));
        y.backward(f.tensor<float>("grad_output"));
        EXPECT_TRUE(bitwise_equal(y.value(), f.array<float>("output" + suffix))) << suffix;
        EXPECT_TRUE(bitwise_equal(x.grad(), f.array<float>("grad.input" + suffix))) << suffix;
      } else {
        const T64 x = f.tensor<double>("input", true);
        const T64 y = rotary_embedding(x, f.tensor<double>("cos" + suffix), f.tensor<double>("sin" + suffix));
        y.backward(f.tensor<double>("grad_output"));
        EXPECT_LT(max_abs_diff(y.value(), f.array<double>("output" + suffix)), 1e-15) << suffix;
        EXPECT_LT(max_abs_diff(x.grad(), f.array<double>("grad.input" + suffix)), 1e-15) << suffix;
      }
    }
  }
}

// The in-place form gives the op's values bit for bit (float32: torch's), in x's own array.
TEST(RotaryEmbedding, InPlaceEqualsTheOpBitForBit) {
  const Fixture f = load_fixture("rotary_embedding_float32");
  for (const std::string suffix : {"", "_b"}) {
    const Tensor<float> cos = f.tensor<float>("cos" + suffix), sin = f.tensor<float>("sin" + suffix);
    const Tensor<float> x = f.tensor<float>("input");
    const float* storage = x.value().data();
    const std::uint64_t version = x.version();
    const Tensor<float> y = rotary_embedding(x, cos, sin);
    EXPECT_TRUE(rotary_embedding_(x, cos, sin).same(x));
    EXPECT_EQ(x.value().data(), storage);
    EXPECT_EQ(x.version(), version + 1);
    EXPECT_TRUE(bitwise_equal(x.value(), y.value())) << suffix;
    EXPECT_TRUE(bitwise_equal(x.value(), f.array<float>("output" + suffix))) << suffix;
  }
}

TEST(RotaryEmbedding, InPlaceIsForInferenceOnly) {
  const T64 cos = constant({3, 4}, 1), sin = constant({3, 4}, 2);
  const T64 x = input({2, 3, 4}, 3);
  XGRAD_EXPECT_THROW_MSG(rotary_embedding_(x, cos, sin), "rotary_embedding_: x requires grad and grad mode is on",
                         "use rotary_embedding");
  const T64 saved = x * x;  // saves x for its backward
  {
    NoGradGuard no_grad;
    rotary_embedding_(x, cos, sin);  // allowed, as torch's `with no_grad(): x.mul_(...)`
    trace::Recorder recorder;
    XGRAD_EXPECT_THROW_MSG(rotary_embedding_(x, cos, sin), "a trace is recording");
  }
  EXPECT_THROW(sum(saved).backward(), std::exception);  // x changed since mul saved it
}

// LlamaRotaryEmbedding's tables for positions 0..4, head_dim 8: torch's float32 cos / sin (SLEEF's
// vectorized ones) and the C library's may differ in the last bit.
TEST(RopeTables, CosSinMatchPyTorch) {
  const IndexArray positions{0, 1, 2, 3, 4};
  const Fixture f32 = load_fixture("rotary_embedding_float32");
  const auto [c32, s32] = rope_cos_sin(rope_inv_freq<float>(8, 10000.0), positions);
  expect_ulps(c32.value(), f32.array<float>("cos"), 1, "cos float32");
  expect_ulps(s32.value(), f32.array<float>("sin"), 1, "sin float32");
  const Fixture f64 = load_fixture("rotary_embedding_float64");
  const auto [c64, s64] = rope_cos_sin(rope_inv_freq<double>(8, 10000.0), positions);
  EXPECT_LT(max_abs_diff(c64.value(), f64.array<double>("cos")), 1e-15);
  EXPECT_LT(max_abs_diff(s64.value(), f64.array<double>("sin")), 1e-15);
  // Positions of any shape: (B, T) gives (B, T, D).
  const auto [cb, sb] = rope_cos_sin(rope_inv_freq<double>(8, 10000.0), IndexArray{{0, 1, 2, 3, 4}, {5, 6, 7, 8, 9}});
  EXPECT_EQ(cb.shape(), (Shape{2, 5, 8}));
  EXPECT_EQ(Array<double>(xt::view(cb.value(), 0)), c64.value());
  EXPECT_FALSE(cb.requires_grad());
}

// The reference numbers of tests/fixtures/rope_inv_freq.json (hf-llama-tiny: head_dim 16, theta
// 10000): float32 bit for bit, float64 within 1e-15.
TEST(RopeTables, InvFreqMatchesTheLlamaReference) {
  const Fixture f = load_fixture("rope_inv_freq");
  const Tensor<float> f32 = rope_inv_freq<float>(16, 10000.0);
  EXPECT_EQ(f32.shape(), (Shape{8}));
  EXPECT_TRUE(bitwise_equal(f32.value(), f.array<float>("float32")));
  expect_relative(rope_inv_freq<double>(16, 10000.0).value(), f.array<double>("float64"), 1e-15, "float64");
  // partial_rotary_factor: dim = int(32 * 0.5) = 16, the same frequencies.
  EXPECT_EQ(rope_inv_freq<double>(32, 10000.0, {}, 0.5).value(), rope_inv_freq<double>(16, 10000.0).value());
}

// rope_scaling "linear" (factor 4) and "llama3" (Llama 3.1's: theta 500000, factor 8, low 1,
// high 4, original 8192: its 64 frequencies span the three bands) against transformers' code.
TEST(RopeTables, ScalingMatchesTransformers) {
  RopeScaling linear;
  linear.rope_type = "linear";
  linear.factor = 4;
  RopeScaling llama3;
  llama3.rope_type = "llama3";
  llama3.factor = 8;
  const Fixture f32 = load_fixture("rope_scaling_float32"), f64 = load_fixture("rope_scaling_float64");
  expect_ulps(rope_inv_freq<float>(64, 10000.0, linear).value(), f32.array<float>("linear"), 1, "linear");
  expect_ulps(rope_inv_freq<float>(128, 500000.0, llama3).value(), f32.array<float>("llama3"), 1, "llama3");
  expect_relative(rope_inv_freq<double>(64, 10000.0, linear).value(), f64.array<double>("linear"), 1e-15, "linear");
  expect_relative(rope_inv_freq<double>(128, 500000.0, llama3).value(), f64.array<double>("llama3"), 1e-15, "llama3");
  // The three bands are all there: scaled by 1/8, kept, and blended in between.
  const Array<double> base = rope_inv_freq<double>(128, 500000.0).value(), scaled = f64.array<double>("llama3");
  int kept = 0, divided = 0, blended = 0;
  for (std::size_t i = 0; i < base.size(); ++i) {
    if (scaled(i) == base(i)) {
      ++kept;
    } else if (std::abs(scaled(i) - base(i) / 8) < 1e-20) {
      ++divided;
    } else {
      ++blended;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
}

TEST(RopeTables, RefusesUnknownTypesAndBadArguments) {
  RopeScaling yarn;
  yarn.rope_type = "yarn";
  XGRAD_EXPECT_THROW_MSG(rope_inv_freq<float>(16, 10000.0, yarn), "rope_inv_freq", "rope_type \"yarn\"",
                         "not supported", "\"llama3\"");
  XGRAD_EXPECT_THROW_MSG(rope_inv_freq<double>(15, 10000.0), "positive and even, got 15");
  XGRAD_EXPECT_THROW_MSG(rope_inv_freq<double>(0, 10000.0), "positive and even, got 0");
  XGRAD_EXPECT_THROW_MSG(rope_inv_freq<double>(16, 0.0), "rope_theta must be positive, got 0");
  XGRAD_EXPECT_THROW_MSG(rope_inv_freq<double>(16, 10000.0, {}, 1.5), "partial_rotary_factor", "1.5");
  RopeScaling bad;
  bad.rope_type = "llama3";
  bad.low_freq_factor = 4;
  bad.high_freq_factor = 1;
  XGRAD_EXPECT_THROW_MSG(rope_inv_freq<double>(16, 10000.0, bad), "low_freq_factor < high_freq_factor",
                         "got low_freq_factor 4 and high_freq_factor 1");
  bad.rope_type = "linear";
  bad.factor = 0;
  XGRAD_EXPECT_THROW_MSG(rope_inv_freq<double>(16, 10000.0, bad), "factor must be positive", "\"linear\"");
  XGRAD_EXPECT_THROW_MSG(rope_cos_sin(zeros<double>({2, 4}), IndexArray{0, 1}), "rope_cos_sin: inv_freq must be 1-D",
                         "(2, 4)");
}
