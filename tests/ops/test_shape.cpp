// Shape ops: forward values against xtensor views and hand-written arrays, gradchecks on 1-D to
// 4-D inputs (and on non-contiguous inputs), and the error messages of common mistakes.
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xview.hpp>

#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {
// 0, 1, 2, ... in the given shape: every element tells where it came from.
Tensor<double> iota(const Shape& shape, bool requires_grad = false) {
  std::size_t n = 1;
  for (auto s : shape) n *= s;
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<double>(i);
  return from_vector<double>(v, shape, requires_grad);
}
}  // namespace

// ---- transpose, permute ---------------------------------------------------------------------------

TEST(Shape, TransposeAndPermuteMatchXtensor) {
  auto x = input({2, 3, 4, 5}, 1);
  Array<double> ref_t = xt::transpose(x.value(), {0, 3, 2, 1});
  EXPECT_EQ(transpose(x, 1, -1).value(), ref_t);
  Array<double> ref_p = xt::transpose(x.value(), {2, 0, 3, 1});
  EXPECT_EQ(permute(x, {2, 0, -1, 1}).value(), ref_p);
  auto m = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(transpose(m, 0, 1).value(), (Array<double>{{1, 4}, {2, 5}, {3, 6}}));
  EXPECT_EQ(transpose(m, 1, 1).value(), m.value());
}

TEST(Shape, TransposeAndPermuteGradcheck) {
  expect_gradcheck([](const Inputs& in) { return transpose(in[0], 0, 0); }, {input({4}, 2)});
  expect_gradcheck([](const Inputs& in) { return transpose(in[0], 0, 1); }, {input({3, 4}, 2)});
  expect_gradcheck([](const Inputs& in) { return transpose(in[0], -1, 0); }, {input({2, 3, 4}, 2)});
  expect_gradcheck([](const Inputs& in) { return permute(in[0], {1, 2, 0}); }, {input({2, 3, 4}, 2)});
  expect_gradcheck([](const Inputs& in) { return permute(in[0], {3, 1, 0, 2}); }, {input({2, 3, 2, 4}, 2)});
  // A permutation that is not its own inverse, composed: checks the inverse in backward.
  expect_gradcheck([](const Inputs& in) { return permute(permute(in[0], {2, 0, 3, 1}), {1, 3, 0, 2}) * in[0]; },
                   {input({2, 3, 2, 4}, 3)});
}

// ---- reshape family -------------------------------------------------------------------------------

TEST(Shape, ReshapeInfersAndKeepsOrder) {
  auto x = iota({2, 3, 4});
  auto y = reshape(x, {4, -1});
  EXPECT_EQ(y.shape(), (Shape{4, 6}));
  EXPECT_EQ(y.value()(1, 0), 6.0);
  EXPECT_EQ(view(x, {24}).shape(), Shape{24});
  EXPECT_EQ(reshape(x, {-1}).shape(), Shape{24});
  EXPECT_EQ(reshape(iota({1}), {}).shape(), Shape{});
  EXPECT_EQ(reshape(zeros<double>({0, 3}), {3, -1, 2}).shape(), (Shape{3, 0, 2}));
}

TEST(Shape, FlattenSqueezeUnsqueezeShapes) {
  auto x = iota({2, 3, 4, 5});
  EXPECT_EQ(flatten(x).shape(), Shape{120});
  EXPECT_EQ(flatten(x, 1).shape(), (Shape{2, 60}));
  EXPECT_EQ(flatten(x, 1, 2).shape(), (Shape{2, 12, 5}));
  EXPECT_EQ(flatten(x, -2, -1).shape(), (Shape{2, 3, 20}));
  EXPECT_EQ(flatten(x, 2, 2).shape(), (Shape{2, 3, 4, 5}));
  EXPECT_EQ(flatten(from_vector<double>({7.0}, {})).shape(), Shape{1});
  EXPECT_EQ(flatten(x, 1, 2).value(), xt::reshape_view(x.value(), {2, 12, 5}));

  auto s = iota({1, 3, 1, 2});
  EXPECT_EQ(squeeze(s).shape(), (Shape{3, 2}));
  EXPECT_EQ(squeeze(s, 0).shape(), (Shape{3, 1, 2}));
  EXPECT_EQ(squeeze(s, -2).shape(), (Shape{1, 3, 2}));
  EXPECT_EQ(squeeze(s, 1).shape(), (Shape{1, 3, 1, 2}));  // not size 1: unchanged
  EXPECT_EQ(squeeze(from_vector<double>({7.0}, {})).shape(), Shape{});
  EXPECT_EQ(squeeze(iota({1, 1})).shape(), Shape{});

  auto u = iota({3, 2});
  EXPECT_EQ(unsqueeze(u, 0).shape(), (Shape{1, 3, 2}));
  EXPECT_EQ(unsqueeze(u, 2).shape(), (Shape{3, 2, 1}));
  EXPECT_EQ(unsqueeze(u, -1).shape(), (Shape{3, 2, 1}));
  EXPECT_EQ(unsqueeze(u, -3).shape(), (Shape{1, 3, 2}));
  EXPECT_EQ(unsqueeze(from_vector<double>({7.0}, {}), 0).shape(), Shape{1});
  EXPECT_EQ(unsqueeze(u, 1).value(), xt::reshape_view(u.value(), {3, 1, 2}));
}

TEST(Shape, ReshapeFamilyGradcheck) {
  expect_gradcheck([](const Inputs& in) { return reshape(in[0], {2, -1}); }, {input({6}, 4)});
  expect_gradcheck([](const Inputs& in) { return reshape(in[0], {4, 3}) * 2.0; }, {input({3, 4}, 4)});
  expect_gradcheck([](const Inputs& in) { return reshape(in[0], {-1, 4}); }, {input({2, 3, 4}, 4)});
  expect_gradcheck([](const Inputs& in) { return flatten(in[0], 1); }, {input({2, 3, 2, 2}, 4)});
  expect_gradcheck([](const Inputs& in) { return squeeze(in[0]); }, {input({1, 3, 1, 2}, 4)});
  expect_gradcheck([](const Inputs& in) { return squeeze(in[0], 2); }, {input({1, 3, 1, 2}, 4)});
  expect_gradcheck([](const Inputs& in) { return unsqueeze(in[0], -2); }, {input({3, 2}, 4)});
  // Non-contiguous input: the element order seen by reshape is the transposed one.
  expect_gradcheck([](const Inputs& in) { return reshape(transpose(in[0], 0, 1), {-1}) * in[1]; },
                   {input({3, 4}, 5), input({12}, 6)});
  auto x = iota({2, 3});
  EXPECT_EQ(reshape(transpose(x, 0, 1), {-1}).value(), (Array<double>{0, 3, 1, 4, 2, 5}));
}

// ---- expand ---------------------------------------------------------------------------------------

TEST(Shape, ExpandValuesAndGradient) {
  auto x = from_vector<double>({1, 2, 3}, {3, 1}, true);
  auto y = expand(x, {2, -1, 4});
  EXPECT_EQ(y.shape(), (Shape{2, 3, 4}));
  Array<double> ref = xt::broadcast(x.value(), {2, 3, 4});
  EXPECT_EQ(y.value(), ref);
  y.backward(ones<double>({2, 3, 4}));
  EXPECT_EQ(x.grad(), xt::reshape_view(Array<double>{8, 8, 8}, {3, 1}));
  EXPECT_EQ(expand(from_vector<double>({5.0}, {}), {2, 2}).value(), (Array<double>{{5, 5}, {5, 5}}));

  expect_gradcheck([](const Inputs& in) { return expand(in[0], {4, 3}); }, {input({3}, 7)});
  expect_gradcheck([](const Inputs& in) { return expand(in[0], {2, 3, -1}); }, {input({3, 1}, 7)});
  expect_gradcheck([](const Inputs& in) { return expand(in[0], {2, -1, 3, 2}); }, {input({1, 4, 1, 2}, 7)});
  expect_gradcheck([](const Inputs& in) { return expand(in[0], {3, 2}); }, {input({}, 7)});
  expect_gradcheck([](const Inputs& in) { return expand(transpose(in[0], 0, 1), {2, 3, 4}); }, {input({4, 3}, 7)});
}

// ---- cat, stack -----------------------------------------------------------------------------------

TEST(Shape, CatValues) {
  auto a = from_vector<double>({1, 2, 3, 4}, {2, 2});
  auto b = from_vector<double>({5, 6}, {2, 1});
  EXPECT_EQ(cat<double>({a, b}, 1).value(), (Array<double>{{1, 2, 5}, {3, 4, 6}}));
  EXPECT_EQ(cat<double>({a, transpose(b, 0, 1)}, 0).value(), (Array<double>{{1, 2}, {3, 4}, {5, 6}}));
  EXPECT_EQ(cat<double>({a, zeros<double>({2, 0}), b}, -1).shape(), (Shape{2, 3}));
  auto x = input({2, 3, 4}, 8), y = input({2, 5, 4}, 9);
  Array<double> ref = xt::concatenate(xt::xtuple(x.value(), y.value()), 1);
  EXPECT_EQ(cat<double>({x, y}, 1).value(), ref);
}

TEST(Shape, CatGradcheck) {
  expect_gradcheck([](const Inputs& in) { return cat<double>({in[0], in[1], in[2]}); },
                   {input({3}, 1), input({2}, 2), input({4}, 3)});
  expect_gradcheck([](const Inputs& in) { return cat<double>({in[0], in[1]}, 1); },
                   {input({3, 2}, 1), input({3, 4}, 2)});
  expect_gradcheck([](const Inputs& in) { return cat<double>({in[0], in[1]}, -2); },
                   {input({2, 1, 4}, 1), input({2, 3, 4}, 2)});
  expect_gradcheck([](const Inputs& in) { return cat<double>({in[0], in[1]}, 3); },
                   {input({2, 2, 3, 1}, 1), input({2, 2, 3, 2}, 2)});
  // One input without grad, one input used twice, and a non-contiguous input.
  auto constant = input({2, 3}, 4);
  constant.requires_grad_(false);
  expect_gradcheck([](const Inputs& in) { return cat<double>({in[0], in[1], in[0], transpose(in[2], 0, 1)}, 0); },
                   {input({1, 3}, 1), constant, input({3, 2}, 5)});
}

TEST(Shape, StackValuesAndGradcheck) {
  auto a = from_vector<double>({1, 2, 3}, {3});
  auto b = from_vector<double>({4, 5, 6}, {3});
  EXPECT_EQ(stack<double>({a, b}).value(), (Array<double>{{1, 2, 3}, {4, 5, 6}}));
  EXPECT_EQ(stack<double>({a, b}, 1).value(), (Array<double>{{1, 4}, {2, 5}, {3, 6}}));
  EXPECT_EQ(stack<double>({a, b}, -1).shape(), (Shape{3, 2}));
  auto x = input({2, 3}, 1), y = input({2, 3}, 2);
  auto s = stack<double>({x, y}, 1);
  ASSERT_EQ(s.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(Array<double>(xt::view(s.value(), xt::all(), 0, xt::all())), x.value());
  EXPECT_EQ(Array<double>(xt::view(s.value(), xt::all(), 1, xt::all())), y.value());
  for (int dim : {0, 1, 2, -1}) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    expect_gradcheck([dim](const Inputs& in) { return stack<double>({in[0], in[1], in[0]}, dim); },
                     {input({2, 3}, 1), input({2, 3}, 2)});
  }
  expect_gradcheck([](const Inputs& in) { return stack<double>({in[0], in[1]}, 0); }, {input({}, 1), input({}, 2)});
}

// ---- narrow, slice --------------------------------------------------------------------------------

TEST(Shape, NarrowAndSliceValues) {
  auto x = iota({3, 6});
  EXPECT_EQ(narrow(x, 1, 2, 3).value(), (Array<double>{{2, 3, 4}, {8, 9, 10}, {14, 15, 16}}));
  EXPECT_EQ(narrow(x, 0, -1, 1).value(), (Array<double>{{12, 13, 14, 15, 16, 17}}));
  EXPECT_EQ(narrow(x, 1, 6, 0).shape(), (Shape{3, 0}));
  EXPECT_EQ(slice(x, 1, 1, 6, 2).value(), (Array<double>{{1, 3, 5}, {7, 9, 11}, {13, 15, 17}}));
  EXPECT_EQ(slice(x, -1, -2, 100).value(), (Array<double>{{4, 5}, {10, 11}, {16, 17}}));  // x[:, -2:]
  EXPECT_EQ(slice(x, 0, -100, 2).value(), (Array<double>{{0, 1, 2, 3, 4, 5}, {6, 7, 8, 9, 10, 11}}));
  EXPECT_EQ(slice(x, 1, 4, 2).shape(), (Shape{3, 0}));        // end before start: empty
  EXPECT_EQ(slice(x, 1, 0, 6, 4).value(), (Array<double>{{0, 4}, {6, 10}, {12, 16}}));
  EXPECT_EQ(slice(x, 1, 7, 9).shape(), (Shape{3, 0}));
  auto y = input({2, 5, 3}, 3);
  Array<double> ref = xt::view(y.value(), xt::all(), xt::range(1, 5, 3), xt::all());
  EXPECT_EQ(slice(y, 1, 1, 5, 3).value(), ref);
}

// A huge step: (end - start + step - 1) / step overflowed (a negative length); Python gives x[0:5:big] = x[0].
TEST(Shape, SliceWithAHugeStep) {
  auto x = iota({3, 6});
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  Array<double> first_column{0.0, 6.0, 12.0};
  first_column.reshape({3, 1});
  EXPECT_EQ(slice(x, 1, 0, 6, max).value(), first_column);
  EXPECT_EQ(slice(x, 0, 1, max, max - 1).value(), (Array<double>{{6, 7, 8, 9, 10, 11}}));
  EXPECT_EQ(slice(x, 1, std::numeric_limits<std::int64_t>::min(), max, 4).value(),
            (Array<double>{{0, 4}, {6, 10}, {12, 16}}));
  XGRAD_EXPECT_THROW_MSG(narrow(x, 1, 3, max), "narrow: start (3) + length (9223372036854775807) exceeds");
}

TEST(Shape, NarrowAndSliceGradcheck) {
  expect_gradcheck([](const Inputs& in) { return narrow(in[0], 0, 1, 3); }, {input({5}, 1)});
  expect_gradcheck([](const Inputs& in) { return narrow(in[0], -1, 1, 2); }, {input({3, 4}, 1)});
  expect_gradcheck([](const Inputs& in) { return narrow(in[0], 1, 0, 2); }, {input({2, 3, 4}, 1)});
  expect_gradcheck([](const Inputs& in) { return slice(in[0], 0, 1, 100, 2); }, {input({7}, 1)});
  expect_gradcheck([](const Inputs& in) { return slice(in[0], 1, -3, -1); }, {input({2, 5, 3}, 1)});
  expect_gradcheck([](const Inputs& in) { return slice(in[0], 2, 0, 5, 3); }, {input({2, 2, 5, 2}, 1)});
  expect_gradcheck([](const Inputs& in) { return slice(transpose(in[0], 0, 1), 0, 1, 4, 2); }, {input({3, 4}, 1)});
  // Pieces of one tensor put back together: the gradient reaches every element once.
  expect_gradcheck(
      [](const Inputs& in) { return cat<double>({narrow(in[0], 1, 2, 2), slice(in[0], 1, 0, 2)}, 1) * in[1]; },
      {input({3, 4}, 2), input({3, 4}, 3)});
}

// ---- errors ---------------------------------------------------------------------------------------

TEST(Shape, ErrorMessages) {
  auto x = zeros<double>({2, 3});
  XGRAD_EXPECT_THROW_MSG(reshape(x, {4, 2}), "reshape", "(2, 3)", "(4, 2)");
  XGRAD_EXPECT_THROW_MSG(reshape(x, {4, -1}), "reshape", "(2, 3)", "(4, -1)");
  XGRAD_EXPECT_THROW_MSG(reshape(x, {-1, -1}), "reshape", "only one dimension");
  XGRAD_EXPECT_THROW_MSG(reshape(zeros<double>({0, 3}), {0, -1}), "reshape", "any value");
  XGRAD_EXPECT_THROW_MSG(transpose(x, 0, 2), "transpose", "out of range", "got 2");
  XGRAD_EXPECT_THROW_MSG(permute(x, {0}), "permute", "expected 2 dims", "(0)");
  XGRAD_EXPECT_THROW_MSG(permute(x, {1, -1}), "permute", "more than once");
  XGRAD_EXPECT_THROW_MSG(unsqueeze(x, 3), "unsqueeze", "out of range");
  XGRAD_EXPECT_THROW_MSG(squeeze(x, -3), "squeeze", "out of range");
  XGRAD_EXPECT_THROW_MSG(flatten(x, 1, 0), "flatten", "start_dim");
  XGRAD_EXPECT_THROW_MSG(expand(x, {3, 3}), "expand", "non-singleton dimension 0", "(3, 3)", "(2, 3)");
  XGRAD_EXPECT_THROW_MSG(expand(x, {3}), "expand", "at least");
  XGRAD_EXPECT_THROW_MSG(expand(x, {-1, 2, 3}), "expand", "leading");
  XGRAD_EXPECT_THROW_MSG(cat<double>({x, zeros<double>({3, 2})}, 1), "cat", "(2, 3)", "(3, 2)", "tensor 1");
  XGRAD_EXPECT_THROW_MSG(cat<double>({x, zeros<double>({2, 3, 1})}), "cat", "(2, 3)", "(2, 3, 1)");
  XGRAD_EXPECT_THROW_MSG(cat<double>({}), "cat", "non-empty");
  XGRAD_EXPECT_THROW_MSG(cat<double>({x}, 2), "cat", "out of range");
  XGRAD_EXPECT_THROW_MSG(stack<double>({x, zeros<double>({3, 2})}), "stack", "(2, 3)", "(3, 2)");
  XGRAD_EXPECT_THROW_MSG(narrow(x, 1, 2, 2), "narrow", "exceeds", "size 3");
  XGRAD_EXPECT_THROW_MSG(narrow(x, 1, -4, 1), "narrow", "out of range");
  // A negative length is named as such (it used to read "start (0) + length (-1) exceeds ...").
  XGRAD_EXPECT_THROW_MSG(narrow(x, 1, 0, -1), "narrow", "length must be non-negative, got -1", "size 3");
  XGRAD_EXPECT_THROW_MSG(narrow(x, 1, 1, std::numeric_limits<std::int64_t>::max()), "narrow", "exceeds", "size 3");
  XGRAD_EXPECT_THROW_MSG(slice(x, 1, 0, 2, 0), "slice", "step must be positive");
  XGRAD_EXPECT_THROW_MSG(slice(x, 2, 0, 2), "slice", "out of range");
}
