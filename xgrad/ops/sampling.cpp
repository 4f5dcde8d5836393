// Ops that pick elements and draw samples, what generating text needs: tril and triu (masks over
// the last two dims), argmax, topk, sort (values differentiable, the gradient scattered back to the
// chosen indices), multinomial (torch.multinomial over xgrad's Generator), and the next-token
// sampler of sampling.hpp built on them.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <utility>
#include <vector>

#include <xgrad/backend/strided.hpp>
#include <xgrad/core/profiler.hpp>
#include <xgrad/core/trace.hpp>
#include <xgrad/ops/ops.hpp>
#include <xgrad/ops/sampling.hpp>

namespace xgrad {

namespace {

// An input viewed as (outer, size, inner) around one dim: element (o, j, c) is at
// (o * size + j) * inner + c. A 0-d input is one element along dim 0 (or -1), as torch.
struct AlongDim {
  std::size_t outer = 1, size = 1, inner = 1;
  std::size_t at(std::size_t o, std::size_t j, std::size_t c) const { return (o * size + j) * inner + c; }
};

AlongDim along_dim(const Shape& shape, std::int64_t dim, const char* op) {
  const std::size_t k = normalize_dim(dim, std::max<std::size_t>(shape.size(), 1), op);
  if (shape.empty()) return {};
  return {detail::numel(shape, 0, k), shape[k], detail::numel(shape, k + 1, shape.size())};
}

// The order sort and topk put values in: NaN counts as larger than every number (torch).
// `x` strictly before `y` in descending (or ascending) order.
template <class T>
bool comes_before(T x, T y, bool descending) {
  if (descending) {
    if (std::isnan(x)) return !std::isnan(y);
    return !std::isnan(y) && x > y;
  }
  if (std::isnan(y)) return !std::isnan(x);
  return !std::isnan(x) && x < y;
}

// Elements picked by flat position, the values half of topk and sort, and its adjoint:
// take (y[i] = x[source[i]]) and put (dx[source[i]] += dy[i]), each the other's derivative.
using Positions = std::shared_ptr<const Array<std::size_t>>;

template <class T>
Tensor<T> put_positions(const Tensor<T>& src, const Positions& source, const Shape& out_shape);

// y (out_shape) = x[source[i]]; dx = put_positions(dy).
template <class T>
Tensor<T> take_positions(const Tensor<T>& x, const Positions& source, const Shape& out_shape) {
  Array<T> y = empty_array<T>(out_shape, "take_positions");
  const std::size_t* ps = source->data();
  for (std::size_t i = 0; i < source->size(); ++i) y.data()[i] = x.value().data()[ps[i]];
  GradFormula<T> formula = [source](const BackwardArgs<T>& args) {
    return std::vector<Tensor<T>>{put_positions(args.grad(), source, args.input_shape(0))};
  };
  return make_result<T>("take_positions", std::move(y), {x}, backward_from_formula(formula), formula);
}

// The gradient of a take as an op of its own, so that it can be differentiated again:
// y (out_shape) = zeros with src[i] added at source[i]; d/d(src) = take_positions(dy).
template <class T>
Tensor<T> put_positions(const Tensor<T>& src, const Positions& source, const Shape& out_shape) {
  Array<T> y = full_array<T>(out_shape, T(0), "put_positions");
  const std::size_t* ps = source->data();
  for (std::size_t i = 0; i < source->size(); ++i) y.data()[ps[i]] += src.value().data()[i];
  GradFormula<T> formula = [source](const BackwardArgs<T>& args) {
    return std::vector<Tensor<T>>{take_positions(args.grad(), source, args.input_shape(0))};
  };
  return make_result<T>("put_positions", std::move(y), {src}, backward_from_formula(formula), formula);
}

// y[o, j, c] = a[o, index[o, j, c], c] (index has the shape `out_shape`, `m` entries along dim);
// da[o, index[o, j, c], c] += dy[o, j, c] (put_positions under create_graph). The values half of
// topk and sort.
template <class T>
Tensor<T> take_along(const char* op, const Tensor<T>& a, const AlongDim& v, std::size_t m, const IndexArray& index,
                     const Shape& out_shape) {
  Array<T> y = empty_array<T>(out_shape, op);
  const T* pa = a.value().data();
  const std::int64_t* pi = index.data();
  // Flat input position of every output element, kept for the backward.
  auto source = std::make_shared<Array<std::size_t>>(empty_array<std::size_t>({y.size()}, op));
  std::size_t* ps = source->data();
  for (std::size_t o = 0; o < v.outer; ++o)
    for (std::size_t j = 0; j < m; ++j)
      for (std::size_t c = 0; c < v.inner; ++c) {
        const std::size_t i = (o * m + j) * v.inner + c;
        ps[i] = v.at(o, static_cast<std::size_t>(pi[i]), c);
        y.data()[i] = pa[ps[i]];
      }
  return make_result<T>(
      op, std::move(y), {a},
      [op, source](Node<T>& out) {
        Array<T> g = full_array<T>(out.input_shape(0), T(0), op);
        const T* pg = out.grad.data();
        const std::size_t* ps = source->data();
        for (std::size_t i = 0; i < source->size(); ++i) g.data()[ps[i]] += pg[i];
        out.input(0).accumulate_grad(std::move(g));
      },
      [source = Positions(source)](const BackwardArgs<T>& args) {
        return std::vector<Tensor<T>>{put_positions(args.grad(), source, args.input_shape(0))};
      });
}

// tril (lower = true) keeps a[..., i, j] where j - i <= diagonal, triu where j - i >= diagonal;
// the rest is zero, and so is its gradient.
template <class T>
Tensor<T> triangle(const char* op, const Tensor<T>& a, std::int64_t diagonal, bool lower) {
  const Shape shape = a.shape();
  XGRAD_CHECK(shape.size() >= 2, op, ": input must have at least 2 dimensions (..., rows, cols), got shape ", shape);
  const std::size_t rows = shape[shape.size() - 2], cols = shape.back();
  const std::size_t matrices = detail::numel(shape, 0, shape.size() - 2);
  const auto zero_outside = [=](Array<T>& x) {
    T* p = x.data();
    for (std::size_t b = 0; b < matrices; ++b)
      for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t j = 0; j < cols; ++j) {
          const std::int64_t offset = static_cast<std::int64_t>(j) - static_cast<std::int64_t>(i);
          if (lower ? offset > diagonal : offset < diagonal) p[(b * rows + i) * cols + j] = T(0);
        }
  };
  Array<T> y = copy_array(a.value(), op);
  zero_outside(y);
  return make_result<T>(
      op, std::move(y), {a},
      [zero_outside](Node<T>& out) {
        Array<T> g = std::move(out.grad);  // in place: the engine hands the gradient over
        zero_outside(g);
        out.input(0).accumulate_grad(std::move(g));
      },
      [diagonal, lower](const BackwardArgs<T>& args) {  // da = the same triangle of dy
        return std::vector<Tensor<T>>{lower ? xgrad::tril(args.grad(), diagonal) : xgrad::triu(args.grad(), diagonal)};
      });
}

}  // namespace

