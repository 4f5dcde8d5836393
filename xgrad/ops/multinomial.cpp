// torch.multinomial over xgrad's Generator: category indices drawn from rows of weights.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <numeric>
#include <vector>

#include <xgrad/core/profiler.hpp>
#include <xgrad/ops/ops.hpp>

namespace xgrad {

namespace {

// Every row of probs (rows, C) is checked before anything is drawn: an error leaves the generator
// untouched.
template <class T>
void check_rows(const T* p, std::size_t rows, std::size_t C, std::int64_t num_samples, bool replacement) {
  const auto n = static_cast<std::size_t>(num_samples);
  for (std::size_t r = 0; r < rows; ++r) {
    double total = 0;
    std::size_t nonzero = 0;
    for (std::size_t c = 0; c < C; ++c) {
      const T w = p[r * C + c];
      XGRAD_CHECK(std::isfinite(w) && w >= 0, "multinomial: probability tensor contains either inf, nan or ",
                  "element < 0 (row ", r, ", category ", c, ": ", w, ")");
      total += static_cast<double>(w);
      nonzero += w > 0 ? 1 : 0;
    }
    XGRAD_CHECK(total > 0, "multinomial: invalid multinomial distribution (sum of probabilities <= 0) in row ", r);
    XGRAD_CHECK(replacement || n <= nonzero, "multinomial: invalid multinomial distribution (with replacement=false, ",
                "not enough non-zero categories to sample): row ", r, " has ", nonzero, " for num_samples ",
                num_samples);
  }
}

// One row's weights w (C), divided by their largest wmax > 0 in double (their sum cannot overflow:
// float64 weights near DBL_MAX summed to inf, and every draw was the last category; denormal
// weights keep their ratios) -> n categories in out, each the first c with cdf(c) > u, u uniform
// in [0, W) (so a zero-weight category is never drawn). cdf: C doubles of scratch.
template <class T>
void draw_with_replacement(const T* w, std::size_t C, double wmax, std::size_t n, Generator& gen,
                           std::vector<double>& cdf, std::int64_t* out) {
  double sum = 0;
  std::size_t last = 0;  // the last category of positive (scaled) weight
  for (std::size_t c = 0; c < C; ++c) {
    const double x = static_cast<double>(w[c]) / wmax;
    sum += x;
    cdf[c] = sum;
    if (x > 0) last = c;
  }
  for (std::size_t s = 0; s < n; ++s) {
    const double u = gen.uniform() * sum;
    const auto c = static_cast<std::size_t>(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
    out[s] = static_cast<std::int64_t>(std::min(c, last));  // c == C only by rounding
  }
}

// The same row -> the n largest keys w_c / e_c, e_c ~ Exp(1), over the categories with w_c > 0:
// the same distribution as drawing one at a time and removing it, and the method torch uses.
// key, order: C entries of scratch.
template <class T>
void draw_without_replacement(const T* w, std::size_t C, double wmax, std::size_t n, Generator& gen,
                              std::vector<double>& key, std::vector<std::size_t>& order, std::int64_t* out) {
  for (std::size_t c = 0; c < C; ++c) {
    const double e = -std::log1p(-gen.uniform());  // Exp(1); 1 - uniform() is in (0, 1]
    key[c] = w[c] > 0 ? static_cast<double>(w[c]) / wmax / e : -1.0;
  }
  std::iota(order.begin(), order.end(), std::size_t(0));
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(),
                    [&](std::size_t x, std::size_t y) { return key[x] > key[y] || (key[x] == key[y] && x < y); });
  for (std::size_t s = 0; s < n; ++s) out[s] = static_cast<std::int64_t>(order[s]);
}

}  // namespace

// probs (C) or (N, C), rows of weights -> num_samples category indices per row, (num_samples) or
// (N, num_samples). Rows are drawn in order, each from the generator's stream, which is held for
// the whole call.
template <class T>
IndexArray multinomial(const Tensor<T>& probs, std::int64_t num_samples, bool replacement, Generator* generator) {
  XGRAD_PROFILE_OP("multinomial");
  const Shape shape = probs.shape();
  XGRAD_CHECK(shape.size() == 1 || shape.size() == 2, "multinomial: probs must be 1-D (C) or 2-D (N, C), got shape ",
              shape);
  XGRAD_CHECK(num_samples > 0, "multinomial: cannot sample num_samples <= 0 samples (got ", num_samples, ")");
  const std::size_t C = shape.back(), rows = shape.size() == 2 ? shape[0] : 1;
  const auto n = static_cast<std::size_t>(num_samples);
  XGRAD_CHECK(C > 0, "multinomial: probs has no categories (shape ", shape, ")");
  XGRAD_CHECK(replacement || n <= C, "multinomial: cannot sample num_samples > probs.size(-1) samples without ",
              "replacement (num_samples ", num_samples, ", ", C, " categories)");
  const T* p = probs.value().data();
  check_rows(p, rows, C, num_samples, replacement);
  IndexArray out = empty_array<std::int64_t>(shape.size() == 2 ? Shape{rows, n} : Shape{n}, "multinomial");
  Generator& gen = generator != nullptr ? *generator : default_generator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  std::vector<double> scratch(C);
  std::vector<std::size_t> order(C);
  for (std::size_t r = 0; r < rows; ++r) {
    const T* w = p + r * C;
    const double wmax = static_cast<double>(*std::max_element(w, w + C));  // > 0: checked above
    if (replacement)
      draw_with_replacement(w, C, wmax, n, gen, scratch, out.data() + r * n);
    else
      draw_without_replacement(w, C, wmax, n, gen, scratch, order, out.data() + r * n);
  }
  return out;
}

#define XGRAD_INSTANTIATE(T) template IndexArray multinomial<T>(const Tensor<T>&, std::int64_t, bool, Generator*);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad
