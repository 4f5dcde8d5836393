// xgrad/base/philox.hpp: Philox4x32-10 against the known-answer vectors that Random123 (the
// reference implementation of Salmon et al., SC 2011) publishes in its tests/kat_vectors.
#include <array>
#include <cstdint>

#include <gtest/gtest.h>

#include <xgrad/base/philox.hpp>

using xgrad::philox4x32_10;
using xgrad::PhiloxCounter;

TEST(Philox, MatchesRandom123KnownAnswers) {
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}), (PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

// The lane-wise form gives each counter's words in order, the same as one call per counter.
TEST(Philox, LanesMatchOneCallPerCounter) {
  const xgrad::PhiloxKey key{0x12345678, 0x9abcdef0};
  std::uint32_t words[64];
  for (std::size_t n : {1u, 7u, 16u}) {
    xgrad::philox4x32_10_lanes(0xfffffff8u, 3, 5, 7, key, n, words);
    for (std::uint32_t x = 0; x < n; ++x)
      for (int w = 0; w < 4; ++w) EXPECT_EQ(words[4 * x + w], philox4x32_10({0xfffffff8u + x, 3, 5, 7}, key)[w]);
  }
}
