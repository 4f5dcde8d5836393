// Sizes: a tensor's sizes as LibTorch gives them (std::int64_t, the role of IntArrayRef and of
// Python's torch.Size), what Tensor::sizes() and Tensor::shape() return.
//
//   auto s = x.sizes();                         // std::int64_t each: s[0] * 2 is an int64
//   auto y = xgrad::zeros<float>(x.sizes());    // the factories take it
//   auto z = xgrad::reshape(x, {s[0], -1});     // so do reshape, view, expand, permute
//
// It converts to a Shape (std::size_t sizes, the arrays' own) where code needs one, and compares
// equal to a Shape of the same sizes.
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#include <xgrad/base/check.hpp>

namespace xgrad {

class Sizes : public std::vector<std::int64_t> {
 public:
  using std::vector<std::int64_t>::vector;
  Sizes() = default;
  // The sizes as std::size_t (a Shape); a negative size (only in Sizes made by hand) throws.
  operator Shape() const {  // NOLINT: implicit, so that code holding a Shape takes a tensor's sizes
    Shape shape;
    shape.reserve(size());
    for (const std::int64_t d : *this) {
      XGRAD_CHECK(d >= 0, "Sizes: expected non-negative sizes to convert to a Shape, got ", shape_str(*this));
      shape.push_back(static_cast<std::size_t>(d));
    }
    return shape;
  }
  // A copy as a std::vector<std::int64_t> (IntArrayRef::vec()).
  std::vector<std::int64_t> vec() const { return *this; }
};

// Sizes against Sizes and against a Shape (a std::vector<std::int64_t> compares as a vector).
inline bool operator==(const Sizes& a, const Sizes& b) {
  return static_cast<const std::vector<std::int64_t>&>(a) == static_cast<const std::vector<std::int64_t>&>(b);
}
inline bool operator!=(const Sizes& a, const Sizes& b) { return !(a == b); }
inline bool operator==(const Sizes& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] < 0 || static_cast<std::size_t>(a[i]) != b[i]) return false;
  return true;
}
inline bool operator==(const Shape& a, const Sizes& b) { return b == a; }
inline bool operator!=(const Sizes& a, const Shape& b) { return !(a == b); }
inline bool operator!=(const Shape& a, const Sizes& b) { return !(b == a); }
// "(2, 3, 4)", as a Shape prints (so error messages read the same).
inline std::ostream& operator<<(std::ostream& s, const Sizes& sizes) { return s << shape_str(sizes); }

}  // namespace xgrad
