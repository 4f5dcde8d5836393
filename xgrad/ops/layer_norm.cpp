// layer_norm as one fused node, in the manner of llm.c's layernorm_forward/backward.
//
// x: (*, D...) is seen as (rows, D) with D the product of normalized_shape; mean, rstd: (rows).
// Statistics are accumulated in double for float input too, with two passes (the mean, then the
// squared deviations from it), so that a large common offset (float inputs around 1e4) does not
// cancel the variance away. mean and rstd are saved in double for the backward for the same
// reason: x - mean in float would lose the digits that matter. The row loops run on xsimd
// batches of doubles (float data converted on load and store); sums are lane-wise, then across
// lanes, so they may differ from a sequential loop in the last bits.

// First, so that its pragma covers xsimd wherever xtensor includes it (see simd.hpp).
#include <xgrad/ops/norm_rows.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <tuple>
#include <utility>

#include <xgrad/ops/op_scope.hpp>
#include <xgrad/ops/ops.hpp>
#include <xgrad/backend/parallel.hpp>
#include <xgrad/backend/strided.hpp>

namespace xgrad {

namespace {

using namespace detail::norm_rows;

struct LayerNormSaved {
  std::size_t rows = 0, d = 0;
  std::vector<double> mean, rstd;  // (rows)
  int weight = -1, bias = -1;      // positions among the node's inputs, -1 when absent
};

// One row of the forward: y = (x - m) * rs * w + b; returns (m, rs).
template <class T>
std::pair<double, double> forward_row(const T* xr, const T* pw, const T* pb, T* yr, std::size_t D, double eps) {
  const double m = row_sum(D, [xr](std::size_t j) { return load_d(xr + j); },
                           [xr](std::size_t j) { return static_cast<double>(xr[j]); }) /
                   static_cast<double>(D);
  const DB mb(m);
  const double v = row_sum(D,
                           [xr, mb](std::size_t j) {
                             const DB dev = load_d(xr + j) - mb;
                             return dev * dev;
                           },
                           [xr, m](std::size_t j) {
                             const double dev = xr[j] - m;
                             return dev * dev;
                           }) /
                   static_cast<double>(D);
  const double rs = 1.0 / std::sqrt(v + eps);
  normalize_row(xr, pw, pb, yr, m, rs, D);
  return {m, rs};
}

// One row of the backward: dw += dy * xhat and db += dy (when not null), and, when dxr is not
// null, dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) with dxhat = dy * w.
template <class T>
void backward_row(const T* xr, const T* dyr, const T* pw, double m, double rs, std::size_t D, T* dxr, double* dw,
                  double* db) {
  const DB mb(m), rb(rs);
  DB acc_dxhat(0.0), acc_dxhat_xhat(0.0);
  std::size_t j = 0;
  for (; j + kW <= D; j += kW) {
    const DB xhat = (load_d(xr + j) - mb) * rb;
    const DB g = load_d(dyr + j);
    const DB dxhat = pw ? g * load_d(pw + j) : g;
    acc_dxhat += dxhat;
    acc_dxhat_xhat = xsimd::fma(dxhat, xhat, acc_dxhat_xhat);
    if (dw) xsimd::fma(g, xhat, DB::load_unaligned(dw + j)).store_unaligned(dw + j);
    if (db) (DB::load_unaligned(db + j) + g).store_unaligned(db + j);
  }
  double mean_dxhat = sum_lanes(acc_dxhat), mean_dxhat_xhat = sum_lanes(acc_dxhat_xhat);
  for (; j < D; ++j) {
    const double xhat = (xr[j] - m) * rs;
    const double g = dyr[j];
    const double dxhat = pw ? g * pw[j] : g;
    mean_dxhat += dxhat;
    mean_dxhat_xhat += dxhat * xhat;
    if (dw) dw[j] += g * xhat;
    if (db) db[j] += g;
  }
  if (!dxr) return;
  mean_dxhat /= static_cast<double>(D);
  mean_dxhat_xhat /= static_cast<double>(D);
  const DB md(mean_dxhat), mdx(mean_dxhat_xhat);
  for (j = 0; j + kW <= D; j += kW) {
    const DB xhat = (load_d(xr + j) - mb) * rb;
    const DB g = load_d(dyr + j);
    const DB dxhat = pw ? g * load_d(pw + j) : g;
    store_d(rb * (dxhat - md - xhat * mdx), dxr + j);
  }
  for (; j < D; ++j) {
    const double xhat = (xr[j] - m) * rs;
    const double dxhat = pw ? dyr[j] * static_cast<double>(pw[j]) : static_cast<double>(dyr[j]);
    dxr[j] = static_cast<T>(rs * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
  }
}

// Under create_graph (layer_norm's GradFormula), the backward in differentiable ops, with mean and
// rstd recomputed from x so that their own derivatives flow. Over the normalized dims N:
//   xhat = (x - mean_N(x)) * rstd,  rstd = (mean_N((x - mean_N(x))^2) + eps)^(-1/2)
//   dx = rstd * (gw - mean_N(gw) - xhat * mean_N(gw * xhat)),  gw = dy * w (dy without a weight)
//   dw = dy * xhat and db = dy, each summed over the leading dims.
// get_x() and get_w() give x and the weight (read only when needed); gx, gw, gb are written when
// not null.
template <class T, class GetX, class GetW>
void layer_norm_grads(const Tensor<T>& dy, std::size_t normalized_dims, double eps, const GetX& get_x,
                      const GetW& get_w, bool has_weight, Tensor<T>* gx, Tensor<T>* gw, const Shape& w_shape,
                      Tensor<T>* gb, const Shape& b_shape) {
  const std::size_t rank = static_cast<std::size_t>(dy.dim());
  std::vector<std::int64_t> dims;
  for (std::size_t d = rank - normalized_dims; d < rank; ++d) dims.push_back(static_cast<std::int64_t>(d));
  if (gb) *gb = sum_to(dy, b_shape);
  if (!gx && !gw) return;
  const Tensor<T> x = get_x();
  const Tensor<T> xc = sub(x, mean(x, dims, true));
  const Tensor<T> rstd = pow(add(mean(mul(xc, xc), dims, true), static_cast<T>(eps)), T(-0.5));
  const Tensor<T> xhat = mul(xc, rstd);
  if (gw) *gw = sum_to(mul(dy, xhat), w_shape);
  if (gx) {
    const Tensor<T> g = has_weight ? mul(dy, get_w()) : dy;
    *gx = mul(rstd, sub(sub(g, mean(g, dims, true)), mul(xhat, mean(mul(g, xhat), dims, true))));
  }
}

template <class T>
std::vector<Tensor<T>> layer_norm_formula(const BackwardArgs<T>& args, std::size_t normalized_dims, double eps,
                                          int weight, int bias) {
  const auto w = static_cast<std::size_t>(weight), b = static_cast<std::size_t>(bias);
  const bool need_x = args.needs(0), need_w = weight >= 0 && args.needs(w), need_b = bias >= 0 && args.needs(b);
  std::vector<Tensor<T>> g(args.num_inputs());
  layer_norm_grads<T>(
      args.grad(), normalized_dims, eps, [&] { return args.input(0); }, [&] { return args.input(w); }, weight >= 0,
      need_x ? &g[0] : nullptr, need_w ? &g[w] : nullptr, need_w ? args.input_shape(w) : Shape(),
      need_b ? &g[b] : nullptr, need_b ? args.input_shape(b) : Shape());
  return g;
}

// ---- add_layer_norm -----------------------------------------------------------------------------
// Inputs (x, r[, weight][, bias]). The sum s = x + r is not saved for the backward: it is
// recomputed per row from x and r (the same T additions, so the same bits), one row at a time in
// a scratch row that stays in cache. The forward writes it out only when it is a result (with_sum).

// The forward over all rows: s (written to ps, or only to a scratch row when ps is null) and y.
template <class T>
void add_layer_norm_forward(LayerNormSaved& s, const T* px, const T* pr, const T* pw, const T* pb, T* ps, T* py,
                            double eps) {
  const std::size_t D = s.d, pieces = row_pieces(s.rows, D);
  detail::parallel_for(pieces, 1, [&](std::size_t p0, std::size_t p1) {
    std::vector<T> scratch(ps ? 0 : D);
    for (std::size_t r = s.rows * p0 / pieces; r < s.rows * p1 / pieces; ++r) {
      const T* xr = px + r * D;
      const T* rr = pr + r * D;
      T* sr = ps ? ps + r * D : scratch.data();
      for (std::size_t j = 0; j < D; ++j) sr[j] = xr[j] + rr[j];
      std::tie(s.mean[r], s.rstd[r]) = forward_row(sr, pw, pb, py + r * D, D, eps);
    }
  });
}

// The fused backward of `node` (whose inputs are (x, r[, weight][, bias])): dy, the gradient of y,
// and dsum, the gradient of s, each an Array this backward owns (taken from the node that received
// it), or null when that output got no gradient (or, for dsum, is not a result).
//   ds = layer_norm's dx (from dy) + dsum, given to x and to r;  dweight, dbias from dy.
// No new array for the gradients: per row, layer_norm's dx is written over dy's row (each element
// is read before it is written), then ds = dsum + dx over dsum's row and into dy's row, and the two
// buffers go to x and r. Only without dsum (post-norm) or without dy (y unused) does the second
// input need a new array (a copy, as the unfused add's backward makes). The addition dsum + dx is
// the one accumulate_grad makes in the unfused graph, in T: the same bits.
template <class T>
void add_layer_norm_backward(Node<T>& node, const LayerNormSaved& s, Array<T>* dy, Array<T>* dsum) {
  const std::size_t D = s.d, pieces = row_pieces(s.rows, D);
  const bool need_x = node.input_needs_grad(0), need_r = node.input_needs_grad(1);
  const bool need_w = dy && s.weight >= 0 && node.input_needs_grad(static_cast<std::size_t>(s.weight));
  const bool need_b = dy && s.bias >= 0 && node.input_needs_grad(static_cast<std::size_t>(s.bias));
  const bool need_s = need_x || need_r;
  if (!need_s && !need_w && !need_b) return;
  const T* px = dy ? node.input_value(0).data() : nullptr;
  const T* pr = dy ? node.input_value(1).data() : nullptr;
  const T* pw = dy && need_s && s.weight >= 0 ? node.input_value(static_cast<std::size_t>(s.weight)).data() : nullptr;
  T* pdy = dy ? dy->data() : nullptr;
  T* pds = dsum ? dsum->data() : nullptr;
  // ds ends in `first`'s buffer (dsum's when there is one, else dy's); a second one for the other
  // input: dy's when both came, else a new array.
  Array<T>* first = dsum ? dsum : dy;
  Array<T> fresh;
  const bool both = need_x && need_r;
  if (both && !(dy && dsum)) fresh = empty_array<T>(node.input_shape(1), "add_layer_norm (backward)");
  Array<T>* second = both ? (dy && dsum ? dy : &fresh) : nullptr;
  T* p2 = second ? second->data() : nullptr;
  std::vector<double> dw(need_w ? pieces * D : 0, 0.0), db(need_b ? pieces * D : 0, 0.0);
  detail::parallel_for(pieces, 1, [&](std::size_t p0, std::size_t p1) {
    std::vector<T> scratch(pdy ? D : 0);
    for (std::size_t p = p0; p < p1; ++p)
      for (std::size_t r = s.rows * p / pieces; r < s.rows * (p + 1) / pieces; ++r) {
        const std::size_t o = r * D;
        if (pdy) {
          for (std::size_t j = 0; j < D; ++j) scratch[j] = px[o + j] + pr[o + j];
          backward_row(scratch.data(), pdy + o, pw, s.mean[r], s.rstd[r], D, need_s ? pdy + o : nullptr,
                       need_w ? dw.data() + p * D : nullptr, need_b ? db.data() + p * D : nullptr);
        }
        if (!need_s) continue;
        if (pdy && pds) {
          T* a = pds + o;
          T* b = pdy + o;
          if (p2)
            for (std::size_t j = 0; j < D; ++j) b[j] = a[j] = a[j] + b[j];
          else
            for (std::size_t j = 0; j < D; ++j) a[j] = a[j] + b[j];
        } else if (p2) {
          const T* a = (pds ? pds : pdy) + o;
          std::copy(a, a + D, p2 + o);
        }
      }
  });
  if (need_s) {
    Array<T>& g0 = *first;
    if (need_x) node.input(0).accumulate_grad(std::move(g0));
    if (need_r) node.input(1).accumulate_grad(std::move(both ? *second : g0));
  }
  const char* who = "add_layer_norm (backward)";
  if (need_w)
    node.input(static_cast<std::size_t>(s.weight)).accumulate_grad(sum_pieces(node, dw, pieces, D, s.weight, who));
  if (need_b)
    node.input(static_cast<std::size_t>(s.bias)).accumulate_grad(sum_pieces(node, db, pieces, D, s.bias, who));
}

// Under create_graph: the same gradients in differentiable ops (layer_norm's formula on s = x + r,
// then the add's: ds to both x and r). dy or dsum may be undefined (that output got no gradient).
template <class T>
std::vector<Tensor<T>> add_layer_norm_formula(const BackwardArgs<T>& args, const Tensor<T>& dy, const Tensor<T>& dsum,
                                              std::size_t normalized_dims, double eps, int weight, int bias) {
  const auto w = static_cast<std::size_t>(weight), b = static_cast<std::size_t>(bias);
  const bool need_x = args.needs(0), need_r = args.needs(1);
  const bool need_w = dy.defined() && weight >= 0 && args.needs(w);
  const bool need_b = dy.defined() && bias >= 0 && args.needs(b);
  std::vector<Tensor<T>> g(args.num_inputs());
  Tensor<T> ds;
  if (dy.defined())
    layer_norm_grads<T>(
        dy, normalized_dims, eps, [&] { return add(args.input(0), args.input(1)); }, [&] { return args.input(w); },
        weight >= 0, need_x || need_r ? &ds : nullptr, need_w ? &g[w] : nullptr, need_w ? args.input_shape(w) : Shape(),
        need_b ? &g[b] : nullptr, need_b ? args.input_shape(b) : Shape());
  if (dsum.defined()) ds = ds.defined() ? add(dsum, ds) : dsum;
  if (need_x) g[0] = ds;
  if (need_r) g[1] = ds;
  return g;
}

// The checks and the inputs list of layer_norm and both fused forms: `inputs` holds x (then r, for
// the fused forms); weight and bias are appended when defined. Fills s's shape fields and input
// indices. op names the caller in the errors.
template <class T>
std::vector<Tensor<T>> layer_norm_inputs(const char* op, std::vector<Tensor<T>> inputs, const Shape& normalized_shape,
                                         const Tensor<T>& weight, const Tensor<T>& bias, double eps,
                                         LayerNormSaved& s) {
  const Tensor<T>& x = inputs.front();
  const Shape sx = x.shape();
  const std::size_t nn = normalized_shape.size();
  XGRAD_CHECK(nn >= 1, op, ": expected normalized_shape to be at least 1-dimensional, got ", normalized_shape);
  XGRAD_CHECK(sx.size() >= nn && std::equal(normalized_shape.begin(), normalized_shape.end(), sx.end() - nn), op,
              ": expected input with trailing shape ", normalized_shape, ", got ", sx);
  if (weight.defined())
    XGRAD_CHECK(weight.shape() == normalized_shape, op, ": expected weight of shape ", normalized_shape, ", got ",
                weight.shape());
  if (bias.defined())
    XGRAD_CHECK(bias.shape() == normalized_shape, op, ": expected bias of shape ", normalized_shape, ", got ",
                bias.shape());
  XGRAD_CHECK(eps >= 0, op, ": eps must be non-negative, got ", eps);
  s.d = detail::numel(normalized_shape);
  s.rows = s.d == 0 ? 0 : x.numel() / s.d;
  s.mean.resize(s.rows);
  s.rstd.resize(s.rows);
  if (weight.defined()) {
    s.weight = static_cast<int>(inputs.size());
    inputs.push_back(weight);
  }
  if (bias.defined()) {
    s.bias = static_cast<int>(inputs.size());
    inputs.push_back(bias);
  }
  return inputs;
}

// Whether the fused op applies: x and r of one shape (no broadcasting), no trace recording.
template <class T>
bool fusable(const Tensor<T>& x, const Tensor<T>& r) {
  return !trace::active() && x.value().shape() == r.value().shape();
}

// x, y: (rows, D); w, b: (D) or null. Fills s.mean and s.rstd: (rows).
template <class T>
void layer_norm_forward(const T* px, const T* pw, const T* pb, T* py, LayerNormSaved& s, double eps) {
  const std::size_t D = s.d, pieces = row_pieces(s.rows, D);
  detail::parallel_for(pieces, 1, [&](std::size_t p0, std::size_t p1) {
    for (std::size_t r = s.rows * p0 / pieces; r < s.rows * p1 / pieces; ++r)
      std::tie(s.mean[r], s.rstd[r]) = forward_row(px + r * D, pw, pb, py + r * D, D, eps);
  });
}

// dy, x, dx: (rows, D); dw, db: (D), each summed over pieces of rows in double.
template <class T>
void layer_norm_backward(Node<T>& out, const LayerNormSaved& s) {
  const std::size_t D = s.d, pieces = row_pieces(s.rows, D);
  const bool need_x = out.input_needs_grad(0);
  const bool need_w = s.weight >= 0 && out.input_needs_grad(s.weight);
  const bool need_b = s.bias >= 0 && out.input_needs_grad(s.bias);
  const T* px = out.input_value(0).data();
  const T* pw = s.weight >= 0 && need_x ? out.input_value(s.weight).data() : nullptr;  // dx reads w
  const T* pdy = out.grad.data();
  Array<T> dx;
  if (need_x) dx = empty_array<T>(out.input_shape(0), "layer_norm (backward)");
  // dw, db per piece of rows: (pieces, D) each, summed over pieces below.
  std::vector<double> dw(need_w ? pieces * D : 0, 0.0), db(need_b ? pieces * D : 0, 0.0);
  detail::parallel_for(pieces, 1, [&](std::size_t p0, std::size_t p1) {
    for (std::size_t p = p0; p < p1; ++p)
      for (std::size_t r = s.rows * p / pieces; r < s.rows * (p + 1) / pieces; ++r)
        backward_row(px + r * D, pdy + r * D, pw, s.mean[r], s.rstd[r], D, need_x ? dx.data() + r * D : nullptr,
                     need_w ? dw.data() + p * D : nullptr, need_b ? db.data() + p * D : nullptr);
  });
  if (need_x) out.input(0).accumulate_grad(std::move(dx));
  const char* who = "layer_norm (backward)";
  if (need_w)
    out.input(static_cast<std::size_t>(s.weight)).accumulate_grad(sum_pieces(out, dw, pieces, D, s.weight, who));
  if (need_b) out.input(static_cast<std::size_t>(s.bias)).accumulate_grad(sum_pieces(out, db, pieces, D, s.bias, who));
}
}  // namespace

// y = (x - mean) * rstd * w + b, rstd = 1 / sqrt(var + eps), biased var over each row.
// https://pytorch.org/docs/stable/generated/torch.nn.functional.layer_norm.html
template <class T>
Tensor<T> layer_norm(const Tensor<T>& x, const ShapeArg& normalized_shape_arg, const Tensor<T>& weight,
                     const Tensor<T>& bias, double eps) {
  const OpScope op(OpKind::layer_norm);
  const Shape& normalized_shape = normalized_shape_arg.get(op.name());
  const Shape sx = x.shape();
  const std::size_t nn = normalized_shape.size();
  auto saved = std::make_shared<LayerNormSaved>();
  LayerNormSaved& s = *saved;
  std::vector<Tensor<T>> inputs = layer_norm_inputs<T>(op.name(), {x}, normalized_shape, weight, bias, eps, s);

  Array<T> y = empty_array<T>(sx, op.name());
  const T* px = x.value().data();
  const T* pw = weight.defined() ? weight.value().data() : nullptr;
  const T* pb = bias.defined() ? bias.value().data() : nullptr;
  T* py = y.data();
  layer_norm_forward(px, pw, pb, py, s, eps);

  XGRAD_OP_NOTE(op, {"normalized_dims", nn}, {"eps", eps}, {"has_weight", weight.defined()});
  return op.result<T>(
      std::move(y), std::move(inputs), [saved](Node<T>& out) { layer_norm_backward(out, *saved); },
      [nn, eps, w = s.weight, b = s.bias](const BackwardArgs<T>& args) {
        return layer_norm_formula(args, nn, eps, w, b);
      });
}

template <class T>
Tensor<T> add_layer_norm(const Tensor<T>& x, const Tensor<T>& r, const ShapeArg& normalized_shape_arg,
                         const Tensor<T>& weight, const Tensor<T>& bias, double eps) {
  if (!fusable(x, r)) return layer_norm(add(x, r), normalized_shape_arg, weight, bias, eps);
  XGRAD_PROFILE_OP("add_layer_norm");
  const Shape& normalized_shape = normalized_shape_arg.get("add_layer_norm");
  auto saved = std::make_shared<LayerNormSaved>();
  std::vector<Tensor<T>> inputs =
      layer_norm_inputs<T>("add_layer_norm", {x, r}, normalized_shape, weight, bias, eps, *saved);
  Array<T> y = empty_array<T>(x.value().shape(), "add_layer_norm");
  add_layer_norm_forward<T>(*saved, x.value().data(), r.value().data(),
                            weight.defined() ? weight.value().data() : nullptr,
                            bias.defined() ? bias.value().data() : nullptr, nullptr, y.data(), eps);
  return make_result<T>(
      "add_layer_norm", std::move(y), std::move(inputs),
      [saved](Node<T>& out) { add_layer_norm_backward<T>(out, *saved, &out.grad, nullptr); },  // takes dy over
      [nn = normalized_shape.size(), eps, w = saved->weight, b = saved->bias](const BackwardArgs<T>& args) {
        return add_layer_norm_formula<T>(args, args.grad(), Tensor<T>(), nn, eps, w, b);
      });
}

template <class T>
std::pair<Tensor<T>, Tensor<T>> add_layer_norm_with_sum(const Tensor<T>& x, const Tensor<T>& r,
                                                        const ShapeArg& normalized_shape_arg, const Tensor<T>& weight,
                                                        const Tensor<T>& bias, double eps) {
  if (!fusable(x, r)) {
    Tensor<T> sum = add(x, r);
    Tensor<T> y = layer_norm(sum, normalized_shape_arg, weight, bias, eps);
    return {std::move(sum), std::move(y)};
  }
  XGRAD_PROFILE_OP("add_layer_norm");
  const Shape& normalized_shape = normalized_shape_arg.get("add_layer_norm");
  auto saved = std::make_shared<LayerNormSaved>();
  std::vector<Tensor<T>> inputs =
      layer_norm_inputs<T>("add_layer_norm", {x, r}, normalized_shape, weight, bias, eps, *saved);
  Array<T> y = empty_array<T>(x.value().shape(), "add_layer_norm");
  Array<T> sum = empty_array<T>(x.value().shape(), "add_layer_norm");
  add_layer_norm_forward<T>(*saved, x.value().data(), r.value().data(),
                            weight.defined() ? weight.value().data() : nullptr,
                            bias.defined() ? bias.value().data() : nullptr, sum.data(), y.data(), eps);
  // The gradients of y (0) and s (1), parked by their nodes until the fused node runs (graph.hpp).
  auto slots = std::make_shared<detail::ParkedGradients<T>>(2);
  const Tensor<T> fused = make_result<T>(
      "add_layer_norm", Array<T>(T(0)), std::move(inputs),
      [saved, slots](Node<T>& node) {
        add_layer_norm_backward<T>(node, *saved, slots->has[0] ? &slots->grads[0] : nullptr,
                                   slots->has[1] ? &slots->grads[1] : nullptr);
        for (int k = 0; k < 2; ++k) {
          detail::recycle(slots->grads[k]);
          slots->has[k] = false;
        }
      },
      [slots, nn = normalized_shape.size(), eps, w = saved->weight, b = saved->bias](const BackwardArgs<T>& args) {
        const Tensor<T> dy = slots->has[0] ? std::move(slots->graphs[0]) : Tensor<T>();
        const Tensor<T> dsum = slots->has[1] ? std::move(slots->graphs[1]) : Tensor<T>();
        for (int k = 0; k < 2; ++k) {
          slots->graphs[k] = Tensor<T>();
          slots->has[k] = false;
        }
        return add_layer_norm_formula<T>(args, dy, dsum, nn, eps, w, b);
      });
  if (!fused.requires_grad()) return {Tensor<T>(std::move(sum)), Tensor<T>(std::move(y))};
  const auto output = [&slots, &fused](Array<T>&& value, std::size_t k) {
    auto [park, park_graph] = detail::park_gradient<T>(slots, k);
    return make_result<T>("add_layer_norm", std::move(value), {fused}, std::move(park), std::move(park_graph));
  };
  Tensor<T> y_out = output(std::move(y), 0);
  Tensor<T> sum_out = output(std::move(sum), 1);
  return {std::move(sum_out), std::move(y_out)};
}

#define XGRAD_INSTANTIATE(T)                                                                                       \
  template Tensor<T> layer_norm<T>(const Tensor<T>&, const ShapeArg&, const Tensor<T>&, const Tensor<T>&, double); \
  template Tensor<T> add_layer_norm<T>(const Tensor<T>&, const Tensor<T>&, const ShapeArg&, const Tensor<T>&,      \
                                       const Tensor<T>&, double);                                                  \
  template std::pair<Tensor<T>, Tensor<T>> add_layer_norm_with_sum<T>(                                             \
      const Tensor<T>&, const Tensor<T>&, const ShapeArg&, const Tensor<T>&, const Tensor<T>&, double);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad
