// GPT-2's tokenizer encoding on two threads at once (its cache of merged pieces is shared, also by
// copies). In xgrad_thread_tests, which scripts/test.sh runs under ThreadSanitizer.
#include <gtest/gtest.h>

#include <thread>

#include <xgrad/text/bpe.hpp>

#include "text_util.hpp"

namespace {

using xgrad::testing::corpus;
using xgrad::testing::gpt2;
using Ids = std::vector<std::int64_t>;

TEST(TokenizerThreads, EncodeAtOnceWithASharedCache) {
  std::string all;
  for (const auto& [name, bytes] : corpus()) all += bytes;
  const Ids expected = gpt2().encode(all);
  const xgrad::text::BPETokenizer copy = gpt2();  // copies share the cache
  Ids a, b;
  std::thread t1([&] { a = gpt2().encode(all); });
  std::thread t2([&] { b = copy.encode(all); });
  t1.join();
  t2.join();
  EXPECT_EQ(a, expected);
  EXPECT_EQ(b, expected);
}

}  // namespace
