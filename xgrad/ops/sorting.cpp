// Ops that order elements along a dim: argmax, topk and sort (values differentiable, the gradient
// scattered back to the chosen indices; equal values in a stable order, NaN the largest).
#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <utility>
#include <vector>

#include <xgrad/backend/strided.hpp>
#include <xgrad/ops/op_scope.hpp>
#include <xgrad/ops/ops.hpp>

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
Tensor<T> take_along(const OpScope& scope, const Tensor<T>& a, const AlongDim& v, std::size_t m,
                     const IndexArray& index, const Shape& out_shape) {
  const char* op = scope.name();
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
  return scope.result<T>(
      std::move(y), {a},
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

}  // namespace

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
    if (keepdim)
      out_shape[k] = 1;
    else
      out_shape.erase(out_shape.begin() + static_cast<std::ptrdiff_t>(k));
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
  XGRAD_CHECK(a.numel() > 0, "argmax: expected a dim to reduce over for an input without elements (shape ", a.shape(),
              ")");
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
std::pair<Tensor<T>, IndexArray> topk(const Tensor<T>& a, std::int64_t k, std::int64_t dim, bool largest, bool sorted) {
  const OpScope op(OpKind::topk);
  const Shape in = a.shape();
  const AlongDim v = along_dim(in, dim, op.name());
  XGRAD_CHECK(k >= 0 && static_cast<std::size_t>(k) <= v.size, "topk: k (", k, ") is out of range: it must be in [0, ",
              v.size, "], the size of dim ", dim, " of the input of shape ", in);
  // A 0-d input gives its one element back for k = 0 as for k = 1 (as torch).
  const std::size_t m = in.empty() ? 1 : static_cast<std::size_t>(k);
  Shape out_shape = in;
  if (!in.empty()) out_shape[normalize_dim(dim, in.size(), op.name())] = m;
  IndexArray index = empty_array<std::int64_t>(out_shape, op.name());
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
  Tensor<T> values = take_along(op, a, v, m, index, out_shape);
  return {std::move(values), std::move(index)};
}

template <class T>
std::pair<Tensor<T>, IndexArray> sort(const Tensor<T>& a, std::int64_t dim, bool descending) {
  const OpScope op(OpKind::sort);
  const Shape in = a.shape();
  const AlongDim v = along_dim(in, dim, op.name());
  IndexArray index = empty_array<std::int64_t>(in, op.name());
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
  Tensor<T> values = take_along(op, a, v, v.size, index, in);
  return {std::move(values), std::move(index)};
}

#define XGRAD_INSTANTIATE(T)                                                                                   \
  template IndexArray argmax<T>(const Tensor<T>&, std::int64_t, bool);                                         \
  template IndexArray argmax<T>(const Tensor<T>&);                                                             \
  template std::pair<Tensor<T>, IndexArray> topk<T>(const Tensor<T>&, std::int64_t, std::int64_t, bool, bool); \
  template std::pair<Tensor<T>, IndexArray> sort<T>(const Tensor<T>&, std::int64_t, bool);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad
