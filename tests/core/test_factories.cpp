// core/factories.hpp: xgrad::tensor (torch::tensor) and the factories' shapes, which take LibTorch's
// int64 sizes (Tensor::size()) beside std::size_t ones.
#include "test_util.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

using namespace xgrad;
using namespace xgrad::testing;

TEST(Factories, TensorFromBracedValuesAsTorchTensor) {
  auto v = xgrad::tensor<float>({1, 2, 3});
  EXPECT_EQ(v.shape(), (Shape{3}));
  EXPECT_EQ(v.value(), (Array<float>{1, 2, 3}));
  EXPECT_TRUE(v.is_leaf());
  EXPECT_FALSE(v.requires_grad());

  auto m = xgrad::tensor<float>({{1, 2}, {3, 4}, {5, 6}});
  EXPECT_EQ(m.shape(), (Shape{3, 2}));
  EXPECT_EQ(m.value(), (Array<float>{{1, 2}, {3, 4}, {5, 6}}));

  auto s = xgrad::tensor<double>(2.5, /*requires_grad=*/true);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item(), 2.5);
  EXPECT_TRUE(s.requires_grad());

  // requires_grad: a leaf that gets its gradient.
  auto w = xgrad::tensor<double>({{1, 2}, {3, 4}}, /*requires_grad=*/true);
  EXPECT_TRUE(w.requires_grad());
  sum(w * w).backward();
  EXPECT_EQ(w.grad(), (Array<double>{{2, 4}, {6, 8}}));
  auto d = xgrad::tensor<double>({0.5, -1.5}, true);
  sum(d * 3.0).backward();
  EXPECT_EQ(d.grad(), (Array<double>{3, 3}));

  // An empty row list is a (0, 0) tensor; rows of different lengths are refused, naming the row.
  EXPECT_EQ(xgrad::tensor<float>(std::initializer_list<std::initializer_list<float>>{}).shape(), (Shape{0, 0}));
  EXPECT_EQ(error_of([] {
              xgrad::tensor<float>({{1, 2}, {3}});
            }),
            "tensor: expected rows of one length (2, as row 0), got 1 values in row 1");
}

// zeros<float>({x.size(0), 3}) was a narrowing error under clang (size() is int64, Shape holds
// std::size_t); every factory now takes int64 sizes, std::size_t sizes and a Shape, mixed too.
TEST(Factories, ShapesFromInt64AndSizeTSizes) {
  const auto x = zeros<float>({2, 5});
  const std::int64_t rows = x.size(0);
  const std::size_t cols = x.shape()[1];
  EXPECT_EQ(zeros<float>({x.size(0), 3}).shape(), (Shape{2, 3}));
  EXPECT_EQ(ones<double>({rows, x.size(-1)}).shape(), (Shape{2, 5}));
  const auto f = full<float>({cols, rows}, 7.0f);
  EXPECT_EQ(f.shape(), (Shape{5, 2}));
  EXPECT_EQ(f.value()(4, 1), 7.0f);
  EXPECT_EQ(rand<float>({x.size(1)}).shape(), (Shape{5}));
  EXPECT_EQ(randn<double>({rows, cols}, true).shape(), (Shape{2, 5}));
  Generator g(3);
  EXPECT_EQ(randn<float>({x.size(0)}, g).shape(), (Shape{2}));
  EXPECT_EQ(rand<float>({cols}, g, false).shape(), (Shape{5}));
  EXPECT_EQ(from_vector<float>({1, 2, 3, 4, 5, 6}, {x.size(0), std::int64_t{3}}).shape(), (Shape{2, 3}));
  EXPECT_EQ(zeros<float>(x.shape()).shape(), (Shape{2, 5}));  // a Shape as before
  const Shape shape{4};
  EXPECT_EQ(ones<float>(shape).shape(), (Shape{4}));
  EXPECT_EQ(zeros<float>({}).dim(), 0);
  EXPECT_EQ(zeros<float>({2u, 3}).shape(), (Shape{2, 3}));

  // A negative size is refused by the factory that got it.
  EXPECT_EQ(error_of([&] {
              zeros<float>({x.size(0) - 3, 2});
            }),
            "zeros: expected non-negative sizes, got a negative size -1");
  EXPECT_EQ(error_of([] {
              from_vector<float>({}, {2, -4});
            }),
            "from_vector: expected non-negative sizes, got a negative size -4");
}

// Tensor::sizes() and shape() give std::int64_t sizes, as LibTorch's sizes() (shape() gave a Shape of
// std::size_t, so {x.shape()[0], n} with an int64 n was a narrowing error); they go back into the
// factories and shape ops as they are, convert to a Shape and compare with one.
TEST(Factories, SizesAreInt64AsLibTorch) {
  const auto x = zeros<float>({2, 3});
  static_assert(std::is_same_v<std::decay_t<decltype(x.sizes()[0])>, std::int64_t>);
  static_assert(std::is_same_v<std::decay_t<decltype(x.shape()[0])>, std::int64_t>);
  EXPECT_EQ(x.sizes(), (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(x.shape(), x.sizes());
  EXPECT_EQ(x.sizes(), (Shape{2, 3}));
  EXPECT_NE(x.sizes(), (Shape{3, 2}));
  EXPECT_EQ((Shape{2, 3}), x.shape());
  EXPECT_EQ(x.sizes().vec(), (std::vector<std::int64_t>{2, 3}));
  const Shape shape = x.sizes();
  EXPECT_EQ(shape, (Shape{2, 3}));
  EXPECT_EQ(zeros<float>(x.sizes()).sizes(), (Shape{2, 3}));
  EXPECT_EQ(ones<double>({x.shape()[1], x.shape()[0] * 2}).sizes(), (Shape{3, 4}));
  EXPECT_EQ(reshape(x, {x.shape()[1], -1}).sizes(), (Shape{3, 2}));
  EXPECT_EQ(zeros<float>({}).sizes(), Shape{});
  EXPECT_EQ(detail::concat("got ", x.sizes()), "got (2, 3)");  // as a Shape prints, in errors
  // A std::vector<std::int64_t> (IntArrayRef) with a negative size is refused, naming the factory.
  EXPECT_EQ(error_of([] {
              rand<float>(std::vector<std::int64_t>{3, -2});
            }),
            "rand: expected non-negative sizes, got a negative size -2");
  EXPECT_EQ(error_of([] {
              const Shape s = Sizes{4, -5};
              (void)s;
            }),
            "Sizes: expected non-negative sizes to convert to a Shape, got (4, -5)");
}
