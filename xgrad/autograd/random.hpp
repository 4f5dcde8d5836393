// Seeded random numbers: a Generator object that can be passed around and whose state can be
// saved and restored, and a process-wide default generator seeded by xgrad::manual_seed.
// The stream is xoshiro256** seeded through splitmix64: the same seed gives the same numbers on
// every run and platform. It is not PyTorch's stream (that cannot be matched), only as
// reproducible.
#pragma once

#include <array>
#include <cstdint>

namespace xgrad {

// Everything needed to resume a generator exactly.
struct GeneratorState {
  std::uint64_t seed = 0;
  std::array<std::uint64_t, 4> s{};
  bool operator==(const GeneratorState& o) const { return seed == o.seed && s == o.s; }
};

class Generator {
 public:
  // PyTorch's default seed.
  static constexpr std::uint64_t default_seed = 67280421310721ULL;

  explicit Generator(std::uint64_t seed = default_seed) { manual_seed(seed); }

  void manual_seed(std::uint64_t seed);
  std::uint64_t initial_seed() const { return seed_; }

  GeneratorState get_state() const { return {seed_, s_}; }
  void set_state(const GeneratorState& state) { seed_ = state.seed; s_ = state.s; }

  // xoshiro256** (Blackman and Vigna); inline because dropout draws one per element.
  std::uint64_t next_u64() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }        // [0, 1)
  float uniform_float() { return static_cast<float>(next_u64() >> 40) * 0x1.0p-24f; }  // [0, 1)
  double normal();         // standard normal (Box-Muller, one draw per call, no cached value)
  bool bernoulli(double p) { return uniform() < p; }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t seed_ = 0;
  std::array<std::uint64_t, 4> s_{};
};

// The generator used when none is passed.
Generator& default_generator();

// Seeds the default generator (torch.manual_seed).
void manual_seed(std::uint64_t seed);

}  // namespace xgrad
