// Arithmetic and pointwise functions. Each forward computes a concrete array; its backward,
// right below, accumulates d(loss)/d(input) = d(loss)/d(out) * d(out)/d(input) into each input
// that requires grad. Broadcast operands get their gradient summed back with sum_to.

// First, so that its pragma covers xsimd wherever xtensor includes it (see simd.hpp).
#include <xgrad/backend/simd.hpp>
#include <xgrad/ops/gelu_kernel.hpp>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include <xgrad/ops/broadcast.hpp>
#include <xgrad/ops/op_scope.hpp>
#include <xgrad/ops/ops.hpp>
#include <xgrad/ops/silu_mul.hpp>
#include <xgrad/ops/sum_to.hpp>
#include <xgrad/backend/parallel.hpp>
#include <xgrad/backend/parallel_loops.hpp>

namespace xgrad {

namespace {
using detail::binary_map;

// y = f(x) elementwise. Split across the pool in blocks (backend/parallel_loops.hpp): serial below
// 64K elements. The pointwise backward below splits the same way.
template <class T, class F>
Array<T> unary_map(const char* op, const Array<T>& a, F f) {
  Array<T> out = empty_array<T>(a.shape(), op);
  const T* pa = a.data();
  T* po = out.data();
  detail::parallel_blocks(out.size(), [&](std::size_t i0, std::size_t i1) {
    for (std::size_t i = i0; i < i1; ++i) po[i] = f(pa[i]);
  });
  return out;
}

// What a pointwise derivative reads: the input x, the output y, both or neither. Only what it
// reads must be unchanged in place at backward time, as in PyTorch.
enum Saves : unsigned { kNone = 0, kX = 1, kY = 2, kXY = 3 };

// y = forward(x) elementwise, with its gradient written once: `dx(g, x, y)` is a generic
// expression (x, y read only where `saves` names them) that the backward kernel evaluates per
// element on scalars and, under create_graph, the formula evaluates once on Tensors with history.
//   tanh:  dx = [](auto g, auto, auto y) { return g * (1 - y * y); }
template <class T, class Fwd, class Dx>
Tensor<T> pointwise(const OpScope& op, const Tensor<T>& a, Saves saves, Fwd forward, Dx dx) {
  return op.result<T>(
      unary_map(op.name(), a.value(), forward), {a},
      [saves, dx](Node<T>& out) {
        const T* px = saves & kX ? out.input_value(0).data() : nullptr;
        const T* py = saves & kY ? out.output_value().data() : nullptr;
        Array<T> gx = std::move(out.grad);  // in place
        T* pgx = gx.data();
        detail::parallel_blocks(gx.size(), [&](std::size_t i0, std::size_t i1) {
          for (std::size_t i = i0; i < i1; ++i) pgx[i] = dx(pgx[i], px ? px[i] : T(0), py ? py[i] : T(0));
        });
        out.input(0).accumulate_grad(std::move(gx));
      },
      [saves, dx](const BackwardArgs<T>& args) {
        const Tensor<T> x = saves & kX ? args.input(0) : Tensor<T>();
        const Tensor<T> y = saves & kY ? args.output() : Tensor<T>();
        return std::vector<Tensor<T>>{dx(args.grad(), x, y)};
      });
}

// A step function's derivative in a generic gradient: f(x) per element, a constant (zero where it
// exists, so its own derivative is zero); on a Tensor, a tensor without history.
template <class T, class F, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
T step(T x, F f) {
  return f(x);
}
template <class T, class F>
Tensor<T> step(const Tensor<T>& x, F f) {
  return Tensor<T>(unary_map("derivative", x.value(), f));
}

// The logistic function on a scalar; never exponentiates a positive number (stable for large |x|).
template <class T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
T sigmoid(T x) {
  if (x >= 0) return 1 / (1 + std::exp(-x));
  const T e = std::exp(x);
  return e / (1 + e);
}

// silu(x) = x s, s = sigmoid(x); its gradient g dy/dx = g s (1 + x (1 - s)), written once for
// silu's and silu_mul's kernels (on scalars) and their formulas (on Tensors, create_graph). Both
// take s, so that silu_mul's backward, which needs both, exponentiates once.
const auto silu_of = [](auto x, auto s) { return x * s; };
const auto silu_grad = [](auto g, auto x, auto s) { return g * (s * (1 + x * (1 - s))); };

// sigmoid over contiguous data in xsimd batches (xsimd's exp agrees with the C library's to about
// 1 ulp): e = exp(-|x|), which never overflows, then s = 1 / (1 + e) for x >= 0 and e / (1 + e)
// below. The last n % W elements go through one zero-padded batch, so an element's bits do not
// depend on where it sits: silu and silu_mul, whatever their blocks, get the same s.
template <class T>
void sigmoid_simd(const T* x, T* s, std::size_t n) {
  using B = detail::simd_batch<T>;
  constexpr std::size_t W = B::size;
  const auto f = [](const B& v) {
    const B one(T(1)), e = xsimd::exp(-xsimd::abs(v));
    return xsimd::select(v >= B(T(0)), one / (one + e), e / (one + e));
  };
  std::size_t i = 0;
  for (; i + W <= n; i += W) f(B::load_unaligned(x + i)).store_unaligned(s + i);
  if (i < n) {  // the tail, zero-padded to one batch
    alignas(64) T xs[W] = {}, ys[W];
    std::copy(x + i, x + n, xs);
    f(B::load_aligned(xs)).store_aligned(ys);
    std::copy(ys, ys + (n - i), s + i);
  }
}

// f(i, s) for each i in [0, n) with s = sigmoid(x[i]) (sigmoid_simd): blocks over the pool
// (parallel_blocks), each in chunks of 256 whose s lie on the stack.
template <class T, class F>
void with_sigmoid(const T* x, std::size_t n, const F& f) {
  detail::parallel_blocks(n, [&](std::size_t i0, std::size_t i1) {
    constexpr std::size_t kChunk = 256;
    alignas(64) T s[kChunk];
    for (std::size_t c = i0; c < i1; c += kChunk) {
      const std::size_t len = std::min(kChunk, i1 - c);
      sigmoid_simd(x + c, s, len);
      for (std::size_t j = 0; j < len; ++j) f(c + j, s[j]);
    }
  });
}

// Both operands' gradients of a broadcasting binary op, under create_graph: da(dy), db(dy), each
// summed back to its operand's shape.
template <class T, class Da, class Db>
GradFormula<T> binary_formula(Da da, Db db) {
  return [da, db](const BackwardArgs<T>& args) {
    std::vector<Tensor<T>> g(2);
    if (args.needs(0)) g[0] = sum_to(da(args), args.input_shape(0));
    if (args.needs(1)) g[1] = sum_to(db(args), args.input_shape(1));
    return g;
  };
}

// gelu's derivative as differentiable ops (gelu_backward's own formula, below):
//   exact: gelu''(x) = phi(x) (2 - x^2)
//   tanh:  gelu''(x) = (1 - t^2) (u' - x t u'^2 + 3 c k x^2),  u' = k (1 + 3 c x^2)
template <class T>
Tensor<T> gelu_second_derivative(const Tensor<T>& x, bool tanh_form);

// gelu_kernel (gelu_kernel.hpp) over blocks of 4096 elements split across threads.
template <class T, bool kBackward>
void gelu_parallel(bool tanh_form, const T* x, const T* g, T* out, std::size_t n) {
  constexpr std::size_t kBlock = 4096;
  detail::parallel_for((n + kBlock - 1) / kBlock, 4, [&](std::size_t b0, std::size_t b1) {
    const std::size_t i = b0 * kBlock, len = std::min(b1 * kBlock, n) - i;
    detail::gelu_kernel<T, kBackward>(tanh_form, x + i, g ? g + i : nullptr, out + i, len);
  });
}

}  // namespace

// ---- binary ops --------------------------------------------------------------------------------

template <class T>
Tensor<T> add(const Tensor<T>& a, const Tensor<T>& b) {
  const OpScope op(OpKind::add);
  Array<T> y = binary_map(a.value(), b.value(), op.name(), [](T x, T z) { return x + z; });
  return op.result<T>(
      std::move(y), {a, b},
      [](Node<T>& out) {
        // y = a + b: da = dy, db = dy (summed over broadcast dims); the last use takes dy over.
        const bool both = out.input_needs_grad(0) && out.input_needs_grad(1);
        if (out.input_needs_grad(0))
          out.input(0).accumulate_grad(both ? sum_to(out.grad, out.input_shape(0))
                                            : sum_to(std::move(out.grad), out.input_shape(0)));
        if (out.input_needs_grad(1)) out.input(1).accumulate_grad(sum_to(std::move(out.grad), out.input_shape(1)));
      },
      binary_formula<T>([](const BackwardArgs<T>& a) { return a.grad(); },
                        [](const BackwardArgs<T>& a) { return a.grad(); }));
}

template <class T>
Tensor<T> sub(const Tensor<T>& a, const Tensor<T>& b) {
  const OpScope op(OpKind::sub);
  Array<T> y = binary_map(a.value(), b.value(), op.name(), [](T x, T z) { return x - z; });
  return op.result<T>(
      std::move(y), {a, b},
      [](Node<T>& out) {
        // y = a - b: da = dy, db = -dy; the last use takes dy over.
        const bool both = out.input_needs_grad(0) && out.input_needs_grad(1);
        if (out.input_needs_grad(0))
          out.input(0).accumulate_grad(both ? sum_to(out.grad, out.input_shape(0))
                                            : sum_to(std::move(out.grad), out.input_shape(0)));
        if (out.input_needs_grad(1)) {
          Array<T> g = sum_to(std::move(out.grad), out.input_shape(1));
          T* pg = g.data();
          detail::parallel_blocks(g.size(), [&](std::size_t i0, std::size_t i1) {
            for (std::size_t i = i0; i < i1; ++i) pg[i] = -pg[i];
          });
          out.input(1).accumulate_grad(std::move(g));
        }
      },
      binary_formula<T>([](const BackwardArgs<T>& a) { return a.grad(); },
                        [](const BackwardArgs<T>& a) { return neg(a.grad()); }));
}

template <class T>
Tensor<T> mul(const Tensor<T>& a, const Tensor<T>& b) {
  const OpScope op(OpKind::mul);
  Array<T> y = binary_map(a.value(), b.value(), op.name(), [](T x, T z) { return x * z; });
  return op.result<T>(
      std::move(y), {a, b},
      [name = op.name()](Node<T>& out) {
        // y = a * b: da = dy * b, db = dy * a
        for (std::size_t i = 0; i < 2; ++i) {
          if (!out.input_needs_grad(i)) continue;
          const Array<T>& other = out.input_value(1 - i);
          Array<T> g = binary_map(out.grad, other, name, [](T dy, T o) { return dy * o; });
          out.input(i).accumulate_grad(sum_to(std::move(g), out.input_shape(i)));
        }
      },
      binary_formula<T>([](const BackwardArgs<T>& a) { return mul(a.grad(), a.input(1)); },
                        [](const BackwardArgs<T>& a) { return mul(a.grad(), a.input(0)); }));
}

template <class T>
Tensor<T> div(const Tensor<T>& a, const Tensor<T>& b) {
  const OpScope op(OpKind::div);
  Array<T> y = binary_map(a.value(), b.value(), op.name(), [](T x, T z) { return x / z; });
  return op.result<T>(
      std::move(y), {a, b},
      [name = op.name()](Node<T>& out) {
        const Array<T>& bv = out.input_value(1);
        // y = a / b: da = dy / b
        if (out.input_needs_grad(0)) {
          Array<T> g = binary_map(out.grad, bv, name, [](T dy, T z) { return dy / z; });
          out.input(0).accumulate_grad(sum_to(std::move(g), out.input_shape(0)));
        }
        // db = -dy * a / b^2 = -dy * y / b
        if (out.input_needs_grad(1)) {
          Array<T> dy_y = binary_map(out.grad, out.output_value(), name, [](T dy, T q) { return -dy * q; });
          Array<T> g = binary_map(dy_y, bv, name, [](T v, T z) { return v / z; });
          out.input(1).accumulate_grad(sum_to(std::move(g), out.input_shape(1)));
        }
      },
      binary_formula<T>([](const BackwardArgs<T>& a) { return div(a.grad(), a.input(1)); },
                        [](const BackwardArgs<T>& a) {  // -dy a / b^2
                          const Tensor<T> b = a.input(1);
                          return neg(div(mul(a.grad(), a.input(0)), mul(b, b)));
                        }));
}

// ---- with a scalar: y = f(x) with the derivative dx(g, x, y) written once (see pointwise) ------

template <class T>
Tensor<T> add(const Tensor<T>& a, Scalar<T> s) {
  const OpScope op(OpKind::add);
  XGRAD_OP_NOTE(op, {"other", static_cast<double>(s)});
  return pointwise<T>(
      op, a, kNone, [s](T x) { return x + s; }, [](auto g, auto, auto) { return g; });
}

template <class T>
Tensor<T> mul(const Tensor<T>& a, Scalar<T> s) {
  const OpScope op(OpKind::mul);
  XGRAD_OP_NOTE(op, {"other", static_cast<double>(s)});
  return pointwise<T>(
      op, a, kNone, [s](T x) { return x * s; }, [s](auto g, auto, auto) { return g * s; });
}

template <class T>
Tensor<T> rsub(const Tensor<T>& a, Scalar<T> s) {
  const OpScope op(OpKind::rsub);
  XGRAD_OP_NOTE(op, {"other", static_cast<double>(s)});
  return pointwise<T>(
      op, a, kNone, [s](T x) { return s - x; }, [](auto g, auto, auto) { return -g; });
}

template <class T>
Tensor<T> rdiv(const Tensor<T>& a, Scalar<T> s) {
  const OpScope op(OpKind::rdiv);
  XGRAD_OP_NOTE(op, {"other", static_cast<double>(s)});
  // y = s / x: dy/dx = -s / x^2 = -y / x
  return pointwise<T>(
      op, a, kXY, [s](T x) { return s / x; }, [](auto g, auto x, auto y) { return -(g * y) / x; });
}

// ---- pointwise functions ----------------------------------------------------------------------

template <class T>
Tensor<T> neg(const Tensor<T>& a) {
  const OpScope op(OpKind::neg);
  return pointwise<T>(
      op, a, kNone, [](T x) { return -x; }, [](auto g, auto, auto) { return -g; });
}

template <class T>
Tensor<T> pow(const Tensor<T>& a, Scalar<T> p) {
  const OpScope op(OpKind::pow);
  XGRAD_OP_NOTE(op, {"exponent", static_cast<double>(p)});
  // y = x^p: dy/dx = p x^(p-1)
  if (p == T(2))
    return pointwise<T>(
        op, a, kX, [](T x) { return x * x; }, [](auto g, auto x, auto) { return g * (x * 2); });
  return pointwise<T>(
      op, a, kX, [p](T x) { return std::pow(x, p); },
      [p](auto g, auto x, auto) {
        using std::pow;
        return p == T(0) ? g * 0 : g * (pow(x, p - 1) * p);
      });
}

template <class T>
Tensor<T> exp(const Tensor<T>& a) {
  const OpScope op(OpKind::exp);
  return pointwise<T>(
      op, a, kY, [](T x) { return std::exp(x); }, [](auto g, auto, auto y) { return g * y; });
}

template <class T>
Tensor<T> log(const Tensor<T>& a) {
  const OpScope op(OpKind::log);
  return pointwise<T>(
      op, a, kX, [](T x) { return std::log(x); }, [](auto g, auto x, auto) { return g / x; });
}

template <class T>
Tensor<T> sqrt(const Tensor<T>& a) {
  const OpScope op(OpKind::sqrt);
  // y = sqrt(x): dy/dx = 1 / (2 y)
  return pointwise<T>(
      op, a, kY, [](T x) { return std::sqrt(x); }, [](auto g, auto, auto y) { return g / (y * 2); });
}

template <class T>
Tensor<T> abs(const Tensor<T>& a) {
  const OpScope op(OpKind::abs);
  const auto sign = [](T v) { return v > 0 ? T(1) : (v < 0 ? T(-1) : T(0)); };
  return pointwise<T>(
      op, a, kX, [](T x) { return std::abs(x); }, [sign](auto g, auto x, auto) { return g * step(x, sign); });
}

template <class T>
Tensor<T> tanh(const Tensor<T>& a) {
  const OpScope op(OpKind::tanh);
  return pointwise<T>(
      op, a, kY, [](T x) { return std::tanh(x); }, [](auto g, auto, auto y) { return g * (1 - y * y); });
}

template <class T>
Tensor<T> sigmoid(const Tensor<T>& a) {
  const OpScope op(OpKind::sigmoid);
  return pointwise<T>(
      op, a, kY, [](T x) { return sigmoid(x); }, [](auto g, auto, auto y) { return g * (y * (1 - y)); });
}

// x: (*) -> y: (*). Forward and backward one pass each over the pool's blocks, sigmoid in SIMD
// batches (with_sigmoid), as silu_mul's. Saves x.
template <class T>
Tensor<T> silu(const Tensor<T>& a) {
  const OpScope op(OpKind::silu);
  const T* px = a.value().data();
  Array<T> y = empty_array<T>(a.value().shape(), op.name());
  T* py = y.data();
  with_sigmoid(px, y.size(), [&](std::size_t i, T s) { py[i] = silu_of(px[i], s); });
  return op.result<T>(
      std::move(y), {a},
      [](Node<T>& out) {
        const T* x = out.input_value(0).data();
        Array<T> gx = std::move(out.grad);  // in place
        T* g = gx.data();
        with_sigmoid(x, gx.size(), [&](std::size_t i, T s) { g[i] = silu_grad(g[i], x[i], s); });
        out.input(0).accumulate_grad(std::move(gx));
      },
      [](const BackwardArgs<T>& args) {
        return std::vector<Tensor<T>>{silu_grad(args.grad(), args.input(0), sigmoid(args.input(0)))};
      });
}

// ---- silu_mul: silu(gate) * up in one pass (silu_mul.hpp) ------------------------------------------

namespace {

// gate, up, y: (n), contiguous;  y = silu(gate) * up. Blocks over the pool (with_sigmoid).
template <class T>
void silu_mul_forward(const T* gate, const T* up, T* y, std::size_t n) {
  with_sigmoid(gate, n, [&](std::size_t i, T s) { y[i] = silu_of(gate[i], s) * up[i]; });
}

// dy, gate, up: (n);  y = silu(gate) * up  (the unfused ops' backward, mul's then silu's):
//   d_gate = silu'(gate) (dy up)      d_up = dy silu(gate)
// A null d_gate or d_up is not computed; d_up may be dy (in place). Blocks as the forward.
template <class T>
void silu_mul_backward(const T* dy, const T* gate, const T* up, T* d_gate, T* d_up, std::size_t n) {
  with_sigmoid(gate, n, [&](std::size_t i, T s) {
    const T g = dy[i];
    if (d_gate != nullptr) d_gate[i] = silu_grad(g * up[i], gate[i], s);
    if (d_up != nullptr) d_up[i] = g * silu_of(gate[i], s);
  });
}

// Both gradients as differentiable ops (create_graph), the same formulas as the kernel's.
template <class T>
std::vector<Tensor<T>> silu_mul_formula(const BackwardArgs<T>& args) {
  std::vector<Tensor<T>> g(2);
  if (args.needs(0)) g[0] = silu_grad(mul(args.grad(), args.input(1)), args.input(0), sigmoid(args.input(0)));
  if (args.needs(1)) g[1] = mul(args.grad(), silu(args.input(0)));
  return g;
}

template <class T>
void silu_mul_backward_node(Node<T>& out) {
  const Array<T>& gate = out.input_value(0);
  const Array<T>& up = out.input_value(1);
  const bool need_gate = out.input_needs_grad(0), need_up = out.input_needs_grad(1);
  Array<T> dy = std::move(out.grad);  // becomes d_up in place
  Array<T> d_gate = need_gate ? empty_array<T>(gate.shape(), "silu_mul (backward)") : detail::no_array<T>();
  silu_mul_backward<T>(dy.data(), gate.data(), up.data(), need_gate ? d_gate.data() : nullptr,
                       need_up ? dy.data() : nullptr, dy.size());
  if (need_gate) out.input(0).accumulate_grad(std::move(d_gate));
  if (need_up) out.input(1).accumulate_grad(std::move(dy));
}

}  // namespace

// gate, up: (*), the same shape -> (*). One pass over the pool's blocks each way. Saves gate and up,
// as silu then mul would, but not silu(gate): one activation fewer.
template <class T>
Tensor<T> silu_mul(const Tensor<T>& gate, const Tensor<T>& up) {
  const Shape shape = shape_of(gate.value());
  XGRAD_CHECK(shape == shape_of(up.value()),
              "silu_mul: gate and up must have the same shape (no broadcasting), got gate ", shape, " and up ",
              shape_of(up.value()));
  if (trace::active()) return mul(silu(gate), up);  // what an exporter knows
  XGRAD_PROFILE_OP("silu_mul");
  Array<T> y = empty_array<T>(shape, "silu_mul");
  silu_mul_forward<T>(gate.value().data(), up.value().data(), y.data(), y.size());
  return make_result<T>("silu_mul", std::move(y), {gate, up}, silu_mul_backward_node<T>, silu_mul_formula<T>);
}
template Tensor<float> silu_mul<float>(const Tensor<float>&, const Tensor<float>&);
template Tensor<double> silu_mul<double>(const Tensor<double>&, const Tensor<double>&);

template <class T>
Tensor<T> relu(const Tensor<T>& a) {
  const OpScope op(OpKind::relu);
  const auto positive = [](T v) { return v > 0 ? T(1) : T(0); };
  return pointwise<T>(
      op, a, kX, [](T x) { return x > 0 ? x : T(0); },
      [positive](auto g, auto x, auto) { return g * step(x, positive); });
}

template <class T>
Tensor<T> gelu(const Tensor<T>& a, const std::string& approximate) {
  const OpScope op(OpKind::gelu);
  XGRAD_CHECK(approximate == "none" || approximate == "tanh", op.name(),
              ": approximate must be \"none\" or \"tanh\", got \"", approximate, "\"");
  const bool tanh_form = approximate == "tanh";
  XGRAD_OP_NOTE(op, {"approximate", approximate});
  const Array<T>& x = a.value();
  Array<T> y = empty_array<T>(x.shape(), op.name());
  gelu_parallel<T, false>(tanh_form, x.data(), nullptr, y.data(), y.size());
  return op.result<T>(
      std::move(y), {a},
      [tanh_form](Node<T>& out) {
        const Array<T>& xv = out.input_value(0);
        Array<T> gx = std::move(out.grad);  // dx = dy * dy/dx, in place
        gelu_parallel<T, true>(tanh_form, xv.data(), gx.data(), gx.data(), gx.size());
        out.input(0).accumulate_grad(std::move(gx));
      },
      [tanh_form](const BackwardArgs<T>& args) {
        return std::vector<Tensor<T>>{detail::gelu_backward(args.grad(), args.input(0), tanh_form)};
      });
}

namespace detail {
// gelu_backward(dy, x) = dy * gelu'(x). Its own derivatives: d/d(dy) = gelu'(x) (gelu_backward
// again), d/dx = dy * gelu''(x) (differentiable ops, gelu_second_derivative).
template <class T>
Tensor<T> gelu_backward(const Tensor<T>& dy, const Tensor<T>& x, bool tanh_form) {
  Array<T> gx = empty_array<T>(x.value().shape(), "gelu_backward");
  gelu_parallel<T, true>(tanh_form, x.value().data(), dy.value().data(), gx.data(), gx.size());
  GradFormula<T> formula = [tanh_form](const BackwardArgs<T>& args) {
    std::vector<Tensor<T>> g(2);
    if (args.needs(0)) g[0] = detail::gelu_backward(args.grad(), args.input(1), tanh_form);
    if (args.needs(1)) g[1] = mul(mul(args.grad(), args.input(0)), gelu_second_derivative(args.input(1), tanh_form));
    return g;
  };
  return make_result<T>("gelu_backward", std::move(gx), {dy, x}, backward_from_formula(formula), formula);
}
template Tensor<float> gelu_backward<float>(const Tensor<float>&, const Tensor<float>&, bool);
template Tensor<double> gelu_backward<double>(const Tensor<double>&, const Tensor<double>&, bool);
}  // namespace detail

namespace {

template <class T>
Tensor<T> gelu_second_derivative(const Tensor<T>& x, bool tanh_form) {
  const Tensor<T> x2 = mul(x, x);
  if (!tanh_form) {  // phi(x) (2 - x^2), phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
    const T inv_sqrt_2pi = T(0.5 * M_2_SQRTPI * M_SQRT1_2);
    return mul(mul(exp(mul(x2, T(-0.5))), inv_sqrt_2pi), rsub(x2, T(2)));
  }
  const T k = T(M_2_SQRTPI * M_SQRT1_2), c = T(0.044715);
  const Tensor<T> t = tanh(mul(add(x, mul(mul(x2, x), c)), k));
  const Tensor<T> du = mul(add(mul(x2, T(3) * c), T(1)), k);  // u' = k (1 + 3 c x^2)
  // (1 - t^2) (u' - x t u'^2 + 3 c k x^2)
  const Tensor<T> inner = add(sub(du, mul(mul(x, t), mul(du, du))), mul(x2, T(3) * c * k));
  return mul(rsub(mul(t, t), T(1)), inner);
}
}  // namespace

template <class T>
Tensor<T> clamp(const Tensor<T>& a, std::optional<Scalar<T>> min, std::optional<Scalar<T>> max) {
  const OpScope op(OpKind::clamp);
  XGRAD_CHECK(min || max, op.name(), ": at least one of min and max must be given");
  const T lo = min ? *min : -std::numeric_limits<T>::infinity();
  const T hi = max ? *max : std::numeric_limits<T>::infinity();
  XGRAD_OP_NOTE(op, {"min", static_cast<double>(lo)}, {"max", static_cast<double>(hi)});
  const auto inside = [lo, hi](T v) { return (v >= lo && v <= hi) ? T(1) : T(0); };
  return pointwise<T>(
      op, a, kX, [lo, hi](T x) { return x < lo ? lo : (x > hi ? hi : x); },
      [inside](auto g, auto x, auto) { return g * step(x, inside); });
}

#define XGRAD_INSTANTIATE(T)                                                                   \
  template Tensor<T> add<T>(const Tensor<T>&, const Tensor<T>&);                               \
  template Tensor<T> sub<T>(const Tensor<T>&, const Tensor<T>&);                               \
  template Tensor<T> mul<T>(const Tensor<T>&, const Tensor<T>&);                               \
  template Tensor<T> div<T>(const Tensor<T>&, const Tensor<T>&);                               \
  template Tensor<T> add<T>(const Tensor<T>&, Scalar<T>);                                      \
  template Tensor<T> mul<T>(const Tensor<T>&, Scalar<T>);                                      \
  template Tensor<T> rsub<T>(const Tensor<T>&, Scalar<T>);                                     \
  template Tensor<T> rdiv<T>(const Tensor<T>&, Scalar<T>);                                     \
  template Tensor<T> neg<T>(const Tensor<T>&);                                                 \
  template Tensor<T> pow<T>(const Tensor<T>&, Scalar<T>);                                      \
  template Tensor<T> exp<T>(const Tensor<T>&);                                                 \
  template Tensor<T> log<T>(const Tensor<T>&);                                                 \
  template Tensor<T> sqrt<T>(const Tensor<T>&);                                                \
  template Tensor<T> abs<T>(const Tensor<T>&);                                                 \
  template Tensor<T> tanh<T>(const Tensor<T>&);                                                \
  template Tensor<T> sigmoid<T>(const Tensor<T>&);                                             \
  template Tensor<T> silu<T>(const Tensor<T>&);                                                \
  template Tensor<T> relu<T>(const Tensor<T>&);                                                \
  template Tensor<T> gelu<T>(const Tensor<T>&, const std::string&);                            \
  template Tensor<T> clamp<T>(const Tensor<T>&, std::optional<Scalar<T>>, std::optional<Scalar<T>>);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad
