// Grouped-query attention, scaled_dot_product_attention(..., enable_gqa=true) (PyTorch 2.5's): k and
// v with Hkv heads at dim -3 against q's Hq = G Hkv. On both paths (materialized, tiled with blocks
// that cross the shapes' edges): values and gradients equal those of the same op on k and v
// repeat_interleave'd along dim -3, the KV heads' gradients being the sums over their query heads
// (no mask, bool and float masks, causal with L < S and L > S, dropout with one seed on both sides,
// the scale, leading dims before the heads, multi-query attention); the results do not depend on
// the thread count; create_graph gives the same gradients and Hessian-vector products as the
// repeated form; the errors; and PyTorch's numbers (tests/fixtures/sdpa_gqa_*.json).
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <xgrad/ops/attention/attention_kernels.hpp>

#include "fixture.hpp"
#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

// Runs the attention op on `path` with blocks of (query_rows, key_rows) while it lives.
struct PathGuard {
  AttentionPath before = get_attention_path();
  explicit PathGuard(AttentionPath path, std::size_t query_rows = 0, std::size_t key_rows = 0) {
    set_attention_path(path);
    detail::set_attention_tiles(query_rows, key_rows);
  }
  ~PathGuard() {
    set_attention_path(before);
    detail::set_attention_tiles(0, 0);
  }
};

// The paths and blocks every comparison runs on.
struct Path {
  const char* name;
  AttentionPath path;
  std::size_t query_rows, key_rows;
};
const Path kPaths[] = {{"materialized", AttentionPath::Materialized, 0, 0},
                       {"tiled, blocks 2 x 3", AttentionPath::Tiled, 2, 3},
                       {"tiled, default blocks", AttentionPath::Tiled, 0, 0}};

// x (lead..., Hkv, S, d) -> (lead..., Hkv G, S, d): head h of the result is head h / G of x
// (torch.repeat_interleave(x, G, dim=-3)).
template <class T>
Array<T> repeat_heads(const Array<T>& x, std::size_t G) {
  Shape s = shape_of(x);
  const std::size_t block = s[s.size() - 2] * s[s.size() - 1], heads = s[s.size() - 3];
  s[s.size() - 3] *= G;
  Array<T> r = Array<T>::from_shape(s);
  for (std::size_t out = 0; out < r.size() / block; ++out) {
    const std::size_t o = out / (heads * G), h = out % (heads * G) / G;
    std::copy_n(x.data() + (o * heads + h) * block, block, r.data() + out * block);
  }
  return r;
}

// The reverse's gradient: g (lead..., Hkv G, S, d) -> (lead..., Hkv, S, d), the sum of each group.
template <class T>
Array<T> sum_heads(const Array<T>& g, std::size_t G) {
  Shape s = shape_of(g);
  const std::size_t block = s[s.size() - 2] * s[s.size() - 1];
  s[s.size() - 3] /= G;
  Array<T> r = xt::zeros<T>(s);
  for (std::size_t in = 0; in < g.size() / block; ++in)
    for (std::size_t e = 0; e < block; ++e) r.data()[in / G * block + e] += g.data()[in * block + e];
  return r;
}

template <class T>
struct Case {
  std::string name;
  Shape q, k, v;  // k and v: G times fewer heads at dim -3 than q
  AttnMask<T> mask = {};
  bool causal = false;
  double p = 0.0;  // dropout
  std::optional<double> scale = std::nullopt;

  std::size_t group() const { return q[q.size() - 3] / k[k.size() - 3]; }
};

template <class T>
std::vector<Case<T>> cases() {
  Generator g(3);
  BoolArray bool_ls = BoolArray::from_shape({5, 6});
  for (auto& x : bool_ls) x = g.uniform() < 0.3;
  std::fill(bool_ls.begin() + 2 * 6, bool_ls.begin() + 3 * 6, true);  // query 2 sees no key
  Array<T> per_head = randn<T>({2, 4, 5, 6}, g).value();              // a float mask per query head
  const Shape q{2, 4, 5, 3}, k{2, 2, 6, 3}, v{2, 2, 6, 4};
  return {
      {"no mask, G = 2", q, k, v},
      {"bool (L, S), a fully masked row", q, k, v, bool_ls},
      {"float (N, Hq, L, S)", q, k, v, per_head},
      {"causal, L < S, multi-query (Hkv = 1)", {2, 3, 5, 3}, {2, 1, 7, 3}, {2, 1, 7, 2}, {}, true},
      {"causal, L > S, G = 3", {1, 6, 8, 3}, {1, 2, 5, 3}, {1, 2, 5, 3}, {}, true},
      {"dropout 0.3, bool mask", q, k, v, bool_ls, false, 0.3},
      {"dropout 0.5, causal, scale 0.3", q, k, v, {}, true, 0.5, 0.3},
      {"leading dims (2, 3) before the heads", {2, 3, 4, 3, 2}, {2, 3, 2, 4, 2}, {2, 3, 2, 4, 3}},
      {"rank 3: (Hq, L, E) against (1, S, E)", {4, 3, 2}, {1, 5, 2}, {1, 5, 2}, {}, true},
  };
}

// enable_gqa on `path`: inputs from Generator(11), dropout from Generator(5).
template <class T>
std::vector<Array<T>> run_gqa(const Case<T>& c, const Path& path) {
  PathGuard guard(path.path, path.query_rows, path.key_rows);
  Generator g(11);
  Tensor<T> q = randn<T>(c.q, g, true), k = randn<T>(c.k, g, true), v = randn<T>(c.v, g, true);
  Generator drop(5);
  const Tensor<T> y = scaled_dot_product_attention(q, k, v, c.mask, c.p, c.causal, c.scale, true, &drop);
  Generator up(99);
  sum(y * randn<T>(y.shape(), up)).backward();
  return {y.value(), q.grad(), k.grad(), v.grad()};
}

// The same inputs with k and v repeated to Hq heads (leaves of their own), without enable_gqa; the
// KV heads' gradients summed over each group by hand.
template <class T>
std::vector<Array<T>> run_repeated(const Case<T>& c, const Path& path) {
  PathGuard guard(path.path, path.query_rows, path.key_rows);
  Generator g(11);
  Tensor<T> q = randn<T>(c.q, g, true), k = randn<T>(c.k, g), v = randn<T>(c.v, g);
  const std::size_t G = c.group();
  Tensor<T> k_rep(repeat_heads(k.value(), G), true), v_rep(repeat_heads(v.value(), G), true);
  Generator drop(5);
  const Tensor<T> y = scaled_dot_product_attention(q, k_rep, v_rep, c.mask, c.p, c.causal, c.scale, false, &drop);
  Generator up(99);
  sum(y * randn<T>(y.shape(), up)).backward();
  return {y.value(), q.grad(), sum_heads(k_rep.grad(), G), sum_heads(v_rep.grad(), G)};
}

// max |got - want| <= rel max |want|, for the output and each gradient.
template <class T>
void expect_close(const std::vector<Array<T>>& got, const std::vector<Array<T>>& want, double rel) {
  const char* names[] = {"output", "grad q", "grad k", "grad v"};
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    double scale = 0;
    for (T x : want[i]) scale = std::max(scale, std::abs(static_cast<double>(x)));
    EXPECT_LE(max_abs_diff(got[i], want[i]), rel * scale) << names[i];
  }
}

template <class T>
void expect_equals_repeated(double rel) {
  for (const Case<T>& c : cases<T>()) {
    SCOPED_TRACE(c.name);
    for (const Path& path : kPaths) {
      SCOPED_TRACE(path.name);
      expect_close(run_gqa(c, path), run_repeated(c, path), rel);
    }
  }
}

}  // namespace

TEST(AttentionGqa, EqualsTheOpOnRepeatedKeysAndValuesInDouble) { expect_equals_repeated<double>(1e-13); }

TEST(AttentionGqa, EqualsTheOpOnRepeatedKeysAndValuesInFloat) { expect_equals_repeated<float>(1e-6); }

// The paths agree with each other (each is checked against its repeated form above).
TEST(AttentionGqa, PathsAgree) {
  for (const Case<double>& c : cases<double>()) {
    SCOPED_TRACE(c.name);
    const auto want = run_gqa(c, kPaths[0]);
    expect_close(run_gqa(c, kPaths[1]), want, 1e-12);
    expect_close(run_gqa(c, kPaths[2]), want, 1e-12);
  }
}

// Hq == Hkv: enable_gqa changes nothing, bit for bit.
TEST(AttentionGqa, EqualHeadsIgnoreTheFlag) {
  const Case<double> c{"equal heads", {2, 3, 4, 3}, {2, 3, 5, 3}, {2, 3, 5, 2}, {}, true, 0.2};
  for (const Path& path : kPaths) {
    SCOPED_TRACE(path.name);
    PathGuard guard(path.path, path.query_rows, path.key_rows);
    std::vector<std::vector<Array<double>>> runs;
    for (bool gqa : {false, true}) {
      Generator g(11), drop(5), up(99);
      T64 q = randn<double>(c.q, g, true), k = randn<double>(c.k, g, true), v = randn<double>(c.v, g, true);
      const T64 y = scaled_dot_product_attention(q, k, v, {}, c.p, c.causal, std::nullopt, gqa, &drop);
      sum(y * randn<double>(y.shape(), up)).backward();
      runs.push_back({y.value(), q.grad(), k.grad(), v.grad()});
    }
    for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(runs[0][i], runs[1][i]) << i;
  }
}

// The KV heads' gradients sum their query heads in one order: the same bits at 1 and 3 threads.
TEST(AttentionGqa, ThreadCountDoesNotChangeTheResults) {
  ThreadCountGuard threads;
  const Case<double> c{"G = 4, causal, dropout", {3, 8, 9, 4}, {3, 2, 9, 4}, {3, 2, 9, 5}, {}, true, 0.2};
  for (const Path& path : kPaths) {
    SCOPED_TRACE(path.name);
    set_num_threads(1);
    const auto one = run_gqa(c, path);
    set_num_threads(3);
    const auto three = run_gqa(c, path);
    for (std::size_t i = 0; i < one.size(); ++i) EXPECT_EQ(one[i], three[i]) << i;
  }
}

// create_graph (the differentiable backward both paths carry): the same gradients as the fused
// kernels, and the same Hessian-vector product as the op on k and v repeated by differentiable ops.
TEST(AttentionGqa, SecondOrderEqualsTheRepeatedForm) {
  const Shape sq{2, 4, 3, 2}, sk{2, 2, 5, 2};
  Generator g(21);
  const Array<double> xq = randn<double>(sq, g).value(), xk = randn<double>(sk, g).value(),
                      xv = randn<double>(sk, g).value(), r = randn<double>({2, 4, 3, 2}, g).value();
  const std::vector<Array<double>> u = {randn<double>(sq, g).value(), randn<double>(sk, g).value(),
                                        randn<double>(sk, g).value()};
  // k (2, 2, 5, 2) -> (2, 4, 5, 2) with differentiable ops
  auto repeat = [](const T64& x) { return reshape(expand(unsqueeze(x, 2), {2, 2, 2, 5, 2}), {2, 4, 5, 2}); };
  for (const Path& path : kPaths) {
    SCOPED_TRACE(path.name);
    PathGuard guard(path.path, path.query_rows, path.key_rows);
    std::vector<std::vector<Array<double>>> grads, hvps;
    for (bool gqa : {true, false}) {
      const Inputs in = {T64(xq, true), T64(xk, true), T64(xv, true)};
      const T64 o = gqa ? scaled_dot_product_attention<double>(in[0], in[1], in[2], {}, 0.0, true, std::nullopt, true)
                        : scaled_dot_product_attention<double>(in[0], repeat(in[1]), repeat(in[2]), {}, 0.0, true);
      const T64 loss = sum(tanh(o) * T64(r));
      const Inputs gr = autograd::grad({loss}, in, {}, std::nullopt, /*create_graph=*/true);
      T64 gu = sum(gr[0] * T64(u[0])) + sum(gr[1] * T64(u[1])) + sum(gr[2] * T64(u[2]));
      const Inputs hu = autograd::grad({gu}, in);
      grads.push_back({gr[0].value(), gr[1].value(), gr[2].value()});
      hvps.push_back({hu[0].value(), hu[1].value(), hu[2].value()});
      if (gqa) {  // the first-order kernels' gradients
        const Inputs fresh = {T64(xq, true), T64(xk, true), T64(xv, true)};
        const Inputs fused = autograd::grad({sum(tanh(scaled_dot_product_attention<double>(
                                                     fresh[0], fresh[1], fresh[2], {}, 0.0, true, std::nullopt, true)) *
                                                 T64(r))},
                                            fresh);
        for (std::size_t i = 0; i < 3; ++i) EXPECT_LT(max_abs_diff(gr[i].value(), fused[i].value()), 1e-12) << i;
      }
    }
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_LT(max_abs_diff(grads[0][i], grads[1][i]), 1e-12) << "gradient " << i;
      EXPECT_LT(max_abs_diff(hvps[0][i], hvps[1][i]), 1e-12) << "Hessian-vector product " << i;
    }
  }
}

TEST(AttentionGqa, BadHeadCountsThrowNamingTheSizes) {
  const char* op = "scaled_dot_product_attention";
  auto z = [](const Shape& s) { return zeros<double>(s); };
  // Without enable_gqa the heads must match; the message suggests the flag when it would apply.
  XGRAD_EXPECT_THROW_MSG(scaled_dot_product_attention(z({2, 4, 3, 2}), z({2, 2, 5, 2}), z({2, 2, 5, 2})), op,
                         "leading dims", "q has 4 heads", "k and v 2", "q (2, 4, 3, 2)", "k (2, 2, 5, 2)",
                         "enable_gqa=true");
  const std::string no_hint = error_of([&] {
    scaled_dot_product_attention(z({2, 3, 3, 2}), z({2, 2, 5, 2}), z({2, 2, 5, 2}));
  });
  EXPECT_NE(no_hint.find("q has 3 heads"), std::string::npos) << no_hint;
  EXPECT_EQ(no_hint.find("enable_gqa"), std::string::npos) << no_hint;
  // With it: a multiple, the same for k and v, a head dim to group, equal dims before the heads.
  XGRAD_EXPECT_THROW_MSG(scaled_dot_product_attention(z({2, 3, 3, 2}), z({2, 2, 5, 2}), z({2, 2, 5, 2}), {}, 0.0, false,
                                                      std::nullopt, true),
                         op, "enable_gqa", "multiple", "3 and 2", "q (2, 3, 3, 2)");
  XGRAD_EXPECT_THROW_MSG(scaled_dot_product_attention(z({2, 4, 3, 2}), z({2, 2, 5, 2}), z({2, 1, 5, 2}), {}, 0.0, false,
                                                      std::nullopt, true),
                         op, "leading dims", "k (2, 2, 5, 2)", "v (2, 1, 5, 2)");
  XGRAD_EXPECT_THROW_MSG(scaled_dot_product_attention(z({2, 4, 3, 2}), z({3, 2, 5, 2}), z({3, 2, 5, 2}), {}, 0.0, false,
                                                      std::nullopt, true),
                         op, "leading dims", "q (2, 4, 3, 2)", "k (3, 2, 5, 2)");
  XGRAD_EXPECT_THROW_MSG(
      scaled_dot_product_attention(z({3, 2}), z({5, 2}), z({5, 2}), {}, 0.0, false, std::nullopt, true), op,
      "enable_gqa needs", "rank at least 3", "q (3, 2)");
}

// PyTorch's numbers (scripts/make_fixtures.py: sdpa_gqa_*): forward and gradients on both paths.
template <class T>
void expect_fixture(const char* name, double tol) {
  const Fixture f = load_fixture(name);
  for (const auto& item : f.config()["calls"].items()) {
    const std::string& call = item.key();
    const nlohmann::json& config = item.value();
    SCOPED_TRACE(call);
    const std::string p = call + ".";
    AttnMask<T> mask;
    if (f.has(p + "attn_mask")) mask = AttnMask<T>(f.array<T>(p + "attn_mask"));
    const std::optional<double> scale =
        config["scale"].is_null() ? std::nullopt : std::optional<double>(config["scale"].get<double>());
    for (const Path& path : kPaths) {
      SCOPED_TRACE(path.name);
      PathGuard guard(path.path, path.query_rows, path.key_rows);
      Tensor<T> q = f.tensor<T>(p + "q", true), k = f.tensor<T>(p + "k", true), v = f.tensor<T>(p + "v", true);
      const Tensor<T> y = scaled_dot_product_attention(q, k, v, mask, 0.0, config["is_causal"].get<bool>(), scale,
                                                       config["enable_gqa"].get<bool>());
      y.backward(f.tensor<T>(p + "grad_output"));
      EXPECT_LE(max_abs_diff(y.value(), f.array<T>(p + "output")), tol) << "output";
      EXPECT_LE(max_abs_diff(q.grad(), f.array<T>(p + "grad.q")), tol) << "grad.q";
      EXPECT_LE(max_abs_diff(k.grad(), f.array<T>(p + "grad.k")), tol) << "grad.k";
      EXPECT_LE(max_abs_diff(v.grad(), f.array<T>(p + "grad.v")), tol) << "grad.v";
    }
  }
}

TEST(AttentionGqa, MatchesPyTorchInDouble) { expect_fixture<double>("sdpa_gqa_float64", 1e-14); }

TEST(AttentionGqa, MatchesPyTorchInFloat) { expect_fixture<float>("sdpa_gqa_float32", 1e-6); }
