// Property tests of the attention op and the KV cache, from a fixed seed: random small shapes
// (B, H, L, S, E, Ev), every mask form (none, bool, float, -inf, large finite, fully masked rows,
// key padding, causal), NaN and Inf placed in q, k, v, the scale, and dropout. Each case checks
//   - the materialized path against a literal double-precision reference of the rule in
//     docs/reliability.md ("NaN and masking in attention"): values, NaN and Inf positions;
//   - the tiled path (small random blocks, so that tiles and skipped causal blocks are exercised)
//     against the materialized path: values and the gradients of q, k and v, NaN positions
//     identical;
//   - nn::forward_cached (prefill whole, in chunks, one position at a time) against a full causal
//     forward of the layer, with a NaN or Inf input position: values, NaN positions identical.
// Then the rule case by case on both paths (AttentionNaN). A few hundred cases, well under a second
// in Release.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <xgrad/nn/kv_cache.hpp>
#include <xgrad/ops/attention/attention_kernels.hpp>

#include "test_util.hpp"

using namespace xgrad;

namespace {

// Runs the attention op on `path` with blocks of (query_rows, key_rows) while it lives.
struct PathGuard {
  AttentionPath before = get_attention_path();
  PathGuard(AttentionPath path, std::size_t query_rows = 0, std::size_t key_rows = 0) {
    set_attention_path(path);
    detail::set_attention_tiles(query_rows, key_rows);
  }
  ~PathGuard() {
    set_attention_path(before);
    detail::set_attention_tiles(0, 0);
  }
};

std::size_t pick(Generator& g, std::size_t lo, std::size_t hi) {  // in [lo, hi]
  return lo + static_cast<std::size_t>(g.next_u64() % (hi - lo + 1));
}

// got and want agree: the same NaN positions, the same infinities, finite values within
// rel * max |finite want| (at least rel).
template <class T>
::testing::AssertionResult agree(const Array<T>& got, const Array<double>& want, double rel) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  double scale = 1;
  for (double w : want)
    if (std::isfinite(w)) scale = std::max(scale, std::abs(w));
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got.data()[i]), w = want.data()[i];
    const bool ok = std::isnan(w) ? std::isnan(g) : std::isinf(w) ? g == w : std::abs(g - w) <= rel * scale;
    if (!ok) return ::testing::AssertionFailure() << "element " << i << ": got " << g << ", want " << w;
  }
  return ::testing::AssertionSuccess();
}

template <class T>
Array<double> to_double(const Array<T>& a) {
  Array<double> r = Array<double>::from_shape(shape_of(a));
  std::copy(a.begin(), a.end(), r.begin());
  return r;
}

// ---- one random attention case --------------------------------------------------------------

template <class T>
struct AttentionCase {
  std::size_t B, H, L, S, E, Ev;
  Array<T> q, k, v;
  AttnMask<T> mask;  // broadcastable to (B, H, L, S)
  bool causal = false;
  double p = 0;  // dropout
  std::optional<double> scale;
  std::uint64_t seed = 0;  // dropout's generator
  std::string what;
};

template <class T>
AttentionCase<T> draw_case(Generator& g) {
  AttentionCase<T> c;
  c.B = pick(g, 1, 2), c.H = pick(g, 1, 2), c.L = pick(g, 1, 6), c.S = pick(g, 1, 7), c.E = pick(g, 1, 4),
  c.Ev = pick(g, 1, 4);
  c.q = randn<T>({c.B, c.H, c.L, c.E}, g).value();
  c.k = randn<T>({c.B, c.H, c.S, c.E}, g).value();
  c.v = randn<T>({c.B, c.H, c.S, c.Ev}, g).value();
  const T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
  const T big = g.uniform() < 0.5 ? T(-1e9) : std::numeric_limits<T>::lowest();
  const std::size_t L = c.L, S = c.S;
  switch (pick(g, 0, 8)) {
    case 0:
      c.what = "no mask";
      break;
    case 1: {
      c.what = "bool (L, S)";
      BoolArray m = BoolArray::from_shape({L, S});
      for (auto& x : m) x = g.uniform() < 0.3;
      c.mask = m;
      break;
    }
    case 2: {
      c.what = "bool (B, H, L, S), a fully masked row";
      BoolArray m = BoolArray::from_shape({c.B, c.H, L, S});
      for (auto& x : m) x = g.uniform() < 0.4;
      const std::size_t row = pick(g, 0, c.B * c.H * L - 1);
      std::fill(m.data() + row * S, m.data() + (row + 1) * S, true);
      c.mask = m;
      break;
    }
    case 3:
      c.what = "float (L, S)";
      c.mask = randn<T>({L, S}, g).value();
      break;
    case 4: {
      c.what = "float (1, H, L, S) with -inf, a fully masked row";
      Array<T> m = randn<T>({1, c.H, L, S}, g).value();
      for (auto& x : m)
        if (g.uniform() < 0.3) x = -inf;
      const std::size_t row = pick(g, 0, c.H * L - 1);
      std::fill(m.data() + row * S, m.data() + (row + 1) * S, -inf);
      c.mask = m;
      break;
    }
    case 5: {
      c.what = "float (L, S), large finite on some keys and on every key of a row";
      Array<T> m = zeros<T>({L, S}).value();
      for (auto& x : m)
        if (g.uniform() < 0.3) x = big;
      const std::size_t row = pick(g, 0, L - 1);
      std::fill(m.data() + row * S, m.data() + (row + 1) * S, big);
      c.mask = m;
      break;
    }
    case 6: {
      c.what = "key padding (B, 1, 1, S) bool, a fully padded sequence";
      BoolArray m = BoolArray::from_shape({c.B, 1, 1, S});
      for (auto& x : m) x = g.uniform() < 0.3;
      if (g.uniform() < 0.5) std::fill(m.data(), m.data() + S, true);
      c.mask = m;
      break;
    }
    case 7: {
      c.what = "key padding (B, 1, 1, S) float, large finite";
      Array<T> m = zeros<T>({c.B, 1, 1, S}).value();
      for (auto& x : m)
        if (g.uniform() < 0.4) x = big;
      c.mask = m;
      break;
    }
    default:
      c.what = "causal";
      c.causal = true;
      break;
  }
  // NaN / Inf placements
  auto place = [&](Array<T>& a, std::size_t rows, std::size_t cols, T x, const char* name) {
    const std::size_t r = pick(g, 0, c.B * c.H * rows - 1), col = pick(g, 0, cols - 1);
    a.data()[r * cols + col] = x;
    c.what += std::string(", ") + name + " at row " + std::to_string(r);
  };
  switch (pick(g, 0, 7)) {
    case 0:
      place(c.q, L, c.E, nan, "NaN in q");
      break;
    case 1:
      place(c.k, S, c.E, nan, "NaN in k");
      break;
    case 2:
      place(c.v, S, c.Ev, nan, "NaN in v");
      break;
    case 3:
      place(c.k, S, c.E, g.uniform() < 0.5 ? inf : -inf, "Inf in k");
      break;
    case 4:
      place(c.v, S, c.Ev, inf, "Inf in v");
      break;
    case 5:
      c.scale = std::numeric_limits<double>::quiet_NaN();
      c.what += ", scale NaN";
      break;
    default:
      break;  // none
  }
  if (g.uniform() < 0.3) {
    c.p = 0.3;
    c.seed = g.next_u64();
    c.what += ", dropout 0.3";
  }
  return c;
}

