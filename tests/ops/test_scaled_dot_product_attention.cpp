// F.scaled_dot_product_attention: forward values against a loop reference, gradchecks over
// shapes and masks, mask semantics (bool vs float, constant shifts, causal), fully masked rows,
// dropout on the probabilities, and the error messages.
#include <cmath>
#include <limits>

#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
using Mask = AttnMask<double>;

// (..., L, S) for q (..., L, E) and k (..., S, E).
Shape logits_shape(const Shape& q, const Shape& k) {
  Shape t = q;
  t.back() = k[k.size() - 2];
  return t;
}

// Loops: out[b, i, :] = sum_j softmax_j(scale * q_i . k_j + add[b, i, j]) v_j, where add has the
// full shape (..., L, S); a row that is -inf everywhere gives 0.
Array<double> reference(const Array<double>& q, const Array<double>& k, const Array<double>& v,
                        const Array<double>& add, double scale) {
  const std::size_t nd = q.dimension();
  const std::size_t L = q.shape()[nd - 2], E = q.shape()[nd - 1], S = k.shape()[nd - 2], Ev = v.shape()[nd - 1];
  const std::size_t batch = q.size() / (L * E);
  Shape out_shape = shape_of(q);
  out_shape.back() = Ev;
  Array<double> out = xt::zeros<double>(out_shape);
  std::vector<double> w(S);
  for (std::size_t b = 0; b < batch; ++b) {
    for (std::size_t i = 0; i < L; ++i) {
      double m = -kInf;
      for (std::size_t j = 0; j < S; ++j) {
        double s = 0;
        for (std::size_t e = 0; e < E; ++e) s += q.data()[(b * L + i) * E + e] * k.data()[(b * S + j) * E + e];
        w[j] = scale * s + add.data()[(b * L + i) * S + j];
        m = std::max(m, w[j]);
      }
      if (m == -kInf) continue;
      double z = 0;
      for (std::size_t j = 0; j < S; ++j) z += (w[j] = std::exp(w[j] - m));
      for (std::size_t j = 0; j < S; ++j)
        for (std::size_t c = 0; c < Ev; ++c) out.data()[(b * L + i) * Ev + c] += w[j] / z * v.data()[(b * S + j) * Ev + c];
    }
  }
  return out;
}

Array<double> additive_of(const BoolArray& mask, const Shape& target) {
  const BoolArray full = xt::broadcast(mask, target);
  Array<double> add = empty_array<double>(target);
  for (std::size_t n = 0; n < add.size(); ++n) add.data()[n] = full.data()[n] ? -kInf : 0.0;
  return add;
}

Array<double> causal_additive(const Shape& target) {
  const std::size_t L = target[target.size() - 2], S = target.back();
  Array<double> add = xt::zeros<double>(target);
  for (std::size_t n = 0; n < add.size(); ++n)
    if (n % S > (n / S) % L) add.data()[n] = -kInf;
  return add;
}

// Lower-triangular "may NOT attend" mask of shape (L, S): true where key j > query i.
BoolArray causal_bool(std::size_t L, std::size_t S) {
  BoolArray m = BoolArray::from_shape({L, S});
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t j = 0; j < S; ++j) m(i, j) = j > i;
  return m;
}

BoolArray random_bool(const Shape& shape, std::uint64_t seed, double p_true = 0.3) {
  Generator g(seed);
  BoolArray m = BoolArray::from_shape(shape);
  for (auto& x : m) x = g.uniform() < p_true;
  return m;
}

struct Case {
  std::string name;
  Shape q, k, v;
};

const std::vector<Case> kCases = {
    {"(L,E)", {4, 3}, {4, 3}, {4, 3}},
    {"(B,L,E), L != S, E != Ev", {2, 3, 4}, {2, 5, 4}, {2, 5, 2}},
    {"(B,H,L,E)", {2, 3, 4, 5}, {2, 3, 6, 5}, {2, 3, 6, 3}},
    // rows longer than a SIMD register, with a remainder
    {"(B,L,E), S = 37", {2, 5, 3}, {2, 37, 3}, {2, 37, 4}},
};

