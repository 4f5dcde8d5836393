// Losses: mse_loss and cross_entropy, each one node.

// First, so that its pragma covers xsimd wherever xtensor includes it (see simd.hpp).
#include <xgrad/backend/simd.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include <xgrad/ops/broadcast.hpp>
#include <xgrad/ops/op_scope.hpp>
#include <xgrad/ops/ops.hpp>
#include <xgrad/ops/sum_to.hpp>
#include <xgrad/backend/parallel_loops.hpp>
#include <xgrad/backend/strided.hpp>
#include <xgrad/base/warning.hpp>

namespace xgrad {

namespace {

enum class Reduction { none, mean, sum };

Reduction parse_reduction(const std::string& reduction, const char* op) {
  if (reduction == "mean") return Reduction::mean;
  if (reduction == "sum") return Reduction::sum;
  XGRAD_CHECK(reduction == "none", op, ": reduction must be \"mean\", \"sum\" or \"none\", got \"", reduction,
              "\"");
  return Reduction::none;
}

// A 0-d array holding v.
template <class T>
Array<T> scalar_array(const char* op, double v) {
  Array<T> a = empty_array<T>({}, op);
  *a.data() = static_cast<T>(v);
  return a;
}

}  // namespace

// ---- mse_loss ----------------------------------------------------------------------------------

namespace {

// d = input - target, broadcast: (n,) -> loss: d^2 per element ("none", in d's buffer) or
// sum d^2 [/ n] (0-d). The sum in double: each block of kBlock elements summed in order, then the
// block sums in order; the same at any thread count (and serial below the grain); the blocks'
// order of additions, not one running sum, so it may differ from a plain serial sum in double's
// last bits.
template <class T>
Array<T> mse_loss_forward(const char* op, Array<T>&& d, Reduction red) {
  T* pd = d.data();
  const std::size_t n = d.size();
  if (red == Reduction::none) {
    detail::parallel_blocks(n, [&](std::size_t i0, std::size_t i1) {
      for (std::size_t i = i0; i < i1; ++i) pd[i] *= pd[i];
    });
    return std::move(d);
  }
  const std::size_t blocks = (n + detail::kBlock - 1) / detail::kBlock;
  std::vector<double> partial(blocks);
  detail::parallel_blocks(n, [&](std::size_t i0, std::size_t i1) {
    for (std::size_t b0 = i0; b0 < i1; b0 += detail::kBlock) {
      const std::size_t b1 = std::min(b0 + detail::kBlock, i1);
      double s = 0;
      for (std::size_t i = b0; i < b1; ++i) s += static_cast<double>(pd[i]) * pd[i];
      partial[b0 / detail::kBlock] = s;
    }
  });
  double s = 0;
  for (const double v : partial) s += v;
  detail::recycle(d);  // the differences' buffer goes back to the array cache
  // mean of no elements: 0/0 = nan, as PyTorch
  return scalar_array<T>(op, red == Reduction::sum ? s : s / static_cast<double>(n));
}

// g = 2 (input - target) * dy [/ n] (dy: one per element for "none", else 0-d), over the
// broadcast shape (n,); d loss / d input = g summed to input's shape, d loss / d target = -g
// summed to target's.
template <class T>
void mse_loss_backward(const char* op, Node<T>& out, Reduction red) {
  Array<T> g = detail::binary_map(out.input_value(0), out.input_value(1), op, [](T a, T b) { return a - b; });
  T* pg = g.data();
  const std::size_t n = g.size();
  if (red == Reduction::none) {
    const T* dy = out.grad.data();
    detail::parallel_blocks(n, [&](std::size_t i0, std::size_t i1) {
      for (std::size_t i = i0; i < i1; ++i) pg[i] *= T(2) * dy[i];
    });
  } else {
    T scale = T(2) * *out.grad.data();
    if (red == Reduction::mean) scale /= static_cast<T>(n);
    detail::parallel_blocks(n, [&](std::size_t i0, std::size_t i1) {
      for (std::size_t i = i0; i < i1; ++i) pg[i] *= scale;
    });
  }
  if (out.input_needs_grad(1)) {
    Array<T> gt = sum_to(g, out.input_shape(1));
    T* pt = gt.data();
    detail::parallel_blocks(gt.size(), [&](std::size_t i0, std::size_t i1) {
      for (std::size_t i = i0; i < i1; ++i) pt[i] = -pt[i];
    });
    out.input(1).accumulate_grad(std::move(gt));
  }
  if (out.input_needs_grad(0)) {
    const Shape si = out.input_shape(0);
    if (si == shape_of(g))
      out.input(0).accumulate_grad(std::move(g));
    else
      out.input(0).accumulate_grad(sum_to(g, si));
  }
  detail::recycle(g);  // when it was not handed over
}

// Under create_graph, the same in differentiable ops: g = 2 (input - target) dy [/ n].
template <class T>
std::vector<Tensor<T>> mse_loss_formula(const BackwardArgs<T>& args, Reduction red) {
  const Tensor<T> d = sub(args.input(0), args.input(1));
  Tensor<T> g = mul(mul(d, args.grad()), T(2));
  if (red == Reduction::mean) g = mul(g, T(1) / static_cast<T>(d.numel()));
  std::vector<Tensor<T>> grads(2);
  if (args.needs(0)) grads[0] = sum_to(g, args.input_shape(0));
  if (args.needs(1)) grads[1] = neg(sum_to(g, args.input_shape(1)));
  return grads;
}

}  // namespace

// l = (input - target)^2, then mean / sum / none. input and target broadcast together, with
// PyTorch's warning when their shapes differ; shapes that cannot broadcast throw naming both.
// https://pytorch.org/docs/stable/generated/torch.nn.functional.mse_loss.html
template <class T>
Tensor<T> mse_loss(const Tensor<T>& input, const Tensor<T>& target, const std::string& reduction) {
  const OpScope op(OpKind::mse_loss);
  const Reduction red = parse_reduction(reduction, op.name());
  Array<T> d = detail::binary_map(input.value(), target.value(), op.name(), [](T a, T b) { return a - b; });
  // Only once the shapes are known to broadcast (binary_map throws otherwise): a call that is
  // refused does not spend the call site's warning.
  if (target.shape() != input.shape())
    XGRAD_WARN_ONCE(op.name(), ": using a target size ", target.shape(), " that is different to the input size ",
                    input.shape(),
                    ". This will likely lead to incorrect results due to broadcasting. Please "
                    "ensure they have the same size.");
  return op.result<T>(
      mse_loss_forward<T>(op.name(), std::move(d), red), {input, target},
      [red, name = op.name()](Node<T>& out) { mse_loss_backward<T>(name, out, red); },
      [red](const BackwardArgs<T>& args) { return mse_loss_formula<T>(args, red); });
}

// ---- cross_entropy -----------------------------------------------------------------------------

namespace {

// logits (N, C, d1, ...) seen as N blocks of (C, inner): position (n, i) has its C logits at
// n * C * inner + i with stride inner, and its target at n * inner + i.
template <class T>
struct CrossEntropySaved {
  std::size_t classes = 0, inner = 1, positions = 0;
  IndexArray target;
  std::int64_t ignore_index = -100;
  double label_smoothing = 0;
  Reduction reduction = Reduction::mean;
  std::size_t count = 0;     // non-ignored targets
  // Per position: the max logit and sum_c exp(logit_c - max), so that the backward forms
  // p_c = exp(x_c - max) / sum_exp exactly as the forward did (x_c - lse in float would lose
  // digits for large logits).
  std::vector<T> max;
  std::vector<double> sum_exp;
};

// Checks logits (C), (N, C) or (N, C, d1, ...) against target (), (N) or (N, d1, ...) and every
// target against the C classes; returns what the kernels need, the targets counted.
template <class T>
CrossEntropySaved<T> cross_entropy_saved(const char* op, const Shape& sl, const IndexArray& target,
                                         std::int64_t ignore_index, double label_smoothing, Reduction red) {
  const Shape st = shape_of(target);
  XGRAD_CHECK(!sl.empty(), op, ": expected logits (C), (N, C) or (N, C, d1, ...), got ", sl);
  Shape expected;  // the target shape: logits' shape without the class dim
  if (sl.size() > 1) {
    expected.push_back(sl[0]);
    expected.insert(expected.end(), sl.begin() + 2, sl.end());
  }
  XGRAD_CHECK(st == expected, op, ": expected target of shape ", expected, " for logits ", sl, ", got ", st);
  CrossEntropySaved<T> s;
  s.classes = sl.size() == 1 ? sl[0] : sl[1];
  s.inner = detail::numel(sl, 2, sl.size());
  s.positions = target.size();
  s.target = target;
  s.ignore_index = ignore_index;
  s.label_smoothing = label_smoothing;
  s.reduction = red;
  s.max.resize(s.positions);
  s.sum_exp.resize(s.positions);
  const std::int64_t* pt = target.data();
  for (std::size_t p = 0; p < s.positions; ++p) {
    const std::int64_t t = pt[p];
    if (t == ignore_index) continue;
    XGRAD_CHECK(t >= 0 && t < static_cast<std::int64_t>(s.classes), op, ": target ", t, " is out of bounds for ",
                s.classes, " classes (expected a value in [0, ", s.classes, ") or ignore_index ", ignore_index, ")");
    ++s.count;
  }
  return s;
}

// logits x: (N, C, inner) -> loss per position (losses, when not null: 0 at an ignored one) and
// their sum over the non-ignored positions, returned; s.max, s.sum_exp: per position.
//   loss = (1 - ls)(lse - x_t) + ls (lse - mean_c x_c),  lse = max + log sum_c exp(x_c - max)
// Split by positions (each reads its C logits; grain: 32K logits a chunk); the total adds the
// positions' losses in order afterwards, as a serial loop would.
template <class T>
double cross_entropy_forward(const T* px, CrossEntropySaved<T>& s, T* losses) {
  const std::size_t C = s.classes, inner = s.inner;
  const std::int64_t* pt = s.target.data();
  const double ls = s.label_smoothing;
  std::vector<double> position_loss(s.positions);
  detail::parallel_for(s.positions, detail::grain_for_units(C), [&](std::size_t p0, std::size_t p1) {
    for (std::size_t p = p0; p < p1; ++p) {
      const std::int64_t t = pt[p];
      if (t == s.ignore_index) {
        if (losses) losses[p] = T(0);
        continue;
      }
      const T* x = px + (p / inner) * C * inner + p % inner;  // x[c * inner] is logit c
      double sum_exp = 0, sum_x = 0;
      T mx = -std::numeric_limits<T>::infinity();
      if (inner == 1) {
        mx = detail::simd_max(x, C);
        sum_exp = detail::simd_sum_exp_sub(x, mx, C);
      } else {
        for (std::size_t c = 0; c < C; ++c) mx = std::max(mx, x[c * inner]);
        for (std::size_t c = 0; c < C; ++c) sum_exp += std::exp(x[c * inner] - mx);
      }
      if (ls != 0)
        for (std::size_t c = 0; c < C; ++c) sum_x += x[c * inner];
      const double lse = mx + std::log(sum_exp);
      s.max[p] = mx;
      s.sum_exp[p] = sum_exp;
      double loss = (1 - ls) * (lse - x[static_cast<std::size_t>(t) * inner]);
      if (ls != 0) loss += ls * (lse - sum_x / static_cast<double>(C));
      if (losses) losses[p] = static_cast<T>(loss);
      position_loss[p] = loss;
    }
  });
  double total = 0;
  for (std::size_t p = 0; p < s.positions; ++p)
    if (pt[p] != s.ignore_index) total += position_loss[p];
  return total;
}

// logits x: (N, C, inner), dy: one per position ("none") or 0-d -> dx: x's shape, 0 at ignored
// positions, else
//   dx_c = scale * (p_c - (1 - ls) [c == t] - ls / C),  p_c = exp(x_c - max) / sum_exp,
//   scale = dy [/ count]
// Split by positions, as the forward; each writes only its own C entries of dx.
template <class T>
Array<T> cross_entropy_backward(const T* px, const T* dy, const CrossEntropySaved<T>& s, const Shape& shape) {
  const std::size_t C = s.classes, inner = s.inner;
  const std::int64_t* pt = s.target.data();
  Array<T> dx = full_array<T>(shape, T(0), "cross_entropy (backward)");
  T* pdx = dx.data();
  const double ls = s.label_smoothing;
  const double uniform = ls / static_cast<double>(C);
  detail::parallel_for(s.positions, detail::grain_for_units(C), [&](std::size_t p0, std::size_t p1) {
    for (std::size_t p = p0; p < p1; ++p) {
      const std::int64_t t = pt[p];
      if (t == s.ignore_index) continue;
      double scale = s.reduction == Reduction::none ? dy[p] : dy[0];
      if (s.reduction == Reduction::mean) scale /= static_cast<double>(s.count);
      const std::size_t base = (p / inner) * C * inner + p % inner;
      const T* x = px + base;
      T* g = pdx + base;
      const T mx = s.max[p];
      const T sc = static_cast<T>(scale / s.sum_exp[p]), off = static_cast<T>(scale * uniform);
      if (inner == 1) {
        detail::simd_exp_sub_sum(x, mx, g, C);
        for (std::size_t c = 0; c < C; ++c) g[c] = sc * g[c] - off;
      } else {
        for (std::size_t c = 0; c < C; ++c) g[c * inner] = sc * std::exp(x[c * inner] - mx) - off;
      }
      g[static_cast<std::size_t>(t) * inner] -= static_cast<T>(scale * (1 - ls));
    }
  });
  return dx;
}

// Under create_graph, cross_entropy's backward in differentiable ops of the logits and dy:
//   dx = (softmax(x) * valid - W) * dy [/ count]
// with constants of the logits' shape: W_c = (1 - ls) [c == t] + ls / C at a non-ignored position
// (the weight of logp_c in its loss) and 0 at an ignored one, valid = 1 at a non-ignored position
// and 0 at an ignored one. dy ("none": one per position) gets a size-1 class dim to broadcast.
template <class T>
std::vector<Tensor<T>> cross_entropy_formula(const BackwardArgs<T>& args, const CrossEntropySaved<T>& s) {
  if (!args.needs(0)) return {Tensor<T>()};
  const Shape sl = args.input_shape(0);
  const std::size_t C = s.classes, inner = s.inner;
  Array<T> weights = full_array<T>(sl, T(0), "cross_entropy (backward)");
  Array<T> valid = full_array<T>(sl, T(0), "cross_entropy (backward)");
  const T uniform = static_cast<T>(s.label_smoothing / static_cast<double>(C));
  const std::int64_t* pt = s.target.data();
  for (std::size_t p = 0; p < s.positions; ++p) {
    const std::int64_t t = pt[p];
    if (t == s.ignore_index) continue;
    const std::size_t base = (p / inner) * C * inner + p % inner;
    for (std::size_t c = 0; c < C; ++c) {
      weights.data()[base + c * inner] = uniform;
      valid.data()[base + c * inner] = T(1);
    }
    weights.data()[base + static_cast<std::size_t>(t) * inner] += static_cast<T>(1 - s.label_smoothing);
  }
  const std::int64_t class_dim = sl.size() == 1 ? 0 : 1;
  const Tensor<T> q = mul(softmax(args.input(0), class_dim), Tensor<T>(std::move(valid)));
  Tensor<T> dy = args.grad();
  if (s.reduction == Reduction::none && sl.size() > 1) {
    std::vector<std::int64_t> kept(sl.begin(), sl.end());
    kept[1] = 1;
    dy = reshape(dy, kept);
  }
  if (s.reduction == Reduction::mean && s.count > 0) dy = mul(dy, T(1) / static_cast<T>(s.count));
  return {mul(sub(q, Tensor<T>(std::move(weights))), dy)};
}

}  // namespace

// With lse = log sum_c exp(x_c) and logp_c = x_c - lse, at each non-ignored position:
//   loss = (1 - ls) (-logp_t) + ls (-(1/C) sum_c logp_c) = (1 - ls)(lse - x_t) + ls (lse - mean_c x_c)
// "mean" divides the sum by the number of non-ignored targets. When every target is ignored,
// "mean" gives nan (0/0, as PyTorch 1.13 does) and the gradient is zero.
// https://pytorch.org/docs/stable/generated/torch.nn.functional.cross_entropy.html
template <class T>
Tensor<T> cross_entropy(const Tensor<T>& logits, const IndexArray& target, std::int64_t ignore_index,
                        const std::string& reduction, double label_smoothing) {
  const OpScope op(OpKind::cross_entropy);
  const Reduction red = parse_reduction(reduction, op.name());
  XGRAD_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, op.name(),
              ": label_smoothing must be between 0.0 and 1.0, got ", label_smoothing);
  auto saved = std::make_shared<CrossEntropySaved<T>>(
      cross_entropy_saved<T>(op.name(), logits.shape(), target, ignore_index, label_smoothing, red));
  const bool per_position = red == Reduction::none;
  Array<T> losses;
  if (per_position) losses = empty_array<T>(shape_of(target), op.name());
  const double total = cross_entropy_forward(logits.value().data(), *saved, per_position ? losses.data() : nullptr);
  Array<T> y = per_position ? std::move(losses)
                            : scalar_array<T>(
                                  op.name(), red == Reduction::sum ? total : total / static_cast<double>(saved->count));
  return op.result<T>(
      std::move(y), {logits},
      [saved](Node<T>& out) {
        if (!out.input_needs_grad(0)) return;
        out.input(0).accumulate_grad(
            cross_entropy_backward(out.input_value(0).data(), out.grad.data(), *saved, out.input_shape(0)));
      },
      [saved](const BackwardArgs<T>& args) { return cross_entropy_formula(args, *saved); });
}

#define XGRAD_INSTANTIATE(T)                                                                             \
  template Tensor<T> mse_loss<T>(const Tensor<T>&, const Tensor<T>&, const std::string&);                \
  template Tensor<T> cross_entropy<T>(const Tensor<T>&, const IndexArray&, std::int64_t,                 \
                                      const std::string&, double);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad
