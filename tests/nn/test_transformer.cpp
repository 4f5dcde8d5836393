// TransformerEncoderLayer and TransformerEncoder: gradient checks over inputs and parameters
// (pre- and post-norm, relu and gelu, masks, dropout re-seeded), PyTorch's formulas
// rebuilt from the layer's own submodules, the documents' step-by-step block, and the encoder
// as repeated copies of its layer.
#include <cmath>

#include <xtensor/xview.hpp>

#include "nn_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

using Layer = nn::TransformerEncoderLayer<double>;
using Options = nn::TransformerEncoderLayerOptions;

void randomize(nn::Module<double>& m, std::uint64_t seed, double scale = 0.4) {
  Generator g(seed);
  for (auto p : m.parameters()) {
    Array<double>& v = p.mutable_value();
    for (auto& x : v) x += scale * g.normal();
  }
}

std::shared_ptr<Layer> make_layer(const Options& o, std::uint64_t seed = 5) {
  manual_seed(seed);
  auto layer = std::make_shared<Layer>(o);
  randomize(*layer, seed + 100);
  return layer;
}

const BoolArray kKeyPadding{{false, false, false, false, false}, {false, false, false, true, true}};

}  // namespace

TEST(TransformerEncoderLayer, GradcheckPreAndPostNormReluAndGelu) {
  for (bool norm_first : {false, true}) {
    for (const char* act : {"relu", "gelu"}) {
      SCOPED_TRACE(std::string(norm_first ? "pre-norm " : "post-norm ") + act);
      auto layer = make_layer(Options(4, 2).dim_feedforward(8).dropout(0.0).activation(act).batch_first(true)
                                  .norm_first(norm_first));
      expect_module_gradcheck([&](const Inputs& in) { return layer->forward(in[0]); }, {input({2, 3, 4}, 1)},
                              layer->parameters());
    }
  }
}

TEST(TransformerEncoderLayer, GradcheckWithMasksSeqFirstAndNoBias) {
  // Post-norm relu with a causal bool mask and key padding (the golden case's configuration).
  auto post = make_layer(Options(6, 2).dim_feedforward(16).dropout(0.0).batch_first(true));
  expect_module_gradcheck([&](const Inputs& in) { return post->forward(in[0], causal(5), kKeyPadding); },
                          {input({2, 5, 6}, 2)}, post->parameters());
  expect_module_gradcheck([&](const Inputs& in) { return post->forward(in[0], {}, kKeyPadding, /*is_causal=*/true); },
                          {input({2, 5, 6}, 2)}, post->parameters());
  // Sequence-first (S, N, E) with key padding; pre-norm gelu without biases.
  auto seq = make_layer(Options(6, 3).dim_feedforward(12).dropout(0.0).layer_norm_eps(1e-6));
  expect_module_gradcheck([&](const Inputs& in) { return seq->forward(in[0], {}, kKeyPadding); },
                          {input({5, 2, 6}, 3)}, seq->parameters());
  auto nobias = make_layer(Options(4, 2).dim_feedforward(8).dropout(0.0).activation("gelu").norm_first(true)
                               .batch_first(true).bias(false));
  EXPECT_EQ(nobias->parameters().size(), 6u);
  expect_module_gradcheck([&](const Inputs& in) { return nobias->forward(in[0]); }, {input({2, 3, 4}, 4)},
                          nobias->parameters());
}

TEST(TransformerEncoderLayer, GradcheckWithDropoutReseededEachEvaluation) {
  for (bool norm_first : {false, true}) {
    SCOPED_TRACE(norm_first ? "pre-norm" : "post-norm");
    auto layer = make_layer(Options(4, 2).dim_feedforward(8).dropout(0.2).activation("gelu").batch_first(true)
                                .norm_first(norm_first));
    ASSERT_TRUE(layer->is_training());
    expect_module_gradcheck(
        [&](const Inputs& in) {
          manual_seed(31);
          return layer->forward(in[0]);
        },
        {input({2, 3, 4}, 5)}, layer->parameters());
  }
}

TEST(TransformerEncoder, GradcheckTwoLayersWithFinalNorm) {
  auto layer = make_layer(Options(4, 2).dim_feedforward(8).dropout(0.0).activation("gelu").batch_first(true)
                              .norm_first(true));
  auto norm = std::make_shared<nn::LayerNorm<double>>(nn::LayerNormOptions(4));
  nn::TransformerEncoder<double> enc(layer, 2, norm);
  randomize(enc, 41, 0.2);  // the two copies now differ
  expect_module_gradcheck([&](const Inputs& in) { return enc.forward(in[0]); }, {input({2, 3, 4}, 6)},
                          enc.parameters());
  // With masks, post-norm, and dropout re-seeded.
  auto post = make_layer(Options(6, 2).dim_feedforward(16).dropout(0.1).batch_first(true));
  nn::TransformerEncoder<double> enc2(post, 2);
  expect_module_gradcheck(
      [&](const Inputs& in) {
        manual_seed(32);
        return enc2.forward(in[0], causal(5), kKeyPadding);
      },
      {input({2, 5, 6}, 7)}, enc2.parameters());
}