// The rule, literally, in double: A = scale q k^T with masked entries replaced by -inf (bool,
// causal, a float -inf) and the float mask added elsewhere; m = max of the non-NaN logits;
// e = exp(A - m); P = e / sum(e), 0 where e is 0; m = -inf: 0, NaN at NaN logits; O = sum over
// the keys with Pd = P D != 0 of Pd v.
template <class T>
Array<double> reference(const AttentionCase<T>& c) {
  const std::size_t B = c.B * c.H, L = c.L, S = c.S, E = c.E, Ev = c.Ev;
  const double scale = c.scale ? *c.scale : 1.0 / std::sqrt(static_cast<double>(E));
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const auto mask = detail::normalize_attention_mask<T>({c.B, c.H, L, S}, c.mask, {}, c.causal);
  detail::AttentionDropout dropout;
  if (c.p > 0) {
    Generator gen(c.seed);
    dropout = detail::AttentionDropout::draw(c.p, &gen);
  }
  Array<double> out = zeros<double>({c.B, c.H, L, Ev}).value();
  std::vector<double> a(S), d(S, 1.0);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < L; ++i) {
      for (std::size_t j = 0; j < S; ++j) {
        double s = 0;
        for (std::size_t e = 0; e < E; ++e)
          s += double(c.q.data()[(b * L + i) * E + e]) * double(c.k.data()[(b * S + j) * E + e]);
        // the score and the mask's addition rounded to T, as the op computes them (in float,
        // -1e9 + s is -1e9 for |s| < 32: a row of such keys is uniform)
        s = static_cast<T>(s * scale);
        bool masked = c.causal && j > i;
        if (!mask.mask.empty()) {
          const std::size_t at = (mask.per_batch() ? b * L * S : 0) + i * S + j;
          if (mask.mask.is_bool()) {
            masked = masked || mask.mask.bool_mask().data()[at];
          } else {
            const double f = mask.mask.float_mask().data()[at];
            masked = masked || f == -inf;
            s = static_cast<T>(static_cast<T>(s) + static_cast<T>(f));
          }
        }
        a[j] = masked ? -inf : s;
      }
      double m = -inf;
      for (double x : a)
        if (!std::isnan(x)) m = std::max(m, x);
      std::vector<double> p(S);
      if (m == -inf) {
        for (std::size_t j = 0; j < S; ++j) p[j] = std::isnan(a[j]) ? nan : 0.0;
      } else {
        double l = 0;
        for (std::size_t j = 0; j < S; ++j) l += (p[j] = std::exp(a[j] - m));
        for (std::size_t j = 0; j < S; ++j) p[j] = p[j] == 0 ? 0.0 : p[j] / l;
      }
      if (dropout.on()) dropout.multipliers(b, i, 0, S, d.data());
      for (std::size_t j = 0; j < S; ++j) {
        const double pd = p[j] * d[j];
        if (pd == 0) continue;
        for (std::size_t e = 0; e < Ev; ++e)
          out.data()[(b * L + i) * Ev + e] += pd * double(c.v.data()[(b * S + j) * Ev + e]);
      }
    }
  return out;
}

// The op on `path` (blocks qr x kr): the output, then the gradients of q, k and v (upstream: a
// fixed random array).
template <class T>
std::vector<Array<T>> run(const AttentionCase<T>& c, AttentionPath path, std::size_t qr = 0, std::size_t kr = 0) {
  PathGuard guard(path, qr, kr);
  std::vector<Tensor<T>> in{Tensor<T>(c.q, true), Tensor<T>(c.k, true), Tensor<T>(c.v, true)};
  Generator drop(c.seed);
  const Tensor<T> y = scaled_dot_product_attention(in[0], in[1], in[2], c.mask, c.p, c.causal, c.scale, false, &drop);
  Generator up(7);
  sum(y * randn<T>(y.shape(), up)).backward();
  return {y.value(), in[0].grad(), in[1].grad(), in[2].grad()};
}

template <class T>
double tolerance() {
  return std::is_same_v<T, double> ? 1e-10 : 2e-4;
}

template <class T>
void attention_properties(std::uint64_t seed, int cases) {
  Generator g(seed);
  const char* names[] = {"output", "dq", "dk", "dv"};
  for (int n = 0; n < cases; ++n) {
    const AttentionCase<T> c = draw_case<T>(g);
    SCOPED_TRACE("case " + std::to_string(n) + ": (B, H, L, S, E, Ev) = (" + std::to_string(c.B) + ", " +
                 std::to_string(c.H) + ", " + std::to_string(c.L) + ", " + std::to_string(c.S) + ", " +
                 std::to_string(c.E) + ", " + std::to_string(c.Ev) + "), " + c.what);
    const auto want = run(c, AttentionPath::Materialized);
    EXPECT_TRUE(agree(want[0], reference(c), tolerance<T>())) << "materialized vs the rule";
    const std::size_t qr = pick(g, 1, 3), kr = pick(g, 1, 4);
    const auto got = run(c, AttentionPath::Tiled, qr, kr);
    for (std::size_t i = 0; i < 4; ++i)
      EXPECT_TRUE(agree(got[i], to_double(want[i]), tolerance<T>()))
          << "tiled (blocks " << qr << " x " << kr << ") vs materialized: " << names[i];
  }
}

}  // namespace

TEST(AttentionProperty, PathsFollowTheRuleInDouble) { attention_properties<double>(2029, 200); }

TEST(AttentionProperty, PathsFollowTheRuleInFloat) { attention_properties<float>(2930, 200); }

// ---- the KV cache ------------------------------------------------------------------------------

namespace {

// One causal layer, random sizes, a NaN or Inf (or nothing) at a random input position: the full
// forward (on a random path) and the cache fed in random chunks agree, NaN positions included. A
// bad position p poisons positions >= p only (they see its key), whichever way it is fed.
template <class T>
void kv_cache_properties(std::uint64_t seed, int cases) {
  Generator g(seed);
  for (int n = 0; n < cases; ++n) {
    const std::size_t H = pick(g, 1, 2), E = H * pick(g, 1, 3) * 2, N = pick(g, 1, 2), L = pick(g, 1, 7);
    const bool norm_first = g.uniform() < 0.5, batch_first = g.uniform() < 0.5;
    manual_seed(g.next_u64());
    nn::TransformerEncoderLayer<T> layer(
        nn::TransformerEncoderLayerOptions(static_cast<std::int64_t>(E), static_cast<std::int64_t>(H))
            .dim_feedforward(6)
            .norm_first(norm_first)
            .batch_first(batch_first));
    layer.eval();
    Array<T> x = randn<T>(batch_first ? Shape{N, L, E} : Shape{L, N, E}, g).value();
    std::string what = "N " + std::to_string(N) + ", L " + std::to_string(L) + ", E " + std::to_string(E) + ", H " +
                       std::to_string(H) + (norm_first ? ", pre-norm" : ", post-norm") +
                       (batch_first ? ", batch_first" : "");
    const std::size_t bad = pick(g, 0, 2);  // 0: none, 1: NaN, 2: Inf
    if (bad) {
      const std::size_t at = pick(g, 0, x.size() - 1);
      x.data()[at] = bad == 1 ? std::numeric_limits<T>::quiet_NaN() : std::numeric_limits<T>::infinity();
      what += (bad == 1 ? ", NaN at element " : ", Inf at element ") + std::to_string(at);
    }
    const AttentionPath path = g.uniform() < 0.5 ? AttentionPath::Materialized : AttentionPath::Tiled;
    const std::size_t qr = pick(g, 1, 3), kr = pick(g, 1, 3);
    SCOPED_TRACE("case " + std::to_string(n) + ": " + what +
                 (path == AttentionPath::Tiled ? ", tiled " + std::to_string(qr) + " x " + std::to_string(kr) : ""));
    NoGradGuard no_grad;
    Array<double> full;
    {
      PathGuard guard(path, qr, kr);
      full = to_double(layer.forward(Tensor<T>(x), {}, {}, /*is_causal=*/true).value());
    }
    const std::int64_t sd = batch_first ? 1 : 0;
    for (int way = 0; way < 3; ++way) {  // whole, random chunks, one position at a time
      nn::KVCache<T> cache;
      std::vector<Tensor<T>> parts;
      for (std::size_t at = 0; at < L;) {
        const std::size_t chunk = way == 0 ? L : way == 2 ? 1 : pick(g, 1, L - at);
        parts.push_back(nn::forward_cached(
            layer, slice(Tensor<T>(x), sd, static_cast<std::int64_t>(at), static_cast<std::int64_t>(at + chunk)),
            cache));
        at += chunk;
      }
      EXPECT_TRUE(agree(cat<T>(parts, sd).value(), full, tolerance<T>())) << (way == 0   ? "prefill"
                                                                              : way == 1 ? "chunks"
                                                                                         : "step by step")
                                                                          << " vs the full forward";
    }
  }
}

}  // namespace

TEST(AttentionProperty, KVCacheFollowsTheFullForwardInDouble) { kv_cache_properties<double>(4029, 60); }

TEST(AttentionProperty, KVCacheFollowsTheFullForwardInFloat) { kv_cache_properties<float>(4930, 60); }

// ---- the rule, case by case (docs/reliability.md, "NaN and masking in attention") ---------------

namespace {

// Per row i of y (1, 1, L, Ev): 1 when all NaN, 0 when all finite, -1 otherwise.
std::vector<int> nan_rows(const Array<double>& y) {
  const std::size_t L = y.shape(2), Ev = y.shape(3);
  std::vector<int> r(L);
  for (std::size_t i = 0; i < L; ++i) {
    std::size_t nans = 0, finite = 0;
    for (std::size_t e = 0; e < Ev; ++e) {
      nans += std::isnan(y(0, 0, i, e)) ? 1 : 0;
      finite += std::isfinite(y(0, 0, i, e)) ? 1 : 0;
    }
    r[i] = nans == Ev ? 1 : finite == Ev ? 0 : -1;
  }
  return r;
}

}  // namespace

TEST(AttentionNaN, FollowsTheDocumentedRuleOnBothPaths) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  Generator g(5);
  const Array<double> q0 = randn<double>({1, 1, 5, 3}, g).value(), k0 = randn<double>({1, 1, 5, 3}, g).value(),
                      v0 = randn<double>({1, 1, 5, 2}, g).value();
  struct Rule {
    std::string name;
    Array<double> q, k, v;
    AttnMask<double> mask;
    bool causal;
    std::optional<double> scale;
    std::vector<int> want;  // per query row: 1 NaN, 0 finite, -1 neither (Inf: checked by agree only)
  };
  auto with = [](Array<double> a, std::size_t row, double x) {  // row `row` of a all x
    for (std::size_t e = 0; e < a.shape(3); ++e) a(0, 0, row, e) = x;
    return a;
  };
  BoolArray hide2 = BoolArray::from_shape({5, 5});
  std::fill(hide2.begin(), hide2.end(), false);
  hide2(0, 2) = hide2(3, 2) = true;
  Array<double> minus_inf2 = zeros<double>({5, 5}).value(), big2 = zeros<double>({5, 5}).value();
  minus_inf2(0, 2) = minus_inf2(3, 2) = -inf;
  big2(0, 2) = big2(3, 2) = -1e9;
  BoolArray row4_masked = BoolArray::from_shape({5, 5});
  std::fill(row4_masked.begin(), row4_masked.end(), false);
  for (std::size_t j = 0; j < 5; ++j) row4_masked(4, j) = true;
  const std::vector<Rule> rules{
      {"a NaN query row is NaN", with(q0, 1, nan), k0, v0, {}, false, std::nullopt, {0, 1, 0, 0, 0}},
      {"scale NaN: NaN, but a fully masked row is 0", q0, k0, v0, row4_masked, false, nan, {1, 1, 1, 1, 0}},
      {"a NaN key poisons the rows that see it", q0, with(k0, 2, nan), v0, {}, true, std::nullopt, {0, 0, 1, 1, 1}},
      {"a NaN value too", q0, k0, with(v0, 2, nan), {}, true, std::nullopt, {0, 0, 1, 1, 1}},
      {"a bool mask hides a NaN key", q0, with(k0, 2, nan), v0, hide2, false, std::nullopt, {0, 1, 1, 0, 1}},
      {"a bool mask hides a NaN value", q0, k0, with(v0, 2, nan), hide2, false, std::nullopt, {0, 1, 1, 0, 1}},
      {"a -inf mask hides a NaN key", q0, with(k0, 2, nan), v0, minus_inf2, false, std::nullopt, {0, 1, 1, 0, 1}},
      {"-1e9 hides a NaN value (exp underflows to 0)",
       q0,
       k0,
       with(v0, 2, nan),
       big2,
       false,
       std::nullopt,
       {0, 1, 1, 0, 1}},
      {"-1e9 does not hide a NaN key (NaN - 1e9 is NaN)",
       q0,
       with(k0, 2, nan),
       v0,
       big2,
       false,
       std::nullopt,
       {1, 1, 1, 1, 1}},
      {"an Inf value hidden by causality", q0, k0, with(v0, 3, inf), {}, true, std::nullopt, {0, 0, 0, -1, -1}},
  };
  for (const Rule& r : rules) {
    SCOPED_TRACE(r.name);
    AttentionCase<double> c;
    c.B = c.H = 1, c.L = c.S = 5, c.E = 3, c.Ev = 2;
    c.q = r.q, c.k = r.k, c.v = r.v, c.mask = r.mask, c.causal = r.causal, c.scale = r.scale;
    const auto materialized = run(c, AttentionPath::Materialized);
    const auto tiled = run(c, AttentionPath::Tiled, 2, 2);
    const std::vector<int>& want = r.want;
    for (const auto* y : {&materialized, &tiled}) {
      const std::vector<int> got = nan_rows((*y)[0]);
      for (std::size_t i = 0; i < 5; ++i)
        if (want[i] >= 0) {
          EXPECT_EQ(got[i], want[i]) << "row " << i << (y == &tiled ? " (tiled)" : " (materialized)");
        }
    }
    if (r.name == "scale NaN: NaN, but a fully masked row is 0") {
      for (std::size_t e = 0; e < 2; ++e) EXPECT_EQ(materialized[0](0, 0, 4, e), 0.0);
    }
    EXPECT_TRUE(agree(materialized[0], reference(c), 1e-12));
    for (std::size_t i = 0; i < 4; ++i)
      EXPECT_TRUE(agree(tiled[i], materialized[i], 1e-12)) << "output / dq / dk / dv " << i;
  }
}