// ---- tril, triu ---------------------------------------------------------------------------------

template <class T>
Tensor<T> tril(const Tensor<T>& a, std::int64_t diagonal) {
  XGRAD_PROFILE_OP("tril");
  XGRAD_TRACE_NOTE("tril", {"diagonal", diagonal});
  return triangle("tril", a, diagonal, /*lower=*/true);
}

template <class T>
Tensor<T> triu(const Tensor<T>& a, std::int64_t diagonal) {
  XGRAD_PROFILE_OP("triu");
  XGRAD_TRACE_NOTE("triu", {"diagonal", diagonal});
  return triangle("triu", a, diagonal, /*lower=*/false);
}

// ---- argmax -------------------------------------------------------------------------------------

// index_{o,c} = the first j maximizing a[o, j, c] (a NaN is the maximum, as torch).
template <class T>
IndexArray argmax(const Tensor<T>& a, std::int64_t dim, bool keepdim) {
  XGRAD_PROFILE_OP("argmax");
  const Shape in = a.shape();
  const AlongDim v = along_dim(in, dim, "argmax");
  XGRAD_CHECK(v.size > 0, "argmax: cannot reduce over an empty dimension (input shape ", in, ", dim ", dim, ")");
  Shape out_shape;
  if (!in.empty()) {
    const std::size_t k = normalize_dim(dim, in.size(), "argmax");
    out_shape = in;
    if (keepdim) out_shape[k] = 1;
    else out_shape.erase(out_shape.begin() + static_cast<std::ptrdiff_t>(k));
  }
  IndexArray index = empty_array<std::int64_t>(out_shape, "argmax");
  const T* pa = a.value().data();
  for (std::size_t o = 0; o < v.outer; ++o)
    for (std::size_t c = 0; c < v.inner; ++c) {
      std::size_t best = 0;
      for (std::size_t j = 1; j < v.size; ++j)
        if (comes_before(pa[v.at(o, j, c)], pa[v.at(o, best, c)], /*descending=*/true)) best = j;
      index.data()[o * v.inner + c] = static_cast<std::int64_t>(best);
    }
  return index;
}

template <class T>
IndexArray argmax(const Tensor<T>& a) {
  XGRAD_PROFILE_OP("argmax");
  XGRAD_CHECK(a.numel() > 0, "argmax: expected a dim to reduce over for an input without elements (shape ",
              a.shape(), ")");
  const T* pa = a.value().data();
  std::size_t best = 0;
  for (std::size_t i = 1, n = a.value().size(); i < n; ++i)
    if (comes_before(pa[i], pa[best], /*descending=*/true)) best = i;
  IndexArray index = empty_array<std::int64_t>(Shape{}, "argmax");  // 0-d, as torch
  index() = static_cast<std::int64_t>(best);
  return index;
}

// ---- topk, sort ---------------------------------------------------------------------------------

// The k first positions of every line along dim in the order of comes_before, equal values by
// increasing index (a stable order); sorted = false returns the same k in increasing index order.
template <class T>
std::pair<Tensor<T>, IndexArray> topk(const Tensor<T>& a, std::int64_t k, std::int64_t dim, bool largest,
                                      bool sorted) {
  XGRAD_PROFILE_OP("topk");
  const Shape in = a.shape();
  const AlongDim v = along_dim(in, dim, "topk");
  XGRAD_CHECK(k >= 0 && static_cast<std::size_t>(k) <= v.size, "topk: k (", k,
              ") is out of range: it must be in [0, ", v.size, "], the size of dim ", dim, " of the input of shape ",
              in);
  // A 0-d input gives its one element back for k = 0 as for k = 1 (as torch).
  const std::size_t m = in.empty() ? 1 : static_cast<std::size_t>(k);
  Shape out_shape = in;
  if (!in.empty()) out_shape[normalize_dim(dim, in.size(), "topk")] = m;
  IndexArray index = empty_array<std::int64_t>(out_shape, "topk");
  const T* pa = a.value().data();
  std::vector<std::size_t> order(v.size);
  for (std::size_t o = 0; o < v.outer; ++o)
    for (std::size_t c = 0; c < v.inner; ++c) {
      std::iota(order.begin(), order.end(), std::size_t(0));
      // Ties broken by index: partial_sort then gives what a stable sort would.
      std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(m), order.end(),
                        [&](std::size_t x, std::size_t y) {
                          const T vx = pa[v.at(o, x, c)], vy = pa[v.at(o, y, c)];
                          if (comes_before(vx, vy, largest)) return true;
                          return !comes_before(vy, vx, largest) && x < y;
                        });
      if (!sorted) std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(m));
      for (std::size_t j = 0; j < m; ++j) index.data()[(o * m + j) * v.inner + c] = static_cast<std::int64_t>(order[j]);
    }
  Tensor<T> values = take_along("topk", a, v, m, index, out_shape);
  return {std::move(values), std::move(index)};
}

template <class T>
std::pair<Tensor<T>, IndexArray> sort(const Tensor<T>& a, std::int64_t dim, bool descending) {
  XGRAD_PROFILE_OP("sort");
  const Shape in = a.shape();
  const AlongDim v = along_dim(in, dim, "sort");
  IndexArray index = empty_array<std::int64_t>(in, "sort");
  const T* pa = a.value().data();
  std::vector<std::size_t> order(v.size);
  for (std::size_t o = 0; o < v.outer; ++o)
    for (std::size_t c = 0; c < v.inner; ++c) {
      std::iota(order.begin(), order.end(), std::size_t(0));
      std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
        return comes_before(pa[v.at(o, x, c)], pa[v.at(o, y, c)], descending);
      });
      for (std::size_t j = 0; j < v.size; ++j) index.data()[v.at(o, j, c)] = static_cast<std::int64_t>(order[j]);
    }
  Tensor<T> values = take_along("sort", a, v, v.size, index, in);
  return {std::move(values), std::move(index)};
}

// ---- multinomial --------------------------------------------------------------------------------

// Row r of probs (its weights w, summing to W) -> num_samples category indices.
//   with replacement: each sample is the first c with cdf(c) > u, u uniform in [0, W) (so a
//     zero-weight category is never drawn);
//   without: the num_samples largest keys w_c / e_c, e_c ~ Exp(1), over the categories with
//     w_c > 0 -- the same distribution as drawing one at a time and removing it, and the method
//     torch uses.
// Rows are drawn in order, each from the generator's stream, which is held for the whole call.
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
  // Every row is checked before anything is drawn: an error leaves the generator untouched.
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
  Shape out_shape = shape.size() == 2 ? Shape{rows, n} : Shape{n};
  IndexArray out = empty_array<std::int64_t>(out_shape, "multinomial");
  std::int64_t* po = out.data();
  Generator& gen = generator != nullptr ? *generator : default_generator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  std::vector<double> cdf(C), key(C);
  std::vector<std::size_t> order(C);
  for (std::size_t r = 0; r < rows; ++r) {
    const T* w = p + r * C;
    // The weights are divided by the row's largest, in double: their sum cannot overflow (float64
    // weights near DBL_MAX summed to inf, and every draw was the last category) and denormal
    // weights keep their ratios.
    const double wmax = static_cast<double>(*std::max_element(w, w + C));  // > 0: checked above
    if (replacement) {
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
        po[r * n + s] = static_cast<std::int64_t>(std::min(c, last));  // c == C only by rounding
      }
    } else {
      for (std::size_t c = 0; c < C; ++c) {
        const double e = -std::log1p(-gen.uniform());  // Exp(1); 1 - uniform() is in (0, 1]
        key[c] = w[c] > 0 ? static_cast<double>(w[c]) / wmax / e : -1.0;
      }
      std::iota(order.begin(), order.end(), std::size_t(0));
      std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(),
                        [&](std::size_t x, std::size_t y) { return key[x] > key[y] || (key[x] == key[y] && x < y); });
      for (std::size_t s = 0; s < n; ++s) po[r * n + s] = static_cast<std::int64_t>(order[s]);
    }
  }
  return out;
}

// ---- SamplingOptions, sample_next_token (sampling.hpp) -------------------------------------------

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

#define XGRAD_INSTANTIATE(T)                                                                               \
  template Tensor<T> tril<T>(const Tensor<T>&, std::int64_t);                                              \
  template Tensor<T> triu<T>(const Tensor<T>&, std::int64_t);                                              \
  template IndexArray argmax<T>(const Tensor<T>&, std::int64_t, bool);                                     \
  template IndexArray argmax<T>(const Tensor<T>&);                                                         \
  template std::pair<Tensor<T>, IndexArray> topk<T>(const Tensor<T>&, std::int64_t, std::int64_t, bool, bool); \
  template std::pair<Tensor<T>, IndexArray> sort<T>(const Tensor<T>&, std::int64_t, bool);                 \
  template IndexArray multinomial<T>(const Tensor<T>&, std::int64_t, bool, Generator*);                    \
  template IndexArray sample_next_token<T>(const Tensor<T>&, const SamplingOptions&, Generator*);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad
