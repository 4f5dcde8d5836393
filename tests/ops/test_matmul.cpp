// gemm, matmul and linear: forward values against a naive triple loop, gradchecks on 1-D,
// 2-D and batched shapes with broadcast batch dims, transposed (non-contiguous) operands, and
// the shape errors.
#include <cmath>

#include <xgrad/backend/gemm.hpp>
#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

// torch.matmul by definition: promote 1-D operands, broadcast the batch dims, triple loop per
// batch, drop the added dims. Independent of matmul.cpp's offset tables.
Array<double> naive_matmul(const Array<double>& a0, const Array<double>& b0) {
  Shape sa = shape_of(a0), sb = shape_of(b0);
  const bool a1 = sa.size() == 1, b1 = sb.size() == 1;
  if (a1) sa.insert(sa.begin(), 1);
  if (b1) sb.push_back(1);
  const std::size_t m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
  Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  const std::size_t nd = std::max(ba.size(), bb.size());
  ba.insert(ba.begin(), nd - ba.size(), 1);
  bb.insert(bb.begin(), nd - bb.size(), 1);
  Shape batch(nd);
  for (std::size_t i = 0; i < nd; ++i) batch[i] = std::max(ba[i], bb[i]);
  sa = ba;
  sa.insert(sa.end(), {m, k});
  sb = bb;
  sb.insert(sb.end(), {k, n});
  Shape fa = batch, fb = batch;
  fa.insert(fa.end(), {m, k});
  fb.insert(fb.end(), {k, n});
  Array<double> a = xt::broadcast(xt::reshape_view(a0, sa), fa);
  Array<double> b = xt::broadcast(xt::reshape_view(b0, sb), fb);
  std::size_t nb = 1;
  for (auto d : batch) nb *= d;
  Shape so = batch;
  so.insert(so.end(), {m, n});
  Array<double> c = xt::zeros<double>(so);
  for (std::size_t z = 0; z < nb; ++z)
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        double s = 0;
        for (std::size_t p = 0; p < k; ++p) s += a.data()[z * m * k + i * k + p] * b.data()[z * k * n + p * n + j];
        c.data()[z * m * n + i * n + j] = s;
      }
  Shape out = batch;
  if (!a1) out.push_back(m);
  if (!b1) out.push_back(n);
  c.reshape(out);
  return c;
}

struct Case {
  Shape a, b, out;
};

const std::vector<Case> kCases = {
    {{3, 4}, {4, 5}, {3, 5}},
    {{4}, {4, 5}, {5}},
    {{3, 4}, {4}, {3}},
    {{4}, {4}, {}},
    {{2, 3, 4}, {2, 4, 5}, {2, 3, 5}},
    {{2, 3, 4}, {4, 5}, {2, 3, 5}},          // one B for every batch (folded into one gemm)
    {{3, 4}, {2, 4, 5}, {2, 3, 5}},          // one A for every batch
    {{2, 1, 3, 4}, {5, 4, 6}, {2, 5, 3, 6}},  // both broadcast
    {{1, 3, 4}, {2, 1, 4, 2}, {2, 1, 3, 2}},
    {{2, 3, 4}, {4}, {2, 3}},
    {{4}, {2, 4, 5}, {2, 5}},
    {{2, 2, 3, 4}, {2, 1, 4, 3}, {2, 2, 3, 3}},
};

}  // namespace

TEST(Gemm, TransposeFlagsLeadingDimsAlphaBeta) {
  // A stored as (k, lda=6) used transposed, B stored (n, ldb=5) used transposed, C (m, ldc=7):
  // only the addressed entries of C change.
  const std::size_t m = 3, n = 4, k = 2;
  Generator g(3);
  Array<double> a = randn<double>({k, 6}, g).value(), b = randn<double>({n, 5}, g).value();
  Array<double> c = randn<double>({m, 7}, g).value();
  const Array<double> c0 = c;
  detail::gemm<double>(true, true, m, n, k, 2.0, a.data(), 6, b.data(), 5, 0.5, c.data(), 7);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < 7; ++j) {
      double expect = c0(i, j);
      if (j < n) {
        double s = 0;
        for (std::size_t p = 0; p < k; ++p) s += a(p, i) * b(j, p);
        expect = 2.0 * s + 0.5 * c0(i, j);
      }
      EXPECT_NEAR(c(i, j), expect, 1e-12) << i << "," << j;
    }
  // k = 0: C = beta C, and beta = 0 overwrites even NaN (BLAS semantics).
  Array<float> cf = {{1.0f, std::nanf("")}};
  detail::gemm<float>(false, false, 1, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.0f, cf.data(), 2);
  EXPECT_EQ(cf, (Array<float>{{0.0f, 0.0f}}));
  cf = {{1.0f, 2.0f}};
  detail::gemm<float>(false, false, 1, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 3.0f, cf.data(), 2);
  EXPECT_EQ(cf, (Array<float>{{3.0f, 6.0f}}));
}

TEST(Matmul, ForwardMatchesNaiveTripleLoop) {
  for (const auto& c : kCases) {
    SCOPED_TRACE(shape_str(c.a) + " @ " + shape_str(c.b));
    auto a = input(c.a, 1), b = input(c.b, 2);
    auto y = matmul(a, b);
    EXPECT_EQ(y.shape(), c.out);
    EXPECT_LT(max_abs_diff(y.value(), naive_matmul(a.value(), b.value())), 1e-12);
  }
}

TEST(Matmul, GradcheckOnEveryShapeCase) {
  for (const auto& c : kCases) {
    SCOPED_TRACE(shape_str(c.a) + " @ " + shape_str(c.b));
    expect_gradcheck([](const Inputs& in) { return matmul(in[0], in[1]); }, {input(c.a, 1), input(c.b, 2)});
  }
}

TEST(Matmul, GradcheckWithOnlyOneOperandRequiringGrad) {
  auto a = input({2, 3, 4}, 1);
  auto b = input({4, 5}, 2);
  b.requires_grad_(false);
  expect_gradcheck([](const Inputs& in) { return matmul(in[0], in[1]); }, {a, b});
  a.requires_grad_(false);
  b.requires_grad_(true);
  expect_gradcheck([](const Inputs& in) { return matmul(in[0], in[1]); }, {a, b});
}

TEST(Matmul, TransposedOperandsGradcheck) {
  // a^T b and a b^T with the transposes made inside the function (as for non-contiguous views).
  expect_gradcheck([](const Inputs& in) { return matmul(transpose(in[0], 0, 1), in[1]); },
                   {input({4, 3}, 1), input({4, 5}, 2)});
  expect_gradcheck([](const Inputs& in) { return matmul(in[0], transpose(in[1], -1, -2)); },
                   {input({2, 3, 4}, 1), input({2, 5, 4}, 2)});
  expect_gradcheck([](const Inputs& in) { return matmul(transpose(in[0], 0, 2), transpose(in[1], 0, 1)); },
                   {input({4, 3, 2}, 1), input({4, 2, 5}, 2)});
}

TEST(Matmul, NodeUsedAsBothOperands) {
  // y = A A: dA = dY A^T + A^T dY
  expect_gradcheck([](const Inputs& in) { return matmul(in[0], in[0]); }, {input({3, 3}, 4)});
}

TEST(Matmul, EmptyDimensions) {
  auto y = matmul(input({0, 3}, 1), input({3, 4}, 2));
  EXPECT_EQ(y.shape(), (Shape{0, 4}));
  // k = 0: a (3, 4) matrix of zeros, and gradients of the (empty) operands' shapes.
  auto a = input({3, 0}, 1), b = input({0, 4}, 2);
  auto z = matmul(a, b);
  EXPECT_EQ(z.value(), (Array<double>(xt::zeros<double>({3, 4}))));
  z.backward(ones<double>({3, 4}));
  EXPECT_EQ(a.grad().shape(), a.value().shape());
  // An empty broadcast batch: the shared operand's gradient is zeros, not uninitialized.
  auto c = input({1, 2, 3}, 3), d = input({0, 3, 2}, 4);
  auto w = matmul(c, d);
  EXPECT_EQ(w.shape(), (Shape{0, 2, 2}));
  w.backward(zeros<double>({0, 2, 2}));
  EXPECT_EQ(c.grad(), (Array<double>(xt::zeros<double>({1, 2, 3}))));
}

TEST(Matmul, ShapeErrorsNameBothShapes) {
  XGRAD_EXPECT_THROW_MSG(matmul(zeros<double>({2, 3}), zeros<double>({4, 5})),
                         "matmul: (2, 3) @ (4, 5): inner dimensions 3 and 4 differ");
  XGRAD_EXPECT_THROW_MSG(matmul(zeros<double>({3}), zeros<double>({4})), "matmul", "(3) @ (4)", "3 and 4");
  XGRAD_EXPECT_THROW_MSG(matmul(zeros<double>({2, 3, 4}), zeros<double>({3, 4, 5})), "matmul",
                         "(2, 3, 4) @ (3, 4, 5)", "batch dimensions (2) and (3)");
  XGRAD_EXPECT_THROW_MSG(matmul(zeros<double>({}), zeros<double>({4})), "matmul", "at least 1 dimension", "()");
}

TEST(Matmul, FloatMatchesDouble) {
  auto a = input({2, 1, 5, 7}, 5), b = input({3, 7, 4}, 6);
  Tensor<float> af(Array<float>(xt::cast<float>(a.value())), true);
  Tensor<float> bf(Array<float>(xt::cast<float>(b.value())), true);
  auto yd = matmul(a, b);
  auto yf = matmul(af, bf);
  EXPECT_LT(max_abs_diff(yf.value(), yd.value()), 1e-5);
  Array<double> u = input(yd.shape(), 7).value();
  yd.backward(Tensor<double>(u));
  yf.backward(Tensor<float>(xt::cast<float>(u)));
  EXPECT_LT(max_abs_diff(af.grad(), a.grad()), 1e-5);
  EXPECT_LT(max_abs_diff(bf.grad(), b.grad()), 1e-5);
}

// ---- linear ----------------------------------------------------------------------------------

TEST(Linear, ForwardIsXWTransposePlusBias) {
  auto x = input({2, 3, 4}, 1), w = input({5, 4}, 2), b = input({5}, 3);
  auto y = linear(x, w, b);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 5}));
  Array<double> ref = naive_matmul(x.value(), xt::transpose(w.value())) + b.value();
  EXPECT_LT(max_abs_diff(y.value(), ref), 1e-12);
  auto y0 = linear(x, w);
  EXPECT_LT(max_abs_diff(y0.value(), naive_matmul(x.value(), xt::transpose(w.value()))), 1e-12);
  auto y1 = linear(input({4}, 4), w, b);  // 1-D input -> (out)
  EXPECT_EQ(y1.shape(), (Shape{5}));
}

TEST(Linear, GradcheckWithAndWithoutBias) {
  for (const Shape& sx : {Shape{4}, Shape{3, 4}, Shape{2, 3, 4}}) {
    SCOPED_TRACE(shape_str(sx));
    expect_gradcheck([](const Inputs& in) { return linear(in[0], in[1], in[2]); },
                     {input(sx, 1), input({5, 4}, 2), input({5}, 3)});
    expect_gradcheck([](const Inputs& in) { return linear(in[0], in[1]); }, {input(sx, 1), input({5, 4}, 2)});
  }
  // Only the bias, only the weight requiring grad.
  auto x = input({3, 4}, 1), w = input({5, 4}, 2), b = input({5}, 3);
  x.requires_grad_(false);
  w.requires_grad_(false);
  expect_gradcheck([](const Inputs& in) { return linear(in[0], in[1], in[2]); }, {x, w, b});
  b.requires_grad_(false);
  w.requires_grad_(true);
  expect_gradcheck([](const Inputs& in) { return linear(in[0], in[1], in[2]); }, {x, w, b});
}

TEST(Linear, IsOneNode) {
  auto y = linear(input({3, 4}, 1), input({5, 4}, 2), input({5}, 3));
  EXPECT_STREQ(y.op(), "linear");
  EXPECT_EQ(y.node()->inputs.size(), 3u);
  for (const auto& in : y.node()->inputs) EXPECT_TRUE(in->is_leaf);
}

TEST(Linear, ShapeErrors) {
  XGRAD_EXPECT_THROW_MSG(linear(zeros<double>({2, 3}), zeros<double>({5, 4})), "linear", "(2, 3)", "(5, 4)",
                         "3", "in_features 4");
  XGRAD_EXPECT_THROW_MSG(linear(zeros<double>({2, 4}), zeros<double>({4})), "linear", "2-D weight", "(4)");
  XGRAD_EXPECT_THROW_MSG(linear(zeros<double>({2, 4}), zeros<double>({5, 4}), zeros<double>({4})), "linear",
                         "bias of shape (5)", "got (4)");
}

TEST(Linear, FloatMatchesDouble) {
  auto x = input({6, 8}, 1), w = input({3, 8}, 2), b = input({3}, 3);
  auto cast = [](const T64& t) { return Tensor<float>(Array<float>(xt::cast<float>(t.value())), true); };
  auto xf = cast(x), wf = cast(w), bf = cast(b);
  auto yd = linear(x, w, b);
  auto yf = linear(xf, wf, bf);
  EXPECT_LT(max_abs_diff(yf.value(), yd.value()), 1e-5);
  sum(yd * yd).backward();
  sum(yf * yf).backward();
  EXPECT_LT(max_abs_diff(xf.grad(), x.grad()), 1e-4);
  EXPECT_LT(max_abs_diff(wf.grad(), w.grad()), 1e-4);
  EXPECT_LT(max_abs_diff(bf.grad(), b.grad()), 1e-4);
}
