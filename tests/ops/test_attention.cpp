// The fused attention op behind F.scaled_dot_product_attention and nn.MultiheadAttention
// (xgrad/ops/attention/attention.hpp): the mask normaliser, kind by kind, against layouts built by
// hand; the op's second output (the probabilities) and the gradient through it; fully masked
// rows with both outputs in use; attention_heads (MultiheadAttention's in-place heads) against
// the split-attend-merge it replaces, in every layout.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <xgrad/ops/attention/attention.hpp>

#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;
using detail::AttentionArgs;
using detail::AttentionMask;
using detail::normalize_attention_mask;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
using Mask = AttnMask<double>;

// Logits (N, H, L, S) of MultiheadAttention's frame, B = N H batch-heads.
constexpr std::size_t N = 2, H = 3, L = 4, S = 5, B = N * H;
const Shape kTarget{N, H, L, S};

BoolArray random_bool(const Shape& shape, std::uint64_t seed, double p_true = 0.3) {
  Generator g(seed);
  BoolArray m = BoolArray::from_shape(shape);
  for (auto& x : m) x = g.uniform() < p_true;
  return m;
}

Array<double> random_float(const Shape& shape, std::uint64_t seed) {
  Generator g(seed);
  return randn<double>(shape, g).value();
}

void expect_bool(const AttentionMask<double>& got, const BoolArray& expected) {
  ASSERT_FALSE(got.mask.empty());
  ASSERT_TRUE(got.mask.is_bool());
  EXPECT_EQ(shape_of(got.mask.bool_mask()), shape_of(expected));
  EXPECT_EQ(got.mask.bool_mask(), expected);
  EXPECT_EQ(got.per_batch(), expected.dimension() == 3);
}

void expect_float(const AttentionMask<double>& got, const Array<double>& expected) {
  ASSERT_FALSE(got.mask.empty());
  ASSERT_FALSE(got.mask.is_bool());
  EXPECT_EQ(shape_of(got.mask.float_mask()), shape_of(expected));
  EXPECT_EQ(max_abs_diff(got.mask.float_mask(), expected), 0.0);
  EXPECT_EQ(got.per_batch(), expected.dimension() == 3);
}

}  // namespace

// ---- the mask normaliser ----------------------------------------------------------------------

TEST(AttentionMaskNormaliser, NoMaskAndCausalStayFlags) {
  const auto none = normalize_attention_mask<double>(kTarget, {}, {}, false);
  EXPECT_TRUE(none.mask.empty());
  EXPECT_FALSE(none.is_causal);
  EXPECT_FALSE(none.per_batch());
  const auto causal = normalize_attention_mask<double>(kTarget, {}, {}, true);
  EXPECT_TRUE(causal.mask.empty());  // the kernel masks j > i itself: nothing materialised
  EXPECT_TRUE(causal.is_causal);
  // With another mask, causal is still the flag and the mask is left as it is.
  const BoolArray m = random_bool({L, S}, 1);
  const auto both = normalize_attention_mask<double>(kTarget, Mask(m), {}, true);
  EXPECT_TRUE(both.is_causal);
  expect_bool(both, m);
}

TEST(AttentionMaskNormaliser, TwoDimensionalMasksStayOneSharedLayout) {
  const BoolArray b = random_bool({L, S}, 2);
  expect_bool(normalize_attention_mask<double>(kTarget, Mask(b)), b);
  const Array<double> f = random_float({L, S}, 3);
  expect_float(normalize_attention_mask<double>(kTarget, Mask(f)), f);
  // (1, 1, L, S) and (S) also vary along L and S only.
  BoolArray b4 = b;
  b4.reshape({1, 1, L, S});
  expect_bool(normalize_attention_mask<double>(kTarget, Mask(b4)), b);
  const BoolArray row = random_bool({S}, 4);
  BoolArray rows = BoolArray::from_shape({L, S});
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t j = 0; j < S; ++j) rows(i, j) = row(j);
  expect_bool(normalize_attention_mask<double>(kTarget, Mask(row)), rows);
}

TEST(AttentionMaskNormaliser, ThreeDimensionalMasksBecomeOnePerBatchHead) {
  // MultiheadAttention's (N*num_heads, L, S): batch-head n H + h reads block n H + h as it is.
  const BoolArray b3 = random_bool({B, L, S}, 5);
  expect_bool(normalize_attention_mask<double>(kTarget, Mask(b3)), b3);
  const Array<double> f3 = random_float({B, L, S}, 6);
  expect_float(normalize_attention_mask<double>(kTarget, Mask(f3)), f3);
  // SDPA's broadcast form (N, 1, L, S): the same block for every head of a batch.
  const Array<double> fn = random_float({N, 1, L, S}, 7);
  Array<double> expected = Array<double>::from_shape({B, L, S});
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < L; ++i)
        for (std::size_t j = 0; j < S; ++j) expected(n * H + h, i, j) = fn(n, 0, i, j);
  expect_float(normalize_attention_mask<double>(kTarget, Mask(fn)), expected);
}

TEST(AttentionMaskNormaliser, KeyPaddingMasksKeysForEveryHeadAndQuery) {
  const BoolArray kpm = random_bool({N, S}, 8, 0.4);
  BoolArray expected = BoolArray::from_shape({B, L, S});
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < L; ++i)
        for (std::size_t j = 0; j < S; ++j) expected(n * H + h, i, j) = kpm(n, j);
  expect_bool(normalize_attention_mask<double>(kTarget, {}, Mask(kpm)), expected);
  // Float padding the same way.
  const Array<double> fk = random_float({N, S}, 9);
  Array<double> fexpected = Array<double>::from_shape({B, L, S});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t j = 0; j < S; ++j) fexpected(b, i, j) = fk(b / H, j);
  expect_float(normalize_attention_mask<double>(kTarget, {}, Mask(fk)), fexpected);
  // Unbatched (S) padding: one (L, S) layout.
  const BoolArray k1 = random_bool({S}, 10, 0.4);
  BoolArray rows = BoolArray::from_shape({L, S});
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t j = 0; j < S; ++j) rows(i, j) = k1(j);
  expect_bool(normalize_attention_mask<double>(Shape{1, H, L, S}, {}, Mask(k1)), rows);
}

TEST(AttentionMaskNormaliser, MasksCombineAsLogicalOrOrAsASumOfFloats) {
  const BoolArray am = random_bool({L, S}, 11);
  const BoolArray kpm = random_bool({N, S}, 12, 0.4);
  const Array<double> fm = random_float({L, S}, 13);
  const Array<double> f3 = random_float({B, L, S}, 14);
  const Array<double> fk = random_float({N, S}, 15);
  BoolArray or_expected = BoolArray::from_shape({B, L, S});
  Array<double> float_bool = Array<double>::from_shape({B, L, S});
  Array<double> float_float = Array<double>::from_shape({B, L, S});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t j = 0; j < S; ++j) {
        or_expected(b, i, j) = am(i, j) || kpm(b / H, j);
        float_bool(b, i, j) = fm(i, j) + (kpm(b / H, j) ? -kInf : 0.0);
        float_float(b, i, j) = f3(b, i, j) + fk(b / H, j);
      }
  expect_bool(normalize_attention_mask<double>(kTarget, Mask(am), Mask(kpm)), or_expected);
  expect_float(normalize_attention_mask<double>(kTarget, Mask(fm), Mask(kpm)), float_bool);
  expect_float(normalize_attention_mask<double>(kTarget, Mask(f3), Mask(fk)), float_float);
  // A bool attn_mask with a float padding: float, the bool one as 0 / -inf.
  Array<double> bool_float = Array<double>::from_shape({B, L, S});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t j = 0; j < S; ++j) bool_float(b, i, j) = (am(i, j) ? -kInf : 0.0) + fk(b / H, j);
  expect_float(normalize_attention_mask<double>(kTarget, Mask(am), Mask(fk)), bool_float);
  // Two (L, S)-only masks stay (L, S).
  Array<double> shared = Array<double>::from_shape({L, S});
  const BoolArray k1 = random_bool({S}, 16);
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t j = 0; j < S; ++j) shared(i, j) = fm(i, j) + (k1(j) ? -kInf : 0.0);
  expect_float(normalize_attention_mask<double>(Shape{1, H, L, S}, Mask(fm), Mask(k1)), shared);
}

TEST(AttentionMaskNormaliser, ShapesThatFitNoFormThrow) {
  XGRAD_EXPECT_THROW_MSG(normalize_attention_mask<double>(kTarget, Mask(BoolArray(xt::zeros<bool>({L, S + 1})))),
                         "attn_mask", "(4, 6)", "(2, 3, 4, 5)", "(6, 4, 5)");
  XGRAD_EXPECT_THROW_MSG(normalize_attention_mask<double>(kTarget, {}, Mask(BoolArray(xt::zeros<bool>({N + 1, S})))),
                         "key_padding_mask", "(3, 5)", "(2, 5)");
}

// ---- the op's two outputs ---------------------------------------------------------------------

namespace {

// The (out, weights) pair flattened into one tensor, so that a gradcheck's random upstream
// gradient reaches both outputs at once.
T64 both(const std::pair<T64, T64>& r) { return cat<double>({flatten(r.first), flatten(r.second)}, 0); }

struct Variant {
  std::string name;
  Mask attn_mask, key_padding_mask;
  bool is_causal = false;
  double dropout_p = 0.0;
};

std::vector<Variant> variants() {
  return {
      {"no mask", {}, {}},
      {"bool (L, S) + is_causal", random_bool({L, L}, 20), {}, true},
      {"float (N H, L, S)", random_float({B, L, L}, 21), {}},
      {"bool key padding + float mask", random_float({L, L}, 22), random_bool({N, L}, 23)},
      {"dropout 0.3 + key padding", {}, random_bool({N, L}, 24), false, 0.3},
  };
}

AttentionArgs<double> args_of(const Variant& v, Generator* g) {
  AttentionArgs<double> a;
  a.mask = normalize_attention_mask<double>({N, H, L, L}, v.attn_mask, v.key_padding_mask, v.is_causal);
  a.dropout_p = v.dropout_p;
  a.need_weights = true;
  a.generator = g;
  return a;
}

}  // namespace

TEST(AttentionWithWeights, GradientFlowsThroughBothOutputs) {
  for (const Variant& v : variants()) {
    SCOPED_TRACE(v.name);
    expect_gradcheck(
        [&](const Inputs& in) {
          Generator g(7);  // the same dropout mask at every evaluation
          return both(detail::attention(in[0], in[1], in[2], args_of(v, &g)));
        },
        {input({N, H, L, 3}, 1), input({N, H, L, 3}, 2), input({N, H, L, 2}, 3)});
    // The weights alone.
    expect_gradcheck(
        [&](const Inputs& in) {
          Generator g(7);
          return detail::attention(in[0], in[1], in[2], args_of(v, &g)).second;
        },
        {input({N, H, L, 3}, 4), input({N, H, L, 3}, 5), input({N, H, L, 2}, 6)});
  }
}

TEST(AttentionWithWeights, WeightsAreTheProbabilitiesTheOutputUses) {
  // With v = I (S x S) the output is the weights themselves, dropout included.
  auto q = input({N, H, L, 3}, 1), k = input({N, H, S, 3}, 2);
  Tensor<double> eye(xt::broadcast(xt::eye<double>(S), std::vector<std::size_t>{N, H, S, S}));
  for (double p : {0.0, 0.4}) {
    SCOPED_TRACE("p=" + std::to_string(p));
    Generator g(3);
    AttentionArgs<double> a;
    a.mask = normalize_attention_mask<double>(kTarget, Mask(random_bool({L, S}, 4)), Mask(random_bool({N, S}, 5)));
    a.dropout_p = p;
    a.need_weights = true;
    a.generator = &g;
    auto [out, weights] = detail::attention(q, k, eye, a);
    ASSERT_EQ(weights.shape(), kTarget);
    EXPECT_LT(max_abs_diff(out.value(), weights.value()), 1e-15);
    // Without dropout each row sums to 1 (the masks leave every row a key).
    if (p == 0.0) {
      const Array<double> sums = xt::sum(weights.value(), {3});
      for (double s : sums) EXPECT_NEAR(s, 1.0, 1e-14);
    }
    // The same call without weights gives the same output from the same kernel.
    Generator g2(3);
    a.need_weights = false;
    a.generator = &g2;
    auto [alone, none] = detail::attention(q, k, eye, a);
    EXPECT_FALSE(none.defined());
    EXPECT_EQ(alone.value(), out.value());
  }
}

TEST(AttentionWithWeights, BothOutputsComeFromOneFusedNode) {
  auto q = input({2, 3, 4}, 1), k = input({2, 5, 4}, 2), v = input({2, 5, 3}, 3);
  AttentionArgs<double> a;
  a.need_weights = true;
  auto [out, weights] = detail::attention(q, k, v, a);
  ASSERT_EQ(out.node()->inputs.size(), 1u);
  ASSERT_EQ(weights.node()->inputs.size(), 1u);
  const auto& fused = out.node()->inputs[0];
  EXPECT_EQ(fused, weights.node()->inputs[0]);
  EXPECT_STREQ(fused->op, "scaled_dot_product_attention");
  ASSERT_EQ(fused->inputs.size(), 3u);
  EXPECT_EQ(fused->inputs[0], q.node());
  EXPECT_EQ(fused->inputs[1], k.node());
  EXPECT_EQ(fused->inputs[2], v.node());
  EXPECT_EQ(out.shape(), (Shape{2, 3, 3}));
  EXPECT_EQ(weights.shape(), (Shape{2, 3, 5}));
}

TEST(AttentionWithWeights, FullyMaskedRowsGiveZerosAndFiniteGradients) {
  // Batch-head 1, query 2 sees no key (bool mask); batch 1's keys are all padded.
  BoolArray am = random_bool({B, L, S}, 30, 0.2);
  for (std::size_t j = 0; j < S; ++j) am(1, 2, j) = true;
  BoolArray kpm = xt::zeros<bool>({N, S});
  for (std::size_t j = 0; j < S; ++j) kpm(1, j) = true;
  for (bool float_masks : {false, true}) {
    SCOPED_TRACE(float_masks ? "float" : "bool");
    auto as_float = [](const BoolArray& m) {
      Array<double> f = Array<double>::from_shape(m.shape());
      std::transform(m.begin(), m.end(), f.begin(), [](bool x) { return x ? -kInf : 0.0; });
      return f;
    };
    const Mask a = float_masks ? Mask(as_float(am)) : Mask(am), p = float_masks ? Mask(as_float(kpm)) : Mask(kpm);
    auto q = input({N, H, L, 3}, 1), k = input({N, H, S, 3}, 2), v = input({N, H, S, 2}, 3);
    AttentionArgs<double> args;
    args.mask = normalize_attention_mask<double>(kTarget, a, p);
    args.need_weights = true;
    auto [out, weights] = detail::attention(q, k, v, args);
    auto dead = [&](std::size_t n, std::size_t h, std::size_t i) { return n == 1 || (n * H + h == 1 && i == 2); };
    for (std::size_t n = 0; n < N; ++n)
      for (std::size_t h = 0; h < H; ++h)
        for (std::size_t i = 0; i < L; ++i) {
          if (!dead(n, h, i)) continue;
          for (std::size_t j = 0; j < S; ++j) EXPECT_EQ(weights.value()(n, h, i, j), 0.0);
          for (std::size_t c = 0; c < 2; ++c) EXPECT_EQ(out.value()(n, h, i, c), 0.0);
        }
    {
      DetectAnomalyGuard anomaly;  // throws on any NaN/Inf gradient
      both({out, weights}).backward(ones<double>({N * H * L * (2 + S)}));
    }
    for (const auto* t : {&q, &k, &v})
      for (double g : t->grad()) EXPECT_TRUE(std::isfinite(g));
    for (std::size_t n = 0; n < N; ++n)
      for (std::size_t h = 0; h < H; ++h)
        for (std::size_t i = 0; i < L; ++i) {
          if (!dead(n, h, i)) continue;
          for (std::size_t e = 0; e < 3; ++e) EXPECT_EQ(q.grad()(n, h, i, e), 0.0);
        }
    expect_gradcheck(
        [&](const Inputs& in) {
          AttentionArgs<double> x;
          x.mask = normalize_attention_mask<double>(kTarget, a, p);
          x.need_weights = true;
          return both(detail::attention(in[0], in[1], in[2], x));
        },
        {input({N, H, L, 3}, 4), input({N, H, S, 3}, 5), input({N, H, S, 2}, 6)});
  }
}

// ---- attention_heads: the heads read in place from the projections ---------------------------

namespace {

constexpr std::size_t D = 2, E = H * D;  // head dim, embed dim

// The three projection forms of nn.MultiheadAttention, (N, len, C) when batch_first else
// (len, N, C): {qkv}, {q, kv} or {q, k, v}, q of length L, k and v of length len_kv.
Inputs projections(std::size_t form, bool batch_first, std::size_t len_kv, std::uint64_t seed) {
  auto shape = [&](std::size_t len, std::size_t c) { return batch_first ? Shape{N, len, c} : Shape{len, N, c}; };
  if (form == 1) return {input(shape(L, 3 * E), seed)};
  if (form == 2) return {input(shape(L, E), seed), input(shape(len_kv, 2 * E), seed + 1)};
  return {input(shape(L, E), seed), input(shape(len_kv, E), seed + 1), input(shape(len_kv, E), seed + 2)};
}

// What attention_heads replaces: block x (E columns) of the concatenated projections split into
// heads (N, H, len, d) by a copy, detail::attention, then o merged back to (N, L, E) / (L, N, E).
std::pair<T64, T64> split_attend_merge(const Inputs& proj, bool batch_first, const AttentionArgs<double>& a) {
  std::vector<T64> heads;
  for (std::size_t x = 0, input = 0, start = 0; x < 3; ++x) {
    while (x * E >= start + proj[input].size(-1)) start += proj[input++].size(-1);
    const T64 block = narrow(proj[input], -1, static_cast<std::int64_t>(x * E - start), static_cast<std::int64_t>(E));
    const std::size_t len = block.size(batch_first ? 1 : 0);
    const std::int64_t n = N, l = static_cast<std::int64_t>(len), h = H, d = D;
    heads.push_back(batch_first ? permute(reshape(block, {n, l, h, d}), {0, 2, 1, 3})
                                : permute(reshape(block, {l, n, h, d}), {1, 2, 0, 3}));
  }
  auto [o, w] = detail::attention(heads[0], heads[1], heads[2], a);
  const std::int64_t n = N, l = L, e = E;
  const T64 merged = batch_first ? reshape(permute(o, {0, 2, 1, 3}), {n, l, e}) : reshape(permute(o, {2, 0, 1, 3}), {l, n, e});
  return {merged, w};
}

AttentionArgs<double> heads_args(std::size_t len_kv, bool need_weights, double dropout_p, Generator* g) {
  AttentionArgs<double> a;
  a.mask = normalize_attention_mask<double>({N, H, L, len_kv}, Mask(random_float({L, len_kv}, 31)),
                                            Mask(random_bool({N, len_kv}, 32)), /*is_causal=*/true);
  a.dropout_p = dropout_p;
  a.need_weights = need_weights;
  a.generator = g;
  return a;
}

}  // namespace

