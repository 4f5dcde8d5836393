// The next-token sampler of sampling.hpp: generation policy built on the ops argmax and
// multinomial.
#include <xgrad/models/sampling.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <vector>

#include <xgrad/ops/ops.hpp>

namespace xgrad {

void SamplingOptions::check() const {
  XGRAD_CHECK(std::isfinite(temperature) && temperature > 0,
              "SamplingOptions: temperature must be a finite number > 0 (for argmax decoding set greedy), got ",
              temperature);
  XGRAD_CHECK(top_k >= 0, "SamplingOptions: top_k must be >= 0 (0 = off), got ", top_k);
  XGRAD_CHECK(top_p > 0 && top_p <= 1, "SamplingOptions: top_p must be in (0, 1] (1 = off), got ", top_p);
}

// Per row of V scores (the last position's logits): s = logits / temperature; top-k sets every
// s below the k-th largest to -inf; p = softmax(s); top-p zeroes p outside the smallest prefix,
// in descending p (stable), whose sum reaches top_p; then one multinomial draw from p.
template <class T>
IndexArray sample_next_token(const Tensor<T>& logits, const SamplingOptions& options, Generator* generator) {
  options.check();
  const Shape shape = logits.shape();
  XGRAD_CHECK(shape.size() >= 1 && shape.size() <= 3,
              "sample_next_token: logits must be (V), (N, V) or (N, L, V), got shape ", shape);
  const std::size_t V = shape.back(), N = shape.size() == 1 ? 1 : shape[0];
  const std::size_t L = shape.size() == 3 ? shape[1] : 1;
  XGRAD_CHECK(V > 0 && L > 0, "sample_next_token: logits have no vocabulary or no position (shape ", shape, ")");
  // The rows to sample from, in double: scores (N, V).
  Array<double> scores = empty_array<double>({N, V}, "sample_next_token");
  const T* pl = logits.value().data();
  for (std::size_t r = 0; r < N; ++r) {
    const T* row = pl + (r * L + L - 1) * V;
    bool finite = false;
    for (std::size_t c = 0; c < V; ++c) {
      XGRAD_CHECK(!std::isnan(row[c]) && row[c] != std::numeric_limits<T>::infinity(),
                  "sample_next_token: logits must not be NaN or +inf (row ", r, ", token ", c, ": ", row[c], ")");
      finite = finite || std::isfinite(row[c]);
      scores(r, c) = static_cast<double>(row[c]);
    }
    XGRAD_CHECK(finite, "sample_next_token: row ", r, " of the logits is all -inf: no token can be drawn");
  }
  IndexArray tokens = empty_array<std::int64_t>({N}, "sample_next_token");
  const Tensor<double> rows(std::move(scores));
  if (options.greedy) {
    tokens = argmax(rows, -1);
    return tokens;
  }
  Array<double> probs = empty_array<double>({N, V}, "sample_next_token");
  std::vector<double> sorted(V);
  std::vector<std::size_t> order(V);
  const auto k = static_cast<std::size_t>(options.top_k);
  for (std::size_t r = 0; r < N; ++r) {
    const double* s = rows.value().data() + r * V;
    double* p = probs.data() + r * V;
    // (s - max s) / temperature: the same softmax and order, and no overflow for a tiny temperature.
    const double smax = *std::max_element(s, s + V);
    for (std::size_t c = 0; c < V; ++c) p[c] = (s[c] - smax) / options.temperature;
    if (k > 0 && k < V) {  // top-k: ties with the k-th largest stay (as nanoGPT and HF)
      // Chosen on the logits themselves: the same order as the scaled scores', without the ties
      // that rounding makes among them (-2.4 and -1.2 beside a max of 3e38, or at temperature 1e300).
      sorted.assign(s, s + V);
      std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(k - 1), sorted.end(),
                       std::greater<double>());
      const double kth = sorted[k - 1];
      for (std::size_t c = 0; c < V; ++c)
        if (s[c] < kth) p[c] = -std::numeric_limits<double>::infinity();
    }
    const double top = *std::max_element(p, p + V);
    double total = 0;
    for (std::size_t c = 0; c < V; ++c) total += (p[c] = std::exp(p[c] - top));
    for (std::size_t c = 0; c < V; ++c) p[c] /= total;
    if (options.top_p < 1) {
      std::iota(order.begin(), order.end(), std::size_t(0));
      std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return p[x] > p[y]; });
      double cumulative = 0;
      std::size_t kept = 0;
      while (kept < V && cumulative < options.top_p) cumulative += p[order[kept++]];
      for (std::size_t j = kept; j < V; ++j) p[order[j]] = 0;
    }
  }
  const IndexArray drawn = multinomial(Tensor<double>(std::move(probs)), 1, /*replacement=*/true, generator);
  std::copy(drawn.begin(), drawn.end(), tokens.begin());
  return tokens;
}

template IndexArray sample_next_token<float>(const Tensor<float>&, const SamplingOptions&, Generator*);
template IndexArray sample_next_token<double>(const Tensor<double>&, const SamplingOptions&, Generator*);

}  // namespace xgrad
