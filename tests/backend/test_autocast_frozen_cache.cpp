// autocast's frozen-weight cache (autocast.hpp): linear's weight, when it is a leaf that does not
// require grad (LoRA's base model), is rounded to bf16 once per version and kept across guards and
// steps while the tensor lives. A LoRA model's steps give the same bits with it and without it,
// and cast each frozen weight once in all; every way a weight can change (a write, merge_lora,
// load_state_dict, nn::init, unfreezing for an optimizer step) makes the next forward cast again;
// the cast goes when the tensor dies, on clear_autocast_cache(), and is bypassed with the cache off.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include <xgrad/backend/bf16.hpp>
#include <xgrad/backend/gemm.hpp>
#include <xgrad/xgrad.hpp>

#include "bitwise.hpp"

namespace xgrad {
namespace {

using testing::random_data;
using testing::same_bits;

// Linear casts its weight once for its three gemms (the path the caches serve) for these sizes on
// this CPU; elsewhere it rounds per gemm and nothing is cached.
bool packed() { return detail::gemm_bf16_takes_packed(128, 128, 64); }

// fc2(gelu(fc1(x))): 64 -> 128 -> 64, the products large enough to take the packed path.
struct TwoLayers : nn::Module<float> {
  std::shared_ptr<nn::Linear<float>> fc1, fc2;
  TwoLayers() : nn::Module<float>("TwoLayers") {
    fc1 = register_module("fc1", std::make_shared<nn::Linear<float>>(64, 128));
    fc2 = register_module("fc2", std::make_shared<nn::Linear<float>>(128, 64));
  }
  Tensor<float> forward(const Tensor<float>& x) { return fc2->forward(gelu(fc1->forward(x))); }
};

// A LoRA model (every base weight frozen), its adapters' lora_B made nonzero so that they matter.
std::unique_ptr<TwoLayers> lora_model() {
  manual_seed(21);
  auto model = std::make_unique<TwoLayers>();
  nn::inject_lora(*model, nn::LoraConfig().r(4).lora_alpha(8).target_modules({"all-linear"}));
  for (auto& [path, lora] : nn::lora_layers(*model)) nn::init::normal_(lora->lora_B->weight, 0.0, 0.1);
  return model;
}

// Three AdamW steps of a new lora_model() with a guard per forward, the cast caches on or off:
// each step's output, loss and every gradient, and how many matrices were cast to bf16.
struct StepsRun {
  std::vector<Array<float>> values;
  std::uint64_t casts = 0;
};
StepsRun lora_steps(bool cache) {
  auto model = lora_model();
  optim::AdamW<float> opt(model->parameters(), optim::AdamWOptions(1e-2));
  const Tensor<float> x = random_data<float>({128, 64}, 22), target = random_data<float>({128, 64}, 23);
  StepsRun run;
  const std::uint64_t before = detail::to_bf16_calls();
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    Tensor<float> y, loss;
    {
      AutocastGuard guard(true, cache);
      y = model->forward(x);
      loss = mse_loss(y, target);
    }
    loss.backward();
    run.values.push_back(y.value());
    run.values.push_back(loss.value());
    for (const auto& [name, p] : model->named_parameters())
      if (p.requires_grad()) run.values.push_back(p.grad());
    opt.step();
  }
  run.casts = detail::to_bf16_calls() - before;
  return run;
}

TEST(AutocastFrozenCache, LoraStepsEqualUncachedBitForBitAndCastEachFrozenWeightOnce) {
  const StepsRun cached = lora_steps(true);
  EXPECT_EQ(detail::autocast_frozen_cache_size(), 0u) << "the model died: its casts must go with it";
  EXPECT_EQ(autocast_frozen_cache_bytes(), 0u);
  const StepsRun uncached = lora_steps(false);
  ASSERT_EQ(cached.values.size(), uncached.values.size());
  for (std::size_t i = 0; i < cached.values.size(); ++i)
    EXPECT_TRUE(same_bits(cached.values[i], uncached.values[i])) << "value " << i;
  // fc1's and fc2's frozen weights: cast in the first step only, instead of in each of the 3.
  if (packed()) {
    EXPECT_EQ(cached.casts + 2 * 2, uncached.casts);
  }
}

// A frozen Linear over 4 steps, a guard per forward: its weight is cast once for the run, and the
// cache holds it (half its float32 bytes) until the Linear dies, outliving every guard.
TEST(AutocastFrozenCache, OneCastPerFrozenWeightOverSteps) {
  if (!packed()) GTEST_SKIP() << "linear casts per gemm here: " << autocast_gemm_path();
  manual_seed(24);
  auto lin = std::make_unique<nn::Linear<float>>(64, 128);
  lin->weight.requires_grad_(false);
  optim::SGD<float> opt(std::vector<Tensor<float>>{lin->bias}, optim::SGDOptions(0.1));  // the bias trains
  const Tensor<float> x = random_data<float>({128, 64}, 25), target = random_data<float>({128, 128}, 26);
  const auto steps = [&](bool cache) {
    const std::uint64_t before = detail::to_bf16_calls();
    for (int i = 0; i < 4; ++i) {
      opt.zero_grad();
      Tensor<float> loss;
      {
        AutocastGuard guard(true, cache);
        loss = mse_loss(lin->forward(x), target);
      }
      loss.backward();
      opt.step();
    }
    return detail::to_bf16_calls() - before;
  };
  const std::uint64_t uncached = steps(false);
  EXPECT_EQ(detail::autocast_frozen_cache_size(), 0u) << "the cache off: nothing kept";
  EXPECT_EQ(uncached, 4u * 2u);  // x and W, each step
  EXPECT_EQ(steps(true), 4u + 1u);
  EXPECT_EQ(detail::autocast_frozen_cache_size(), 1u);
  EXPECT_EQ(autocast_frozen_cache_bytes(), 128u * 64u * 2u);
  EXPECT_EQ(steps(true), 4u) << "the cast survives between runs too";
  lin.reset();
  EXPECT_EQ(detail::autocast_frozen_cache_size(), 0u);
  EXPECT_EQ(autocast_frozen_cache_bytes(), 0u);
}

// lin's output for x under autocast, through the caches and without them: equal bit for bit (a stale
// cast would give the old weight's product).
void expect_fresh(nn::Linear<float>& lin, const Tensor<float>& x, const char* after) {
  Array<float> cached, uncached;
  {
    AutocastGuard guard;
    cached = lin.forward(x).value();
  }
  {
    AutocastGuard guard(true, false);
    uncached = lin.forward(x).value();
  }
  EXPECT_TRUE(same_bits(cached, uncached)) << "the forward after " << after << " used a stale cast";
}

TEST(AutocastFrozenCache, EveryWayAWeightChangesMakesTheNextForwardCastAgain) {
  manual_seed(27);
  nn::Linear<float> lin(64, 128);
  lin.weight.requires_grad_(false);
  const Tensor<float> x = random_data<float>({128, 64}, 28);
  expect_fresh(lin, x, "the first cast");
  for (float& w : lin.weight.mutable_value()) w *= -2.0f;
  expect_fresh(lin, x, "a write through mutable_value");
  nn::init::normal_(lin.weight, 0.0, 0.5);
  expect_fresh(lin, x, "nn::init::normal_");
  nn::Linear<float> other(64, 128);
  lin.load_state_dict(other.state_dict());
  expect_fresh(lin, x, "load_state_dict");
  // Unfrozen for an optimizer step (the step changes it), then frozen again.
  lin.weight.requires_grad_(true);
  optim::SGD<float> opt(std::vector<Tensor<float>>{lin.weight}, optim::SGDOptions(0.5));
  {
    AutocastGuard guard;
    sum(lin.forward(x)).backward();
  }
  opt.step();
  lin.weight.requires_grad_(false);
  expect_fresh(lin, x, "an optimizer step");
  if (packed()) {
    EXPECT_EQ(detail::autocast_frozen_cache_size(), 1u);  // the weight's latest version alone
  }
}

TEST(AutocastFrozenCache, MergeAndUnmergeLoraMakeTheNextForwardCastAgain) {
  auto model = lora_model();
  const Tensor<float> x = random_data<float>({128, 64}, 29);
  const auto forward = [&](bool cache) {
    AutocastGuard guard(true, cache);
    return model->forward(x).value();
  };
  const Array<float> unmerged = forward(true);
  nn::merge_lora(*model);  // W += scaling B A; the forward then skips the adapters
  EXPECT_TRUE(same_bits(forward(true), forward(false))) << "merge_lora: a stale cast of W";
  EXPECT_FALSE(same_bits(forward(true), unmerged)) << "bf16 rounds W + BA differently from W, BA apart";
  nn::unmerge_lora(*model);
  EXPECT_TRUE(same_bits(forward(true), forward(false))) << "unmerge_lora: a stale cast of W";
}

// The cache keeps bf16 copies, never a tensor, and drops a weight's copy when its tensor dies,
// inside a guard or outside; a new weight (perhaps where the old one lived) is cast for itself.
TEST(AutocastFrozenCache, ACastGoesWithItsTensor) {
  if (!packed()) GTEST_SKIP() << "nothing is cached here: " << autocast_gemm_path();
  const Tensor<float> x = random_data<float>({128, 64}, 30);
  std::weak_ptr<Node<float>> node;
  {
    AutocastGuard guard;
    const Tensor<float> w = random_data<float>({128, 64}, 31);
    node = w.node();
    linear(x, w);
    EXPECT_EQ(detail::autocast_frozen_cache_size(), 1u) << "a frozen leaf weight is cached";
  }
  EXPECT_EQ(detail::autocast_frozen_cache_size(), 0u);
  EXPECT_TRUE(node.expired());
  const Tensor<float> w2 = random_data<float>({128, 64}, 32);
  Array<float> want;
  {
    AutocastGuard no_cache(true, false);
    want = linear(x, w2).value();
  }
  AutocastGuard guard;
  EXPECT_TRUE(same_bits(linear(x, w2).value(), want));
  // x, a leaf without grad too, is data: not kept.
  EXPECT_EQ(detail::autocast_frozen_cache_size(), 1u);
}

// clear_autocast_cache() empties it; the cache off (set_autocast_cache_enabled(false)) bypasses it
// and keeps what it holds; a guard's end leaves it; a cast made on one thread is reused on another,
// and a weight that dies on another thread takes its cast with it.
TEST(AutocastFrozenCache, ClearDisableThreads) {
  if (!packed()) GTEST_SKIP() << "nothing is cached here: " << autocast_gemm_path();
  const Tensor<float> x = random_data<float>({128, 64}, 33);
  Tensor<float> w = random_data<float>({128, 64}, 34);
  {
    AutocastGuard guard;
    linear(x, w);
  }
  EXPECT_EQ(detail::autocast_frozen_cache_size(), 1u);
  clear_autocast_cache();
  EXPECT_EQ(detail::autocast_frozen_cache_size(), 0u);
  EXPECT_EQ(autocast_frozen_cache_bytes(), 0u);
  {
    AutocastGuard guard;
    linear(x, w);
    set_autocast_cache_enabled(false);
    const std::uint64_t before = detail::to_bf16_calls();
    linear(x, w);
    EXPECT_EQ(detail::to_bf16_calls() - before, 2u) << "the cache off: W cast again";
    set_autocast_cache_enabled(true);
  }
  EXPECT_EQ(detail::autocast_frozen_cache_size(), 1u);
  std::uint64_t casts_there = 0;
  std::thread([&] {
    AutocastGuard guard;
    const std::uint64_t before = detail::to_bf16_calls();
    linear(x, w);
    casts_there = detail::to_bf16_calls() - before;
    w = Tensor<float>();  // the weight dies here
  }).join();
  EXPECT_EQ(casts_there, 1u) << "x alone: W's cast is shared";
  EXPECT_EQ(detail::autocast_frozen_cache_size(), 0u);
}

}  // namespace
}  // namespace xgrad
