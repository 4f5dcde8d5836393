// rms_norm as one fused node, in the manner of layer_norm.cpp without the centering.
//
// x: (*, D...) is seen as (rows, D) with D the product of normalized_shape; rstd: (rows).
// The mean of squares is accumulated in double for float input too, and rstd is saved in double
// for the backward (as layer_norm does); for float input the result is HF's float32 LlamaRMSNorm
// within its rounding. Rows run on xsimd batches of doubles (norm_rows.hpp): sums are lane-wise,
// then across lanes, so they may differ from a sequential loop in the last bits.

// First, so that its pragma covers xsimd wherever xtensor includes it (see simd.hpp).
#include <xgrad/ops/norm_rows.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include <xgrad/ops/op_scope.hpp>
#include <xgrad/ops/ops.hpp>
#include <xgrad/backend/strided.hpp>

namespace xgrad {

namespace {

using namespace detail::norm_rows;

struct RmsNormSaved {
  std::size_t rows = 0, d = 0;
  std::vector<double> rstd;  // (rows)
  bool has_weight = false;   // the weight is input 1
};

// mean_j x[j]^2 over a row of n, accumulated in double.
template <class T>
double mean_square(const T* x, std::size_t n) {
  const auto batch = [x](std::size_t j) {
    const DB v = load_d(x + j);
    return v * v;
  };
  const auto tail = [x](std::size_t j) { return static_cast<double>(x[j]) * x[j]; };
  return row_sum(n, batch, tail) / static_cast<double>(n);
}

// x: (rows, D), w: (D) or null -> y: (rows, D), rstd: (rows).
//   rstd = 1 / sqrt(mean(x^2) + eps),  y = x * rstd * w
// Rows split across threads in row_pieces' pieces.
template <class T>
void rms_norm_forward(T* y, double* rstd, const T* x, const T* w, std::size_t rows, std::size_t D, double eps) {
  const std::size_t pieces = row_pieces(rows, D);
  detail::parallel_for(pieces, 1, [&](std::size_t p0, std::size_t p1) {
    for (std::size_t r = rows * p0 / pieces; r < rows * p1 / pieces; ++r) {
      const T* xr = x + r * D;
      rstd[r] = 1.0 / std::sqrt(mean_square(xr, D) + eps);
      normalize_row(xr, w, static_cast<const T*>(nullptr), y + r * D, 0.0, rstd[r], D);
    }
  });
}

// One row of the backward, rs its rstd: dw += dy * xhat (when dw is not null), and, when dxr is
// not null, dx = rs * (g - xhat * mean(g * xhat)) with xhat = x * rs and g = dy * w.
template <class T>
void backward_row(T* dxr, double* dw, const T* dyr, const T* xr, const T* w, double rs, std::size_t D) {
  const DB rb(rs);
  DB acc(0.0);
  std::size_t j = 0;
  for (; j + kW <= D; j += kW) {
    const DB xhat = load_d(xr + j) * rb;
    const DB dy = load_d(dyr + j);
    acc = xsimd::fma(w ? dy * load_d(w + j) : dy, xhat, acc);
    if (dw) xsimd::fma(dy, xhat, DB::load_unaligned(dw + j)).store_unaligned(dw + j);
  }
  double mean_g_xhat = sum_lanes(acc);
  for (; j < D; ++j) {
    const double xhat = xr[j] * rs, dy = dyr[j];
    mean_g_xhat += (w ? dy * w[j] : dy) * xhat;
    if (dw) dw[j] += dy * xhat;
  }
  if (!dxr) return;
  mean_g_xhat /= static_cast<double>(D);
  const DB mb(mean_g_xhat);
  for (j = 0; j + kW <= D; j += kW) {
    const DB xhat = load_d(xr + j) * rb;
    const DB dy = load_d(dyr + j);
    store_d(rb * ((w ? dy * load_d(w + j) : dy) - xhat * mb), dxr + j);
  }
  for (; j < D; ++j) {
    const double xhat = xr[j] * rs, dy = dyr[j];
    dxr[j] = static_cast<T>(rs * ((w ? dy * w[j] : dy) - xhat * mean_g_xhat));
  }
}

// dy, x: (rows, D), w: (D) or null, rstd: (rows) -> dx: (rows, D) when not null; dw: (pieces, D)
// partial sums when not null, one row per piece of rows (summed in piece order by sum_pieces, so
// the bits do not depend on the thread count).
template <class T>
void rms_norm_backward(T* dx, double* dw, const T* dy, const T* x, const T* w, const double* rstd, std::size_t rows,
                       std::size_t D, std::size_t pieces) {
  detail::parallel_for(pieces, 1, [&](std::size_t p0, std::size_t p1) {
    for (std::size_t p = p0; p < p1; ++p)
      for (std::size_t r = rows * p / pieces; r < rows * (p + 1) / pieces; ++r)
        backward_row(dx ? dx + r * D : nullptr, dw ? dw + p * D : nullptr, dy + r * D, x + r * D, w, rstd[r], D);
  });
}

// The node's backward: the kernel on its saved rstd, the gradients to x and the weight.
template <class T>
void rms_norm_node_backward(Node<T>& out, const RmsNormSaved& s) {
  const char* who = "rms_norm (backward)";
  const bool need_x = out.input_needs_grad(0), need_w = s.has_weight && out.input_needs_grad(1);
  const std::size_t pieces = row_pieces(s.rows, s.d);
  Array<T> dx;
  if (need_x) dx = empty_array<T>(out.input_shape(0), who);
  std::vector<double> dw(need_w ? pieces * s.d : 0, 0.0);
  const T* w = s.has_weight && need_x ? out.input_value(1).data() : nullptr;  // only dx reads w
  rms_norm_backward(need_x ? dx.data() : nullptr, need_w ? dw.data() : nullptr, out.grad.data(),
                    out.input_value(0).data(), w, s.rstd.data(), s.rows, s.d, pieces);
  if (need_x) out.input(0).accumulate_grad(std::move(dx));
  if (need_w) out.input(1).accumulate_grad(sum_pieces(out, dw, pieces, s.d, 1, who));
}

// Under create_graph (rms_norm's GradFormula), the backward in differentiable ops, with rstd
// recomputed from x so that its own derivative flows. Over the normalized dims N:
//   rstd = (mean_N(x^2) + eps)^(-1/2),  xhat = x * rstd,  g = dy * w (dy without a weight)
//   dx = rstd * (g - xhat * mean_N(g * xhat)),  dw = dy * xhat summed over the leading dims.
// w may be undefined; gx and gw are written when not null.
template <class T>
void rms_norm_grads(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>& w, std::size_t normalized_dims,
                    double eps, Tensor<T>* gx, Tensor<T>* gw) {
  std::vector<std::int64_t> dims;
  for (std::size_t d = 0; d < normalized_dims; ++d) dims.push_back(-1 - static_cast<std::int64_t>(d));
  const Tensor<T> rstd = pow(add(mean(mul(x, x), dims, true), static_cast<T>(eps)), T(-0.5));
  const Tensor<T> xhat = mul(x, rstd);
  if (gw) *gw = sum_to(mul(dy, xhat), w.shape());
  if (gx) {
    const Tensor<T> g = w.defined() ? mul(dy, w) : dy;
    *gx = mul(rstd, sub(g, mul(xhat, mean(mul(g, xhat), dims, true))));
  }
}

template <class T>
std::vector<Tensor<T>> rms_norm_formula(const BackwardArgs<T>& args, std::size_t normalized_dims, double eps) {
  std::vector<Tensor<T>> g(args.num_inputs());
  const bool has_weight = g.size() > 1, need_x = args.needs(0), need_w = has_weight && args.needs(1);
  if (need_x || need_w)
    rms_norm_grads(args.grad(), args.input(0), has_weight ? args.input(1) : Tensor<T>(), normalized_dims, eps,
                   need_x ? &g[0] : nullptr, need_w ? &g[1] : nullptr);
  return g;
}

// ---- add_rms_norm_with_sum ------------------------------------------------------------------------
// Inputs (x, r[, weight]); results s = x + r and y = rms_norm(s). s is not saved for the backward:
// it is recomputed per row from x and r (the same T additions, so the same bits) in a scratch row.

// x, r: (rows, D), w: (D) or null -> s, y: (rows, D), rstd: (rows); s = x + r, then rms_norm's rows.
template <class T>
void add_rms_norm_forward(T* s, T* y, double* rstd, const T* x, const T* r, const T* w, std::size_t rows, std::size_t D,
                          double eps) {
  const std::size_t pieces = row_pieces(rows, D);
  detail::parallel_for(pieces, 1, [&](std::size_t p0, std::size_t p1) {
    for (std::size_t i = rows * p0 / pieces; i < rows * p1 / pieces; ++i) {
      T* sr = s + i * D;
      for (std::size_t j = 0; j < D; ++j) sr[j] = x[i * D + j] + r[i * D + j];
      rstd[i] = 1.0 / std::sqrt(mean_square(sr, D) + eps);
      normalize_row(sr, w, static_cast<const T*>(nullptr), y + i * D, 0.0, rstd[i], D);
    }
  });
}

// The fused node's backward (inputs x, r[, weight]): dy, the gradient of y, and dsum, the gradient
// of s, each an Array this backward owns, or null when that output got no gradient.
//   ds = rms_norm's dx (from dy) + dsum, given to x and to r;  dweight from dy.
// Per row, rms_norm's dx is written over dy's row (each element read before it is written), then
// ds = dsum + dx in T, the addition accumulate_grad makes in the unfused graph: the same bits. The
// second input gets dy's buffer when both gradients came, else a copy.
template <class T>
void add_rms_norm_backward(Node<T>& node, const RmsNormSaved& s, Array<T>* dy, Array<T>* dsum) {
  const char* who = "add_rms_norm (backward)";
  const std::size_t D = s.d, pieces = row_pieces(s.rows, D);
  const bool need_x = node.input_needs_grad(0), need_r = node.input_needs_grad(1);
  const bool need_w = dy && s.has_weight && node.input_needs_grad(2), need_s = need_x || need_r;
  if ((!need_s && !need_w) || (!dy && !dsum)) return;
  const T* px = dy ? node.input_value(0).data() : nullptr;
  const T* pr = dy ? node.input_value(1).data() : nullptr;
  const T* pw = dy && need_s && s.has_weight ? node.input_value(2).data() : nullptr;
  T* pdy = dy ? dy->data() : nullptr;
  T* pds = dsum ? dsum->data() : nullptr;
  Array<T>* first = dsum ? dsum : dy;  // ds ends here
  Array<T> fresh;
  if (need_x && need_r && !(dy && dsum)) fresh = empty_array<T>(node.input_shape(1), who);
  Array<T>* second = need_x && need_r ? (dy && dsum ? dy : &fresh) : nullptr;
  T* p2 = second ? second->data() : nullptr;
  std::vector<double> dw(need_w ? pieces * D : 0, 0.0);
  detail::parallel_for(pieces, 1, [&](std::size_t p0, std::size_t p1) {
    std::vector<T> sum_row(pdy ? D : 0);
    for (std::size_t p = p0; p < p1; ++p)
      for (std::size_t i = s.rows * p / pieces; i < s.rows * (p + 1) / pieces; ++i) {
        const std::size_t o = i * D;
        if (pdy) {
          for (std::size_t j = 0; j < D; ++j) sum_row[j] = px[o + j] + pr[o + j];
          backward_row(need_s ? pdy + o : nullptr, need_w ? dw.data() + p * D : nullptr, pdy + o, sum_row.data(), pw,
                       s.rstd[i], D);
        }
        if (!need_s) continue;
        if (pdy && pds)
          for (std::size_t j = 0; j < D; ++j) pds[o + j] = pds[o + j] + pdy[o + j];
        if (p2) std::copy(first->data() + o, first->data() + o + D, p2 + o);
      }
  });
  if (need_x) node.input(0).accumulate_grad(std::move(*first));
  if (need_r) node.input(1).accumulate_grad(std::move(second ? *second : *first));
  if (need_w) node.input(2).accumulate_grad(sum_pieces(node, dw, pieces, D, 2, who));
}

// Under create_graph: rms_norm's formula on s = x + r, then the add's (ds to both x and r). dy or
// dsum may be undefined (that output got no gradient).
template <class T>
std::vector<Tensor<T>> add_rms_norm_formula(const BackwardArgs<T>& args, const Tensor<T>& dy, const Tensor<T>& dsum,
                                            std::size_t normalized_dims, double eps) {
  std::vector<Tensor<T>> g(args.num_inputs());
  const bool has_weight = g.size() > 2, need_s = args.needs(0) || args.needs(1);
  const bool need_w = dy.defined() && has_weight && args.needs(2);
  Tensor<T> ds;
  if (dy.defined() && (need_s || need_w))
    rms_norm_grads(dy, add(args.input(0), args.input(1)), has_weight ? args.input(2) : Tensor<T>(), normalized_dims,
                   eps, need_s ? &ds : nullptr, need_w ? &g[2] : nullptr);
  if (dsum.defined()) ds = ds.defined() ? add(dsum, ds) : dsum;
  if (args.needs(0)) g[0] = ds;
  if (args.needs(1)) g[1] = ds;
  return g;
}

// The argument checks; op names the caller in the errors.
template <class T>
void check_rms_norm_args(const char* op, const Tensor<T>& x, const Shape& normalized_shape, const Tensor<T>& weight,
                         double eps) {
  const Shape sx = x.shape();
  const std::size_t nn = normalized_shape.size();
  XGRAD_CHECK(nn >= 1, op, ": expected normalized_shape to be at least 1-dimensional, got ", normalized_shape);
  XGRAD_CHECK(sx.size() >= nn && std::equal(normalized_shape.begin(), normalized_shape.end(), sx.end() - nn), op,
              ": expected input with trailing shape ", normalized_shape, ", got ", sx);
  if (weight.defined())
    XGRAD_CHECK(weight.shape() == normalized_shape, op, ": expected weight of shape ", normalized_shape, ", got ",
                weight.shape());
  XGRAD_CHECK(eps >= 0, op, ": expected eps >= 0, got ", eps);  // NaN fails too
}

// The saved state for x seen as (rows, D) with D the product of normalized_shape.
std::shared_ptr<RmsNormSaved> rms_norm_saved(std::size_t numel, const Shape& normalized_shape, bool has_weight) {
  auto s = std::make_shared<RmsNormSaved>();
  s->d = detail::numel(normalized_shape);
  s->rows = s->d == 0 ? 0 : numel / s->d;
  s->rstd.resize(s->rows);
  s->has_weight = has_weight;
  return s;
}

}  // namespace

// y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps) over each row.
// https://pytorch.org/docs/stable/generated/torch.nn.functional.rms_norm.html
template <class T>
Tensor<T> rms_norm(const Tensor<T>& x, const ShapeArg& normalized_shape_arg, const Tensor<T>& weight,
                   std::optional<double> eps_arg) {
  const OpScope op(OpKind::rms_norm);
  const Shape& normalized_shape = normalized_shape_arg.get(op.name());
  const double eps = eps_arg.value_or(std::numeric_limits<T>::epsilon());
  check_rms_norm_args(op.name(), x, normalized_shape, weight, eps);
  const auto saved = rms_norm_saved(x.numel(), normalized_shape, weight.defined());
  const RmsNormSaved& s = *saved;

  Array<T> y = empty_array<T>(x.shape(), op.name());
  rms_norm_forward(y.data(), saved->rstd.data(), x.value().data(), s.has_weight ? weight.value().data() : nullptr,
                   s.rows, s.d, eps);

  const std::size_t nn = normalized_shape.size();
  XGRAD_OP_NOTE(op, {"normalized_dims", nn}, {"eps", eps}, {"has_weight", s.has_weight});
  std::vector<Tensor<T>> inputs{x};
  if (s.has_weight) inputs.push_back(weight);
  return op.result<T>(
      std::move(y), std::move(inputs), [saved](Node<T>& out) { rms_norm_node_backward(out, *saved); },
      [nn, eps](const BackwardArgs<T>& args) { return rms_norm_formula(args, nn, eps); });
}

template <class T>
std::pair<Tensor<T>, Tensor<T>> add_rms_norm_with_sum(const Tensor<T>& x, const Tensor<T>& r,
                                                      const ShapeArg& normalized_shape_arg, const Tensor<T>& weight,
                                                      std::optional<double> eps_arg) {
  if (trace::active() || x.value().shape() != r.value().shape()) {  // the unfused ops
    Tensor<T> sum = add(x, r);
    Tensor<T> y = rms_norm(sum, normalized_shape_arg, weight, eps_arg);
    return {std::move(sum), std::move(y)};
  }
  XGRAD_PROFILE_OP("add_rms_norm");
  const char* name = "add_rms_norm";
  const Shape& normalized_shape = normalized_shape_arg.get(name);
  const double eps = eps_arg.value_or(std::numeric_limits<T>::epsilon());
  check_rms_norm_args(name, x, normalized_shape, weight, eps);
  const auto saved = rms_norm_saved(x.numel(), normalized_shape, weight.defined());
  Array<T> sum = empty_array<T>(x.value().shape(), name), y = empty_array<T>(x.value().shape(), name);
  add_rms_norm_forward(sum.data(), y.data(), saved->rstd.data(), x.value().data(), r.value().data(),
                       weight.defined() ? weight.value().data() : nullptr, saved->rows, saved->d, eps);
  std::vector<Tensor<T>> inputs{x, r};
  if (weight.defined()) inputs.push_back(weight);
  // The gradients of y (0) and s (1), parked by their nodes until the fused node runs (graph.hpp).
  auto slots = std::make_shared<detail::ParkedGradients<T>>(2);
  const Tensor<T> fused = make_result<T>(
      name, Array<T>(T(0)), std::move(inputs),
      [saved, slots](Node<T>& node) {
        add_rms_norm_backward<T>(node, *saved, slots->has[0] ? &slots->grads[0] : nullptr,
                                 slots->has[1] ? &slots->grads[1] : nullptr);
        for (int k = 0; k < 2; ++k) {
          detail::recycle(slots->grads[k]);
          slots->has[k] = false;
        }
      },
      [slots, nn = normalized_shape.size(), eps](const BackwardArgs<T>& args) {
        const Tensor<T> dy = slots->has[0] ? std::move(slots->graphs[0]) : Tensor<T>();
        const Tensor<T> dsum = slots->has[1] ? std::move(slots->graphs[1]) : Tensor<T>();
        for (int k = 0; k < 2; ++k) {
          slots->graphs[k] = Tensor<T>();
          slots->has[k] = false;
        }
        return add_rms_norm_formula<T>(args, dy, dsum, nn, eps);
      });
  if (!fused.requires_grad()) return {Tensor<T>(std::move(sum)), Tensor<T>(std::move(y))};
  const auto output = [&slots, &fused, name](Array<T>&& value, std::size_t k) {
    auto [park, park_graph] = detail::park_gradient<T>(slots, k);
    return make_result<T>(name, std::move(value), {fused}, std::move(park), std::move(park_graph));
  };
  Tensor<T> y_out = output(std::move(y), 0);
  Tensor<T> sum_out = output(std::move(sum), 1);
  return {std::move(sum_out), std::move(y_out)};
}

#define XGRAD_INSTANTIATE(T)                                                                                  \
  template Tensor<T> rms_norm<T>(const Tensor<T>&, const ShapeArg&, const Tensor<T>&, std::optional<double>); \
  template std::pair<Tensor<T>, Tensor<T>> add_rms_norm_with_sum<T>(                                          \
      const Tensor<T>&, const Tensor<T>&, const ShapeArg&, const Tensor<T>&, std::optional<double>);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad
