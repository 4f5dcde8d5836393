// Reductions: forward values against xtensor and loops, gradchecks over shapes, dims, keepdim
// and non-contiguous inputs, ties for amax/max, var's accuracy, and error messages.
#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

struct DimsCase {
  Shape shape;
  std::vector<std::int64_t> dims;
};

// Shapes 1-D to 4-D with single, several, negative and all dims.
const std::vector<DimsCase> kCases = {
    {{5}, {0}},          {{5}, {-1}},          {{3, 4}, {0}},        {{3, 4}, {1}},          {{3, 4}, {-1, 0}},
    {{2, 3, 4}, {1}},    {{2, 3, 4}, {0, 2}},  {{2, 3, 4}, {-1}},    {{2, 3, 4}, {0, 1, 2}}, {{2, 3, 1, 4}, {1, 3}},
    {{2, 3, 2, 4}, {0}}, {{2, 3, 2, 4}, {-2, 1}}, {{2, 1, 3, 2}, {2, -3}},
};

std::vector<std::size_t> normalized(const std::vector<std::int64_t>& dims, std::size_t nd) {
  std::vector<std::size_t> axes;
  for (std::int64_t d : dims) axes.push_back(static_cast<std::size_t>(d < 0 ? d + static_cast<std::int64_t>(nd) : d));
  std::sort(axes.begin(), axes.end());  // xtensor's reducers want sorted axes
  return axes;
}

// The expected result shape of reducing `shape` over `dims`.
Shape reduced_shape(const Shape& shape, const std::vector<std::int64_t>& dims, bool keepdim) {
  const auto axes = normalized(dims, shape.size());
  Shape out;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const bool r = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!r) out.push_back(shape[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

// Reference over arbitrary dims, by loops: visits every element and the flat index of the
// output it belongs to.
template <class F>
void for_each_with_output(const Shape& shape, const std::vector<std::int64_t>& dims, F f) {
  const auto axes = normalized(dims, shape.size());
  std::size_t n = 1;
  for (auto s : shape) n *= s;
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t rest = i, o = 0, ostride = 1;
    for (std::size_t d = shape.size(); d-- > 0;) {
      const std::size_t c = rest % shape[d];
      rest /= shape[d];
      if (std::find(axes.begin(), axes.end(), d) == axes.end()) {
        o += c * ostride;
        ostride *= shape[d];
      }
    }
    f(i, o);
  }
}

}  // namespace

// ---- forward values -----------------------------------------------------------------------------

TEST(Reduction, SumAndMeanMatchXtensor) {
  for (const auto& c : kCases) {
    SCOPED_TRACE(shape_str(c.shape) + " over " + shape_str(c.dims));
    auto x = input(c.shape, 3);
    const auto axes = normalized(c.dims, c.shape.size());
    Array<double> ref_sum = xt::sum(x.value(), axes, xt::evaluation_strategy::immediate);
    Array<double> ref_mean = xt::mean(x.value(), axes, xt::evaluation_strategy::immediate);
    for (bool keepdim : {false, true}) {
      auto s = sum(x, c.dims, keepdim);
      auto m = mean(x, c.dims, keepdim);
      EXPECT_EQ(s.shape(), reduced_shape(c.shape, c.dims, keepdim));
      EXPECT_EQ(m.shape(), reduced_shape(c.shape, c.dims, keepdim));
      ASSERT_EQ(s.numel(), ref_sum.size());
      for (std::size_t i = 0; i < ref_sum.size(); ++i) {
        EXPECT_NEAR(s.value().data()[i], ref_sum.data()[i], 1e-12);
        EXPECT_NEAR(m.value().data()[i], ref_mean.data()[i], 1e-12);
      }
    }
  }
  auto x = input({3, 4, 2}, 4);
  EXPECT_EQ(sum(x).shape(), Shape{});
  EXPECT_NEAR(sum(x).item(), xt::sum(x.value())(), 1e-12);
  EXPECT_NEAR(mean(x).item(), xt::mean(x.value())(), 1e-12);
}

TEST(Reduction, HandWrittenValues) {
  auto x = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(sum(x, {0}).value(), (Array<double>{5, 7, 9}));
  auto rows = sum(x, {1}, true);
  EXPECT_EQ(rows.shape(), (Shape{2, 1}));
  EXPECT_EQ(rows.value()(0, 0), 6.0);
  EXPECT_EQ(rows.value()(1, 0), 15.0);
  EXPECT_EQ(mean(x, {-1}).value(), (Array<double>{2, 5}));
  EXPECT_EQ(amax(x, {0}).value(), (Array<double>{4, 5, 6}));
  EXPECT_DOUBLE_EQ(var(x).item(), 3.5);                   // sum of squared deviations 17.5 / 5
  EXPECT_DOUBLE_EQ(var(x, false).item(), 17.5 / 6);
  EXPECT_EQ(var(x, {1}).value(), (Array<double>{1, 1}));  // each row {d, d+1, d+2}
  EXPECT_EQ(var(x, {0}, false).value(), (Array<double>{2.25, 2.25, 2.25}));
}

TEST(Reduction, ZeroDimInputReducesOverDimZero) {
  auto x = from_vector<double>({3.0}, {}, true);
  auto y = sum(x, {0});
  EXPECT_EQ(y.shape(), Shape{});
  EXPECT_EQ(y.item(), 3.0);
  EXPECT_EQ(mean(x, {-1}, true).item(), 3.0);
  y.backward();
  EXPECT_EQ(x.grad()(), 1.0);
}

TEST(Reduction, EmptyReductionsFollowTorch) {
  auto x = zeros<double>({0, 3});
  EXPECT_EQ(sum(x, {0}).value(), (Array<double>{0, 0, 0}));
  EXPECT_TRUE(std::isnan(mean(x).item()));
  EXPECT_EQ(sum(x, {1}).shape(), Shape{0});
  XGRAD_EXPECT_THROW_MSG(amax(x, {0}), "amax", "empty", "(0, 3)");
  XGRAD_EXPECT_THROW_MSG(max(x), "max", "empty");
  EXPECT_EQ(amax(x, {1}).shape(), Shape{0});
}

TEST(Reduction, FloatSumsAccumulateInDouble) {
  // In float, 1e8 + 1 == 1e8: a float accumulator would return 0.
  auto x = from_vector<float>({1e8f, 1.0f, -1e8f}, {3});
  EXPECT_EQ(sum(x).item(), 1.0f);
  EXPECT_EQ(sum(x, {0}).item(), 1.0f);
}

// ---- gradients ----------------------------------------------------------------------------------

TEST(Reduction, SumMeanVarGradcheck) {
  for (const auto& c : kCases) {
    for (bool keepdim : {false, true}) {
      SCOPED_TRACE(shape_str(c.shape) + " over " + shape_str(c.dims) + (keepdim ? " keepdim" : ""));
      const auto dims = c.dims;
      auto x = input(c.shape, 5);
      expect_gradcheck([&](const Inputs& in) { return sum(in[0], dims, keepdim); }, {x});
      expect_gradcheck([&](const Inputs& in) { return mean(in[0], dims, keepdim); }, {x});
      for (bool unbiased : {true, false})
        expect_gradcheck([&](const Inputs& in) { return var(in[0], dims, unbiased, keepdim); }, {x});
    }
  }
  for (const Shape& s : {Shape{7}, Shape{3, 4}, Shape{2, 3, 4}}) {
    SCOPED_TRACE(shape_str(s));
    expect_gradcheck([](const Inputs& in) { return sum(in[0]); }, {input(s, 6)});
    expect_gradcheck([](const Inputs& in) { return mean(in[0]); }, {input(s, 6)});
    expect_gradcheck([](const Inputs& in) { return var(in[0]); }, {input(s, 6)});
    expect_gradcheck([](const Inputs& in) { return var(in[0], false); }, {input(s, 6)});
  }
}

TEST(Reduction, GradcheckOnNonContiguousInputs) {
  // The op sees the transposed / permuted input; the gradient flows back through the copy.
  auto x = input({3, 4, 5}, 7);
  expect_gradcheck([](const Inputs& in) { return sum(transpose(in[0], 0, 2), {0, 1}); }, {x});
  expect_gradcheck([](const Inputs& in) { return mean(permute(in[0], {1, 2, 0}), {-1}, true); }, {x});
  expect_gradcheck([](const Inputs& in) { return var(transpose(in[0], 1, 2), {1}); }, {x});
  expect_gradcheck([](const Inputs& in) { return amax(permute(in[0], {2, 0, 1}), {0, 2}); }, {x});
  expect_gradcheck([](const Inputs& in) { return max(transpose(in[0], 0, 1), 2, true).first; }, {x});
  // And the value matches the reduction of the transposed array.
  Array<double> xt_ref = xt::sum(xt::transpose(x.value(), {2, 1, 0}), {0, 1}, xt::evaluation_strategy::immediate);
  EXPECT_LT(max_abs_diff(sum(transpose(x, 0, 2), {0, 1}).value(), xt_ref), 1e-12);
}

TEST(Reduction, ReusedInputAccumulates) {
  // y = sum(x) + mean(x, dim 0): dy/dx = 1 + 1/rows
  auto x = input({4, 3}, 8);
  auto y = sum(x) + sum(mean(x, {0}));
  y.backward();
  for (double g : x.grad()) EXPECT_DOUBLE_EQ(g, 1.25);
}

// ---- var's accuracy -----------------------------------------------------------------------------

TEST(Reduction, VarIsAccurateUnderALargeOffset) {
  // 1e4 plus noise of scale 0.1: a one-pass E[x^2] - E[x]^2 in float has no correct digits.
  Generator g(11);
  auto noise = randn<double>({16, 256}, g);
  Array<double> xd = 1e4 + 0.1 * noise.value();
  Array<float> xf = xt::cast<float>(xd);
  Array<double> xf_as_double = xt::cast<double>(xf);  // the float input, exactly, in double
  for (bool unbiased : {true, false}) {
    SCOPED_TRACE(unbiased ? "unbiased" : "biased");
    auto vf = var(Tensor<float>(xf), {1}, unbiased);
    auto vd = var(Tensor<double>(xd), {1}, unbiased);
    for (std::size_t r = 0; r < 16; ++r) {
      // Two-pass references in long double.
      auto ref = [&](const Array<double>& a) {
        long double m = 0, ss = 0;
        for (std::size_t c = 0; c < 256; ++c) m += a(r, c);
        m /= 256;
        for (std::size_t c = 0; c < 256; ++c) ss += (a(r, c) - m) * (a(r, c) - m);
        return static_cast<double>(ss / (unbiased ? 255 : 256));
      };
      const double rf = ref(xf_as_double), rd = ref(xd);
      EXPECT_NEAR(vf.value()(r), rf, 1e-6 * rf);
      EXPECT_NEAR(vd.value()(r), rd, 1e-12 * rd);
    }
  }
  // Over all elements, too.
  Array<double> all = xt::variance(xd, xt::evaluation_strategy::immediate);
  EXPECT_NEAR(var(Tensor<double>(xd), false).item(), all(), 1e-12 * all());
}

TEST(Reduction, VarOfOneElementUnbiasedIsNaN) {
  auto x = from_vector<double>({2.0, 3.0}, {2, 1});
  auto v = var(x, {1});
  EXPECT_TRUE(std::isnan(v.value()(0)));
  EXPECT_EQ(var(x, {1}, false).value(), (Array<double>{0, 0}));
}

// ---- amax, max ------------------------------------------------------------------------------------

TEST(Reduction, AmaxMatchesXtensorAndGradchecks) {
  for (const auto& c : kCases) {
    SCOPED_TRACE(shape_str(c.shape) + " over " + shape_str(c.dims));
    auto x = input(c.shape, 9);  // continuous random values: no ties
    const auto axes = normalized(c.dims, c.shape.size());
    Array<double> ref = xt::amax(x.value(), axes, xt::evaluation_strategy::immediate);
    for (bool keepdim : {false, true}) {
      auto y = amax(x, c.dims, keepdim);
      EXPECT_EQ(y.shape(), reduced_shape(c.shape, c.dims, keepdim));
      ASSERT_EQ(y.numel(), ref.size());
      for (std::size_t i = 0; i < ref.size(); ++i) EXPECT_EQ(y.value().data()[i], ref.data()[i]);
      const auto dims = c.dims;
      expect_gradcheck([&](const Inputs& in) { return amax(in[0], dims, keepdim); }, {x});
    }
  }
  expect_gradcheck([](const Inputs& in) { return max(in[0]); }, {input({3, 5}, 10)});
}

TEST(Reduction, AmaxSharesTheGradientAmongTies) {
  auto x = from_vector<double>({1, 3, 3, 2, 2, 2, 5, -1, 0}, {3, 3}, true);
  auto y = amax(x, {1});
  EXPECT_EQ(y.value(), (Array<double>{3, 2, 5}));
  y.backward(Tensor<double>(Array<double>{6, 3, 1}));
  EXPECT_EQ(x.grad(), (Array<double>{{0, 3, 3}, {1, 1, 1}, {1, 0, 0}}));
  // Ties across two dims at once.
  auto z = from_vector<double>({4, 1, 4, 4}, {2, 2}, true);
  amax(z, {0, 1}).backward();
  EXPECT_EQ(z.grad(), (Array<double>{{1.0 / 3, 0}, {1.0 / 3, 1.0 / 3}}));
}

TEST(Reduction, MaxOfAllElementsSharesTiesEvenly) {
  auto x = from_vector<double>({7, 1, 7, 7, -3, 2}, {2, 3}, true);
  auto y = max(x);
  EXPECT_EQ(y.shape(), Shape{});
  EXPECT_EQ(y.item(), 7.0);
  y.backward();
  EXPECT_EQ(x.grad(), (Array<double>{{1.0 / 3, 0, 1.0 / 3}, {1.0 / 3, 0, 0}}));
}

TEST(Reduction, MaxAlongDimReturnsFirstIndexAndRoutesGradientThere) {
  auto x = from_vector<double>({1, 4, 4, 0, 9, 2, 9, 9}, {2, 4}, true);
  auto [values, indices] = max(x, 1);
  EXPECT_EQ(values.value(), (Array<double>{4, 9}));
  EXPECT_EQ(indices, (IndexArray{1, 0}));
  values.backward(Tensor<double>(Array<double>{2, 5}));
  EXPECT_EQ(x.grad(), (Array<double>{{0, 2, 0, 0}, {5, 0, 0, 0}}));

  auto [v0, i0] = max(x, -2, true);
  EXPECT_EQ(v0.shape(), (Shape{1, 4}));
  EXPECT_EQ(v0.value(), (Array<double>{{9, 4, 9, 9}}));
  EXPECT_EQ(i0, (IndexArray{{1, 0, 1, 1}}));
}

TEST(Reduction, MaxAlongDimMatchesArgmaxAndGradchecks) {
  for (const Shape& s : {Shape{6}, Shape{3, 4}, Shape{2, 3, 4}, Shape{2, 3, 2, 3}}) {
    for (std::int64_t dim = -static_cast<std::int64_t>(s.size()); dim < static_cast<std::int64_t>(s.size()); ++dim) {
      for (bool keepdim : {false, true}) {
        SCOPED_TRACE(shape_str(s) + " dim " + std::to_string(dim) + (keepdim ? " keepdim" : ""));
        auto x = input(s, 12);
        auto [values, indices] = max(x, dim, keepdim);
        EXPECT_EQ(values.shape(), reduced_shape(s, {dim}, keepdim));
        EXPECT_EQ(shape_of(indices), reduced_shape(s, {dim}, keepdim));
        const std::size_t axis = normalized({dim}, s.size())[0];
        // Reference argmax by loops: position along the axis of flat index i is (i / inner) % size.
        std::size_t inner = 1;
        for (std::size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
        const std::size_t n_out = x.value().size() / s[axis];
        std::vector<double> ref_val(n_out, -1e300);
        std::vector<std::int64_t> ref_idx(n_out, -1);
        const double* px = x.value().data();
        for_each_with_output(s, {dim}, [&](std::size_t i, std::size_t o) {
          if (px[i] > ref_val[o]) {
            ref_val[o] = px[i];
            ref_idx[o] = static_cast<std::int64_t>((i / inner) % s[axis]);
          }
        });
        ASSERT_EQ(indices.size(), n_out);
        for (std::size_t i = 0; i < n_out; ++i) {
          EXPECT_EQ(indices.data()[i], ref_idx[i]);
          EXPECT_EQ(values.value().data()[i], ref_val[i]);
        }
        expect_gradcheck([&](const Inputs& in) { return max(in[0], dim, keepdim).first; }, {x});
      }
    }
  }
}

TEST(Reduction, MaxPropagatesNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto x = from_vector<double>({1, nan, 3, 4, 5, 6}, {2, 3});
  EXPECT_TRUE(std::isnan(max(x).item()));
  auto y = amax(x, {1});
  EXPECT_TRUE(std::isnan(y.value()(0)));
  EXPECT_EQ(y.value()(1), 6.0);
  auto [v, i] = max(x, 1);
  EXPECT_TRUE(std::isnan(v.value()(0)));
  EXPECT_EQ(i, (IndexArray{1, 2}));
}

TEST(Reduction, FloatMatchesDouble) {
  auto xd = input({4, 6, 5}, 13);
  Tensor<float> xf(Array<float>(xt::cast<float>(xd.value())));
  EXPECT_LT(max_abs_diff(sum(xf, {0, 2}).value(), sum(xd, {0, 2}).value()), 1e-5);
  EXPECT_LT(max_abs_diff(mean(xf, {1}).value(), mean(xd, {1}).value()), 1e-6);
  EXPECT_LT(max_abs_diff(var(xf, {-1}).value(), var(xd, {-1}).value()), 1e-6);
  EXPECT_LT(max_abs_diff(amax(xf, {1}).value(), amax(xd, {1}).value()), 1e-6);
}

// ---- errors -------------------------------------------------------------------------------------

TEST(Reduction, ErrorMessages) {
  auto x = zeros<double>({2, 3});
  XGRAD_EXPECT_THROW_MSG(sum(x, {2}), "sum", "out of range", "[-2, 1]", "got 2");
  XGRAD_EXPECT_THROW_MSG(mean(x, {-3}), "mean", "out of range", "got -3");
  XGRAD_EXPECT_THROW_MSG(var(x, {1, -1}), "var", "dim 1 appears more than once", "(1, -1)");
  XGRAD_EXPECT_THROW_MSG(sum(x, {}), "sum", "non-empty");
  XGRAD_EXPECT_THROW_MSG(amax(x, {}), "amax", "non-empty");
  XGRAD_EXPECT_THROW_MSG(max(x, 2), "max", "out of range");
}
