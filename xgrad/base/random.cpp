#include <xgrad/base/random.hpp>

#include <cmath>
#include <vector>

namespace xgrad {

namespace {
std::uint64_t splitmix64(std::uint64_t& x) {
  std::uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
}  // namespace

void Generator::manual_seed(std::uint64_t seed) {
  std::lock_guard<std::mutex> lock(mutex_);
  seed_ = seed;
  std::uint64_t x = seed;
  for (auto& word : s_) word = splitmix64(x);
}

double Generator::normal() {
  // Box-Muller; u1 in (0, 1] so that log(u1) is finite.
  const double u1 = 1.0 - uniform();
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

namespace {

using Words = std::array<std::uint64_t, 4>;  // a xoshiro256 state as a vector over GF(2)

// The state update of next_u64 (the output scrambler aside): linear over GF(2).
Words xoshiro_step(Words s) {
  const std::uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = (s[3] << 45) | (s[3] >> 19);
  return s;
}

// A 256 x 256 matrix over GF(2) by columns: col[i] = M e_i.
struct Gf2Matrix {
  std::array<Words, 256> col;
};

Words gf2_apply(const Gf2Matrix& m, const Words& v) {
  Words r{};
  for (int w = 0; w < 4; ++w)
    for (std::uint64_t bits = v[w]; bits != 0; bits &= bits - 1) {
      const Words& c = m.col[64 * w + __builtin_ctzll(bits)];
      for (int k = 0; k < 4; ++k) r[k] ^= c[k];
    }
  return r;
}

// The update's 2^j-th powers, j < kJumpBits (384 KiB, built at the first jump in a few ms): enough
// for any element count an array can have.
constexpr int kJumpBits = 48;

const std::vector<Gf2Matrix>& step_powers() {
  static const std::vector<Gf2Matrix> powers = [] {
    std::vector<Gf2Matrix> p(kJumpBits);
    for (int i = 0; i < 256; ++i) {
      Words e{};
      e[i / 64] = std::uint64_t{1} << (i % 64);
      p[0].col[i] = xoshiro_step(e);
    }
    for (int j = 1; j < kJumpBits; ++j)
      for (int i = 0; i < 256; ++i) p[j].col[i] = gf2_apply(p[j - 1], p[j - 1].col[i]);
    return p;
  }();
  return powers;
}

Words jump(Words s, std::uint64_t n) {
  if (n == 0) return s;
  const std::vector<Gf2Matrix>& powers = step_powers();
  for (int j = 0; j < kJumpBits && (n >> j) != 0; ++j)
    if ((n >> j) & 1) s = gf2_apply(powers[j], s);
  if ((n >> kJumpBits) == 0) return s;
  // 2^48 draws and more: the higher powers squared here (no array is that large).
  Gf2Matrix m = powers.back(), sq;
  for (int j = kJumpBits; j < 64; ++j) {
    for (int i = 0; i < 256; ++i) sq.col[i] = gf2_apply(m, m.col[i]);
    m = sq;
    if ((n >> j) & 1) s = gf2_apply(m, s);
  }
  return s;
}

}  // namespace

GeneratorState Generator::state_ahead(std::uint64_t n) const { return {seed_, jump(s_, n)}; }

void Generator::discard(std::uint64_t n) { s_ = jump(s_, n); }

Generator& default_generator() {
  static Generator generator;
  return generator;
}

void manual_seed(std::uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace xgrad
