// Indexing ops: index_select, embedding, masked_fill, where. Forward values against loops and
// hand-written arrays, gradchecks (repeated indices, masks, broadcasting, non-contiguous
// inputs), and the error messages of common mistakes.
#include <xtensor/xview.hpp>

#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

// xgrad::where is always called qualified here: with an xt::xarray condition, an unqualified call
// would also find xt::where through argument-dependent lookup.

namespace {
// A mask of the given shape, row-major (nested braced lists with size-1 dims are ambiguous or
// misread by xt::xarray's constructors).
BoolArray mask(const Shape& shape, std::initializer_list<bool> values) {
  BoolArray m = BoolArray::from_shape(shape);
  EXPECT_EQ(m.size(), values.size());
  std::copy(values.begin(), values.end(), m.begin());
  return m;
}
BoolArray column(std::initializer_list<bool> values) { return mask({values.size(), 1}, values); }
}  // namespace

// ---- index_select ---------------------------------------------------------------------------------

TEST(Indexing, IndexSelectMatchesViews) {
  auto x = input({3, 4, 5}, 1);
  const IndexArray index{2, 0, 2, 3};
  for (int dim : {0, 1, 2, -1}) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    const std::size_t k = dim < 0 ? dim + 3 : dim;
    IndexArray idx = k == 0 ? IndexArray{2, 0, 2} : index;  // dim 0 has size 3
    auto y = index_select(x, dim, idx);
    Shape expected = x.shape();
    expected[k] = idx.size();
    ASSERT_EQ(y.shape(), expected);
    for (std::size_t j = 0; j < idx.size(); ++j) {
      const auto r = static_cast<std::size_t>(idx(j));
      Array<double> got, ref;
      if (k == 0) {
        got = xt::view(y.value(), j);
        ref = xt::view(x.value(), r);
      } else if (k == 1) {
        got = xt::view(y.value(), xt::all(), j);
        ref = xt::view(x.value(), xt::all(), r);
      } else {
        got = xt::view(y.value(), xt::all(), xt::all(), j);
        ref = xt::view(x.value(), xt::all(), xt::all(), r);
      }
      EXPECT_EQ(got, ref);
    }
  }
  EXPECT_EQ(index_select(x, 1, IndexArray::from_shape({0})).shape(), (Shape{3, 0, 5}));
  EXPECT_EQ(index_select(x, 1, IndexArray(2)).shape(), (Shape{3, 1, 5}));  // 0-d index
}

TEST(Indexing, IndexSelectRepeatedIndicesAddGradients) {
  auto x = from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2}, true);
  auto y = index_select(x, 0, IndexArray{2, 0, 2, 2});
  EXPECT_EQ(y.value(), (Array<double>{{5, 6}, {1, 2}, {5, 6}, {5, 6}}));
  y.backward(Tensor<double>(Array<double>{{1, 10}, {2, 20}, {3, 30}, {4, 40}}));
  EXPECT_EQ(x.grad(), (Array<double>{{2, 20}, {0, 0}, {8, 80}}));
}

TEST(Indexing, IndexSelectGradcheck) {
  expect_gradcheck([](const Inputs& in) { return index_select(in[0], 0, IndexArray{4, 1, 1, 0}); }, {input({5}, 2)});
  expect_gradcheck([](const Inputs& in) { return index_select(in[0], 1, IndexArray{3, 3, 0}); }, {input({2, 4}, 2)});
  expect_gradcheck([](const Inputs& in) { return index_select(in[0], -2, IndexArray{1, 0, 1}); },
                   {input({2, 3, 4}, 2)});
  expect_gradcheck([](const Inputs& in) { return index_select(in[0], 3, IndexArray{0, 2, 2, 1, 0}); },
                   {input({2, 2, 2, 3}, 2)});
  expect_gradcheck([](const Inputs& in) { return index_select(transpose(in[0], 0, 1), 0, IndexArray{2, 2, 0}); },
                   {input({4, 3}, 2)});
}

// ---- embedding ------------------------------------------------------------------------------------

TEST(Indexing, EmbeddingLooksUpRows) {
  auto w = input({5, 3}, 3);
  const IndexArray idx{{4, 0, 4}, {1, 1, 2}};
  auto y = embedding(idx, w);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 3}));
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 3; ++j)
      for (std::size_t c = 0; c < 3; ++c) EXPECT_EQ(y.value()(i, j, c), w.value()(idx(i, j), c));
  EXPECT_EQ(embedding(IndexArray(3), w).shape(), Shape{3});  // 0-d indices -> (D)
}

TEST(Indexing, EmbeddingGradientAddsAndSkipsPadding) {
  auto w = from_vector<double>({0, 0, 1, 1, 2, 2, 3, 3}, {4, 2}, true);
  const IndexArray idx{1, 3, 1, 0, 3};
  // padding_idx = -1 is row 3 (counted from the end, as torch)
  auto y = embedding(idx, w, std::int64_t{-1});
  EXPECT_EQ(y.value()(1, 0), 3.0);  // the padding row is still looked up
  y.backward(Tensor<double>(Array<double>{{1, 1}, {5, 5}, {2, 2}, {4, 4}, {7, 7}}));
  EXPECT_EQ(w.grad(), (Array<double>{{4, 4}, {3, 3}, {0, 0}, {0, 0}}));

  w.zero_grad();
  embedding(idx, w).backward(Tensor<double>(Array<double>{{1, 1}, {5, 5}, {2, 2}, {4, 4}, {7, 7}}));
  EXPECT_EQ(w.grad(), (Array<double>{{4, 4}, {3, 3}, {0, 0}, {12, 12}}));
}

TEST(Indexing, EmbeddingGradcheck) {
  expect_gradcheck([](const Inputs& in) { return embedding(IndexArray{2, 0, 2, 4}, in[0]); }, {input({5, 3}, 4)});
  // A padding row gets no gradient by definition (not the derivative): keep it out of the indices
  // here; EmbeddingGradientAddsAndSkipsPadding checks it.
  expect_gradcheck([](const Inputs& in) { return embedding(IndexArray{{1, 1}, {0, 3}}, in[0], std::int64_t{2}); },
                   {input({4, 2}, 4)});
  expect_gradcheck(
      [](const Inputs& in) { return embedding(IndexArray{{{0, 2}}, {{2, 1}}}, transpose(in[0], 0, 1)); },
      {input({4, 3}, 4)});
}

// ---- masked_fill ----------------------------------------------------------------------------------

TEST(Indexing, MaskedFillValuesAndGradient) {
  auto x = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}, true);
  auto y = masked_fill(x, BoolArray{true, false, true}, -9.0);  // broadcast over rows
  EXPECT_EQ(y.value(), (Array<double>{{-9, 2, -9}, {-9, 5, -9}}));
  y.backward(Tensor<double>(Array<double>{{1, 2, 3}, {4, 5, 6}}));
  EXPECT_EQ(x.grad(), (Array<double>{{0, 2, 0}, {0, 5, 0}}));
  // -inf fill, as for attention masks.
  auto z = masked_fill(x, column({false, true}), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(z.value()(0, 1), 2.0);
  EXPECT_TRUE(std::isinf(z.value()(1, 0)));
}

TEST(Indexing, MaskedFillGradcheck) {
  expect_gradcheck([](const Inputs& in) { return masked_fill(in[0], BoolArray{true, false, false, true}, 0.5); },
                   {input({4}, 5)});
  expect_gradcheck([](const Inputs& in) { return masked_fill(in[0], BoolArray{{false, true, true}}, 2.0); },
                   {input({2, 3}, 5)});
  expect_gradcheck([](const Inputs& in) { return masked_fill(in[0], column({true, false}), 0.0); },
                   {input({2, 2, 3}, 5)});
  expect_gradcheck([](const Inputs& in) { return masked_fill(in[0], BoolArray(true), 1.0) + in[0]; },
                   {input({2, 3}, 5)});
  const BoolArray full = mask({1, 2, 2, 2}, {true, false, false, true, false, false, true, true});
  expect_gradcheck([full](const Inputs& in) { return masked_fill(in[0], full, 3.0); }, {input({1, 2, 2, 2}, 5)});
  expect_gradcheck([](const Inputs& in) { return masked_fill(transpose(in[0], 0, 1), BoolArray{false, true}, 0.0); },
                   {input({2, 3}, 5)});
}

// ---- where ----------------------------------------------------------------------------------------

TEST(Indexing, WhereValuesAndGradients) {
  auto a = from_vector<double>({1, 2, 3}, {3}, true);
  auto b = from_vector<double>({10, 20}, {2, 1}, true);
  const BoolArray cond{{true, false, true}, {false, false, true}};
  auto y = xgrad::where(cond, a, b);
  EXPECT_EQ(y.value(), (Array<double>{{1, 10, 3}, {20, 20, 3}}));
  y.backward(Tensor<double>(Array<double>{{1, 2, 3}, {4, 5, 6}}));
  EXPECT_EQ(a.grad(), (Array<double>{1, 0, 9}));
  EXPECT_EQ(b.grad(), xt::reshape_view(Array<double>{2, 9}, {2, 1}));
}

TEST(Indexing, WhereBroadcastsAllThreeAndGradchecks) {
  auto a = input({2, 1, 4}, 6), b = input({3, 1}, 7);
  const BoolArray cond = column({true, false, true});  // (3, 1)
  auto y = xgrad::where(cond, a, b);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 4}));
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 3; ++j)
      for (std::size_t k = 0; k < 4; ++k)
        EXPECT_EQ(y.value()(i, j, k), cond(j, 0) ? a.value()(i, 0, k) : b.value()(j, 0));

  expect_gradcheck([cond](const Inputs& in) { return xgrad::where(cond, in[0], in[1]); }, {a, b});
  expect_gradcheck([](const Inputs& in) { return xgrad::where(BoolArray{true, false, false}, in[0], in[1]); },
                   {input({3}, 8), input({3}, 9)});
  expect_gradcheck([](const Inputs& in) { return xgrad::where(BoolArray{{true, false}, {false, true}}, in[0], in[1]); },
                   {input({2, 2}, 8), input({}, 9)});
  const BoolArray c4 = mask({2, 1, 1, 3}, {true, false, true, false, false, true});
  expect_gradcheck([c4](const Inputs& in) { return xgrad::where(c4, in[0], transpose(in[1], 0, 1)); },
                   {input({2, 2, 3}, 8), input({3, 2}, 9)});
  // The same tensor on both sides: its gradient is dy everywhere.
  auto x = input({2, 3}, 10);
  expect_gradcheck([](const Inputs& in) { return xgrad::where(BoolArray{true, false, true}, in[0], in[0]); }, {x});
  // One side without grad.
  auto constant = input({2, 3}, 11);
  constant.requires_grad_(false);
  expect_gradcheck([](const Inputs& in) { return xgrad::where(BoolArray{false, true, true}, in[0], in[1]); },
                   {x, constant});
}

// ---- float and errors -----------------------------------------------------------------------------

TEST(Indexing, FloatMatchesDouble) {
  auto xd = input({4, 3}, 12);
  Tensor<float> xf(Array<float>(xt::cast<float>(xd.value())));
  EXPECT_LT(max_abs_diff(index_select(xf, 0, IndexArray{3, 1}).value(), index_select(xd, 0, IndexArray{3, 1}).value()),
            1e-6);
  EXPECT_LT(max_abs_diff(embedding(IndexArray{0, 3}, xf).value(), embedding(IndexArray{0, 3}, xd).value()), 1e-6);
  EXPECT_LT(max_abs_diff(masked_fill(xf, BoolArray{true, false, true}, 1.5f).value(),
                         masked_fill(xd, BoolArray{true, false, true}, 1.5).value()),
            1e-6);
}

TEST(Indexing, ErrorMessages) {
  auto x = zeros<double>({3, 4});
  XGRAD_EXPECT_THROW_MSG(index_select(x, 1, IndexArray{0, 4}), "index_select", "index 4", "size 4");
  XGRAD_EXPECT_THROW_MSG(index_select(x, 0, IndexArray{-1}), "index_select", "index -1", "size 3");
  XGRAD_EXPECT_THROW_MSG(index_select(x, 2, IndexArray{0}), "index_select", "out of range");
  XGRAD_EXPECT_THROW_MSG(index_select(x, 0, IndexArray{{0, 1}}), "index_select", "1-D", "(1, 2)");
  XGRAD_EXPECT_THROW_MSG(embedding(IndexArray{0, 3}, x), "embedding", "index 3", "num_embeddings", "size 3");
  XGRAD_EXPECT_THROW_MSG(embedding(IndexArray{-1}, x), "embedding", "index -1");
  XGRAD_EXPECT_THROW_MSG(embedding(IndexArray{0}, x, std::int64_t{3}), "embedding", "padding_idx (3)");
  XGRAD_EXPECT_THROW_MSG(embedding(IndexArray{0}, zeros<double>({3})), "embedding", "2-D", "(3)");
  XGRAD_EXPECT_THROW_MSG(masked_fill(x, BoolArray{true, false}, 0.0), "masked_fill", "(2)", "(3, 4)");
  XGRAD_EXPECT_THROW_MSG(masked_fill(zeros<double>({4}), BoolArray::from_shape({3, 4}), 0.0), "masked_fill",
                         "(3, 4)", "cannot be broadcast to the input's shape (4)");
  XGRAD_EXPECT_THROW_MSG(xgrad::where(BoolArray{true, false}, x, x), "where", "(2)", "(3, 4)");
  XGRAD_EXPECT_THROW_MSG(xgrad::where(BoolArray{true}, x, zeros<double>({2, 4})), "where", "(3, 4)", "(2, 4)");
}