TEST(TransformerEncoderLayer, FollowsTheFormulasOfItsSubmodules) {
  // post-norm: x = norm1(x + dropout1(sa(x)));  x = norm2(x + dropout2(linear2(dropout(act(linear1(x))))))
  // pre-norm:  x = x + dropout1(sa(norm1(x)));  x = x + dropout2(ff(norm2(x)))
  // With dropout 0.3 and the same seed, the draws happen in the same order, so results are equal.
  for (bool norm_first : {false, true}) {
    for (const char* act : {"relu", "gelu"}) {
      SCOPED_TRACE(std::string(norm_first ? "pre-norm " : "post-norm ") + act);
      auto l = make_layer(Options(6, 2).dim_feedforward(10).dropout(0.3).activation(act).batch_first(true)
                              .norm_first(norm_first));
      auto x = input({2, 5, 6}, 8);
      auto sa = [&](const Tensor<double>& t) {
        return l->dropout1->forward(l->self_attn->forward(t, t, t, kKeyPadding, false, causal(5)).first);
      };
      auto ff = [&](const Tensor<double>& t) {
        Tensor<double> h = l->linear1->forward(t);
        h = std::string(act) == "relu" ? relu(h) : gelu(h);  // gelu: the exact erf form
        return l->dropout2->forward(l->linear2->forward(l->dropout->forward(h)));
      };
      manual_seed(33);
      Tensor<double> expected = x;
      if (norm_first) {
        expected = expected + sa(l->norm1->forward(expected));
        expected = expected + ff(l->norm2->forward(expected));
      } else {
        expected = l->norm1->forward(expected + sa(expected));
        expected = l->norm2->forward(expected + ff(expected));
      }
      manual_seed(33);
      auto y = l->forward(x, causal(5), kKeyPadding);
      EXPECT_EQ(y.value(), expected.value());
      // Dropout is active in training (a different seed changes the output) and off in eval.
      manual_seed(34);
      EXPECT_GT(max_abs_diff(l->forward(x, causal(5), kKeyPadding).value(), y.value()), 1e-6);
      l->eval();
      auto e1 = l->forward(x, causal(5), kKeyPadding);
      auto l0 = std::make_shared<Layer>(Options(6, 2).dim_feedforward(10).dropout(0.0).activation(act)
                                            .batch_first(true).norm_first(norm_first));
      l0->load_state_dict(l->state_dict());
      EXPECT_EQ(e1.value(), l0->forward(x, causal(5), kKeyPadding).value());
    }
  }
}

TEST(TransformerEncoderLayer, IsCausalEqualsTheCausalMask) {
  auto l = make_layer(Options(6, 2).dim_feedforward(16).dropout(0.0).batch_first(true));
  auto x = input({2, 5, 6}, 9);
  EXPECT_EQ(l->forward(x, {}, kKeyPadding, true).value(), l->forward(x, causal(5), kKeyPadding).value());
  EXPECT_GT(max_abs_diff(l->forward(x, {}, kKeyPadding, true).value(), l->forward(x, {}, kKeyPadding).value()), 1e-3);
}

TEST(TransformerEncoder, EqualsItsLayerAppliedNumLayersTimes) {
  // The 004 notebook: an encoder of deep copies computes, at initialization, what applying the
  // one layer num_layers times computes; then the final norm. Masks reach every layer.
  auto layer = make_layer(Options(4, 2).dim_feedforward(16).dropout(0.0).activation("gelu").batch_first(true)
                              .norm_first(true));
  auto norm = std::make_shared<nn::LayerNorm<double>>(nn::LayerNormOptions(4).eps(1e-6));
  randomize(*norm, 50);
  nn::TransformerEncoder<double> enc(layer, 3, norm);
  auto x = input({2, 5, 4}, 10);
  Tensor<double> expected = x;
  for (int i = 0; i < 3; ++i) expected = layer->forward(expected, causal(5), kKeyPadding);
  expected = norm->forward(expected);
  EXPECT_EQ(enc.forward(x, causal(5), kKeyPadding).value(), expected.value());
  EXPECT_EQ(enc.forward(x).value(), norm->forward(layer->forward(layer->forward(layer->forward(x)))).value());
  EXPECT_EQ(enc.forward(x, {}, {}, true).value(), enc.forward(x, causal(5)).value());
}

// ---- the documents' step-by-step block -----------------------------------------------------------

namespace {

// The 001 notebook, op by op: r = dropout(a) + x; LayerNorm by hand with mean, biased variance,
// learnable scale and shift; Linear(d, 4d), GELU (tanh form, written out), Linear(4d, d);
// dropout; residual add of r.
Tensor<double> notebook_block(const Tensor<double>& x, const Tensor<double>& a, const Tensor<double>& scale,
                              const Tensor<double>& shift, nn::Linear<double>& in_linear,
                              nn::Linear<double>& out_linear, double p, bool tanh_gelu) {
  Tensor<double> result = dropout(a, p) + x;
  const Tensor<double> intermediate = result;
  const Tensor<double> mu = mean(result, {-1}, true);
  const Tensor<double> var_ = var(result, {-1}, /*unbiased=*/false, true);
  const Tensor<double> norm = (result - mu) / sqrt(var_ + 1e-5);
  const Tensor<double> final_norm = scale * norm + shift;
  Tensor<double> h = in_linear.forward(final_norm);
  if (tanh_gelu) h = 0.5 * h * (1.0 + tanh(std::sqrt(2.0 / M_PI) * (h + 0.044715 * pow(h, 3.0))));
  else h = gelu(h);
  result = out_linear.forward(h);
  result = dropout(result, p);
  return result + intermediate;
}

}  // namespace

TEST(DocumentsBlock, StepByStepEqualsTheModules) {
  // The block reproduced with modules: Dropout, residual add, LayerNorm (scale = weight,
  // shift = bias), Sequential(Linear(d, 4d), GELU(tanh), Linear(4d, d)), Dropout, residual add.
  const std::size_t d = 10;
  for (double p : {0.0, 0.25}) {
    SCOPED_TRACE(p);
    manual_seed(60);
    nn::Dropout<double> drop(p);
    nn::LayerNorm<double> ln{nn::LayerNormOptions(d)};
    randomize(ln, 61);
    auto in_linear = std::make_shared<nn::Linear<double>>(d, 4 * d);
    auto out_linear = std::make_shared<nn::Linear<double>>(4 * d, d);
    nn::Sequential<double> ff;
    ff.push_back(in_linear);
    ff.push_back(std::make_shared<nn::GELU<double>>(nn::GELUOptions().approximate("tanh")));
    ff.push_back(out_linear);
    // Leaves holding the same scale and shift, for the hand-written LayerNorm.
    Tensor<double> scale(ln.weight.value(), true), shift(ln.bias.value(), true);

    // original_input (batch 3, seq 7, emb 10) and the attention output, one copy per version.
    auto x1 = input({3, 7, d}, 11), a1 = input({3, 7, d}, 12);
    auto x2 = input({3, 7, d}, 11), a2 = input({3, 7, d}, 12);
    const Array<double> upstream = randn<double>({3, 7, d}).value();

    manual_seed(70);
    const Tensor<double> r = drop.forward(a1) + x1;
    const Tensor<double> y_modules = r + drop.forward(ff.forward(ln.forward(r)));
    y_modules.backward(upstream);
    const Array<double> g_in = in_linear->weight.grad(), g_out = out_linear->bias.grad();
    ff.zero_grad();

    manual_seed(70);
    const Tensor<double> y_steps = notebook_block(x2, a2, scale, shift, *in_linear, *out_linear, p, true);
    y_steps.backward(upstream);

    EXPECT_LT(max_abs_diff(y_modules.value(), y_steps.value()), 1e-12);
    EXPECT_LT(max_abs_diff(x1.grad(), x2.grad()), 1e-12);
    EXPECT_LT(max_abs_diff(a1.grad(), a2.grad()), 1e-12);
    EXPECT_LT(max_abs_diff(ln.weight.grad(), scale.grad()), 1e-11);
    EXPECT_LT(max_abs_diff(ln.bias.grad(), shift.grad()), 1e-11);
    EXPECT_LT(max_abs_diff(g_in, in_linear->weight.grad()), 1e-11);
    EXPECT_LT(max_abs_diff(g_out, out_linear->bias.grad()), 1e-11);
    if (p > 0) {  // the masks were really drawn: some attention outputs were dropped
      std::size_t dropped = 0;
      for (double g : a1.grad()) dropped += g == 0.0;
      EXPECT_GT(dropped, 10u);
    }
  }
}

TEST(DocumentsBlock, StepByStepEqualsTheSecondHalfOfAPreNormLayer) {
  // A pre-norm gelu layer: x + dropout1(sa(norm1(x))) is the notebook's "residual add" of the
  // attention output a; the rest of the layer is the notebook's block with norm2 as the
  // LayerNorm, linear1/linear2 as the feed-forward and the exact GELU (the layer's form).
  const std::size_t d = 10;
  auto layer = make_layer(Options(d, 2).dim_feedforward(4 * d).dropout(0.0).activation("gelu").batch_first(true)
                              .norm_first(true));
  auto x = input({3, 7, d}, 13);
  const Tensor<double> n1 = layer->norm1->forward(x);
  const Tensor<double> a = layer->dropout1->forward(layer->self_attn->forward(n1, n1, n1, {}, false).first);
  const Tensor<double> y_steps = notebook_block(x, a, layer->norm2->weight, layer->norm2->bias, *layer->linear1,
                                                *layer->linear2, 0.0, false);
  EXPECT_LT(max_abs_diff(y_steps.value(), layer->forward(x).value()), 1e-12);
}
