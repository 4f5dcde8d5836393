// TransformerEncoderLayer and TransformerEncoder: gradient checks over inputs and parameters
// (pre- and post-norm, relu and gelu, masks, dropout re-seeded), PyTorch's formulas
// rebuilt from the layer's own submodules, the documents' step-by-step block, and the encoder
// as repeated copies of its layer. TransformerDecoderLayer, TransformerDecoder and Transformer:
// the same kinds of checks, plus PyTorch's state_dict keys, defaults and init, and input errors.
#include <cmath>
#include <limits>

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
    for (const char* act : {"relu", "gelu", "gelu_tanh"}) {
      SCOPED_TRACE(std::string(norm_first ? "pre-norm " : "post-norm ") + act);
      auto l = make_layer(Options(6, 2).dim_feedforward(10).dropout(0.3).activation(act).batch_first(true)
                              .norm_first(norm_first));
      auto x = input({2, 5, 6}, 8);
      auto sa = [&](const Tensor<double>& t) {
        return l->dropout1->forward(l->self_attn->forward(t, t, t, kKeyPadding, false, causal(5)).first);
      };
      auto ff = [&](const Tensor<double>& t) {
        Tensor<double> h = l->linear1->forward(t);
        h = std::string(act) == "relu" ? relu(h) : std::string(act) == "gelu" ? gelu(h) : gelu(h, "tanh");
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
    y_modules.backward(Tensor<double>(upstream));
    const Array<double> g_in = in_linear->weight.grad(), g_out = out_linear->bias.grad();
    ff.zero_grad();

    manual_seed(70);
    const Tensor<double> y_steps = notebook_block(x2, a2, scale, shift, *in_linear, *out_linear, p, true);
    y_steps.backward(Tensor<double>(upstream));

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

// ---- decoder and transformer ----------------------------------------------------------------------

namespace {

using DecoderLayer = nn::TransformerDecoderLayer<double>;
using DecoderOptions = nn::TransformerDecoderLayerOptions;

std::shared_ptr<DecoderLayer> make_decoder_layer(const DecoderOptions& o, std::uint64_t seed = 7) {
  manual_seed(seed);
  auto layer = std::make_shared<DecoderLayer>(o);
  randomize(*layer, seed + 100);
  return layer;
}

// tgt length 4, memory length 5, batch 2: padding that never masks a whole row (key 0 stays open).
const BoolArray kTgtPadding{{false, false, false, true}, {false, false, false, false}};
const BoolArray kMemoryPadding{{false, false, false, false, true}, {false, false, false, true, true}};

// The (4, 5) causal mask of a query i over memory keys j: j > i masked.
BoolArray causal_4x5() {
  BoolArray c = BoolArray::from_shape({4, 5});
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 5; ++j) c(i, j) = j > i;
  return c;
}

}  // namespace

TEST(TransformerDecoderLayer, KeysAndSubmodulesArePyTorchs) {
  // [k for k in nn.TransformerDecoderLayer(4, 2, 8).state_dict()] in torch 1.13.
  const std::vector<std::string> torch_keys = {
      "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight", "self_attn.out_proj.bias",
      "multihead_attn.in_proj_weight", "multihead_attn.in_proj_bias", "multihead_attn.out_proj.weight",
      "multihead_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
      "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias", "norm3.weight", "norm3.bias"};
  DecoderLayer layer(DecoderOptions(4, 2).dim_feedforward(8));
  EXPECT_EQ(layer.state_dict().keys(), torch_keys);
  std::vector<std::string> children;
  for (const auto& [name, m] : layer.named_children()) children.push_back(name);
  EXPECT_EQ(children, (std::vector<std::string>{"self_attn", "multihead_attn", "linear1", "dropout", "linear2", "norm1",
                                                "norm2", "norm3", "dropout1", "dropout2", "dropout3"}));
  // PyTorch's defaults.
  const DecoderOptions o(4, 2);
  EXPECT_EQ(o.dim_feedforward(), 2048);
  EXPECT_EQ(o.dropout(), 0.1);
  EXPECT_EQ(o.activation(), "relu");
  EXPECT_EQ(o.layer_norm_eps(), 1e-5);
  EXPECT_FALSE(o.batch_first());
  EXPECT_FALSE(o.norm_first());
  EXPECT_TRUE(o.bias());
  EXPECT_EQ(DecoderLayer(DecoderOptions(4, 2).dim_feedforward(8).bias(false)).parameters().size(), 9u);
}

TEST(TransformerDecoderLayer, GradcheckBothNormOrdersWithEveryMask) {
  // All four masks (bool and float), tgt and memory both checked; sequence-first and batch-first.
  Array<double> memory_mask = zeros<double>({4, 5}).value();
  memory_mask(0, 3) = -1.5;
  memory_mask(2, 1) = 0.7;
  for (bool norm_first : {false, true}) {
    SCOPED_TRACE(norm_first ? "pre-norm gelu, batch_first" : "post-norm relu, sequence-first");
    auto layer = make_decoder_layer(DecoderOptions(4, 2).dim_feedforward(6).dropout(0.0)
                                        .activation(norm_first ? "gelu" : "relu").batch_first(norm_first)
                                        .norm_first(norm_first));
    const Shape tgt_shape = norm_first ? Shape{2, 4, 4} : Shape{4, 2, 4};
    const Shape memory_shape = norm_first ? Shape{2, 5, 4} : Shape{5, 2, 4};
    expect_module_gradcheck(
        [&](const Inputs& in) {
          return layer->forward(in[0], in[1], causal(4), memory_mask, kTgtPadding, kMemoryPadding);
        },
        {input(tgt_shape, 20), input(memory_shape, 21)}, layer->parameters());
  }
}

TEST(TransformerDecoderLayer, FollowsTheFormulasOfItsSubmodules) {
  // post-norm: x = norm1(x + sa(x)); x = norm2(x + mha(x, memory)); x = norm3(x + ff(x))
  // pre-norm:  x = x + sa(norm1(x)); x = x + mha(norm2(x), memory); x = x + ff(norm3(x))
  // With dropout 0.3 and the same seed, the draws happen in the same order, so results are equal.
  for (bool norm_first : {false, true}) {
    for (const char* act : {"relu", "gelu"}) {
      SCOPED_TRACE(std::string(norm_first ? "pre-norm " : "post-norm ") + act);
      auto l = make_decoder_layer(DecoderOptions(6, 2).dim_feedforward(10).dropout(0.3).activation(act)
                                      .batch_first(true).norm_first(norm_first));
      const auto tgt = input({2, 4, 6}, 22), memory = input({2, 5, 6}, 23);
      auto sa = [&](const Tensor<double>& t) {
        return l->dropout1->forward(l->self_attn->forward(t, t, t, kTgtPadding, false, causal(4)).first);
      };
      auto mha = [&](const Tensor<double>& t) {
        return l->dropout2->forward(l->multihead_attn->forward(t, memory, memory, kMemoryPadding, false).first);
      };
      auto ff = [&](const Tensor<double>& t) {
        Tensor<double> h = l->linear1->forward(t);
        h = std::string(act) == "relu" ? relu(h) : gelu(h);
        return l->dropout3->forward(l->linear2->forward(l->dropout->forward(h)));
      };
      manual_seed(35);
      Tensor<double> expected = tgt;
      if (norm_first) {
        expected = expected + sa(l->norm1->forward(expected));
        expected = expected + mha(l->norm2->forward(expected));
        expected = expected + ff(l->norm3->forward(expected));
      } else {
        expected = l->norm1->forward(expected + sa(expected));
        expected = l->norm2->forward(expected + mha(expected));
        expected = l->norm3->forward(expected + ff(expected));
      }
      manual_seed(35);
      auto y = l->forward(tgt, memory, causal(4), {}, kTgtPadding, kMemoryPadding);
      EXPECT_EQ(y.value(), expected.value());
      // Dropout is active in training (a different seed changes the output) and off in eval.
      manual_seed(36);
      EXPECT_GT(max_abs_diff(l->forward(tgt, memory, causal(4), {}, kTgtPadding, kMemoryPadding).value(), y.value()),
                1e-6);
      l->eval();
      auto l0 = std::make_shared<DecoderLayer>(DecoderOptions(6, 2).dim_feedforward(10).dropout(0.0).activation(act)
                                                   .batch_first(true).norm_first(norm_first));
      l0->load_state_dict(l->state_dict());
      EXPECT_EQ(l->forward(tgt, memory, causal(4), {}, kTgtPadding, kMemoryPadding).value(),
                l0->forward(tgt, memory, causal(4), {}, kTgtPadding, kMemoryPadding).value());
    }
  }
}

TEST(TransformerDecoderLayer, IsCausalFlagsEqualTheCausalMasks) {
  auto l = make_decoder_layer(DecoderOptions(6, 2).dim_feedforward(8).dropout(0.0).batch_first(true));
  const auto tgt = input({2, 4, 6}, 24), memory = input({2, 5, 6}, 25);
  const auto y = l->forward(tgt, memory, {}, {}, {}, kMemoryPadding, /*tgt_is_causal=*/true);
  EXPECT_EQ(y.value(), l->forward(tgt, memory, causal(4), {}, {}, kMemoryPadding).value());
  EXPECT_GT(max_abs_diff(y.value(), l->forward(tgt, memory, {}, {}, {}, kMemoryPadding).value()), 1e-3);
  EXPECT_EQ(l->forward(tgt, memory, {}, {}, {}, {}, false, /*memory_is_causal=*/true).value(),
            l->forward(tgt, memory, {}, causal_4x5()).value());
}

TEST(TransformerDecoderLayer, UnbatchedInputIsTheBatchOfOne) {
  auto l = make_decoder_layer(DecoderOptions(6, 3).dim_feedforward(8).dropout(0.0));
  const auto tgt = input({4, 6}, 26), memory = input({5, 6}, 27);
  const auto y = l->forward(tgt, memory, causal(4));
  EXPECT_EQ(y.shape(), (Shape{4, 6}));
  const auto batched = l->forward(unsqueeze(tgt, 1), unsqueeze(memory, 1), causal(4));
  EXPECT_LT(max_abs_diff(y.value(), squeeze(batched, 1).value()), 1e-14);
}

TEST(TransformerDecoderLayer, BadInputsSayWhatWasExpected) {
  XGRAD_EXPECT_THROW_MSG(DecoderLayer(DecoderOptions(6, 2).activation("tanh")),
                         "activation should be relu/gelu, not tanh");
  XGRAD_EXPECT_THROW_MSG(DecoderLayer(DecoderOptions(6, 4)), "divisible by num_heads");
  auto l = make_decoder_layer(DecoderOptions(6, 2).dim_feedforward(8).batch_first(true));
  const auto tgt = input({2, 4, 6}, 28);
  XGRAD_EXPECT_THROW_MSG(l->forward(tgt, input({2, 5, 4}, 29)),
                         "tgt and memory must end in d_model=6, got (2, 4, 6) and (2, 5, 4)");
  XGRAD_EXPECT_THROW_MSG(l->forward(tgt, input({3, 5, 6}, 29)),
                         "same batch size (dim 0 with batch_first), got (2, 4, 6) and (3, 5, 6)");
  XGRAD_EXPECT_THROW_MSG(l->forward(tgt, input({5, 6}, 29)),
                         "must both be batched (3 dims) or both unbatched (2 dims), got (2, 4, 6) and (5, 6)");
  const auto memory = input({2, 5, 6}, 30);
  XGRAD_EXPECT_THROW_MSG(l->forward(tgt, memory, causal(5)), "attn_mask must be (L, S) = (4, 4)");
  XGRAD_EXPECT_THROW_MSG(l->forward(tgt, memory, {}, causal(4)), "attn_mask must be (L, S) = (4, 5)");
  XGRAD_EXPECT_THROW_MSG(l->forward(tgt, memory, {}, {}, kMemoryPadding), "key_padding_mask must be (N, S) = (2, 4)");
  XGRAD_EXPECT_THROW_MSG(l->forward(tgt, memory, {}, {}, {}, kTgtPadding), "key_padding_mask must be (N, S) = (2, 5)");
  XGRAD_EXPECT_THROW_MSG(nn::TransformerDecoder<double>(nullptr, 2), "decoder_layer is null");
  XGRAD_EXPECT_THROW_MSG(nn::TransformerDecoder<double>(l, -1), "num_layers must be non-negative, got -1");
}

TEST(TransformerDecoder, EqualsItsLayerAppliedNumLayersTimes) {
  auto layer = make_decoder_layer(DecoderOptions(4, 2).dim_feedforward(8).dropout(0.0).activation("gelu")
                                      .batch_first(true).norm_first(true));
  auto norm = std::make_shared<nn::LayerNorm<double>>(nn::LayerNormOptions(4).eps(1e-6));
  randomize(*norm, 51);
  nn::TransformerDecoder<double> dec(layer, 3, norm);
  EXPECT_EQ(dec.num_layers(), 3);
  EXPECT_EQ(dec.state_dict().keys().front(), "layers.0.self_attn.in_proj_weight");
  EXPECT_EQ(dec.state_dict().keys().back(), "norm.bias");
  const auto tgt = input({2, 4, 4}, 31), memory = input({2, 5, 4}, 32);
  Tensor<double> expected = tgt;
  for (int i = 0; i < 3; ++i) expected = layer->forward(expected, memory, causal(4), {}, kTgtPadding, kMemoryPadding);
  expected = norm->forward(expected);
  EXPECT_EQ(dec.forward(tgt, memory, causal(4), {}, kTgtPadding, kMemoryPadding).value(), expected.value());
  EXPECT_EQ(dec.forward(tgt, memory, {}, {}, {}, {}, true).value(), dec.forward(tgt, memory, causal(4)).value());
  // Copies, not shared: training one layer leaves the others.
  dec.layer(0)->linear1->weight.mutable_value() += 1.0;
  EXPECT_GT(max_abs_diff(dec.layer(0)->linear1->weight.value(), dec.layer(1)->linear1->weight.value()), 0.5);
}

TEST(TransformerDecoder, GradcheckTwoLayersWithFinalNorm) {
  auto layer = make_decoder_layer(DecoderOptions(4, 2).dim_feedforward(4).dropout(0.1).batch_first(true));
  nn::TransformerDecoder<double> dec(layer, 2, std::make_shared<nn::LayerNorm<double>>(nn::LayerNormOptions(4)));
  randomize(dec, 52, 0.2);  // the two copies now differ
  expect_module_gradcheck(
      [&](const Inputs& in) {
        manual_seed(37);  // the same dropout masks at every evaluation
        return dec.forward(in[0], in[1], causal(4), {}, {}, kMemoryPadding);
      },
      {input({2, 4, 4}, 33), input({2, 5, 4}, 34)}, dec.parameters());
}

namespace {

using Transformer = nn::Transformer<double>;
using TransformerOptions = nn::TransformerOptions<double>;

}  // namespace

TEST(Transformer, KeysDefaultsAndInitArePyTorchs) {
  // [k for k in nn.Transformer(4, 2, 1, 1, 8).state_dict()] in torch 1.13.
  const std::vector<std::string> torch_keys = {
      "encoder.layers.0.self_attn.in_proj_weight", "encoder.layers.0.self_attn.in_proj_bias",
      "encoder.layers.0.self_attn.out_proj.weight", "encoder.layers.0.self_attn.out_proj.bias",
      "encoder.layers.0.linear1.weight", "encoder.layers.0.linear1.bias", "encoder.layers.0.linear2.weight",
      "encoder.layers.0.linear2.bias", "encoder.layers.0.norm1.weight", "encoder.layers.0.norm1.bias",
      "encoder.layers.0.norm2.weight", "encoder.layers.0.norm2.bias", "encoder.norm.weight", "encoder.norm.bias",
      "decoder.layers.0.self_attn.in_proj_weight", "decoder.layers.0.self_attn.in_proj_bias",
      "decoder.layers.0.self_attn.out_proj.weight", "decoder.layers.0.self_attn.out_proj.bias",
      "decoder.layers.0.multihead_attn.in_proj_weight", "decoder.layers.0.multihead_attn.in_proj_bias",
      "decoder.layers.0.multihead_attn.out_proj.weight", "decoder.layers.0.multihead_attn.out_proj.bias",
      "decoder.layers.0.linear1.weight", "decoder.layers.0.linear1.bias", "decoder.layers.0.linear2.weight",
      "decoder.layers.0.linear2.bias", "decoder.layers.0.norm1.weight", "decoder.layers.0.norm1.bias",
      "decoder.layers.0.norm2.weight", "decoder.layers.0.norm2.bias", "decoder.layers.0.norm3.weight",
      "decoder.layers.0.norm3.bias", "decoder.norm.weight", "decoder.norm.bias"};
  manual_seed(40);
  Transformer t(TransformerOptions(4, 2).num_encoder_layers(1).num_decoder_layers(1).dim_feedforward(8));
  EXPECT_EQ(t.state_dict().keys(), torch_keys);
  // nn.Transformer's defaults.
  const TransformerOptions o;
  EXPECT_EQ(o.d_model(), 512);
  EXPECT_EQ(o.nhead(), 8);
  EXPECT_EQ(o.num_encoder_layers(), 6);
  EXPECT_EQ(o.num_decoder_layers(), 6);
  EXPECT_EQ(o.dim_feedforward(), 2048);
  EXPECT_EQ(o.dropout(), 0.1);
  EXPECT_EQ(o.activation(), "relu");
  EXPECT_EQ(o.custom_encoder(), nullptr);
  EXPECT_EQ(o.custom_decoder(), nullptr);
  EXPECT_EQ(o.layer_norm_eps(), 1e-5);
  EXPECT_FALSE(o.batch_first());
  EXPECT_FALSE(o.norm_first());
  // _reset_parameters: every matrix is xavier-uniform, U(-a, a) with a = sqrt(6 / (fan_in + fan_out)),
  // and spreads over that range (Linear's default bound 1/sqrt(fan_in) is smaller for linear2);
  // vectors keep their module's init: zero attention biases, unit norm weights.
  for (const auto& [key, p] : t.named_parameters()) {
    SCOPED_TRACE(key);
    if (p.dim() > 1) {
      const double a = std::sqrt(6.0 / static_cast<double>(p.size(0) + p.size(1)));
      const double top = xt::amax(xt::abs(p.value()))();
      EXPECT_LE(top, a);
      EXPECT_GT(top, 0.7 * a);
    } else if (key.find("in_proj_bias") != std::string::npos || key.find("out_proj.bias") != std::string::npos) {
      EXPECT_EQ(xt::amax(xt::abs(p.value()))(), 0.0);
    } else if (key.find("norm") != std::string::npos && key.find("weight") != std::string::npos) {
      EXPECT_EQ(p.value(), xt::ones<double>(p.shape()));
    }
  }
  // The encoder's and decoder's copies start equal, as PyTorch's deep copies do, until the reset.
  manual_seed(40);
  Transformer t2(TransformerOptions(4, 2).num_encoder_layers(2).num_decoder_layers(2).dim_feedforward(8));
  EXPECT_GT(max_abs_diff(t2.encoder->layer(0)->linear1->weight.value(), t2.encoder->layer(1)->linear1->weight.value()),
            1e-3);
}

TEST(Transformer, IsItsEncoderThenItsDecoder) {
  for (bool norm_first : {false, true}) {
    SCOPED_TRACE(norm_first ? "pre-norm" : "post-norm");
    manual_seed(41);
    Transformer t(TransformerOptions(6, 3).num_encoder_layers(2).num_decoder_layers(1).dim_feedforward(8)
                      .dropout(0.2).activation("gelu").batch_first(true).norm_first(norm_first));
    randomize(t, 42, 0.1);
    EXPECT_EQ(t.encoder->num_layers(), 2);
    EXPECT_EQ(t.decoder->num_layers(), 1);
    ASSERT_NE(t.encoder->norm, nullptr);
    ASSERT_NE(t.decoder->norm, nullptr);
    const auto src = input({2, 5, 6}, 43), tgt = input({2, 4, 6}, 44);
    const auto mask = Transformer::generate_square_subsequent_mask(4).value();
    manual_seed(45);
    const auto memory = t.encoder->forward(src, {}, kMemoryPadding);
    const auto expected = t.decoder->forward(tgt, memory, mask, {}, kTgtPadding, kMemoryPadding);
    manual_seed(45);
    const auto y = t.forward(src, tgt, {}, mask, {}, kMemoryPadding, kTgtPadding, kMemoryPadding);
    EXPECT_EQ(y.value(), expected.value());
    EXPECT_EQ(y.shape(), tgt.shape());
    // tgt_is_causal is the causal mask; in eval mode dropout is off, so the output is the same for any seed.
    t.eval();
    const auto e = t.forward(src, tgt, {}, mask);
    manual_seed(46);
    EXPECT_EQ(t.forward(src, tgt, {}, {}, {}, {}, {}, {}, false, /*tgt_is_causal=*/true).value(), e.value());
    t.train();
    manual_seed(46);
    EXPECT_GT(max_abs_diff(t.forward(src, tgt, {}, mask).value(), e.value()), 1e-6);
  }
}

TEST(Transformer, GenerateSquareSubsequentMask) {
  const Array<float> m = nn::Transformer<float>::generate_square_subsequent_mask(3).value();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(m, (Array<float>{{0, -inf, -inf}, {0, 0, -inf}, {0, 0, 0}}));
  EXPECT_EQ(Transformer::generate_square_subsequent_mask(0).shape(), (Shape{0, 0}));
  EXPECT_FALSE(Transformer::generate_square_subsequent_mask(2).requires_grad());
  XGRAD_EXPECT_THROW_MSG(Transformer::generate_square_subsequent_mask(-1), "expected a non-negative size, got -1");
}

TEST(Transformer, CustomEncoderAndDecoder) {
  auto enc_layer = std::make_shared<nn::TransformerEncoderLayer<double>>(
      nn::TransformerEncoderLayerOptions(4, 2).dim_feedforward(8).dropout(0.0));
  auto custom_encoder = std::make_shared<nn::TransformerEncoder<double>>(enc_layer, 1);  // no final norm
  auto custom_decoder = std::make_shared<nn::TransformerDecoder<double>>(
      make_decoder_layer(DecoderOptions(4, 2).dim_feedforward(8).dropout(0.0)), 2);
  Transformer t(TransformerOptions(4, 2).custom_encoder(custom_encoder).custom_decoder(custom_decoder).dropout(0.0));
  EXPECT_EQ(t.encoder, custom_encoder);
  EXPECT_EQ(t.decoder, custom_decoder);
  EXPECT_EQ(t.decoder->num_layers(), 2);
  EXPECT_FALSE(t.state_dict().contains("encoder.norm.weight"));
  const auto src = input({5, 2, 4}, 47), tgt = input({4, 2, 4}, 48);
  EXPECT_EQ(t.forward(src, tgt).value(), custom_decoder->forward(tgt, custom_encoder->forward(src)).value());
}

TEST(Transformer, BadInputsSayWhatWasExpected) {
  manual_seed(49);
  Transformer t(TransformerOptions(4, 2).num_encoder_layers(1).num_decoder_layers(1).dim_feedforward(8));
  XGRAD_EXPECT_THROW_MSG(t.forward(input({5, 2, 4}, 1), input({4, 3, 4}, 2)),
                   "the batch number of src and tgt must be equal (dim 1 without batch_first), got (5, 2, 4) and "
                   "(4, 3, 4)");
  XGRAD_EXPECT_THROW_MSG(t.forward(input({5, 2, 6}, 1), input({4, 2, 4}, 2)),
                   "the feature number of src and tgt must be equal to d_model=4, got (5, 2, 6) and (4, 2, 4)");
  XGRAD_EXPECT_THROW_MSG(t.forward(input({5, 4}, 1), input({4, 2, 4}, 2)),
                         "must both be batched (3 dims) or both unbatched (2 dims), got (5, 4) and (4, 2, 4)");
  XGRAD_EXPECT_THROW_MSG(t.forward(input({5, 2, 4}, 1), input({4, 2, 4}, 2), {}, causal(5)),
                         "attn_mask must be (L, S) = (4, 4)");
  XGRAD_EXPECT_THROW_MSG(Transformer(TransformerOptions(6, 4)), "divisible by num_heads");
  XGRAD_EXPECT_THROW_MSG(Transformer(TransformerOptions(4, 2).activation("swish")),
                         "activation should be relu/gelu, not swish");
}

TEST(Transformer, GradcheckWithMasks) {
  manual_seed(50);
  Transformer t(TransformerOptions(4, 2).num_encoder_layers(1).num_decoder_layers(1).dim_feedforward(6).dropout(0.0)
                    .norm_first(true));
  randomize(t, 53, 0.1);
  expect_module_gradcheck(
      [&](const Inputs& in) {
        return t.forward(in[0], in[1], {}, causal(4), {}, kMemoryPadding, kTgtPadding, kMemoryPadding);
      },
      {input({5, 2, 4}, 35), input({4, 2, 4}, 36)}, t.parameters());
}
