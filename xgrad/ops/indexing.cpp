// Indexing ops: index_select, embedding, masked_fill, where. Gathers scatter-add their gradient
// back (repeated indices add up); masked selections route it to the side that was chosen.
#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include <xgrad/ops/broadcast.hpp>
#include <xgrad/ops/op_scope.hpp>
#include <xgrad/ops/ops.hpp>
#include <xgrad/ops/sum_to.hpp>
#include <xgrad/backend/parallel_loops.hpp>
#include <xgrad/backend/strided.hpp>

namespace xgrad {

namespace {

// Checks index values against [0, size); names the op, the bad index and the size.
void check_indices(const IndexArray& index, std::size_t size, const char* op, const char* what) {
  for (std::int64_t i : index)
    XGRAD_CHECK(i >= 0 && static_cast<std::size_t>(i) < size, op, ": index ", i, " is out of range for ", what,
                " of size ", size);
}

// Whole rows picked from a tensor viewed as (outer, size, inner): index (m) -> (outer, m, inner),
// the gather of index_select and embedding, and its adjoint, the scatter-add of their gradient.
// Positions whose index is `skip` are dropped by the scatter and zero in the gather (embedding's
// padding_idx).
struct Rows {
  std::size_t outer, size, inner;
  std::shared_ptr<const std::vector<std::size_t>> index;
  std::size_t skip = std::numeric_limits<std::size_t>::max();  // none
};

// dst (outer, size, inner), zero-filled by the caller: dst[o, index[j]] += src[o, j]. Split across
// the pool by (o, block of 16 columns of inner), never by j: each destination element adds its
// rows j in order on one thread, so repeated indices add up without a race and in the same order
// at any thread count (serial below 64K elements of src).
template <class T>
void scatter_add_rows(const T* src, const Rows& r, T* dst) {
  const std::vector<std::size_t>& index = *r.index;
  const std::size_t m = index.size();
  constexpr std::size_t kCols = 16;
  const std::size_t col_blocks = (r.inner + kCols - 1) / kCols;
  const std::size_t grain = detail::grain_for_units(m * std::min(r.inner, kCols));
  detail::parallel_for(r.outer * col_blocks, grain, [&](std::size_t u0, std::size_t u1) {
    for (std::size_t u = u0; u < u1;) {  // the column blocks of one o at a time
      const std::size_t o = u / col_blocks, cb = u % col_blocks, cb_end = std::min(col_blocks, cb + (u1 - u));
      const std::size_t c0 = cb * kCols, c1 = std::min(r.inner, cb_end * kCols);
      for (std::size_t j = 0; j < m; ++j) {
        if (index[j] == r.skip) continue;
        T* d = dst + (o * r.size + index[j]) * r.inner;
        const T* s = src + (o * m + j) * r.inner;
        for (std::size_t c = c0; c < c1; ++c) d[c] += s[c];
      }
      u += cb_end - cb;
    }
  });
}

// Calls copy(row) for each row in [0, rows) of `inner` elements each, split across the pool by
// ranges of rows (serial below 64K elements): the gathers, each row a memcpy.
template <class F>
void for_each_row_parallel(std::size_t rows, std::size_t inner, const F& copy) {
  if (inner == 0) return;
  detail::parallel_for(rows, detail::grain_for_units(inner), [&](std::size_t r0, std::size_t r1) {
    for (std::size_t row = r0; row < r1; ++row) copy(row);
  });
}

template <class T>
Tensor<T> scatter_rows(const Tensor<T>& src, const Rows& r, const Shape& out_shape);

// y (outer, m, inner, of shape out_shape) = x[o, index[j]] (0 where index[j] == skip);
// dx = scatter_rows(dy).
template <class T>
Tensor<T> gather_rows(const Tensor<T>& x, const Rows& r, const Shape& out_shape) {
  Array<T> y = empty_array<T>(out_shape, "gather_rows");
  const std::vector<std::size_t>& index = *r.index;
  const std::size_t m = index.size();
  for_each_row_parallel(r.outer * m, r.inner, [&](std::size_t row) {  // row = o * m + j
    const std::size_t o = row / m, j = row % m;
    T* d = y.data() + row * r.inner;
    if (index[j] == r.skip)
      std::fill(d, d + r.inner, T(0));
    else
      std::memcpy(d, x.value().data() + (o * r.size + index[j]) * r.inner, r.inner * sizeof(T));
  });
  GradFormula<T> formula = [r](const BackwardArgs<T>& args) {
    return std::vector<Tensor<T>>{scatter_rows(args.grad(), r, args.input_shape(0))};
  };
  return make_result<T>("gather_rows", std::move(y), {x}, backward_from_formula(formula), formula);
}

// The gradient of a row gather as an op of its own, so that it can be differentiated again:
// y (outer, size, inner, of shape out_shape) = zeros with src[o, j] added at row index[j];
// d/d(src) = gather_rows(dy).
template <class T>
Tensor<T> scatter_rows(const Tensor<T>& src, const Rows& r, const Shape& out_shape) {
  Array<T> y = full_array<T>(out_shape, T(0), "scatter_rows");
  scatter_add_rows(src.value().data(), r, y.data());
  GradFormula<T> formula = [r](const BackwardArgs<T>& args) {
    return std::vector<Tensor<T>>{gather_rows(args.grad(), r, args.input_shape(0))};
  };
  return make_result<T>("scatter_rows", std::move(y), {src}, backward_from_formula(formula), formula);
}

}  // namespace

// ---- index_select -------------------------------------------------------------------------------

// a viewed as (outer, size, inner), index (m) -> y (outer, m, inner): y[o, j] = a[o, index[j]];
// da[o, index[j]] += dy[o, j].
template <class T>
Tensor<T> index_select(const Tensor<T>& a, std::int64_t dim, const IndexArray& index) {
  const OpScope op(OpKind::index_select);
  XGRAD_CHECK(index.dimension() <= 1, "index_select: index must be 1-D (or 0-d), got shape ", index.shape());
  // A 0-d input is treated as shape (1) and gives a 0-d result, as torch.
  const Shape in = a.dim() == 0 ? Shape{1} : a.shape();
  const std::size_t k = normalize_dim(dim, in.size(), op.name());
  const std::size_t outer = detail::numel(in, 0, k), size = in[k];
  const std::size_t inner = detail::numel(in, k + 1, in.size());
  check_indices(index, size, op.name(), detail::concat("dimension ", k).c_str());
  const std::size_t m = index.size();
  Shape out_shape = in;
  out_shape[k] = m;
  if (a.dim() == 0) {
    XGRAD_CHECK(m == 1, "index_select: a 0-d input needs exactly one index, got ", m);
    out_shape = {};
  }
  const Rows r{outer, size, inner, std::make_shared<const std::vector<std::size_t>>(index.begin(), index.end())};
  const std::vector<std::size_t>& rows = *r.index;
  Array<T> y = empty_array<T>(out_shape, op.name());
  const T* src = a.value().data();
  for_each_row_parallel(outer * m, inner, [&](std::size_t row) {  // row = o * m + j
    const std::size_t o = row / m, j = row % m;
    std::memcpy(y.data() + row * inner, src + (o * size + rows[j]) * inner, inner * sizeof(T));
  });
  XGRAD_OP_NOTE(op, {"dim", k}, {"index", index});
  return op.result<T>(
      std::move(y), {a},
      [r](Node<T>& out) {
        Array<T> g = full_array<T>(out.input_shape(0), T(0), "index_select (backward)");
        scatter_add_rows(out.grad.data(), r, g.data());
        out.input(0).accumulate_grad(std::move(g));
      },
      [r](const BackwardArgs<T>& args) {
        return std::vector<Tensor<T>>{scatter_rows(args.grad(), r, args.input_shape(0))};
      });
}

// ---- embedding ----------------------------------------------------------------------------------

// weight (N, D), indices (*) -> y (*, D): y[i] = weight[indices[i]];
// dweight[indices[i]] += dy[i] except for the padding_idx row.
template <class T>
Tensor<T> embedding(const IndexArray& indices, const Tensor<T>& weight, std::optional<std::int64_t> padding_idx) {
  const OpScope op(OpKind::embedding);
  XGRAD_CHECK(weight.dim() == 2, "embedding: weight must be 2-D (num_embeddings, embedding_dim), got shape ",
              weight.shape());
  const std::size_t n = weight.shape()[0], D = weight.shape()[1];
  check_indices(indices, n, op.name(), "num_embeddings");
  std::int64_t pad = -1;  // none
  if (padding_idx) {
    const auto sn = static_cast<std::int64_t>(n);
    XGRAD_CHECK(*padding_idx >= -sn && *padding_idx < sn, "embedding: padding_idx (", *padding_idx,
                ") must be within num_embeddings (", n, ")");
    pad = *padding_idx < 0 ? *padding_idx + sn : *padding_idx;
  }
  Shape out_shape = shape_of(indices);
  out_shape.push_back(D);
  Array<T> y = empty_array<T>(out_shape, op.name());
  const T* w = weight.value().data();
  const std::size_t m = indices.size();
  const std::int64_t* idx = indices.data();
  for_each_row_parallel(m, D, [&](std::size_t j) {
    std::memcpy(y.data() + j * D, w + static_cast<std::size_t>(idx[j]) * D, D * sizeof(T));
  });
  XGRAD_OP_NOTE(op, {"indices", indices});
  // The rows of the (1, n, D) weight; the padding row's positions get no gradient.
  const Rows r{1, n, D, std::make_shared<const std::vector<std::size_t>>(idx, idx + m),
               pad < 0 ? std::numeric_limits<std::size_t>::max() : static_cast<std::size_t>(pad)};
  return op.result<T>(
      std::move(y), {weight},
      [r](Node<T>& out) {
        Array<T> g = full_array<T>(out.input_shape(0), T(0), "embedding (backward)");
        scatter_add_rows(out.grad.data(), r, g.data());
        out.input(0).accumulate_grad(std::move(g));
      },
      [r](const BackwardArgs<T>& args) {
        return std::vector<Tensor<T>>{scatter_rows(args.grad(), r, args.input_shape(0))};
      });
}

// ---- masked_fill, where -------------------------------------------------------------------------

// y = mask ? value : a, with mask broadcast to a's shape (it may not enlarge it);
// da = mask ? 0 : dy.
template <class T>
Tensor<T> masked_fill(const Tensor<T>& a, const BoolArray& mask, Scalar<T> value) {
  const OpScope op(OpKind::masked_fill);
  const Shape as = a.shape(), ms = shape_of(mask);
  const Shape bs = detail::broadcast_shapes(ms, as, op.name());
  XGRAD_CHECK(bs == as, "masked_fill: mask of shape ", ms, " cannot be broadcast to the input's shape ", as);
  const std::vector<std::size_t> strides = detail::broadcast_strides(ms, as);  // mask inside a
  Array<T> y = copy_array(a.value(), op.name());
  T* py = y.data();
  const bool* pm = mask.data();
  detail::parallel_for_each_index(as, strides, [&](std::size_t i, std::size_t m) {
    if (pm[m]) py[i] = value;
  });
  XGRAD_OP_NOTE(op, {"mask", mask}, {"value", static_cast<double>(value)});
  auto kept = std::make_shared<const BoolArray>(mask);  // one copy, for both backwards
  return op.result<T>(
      std::move(y), {a},
      [kept, strides](Node<T>& out) {
        Array<T> g = std::move(out.grad);  // in place: the engine hands the gradient over
        T* pg = g.data();
        const bool* pm = kept->data();
        detail::parallel_for_each_index(shape_of(g), strides, [&](std::size_t i, std::size_t m) {
          if (pm[m]) pg[i] = T(0);
        });
        out.input(0).accumulate_grad(std::move(g));
      },
      [kept](const BackwardArgs<T>& args) {  // da = masked_fill(dy, mask, 0)
        return std::vector<Tensor<T>>{xgrad::masked_fill(args.grad(), *kept, T(0))};
      });
}

namespace {
// da = sum_to(condition ? dy : 0, a.shape), db = sum_to(condition ? 0 : dy, b.shape), with the
// condition's strides sc inside the result's shape; under create_graph the same through where.
template <class T>
std::pair<std::function<void(Node<T>&)>, GradFormula<T>> where_backward(std::shared_ptr<const BoolArray> kept,
                                                                        std::vector<std::size_t> sc) {
  auto backward = [kept, sc = std::move(sc)](Node<T>& out) {
    const Shape out_shape = shape_of(out.grad);
    const T* pg = out.grad.data();
    const bool* pc = kept->data();
    for (std::size_t k = 0; k < 2; ++k) {
      if (!out.input_needs_grad(k)) continue;
      const bool take = k == 0;  // a receives where the condition holds, b where it does not
      Array<T> g = empty_array<T>(out_shape, "where (backward)");
      T* pgk = g.data();
      detail::parallel_for_each_index(out_shape, sc,
                                      [&](std::size_t i, std::size_t ic) { pgk[i] = pc[ic] == take ? pg[i] : T(0); });
      out.input(k).accumulate_grad(sum_to(g, out.input_shape(k)));
    }
  };
  GradFormula<T> formula = [kept](const BackwardArgs<T>& args) {
    const Tensor<T> zero(full_array<T>(Shape{}, T(0), "where (backward)"));
    std::vector<Tensor<T>> g(2);
    if (args.needs(0)) g[0] = sum_to(xgrad::where(*kept, args.grad(), zero), args.input_shape(0));
    if (args.needs(1)) g[1] = sum_to(xgrad::where(*kept, zero, args.grad()), args.input_shape(1));
    return g;
  };
  return {std::move(backward), std::move(formula)};
}
}  // namespace

// y = condition ? a : b, the three broadcast together;
// da = sum_to(condition ? dy : 0, a.shape), db = sum_to(condition ? 0 : dy, b.shape).
template <class T>
Tensor<T> where(const BoolArray& condition, const Tensor<T>& a, const Tensor<T>& b) {
  const OpScope op(OpKind::where);
  const Shape cs = shape_of(condition), as = a.shape(), bs = b.shape();
  const Shape out_shape = detail::broadcast_shapes(detail::broadcast_shapes(cs, as, op.name()), bs, op.name());
  // Strides of condition, a and b inside out_shape.
  std::vector<std::size_t> sc = detail::broadcast_strides(cs, out_shape);
  const std::vector<std::size_t> sa = detail::broadcast_strides(as, out_shape),
                                 sb = detail::broadcast_strides(bs, out_shape);
  Array<T> y = empty_array<T>(out_shape, op.name());
  T* py = y.data();
  const bool* pc = condition.data();
  const T* pa = a.value().data();
  const T* pb = b.value().data();
  detail::parallel_for_each_index(
      out_shape, sc, sa, sb,
      [&](std::size_t i, std::size_t ic, std::size_t ia, std::size_t ib) { py[i] = pc[ic] ? pa[ia] : pb[ib]; });
  XGRAD_OP_NOTE(op, {"condition", condition});
  auto kept = std::make_shared<const BoolArray>(condition);  // one copy, for both backwards
  auto [backward, formula] = where_backward<T>(std::move(kept), std::move(sc));
  return op.result<T>(std::move(y), {a, b}, std::move(backward), std::move(formula));
}

#define XGRAD_INSTANTIATE(T)                                                                         \
  template Tensor<T> index_select<T>(const Tensor<T>&, std::int64_t, const IndexArray&);           \
  template Tensor<T> embedding<T>(const IndexArray&, const Tensor<T>&, std::optional<std::int64_t>); \
  template Tensor<T> masked_fill<T>(const Tensor<T>&, const BoolArray&, Scalar<T>);                  \
  template Tensor<T> where<T>(const BoolArray&, const Tensor<T>&, const Tensor<T>&);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad
