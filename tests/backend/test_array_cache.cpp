// The array cache (allocator.hpp, set_array_cache): buffers of the Arrays the engine drops are
// reused by empty_array, boundedly, and results do not change.
#include <cmath>
#include <functional>
#include <limits>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.hpp"

#include <xgrad/xgrad.hpp>

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;  // the cache stays off so that ASan sees every free
#else
constexpr bool kSanitized = false;
#endif
#define SKIP_UNDER_ASAN() \
  if (kSanitized) GTEST_SKIP() << "the array cache is off under AddressSanitizer"

// Each test starts from an empty cache on this thread, with the cache on.
struct ArrayCache : ::testing::Test {
  void SetUp() override {
    xgrad::set_array_cache(false);  // frees this thread's cached buffers
    xgrad::set_array_cache(true);
  }
  void TearDown() override { xgrad::set_array_cache(true); }
};

TEST_F(ArrayCache, OffUnderAddressSanitizerOnOtherwise) {
  EXPECT_EQ(xgrad::array_cache_enabled(), !kSanitized);
}

TEST_F(ArrayCache, ADroppedTensorsBufferServesTheNextResultOfItsSize) {
  SKIP_UNDER_ASAN();
  const float* data = nullptr;
  {
    xgrad::Tensor<float> t = xgrad::zeros<float>({3, 5});
    data = t.value().data();
  }
  EXPECT_EQ(xgrad::array_cache_stats().cached_blocks, 1u);
  EXPECT_EQ(xgrad::array_cache_stats().cached_bytes, 15 * sizeof(float));
  const auto hits = xgrad::array_cache_stats().hits;
  xgrad::Array<float> a = xgrad::empty_array<float>({5, 3});  // same count, another shape
  EXPECT_EQ(a.data(), data);
  EXPECT_EQ(a.shape()[0], 5u);
  EXPECT_EQ(a.shape()[1], 3u);
  EXPECT_EQ(a.size(), 15u);
  EXPECT_EQ(xgrad::array_cache_stats().hits, hits + 1);
  EXPECT_EQ(xgrad::array_cache_stats().cached_blocks, 0u);
  // Another count misses.
  const auto misses = xgrad::array_cache_stats().misses;
  xgrad::Array<float> b = xgrad::empty_array<float>({16});
  EXPECT_EQ(xgrad::array_cache_stats().misses, misses + 1);
}

TEST_F(ArrayCache, OffMeansNoReuseAndFreesTheCache) {
  SKIP_UNDER_ASAN();
  { xgrad::Tensor<double> t = xgrad::ones<double>({7}); }
  EXPECT_EQ(xgrad::array_cache_stats().cached_blocks, 1u);
  xgrad::set_array_cache(false);
  EXPECT_FALSE(xgrad::array_cache_enabled());
  EXPECT_EQ(xgrad::array_cache_stats().cached_blocks, 0u);
  EXPECT_EQ(xgrad::array_cache_stats().cached_bytes, 0u);
  { xgrad::Tensor<double> t = xgrad::ones<double>({7}); }
  EXPECT_EQ(xgrad::array_cache_stats().cached_blocks, 0u);
}

// The bound follows the thread's own use: buffers of a count are kept up to the most of that count
// that were out at once (any size, any number); a count the thread never took is not kept; and the
// bytes stay within twice the live high-water mark (at least kArrayCacheBytes): distinct sizes
// made one at a time keep no more than that.
TEST_F(ArrayCache, IsBoundedByWhatTheThreadUsed) {
  SKIP_UNDER_ASAN();
  const std::size_t mib = (std::size_t{1} << 20) / sizeof(float);
  const auto stats = [] { return xgrad::array_cache_stats(); };
  const std::size_t live0 = stats().live_bytes;  // arrays of earlier tests still out
  {
    std::vector<xgrad::Tensor<float>> many;
    for (int i = 0; i < 200; ++i) many.push_back(xgrad::zeros<float>({4}));
    for (int i = 0; i < 12; ++i) many.push_back(xgrad::zeros<float>({mib}));  // 12 MiB out at once
  }
  EXPECT_EQ(stats().cached_blocks, 212u);
  EXPECT_EQ(stats().cached_bytes, 200 * 16 + 12 * mib * sizeof(float));
  EXPECT_EQ(stats().live_bytes, live0);
  EXPECT_LE(stats().cached_bytes, stats().bound_bytes);
  // The same again: every buffer from the cache; 5 of them out at once keep 12 cached + out.
  const auto misses = stats().misses;
  {
    std::vector<xgrad::Tensor<float>> again;
    for (int i = 0; i < 12; ++i) again.push_back(xgrad::zeros<float>({mib}));
  }
  EXPECT_EQ(stats().misses, misses);
  EXPECT_EQ(stats().cached_blocks, 212u);
  // A buffer of a count this thread never took (made elsewhere) is freed, not kept.
  {
    xgrad::Array<float> elsewhere = xgrad::Array<float>::from_shape({mib + 7});
    xgrad::detail::recycle(elsewhere);
  }
  EXPECT_EQ(stats().cached_blocks, 212u);
  // Distinct sizes one at a time, on a thread of its own (a high-water mark of half a MiB):
  // at most 2 * kArrayCacheBytes kept.
  std::thread([&] {
    for (std::size_t i = 0; i < 40; ++i) {
      xgrad::Tensor<float> t = xgrad::zeros<float>({mib / 2 + i});
    }
    EXPECT_EQ(stats().bound_bytes, 4 * xgrad::kArrayCacheBytes);  // float and double, 2 * 4 MiB each
    EXPECT_LE(stats().cached_bytes, 2 * xgrad::kArrayCacheBytes);
    EXPECT_GT(stats().cached_bytes, xgrad::kArrayCacheBytes);
  }).join();
}

// One training step: zero the gradients, the loss, its backward, the optimizer's step.
void train_step(xgrad::optim::Optimizer<float>& opt, const std::function<xgrad::Tensor<float>()>& loss_of) {
  opt.zero_grad();
  xgrad::Tensor<float> loss = loss_of();
  loss.backward();
  opt.step();
}

// A steady training step takes every tensor buffer from the cache: after two warm-up steps of a
// small pre-norm encoder layer (dropout on, feed-forward activations of 128 KiB) with Adam, the
// third step makes no array-cache miss on the stepping thread, and the cache stays within its
// bound, its high-water mark where the first steps put it.
TEST_F(ArrayCache, ASteadyTrainingStepAllocatesNoTensorBuffer) {
  SKIP_UNDER_ASAN();
  xgrad::testing::ThreadCountGuard guard;
  for (int threads : {1, 2}) {
    xgrad::set_num_threads(threads);
    xgrad::manual_seed(3);
    xgrad::nn::TransformerEncoderLayer<float> layer(xgrad::nn::TransformerEncoderLayerOptions(64, 4)
                                                        .dim_feedforward(256)
                                                        .dropout(0.1)
                                                        .activation("gelu")
                                                        .batch_first(true)
                                                        .norm_first(true));
    xgrad::optim::Adam<float> opt(layer.parameters(), xgrad::optim::AdamOptions(1e-3));
    const xgrad::Tensor<float> x = xgrad::randn<float>({4, 32, 64}), target = xgrad::randn<float>({4, 32, 64});
    const auto step = [&] { train_step(opt, [&] { return xgrad::mse_loss(layer.forward(x), target); }); };
    step();
    step();
    const xgrad::ArrayCacheStats before = xgrad::array_cache_stats();
    step();
    const xgrad::ArrayCacheStats after = xgrad::array_cache_stats();
    EXPECT_EQ(after.misses, before.misses) << threads << " threads";
    EXPECT_GT(after.hits, before.hits + 20) << threads << " threads";
    EXPECT_LE(after.cached_bytes, after.bound_bytes) << threads << " threads";
    EXPECT_EQ(after.high_water_bytes, before.high_water_bytes) << threads << " threads";
  }
}

// Every model family's training step, once warm, hands back each buffer it takes: the live bytes
// of the array cache are the same after each step and no step allocates. A buffer an op drops
// without recycling it shows here even when another op's fresh buffer would make up for it in the
// misses (mse_loss's differences did, hidden by sum_to's copy until that came from the cache).
void expect_steady(const char* what, const std::function<xgrad::Tensor<float>()>& loss_of,
                   const std::vector<xgrad::Tensor<float>>& parameters) {
  xgrad::optim::AdamW<float> opt(parameters, xgrad::optim::AdamWOptions(1e-3));
  const auto step = [&] { train_step(opt, loss_of); };
  step();
  step();
  const xgrad::ArrayCacheStats before = xgrad::array_cache_stats();
  step();
  step();
  const xgrad::ArrayCacheStats after = xgrad::array_cache_stats();
  EXPECT_EQ(after.misses, before.misses) << what;
  EXPECT_EQ(after.live_bytes, before.live_bytes) << what;
}

TEST_F(ArrayCache, EveryModelsSteadyStepHandsBackEachBufferItTakes) {
  SKIP_UNDER_ASAN();
  xgrad::testing::ThreadCountGuard guard;
  namespace nn = xgrad::nn;
  for (int threads : {1, 2}) {
    xgrad::set_num_threads(threads);
    xgrad::manual_seed(5);
    const xgrad::Tensor<float> x = xgrad::randn<float>({4, 32, 64}), target = xgrad::randn<float>({4, 32, 64});
    for (const bool norm_first : {false, true})
      for (const char* activation : {"relu", "gelu"}) {
        nn::TransformerEncoderLayer<float> layer(nn::TransformerEncoderLayerOptions(64, 4)
                                                     .dim_feedforward(128)
                                                     .dropout(0.1)
                                                     .activation(activation)
                                                     .batch_first(true)
                                                     .norm_first(norm_first));
        expect_steady(
            activation, [&] { return xgrad::mse_loss(layer.forward(x), target); }, layer.parameters());
      }
    nn::TransformerDecoderLayer<float> decoder(
        nn::TransformerDecoderLayerOptions(64, 4).dim_feedforward(128).dropout(0.1).batch_first(true));
    const xgrad::Tensor<float> memory = xgrad::randn<float>({4, 16, 64}, /*requires_grad=*/true);
    std::vector<xgrad::Tensor<float>> decoder_parameters = decoder.parameters();
    decoder_parameters.push_back(memory);
    expect_steady(
        "decoder", [&] { return xgrad::mse_loss(decoder.forward(x, memory), target); }, decoder_parameters);
    xgrad::models::GPTConfig config;
    config.vocab_size = 65;
    config.block_size = 32;
    config.n_layer = 2;
    config.n_head = 4;
    config.n_embd = 64;
    config.dropout = 0.1;
    xgrad::models::GPT<float> gpt(config);
    xgrad::IndexArray idx = xgrad::IndexArray::from_shape({4, 32}), next = xgrad::IndexArray::from_shape({4 * 32});
    for (std::size_t i = 0; i < idx.size(); ++i) {
      idx.data()[i] = static_cast<std::int64_t>(i * 7 % 65);
      next.data()[i] = static_cast<std::int64_t>(i * 11 % 65);
    }
    expect_steady(
        "gpt",
        [&] {
          return xgrad::cross_entropy(xgrad::reshape(gpt.forward(idx), {4 * 32, 65}), next);
        },
        gpt.parameters());
  }
}

// A small network's loss and gradients over a few steps whose results reuse buffers that held
// NaN: bit-identical to the same steps with the cache off.
std::vector<float> train_and_collect(bool cache) {
  xgrad::set_array_cache(cache);
  xgrad::manual_seed(7);
  auto w1 = xgrad::randn<float>({8, 6}, true);
  auto b1 = xgrad::randn<float>({6}, true);
  auto w2 = xgrad::randn<float>({6, 3}, true);
  auto x = xgrad::randn<float>({5, 8});
  std::vector<float> out;
  for (int step = 0; step < 3; ++step) {
    {
      // Poison: buffers of every size the step uses, filled with NaN, then dropped.
      std::vector<xgrad::Tensor<float>> poison;
      for (std::size_t n : {1u, 3u, 5u, 6u, 8u, 15u, 18u, 30u, 48u})
        poison.push_back(xgrad::full<float>({n}, std::numeric_limits<float>::quiet_NaN()));
    }
    auto h = xgrad::gelu(xgrad::matmul(x, w1) + b1);
    auto loss = xgrad::sum(xgrad::matmul(h, w2) * xgrad::matmul(h, w2));
    loss.backward();
    out.push_back(loss.item());
    for (auto* p : {&w1, &b1, &w2}) {
      for (float g : p->grad()) out.push_back(g);
      p->zero_grad(/*set_to_none=*/true);
    }
  }
  return out;
}

TEST_F(ArrayCache, ResultsAreBitIdenticalWithAndWithoutIt) {
  const std::vector<float> off = train_and_collect(false);
  const std::vector<float> on = train_and_collect(true);
  ASSERT_EQ(on.size(), off.size());
  for (std::size_t i = 0; i < on.size(); ++i) {
    ASSERT_TRUE(std::isfinite(on[i])) << i;
    ASSERT_EQ(on[i], off[i]) << i;  // exact
  }
  if (!kSanitized) {
    EXPECT_GT(xgrad::array_cache_stats().hits, 0u);
  }
}

TEST_F(ArrayCache, EachThreadHasItsOwnAndAThreadsTensorsMayOutliveIt) {
  SKIP_UNDER_ASAN();
  xgrad::Tensor<float> kept;
  std::size_t blocks_there = 0;
  std::thread t([&] {
    { xgrad::Tensor<float> dropped = xgrad::ones<float>({9}); }
    blocks_there = xgrad::array_cache_stats().cached_blocks;
    kept = xgrad::ones<float>({9});  // made there, freed here after the thread (and its cache) ended
  });
  t.join();
  EXPECT_EQ(blocks_there, 1u);
  EXPECT_EQ(xgrad::array_cache_stats().cached_blocks, 0u);
  // Freed on this thread, which takes buffers of that count too (two at once): cached here.
  { std::vector<xgrad::Tensor<float>> two{xgrad::ones<float>({9}), xgrad::ones<float>({9})}; }
  EXPECT_EQ(xgrad::array_cache_stats().cached_blocks, 2u);
  { xgrad::Tensor<float> one = xgrad::ones<float>({9}); }  // takes one, gives it back
  kept = xgrad::Tensor<float>();
  EXPECT_EQ(xgrad::array_cache_stats().cached_blocks, 2u);  // 2 kept + 0 out: its count's peak
}

}  // namespace
