// Arithmetic and pointwise functions. Each forward computes a concrete array; its backward,
// right below, accumulates d(loss)/d(input) = d(loss)/d(out) * d(out)/d(input) into each input
// that requires grad. Broadcast operands get their gradient summed back with sum_to.

// First, so that its pragma covers xsimd wherever xtensor includes it (see simd.hpp).
#include <xgrad/backend/simd.hpp>
#include <xgrad/ops/gelu_kernel.hpp>

#include <algorithm>
#include <cmath>

#include <xgrad/ops/broadcast.hpp>
#include <xgrad/ops/ops.hpp>
#include <xgrad/ops/sum_to.hpp>
#include <xgrad/core/profiler.hpp>
#include <xgrad/core/trace.hpp>
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

// What a pointwise backward reads: the input x, the output y, both or neither (then derivative
// gets zeros). Only what it reads must be unchanged in place at backward time, as in PyTorch.
enum Saves : unsigned { kNone = 0, kX = 1, kY = 2, kXY = 3 };

// Unary op helper: y = forward(x) elementwise; backward multiplies by derivative(x, y). Under
// create_graph, `formula(dy, x, y)` computes dx in differentiable ops (x, y: Tensors with history,
// undefined where `saves` does not name them).
template <class T, class Fwd, class Der, class Formula>
Tensor<T> pointwise(const char* op, const Tensor<T>& a, Saves saves, Fwd forward, Der derivative, Formula formula) {
  return make_result<T>(
      op, unary_map(op, a.value(), forward), {a},
      [saves, derivative](Node<T>& out) {
        const T* px = saves & kX ? out.input_value(0).data() : nullptr;
        const T* py = saves & kY ? out.output_value().data() : nullptr;
        Array<T> gx = std::move(out.grad);  // dx = dy * dy/dx, in place
        T* pgx = gx.data();
        detail::parallel_blocks(gx.size(), [&](std::size_t i0, std::size_t i1) {
          for (std::size_t i = i0; i < i1; ++i) pgx[i] = pgx[i] * derivative(px ? px[i] : T(0), py ? py[i] : T(0));
        });
        out.input(0).accumulate_grad(std::move(gx));
      },
      [saves, formula](const BackwardArgs<T>& args) {
        const Tensor<T> x = saves & kX ? args.input(0) : Tensor<T>();
        const Tensor<T> y = saves & kY ? args.output() : Tensor<T>();
        return std::vector<Tensor<T>>{formula(args.grad(), x, y)};
      });
}

// dy/dx as a constant tensor (a step function's derivative: zero where it exists, so its own
// derivative is zero): derivative(x) at every element of x.
template <class T, class Der>
Tensor<T> constant_derivative(const Tensor<T>& x, Der derivative) {
  return Tensor<T>(unary_map("derivative", x.value(), derivative));
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
  XGRAD_PROFILE_OP("add");
  Array<T> y = binary_map(a.value(), b.value(), "add", [](T x, T z) { return x + z; });
  return make_result<T>(
      "add", std::move(y), {a, b},
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
  XGRAD_PROFILE_OP("sub");
  Array<T> y = binary_map(a.value(), b.value(), "sub", [](T x, T z) { return x - z; });
  return make_result<T>(
      "sub", std::move(y), {a, b},
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
  XGRAD_PROFILE_OP("mul");
  Array<T> y = binary_map(a.value(), b.value(), "mul", [](T x, T z) { return x * z; });
  return make_result<T>(
      "mul", std::move(y), {a, b},
      [](Node<T>& out) {
        // y = a * b: da = dy * b, db = dy * a
        for (std::size_t i = 0; i < 2; ++i) {
          if (!out.input_needs_grad(i)) continue;
          const Array<T>& other = out.input_value(1 - i);
          Array<T> g = binary_map(out.grad, other, "mul", [](T dy, T o) { return dy * o; });
          out.input(i).accumulate_grad(sum_to(std::move(g), out.input_shape(i)));
        }
      },
      binary_formula<T>([](const BackwardArgs<T>& a) { return mul(a.grad(), a.input(1)); },
                        [](const BackwardArgs<T>& a) { return mul(a.grad(), a.input(0)); }));
}

template <class T>
Tensor<T> div(const Tensor<T>& a, const Tensor<T>& b) {
  XGRAD_PROFILE_OP("div");
  Array<T> y = binary_map(a.value(), b.value(), "div", [](T x, T z) { return x / z; });
  return make_result<T>(
      "div", std::move(y), {a, b},
      [](Node<T>& out) {
        const Array<T>& bv = out.input_value(1);
        // y = a / b: da = dy / b
        if (out.input_needs_grad(0)) {
          Array<T> g = binary_map(out.grad, bv, "div", [](T dy, T z) { return dy / z; });
          out.input(0).accumulate_grad(sum_to(std::move(g), out.input_shape(0)));
        }
        // db = -dy * a / b^2 = -dy * y / b
        if (out.input_needs_grad(1)) {
          Array<T> dy_y = binary_map(out.grad, out.output_value(), "div", [](T dy, T q) { return -dy * q; });
          Array<T> g = binary_map(dy_y, bv, "div", [](T v, T z) { return v / z; });
          out.input(1).accumulate_grad(sum_to(std::move(g), out.input_shape(1)));
        }
      },
      binary_formula<T>([](const BackwardArgs<T>& a) { return div(a.grad(), a.input(1)); },
                        [](const BackwardArgs<T>& a) {  // -dy a / b^2
                          const Tensor<T> b = a.input(1);
                          return neg(div(mul(a.grad(), a.input(0)), mul(b, b)));
                        }));
}

// ---- with a scalar ----------------------------------------------------------------------------

template <class T>
Tensor<T> add(const Tensor<T>& a, Scalar<T> s) {
  XGRAD_PROFILE_OP("add");
  XGRAD_TRACE_NOTE("add", {"other", static_cast<double>(s)});
  return pointwise<T>(
      "add", a, kNone, [s](T x) { return x + s; }, [](T, T) { return T(1); },
      [](const Tensor<T>& g, const Tensor<T>&, const Tensor<T>&) { return g; });
}

template <class T>
Tensor<T> mul(const Tensor<T>& a, Scalar<T> s) {
  XGRAD_PROFILE_OP("mul");
  XGRAD_TRACE_NOTE("mul", {"other", static_cast<double>(s)});
  return pointwise<T>(
      "mul", a, kNone, [s](T x) { return x * s; }, [s](T, T) { return s; },
      [s](const Tensor<T>& g, const Tensor<T>&, const Tensor<T>&) { return mul(g, s); });
}

template <class T>
Tensor<T> rsub(const Tensor<T>& a, Scalar<T> s) {
  XGRAD_PROFILE_OP("rsub");
  XGRAD_TRACE_NOTE("rsub", {"other", static_cast<double>(s)});
  return pointwise<T>(
      "rsub", a, kNone, [s](T x) { return s - x; }, [](T, T) { return T(-1); },
      [](const Tensor<T>& g, const Tensor<T>&, const Tensor<T>&) { return neg(g); });
}

template <class T>
Tensor<T> rdiv(const Tensor<T>& a, Scalar<T> s) {
  XGRAD_PROFILE_OP("rdiv");
  XGRAD_TRACE_NOTE("rdiv", {"other", static_cast<double>(s)});
  // y = s / x: dy/dx = -s / x^2 = -y / x
  return pointwise<T>(
      "rdiv", a, kXY, [s](T x) { return s / x; }, [](T x, T y) { return -y / x; },
      [](const Tensor<T>& g, const Tensor<T>& x, const Tensor<T>& y) { return neg(div(mul(g, y), x)); });
}

// ---- pointwise functions ----------------------------------------------------------------------

template <class T>
Tensor<T> neg(const Tensor<T>& a) {
  XGRAD_PROFILE_OP("neg");
  return pointwise<T>(
      "neg", a, kNone, [](T x) { return -x; }, [](T, T) { return T(-1); },
      [](const Tensor<T>& g, const Tensor<T>&, const Tensor<T>&) { return neg(g); });
}

template <class T>
Tensor<T> pow(const Tensor<T>& a, Scalar<T> p) {
  XGRAD_PROFILE_OP("pow");
  XGRAD_TRACE_NOTE("pow", {"exponent", static_cast<double>(p)});
  // y = x^p: dy/dx = p x^(p-1)
  if (p == T(2))
    return pointwise<T>(
        "pow", a, kX, [](T x) { return x * x; }, [](T x, T) { return 2 * x; },
        [](const Tensor<T>& g, const Tensor<T>& x, const Tensor<T>&) { return mul(g, mul(x, Scalar<T>(2))); });
  return pointwise<T>(
      "pow", a, kX, [p](T x) { return std::pow(x, p); },
      [p](T x, T) { return p == T(0) ? T(0) : p * std::pow(x, p - 1); },
      [p](const Tensor<T>& g, const Tensor<T>& x, const Tensor<T>&) {
        return p == T(0) ? mul(g, Scalar<T>(0)) : mul(g, mul(pow(x, p - 1), p));
      });
}

template <class T>
Tensor<T> exp(const Tensor<T>& a) {
  XGRAD_PROFILE_OP("exp");
  return pointwise<T>(
      "exp", a, kY, [](T x) { return std::exp(x); }, [](T, T y) { return y; },
      [](const Tensor<T>& g, const Tensor<T>&, const Tensor<T>& y) { return mul(g, y); });
}

template <class T>
Tensor<T> log(const Tensor<T>& a) {
  XGRAD_PROFILE_OP("log");
  return pointwise<T>(
      "log", a, kX, [](T x) { return std::log(x); }, [](T x, T) { return 1 / x; },
      [](const Tensor<T>& g, const Tensor<T>& x, const Tensor<T>&) { return div(g, x); });
}

template <class T>
Tensor<T> sqrt(const Tensor<T>& a) {
  XGRAD_PROFILE_OP("sqrt");
  // y = sqrt(x): dy/dx = 1 / (2 y)
  return pointwise<T>(
      "sqrt", a, kY, [](T x) { return std::sqrt(x); }, [](T, T y) { return T(0.5) / y; },
      [](const Tensor<T>& g, const Tensor<T>&, const Tensor<T>& y) { return div(g, mul(y, Scalar<T>(2))); });
}

template <class T>
Tensor<T> abs(const Tensor<T>& a) {
  XGRAD_PROFILE_OP("abs");
  return pointwise<T>(
      "abs", a, kX, [](T x) { return std::abs(x); }, [](T x, T) { return x > 0 ? T(1) : (x < 0 ? T(-1) : T(0)); },
      [](const Tensor<T>& g, const Tensor<T>& x, const Tensor<T>&) {
        return mul(g, constant_derivative(x, [](T v) { return v > 0 ? T(1) : (v < 0 ? T(-1) : T(0)); }));
      });
}

template <class T>
Tensor<T> tanh(const Tensor<T>& a) {
  XGRAD_PROFILE_OP("tanh");
  return pointwise<T>(
      "tanh", a, kY, [](T x) { return std::tanh(x); }, [](T, T y) { return 1 - y * y; },
      [](const Tensor<T>& g, const Tensor<T>&, const Tensor<T>& y) { return mul(g, rsub(mul(y, y), Scalar<T>(1))); });
}

template <class T>
Tensor<T> sigmoid(const Tensor<T>& a) {
  XGRAD_PROFILE_OP("sigmoid");
  // Stable for large |x|: never exponentiates a positive number.
  return pointwise<T>(
      "sigmoid", a, kY,
      [](T x) {
        if (x >= 0) return 1 / (1 + std::exp(-x));
        const T e = std::exp(x);
        return e / (1 + e);
      },
      [](T, T y) { return y * (1 - y); },
      [](const Tensor<T>& g, const Tensor<T>&, const Tensor<T>& y) { return mul(g, mul(y, rsub(y, Scalar<T>(1)))); });
}

template <class T>
Tensor<T> silu(const Tensor<T>& a) {
  XGRAD_PROFILE_OP("silu");
  // y = x s with s = sigmoid(x): dy/dx = s (1 + x (1 - s)). s never exponentiates a positive number.
  const auto s = [](T x) {
    if (x >= 0) return 1 / (1 + std::exp(-x));
    const T e = std::exp(x);
    return e / (1 + e);
  };
  return pointwise<T>(
      "silu", a, kX, [s](T x) { return x * s(x); },
      [s](T x, T) {
        const T sx = s(x);
        return sx * (1 + x * (1 - sx));
      },
      [](const Tensor<T>& g, const Tensor<T>& x, const Tensor<T>&) {
        const Tensor<T> sx = sigmoid(x);
        return mul(g, mul(sx, add(mul(x, rsub(sx, Scalar<T>(1))), Scalar<T>(1))));
      });
}

template <class T>
Tensor<T> relu(const Tensor<T>& a) {
  XGRAD_PROFILE_OP("relu");
  return pointwise<T>(
      "relu", a, kX, [](T x) { return x > 0 ? x : T(0); }, [](T x, T) { return x > 0 ? T(1) : T(0); },
      [](const Tensor<T>& g, const Tensor<T>& x, const Tensor<T>&) {
        return mul(g, constant_derivative(x, [](T v) { return v > 0 ? T(1) : T(0); }));
      });
}

template <class T>
Tensor<T> gelu(const Tensor<T>& a, const std::string& approximate) {
  XGRAD_PROFILE_OP("gelu");
  XGRAD_CHECK(approximate == "none" || approximate == "tanh",
              "gelu: approximate must be \"none\" or \"tanh\", got \"", approximate, "\"");
  const bool tanh_form = approximate == "tanh";
  XGRAD_TRACE_NOTE("gelu", {"approximate", approximate});
  const Array<T>& x = a.value();
  Array<T> y = empty_array<T>(x.shape(), "gelu");
  gelu_parallel<T, false>(tanh_form, x.data(), nullptr, y.data(), y.size());
  return make_result<T>(
      "gelu", std::move(y), {a},
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
  XGRAD_PROFILE_OP("clamp");
  XGRAD_CHECK(min || max, "clamp: at least one of min and max must be given");
  const T lo = min ? *min : -std::numeric_limits<T>::infinity();
  const T hi = max ? *max : std::numeric_limits<T>::infinity();
  XGRAD_TRACE_NOTE("clamp", {"min", static_cast<double>(lo)}, {"max", static_cast<double>(hi)});
  return pointwise<T>(
      "clamp", a, kX, [lo, hi](T x) { return x < lo ? lo : (x > hi ? hi : x); },
      [lo, hi](T x, T) { return (x >= lo && x <= hi) ? T(1) : T(0); },
      [lo, hi](const Tensor<T>& g, const Tensor<T>& x, const Tensor<T>&) {
        return mul(g, constant_derivative(x, [lo, hi](T v) { return (v >= lo && v <= hi) ? T(1) : T(0); }));
      });
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
