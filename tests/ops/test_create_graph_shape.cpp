// Higher-order gradients (create_graph) of the ops that move values around: shape.cpp, indexing.cpp,
// triangular.cpp, sorting.cpp (tril, triu, topk, sort) and reduction.cpp (var, amax, max). The
// registry's GradgradcheckList checks their second derivatives against finite differences; here,
// three levels deep, the backward ops they use (slice_backward, scatter_rows / gather_rows,
// put_positions / take_positions), each the other's derivative, and what finite differences
// cannot show: embedding's padding_idx row, amax's ties, a changed saved value refused.
#include "test_util.hpp"

#include <functional>
#include <optional>
#include <string>
#include <vector>

using namespace xgrad;
using namespace xgrad::testing;

namespace {

using Op = std::function<T64(const T64&)>;
// J v for the op's Jacobian J at x: f(v) itself for a linear op.
using Jvp = std::function<Array<double>(const T64& x, const T64& v)>;

// f is linear in x near x (a selection, a permutation, a scatter). Differentiates it three times,
// each time with create_graph and a seed that requires grad:
//   g = J^T u             (d/dx of f(x).u; its history runs through u)
//   h = d(g.v)/du = J v   (the backward's backward)
//   k = d(h.w)/dv = J^T w (and once more)
// g and k must equal the first-order (fused) backward's values exactly, h must equal J v.
void expect_three_levels(const Op& f, const T64& x, const Jvp& jvp = nullptr) {
  const Shape out_shape = f(x).shape();
  const T64 u = input(out_shape, 11), v = input(x.shape(), 12), w = input(out_shape, 13);
  const auto first_order = [&](const T64& seed) { return autograd::grad({f(x)}, {x}, {T64(seed.value())})[0].value(); };
  const T64 g = autograd::grad({f(x)}, {x}, {u}, std::nullopt, /*create_graph=*/true)[0];
  ASSERT_TRUE(g.requires_grad());
  EXPECT_EQ(max_abs_diff(g.value(), first_order(u)), 0.0);
  const T64 h = autograd::grad({g}, {u}, {v}, std::nullopt, /*create_graph=*/true)[0];
  ASSERT_TRUE(h.requires_grad());
  const Array<double> expected_h = jvp ? jvp(x, v) : f(T64(v.value())).value();
  EXPECT_EQ(max_abs_diff(h.value(), expected_h), 0.0);
  const T64 k = autograd::grad({h}, {v}, {w}, std::nullopt, /*create_graph=*/true)[0];
  ASSERT_TRUE(k.requires_grad());
  EXPECT_EQ(max_abs_diff(k.value(), first_order(w)), 0.0);
}

// J v of an op that picks x[r, index[r, j]] along the last dim of a 2-D x (topk, sort, max).
Array<double> take_last_dim(const T64& v, const IndexArray& index) {
  const std::size_t rows = index.shape()[0], m = index.dimension() == 2 ? index.shape()[1] : 1;
  Array<double> out = Array<double>::from_shape(index.shape());
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t j = 0; j < m; ++j)
      out.data()[r * m + j] = v.value().data()[r * v.shape()[1] + static_cast<std::size_t>(index.data()[r * m + j])];
  return out;
}

}  // namespace

TEST(CreateGraphShape, PermutationsThreeLevels) {
  expect_three_levels([](const T64& a) { return transpose(a, 0, 2); }, input({2, 3, 4}, 1));
  expect_three_levels([](const T64& a) { return permute(a, {1, 2, 0}); }, input({2, 3, 4}, 2));
}

TEST(CreateGraphShape, CatStackThreeLevels) {
  // x twice in one cat: both blocks' gradients add up.
  expect_three_levels([](const T64& a) { return cat<double>({a, narrow(a, 1, 1, 2), a}, 1); }, input({2, 3, 4}, 3));
  expect_three_levels([](const T64& a) { return stack<double>({a, a}, -1); }, input({2, 3}, 4));
  // An empty leading dim: the blocks are (0, chunk) and the gradients empty.
  expect_three_levels([](const T64& a) { return cat<double>({a, a}, 1); }, input({0, 3}, 5));
}

TEST(CreateGraphShape, NarrowSliceThreeLevels) {
  expect_three_levels([](const T64& a) { return narrow(a, 1, 1, 2); }, input({2, 4, 3}, 6));
  expect_three_levels([](const T64& a) { return slice(a, -1, 0, -1, 2); }, input({2, 3, 6}, 7));
  expect_three_levels([](const T64& a) { return slice(a, 0, 5, 9); }, input({3, 2}, 8));  // empty slice
}

TEST(CreateGraphShape, IndexSelectWithRepeatsThreeLevels) {
  const IndexArray index{2, 0, 2, 2, 1};
  expect_three_levels([&](const T64& a) { return index_select(a, 1, index); }, input({2, 3, 4}, 9));
  expect_three_levels([](const T64& a) { return index_select(a, 0, IndexArray{0}); }, input({}, 10));  // 0-d
}

TEST(CreateGraphShape, EmbeddingPaddingRowGetsNoGradientAtAnyOrder) {
  const IndexArray indices = IndexArray({{1, 3, 1}, {0, 3, 2}});
  const T64 weight = input({4, 5}, 14);
  const auto f = [&](const T64& w) { return embedding<double>(indices, w, /*padding_idx=*/-1); };  // row 3
  // J v: v's rows at the indices, zero at the padding positions (J^T never writes row 3).
  expect_three_levels(f, weight, [&](const T64&, const T64& v) {
    Array<double> e = embedding<double>(indices, T64(v.value())).value();
    for (std::size_t j = 0; j < indices.size(); ++j)
      if (indices.data()[j] == 3)
        for (std::size_t c = 0; c < 5; ++c) e.data()[j * 5 + c] = 0;
    return e;
  });
  const T64 u = input({2, 3, 5}, 15);
  const T64 g = autograd::grad({f(weight)}, {weight}, {u}, std::nullopt, true)[0];
  for (std::size_t c = 0; c < 5; ++c) EXPECT_EQ(g.value()(3, c), 0.0);
  EXPECT_EQ(g.value()(1, 2), u.value()(0, 0, 2) + u.value()(0, 2, 2));                       // a repeated index adds up
  expect_three_levels([&](const T64& w) { return embedding<double>(indices, w); }, weight);  // no padding
}

TEST(CreateGraphShape, MaskedFillWhereTrianglesThreeLevels) {
  const BoolArray mask = BoolArray({{true, false, false}, {false, true, true}});
  // Affine: J v fills with 0.
  expect_three_levels([&](const T64& a) { return masked_fill(a, mask, 2.5); }, input({2, 3}, 16),
                      [&](const T64&, const T64& v) { return masked_fill(T64(v.value()), mask, 0.0).value(); });
  // b broadcast from a row of x: its gradient sums over the rows where the condition fails.
  expect_three_levels([&](const T64& a) { return xgrad::where(mask, a, reshape(narrow(a, 0, 1, 1), {3})); },
                      input({2, 3}, 17));
  expect_three_levels([](const T64& a) { return tril(a, -1); }, input({2, 3, 4}, 18));
  expect_three_levels([](const T64& a) { return triu(a, 1); }, input({3, 4}, 19));
}

TEST(CreateGraphShape, TopkSortMaxThreeLevels) {
  const T64 x = input({3, 5}, 20);
  const auto by_index = [](const IndexArray& index) {
    return [index](const T64&, const T64& v) { return take_last_dim(v, index); };
  };
  expect_three_levels([](const T64& a) { return topk(a, 2, -1).first; }, x, by_index(topk(x, 2, -1).second));
  expect_three_levels([](const T64& a) { return topk(a, 3, -1, false, false).first; }, x,
                      by_index(topk(x, 3, -1, false, false).second));
  expect_three_levels([](const T64& a) { return sort(a, -1, true).first; }, x, by_index(sort(x, -1, true).second));
  expect_three_levels([](const T64& a) { return max(a, -1, /*keepdim=*/true).first; }, x,
                      by_index(max(x, -1, true).second));
}

