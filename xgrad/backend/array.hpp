// Array<T>, the dense row-major storage every tensor holds (an xtensor array), and how the
// library allocates one: empty_array (and full_array, copy_array), which checks the size, names
// the op when memory runs out, and reuses a buffer from the calling thread's array cache
// (allocator.hpp) when one of that size is free.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>
#include <type_traits>

#include <xtensor/xarray.hpp>

#include <xgrad/base/check.hpp>

namespace xgrad {

template <class T>
using Array = xt::xarray<T>;
using BoolArray = xt::xarray<bool>;
using IndexArray = xt::xarray<std::int64_t>;

namespace detail {
// The calling thread's cache of freed Array buffers (allocator.hpp, set_array_cache): a cached
// buffer of exactly numel elements (numel > 0) taken out of the cache, or an empty Array when
// there is none. Use cached_array.
template <class T>
Array<T> take_cached(std::size_t numel);
// Hands a's buffer to the calling thread's cache (or frees it when the cache is off or full) and
// leaves `a` as no_array(); an `a` without elements is left as it is. For the places where the
// engine drops an Array it no longer needs. reset = false (an `a` about to be destroyed): `a` is
// left moved-from, or untouched when the cache did not take it.
template <class T>
void recycle(Array<T>& a, bool reset = true);
// An Array that hands its buffer to the thread's array cache (recycle) when destroyed: for the
// arrays a backward closure saves (dropout's mask, attention's probabilities), which the engine
// frees with the closure rather than through recycle. float and double.
template <class T>
class RecycledArray {
 public:
  RecycledArray() = default;
  explicit RecycledArray(Array<T>&& a) : a_(std::move(a)) {}
  RecycledArray(const RecycledArray&) = default;  // std::function copies closures
  RecycledArray(RecycledArray&&) = default;       // leaves an Array without elements
  RecycledArray& operator=(const RecycledArray&) = delete;
  RecycledArray& operator=(RecycledArray&&) = delete;
  ~RecycledArray() { recycle(a_, /*reset=*/false); }
  const Array<T>& get() const { return a_; }

 private:
  Array<T> a_;
};
// a[0, n) = value and dst[0, n) = src[0, n) in blocks on the pool (parallel_loops.hpp's
// parallel_blocks: inline below 64K elements), for float and double (allocator.cpp).
template <class T>
void fill_blocks(T* a, std::size_t n, T value);
template <class T>
void copy_blocks(const T* src, std::size_t n, T* dst);
// An Array with no elements and no buffer (shape {0}): what a Node holds where it has no value
// or gradient. Unlike Array<T>() (a 0-d array of one element), it allocates nothing.
template <class T>
Array<T> no_array() {
  static const Array<T> empty(typename Array<T>::shape_type{0});  // copied: cheaper than building one
  return empty;
}
// An Array of `shape` (numel elements, uninitialized) whose buffer is a cached one when there is
// one of that size, else a new one. S: Shape or an Array's shape. Only empty_array calls it: the
// one place in the library where an Array's memory is asked for.
template <class T, class S>
Array<T> cached_array(const S& shape, std::size_t numel) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (numel != 0) {
      Array<T> a = take_cached<T>(numel);
      if (a.size() == numel) {
        a.resize(shape);  // the same element count: keeps the buffer
        return a;
      }
    }
  }
  return Array<T>::from_shape(shape);  // index and mask arrays are not cached
}
}  // namespace detail

// The one allocation path for the library's arrays: every tensor value and gradient, index array
// (IndexArray) and mask (BoolArray) is made here, from_shape is called nowhere else.
//
// An Array<T> of the given shape (uninitialized), reusing a buffer from the thread's array cache
// when one of that size is free (float, double). S: a Shape, a braced list ({N, V}) or an Array's
// shape. The shape is checked first (checked_numel): a product of sizes that overflows, or more
// than PTRDIFF_MAX bytes, throws std::invalid_argument naming `who` -- so the bytes asked of the
// allocator never wrap. When the memory cannot be had it throws OutOfMemoryError (a
// std::bad_alloc) naming `who` (the op), the shape and the bytes:
//   "exp: not enough memory for a tensor of shape (1024, 65536): tried to allocate 268435456 bytes (0.25 GiB)"
template <class T, class S = Shape>
Array<T> empty_array(const S& shape, const char* who = "allocating a tensor") {
  const std::size_t numel = checked_numel(shape, sizeof(T), who);
  try {
    return detail::cached_array<T>(shape, numel);
  } catch (const std::bad_alloc&) {
    throw OutOfMemoryError(who, Shape(shape.begin(), shape.end()), numel * sizeof(T));  // numel * sizeof(T) fits
  }
}

// empty_array filled with `value` (zeros for gradients that are scattered or summed into).
template <class T, class S = Shape>
Array<T> full_array(const S& shape, T value, const char* who) {
  Array<T> a = empty_array<T>(shape, who);
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
    detail::fill_blocks(a.data(), a.size(), value);
  else
    std::fill(a.data(), a.data() + a.size(), value);
  return a;
}

// A copy of `a` (same shape and values) through empty_array.
template <class T>
Array<T> copy_array(const Array<T>& a, const char* who) {
  Array<T> c = empty_array<T>(a.shape(), who);
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
    detail::copy_blocks(a.data(), a.size(), c.data());
  else
    std::copy(a.data(), a.data() + a.size(), c.data());
  return c;
}

template <class E>
Shape shape_of(const E& array) {
  return Shape(array.shape().begin(), array.shape().end());
}

extern template Array<float> detail::take_cached<float>(std::size_t);
extern template Array<double> detail::take_cached<double>(std::size_t);
extern template void detail::recycle<float>(Array<float>&, bool);
extern template void detail::recycle<double>(Array<double>&, bool);
extern template void detail::fill_blocks<float>(float*, std::size_t, float);
extern template void detail::fill_blocks<double>(double*, std::size_t, double);
extern template void detail::copy_blocks<float>(const float*, std::size_t, float*);
extern template void detail::copy_blocks<double>(const double*, std::size_t, double*);

}  // namespace xgrad
