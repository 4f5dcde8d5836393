// nanoGPT's recipes in the library: warmup_cosine (train.py's get_lr as a LambdaLR factor) and
// warmup_cosine_lr (the same shape from torch's schedules), their values at chosen steps against
// the formulas worked by hand, and weight_decay_groups (configure_optimizers), its groups' members
// on a small GPT.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <xgrad/xgrad.hpp>

namespace {

namespace optim = xgrad::optim;

// warmup 10, max_steps 110, min_factor 0.1: (s + 1) / 11 up to step 9, then
// 0.1 + 0.9 (1 + cos(pi (s - 10) / 100)) / 2, then 0.1 from step 110 on.
TEST(WarmupCosine, ValuesAtChosenStepsMatchTheFormula) {
  const auto factor = optim::warmup_cosine(10, 110, 0.1);
  EXPECT_DOUBLE_EQ(factor(0), 1.0 / 11);
  EXPECT_DOUBLE_EQ(factor(4), 5.0 / 11);
  EXPECT_DOUBLE_EQ(factor(9), 10.0 / 11);
  EXPECT_DOUBLE_EQ(factor(10), 1.0);                                // cos(0) = 1: the peak
  EXPECT_DOUBLE_EQ(factor(35), 0.1 + 0.45 * (1 + std::sqrt(0.5)));  // a quarter: cos(pi / 4)
  EXPECT_NEAR(factor(60), 0.55, 1e-15);                             // half way: cos(pi / 2) = 0
  EXPECT_NEAR(factor(110), 0.1, 1e-15);                             // the end: cos(pi) = -1
  EXPECT_DOUBLE_EQ(factor(500), 0.1);                               // past it: the floor
  // No warmup and the default floor: a cosine from 1 down to 0.
  const auto plain = optim::warmup_cosine(0, 4);
  EXPECT_DOUBLE_EQ(plain(0), 1.0);
  EXPECT_NEAR(plain(2), 0.5, 1e-15);
  EXPECT_NEAR(plain(4), 0.0, 1e-15);
  // A warmup as long as the run: the cosine's span counts as one step, never a division by 0.
  EXPECT_DOUBLE_EQ(optim::warmup_cosine(5, 5, 0.2)(5), 1.0);
  EXPECT_NEAR(optim::warmup_cosine(5, 5, 0.2)(6), 0.2, 1e-15);
}

// As LambdaLR's function: each step's lr is the peak times the factor.
TEST(WarmupCosine, DrivesLambdaLR) {
  xgrad::nn::Linear<float> model(2, 1);
  optim::AdamW<float> optimizer(model.parameters(), optim::AdamWOptions(1e-3));
  const auto factor = optim::warmup_cosine(3, 20, 0.1);
  optim::LambdaLR<float> schedule(optimizer, factor);
  for (int step = 0; step < 25; ++step) {
    EXPECT_DOUBLE_EQ(optimizer.param_groups()[0].options().get_lr(), 1e-3 * factor(step)) << "step " << step;
    schedule.step();
  }
}

// torch's schedules chained: lr 1, warmup 4 from 0.1, max_steps 14: 0.1 + 0.9 s / 4 for s < 4, then
// (1 + cos(pi (s - 4) / 10)) / 2, 0 at step 14; no warmup: the cosine from step 0.
TEST(WarmupCosineLR, ValuesAtChosenStepsMatchTheFormula) {
  xgrad::nn::Linear<float> model(2, 1);
  optim::SGD<float> optimizer(model.parameters(), optim::SGDOptions(1.0));
  const auto schedule = optim::warmup_cosine_lr(optimizer, 4, 14, 0.1);
  const auto lr = [&] { return optimizer.param_groups()[0].options().get_lr(); };
  const std::vector<std::pair<int, double>> expected{
      {0, 0.1}, {1, 0.325}, {3, 0.775}, {4, 1.0}, {6, 0.5 * (1 + std::cos(M_PI / 5))}, {9, 0.5}, {14, 0.0}};
  for (int step = 0, i = 0; step <= 14; ++step, schedule->step()) {
    if (i < int(expected.size()) && expected[std::size_t(i)].first == step) {
      EXPECT_NEAR(lr(), expected[std::size_t(i)].second, 1e-12) << "step " << step;
      ++i;
    }
  }
  optim::SGD<float> plain(model.parameters(), optim::SGDOptions(1.0));
  const auto cosine = optim::warmup_cosine_lr(plain, 0, 2);
  EXPECT_DOUBLE_EQ(plain.param_groups()[0].options().get_lr(), 1.0);
  cosine->step();
  EXPECT_NEAR(plain.param_groups()[0].options().get_lr(), 0.5, 1e-12);
}

// The matrices and embeddings of a GPT decay, its biases and LayerNorm weights do not; every
// parameter is in exactly one group, and the groups keep the options but for weight_decay.
TEST(WeightDecayGroups, MatricesDecayBiasesAndNormsDoNotOnASmallGPT) {
  xgrad::models::GPTConfig config;
  config.vocab_size = 16, config.block_size = 8, config.n_layer = 2, config.n_head = 2, config.n_embd = 8;
  xgrad::models::GPT<float> model(config);
  const auto options = optim::AdamWOptions(6e-4).betas({0.9, 0.95}).weight_decay(0.1);
  const std::vector<optim::ParamGroup<float>> groups = optim::weight_decay_groups(model.parameters(), options);
  ASSERT_EQ(groups.size(), 2u);
  const auto names_of = [&](const optim::ParamGroup<float>& group) {
    std::set<std::string> names;
    for (const auto& p : group.params())
      for (const auto& [name, q] : model.named_parameters())
        if (q.node() == p.node()) names.insert(name);
    return names;
  };
  const std::set<std::string> decay = names_of(groups[0]), no_decay = names_of(groups[1]);
  std::set<std::string> expected_decay{"wte.weight", "wpe.weight"}, expected_no_decay{"ln_f.weight", "ln_f.bias"};
  for (const std::string layer : {"h.layers.0.", "h.layers.1."}) {
    for (const char* w : {"self_attn.in_proj_weight", "self_attn.out_proj.weight", "linear1.weight", "linear2.weight"})
      expected_decay.insert(layer + w);
    for (const char* b : {"self_attn.in_proj_bias", "self_attn.out_proj.bias", "linear1.bias", "linear2.bias",
                          "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"})
      expected_no_decay.insert(layer + b);
  }
  EXPECT_EQ(decay, expected_decay);
  EXPECT_EQ(no_decay, expected_no_decay);
  EXPECT_EQ(groups[0].params().size() + groups[1].params().size(), model.parameters().size());
  EXPECT_EQ(groups[0].options().get<double>("weight_decay"), 0.1);
  EXPECT_EQ(groups[1].options().get<double>("weight_decay"), 0.0);
  EXPECT_EQ(groups[1].options().get_lr(), 6e-4);
  EXPECT_EQ((groups[1].options().get<std::array<double, 2>>("betas")), (std::array<double, 2>{0.9, 0.95}));
  // The optimizer built from them steps every parameter.
  optim::AdamW<float> optimizer(groups, options);
  EXPECT_EQ(optimizer.param_groups().size(), 2u);
}

}  // namespace
