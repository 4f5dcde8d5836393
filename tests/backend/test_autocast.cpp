// bfloat16 autocast (autocast.hpp, bf16.hpp): the rounding, gemm_bf16 against a reference on rounded
// operands, the guard's nesting and thread-locality, which ops cast (linear, matmul and attention,
// forward and backward, on pool threads too) and which stay float32, the choice recorded at the
// forward, double untouched, and a training step within bf16's tolerance of the float32 one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include <xgrad/backend/bf16.hpp>
#include <xgrad/backend/gemm.hpp>
#include <xgrad/xgrad.hpp>

#include "test_util.hpp"

namespace xgrad {
namespace {

using detail::round_to_bf16;
using testing::max_abs_diff;

std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
float from_bits(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

Tensor<float> rand_float(const Shape& shape, std::uint64_t seed, bool requires_grad = false) {
  Generator g(seed);
  return randn<float>(shape, g, requires_grad);
}

// A copy of t with every entry rounded to bf16 (a leaf, requiring grad like t).
Tensor<float> rounded(const Tensor<float>& t) {
  Array<float> v = t.value();
  detail::round_to_bf16(v.data(), v.data(), v.size());
  return Tensor<float>(std::move(v), t.requires_grad());
}

// ||a - b|| / ||b|| over all entries.
double rel_diff(const Array<float>& a, const Array<float>& b) {
  EXPECT_EQ(shape_of(a), shape_of(b));
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = double(a.data()[i]) - double(b.data()[i]);
    num += d * d;
    den += double(b.data()[i]) * double(b.data()[i]);
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// A guard that restores the thread count a test changed.
struct Threads {
  explicit Threads(int n) : previous(get_num_threads()) { set_num_threads(n); }
  ~Threads() { set_num_threads(previous); }
  int previous;
};

// ---- rounding ------------------------------------------------------------------------------

TEST(Autocast, RoundsToNearestEvenAndKeepsNan) {
  EXPECT_EQ(bits(round_to_bf16(1.0f)), 0x3F800000u);
  EXPECT_EQ(bits(round_to_bf16(from_bits(0x3F808000u))), 0x3F800000u);  // tie, kept bit even: down
  EXPECT_EQ(bits(round_to_bf16(from_bits(0x3F818000u))), 0x3F820000u);  // tie, kept bit odd: up
  EXPECT_EQ(bits(round_to_bf16(from_bits(0x3F808001u))), 0x3F810000u);  // above the tie: up
  EXPECT_EQ(bits(round_to_bf16(from_bits(0x3F807FFFu))), 0x3F800000u);  // below the tie: down
  EXPECT_EQ(bits(round_to_bf16(from_bits(0xBF818000u))), 0xBF820000u);  // sign kept
  EXPECT_EQ(bits(round_to_bf16(-0.0f)), 0x80000000u);
  EXPECT_EQ(round_to_bf16(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(round_to_bf16(-std::numeric_limits<float>::infinity()), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(round_to_bf16(std::numeric_limits<float>::max()), std::numeric_limits<float>::infinity());
  // NaN stays NaN, also a signalling one whose payload sits in the dropped bits (truncation gives inf).
  EXPECT_TRUE(std::isnan(round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(round_to_bf16(from_bits(0x7F800001u))));
  EXPECT_TRUE(std::isnan(round_to_bf16(from_bits(0xFF800001u))));
  // A denormal rounds like any other value.
  EXPECT_EQ(bits(round_to_bf16(from_bits(0x00018000u))), 0x00020000u);
  // The array form equals the scalar one.
  std::vector<float> v;
  for (std::uint32_t u = 0x3F800000u; u < 0x3F800000u + 3000u; u += 7) v.push_back(from_bits(u * 4099u));
  std::vector<float> r(v.size());
  detail::round_to_bf16(v.data(), r.data(), v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const float want = round_to_bf16(v[i]);
    ASSERT_TRUE(bits(r[i]) == bits(want) || (std::isnan(r[i]) && std::isnan(want))) << i;
    if (!std::isnan(want)) {
      EXPECT_EQ(bits(want) & 0xFFFFu, 0u);
    }
  }
}

// ---- gemm_bf16 -----------------------------------------------------------------------------

// gemm_bf16 against a double reference on the rounded operands (exact products, so only the
// float32 summation order differs), with transposes, padded leading dims, alpha and beta; the
// reference on the unrounded operands is much farther away.
void check_gemm_bf16(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float alpha, float beta) {
  const std::size_t pad = 3;
  const std::size_t ra = ta ? k : m, ca = ta ? m : k, rb = tb ? n : k, cb = tb ? k : n;
  const std::size_t lda = ca + pad, ldb = cb + pad, ldc = n + pad;
  Generator g(m * 131 + n * 7 + k + (ta ? 1000 : 0) + (tb ? 2000 : 0));
  const Array<float> a = randn<float>({ra, lda}, g).value(), b = randn<float>({rb, ldb}, g).value();
  const Array<float> c0 = randn<float>({m, ldc}, g).value();
  Array<float> c = c0;
  detail::gemm_bf16(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
  double worst = 0, worst_unrounded = 0;
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      double s = 0, s_unrounded = 0, scale = 0;
      for (std::size_t p = 0; p < k; ++p) {
        const float x = ta ? a(p, i) : a(i, p), y = tb ? b(j, p) : b(p, j);
        s += double(round_to_bf16(x)) * double(round_to_bf16(y));
        s_unrounded += double(x) * double(y);
        scale += std::abs(double(x) * double(y));
      }
      const double rest = double(beta) * double(c0(i, j));
      const double tol_scale = std::abs(alpha) * scale + std::abs(rest) + 1e-30;
      worst = std::max(worst, std::abs(double(c(i, j)) - (double(alpha) * s + rest)) / tol_scale);
      worst_unrounded =
          std::max(worst_unrounded, std::abs(double(c(i, j)) - (double(alpha) * s_unrounded + rest)) / tol_scale);
    }
  EXPECT_LT(worst, 1e-5) << "ta " << ta << " tb " << tb << " (" << m << ", " << n << ", " << k << ")";
  EXPECT_GT(worst_unrounded, 1e-4) << "the operands were not rounded";
  // The padding of C is left alone.
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = n; j < ldc; ++j) EXPECT_EQ(c(i, j), c0(i, j));
}

TEST(Autocast, GemmBf16IsFloat32GemmOnRoundedOperands) {
  for (int t = 0; t < 4; ++t) {
    check_gemm_bf16(t & 1, t & 2, 7, 5, 33, 1.0f, 0.0f);
    check_gemm_bf16(t & 1, t & 2, 13, 9, 17, 0.5f, 1.0f);
  }
  Threads two(2);  // large enough to be split over the pool, and the rounding with it
  check_gemm_bf16(false, true, 300, 120, 200, 1.0f, 0.0f);
  check_gemm_bf16(true, false, 120, 300, 200, 1.0f, 0.5f);
}

TEST(Autocast, GemmBf16WithNoInnerDimensionScalesC) {
  std::vector<float> c = {1.0f, std::nanf("")};
  detail::gemm_bf16(false, false, 1, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.0f, c.data(), 2);
  EXPECT_EQ(c[0], 0.0f);
  EXPECT_EQ(c[1], 0.0f);
}

TEST(Autocast, NamesItsPath) { EXPECT_NE(std::string(detail::bf16_gemm_path()), ""); }

// ---- the guard -----------------------------------------------------------------------------

TEST(Autocast, GuardNestsAndRestores) {
  EXPECT_FALSE(is_autocast_enabled());
  {
    AutocastGuard outer;
    EXPECT_TRUE(is_autocast_enabled());
    {
      AutocastGuard off(false);
      EXPECT_FALSE(is_autocast_enabled());
      {
        AutocastGuard on;
        EXPECT_TRUE(is_autocast_enabled());
      }
      EXPECT_FALSE(is_autocast_enabled());
    }
    EXPECT_TRUE(is_autocast_enabled());
    {
      AutocastGuard again;  // enabling what is enabled, then restoring it
      EXPECT_TRUE(is_autocast_enabled());
    }
    EXPECT_TRUE(is_autocast_enabled());
  }
  EXPECT_FALSE(is_autocast_enabled());
  // Restored on the way out of an exception too.
  try {
    AutocastGuard guard;
    throw std::runtime_error("x");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(is_autocast_enabled());
}

TEST(Autocast, StateIsPerThread) {
  AutocastGuard guard;
  bool other = true;
  std::thread([&] { other = is_autocast_enabled(); }).join();
  EXPECT_FALSE(other);
  EXPECT_TRUE(is_autocast_enabled());
}

// ---- which ops cast ------------------------------------------------------------------------

TEST(Autocast, LinearEqualsTheReferenceOnRoundedInputs) {
  const Tensor<float> x = rand_float({4, 6, 33}, 1), w = rand_float({19, 33}, 2), b = rand_float({19}, 3);
  Tensor<float> y;
  {
    AutocastGuard guard;
    y = linear(x, w, b);
  }
  const Tensor<float> reference = linear(rounded(x), rounded(w), b);  // the bias is added in float32
  const Tensor<float> plain = linear(x, w, b);
  EXPECT_LT(max_abs_diff(y.value(), reference.value()), 1e-5);
  EXPECT_GT(max_abs_diff(y.value(), plain.value()), 1e-3) << "linear did not cast under the guard";
}

// f(inputs) under the guard, forward and backward (upstream gradient R), against f on the rounded
// inputs with the rounded R in float32: values and every gradient agree to float32 summation order.
void expect_casts_forward_and_backward(const std::function<Tensor<float>(const std::vector<Tensor<float>>&)>& f,
                                       const std::vector<Tensor<float>>& inputs, const char* what) {
  std::vector<Tensor<float>> cast_in, ref_in, plain_in;
  for (const auto& t : inputs) {
    cast_in.push_back(Tensor<float>(t.value(), true));
    ref_in.push_back(rounded(Tensor<float>(t.value(), true)));
    plain_in.push_back(Tensor<float>(t.value(), true));
  }
  Tensor<float> y;
  {
    AutocastGuard guard;
    y = f(cast_in);
  }
  const Array<float> R = rand_float(y.shape(), 99).value();
  y.backward(Tensor<float>(R));
  const Tensor<float> y_ref = f(ref_in), y_plain = f(plain_in);
  y_ref.backward(rounded(Tensor<float>(R)));
  y_plain.backward(Tensor<float>(R));
  EXPECT_LT(max_abs_diff(y.value(), y_ref.value()), 2e-5) << what;
  EXPECT_GT(max_abs_diff(y.value(), y_plain.value()), 1e-4) << what << ": the forward did not cast";
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_LT(max_abs_diff(cast_in[i].grad(), ref_in[i].grad()), 2e-5) << what << ": gradient " << i;
    EXPECT_GT(max_abs_diff(cast_in[i].grad(), plain_in[i].grad()), 1e-4) << what << ": gradient " << i
                                                                            << " did not cast";
  }
}

TEST(Autocast, LinearAndMatmulCastForwardAndBackward) {
  // Without a bias: its gradient is a float32 sum of R, which the reference's rounded R would change.
  expect_casts_forward_and_backward([](const auto& in) { return linear(in[0], in[1]); },
                                    {rand_float({5, 40}, 4), rand_float({24, 40}, 5)}, "linear");
  expect_casts_forward_and_backward([](const auto& in) { return matmul(in[0], in[1]); },
                                    {rand_float({30, 40}, 7), rand_float({40, 20}, 8)}, "matmul 2-D");
  expect_casts_forward_and_backward([](const auto& in) { return matmul(in[0], in[1]); },
                                    {rand_float({3, 12, 40}, 9), rand_float({40, 20}, 10)}, "matmul folded batch");
  expect_casts_forward_and_backward([](const auto& in) { return matmul(in[0], in[1]); },
                                    {rand_float({2, 1, 12, 40}, 11), rand_float({3, 40, 20}, 12)},
                                    "matmul broadcast batch");
}

// Attention in double with each gemm's operands rounded to bf16, as the kernels do under the guard:
// A = scale q k^T, P = softmax(A), O = P v; and the backward for upstream dO.
struct AttentionReference {
  std::vector<double> out, dq, dk, dv;
};
AttentionReference attention_reference(const Array<float>& q, const Array<float>& k, const Array<float>& v,
                                       const Array<float>& dO) {
  const std::size_t B = q.shape(0), L = q.shape(1), S = k.shape(1), E = q.shape(2), Ev = v.shape(2);
  const double scale = 1.0 / std::sqrt(double(E));
  auto r = [](float x) { return double(round_to_bf16(x)); };
  AttentionReference ref{std::vector<double>(B * L * Ev), std::vector<double>(B * L * E),
                         std::vector<double>(B * S * E), std::vector<double>(B * S * Ev)};
  for (std::size_t b = 0; b < B; ++b) {
    std::vector<double> P(L * S), dA(L * S);
    for (std::size_t i = 0; i < L; ++i) {
      double mx = -1e300;
      for (std::size_t j = 0; j < S; ++j) {
        double s = 0;
        for (std::size_t e = 0; e < E; ++e) s += r(q(b, i, e)) * r(k(b, j, e));
        P[i * S + j] = scale * s;
        mx = std::max(mx, P[i * S + j]);
      }
      double z = 0;
      for (std::size_t j = 0; j < S; ++j) z += (P[i * S + j] = std::exp(P[i * S + j] - mx));
      for (std::size_t j = 0; j < S; ++j) P[i * S + j] /= z;
      for (std::size_t e = 0; e < Ev; ++e) {
        double s = 0;
        for (std::size_t j = 0; j < S; ++j) s += r(float(P[i * S + j])) * r(v(b, j, e));
        ref.out[(b * L + i) * Ev + e] = s;
      }
      // dP = dO v^T;  dA = P * (dP - rowsum(dP * P))
      double gp = 0;
      for (std::size_t j = 0; j < S; ++j) {
        double s = 0;
        for (std::size_t e = 0; e < Ev; ++e) s += r(dO(b, i, e)) * r(v(b, j, e));
        dA[i * S + j] = s;
        gp += s * P[i * S + j];
      }
      for (std::size_t j = 0; j < S; ++j) dA[i * S + j] = P[i * S + j] * (dA[i * S + j] - gp);
    }
    for (std::size_t j = 0; j < S; ++j) {
      for (std::size_t e = 0; e < Ev; ++e) {  // dV = P^T dO
        double s = 0;
        for (std::size_t i = 0; i < L; ++i) s += r(float(P[i * S + j])) * r(dO(b, i, e));
        ref.dv[(b * S + j) * Ev + e] = s;
      }
      for (std::size_t e = 0; e < E; ++e) {  // dK = scale dA^T q
        double s = 0;
        for (std::size_t i = 0; i < L; ++i) s += r(float(dA[i * S + j])) * r(q(b, i, e));
        ref.dk[(b * S + j) * E + e] = scale * s;
      }
    }
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t e = 0; e < E; ++e) {  // dQ = scale dA k
        double s = 0;
        for (std::size_t j = 0; j < S; ++j) s += r(float(dA[i * S + j])) * r(k(b, j, e));
        ref.dq[(b * L + i) * E + e] = scale * s;
      }
  }
  return ref;
}

// ||a - b|| / ||b||
double rel_diff(const Array<float>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num += (double(a.data()[i]) - b[i]) * (double(a.data()[i]) - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

TEST(Autocast, AttentionCastsItsGemmsOnPoolThreadsForwardAndBackward) {
  Threads two(2);
  // 32 heads of (L, S, E) = (64, 60, 32), one chunk each (attention.cpp's batch_grain), so that the
  // pool's worker claims some of them. Which chunks it gets depends on timing: the forward runs a
  // few times, each compared, and the backward runs on a thread of its own, outside the guard.
  const std::size_t B = 32, L = 64, S = 60, E = 32, Ev = 24;
  Tensor<float> q = rand_float({B, L, E}, 21, true), k = rand_float({B, S, E}, 22, true),
                v = rand_float({B, S, Ev}, 23, true);
  const Array<float> dO = rand_float({B, L, Ev}, 24).value();
  const AttentionReference ref = attention_reference(q.value(), k.value(), v.value(), dO);
  // Compared as norms: P (and dA), computed in float32 here and in double there, may now and then
  // round to neighbouring bf16 values; the unrounded float32 result is far farther (checked below).
  Tensor<float> out;
  for (int run = 0; run < 4; ++run) {
    AutocastGuard guard;
    // A parallel job just before leaves the worker spinning (parallel.cpp), ready to claim heads.
    detail::parallel_for(2, 1, [](std::size_t, std::size_t) {});
    out = scaled_dot_product_attention(q, k, v);
    EXPECT_LT(rel_diff(out.value(), ref.out), 1e-4) << "run " << run;
  }
  std::thread([&] { out.backward(Tensor<float>(dO)); }).join();
  EXPECT_LT(rel_diff(q.grad(), ref.dq), 1e-4);
  EXPECT_LT(rel_diff(k.grad(), ref.dk), 1e-4);
  EXPECT_LT(rel_diff(v.grad(), ref.dv), 1e-4);

  Tensor<float> q2(q.value(), true), k2(k.value(), true), v2(v.value(), true);
  const Tensor<float> plain = scaled_dot_product_attention(q2, k2, v2);
  plain.backward(Tensor<float>(dO));
  EXPECT_GT(rel_diff(plain.value(), ref.out), 1e-3);
  EXPECT_GT(rel_diff(q2.grad(), ref.dq), 1e-3);
  EXPECT_GT(rel_diff(k2.grad(), ref.dk), 1e-3);
  EXPECT_GT(rel_diff(v2.grad(), ref.dv), 1e-3);
}

// ---- recorded at the forward ---------------------------------------------------------------

TEST(Autocast, BackwardUsesTheChoiceOfTheForward) {
  const Array<float> xv = rand_float({8, 40}, 31).value(), wv = rand_float({24, 40}, 32).value();
  const Array<float> R = rand_float({8, 24}, 33).value();
  // Returns {dx, dW} for a forward under `forward_bf16`, a backward under `backward_bf16`.
  auto grads = [&](bool forward_bf16, bool backward_bf16) {
    Tensor<float> x(xv, true), w(wv, true);
    Tensor<float> y;
    {
      AutocastGuard guard(forward_bf16);
      y = linear(x, w);
    }
    {
      AutocastGuard guard(backward_bf16);
      y.backward(Tensor<float>(R));
    }
    return std::make_pair(x.grad(), w.grad());
  };
  const auto both = grads(true, true), forward_only = grads(true, false);
  const auto neither = grads(false, false), backward_only = grads(false, true);
  EXPECT_EQ(max_abs_diff(forward_only.first, both.first), 0.0);
  EXPECT_EQ(max_abs_diff(forward_only.second, both.second), 0.0);
  EXPECT_EQ(max_abs_diff(backward_only.first, neither.first), 0.0);
  EXPECT_EQ(max_abs_diff(backward_only.second, neither.second), 0.0);
  EXPECT_GT(max_abs_diff(both.first, neither.first), 1e-4);
  EXPECT_GT(max_abs_diff(both.second, neither.second), 1e-4);
}

// ---- what stays float32 --------------------------------------------------------------------

// f's value and input gradients under the guard equal f's outside it, bit for bit.
void expect_unaffected(const std::function<Tensor<float>(const Tensor<float>&)>& f, const Shape& shape,
                       const char* what) {
  const Array<float> v = rand_float(shape, 41).value();
  Tensor<float> a(v, true), b(v, true);
  Tensor<float> ya, yb;
  {
    AutocastGuard guard;
    ya = f(a);
    ya.backward(ones<float>(ya.shape()));
  }
  yb = f(b);
  yb.backward(ones<float>(yb.shape()));
  EXPECT_EQ(max_abs_diff(ya.value(), yb.value()), 0.0) << what;
  EXPECT_EQ(max_abs_diff(a.grad(), b.grad()), 0.0) << what;
}

TEST(Autocast, NormalizationActivationsAndLossesStayFloat32) {
  const Tensor<float> gamma = rand_float({16}, 42), beta = rand_float({16}, 43);
  const Tensor<float> target = rand_float({4, 5, 16}, 44);
  expect_unaffected([&](const auto& x) { return layer_norm(x, {16}, gamma, beta); }, {4, 5, 16}, "layer_norm");
  expect_unaffected([](const auto& x) { return softmax(x, -1); }, {4, 5, 16}, "softmax");
  expect_unaffected([](const auto& x) { return log_softmax(x, -1); }, {4, 5, 16}, "log_softmax");
  expect_unaffected([](const auto& x) { return gelu(x); }, {4, 5, 16}, "gelu");
  expect_unaffected([&](const auto& x) { return mse_loss(x, target); }, {4, 5, 16}, "mse_loss");
  IndexArray labels = IndexArray::from_shape({20});
  for (std::size_t i = 0; i < 20; ++i) labels(i) = std::int64_t(i % 16);
  expect_unaffected([&](const auto& x) { return cross_entropy(x, labels); }, {20, 16}, "cross_entropy");
}

TEST(Autocast, DoubleIsNotCast) {
  auto dbl = [](const Shape& s, std::uint64_t seed) {
    Generator g(seed);
    return randn<double>(s, g, true);
  };
  const Tensor<double> x = dbl({6, 40}, 51), w = dbl({24, 40}, 52), m = dbl({40, 12}, 53);
  const Tensor<double> q = dbl({4, 8, 16}, 54), k = dbl({4, 8, 16}, 55), v = dbl({4, 8, 16}, 56);
  auto run = [&] {
    return std::vector<Array<double>>{linear(x, w).value(), matmul(x, m).value(),
                                      scaled_dot_product_attention(q, k, v).value()};
  };
  std::vector<Array<double>> cast;
  {
    AutocastGuard guard;
    cast = run();
  }
  const std::vector<Array<double>> plain = run();
  for (std::size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(max_abs_diff(cast[i], plain[i]), 0.0) << i;
}

// ---- a training step -----------------------------------------------------------------------

// A 2-layer pre-norm GELU encoder's MSE step: under the guard, the loss and every gradient are
// within 2e-2 (relative) of the float32 step, yet not equal to it; the parameters, their
// gradients and Adam's state stay float32 tensors, and one Adam step keeps the weights close.
TEST(Autocast, TrainingStepIsWithinBf16ToleranceOfFloat32) {
  manual_seed(7);
  auto layer = std::make_shared<nn::TransformerEncoderLayer<float>>(nn::TransformerEncoderLayerOptions(32, 4)
                                                                        .dim_feedforward(64)
                                                                        .dropout(0.0)
                                                                        .activation("gelu")
                                                                        .batch_first(true)
                                                                        .norm_first(true));
  nn::TransformerEncoder<float> encoder(layer, 2, std::make_shared<nn::LayerNorm<float>>(32));
  const Tensor<float> x = rand_float({4, 10, 32}, 61), target = rand_float({4, 10, 32}, 62);
  const auto named = encoder.named_parameters();

  auto step_grads = [&](bool bf16) {
    encoder.zero_grad();
    Tensor<float> loss;
    {
      AutocastGuard guard(bf16);
      loss = mse_loss(encoder.forward(x), target);
    }
    loss.backward();
    std::vector<Array<float>> g;
    for (const auto& [name, p] : named) g.push_back(p.grad());
    return std::make_pair(loss.item(), g);
  };
  const auto [loss32, grads32] = step_grads(false);
  const auto [loss16, grads16] = step_grads(true);
  EXPECT_NE(loss16, loss32) << "the step did not cast";
  EXPECT_LT(std::abs(double(loss16) - double(loss32)) / std::abs(double(loss32)), 2e-2);
  bool any_differs = false;
  for (std::size_t i = 0; i < named.size(); ++i) {
    EXPECT_LT(rel_diff(grads16[i], grads32[i]), 2e-2) << named[i].first;
    any_differs = any_differs || max_abs_diff(grads16[i], grads32[i]) > 0;
  }
  EXPECT_TRUE(any_differs);
}

}  // namespace
}  // namespace xgrad
