// Reductions: sum, mean, var, amax, max. Each one maps every input element i to the output
// element o(i) it contributes to (a ReducePlan); the forward folds x_i into y_o(i) and the
// backward, right below, spreads dy_o(i) back onto i times the local derivative.
// Sums accumulate in double, also for float inputs.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include <xgrad/ops/op_scope.hpp>
#include <xgrad/ops/ops.hpp>
#include <xgrad/backend/parallel_loops.hpp>
#include <xgrad/backend/strided.hpp>

namespace xgrad {

namespace {

using Acc = double;

// How an input of some shape reduces over a set of dims. The input's dims are merged where
// possible (size-1 dims dropped, neighbours that are both reduced or both kept and contiguous
// joined), so that reducing (B, T, C) over C is a loop over (B*T, C).
struct ReducePlan {
  Shape out_shape;                      // the result's shape (keepdim applied)
  Shape kept_shape;                     // the result's shape with keepdim (for broadcasting back)
  Shape shape;                          // the input's merged dims
  std::vector<std::size_t> out_stride;  // per merged dim: its stride in the flat output, 0 if reduced
  std::size_t out_size = 1;
  std::size_t count = 1;                // input elements per output element
};

// dims -> one flag per dim of an ndim-D input. Non-empty, each dim once, negative from the end.
// A 0-d input accepts dim 0 or -1 (as torch) and has nothing to reduce.
std::vector<bool> reduced_dims(const char* op, std::size_t ndim, const std::vector<std::int64_t>& dims) {
  XGRAD_CHECK(!dims.empty(), op, ": expected a non-empty list of dims (use ", op,
              "(a) to reduce over all elements)");
  std::vector<bool> reduced(ndim, false);
  std::vector<bool> seen(std::max<std::size_t>(ndim, 1), false);
  for (std::int64_t d : dims) {
    const std::size_t k = normalize_dim(d, std::max<std::size_t>(ndim, 1), op);
    XGRAD_CHECK(!seen[k], op, ": dim ", k, " appears more than once in the list of dims ", dims);
    seen[k] = true;
    if (ndim > 0) reduced[k] = true;
  }
  return reduced;
}

ReducePlan plan_reduction(const char* op, const Shape& in, const std::vector<bool>& reduced, bool keepdim) {
  ReducePlan p;
  const std::size_t nd = in.size();
  std::vector<std::size_t> stride(nd, 0);
  for (std::size_t d = nd; d-- > 0;) {
    if (reduced[d]) {
      p.count *= in[d];
    } else {
      stride[d] = p.out_size;
      p.out_size *= in[d];
    }
  }
  for (std::size_t d = 0; d < nd; ++d) {
    p.kept_shape.push_back(reduced[d] ? 1 : in[d]);
    if (!reduced[d]) p.out_shape.push_back(in[d]);
    else if (keepdim) p.out_shape.push_back(1);
    if (in[d] == 1) continue;
    if (!p.shape.empty()) {
      const std::size_t prev = p.out_stride.back();
      if ((prev == 0 && stride[d] == 0) || (stride[d] != 0 && prev == stride[d] * in[d])) {
        p.shape.back() *= in[d];
        p.out_stride.back() = stride[d];
        continue;
      }
    }
    p.shape.push_back(in[d]);
    p.out_stride.push_back(stride[d]);
  }
  // The output (and its accumulators) are allocated from this shape: a (2^62, 0) input reduced
  // over its empty dim asks for 2^62 of them.
  checked_numel(p.out_shape, sizeof(Acc), op);
  return p;
}

ReducePlan plan_all(const Shape& in) {
  return plan_reduction("a full reduction", in, std::vector<bool>(in.size(), true), /*keepdim=*/false);
}

// An op's working storage sized like its output (n values, each `value`), its failure reported as
// empty_array's: OutOfMemoryError naming `who`, (n) and the bytes.
template <class V>
std::vector<V> scratch_vector(std::size_t n, V value, const char* who) {
  checked_numel(Shape{n}, sizeof(V), who);
  try {
    return std::vector<V>(n, value);
  } catch (const std::bad_alloc&) {
    throw OutOfMemoryError(who, Shape{n}, n * sizeof(V));
  }
}

// Calls f(i, o) for every input element: i its flat index, o = o(i). Split across the pool by
// output (rows x column blocks of the kept dims, backend/parallel_loops.hpp), each output seeing
// its elements in row-major order as a serial walk, so f may fold into o (a sum, a max, the
// first argmax) and the result does not depend on the thread count. A full reduction (one
// output) runs serially here; scaled_sum splits it in fixed chunks.
template <class F>
void visit(const ReducePlan& p, F f) {
  detail::parallel_reduce_visit(p.shape, p.out_stride, f);
}

// Calls f(i, o) for every input element, for an f that writes element i only (a backward that
// spreads dy_o(i) back): split by element blocks or whole rows, any output count.
template <class F>
void visit_elements(const ReducePlan& p, F f) {
  detail::parallel_for_each_index(p.shape, p.out_stride, f);
}

// acc_o += sum_{i: o(i) = o} x_i. A full reduction of 64K elements or more is summed in fixed
// chunks of detail::kChunk elements, each in order on one thread, and the chunks' partial sums
// added in chunk order: the same result at any thread count.
template <class T>
void sum_into(const char* op, const ReducePlan& p, const T* px, std::vector<Acc>& acc) {
  const std::size_t n = detail::numel(p.shape);
  if (p.out_size != 1 || n < detail::kSerialBelow) {
    visit(p, [&](std::size_t i, std::size_t o) { acc[o] += px[i]; });
    return;
  }
  const std::size_t chunks = (n + detail::kChunk - 1) / detail::kChunk;
  std::vector<Acc> partial = scratch_vector<Acc>(chunks, Acc(0), op);
  detail::parallel_for(chunks, 1, [&](std::size_t c0, std::size_t c1) {
    for (std::size_t c = c0; c < c1; ++c) {
      Acc s = 0;
      for (std::size_t i = c * detail::kChunk, e = std::min(n, i + detail::kChunk); i < e; ++i) s += px[i];
      partial[c] = s;
    }
  });
  for (const Acc s : partial) acc[0] += s;
}

// Under create_graph: dx = scale * expand(dy viewed with the reduced dims kept). The reduced
// dims travel as a bit mask, so that the formula fits std::function's own storage (no
// allocation per reduction on the first-order path); past 64 dims, as a vector.
template <class T>
GradFormula<T> scaled_sum_formula(const Shape& kept_shape, Acc scale) {
  const auto differentiable = [scale](const BackwardArgs<T>& args, const std::vector<std::int64_t>& kept) {
    const Shape in = args.input_shape(0);
    Tensor<T> g = expand(reshape(args.grad(), kept), std::vector<std::int64_t>(in.begin(), in.end()));
    return std::vector<Tensor<T>>{scale == Acc(1) ? g : mul(g, static_cast<T>(scale))};
  };
  if (kept_shape.size() > 64) {
    std::vector<std::int64_t> kept(kept_shape.begin(), kept_shape.end());
    return [kept = std::move(kept), differentiable](const BackwardArgs<T>& args) { return differentiable(args, kept); };
  }
  std::uint64_t reduced = 0;
  for (std::size_t d = 0; d < kept_shape.size(); ++d)
    if (kept_shape[d] == 1) reduced |= std::uint64_t{1} << d;
  return [reduced, differentiable](const BackwardArgs<T>& args) {
    const Shape in = args.input_shape(0);
    std::vector<std::int64_t> kept(in.begin(), in.end());
    for (std::size_t d = 0; d < kept.size(); ++d)
      if (reduced >> d & 1) kept[d] = 1;
    return differentiable(args, kept);
  };
}

// y_o = scale * sum_{i: o(i) = o} x_i;  dx_i = scale * dy_o(i)
template <class T>
Tensor<T> scaled_sum(const OpScope& scope, const Tensor<T>& a, ReducePlan plan, Acc scale) {
  const char* op = scope.name();
  const T* px = a.value().data();
  std::vector<Acc> acc = scratch_vector<Acc>(plan.out_size, Acc(0), op);
  sum_into(op, plan, px, acc);
  Array<T> y = empty_array<T>(plan.out_shape, op);
  for (std::size_t o = 0; o < plan.out_size; ++o) y.data()[o] = static_cast<T>(acc[o] * scale);
  GradFormula<T> formula = scaled_sum_formula<T>(plan.kept_shape, scale);
  return scope.result<T>(
      std::move(y), {a},
      [op, plan = std::move(plan), scale](Node<T>& out) {
        Array<T> gx = empty_array<T>(out.input_shape(0), op);
        const T* pg = out.grad.data();
        T* pgx = gx.data();
        const T s = static_cast<T>(scale);
        visit_elements(plan, [&](std::size_t i, std::size_t o) { pgx[i] = pg[o] * s; });
        out.input(0).accumulate_grad(std::move(gx));
      },
      std::move(formula));
}

// Two passes for accuracy under a large common offset:
//   mean_o = sum x_i / n;  y_o = sum (x_i - mean_o)^2 / (n - correction)
//   dx_i = dy_o * 2 (x_i - mean_o) / (n - correction)
// n - correction <= 0 gives NaN, as torch.
template <class T>
Tensor<T> variance(const OpScope& op, const Tensor<T>& a, ReducePlan plan, bool unbiased) {
  const T* px = a.value().data();
  std::vector<Acc> mean = scratch_vector<Acc>(plan.out_size, Acc(0), op.name());
  std::vector<Acc> ss = scratch_vector<Acc>(plan.out_size, Acc(0), op.name());
  visit(plan, [&](std::size_t i, std::size_t o) { mean[o] += px[i]; });
  for (Acc& m : mean) m /= static_cast<Acc>(plan.count);
  visit(plan, [&](std::size_t i, std::size_t o) {
    const Acc d = px[i] - mean[o];
    ss[o] += d * d;
  });
  const std::size_t correction = unbiased ? 1 : 0;
  const Acc divisor = plan.count > correction ? static_cast<Acc>(plan.count - correction) : Acc(0);
  Array<T> y = empty_array<T>(plan.out_shape, op.name());
  for (std::size_t o = 0; o < plan.out_size; ++o) y.data()[o] = static_cast<T>(ss[o] / divisor);
  // Under create_graph: dx = expand(dy) * 2 / divisor * (x - mean(x)), the mean recomputed in
  // differentiable ops (its own dependence on x then enters the second derivative).
  GradFormula<T> formula = [kept = plan.kept_shape, count = plan.count, divisor](const BackwardArgs<T>& args) {
    const Shape in = args.input_shape(0);
    const std::vector<std::int64_t> in_sizes(in.begin(), in.end());
    const Tensor<T> x = args.input(0);
    const Tensor<T> centered = sub(x, mul(sum_to(x, kept), static_cast<T>(Acc(1) / static_cast<Acc>(count))));
    const Tensor<T> dy = expand(reshape(args.grad(), std::vector<std::int64_t>(kept.begin(), kept.end())), in_sizes);
    return std::vector<Tensor<T>>{mul(mul(dy, centered), static_cast<T>(Acc(2) / divisor))};
  };
  return op.result<T>(
      std::move(y), {a},
      [plan = std::move(plan), mean = std::move(mean), divisor](Node<T>& out) {
        const Array<T>& x = out.input_value(0);
        Array<T> gx = empty_array<T>(x.shape(), "var (backward)");
        const T* px = x.data();
        const T* pg = out.grad.data();
        T* pgx = gx.data();
        const Acc k = Acc(2) / divisor;
        visit_elements(plan,
                       [&](std::size_t i, std::size_t o) { pgx[i] = static_cast<T>(pg[o] * k * (px[i] - mean[o])); });
        out.input(0).accumulate_grad(std::move(gx));
      },
      std::move(formula));
}

// NaN wins (torch.amax propagates NaN); a NaN ties with a NaN result.
template <class T>
bool greater(T x, T best) { return x > best || (std::isnan(x) && !std::isnan(best)); }
template <class T>
bool ties(T x, T y) { return x == y || (std::isnan(x) && std::isnan(y)); }

// y_o = max_{i: o(i) = o} x_i;  dx_i = dy_o / (number of i with x_i = y_o) where x_i = y_o, else 0
template <class T>
Tensor<T> max_shared(const OpScope& scope, const Tensor<T>& a, ReducePlan plan) {
  const char* op = scope.name();
  XGRAD_CHECK(plan.count > 0, op, ": cannot reduce over an empty dimension (input shape ", a.shape(), ")");
  const T* px = a.value().data();
  Array<T> y = empty_array<T>(plan.out_shape, op);
  T* py = y.data();
  std::fill(py, py + plan.out_size, -std::numeric_limits<T>::infinity());
  visit(plan, [&](std::size_t i, std::size_t o) {
    if (greater(px[i], py[o])) py[o] = px[i];
  });
  // Under create_graph: dx = expand(dy) * share, share_i = 1 / (ties of y_o(i)) where x_i ties
  // with it, else 0: a constant mask (the maximum's position does not move under an
  // infinitesimal change), as torch.amax's backward.
  GradFormula<T> formula = [op, plan](const BackwardArgs<T>& args) {
    const Tensor<T> x = args.input(0), y = args.output();
    const T* px = x.value().data();
    const T* py = y.value().data();
    std::vector<std::size_t> n_ties = scratch_vector<std::size_t>(plan.out_size, 0, op);
    visit(plan, [&](std::size_t i, std::size_t o) { n_ties[o] += ties(px[i], py[o]); });
    Array<T> share = empty_array<T>(x.value().shape(), op);
    visit(plan, [&](std::size_t i, std::size_t o) {
      share.data()[i] = ties(px[i], py[o]) ? T(1) / static_cast<T>(n_ties[o]) : T(0);
    });
    const Shape in = x.shape();
    const Tensor<T> dy =
        expand(reshape(args.grad(), std::vector<std::int64_t>(plan.kept_shape.begin(), plan.kept_shape.end())),
               std::vector<std::int64_t>(in.begin(), in.end()));
    return std::vector<Tensor<T>>{mul(dy, Tensor<T>(std::move(share)))};
  };
  return scope.result<T>(
      std::move(y), {a},
      [op, plan = std::move(plan)](Node<T>& out) {
        const Array<T>& x = out.input_value(0);
        const T* px = x.data();
        const T* py = out.output_value().data();
        const T* pg = out.grad.data();
        std::vector<std::size_t> n_ties = scratch_vector<std::size_t>(plan.out_size, 0, op);
        visit(plan, [&](std::size_t i, std::size_t o) { n_ties[o] += ties(px[i], py[o]); });
        Array<T> gx = empty_array<T>(x.shape(), op);
        T* pgx = gx.data();
        visit_elements(plan, [&](std::size_t i, std::size_t o) {
          pgx[i] = ties(px[i], py[o]) ? pg[o] / static_cast<T>(n_ties[o]) : T(0);
        });
        out.input(0).accumulate_grad(std::move(gx));
      },
      std::move(formula));
}

}  // namespace

// ---- sum, mean ------------------------------------------------------------------------------

template <class T>
Tensor<T> sum(const Tensor<T>& a) {
  const OpScope op(OpKind::sum);
  return scaled_sum<T>(op, a, plan_all(a.shape()), Acc(1));
}

template <class T>
Tensor<T> sum(const Tensor<T>& a, const std::vector<std::int64_t>& dims, bool keepdim) {
  const OpScope op(OpKind::sum);
  XGRAD_OP_NOTE(op, {"dim", dims}, {"keepdim", keepdim});
  return scaled_sum<T>(op, a, plan_reduction(op.name(), a.shape(), reduced_dims(op.name(), a.dim(), dims), keepdim),
                       Acc(1));
}

template <class T>
Tensor<T> sum_to(const Tensor<T>& a, const Shape& shape) {
  const auto& in = a.value().shape();
  if (in.size() == shape.size() && std::equal(shape.begin(), shape.end(), in.begin())) return a;
  XGRAD_CHECK(in.size() >= shape.size(), "sum_to: cannot sum a tensor of shape ", a.shape(), " to shape ", shape);
  const std::size_t lead = in.size() - shape.size();
  std::vector<std::int64_t> dims;
  for (std::size_t d = 0; d < in.size(); ++d) {
    const bool summed = d < lead || (shape[d - lead] == 1 && in[d] != 1);
    XGRAD_CHECK(d < lead || summed || shape[d - lead] == in[d], "sum_to: cannot sum a tensor of shape ", a.shape(),
                " to shape ", shape);
    if (summed) dims.push_back(static_cast<std::int64_t>(d));
  }
  const Tensor<T> s = dims.empty() ? a : sum(a, dims, /*keepdim=*/true);
  return reshape(s, std::vector<std::int64_t>(shape.begin(), shape.end()));
}

// mean of n = 0 elements is 0/0 = NaN, as torch.
template <class T>
Tensor<T> mean(const Tensor<T>& a) {
  const OpScope op(OpKind::mean);
  ReducePlan plan = plan_all(a.shape());
  const Acc scale = Acc(1) / static_cast<Acc>(plan.count);
  return scaled_sum<T>(op, a, std::move(plan), scale);
}

template <class T>
Tensor<T> mean(const Tensor<T>& a, const std::vector<std::int64_t>& dims, bool keepdim) {
  const OpScope op(OpKind::mean);
  XGRAD_OP_NOTE(op, {"dim", dims}, {"keepdim", keepdim});
  ReducePlan plan = plan_reduction(op.name(), a.shape(), reduced_dims(op.name(), a.dim(), dims), keepdim);
  const Acc scale = Acc(1) / static_cast<Acc>(plan.count);
  return scaled_sum<T>(op, a, std::move(plan), scale);
}

// ---- var --------------------------------------------------------------------------------------

template <class T>
Tensor<T> var(const Tensor<T>& a, bool unbiased) {
  const OpScope op(OpKind::var);
  XGRAD_OP_NOTE(op, {"unbiased", unbiased});
  return variance<T>(op, a, plan_all(a.shape()), unbiased);
}

template <class T>
Tensor<T> var(const Tensor<T>& a, const std::vector<std::int64_t>& dims, bool unbiased, bool keepdim) {
  const OpScope op(OpKind::var);
  XGRAD_OP_NOTE(op, {"dim", dims}, {"unbiased", unbiased}, {"keepdim", keepdim});
  return variance<T>(op, a, plan_reduction(op.name(), a.shape(), reduced_dims(op.name(), a.dim(), dims), keepdim),
                     unbiased);
}

// ---- amax, max --------------------------------------------------------------------------------

template <class T>
Tensor<T> amax(const Tensor<T>& a, const std::vector<std::int64_t>& dims, bool keepdim) {
  const OpScope op(OpKind::amax);
  XGRAD_OP_NOTE(op, {"dim", dims}, {"keepdim", keepdim});
  return max_shared<T>(op, a, plan_reduction(op.name(), a.shape(), reduced_dims(op.name(), a.dim(), dims), keepdim));
}

template <class T>
Tensor<T> max(const Tensor<T>& a) {
  const OpScope op(OpKind::max);
  return max_shared<T>(op, a, plan_all(a.shape()));
}

namespace {
// The flat input index of each output's first maximum (NaN counts as the maximum): row-major order
// visits each output's candidates in increasing position, so ties keep the first.
template <class T>
std::vector<std::size_t> first_argmax(const char* op, const ReducePlan& plan, const T* px) {
  constexpr std::size_t none = std::numeric_limits<std::size_t>::max();
  std::vector<std::size_t> arg = scratch_vector<std::size_t>(plan.out_size, none, op);
  visit(plan, [&](std::size_t i, std::size_t o) {
    if (arg[o] == none || greater(px[i], px[arg[o]])) arg[o] = i;
  });
  return arg;
}

// dx_{argmax_o} = dy_o, 0 elsewhere; under create_graph dx = expand(dy) * mask, the mask 1 at each
// argmax (a constant).
template <class T>
std::pair<std::function<void(Node<T>&)>, GradFormula<T>> max_dim_backward(
    std::shared_ptr<const std::vector<std::size_t>> args_max, Shape kept) {
  auto backward = [args_max](Node<T>& out) {
    Array<T> gx = full_array<T>(out.input_shape(0), T(0), "max (backward)");
    const T* pg = out.grad.data();
    for (std::size_t o = 0; o < args_max->size(); ++o) gx.data()[(*args_max)[o]] += pg[o];
    out.input(0).accumulate_grad(std::move(gx));
  };
  GradFormula<T> formula = [args_max, kept = std::move(kept)](const BackwardArgs<T>& args) {
    const Shape in = args.input_shape(0);
    Array<T> mask = full_array<T>(in, T(0), "max (backward)");
    for (std::size_t i : *args_max) mask.data()[i] = T(1);
    const Tensor<T> dy = expand(reshape(args.grad(), std::vector<std::int64_t>(kept.begin(), kept.end())),
                                std::vector<std::int64_t>(in.begin(), in.end()));
    return std::vector<Tensor<T>>{mul(dy, Tensor<T>(std::move(mask)))};
  };
  return {std::move(backward), std::move(formula)};
}
}  // namespace

// values_o = x_{argmax_o}, the first maximum along dim (NaN counts as the maximum);
// dx_{argmax_o} = dy_o, 0 elsewhere.
template <class T>
std::pair<Tensor<T>, IndexArray> max(const Tensor<T>& a, std::int64_t dim, bool keepdim) {
  const OpScope op(OpKind::max);
  const Shape in = a.shape();
  const ReducePlan plan = plan_reduction(op.name(), in, reduced_dims(op.name(), in.size(), {dim}), keepdim);
  XGRAD_CHECK(plan.count > 0, "max: cannot reduce over an empty dimension (input shape ", in,
              ", dim ", dim, ")");
  // Position along dim of flat index i: (i / inner) % size.
  std::size_t inner = 1, size = 1;
  if (!in.empty()) {
    const std::size_t k = normalize_dim(dim, in.size(), op.name());
    size = in[k];
    inner = detail::numel(in, k + 1, in.size());
  }
  const T* px = a.value().data();
  auto arg = std::make_shared<const std::vector<std::size_t>>(first_argmax(op.name(), plan, px));
  Array<T> y = empty_array<T>(plan.out_shape, op.name());
  IndexArray indices = empty_array<std::int64_t>(plan.out_shape, op.name());
  for (std::size_t o = 0; o < plan.out_size; ++o) {
    y.data()[o] = px[(*arg)[o]];
    indices.data()[o] = static_cast<std::int64_t>(((*arg)[o] / inner) % size);
  }
  XGRAD_OP_NOTE(op, {"dim", std::vector<std::int64_t>{dim}}, {"keepdim", keepdim});
  auto [backward, formula] = max_dim_backward<T>(arg, plan.kept_shape);
  return {op.result<T>(std::move(y), {a}, std::move(backward), std::move(formula)), std::move(indices)};
}

#define XGRAD_INSTANTIATE(T)                                                                 \
  template Tensor<T> sum<T>(const Tensor<T>&);                                               \
  template Tensor<T> mean<T>(const Tensor<T>&);                                              \
  template Tensor<T> sum<T>(const Tensor<T>&, const std::vector<std::int64_t>&, bool);       \
  template Tensor<T> mean<T>(const Tensor<T>&, const std::vector<std::int64_t>&, bool);      \
  template Tensor<T> sum_to<T>(const Tensor<T>&, const Shape&);                              \
  template Tensor<T> var<T>(const Tensor<T>&, bool);                                         \
  template Tensor<T> var<T>(const Tensor<T>&, const std::vector<std::int64_t>&, bool, bool); \
  template Tensor<T> amax<T>(const Tensor<T>&, const std::vector<std::int64_t>&, bool);      \
  template Tensor<T> max<T>(const Tensor<T>&);                                               \
  template std::pair<Tensor<T>, IndexArray> max<T>(const Tensor<T>&, std::int64_t, bool);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad
