// softmax and log_softmax: values against exp/sum, gradchecks over every dim, stability for
// large logits, and the fully masked (-inf) row convention.
#include <cmath>
#include <limits>

#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

const double kInf = std::numeric_limits<double>::infinity();

// exp(x) / sum exp(x) along dim, without max subtraction (inputs are small).
Array<double> naive_softmax(const Array<double>& x, std::size_t dim) {
  Array<double> e = x;
  for (double& v : e) v = std::exp(v);
  Array<double> s = xt::sum(e, {dim}, xt::keep_dims | xt::evaluation_strategy::immediate);
  return e / s;
}

}  // namespace

TEST(Softmax, ForwardMatchesExpOverSumOnEveryDim) {
  auto x = input({3, 4, 5}, 1);
  for (int dim : {0, 1, 2, -1, -3}) {
    SCOPED_TRACE(dim);
    const std::size_t d = static_cast<std::size_t>(dim < 0 ? dim + 3 : dim);
    Array<double> ref = naive_softmax(x.value(), d);
    EXPECT_LT(max_abs_diff(softmax(x, dim).value(), ref), 1e-14);
    for (double& v : ref) v = std::log(v);
    EXPECT_LT(max_abs_diff(log_softmax(x, dim).value(), ref), 1e-13);
  }
  auto v = input({6}, 2);
  EXPECT_LT(max_abs_diff(softmax(v, 0).value(), naive_softmax(v.value(), 0)), 1e-14);
  // A 0-d tensor is one row of one element.
  EXPECT_EQ(softmax(full<double>({}, 3.0), -1).item(), 1.0);
  EXPECT_EQ(log_softmax(full<double>({}, 3.0), 0).item(), 0.0);
}

TEST(Softmax, LongRowsTakeTheVectorizedPathAndItsTail) {
  // 37 and 70 elements: several SIMD batches plus a scalar tail, in double and in float.
  for (std::size_t n : {37u, 70u}) {
    SCOPED_TRACE(n);
    auto x = input({3, n}, 12);
    x.mutable_value()(1, n - 1) = 4.0;  // the max in the tail
    Array<double> ref = naive_softmax(x.value(), 1);
    EXPECT_LT(max_abs_diff(softmax(x, -1).value(), ref), 1e-14);
    Tensor<float> xf(Array<float>(xt::cast<float>(x.value())));
    EXPECT_LT(max_abs_diff(softmax(xf, -1).value(), ref), 1e-7);
    for (double& v : ref) v = std::log(v);
    EXPECT_LT(max_abs_diff(log_softmax(x, -1).value(), ref), 1e-13);
    EXPECT_LT(max_abs_diff(log_softmax(xf, -1).value(), ref), 1e-5);
    expect_gradcheck([](const Inputs& in) { return softmax(in[0], 1); }, {input({2, n}, 13)});
    expect_gradcheck([](const Inputs& in) { return log_softmax(in[0], 1); }, {input({2, n}, 14)});
  }
}

TEST(Softmax, GradcheckOnEveryDim) {
  for (const Shape& s : {Shape{5}, Shape{3, 4}, Shape{2, 3, 4}}) {
    for (int dim = -static_cast<int>(s.size()); dim < static_cast<int>(s.size()); ++dim) {
      SCOPED_TRACE(shape_str(s) + " dim " + std::to_string(dim));
      expect_gradcheck([dim](const Inputs& in) { return softmax(in[0], dim); }, {input(s, 3)});
      expect_gradcheck([dim](const Inputs& in) { return log_softmax(in[0], dim); }, {input(s, 3)});
    }
  }
}

TEST(Softmax, GradcheckOnTransposedInput) {
  expect_gradcheck([](const Inputs& in) { return softmax(transpose(in[0], 0, 1), -1); }, {input({4, 3}, 5)});
  expect_gradcheck([](const Inputs& in) { return log_softmax(transpose(in[0], 0, 2), 1); }, {input({4, 3, 2}, 6)});
}

TEST(Softmax, LargeLogitsStayFiniteAndSumToOne) {
  // float logits around +1e4 and -1e4 (exp would overflow / underflow without the max shift).
  Generator g(7);
  for (float offset : {1e4f, -1e4f}) {
    Array<float> v = randn<float>({4, 6}, g).value() + offset;
    Tensor<float> x(v, true);
    auto y = softmax(x, -1);
    auto ly = log_softmax(x, -1);
    for (float p : y.value()) EXPECT_TRUE(std::isfinite(p));
    for (float p : ly.value()) EXPECT_TRUE(std::isfinite(p));
    Array<float> rows = xt::sum(y.value(), {1}, xt::evaluation_strategy::immediate);
    for (float s : rows) EXPECT_NEAR(s, 1.0f, 1e-6f);
    // Shift invariance: the same as the softmax of the centred logits, to float rounding of v.
    Array<float> centred = v - offset;
    EXPECT_LT(max_abs_diff(y.value(), softmax(Tensor<float>(centred), -1).value()), 1e-3);
    y.backward(randn<float>({4, 6}, g));
    for (float d : x.grad()) EXPECT_TRUE(std::isfinite(d));
    x.zero_grad();
    ly.backward(randn<float>({4, 6}, g));
    for (float d : x.grad()) EXPECT_TRUE(std::isfinite(d));
  }
}

TEST(Softmax, FullyMaskedRowGivesZerosAndZeroGradient) {
  // Row 1 (last dim) is all -inf; row 0 has one -inf entry. Checked along the last dim
  // (contiguous rows) and, transposed, along dim 0 (strided rows).
  Array<double> v = {{0.5, -kInf, 1.0}, {-kInf, -kInf, -kInf}};
  for (bool strided : {false, true}) {
    SCOPED_TRACE(strided ? "strided" : "contiguous");
    Array<double> xv = strided ? Array<double>(xt::transpose(v)) : v;
    const int dim = strided ? 0 : 1;
    auto pick = [strided](const Array<double>& a, std::size_t r, std::size_t c) { return strided ? a(c, r) : a(r, c); };
    T64 x(xv, true);
    auto y = softmax(x, dim);
    for (std::size_t c = 0; c < 3; ++c) EXPECT_EQ(pick(y.value(), 1, c), 0.0);
    EXPECT_EQ(pick(y.value(), 0, 1), 0.0);
    EXPECT_NEAR(pick(y.value(), 0, 0) + pick(y.value(), 0, 2), 1.0, 1e-15);
    Array<double> u = xt::ones<double>(xv.shape());
    u(0, 0) = 3.0;
    y.backward(Tensor<double>(u));
    for (double d : x.grad()) EXPECT_TRUE(std::isfinite(d));
    for (std::size_t c = 0; c < 3; ++c) EXPECT_EQ(pick(x.grad(), 1, c), 0.0);

    T64 x2(xv, true);
    auto ly = log_softmax(x2, dim);
    for (std::size_t c = 0; c < 3; ++c) EXPECT_EQ(pick(ly.value(), 1, c), -kInf);
    EXPECT_EQ(pick(ly.value(), 0, 1), -kInf);
    ly.backward(Tensor<double>(u));
    for (double d : x2.grad()) EXPECT_TRUE(std::isfinite(d));
    for (std::size_t c = 0; c < 3; ++c) EXPECT_EQ(pick(x2.grad(), 1, c), 0.0);
    EXPECT_NE(pick(x2.grad(), 0, 0), 0.0);
  }
}

TEST(Softmax, DimOutOfRangeThrows) {
  XGRAD_EXPECT_THROW_MSG(softmax(zeros<double>({2, 3}), 2), "softmax", "dimension out of range", "2");
  XGRAD_EXPECT_THROW_MSG(log_softmax(zeros<double>({2, 3}), -3), "log_softmax", "-3");
}

TEST(Softmax, FloatMatchesDouble) {
  auto x = input({3, 5, 4}, 9);
  Tensor<float> xf(Array<float>(xt::cast<float>(x.value())), true);
  for (int dim : {0, 1, -1}) {
    EXPECT_LT(max_abs_diff(softmax(xf, dim).value(), softmax(x, dim).value()), 1e-6);
    EXPECT_LT(max_abs_diff(log_softmax(xf, dim).value(), log_softmax(x, dim).value()), 1e-5);
  }
  Array<double> u = input({3, 5, 4}, 10).value();
  log_softmax(x, 1).backward(Tensor<double>(u));
  log_softmax(xf, 1).backward(Tensor<float>(xt::cast<float>(u)));
  EXPECT_LT(max_abs_diff(xf.grad(), x.grad()), 1e-5);
}
