// Philox4x32-10, the counter-based generator of Salmon, Moraes, Dror and Shaw, "Parallel random
// numbers: as easy as 1, 2, 3" (SC 2011), the one PyTorch's CUDA kernels draw dropout masks from.
// A pure function of a 128-bit counter and a 64-bit key: the random numbers for element n are
// philox4x32_10(counter(n), key), so any thread can recompute any element's numbers in any order,
// without state. Attention dropout uses it so that the backward, and the tiled kernel whatever its
// block sizes and thread count, make the same keep decisions as the forward without storing them.
#pragma once

#include <array>
#include <cstdint>

namespace xgrad {

using PhiloxCounter = std::array<std::uint32_t, 4>;
using PhiloxKey = std::array<std::uint32_t, 2>;

// Ten rounds of: (c0, c1, c2, c3) <- (hi(M1 c2) ^ c1 ^ k0, lo(M1 c2), hi(M0 c0) ^ c3 ^ k1, lo(M0 c0)),
// the key bumped by the Weyl constants (W0, W1) between rounds. Matches Random123's philox4x32.
inline PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  constexpr std::uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += W0;
      k[1] += W1;
    }
    const std::uint64_t p0 = std::uint64_t(M0) * c[0], p1 = std::uint64_t(M1) * c[2];
    c = {std::uint32_t(p1 >> 32) ^ c[1] ^ k[0], std::uint32_t(p1), std::uint32_t(p0 >> 32) ^ c[3] ^ k[1],
         std::uint32_t(p0)};
  }
  return c;
}

}  // namespace xgrad
