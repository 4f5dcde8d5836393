// Seeded random numbers: a Generator object that can be passed around and whose state can be
// saved and restored, and a process-wide default generator seeded by xgrad::manual_seed.
// The stream is xoshiro256** seeded through splitmix64: the same seed gives the same numbers on
// every run and platform. It is not PyTorch's stream (that cannot be matched), only as
// reproducible.
//
// Threads: as PyTorch's CPU generators, each Generator carries a mutex, and everything in xgrad
// that draws from one (rand, randn, dropout, the nn::init functions, manual_seed, get_state,
// set_state) holds it for the whole tensor. So threads may share a generator -- the default
// one in particular: two threads building modules at once get different numbers, each tensor a
// contiguous run of the one stream (which thread's tensor comes first is up to the scheduler).
// The one-number calls (next_u64, uniform, normal, ...) do not lock: code drawing numbers one by
// one from a shared generator holds `std::lock_guard lock(generator.mutex());` itself.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>

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
  // Copies the state (not the mutex).
  Generator(const Generator& other) { set_state(other.get_state()); }
  Generator& operator=(const Generator& other) {
    if (this != &other) set_state(other.get_state());
    return *this;
  }

  void manual_seed(std::uint64_t seed);
  std::uint64_t initial_seed() const { return get_state().seed; }

  GeneratorState get_state() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return {seed_, s_};
  }
  void set_state(const GeneratorState& state) {
    std::lock_guard<std::mutex> lock(mutex_);
    seed_ = state.seed;
    s_ = state.s;
  }
  // Held while a tensor's worth of numbers is drawn (see the comment at the top).
  std::mutex& mutex() const { return mutex_; }

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
  // The state n draws (next_u64, uniform or uniform_float calls) ahead, without drawing them:
  // xoshiro's jump-ahead, O(log n) (a 256-bit GF(2) matrix-vector product per set bit of n). A
  // kernel that splits a tensor's draws over threads starts each block from state_ahead(begin), so
  // every element gets the number a serial draw gives it. Like next_u64 it does not lock.
  GeneratorState state_ahead(std::uint64_t n) const;
  // Moves the stream n draws on (as std::mt19937::discard), in O(log n); does not lock.
  void discard(std::uint64_t n);
  bool bernoulli(double p) { return uniform() < p; }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t seed_ = 0;
  std::array<std::uint64_t, 4> s_{};
  mutable std::mutex mutex_;
};

// The generator used when none is passed: one per process, shared by all threads (as PyTorch's
// default CPU generator).
Generator& default_generator();

// Seeds the default generator (torch.manual_seed); safe while other threads draw from it.
void manual_seed(std::uint64_t seed);

}  // namespace xgrad
