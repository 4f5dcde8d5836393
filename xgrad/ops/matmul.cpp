// matmul and linear. Every product here is a gemm call on contiguous row-major buffers; transposes are passed as
// flags and batches are loops over matrix offsets, so nothing is copied into a transposed or
// broadcast layout, forward or backward. matmul and linear built under an AutocastGuard run every
// float product, forward and backward, through gemm_bf16 (autocast.hpp, bf16.hpp).
#include <algorithm>
#include <climits>
#include <cstring>

#include <xgrad/backend/autocast.hpp>
#include <xgrad/backend/gemm.hpp>
#include <xgrad/ops/op_scope.hpp>
#include <xgrad/ops/ops.hpp>
#include <xgrad/backend/parallel.hpp>
#include <xgrad/backend/parallel_loops.hpp>
#include <xgrad/backend/strided.hpp>
#include <xgrad/ops/linear_impl.hpp>

namespace xgrad {

namespace {

using detail::gemm;
using detail::gemm_autocast;

// How a batched product lays out: A (batch_a..., m, k) @ B (batch_b..., k, n) -> C (batch..., m, n)
// with the batch dims broadcast. a_off[i] / b_off[i] index the matrix of A / B that output matrix i
// reads (in units of whole matrices).
struct MatmulPlan {
  std::size_t m = 0, n = 0, k = 0;
  std::size_t batch = 1;           // number of output matrices
  std::size_t a_count = 1, b_count = 1;  // number of stored A / B matrices
  std::vector<std::size_t> a_off, b_off;
  Shape out_shape;                 // with the dims added to 1-D operands removed
};

MatmulPlan plan_matmul(const Shape& sa, const Shape& sb) {
  XGRAD_CHECK(!sa.empty() && !sb.empty(), "matmul: both arguments need at least 1 dimension, got ", sa,
              " @ ", sb);
  // 1-D operands: a (k) -> (1, k), b (k) -> (k, 1); same data, no copy.
  Shape a = sa.size() == 1 ? Shape{1, sa[0]} : sa;
  Shape b = sb.size() == 1 ? Shape{sb[0], 1} : sb;
  MatmulPlan p;
  p.m = a[a.size() - 2];
  p.k = a[a.size() - 1];
  p.n = b[b.size() - 1];
  XGRAD_CHECK(b[b.size() - 2] == p.k, "matmul: ", sa, " @ ", sb, ": inner dimensions ", p.k, " and ",
              b[b.size() - 2], " differ");

  const Shape ba(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  const std::size_t nd = std::max(ba.size(), bb.size());
  // Batch dims left-padded with 1s to a common rank, then broadcast.
  Shape pa(nd - ba.size(), 1), pb(nd - bb.size(), 1);
  pa.insert(pa.end(), ba.begin(), ba.end());
  pb.insert(pb.end(), bb.begin(), bb.end());
  Shape batch(nd);
  for (std::size_t i = 0; i < nd; ++i) {
    XGRAD_CHECK(pa[i] == pb[i] || pa[i] == 1 || pb[i] == 1, "matmul: ", sa, " @ ", sb, ": batch dimensions ", ba,
                " and ", bb, " cannot be broadcast together");
    batch[i] = pa[i] == 1 ? pb[i] : pa[i];
  }
  // Matrix strides of A and B inside the broadcast batch: 0 where an operand is broadcast.
  std::vector<std::size_t> sa_str(nd, 0), sb_str(nd, 0);
  for (std::size_t i = nd, st_a = 1, st_b = 1; i-- > 0;) {
    if (pa[i] != 1) sa_str[i] = st_a;
    if (pb[i] != 1) sb_str[i] = st_b;
    st_a *= pa[i];
    st_b *= pb[i];
  }
  p.batch = detail::numel(batch);
  p.a_count = detail::numel(ba);
  p.b_count = detail::numel(bb);
  p.a_off.resize(p.batch);
  p.b_off.resize(p.batch);
  detail::for_each_index(batch, sa_str, sb_str, [&](std::size_t i, std::size_t oa, std::size_t ob) {
    p.a_off[i] = oa;
    p.b_off[i] = ob;
  });
  p.out_shape = batch;
  if (sa.size() > 1) p.out_shape.push_back(p.m);
  if (sb.size() > 1) p.out_shape.push_back(p.n);
  return p;
}

// A zero-initialized array when several gemms accumulate into it (beta = 1), else uninitialized.
template <class T>
Array<T> grad_buffer(const Shape& shape, bool accumulate) {
  if (accumulate) return full_array<T>(shape, T(0), "matmul (backward)");
  return empty_array<T>(shape, "matmul (backward)");
}

// Under create_graph (matmul's GradFormula): dA = dC B^T and dB = A^T dC in differentiable ops
// (matmul again, transpose), each summed back (sum_to) over the batch dims its operand was
// broadcast along. A 1-D operand is the matrix the forward made of it, a: (1, k), b: (k, 1), and
// dC gets back the dims the forward dropped. These products run in fp32 even under autocast: the
// forward's bf16 choice is recorded for the first-order kernels only.
template <class T>
std::vector<Tensor<T>> matmul_formula(const BackwardArgs<T>& args) {
  const AutocastGuard fp32(false);
  const Shape sa = args.input_shape(0), sb = args.input_shape(1);
  const auto dims = [](const Shape& s) { return std::vector<std::int64_t>(s.begin(), s.end()); };
  const Shape ma = sa.size() == 1 ? Shape{1, sa[0]} : sa;  // A as a (batch of) matrices
  const Shape mb = sb.size() == 1 ? Shape{sb[0], 1} : sb;
  Shape full = args.grad().shape();  // dC: (batch..., m, n)
  if (sb.size() == 1) full.push_back(1);
  if (sa.size() == 1) full.insert(full.end() - 1, 1);
  const Tensor<T> dc = reshape(args.grad(), dims(full));
  std::vector<Tensor<T>> g(2);
  if (args.needs(0)) {
    const Tensor<T> b = reshape(args.input(1), dims(mb));
    g[0] = reshape(sum_to(matmul(dc, transpose(b, -1, -2)), ma), dims(sa));
  }
  if (args.needs(1)) {
    const Tensor<T> a = reshape(args.input(0), dims(ma));
    g[1] = reshape(sum_to(matmul(transpose(a, -1, -2), dc), mb), dims(sb));
  }
  return g;
}

}  // namespace

// ---- matmul --------------------------------------------------------------------------------

namespace {

// A: (a_count, m, k), B: (b_count, k, n) -> C_i = A_a(i) B_b(i): (batch, m, n). When B is one
// matrix shared by every batch, the batch folds into rows: (batch m, k) @ (k, n), one gemm.
template <class T>
void matmul_forward(const MatmulPlan& p, bool bf16, const T* pa, const T* pb, T* pc) {
  const std::size_t mk = p.m * p.k, kn = p.k * p.n, mn = p.m * p.n;
  if (p.b_count == 1 && p.a_count == p.batch) {
    gemm_autocast<T>(bf16, false, false, p.batch * p.m, p.n, p.k, T(1), pa, p.k, pb, p.n, T(0), pc, p.n);
    return;
  }
  for (std::size_t i = 0; i < p.batch; ++i)
    gemm_autocast<T>(bf16, false, false, p.m, p.n, p.k, T(1), pa + p.a_off[i] * mk, p.k, pb + p.b_off[i] * kn, p.n,
                     T(0), pc + i * mn, p.n);
}

// dC: (batch, m, n), B -> dA = dC B^T: (m, n) (n, k) per batch, summed over the batches that share
// one A matrix (`shared`: da accumulates, beta = 1).
template <class T>
void matmul_backward_a(const MatmulPlan& p, bool bf16, const T* dc, const T* pb, bool shared, T* da) {
  const std::size_t mk = p.m * p.k, kn = p.k * p.n, mn = p.m * p.n;
  if (p.b_count == 1 && p.a_count == p.batch) {
    gemm_autocast<T>(bf16, false, true, p.batch * p.m, p.k, p.n, T(1), dc, p.n, pb, p.n, T(0), da, p.k);
    return;
  }
  for (std::size_t i = 0; i < p.batch; ++i)
    gemm_autocast<T>(bf16, false, true, p.m, p.k, p.n, T(1), dc + i * mn, p.n, pb + p.b_off[i] * kn, p.n,
                     shared ? T(1) : T(0), da + p.a_off[i] * mk, p.k);
}

// dC, A -> dB = A^T dC: (k, m) (m, n) per batch, summed over the batches that share one B matrix.
// Folded: sum_i A_i^T dC_i = [A_0; A_1; ...]^T [dC_0; dC_1; ...], one gemm over the stacked rows.
template <class T>
void matmul_backward_b(const MatmulPlan& p, bool bf16, const T* dc, const T* pa, bool shared, T* db) {
  const std::size_t mk = p.m * p.k, kn = p.k * p.n, mn = p.m * p.n;
  if (p.b_count == 1 && p.a_count == p.batch) {
    gemm_autocast<T>(bf16, true, false, p.k, p.n, p.batch * p.m, T(1), pa, p.k, dc, p.n, T(0), db, p.n);
    return;
  }
  for (std::size_t i = 0; i < p.batch; ++i)
    gemm_autocast<T>(bf16, true, false, p.k, p.n, p.m, T(1), pa + p.a_off[i] * mk, p.k, dc + i * mn, p.n,
                     shared ? T(1) : T(0), db + p.b_off[i] * kn, p.n);
}

}  // namespace

// C_i = A_a(i) B_b(i) for each output matrix i (batch dims broadcast).
// https://pytorch.org/docs/stable/generated/torch.matmul.html
template <class T>
Tensor<T> matmul(const Tensor<T>& a, const Tensor<T>& b) {
  const OpScope op(OpKind::matmul);
  auto plan = std::make_shared<const MatmulPlan>(plan_matmul(a.shape(), b.shape()));
  const bool bf16 = detail::autocast_gemm<T>();  // recorded for the backward (autocast.hpp)
  Array<T> c = empty_array<T>(plan->out_shape, op.name());
  matmul_forward(*plan, bf16, a.value().data(), b.value().data(), c.data());
  return op.result<T>(
      std::move(c), {a, b},
      [plan, bf16](Node<T>& out) {
        const MatmulPlan& p = *plan;
        if (out.input_needs_grad(0)) {
          const bool shared = p.a_count != p.batch;  // (or batch = 0: no gemm runs)
          Array<T> da = grad_buffer<T>(out.input_shape(0), shared);
          matmul_backward_a(p, bf16, out.grad.data(), out.input_value(1).data(), shared, da.data());
          out.input(0).accumulate_grad(std::move(da));
        }
        if (out.input_needs_grad(1)) {
          const bool shared = p.b_count != p.batch;
          Array<T> db = grad_buffer<T>(out.input_shape(1), shared);
          matmul_backward_b(p, bf16, out.grad.data(), out.input_value(0).data(), shared, db.data());
          out.input(1).accumulate_grad(std::move(db));
        }
      },
      matmul_formula<T>);
}

// ---- linear --------------------------------------------------------------------------------

namespace {

// One of linear's three products, C = A B (+ beta C) with the flags given: on the bf16 operands
// rounded once (ab, bb) when `packed`, else gemm_autocast on the float operands (a, b).
template <class T>
void linear_gemm(bool bf16, bool packed, bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k,
                 const T* a, std::size_t lda, const detail::Bf16Matrix& ab, const T* b, std::size_t ldb,
                 const detail::Bf16Matrix& bb, T beta, T* c, std::size_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    if (packed) return detail::gemm_bf16(trans_a, trans_b, m, n, k, 1.0f, ab, bb, beta, c, ldc);
  }
  gemm_autocast<T>(bf16, trans_a, trans_b, m, n, k, T(1), a, lda, b, ldb, beta, c, ldc);
}

// t's value as a dense (rows, cols) bf16 matrix: a leaf that requires grad (a weight) through
// autocast's cast cache, once per version of it (autocast.hpp); linear's weight when it is a leaf
// that does not require grad (frozen) through the frozen-weight cache, once per version for as long
// as it lives; anything else cast now (a leaf input without grad is data, not cached).
detail::Bf16Matrix cast_bf16(const Tensor<float>& t, std::size_t rows, std::size_t cols, bool weight) {
  const float* src = t.value().data();
  if (t.is_leaf() && t.requires_grad()) return detail::autocast_cached_bf16(t.node(), t.version(), src, rows, cols);
  if (weight && t.is_leaf()) return detail::autocast_frozen_bf16(t.node(), t.version(), src, rows, cols);
  return detail::to_bf16(src, rows, cols, cols);
}

// Under create_graph (linear's GradFormula), in differentiable ops and fp32 even under autocast
// (as matmul_formula):  dx = dy W: (*, out) (out, in);  dW = dy^T x: (out, rows) (rows, in);
// db = dy summed over the rows.
template <class T>
std::vector<Tensor<T>> linear_formula(const BackwardArgs<T>& args) {
  const AutocastGuard fp32(false);
  const Shape sx = args.input_shape(0), sw = args.input_shape(1);
  const std::size_t rows = detail::numel(sx, 0, sx.size() - 1);
  const auto in = static_cast<std::int64_t>(sw[1]), outf = static_cast<std::int64_t>(sw[0]);
  const Tensor<T>& dy = args.grad();
  std::vector<Tensor<T>> g(args.num_inputs());
  if (args.needs(0)) g[0] = matmul(dy, args.input(1));
  if (args.needs(1)) {
    const auto r = static_cast<std::int64_t>(rows);
    g[1] = matmul(transpose(reshape(dy, {r, outf}), 0, 1), reshape(args.input(0), {r, in}));
  }
  if (g.size() > 2 && args.needs(2)) g[2] = sum_to(dy, Shape{sw[0]});
  return g;
}

}  // namespace

namespace detail {

template <class T>
Shape linear_output_shape(const char* op, const Tensor<T>& x, const Tensor<T>& weight, const Tensor<T>& bias) {
  const Shape sx = x.shape(), sw = weight.shape();
  XGRAD_CHECK(sw.size() == 2, op, ": expected a 2-D weight (out_features, in_features), got ", sw);
  XGRAD_CHECK(!sx.empty(), op, ": expected an input with at least 1 dimension (*, in_features), got ", sx);
  const std::size_t in = sw[1], outf = sw[0];
  XGRAD_CHECK(sx.back() == in, op, ": input ", sx, " and weight ", sw, ": input features ", sx.back(),
              " differ from in_features ", in);
  if (bias.defined())
    XGRAD_CHECK(bias.shape() == Shape{outf}, op, ": expected a bias of shape (", outf, ") for weight ", sw, ", got ",
                bias.shape());
  Shape sy = sx;
  sy.back() = outf;
  return sy;
}

template <class T>
LinearGemms linear_forward(const Tensor<T>& x, const Tensor<T>& weight, const Tensor<T>& bias, T* py,
                           const LinearEpilogue& epilogue) {
  const Shape sx = x.shape(), sw = weight.shape();
  LinearGemms s;
  s.in = sw[1];
  s.outf = sw[0];
  s.rows = numel(sx, 0, sx.size() - 1);
  s.bf16 = autocast_gemm<T>();  // recorded for the backward (autocast.hpp)
  // Under autocast, when the product takes packed operands (the three gemms here have the same
  // size), x and W are rounded to bf16 once, here, and kept for the backward (x: (rows, in),
  // W: (out, in)), which would otherwise round both again. Either way the same bits. A weight
  // comes from the cast cache: cast once per version, not once per call (a frozen one, once per
  // version for the run).
  s.packed = s.bf16 && gemm_bf16_takes_packed(s.rows, s.outf, s.in);
  if constexpr (std::is_same_v<T, float>) {
    if (s.packed) {
      s.xb = cast_bf16(x, s.rows, s.in, /*weight=*/false);
      s.wb = cast_bf16(weight, s.outf, s.in, /*weight=*/true);
    }
  }
  const std::size_t rows = s.rows, in = s.in, outf = s.outf;
  const T* px = x.value().data();
  const T* pw = weight.value().data();
  const T* pb = bias.defined() && outf > 0 ? bias.value().data() : nullptr;  // out 0: nothing to copy
  const T beta = pb != nullptr ? T(1) : T(0);
  // The block of rows [r0, r1) and columns [c0, c1) of y: the bias, then the gemm adds x W^T
  // (beta = 1), then the epilogue while the block is in cache.
  auto block = [&](std::size_t r0, std::size_t r1, std::size_t c0, std::size_t c1) {
    if (pb != nullptr)
      for (std::size_t r = r0; r < r1; ++r) std::memcpy(py + r * outf + c0, pb + c0, (c1 - c0) * sizeof(T));
    if constexpr (std::is_same_v<T, float>) {
      if (s.packed) {  // rows r0.. of the packed x: the same buffer, offset (an aliasing shared_ptr); c: all
        const Bf16Matrix xr{std::shared_ptr<const std::uint16_t[]>(s.xb.bits, s.xb.bits.get() + r0 * in), r1 - r0, in};
        gemm_bf16(false, true, r1 - r0, outf, in, 1.0f, xr, s.wb, beta, py + r0 * outf, outf);
        if (epilogue) epilogue(r0, r1, c0, c1);
        return;
      }
    }
    gemm_autocast<T>(s.bf16, false, true, r1 - r0, c1 - c0, in, T(1), px + r0 * in, in, pw + c0 * in, in, beta,
                     py + r0 * outf + c0, outf);
    if (epilogue) epilogue(r0, r1, c0, c1);
  };
  // The backends' split (gemm.hpp: kGemmTile, kGemmMinBlockTiles, kGemmSplitMinMacs). A gemm
  // called inside a chunk runs as one call on its thread: the same calls as one gemm.
  constexpr std::size_t kTile = kGemmTile;
  if (rows * outf * in < kGemmSplitMinMacs) {
    block(0, rows, 0, outf);
  } else if (s.packed || (!s.bf16 && rows >= outf)) {
    parallel_for((rows + kTile - 1) / kTile, kGemmMinBlockTiles,
                 [&](std::size_t t0, std::size_t t1) { block(t0 * kTile, std::min(t1 * kTile, rows), 0, outf); });
  } else if (!s.bf16) {
    parallel_for((outf + kTile - 1) / kTile, kGemmMinBlockTiles,
                 [&](std::size_t t0, std::size_t t1) { block(0, rows, t0 * kTile, std::min(t1 * kTile, outf)); });
  } else {  // bf16's portable path (rounds its operands, then a float gemm): bias and epilogue by rows
    const std::size_t grain = grain_for_units(outf);
    if (pb != nullptr)
      parallel_for(rows, grain, [&](std::size_t r0, std::size_t r1) {
        for (std::size_t r = r0; r < r1; ++r) std::memcpy(py + r * outf, pb, outf * sizeof(T));
      });
    gemm_autocast<T>(true, false, true, rows, outf, in, T(1), px, in, pw, in, beta, py, outf);
    if (epilogue) parallel_for(rows, grain, [&](std::size_t r0, std::size_t r1) { epilogue(r0, r1, 0, outf); });
  }
  return s;
}

template <class T>
void linear_backward_gemms(Node<T>& out, const LinearGemms& s, const T* dy) {
  const std::size_t rows = s.rows, in = s.in, outf = s.outf;
  // Packed: dy is rounded to bf16 once for both products.
  Bf16Matrix dyb;
  if constexpr (std::is_same_v<T, float>) {
    if (s.packed && (out.input_needs_grad(0) || out.input_needs_grad(1))) dyb = to_bf16(dy, rows, outf, outf);
  }
  // dx = dy W: (rows, out) (out, in)
  if (out.input_needs_grad(0)) {
    Array<T> dx = empty_array<T>(out.input_shape(0), "linear (backward)");
    linear_gemm<T>(s.bf16, s.packed, false, false, rows, in, outf, dy, outf, dyb, out.input_value(1).data(), in, s.wb,
                   T(0), dx.data(), in);
    out.input(0).accumulate_grad(std::move(dx));
  }
  // dW = dy^T x: (out, rows) (rows, in)
  if (out.input_needs_grad(1)) {
    Array<T> dw = empty_array<T>(out.input_shape(1), "linear (backward)");
    linear_gemm<T>(s.bf16, s.packed, true, false, outf, in, rows, dy, outf, dyb, out.input_value(0).data(), in, s.xb,
                   T(0), dw.data(), in);
    out.input(1).accumulate_grad(std::move(dw));
  }
}

void for_column_blocks(std::size_t rows, std::size_t cols, const std::function<void(std::size_t, std::size_t)>& f) {
  constexpr std::size_t kUnit = 64;  // columns: a multiple of every SIMD width
  const std::size_t units = (cols + kUnit - 1) / kUnit;
  parallel_for(units, grain_for_units(rows * kUnit),
               [&](std::size_t u0, std::size_t u1) { f(u0 * kUnit, std::min(u1 * kUnit, cols)); });
}

}  // namespace detail

// x: (*, in), W: (out, in), b: (out) -> y: (*, out);  y = x W^T + b over the rows of x.
// Forward: bias fill and gemm per row block (detail::linear_forward); backward: two gemms, and the
// bias gradient summed down column blocks over the pool (each column's rows in order: the serial
// sum's bits at any thread count).
// https://pytorch.org/docs/stable/generated/torch.nn.functional.linear.html
template <class T>
Tensor<T> linear(const Tensor<T>& x, const Tensor<T>& weight, const Tensor<T>& bias) {
  const OpScope op(OpKind::linear);
  Array<T> y = empty_array<T>(detail::linear_output_shape(op.name(), x, weight, bias), op.name());
  const detail::LinearGemms s = detail::linear_forward<T>(x, weight, bias, y.data(), nullptr);
  std::vector<Tensor<T>> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  return op.result<T>(
      std::move(y), std::move(inputs),
      [s](Node<T>& out) {
        const T* dy = out.grad.data();
        detail::linear_backward_gemms(out, s, dy);
        // db = sum over rows of dy
        if (out.inputs.size() > 2 && out.input_needs_grad(2)) {
          Array<T> db = empty_array<T>({s.outf}, "linear (backward)");
          T* pdb = db.data();
          detail::for_column_blocks(s.rows, s.outf, [&](std::size_t c0, std::size_t c1) {
            detail::sum_rows(dy, s.rows, s.outf, c0, c1, pdb);
          });
          out.input(2).accumulate_grad(std::move(db));
        }
      },
      linear_formula<T>);
}

#define XGRAD_INSTANTIATE(T)                                                                                        \
  template Tensor<T> matmul<T>(const Tensor<T>&, const Tensor<T>&);                                                 \
  template Tensor<T> linear<T>(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&);                               \
  template Shape detail::linear_output_shape<T>(const char*, const Tensor<T>&, const Tensor<T>&, const Tensor<T>&); \
  template detail::LinearGemms detail::linear_forward<T>(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, T*,  \
                                                         const detail::LinearEpilogue&);                            \
  template void detail::linear_backward_gemms<T>(Node<T>&, const detail::LinearGemms&, const T*);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad
