// A Linear with a LoRA adapter as one op (lora_linear.hpp).
#include <xgrad/ops/lora_linear.hpp>

#include <xgrad/backend/autocast.hpp>
#include <xgrad/backend/gemm.hpp>
#include <xgrad/backend/strided.hpp>
#include <xgrad/core/graph.hpp>
#include <xgrad/core/profiler.hpp>
#include <xgrad/core/trace.hpp>
#include <xgrad/ops/linear_impl.hpp>
#include <xgrad/ops/ops.hpp>

namespace xgrad::detail {

namespace {

constexpr const char* kName = "lora_linear";
constexpr const char* kBackward = "lora_linear (backward)";

// Where the adapter's inputs sit among the node's (x, W, b if defined, A, B), the sizes, and what
// the forward keeps: u = x A^T (rows, r) and sB = B * s (out, r), as linear(u, B * s) would.
template <class T>
struct LoraSaved {
  std::size_t rows = 0, in = 0, outf = 0, r = 0;
  bool bias = false;
  std::size_t a = 2, b = 3;  // the input indices of A and B
  Tensor<T> u, sB;           // constants (no grad)
};

// a * s, elementwise (mul's values: one rounding each).
template <class T>
Array<T> times(const Array<T>& a, T s, const char* who) {
  Array<T> out = empty_array<T>(a.shape(), who);
  const T* pa = a.data();
  T* po = out.data();
  for (std::size_t i = 0; i < a.size(); ++i) po[i] = pa[i] * s;
  return out;
}

template <class T>
Tensor<T> lora_linear_unfused(const Tensor<T>& x, const Tensor<T>& weight, const Tensor<T>& bias,
                              const Tensor<T>& lora_A, const Tensor<T>& lora_B, double scaling) {
  const Tensor<T> base = linear(x, weight, bias);  // in nn::LoraLayer's order
  const Tensor<T> u = linear(x, lora_A);
  return base + linear(u, lora_B * T(scaling));
}

// Checks A (r, in) and B (out, r) against x (*, in) and W (out, in).
template <class T>
void check_adapter(const Tensor<T>& weight, const Tensor<T>& lora_A, const Tensor<T>& lora_B) {
  const Shape sw = weight.shape(), sa = lora_A.shape(), sb = lora_B.shape();
  XGRAD_CHECK(sa.size() == 2 && sa[1] == sw[1], kName, ": expected lora_A of shape (r, ", sw[1], ") for weight ", sw,
              ", got ", sa);
  XGRAD_CHECK(sb.size() == 2 && sb[0] == sw[0] && sb[1] == sa[0], kName, ": expected lora_B of shape (", sw[0], ", ",
              sa[0], ") for weight ", sw, " and lora_A ", sa, ", got ", sb);
}

// Under create_graph, in differentiable ops (fp32 even under autocast, as linear's formula), with
// g (rows, out), x (rows, in), sB = B * s and du = g sB (rows, r):
// dx = g W + du A;  dW = g^T x;  db = g summed over the rows;  dA = du^T x;  dB = s * g^T (x A^T).
template <class T>
std::vector<Tensor<T>> lora_linear_formula(const BackwardArgs<T>& args, std::size_t ia, std::size_t ib, bool bias,
                                           T scale) {
  const AutocastGuard fp32(false);
  const Shape sx = args.input_shape(0);
  const auto rows = static_cast<std::int64_t>(numel(sx, 0, sx.size() - 1));
  const auto in = static_cast<std::int64_t>(sx.back());
  const auto outf = static_cast<std::int64_t>(args.input_shape(1)[0]);
  const Tensor<T> g = reshape(args.grad(), {rows, outf});
  const Tensor<T> x = reshape(args.input(0), {rows, in});
  const Tensor<T>& A = args.input(ia);
  const Tensor<T> du = matmul(g, args.input(ib) * scale);
  std::vector<Tensor<T>> grads(args.num_inputs());
  if (args.needs(0)) {
    std::vector<std::int64_t> shape(sx.begin(), sx.end());
    grads[0] = reshape(matmul(g, args.input(1)) + matmul(du, A), shape);
  }
  if (args.needs(1)) grads[1] = matmul(transpose(g, 0, 1), x);
  if (bias && args.needs(2)) grads[2] = sum_to(g, Shape{static_cast<std::size_t>(outf)});
  if (args.needs(ia)) grads[ia] = matmul(transpose(du, 0, 1), x);
  if (args.needs(ib)) grads[ib] = matmul(transpose(g, 0, 1), linear(x, A)) * scale;
  return grads;
}

// The gradients for g (rows, out), each only when its input needs it, with the gemms of the
// unfused ops (so the same bits): du = g sB (rows, r); dx = g W, then du A added by the gemm
// (beta = 1); dW = g^T x; db = g's rows summed in order; dA = du^T x; dB = (g^T u) * s.
template <class T>
void lora_linear_backward(Node<T>& out, const LoraSaved<T>& s, T scale) {
  const std::size_t rows = s.rows, in = s.in, outf = s.outf, r = s.r;
  const T* g = out.grad.data();
  const bool need_x = out.input_needs_grad(0), need_a = out.input_needs_grad(s.a);
  Array<T> du = no_array<T>();
  if (need_x || need_a) {  // (rows, out) (out, r)
    du = empty_array<T>(Shape{rows, r}, kBackward);
    gemm<T>(false, false, rows, r, outf, T(1), g, outf, s.sB.value().data(), r, T(0), du.data(), r);
  }
  if (need_x) {  // (rows, out) (out, in) + (rows, r) (r, in)
    Array<T> dx = empty_array<T>(out.input_shape(0), kBackward);
    gemm<T>(false, false, rows, in, outf, T(1), g, outf, out.input_value(1).data(), in, T(0), dx.data(), in);
    gemm<T>(false, false, rows, in, r, T(1), du.data(), r, out.input_value(s.a).data(), in, T(1), dx.data(), in);
    out.input(0).accumulate_grad(std::move(dx));
  }
  if (out.input_needs_grad(1)) {  // (out, rows) (rows, in)
    Array<T> dw = empty_array<T>(out.input_shape(1), kBackward);
    gemm<T>(true, false, outf, in, rows, T(1), g, outf, out.input_value(0).data(), in, T(0), dw.data(), in);
    out.input(1).accumulate_grad(std::move(dw));
  }
  if (s.bias && out.input_needs_grad(2)) {
    Array<T> db = empty_array<T>(Shape{outf}, kBackward);
    T* pdb = db.data();
    for_column_blocks(rows, outf, [&](std::size_t c0, std::size_t c1) { sum_rows(g, rows, outf, c0, c1, pdb); });
    out.input(2).accumulate_grad(std::move(db));
  }
  if (need_a) {  // (r, rows) (rows, in)
    Array<T> da = empty_array<T>(Shape{r, in}, kBackward);
    gemm<T>(true, false, r, in, rows, T(1), du.data(), r, out.input_value(0).data(), in, T(0), da.data(), in);
    out.input(s.a).accumulate_grad(std::move(da));
  }
  if (out.input_needs_grad(s.b)) {  // (out, rows) (rows, r), then times s as mul's backward
    Array<T> dsb = empty_array<T>(Shape{outf, r}, kBackward);
    gemm<T>(true, false, outf, r, rows, T(1), g, outf, s.u.value().data(), r, T(0), dsb.data(), r);
    out.input(s.b).accumulate_grad(times(dsb, scale, kBackward));
  }
}

}  // namespace

// x: (*, in), W: (out, in), b: (out), A: (r, in), B: (out, r) -> y: (*, out);
// u = x A^T (rows, r), sB = B * s, y = x W^T + b + u sB^T.
// Forward: u and v = u sB^T by linear's blocks; then linear's blocks of y, each block's v added
// right after its base gemm.
// Backward: lora_linear_backward's gemms.
template <class T>
Tensor<T> lora_linear(const Tensor<T>& x, const Tensor<T>& weight, const Tensor<T>& bias, const Tensor<T>& lora_A,
                      const Tensor<T>& lora_B, double scaling) {
  if (trace::active() || autocast_gemm<T>())  // what an exporter knows; bf16: linear's own casts and splits
    return lora_linear_unfused(x, weight, bias, lora_A, lora_B, scaling);
  XGRAD_PROFILE_OP("lora_linear");
  const Shape sy = linear_output_shape(kName, x, weight, bias);
  check_adapter(weight, lora_A, lora_B);
  const T scale = T(scaling);
  LoraSaved<T> s;
  s.in = weight.shape()[1];
  s.outf = weight.shape()[0];
  s.r = lora_A.shape()[0];
  const Shape sx = x.shape();
  s.rows = numel(sx, 0, sx.size() - 1);
  s.bias = bias.defined();
  s.a = s.bias ? 3 : 2;
  s.b = s.a + 1;

  Array<T> u = empty_array<T>(Shape{s.rows, s.r}, kName);
  linear_forward<T>(x, lora_A, Tensor<T>(), u.data(), nullptr);
  s.u = Tensor<T>(std::move(u));
  s.sB = Tensor<T>(times(lora_B.value(), scale, kName));
  // v = u sB^T as linear(u, B * s) computes it (the same gemm calls, so the same bits under either
  // gemm backend: OpenBLAS's results depend on how a product is cut), freed on return.
  Array<T> v = empty_array<T>(sy, kName);
  linear_forward<T>(s.u, s.sB, Tensor<T>(), v.data(), nullptr);
  Array<T> y = empty_array<T>(sy, kName);
  const T* pv = v.data();
  T* py = y.data();
  const std::size_t outf = s.outf;
  linear_forward<T>(x, weight, bias, py, [&](std::size_t r0, std::size_t r1, std::size_t c0, std::size_t c1) {
    for (std::size_t i = r0; i < r1; ++i)  // y += v on the block just computed, while it is in cache
      for (std::size_t j = c0; j < c1; ++j) py[i * outf + j] += pv[i * outf + j];
  });
  recycle(v);
  std::vector<Tensor<T>> inputs{x, weight};
  if (s.bias) inputs.push_back(bias);
  inputs.push_back(lora_A);
  inputs.push_back(lora_B);
  const std::size_t ia = s.a, ib = s.b;
  const bool has_bias = s.bias;
  return make_result<T>(
      kName, std::move(y), std::move(inputs), [s, scale](Node<T>& out) { lora_linear_backward(out, s, scale); },
      [ia, ib, has_bias, scale](const BackwardArgs<T>& args) {
        return lora_linear_formula(args, ia, ib, has_bias, scale);
      });
}

#define XGRAD_INSTANTIATE(T)                                                                                \
  template Tensor<T> lora_linear<T>(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, \
                                    const Tensor<T>&, double);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad::detail