TEST(CreateGraphShape, AmaxSplitsAmongTiesAtEveryOrder) {
  // Row 0 has its maximum 2 three times, row 1 once.
  const T64 x = from_vector<double>({2, 1, 2, 2, -1, 0, 4, 3}, {2, 4}, true);
  const auto mean_of_ties = [](const T64&, const T64& v) {
    Array<double> e = Array<double>::from_shape({2});
    const double third = 1.0 / 3;  // each tie's share, summed in the op's order
    e(0) = v.value()(0, 0) * third + v.value()(0, 2) * third + v.value()(0, 3) * third;
    e(1) = v.value()(1, 2);
    return e;
  };
  expect_three_levels([](const T64& a) { return amax(a, {1}); }, x, mean_of_ties);
  const T64 u = from_vector<double>({0.6, -2}, {2}, true);
  const T64 g = autograd::grad({amax(x, {1})}, {x}, {u}, std::nullopt, true)[0];
  EXPECT_DOUBLE_EQ(g.value()(0, 3), 0.2);
  EXPECT_EQ(g.value()(0, 1), 0.0);
  // max(): all ties of the whole tensor; the second derivative w.r.t. x is zero (the mask is constant).
  const T64 y = from_vector<double>({1, 3, 3, 0}, {4}, true);
  const T64 s = from_vector<double>({4.0}, {}, true);
  const T64 gy = autograd::grad({max(y)}, {y}, {s}, std::nullopt, true)[0];
  EXPECT_EQ(gy.value()(1), 2.0);
  EXPECT_EQ(gy.value()(0), 0.0);
  const auto second = autograd::grad({sum(gy * gy)}, {y, s}, {}, std::nullopt, false, /*allow_unused=*/true);
  EXPECT_FALSE(second[0].defined());                   // no path from y: the mask is a constant
  EXPECT_DOUBLE_EQ(second[1].value()(), 2 * 4.0 / 2);  // d/ds of 2 (s/2)^2
}

TEST(CreateGraphShape, VarHessianVectorProduct) {
  // var over dim 1, unbiased: d^2(u . var)/dx^2 v = u * 2/(n-1) * (v - mean(v)) row by row.
  const T64 x = input({2, 4}, 21);
  const T64 u = from_vector<double>({0.5, -1.5}, {2}, false);
  const T64 v = input({2, 4}, 22);
  const T64 g = autograd::grad({var(x, {1})}, {x}, {u}, std::nullopt, true)[0];
  const T64 hv = autograd::grad({sum(g * T64(v.value()))}, {x})[0];
  for (std::size_t r = 0; r < 2; ++r) {
    double m = 0;
    for (std::size_t c = 0; c < 4; ++c) m += v.value()(r, c) / 4;
    for (std::size_t c = 0; c < 4; ++c)
      EXPECT_NEAR(hv.value()(r, c), u.value()(r) * 2.0 / 3.0 * (v.value()(r, c) - m), 1e-14);
  }
}

TEST(CreateGraphShape, ChangedSavedValuesAreRefusedUnderCreateGraph) {
  // amax's differentiable backward reads its output, var's its input: changed in place, a
  // backward with create_graph refuses them as the first-order one does.
  const T64 x = input({2, 3}, 23);
  T64 y = amax(x, {1});
  y.mutable_value()(0) += 1;
  const std::string e1 = error_of([&] { autograd::grad({sum(y)}, {x}, {}, std::nullopt, true); });
  EXPECT_NE(e1.find("modified by an inplace operation"), std::string::npos) << e1;
  EXPECT_NE(e1.find("amax"), std::string::npos) << e1;

  const T64 w = input({2, 3}, 24);
  T64 b = w * 2.0;
  const T64 z = var(b);
  b.mutable_value()(0, 0) += 1;
  const std::string e2 = error_of([&] { autograd::grad({z}, {w}, {}, std::nullopt, true); });
  EXPECT_NE(e2.find("modified by an inplace operation"), std::string::npos) << e2;
  EXPECT_NE(e2.find("var"), std::string::npos) << e2;
}
