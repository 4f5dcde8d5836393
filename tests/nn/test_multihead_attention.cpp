// MultiheadAttention: gradient checks (inputs and parameters) for every mask kind and layout,
// an independent per-head reference, and PyTorch's mask semantics.
#include <cmath>
#include <limits>

#include <xtensor/xview.hpp>

#include "nn_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::size_t E = 6, H = 2, L = 4, N = 2;

using MHA = nn::MultiheadAttention<double>;

std::shared_ptr<MHA> make_mha(bool batch_first, double dropout = 0.0, bool bias = true, std::uint64_t seed = 3) {
  auto m = std::make_shared<MHA>(nn::MultiheadAttentionOptions(E, H).batch_first(batch_first).dropout(dropout).bias(bias));
  Generator g(seed);
  for (auto p : m->parameters()) nn::init::normal_(p, 0.0, 0.5, &g);  // non-zero biases too
  return m;
}

// Every row keeps key 0 or 1 open, so adding the key padding below never masks a whole row.
BoolArray bool_pattern() {
  return BoolArray{{false, true, false, false}, {false, false, true, false}, {true, false, false, true}, {false, true, false, false}};
}
BoolArray key_padding() { return BoolArray{{false, false, false, true}, {false, false, true, true}}; }
Array<double> as_float(const BoolArray& m) {
  Array<double> f = Array<double>::from_shape(m.shape());
  std::transform(m.begin(), m.end(), f.begin(), [](bool b) { return b ? -kInf : 0.0; });
  return f;
}

struct MaskCase {
  const char* name;
  AttnMask<double> attn_mask;
  AttnMask<double> key_padding_mask;
  bool is_causal = false;
};

std::vector<MaskCase> mask_cases() {
  Generator g(8);
  Array<double> float_mask = randn<double>({L, L}, g).value();
  Array<double> float_3d = randn<double>({N * H, L, L}, g).value();
  for (std::size_t b = 1; b < N * H; b += 2)
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t j = 0; j < L; ++j)
        if (bool_pattern()(i, j)) float_3d(b, i, j) = -kInf;
  Array<double> float_kpm = {{0.0, 0.5, -1.0, -kInf}, {0.3, 0.0, -kInf, -kInf}};
  return {
      {"none", {}, {}},
      {"bool attn_mask", bool_pattern(), {}},
      {"float attn_mask", float_mask, {}},
      {"float 3-D attn_mask", float_3d, {}},
      {"bool key_padding_mask", {}, key_padding()},
      {"float key_padding_mask", {}, float_kpm},
      {"bool attn_mask + key_padding_mask", bool_pattern(), key_padding()},
      {"float attn_mask + bool key_padding_mask", float_mask, key_padding()},
      {"is_causal", {}, {}, true},
      {"is_causal + key_padding_mask", {}, key_padding(), true},
  };
}

}  // namespace

TEST(MultiheadAttention, GradcheckEveryMaskKind) {
  for (bool batch_first : {true, false}) {
    auto mha = make_mha(batch_first);
    const Shape shape = batch_first ? Shape{N, L, E} : Shape{L, N, E};
    for (const auto& c : mask_cases()) {
      for (bool need_weights : {false, true}) {
        SCOPED_TRACE(std::string(c.name) + (batch_first ? ", batch_first" : ", seq first") +
                     (need_weights ? ", need_weights" : ""));
        auto out = [&](const Inputs& in) {
          return mha->forward(in[0], in[0], in[0], c.key_padding_mask, need_weights, c.attn_mask, true, c.is_causal).first;
        };
        expect_module_gradcheck(out, {input(shape, 11)}, mha->parameters());
      }
      SCOPED_TRACE(std::string(c.name) + ": weights");
      for (bool average : {true, false}) {
        auto weights = [&](const Inputs& in) {
          return mha->forward(in[0], in[0], in[0], c.key_padding_mask, true, c.attn_mask, average, c.is_causal).second;
        };
        expect_module_gradcheck(weights, {input(shape, 12)}, mha->parameters());
      }
    }
  }
}

TEST(MultiheadAttention, GradcheckCrossAttentionNoBiasAndUnbatched) {
  auto mha = make_mha(true);
  const BoolArray kpm{{false, false, false, false, true}, {false, true, false, false, false}};
  for (bool need_weights : {false, true}) {
    // Distinct query (N, 3, E), key and value (N, 5, E).
    expect_module_gradcheck(
        [&](const Inputs& in) { return mha->forward(in[0], in[1], in[2], kpm, need_weights).first; },
        {input({N, 3, E}, 1), input({N, 5, E}, 2), input({N, 5, E}, 3)}, mha->parameters());
    // key == value, query distinct.
    expect_module_gradcheck(
        [&](const Inputs& in) { return mha->forward(in[0], in[1], in[1], {}, need_weights).first; },
        {input({N, 3, E}, 1), input({N, 5, E}, 2)}, mha->parameters());
    // Unbatched (L, E) with a (S) key padding mask.
    expect_module_gradcheck(
        [&](const Inputs& in) {
          return mha->forward(in[0], in[0], in[0], BoolArray{false, true, false, false}, need_weights).first;
        },
        {input({L, E}, 4)}, mha->parameters());
  }
  auto plain = make_mha(false, 0.0, /*bias=*/false);
  EXPECT_EQ(plain->parameters().size(), 2u);
  expect_module_gradcheck([&](const Inputs& in) { return plain->forward(in[0], in[0], in[0]).first; },
                          {input({L, N, E}, 5)}, plain->parameters());
}

TEST(MultiheadAttention, GradcheckWithDropoutReseeded) {
  auto mha = make_mha(true, /*dropout=*/0.3);
  for (bool need_weights : {false, true}) {
    expect_module_gradcheck(
        [&](const Inputs& in) {
          manual_seed(2024);
          return mha->forward(in[0], in[0], in[0], key_padding(), need_weights, bool_pattern()).first;
        },
        {input({N, L, E}, 6)}, mha->parameters());
  }
  // Dropout changes the result in training (the masks differ from p = 0) and not in eval.
  auto x = input({N, L, E}, 7);
  auto no_drop = make_mha(true, 0.0);
  manual_seed(1);
  EXPECT_GT(max_abs_diff(mha->forward(x, x, x).first.value(), no_drop->forward(x, x, x).first.value()), 1e-3);
  mha->eval();
  EXPECT_EQ(mha->forward(x, x, x).first.value(), no_drop->forward(x, x, x).first.value());
}

TEST(MultiheadAttention, MatchesAPerHeadReference) {
  // out[n, l] = concat_h softmax(q_nh k_nh^T / sqrt(d) + M[nH+h]) v_nh, then out_proj; q_nh uses
  // rows [h d, (h+1) d) of W_q. A different 3-D mask per batch-head pins the n H + h order.
  auto mha = make_mha(true);
  auto x = input({N, L, E}, 9);
  Generator g(10);
  Array<double> mask = randn<double>({N * H, L, L}, g).value();
  for (std::size_t b = 0; b < N * H; ++b) mask(b, b % L, (b + 1) % L) = -kInf;
  auto [out, weights] = mha->forward(x, x, x, {}, true, mask, /*average_attn_weights=*/false);

  const std::size_t d = E / H;
  const Array<double>& W = mha->in_proj_weight.value();
  const Array<double>& B = mha->in_proj_bias.value();
  const Array<double>& X = x.value();
  Array<double> concat = xt::zeros<double>({N, L, E});
  Array<double> probs = xt::zeros<double>({N, H, L, L});
  for (std::size_t n = 0; n < N; ++n) {
    for (std::size_t h = 0; h < H; ++h) {
      auto proj = [&](std::size_t which, std::size_t l, std::size_t c) {
        const std::size_t row = which * E + h * d + c;
        double s = B(row);
        for (std::size_t e = 0; e < E; ++e) s += X(n, l, e) * W(row, e);
        return s;
      };
      for (std::size_t i = 0; i < L; ++i) {
        std::vector<double> logits(L);
        double mx = -kInf;
        for (std::size_t j = 0; j < L; ++j) {
          double s = 0;
          for (std::size_t c = 0; c < d; ++c) s += proj(0, i, c) * proj(1, j, c);
          logits[j] = s / std::sqrt(static_cast<double>(d)) + mask(n * H + h, i, j);
          mx = std::max(mx, logits[j]);
        }
        double z = 0;
        for (double& v : logits) z += (v = std::exp(v - mx));
        for (std::size_t j = 0; j < L; ++j) probs(n, h, i, j) = logits[j] / z;
        for (std::size_t c = 0; c < d; ++c)
          for (std::size_t j = 0; j < L; ++j) concat(n, i, h * d + c) += probs(n, h, i, j) * proj(2, j, c);
      }
    }
  }
  const Array<double>& Wo = mha->out_proj->weight.value();
  const Array<double>& Bo = mha->out_proj->bias.value();
  Array<double> expected = Array<double>::from_shape({N, L, E});
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t o = 0; o < E; ++o) {
        double s = Bo(o);
        for (std::size_t e = 0; e < E; ++e) s += concat(n, i, e) * Wo(o, e);
        expected(n, i, o) = s;
      }
  EXPECT_LT(max_abs_diff(out.value(), expected), 1e-12);
  EXPECT_LT(max_abs_diff(weights.value(), probs), 1e-14);
  // The fused path (need_weights=false) agrees.
  EXPECT_LT(max_abs_diff(mha->forward(x, x, x, {}, false, mask).first.value(), expected), 1e-12);
  // Seq-first layout: the same numbers transposed.
  auto seq = make_mha(false);
  seq->load_state_dict(mha->state_dict());
  auto xs = Tensor<double>(Array<double>(xt::transpose(X, {1, 0, 2})));
  auto out_seq = seq->forward(xs, xs, xs, {}, false, mask).first;
  EXPECT_LT(max_abs_diff(out_seq.value(), Array<double>(xt::transpose(expected, {1, 0, 2}))), 1e-12);
}

TEST(MultiheadAttention, WeightsAreAveragedOverHeadsAndAgreeWithTheOutput) {
  auto mha = make_mha(true);
  auto x = input({N, L, E}, 13);
  for (const auto& c : mask_cases()) {
    SCOPED_TRACE(c.name);
    auto [out_w, avg] = mha->forward(x, x, x, c.key_padding_mask, true, c.attn_mask, true, c.is_causal);
    auto [out_w2, per_head] = mha->forward(x, x, x, c.key_padding_mask, true, c.attn_mask, false, c.is_causal);
    auto [out_fused, none] = mha->forward(x, x, x, c.key_padding_mask, false, c.attn_mask, true, c.is_causal);
    EXPECT_FALSE(none.defined());
    ASSERT_EQ(avg.shape(), (Shape{N, L, L}));
    ASSERT_EQ(per_head.shape(), (Shape{N, H, L, L}));
    EXPECT_LT(max_abs_diff(avg.value(), Array<double>(xt::mean(per_head.value(), {1}))), 1e-15);
    // Each query's probabilities sum to 1.
    EXPECT_LT(max_abs_diff(Array<double>(xt::sum(per_head.value(), {3})), Array<double>(xt::ones<double>({N, H, L}))),
              1e-14);
    // The explicit path (weights) and the fused kernel give the same output.
    EXPECT_LT(max_abs_diff(out_w.value(), out_fused.value()), 1e-13);
    EXPECT_EQ(out_w.value(), out_w2.value());
  }
}

TEST(MultiheadAttention, BoolMaskEqualsFloatMaskWithMinusInf) {
  auto mha = make_mha(true);
  for (bool need_weights : {false, true}) {
    SCOPED_TRACE(need_weights ? "need_weights" : "fused");
    auto xb = input({N, L, E}, 14), xf = input({N, L, E}, 14);
    auto yb = mha->forward(xb, xb, xb, key_padding(), need_weights, bool_pattern()).first;
    mha->zero_grad();
    sum(yb * yb).backward();
    const auto gb = mha->in_proj_weight.grad();
    auto yf = mha->forward(xf, xf, xf, Array<double>(as_float(key_padding())), need_weights,
                           Array<double>(as_float(bool_pattern()))).first;
    mha->zero_grad();
    sum(yf * yf).backward();
    EXPECT_EQ(yb.value(), yf.value());
    EXPECT_EQ(xb.grad(), xf.grad());
    EXPECT_EQ(gb, mha->in_proj_weight.grad());
  }
}

TEST(MultiheadAttention, FloatMaskOfOnesOnlyShiftsLogits) {
  auto mha = make_mha(true);
  auto x = input({N, L, E}, 15);
  const Array<double> ones = xt::ones<double>({L, L});
  for (bool need_weights : {false, true}) {
    auto [y0, w0] = mha->forward(x, x, x, {}, true);
    auto y1 = mha->forward(x, x, x, {}, need_weights, ones).first;
    EXPECT_LT(max_abs_diff(y0.value(), y1.value()), 1e-14);
    if (need_weights) {
      EXPECT_LT(max_abs_diff(w0.value(), mha->forward(x, x, x, {}, true, ones).second.value()), 1e-15);
    }
  }
  // A non-constant float mask does change the result.
  Array<double> ramp = Array<double>::from_shape({L, L});
  for (std::size_t i = 0; i < ramp.size(); ++i) ramp.data()[i] = 0.3 * static_cast<double>(i);
  EXPECT_GT(max_abs_diff(mha->forward(x, x, x).first.value(), mha->forward(x, x, x, {}, false, ramp).first.value()), 1e-3);
}

TEST(MultiheadAttention, CausalMaskHidesLaterTokens) {
  auto mha = make_mha(true);
  auto x = input({N, L, E}, 16);
  Array<double> changed = x.value();
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t l = 1; l < L; ++l)
      for (std::size_t e = 0; e < E; ++e) changed(n, l, e) += 1.0 + static_cast<double>(e);
  auto x2 = Tensor<double>(changed);
  for (bool need_weights : {false, true}) {
    SCOPED_TRACE(need_weights ? "need_weights" : "fused");
    for (int variant = 0; variant < 2; ++variant) {
      const bool is_causal = variant == 0;
      const AttnMask<double> mask = is_causal ? AttnMask<double>() : AttnMask<double>(causal(L));
      auto y1 = mha->forward(x, x, x, {}, need_weights, mask, true, is_causal).first.value();
      auto y2 = mha->forward(x2, x2, x2, {}, need_weights, mask, true, is_causal).first.value();
      for (std::size_t n = 0; n < N; ++n)
        for (std::size_t e = 0; e < E; ++e) EXPECT_EQ(y1(n, 0, e), y2(n, 0, e));
      EXPECT_GT(max_abs_diff(Array<double>(xt::view(y1, xt::all(), 1, xt::all())),
                             Array<double>(xt::view(y2, xt::all(), 1, xt::all()))), 1e-3);
    }
    // is_causal applies the same mask as the explicit one.
    EXPECT_LT(max_abs_diff(mha->forward(x, x, x, {}, need_weights, {}, true, true).first.value(),
                           mha->forward(x, x, x, {}, need_weights, causal(L)).first.value()), 1e-15);
  }
}

TEST(MultiheadAttention, FullyMaskedRowGivesZerosAndFiniteGradients) {
  auto mha = make_mha(true);
  // Query 2 of every batch-head may attend to nothing (bool mask), and batch 1's keys are all
  // padded (key padding mask): those rows' attention is zero, so out = out_proj.bias there.
  BoolArray mask = bool_pattern();
  for (std::size_t j = 0; j < L; ++j) mask(2, j) = true;
  const BoolArray kpm{{false, false, false, false}, {true, true, true, true}};
  for (bool need_weights : {false, true}) {
    for (bool float_masks : {false, true}) {
      SCOPED_TRACE(std::string(need_weights ? "need_weights" : "fused") + (float_masks ? ", float" : ", bool"));
      auto x = input({N, L, E}, 17);
      const AttnMask<double> am = float_masks ? AttnMask<double>(as_float(mask)) : AttnMask<double>(mask);
      const AttnMask<double> pm = float_masks ? AttnMask<double>(as_float(kpm)) : AttnMask<double>(kpm);
      mha->zero_grad();
      auto [y, w] = mha->forward(x, x, x, pm, need_weights, am);
      const Array<double>& bias = mha->out_proj->bias.value();
      for (std::size_t e = 0; e < E; ++e) {
        EXPECT_EQ(y.value()(0, 2, e), bias(e));
        for (std::size_t l = 0; l < L; ++l) EXPECT_EQ(y.value()(1, l, e), bias(e));
      }
      if (need_weights) {
        for (std::size_t j = 0; j < L; ++j) EXPECT_EQ(w.value()(0, 2, j), 0.0);
        EXPECT_EQ(xt::amax(xt::abs(xt::view(w.value(), 1, xt::all(), xt::all())))(), 0.0);
      }
      EXPECT_TRUE(xt::all(xt::isfinite(y.value())));
      sum(y * y).backward();
      EXPECT_TRUE(xt::all(xt::isfinite(x.grad())));
      for (const auto& [name, p] : mha->named_parameters()) EXPECT_TRUE(xt::all(xt::isfinite(p.grad()))) << name;
      // And the gradients are right (finite differences agree).
      expect_module_gradcheck([&](const Inputs& in) { return mha->forward(in[0], in[0], in[0], pm, need_weights, am).first; },
                              {input({N, L, E}, 18)}, mha->parameters());
    }
  }
  // With the default init (zero out_proj.bias) the fully masked rows are exactly zero.
  MHA fresh(nn::MultiheadAttentionOptions(E, H).batch_first(true));
  auto x = input({N, L, E}, 19);
  auto y = fresh.forward(x, x, x, kpm).first;
  EXPECT_EQ(xt::amax(xt::abs(xt::view(y.value(), 1, xt::all(), xt::all())))(), 0.0);
}

TEST(MultiheadAttention, MasksCombineAsOneThreeDimensionalMask) {
  auto mha = make_mha(false);
  auto x = input({L, N, E}, 20);
  // attn_mask (L, S) OR key_padding_mask (N, S) expanded to (N H, L, S) at n H + h.
  BoolArray merged = BoolArray::from_shape({N * H, L, L});
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < L; ++i)
        for (std::size_t j = 0; j < L; ++j) merged(n * H + h, i, j) = bool_pattern()(i, j) || key_padding()(n, j);
  for (bool need_weights : {false, true}) {
    auto y_both = mha->forward(x, x, x, key_padding(), need_weights, bool_pattern()).first;
    auto y_3d = mha->forward(x, x, x, {}, need_weights, merged).first;
    EXPECT_EQ(y_both.value(), y_3d.value());
  }
}

TEST(MultiheadAttention, ShapeErrorsNameWhatWasExpected) {
  auto mha = make_mha(true);
  auto x = input({N, L, E});
  XGRAD_EXPECT_THROW_MSG(mha->forward(x, x, x, {}, true, BoolArray(xt::zeros<bool>({L, L + 1}))), "MultiheadAttention",
                         "attn_mask", "(4, 4)", "(4, 4, 4)", "(4, 5)");
  XGRAD_EXPECT_THROW_MSG(mha->forward(x, x, x, BoolArray(xt::zeros<bool>({N + 1, L}))), "key_padding_mask", "(2, 4)",
                         "(3, 4)");
  XGRAD_EXPECT_THROW_MSG(mha->forward(input({N, L, E + 1}), x, x), "embed_dim=6");
  XGRAD_EXPECT_THROW_MSG(mha->forward(x, x, input({N, L + 1, E})), "key shape", "value shape");
  XGRAD_EXPECT_THROW_MSG(mha->forward(input({E}), x, x), "query must be");
}

TEST(MultiheadAttention, GradcheckThroughOutputAndWeightsTogether) {
  // One function of both outputs: the gradient of the weights joins the output's in one backward.
  for (bool batch_first : {true, false}) {
    auto mha = make_mha(batch_first, /*dropout=*/0.2);
    const Shape shape = batch_first ? Shape{N, L, E} : Shape{L, N, E};
    for (const auto& c : mask_cases()) {
      for (bool average : {true, false}) {
        SCOPED_TRACE(std::string(c.name) + (batch_first ? ", batch_first" : ", seq first") +
                     (average ? ", averaged" : ", per head"));
        auto both = [&](const Inputs& in) {
          manual_seed(99);  // the same dropout mask at every evaluation
          auto [out, weights] = mha->forward(in[0], in[0], in[0], c.key_padding_mask, true, c.attn_mask, average,
                                             c.is_causal);
          return cat<double>({flatten(out), flatten(weights)}, 0);
        };
        expect_module_gradcheck(both, {input(shape, 21)}, mha->parameters());
      }
    }
  }
  // Cross-attention (separate q, k, v projections) and unbatched input, both outputs.
  auto mha = make_mha(true);
  expect_module_gradcheck(
      [&](const Inputs& in) {
        auto [out, weights] = mha->forward(in[0], in[1], in[2], key_padding(), true, {}, false);
        return cat<double>({flatten(out), flatten(weights)}, 0);
      },
      {input({N, 3, E}, 22), input({N, L, E}, 23), input({N, L, E}, 24)}, mha->parameters());
  expect_module_gradcheck(
      [&](const Inputs& in) {
        auto [out, weights] = mha->forward(in[0], in[0], in[0], BoolArray{false, true, false, false});
        EXPECT_EQ(weights.shape(), (Shape{L, L}));
        return cat<double>({flatten(out), flatten(weights)}, 0);
      },
      {input({L, E}, 25)}, mha->parameters());
}

TEST(MultiheadAttention, IsTheFunctionalFormOnItsParameters) {
  for (bool batch_first : {true, false}) {
    auto mha = make_mha(batch_first);
    const Shape shape = batch_first ? Shape{N, L, E} : Shape{L, N, E};
    auto x = input(shape, 26);
    for (const auto& c : mask_cases()) {
      SCOPED_TRACE(std::string(c.name) + (batch_first ? ", batch_first" : ", seq first"));
      auto [out, weights] = mha->forward(x, x, x, c.key_padding_mask, true, c.attn_mask, false, c.is_causal);
      auto [fout, fweights] = nn::functional::multi_head_attention_forward(
          x, x, x,
          nn::functional::MultiheadAttentionForwardFuncOptions<double>(
              E, H, mha->in_proj_weight, mha->in_proj_bias, 0.0, mha->out_proj->weight, mha->out_proj->bias)
              .key_padding_mask(c.key_padding_mask)
              .attn_mask(c.attn_mask)
              .average_attn_weights(false)
              .is_causal(c.is_causal)
              .batch_first(batch_first));
      EXPECT_EQ(out.value(), fout.value());
      EXPECT_EQ(weights.value(), fweights.value());
    }
  }
  // training(false) turns dropout off, as the module's eval() does.
  auto mha = make_mha(true, 0.5);
  auto x = input({N, L, E}, 27);
  auto opts = nn::functional::MultiheadAttentionForwardFuncOptions<double>(
                  E, H, mha->in_proj_weight, mha->in_proj_bias, 0.5, mha->out_proj->weight, mha->out_proj->bias)
                  .batch_first(true)
                  .need_weights(false);
  mha->eval();
  EXPECT_EQ(nn::functional::multi_head_attention_forward(x, x, x, opts.training(false)).first.value(),
            mha->forward(x, x, x, {}, false).first.value());
  XGRAD_EXPECT_THROW_MSG(nn::functional::multi_head_attention_forward(x, x, x, opts.num_heads(4)), "embed_dim",
                         "num_heads", "6", "4");
}