// One way of calling the op, with the full-shape additive mask the reference uses.
struct Variant {
  std::string name;
  Mask mask;
  bool causal = false;
  std::optional<double> scale;
  Array<double> additive;
};

std::vector<Variant> variants(const Case& c) {
  const Shape target = logits_shape(c.q, c.k);
  const std::size_t nd = target.size(), L = target[nd - 2], S = target[nd - 1];
  std::vector<Variant> out;
  out.push_back({"no mask", {}, false, std::nullopt, xt::zeros<double>(target)});
  out.push_back({"scale 0.7", {}, false, 0.7, xt::zeros<double>(target)});
  out.push_back({"is_causal", {}, true, std::nullopt, causal_additive(target)});
  const BoolArray b2 = random_bool({L, S}, 21);
  out.push_back({"bool (L,S)", Mask(b2), false, std::nullopt, additive_of(b2, target)});
  Generator g(22);
  const Array<double> f2 = randn<double>({L, S}, g).value();
  out.push_back({"float (L,S)", Mask(f2), false, 1.3, xt::broadcast(f2, target)});
  if (nd >= 3) {
    // (B, 1, L, S) / (B, L, S) per batch, and a key-padding style (B, [1,] 1, S) mask.
    Shape per_batch(nd, 1);
    per_batch[0] = target[0];
    per_batch[nd - 2] = L;
    per_batch[nd - 1] = S;
    const BoolArray bb = random_bool(per_batch, 23);
    out.push_back({"bool " + shape_str(per_batch), Mask(bb), false, std::nullopt, additive_of(bb, target)});
    Shape padding = per_batch;
    padding[nd - 2] = 1;
    const BoolArray bp = random_bool(padding, 24);
    out.push_back({"bool " + shape_str(padding), Mask(bp), false, std::nullopt, additive_of(bp, target)});
    const Array<double> ff = randn<double>(target, g).value();
    out.push_back({"float " + shape_str(target), Mask(ff), false, std::nullopt, ff});
  }
  return out;
}

double default_scale(const Shape& q) { return 1.0 / std::sqrt(static_cast<double>(q.back())); }

}  // namespace

TEST(Attention, ForwardMatchesLoopReference) {
  for (const Case& c : kCases) {
    auto q = input(c.q, 1), k = input(c.k, 2), v = input(c.v, 3);
    for (const Variant& var : variants(c)) {
      SCOPED_TRACE(c.name + ", " + var.name);
      auto y = scaled_dot_product_attention(q, k, v, var.mask, 0.0, var.causal, var.scale);
      const Array<double> expected =
          reference(q.value(), k.value(), v.value(), var.additive, var.scale.value_or(default_scale(c.q)));
      EXPECT_LT(max_abs_diff(y.value(), expected), 1e-12);
    }
  }
}

TEST(Attention, GradcheckOverShapesAndMasks) {
  for (const Case& c : kCases) {
    for (const Variant& var : variants(c)) {
      SCOPED_TRACE(c.name + ", " + var.name);
      expect_gradcheck(
          [&var](const Inputs& in) {
            return scaled_dot_product_attention(in[0], in[1], in[2], var.mask, 0.0, var.causal, var.scale);
          },
          {input(c.q, 4), input(c.k, 5), input(c.v, 6)});
    }
  }
}

TEST(Attention, GradcheckWhenOnlySomeInputsRequireGrad) {
  const Case& c = kCases[2];
  const BoolArray mask = random_bool({c.q[0], 1, c.q[2], c.k[2]}, 7);
  for (std::size_t which = 0; which < 3; ++which) {
    SCOPED_TRACE("only input " + std::to_string(which));
    Inputs in = {input(c.q, 1), input(c.k, 2), input(c.v, 3)};
    for (std::size_t i = 0; i < 3; ++i) in[i].requires_grad_(i == which);
    expect_gradcheck(
        [&mask](const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], Mask(mask)); }, in);
  }
}

TEST(Attention, SelfAttentionWithOneTensorAsQKV) {
  expect_gradcheck([](const Inputs& in) { return scaled_dot_product_attention(in[0], in[0], in[0]); },
                   {input({2, 5, 4}, 8)});
  expect_gradcheck(
      [](const Inputs& in) { return scaled_dot_product_attention(in[0], in[0], in[0], {}, 0.0, true); },
      {input({2, 5, 4}, 9)});
}

TEST(Attention, FullyMaskedQueryRowGivesZerosAndFiniteGradients) {
  const Shape sq{2, 4, 3}, sk{2, 5, 3}, sv{2, 5, 2};
  BoolArray bmask = random_bool({2, 4, 5}, 10, 0.2);
  for (std::size_t j = 0; j < 5; ++j) {
    bmask(0, 1, j) = true;  // batch 0, query 1: every key masked
    bmask(1, 3, j) = true;
  }
  Array<double> fmask = xt::zeros<double>({2, 4, 5});
  for (std::size_t j = 0; j < 5; ++j) fmask(1, 0, j) = -kInf;
  for (const Mask& mask : {Mask(bmask), Mask(fmask)}) {
    SCOPED_TRACE(mask.is_bool() ? "bool" : "float");
    auto q = input(sq, 1), k = input(sk, 2), v = input(sv, 3);
    auto y = scaled_dot_product_attention(q, k, v, mask);
    const Array<double> add = mask.is_bool() ? additive_of(bmask, {2, 4, 5}) : fmask;
    EXPECT_LT(max_abs_diff(y.value(), reference(q.value(), k.value(), v.value(), add, default_scale(sq))), 1e-12);
    const std::vector<std::pair<std::size_t, std::size_t>> rows =
        mask.is_bool() ? std::vector<std::pair<std::size_t, std::size_t>>{{0, 1}, {1, 3}}
                       : std::vector<std::pair<std::size_t, std::size_t>>{{1, 0}};
    for (auto [b, i] : rows)
      for (std::size_t c = 0; c < 2; ++c) EXPECT_EQ(y.value()(b, i, c), 0.0);
    {
      DetectAnomalyGuard anomaly;  // throws on any NaN/Inf gradient
      y.backward(ones<double>(y.shape()));
    }
    for (const auto* t : {&q, &k, &v})
      for (double g : t->grad()) EXPECT_TRUE(std::isfinite(g));
    for (auto [b, i] : rows)
      for (std::size_t e = 0; e < 3; ++e) EXPECT_EQ(q.grad()(b, i, e), 0.0);
    expect_gradcheck([&mask](const Inputs& in) { return scaled_dot_product_attention(in[0], in[1], in[2], mask); },
                     {input(sq, 4), input(sk, 5), input(sv, 6)});
  }
}

TEST(Attention, BoolMaskEqualsFloatMaskWithMinusInfinity) {
  const Shape sq{2, 3, 4, 5}, sk{2, 3, 6, 5}, sv{2, 3, 6, 3};
  const BoolArray bmask = random_bool({2, 1, 4, 6}, 11, 0.4);
  Array<double> fmask = empty_array<double>({2, 1, 4, 6});
  for (std::size_t n = 0; n < fmask.size(); ++n) fmask.data()[n] = bmask.data()[n] ? -kInf : 0.0;
  auto q1 = input(sq, 1), k1 = input(sk, 2), v1 = input(sv, 3);
  auto q2 = input(sq, 1), k2 = input(sk, 2), v2 = input(sv, 3);
  auto yb = scaled_dot_product_attention(q1, k1, v1, Mask(bmask));
  auto yf = scaled_dot_product_attention(q2, k2, v2, Mask(fmask));
  EXPECT_EQ(yb.value(), yf.value());
  Generator g(12);
  const Array<double> u = randn<double>(yb.shape(), g).value();
  yb.backward(Tensor<double>(u));
  yf.backward(Tensor<double>(u));
  EXPECT_EQ(q1.grad(), q2.grad());
  EXPECT_EQ(k1.grad(), k2.grad());
  EXPECT_EQ(v1.grad(), v2.grad());
}

TEST(Attention, ConstantFloatMaskOnlyShiftsTheLogits) {
  const Shape sq{3, 4, 5}, sk{3, 7, 5}, sv{3, 7, 2};
  auto q = input(sq, 1), k = input(sk, 2), v = input(sv, 3);
  auto plain = scaled_dot_product_attention(q, k, v);
  for (double c : {1.0, -3.5}) {
    auto shifted = scaled_dot_product_attention(q, k, v, Mask(Array<double>(xt::ones<double>({4, 7}) * c)));
    EXPECT_LT(max_abs_diff(plain.value(), shifted.value()), 1e-14);
  }
  // A non-constant mask does change the output (the mask is really applied).
  Generator g(13);
  auto varied = scaled_dot_product_attention(q, k, v, Mask(randn<double>({4, 7}, g).value()));
  EXPECT_GT(max_abs_diff(plain.value(), varied.value()), 1e-3);
}

TEST(Attention, CausalOutputIgnoresLaterKeysAndValues) {
  const std::size_t L = 5, S = 5;
  auto q = input({2, L, 4}, 1), k = input({2, S, 4}, 2), v = input({2, S, 3}, 3);
  const Array<double> base = scaled_dot_product_attention(q, k, v, {}, 0.0, true).value();
  for (std::size_t t = 1; t < S; ++t) {
    SCOPED_TRACE("changed key/value " + std::to_string(t));
    Array<double> k2 = k.value(), v2 = v.value();
    for (std::size_t b = 0; b < 2; ++b) {
      for (std::size_t e = 0; e < 4; ++e) k2(b, t, e) += 1.0 + e;
      for (std::size_t e = 0; e < 3; ++e) v2(b, t, e) -= 2.0;
    }
    const Array<double> y =
        scaled_dot_product_attention(Tensor<double>(q.value()), Tensor<double>(k2), Tensor<double>(v2), {}, 0.0, true)
            .value();
    for (std::size_t b = 0; b < 2; ++b)
      for (std::size_t i = 0; i < L; ++i)
        for (std::size_t c = 0; c < 3; ++c) {
          if (i < t) EXPECT_EQ(y(b, i, c), base(b, i, c)) << "query " << i << " saw key " << t;
          else EXPECT_NE(y(b, i, c), base(b, i, c)) << "query " << i << " did not see key " << t;
        }
  }
}

TEST(Attention, IsCausalEqualsAnExplicitLowerTriangularBoolMask) {
  for (auto [L, S] : {std::pair<std::size_t, std::size_t>{5, 5}, {3, 6}, {6, 3}}) {
    SCOPED_TRACE(std::to_string(L) + "x" + std::to_string(S));
    auto q = input({2, 2, L, 4}, 1), k = input({2, 2, S, 4}, 2), v = input({2, 2, S, 3}, 3);
    auto q2 = input({2, 2, L, 4}, 1), k2 = input({2, 2, S, 4}, 2), v2 = input({2, 2, S, 3}, 3);
    auto yc = scaled_dot_product_attention(q, k, v, {}, 0.0, true);
    auto ym = scaled_dot_product_attention(q2, k2, v2, Mask(causal_bool(L, S)));
    EXPECT_EQ(yc.value(), ym.value());
    const Array<double> u = xt::ones<double>(yc.shape());
    yc.backward(Tensor<double>(u));
    ym.backward(Tensor<double>(u));
    EXPECT_EQ(q.grad(), q2.grad());
    EXPECT_EQ(k.grad(), k2.grad());
    EXPECT_EQ(v.grad(), v2.grad());
  }
}

TEST(Attention, DropoutGradcheckWithAReseededGenerator) {
  const Case& c = kCases[2];
  const BoolArray mask = random_bool({c.q[2], c.k[2]}, 14);
  for (const Mask& m : {Mask(), Mask(mask)}) {
    SCOPED_TRACE(m.empty() ? "no mask" : "bool mask");
    expect_gradcheck(
        [&m](const Inputs& in) {
          Generator g(5);
          return scaled_dot_product_attention(in[0], in[1], in[2], m, 0.3, false, std::nullopt, false, &g);
        },
        {input(c.q, 1), input(c.k, 2), input(c.v, 3)});
  }
  expect_gradcheck(
      [](const Inputs& in) {
        Generator g(6);
        return scaled_dot_product_attention(in[0], in[1], in[2], {}, 0.3, true, std::nullopt, false, &g);
      },
      {input({3, 4, 5}, 7), input({3, 4, 5}, 8), input({3, 4, 2}, 9)});
}

// With v = I (S x S) the output is the dropped probabilities themselves: each entry is either 0
// or P / (1 - p), where P is the output without dropout.
TEST(Attention, DropoutZeroesProbabilitiesAndScalesTheRest) {
  const std::size_t B = 8, L = 32, S = 64;
  auto q = input({B, L, 8}, 1), k = input({B, S, 8}, 2);
  Tensor<double> eye(xt::broadcast(xt::eye<double>(S), std::vector<std::size_t>{B, S, S}));
  const Array<double> P = scaled_dot_product_attention(q, k, eye).value();
  for (double p : {0.1, 0.5}) {
    SCOPED_TRACE("p=" + std::to_string(p));
    Generator g(15);
    const Array<double> y = scaled_dot_product_attention(q, k, eye, {}, p, false, std::nullopt, false, &g).value();
    std::size_t zeros = 0;
    double worst = 0;
    for (std::size_t n = 0; n < y.size(); ++n) {
      ASSERT_GT(P.data()[n], 0.0);
      if (y.data()[n] == 0.0) ++zeros;
      else worst = std::max(worst, std::abs(y.data()[n] * (1 - p) / P.data()[n] - 1));
    }
    const double frac = static_cast<double>(zeros) / y.size();
    EXPECT_LE(std::abs(frac - p), 5 * std::sqrt(p * (1 - p) / y.size())) << "dropped fraction " << frac;
    EXPECT_LT(worst, 1e-12);
    // Same seed, same mask; another seed, another.
    Generator same(15), other(16);
    EXPECT_EQ(y, scaled_dot_product_attention(q, k, eye, {}, p, false, std::nullopt, false, &same).value());
    EXPECT_NE(y, scaled_dot_product_attention(q, k, eye, {}, p, false, std::nullopt, false, &other).value());
  }
  // p = 1 drops everything; p = 0 draws nothing.
  Generator g(17);
  const Array<double> dropped_all =
      scaled_dot_product_attention(q, k, eye, {}, 1.0, false, std::nullopt, false, &g).value();
  for (double x : dropped_all) EXPECT_EQ(x, 0.0);
  const GeneratorState before = g.get_state();
  EXPECT_EQ(P, scaled_dot_product_attention(q, k, eye, {}, 0.0, false, std::nullopt, false, &g).value());
  EXPECT_EQ(g.get_state(), before);
}

TEST(Attention, FloatMatchesDouble) {
  const Case& c = kCases[2];
  auto qd = input(c.q, 1), kd = input(c.k, 2), vd = input(c.v, 3);
  Tensor<float> qf(xt::cast<float>(qd.value()), true), kf(xt::cast<float>(kd.value()), true),
      vf(xt::cast<float>(vd.value()), true);
  const BoolArray mask = random_bool({c.q[2], c.k[2]}, 18);
  auto yd = scaled_dot_product_attention(qd, kd, vd, Mask(mask));
  auto yf = scaled_dot_product_attention(qf, kf, vf, AttnMask<float>(mask));
  EXPECT_LT(max_abs_diff(yf.value(), yd.value()), 1e-5);
  yd.backward(ones<double>(yd.shape()));
  yf.backward(ones<float>(yf.shape()));
  EXPECT_LT(max_abs_diff(qf.grad(), qd.grad()), 1e-5);
  EXPECT_LT(max_abs_diff(kf.grad(), kd.grad()), 1e-5);
  EXPECT_LT(max_abs_diff(vf.grad(), vd.grad()), 1e-5);
}

TEST(Attention, IsOneFusedNodeAndNoGradBuildsNone) {
  auto q = input({2, 3, 4}, 1), k = input({2, 5, 4}, 2), v = input({2, 5, 3}, 3);
  auto y = scaled_dot_product_attention(q, k, v);
  EXPECT_STREQ(y.op(), "scaled_dot_product_attention");
  ASSERT_EQ(y.node()->inputs.size(), 3u);
  EXPECT_EQ(y.node()->inputs[0], q.node());
  EXPECT_EQ(y.node()->inputs[1], k.node());
  EXPECT_EQ(y.node()->inputs[2], v.node());
  NoGradGuard guard;
  auto z = scaled_dot_product_attention(q, k, v);
  EXPECT_FALSE(z.requires_grad());
  EXPECT_EQ(z.value(), y.value());
}

TEST(Attention, BadShapesAndArgumentsThrowNamingTheShapes) {
  const char* op = "scaled_dot_product_attention";
  auto z = [](const Shape& s) { return zeros<double>(s); };
  XGRAD_EXPECT_THROW_MSG(scaled_dot_product_attention(z({4}), z({4, 3}), z({4, 3})), op, "q (4)", "k (4, 3)");
  XGRAD_EXPECT_THROW_MSG(scaled_dot_product_attention(z({2, 3, 4}), z({3, 4}), z({3, 4})), op, "(2, 3, 4)", "(3, 4)");
  XGRAD_EXPECT_THROW_MSG(scaled_dot_product_attention(z({2, 3, 4}), z({3, 5, 4}), z({3, 5, 4})), op,
                         "leading dims", "(2, 3, 4)", "(3, 5, 4)");
  XGRAD_EXPECT_THROW_MSG(scaled_dot_product_attention(z({3, 4}), z({5, 3}), z({5, 2})), op, "E", "q (3, 4)",
                         "k (5, 3)", "v (5, 2)");
  XGRAD_EXPECT_THROW_MSG(scaled_dot_product_attention(z({3, 4}), z({5, 4}), z({6, 2})), op, "S", "k (5, 4)",
                         "v (6, 2)");
  XGRAD_EXPECT_THROW_MSG(scaled_dot_product_attention(z({3, 0}), z({5, 0}), z({5, 2})), op, "E", "(3, 0)");
  const Shape sq{2, 3, 4}, sk{2, 5, 4}, sv{2, 5, 2};
  XGRAD_EXPECT_THROW_MSG(scaled_dot_product_attention(z(sq), z(sk), z(sv), Mask(BoolArray(xt::zeros<bool>({3, 4})))),
                         op, "attn_mask", "(3, 4)", "(2, 3, 5)", "q (2, 3, 4)", "k (2, 5, 4)", "v (2, 5, 2)");
  XGRAD_EXPECT_THROW_MSG(scaled_dot_product_attention(z(sq), z(sk), z(sv), Mask(Array<double>(xt::zeros<double>({1, 2, 3, 5})))),
                         op, "attn_mask", "(1, 2, 3, 5)", "(2, 3, 5)");
  XGRAD_EXPECT_THROW_MSG(scaled_dot_product_attention(z(sq), z(sk), z(sv), Mask(causal_bool(3, 5)), 0.0, true), op,
                         "attn_mask", "is_causal");
  XGRAD_EXPECT_THROW_MSG(scaled_dot_product_attention(z(sq), z(sk), z(sv), {}, 1.5), op, "dropout_p", "1.5");
  XGRAD_EXPECT_THROW_MSG(scaled_dot_product_attention(z(sq), z(sk), z(sv), {}, -0.5), op, "dropout_p", "-0.5");
}

TEST(Attention, EmptyKeysGiveZeroOutputAndZeroGradients) {
  // S = 0: every query is fully masked.
  auto q = input({2, 3, 4}, 1);
  Tensor<double> k(xt::zeros<double>({2, 0, 4}), true), v(xt::zeros<double>({2, 0, 2}), true);
  auto y = scaled_dot_product_attention(q, k, v);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 2}));
  for (double x : y.value()) EXPECT_EQ(x, 0.0);
  y.backward(ones<double>({2, 3, 2}));
  for (double g : q.grad()) EXPECT_EQ(g, 0.0);
  EXPECT_EQ(k.grad().shape(), k.value().shape());
}
