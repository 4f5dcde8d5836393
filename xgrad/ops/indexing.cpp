// Indexing ops: index_select, embedding, masked_fill, where. Gathers scatter-add their gradient
// back (repeated indices add up); masked selections route it to the side that was chosen.
#include <cstring>
#include <utility>

#include <xgrad/ops/broadcast.hpp>
#include <xgrad/ops/ops.hpp>
#include <xgrad/core/profiler.hpp>
#include <xgrad/core/trace.hpp>
#include <xgrad/backend/strided.hpp>

namespace xgrad {

namespace {

// Checks index values against [0, size); names the op, the bad index and the size.
void check_indices(const IndexArray& index, std::size_t size, const char* op, const char* what) {
  for (std::int64_t i : index)
    XGRAD_CHECK(i >= 0 && static_cast<std::size_t>(i) < size, op, ": index ", i, " is out of range for ", what,
                " of size ", size);
}

}  // namespace

// ---- index_select -------------------------------------------------------------------------------

// a viewed as (outer, size, inner), index (m) -> y (outer, m, inner): y[o, j] = a[o, index[j]];
// da[o, index[j]] += dy[o, j].
template <class T>
Tensor<T> index_select(const Tensor<T>& a, std::int64_t dim, const IndexArray& index) {
  XGRAD_PROFILE_OP("index_select");
  XGRAD_CHECK(index.dimension() <= 1, "index_select: index must be 1-D (or 0-d), got shape ", index.shape());
  // A 0-d input is treated as shape (1) and gives a 0-d result, as torch.
  const Shape in = a.dim() == 0 ? Shape{1} : a.shape();
  const std::size_t k = normalize_dim(dim, in.size(), "index_select");
  const std::size_t outer = detail::numel(in, 0, k), size = in[k];
  const std::size_t inner = detail::numel(in, k + 1, in.size());
  check_indices(index, size, "index_select", detail::concat("dimension ", k).c_str());
  const std::size_t m = index.size();
  Shape out_shape = in;
  out_shape[k] = m;
  if (a.dim() == 0) {
    XGRAD_CHECK(m == 1, "index_select: a 0-d input needs exactly one index, got ", m);
    out_shape = {};
  }
  std::vector<std::size_t> rows(index.begin(), index.end());
  Array<T> y = empty_array<T>(out_shape, "index_select");
  const T* src = a.value().data();
  for (std::size_t o = 0; o < outer && inner > 0; ++o)
    for (std::size_t j = 0; j < m; ++j)
      std::memcpy(y.data() + (o * m + j) * inner, src + (o * size + rows[j]) * inner, inner * sizeof(T));
  XGRAD_TRACE_NOTE("index_select", {"dim", k}, {"index", index});
  return make_result<T>("index_select", std::move(y), {a}, [outer, size, inner, rows = std::move(rows)](Node<T>& out) {
    Array<T> g = full_array<T>(out.input_shape(0), T(0), "index_select (backward)");
    const std::size_t m = rows.size();
    const T* pg = out.grad.data();
    for (std::size_t o = 0; o < outer; ++o)
      for (std::size_t j = 0; j < m; ++j) {
        T* dst = g.data() + (o * size + rows[j]) * inner;
        const T* s = pg + (o * m + j) * inner;
        for (std::size_t c = 0; c < inner; ++c) dst[c] += s[c];
      }
    out.input(0).accumulate_grad(std::move(g));
  });
}

// ---- embedding ----------------------------------------------------------------------------------

// weight (N, D), indices (*) -> y (*, D): y[i] = weight[indices[i]];
// dweight[indices[i]] += dy[i] except for the padding_idx row.
template <class T>
Tensor<T> embedding(const IndexArray& indices, const Tensor<T>& weight, std::optional<std::int64_t> padding_idx) {
  XGRAD_PROFILE_OP("embedding");
  XGRAD_CHECK(weight.dim() == 2, "embedding: weight must be 2-D (num_embeddings, embedding_dim), got shape ",
              weight.shape());
  const std::size_t n = weight.shape()[0], D = weight.shape()[1];
  check_indices(indices, n, "embedding", "num_embeddings");
  std::int64_t pad = -1;  // none
  if (padding_idx) {
    const auto sn = static_cast<std::int64_t>(n);
    XGRAD_CHECK(*padding_idx >= -sn && *padding_idx < sn, "embedding: padding_idx (", *padding_idx,
                ") must be within num_embeddings (", n, ")");
    pad = *padding_idx < 0 ? *padding_idx + sn : *padding_idx;
  }
  Shape out_shape = shape_of(indices);
  out_shape.push_back(D);
  Array<T> y = empty_array<T>(out_shape, "embedding");
  const T* w = weight.value().data();
  const std::size_t m = indices.size();
  const std::int64_t* idx = indices.data();
  for (std::size_t j = 0; j < m && D > 0; ++j)
    std::memcpy(y.data() + j * D, w + static_cast<std::size_t>(idx[j]) * D, D * sizeof(T));
  XGRAD_TRACE_NOTE("embedding", {"indices", indices});
  return make_result<T>("embedding", std::move(y), {weight}, [indices, pad, D](Node<T>& out) {
    Array<T> g = full_array<T>(out.input_shape(0), T(0), "embedding (backward)");
    const T* pg = out.grad.data();
    const std::int64_t* idx = indices.data();
    for (std::size_t j = 0, m = indices.size(); j < m; ++j) {
      if (idx[j] == pad) continue;
      T* dst = g.data() + static_cast<std::size_t>(idx[j]) * D;
      const T* s = pg + j * D;
      for (std::size_t c = 0; c < D; ++c) dst[c] += s[c];
    }
    out.input(0).accumulate_grad(std::move(g));
  });
}

// ---- masked_fill, where -------------------------------------------------------------------------

// y = mask ? value : a, with mask broadcast to a's shape (it may not enlarge it);
// da = mask ? 0 : dy.
template <class T>
Tensor<T> masked_fill(const Tensor<T>& a, const BoolArray& mask, Scalar<T> value) {
  XGRAD_PROFILE_OP("masked_fill");
  const Shape as = a.shape(), ms = shape_of(mask);
  const Shape bs = detail::broadcast_shapes(ms, as, "masked_fill");
  XGRAD_CHECK(bs == as, "masked_fill: mask of shape ", ms, " cannot be broadcast to the input's shape ", as);
  const std::vector<std::size_t> strides = detail::broadcast_strides(ms, as);  // mask inside a
  Array<T> y = copy_array(a.value(), "masked_fill");
  T* py = y.data();
  const bool* pm = mask.data();
  detail::for_each_index(as, strides, [&](std::size_t i, std::size_t m) {
    if (pm[m]) py[i] = value;
  });
  XGRAD_TRACE_NOTE("masked_fill", {"mask", mask}, {"value", static_cast<double>(value)});
  return make_result<T>("masked_fill", std::move(y), {a}, [mask, strides](Node<T>& out) {
    Array<T> g = std::move(out.grad);  // in place: the engine hands the gradient over
    T* pg = g.data();
    const bool* pm = mask.data();
    detail::for_each_index(shape_of(g), strides, [&](std::size_t i, std::size_t m) {
      if (pm[m]) pg[i] = T(0);
    });
    out.input(0).accumulate_grad(std::move(g));
  });
}

// y = condition ? a : b, the three broadcast together;
// da = sum_to(condition ? dy : 0, a.shape), db = sum_to(condition ? 0 : dy, b.shape).
template <class T>
Tensor<T> where(const BoolArray& condition, const Tensor<T>& a, const Tensor<T>& b) {
  XGRAD_PROFILE_OP("where");
  const Shape cs = shape_of(condition), as = a.shape(), bs = b.shape();
  const Shape out_shape = detail::broadcast_shapes(detail::broadcast_shapes(cs, as, "where"), bs, "where");
  // Strides of condition, a and b inside out_shape.
  const std::vector<std::size_t> sc = detail::broadcast_strides(cs, out_shape),
                                 sa = detail::broadcast_strides(as, out_shape),
                                 sb = detail::broadcast_strides(bs, out_shape);
  Array<T> y = empty_array<T>(out_shape, "where");
  T* py = y.data();
  const bool* pc = condition.data();
  const T* pa = a.value().data();
  const T* pb = b.value().data();
  detail::for_each_index(out_shape, sc, sa, sb, [&](std::size_t i, std::size_t ic, std::size_t ia, std::size_t ib) {
    py[i] = pc[ic] ? pa[ia] : pb[ib];
  });
  XGRAD_TRACE_NOTE("where", {"condition", condition});
  return make_result<T>("where", std::move(y), {a, b}, [condition, sc](Node<T>& out) {
    const Shape out_shape = shape_of(out.grad);
    const T* pg = out.grad.data();
    const bool* pc = condition.data();
    for (std::size_t k = 0; k < 2; ++k) {
      if (!out.input_needs_grad(k)) continue;
      const bool take = k == 0;  // a receives where the condition holds, b where it does not
      Array<T> g = empty_array<T>(out_shape, "where (backward)");
      T* pgk = g.data();
      detail::for_each_index(out_shape, sc, [&](std::size_t i, std::size_t ic) {
        pgk[i] = pc[ic] == take ? pg[i] : T(0);
      });
      out.input(k).accumulate_grad(sum_to(g, out.input_shape(k)));
    }
  });
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
