// The training step of the documents learns: 200 Adam steps of mse_loss(encoder(x), x) on a
// 3-layer pre-norm GELU encoder (d_model 4, nhead 2, dim_feedforward 64, dropout 0.2, training
// mode) lower the loss at least 5x, and a second run with the same seed repeats every loss bit
// for bit.
#include "test_util.hpp"

#include <cstdio>

#include <xgrad/nn/nn.hpp>

using namespace xgrad;
using namespace xgrad::testing;
using namespace xgrad::optim;

namespace {

struct TrainingRun {
  std::vector<float> losses;  // before each step, in training mode (dropout on)
  float eval_before = 0, eval_after = 0;  // the same loss in eval mode (no dropout)
};

TrainingRun run_training(std::uint64_t seed, int steps, double lr) {
  manual_seed(seed);  // initial values, the input and every dropout mask
  auto layer = std::make_shared<nn::TransformerEncoderLayer<float>>(nn::TransformerEncoderLayerOptions(4, 2)
                                                                        .dim_feedforward(64)
                                                                        .dropout(0.2)
                                                                        .activation("gelu")
                                                                        .batch_first(true)
                                                                        .norm_first(true));
  auto encoder = std::make_shared<nn::TransformerEncoder<float>>(layer, 3);
  const Tensor<float> x = randn<float>({8, 10, 4});
  auto eval_loss = [&] {
    NoGradGuard no_grad;
    encoder->eval();
    const float l = mse_loss(encoder->forward(x), x).item();
    encoder->train();
    return l;
  };
  TrainingRun run;
  run.eval_before = eval_loss();
  Adam<float> opt(encoder->parameters(), AdamOptions(lr));
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    Tensor<float> loss = mse_loss(encoder->forward(x), x);
    loss.backward();
    opt.step();
    run.losses.push_back(loss.item());
  }
  run.eval_after = eval_loss();
  return run;
}

float mean(const std::vector<float>& v, std::size_t begin, std::size_t end) {
  double s = 0;
  for (std::size_t i = begin; i < end; ++i) s += v[i];
  return static_cast<float>(s / static_cast<double>(end - begin));
}

}  // namespace

TEST(OptimTraining, TwoHundredAdamStepsLowerTheEncoderLossFiveFold) {
  const TrainingRun run = run_training(/*seed=*/1234, 200, /*lr=*/1e-2);
  const float first = run.losses.front();
  const float last10 = mean(run.losses, 190, 200);  // dropout makes single losses noisy
  std::printf("[training] loss (dropout 0.2): first %.4g, mean of the last 10 %.4g (%.1fx); "
              "eval: %.4g -> %.4g (%.1fx)\n",
              first, last10, first / last10, run.eval_before, run.eval_after, run.eval_before / run.eval_after);
  EXPECT_GE(first / last10, 5.0f);
  EXPECT_GE(run.eval_before / run.eval_after, 5.0f);
  for (float l : run.losses) ASSERT_TRUE(std::isfinite(l));
}

TEST(OptimTraining, ReproducibleForAFixedSeed) {
  const TrainingRun a = run_training(7, 30, 1e-2), b = run_training(7, 30, 1e-2), c = run_training(8, 30, 1e-2);
  EXPECT_EQ(a.losses, b.losses);  // bit for bit
  EXPECT_EQ(a.eval_after, b.eval_after);
  EXPECT_NE(a.losses, c.losses);  // and the seed matters
}
