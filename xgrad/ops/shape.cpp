// Shape ops. Every result is a fresh contiguous row-major array (ops that are views in PyTorch
// copy here); each backward, right below its forward, moves the gradient back to the input's
// layout: the inverse permutation, a reshape, a sum over expanded dims, or a scatter into zeros.
#include <algorithm>
#include <cstring>
#include <utility>

#include <xgrad/ops/broadcast.hpp>
#include <xgrad/ops/op_scope.hpp>
#include <xgrad/ops/ops.hpp>
#include <xgrad/ops/sum_to.hpp>
#include <xgrad/backend/parallel.hpp>
#include <xgrad/backend/strided.hpp>

namespace xgrad {

namespace {

using detail::numel;

// dst (row-major, shape `shape`)[idx] = src[sum_d idx[d] * src_stride[d]]
template <class T>
void gather_strided(const T* src, const Shape& shape, const std::vector<std::size_t>& src_stride, T* dst) {
  if (numel(shape) == 0) return;
  // Rows along the last dim, split across threads; each chunk starts the walker at its first row.
  const std::size_t nd = shape.size(), inner = nd == 0 ? 1 : shape[nd - 1];
  const std::size_t inner_stride = nd == 0 ? 0 : src_stride[nd - 1], rows = detail::row_count(shape);
  detail::parallel_for(rows, std::max<std::size_t>(1, 16384 / inner), [&](std::size_t r0, std::size_t r1) {
    detail::for_each_row(shape, r0, r1, src_stride, [&](std::size_t r, std::size_t off) {
      T* out = dst + r * inner;
      if (inner_stride == 1) {  // a contiguous run (e.g. one head's d values): a plain copy
        std::memcpy(out, src + off, inner * sizeof(T));
        return;
      }
      for (std::size_t j = 0, s = off; j < inner; ++j, s += inner_stride) out[j] = src[s];
    });
  });
}

// y = x.permute(perm): y.shape[d] = x.shape[perm[d]]
template <class T>
Array<T> permute_array(const char* op, const Array<T>& x, const std::vector<std::size_t>& perm) {
  const std::size_t nd = perm.size();
  const Shape in = shape_of(x);
  std::vector<std::size_t> in_stride(nd, 1);
  for (std::size_t d = nd; d-- > 1;) in_stride[d - 1] = in_stride[d] * in[d];
  Shape out(nd);
  std::vector<std::size_t> stride(nd);
  for (std::size_t d = 0; d < nd; ++d) {
    out[d] = in[perm[d]];
    stride[d] = in_stride[perm[d]];
  }
  Array<T> y = empty_array<T>(out, op);
  gather_strided(x.data(), out, stride, y.data());
  return y;
}

// y = x.permute(perm);  dx = dy.permute(perm^-1)
template <class T>
Tensor<T> permuted(const OpScope& scope, const Tensor<T>& a, std::vector<std::size_t> perm) {
  const char* op = scope.name();
  XGRAD_OP_NOTE(scope, {"perm", perm});
  return scope.result<T>(
      permute_array(op, a.value(), perm), {a},
      [op, perm](Node<T>& out) {
        std::vector<std::size_t> inverse(perm.size());
        for (std::size_t d = 0; d < perm.size(); ++d) inverse[perm[d]] = d;
        out.input(0).accumulate_grad(permute_array(op, out.grad, inverse));
      },
      [perm](const BackwardArgs<T>& args) {
        std::vector<std::int64_t> inverse(perm.size());
        for (std::size_t d = 0; d < perm.size(); ++d) inverse[perm[d]] = static_cast<std::int64_t>(d);
        return std::vector<Tensor<T>>{permute(args.grad(), inverse)};
      });
}

// The same elements in the same order under a new shape;  dx = dy reshaped to x's shape.
template <class T>
Tensor<T> reshaped(const OpScope& scope, const Tensor<T>& a, const Shape& shape) {
  const char* op = scope.name();
  Array<T> y = empty_array<T>(shape, op);
  std::copy(a.value().data(), a.value().data() + a.value().size(), y.data());
  return scope.result<T>(
      std::move(y), {a},
      [](Node<T>& out) {
        Array<T> g = std::move(out.grad);
        g.reshape(out.input_shape(0));
        out.input(0).accumulate_grad(std::move(g));
      },
      [](const BackwardArgs<T>& args) {
        const Shape in = args.input_shape(0);
        return std::vector<Tensor<T>>{reshape(args.grad(), std::vector<std::int64_t>(in.begin(), in.end()))};
      });
}

// Under create_graph: dx_k = dy viewed as (outer, sum_k chunk[k]), narrowed to block k, viewed
// as x_k (reshape and narrow, both differentiable).
template <class T>
GradFormula<T> join_formula(std::size_t outer, std::vector<std::size_t> chunk) {
  return [outer, chunk = std::move(chunk)](const BackwardArgs<T>& args) {
    std::int64_t width = 0;
    for (std::size_t c : chunk) width += static_cast<std::int64_t>(c);
    const Tensor<T> rows = reshape(args.grad(), {static_cast<std::int64_t>(outer), width});
    std::vector<Tensor<T>> g(chunk.size());
    std::int64_t col = 0;
    for (std::size_t k = 0; k < chunk.size(); ++k) {
      const auto n = static_cast<std::int64_t>(chunk[k]);
      if (args.needs(k)) {
        const Shape in = args.input_shape(k);
        g[k] = reshape(narrow(rows, 1, col, n), std::vector<std::int64_t>(in.begin(), in.end()));
      }
      col += n;
    }
    return g;
  };
}

// Joins tensors along one axis: tensor k is viewed as (outer, chunk[k]) and the result as
// (outer, sum_k chunk[k]), tensor k filling its own column block.  dx_k = that block of dy.
template <class T>
Tensor<T> join(const OpScope& scope, const std::vector<Tensor<T>>& tensors, std::size_t outer,
               std::vector<std::size_t> chunk, const Shape& out_shape) {
  const char* op = scope.name();
  const std::size_t row = numel(out_shape) / std::max<std::size_t>(outer, 1);
  Array<T> y = empty_array<T>(out_shape, op);
  std::size_t col = 0;
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    const T* src = tensors[k].value().data();
    for (std::size_t o = 0; o < outer && chunk[k] > 0; ++o)
      std::memcpy(y.data() + o * row + col, src + o * chunk[k], chunk[k] * sizeof(T));
    col += chunk[k];
  }
  GradFormula<T> formula = join_formula<T>(outer, chunk);
  return scope.result<T>(
      std::move(y), tensors,
      [op, outer, row, chunk = std::move(chunk)](Node<T>& out) {
        std::size_t col = 0;
        for (std::size_t k = 0; k < chunk.size(); ++k) {
          if (out.input_needs_grad(k)) {
            Array<T> g = empty_array<T>(out.input_shape(k), op);
            for (std::size_t o = 0; o < outer && chunk[k] > 0; ++o)
              std::memcpy(g.data() + o * chunk[k], out.grad.data() + o * row + col, chunk[k] * sizeof(T));
            out.input(k).accumulate_grad(std::move(g));
          }
          col += chunk[k];
        }
      },
      std::move(formula));
}

// Python's slice clamping of one bound against a dim of the given size.
std::int64_t clamp_bound(std::int64_t b, std::int64_t size) {
  if (b < 0) b += size;
  return std::min(std::max<std::int64_t>(b, 0), size);
}

// A strided slice along dim k of a tensor viewed as (outer, size, inner): length positions
// start, start + step, ... along k.
struct SliceSpec {
  std::size_t dim, outer, size, inner, start, length, step;
  SliceSpec(const Shape& in, std::size_t k, std::size_t start_, std::size_t length_, std::size_t step_)
      : dim(k),
        outer(numel(in, 0, k)),
        size(in[k]),
        inner(numel(in, k + 1, in.size())),
        start(start_),
        length(length_),
        step(step_) {}
  // Flat offset of slice row j of block o in the full tensor, and in the slice.
  std::size_t full(std::size_t o, std::size_t j) const { return (o * size + start + j * step) * inner; }
  std::size_t part(std::size_t o, std::size_t j) const { return (o * length + j) * inner; }
};

// dst (the slice) = src (the full tensor) at the slice's positions.
template <class T>
void slice_copy(const T* src, const SliceSpec& s, T* dst) {
  for (std::size_t o = 0; o < s.outer && s.inner > 0; ++o)
    for (std::size_t j = 0; j < s.length; ++j) std::memcpy(dst + s.part(o, j), src + s.full(o, j), s.inner * sizeof(T));
}

// The full tensor of shape `in`: zeros, and src (the slice) at the slice's positions.
template <class T>
Array<T> pad_array(const char* op, const T* src, const Shape& in, const SliceSpec& s) {
  Array<T> g = full_array<T>(in, T(0), op);
  for (std::size_t o = 0; o < s.outer && s.inner > 0; ++o)
    for (std::size_t j = 0; j < s.length; ++j)
      std::memcpy(g.data() + s.full(o, j), src + s.part(o, j), s.inner * sizeof(T));
  return g;
}

template <class T>
Tensor<T> slice_backward(const Tensor<T>& dy, const Shape& in, const SliceSpec& s);

// y = x[..., start : start + length*step : step, ...] along dim k; dx scatters dy into zeros
// (slice_backward, whose own derivative is this slice again).
template <class T>
Tensor<T> strided_slice(const OpScope& scope, const Tensor<T>& a, std::size_t k, std::size_t start, std::size_t length,
                        std::size_t step) {
  const char* op = scope.name();
  const Shape in = a.shape();
  const SliceSpec spec(in, k, start, length, step);
  Shape out_shape = in;
  out_shape[k] = length;
  XGRAD_OP_NOTE(scope, {"dim", k}, {"start", start}, {"length", length}, {"step", step});
  Array<T> y = empty_array<T>(out_shape, op);
  slice_copy(a.value().data(), spec, y.data());
  return scope.result<T>(
      std::move(y), {a},
      [op, spec](Node<T>& out) {
        out.input(0).accumulate_grad(pad_array<T>(op, out.grad.data(), out.input_shape(0), spec));
      },
      [spec](const BackwardArgs<T>& args) {
        return std::vector<Tensor<T>>{slice_backward(args.grad(), args.input_shape(0), spec)};
      });
}

// A slice's gradient as an op of its own, so that it can be differentiated again:
// dx = dy padded with zeros to the input's shape `in`; d/d(dy) = that slice of the gradient.
template <class T>
Tensor<T> slice_backward(const Tensor<T>& dy, const Shape& in, const SliceSpec& s) {
  GradFormula<T> formula = [s](const BackwardArgs<T>& args) {
    const OpScope op(OpKind::slice);
    return std::vector<Tensor<T>>{strided_slice(op, args.grad(), s.dim, s.start, s.length, s.step)};
  };
  return make_result<T>("slice_backward", pad_array<T>("slice_backward", dy.value().data(), in, s), {dy},
                        backward_from_formula(formula), formula);
}

}  // namespace

// ---- permutations -----------------------------------------------------------------------------

template <class T>
Tensor<T> transpose(const Tensor<T>& a, std::int64_t dim0, std::int64_t dim1) {
  const OpScope op(OpKind::transpose);
  const std::size_t nd = a.dim();
  // A 0-d tensor accepts dims 0 and -1, as torch.
  const std::size_t d0 = normalize_dim(dim0, std::max<std::size_t>(nd, 1), op.name());
  const std::size_t d1 = normalize_dim(dim1, std::max<std::size_t>(nd, 1), op.name());
  std::vector<std::size_t> perm(nd);
  for (std::size_t d = 0; d < nd; ++d) perm[d] = d;
  if (nd > 0) std::swap(perm[d0], perm[d1]);
  return permuted<T>(op, a, std::move(perm));
}

template <class T>
Tensor<T> permute(const Tensor<T>& a, const std::vector<std::int64_t>& dims) {
  const OpScope op(OpKind::permute);
  const std::size_t nd = a.dim();
  XGRAD_CHECK(dims.size() == nd, "permute: expected ", nd, " dims for an input of shape ", a.shape(), ", got ",
              dims);
  std::vector<std::size_t> perm(nd);
  std::vector<bool> seen(nd, false);
  for (std::size_t d = 0; d < nd; ++d) {
    perm[d] = normalize_dim(dims[d], nd, op.name());
    XGRAD_CHECK(!seen[perm[d]], "permute: dim ", perm[d], " appears more than once in ", dims);
    seen[perm[d]] = true;
  }
  return permuted<T>(op, a, std::move(perm));
}

// ---- reshapes -----------------------------------------------------------------------------------

template <class T>
Tensor<T> reshape(const Tensor<T>& a, const std::vector<std::int64_t>& shape) {
  const OpScope op(OpKind::reshape);
  const std::size_t n = a.numel();
  Shape out(shape.size());
  std::size_t known = 1;
  std::size_t infer = shape.size();  // the position of -1, if any
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == -1) {
      XGRAD_CHECK(infer == shape.size(), "reshape: only one dimension can be inferred (-1), got shape ", shape);
      infer = d;
      continue;
    }
    XGRAD_CHECK(shape[d] >= 0, "reshape: invalid size ", shape[d], " at dimension ", d, " in shape ", shape);
    out[d] = static_cast<std::size_t>(shape[d]);
    known *= out[d];
  }
  Shape known_sizes = out;  // their product must not overflow: it is compared with numel below
  if (infer < shape.size()) known_sizes[infer] = 1;
  try {
    checked_numel(known_sizes, 1, op.name());
  } catch (const std::invalid_argument&) {
    XGRAD_CHECK(false, "reshape: the shape ", shape, " has too many elements (the product of its sizes overflows)");
  }
  if (infer < shape.size()) {
    XGRAD_CHECK(known != 0, "reshape: cannot reshape a tensor of shape ", a.shape(), " into shape ", shape,
                " because the size of the -1 dimension can be any value");
    XGRAD_CHECK(n % known == 0, "reshape: cannot reshape a tensor of shape ", a.shape(), " (", n,
                " elements) into shape ", shape);
    out[infer] = n / known;
    known *= out[infer];
  }
  XGRAD_CHECK(known == n, "reshape: cannot reshape a tensor of shape ", a.shape(), " (", n,
              " elements) into shape ", shape, " (", known, " elements)");
  return reshaped<T>(op, a, out);
}

template <class T>
Tensor<T> flatten(const Tensor<T>& a, std::int64_t start_dim, std::int64_t end_dim) {
  const OpScope op(OpKind::flatten);
  const Shape in = a.shape();
  // A 0-d tensor flattens to shape (1), as torch.
  const std::size_t nd = std::max<std::size_t>(in.size(), 1);
  const std::size_t s = normalize_dim(start_dim, nd, op.name());
  const std::size_t e = normalize_dim(end_dim, nd, op.name());
  XGRAD_CHECK(s <= e, "flatten: start_dim (", start_dim, ") cannot come after end_dim (", end_dim,
              ") for an input of shape ", in);
  if (in.empty()) return reshaped<T>(op, a, Shape{1});
  Shape out(in.begin(), in.begin() + s);
  out.push_back(numel(in, s, e + 1));
  out.insert(out.end(), in.begin() + e + 1, in.end());
  return reshaped<T>(op, a, out);
}

template <class T>
Tensor<T> unsqueeze(const Tensor<T>& a, std::int64_t dim) {
  const OpScope op(OpKind::unsqueeze);
  Shape out = a.shape();
  const std::size_t k = normalize_dim(dim, out.size() + 1, op.name());
  out.insert(out.begin() + k, 1);
  return reshaped<T>(op, a, out);
}

template <class T>
Tensor<T> squeeze(const Tensor<T>& a) {
  const OpScope op(OpKind::squeeze);
  Shape out;
  for (std::size_t d : a.shape())
    if (d != 1) out.push_back(d);
  return reshaped<T>(op, a, out);
}

template <class T>
Tensor<T> squeeze(const Tensor<T>& a, std::int64_t dim) {
  const OpScope op(OpKind::squeeze);
  Shape out = a.shape();
  const std::size_t k = normalize_dim(dim, std::max<std::size_t>(out.size(), 1), op.name());
  if (!out.empty() && out[k] == 1) out.erase(out.begin() + k);
  return reshaped<T>(op, a, out);
}

// ---- expand -------------------------------------------------------------------------------------

// y = x broadcast to sizes;  dx = sum_to(dy, x.shape)
template <class T>
Tensor<T> expand(const Tensor<T>& a, const std::vector<std::int64_t>& sizes) {
  const OpScope op(OpKind::expand);
  const Shape in = a.shape();
  XGRAD_CHECK(sizes.size() >= in.size(), "expand: the number of sizes provided (", sizes.size(),
              ") must be at least the number of dimensions of the tensor (", in.size(), "); sizes ", sizes,
              ", tensor shape ", in);
  const std::size_t lead = sizes.size() - in.size();
  Shape out(sizes.size());
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    if (d < lead) {
      XGRAD_CHECK(sizes[d] >= 0, "expand: size ", sizes[d], " is not allowed in a new leading dimension (",
                  d, "); sizes ", sizes, ", tensor shape ", in);
      out[d] = static_cast<std::size_t>(sizes[d]);
      continue;
    }
    const std::size_t have = in[d - lead];
    if (sizes[d] == -1) {
      out[d] = have;
      continue;
    }
    XGRAD_CHECK(sizes[d] >= 0 && (have == 1 || static_cast<std::size_t>(sizes[d]) == have),
                "expand: the expanded size (", sizes[d], ") must match the existing size (", have,
                ") at non-singleton dimension ", d, "; target sizes ", sizes, ", tensor shape ", in);
    out[d] = static_cast<std::size_t>(sizes[d]);
  }
  Array<T> y = empty_array<T>(out, op.name());
  gather_strided(a.value().data(), out, detail::broadcast_strides(in, out), y.data());
  return op.result<T>(
      std::move(y), {a},
      [](Node<T>& node) { node.input(0).accumulate_grad(sum_to(std::move(node.grad), node.input_shape(0))); },
      [](const BackwardArgs<T>& args) { return std::vector<Tensor<T>>{sum_to(args.grad(), args.input_shape(0))}; });
}

// ---- cat, stack ---------------------------------------------------------------------------------

template <class T>
Tensor<T> cat(const std::vector<Tensor<T>>& tensors, std::int64_t dim) {
  const OpScope op(OpKind::cat);
  XGRAD_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  const Shape first = tensors[0].shape();
  XGRAD_CHECK(!first.empty(), "cat: zero-dimensional tensor (at position 0) cannot be concatenated");
  const std::size_t k = normalize_dim(dim, first.size(), op.name());
  const std::size_t outer = numel(first, 0, k), inner = numel(first, k + 1, first.size());
  Shape out = first;
  out[k] = 0;
  std::vector<std::size_t> chunk;
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    const Shape s = tensors[t].shape();
    bool same = s.size() == first.size();
    for (std::size_t d = 0; same && d < s.size(); ++d) same = d == k || s[d] == first[d];
    XGRAD_CHECK(same, "cat: tensors must have the same shape except in dimension ", k, "; tensor 0 has shape ",
                first, " but tensor ", t, " has shape ", s);
    out[k] += s[k];
    chunk.push_back(s[k] * inner);
  }
  XGRAD_OP_NOTE(op, {"dim", k});
  return join<T>(op, tensors, outer, std::move(chunk), out);
}

template <class T>
Tensor<T> stack(const std::vector<Tensor<T>>& tensors, std::int64_t dim) {
  const OpScope op(OpKind::stack);
  XGRAD_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  const Shape first = tensors[0].shape();
  const std::size_t k = normalize_dim(dim, first.size() + 1, op.name());
  for (std::size_t t = 1; t < tensors.size(); ++t)
    XGRAD_CHECK(tensors[t].shape() == first, "stack: expects each tensor to be equal size; tensor 0 has shape ",
                first, " but tensor ", t, " has shape ", tensors[t].shape());
  Shape out = first;
  out.insert(out.begin() + k, tensors.size());
  const std::size_t inner = numel(first, k, first.size());
  XGRAD_OP_NOTE(op, {"dim", k});
  return join<T>(op, tensors, numel(first, 0, k), std::vector<std::size_t>(tensors.size(), inner), out);
}

// ---- narrow, slice ------------------------------------------------------------------------------

template <class T>
Tensor<T> narrow(const Tensor<T>& a, std::int64_t dim, std::int64_t start, std::int64_t length) {
  const OpScope op(OpKind::narrow);
  XGRAD_CHECK(a.dim() > 0, "narrow: cannot be applied to a 0-dim tensor");
  const std::size_t k = normalize_dim(dim, a.dim(), op.name());
  const auto size = static_cast<std::int64_t>(a.shape()[k]);
  XGRAD_CHECK(start >= -size && start <= size, "narrow: start (", start, ") out of range for dimension ", k,
              " of size ", size, " (expected in [", -size, ", ", size, "])");
  if (start < 0) start += size;
  XGRAD_CHECK(length >= 0, "narrow: length must be non-negative, got ", length, " (dimension ", k, " of size ",
              size, ")");
  XGRAD_CHECK(length <= size - start, "narrow: start (", start, ") + length (", length, ") exceeds dimension ", k,
              " of size ", size);  // length <= size - start: start + length could overflow
  return strided_slice<T>(op, a, k, static_cast<std::size_t>(start), static_cast<std::size_t>(length), 1);
}

template <class T>
Tensor<T> slice(const Tensor<T>& a, std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step) {
  const OpScope op(OpKind::slice);
  XGRAD_CHECK(a.dim() > 0, "slice: cannot be applied to a 0-dim tensor");
  XGRAD_CHECK(step >= 1, "slice: step must be positive, got ", step);
  const std::size_t k = normalize_dim(dim, a.dim(), op.name());
  const auto size = static_cast<std::int64_t>(a.shape()[k]);
  const std::int64_t b = clamp_bound(start, size), e = clamp_bound(end, size);
  const std::int64_t length = e > b ? (e - b - 1) / step + 1 : 0;  // ceil((e - b) / step); e - b + step overflows
  return strided_slice<T>(op, a, k, static_cast<std::size_t>(b), static_cast<std::size_t>(length),
                          static_cast<std::size_t>(step));
}

#define XGRAD_INSTANTIATE(T)                                                                     \
  template Tensor<T> transpose<T>(const Tensor<T>&, std::int64_t, std::int64_t);                   \
  template Tensor<T> permute<T>(const Tensor<T>&, const std::vector<std::int64_t>&);                      \
  template Tensor<T> reshape<T>(const Tensor<T>&, const std::vector<std::int64_t>&);             \
  template Tensor<T> flatten<T>(const Tensor<T>&, std::int64_t, std::int64_t);                     \
  template Tensor<T> unsqueeze<T>(const Tensor<T>&, std::int64_t);                                 \
  template Tensor<T> squeeze<T>(const Tensor<T>&);                                               \
  template Tensor<T> squeeze<T>(const Tensor<T>&, std::int64_t);                                   \
  template Tensor<T> expand<T>(const Tensor<T>&, const std::vector<std::int64_t>&);              \
  template Tensor<T> cat<T>(const std::vector<Tensor<T>>&, std::int64_t);                          \
  template Tensor<T> stack<T>(const std::vector<Tensor<T>>&, std::int64_t);                        \
  template Tensor<T> narrow<T>(const Tensor<T>&, std::int64_t, std::int64_t, std::int64_t);        \
  template Tensor<T> slice<T>(const Tensor<T>&, std::int64_t, std::int64_t, std::int64_t, std::int64_t);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad
