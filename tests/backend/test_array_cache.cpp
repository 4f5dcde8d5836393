// The array cache (allocator.hpp, set_array_cache): buffers of the Arrays the engine drops are
// reused by empty_array, boundedly, and results do not change.
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

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

TEST_F(ArrayCache, IsBoundedPerSizeAndPerBuffer) {
  SKIP_UNDER_ASAN();
  {
    std::vector<xgrad::Tensor<float>> many;
    for (std::size_t i = 0; i < 3 * xgrad::kArrayCacheBlocksPerSize; ++i) many.push_back(xgrad::zeros<float>({4}));
  }
  EXPECT_EQ(xgrad::array_cache_stats().cached_blocks, xgrad::kArrayCacheBlocksPerSize);
  const std::size_t big = xgrad::kArrayCacheBlockBytes / sizeof(float) + 16;
  { xgrad::Tensor<float> t = xgrad::zeros<float>({big}); }
  EXPECT_EQ(xgrad::array_cache_stats().cached_blocks, xgrad::kArrayCacheBlocksPerSize);
  // The byte bound: buffers of distinct sizes until it is reached, never past it.
  {
    std::vector<xgrad::Tensor<float>> sized;
    const std::size_t n = xgrad::kArrayCacheBlockBytes / sizeof(float);  // the largest kept
    for (std::size_t i = 0; i < 2 * xgrad::kArrayCacheBytes / xgrad::kArrayCacheBlockBytes; ++i)
      sized.push_back(xgrad::zeros<float>({n - i}));
  }
  EXPECT_LE(xgrad::array_cache_stats().cached_bytes, xgrad::kArrayCacheBytes);
  EXPECT_GT(xgrad::array_cache_stats().cached_bytes, xgrad::kArrayCacheBytes / 2);
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
  kept = xgrad::Tensor<float>();
  EXPECT_EQ(xgrad::array_cache_stats().cached_blocks, 1u);  // freed on this thread: cached here
}

}  // namespace
