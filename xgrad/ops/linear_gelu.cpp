// The fused linear + GELU of the feed-forward block (linear_gelu.hpp).
// First, so that its pragma covers xsimd wherever xtensor includes it (see simd.hpp).
#include <xgrad/ops/gelu_kernel.hpp>

#include <xgrad/ops/linear_gelu.hpp>

#include <algorithm>
#include <memory>

#include <xgrad/backend/autocast.hpp>
#include <xgrad/backend/strided.hpp>
#include <xgrad/core/graph.hpp>
#include <xgrad/core/profiler.hpp>
#include <xgrad/core/trace.hpp>
#include <xgrad/ops/linear_impl.hpp>
#include <xgrad/ops/ops.hpp>

namespace xgrad::detail {

namespace {

// Under create_graph: h = linear(x, W, b) again, in differentiable ops (fp32 even under autocast, as
// linear's formula), dh = gelu_backward(dy, h), then linear's gradients of dh:
// dx = dh W;  dW = dh^T x over the rows;  db = dh summed over the rows.
template <class T>
std::vector<Tensor<T>> linear_gelu_formula(const BackwardArgs<T>& args, bool tanh_form) {
  const AutocastGuard fp32(false);
  const bool has_bias = args.num_inputs() > 2;
  const Tensor<T> h = linear(args.input(0), args.input(1), has_bias ? args.input(2) : Tensor<T>());
  const Tensor<T> dh = gelu_backward(args.grad(), h, tanh_form);
  const Shape sx = args.input_shape(0), sw = args.input_shape(1);
  const auto rows = static_cast<std::int64_t>(numel(sx, 0, sx.size() - 1));
  const auto in = static_cast<std::int64_t>(sw[1]), outf = static_cast<std::int64_t>(sw[0]);
  std::vector<Tensor<T>> g(args.num_inputs());
  if (args.needs(0)) g[0] = matmul(dh, args.input(1));
  if (args.needs(1)) g[1] = matmul(transpose(reshape(dh, {rows, outf}), 0, 1), reshape(args.input(0), {rows, in}));
  if (has_bias && args.needs(2)) g[2] = sum_to(dh, Shape{sw[0]});
  return g;
}

// dh = dy * gelu'(h) in place over column blocks of 64 (each column's rows in order, one
// thread), db = sum of dh over the rows; then dx = dh W and dW = dh^T x (linear's gemms).
template <class T>
void linear_gelu_backward(Node<T>& out, const LinearGemms& s, const Array<T>& h, bool tanh_form) {
  const std::size_t rows = s.rows, outf = s.outf;
  const bool db_needed = out.inputs.size() > 2 && out.input_needs_grad(2);
  Array<T> dh = std::move(out.grad);  // dh = dy * gelu'(h), in place
  Array<T> db = db_needed ? empty_array<T>({outf}, "linear_gelu (backward)") : no_array<T>();
  T* pdh = dh.data();
  T* pdb = db_needed ? db.data() : nullptr;
  const T* ph = h.data();
  for_column_blocks(rows, outf, [&](std::size_t c0, std::size_t c1) {
    if (pdb != nullptr) std::fill(pdb + c0, pdb + c1, T(0));
    for (std::size_t r = 0; r < rows; ++r) {
      T* d = pdh + r * outf;
      gelu_kernel<T, true>(tanh_form, ph + r * outf + c0, d + c0, d + c0, c1 - c0);
      if (pdb != nullptr)  // the rows in order, as linear's sum_rows: the same bits
        for (std::size_t j = c0; j < c1; ++j) pdb[j] += d[j];
    }
  });
  linear_backward_gemms(out, s, pdh);
  recycle(dh);  // the gradient's buffer, as the engine recycles the ones it drops
  if (db_needed) out.input(2).accumulate_grad(std::move(db));
}

}  // namespace

// x: (*, in), W: (out, in), b: (out) -> g: (*, out);  h = x W^T + b,  g = gelu(h).
// Forward: linear's blocks (16-row or 16-column tiles over the pool), each block's GELU right after
// its gemm.
// Backward: one pass over column blocks of 64 (each column's rows in order, one thread) computing
// dh = dy * gelu'(h) in place and db = sum of dh over the rows, then dx = dh W and dW = dh^T x.
template <class T>
Tensor<T> linear_gelu(const Tensor<T>& x, const Tensor<T>& weight, const Tensor<T>& bias,
                      const std::string& approximate) {
  XGRAD_CHECK(approximate == "none" || approximate == "tanh",
              "linear_gelu: approximate must be \"none\" or \"tanh\", got \"", approximate, "\"");
  if (trace::active()) return gelu(linear(x, weight, bias), approximate);  // what an exporter knows
  XGRAD_PROFILE_OP("linear_gelu");
  const bool tanh_form = approximate == "tanh";
  const Shape sy = linear_output_shape("linear_gelu", x, weight, bias);
  Array<T> h = empty_array<T>(sy, "linear_gelu");
  Array<T> g = empty_array<T>(sy, "linear_gelu");
  const std::size_t outf = sy.back();
  T* ph = h.data();
  T* pg = g.data();
  const LinearGemms s =
      linear_forward<T>(x, weight, bias, ph, [&](std::size_t r0, std::size_t r1, std::size_t c0, std::size_t c1) {
        if (c0 == 0 && c1 == outf) {  // whole rows: one contiguous run
          gelu_kernel<T, false>(tanh_form, ph + r0 * outf, nullptr, pg + r0 * outf, (r1 - r0) * outf);
          return;
        }
        for (std::size_t r = r0; r < r1; ++r)
          gelu_kernel<T, false>(tanh_form, ph + r * outf + c0, nullptr, pg + r * outf + c0, c1 - c0);
      });
  auto saved_h = std::make_shared<const RecycledArray<T>>(std::move(h));  // back to the cache with the node
  std::vector<Tensor<T>> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  return make_result<T>(
      "linear_gelu", std::move(g), std::move(inputs),
      [s, saved_h, tanh_form](Node<T>& out) { linear_gelu_backward(out, s, saved_h->get(), tanh_form); },
      [tanh_form](const BackwardArgs<T>& args) { return linear_gelu_formula(args, tanh_form); });
}

template Tensor<float> linear_gelu<float>(const Tensor<float>&, const Tensor<float>&, const Tensor<float>&,
                                          const std::string&);
template Tensor<double> linear_gelu<double>(const Tensor<double>&, const Tensor<double>&, const Tensor<double>&,
                                            const std::string&);

}  // namespace xgrad::detail
