// autocast's cast cache (autocast.hpp, torch's cached_casts): under an AutocastGuard a weight (a
// leaf that requires grad) is rounded to bf16 once per version and reused by every linear, forward
// and backward: the results equal the uncached ones bit for bit (a Linear, a TransformerEncoderLayer),
// a version bump (an optimizer step, a write through mutable_value) makes the next forward cast
// again, the cache is per thread, holds no tensor, is emptied by the outermost guard, and saves
// one cast per use of a weight after the first.
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

// Whether linear casts its operands once for its three gemms (the path the cache serves): oneDNN's
// bf16 matmul on this CPU, for an (m, n, k) product this large.
bool packed(std::size_t m, std::size_t n, std::size_t k) { return detail::gemm_bf16_takes_packed(m, n, k); }

// What a step computed: its outputs and every parameter's gradient.
struct Outcome {
  std::vector<Array<float>> values;
  bool operator==(const Outcome& o) const {
    if (values.size() != o.values.size()) return false;
    for (std::size_t i = 0; i < values.size(); ++i)
      if (!same_bits(values[i], o.values[i])) return false;
    return true;
  }
};

// Two forwards of `forward` inside one guard (the second finds the weights cached), the backward
// of their summed MSE, with the cache on or off: the two outputs and every gradient.
template <class F>
Outcome two_forwards(nn::Module<float>& module, const F& forward, const Tensor<float>& target, bool cache) {
  module.zero_grad(true);
  Tensor<float> y1, y2, loss;
  {
    AutocastGuard guard(true, cache);
    y1 = forward();
    y2 = forward();
    loss = add(mse_loss(y1, target), mse_loss(y2, target));
  }
  loss.backward();
  Outcome r{{y1.value(), y2.value()}};
  for (const auto& [name, p] : module.named_parameters()) r.values.push_back(p.grad());
  return r;
}

TEST(AutocastCache, LinearCachedEqualsUncachedBitForBit) {
  manual_seed(1);
  nn::Linear<float> lin(64, 96);
  const Tensor<float> x = random_data<float>({2, 48, 64}, 2), target = random_data<float>({2, 48, 96}, 3);
  const std::uint64_t before = detail::to_bf16_calls();
  const Outcome cached = two_forwards(
      lin, [&] { return lin.forward(x); }, target, true);
  const std::uint64_t cached_calls = detail::to_bf16_calls() - before;
  const Outcome uncached = two_forwards(
      lin, [&] { return lin.forward(x); }, target, false);
  const std::uint64_t uncached_calls = detail::to_bf16_calls() - before - cached_calls;
  EXPECT_TRUE(cached == uncached);
  EXPECT_FALSE(same_bits(cached.values[0], lin.forward(x).value())) << "the forward did not cast";
  if (packed(96, 96, 64)) {
    EXPECT_EQ(cached_calls + 1, uncached_calls) << "the second forward cast W again";
  }
}

TEST(AutocastCache, TransformerEncoderLayerCachedEqualsUncachedBitForBit) {
  manual_seed(2);
  nn::TransformerEncoderLayer<float> layer(
      nn::TransformerEncoderLayerOptions(64, 4).dim_feedforward(128).dropout(0.0).activation("gelu").batch_first(true));
  const Tensor<float> x = random_data<float>({4, 16, 64}, 4), target = random_data<float>({4, 16, 64}, 5);
  const auto forward = [&] { return layer.forward(x); };
  const std::uint64_t before = detail::to_bf16_calls();
  const Outcome cached = two_forwards(layer, forward, target, true);
  const std::uint64_t cached_calls = detail::to_bf16_calls() - before;
  const Outcome uncached = two_forwards(layer, forward, target, false);
  const std::uint64_t uncached_calls = detail::to_bf16_calls() - before - cached_calls;
  EXPECT_TRUE(cached == uncached);
  // in_proj, out_proj, linear1, linear2: each cast once instead of twice.
  if (packed(64, 64, 64)) {
    EXPECT_EQ(cached_calls + 4, uncached_calls);
  }
}

// A guard around whole training steps: the optimizer's step between two forwards bumps the
// weight's version, and the next forward casts the new values (a stale cast would multiply by the
// old weight). So does a write through mutable_value, as nn::init and load_state_dict make.
TEST(AutocastCache, AVersionBumpMakesTheNextForwardCastAgain) {
  manual_seed(3);
  nn::Linear<float> lin(64, 64);
  optim::SGD<float> opt(lin.parameters(), optim::SGDOptions(0.5));
  const Tensor<float> x = random_data<float>({128, 64}, 6), target = random_data<float>({128, 64}, 7);
  // lin's output now, cast without the cache.
  const auto uncached = [&] {
    AutocastGuard no_cache(true, false);
    return lin.forward(x).value();
  };
  AutocastGuard guard;
  mse_loss(lin.forward(x), target).backward();
  EXPECT_EQ(detail::autocast_cache_size(), packed(128, 64, 64) ? 1u : 0u);
  opt.step();
  EXPECT_TRUE(same_bits(lin.forward(x).value(), uncached())) << "the forward after step() used the old weight";
  for (float& w : lin.weight.mutable_value()) w *= -2.0f;
  EXPECT_TRUE(same_bits(lin.forward(x).value(), uncached())) << "the forward after a write used the old weight";
  EXPECT_TRUE(same_bits(lin.forward(x).value(), uncached()));  // and the new cast is reused
}

// Per step, each weight is cast once however many times it is used, x and the upstream gradients
// once per use; with the cache off, the weight once per use too. A Linear applied three times:
// 3 casts of activations + 3 of gradients + 1 of W per step (9 without the cache). A frozen weight
// (requires_grad false), which torch casts at every use, is cast once for the run (the frozen-weight
// cache, test_autocast_frozen_cache.cpp).
TEST(AutocastCache, OneCastPerWeightPerStep) {
  if (!packed(64, 64, 64)) GTEST_SKIP() << "linear casts per gemm here: " << autocast_gemm_path();
  manual_seed(4);
  nn::Linear<float> lin(64, 64);
  optim::SGD<float> opt(lin.parameters(), optim::SGDOptions(0.1));
  const Tensor<float> x = random_data<float>({64, 64}, 8), target = random_data<float>({64, 64}, 9);
  const auto steps = [&](bool cache, int n) {
    const std::uint64_t before = detail::to_bf16_calls();
    for (int i = 0; i < n; ++i) {
      opt.zero_grad();
      Tensor<float> loss;
      {
        AutocastGuard guard(true, cache);  // the benchmark's layout: a guard per forward
        loss = mse_loss(lin.forward(lin.forward(lin.forward(x))), target);
      }
      loss.backward();
      opt.step();
    }
    return detail::to_bf16_calls() - before;
  };
  EXPECT_EQ(steps(true, 2), 2u * 7u);
  EXPECT_EQ(steps(false, 2), 2u * 9u);
  {
    AutocastGuard guard;  // one guard around both steps: still once per version of W
    EXPECT_EQ(steps(true, 2), 2u * 7u);
  }
  lin.weight.requires_grad_(false);                // the first linear's backward then casts no gradient
  EXPECT_EQ(steps(false, 1), 3u + 3u + 2u);        // 3 casts of W without the cache
  EXPECT_EQ(steps(true, 2), 1u + 2u * (3u + 2u));  // 1 for both steps with it
}

TEST(AutocastCache, TheOutermostGuardEmptiesIt) {
  const Tensor<float> x = random_data<float>({128, 64}, 10);
  Tensor<float> w = random_data<float>({64, 64}, 11);
  w.requires_grad_(true);
  const std::size_t expected = packed(128, 64, 64) ? 1 : 0;
  EXPECT_EQ(detail::autocast_cache_size(), 0u);
  EXPECT_TRUE(is_autocast_cache_enabled());
  {
    AutocastGuard outer;
    linear(x, w);
    EXPECT_EQ(detail::autocast_cache_size(), expected);
    {
      AutocastGuard off(false);  // nested guards, enabled or not, keep it
      {
        AutocastGuard no_cache(true, false);
        EXPECT_FALSE(is_autocast_cache_enabled());
        linear(x, random_data<float>({64, 64}, 12).requires_grad_(true));  // not cached
      }
      EXPECT_TRUE(is_autocast_cache_enabled());
    }
    EXPECT_EQ(detail::autocast_cache_size(), expected);
    linear(x, w);  // a hit: no new entry
    EXPECT_EQ(detail::autocast_cache_size(), expected);
  }
  EXPECT_EQ(detail::autocast_cache_size(), 0u);
  // Outside every guard nothing is cached (nothing would empty it).
  set_autocast_enabled(true);
  linear(x, w);
  set_autocast_enabled(false);
  EXPECT_EQ(detail::autocast_cache_size(), 0u);
  // clear_autocast_cache empties it inside a guard too; an exception leaving the guard empties it.
  try {
    AutocastGuard guard;
    linear(x, w);
    clear_autocast_cache();
    EXPECT_EQ(detail::autocast_cache_size(), 0u);
    linear(x, w);
    throw std::runtime_error("x");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(detail::autocast_cache_size(), 0u);
}

// The cache keeps bf16 copies, never a tensor: a weight dropped inside the guard is freed at once.
TEST(AutocastCache, HoldsNoTensor) {
  if (!packed(128, 64, 64)) GTEST_SKIP() << "nothing is cached here: " << autocast_gemm_path();
  const Tensor<float> x = random_data<float>({128, 64}, 13);
  AutocastGuard guard;
  std::weak_ptr<Node<float>> node;
  {
    Tensor<float> w = random_data<float>({64, 64}, 14);
    w.requires_grad_(true);
    node = w.node();
    Tensor<float> y = linear(x, w);
    EXPECT_EQ(detail::autocast_cache_size(), 1u);
  }
  EXPECT_TRUE(node.expired());
  // A new weight is cast for itself, even where the old one lived.
  Tensor<float> w2 = random_data<float>({64, 64}, 15);
  w2.requires_grad_(true);
  Array<float> want;
  {
    AutocastGuard no_cache(true, false);
    want = linear(x, w2).value();
  }
  EXPECT_TRUE(same_bits(linear(x, w2).value(), want));
}

// Each thread has its own cache, emptied by its own outermost guard: threads with their own copies
// of x and W (a tensor is used by one thread at a time) get the same result as this one.
TEST(AutocastCache, IsPerThread) {
  const Tensor<float> x = random_data<float>({128, 64}, 16);
  Tensor<float> w = random_data<float>({64, 64}, 17);
  w.requires_grad_(true);
  const std::size_t expected = packed(128, 64, 64) ? 1 : 0;
  AutocastGuard guard;
  const Array<float> here = linear(x, w).value();
  std::vector<Array<float>> there(2, Array<float>());
  std::vector<std::size_t> sizes(2), after(2);
  std::vector<Tensor<float>> xs, ws;
  for (int t = 0; t < 2; ++t) {
    xs.emplace_back(Array<float>(x.value()));
    ws.emplace_back(Array<float>(w.value()), true);
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      {
        AutocastGuard theirs;
        there[t] = linear(xs[t], ws[t]).value();
        sizes[t] = detail::autocast_cache_size();
      }
      after[t] = detail::autocast_cache_size();
    });
  for (auto& t : threads) t.join();
  for (int t = 0; t < 2; ++t) {
    EXPECT_TRUE(same_bits(there[t], here));
    EXPECT_EQ(sizes[t], expected);
    EXPECT_EQ(after[t], 0u);
  }
  EXPECT_EQ(detail::autocast_cache_size(), expected);
}

}  // namespace
}  // namespace xgrad
