// Philox4x32-10, the counter-based generator of Salmon, Moraes, Dror and Shaw, "Parallel random
// numbers: as easy as 1, 2, 3" (SC 2011), the one PyTorch's CUDA kernels draw dropout masks from.
// A pure function of a 128-bit counter and a 64-bit key: the random numbers for element n are
// philox4x32_10(counter(n), key), so any thread can recompute any element's numbers in any order,
// without state. Attention dropout uses it so that the backward, and the tiled kernel whatever its
// block sizes and thread count, make the same keep decisions as the forward without storing them.
#pragma once

#include <array>
#include <cstddef>
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

// The same for the n counters (first + x, c1, c2, c3), x < n (n <= 16): out[4 x + w] is word w of
// philox4x32_10({first + x, c1, c2, c3}, k). The rounds run over arrays of lanes, which the
// compiler vectorizes (a 32 x 32 -> 64-bit multiply per lane): several times the scalar rate.
inline void philox4x32_10_lanes(std::uint32_t first, std::uint32_t c1, std::uint32_t c2, std::uint32_t c3,
                                PhiloxKey k, std::size_t n, std::uint32_t* out) {
  constexpr std::uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  constexpr std::size_t kLanes = 16;
  std::uint32_t x0[kLanes], x1[kLanes], x2[kLanes], x3[kLanes];
  for (std::size_t x = 0; x < kLanes; ++x) {
    x0[x] = first + static_cast<std::uint32_t>(x);
    x1[x] = c1;
    x2[x] = c2;
    x3[x] = c3;
  }
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += W0;
      k[1] += W1;
    }
    for (std::size_t x = 0; x < kLanes; ++x) {
      const std::uint64_t p0 = std::uint64_t(M0) * x0[x], p1 = std::uint64_t(M1) * x2[x];
      const std::uint32_t y1 = x1[x], y3 = x3[x];
      x0[x] = std::uint32_t(p1 >> 32) ^ y1 ^ k[0];
      x1[x] = std::uint32_t(p1);
      x2[x] = std::uint32_t(p0 >> 32) ^ y3 ^ k[1];
      x3[x] = std::uint32_t(p0);
    }
  }
  for (std::size_t x = 0; x < n && x < kLanes; ++x) {
    out[4 * x] = x0[x];
    out[4 * x + 1] = x1[x];
    out[4 * x + 2] = x2[x];
    out[4 * x + 3] = x3[x];
  }
}

}  // namespace xgrad
