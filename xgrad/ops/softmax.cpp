// softmax and log_softmax along any dim, each one node with a hand-derived backward.
//
// The tensor is seen as (outer, n, inner) with n the size of `dim`: each of the outer * inner
// rows holds n elements at stride `inner`. Rows are max-subtracted, so logits of any magnitude
// give finite results.
//
// Convention (which scaled-dot-product attention relies on): a row whose entries are all -inf
// (every position masked) has softmax 0 everywhere (where PyTorch gives NaN) and a zero
// gradient; its log_softmax is -inf everywhere (the log of those zeros), again with a zero
// gradient. Rows with at least one finite entry are exactly PyTorch's.

// First, so that its pragma covers xsimd wherever xtensor includes it (see simd.hpp).
#include <xgrad/backend/simd.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include <xgrad/ops/op_scope.hpp>
#include <xgrad/ops/ops.hpp>
#include <xgrad/backend/strided.hpp>

namespace xgrad {

namespace {

struct RowLayout {
  std::size_t outer = 1, n = 1, inner = 1;
};

RowLayout row_layout(const Shape& shape, std::int64_t dim, const char* op) {
  // A 0-d tensor is one row of one element (as in PyTorch, dim 0 or -1).
  const std::size_t d = normalize_dim(dim, std::max<std::size_t>(shape.size(), 1), op);
  RowLayout r;
  if (shape.empty()) return r;
  r.outer = detail::numel(shape, 0, d);
  r.n = shape[d];
  r.inner = detail::numel(shape, d + 1, shape.size());
  return r;
}

// y = softmax(x) (log = false) or log_softmax(x) (log = true) over the rows of `layout`.
// For inner > 1, a block of `inner` rows is processed together so the loops stay contiguous.
template <class T>
void softmax_forward(const T* x, T* y, const RowLayout& L, bool log) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  if (L.inner == 1) {
    for (std::size_t o = 0; o < L.outer; ++o) {
      const T* xr = x + o * L.n;
      T* yr = y + o * L.n;
      const T mx = detail::simd_max(xr, L.n);
      if (mx == neg_inf) {  // fully masked row (see the convention above)
        std::fill(yr, yr + L.n, log ? neg_inf : T(0));
        continue;
      }
      if (log) {
        const T lse = mx + std::log(detail::simd_sum_exp_sub(xr, mx, L.n));
        for (std::size_t j = 0; j < L.n; ++j) yr[j] = xr[j] - lse;
      } else {
        const T inv = T(1) / detail::simd_exp_sub_sum(xr, mx, yr, L.n);
        for (std::size_t j = 0; j < L.n; ++j) yr[j] *= inv;
      }
    }
    return;
  }
  // Strided rows: mx and s hold one running value per row of the block.
  std::vector<T> mx(L.inner), s(L.inner);
  for (std::size_t o = 0; o < L.outer; ++o) {
    const T* xb = x + o * L.n * L.inner;
    T* yb = y + o * L.n * L.inner;
    std::fill(mx.begin(), mx.end(), neg_inf);
    std::fill(s.begin(), s.end(), T(0));
    for (std::size_t j = 0; j < L.n; ++j)
      for (std::size_t i = 0; i < L.inner; ++i) mx[i] = std::max(mx[i], xb[j * L.inner + i]);
    for (std::size_t j = 0; j < L.n; ++j)
      for (std::size_t i = 0; i < L.inner; ++i) {
        const T e = mx[i] == neg_inf ? T(0) : std::exp(xb[j * L.inner + i] - mx[i]);
        if (!log) yb[j * L.inner + i] = e;
        s[i] += e;
      }
    if (log) {
      for (std::size_t i = 0; i < L.inner; ++i) s[i] = mx[i] == neg_inf ? neg_inf : mx[i] + std::log(s[i]);
      for (std::size_t j = 0; j < L.n; ++j)
        for (std::size_t i = 0; i < L.inner; ++i)
          yb[j * L.inner + i] = s[i] == neg_inf ? neg_inf : xb[j * L.inner + i] - s[i];
    } else {
      for (std::size_t i = 0; i < L.inner; ++i) s[i] = s[i] == T(0) ? T(0) : T(1) / s[i];
      for (std::size_t j = 0; j < L.n; ++j)
        for (std::size_t i = 0; i < L.inner; ++i) yb[j * L.inner + i] *= s[i];
    }
  }
}

// softmax:     dx = y * (dy - sum_j dy_j y_j)
// log_softmax: dx = dy - exp(y) * sum_j dy_j
// A fully masked row gets dx = 0: softmax's y is 0 there, log_softmax's row is skipped.
template <class T>
void softmax_backward(const T* y, const T* dy, T* dx, const RowLayout& L, bool log) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  if (L.inner == 1) {
    for (std::size_t o = 0; o < L.outer; ++o) {
      const T* yr = y + o * L.n;
      const T* gr = dy + o * L.n;
      T* dr = dx + o * L.n;
      if (log) {
        // In a row with a finite entry, the entry that was the max has y = -log(sum) > -inf.
        if (detail::simd_max(yr, L.n) == neg_inf) {
          std::fill(dr, dr + L.n, T(0));
          continue;
        }
        detail::simd_sub_scaled_exp(gr, detail::simd_sum(gr, L.n), yr, dr, L.n);
      } else {
        const T s = detail::simd_dot(gr, yr, L.n);
        for (std::size_t j = 0; j < L.n; ++j) dr[j] = yr[j] * (gr[j] - s);
      }
    }
    return;
  }
  std::vector<T> s(L.inner), ymax(L.inner);
  for (std::size_t o = 0; o < L.outer; ++o) {
    const std::size_t base = o * L.n * L.inner;
    const T* yb = y + base;
    const T* gb = dy + base;
    T* db = dx + base;
    std::fill(s.begin(), s.end(), T(0));
    std::fill(ymax.begin(), ymax.end(), neg_inf);
    for (std::size_t j = 0; j < L.n; ++j)
      for (std::size_t i = 0; i < L.inner; ++i) {
        const std::size_t e = j * L.inner + i;
        if (log) {
          s[i] += gb[e];
          ymax[i] = std::max(ymax[i], yb[e]);
        } else {
          s[i] += gb[e] * yb[e];
        }
      }
    for (std::size_t j = 0; j < L.n; ++j)
      for (std::size_t i = 0; i < L.inner; ++i) {
        const std::size_t e = j * L.inner + i;
        if (log) db[e] = ymax[i] == neg_inf ? T(0) : gb[e] - std::exp(yb[e]) * s[i];
        else db[e] = yb[e] * (gb[e] - s[i]);
      }
  }
}

// Under create_graph, the backward in differentiable ops of the output y (which keeps its history,
// as PyTorch's formulas use `result`), so that it can be differentiated again:
//   softmax:     dx = y * (dy - sum_dim(dy * y))
//   log_softmax: dx = dy - exp(y) * sum_dim(dy), times a constant 0 on fully masked rows (y = -inf
//                everywhere: the first-order kernel gives them dx = 0); softmax needs no mask (y = 0).
template <class T>
std::vector<Tensor<T>> softmax_formula(const BackwardArgs<T>& args, std::int64_t dim, const RowLayout& L, bool log) {
  const Tensor<T> y = args.output();
  const Tensor<T>& dy = args.grad();
  // The sum along dim, kept (a 0-d tensor is one row of one element).
  const auto row_sum = [&](const Tensor<T>& t) { return y.dim() == 0 ? t : sum(t, {dim}, true); };
  if (!log) return {mul(y, sub(dy, row_sum(mul(dy, y))))};
  Tensor<T> dx = sub(dy, mul(exp(y), row_sum(dy)));
  // A fully masked row is one whose every y is -inf: its max is -inf.
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const T* py = y.value().data();
  Array<T> keep = empty_array<T>(y.shape(), "log_softmax (backward)");
  T* pk = keep.data();
  bool masked = false;
  for (std::size_t o = 0; o < L.outer; ++o)
    for (std::size_t i = 0; i < L.inner; ++i) {
      const std::size_t base = o * L.n * L.inner + i;
      T mx = neg_inf;
      for (std::size_t j = 0; j < L.n; ++j) mx = std::max(mx, py[base + j * L.inner]);
      masked = masked || (mx == neg_inf && L.n > 0);
      for (std::size_t j = 0; j < L.n; ++j) pk[base + j * L.inner] = mx == neg_inf ? T(0) : T(1);
    }
  return {masked ? mul(dx, Tensor<T>(std::move(keep))) : dx};
}

template <class T>
Tensor<T> softmax_impl(const OpScope& scope, const Tensor<T>& a, std::int64_t dim, bool log) {
  const char* op = scope.name();
  const RowLayout L = row_layout(a.shape(), dim, op);
  Array<T> y = empty_array<T>(a.shape(), op);
  softmax_forward(a.value().data(), y.data(), L, log);
  XGRAD_OP_NOTE(scope, {"dim", dim});
  return scope.result<T>(
      std::move(y), {a},
      [op, L, log](Node<T>& out) {
        if (!out.input_needs_grad(0)) return;
        Array<T> dx = empty_array<T>(out.output_value().shape(), op);
        softmax_backward(out.output_value().data(), out.grad.data(), dx.data(), L, log);
        out.input(0).accumulate_grad(std::move(dx));
      },
      [dim, L, log](const BackwardArgs<T>& args) { return softmax_formula(args, dim, L, log); });
}

}  // namespace

// y_j = exp(x_j - max) / sum_k exp(x_k - max) along dim.
// https://pytorch.org/docs/stable/generated/torch.nn.functional.softmax.html
template <class T>
Tensor<T> softmax(const Tensor<T>& a, std::int64_t dim) {
  const OpScope op(OpKind::softmax);
  return softmax_impl(op, a, dim, false);
}

// y_j = x_j - max - log sum_k exp(x_k - max) along dim.
// https://pytorch.org/docs/stable/generated/torch.nn.functional.log_softmax.html
template <class T>
Tensor<T> log_softmax(const Tensor<T>& a, std::int64_t dim) {
  const OpScope op(OpKind::log_softmax);
  return softmax_impl(op, a, dim, true);
}

#define XGRAD_INSTANTIATE(T)                                 \
  template Tensor<T> softmax<T>(const Tensor<T>&, std::int64_t);                                   \
  template Tensor<T> log_softmax<T>(const Tensor<T>&, std::int64_t);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad
