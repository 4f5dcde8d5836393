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

  std::uint64_t next_u64();
  double uniform();        // [0, 1), 53 random bits
  float uniform_float();   // [0, 1), 24 random bits
  double normal();         // standard normal (Box-Muller, one draw per call, no cached value)
  bool bernoulli(double p) { return uniform() < p; }

 private:
  std::uint64_t seed_ = 0;
  std::array<std::uint64_t, 4> s_{};
};

// The generator used when none is passed.
Generator& default_generator();

// Seeds the default generator (torch.manual_seed).
void manual_seed(std::uint64_t seed);

}  // namespace xgrad
