// Second derivatives of the attention op (create_graph; its differentiable backward is
// xgrad/ops/attention/attention_formula.cpp, one for both paths): Hessian-vector products of a loss through
// scaled_dot_product_attention agree between the tiled and the materialized path and with central
// differences of each path's fused first-order gradients (causal with dropout, float and bool
// masks with fully masked rows); nn.MultiheadAttention's layouts (attention_heads: packed or split
// projections, batch_first or not, key padding, need_weights, dropout) pass gradgradcheck. The
// registry's GradgradcheckList entries check scaled_dot_product_attention's own forms.
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <xgrad/ops/attention/attention_kernels.hpp>

#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

// Runs the attention op on `path` (tiny tiles, so that the tiled path crosses block edges) while
// it lives.
struct PathGuard {
  AttentionPath before = get_attention_path();
  explicit PathGuard(AttentionPath path) {
    set_attention_path(path);
    detail::set_attention_tiles(2, 3);
  }
  ~PathGuard() {
    set_attention_path(before);
    detail::set_attention_tiles(0, 0);
  }
};

Array<double> random_array(const Shape& shape, std::uint64_t seed) { return input(shape, seed).value(); }

// One scaled_dot_product_attention call: q (B, H, L, E), k and v (B, H, S, E), its options.
struct Case {
  Shape q, kv;
  AttnMask<double> mask;
  double dropout_p = 0.0;
  bool causal = false;
  std::optional<double> scale;
};

// At x = (q, k, v) and a direction u of the same shapes: the gradients of
// loss = sum(tanh(attention(q, k, v)) * R) and the Hessian-vector product H u.
struct Derivatives {
  std::vector<Array<double>> grad, hvp;
};

// With create_graph: the gradients, then H u = d/dx (grad . u).
Derivatives second_order(const Case& c, AttentionPath path, const std::vector<Array<double>>& x,
                         const std::vector<Array<double>>& u) {
  PathGuard guard(path);
  const Inputs in = {T64(x[0], true), T64(x[1], true), T64(x[2], true)};
  Generator gen(11);
  const T64 o =
      scaled_dot_product_attention<double>(in[0], in[1], in[2], c.mask, c.dropout_p, c.causal, c.scale, false, &gen);
  const T64 loss = sum(tanh(o) * T64(random_array(o.shape(), 5)));
  const Inputs g = autograd::grad({loss}, in, {}, std::nullopt, /*create_graph=*/true);
  T64 gu = sum(g[0] * T64(u[0]));
  for (std::size_t i = 1; i < 3; ++i) gu = gu + sum(g[i] * T64(u[i]));
  const Inputs hu = autograd::grad({gu}, in);
  Derivatives d;
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(g[i].requires_grad()) << "input " << i;
    d.grad.push_back(g[i].value());
    d.hvp.push_back(hu[i].value());
  }
  return d;
}

// Without create_graph (the fused kernels of `path`): the gradients at x + t u.
std::vector<Array<double>> first_order(const Case& c, AttentionPath path, const std::vector<Array<double>>& x,
                                       const std::vector<Array<double>>& u, double t) {
  PathGuard guard(path);
  Inputs in;
  for (std::size_t i = 0; i < 3; ++i) in.push_back(T64(Array<double>(x[i] + t * u[i]), true));
  Generator gen(11);
  const T64 o =
      scaled_dot_product_attention<double>(in[0], in[1], in[2], c.mask, c.dropout_p, c.causal, c.scale, false, &gen);
  const Inputs g = autograd::grad({sum(tanh(o) * T64(random_array(o.shape(), 5)))}, in);
  return {g[0].value(), g[1].value(), g[2].value()};
}

void expect_paths_agree(const Case& c) {
  const std::vector<Array<double>> x = {random_array(c.q, 1), random_array(c.kv, 2), random_array(c.kv, 3)};
  const std::vector<Array<double>> u = {random_array(c.q, 7), random_array(c.kv, 8), random_array(c.kv, 9)};
  const Derivatives tiled = second_order(c, AttentionPath::Tiled, x, u);
  const Derivatives materialized = second_order(c, AttentionPath::Materialized, x, u);
  const double h = 1e-5;
  for (AttentionPath path : {AttentionPath::Tiled, AttentionPath::Materialized}) {
    const std::vector<Array<double>> fused = first_order(c, path, x, u, 0.0);
    const std::vector<Array<double>> plus = first_order(c, path, x, u, h), minus = first_order(c, path, x, u, -h);
    const Derivatives& d = path == AttentionPath::Tiled ? tiled : materialized;
    for (std::size_t i = 0; i < 3; ++i) {
      // the create_graph gradients are the fused kernels' values
      EXPECT_LT(max_abs_diff(d.grad[i], fused[i]), 1e-12) << "input " << i;
      // H u against central differences of the fused gradients
      const Array<double> numeric = (plus[i] - minus[i]) / (2 * h);
      EXPECT_LT(max_abs_diff(d.hvp[i], numeric), 1e-7) << "input " << i;
    }
  }
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_LT(max_abs_diff(tiled.hvp[i], materialized.hvp[i]), 1e-10) << "input " << i;
    EXPECT_GT(max_abs_diff(tiled.hvp[i], Array<double>(0 * tiled.hvp[i])), 1e-3) << "input " << i << ": H u is 0";
  }
}

}  // namespace

TEST(CreateGraphAttention, CausalWithDropoutHessianVectorProductsAgreeOnBothPaths) {
  Case c;
  c.q = {2, 2, 5, 3};
  c.kv = {2, 2, 7, 3};
  c.causal = true;
  c.dropout_p = 0.25;
  expect_paths_agree(c);
}

TEST(CreateGraphAttention, FloatMaskedHessianVectorProductsAgreeOnBothPaths) {
  // (L, S) = (5, 4): -inf entries, a row with every key at -inf (P = 0), finite offsets; a scale
  Array<double> mask = random_array({5, 4}, 4);
  const double neg_inf = -std::numeric_limits<double>::infinity();
  mask(0, 1) = neg_inf;
  mask(3, 2) = neg_inf;
  for (std::size_t j = 0; j < 4; ++j) mask(2, j) = neg_inf;
  Case c;
  c.q = {2, 5, 3};
  c.kv = {2, 4, 3};
  c.mask = mask;
  c.scale = 0.7;
  expect_paths_agree(c);
}

TEST(CreateGraphAttention, BoolMaskedHessianVectorProductsAgreeOnBothPaths) {
  // (H, L, S) broadcast over B: a fully masked row in head 1
  BoolArray mask = full_array<bool>(Shape{2, 4, 6}, false, "test");
  mask(0, 0, 3) = mask(0, 2, 0) = mask(1, 3, 5) = true;
  for (std::size_t j = 0; j < 6; ++j) mask(1, 1, j) = true;
  Case c;
  c.q = {2, 2, 4, 3};
  c.kv = {2, 2, 6, 3};
  c.mask = mask;
  expect_paths_agree(c);
}

namespace {

// attention_heads' node itself: with need_weights its outputs are views of the node's value
// [O | W] (narrow, permute); the check reads that value, so that it covers the attention formula's
// reading of dW without depending on the views' own formulas.
T64 heads_node_value(const std::pair<T64, T64>& out, bool need_weights) {
  return need_weights ? T64(out.first.node()->inputs.at(0)) : out.first;
}

struct HeadsCase {
  std::string name;
  std::vector<Shape> projections;
  std::size_t heads = 1;
  bool batch_first = true;
  bool need_weights = false;
  double dropout_p = 0.0;
  bool causal = false;
  AttnMask<double> attn_mask, key_padding_mask;
};

void expect_heads_gradgradcheck(const HeadsCase& c) {
  SCOPED_TRACE(c.name);
  Inputs in;
  for (std::size_t i = 0; i < c.projections.size(); ++i) in.push_back(input(c.projections[i], 20 + i));
  const std::size_t N = c.projections[0][c.batch_first ? 0 : 1];
  const std::size_t L = c.projections[0][c.batch_first ? 1 : 0], S = c.projections.back()[c.batch_first ? 1 : 0];
  for (AttentionPath path : {AttentionPath::Materialized, AttentionPath::Tiled}) {
    if (c.need_weights && path == AttentionPath::Tiled) continue;  // need_weights runs the materialized path
    const GradcheckFunction f = [&](const Inputs& x) {
      PathGuard guard(path);
      Generator gen(3);
      detail::AttentionArgs<double> args;
      args.mask =
          detail::normalize_attention_mask<double>({N, c.heads, L, S}, c.attn_mask, c.key_padding_mask, c.causal);
      args.dropout_p = c.dropout_p;
      args.need_weights = c.need_weights;
      args.generator = &gen;
      return heads_node_value(detail::attention_heads<double>(x, c.heads, c.batch_first, args), c.need_weights);
    };
    const GradcheckResult r = gradgradcheck(f, in);
    EXPECT_TRUE(r.passed) << (path == AttentionPath::Tiled ? "tiled\n" : "materialized\n") << r.summary();
  }
}

}  // namespace

TEST(CreateGraphAttention, AttentionHeadsLayoutsPassGradgradcheck) {
  const double neg_inf = -std::numeric_limits<double>::infinity();
  // batch_first, one packed qkv (N, L, 3E), E = 2 heads of 2; key padding (N, S); weights; dropout
  BoolArray padding = full_array<bool>(Shape{2, 3}, false, "test");
  padding(1, 2) = true;
  HeadsCase packed;
  packed.name = "packed qkv, batch_first, key padding, weights, dropout";
  packed.projections = {{2, 3, 12}};
  packed.heads = 2;
  packed.batch_first = true;
  packed.need_weights = true;
  packed.dropout_p = 0.3;
  packed.key_padding_mask = padding;
  expect_heads_gradgradcheck(packed);

  // (L, N, C): q (3, 2, 4) and kv (4, 2, 8); a float (L, S) mask with a fully masked row; weights
  Array<double> mask = random_array({3, 4}, 6);
  mask(0, 3) = neg_inf;
  for (std::size_t j = 0; j < 4; ++j) mask(1, j) = neg_inf;
  HeadsCase split;
  split.name = "q and kv, (L, N, C), float mask, weights";
  split.projections = {{3, 2, 4}, {4, 2, 8}};
  split.heads = 2;
  split.batch_first = false;
  split.need_weights = true;
  split.attn_mask = mask;
  expect_heads_gradgradcheck(split);

  // q, k, v apart, batch_first, one head, causal, L != S, no weights: both paths
  HeadsCase apart;
  apart.name = "q, k, v, batch_first, one head, causal";
  apart.projections = {{2, 4, 3}, {2, 3, 3}, {2, 3, 3}};
  apart.heads = 1;
  apart.batch_first = true;
  apart.need_weights = false;
  apart.causal = true;
  expect_heads_gradgradcheck(apart);

  // (L, N, C) with N = 1, packed, 3 heads, causal, dropout: both paths
  HeadsCase single;
  single.name = "packed qkv, (L, 1, C), 3 heads, causal, dropout";
  single.projections = {{4, 1, 18}};
  single.heads = 3;
  single.batch_first = false;
  single.need_weights = false;
  single.causal = true;
  single.dropout_p = 0.2;
  expect_heads_gradgradcheck(single);
}

TEST(CreateGraphAttention, AnInputChangedInPlaceIsRefusedByName) {
  // The differentiable backward reads q, k and v as the op saw them: k changed since is refused,
  // even when only v's gradient is asked for.
  for (AttentionPath path : {AttentionPath::Materialized, AttentionPath::Tiled}) {
    PathGuard guard(path);
    T64 q = input({2, 3, 2}, 1), k = input({2, 4, 2}, 2), v = input({2, 4, 2}, 3);
    const T64 loss = sum(tanh(scaled_dot_product_attention<double>(q, k, v)));
    k.mutable_value()(0, 0, 0) += 1.0;
    const std::string error = error_of([&] { autograd::grad({loss}, {v}, {}, std::nullopt, /*create_graph=*/true); });
    EXPECT_NE(error.find("modified by an inplace operation: scaled_dot_product_attention's input 1"), std::string::npos)
        << error;
  }
}

TEST(CreateGraphAttention, EmptyQueriesOrKeysGiveZeroSecondDerivatives) {
  // S = 0: every query sees no key (O = 0); L = 0: no query. The gradients are zeros, and so
  // are their derivatives.
  for (AttentionPath path : {AttentionPath::Materialized, AttentionPath::Tiled}) {
    for (const std::pair<std::size_t, std::size_t>& ls : {std::pair<std::size_t, std::size_t>{3, 0}, {0, 3}}) {
      PathGuard guard(path);
      const Inputs in = {input({2, ls.first, 2}, 1), input({2, ls.second, 2}, 2), input({2, ls.second, 2}, 3)};
      const T64 o = scaled_dot_product_attention<double>(in[0], in[1], in[2], {}, 0.0, true);
      const Inputs g = autograd::grad({sum(o * o)}, in, {}, std::nullopt, /*create_graph=*/true);
      T64 total = sum(g[0]) + sum(g[1]) + sum(g[2]);
      const Inputs h = autograd::grad({total}, in, {}, std::nullopt, false, /*allow_unused=*/true);
      for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(g[i].shape(), in[i].shape());
        for (double x : g[i].value()) EXPECT_EQ(x, 0.0);
        if (h[i].defined()) {
          for (double x : h[i].value()) EXPECT_EQ(x, 0.0);
        }
      }
    }
  }
}