TEST(AttentionHeads, EqualsSplitAttendMergeInEveryLayout) {
  for (bool batch_first : {true, false})
    for (std::size_t form : {1u, 2u, 3u})
      for (bool need_weights : {false, true})
        for (double p : {0.0, 0.3}) {
          const std::size_t len_kv = form == 1 ? L : S;  // cross-attention: S != L
          SCOPED_TRACE("batch_first=" + std::to_string(batch_first) + " form=" + std::to_string(form) +
                       " need_weights=" + std::to_string(need_weights) + " p=" + std::to_string(p));
          const Inputs fused_in = projections(form, batch_first, len_kv, 40), ref_in = projections(form, batch_first, len_kv, 40);
          Generator g1(9), g2(9);  // the same dropout draws in both
          auto [o, w] = detail::attention_heads(fused_in, H, batch_first, heads_args(len_kv, need_weights, p, &g1));
          auto [ro, rw] = split_attend_merge(ref_in, batch_first, heads_args(len_kv, need_weights, p, &g2));
          ASSERT_EQ(o.shape(), ro.shape());
          EXPECT_LT(max_abs_diff(o.value(), ro.value()), 1e-12);
          ASSERT_EQ(w.defined(), need_weights);
          T64 loss = sum(o * T64(random_float(o.shape(), 50))), ref = sum(ro * T64(random_float(ro.shape(), 50)));
          if (need_weights) {
            ASSERT_EQ(w.shape(), Shape({N, H, L, len_kv}));
            EXPECT_LT(max_abs_diff(w.value(), rw.value()), 1e-12);
            loss = loss + sum(w * T64(random_float(w.shape(), 51)));
            ref = ref + sum(rw * T64(random_float(rw.shape(), 51)));
          }
          loss.backward();
          ref.backward();
          for (std::size_t i = 0; i < fused_in.size(); ++i)
            EXPECT_LT(max_abs_diff(fused_in[i].grad(), ref_in[i].grad()), 1e-12) << "projection " << i;
        }
}

TEST(AttentionHeads, GradcheckSeqFirstCrossAttentionWithWeights) {
  for (bool batch_first : {false, true})
    for (std::size_t form : {2u, 3u}) {
      SCOPED_TRACE("batch_first=" + std::to_string(batch_first) + " form=" + std::to_string(form));
      expect_gradcheck(
          [&](const Inputs& in) {
            Generator g(5);
            return both(detail::attention_heads(in, H, batch_first, heads_args(S, true, 0.2, &g)));
          },
          projections(form, batch_first, S, 60));
    }
}

TEST(AttentionHeads, ProjectionsThatDoNotTileQkvThrow) {
  AttentionArgs<double> a;
  // 3E columns that do not split into E = num_heads * d blocks, and a block straddling two inputs.
  XGRAD_EXPECT_THROW_MSG(detail::attention_heads<double>({input({N, L, 3 * E + 3}, 1)}, H, true, a), "num_heads=3");
  XGRAD_EXPECT_THROW_MSG(detail::attention_heads<double>({input({N, L, E + 3}, 1), input({N, L, 2 * E - 3}, 2)}, H,
                                                         true, a),
                         "within one projection");
  XGRAD_EXPECT_THROW_MSG(detail::attention_heads<double>({input({N, L, E}, 1), input({N + 1, S, 2 * E}, 2)}, H, true, a),
                         "one N");
}
