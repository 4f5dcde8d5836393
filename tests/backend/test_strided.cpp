// The strided index walker (backend/strided.hpp) against a naive reference that decodes every
// flat index into its multi-index and dots it with each stride set: ranks 0 to 4, zero-size dims,
// broadcast (0) strides, permuted strides, one to three stride sets, and for_each_row over every
// range of rows (as a thread chunk takes them). Also numel and row_count.
#include <random>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include <xgrad/ops/broadcast.hpp>
#include <xgrad/backend/strided.hpp>

using xgrad::Shape;
using Strides = std::vector<std::size_t>;
using Visit = std::vector<std::size_t>;  // {i, off_0, ..., off_{K-1}}

namespace {

std::size_t naive_numel(const Shape& shape) {
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  return n;
}

// Every element of `shape` in row-major order: {i, sum_d idx[d] * strides[k][d] for each k}.
std::vector<Visit> reference(const Shape& shape, const std::vector<Strides>& strides) {
  std::vector<Visit> out;
  for (std::size_t i = 0, n = naive_numel(shape); i < n; ++i) {
    Visit v{i};
    for (const Strides& s : strides) {
      std::size_t off = 0;
      for (std::size_t d = shape.size(), rest = i; d-- > 0; rest /= shape[d]) off += (rest % shape[d]) * s[d];
      v.push_back(off);
    }
    out.push_back(v);
  }
  return out;
}

// Random strides in [0, 7], about a third of them 0 (broadcast).
Strides random_strides(std::size_t rank, std::mt19937& rng) {
  Strides s(rank);
  for (std::size_t& x : s) x = rng() % 3 == 0 ? 0 : rng() % 8;
  return s;
}

// Row-major strides of `shape` taken in the order perm (the strides a permuted view reads with).
Strides permuted_strides(const Shape& shape, const std::vector<std::size_t>& perm) {
  Strides contiguous(shape.size(), 1);
  for (std::size_t d = shape.size(); d-- > 1;) contiguous[d - 1] = contiguous[d] * shape[d];
  Strides s(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d) s[d] = contiguous[perm[d]];
  return s;
}

const std::vector<Shape> kShapes = {
    {},           {1},          {5},          {0},          {1, 1},    {2, 3},       {3, 1},
    {1, 4},       {3, 0},       {0, 4},       {2, 1, 3},    {2, 3, 4}, {4, 2, 0},    {1, 3, 1},
    {2, 3, 4, 5}, {3, 1, 2, 1}, {2, 3, 0, 4}, {0, 2, 3, 4}, {1, 1, 1, 1}, {2, 2, 2, 7}};

std::vector<Visit> walk1(const Shape& shape, const Strides& a) {
  std::vector<Visit> got;
  xgrad::detail::for_each_index(shape, a, [&](std::size_t i, std::size_t oa) { got.push_back({i, oa}); });
  return got;
}

std::vector<Visit> walk2(const Shape& shape, const Strides& a, const Strides& b) {
  std::vector<Visit> got;
  xgrad::detail::for_each_index(shape, a, b, [&](std::size_t i, std::size_t oa, std::size_t ob) {
    got.push_back({i, oa, ob});
  });
  return got;
}

std::vector<Visit> walk3(const Shape& shape, const Strides& a, const Strides& b, const Strides& c) {
  std::vector<Visit> got;
  xgrad::detail::for_each_index(shape, a, b, c, [&](std::size_t i, std::size_t oa, std::size_t ob, std::size_t oc) {
    got.push_back({i, oa, ob, oc});
  });
  return got;
}

}  // namespace

TEST(Strided, NumelAndRowCount) {
  using xgrad::detail::numel;
  using xgrad::detail::row_count;
  EXPECT_EQ(numel(Shape{}), 1u);
  EXPECT_EQ(numel(Shape{0}), 0u);
  EXPECT_EQ(numel(Shape{7}), 7u);
  EXPECT_EQ(numel(Shape{2, 3, 4, 5}), 120u);
  EXPECT_EQ(numel(Shape{2, 0, 4}), 0u);
  const Shape s{2, 3, 4, 5};
  EXPECT_EQ(numel(s, 0, 0), 1u);
  EXPECT_EQ(numel(s, 1, 3), 12u);
  EXPECT_EQ(numel(s, 2, 4), 20u);
  EXPECT_EQ(numel(s, 0, 4), 120u);
  EXPECT_EQ(numel(s, 4, 4), 1u);
  EXPECT_EQ(numel(Shape{3}, 2, 1), 1u);  // begin past end: an empty block
  EXPECT_EQ(row_count(Shape{}), 1u);
  EXPECT_EQ(row_count(Shape{5}), 1u);
  EXPECT_EQ(row_count(Shape{0}), 1u);
  EXPECT_EQ(row_count(Shape{2, 3, 4}), 6u);
  EXPECT_EQ(row_count(Shape{2, 0, 4}), 0u);
  EXPECT_EQ(row_count(Shape{2, 3, 0}), 6u);
}

TEST(Strided, ZeroDimIsOneElementZeroSizeIsNone) {
  const Strides none;
  EXPECT_EQ(walk2(Shape{}, none, none), (std::vector<Visit>{{0, 0, 0}}));
  for (const Shape& s : {Shape{0}, Shape{3, 0}, Shape{0, 4}, Shape{2, 0, 3}, Shape{2, 3, 4, 0}}) {
    const Strides ones(s.size(), 1);
    EXPECT_TRUE(walk1(s, ones).empty()) << xgrad::shape_str(s);
  }
}

TEST(Strided, ContiguousStridesGiveTheFlatIndex) {
  for (const Shape& s : kShapes) {
    std::vector<std::size_t> identity(s.size());
    for (std::size_t d = 0; d < s.size(); ++d) identity[d] = d;
    const Strides row_major = permuted_strides(s, identity);
    const std::vector<Visit> got = walk1(s, row_major);
    ASSERT_EQ(got.size(), naive_numel(s)) << xgrad::shape_str(s);
    for (const Visit& v : got) EXPECT_EQ(v[0], v[1]) << xgrad::shape_str(s);
  }
}

TEST(Strided, OneTwoThreeStrideSetsMatchTheReference) {
  std::mt19937 rng(1234);
  for (const Shape& s : kShapes) {
    for (int trial = 0; trial < 4; ++trial) {
      const Strides a = random_strides(s.size(), rng), b = random_strides(s.size(), rng),
                    c = random_strides(s.size(), rng);
      EXPECT_EQ(walk1(s, a), reference(s, {a})) << xgrad::shape_str(s);
      EXPECT_EQ(walk2(s, a, b), reference(s, {a, b})) << xgrad::shape_str(s);
      EXPECT_EQ(walk3(s, a, b, c), reference(s, {a, b, c})) << xgrad::shape_str(s);
    }
  }
}

TEST(Strided, BroadcastAndPermutedOperands) {
  // out (2, 3, 4, 5) from a (3, 1, 5), b (2, 1, 4, 1) and c (5): broadcast strides (0 on
  // broadcast and missing dims); then a transposed read, strides of (5, 4, 3, 2) permuted.
  const Shape out{2, 3, 4, 5};
  const Strides a = xgrad::detail::broadcast_strides(Shape{3, 1, 5}, out);
  const Strides b = xgrad::detail::broadcast_strides(Shape{2, 1, 4, 1}, out);
  const Strides c = xgrad::detail::broadcast_strides(Shape{5}, out);
  EXPECT_EQ(a, (Strides{0, 5, 0, 1}));
  EXPECT_EQ(b, (Strides{4, 0, 1, 0}));
  EXPECT_EQ(c, (Strides{0, 0, 0, 1}));
  EXPECT_EQ(walk3(out, a, b, c), reference(out, {a, b, c}));
  const Strides t = permuted_strides(Shape{5, 4, 3, 2}, {3, 2, 1, 0});
  EXPECT_EQ(t, (Strides{1, 2, 6, 24}));
  EXPECT_EQ(walk2(out, t, a), reference(out, {t, a}));
  // A gather through the transposed strides is the transpose.
  std::vector<int> src(120), dst(120);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<int>(i);
  xgrad::detail::for_each_index(out, t, [&](std::size_t i, std::size_t o) { dst[i] = src[o]; });
  for (std::size_t i0 = 0; i0 < 2; ++i0)
    for (std::size_t i1 = 0; i1 < 3; ++i1)
      for (std::size_t i2 = 0; i2 < 4; ++i2)
        for (std::size_t i3 = 0; i3 < 5; ++i3)
          EXPECT_EQ(dst[((i0 * 3 + i1) * 4 + i2) * 5 + i3], src[((i3 * 4 + i2) * 3 + i1) * 2 + i0]);
}

TEST(Strided, RowsFromAnyFirstRow) {
  // Every range [first, last) of rows, as parallel_for chunks take them: each row r comes once,
  // in order, with the offsets of its first element.
  std::mt19937 rng(99);
  for (const Shape& s : kShapes) {
    const Strides a = random_strides(s.size(), rng), b = random_strides(s.size(), rng);
    const std::size_t rows = xgrad::detail::row_count(s);
    // Reference: the walk of the outer dims (all but the last) with the outer strides.
    const Shape outer_shape = s.empty() ? Shape{} : Shape(s.begin(), s.end() - 1);
    const Strides oa = s.empty() ? Strides{} : Strides(a.begin(), a.end() - 1);
    const Strides ob = s.empty() ? Strides{} : Strides(b.begin(), b.end() - 1);
    const std::vector<Visit> want = reference(outer_shape, {oa, ob});
    ASSERT_EQ(want.size(), rows) << xgrad::shape_str(s);
    for (std::size_t first = 0; first <= rows; ++first) {
      for (std::size_t last = first; last <= rows; ++last) {
        std::vector<Visit> got;
        xgrad::detail::for_each_row(s, first, last, a, b, [&](std::size_t r, std::size_t ra, std::size_t rb) {
          got.push_back({r, ra, rb});
        });
        const std::vector<Visit> expect(want.begin() + first, want.begin() + last);
        EXPECT_EQ(got, expect) << xgrad::shape_str(s) << " rows [" << first << ", " << last << ")";
      }
    }
  }
}

TEST(Strided, CallbackMayBeMutable) {
  // A callback with its own state (a mutable lambda) sees the flat indices 0, 1, 2, ... in order.
  std::vector<std::size_t> offsets;
  xgrad::detail::for_each_index(Shape{3, 4}, Strides{1, 3}, [&offsets, next = std::size_t(0)](
                                                               std::size_t i, std::size_t o) mutable {
    EXPECT_EQ(i, next++);
    offsets.push_back(o);
  });
  EXPECT_EQ(offsets, (std::vector<std::size_t>{0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11}));
}
